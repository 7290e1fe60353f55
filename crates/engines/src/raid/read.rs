//! Reads: each data chunk piece from its member; a piece whose member has failed or answers
//! with an error is rebuilt from the stripe's other chunks (a degraded read).

use futures_util::future::try_join_all;

use flashrig_blockdev::{DevError, DevResult};

use super::Raid;

impl Raid {
    pub(super) async fn read_blocks(&self, lba: u64, blocks: u64, buf: &mut [u8]) -> DevResult<()> {
        let bs = self.block_bytes();
        let spans = self.geo.spans(lba, blocks);
        let mut rest = buf;
        let mut futs = Vec::with_capacity(spans.len());
        for sp in &spans {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(sp.blocks as usize * bs);
            rest = tail;
            futs.push(async move {
                // With a stripe cache, a stripe's newest data may be in memory or being written
                // out; holding the stripe lock keeps a write-out from landing between the
                // member read and the overlay.
                let _guard = match &self.cache {
                    Some(_) => Some(self.locks.lock(sp.stripe).await),
                    None => None,
                };
                self.read_span(sp.stripe, sp.offset_blocks, head, self.cache.is_some()).await?;
                if let Some(cache) = &self.cache {
                    let hits = cache.overlay(sp.stripe, sp.offset_blocks, head);
                    self.c.cache_hits.add(hits);
                }
                Ok::<(), DevError>(())
            });
        }
        try_join_all(futs).await.map(|_| ())
    }

    /// Reads `buf.len()` bytes of `stripe`'s data from `offset_blocks`; `locked` says whether
    /// the caller holds the stripe's lock.
    async fn read_span(
        &self,
        stripe: u64,
        offset_blocks: u64,
        buf: &mut [u8],
        locked: bool,
    ) -> DevResult<()> {
        let bs = self.block_bytes();
        let pieces = self.geo.pieces(offset_blocks, (buf.len() / bs) as u64);
        let mut rest = buf;
        let mut futs = Vec::with_capacity(pieces.len());
        for p in pieces {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(p.blocks as usize * bs);
            rest = tail;
            futs.push(async move {
                let i = self.geo.data_member(stripe, p.data);
                let lba = self.geo.member_lba(stripe) + p.offset_blocks;
                if self.available(i, stripe) {
                    self.costs.charge_member_ios(1).await;
                    match self.member(i).read(lba, head, None).await {
                        Ok(()) => return Ok(()),
                        Err(e) => {
                            if !self.note_error(i, &e) {
                                return Err(e);
                            }
                            if !matches!(e, DevError::DeviceFailed { .. }) {
                                self.c.read_errors_repaired.inc();
                            }
                        }
                    }
                }
                self.c.degraded_reads.inc();
                // Rebuilding a chunk reads the whole stripe row, which must not change under
                // it: a concurrent update to another chunk of the row writes data and parity
                // at different moments.
                let _guard = match locked {
                    true => None,
                    false => Some(self.locks.lock(stripe).await),
                };
                self.pass_lock().await;
                let lo = p.offset_blocks;
                let shards =
                    self.read_chunks(stripe, lo, lo + p.blocks, &[p.data], Some(i)).await?;
                head.copy_from_slice(shards[p.data].as_deref().expect("reconstructed"));
                Ok::<(), DevError>(())
            });
        }
        try_join_all(futs).await.map(|_| ())
    }

    /// Reads blocks `lo..hi` of chunks `want` (code order: data `0..k`, then parity) of
    /// `stripe`, rebuilding any whose member is unavailable or fails from the other chunks.
    /// `skip` names a member not to read (one that just returned an error). Returns all
    /// `k + m` slots; the wanted ones are filled.
    pub(super) async fn read_chunks(
        &self,
        stripe: u64,
        lo: u64,
        hi: u64,
        want: &[usize],
        skip: Option<usize>,
    ) -> DevResult<Vec<Option<Vec<u8>>>> {
        let n = self.geo.members();
        let len = (hi - lo) as usize * self.block_bytes();
        let base = self.geo.member_lba(stripe) + lo;
        let mut shards: Vec<Option<Vec<u8>>> = vec![None; n];
        let mut tried = vec![false; n];
        let readable = |idx: usize| {
            let mbr = self.geo.chunk_member(stripe, idx);
            Some(mbr) != skip && self.available(mbr, stripe)
        };
        // First the wanted chunks; only if one is missing, the rest of the stripe.
        let mut round: Vec<usize> = want.iter().copied().filter(|&i| readable(i)).collect();
        for pass in 0..2 {
            let reads = round.iter().map(|&idx| async move {
                let mbr = self.geo.chunk_member(stripe, idx);
                let mut b = vec![0u8; len];
                self.costs.charge_member_ios(1).await;
                let r = self.member(mbr).read(base, &mut b, None).await;
                (idx, mbr, r.map(|()| b))
            });
            for (idx, mbr, r) in futures_util::future::join_all(reads).await {
                tried[idx] = true;
                match r {
                    Ok(b) => shards[idx] = Some(b),
                    Err(e) => {
                        if !self.note_error(mbr, &e) {
                            return Err(e);
                        }
                    }
                }
            }
            if want.iter().all(|&i| shards[i].is_some()) {
                return Ok(shards);
            }
            if pass == 0 {
                round = (0..n).filter(|&i| !tried[i] && readable(i)).collect();
            }
        }
        let present = shards.iter().filter(|s| s.is_some()).count();
        if present < self.geo.k {
            self.check_survivable(stripe)?;
            return Err(DevError::DeviceFailed {
                name: format!(
                    "{}: stripe {stripe} has {present} readable chunks, {} needed",
                    self.info.name, self.geo.k
                ),
            });
        }
        let missing = (n - present) as u64;
        self.costs.charge_parity(len as u64 * self.geo.k as u64).await;
        self.codec.reconstruct(&mut shards).map_err(|e| DevError::Invalid(e.to_string()))?;
        self.c.reconstructed_bytes.add(missing * len as u64);
        Ok(shards)
    }
}
