//! The DRAM write buffer and its replacement policies.
//!
//! Entries are whole mapping units (WAFLASH's logical pages) with a bitmap of the host blocks
//! (sectors) they hold, so the buffer absorbs sector-sized writes and merges them (WAFLASH
//! §2.2, §3.1); an entry missing blocks when it is written back is a *partial page*, which
//! the FTL completes with a read-modify-write. The controller decides *when* to write back
//! (by occupancy); a [`WriteBuffer`] decides *which* units, and may look at the flash through
//! a [`ChipView`] when it does:
//!
//! - [`Lru`] (`buffer_policy = "lru"`): the bottom of the stack; SSDSim's policy and the
//!   Baseline of WAFLASH §5.2.1.
//! - [`pclru::PcLru`] (`"pc-lru"`): WAFLASH §3.1's Partial page and Congestion-aware LRU.
//! - [`mca::Mca`] (`"mca"`): the chip-waiting-aware policy WAFLASH compares with (§5.3, its
//!   reference [52]).
//!
//! docs/waflash.md describes each and what was taken from where.

/// The [`WriteBuffer`] methods every policy answers from its LRU stack alone (a field
/// `list`): look-ups, a use (move to the top) and the count.
macro_rules! stack_lookups {
    () => {
        fn touch(&mut self, lpn: u32) -> Option<&mut BufEntry> {
            let i = self.list.slot(lpn)?;
            self.list.move_to_front(i);
            Some(self.list.entry_mut(i))
        }

        stack_lookups!(peek and len);
    };
    // The look-ups that do not move anything, for a policy with its own `touch`.
    (peek and len) => {
        fn peek(&self, lpn: u32) -> Option<&BufEntry> {
            self.list.slot(lpn).map(|i| self.list.entry(i))
        }

        fn len(&self) -> usize {
            self.list.len()
        }
    };
    // Every look-up, with insert and remove that keep no state beside the stack.
    (plain insert and remove) => {
        stack_lookups!();

        fn insert(&mut self, entry: BufEntry) {
            self.list.insert(entry);
        }

        fn remove(&mut self, lpn: u32) -> Option<BufEntry> {
            let i = self.list.slot(lpn)?;
            Some(self.list.take(i))
        }
    };
}

mod list;
pub mod mca;
pub mod pclru;

use self::list::{LruList, NIL};
use crate::media::store::IuImage;

/// One buffered mapping unit.
#[derive(Clone, Debug)]
pub struct BufEntry {
    pub lpn: u32,
    /// Bit `i` set: host block `i` of the unit is in `img`.
    pub present: u128,
    /// Sequence number of the newest write merged into the entry.
    pub seq: u64,
    pub flags: u8,
    pub img: IuImage,
}

/// What a policy may ask about the flash at the moment it chooses a victim. The controller
/// answers from the NAND timelines at the time of the command that needs buffer space.
pub trait ChipView {
    /// Writing back `lpn` now would read its old version (the read-modify-write's additional
    /// read) from a plane that is still busy: MCA's *chip waiting*.
    fn read_would_wait(&self, lpn: u32) -> bool;
    /// The plane the next write-back programs is still busy: the chips are not idle.
    fn program_would_wait(&self) -> bool;
}

/// A view that reports every chip idle: write-back order is then the plain stack order (a
/// flush, a power loss with capacitors, or a policy test).
pub struct IdleChips;

impl ChipView for IdleChips {
    fn read_would_wait(&self, _lpn: u32) -> bool {
        false
    }
    fn program_would_wait(&self) -> bool {
        false
    }
}

/// What a policy counts about its own decisions (WAFLASH Figs. 10 and 14).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyStats {
    /// Partial pages passed over for a victim (PC-LRU: re-inserted at ACD; MCA: left one
    /// position longer), counted each time.
    pub delayed_partial: u64,
    /// Page-conversion distances measured (overwrites of a partial page), and their mean, the
    /// average conversion distance (PC-LRU only).
    pub pcd_samples: u64,
    pub acd: f64,
    /// Pages destaged as batch-mates of a small partial victim (PC-LRU with §3.3's batch
    /// destaging; `None` when batching is off, so the counter is published only in its runs).
    pub batch_destaged: Option<u64>,
}

