//! `scala`: ScalaAFA (`scalaafa-atc24.txt` §4–§5), complete: two-phase writes placed so that
//! conversion runs inside the member SSDs, lock-free multi-reactor access through a space
//! manager that grants heroes by message, the mapping table persisted in the members' OOB
//! bytes with checkpoints and recovery, transient tags for the SLC evictor, degraded reads and
//! rebuild. docs/scala.md describes the design, the on-member format and recovery.
//!
//! Files, one per role: [`layout`] (heroes on the members), [`format`] (OOB records,
//! checkpoints, trim journal), `tables` (AMT, HGMT: atomics shared by all reactors), `space`
//! (the space manager's lists: grants, recalls, returns), `service` (the space manager's
//! background work: when to convert, the conversions in flight, GC and checkpoint duties),
//! `write` (replication phase with the placement policy, trims), `read` (normal and degraded
//! reads), `convert` (offloaded and host conversion of one stripe), `gc` (AFA-level GC),
//! `checkpoint`, `recover` ([`Scala::open`]), `rebuild`, `integrity` (checksums checked on
//! every read, self-heal from replicas or parity, scrub).

pub mod format;
pub mod layout;

mod checkpoint;
mod convert;
mod gc;
mod integrity;
mod read;
mod rebuild;
mod recover;
mod service;
mod space;
mod tables;
mod write;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{
    check_io, check_range, BlockDevice, DevError, DevRef, DevResult, DeviceInfo, VendorCommand,
    VendorReply, WriteHints,
};
use flashrig_erasure::Codec;
use flashrig_metrics::{Counter, Registry};
use flashrig_runtime::HostCosts;
use parking_lot::{Mutex, RwLock};

use crate::bufpool::BufPool;
use crate::latency::MemberLatency;
use crate::raid::locks::StripeLocks;
use crate::{check_members, EngineConstraints};
pub use layout::ScalaGeometry;
pub use recover::{RecoveryReport, StepReport, RECOVERY_STEPS};
use space::{Manager, ReactorState};
use tables::Tables;

/// The constraints of a k + m ScalaAFA array, as data: k + m members, any m of which may fail;
/// members must store at least [`format::MD_BYTES`] metadata bytes per block (the PMT slice).
pub fn constraints(k: usize, m: usize) -> EngineConstraints {
    EngineConstraints { name: "scala", min_members: k + m, failures_tolerated: m }
}

/// Where conversion runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConversionMode {
    /// In the members when every member supports the conversion vendor command, else on the
    /// host.
    Auto,
    /// In the members (fails at creation when a member lacks the command).
    Ssd,
    /// On the host's space-manager reactor: the paper's Scala-CO ablation (§6.5), and the
    /// fallback for plain devices.
    Host,
}

#[derive(Clone, Debug)]
pub struct ScalaOptions {
    /// Data chunks per stripe.
    pub k: usize,
    /// Parity chunks per stripe (1 to 3); writes are replicated m + 1 times.
    pub m: usize,
    /// Chunk (slot) size in blocks: 16 = 64 KiB at 4 KiB blocks, the paper's default (§5.4).
    pub chunk_blocks: u64,
    pub conversion: ConversionMode,
    /// Tag backup copies as transient (§5.5); false is the paper's Scala-WR ablation.
    pub transient_tags: bool,
    /// Size of the transient area (VHs) per member; `None`: 5% of a member (the paper sizes it
    /// by the SSDs' SLC buffers, which the stack builder passes when it knows them).
    pub transient_blocks_per_member: Option<u64>,
    /// HHs per grant (the paper's 1024), with m VHs each.
    pub grant_heroes: usize,
    /// The space manager's reactor; `None`: the last reactor.
    pub space_manager_reactor: Option<usize>,
    /// Host software costs (the user-space profile: ScalaAFA runs on SPDK).
    pub costs: Arc<HostCosts>,
    /// Fraction of the HHs kept back so AFA-level GC always has room.
    pub gc_reserve_fraction: f64,
    /// Background conversion runs while free VHs are below this fraction of all VHs ("heroes
    /// are running out", §5.2) ...
    pub vh_low_fraction: f64,
    /// ... or once no user request (read, write, trim, flush) has been outstanding for this
    /// long ("the CPU is idle", §5.2). A device that stalls with requests in flight is not an
    /// idle host.
    pub idle_ns: u64,
    /// Conversions in flight at once (each one vendor command per parity member, or one host
    /// conversion). `None`: two per member (the space manager submits asynchronously, as an
    /// SPDK thread does; host conversions then queue their CPU work on its core).
    pub convert_depth: Option<usize>,
    /// Grant-window size in HHs: what the space manager may grant before the next checkpoint,
    /// and what recovery scans. `None`: 4 grants' worth per I/O reactor, at most a quarter of
    /// the HHs.
    pub window_heroes: Option<usize>,
}

