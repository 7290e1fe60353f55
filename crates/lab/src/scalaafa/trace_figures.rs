//! Our numbers for ScalaAFA's trace figures (12, 13 and 16), as tables and plots under each
//! figure's comparison table.

use std::fmt::Write as _;

use flashrig_frontends::error::Error;
use flashrig_frontends::report::{Run, Series};

use super::traces::{replayed, TraceRun};
use super::{tr, Key, FUSION, MDRAID, SCALA, SCALA_WR};
use crate::core::plots::named;
use crate::core::results::ssd_counter;
use crate::core::{Metric, Plots, Results};

/// The systems of Figs. 12 and 13.
const SYSTEMS: [&str; 3] = [MDRAID, FUSION, SCALA];

pub(super) fn fig12(
    out: &mut String,
    r: &Results<Key>,
    plots: &mut Plots,
    traces: &[TraceRun],
) -> Result<(), Error> {
    let _ = writeln!(out, "Write throughput (GB/s) and completion time:\n");
    let _ = writeln!(out, "| trace | requests | {} |", SYSTEMS.join(" | "));
    let _ = writeln!(out, "|---|---|{}", "---|".repeat(SYSTEMS.len()));
    for t in traces {
        let cells: Vec<String> = SYSTEMS
            .iter()
            .map(|s| {
                let k = tr(s, &t.name);
                format!("{}, {}", r.cell(&k, Metric::WriteGbps), r.cell(&k, Metric::ElapsedS))
            })
            .collect();
        let mark = if t.table2 { "" } else { " (supplementary)" };
        let _ = writeln!(out, "| {}{mark} | {} | {} |", t.name, replayed(r, t), cells.join(" | "));
    }
    out.push('\n');
    let cats: Vec<String> = traces.iter().map(|t| t.name.clone()).collect();
    let series: Vec<Series> = SYSTEMS
        .iter()
        .map(|s| Series {
            name: s.to_string(),
            values: traces.iter().map(|t| r.get(&tr(s, &t.name), Metric::WriteGbps)).collect(),
        })
        .collect();
    plots.bars(out, "fig12-throughput", "Fig. 12: write throughput, 4+1", "GB/s", &cats, &series)
}

pub(super) fn fig13(
    out: &mut String,
    r: &Results<Key>,
    plots: &mut Plots,
    traces: &[TraceRun],
) -> Result<(), Error> {
    let _ = writeln!(out, "Mean / p99 write latency:\n");
    let _ = writeln!(out, "| trace | {} |", SYSTEMS.join(" | "));
    let _ = writeln!(out, "|---|{}", "---|".repeat(SYSTEMS.len()));
    for t in traces {
        let cells: Vec<String> = SYSTEMS
            .iter()
            .map(|s| {
                let k = tr(s, &t.name);
                format!("{} / {}", r.cell(&k, Metric::MeanLatUs), r.cell(&k, Metric::P99LatUs))
            })
            .collect();
        let _ = writeln!(out, "| {} | {} |", t.name, cells.join(" | "));
    }
    out.push('\n');
    for t in traces {
        let runs: Vec<Run> = SYSTEMS
            .iter()
            .filter_map(|s| r.run(&tr(s, &t.name)).map(|run| named(run, s)))
            .collect();
        let title = format!("Fig. 13: {}, 4+1", t.name);
        plots.cdf(out, &format!("fig13-{}", t.name), &title, runs)?;
    }
    Ok(())
}

pub(super) fn fig16(
    out: &mut String,
    r: &Results<Key>,
    plots: &mut Plots,
    traces: &[TraceRun],
) -> Result<(), Error> {
    let _ = writeln!(
        out,
        "MLC and SLC page programs of the five members together (`nand_page_programs_mlc`, \
         `_slc`), and SLC evictions:\n"
    );
    let _ = writeln!(out, "| trace | Scala-WR MLC | ScalaAFA MLC | ScalaAFA / Scala-WR | Scala-WR SLC | ScalaAFA SLC | Scala-WR evicted | ScalaAFA evicted |");
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    let count = |k: &Key, c: &str| r.run(k).map(|run| ssd_counter(&run.result.layers, c));
    let show = |v: Option<u64>| v.map_or("—".into(), |v| v.to_string());
    for t in traces {
        let (wr, sc) = (tr(SCALA_WR, &t.name), tr(SCALA, &t.name));
        let (a, b) = (count(&wr, "nand_page_programs_mlc"), count(&sc, "nand_page_programs_mlc"));
        let ratio = match (a, b) {
            (Some(a), Some(b)) if a > 0 => format!("{:.3}", b as f64 / a as f64),
            _ => "—".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {ratio} | {} | {} | {} | {} |",
            t.name,
            show(a),
            show(b),
            show(count(&wr, "nand_page_programs_slc")),
            show(count(&sc, "nand_page_programs_slc")),
            show(count(&wr, "slc_evictions")),
            show(count(&sc, "slc_evictions")),
        );
    }
    out.push('\n');
    let cats: Vec<String> = traces.iter().map(|t| t.name.clone()).collect();
    let series: Vec<Series> = [SCALA_WR, SCALA]
        .iter()
        .map(|s| Series {
            name: s.to_string(),
            values: traces.iter().map(|t| r.get(&tr(s, &t.name), Metric::MlcPrograms)).collect(),
        })
        .collect();
    plots.bars(
        out,
        "fig16-mlc-writes",
        "Fig. 16: MLC page writes, 4+1",
        "MLC page programs",
        &cats,
        &series,
    )
}
