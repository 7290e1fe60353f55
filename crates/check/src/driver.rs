//! The random driver: seeded reads, writes, trims and flushes against a device, several in
//! flight, every read checked against the [`Model`].
//!
//! Commands in flight never overlap (a new command picks a range that no in-flight command
//! touches), because the block-device contract leaves the order of overlapping concurrent
//! commands undefined; flushes overlap everything, as they do for real clients.

use std::sync::Arc;

use flashrig_blockdev::{DevRef, WriteHints};
use flashrig_runtime::{now_ns, num_reactors, sleep_ns, spawn, spawn_on, JoinHandle, RemoteHandle};
use parking_lot::Mutex;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::model::Model;

/// Relative weights of the command kinds the driver issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpWeights {
    pub read: u32,
    pub write: u32,
    pub trim: u32,
    pub flush: u32,
}

/// What the driver does.
#[derive(Clone, Debug)]
pub struct CheckConfig {
    /// Seeds every random choice (and the salt of the written blocks).
    pub seed: u64,
    /// Commands to issue.
    pub ops: u64,
    /// Commands in flight at once.
    pub queue_depth: usize,
    /// Largest command, in blocks (commands are 1 to this many blocks, in `align_blocks` steps).
    pub max_io_blocks: u64,
    /// Commands start and end on multiples of this many blocks.
    pub align_blocks: u64,
    /// Blocks addressed, from LBA 0 (default: the device, at most 4096 blocks, so that
    /// overwrites and reads of written data are common).
    pub span_blocks: Option<u64>,
    pub weights: OpWeights,
    /// Percentage of writes and reads that carry per-block metadata, when the device has any.
    pub md_percent: u8,
    /// Percentage of writes sent with FUA.
    pub fua_percent: u8,
    /// Run the in-flight slots on every reactor (round robin) instead of the caller's.
    pub spread_over_reactors: bool,
    /// Every this many commands (0: never), no slot issues anything for `pause_ns`, so the
    /// device has idle time (what an SSD's idle-time work, such as merging versions or
    /// background GC, needs; a closed loop never leaves any).
    pub pause_every_ops: u64,
    pub pause_ns: u64,
}

impl Default for CheckConfig {
    fn default() -> Self {
        CheckConfig {
            seed: 1,
            ops: 2000,
            queue_depth: 8,
            max_io_blocks: 16,
            align_blocks: 1,
            span_blocks: None,
            weights: OpWeights { read: 40, write: 45, trim: 8, flush: 7 },
            md_percent: 50,
            fua_percent: 5,
            spread_over_reactors: false,
            pause_every_ops: 0,
            pause_ns: 0,
        }
    }
}

/// What a driver run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub reads: u64,
    pub writes: u64,
    pub trims: u64,
    pub flushes: u64,
    /// Blocks whose contents were compared with the model.
    pub blocks_checked: u64,
}

/// A check that failed: what went wrong, and the seed that reproduces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckError {
    pub seed: u64,
    pub message: String,
    /// Whether a read returned the wrong contents (rather than a command failing): after a
    /// power cut, failed commands are expected and wrong data never is.
    pub mismatch: bool,
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {}: {} (reproduce with FLASHRIG_SEED={})",
            self.seed, self.message, self.seed
        )
    }
}

impl std::error::Error for CheckError {}

#[derive(Clone, Copy, Debug)]
enum Op {
    Read { lba: u64, blocks: u64, md: bool },
    Write { lba: u64, blocks: u64, version: u64, md: bool, fua: bool },
    Trim { lba: u64, blocks: u64 },
    Flush,
}

impl Op {
    fn range(&self) -> Option<(u64, u64)> {
        match *self {
            Op::Read { lba, blocks, .. }
            | Op::Write { lba, blocks, .. }
            | Op::Trim { lba, blocks } => Some((lba, lba + blocks)),
            Op::Flush => None,
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Op::Read { lba, blocks, md } => {
                write!(f, "read {blocks} blocks at {lba}{}", if md { " with metadata" } else { "" })
            }
            Op::Write { lba, blocks, version, md, fua } => write!(
                f,
                "write of version {version}, {blocks} blocks at {lba}{}{}",
                if md { " with metadata" } else { "" },
                if fua { " (FUA)" } else { "" }
            ),
            Op::Trim { lba, blocks } => write!(f, "trim {blocks} blocks at {lba}"),
            Op::Flush => f.write_str("flush"),
        }
    }
}

