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
//! A congested choice costs a walk to `P_insert` (ACD entries); the walk to the nearest full
//! page starts above the partial pages already known to sit at the bottom ([`BottomRun`]), so
//! the pages passed over last time are not walked past again.
//!
//! With an FTL that compacts, a small partial victim takes with it other small partial pages
//! of its region that fit one compacted page (§3.3's batch destaging, [`BatchDestage`]).

use std::collections::{BTreeSet, VecDeque};
use std::ops::Bound;

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

/// WAFLASH §3.3's batch destaging: with a compacting FTL, a victim that is a small partial
/// page (at most half its blocks present) leaves with other small partial pages of its region,
/// so the FTL receives them in one write-back group and can pack them into one flash page.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchDestage {
    /// The compaction region in logical pages: only pages of one region are batched.
    pub region_pages: u32,
    /// Host block (sector) size.
    pub block_bytes: u32,
    /// Mapping unit size: what one compacted flash page holds.
    pub unit_bytes: u32,
}

/// The compacted page's identifier (§3.3: "its first two bytes").
const COMPACT_ID_BYTES: u32 = 2;
/// One ⟨LPN, offset, len⟩ triple of the compacted page's table: a 4-byte LPN and 1-byte
/// offset and length in blocks.
const COMPACT_TRIPLE_BYTES: u32 = 6;

impl BatchDestage {
    /// Bytes a page with `blocks` present takes in a compacted page: its data and its triple.
    fn cost_bytes(&self, blocks: u32) -> u32 {
        COMPACT_TRIPLE_BYTES + blocks * self.block_bytes
    }
}

/// The batch-destaging state of a PC-LRU buffer.
struct Batching {
    cfg: BatchDestage,
    /// Small partial pages in the buffer, by logical page (a region is a range).
    small: BTreeSet<u32>,
    /// Batch-mates chosen with the last victim, to be returned first by the next
    /// [`WriteBuffer::pop_victim`] calls; dropped when the host touches the buffer in between.
    queue: VecDeque<u32>,
    destaged: u64,
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
    run: BottomRun,
    pcd_sum: u64,
    stats: PolicyStats,
    batch: Option<Batching>,
}

/// A run of partial pages known to sit at the bottom of the stack, so a congested victim
/// choice starts its scan for the nearest full page above it instead of at the bottom: the
/// passed-over pages re-inserted ACD entries up are found again at the next choice, and
/// walking past them once more was most of PC-LRU's cost.
///
/// Invariant: the run is the bottom `len` nodes of the stack, all partial, `top` the highest;
/// a node is in it exactly when its mark lies in `lo..=hi`. Marks only grow, so a run is
/// forgotten in O(1) by moving `lo` past every mark handed out; a node leaving the run has
/// its mark cleared.
struct BottomRun {
    /// Per node slot: the epoch the node joined the run in (0: never, or left).
    mark: Vec<u32>,
    lo: u32,
    hi: u32,
    len: usize,
    top: u32,
}

impl BottomRun {
    fn new() -> BottomRun {
        BottomRun { mark: Vec::new(), lo: 1, hi: 0, len: 0, top: NIL }
    }

    fn contains(&self, i: u32) -> bool {
        (self.lo..=self.hi).contains(&self.mark[i as usize])
    }

    fn forget(&mut self) {
        self.lo = self.hi + 1;
        self.len = 0;
        self.top = NIL;
    }

    /// A fresh epoch for nodes joining the run; marks are cleared (and the run forgotten)
    /// before they could wrap around.
    fn next_epoch(&mut self) -> u32 {
        if self.hi >= u32::MAX - 2 {
            self.mark.iter_mut().for_each(|m| *m = 0);
            self.hi = 0;
            self.forget();
        }
        self.hi + 1
    }
}

