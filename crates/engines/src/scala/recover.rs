//! Recovery of the AMT and HGMT after a crash (§5.4 "Recovery of mapping table"), as an ordered
//! list of named steps.
//!
//! The newest valid checkpoint gives the AMT as it was then and the stripes that could be
//! written after it (granted, open, full or in the grant window). Only those are scanned: each
//! data block's OOB record (user block, timestamp, AFA place, checksum) says which version it
//! holds, and the newest version of every user block wins (a GC copy has its original's
//! timestamp and wins a tie, because the checkpointed place may have been recycled). A record
//! counts only if its checksum matches and it names the place it was found at. The transient
//! area is read too: a backup copy stands in for a primary copy that does not check (rot, a
//! lost or misdirected write), so a version whose primary copy was lost is still found. Trims
//! are replayed from the journal. Then every scanned stripe that holds data is *settled*: every
//! block mapped into it is checked (a bad primary copy is rewritten from a backup copy or
//! through the parity), and its parity chunks are compared, data and metadata, with the parity
//! of its data chunks (what an offloaded conversion writes, §5.4); rows that match were
//! converted, the others get their parity now. Backup copies are not needed after that (the
//! primary copies are on the HH). A checkpoint of the recovered map is made durable before
//! anything is trimmed; then the whole transient area is trimmed (every VH is free again), and
//! so are the stripes that hold nothing now. A final checkpoint ends recovery.
//!
//! Recovery needs every member: it reads primary copies, which a failed member does not have.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use flashrig_blockdev::{DevError, DevResult};
use futures_util::future::join_all;

use super::format::{check_superblock, Checkpoint, Delta, Oob, Seal, TrimRecord, AMT_PAGE_ENTRIES};
use super::integrity::{Backups, Pass};
use super::tables::{entry, entry_afa, entry_is_data, entry_ts, state, TRIMMED};
use super::Inner;

/// The stripes recovery scans, and which of their places hold a primary copy whose record
/// checks and names the place: a bit per block of a scanned stripe (the scan list is bounded
/// by the grant window, so this stays small where a bit per AFA block would not).
struct Scanned {
    /// Per stripe: its position in the scan list, or `u32::MAX` when it is not scanned.
    index: Vec<u32>,
    ok: Vec<u64>,
    stripe_blocks: u64,
}

impl Scanned {
    fn new(hh: u64, scan: &[u32], stripe_blocks: u64) -> Scanned {
        let mut index = vec![u32::MAX; hh as usize];
        let mut n = 0u32;
        for &s in scan {
            if let Some(x) = index.get_mut(s as usize) {
                if *x == u32::MAX {
                    *x = n;
                    n += 1;
                }
            }
        }
        let ok = vec![0u64; (n as u64 * stripe_blocks).div_ceil(64) as usize];
        Scanned { index, ok, stripe_blocks }
    }

    fn contains(&self, s: u64) -> bool {
        self.index.get(s as usize).is_some_and(|&x| x != u32::MAX)
    }

    /// The bit of AFA place `afa`, if its stripe is scanned.
    fn bit(&self, afa: u32) -> Option<usize> {
        let s = afa as u64 / self.stripe_blocks;
        let x = *self.index.get(s as usize).filter(|&&x| x != u32::MAX)?;
        Some((x as u64 * self.stripe_blocks + afa as u64 % self.stripe_blocks) as usize)
    }

    fn mark(&mut self, afa: u32) {
        if let Some(b) = self.bit(afa) {
            self.ok[b / 64] |= 1 << (b % 64);
        }
    }

    fn primary_ok(&self, afa: u32) -> bool {
        self.bit(afa).is_some_and(|b| self.ok[b / 64] & (1 << (b % 64)) != 0)
    }
}

