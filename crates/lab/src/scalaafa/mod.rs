//! `flashrig reproduce scalaafa`: ScalaAFA's evaluation (scalaafa-atc24.txt §6, Figs. 9-16) at
//! reduced scale, in deterministic simulation, with the engines flashrig has in place of the
//! paper's systems; it writes a Markdown document with the paper's numbers beside ours, and
//! plots.
//!
//! The runs are the experiment files of `configs/experiments/scalaafa/` (compiled in), expanded
//! as `flashrig sweep` expands them, then scaled by the core's rules (`core::scale`): every
//! `scalaafa-femu` member gets blocks with fewer pages and an SLC cache smaller by the same
//! factor (its per-SSD bandwidth comes from its channels, dies and NAND timing, which stay; the
//! document measures one SSD at both scales), and every run loses the same fraction of its run
//! time or trace length (so the bytes written relative to capacity, SLC cache and watermarks
//! are the full-scale run's). Nothing is fitted to the paper: every parameter comes from the
//! experiment files, the presets and docs/cost-model.md, each with its source.
//!
//! This module holds only what is ScalaAFA's: its experiments and keys (`experiments`), its
//! traces (`traces`), its claims (`claims_micro`, `claims_traces`), the models behind its
//! comparisons (`reasons`), its setup text (`setup`) and its figures' tables and plots
//! (`figures`, `trace_figures`). Running, comparing and rendering are the core's.

mod claims_micro;
mod claims_traces;
mod experiments;
mod figures;
mod phase;
mod reasons;
mod setup;
mod trace_figures;
mod traces;

use std::path::{Path, PathBuf};

use flashrig_frontends::error::Error;

use crate::core::plots::relative_to;
use crate::core::{self, Claim, Outputs, Paper, Plan, Results, RunKey, Section, Settings};
pub use crate::core::{scale::reduce_ssd, Mode};
use traces::TraceRun;

/// The paper's systems, by the `name` the experiment files give their engines.
const MDRAID: &str = "mdraid";
const RAID5F: &str = "RAID5F";
const FUSION: &str = "FusionRAID";
const SCALA: &str = "ScalaAFA";
const SCALA_CO: &str = "Scala-CO";
const SCALA_WR: &str = "Scala-WR";
/// FusionRAID's replication phase alone (§3.1).
const FSR_REP: &str = "FSR-Rep";
/// FusionRAID in its conversion phase (§3.1, Fig. 3b): the FusionRAID engine, preconditioned
/// past its watermark.
const FSR_CONV: &str = "FSR-Conv";
/// Fig. 16 measures the SSD §5.5 describes: "when the SLC buffer is full, the SLC evictor
/// selectively evicts SLC blocks by considering the transient tags". The `scalaafa-femu`
/// preset's TurboWrite cache does not evict when full (it passes host writes to MLC and evicts
/// in idle time, which a closed-loop replay never leaves it), so Fig. 16's compared runs use
/// paced eviction (`slc_eviction = "paced"`, eviction beside host writes once the cache is
/// full), with transient data mixed with other data in SLC lines and in SLC lines of its own:
/// the paper does not say which its SSD did, so the two are a bracket. Scala-WR sends no
/// transient hint, so placement changes nothing for it and one run serves both.
const SCALA_PACED: &str = "ScalaAFA (paced eviction)";
const SCALA_SEP: &str = "ScalaAFA (separate, paced eviction)";
const SCALA_WR_PACED: &str = "Scala-WR (paced eviction)";
/// The systems that are `scala` arrays: their microbenchmarks run in the conversion phase.
const SCALA_FAMILY: [&str; 6] = [SCALA, SCALA_CO, SCALA_WR, SCALA_SEP, SCALA_PACED, SCALA_WR_PACED];

/// The run time of the full-scale experiments (configs/experiments/afa-*.toml and
/// configs/experiments/scalaafa/*.toml); the paper does not state fio's.
const FULL_SCALE_RUNTIME_MS: u64 = 1000;
/// How long the full run (`flashrig reproduce scalaafa`, no `--quick`) took on the
/// development machine (2 vCPUs), stated in the document.
const FULL_RUN_WALL_TIME: &str =
    "about 3 minutes (148 and 168 s in two runs on 2026-11-28, 179 runs on 2 worker threads; \
     peak memory 0.83 GiB)";

