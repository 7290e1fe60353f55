//! CSAL's runs: the devices at reduced scale, each system as a stack over them, the eight
//! jobs of §6.2, and the plan of every run of every figure.
//!
//! The paper's machine has an 800 GB P5800X, a 15.36 TB P5316 and 4 x 4 TB ZN540s throttled
//! to one P5316 (§6.1, Table 3). Every device here is its sourced preset with its blocks cut
//! shorter and fewer ([`Scale`]), so the capacities shrink by one factor and the ratio of the
//! cache to the capacity tier stays the paper's, while channels, dies, planes and NAND timing
//! (which set each device's bandwidth) stay the presets'. CSAL's chunks and zones (1 GB in the
//! paper, §4.2), its L2P cache (2 GB of a 16 GB table, §4.2) and the preconditioning volume
//! shrink by the same factor; request sizes, queue depths, the 512 KiB compaction batch and
//! the thresholds (20% free chunks, 5 free zones, 10% over-provisioning) do not.
//!
//! The configuration of a run is written out as TOML, so `flashrig reproduce csal
//! --dump-configs DIR` gives files that `flashrig run` repeats one at a time.

use std::path::Path;

use flashrig_frontends::config::Config;
use flashrig_frontends::error::Error;
use flashrig_ssd::SsdConfig;

use super::{Key, Load, Sys, Variant};
use crate::core::{Mode, Plan};

/// The jobs and queue depth of every run (§6.2: "8 FIO jobs issue I/Os with queue depth 128
/// to 8 virtual disks from 8 VMs").
pub(super) const JOBS: u32 = 8;
pub(super) const IODEPTH: u32 = 128;
/// The request sizes of Figs. 3 and 10 ("4-128KB").
pub(super) const SIZES_KIB: [u32; 6] = [4, 8, 16, 32, 64, 128];
/// The two sizes of Figs. 11, 13, 15 and 18-19 ("4KB and 64KB").
pub(super) const TWO_SIZES_KIB: [u32; 2] = [4, 64];
/// The skews of Figs. 11, 13, 15 and 18-19, as Zipf exponents times ten ("none (i.e.,
/// uniform), light (a Zipf of 0.8) and heavy (a Zipf of 1.2)").
pub(super) const SKEWS_X10: [u32; 3] = [0, 8, 12];
/// §6.2's mixed case: "We limit bandwidth per job as 700MB/s in both scenarios."
pub(super) const MIXED_JOB_MB_PER_S: u64 = 700;
/// CSAL's chunk and zone size at full scale (§4.2: "1GB in our case").
const CHUNK_FULL_BYTES: u64 = 1 << 30;
/// CSAL's L2P page cache at full scale (§4.2: "uses another 2GB DRAM to cache the recently
/// accessed pages"; §6.4 "2GB cache (i.e., the default configuration)").
pub(super) const L2P_CACHE_FULL_BYTES: u64 = 2 << 30;
/// §6.4's "non-cache" mode: "we limit the DRAM used for L2P pages to 10KB", which holds two
/// 4 KiB pages (not scaled: it is already almost nothing).
pub(super) const L2P_NONE_BYTES: u64 = 8 << 10;

/// The cache device's capacity at full scale: the P5800X's 800 GB (IDEMA LBA count, Table 3;
/// the `p5800x` preset's source).
pub(super) const CACHE_FULL_BYTES: u64 = 800_166_076_416;

/// How far the devices shrink in a mode, and how long runs last.
#[derive(Clone, Copy, Debug)]
pub(super) struct Scale {
    /// Capacities (and everything sized by them) are divided by this.
    pub divisor: u64,
    /// Virtual milliseconds each measured run lasts, except those that write at random.
    pub runtime_ms: u64,
    /// Virtual milliseconds a run that writes at random (random writes, and the mixed loads)
    /// lasts: long enough to hold whole cycles of the cache's compaction and GC
    /// ([`Scale::runtime_ms_of`]).
    pub random_write_runtime_ms: u64,
    /// Whether runs warm the stack up first (not in a smoke run).
    pub warm_up: bool,
}

