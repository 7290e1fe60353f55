//! AFA-level GC (§5.2 (4), after FusionRAID): out-of-place writes leave invalid blocks in
//! converted stripes; GC packs the valid blocks of the emptiest stripes into a fresh HH as a
//! full stripe (data and host-computed parity, no replication: the stripe is complete), moves
//! their mappings with a compare-and-swap (a block overwritten meanwhile keeps its new place),
//! trims the drained HHs once a member flush has made durable both the copies and the user
//! writes that left the rest of the victims invalid, and recycles them at the next checkpoint.
//! Moved blocks keep their timestamps, so recovery treats the old and new copies as the same
//! version.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use flashrig_blockdev::{DevResult, WriteHints};
use futures_util::future::join_all;

use super::format::Oob;
use super::tables::{entry_afa, entry_ts, state, NONE};
use super::Inner;

/// A valid block being moved: user block, its AMT entry, and whether it was found corrupt
/// beyond redundancy (its data is in the destination's buffers).
struct Live {
    user: u64,
    entry: u64,
    lost: bool,
}

/// Destination stripes written between two member flushes. Each flush is an `fdatasync` of
/// every member file when serving over files, and flushing after every destination stripe
/// made one GC run of ~200 stripes hold the work lock for about a second while grants waited
/// (docs/benchmarks.md, "`scala` served over NBD"). The victims those stripes emptied are
/// trimmed only after the flush, so a power cut never loses a moved block.
const GC_FLUSH_EVERY_STRIPES: usize = 16;

/// The GC's destination being filled: data and metadata chunks, and the blocks in it; and
/// the victims waiting for the flush that makes their copies durable.
struct Dest {
    data: Vec<Vec<u8>>,
    mds: Vec<Vec<u8>>,
    moved: Vec<Live>,
    /// Victims drained since the last member flush (their live blocks all in destination
    /// stripes written so far, or none left): recycled (trimmed) by [`Inner::settle`] after
    /// the next one, which makes both the copies and the overwrites that emptied them durable.
    unflushed: Vec<u64>,
    /// Destination stripes written since the last member flush.
    unflushed_stripes: usize,
}

impl Inner {
    /// Runs GC until free HHs are back at the reserve or nothing can be gained: the valid
    /// blocks of the emptiest converted stripes (fewest valid first) are packed into whole new
    /// stripes, so each victim frees an HH and costs `valid / stripe` of one.
    pub(crate) async fn gc(self: &Arc<Self>) -> DevResult<()> {
        self.c.gc_runs.inc();
        let g = &self.geo;
        let target = g.reserve_hh as usize;
        let mut cands: Vec<(u32, u64)> = (0..g.hh)
            .filter(|&s| self.t.state(s) == state::CONVERTED)
            .map(|s| (self.t.valid[s as usize].load(Relaxed), s))
            .filter(|&(v, _)| (v as u64) < g.stripe_blocks())
            .collect();
        cands.sort_unstable();
        let mut dest = self.new_dest();
        let mut drained: Vec<u64> = Vec::new();
        for (_, v) in cands {
            let free = {
                let mgr = self.mgr.lock();
                mgr.window.len() + mgr.pool.len() + mgr.pending.len() + dest.unflushed.len()
            };
            if free >= target {
                break;
            }
            if self.t.state(v) != state::CONVERTED {
                continue;
            }
            self.t.set_state(v, state::VICTIM);
            self.drain_victim(v, &mut dest, &mut drained).await?;
            if dest.moved.is_empty() {
                // What the drained victims still held valid is in destination stripes
                // written so far. The victims wait for the next member flush (`settle`) even
                // when no destination does: a block of a victim that was not valid any more
                // was overwritten (or trimmed) in the AMT, but the user write that overwrote
                // it may still be in the members' write caches, and the newest durable
                // checkpoint may still map the block's flushed version into the victim.
                // Trimming the victim before that write is durable lets a power cut keep the
                // trim and lose the write, and recovery then reads zeros where a flushed
                // version was. A write maps its blocks only once its copies completed on the
                // members, and GC saw the block invalid (or its remap failed) after that, so
                // the flush that `settle` issues later makes the write durable.
                dest.unflushed.append(&mut drained);
            }
        }
        if !dest.moved.is_empty() {
            self.write_dest(&mut dest, &mut drained).await?;
        }
        self.settle(&mut dest).await?;
        self.bufs.give(dest.data.into_iter().chain(dest.mds));
        Ok(())
    }

