//! `dmzoned`: a dm-zoned-like target over members [fast device, zoned device], the "dm-zoned"
//! baseline of CSAL (EuroSys '24, §3.3): random zones on a fast SSD in front of the sequential
//! zones of a ZNS SSD, exposed as a regular block device.
//!
//! What it takes from Linux dm-zoned (`Documentation/admin-guide/device-mapper/dm-zoned.rst`
//! and `drivers/md/dm-zoned-{target,metadata,reclaim}.c`; citations in `docs/baselines.md`):
//! - The logical space is cut into chunks of the zone size; each chunk maps to one data zone.
//!   The regular (fast) device is split into zones of the same size ("random zones"); its
//!   first zone(s) hold the metadata.
//! - A write to an unmapped chunk maps it to a free random zone. A write to a chunk whose data
//!   zone is random, or sequential with the write at its write pointer, goes there directly;
//!   any other write goes to the chunk's buffer zone (a random zone mapped to it). Per-zone
//!   validity bitmaps say which copy of a block is current; reads take the data zone's valid
//!   block, else the buffer zone's, else zeros. Discards clear validity only.
//! - Reclaim, one zone at a time, oldest-mapped random zone first: an empty random data zone is
//!   freed; a random data zone is copied into a free sequential zone ("RC-1", random to
//!   sequential), valid blocks at their offsets with the gaps before them zero-filled to keep
//!   the writes sequential (the "one-for-one" policy with padding, CSAL §3.3); a buffer zone
//!   whose valid blocks all lie past its data zone's write pointer is copied after it (also
//!   random to sequential); otherwise the sequential data zone is merged into its buffer zone
//!   ("RC-2", sequential to random), the chunk remapped to the buffer zone and the sequential
//!   zone reset — later reclaimed by RC-1 like any random data zone.
//! - When: while the target is busy, reclaim runs when at most 30% of the random zones are
//!   free (`DMZ_RECLAIM_LOW_UNMAP_RND`) and never when 50% or more are
//!   (`DMZ_RECLAIM_HIGH_UNMAP_RND`); after 10 s without I/O (`DMZ_IDLE_PERIOD`) it runs
//!   while any random zone is mapped. Copies are throttled as kcopyd is: full speed when idle
//!   or below 15% free, else at `min(75, 100 - free% / 2)` percent duty. A writer that finds
//!   no free random zone waits for reclaim.
//! - Metadata (mapping and bitmaps) lives in memory and is written to the fast device's
//!   metadata zone on flush, as dm-zoned flushes its dirty metadata blocks on REQ_PREFLUSH.
//!
//! The zoned member's active-zone limit is respected: a sequential zone written by reclaim is
//! finished when leaving it active would leave no active resource for the next reclaim. The
//! open limit needs nothing: the zone table closes implicitly opened zones for room.
//!
//! Not modelled: reopening from the persisted metadata (the table is written for its I/O cost
//! and layout, but no `open` reads it back, so after a crash the data is unreachable, as the
//! paper says of dm-zoned: no dirty crash recovery), dm-zoned's reserved sequential zones
//! beyond one, its per-chunk BIO work queues, and zone capacities below the zone size.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use event_listener::Event;
use flashrig_blockdev::{
    check_io, check_range, BlockDevice, DevError, DevRef, DevResult, DeviceInfo, WriteHints,
    ZoneCommand,
};
use flashrig_metrics::{Counter, Registry};
use flashrig_runtime::{in_runtime, now_ns, sleep_ns, spawn};
use parking_lot::Mutex;

use crate::raid::locks::{StripeGuard, StripeLocks};
use crate::{check_members, EngineConstraints};

pub const CONSTRAINTS: EngineConstraints =
    EngineConstraints { name: "dmzoned", min_members: 2, failures_tolerated: 0 };

/// Free random zones (percent) at or below which a busy target reclaims.
pub const RECLAIM_LOW_UNMAP_RND_PERCENT: u64 = 30;
/// Free random zones (percent) at or above which a busy target does not reclaim.
pub const RECLAIM_HIGH_UNMAP_RND_PERCENT: u64 = 50;

