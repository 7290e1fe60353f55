//! PC-LRU, WAFLASH §3.1: Partial page and Congestion-aware LRU.
//!
//! The buffer is an LRU stack. When a victim is needed:
//!
//! - the bottom entry is a full page, or the chips are idle: the bottom goes, as in LRU;
//! - the bottom entry is a partial page and the chips are not idle ("chip congestion"): the
//!   nearest *full* page above the bottom goes instead, and every partial page passed over is
//!   re-inserted at the position `P_insert`, ACD entries above the bottom, so it stays longer
//!   and may become full before it is written back (a partial page costs the flash a
//!   read-modify-write; a full page does not).
//!
//! "The chips are not idle" is read from the NAND timelines at the time of the command that
//! needs the space: the plane the next write-back programs is busy, or the plane holding the
//! bottom partial page's old version is (its additional read would queue). The paper detects
//! congestion "when the chip is not idle" without saying which chip; these are the two chips
//! writing the bottom page back would use (docs/waflash.md).
//!
//! The *page conversion distance* (PCD) of a partial page X is the number of distinct pages
//! referenced between two consecutive references to X. It is measured at each overwrite of a
//! partial page as X's stack distance among the buffered pages: how many of them were written
//! since X last was (pages written and already evicted in between are not in the buffer, so
//! they are not counted: the paper tracks PCDs "in write buffers"). ACD, the average of every
//! PCD tracked, is updated after each such overwrite. The stack distance comes from a Fenwick
//! tree over reference stamps, so a sample costs O(log n) rather than a walk of the stack;
//! stamps are renumbered densely when they run out (amortised O(log n) per reference).
//!
//! Batch destaging of small partial pages of one region for compaction (§3.3) belongs with
//! the compacting FTL and is not part of this policy yet.

use super::list::{LruList, NIL};
use super::{BufEntry, ChipView, PolicyStats, WriteBuffer};

/// Reference stamps of the buffered pages in a Fenwick tree: how many pages were referenced
/// after a given one is a prefix sum.
struct RefClock {
    /// 1-based Fenwick tree over stamps `1..=size`.
    tree: Vec<i32>,
    /// The last stamp handed out.
    now: u32,
    live: u32,
}

impl RefClock {
    fn new(size: u32) -> RefClock {
        RefClock { tree: vec![0; size as usize + 1], now: 0, live: 0 }
    }

    fn size(&self) -> u32 {
        (self.tree.len() - 1) as u32
    }

    fn add(&mut self, stamp: u32, delta: i32) {
        let mut i = stamp as usize;
        while i < self.tree.len() {
            self.tree[i] += delta;
            i += i & i.wrapping_neg();
        }
    }

    /// Stamps at or below `stamp`.
    fn prefix(&self, stamp: u32) -> u32 {
        let mut i = stamp as usize;
        let mut sum = 0i32;
        while i > 0 {
            sum += self.tree[i];
            i &= i - 1;
        }
        sum as u32
    }

    /// Live stamps newer than `stamp`.
    fn newer_than(&self, stamp: u32) -> u32 {
        self.live - self.prefix(stamp)
    }

    /// Whether a new stamp can be handed out without renumbering.
    fn has_room(&self) -> bool {
        self.now < self.size()
    }

    fn stamp(&mut self) -> u32 {
        self.now += 1;
        self.add(self.now, 1);
        self.live += 1;
        self.now
    }

    fn forget(&mut self, stamp: u32) {
        if stamp != 0 {
            self.add(stamp, -1);
            self.live -= 1;
        }
    }

    /// Rebuilds the tree with `count` live stamps numbered `1..=count`.
    fn reset_dense(&mut self, count: u32) {
        self.tree.iter_mut().for_each(|x| *x = 0);
        for s in 1..=count {
            self.add(s, 1);
        }
        self.now = count;
        self.live = count;
    }
}

pub struct PcLru {
    list: LruList,
    /// The bitmap of a full page.
    full: u128,
    /// Per node slot: the stamp of the entry's last write reference (0: slot unused).
    stamp: Vec<u32>,
    /// Per node slot: the entry is a full page (kept beside the links, so the scan for the
    /// nearest full page never touches the entries).
    full_at: Vec<bool>,
    clock: RefClock,
    /// Full pages in the buffer (no scan for one when there is none).
    full_pages: usize,
    pcd_sum: u64,
    stats: PolicyStats,
}

impl PcLru {
    /// A PC-LRU buffer of `capacity` entries whose full pages have bitmap `full`.
    pub fn new(capacity: usize, full: u128) -> PcLru {
        // Four stamps per entry between renumberings: a renumbering sorts the buffer, at most
        // once per 3 x capacity references.
        let size = (4 * capacity.max(256)).next_power_of_two() as u32;
        PcLru {
            list: LruList::new(capacity),
            full,
            stamp: Vec::with_capacity(capacity),
            full_at: Vec::with_capacity(capacity),
            clock: RefClock::new(size),
            full_pages: 0,
            pcd_sum: 0,
            stats: PolicyStats::default(),
        }
    }