/// What a run measured the paper's system on: a microbenchmark or a trace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    /// `pattern`: `4k-rand-qd32`, `64k-seq-qd32`, `fs-rand-qd32` (full stripe), ...
    Array {
        system: String,
        k: usize,
        m: usize,
        pattern: String,
        threads: u32,
    },
    Trace {
        system: String,
        trace: String,
    },
    /// A Fig. 15 run (4+1, one I/O thread): like `Array`, but measured over the window of
    /// `phase::conversion_window_ms`, long enough that the reserve of free VHs cannot carry an
    /// engine that converts slowly; every system of the figure over the same window.
    Sources {
        system: String,
        pattern: String,
    },
    /// One member SSD alone under Fig. 11's workload with `threads` jobs (the S of the ideal),
    /// fresh or preconditioned as a member of a 4+1 ScalaAFA at its conversion point (the S of
    /// the runs that measure the conversion phase).
    Single {
        threads: u32,
        conversion: bool,
    },
    /// One member SSD, 64 KiB sequential writes, at full scale or reduced (the scale check).
    ScaleCheck {
        scale: CheckScale,
        long: bool,
    },
}

impl RunKey for Key {
    fn system(&self) -> Option<&str> {
        match self {
            Key::Array { system, .. } | Key::Trace { system, .. } | Key::Sources { system, .. } => {
                Some(system)
            }
            Key::Single { .. } | Key::ScaleCheck { .. } => None,
        }
    }
}

/// The SSDs of the scale check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum CheckScale {
    Full,
    /// As the figures run them.
    Reduced,
    /// `blocks_per_plane` divided by 16 alone (the most it allows), for comparison.
    BlocksOnly,
}

fn arr(system: &str, k: usize, m: usize, pattern: &str, threads: u32) -> Key {
    Key::Array { system: system.into(), k, m, pattern: pattern.into(), threads }
}

/// The run that stands for `system` in Fig. 15.
fn fig15_key(system: &str, pattern: &str) -> Key {
    Key::Sources { system: system.into(), pattern: pattern.into() }
}

fn tr(system: &str, trace: &str) -> Key {
    Key::Trace { system: system.into(), trace: trace.into() }
}

/// What `flashrig reproduce scalaafa` was asked to do.
pub struct Options {
    pub mode: Mode,
    /// The document, plots and result files.
    pub outputs: Outputs,
    /// Where the real traces are (`MANIFEST.txt` and the files it lists).
    pub traces: PathBuf,
    /// Worker threads (0: one per available CPU).
    pub workers: usize,
    pub quiet: bool,
}

/// ScalaAFA's reproduction in a mode.
struct ScalaAfa {
    mode: Mode,
    /// The traces of Figs. 12, 13 and 16 (synthetic ones are written when the runs are
    /// planned).
    traces: Vec<TraceRun>,
}

/// Writes the configuration of every run the reproduction plans (or of those named in
/// `only`) to `dir/<label>.toml`, runs nothing, and returns the labels written. Each file runs
/// alone with `flashrig run`, so one key can be changed and one run repeated (docs/ssd.md,
/// "SLC cache", and docs/scala.md, Known limits, measure that way). A name in `only` that is
/// not a planned run is an error naming it and the labels there are.
pub fn dump_configs(opts: &Options, dir: &Path, only: &[String]) -> Result<Vec<String>, Error> {
    let paper = ScalaAfa {
        mode: opts.mode,
        traces: traces::traces(opts.mode, &opts.outputs.results.join("traces"), &opts.traces),
    };
    core::dump_plan(&paper.plan()?, dir, only)
}

/// Runs everything and writes the document; returns the runs that failed.
pub fn scalaafa(opts: &Options) -> Result<Vec<String>, Error> {
    let paper = ScalaAfa {
        mode: opts.mode,
        traces: traces::traces(opts.mode, &opts.outputs.results.join("traces"), &opts.traces),
    };
    let settings = Settings {
        mode: opts.mode,
        outputs: opts.outputs.clone(),
        workers: opts.workers,
        quiet: opts.quiet,
    };
    core::reproduce(&paper, &settings)
}

impl Paper for ScalaAfa {
    type Key = Key;

    fn title(&self) -> String {
        "Reproducing ScalaAFA (ATC'24) §6 at reduced scale".into()
    }

    fn command(&self) -> String {
        format!("flashrig reproduce scalaafa{}", self.mode.flag())
    }

    fn plan(&self) -> Result<Plan<Key>, Error> {
        traces::write_synthetic(&self.traces)?;
        experiments::plan(self.mode, &self.traces)
    }

