//! Goal: the synthetic stand-ins for ScalaAFA's Table 2 traces (`flashrig_trace::synth`) keep
//! each row's read/write mix and mean sizes and reproduce the locality the row cites — the
//! footprint (distinct start addresses per request), the hot/cold skew (LRU miss ratio with a
//! cache of 10% of the distinct addresses) and the sequential read and write fractions — and
//! are deterministic for a seed; and that a huge request count (bad input) allocates nothing
//! up front.
//!
//! Method: generate every row at 1/32 of its Table 2 request count over 1/32 of the
//! reproduction's 16 GiB span (the quick reproduction's scale; the reuse parameters were
//! fitted at 1/8, so this also checks that the skew holds when the run is shorter), measure
//! with the crate's own statistics (`TraceStats`, `LocalityReport`, `lru_miss_ratio_of`), and
//! compare with the row's targets within tolerances set by sampling noise. The statistics
//! themselves are checked first on hand-made sequences with hand-computed answers. The huge
//! count is u64::MAX, of which a few requests are drawn.

use flashrig_trace::stats::{hot_share, lru_miss_ratio, lru_miss_ratio_of};
use flashrig_trace::synth::{self, fit_reuse, synth_with, Locality, Synth, LRU_CACHE_FRACTION};
use flashrig_trace::write::write_msr;
use flashrig_trace::{LocalityReport, Request, TraceStats, TABLE2};

/// The reproduction's span at full scale (`SYNTH_SPAN_FULL_SCALE` in crates/lab).
const SPAN_FULL_SCALE_BYTES: u64 = 16 << 30;
/// The quick reproduction replays 1/32 of Table 2's requests over 1/32 of the span.
const DIVISOR: u64 = 32;
const SEED: u64 = 1;

fn req(write: bool, offset_bytes: u64, size_bytes: u64) -> Request {
    Request { time_ns: 0, write, offset_bytes, size_bytes, device: 0 }
}

fn quick(row: &synth::Table2Row, locality: Locality) -> Vec<Request> {
    synth_with(row, row.requests() / DIVISOR, SPAN_FULL_SCALE_BYTES / DIVISOR, SEED, locality)
}

#[test]
fn lru_miss_ratio_matches_a_hand_computed_sequence() {
    // Capacity 2: a b a c b a -> a miss, b miss, a hit, c miss (evicts b), b miss (evicts a),
    // a miss (evicts c): 5 misses out of 6.
    let keys = [1u64, 2, 1, 3, 2, 1];
    assert_eq!(lru_miss_ratio(keys, 2), 5.0 / 6.0);
    // Capacity 3 holds all three keys: only the first touches miss.
    assert_eq!(lru_miss_ratio(keys, 3), 3.0 / 6.0);
    assert_eq!(lru_miss_ratio(keys, 0), 1.0);
    assert_eq!(lru_miss_ratio(std::iter::empty::<u64>(), 4), 0.0);
}

#[test]
fn locality_report_matches_a_hand_computed_trace() {
    let t = [
        req(true, 0, 8192),      // W pages 0,1
        req(true, 8192, 4096),   // W page 2, continues the previous write
        req(false, 0, 4096),     // R page 0, address written before
        req(false, 4096, 4096),  // R page 1, continues the previous read; address never written
        req(true, 20480, 512),   // W page 5
        req(false, 65536, 4096), // R page 16, neither
    ];
    let l = LocalityReport::of(&t);
    assert_eq!((l.requests, l.reads, l.writes), (6, 3, 3));
    // Start addresses 0, 8192, 4096, 20480, 65536.
    assert_eq!(l.distinct_addresses, 5);
    assert_eq!((l.sequential_reads, l.sequential_writes), (1, 1));
    assert_eq!(l.reads_to_written_addresses, 1);
    // Pages 0, 1, 2, 5 written; 16 read too.
    assert_eq!((l.pages_written, l.pages_touched), (4, 5));
    // Reads touch pages 0, 1 (both written before) and 16 (not).
    assert_eq!((l.pages_read, l.pages_read_after_write), (3, 2));
    assert_eq!(l.written_footprint_ratio(), 4.0 * 4096.0 / (8192.0 + 4096.0 + 512.0));
    // Address 0 gets 2 of the 6 requests, every other address 1: the hottest 20% (1 of 5).
    assert_eq!(hot_share(&t, 0.2), 2.0 / 6.0);
}