struct State {
    model: Arc<Mutex<Model>>,
    rng: Xoshiro256PlusPlus,
    issued: u64,
    in_flight: Vec<(u64, u64)>,
    /// The first failure, and whether it was wrong data (not a failed command).
    failure: Option<(String, bool)>,
    report: CheckReport,
    /// No slot issues a command before this time ([`CheckConfig::pause_every_ops`]).
    paused_until_ns: u64,
}

struct Geometry {
    span_blocks: u64,
    md_bytes: usize,
    block_size: usize,
}

impl State {
    fn overlaps(&self, (s, e): (u64, u64)) -> bool {
        self.in_flight.iter().any(|&(a, b)| s < b && a < e)
    }

    /// Picks the next command; `Err(())` when every try collided with a command in flight.
    fn pick(&mut self, cfg: &CheckConfig, g: &Geometry) -> Result<Op, ()> {
        let w = cfg.weights;
        let total = w.read + w.write + w.trim + w.flush;
        for _ in 0..8 {
            let r = (self.rng.next_u64() % total as u64) as u32;
            let align = cfg.align_blocks.max(1);
            let max_units = (cfg.max_io_blocks / align).clamp(1, g.span_blocks / align);
            let blocks = (1 + self.rng.next_u64() % max_units) * align;
            let slots = (g.span_blocks - blocks) / align + 1;
            let lba = (self.rng.next_u64() % slots) * align;
            let md = g.md_bytes > 0 && self.rng.next_u64() % 100 < cfg.md_percent as u64;
            let op = if r < w.read {
                Op::Read { lba, blocks, md }
            } else if r < w.read + w.write {
                let fua = self.rng.next_u64() % 100 < cfg.fua_percent as u64;
                let version = self.model.lock().next_version();
                Op::Write { lba, blocks, version, md, fua }
            } else if r < w.read + w.write + w.trim {
                Op::Trim { lba, blocks }
            } else {
                return Ok(Op::Flush);
            };
            if !self.overlaps(op.range().expect("data commands have a range")) {
                return Ok(op);
            }
        }
        Err(())
    }
}

/// Runs `cfg.ops` random commands against `dev`, checking every read against `model` and
/// keeping the model up to date, then flushes and reads back every block the model knows.
///
/// The model is shared (not borrowed) because the in-flight slots may run on other reactors;
/// after a crash test stops the driver part-way, the same model says what may have survived.
pub async fn run_check(
    dev: DevRef,
    model: Arc<Mutex<Model>>,
    cfg: &CheckConfig,
) -> Result<CheckReport, CheckError> {
    let report = run_ops(dev.clone(), model.clone(), cfg).await?;
    let token = model.lock().flush_issued();
    dev.flush().await.map_err(|e| CheckError {
        seed: cfg.seed,
        message: format!("final flush failed: {e}"),
        mismatch: false,
    })?;
    model.lock().flush_done(token);
    let checked = verify_all(&dev, &model).await.map_err(|message| CheckError {
        seed: cfg.seed,
        message: format!("final read-back: {message}"),
        mismatch: !message.starts_with("read "),
    })?;
    Ok(CheckReport { blocks_checked: report.blocks_checked + checked, ..report })
}

