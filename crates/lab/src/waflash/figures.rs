//! The document's sections: each figure's comparison table (the core renders it from the
//! claims) and, under it, our own numbers per trace and the plots.

use std::fmt::Write as _;

use flashrig_frontends::error::Error;
use flashrig_frontends::report::{Run, Series};
use flashrig_trace::stats::{TraceStats, UNALIGNED_PAGE_SIZES};

use super::experiments::{self, buffer_mibs, NOISE_PERCENTS, PAGE_KIBS};
use super::{at8, claims, requests, traces, Key, Sys, Workload};
use crate::core::plots::{named, Plots};
use crate::core::results::{fmt_metric, share_series, Metric};
use crate::core::{Mode, Results, Section};

const LAT: Metric = Metric::MeanAllLatUs;

/// Every section, in the paper's order.
pub(super) fn sections(mode: Mode) -> Vec<Section<'static, Key>> {
    let mut v = Vec::new();
    if mode == Mode::Smoke {
        v.push(Section::text(
            "**Smoke run**: 300-request traces, for flashrig's own test. Not a reproduction.\n\n"
                .into(),
        ));
    }
    v.push(Section::new("Setup", Vec::new(), move |out, r, _| {
        setup(out, r, mode);
        Ok(())
    }));
    v.push(Section::new("Fig. 1: unaligned writes in the traces", Vec::new(), move |out, _, _| {
        fig1(out, mode);
        Ok(())
    }));
    v.push(Section::new(
        "Fig. 2: unaligned-write noise on the Baseline, 8 KiB pages",
        claims::fig2(),
        fig2,
    ));
    v.push(Section::new("Fig. 8: mean latency against the Baseline", claims::fig8(), fig8));
    v.push(Section::new("Fig. 9: latency distributions, 8 KiB pages", claims::fig9(), fig9));
    v.push(Section::new(
        "Figs. 10-13: partial pages, additional reads and flash writes, 8 KiB pages",
        claims::figs10_13(),
        figs10_13,
    ));
    v.push(Section::new("Fig. 14: PC-LRU against MCA, 8 KiB pages", claims::fig14(), fig14));
    v.push(Section::new(
        "Fig. 15: buffer size, 8 KiB pages",
        claims::fig15(mode),
        move |o, r, p| fig15(o, r, p, mode),
    ));
    v.push(Section::new("Fig. 16: SLC and TLC chips, 8 KiB pages", claims::fig16(), fig16));
    v.push(Section::new("Fig. 17: Filebench", Vec::new(), |out, _, _| {
        out.push_str(
            "Not reproduced: the paper runs Filebench in a QEMU/KVM guest over VSSIM (§5.5), and \
             KVM guests hang on this machine (qemu runs only under TCG). A kernel file system \
             reaches flashrig's SSD through FUSE on a loop device (README); a Filebench study \
             over it is future work.\n\n",
        );
        Ok(())
    }));
    v
}

