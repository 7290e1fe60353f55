//! Reads: the mapping says where each block's current version is; contiguous blocks of one
//! replica set (or one stripe chunk) are read with one member I/O. A replicated block comes
//! from one of its copies (rotating the first choice by LBA), another copy when that member
//! has failed or errs; a striped block from its data chunk, or rebuilt from k other chunks of
//! its stripe when that member is unavailable (a degraded read). Rows being read are pinned,
//! so they are not reused under the read.
//!
//! Every block read is checked against what the tables say it must hold (`integrity`): a
//! replicated block that fails is read from the next copy, a striped one rebuilt from the other
//! chunks, and the bad copy is rewritten. A block no copy holds intact fails the read with
//! `DevError::Corrupt`.

use std::sync::atomic::Ordering;

use futures_util::future::join_all;

use flashrig_blockdev::{DevError, DevResult};

use super::format::BlockMd;
use super::integrity::{push_fix, Fix, Tally};
use super::state::{Expect, Loc, Target};
use super::Inner;

/// The replica a read starting at user block `lba` tries first: rotating by chunk, so that
/// reads of replicated data spread over the copies.
pub(super) fn first_replica(geo: &super::TwophaseGeometry, lba: u64) -> usize {
    (lba / geo.chunk_blocks) as usize % geo.copies()
}

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