#[test]
fn table2_rows_are_the_papers_and_consistent() {
    // Requests x mean size should give the data volume within the rounding of the printed
    // sizes (one decimal), which catches a mistyped value; KiB and GiB as the paper uses them.
    for r in TABLE2.iter() {
        let written_gib = r.writes_kops * 1000.0 * r.avg_write_kb / (1u64 << 20) as f64;
        let read_gib = r.reads_kops * 1000.0 * r.avg_read_kb / (1u64 << 20) as f64;
        assert!((written_gib / r.written_gb - 1.0).abs() < 0.03, "{}: {written_gib}", r.name);
        assert!((read_gib / r.read_gb - 1.0).abs() < 0.03, "{}: {read_gib}", r.name);
        let l = &r.locality;
        for v in [
            l.distinct_address_ratio,
            l.lru_miss_ratio,
            l.sequential_read_fraction,
            l.sequential_write_fraction,
            l.reuse_scan_share,
        ] {
            assert!((0.0..=1.0).contains(&v), "{}: {v}", r.name);
        }
        assert!(l.reuse_exponent >= 1.0, "{}", r.name);
        let p = &l.provenance;
        for s in [p.distinct_address_ratio, p.lru_miss_ratio, p.sequential] {
            assert!(!s.is_empty(), "{}", r.name);
        }
    }
    assert_eq!(synth::row("proxy0").unwrap().requests(), 12_518_900);
    assert_eq!(synth::row("dap").unwrap().name, "DAP");
    assert!(synth::row("nonesuch").is_none());
}

#[test]
fn every_row_keeps_mix_sizes_and_its_locality() {
    for row in TABLE2.iter() {
        let t = quick(row, Locality::Published);
        let n = t.len() as f64;
        assert_eq!(t.len() as u64, row.requests() / DIVISOR);
        let s = TraceStats::of(&t);
        let l = LocalityReport::of(&t);
        let target = &row.locality;

        // Mix: a binomial share over >= 33,928 requests has a standard error below 0.003.
        let write_share = s.writes as f64 / n;
        assert!((write_share - row.write_share()).abs() < 0.01, "{}: {write_share}", row.name);
        // Sizes: exponential, so the mean's relative standard error is about 1/sqrt(count),
        // under 1% for the smallest class here (proxy0's 11,984 reads); 3% is three of those.
        for (got, want) in
            [(s.avg_write_kib(), row.avg_write_kb), (s.avg_read_kib(), row.avg_read_kb)]
        {
            assert!((got / want - 1.0).abs() < 0.03, "{}: {got} KiB vs {want}", row.name);
        }

        // Footprint: the generator schedules fresh addresses to the target, so only the last
        // request's rounding separates them.
        let distinct = l.distinct_address_ratio();
        assert!(
            (distinct / target.distinct_address_ratio - 1.0).abs() < 0.02,
            "{}: distinct {distinct} vs {}",
            row.name,
            target.distinct_address_ratio
        );
        // Skew: fitted at 1/8 scale; at 1/32 the miss ratio stays within 3% of its distance
        // to the nearer of 0 and 1, plus 0.005 (seeds 1 to 5 all land within 0.003).
        let miss = lru_miss_ratio_of(&t, LRU_CACHE_FRACTION);
        let want = target.lru_miss_ratio;
        let tolerance = 0.03 * want.min(1.0 - want) + 0.005;
        assert!((miss - want).abs() < tolerance, "{}: LRU miss {miss} vs {want}", row.name);
        // Runs: a Bernoulli share per request kind, standard error below 0.004 here.
        for (got, want) in [
            (l.sequential_read_fraction(), target.sequential_read_fraction),
            (l.sequential_write_fraction(), target.sequential_write_fraction),
        ] {
            assert!((got - want).abs() < 0.02, "{}: sequential {got} vs {want}", row.name);
        }
    }
}

#[test]
fn locality_none_is_the_first_version_and_lacks_locality() {
    // Same draws for time, kind and size as the published stand-in, offsets uniform over the
    // span: almost every request a new address, almost every LRU lookup a miss, no runs.
    for row in TABLE2.iter() {
        let none = quick(row, Locality::None);
        let published = quick(row, Locality::Published);
        for (a, b) in none.iter().zip(&published) {
            assert_eq!((a.time_ns, a.write, a.size_bytes), (b.time_ns, b.write, b.size_bytes));
        }
        let l = LocalityReport::of(&none);
        assert!(l.distinct_address_ratio() > 0.75, "{}", row.name);
        assert!(lru_miss_ratio_of(&none, LRU_CACHE_FRACTION) > 0.95, "{}", row.name);
        assert!(l.sequential_read_fraction() < 0.01 && l.sequential_write_fraction() < 0.01);
        assert!(
            l.distinct_address_ratio() > LocalityReport::of(&published).distinct_address_ratio(),
            "{}",
            row.name
        );
    }
}