fn setup(out: &mut String, r: &Results<Key>, mode: Mode) {
    let _ = writeln!(
        out,
        "Every run is one emulated SSD replaying a trace open-loop at its timestamps (SSDSim \
         replays the paper's traces so). The SSD is the `micron-waflash` preset family \
         (waflash.txt Table 1: 4 channels x 4 chips x 2 dies x 2 planes, 256 pages per block, \
         Table 1's SLC latencies 20/200/1500 us and its 80 MB/s bus; §5.4's TLC latencies \
         75/1200/4500 us in `micron-waflash-tlc`; docs/ssd-presets.md gives every source), \
         512-byte host sectors and a mapping unit equal to the page, with {} blocks per plane \
         instead of 4096 (a sixteenth of the capacity; the parallelism and the latencies are \
         Table 1's). The write buffer is {} MiB (the smallest of §5.4's sweep; the paper \
         states no default) except in Fig. 15. Each trace replays {} requests (§2.2's 120K \
         in the full run) over a {} GiB span.\n",
        experiments::BLOCKS_PER_PLANE,
        experiments::BUFFER_MIB,
        experiments::requests(mode),
        experiments::SPAN_BYTES >> 30
    );
    let _ = writeln!(
        out,
        "| system | write buffer | FTL | paper |\n|---|---|---|---|\n\
         | Baseline | LRU, read-modify-write of partial pages | page-level | §5.2.1 |\n\
         | PC-LRU | PC-LRU | page-level | §3.1 |\n\
         | MV-FTL | LRU | MV-FTL with compaction (LRU destages no batches, so it rarely has two small partial pages of a region to pack) | §3.2, §3.3 |\n\
         | WAFLASH | PC-LRU (with batch destaging) | MV-FTL with compaction | §3 |\n\
         | MCA | MCA | page-level | §5.3, its [52] |\n\
         | WAFLASH-nocompact | PC-LRU | MV-FTL without compaction | Fig. 13's comparison |\n\
         | WAFLASH-noidlemerge, WAFLASH-nocompact-noidlemerge | PC-LRU | MV-FTL with and without compaction, merging only at GC and read-modify-writes (`mv_idle_merge = false`) | Fig. 13 again: the paper does not say how eagerly it merges in idle time, and each idle merge rewrites a compacted unit |\n\n\
         docs/waflash.md describes each policy and what flashrig chose where the paper is \
         silent.\n"
    );
    // The runs write a small share of the SSD, as the paper's traces did of its 256 GB: show
    // that GC did not run, so no difference below comes from it.
    let (mut runs, mut gc_runs) = (0, 0);
    for (k, _) in r.plan.keys.iter() {
        if let Some(run) = r.run(k) {
            runs += 1;
            if crate::core::results::ssd_counter(&run.result.layers, "gc_copies") > 0 {
                gc_runs += 1;
            }
        }
    }
    let _ = writeln!(
        out,
        "GC copied pages in {gc_runs} of the {runs} runs (the traces write far less than the \
         SSD holds, so garbage collection plays no part in these comparisons; MV-FTL merges \
         versions when the device is idle).\n"
    );
}

/// Fig. 1: the stand-ins' unaligned-write ratios, measured on the generated traces, beside
/// the paper's stated ones (inputs of the stand-ins, so not compared as results).
fn fig1(out: &mut String, mode: Mode) {
    let _ = writeln!(
        out,
        "The stand-ins are built to these ratios (docs/traces.md gives each one's source), so \
         they are inputs, not results; the table shows that the generated traces meet them. \
         The paper's text states MSNFS (24.5% at 4 KB, 99.1% at 16 KB), Web (0% at 4 KB, 100% \
         at 8 and 16 KB), and averages (58.3% at 4 KB without Web, 97.2% at 16 KB).\n"
    );
    let _ = writeln!(out, "| trace | 4 KiB | 8 KiB | 16 KiB |\n|---|---|---|---|");
    for t in traces() {
        let reqs = requests(&Workload::Trace(t), mode);
        let st = TraceStats::of(reqs.iter());
        let ratios = st.unaligned_write_ratio();
        let _ = writeln!(
            out,
            "| {t} | {} |",
            ratios.iter().map(|x| format!("{:.1}%", x * 100.0)).collect::<Vec<_>>().join(" | ")
        );
    }
    let _ = writeln!(
        out,
        "\nPage sizes: {:?} bytes; a write is unaligned when its start or its end is not on a \
         page boundary.\n",
        UNALIGNED_PAGE_SIZES
    );
}

/// A run with one of its latency CDFs (reads or writes) as the one a CDF plot draws.
fn with_cdf(run: &Run, name: &str, writes: bool) -> Run {
    let mut r = named(run, name);
    r.total.latency_cdf = if writes {
        run.total.write_latency_cdf.clone()
    } else {
        run.total.read_latency_cdf.clone()
    };
    r
}

