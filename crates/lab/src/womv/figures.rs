//! The document's sections: each figure's comparison table (the core renders it from the
//! claims) and, under it, our own numbers per workload and the plots.

use std::fmt::Write as _;

use flashrig_frontends::error::Error;
use flashrig_frontends::report::Series;

use super::claims::{
    self, endurance_ratio, ModelRates, ERASES, READ_HEAVY_SHARE, READ_P95, RELOCATED, TIME,
};
use super::experiments::{
    min_pages, CHANGE_SYSTEMS, IODEPTH, MICRO_SYSTEMS, MIN_PERCENTS, SWEEP_TRACES,
};
use super::workloads::{
    self, micro_capacities, micro_footprint, micro_pages_per_block, physical_pages, Prepared,
    CHANGE_PERCENTS, ERASE_UNITS, PAGE_BYTES,
};
use super::{
    tr, Gc, Key, Pattern, Sys, Workload, MLC_SYS, NO_WOM, W14, W14_4K, W14_NR, W14_NR_OPT, W14_OPT,
    W24, W24_4K, W24_NR, W24_NR_OPT, W24_OPT,
};
use crate::core::results::Metric;
use crate::core::{Mode, Results, Section};

/// Every section, in the thesis' order.
pub(super) fn sections<'p>(
    mode: Mode,
    prepared: &'p [Prepared],
    traces: &[&'static str],
    missing: &'p [String],
) -> Vec<Section<'p, Key>> {
    let traces = traces.to_vec();
    let read_heavy: Vec<&'static str> = prepared
        .iter()
        .filter(|p| p.read_share() >= READ_HEAVY_SHARE)
        .filter_map(|p| p.trace_name())
        .collect();
    let write_heavy: Vec<&'static str> = prepared
        .iter()
        .filter(|p| p.read_share() < READ_HEAVY_SHARE)
        .filter_map(|p| p.trace_name())
        .collect();
    let mut v = Vec::new();
    if mode == Mode::Smoke {
        v.push(Section::text(
            "**Smoke run**: the smallest drives and traces, for flashrig's own test. Not a \
             reproduction.\n\n"
                .into(),
        ));
    }
    v.push(Section::new("Setup", Vec::new(), move |out, _, _| {
        setup(out, mode, prepared, missing);
        Ok(())
    }));
    v.push(Section::new(
        "Figs. 3.3-3.4 and §3.7.6-§3.7.12: the analytic models",
        Vec::new(),
        move |out, _, _| {
            analytic(out, mode);
            Ok(())
        },
    ));
    v.push(Section::new(
        "Fig. 3.7a: erases as the data changes between fills",
        claims::fig3_7a(),
        fig3_7a,
    ));
    v.push(Section::new("Fig. 3.7b: access patterns", claims::fig3_7b(), fig3_7b));
    let t = traces.clone();
    v.push(Section::new(
        "Fig. 3.9: erase units erased on the traces",
        claims::fig3_9(&traces),
        move |o, r, p| fig3_9(o, r, p, &t),
    ));
    let t = traces.clone();
    v.push(Section::new(
        "Fig. 3.10: the minimum programmable page count",
        claims::fig3_10(&traces),
        move |o, r, _| fig3_10(o, r, prepared, &t),
    ));
    let t = traces.clone();
    v.push(Section::new(
        "Figs. 3.11-3.12: write time and erases of the baseline, GC_OPT and NR",
        claims::figs3_11_12(&write_heavy),
        move |o, r, p| figs3_11_12(o, r, p, &t),
    ));
    let rh = read_heavy.clone();
    v.push(Section::new(
        "Fig. 3.13: read tail latency on the read-heavy traces",
        claims::fig3_13(&read_heavy),
        move |o, r, p| fig3_13(o, r, p, &rh),
    ));
    let t = traces.clone();
    v.push(Section::new(
        "Fig. 3.14: endurance against an MLC drive of the same cells",
        claims::fig3_14(&traces),
        move |o, r, p| fig3_14(o, r, p, &t),
    ));
    let models: Vec<ModelRates> = [2u8, 1]
        .iter()
        .flat_map(|&k| prepared.iter().filter_map(move |p| claims::model_rates(p, k)))
        .collect();
    let ms = models.clone();
    v.push(Section::new(
        "§3.7.12 (Fig. 3.18): the analytic models against the traces",
        claims::fig3_18(&models),
        move |o, r, _| {
            fig3_18(o, r, &ms);
            Ok(())
        },
    ));
    v
}