impl ScalaOptions {
    pub fn new(k: usize, m: usize) -> ScalaOptions {
        ScalaOptions {
            k,
            m,
            chunk_blocks: 16,
            conversion: ConversionMode::Auto,
            transient_tags: true,
            transient_blocks_per_member: None,
            grant_heroes: 1024,
            space_manager_reactor: None,
            costs: Arc::new(HostCosts::default()),
            gc_reserve_fraction: 0.05,
            vh_low_fraction: 0.25,
            idle_ns: 1_000_000,
            convert_depth: None,
            window_heroes: None,
        }
    }
}

/// What the engine holds right now (for tests and reports).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScalaStats {
    pub free_hh: u64,
    pub window_hh: u64,
    pub pending_hh: u64,
    pub granted_hh: u64,
    pub open_stripes: u64,
    pub full_stripes: u64,
    pub converted_stripes: u64,
    pub free_vh: u64,
    pub mapped_blocks: u64,
}

pub(crate) struct Counters {
    user_reads: Arc<Counter>,
    user_read_bytes: Arc<Counter>,
    user_writes: Arc<Counter>,
    user_write_bytes: Arc<Counter>,
    trims: Arc<Counter>,
    flushes: Arc<Counter>,
    replica_writes: Arc<Counter>,
    member_write_bytes: Arc<Counter>,
    member_read_bytes: Arc<Counter>,
    grant_requests: Arc<Counter>,
    grant_waits: Arc<Counter>,
    granted_hh: Arc<Counter>,
    granted_vh: Arc<Counter>,
    recalls: Arc<Counter>,
    recalled_hh: Arc<Counter>,
    recalled_vh: Arc<Counter>,
    returned_hh: Arc<Counter>,
    manager_messages: Arc<Counter>,
    conversions_ssd: Arc<Counter>,
    conversions_host: Arc<Counter>,
    conversions_low: Arc<Counter>,
    conversions_idle: Arc<Counter>,
    conversions_grant: Arc<Counter>,
    conversions_drain: Arc<Counter>,
    service_runs: Arc<Counter>,
    convert_commands: Arc<Counter>,
    /// Time conversions took, from the start (waiting for the stripe's writes in flight) to
    /// the VHs' recycling, summed over conversions.
    convert_ns: Arc<Counter>,
    parity_bytes: Arc<Counter>,
    gc_runs: Arc<Counter>,
    gc_stripes: Arc<Counter>,
    gc_moved_blocks: Arc<Counter>,
    recycled_vh: Arc<Counter>,
    checkpoints: Arc<Counter>,
    checkpoint_deltas: Arc<Counter>,
    checkpoint_bytes: Arc<Counter>,
    degraded_reads: Arc<Counter>,
    slow_reads_routed: Arc<Counter>,
    reconstructed_blocks: Arc<Counter>,
    member_failures: Arc<Counter>,
    rebuilt_stripes: Arc<Counter>,
    read_retries: Arc<Counter>,
    /// Block copies found not to hold what they should (checksum, address or generation),
    /// by any read: user reads, conversion, GC, rebuild, recovery, scrub.
    checksum_errors: Arc<Counter>,
    /// Member blocks rewritten with their right contents (data copies and parity).
    healed_blocks: Arc<Counter>,
    /// Blocks found with no good copy left: reads of them answer `DevError::Corrupt`.
    unrepairable_blocks: Arc<Counter>,
    /// Parity blocks that disagreed with the verified data they protect (rewritten).
    redundancy_mismatches: Arc<Counter>,
    scrubs: Arc<Counter>,
}

