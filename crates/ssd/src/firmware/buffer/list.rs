//! The intrusive LRU stack every replacement policy keeps its entries on: a hash map from
//! logical page to a slab of nodes on a doubly linked list (head = most recently used, tail =
//! the bottom of the stack), so look-up, move-to-top, unlink and insert next to a node are
//! O(1) without allocation in steady state. Policies differ only in which node they take and
//! where they put the ones they pass over, so they share this list and add their own state
//! per node (indexed by the node's slot).

use rustc_hash::FxHashMap;

use super::BufEntry;

pub(super) const NIL: u32 = u32::MAX;

struct Node {
    entry: Option<BufEntry>,
    prev: u32,
    next: u32,
}

pub(super) struct LruList {
    index: FxHashMap<u32, u32>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    pub(super) head: u32,
    pub(super) tail: u32,
}

impl LruList {
    pub(super) fn new(capacity: usize) -> LruList {
        let mut index = FxHashMap::default();
        index.reserve(capacity);
        LruList {
            index,
            nodes: Vec::with_capacity(capacity),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    /// The node slot holding `lpn`.
    pub(super) fn slot(&self, lpn: u32) -> Option<u32> {
        self.index.get(&lpn).copied()
    }

    /// Node slots are reused after removal; this bounds them (for per-node side tables).
    pub(super) fn slots(&self) -> usize {
        self.nodes.len()
    }

    pub(super) fn entry(&self, i: u32) -> &BufEntry {
        self.nodes[i as usize].entry.as_ref().expect("linked node holds an entry")
    }

    pub(super) fn entry_mut(&mut self, i: u32) -> &mut BufEntry {
        self.nodes[i as usize].entry.as_mut().expect("linked node holds an entry")
    }

    /// The node above `i` (towards the head), or NIL.
    pub(super) fn prev(&self, i: u32) -> u32 {
        self.nodes[i as usize].prev
    }

    pub(super) fn unlink(&mut self, i: u32) {
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

    pub(super) fn push_front(&mut self, i: u32) {
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

    /// Links the unlinked node `i` directly above node `at` (towards the head); `at == NIL`
    /// puts it at the tail.
    pub(super) fn link_above(&mut self, i: u32, at: u32) {
        if at == NIL {
            self.nodes[i as usize].next = NIL;
            self.nodes[i as usize].prev = self.tail;
            if self.tail != NIL {
                self.nodes[self.tail as usize].next = i;
            }
            self.tail = i;
            if self.head == NIL {
                self.head = i;
            }
            return;
        }
        let p = self.nodes[at as usize].prev;
        self.nodes[i as usize].prev = p;
        self.nodes[i as usize].next = at;
        self.nodes[at as usize].prev = i;
        if p == NIL {
            self.head = i;
        } else {
            self.nodes[p as usize].next = i;
        }
    }

    /// Moves node `i` to the head (a use).
    pub(super) fn move_to_front(&mut self, i: u32) {
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
    }

    /// Adds an entry for a unit not on the list, at the head; returns its node slot.
    pub(super) fn insert(&mut self, entry: BufEntry) -> u32 {
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
        i
    }

    /// Unlinks node `i` and returns its entry; the slot is free for reuse.
    pub(super) fn take(&mut self, i: u32) -> BufEntry {
        self.unlink(i);
        self.free.push(i);
        let e = self.nodes[i as usize].entry.take().expect("linked node holds an entry");
        self.index.remove(&e.lpn);
        e
    }

    /// Every linked node slot, from the tail up (for renumbering side tables).
    pub(super) fn slots_from_tail(&self) -> Vec<u32> {
        let mut v = Vec::with_capacity(self.len());
        let mut i = self.tail;
        while i != NIL {
            v.push(i);
            i = self.prev(i);
        }
        v
    }
}