#[derive(Clone, Debug)]
pub struct DmzonedOptions {
    /// Time without I/O after which the target is idle and reclaims everything (10 s).
    pub idle_period_ns: u64,
    /// Sequential zones kept out of the exposed capacity for reclaim (at least 1).
    pub reserved_seq_zones: u64,
}

impl Default for DmzonedOptions {
    fn default() -> Self {
        DmzonedOptions { idle_period_ns: 10_000_000_000, reserved_seq_zones: 1 }
    }
}

/// A data or buffer zone: random zones live on the fast device, sequential on the zoned one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Z {
    Rnd(u64),
    Seq(u64),
}

#[derive(Clone, Copy, Debug, Default)]
struct ChunkMap {
    data: Option<Z>,
    /// A random buffer zone, only for a sequential data zone.
    buffer: Option<u64>,
}

struct Zone {
    valid: Vec<u64>,
    weight: u64,
    chunk: Option<u64>,
}

impl Zone {
    fn new(blocks: u64) -> Self {
        Zone { valid: vec![0; blocks.div_ceil(64) as usize], weight: 0, chunk: None }
    }
    fn test(&self, b: u64) -> bool {
        self.valid[(b / 64) as usize] & (1 << (b % 64)) != 0
    }
    fn set(&mut self, from: u64, n: u64, on: bool) {
        for b in from..from + n {
            let (w, m) = ((b / 64) as usize, 1u64 << (b % 64));
            let was = self.valid[w] & m != 0;
            if on && !was {
                self.valid[w] |= m;
                self.weight += 1;
            } else if !on && was {
                self.valid[w] &= !m;
                self.weight -= 1;
            }
        }
    }
    fn clear_all(&mut self) {
        self.valid.iter_mut().for_each(|w| *w = 0);
        self.weight = 0;
        self.chunk = None;
    }
    /// Maximal runs of valid blocks in `from..to`.
    fn valid_runs(&self, from: u64, to: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut b = from;
        while b < to {
            if self.test(b) {
                let s = b;
                while b < to && self.test(b) {
                    b += 1;
                }
                out.push((s, b - s));
            } else {
                b += 1;
            }
        }
        out
    }
}

struct Map {
    chunks: Vec<ChunkMap>,
    rnd: Vec<Zone>,
    seq: Vec<Zone>,
    seq_wp: Vec<u64>,
    seq_finished: Vec<bool>,
    free_rnd: VecDeque<u64>,
    free_seq: VecDeque<u64>,
    /// Mapped random zones (data or buffer) in mapping order: reclaim takes the oldest.
    mapped_rnd: VecDeque<u64>,
    last_io_ns: u64,
}

impl Map {
    fn zone(&mut self, z: Z) -> &mut Zone {
        match z {
            Z::Rnd(i) => &mut self.rnd[i as usize],
            Z::Seq(i) => &mut self.seq[i as usize],
        }
    }
    fn alloc_rnd(&mut self, chunk: u64) -> Option<u64> {
        let z = self.free_rnd.pop_front()?;
        self.rnd[z as usize].chunk = Some(chunk);
        self.mapped_rnd.push_back(z);
        Some(z)
    }
    /// The chunk's data zone, mapping a free random zone if it has none.
    fn data_zone_for(&mut self, chunk: u64) -> Option<Z> {
        if let Some(d) = self.chunks[chunk as usize].data {
            return Some(d);
        }
        let z = self.alloc_rnd(chunk)?;
        self.chunks[chunk as usize].data = Some(Z::Rnd(z));
        Some(Z::Rnd(z))
    }
    /// The chunk's buffer zone, mapping a free random zone if it has none.
    fn buffer_zone_for(&mut self, chunk: u64) -> Option<u64> {
        if let Some(b) = self.chunks[chunk as usize].buffer {
            return Some(b);
        }
        let z = self.alloc_rnd(chunk)?;
        self.chunks[chunk as usize].buffer = Some(z);
        Some(z)
    }
    fn free_rnd_zone(&mut self, z: u64) {
        self.rnd[z as usize].clear_all();
        self.mapped_rnd.retain(|&x| x != z);
        self.free_rnd.push_back(z);
    }
    fn free_percent(&self) -> u64 {
        self.free_rnd.len() as u64 * 100 / self.rnd.len() as u64
    }
    /// Sequential zones written but neither full nor finished (they hold an active resource).
    fn active_seq(&self) -> u32 {
        (0..self.seq.len()).filter(|&i| self.seq_wp[i] > 0 && !self.seq_finished[i]).count() as u32
    }
}

