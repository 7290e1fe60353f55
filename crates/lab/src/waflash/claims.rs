//! The numbers WAFLASH's text states (and the directions it asserts without a number), each
//! with where it says it and how ours is computed from the result files.
//!
//! Improvements the paper states as "reduced by x%" are compared as ratios of ours over the
//! Baseline's (1 - x/100), so a gain is a ratio below 1. A range "by a-b% for all the
//! workloads" becomes two claims: its best end against our best trace and its worst end
//! against our worst trace.

use super::experiments::{buffer_mibs, PAGE_KIB};
use super::{at8, traces, Key, Sys, Workload};
use crate::core::claim::{reduction_range as range, Eval};
use crate::core::results::Metric;
use crate::core::{Claim, Direction, Mode, Results, Unit};

/// Every request's mean latency (§5.2.1: "We include request latencies of all reads and
/// writes").
const LAT: Metric = Metric::MeanAllLatUs;
/// Additional (update) reads: the read-modify-writes of partial pages, and MV-FTL's reads of
/// older versions (Fig. 12 counts both: "it may trigger additional reads when reading a
/// logical page stored in multiple physical pages").
const EXTRA_READS: Metric = Metric::SsdSum(&["rmw_reads", "mv_extra_reads"]);

fn key(system: Sys, trace: &'static str, page_kib: u32) -> Key {
    Key { page_kib, ..at8(system, trace) }
}

/// (a, b) per trace at a page size, for the traces `keep` accepts.
fn pairs(a: Sys, b: Sys, page_kib: u32, keep: impl Fn(&str) -> bool) -> Vec<(Key, Key)> {
    traces()
        .into_iter()
        .filter(|t| keep(t))
        .map(|t| (key(a, t, page_kib), key(b, t, page_kib)))
        .collect()
}

fn all_traces(_: &str) -> bool {
    true
}

/// Fig. 2: tail latencies with 50% unaligned writes against none.
pub(super) fn fig2() -> Vec<Claim<Key>> {
    let n = |p| Key::new_noise(p);
    let mut v = vec![
        Claim::new(
            "write p90, 50% unaligned / none",
            8.0,
            Unit::Ratio,
            "§2.2: \"with 50% noise write latencies are 8x, 24x longer ... at 90th and 95th percentiles\"",
            Eval::Ratio(n(50), n(0), Metric::WriteP90LatUs),
        )
        .asserts(Direction::Above(1.0)),
        Claim::new(
            "write p95, 50% unaligned / none",
            24.0,
            Unit::Ratio,
            "§2.2 (as above)",
            Eval::Ratio(n(50), n(0), Metric::WriteP95LatUs),
        )
        .asserts(Direction::Above(1.0)),
    ];
    v.push(Claim::direction_only(
        "read p95, 100% unaligned / none",
        "§2.2: \"more unaligned write noises lead to longer tail latencies for both reads and writes\"",
        Eval::Ratio(n(100), n(0), Metric::ReadP95LatUs),
        Direction::Above(1.0),
    ));
    v
}

/// Fig. 8: WAFLASH's mean latency over the Baseline's at each page size.
pub(super) fn fig8() -> Vec<Claim<Key>> {
    let cite = "§5.2.1: \"improved by 8-15.1%, 13.7-31.3%, and 13.4-39.5% over Baseline, for 4 \
                KB, 8KB, and 16KB page sizes\"";
    let not_web = |t: &str| t != "Web";
    let mut v = Vec::new();
    v.extend(range(
        "WAFLASH / Baseline, mean latency, 4 KiB (Web aside)",
        (15.1, 8.0),
        cite,
        pairs(Sys::Waflash, Sys::Baseline, 4, not_web),
        LAT,
    ));
    v.extend(range(
        "WAFLASH / Baseline, mean latency, 8 KiB",
        (31.3, 13.7),
        cite,
        pairs(Sys::Waflash, Sys::Baseline, 8, all_traces),
        LAT,
    ));
    v.extend(range(
        "WAFLASH / Baseline, mean latency, 16 KiB",
        (39.5, 13.4),
        cite,
        pairs(Sys::Waflash, Sys::Baseline, 16, all_traces),
        LAT,
    ));
    v.push(Claim::direction_only(
        "WAFLASH / Baseline on Web at 4 KiB",
        "§5.2.1: \"for Web, WAFLASH is not effective at a page size of 4 KB because all requests \
         are aligned\"",
        Eval::Ratio(key(Sys::Waflash, "Web", 4), key(Sys::Baseline, "Web", 4), LAT),
        Direction::Near { target: 1.0, band: 0.02 },
    ));
    for s in [Sys::PcLru, Sys::MvFtl] {
        v.push(Claim::direction_only(
            format!("{} / Baseline, mean latency, 8 KiB, mean of traces", s.name()),
            "§5.2.1: \"as new WAFLASH features are added ... we obtain considerable performance \
             improvements\"",
            Eval::MeanRatio(pairs(s, Sys::Baseline, PAGE_KIB, all_traces), LAT),
            Direction::Below(1.0),
        ));
        v.push(Claim::direction_only(
            format!("WAFLASH / {}, mean latency, 8 KiB, mean of traces", s.name()),
            "§5.2.1: \"When all features are added together ... the average latencies can be \
             further improved\"",
            Eval::MeanRatio(pairs(Sys::Waflash, s, PAGE_KIB, all_traces), LAT),
            Direction::Below(1.0),
        ));
    }
    let mut keys = Vec::new();
    for (a, b) in pairs(Sys::Waflash, Sys::Baseline, 16, all_traces).into_iter().chain(pairs(
        Sys::Waflash,
        Sys::Baseline,
        4,
        all_traces,
    )) {
        keys.extend([a, b]);
    }
    v.push(Claim::direction_only(
        "mean gain at 16 KiB / mean gain at 4 KiB",
        "§5.2.1: \"as the page size increases, the improvement ratio becomes larger\"",
        Eval::Custom { keys, f: Box::new(|r| Some(mean_gain(r, 16)? / mean_gain(r, 4)?)) },
        Direction::Above(1.0),
    ));
    v
}

