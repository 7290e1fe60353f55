//! A slot table for pollers: indices stay stable while a poller runs (it is taken out of its
//! slot and put back), and the slots of finished pollers are reused, so a device that registers
//! a poller for every burst of I/O does not grow the table without bound.

pub(crate) struct Slots<T> {
    items: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots { items: Vec::new(), free: Vec::new() }
    }
}

impl<T> Slots<T> {
    pub(crate) fn insert(&mut self, item: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.items[i] = Some(item);
                i
            }
            None => {
                self.items.push(Some(item));
                self.items.len() - 1
            }
        }
    }

    /// Takes the item out to run it; the slot stays reserved until [`Slots::put_back`] or
    /// [`Slots::release`].
    pub(crate) fn take(&mut self, i: usize) -> Option<T> {
        self.items.get_mut(i).and_then(Option::take)
    }

    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.items.get(i).and_then(Option::as_ref)
    }

    pub(crate) fn put_back(&mut self, i: usize, item: T) {
        self.items[i] = Some(item);
    }

    /// Frees a slot whose item was taken and will not come back.
    pub(crate) fn release(&mut self, i: usize) {
        debug_assert!(self.items[i].is_none(), "released slot still holds its item");
        self.free.push(i);
    }

    /// One past the highest slot ever used.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn clear(&mut self) {
        self.items.clear();
        self.free.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_slots_are_reused_and_running_ones_are_not() {
        let mut s = Slots::default();
        let a = s.insert('a');
        let b = s.insert('b');
        let taken = s.take(a).unwrap();
        // While `a` runs, a new item must not land in its slot.
        let c = s.insert('c');
        assert_ne!(c, a);
        s.put_back(a, taken);
        assert_eq!(s.get(a), Some(&'a'));
        s.take(b);
        s.release(b);
        assert_eq!(s.insert('d'), b);
        assert_eq!(s.len(), 3);
    }
}
