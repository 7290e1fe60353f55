//! The closed-loop workload: each job keeps `iodepth` requests in flight against the stack,
//! issuing the next request as soon as one completes, until it has moved `size` bytes or
//! `runtime_ms` has passed on the runtime's clock.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use flashrig_blockdev::{DevError, DevRef, DevResult, WriteHints};
use flashrig_check::pattern;
use flashrig_metrics::{LatencyHistogram, LatencySummary};
use flashrig_runtime::{now_ns, spawn, yield_now};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

use crate::config::WorkloadConfig;
use crate::distribution::Sampler;

/// What one job did.
#[derive(Clone, Debug, Default)]
pub struct JobOutcome {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub read_latency: LatencyHistogram,
    pub write_latency: LatencyHistogram,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The job stopped because its clock never moved (see [`STALL_OPS`]).
    pub stalled: bool,
    /// Completions per interval of the runtime's clock since `start_ns`.
    pub series: Vec<SeriesPoint>,
    /// The series' interval; 0 is [`SERIES_INTERVAL_NS`].
    pub series_interval_ns: u64,
}

/// How far a run has come, for the progress bar: shared with a display thread, so atomics.
/// Jobs publish in batches (every [`YIELD_EVERY_OPS`] requests of a slot) to keep the shared
/// cache line off the I/O path.
#[derive(Debug, Default)]
pub struct Progress {
    /// Bytes completed by all jobs.
    pub bytes: AtomicU64,
    /// The latest runtime clock reading a job published, relative to its start.
    pub clock_ns: AtomicU64,
}

/// The time series' default resolution: one point per second of the runtime's clock (virtual
/// in sim); `workload.series_ms` sets another.
pub const SERIES_INTERVAL_NS: u64 = 1_000_000_000;

/// Completions in one interval of the time series.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SeriesPoint {
    pub reads: u64,
    pub writes: u64,
    pub bytes: u64,
}

/// Requests a time-limited job may issue before its clock first moves. Beyond this, the stack
/// completes everything in zero simulated time and the job stops instead of running forever.
pub const STALL_OPS: u64 = 1_000_000;
/// A slot yields to the other tasks of its reactor after this many requests.
const YIELD_EVERY_OPS: u64 = 64;

impl JobOutcome {
    /// An outcome starting at `start_ns` with a time series of `series_interval_ns` (0: the
    /// default).
    pub fn starting(start_ns: u64, series_interval_ns: u64) -> JobOutcome {
        JobOutcome { start_ns, end_ns: start_ns, series_interval_ns, ..Default::default() }
    }

    /// The time series' interval.
    pub fn interval_ns(&self) -> u64 {
        if self.series_interval_ns == 0 {
            SERIES_INTERVAL_NS
        } else {
            self.series_interval_ns
        }
    }

    /// Records a successful request that completed at `t1_ns` after `latency_ns`.
    pub fn record(&mut self, t1_ns: u64, read: bool, bytes: u64, latency_ns: u64) {
        self.end_ns = self.end_ns.max(t1_ns);
        let i = (t1_ns.saturating_sub(self.start_ns) / self.interval_ns()) as usize;
        if self.series.len() <= i {
            self.series.resize(i + 1, SeriesPoint::default());
        }
        let p = &mut self.series[i];
        p.bytes += bytes;
        if read {
            self.reads += 1;
            self.read_bytes += bytes;
            self.read_latency.record_ns(latency_ns);
            p.reads += 1;
        } else {
            self.writes += 1;
            self.write_bytes += bytes;
            self.write_latency.record_ns(latency_ns);
            p.writes += 1;
        }
    }

