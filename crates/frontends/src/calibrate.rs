//! `flashrig calibrate`: measures on this machine the figures of the host cost model
//! (`flashrig_runtime::cost`, docs/cost-model.md) that are ours to measure, and prints them as
//! TOML (`[host.kernel]`, `[host.user]`: the two profiles; `[calibration]`: every raw figure)
//! with a human summary in TOML comments, so the whole output parses.
//!
//! Each figure is the median of several repetitions, timed on the measuring thread's CPU
//! clock (`CLOCK_THREAD_CPUTIME_ID`), so that other work on a shared machine preempting it
//! does not inflate the figure; only the lock hand-off, which needs two threads running at
//! once, is timed on the wall clock. These are measurements, not tests: nothing here asserts
//! a speed. What is measured:
//!
//! * parity: `flashrig_erasure::Codec::encode` of 64 KiB chunks for 4+1, 6+1 and 6+2, round
//!   robin over a working set of stripes larger than L2, ns per KiB of *data* encoded (the unit
//!   of `HostCosts::charge_parity`). The 4+1 figure is the profiles' `parity_ns_per_kib`:
//!   ScalaAFA's analysis and most of its experiments use 4+1.
//! * copy: `copy_from_slice` of 64 KiB buffers between two 8 MiB regions (16 MiB in all,
//!   larger than L2), ns per KiB; the same over 2 x 64 MiB (larger than a 32 MiB L3) is
//!   reported beside it.
//! * mapping update: the entry at a random index of a `Vec<u64>` of 1 Mi entries replaced and
//!   its old value read (`mem::replace`), as an out-of-place engine maps a new location and
//!   invalidates the old; the same in a `HashMap<u64, u64>` of 1 Mi entries is reported beside
//!   it.
//! * lock hand-off: two threads ping-pong one cache line through an atomic; half a round trip.
//! * lock hold: our own critical section, uncontended (see [`stripe_critical_section`]).
//! * submit: random writes at QD32 from one reactor of the real runtime into a RAM device
//!   (`workload::closed_loop`), reactor time / requests, the device completing after 1 us (every
//!   request suspended and woken, as a polled completion is). The RAM device copies the
//!   payload, which a real SSD does by DMA, so the user profile's `request_ns` is the cost net
//!   of it: 4 KiB and 8 KiB requests give the payload's share, c(8 KiB) - c(4 KiB), and
//!   `request_ns = 2 c(4 KiB) - c(8 KiB)`. `member_io_ns` is what one engine hop adds: 4 KiB
//!   through a one-member `concat` minus the RAM device alone. A RAM device completing inside
//!   the call is reported beside them.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use flashrig_blockdev::DevRef;
use flashrig_devices::RamDevice;
use flashrig_engines::Concat;
use flashrig_erasure::Codec;
use flashrig_runtime::{HostCosts, RuntimeKind};
use std::hint::black_box;

use crate::error::Error;
use crate::workload::{closed_loop, Access};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
/// Chunk of the parity and copy measurements: FusionRAID's and ScalaAFA's 64 KiB requests.
const CHUNK: usize = 64 * KIB;
/// The "larger than L2" working set of the parity, copy and mapping measurements.
const WORKING_SET: usize = 16 * MIB;
/// Entries of the mapping table.
const MAP_ENTRIES: usize = 1 << 20;
/// Active stripes in the lock-hold critical section: md's default `stripe_cache_size`.
const ACTIVE_STRIPES: u64 = 256;
/// Geometries whose parity cost is reported; the first is the profiles' figure.
const GEOMETRIES: [(usize, usize); 3] = [(4, 1), (6, 1), (6, 2)];

