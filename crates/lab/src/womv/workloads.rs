//! What the runs replay: the thesis' traces (§3.7.2) as the real slices in `../shared/traces`
//! and synthetic stand-ins, reduced and sized the thesis' way, and the access patterns of the
//! micro-benchmarks (§3.7.1) written out as traces.
//!
//! A trace is prepared in four steps, each a choice written down in docs/womv.md:
//!
//! 1. **Read** the real slice, or generate the stand-in (`flashrig_trace::synth`, the
//!    ScalaAFA Table 2 rows of the same trace families, with their published locality).
//! 2. **Reduce** it with the thesis' segment method (§3.7.2: the longest prefix whose distinct
//!    pages fit the emulated drive; `flashrig_trace::reduce::segment_by_capacity`).
//! 3. **Rename** its pages: the distinct 4 KiB pages, sorted, become pages 0, 1, 2, ... ("if
//!    we renamed logical page 1 to page 1,000 ... the resulting trace would merit the same
//!    drive behavior", §3.7.2). Ranks keep a request's pages consecutive, so the pages per
//!    request are the trace's; a request becomes the whole pages it touches.
//! 4. **Repeat** it: the thesis' traces write 1-50 million pages, our slices a few thousand,
//!    and the erase counts mean something only once every erase unit has been through its
//!    codes' generations. A run replays the repeated trace until [`warm_factor`] times the
//!    drive's physical pages have been written, unmeasured (`precondition.trace_requests`),
//!    then measures [`measure_factor`] times more.
//!
//! The drive is sized per trace after the thesis ("drives that are twice the size of the
//! total number of unique blocks accessed", the same physical drive for every mode): read as
//! the smallest logical space the trace must fit in, WOM-v(1,4)'s, holding twice its distinct
//! pages (see [`pages_per_block`]).

use std::path::{Path, PathBuf};

use flashrig_frontends::error::Error;
use flashrig_frontends::tracecmd::{self, Source};
use flashrig_trace::reduce::segment_by_capacity;
use flashrig_trace::stats::pages;
use flashrig_trace::synth::{self, synth};
use flashrig_trace::Request;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::{Mode, Workload};

/// Erase units of every drive: §3.7.1's "1GB physical emulated drive containing 4 Parallel
/// Units and 160 erase units" (the 16 GB drive's erase-unit size is not stated, so the trace
/// drives keep the count and grow their erase units).
pub(super) const ERASE_UNITS: u32 = 160;
/// Parallel units (planes) of the `qlc-femu` preset: §3.6.1's "default 4 Parallel Units".
pub(super) const PARALLEL_UNITS: u32 = 4;
/// LightNVM's over-provisioning relative to the logical space, as the `qlc-femu` preset has
/// it (§3.6.1: 11% of the device, 11/89 of the logical space), read from the preset so the two
/// cannot drift apart.
fn op_percent() -> f64 {
    flashrig_ssd::SsdConfig::preset("qlc-femu")
        .expect("the built-in qlc-femu preset")
        .firmware
        .over_provisioning_percent
}
/// 4 KiB pages and mapping units (the `qlc-femu` preset).
pub(super) const PAGE_BYTES: u64 = 4096;
/// Blocks hold a multiple of this many pages: 4 keeps the L/CL/CU/U cycle, and 16 keeps it in
/// WOM-v(1,4)'s wide pages too (a block of a quarter as many pages of four times the size).
const PAGES_PER_BLOCK_STEP: u32 = 16;