/// WAFLASH's mean latency gain over the Baseline (1 - ratio), averaged over the traces.
fn mean_gain(r: &Results<Key>, page_kib: u32) -> Option<f64> {
    let ts = traces();
    let mut sum = 0.0;
    for &t in &ts {
        let w = r.get(&key(Sys::Waflash, t, page_kib), LAT)?;
        let b = r.get(&key(Sys::Baseline, t, page_kib), LAT)?;
        sum += 1.0 - w / b;
    }
    Some(sum / ts.len() as f64)
}

/// Fig. 9: the tail gains at 8 KiB.
pub(super) fn fig9() -> Vec<Claim<Key>> {
    let tail_minus_mean = |t: &'static str| -> Eval<Key> {
        Eval::Custom {
            keys: vec![at8(Sys::Waflash, t), at8(Sys::Baseline, t)],
            f: Box::new(move |r| {
                let (w, b) = (at8(Sys::Waflash, t), at8(Sys::Baseline, t));
                let tail =
                    1.0 - r.get(&w, Metric::P95AllLatUs)? / r.get(&b, Metric::P95AllLatUs)?;
                let mean = 1.0 - r.get(&w, LAT)? / r.get(&b, LAT)?;
                Some(tail - mean)
            }),
        }
    };
    let cite = "§5.2.1: \"MSNFS and DTR, with 3.7% and 10.4% higher improvement respectively in \
                95th percentile analysis, compared to the average latency results\"";
    vec![
        Claim::new(
            "MSNFS: p95 gain - mean gain",
            0.037,
            Unit::Ratio,
            cite,
            tail_minus_mean("MSNFS"),
        )
        .asserts(Direction::Above(0.0)),
        Claim::new("DTR: p95 gain - mean gain", 0.104, Unit::Ratio, cite, tail_minus_mean("DTR"))
            .asserts(Direction::Above(0.0)),
        Claim::direction_only(
            "WAFLASH / Baseline, p95 latency, worst trace",
            "§5.2.1: \"for all workloads, the Baseline approach has longest tail latencies and \
             WAFLASH exhibits the shortest\"",
            Eval::MaxRatio(
                pairs(Sys::Waflash, Sys::Baseline, PAGE_KIB, all_traces),
                Metric::P95AllLatUs,
            ),
            Direction::Below(1.0),
        ),
    ]
}