    fn is_full(&self, i: u32) -> bool {
        self.full_at[i as usize]
    }

    /// A fresh reference stamp for node `i`.
    fn refer(&mut self, i: u32) {
        if !self.clock.has_room() {
            self.renumber();
        }
        let old = self.stamp[i as usize];
        self.clock.forget(old);
        self.stamp[i as usize] = self.clock.stamp();
    }

    /// Renumbers the live stamps densely, keeping their order.
    fn renumber(&mut self) {
        let mut live: Vec<(u32, u32)> = self
            .list
            .slots_from_tail()
            .into_iter()
            .map(|i| (self.stamp[i as usize], i))
            .filter(|&(s, _)| s != 0)
            .collect();
        live.sort_unstable();
        for (n, &(_, i)) in live.iter().enumerate() {
            self.stamp[i as usize] = n as u32 + 1;
        }
        self.clock.reset_dense(live.len() as u32);
    }

    fn take(&mut self, i: u32) -> BufEntry {
        self.clock.forget(self.stamp[i as usize]);
        self.stamp[i as usize] = 0;
        if self.is_full(i) {
            self.full_pages -= 1;
            self.full_at[i as usize] = false;
        }
        self.list.take(i)
    }

    /// ACD in stack positions.
    fn acd_positions(&self) -> usize {
        self.stats.acd.round() as usize
    }

    /// Puts the cut run of passed pages `top..=bottom` back with ACD entries below it,
    /// keeping its order; on top when the stack is shorter than that.
    fn reinsert(&mut self, top: u32, bottom: u32) {
        let acd = self.acd_positions();
        if acd == 0 {
            self.list.splice_above(top, bottom, NIL);
            return;
        }
        let mut at = self.list.tail;
        for _ in 1..acd {
            if at == NIL {
                break;
            }
            at = self.list.prev(at);
        }
        if at == NIL {
            self.list.splice_on_top(top, bottom);
        } else {
            self.list.splice_above(top, bottom, at);
        }
    }
}

impl WriteBuffer for PcLru {
    stack_lookups!();

    fn insert(&mut self, entry: BufEntry) {
        let full = entry.present == self.full;
        let i = self.list.insert(entry);
        if self.stamp.len() < self.list.slots() {
            self.stamp.resize(self.list.slots(), 0);
            self.full_at.resize(self.list.slots(), false);
        }
        if full {
            self.full_pages += 1;
            self.full_at[i as usize] = true;
        }
        self.refer(i);
    }

    fn remove(&mut self, lpn: u32) -> Option<BufEntry> {
        let i = self.list.slot(lpn)?;
        Some(self.take(i))
    }

    fn wrote(&mut self, lpn: u32, was_partial: bool) {
        let Some(i) = self.list.slot(lpn) else { return };
        if was_partial {
            let pcd = self.clock.newer_than(self.stamp[i as usize]);
            self.pcd_sum += pcd as u64;
            self.stats.pcd_samples += 1;
            self.stats.acd = self.pcd_sum as f64 / self.stats.pcd_samples as f64;
            if self.list.entry(i).present == self.full {
                self.full_pages += 1;
                self.full_at[i as usize] = true;
            }
        }
        self.refer(i);
    }

    fn pop_victim(&mut self, chips: &dyn ChipView) -> Option<BufEntry> {
        let tail = self.list.tail;
        if tail == NIL {
            return None;
        }
        if self.is_full(tail) || self.full_pages == 0 {
            return Some(self.take(tail));
        }
        let congested =
            chips.program_would_wait() || chips.read_would_wait(self.list.entry(tail).lpn);
        if !congested {
            return Some(self.take(tail));
        }
        // The nearest full page above the bottom; the partial pages passed over (a run from
        // the bottom up to it) are cut out and re-inserted ACD entries above the bottom.
        let mut passed = 0;
        let (mut i, mut top) = (tail, tail);
        while !self.is_full(i) {
            passed += 1;
            top = i;
            i = self.list.prev(i);
            debug_assert!(i != NIL, "full_pages > 0 promises a full page");
        }
        let bottom = self.list.cut_bottom(top);
        let victim = self.take(i);
        self.reinsert(top, bottom);
        self.stats.delayed_partial += passed;
        Some(victim)
    }

