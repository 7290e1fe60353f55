//! `twophase`: a FusionRAID-like two-phase-write all-flash array (`scalaafa-atc24.txt` §2.2,
//! "Two-phase write AFA"), storing real bytes.
//!
//! - **Replication phase**: a user write is appended, out of place, to the replica log: m + 1
//!   copies on m + 1 different members, acknowledged once every copy is on its member. A
//!   mapping table (one entry per 4 KiB user block) says where each block's current version
//!   is; the old location becomes invalid.
//! - **Conversion phase**: when the replicated data passes the watermark (5% of capacity by
//!   default), user writes wait while the host converts: it reads one stripe's worth of the
//!   oldest valid replicated blocks, computes m parity chunks, writes data and parity as one
//!   stripe (one chunk per member, parity rotating), remaps the blocks and frees the replicas
//!   (§3.1: for k + m that is (m + 1) + 1 + m/k times the user's bytes written).
//! - **AFA-level GC**: when free rows run low, the valid blocks of the emptiest rows (stripes
//!   whose data was overwritten, or log rows) are packed into new stripes and their rows freed.
//!
//! Files: [`layout`] (rows, replica sets, stripes, capacity), [`format`] (per-block metadata
//! and trim records on the members), `state` (the host's tables), [`locks`] (row locks),
//! `write` (replication and trims), `read` (normal and degraded reads), `integrity` (checking
//! every block read against what it must hold, and self-heal), `scrub`, `clean` (conversion,
//! GC, flush barriers), `rebuild`, `recover` ([`Twophase::open`]). docs/twophase.md describes
//! the design, the on-disk format, integrity and recovery.
//!
//! Crash consistency: every member block carries its user LBA, a global sequence number and
//! its row's generation in its metadata (members need at least 16 metadata bytes per block,
//! written atomically with the data, or 24 bytes so a checksum can stand in for atomicity).
//! After a crash, [`Twophase::open`] scans the members and takes the newest version of every
//! block. Trims are durable as trim records in the log. A row is reused only after a member
//! flush that started after it was freed, so nothing that recovery might need is overwritten
//! before what replaced it is durable.
//!
//! Integrity: with 24 metadata bytes per block, every block carries a checksum of its data,
//! address and metadata, and every read checks it against what the tables expect there; a bad
//! copy is read from redundancy and rewritten, and a block bad on every copy answers
//! `DevError::Corrupt`. `vendor(VendorCommand::Scrub)` checks every live block and its
//! redundancy ([`Twophase::integrity`]).

pub mod format;
pub mod layout;
pub mod locks;

mod clean;
mod integrity;
mod read;
mod rebuild;
mod recover;
mod scrub;
mod state;
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
use parking_lot::{Mutex, RwLock};

use crate::bufpool::BufPool;
use crate::latency::MemberLatency;
use crate::raid::locks::StripeLocks;
use crate::{check_members, EngineConstraints};
pub use layout::TwophaseGeometry;
pub use recover::{RecoveryReport, StepReport, RECOVERY_STEPS};
use state::Tables;

/// The constraints of a k + m two-phase array, as data: k + m members, any m of which may
/// fail; members must store at least [`format::MD_BYTES`] metadata bytes per block.
pub fn constraints(k: usize, m: usize) -> EngineConstraints {
    EngineConstraints { name: "twophase", min_members: k + m, failures_tolerated: m }
}

/// The default chunk: 16 blocks, 64 KiB with 4 KiB blocks (the chunk size of every engine in
/// the paper's evaluation, §6.1).
pub const DEFAULT_CHUNK_BLOCKS: u64 = 16;

#[derive(Clone, Debug)]
pub struct TwophaseOptions {
    /// Data chunks per stripe.
    pub k: usize,
    /// Parity chunks per stripe (1 or 2); user writes are replicated m + 1 times.
    pub m: usize,
    pub chunk_blocks: u64,
    /// Replicated data, as a fraction of the capacity, above which conversion starts and user
    /// writes wait (§2.2: "e.g., 5% of the AFA capacity").
    pub watermark_fraction: f64,
    /// Conversion, once started, goes on until the replicated data is at most this fraction
    /// (the paper does not say when conversion stops; default: half the watermark).
    pub low_watermark_fraction: f64,
    /// Host software costs (the kernel profile for a FusionRAID-like engine).
    pub costs: Arc<HostCosts>,
    /// The engine's shared lock, passed once per request when set (a lock-based kernel engine).
    pub lock: Option<Arc<SharedLockModel>>,
    /// Background conversion tasks; `None`: one per reactor (FusionRAID's kernel worker
    /// threads, each competing with one core's user I/O).
    pub convert_workers: Option<usize>,
    /// A planted bug, for proving that the reliability swarm catches one (crates/swarm): the
    /// engine's flushes skip this member, so writes it acknowledged as flushed may be lost.
    /// Never set outside that test.
    #[doc(hidden)]
    pub planted_skip_flush_member: Option<usize>,
}

