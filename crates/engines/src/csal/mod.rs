//! `csal`: CSAL (`csal-eurosys24.txt` §4–§5): a fast device used as an append-only write
//! buffer of chunks in front of a zoned device, a two-level L2P table of 4-byte entries whose
//! pages are cached in memory by LRU and kept whole in the fast device's metadata region,
//! per-tenant compaction of the buffer into zones, per-tenant GC of the zones, SIDs and P2L
//! tables for crash consistency, checkpoints with a clean flag, and recovery in the paper's
//! three ways (naive scan, P2L, checkpoint). docs/csal.md describes the design, the on-disk
//! format and recovery.
//!
//! Files, one per role: [`format`] (regions and byte layouts), `l2p` (the page cache and its
//! faults), `records` (blocks with their records: VSS, or the record blocks of a fast member
//! without metadata bytes), `write` (user writes and trims, the open chunk), `read`,
//! `compact` (moving valid
//! blocks into zones: compaction's victims and the mover GC shares), `gc` (GC's victims),
//! `zones` (the open zones of each stream and the zoned member's open/active limits),
//! `checkpoint` (state slots, P2L tables, checkpoints), `recover` ([`Csal::open`], with the
//! conflict rules of §4.4 in [`recover::resolve`]), `service` (the background task on the
//! internal reactor).

pub mod format;
pub mod recover;

mod checkpoint;
mod compact;
mod gc;
mod l2p;
mod read;
mod records;
mod service;
mod write;
mod zones;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{
    check_io, check_range, BlockDevice, DevError, DevRef, DevResult, DeviceInfo, WriteHints,
};
use flashrig_metrics::{Counter, Registry};
use parking_lot::Mutex;

use crate::raid::locks::StripeLocks;
use format::{CState, CsalGeometry, P2lEntry, MD_BYTES};
pub use recover::{RecoveryMode, RecoveryReport, StepReport};

/// How the engine is set up. Defaults follow the paper where it gives a number.
#[derive(Clone, Debug)]
pub struct CsalOptions {
    /// Chunk size in blocks; `None`: the zone capacity ("chunk and zone are of the same
    /// size", §4.2), at most an eighth of the fast device.
    pub chunk_blocks: Option<u64>,
    /// L2P pages cached in memory (4 KiB each); the paper's 2 GB is 524288 pages.
    pub l2p_cache_pages: usize,
    /// Tenants: equal partitions of the LBA space, each with its own zones (§4.3).
    pub tenants: u16,
    /// Compaction runs while free chunks are below this fraction of all chunks (20%, §4.3).
    pub compaction_free_fraction: f64,
    /// Blocks per compaction and GC write (512 KiB at 4 KiB blocks, §4.3).
    pub batch_blocks: u64,
    /// GC runs while fewer zones than this are free (5, §4.3).
    pub gc_free_zones: u64,
    /// Fraction of the zoned device kept as over-provisioning (10%, §4.3).
    pub over_provisioning_fraction: f64,
    /// GC writes go to zones of their own (true, the paper's default), not to the
    /// compaction zones.
    pub gc_isolation: bool,
    /// Each tenant has its own compaction and GC zones (true, the paper's default); false:
    /// one shared stream of each.
    pub user_isolation: bool,
    /// How [`Csal::open`] rebuilds the tables after a crash.
    pub recovery: RecoveryMode,
    /// The reactor of the internal work (compaction, GC, checkpoints); `None`: the last one.
    pub internal_reactor: Option<usize>,
}

impl CsalOptions {
    /// How many groups compaction keeps apart: one per tenant with user isolation, else one.
    pub fn compaction_streams(&self) -> u64 {
        if self.user_isolation {
            self.tenants.max(1) as u64
        } else {
            1
        }
    }

    /// How many zones are written at once at most: a compaction stream per group, and as
    /// many GC streams again with GC isolation.
    pub fn write_streams(&self) -> u64 {
        self.compaction_streams() * if self.gc_isolation { 2 } else { 1 }
    }
}