    /// Makes the destination stripes written so far durable (one member flush), then trims
    /// and recycles the victims drained so far: the flush also makes durable the user writes
    /// that overwrote the victims' invalid blocks (they were mapped before the victims were
    /// drained), so no trim of a victim can outlive, in a power cut, the write that made it
    /// garbage.
    async fn settle(self: &Arc<Self>, dest: &mut Dest) -> DevResult<()> {
        if dest.unflushed_stripes == 0 && dest.unflushed.is_empty() {
            return Ok(());
        }
        // The copies must be durable before the victims are trimmed (a trim is durable at
        // once on an SSD): otherwise a power cut could lose flushed data.
        self.flush_members().await?;
        dest.unflushed_stripes = 0;
        let members = self.members.read().clone();
        for v in std::mem::take(&mut dest.unflushed) {
            self.recycle(v, &members).await?;
        }
        Ok(())
    }

    fn new_dest(&self) -> Dest {
        let g = &self.geo;
        let chunk = g.chunk_blocks as usize;
        // Zeroed: a destination that is not filled is written with zeros in its free slots.
        Dest {
            data: (0..g.k).map(|_| self.bufs.take_zeroed(chunk * self.bs())).collect(),
            mds: (0..g.k).map(|_| self.bufs.take_zeroed(chunk * self.mdb)).collect(),
            moved: Vec::new(),
            unflushed: Vec::new(),
            unflushed_stripes: 0,
        }
    }

    /// The user block AFA block `afa` holds, if it is still that block's current place.
    pub(crate) fn live_at(&self, afa: u32) -> Option<(u32, u64)> {
        let user = self.t.p2l[afa as usize].load(Relaxed);
        if user == NONE {
            return None;
        }
        let e = self.t.amt[user as usize].load(Relaxed);
        (e != 0 && entry_afa(e) == afa).then_some((user, e))
    }

    /// Copies the valid blocks of victim `v` into the destination, writing it out each time it
    /// fills; `v` is recycled once everything it held is written elsewhere.
    async fn drain_victim(
        self: &Arc<Self>,
        v: u64,
        dest: &mut Dest,
        drained: &mut Vec<u64>,
    ) -> DevResult<()> {
        let g = &self.geo;
        let bs = self.bs();
        let mdb = self.mdb;
        let chunk = g.chunk_blocks as usize;
        let mut buf = self.bufs.take(chunk * bs);
        let mut md = self.bufs.take(chunk * mdb);
        for j in 0..g.k {
            // A victim takes no new blocks, so a slot that holds nothing live now never will:
            // it is not read at all. A sequential overwrite leaves most victims empty.
            if (0..chunk as u64).all(|off| self.live_at(g.afa(v, j, off)).is_none()) {
                continue;
            }
            // Checked (and repaired) before it moves: the destination's checksum and parity
            // are computed over what is copied, so a bad block copied as it is would come out
            // looking right.
            let lost = self.read_slot_verified(v, j, 0, &mut buf, &mut md, false).await?;
            for off in 0..chunk {
                let afa = g.afa(v, j, off as u64);
                let Some((user, e)) = self.live_at(afa) else { continue };
                let n = dest.moved.len();
                let (dj, doff) = (n / chunk, n % chunk);
                dest.data[dj][doff * bs..][..bs].copy_from_slice(&buf[off * bs..][..bs]);
                // The record names the block's new place, so it is written once the destination
                // is known (`write_dest`).
                dest.moved.push(Live { user: user as u64, entry: e, lost: lost.contains(&off) });
                if dest.moved.len() as u64 == g.stripe_blocks() {
                    self.write_dest(dest, drained).await?;
                }
            }
        }
        self.bufs.give([buf, md]);
        drained.push(v);
        Ok(())
    }