    pub fn merge(&mut self, o: &JobOutcome) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.read_bytes += o.read_bytes;
        self.write_bytes += o.write_bytes;
        self.errors += o.errors;
        self.stalled |= o.stalled;
        if self.first_error.is_none() {
            self.first_error.clone_from(&o.first_error);
        }
        self.read_latency.merge(&o.read_latency);
        self.write_latency.merge(&o.write_latency);
        self.start_ns = self.start_ns.min(o.start_ns);
        self.end_ns = self.end_ns.max(o.end_ns);
        if self.series_interval_ns == 0 {
            self.series_interval_ns = o.series_interval_ns;
        }
        // Jobs start together; their series line up by interval.
        if self.series.len() < o.series.len() {
            self.series.resize(o.series.len(), SeriesPoint::default());
        }
        for (a, b) in self.series.iter_mut().zip(&o.series) {
            a.reads += b.reads;
            a.writes += b.writes;
            a.bytes += b.bytes;
        }
    }

    pub fn summary(&self) -> WorkloadSummary {
        let elapsed_ns = self.end_ns.saturating_sub(self.start_ns);
        let ios = self.reads + self.writes;
        let bytes = self.read_bytes + self.write_bytes;
        let per_s = |v: u64| {
            if elapsed_ns == 0 {
                None
            } else {
                Some(v as f64 * 1e9 / elapsed_ns as f64)
            }
        };
        let mut all = self.read_latency.clone();
        all.merge(&self.write_latency);
        let latency_cdf = thin_cdf(&all);
        WorkloadSummary {
            elapsed_ns,
            ios,
            bytes,
            reads: self.reads,
            writes: self.writes,
            read_bytes: self.read_bytes,
            write_bytes: self.write_bytes,
            errors: self.errors,
            first_error: self.first_error.clone(),
            iops: per_s(ios),
            bandwidth_bytes_per_s: per_s(bytes),
            latency: all.summary(),
            read_latency: self.read_latency.summary(),
            write_latency: self.write_latency.summary(),
            latency_cdf,
            read_latency_cdf: thin_cdf(&self.read_latency),
            write_latency_cdf: thin_cdf(&self.write_latency),
            series_interval_ns: self.interval_ns(),
            series: self.series.clone(),
        }
    }
}

/// A histogram's CDF in at most 200 points, evenly spaced over the recorded values, ending
/// with the last.
fn thin_cdf(h: &LatencyHistogram) -> Vec<(u64, f64)> {
    let cdf = h.cdf();
    let step = cdf.len().div_ceil(200).max(1);
    let mut thin: Vec<(u64, f64)> = cdf.iter().step_by(step).copied().collect();
    if let Some(&last) = cdf.last() {
        if thin.last() != Some(&last) {
            thin.push(last);
        }
    }
    thin
}

/// The numbers a run reports for the workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSummary {
    /// From the first submission to the last completion, on the runtime's clock.
    pub elapsed_ns: u64,
    pub ios: u64,
    pub bytes: u64,
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// `None` when no time elapsed (a simulated stack that models no latency).
    pub iops: Option<f64>,
    pub bandwidth_bytes_per_s: Option<f64>,
    pub latency: LatencySummary,
    pub read_latency: LatencySummary,
    pub write_latency: LatencySummary,
    /// (latency ns, fraction of requests at or below it), all requests.
    #[serde(default)]
    pub latency_cdf: Vec<(u64, f64)>,
    /// The same for reads alone and for writes alone (WAFLASH's Fig. 2 plots them apart).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_latency_cdf: Vec<(u64, f64)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write_latency_cdf: Vec<(u64, f64)>,
    #[serde(default)]
    pub series_interval_ns: u64,
    #[serde(default)]
    pub series: Vec<SeriesPoint>,
}

/// The shared state of one job's in-flight slots: what to issue next.
struct JobState {
    rng: Xoshiro256PlusPlus,
    start_ns: u64,
    /// Requests issued while the clock still read `start_ns`.
    ops_at_start: u64,
    stalled: bool,
    /// Blocks issued in the measured window (the ramp's do not count against `size`).
    issued_blocks: u64,
    limit_blocks: Option<u64>,
    /// When the ramp ends and the measured window starts (`start_ns` without a ramp).
    ramp_end_ns: u64,
    deadline_ns: Option<u64>,
    seq_cursor: u64,
    /// The addressed range: `range_blocks` blocks from `offset_blocks`.
    offset_blocks: u64,
    range_blocks: u64,
    /// Request size in blocks, or the mix to draw it from (`bssplit`).
    req_blocks: u64,
    mix: Option<Vec<(u64, u32)>>,
    random: bool,
    /// Random offsets are multiples of this many blocks.
    align_blocks: u64,
    sampler: Sampler,
    /// Rate limit: the earliest time the next request may be issued, and the gap.
    next_issue_ns: u64,
    rate_gap_ns: Option<u64>,
    read_percent: u8,
    write_seq: u64,
}