impl Counters {
    fn new(r: &Registry) -> Counters {
        Counters {
            user_reads: r.counter("user_reads"),
            user_read_bytes: r.counter("user_read_bytes"),
            user_writes: r.counter("user_writes"),
            user_write_bytes: r.counter("user_write_bytes"),
            trims: r.counter("trims"),
            flushes: r.counter("flushes"),
            replica_writes: r.counter("replica_writes"),
            member_write_bytes: r.counter("member_write_bytes"),
            member_read_bytes: r.counter("member_read_bytes"),
            grant_requests: r.counter("grant_requests"),
            grant_waits: r.counter("grant_waits"),
            granted_hh: r.counter("granted_hh"),
            granted_vh: r.counter("granted_vh"),
            recalls: r.counter("recalls"),
            recalled_hh: r.counter("recalled_hh"),
            recalled_vh: r.counter("recalled_vh"),
            returned_hh: r.counter("returned_hh"),
            manager_messages: r.counter("manager_messages"),
            conversions_ssd: r.counter("conversions_ssd"),
            conversions_host: r.counter("conversions_host"),
            conversions_low: r.counter("conversions_low"),
            conversions_idle: r.counter("conversions_idle"),
            conversions_grant: r.counter("conversions_grant"),
            conversions_drain: r.counter("conversions_drain"),
            service_runs: r.counter("service_runs"),
            convert_commands: r.counter("convert_commands"),
            convert_ns: r.counter("convert_ns"),
            parity_bytes: r.counter("parity_bytes"),
            gc_runs: r.counter("gc_runs"),
            gc_stripes: r.counter("gc_stripes"),
            gc_moved_blocks: r.counter("gc_moved_blocks"),
            recycled_vh: r.counter("recycled_vh"),
            checkpoints: r.counter("checkpoints"),
            checkpoint_deltas: r.counter("checkpoint_deltas"),
            checkpoint_bytes: r.counter("checkpoint_bytes"),
            degraded_reads: r.counter("degraded_reads"),
            slow_reads_routed: r.counter("slow_reads_routed"),
            reconstructed_blocks: r.counter("reconstructed_blocks"),
            member_failures: r.counter("member_failures"),
            rebuilt_stripes: r.counter("rebuilt_stripes"),
            read_retries: r.counter("read_retries"),
            checksum_errors: r.counter("checksum_errors"),
            healed_blocks: r.counter("healed_blocks"),
            unrepairable_blocks: r.counter("unrepairable_blocks"),
            redundancy_mismatches: r.counter("redundancy_mismatches"),
            scrubs: r.counter("scrubs"),
        }
    }
}