fn fig2(out: &mut String, r: &Results<Key>, plots: &mut Plots) -> Result<(), Error> {
    let _ = writeln!(
        out,
        "§2.2's experiment: 8 KiB requests, 30% reads (all aligned), writes of which a share \
         start 1 KiB past a page boundary, on the Baseline.\n"
    );
    let _ = writeln!(
        out,
        "| unaligned writes | write mean | write p90 | write p95 | read mean | read p90 | read p95 \
         |\n|---|---|---|---|---|---|---|"
    );
    for p in NOISE_PERCENTS {
        let k = Key::new_noise(p);
        let _ = writeln!(
            out,
            "| {p}% | {} | {} | {} | {} | {} | {} |",
            r.cell(&k, Metric::MeanLatUs),
            r.cell(&k, Metric::WriteP90LatUs),
            r.cell(&k, Metric::WriteP95LatUs),
            read_mean(r, &k),
            r.cell(&k, Metric::ReadP90LatUs),
            r.cell(&k, Metric::ReadP95LatUs),
        );
    }
    out.push('\n');
    for (writes, what) in [(false, "reads"), (true, "writes")] {
        let runs: Vec<Run> = NOISE_PERCENTS
            .iter()
            .filter_map(|&p| {
                r.run(&Key::new_noise(p)).map(|run| with_cdf(run, &format!("{p}% noise"), writes))
            })
            .collect();
        plots.cdf(
            out,
            &format!("fig02-{what}"),
            &format!("Fig. 2: latency CDF of {what}"),
            runs,
        )?;
    }
    Ok(())
}

fn read_mean(r: &Results<Key>, k: &Key) -> String {
    r.run(k)
        .filter(|run| run.total.read_latency.count > 0)
        .map_or("—".into(), |run| fmt_metric(run.total.read_latency.mean_ns / 1e3, LAT))
}

/// `a / b` of a metric as a cell.
fn ratio_cell(r: &Results<Key>, a: &Key, b: &Key, m: Metric) -> String {
    match (r.get(a, m), r.get(b, m)) {
        (Some(x), Some(y)) if y > 0.0 => format!("{:.3}", x / y),
        _ => "—".into(),
    }
}

fn fig8(out: &mut String, r: &Results<Key>, plots: &mut Plots) -> Result<(), Error> {
    let _ = writeln!(
        out,
        "Ours: each system's mean latency (all requests) over the Baseline's, per trace and page \
         size (below 1 is a gain), and the Baseline's own.\n"
    );
    let _ = writeln!(
        out,
        "| page | trace | Baseline | PC-LRU | MV-FTL | WAFLASH |\n|---|---|---|---|---|---|"
    );
    // The charts go after the table, which must stay one block.
    let mut charts = String::new();
    for page in PAGE_KIBS {
        let mut series: Vec<Series> = [Sys::PcLru, Sys::MvFtl, Sys::Waflash]
            .iter()
            .map(|s| Series { name: s.name().into(), values: Vec::new() })
            .collect();
        for t in traces() {
            let k = |s| Key { page_kib: page, ..at8(s, t) };
            let base = k(Sys::Baseline);
            let _ = writeln!(
                out,
                "| {page} KiB | {t} | {} | {} | {} | {} |",
                r.cell(&base, LAT),
                ratio_cell(r, &k(Sys::PcLru), &base, LAT),
                ratio_cell(r, &k(Sys::MvFtl), &base, LAT),
                ratio_cell(r, &k(Sys::Waflash), &base, LAT),
            );
            for (i, s) in [Sys::PcLru, Sys::MvFtl, Sys::Waflash].into_iter().enumerate() {
                let gain = match (r.get(&k(s), LAT), r.get(&base, LAT)) {
                    (Some(x), Some(y)) if y > 0.0 => Some((1.0 - x / y) * 100.0),
                    _ => None,
                };
                series[i].values.push(gain);
            }
        }
        let cats: Vec<String> = traces().iter().map(|t| t.to_string()).collect();
        plots.bars(
            &mut charts,
            &format!("fig08-{page}k"),
            &format!("Fig. 8: mean latency improvement over the Baseline, {page} KiB pages"),
            "improvement (%)",
            &cats,
            &series,
        )?;
    }
    out.push('\n');
    out.push_str(&charts);
    Ok(())
}