impl Default for CsalOptions {
    fn default() -> Self {
        CsalOptions {
            chunk_blocks: None,
            l2p_cache_pages: 524_288,
            tenants: 1,
            compaction_free_fraction: 0.2,
            batch_blocks: 128,
            gc_free_zones: 5,
            over_provisioning_fraction: 0.1,
            gc_isolation: true,
            user_isolation: true,
            recovery: RecoveryMode::Checkpoint,
            internal_reactor: None,
        }
    }
}

pub(crate) struct Counters {
    pub user_reads: Arc<Counter>,
    pub user_writes: Arc<Counter>,
    pub user_read_blocks: Arc<Counter>,
    pub user_write_blocks: Arc<Counter>,
    pub trims: Arc<Counter>,
    pub flushes: Arc<Counter>,
    pub compactions: Arc<Counter>,
    /// Compactions that ran beside a checkpoint (`service::step`).
    pub compactions_beside_checkpoint: Arc<Counter>,
    pub compaction_blocks_read: Arc<Counter>,
    pub compaction_blocks_written: Arc<Counter>,
    pub gc_runs: Arc<Counter>,
    pub gc_blocks_read: Arc<Counter>,
    pub gc_blocks_written: Arc<Counter>,
    /// Filler blocks that end a compaction or GC write on the zoned member's write unit
    /// (`Inner::write_unit_blocks`).
    pub pad_blocks_written: Arc<Counter>,
    pub moves_skipped: Arc<Counter>,
    pub zone_resets: Arc<Counter>,
    pub zone_finishes: Arc<Counter>,
    pub chunks_opened: Arc<Counter>,
    pub l2p_hits: Arc<Counter>,
    pub l2p_misses: Arc<Counter>,
    pub l2p_page_reads: Arc<Counter>,
    pub l2p_page_writes: Arc<Counter>,
    pub checkpoints: Arc<Counter>,
    pub state_writes: Arc<Counter>,
    pub p2l_writes: Arc<Counter>,
    pub space_waits: Arc<Counter>,
}

impl Counters {
    fn new(r: &Registry) -> Counters {
        Counters {
            user_reads: r.counter("user_reads"),
            user_writes: r.counter("user_writes"),
            user_read_blocks: r.counter("user_read_blocks"),
            user_write_blocks: r.counter("user_write_blocks"),
            trims: r.counter("trims"),
            flushes: r.counter("flushes"),
            compactions: r.counter("compactions"),
            compactions_beside_checkpoint: r.counter("compactions_beside_checkpoint"),
            compaction_blocks_read: r.counter("compaction_blocks_read"),
            compaction_blocks_written: r.counter("compaction_blocks_written"),
            gc_runs: r.counter("gc_runs"),
            gc_blocks_read: r.counter("gc_blocks_read"),
            gc_blocks_written: r.counter("gc_blocks_written"),
            pad_blocks_written: r.counter("pad_blocks_written"),
            moves_skipped: r.counter("moves_skipped"),
            zone_resets: r.counter("zone_resets"),
            zone_finishes: r.counter("zone_finishes"),
            chunks_opened: r.counter("chunks_opened"),
            l2p_hits: r.counter("l2p_hits"),
            l2p_misses: r.counter("l2p_misses"),
            l2p_page_reads: r.counter("l2p_page_reads"),
            l2p_page_writes: r.counter("l2p_page_writes"),
            checkpoints: r.counter("checkpoints"),
            state_writes: r.counter("state_writes"),
            p2l_writes: r.counter("p2l_writes"),
            space_waits: r.counter("space_waits"),
        }
    }
}

