//! Writes, stripe by stripe under the stripe's lock:
//!
//! - a span covering the whole stripe: parity from the new data alone, k + m chunk writes;
//! - a partial span: over the chunk rows `lo..hi` it touches, either *read-construct-write*
//!   (read the data chunks the write does not cover, compute parity from old and new data) or
//!   *read-modify-write* (read the old data being replaced and the old parity, add the change),
//!   whichever reads fewer chunks, as md chooses. A degraded stripe always reconstructs: the
//!   old contents of a failed member are needed to compute parity and can only be rebuilt.
//!
//! Trims: whole stripes are trimmed on every member (the parity of zeros is zeros); parts of
//! stripes are written with zeros so parity stays consistent.

use futures_util::future::try_join_all;

use flashrig_blockdev::{DevError, DevResult, WriteHints};

use super::geometry::StripeSpan;
use super::{Raid, WriteMode};

/// One chunk write of a stripe update: code-order chunk index, block offset in the chunk.
struct ChunkWrite<'a> {
    index: usize,
    offset_blocks: u64,
    data: &'a [u8],
}

impl Raid {
    pub(super) async fn write_blocks(
        &self,
        lba: u64,
        blocks: u64,
        data: &[u8],
        hints: WriteHints,
    ) -> DevResult<()> {
        let bs = self.block_bytes();
        let spans = self.geo.spans(lba, blocks);
        if self.write_mode == WriteMode::FullStripeOnly {
            let per = self.geo.stripe_data_blocks();
            if spans.iter().any(|s| s.offset_blocks != 0 || s.blocks != per) {
                self.c.rejected_partial_writes.inc();
                return Err(DevError::Invalid(format!(
                    "{}: full-stripe-only array: writes must start and end on {per}-block \
                     stripe boundaries (got {blocks} blocks at {lba})",
                    self.info.name
                )));
            }
        }
        if self.cache.is_some() {
            return self.cached_write(&spans, data, hints).await;
        }
        let futs = spans.iter().map(|sp| {
            let bytes = &data[sp.request_offset_blocks as usize * bs..][..sp.blocks as usize * bs];
            async move {
                let _g = self.locks.lock(sp.stripe).await;
                self.write_span_locked(sp, bytes, hints).await
            }
        });
        try_join_all(futs).await.map(|_| ())
    }

    /// Writes `data` into one stripe; the caller holds the stripe's lock.
    pub(super) async fn write_span_locked(
        &self,
        sp: &StripeSpan,
        data: &[u8],
        hints: WriteHints,
    ) -> DevResult<()> {
        self.write_span(sp, data, hints, false).await
    }

