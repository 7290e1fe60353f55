//! Stats on a hand-made trace with hand-computed answers, reduction keeping the thesis'
//! update-frequency r² within bound on a synthetic skewed trace, writer round trips, and a
//! smoke run of the parse benchmark's generator (the speed is `flashrig bench trace`).

use std::io::Cursor;

use flashrig_trace::reduce::{self, R_SQUARED_BOUND};
use flashrig_trace::write::{write_disksim, write_msr};
use flashrig_trace::{bench_parse_msr, Format, Options, Reader, Request, TraceStats};

fn req(time_ns: u64, write: bool, offset_bytes: u64, size_bytes: u64, device: u32) -> Request {
    Request { time_ns, write, offset_bytes, size_bytes, device }
}

#[test]
fn stats_hand_made_trace() {
    let t = [
        // W [0,4K): aligned 4K; end 4096 not a multiple of 8K/16K -> unaligned 8K,16K. page 0
        req(0, true, 0, 4096, 0),
        // W [4K,8K): aligned 4K; start 4096 unaligned for 8K,16K. page 1
        req(1, true, 4096, 4096, 0),
        // W [0,16K): aligned for all. pages 0,1,2,3
        req(2, true, 0, 16384, 0),
        // W [512,1536): unaligned for all. page 0
        req(3, true, 512, 1024, 0),
        req(4, false, 0, 8192, 0),
        req(5, false, 8192, 2048, 0),
    ];
    let s = TraceStats::of(&t);
    assert_eq!((s.writes, s.reads), (4, 2));
    // (4096 + 4096 + 16384 + 1024) B = 25600 B over 4 writes = 6400 B = 6.25 KiB
    assert_eq!(s.avg_write_kib(), 6.25);
    // (8192 + 2048) B = 10240 B over 2 reads = 5 KiB
    assert_eq!(s.avg_read_kib(), 5.0);
    assert_eq!(s.data_written_gib(), 25600.0 / (1u64 << 30) as f64);
    assert_eq!(s.data_read_gib(), 10240.0 / (1u64 << 30) as f64);
    // 4K: only #4 -> 1/4; 8K and 16K: #1, #2, #4 -> 3/4
    assert_eq!(s.unaligned_write_ratio(), [0.25, 0.75, 0.75]);
    // page 0 written by #1,#3,#4 (3x); page 1 by #2,#3 (2x); pages 2,3 by #3 (1x each)
    // -> 2 pages once, 1 page twice, 1 page three times.
    assert_eq!(s.update_freq_histogram(), vec![0, 2, 1, 1]);
    assert_eq!(s.distinct_pages_written(), 4);
    let empty = TraceStats::new().summary();
    assert_eq!((empty.avg_write_kib, empty.unaligned_write_ratio), (0.0, [0.0; 3]));
}

/// A skewed synthetic trace: 200k single-page writes over 20k pages, page = N * u^4 so a few
/// pages are very hot (update frequencies from 1 to thousands), plus some reads.
fn skewed() -> Vec<Request> {
    let mut x: u64 = 42;
    let mut v = Vec::new();
    for i in 0..200_000u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let u = (x >> 11) as f64 / (1u64 << 53) as f64;
        let page = (20_000.0 * u.powi(4)) as u64;
        v.push(req(i * 1000, !(x >> 3).is_multiple_of(10), page * 4096, 4096, 0));
    }
    v
}

#[test]
fn reductions_keep_update_frequency_distribution() {
    let t = skewed();
    let orig = reduce::update_freq(&t);
    // Segment: a window holding half the distinct pages.
    let distinct = TraceStats::of(&t).distinct_pages_written() as u64;
    let seg = reduce::segment_by_capacity(&t, 0, distinct / 2);
    assert!(!seg.is_empty() && seg.len() < t.len());
    let r_seg = reduce::r_squared(&orig, &reduce::update_freq(&seg));
    // Subset: keep every 4th page of the frequency-sorted list.
    let sub = reduce::subset(&t, 4);
    let red = reduce::update_freq(&sub);
    let r_sub = reduce::r_squared(&orig, &red);
    let kept = TraceStats::of(&sub).distinct_pages_written() as f64;
    assert!((kept / distinct as f64 - 0.25).abs() < 0.05, "subset kept {kept} of {distinct}");
    println!("r2 segment {r_seg:.6}, subset {r_sub:.6}, bound {R_SQUARED_BOUND}");
    assert!(r_seg <= R_SQUARED_BOUND && r_sub <= R_SQUARED_BOUND);
    assert!(reduce::accepted(&orig, &red));
    assert!(reduce::coefficient_of_determination(&orig, &red) > 0.9);
    // Requests keep their order (property 2 of the thesis).
    assert!(sub.windows(2).all(|w| w[0].time_ns < w[1].time_ns));
    // Identical distributions give 0; a time window is a plain filter.
    assert_eq!(reduce::r_squared(&orig, &orig), 0.0);
    assert_eq!(reduce::segment_by_time(&t, 1000, 3000).len(), 2);
    // A biased distribution is rejected: original half once-written, half twice-written pages
    // (p = [0.5, 0.5]); reduced all once-written (p' = [1, 0]) -> e = [-0.5, 0.5], mean e² = 0.25.
    assert_eq!(reduce::r_squared(&[0, 10, 10], &[0, 7]), 0.25);
    assert!(!reduce::accepted(&[0, 10, 10], &[0, 7]));
    // subset_for_capacity picks the factor from the footprint.
    let s2 = reduce::subset_for_capacity(&t, distinct / 4);
    let kept2 = TraceStats::of(&s2).distinct_pages_written() as u64;
    assert!(
        kept2 <= distinct / 4 + distinct / 20,
        "kept {kept2} pages for capacity {}",
        distinct / 4
    );
}

fn sample_requests() -> Vec<Request> {
    let mut x: u64 = 7;
    (0..500)
        .map(|i| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            req(
                i * 100 * 997,
                x & 1 == 0,
                ((x >> 8) % 1_000_000) * 512,
                ((x >> 40) % 256 + 1) * 512,
                (x % 5) as u32,
            )
        })
        .collect()
}

fn reparse(bytes: Vec<u8>, f: Format) -> Vec<Request> {
    Reader::from_bufread("rt", Box::new(Cursor::new(bytes)), f, Options::default())
        .map(|r| r.unwrap())
        .collect()
}

#[test]
fn msr_round_trip() {
    let t = sample_requests();
    let mut out = Vec::new();
    write_msr(&mut out, "flashrig", &t).unwrap();
    assert_eq!(reparse(out, Format::Msr), t);
}

#[test]
fn disksim_round_trip() {
    let t = sample_requests();
    let mut out = Vec::new();
    write_disksim(&mut out, &t).unwrap();
    assert_eq!(reparse(out, Format::DiskSim), t);
    // Unaligned bytes widen to whole sectors.
    let mut out = Vec::new();
    write_disksim(&mut out, &[req(5, true, 600, 100, 1)]).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), "5 1 1 1 0\n");
}

// The parse-speed measurement itself is `flashrig bench trace` (docs/benchmarks.md): timing
// belongs in benchmarks, not tests.
#[test]
fn bench_small_smoke() {
    assert_eq!(bench_parse_msr(1000).0, 1000);
}
