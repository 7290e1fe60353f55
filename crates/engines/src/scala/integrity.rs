//! Integrity: per-block checksums, self-heal and scrub (issue 17, "Silent corruption in the
//! arrays"; docs/scala.md, "Integrity").
//!
//! Every block copy carries a record (format.rs, [`Oob`]) with a crc32c over its data and the
//! record, and the record names the AFA place the copy belongs to. A copy *holds* a version
//! when its checksum matches and its record names the place it was read from and the user
//! block and timestamp the AMT maps there. That one check catches bit rot (the checksum), a
//! misdirected write (a record naming another place) and a lost write (the place still holds
//! an older version, or nothing, where the AMT expects a newer one; the AMT keeps each block's
//! timestamp beside its place, so the expectation costs no memory).
//!
//! A copy that fails is rebuilt from the stripe's redundancy: another replica while the stripe
//! is replicated, or a reconstruction through parity once it is converted. A reconstruction is
//! accepted only when every block the AMT maps into that row of the stripe passes the check
//! (any k of the k + m chunks are tried, data chunks first), so a parity chunk that went bad
//! silently is found too. The bad copies are rewritten in place (self-heal). Beyond the
//! redundancy the block is lost: user reads answer `DevError::Corrupt`, never wrong data.
//!
//! Everything that rewrites a stripe's chunks after its writes holds the stripe's lock
//! (`Inner::stripe_locks`): conversion, repairs, scrub and rebuild steps, and GC while it trims
//! a victim. So a repair never lands on a stripe recycled meanwhile, and parity is always
//! computed over what the data chunks hold.

use std::collections::HashMap;

use flashrig_blockdev::{DevError, DevResult, ScrubReport, WriteHints};
use futures_util::future::join_all;

use super::format::{Oob, Seal};
use super::tables::{entry_ts, state, NONE};
use super::Inner;

/// What a reader expects a data block's place to hold: the version the AMT maps there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Want {
    pub user: u32,
    pub ts: u32,
}

impl Want {
    /// The version of user block `user` in AMT entry `e`.
    pub(crate) fn of(user: u64, e: u64) -> Want {
        Want { user: user as u32, ts: entry_ts(e) }
    }
}

/// Whether a copy (`data`, its metadata `md`) read at AFA place `afa` holds version `want`.
pub(crate) fn holds(afa: u32, data: &[u8], md: &[u8], want: Want) -> bool {
    matches!(
        Oob::check(md, data),
        Seal::Valid(o) if o.afa == afa && o.user_block == want.user && o.ts == want.ts
    )
}

/// Good copies of blocks whose primary copy recovery found bad or missing: AFA place ->
/// (member, member LBA) of a backup copy that holds the block.
pub(crate) type Backups = HashMap<u32, (usize, u64)>;

/// What one verification found and did, in member blocks.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tally {
    pub checked: u64,
    pub checksum_errors: u64,
    pub mismatches: u64,
    pub repaired: u64,
    pub unrepairable: u64,
    /// Parity blocks rewritten (recovery tells a stripe converted now from one found
    /// converted by it).
    pub parity_written: u64,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.checked += o.checked;
        self.checksum_errors += o.checksum_errors;
        self.mismatches += o.mismatches;
        self.repaired += o.repaired;
        self.unrepairable += o.unrepairable;
        self.parity_written += o.parity_written;
    }
}

/// How a whole-stripe pass treats a row it cannot repair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Scrub: leave it as it is (its parity may still serve the row's other blocks).
    Scrub,
    /// Rebuild of shard `x` (its member is the replacement): write the best reconstruction.
    Rebuild(usize),
    /// Recovery: the stripe must end converted, so parity is computed over the data as it is.
    Recover,
}