impl TwophaseOptions {
    /// A k + m array with the defaults: 64 KiB chunks (at 4 KiB blocks), watermark 5%, low
    /// watermark 2.5%, no host costs.
    pub fn new(k: usize, m: usize) -> TwophaseOptions {
        TwophaseOptions {
            k,
            m,
            chunk_blocks: DEFAULT_CHUNK_BLOCKS,
            watermark_fraction: 0.05,
            low_watermark_fraction: 0.025,
            costs: Arc::new(HostCosts::default()),
            lock: None,
            convert_workers: None,
            planted_skip_flush_member: None,
        }
    }
}

/// What the engine holds right now (for tests and reports).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TwophaseStats {
    /// Valid user blocks and trim records in the replica log.
    pub replicated_blocks: u64,
    pub free_rows: u64,
    /// Freed rows waiting for a flush (and trim) before reuse.
    pub pending_rows: u64,
    pub log_rows: u64,
    pub stripe_rows: u64,
    /// User blocks with a mapping entry (data or trimmed).
    pub mapped_blocks: u64,
    pub trim_records: u64,
}

/// Where the current version of a user block is stored ([`Twophase::placement`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The row holding it.
    pub row: u64,
    /// In a stripe row (otherwise replicated in a log row).
    pub striped: bool,
    /// (member, member LBA) of every copy: the m + 1 replicas in the order a one-block read
    /// of the block tries them (the first choice rotates with the LBA), or the one data block
    /// of a stripe (its parity is at the same member LBA on the row's parity members,
    /// [`TwophaseGeometry::parity_member`]).
    pub copies: Vec<(usize, u64)>,
}

/// A two-phase-write array: a handle on the engine's state, which its background conversion
/// tasks share.
pub struct Twophase {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    info: DeviceInfo,
    geo: TwophaseGeometry,
    codec: Codec,
    members: RwLock<Vec<DevRef>>,
    /// Bumped when a member slot gets a replacement, so errors of the old device are ignored.
    incarnation: Vec<AtomicU64>,
    failed: Vec<AtomicBool>,
    /// Metadata bytes per member block.
    md_bytes: usize,
    /// Every member writes a block's metadata atomically with its data, so a block whose
    /// checksum fails was damaged after it was written, not torn by a crash.
    md_atomic: bool,
    /// Blocks are checked against what the tables expect (integrity.rs). Off only when no
    /// member keeps payload: an emulated SSD in payload mode `none` or `tag` (timing-only
    /// experiments) reads back zeros or a fingerprint, data and metadata alike, which no check
    /// can pass. Such members say so (`caps.timing_only`); `create` also reads back a probe
    /// block it wrote, for members that do not.
    checks: AtomicBool,
    /// The format version written in parity metadata ([`format::format_version`]).
    format_version: u64,
    tables: Mutex<Tables>,
    rowlocks: locks::RowLocks,
    /// One GC at a time (key 0).
    cleaner: StripeLocks,
    /// Wakes writers waiting for room: a conversion finished a stripe or a task stopped.
    space_event: event_listener::Event,
    /// Data and parity buffers of the stripes being written, reused from stripe to stripe.
    bufs: BufPool,
    convert_workers: Option<usize>,
    planted_skip_flush_member: Option<usize>,
    costs: Arc<HostCosts>,
    lock: Option<Arc<SharedLockModel>>,
    metrics: Arc<Registry>,
    c: Counters,
    recovery: Option<RecoveryReport>,
    /// Members' read latencies, to read around a slow one.
    latency: MemberLatency,
}