#[derive(Clone, Copy)]
struct Op {
    read: bool,
    lba: u64,
    blocks: u64,
    seq: u64,
    /// Issue no earlier than this (rate limit).
    at_ns: u64,
}

impl JobState {
    fn next(&mut self) -> Option<Op> {
        if let Some(limit) = self.limit_blocks {
            if self.issued_blocks >= limit {
                return None;
            }
        }
        // The clock matters only to a run bounded in time or with a ramp; a size-bound job
        // without a ramp does not read it for every request.
        let timed = self.deadline_ns.is_some() || self.ramp_end_ns > self.start_ns;
        let now = if timed { now_ns() } else { self.start_ns };
        if self.deadline_ns.is_some_and(|d| now >= d) {
            return None;
        }
        // On a simulated stack that models no latency the clock never moves, and a run bounded
        // only by time, or with a ramp that never ends, would never end.
        let ramping = self.ramp_end_ns > now;
        if (self.deadline_ns.is_some() || ramping) && now == self.start_ns {
            self.ops_at_start += 1;
            if self.ops_at_start > STALL_OPS && (self.limit_blocks.is_none() || ramping) {
                self.stalled = true;
                return None;
            }
        }
        let blocks = match &self.mix {
            None => self.req_blocks,
            Some(mix) => {
                let r = (self.rng.next_u64() % 100) as u32;
                let mut acc = 0;
                mix.iter()
                    .find(|&&(_, p)| {
                        acc += p;
                        r < acc
                    })
                    .map_or(mix[mix.len() - 1].0, |&(b, _)| b)
            }
        };
        let lba = if self.random {
            // The sampler's slots leave room for the largest request; a smaller one fits too.
            self.sampler.sample(&mut self.rng) * self.align_blocks
        } else {
            // Sequential requests follow each other and wrap to the start of the range when
            // the next one would run past its end.
            if self.seq_cursor + blocks > self.range_blocks {
                self.seq_cursor = 0;
            }
            let l = self.seq_cursor;
            self.seq_cursor += blocks;
            l
        } + self.offset_blocks;
        let read = match self.read_percent {
            0 => false,
            100 => true,
            p => (self.rng.next_u64() % 100) < p as u64,
        };
        if !ramping {
            self.issued_blocks += blocks;
        }
        self.write_seq += 1;
        let mut at_ns = 0;
        if let Some(gap) = self.rate_gap_ns {
            at_ns = self.next_issue_ns.max(now_ns());
            if self.deadline_ns.is_some_and(|d| at_ns >= d) {
                return None;
            }
            self.next_issue_ns = at_ns + gap;
        }
        Some(Op { read, lba, blocks, seq: self.write_seq, at_ns })
    }
}