/// The engine's state, shared with the tasks and messages it sends between reactors.
pub(crate) struct Inner {
    info: DeviceInfo,
    geo: ScalaGeometry,
    codec: Codec,
    members: RwLock<Vec<DevRef>>,
    failed: Vec<AtomicBool>,
    /// Metadata bytes per member block.
    mdb: usize,
    /// Blocks are checked against their records (integrity.rs). Off only when the members keep
    /// no payload: an emulated SSD in payload mode `none` or `tag` (timing-only experiments)
    /// reads back zeros or a fingerprint, data and records alike, which no check can pass.
    /// `format` finds out by reading back the superblock it wrote; an array that opens has
    /// members that keep their superblock, so it checks.
    checks: AtomicBool,
    /// Conversion runs in the members.
    offload: bool,
    opts: ScalaOptions,
    t: Tables,
    /// Per I/O reactor state; only its own reactor touches it (messages from the space manager
    /// run there too), so each mutex is uncontended by construction: it is the cell that makes
    /// the state `Sync`, not a lock between reactors.
    reactors: Vec<Mutex<ReactorState>>,
    /// The space manager's state; only the space manager's reactor touches it.
    mgr: Mutex<Manager>,
    sm_reactor: usize,
    /// Serialises the space manager's multi-step work (grants, GC, checkpoints, rebuild) on
    /// its reactor. Conversions do not take it: they run in the background beside grants.
    sm_work: StripeLocks,
    /// Per stripe: held by whatever rewrites a stripe's chunks after its writes (a conversion,
    /// a repair of a corrupt block, a scrub or rebuild step, GC trimming a victim), so that a
    /// repair never lands on a stripe recycled meanwhile and parity is always computed over
    /// what the data chunks hold. The write path never takes it. Order: `sm_work` before a
    /// stripe lock, never the other way (grants hold `sm_work` while they wait for
    /// conversions, which hold stripe locks).
    stripe_locks: StripeLocks,
    /// The service task is running or scheduled (there is at most one).
    sm_kicked: AtomicBool,
    /// Set when the last handle on the array is dropped: background tasks end at their next
    /// wake-up instead of waiting forever on events of an array no one can use.
    stopping: AtomicBool,
    /// Dropped with the last reference to the array, background tasks' included.
    alive: Arc<()>,
    /// Service tasks running right now, and the most ever (a check that there is one).
    services_running: AtomicUsize,
    services_max: AtomicUsize,
    /// Wakes the service: a hero group filled, a conversion finished, a grant waits.
    sm_event: event_listener::Event,
    /// Wakes tasks waiting for conversions (grants, drains): a conversion finished or full
    /// groups arrived in the queue.
    vh_event: event_listener::Event,
    /// User requests outstanding at the array, and since when none has been (idle detection).
    user_inflight: AtomicU64,
    idle_since_ns: AtomicU64,
    /// The member being rebuilt (`usize::MAX`: none) and how many stripes it has back.
    rebuilding: AtomicUsize,
    rebuild_cursor: AtomicU64,
    /// Next slot of the trim journal ring.
    journal_pos: AtomicU64,
    /// Journal position at the last checkpoint.
    journal_ckpt_pos: AtomicU64,
    /// Chunk buffers of host conversions and GC, reused from stripe to stripe.
    bufs: BufPool,
    /// Per reactor: wakes that reactor's writes waiting while one of them asks for heroes.
    grant_done: Vec<event_listener::Event>,
    metrics: Arc<Registry>,
    c: Counters,
    recovery: Mutex<Option<RecoveryReport>>,
    /// Members' read latencies, to read around a slow one.
    pub(crate) latency: MemberLatency,
}

/// A ScalaAFA array.
pub struct Scala {
    inner: Arc<Inner>,
}

/// Dropping the array stops its background work. The space manager's service task waits on
/// an event the array owns while holding the array: nothing else would ever wake it, and the
/// two kept each other (and the members' buffers) alive after every user had let go (found
/// through the reliability swarm's memory growth, about 1 MB per simulated array).
impl Drop for Scala {
    fn drop(&mut self) {
        self.inner.stop();
    }
}

pub(crate) fn invalid(msg: String) -> DevError {
    DevError::Invalid(format!("scala: {msg}"))
}

impl Inner {
    pub(crate) fn member(&self, i: usize) -> DevRef {
        self.members.read()[i].clone()
    }

    pub(crate) fn is_failed(&self, i: usize) -> bool {
        self.failed[i].load(Ordering::Acquire)
    }

    pub(crate) fn failed_count(&self) -> usize {
        self.failed.iter().filter(|f| f.load(Ordering::Acquire)).count()
    }

    /// Stops background work: tasks waiting on the array's events wake and end.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.sm_event.notify(usize::MAX);
        self.vh_event.notify(usize::MAX);
        for e in &self.grant_done {
            e.notify(usize::MAX);
        }
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Marks member `i` failed after an I/O error that device `from` returned; fails the
    /// request when more than m are. An error of a device that no longer holds the slot (a
    /// command issued to a failed member before a rebuild installed its replacement, and
    /// completing after) says nothing about the replacement and is ignored. (The reliability
    /// swarm found the replacement marked failed that way, mid-rebuild.)
    pub(crate) fn member_error(&self, i: usize, from: &DevRef, e: DevError) -> DevResult<()> {
        if !Arc::ptr_eq(from, &self.members.read()[i]) {
            return Ok(());
        }
        if !self.failed[i].swap(true, Ordering::AcqRel) {
            self.c.member_failures.inc();
        }
        if self.failed_count() > self.geo.m {
            return Err(e);
        }
        Ok(())
    }