struct Counters {
    user_reads: Arc<Counter>,
    user_read_bytes: Arc<Counter>,
    user_writes: Arc<Counter>,
    user_write_bytes: Arc<Counter>,
    trims: Arc<Counter>,
    trim_records: Arc<Counter>,
    flushes: Arc<Counter>,
    replica_writes: Arc<Counter>,
    replica_write_bytes: Arc<Counter>,
    member_write_bytes: Arc<Counter>,
    member_read_bytes: Arc<Counter>,
    delayed_writes: Arc<Counter>,
    conversions_started: Arc<Counter>,
    conversions: Arc<Counter>,
    gc_runs: Arc<Counter>,
    stripes_written: Arc<Counter>,
    converted_bytes: Arc<Counter>,
    gc_moved_bytes: Arc<Counter>,
    padding_blocks: Arc<Counter>,
    parity_bytes: Arc<Counter>,
    barriers: Arc<Counter>,
    row_trims: Arc<Counter>,
    map_updates: Arc<Counter>,
    degraded_reads: Arc<Counter>,
    reconstructed_bytes: Arc<Counter>,
    read_errors_repaired: Arc<Counter>,
    member_failures: Arc<Counter>,
    rebuilt_rows: Arc<Counter>,
    rebuilt_bytes: Arc<Counter>,
    repaired_blocks: Arc<Counter>,
    checksum_errors: Arc<Counter>,
    healed_blocks: Arc<Counter>,
    unrepairable_blocks: Arc<Counter>,
    slow_reads_routed: Arc<Counter>,
}

impl Counters {
    fn new(r: &Registry) -> Counters {
        Counters {
            user_reads: r.counter("user_reads"),
            user_read_bytes: r.counter("user_read_bytes"),
            user_writes: r.counter("user_writes"),
            user_write_bytes: r.counter("user_write_bytes"),
            trims: r.counter("trims"),
            trim_records: r.counter("trim_records"),
            flushes: r.counter("flushes"),
            replica_writes: r.counter("replica_writes"),
            replica_write_bytes: r.counter("replica_write_bytes"),
            member_write_bytes: r.counter("member_write_bytes"),
            member_read_bytes: r.counter("member_read_bytes"),
            delayed_writes: r.counter("delayed_writes"),
            conversions_started: r.counter("conversions_started"),
            conversions: r.counter("conversions"),
            gc_runs: r.counter("gc_runs"),
            stripes_written: r.counter("stripes_written"),
            converted_bytes: r.counter("converted_bytes"),
            gc_moved_bytes: r.counter("gc_moved_bytes"),
            padding_blocks: r.counter("padding_blocks"),
            parity_bytes: r.counter("parity_bytes"),
            barriers: r.counter("barriers"),
            row_trims: r.counter("row_trims"),
            map_updates: r.counter("map_updates"),
            degraded_reads: r.counter("degraded_reads"),
            reconstructed_bytes: r.counter("reconstructed_bytes"),
            read_errors_repaired: r.counter("read_errors_repaired"),
            member_failures: r.counter("member_failures"),
            rebuilt_rows: r.counter("rebuilt_rows"),
            rebuilt_bytes: r.counter("rebuilt_bytes"),
            repaired_blocks: r.counter("repaired_blocks"),
            checksum_errors: r.counter("checksum_errors"),
            slow_reads_routed: r.counter("slow_reads_routed"),
            healed_blocks: r.counter("healed_blocks"),
            unrepairable_blocks: r.counter("unrepairable_blocks"),
        }
    }
}

fn invalid(msg: String) -> DevError {
    DevError::Invalid(format!("twophase: {msg}"))
}

impl Twophase {
    /// A new array over blank members (never written, or trimmed: see [`Twophase::create`]).
    /// Nothing is written until the first user write.
    pub fn new(name: &str, members: Vec<DevRef>, opts: TwophaseOptions) -> DevResult<Twophase> {
        Ok(Twophase::wrap(Inner::build(name, members, opts)?))
    }

    pub(crate) fn wrap(inner: Inner) -> Twophase {
        Twophase { inner: Arc::new(inner) }
    }