/// Where a trace comes from.
pub(super) enum Origin {
    /// A real slice: its path under the traces folder, and the request size to assume when
    /// the slice has none.
    Real { file: &'static str, assume_size_bytes: Option<u64> },
    /// A synthetic stand-in for a ScalaAFA Table 2 row (`flashrig_trace::synth`).
    Synth { row: &'static str },
}

/// One of the traces.
pub(super) struct TraceDef {
    pub name: &'static str,
    /// The thesis' source it stands for (§3.7.2, Table 3.3), or what it is.
    pub family: &'static str,
    pub origin: Origin,
}

/// The Microsoft production family, on which the thesis finds WOM-v(1,4) erasing more than
/// NO_WOM (§3.7.3).
pub(super) const MS_PRODUCTION: &str = "Microsoft production";

/// Every trace, real slices first.
pub(super) const TRACES: [TraceDef; 10] = [
    TraceDef {
        name: "hm_0",
        family: "MSR Cambridge",
        origin: Origin::Real { file: "msr/hm_0_first899.csv", assume_size_bytes: None },
    },
    TraceDef {
        name: "prn_0",
        family: "MSR Cambridge",
        origin: Origin::Real {
            file: "msr/prn_0_reduced_SZU047.csv",
            assume_size_bytes: Some(PAGE_BYTES),
        },
    },
    TraceDef {
        name: "Financial1",
        family: "UMass (SPC) OLTP, not one of the thesis' sources",
        origin: Origin::Real { file: "ssdsim/example.ascii", assume_size_bytes: None },
    },
    TraceDef {
        name: "TPC-C",
        family: "MQSim's TPC-C, not one of the thesis' sources",
        origin: Origin::Real { file: "mqsim/tpcc-small.trace", assume_size_bytes: None },
    },
    TraceDef {
        name: "proxy0-synth",
        family: "MSR Cambridge",
        origin: Origin::Synth { row: "proxy0" },
    },
    TraceDef { name: "prn-synth", family: "MSR Cambridge", origin: Origin::Synth { row: "prn" } },
    TraceDef { name: "src2-synth", family: "MSR Cambridge", origin: Origin::Synth { row: "src2" } },
    TraceDef { name: "CFS-synth", family: MS_PRODUCTION, origin: Origin::Synth { row: "CFS" } },
    TraceDef { name: "DAP-synth", family: MS_PRODUCTION, origin: Origin::Synth { row: "DAP" } },
    TraceDef { name: "webmail-synth", family: "FIU", origin: Origin::Synth { row: "webmail" } },
];

/// The definition of a trace by name.
pub(super) fn def(name: &str) -> Option<&'static TraceDef> {
    TRACES.iter().find(|t| t.name == name)
}

/// Whether a trace stands for the Microsoft production traces.
pub(super) fn ms_production(name: &str) -> bool {
    def(name).is_some_and(|d| d.family == MS_PRODUCTION)
}

/// The largest count of distinct pages a reduced trace keeps.
pub(super) fn capacity_pages(mode: Mode) -> u64 {
    match mode {
        Mode::Full => 8192,
        Mode::Quick => 2048,
        Mode::Smoke => 128,
    }
}

/// How many times a trace run's warm-up writes the drive's physical space over: WOM-v(1,4)
/// rewrites a coded page of 4 flash pages up to 15 times between erases (GEN_MAX, §3.4.1), so
/// its first erases come after about 4 physical capacities of writes.
pub(super) fn warm_factor(mode: Mode) -> u64 {
    match mode {
        Mode::Full => 6,
        Mode::Quick => 4,
        Mode::Smoke => 1,
    }
}

/// How many times a trace run's measured replay writes the drive's physical space over.
pub(super) fn measure_factor(mode: Mode) -> u64 {
    match mode {
        Mode::Full => 4,
        Mode::Quick => 2,
        Mode::Smoke => 1,
    }
}

/// Pages per block of a trace's drive: the smallest multiple of 16 with which WOM-v(1,4)'s
/// logical space (a quarter of the physical, less LightNVM's over-provisioning) holds twice
/// the trace's distinct pages.
pub(super) fn pages_per_block(unique_pages: u64) -> u32 {
    // WOM-v(1,4) has one coded page per block of an erase unit's PARALLEL_UNITS blocks.
    let per_block = (2.0 * unique_pages as f64 * (1.0 + op_percent() / 100.0) / ERASE_UNITS as f64)
        .ceil() as u32;
    per_block.div_ceil(PAGES_PER_BLOCK_STEP).max(1) * PAGES_PER_BLOCK_STEP
}

/// Physical flash pages of a drive.
pub(super) fn physical_pages(pages_per_block: u32) -> u64 {
    ERASE_UNITS as u64 * PARALLEL_UNITS as u64 * pages_per_block as u64
}

/// §3.7.1's access patterns (Fig. 3.7b), as `flashrig validate womv` runs them on the FTL
/// alone (what each one is, beside the thesis' sentence, is written at its definition).
pub(crate) use flashrig_frontends::womvlab::Pattern;

/// Pages per block of the micro-benchmarks' drive (§3.7.1's 1 GB drive has 160 erase units
/// of 6.4 MB; ours keeps the count with smaller erase units, which the erase counts do not
/// depend on, and fewer bytes to simulate).
pub(super) fn micro_pages_per_block(mode: Mode) -> u32 {
    match mode {
        Mode::Full | Mode::Quick => PAGES_PER_BLOCK_STEP,
        Mode::Smoke => 4,
    }
}

/// Physical capacities of user data each micro-benchmark writes: §3.7.1's "25GB data to 1GB
/// physical emulated drive" in the full run.
pub(super) fn micro_capacities(mode: Mode) -> u64 {
    match mode {
        Mode::Full => 25,
        Mode::Quick => 4,
        Mode::Smoke => 2,
    }
}

/// The micro-benchmarks' footprint in pages: 80% of WOM-v(1,4)'s logical space (the thesis
/// sizes its workload to WOM-v(1,4)'s logical space, §3.7), 95% for High-GC.
pub(super) fn micro_footprint(mode: Mode, high: bool) -> u64 {
    let logical_1_4 = (physical_pages(micro_pages_per_block(mode)) as f64
        / 4.0
        / (1.0 + op_percent() / 100.0)) as u64;
    if high {
        logical_1_4 * 19 / 20
    } else {
        logical_1_4 * 4 / 5
    }
}

/// The bit-change rates of Fig. 3.7a, in percent (its axis values are not in the text).
pub(super) const CHANGE_PERCENTS: [u32; 5] = [1, 5, 10, 25, 50];

/// A workload ready to write: its requests (one pass of a trace; the whole run of a
/// micro-benchmark), how many times they repeat, and the drive it runs on.
pub(super) struct Prepared {
    pub workload: Workload,
    /// How it was obtained, for the document.
    pub source: String,
    /// One pass.
    pub requests: Vec<Request>,
    /// Passes in the trace file.
    pub passes: u64,
    /// Requests replayed as the warm-up, and measured (0: the whole file, no warm-up).
    pub warm_requests: u64,
    pub measured_requests: u64,
    /// Distinct pages of one pass.
    pub unique_pages: u64,
    /// Requests and distinct pages before the reduction (traces).
    pub original: (u64, u64),
    pub pages_per_block: u32,
}

impl Prepared {
    pub(super) fn trace_name(&self) -> Option<&'static str> {
        match self.workload {
            Workload::Trace(t) => Some(t),
            _ => None,
        }
    }
    /// Pages written by one pass.
    pub(super) fn pass_page_writes(&self) -> u64 {
        self.requests.iter().filter(|r| r.write).map(|r| pages(r).count() as u64).sum()
    }
    /// Share of the page writes of a pass that go to its `fraction` most written pages (at
    /// least one page): the hot share `r` of §3.7.11's model with hot fraction `f`.
    pub(super) fn hot_share(&self, fraction: f64) -> f64 {
        let mut counts: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
        for r in self.requests.iter().filter(|r| r.write) {
            for page in pages(r) {
                *counts.entry(page).or_default() += 1;
            }
        }
        let mut c: Vec<u64> = counts.into_values().collect();
        c.sort_unstable_by(|a, b| b.cmp(a));
        let total: u64 = c.iter().sum();
        let hot = ((c.len() as f64 * fraction).ceil() as usize).max(1).min(c.len());
        c[..hot].iter().sum::<u64>() as f64 / total.max(1) as f64
    }
    /// Share of the requests that read.
    pub(super) fn read_share(&self) -> f64 {
        let reads = self.requests.iter().filter(|r| !r.write).count();
        reads as f64 / self.requests.len().max(1) as f64
    }
}