struct Counters {
    rc1_blocks: Arc<Counter>,
    rc2_blocks: Arc<Counter>,
    reclaims: Arc<Counter>,
    zone_resets: Arc<Counter>,
    zone_finishes: Arc<Counter>,
    padding_blocks: Arc<Counter>,
    direct_writes: Arc<Counter>,
    buffered_writes: Arc<Counter>,
    alloc_waits: Arc<Counter>,
    metadata_flushes: Arc<Counter>,
}

struct Inner {
    fast: DevRef,
    zoned: DevRef,
    opts: DmzonedOptions,
    bs: usize,
    zone_blocks: u64,
    /// Blocks from one sequential zone's start to the next's on the zoned member (its zone
    /// size; `zone_blocks` is the zone's writable capacity).
    zone_stride: u64,
    meta_zones: u64,
    active_limit: u32,
    map: Mutex<Map>,
    locks: StripeLocks,
    /// Wakes the reclaimer (a writer needs zones).
    kick: Event,
    /// Wakes writers waiting for a free random zone.
    freed: Event,
    c: Counters,
    started: AtomicBool,
}

pub struct Dmzoned {
    info: DeviceInfo,
    inner: Arc<Inner>,
    metrics: Arc<Registry>,
}

/// Bytes of the persisted metadata: per chunk its data and buffer zone (16), per zone its
/// bitmap and write pointer.
fn metadata_bytes(chunks: u64, zones: u64, zone_blocks: u64) -> u64 {
    64 + chunks * 16 + zones * (zone_blocks.div_ceil(64) * 8 + 8)
}

