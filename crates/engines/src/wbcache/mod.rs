//! `wbcache`: an Open-CAS-like write-back cache over members [cache device, core device], the
//! "Open-CAS" baseline of CSAL (EuroSys '24, §3.2): a fast SSD caching a QLC SSD in cache
//! lines of 64 KiB, the QLC's indirection unit.
//!
//! What it takes from Open-CAS / OCF (see `docs/baselines.md` for the citations):
//! - Cache lines of a configurable size (OCF offers 4 to 64 KiB; default 64 KiB here as the
//!   paper configures it) with a valid and a dirty bit per sector (a device block).
//! - Write-back mode: write hits and misses go to the cache; only the written sectors become
//!   valid and dirty. Read misses are promoted into the cache (OCF's default promotion policy
//!   `always`). A line that cannot be mapped (every line is busy) is served pass-through, as
//!   OCF falls back to pass-through on a mapping error.
//! - LRU eviction: a full cache evicts the least recently used line, first writing its dirty
//!   sectors back to the core as maximal contiguous runs, so write-back sizes vary from one
//!   sector to a whole line (the paper's "4 to 64 KiB" flushes, §6.4).
//! - The ALRU cleaning policy with OCF's defaults: the cleaner wakes every `wake_up` (20 s);
//!   it does nothing while the cache saw I/O within `activity_threshold` (10 s) or when it
//!   found nothing to clean less than `wake_up` ago; otherwise it writes back up to
//!   `flush_max_buffers` (100) dirty lines whose last write is older than `staleness_time`
//!   (120 s), oldest first, and runs again at once while it finds some.
//! - Sequential cutoff with OCF's defaults: a request continuing a stream (one of 128,
//!   matched on the next block and direction) that brings the stream to the threshold (1 MiB)
//!   bypasses the cache when the policy says so (default `full`: only while at most 512 lines
//!   plus the request's are free, OCF's margin). A request that continues no stream is never
//!   cut off. A bypassing write first invalidates the cached copies of its sectors.
//!
//! Crash behaviour: the metadata lives in DRAM only, as in the paper's setup ("Open-CAS and
//! dm-zoned do not support dirty crash recovery", §6.4). `flush` flushes both members, so every
//! completed write is durable on a device, but after a crash the mapping of dirty sectors to
//! cache lines is gone: an engine rebuilt over the same members sees only the core device, and
//! dirty data not yet written back is lost to it. The engine offers no per-block metadata.

mod meta;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use flashrig_blockdev::{
    check_io, check_range, BlockDevice, DevError, DevRef, DevResult, DeviceInfo, WriteHints,
};
use flashrig_metrics::{Counter, Registry};
use flashrig_runtime::{in_runtime, now_ns, sleep_ns, spawn};
use parking_lot::Mutex;

pub use meta::SeqCutoffPolicy;
use meta::{mask, runs, CutoffRule, Meta};

use crate::raid::locks::{StripeGuard, StripeLocks};
use crate::{check_members, EngineConstraints};

pub const CONSTRAINTS: EngineConstraints =
    EngineConstraints { name: "wbcache", min_members: 2, failures_tolerated: 0 };

const SECOND_NS: u64 = 1_000_000_000;

/// Which cleaning policy runs in the background.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CleaningPolicy {
    /// OCF's default: approximately-LRU cleaning of stale dirty lines while the cache idles.
    Alru,
    /// No background cleaning: dirty data reaches the core only by eviction.
    Nop,
}

#[derive(Clone, Debug)]
pub struct WbcacheOptions {
    /// Cache line size in bytes (a whole number of blocks, at most 64 blocks).
    pub line_bytes: u64,
    pub cleaning: CleaningPolicy,
    /// ALRU: period between the cleaner's wake-ups (OCF default 20 s).
    pub wake_up_ns: u64,
    /// ALRU: a dirty line is cleaned once its last write is this old (OCF default 120 s).
    pub staleness_ns: u64,
    /// ALRU: lines cleaned per wake-up at most (OCF default 100).
    pub flush_max_buffers: usize,
    /// ALRU: the cache must have seen no I/O for this long before cleaning (OCF default 10 s).
    pub activity_threshold_ns: u64,
    pub seq_cutoff_policy: SeqCutoffPolicy,
    /// Bytes a sequential stream reaches before it bypasses the cache (OCF default 1 MiB).
    pub seq_cutoff_threshold_bytes: u64,
    /// Sequential streams tracked at once (OCF's `OCF_SEQ_CUTOFF_MAX_STREAMS`).
    pub seq_cutoff_streams: usize,
    /// Policy `full` applies while at most this many lines, plus the request's, are free
    /// (OCF's `SEQ_CUTOFF_FULL_MARGIN`, 512).
    pub seq_cutoff_full_margin_lines: u64,
}

