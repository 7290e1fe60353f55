//! The host cost model: what the host's software spends per request, charged to the reactor's
//! virtual CPU in the simulation (ARCHITECTURE.md "Runtime"). In the real runtime every charge
//! is free, because the real work takes real CPU time.
//!
//! Engines hold an `Arc<HostCosts>` and call its `charge_*` methods at the points where the
//! modelled stack does the work: a request entering the engine, a member I/O leaving it,
//! parity computed, bytes copied, a mapping-table entry updated. Lock-based baselines also hold
//! an `Arc<SharedLockModel>` and call [`SharedLockModel::pass`] once per critical section of
//! their shared lock. Which profile an engine runs with ([`HostCosts::kernel`] for the
//! lock-based kernel baselines, [`HostCosts::user`] for SPDK-style polled engines) is part of
//! the stack's configuration. Every number's source is documented where the defaults are
//! defined, and the arithmetic in `docs/cost-model.md`.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::context::charge_cpu_ns;
use crate::{current_reactor, now_ns, runtime_kind, ReactorId, RuntimeKind};

/// Per-request software costs of one host storage stack, in nanoseconds of CPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostCosts {
    /// A user request entering the engine (system call, context switches, block layer for a
    /// kernel stack; the polled submit path for a user-space stack).
    pub request_ns: u64,
    /// One I/O from the engine to a member device (block layer and driver submit).
    pub member_io_ns: u64,
    /// Parity computation per KiB of data encoded.
    pub parity_ns_per_kib: f64,
    /// Memory copy per KiB.
    pub copy_ns_per_kib: f64,
    /// One mapping-table update (out-of-place engines).
    pub map_update_ns: u64,
    /// Taking a shared lock that another core held last (a cache-line hand-off).
    pub lock_handoff_ns: u64,
    /// How long the engine holds its shared lock per request (mdraid's device lock).
    pub lock_hold_ns: u64,
    /// Synchronisation among the I/O threads per user request, by the number of threads
    /// (reactors) issuing: `(threads, ns)` points, interpolated linearly between them and
    /// extended beyond the last with the last segment's slope; empty: none. The kernel
    /// profile's points are derived from FusionRAID's measured scaling (§3.1); see
    /// [`KERNEL_SYNC_NS`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sync_ns_by_threads: Vec<(u32, u64)>,
}

impl Default for HostCosts {
    /// No cost: a stack that charges nothing (the behaviour before the cost model existed).
    fn default() -> Self {
        Self {
            request_ns: 0,
            member_io_ns: 0,
            parity_ns_per_kib: 0.0,
            copy_ns_per_kib: 0.0,
            map_update_ns: 0,
            lock_handoff_ns: 0,
            lock_hold_ns: 0,
            sync_ns_by_threads: Vec::new(),
        }
    }
}

/// Thread time per 64 KiB user request of FusionRAID's replication phase with one I/O thread,
/// which ScalaAFA measured at 4.8 GB/s on 4+1 Samsung 980 Pro (`scalaafa-atc24.txt` §3.1,
/// Fig. 3a). Assuming the thread is saturated (all of its time goes to requests):
/// 65536 B / 4.8e9 B/s = 13 653.3 ns.
pub const FSR_REP_THREAD_NS_PER_REQUEST: f64 = 65_536.0 / 4.8e9 * 1e9;
/// Share of that thread time spent in user-kernel context switches (`scalaafa-slides.txt`:
/// "context switch: 35.6%").
pub const FSR_REP_CONTEXT_SWITCH_SHARE: f64 = 0.356;
/// Share spent in the block layer (`scalaafa-slides.txt`: "block layer: 18.8%"; with the
/// context switches it is the paper's preAFA + postAFA = 54.4%).
pub const FSR_REP_BLOCK_LAYER_SHARE: f64 = 0.188;
/// Bios per replicated 64 KiB user write on a 4+1 two-phase array: the user's bio and m + 1 = 2
/// replica bios to members. The block-layer share is split evenly over them.
pub const FSR_REP_BIOS_PER_REQUEST: f64 = 3.0;

/// Share of that thread time in the AFA engine itself and "Other" (`scalaafa-atc24.txt` §3.1:
/// I/O 20.8%, preAFA + postAFA 54.4%; the rest, 100 - 20.8 - 54.4 = 24.8%).
pub const FSR_REP_AFA_OTHER_SHARE: f64 = 0.248;
/// FSR-Rep's 64 KiB sequential write throughput on 4+1 Samsung 980 Pro with 1, 2 and 8 I/O
/// threads (`scalaafa-atc24.txt` §3.1: "FSR-Rep achieves 4.8 GB/s and 7.2 GB/s write
/// throughput with 1 and 2 threads", "FSR-Rep achieves 12.2 GB/s with 8 threads").
pub const FSR_REP_GBPS_BY_THREADS: [(u32, f64); 3] = [(1, 4.8), (2, 7.2), (8, 12.2)];