    /// Formats `members` (trims them whole and flushes) and returns a new array over them.
    pub async fn create(
        name: &str,
        members: Vec<DevRef>,
        opts: TwophaseOptions,
    ) -> DevResult<Twophase> {
        let eng = Twophase::new(name, members, opts)?;
        let members = eng.inner.members.read().clone();
        // Members that keep no payload (timing-only SSD modes) read a probe block back as
        // something else; when none keeps it, nothing the array reads could pass a check, so
        // checks are off. One member that keeps it leaves them on: a member that does not
        // return what was written is then a faulty member like any other.
        let (bs, mdb) = (eng.inner.block_bytes(), eng.inner.md_bytes);
        let probe: Vec<u8> = (0..bs).map(|i| (i * 7 + 1) as u8).collect();
        let probe_md: Vec<u8> = (0..mdb).map(|i| (i * 5 + 3) as u8).collect();
        let mut kept = 0;
        for d in &members {
            d.write(0, &probe, Some(&probe_md), WriteHints::NONE).await?;
            let (mut b, mut m) = (vec![0u8; bs], vec![0u8; mdb]);
            d.read(0, &mut b, Some(&mut m)).await?;
            kept += usize::from(b == probe && m == probe_md);
            d.trim(0, d.info().num_blocks).await?;
            d.flush().await?;
        }
        eng.inner.checks.store(kept > 0, Ordering::Relaxed);
        Ok(eng)
    }

    pub fn geometry(&self) -> TwophaseGeometry {
        self.inner.geo
    }

    /// Whether the members' blocks carry checksums (members with at least
    /// [`format::MD_BYTES_CHECKSUM`] metadata bytes per block): then every read and the scrub
    /// catch silent corruption as well as lost and misdirected writes, and heal them from
    /// redundancy. Without (16 metadata bytes) only the metadata is compared with what the
    /// tables expect, which catches lost and misdirected writes where the metadata differs but
    /// not corrupt data.
    pub fn integrity(&self) -> bool {
        self.inner.integrity()
    }

    /// Parity engine in use (`isa-l` or `rust`).
    pub fn parity_backend(&self) -> &'static str {
        self.inner.codec.backend()
    }

    /// What [`Twophase::open`] found and did, when this array was recovered.
    pub fn recovery(&self) -> Option<&RecoveryReport> {
        self.inner.recovery.as_ref()
    }

    pub fn stats(&self) -> TwophaseStats {
        self.inner.stats()
    }

    /// Rows that hold a complete stripe right now (for checking parity from outside).
    pub fn stripe_rows(&self) -> Vec<u64> {
        self.inner.stripe_rows()
    }

    /// Where user block `lba` is stored right now (for tests and tools that look at the
    /// members); `None` when it holds nothing (never written, or trimmed).
    pub fn placement(&self, lba: u64) -> Option<Placement> {
        let geo = self.inner.geo;
        let t = self.inner.tables.lock();
        let state::Target::At(loc) = t.map.get(&lba)?.target else { return None };
        Some(match loc {
            state::Loc::Log { row, set, off } => {
                let (copies, pref) = (geo.copies(), read::first_replica(&geo, lba));
                let at = geo.member_lba(row) + off as u64;
                Placement {
                    row,
                    striped: false,
                    copies: (0..copies)
                        .map(|a| (geo.set_member(row, set as usize, (pref + a) % copies), at))
                        .collect(),
                }
            }
            state::Loc::Stripe { row, idx } => {
                let (d, off) = (idx as u64 / geo.chunk_blocks, idx as u64 % geo.chunk_blocks);
                Placement {
                    row,
                    striped: true,
                    copies: vec![(geo.data_member(row, d as usize), geo.member_lba(row) + off)],
                }
            }
        })
    }

    /// Members marked failed (not counting one being rebuilt).
    pub fn failed_members(&self) -> Vec<usize> {
        self.inner.failed_members()
    }

    /// Marks member `i` failed, as when it answers `DeviceFailed`.
    pub fn fail_member(&self, i: usize) {
        self.inner.fail_member(i)
    }

    /// Whether member `i` is slow compared with its peers (see [`crate::latency`]): reads of
    /// replicas then go to another copy, and reads of its stripe chunks are rebuilt from the
    /// other members, where they all hold the row.
    pub fn is_slow(&self, i: usize) -> bool {
        self.inner.latency.is_slow(i)
    }

    /// Replaces failed member `slot` by `replacement` and rebuilds its contents while I/O goes
    /// on (see `rebuild`).
    pub async fn rebuild(&self, slot: usize, replacement: DevRef) -> DevResult<()> {
        self.inner.rebuild(slot, replacement).await
    }
}