/// Blocks `lo..hi` of a stripe row's chunks as [`Inner::read_stripe`] read and rebuilt them.
pub(super) struct StripeRead {
    /// Per chunk (code order: data `0..k`, then parity): the blocks, read or rebuilt; `None`
    /// for a chunk neither read nor rebuilt.
    pub chunks: Vec<Option<Vec<u8>>>,
    /// Per chunk: the metadata read with it (empty when not read).
    pub mds: Vec<Vec<u8>>,
    /// Per chunk and block: read from the member and found as it must be.
    pub intact: Vec<Vec<bool>>,
    /// Per chunk and block: intact, or rebuilt from the others.
    pub usable: Vec<Vec<bool>>,
    /// Wanted blocks (chunk, block offset from `lo`) that could not be rebuilt intact.
    pub lost: Vec<(usize, u32)>,
    pub tally: Tally,
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
        let runs = runs(&plan, self.geo.chunk_blocks);
        let mut rest = buf;
        let mut at = 0u64;
        let mut futs = Vec::with_capacity(runs.len());
        // Blocks no run covers (never written or trimmed) read as zeros; the runs' blocks are
        // filled by their reads, so only the gaps are zeroed.
        for run in &runs {
            let (gap, tail) =
                std::mem::take(&mut rest).split_at_mut((run.first - at) as usize * bs);
            gap.fill(0);
            let (head, tail) = tail.split_at_mut(run.count as usize * bs);
            rest = tail;
            at = run.first + run.count as u64;
            futs.push(self.read_run(run.loc, run.count, head, lba + run.first));
        }
        rest.fill(0);
        let results = join_all(futs).await;
        {
            let mut t = self.tables.lock();
            for (_, loc) in &plan {
                t.unpin(loc.row());
            }
        }
        for (run, r) in runs.iter().zip(results) {
            if let Some(&b) = r?.first() {
                return Err(self.corrupt(lba + run.first + b as u64, self.lost_detail(run.loc, b)));
            }
        }
        Ok(())
    }

    /// Says where a block no copy holds intact lives, for `DevError::Corrupt`.
    pub(super) fn lost_detail(&self, loc: Loc, b: u32) -> String {
        match loc {
            Loc::Log { row, set, off } => format!(
                "every copy of offset {} of replica set {set} of log row {row} fails its check",
                off + b
            ),
            Loc::Stripe { row, idx } => format!(
                "data block {} of stripe row {row} fails its check and more chunks than the {} \
                 parity chunks cover are bad",
                idx + b,
                self.geo.m
            ),
        }
    }

    /// Reads `count` blocks stored from `loc` into `buf`, checking each and healing bad copies;
    /// `hint` spreads replica choices. Returns the blocks (offsets in the run) no copy holds
    /// intact: their contents in `buf` are not to be used.
    pub(super) async fn read_run(
        &self,
        loc: Loc,
        count: u32,
        buf: &mut [u8],
        hint: u64,
    ) -> DevResult<Vec<u32>> {
        match loc {
            Loc::Log { row, set, off } => {
                let mut pref = first_replica(&self.geo, hint);
                // A slow member's copy is tried last when another copy's member can serve
                // (one read in `SLOW_PROBE_EVERY` still goes to it, to measure it).
                let member = |j: usize| self.geo.set_member(row, set as usize, j);
                if self.latency.is_slow(member(pref)) {
                    let other =
                        (1..self.geo.copies()).map(|a| (pref + a) % self.geo.copies()).find(|&j| {
                            let i = member(j);
                            !self.failed[i].load(Ordering::Acquire) && !self.latency.is_slow(i)
                        });
                    if let Some(j) = other.filter(|_| self.latency.avoid(member(pref))) {
                        self.c.slow_reads_routed.inc();
                        pref = j;
                    }
                }
                let read = LogRead { row, set: set as usize, off, pref, skip: None, locked: false };
                self.read_log(&read, buf, None, None).await
            }
            Loc::Stripe { row, idx } => self.read_stripe_data(row, idx, count, buf).await,
        }
    }

    /// Reads blocks from offset `off` of a replica set, each from the first copy that holds it
    /// intact, trying replica `pref` first and never member `skip`; copies found bad are
    /// rewritten from a good one. `exp` says what each block must hold (default: what the
    /// tables say now). The metadata of the copy used goes to `md_out` when given. Returns the
    /// blocks (offsets from `off`) no copy holds intact; `buf` and `md_out` hold the first
    /// readable copy's version of those.
    pub(super) async fn read_log(
        &self,
        read: &LogRead,
        buf: &mut [u8],
        md_out: Option<&mut [u8]>,
        exp: Option<Vec<Expect>>,
    ) -> DevResult<Vec<u32>> {
        let LogRead { row, set, off, pref, skip, locked } = *read;
        let (bs, mdb) = (self.block_bytes(), self.md_bytes);
        let n = buf.len() / bs;
        let (view, exp) = {
            let t = self.tables.lock();
            let exp = exp.unwrap_or_else(|| t.expect_set(row, set, off, off + n as u32));
            (self.view(&t, row), exp)
        };
        let lba = self.geo.member_lba(row) + off as u64;
        let copies = self.geo.copies();
        let mut md = vec![0u8; n * mdb];
        let mut good = vec![false; n];
        // Copies found bad: (replica index, member, block).
        let mut bad: Vec<(usize, usize, usize)> = Vec::new();
        let (mut scratch, mut scratch_md) = (Vec::new(), Vec::new());
        let (mut read_any, mut degraded) = (false, false);
        for a in 0..copies {
            let Some(lo) = good.iter().position(|g| !g) else { break };
            let hi = n - good.iter().rev().position(|g| !g).expect("one is not good");
            let j = (pref + a) % copies;
            let i = self.geo.set_member(row, set, j);
            if Some(i) == skip || !self.available(i, view.missing) {
                degraded = true;
                continue;
            }
            // The first copy read goes straight to the caller's buffer; later ones only fill
            // in the blocks it did not hold intact.
            let first = !read_any;
            let ok = if first {
                let (d, m) = (&mut buf[lo * bs..hi * bs], &mut md[lo * mdb..hi * mdb]);
                self.read_member(i, view.incs[i], lba + lo as u64, d, Some(m)).await?
            } else {
                scratch.resize((hi - lo) * bs, 0);
                scratch_md.resize((hi - lo) * mdb, 0);
                let m = Some(scratch_md.as_mut_slice());
                self.read_member(i, view.incs[i], lba + lo as u64, &mut scratch, m).await?
            };
            if !ok {
                degraded = true;
                continue;
            }
            read_any = true;
            self.c.member_read_bytes.add(((hi - lo) * bs) as u64);
            for b in lo..hi {
                if good[b] {
                    continue;
                }
                let at = lba + b as u64;
                let intact = if first {
                    self.block_ok(exp[b], row, j, at, &buf[b * bs..][..bs], &md[b * mdb..][..mdb])
                } else {
                    let (d, m) =
                        (&scratch[(b - lo) * bs..][..bs], &scratch_md[(b - lo) * mdb..][..mdb]);
                    let ok = self.block_ok(exp[b], row, j, at, d, m);
                    if ok {
                        buf[b * bs..][..bs].copy_from_slice(d);
                        md[b * mdb..][..mdb].copy_from_slice(m);
                    }
                    ok
                };
                if intact {
                    good[b] = true;
                } else {
                    bad.push((j, i, b));
                }
            }
        }
        if !read_any {
            return Err(DevError::DeviceFailed {
                name: format!(
                    "{}: no readable copy of replica set {set} of row {row} ({} failed members)",
                    self.info.name,
                    self.failed_members().len()
                ),
            });
        }
        if degraded {
            self.c.degraded_reads.inc();
        }
        // Bad copies of blocks found intact elsewhere get the good copy, with their own
        // replica index.
        let mut fixes: Vec<Fix> = Vec::new();
        bad.sort_unstable_by_key(|&(_, i, b)| (i, b));
        for &(j, i, b) in &bad {
            if good[b] {
                let data = &buf[b * bs..][..bs];
                let mut m = md[b * mdb..][..mdb].to_vec();
                BlockMd::reindex(&mut m, j, lba + b as u64, data);
                push_fix(&mut fixes, i, view.incs[i], lba + b as u64, data, &m);
            }
        }
        let lost: Vec<u32> = (0..n as u32).filter(|&b| !good[b as usize]).collect();
        let tally =
            Tally { checked: 0, bad: bad.len() as u64, healed: 0, unrepairable: lost.len() as u64 };
        self.count(&tally);
        self.heal(row, fixes, locked).await;
        if let Some(out) = md_out {
            out.copy_from_slice(&md);
        }
        Ok(lost)
    }

    /// Reads `count` blocks of a stripe's data from block `idx` (all in one chunk), rebuilding
    /// the ones that are not intact from the rest of the stripe. Returns the blocks (offsets
    /// from `idx`) that could not be rebuilt.
    async fn read_stripe_data(
        &self,
        row: u64,
        idx: u32,
        count: u32,
        buf: &mut [u8],
    ) -> DevResult<Vec<u32>> {
        let (bs, mdb) = (self.block_bytes(), self.md_bytes);
        let c = self.geo.chunk_blocks;
        let (d, off) = ((idx as u64 / c) as usize, idx as u64 % c);
        let i = self.geo.data_member(row, d);
        let (view, exp) = {
            let t = self.tables.lock();
            (self.view(&t, row), t.expect_chunk(row, d, off, off + count as u64))
        };
        let lba = self.geo.member_lba(row) + off;
        let mut available = self.available(i, view.missing);
        // A slow member's chunk is rebuilt from the others when they all hold the row.
        let n = self.geo.k + self.geo.m;
        let routed = available
            && (0..n).all(|j| j == i || self.available(j, view.missing))
            && self.latency.avoid(i);
        if routed {
            self.c.slow_reads_routed.inc();
        }
        if available && !routed {
            let mut md = vec![0u8; count as usize * mdb];
            if self.read_member(i, view.incs[i], lba, buf, Some(&mut md)).await? {
                self.c.member_read_bytes.add(buf.len() as u64);
                let intact = (0..count as usize).all(|b| {
                    let (data, m) = (&buf[b * bs..][..bs], &md[b * mdb..][..mdb]);
                    self.block_ok(exp[b], row, d, lba + b as u64, data, m)
                });
                if intact {
                    return Ok(Vec::new());
                }
            } else {
                available = false;
            }
        }
        if !available {
            self.c.degraded_reads.inc();
        }
        // Some block is bad, the member unavailable or slow: read the chunk again with the
        // rest of the stripe, which rebuilds and heals what it can. Routed around a slow
        // member, a rebuild that damage elsewhere defeats reads the slow member after all.
        let (lo, hi) = (off, off + count as u64);
        let r = match self.read_stripe(row, lo, hi, &[d], routed.then_some(i), false).await {
            // Another member failed since the choice, or damage elsewhere defeats the rebuild.
            Err(_) if routed => self.read_stripe(row, lo, hi, &[d], None, false).await?,
            Ok(r) if routed && !r.lost.is_empty() => {
                self.read_stripe(row, lo, hi, &[d], None, false).await?
            }
            r => r?,
        };
        buf.copy_from_slice(r.chunks[d].as_deref().expect("wanted chunk read or rebuilt"));
        Ok(r.lost.iter().map(|&(_, b)| b).collect())
    }

    /// Reads blocks `lo..hi` of chunks `want` (code order: data `0..k`, then parity) of stripe
    /// row `row`, never member `skip`, checking every block read; rebuilds, block by block, the
    /// wanted blocks (and any other block read bad) that are not intact from k intact blocks of
    /// the other chunks, and rewrites the bad ones it read (under the row's shared lock unless
    /// `locked`). Stripe rows do not change once written, so reads need no lock. Fails with
    /// `DeviceFailed` when fewer than k chunks can be read at all.
    pub(super) async fn read_stripe(
        &self,
        row: u64,
        lo: u64,
        hi: u64,
        want: &[usize],
        skip: Option<usize>,
        locked: bool,
    ) -> DevResult<StripeRead> {
        let (k, n) = (self.geo.k, self.geo.members());
        let (bs, mdb) = (self.block_bytes(), self.md_bytes);
        let count = (hi - lo) as usize;
        let len = count * bs;
        let base = self.geo.member_lba(row) + lo;
        let (view, exps) = {
            let t = self.tables.lock();
            let exps: Vec<Vec<Expect>> = (0..n).map(|x| t.expect_chunk(row, x, lo, hi)).collect();
            (self.view(&t, row), exps)
        };
        let readable = |x: usize| {
            let i = self.geo.chunk_member(row, x);
            Some(i) != skip && self.available(i, view.missing)
        };
        let mut out = StripeRead {
            chunks: vec![None; n],
            mds: vec![Vec::new(); n],
            intact: vec![vec![false; count]; n],
            usable: Vec::new(),
            lost: Vec::new(),
            tally: Tally::default(),
        };
        let mut tried = vec![false; n];
        // First the wanted chunks; only if one of their blocks is not intact, the rest.
        let mut round: Vec<usize> = want.iter().copied().filter(|&x| readable(x)).collect();
        for pass in 0..2 {
            let reads = round.iter().map(|&x| {
                let i = self.geo.chunk_member(row, x);
                let inc = view.incs[i];
                async move {
                    let mut b = vec![0u8; len];
                    let mut md = vec![0u8; count * mdb];
                    let r = self.read_member(i, inc, base, &mut b, Some(&mut md)).await;
                    (x, r.map(|ok| ok.then_some((b, md))))
                }
            });
            for (x, r) in join_all(reads).await {
                tried[x] = true;
                if let Some((b, md)) = r? {
                    self.c.member_read_bytes.add(len as u64);
                    for o in 0..count {
                        let (data, m) = (&b[o * bs..][..bs], &md[o * mdb..][..mdb]);
                        let ok = self.block_ok(exps[x][o], row, x, base + o as u64, data, m);
                        out.intact[x][o] = ok;
                        out.tally.bad += !ok as u64;
                    }
                    out.tally.checked += count as u64;
                    out.chunks[x] = Some(b);
                    out.mds[x] = md;
                }
            }
            if want.iter().all(|&x| out.intact[x].iter().all(|&g| g)) {
                out.usable = out.intact.clone();
                self.count(&out.tally);
                return Ok(out);
            }
            if pass == 0 {
                round = (0..n).filter(|&x| !tried[x] && readable(x)).collect();
            }
        }
        let present = out.chunks.iter().filter(|c| c.is_some()).count();
        if present < k {
            return Err(DevError::DeviceFailed {
                name: format!(
                    "{}: stripe row {row} has {present} readable chunks, {k} needed",
                    self.info.name
                ),
            });
        }
        let fixes = self.rebuild_columns(row, base, want, &exps, &view, &mut out).await?;
        out.tally.unrepairable = out.lost.len() as u64;
        self.count(&out.tally);
        out.tally.healed = self.heal(row, fixes, locked).await;
        Ok(out)
    }

    /// The block-by-block rebuild of [`Inner::read_stripe`]: at every block offset where a
    /// wanted chunk, or a chunk read with a bad block there, is not intact, rebuilds the
    /// chunks that are not intact from the intact ones (offsets with the same pattern at
    /// once); records what cannot be rebuilt in `out.lost`. Returns the rewrites of the bad
    /// blocks read.
    async fn rebuild_columns(
        &self,
        row: u64,
        base: u64,
        want: &[usize],
        exps: &[Vec<Expect>],
        view: &super::integrity::RowView,
        out: &mut StripeRead,
    ) -> DevResult<Vec<Fix>> {
        let (k, n) = (self.geo.k, self.geo.members());
        let (bs, mdb) = (self.block_bytes(), self.md_bytes);
        let count = out.intact[0].len();
        let was_read: Vec<bool> = out.chunks.iter().map(|c| c.is_some()).collect();
        for c in out.chunks.iter_mut() {
            c.get_or_insert_with(|| vec![0u8; count * bs]);
        }
        out.usable = out.intact.clone();
        let needs = |o: usize, out: &StripeRead| {
            (0..n).any(|x| !out.intact[x][o] && (want.contains(&x) || was_read[x]))
        };
        let pattern = |o: usize, out: &StripeRead| {
            (0..n).fold(0u64, |p, x| p | (out.intact[x][o] as u64) << x)
        };
        let mut fixes = Vec::new();
        let mut o = 0;
        while o < count {
            if !needs(o, out) {
                o += 1;
                continue;
            }
            let mask = pattern(o, out);
            let mut end = o + 1;
            while end < count && needs(end, out) && pattern(end, out) == mask {
                end += 1;
            }
            let targets: Vec<usize> = (0..n).filter(|&x| mask & 1 << x == 0).collect();
            if (mask.count_ones() as usize) < k {
                for b in o..end {
                    for &x in &targets {
                        if want.contains(&x) {
                            out.lost.push((x, b as u32));
                        }
                    }
                }
                o = end;
                continue;
            }
            let bytes = ((end - o) * bs) as u64;
            self.costs.charge_parity(bytes * k as u64).await;
            {
                let present: Vec<bool> = (0..n).map(|x| mask & 1 << x != 0).collect();
                let mut slices: Vec<&mut [u8]> = out
                    .chunks
                    .iter_mut()
                    .map(|c| &mut c.as_mut().expect("allocated above")[o * bs..end * bs])
                    .collect();
                self.codec
                    .reconstruct_slices(&mut slices, &present)
                    .map_err(|e| DevError::Invalid(e.to_string()))?;
            }
            self.c.reconstructed_bytes.add(bytes * targets.len() as u64);
            for &x in &targets {
                let i = self.geo.chunk_member(row, x);
                for (b, &e) in exps[x].iter().enumerate().take(end).skip(o) {
                    let at = base + b as u64;
                    let data = &out.chunks[x].as_ref().expect("allocated")[b * bs..][..bs];
                    // A block read with the metadata it must have but failing its checksum
                    // must match that checksum once rebuilt. If it does not, the rebuild came
                    // out wrong (the block was marked corrupt on purpose by a rebuild that
                    // could not reconstruct it): it is lost, not healed.
                    if was_read[x] && self.integrity() {
                        let m = &out.mds[x][b * mdb..][..mdb];
                        if self.head_ok(e, row, x, data, m) && !BlockMd::checksum_ok(m, at, data) {
                            if want.contains(&x) {
                                out.lost.push((x, b as u32));
                            }
                            continue;
                        }
                    }
                    out.usable[x][b] = true;
                    if was_read[x] {
                        let mut m = vec![0u8; mdb];
                        if self.encode_expected(e, row, x, at, data, &mut m) {
                            push_fix(&mut fixes, i, view.incs[i], at, data, &m);
                        }
                    }
                }
            }
            o = end;
        }
        out.lost.sort_unstable();
        Ok(fixes)
    }
}

/// Where and how [`Inner::read_log`] reads: offset `off` of replica set `set` of log row
/// `row`, replica `pref` first, never member `skip`; `locked` when the caller holds the row's
/// lock (a rebuild step), so healing must not take it again.
#[derive(Clone, Copy, Debug)]
pub(super) struct LogRead {
    pub row: u64,
    pub set: usize,
    pub off: u32,
    pub pref: usize,
    pub skip: Option<usize>,
    pub locked: bool,
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
