//! Reusable byte buffers for an engine's background work (conversion, GC).
//!
//! A host conversion of a 4+1 stripe of 64 KiB chunks needs 256 KiB of data, 64 KiB of parity
//! and their metadata, thousands of times a second. Allocating them per stripe made the
//! allocator grow and shrink its heap around each one, and the kernel fault in and clear the
//! pages again: on RAM members that cost more than the copies and the parity themselves
//! (docs/benchmarks.md, "`scala` and `twophase` on RAM members"). A pool keeps a few buffers
//! between uses instead.

use parking_lot::Mutex;

/// A bounded stack of byte buffers. Every buffer handed out has the requested length, but
/// its bytes are unspecified (left from an earlier use, or zero): a user overwrites every
/// byte it reads back or writes out.
pub(crate) struct BufPool {
    bufs: Mutex<Vec<Vec<u8>>>,
    max_bufs: usize,
}

impl BufPool {
    /// A pool keeping at most `max_bufs` buffers between uses.
    pub(crate) fn new(max_bufs: usize) -> BufPool {
        BufPool { bufs: Mutex::new(Vec::new()), max_bufs }
    }

    /// A buffer of `len` bytes with unspecified contents.
    pub(crate) fn take(&self, len: usize) -> Vec<u8> {
        let mut bufs = self.bufs.lock();
        // A buffer of that very length if there is one (an engine uses a few sizes: chunks,
        // their metadata, whole stripes), else any, resized (zero-filling what grows).
        let at = bufs.iter().rposition(|b| b.len() == len).or(bufs.len().checked_sub(1));
        match at.map(|i| bufs.swap_remove(i)) {
            Some(mut b) => {
                drop(bufs);
                b.resize(len, 0);
                b
            }
            None => vec![0u8; len],
        }
    }

    /// A buffer of `len` zero bytes.
    pub(crate) fn take_zeroed(&self, len: usize) -> Vec<u8> {
        let mut b = self.take(len);
        b.fill(0);
        b
    }

    /// Gives buffers back for later use (beyond the limit they are freed).
    pub(crate) fn give(&self, bufs: impl IntoIterator<Item = Vec<u8>>) {
        let mut pool = self.bufs.lock();
        for b in bufs {
            if pool.len() >= self.max_bufs {
                break;
            }
            pool.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_with_the_length_asked_and_the_pool_is_bounded() {
        let pool = BufPool::new(2);
        let a = pool.take(8);
        assert_eq!(a, vec![0u8; 8]);
        let mut b = pool.take(4);
        b.fill(7);
        pool.give([a, b, vec![1u8; 3]]);
        assert_eq!(pool.bufs.lock().len(), 2, "the third is freed");
        assert_eq!(pool.take(8).len(), 8, "the buffer of that length");
        let c = pool.take(6);
        assert_eq!(c, vec![7, 7, 7, 7, 0, 0], "another, resized");
        pool.give([c]);
        assert_eq!(pool.take_zeroed(16), vec![0u8; 16]);
    }
}
