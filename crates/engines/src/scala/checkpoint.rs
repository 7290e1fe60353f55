//! Periodic checkpoints (§5.4): the AMT, which stripes are converted, and which stripes may be
//! written before the next checkpoint, so recovery scans only those.
//!
//! A checkpoint is *full* (the whole AMT, in one of two slots) or a *delta* (only the AMT pages
//! changed since the previous checkpoint, appended to the delta log of the members that hold
//! the full one it extends). A full checkpoint writes 8 bytes per user block, 0.2% of the
//! capacity per copy; taking one at every refill of the grant window cost a third of the bytes
//! the array wrote at full scale, so checkpoints are deltas until the log is full or a delta
//! would be as large as a full one. A new full checkpoint goes to the slot the current base
//! does not occupy, so the base and its deltas stay valid until the new one is durable.
//!
//! Order of a checkpoint (on the space manager's reactor, under its work lock, so no grant
//! happens meanwhile):
//! 1. recycled HHs (pending) join the free pool, and the grant window is refilled from it;
//! 2. the scan list is every stripe granted, open, full, converting or in the window (a
//!    conversion in flight may not have its parity on the members yet, so recovery checks it);
//! 3. the AMT (or its changed pages) is snapshot (every entry in it was written by a completed
//!    write);
//! 4. the members are flushed (the snapshot's data is durable), the checkpoint is written, and
//!    the members are flushed again;
//! 5. only then may the trim journal's ring overwrite the records of the trims it covers.
//!
//! A recycled HH is granted only from a window declared by a durable checkpoint, and that
//! checkpoint no longer points into it.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use flashrig_blockdev::{DevResult, WriteHints};
use futures_util::future::join_all;

use super::format::{Checkpoint, Delta, AMT_PAGE_ENTRIES};
use super::space::{CkptBase, Manager};
use super::tables::state;
use super::Inner;

/// What one checkpoint writes.
enum Snapshot {
    Full(Checkpoint),
    Delta(Delta),
}

impl Inner {
    /// A checkpoint: a delta when the delta log has room for one, else a full one.
    pub(crate) async fn write_checkpoint(self: &Arc<Self>) -> DevResult<()> {
        self.checkpoint(false).await
    }

    /// A full checkpoint (format, recovery: nothing before it may be needed).
    pub(crate) async fn write_full_checkpoint(self: &Arc<Self>) -> DevResult<()> {
        self.checkpoint(true).await
    }