/// Everything one calibration measured. Times in ns (per KiB where named so).
#[derive(Clone, Debug)]
pub struct Calibration {
    pub quick: bool,
    pub repetitions: usize,
    pub handoff_repetitions: usize,
    /// The erasure code's kernel ("isa-l", "rust-avx2", ...).
    pub parity_kernel: String,
    /// (k, m, ns per KiB of data) for each of [`GEOMETRIES`].
    pub parity_ns_per_kib: Vec<(usize, usize, f64)>,
    pub copy_ns_per_kib: f64,
    pub copy_dram_ns_per_kib: f64,
    pub map_update_vec_ns: f64,
    pub map_update_hashmap_ns: f64,
    pub lock_handoff_ns: f64,
    /// The fastest hand-off repetition: the machine's figure when nothing else ran.
    pub lock_handoff_min_ns: f64,
    pub lock_hold_ns: f64,
    /// 4 KiB writes into a RAM device completing at once, ns per request.
    pub submit_sync_4k_ns: f64,
    /// 4 KiB writes into a RAM device completing after 1 us.
    pub submit_4k_ns: f64,
    /// 8 KiB writes into the same.
    pub submit_8k_ns: f64,
    /// 4 KiB writes through a one-member `concat` over the same.
    pub concat_4k_ns: f64,
    /// Notes on figures that did not resolve above noise.
    pub notes: Vec<String>,
}

/// Sizes of one calibration run.
struct Plan {
    repetitions: usize,
    parity_bytes: usize,
    copy_bytes: usize,
    map_updates: usize,
    /// Round trips per hand-off repetition, and repetitions: many short ones, so that on a
    /// machine shared with other work the median is a repetition no one preempted.
    round_trips: usize,
    handoff_repetitions: usize,
    critical_sections: usize,
    requests: u64,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Plan {
                repetitions: 3,
                parity_bytes: 16 * MIB,
                copy_bytes: 32 * MIB,
                map_updates: 1 << 20,
                round_trips: 5_000,
                handoff_repetitions: 5,
                critical_sections: 200_000,
                requests: 20_000,
            }
        } else {
            Plan {
                repetitions: 9,
                parity_bytes: 512 * MIB,
                copy_bytes: 1024 * MIB,
                map_updates: 16 << 20,
                round_trips: 20_000,
                handoff_repetitions: 41,
                critical_sections: 4_000_000,
                requests: 500_000,
            }
        }
    }
}

/// CPU time of the calling thread, ns. Every measurement but the hand-off is timed on it
/// rather than on the wall clock, so time the thread spends preempted by other work on a busy
/// machine does not count; on an idle machine the two agree.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Pseudo-random bytes (xorshift64): incompressible, and every page really written.
fn fill_random(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for w in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
    }
}