impl Inner {
    pub(crate) fn build(
        name: &str,
        members: Vec<DevRef>,
        opts: TwophaseOptions,
    ) -> DevResult<Inner> {
        let (k, m) = (opts.k, opts.m);
        if k == 0 || !(1..=2).contains(&m) {
            return Err(invalid(format!("k = {k}, m = {m}: k must be >= 1 and m 1 or 2")));
        }
        if k + m > 64 {
            return Err(invalid(format!("{k} + {m} members: at most 64 are supported")));
        }
        if members.len() != k + m {
            return Err(invalid(format!(
                "{k} + {m} needs exactly {} members, got {}",
                k + m,
                members.len()
            )));
        }
        let (bs, _) = check_members(&constraints(k, m), &members)?;
        let md = members[0].info().md_bytes_per_block as usize;
        if let Some(d) =
            members.iter().find(|d| (d.info().md_bytes_per_block as usize) < format::MD_BYTES)
        {
            return Err(invalid(format!(
                "member {} stores {} metadata bytes per block; twophase needs at least {} \
                 (user LBA and sequence number of every block, for crash recovery)",
                d.info().name,
                d.info().md_bytes_per_block,
                format::MD_BYTES
            )));
        }
        if let Some(d) = members.iter().find(|d| d.info().md_bytes_per_block as usize != md) {
            return Err(invalid(format!(
                "members {} and {} store different metadata sizes ({} and {} bytes per block)",
                members[0].info().name,
                d.info().name,
                md,
                d.info().md_bytes_per_block
            )));
        }
        if md < format::MD_BYTES_CHECKSUM {
            if let Some(d) = members.iter().find(|d| !d.info().caps.md_atomic) {
                return Err(invalid(format!(
                    "member {} does not write metadata atomically with data; twophase then \
                     needs at least {} metadata bytes per block (for a data checksum), it has {md}",
                    d.info().name,
                    format::MD_BYTES_CHECKSUM
                )));
            }
        }
        if bs < 64 {
            return Err(invalid(format!("block size {bs} is too small for trim records")));
        }
        if opts.chunk_blocks == 0 {
            return Err(invalid("chunk size must be at least one block".into()));
        }
        let (w, lw) = (opts.watermark_fraction, opts.low_watermark_fraction);
        let fractions_ok = w > 0.0 && w < 1.0 && (0.0..=w).contains(&lw);
        if !fractions_ok {
            return Err(invalid(format!(
                "watermark {w} and low watermark {lw}: need 0 < watermark < 1 and \
                 0 <= low watermark <= watermark"
            )));
        }
        let codec = Codec::new(k, m).map_err(|e| invalid(e.to_string()))?;
        let rows = members.iter().map(|d| d.info().num_blocks / opts.chunk_blocks).min().unwrap();
        if rows >= format::MAX_ROWS {
            return Err(invalid(format!("{rows} rows: at most 2^40 are supported")));
        }
        let geo = TwophaseGeometry::plan(k, m, opts.chunk_blocks, rows, w, lw)?;
        if geo.capacity_blocks >= format::MAX_KEY {
            return Err(invalid("capacity above 2^48 blocks is not supported".into()));
        }
        let mut info = DeviceInfo::new(name, bs, geo.capacity_blocks);
        info.optimal_io_blocks = opts.chunk_blocks as u32;
        info.caps.fua = true;
        let metrics = Registry::new(name);
        let c = Counters::new(&metrics);
        let n = k + m;
        let md_atomic = members.iter().all(|d| d.info().caps.md_atomic);
        let timing_only = members.iter().any(|d| d.info().caps.timing_only);
        Ok(Inner {
            info,
            geo,
            codec,
            members: RwLock::new(members),
            incarnation: (0..n).map(|_| AtomicU64::new(0)).collect(),
            failed: (0..n).map(|_| AtomicBool::new(false)).collect(),
            md_bytes: md,
            md_atomic,
            checks: AtomicBool::new(!timing_only),
            format_version: format::format_version(md),
            tables: Mutex::new(Tables::new(geo)),
            rowlocks: locks::RowLocks::default(),
            cleaner: StripeLocks::default(),
            space_event: event_listener::Event::new(),
            // A stripe's data buffer and m parity chunks for each cleaner running at once
            // (conversion tasks, GC) and a few more.
            bufs: BufPool::new((m + 1) * 8),
            convert_workers: opts.convert_workers,
            planted_skip_flush_member: opts.planted_skip_flush_member,
            costs: opts.costs,
            lock: opts.lock,
            metrics,
            c,
            recovery: None,
            latency: MemberLatency::new(n),
        })
    }