    async fn checkpoint(self: &Arc<Self>, force_full: bool) -> DevResult<()> {
        let g = &self.geo;
        let bs = self.bs();
        let (seq, snap, base, journal) = {
            let mut mgr = self.mgr.lock();
            let pending = std::mem::take(&mut mgr.pending);
            mgr.pool.extend(pending);
            let target = self.window_target();
            self.rebalance_window(&mut mgr, target);
            while mgr.window.len() < target {
                let Some(s) = mgr.pool.pop_front() else { break };
                self.t.set_state(s as u64, state::HELD);
                mgr.window.push_back(s);
            }
            mgr.ckpt_seq += 1;
            let seq = mgr.ckpt_seq;
            let base = mgr.ckpt_base.clone();
            let used = mgr.dlog_used_blocks;
            drop(mgr);
            let scan: Vec<u32> = (0..g.hh)
                .filter(|&s| {
                    matches!(
                        self.t.state(s),
                        state::HELD | state::OPEN | state::FULL | state::CONVERTING
                    )
                })
                .map(|s| s as u32)
                .collect();
            let journal = self.journal_pos.load(Relaxed);
            let next_ts = self.t.next_ts.load(Relaxed);
            // Taken before the snapshot: a page changed after this is in the next delta too.
            let dirty = self.t.take_dirty_pages();
            let pages_total = (g.user_blocks as usize).div_ceil(AMT_PAGE_ENTRIES);
            let delta =
                base.as_ref().filter(|_| !force_full && dirty.len() * 2 < pages_total).map(|b| {
                    let amt_len = self.t.amt.len();
                    let pages = dirty
                        .iter()
                        .map(|&p| {
                            let first = p as usize * AMT_PAGE_ENTRIES;
                            let last = (first + AMT_PAGE_ENTRIES).min(amt_len);
                            (p, self.t.amt[first..last].iter().map(|e| e.load(Relaxed)).collect())
                        })
                        .collect();
                    let mut converted = vec![0u8; (g.hh as usize).div_ceil(8)];
                    for s in 0..g.hh {
                        if self.converted_for_checkpoint(s) {
                            converted[s as usize / 8] |= 1 << (s % 8);
                        }
                    }
                    Delta {
                        seq,
                        base_seq: b.seq,
                        next_ts,
                        pages,
                        converted,
                        stripes: g.hh,
                        scan: scan.clone(),
                    }
                });
            let delta = delta.filter(|d| used + (d.encoded_len(bs) / bs) as u64 <= g.dlog_blocks());
            let snap = match delta {
                Some(d) => Snapshot::Delta(d),
                None => Snapshot::Full(Checkpoint {
                    seq,
                    next_ts,
                    amt: self.t.amt.iter().map(|e| e.load(Relaxed)).collect(),
                    converted: (0..g.hh)
                        .map(|s| u8::from(self.converted_for_checkpoint(s)))
                        .collect(),
                    scan,
                }),
            };
            (seq, snap, base, journal)
        };
        self.flush_members().await?;
        let members = self.members.read().clone();
        let (buf, lba, copies) = match &snap {
            Snapshot::Full(c) => {
                // The slot the current base does not hold, so base and deltas survive until
                // this one is durable.
                let slot = base.as_ref().map_or(seq % 2, |b| 1 - b.slot);
                // m + 1 copies survive m failures; they rotate so that no member takes them all.
                let copies: Vec<usize> = (0..g.n)
                    .map(|x| (x + seq as usize) % g.n)
                    .filter(|&i| !self.is_failed(i))
                    .take(g.m + 1)
                    .collect();
                let mut mgr = self.mgr.lock();
                mgr.ckpt_base = Some(CkptBase { seq, slot, members: copies.clone() });
                mgr.dlog_used_blocks = 0;
                drop(mgr);
                (c.encode(g), g.ckpt_lba(slot), copies)
            }
            Snapshot::Delta(d) => {
                let b = base.as_ref().expect("a delta extends a base");
                let buf = d.encode(bs);
                let mut mgr = self.mgr.lock();
                let lba = g.dlog_lba() + mgr.dlog_used_blocks;
                mgr.dlog_used_blocks += (buf.len() / bs) as u64;
                drop(mgr);
                let copies: Vec<usize> =
                    b.members.iter().copied().filter(|&i| !self.is_failed(i)).collect();
                (buf, lba, copies)
            }
        };
        let ios = copies.iter().map(|&i| {
            let dev = members[i].clone();
            let b = &buf;
            async move {
                let r = dev.write(lba, b, None, WriteHints::NONE).await;
                (i, dev, r)
            }
        });
        for (i, dev, r) in join_all(ios).await {
            if let Err(e) = r {
                self.member_error(i, &dev, e)?;
            }
        }
        self.flush_members().await?;
        // Only now may the trim journal's ring reuse the slots of the trims this checkpoint
        // covers: until it is durable, a power cut falls back to the previous checkpoint, which
        // needs those records. (Advancing it at the snapshot let trims issued during the
        // checkpoint's flushes overwrite flushed trim records; a cut before the checkpoint was
        // durable then brought the trimmed blocks back: the swarm's seed 3001166.)
        self.journal_ckpt_pos.fetch_max(journal, Relaxed);
        self.c.checkpoints.inc();
        if matches!(snap, Snapshot::Delta(_)) {
            self.c.checkpoint_deltas.inc();
        }
        self.c.checkpoint_bytes.add(buf.len() as u64 * copies.len() as u64);
        Ok(())
    }

