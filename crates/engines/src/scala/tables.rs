//! The host's mapping tables (§5.4, Fig. 8), shared by all reactors without a lock.
//!
//! - **AMT** (AFA mapping table): per user block, `ts << 32 | afa block` in one atomic word, so
//!   a reactor maps a block with one compare-and-swap and a reader sees a consistent pair. The
//!   paper maps 64 KiB user chunks; we map 4 KiB blocks (see docs/scala.md: a 4 KiB write is
//!   logged without reading and rewriting its chunk), and the 32-bit AFA number counts blocks.
//! - **HGMT** (hero-group mapping table): per stripe, its m VHs while it is replicated (the HH
//!   is implied by the stripe number); `NONE` once converted.
//! - Per stripe: valid blocks (for GC), writes in flight, and its state; per AFA block, the
//!   user block written there (the reverse map GC walks).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed, Ordering::SeqCst};

use super::format::AMT_PAGE_ENTRIES;

/// No VH / no user block.
pub const NONE: u32 = u32::MAX;
/// The AFA number of a trimmed block in the AMT.
pub const TRIMMED: u32 = u32::MAX;

/// Stripe states.
pub mod state {
    /// Free, in the pool or pending reuse.
    pub const FREE: u8 = 0;
    /// In the grant window, or granted to a reactor and not yet part of a hero group.
    pub const HELD: u8 = 1;
    /// A hero group being filled by a reactor.
    pub const OPEN: u8 = 2;
    /// Filled (or closed), replicated, waiting for conversion.
    pub const FULL: u8 = 3;
    /// In the striping layout: data and parity in its HH.
    pub const CONVERTED: u8 = 4;
    /// A GC victim being drained.
    pub const VICTIM: u8 = 5;
    /// Being converted: its backup copies are going away and its parity is not written yet.
    pub const CONVERTING: u8 = 6;
}

pub struct Tables {
    pub amt: Box<[AtomicU64]>,
    pub p2l: Box<[AtomicU32]>,
    pub hgmt: Box<[AtomicU32]>,
    pub valid: Box<[AtomicU32]>,
    pub inflight: Box<[AtomicU32]>,
    pub state: Box<[AtomicU8]>,
    /// How many times each stripe has been freed: a read that raced with a remapping checks
    /// that the place it read from was not recycled meanwhile (read.rs).
    pub incarnation: Box<[AtomicU32]>,
    /// The next write timestamp (§5.4's 32-bit timestamp; 0 means "never written").
    pub next_ts: AtomicU32,
    pub m: usize,
    /// AMT pages (of `AMT_PAGE_ENTRIES` entries) changed since the last checkpoint took them:
    /// what the next delta checkpoint writes.
    pub dirty: Box<[AtomicU64]>,
}

fn atomics<T>(n: u64, f: impl Fn() -> T) -> Box<[T]> {
    (0..n).map(|_| f()).collect()
}

pub fn entry(ts: u32, afa: u32) -> u64 {
    (ts as u64) << 32 | afa as u64
}

pub fn entry_ts(e: u64) -> u32 {
    (e >> 32) as u32
}

pub fn entry_afa(e: u64) -> u32 {
    e as u32
}

/// Whether an AMT entry points at data (not never-written, not trimmed).
pub fn entry_is_data(e: u64) -> bool {
    e != 0 && entry_afa(e) != TRIMMED
}

impl Tables {
    pub fn new(user_blocks: u64, afa_blocks: u64, stripes: u64, m: usize) -> Tables {
        Tables {
            amt: atomics(user_blocks, || AtomicU64::new(0)),
            p2l: atomics(afa_blocks, || AtomicU32::new(NONE)),
            hgmt: atomics(stripes * m as u64, || AtomicU32::new(NONE)),
            valid: atomics(stripes, || AtomicU32::new(0)),
            inflight: atomics(stripes, || AtomicU32::new(0)),
            state: atomics(stripes, || AtomicU8::new(state::FREE)),
            incarnation: atomics(stripes, || AtomicU32::new(0)),
            next_ts: AtomicU32::new(1),
            m,
            dirty: atomics(
                (user_blocks as usize).div_ceil(AMT_PAGE_ENTRIES).div_ceil(64) as u64,
                || AtomicU64::new(0),
            ),
        }
    }