/// Figs. 10-13: what happens inside the SSD, at 8 KiB.
pub(super) fn figs10_13() -> Vec<Claim<Key>> {
    let mut v = vec![Claim::direction_only(
        "partial pages in the buffer, PC-LRU / Baseline (time-mean share), worst trace",
        "§5.2.2, Fig. 10: \"PC-LRU has more partial pages in the buffer compared to Baseline for \
         all the workloads\"",
        Eval::MinRatio(
            pairs(Sys::PcLru, Sys::Baseline, PAGE_KIB, all_traces),
            Metric::SeriesShare("buffer_partial_units", "buffer_units"),
        ),
        Direction::Above(1.0),
    )];
    v.extend(range(
        "Fig. 11: partial pages written to flash, PC-LRU / Baseline",
        (10.6, 4.5),
        "§5.2.2: \"PC-LRU decreases 4.5-10.6% partial pages written to flash for all the \
         workloads\"",
        pairs(Sys::PcLru, Sys::Baseline, PAGE_KIB, all_traces),
        Metric::Ssd("partial_writebacks"),
    ));
    v.extend(range(
        "Fig. 12: additional reads, MV-FTL / Baseline",
        (92.5, 45.5),
        "§5.2.2: \"MV-FTL decreases 45.5-92.5% additional reads for all the workloads\"",
        pairs(Sys::MvFtl, Sys::Baseline, PAGE_KIB, all_traces),
        EXTRA_READS,
    ));
    // Fig. 13 as a bracket: with MV-FTL's idle merging (the default) and without it.
    for (what, with, without) in [
        (
            "Fig. 13: flash page writes, WAFLASH with compaction / without, no idle merging",
            Sys::WaflashNoIdleMerge,
            Sys::WaflashNoCompactionNoIdleMerge,
        ),
        (
            "Fig. 13: flash page writes, WAFLASH with compaction / without",
            Sys::Waflash,
            Sys::WaflashNoCompaction,
        ),
    ] {
        v.extend(range(
            what,
            (12.0, 7.0),
            "§5.2.2: \"Partial page compaction decreases 7-12% write operations to flash memory \
             for all the workloads\"",
            pairs(with, without, PAGE_KIB, all_traces),
            Metric::FlashPrograms,
        ));
    }
    v
}

/// Fig. 14: PC-LRU against MCA, at 8 KiB.
pub(super) fn fig14() -> Vec<Claim<Key>> {
    let mut v = Vec::new();
    v.extend(range(
        "Fig. 14a: PC-LRU / Baseline, mean latency",
        (25.6, 8.2),
        "§5.3: \"while PC-LRU has 8.2-25.6% performance improvements, MCA only reduces request \
         latencies by 1.2-2.7%\"",
        pairs(Sys::PcLru, Sys::Baseline, PAGE_KIB, all_traces),
        LAT,
    ));
    v.extend(range(
        "Fig. 14a: MCA / Baseline, mean latency",
        (2.7, 1.2),
        "§5.3 (as above)",
        pairs(Sys::Mca, Sys::Baseline, PAGE_KIB, all_traces),
        LAT,
    ));
    let delayed = pairs(Sys::PcLru, Sys::Mca, PAGE_KIB, all_traces);
    let cite = "§5.3: \"PC-LRU delays the eviction of 3.3-11.2X more partial pages in the buffer \
                than MCA\"";
    v.push(
        Claim::new(
            "Fig. 14b: delayed partial pages, PC-LRU / MCA, fewest",
            3.3,
            Unit::Ratio,
            cite,
            Eval::MinRatio(delayed.clone(), Metric::Ssd("buffer_delayed_partial")),
        )
        .asserts(Direction::Above(1.0)),
    );
    v.push(
        Claim::new(
            "Fig. 14b: delayed partial pages, PC-LRU / MCA, most",
            11.2,
            Unit::Ratio,
            cite,
            Eval::MaxRatio(delayed, Metric::Ssd("buffer_delayed_partial")),
        )
        .asserts(Direction::Above(1.0)),
    );
    // Little's law: the mean number of sub-requests on the channels is their total time on the
    // channels over the run's time.
    let (p, m) = (at8(Sys::PcLru, "CFS"), at8(Sys::Mca, "CFS"));
    v.push(Claim::direction_only(
        "Fig. 14c: mean sub-requests on the channels, CFS, PC-LRU / MCA",
        "§5.3: \"it can largely reduce the number of sub-requests on channels (see Figure 14(c))\"",
        Eval::Custom {
            keys: vec![p.clone(), m.clone()],
            f: Box::new(move |r| {
                let queue = |k: &Key| {
                    Some(
                        r.get(k, Metric::Ssd("nand_sub_request_ns"))?
                            / r.get(k, Metric::ElapsedS)?
                            / 1e9,
                    )
                };
                Some(queue(&p)? / queue(&m)?)
            }),
        },
        Direction::Below(1.0),
    ));
    v.push(Claim::direction_only(
        "Fig. 14d: partial pages that became full in the buffer, PC-LRU / MCA, fewest",
        "§5.3: \"although MCA can hardly convert partial pages to full pages in the buffer, PC-LRU \
         can do this with a much higher ratio\"",
        Eval::MinRatio(
            pairs(Sys::PcLru, Sys::Mca, PAGE_KIB, all_traces),
            Metric::Ssd("buffer_partial_to_full"),
        ),
        Direction::Above(1.0),
    ));
    v
}