impl PcLru {
    /// A PC-LRU buffer of `capacity` entries whose full pages have bitmap `full`; `batch`
    /// turns on §3.3's batch destaging (only with an FTL that compacts).
    pub fn new(capacity: usize, full: u128, batch: Option<BatchDestage>) -> PcLru {
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
            run: BottomRun::new(),
            pcd_sum: 0,
            stats: PolicyStats { batch_destaged: batch.map(|_| 0), ..PolicyStats::default() },
            batch: batch.map(|cfg| Batching {
                cfg,
                small: BTreeSet::new(),
                queue: VecDeque::new(),
                destaged: 0,
            }),
        }
    }

    fn is_full(&self, i: u32) -> bool {
        self.full_at[i as usize]
    }

    /// A partial page with at most half its blocks present: what §3.3 compacts.
    fn is_small(&self, present: u128) -> bool {
        present != self.full && present.count_ones() <= self.full.count_ones() / 2
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

    /// Node `i` is about to leave its place in the stack (taken or moved to the top): it
    /// leaves the bottom run too.
    fn leave_run(&mut self, i: u32) {
        if !self.run.contains(i) {
            return;
        }
        self.run.mark[i as usize] = 0;
        self.run.len -= 1;
        if self.run.len == 0 {
            self.run.forget();
        } else if self.run.top == i {
            self.run.top = self.list.next(i);
        }
    }

    /// The host used the buffer: a batch chosen before is stale.
    fn host_touched(&mut self) {
        if let Some(b) = &mut self.batch {
            b.queue.clear();
        }
    }

    fn take(&mut self, i: u32) -> BufEntry {
        self.leave_run(i);
        self.clock.forget(self.stamp[i as usize]);
        self.stamp[i as usize] = 0;
        if self.is_full(i) {
            self.full_pages -= 1;
            self.full_at[i as usize] = false;
        }
        let e = self.list.take(i);
        // Pages only gain blocks: a page small now has been small since it came in and is
        // indexed, and any other is not (so no search for it).
        if self.is_small(e.present) {
            if let Some(b) = &mut self.batch {
                b.small.remove(&e.lpn);
            }
        }
        e
    }

    /// ACD in stack positions.
    fn acd_positions(&self) -> usize {
        self.stats.acd.round() as usize
    }

    /// The congested choice: the nearest full page above the bottom goes, and the partial
    /// pages passed over (a run from the bottom up to it) are cut out and re-inserted ACD
    /// entries above the bottom, keeping their order.
    fn pass_partial_pages(&mut self) -> Option<BufEntry> {
        // The scan starts above the known bottom run, all of which is passed over; the pages
        // it passes besides get a new epoch, so the whole passed run can become the bottom
        // run again after the re-insertion.
        let passed_epoch = self.run.next_epoch();
        let (mut passed, mut top, mut i) = if self.run.len > 0 {
            (self.run.len, self.run.top, self.list.prev(self.run.top))
        } else {
            (0, NIL, self.list.tail)
        };
        while i != NIL && !self.is_full(i) {
            self.run.mark[i as usize] = passed_epoch;
            passed += 1;
            top = i;
            i = self.list.prev(i);
        }
        if i == NIL || top == NIL {
            // Unreachable while `full_pages` is right (a full page exists, and the bottom is
            // partial); the bottom then goes, as with idle chips.
            self.run.hi = passed_epoch;
            self.run.forget();
            return Some(self.take(self.list.tail));
        }
        let passed_lo = self.run.lo;
        self.run.hi = passed_epoch;
        self.run.forget();
        let bottom = self.list.cut_bottom(top);
        let victim = self.take(i);
        self.stats.delayed_partial += passed as u64;
        // Where the passed run goes back: above the node ACD positions up from the bottom.
        // The walk there also learns the partial pages at the new bottom.
        let acd = self.acd_positions();
        if acd == 0 {
            self.list.splice_above(top, bottom, NIL);
            // The passed run is the whole bottom run now.
            self.run.lo = passed_lo;
            self.run.len = passed;
            self.run.top = top;
            return Some(victim);
        }
        let below_epoch = passed_epoch + 1;
        let (mut below, mut below_top, mut all_partial) = (0, NIL, true);
        let mut at = self.list.tail;
        let mut seen = 0;
        while at != NIL {
            seen += 1;
            if all_partial {
                if self.is_full(at) {
                    all_partial = false;
                } else {
                    self.run.mark[at as usize] = below_epoch;
                    below += 1;
                    below_top = at;
                }
            }
            if seen == acd {
                break;
            }
            at = self.list.prev(at);
        }
        if at == NIL {
            self.list.splice_on_top(top, bottom);
        } else {
            self.list.splice_above(top, bottom, at);
        }
        self.run.hi = below_epoch;
        if all_partial {
            // Everything below the passed run is partial: the run and it form the bottom run.
            self.run.lo = passed_lo;
            self.run.len = below + passed;
            self.run.top = top;
        } else if below > 0 {
            self.run.lo = below_epoch;
            self.run.len = below;
            self.run.top = below_top;
        } else {
            self.run.forget();
        }
        Some(victim)
    }

    /// Queues the batch-mates of `victim`, a page just chosen: when it is a small partial
    /// page, the small partial pages of its region nearest to it in logical address, as many
    /// as fit one compacted page with it (their data, a triple each and the identifier).
    fn choose_batch(&mut self, victim: &BufEntry) {
        if !self.is_small(victim.present) {
            return;
        }
        let Some(b) = &mut self.batch else { return };
        let cfg = b.cfg;
        let Some(mut room) = cfg
            .unit_bytes
            .checked_sub(COMPACT_ID_BYTES + cfg.cost_bytes(victim.present.count_ones()))
        else {
            return;
        };
        let region_pages = cfg.region_pages.max(1);
        let first = victim.lpn - victim.lpn % region_pages;
        let last = first.saturating_add(region_pages - 1);
        let above = (Bound::Excluded(victim.lpn), Bound::Included(last));
        let mut up = b.small.range(above).copied().peekable();
        let mut down = b.small.range(first..victim.lpn).rev().copied().peekable();
        let smallest = cfg.cost_bytes(1);
        while room >= smallest {
            // The nearer of the next candidates above and below; the lower on a tie.
            let lpn = match (up.peek(), down.peek()) {
                (Some(&u), Some(&d)) if u - victim.lpn < victim.lpn - d => up.next(),
                (_, Some(_)) => down.next(),
                (Some(_), None) => up.next(),
                (None, None) => None,
            };
            let Some(lpn) = lpn else { break };
            let Some(slot) = self.list.slot(lpn) else { continue };
            let cost = cfg.cost_bytes(self.list.entry(slot).present.count_ones());
            if cost <= room {
                room -= cost;
                b.queue.push_back(lpn);
            }
        }
    }
}