impl Dmzoned {
    pub fn new(name: &str, members: Vec<DevRef>, opts: DmzonedOptions) -> DevResult<Self> {
        if members.len() != 2 {
            return Err(DevError::Invalid(format!(
                "dmzoned needs exactly 2 members (fast device, zoned device), got {}",
                members.len()
            )));
        }
        let (bs, _) = check_members(&CONSTRAINTS, &members)?;
        let zinfo = members[1].info();
        let Some(geo) = zinfo.zones else {
            return Err(DevError::Invalid(format!(
                "dmzoned: member {} is not zoned (the second member must be)",
                zinfo.name
            )));
        };
        // A chunk is a zone's writable capacity: on a drive whose zone capacity is below its
        // zone size (the ZN540's 1077 MiB in 2 GiB), the blocks past the capacity are a hole
        // that no chunk maps, as Linux's dm-zoned maps only a zone's capacity (its zone
        // capacity support, Linux 5.9). Sequential zone `i` starts at `i * zone_stride`.
        let zb = geo.zone_capacity_blocks;
        let zone_stride = geo.zone_blocks;
        let num_seq = zinfo.num_blocks / zone_stride;
        let reserved = opts.reserved_seq_zones.max(1);
        if num_seq <= reserved {
            return Err(DevError::Invalid(format!(
                "dmzoned: {num_seq} sequential zones leave none beside {reserved} reserved"
            )));
        }
        let chunks = num_seq - reserved;
        let fast_zones = members[0].info().num_blocks / zb;
        // The metadata zones come first on the fast device, sized for every zone.
        let md_blocks = metadata_bytes(chunks, fast_zones + num_seq, zb).div_ceil(bs as u64);
        let meta_zones = md_blocks.div_ceil(zb);
        if fast_zones < meta_zones + 2 {
            return Err(DevError::Invalid(format!(
                "dmzoned: fast device {} holds {fast_zones} zones of {zb} blocks; it needs \
                 {meta_zones} for metadata and at least 2 random zones",
                members[0].info().name
            )));
        }
        let num_rnd = fast_zones - meta_zones;
        let mut info = DeviceInfo::new(name, bs, chunks * zb);
        info.caps.fua = members.iter().all(|m| m.info().caps.fua);
        // Over a member that keeps only fingerprints, reads do not return what was written.
        info.caps.timing_only = members.iter().any(|m| m.info().caps.timing_only);
        let metrics = Registry::new(name);
        let c = Counters {
            rc1_blocks: metrics.counter("reclaim_rc1_blocks"),
            rc2_blocks: metrics.counter("reclaim_rc2_blocks"),
            reclaims: metrics.counter("reclaims"),
            zone_resets: metrics.counter("zone_resets"),
            zone_finishes: metrics.counter("zone_finishes"),
            padding_blocks: metrics.counter("padding_blocks"),
            direct_writes: metrics.counter("direct_writes"),
            buffered_writes: metrics.counter("buffered_writes"),
            alloc_waits: metrics.counter("alloc_waits"),
            metadata_flushes: metrics.counter("metadata_flushes"),
        };
        metrics.set_value("random_zones", num_rnd as f64);
        metrics.set_value("sequential_zones", num_seq as f64);
        let map = Map {
            chunks: vec![ChunkMap::default(); chunks as usize],
            rnd: (0..num_rnd).map(|_| Zone::new(zb)).collect(),
            seq: (0..num_seq).map(|_| Zone::new(zb)).collect(),
            seq_wp: vec![0; num_seq as usize],
            seq_finished: vec![false; num_seq as usize],
            free_rnd: (0..num_rnd).collect(),
            free_seq: (0..num_seq).collect(),
            mapped_rnd: VecDeque::new(),
            last_io_ns: 0,
        };
        let inner = Inner {
            fast: members[0].clone(),
            zoned: members[1].clone(),
            opts,
            bs: bs as usize,
            zone_blocks: zb,
            zone_stride,
            meta_zones,
            active_limit: geo.max_active_zones,
            map: Mutex::new(map),
            locks: StripeLocks::default(),
            kick: Event::new(),
            freed: Event::new(),
            c,
            started: AtomicBool::new(false),
        };
        Ok(Dmzoned { info, inner: Arc::new(inner), metrics })
    }

    /// Random zones in all, and free now.
    pub fn random_zones(&self) -> (usize, usize) {
        let m = self.inner.map.lock();
        (m.rnd.len(), m.free_rnd.len())
    }

    /// Blocks of the exposed device per chunk (the zone size).
    pub fn chunk_blocks(&self) -> u64 {
        self.inner.zone_blocks
    }

    /// Whether reclaim would run now (the thresholds, as dm-zoned's `dmz_should_reclaim`).
    pub fn should_reclaim(&self) -> bool {
        self.inner.should_reclaim()
    }
}

impl Inner {
    fn note_io(self: &Arc<Self>) {
        self.map.lock().last_io_ns = now_ns();
        if in_runtime() && !self.started.swap(true, Ordering::Relaxed) {
            drop(spawn(reclaimer(Arc::downgrade(self))));
        }
    }

    fn idle(&self, m: &Map) -> bool {
        now_ns().saturating_sub(m.last_io_ns) >= self.opts.idle_period_ns
    }

    fn should_reclaim(&self) -> bool {
        let m = self.map.lock();
        if self.idle(&m) && !m.mapped_rnd.is_empty() {
            return true;
        }
        let p = m.free_percent();
        if p >= RECLAIM_HIGH_UNMAP_RND_PERCENT {
            return false;
        }
        p <= RECLAIM_LOW_UNMAP_RND_PERCENT
    }

    /// kcopyd's throttle, in percent of the time reclaim may copy.
    fn throttle_percent(&self) -> u64 {
        let m = self.map.lock();
        let p = m.free_percent();
        if self.idle(&m) || p < RECLAIM_LOW_UNMAP_RND_PERCENT / 2 {
            100
        } else {
            75.min(100 - p / 2)
        }
    }

