//! Reads: each data chunk piece from its member; a piece whose member has failed, answers
//! with an error, fails its checksum, or is slow (see `crate::latency`) is rebuilt from the
//! stripe's other chunks (a degraded read).

use futures_util::future::try_join_all;

use flashrig_blockdev::{DevError, DevResult, ScrubReport};

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
                // A member that answers with an error is not read again for this piece; one
                // whose blocks fail their checksum is, under the stripe lock, so that the
                // damaged blocks are rebuilt and rewritten there.
                let mut skip = Some(i);
                let routed = self.available(i, stripe) && self.route_around(i, stripe);
                if routed {
                    self.c.slow_reads_routed.inc();
                } else if self.available(i, stripe) {
                    self.costs.charge_member_ios(1).await;
                    match self.read_member(i, p.data, lba, head).await {
                        Ok(damaged) if damaged.is_empty() => return Ok(()),
                        Ok(_) => skip = None,
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
                let hi = lo + p.blocks;
                let shards = match self.read_chunks(stripe, lo, hi, &[p.data], skip).await {
                    // The others could not rebuild it (damage elsewhere in the row, or another
                    // member failed since the choice): the slow member is needed after all.
                    Err(_) if routed => self.read_chunks(stripe, lo, hi, &[p.data], None).await?,
                    r => r?,
                };
                head.copy_from_slice(shards[p.data].as_deref().expect("reconstructed"));
                Ok::<(), DevError>(())
            });
        }
        try_join_all(futs).await.map(|_| ())
    }

    /// Reads blocks `lo..hi` of chunks `want` (code order: data `0..k`, then parity) of
    /// `stripe`, rebuilding any whose member is unavailable or fails from the other chunks.
    /// `skip` names a member not to read (one that just returned an error). Returns all
    /// `k + m` slots; the wanted ones are filled. The caller holds the stripe's lock (blocks
    /// that fail their checksum are rewritten here).
    pub(super) async fn read_chunks(
        &self,
        stripe: u64,
        lo: u64,
        hi: u64,
        want: &[usize],
        skip: Option<usize>,
    ) -> DevResult<Vec<Option<Vec<u8>>>> {
        let mut report = ScrubReport::default();
        self.read_rows(stripe, lo, hi, want, skip, false, &mut report).await
    }

    /// [`Raid::read_chunks`], and the scrub's walk: with `scrub`, every readable chunk is read
    /// and verified (not only the wanted ones), rows beyond redundancy are counted in `report`
    /// instead of failing, and those rows' slots come back `None`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn read_rows(
        &self,
        stripe: u64,
        lo: u64,
        hi: u64,
        want: &[usize],
        skip: Option<usize>,
        scrub: bool,
        report: &mut ScrubReport,
    ) -> DevResult<Vec<Option<Vec<u8>>>> {
        let n = self.geo.members();
        let bs = self.block_bytes();
        let blocks = (hi - lo) as usize;
        let len = blocks * bs;
        let base = self.geo.member_lba(stripe) + lo;
        let mut shards: Vec<Option<Vec<u8>>> = vec![None; n];
        // Blocks of each read chunk that failed their checksum.
        let mut bad: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut tried = vec![false; n];
        let readable = |idx: usize| {
            let mbr = self.geo.chunk_member(stripe, idx);
            Some(mbr) != skip && self.available(mbr, stripe)
        };
        let whole = |shards: &[Option<Vec<u8>>], bad: &[Vec<usize>], i: usize| {
            shards[i].is_some() && bad[i].is_empty()
        };
        // First the wanted chunks; only if one is missing or damaged, the rest of the stripe.
        let mut round: Vec<usize> = match scrub {
            true => (0..n).filter(|&i| readable(i)).collect(),
            false => want.iter().copied().filter(|&i| readable(i)).collect(),
        };
        for pass in 0..2 {
            let reads = round.iter().map(|&idx| async move {
                let mbr = self.geo.chunk_member(stripe, idx);
                let mut b = vec![0u8; len];
                self.costs.charge_member_ios(1).await;
                let r = self.read_member(mbr, idx, base, &mut b).await;
                (idx, mbr, r.map(|bad| (b, bad)))
            });
            for (idx, mbr, r) in futures_util::future::join_all(reads).await {
                tried[idx] = true;
                match r {
                    Ok((b, damaged)) => {
                        report.blocks_checked += blocks as u64;
                        report.checksum_errors += damaged.len() as u64;
                        shards[idx] = Some(b);
                        bad[idx] = damaged;
                    }
                    Err(e) => {
                        if !self.note_error(mbr, &e) {
                            return Err(e);
                        }
                    }
                }
            }
            if !scrub && want.iter().all(|&i| whole(&shards, &bad, i)) {
                return Ok(shards);
            }
            if pass == 0 {
                round = (0..n).filter(|&i| !tried[i] && readable(i)).collect();
            }
        }
        if bad.iter().all(|b| b.is_empty()) {
            if (0..n).all(|i| shards[i].is_some()) {
                return Ok(shards);
            }
            let present = shards.iter().filter(|s| s.is_some()).count();
            if present < self.geo.k {
                if scrub {
                    return Ok(vec![None; n]);
                }
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
            return Ok(shards);
        }
        self.repair_rows(stripe, lo, shards, &bad, want, scrub, report).await
    }

    /// Rebuilds, block row by block row, every chunk block that is missing or failed its
    /// checksum, from the blocks of the row that passed, and rewrites the damaged ones.
    #[allow(clippy::too_many_arguments)]
    async fn repair_rows(
        &self,
        stripe: u64,
        lo: u64,
        mut shards: Vec<Option<Vec<u8>>>,
        bad: &[Vec<usize>],
        want: &[usize],
        scrub: bool,
        report: &mut ScrubReport,
    ) -> DevResult<Vec<Option<Vec<u8>>>> {
        let (k, n) = (self.geo.k, self.geo.members());
        let bs = self.block_bytes();
        let len = shards.iter().flatten().map(|s| s.len()).next().unwrap_or(0);
        let blocks = len / bs;
        let read: Vec<bool> = shards.iter().map(|s| s.is_some()).collect();
        let mut out: Vec<Vec<u8>> =
            shards.iter_mut().map(|s| s.take().unwrap_or_else(|| vec![0u8; len])).collect();
        let mut heals = Vec::new();
        let mut lost_rows = false;
        for b in 0..blocks {
            let good: Vec<bool> = (0..n).map(|i| read[i] && !bad[i].contains(&b)).collect();
            if good.iter().all(|&g| g) {
                continue;
            }
            let present = good.iter().filter(|&&g| g).count();
            if present < k {
                let damaged = (0..n).filter(|&i| read[i] && bad[i].contains(&b)).count() as u64;
                self.c.unrepairable_blocks.add(damaged);
                report.unrepairable += damaged;
                if scrub {
                    lost_rows = true;
                    continue;
                }
                let index = want.iter().copied().find(|&i| !good[i]).unwrap_or(0);
                let lba = match index < k {
                    true => {
                        stripe * self.geo.stripe_data_blocks()
                            + index as u64 * self.geo.chunk_blocks
                            + lo
                            + b as u64
                    }
                    false => stripe * self.geo.stripe_data_blocks(),
                };
                return Err(DevError::Corrupt {
                    name: self.info.name.clone(),
                    lba,
                    detail: format!(
                        "stripe {stripe}, chunk row {}: {present} of {n} chunks pass their \
                         checksum and are readable, {k} needed",
                        lo + b as u64
                    ),
                });
            }
            let at = b * bs..(b + 1) * bs;
            let mut row: Vec<Option<Vec<u8>>> =
                (0..n).map(|i| good[i].then(|| out[i][at.clone()].to_vec())).collect();
            self.costs.charge_parity(bs as u64 * k as u64).await;
            self.codec.reconstruct(&mut row).map_err(|e| DevError::Invalid(e.to_string()))?;
            for i in 0..n {
                if good[i] {
                    continue;
                }
                let block = row[i].take().expect("reconstructed");
                out[i][at.clone()].copy_from_slice(&block);
                self.c.reconstructed_bytes.add(bs as u64);
                if read[i] {
                    heals.push((i, b, block));
                }
            }
        }
        report.repaired += self.heal(stripe, lo, &heals).await?;
        if lost_rows {
            return Ok(vec![None; n]);
        }
        Ok(out.into_iter().map(Some).collect())
    }
}
