//! MCA, the buffer policy WAFLASH compares with (waflash.txt §5.3, its reference [52]).
//!
//! What WAFLASH says of it is all we have (the MCA paper is not in ../shared/papers): it
//! "delays evicting the partial pages that cause chip waiting" (§5.3), "only delays the
//! eviction of partial pages that cause chip waiting due to additional reads" and "only shifts
//! one position in the LRU list to delay the eviction of the partial page, thus this partial
//! page may be quickly destaged from the buffer if it does not cause chip waiting anymore"
//! (§5.3, §7). So: the victim is the bottom of the LRU stack, unless the bottom is a partial
//! page whose additional read (the read-modify-write of its old version) would wait for a busy
//! plane; then the entry one position above goes instead, whatever it is, and the partial
//! page stays at the bottom for the next choice. A partial page never written before has no
//! old version to read and never waits.

use super::list::{LruList, NIL};
use super::{BufEntry, ChipView, PolicyStats, WriteBuffer};

pub struct Mca {
    list: LruList,
    full: u128,
    stats: PolicyStats,
}

impl Mca {
    /// An MCA buffer of `capacity` entries whose full pages have bitmap `full`.
    pub fn new(capacity: usize, full: u128) -> Mca {
        Mca { list: LruList::new(capacity), full, stats: PolicyStats::default() }
    }
}

impl WriteBuffer for Mca {
    stack_lookups!(plain insert and remove);

    fn pop_victim(&mut self, chips: &dyn ChipView) -> Option<BufEntry> {
        let tail = self.list.tail;
        if tail == NIL {
            return None;
        }
        let bottom = self.list.entry(tail);
        let above = self.list.prev(tail);
        if bottom.present != self.full && above != NIL && chips.read_would_wait(bottom.lpn) {
            self.stats.delayed_partial += 1;
            return Some(self.list.take(above));
        }
        Some(self.list.take(tail))
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

    #[test]
    fn a_waiting_partial_page_is_delayed_by_one_position_only() {
        let mut b = Mca::new(8, FULL);
        for (lpn, present) in [(1, 0b1), (2, 0b1), (3, FULL), (4, FULL)] {
            b.insert(e(lpn, present));
        }
        let chips = Chips { busy_reads: vec![1, 2], program_busy: true };
        // 1 would wait: the one above it (2, partial and waiting too) goes: one position.
        assert_eq!(b.pop_victim(&chips).unwrap().lpn, 2);
        assert_eq!(b.stats().delayed_partial, 1);
        // 1 still waits: 3 goes.
        assert_eq!(b.pop_victim(&chips).unwrap().lpn, 3);
        // 1 no longer waits: it goes at once.
        let idle = Chips { busy_reads: vec![], program_busy: true };
        assert_eq!(b.pop_victim(&idle).unwrap().lpn, 1, "program congestion alone is not MCA's");
        assert_eq!(order(&mut b), vec![4]);
    }

    #[test]
    fn full_pages_and_a_lone_entry_are_never_delayed() {
        let mut b = Mca::new(8, FULL);
        b.insert(e(1, FULL));
        b.insert(e(2, FULL));
        let chips = Chips { busy_reads: vec![1, 2, 3], program_busy: true };
        assert_eq!(b.pop_victim(&chips).unwrap().lpn, 1);
        b.insert(e(3, 0b1));
        b.remove(2);
        assert_eq!(b.pop_victim(&chips).unwrap().lpn, 3, "nothing above it to take instead");
        assert_eq!(b.stats().delayed_partial, 0);
    }
}
