//! Goal: the `csal` engine (CSAL, csal-eurosys24.txt §4–§5) returns what was written with
//! compaction, GC and L2P paging all running, over several tenants; loses no flushed write
//! (or trim) in a power cut at any moment — at a random time, in the middle of a compaction,
//! while a compaction runs beside a checkpoint, in the middle of a GC pass, and during
//! recovery itself — and each of the three recovery
//! modes (naive scan, P2L tables, checkpoint) rebuilds the same state from the same media;
//! a clean shutdown is loaded without replay; the SID conflict rules of §4.4 hold; with user
//! isolation every zone holds one tenant's blocks; the zoned member's open-zone limit is
//! respected; recovery reports its named steps with their virtual time (Table 4's shape);
//! a fast member without metadata bytes (records in blocks of their own) survives the same
//! crashes; isolating GC and then users lowers the zoned write amplification (Fig. 18's
//! direction); client I/O from two real threads is safe; a seed replays exactly.
//!
//! Method: `Csal` over a fast member (a RAM-like `Volatile` with 64 metadata bytes per block
//! and a volatile write cache) and a zoned member (`Zoned` over another `Volatile`), each
//! behind `Jitter` (so commands take virtual time and interleave) and `Cut` (this file: a
//! power switch; once off, nothing passes and commands in flight fail as they complete).
//! Geometry is tiny (32-block chunks, 64-block zones, 2 cached L2P pages of 3, 3 tenants,
//! 4 open zones at most for 6 streams) so that a few thousand commands of the seeded
//! reference-model driver (`flashrig_check::run_check`) run compaction, GC, page faults and
//! zone finishes many times. A crash cuts the switch, takes each `Volatile`'s unflushed
//! writes and lets a seeded half of them reach the media (`Unflushed::tear`); copies of the
//! media are then recovered in each mode, read back against the model
//! (`verify_after_crash`) and against each other. Everything runs on the simulated runtime,
//! so a seed replays exactly; failures print `FLASHRIG_SEED=<n>`.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use common::{zoned_opts, BS, FAST_BLOCKS, MD, ZMEM_BLOCKS};
use flashrig_blockdev::{
    snapshot_stack, BlockDevice, DevError, DevRef, DevResult, DeviceInfo, WriteHints, ZoneCommand,
    ZoneReply,
};
use flashrig_check::{
    run_check, run_ops, seeds, verify_after_crash, CheckConfig, Jitter, Model, OpWeights, Store,
    Volatile,
};
use flashrig_engines::csal::recover::{resolve, trim_kills, Candidate, RECOVERY_STEPS};
use flashrig_engines::csal::RecoveryMode;
use flashrig_engines::{Csal, CsalOptions, Zoned, ZonedOptions};
use flashrig_runtime::{run, sleep_ns, spawn, RuntimeKind};
use parking_lot::Mutex;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

const JITTER_NS: u64 = 4_000;
const MODES: [RecoveryMode; 3] = [RecoveryMode::Naive, RecoveryMode::P2l, RecoveryMode::Checkpoint];