fn fig3_18(out: &mut String, r: &Results<Key>, models: &[ModelRates]) {
    let _ = writeln!(
        out,
        "Each trace's erases under GC_OPT beside what §3.7.12's two models predict for its \
         drive: `x` is the coded pages the GC rotates through over the trace's distinct pages, \
         `t` the code's generations (write cycles per erase), `r` the share of the writes that \
         go to the tenth of the pages written most (the thesis does not say how it fits `r` \
         and `f`; `f` = 0.1 here). Predicted erases are the model's rate times the pages the \
         run wrote.\n"
    );
    let _ = writeln!(
        out,
        "| trace | code | x | t | r | erases simulated | greedy uniform | LRW hot/cold |\n\
         |---|---|---:|---:|---:|---:|---:|---:|"
    );
    for m in models {
        let key = tr(if m.k == 2 { W24_OPT } else { W14_OPT }, m.trace);
        let predicted = |greedy| {
            claims::predicted_over_simulated(r, m, greedy)
                .zip(r.get(&key, ERASES))
                .map_or("—".to_string(), |(ratio, e)| format!("{:.0} ({ratio:.2}x)", ratio * e))
        };
        let _ = writeln!(
            out,
            "| {} | WOM-v({},4)-GC_OPT | {:.1} | {} | {:.2} | {} | {} | {} |",
            m.trace,
            m.k,
            m.x,
            m.t,
            m.r,
            r.cell(&key, ERASES),
            predicted(true),
            predicted(false),
        );
    }
    out.push('\n');
}