/// One chunk or zone in memory (§4.2 "Chunk/Zone Status").
#[derive(Clone, Debug)]
pub(crate) struct Container {
    pub state: CState,
    pub sid: u64,
    /// Blocks handed out (the write pointer).
    pub wp: u64,
    /// Valid blocks (set bits of its part of the validity bitmap).
    pub valid: u64,
    /// Writes handed a place here and not yet complete.
    pub inflight: u32,
    /// Reads that looked up a place here and have not finished (a released container is
    /// not freed under them).
    pub readers: u32,
    /// The P2L of an open container, by offset (§4.2: only open ones keep it in memory).
    pub p2l: Vec<P2lEntry>,
    /// The largest record SID this life of the container holds: its own SID, or more when
    /// compaction or GC moved a newer record into it (moved records keep their SID, §4.4, and
    /// a zone may have opened before the chunk a record came from). Checkpoint recovery reads
    /// every container whose top SID reaches the checkpoint SID: by the container's own SID
    /// alone it skipped such a zone, and with it a moved trim record that had to outrank an
    /// older write it replayed (docs/csal.md, "A moved trim record in an older zone").
    pub top_sid: u64,
}

/// Which stream a zone write belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Stream {
    pub gc: bool,
    pub tenant: u16,
}

/// Everything mutable, under one mutex that is never held across an await.
pub(crate) struct State {
    pub next_sid: u64,
    pub ckpt_sid: u64,
    pub generation: u64,
    pub bitmap_generation: u64,
    pub containers: Vec<Container>,
    pub valid_bits: Vec<u64>,
    pub open_chunk: Option<usize>,
    /// The open zone of each stream, and when it was last written (for the open limit).
    pub streams: HashMap<Stream, (usize, u64)>,
    pub stream_clock: u64,
    pub l2p: l2p::PageCache,
}

impl State {
    pub fn bit(&self, pba: u64) -> bool {
        self.valid_bits[(pba / 64) as usize] & (1 << (pba % 64)) != 0
    }

    /// Sets or clears a block's validity bit, keeping its container's count.
    pub fn set_valid(&mut self, g: &CsalGeometry, pba: u64, on: bool) {
        if self.bit(pba) == on {
            return;
        }
        self.valid_bits[(pba / 64) as usize] ^= 1 << (pba % 64);
        let c = &mut self.containers[g.container_of(pba as u32)];
        if on {
            c.valid += 1;
        } else {
            c.valid -= 1;
        }
    }

    pub fn count(&self, g: &CsalGeometry, zones: bool, s: CState) -> u64 {
        self.containers
            .iter()
            .enumerate()
            .filter(|(i, c)| g.is_zone(*i) == zones && c.state == s)
            .count() as u64
    }
}

pub(crate) struct Inner {
    pub info: DeviceInfo,
    pub geo: CsalGeometry,
    pub opts: CsalOptions,
    pub fast: DevRef,
    pub zoned: DevRef,
    pub st: Mutex<State>,
    /// Serialises state-slot writes, container opens and closes, and checkpoints.
    pub meta: StripeLocks,
    /// Serialises L2P page faults and write-backs (key 0).
    pub pager: StripeLocks,
    /// Without fast-device metadata bytes: the record blocks of the chunks written in this
    /// run, in memory, and a lock per record block that orders its writes.
    pub records: Mutex<HashMap<u64, Vec<u8>>>,
    pub record_locks: StripeLocks,
    /// Wakes writers waiting for a free chunk, and tasks waiting for a container's writes.
    pub space_event: event_listener::Event,
    /// An L2P page was read in or a cache slot freed (faults waiting on either retry).
    pub l2p_event: event_listener::Event,
    /// Wakes the service.
    pub work_event: event_listener::Event,
    pub service_running: AtomicBool,
    pub stopping: AtomicBool,
    pub internal_reactor: usize,
    /// The limit of zones csal keeps open at once (from the zoned member's open and active
    /// limits; 0: none).
    pub open_zone_limit: usize,
    /// The zoned member's write unit in blocks (its `optimal_io_blocks`: a block SSD's
    /// mapping unit under the zone emulation, 1 on the ZN540): compaction and GC end every
    /// write on a multiple of it (docs/csal.md, "Write units").
    pub write_unit_blocks: u64,
    pub metrics: Arc<Registry>,
    pub c: Counters,
    pub recovery: Mutex<Option<RecoveryReport>>,
}

/// A CSAL device over a fast member and a zoned member.
pub struct Csal {
    inner: Arc<Inner>,
}

impl Drop for Csal {
    /// The service task holds the engine; dropping the last handle stops it (as scala does).
    fn drop(&mut self) {
        self.inner.stop();
    }
}