fn opts(mode: RecoveryMode) -> CsalOptions {
    CsalOptions {
        chunk_blocks: Some(32),
        l2p_cache_pages: 2,
        tenants: 3,
        batch_blocks: 16,
        recovery: mode,
        ..CsalOptions::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Power

/// A power switch in front of a device: while on, every command passes (zone commands too);
/// once off, none does, and a command in flight at that moment fails as it completes. An
/// optional budget turns it off by itself after that many more commands (a crash at an exact
/// command boundary, used to crash recovery).
struct Cut {
    inner: DevRef,
    on: Arc<AtomicBool>,
    budget: Arc<AtomicU64>,
}

impl Cut {
    fn new(inner: DevRef, on: Arc<AtomicBool>, budget: Arc<AtomicU64>) -> Cut {
        Cut { inner, on, budget }
    }

    fn check(&self) -> DevResult<()> {
        let b = self.budget.load(Ordering::SeqCst);
        if b != u64::MAX {
            if b == 0 {
                self.on.store(false, Ordering::SeqCst);
            } else {
                self.budget.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.alive()
    }

    fn alive(&self) -> DevResult<()> {
        if !self.on.load(Ordering::SeqCst) {
            return Err(DevError::DeviceFailed { name: self.inner.info().name.clone() });
        }
        Ok(())
    }

    fn done<T>(&self, r: DevResult<T>) -> DevResult<T> {
        self.alive()?;
        r
    }
}

#[async_trait(?Send)]
impl BlockDevice for Cut {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn kind(&self) -> &'static str {
        "cut"
    }
    fn children(&self) -> Vec<DevRef> {
        vec![self.inner.clone()]
    }
    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        self.check()?;
        let r = self.inner.read(lba, buf, md).await;
        self.done(r)
    }
    async fn write(&self, lba: u64, d: &[u8], md: Option<&[u8]>, h: WriteHints) -> DevResult<()> {
        self.check()?;
        let r = self.inner.write(lba, d, md, h).await;
        self.done(r)
    }
    async fn flush(&self) -> DevResult<()> {
        self.check()?;
        let r = self.inner.flush().await;
        self.done(r)
    }
    async fn trim(&self, lba: u64, n: u64) -> DevResult<()> {
        self.check()?;
        let r = self.inner.trim(lba, n).await;
        self.done(r)
    }
    async fn zone(&self, cmd: ZoneCommand) -> DevResult<ZoneReply> {
        self.check()?;
        let r = self.inner.zone(cmd).await;
        self.done(r)
    }
}

/// Both members' durable media.
#[derive(Clone)]
struct Media {
    fast: Store,
    zoned: Store,
    /// Metadata bytes per block of the fast member (0: csal's record blocks instead).
    fast_md: u32,
    /// The write unit the zoned member's member reports (`optimal_io_blocks`; 1: none).
    write_unit: u32,
}

impl Media {
    fn new() -> Media {
        Media::with_fast_md(MD)
    }
    fn with_fast_md(fast_md: u32) -> Media {
        Media { fast: Store::default(), zoned: Store::default(), fast_md, write_unit: 1 }
    }
    fn with_write_unit(write_unit: u32) -> Media {
        Media { write_unit, ..Media::new() }
    }
    fn copy(&self) -> Media {
        Media {
            fast: self.fast.copy(),
            zoned: self.zoned.copy(),
            fast_md: self.fast_md,
            write_unit: self.write_unit,
        }
    }
}

/// A member that reports a write unit of `unit` blocks (as a block SSD reports its mapping
/// unit) and counts the writes to its first `zone_area` blocks that do not end on one.
struct Unit {
    inner: DevRef,
    info: DeviceInfo,
    zone_area: u64,
    unaligned: Arc<AtomicU64>,
}

#[async_trait(?Send)]
impl BlockDevice for Unit {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn kind(&self) -> &'static str {
        "unit"
    }
    fn children(&self) -> Vec<DevRef> {
        vec![self.inner.clone()]
    }
    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        self.inner.read(lba, buf, md).await
    }
    async fn write(&self, lba: u64, d: &[u8], md: Option<&[u8]>, h: WriteHints) -> DevResult<()> {
        let end = lba + (d.len() / self.info.block_size as usize) as u64;
        if lba < self.zone_area && !end.is_multiple_of(self.info.optimal_io_blocks as u64) {
            self.unaligned.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.write(lba, d, md, h).await
    }
    async fn flush(&self) -> DevResult<()> {
        self.inner.flush().await
    }
    async fn trim(&self, lba: u64, n: u64) -> DevResult<()> {
        self.inner.trim(lba, n).await
    }
}

/// A powered-up stack over some media.
struct Rig {
    csal: Arc<Csal>,
    /// The csal device as the driver sees it (behind the switch).
    dev: DevRef,
    on: Arc<AtomicBool>,
    vols: [Arc<Volatile>; 2],
    /// Writes to the zones that ended off the member's write unit (`Media::write_unit`).
    unaligned: Arc<AtomicU64>,
}

impl Rig {
    /// Cuts power and lets a seeded half of each member's unflushed writes reach its media.
    fn crash(&self, seed: u64) {
        self.on.store(false, Ordering::SeqCst);
        for (i, v) in self.vols.iter().enumerate() {
            v.power_cut().tear(v.media(), seed * 7 + i as u64, 50);
        }
    }
}

async fn power_up(media: &Media, seed: u64, o: CsalOptions, create: bool) -> DevResult<Rig> {
    power_up_with_budget(media, seed, o, create, u64::MAX).await
}

async fn power_up_with_budget(
    media: &Media,
    seed: u64,
    o: CsalOptions,
    create: bool,
    budget: u64,
) -> DevResult<Rig> {
    power_up_with(media, seed, o, create, budget, JITTER_NS).await
}

async fn power_up_with(
    media: &Media,
    seed: u64,
    o: CsalOptions,
    create: bool,
    budget: u64,
    jitter_ns: u64,
) -> DevResult<Rig> {
    let on = Arc::new(AtomicBool::new(true));
    let budget = Arc::new(AtomicU64::new(budget));
    let fv = Arc::new(Volatile::new("fast", BS, FAST_BLOCKS, media.fast_md, media.fast.clone()));
    let zv = Arc::new(Volatile::new("zmem", BS, ZMEM_BLOCKS, MD, media.zoned.clone()));
    let j = |d: DevRef, s: u64| -> DevRef { Arc::new(Jitter::new(d, jitter_ns, s)) };
    let cut = |d: DevRef| -> DevRef { Arc::new(Cut::new(d, on.clone(), budget.clone())) };
    let fast = cut(j(fv.clone(), seed));
    let mut zmem = cut(j(zv.clone(), seed + 1));
    let unaligned = Arc::new(AtomicU64::new(0));
    if media.write_unit > 1 {
        let mut info = zmem.info().clone();
        info.optimal_io_blocks = media.write_unit;
        let zone_area = ZMEM_BLOCKS - 4;
        zmem = Arc::new(Unit { inner: zmem, info, zone_area, unaligned: unaligned.clone() });
    }
    let zoned: DevRef = Arc::new(if create {
        Zoned::create("zoned", zmem, zoned_opts()).await?
    } else {
        Zoned::open("zoned", zmem, zoned_opts()).await?
    });
    let csal = Arc::new(if create {
        Csal::create("csal", fast, zoned, o).await?
    } else {
        Csal::open("csal", fast, zoned, o).await?
    });
    let dev = cut(csal.clone());
    Ok(Rig { csal, dev, on, vols: [fv, zv], unaligned })
}

fn counters(c: &Csal) -> BTreeMap<String, u64> {
    snapshot_stack(c).counters
}

fn check_cfg(seed: u64, ops: u64, span: u64) -> CheckConfig {
    CheckConfig {
        seed,
        ops,
        queue_depth: 8,
        max_io_blocks: 8,
        span_blocks: Some(span),
        weights: OpWeights { read: 35, write: 50, trim: 8, flush: 7 },
        fua_percent: 5,
        ..CheckConfig::default()
    }
}

/// Every LBA the model touched, as each recovered instance reads it.
async fn contents(dev: &DevRef, model: &Arc<Mutex<Model>>) -> Vec<Vec<u8>> {
    let lbas = model.lock().touched_lbas();
    let mut out = Vec::new();
    for l in lbas {
        let mut b = vec![0u8; BS as usize];
        dev.read(l, &mut b, None).await.expect("a read after recovery");
        out.push(b);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn reference_model_with_compaction_gc_and_paging() {
    for seed in seeds(100, 3) {
        let (res, _) = run(RuntimeKind::Sim, 2, move || async move {
            let media = Media::new();
            let rig =
                power_up(&media, seed, opts(RecoveryMode::Checkpoint), true).await.expect("create");
            let span = rig.dev.info().num_blocks;
            let model = Arc::new(Mutex::new(Model::for_device(rig.dev.info(), seed)));
            let r = run_check(rig.dev.clone(), model, &check_cfg(seed, 4000, span)).await;
            (r.map(|_| ()), counters(&rig.csal))
        });
        let (r, c) = res;
        if let Err(e) = r {
            panic!("{e}");
        }
        for k in [
            "compaction_blocks_written",
            "gc_blocks_written",
            "l2p_misses",
            "l2p_page_writes",
            "zone_resets",
            "zone_finishes",
            "checkpoints",
            "compactions_beside_checkpoint",
        ] {
            assert!(c[k] > 0, "seed {seed}: {k} = 0 (FLASHRIG_SEED={seed}); counters {c:?}");
        }
    }
}

#[test]
fn compaction_and_gc_writes_end_on_the_zoned_members_write_unit() {
    // A zoned member over a device with a 4-block write unit (a block SSD's mapping unit under
    // the zone emulation, as CSAL-BLK's P5316): every compaction and GC write ends on a unit,
    // filler blocks complete the last one, and the data is still all there.
    for seed in seeds(150, 2) {
        let (res, _) = run(RuntimeKind::Sim, 2, move || async move {
            let media = Media::with_write_unit(4);
            let rig =
                power_up(&media, seed, opts(RecoveryMode::Checkpoint), true).await.expect("create");
            let span = rig.dev.info().num_blocks;
            let model = Arc::new(Mutex::new(Model::for_device(rig.dev.info(), seed)));
            let r = run_check(rig.dev.clone(), model, &check_cfg(seed, 4000, span)).await;
            (r.map(|_| ()), counters(&rig.csal), rig.unaligned.load(Ordering::SeqCst))
        });
        let (r, c, unaligned) = res;
        if let Err(e) = r {
            panic!("{e} (FLASHRIG_SEED={seed})");
        }
        for k in ["compaction_blocks_written", "gc_blocks_written", "pad_blocks_written"] {
            assert!(c[k] > 0, "seed {seed}: {k} = 0 (FLASHRIG_SEED={seed}); counters {c:?}");
        }
        assert_eq!(unaligned, 0, "seed {seed}: writes ending off the unit (FLASHRIG_SEED={seed})");
    }
}

#[test]
fn padded_zones_recover_the_same_state_in_every_mode() {
    for seed in seeds(250, 2) {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let at_ns = 5_000_000 + rng.next_u64() % 60_000_000;
        let (c, _) =
            run_crash_case_on("padded zones", seed, Media::with_write_unit(4), move |_, t| {
                t >= at_ns
            });
        assert!(c["user_writes"] > 0);
    }
}

/// Runs the driver until `cut_when` says so (polled every few microseconds of virtual time),
/// crashes, and recovers copies of the media in all three modes: each must pass the model's
/// after-crash check, and all must read back the same contents. Returns the counters at the
/// crash and the recovery reports.
async fn crash_and_recover_all(
    seed: u64,
    media: Media,
    cut_when: impl Fn(&BTreeMap<String, u64>, u64) -> bool + 'static,
) -> Result<(BTreeMap<String, u64>, Vec<flashrig_engines::csal::RecoveryReport>), String> {
    let rig = power_up(&media, seed, opts(RecoveryMode::Checkpoint), true)
        .await
        .map_err(|e| e.to_string())?;
    let span = rig.dev.info().num_blocks;
    let model = Arc::new(Mutex::new(Model::for_device(rig.dev.info(), seed)));
    let dev = rig.dev.clone();
    let m2 = model.clone();
    let driver = spawn(async move { run_ops(dev, m2, &check_cfg(seed, 1_000_000, span)).await });
    let mut t = 0u64;
    loop {
        sleep_ns(3_000).await;
        t += 3_000;
        let c = counters(&rig.csal);
        if cut_when(&c, t) {
            break;
        }
        if t > 2_000_000_000 {
            return Err("the crash condition never came".into());
        }
    }
    let at_crash = counters(&rig.csal);
    rig.crash(seed);
    match driver.await {
        Err(e) if e.mismatch => return Err(format!("before the crash: {e}")),
        _ => {}
    }
    drop(rig);
    let mut reports = Vec::new();
    let mut seen: Option<(RecoveryMode, Vec<Vec<u8>>)> = None;
    for mode in MODES {
        let m = media.copy();
        let r = power_up(&m, seed + 10, opts(mode), false)
            .await
            .map_err(|e| format!("recovery ({}) failed: {e}", mode.name()))?;
        verify_after_crash(&r.dev, &model)
            .await
            .map_err(|e| format!("recovery {}: {e}", mode.name()))?;
        let got = contents(&r.dev, &model).await;
        if let Some((first, want)) = &seen {
            if *want != got {
                let lbas = model.lock().touched_lbas();
                let diff: Vec<u64> =
                    (0..got.len()).filter(|&i| got[i] != want[i]).map(|i| lbas[i]).collect();
                return Err(format!(
                    "recovery {} and {} differ at LBAs {diff:?}",
                    first.name(),
                    mode.name()
                ));
            }
        } else {
            seen = Some((mode, got));
        }
        let rep = r.csal.recovery().expect("a report");
        reports.push(rep);
        // The recovered device takes writes again.
        let model2 = Arc::new(Mutex::new(Model::for_device(r.dev.info(), seed + 99)));
        let mut cfg = check_cfg(seed + 99, 300, 64);
        cfg.weights.trim = 0;
        // A window the new model knows: the top of the device, trimmed first.
        let top = r.dev.info().num_blocks - 64;
        r.dev.trim(top, 64).await.map_err(|e| format!("trim after recovery: {e}"))?;
        let shifted: DevRef = Arc::new(Offset { inner: r.dev.clone(), at: top });
        run_check(shifted, model2, &cfg)
            .await
            .map_err(|e| format!("after {} recovery: {e}", mode.name()))?;
    }
    Ok((at_crash, reports))
}

/// A window of a device: LBA `x` is `x + at` below (the tests' way to give a fresh model
/// fresh blocks on a device that already holds data).
struct Offset {
    inner: DevRef,
    at: u64,
}

#[async_trait(?Send)]
impl BlockDevice for Offset {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn kind(&self) -> &'static str {
        "offset"
    }
    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        self.inner.read(lba + self.at, buf, md).await
    }
    async fn write(&self, lba: u64, d: &[u8], md: Option<&[u8]>, h: WriteHints) -> DevResult<()> {
        self.inner.write(lba + self.at, d, md, h).await
    }
    async fn flush(&self) -> DevResult<()> {
        self.inner.flush().await
    }
    async fn trim(&self, lba: u64, n: u64) -> DevResult<()> {
        self.inner.trim(lba + self.at, n).await
    }
}

fn run_crash_case(
    name: &str,
    seed: u64,
    fast_md: u32,
    cut_when: impl Fn(&BTreeMap<String, u64>, u64) -> bool + Send + 'static,
) -> (BTreeMap<String, u64>, Vec<flashrig_engines::csal::RecoveryReport>) {
    run_crash_case_on(name, seed, Media::with_fast_md(fast_md), cut_when)
}

fn run_crash_case_on(
    name: &str,
    seed: u64,
    media: Media,
    cut_when: impl Fn(&BTreeMap<String, u64>, u64) -> bool + Send + 'static,
) -> (BTreeMap<String, u64>, Vec<flashrig_engines::csal::RecoveryReport>) {
    let (res, _) = run(RuntimeKind::Sim, 2, move || async move {
        crash_and_recover_all(seed, media, cut_when).await
    });
    match res {
        Ok(x) => x,
        Err(e) => panic!("{name}, seed {seed}: {e} (reproduce with FLASHRIG_SEED={seed})"),
    }
}

#[test]
fn crash_at_random_times_recovers_the_same_state_in_every_mode() {
    for seed in seeds(200, 4) {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let at_ns = 5_000_000 + rng.next_u64() % 60_000_000;
        let (c, reps) = run_crash_case("random time", seed, MD, move |_, t| t >= at_ns);
        assert!(c["user_writes"] > 0);
        for (rep, mode) in reps.iter().zip(MODES) {
            assert_eq!(rep.mode, Some(mode));
            assert!(!rep.clean);
            for s in &rep.steps {
                assert!(RECOVERY_STEPS.contains(&s.name), "unknown step {}", s.name);
            }
            assert_eq!(rep.names().last(), Some(&"write_checkpoint"));
        }
        assert!(reps[0].names().contains(&"scan_all_blocks"));
        assert!(reps[1].names().contains(&"read_p2l"));
        assert!(reps[2].names().contains(&"load_l2p"));
    }
}

#[test]
fn crash_in_the_middle_of_compaction() {
    for seed in seeds(300, 3) {
        let skip = 1 + seed % 5;
        let (c, _) = run_crash_case("mid-compaction", seed, MD, move |c, _| {
            // Blocks read for a compaction but not all written: it is under way.
            c["compactions"] > skip && c["compaction_blocks_read"] > c["compaction_blocks_written"]
        });
        assert!(c["compaction_blocks_read"] > c["compaction_blocks_written"]);
    }
}

/// A compaction that is due when a checkpoint is runs beside it (`service::step`): cut right
/// after such a round starts, with the checkpoint's copy taken and its flushes and page
/// writes under way while the compaction moves blocks.
#[test]
fn crash_while_a_checkpoint_and_a_compaction_overlap() {
    for seed in seeds(350, 3) {
        let skip = seed % 4;
        let (c, _) = run_crash_case("checkpoint beside compaction", seed, MD, move |c, _| {
            c["compactions_beside_checkpoint"] > skip
        });
        assert!(c["compactions_beside_checkpoint"] > skip);
    }
}

#[test]
fn crash_in_the_middle_of_gc() {
    for seed in seeds(400, 3) {
        let (c, _) = run_crash_case("mid-GC", seed, MD, move |c, _| {
            c["gc_runs"] > 1 && c["gc_blocks_read"] > c["gc_blocks_written"]
        });
        assert!(c["gc_blocks_read"] > c["gc_blocks_written"]);
    }
}

#[test]
fn crash_during_recovery_then_recover_again() {
    for seed in seeds(500, 3) {
        let (res, _) = run(RuntimeKind::Sim, 2, move || async move {
            let media = Media::new();
            let rig = power_up(&media, seed, opts(RecoveryMode::Checkpoint), true).await.unwrap();
            let span = rig.dev.info().num_blocks;
            let model = Arc::new(Mutex::new(Model::for_device(rig.dev.info(), seed)));
            let dev = rig.dev.clone();
            let m2 = model.clone();
            let driver =
                spawn(async move { run_ops(dev, m2, &check_cfg(seed, 1_000_000, span)).await });
            sleep_ns(20_000_000 + seed % 7 * 3_000_000).await;
            rig.crash(seed);
            if let Err(e) = driver.await {
                if e.mismatch {
                    return Err(format!("before the crash: {e}"));
                }
            }
            drop(rig);
            // Recovery crashes after a seeded number of member commands, in each mode; then
            // every mode recovers what that left.
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            for first in MODES {
                let budget = 20 + rng.next_u64() % 400;
                let m = media.copy();
                // When the budget runs out first, recovery fails and the members' caches go
                // with them (nothing unflushed lands); when recovery finishes within it, a
                // crash right after tears what it left unflushed.
                if let Ok(r) = power_up_with_budget(&m, seed + 3, opts(first), false, budget).await
                {
                    r.crash(seed + 5);
                }
                for mode in MODES {
                    let mm = m.copy();
                    let r = power_up(&mm, seed + 4, opts(mode), false).await.map_err(|e| {
                        format!("{} after a crash in {} recovery: {e}", mode.name(), first.name())
                    })?;
                    verify_after_crash(&r.dev, &model).await.map_err(|e| {
                        format!("{} after a crash in {} recovery: {e}", mode.name(), first.name())
                    })?;
                }
            }
            Ok(())
        });
        if let Err(e) = res {
            panic!("seed {seed}: {e} (reproduce with FLASHRIG_SEED={seed})");
        }
    }
}

#[test]
fn clean_shutdown_loads_the_metadata_region() {
    let seed = seeds(600, 1)[0];
    let (res, _) = run(RuntimeKind::Sim, 2, move || async move {
        let media = Media::new();
        let rig = power_up(&media, seed, opts(RecoveryMode::Checkpoint), true).await.unwrap();
        let span = rig.dev.info().num_blocks;
        let model = Arc::new(Mutex::new(Model::for_device(rig.dev.info(), seed)));
        run_check(rig.dev.clone(), model.clone(), &check_cfg(seed, 2500, span)).await.unwrap();
        rig.csal.close().await.expect("close");
        drop(rig);
        let r = power_up(&media, seed + 1, opts(RecoveryMode::Checkpoint), false).await.unwrap();
        let rep = r.csal.recovery().unwrap();
        verify_after_crash(&r.dev, &model).await.expect("everything back");
        rep
    });
    assert!(res.clean);
    assert_eq!(
        res.names(),
        vec!["read_superblock", "load_state", "load_bitmaps", "write_checkpoint"]
    );
}

#[test]
fn user_isolation_keeps_one_tenant_per_zone() {
    for (isolate, seed) in [(true, 700u64), (false, 701)] {
        let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
            let media = Media::new();
            let o = CsalOptions { user_isolation: isolate, ..opts(RecoveryMode::Checkpoint) };
            let rig = power_up(&media, seed, o, true).await.unwrap();
            let span = rig.dev.info().num_blocks;
            let model = Arc::new(Mutex::new(Model::for_device(rig.dev.info(), seed)));
            let mut cfg = check_cfg(seed, 3000, span);
            cfg.weights.trim = 0;
            run_check(rig.dev.clone(), model, &cfg).await.unwrap();
            rig.csal.zone_tenants().await.unwrap()
        });
        let mixed = res.iter().filter(|(_, _, t)| t.iter().any(|&x| x != t[0])).count();
        let holding = res.iter().filter(|(_, _, t)| !t.is_empty()).count();
        assert!(holding > 4, "few zones hold data: {res:?}");
        if isolate {
            assert_eq!(mixed, 0, "user isolation on, yet zones mix tenants");
        } else {
            assert!(mixed > 0, "one shared stream, yet no zone mixes tenants");
        }
    }
}

