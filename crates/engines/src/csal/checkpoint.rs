//! Persistent metadata (§4.4, "Optimization 1" and "Optimization 2"): the state slots (chunk
//! and zone states and SIDs, the checkpoint SID, the clean flag), the P2L table written when a
//! chunk or zone closes, and checkpoints.
//!
//! A checkpoint (1) notes the checkpoint SID, the smallest SID of a container open now (or
//! the next SID when none is), and the containers released so far, and copies every dirty L2P
//! page and the validity bitmaps; (2) flushes both members, so that every block those copies
//! map is durable; (3) writes the copies; (4) writes a state slot with the new checkpoint SID
//! and flushes. The copies are taken before the flush because writes keep completing during
//! it: a page copied later could map a block the flush did not cover. Every block written
//! after step 1 lands in a container with a SID at or above the checkpoint SID, which is what
//! checkpoint recovery replays. Only then do the released containers become free: until this
//! checkpoint, the L2P on the fast device could still map blocks in them.

use std::sync::atomic::Ordering;

use flashrig_blockdev::{DevResult, WriteHints, ZoneCommand};
use flashrig_runtime::sleep_ns;

use super::format::{encode_p2l, CState, P2lEntry, StateSlot};
use super::Inner;

impl Inner {
    /// Writes the next state slot (they alternate, so a torn write leaves the other whole).
    /// The caller holds the meta lock.
    pub(crate) async fn persist_state(&self, clean: bool) -> DevResult<()> {
        let (slot, at) = {
            let mut st = self.st.lock();
            st.generation += 1;
            let slot = StateSlot {
                generation: st.generation,
                ckpt_sid: st.ckpt_sid,
                next_sid: st.next_sid,
                clean,
                bitmap_generation: st.bitmap_generation,
                containers: st.containers.iter().map(|c| (c.state, c.sid)).collect(),
                top_sids: st.containers.iter().map(|c| c.top_sid).collect(),
            };
            let at = self.geo.state_start + (st.generation % 2) * self.geo.state_blocks;
            (slot, at)
        };
        let b = slot.encode(self.geo.state_blocks, self.bs());
        self.fast.write(at, &b, None, WriteHints::NONE).await?;
        self.c.state_writes.inc();
        Ok(())
    }

    pub(crate) async fn write_p2l(
        &self,
        c: usize,
        sid: u64,
        entries: &[P2lEntry],
    ) -> DevResult<()> {
        let b = encode_p2l(sid, entries, self.geo.p2l_blocks(c), self.bs());
        self.fast.write(self.geo.p2l_at(c), &b, None, WriteHints::NONE).await?;
        self.c.p2l_writes.inc();
        Ok(())
    }

    /// Closes an open chunk or zone: waits for the writes in flight into it, flushes its
    /// member (a P2L table never names a block a power cut could still lose), writes its P2L
    /// table and a state slot. The caller holds the meta lock.
    pub(crate) async fn close_container(&self, c: usize) -> DevResult<()> {
        self.drain_container(c).await;
        if self.geo.is_zone(c) {
            self.zoned.flush().await?;
        } else {
            self.fast.flush().await?;
        }
        let (sid, p2l) = {
            let st = self.st.lock();
            let ch = &st.containers[c];
            (ch.sid, ch.p2l[..ch.wp as usize].to_vec())
        };
        self.write_p2l(c, sid, &p2l).await?;
        {
            let mut st = self.st.lock();
            let ch = &mut st.containers[c];
            ch.state = CState::Closed;
            ch.p2l = Vec::new();
        }
        self.persist_state(false).await
    }

    /// Writes the validity bitmaps (at checkpoints).
    pub(crate) async fn write_bitmaps(&self, bits: &[u64]) -> DevResult<()> {
        let bs = self.bs();
        let mut b = vec![0u8; self.geo.bitmap_blocks as usize * bs];
        for (i, w) in bits.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        self.fast.write(self.geo.bitmap_start, &b, None, WriteHints::NONE).await
    }

