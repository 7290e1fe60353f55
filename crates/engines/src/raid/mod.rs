//! `raid`: stripe-write RAID with k data and m parity chunks per stripe (RAID-5 for m = 1,
//! RAID-6 for m = 2), Reed-Solomon parity through `flashrig-erasure` (ISA-L where installed).
//! `scalaafa-atc24.txt` §2.2 describes the scheme ScalaAFA is compared against: full-stripe
//! writes compute parity from the new data alone; partial writes must first read what they do
//! not overwrite (read-construct-write) or the old data and parity (read-modify-write).
//!
//! One file per role: [`geometry`] (where chunks live), [`locks`] (one writer per stripe),
//! `write` (full stripe, read-construct-write, read-modify-write), `read` (normal and degraded
//! reads), [`cache`] (the optional stripe cache that merges sequential writes, as md's does),
//! `rebuild` (a replacement member refilled stripe by stripe), and `integrity` (a checksum per
//! member block, verified on every read and repaired from parity; the scrub).
//!
//! Failures: a member that answers `DeviceFailed` is marked failed and the array runs
//! degraded, reconstructing that member's chunks from the others, until more than `m` members
//! have failed. A read error on one chunk is repaired from redundancy for that read; a block
//! that fails its checksum (silent corruption, a misdirected write) is rebuilt from the others
//! and rewritten, and beyond redundancy the read answers `DevError::Corrupt`.
//!
//! What md has and this engine does not: a journal or partial-parity log closing the RAID
//! write hole (a crash between a stripe's data and parity writes can leave parity stale; the
//! two-phase and ScalaAFA engines are the ones crash-tested), reshape, and bitmaps.

pub mod cache;
pub mod geometry;
mod integrity;
pub mod locks;
mod read;
mod rebuild;
mod write;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{
    check_io, check_range, BlockDevice, DevError, DevRef, DevResult, DeviceInfo, VendorCommand,
    VendorReply, WriteHints,
};
use flashrig_erasure::Codec;
use flashrig_metrics::{Counter, Registry};
use flashrig_runtime::cost::SharedLockModel;
use flashrig_runtime::HostCosts;
use parking_lot::RwLock;

use crate::latency::MemberLatency;
use crate::{check_members, EngineConstraints};
pub use cache::StripeCache;
pub use geometry::Geometry;
pub use integrity::MD_BYTES;
use locks::StripeLocks;

/// The constraints of a k + m array, as data: every member holds one chunk of each stripe, and
/// any m of them may fail.
pub fn constraints(k: usize, m: usize) -> EngineConstraints {
    EngineConstraints { name: "raid", min_members: k + m, failures_tolerated: m }
}

/// How writes that do not cover whole stripes are treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// Any write; partial stripes by read-construct-write or read-modify-write, whichever
    /// reads less (md's choice).
    Any,
    /// Only writes that start and end on stripe boundaries (SPDK RAID5F): larger ones are
    /// split into stripes, others are rejected with `Invalid`.
    FullStripeOnly,
}

#[derive(Clone, Debug)]
pub struct RaidOptions {
    pub k: usize,
    pub m: usize,
    pub chunk_blocks: u64,
    pub write_mode: WriteMode,
    /// Stripes the stripe cache holds (0: no cache). md's default `stripe_cache_size` is 256.
    pub cache_stripes: usize,
    /// Host software costs charged per request (the kernel profile for an md-like array).
    pub costs: Arc<HostCosts>,
    /// The array-wide lock of a lock-based kernel engine (md's `device_lock`), taken once per
    /// stripe a write touches and per degraded read; `None` for share-nothing engines.
    pub lock_model: Option<Arc<SharedLockModel>>,
}

/// Health of one member slot.
#[derive(Default)]
struct MemberState {
    failed: AtomicBool,
    /// A replacement is being rebuilt: it holds valid chunks for stripes below `rebuilt_below`.
    rebuilding: AtomicBool,
    rebuilt_below: AtomicU64,
}

pub struct Raid {
    info: DeviceInfo,
    geo: Geometry,
    codec: Codec,
    write_mode: WriteMode,
    members: RwLock<Vec<DevRef>>,
    state: Vec<MemberState>,
    locks: StripeLocks,
    cache: Option<StripeCache>,
    costs: Arc<HostCosts>,
    lock_model: Option<Arc<SharedLockModel>>,
    metrics: Arc<Registry>,
    c: Counters,
    /// Metadata bytes per member block; 0 when the members have none (no checksums).
    mdb: usize,
    latency: MemberLatency,
}

