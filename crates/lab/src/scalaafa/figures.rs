//! Our numbers for ScalaAFA's microbenchmark figures (9, 10, 11 and 15), as tables and plots
//! under each figure's comparison table.

use std::fmt::Write as _;

use flashrig_frontends::error::Error;
use flashrig_frontends::report::{Run, Series};

use super::claims_micro::FIG15_PATTERNS;
use super::experiments::{geometries, pattern_title, threads};
use super::{arr, Key, FSR_REP, FUSION, MDRAID, RAID5F, SCALA, SCALA_CO};
use crate::core::plots::named;
use crate::core::{Metric, Plots, Results};

/// The systems of Fig. 9's plots (RAID5F joins them for full-stripe writes).
const SYSTEMS_FIG9: [&str; 3] = [MDRAID, FUSION, SCALA];

/// The ideal of Fig. 11 for k + m at `threads`: (k + m) / (m + 1) x S.
fn ideal(r: &Results<Key>, k: usize, m: usize, threads: u32) -> Option<f64> {
    r.get(&Key::Single { threads }, Metric::WriteGbps).map(|s| s * (k + m) as f64 / (m + 1) as f64)
}

pub(super) fn fig9(out: &mut String, r: &Results<Key>, plots: &mut Plots) -> Result<(), Error> {
    let mode = r.mode;
    let patterns9 = ["4k-rand-qd32", "4k-seq-qd32", "64k-rand-qd32", "64k-seq-qd32", "fs-seq-qd32"];
    let _ = writeln!(
        out,
        "| system | geometry | {} |",
        patterns9.iter().map(|p| pattern_title(p)).collect::<Vec<_>>().join(" | ")
    );
    let _ = writeln!(out, "|---|---|{}", "---|".repeat(patterns9.len()));
    for sys in [MDRAID, RAID5F, FUSION, SCALA] {
        for &(k, m) in geometries(mode) {
            let cells: Vec<String> = patterns9
                .iter()
                .map(|p| r.cell(&arr(sys, k, m, p, 1), Metric::WriteGbps))
                .collect();
            let _ = writeln!(out, "| {sys} | {k}+{m} | {} |", cells.join(" | "));
        }
    }
    out.push('\n');
    let geos: Vec<String> = geometries(mode).iter().map(|(k, m)| format!("{k}+{m}")).collect();
    for p in patterns9 {
        let systems: Vec<&str> = if p.starts_with("fs") {
            vec![MDRAID, RAID5F, FUSION, SCALA]
        } else {
            SYSTEMS_FIG9.to_vec()
        };
        let series: Vec<Series> = systems
            .iter()
            .map(|s| Series {
                name: s.to_string(),
                values: geometries(mode)
                    .iter()
                    .map(|&(k, m)| r.get(&arr(s, k, m, p, 1), Metric::WriteGbps))
                    .collect(),
            })
            .collect();
        let title = format!("Fig. 9: {}", pattern_title(p));
        plots.bars(out, &format!("fig09-{p}"), &title, "GB/s", &geos, &series)?;
    }
    Ok(())
}

pub(super) fn fig10(out: &mut String, r: &Results<Key>, plots: &mut Plots) -> Result<(), Error> {
    let patterns10 = ["4k-rand-qd1", "4k-seq-qd1", "64k-rand-qd32", "64k-seq-qd32", "fs-rand-qd32"];
    let _ = writeln!(out, "Mean / p99 write latency:\n");
    let _ = writeln!(
        out,
        "| system | {} |",
        patterns10.iter().map(|p| pattern_title(p)).collect::<Vec<_>>().join(" | ")
    );
    let _ = writeln!(out, "|---|{}", "---|".repeat(patterns10.len()));
    for sys in [MDRAID, RAID5F, FUSION, SCALA] {
        let cells: Vec<String> = patterns10
            .iter()
            .map(|p| {
                let k = arr(sys, 4, 1, p, 1);
                format!("{} / {}", r.cell(&k, Metric::MeanLatUs), r.cell(&k, Metric::P99LatUs))
            })
            .collect();
        let _ = writeln!(out, "| {sys} | {} |", cells.join(" | "));
    }
    out.push('\n');
    for p in patterns10 {
        let runs: Vec<Run> = [MDRAID, RAID5F, FUSION, SCALA]
            .iter()
            .filter_map(|s| r.run(&arr(s, 4, 1, p, 1)).map(|run| named(run, s)))
            .collect();
        let title = format!("Fig. 10: {}, 4+1", pattern_title(p));
        plots.cdf(out, &format!("fig10-{p}"), &title, runs)?;
    }
    Ok(())
}