    pub(crate) async fn checkpoint(&self, clean: bool) -> DevResult<()> {
        let _g = self.meta.lock(0).await;
        let pager = self.pager.lock(0).await;
        // The dirty L2P pages are copied here, before the flush, not after it. User writes and
        // moves keep completing while the members flush (a ZNS SSD's flush takes long enough
        // for several), so a page copied after the flush could map an LBA to a block written
        // after it, which a power cut before this checkpoint's last flush can still lose;
        // recovery trusts the checkpointed L2P and would then return whatever that place held
        // before (`tests/csal_checkpoint_order.rs`). An entry set after the copy leaves its page
        // dirty, and its block lands in a container whose SID is at or above `ckpt_sid`, which
        // recovery replays. The validity bitmaps are copied at the same moment.
        let (ckpt_sid, released, bits, pages) = {
            let mut st = self.st.lock();
            let open_min =
                st.containers.iter().filter(|c| c.state == CState::Open).map(|c| c.sid).min();
            let released: Vec<usize> = (0..st.containers.len())
                .filter(|&i| st.containers[i].state == CState::Released)
                .collect();
            let pages = Self::take_dirty_pages(&mut st);
            (open_min.unwrap_or(st.next_sid), released, st.valid_bits.clone(), pages)
        };
        self.flush_members().await?;
        self.write_pages(&pages).await?;
        drop(pager);
        self.write_bitmaps(&bits).await?;
        self.fast.flush().await?;
        {
            let mut st = self.st.lock();
            st.ckpt_sid = ckpt_sid;
            st.bitmap_generation = st.generation + 1;
            // The released containers are free from here: the flush above made every block
            // moved out of them durable, and the pages just written map those blocks. They
            // are marked free before the state slot is written, so that the slot says so.
            // Marked after it (as they were until 2026-11-27), the durable slot still named
            // them released, with the P2L tables of their last life; a zone reused next was
            // reset before any later slot, and a cut in between left P2L recovery trusting a
            // table of a reset zone, whose copy of a block could win a tie of SIDs against the
            // moved copy and read back as zeros (found by `record_blocks_without_fast_metadata
            // _bytes`, seed 900, once compactions ran beside checkpoints). Nothing reuses them
            // before the slot is durable: opening a chunk or a zone takes the meta lock, held
            // here until the flush below.
            for c in released {
                // A read still going to it keeps it released until the next checkpoint.
                if st.containers[c].readers == 0 && st.containers[c].state == CState::Released {
                    st.containers[c].state = CState::Free;
                    st.containers[c].wp = 0;
                }
            }
        }
        self.persist_state(clean).await?;
        self.fast.flush().await?;
        self.c.checkpoints.inc();
        self.space_event.notify(usize::MAX);
        Ok(())
    }

    /// Formats the members: superblock, all-unmapped L2P pages, every zone reset, a clean
    /// first checkpoint.
    pub(crate) async fn format(&self) -> DevResult<()> {
        let bs = self.bs();
        // Old state slots must not look valid to a later recovery (P2L tables carry the SID
        // of their container's life, which a new format's SIDs never match... unless they
        // restart at 1, so the tables go too).
        self.fast.trim(self.geo.state_start, self.geo.data_start - self.geo.state_start).await?;
        let page = super::l2p::encode_page(&Self::empty_page(), bs);
        // L2P pages in runs of up to 64 blocks.
        let mut p = 0;
        while p < self.geo.l2p_pages {
            let n = (self.geo.l2p_pages - p).min(64);
            let run: Vec<u8> = page.iter().copied().cycle().take(n as usize * bs).collect();
            self.fast.write(self.geo.l2p_start + p, &run, None, WriteHints::NONE).await?;
            p += n;
        }
        for z in 0..self.geo.zones {
            self.zoned.zone(ZoneCommand::Reset { zone: z }).await?;
        }
        {
            let _g = self.meta.lock(0).await;
            let bits = self.st.lock().valid_bits.clone();
            self.write_bitmaps(&bits).await?;
            self.st.lock().bitmap_generation = 1;
            self.persist_state(false).await?;
        }
        self.fast.write(0, &self.geo.encode_superblock(), None, WriteHints::NONE).await?;
        self.flush_members().await
    }

    pub(crate) async fn wait_service_stopped(&self) {
        while self.service_running.load(Ordering::SeqCst) {
            self.work_event.notify(usize::MAX);
            sleep_ns(10_000).await;
        }
    }

    /// Closes the open chunk and finishes every stream's zone (a clean shutdown leaves
    /// nothing open, so that loading the metadata region is all the next open does).
    pub(crate) async fn close_all(&self) -> DevResult<()> {
        let _g = self.meta.lock(0).await;
        let chunk = self.st.lock().open_chunk.take();
        if let Some(c) = chunk {
            self.close_container(c).await?;
        }
        let zones: Vec<usize> = self.st.lock().streams.drain().map(|(_, (z, _))| z).collect();
        for z in zones {
            self.finish_zone(z).await?;
        }
        Ok(())
    }
}