    /// [`Raid::write_span_locked`]; `reconstruct` forces read-construct-write (after a
    /// read-modify-write found old data failing its checksum: the reconstructing reads
    /// repair it, while a delta computed from it would poison the parity).
    async fn write_span(
        &self,
        sp: &StripeSpan,
        data: &[u8],
        hints: WriteHints,
        reconstruct: bool,
    ) -> DevResult<()> {
        let s = sp.stripe;
        self.check_survivable(s)?;
        self.pass_lock().await;
        let (k, m) = (self.geo.k, self.geo.m);
        let bs = self.block_bytes();
        let chunk_bytes = self.geo.chunk_blocks as usize * bs;
        if sp.offset_blocks == 0 && sp.blocks == self.geo.stripe_data_blocks() {
            let mut parity = vec![vec![0u8; chunk_bytes]; m];
            let chunks: Vec<&[u8]> = data.chunks(chunk_bytes).collect();
            self.encode(&chunks, &mut parity).await?;
            let mut writes: Vec<ChunkWrite> = chunks
                .iter()
                .enumerate()
                .map(|(d, c)| ChunkWrite { index: d, offset_blocks: 0, data: c })
                .collect();
            writes.extend(parity.iter().enumerate().map(|(r, p)| ChunkWrite {
                index: k + r,
                offset_blocks: 0,
                data: p,
            }));
            self.c.full_stripe_writes.inc();
            return self.write_chunks(s, &writes, hints).await;
        }

        let pieces = self.geo.pieces(sp.offset_blocks, sp.blocks);
        let lo = pieces.iter().map(|p| p.offset_blocks).min().unwrap();
        let hi = pieces.iter().map(|p| p.offset_blocks + p.blocks).max().unwrap();
        let len = (hi - lo) as usize * bs;
        let covers = |d: usize| {
            pieces
                .iter()
                .any(|p| p.data == d && p.offset_blocks <= lo && p.offset_blocks + p.blocks >= hi)
        };
        let piece_bytes = |p: &super::geometry::ChunkPiece| {
            &data[p.request_offset_blocks as usize * bs..][..p.blocks as usize * bs]
        };
        let degraded = (0..self.geo.members()).any(|i| !self.available(i, s));
        let rcw_chunks = (0..k).filter(|&d| !covers(d)).count();
        let rmw_chunks = pieces.len() + m;

        let mut parity = vec![vec![0u8; len]; m];
        if reconstruct || degraded || rcw_chunks <= rmw_chunks {
            // Read-construct-write: the stripe's data rows lo..hi, old where not overwritten.
            let want: Vec<usize> = (0..k).filter(|&d| !covers(d)).collect();
            let mut shards = self.read_chunks(s, lo, hi, &want, None).await?;
            self.c.rcw_read_bytes.add((want.len() * len) as u64);
            let mut rows: Vec<Vec<u8>> =
                (0..k).map(|d| shards[d].take().unwrap_or_else(|| vec![0u8; len])).collect();
            for p in &pieces {
                let at = (p.offset_blocks - lo) as usize * bs;
                rows[p.data][at..at + p.blocks as usize * bs].copy_from_slice(piece_bytes(p));
            }
            let refs: Vec<&[u8]> = rows.iter().map(|r| r.as_slice()).collect();
            self.encode(&refs, &mut parity).await?;
            self.c.rcw_writes.inc();
        } else {
            // Read-modify-write: old data of each piece and the old parity rows.
            let old = try_join_all(pieces.iter().map(|p| async move {
                let i = self.geo.data_member(s, p.data);
                let mut b = vec![0u8; p.blocks as usize * bs];
                self.costs.charge_member_ios(1).await;
                let lba = self.geo.member_lba(s) + p.offset_blocks;
                let damaged = self.read_member(i, p.data, lba, &mut b).await?;
                Ok::<_, DevError>((b, damaged.is_empty()))
            }));
            let parity_rows: Vec<usize> = (k..k + m).collect();
            let old_parity = self.read_chunks(s, lo, hi, &parity_rows, None);
            let (old, old_parity) = futures_util::join!(old, old_parity);
            let (old, mut old_parity) = match (old, old_parity) {
                (Ok(o), Ok(_)) if o.iter().any(|(_, sound)| !sound) => {
                    return Box::pin(self.write_span(sp, data, hints, true)).await;
                }
                (Ok(o), Ok(p)) => (o.into_iter().map(|(b, _)| b).collect::<Vec<_>>(), p),
                // A member failed under the reads: redo the stripe as a degraded update.
                (Err(e), _) | (_, Err(e)) => {
                    let retry = self.member_index_of_error(&e);
                    if retry {
                        return Box::pin(self.write_span(sp, data, hints, reconstruct)).await;
                    }
                    return Err(e);
                }
            };
            self.c.rmw_read_bytes.add(((pieces.len() + m) * len) as u64);
            for (r, p) in parity.iter_mut().enumerate() {
                *p = old_parity[k + r].take().expect("read above");
            }
            for (p, o) in pieces.iter().zip(&old) {
                let delta: Vec<u8> = o.iter().zip(piece_bytes(p)).map(|(a, b)| a ^ b).collect();
                let at = (p.offset_blocks - lo) as usize * bs;
                let mut rows: Vec<&mut [u8]> =
                    parity.iter_mut().map(|q| &mut q[at..at + delta.len()]).collect();
                self.costs.charge_parity(delta.len() as u64 * m as u64).await;
                self.codec
                    .update_delta(p.data, &delta, &mut rows)
                    .map_err(|e| DevError::Invalid(e.to_string()))?;
            }
            self.c.parity_bytes.add((len * m) as u64);
            self.c.rmw_writes.inc();
        }
        let mut writes: Vec<ChunkWrite> = pieces
            .iter()
            .map(|p| ChunkWrite {
                index: p.data,
                offset_blocks: p.offset_blocks,
                data: piece_bytes(p),
            })
            .collect();
        writes.extend(parity.iter().enumerate().map(|(r, p)| ChunkWrite {
            index: k + r,
            offset_blocks: lo,
            data: p,
        }));
        self.write_chunks(s, &writes, hints).await
    }