pub(crate) fn invalid(msg: String) -> DevError {
    DevError::Invalid(format!("csal: {msg}"))
}

impl Inner {
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.work_event.notify(usize::MAX);
        self.space_event.notify(usize::MAX);
    }

    pub fn stopped(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    pub fn bs(&self) -> usize {
        self.geo.block_size as usize
    }

    pub fn mdb(&self) -> usize {
        self.geo.md_bytes as usize
    }

    /// The member and its block of a PBA.
    pub fn dev_of(&self, pba: u32) -> (&DevRef, u64) {
        let (zoned, at) = self.geo.locate(pba);
        (if zoned { &self.zoned } else { &self.fast }, at)
    }
}

impl Csal {
    /// Checks the members and computes the layout; `create` and `open` finish the job.
    fn build(name: &str, fast: DevRef, zoned: DevRef, opts: CsalOptions) -> DevResult<Inner> {
        let fi = fast.info().clone();
        let zi = zoned.info().clone();
        let zg = zi.zones.ok_or_else(|| {
            invalid(format!(
                "the second member ({}) must be a zoned device (members = [fast, zoned]); it \
                 reports no zones (put it under a `zoned` layer)",
                zi.name
            ))
        })?;
        if !zi.caps.zones {
            return Err(invalid(format!("member {} does not take zone commands", zi.name)));
        }
        if fi.block_size != zi.block_size {
            return Err(invalid(format!(
                "members' block sizes differ: {} has {}, {} has {}",
                fi.name, fi.block_size, zi.name, zi.block_size
            )));
        }
        if (zi.md_bytes_per_block as usize) < MD_BYTES {
            return Err(invalid(format!(
                "member {} stores {} metadata bytes per block; csal keeps each block's \
                 {MD_BYTES}-byte record (SID, LBA, tenant) there (the paper's 64-byte VSS \
                 padding): give it md_bytes = 64",
                zi.name, zi.md_bytes_per_block
            )));
        }
        // The fast member either stores the same metadata bytes, or none: then the records
        // go to blocks of their own (the paper's fallback for drives without VSS).
        let fast_has_md = fi.md_bytes_per_block != 0;
        if fast_has_md && fi.md_bytes_per_block != zi.md_bytes_per_block {
            return Err(invalid(format!(
                "members' metadata sizes differ: {} has {}, {} has {} (the fast member needs \
                 the same, or 0 to keep the records in blocks of their own)",
                fi.name, fi.md_bytes_per_block, zi.name, zi.md_bytes_per_block
            )));
        }
        if !fi.block_size.is_multiple_of(zi.md_bytes_per_block) {
            return Err(invalid(format!(
                "{} metadata bytes per block do not divide the {}-byte block",
                zi.md_bytes_per_block, fi.block_size
            )));
        }
        if opts.tenants == 0 {
            return Err(invalid("tenants must be at least 1".into()));
        }
        if !(0.0..1.0).contains(&opts.compaction_free_fraction)
            || !(0.0..0.9).contains(&opts.over_provisioning_fraction)
        {
            return Err(invalid(
                "compaction_free_fraction and over_provisioning_fraction must be in [0, 1)".into(),
            ));
        }
        let zones = zi.num_blocks / zg.zone_blocks;
        let cap = zg.zone_capacity_blocks;
        let streams = opts.write_streams();
        // Zones that can never hold live data at once: the GC threshold's free zones, one
        // partly filled zone per stream, and one zone whose blocks are being moved.
        let reserved = opts.gc_free_zones + streams + 1;
        let by_op = ((zones * cap) as f64 * (1.0 - opts.over_provisioning_fraction)) as u64;
        let by_reserve = zones.saturating_sub(reserved) * cap;
        let user_blocks = by_op.min(by_reserve);
        if user_blocks == 0 {
            return Err(invalid(format!(
                "the zoned member has {zones} zones; csal keeps {reserved} of them in reserve \
                 (gc_free_zones {} + one per stream ({streams}) + 1): give it more zones",
                opts.gc_free_zones
            )));
        }
        let chunk_blocks = opts.chunk_blocks.unwrap_or(cap.min(fi.num_blocks / 8)).max(1);
        let geo = CsalGeometry::new(
            fi.block_size,
            zi.md_bytes_per_block,
            fi.num_blocks,
            chunk_blocks,
            zones,
            zg.zone_blocks,
            cap,
            user_blocks,
            opts.tenants,
            fast_has_md,
        )?;
        let limits = [zg.max_open_zones, zg.max_active_zones];
        let open_zone_limit =
            limits.iter().filter(|&&l| l > 0).min().copied().unwrap_or(0) as usize;
        if open_zone_limit == 1 {
            return Err(invalid(format!(
                "member {} allows 1 open zone; csal needs at least 2 (compaction and GC)",
                zi.name
            )));
        }
        let reactors =
            if flashrig_runtime::in_runtime() { flashrig_runtime::num_reactors() } else { 1 };
        let internal_reactor = opts.internal_reactor.unwrap_or(reactors - 1);
        if internal_reactor >= reactors {
            return Err(invalid(format!(
                "internal_reactor = {internal_reactor}, but the runtime has {reactors} reactors"
            )));
        }
        let mut info = DeviceInfo::new(name, fi.block_size, geo.user_blocks);
        info.caps.fua = true;
        info.optimal_io_blocks = 1;
        let metrics = Registry::new(name);
        let c = Counters::new(&metrics);
        let containers = (0..geo.containers())
            .map(|_| Container {
                state: CState::Free,
                sid: 0,
                top_sid: 0,
                wp: 0,
                valid: 0,
                inflight: 0,
                readers: 0,
                p2l: Vec::new(),
            })
            .collect();
        let st = State {
            next_sid: 1,
            ckpt_sid: 1,
            generation: 0,
            bitmap_generation: 0,
            containers,
            valid_bits: vec![0; geo.total_pba().div_ceil(64) as usize],
            open_chunk: None,
            streams: HashMap::new(),
            stream_clock: 0,
            l2p: l2p::PageCache::new(opts.l2p_cache_pages.max(1)),
        };
        Ok(Inner {
            info,
            geo,
            opts,
            fast,
            zoned,
            st: Mutex::new(st),
            meta: StripeLocks::default(),
            pager: StripeLocks::default(),
            records: Mutex::new(HashMap::new()),
            record_locks: StripeLocks::default(),
            space_event: event_listener::Event::new(),
            l2p_event: event_listener::Event::new(),
            work_event: event_listener::Event::new(),
            service_running: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            internal_reactor,
            open_zone_limit,
            write_unit_blocks: (zi.optimal_io_blocks as u64).max(1),
            metrics,
            c,
            recovery: Mutex::new(None),
        })
    }

