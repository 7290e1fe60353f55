//! Rebuild: a replacement member takes a failed member's slot. Every live row is first marked
//! as missing that member's slot (reads and writes avoid it there); rows allocated from then on
//! are written to the replacement like any member. Then each marked row is refilled under its
//! exclusive row lock, so no write to the row is in flight meanwhile:
//!
//! - a log row: each replica set with a slot on the member is copied, data and metadata, from
//!   another copy of the set (the metadata's replica index rewritten for the new slot);
//! - a stripe row: the member's chunk is reconstructed from k others, and its metadata
//!   regenerated from the host's reverse map (the same bytes the conversion wrote).
//!
//! A write that skipped the member while it was failed marks its row missing there; rebuild
//! repeats until no live row is marked, then flushes the replacement.

use std::sync::atomic::Ordering;

use flashrig_blockdev::{DevError, DevRef, DevResult, WriteHints};

use super::format::{BlockMd, ParityKey, Tag, FORMAT_VERSION};
use super::state::{Kind, Owner};
use super::Inner;

impl Inner {
    /// Replaces member `slot` with `replacement` and rebuilds its part of every live row.
    pub(crate) async fn rebuild(&self, slot: usize, replacement: DevRef) -> DevResult<()> {
        if slot >= self.geo.members() {
            return Err(DevError::Invalid(format!("twophase: no member slot {slot}")));
        }
        let need = self.geo.rows * self.geo.chunk_blocks;
        let ri = replacement.info();
        if ri.block_size != self.info.block_size
            || ri.num_blocks < need
            || ri.md_bytes_per_block as usize != self.md_bytes
        {
            return Err(DevError::Invalid(format!(
                "twophase: replacement {} ({} blocks of {} bytes, {} metadata bytes) cannot \
                 hold {need} blocks of {} bytes with {} metadata bytes",
                ri.name,
                ri.num_blocks,
                ri.block_size,
                ri.md_bytes_per_block,
                self.info.block_size,
                self.md_bytes
            )));
        }
        self.tables.lock().mark_missing_everywhere(slot);
        {
            let mut members = self.members.write();
            members[slot] = replacement.clone();
            self.incarnation[slot].fetch_add(1, Ordering::AcqRel);
        }
        self.failed[slot].store(false, Ordering::Release);
        loop {
            let todo = self.tables.lock().rows_missing(slot);
            if todo.is_empty() {
                break;
            }
            for r in todo {
                self.rebuild_row(r, slot).await?;
            }
        }
        replacement.flush().await
    }

    async fn rebuild_row(&self, r: u64, slot: usize) -> DevResult<()> {
        let _x = self.rowlocks.exclusive(r).await;
        // What the row is now, pinned so that it is not reused while being copied.
        let snapshot = {
            let mut t = self.tables.lock();
            let row = t.row(r);
            if !row.live() || row.missing & (1 << slot) == 0 {
                t.clear_missing(r, slot);
                return Ok(());
            }
            if row.kind == Kind::Stripe && row.building {
                // Not written yet: its writer will include the replacement.
                t.clear_missing(r, slot);
                return Ok(());
            }
            let fills: Vec<u32> = row.sets.iter().map(|s| s.fill).collect();
            let snap = (row.kind, row.gen, fills, row.owners.clone(), row.stripe_seq);
            t.pin(r);
            snap
        };
        let res = self.rebuild_row_pinned(r, slot, snapshot).await;
        let mut t = self.tables.lock();
        t.unpin(r);
        if res.is_ok() {
            t.clear_missing(r, slot);
            self.c.rebuilt_rows.inc();
        }
        res
    }

    async fn rebuild_row_pinned(
        &self,
        r: u64,
        slot: usize,
        (kind, gen, fills, owners, stripe_seq): (Kind, u16, Vec<u32>, Vec<Owner>, u64),
    ) -> DevResult<()> {
        let (bs, mdb) = (self.block_bytes(), self.md_bytes);
        let (k, m, c) = (self.geo.k, self.geo.m, self.geo.chunk_blocks as usize);
        let lba = self.geo.member_lba(r);
        let (data, md) = match kind {
            Kind::Log => {
                let Some((set, j)) = self.geo.set_of_member(r, slot) else { return Ok(()) };
                let fill = fills[set] as usize;
                if fill == 0 {
                    return Ok(());
                }
                let mut data = vec![0u8; fill * bs];
                let mut md = vec![0u8; fill * mdb];
                self.read_log(r, set, 0, &mut data, Some(&mut md), (j + 1) % (m + 1), Some(slot))
                    .await?;
                for mb in md.chunks_exact_mut(mdb) {
                    if let Ok(Some(b)) = BlockMd::decode(mb) {
                        if b.tag.is_log() && b.gen == gen {
                            BlockMd::set_index(mb, j);
                        }
                    }
                }
                (data, md)
            }
            Kind::Stripe => {
                let x = self.geo.chunk_index(r, slot);
                let mut shards = self.read_chunks(r, 0, c as u64, &[x], Some(slot)).await?;
                let data = shards[x].take().expect("reconstructed");
                let mut md = vec![0u8; c * mdb];
                for (b, (mb, block)) in
                    md.chunks_exact_mut(mdb).zip(data.chunks_exact(bs)).enumerate()
                {
                    let bm = if x < k {
                        let o = owners[x * c + b];
                        match o.trim() {
                            Some(rec) => {
                                let start =
                                    self.tables.lock().trims.get(&rec).map_or(0, |t| t.start);
                                BlockMd::item(Tag::StripeTrim, start, x, rec, gen)
                            }
                            None if o.is_item() => {
                                BlockMd::item(Tag::StripeData, o.key, x, o.seq, gen)
                            }
                            None => BlockMd::item(Tag::StripePad, 0, x, stripe_seq, gen),
                        }
                    } else {
                        let key = ParityKey { row: r, k, m, r: x - k, version: FORMAT_VERSION };
                        BlockMd::parity(key, stripe_seq, gen)
                    };
                    bm.encode(mb, block);
                }
                (data, md)
            }
            _ => return Ok(()),
        };
        let (dev, _) = self.member(slot);
        self.costs.charge_member_ios(1).await;
        dev.write(lba, &data, Some(&md), WriteHints::NONE).await?;
        self.c.rebuilt_bytes.add(data.len() as u64);
        Ok(())
    }
}
