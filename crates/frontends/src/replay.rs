//! Trace replay and preconditioning.
//!
//! A `[replay]` section makes `flashrig run` replay a block trace instead of the synthetic
//! workload: *open loop* issues each request at its trace timestamp (scaled by `speed`),
//! however many are in flight, as the papers replay MSR and FIU traces; *closed loop* keeps
//! `iodepth` requests in flight and ignores timestamps. A `[precondition]` section (for
//! replays and synthetic jobs alike) first fills the range sequentially and then overwrites
//! it at random, as CSAL §6.1 preconditions its drives, so measurements start in steady state.
//!
//! Trace addresses are mapped onto the stack: the offset is rounded down and the end up to
//! whole blocks, and a request beyond the stack's capacity wraps around (offset modulo the
//! capacity), so any trace can drive any stack; `wrapped` in the result counts them.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use flashrig_blockdev::{DevRef, WriteHints};
use flashrig_check::pattern;
use flashrig_runtime::{now_ns, sleep_until_ns, spawn};
use flashrig_trace::{Format, Request};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::size::Size;
use crate::workload::{closed_loop_until, Access, JobOutcome};

/// How a trace is replayed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplayMode {
    /// Each request at its timestamp (divided by `speed`).
    #[default]
    Open,
    /// `iodepth` requests in flight, timestamps ignored.
    Closed,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplayConfig {
    pub trace: PathBuf,
    /// msr, fiu, spc, alibaba, disksim, vscsi, blkparse; detected from the first lines when
    /// not given.
    pub format: Option<String>,
    pub mode: ReplayMode,
    /// Open loop: 2.0 replays twice as fast as recorded.
    pub speed: f64,
    /// Closed loop: requests in flight.
    pub iodepth: u32,
    /// Replay at most this many requests.
    pub max_requests: Option<u64>,
    /// Skip malformed lines (counted in the result) instead of stopping at the first.
    pub skip_bad: bool,
    /// Size to assume for MSR records without a size column (lossy reduced traces).
    pub assume_size: Option<Size>,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            trace: PathBuf::new(),
            format: None,
            mode: ReplayMode::Open,
            speed: 1.0,
            iodepth: 32,
            max_requests: None,
            skip_bad: false,
            assume_size: None,
        }
    }
}

/// Bring the stack to steady state before measuring.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PreconditionConfig {
    /// Write the whole range once, sequentially, in `fill_bs` requests.
    pub fill: bool,
    pub fill_bs: Size,
    /// Then overwrite this many bytes at uniformly random 4 KiB-aligned offsets.
    pub random_overwrite: Size,
    /// Then go on overwriting at uniformly random 4 KiB-aligned offsets for this long on the
    /// runtime's clock (virtual time in simulation), as a paper's "hours of 4 KB random
    /// writes" warm-up does: a bound in time, not in bytes, reaches the same state in a stack
    /// that takes random writes slowly and one that takes them fast. 0 = none.
    pub random_overwrite_ms: u64,
    /// Then write this many bytes sequentially from the first block, in `fill_bs` requests
    /// (wrapping at the end): brings an engine to a phase, such as a two-phase array's
    /// conversion phase, without writing all of it.
    pub write: Size,
    /// Before a replay, write every block range the trace reads (each distinct range once,
    /// in trace order), so its reads find data: SSDSim's `pre_process_page` makes the pages a
    /// trace reads valid before it simulates, and WAFLASH (§5.1) replays its traces on SSDSim.
    /// Needs a `[replay]` section.
    pub trace_reads: bool,
    /// Last, replay the first this many requests of the `[replay]` trace, closed-loop with
    /// `iodepth` in flight, unmeasured: a warm-up that brings a drive to the steady state the
    /// trace itself leads to (a trace repeated N times, measured over its last passes, as
    /// `flashrig reproduce womv` does). 0 = none. Needs a `[replay]` section.
    pub trace_requests: u64,
    pub iodepth: u32,
}

impl Default for PreconditionConfig {
    fn default() -> Self {
        PreconditionConfig {
            fill: false,
            fill_bs: Size::kib(128),
            random_overwrite: Size(0),
            random_overwrite_ms: 0,
            write: Size(0),
            trace_reads: false,
            trace_requests: 0,
            iodepth: 32,
        }
    }
}

impl PreconditionConfig {
    pub fn is_active(&self) -> bool {
        self.fill
            || self.random_overwrite.bytes() > 0
            || self.random_overwrite_ms > 0
            || self.write.bytes() > 0
            || self.trace_reads
            || self.trace_requests > 0
    }
}