/// The factor every mode divides capacities by: 1/1024 keeps the P5316 at 64 GC lines (256
/// at full scale) and the ZN540 bundle at 56 zones; a smaller factor would leave the QLC SSD
/// too few lines for its over-provisioning to hold its GC thresholds (`reduced` checks it).
pub(super) const DIVISOR: u64 = 1024;

pub(super) fn scale(mode: Mode) -> Scale {
    match mode {
        Mode::Full => Scale {
            divisor: DIVISOR,
            runtime_ms: 1000,
            random_write_runtime_ms: 8000,
            warm_up: true,
        },
        Mode::Quick => Scale {
            divisor: DIVISOR,
            runtime_ms: 200,
            random_write_runtime_ms: 2000,
            warm_up: true,
        },
        Mode::Smoke => {
            Scale { divisor: DIVISOR, runtime_ms: 2, random_write_runtime_ms: 2, warm_up: false }
        }
    }
}

impl Scale {
    /// How long a run of `load` measures. A stack that writes at random settles into a cycle,
    /// not a level: compaction fills the capacity tier's free zones, GC empties zones again,
    /// and while GC runs the cache drains slowly and user writes almost stop. At this scale
    /// one cycle of CSAL under 4 KiB random writes lasts 1.5 to 3.5 s of virtual time
    /// (measured with `series_ms = 100` and the `gc_blocks_written` and
    /// `compaction_blocks_written` series, docs/csal.md "Measuring a cycle"), so a 1 s
    /// window measures whichever phase it falls in: successive 1 s windows of one run read
    /// 88 to 472 MiB/s. Eight seconds hold at least two whole cycles; a quick run's two
    /// seconds about one. Reads and sequential writes have no such cycle and keep the short
    /// window.
    pub fn runtime_ms_of(&self, load: Load) -> u64 {
        match load {
            Load::Write { seq: false, .. } | Load::Mixed { .. } => self.random_write_runtime_ms,
            _ => self.runtime_ms,
        }
    }
}

/// Fewest pages a reduced block keeps.
const MIN_PAGES_PER_BLOCK: u32 = 32;

/// A preset with its capacity divided by about `divisor`. Pages per block shrink first, while
/// the block keeps at least 32 pages and a whole number of word lines (so each line, and each
/// zone, keeps its planes and its share of the capacity), then blocks per plane take the rest
/// of the factor (rounded, at least 8). As `reproduce scalaafa` does
/// (docs/reproduce-scalaafa.md), the erase time shrinks with the pages per block, keeping the
/// erase time per programmed page.
///
/// Block-interface presets shrink their pages by powers of two. A zoned preset shrinks them by
/// the largest factor that keeps those rules (any whole factor: 540 pages become 36), and its
/// zones shrink with their blocks' pages only: a zone keeps one block on each of its planes,
/// so a zone written alone keeps the bandwidth of all its planes, which is what one of CSAL's
/// compaction streams gets (a zone of a quarter of the planes would cap a stream at a
/// quarter of that, a mechanism of the scale rather than of the system).
pub(super) fn reduced(preset: &str, divisor: u64) -> Result<SsdConfig, Error> {
    let mut cfg =
        SsdConfig::preset(preset).map_err(|e| Error::Input(format!("SSD preset {preset}: {e}")))?;
    let bits = cfg.nand.cell.bits();
    let zoned = cfg.zoned.is_some();
    let g = &mut cfg.geometry;
    let fits = |d: u32| {
        let pages = g.pages_per_block / d;
        d as u64 <= divisor
            && g.pages_per_block.is_multiple_of(d)
            && pages >= MIN_PAGES_PER_BLOCK
            && pages.is_multiple_of(bits)
    };
    let pages_div = if zoned {
        (1..=g.pages_per_block).rev().find(|&d| fits(d)).unwrap_or(1)
    } else {
        let mut d = 1u32;
        while fits(d * 2) {
            d *= 2;
        }
        d
    };
    g.pages_per_block /= pages_div;
    let blocks_div = divisor as f64 / pages_div as f64;
    g.blocks_per_plane = ((g.blocks_per_plane as f64 / blocks_div).round() as u32).max(8);
    cfg.nand.erase_ns /= pages_div as u64;
    cfg.nand.slc_erase_ns /= pages_div as u64;
    let iu = cfg.firmware.iu_bytes as u64;
    if let Some(z) = cfg.zoned.as_mut() {
        // Capacity rounds down to whole mapping units (it must still fit the zone's blocks),
        // the zone size up to them (it must still hold the capacity).
        z.zone_capacity_bytes = z.zone_capacity_bytes / pages_div as u64 / iu * iu;
        z.zone_bytes = (z.zone_bytes / pages_div as u64).div_ceil(iu) * iu;
    }
    let why = format!("reduced 1/{divisor} by `flashrig reproduce csal` (docs/reproduce-csal.md)");
    for key in [
        "geometry.blocks_per_plane",
        "geometry.pages_per_block",
        "nand.erase_ns",
        "nand.slc_erase_ns",
        "zoned.zone_bytes",
        "zoned.zone_capacity_bytes",
    ] {
        cfg.sources.insert(key.into(), why.clone());
    }
    cfg.validate().map_err(|e| Error::Input(format!("{preset} reduced 1/{divisor}: {e}")))?;
    Ok(cfg)
}