fn fig9(out: &mut String, r: &Results<Key>, plots: &mut Plots) -> Result<(), Error> {
    let _ = writeln!(
        out,
        "| trace | Baseline p95 | WAFLASH p95 | WAFLASH / Baseline, p95 | WAFLASH / Baseline, mean \
         |\n|---|---|---|---|---|"
    );
    for t in traces() {
        let (w, b) = (at8(Sys::Waflash, t), at8(Sys::Baseline, t));
        let _ = writeln!(
            out,
            "| {t} | {} | {} | {} | {} |",
            r.cell(&b, Metric::P95AllLatUs),
            r.cell(&w, Metric::P95AllLatUs),
            ratio_cell(r, &w, &b, Metric::P95AllLatUs),
            ratio_cell(r, &w, &b, LAT),
        );
    }
    out.push('\n');
    for t in traces() {
        let runs: Vec<Run> = [Sys::Baseline, Sys::PcLru, Sys::MvFtl, Sys::Waflash]
            .iter()
            .filter_map(|&s| r.run(&at8(s, t)).map(|run| named(run, s.name())))
            .collect();
        plots.cdf(out, &format!("fig09-{t}"), &format!("Fig. 9: latency CDF, {t}"), runs)?;
    }
    Ok(())
}

fn figs10_13(out: &mut String, r: &Results<Key>, plots: &mut Plots) -> Result<(), Error> {
    let share = Metric::SeriesShare("buffer_partial_units", "buffer_units");
    let reads = Metric::SsdSum(&["rmw_reads", "mv_extra_reads"]);
    let _ = writeln!(
        out,
        "Ours, per trace: the time-mean share of partial pages in the buffer (Fig. 10), partial \
         pages written to flash (Fig. 11), additional reads (Fig. 12: update reads plus MV-FTL's \
         reads of older versions) and flash page writes (Fig. 13), with WAFLASH's compacted \
         pages.\n"
    );
    let _ = writeln!(
        out,
        "| trace | partial share B / PC-LRU | partial writes B / PC-LRU | additional reads B / \
         MV-FTL | flash writes WAFLASH / without compaction | the same without idle merging | WAFLASH's compacted pages |\n|---|---|---|---|---|---|---|"
    );
    for t in traces() {
        let k = |s| at8(s, t);
        let _ = writeln!(
            out,
            "| {t} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} | {} |",
            r.cell(&k(Sys::Baseline), share),
            r.cell(&k(Sys::PcLru), share),
            r.cell(&k(Sys::Baseline), Metric::Ssd("partial_writebacks")),
            r.cell(&k(Sys::PcLru), Metric::Ssd("partial_writebacks")),
            r.cell(&k(Sys::Baseline), reads),
            r.cell(&k(Sys::MvFtl), reads),
            r.cell(&k(Sys::Waflash), Metric::FlashPrograms),
            r.cell(&k(Sys::WaflashNoCompaction), Metric::FlashPrograms),
            r.cell(&k(Sys::WaflashNoIdleMerge), Metric::FlashPrograms),
            r.cell(&k(Sys::WaflashNoCompactionNoIdleMerge), Metric::FlashPrograms),
            r.cell(&k(Sys::Waflash), Metric::Ssd("mv_compacted_pages")),
        );
    }
    out.push('\n');
    // Fig. 10: the share over time, one plot per trace.
    for t in traces() {
        let mut xs: Vec<f64> = Vec::new();
        let mut series = Vec::new();
        for s in [Sys::Baseline, Sys::PcLru] {
            let Some(run) = r.run(&at8(s, t)) else { continue };
            let Some((times, shares)) = share_series(run, "buffer_partial_units", "buffer_units")
            else {
                continue;
            };
            let shares: Vec<Option<f64>> =
                shares.into_iter().map(|x| x.map(|v| v * 100.0)).collect();
            if times.len() > xs.len() {
                xs = times;
            }
            series.push(Series { name: s.name().into(), values: shares });
        }
        if series.is_empty() {
            continue;
        }
        for s in &mut series {
            s.values.resize(xs.len(), None);
        }
        plots.lines(
            out,
            &format!("fig10-{t}"),
            &format!("Fig. 10: partial pages in the buffer, {t}"),
            ("time (s)", "partial pages (%)"),
            &xs,
            &series,
        )?;
    }
    Ok(())
}