/// Runs the random commands only (no final flush or read-back), so a crash test can stop in
/// the middle. Returns at the first mismatch or failed command.
pub async fn run_ops(
    dev: DevRef,
    model: Arc<Mutex<Model>>,
    cfg: &CheckConfig,
) -> Result<CheckReport, CheckError> {
    let info = dev.info().clone();
    let md_bytes = info.md_bytes_per_block as usize;
    {
        let m = model.lock();
        assert_eq!(m.block_size(), info.block_size as usize, "model and device block sizes");
        assert_eq!(m.md_bytes(), md_bytes, "model and device metadata sizes");
    }
    let span_blocks = cfg.span_blocks.unwrap_or(4096).min(info.num_blocks);
    assert!(
        span_blocks >= cfg.align_blocks.max(1),
        "the device is smaller than one aligned command"
    );
    let g = Arc::new(Geometry { span_blocks, md_bytes, block_size: info.block_size as usize });
    let state = Arc::new(Mutex::new(State {
        model,
        rng: Xoshiro256PlusPlus::seed_from_u64(cfg.seed),
        issued: 0,
        in_flight: Vec::new(),
        failure: None,
        report: CheckReport::default(),
        paused_until_ns: 0,
    }));
    enum Slot {
        Local(JoinHandle<()>),
        Remote(RemoteHandle<()>),
    }
    let reactors = if cfg.spread_over_reactors { num_reactors() } else { 1 };
    let mut slots = Vec::new();
    for i in 0..cfg.queue_depth.max(1) {
        let (dev, state, g, cfg) = (dev.clone(), state.clone(), g.clone(), cfg.clone());
        if reactors > 1 {
            let r = i % reactors;
            slots.push(Slot::Remote(spawn_on(r, move || slot(dev, state, g, cfg))));
        } else {
            slots.push(Slot::Local(spawn(slot(dev, state, g, cfg))));
        }
    }
    for s in slots {
        match s {
            Slot::Local(h) => h.await,
            Slot::Remote(h) => h.await,
        }
    }
    let st = state.lock();
    match &st.failure {
        Some((message, mismatch)) => {
            Err(CheckError { seed: cfg.seed, message: message.clone(), mismatch: *mismatch })
        }
        None => Ok(st.report.clone()),
    }
}

async fn slot(dev: DevRef, state: Arc<Mutex<State>>, g: Arc<Geometry>, cfg: CheckConfig) {
    loop {
        // One reading of the clock: on the real-thread runtime it moves between two calls,
        // and the second could pass `paused_until` (CI run of 2f1b660: subtract overflow).
        let (paused_until, now) = (state.lock().paused_until_ns, now_ns());
        if paused_until > now {
            sleep_ns(paused_until - now).await;
            continue;
        }
        let picked = {
            let mut st = state.lock();
            if st.failure.is_some() || st.issued >= cfg.ops {
                return;
            }
            match st.pick(&cfg, &g) {
                Ok(op) => {
                    st.issued += 1;
                    if cfg.pause_every_ops > 0 && st.issued.is_multiple_of(cfg.pause_every_ops) {
                        st.paused_until_ns = now_ns() + cfg.pause_ns;
                    }
                    if let Some(r) = op.range() {
                        st.in_flight.push(r);
                    }
                    let mut m = st.model.lock();
                    match op {
                        Op::Write { lba, blocks, version, md, .. } => {
                            m.write_issued(lba, blocks, version, md)
                        }
                        Op::Trim { lba, blocks } => m.trim_issued(lba, blocks),
                        _ => {}
                    }
                    drop(m);
                    Some((op, st.issued))
                }
                Err(()) => None,
            }
        };
        let Some((op, n)) = picked else {
            // Every pick collided with a command in flight: let time pass (on the simulated
            // clock too, so the colliding commands can complete).
            sleep_ns(1_000).await;
            continue;
        };
        let result = execute(&dev, &state, &g, op).await;
        let mut st = state.lock();
        if let Some(r) = op.range() {
            let i = st.in_flight.iter().position(|x| *x == r).expect("range was in flight");
            st.in_flight.swap_remove(i);
        }
        if let Err((e, mismatch)) = result {
            if st.failure.is_none() {
                st.failure = Some((format!("command {n} ({op}): {e}"), mismatch));
            }
            return;
        }
        match op {
            Op::Read { blocks, .. } => {
                st.report.reads += 1;
                st.report.blocks_checked += blocks;
            }
            Op::Write { .. } => st.report.writes += 1,
            Op::Trim { .. } => st.report.trims += 1,
            Op::Flush => st.report.flushes += 1,
        }
    }
}