    /// Whether blocks are checked against their records (`checks`).
    pub(crate) fn checks(&self) -> bool {
        self.checks.load(Ordering::Relaxed)
    }

    pub(crate) fn bs(&self) -> usize {
        self.geo.block_size as usize
    }

    pub(crate) fn stripe_of(&self, afa: u32) -> u64 {
        afa as u64 / self.geo.stripe_blocks()
    }
}

impl Scala {
    /// Builds the engine over members, with tables empty; `create` and `open` finish the job.
    fn build(name: &str, members: Vec<DevRef>, opts: ScalaOptions) -> DevResult<Inner> {
        let (k, m) = (opts.k, opts.m);
        if k == 0 || !(1..=3).contains(&m) {
            return Err(invalid(format!("k = {k}, m = {m}: k must be >= 1 and m from 1 to 3")));
        }
        if members.len() != k + m {
            return Err(invalid(format!(
                "{k} + {m} needs exactly {} members, got {}",
                k + m,
                members.len()
            )));
        }
        flashrig_erasure::check_geometry(k, m).map_err(|e| invalid(e.to_string()))?;
        let (bs, _) = check_members(&constraints(k, m), &members)?;
        let mdb = members[0].info().md_bytes_per_block as usize;
        for d in &members {
            let md = d.info().md_bytes_per_block as usize;
            if md < format::MD_BYTES || md != mdb {
                return Err(invalid(format!(
                    "member {} stores {md} metadata bytes per block; scala needs {} on every \
                     member, all equal (the PMT slice of §5.4: user block, timestamp, slot; a \
                     file member keeps it in its metadata sidecar, `md_bytes` in its config)",
                    d.info().name,
                    format::MD_BYTES.max(mdb)
                )));
            }
        }
        let can_convert = members.iter().all(|d| d.info().caps.convert);
        let offload = match opts.conversion {
            ConversionMode::Host => false,
            ConversionMode::Auto => can_convert,
            ConversionMode::Ssd => {
                if let Some(d) = members.iter().find(|d| !d.info().caps.convert) {
                    return Err(invalid(format!(
                        "conversion = \"ssd\" but member {} does not support the conversion \
                         command (an emulated SSD needs firmware.vendor_convert = true)",
                        d.info().name
                    )));
                }
                true
            }
        };
        let member_blocks = members.iter().map(|d| d.info().num_blocks).min().unwrap();
        let transient = opts.transient_blocks_per_member.unwrap_or(member_blocks / 20);
        let geo = ScalaGeometry::new(
            k,
            m,
            opts.chunk_blocks,
            bs,
            member_blocks,
            transient,
            opts.gc_reserve_fraction,
        )?;
        let reactors =
            if flashrig_runtime::in_runtime() { flashrig_runtime::num_reactors() } else { 1 };
        let sm_reactor = opts.space_manager_reactor.unwrap_or(reactors - 1);
        if sm_reactor >= reactors {
            return Err(invalid(format!(
                "space_manager_reactor = {sm_reactor}, but the runtime has {reactors} reactors"
            )));
        }
        let mut info = DeviceInfo::new(name, bs, geo.user_blocks);
        info.optimal_io_blocks = geo.chunk_blocks as u32;
        info.caps.fua = true;
        let metrics = Registry::new(name);
        let c = Counters::new(&metrics);
        let n = k + m;
        let t = Tables::new(geo.user_blocks, geo.hh * geo.stripe_blocks(), geo.hh, m);
        let timing_only = members.iter().any(|d| d.info().caps.timing_only);
        Ok(Inner {
            info,
            codec: Codec::new(k, m).map_err(|e| invalid(e.to_string()))?,
            members: RwLock::new(members),
            failed: (0..n).map(|_| AtomicBool::new(false)).collect(),
            mdb,
            // Members that say they keep no payload are not checked; `format` also probes.
            checks: AtomicBool::new(!timing_only),
            offload,
            t,
            reactors: (0..reactors).map(|_| Mutex::new(ReactorState::new(n))).collect(),
            mgr: Mutex::new(Manager::new(&geo, reactors)),
            sm_reactor,
            sm_work: StripeLocks::default(),
            stripe_locks: StripeLocks::default(),
            sm_kicked: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            alive: Arc::new(()),
            services_running: AtomicUsize::new(0),
            services_max: AtomicUsize::new(0),
            sm_event: event_listener::Event::new(),
            vh_event: event_listener::Event::new(),
            user_inflight: AtomicU64::new(0),
            idle_since_ns: AtomicU64::new(0),
            rebuilding: AtomicUsize::new(usize::MAX),
            rebuild_cursor: AtomicU64::new(0),
            journal_pos: AtomicU64::new(0),
            journal_ckpt_pos: AtomicU64::new(0),
            // Data and parity chunks and their metadata of every conversion in flight, and of
            // a GC or rebuild step beside them.
            bufs: BufPool::new(2 * n * (opts.convert_depth.unwrap_or(2 * n).max(1) + 2)),
            grant_done: (0..reactors).map(|_| event_listener::Event::new()).collect(),
            metrics,
            c,
            recovery: Mutex::new(None),
            latency: MemberLatency::new(n),
            geo,
            opts,
        })
    }