/// The k-element subsets of `from`, in lexicographic order (so subsets of data chunks, which
/// come first in the shard order, are tried before those that need parity).
fn combinations(from: &[usize], k: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    if k > from.len() {
        return out;
    }
    let mut idx: Vec<usize> = (0..k).collect();
    loop {
        out.push(idx.iter().map(|&i| from[i]).collect());
        let Some(i) = (0..k).rev().find(|&i| idx[i] != i + from.len() - k) else { break };
        idx[i] += 1;
        for x in i + 1..k {
            idx[x] = idx[x - 1] + 1;
        }
    }
    out
}

/// Splits `(offset, bytes)` blocks (data then metadata, sorted by offset) into runs of
/// consecutive offsets.
fn runs(blocks: &[(u64, Vec<u8>)]) -> Vec<&[(u64, Vec<u8>)]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=blocks.len() {
        if i == blocks.len() || blocks[i].0 != blocks[i - 1].0 + 1 {
            out.push(&blocks[start..i]);
            start = i;
        }
    }
    out
}

impl Inner {
    /// The version the AMT maps at AFA place `afa`, if that is the block's current place and
    /// blocks are checked at all (`Inner::checks`): `None` leaves the place unchecked.
    pub(crate) fn want_at(&self, afa: u32) -> Option<Want> {
        if !self.checks() {
            return None;
        }
        self.live_at(afa).map(|(user, e)| Want::of(user as u64, e))
    }

    /// Adds a tally to the engine's counters.
    fn note(&self, t: &Tally) {
        self.c.checksum_errors.add(t.checksum_errors);
        self.c.healed_blocks.add(t.repaired);
        self.c.unrepairable_blocks.add(t.unrepairable);
        self.c.redundancy_mismatches.add(t.mismatches);
    }

    fn corrupt(&self, user: u32, detail: String) -> DevError {
        DevError::Corrupt { name: self.info.name.clone(), lba: user as u64, detail }
    }

    /// Shard `x` of stripe `s`: data slot `x` for `x < k`, parity row `x - k` after.
    pub(crate) fn shard_member(&self, s: u64, x: usize) -> usize {
        let g = &self.geo;
        if x < g.k {
            g.data_member(s, x)
        } else {
            g.parity_member(s, x - g.k)
        }
    }

    /// Reads blocks of slot `j` of stripe `s` from `off` with their metadata, as
    /// [`Inner::read_slot`] does, and checks every block the AMT maps there: one that fails is
    /// repaired from the stripe's redundancy and the buffers get its right contents. Returns
    /// the offsets (from `off`) of blocks lost beyond redundancy, whose buffers hold what was
    /// read. `locked`: the caller holds the stripe's lock. For internal reads whose data feeds
    /// redundancy or moves (conversion input, GC moves).
    pub(crate) async fn read_slot_verified(
        &self,
        s: u64,
        j: usize,
        off: u64,
        buf: &mut [u8],
        md: &mut [u8],
        locked: bool,
    ) -> DevResult<Vec<usize>> {
        let (bs, mdb) = (self.bs(), self.mdb);
        self.read_slot(s, j, off, buf, Some(&mut *md)).await?;
        let mut lost = Vec::new();
        for b in 0..buf.len() / bs {
            let afa = self.geo.afa(s, j, off + b as u64);
            let Some(want) = self.want_at(afa) else { continue };
            if holds(afa, &buf[b * bs..][..bs], &md[b * mdb..][..mdb], want) {
                continue;
            }
            match self.repair_block(s, j, off + b as u64, want, None, locked).await {
                Ok(Some((d, m))) => {
                    buf[b * bs..][..bs].copy_from_slice(&d);
                    md[b * mdb..][..mdb].copy_from_slice(&m);
                }
                // The stripe was recycled meanwhile: nothing of it needs protecting.
                Ok(None) => {}
                Err(DevError::Corrupt { .. }) => lost.push(b),
                Err(e) => return Err(e),
            }
        }
        Ok(lost)
    }