impl ReplayConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.trace.as_os_str().is_empty() {
            return Err("replay.trace: the trace file to replay is required".into());
        }
        if let Some(f) = &self.format {
            f.parse::<Format>().map_err(|e| format!("replay.format = \"{f}\": {e}"))?;
        }
        if !(self.speed > 0.0 && self.speed.is_finite()) {
            return Err(format!("replay.speed = {}: must be positive", self.speed));
        }
        if self.iodepth == 0 || self.iodepth > 65_536 {
            return Err(format!("replay.iodepth = {}: must be between 1 and 65536", self.iodepth));
        }
        Ok(())
    }

    /// Opens the trace (detecting its format when not given).
    pub fn open(&self) -> Result<flashrig_trace::Reader, Error> {
        let source = crate::tracecmd::Source {
            path: &self.trace,
            format: self.format.as_deref(),
            skip_bad: self.skip_bad,
            assume_size_bytes: self.assume_size.map(|s| s.bytes()),
        };
        source.open().map_err(|e| Error::Input(format!("replay.trace: {e}")))
    }
}

/// Maps a trace request onto a stack of `num_blocks` blocks of `bs` bytes: (lba, blocks,
/// wrapped).
pub fn map_request(r: &Request, bs: u64, num_blocks: u64) -> (u64, u64, bool) {
    let first = r.offset_bytes / bs;
    let end = r.end_bytes().div_ceil(bs).max(first + 1);
    let blocks = (end - first).min(num_blocks);
    if first + blocks <= num_blocks {
        (first, blocks, false)
    } else {
        (first % (num_blocks - blocks + 1), blocks, true)
    }
}

/// What a replay did, besides the latencies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayCounts {
    pub requests: u64,
    pub wrapped: u64,
    pub skipped_lines: u64,
    /// Open loop: the largest number of requests in flight at once.
    pub max_in_flight: u64,
}

/// The salt of the blocks a replay writes (`pattern`: it tells a replay's blocks from other
/// writers').
const REPLAY_SALT: u64 = 0x7ace;

/// One request issued against the stack; records its latency in `out`.
///
/// `buf` is the issuing slot's buffer, reused from request to request and only ever grown (a
/// fresh zeroed buffer per request cost about 7% of a trace replay's wall time in the
/// allocator and `memset`). As the closed-loop workload does (`workload.rs`), its payload is
/// filled once when it grows and a write only restamps each block's header with its own
/// address and version: every block written still names itself, at a fifth of the cost of a
/// fresh pattern (which was 15-20% of a replay's wall time).
async fn issue(
    dev: &DevRef,
    lba: u64,
    blocks: u64,
    write: bool,
    seq: u64,
    out: &RefCell<JobOutcome>,
    buf: &mut Vec<u8>,
) {
    let bs = dev.info().block_size as usize;
    let len = blocks as usize * bs;
    if buf.len() < len {
        let had = buf.len();
        buf.resize(len, 0);
        pattern::fill_blocks(&mut buf[had..], bs, 0, 1, REPLAY_SALT);
    }
    let buf = &mut buf[..len];
    let t0 = now_ns();
    let res = if write {
        for (i, b) in buf.chunks_exact_mut(bs).enumerate() {
            pattern::restamp_block(b, lba + i as u64, seq, REPLAY_SALT);
        }
        dev.write(lba, buf, None, WriteHints::NONE).await
    } else {
        dev.read(lba, buf, None).await
    };
    let lat = now_ns() - t0;
    let mut o = out.borrow_mut();
    o.end_ns = o.end_ns.max(now_ns());
    match res {
        Ok(()) => o.record(now_ns(), !write, buf.len() as u64, lat),
        Err(e) => {
            o.errors += 1;
            if o.first_error.is_none() {
                o.first_error = Some(format!(
                    "{} of {blocks} blocks at {lba}: {e}",
                    if write { "write" } else { "read" }
                ));
            }
        }
    }
}

/// Replays `cfg` against `dev`.
pub async fn replay(dev: DevRef, cfg: ReplayConfig) -> Result<(JobOutcome, ReplayCounts), Error> {
    replay_with_series(dev, cfg, 0).await
}