/// Kernel profile, a user request's entry: every CPU share of FusionRAID's one-thread
/// breakdown but the I/O stall and the member bios' block-layer shares: context switches,
/// 13 653.3 ns x 0.356 = 4 860.6 ns; its own bio's block-layer share, 13 653.3 ns x 0.188 / 3
/// = 855.6 ns; the AFA engine and "Other", 13 653.3 ns x 0.248 = 3 386.0 ns; 9 102.2 ns,
/// rounded. With the two replica bios ([`KERNEL_MEMBER_IO_NS`] each) a replicated 64 KiB
/// write costs 10 814 ns, 79.2% of the thread's 13 653.3 ns.
pub const KERNEL_REQUEST_NS: u64 = 9_102;
/// Kernel profile, one member bio: its block-layer share, 13 653.3 ns x 0.188 / 3 = 855.6 ns,
/// rounded.
pub const KERNEL_MEMBER_IO_NS: u64 = 856;
/// Kernel profile, synchronisation among I/O threads per request, by threads: a thread's time
/// per 64 KiB request at T threads is T x 65 536 B / throughput(T) ([`FSR_REP_GBPS_BY_THREADS`]):
/// 13 653.3 ns at 1, 18 204.4 ns at 2, 42 974.8 ns at 8; the increment over one thread is what
/// the threads spend synchronising (the paper: "inter-thread synchronization (i.e., Other)
/// dominates"): 0, 4 551.1 and 29 321.4 ns, rounded. At 8 threads that is 68% of the thread's
/// time, beside the slides' "Lock issue: 72.2%". Beyond 8 threads the cost grows with the
/// 2-to-8 slope (4 128.4 ns per thread), an extrapolation: the paper measured no point there
/// (it says only that more threads degrade the throughput).
pub const KERNEL_SYNC_NS: [(u32, u64); 3] = [(1, 0), (2, 4_551), (8, 29_321)];

// Measured by `flashrig calibrate` (release build) on the development machine: 2 vCPUs of an
// AMD EPYC under KVM (1 MiB L2 per core, 32 MiB L3), 2026-11-23, 16:17-16:21 UTC, five full
// runs back to back on an otherwise idle machine; each default is the median over the five
// runs of that run's figure (itself a median of repetitions), and the doc comment gives the
// five runs' range. docs/cost-model.md has the per-run table and one run's output. The same
// code costs the same in either profile: parity, copies and mapping updates are host CPU work
// whoever does them, and a cache-line hand-off is a property of the machine.

/// Parity through `flashrig_erasure::Codec::encode` (ISA-L), 4+1, 64 KiB chunks, stripes
/// round robin over 16 MiB of data, per KiB of data (`parity_4p1_ns_per_kib`; runs
/// 65.1-73.4, 15.0 GB/s at the median; 6+1 measured 62.9 and 6+2 98.4 ns per KiB).
pub const MEASURED_PARITY_NS_PER_KIB: f64 = 68.256;
/// `copy_from_slice` of 64 KiB buffers between two page-aligned 8 MiB regions (16 MiB,
/// larger than L2), per KiB (`copy_ns_per_kib`; runs 73.2-104.2, 11.9 GB/s at the median;
/// over 2 x 64 MiB, larger than L3: 175 ns per KiB).
pub const MEASURED_COPY_NS_PER_KIB: f64 = 86.282;
/// One update of a `Vec<u64>` mapping table of 1 Mi entries at a random index, the old entry
/// read (`map_update_vec_ns`; runs 5.4-23.2 ns: independent updates overlap their cache
/// misses; a `HashMap<u64, u64>` of 1 Mi entries measured 246 ns).
pub const MEASURED_MAP_UPDATE_NS: u64 = 14;
/// Half the round trip of two threads ping-ponging one cache line through an atomic, wall
/// clock, median of 41 repetitions (`lock_handoff_ns`; runs 16.2-45.7 ns: about 16 ns when
/// the host ran the two vCPUs on sibling hyperthreads, about 41-46 ns otherwise; earlier the
/// same day, with the machine loaded, the fastest repetition was about 400 ns).
pub const MEASURED_LOCK_HANDOFF_NS: u64 = 41;
/// Our own critical section, uncontended: a `parking_lot::Mutex` taken and released around a
/// stripe-state hash map look-up and insert (and the eviction of the oldest stripe) over 256
/// active stripes, md's default `stripe_cache_size` (`lock_hold_ns`; runs 14.5-23.2 ns).
pub const MEASURED_LOCK_HOLD_NS: u64 = 17;
/// flashrig's own per-request cost through its real runtime: a closed loop of random writes
/// at QD32 on one reactor into a RAM device completing 1 us later (every request suspended
/// and woken, as a polled completion is), reactor CPU time per request, net of the RAM
/// device's payload work: 2 c(4 KiB) - c(8 KiB) (`request_ns`; runs 526-935 ns; c(4 KiB)
/// itself 1 228 ns at the median, c(8 KiB) 1 562 ns).
pub const MEASURED_SUBMIT_NS: u64 = 743;
/// What one engine hop adds per member I/O: 4 KiB writes through a one-member `concat` over
/// the same RAM device, minus the RAM device alone (`member_io_ns`; runs 286-345 ns).
pub const MEASURED_MEMBER_IO_NS: u64 = 322;

