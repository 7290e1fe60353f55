//! The stripe cache: partial-stripe writes gather in memory per stripe, and a stripe goes to
//! the members as one full-stripe write once sequential writes have covered it, which saves
//! md's read-construct-write for streaming small writes (md's `stripe_cache_size`, 256 by
//! default). When the cache holds more stripes than its capacity, the least recently written
//! one goes out as it is (read-construct-write for the rows it lacks); `flush` writes out all.
//!
//! Difference from md, by choice: md acknowledges a write only once its stripe reached the
//! members; here a cached write completes when it is in the cache and is durable after the
//! next `flush`, which is exactly what the block-device contract promises (a volatile write
//! cache, like an SSD's). Reads see cached data.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::geometry::Geometry;

/// One stripe's cached data: the stripe's data blocks and which of them are valid. Only valid
/// blocks are ever read: the bytes of the others are undefined (a recycled buffer keeps
/// whatever an earlier stripe left there).
pub struct Entry {
    pub data: Vec<u8>,
    pub valid: Vec<bool>,
    tick: u64,
}

impl Entry {
    pub fn is_full(&self) -> bool {
        self.valid.iter().all(|&v| v)
    }
    /// Runs of valid blocks: (first block, blocks).
    pub fn runs(&self) -> Vec<(u64, u64)> {
        let mut runs = Vec::new();
        let mut i = 0;
        while i < self.valid.len() {
            if self.valid[i] {
                let start = i;
                while i < self.valid.len() && self.valid[i] {
                    i += 1;
                }
                runs.push((start as u64, (i - start) as u64));
            } else {
                i += 1;
            }
        }
        runs
    }
}

pub struct StripeCache {
    capacity_stripes: usize,
    stripe_blocks: usize,
    block_bytes: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<u64, Entry>,
    /// Entries taken out for write-out and not yet on the members: reads still see them.
    /// A stripe may have several, oldest first, when it was written again and pushed out
    /// while an earlier write-out still waited for the stripe lock.
    writing: HashMap<u64, Vec<Arc<Entry>>>,
    tick: u64,
    /// Data buffers of entries written out, for new entries to reuse. A fresh zeroed buffer
    /// per stripe cost a third of an md-like array's wall time under small random writes (a
    /// whole stripe zeroed for every 4 KiB write that opened one; docs/benchmarks.md).
    spare: Vec<Vec<u8>>,
}

/// What a cached write leaves for the caller to write out.
pub struct Insert {
    /// Stripes now fully covered.
    pub full: Vec<(u64, Arc<Entry>)>,
    /// Stripes pushed out by capacity.
    pub evicted: Vec<(u64, Arc<Entry>)>,
}