struct Counters {
    reads: Arc<Counter>,
    writes: Arc<Counter>,
    full_stripe_writes: Arc<Counter>,
    rcw_writes: Arc<Counter>,
    rmw_writes: Arc<Counter>,
    rcw_read_bytes: Arc<Counter>,
    rmw_read_bytes: Arc<Counter>,
    parity_bytes: Arc<Counter>,
    degraded_reads: Arc<Counter>,
    reconstructed_bytes: Arc<Counter>,
    read_errors_repaired: Arc<Counter>,
    member_failures: Arc<Counter>,
    rejected_partial_writes: Arc<Counter>,
    cache_hits: Arc<Counter>,
    cache_full_stripes: Arc<Counter>,
    cache_evictions: Arc<Counter>,
    rebuilt_stripes: Arc<Counter>,
    flushes: Arc<Counter>,
    trims: Arc<Counter>,
    lock_passes: Arc<Counter>,
    lock_contended: Arc<Counter>,
    lock_spin_ns: Arc<Counter>,
    checksum_errors: Arc<Counter>,
    healed_blocks: Arc<Counter>,
    unrepairable_blocks: Arc<Counter>,
    parity_mismatches: Arc<Counter>,
    scrubbed_blocks: Arc<Counter>,
    slow_reads_routed: Arc<Counter>,
}

impl Raid {
    pub fn new(name: &str, members: Vec<DevRef>, opt: RaidOptions) -> DevResult<Raid> {
        let (k, m) = (opt.k, opt.m);
        if k == 0 || m == 0 {
            return Err(DevError::Invalid(format!("raid: k = {k}, m = {m}: both must be >= 1")));
        }
        if members.len() != k + m {
            return Err(DevError::Invalid(format!(
                "raid: {k} + {m} needs exactly {} members, got {}",
                k + m,
                members.len()
            )));
        }
        let (bs, _) = check_members(&constraints(k, m), &members)?;
        let codec = Codec::new(k, m).map_err(|e| DevError::Invalid(format!("raid: {e}")))?;
        if opt.chunk_blocks == 0 {
            return Err(DevError::Invalid("raid: chunk size must be at least one block".into()));
        }
        let stripes = members.iter().map(|d| d.info().num_blocks / opt.chunk_blocks).min().unwrap();
        if stripes == 0 {
            return Err(DevError::Invalid(format!(
                "raid: a member is smaller than one {}-block chunk",
                opt.chunk_blocks
            )));
        }
        let geo = Geometry { k, m, chunk_blocks: opt.chunk_blocks, stripes };
        // Parity covers data only; per-block metadata is not offered (0 bytes).
        let mut info = DeviceInfo::new(name, bs, geo.capacity_blocks());
        info.optimal_io_blocks = geo.stripe_data_blocks() as u32;
        let metrics = Registry::new(name);
        let c = Counters {
            reads: metrics.counter("reads"),
            writes: metrics.counter("writes"),
            full_stripe_writes: metrics.counter("full_stripe_writes"),
            rcw_writes: metrics.counter("rcw_writes"),
            rmw_writes: metrics.counter("rmw_writes"),
            rcw_read_bytes: metrics.counter("rcw_read_bytes"),
            rmw_read_bytes: metrics.counter("rmw_read_bytes"),
            parity_bytes: metrics.counter("parity_bytes"),
            degraded_reads: metrics.counter("degraded_reads"),
            reconstructed_bytes: metrics.counter("reconstructed_bytes"),
            read_errors_repaired: metrics.counter("read_errors_repaired"),
            member_failures: metrics.counter("member_failures"),
            rejected_partial_writes: metrics.counter("rejected_partial_writes"),
            cache_hits: metrics.counter("cache_hit_blocks"),
            cache_full_stripes: metrics.counter("cache_full_stripes"),
            cache_evictions: metrics.counter("cache_evictions"),
            rebuilt_stripes: metrics.counter("rebuilt_stripes"),
            flushes: metrics.counter("flushes"),
            trims: metrics.counter("trims"),
            lock_passes: metrics.counter("lock_passes"),
            lock_contended: metrics.counter("lock_contended"),
            lock_spin_ns: metrics.counter("lock_spin_ns"),
            checksum_errors: metrics.counter("checksum_errors"),
            healed_blocks: metrics.counter("healed_blocks"),
            unrepairable_blocks: metrics.counter("unrepairable_blocks"),
            parity_mismatches: metrics.counter("parity_mismatches"),
            scrubbed_blocks: metrics.counter("scrubbed_blocks"),
            slow_reads_routed: metrics.counter("slow_reads_routed"),
        };
        // Blocks are sealed when every member keeps the same number (at least the seal's) of
        // metadata bytes per block; with none, parity is the only check (a scrub compares it).
        let md0 = members[0].info().md_bytes_per_block as usize;
        // Over members that keep no payload (timing-only SSDs) no seal could pass.
        let mdb = match md0 >= integrity::MD_BYTES
            && members.iter().all(|d| d.info().md_bytes_per_block as usize == md0)
            && !members.iter().any(|d| d.info().caps.timing_only)
        {
            true => md0,
            false => 0,
        };
        let cache = (opt.cache_stripes > 0).then(|| StripeCache::new(opt.cache_stripes, &geo, bs));
        Ok(Raid {
            info,
            geo,
            codec,
            write_mode: opt.write_mode,
            state: (0..k + m).map(|_| MemberState::default()).collect(),
            members: RwLock::new(members),
            locks: StripeLocks::default(),
            cache,
            costs: opt.costs,
            lock_model: opt.lock_model,
            metrics,
            c,
            mdb,
            latency: MemberLatency::new(k + m),
        })
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Parity engine in use (`isa-l` or `rust`).
    pub fn parity_backend(&self) -> &'static str {
        self.codec.backend()
    }

