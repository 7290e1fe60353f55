//! The DRAM write buffer.
//!
//! Entries are whole mapping units with a bitmap of the host blocks they hold, so a buffer
//! can absorb sector-sized writes and merge them (WAFLASH §2.2); an entry missing blocks when
//! it is written back costs a read-modify-write. Replacement policies implement
//! [`WriteBuffer`]; LRU is the baseline, and later policies (WAFLASH's PC-LRU, MCA) plug in
//! beside it.

use rustc_hash::FxHashMap;

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

/// A replacement policy over buffered units. The controller decides *when* to write back
/// (by occupancy); the policy decides *which* units.
pub trait WriteBuffer: Send {
    /// The entry for `lpn`, counting as a use (a policy may reorder on it).
    fn touch(&mut self, lpn: u32) -> Option<&mut BufEntry>;
    /// The entry for `lpn`, without counting as a use.
    fn peek(&self, lpn: u32) -> Option<&BufEntry>;
    /// Adds an entry for a unit not in the buffer.
    fn insert(&mut self, entry: BufEntry);
    fn remove(&mut self, lpn: u32) -> Option<BufEntry>;
    /// Takes out the entry to write back next.
    fn pop_victim(&mut self) -> Option<BufEntry>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Takes out every entry, in write-back order.
    fn drain(&mut self) -> Vec<BufEntry> {
        let mut out = Vec::with_capacity(self.len());
        while let Some(e) = self.pop_victim() {
            out.push(e);
        }
        out
    }
}

const NIL: u32 = u32::MAX;

struct Node {
    entry: Option<BufEntry>,
    prev: u32,
    next: u32,
}

/// Least recently used: a hash map into a slab of nodes on an intrusive doubly linked list
/// (head = most recent), so every operation is O(1) without allocation in steady state.
pub struct Lru {
    index: FxHashMap<u32, u32>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
}

impl Lru {
    pub fn new(capacity: usize) -> Lru {
        let mut index = FxHashMap::default();
        index.reserve(capacity);
        Lru { index, nodes: Vec::with_capacity(capacity), free: Vec::new(), head: NIL, tail: NIL }
    }

    fn unlink(&mut self, i: u32) {
        let (p, n) = (self.nodes[i as usize].prev, self.nodes[i as usize].next);
        if p == NIL {
            self.head = n;
        } else {
            self.nodes[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.nodes[n as usize].prev = p;
        }
    }

    fn push_front(&mut self, i: u32) {
        self.nodes[i as usize].prev = NIL;
        self.nodes[i as usize].next = self.head;
        if self.head != NIL {
            self.nodes[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    fn take(&mut self, i: u32) -> BufEntry {
        self.unlink(i);
        self.free.push(i);
        self.nodes[i as usize].entry.take().expect("linked node holds an entry")
    }
}

impl WriteBuffer for Lru {
    fn touch(&mut self, lpn: u32) -> Option<&mut BufEntry> {
        let i = *self.index.get(&lpn)?;
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
        self.nodes[i as usize].entry.as_mut()
    }

    fn peek(&self, lpn: u32) -> Option<&BufEntry> {
        let i = *self.index.get(&lpn)?;
        self.nodes[i as usize].entry.as_ref()
    }

    fn insert(&mut self, entry: BufEntry) {
        debug_assert!(!self.index.contains_key(&entry.lpn));
        let lpn = entry.lpn;
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize].entry = Some(entry);
                i
            }
            None => {
                self.nodes.push(Node { entry: Some(entry), prev: NIL, next: NIL });
                (self.nodes.len() - 1) as u32
            }
        };
        self.push_front(i);
        self.index.insert(lpn, i);
    }

    fn remove(&mut self, lpn: u32) -> Option<BufEntry> {
        let i = self.index.remove(&lpn)?;
        Some(self.take(i))
    }

    fn pop_victim(&mut self) -> Option<BufEntry> {
        if self.tail == NIL {
            return None;
        }
        let e = self.take(self.tail);
        self.index.remove(&e.lpn);
        Some(e)
    }

    fn len(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(lpn: u32) -> BufEntry {
        BufEntry { lpn, present: 1, seq: lpn as u64, flags: 0, img: IuImage::default() }
    }

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut b = Lru::new(4);
        for l in 0..4 {
            b.insert(e(l));
        }
        assert!(b.touch(0).is_some()); // 0 becomes most recent
        assert_eq!(b.pop_victim().unwrap().lpn, 1);
        assert_eq!(b.remove(2).unwrap().lpn, 2);
        b.insert(e(9)); // reuses a freed node
        let order: Vec<u32> = b.drain().iter().map(|e| e.lpn).collect();
        assert_eq!(order, vec![3, 0, 9]);
        assert!(b.is_empty());
        assert!(b.peek(3).is_none());
    }
}