/// The steps of recovery, in order.
pub const RECOVERY_STEPS: &[&str] = &[
    "read_superblock",
    "load_checkpoint",
    "scan_heroes",
    "scan_backups",
    "replay_trims",
    "rebuild_tables",
    "settle_stripes",
    "write_checkpoint",
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepReport {
    pub name: &'static str,
    pub detail: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub steps: Vec<StepReport>,
    /// Stripes whose OOB was scanned.
    pub scanned_stripes: u64,
    /// Stripes found converted by their parity's metadata.
    pub converted_found: u64,
    /// Stripes converted by recovery.
    pub converted_now: u64,
}

impl Inner {
    pub(crate) async fn recover(self: &Arc<Self>) -> DevResult<RecoveryReport> {
        let g = self.geo.clone();
        let bs = self.bs();
        let mdb = self.mdb;
        let mut rep = RecoveryReport::default();
        let members = self.members.read().clone();
        let step = |rep: &mut RecoveryReport, i: usize, detail: String| {
            rep.steps.push(StepReport { name: RECOVERY_STEPS[i], detail });
        };

        // 1. read_superblock
        for d in &members {
            let mut b = vec![0u8; bs];
            d.read(0, &mut b, None).await?;
            check_superblock(&g, &b, &d.info().name)?;
        }
        step(&mut rep, 0, format!("{} members agree on the geometry", g.n));

        // 2. load_checkpoint: the newest valid full checkpoint in either slot of any member,
        //    then the deltas that extend it, in order, from the delta log of the members that
        //    hold it.
        let mut best: Option<Checkpoint> = None;
        let mut best_slot = 0;
        let mut holders: Vec<usize> = Vec::new();
        let ckpt_bytes = (g.ckpt_chunks * g.chunk_blocks) as usize * bs;
        for (i, d) in members.iter().enumerate() {
            for slot in 0..2 {
                let mut b = vec![0u8; ckpt_bytes];
                if d.read(g.ckpt_lba(slot), &mut b, None).await.is_err() {
                    continue;
                }
                if let Some(c) = Checkpoint::decode(&b) {
                    match &best {
                        Some(x) if c.seq < x.seq => {}
                        Some(x) if c.seq == x.seq => holders.push(i),
                        _ => {
                            best = Some(c);
                            best_slot = slot;
                            holders = vec![i];
                        }
                    }
                }
            }
        }
        let mut ckpt = best.ok_or_else(|| {
            DevError::Invalid(format!(
                "scala {}: no valid checkpoint on any member",
                self.info.name
            ))
        })?;
        if ckpt.amt.len() as u64 != g.user_blocks || ckpt.converted.len() as u64 != g.hh {
            return Err(DevError::Invalid(format!(
                "scala {}: checkpoint {} does not match the geometry",
                self.info.name, ckpt.seq
            )));
        }
        let base_seq = ckpt.seq;
        // The longest chain of deltas any holder has: each delta is written to every holder,
        // after the one before it is durable, so a holder's log is a prefix of the chain.
        let mut chain: Vec<Delta> = Vec::new();
        for &i in &holders {
            let mut log = vec![0u8; g.dlog_blocks() as usize * bs];
            if members[i].read(g.dlog_lba(), &mut log, None).await.is_err() {
                continue;
            }
            let mut found = Vec::new();
            let mut pos = 0;
            while let Some((d, len)) = Delta::decode(&log[pos..], ckpt.amt.len()) {
                if d.base_seq != base_seq || d.seq != base_seq + 1 + found.len() as u64 {
                    break;
                }
                if d.stripes != g.hh
                    || d.pages.iter().any(|(p, _)| *p as usize * AMT_PAGE_ENTRIES >= ckpt.amt.len())
                {
                    break;
                }
                found.push(d);
                pos += len;
            }
            if found.len() > chain.len() {
                chain = found;
            }
        }
        for d in &chain {
            for (p, entries) in &d.pages {
                let first = *p as usize * AMT_PAGE_ENTRIES;
                ckpt.amt[first..first + entries.len()].copy_from_slice(entries);
            }
            for s in 0..g.hh as usize {
                ckpt.converted[s] = (d.converted.get(s / 8).copied().unwrap_or(0) >> (s % 8)) & 1;
            }
            ckpt.scan.clone_from(&d.scan);
            ckpt.next_ts = d.next_ts;
            ckpt.seq = d.seq;
        }
        for (cell, &e) in self.t.amt.iter().zip(&ckpt.amt) {
            cell.store(e, Relaxed);
        }
        // Later checkpoints must outrank this one, and the next full one must not overwrite
        // the base that recovery read (the other slot may hold a base whose deltas are gone).
        {
            let mut mgr = self.mgr.lock();
            mgr.ckpt_seq = ckpt.seq;
            mgr.ckpt_base = Some(super::space::CkptBase {
                seq: base_seq,
                slot: best_slot,
                members: holders.clone(),
            });
            mgr.dlog_used_blocks = g.dlog_blocks();
        }
        let mut max_ts = ckpt.next_ts.saturating_sub(1);
        step(
            &mut rep,
            1,
            format!(
                "checkpoint {base_seq} and {} deltas ({} stripes to scan)",
                chain.len(),
                ckpt.scan.len()
            ),
        );

        // 3. scan_heroes
        let chunk = g.chunk_blocks as usize;
        let mut has_data = vec![false; g.hh as usize];
        let mut found = 0u64;
        let mut scanned = Scanned::new(g.hh, &ckpt.scan, g.stripe_blocks());
        for &s in &ckpt.scan {
            let s = s as u64;
            let g = &g;
            let reads = (0..g.k).map(|j| {
                let dev = members[g.data_member(s, j)].clone();
                async move {
                    let mut d = vec![0u8; chunk * bs];
                    let mut md = vec![0u8; chunk * mdb];
                    dev.read(g.hh_lba(s), &mut d, Some(&mut md)).await.map(|_| (d, md))
                }
            });
            let chunks = join_all(reads).await;
            for (j, r) in chunks.into_iter().enumerate() {
                let (d, md) = r?;
                for off in 0..chunk {
                    // Only a record that checks (checksum over data and record) and names this
                    // very place counts: a torn write, rot or a misdirected write does not.
                    let afa = g.afa(s, j, off as u64);
                    let Seal::Valid(o) = Oob::check(&md[off * mdb..][..mdb], &d[off * bs..][..bs])
                    else {
                        continue;
                    };
                    if o.afa != afa || o.user_block as u64 >= g.user_blocks {
                        continue;
                    }
                    scanned.mark(afa);
                    has_data[s as usize] = true;
                    found += 1;
                    max_ts = max_ts.max(o.ts);
                    let cell = &self.t.amt[o.user_block as usize];
                    let cur = cell.load(Relaxed);
                    if cur == 0 || o.ts >= entry_ts(cur) {
                        cell.store(entry(o.ts, afa), Relaxed);
                    }
                }
            }
            rep.scanned_stripes += 1;
        }
        let detail = format!("{} stripes, {found} block versions", rep.scanned_stripes);
        step(&mut rep, 2, detail);

        // 4. scan_backups: the backup copies in the transient area stand in for primary copies
        //    that do not check (rot, a lost or misdirected write): a version found only in a
        //    backup is mapped, and settle_stripes rewrites the primary from it.
        let backups = self.scan_backups(&members, &scanned, &mut has_data, &mut max_ts).await?;
        step(&mut rep, 3, format!("{} blocks found only in backup copies", backups.len()));

        // 5. replay_trims
        let mut trims = 0;
        let mut jbuf = vec![0u8; g.journal_blocks() as usize * bs];
        let mut journal_ok = false;
        for d in &members {
            if d.read(g.journal_lba(), &mut jbuf, None).await.is_ok() {
                journal_ok = true;
                break;
            }
        }
        if journal_ok {
            for b in jbuf.chunks(bs) {
                let Some(t) = TrimRecord::decode(b) else { continue };
                max_ts = max_ts.max(t.ts);
                for ub in t.first..(t.first + t.count).min(g.user_blocks) {
                    let cell = &self.t.amt[ub as usize];
                    let cur = cell.load(Relaxed);
                    if cur != 0 && t.ts > entry_ts(cur) {
                        cell.store(entry(t.ts, TRIMMED), Relaxed);
                        trims += 1;
                    }
                }
            }
        }
        step(&mut rep, 4, format!("{trims} block trims applied"));

        // 6. rebuild_tables
        self.t.next_ts.store(max_ts + 1, Relaxed);
        for (ub, cell) in self.t.amt.iter().enumerate() {
            let e = cell.load(Relaxed);
            if entry_is_data(e) {
                let afa = entry_afa(e);
                self.t.p2l[afa as usize].store(ub as u32, Relaxed);
                self.t.valid[self.stripe_of(afa) as usize].fetch_add(1, Relaxed);
            }
        }
        for s in 0..g.hh {
            let live = self.t.valid[s as usize].load(Relaxed) > 0;
            let st = if live || has_data[s as usize] || ckpt.converted[s as usize] == 1 {
                state::CONVERTED
            } else {
                state::FREE
            };
            self.t.set_state(s, st);
        }
        step(&mut rep, 5, format!("next timestamp {}", max_ts + 1));

        // 7. settle_stripes: every block mapped into the stripe is checked (a bad primary copy
        //    is rewritten from a backup copy or through the parity), and a row whose parity
        //    does not match its data gets it (the stripe was not converted).
        let mut healed = 0;
        for &s in &ckpt.scan {
            let s = s as u64;
            if !has_data.get(s as usize).copied().unwrap_or(false) {
                continue;
            }
            let _g = self.stripe_locks.lock(s).await;
            let t = self.verify_stripe(s, Pass::Recover, Some(&backups)).await?;
            healed += t.repaired - t.parity_written;
            if t.parity_written == 0 {
                rep.converted_found += 1;
            } else {
                rep.converted_now += 1;
            }
        }
        let detail = format!(
            "{} stripes already converted, {} converted now, {healed} data blocks repaired",
            rep.converted_found, rep.converted_now
        );
        step(&mut rep, 6, detail);

        // 8. write_checkpoint: the recovered map is made durable first (the checkpoint flushes
        //    the repairs and parity writes of step 7 before it writes itself), while every
        //    stripe that held data is still recorded as converted. Only then are the backup
        //    copies and the stripes that hold nothing now trimmed: until that checkpoint is
        //    durable, a power cut during recovery falls back to the previous one, which may
        //    still map blocks into them. (Trimming them first lost data when this recovery
        //    adopted a version found only in a backup copy, which emptied the stripe of the
        //    version the previous checkpoint maps, and was itself cut: the swarm's seed
        //    2000375.) A cut after it leaves stripes that may hold stale chunks recorded as
        //    converted, so the next recovery trims them again.
        self.full_checkpoint_on_manager().await?;
        // Every backup copy is garbage now.
        let vh_blocks = g.vh_per_member * g.k as u64 * g.chunk_blocks;
        let trims = members.iter().map(|d| d.trim(g.vh_lba(0, 0), vh_blocks));
        for r in join_all(trims).await {
            r?;
        }
        {
            let mut mgr = self.mgr.lock();
            for list in mgr.vh_free.iter_mut() {
                list.extend(0..g.vh_per_member as u32);
            }
        }
        let mut freed = Vec::new();
        for s in 0..g.hh {
            if self.t.valid[s as usize].load(Relaxed) == 0 {
                let dirty = self.t.state(s) == state::CONVERTED;
                self.t.set_state(s, state::FREE);
                if dirty {
                    let trims = members.iter().map(|d| d.trim(g.hh_lba(s), g.chunk_blocks));
                    for r in join_all(trims).await {
                        r?;
                    }
                }
                freed.push(s as u32);
            }
        }
        self.mgr.lock().pool.extend(freed);
        // The free stripes join the grant window, which this checkpoint declares.
        self.full_checkpoint_on_manager().await?;
        step(&mut rep, 7, "recovered".into());
        Ok(rep)
    }

    /// A full checkpoint on the space manager's reactor, under its work lock.
    async fn full_checkpoint_on_manager(self: &Arc<Self>) -> DevResult<()> {
        let inner = self.clone();
        flashrig_runtime::spawn_on(self.sm_reactor, move || async move {
            let _g = inner.sm_work.lock(0).await;
            inner.write_full_checkpoint().await
        })
        .await
    }

    /// Reads the whole transient area of every member and returns, for every AFA place of a
    /// scanned stripe whose primary copy does not check, a backup copy that does (its record
    /// names the place, so no table is needed to find it). A version found there that is
    /// newer than the AMT's is mapped: its primary copy was lost. A backup of a place whose
    /// primary copy checks is ignored: the primary is the authority (the backup may be a
    /// stale copy of an earlier use of the place, which can never be newer than the version
    /// the checkpoint maps, since the place was recycled only after a checkpoint that maps
    /// the block elsewhere).
    async fn scan_backups(
        &self,
        members: &[flashrig_blockdev::DevRef],
        scanned: &Scanned,
        has_data: &mut [bool],
        max_ts: &mut u32,
    ) -> DevResult<Backups> {
        let g = &self.geo;
        let (bs, mdb) = (self.bs(), self.mdb);
        let vh_blocks = g.k * g.chunk_blocks as usize;
        let afa_blocks = g.hh * g.stripe_blocks();
        // Every member's transient area at once; what each finds is merged in member order.
        let reads = members.iter().enumerate().map(|(p, dev)| async move {
            let mut found: Vec<(Oob, u64)> = Vec::new();
            let mut d = vec![0u8; vh_blocks * bs];
            let mut md = vec![0u8; vh_blocks * mdb];
            for v in 0..g.vh_per_member as u32 {
                let lba = g.vh_lba(v, 0);
                dev.read(lba, &mut d, Some(&mut md)).await?;
                for b in 0..vh_blocks {
                    let Seal::Valid(o) = Oob::check(&md[b * mdb..][..mdb], &d[b * bs..][..bs])
                    else {
                        continue;
                    };
                    if o.afa as u64 >= afa_blocks || o.user_block as u64 >= g.user_blocks {
                        continue;
                    }
                    let (s, j, off) = g.split(o.afa);
                    // Only where a backup of that place can be: slot j of a VH on one of the
                    // stripe's parity members, at the same offset.
                    let at = (b / g.chunk_blocks as usize, b as u64 % g.chunk_blocks);
                    if at == (j, off)
                        && scanned.contains(s)
                        && (0..g.m).any(|i| g.parity_member(s, i) == p)
                        && !scanned.primary_ok(o.afa)
                    {
                        found.push((o, lba + b as u64));
                    }
                }
            }
            Ok::<_, DevError>(found)
        });
        let mut backups = Backups::new();
        for (p, r) in join_all(reads).await.into_iter().enumerate() {
            for (o, lba) in r? {
                backups.entry(o.afa).or_insert((p, lba));
                let cell = &self.t.amt[o.user_block as usize];
                let cur = cell.load(Relaxed);
                if cur == 0 || o.ts > entry_ts(cur) {
                    cell.store(entry(o.ts, o.afa), Relaxed);
                    has_data[g.split(o.afa).0 as usize] = true;
                    *max_ts = (*max_ts).max(o.ts);
                }
            }
        }
        Ok(backups)
    }
}