/// A page-aligned zeroed buffer. Source and destination of the copy and parity measurements
/// are page-aligned, as I/O buffers are: where they sit relative to each other modulo 4 KiB
/// changes a copy's speed several-fold on x86 (4K aliasing between loads and pending
/// stores), and the allocator's choice would otherwise decide it.
struct PageBuf {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl PageBuf {
    fn new(len: usize) -> Self {
        let buf = vec![0u8; len + 4096];
        let off = buf.as_ptr().align_offset(4096);
        PageBuf { buf, off, len }
    }
    fn get(&self) -> &[u8] {
        &self.buf[self.off..self.off + self.len]
    }
    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

/// ns per KiB of data through `Codec::encode` for k + m over 64 KiB chunks, round robin over
/// stripes filling [`WORKING_SET`] of data, `bytes` of data per repetition.
fn parity_once(codec: &Codec, data: &[u8], parity: &mut [u8], bytes: usize) -> f64 {
    let (k, m) = (codec.k(), codec.m());
    let stripes = data.len() / (k * CHUNK);
    let calls = (bytes / (k * CHUNK)).max(1);
    let t0 = thread_cpu_ns();
    for c in 0..calls {
        let s = c % stripes;
        let d: Vec<&[u8]> = data[s * k * CHUNK..(s + 1) * k * CHUNK].chunks(CHUNK).collect();
        let mut p: Vec<&mut [u8]> =
            parity[s * m * CHUNK..(s + 1) * m * CHUNK].chunks_mut(CHUNK).collect();
        codec.encode(&d, &mut p).expect("buffers shaped for the codec");
    }
    black_box(&parity[0]);
    (thread_cpu_ns() - t0) as f64 / (calls * k * CHUNK / KIB) as f64
}

/// ns per KiB of `copy_from_slice` of 64 KiB buffers from `src` to `dst` (regions of the same
/// size), `bytes` copied.
fn copy_once(src: &[u8], dst: &mut [u8], bytes: usize) -> f64 {
    let chunks = src.len() / CHUNK;
    let calls = (bytes / CHUNK).max(1);
    let t0 = thread_cpu_ns();
    for c in 0..calls {
        let i = c % chunks;
        // Destination chunks in another order than the source's, so the pair of streams does
        // not march in lockstep through the same cache sets.
        let j = (i * 7 + 3) % chunks;
        dst[j * CHUNK..(j + 1) * CHUNK].copy_from_slice(&src[i * CHUNK..(i + 1) * CHUNK]);
        black_box(&dst[j * CHUNK]);
    }
    (thread_cpu_ns() - t0) as f64 / (calls * CHUNK / KIB) as f64
}

/// ns per update of a `Vec<u64>` mapping table at random indices: the new location replaces
/// the old one, which is read (an out-of-place engine invalidates the old copy).
fn map_vec_once(table: &mut [u64], updates: usize, seed: u64) -> f64 {
    let mask = table.len() - 1;
    let mut x = seed | 1;
    let mut old_sum = 0u64;
    let t0 = thread_cpu_ns();
    for i in 0..updates {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        old_sum = old_sum.wrapping_add(std::mem::replace(&mut table[x as usize & mask], i as u64));
    }
    black_box(old_sum);
    (thread_cpu_ns() - t0) as f64 / updates as f64
}

/// ns per update (`insert` of an existing key, the old value read) of a `HashMap<u64, u64>`
/// at random keys.
fn map_hash_once(table: &mut HashMap<u64, u64>, updates: usize, seed: u64) -> f64 {
    let mask = (MAP_ENTRIES - 1) as u64;
    let mut x = seed | 1;
    let mut old_sum = 0u64;
    let t0 = thread_cpu_ns();
    for i in 0..updates {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        old_sum = old_sum.wrapping_add(table.insert(x & mask, i as u64).unwrap_or(0));
    }
    black_box(old_sum);
    (thread_cpu_ns() - t0) as f64 / updates as f64
}

/// ns for one cache-line hand-off: two threads take turns incrementing one atomic (each waits
/// for the other's value before writing its own), `round_trips` times; half a round trip.
fn handoff_once(round_trips: usize) -> f64 {
    let line = Arc::new(AtomicU64::new(0));
    let wait_for = |line: &AtomicU64, v: u64| {
        let mut spins = 0u32;
        while line.load(Ordering::Acquire) != v {
            std::hint::spin_loop();
            spins += 1;
            // On a loaded machine the peer may be descheduled: let it run.
            if spins == 1 << 16 {
                spins = 0;
                std::thread::yield_now();
            }
        }
    };
    let n = round_trips as u64;
    let peer = {
        let line = line.clone();
        std::thread::spawn(move || {
            for i in 0..n {
                wait_for(&line, 2 * i + 1);
                line.store(2 * i + 2, Ordering::Release);
            }
        })
    };
    // One untimed round trip so both threads are running.
    line.store(1, Ordering::Release);
    wait_for(&line, 2);
    let t0 = Instant::now();
    for i in 1..n {
        line.store(2 * i + 1, Ordering::Release);
        wait_for(&line, 2 * i + 2);
    }
    let ns = t0.elapsed().as_nanos() as f64;
    peer.join().expect("ping-pong peer");
    ns / (2 * (n - 1).max(1)) as f64
}

/// A multiplicative hash, as md's stripe hash (a shift and a mask of the sector) is cheap:
/// the critical section should not be priced by SipHash.
#[derive(Default)]
struct StripeHasher(u64);

impl Hasher for StripeHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
}

/// What an array keeps per active stripe.
#[derive(Clone, Copy)]
struct StripeState {
    sector: u64,
    state: u32,
    pending: u32,
}

type StripeMap = HashMap<u64, StripeState, BuildHasherDefault<StripeHasher>>;

/// The critical section whose length is `lock_hold_ns`: under a `parking_lot::Mutex`, look up
/// the stripe of a sequential write (a new stripe each time), insert its state, and evict the
/// oldest of [`ACTIVE_STRIPES`] active stripes, as md's stripe cache does under its lock for
/// a stream of sequential full-stripe writes. Returns ns per critical section, uncontended
/// (one thread), lock and unlock included.
pub fn stripe_critical_section(sections: usize) -> f64 {
    let map = parking_lot::Mutex::new(StripeMap::default());
    {
        let mut m = map.lock();
        for s in 0..ACTIVE_STRIPES {
            m.insert(s, StripeState { sector: s * 512, state: 1, pending: 0 });
        }
    }
    let t0 = thread_cpu_ns();
    for i in 0..sections as u64 {
        let stripe = ACTIVE_STRIPES + i;
        let mut m = map.lock();
        let e =
            m.entry(stripe).or_insert(StripeState { sector: stripe * 512, state: 0, pending: 0 });
        e.state |= 1;
        e.pending += 1;
        m.remove(&(stripe - ACTIVE_STRIPES));
    }
    let ns = (thread_cpu_ns() - t0) as f64;
    let m = map.lock();
    black_box(
        m.get(&(ACTIVE_STRIPES + sections as u64 - 1)).map(|s| (s.sector, s.state, s.pending)),
    );
    ns / sections.max(1) as f64
}

/// What the submit measurement drives.
#[derive(Clone, Copy)]
struct SubmitCase {
    /// Through a one-member `concat` (one engine hop) rather than the RAM device itself.
    concat: bool,
    /// The RAM device's completion time: 0 completes inside the call.
    latency_ns: u64,
    /// Request size in 4 KiB blocks.
    blocks: u64,
}

const SUBMIT_BLOCK: u32 = 4096;
/// The addressed range: [`WORKING_SET`] of RAM device blocks.
const SUBMIT_RANGE_BLOCKS: u64 = (WORKING_SET / 4096) as u64;
const SUBMIT_QD: u64 = 32;
/// Completion time of the asynchronous RAM device: long enough that every request is
/// suspended and woken, short against QD32 x the per-request cost, so the reactor never idles.
const SUBMIT_LATENCY_NS: u64 = 1_000;

/// ns per request of a closed loop of random writes at QD32 on one real reactor.
fn submit_once(case: SubmitCase, requests: u64, seed: u64) -> Result<f64, Error> {
    let (res, _) = flashrig_runtime::run(RuntimeKind::Real, 1, move || async move {
        let r = SUBMIT_RANGE_BLOCKS;
        let ram: DevRef = Arc::new(RamDevice::new("ram0", SUBMIT_BLOCK, r, 0, case.latency_ns));
        let dev: DevRef = if case.concat {
            Arc::new(Concat::new("concat", vec![ram]).map_err(|e| e.to_string())?)
        } else {
            ram
        };
        // Write the range once, untimed, so the timed loop finds every block allocated.
        closed_loop(dev.clone(), true, Access::Seq, 1, SUBMIT_QD, r, r, seed)
            .await
            .map_err(|e| e.to_string())?;
        // The loop runs on this thread, reactor 0's, which does nothing else: its CPU time is
        // the stack's. (The wall time, `closed_loop`'s own figure, agrees when the machine is
        // otherwise idle: the reactor never sleeps at QD32.)
        let t0 = thread_cpu_ns();
        let (_wall_ns, done) =
            closed_loop(dev, true, Access::Rand, case.blocks, SUBMIT_QD, requests, r, seed)
                .await
                .map_err(|e| e.to_string())?;
        Ok::<f64, String>((thread_cpu_ns() - t0) as f64 / done as f64)
    });
    res.map_err(|e| Error::Run(format!("calibrate submit: {e}")))
}

/// Runs every measurement (`quick`: short runs, for a rough look and the tests). `progress`
/// receives a line as each measurement starts.
pub fn measure(quick: bool, mut progress: impl FnMut(&str)) -> Result<Calibration, Error> {
    let plan = Plan::new(quick);
    let reps = plan.repetitions;

    progress("parity (flashrig_erasure::Codec::encode, 64 KiB chunks)");
    let mut parity_ns_per_kib = Vec::new();
    let mut parity_kernel = String::new();
    for (k, m) in GEOMETRIES {
        let codec = Codec::new(k, m).map_err(|e| Error::Run(format!("calibrate: {e}")))?;
        parity_kernel = codec.kernel().to_string();
        let stripes = (WORKING_SET / (k * CHUNK)).max(1);
        let mut data = PageBuf::new(stripes * k * CHUNK);
        fill_random(data.get_mut(), 0x5EED + k as u64);
        let mut parity = PageBuf::new(stripes * m * CHUNK);
        // One untimed pass: page faults, caches, ISA-L's CPU dispatch.
        parity_once(&codec, data.get(), parity.get_mut(), data.len);
        let v =
            (0..reps).map(|_| parity_once(&codec, data.get(), parity.get_mut(), plan.parity_bytes));
        parity_ns_per_kib.push((k, m, median(v.collect())));
    }

    progress("copy (copy_from_slice of 64 KiB buffers)");
    let copy = |region: usize, bytes: usize| {
        // Source and destination: the two halves of one page-aligned buffer.
        let mut both = PageBuf::new(2 * region);
        fill_random(both.get_mut(), 7);
        let (src, dst) = both.get_mut().split_at_mut(region);
        copy_once(src, dst, region);
        median((0..reps).map(|_| copy_once(src, dst, bytes)).collect())
    };
    let copy_ns_per_kib = copy(WORKING_SET / 2, plan.copy_bytes);
    let copy_dram_ns_per_kib = copy(64 * MIB, plan.copy_bytes);

    progress("mapping-table updates (1 Mi entries, random keys)");
    let mut table = vec![0u64; MAP_ENTRIES];
    map_vec_once(&mut table, MAP_ENTRIES, 1);
    let map_update_vec_ns = median(
        (0..reps).map(|r| map_vec_once(&mut table, plan.map_updates, 11 + r as u64)).collect(),
    );
    drop(table);
    let mut hmap: HashMap<u64, u64> = (0..MAP_ENTRIES as u64).map(|i| (i, i)).collect();
    let map_update_hashmap_ns = median(
        (0..reps).map(|r| map_hash_once(&mut hmap, plan.map_updates / 4, 13 + r as u64)).collect(),
    );
    drop(hmap);

    progress("lock hand-off (cache-line ping-pong between two threads)");
    handoff_once(plan.round_trips);
    let handoffs: Vec<f64> =
        (0..plan.handoff_repetitions).map(|_| handoff_once(plan.round_trips)).collect();
    let lock_handoff_min_ns = handoffs.iter().copied().fold(f64::INFINITY, f64::min);
    let lock_handoff_ns = median(handoffs);

    progress("lock hold (stripe-state critical section under a parking_lot mutex)");
    stripe_critical_section(plan.critical_sections / 10 + 1);
    let lock_hold_ns =
        median((0..reps).map(|_| stripe_critical_section(plan.critical_sections)).collect());

    progress("submit (real runtime, writes at QD32 into RAM, one reactor)");
    let cases = [
        SubmitCase { concat: false, latency_ns: 0, blocks: 1 },
        SubmitCase { concat: false, latency_ns: SUBMIT_LATENCY_NS, blocks: 1 },
        SubmitCase { concat: false, latency_ns: SUBMIT_LATENCY_NS, blocks: 2 },
        SubmitCase { concat: true, latency_ns: SUBMIT_LATENCY_NS, blocks: 1 },
    ];
    let mut samples = vec![Vec::new(); cases.len()];
    for r in 0..reps {
        // Interleaved, so drift in the machine's state affects every case alike.
        for (case, v) in cases.iter().zip(samples.iter_mut()) {
            v.push(submit_once(*case, plan.requests, 100 + r as u64)?);
        }
    }
    let mut medians = samples.into_iter().map(median);
    let mut next = || medians.next().expect("one median per case");
    let (submit_sync_4k_ns, submit_4k_ns, submit_8k_ns, concat_4k_ns) =
        (next(), next(), next(), next());

    let mut cal = Calibration {
        quick,
        repetitions: reps,
        handoff_repetitions: plan.handoff_repetitions,
        parity_kernel,
        parity_ns_per_kib,
        copy_ns_per_kib,
        copy_dram_ns_per_kib,
        map_update_vec_ns,
        map_update_hashmap_ns,
        lock_handoff_ns,
        lock_handoff_min_ns,
        lock_hold_ns,
        submit_sync_4k_ns,
        submit_4k_ns,
        submit_8k_ns,
        concat_4k_ns,
        notes: Vec::new(),
    };
    if cal.request_ns() < 1.0 {
        cal.notes.push(format!(
            "the user request_ns did not resolve above noise (2 x {:.1} - {:.1} ns); reported \
             as 1",
            cal.submit_4k_ns, cal.submit_8k_ns
        ));
    }
    if cal.member_io_ns() < 1.0 {
        cal.notes.push(format!(
            "the user member_io_ns did not resolve above noise (concat {:.1} ns - RAM {:.1} ns \
             per request); reported as 1",
            cal.concat_4k_ns, cal.submit_4k_ns
        ));
    }
    Ok(cal)
}

/// A measured time as a cost-table integer: rounded, at least 1 ns (a cost the model charges
/// is never free, and 0 would mean "not modelled").
fn ns(v: f64) -> u64 {
    (v.round() as u64).max(1)
}

/// A per-KiB figure as the table keeps it: three decimals, never zero.
fn per_kib(v: f64) -> f64 {
    ((v * 1000.0).round() / 1000.0).max(0.001)
}

impl Calibration {
    /// The 4+1 parity figure, the profiles' `parity_ns_per_kib`.
    pub fn parity_4p1_ns_per_kib(&self) -> f64 {
        self.parity_ns_per_kib.iter().find(|p| (p.0, p.1) == (4, 1)).map_or(0.0, |p| p.2)
    }