    /// Repairs block `off` of slot `j` of stripe `s`, whose copy just read did not hold
    /// `want`: finds a copy that does (another replica, or a reconstruction through parity),
    /// rewrites the copies that do not, and returns the block's data and metadata.
    /// `Ok(None)`: the stripe was recycled since incarnation `inc` (or holds no data now), so
    /// the caller reads again through the AMT. `Err(Corrupt)`: no good copy is left.
    /// `locked`: the caller holds the stripe's lock.
    pub(crate) async fn repair_block(
        &self,
        s: u64,
        j: usize,
        off: u64,
        want: Want,
        inc: Option<u32>,
        locked: bool,
    ) -> DevResult<Option<(Vec<u8>, Vec<u8>)>> {
        let _g = match locked {
            true => None,
            false => Some(self.stripe_locks.lock(s).await),
        };
        if inc.is_some_and(|i| i != self.t.incarnation(s)) {
            return Ok(None);
        }
        let mut t = Tally::default();
        let r = match self.t.state(s) {
            state::OPEN | state::FULL => self.repair_copies(s, j, off, want, &mut t).await,
            state::CONVERTED | state::VICTIM | state::CONVERTING => {
                self.repair_row(s, j, off, want, &mut t).await
            }
            _ => return Ok(None),
        };
        self.note(&t);
        r.map(Some)
    }

    /// The copies of block (`j`, `off`) of replicated stripe `s`: (member, LBA, hints); the
    /// primary first.
    fn copies(&self, s: u64, j: usize, off: u64) -> Vec<(usize, u64, WriteHints)> {
        let g = &self.geo;
        let backup = WriteHints { transient: self.opts.transient_tags, ..WriteHints::NONE };
        let mut places = vec![(g.data_member(s, j), g.hh_lba(s) + off, WriteHints::NONE)];
        for i in 0..g.m {
            let v = self.t.vh(s, i);
            if v != NONE {
                places.push((g.parity_member(s, i), g.vh_lba(v, j) + off, backup));
            }
        }
        places
    }

    /// Reads `blocks` blocks at `lba` of member `mem` with their metadata; `None` when the
    /// member cannot serve stripe `s` (failed, or not rebuilt that far) or fails now.
    async fn read_copy(
        &self,
        mem: usize,
        s: u64,
        lba: u64,
        blocks: usize,
    ) -> DevResult<Option<(Vec<u8>, Vec<u8>)>> {
        if !self.readable(mem, s) {
            return Ok(None);
        }
        let dev = self.member(mem);
        let mut d = vec![0u8; blocks * self.bs()];
        let mut m = vec![0u8; blocks * self.mdb];
        self.c.member_read_bytes.add(d.len() as u64);
        match dev.read(lba, &mut d, Some(&mut m)).await {
            Ok(()) => Ok(Some((d, m))),
            Err(e) => self.member_error(mem, &dev, e).map(|_| None),
        }
    }

    /// Writes `data` and `md` at `lba` of member `mem`; true when it landed.
    async fn rewrite(
        &self,
        mem: usize,
        lba: u64,
        data: &[u8],
        md: &[u8],
        hints: WriteHints,
    ) -> DevResult<bool> {
        if self.is_failed(mem) {
            return Ok(false);
        }
        let dev = self.member(mem);
        self.c.member_write_bytes.add(data.len() as u64);
        match dev.write(lba, data, Some(md), hints).await {
            Ok(()) => Ok(true),
            Err(e) => self.member_error(mem, &dev, e).map(|_| false),
        }
    }