/// The keys a reduced preset overrides, as inline-table entries.
fn overrides(cfg: &SsdConfig) -> String {
    let mut v = format!(
        "geometry = {{ blocks_per_plane = {}, pages_per_block = {} }}, \
         nand = {{ erase_ns = {}, slc_erase_ns = {} }}",
        cfg.geometry.blocks_per_plane,
        cfg.geometry.pages_per_block,
        cfg.nand.erase_ns,
        cfg.nand.slc_erase_ns
    );
    if let Some(z) = &cfg.zoned {
        v.push_str(&format!(
            ", zoned = {{ zone_bytes = {}, zone_capacity_bytes = {}, zone_planes = {} }}",
            z.zone_bytes, z.zone_capacity_bytes, z.zone_planes
        ));
    }
    v
}

/// An SSD member as TOML (an inline table) with its reduced geometry and a name. Every
/// capacity device stores 64 metadata bytes per 4 KiB block, the 4096+64 format CSAL's layout
/// uses on both tiers (§4.2); the OOB of the QLC presets has room for it (docs/ssd-presets.md).
fn ssd_member(name: &str, preset: &str, payload: &str, s: Scale) -> Result<String, Error> {
    let cfg = reduced(preset, s.divisor)?;
    let md = if name == "qlc" { ", firmware = { md_bytes = 64 }" } else { "" };
    Ok(format!(
        "{{ type = \"ssd\", name = \"{name}\", preset = \"{preset}\", payload = \"{payload}\", {}{md} }}",
        overrides(&cfg)
    ))
}

/// The fast device: the P5800X, whose bytes CSAL reads back (its L2P pages and metadata) and
/// so are stored in full.
fn hp(s: Scale) -> Result<String, Error> {
    ssd_member("hp", "p5800x", "full", s)
}

/// The block-interface QLC SSD (fingerprints only: its contents are timing here).
fn qlc_block(s: Scale) -> Result<String, Error> {
    ssd_member("qlc", "p5316-qlc", "tag", s)
}

/// The zoned capacity device of CSAL-ZNS and dm-zoned: the ZN540 bundle.
fn qlc_zns(s: Scale) -> Result<String, Error> {
    ssd_member("qlc", "zn540x4", "tag", s)
}

/// CSAL's chunk at this scale (the paper's 1 GB over the divisor, at least 1 MiB: about as
/// many chunks on the fast device as the paper's).
pub(super) fn chunk_bytes(s: Scale) -> u64 {
    (CHUNK_FULL_BYTES / s.divisor).max(1 << 20)
}