    /// The RAM device's work for 4 KiB of payload (copy, block look-up): what an 8 KiB
    /// request costs more than a 4 KiB one. A real SSD moves the payload by DMA, so this is
    /// not host cost of the submit path.
    pub fn payload_4k_ns(&self) -> f64 {
        self.submit_8k_ns - self.submit_4k_ns
    }

    /// The per-request cost net of the payload: the intercept of the cost against request
    /// size, 4 KiB cost minus the 4 KiB payload's share = 2 x c(4 KiB) - c(8 KiB).
    pub fn request_ns(&self) -> f64 {
        self.submit_4k_ns - self.payload_4k_ns()
    }

    /// One engine hop: 4 KiB through `concat` over RAM minus the RAM device alone (the payload
    /// work is the same in both and cancels).
    pub fn member_io_ns(&self) -> f64 {
        self.concat_4k_ns - self.submit_4k_ns
    }

    /// The kernel profile with this machine's measured figures (request, member I/O and
    /// synchronisation costs stay derived from the paper).
    pub fn kernel(&self) -> HostCosts {
        HostCosts {
            request_ns: flashrig_runtime::cost::KERNEL_REQUEST_NS,
            member_io_ns: flashrig_runtime::cost::KERNEL_MEMBER_IO_NS,
            sync_ns_by_threads: flashrig_runtime::cost::KERNEL_SYNC_NS.to_vec(),
            ..self.measured_common()
        }
    }