fn fig14(out: &mut String, r: &Results<Key>, _: &mut Plots) -> Result<(), Error> {
    let _ = writeln!(
        out,
        "| trace | mean latency / Baseline: PC-LRU, MCA | delayed partial pages: PC-LRU, MCA | \
         partial pages filled in the buffer: PC-LRU, MCA |\n|---|---|---|---|"
    );
    for t in traces() {
        let (p, m, b) = (at8(Sys::PcLru, t), at8(Sys::Mca, t), at8(Sys::Baseline, t));
        let _ = writeln!(
            out,
            "| {t} | {}, {} | {}, {} | {}, {} |",
            ratio_cell(r, &p, &b, LAT),
            ratio_cell(r, &m, &b, LAT),
            r.cell(&p, Metric::Ssd("buffer_delayed_partial")),
            r.cell(&m, Metric::Ssd("buffer_delayed_partial")),
            r.cell(&p, Metric::Ssd("buffer_partial_to_full")),
            r.cell(&m, Metric::Ssd("buffer_partial_to_full")),
        );
    }
    out.push('\n');
    Ok(())
}

fn fig15(out: &mut String, r: &Results<Key>, plots: &mut Plots, mode: Mode) -> Result<(), Error> {
    let sizes = buffer_mibs(mode);
    let _ = writeln!(
        out,
        "Mean latency, Baseline / PC-LRU, per buffer size (MiB).\n\n| trace | {} |\n|---|{}",
        sizes.iter().map(|b| format!("{b} MiB")).collect::<Vec<_>>().join(" | "),
        "---|".repeat(sizes.len())
    );
    let mut series = Vec::new();
    for t in traces() {
        let k = |s, b| Key { buffer_mib: b, ..at8(s, t) };
        let cells: Vec<String> = sizes
            .iter()
            .map(|&b| {
                format!(
                    "{} / {}",
                    r.cell(&k(Sys::Baseline, b), LAT),
                    r.cell(&k(Sys::PcLru, b), LAT)
                )
            })
            .collect();
        let _ = writeln!(out, "| {t} | {} |", cells.join(" | "));
        series.push(Series {
            name: t.to_string(),
            values: sizes
                .iter()
                .map(|&b| {
                    let (p, base) =
                        (r.get(&k(Sys::PcLru, b), LAT)?, r.get(&k(Sys::Baseline, b), LAT)?);
                    (base > 0.0).then(|| p / base)
                })
                .collect(),
        });
    }
    out.push('\n');
    let xs: Vec<f64> = sizes.iter().map(|&b| b as f64).collect();
    plots.lines(
        out,
        "fig15",
        "Fig. 15: PC-LRU / Baseline mean latency by buffer size",
        ("buffer (MiB)", "PC-LRU / Baseline"),
        &xs,
        &series,
    )
}

fn fig16(out: &mut String, r: &Results<Key>, _: &mut Plots) -> Result<(), Error> {
    let _ =
        writeln!(out, "| trace | SLC: Baseline, WAFLASH | TLC: Baseline, WAFLASH |\n|---|---|---|");
    for t in traces() {
        let tlc = |s| Key { tlc: true, ..at8(s, t) };
        let _ = writeln!(
            out,
            "| {t} | {}, {} | {}, {} |",
            r.cell(&at8(Sys::Baseline, t), LAT),
            r.cell(&at8(Sys::Waflash, t), LAT),
            r.cell(&tlc(Sys::Baseline), LAT),
            r.cell(&tlc(Sys::Waflash), LAT),
        );
    }
    out.push('\n');
    Ok(())
}
