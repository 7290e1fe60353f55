//! `flashrig reproduce waflash`: WAFLASH's trace-driven evaluation (waflash.txt §2.2 and §5.2-5.4,
//! Figs. 1, 2 and 8-16) in deterministic simulation, with the paper's systems as firmware
//! policies of flashrig's emulated SSD (docs/waflash.md); it writes a Markdown document with the
//! paper's numbers beside ours, and plots.
//!
//! The paper's six traces are not public here, so every trace is a synthetic stand-in
//! (`flashrig_trace::waflash`, docs/traces.md) that keeps the statistics published for it; the
//! paper's SSD is the `micron-waflash` preset family (Table 1, §5.4) with a sixteenth of its
//! blocks. Nothing is fitted to the paper: the parameters come from the presets and the
//! stand-ins' sources, and the comparisons read our numbers from the result files.
//!
//! This module holds only what is WAFLASH's: its systems and keys (here), its runs
//! (`experiments`), its claims (`claims`) and its tables and plots (`figures`). Running,
//! comparing and rendering are the core's.

mod claims;
mod experiments;
mod figures;

use std::path::{Path, PathBuf};

use flashrig_frontends::error::Error;
use flashrig_frontends::tracecmd;
use flashrig_trace::waflash as stand_ins;
use flashrig_trace::Request;

pub use crate::core::Mode;
use crate::core::{self, Claim, Outputs, Paper, Plan, Results, RunKey, Section, Settings};

/// The paper's systems (§5.2.1 and §5.3), each a buffer policy over an FTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Sys {
    /// "the default SSDSim with LRU buffer management and the most-optimum FTL".
    Baseline,
    /// §3.1 over the page-level FTL.
    PcLru,
    /// §3.2 and §3.3 (multi-version pages with compaction) under the LRU buffer.
    MvFtl,
    /// "WAFLASH=PC-LRU+MV-FTL".
    Waflash,
    /// §5.3's state of the art, over the page-level FTL.
    Mca,
    /// WAFLASH without §3.3's compaction (Fig. 13's comparison: compaction needs PC-LRU's
    /// batch destaging to hand MV-FTL a region's small partial pages together, so its effect
    /// is WAFLASH's with and without it).
    WaflashNoCompaction,
    /// WAFLASH and WAFLASH without compaction, with no merging in idle time
    /// (`mv_idle_merge = false`): the paper does not say how eagerly MV-FTL merges when the
    /// device is idle, and every idle merge rewrites a compacted unit, so Fig. 13 is run both
    /// ways as a bracket.
    WaflashNoIdleMerge,
    WaflashNoCompactionNoIdleMerge,
}

impl Sys {
    pub(super) fn name(self) -> &'static str {
        match self {
            Sys::Baseline => "Baseline",
            Sys::PcLru => "PC-LRU",
            Sys::MvFtl => "MV-FTL",
            Sys::Waflash => "WAFLASH",
            Sys::Mca => "MCA",
            Sys::WaflashNoCompaction => "WAFLASH-nocompact",
            Sys::WaflashNoIdleMerge => "WAFLASH-noidlemerge",
            Sys::WaflashNoCompactionNoIdleMerge => "WAFLASH-nocompact-noidlemerge",
        }
    }
    /// (`buffer_policy`, `ftl_policy`, further `[device.firmware]` lines).
    fn firmware(self) -> (&'static str, &'static str, &'static str) {
        const NO_COMPACTION: &str = "compaction_region_pages = 0\n";
        const NO_IDLE_MERGE: &str = "mv_idle_merge = false\n";
        match self {
            Sys::Baseline => ("lru", "page", ""),
            Sys::PcLru => ("pc-lru", "page", ""),
            Sys::MvFtl => ("lru", "mv", ""),
            Sys::Waflash => ("pc-lru", "mv", ""),
            Sys::Mca => ("mca", "page", ""),
            Sys::WaflashNoCompaction => ("pc-lru", "mv", NO_COMPACTION),
            Sys::WaflashNoIdleMerge => ("pc-lru", "mv", NO_IDLE_MERGE),
            Sys::WaflashNoCompactionNoIdleMerge => {
                ("pc-lru", "mv", "compaction_region_pages = 0\nmv_idle_merge = false\n")
            }
        }
    }
}

