//! The traces of Figs. 12, 13 and 16: per Table 2 row, the real trace if the traces folder has
//! it with request sizes, otherwise a synthetic stand-in (crates/trace `synth`) with the row's
//! mix and mean sizes and the locality published for its trace family (working set, hot/cold
//! skew, sequential runs; docs/traces.md cites each statistic); real traces that lack sizes
//! replay as supplementary rows with 4 KiB assumed.

use std::path::{Path, PathBuf};

use flashrig_frontends::error::Error;
use flashrig_frontends::replay::{ReplayConfig, ReplayMode};
use flashrig_frontends::size::Size;
use flashrig_frontends::tracecmd;
use flashrig_trace::synth::{synth_with, Locality, TABLE2};

use super::{tr, FUSION, MDRAID, SCALA, SCALA_WR};
use crate::core::{Mode, Results};

/// The span of `flashrig trace synth` (its default), at full scale; scaled with the SSDs.
pub(super) const SYNTH_SPAN_FULL_SCALE: u64 = 16 << 30;

/// A trace the figures replay.
pub(super) struct TraceRun {
    /// The Table 2 row, or a supplementary real trace's name.
    pub name: String,
    /// How it was obtained, for the document.
    pub source: String,
    /// A Table 2 row (compared with the paper) or a supplementary one (not compared).
    pub table2: bool,
    pub replay: ReplayConfig,
    pub requests: u64,
    /// A synthetic trace to write before the runs: (Table 2 row index, requests, span bytes).
    synthetic: Option<(usize, u64, u64)>,
}

/// The MSR volume names of Table 2's rows (the paper's `proxy0` is MSR's `prxy_0`); CFS, DAP
/// (Microsoft production) and webmail (FIU) have none.
fn msr_names(row: &str) -> &'static [&'static str] {
    match row {
        "proxy0" => &["prxy_0", "proxy_0"],
        "prn" => &["prn_0", "prn_1"],
        "src2" => &["src2_0", "src2_1", "src2_2"],
        _ => &[],
    }
}

/// A real trace listed in `MANIFEST.txt` for a Table 2 row: (path, lossy), where lossy means
/// the manifest says sizes are missing.
fn manifest_trace(dir: &Path, row: &str) -> Option<(PathBuf, bool)> {
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.txt")).ok()?;
    for line in manifest.lines() {
        let Some(path) = line.split(" | ").next() else { continue };
        let Some(file) = Path::new(path.trim()).file_name() else { continue };
        let file = file.to_string_lossy();
        if msr_names(row).iter().any(|n| file.starts_with(n)) && dir.join(path.trim()).exists() {
            let lossy =
                line.contains("LOSSY") || line.contains("SIZE AND PRECISE TIME ARE MISSING");
            return Some((dir.join(path.trim()), lossy));
        }
    }
    None
}

/// The traces to replay, with synthetic ones to be written into `synth_dir`; real ones are
/// looked up in `real_dir`.
pub(super) fn traces(mode: Mode, synth_dir: &Path, real_dir: &Path) -> Vec<TraceRun> {
    let closed = |path: PathBuf, max: Option<u64>, assume: Option<Size>| ReplayConfig {
        trace: path,
        mode: ReplayMode::Closed,
        iodepth: 32,
        max_requests: max,
        assume_size: assume,
        ..ReplayConfig::default()
    };
    let mut out = Vec::new();
    let mut extra = Vec::new();
    for (i, row) in TABLE2.iter().enumerate() {
        let n = mode.scaled_requests((row.writes_kops + row.reads_kops) * 1000.0);
        match manifest_trace(real_dir, row.name) {
            Some((path, false)) => out.push(TraceRun {
                name: row.name.into(),
                source: format!("real trace {}, first {n} requests", path.display()),
                table2: true,
                replay: closed(path, Some(n), None),
                requests: n,
                synthetic: None,
            }),
            found => {
                let span = SYNTH_SPAN_FULL_SCALE / mode.divisor();
                let path = synth_dir.join(format!("{}-synth.csv", row.name));
                out.push(TraceRun {
                    name: row.name.into(),
                    source: format!(
                        "synthetic with published locality: `flashrig trace synth --like {} \
                         --requests {n} --span {} --seed 1 --locality published`",
                        row.name,
                        Size(span)
                    ),
                    table2: true,
                    replay: closed(path, None, None),
                    requests: n,
                    synthetic: Some((i, n, span)),
                });
                if let Some((path, true)) = found {
                    let max = (mode == Mode::Smoke).then_some(n);
                    let name = format!(
                        "{}-real",
                        path.file_name()
                            .unwrap_or_default()
                            .to_string_lossy()
                            .split('_')
                            .take(2)
                            .collect::<Vec<_>>()
                            .join("_")
                    );
                    extra.push(TraceRun {
                        name,
                        source: format!(
                            "real trace {} (lossy: no sizes or precise times in the file; 4 KiB \
                             assumed){}",
                            path.display(),
                            max.map_or(String::new(), |m| format!(", first {m} requests"))
                        ),
                        table2: false,
                        replay: closed(path, max, Some(Size::kib(4))),
                        requests: max.unwrap_or(100_000),
                        synthetic: None,
                    });
                }
            }
        }
    }
    out.extend(extra);
    out
}

/// Writes the synthetic traces (before the runs that replay them).
pub(super) fn write_synthetic(traces: &[TraceRun]) -> Result<(), Error> {
    for t in traces {
        let Some((row, n, span)) = t.synthetic else { continue };
        if let Some(dir) = t.replay.trace.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::Io(format!("cannot create {}: {e}", dir.display())))?;
        }
        let reqs = synth_with(&TABLE2[row], n, span, 1, Locality::Published);
        tracecmd::write_trace(&reqs, &t.replay.trace, "msr")?;
    }
    Ok(())
}

/// Requests a trace replayed (read from a run of it), or the planned count.
pub(super) fn replayed(r: &Results<super::Key>, t: &TraceRun) -> u64 {
    [SCALA, FUSION, MDRAID, SCALA_WR]
        .iter()
        .find_map(|s| r.run(&tr(s, &t.name)).map(|run| run.total.ios))
        .unwrap_or(t.requests)
}
