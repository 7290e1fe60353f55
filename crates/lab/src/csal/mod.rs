//! `flashrig reproduce csal`: CSAL's raw-device evaluation (csal-eurosys24.txt §3 and §6.2-6.4,
//! Figs. 3 and 10-19, Table 4) in deterministic simulation, with every system the paper
//! compares as a flashrig stack over the same emulated devices: the block-interface QLC SSD
//! alone, the Open-CAS-like write-back cache (`wbcache`), the dm-zoned-like target
//! (`dmzoned`), and CSAL (`csal`) over the QLC SSD made zoned by the `zoned` layer (CSAL-BLK)
//! and over a zoned-namespace SSD (CSAL-ZNS). It writes a Markdown document with the paper's
//! numbers beside ours, and plots.
//!
//! Nothing is fitted to the paper: the devices are the sourced presets (`p5800x`, `p5316-qlc`,
//! `zn540x4`, docs/ssd-presets.md) shrunk by a documented factor, the engines' parameters are
//! the paper's and their sources' (docs/csal.md, docs/baselines.md), and the comparisons read
//! our numbers from the result files.
//!
//! This module holds only what is CSAL's: its systems and keys (here), its runs
//! (`experiments`), its claims (`claims`) and its tables and plots (`figures`). Running,
//! comparing and rendering are the core's.

mod claims;
mod experiments;
mod figures;
mod recovery;

use std::path::Path;

use flashrig_frontends::error::Error;

pub use crate::core::Mode;
use crate::core::{self, Claim, Outputs, Paper, Plan, Results, RunKey, Section, Settings};

/// The systems of §6.1 ("Test candidates"), and the CSAL variants §6.4 compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Sys {
    /// The block-interface P5316 alone, its eight partitions LVM-like (§3.1).
    RawQlc,
    /// An LRU write-back cache of 64 KiB lines on the P5800X in front of the P5316 (§3.2).
    OpenCas,
    /// dm-zoned: random zones on the P5800X, sequential zones on the ZNS SSD (§3.3).
    DmZoned,
    /// CSAL over the P5316 made zoned by emulation (SPDK's zoned bdev, §6.1).
    CsalBlk,
    /// CSAL over the ZN540 bundle (§6.1).
    CsalZns,
}

impl Sys {
    pub(super) fn name(self) -> &'static str {
        match self {
            Sys::RawQlc => "QLC",
            Sys::OpenCas => "Open-CAS",
            Sys::DmZoned => "dm-zoned",
            Sys::CsalBlk => "CSAL-BLK",
            Sys::CsalZns => "CSAL-ZNS",
        }
    }
    pub(super) const ALL: [Sys; 5] =
        [Sys::RawQlc, Sys::OpenCas, Sys::DmZoned, Sys::CsalBlk, Sys::CsalZns];
    pub(super) fn is_csal(self) -> bool {
        matches!(self, Sys::CsalBlk | Sys::CsalZns)
    }
    /// The name of the stack's capacity device (its WAF is the one Fig. 15 reports).
    pub(super) fn capacity_layer(self) -> &'static str {
        "qlc"
    }
}

/// What the eight jobs do (§6.2: 8 FIO jobs, QD128, one per VM's virtual disk).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Load {
    /// Writes of `bs_kib`, sequential or random; `zipf_x10` is the Zipf exponent times ten
    /// (0: uniform).
    Write { seq: bool, bs_kib: u32, zipf_x10: u32 },
    /// Reads, likewise.
    Read { seq: bool, bs_kib: u32, zipf_x10: u32 },
    /// §6.2's mixed case: 64 KiB random reads beside random writes of `write_kib`.
    Mixed { write_kib: u32 },
}

impl Load {
    pub(super) fn label(self) -> String {
        let z =
            |x: u32| if x == 0 { String::new() } else { format!("-zipf{:.1}", x as f64 / 10.0) };
        match self {
            Load::Write { seq, bs_kib, zipf_x10 } => {
                format!("{}write{bs_kib}k{}", if seq { "seq" } else { "rand" }, z(zipf_x10))
            }
            Load::Read { seq, bs_kib, zipf_x10 } => {
                format!("{}read{bs_kib}k{}", if seq { "seq" } else { "rand" }, z(zipf_x10))
            }
            Load::Mixed { write_kib } => format!("mixed-r64k-w{write_kib}k"),
        }
    }
    pub(super) fn rand_write(bs_kib: u32, zipf_x10: u32) -> Load {
        Load::Write { seq: false, bs_kib, zipf_x10 }
    }
}

