//! Compaction (§4.3): when free chunks fall below `compaction_free_fraction` of all chunks,
//! the closed chunk with the lowest valid ratio is emptied into zones: its valid blocks are
//! read with their records, grouped by tenant (the record carries it), and appended to each
//! tenant's compaction zone in batches of `batch_blocks` (512 KiB). The chunk is released once
//! everything valid in it has moved, and freed by the next checkpoint.
//!
//! The mover here is GC's too. A move's L2P update applies only if the entry still points to
//! the place the block was read from: a user write (or trim) of the same LBA that landed
//! meanwhile wins, and the moved copy is left invalid. Moved blocks keep their SID (§4.4).
//! Trim records move too, as long as one of their LBAs is still unmapped (an older copy of it
//! may still be on the media, and recovery needs the record to know it is dead).

use std::collections::BTreeMap;
use std::sync::Arc;

use flashrig_blockdev::DevResult;

use super::format::{CState, Kind, Record, UNMAPPED};
use super::{Inner, Stream};

/// A block read from a victim, waiting in its stream's buffer.
struct Moving {
    record: Record,
    data: Vec<u8>,
    from: u32,
}

impl Inner {
    /// The closed chunk (`zones = false`) or zone with the lowest valid ratio, if one has any
    /// invalid block (or is a chunk: compaction empties chunks whatever their ratio).
    pub(crate) fn pick_victim(&self, zones: bool) -> Option<usize> {
        let st = self.st.lock();
        let range = if zones {
            self.geo.chunks as usize..self.geo.containers()
        } else {
            0..self.geo.chunks as usize
        };
        range
            .filter(|&i| st.containers[i].state == CState::Closed)
            .filter(|&i| !zones || st.containers[i].valid < self.geo.capacity(i))
            .min_by_key(|&i| (st.containers[i].valid * 1_000_000 / self.geo.capacity(i), i))
    }

    /// One compaction: empties the chunk with the lowest valid ratio. Returns whether it
    /// made progress.
    pub(crate) async fn compact_one(self: &Arc<Self>) -> DevResult<bool> {
        let Some(v) = self.pick_victim(false) else { return Ok(false) };
        self.c.compactions.inc();
        self.evacuate(v, false).await
    }

    /// Moves every valid block of container `victim` into zones; releases it when nothing
    /// valid is left. Returns false when no zone could be opened before anything moved.
    pub(crate) async fn evacuate(self: &Arc<Self>, victim: usize, gc: bool) -> DevResult<bool> {
        let g = self.geo.clone();
        let bs = self.bs();
        let mdb = self.mdb();
        let cap = g.capacity(victim);
        let first = g.first_pba(victim);
        let batch = self.opts.batch_blocks.max(1);
        let mut buffers: BTreeMap<Stream, Vec<Moving>> = BTreeMap::new();
        let mut progress = false;
        let mut off = 0u64;
        loop {
            // The next run of valid blocks, at most a batch long.
            let run = {
                let st = self.st.lock();
                let mut s = off;
                while s < cap && !st.bit(first + s) {
                    s += 1;
                }
                if s >= cap {
                    None
                } else {
                    let mut n = 1;
                    while s + n < cap && n < batch && st.bit(first + s + n) {
                        n += 1;
                    }
                    Some((s, n))
                }
            };
            let Some((s, n)) = run else { break };
            let mut data = vec![0u8; n as usize * bs];
            let mut md = vec![0u8; n as usize * mdb];
            self.read_with_md((first + s) as u32, &mut data, &mut md).await?;
            if gc {
                self.c.gc_blocks_read.add(n);
            } else {
                self.c.compaction_blocks_read.add(n);
            }
            for i in 0..n as usize {
                let from = (first + s) as u32 + i as u32;
                let d = &data[i * bs..(i + 1) * bs];
                // A block whose record or data does not check holds nothing recovery would
                // accept either: it stops counting as valid rather than pin its container.
                let r = match Record::decode(&md[i * mdb..(i + 1) * mdb]) {
                    Some(r) if r.data_matches(d) => r,
                    _ => {
                        self.st.lock().set_valid(&g, from as u64, false);
                        continue;
                    }
                };
                if r.kind == Kind::Trim && !self.trim_needed(&r).await? {
                    self.st.lock().set_valid(&g, from as u64, false);
                    continue;
                }
                let stream = self.stream_for(gc, r.tenant);
                buffers.entry(stream).or_default().push(Moving {
                    record: r,
                    data: d.to_vec(),
                    from,
                });
                if buffers[&stream].len() as u64 >= batch {
                    let items = buffers.remove(&stream).unwrap();
                    if !self.flush_moves(stream, gc, items).await? {
                        return Ok(progress);
                    }
                    progress = true;
                }
            }
            off = s + n;
        }
        for (stream, items) in std::mem::take(&mut buffers) {
            if !self.flush_moves(stream, gc, items).await? {
                return Ok(progress);
            }
            progress = true;
        }
        let empty = self.st.lock().containers[victim].valid == 0;
        if empty {
            let _g = self.meta.lock(0).await;
            self.st.lock().containers[victim].state = CState::Released;
            self.persist_state(false).await?;
        }
        Ok(true)
    }

    /// Whether a trim record must be kept: one of its LBAs is still unmapped.
    async fn trim_needed(&self, r: &Record) -> DevResult<bool> {
        for l in r.lba..r.lba + r.count as u64 {
            if l < self.geo.user_blocks && self.l2p_get(l).await? == UNMAPPED {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Appends one stream's buffered blocks and moves their L2P entries (only where they
    /// still point to the old place). False: no zone could be opened.
    async fn flush_moves(
        self: &Arc<Self>,
        stream: Stream,
        gc: bool,
        items: Vec<Moving>,
    ) -> DevResult<bool> {
        let recs: Vec<(Record, Vec<u8>)> =
            items.iter().map(|m| (m.record, m.data.clone())).collect();
        let Some(pbas) = self.append(stream, gc, &recs).await? else { return Ok(false) };
        let n = pbas.len() as u64;
        if gc {
            self.c.gc_blocks_written.add(n);
        } else {
            self.c.compaction_blocks_written.add(n);
        }
        let g = &self.geo;
        for (m, &new) in items.iter().zip(&pbas) {
            if m.record.kind == Kind::Trim {
                let mut st = self.st.lock();
                st.set_valid(g, m.from as u64, false);
                st.set_valid(g, new as u64, true);
                continue;
            }
            let lba = m.record.lba;
            let from = m.from;
            let moved = self
                .with_entry(lba, |st| {
                    if st.l2p.get(lba).unwrap() == from {
                        st.l2p.set(lba, new);
                        st.set_valid(g, from as u64, false);
                        st.set_valid(g, new as u64, true);
                        true
                    } else {
                        // Rewritten or trimmed meanwhile (or a bit a recovery over-estimated):
                        // the old place holds nothing live either.
                        st.set_valid(g, from as u64, false);
                        false
                    }
                })
                .await?;
            if !moved {
                self.c.moves_skipped.inc();
            }
        }
        Ok(true)
    }
}