    /// Where zone `z`'s block `b` lives: (device, lba).
    fn addr(&self, z: Z, b: u64) -> (&DevRef, u64) {
        match z {
            Z::Rnd(i) => (&self.fast, (self.meta_zones + i) * self.zone_blocks + b),
            Z::Seq(i) => (&self.zoned, i * self.zone_stride + b),
        }
    }

    async fn read_zone(&self, z: Z, b: u64, buf: &mut [u8]) -> DevResult<()> {
        let (dev, lba) = self.addr(z, b);
        dev.read(lba, buf, None).await
    }

    async fn write_zone(&self, z: Z, b: u64, buf: &[u8], hints: WriteHints) -> DevResult<()> {
        let (dev, lba) = self.addr(z, b);
        dev.write(lba, buf, None, hints).await
    }

    /// Waits for reclaim to free a random zone (dm-zoned's `dmz_wait_for_free_zones`). The
    /// listener is registered before the check, so a zone freed in between is not missed.
    async fn wait_for_free_zone(&self) {
        self.c.alloc_waits.inc();
        let freed = self.freed.listen();
        if self.map.lock().free_rnd.is_empty() {
            self.kick.notify(1);
            freed.await;
        }
    }

    async fn read_chunk(&self, chunk: u64, cb: u64, buf: &mut [u8]) -> DevResult<()> {
        let cm = self.map.lock().chunks[chunk as usize];
        // Per block: 0 = zeros, 1 = data zone, 2 = buffer zone.
        let n = (buf.len() / self.bs) as u64;
        let src: Vec<u8> = {
            let m = self.map.lock();
            (cb..cb + n)
                .map(|b| match (cm.data, cm.buffer) {
                    (Some(d), _) if zone_ref(&m, d).test(b) => 1,
                    (_, Some(bz)) if m.rnd[bz as usize].test(b) => 2,
                    _ => 0,
                })
                .collect()
        };
        let mut i = 0;
        while i < src.len() {
            let s = src[i];
            let mut e = i;
            while e < src.len() && src[e] == s {
                e += 1;
            }
            let part = &mut buf[i * self.bs..e * self.bs];
            let b = cb + i as u64;
            match s {
                1 => self.read_zone(cm.data.expect("mapped"), b, part).await?,
                2 => self.read_zone(Z::Rnd(cm.buffer.expect("buffered")), b, part).await?,
                _ => part.fill(0),
            }
            i = e;
        }
        Ok(())
    }

    async fn write_chunk(
        &self,
        chunk: u64,
        cb: u64,
        data: &[u8],
        hints: WriteHints,
    ) -> DevResult<()> {
        let n = (data.len() / self.bs) as u64;
        let dzone = loop {
            if let Some(d) = self.map.lock().data_zone_for(chunk) {
                break d;
            }
            self.wait_for_free_zone().await;
        };
        let direct = match dzone {
            Z::Rnd(_) => true,
            Z::Seq(s) => {
                let m = self.map.lock();
                m.seq_wp[s as usize] == cb && !m.seq_finished[s as usize]
            }
        };
        if direct {
            self.write_zone(dzone, cb, data, hints).await?;
            let mut m = self.map.lock();
            if let Z::Seq(s) = dzone {
                m.seq_wp[s as usize] = cb + n;
                if cb + n == self.zone_blocks {
                    m.seq_finished[s as usize] = true;
                }
            }
            m.zone(dzone).set(cb, n, true);
            if let Some(bz) = m.chunks[chunk as usize].buffer {
                m.rnd[bz as usize].set(cb, n, false);
            }
            self.c.direct_writes.inc();
            return Ok(());
        }
        let bz = loop {
            if let Some(b) = self.map.lock().buffer_zone_for(chunk) {
                break b;
            }
            self.wait_for_free_zone().await;
        };
        self.write_zone(Z::Rnd(bz), cb, data, hints).await?;
        let mut m = self.map.lock();
        m.rnd[bz as usize].set(cb, n, true);
        m.zone(dzone).set(cb, n, false);
        self.c.buffered_writes.inc();
        Ok(())
    }