    /// Whether a member error seen by a read-modify-write leaves a retry as a degraded update.
    fn member_index_of_error(&self, e: &DevError) -> bool {
        matches!(
            e,
            DevError::DeviceFailed { .. } | DevError::ReadMedia { .. } | DevError::Io { .. }
        )
    }

    /// Computes parity rows over `data` (k equal chunks) into `parity`.
    async fn encode(&self, data: &[&[u8]], parity: &mut [Vec<u8>]) -> DevResult<()> {
        let bytes: u64 = data.iter().map(|d| d.len() as u64).sum();
        self.costs.charge_parity(bytes).await;
        let mut rows: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
        self.codec.encode(data, &mut rows).map_err(|e| DevError::Invalid(e.to_string()))?;
        self.c.parity_bytes.add(rows.iter().map(|r| r.len() as u64).sum());
        Ok(())
    }

    /// Issues a stripe's chunk writes to their members at once. A member that is unavailable
    /// is skipped (its chunk is implied by the others); one that fails now is marked failed;
    /// the update stands as long as the stripe stays within the code's tolerance.
    async fn write_chunks(
        &self,
        stripe: u64,
        writes: &[ChunkWrite<'_>],
        hints: WriteHints,
    ) -> DevResult<()> {
        let base = self.geo.member_lba(stripe);
        let futs = writes.iter().map(|w| async move {
            let i = self.geo.chunk_member(stripe, w.index);
            if !self.available(i, stripe) {
                return Ok(());
            }
            self.costs.charge_member_ios(1).await;
            let lba = base + w.offset_blocks;
            let md = self.seal_for(w.data, lba, w.index);
            match self.member(i).write(lba, w.data, md.as_deref(), hints).await {
                Ok(()) => Ok(()),
                Err(e) if self.note_error(i, &e) => Ok(()),
                Err(e) => Err(e),
            }
        });
        try_join_all(futs).await?;
        self.check_survivable(stripe)
    }

    pub(super) async fn trim_blocks(&self, lba: u64, blocks: u64) -> DevResult<()> {
        let bs = self.block_bytes();
        let spans = self.geo.spans(lba, blocks);
        let per = self.geo.stripe_data_blocks();
        let futs = spans.iter().map(|sp| async move {
            let _g = self.locks.lock(sp.stripe).await;
            if let Some(cache) = &self.cache {
                // Cached writes to the stripe go out first, under the same lock hold, so no
                // later write-out can resurrect trimmed data.
                cache.take(sp.stripe);
                self.drain_locked(sp.stripe).await?;
            }
            if sp.offset_blocks == 0 && sp.blocks == per {
                let base = self.geo.member_lba(sp.stripe);
                let chunk = self.geo.chunk_blocks;
                let trims = (0..self.geo.members()).map(|i| async move {
                    if !self.available(i, sp.stripe) {
                        return Ok(());
                    }
                    match self.member(i).trim(base, chunk).await {
                        Ok(()) => Ok(()),
                        Err(e) if self.note_error(i, &e) => Ok(()),
                        Err(e) => Err(e),
                    }
                });
                try_join_all(trims).await?;
                self.check_survivable(sp.stripe)
            } else {
                let zeros = vec![0u8; sp.blocks as usize * bs];
                self.write_span_locked(sp, &zeros, WriteHints::NONE).await
            }
        });
        try_join_all(futs).await.map(|_| ())
    }
}

/// The stripe cache's side of the write path.
impl Raid {
    /// Puts a write into the stripe cache; writes out the stripes it completes or pushes out.
    async fn cached_write(
        &self,
        spans: &[StripeSpan],
        data: &[u8],
        hints: WriteHints,
    ) -> DevResult<()> {
        let cache = self.cache.as_ref().expect("called with a cache");
        let bs = self.block_bytes();
        let mut out = Vec::new();
        for sp in spans {
            let bytes = &data[sp.request_offset_blocks as usize * bs..][..sp.blocks as usize * bs];
            self.costs.charge_copy(bytes.len() as u64).await;
            let ins = cache.insert(sp.stripe, sp.offset_blocks, bytes);
            self.c.cache_full_stripes.add(ins.full.len() as u64);
            self.c.cache_evictions.add(ins.evicted.len() as u64);
            out.extend(ins.full);
            out.extend(ins.evicted);
        }
        let futs = out.into_iter().map(|(s, _)| self.write_out_pending(s));
        try_join_all(futs).await?;
        // FUA asks for durability at completion: the data must leave the cache now and be
        // durable on the members. Another request may have taken the stripe out already and
        // be writing it (then draining waits for its lock); either way the write-outs carry no
        // FUA, so the members are flushed after. (The reliability swarm found the earlier
        // version, which only wrote the stripe out, losing FUA writes at a power cut.)
        if hints.fua {
            for sp in spans {
                cache.take(sp.stripe);
                self.write_out_pending(sp.stripe).await?;
            }
            self.flush_members().await?;
        }
        Ok(())
    }