    pub fn stats(&self) -> TwophaseStats {
        let t = self.tables.lock();
        TwophaseStats {
            replicated_blocks: t.replicated,
            free_rows: t.free_rows(),
            pending_rows: t.pending_rows(),
            log_rows: t.log_rows.len() as u64,
            stripe_rows: t.stripe_rows,
            mapped_blocks: t.map.len() as u64,
            trim_records: t.trims.len() as u64,
        }
    }

    /// Rows that hold a complete stripe right now (for checking parity from outside).
    pub fn stripe_rows(&self) -> Vec<u64> {
        let t = self.tables.lock();
        (0..self.geo.rows)
            .filter(|&r| t.row(r).kind == state::Kind::Stripe && !t.row(r).building)
            .collect()
    }

    /// Members marked failed (not counting one being rebuilt).
    pub fn failed_members(&self) -> Vec<usize> {
        (0..self.failed.len()).filter(|&i| self.failed[i].load(Ordering::Acquire)).collect()
    }

    /// Marks member `i` failed, as when it answers `DeviceFailed`.
    pub fn fail_member(&self, i: usize) {
        if !self.failed[i].swap(true, Ordering::AcqRel) {
            self.c.member_failures.inc();
        }
    }

    fn block_bytes(&self) -> usize {
        self.info.block_size as usize
    }

    fn member(&self, i: usize) -> (DevRef, u64) {
        (self.members.read()[i].clone(), self.incarnation[i].load(Ordering::Acquire))
    }

    /// Whether member `i` holds what it should of a row whose missing mask is `missing`.
    fn available(&self, i: usize, missing: u64) -> bool {
        !self.failed[i].load(Ordering::Acquire) && missing & (1 << i) == 0
    }

    /// Handles a member's error: `DeviceFailed` marks it failed (unless the slot has a newer
    /// device by now). Returns whether redundancy may cover for it.
    fn note_error(&self, i: usize, incarnation: u64, e: &DevError) -> bool {
        match e {
            DevError::DeviceFailed { .. } => {
                if self.incarnation[i].load(Ordering::Acquire) == incarnation {
                    self.fail_member(i);
                }
                true
            }
            DevError::ReadMedia { .. } | DevError::WriteMedia { .. } | DevError::Io { .. } => true,
            _ => false,
        }
    }

    /// Fails the request when more members are gone than the code tolerates.
    fn check_alive(&self) -> DevResult<()> {
        let gone = self.failed_members().len();
        if gone > self.geo.m {
            return Err(DevError::DeviceFailed {
                name: format!(
                    "{} ({gone} of {} members failed, {} tolerated)",
                    self.info.name,
                    self.geo.members(),
                    self.geo.m
                ),
            });
        }
        Ok(())
    }