impl WriteBuffer for PcLru {
    stack_lookups!(peek and len);

    fn touch(&mut self, lpn: u32) -> Option<&mut BufEntry> {
        let i = self.list.slot(lpn)?;
        self.host_touched();
        self.leave_run(i);
        self.list.move_to_front(i);
        Some(self.list.entry_mut(i))
    }

    fn insert(&mut self, entry: BufEntry) {
        self.host_touched();
        let full = entry.present == self.full;
        let small = self.is_small(entry.present);
        let lpn = entry.lpn;
        let i = self.list.insert(entry);
        if self.stamp.len() < self.list.slots() {
            self.stamp.resize(self.list.slots(), 0);
            self.full_at.resize(self.list.slots(), false);
            self.run.mark.resize(self.list.slots(), 0);
        }
        if full {
            self.full_pages += 1;
            self.full_at[i as usize] = true;
        }
        if let Some(b) = &mut self.batch {
            if small {
                b.small.insert(lpn);
            }
        }
        self.refer(i);
    }

    fn remove(&mut self, lpn: u32) -> Option<BufEntry> {
        let i = self.list.slot(lpn)?;
        self.host_touched();
        Some(self.take(i))
    }

    fn wrote(&mut self, lpn: u32, was_partial: bool) {
        let Some(i) = self.list.slot(lpn) else { return };
        self.host_touched();
        if was_partial {
            let pcd = self.clock.newer_than(self.stamp[i as usize]);
            self.pcd_sum += pcd as u64;
            self.stats.pcd_samples += 1;
            self.stats.acd = self.pcd_sum as f64 / self.stats.pcd_samples as f64;
            let present = self.list.entry(i).present;
            if present == self.full {
                self.full_pages += 1;
                self.full_at[i as usize] = true;
                if self.run.contains(i) {
                    // A full page inside the bottom run (a write not preceded by a touch).
                    self.run.forget();
                }
            }
            if !self.is_small(present) {
                if let Some(b) = &mut self.batch {
                    b.small.remove(&lpn);
                }
            }
        }
        self.refer(i);
    }

