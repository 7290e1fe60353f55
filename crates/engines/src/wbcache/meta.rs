//! The cache's metadata, kept in DRAM as Open-CAS keeps its collision table and LRU lists in
//! memory: which core lines are mapped to which cache lines, the per-sector valid and dirty
//! bits of each, the eviction LRU, the cleaner's ALRU list (dirty lines by the time of their
//! last write) and the sequential-cutoff streams. Everything here is synchronous and decided
//! under one short mutex; the engine does the device I/O around the decisions.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One mapped cache line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line {
    /// The cache line (slot) on the cache device that holds it.
    pub slot: u64,
    /// Bit `i`: sector `i` of the line is in the cache (clean or dirty).
    pub valid: u64,
    /// Bit `i`: sector `i` is newer in the cache than on the core device.
    pub dirty: u64,
    /// Position in the eviction LRU (larger is more recent).
    lru_tick: u64,
    /// When the line was last written dirty (the ALRU timestamp), if it is dirty.
    dirty_since_ns: Option<u64>,
}

/// What OCF's sequential-cutoff policies decide (`ocf_seq_cutoff_policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeqCutoffPolicy {
    /// Sequential streams above the threshold always bypass the cache.
    Always,
    /// Only while the cache has no free line (OCF's default).
    Full,
    /// Never.
    Never,
}

/// When a stream is cut off: the policy, the threshold, and (for policy `full`) how few free
/// lines count as full.
#[derive(Clone, Copy, Debug)]
pub struct CutoffRule {
    pub policy: SeqCutoffPolicy,
    pub threshold_bytes: u64,
    pub full_below_lines: u64,
}

/// One detected stream (OCF's `ocf_seq_cutoff_stream`).
#[derive(Clone, Copy, Debug)]
struct Stream {
    /// The block after the stream's last request.
    next_lba: u64,
    bytes: u64,
    write: bool,
    lru_tick: u64,
}

pub struct Meta {
    lines: HashMap<u64, Line>,
    lru: BTreeMap<u64, u64>,
    /// Dirty lines by (timestamp, core line), oldest first.
    alru: BTreeSet<(u64, u64)>,
    free_slots: Vec<u64>,
    tick: u64,
    streams: Vec<Stream>,
    /// When the cleaner last found nothing to clean (OCF's `cleaning_thread_access`).
    pub cleaner_access_ns: u64,
    /// When the last request arrived (OCF's `last_access_ms`).
    pub last_io_ns: u64,
}

/// Sector mask of `count` sectors from `first`.
pub fn mask(first: u64, count: u64) -> u64 {
    debug_assert!(first + count <= 64);
    if count == 64 {
        u64::MAX
    } else {
        ((1u64 << count) - 1) << first
    }
}

/// Maximal runs of set bits in `bits` (of a `len`-sector line), as (first sector, sectors).
pub fn runs(bits: u64, len: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < len {
        if bits & (1 << i) != 0 {
            let start = i;
            while i < len && bits & (1 << i) != 0 {
                i += 1;
            }
            out.push((start, i - start));
        } else {
            i += 1;
        }
    }
    out
}

impl Meta {
    pub fn new(cache_lines: u64, streams: usize) -> Self {
        let stream = Stream { next_lba: u64::MAX, bytes: 0, write: false, lru_tick: 0 };
        Meta {
            lines: HashMap::new(),
            lru: BTreeMap::new(),
            alru: BTreeSet::new(),
            free_slots: (0..cache_lines).rev().collect(),
            tick: 0,
            streams: vec![stream; streams],
            cleaner_access_ns: 0,
            last_io_ns: 0,
        }
    }

    pub fn get(&self, line: u64) -> Option<Line> {
        self.lines.get(&line).copied()
    }

    pub fn free_lines(&self) -> usize {
        self.free_slots.len()
    }

    pub fn mapped_lines(&self) -> usize {
        self.lines.len()
    }

    pub fn dirty_lines(&self) -> usize {
        self.alru.len()
    }