/// A replacement policy over buffered units.
pub trait WriteBuffer: Send {
    /// The entry for `lpn`, counting as a use (moves it to the top of the stack).
    fn touch(&mut self, lpn: u32) -> Option<&mut BufEntry>;
    /// The entry for `lpn`, without counting as a use.
    fn peek(&self, lpn: u32) -> Option<&BufEntry>;
    /// Adds an entry for a unit not in the buffer, at the top.
    fn insert(&mut self, entry: BufEntry);
    fn remove(&mut self, lpn: u32) -> Option<BufEntry>;
    /// Takes out the entry to write back next, with the flash as `chips` sees it.
    fn pop_victim(&mut self, chips: &dyn ChipView) -> Option<BufEntry>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A host write to `lpn` (already in the buffer) was just merged: the entry was partial
    /// before the write (`was_partial`). Policies that learn from overwrites hook here.
    fn wrote(&mut self, _lpn: u32, _was_partial: bool) {}
    fn stats(&self) -> PolicyStats {
        PolicyStats::default()
    }
    /// Batch-mates chosen with the last victim and not yet taken: the controller keeps
    /// taking victims until none is left, so a batch reaches the FTL in one write-back group.
    fn batch_pending(&self) -> usize {
        0
    }
    /// Takes out every entry, in write-back order with idle chips.
    fn drain(&mut self) -> Vec<BufEntry> {
        let mut out = Vec::with_capacity(self.len());
        while let Some(e) = self.pop_victim(&IdleChips) {
            out.push(e);
        }
        out
    }
}

/// Least recently used: the bottom of the stack goes, whatever the chips are doing.
pub struct Lru {
    list: LruList,
}

impl Lru {
    pub fn new(capacity: usize) -> Lru {
        Lru { list: LruList::new(capacity) }
    }
}

impl WriteBuffer for Lru {
    stack_lookups!(plain insert and remove);

    fn pop_victim(&mut self, _chips: &dyn ChipView) -> Option<BufEntry> {
        if self.list.tail == NIL {
            return None;
        }
        Some(self.list.take(self.list.tail))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn e(lpn: u32, present: u128) -> BufEntry {
        BufEntry { lpn, present, seq: lpn as u64, flags: 0, img: IuImage::default() }
    }

    /// A chip view for tests: chosen pages' old versions sit on busy planes, and the program
    /// target is busy or not.
    pub(crate) struct Chips {
        pub busy_reads: Vec<u32>,
        pub program_busy: bool,
    }

    impl ChipView for Chips {
        fn read_would_wait(&self, lpn: u32) -> bool {
            self.busy_reads.contains(&lpn)
        }
        fn program_would_wait(&self) -> bool {
            self.program_busy
        }
    }

    /// The stack from top to bottom.
    pub(crate) fn order(b: &mut dyn WriteBuffer) -> Vec<u32> {
        let mut v: Vec<u32> = b.drain().iter().map(|e| e.lpn).collect();
        v.reverse();
        v
    }

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut b = Lru::new(4);
        for l in 0..4 {
            b.insert(e(l, 1));
        }
        assert!(b.touch(0).is_some()); // 0 becomes most recent
        let busy = Chips { busy_reads: vec![1], program_busy: true };
        assert_eq!(b.pop_victim(&busy).unwrap().lpn, 1, "LRU ignores the chips");
        assert_eq!(b.remove(2).unwrap().lpn, 2);
        b.insert(e(9, 1)); // reuses a freed node
        let order: Vec<u32> = b.drain().iter().map(|e| e.lpn).collect();
        assert_eq!(order, vec![3, 0, 9]);
        assert!(b.is_empty());
        assert!(b.peek(3).is_none());
    }
}