impl StripeCache {
    pub fn new(capacity_stripes: usize, geo: &Geometry, block_bytes: u32) -> StripeCache {
        StripeCache {
            capacity_stripes,
            stripe_blocks: geo.stripe_data_blocks() as usize,
            block_bytes: block_bytes as usize,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Stripes held right now.
    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `data` into `stripe` at `offset_blocks` and returns the stripes to write out.
    pub fn insert(&self, stripe: u64, offset_blocks: u64, data: &[u8]) -> Insert {
        let bs = self.block_bytes;
        let mut g = self.inner.lock();
        g.tick += 1;
        let tick = g.tick;
        let g = &mut *g;
        let (entries, spare) = (&mut g.entries, &mut g.spare);
        let e = entries.entry(stripe).or_insert_with(|| Entry {
            data: spare.pop().unwrap_or_else(|| vec![0u8; self.stripe_blocks * bs]),
            valid: vec![false; self.stripe_blocks],
            tick,
        });
        e.tick = tick;
        let at = offset_blocks as usize;
        e.data[at * bs..at * bs + data.len()].copy_from_slice(data);
        e.valid[at..at + data.len() / bs].iter_mut().for_each(|v| *v = true);
        let mut out = Insert { full: Vec::new(), evicted: Vec::new() };
        if e.is_full() {
            let e = Arc::new(g.entries.remove(&stripe).expect("present"));
            g.writing.entry(stripe).or_default().push(e.clone());
            out.full.push((stripe, e));
        }
        while g.entries.len() > self.capacity_stripes {
            let (&victim, _) =
                g.entries.iter().min_by_key(|(s, e)| (e.tick, **s)).expect("non-empty");
            let e = Arc::new(g.entries.remove(&victim).expect("present"));
            g.writing.entry(victim).or_default().push(e.clone());
            out.evicted.push((victim, e));
        }
        out
    }

    /// Takes `stripe` out for write-out, if cached.
    pub fn take(&self, stripe: u64) -> Option<Arc<Entry>> {
        let mut g = self.inner.lock();
        let e = Arc::new(g.entries.remove(&stripe)?);
        g.writing.entry(stripe).or_default().push(e.clone());
        Some(e)
    }

    /// Takes every cached stripe out for write-out.
    pub fn take_all(&self) -> Vec<(u64, Arc<Entry>)> {
        let mut g = self.inner.lock();
        let mut all: Vec<(u64, Entry)> = g.entries.drain().collect();
        all.sort_by_key(|(s, _)| *s);
        all.into_iter()
            .map(|(s, e)| {
                let e = Arc::new(e);
                g.writing.entry(s).or_default().push(e.clone());
                (s, e)
            })
            .collect()
    }

    /// The write-out of `stripe`'s `entry` reached the members. Its buffer is kept for reuse
    /// when nobody else holds the entry.
    pub fn written(&self, stripe: u64, entry: Arc<Entry>) {
        let mut g = self.inner.lock();
        if let Some(list) = g.writing.get_mut(&stripe) {
            list.retain(|e| !Arc::ptr_eq(e, &entry));
            if list.is_empty() {
                g.writing.remove(&stripe);
            }
        }
        if let Ok(e) = Arc::try_unwrap(entry) {
            if g.spare.len() < self.capacity_stripes {
                g.spare.push(e.data);
            }
        }
    }

    /// The oldest entry of `stripe` waiting to be written out.
    pub fn oldest_writing(&self, stripe: u64) -> Option<Arc<Entry>> {
        self.inner.lock().writing.get(&stripe).and_then(|l| l.first().cloned())
    }

    /// Stripes being written out right now.
    pub fn writing(&self) -> Vec<u64> {
        self.inner.lock().writing.keys().copied().collect()
    }

    /// Copies cached blocks of `stripe` from `offset_blocks` over `buf` (data being written
    /// out first, then newer cached data); returns the blocks copied.
    pub fn overlay(&self, stripe: u64, offset_blocks: u64, buf: &mut [u8]) -> u64 {
        let bs = self.block_bytes;
        let g = self.inner.lock();
        let mut hits = 0;
        let writing = g.writing.get(&stripe).into_iter().flatten().map(|e| &**e);
        for e in writing.chain(g.entries.get(&stripe)) {
            for (i, b) in buf.chunks_exact_mut(bs).enumerate() {
                let at = offset_blocks as usize + i;
                if e.valid[at] {
                    b.copy_from_slice(&e.data[at * bs..(at + 1) * bs]);
                    hits += 1;
                }
            }
        }
        hits
    }
}

#[cfg(test)]
mod tests {
    //! Goal: a stripe that reuses the buffer of one written out shows only what was written to
    //! it. Method: fill a stripe completely, write it out (its buffer goes to the spares),
    //! start another stripe with one block, and read both through `overlay`.
    use super::*;

    #[test]
    fn a_reused_buffer_shows_only_the_blocks_written_to_its_new_stripe() {
        let geo = Geometry { k: 2, m: 1, chunk_blocks: 2, stripes: 8 };
        let bs = 512;
        let cache = StripeCache::new(4, &geo, bs as u32);
        let full = vec![0xaa; 4 * bs];
        let ins = cache.insert(0, 0, &full);
        assert_eq!(ins.full.len(), 1, "four blocks fill a 2 x 2 stripe");
        let (stripe, entry) = ins.full.into_iter().next().expect("one full stripe");
        drop(ins.evicted);
        let taken = cache.oldest_writing(stripe).expect("queued for write-out");
        drop(entry);
        cache.written(stripe, taken);
        assert!(cache.writing().is_empty());
        assert_eq!(cache.inner.lock().spare.len(), 1, "the written-out buffer is kept");

        let one = vec![0x11; bs];
        let ins = cache.insert(1, 2, &one);
        assert!(ins.full.is_empty() && ins.evicted.is_empty());
        assert!(cache.inner.lock().spare.is_empty(), "the new stripe took the spare buffer");
        let mut buf = vec![0u8; 4 * bs];
        assert_eq!(cache.overlay(1, 0, &mut buf), 1, "one cached block");
        assert!(buf[..2 * bs].iter().all(|&b| b == 0), "blocks 0-1 were never written");
        assert!(buf[2 * bs..3 * bs].iter().all(|&b| b == 0x11));
        assert!(buf[3 * bs..].iter().all(|&b| b == 0), "block 3 was never written");
        let e = cache.take(1).expect("stripe 1 is cached");
        assert_eq!(e.runs(), vec![(2, 1)], "write-out sends only block 2");
    }
}