/// The zone CSAL-BLK's emulation gives the P5316: the ZN540 bundle's writable zone at this
/// scale, so CSAL-BLK and CSAL-ZNS see zones of one size.
pub(super) fn zone_bytes(s: Scale) -> Result<u64, Error> {
    let cfg = reduced("zn540x4", s.divisor)?;
    Ok(cfg.zoned.map_or(CHUNK_FULL_BYTES / s.divisor, |z| z.zone_capacity_bytes))
}

/// The device section of a system's stack.
fn device(key: &Key, s: Scale) -> Result<String, Error> {
    let chunk = chunk_bytes(s);
    Ok(match key.system {
        // The stack is the SSD itself: its member table, as the device.
        Sys::RawQlc => format!("device = {}\n", qlc_block(s)?),
        Sys::OpenCas => format!(
            "[device]\ntype = \"wbcache\"\nname = \"opencas\"\nmembers = [\n  {},\n  {},\n]\n",
            hp(s)?,
            qlc_block(s)?
        ),
        Sys::DmZoned => format!(
            "[device]\ntype = \"dmzoned\"\nname = \"dmzoned\"\nmembers = [\n  {},\n  {},\n]\n",
            hp(s)?,
            qlc_zns(s)?
        ),
        Sys::CsalBlk | Sys::CsalZns => {
            let capacity = if key.system == Sys::CsalBlk {
                format!(
                    "{{ type = \"zoned\", name = \"zoned\", zone = \"{}B\", member = {} }}",
                    zone_bytes(s)?,
                    qlc_block(s)?
                )
            } else {
                qlc_zns(s)?
            };
            let (gc_iso, user_iso) = match key.variant {
                Variant::NoIsolation => (false, false),
                Variant::GcIsolation => (true, false),
                _ => (true, true),
            };
            let l2p = match key.variant {
                Variant::L2pNone => L2P_NONE_BYTES,
                // More than the whole table (4 bytes per 4 KiB of the capacity tier).
                Variant::L2pFull => 1 << 40,
                _ => (L2P_CACHE_FULL_BYTES / s.divisor).max(4096),
            };
            format!(
                "[device]\ntype = \"csal\"\nname = \"csal\"\ntenants = {JOBS}\n\
                 chunk = \"{chunk}B\"\nl2p_cache = \"{l2p}B\"\ngc_isolation = {gc_iso}\n\
                 user_isolation = {user_iso}\nmembers = [\n  {},\n  {capacity},\n]\n",
                hp(s)?
            )
        }
    })
}

/// The workload and preconditioning sections of a load.
fn workload(load: Load, s: Scale) -> String {
    let (rw, bs_kib, zipf, mix) = match load {
        Load::Write { seq, bs_kib, zipf_x10 } => {
            (if seq { "write" } else { "randwrite" }, bs_kib, zipf_x10, None)
        }
        Load::Read { seq, bs_kib, zipf_x10 } => {
            (if seq { "read" } else { "randread" }, bs_kib, zipf_x10, None)
        }
        // One job in eight reads 64 KiB, the others write (§6.2: "7 FIO jobs for writes and 1
        // FIO job for reads"; with 64 KiB writes "4 FIO jobs for writes and other 4 jobs for
        // reads"). Every job here has the same mix of reads and writes, in those shares.
        Load::Mixed { write_kib } => {
            let read_percent = if write_kib == 4 { 13 } else { 50 };
            ("randrw", write_kib, 0, Some(read_percent))
        }
    };
    let dist =
        if zipf == 0 { "uniform".to_string() } else { format!("zipf:{:.1}", zipf as f64 / 10.0) };
    let mut w = format!(
        "[workload]\nrw = \"{rw}\"\nbs = \"{bs_kib}KiB\"\niodepth = {IODEPTH}\njobs = {JOBS}\n\
         random_distribution = \"{dist}\"\n{}\nstamp = false\n\
         offset_increment = \"{{partition}}\"\nrange = \"{{partition}}\"\n",
        // A smoke run (no warm-up) reads mostly unwritten blocks, which some stacks answer
        // without touching a device: it ends by volume, not by a clock that may not move.
        if s.warm_up {
            format!("runtime_ms = {}\nramp_ms = {}", s.runtime_ms_of(load), ramp_ms(s))
        } else {
            "size = \"512KiB\"".to_string()
        }
    );
    if let Some(read_percent) = mix {
        // The mixed case's 64 KiB reads: fio's bssplit per direction is not modelled, so
        // reads and writes share the write size (docs/reproduce-csal.md).
        let rate = MIXED_JOB_MB_PER_S * 1_000_000 / (bs_kib as u64 * 1024);
        w.push_str(&format!("rwmixread = {read_percent}\nrate_iops = {rate}\n"));
    }
    w
}

