//! The replication phase with the placement policy (§5.3, Fig. 7), and trims.
//!
//! A write takes one timestamp and is logged at the fill point of its reactor's open hero
//! group: block `o` of the group is slot `o / chunk` at offset `o % chunk`. The primary copy
//! goes to the slot's chunk in the HH (on the slot's data member), and the m backup copies to
//! slot `j` of the group's VHs, which sit on the stripe's parity members, so every chunk of the
//! stripe gathers where its parity will be computed. Every copy carries its PMT slice (user
//! block, timestamp, AFA place, checksum) in the block's metadata, programmed with the data
//! (§5.4); backups carry the transient hint (§5.5) unless the Scala-WR ablation turns it off.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use flashrig_blockdev::{DevResult, WriteHints};
use flashrig_runtime::current_reactor;
use futures_util::future::join_all;

use super::format::{Oob, TrimRecord};
use super::space::OpenHg;
use super::tables::{state, TRIMMED};
use super::Inner;

/// One piece of a write: blocks `len` of the request from `req_off` land in slot `slot` of
/// `stripe` at `off`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WPiece {
    pub stripe: u64,
    pub slot: usize,
    pub off: u64,
    pub len: u64,
    pub req_off: u64,
}

enum Alloc {
    /// Pieces placed; the write is placed completely when `rest` is 0.
    Placed { pieces: Vec<WPiece>, rest: u64 },
    /// Another task of this reactor is asking for heroes; wait for it.
    Wait,
}

impl Inner {
    /// Places up to `blocks` blocks (from request offset `from`) at this reactor's fill point,
    /// building new hero groups from granted heroes as needed.
    fn allocate(self: &Arc<Self>, from: u64, blocks: u64) -> Alloc {
        let g = &self.geo;
        let r = current_reactor();
        let mut st = self.reactors[r].lock();
        let mut pieces = Vec::new();
        let mut done = 0;
        let mut filled = false;
        while done < blocks {
            if st.open.is_none() {
                // Assemble a hero group: an HH whose parity members have a granted VH.
                let pos = st.hh.iter().position(|&h| {
                    (0..g.m).all(|i| {
                        let p = g.parity_member(h as u64, i);
                        self.is_failed(p) || !st.vh[p].is_empty()
                    })
                });
                let Some(pos) = pos else { break };
                let h = st.hh.remove(pos).expect("found") as u64;
                for i in 0..g.m {
                    let p = g.parity_member(h, i);
                    let v = st.vh[p].pop_front().unwrap_or(super::tables::NONE);
                    self.t.set_vh(h, i, v);
                }
                self.t.set_state(h, state::OPEN);
                st.open = Some(OpenHg { stripe: h, fill: 0 });
            }
            let open = st.open.as_mut().expect("assembled above");
            let s = open.stripe;
            let slot = (open.fill / g.chunk_blocks) as usize;
            let off = open.fill % g.chunk_blocks;
            let len = (g.chunk_blocks - off).min(blocks - done);
            pieces.push(WPiece { stripe: s, slot, off, len, req_off: from + done });
            self.t.inflight[s as usize].fetch_add(1, Relaxed);
            open.fill += len;
            done += len;
            if open.fill == g.stripe_blocks() {
                self.t.set_state(s, state::FULL);
                st.full.push(s);
                st.open = None;
                filled = true;
            }
        }
        if pieces.is_empty() && st.asking {
            return Alloc::Wait;
        }
        drop(st);
        if filled {
            self.kick();
        }
        Alloc::Placed { pieces, rest: blocks - done }
    }