    /// The user-space profile, every figure measured.
    pub fn user(&self) -> HostCosts {
        HostCosts {
            request_ns: ns(self.request_ns()),
            member_io_ns: ns(self.member_io_ns()),
            ..self.measured_common()
        }
    }

    fn measured_common(&self) -> HostCosts {
        HostCosts {
            request_ns: 0,
            member_io_ns: 0,
            parity_ns_per_kib: per_kib(self.parity_4p1_ns_per_kib()),
            copy_ns_per_kib: per_kib(self.copy_ns_per_kib),
            map_update_ns: ns(self.map_update_vec_ns),
            lock_handoff_ns: ns(self.lock_handoff_ns),
            lock_hold_ns: ns(self.lock_hold_ns),
            sync_ns_by_threads: Vec::new(),
        }
    }

    /// The human summary, one line per figure.
    pub fn summary(&self) -> Vec<String> {
        let mut l = Vec::new();
        l.push(format!(
            "{} run, median of {} repetitions each",
            if self.quick { "quick" } else { "full" },
            self.repetitions
        ));
        for (k, m, v) in &self.parity_ns_per_kib {
            l.push(format!(
                "parity {k}+{m}, 64 KiB chunks ({}): {v:.3} ns per KiB of data = {:.2} GB/s{}",
                self.parity_kernel,
                1024.0 / v,
                if (*k, *m) == (4, 1) { "   <- parity_ns_per_kib" } else { "" }
            ));
        }
        l.push(format!(
            "copy, 64 KiB over 16 MiB (> L2): {:.3} ns per KiB = {:.2} GB/s   <- copy_ns_per_kib",
            self.copy_ns_per_kib,
            1024.0 / self.copy_ns_per_kib
        ));
        l.push(format!(
            "copy, 64 KiB over 128 MiB (> L3): {:.3} ns per KiB = {:.2} GB/s",
            self.copy_dram_ns_per_kib,
            1024.0 / self.copy_dram_ns_per_kib
        ));
        l.push(format!(
            "mapping update, Vec<u64> of 1 Mi entries, random: {:.1} ns   <- map_update_ns",
            self.map_update_vec_ns
        ));
        l.push(format!(
            "mapping update, HashMap<u64, u64> of 1 Mi entries, random: {:.1} ns",
            self.map_update_hashmap_ns
        ));
        l.push(format!(
            "cache-line hand-off between two threads (wall clock, median of {}): {:.1} ns \
             (fastest repetition {:.1} ns)   <- lock_handoff_ns",
            self.handoff_repetitions, self.lock_handoff_ns, self.lock_handoff_min_ns
        ));
        l.push(format!(
            "stripe-state critical section under a mutex, uncontended: {:.1} ns   <- lock_hold_ns",
            self.lock_hold_ns
        ));
        l.push(format!(
            "writes at QD32 from one real reactor into RAM, ns per request: 4 KiB completing at \
             once {:.1}; completing after 1 us: 4 KiB {:.1}, 8 KiB {:.1}; 4 KiB through a \
             one-member concat {:.1}",
            self.submit_sync_4k_ns, self.submit_4k_ns, self.submit_8k_ns, self.concat_4k_ns
        ));
        l.push(format!(
            "per-request cost net of the RAM device's 4 KiB payload work ({:.1} ns): 2 x {:.1} - \
             {:.1} = {:.1} ns   <- user request_ns",
            self.payload_4k_ns(),
            self.submit_4k_ns,
            self.submit_8k_ns,
            self.request_ns()
        ));
        l.push(format!(
            "one engine hop (concat - RAM at 4 KiB): {:.1} ns   <- user member_io_ns",
            self.member_io_ns()
        ));
        for n in &self.notes {
            l.push(format!("note: {n}"));
        }
        l
    }