    /// Formats blank or used members as a new, empty array: trims them, writes the superblock
    /// and a first checkpoint.
    pub async fn create(name: &str, members: Vec<DevRef>, opts: ScalaOptions) -> DevResult<Scala> {
        let inner = Arc::new(Self::build(name, members, opts)?);
        if let Err(e) = inner.format().await {
            inner.stop();
            return Err(e);
        }
        Ok(Scala { inner })
    }

    /// Opens an array after a crash or a shutdown: the recovery of §5.4 (see [`RECOVERY_STEPS`]).
    pub async fn open(name: &str, members: Vec<DevRef>, opts: ScalaOptions) -> DevResult<Scala> {
        let inner = Arc::new(Self::build(name, members, opts)?);
        let report = match inner.recover().await {
            Ok(r) => r,
            Err(e) => {
                inner.stop();
                return Err(e);
            }
        };
        *inner.recovery.lock() = Some(report);
        Ok(Scala { inner })
    }

    /// Opens the array its members hold, or creates one when every member is blank (block 0
    /// reads as zeros): what a server restarted over the same files wants. Members that hold
    /// something else (another array's superblock, a file system) are refused, never formatted.
    pub async fn open_or_create(
        name: &str,
        members: Vec<DevRef>,
        opts: ScalaOptions,
    ) -> DevResult<Scala> {
        let mut blank = Vec::new();
        for d in &members {
            let mut b = vec![0u8; d.info().block_size as usize];
            d.read(0, &mut b, None).await?;
            blank.push(b.iter().all(|&x| x == 0));
            // A superblock of another format version goes on to `open`, which names it.
            if !blank.last().unwrap() && !format::is_scala_superblock(&b) {
                return Err(invalid(format!(
                    "member {} holds neither a scala superblock nor zeros in its first block: \
                     refusing to format it (start = \"create\" formats it)",
                    d.info().name
                )));
            }
        }
        if blank.iter().all(|&b| b) {
            Scala::create(name, members, opts).await
        } else {
            // Some blank members beside formatted ones: recovery names what does not match.
            Scala::open(name, members, opts).await
        }
    }

    /// A token that dies when the array's state is freed: after the last handle is dropped
    /// and every background task has ended. The reliability swarm checks that no array
    /// outlives its run.
    pub fn liveness(&self) -> std::sync::Weak<()> {
        Arc::downgrade(&self.inner.alive)
    }

    pub fn geometry(&self) -> &ScalaGeometry {
        &self.inner.geo
    }

    /// Whether conversion runs in the members.
    pub fn offloaded(&self) -> bool {
        self.inner.offload
    }

    /// What the last [`Scala::open`] did, step by step.
    pub fn recovery(&self) -> Option<RecoveryReport> {
        self.inner.recovery.lock().clone()
    }

    pub fn stats(&self) -> ScalaStats {
        self.inner.stats()
    }

