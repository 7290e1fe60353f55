//! Reads: the mapping says where each block's current version is; contiguous blocks of one
//! replica set (or one stripe chunk) are read with one member I/O. A replicated block comes
//! from one of its copies (rotating the first choice by LBA), another copy when that member
//! has failed or errs; a striped block from its data chunk, or rebuilt from k other chunks of
//! its stripe when that member is unavailable (a degraded read). Rows being read are pinned,
//! so they are not reused under the read.

use futures_util::future::join_all;

use flashrig_blockdev::{DevError, DevResult};

use super::state::{Loc, Target};
use super::Inner;

/// Consecutive request blocks stored contiguously: `count` blocks from `loc`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Run {
    pub first: u64,
    pub loc: Loc,
    pub count: u32,
}

/// Groups `(request index, location)` pairs (ascending index) into runs.
pub(super) fn runs(plan: &[(u64, Loc)], chunk_blocks: u64) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for &(i, loc) in plan {
        if let Some(r) = out.last_mut() {
            let next = r.first + r.count as u64 == i;
            let contiguous = match (r.loc, loc) {
                (Loc::Log { row, set, off }, Loc::Log { row: r2, set: s2, off: o2 }) => {
                    row == r2 && set == s2 && off + r.count == o2
                }
                (Loc::Stripe { row, idx }, Loc::Stripe { row: r2, idx: i2 }) => {
                    row == r2
                        && idx + r.count == i2
                        && idx as u64 / chunk_blocks == i2 as u64 / chunk_blocks
                }
                _ => false,
            };
            if next && contiguous {
                r.count += 1;
                continue;
            }
        }
        out.push(Run { first: i, loc, count: 1 });
    }
    out
}

impl Inner {
    pub(super) async fn read_blocks(&self, lba: u64, blocks: u64, buf: &mut [u8]) -> DevResult<()> {
        let bs = self.block_bytes();
        let plan: Vec<(u64, Loc)> = {
            let mut t = self.tables.lock();
            let plan: Vec<(u64, Loc)> = t
                .map
                .range(lba..lba + blocks)
                .filter_map(|(&l, e)| match e.target {
                    Target::At(loc) => Some((l - lba, loc)),
                    Target::Trimmed(_) => None,
                })
                .collect();
            for (_, loc) in &plan {
                t.pin(loc.row());
            }
            plan
        };
        buf.fill(0);
        let runs = runs(&plan, self.geo.chunk_blocks);
        let mut rest = buf;
        let mut at = 0u64;
        let mut futs = Vec::with_capacity(runs.len());
        for run in &runs {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut((run.first - at) as usize * bs);
            let (head, tail) = tail.split_at_mut(run.count as usize * bs);
            rest = tail;
            at = run.first + run.count as u64;
            futs.push(self.read_run(run.loc, run.count, head, lba + run.first));
        }
        let results = join_all(futs).await;
        {
            let mut t = self.tables.lock();
            for (_, loc) in &plan {
                t.unpin(loc.row());
            }
        }
        results.into_iter().collect::<DevResult<Vec<()>>>().map(|_| ())
    }

    /// Reads `count` blocks stored from `loc` into `buf`; `hint` spreads replica choices.
    pub(super) async fn read_run(
        &self,
        loc: Loc,
        count: u32,
        buf: &mut [u8],
        hint: u64,
    ) -> DevResult<()> {
        match loc {
            Loc::Log { row, set, off } => {
                let pref = (hint / self.geo.chunk_blocks) as usize % self.geo.copies();
                self.read_log(row, set as usize, off, buf, None, pref, None).await
            }
            Loc::Stripe { row, idx } => self.read_stripe_data(row, idx, count, buf).await,
        }
    }