    /// Repair in a replicated stripe: the first copy that holds `want` is written over the
    /// copies that do not.
    async fn repair_copies(
        &self,
        s: u64,
        j: usize,
        off: u64,
        want: Want,
        t: &mut Tally,
    ) -> DevResult<(Vec<u8>, Vec<u8>)> {
        let afa = self.geo.afa(s, j, off);
        let places = self.copies(s, j, off);
        let reads = places.iter().map(|&(mem, lba, _)| self.read_copy(mem, s, lba, 1));
        let mut copies = Vec::with_capacity(places.len());
        for r in join_all(reads).await {
            copies.push(r?);
        }
        let ok: Vec<Option<bool>> =
            copies.iter().map(|c| c.as_ref().map(|(d, m)| holds(afa, d, m, want))).collect();
        t.checked += ok.iter().flatten().count() as u64;
        let bad: Vec<usize> = (0..places.len()).filter(|&x| ok[x] == Some(false)).collect();
        t.checksum_errors += bad.len() as u64;
        let Some(good) = (0..places.len()).find(|&x| ok[x] == Some(true)) else {
            t.unrepairable += 1;
            return Err(self.corrupt(
                want.user,
                format!(
                    "stripe {s} slot {j} offset {off}: no copy of {} holds version {}",
                    places.len(),
                    want.ts
                ),
            ));
        };
        let (d, m) = copies[good].take().expect("read");
        for x in bad {
            let (mem, lba, hints) = places[x];
            if self.rewrite(mem, lba, &d, &m, hints).await? {
                t.repaired += 1;
            }
        }
        Ok((d, m))
    }

    /// Reads row `off` of stripe `s` (one block of each of its k + m chunks) as shards of data
    /// then metadata; `None` for a chunk that cannot be read.
    async fn read_row(&self, s: u64, off: u64) -> DevResult<Vec<Option<Vec<u8>>>> {
        let g = &self.geo;
        let reads =
            (0..g.n).map(|x| self.read_copy(self.shard_member(s, x), s, g.hh_lba(s) + off, 1));
        let mut row = Vec::with_capacity(g.n);
        for r in join_all(reads).await {
            row.push(r?.map(|(mut d, m)| {
                d.extend_from_slice(&m);
                d
            }));
        }
        Ok(row)
    }

    /// Whether every block of a candidate row that has a want holds it.
    fn row_holds(&self, s: u64, off: u64, row: &[Vec<u8>], wants: &[Option<Want>]) -> bool {
        let bs = self.bs();
        (0..self.geo.k).all(|x| {
            wants[x].is_none_or(|w| {
                row[x].len() > bs && holds(self.geo.afa(s, x, off), &row[x][..bs], &row[x][bs..], w)
            })
        })
    }

    /// The row as it should be: the first codeword, built from k of the available shards
    /// (data first), in which every block that has a want holds it. `None` when no choice of
    /// k shards gives one (more bad chunks than the parity covers).
    fn solve_row(
        &self,
        s: u64,
        off: u64,
        shards: &[Option<Vec<u8>>],
        wants: &[Option<Want>],
    ) -> Option<Vec<Vec<u8>>> {
        let (k, n) = (self.geo.k, self.geo.n);
        let avail: Vec<usize> = (0..n).filter(|&x| shards[x].is_some()).collect();
        for pick in combinations(&avail, k) {
            let mut sh: Vec<Option<Vec<u8>>> = vec![None; n];
            for &x in &pick {
                sh[x] = shards[x].clone();
            }
            let row: Vec<Vec<u8>> = if pick.iter().copied().eq(0..k) {
                // All data chunks: plain encoding, no decoder to set up (the common case).
                self.encode_row(&sh)?
            } else {
                if self.codec.reconstruct(&mut sh).is_err() {
                    continue;
                }
                sh.into_iter().map(Option::unwrap_or_default).collect()
            };
            if self.row_holds(s, off, &row, wants) {
                return Some(row);
            }
        }
        None
    }

    /// The whole row from its k data shards (all present) and their parity.
    fn encode_row(&self, sh: &[Option<Vec<u8>>]) -> Option<Vec<Vec<u8>>> {
        let (k, m) = (self.geo.k, self.geo.m);
        let data: Vec<&[u8]> = sh[..k].iter().map(|x| x.as_deref()).collect::<Option<_>>()?;
        let len = data[0].len();
        let mut parity = vec![vec![0u8; len]; m];
        let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
        self.codec.encode(&data, &mut p).ok()?;
        Some(data.iter().map(|d| d.to_vec()).chain(parity).collect())
    }