    /// Copies the valid blocks of `src` (in `runs`) to the same offsets of sequential zone
    /// `dst` from its write pointer on, zero-filling the gaps (dm-zoned's `dmz_reclaim_copy`
    /// with `dmz_reclaim_align_wp`). Returns the blocks copied.
    async fn copy_to_seq(&self, src: Z, dst: u64, runs: &[(u64, u64)]) -> DevResult<u64> {
        let mut copied = 0;
        for &(s, n) in runs {
            let wp = self.map.lock().seq_wp[dst as usize];
            if s > wp {
                let zeros = vec![0u8; (s - wp) as usize * self.bs];
                self.write_zone(Z::Seq(dst), wp, &zeros, WriteHints::NONE).await?;
                self.c.padding_blocks.add(s - wp);
            }
            let mut buf = vec![0u8; n as usize * self.bs];
            self.read_zone(src, s, &mut buf).await?;
            self.write_zone(Z::Seq(dst), s, &buf, WriteHints::NONE).await?;
            self.map.lock().seq_wp[dst as usize] = s + n;
            copied += n;
        }
        if self.map.lock().seq_wp[dst as usize] == self.zone_blocks {
            self.map.lock().seq_finished[dst as usize] = true;
        }
        Ok(copied)
    }

    /// Finishes sequential zone `z` when leaving it active would use up the active limit.
    async fn settle_active(&self, z: u64) -> DevResult<()> {
        if self.active_limit == 0 {
            return Ok(());
        }
        let (active, open) = {
            let m = self.map.lock();
            (m.active_seq(), m.seq_wp[z as usize] > 0 && !m.seq_finished[z as usize])
        };
        if open && active >= self.active_limit {
            self.zoned.zone(ZoneCommand::Finish { zone: z }).await?;
            self.map.lock().seq_finished[z as usize] = true;
            self.c.zone_finishes.inc();
        }
        Ok(())
    }

    async fn reset_seq(&self, z: u64) -> DevResult<()> {
        self.zoned.zone(ZoneCommand::Reset { zone: z }).await?;
        self.c.zone_resets.inc();
        let mut m = self.map.lock();
        m.seq[z as usize].clear_all();
        m.seq_wp[z as usize] = 0;
        m.seq_finished[z as usize] = false;
        m.free_seq.push_back(z);
        Ok(())
    }