/// A run's configuration as TOML. `partition` is each job's share of the stack, filled in
/// once the stack's capacity is known. Every load of one stack shares the stack and the
/// warm-up (`[precondition]`); only `[workload]` differs, so the loads run as phases of one
/// run ([`plan`]).
pub(super) fn config_text(key: &Key, s: Scale, partition_bytes: u64) -> Result<String, Error> {
    let workload = workload(key.load, s).replace("{partition}", &format!("{partition_bytes}B"));
    run_text(key, s, &workload)
}

/// A configuration of `key`'s stack and warm-up with `workload` (a `[workload]` table).
fn run_text(key: &Key, s: Scale, workload: &str) -> Result<String, Error> {
    let precondition = if s.warm_up {
        format!(
            "[precondition]\nfill = true\nfill_bs = \"128KiB\"\nrandom_overwrite_ms = {}\n\
             iodepth = {IODEPTH}\n",
            warmup_ms(s)
        )
    } else {
        String::new()
    };
    Ok(format!(
        "# flashrig reproduce csal: {label}\nseed = 1\nruntime = \"sim\"\n\n{device}\n{workload}\n\
         {precondition}",
        label = key.label(),
        device = device(key, s)?,
    ))
}

/// The unmeasured phase before the sequential writes: one more sequential pass over the whole
/// stack, each job over its partition in 128 KiB writes. The random phases before it leave
/// every zone and line about 90% valid, and the first pass of sequential writes over that
/// pays for collecting them, which the paper's sequential runs, minutes long, do not show
/// (§6.2: sequential writes are "bounded by the bandwidth" of the capacity devices). This is
/// SNIA's workload-dependent preconditioning for a sequential test (docs/reproduce-csal.md,
/// Method).
fn sequential_pass(partition_bytes: u64) -> String {
    format!(
        "[workload]\nrw = \"write\"\nbs = \"128KiB\"\niodepth = {IODEPTH}\njobs = {JOBS}\n\
         stamp = false\noffset_increment = \"{partition_bytes}B\"\nrange = \"{partition_bytes}B\"\n"
    )
}

/// Where a load runs in its stack's sequence of phases: the paper's order (§6.2: "we first
/// evaluate writes and reads (including uniform and skewed workloads for both of them), and
/// then we evaluate mixed reads and writes"): random writes, uniform then skewed; the
/// sequential pass and the sequential writes; reads, uniform, skewed, sequential; the mixed
/// loads. Within a group, smaller requests and lighter skews first.
fn phase_rank(load: Load) -> (u8, u32, u32) {
    match load {
        Load::Write { seq: false, bs_kib, zipf_x10 } => (u8::from(zipf_x10 > 0), zipf_x10, bs_kib),
        Load::Write { seq: true, bs_kib, .. } => (3, 0, bs_kib),
        Load::Read { seq: false, bs_kib, zipf_x10 } => {
            (4 + u8::from(zipf_x10 > 0), zipf_x10, bs_kib)
        }
        Load::Read { seq: true, bs_kib, .. } => (6, 0, bs_kib),
        Load::Mixed { write_kib } => (7, 0, write_kib),
    }
}

/// The rank of the sequential pass: before the first sequential write.
const SEQUENTIAL_PASS_RANK: (u8, u32, u32) = (2, 0, 0);