/// Runs one job on the calling reactor.
pub async fn run_job(
    dev: DevRef,
    w: WorkloadConfig,
    job: u64,
    seed: u64,
    progress: Arc<Progress>,
) -> JobOutcome {
    let info = dev.info().clone();
    let bs = info.block_size as u64;
    let req_blocks = (w.max_request_bytes() / bs).max(1);
    let min_blocks = (w.min_request_bytes() / bs).max(1);
    let mix = (!w.bssplit.is_empty())
        .then(|| w.bssplit.0.iter().map(|&(s, p)| ((s.bytes() / bs).max(1), p)).collect());
    // As in fio, random offsets default to multiples of the smallest request size.
    let align_blocks = w.blockalign.map_or(min_blocks, |a| (a.bytes() / bs).clamp(1, min_blocks));
    let increment_blocks = w.offset_increment.map_or(0, |o| o.bytes() / bs);
    let offset_blocks =
        (w.offset.map_or(0, |o| o.bytes() / bs) + job * increment_blocks).min(info.num_blocks);
    let range_blocks = w
        .range
        .map_or(info.num_blocks - offset_blocks, |r| r.bytes() / bs)
        .min(info.num_blocks - offset_blocks);
    let jobs = w.jobs as u64;
    let stamp = w.stamp;
    let start = now_ns();
    // The measured window starts after the ramp (fio's `ramp_time`); the time limit counts
    // from there. Config validation bounds the ramp, so this cannot overflow.
    let window_start = start + w.ramp_ms.unwrap_or(0) * 1_000_000;
    // Jobs that share one range split it for their sequential cursors; jobs with ranges of
    // their own (`offset_increment`) start at their own.
    let seq_start = if increment_blocks == 0 && range_blocks >= req_blocks * jobs {
        (range_blocks / jobs / req_blocks) * req_blocks * job
    } else {
        0
    };
    let state = Rc::new(RefCell::new(JobState {
        rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ job.wrapping_mul(0xA076_1D64_78BD_642F)),
        start_ns: start,
        ops_at_start: 0,
        stalled: false,
        issued_blocks: 0,
        ramp_end_ns: window_start,
        limit_blocks: match (w.size, w.runtime_ms) {
            (Some(s), _) => Some(s.bytes() / bs),
            (None, None) => Some(range_blocks),
            (None, Some(_)) => None,
        },
        // Saturating: `runtime_ms` may be as large as a u64 holds (a configuration or an fio
        // job may say 10^15 days), which means no deadline in practice, not an overflow.
        deadline_ns: w
            .runtime_ms
            .map(|ms| window_start.saturating_add(ms.saturating_mul(1_000_000))),
        seq_cursor: seq_start,
        offset_blocks,
        range_blocks,
        req_blocks,
        mix,
        random: w.rw.is_random(),
        align_blocks,
        sampler: Sampler::new(
            &w.random_distribution,
            (range_blocks.saturating_sub(req_blocks) / align_blocks + 1).max(1),
            seed ^ 0x5EED,
        ),
        next_issue_ns: 0,
        rate_gap_ns: w.rate_iops.map(|r| (1_000_000_000 / r).max(1)),
        read_percent: w.rw.read_percent(w.rwmixread),
        write_seq: 0,
    }));
    let outcome = Rc::new(RefCell::new(JobOutcome::starting(window_start, w.series_interval_ns())));
    let mut slots = Vec::new();
    for _ in 0..w.iodepth {
        let dev = dev.clone();
        let state = state.clone();
        let outcome = outcome.clone();
        let progress = progress.clone();
        slots.push(spawn(async move {
            // Written blocks name themselves (flashrig-check's pattern), so a run's data can be
            // verified afterwards; the payload is generated once per slot and each write only
            // restamps the headers, as fio reuses its buffers, so that generating data does
            // not dominate a run against a memory-speed stack.
            let salt = seed.wrapping_add(job);
            let mut buf = vec![0u8; (req_blocks * bs) as usize];
            pattern::fill_blocks(&mut buf, bs as usize, 0, 1, salt);
            let mut done_here = 0u64;
            let mut unpublished_bytes = 0u64;
            let publish = |bytes: &mut u64| {
                progress.bytes.fetch_add(std::mem::take(bytes), Ordering::Relaxed);
                progress.clock_ns.fetch_max(now_ns().saturating_sub(start), Ordering::Relaxed);
            };
            loop {
                let op = state.borrow_mut().next();
                let Some(op) = op else { break };
                done_here += 1;
                if done_here.is_multiple_of(YIELD_EVERY_OPS) {
                    publish(&mut unpublished_bytes);
                    // A stack that completes at once (RAM) never suspends this loop; yield now
                    // and then so the other slots and jobs of this reactor run alongside.
                    yield_now().await;
                }
                if op.at_ns > now_ns() {
                    flashrig_runtime::sleep_until_ns(op.at_ns).await;
                }
                // Latency counts from submission: preparing the data is the client's work.
                let buf = &mut buf[..(op.blocks * bs) as usize];
                if !op.read && stamp {
                    for (i, b) in buf.chunks_exact_mut(bs as usize).enumerate() {
                        pattern::restamp_block(b, op.lba + i as u64, op.seq, salt);
                    }
                }
                let t0 = now_ns();
                let res = if op.read {
                    dev.read(op.lba, buf, None).await
                } else {
                    dev.write(op.lba, buf, None, WriteHints::NONE).await
                };
                let t1 = now_ns();
                let mut o = outcome.borrow_mut();
                o.end_ns = o.end_ns.max(t1);
                match res {
                    // Completed during the ramp: as fio does, the ramp's requests count
                    // nowhere; an error still counts wherever it happens.
                    Ok(()) if t1 < window_start => {}
                    Ok(()) => {
                        o.record(t1, op.read, buf.len() as u64, t1 - t0);
                        unpublished_bytes += buf.len() as u64;
                    }
                    Err(e) => {
                        o.errors += 1;
                        if o.first_error.is_none() {
                            o.first_error = Some(format!("lba {}: {e}", op.lba));
                        }
                    }
                }
            }
            publish(&mut unpublished_bytes);
        }));
    }
    for s in slots {
        s.await;
    }
    let mut o = outcome.borrow().clone();
    o.stalled = state.borrow().stalled;
    o
}