    /// One critical section of the modelled array-wide lock, if the engine has one.
    async fn pass_lock(&self) {
        if let Some(l) = &self.lock_model {
            l.pass(&self.costs).await;
            self.c.lock_passes.set(l.acquisitions());
            self.c.lock_contended.set(l.contended());
            self.c.lock_spin_ns.set(l.spin_ns());
        }
    }

    fn member(&self, i: usize) -> DevRef {
        self.members.read()[i].clone()
    }

    fn block_bytes(&self) -> usize {
        self.info.block_size as usize
    }

    /// Whether member `i` holds valid chunks of `stripe`.
    fn available(&self, i: usize, stripe: u64) -> bool {
        let s = &self.state[i];
        let failed = s.failed.load(Ordering::Acquire);
        let not_yet_rebuilt = s.rebuilding.load(Ordering::Acquire)
            && stripe >= s.rebuilt_below.load(Ordering::Acquire);
        !(failed || not_yet_rebuilt)
    }

    /// Whether member `i` is slow compared with its peers (see [`crate::latency`]).
    pub fn is_slow(&self, i: usize) -> bool {
        self.latency.is_slow(i)
    }

    /// Whether a read of member `i`'s chunk of `stripe` should be rebuilt from the others
    /// instead: `i` is slow, every other member holds the stripe, and this is not the read
    /// that probes `i`.
    fn route_around(&self, i: usize, stripe: u64) -> bool {
        (0..self.geo.members()).all(|j| j == i || self.available(j, stripe))
            && self.latency.avoid(i)
    }

    /// Members marked failed (not counting one being rebuilt).
    pub fn failed_members(&self) -> Vec<usize> {
        (0..self.state.len()).filter(|&i| self.state[i].failed.load(Ordering::Acquire)).collect()
    }

    /// Marks member `i` failed (mdadm --fail), as when it answers `DeviceFailed`.
    pub fn fail_member(&self, i: usize) {
        if !self.state[i].failed.swap(true, Ordering::AcqRel) {
            self.c.member_failures.inc();
        }
    }

    /// Handles a member's error: `DeviceFailed` marks it failed. Returns whether the caller may
    /// retry the chunk from redundancy.
    fn note_error(&self, i: usize, e: &DevError) -> bool {
        match e {
            DevError::DeviceFailed { .. } => {
                self.fail_member(i);
                true
            }
            DevError::ReadMedia { .. } | DevError::WriteMedia { .. } | DevError::Io { .. } => true,
            _ => false,
        }
    }

    /// Fails the request when more members are gone than the code tolerates.
    fn check_survivable(&self, stripe: u64) -> DevResult<()> {
        let gone = (0..self.geo.members()).filter(|&i| !self.available(i, stripe)).count();
        if gone > self.geo.m {
            return Err(DevError::DeviceFailed {
                name: format!(
                    "{} ({gone} of {} members unavailable, {} tolerated)",
                    self.info.name,
                    self.geo.members(),
                    self.geo.m
                ),
            });
        }
        Ok(())
    }
}

#[async_trait(?Send)]
impl BlockDevice for Raid {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn kind(&self) -> &'static str {
        "raid"
    }
    fn metrics(&self) -> Option<Arc<Registry>> {
        Some(self.metrics.clone())
    }
    fn children(&self) -> Vec<DevRef> {
        self.members.read().clone()
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, buf.len(), md.as_ref().map(|m| m.len()))?;
        self.c.reads.inc();
        self.costs.charge_request().await;
        self.read_blocks(lba, blocks, buf).await
    }

    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, data.len(), md.map(|m| m.len()))?;
        self.c.writes.inc();
        self.costs.charge_request().await;
        self.write_blocks(lba, blocks, data, hints).await
    }

    async fn flush(&self) -> DevResult<()> {
        self.c.flushes.inc();
        if self.cache.is_some() {
            self.flush_cache().await?;
        }
        self.flush_members().await
    }

    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        check_range(&self.info, lba, num_blocks)?;
        self.c.trims.inc();
        self.trim_blocks(lba, num_blocks).await
    }

    async fn vendor(&self, cmd: VendorCommand<'_>) -> DevResult<VendorReply> {
        match cmd {
            VendorCommand::Scrub => self.scrub().await.map(VendorReply::Scrubbed),
            _ => Err(DevError::Unsupported { command: "vendor" }),
        }
    }
}

impl Raid {
    /// Flushes every member that has not failed; fails when more than m have.
    pub(crate) async fn flush_members(&self) -> DevResult<()> {
        let members = self.members.read().clone();
        let futs = members.iter().enumerate().map(|(i, d)| async move {
            if self.state[i].failed.load(Ordering::Acquire) {
                return Ok(());
            }
            match d.flush().await {
                Err(e @ DevError::DeviceFailed { .. }) => {
                    self.note_error(i, &e);
                    Ok(())
                }
                r => r,
            }
        });
        futures_util::future::try_join_all(futs).await?;
        self.check_survivable(0)
    }
}