/// What a run replays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Workload {
    /// A stand-in for one of the paper's traces, by its name.
    Trace(&'static str),
    /// Fig. 2's noise workload with this percentage of unaligned writes.
    Noise(u32),
}

/// One run: a system on a workload, on an SSD of a page size, buffer size and chip.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Key {
    pub system: Sys,
    pub workload: Workload,
    pub page_kib: u32,
    pub buffer_mib: u32,
    /// §5.4's TLC chip latencies instead of Table 1's SLC ones.
    pub tlc: bool,
}

impl Key {
    fn new(system: Sys, workload: Workload, page_kib: u32) -> Key {
        Key { system, workload, page_kib, buffer_mib: experiments::BUFFER_MIB, tlc: false }
    }
    /// Fig. 2's run with `percent` unaligned writes (the Baseline at 8 KiB).
    fn new_noise(percent: u32) -> Key {
        Key::new(Sys::Baseline, Workload::Noise(percent), experiments::PAGE_KIB)
    }
    /// The run's label (its result file's name).
    pub(super) fn label(&self) -> String {
        let w = match self.workload {
            Workload::Trace(t) => t.to_string(),
            Workload::Noise(p) => format!("noise{p}"),
        };
        format!(
            "{}-{w}-{}k-{}m{}",
            self.system.name(),
            self.page_kib,
            self.buffer_mib,
            if self.tlc { "-tlc" } else { "" }
        )
    }
}

impl RunKey for Key {
    fn system(&self) -> Option<&str> {
        Some(self.system.name())
    }
}

/// A trace run at 8 KiB pages with the default buffer.
pub(super) fn at8(system: Sys, trace: &'static str) -> Key {
    Key::new(system, Workload::Trace(trace), experiments::PAGE_KIB)
}

/// The paper's traces, in its order.
pub(super) fn traces() -> Vec<&'static str> {
    stand_ins::WAFLASH_TRACES.to_vec()
}

/// What `flashrig reproduce waflash` was asked to do.
pub struct Options {
    pub mode: Mode,
    /// The document, plots and result files.
    pub outputs: Outputs,
    /// Worker threads (0: one per available CPU).
    pub workers: usize,
    pub quiet: bool,
}

/// The trace files the runs replay: every workload's, written into the results folder when
/// the runs are planned, with its duration (its last arrival).
pub(super) struct TraceFiles {
    files: Vec<(Workload, PathBuf, u64)>,
}

impl TraceFiles {
    /// The file a workload replays and its duration.
    pub(super) fn of(&self, w: &Workload) -> (&Path, u64) {
        self.files
            .iter()
            .find(|(x, _, _)| x == w)
            .map_or((Path::new(""), 0), |(_, p, d)| (p.as_path(), *d))
    }
}

/// The requests of a workload in `mode` (deterministic: seed 1).
pub(super) fn requests(w: &Workload, mode: Mode) -> Vec<Request> {
    let n = experiments::requests(mode);
    let span = experiments::SPAN_BYTES;
    match *w {
        Workload::Trace(t) => match stand_ins::row(t) {
            Some(row) => stand_ins::stand_in(row, n, span, 1),
            None => Vec::new(),
        },
        Workload::Noise(p) => stand_ins::noise(p as f64 / 100.0, n, span, 1),
    }
}

/// Writes every workload's trace file into `dir`.
fn write_traces(dir: &Path, mode: Mode) -> Result<TraceFiles, Error> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::Io(format!("cannot create {}: {e}", dir.display())))?;
    let mut files: Vec<(Workload, PathBuf, u64)> = Vec::new();
    for k in experiments::keys(mode) {
        if files.iter().any(|(w, _, _)| *w == k.workload) {
            continue;
        }
        let reqs = requests(&k.workload, mode);
        if reqs.is_empty() {
            return Err(Error::Input(format!("no stand-in trace for {:?}", k.workload)));
        }
        let path = dir.join(match k.workload {
            Workload::Trace(t) => format!("{t}-standin.csv"),
            Workload::Noise(p) => format!("noise-{p}.csv"),
        });
        tracecmd::write_trace(&reqs, &path, "msr")?;
        let duration_ns = reqs.iter().map(|r| r.time_ns).max().unwrap_or(0);
        files.push((k.workload, path, duration_ns));
    }
    Ok(TraceFiles { files })
}