/// Fig. 15: buffer sizes.
pub(super) fn fig15(mode: Mode) -> Vec<Claim<Key>> {
    let sizes = buffer_mibs(mode);
    let with = |s: Sys, t: &'static str, b: u32| Key { buffer_mib: b, ..at8(s, t) };
    let mut all = Vec::new();
    for &t in &traces() {
        for &b in sizes {
            all.push((with(Sys::PcLru, t, b), with(Sys::Baseline, t, b)));
        }
    }
    let cite = "§5.4: \"PC-LRU exhibits superior I/O performance than Baseline for all buffer \
                sizes and workloads: the average latencies with PC-LRU are reduced by up to 24.7%\"";
    let (small, large) = (sizes[0], sizes[sizes.len() - 1]);
    let mut v = vec![
        Claim::new(
            "PC-LRU / Baseline, mean latency, best trace and buffer",
            1.0 - 0.247,
            Unit::Ratio,
            cite,
            Eval::MinRatio(all.clone(), LAT),
        )
        .asserts(Direction::Below(1.0)),
        Claim::direction_only(
            "PC-LRU / Baseline, mean latency, worst trace and buffer",
            cite,
            Eval::MaxRatio(all, LAT),
            Direction::Below(1.0),
        ),
    ];
    for s in [Sys::Baseline, Sys::PcLru] {
        v.push(Claim::direction_only(
            format!("{}: largest buffer / smallest, mean latency, worst trace", s.name()),
            "§5.4: \"for both Baseline and PC-LRU, the average latencies decrease as the buffer \
             size increases for all workloads\"",
            Eval::MaxRatio(
                traces().into_iter().map(|t| (with(s, t, large), with(s, t, small))).collect(),
                LAT,
            ),
            Direction::Below(1.0),
        ));
    }
    v
}

/// Fig. 16: SLC and TLC chips. The text's "as the chip latency increases, the request latency
/// is reduced by 32.6% to 38.5%" is read as the mean gain over the traces on the SLC chip
/// (32.6%) and on the TLC chip (38.5%).
pub(super) fn fig16() -> Vec<Claim<Key>> {
    let cite = "§5.4: \"as the chip latency increases, the request latency is reduced by 32.6% to \
                38.5%\"";
    let tlc = |s: Sys, t: &'static str| Key { tlc: true, ..at8(s, t) };
    let tlc_pairs: Vec<(Key, Key)> =
        traces().into_iter().map(|t| (tlc(Sys::Waflash, t), tlc(Sys::Baseline, t))).collect();
    vec![
        Claim::new(
            "WAFLASH / Baseline, mean latency, SLC chip, mean of traces",
            1.0 - 0.326,
            Unit::Ratio,
            cite,
            Eval::MeanRatio(pairs(Sys::Waflash, Sys::Baseline, PAGE_KIB, all_traces), LAT),
        )
        .asserts(Direction::Below(1.0))
        .note("the text gives the range; we read its ends as the SLC and the TLC chip"),
        Claim::new(
            "WAFLASH / Baseline, mean latency, TLC chip, mean of traces",
            1.0 - 0.385,
            Unit::Ratio,
            cite,
            Eval::MeanRatio(tlc_pairs, LAT),
        )
        .asserts(Direction::Below(1.0))
        .note("the text gives the range; we read its ends as the SLC and the TLC chip"),
    ]
}

/// Every claim, for the test that checks their directions.
#[cfg(test)]
pub(super) fn all() -> Vec<Claim<Key>> {
    let mut v = fig2();
    v.extend(fig8());
    v.extend(fig9());
    v.extend(figs10_13());
    v.extend(fig14());
    v.extend(fig15(Mode::Full));
    v.extend(fig16());
    v
}

/// Which of our models set the numbers a claim compares, for its why column.
pub(super) fn model_reasons(claim: &Claim<Key>, _: &Results<Key>) -> Vec<String> {
    let keys = claim.keys();
    if keys.iter().any(|k| matches!(k.workload, Workload::Noise(_))) {
        return vec![
            "Fig. 2's workload rebuilt from §2.2's description, at the MSNFS stand-in's arrival \
             rate (mean gap 141 ms): an idle SSD builds no queues"
                .into(),
        ];
    }
    let mut why = vec!["synthetic stand-in traces (docs/traces.md)".to_string()];
    if keys.iter().any(|k| matches!(k.system, Sys::PcLru | Sys::Mca)) {
        why.push(
            "at the stand-ins' arrival rate (hm_0's, mean gap 141 ms) the chips are idle when \
             almost every victim is chosen, so PC-LRU's and MCA's congestion branches rarely run \
             (docs/waflash.md)"
                .into(),
        );
    }
    if keys.iter().any(|k| k.system == Sys::WaflashNoCompaction) {
        why.push(
            "each compacted unit is a version that a later idle merge rewrites as a whole page \
             (docs/waflash.md; the rows without idle merging show compaction alone)"
                .into(),
        );
    }
    why
}