/// CSAL's switches that §6.4 varies; `Default` everywhere else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Variant {
    /// The paper's configuration: GC and user isolation on, the default L2P cache.
    Default,
    /// Fig. 18: neither isolation.
    NoIsolation,
    /// Fig. 18: GC isolation without user isolation.
    GcIsolation,
    /// Fig. 19: the L2P cache limited to 10 KB ("non-cache").
    L2pNone,
    /// Fig. 19: an L2P cache larger than the table ("full-cache").
    L2pFull,
}

impl Variant {
    pub(super) fn suffix(self) -> &'static str {
        match self {
            Variant::Default => "",
            Variant::NoIsolation => "-noiso",
            Variant::GcIsolation => "-gciso",
            Variant::L2pNone => "-l2p-none",
            Variant::L2pFull => "-l2p-full",
        }
    }
}

/// One run: a system, a load, a variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Key {
    pub system: Sys,
    pub load: Load,
    pub variant: Variant,
}

impl Key {
    pub(super) fn new(system: Sys, load: Load) -> Key {
        Key { system, load, variant: Variant::Default }
    }
    pub(super) fn label(&self) -> String {
        format!("{}-{}{}", self.system.name(), self.load.label(), self.variant.suffix())
    }
}

impl RunKey for Key {
    fn system(&self) -> Option<&str> {
        Some(self.system.name())
    }
}

/// What `flashrig reproduce csal` was asked to do.
pub struct Options {
    pub mode: Mode,
    /// The document, plots and result files.
    pub outputs: Outputs,
    /// Worker threads (0: one per available CPU).
    pub workers: usize,
    pub quiet: bool,
}

/// CSAL's reproduction in a mode.
struct Csal {
    mode: Mode,
    results: std::path::PathBuf,
}

/// Writes the configuration of every planned run (or of those named in `only`) to
/// `dir/<label>.toml`, runs nothing, and returns the labels written.
pub fn dump_configs(opts: &Options, dir: &Path, only: &[String]) -> Result<Vec<String>, Error> {
    let plan = experiments::plan(opts.mode)?;
    core::dump_plan(&plan, dir, only)
}

/// Runs everything and writes the document; returns the runs that failed.
pub fn csal(opts: &Options) -> Result<Vec<String>, Error> {
    let settings = Settings {
        mode: opts.mode,
        outputs: opts.outputs.clone(),
        workers: opts.workers,
        quiet: opts.quiet,
    };
    core::reproduce(&Csal { mode: opts.mode, results: opts.outputs.results.clone() }, &settings)
}

impl Paper for Csal {
    type Key = Key;

    fn title(&self) -> String {
        "Reproducing CSAL (csal-eurosys24.txt §3 and §6) in simulation".into()
    }

    fn command(&self) -> String {
        format!("flashrig reproduce csal{}", self.mode.flag())
    }

    fn plan(&self) -> Result<Plan<Key>, Error> {
        // Table 4 is measured by its own runs (crash, then recover in each mode), before the
        // planned ones; their report lands in the results folder for the figures to read.
        recovery::measure(self.mode, &self.results)?;
        experiments::plan(self.mode)
    }

    fn preamble(&self, _: &Results<Key>, outputs: &Outputs) -> String {
        format!(
            " Every number below is read back from the run's result file (`{}`); the paper's \
             numbers are only those its text states (the figures' bars are not in the text). \
             Where the text asserts a direction without a number (\"CSAL-ZNS always delivers \
             the highest bandwidth\"), the table compares the direction alone.",
            outputs.results.display()
        )
    }

    fn sections(&self) -> Vec<Section<'_, Key>> {
        figures::sections(self.mode, &self.results)
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
        crate::core::claim::assert_claims_consistent(&claims::all(Mode::Full), 20);
    }

    /// Every key has its own label, every system is planned in every mode, and every key a
    /// claim reads is planned.
    #[test]
    fn labels_are_unique_and_every_claim_is_planned() {
        for mode in [Mode::Smoke, Mode::Quick, Mode::Full] {
            let keys: std::collections::BTreeSet<Key> =
                experiments::keys(mode).into_iter().collect();
            let labels: std::collections::BTreeSet<String> = keys.iter().map(Key::label).collect();
            assert_eq!(labels.len(), keys.len(), "two keys share a label in {mode:?}");
            for s in Sys::ALL {
                assert!(keys.iter().any(|k| k.system == s), "{s:?} not planned in {mode:?}");
            }
            for c in claims::all(mode) {
                for k in c.keys() {
                    assert!(keys.contains(k), "{}: {k:?} is not planned in {mode:?}", c.what);
                }
            }
        }
    }
}