impl Default for WbcacheOptions {
    fn default() -> Self {
        WbcacheOptions {
            line_bytes: 64 << 10,
            cleaning: CleaningPolicy::Alru,
            wake_up_ns: 20 * SECOND_NS,
            staleness_ns: 120 * SECOND_NS,
            flush_max_buffers: 100,
            activity_threshold_ns: 10 * SECOND_NS,
            seq_cutoff_policy: SeqCutoffPolicy::Full,
            seq_cutoff_threshold_bytes: 1 << 20,
            seq_cutoff_streams: 128,
            seq_cutoff_full_margin_lines: 512,
        }
    }
}

/// Upper bounds (bytes) of the write-back size buckets; the last bucket takes the rest.
const FLUSH_BUCKETS_BYTES: [(u64, &str); 5] = [
    (4 << 10, "flush_writes_le_4k"),
    (8 << 10, "flush_writes_le_8k"),
    (16 << 10, "flush_writes_le_16k"),
    (32 << 10, "flush_writes_le_32k"),
    (64 << 10, "flush_writes_le_64k"),
];

struct Counters {
    read_hits: Arc<Counter>,
    read_misses: Arc<Counter>,
    write_hits: Arc<Counter>,
    write_misses: Arc<Counter>,
    promoted_blocks: Arc<Counter>,
    evictions: Arc<Counter>,
    flushed_blocks: Arc<Counter>,
    flush_writes: Arc<Counter>,
    flush_buckets: Vec<Arc<Counter>>,
    flush_writes_gt_64k: Arc<Counter>,
    cleaner_flushes: Arc<Counter>,
    cleaner_wakeups: Arc<Counter>,
    cutoff_bypasses: Arc<Counter>,
    pass_through: Arc<Counter>,
}

impl Counters {
    fn new(r: &Registry) -> Self {
        Counters {
            read_hits: r.counter("read_hits"),
            read_misses: r.counter("read_misses"),
            write_hits: r.counter("write_hits"),
            write_misses: r.counter("write_misses"),
            promoted_blocks: r.counter("promoted_blocks"),
            evictions: r.counter("evictions"),
            flushed_blocks: r.counter("flushed_blocks"),
            flush_writes: r.counter("flush_writes"),
            flush_buckets: FLUSH_BUCKETS_BYTES.iter().map(|(_, n)| r.counter(n)).collect(),
            flush_writes_gt_64k: r.counter("flush_writes_gt_64k"),
            cleaner_flushes: r.counter("cleaner_flushes"),
            cleaner_wakeups: r.counter("cleaner_wakeups"),
            cutoff_bypasses: r.counter("cutoff_bypasses"),
            pass_through: r.counter("pass_through"),
        }
    }
}

/// The part of a request that falls in one cache line.
#[derive(Clone, Copy, Debug)]
struct Piece {
    line: u64,
    /// First sector within the line, and sectors.
    first: u64,
    count: u64,
    /// Offset of the piece in the request, in blocks.
    off: u64,
}

struct Inner {
    cache: DevRef,
    core: DevRef,
    opts: WbcacheOptions,
    bs: usize,
    line_blocks: u64,
    meta: Mutex<Meta>,
    /// One lock per core line: a request holds the locks of its lines for its whole duration;
    /// the evictor and the cleaner only try them, skipping busy lines as OCF's cleaner does.
    locks: StripeLocks,
    c: Counters,
    cleaner_started: AtomicBool,
}

pub struct Wbcache {
    info: DeviceInfo,
    inner: Arc<Inner>,
    metrics: Arc<Registry>,
}

