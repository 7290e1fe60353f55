//! The runs: which firmware each of the thesis' configurations is, the drive each workload
//! runs on, and the plan of every run of every figure.
//!
//! Every run is one emulated SSD (the `qlc-femu` preset with `[device.womv]`, its WOM-v modes
//! with §3.7.4's wide pages unless a key says 4 KiB) replaying a trace closed-loop, one
//! request in flight per parallel unit, with synthetic random data
//! (`payload = "none"`, each bit of a rewritten page changed with probability 1/2, as the
//! thesis fills blocks with random data, §3.7.2). The configuration of a run is written out as
//! TOML, so `flashrig reproduce womv --dump-configs DIR` gives files that `flashrig run`
//! repeats one at a time.

use std::path::Path;

use flashrig_frontends::config::Config;
use flashrig_frontends::error::Error;

use super::workloads::{Files, Prepared, CHANGE_PERCENTS, PARALLEL_UNITS};
use super::{
    Gc, Key, Pattern, Plan, Sys, Workload, MLC_SYS, NO_WOM, W14, W14_4K, W14_NR, W14_NR_OPT,
    W14_OPT, W24, W24_4K, W24_NR, W24_NR_OPT, W24_OPT,
};

/// Requests in flight: one per parallel unit (the thesis does not state its replay's queue
/// depth).
pub(super) const IODEPTH: u32 = PARALLEL_UNITS;
/// Bit-change probability of random data, in percent.
const RANDOM_DATA_PERCENT: u32 = 50;
/// Fig. 3.10's minimum programmable page counts between GC_OPT (0%) and the default (100%),
/// in percent of an erase unit's coded pages (the thesis' axis values are not in the text).
pub(super) const MIN_PERCENTS: [u32; 3] = [25, 50, 75];
/// The traces Fig. 3.10's sweep runs on (the thesis does not say which): the two whose
/// WOM-v(2,4) runs relocate most in `--quick` (the minimum programmable page count matters
/// only where the GC has valid pages to relocate).
pub(super) const SWEEP_TRACES: [&str; 2] = ["prn_0", "proxy0-synth"];
/// MLC timings: FEMU's constant read, write and erase latencies, which the thesis quotes
/// ("Adding QLC Support to FEMU": "40μ s, 200μ s and 2ms"); §3.7.5 compares erase counts only.
const MLC_READ_NS: u64 = 40_000;
const MLC_PROGRAM_NS: u64 = 200_000;

/// The configurations of the trace figures (Figs. 3.9 and 3.11-3.14); the baselines on 4 KiB
/// pages show what §3.7.4's wide pages change.
pub(super) const TRACE_SYSTEMS: [Sys; 12] = [
    NO_WOM, W24, W14, W24_OPT, W14_OPT, W24_NR, W14_NR, W24_NR_OPT, W14_NR_OPT, MLC_SYS, W24_4K,
    W14_4K,
];
/// The configurations of Fig. 3.7b.
pub(super) const MICRO_SYSTEMS: [Sys; 5] = [NO_WOM, W24, W14, W24_OPT, W14_OPT];
/// The configurations of Fig. 3.7a.
pub(super) const CHANGE_SYSTEMS: [Sys; 3] = [NO_WOM, W24, W14];