    /// Writes to member `i`: `Ok(true)` when written, `Ok(false)` when the member failed (or
    /// answered a media error) and redundancy must cover for it.
    async fn write_member(
        &self,
        i: usize,
        lba: u64,
        data: &[u8],
        md: &[u8],
        hints: WriteHints,
    ) -> DevResult<bool> {
        let (dev, inc) = self.member(i);
        self.costs.charge_member_ios(1).await;
        match dev.write(lba, data, Some(md), hints).await {
            Ok(()) => {
                self.c.member_write_bytes.add(data.len() as u64);
                Ok(true)
            }
            Err(e) if self.note_error(i, inc, &e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads from member `i` (with metadata when `md` is given) if the slot still holds the
    /// device of incarnation `inc`; `Ok(false)` as for writes, and when the slot got a
    /// replacement since the caller looked (it holds nothing of the caller's row yet).
    async fn read_member(
        &self,
        i: usize,
        inc: u64,
        lba: u64,
        buf: &mut [u8],
        md: Option<&mut [u8]>,
    ) -> DevResult<bool> {
        let (dev, now) = self.member(i);
        if now != inc {
            return Ok(false);
        }
        self.costs.charge_member_ios(1).await;
        let start = MemberLatency::start();
        let r = dev.read(lba, buf, md).await;
        self.latency.note(i, start);
        match r {
            Ok(()) => Ok(true),
            Err(e) if self.note_error(i, inc, &e) => {
                if !matches!(e, DevError::DeviceFailed { .. }) {
                    self.c.read_errors_repaired.inc();
                }
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Flushes every member that has not failed.
    async fn flush_members(&self) -> DevResult<()> {
        let members = self.members.read().clone();
        let incs: Vec<u64> = self.incarnation.iter().map(|x| x.load(Ordering::Acquire)).collect();
        let futs = members.iter().enumerate().map(|(i, d)| {
            let inc = incs[i];
            async move {
                if self.failed[i].load(Ordering::Acquire)
                    || self.planted_skip_flush_member == Some(i)
                {
                    return Ok(());
                }
                match d.flush().await {
                    Ok(()) => Ok(()),
                    Err(e @ DevError::DeviceFailed { .. }) => {
                        self.note_error(i, inc, &e);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
        });
        futures_util::future::try_join_all(futs).await?;
        self.check_alive()
    }

    async fn pass_lock(&self) {
        if let Some(l) = &self.lock {
            l.pass(&self.costs).await;
        }
    }

    fn update_values(&self) {
        let s = self.stats();
        let cap = self.geo.capacity_blocks.max(1) as f64;
        let user = self.c.user_write_bytes.get();
        let m = &self.metrics;
        m.set_value("replicated_fraction", s.replicated_blocks as f64 / cap);
        m.set_value(
            "host_write_amplification",
            if user == 0 { 0.0 } else { self.c.member_write_bytes.get() as f64 / user as f64 },
        );
        m.set_value("free_rows", s.free_rows as f64);
        m.set_value("pending_rows", s.pending_rows as f64);
        m.set_value("log_rows", s.log_rows as f64);
        m.set_value("stripe_rows", s.stripe_rows as f64);
        m.set_value("watermark_blocks", self.geo.watermark_blocks as f64);
        m.set_value("capacity_blocks", self.geo.capacity_blocks as f64);
    }
}

#[async_trait(?Send)]
impl BlockDevice for Twophase {
    fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    fn kind(&self) -> &'static str {
        "twophase"
    }

    fn metrics(&self) -> Option<Arc<Registry>> {
        self.inner.update_values();
        Some(self.inner.metrics.clone())
    }

    fn children(&self) -> Vec<DevRef> {
        self.inner.members.read().clone()
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        self.inner.user_read(lba, buf, md).await
    }

    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        self.inner.clone().user_write(lba, data, md, hints).await
    }

    async fn flush(&self) -> DevResult<()> {
        self.inner.c.flushes.inc();
        self.inner.barrier().await
    }

    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        self.inner.clone().user_trim(lba, num_blocks).await
    }

    /// `Scrub`: checks every live block and its redundancy, repairs what redundancy allows
    /// (see `scrub`). Other vendor commands are not supported.
    async fn vendor(&self, cmd: VendorCommand<'_>) -> DevResult<VendorReply> {
        match cmd {
            // Over members that keep no payload there is nothing to verify.
            VendorCommand::Scrub if !self.inner.checks() => {
                Err(DevError::Unsupported { command: "scrub" })
            }
            VendorCommand::Scrub => Ok(VendorReply::Scrubbed(self.inner.scrub().await?)),
            _ => Err(DevError::Unsupported { command: "vendor" }),
        }
    }
}

/// The user's requests, as the block-device trait hands them over.
impl Inner {
    async fn user_read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, buf.len(), md.as_ref().map(|m| m.len()))?;
        self.c.user_reads.inc();
        self.c.user_read_bytes.add(buf.len() as u64);
        self.costs.charge_request().await;
        self.pass_lock().await;
        self.read_blocks(lba, blocks, buf).await
    }

    async fn user_write(
        self: Arc<Self>,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, data.len(), md.map(|m| m.len()))?;
        self.c.user_writes.inc();
        self.costs.charge_request().await;
        self.pass_lock().await;
        self.write_blocks(lba, blocks, data, hints).await?;
        self.c.user_write_bytes.add(data.len() as u64);
        Ok(())
    }

    async fn user_trim(self: Arc<Self>, lba: u64, num_blocks: u64) -> DevResult<()> {
        check_range(&self.info, lba, num_blocks)?;
        self.c.trims.inc();
        self.costs.charge_request().await;
        self.pass_lock().await;
        self.trim_blocks(lba, num_blocks).await
    }
}
