//! `cargo fuzz run womv_code`: see `flashrig_fuzz_targets` (crates/fuzz-targets) for the input
//! and what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let run = flashrig_fuzz_targets::target("womv_code").expect("a known target");
    run(data);
});