    fn pop_victim(&mut self, chips: &dyn ChipView) -> Option<BufEntry> {
        if let Some(b) = &mut self.batch {
            while let Some(lpn) = b.queue.pop_front() {
                if let Some(i) = self.list.slot(lpn) {
                    b.destaged += 1;
                    self.stats.batch_destaged = Some(b.destaged);
                    return Some(self.take(i));
                }
            }
        }
        let tail = self.list.tail;
        if tail == NIL {
            return None;
        }
        let victim = if self.is_full(tail) || self.full_pages == 0 {
            self.take(tail)
        } else if chips.program_would_wait() || chips.read_would_wait(self.list.entry(tail).lpn) {
            self.pass_partial_pages()?
        } else {
            self.take(tail)
        };
        if self.batch.is_some() {
            self.choose_batch(&victim);
        }
        Some(victim)
    }

    fn batch_pending(&self) -> usize {
        self.batch.as_ref().map_or(0, |b| b.queue.len())
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
        let mut b = PcLru::new(16, FULL, None);
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
        let mut b = PcLru::new(8, FULL, None);
        b.insert(e(1, FULL));
        b.insert(e(2, 0b1));
        assert_eq!(b.pop_victim(&congested()).unwrap().lpn, 1);
        assert_eq!(b.pop_victim(&congested()).unwrap().lpn, 2, "no full page to prefer");
        assert!(b.pop_victim(&congested()).is_none());
    }

    #[test]
    fn pcd_is_the_stack_distance_of_an_overwritten_partial_page_and_acd_its_mean() {
        let mut b = PcLru::new(16, FULL, None);
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
        let mut b = PcLru::new(32, FULL, None);
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
        let mut b = PcLru::new(8, FULL, None);
        b.insert(e(1, 0b0011));
        b.insert(e(2, 0b0001));
        b.touch(1).unwrap().present = FULL;
        b.wrote(1, true);
        // Stack: 1 (now full) on top of 2 (partial): congestion skips 2 for 1.
        assert_eq!(b.pop_victim(&congested()).unwrap().lpn, 1);
        assert_eq!(b.pop_victim(&congested()).unwrap().lpn, 2);
    }

    /// 512-byte blocks in 8 KiB pages (16 per page), regions of 16 pages.
    const FULL16: u128 = 0xffff;
    const BATCH: BatchDestage =
        BatchDestage { region_pages: 16, block_bytes: 512, unit_bytes: 8192 };

    /// The first `n` blocks of a page.
    fn blocks(n: u32) -> u128 {
        (1u128 << n) - 1
    }

    #[test]
    fn batch_mates_are_small_partial_pages_of_the_victims_region_nearest_first() {
        let mut b = PcLru::new(32, FULL16, Some(BATCH));
        // Bottom to top: the victim 5 (4 blocks), then candidates: 9 and 2 (small, region 0),
        // 7 (12 blocks: not small), 17 (small, region 1), 12 (full), 3 (small, region 0).
        for (lpn, n) in [(5, 4), (9, 4), (2, 4), (7, 12), (17, 2), (12, 16), (3, 4)] {
            b.insert(e(lpn, blocks(n)));
        }
        assert_eq!(b.pop_victim(&idle()).unwrap().lpn, 5);
        // Room after the victim: 8192 - 2 - (6 + 2048) = 6136; each mate takes 2054, so
        // two fit: 3 (distance 2), then 2 (distance 3, before 9 at 4).
        assert_eq!(b.batch_pending(), 2);
        assert_eq!(b.pop_victim(&congested()).unwrap().lpn, 3, "mates go first, nearest first");
        assert_eq!(b.pop_victim(&congested()).unwrap().lpn, 2);
        assert_eq!(b.batch_pending(), 0);
        assert_eq!(b.stats().batch_destaged, Some(2));
        // Then the policy chooses again: 9, whose region holds no other small partial page.
        assert_eq!(b.pop_victim(&idle()).unwrap().lpn, 9);
        assert_eq!(b.batch_pending(), 0, "17 is in region 1, 7 is not small");
    }