    fn stats(&self) -> PolicyStats {
        self.stats.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{e, order, Chips};
    use super::*;

    const FULL: u128 = 0b1111;

    fn idle() -> Chips {
        Chips { busy_reads: vec![], program_busy: false }
    }

    fn congested() -> Chips {
        Chips { busy_reads: vec![], program_busy: true }
    }

    /// Figure 4: full pages 02, 12, 09, 23, 05 and partial pages 17, 20 at the bottom.
    fn figure4() -> PcLru {
        let mut b = PcLru::new(16, FULL);
        for (lpn, present) in [(20, 0b0011), (17, 0b0110), (5, FULL), (23, FULL), (9, FULL)] {
            b.insert(e(lpn, present));
        }
        b.insert(e(12, FULL));
        b.insert(e(2, FULL));
        b
    }

    #[test]
    fn idle_chips_evict_the_bottom_even_when_partial() {
        let mut b = figure4();
        assert_eq!(b.pop_victim(&idle()).unwrap().lpn, 20);
        assert_eq!(b.pop_victim(&idle()).unwrap().lpn, 17);
        assert_eq!(b.stats().delayed_partial, 0);
    }

    #[test]
    fn congestion_evicts_the_nearest_full_page_and_keeps_the_partial_ones() {
        let mut b = figure4();
        assert_eq!(b.pop_victim(&congested()).unwrap().lpn, 5, "Figure 4: LPN 05 is replaced");
        assert_eq!(b.stats().delayed_partial, 2);
        // No PCD measured yet: ACD 0 puts the passed pages back at the bottom, in order.
        assert_eq!(order(&mut b), vec![2, 12, 9, 23, 17, 20]);
    }

    #[test]
    fn a_busy_plane_under_the_old_version_is_congestion_too() {
        let mut b = figure4();
        let chips = Chips { busy_reads: vec![20], program_busy: false };
        assert_eq!(b.pop_victim(&chips).unwrap().lpn, 5);
        let chips = Chips { busy_reads: vec![17], program_busy: false };
        assert_eq!(b.pop_victim(&chips).unwrap().lpn, 20, "the bottom's own read is idle");
    }

    #[test]
    fn full_pages_at_the_bottom_go_directly_and_all_partial_buffers_fall_back_to_lru() {
        let mut b = PcLru::new(8, FULL);
        b.insert(e(1, FULL));
        b.insert(e(2, 0b1));
        assert_eq!(b.pop_victim(&congested()).unwrap().lpn, 1);
        assert_eq!(b.pop_victim(&congested()).unwrap().lpn, 2, "no full page to prefer");
        assert!(b.pop_victim(&congested()).is_none());
    }

    #[test]
    fn pcd_is_the_stack_distance_of_an_overwritten_partial_page_and_acd_its_mean() {
        let mut b = PcLru::new(16, FULL);
        b.insert(e(1, 0b0001));
        for l in 10..13 {
            b.insert(e(l, FULL));
        }
        // Three distinct pages written since page 1: PCD 3.
        let x = b.touch(1).unwrap();
        x.present |= 0b0010;
        b.wrote(1, true);
        assert_eq!(b.stats().pcd_samples, 1);
        assert_eq!(b.stats().acd, 3.0);
        // Rewriting a page already counted once does not count it twice: one distinct page
        // (12) between, written twice.
        b.touch(12);
        b.wrote(12, false);
        b.touch(12);
        b.wrote(12, false);
        b.touch(1);
        b.wrote(1, true);
        assert_eq!(b.stats().pcd_samples, 2);
        assert_eq!(b.stats().acd, 2.0, "mean of 3 and 1");
        // Overwrites of full pages are not samples.
        assert_eq!(b.stats().pcd_samples, 2);
    }

    #[test]
    fn passed_partial_pages_go_back_acd_entries_above_the_bottom() {
        let mut b = PcLru::new(32, FULL);
        // Learn an ACD of 2: page 99 partial, two pages written, then 99 again.
        b.insert(e(99, 0b1));
        b.insert(e(98, FULL));
        b.insert(e(97, FULL));
        b.touch(99).unwrap().present |= 0b10;
        b.wrote(99, true);
        assert_eq!(b.stats().acd, 2.0);
        b.remove(99);
        b.remove(98);
        b.remove(97);
        // Stack, top to bottom: 5 4 3(full) 2(partial) 1(partial).
        b.insert(e(1, 0b1));
        b.insert(e(2, 0b1));
        b.insert(e(3, FULL));
        b.insert(e(4, FULL));
        b.insert(e(5, FULL));
        assert_eq!(b.pop_victim(&congested()).unwrap().lpn, 3);
        // Left: 5 4; the passed pages 2, 1 go back with two entries (4, 5) below them.
        assert_eq!(order(&mut b), vec![2, 1, 5, 4]);
    }

    #[test]
    fn a_partial_page_that_fills_up_counts_as_full() {
        let mut b = PcLru::new(8, FULL);
        b.insert(e(1, 0b0011));
        b.insert(e(2, 0b0001));
        b.touch(1).unwrap().present = FULL;
        b.wrote(1, true);
        // Stack: 1 (now full) on top of 2 (partial): congestion skips 2 for 1.
        assert_eq!(b.pop_victim(&congested()).unwrap().lpn, 1);
        assert_eq!(b.pop_victim(&congested()).unwrap().lpn, 2);
    }

    #[test]
    fn stamps_renumber_without_changing_distances() {
        let mut b = PcLru::new(4, FULL);
        b.insert(e(1, 0b1));
        b.insert(e(2, FULL));
        // Far more references than stamps (1,024 for a buffer this small).
        for _ in 0..5_000 {
            b.touch(2);
            b.wrote(2, false);
        }
        b.touch(1);
        b.wrote(1, true);
        assert_eq!(b.stats().acd, 1.0, "one distinct page between the references to 1");
    }
}