    /// Reads blocks from offset `off` of a replica set from the first readable copy, trying
    /// replica `pref` first and never member `skip`; with metadata when `md` is given.
    /// Returns the member read.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn read_log(
        &self,
        row: u64,
        set: usize,
        off: u32,
        buf: &mut [u8],
        mut md: Option<&mut [u8]>,
        pref: usize,
        skip: Option<usize>,
    ) -> DevResult<()> {
        let missing = self.tables.lock().row(row).missing;
        let lba = self.geo.member_lba(row) + off as u64;
        let copies = self.geo.copies();
        let mut degraded = false;
        for a in 0..copies {
            let i = self.geo.set_member(row, set, (pref + a) % copies);
            if Some(i) == skip || !self.available(i, missing) {
                degraded = true;
                continue;
            }
            if self.read_member(i, lba, buf, md.as_deref_mut()).await? {
                self.c.member_read_bytes.add(buf.len() as u64);
                if degraded {
                    self.c.degraded_reads.inc();
                }
                return Ok(());
            }
            degraded = true;
        }
        Err(DevError::DeviceFailed {
            name: format!(
                "{}: no readable copy of replica set {set} of row {row} ({} failed members)",
                self.info.name,
                self.failed_members().len()
            ),
        })
    }

    /// Reads `count` blocks of a stripe's data from block `idx` (all in one chunk).
    async fn read_stripe_data(
        &self,
        row: u64,
        idx: u32,
        count: u32,
        buf: &mut [u8],
    ) -> DevResult<()> {
        let c = self.geo.chunk_blocks;
        let (d, off) = ((idx as u64 / c) as usize, idx as u64 % c);
        let i = self.geo.data_member(row, d);
        let missing = self.tables.lock().row(row).missing;
        let lba = self.geo.member_lba(row) + off;
        if self.available(i, missing) && self.read_member(i, lba, buf, None).await? {
            self.c.member_read_bytes.add(buf.len() as u64);
            return Ok(());
        }
        self.c.degraded_reads.inc();
        let shards = self.read_chunks(row, off, off + count as u64, &[d], Some(i)).await?;
        buf.copy_from_slice(shards[d].as_deref().expect("reconstructed"));
        Ok(())
    }

    /// Reads blocks `lo..hi` of chunks `want` (code order: data `0..k`, then parity) of stripe
    /// row `row`, rebuilding any whose member is unavailable or fails from the others; never
    /// reads member `skip`. Returns all `k + m` slots with the wanted ones filled. Stripe rows
    /// do not change once written, so no lock is needed.
    pub(super) async fn read_chunks(
        &self,
        row: u64,
        lo: u64,
        hi: u64,
        want: &[usize],
        skip: Option<usize>,
    ) -> DevResult<Vec<Option<Vec<u8>>>> {
        let n = self.geo.members();
        let len = (hi - lo) as usize * self.block_bytes();
        let base = self.geo.member_lba(row) + lo;
        let missing = self.tables.lock().row(row).missing;
        let mut shards: Vec<Option<Vec<u8>>> = vec![None; n];
        let mut tried = vec![false; n];
        let readable = |x: usize| {
            let i = self.geo.chunk_member(row, x);
            Some(i) != skip && self.available(i, missing)
        };
        // First the wanted chunks; only if one is missing, the rest of the stripe.
        let mut round: Vec<usize> = want.iter().copied().filter(|&x| readable(x)).collect();
        for pass in 0..2 {
            let reads = round.iter().map(|&x| async move {
                let i = self.geo.chunk_member(row, x);
                let mut b = vec![0u8; len];
                let r = self.read_member(i, base, &mut b, None).await;
                (x, r.map(|ok| ok.then_some(b)))
            });
            for (x, r) in join_all(reads).await {
                tried[x] = true;
                if let Some(b) = r? {
                    self.c.member_read_bytes.add(len as u64);
                    shards[x] = Some(b);
                }
            }
            if want.iter().all(|&x| shards[x].is_some()) {
                return Ok(shards);
            }
            if pass == 0 {
                round = (0..n).filter(|&x| !tried[x] && readable(x)).collect();
            }
        }
        let present = shards.iter().filter(|s| s.is_some()).count();
        if present < self.geo.k {
            return Err(DevError::DeviceFailed {
                name: format!(
                    "{}: stripe row {row} has {present} readable chunks, {} needed",
                    self.info.name, self.geo.k
                ),
            });
        }
        let missing_chunks = (n - present) as u64;
        self.costs.charge_parity(len as u64 * self.geo.k as u64).await;
        self.codec.reconstruct(&mut shards).map_err(|e| DevError::Invalid(e.to_string()))?;
        self.c.reconstructed_bytes.add(missing_chunks * len as u64);
        Ok(shards)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_follow_contiguous_storage() {
        let log = |off| Loc::Log { row: 1, set: 0, off };
        let st = |idx| Loc::Stripe { row: 2, idx };
        let plan = vec![(0, log(3)), (1, log(4)), (2, log(9)), (4, st(2)), (5, st(3)), (6, st(4))];
        let r = runs(&plan, 4);
        let got: Vec<(u64, u32)> = r.iter().map(|r| (r.first, r.count)).collect();
        // Stripe blocks 2, 3 are chunk 0; block 4 starts chunk 1.
        assert_eq!(got, vec![(0, 2), (2, 1), (4, 2), (6, 1)]);
    }
}
