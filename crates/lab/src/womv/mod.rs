//! `flashrig reproduce womv`: the evaluation of WOM-v codes for QLC (jaffer-thesis-2023.txt
//! §3.7, Figs. 3.3-3.4 and 3.7-3.14) in deterministic simulation, on flashrig's WOM-v SSD
//! (docs/womv.md "The WOM-v SSD"); it writes a Markdown document with the thesis' numbers beside
//! ours, and plots.
//!
//! Every run is the thesis' QLC FEMU drive (the `qlc-femu` preset: 4 parallel units, the
//! L/CL/CU/U latencies, LightNVM's 11% over-provisioning) with 160 erase units, as §3.7.1's
//! drive, sized per workload; NO_WOM and every WOM-v mode get the same physical drive (§3.7's
//! second setup). The micro-benchmarks of §3.7.1 are written here as traces of their access
//! patterns; the trace results of §3.7.2-§3.7.5 replay the real slices in `../shared/traces`
//! and synthetic stand-ins with sourced statistics of the thesis' trace families (MSR
//! Cambridge, Microsoft production, FIU), each reduced with the thesis' segment method and
//! repeated until the drive has been written over several times ([`workloads`]). The analytic
//! models (Figs. 3.3-3.4, §3.7.7-§3.7.12) are `flashrig validate womv`'s, rendered into the
//! document.
//!
//! This module holds only what is the thesis': its systems and keys (here), its workloads
//! (`workloads`), its runs (`experiments`), its claims (`claims`) and its tables and plots
//! (`figures`). Running, comparing and rendering are the core's.

mod claims;
mod experiments;
mod figures;
mod workloads;

use std::path::{Path, PathBuf};

use flashrig_frontends::error::Error;

pub use crate::core::Mode;
use crate::core::{self, Claim, Outputs, Paper, Plan, Results, RunKey, Section, Settings};
use workloads::{Pattern, Prepared};

/// How GC treats a victim erase unit (§3.6.4 and Fig. 3.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Gc {
    /// Relocate every valid page, then erase or reuse per the ECC threshold (the thesis'
    /// baseline; a minimum programmable page count of 100%).
    Default,
    /// GC_OPT: reprogram invalidated pages in place while any is programmable (a minimum
    /// programmable page count of 0).
    Opt,
    /// GC_OPT with a minimum programmable page count of this percentage of the erase unit's
    /// pages (Fig. 3.10's sweep).
    MinPercent(u32),
}

/// The thesis' configurations (§3.7: NO_WOM, WOM-v(k,N) baseline, GC_OPT and NR) and §3.7.5's
/// MLC drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Sys {
    /// The LightNVM firmware writing every page once between erases.
    NoWom,
    /// WOM-v(k,4), with §3.7.4's wide pages (a coded page programs in one page time) unless
    /// `narrow` (its 4/k flash pages of 4 KiB on 4/k parallel units, as the media is).
    Wom { k: u8, gc: Gc, nr: bool, narrow: bool },
    /// NO_WOM on an MLC drive of the same cells: the same erase units, each with half the
    /// pages (§3.7.5).
    Mlc,
}

pub(super) const NO_WOM: Sys = Sys::NoWom;
pub(super) const W24: Sys = Sys::Wom { k: 2, gc: Gc::Default, nr: false, narrow: false };
pub(super) const W14: Sys = Sys::Wom { k: 1, gc: Gc::Default, nr: false, narrow: false };
pub(super) const W24_OPT: Sys = Sys::Wom { k: 2, gc: Gc::Opt, nr: false, narrow: false };
pub(super) const W14_OPT: Sys = Sys::Wom { k: 1, gc: Gc::Opt, nr: false, narrow: false };
pub(super) const W24_NR: Sys = Sys::Wom { k: 2, gc: Gc::Default, nr: true, narrow: false };
pub(super) const W14_NR: Sys = Sys::Wom { k: 1, gc: Gc::Default, nr: true, narrow: false };
pub(super) const W24_NR_OPT: Sys = Sys::Wom { k: 2, gc: Gc::Opt, nr: true, narrow: false };
pub(super) const W14_NR_OPT: Sys = Sys::Wom { k: 1, gc: Gc::Opt, nr: true, narrow: false };
pub(super) const MLC_SYS: Sys = Sys::Mlc;
pub(super) const W24_4K: Sys = Sys::Wom { k: 2, gc: Gc::Default, nr: false, narrow: true };
pub(super) const W14_4K: Sys = Sys::Wom { k: 1, gc: Gc::Default, nr: false, narrow: true };