/// How long 4 KiB random overwrites run after the sequential fill: the paper's warm-up, "twice
/// whole-disk sequential writes followed by four hours of 4KB random writes" (§6.2), with the
/// four hours divided by the scale divisor. Every device here keeps its full bandwidth and
/// 1/`divisor` of its capacity, so a time that fills or turns over a device scales as the
/// capacity does: 4 h / 1024 = 14.06 s moves the same share of every device as the paper's
/// four hours, whatever rate each system takes random writes at. A bound in bytes (the first
/// cut: twice the cache device) stopped CSAL just as its zones filled and GC began, and the
/// measured windows then sat in GC's start-up transient instead of the steady state the
/// paper's four hours reach; and dm-zoned, at well under 1 MB/s, could not be given the
/// same bytes at all.
pub(super) fn warmup_ms(s: Scale) -> u64 {
    WARMUP_FULL_MS / s.divisor
}

/// The paper's random-write warm-up (§6.2): four hours.
const WARMUP_FULL_MS: u64 = 4 * 3600 * 1000;

/// The capacity tier's write bandwidth: the ZN540 bundle is throttled to one P5316's 2.5 GB/s
/// write (§6.1), which the P5316 itself is rated at (Table 3).
const CAPACITY_WRITE_BYTES_PER_S: u64 = 2_500_000_000;

/// How long each run's jobs run before the measured window (fio's `ramp_time`): the time the
/// capacity tier takes to write the cache device twice at its full write bandwidth, so that
/// a cache holding the preconditioning's data has turned over to the workload's own before
/// measuring. The paper's runs last minutes (a cache turns over within seconds); runs here
/// last 200 ms or 1 s, shorter than one turnover, and would otherwise measure how the
/// preconditioning left the cache (docs/reproduce-csal.md, Method).
pub(super) fn ramp_ms(s: Scale) -> u64 {
    let cache_bytes = CACHE_FULL_BYTES / s.divisor;
    2 * cache_bytes * 1000 / CAPACITY_WRITE_BYTES_PER_S
}

/// Every key each figure needs in `mode`.
pub(super) fn keys(mode: Mode) -> Vec<Key> {
    let sizes: &[u32] = match mode {
        Mode::Full => &SIZES_KIB,
        Mode::Quick => &[4, 16, 64, 128],
        Mode::Smoke => &[4, 64],
    };
    let mut v = Vec::new();
    for sys in Sys::ALL {
        // Figs. 3 and 10: uniform writes, random and sequential.
        for &bs in sizes {
            for seq in [false, true] {
                v.push(Key::new(sys, Load::Write { seq, bs_kib: bs, zipf_x10: 0 }));
            }
        }
        // Fig. 12: uniform reads; Fig. 13: skewed reads; Fig. 14: mixed.
        for bs in TWO_SIZES_KIB {
            for seq in [false, true] {
                v.push(Key::new(sys, Load::Read { seq, bs_kib: bs, zipf_x10: 0 }));
            }
            for z in [8, 12] {
                v.push(Key::new(sys, Load::Read { seq: false, bs_kib: bs, zipf_x10: z }));
            }
            v.push(Key::new(sys, Load::Mixed { write_kib: bs }));
        }
        // Figs. 11 and 15: skewed writes (dm-zoned too: the paper leaves it out of Fig. 11
        // for being under 10 MB/s, which the table checks).
        for bs in TWO_SIZES_KIB {
            for z in [8, 12] {
                v.push(Key::new(sys, Load::rand_write(bs, z)));
            }
        }
    }
    // Fig. 18: isolation; Fig. 19: the L2P cache.
    for bs in TWO_SIZES_KIB {
        for z in SKEWS_X10 {
            for variant in [Variant::NoIsolation, Variant::GcIsolation] {
                v.push(Key { variant, ..Key::new(Sys::CsalZns, Load::rand_write(bs, z)) });
            }
        }
        for z in [0, 12] {
            for variant in [Variant::L2pNone, Variant::L2pFull] {
                v.push(Key { variant, ..Key::new(Sys::CsalZns, Load::rand_write(bs, z)) });
            }
        }
    }
    v.sort();
    v.dedup();
    v
}