impl HostCosts {
    /// The kernel profile: a lock-based kernel array (mdraid, FusionRAID) driven through
    /// system calls and the block layer.
    ///
    /// `request_ns` ([`KERNEL_REQUEST_NS`]) and `member_io_ns` ([`KERNEL_MEMBER_IO_NS`]) are
    /// derived from ScalaAFA's breakdown of FusionRAID's replication phase with one I/O thread
    /// (Fig. 3a, `scalaafa-slides.txt` lines 40-55): every CPU share but the I/O stall, which
    /// is the devices' time. `sync_ns_by_threads` ([`KERNEL_SYNC_NS`]) is derived from the same
    /// engine's throughput at 1, 2 and 8 threads. These are measurements of a baseline's costs
    /// on 980 Pro SSDs, used as inputs for every kernel engine (mdraid too, and on FEMU SSDs):
    /// an assumption, stated in docs/cost-model.md. The other fields are measured
    /// on this machine by `flashrig calibrate` ([`MEASURED_PARITY_NS_PER_KIB`],
    /// [`MEASURED_COPY_NS_PER_KIB`], [`MEASURED_MAP_UPDATE_NS`], [`MEASURED_LOCK_HANDOFF_NS`],
    /// [`MEASURED_LOCK_HOLD_NS`]).
    pub fn kernel() -> Self {
        Self {
            request_ns: KERNEL_REQUEST_NS,
            member_io_ns: KERNEL_MEMBER_IO_NS,
            parity_ns_per_kib: MEASURED_PARITY_NS_PER_KIB,
            copy_ns_per_kib: MEASURED_COPY_NS_PER_KIB,
            map_update_ns: MEASURED_MAP_UPDATE_NS,
            lock_handoff_ns: MEASURED_LOCK_HANDOFF_NS,
            lock_hold_ns: MEASURED_LOCK_HOLD_NS,
            sync_ns_by_threads: KERNEL_SYNC_NS.to_vec(),
        }
    }

    /// The user-space profile: an SPDK-style polled engine (ScalaAFA, RAID5F) whose requests
    /// never leave user space. Every field is measured on this machine by `flashrig
    /// calibrate`: `request_ns` ([`MEASURED_SUBMIT_NS`]) and `member_io_ns`
    /// ([`MEASURED_MEMBER_IO_NS`]) are flashrig's own per-request cost through its real
    /// runtime, the nearest thing to an SPDK submit path this code base runs; the rest as in
    /// [`HostCosts::kernel`]. The lock fields are charged only by engines that take a
    /// [`SharedLockModel`], which share-nothing engines do not.
    pub fn user() -> Self {
        Self {
            request_ns: MEASURED_SUBMIT_NS,
            member_io_ns: MEASURED_MEMBER_IO_NS,
            parity_ns_per_kib: MEASURED_PARITY_NS_PER_KIB,
            copy_ns_per_kib: MEASURED_COPY_NS_PER_KIB,
            map_update_ns: MEASURED_MAP_UPDATE_NS,
            lock_handoff_ns: MEASURED_LOCK_HANDOFF_NS,
            lock_hold_ns: MEASURED_LOCK_HOLD_NS,
            sync_ns_by_threads: Vec::new(),
        }
    }

