//! Goal: `workload.series_counters` records the named stack counters over a run's measured
//! window, as WAFLASH's Fig. 10 needs (the partial page ratio in the write buffer over running
//! time): one sample per `series_ms` of the runtime's clock from time 0, in both the closed-loop
//! and the trace-replay paths, with values a buffer can hold; sampling leaves the run itself
//! unchanged and a simulated run reproducible byte for byte; a counter no layer has is refused
//! with its name and exit status 2.
//!
//! Method: run the real binary on WAFLASH's SSD (`micron-waflash`: 8 KiB pages of 512-byte
//! sectors, a 16 MiB buffer of 2048 pages) with unaligned writes, as
//! configs/examples/waflash-unaligned.toml does but for 300 ms of virtual time, and read the
//! result files' `workload.counter_series`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::{scratch, text};

/// The buffer of `micron-waflash` in pages: 16 MiB of 8 KiB mapping units.
const BUFFER_UNITS: u64 = 16 * 1024 * 1024 / 8192;
const INTERVAL_NS: u64 = 50_000_000;
const RUNTIME_MS: u64 = 300;

fn flashrig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flashrig")).args(args).output().expect("run flashrig")
}

/// configs/examples/waflash-unaligned.toml, shortened, with a 50 ms series, `series` as the
/// counters to sample (or none) and `extra` appended.
fn config(dir: &Path, name: &str, series: Option<&str>, extra: &str) -> PathBuf {
    let mut body = format!(
        "seed = 1\nruntime = \"sim\"\n\
         [device]\ntype = \"ssd\"\npreset = \"micron-waflash\"\npayload = \"none\"\n\
         [device.geometry]\nblocks_per_plane = 256\n\
         [device.firmware]\nbuffer_policy = \"pc-lru\"\n\
         [workload]\nrw = \"randrw\"\nrwmixread = 30\nbs = \"8KiB\"\nblockalign = \"1KiB\"\n\
         random_distribution = \"zipf:1.1\"\nrange = \"2GiB\"\niodepth = 32\njobs = 1\n\
         runtime_ms = {RUNTIME_MS}\nstamp = false\nseries_ms = {}\n",
        INTERVAL_NS / 1_000_000
    );
    if let Some(s) = series {
        body.push_str(&format!("series_counters = {s}\n"));
    }
    body.push_str(extra);
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write config");
    p
}

