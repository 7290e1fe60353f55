//! WAFLASH's runs: which firmware each system is, the SSD each figure runs on, the traces each
//! mode replays, and the plan of every run of every figure.
//!
//! Every run is one emulated SSD (the `micron-waflash` presets: waflash.txt Table 1 and §5.4)
//! replaying a trace open-loop at its timestamps, as SSDSim replays the paper's traces. The
//! configuration of a run is written out as TOML, so `flashrig reproduce waflash
//! --dump-configs DIR` gives files that `flashrig run` repeats one at a time.

use std::path::Path;

use flashrig_frontends::config::Config;
use flashrig_frontends::error::Error;

use super::{Key, Sys, Workload};
use crate::core::{Mode, Plan};

/// The page sizes of Fig. 8 (Table 1: "Page size 4/8/16KB").
pub(super) const PAGE_KIBS: [u32; 3] = [4, 8, 16];
/// The page size of Figs. 2, 9-16 (§2.2 and §5.2.2: "at the page size of 8 KB").
pub(super) const PAGE_KIB: u32 = 8;
/// The write buffer of every run but Fig. 15's: 16 MiB, the smallest §5.4 sweeps (the paper
/// states no default; the `micron-waflash` preset's choice, docs/ssd-presets.md).
pub(super) const BUFFER_MIB: u32 = 16;
/// Fig. 2's shares of unaligned writes, in percent ("We vary the ratio of unaligned writes
/// from 0% to 100%"; the steps between are not stated, so quarters).
pub(super) const NOISE_PERCENTS: [u32; 5] = [0, 25, 50, 75, 100];
/// Blocks per plane of every run's SSD: 256 of Table 1's 4096, so the SSD keeps Table 1's
/// channels, chips, dies, planes and block size (which set its parallelism and latency) with
/// 1/16 of the capacity (32 GiB of flash at 8 KiB pages). The traces write under a tenth of
/// it, so neither size makes GC run; the document shows GC's counters to prove it.
pub(super) const BLOCKS_PER_PLANE: u32 = 256;
/// The stand-ins' address span: 8 GiB, within the smallest SSD above (16 GiB at 4 KiB pages).
pub(super) const SPAN_BYTES: u64 = 8 << 30;
/// Samples of Fig. 10's series per run.
const SERIES_SAMPLES: u64 = 100;

/// The buffer sizes of Fig. 15 in MiB ("varied from 16 MB to 256 MB"; the steps are not
/// stated, so powers of two; `--quick` runs every other one).
pub(super) fn buffer_mibs(mode: Mode) -> &'static [u32] {
    match mode {
        Mode::Full => &[16, 32, 64, 128, 256],
        Mode::Quick | Mode::Smoke => &[16, 64, 256],
    }
}

/// Requests each trace replays: §2.2's 120K (the one count the paper states, for its MSNFS
/// experiment) in the full run, a quarter with `--quick`.
pub(super) fn requests(mode: Mode) -> u64 {
    match mode {
        Mode::Full => 120_000,
        Mode::Quick => 30_000,
        Mode::Smoke => 300,
    }
}

/// The SSD preset of a page size and chip.
fn preset(page_kib: u32, tlc: bool) -> &'static str {
    match (page_kib, tlc) {
        (8, true) => "micron-waflash-tlc",
        (4, _) => "micron-waflash-4k",
        (16, _) => "micron-waflash-16k",
        _ => "micron-waflash",
    }
}

/// A run's configuration as TOML.
pub(super) fn config_text(key: &Key, trace: &Path, duration_ns: u64) -> String {
    let (buffer, ftl, extra) = key.system.firmware();
    let series_ms = (duration_ns / SERIES_SAMPLES / 1_000_000).max(1);
    format!(
        "# flashrig reproduce waflash: {label}\n\
         seed = 1\n\
         runtime = \"sim\"\n\n\
         [device]\n\
         type = \"ssd\"\n\
         preset = \"{preset}\"\n\
         payload = \"none\"\n\n\
         [device.geometry]\n\
         blocks_per_plane = {BLOCKS_PER_PLANE}\n\n\
         [device.firmware]\n\
         buffer_policy = \"{buffer}\"\n\
         ftl_policy = \"{ftl}\"\n\
         {extra}\
         buffer_bytes = {buffer_bytes}\n\n\
         [replay]\n\
         trace = {trace:?}\n\
         format = \"msr\"\n\
         mode = \"open\"\n\n\
         [precondition]\n\
         trace_reads = true\n\n\
         [workload]\n\
         series_ms = {series_ms}\n\
         series_counters = [\"buffer_partial_units\", \"buffer_units\"]\n",
        label = key.label(),
        preset = preset(key.page_kib, key.tlc),
        buffer_bytes = key.buffer_mib as u64 * 1024 * 1024,
        trace = trace.display().to_string(),
    )
}

/// Every key each figure needs in `mode`.
pub(super) fn keys(mode: Mode) -> Vec<Key> {
    let mut v = Vec::new();
    let traces = super::traces();
    // Fig. 2: the noise workload on the Baseline.
    for p in NOISE_PERCENTS {
        v.push(Key::new(Sys::Baseline, Workload::Noise(p), PAGE_KIB));
    }
    for &t in &traces {
        // Fig. 8 (and 9-12 at 8 KiB): the four systems at three page sizes.
        for page in PAGE_KIBS {
            for s in [Sys::Baseline, Sys::PcLru, Sys::MvFtl, Sys::Waflash] {
                v.push(Key::new(s, Workload::Trace(t), page));
            }
        }
        // Fig. 13: WAFLASH without compaction; Fig. 14: MCA.
        for s in
            [Sys::WaflashNoCompaction, Sys::WaflashNoIdleMerge, Sys::WaflashNoCompactionNoIdleMerge]
        {
            v.push(Key::new(s, Workload::Trace(t), PAGE_KIB));
        }
        v.push(Key::new(Sys::Mca, Workload::Trace(t), PAGE_KIB));
        // Fig. 15: Baseline and PC-LRU over the buffer sizes.
        for &b in buffer_mibs(mode) {
            for s in [Sys::Baseline, Sys::PcLru] {
                v.push(Key { buffer_mib: b, ..Key::new(s, Workload::Trace(t), PAGE_KIB) });
            }
        }
        // Fig. 16: Baseline and WAFLASH on the TLC chip.
        for s in [Sys::Baseline, Sys::Waflash] {
            v.push(Key { tlc: true, ..Key::new(s, Workload::Trace(t), PAGE_KIB) });
        }
    }
    v
}

/// The plan: one run per key (keys with identical configurations share a run).
pub(super) fn plan(mode: Mode, traces: &super::TraceFiles) -> Result<Plan<Key>, Error> {
    let mut plan = Plan::default();
    for key in keys(mode) {
        let (path, duration_ns) = traces.of(&key.workload);
        let text = config_text(&key, path, duration_ns);
        let config = Config::from_toml(&text, Path::new("<flashrig reproduce waflash>"))?;
        // Wall time grows with the requests and with the buffer the policies scan.
        let weight = 1.0 + key.buffer_mib as f64 / 64.0;
        plan.add(key.clone(), key.label(), config, weight);
    }
    Ok(plan)
}