    /// Repair in a converted stripe: solves the block's row and rewrites every chunk of the
    /// row that disagrees with the solution (data or parity).
    async fn repair_row(
        &self,
        s: u64,
        j: usize,
        off: u64,
        want: Want,
        t: &mut Tally,
    ) -> DevResult<(Vec<u8>, Vec<u8>)> {
        let g = &self.geo;
        let bs = self.bs();
        let shards = self.read_row(s, off).await?;
        t.checked += shards.iter().flatten().count() as u64;
        let mut wants: Vec<Option<Want>> =
            (0..g.k).map(|x| self.want_at(g.afa(s, x, off))).collect();
        wants[j] = Some(want);
        let Some(row) = self.solve_row(s, off, &shards, &wants) else {
            self.count_lost_row(s, off, &shards, &wants, t);
            return Err(self.corrupt(
                want.user,
                format!(
                    "stripe {s} slot {j} offset {off}: no {} of its {} chunks rebuild it",
                    g.k, g.n
                ),
            ));
        };
        self.fix_row(s, off, &shards, &row, &wants, t).await?;
        let (d, m) = row[j].split_at(bs);
        Ok((d.to_vec(), m.to_vec()))
    }

    /// Counts a row no reconstruction repairs: every block with a want whose copy fails (or
    /// cannot be read) is lost.
    fn count_lost_row(
        &self,
        s: u64,
        off: u64,
        shards: &[Option<Vec<u8>>],
        wants: &[Option<Want>],
        t: &mut Tally,
    ) {
        let bs = self.bs();
        for x in 0..self.geo.k {
            let Some(w) = wants[x] else { continue };
            let afa = self.geo.afa(s, x, off);
            match &shards[x] {
                Some(b) if b.len() > bs && holds(afa, &b[..bs], &b[bs..], w) => {}
                Some(_) => {
                    t.checksum_errors += 1;
                    t.unrepairable += 1;
                }
                None => t.unrepairable += 1,
            }
        }
    }

    /// Counts and rewrites the shards of row `off` that differ from the solution `row`
    /// (`wants`: the versions its data blocks should hold, `None` where unmapped).
    async fn fix_row(
        &self,
        s: u64,
        off: u64,
        shards: &[Option<Vec<u8>>],
        row: &[Vec<u8>],
        wants: &[Option<Want>],
        t: &mut Tally,
    ) -> DevResult<()> {
        let (g, bs) = (&self.geo, self.bs());
        for x in 0..g.n {
            let Some(stored) = &shards[x] else { continue };
            if *stored == row[x] {
                continue;
            }
            self.count_fix(s, x, off, stored, wants.get(x).copied().flatten(), t);
            let (d, m) = row[x].split_at(bs);
            if self
                .rewrite(self.shard_member(s, x), g.hh_lba(s) + off, d, m, WriteHints::NONE)
                .await?
            {
                t.repaired += 1;
                if x >= g.k {
                    t.parity_written += 1;
                }
            }
        }
        Ok(())
    }

    /// Counts one stored shard of a row that disagrees with the row's solution: a data block
    /// that does not hold its version (`want`), or without one whose record does not check,
    /// is a checksum error; anything else (parity, or an unmapped data block whose record
    /// checks) disagreed with the redundancy.
    fn count_fix(
        &self,
        s: u64,
        x: usize,
        off: u64,
        stored: &[u8],
        want: Option<Want>,
        t: &mut Tally,
    ) {
        let bs = self.bs();
        let afa = self.geo.afa(s, x, off);
        let data_bad = x < self.geo.k
            && stored.len() > bs
            && match want {
                Some(w) => !holds(afa, &stored[..bs], &stored[bs..], w),
                None => !matches!(
                    Oob::check(&stored[bs..], &stored[..bs]),
                    Seal::Valid(o) if o.afa == afa
                ),
            };
        if data_bad {
            t.checksum_errors += 1;
        } else {
            t.mismatches += 1;
        }
    }