    fn preamble(&self, _: &Results<Key>, outputs: &Outputs) -> String {
        // A quick document says how long the full run takes; the full document has its own
        // time.
        let full_run = match self.mode {
            Mode::Full => String::new(),
            _ => format!(
                " The full run (`flashrig reproduce scalaafa`, SSDs at 1/8) took \
                 {FULL_RUN_WALL_TIME} on the development machine (2 vCPUs)."
            ),
        };
        format!(
            "{full_run} Every number below is read back from the run's result file (`{}`); the \
             paper's numbers are only those its text states (the figures' bars are not in the \
             text). The experiments are [configs/experiments/scalaafa/]({}/).",
            outputs.results.display(),
            relative_to(&outputs.doc, Path::new("configs/experiments/scalaafa"))
        )
    }

    fn sections(&self) -> Vec<Section<'_, Key>> {
        let mut v = Vec::new();
        if self.mode == Mode::Smoke {
            v.push(Section::text(
                "**Smoke run**: 1 ms runs and 300-request traces, for flashrig's own test. Not \
                 a reproduction.\n\n"
                    .into(),
            ));
        }
        v.push(Section::new("Setup", Vec::new(), |out, r, _| {
            setup::render(out, r, &self.traces);
            Ok(())
        }));
        v.push(Section::new("Which phase each run measured", Vec::new(), figures::phases));
        v.push(Section::new(
            "Fig. 3b: FusionRAID's conversion phase, 4+1, one I/O thread",
            claims_micro::fig3b(),
            figures::fig3b,
        ));
        v.push(Section::new(
            "Fig. 9: write throughput (GB/s), one I/O thread, QD32",
            claims_micro::fig9(),
            figures::fig9,
        ));
        v.push(Section::new("Fig. 10: write latency, 4+1", claims_micro::fig10(), figures::fig10));
        v.push(Section::new(
            "Fig. 11 and §3.1: scalability, 64 KiB sequential writes, QD32 per I/O thread",
            claims_micro::fig11(),
            figures::fig11,
        ));
        v.push(Section::new(
            "Fig. 12: write throughput on the traces, 4+1, QD32",
            claims_traces::fig12(),
            |out, r, plots| trace_figures::fig12(out, r, plots, &self.traces),
        ));
        v.push(Section::new(
            "Fig. 13: write latency on the traces, 4+1, QD32",
            claims_traces::fig13(),
            |out, r, plots| trace_figures::fig13(out, r, plots, &self.traces),
        ));
        v.push(Section::new("Fig. 14: RocksDB", Vec::new(), |out, _, _| {
            out.push_str(
                "Not reproduced: flashrig has no file system or key-value store on its engines \
                 (the paper runs RocksDB on ext4 and BlobFS).\n\n",
            );
            Ok(())
        }));
        v.push(Section::new(
            "Fig. 15: sources of the improvement, 4+1, QD32",
            claims_micro::fig15(),
            figures::fig15,
        ));
        v.push(Section::new(
            "Fig. 16: MLC page writes with the SLC buffer, 4+1",
            claims_traces::fig16(),
            |out, r, plots| trace_figures::fig16(out, r, plots, &self.traces),
        ));
        v
    }

    fn model_reasons(&self, claim: &Claim<Key>, r: &Results<Key>) -> Vec<String> {
        reasons::model_reasons(claim, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Unit;

    /// Every claim's direction holds for the paper's own number: a ratio the paper says is a
    /// gain is above 1, a reduction below, and so on (an ordering is about several runs and
    /// holds trivially here).
    #[test]
    fn the_papers_numbers_point_the_way_their_claims_say() {
        let all = [
            claims_micro::fig3b(),
            claims_micro::fig9(),
            claims_micro::fig10(),
            claims_micro::fig11(),
            claims_micro::fig15(),
            claims_traces::fig12(),
            claims_traces::fig13(),
            claims_traces::fig16(),
        ];
        let mut stated = 0;
        for c in all.iter().flatten() {
            assert!(
                c.direction.holds(c.paper),
                "{}: {} vs {}",
                c.what,
                c.paper,
                c.direction.assertion()
            );
            // A ratio of two systems always asserts which way it goes.
            if c.unit == Unit::Ratio {
                assert!(c.direction.stated(), "{} states no direction", c.what);
            }
            stated += c.direction.stated() as usize;
        }
        assert!(stated >= 40, "{stated} claims state a direction");
    }
}