/// Sequential or uniformly random offsets.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Seq,
    Rand,
}

/// A closed loop of `count` commands of `bs_blocks` blocks at queue depth `qd` over the first
/// `range_blocks` blocks, writing a distinct first 8 bytes each time. Returns (runtime ns elapsed,
/// commands done), or the first error. Preconditioning and the SSD's own measurements use it.
// The parameters are one job's settings, each spelled out at the call site as in an fio line.
#[allow(clippy::too_many_arguments)]
pub async fn closed_loop(
    dev: DevRef,
    write: bool,
    access: Access,
    bs_blocks: u64,
    qd: u64,
    count: u64,
    range_blocks: u64,
    seed: u64,
) -> DevResult<(u64, u64)> {
    let hints = WriteHints::NONE;
    closed_loop_until(dev, write, access, bs_blocks, qd, count, u64::MAX, range_blocks, seed, hints)
        .await
}

/// [`closed_loop`] that also stops issuing commands once the runtime's clock reaches
/// `deadline_ns` (those in flight finish), its writes carrying `hints`. Returns the time taken
/// and the commands issued.
#[allow(clippy::too_many_arguments)]
pub async fn closed_loop_until(
    dev: DevRef,
    write: bool,
    access: Access,
    bs_blocks: u64,
    qd: u64,
    count: u64,
    deadline_ns: u64,
    range_blocks: u64,
    seed: u64,
    hints: WriteHints,
) -> DevResult<(u64, u64)> {
    let start = now_ns();
    let slots = range_blocks / bs_blocks;
    // Every task of the loop runs on this reactor, so a plain cell hands out the commands.
    let next = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let mut tasks = Vec::new();
    for q in 0..qd {
        let (dev, next) = (dev.clone(), next.clone());
        tasks.push(spawn(async move {
            let bs = dev.info().block_size as usize;
            let mut buf = vec![0u8; bs * bs_blocks as usize];
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed.wrapping_mul(1_000_003) + q);
            loop {
                let i = next.get();
                if i >= count {
                    break;
                }
                // The clock is read only when there is a deadline: a count-bound loop stays
                // as cheap as it was. On a stack that models no latency the clock never
                // moves; the loop then gives up after `STALL_OPS` commands, before the
                // deadline, and the caller tells the user.
                if deadline_ns != u64::MAX {
                    let now = now_ns();
                    if now >= deadline_ns || (now == start && i >= STALL_OPS) {
                        break;
                    }
                }
                next.set(i + 1);
                let slot = match access {
                    Access::Seq => i % slots,
                    Access::Rand => rng.next_u64() % slots,
                };
                let lba = slot * bs_blocks;
                if write {
                    // Distinct bytes per write, so payload modes that keep data see real data.
                    buf[..8].copy_from_slice(&i.to_le_bytes());
                    dev.write(lba, &buf, None, hints).await?;
                } else {
                    dev.read(lba, &mut buf, None).await?;
                }
            }
            Ok::<(), DevError>(())
        }));
    }
    for t in tasks {
        t.await?;
    }
    Ok((now_ns() - start, next.get().min(count)))
}

