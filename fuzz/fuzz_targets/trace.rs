//! `cargo fuzz run trace`: see `flashrig_fuzz_targets` (crates/fuzz-targets) for the input
//! and what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let run = flashrig_fuzz_targets::target("trace").expect("a known target");
    run(data);
});
