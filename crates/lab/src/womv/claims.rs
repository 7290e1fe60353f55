//! The numbers chapter 3's evaluation states (and the directions it asserts without a number),
//! each with where the thesis says it and how ours is computed from the result files.
//!
//! Reductions the thesis states as "by x%" are compared as ratios of ours over NO_WOM's
//! (1 - x/100), so a gain is a ratio below 1. A range "by a-b%" across traces becomes two
//! claims: its best end against our best trace and its worst end against our worst trace.

use super::experiments::{MIN_PERCENTS, SWEEP_TRACES};
use super::workloads::{ms_production, CHANGE_PERCENTS};
use super::{
    tr, Gc, Key, Pattern, Sys, Workload, MLC_SYS, NO_WOM, W14, W14_NR_OPT, W14_OPT, W24,
    W24_NR_OPT, W24_OPT,
};
use crate::core::claim::{reduction_range as range, Eval};
use crate::core::results::Metric;
use crate::core::{Claim, Direction, Results, Unit};

/// Erase units erased over the measured window.
pub(super) const ERASES: Metric = Metric::Ssd("womv_erases");
/// Pages the GC relocated.
pub(super) const RELOCATED: Metric = Metric::Ssd("womv_gc_writes");
/// The cumulative time of a run (Figs. 3.11b, 3.12b).
pub(super) const TIME: Metric = Metric::ElapsedS;
/// Reads' 95th percentile latency (Fig. 3.13).
pub(super) const READ_P95: Metric = Metric::ReadP95LatUs;
/// P/E cycle limits of §3.7.5: "from 3K for a QLC drive to 10K for an MLC drive".
pub(super) const QLC_PE_CYCLES: f64 = 3000.0;
pub(super) const MLC_PE_CYCLES: f64 = 10000.0;
/// Traces with at least this share of reads are Fig. 3.13's "read heavy" ones (the thesis'
/// three have read:write ratios of 11:9, 4:3 and 5:6, 45-57% reads).
pub(super) const READ_HEAVY_SHARE: f64 = 0.4;
/// "Only 0-2%": within 2% of NO_WOM (a hair more, so the thesis' own 1.02 is inside despite
/// floating point).
const NEAR_2_PERCENT: f64 = 0.0201;
/// "0.6-7%": within 7% of NO_WOM (likewise).
const NEAR_7_PERCENT: f64 = 0.0701;