/// Client I/O from two reactors of the real runtime (threads) while compaction, GC and
/// checkpoints run on the internal reactor: the shared state is a mutex never held across an
/// await, and the checker finds every block.
#[test]
fn reference_model_on_the_real_runtime_from_two_reactors() {
    for seed in seeds(800, 2) {
        let (res, _) = run(RuntimeKind::Real, 2, move || async move {
            let fast: DevRef =
                Arc::new(flashrig_devices::RamDevice::new("fast", BS, FAST_BLOCKS, MD, 0));
            let zmem: DevRef =
                Arc::new(flashrig_devices::RamDevice::new("zmem", BS, ZMEM_BLOCKS, MD, 0));
            let zoned: DevRef = Arc::new(Zoned::create("zoned", zmem, zoned_opts()).await.unwrap());
            let c = Arc::new(
                Csal::create("csal", fast, zoned, opts(RecoveryMode::Checkpoint)).await.unwrap(),
            );
            let dev: DevRef = c.clone();
            let span = dev.info().num_blocks;
            let model = Arc::new(Mutex::new(Model::for_device(dev.info(), seed)));
            let mut cfg = check_cfg(seed, 3000, span);
            cfg.spread_over_reactors = true;
            let r = run_check(dev, model, &cfg).await.map(|_| ());
            (r, counters(&c))
        });
        let (r, c) = res;
        if let Err(e) = r {
            panic!("{e}");
        }
        assert!(c["compaction_blocks_written"] > 0 && c["gc_blocks_written"] > 0, "{c:?}");
    }
}