    /// Moves `line` to the head of the eviction LRU.
    pub fn touch(&mut self, line: u64) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(l) = self.lines.get_mut(&line) {
            self.lru.remove(&l.lru_tick);
            l.lru_tick = tick;
            self.lru.insert(tick, line);
        }
    }

    /// Maps `line` to a free cache line, if there is one.
    pub fn map(&mut self, line: u64) -> Option<u64> {
        if let Some(l) = self.lines.get(&line) {
            return Some(l.slot);
        }
        let slot = self.free_slots.pop()?;
        let l = Line { slot, valid: 0, dirty: 0, lru_tick: 0, dirty_since_ns: None };
        self.lines.insert(line, l);
        self.touch(line);
        Some(slot)
    }

    /// Maps `line` to the cache line `slot` taken from an evicted line.
    pub fn map_to(&mut self, line: u64, slot: u64) {
        let l = Line { slot, valid: 0, dirty: 0, lru_tick: 0, dirty_since_ns: None };
        self.lines.insert(line, l);
        self.touch(line);
    }

    /// Core lines from the cold end of the LRU, for the evictor to try in order.
    pub fn lru_order(&self) -> impl Iterator<Item = u64> + '_ {
        self.lru.values().copied()
    }

    /// Dirty lines whose last write is older than `before_ns`, oldest first.
    pub fn stale(&self, before_ns: u64) -> impl Iterator<Item = u64> + '_ {
        self.alru.iter().take_while(move |(ts, _)| *ts < before_ns).map(|&(_, line)| line)
    }

    /// Removes `line` from the cache; returns its cache line to reuse.
    pub fn unmap(&mut self, line: u64) -> Option<u64> {
        let l = self.lines.remove(&line)?;
        self.lru.remove(&l.lru_tick);
        if let Some(ts) = l.dirty_since_ns {
            self.alru.remove(&(ts, line));
        }
        Some(l.slot)
    }

    /// Frees `line`'s cache line for anyone (after the line lost its last valid sector).
    pub fn release(&mut self, line: u64) {
        if let Some(slot) = self.unmap(line) {
            self.free_slots.push(slot);
        }
    }

    /// Records sectors `bits` written into the cache: valid and dirty, the line hot for the
    /// ALRU as of `now_ns`.
    pub fn set_dirty(&mut self, line: u64, bits: u64, now_ns: u64) {
        let Some(l) = self.lines.get_mut(&line) else { return };
        l.valid |= bits;
        l.dirty |= bits;
        if let Some(ts) = l.dirty_since_ns.replace(now_ns) {
            self.alru.remove(&(ts, line));
        }
        self.alru.insert((now_ns, line));
    }

    /// Records sectors `bits` promoted from the core (valid and clean).
    pub fn set_clean(&mut self, line: u64, bits: u64) {
        if let Some(l) = self.lines.get_mut(&line) {
            l.valid |= bits & !l.dirty;
        }
    }

    /// Marks sectors `bits` as clean (they were written back to the core).
    pub fn cleaned(&mut self, line: u64, bits: u64) {
        let Some(l) = self.lines.get_mut(&line) else { return };
        l.dirty &= !bits;
        if l.dirty == 0 {
            if let Some(ts) = l.dirty_since_ns.take() {
                self.alru.remove(&(ts, line));
            }
        }
    }

    /// Drops sectors `bits` from the cache (overwritten on the core, or trimmed). A line left
    /// with no valid sector is freed.
    pub fn invalidate(&mut self, line: u64, bits: u64) {
        let Some(l) = self.lines.get_mut(&line) else { return };
        l.valid &= !bits;
        l.dirty &= !bits;
        if l.valid == 0 {
            self.release(line);
        } else if l.dirty == 0 {
            if let Some(ts) = l.dirty_since_ns.take() {
                self.alru.remove(&(ts, line));
            }
        }
    }

    /// OCF's sequential-cutoff check and update in one step: whether a request of `blocks`
    /// blocks (`bytes` bytes) at `lba` continues a stream that, with it, reaches
    /// `threshold_bytes`. Streams are matched on their next block and direction; an unmatched
    /// request replaces the least recently used stream. Policy `full` applies while at most
    /// `full_below_lines` lines are free (OCF's `ocf_seq_cutoff_is_on`: the free lines are at
    /// most a margin of 512 plus the request's lines).
    pub fn seq_cutoff(
        &mut self,
        lba: u64,
        blocks: u64,
        bytes: u64,
        write: bool,
        rule: CutoffRule,
    ) -> bool {
        let CutoffRule { policy, threshold_bytes, full_below_lines } = rule;
        self.tick += 1;
        let tick = self.tick;
        let total = match self.streams.iter_mut().find(|s| s.next_lba == lba && s.write == write) {
            Some(s) => {
                s.bytes += bytes;
                s.next_lba = lba + blocks;
                s.lru_tick = tick;
                s.bytes
            }
            None => {
                // A request that continues no stream starts one and is never cut off itself,
                // however large (OCF's `ocf_core_seq_cutoff_base_check` finds no stream).
                if let Some(s) = self.streams.iter_mut().min_by_key(|s| s.lru_tick) {
                    *s = Stream { next_lba: lba + blocks, bytes, write, lru_tick: tick };
                }
                return false;
            }
        };
        let on = match policy {
            SeqCutoffPolicy::Always => true,
            SeqCutoffPolicy::Full => (self.free_slots.len() as u64) <= full_below_lines,
            SeqCutoffPolicy::Never => false,
        };
        on && total >= threshold_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_masks() {
        assert_eq!(mask(2, 3), 0b11100);
        assert_eq!(mask(0, 64), u64::MAX);
        assert_eq!(runs(0b1011_0110, 8), vec![(1, 2), (4, 2), (7, 1)]);
        assert_eq!(runs(u64::MAX, 16), vec![(0, 16)]);
    }

    #[test]
    fn invalidating_the_last_sector_frees_the_line() {
        let mut m = Meta::new(2, 4);
        m.map(7).unwrap();
        m.set_dirty(7, 0b110, 5);
        assert_eq!(m.dirty_lines(), 1);
        m.invalidate(7, 0b010);
        assert_eq!(m.get(7).unwrap().dirty, 0b100);
        m.invalidate(7, 0b100);
        assert!(m.get(7).is_none());
        assert_eq!((m.free_lines(), m.dirty_lines()), (2, 0));
    }

    fn rule(policy: SeqCutoffPolicy, full_below_lines: u64) -> CutoffRule {
        CutoffRule { policy, threshold_bytes: 1000, full_below_lines }
    }

    #[test]
    fn a_stream_is_cut_off_once_it_reaches_the_threshold() {
        let mut m = Meta::new(1, 4);
        let p = SeqCutoffPolicy::Always;
        assert!(!m.seq_cutoff(0, 4, 400, true, rule(p, 0)));
        assert!(!m.seq_cutoff(4, 4, 400, true, rule(p, 0)));
        assert!(m.seq_cutoff(8, 4, 400, true, rule(p, 0)));
        // A read at the same place is another stream.
        assert!(!m.seq_cutoff(12, 4, 400, false, rule(p, 0)));
        // A request above the threshold that continues no stream is not cut off.
        assert!(!m.seq_cutoff(100, 40, 4000, true, rule(p, 0)));
        assert!(m.seq_cutoff(140, 1, 100, true, rule(p, 0)));
        // Policy `full` cuts off only while at most the margin of lines is free.
        assert!(!m.seq_cutoff(12, 4, 400, true, rule(SeqCutoffPolicy::Full, 0)));
        assert!(m.seq_cutoff(16, 4, 400, true, rule(SeqCutoffPolicy::Full, 1)));
        m.map(1).unwrap();
        assert!(m.seq_cutoff(20, 4, 400, true, rule(SeqCutoffPolicy::Full, 0)));
    }
}