    pub(crate) async fn write(
        self: Arc<Self>,
        lba: u64,
        data: &[u8],
        hints: WriteHints,
    ) -> DevResult<()> {
        let bs = self.bs();
        let blocks = (data.len() / bs) as u64;
        self.c.user_writes.inc();
        self.c.user_write_bytes.add(data.len() as u64);
        self.opts.costs.charge_request().await;
        let ts = self.t.take_ts();
        let mut from = 0;
        while from < blocks {
            match self.allocate(from, blocks - from) {
                Alloc::Wait => {
                    // Another write of this reactor is asking the space manager for heroes:
                    // sleep until its answer is in. (Polling for it every microsecond kept
                    // the reactor busy with timers while the one grant it waits for was
                    // served on the manager's reactor.)
                    let r = current_reactor();
                    let answered = self.grant_done[r].listen();
                    if self.reactors[r].lock().asking {
                        answered.await;
                    }
                }
                Alloc::Placed { pieces, rest } => {
                    // Write what was placed before asking for more heroes: a conversion the
                    // grant may trigger waits for these pieces.
                    let placed = blocks - from - rest;
                    if !pieces.is_empty() {
                        self.write_pieces(lba, data, ts, &pieces, hints).await?;
                    }
                    from += placed;
                    if rest > 0 && placed == 0 {
                        self.c.grant_waits.inc();
                        let r = current_reactor();
                        self.reactors[r].lock().asking = true;
                        let got = self.request_heroes().await;
                        self.reactors[r].lock().asking = false;
                        self.grant_done[r].notify(usize::MAX);
                        got?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes the m + 1 copies of `pieces` and maps their blocks.
    async fn write_pieces(
        &self,
        lba: u64,
        data: &[u8],
        ts: u32,
        pieces: &[WPiece],
        hints: WriteHints,
    ) -> DevResult<()> {
        let g = &self.geo;
        let bs = self.bs();
        let mdb = self.mdb;
        if self.failed_count() > g.m {
            for p in pieces {
                self.t.inflight[p.stripe as usize].fetch_sub(1, Relaxed);
            }
            return Err(flashrig_blockdev::DevError::DeviceFailed {
                name: format!("{}: more than {} members failed", self.info.name, g.m),
            });
        }
        // Metadata of every piece, built once and shared by its copies: every copy of a block
        // carries the same record, which names the block's AFA place (format.rs, `Oob`).
        let mds: Vec<Vec<u8>> = pieces
            .iter()
            .map(|p| {
                let mut md = vec![0u8; p.len as usize * mdb];
                for b in 0..p.len as usize {
                    let ub = lba + p.req_off + b as u64;
                    let d = &data[(p.req_off as usize + b) * bs..][..bs];
                    let afa = g.afa(p.stripe, p.slot, p.off + b as u64);
                    let oob = Oob { user_block: ub as u32, ts, afa };
                    oob.encode(d, &mut md[b * mdb..]);
                }
                md
            })
            .collect();
        let members = self.members.read().clone();
        let mut futs = Vec::new();
        for (pi, p) in pieces.iter().enumerate() {
            let d = &data[p.req_off as usize * bs..][..p.len as usize * bs];
            let md = &mds[pi][..];
            let primary = g.data_member(p.stripe, p.slot);
            futs.push((primary, g.hh_lba(p.stripe) + p.off, d, md, hints));
            let backup_hints = WriteHints { transient: self.opts.transient_tags, ..hints };
            for i in 0..g.m {
                let v = self.t.vh(p.stripe, i);
                if v == super::tables::NONE {
                    continue;
                }
                let mem = g.parity_member(p.stripe, i);
                futs.push((mem, g.vh_lba(v, p.slot) + p.off, d, md, backup_hints));
            }
        }
        self.opts.costs.charge_member_ios(futs.len() as u64).await;
        let ios = futs.iter().filter(|f| !self.is_failed(f.0)).map(|&(mem, mlba, d, md, h)| {
            let dev = members[mem].clone();
            async move {
                let r = dev.write(mlba, d, Some(md), h).await;
                (mem, dev, r)
            }
        });
        let results = join_all(ios).await;
        let mut written = 0;
        let mut first_err = None;
        for (mem, dev, r) in results {
            match r {
                Ok(()) => written += 1,
                Err(e) => {
                    if let Err(e) = self.member_error(mem, &dev, e.clone()) {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        self.c.replica_writes.add(written);
        self.c
            .member_write_bytes
            .add(pieces.iter().map(|p| p.len).sum::<u64>() * bs as u64 * (g.m as u64 + 1));
        let mut maps = 0;
        for p in pieces {
            for b in 0..p.len {
                let ub = lba + p.req_off + b;
                let afa = g.afa(p.stripe, p.slot, p.off + b);
                self.t.p2l[afa as usize].store(ub as u32, Relaxed);
                if first_err.is_none() {
                    self.t.map(ub, ts, afa, |a| self.stripe_of(a));
                    maps += 1;
                }
            }
            self.t.inflight[p.stripe as usize].fetch_sub(1, Relaxed);
        }
        self.opts.costs.charge_map_updates(maps).await;
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Trims: the blocks map to "trimmed" at a new timestamp, and a trim record goes to the
    /// journal ring on every member so recovery replays it.
    pub(crate) async fn trim(self: Arc<Self>, lba: u64, blocks: u64) -> DevResult<()> {
        self.c.trims.inc();
        if self.failed_count() > self.geo.m {
            return Err(flashrig_blockdev::DevError::DeviceFailed {
                name: format!("{}: more than {} members failed", self.info.name, self.geo.m),
            });
        }
        let ts = self.t.take_ts();
        // Map first, so a checkpoint taken from here on covers this trim.
        for ub in lba..lba + blocks {
            let cur = self.t.amt[ub as usize].load(Relaxed);
            if cur != 0 {
                self.t.map(ub, ts, TRIMMED, |a| self.stripe_of(a));
            }
        }
        let pos = self.journal_pos.fetch_add(1, Relaxed);
        // The ring must not overwrite a record no durable checkpoint covers yet (the
        // checkpoint's position advances only once it is durable): when it is about to, take
        // a checkpoint first (it covers every trim mapped so far, this one included).
        if pos + 1 >= self.journal_ckpt_pos.load(Relaxed) + self.geo.journal_blocks() {
            let inner = self.clone();
            flashrig_runtime::spawn_on(self.sm_reactor, move || async move {
                let _g = inner.sm_work.lock(0).await;
                if pos + 1 >= inner.journal_ckpt_pos.load(Relaxed) + inner.geo.journal_blocks() {
                    inner.write_checkpoint().await
                } else {
                    Ok(())
                }
            })
            .await?;
            if pos < self.journal_ckpt_pos.load(Relaxed) {
                // A durable checkpoint covers this trim, so its record is not needed, and the
                // ring may already have given its slot to a later trim whose record this one
                // must not overwrite.
                return Ok(());
            }
        }
        let mut block = vec![0u8; self.bs()];
        TrimRecord { first: lba, count: blocks, ts }.encode(&mut block);
        let jlba = self.geo.journal_lba() + pos % self.geo.journal_blocks();
        let members = self.members.read().clone();
        let ios = (0..self.geo.n).filter(|&i| !self.is_failed(i)).map(|i| {
            let dev = members[i].clone();
            let b = &block;
            async move {
                let r = dev.write(jlba, b, None, WriteHints::NONE).await;
                (i, dev, r)
            }
        });
        for (i, dev, r) in join_all(ios).await {
            if let Err(e) = r {
                self.member_error(i, &dev, e)?;
            }
        }
        if (pos + 1).saturating_sub(self.journal_ckpt_pos.load(Relaxed))
            > self.geo.journal_blocks() / 2
        {
            self.kick();
        }
        Ok(())
    }
}