    /// Marks user block `user`'s AMT page changed.
    fn touch(&self, user: u64) {
        let page = user as usize / AMT_PAGE_ENTRIES;
        let bit = 1u64 << (page % 64);
        let w = &self.dirty[page / 64];
        // Most updates hit a page already marked: a load avoids the write to a shared line.
        if w.load(Relaxed) & bit == 0 {
            w.fetch_or(bit, Relaxed);
        }
    }

    /// The AMT pages changed since the last call (or since `mark_all_clean`), clearing them.
    pub fn take_dirty_pages(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for (i, w) in self.dirty.iter().enumerate() {
            let mut bits = w.swap(0, Relaxed);
            while bits != 0 {
                let b = bits.trailing_zeros();
                out.push((i * 64) as u32 + b);
                bits &= bits - 1;
            }
        }
        out
    }

    pub fn take_ts(&self) -> u32 {
        self.next_ts.fetch_add(1, Relaxed)
    }

    pub fn vh(&self, s: u64, i: usize) -> u32 {
        self.hgmt[s as usize * self.m + i].load(Relaxed)
    }

    pub fn set_vh(&self, s: u64, i: usize, v: u32) {
        self.hgmt[s as usize * self.m + i].store(v, Relaxed)
    }

    pub fn state(&self, s: u64) -> u8 {
        self.state[s as usize].load(Relaxed)
    }

    pub fn set_state(&self, s: u64, st: u8) {
        if st == state::FREE {
            // Before the state, so a reader that sees the stripe in use again also sees it was
            // freed.
            self.incarnation[s as usize].fetch_add(1, SeqCst);
        }
        self.state[s as usize].store(st, SeqCst)
    }

    /// How many times stripe `s` has been freed.
    pub fn incarnation(&self, s: u64) -> u32 {
        self.incarnation[s as usize].load(SeqCst)
    }

    /// Maps `user` to `new` (an entry of timestamp `ts` at AFA block `afa`) unless a newer
    /// version is already mapped, keeping the per-stripe valid counts; `stripe_of` gives an AFA
    /// block's stripe. Returns whether the mapping changed.
    pub fn map(&self, user: u64, ts: u32, afa: u32, stripe_of: impl Fn(u32) -> u64) -> bool {
        let cell = &self.amt[user as usize];
        let new = entry(ts, afa);
        let mut old = cell.load(Relaxed);
        loop {
            if old != 0 && entry_ts(old) > ts {
                return false;
            }
            match cell.compare_exchange_weak(old, new, Relaxed, Relaxed) {
                Ok(_) => break,
                Err(o) => old = o,
            }
        }
        self.touch(user);
        if afa != TRIMMED {
            self.valid[stripe_of(afa) as usize].fetch_add(1, Relaxed);
        }
        if entry_is_data(old) {
            self.valid[stripe_of(entry_afa(old)) as usize].fetch_sub(1, Relaxed);
        }
        true
    }

    /// Moves `user` from `from` to `to` (same timestamp) if it is still mapped at `from`: GC's
    /// compare-and-swap. Returns whether it moved.
    pub fn remap(&self, user: u64, from: u64, to_afa: u32, stripe_of: impl Fn(u32) -> u64) -> bool {
        let to = entry(entry_ts(from), to_afa);
        if self.amt[user as usize].compare_exchange(from, to, Relaxed, Relaxed).is_ok() {
            self.touch(user);
            self.valid[stripe_of(to_afa) as usize].fetch_add(1, Relaxed);
            self.valid[stripe_of(entry_afa(from)) as usize].fetch_sub(1, Relaxed);
            true
        } else {
            false
        }
    }
}