    /// One reclaim step (dm-zoned's `dmz_do_reclaim`). Returns false when no zone could be
    /// taken (every candidate's chunk is busy).
    async fn reclaim_one(&self) -> DevResult<bool> {
        let picked: Option<(u64, u64, StripeGuard<'_>)> = {
            let m = self.map.lock();
            let found = m.mapped_rnd.iter().find_map(|&z| {
                let chunk = m.rnd[z as usize].chunk?;
                self.locks.try_lock(chunk).map(|g| (z, chunk, g))
            });
            found
        };
        let Some((rz, chunk, _guard)) = picked else { return Ok(false) };
        self.c.reclaims.inc();
        let cm = self.map.lock().chunks[chunk as usize];
        let zb = self.zone_blocks;
        if cm.data == Some(Z::Rnd(rz)) {
            let (weight, runs) = {
                let m = self.map.lock();
                (m.rnd[rz as usize].weight, m.rnd[rz as usize].valid_runs(0, zb))
            };
            if weight == 0 {
                let mut m = self.map.lock();
                m.chunks[chunk as usize].data = None;
                m.free_rnd_zone(rz);
                return Ok(true);
            }
            // RC-1: the random data zone moves to a free sequential zone.
            let dst = self.map.lock().free_seq.pop_front().ok_or_else(|| {
                DevError::NoSpace("dmzoned: no free sequential zone for reclaim".into())
            })?;
            let copied = self.copy_to_seq(Z::Rnd(rz), dst, &runs).await?;
            self.c.rc1_blocks.add(copied);
            {
                let mut m = self.map.lock();
                let valid = m.rnd[rz as usize].valid.clone();
                let weight = m.rnd[rz as usize].weight;
                let sz = &mut m.seq[dst as usize];
                sz.valid = valid;
                sz.weight = weight;
                sz.chunk = Some(chunk);
                m.chunks[chunk as usize].data = Some(Z::Seq(dst));
                m.free_rnd_zone(rz);
            }
            self.settle_active(dst).await?;
            return Ok(true);
        }
        let Some(Z::Seq(dz)) = cm.data else {
            return Err(DevError::Invalid(format!(
                "dmzoned: random zone {rz} is neither data nor buffer zone of chunk {chunk}"
            )));
        };
        let (first_valid, wp, runs) = {
            let m = self.map.lock();
            let b = &m.rnd[rz as usize];
            let runs = b.valid_runs(0, zb);
            (runs.first().map(|r| r.0), m.seq_wp[dz as usize], runs)
        };
        let finished = self.map.lock().seq_finished[dz as usize];
        if !finished && first_valid.is_none_or(|f| f >= wp) {
            // The buffer's blocks all lie past the write pointer: append them to the data zone.
            let copied = self.copy_to_seq(Z::Rnd(rz), dz, &runs).await?;
            self.c.rc1_blocks.add(copied);
            {
                let mut m = self.map.lock();
                for &(s, n) in &runs {
                    m.seq[dz as usize].set(s, n, true);
                }
                m.chunks[chunk as usize].buffer = None;
                m.free_rnd_zone(rz);
            }
            self.settle_active(dz).await?;
            return Ok(true);
        }
        // RC-2: the sequential data zone's valid blocks merge into the buffer zone, which
        // becomes the chunk's (random) data zone; the sequential zone is reset.
        let druns = self.map.lock().seq[dz as usize].valid_runs(0, zb);
        let mut copied = 0;
        for &(s, n) in &druns {
            let mut buf = vec![0u8; n as usize * self.bs];
            self.read_zone(Z::Seq(dz), s, &mut buf).await?;
            self.write_zone(Z::Rnd(rz), s, &buf, WriteHints::NONE).await?;
            copied += n;
        }
        self.c.rc2_blocks.add(copied);
        {
            let mut m = self.map.lock();
            for &(s, n) in &druns {
                m.rnd[rz as usize].set(s, n, true);
            }
            m.chunks[chunk as usize] = ChunkMap { data: Some(Z::Rnd(rz)), buffer: None };
        }
        self.reset_seq(dz).await?;
        Ok(true)
    }

    /// Writes the mapping and the bitmaps to the metadata zone(s) of the fast device.
    async fn write_metadata(&self) -> DevResult<()> {
        let bytes = {
            let m = self.map.lock();
            let mut v = Vec::with_capacity(64 + m.chunks.len() * 16);
            v.extend_from_slice(b"FRDMZND1");
            v.extend_from_slice(&(m.chunks.len() as u64).to_le_bytes());
            v.extend_from_slice(&(m.rnd.len() as u64).to_le_bytes());
            v.extend_from_slice(&(m.seq.len() as u64).to_le_bytes());
            let code = |z: Option<Z>| match z {
                None => u64::MAX,
                Some(Z::Rnd(i)) => i,
                Some(Z::Seq(i)) => (1 << 62) | i,
            };
            for c in &m.chunks {
                v.extend_from_slice(&code(c.data).to_le_bytes());
                v.extend_from_slice(&code(c.buffer.map(Z::Rnd)).to_le_bytes());
            }
            for (i, z) in m.rnd.iter().chain(m.seq.iter()).enumerate() {
                let wp = m.seq_wp.get(i.wrapping_sub(m.rnd.len())).copied().unwrap_or(0);
                v.extend_from_slice(&wp.to_le_bytes());
                z.valid.iter().for_each(|w| v.extend_from_slice(&w.to_le_bytes()));
            }
            v
        };
        let mut buf = bytes;
        buf.resize(buf.len().div_ceil(self.bs) * self.bs, 0);
        self.fast.write(0, &buf, None, WriteHints::NONE).await?;
        self.c.metadata_flushes.inc();
        Ok(())
    }
}