/// WAFLASH's reproduction in a mode.
struct Waflash {
    mode: Mode,
    /// Where the trace files go.
    trace_dir: PathBuf,
}

impl Waflash {
    fn new(opts: &Options) -> Waflash {
        Waflash { mode: opts.mode, trace_dir: opts.outputs.results.join("traces") }
    }
}

/// Writes the configuration of every planned run (or of those named in `only`) to
/// `dir/<label>.toml` (and the traces they replay into the results folder), runs nothing, and
/// returns the labels written. A name in `only` that is not a planned run is an error naming it.
pub fn dump_configs(opts: &Options, dir: &Path, only: &[String]) -> Result<Vec<String>, Error> {
    let plan = Waflash::new(opts).plan()?;
    core::dump_plan(&plan, dir, only)
}

/// Runs everything and writes the document; returns the runs that failed.
pub fn waflash(opts: &Options) -> Result<Vec<String>, Error> {
    let settings = Settings {
        mode: opts.mode,
        outputs: opts.outputs.clone(),
        workers: opts.workers,
        quiet: opts.quiet,
    };
    core::reproduce(&Waflash::new(opts), &settings)
}

impl Paper for Waflash {
    type Key = Key;

    fn title(&self) -> String {
        "Reproducing WAFLASH (waflash.txt §2.2 and §5) in simulation".into()
    }

    fn command(&self) -> String {
        format!("flashrig reproduce waflash{}", self.mode.flag())
    }

    fn plan(&self) -> Result<Plan<Key>, Error> {
        let files = write_traces(&self.trace_dir, self.mode)?;
        experiments::plan(self.mode, &files)
    }

    fn preamble(&self, _: &Results<Key>, outputs: &Outputs) -> String {
        format!(
            " Every number below is read back from the run's result file (`{}`); the paper's \
             numbers are only those its text states (the figures' bars are not in the text). \
             Where the text asserts a direction without a number (\"PC-LRU has more partial \
             pages in the buffer\"), the table compares the direction alone.",
            outputs.results.display()
        )
    }

    fn sections(&self) -> Vec<Section<'_, Key>> {
        figures::sections(self.mode)
    }

    fn model_reasons(&self, claim: &Claim<Key>, r: &Results<Key>) -> Vec<String> {
        claims::model_reasons(claim, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every claim's direction holds for the paper's own number, and every ratio states one.
    #[test]
    fn the_papers_numbers_point_the_way_their_claims_say() {
        crate::core::claim::assert_claims_consistent(&claims::all(), 20);
    }

    /// Every key has its own label (labels name result files), and every mode plans each
    /// figure's systems.
    #[test]
    fn labels_are_unique_and_every_figure_is_planned() {
        for mode in [Mode::Smoke, Mode::Quick, Mode::Full] {
            // Figures share runs (Fig. 8's 8 KiB runs are Fig. 15's 16 MiB ones): distinct
            // keys must have distinct labels.
            let keys: std::collections::BTreeSet<Key> =
                experiments::keys(mode).into_iter().collect();
            let labels: std::collections::BTreeSet<String> = keys.iter().map(Key::label).collect();
            assert_eq!(labels.len(), keys.len(), "two keys share a label in {mode:?}");
            for s in [Sys::Baseline, Sys::PcLru, Sys::MvFtl, Sys::Waflash, Sys::Mca] {
                assert!(keys.iter().any(|k| k.system == s), "{s:?} not planned");
            }
            assert!(keys.iter().any(|k| k.tlc) && keys.iter().any(|k| k.buffer_mib == 256));
        }
    }
}