/// A fast member without metadata bytes: records go to csal's record blocks (the paper's
/// fallback for drives without VSS). The reference model, then crashes at random times and
/// mid-compaction, recovered in every mode.
#[test]
fn record_blocks_without_fast_metadata_bytes() {
    for seed in seeds(900, 3) {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let at_ns = 5_000_000 + rng.next_u64() % 60_000_000;
        run_crash_case("no VSS, random time", seed, 0, move |_, t| t >= at_ns);
        let (c, _) = run_crash_case("no VSS, mid-compaction", seed, 0, move |c, _| {
            c["compactions"] > 2 && c["compaction_blocks_read"] > c["compaction_blocks_written"]
        });
        assert!(c["compaction_blocks_written"] > 0);
    }
}

/// The simulated runtime replays a seed exactly: the same run twice gives the same counters
/// (every compaction, GC pass, page fault and zone command) and the same virtual time.
#[test]
fn a_seed_replays_exactly() {
    let once = || {
        run(RuntimeKind::Sim, 2, || async move {
            let media = Media::new();
            let rig = power_up(&media, 9, opts(RecoveryMode::Checkpoint), true).await.unwrap();
            let span = rig.dev.info().num_blocks;
            let model = Arc::new(Mutex::new(Model::for_device(rig.dev.info(), 9)));
            run_check(rig.dev.clone(), model, &check_cfg(9, 1500, span)).await.unwrap();
            counters(&rig.csal)
        })
    };
    let (a, sa) = once();
    let (b, sb) = once();
    assert_eq!(a, b);
    assert_eq!(sa.elapsed_ns, sb.elapsed_ns);
}