    /// The output: a header and the summary as comments, then the tables.
    pub fn to_toml(&self, header: &[String]) -> String {
        let mut s = String::new();
        for h in header.iter().chain(self.summary().iter()) {
            s.push_str(&format!("# {h}\n"));
        }
        s.push('\n');
        let mut host = toml::Table::new();
        host.insert("kernel".into(), toml::Value::try_from(self.kernel()).expect("serialises"));
        host.insert("user".into(), toml::Value::try_from(self.user()).expect("serialises"));
        let mut cal = toml::Table::new();
        for (k, m, v) in &self.parity_ns_per_kib {
            cal.insert(format!("parity_{k}p{m}_ns_per_kib"), per_kib(*v).into());
        }
        let figures = [
            ("copy_ns_per_kib", per_kib(self.copy_ns_per_kib)),
            ("copy_dram_ns_per_kib", per_kib(self.copy_dram_ns_per_kib)),
            ("map_update_vec_ns", round1(self.map_update_vec_ns)),
            ("map_update_hashmap_ns", round1(self.map_update_hashmap_ns)),
            ("lock_handoff_ns", round1(self.lock_handoff_ns)),
            ("lock_handoff_min_ns", round1(self.lock_handoff_min_ns)),
            ("lock_hold_ns", round1(self.lock_hold_ns)),
            ("submit_sync_4k_ns", round1(self.submit_sync_4k_ns)),
            ("submit_4k_ns", round1(self.submit_4k_ns)),
            ("submit_8k_ns", round1(self.submit_8k_ns)),
            ("concat_4k_ns", round1(self.concat_4k_ns)),
            ("payload_4k_ns", round1(self.payload_4k_ns())),
            ("request_ns", round1(self.request_ns()).max(1.0)),
            ("member_io_ns", round1(self.member_io_ns()).max(1.0)),
        ];
        for (name, v) in figures {
            cal.insert(name.into(), v.into());
        }
        cal.insert("repetitions".into(), (self.repetitions as i64).into());
        let mut top = toml::Table::new();
        top.insert("host".into(), host.into());
        top.insert("calibration".into(), cal.into());
        s.push_str(&toml::to_string(&top).expect("serialises"));
        s
    }
}

fn round1(v: f64) -> f64 {
    ((v * 10.0).round() / 10.0).max(0.1)
}

/// Today's date (UTC) as YYYY-MM-DD, from the system clock.
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Howard Hinnant's civil_from_days.
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The CPU's model name, from /proc/cpuinfo where there is one.
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// `flashrig calibrate [--quick] [-o FILE]`: measures, prints the TOML (summary in comments)
/// on stdout and, with `out`, writes it there too. Progress goes to stderr.
pub fn command(quick: bool, out: Option<&std::path::Path>) -> Result<(), Error> {
    // Open the output first, so a bad path is reported before a long run.
    let file = match out {
        Some(p) => Some(std::fs::File::create(p).map_err(|e| {
            Error::Input(format!("-o {}: cannot create the file: {e}", p.display()))
        })?),
        None => None,
    };
    let cal = measure(quick, |what| eprintln!("calibrate: {what}"))?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let header = vec![
        format!(
            "flashrig calibrate{} on {}, {threads} hardware threads, {} (UTC)",
            if quick { " --quick" } else { "" },
            cpu_name(),
            today()
        ),
        "[host.*] are flashrig_runtime::HostCosts profiles (docs/cost-model.md); the kernel \
         profile's request_ns and member_io_ns are derived from ScalaAFA Fig. 3a, not measured"
            .to_string(),
    ];
    let text = cal.to_toml(&header);
    print!("{text}");
    if let (Some(mut f), Some(p)) = (file, out) {
        use std::io::Write;
        f.write_all(text.as_bytes())
            .map_err(|e| Error::Io(format!("cannot write {}: {e}", p.display())))?;
    }
    Ok(())
}