    /// Whether a checkpoint records stripe `s` as converted. A GC victim being drained is a
    /// converted stripe too: if a power cut loses the trims that recycle it, recovery must
    /// still know that it held data, so that it trims what the victim left (were the stale
    /// chunks left, a hero group built on the HH later would compute its partial parity over
    /// them).
    fn converted_for_checkpoint(&self, s: u64) -> bool {
        matches!(self.t.state(s), state::CONVERTED | state::VICTIM)
    }

    /// When the window holds HHs that cannot form a hero group now (a parity member has no
    /// free VH: its VHs sit in other reactors' open groups), swaps them for pool HHs that can,
    /// so a grant is not refused while the array is nearly empty. Safe at a checkpoint: the
    /// window only ever holds HHs nobody was granted, and the new checkpoint declares the new
    /// window.
    fn rebalance_window(&self, mgr: &mut Manager, target: usize) {
        // Usability depends only on an HH's rotation (`s mod n` names its parity members).
        let n = self.geo.n as u64;
        let by_rotation: Vec<bool> = (0..n).map(|r| self.hh_usable(mgr, r)).collect();
        let usable_hh = |h: &u32| by_rotation[(*h as u64 % n) as usize];
        if mgr.window.iter().all(usable_hh) {
            return;
        }
        let (keep, back): (Vec<u32>, Vec<u32>) = mgr.window.drain(..).partition(usable_hh);
        let (usable, rest): (Vec<u32>, Vec<u32>) = mgr.pool.drain(..).partition(usable_hh);
        let want = target.saturating_sub(keep.len()).min(usable.len());
        mgr.window.extend(keep);
        for &h in &usable[..want] {
            self.t.set_state(h as u64, state::HELD);
            mgr.window.push_back(h);
        }
        for &h in &back {
            self.t.set_state(h as u64, state::FREE);
        }
        // The pool keeps its order otherwise; the passed-over HHs go to its end.
        mgr.pool.extend(usable[want..].iter().chain(&rest).chain(&back));
    }

    /// Formats the members: trims them whole, writes the superblock everywhere, puts every
    /// hero on the free lists, and writes the first checkpoint.
    pub(crate) async fn format(self: &Arc<Self>) -> DevResult<()> {
        let g = &self.geo;
        let members = self.members.read().clone();
        let mut sb = vec![0u8; self.bs()];
        super::format::encode_superblock(g, &mut sb);
        let ios = members.iter().map(|d| {
            let d = d.clone();
            let sb = &sb;
            async move {
                d.trim(0, d.info().num_blocks).await?;
                d.write(0, sb, None, WriteHints::NONE).await
            }
        });
        for r in join_all(ios).await {
            r?;
        }
        // Members that keep no payload (timing-only SSD modes) read the superblock back as
        // something else; when none keeps it, nothing the array reads could pass a check, so
        // checks are off. One member that keeps it is enough to leave them on: a member that
        // does not return what was written is then a faulty member like any other.
        let mut kept = 0;
        for d in &members {
            let mut b = vec![0u8; self.bs()];
            d.read(0, &mut b, None).await?;
            kept += usize::from(b == sb);
        }
        self.checks.store(kept > 0, Relaxed);
        {
            let mut mgr = self.mgr.lock();
            mgr.pool.extend(0..g.hh as u32);
            for list in mgr.vh_free.iter_mut() {
                list.extend(0..g.vh_per_member as u32);
            }
        }
        let inner = self.clone();
        let sm = self.sm_reactor;
        flashrig_runtime::spawn_on(sm, move || async move {
            let _g = inner.sm_work.lock(0).await;
            inner.write_full_checkpoint().await
        })
        .await
    }
}