pub(super) fn fig11(out: &mut String, r: &Results<Key>, plots: &mut Plots) -> Result<(), Error> {
    let mode = r.mode;
    let threads = threads(mode);
    for (k, m) in [(4usize, 1usize), (6, 1)] {
        if !geometries(mode).contains(&(k, m)) {
            continue;
        }
        let _ = writeln!(out, "{k}+{m} (GB/s):\n");
        let _ = writeln!(
            out,
            "| system | {} |",
            threads.iter().map(|t| format!("{t} thread(s)")).collect::<Vec<_>>().join(" | ")
        );
        let _ = writeln!(out, "|---|{}", "---|".repeat(threads.len()));
        let mut series = Vec::new();
        let systems: Vec<&str> = if (k, m) == (4, 1) {
            vec![MDRAID, FUSION, FSR_REP, SCALA]
        } else {
            SYSTEMS_FIG9.to_vec()
        };
        for sys in systems {
            let cells: Vec<String> = threads
                .iter()
                .map(|&t| r.cell(&arr(sys, k, m, "64k-seq-qd32", t), Metric::WriteGbps))
                .collect();
            let _ = writeln!(out, "| {sys} | {} |", cells.join(" | "));
            series.push(Series {
                name: sys.into(),
                values: threads
                    .iter()
                    .map(|&t| r.get(&arr(sys, k, m, "64k-seq-qd32", t), Metric::WriteGbps))
                    .collect(),
            });
        }
        let ideal: Vec<Option<f64>> = threads.iter().map(|&t| ideal(r, k, m, t)).collect();
        let _ = writeln!(
            out,
            "| ideal (k+m)/(m+1)·S | {} |",
            ideal
                .iter()
                .map(|v| v.map_or("—".into(), |v| format!("{v:.2}")))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        out.push('\n');
        short_of_ideal(out, r, k, m, &ideal);
        out.push('\n');
        series.push(Series { name: "(k+m)/(m+1)·S (ideal)".into(), values: ideal });
        let xs: Vec<f64> = threads.iter().map(|&t| t as f64).collect();
        let title = format!("Fig. 11: {k}+{m}, 64 KiB sequential writes");
        plots.lines(
            out,
            &format!("fig11-{k}+{m}"),
            &title,
            ("I/O threads", "GB/s"),
            &xs,
            &series,
        )?;
    }
    Ok(())
}

/// Where ScalaAFA falls well short of the ideal, says what its result file shows.
fn short_of_ideal(out: &mut String, r: &Results<Key>, k: usize, m: usize, ideal: &[Option<f64>]) {
    for (&t, id) in threads(r.mode).iter().zip(ideal) {
        let key = arr(SCALA, k, m, "64k-seq-qd32", t);
        let (Some(run), Some(v), Some(id)) = (r.run(&key), r.get(&key, Metric::WriteGbps), id)
        else {
            continue;
        };
        if v >= 0.75 * id {
            continue;
        }
        let c = &run.result.layers.counters;
        let conv = c.get("conversions_ssd").copied().unwrap_or(0)
            + c.get("conversions_host").copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "- ScalaAFA {k}+{m} at {t} threads reaches {:.0}% of the ideal: {conv} stripes \
             were converted during the run and the slowest write waited {:.0} ms. The \
             heroes granted to {t} reactors use up the transient area within the run; from \
             then on writes wait for conversions, which the space manager issues one stripe \
             at a time (docs/scala.md, \"Known limits\"), so the throughput falls to the \
             rate of serial conversion.",
            100.0 * v / id,
            run.total.write_latency.max_ns as f64 / 1e6
        );
    }
}

pub(super) fn fig15(out: &mut String, r: &Results<Key>, plots: &mut Plots) -> Result<(), Error> {
    let _ = writeln!(out, "Throughput (GB/s) and mean write latency:\n");
    let _ = writeln!(
        out,
        "| system | {} |",
        FIG15_PATTERNS.iter().map(|(_, t)| *t).collect::<Vec<_>>().join(" | ")
    );
    let _ = writeln!(out, "|---|{}", "---|".repeat(FIG15_PATTERNS.len()));
    let systems15 = [FUSION, SCALA_CO, SCALA];
    for sys in systems15 {
        let cells: Vec<String> = FIG15_PATTERNS
            .iter()
            .map(|(p, _)| {
                let k = arr(sys, 4, 1, p, 1);
                format!("{} GB/s, {}", r.cell(&k, Metric::WriteGbps), r.cell(&k, Metric::MeanLatUs))
            })
            .collect();
        let _ = writeln!(out, "| {sys} | {} |", cells.join(" | "));
    }
    out.push('\n');
    let cats: Vec<String> = FIG15_PATTERNS.iter().map(|(_, t)| t.to_string()).collect();
    for (metric, stem, title, y) in [
        (Metric::WriteGbps, "fig15-throughput", "Fig. 15: throughput, 4+1", "GB/s"),
        (Metric::MeanLatUs, "fig15-latency", "Fig. 15: mean write latency, 4+1", "µs"),
    ] {
        let series: Vec<Series> = systems15
            .iter()
            .map(|s| Series {
                name: s.to_string(),
                values: FIG15_PATTERNS
                    .iter()
                    .map(|(p, _)| r.get(&arr(s, 4, 1, p, 1), metric))
                    .collect(),
            })
            .collect();
        plots.bars(out, stem, title, y, &cats, &series)?;
    }
    Ok(())
}
