//! Parse-speed benchmark for the MSR reader (the hot path when replaying multi-GB traces):
//! generates an in-memory MSR CSV and times streaming it through [`Reader`](crate::Reader).

use std::io::Cursor;
use std::time::Instant;

use crate::formats::{Format, Options, Reader};

/// Generate `lines` MSR CSV lines in memory, parse them all, and return (records parsed,
/// seconds spent parsing). Generation is excluded from the timing.
pub fn bench_parse_msr(lines: usize) -> (usize, f64) {
    let mut data = Vec::with_capacity(lines * 64);
    // A cheap LCG so the benchmark has varied digits without a rand dependency.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut ts: u64 = 128_166_385_295_514_663;
    for _ in 0..lines {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ts += (x >> 50) + 1;
        let op = if x & 1 == 0 { "Write" } else { "Read" };
        let off = ((x >> 12) % (1 << 26)) * 512;
        let size = (((x >> 40) % 64) + 1) * 512;
        use std::io::Write;
        let _ = writeln!(data, "{ts},hm,{},{op},{off},{size},{}", x % 4, (x >> 20) % 10000);
    }
    let start = Instant::now();
    let reader = Reader::from_bufread(
        "bench.csv",
        Box::new(Cursor::new(data)),
        Format::Msr,
        Options::default(),
    );
    let mut n = 0usize;
    let mut sink = 0u64;
    for r in reader {
        let r = r.expect("generated MSR line must parse");
        sink = sink.wrapping_add(r.offset_bytes ^ r.size_bytes);
        n += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    std::hint::black_box(sink);
    (n, secs)
}