    #[test]
    fn a_batch_fits_one_compacted_page_with_its_table() {
        let mut b = PcLru::new(32, FULL16, Some(BATCH));
        // Half pages: 8 blocks (4,096 bytes) each; the victim leaves 8192 - 2 - 4102 = 4088,
        // less than another half page with its triple (4102): no mate.
        for lpn in [1, 2] {
            b.insert(e(lpn, blocks(8)));
        }
        assert_eq!(b.pop_victim(&idle()).unwrap().lpn, 1);
        assert_eq!(b.batch_pending(), 0);
        // Six blocks (3,078 bytes with the triple) fit once beside a half page, not twice;
        // the one that does not fit is skipped for a smaller page further away.
        for (lpn, n) in [(4, 6), (5, 6), (9, 1)] {
            b.insert(e(lpn, blocks(n)));
        }
        assert_eq!(b.pop_victim(&idle()).unwrap().lpn, 2);
        let batch: Vec<u32> = (0..3).map(|_| b.pop_victim(&idle()).unwrap().lpn).collect();
        assert_eq!(batch, vec![4, 9, 5], "4 (3,078) and 9 (518) fit in 4,088; 5 goes next");
        assert_eq!(b.stats().batch_destaged, Some(2));
    }

    #[test]
    fn host_activity_drops_a_pending_batch_and_batching_off_counts_nothing() {
        let mut b = PcLru::new(32, FULL16, Some(BATCH));
        for lpn in [1, 2, 3] {
            b.insert(e(lpn, blocks(2)));
        }
        assert_eq!(b.pop_victim(&idle()).unwrap().lpn, 1);
        assert_eq!(b.batch_pending(), 2);
        b.touch(3);
        assert_eq!(b.batch_pending(), 0, "the host moved the buffer on");
        let mut off = PcLru::new(32, FULL16, None);
        for lpn in [1, 2, 3] {
            off.insert(e(lpn, blocks(2)));
        }
        assert_eq!(off.pop_victim(&idle()).unwrap().lpn, 1);
        assert_eq!(off.batch_pending(), 0);
        assert_eq!(off.stats().batch_destaged, None, "not published without batching");
    }

