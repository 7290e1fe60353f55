//! `flashrig report a.json b.json ...`: runs side by side, as a terminal table, a CSV and
//! SVG plots (latency CDF, throughput over time, IOPS bars).

use std::fmt::Write as _;
use std::path::PathBuf;

use flashrig_metrics::{LayerSnapshot, RunResult};

use crate::error::Error;
use crate::run::{human_bytes, human_ns};
use crate::workload::WorkloadSummary;

/// The plots, behind the `plots` feature (on by default) so that a build that never draws (the
/// fuzz targets' sanitizer build) does not compile the SVG and PNG stack.
#[cfg(feature = "plots")]
mod plot;
#[cfg(feature = "plots")]
pub use plot::{bar_chart, cdf_chart, heat_map, line_chart, plots, Series};

/// One run as the report reads it.
#[derive(Clone)]
pub struct Run {
    pub name: String,
    pub result: RunResult,
    pub total: WorkloadSummary,
    /// Each job's own numbers (absent from replays, which are one stream).
    pub jobs: Vec<WorkloadSummary>,
}

/// Loads result files; a file that is not one is named in the error.
pub fn load(paths: &[PathBuf]) -> Result<Vec<Run>, Error> {
    let mut runs = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p)
            .map_err(|e| Error::Input(format!("cannot read {}: {e}", p.display())))?;
        let result = RunResult::from_json(&text)
            .map_err(|e| Error::Input(format!("{}: {e}", p.display())))?;
        let total: WorkloadSummary = serde_json::from_value(result.workload["total"].clone())
            .map_err(|e| Error::Input(format!("{}: workload.total: {e}", p.display())))?;
        let jobs: Vec<WorkloadSummary> = match result.workload.get("jobs") {
            Some(j) => serde_json::from_value(j.clone())
                .map_err(|e| Error::Input(format!("{}: workload.jobs: {e}", p.display())))?,
            None => Vec::new(),
        };
        let name =
            p.file_stem().map_or_else(|| p.display().to_string(), |s| s.to_string_lossy().into());
        runs.push(Run { name, result, total, jobs });
    }
    Ok(runs)
}

/// Write amplification of the SSD layers of a stack (mean over SSDs), if any.
fn ssd_waf(layer: &LayerSnapshot, acc: &mut Vec<f64>) {
    if layer.kind == "ssd" {
        if let Some(w) = layer.values.get("waf_total") {
            acc.push(*w);
        }
    }
    for c in &layer.children {
        ssd_waf(c, acc);
    }
}

fn waf(run: &Run) -> Option<f64> {
    let mut v = Vec::new();
    ssd_waf(&run.result.layers, &mut v);
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The side-by-side table.
pub fn table(runs: &[Run]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:>6} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "run", "clock", "IOPS", "bandwidth", "p50", "p99", "p99.9", "max", "SSD WAF"
    );
    for r in runs {
        let t = &r.total;
        let _ = writeln!(
            out,
            "{:<20} {:>6} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>8}",
            r.name,
            r.result.runtime,
            t.iops.map_or("-".into(), |v| format!("{v:.0}")),
            t.bandwidth_bytes_per_s.map_or("-".into(), |b| format!("{}/s", human_bytes(b))),
            human_ns(t.latency.p50_ns),
            human_ns(t.latency.p99_ns),
            human_ns(t.latency.p999_ns),
            human_ns(t.latency.max_ns),
            waf(r).map_or("-".into(), |w| format!("{w:.2}"))
        );
    }
    out
}

/// The same as CSV: per run a row for all jobs together (`job` = `all`) and one per job.
pub fn csv(runs: &[Run]) -> String {
    let mut out = String::from(
        "run,job,runtime,ios,reads,writes,bytes,elapsed_ns,iops,bandwidth_bytes_per_s,p50_ns,p99_ns,p999_ns,max_ns,ssd_waf\n",
    );
    for r in runs {
        let rows = std::iter::once(("all".to_string(), &r.total))
            .chain(r.jobs.iter().enumerate().map(|(i, j)| (i.to_string(), j)));
        for (job, t) in rows {
            csv_row(&mut out, r, &job, t);
        }
    }
    out
}

/// The time series as CSV: per run and job (`all` and each job), one row per interval of the
/// runtime's clock.
pub fn series_csv(runs: &[Run]) -> String {
    let mut out = String::from("run,job,t_s,reads,writes,bytes\n");
    for r in runs {
        let rows = std::iter::once(("all".to_string(), &r.total))
            .chain(r.jobs.iter().enumerate().map(|(i, j)| (i.to_string(), j)));
        for (job, t) in rows {
            let secs = t.series_interval_ns as f64 / 1e9;
            for (i, p) in t.series.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{},{job},{},{},{},{}",
                    r.name,
                    i as f64 * secs,
                    p.reads,
                    p.writes,
                    p.bytes
                );
            }
        }
    }
    out
}

fn csv_row(out: &mut String, r: &Run, job: &str, t: &WorkloadSummary) {
    {
        let _ = writeln!(
            out,
            "{},{job},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.name,
            r.result.runtime,
            t.ios,
            t.reads,
            t.writes,
            t.bytes,
            t.elapsed_ns,
            t.iops.map_or(String::new(), |v| format!("{v:.3}")),
            t.bandwidth_bytes_per_s.map_or(String::new(), |v| format!("{v:.3}")),
            t.latency.p50_ns,
            t.latency.p99_ns,
            t.latency.p999_ns,
            t.latency.max_ns,
            waf(r).map_or(String::new(), |w| format!("{w:.4}"))
        );
    }
}