impl Wbcache {
    /// A cache over `members` = [cache, core], empty (all metadata is in DRAM, so there is
    /// nothing to load).
    pub fn new(name: &str, members: Vec<DevRef>, opts: WbcacheOptions) -> DevResult<Self> {
        if members.len() != 2 {
            return Err(DevError::Invalid(format!(
                "wbcache needs exactly 2 members (cache, core), got {}",
                members.len()
            )));
        }
        let (bs, _) = check_members(&CONSTRAINTS, &members)?;
        if opts.line_bytes == 0 || !opts.line_bytes.is_multiple_of(bs as u64) {
            return Err(DevError::Invalid(format!(
                "wbcache: line size {} bytes is not a positive multiple of the {bs}-byte block",
                opts.line_bytes
            )));
        }
        let line_blocks = opts.line_bytes / bs as u64;
        if line_blocks > 64 {
            return Err(DevError::Invalid(format!(
                "wbcache: line size {} bytes holds {line_blocks} blocks, at most 64 are supported",
                opts.line_bytes
            )));
        }
        let cache_lines = members[0].info().num_blocks / line_blocks;
        if cache_lines == 0 {
            return Err(DevError::Invalid(format!(
                "wbcache: cache device {} holds no whole {}-byte line",
                members[0].info().name,
                opts.line_bytes
            )));
        }
        let core_info = members[1].info();
        let mut info = DeviceInfo::new(name, bs, core_info.num_blocks);
        info.optimal_io_blocks = line_blocks as u32;
        info.caps.fua = members.iter().all(|m| m.info().caps.fua);
        // Over a member that keeps only fingerprints, reads do not return what was written.
        info.caps.timing_only = members.iter().any(|m| m.info().caps.timing_only);
        let metrics = Registry::new(name);
        let c = Counters::new(&metrics);
        metrics.set_value("cache_lines", cache_lines as f64);
        let inner = Inner {
            cache: members[0].clone(),
            core: members[1].clone(),
            meta: Mutex::new(Meta::new(cache_lines, opts.seq_cutoff_streams.max(1))),
            opts,
            bs: bs as usize,
            line_blocks,
            locks: StripeLocks::default(),
            c,
            cleaner_started: AtomicBool::new(false),
        };
        Ok(Wbcache { info, inner: Arc::new(inner), metrics })
    }

    /// Cache lines on the cache device.
    pub fn cache_lines(&self) -> u64 {
        self.inner.cache.info().num_blocks / self.inner.line_blocks
    }

    /// Dirty lines right now.
    pub fn dirty_lines(&self) -> usize {
        self.inner.meta.lock().dirty_lines()
    }

    /// Cache lines holding nothing right now.
    pub fn free_lines(&self) -> usize {
        self.inner.meta.lock().free_lines()
    }

    /// Mapped (valid) lines right now.
    pub fn mapped_lines(&self) -> usize {
        self.inner.meta.lock().mapped_lines()
    }

    /// The valid and dirty sector bits of the line holding `lba`, if it is cached.
    pub fn line_state(&self, lba: u64) -> Option<(u64, u64)> {
        let l = self.inner.meta.lock().get(lba / self.inner.line_blocks)?;
        Some((l.valid, l.dirty))
    }

    fn pieces(&self, lba: u64, blocks: u64) -> Vec<Piece> {
        let lb = self.inner.line_blocks;
        let mut out = Vec::new();
        let mut at = lba;
        while at < lba + blocks {
            let line = at / lb;
            let first = at % lb;
            let count = (lb - first).min(lba + blocks - at);
            out.push(Piece { line, first, count, off: at - lba });
            at += count;
        }
        out
    }
}

impl Inner {
    fn cutoff_rule(&self, request_lines: usize) -> CutoffRule {
        CutoffRule {
            policy: self.opts.seq_cutoff_policy,
            threshold_bytes: self.opts.seq_cutoff_threshold_bytes,
            full_below_lines: self.opts.seq_cutoff_full_margin_lines + request_lines as u64,
        }
    }

    /// Notes a request's arrival (the ALRU activity clock) and starts the cleaner on first use
    /// (it needs a runtime to run in, which engine construction may not have).
    fn note_io(self: &Arc<Self>) {
        self.meta.lock().last_io_ns = now_ns();
        if self.opts.cleaning == CleaningPolicy::Alru
            && in_runtime()
            && !self.cleaner_started.swap(true, Ordering::Relaxed)
        {
            let weak = Arc::downgrade(self);
            drop(spawn(cleaner(weak)));
        }
    }