/// The distinct 4 KiB pages of `reqs`: `reqs` renamed onto pages 0, 1, 2, ... in the order of
/// the original (device, page), each request becoming the whole pages it touched; requests of
/// no bytes are dropped.
pub(super) fn rename(reqs: &[Request]) -> (Vec<Request>, u64) {
    let mut distinct: Vec<(u32, u64)> =
        reqs.iter().flat_map(|r| pages(r).map(move |p| (r.device, p))).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let rank = |d: u32, p: u64| distinct.binary_search(&(d, p)).unwrap_or(0) as u64;
    let out = reqs
        .iter()
        .filter(|r| r.size_bytes > 0)
        .map(|r| {
            let ps = pages(r);
            let n = ps.end - ps.start;
            Request {
                time_ns: r.time_ns,
                write: r.write,
                offset_bytes: rank(r.device, ps.start) * PAGE_BYTES,
                size_bytes: n * PAGE_BYTES,
                device: 0,
            }
        })
        .collect();
    (out, distinct.len() as u64)
}

fn distinct_pages(reqs: &[Request]) -> u64 {
    let mut d: Vec<(u32, u64)> =
        reqs.iter().flat_map(|r| pages(r).map(move |p| (r.device, p))).collect();
    d.sort_unstable();
    d.dedup();
    d.len() as u64
}