    /// Verifies converted stripe `s` whole (the caller holds its lock): reads its k + m
    /// chunks, checks every block the AMT maps there and the parity of every row, and
    /// rewrites whatever disagrees with the row's solution. `pass` says what happens to a row
    /// with no solution and which chunk, if any, is being rebuilt; `backups` are good copies
    /// recovery found for blocks whose primary copy is bad.
    pub(crate) async fn verify_stripe(
        &self,
        s: u64,
        pass: Pass,
        backups: Option<&Backups>,
    ) -> DevResult<Tally> {
        let g = &self.geo;
        let (bs, mdb, chunk) = (self.bs(), self.mdb, g.chunk_blocks);
        let target = match pass {
            Pass::Rebuild(x) => Some(x),
            _ => None,
        };
        let reads = (0..g.n).map(|x| async move {
            if Some(x) == target {
                return Ok(None);
            }
            self.read_copy(self.shard_member(s, x), s, g.hh_lba(s), chunk as usize).await
        });
        let mut chunks = Vec::with_capacity(g.n);
        for r in join_all(reads).await {
            chunks.push(r?);
        }
        let mut t = Tally::default();
        t.checked += chunks.iter().flatten().count() as u64 * chunk;
        // Per shard: the blocks to write, as (offset, data then metadata).
        let mut fixes: Vec<Vec<(u64, Vec<u8>)>> = vec![Vec::new(); g.n];
        let mut rebuilt: Vec<(u64, Vec<u8>)> = Vec::new();
        for off in 0..chunk {
            let mut shards: Vec<Option<Vec<u8>>> = chunks
                .iter()
                .map(|c| {
                    c.as_ref().map(|(d, m)| {
                        let mut b = d[off as usize * bs..][..bs].to_vec();
                        b.extend_from_slice(&m[off as usize * mdb..][..mdb]);
                        b
                    })
                })
                .collect();
            let wants: Vec<Option<Want>> =
                (0..g.k).map(|x| self.want_at(g.afa(s, x, off))).collect();
            if let Some(b) = backups {
                self.take_backups(s, off, &mut shards, &wants, b, &mut fixes, &mut t).await?;
            }
            let row = match self.solve_row(s, off, &shards, &wants) {
                Some(row) => row,
                None => {
                    self.count_lost_row(s, off, &shards, &wants, &mut t);
                    match pass {
                        Pass::Scrub => continue,
                        Pass::Recover => match self.encode_row(&shards) {
                            Some(row) => row,
                            None => continue,
                        },
                        Pass::Rebuild(x) => {
                            // The best the surviving chunks give; its blocks fail their check
                            // when read, as they did before.
                            let mut sh = shards.clone();
                            let have: Vec<usize> = (0..g.n).filter(|&y| sh[y].is_some()).collect();
                            for &y in have.iter().skip(g.k) {
                                sh[y] = None;
                            }
                            if self.codec.reconstruct(&mut sh).is_err() {
                                continue;
                            }
                            rebuilt.push((off, sh[x].take().unwrap_or_default()));
                            continue;
                        }
                    }
                }
            };
            for x in 0..g.n {
                let Some(stored) = &shards[x] else { continue };
                if *stored != row[x] {
                    self.count_fix(s, x, off, stored, wants.get(x).copied().flatten(), &mut t);
                    fixes[x].push((off, row[x].clone()));
                }
            }
            if let Some(x) = target {
                rebuilt.push((off, row[x].clone()));
            }
        }
        for (x, blocks) in fixes.iter_mut().enumerate() {
            blocks.sort_by_key(|b| b.0);
            blocks.dedup_by_key(|b| b.0);
            let written = self.write_shard_blocks(s, x, blocks).await?;
            t.repaired += written;
            if x >= g.k {
                t.parity_written += written;
            }
        }
        if let Some(x) = target {
            // The replacement's chunk, written whatever it held (it is not readable yet).
            let mem = self.shard_member(s, x);
            let dev = self.member(mem);
            for run in runs(&rebuilt) {
                let (d, m) = Self::join_run(run, bs);
                self.c.member_write_bytes.add(d.len() as u64);
                if let Err(e) =
                    dev.write(g.hh_lba(s) + run[0].0, &d, Some(&m), WriteHints::NONE).await
                {
                    self.member_error(mem, &dev, e)?;
                }
            }
        }
        self.note(&t);
        Ok(t)
    }

