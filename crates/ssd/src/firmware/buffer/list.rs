//! The intrusive LRU stack every replacement policy keeps its entries on: a hash map from
//! logical page to a slot, the entries in a slab, and the links (head = most recently used,
//! tail = the bottom of the stack) in a compact array of their own, so look-up, move-to-top,
//! unlink and insert next to a node are O(1) without allocation in steady state, and a walk
//! along the stack (PC-LRU's) touches 8 bytes per node rather than whole entries. Policies
//! differ only in which node they take and where they put the ones they pass over, so they
//! share this list and add their own state per slot.

use rustc_hash::FxHashMap;

use super::BufEntry;

pub(super) const NIL: u32 = u32::MAX;

/// A node's neighbours: towards the head (`prev`) and towards the tail (`next`).
#[derive(Clone, Copy)]
struct Link {
    prev: u32,
    next: u32,
}

pub(super) struct LruList {
    index: FxHashMap<u32, u32>,
    entries: Vec<Option<BufEntry>>,
    links: Vec<Link>,
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
            entries: Vec::with_capacity(capacity),
            links: Vec::with_capacity(capacity),
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

    /// Node slots are reused after removal; this bounds them (for per-slot side tables).
    pub(super) fn slots(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn entry(&self, i: u32) -> &BufEntry {
        self.entries[i as usize].as_ref().expect("linked node holds an entry")
    }

    pub(super) fn entry_mut(&mut self, i: u32) -> &mut BufEntry {
        self.entries[i as usize].as_mut().expect("linked node holds an entry")
    }

    /// The node above `i` (towards the head), or NIL.
    pub(super) fn prev(&self, i: u32) -> u32 {
        self.links[i as usize].prev
    }

    /// The node below `i` (towards the tail), or NIL.
    pub(super) fn next(&self, i: u32) -> u32 {
        self.links[i as usize].next
    }

    /// Sets the link from `a` down to `b` (either may be NIL: then the head or tail moves).
    fn join(&mut self, a: u32, b: u32) {
        if a == NIL {
            self.head = b;
        } else {
            self.links[a as usize].next = b;
        }
        if b == NIL {
            self.tail = a;
        } else {
            self.links[b as usize].prev = a;
        }
    }

    pub(super) fn unlink(&mut self, i: u32) {
        let Link { prev, next } = self.links[i as usize];
        self.join(prev, next);
    }

    pub(super) fn push_front(&mut self, i: u32) {
        let old = self.head;
        self.links[i as usize].prev = NIL;
        self.head = i;
        self.join(i, old);
    }

    /// Moves node `i` to the head (a use).
    pub(super) fn move_to_front(&mut self, i: u32) {
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
    }

    /// Cuts the nodes from `top` down to the tail out of the stack and returns the bottom
    /// one; they stay linked among themselves, ready for [`Self::splice_above`].
    pub(super) fn cut_bottom(&mut self, top: u32) -> u32 {
        let bottom = self.tail;
        let above = self.links[top as usize].prev;
        self.links[top as usize].prev = NIL;
        if above == NIL {
            self.head = NIL;
            self.tail = NIL;
        } else {
            self.links[above as usize].next = NIL;
            self.tail = above;
        }
        bottom
    }

    /// Puts a cut run `top..=bottom` back directly above node `at`, or below everything when
    /// `at` is NIL ([`Self::splice_on_top`] puts it above everything).
    pub(super) fn splice_above(&mut self, top: u32, bottom: u32, at: u32) {
        if at == NIL {
            let old_tail = self.tail;
            self.links[top as usize].prev = NIL;
            self.join(old_tail, top);
            self.links[bottom as usize].next = NIL;
            self.tail = bottom;
            if old_tail == NIL {
                self.head = top;
            }
            return;
        }
        let above = self.links[at as usize].prev;
        self.join(above, top);
        self.join(bottom, at);
    }

    /// Puts a cut run `top..=bottom` on top of the stack.
    pub(super) fn splice_on_top(&mut self, top: u32, bottom: u32) {
        let old_head = self.head;
        self.head = top;
        self.links[top as usize].prev = NIL;
        self.join(bottom, old_head);
    }

    /// Adds an entry for a unit not on the list, at the head; returns its node slot.
    pub(super) fn insert(&mut self, entry: BufEntry) -> u32 {
        debug_assert!(!self.index.contains_key(&entry.lpn));
        let lpn = entry.lpn;
        let i = match self.free.pop() {
            Some(i) => {
                self.entries[i as usize] = Some(entry);
                i
            }
            None => {
                self.entries.push(Some(entry));
                self.links.push(Link { prev: NIL, next: NIL });
                (self.entries.len() - 1) as u32
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
        let e = self.entries[i as usize].take().expect("linked node holds an entry");
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

#[cfg(test)]
mod tests {
    use super::super::tests::e;
    use super::*;

    fn order(l: &LruList) -> Vec<u32> {
        let mut v: Vec<u32> = l.slots_from_tail().iter().map(|&i| l.entry(i).lpn).collect();
        v.reverse();
        v
    }

    #[test]
    fn runs_are_cut_from_the_bottom_and_spliced_anywhere() {
        let mut l = LruList::new(8);
        let s: Vec<u32> = (0..6).map(|x| l.insert(e(x, 1))).collect();
        // Top to bottom: 5 4 3 2 1 0. Cut 1 0 and put it above 4.
        let bottom = l.cut_bottom(s[1]);
        assert_eq!(order(&l), vec![5, 4, 3, 2]);
        l.splice_above(s[1], bottom, s[4]);
        assert_eq!(order(&l), vec![5, 1, 0, 4, 3, 2]);
        // Cut 3 2 and put it back at the tail; then cut it again and put it on top.
        let bottom = l.cut_bottom(s[3]);
        l.splice_above(s[3], bottom, NIL);
        assert_eq!(order(&l), vec![5, 1, 0, 4, 3, 2]);
        let bottom = l.cut_bottom(s[3]);
        l.splice_on_top(s[3], bottom);
        assert_eq!(order(&l), vec![3, 2, 5, 1, 0, 4]);
        // Cutting everything leaves an empty stack, and splicing on top refills it.
        let bottom = l.cut_bottom(s[3]);
        assert_eq!((l.head, l.tail), (NIL, NIL));
        l.splice_on_top(s[3], bottom);
        assert_eq!(order(&l), vec![3, 2, 5, 1, 0, 4]);
        assert_eq!(l.len(), 6);
    }
}