/// A trace's requests before reduction, or `None` when its real slice is not in `dir`.
fn load(t: &TraceDef, mode: Mode, dir: &Path) -> Result<Option<(Vec<Request>, String)>, Error> {
    match t.origin {
        Origin::Real { file, assume_size_bytes } => {
            let path = dir.join(file);
            if !path.exists() {
                return Ok(None);
            }
            let src = Source { path: &path, format: None, skip_bad: false, assume_size_bytes };
            let (reqs, _, format) = src.read_all()?;
            let assumed =
                if assume_size_bytes.is_some() { ", 4 KiB assumed per request" } else { "" };
            Ok(Some((reqs, format!("real slice `{file}` ({format}{assumed})"))))
        }
        Origin::Synth { row } => {
            let r = synth::row(row)
                .ok_or_else(|| Error::Input(format!("no ScalaAFA Table 2 row {row}")))?;
            // Enough requests, over a span several times the reduction's capacity, for the
            // segment method to find a prefix of that many distinct pages.
            let cap = capacity_pages(mode);
            let n = cap * 8;
            let span = cap * PAGE_BYTES * 4;
            Ok(Some((
                synth(r, n, span, 1),
                format!("stand-in for {row} (ScalaAFA Table 2; docs/traces.md), {n} requests"),
            )))
        }
    }
}

/// The micro-benchmark of `w` in `mode`: every request, with a fixed order seed.
fn micro_requests(w: Workload, mode: Mode) -> Vec<Request> {
    let ppb = micro_pages_per_block(mode);
    let total = micro_capacities(mode) * physical_pages(ppb);
    let page = |lpn: u64, i: u64| Request {
        time_ns: i * 1000,
        write: true,
        offset_bytes: lpn * PAGE_BYTES,
        size_bytes: PAGE_BYTES,
        device: 0,
    };
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
    let mut v = Vec::with_capacity(total as usize);
    match w {
        Workload::Change(_) | Workload::Micro(Pattern::HotS) => {
            let f = micro_footprint(mode, false);
            for i in 0..total {
                v.push(page(i % f, i));
            }
        }
        Workload::Micro(Pattern::HotR) => {
            let f = micro_footprint(mode, false);
            let mut order: Vec<u64> = (0..f).collect();
            while (v.len() as u64) < total {
                for i in (1..order.len()).rev() {
                    order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
                }
                for &lpn in &order {
                    if v.len() as u64 == total {
                        break;
                    }
                    let i = v.len() as u64;
                    v.push(page(lpn, i));
                }
            }
        }
        Workload::Micro(p) => {
            let f = micro_footprint(mode, p == Pattern::HighGc);
            let hot = if p == Pattern::Cold { (f / 10).max(1) } else { f };
            for i in 0..total {
                let lpn = if i < f { i } else { rng.next_u64() % hot };
                v.push(page(lpn, i));
            }
        }
        Workload::Trace(_) => {}
    }
    v
}

