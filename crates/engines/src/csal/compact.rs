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
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use flashrig_blockdev::DevResult;
use futures_util::future::try_join_all;

use super::format::{CState, Kind, Record, UNMAPPED};
use super::{Inner, Stream};

/// Valid blocks a move reads side by side (its valid runs, each at most a batch) before
/// writing the batches they filled: 8 MiB of 4 KiB blocks in flight. A window counts blocks,
/// not runs: in a victim that random writes left 85% valid, runs are a few blocks long, and
/// a window of a fixed number of runs would fill no batch, so every batch would be written
/// alone between two short reads (one stream's 512 KiB at a time: a quarter of a zone's
/// planes busy).
const READ_WINDOW_BLOCKS: u64 = 2048;
/// Chunks one compaction empties together at most.
const MAX_CHUNKS_PER_COMPACTION: u64 = 16;

/// A window's batches being written (see [`Inner::flush_streams`]).
type Writing<'a> = Pin<Box<dyn Future<Output = DevResult<Option<()>>> + 'a>>;

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

    /// The closed chunks with the lowest valid ratios, at most `n`, lowest first.
    fn pick_chunks(&self, n: usize) -> Vec<usize> {
        let st = self.st.lock();
        let mut v: Vec<usize> = (0..self.geo.chunks as usize)
            .filter(|&i| st.containers[i].state == CState::Closed)
            .collect();
        v.sort_by_key(|&i| (st.containers[i].valid * 1_000_000 / self.geo.capacity(i), i));
        v.truncate(n);
        v
    }

    /// One compaction: empties the chunks with the lowest valid ratios, as many together as
    /// fill every tenant's 512 KiB buffer once when the chunks are full (§4.3: data is
    /// "grouped by user ID" in DRAM and appended "when the buffer reaches the 512KB"; chunks
    /// smaller than that, as at reduced scale, would otherwise send each tenant's share of
    /// one chunk as a short write). Returns whether it made progress.
    pub(crate) async fn compact_one(self: &Arc<Self>) -> DevResult<bool> {
        let streams = self.opts.compaction_streams();
        let want = (self.opts.batch_blocks.max(1) * streams).div_ceil(self.geo.chunk_blocks);
        let victims = self.pick_chunks(want.clamp(1, MAX_CHUNKS_PER_COMPACTION) as usize);
        if victims.is_empty() {
            return Ok(false);
        }
        self.c.compactions.inc();
        self.evacuate_all(&victims, false).await
    }

    /// Moves every valid block of container `victim` into zones (see [`Self::evacuate_all`]).
    pub(crate) async fn evacuate(self: &Arc<Self>, victim: usize, gc: bool) -> DevResult<bool> {
        self.evacuate_all(&[victim], gc).await
    }

    /// Moves every valid block of the `victims` into zones; releases each that has nothing
    /// valid left. Returns false when no zone could be opened before anything moved.
    ///
    /// The victim's valid runs are read `READ_WINDOW_BLOCKS` blocks at a time, side by side, and the
    /// full batches they make are written with every stream's batches in order and the
    /// streams side by side (each stream is its own zone), so a move keeps both devices busy
    /// rather than waiting on one read or one zone write at a time.
    pub(crate) async fn evacuate_all(
        self: &Arc<Self>,
        victims: &[usize],
        gc: bool,
    ) -> DevResult<bool> {
        let g = self.geo.clone();
        let batch = self.opts.batch_blocks.max(1);
        // The valid runs (first PBA, blocks) as the bitmaps show them now, each at most a
        // batch long. Blocks that turn invalid meanwhile are read anyway and left behind when
        // their move finds the L2P pointing elsewhere.
        let runs: Vec<(u64, u64)> = {
            let st = self.st.lock();
            let mut v = Vec::new();
            for &victim in victims {
                let (first, cap) = (g.first_pba(victim), g.capacity(victim));
                let mut s = 0;
                while s < cap {
                    if !st.bit(first + s) {
                        s += 1;
                        continue;
                    }
                    let mut n = 1;
                    while s + n < cap && n < batch && st.bit(first + s + n) {
                        n += 1;
                    }
                    v.push((first + s, n));
                    s += n;
                }
            }
            v
        };
        let mut buffers: BTreeMap<Stream, Vec<Moving>> = BTreeMap::new();
        let mut progress = false;
        let mut windows: Vec<&[(u64, u64)]> = Vec::new();
        let (mut first, mut blocks) = (0, 0);
        for (i, &(_, n)) in runs.iter().enumerate() {
            if blocks > 0 && blocks + n > READ_WINDOW_BLOCKS {
                windows.push(&runs[first..i]);
                (first, blocks) = (i, 0);
            }
            blocks += n;
        }
        if first < runs.len() {
            windows.push(&runs[first..]);
        }
        // The batches of one window are written while the next window is read: a move is a
        // pipeline of two stages, as a controller's relocation keeps reads and programs in
        // flight together, rather than a read phase and a write phase taking turns (which
        // left the capacity device's planes idle during every read). A stream's batches
        // still reach its zone in order: a window's batches start only once the previous
        // window's are all written.
        // The window being written, and whether it holds any batch (progress once written).
        let mut writing: Option<(Writing<'_>, bool)> = None;
        for window in windows {
            let reads = try_join_all(window.iter().map(|&(pba, n)| self.read_run(pba, n, gc)));
            let blocks = match writing.take() {
                None => reads.await?,
                Some((w, any)) => {
                    let (blocks, written) = futures_util::future::join(reads, w).await;
                    if written?.is_none() {
                        return Ok(progress);
                    }
                    progress |= any;
                    blocks?
                }
            };
            let mut ready: Vec<(Stream, Vec<Moving>)> = Vec::new();
            for run in blocks {
                for (from, r, data) in run {
                    if r.kind == Kind::Trim && !self.trim_needed(&r).await? {
                        self.st.lock().set_valid(&g, from as u64, false);
                        continue;
                    }
                    let stream = self.stream_for(gc, r.tenant);
                    let buf = buffers.entry(stream).or_default();
                    buf.push(Moving { record: r, data, from });
                    if buf.len() as u64 >= batch {
                        ready.push((stream, buffers.remove(&stream).unwrap()));
                    }
                }
            }
            let any = !ready.is_empty();
            writing = Some((Box::pin(self.flush_streams(gc, ready)), any));
        }
        if let Some((w, any)) = writing {
            if w.await?.is_none() {
                return Ok(progress);
            }
            progress |= any;
        }
        let rest: Vec<(Stream, Vec<Moving>)> = std::mem::take(&mut buffers).into_iter().collect();
        if !rest.is_empty() && self.flush_streams(gc, rest).await?.is_none() {
            return Ok(progress);
        }
        let emptied: Vec<usize> = {
            let st = self.st.lock();
            victims.iter().copied().filter(|&v| st.containers[v].valid == 0).collect()
        };
        if !emptied.is_empty() {
            let _g = self.meta.lock(0).await;
            {
                let mut st = self.st.lock();
                for v in emptied {
                    st.containers[v].state = CState::Released;
                }
            }
            self.persist_state(false).await?;
        }
        Ok(true)
    }

    /// Reads `n` blocks at PBA `pba` with their records; returns the blocks whose record and
    /// data check (PBA, record, data). A block that does not check holds nothing recovery
    /// would accept either: it stops counting as valid rather than pin its container.
    async fn read_run(&self, pba: u64, n: u64, gc: bool) -> DevResult<Vec<(u32, Record, Vec<u8>)>> {
        let (bs, mdb) = (self.bs(), self.mdb());
        let mut data = vec![0u8; n as usize * bs];
        let mut md = vec![0u8; n as usize * mdb];
        self.read_with_md(pba as u32, &mut data, &mut md).await?;
        if gc {
            self.c.gc_blocks_read.add(n);
        } else {
            self.c.compaction_blocks_read.add(n);
        }
        let mut out = Vec::with_capacity(n as usize);
        for i in 0..n as usize {
            let from = pba as u32 + i as u32;
            let d = &data[i * bs..(i + 1) * bs];
            match Record::decode(&md[i * mdb..(i + 1) * mdb]) {
                Some(r) if r.data_matches(d) => out.push((from, r, d.to_vec())),
                _ => self.st.lock().set_valid(&self.geo, from as u64, false),
            }
        }
        Ok(out)
    }

    /// Writes batches, all side by side (see below). `Some(())` when
    /// every batch was written (or there were none), `None` when a stream could open no zone
    /// (its batches stay where they are, still valid, for a later pass).
    async fn flush_streams(
        self: &Arc<Self>,
        gc: bool,
        batches: Vec<(Stream, Vec<Moving>)>,
    ) -> DevResult<Option<()>> {
        let mut by_stream: BTreeMap<Stream, Vec<Vec<Moving>>> = BTreeMap::new();
        for (s, items) in batches {
            by_stream.entry(s).or_default().push(items);
        }
        // Every batch is in flight at once, a stream's several into its zone as NVMe zone
        // appends are (a zone's planes take a 512 KiB batch one page each, so one batch at a
        // time would leave most of them idle): `append` reserves each batch's place in the
        // zone before its write is submitted, in the order the batches start, so a stream's
        // writes reach its zone at its write pointer.
        let writers = by_stream
            .into_iter()
            .flat_map(|(s, list)| list.into_iter().map(move |items| (s, items)))
            .map(|(s, items)| self.flush_moves(s, gc, items));
        let all = try_join_all(writers).await?;
        Ok(all.into_iter().all(|ok| ok).then_some(()))
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