    #[test]
    fn stamps_renumber_without_changing_distances() {
        let mut b = PcLru::new(4, FULL, None);
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

/// PC-LRU written the plain way, to check the fast one against: the stack as a vector, the
/// nearest full page and the ACD position found by indexing it, PCD by counting the buffered
/// pages referenced since, batch-mates by sorting the region's candidates.
#[cfg(test)]
mod reference {
    use std::collections::{HashMap, VecDeque};

    use super::super::{BufEntry, ChipView};
    use super::BatchDestage;

    pub(super) struct Reference {
        /// Bottom first.
        stack: Vec<BufEntry>,
        last_ref: HashMap<u32, u64>,
        clock: u64,
        full: u128,
        pcd_sum: u64,
        pub(super) samples: u64,
        pub(super) acd: f64,
        pub(super) delayed: u64,
        batch: Option<BatchDestage>,
        pub(super) queue: VecDeque<u32>,
        pub(super) destaged: u64,
    }

    impl Reference {
        pub(super) fn new(full: u128, batch: Option<BatchDestage>) -> Reference {
            Reference {
                stack: Vec::new(),
                last_ref: HashMap::new(),
                clock: 0,
                full,
                pcd_sum: 0,
                samples: 0,
                acd: 0.0,
                delayed: 0,
                batch,
                queue: VecDeque::new(),
                destaged: 0,
            }
        }

        fn at(&self, lpn: u32) -> Option<usize> {
            self.stack.iter().position(|e| e.lpn == lpn)
        }

        fn small(&self, present: u128) -> bool {
            present != self.full && present.count_ones() <= self.full.count_ones() / 2
        }

        pub(super) fn len(&self) -> usize {
            self.stack.len()
        }

        pub(super) fn insert(&mut self, e: BufEntry) {
            self.queue.clear();
            self.clock += 1;
            self.last_ref.insert(e.lpn, self.clock);
            self.stack.push(e);
        }

        /// Moves `lpn` to the top and ORs `bits` into it; returns whether it was partial.
        pub(super) fn touch(&mut self, lpn: u32, bits: u128) -> Option<bool> {
            let k = self.at(lpn)?;
            self.queue.clear();
            let mut e = self.stack.remove(k);
            let was_partial = e.present != self.full;
            e.present |= bits;
            self.stack.push(e);
            Some(was_partial)
        }

        pub(super) fn wrote(&mut self, lpn: u32, was_partial: bool) {
            if self.at(lpn).is_none() {
                return;
            }
            self.queue.clear();
            if was_partial {
                let mine = self.last_ref[&lpn];
                let pcd = self.stack.iter().filter(|e| self.last_ref[&e.lpn] > mine).count();
                self.pcd_sum += pcd as u64;
                self.samples += 1;
                self.acd = self.pcd_sum as f64 / self.samples as f64;
            }
            self.clock += 1;
            self.last_ref.insert(lpn, self.clock);
        }

        pub(super) fn remove(&mut self, lpn: u32) -> Option<BufEntry> {
            let k = self.at(lpn)?;
            self.queue.clear();
            Some(self.stack.remove(k))
        }

        pub(super) fn pop_victim(&mut self, chips: &dyn ChipView) -> Option<BufEntry> {
            while let Some(lpn) = self.queue.pop_front() {
                if let Some(k) = self.at(lpn) {
                    self.destaged += 1;
                    return Some(self.stack.remove(k));
                }
            }
            let bottom = self.stack.first()?;
            let nearest_full = self.stack.iter().position(|e| e.present == self.full);
            let congested = chips.program_would_wait() || chips.read_would_wait(bottom.lpn);
            let victim = match nearest_full {
                Some(j) if j > 0 && congested => {
                    let passed: Vec<BufEntry> = self.stack.drain(..j).collect();
                    let victim = self.stack.remove(0);
                    let at = (self.acd.round() as usize).min(self.stack.len());
                    self.delayed += passed.len() as u64;
                    self.stack.splice(at..at, passed);
                    victim
                }
                _ => self.stack.remove(0),
            };
            if let Some(b) = self.batch {
                if self.small(victim.present) {
                    self.choose_batch(&b, &victim);
                }
            }
            Some(victim)
        }

        fn choose_batch(&mut self, b: &BatchDestage, victim: &BufEntry) {
            let cost = |e: &BufEntry| 6 + e.present.count_ones() * b.block_bytes;
            let Some(mut room) = b.unit_bytes.checked_sub(2 + cost(victim)) else { return };
            let region = victim.lpn / b.region_pages;
            let mut mates: Vec<&BufEntry> = self
                .stack
                .iter()
                .filter(|e| e.lpn / b.region_pages == region && self.small(e.present))
                .collect();
            mates.sort_by_key(|e| (e.lpn.abs_diff(victim.lpn), e.lpn));
            for e in mates {
                if room < 6 + b.block_bytes {
                    break;
                }
                if cost(e) <= room {
                    room -= cost(e);
                    self.queue.push_back(e.lpn);
                }
            }
        }
    }
}

#[cfg(test)]
mod against_reference {
    use super::super::tests::e;
    use super::super::{ChipView, IdleChips};
    use super::reference::Reference;
    use super::*;

    /// Eight blocks per page.
    const FULL8: u128 = 0xff;

    /// splitmix64: a small seeded generator, so the test needs nothing beside the crate.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Chips whose busy planes are drawn per victim choice: the program target with
    /// probability `program_busy_in_4`/4, each page's old version by a hash of the page.
    struct DrawnChips {
        program_busy: bool,
        salt: u64,
    }

    impl ChipView for DrawnChips {
        fn read_would_wait(&self, lpn: u32) -> bool {
            (lpn as u64 ^ self.salt).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 62 == 0
        }
        fn program_would_wait(&self) -> bool {
            self.program_busy
        }
    }

    /// Blocks `first..first + count` of an eight-block page, drawn so that most writes leave
    /// the page partial and some fill it.
    fn draw_bits(rng: &mut Rng) -> u128 {
        if rng.below(6) == 0 {
            return FULL8;
        }
        let first = rng.below(8) as u32;
        let count = 1 + rng.below(8 - first as u64) as u32;
        ((1u128 << count) - 1) << first
    }

    /// Runs `ops` random buffer operations, as the controller issues them, against the fast
    /// policy and the reference, comparing every victim and the statistics.
    fn compare(seed: u64, ops: usize, batch: Option<BatchDestage>) {
        let cap = 24;
        let mut fast = PcLru::new(cap, FULL8, batch);
        let mut slow = Reference::new(FULL8, batch);
        let mut rng = Rng(seed);
        let busy_in_4 = 1 + rng.below(4);
        for op in 0..ops {
            let lpn = rng.below(80) as u32;
            let what = format!("seed {seed}, op {op}, lpn {lpn}");
            match rng.below(20) {
                // A host write: merged into the buffered page, or a new page after making room.
                0..=13 => {
                    let bits = draw_bits(&mut rng);
                    if let Some(x) = fast.touch(lpn) {
                        let was_partial = x.present != FULL8;
                        x.present |= bits;
                        assert_eq!(slow.touch(lpn, bits), Some(was_partial), "{what}");
                        fast.wrote(lpn, was_partial);
                        slow.wrote(lpn, was_partial);
                    } else {
                        assert!(slow.touch(lpn, bits).is_none(), "{what}");
                        let mut taken = 0;
                        while fast.len() >= cap / 2 && (taken < 2 || fast.batch_pending() > 0) {
                            let chips = DrawnChips {
                                program_busy: rng.below(4) < busy_in_4,
                                salt: rng.next(),
                            };
                            let a = fast.pop_victim(&chips).map(|v| v.lpn);
                            let b = slow.pop_victim(&chips).map(|v| v.lpn);
                            assert_eq!(a, b, "{what}: victim {taken}");
                            assert_eq!(fast.batch_pending(), slow.queue.len(), "{what}");
                            taken += 1;
                        }
                        fast.insert(e(lpn, bits));
                        slow.insert(e(lpn, bits));
                    }
                }
                // A read hit moves the page up without a write.
                14..=16 => {
                    assert_eq!(fast.touch(lpn).is_some(), slow.touch(lpn, 0).is_some(), "{what}");
                }
                // A trim.
                17..=18 => {
                    let a = fast.remove(lpn).map(|v| v.lpn);
                    assert_eq!(a, slow.remove(lpn).map(|v| v.lpn), "{what}");
                }
                // A flush: everything goes, in stack order (batches still first).
                _ => {
                    if rng.below(10) == 0 {
                        while let Some(v) = fast.pop_victim(&IdleChips) {
                            let b = slow.pop_victim(&IdleChips).map(|v| v.lpn);
                            assert_eq!(Some(v.lpn), b, "{what}: flush");
                        }
                        assert_eq!(slow.len(), 0, "{what}");
                    }
                }
            }
            let s = fast.stats();
            assert_eq!(s.delayed_partial, slow.delayed, "{what}");
            assert_eq!(s.pcd_samples, slow.samples, "{what}");
            assert_eq!(s.acd.to_bits(), slow.acd.to_bits(), "{what}");
            assert_eq!(s.batch_destaged, batch.map(|_| slow.destaged), "{what}");
            assert_eq!(fast.len(), slow.len(), "{what}");
        }
    }

    #[test]
    fn victims_match_the_plain_implementation_on_random_operations() {
        for seed in 0..300 {
            compare(seed, 3_000, None);
        }
    }

    #[test]
    fn batches_match_the_plain_implementation_on_random_operations() {
        // 512-byte blocks in 4 KiB pages, regions of 16 pages.
        let batch = BatchDestage { region_pages: 16, block_bytes: 512, unit_bytes: 4096 };
        for seed in 1_000..1_300 {
            compare(seed, 3_000, Some(batch));
        }
    }
}