/// Every key of every figure, for the traces that were prepared.
pub(super) fn keys(traces: &[&'static str]) -> Vec<Key> {
    let mut v = Vec::new();
    for p in Pattern::ALL {
        for s in MICRO_SYSTEMS {
            v.push(Key::new(s, Workload::Micro(p)));
        }
    }
    for c in CHANGE_PERCENTS {
        for s in CHANGE_SYSTEMS {
            v.push(Key::new(s, Workload::Change(c)));
        }
    }
    for &t in traces {
        for s in TRACE_SYSTEMS {
            v.push(Key::new(s, Workload::Trace(t)));
        }
        if SWEEP_TRACES.contains(&t) {
            for k in [2, 1] {
                for p in MIN_PERCENTS {
                    v.push(Key::new(
                        Sys::Wom { k, gc: Gc::MinPercent(p), nr: false, narrow: false },
                        Workload::Trace(t),
                    ));
                }
            }
        }
    }
    v
}

/// GC_OPT's minimum programmable pages for `percent` of an erase unit's coded pages.
pub(super) fn min_pages(k: u8, pages_per_block: u32, percent: u32) -> u32 {
    // A WOM-v(k,4) coded page takes 4/k flash pages: an erase unit of PARALLEL_UNITS blocks
    // holds k * pages_per_block of them.
    let coded = k as u32 * pages_per_block * PARALLEL_UNITS / 4;
    (coded * percent).div_ceil(100).max(1)
}

/// The `[device.womv]` and `[device.nand]` lines of a configuration on a drive with
/// `pages_per_block`.
fn firmware(sys: Sys, pages_per_block: u32, bit_change_percent: u32) -> String {
    let womv = |code: &str, gc: &str, min: u32, nr: bool, wide: bool| {
        format!(
            "[device.womv]\n\
             code = \"{code}\"\n\
             gc = \"{gc}\"\n\
             min_programmable_pages = {min}\n\
             no_read = {nr}\n\
             bit_change_percent = {bit_change_percent}.0\n\
             wide_pages = {wide}\n"
        )
    };
    match sys {
        Sys::NoWom => womv("none", "default", 1, false, false),
        Sys::Mlc => format!(
            "{}\n[device.nand]\n\
             cell = \"mlc\"\n\
             read_ns = [{MLC_READ_NS}, {MLC_READ_NS}]\n\
             program_ns = [{MLC_PROGRAM_NS}, {MLC_PROGRAM_NS}]\n",
            womv("none", "default", 1, false, false)
        ),
        Sys::Wom { k, gc, nr, narrow } => {
            let code = format!("wom-v({k},4)");
            let wide = !narrow;
            match gc {
                Gc::Default => womv(&code, "default", 1, nr, wide),
                Gc::Opt => womv(&code, "gc_opt", 0, nr, wide),
                Gc::MinPercent(p) => {
                    womv(&code, "gc_opt", min_pages(k, pages_per_block, p), nr, wide)
                }
            }
        }
    }
}

/// A run's configuration as TOML.
pub(super) fn config_text(key: &Key, p: &Prepared, trace: &Path) -> String {
    let bits = match key.workload {
        Workload::Change(c) => c,
        _ => RANDOM_DATA_PERCENT,
    };
    // The MLC drive has the same cells: half the pages per block.
    let ppb = if key.system == MLC_SYS { p.pages_per_block / 2 } else { p.pages_per_block }.max(2);
    let (precondition, max_requests) = if matches!(key.workload, Workload::Trace(_)) {
        (
            format!(
                "\n[precondition]\ntrace_reads = true\ntrace_requests = {}\niodepth = {IODEPTH}\n",
                p.warm_requests
            ),
            format!("max_requests = {}\n", p.measured_requests),
        )
    } else {
        (String::new(), String::new())
    };
    format!(
        "# flashrig reproduce womv: {label}\n\
         seed = 1\n\
         runtime = \"sim\"\n\n\
         [device]\n\
         type = \"ssd\"\n\
         preset = \"qlc-femu\"\n\
         payload = \"none\"\n\n\
         [device.geometry]\n\
         blocks_per_plane = {eus}\n\
         pages_per_block = {ppb}\n\n\
         {firmware}\n\
         [replay]\n\
         trace = {trace:?}\n\
         format = \"msr\"\n\
         mode = \"closed\"\n\
         iodepth = {IODEPTH}\n\
         {max_requests}\
         {precondition}",
        label = key.label(),
        eus = super::workloads::ERASE_UNITS,
        firmware = firmware(key.system, ppb, bits),
        trace = trace.display().to_string(),
    )
}

/// The plan: one run per key.
pub(super) fn plan(
    prepared: &[Prepared],
    files: &Files,
    traces: &[&'static str],
) -> Result<Plan<Key>, Error> {
    let mut plan = Plan::default();
    for key in keys(traces) {
        let Some(p) = prepared.iter().find(|p| p.workload == key.workload) else { continue };
        let text = config_text(&key, p, files.of(key.workload));
        let config = Config::from_toml(&text, Path::new("<flashrig reproduce womv>"))?;
        // Wall time grows with the flash pages programmed: n/k per page written.
        let passes = (p.warm_requests + p.measured_requests) / p.requests.len().max(1) as u64;
        let pages = p.pass_page_writes() * passes.max(1);
        let per_page = match key.system {
            Sys::Wom { k, .. } => 4.0 / k as f64,
            _ => 1.0,
        };
        let weight = pages as f64 * per_page;
        plan.add(key, key.label(), config, weight);
    }
    Ok(plan)
}