/// Every workload of `mode`, with the real slices looked up in `dir`; also the names of the
/// real slices that were not found.
pub(super) fn prepare(mode: Mode, dir: &Path) -> Result<(Vec<Prepared>, Vec<String>), Error> {
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for t in &TRACES {
        let Some((reqs, source)) = load(t, mode, dir)? else {
            missing.push(t.name.to_string());
            continue;
        };
        let original = (reqs.len() as u64, distinct_pages(&reqs));
        let reduced = segment_by_capacity(&reqs, 0, capacity_pages(mode));
        let (requests, unique_pages) = rename(&reduced);
        let ppb = pages_per_block(unique_pages);
        let mut p = Prepared {
            workload: Workload::Trace(t.name),
            source,
            requests,
            passes: 1,
            warm_requests: 0,
            measured_requests: 0,
            unique_pages,
            original,
            pages_per_block: ppb,
        };
        // A trace that writes nothing has nothing to repeat for: one pass.
        let per_pass = p.pass_page_writes();
        let passes = |factor: u64| match per_pass {
            0 => 1,
            w => (factor * physical_pages(ppb)).div_ceil(w).max(1),
        };
        let (warm, measured) = (passes(warm_factor(mode)), passes(measure_factor(mode)));
        p.passes = warm.max(measured);
        p.warm_requests = warm * p.requests.len() as u64;
        p.measured_requests = measured * p.requests.len() as u64;
        out.push(p);
    }
    let micro = Pattern::ALL
        .iter()
        .map(|&p| Workload::Micro(p))
        .chain(CHANGE_PERCENTS.iter().map(|&c| Workload::Change(c)));
    for w in micro {
        let requests = micro_requests(w, mode);
        let unique_pages = distinct_pages(&requests);
        out.push(Prepared {
            workload: w,
            source: "generated (§3.7.1)".into(),
            original: (requests.len() as u64, unique_pages),
            requests,
            passes: 1,
            warm_requests: 0,
            measured_requests: 0,
            unique_pages,
            pages_per_block: micro_pages_per_block(mode),
        });
    }
    Ok((out, missing))
}

/// The trace file of each workload, written into `dir`: (workload, path).
pub(super) struct Files {
    files: Vec<(Workload, PathBuf)>,
}

impl Files {
    pub(super) fn of(&self, w: Workload) -> &Path {
        self.files.iter().find(|(x, _)| *x == w).map_or(Path::new(""), |(_, p)| p.as_path())
    }
}