    async fn lock_lines(&self, pieces: &[Piece]) -> Vec<StripeGuard<'_>> {
        let mut guards = Vec::with_capacity(pieces.len());
        // Pieces are in ascending line order, so concurrent requests never wait in a cycle.
        for p in pieces {
            guards.push(self.locks.lock(p.line).await);
        }
        guards
    }

    /// Writes the dirty sectors of `line` (locked by the caller) back to the core as maximal
    /// contiguous runs and marks them clean. Returns the blocks written.
    async fn write_back(&self, line: u64) -> DevResult<u64> {
        let Some(l) = self.meta.lock().get(line) else { return Ok(0) };
        let lb = self.line_blocks;
        let mut written = 0;
        for (first, n) in runs(l.dirty, lb) {
            let mut buf = vec![0u8; n as usize * self.bs];
            self.cache.read(l.slot * lb + first, &mut buf, None).await?;
            self.core.write(line * lb + first, &buf, None, WriteHints::NONE).await?;
            let bytes = n * self.bs as u64;
            match FLUSH_BUCKETS_BYTES.iter().position(|(max, _)| bytes <= *max) {
                Some(i) => self.c.flush_buckets[i].inc(),
                None => self.c.flush_writes_gt_64k.inc(),
            }
            self.c.flush_writes.inc();
            written += n;
        }
        self.c.flushed_blocks.add(written);
        self.meta.lock().cleaned(line, l.dirty);
        Ok(written)
    }

    /// Evicts the least recently used line that no request holds: writes back its dirty
    /// sectors, unmaps it and returns its cache line. `None` when every line is busy.
    async fn evict_one(&self) -> DevResult<Option<u64>> {
        let victim = {
            let m = self.meta.lock();
            let found = m.lru_order().find_map(|line| self.locks.try_lock(line).map(|g| (line, g)));
            found
        };
        let Some((line, _guard)) = victim else { return Ok(None) };
        self.write_back(line).await?;
        self.c.evictions.inc();
        Ok(self.meta.lock().unmap(line))
    }

    /// The cache line holding `line` (locked by the caller), mapping it (and evicting for it)
    /// if needed; `None` when no line can be had. The flag says whether it was mapped before.
    async fn slot_for(&self, line: u64) -> DevResult<Option<(u64, bool)>> {
        {
            let mut m = self.meta.lock();
            if let Some(l) = m.get(line) {
                m.touch(line);
                return Ok(Some((l.slot, true)));
            }
            if let Some(slot) = m.map(line) {
                return Ok(Some((slot, false)));
            }
        }
        match self.evict_one().await? {
            Some(slot) => {
                self.meta.lock().map_to(line, slot);
                Ok(Some((slot, false)))
            }
            None => Ok(None),
        }
    }

    /// One run of the ALRU cleaner (OCF's `cleaning_alru_perform_cleaning`); returns how long
    /// to sleep before the next.
    async fn clean_once(&self) -> u64 {
        self.c.cleaner_wakeups.inc();
        let now = now_ns();
        let wake_up = self.opts.wake_up_ns;
        let picked: Vec<(u64, StripeGuard<'_>)> = {
            let mut m = self.meta.lock();
            // OCF's `is_cleanup_possible`: recent I/O, or an empty pass less than a wake-up
            // period ago, postpone cleaning.
            if now.saturating_sub(m.last_io_ns) < self.opts.activity_threshold_ns
                || now.saturating_sub(m.cleaner_access_ns) <= wake_up
            {
                return wake_up;
            }
            let before = now.saturating_sub(self.opts.staleness_ns);
            let picked: Vec<_> = m
                .stale(before)
                .filter_map(|line| self.locks.try_lock(line).map(|g| (line, g)))
                .take(self.opts.flush_max_buffers)
                .collect();
            if picked.is_empty() {
                m.cleaner_access_ns = now;
                return wake_up;
            }
            picked
        };
        // OCF sorts the lines it cleans by core address.
        let mut picked = picked;
        picked.sort_by_key(|(line, _)| *line);
        for (line, _guard) in &picked {
            if self.write_back(*line).await.is_err() {
                return wake_up;
            }
            self.c.cleaner_flushes.inc();
        }
        0
    }
}

/// The background cleaner: runs until the engine is dropped.
async fn cleaner(weak: Weak<Inner>) {
    let mut interval = match weak.upgrade() {
        Some(inner) => inner.opts.wake_up_ns,
        None => return,
    };
    loop {
        sleep_ns(interval).await;
        let Some(inner) = weak.upgrade() else { return };
        interval = inner.clean_once().await;
    }
}