    /// Recovery: replaces the shards of row `off` whose block fails its check by a backup
    /// copy that holds it, and queues their rewrite.
    #[allow(clippy::too_many_arguments)]
    async fn take_backups(
        &self,
        s: u64,
        off: u64,
        shards: &mut [Option<Vec<u8>>],
        wants: &[Option<Want>],
        backups: &Backups,
        fixes: &mut [Vec<(u64, Vec<u8>)>],
        t: &mut Tally,
    ) -> DevResult<()> {
        let bs = self.bs();
        for x in 0..self.geo.k {
            let (Some(w), Some(stored)) = (wants[x], &shards[x]) else { continue };
            let afa = self.geo.afa(s, x, off);
            if stored.len() > bs && holds(afa, &stored[..bs], &stored[bs..], w) {
                continue;
            }
            let Some(&(mem, lba)) = backups.get(&afa) else { continue };
            let Some((d, m)) = self.read_copy(mem, s, lba, 1).await? else { continue };
            t.checked += 1;
            if holds(afa, &d, &m, w) {
                t.checksum_errors += 1;
                let mut b = d;
                b.extend_from_slice(&m);
                fixes[x].push((off, b.clone()));
                shards[x] = Some(b);
            }
        }
        Ok(())
    }

    /// Data and metadata of a run of blocks, each given as data then metadata.
    fn join_run(run: &[(u64, Vec<u8>)], bs: usize) -> (Vec<u8>, Vec<u8>) {
        let mut d = Vec::with_capacity(run.len() * bs);
        let mut m = Vec::new();
        for (_, b) in run {
            d.extend_from_slice(&b[..bs]);
            m.extend_from_slice(&b[bs..]);
        }
        (d, m)
    }

    /// Writes blocks of shard `x` of stripe `s` (sorted by offset, each data then metadata),
    /// one write per run of consecutive offsets. Returns the blocks that landed.
    async fn write_shard_blocks(
        &self,
        s: u64,
        x: usize,
        blocks: &[(u64, Vec<u8>)],
    ) -> DevResult<u64> {
        let mem = self.shard_member(s, x);
        let mut written = 0;
        for run in runs(blocks) {
            let (d, m) = Self::join_run(run, self.bs());
            let lba = self.geo.hh_lba(s) + run[0].0;
            if self.rewrite(mem, lba, &d, &m, WriteHints::NONE).await? {
                written += run.len() as u64;
            }
        }
        Ok(written)
    }