    /// A profile by name: `"kernel"`, `"user"`, or `"none"` (the zero-cost default).
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "kernel" => Some(Self::kernel()),
            "user" => Some(Self::user()),
            "none" => Some(Self::default()),
            _ => None,
        }
    }

    /// Synchronisation cost per request with `threads` I/O threads (see
    /// [`HostCosts::sync_ns_by_threads`]).
    pub fn sync_ns(&self, threads: usize) -> u64 {
        let p = &self.sync_ns_by_threads;
        let t = threads as f64;
        let Some(&(first_t, first_ns)) = p.first() else { return 0 };
        if p.len() == 1 || t <= first_t as f64 {
            return first_ns;
        }
        let seg = p.windows(2).find(|w| t <= w[1].0 as f64).unwrap_or(&p[p.len() - 2..]);
        let ((t0, y0), (t1, y1)) = (seg[0], seg[1]);
        let slope = (y1 as f64 - y0 as f64) / (t1 as f64 - t0 as f64).max(1.0);
        (y0 as f64 + slope * (t - t0 as f64)).round().max(0.0) as u64
    }

    /// Charges a user request's entry into the engine, with the synchronisation among the
    /// runtime's reactors (every reactor of a kernel baseline's run is an I/O thread).
    pub async fn charge_request(&self) {
        let sync = if self.sync_ns_by_threads.is_empty() {
            0
        } else {
            self.sync_ns(crate::num_reactors())
        };
        charge_cpu_ns(self.request_ns + sync).await
    }
    /// Charges `n` member I/Os.
    pub async fn charge_member_ios(&self, n: u64) {
        charge_cpu_ns(self.member_io_ns * n).await
    }
    /// Charges encoding parity over `bytes` of data.
    pub async fn charge_parity(&self, bytes: u64) {
        charge_cpu_ns((self.parity_ns_per_kib * bytes as f64 / 1024.0).round() as u64).await
    }
    /// Charges copying `bytes`.
    pub async fn charge_copy(&self, bytes: u64) {
        charge_cpu_ns((self.copy_ns_per_kib * bytes as f64 / 1024.0).round() as u64).await
    }
    /// Charges `n` mapping-table updates.
    pub async fn charge_map_updates(&self, n: u64) {
        charge_cpu_ns(self.map_update_ns * n).await
    }
}

/// A spin lock shared by every reactor, such as mdraid's `device_lock`: one critical section
/// at a time across the whole array, and a cache-line hand-off whenever the lock moves to
/// another core.
///
/// In the simulation the lock is one timeline, `free_at_ns`, with the reactor that held it
/// last. A pass ([`SharedLockModel::pass`]) wants the lock at the instant its reactor's CPU
/// reaches it (`want`), starts at `start = max(want, free_at_ns)`, spins from `want` to
/// `start` (charged as CPU: spinning burns the core), pays `lock_handoff_ns` if another
/// reactor held the lock last, then holds it for `lock_hold_ns` (charged), after which the
/// lock is free again: `free_at_ns = start + handoff + hold`.
///
/// A reactor is one core, and a core spinning on a lock runs nothing else, so the passes of
/// one reactor's tasks take turns (first come, first served); a reactor therefore never waits
/// for itself, and one reactor alone never spins nor pays a hand-off.
///
/// To find `want` without looking inside the simulator, a pass first charges its hold time
/// to the reactor's CPU like any other work: when that completes, the CPU gave it the slot
/// `[now - hold, now]`, so `want = now - hold`. Spin and hand-off are then charged on top. If
/// other tasks of the reactor charge work while a pass waits for its slot, that work runs
/// before the pass's spin and hand-off, and the lock timeline runs slightly ahead of the
/// reactor's CPU; totals are exact either way. With `lock_hold_ns = 0`, `want` is the caller's
/// `now`.
///
/// In the real runtime a pass is a no-op: an engine that really locks pays real time, and the
/// counters stay at zero. Deterministic in the simulation (all reactors run in one thread in a
/// fixed order). Use one model per run: the timeline is in virtual time of the run that used
/// it ([`SharedLockModel::reset`] clears it).
#[derive(Default)]
pub struct SharedLockModel {
    state: Arc<Mutex<LockState>>,
}

#[derive(Default)]
struct LockState {
    free_at_ns: u64,
    last_holder: Option<ReactorId>,
    acquisitions: u64,
    contended: u64,
    handoffs: u64,
    spin_ns: u64,
    /// Per reactor: the turn its tasks take through the lock, one at a time.
    lanes: Vec<Lane>,
}