fn pairs(a: Sys, b: Sys, traces: &[&'static str]) -> Vec<(Key, Key)> {
    traces.iter().map(|&t| (tr(a, t), tr(b, t))).collect()
}

fn micro(s: Sys, p: Pattern) -> Key {
    Key::new(s, Workload::Micro(p))
}

fn change(s: Sys, percent: u32) -> Key {
    Key::new(s, Workload::Change(percent))
}

/// Fig. 3.7a: erases as the data changes more between fills.
pub(super) fn fig3_7a() -> Vec<Claim<Key>> {
    let (low, high) = (CHANGE_PERCENTS[0], CHANGE_PERCENTS[CHANGE_PERCENTS.len() - 1]);
    let mut v = Vec::new();
    for s in [W24, W14] {
        v.push(Claim::direction_only(
            format!("{} / NO_WOM erases, worst change rate", s.name()),
            "§3.7.1: \"for all types of data buffer contents, WOM-v codes reduce the number of \
             erase units erased in the default NO_WOM configuration\"",
            Eval::MaxRatio(
                CHANGE_PERCENTS.iter().map(|&c| (change(s, c), change(NO_WOM, c))).collect(),
                ERASES,
            ),
            Direction::Below(1.0),
        ));
        // A difference, not a ratio: at a low change rate a code may not erase at all.
        let (hk, lk) = (change(s, high), change(s, low));
        v.push(Claim::direction_only(
            format!("{} erases at {high}% change - at {low}%", s.name()),
            "§3.7.1: \"For workloads that have a higher amount of data change, the maximum \
             voltage level will be reached faster, and so the EC gains will be much lower\"",
            Eval::Custom {
                keys: vec![hk, lk],
                f: Box::new(move |r| Some(r.get(&hk, ERASES)? - r.get(&lk, ERASES)?)),
            },
            Direction::Above(0.0),
        ));
    }
    v.push(Claim::direction_only(
        format!("NO_WOM erases at {high}% change / at {low}%"),
        "§3.7.1: \"the NO_WOM configuration Erase Cycles remain constantly at the higher end \
         irrespective of the data buffer contents\"",
        Eval::Ratio(change(NO_WOM, high), change(NO_WOM, low), ERASES),
        Direction::Near { target: 1.0, band: 0.05 },
    ));
    v
}

/// GC relocations per page written by a micro-benchmark run.
fn relocated_per_write(k: Key) -> Eval<Key> {
    Eval::Custom {
        keys: vec![k],
        f: Box::new(move |r| {
            let writes = r.run(&k)?.total.write_bytes as f64 / super::workloads::PAGE_BYTES as f64;
            Some(r.get(&k, RELOCATED)? / writes.max(1.0))
        }),
    }
}

/// Fig. 3.7b: the access patterns.
pub(super) fn fig3_7b() -> Vec<Claim<Key>> {
    let mut v = Vec::new();
    for p in [Pattern::HotS, Pattern::HotR] {
        v.push(Claim::direction_only(
            format!("NO_WOM pages relocated per page written, {}", p.name()),
            "§3.7.1: \"During garbage collection no pages from the previously written erase \
             unit are garbage collected ... Hot-R also does not create any garbage collection\"",
            relocated_per_write(micro(NO_WOM, p)),
            Direction::Below(0.01),
        ));
    }
    v.push(Claim::direction_only(
        "WOM-v(2,4) / NO_WOM erases, worst pattern",
        "§3.7.1: \"WOM-v(2,4) codes are highly robust to different kinds of workload patterns\"; \
         on Low-GC \"WOM-v(2,4) configuration continues to outperform NO_WOM\"",
        Eval::MaxRatio(
            Pattern::ALL.iter().map(|&p| (micro(W24, p), micro(NO_WOM, p))).collect(),
            ERASES,
        ),
        Direction::Below(1.0),
    ));
    v.push(Claim::direction_only(
        "WOM-v(2,4) erases, Cold / Hot-S",
        "§3.7.1: \"For Cold benchmark, we observe a slight increase in the total number of erase \
         units erased for the WOM-v(2,4) configuration\"",
        Eval::Ratio(micro(W24, Pattern::Cold), micro(W24, Pattern::HotS), ERASES),
        Direction::Above(1.0),
    ));
    v.push(
        Claim::new(
            "WOM-v(1,4) erases, Cold / Hot-S",
            10.0,
            Unit::Ratio,
            "§3.7.1: \"an order of magnitude increase in erase unit erases for the WOM-v(1,4) \
             configuration as compared to Hot-S and Hot-R\"",
            Eval::Ratio(micro(W14, Pattern::Cold), micro(W14, Pattern::HotS), ERASES),
        )
        .asserts(Direction::Above(1.0)),
    );
    v.push(Claim::direction_only(
        "WOM-v(1,4) / NO_WOM erases, Low-GC",
        "§3.7.1: \"WOM-v(1,4) configuration starts performing poorly as compared to NO_WOM\"",
        Eval::Ratio(micro(W14, Pattern::LowGc), micro(NO_WOM, Pattern::LowGc), ERASES),
        Direction::Above(1.0),
    ));
    v.push(
        Claim::new(
            "WOM-v(1,4) / NO_WOM erases, High-GC",
            100.0,
            Unit::Ratio,
            "§3.7.1: \"This causes WOM-v(1,4) to perform two orders of magnitude worse than \
             NO_WOM\"",
            Eval::Ratio(micro(W14, Pattern::HighGc), micro(NO_WOM, Pattern::HighGc), ERASES),
        )
        .asserts(Direction::Above(1.0)),
    );
    for (opt, base) in [(W24_OPT, W24), (W14_OPT, W14)] {
        v.push(Claim::direction_only(
            format!("{} / {} erases, worst of Cold, Low-GC, High-GC", opt.name(), base.name()),
            "§3.7.1: \"GC_OPT mode is able to alleviate the problems incurred and maintain low \
             write amplification overhead\"",
            Eval::MaxRatio(
                [Pattern::Cold, Pattern::LowGc, Pattern::HighGc]
                    .iter()
                    .map(|&p| (micro(opt, p), micro(base, p)))
                    .collect(),
                ERASES,
            ),
            Direction::Below(1.0),
        ));
    }
    v
}

/// Fig. 3.9: erase units erased on the traces.
pub(super) fn fig3_9(traces: &[&'static str]) -> Vec<Claim<Key>> {
    let mut v = Vec::new();
    v.extend(range(
        "WOM-v(2,4) / NO_WOM erases",
        (32.0, 29.0),
        "§3.7.3: \"In all cases, WOM-v(2,4) code reduces the number of erase units erased on the \
         underlying device by 29-32%\"",
        pairs(W24, NO_WOM, traces),
        ERASES,
    ));
    let (mp, others): (Vec<&'static str>, Vec<&'static str>) =
        traces.iter().partition(|t| ms_production(t));
    if !mp.is_empty() {
        v.push(Claim::direction_only(
            "WOM-v(1,4) / NO_WOM erases, Microsoft production stand-ins (smallest)",
            "§3.7.3: \"for Microsoft-Production trace, we observe that WOM-v(1,4) code erases more \
             erase units than NO_WOM configuration\"",
            Eval::MinRatio(pairs(W14, NO_WOM, &mp), ERASES),
            Direction::Above(1.0),
        ));
    }
    let o = others.clone();
    let mut keys = Vec::new();
    for &t in &others {
        keys.extend([tr(W14, t), tr(NO_WOM, t)]);
    }
    v.push(Claim::direction_only(
        "share of the other traces on which WOM-v(1,4) erases fewer than NO_WOM",
        "§3.7.3: \"In most cases, WOM-v(1,4) also reduces the erase units erased\"",
        Eval::Custom {
            keys,
            f: Box::new(move |r| {
                let mut fewer = 0;
                for &t in &o {
                    if r.get(&tr(W14, t), ERASES)? < r.get(&tr(NO_WOM, t), ERASES)? {
                        fewer += 1;
                    }
                }
                (!o.is_empty()).then(|| fewer as f64 / o.len() as f64)
            }),
        },
        Direction::Above(0.5),
    ));
    let cite = "§3.7.3: \"the erase cycles are reduced by 77-83% and to 82-91% of NO_WOM \
                configuration for WOM-v(2,4)-GC-OPT and WOM-v(1,4)-GC-OPT respectively\"";
    v.extend(range(
        "WOM-v(2,4)-GC_OPT / NO_WOM erases",
        (83.0, 77.0),
        cite,
        pairs(W24_OPT, NO_WOM, traces),
        ERASES,
    ));
    let [best, worst] = range(
        "WOM-v(1,4)-GC_OPT / NO_WOM erases",
        (91.0, 82.0),
        cite,
        pairs(W14_OPT, NO_WOM, traces),
        ERASES,
    );
    let reading = "\"reduced by 77-83% and to 82-91% of NO_WOM\" read as reductions by 82-91% \
                   (ratios 0.09-0.18), as the sentence's first half and Fig. 3.9's GC_OPT bars \
                   below WOM-v(1,4)'s suggest; read literally, the ratios would be 0.82-0.91";
    v.push(best.note(reading));
    v.push(worst.note(reading));
    v
}

/// Fig. 3.10: erases against the minimum programmable page count.
pub(super) fn fig3_10(traces: &[&'static str]) -> Vec<Claim<Key>> {
    let sweep: Vec<&'static str> =
        traces.iter().copied().filter(|t| SWEEP_TRACES.contains(t)).collect();
    let mut v = Vec::new();
    let mid = MIN_PERCENTS[MIN_PERCENTS.len() / 2];
    for k in [2u8, 1] {
        let at = |gc| Sys::Wom { k, gc, nr: false, narrow: false };
        let cite = "§3.7.3: \"as we reduce the minimum programmable page count parameter, the \
                    number of erase units erased significantly reduce\"";
        v.push(Claim::direction_only(
            format!("WOM-v({k},4) erases, minimum 0% (GC_OPT) / {mid}%, mean of traces"),
            cite,
            Eval::MeanRatio(pairs(at(Gc::Opt), at(Gc::MinPercent(mid)), &sweep), ERASES),
            Direction::Below(1.0),
        ));
        v.push(Claim::direction_only(
            format!("WOM-v({k},4) erases, minimum {mid}% / 100% (default GC), mean of traces"),
            cite,
            Eval::MeanRatio(pairs(at(Gc::MinPercent(mid)), at(Gc::Default), &sweep), ERASES),
            Direction::Below(1.0),
        ));
    }
    v
}

/// Figs. 3.11-3.12 on the write-intensive traces: cumulative write time against NO_WOM, and
/// the erases of the same runs.
pub(super) fn figs3_11_12(writes: &[&'static str]) -> Vec<Claim<Key>> {
    let overhead = "§3.7.4: \"For WOM-v(2,4) and WOM-v(2,4)-GC-OPT configuration, the \
                    performance overheads are only 0-2% of the NO_WOM configuration\"";
    let mut v = Vec::new();
    if writes.is_empty() {
        return v;
    }
    for s in [W24, W24_OPT] {
        v.push(
            Claim::new(
                format!("{} / NO_WOM time, worst trace", s.name()),
                1.02,
                Unit::Ratio,
                overhead,
                Eval::MaxRatio(pairs(s, NO_WOM, writes), TIME),
            )
            .asserts(Direction::Near { target: 1.0, band: NEAR_2_PERCENT }),
        );
        v.extend(range(
            &format!("{} / NO_WOM erases", s.name()),
            (69.0, 67.0),
            "§3.7.4: \"with EC gains between 67-69% over NO_WOM configuration as shown in \
             Figures 3.11a and 3.12a\"",
            pairs(s, NO_WOM, writes),
            ERASES,
        ));
    }
    v.push(Claim::direction_only(
        "WOM-v(1,4) / NO_WOM time, worst trace",
        "§3.7.4: \"WOM-v(1,4) baseline coding scheme takes significantly high amount of time to \
         run as compared to default mode for high GC workloads\"",
        Eval::MaxRatio(pairs(W14, NO_WOM, writes), TIME),
        Direction::Above(1.0),
    ));
    v.push(
        Claim::new(
            "WOM-v(1,4)-NR-GC_OPT / NO_WOM time, worst trace",
            1.02,
            Unit::Ratio,
            "§3.7.4: \"a combination of GC_OPT and NR modes help reduce the performance to 0-2% of \
             NO_WOM configuration\"",
            Eval::MaxRatio(pairs(W14_NR_OPT, NO_WOM, writes), TIME),
        )
        .asserts(Direction::Near { target: 1.0, band: NEAR_2_PERCENT }),
    );
    let reading = "\"endurance gains from 42%-80% of original configuration\" read as 42-80% \
                   fewer erases than NO_WOM (the original configuration)";
    let [best, worst] = range(
        "WOM-v(1,4)-NR-GC_OPT / NO_WOM erases",
        (80.0, 42.0),
        "§3.7.4: \"while keeping the endurance gains from 42%-80% of original configuration\"",
        pairs(W14_NR_OPT, NO_WOM, writes),
        ERASES,
    );
    v.push(best.note(reading));
    v.push(worst.note(reading));
    v
}

/// Fig. 3.13: read tail latency on the read-heavy traces.
pub(super) fn fig3_13(read_heavy: &[&'static str]) -> Vec<Claim<Key>> {
    let mut v = Vec::new();
    if read_heavy.is_empty() {
        return v;
    }
    for s in [W24, W14] {
        for (end, paper, eval) in [
            ("smallest", 1.006, Eval::MinRatio(pairs(s, NO_WOM, read_heavy), READ_P95)),
            ("largest", 1.07, Eval::MaxRatio(pairs(s, NO_WOM, read_heavy), READ_P95)),
        ] {
            v.push(
                Claim::new(
                    format!("{} / NO_WOM read p95, {end} of the read-heavy traces", s.name()),
                    paper,
                    Unit::Ratio,
                    "§3.7.4: \"the 95'th percentile tail latency is 0.6-7% for NO_WOM and \
                     WOM-v(k,N) baseline encoding schemes, and ... there is no large tail latency \
                     introduced\" (read as: the two differ by 0.6-7%)",
                    eval,
                )
                .asserts(Direction::Near { target: 1.0, band: NEAR_7_PERCENT }),
            );
        }
    }
    v
}

/// §3.7.5's endurance ratio of a WOM-v QLC drive over the MLC drive on one trace: user data
/// written per erase times the P/E limit, the same user data and erase units on both.
pub(super) fn endurance_ratio(r: &Results<Key>, wom: Sys, t: &'static str) -> Option<f64> {
    let wom_erases = r.get(&tr(wom, t), ERASES)?;
    let mlc_erases = r.get(&tr(MLC_SYS, t), ERASES)?;
    (wom_erases > 0.0).then(|| mlc_erases * QLC_PE_CYCLES / (wom_erases * MLC_PE_CYCLES))
}

/// Fig. 3.14: WOM-v(2,4) QLC endurance over MLC.
pub(super) fn fig3_14(traces: &[&'static str]) -> Vec<Claim<Key>> {
    let mut v = Vec::new();
    for (s, paper) in [(W24_OPT, 3.5), (W24_NR_OPT, 2.4)] {
        let keys: Vec<Key> = traces.iter().flat_map(|&t| [tr(s, t), tr(MLC_SYS, t)]).collect();
        let ts = traces.to_vec();
        v.push(
            Claim::new(
                format!("{} QLC / MLC endurance, mean of traces", s.name()),
                paper,
                Unit::Ratio,
                "§3.7.5: \"On average the improvement in endurance is a factor of 3.5x for GC_OPT \
                 mode and 2.4x for GC_OPT-NR Mode\" (3K P/E cycles for QLC, 10K for MLC)",
                Eval::Custom {
                    keys: keys.clone(),
                    // A trace on which the QLC drive erased nothing has no finite ratio: it
                    // is left out (the table under the claims shows it).
                    f: Box::new(move |r| {
                        let all: Vec<f64> =
                            ts.iter().filter_map(|&t| endurance_ratio(r, s, t)).collect();
                        (!all.is_empty()).then(|| all.iter().sum::<f64>() / all.len() as f64)
                    }),
                },
            )
            .asserts(Direction::Above(1.0)),
        );
        let ts = traces.to_vec();
        v.push(Claim::direction_only(
            format!("{} QLC / MLC endurance, worst trace", s.name()),
            "§3.7.5: \"For all workloads, WOM-v(2,4) enabled QLC drives provide better endurance \
             than MLC drives\"",
            Eval::Custom {
                keys,
                f: Box::new(move |r| {
                    ts.iter().filter_map(|&t| endurance_ratio(r, s, t)).reduce(f64::min)
                }),
            },
            Direction::Above(1.0),
        ));
    }
    v
}

/// The hot fraction `f` of §3.7.11's model as §3.7.12 fits it to a trace (the thesis does not
/// say how): the tenth of the distinct pages written most, `r` being their share of the
/// writes (the 90/10 of `flashrig validate womv`'s hot/cold workload is such a pair).
pub(super) const HOT_FRACTION: f64 = 0.1;
/// Erase units the GC does not rotate through: its reserve (`gc_foreground_free_lines`, 2 on
/// `qlc-femu`) and the open one, as `flashrig validate womv` counts them.
const RESERVED_ERASE_UNITS: u32 = 3;

/// §3.7.12's two models for one trace and WOM-v(k,4) with GC_OPT: erase units erased per page
/// the host writes, under greedy GC with uniform invalidations (eq. 3.1, the t = 1 form of
/// eq. 3.5) and under LRW with the trace's hot/cold skew (eq. 3.10), each divided by the
/// code's write cycles per erase (§3.7.10), with the parameters they were given.
#[derive(Clone, Copy, Debug)]
pub(super) struct ModelRates {
    pub trace: &'static str,
    pub k: u8,
    /// Physical coded pages the GC rotates through over the trace's distinct pages.
    pub x: f64,
    /// Write cycles per erase: the code's generations.
    pub t: u32,
    /// The hot share of the writes.
    pub r: f64,
    pub greedy_uniform: f64,
    pub lrw_hot_cold: f64,
}

/// The models' rates for a trace's drive, or `None` when the trace does not fit.
pub(super) fn model_rates(p: &super::Prepared, k: u8) -> Option<ModelRates> {
    use flashrig_ssd::firmware::womv::analytic::{
        erasure_factor, hot_cold_amplification, lrw_amplification,
    };
    let code = flashrig_ssd::firmware::womv::WomCode::builtin(&format!("wom-v({k},4)"))?;
    let t = code.generations().len() as u32;
    // A WOM-v(k,4) erase unit of 4 blocks holds k * pages_per_block coded pages.
    let per_unit = k as f64 * p.pages_per_block as f64;
    let x = (super::workloads::ERASE_UNITS - RESERVED_ERASE_UNITS) as f64 * per_unit
        / p.unique_pages.max(1) as f64;
    if x <= 1.0 {
        return None;
    }
    // The model needs a hot share above the hot fraction and below 1.
    let r = p.hot_share(HOT_FRACTION).clamp(HOT_FRACTION, 0.999);
    Some(ModelRates {
        trace: p.trace_name()?,
        k,
        x,
        t,
        r,
        greedy_uniform: erasure_factor(lrw_amplification(x), t) / per_unit,
        lrw_hot_cold: erasure_factor(hot_cold_amplification(x, r, HOT_FRACTION), t) / per_unit,
    })
}

/// GC_OPT's run of a code on a trace.
fn gc_opt(k: u8, t: &'static str) -> Key {
    tr(if k == 2 { W24_OPT } else { W14_OPT }, t)
}

/// A model's predicted erases over the erases simulated, for one trace's rates.
pub(super) fn predicted_over_simulated(
    r: &Results<Key>,
    m: &ModelRates,
    greedy: bool,
) -> Option<f64> {
    let k = gc_opt(m.k, m.trace);
    let writes = r.run(&k)?.total.write_bytes as f64 / super::workloads::PAGE_BYTES as f64;
    let erases = r.get(&k, ERASES)?;
    let rate = if greedy { m.greedy_uniform } else { m.lrw_hot_cold };
    (erases > 0.0).then(|| rate * writes / erases)
}

fn mean_over(r: &Results<Key>, models: &[ModelRates], greedy: bool) -> Option<f64> {
    let v: Vec<f64> =
        models.iter().filter_map(|m| predicted_over_simulated(r, m, greedy)).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// §3.7.12 (Fig. 3.18): the two models against GC_OPT's erases on the traces.
pub(super) fn fig3_18(models: &[ModelRates]) -> Vec<Claim<Key>> {
    let cite = "§3.7.12: \"We find that both overestimate number of require erases, but that \
                the model based on greedy GC and uniform popularity distribution provides \
                tighter bounds\"";
    let mut v = Vec::new();
    for k in [2u8, 1] {
        let ms: Vec<ModelRates> = models.iter().copied().filter(|m| m.k == k).collect();
        if ms.is_empty() {
            continue;
        }
        let keys: Vec<Key> = ms.iter().map(|m| gc_opt(k, m.trace)).collect();
        for (greedy, name) in [(true, "greedy uniform"), (false, "LRW hot/cold")] {
            let ms = ms.clone();
            v.push(Claim::direction_only(
                format!("{name} model / simulated erases, WOM-v({k},4)-GC_OPT, mean of traces"),
                cite,
                Eval::Custom {
                    keys: keys.clone(),
                    f: Box::new(move |r| mean_over(r, &ms, greedy)),
                },
                Direction::Above(1.0),
            ));
        }
        v.push(Claim::direction_only(
            format!("greedy uniform / LRW hot/cold model, WOM-v({k},4)-GC_OPT, mean of traces"),
            cite,
            Eval::Custom {
                keys,
                f: Box::new(move |r| Some(mean_over(r, &ms, true)? / mean_over(r, &ms, false)?)),
            },
            Direction::Below(1.0),
        ));
    }
    v
}

/// Every claim over `traces` (all of them read-heavy for the test's purpose).
#[cfg(test)]
pub(super) fn all(traces: &[&'static str]) -> Vec<Claim<Key>> {
    let mut v = fig3_7a();
    v.extend(fig3_7b());
    v.extend(fig3_9(traces));
    v.extend(fig3_10(traces));
    v.extend(figs3_11_12(traces));
    v.extend(fig3_13(traces));
    v.extend(fig3_14(traces));
    let models: Vec<ModelRates> = [2u8, 1]
        .iter()
        .flat_map(|&k| {
            traces.iter().map(move |&trace| ModelRates {
                trace,
                k,
                x: 8.0,
                t: 5,
                r: 0.5,
                greedy_uniform: 0.01,
                lrw_hot_cold: 0.02,
            })
        })
        .collect();
    v.extend(fig3_18(&models));
    v
}

/// Why WOM-v(1,4) erases less than NO_WOM under a micro-benchmark where the thesis says more,
/// from the runs' own counts: the page writes each code takes per erase on Hot-S (no GC), and
/// the pages the GC relocated under `p`.
fn break_even(r: &Results<Key>, p: Pattern) -> Option<String> {
    let per_erase = |s: Sys| -> Option<f64> {
        let k = micro(s, Pattern::HotS);
        let writes = r.run(&k)?.total.write_bytes as f64 / super::workloads::PAGE_BYTES as f64;
        Some(writes / r.get(&k, ERASES)?.max(1.0))
    };
    let (w14, nw) = (per_erase(W14)?, per_erase(NO_WOM)?);
    let k = micro(W14, p);
    let writes = r.run(&k)?.total.write_bytes as f64 / super::workloads::PAGE_BYTES as f64;
    let wa = 1.0 + r.get(&k, RELOCATED)? / writes.max(1.0);
    Some(format!(
        "WOM-v(1,4) takes {w14:.0} page writes per erase without GC (its coded pages are \
         rewritten up to GEN_MAX = 15 times), NO_WOM {nw:.0}: (1,4) erases more only when its \
         GC multiplies writes by more than {:.1}x; on {} ours multiplied them by {wa:.2}x",
        w14 / nw,
        p.name()
    ))
}

/// The GC's and the coding's work in a claim's runs, summed per configuration: pages the GC
/// relocated and pages read before a write, per page the host wrote.
fn work(keys: &[&Key], r: &Results<Key>) -> Option<String> {
    let mut systems: Vec<Sys> = keys.iter().map(|k| k.system).collect();
    systems.sort();
    systems.dedup();
    let parts: Vec<String> = systems
        .iter()
        .filter_map(|&s| {
            let (mut relocated, mut read, mut written) = (0.0, 0.0, 0.0);
            for k in keys.iter().filter(|k| k.system == s) {
                relocated += r.get(k, RELOCATED)?;
                read += r.get(k, Metric::Ssd("womv_reads_before_write"))?;
                written += r.run(k)?.total.write_bytes as f64 / super::workloads::PAGE_BYTES as f64;
            }
            let w = written.max(1.0);
            Some(format!("{} {:.3} and {:.2}", s.name(), relocated / w, read / w))
        })
        .collect();
    (!parts.is_empty()).then(|| {
        format!(
            "pages the GC relocated and pages read before a write, per page written, over these \
             runs: {}",
            parts.join("; ")
        )
    })
}

/// Which of our models set the numbers a claim compares, for its why column.
pub(super) fn model_reasons(claim: &Claim<Key>, r: &Results<Key>) -> Vec<String> {
    let keys = claim.keys();
    let mut why = Vec::new();
    why.extend(work(&keys, r));
    if keys.iter().any(|k| matches!(k.system, Sys::Wom { gc: Gc::Opt, .. })) {
        why.push(
            "GC_OPT reuses an erase unit in place while it holds valid pages; once its cells \
             are used up those pages must move, and a minimum programmable page count of 0 \
             lets it reuse units for a page or two (docs/womv.md, \"Reproduction\")"
                .to_string(),
        );
    }
    for p in [Pattern::LowGc, Pattern::HighGc] {
        if keys.iter().any(|k| k.system == W14 && k.workload == Workload::Micro(p)) {
            why.extend(break_even(r, p));
        }
    }
    if keys.iter().any(|k| matches!(k.workload, Workload::Trace(_))) {
        why.push(
            "the thesis' traces are not public here: real slices of other traces and synthetic \
             stand-ins of the same families, reduced, renamed and repeated (docs/womv.md)"
                .to_string(),
        );
    }
    if claim.what.contains("time") || claim.what.contains("read p95") {
        why.push(
            "with wide pages a WOM-v write costs NO_WOM's program; what it adds is the read \
             before the write (default mode) and the GC's relocations, each a read and a \
             program on a QLC parallel unit (850-5200 us) that host commands queue behind"
                .to_string(),
        );
    }
    if keys.iter().any(|k| k.system == MLC_SYS) {
        why.push(
            "the MLC drive is NO_WOM with half the pages per erase unit (the same cells); \
             endurance = user data per erase x P/E limit (3K QLC, 10K MLC, §3.7.5)"
                .to_string(),
        );
    }
    why
}
