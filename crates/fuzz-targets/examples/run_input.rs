//! Runs one fuzz target on input files, on the stable toolchain (no libFuzzer): for reproducing
//! what a fuzzer or the replay test found.
//!
//! `cargo run -p flashrig-fuzz-targets --example run_input -- TARGET FILE...`
//!
//! With `FLASHRIG_FUZZ_KNOWN_PANIC=1` the open bugs of `flashrig_fuzz_targets::known` panic
//! instead of ending their input quietly.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((name, files)) = args.split_first() else {
        eprintln!("usage: run_input TARGET FILE...");
        std::process::exit(2);
    };
    let Some(run) = flashrig_fuzz_targets::target(name) else {
        let names: Vec<&str> = flashrig_fuzz_targets::TARGETS.iter().map(|(n, _)| *n).collect();
        eprintln!("no target {name}; targets: {}", names.join(", "));
        std::process::exit(2);
    };
    for f in files {
        let data = std::fs::read(f).unwrap_or_else(|e| panic!("{f}: {e}"));
        run(&data);
        println!("{f}: ok");
    }
    for (id, n) in flashrig_fuzz_targets::known::hits() {
        if n > 0 {
            println!("known open bug {id}: {n} input(s) ended in it");
        }
    }
}