    /// Scrub of replicated stripe `s` (the caller holds its lock): every block the AMT maps
    /// there is checked on each of its copies, and a copy that fails gets a good one's
    /// contents. Blocks the AMT does not map are not checked: the parity conversion computes
    /// from them is consistent with whatever they hold.
    async fn scrub_replicated(&self, s: u64) -> DevResult<Tally> {
        let g = &self.geo;
        let (bs, mdb, chunk) = (self.bs(), self.mdb, g.chunk_blocks);
        let mut t = Tally::default();
        for j in 0..g.k {
            let wants: Vec<Option<Want>> =
                (0..chunk).map(|off| self.want_at(g.afa(s, j, off))).collect();
            if wants.iter().all(Option::is_none) {
                continue;
            }
            let places = self.copies(s, j, 0);
            let reads =
                places.iter().map(|&(mem, lba, _)| self.read_copy(mem, s, lba, chunk as usize));
            let mut copies = Vec::with_capacity(places.len());
            for r in join_all(reads).await {
                copies.push(r?);
            }
            t.checked += copies.iter().flatten().count() as u64 * chunk;
            for (off, want) in wants.iter().enumerate() {
                let Some(w) = *want else { continue };
                let afa = g.afa(s, j, off as u64);
                let block = |c: &(Vec<u8>, Vec<u8>)| {
                    (c.0[off * bs..][..bs].to_vec(), c.1[off * mdb..][..mdb].to_vec())
                };
                let ok: Vec<Option<bool>> = copies
                    .iter()
                    .map(|c| {
                        c.as_ref().map(|(d, m)| {
                            holds(afa, &d[off * bs..][..bs], &m[off * mdb..][..mdb], w)
                        })
                    })
                    .collect();
                let bad: Vec<usize> = (0..places.len()).filter(|&x| ok[x] == Some(false)).collect();
                if bad.is_empty() {
                    continue;
                }
                t.checksum_errors += bad.len() as u64;
                let Some(good) = (0..places.len()).find(|&x| ok[x] == Some(true)) else {
                    t.unrepairable += 1;
                    continue;
                };
                let (d, m) = block(copies[good].as_ref().expect("read"));
                for x in bad {
                    let (mem, lba, hints) = places[x];
                    if self.rewrite(mem, lba + off as u64, &d, &m, hints).await? {
                        t.repaired += 1;
                    }
                }
            }
        }
        self.note(&t);
        Ok(t)
    }

    /// `VendorCommand::Scrub`: every stripe that holds data, one at a time under its lock,
    /// beside user I/O, conversion and GC (which take the same locks for what they rewrite).
    /// Replicated stripes have each mapped block checked on every copy; converted stripes are
    /// verified whole, data and parity (`verify_stripe`).
    pub(crate) async fn scrub(&self) -> DevResult<ScrubReport> {
        if !self.checks() {
            // Members that keep no payload: there is nothing to verify.
            return Err(DevError::Unsupported { command: "scrub over members that keep no data" });
        }
        self.c.scrubs.inc();
        let mut total = Tally::default();
        for s in 0..self.geo.hh {
            if self.failed_count() > self.geo.m {
                return Err(DevError::DeviceFailed {
                    name: format!("{}: more than {} members failed", self.info.name, self.geo.m),
                });
            }
            let _g = self.stripe_locks.lock(s).await;
            let t = match self.t.state(s) {
                state::OPEN | state::FULL => self.scrub_replicated(s).await?,
                state::CONVERTED | state::VICTIM => {
                    self.verify_stripe(s, Pass::Scrub, None).await?
                }
                _ => continue,
            };
            total.add(&t);
        }
        if total.repaired > 0 {
            // Repairs are ordinary writes: make them as durable as what they repaired.
            self.flush_members().await?;
        }
        Ok(ScrubReport {
            blocks_checked: total.checked,
            checksum_errors: total.checksum_errors,
            redundancy_mismatches: total.mismatches,
            repaired: total.repaired,
            unrepairable: total.unrepairable,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_come_in_order_data_first() {
        assert_eq!(
            combinations(&[0, 1, 2, 3], 2),
            vec![vec![0, 1], vec![0, 2], vec![0, 3], vec![1, 2], vec![1, 3], vec![2, 3]]
        );
        assert_eq!(combinations(&[1, 4], 2), vec![vec![1, 4]]);
        assert!(combinations(&[1], 2).is_empty());
    }

    #[test]
    fn runs_split_at_gaps() {
        let b = |o: u64| (o, vec![]);
        let blocks = vec![b(0), b(1), b(3), b(4), b(5), b(9)];
        let r: Vec<Vec<u64>> =
            runs(&blocks).iter().map(|r| r.iter().map(|x| x.0).collect()).collect();
        assert_eq!(r, vec![vec![0, 1], vec![3, 4, 5], vec![9]]);
        assert!(runs(&[]).is_empty());
    }
}
