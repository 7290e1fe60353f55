//! Our numbers for ScalaAFA's trace figures (12, 13 and 16), as tables and plots under each
//! figure's comparison table.

use std::fmt::Write as _;

use flashrig_frontends::error::Error;
use flashrig_frontends::report::{Run, Series};

use super::traces::{replayed, TraceRun};
use super::{tr, Key, FUSION, MDRAID, SCALA, SCALA_PACED, SCALA_SEP, SCALA_WR, SCALA_WR_PACED};
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
        "MLC page programs of the five members together (`nand_page_programs_mlc`) on the SSD \
         §5.5 describes, whose SLC evictor runs \"when the SLC buffer is full\" (here paced \
         eviction beside host writes, `slc_eviction = \"paced\"`), in both placements of \
         transient data in its SLC lines: *mixed* (one open SLC line takes every host write) and \
         *separate* (transient data in SLC lines of its own). The paper does not say which its \
         SSD did, so the two are a bracket; Scala-WR sends no transient hint, so one run of it \
         serves both. The last row of each trace is the `scalaafa-femu` preset's TurboWrite \
         cache, which the other figures run: it does not evict when full but passes host writes \
         to MLC and evicts only in idle time, which a closed-loop replay leaves it none of, so \
         the tags have almost nothing to choose; it is shown, not compared. Beside them, what \
         the SLC evictor did with ScalaAFA's transient units: written into SLC \
         (`slc_transient_units`), moved to MLC by eviction (`slc_evicted_transient`) and died \
         in SLC, invalidated by a conversion before eviction (`slc_transient_died`):\n"
    );
    let _ = writeln!(
        out,
        "| trace | placement | Scala-WR MLC | ScalaAFA MLC | ScalaAFA / Scala-WR | ScalaAFA \
         transient units | evicted to MLC | died in SLC |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    let count = |k: &Key, c: &str| r.run(k).map(|run| ssd_counter(&run.result.layers, c));
    let show = |v: Option<u64>| v.map_or("—".into(), |v| v.to_string());
    for t in traces {
        for (placement, scala, wr) in [
            ("mixed", SCALA_PACED, SCALA_WR_PACED),
            ("separate", SCALA_SEP, SCALA_WR_PACED),
            ("mixed, TurboWrite (not compared)", SCALA, SCALA_WR),
        ] {
            let (wr, sc) = (tr(wr, &t.name), tr(scala, &t.name));
            let (a, b) =
                (count(&wr, "nand_page_programs_mlc"), count(&sc, "nand_page_programs_mlc"));
            let ratio = match (a, b) {
                (Some(a), Some(b)) if a > 0 => format!("{:.3}", b as f64 / a as f64),
                _ => "—".into(),
            };
            let _ = writeln!(
                out,
                "| {} | {placement} | {} | {} | {ratio} | {} | {} | {} |",
                t.name,
                show(a),
                show(b),
                show(count(&sc, "slc_transient_units")),
                show(count(&sc, "slc_evicted_transient")),
                show(count(&sc, "slc_transient_died")),
            );
        }
    }
    out.push('\n');
    let cats: Vec<String> = traces.iter().map(|t| t.name.clone()).collect();
    let series: Vec<Series> = [
        (SCALA_WR_PACED, "Scala-WR"),
        (SCALA_PACED, "ScalaAFA, mixed"),
        (SCALA_SEP, "ScalaAFA, separate"),
        (SCALA_WR, "Scala-WR, TurboWrite"),
        (SCALA, "ScalaAFA, TurboWrite"),
    ]
    .iter()
    .map(|(s, name)| Series {
        name: name.to_string(),
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