/// Replays `cfg` against `dev`, with a time series of `series_interval_ns` (0: the default).
pub async fn replay_with_series(
    dev: DevRef,
    cfg: ReplayConfig,
    series_interval_ns: u64,
) -> Result<(JobOutcome, ReplayCounts), Error> {
    let mut reader = cfg.open()?;
    let bs = dev.info().block_size as u64;
    let cap = dev.info().num_blocks;
    let start = now_ns();
    let out = Rc::new(RefCell::new(JobOutcome::starting(start, series_interval_ns)));
    let mut counts = ReplayCounts::default();
    let limit = cfg.max_requests.unwrap_or(u64::MAX);
    match cfg.mode {
        ReplayMode::Open => {
            let in_flight = Rc::new(RefCell::new(0u64));
            let mut first_ts = None;
            let mut tasks = Vec::new();
            while counts.requests < limit {
                let Some(r) = reader.next() else { break };
                let r = r.map_err(|e| Error::Input(e.to_string()))?;
                let base = *first_ts.get_or_insert(r.time_ns);
                let due = start + ((r.time_ns.saturating_sub(base)) as f64 / cfg.speed) as u64;
                if due > now_ns() {
                    sleep_until_ns(due).await;
                }
                let (lba, blocks, wrapped) = map_request(&r, bs, cap);
                counts.requests += 1;
                counts.wrapped += wrapped as u64;
                let (dev, out, inf) = (dev.clone(), out.clone(), in_flight.clone());
                let seq = counts.requests;
                *inf.borrow_mut() += 1;
                counts.max_in_flight = counts.max_in_flight.max(*inf.borrow());
                tasks.push(spawn(async move {
                    issue(&dev, lba, blocks, r.write, seq, &out, &mut Vec::new()).await;
                    *inf.borrow_mut() -= 1;
                }));
                // Reap finished handles now and then so a long trace does not hold them all.
                if tasks.len() >= 4096 {
                    for t in tasks.drain(..) {
                        t.await;
                    }
                }
            }
            for t in tasks {
                t.await;
            }
        }
        ReplayMode::Closed => {
            let shared = Rc::new(RefCell::new((reader, counts.clone(), None::<Error>)));
            let mut tasks = Vec::new();
            for _ in 0..cfg.iodepth {
                let (dev, out, shared) = (dev.clone(), out.clone(), shared.clone());
                tasks.push(spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let next = {
                            let mut s = shared.borrow_mut();
                            let (rd, c, err) = &mut *s;
                            if err.is_some() || c.requests >= limit {
                                None
                            } else {
                                match rd.next() {
                                    None => None,
                                    Some(Err(e)) => {
                                        *err = Some(Error::Input(e.to_string()));
                                        None
                                    }
                                    Some(Ok(r)) => {
                                        let (lba, blocks, wrapped) = map_request(&r, bs, cap);
                                        c.requests += 1;
                                        c.wrapped += wrapped as u64;
                                        Some((lba, blocks, r.write, c.requests))
                                    }
                                }
                            }
                        };
                        let Some((lba, blocks, write, seq)) = next else { break };
                        issue(&dev, lba, blocks, write, seq, &out, &mut buf).await;
                    }
                }));
            }
            for t in tasks {
                t.await;
            }
            let Ok(cell) = Rc::try_unwrap(shared) else { unreachable!("every slot has finished") };
            let (rd, c, err) = cell.into_inner();
            if let Some(e) = err {
                return Err(e);
            }
            counts = c;
            counts.max_in_flight = cfg.iodepth as u64;
            reader = rd;
        }
    }
    counts.skipped_lines = reader.skipped();
    let o = Rc::try_unwrap(out).expect("every request has finished").into_inner();
    Ok((o, counts))
}