fn zone_ref(m: &Map, z: Z) -> &Zone {
    match z {
        Z::Rnd(i) => &m.rnd[i as usize],
        Z::Seq(i) => &m.seq[i as usize],
    }
}

/// The reclaim worker: runs until the engine is dropped.
async fn reclaimer(weak: Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.should_reclaim() {
            let throttle = inner.throttle_percent();
            let t0 = now_ns();
            match inner.reclaim_one().await {
                Ok(true) => {
                    inner.freed.notify(usize::MAX);
                    // kcopyd's throttle: copy for `throttle`% of the time.
                    let spent = now_ns() - t0;
                    sleep_ns(spent * (100 - throttle) / throttle).await;
                }
                Ok(false) => sleep_ns(20_000).await,
                Err(_) => sleep_ns(inner.opts.idle_period_ns).await,
            }
            continue;
        }
        // Sleep until a writer asks for zones or the target may have become idle.
        let idle_at = inner.map.lock().last_io_ns + inner.opts.idle_period_ns;
        let wait = idle_at.saturating_sub(now_ns()).max(1_000_000).min(inner.opts.idle_period_ns);
        let listener = inner.kick.listen();
        drop(inner);
        futures_util::future::select(listener, Box::pin(sleep_ns(wait))).await;
    }
}

#[async_trait(?Send)]
impl BlockDevice for Dmzoned {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn kind(&self) -> &'static str {
        "dmzoned"
    }
    fn metrics(&self) -> Option<Arc<Registry>> {
        let (r, free) = self.random_zones();
        self.metrics.set_value("free_random_zones", free as f64);
        self.metrics.set_value("random_zones", r as f64);
        Some(self.metrics.clone())
    }
    fn children(&self) -> Vec<DevRef> {
        vec![self.inner.fast.clone(), self.inner.zoned.clone()]
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, buf.len(), md.as_ref().map(|m| m.len()))?;
        let inner = &self.inner;
        inner.note_io();
        let zb = inner.zone_blocks;
        let mut at = lba;
        while at < lba + blocks {
            let chunk = at / zb;
            let n = (zb - at % zb).min(lba + blocks - at);
            let _g = inner.locks.lock(chunk).await;
            let off = (at - lba) as usize * inner.bs;
            inner.read_chunk(chunk, at % zb, &mut buf[off..off + n as usize * inner.bs]).await?;
            at += n;
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
        let zb = inner.zone_blocks;
        let mut at = lba;
        while at < lba + blocks {
            let chunk = at / zb;
            let n = (zb - at % zb).min(lba + blocks - at);
            let _g = inner.locks.lock(chunk).await;
            let off = (at - lba) as usize * inner.bs;
            inner
                .write_chunk(chunk, at % zb, &data[off..off + n as usize * inner.bs], hints)
                .await?;
            at += n;
        }
        if inner.should_reclaim() {
            inner.kick.notify(1);
        }
        Ok(())
    }

    async fn flush(&self) -> DevResult<()> {
        // Data first, then the metadata that points at it (dm-zoned flushes its dirty
        // metadata blocks on REQ_PREFLUSH).
        let (a, b) = futures_util::join!(self.inner.fast.flush(), self.inner.zoned.flush());
        a.and(b)?;
        self.inner.write_metadata().await?;
        self.inner.fast.flush().await
    }

    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        check_range(&self.info, lba, num_blocks)?;
        let inner = &self.inner;
        inner.note_io();
        let zb = inner.zone_blocks;
        let mut at = lba;
        while at < lba + num_blocks {
            let chunk = at / zb;
            let n = (zb - at % zb).min(lba + num_blocks - at);
            let _g = inner.locks.lock(chunk).await;
            let mut m = inner.map.lock();
            let cm = m.chunks[chunk as usize];
            if let Some(d) = cm.data {
                m.zone(d).set(at % zb, n, false);
            }
            if let Some(b) = cm.buffer {
                m.rnd[b as usize].set(at % zb, n, false);
            }
            at += n;
        }
        Ok(())
    }
}