#[test]
fn same_seed_same_bytes_other_seed_other_trace() {
    let row = synth::row("prn").unwrap();
    let span = SPAN_FULL_SCALE_BYTES / DIVISOR;
    let n = 100_000;
    let msr = |t: &[Request]| {
        let mut out = Vec::new();
        write_msr(&mut out, "prn", t).unwrap();
        out
    };
    let a = synth::synth(row, n, span, 7);
    let b = synth::synth(row, n, span, 7);
    assert_eq!(msr(&a), msr(&b));
    // The streaming iterator yields the same requests as the collected form.
    let streamed: Vec<Request> = Synth::new(row, n, span, 7, Locality::Published).collect();
    assert_eq!(a, streamed);
    let c = synth::synth(row, n, span, 8);
    assert_ne!(msr(&a), msr(&c));
    // Not merely shifted: most requests differ in offset.
    let same = a.iter().zip(&c).filter(|(x, y)| x.offset_bytes == y.offset_bytes).count();
    assert!(same < n as usize / 10, "{same} offsets coincide");
}

#[test]
fn offsets_stay_within_the_span() {
    for row in TABLE2.iter() {
        let span = 64 << 20;
        for r in synth::synth(row, 20_000, span, 3) {
            assert!(r.offset_bytes < span && r.offset_bytes % 512 == 0, "{}: {r:?}", row.name);
            assert!(r.size_bytes >= 512 && r.size_bytes % 512 == 0);
        }
    }
}

/// Re-derives the reuse parameters in `TABLE2` (how they were obtained) at the reproduction's
/// full run, 1/8 of Table 2's requests over 2 GiB with seed 1, and prints what the table's
/// parameters and the first version produce there (the numbers quoted in `docs/traces.md`).
/// Slow, so ignored; run with
/// `cargo test --release -p flashrig-trace --test synth -- --ignored --nocapture`.
#[test]
#[ignore]
fn refit_reuse_parameters() {
    let span = SPAN_FULL_SCALE_BYTES / 8;
    for row in TABLE2.iter() {
        let n = row.requests() / 8;
        let (exponent, scan) = fit_reuse(row, n, span, SEED);
        println!(
            "{:8} fitted exponent {exponent:.3} scan share {scan:.3} (table {} {}); working set \
             {:.2} GiB vs span {:.2} GiB",
            row.name,
            row.locality.reuse_exponent,
            row.locality.reuse_scan_share,
            row.working_set_bytes(n) as f64 / (1u64 << 30) as f64,
            span as f64 / (1u64 << 30) as f64,
        );
        for locality in [Locality::Published, Locality::None] {
            let t = synth_with(row, n, span, SEED, locality);
            let l = LocalityReport::of(&t);
            println!(
                "    {locality:?}: LRU miss {:.4} | distinct {:.4} | footprint {:.4}, written {:.4} \
                 | hottest 1% {:.3}, 10% {:.3} | sequential R {:.3} W {:.3} | reads at written \
                 address {:.3}, read pages written {:.3}",
                lru_miss_ratio_of(&t, LRU_CACHE_FRACTION),
                l.distinct_address_ratio(),
                l.footprint_ratio(),
                l.written_footprint_ratio(),
                hot_share(&t, 0.01),
                hot_share(&t, 0.1),
                l.sequential_read_fraction(),
                l.sequential_write_fraction(),
                l.read_after_write_fraction(),
                l.read_pages_written_fraction(),
            );
        }
    }
}

/// Issue 17: `--requests 18446744073709551615` panicked with a capacity overflow, the count
/// turned into an allocation before the first request was drawn.
#[test]
fn a_huge_request_count_allocates_nothing_up_front() {
    let row = synth::row("prn").unwrap();
    for locality in [Locality::Published, Locality::None] {
        let s = Synth::new(row, u64::MAX, 1 << 30, 1, locality);
        assert!(s.size_hint().0 <= 1 << 22, "{:?}", s.size_hint());
        assert_eq!(s.take(1000).count(), 1000);
    }
}
