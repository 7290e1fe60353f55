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
//! The blocks it copies or rebuilds from are checked like any read (`integrity`): a bad
//! source copy is healed, and a block that cannot be rebuilt intact is written so that it
//! reads as corrupt rather than as right.
//!
//! A write that skipped the member while it was failed marks its row missing there; rebuild
//! repeats until no live row is marked, then flushes the replacement.

use std::sync::atomic::Ordering;

use flashrig_blockdev::{DevError, DevRef, DevResult, WriteHints};

use super::format::BlockMd;
use super::read::LogRead;
use super::state::{Expect, Kind, Loc};
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
            let (kind, gen) = (row.kind, row.gen);
            let fills: Vec<u32> = row.sets.iter().map(|s| s.fill).collect();
            let exps: Vec<Vec<Expect>> = match kind {
                // Log blocks are checked where they are valid; the rest (holes, blocks a
                // write waiting for this row's lock has reserved, versions overwritten since)
                // are copied as found.
                Kind::Log => fills
                    .iter()
                    .enumerate()
                    .map(|(set, &fill)| {
                        (0..fill)
                            .map(|off| {
                                let loc = Loc::Log { row: r, set: set as u32, off };
                                let o = t.row(r).sets[set].owners[off as usize];
                                if t.is_valid(o, loc) {
                                    t.expect(loc)
                                } else {
                                    Expect::Any
                                }
                            })
                            .collect()
                    })
                    .collect(),
                _ => {
                    let x = self.geo.chunk_index(r, slot);
                    vec![t.expect_chunk(r, x, 0, self.geo.chunk_blocks)]
                }
            };
            t.pin(r);
            (kind, gen, exps)
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
        (kind, gen, exps): (Kind, u16, Vec<Vec<Expect>>),
    ) -> DevResult<()> {
        let (bs, mdb) = (self.block_bytes(), self.md_bytes);
        let (m, c) = (self.geo.m, self.geo.chunk_blocks as usize);
        let lba = self.geo.member_lba(r);
        let (data, md) = match kind {
            Kind::Log => {
                let Some((set, j)) = self.geo.set_of_member(r, slot) else { return Ok(()) };
                let fill = exps[set].len();
                if fill == 0 {
                    return Ok(());
                }
                let mut data = vec![0u8; fill * bs];
                let mut md = vec![0u8; fill * mdb];
                let read = LogRead {
                    row: r,
                    set,
                    off: 0,
                    pref: (j + 1) % (m + 1),
                    skip: Some(slot),
                    locked: true,
                };
                // Blocks no copy holds intact are copied as found: `reindex` keeps a failing
                // checksum failing, and an older version keeps its metadata, so reads of the
                // new copy still see them for what they are.
                self.read_log(&read, &mut data, Some(&mut md), Some(exps[set].clone())).await?;
                for (b, mb) in md.chunks_exact_mut(mdb).enumerate() {
                    if let Ok(Some(bm)) = BlockMd::decode(mb) {
                        if bm.tag.is_log() && bm.gen == gen {
                            BlockMd::reindex(mb, j, lba + b as u64, &data[b * bs..][..bs]);
                        }
                    }
                }
                (data, md)
            }
            Kind::Stripe => {
                let x = self.geo.chunk_index(r, slot);
                let mut sr = self.read_stripe(r, 0, c as u64, &[x], Some(slot), true).await?;
                let data = sr.chunks[x].take().expect("reconstructed");
                let mut md = vec![0u8; c * mdb];
                for (b, (mb, block)) in
                    md.chunks_exact_mut(mdb).zip(data.chunks_exact(bs)).enumerate()
                {
                    let e = exps[0][b];
                    // A trim record the tables forgot takes its first LBA from its contents.
                    let bm = self.expected_md(e, r, x, block).or(match e {
                        Expect::Item { tag, seq, gen, .. } => {
                            Some(BlockMd::item(tag, 0, x, seq, gen))
                        }
                        _ => None,
                    });
                    if let Some(bm) = bm {
                        bm.encode(mb, lba + b as u64, block);
                    }
                    // A block that could not be rebuilt must not read as intact: with a
                    // checksum it carries a wrong one, without it no metadata at all.
                    if sr.lost.contains(&(x, b as u32)) {
                        if self.integrity() {
                            BlockMd::poison(mb);
                        } else {
                            mb.fill(0);
                        }
                    }
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