/// Writes every workload's requests (every pass) as an MSR trace into `dir`. The change-rate
/// runs replay Hot-S's file (they differ from it only in the device's data, so the change
/// rate of random data, 50%, is the Hot-S run itself).
pub(super) fn write(prepared: &[Prepared], dir: &Path) -> Result<Files, Error> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::Io(format!("cannot create {}: {e}", dir.display())))?;
    let mut files = Vec::new();
    for p in prepared {
        let stem = match p.workload {
            Workload::Trace(t) => t.to_string(),
            Workload::Micro(m) => format!("micro-{}", m.name()),
            Workload::Change(_) => format!("micro-{}", Pattern::HotS.name()),
        };
        let path = dir.join(format!("{stem}.csv"));
        // Each pass starts after the last one's last request.
        let span_ns = p.requests.iter().map(|r| r.time_ns).max().unwrap_or(0)
            - p.requests.iter().map(|r| r.time_ns).min().unwrap_or(0)
            + 1_000;
        let first = p.requests.iter().map(|r| r.time_ns).min().unwrap_or(0);
        let all = (0..p.passes).flat_map(|pass| {
            p.requests
                .iter()
                .map(move |r| Request { time_ns: r.time_ns - first + pass * span_ns, ..*r })
        });
        if !files.iter().any(|(_, q): &(Workload, PathBuf)| *q == path) {
            tracecmd::write_trace(all, &path, "msr")?;
        }
        files.push((p.workload, path));
    }
    Ok(Files { files })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(write: bool, offset_bytes: u64, size_bytes: u64, device: u32) -> Request {
        Request { time_ns: 0, write, offset_bytes, size_bytes, device }
    }

    /// Renaming keeps a request's pages consecutive and its page count, and packs the
    /// distinct pages from 0.
    #[test]
    fn renaming_packs_pages_and_keeps_requests_whole() {
        let reqs = [
            req(true, 1 << 30, 8192, 0),
            req(false, 512, 512, 0),
            req(true, (1 << 30) + 4096, 12288, 0),
            req(true, 0, 4096, 1),
            req(true, 0, 0, 0),
        ];
        let (out, n) = rename(&reqs);
        // Pages: (0,0) (0,2^18) (0,2^18+1) (0,2^18+2) (0,2^18+3) (1,0).
        assert_eq!(n, 6);
        assert_eq!(out.len(), 4, "the empty request is dropped");
        assert_eq!((out[0].offset_bytes, out[0].size_bytes), (4096, 8192));
        assert_eq!((out[1].offset_bytes, out[1].size_bytes), (0, 4096));
        assert_eq!((out[2].offset_bytes, out[2].size_bytes), (8192, 12288));
        assert_eq!((out[3].offset_bytes, out[3].size_bytes), (5 * 4096, 4096));
    }

    /// WOM-v(1,4)'s logical space holds twice the distinct pages, and not much more.
    #[test]
    fn a_trace_drive_holds_twice_its_pages_in_wom_v_1_4() {
        for unique in [1u64, 100, 899, 2048, 8192] {
            let ppb = pages_per_block(unique);
            assert_eq!(ppb % 16, 0);
            let logical_1_4 = physical_pages(ppb) as f64 / 4.0 / (1.0 + op_percent() / 100.0);
            assert!(logical_1_4 >= 2.0 * unique as f64, "{unique}: {ppb}");
            let smaller = physical_pages(ppb - 16) as f64 / 4.0 / (1.0 + op_percent() / 100.0);
            assert!(ppb == 16 || smaller < 2.0 * unique as f64, "{unique}: {ppb} is not the least");
        }
    }

    /// The patterns write what their names say.
    #[test]
    fn micro_patterns_have_their_shapes() {
        let mode = Mode::Smoke;
        let f = micro_footprint(mode, false);
        let total = micro_capacities(mode) * physical_pages(micro_pages_per_block(mode));
        let lpns = |p| -> Vec<u64> {
            micro_requests(Workload::Micro(p), mode)
                .iter()
                .map(|r| r.offset_bytes / PAGE_BYTES)
                .collect()
        };
        let hot_s = lpns(Pattern::HotS);
        assert_eq!(hot_s.len() as u64, total);
        assert!(hot_s.iter().enumerate().all(|(i, &l)| l == i as u64 % f));
        let hot_r = lpns(Pattern::HotR);
        let mut pass: Vec<u64> = hot_r[..f as usize].to_vec();
        pass.sort_unstable();
        assert_eq!(pass, (0..f).collect::<Vec<_>>(), "a Hot-R pass is a permutation");
        assert_ne!(&hot_r[..f as usize], &hot_s[..f as usize]);
        let cold = lpns(Pattern::Cold);
        assert!(cold[f as usize..].iter().all(|&l| l < f / 10));
        let high = lpns(Pattern::HighGc);
        assert!(high.iter().any(|&l| l >= f), "High-GC reaches past Low-GC's footprint");
    }
}