impl Sys {
    /// The thesis' name.
    pub(super) fn name(self) -> String {
        match self {
            Sys::NoWom => "NO_WOM".into(),
            Sys::Mlc => "MLC".into(),
            Sys::Wom { k, gc, nr, narrow } => {
                let mut s = format!("WOM-v({k},4)");
                if nr {
                    s.push_str("-NR");
                }
                match gc {
                    Gc::Default => {}
                    Gc::Opt => s.push_str("-GC_OPT"),
                    Gc::MinPercent(p) => s.push_str(&format!("-MIN{p}")),
                }
                if narrow {
                    s.push_str("-4KiB");
                }
                s
            }
        }
    }
}

/// What a run replays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Workload {
    /// A trace (real slice or stand-in), by its name in [`workloads::TRACES`].
    Trace(&'static str),
    /// §3.7.1's access patterns (Fig. 3.7b), random data.
    Micro(Pattern),
    /// §3.7.1's data-change micro-benchmark (Fig. 3.7a): the drive filled in order again and
    /// again, each bit of the data changed with this probability (percent) between fills.
    Change(u32),
}

impl Workload {
    pub(super) fn name(self) -> String {
        match self {
            Workload::Trace(t) => t.to_string(),
            Workload::Micro(p) => p.name().to_string(),
            Workload::Change(p) => format!("change{p}"),
        }
    }
}

/// One run: a configuration on a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Key {
    pub system: Sys,
    pub workload: Workload,
}

impl Key {
    pub(super) fn new(system: Sys, workload: Workload) -> Key {
        Key { system, workload }
    }
    /// The run's label (its result file's name, and what `--only` takes, which splits at
    /// commas): the system's name with "WOM-v(k,4)" written "WOMk4".
    pub(super) fn label(&self) -> String {
        let system =
            self.system.name().replace("WOM-v(2,4)", "WOM24").replace("WOM-v(1,4)", "WOM14");
        format!("{system}-{}", self.workload.name())
    }
}

impl RunKey for Key {
    fn system(&self) -> Option<&str> {
        // Names are built, not static, so the core's per-system diagnostics do not group these
        // runs; `claims::model_reasons` sums the GC's and the coding's work per configuration.
        None
    }
}

/// A trace run.
pub(super) fn tr(system: Sys, trace: &'static str) -> Key {
    Key::new(system, Workload::Trace(trace))
}

/// What `flashrig reproduce womv` was asked to do.
pub struct Options {
    pub mode: Mode,
    /// The document, plots and result files.
    pub outputs: Outputs,
    /// The folder of the real trace slices (`MANIFEST.txt` and the files it lists).
    pub traces: PathBuf,
    /// Worker threads (0: one per available CPU).
    pub workers: usize,
    pub quiet: bool,
}

/// WOM-v's reproduction in a mode, with its workloads prepared (read, reduced and sized, not
/// yet written).
struct Womv {
    mode: Mode,
    /// Where the trace files go.
    trace_dir: PathBuf,
    prepared: Vec<Prepared>,
    /// Real slices that were not found, for the document.
    missing: Vec<String>,
}