#[test]
fn sid_conflicts_follow_section_4_4() {
    let c = |sid, pba, zoned| Candidate { sid, pba, zoned };
    // Highest SID wins (an update in the open chunk over an older compacted copy).
    assert!(resolve(&c(9, 3, false), &c(4, 5000, true)));
    assert!(!resolve(&c(4, 5000, true), &c(9, 3, false)));
    // Same SID on different devices: the same data; the zone copy is kept either way round.
    assert!(resolve(&c(7, 9000, true), &c(7, 100, false)));
    assert!(!resolve(&c(7, 100, false), &c(7, 9000, true)));
    // Same SID in the same chunk: the largest PBA (the later append) wins.
    assert!(resolve(&c(3, 41, false), &c(3, 40, false)));
    assert!(!resolve(&c(3, 40, false), &c(3, 41, false)));
    // Trims: older SIDs and earlier places of the trim's own chunk die, later ones live.
    assert!(trim_kills(3, 50, &c(3, 49, false)));
    assert!(!trim_kills(3, 50, &c(3, 51, false)));
    assert!(!trim_kills(3, 50, &c(3, 7000, true)));
}

/// Table 4's shape, with member commands of 0 to 40 us: the naive scan reads every block,
/// P2L reads the tables and the open containers, checkpoint reads the L2P and what was written
/// since the checkpoint. Every mode recovers a copy of the same crashed media. Prints each
/// mode's steps and times (`cargo test -p flashrig-engines --test csal recovery_steps --
/// --nocapture`).
#[test]
fn recovery_steps_are_timed() {
    let (res, _) = run(RuntimeKind::Sim, 2, || async move {
        let media = Media::new();
        let rig = power_up_with(&media, 5, opts(RecoveryMode::Checkpoint), true, u64::MAX, 40_000)
            .await
            .unwrap();
        let span = rig.dev.info().num_blocks;
        let model = Arc::new(Mutex::new(Model::for_device(rig.dev.info(), 5)));
        let mut cfg = check_cfg(5, 3000, span);
        cfg.weights.trim = 0;
        run_check(rig.dev.clone(), model.clone(), &cfg).await.unwrap();
        rig.crash(5);
        drop(rig);
        let mut reps = Vec::new();
        for mode in MODES {
            let m = media.copy();
            let r = power_up_with(&m, 6, opts(mode), false, u64::MAX, 40_000).await.unwrap();
            verify_after_crash(&r.dev, &model).await.unwrap();
            reps.push(r.csal.recovery().unwrap());
        }
        reps
    });
    for r in &res {
        let steps: Vec<String> =
            r.steps.iter().map(|s| format!("{} {:.3} ms", s.name, s.ns as f64 / 1e6)).collect();
        println!(
            "{:>10}: total {:.3} ms: {}",
            r.mode.unwrap().name(),
            r.total_ns() as f64 / 1e6,
            steps.join(", ")
        );
    }
    let naive = &res[0];
    assert!(naive.step_ns("scan_all_blocks") > 0);
    assert!(naive.total_ns() > res[1].total_ns(), "naive scan should be the slowest");
    assert!(naive.total_ns() > res[2].total_ns(), "naive scan should be the slowest");
}