/// Runs `cfg` and returns its result file's text.
fn run(dir: &Path, cfg: &Path) -> String {
    let json = dir.join(format!("{}.json", cfg.file_stem().unwrap().to_string_lossy()));
    let out =
        flashrig(&["run", cfg.to_str().unwrap(), "--json", json.to_str().unwrap(), "--quiet"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    std::fs::read_to_string(&json).expect("result file")
}

fn parse(result: &str) -> Value {
    serde_json::from_str(result).expect("result is JSON")
}

fn numbers(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_u64().unwrap_or_else(|| panic!("not a count: {x}")))
        .collect()
}

/// Checks a series of the two buffer counters: samples at 0 and every interval after it, each
/// within the buffer, partial pages among the buffered ones, some of them partial. Returns the
/// number of samples.
fn check_buffer_series(series: &Value, interval_ns: u64) -> usize {
    assert_eq!(series["interval_ns"].as_u64(), Some(interval_ns), "{series}");
    assert_eq!(series["truncated"].as_bool(), Some(false), "{series}");
    let time = numbers(&series["time_ns"]);
    let partial = numbers(&series["counters"]["buffer_partial_units"]);
    let units = numbers(&series["counters"]["buffer_units"]);
    assert_eq!(series["counters"].as_object().unwrap().len(), 2, "{series}");
    // One sample per interval, from the start of the window, on the virtual clock's exact
    // boundaries (so the times also increase).
    let expected: Vec<u64> = (0..time.len() as u64).map(|k| k * interval_ns).collect();
    assert_eq!(time, expected);
    assert_eq!(partial.len(), time.len());
    assert_eq!(units.len(), time.len());
    for (k, (&p, &u)) in partial.iter().zip(&units).enumerate() {
        assert!(
            u <= BUFFER_UNITS,
            "sample {k}: {u} buffered units in a {BUFFER_UNITS}-unit buffer"
        );
        assert!(p <= u, "sample {k}: {p} partial units of {u} buffered");
    }
    // 1 KiB offsets make 7 of 8 writes straddle two pages: partial pages reach the buffer.
    assert!(partial.iter().any(|&p| p > 0), "no partial page in any sample: {partial:?}");
    // The window starts on an empty buffer (no preconditioning).
    assert_eq!((partial[0], units[0]), (0, 0));
    time.len()
}

#[test]
fn closed_loop_runs_sample_the_buffer_once_per_interval_reproducibly() {
    let dir = scratch();
    let names = "[\"buffer_partial_units\", \"buffer_units\"]";
    let cfg = config(dir.path(), "sampled", Some(names), "");
    let first = run(dir.path(), &cfg);
    let v = parse(&first);
    let series = &v["workload"]["counter_series"];
    let n = check_buffer_series(series, INTERVAL_NS);
    // The jobs issue until 300 ms and their last requests complete after it, so the sampler
    // saw every boundary up to 300 ms, and none after the jobs' end.
    assert!(n as u64 > RUNTIME_MS * 1_000_000 / INTERVAL_NS, "{n} samples");
    let elapsed = v["workload"]["total"]["elapsed_ns"].as_u64().unwrap();
    assert!((n as u64 - 1) * INTERVAL_NS <= elapsed, "{n} samples in {elapsed} ns");
    assert_eq!(v["config"]["workload"]["series_counters"][1].as_str(), Some("buffer_units"));

    // The same configuration and seed give the same file, byte for byte.
    let again = run(dir.path(), &config(dir.path(), "sampled-again", Some(names), ""));
    assert_eq!(parse(&again)["workload"]["counter_series"], *series);
    assert_eq!(first, again, "a simulated run with a sampler is byte-for-byte reproducible");

    // Sampling changes nothing about the run: without it, the same requests complete at the
    // same times, the run ends at the same virtual instant and the stack's counters agree.
    let plain = parse(&run(dir.path(), &config(dir.path(), "plain", None, "")));
    assert!(plain["workload"].get("counter_series").is_none());
    assert!(plain["config"]["workload"].get("series_counters").is_none());
    for key in ["total", "jobs", "runtime_elapsed_ns"] {
        assert_eq!(plain["workload"][key], v["workload"][key], "workload.{key}");
    }
    assert_eq!(plain["layers"], v["layers"]);
}

#[test]
fn trace_replays_sample_the_buffer_too() {
    // 400 requests of the synthetic proxy0 trace (all writes, 512-byte sizes and offsets), open
    // loop at the trace's 1,000 requests per second: about 0.4 s of virtual time.
    let dir = scratch();
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/samples/proxy0-synth.csv");
    let cfg = config(
        dir.path(),
        "replay",
        Some("[\"buffer_partial_units\", \"buffer_units\"]"),
        &format!("[replay]\ntrace = \"{}\"\nmax_requests = 400\n", trace.display()),
    );
    let v = parse(&run(dir.path(), &cfg));
    assert_eq!(v["workload"]["replay"]["requests"].as_u64(), Some(400));
    let n = check_buffer_series(&v["workload"]["counter_series"], INTERVAL_NS);
    let elapsed = v["workload"]["total"]["elapsed_ns"].as_u64().unwrap();
    assert!(n >= 4, "{n} samples in {elapsed} ns");
    assert!((n as u64 - 1) * INTERVAL_NS <= elapsed, "{n} samples in {elapsed} ns");
}

#[test]
fn an_unknown_counter_is_refused_with_its_name() {
    let dir = scratch();
    let cfg = config(dir.path(), "typo", Some("[\"buffer_units\", \"bufer_partial_units\"]"), "");
    let out = flashrig(&["run", cfg.to_str().unwrap(), "--quiet"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("workload.series_counters"), "{stderr}");
    assert!(stderr.contains("\"bufer_partial_units\""), "{stderr}");
    // The message lists what the stack has, so the right name is at hand.
    assert!(stderr.contains("buffer_partial_units"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // A name listed twice is a configuration error too.
    let cfg = config(dir.path(), "twice", Some("[\"buffer_units\", \"buffer_units\"]"), "");
    let out = flashrig(&["run", cfg.to_str().unwrap(), "--quiet"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("workload.series_counters[1]"), "{stderr}");
}