impl Womv {
    fn new(opts: &Options) -> Result<Womv, Error> {
        let (prepared, missing) = workloads::prepare(opts.mode, &opts.traces)?;
        Ok(Womv {
            mode: opts.mode,
            trace_dir: opts.outputs.results.join("traces"),
            prepared,
            missing,
        })
    }
    /// The trace workloads, in the document's order.
    fn traces(&self) -> Vec<&'static str> {
        self.prepared.iter().filter_map(|p| p.trace_name()).collect()
    }
}

/// Writes the configuration of every planned run (or of those named in `only`) to
/// `dir/<label>.toml` (and the traces they replay into the results folder), runs nothing, and
/// returns the labels written. A name in `only` that is not a planned run is an error naming it.
pub fn dump_configs(opts: &Options, dir: &Path, only: &[String]) -> Result<Vec<String>, Error> {
    let plan = Womv::new(opts)?.plan()?;
    core::dump_plan(&plan, dir, only)
}

/// Runs everything and writes the document; returns the runs that failed.
pub fn womv(opts: &Options) -> Result<Vec<String>, Error> {
    let settings = Settings {
        mode: opts.mode,
        outputs: opts.outputs.clone(),
        workers: opts.workers,
        quiet: opts.quiet,
    };
    core::reproduce(&Womv::new(opts)?, &settings)
}

impl Paper for Womv {
    type Key = Key;

    fn title(&self) -> String {
        "Reproducing WOM-v codes for QLC (jaffer-thesis-2023.txt §3.7) in simulation".into()
    }

    fn command(&self) -> String {
        format!("flashrig reproduce womv{}", self.mode.flag())
    }

    fn plan(&self) -> Result<Plan<Key>, Error> {
        let files = workloads::write(&self.prepared, &self.trace_dir)?;
        experiments::plan(&self.prepared, &files, &self.traces())
    }

    fn preamble(&self, _: &Results<Key>, outputs: &Outputs) -> String {
        format!(
            " Every number below is read back from the run's result file (`{}`); the thesis' \
             numbers are only those its text states (its figures' bars are not in the text). \
             Where the text asserts a direction without a number (that WOM-v(1,4) erases more \
             than NO_WOM on the Microsoft production traces), the table compares the direction \
             alone.",
            outputs.results.display()
        )
    }

    fn sections(&self) -> Vec<Section<'_, Key>> {
        figures::sections(self.mode, &self.prepared, &self.traces(), &self.missing)
    }

    fn model_reasons(&self, claim: &Claim<Key>, r: &Results<Key>) -> Vec<String> {
        claims::model_reasons(claim, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_traces() -> Vec<&'static str> {
        workloads::TRACES.iter().map(|t| t.name).collect()
    }

    /// Every claim's direction holds for the thesis' own number, and every ratio states one.
    #[test]
    fn the_thesis_numbers_point_the_way_their_claims_say() {
        crate::core::claim::assert_claims_consistent(&claims::all(&all_traces()), 20);
    }

    /// Every key has its own label (labels name result files), every claim's runs are
    /// planned, and the names are the thesis'.
    #[test]
    fn labels_are_unique_and_every_claim_is_planned() {
        let traces = all_traces();
        // The keys do not depend on the mode (only the sizes do).
        let keys: std::collections::BTreeSet<Key> =
            experiments::keys(&traces).into_iter().collect();
        let labels: std::collections::BTreeSet<String> = keys.iter().map(Key::label).collect();
        assert_eq!(labels.len(), keys.len(), "two keys share a label");
        assert!(labels.iter().all(|l| !l.contains(',')), "--only splits labels at commas");
        for c in claims::all(&traces) {
            for k in c.keys() {
                assert!(keys.contains(k), "{}: {k:?} is not planned", c.what);
            }
        }
        assert_eq!(W24_NR_OPT.name(), "WOM-v(2,4)-NR-GC_OPT");
        assert_eq!(
            Sys::Wom { k: 1, gc: Gc::MinPercent(50), nr: false, narrow: false }.name(),
            "WOM-v(1,4)-MIN50"
        );
    }
}