#[async_trait(?Send)]
impl BlockDevice for Wbcache {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn kind(&self) -> &'static str {
        "wbcache"
    }
    fn metrics(&self) -> Option<Arc<Registry>> {
        let (dirty, mapped) = {
            let m = self.inner.meta.lock();
            (m.dirty_lines(), m.mapped_lines())
        };
        self.metrics.set_value("dirty_lines", dirty as f64);
        self.metrics.set_value("mapped_lines", mapped as f64);
        Some(self.metrics.clone())
    }
    fn children(&self) -> Vec<DevRef> {
        vec![self.inner.cache.clone(), self.inner.core.clone()]
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, buf.len(), md.as_ref().map(|m| m.len()))?;
        let inner = &self.inner;
        inner.note_io();
        let pieces = self.pieces(lba, blocks);
        let _guards = inner.lock_lines(&pieces).await;
        let bytes = blocks * inner.bs as u64;
        let cutoff = inner.meta.lock().seq_cutoff(
            lba,
            blocks,
            bytes,
            false,
            inner.cutoff_rule(pieces.len()),
        );
        if cutoff {
            inner.c.cutoff_bypasses.inc();
        }
        let (bs, lb) = (inner.bs, inner.line_blocks);
        for p in &pieces {
            let want = mask(p.first, p.count);
            let line = inner.meta.lock().get(p.line);
            let valid = line.map_or(0, |l| l.valid & want);
            let part = &mut buf[(p.off as usize * bs)..((p.off + p.count) as usize * bs)];
            if valid == want {
                let slot = line.expect("valid sectors are mapped").slot;
                inner.cache.read(slot * lb + p.first, part, None).await?;
                inner.meta.lock().touch(p.line);
                inner.c.read_hits.inc();
                continue;
            }
            inner.c.read_misses.inc();
            // Sectors the cache holds come from it (they may be newer than the core); the
            // rest come from the core, each as maximal runs.
            let slot = line.map(|l| l.slot);
            for (bits, from_cache) in [(valid, true), (want & !valid, false)] {
                for (first, n) in runs(bits, lb) {
                    let r =
                        ((first - p.first) as usize * bs)..((first - p.first + n) as usize * bs);
                    match (from_cache, slot) {
                        (true, Some(slot)) => {
                            inner.cache.read(slot * lb + first, &mut part[r], None).await?
                        }
                        _ => inner.core.read(p.line * lb + first, &mut part[r], None).await?,
                    }
                }
            }
            if cutoff {
                continue;
            }
            // Promotion `always`: the sectors read from the core enter the cache, clean.
            let missing = want & !valid;
            if let Some((slot, _)) = inner.slot_for(p.line).await? {
                for (first, n) in runs(missing, lb) {
                    let r =
                        ((first - p.first) as usize * bs)..((first - p.first + n) as usize * bs);
                    inner.cache.write(slot * lb + first, &part[r], None, WriteHints::NONE).await?;
                }
                inner.meta.lock().set_clean(p.line, missing);
                inner.c.promoted_blocks.add(missing.count_ones() as u64);
            } else {
                inner.c.pass_through.inc();
            }
        }
        Ok(())
    }

    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, data.len(), md.map(|m| m.len()))?;
        let inner = &self.inner;
        inner.note_io();
        let pieces = self.pieces(lba, blocks);
        let _guards = inner.lock_lines(&pieces).await;
        let bytes = blocks * inner.bs as u64;
        let cutoff =
            inner.meta.lock().seq_cutoff(lba, blocks, bytes, true, inner.cutoff_rule(pieces.len()));
        if cutoff {
            // The stream bypasses the cache: cached copies of its sectors would be stale.
            inner.c.cutoff_bypasses.inc();
            {
                let mut m = inner.meta.lock();
                for p in &pieces {
                    m.invalidate(p.line, mask(p.first, p.count));
                }
            }
            return inner.core.write(lba, data, None, hints).await;
        }
        let (bs, lb) = (inner.bs, inner.line_blocks);
        for p in &pieces {
            let bits = mask(p.first, p.count);
            let part = &data[(p.off as usize * bs)..((p.off + p.count) as usize * bs)];
            match inner.slot_for(p.line).await? {
                Some((slot, hit)) => {
                    inner.cache.write(slot * lb + p.first, part, None, hints).await?;
                    inner.meta.lock().set_dirty(p.line, bits, now_ns());
                    if hit {
                        inner.c.write_hits.inc();
                    } else {
                        inner.c.write_misses.inc();
                    }
                }
                None => {
                    // No line could be mapped: this piece goes pass-through.
                    inner.c.pass_through.inc();
                    inner.meta.lock().invalidate(p.line, bits);
                    inner.core.write(p.line * lb + p.first, part, None, hints).await?;
                }
            }
        }
        Ok(())
    }

    async fn flush(&self) -> DevResult<()> {
        // Write-back data is durable once on the cache device; the flush reaches both members
        // (OCF forwards a flush to the cache and the core volumes).
        let (a, b) = futures_util::join!(self.inner.cache.flush(), self.inner.core.flush());
        a.and(b)
    }

    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        check_range(&self.info, lba, num_blocks)?;
        if num_blocks == 0 {
            return Ok(());
        }
        let inner = &self.inner;
        inner.note_io();
        let pieces = self.pieces(lba, num_blocks);
        let _guards = inner.lock_lines(&pieces).await;
        {
            let mut m = inner.meta.lock();
            for p in &pieces {
                m.invalidate(p.line, mask(p.first, p.count));
            }
        }
        inner.core.trim(lba, num_blocks).await
    }
}