/// Fills and overwrites the stack as `p` says (not measured); `replay` is the trace
/// `trace_reads` reads.
pub async fn precondition(
    dev: &DevRef,
    p: &PreconditionConfig,
    seed: u64,
    replay: Option<&ReplayConfig>,
) -> Result<(), Error> {
    // Every preconditioning write says so, so a device can keep its measured policies out of
    // the state it prepares (`WriteHints::precondition`).
    const HINTS: WriteHints = WriteHints::PRECONDITION;
    const NO_DEADLINE: u64 = u64::MAX;
    if let (true, Some(r)) = (p.trace_reads, replay) {
        write_trace_reads(dev, r, p.iodepth).await?;
    }
    let bs = dev.info().block_size as u64;
    let cap = dev.info().num_blocks;
    let qd = p.iodepth.max(1) as u64;
    let failed = |e: flashrig_blockdev::DevError| Error::Run(format!("precondition: {e}"));
    // Every preconditioning loop writes with the hint; only the timed overwrite has a deadline.
    let writes = |access: Access, blocks: u64, count: u64, deadline_ns: u64, seed: u64| {
        let dev = dev.clone();
        closed_loop_until(dev, true, access, blocks, qd, count, deadline_ns, cap, seed, HINTS)
    };
    if p.fill {
        let fb = (p.fill_bs.bytes() / bs).clamp(1, cap);
        writes(Access::Seq, fb, cap / fb, NO_DEADLINE, seed).await.map_err(failed)?;
    }
    let unit = (4096 / bs).clamp(1, cap);
    let n = p.random_overwrite.bytes() / (unit * bs);
    if n > 0 {
        writes(Access::Rand, unit, n, NO_DEADLINE, seed ^ 0xC0DE).await.map_err(failed)?;
    }
    if p.random_overwrite_ms > 0 {
        let deadline_ns = now_ns().saturating_add(p.random_overwrite_ms.saturating_mul(1_000_000));
        writes(Access::Rand, unit, u64::MAX, deadline_ns, seed ^ 0x7193).await.map_err(failed)?;
        if now_ns() < deadline_ns {
            return Err(Error::Input(format!(
                "precondition.random_overwrite_ms = {}: the stack completes every write in zero \
                 simulated time, so the overwrite never ends; bound it in bytes \
                 (precondition.random_overwrite) instead, or give device latencies",
                p.random_overwrite_ms
            )));
        }
    }
    let fb = (p.fill_bs.bytes() / bs).clamp(1, cap);
    let n = p.write.bytes().div_ceil(fb * bs);
    if n > 0 {
        writes(Access::Seq, fb, n, NO_DEADLINE, seed ^ 0x5E0).await.map_err(failed)?;
    }
    if let (n @ 1.., Some(r)) = (p.trace_requests, replay) {
        let warm = ReplayConfig {
            mode: ReplayMode::Closed,
            iodepth: p.iodepth.max(1),
            max_requests: Some(n),
            ..r.clone()
        };
        let (outcome, _) = self::replay(dev.clone(), warm)
            .await
            .map_err(|e| Error::Run(format!("precondition.trace_requests: {e}")))?;
        if outcome.errors > 0 {
            return Err(Error::Run(format!(
                "precondition.trace_requests: {} of the warm-up's requests failed, the first: {}",
                outcome.errors,
                outcome.first_error.unwrap_or_default()
            )));
        }
    }
    dev.flush().await.map_err(|e| Error::Run(format!("precondition flush: {e}")))?;
    Ok(())
}

/// Writes each distinct block range that the first `max_requests` requests of `cfg`'s trace
/// read, in trace order, `iodepth` at a time (see [`PreconditionConfig::trace_reads`]).
async fn write_trace_reads(dev: &DevRef, cfg: &ReplayConfig, iodepth: u32) -> Result<(), Error> {
    let bs = dev.info().block_size as u64;
    let cap = dev.info().num_blocks;
    let mut seen = std::collections::HashSet::new();
    let mut ranges = Vec::new();
    let mut reader = cfg.open()?;
    let limit = cfg.max_requests.unwrap_or(u64::MAX);
    let mut n = 0;
    while n < limit {
        let Some(r) = reader.next() else { break };
        let r = r.map_err(|e| Error::Input(e.to_string()))?;
        n += 1;
        if !r.write {
            let (lba, blocks, _) = map_request(&r, bs, cap);
            if seen.insert((lba, blocks)) {
                ranges.push((lba, blocks));
            }
        }
    }
    let queue = Rc::new(RefCell::new(ranges.into_iter().enumerate()));
    let failed = Rc::new(RefCell::new(None::<String>));
    let mut tasks = Vec::new();
    for _ in 0..iodepth.max(1) {
        let (dev, queue, failed) = (dev.clone(), queue.clone(), failed.clone());
        tasks.push(spawn(async move {
            loop {
                let next = queue.borrow_mut().next();
                let Some((i, (lba, blocks))) = next else { break };
                let mut buf = vec![0u8; (blocks * bs) as usize];
                pattern::fill_blocks(&mut buf, bs as usize, lba, i as u64 + 1, REPLAY_SALT);
                if let Err(e) = dev.write(lba, &buf, None, WriteHints::PRECONDITION).await {
                    failed.borrow_mut().get_or_insert(format!("{blocks} blocks at {lba}: {e}"));
                    break;
                }
            }
        }));
    }
    for t in tasks {
        t.await;
    }
    let failed = failed.borrow_mut().take();
    match failed {
        Some(e) => Err(Error::Run(format!("precondition.trace_reads: write of {e}"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(off: u64, size: u64) -> Request {
        Request { time_ns: 0, write: true, offset_bytes: off, size_bytes: size, device: 0 }
    }

    #[test]
    fn requests_map_to_whole_blocks_and_wrap() {
        assert_eq!(map_request(&req(4096, 4096), 4096, 100), (1, 1, false));
        // 512-byte aligned: rounded out to the blocks it touches.
        assert_eq!(map_request(&req(4096 + 512, 4096), 4096, 100), (1, 2, false));
        // Past the end: wraps, keeping its length.
        assert_eq!(map_request(&req(4096 * 150, 8192), 4096, 100), (150 % 99, 2, true));
        assert_eq!(map_request(&req(0, 0), 4096, 100), (0, 1, false));
    }
}