/// First-come-first-served turns of one reactor's tasks (a ticket lock).
#[derive(Default)]
struct Lane {
    next_ticket: u64,
    serving: u64,
    waiting: HashMap<u64, Waker>,
    /// Tickets whose pass was dropped before its turn came: skipped.
    abandoned: BTreeSet<u64>,
}

impl Lane {
    /// Ends the current turn and returns the waker of the next pass, if it waits.
    fn advance(&mut self) -> Option<Waker> {
        self.serving += 1;
        while self.abandoned.remove(&self.serving) {
            self.serving += 1;
        }
        self.waiting.remove(&self.serving)
    }
}

impl SharedLockModel {
    pub fn new() -> Self {
        Self::default()
    }

    /// One critical section of the shared lock by the calling task (see the type's
    /// documentation). Completes when the section is over on the caller's virtual CPU.
    pub async fn pass(&self, costs: &HostCosts) {
        if runtime_kind() != Some(RuntimeKind::Sim) {
            return;
        }
        let reactor = current_reactor();
        let turn = Turn::take(self.state.clone(), reactor);
        (&turn).await;
        let hold = costs.lock_hold_ns;
        charge_cpu_ns(hold).await;
        let want = now_ns().saturating_sub(hold);
        let extra = {
            let mut s = self.state.lock();
            let start = want.max(s.free_at_ns);
            let spin = start - want;
            let handoff = match s.last_holder {
                Some(r) if r != reactor => costs.lock_handoff_ns,
                _ => 0,
            };
            s.free_at_ns = start + handoff + hold;
            s.last_holder = Some(reactor);
            s.acquisitions += 1;
            s.contended += u64::from(spin > 0);
            s.handoffs += u64::from(handoff > 0);
            s.spin_ns += spin;
            spin + handoff
        };
        charge_cpu_ns(extra).await;
        drop(turn);
    }

    /// Critical sections passed (simulation only).
    pub fn acquisitions(&self) -> u64 {
        self.state.lock().acquisitions
    }

    /// Passes that found the lock held and spun.
    pub fn contended(&self) -> u64 {
        self.state.lock().contended
    }

    /// Passes that took the lock from another reactor and paid `lock_handoff_ns`.
    pub fn handoffs(&self) -> u64 {
        self.state.lock().handoffs
    }

    /// Virtual CPU time spent spinning, over all reactors.
    pub fn spin_ns(&self) -> u64 {
        self.state.lock().spin_ns
    }

    /// When the lock is next free, on the last simulation's clock.
    pub fn free_at_ns(&self) -> u64 {
        self.state.lock().free_at_ns
    }

    /// Forgets the timeline, the last holder and the counters (for reuse in another run).
    /// Must not be called while a pass is under way.
    pub fn reset(&self) {
        *self.state.lock() = LockState::default();
    }
}

impl std::fmt::Debug for SharedLockModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock();
        f.debug_struct("SharedLockModel")
            .field("free_at_ns", &s.free_at_ns)
            .field("last_holder", &s.last_holder)
            .field("acquisitions", &s.acquisitions)
            .field("contended", &s.contended)
            .field("handoffs", &s.handoffs)
            .field("spin_ns", &s.spin_ns)
            .finish()
    }
}

/// One task's turn in its reactor's lane: awaiting `&Turn` completes when the turn comes;
/// dropping it (done or cancelled) hands the turn on.
struct Turn {
    state: Arc<Mutex<LockState>>,
    reactor: ReactorId,
    ticket: u64,
}

impl Turn {
    fn take(state: Arc<Mutex<LockState>>, reactor: ReactorId) -> Self {
        let ticket = {
            let mut s = state.lock();
            if s.lanes.len() <= reactor {
                s.lanes.resize_with(reactor + 1, Lane::default);
            }
            let lane = &mut s.lanes[reactor];
            let t = lane.next_ticket;
            lane.next_ticket += 1;
            t
        };
        Turn { state, reactor, ticket }
    }
}

impl Future for &Turn {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.state.lock();
        let lane = &mut s.lanes[self.reactor];
        if lane.serving == self.ticket {
            Poll::Ready(())
        } else {
            lane.waiting.insert(self.ticket, cx.waker().clone());
            Poll::Pending
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let next = {
            let mut s = self.state.lock();
            let lane = &mut s.lanes[self.reactor];
            if lane.serving == self.ticket {
                lane.advance()
            } else {
                lane.waiting.remove(&self.ticket);
                lane.abandoned.insert(self.ticket);
                None
            }
        };
        if let Some(w) = next {
            w.wake();
        }
    }
}