/// Fig. 18's comparison on a small scale: the zoned device's write amplification (blocks
/// written by compaction and GC over blocks compaction brought in) with no isolation, GC
/// isolation, and GC plus user isolation, under a mixed load: tenants 0 and 1 overwrite their
/// partitions sequentially, tenants 2 and 3 at uniformly random places, four times the
/// capacity in all; and user isolation again with only four open zones for its eight streams
/// (the open-zone policy then finishes zones early). Prints the table (`cargo test -p flashrig-engines --test csal isolation --
/// --nocapture`).
#[test]
fn isolation_and_gc_write_amplification() {
    let mut rows = Vec::new();
    for (label, gc_iso, user_iso, open) in [
        ("none", false, false, 16),
        ("gc", true, false, 16),
        ("gc+user", true, true, 16),
        // Eight streams through four open zones: every switch finishes a zone early.
        ("gc+user/4", true, true, 4),
    ] {
        let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
            let fast: DevRef = Arc::new(flashrig_devices::RamDevice::new("fast", BS, 1024, MD, 0));
            let zmem: DevRef =
                Arc::new(flashrig_devices::RamDevice::new("zmem", BS, 96 * 64 + 4, MD, 0));
            let zo = ZonedOptions { max_open_zones: open, max_active_zones: open, ..zoned_opts() };
            let zoned: DevRef = Arc::new(Zoned::create("zoned", zmem, zo).await.unwrap());
            let o = CsalOptions {
                tenants: 4,
                gc_isolation: gc_iso,
                user_isolation: user_iso,
                ..opts(RecoveryMode::Checkpoint)
            };
            let c = Arc::new(Csal::create("csal", fast, zoned, o).await.unwrap());
            let n = c.info().num_blocks;
            let part = n.div_ceil(4);
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(18);
            let mut seq = [0u64; 2];
            let buf = vec![0x5au8; BS as usize];
            for i in 0..4 * n {
                let t = i % 4;
                let lba = if t < 2 {
                    let l = t * part + seq[t as usize];
                    seq[t as usize] = (seq[t as usize] + 1) % part;
                    l
                } else {
                    t * part + rng.next_u64() % part
                };
                if lba < n {
                    c.write(lba, &buf, None, WriteHints::NONE).await.unwrap();
                }
            }
            counters(&c)
        });
        let cp = res["compaction_blocks_written"];
        let gc = res["gc_blocks_written"];
        rows.push((label, cp, gc, (cp + gc) as f64 / cp.max(1) as f64));
    }
    println!("isolation  compaction_blocks  gc_blocks  zoned_waf");
    for (label, cp, gc, waf) in &rows {
        println!("{label:>9}  {cp:>17}  {gc:>9}  {waf:>9.3}");
    }
    assert!(rows.iter().all(|r| r.2 > 0), "GC must run in every configuration: {rows:?}");
    // Fig. 18's direction: isolating GC, then users, lowers the zoned write amplification.
    assert!(rows[1].3 < rows[0].3 && rows[2].3 < rows[1].3, "{rows:?}");
}