#[cfg(test)]
mod tests {
    use flashrig_devices::RamDevice;
    use flashrig_runtime::{run, RuntimeKind};

    use super::*;
    use crate::config::Pattern;
    use crate::size::Size;

    /// With `offset_increment`, job `j` writes only its own window, from the window's start
    /// (csal-eurosys24.txt §3.1's eight VMs, each on its own virtual disk).
    #[test]
    fn offset_increment_gives_every_job_its_own_window() {
        let (written, _) = run(RuntimeKind::Sim, 1, || async {
            let ram = Arc::new(RamDevice::new("ram", 4096, 64, 0, 0));
            let dev: DevRef = ram.clone();
            let w = WorkloadConfig {
                rw: Pattern::Write,
                bs: Size::kib(4),
                iodepth: 2,
                jobs: 4,
                range: Some(Size::kib(16)),
                offset: Some(Size::kib(4)),
                offset_increment: Some(Size::kib(64)),
                ..WorkloadConfig::default()
            };
            let progress = Arc::new(Progress::default());
            for job in 0..4 {
                run_job(dev.clone(), w.clone(), job, 1, progress.clone()).await;
            }
            let mut written = Vec::new();
            let mut buf = vec![0u8; 4096];
            for lba in 0..64 {
                dev.read(lba, &mut buf, None).await.unwrap();
                if buf.iter().any(|&b| b != 0) {
                    written.push(lba);
                }
            }
            written
        });
        // Four windows of 4 blocks, at 1, 17, 33 and 49.
        let want: Vec<u64> = (0..4).flat_map(|j| (0..4).map(move |b| 1 + 16 * j + b)).collect();
        assert_eq!(written, want);
    }

    /// A ramp (fio's `ramp_time`) runs the job before its measured window: the window starts
    /// when the ramp ends, lasts `runtime_ms` from there, and counts none of the ramp's
    /// requests, while the device saw both. Method: one job at queue depth 1 writes
    /// sequentially to a RAM device that takes 10 us per write, 1 ms of ramp then 1 ms
    /// measured, on the simulated clock.
    #[test]
    fn a_ramp_runs_first_and_counts_nowhere() {
        let (got, _) = run(RuntimeKind::Sim, 1, || async {
            let dev: DevRef = Arc::new(RamDevice::new("ram", 4096, 1024, 0, 10_000));
            let w = WorkloadConfig {
                rw: Pattern::Write,
                bs: Size::kib(4),
                iodepth: 1,
                runtime_ms: Some(1),
                ramp_ms: Some(1),
                ..WorkloadConfig::default()
            };
            let t0 = now_ns();
            let o = run_job(dev.clone(), w, 0, 1, Arc::new(Progress::default())).await;
            let mut buf = vec![0u8; 4096];
            let mut written = 0;
            for lba in 0..1024 {
                dev.read(lba, &mut buf, None).await.unwrap();
                written += buf.iter().any(|&b| b != 0) as u64;
            }
            (o.start_ns - t0, o.end_ns - t0, o.writes, written)
        });
        let (window_start_ns, end_ns, measured, written) = got;
        assert_eq!(window_start_ns, 1_000_000, "the window starts when the ramp ends");
        assert!((2_000_000..2_100_000).contains(&end_ns), "ends 1 ms later: {end_ns}");
        // 100 writes of 10 us in each millisecond.
        assert!((99..=101).contains(&measured), "measured {measured} writes");
        assert!((199..=202).contains(&written), "the device saw {written} writes");
    }
}