    /// Writes `stripe`'s entries that were taken out of the cache to the members, oldest
    /// first, each whole when full, else run by run. Entries of one stripe must reach the
    /// members in the order they were cached, so whichever task gets the stripe lock writes
    /// them all, and a task that finds none left has nothing to do.
    pub(super) async fn write_out_pending(&self, stripe: u64) -> DevResult<()> {
        let _g = self.locks.lock(stripe).await;
        self.drain_locked(stripe).await
    }

    /// [`Raid::write_out_pending`] for a caller that holds the stripe's lock.
    async fn drain_locked(&self, stripe: u64) -> DevResult<()> {
        let Some(cache) = self.cache.as_ref() else { return Ok(()) };
        let bs = self.block_bytes();
        while let Some(entry) = cache.oldest_writing(stripe) {
            for (first, blocks) in entry.runs() {
                let sp =
                    StripeSpan { stripe, offset_blocks: first, blocks, request_offset_blocks: 0 };
                let bytes = &entry.data[first as usize * bs..][..blocks as usize * bs];
                // On failure the entry stays queued: reads still see it and a later flush
                // retries it.
                self.write_span_locked(&sp, bytes, WriteHints::NONE).await?;
            }
            cache.written(stripe, entry);
        }
        Ok(())
    }

    /// Writes out every cached stripe and waits for write-outs other requests started.
    pub(super) async fn flush_cache(&self) -> DevResult<()> {
        let cache = self.cache.as_ref().expect("called with a cache");
        let all = cache.take_all();
        try_join_all(all.into_iter().map(|(s, _)| self.write_out_pending(s))).await?;
        loop {
            let pending = cache.writing();
            if pending.is_empty() {
                return Ok(());
            }
            for s in pending {
                self.write_out_pending(s).await?;
            }
        }
    }
}
