//! Goal: with `workload.ramp_ms` (fio's `ramp_time`) a run's result describes the measured
//! window only: the layers' counters it reports are taken at the ramp's end
//! (`workload.precondition_layers`), so counter differences (write amplification, backend
//! traffic) match the window's own I/O, and the window lasts `runtime_ms`.
//!
//! Method: a simulated run on a RAM device that takes 10 us per request, 2 ms of ramp and
//! 1 ms measured at queue depth 1; the device's `write_bytes` at the end minus its value in the
//! ramp-end snapshot is compared with the bytes the result counts (within the one request that
//! can straddle the boundary), and both with what the device saw in all.

use std::path::Path;

use flashrig_frontends::config::Config;

#[test]
fn the_result_describes_the_window_after_the_ramp() {
    let text = "runtime = \"sim\"\nseed = 3\n[device]\ntype = \"ram\"\ncapacity = \"4MiB\"\n\
                latency_ns = 10000\n[workload]\nrw = \"randwrite\"\nbs = \"4KiB\"\niodepth = 1\n\
                runtime_ms = 1\nramp_ms = 2\nfinal_flush = false\n";
    let cfg = Config::from_toml(text, Path::new("ramp.toml")).unwrap();
    let out = flashrig_frontends::run(&cfg).unwrap();
    let s = &out.summary;
    // 100 writes of 10 us in the measured millisecond.
    assert!((99..=101).contains(&s.writes), "{} writes measured", s.writes);
    assert!((1_000_000..1_020_000).contains(&s.elapsed_ns), "window of {} ns", s.elapsed_ns);
    let at_end = out.result.layers.counters["write_bytes"];
    let at_ramp_end = out.result.workload["precondition_layers"]["counters"]["write_bytes"]
        .as_u64()
        .expect("the ramp's end is snapshotted");
    // The device saw the ramp's 200 writes too.
    assert!((299 * 4096..=302 * 4096).contains(&at_end), "device wrote {at_end} bytes");
    let window = at_end - at_ramp_end;
    assert!(window.abs_diff(s.write_bytes) <= 4096, "{window} vs {}", s.write_bytes);
}