    /// Writes the destination as a whole stripe in a fresh HH, remaps its blocks, and
    /// recycles the victims drained before it.
    async fn write_dest(
        self: &Arc<Self>,
        dest: &mut Dest,
        drained: &mut Vec<u64>,
    ) -> DevResult<()> {
        let g = &self.geo;
        let bs = self.bs();
        let chunk = g.chunk_blocks as usize;
        if self.mgr.lock().window.is_empty() {
            // Victims drained so far are wholly in `dest` or earlier stripes only once `dest`
            // is written, so nothing is recycled by this checkpoint that is still needed. The
            // victims of earlier destinations are settled first, so that the checkpoint can
            // bring their HHs into the window, and so that it never records a mapping into
            // a destination that is not durable yet.
            self.settle(dest).await?;
            self.write_checkpoint().await?;
        }
        let Some(dst) = self.mgr.lock().window.pop_front() else {
            return Err(flashrig_blockdev::DevError::NoSpace(format!(
                "scala {}: GC found no free HH for its destination",
                self.info.name
            )));
        };
        let dst = dst as u64;
        let next = dest.moved.len();
        let mdb = self.mdb;
        for (i, live) in dest.moved.iter().enumerate() {
            let (dj, doff) = (i / chunk, i % chunk);
            let afa = g.afa(dst, dj, doff as u64);
            let oob = Oob { user_block: live.user as u32, ts: entry_ts(live.entry), afa };
            let d = &dest.data[dj][doff * bs..][..bs];
            let out = &mut dest.mds[dj][doff * mdb..];
            if live.lost {
                // Lost beyond redundancy at its old place: it stays marked corrupt at the new
                // one, rather than getting a checksum over wrong data.
                oob.encode_poisoned(d, out);
            } else {
                oob.encode(d, out);
            }
        }
        self.opts.costs.charge_copy((next * bs) as u64).await;
        let (parity, pmd) = self.encode(&dest.data, &dest.mds)?;
        self.opts.costs.charge_parity((g.k * chunk * bs) as u64).await;
        let members = self.members.read().clone();
        let ios = (0..g.k).map(|j| {
            let mem = g.data_member(dst, j);
            let dev = members[mem].clone();
            let (d, md) = (&dest.data[j], &dest.mds[j]);
            async move {
                if self.is_failed(mem) {
                    return (mem, dev, Ok(()));
                }
                let r = dev.write(g.hh_lba(dst), d, Some(md), WriteHints::NONE).await;
                (mem, dev, r)
            }
        });
        for (mem, dev, r) in join_all(ios).await {
            if let Err(e) = r {
                self.member_error(mem, &dev, e)?;
            }
        }
        self.write_parity_chunks(dst, &parity, &pmd, None).await?;
        self.bufs.give(parity.into_iter().chain(pmd));
        self.opts.costs.charge_member_ios((g.k + g.m) as u64).await;
        self.c.member_write_bytes.add(((g.k + g.m) * chunk * bs) as u64);
        self.t.set_state(dst, state::CONVERTED);
        let mut count = 0;
        for (i, live) in dest.moved.drain(..).enumerate() {
            let afa = g.afa(dst, i / chunk, (i % chunk) as u64);
            self.t.p2l[afa as usize].store(live.user as u32, Relaxed);
            if self.t.remap(live.user, live.entry, afa, |a| self.stripe_of(a)) {
                count += 1;
            }
        }
        for d in dest.data.iter_mut().chain(dest.mds.iter_mut()) {
            d.fill(0);
        }
        self.c.gc_moved_blocks.add(count);
        self.c.gc_stripes.inc();
        // The drained victims hold nothing valid now: they are trimmed and recycled once this
        // stripe is durable.
        dest.unflushed.append(drained);
        dest.unflushed_stripes += 1;
        if dest.unflushed_stripes >= GC_FLUSH_EVERY_STRIPES {
            self.settle(dest).await?;
        }
        Ok(())
    }

    async fn recycle(&self, v: u64, members: &[flashrig_blockdev::DevRef]) -> DevResult<()> {
        let g = &self.geo;
        // Under the stripe's lock: a repair of one of the victim's blocks (a user read that
        // began before GC remapped it) either lands before the trims or finds the stripe
        // recycled (integrity.rs).
        let _g = self.stripe_locks.lock(v).await;
        if self.t.valid[v as usize].load(Relaxed) != 0 {
            // Something still maps here (it cannot, unless a count drifted): keep it.
            self.t.set_state(v, state::CONVERTED);
            return Ok(());
        }
        let trims = (0..g.n).filter(|&i| !self.is_failed(i)).map(|i| {
            let dev = members[i].clone();
            async move {
                let r = dev.trim(g.hh_lba(v), g.chunk_blocks).await;
                (i, dev, r)
            }
        });
        for (i, dev, r) in join_all(trims).await {
            if let Err(e) = r {
                self.member_error(i, &dev, e)?;
            }
        }
        for afa in g.afa(v, 0, 0)..g.afa(v, 0, 0) + g.stripe_blocks() as u32 {
            self.t.p2l[afa as usize].store(NONE, Relaxed);
        }
        self.t.set_state(v, state::FREE);
        self.mgr.lock().pending.push(v as u32);
        Ok(())
    }
}