fn setup(out: &mut String, mode: Mode, prepared: &[Prepared], missing: &[String]) {
    let _ = writeln!(
        out,
        "Every run is one emulated SSD, the `qlc-femu` preset (the thesis' QLC FEMU drive: 4 \
         parallel units, §3.6.4's L/CL/CU/U latencies of 48-96 us reads and 850-5200 us \
         programs, 2 ms erases, LightNVM's 11% over-provisioning, greedy GC; \
         docs/ssd-presets.md gives every source) with {ERASE_UNITS} erase units, as §3.7.1's \
         drive, and the WOM-v firmware of `[device.womv]` (docs/womv.md): NO_WOM is its \
         uncoded mode, and every mode has the same physical drive (§3.7's second setup: \
         WOM-v(k,4) exports k/4 of NO_WOM's logical space). Data is synthetic and random (each \
         bit of a rewritten page changes with probability 1/2; §3.7.2: \"We fill each block with \
         random data\"), except in Fig. 3.7a. Each run replays its trace closed-loop, {IODEPTH} \
         requests in flight (one per parallel unit; the thesis does not state its queue depth), \
         after writing every page the trace reads (so reads find data).\n"
    );
    let _ = writeln!(
        out,
        "**Micro-benchmarks** (§3.7.1): {} pages per block ({} MiB of flash), {} physical \
         capacities of 4 KiB writes per run, over a footprint of {} pages (80% of WOM-v(1,4)'s \
         logical space; {} for High-GC, 95%).\n",
        micro_pages_per_block(mode),
        (physical_pages(micro_pages_per_block(mode)) * PAGE_BYTES) >> 20,
        micro_capacities(mode),
        micro_footprint(mode, false),
        micro_footprint(mode, true),
    );
    let _ = writeln!(
        out,
        "**Traces** (§3.7.2): each reduced with the thesis' segment method to at most {} \
         distinct pages, its pages renamed onto 0, 1, 2, ... (§3.7.2: renaming \"would merit the \
         same drive behavior\"), on a drive whose WOM-v(1,4) logical space holds twice its \
         distinct pages (\"drives that are twice the size of the total number of unique blocks \
         accessed\", read for the mode with the least logical space), and repeated: a run \
         replays it unmeasured until {}x the drive's physical pages have been written (the \
         warm-up: every erase unit through its codes' generations), then measures {}x more. \
         Every WOM-v mode has §3.7.4's wide pages (a coded page of n/k flash pages programs in \
         one page time on one parallel unit: \"We assume the time to program 4K, 8K and 16K \
         pages will be the same\") except the `-4KiB` runs of Figs. 3.11-3.12.\n",
        workloads::capacity_pages(mode),
        workloads::warm_factor(mode),
        workloads::measure_factor(mode),
    );
    let _ = writeln!(
        out,
        "| trace | family | source | requests (original) | distinct pages (original) | \
         distinct pages | requests per pass | passes warm-up + measured | pages written \
         measured | reads | pages per block | flash |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for p in prepared {
        let Some(t) = p.trace_name() else { continue };
        let family = workloads::def(t).map_or("", |d| d.family);
        let n = p.requests.len() as u64;
        let _ = writeln!(
            out,
            "| {t} | {family} | {} | {} | {} | {} | {n} | {} + {} | {} | {:.0}% | {} | {} MiB |",
            p.source,
            p.original.0,
            p.original.1,
            p.unique_pages,
            p.warm_requests / n.max(1),
            p.measured_requests / n.max(1),
            p.pass_page_writes() * (p.measured_requests / n.max(1)),
            p.read_share() * 100.0,
            p.pages_per_block,
            (physical_pages(p.pages_per_block) * PAGE_BYTES) >> 20,
        );
    }
    out.push('\n');
    if !missing.is_empty() {
        let _ = writeln!(
            out,
            "Not found in the traces folder (`--traces`), so not run: {}.\n",
            missing.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "The thesis' own traces (10 write-heavy and 6 read-heavy of Alibaba, RocksDB/YCSB, MSR \
         Cambridge, Microsoft production and FIU, Table 3.3) are not public here. The stand-ins \
         (`-synth`) are `flashrig_trace::synth`'s for the ScalaAFA Table 2 rows of the same \
         families (docs/traces.md cites their statistics); Financial1 and TPC-C are real \
         traces of other sources, kept because they are real. The MLC drive of Fig. 3.14 is \
         NO_WOM on the same erase units with half the pages each (MLC holds 2 bits per cell \
         where QLC holds 4), with FEMU's constant latencies.\n"
    );
}

/// `flashrig validate womv`'s report: the models of Figs. 3.3-3.4 and §3.7.7-§3.7.11 beside
/// coded pages and the WOM-v FTL.
fn analytic(out: &mut String, mode: Mode) {
    if mode == Mode::Smoke {
        out.push_str(
            "Not computed in a smoke run: `flashrig validate womv` writes it (a few seconds).\n\n",
        );
        return;
    }
    let v = flashrig_frontends::womvlab::validate(Vec::new());
    let text = flashrig_frontends::womvlab::render(&v, "flashrig validate womv");
    let _ = writeln!(
        out,
        "`flashrig validate womv`'s report, computed here: §3.4's models of cells reaching \
         V_MAX (Fig. 3.4) and of logical writes against physical space (Fig. 3.3) beside coded \
         pages of random data, the erasure factor and hot/cold models of §3.7.7-§3.7.11 \
         beside the WOM-v FTL (§3.7.12), and §3.7.1's micro-benchmarks on the FTL alone.\n"
    );
    // Its title and first paragraph are the report's own; its sections become subsections.
    for line in text.lines().skip_while(|l| !l.starts_with("## ")) {
        if let Some(rest) = line.strip_prefix("## ") {
            let _ = writeln!(out, "### {rest}");
        } else if let Some(rest) = line.strip_prefix("# ") {
            let _ = writeln!(out, "### {rest}");
        } else {
            let _ = writeln!(out, "{line}");
        }
    }
    out.push('\n');
}

/// A table of `metric` with a row per workload and a column per system.
fn grid(
    out: &mut String,
    r: &Results<Key>,
    rows: &[(String, Workload)],
    systems: &[Sys],
    metric: Metric,
) {
    let names: Vec<String> = systems.iter().map(|s| s.name()).collect();
    let _ = writeln!(out, "| | {} |", names.join(" | "));
    let _ = writeln!(out, "|---|{}", "---:|".repeat(systems.len()));
    for (name, w) in rows {
        let cells: Vec<String> =
            systems.iter().map(|&s| r.cell(&Key::new(s, *w), metric)).collect();
        let _ = writeln!(out, "| {name} | {} |", cells.join(" | "));
    }
    out.push('\n');
}

/// Series of `metric` of each system over `rows`, relative to NO_WOM's when `relative`.
fn series(
    r: &Results<Key>,
    rows: &[(String, Workload)],
    systems: &[Sys],
    metric: Metric,
    relative: bool,
) -> Vec<Series> {
    systems
        .iter()
        .map(|&s| Series {
            name: s.name(),
            values: rows
                .iter()
                .map(|(_, w)| {
                    let v = r.get(&Key::new(s, *w), metric)?;
                    if relative {
                        let base = r.get(&Key::new(NO_WOM, *w), metric)?;
                        (base > 0.0).then(|| v / base)
                    } else {
                        Some(v)
                    }
                })
                .collect(),
        })
        .collect()
}

fn trace_rows(traces: &[&'static str]) -> Vec<(String, Workload)> {
    traces.iter().map(|&t| (t.to_string(), Workload::Trace(t))).collect()
}

fn fig3_7a(
    out: &mut String,
    r: &Results<Key>,
    plots: &mut crate::core::Plots,
) -> Result<(), Error> {
    let rows: Vec<(String, Workload)> =
        CHANGE_PERCENTS.iter().map(|&c| (format!("{c}% of bits"), Workload::Change(c))).collect();
    out.push_str("Erase units erased (the drive filled in order again and again):\n\n");
    grid(out, r, &rows, &CHANGE_SYSTEMS, ERASES);
    out.push_str("Cumulative time:\n\n");
    grid(out, r, &rows, &CHANGE_SYSTEMS, TIME);
    let xs: Vec<f64> = CHANGE_PERCENTS.iter().map(|&c| c as f64).collect();
    plots.lines(
        out,
        "fig3-7a",
        "Fig. 3.7a: erase units erased against the data change rate",
        ("bits changed between fills (%)", "erase units erased"),
        &xs,
        &series(r, &rows, &CHANGE_SYSTEMS, ERASES, false),
    )
}

fn fig3_7b(
    out: &mut String,
    r: &Results<Key>,
    plots: &mut crate::core::Plots,
) -> Result<(), Error> {
    let rows: Vec<(String, Workload)> =
        Pattern::ALL.iter().map(|&p| (p.name().to_string(), Workload::Micro(p))).collect();
    out.push_str("Erase units erased:\n\n");
    grid(out, r, &rows, &MICRO_SYSTEMS, ERASES);
    out.push_str("Pages the GC relocated:\n\n");
    grid(out, r, &rows, &MICRO_SYSTEMS, RELOCATED);
    out.push_str("Cumulative time:\n\n");
    grid(out, r, &rows, &MICRO_SYSTEMS, TIME);
    let cats: Vec<String> = rows.iter().map(|(n, _)| n.clone()).collect();
    plots.bars(
        out,
        "fig3-7b",
        "Fig. 3.7b: erase units erased, relative to NO_WOM",
        "erases / NO_WOM's",
        &cats,
        &series(r, &rows, &MICRO_SYSTEMS[1..], ERASES, true),
    )
}

fn fig3_9(
    out: &mut String,
    r: &Results<Key>,
    plots: &mut crate::core::Plots,
    traces: &[&'static str],
) -> Result<(), Error> {
    let rows = trace_rows(traces);
    let systems = [NO_WOM, W24, W14, W24_OPT, W14_OPT];
    out.push_str("Erase units erased:\n\n");
    grid(out, r, &rows, &systems, ERASES);
    out.push_str("Pages the GC relocated:\n\n");
    grid(out, r, &rows, &systems, RELOCATED);
    let cats: Vec<String> = traces.iter().map(|t| t.to_string()).collect();
    plots.bars(
        out,
        "fig3-9",
        "Fig. 3.9: erase units erased, relative to NO_WOM",
        "erases / NO_WOM's",
        &cats,
        &series(r, &rows, &systems[1..], ERASES, true),
    )
}

fn fig3_10(
    out: &mut String,
    r: &Results<Key>,
    prepared: &[Prepared],
    traces: &[&'static str],
) -> Result<(), Error> {
    let _ = writeln!(
        out,
        "GC_OPT reuses an erase unit in place while it has at least the minimum count of \
         programmable invalid pages, and relocates otherwise; 0% is GC_OPT, 100% the default \
         GC. Erase units erased:\n"
    );
    let mut header = vec!["0% (GC_OPT)".to_string()];
    header.extend(MIN_PERCENTS.iter().map(|p| format!("{p}%")));
    header.push("100% (default)".into());
    let _ = writeln!(out, "| trace | code | {} |", header.join(" | "));
    let _ = writeln!(out, "|---|---|{}", "---:|".repeat(header.len()));
    for &t in traces.iter().filter(|t| SWEEP_TRACES.contains(t)) {
        let ppb =
            prepared.iter().find(|p| p.trace_name() == Some(t)).map_or(0, |p| p.pages_per_block);
        for k in [2u8, 1] {
            let mut gcs = vec![Gc::Opt];
            gcs.extend(MIN_PERCENTS.iter().map(|&p| Gc::MinPercent(p)));
            gcs.push(Gc::Default);
            let cells: Vec<String> = gcs
                .iter()
                .map(|&gc| r.cell(&tr(Sys::Wom { k, gc, nr: false, narrow: false }, t), ERASES))
                .collect();
            let _ = writeln!(out, "| {t} | WOM-v({k},4) | {} |", cells.join(" | "));
        }
        let mins: Vec<String> = MIN_PERCENTS
            .iter()
            .map(|&p| {
                format!("{p}%: {} (2,4), {} (1,4)", min_pages(2, ppb, p), min_pages(1, ppb, p))
            })
            .collect();
        let _ = writeln!(out, "\n{t}: minimum pages per erase unit {}.\n", mins.join("; "));
    }
    Ok(())
}

fn figs3_11_12(
    out: &mut String,
    r: &Results<Key>,
    plots: &mut crate::core::Plots,
    traces: &[&'static str],
) -> Result<(), Error> {
    let rows = trace_rows(traces);
    let systems = [NO_WOM, W24, W14, W24_NR, W14_NR, W24_OPT, W14_OPT, W24_NR_OPT, W14_NR_OPT];
    let _ = writeln!(
        out,
        "The comparisons take the write-intensive traces (under {:.0}% reads), as the \
         thesis' Figs. 3.11-3.12 do; the tables show every trace.\n",
        READ_HEAVY_SHARE * 100.0
    );
    out.push_str(
        "Every WOM-v mode here has §3.7.4's wide pages (\"We assume the time to program 4K, 8K \
         and 16K pages will be the same\"; `wide_pages = true`): a coded page programs in one \
         page time on one parallel unit. The baselines on 4 KiB pages (`-4KiB`: 4/k flash \
         pages on 4/k parallel units per coded page, as the media is) show what the \
         assumption is worth. Cumulative time of each run (its measured window, virtual):\n\n",
    );
    grid(out, r, &rows, &[NO_WOM, W24, W24_4K, W14, W14_4K], TIME);
    out.push_str("And of the optimized modes:\n\n");
    grid(out, r, &rows, &systems[3..], TIME);
    out.push_str("Erase units erased:\n\n");
    grid(out, r, &rows, &systems, ERASES);
    let cats: Vec<String> = traces.iter().map(|t| t.to_string()).collect();
    plots.bars(
        out,
        "fig3-11b",
        "Figs. 3.11b-3.12b: cumulative write time, relative to NO_WOM",
        "time / NO_WOM's",
        &cats,
        &series(r, &rows, &systems[1..], TIME, true),
    )?;
    plots.bars(
        out,
        "fig3-12a",
        "Figs. 3.11a-3.12a: erase units erased, relative to NO_WOM",
        "erases / NO_WOM's",
        &cats,
        &series(r, &rows, &systems[1..], ERASES, true),
    )
}

fn fig3_13(
    out: &mut String,
    r: &Results<Key>,
    plots: &mut crate::core::Plots,
    read_heavy: &[&'static str],
) -> Result<(), Error> {
    if read_heavy.is_empty() {
        out.push_str("No trace in this run has 40% reads or more.\n\n");
        return Ok(());
    }
    let _ = writeln!(
        out,
        "The traces with at least {:.0}% reads. Read latency, 95th percentile:\n",
        READ_HEAVY_SHARE * 100.0
    );
    let rows = trace_rows(read_heavy);
    let systems = [NO_WOM, W24, W14];
    grid(out, r, &rows, &systems, READ_P95);
    out.push_str("Mean read latency:\n\n");
    grid(out, r, &rows, &systems, Metric::MeanReadLatUs);
    let cats: Vec<String> = read_heavy.iter().map(|t| t.to_string()).collect();
    plots.bars(
        out,
        "fig3-13",
        "Fig. 3.13: read p95 latency, relative to NO_WOM",
        "p95 / NO_WOM's",
        &cats,
        &series(r, &rows, &systems[1..], READ_P95, true),
    )
}

fn fig3_14(
    out: &mut String,
    r: &Results<Key>,
    plots: &mut crate::core::Plots,
    traces: &[&'static str],
) -> Result<(), Error> {
    let _ = writeln!(
        out,
        "Endurance is the user data written before the P/E limit (§3.7.5); with the same user \
         data and erase units on both drives, WOM-QLC over MLC is (MLC erases x 3K) / (QLC \
         erases x 10K).\n"
    );
    let _ = writeln!(
        out,
        "| trace | MLC erases | WOM-v(2,4)-GC_OPT erases | WOM-v(2,4)-NR-GC_OPT erases | \
         GC_OPT / MLC | NR-GC_OPT / MLC |\n|---|---:|---:|---:|---:|---:|"
    );
    let ratio = |s, t| endurance_ratio(r, s, t).map_or("—".to_string(), |v| format!("{v:.2}x"));
    for &t in traces {
        let _ = writeln!(
            out,
            "| {t} | {} | {} | {} | {} | {} |",
            r.cell(&tr(MLC_SYS, t), ERASES),
            r.cell(&tr(W24_OPT, t), ERASES),
            r.cell(&tr(W24_NR_OPT, t), ERASES),
            ratio(W24_OPT, t),
            ratio(W24_NR_OPT, t),
        );
    }
    out.push('\n');
    let cats: Vec<String> = traces.iter().map(|t| t.to_string()).collect();
    let s: Vec<Series> = [W24_OPT, W24_NR_OPT]
        .iter()
        .map(|&s| Series {
            name: s.name(),
            values: traces.iter().map(|&t| endurance_ratio(r, s, t)).collect(),
        })
        .collect();
    plots.bars(
        out,
        "fig3-14",
        "Fig. 3.14: endurance of a WOM-v(2,4) QLC drive over an MLC drive",
        "endurance / MLC's",
        &cats,
        &s,
    )?;
    Ok(())
}