    /// Formats the members as an empty CSAL device: superblock, an all-unmapped L2P, a clean
    /// state, every zone reset.
    pub async fn create(
        name: &str,
        fast: DevRef,
        zoned: DevRef,
        opts: CsalOptions,
    ) -> DevResult<Csal> {
        let inner = Arc::new(Self::build(name, fast, zoned, opts)?);
        if let Err(e) = inner.format().await {
            inner.stop();
            return Err(e);
        }
        Ok(Csal { inner })
    }

    /// Opens the device its members hold: loads the metadata region after a clean shutdown,
    /// otherwise recovers as `opts.recovery` says (the report: [`Csal::recovery`]).
    pub async fn open(
        name: &str,
        fast: DevRef,
        zoned: DevRef,
        opts: CsalOptions,
    ) -> DevResult<Csal> {
        let inner = Arc::new(Self::build(name, fast, zoned, opts)?);
        match inner.recover().await {
            Ok(r) => {
                // Each step's time in the metrics registry too, for reports (Table 4).
                for st in &r.steps {
                    inner.metrics.set_value(&format!("recovery_{}_ns", st.name), st.ns as f64);
                }
                inner.metrics.set_value("recovery_total_ns", r.total_ns() as f64);
                *inner.recovery.lock() = Some(r)
            }
            Err(e) => {
                inner.stop();
                return Err(e);
            }
        }
        Ok(Csal { inner })
    }