/// Runs one command; an error says what failed and whether it was wrong data (`true`) rather
/// than a failed command.
async fn execute(
    dev: &DevRef,
    state: &Arc<Mutex<State>>,
    g: &Geometry,
    op: Op,
) -> Result<(), (String, bool)> {
    let model = state.lock().model.clone();
    let failed = |e: flashrig_blockdev::DevError| (e.to_string(), false);
    match op {
        Op::Read { lba, blocks, md } => {
            let mut buf = vec![0u8; blocks as usize * g.block_size];
            let mut mdbuf = md.then(|| vec![0u8; blocks as usize * g.md_bytes]);
            dev.read(lba, &mut buf, mdbuf.as_deref_mut()).await.map_err(failed)?;
            model.lock().check_read(lba, &buf, mdbuf.as_deref()).map_err(|m| (m.to_string(), true))
        }
        Op::Write { lba, blocks, version, md, fua } => {
            let mut buf = vec![0u8; blocks as usize * g.block_size];
            let mut mdbuf = md.then(|| vec![0u8; blocks as usize * g.md_bytes]);
            model.lock().fill(lba, version, &mut buf, mdbuf.as_deref_mut());
            let hints = WriteHints { fua, ..WriteHints::NONE };
            dev.write(lba, &buf, mdbuf.as_deref(), hints).await.map_err(failed)?;
            model.lock().write_done(lba, blocks, version, md, fua);
            Ok(())
        }
        Op::Trim { lba, blocks } => {
            dev.trim(lba, blocks).await.map_err(failed)?;
            model.lock().trim_done(lba, blocks);
            Ok(())
        }
        Op::Flush => {
            let token = model.lock().flush_issued();
            dev.flush().await.map_err(failed)?;
            model.lock().flush_done(token);
            Ok(())
        }
    }
}

/// Contiguous runs of at most `max` LBAs covering `lbas` (sorted).
fn runs(lbas: &[u64], max: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &l in lbas {
        match out.last_mut() {
            Some((start, n)) if *start + *n == l && *n < max => *n += 1,
            _ => out.push((l, 1)),
        }
    }
    out
}

async fn read_back(
    dev: &DevRef,
    model: &Arc<Mutex<Model>>,
    mut check: impl FnMut(&mut Model, u64, &[u8], Option<&[u8]>) -> Result<(), String>,
) -> Result<u64, String> {
    let (lbas, bs, mdb) = {
        let m = model.lock();
        (m.touched_lbas(), m.block_size(), m.md_bytes())
    };
    let mut checked = 0;
    for (lba, n) in runs(&lbas, 64) {
        let mut buf = vec![0u8; n as usize * bs];
        let mut md = (mdb > 0).then(|| vec![0u8; n as usize * mdb]);
        dev.read(lba, &mut buf, md.as_deref_mut())
            .await
            .map_err(|e| format!("read {n} blocks at {lba}: {e}"))?;
        let mut m = model.lock();
        for i in 0..n as usize {
            let block_md = md.as_deref().map(|x| &x[i * mdb..(i + 1) * mdb]);
            check(&mut m, lba + i as u64, &buf[i * bs..(i + 1) * bs], block_md)?;
            checked += 1;
        }
    }
    Ok(checked)
}

/// Reads every block the model knows (with metadata, when the device has any) and checks it
/// holds what the model expects now. Returns the number of blocks checked.
pub async fn verify_all(dev: &DevRef, model: &Arc<Mutex<Model>>) -> Result<u64, String> {
    read_back(dev, model, |m, lba, data, md| m.check_read(lba, data, md).map_err(|e| e.to_string()))
        .await
}

/// After a crash and recovery: reads every block the model knows and checks it holds its
/// durable content or a change made since; what was found becomes the model's new state, so
/// the run can go on. Returns the number of blocks checked.
pub async fn verify_after_crash(dev: &DevRef, model: &Arc<Mutex<Model>>) -> Result<u64, String> {
    read_back(dev, model, |m, lba, data, md| {
        m.check_after_crash(lba, data, md).map_err(|e| format!("after the crash: {e}"))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_split_at_gaps_and_at_the_limit() {
        assert_eq!(runs(&[1, 2, 3, 7, 8, 20], 64), vec![(1, 3), (7, 2), (20, 1)]);
        assert_eq!(runs(&[0, 1, 2, 3, 4], 2), vec![(0, 2), (2, 2), (4, 1)]);
        assert!(runs(&[], 4).is_empty());
    }
}