/// The capacity a system's stack offers, from a probe of its configuration (the workload's
/// partitions are eighths of it).
fn capacity_bytes(key: &Key, s: Scale) -> Result<u64, Error> {
    let text = format!("runtime = \"sim\"\n{}", device(key, s)?);
    let cfg = Config::from_toml(&text, Path::new("<flashrig reproduce csal>"))?;
    let (res, _) =
        flashrig_runtime::run(flashrig_runtime::RuntimeKind::Sim, 1, move || async move {
            flashrig_frontends::stack::build(&cfg.device).await.map(|d| d.info().capacity_bytes())
        });
    res
}

/// The sequence (one phased run) a key's load runs in: its stack, e.g. `CSAL-ZNS-gciso`.
fn sequence_label(key: &Key) -> String {
    format!("{}{}", key.system.name(), key.variant.suffix())
}

/// The plan: one phased run per stack (system and variant), after one warm-up, its loads in
/// [`phase_rank`] order (§6.2 warms the devices up once and then runs the loads in turn).
pub(super) fn plan(mode: Mode) -> Result<Plan<Key>, Error> {
    let s = scale(mode);
    let mut plan = Plan::default();
    let mut capacities = std::collections::BTreeMap::new();
    let mut keys = keys(mode);
    keys.sort_by_key(|k| (k.system, k.variant, phase_rank(k.load)));
    let parse = |text: &str| Config::from_toml(text, Path::new("<flashrig reproduce csal>"));
    for key in keys {
        let probe = Key { load: Load::rand_write(4, 0), ..key };
        let capacity = match capacities.get(&probe) {
            Some(&c) => c,
            None => {
                let c = capacity_bytes(&probe, s)?;
                capacities.insert(probe, c);
                c
            }
        };
        // Each job's partition: an eighth, in whole 128 KiB requests.
        let partition = capacity / JOBS as u64 / (128 << 10) * (128 << 10);
        let sequence = sequence_label(&key);
        if s.warm_up && phase_rank(key.load) > SEQUENTIAL_PASS_RANK {
            let label = format!("{sequence}-seqpass");
            if !plan.jobs.iter().any(|j| j.label == label) {
                let config = parse(&run_text(&key, s, &sequential_pass(partition))?)?;
                plan.add_phase(&sequence, None, label, config, 1.0);
            }
        }
        let config = parse(&config_text(&key, s, partition)?)?;
        let weight = match key.load {
            Load::Write { bs_kib, .. } | Load::Mixed { write_kib: bs_kib } => 128.0 / bs_kib as f64,
            Load::Read { .. } => 1.0,
        };
        plan.add_phase(&sequence, Some(key), key.label(), config, weight);
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every device shrinks to within a factor of two of its share, so the cache keeps about
    /// the paper's ratio to the capacity tier (800 GB : 15.36 TB); zoned devices keep zones.
    #[test]
    fn reduced_devices_keep_their_shares() {
        for mode in [Mode::Smoke, Mode::Quick, Mode::Full] {
            let d = scale(mode).divisor;
            for preset in ["p5800x", "p5316-qlc", "zn540x4"] {
                let full = SsdConfig::preset(preset).unwrap();
                let cfg = reduced(preset, d).unwrap();
                let l_full = flashrig_ssd::media::Layout::new(&full).unwrap();
                let l = flashrig_ssd::media::Layout::new(&cfg).unwrap();
                let share = l.capacity_bytes() as f64 / l_full.capacity_bytes() as f64 * d as f64;
                assert!((0.5..2.0).contains(&share), "{preset} at 1/{d}: {share:.2} of its share");
                if let Some(z) = &cfg.zoned {
                    assert!(z.zone_capacity_bytes > 0 && z.zone_capacity_bytes <= z.zone_bytes);
                }
            }
        }
    }
}
