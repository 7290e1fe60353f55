//! Telling a slow member from its peers, so that reads can be served around it.
//!
//! Every engine with redundancy measures its members' reads and keeps a moving average per
//! member. A member whose average is above an absolute floor and more than `SLOW_FACTOR`
//! times the median of the others' is *slow* (a drive retrying reads, a failing link: issue
//! 17 asks for 100x). Reads of its blocks then go to another copy or are rebuilt from the
//! other members where redundancy allows, except one read in `SLOW_PROBE_EVERY`, which still
//! goes to it, so that its average follows it when it recovers.

use std::sync::atomic::{AtomicU64, Ordering};

/// A member whose average read latency exceeds this many times the median of the others' is
/// slow. Serving its reads elsewhere costs a read of another copy, or one read on each other
/// member in parallel plus decoding, so it wins from about 2x; 8x keeps ordinary queueing
/// differences between members from tipping a healthy member over.
pub const SLOW_FACTOR: u64 = 8;
/// ... and exceeds this absolute floor, so that members of RAM speed (latencies of a few
/// hundred ns, where a factor is noise) never count as slow.
pub const SLOW_FLOOR_NS: u64 = 20_000;
/// Every this many reads routed around a slow member, one still goes to it, to measure it.
pub const SLOW_PROBE_EVERY: u64 = 16;

/// The read latencies of an engine's members.
pub struct MemberLatency {
    /// Moving average per member (ns; 0: no read measured yet), weight 1/8.
    avg_ns: Vec<AtomicU64>,
    /// Reads that wanted a member while it was slow (for the probes).
    slow_reads: Vec<AtomicU64>,
}

impl MemberLatency {
    pub fn new(members: usize) -> Self {
        MemberLatency {
            avg_ns: (0..members).map(|_| AtomicU64::new(0)).collect(),
            slow_reads: (0..members).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The runtime's clock now, when there is a runtime (the start of a timed read).
    pub fn start() -> Option<u64> {
        flashrig_runtime::in_runtime().then(flashrig_runtime::now_ns)
    }

    /// Records a read of member `i` that started at `start` (from [`MemberLatency::start`]).
    pub fn note(&self, i: usize, start: Option<u64>) {
        let Some(t) = start else { return };
        let latency_ns = flashrig_runtime::now_ns().saturating_sub(t);
        let _ = self.avg_ns[i].fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
            Some(if old == 0 { latency_ns.max(1) } else { old - old / 8 + latency_ns / 8 })
        });
    }

    /// Whether member `i` is slow (see the module's comment).
    pub fn is_slow(&self, i: usize) -> bool {
        let mine = self.avg_ns[i].load(Ordering::Acquire);
        if mine < SLOW_FLOOR_NS {
            return false;
        }
        let mut others: Vec<u64> = (0..self.avg_ns.len())
            .filter(|&j| j != i)
            .map(|j| self.avg_ns[j].load(Ordering::Acquire))
            .filter(|&l| l > 0)
            .collect();
        if others.is_empty() {
            return false;
        }
        others.sort_unstable();
        mine > SLOW_FACTOR.saturating_mul(others[others.len() / 2])
    }

    /// Whether a read that wants member `i` should go elsewhere: `i` is slow and this is not
    /// one of its probes. The caller checks that redundancy allows it.
    pub fn avoid(&self, i: usize) -> bool {
        self.is_slow(i)
            && !self.slow_reads[i].fetch_add(1, Ordering::Relaxed).is_multiple_of(SLOW_PROBE_EVERY)
    }
}