    /// Whether member `i` is slow compared with its peers (see [`crate::latency`]): reads of
    /// its primary copies then come from a backup copy or the parity, while every other
    /// member holds the stripe.
    pub fn is_slow(&self, i: usize) -> bool {
        self.inner.latency.is_slow(i)
    }

    /// Marks member `i` failed (as a failed device would be); reads reconstruct, writes skip it.
    pub fn fail_member(&self, i: usize) {
        if !self.inner.failed[i].swap(true, Ordering::AcqRel) {
            self.inner.c.member_failures.inc();
        }
    }

    pub fn failed_members(&self) -> Vec<usize> {
        (0..self.inner.geo.n).filter(|&i| self.inner.is_failed(i)).collect()
    }

    /// Replaces failed member `slot` by `replacement` and rebuilds its contents while I/O goes
    /// on.
    pub async fn rebuild(&self, slot: usize, replacement: DevRef) -> DevResult<()> {
        self.inner.clone().rebuild(slot, replacement).await
    }

    /// Converts every hero group now (full or not): what the space manager does when the host
    /// is idle, forced. For tests and experiments that want the striping layout.
    pub async fn convert_all(&self) -> DevResult<()> {
        self.inner.clone().convert_everything().await
    }

    /// A checkpoint now.
    pub async fn checkpoint(&self) -> DevResult<()> {
        let inner = self.inner.clone();
        let sm = inner.sm_reactor;
        flashrig_runtime::spawn_on(sm, move || async move {
            let _g = inner.sm_work.lock(0).await;
            inner.write_checkpoint().await
        })
        .await
    }

    /// A clean shutdown: every reactor returns its heroes, everything is converted, and a
    /// final checkpoint makes the next `open` scan nothing but the grant window.
    pub async fn close(&self) -> DevResult<()> {
        self.inner.clone().convert_everything().await?;
        self.checkpoint().await?;
        self.inner.flush_members().await
    }
}

#[async_trait(?Send)]
impl BlockDevice for Scala {
    fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    fn kind(&self) -> &'static str {
        "scala"
    }

    fn metrics(&self) -> Option<Arc<Registry>> {
        let s = self.inner.stats();
        let r = &self.inner.metrics;
        r.set_value("free_hh", s.free_hh as f64);
        r.set_value("free_vh", s.free_vh as f64);
        r.set_value("converted_stripes", s.converted_stripes as f64);
        r.set_value("full_stripes", s.full_stripes as f64);
        r.set_value("conversions_in_flight_max", self.inner.mgr.lock().converting_max as f64);
        r.set_value("service_tasks_max", self.inner.services_max.load(Ordering::SeqCst) as f64);
        let user = self.inner.c.user_write_bytes.get();
        if user > 0 {
            r.set_value(
                "host_write_amplification",
                self.inner.c.member_write_bytes.get() as f64 / user as f64,
            );
        }
        Some(r.clone())
    }

    fn children(&self) -> Vec<DevRef> {
        self.inner.members.read().clone()
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        if md.is_some() {
            return Err(DevError::Unsupported { command: "per-block metadata" });
        }
        check_io(&self.inner.info, lba, buf.len(), None)?;
        let _io = self.inner.user_io();
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
        let _io = self.inner.user_io();
        self.inner.clone().write(lba, data, hints).await
    }

    async fn flush(&self) -> DevResult<()> {
        self.inner.c.flushes.inc();
        let _io = self.inner.user_io();
        self.inner.flush_members().await
    }

    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        check_range(&self.inner.info, lba, num_blocks)?;
        if num_blocks == 0 {
            return Ok(());
        }
        let _io = self.inner.user_io();
        self.inner.clone().trim(lba, num_blocks).await
    }

    /// `Scrub` verifies every block the array maps and its redundancy, and repairs what it
    /// can (docs/scala.md, "Integrity"). Other vendor commands are the members' business.
    async fn vendor(&self, cmd: VendorCommand<'_>) -> DevResult<VendorReply> {
        match cmd {
            VendorCommand::Scrub => Ok(VendorReply::Scrubbed(self.inner.scrub().await?)),
            _ => Err(DevError::Unsupported { command: "vendor" }),
        }
    }
}