    /// Opens what the members hold, or creates a device when the fast member's first block is
    /// zeros. A first block that is neither is refused, never formatted.
    pub async fn open_or_create(
        name: &str,
        fast: DevRef,
        zoned: DevRef,
        opts: CsalOptions,
    ) -> DevResult<Csal> {
        let mut b = vec![0u8; fast.info().block_size as usize];
        fast.read(0, &mut b, None).await?;
        if b.iter().all(|&x| x == 0) {
            Csal::create(name, fast, zoned, opts).await
        } else if &b[0..8] == format::SB_MAGIC {
            Csal::open(name, fast, zoned, opts).await
        } else {
            Err(invalid(format!(
                "member {} holds neither a csal superblock nor zeros in its first block: \
                 refusing to format it",
                fast.info().name
            )))
        }
    }

    pub fn geometry(&self) -> &CsalGeometry {
        &self.inner.geo
    }

    /// What the last [`Csal::open`] did, step by step, with each step's time.
    pub fn recovery(&self) -> Option<RecoveryReport> {
        self.inner.recovery.lock().clone()
    }

    /// A checkpoint now: every dirty L2P page and the validity bitmaps are written, and the
    /// checkpoint SID moves up.
    pub async fn checkpoint(&self) -> DevResult<()> {
        self.inner.checkpoint(false).await
    }

    /// A clean shutdown: waits for the internal work to stop, writes a checkpoint with the
    /// clean flag set. The device takes no more I/O.
    pub async fn close(&self) -> DevResult<()> {
        self.inner.stop();
        self.inner.wait_service_stopped().await;
        self.inner.close_all().await?;
        self.inner.checkpoint(true).await
    }

    /// Compaction and GC until neither has work (for tests and experiments).
    pub async fn settle(&self) -> DevResult<()> {
        self.inner.clone().settle().await
    }

    /// The tenant of every valid block of every zone (by zone number), read from the blocks'
    /// records: what the isolation tests assert on.
    pub async fn zone_tenants(&self) -> DevResult<Vec<(u64, bool, Vec<u16>)>> {
        self.inner.zone_tenants().await
    }

    /// Free chunks and free zones now.
    pub fn free_counts(&self) -> (u64, u64) {
        let st = self.inner.st.lock();
        (
            st.count(&self.inner.geo, false, CState::Free),
            st.count(&self.inner.geo, true, CState::Free),
        )
    }
}

#[async_trait(?Send)]
impl BlockDevice for Csal {
    fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    fn kind(&self) -> &'static str {
        "csal"
    }

    fn metrics(&self) -> Option<Arc<Registry>> {
        let r = &self.inner.metrics;
        let (fc, fz) = self.free_counts();
        r.set_value("free_chunks", fc as f64);
        r.set_value("free_zones", fz as f64);
        let user = self.inner.c.user_write_blocks.get();
        if user > 0 {
            let zw =
                self.inner.c.compaction_blocks_written.get() + self.inner.c.gc_blocks_written.get();
            r.set_value("zoned_write_amplification", zw as f64 / user as f64);
        }
        Some(r.clone())
    }

    fn children(&self) -> Vec<DevRef> {
        vec![self.inner.fast.clone(), self.inner.zoned.clone()]
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        if md.is_some() {
            return Err(DevError::Unsupported { command: "per-block metadata" });
        }
        check_io(&self.inner.info, lba, buf.len(), None)?;
        self.inner.read(lba, buf).await
    }

    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        if md.is_some() {
            return Err(DevError::Unsupported { command: "per-block metadata" });
        }
        check_io(&self.inner.info, lba, data.len(), None)?;
        self.inner.clone().write(lba, data, hints.fua).await
    }

    async fn flush(&self) -> DevResult<()> {
        self.inner.c.flushes.inc();
        self.inner.flush_members().await
    }

    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        check_range(&self.inner.info, lba, num_blocks)?;
        if num_blocks == 0 {
            return Ok(());
        }
        self.inner.clone().trim(lba, num_blocks).await
    }
}
