//! Recovery of the AMT and HGMT after a crash (§5.4 "Recovery of mapping table"), as an ordered
//! list of named steps.
//!
//! The newest valid checkpoint gives the AMT as it was then and the stripes that could be
//! written after it (granted, open, full or in the grant window). Only those are scanned: each
//! data block's OOB record (user block, timestamp, slot) says which version it holds, and the
//! newest version of every user block wins (a GC copy has its original's timestamp and wins a
//! tie, because the checkpointed place may have been recycled). Trims are replayed from the
//! journal. Then every scanned stripe that holds data is *settled*: its parity chunks' metadata
//! is checked against the parity of its data blocks' metadata (what an offloaded conversion
//! writes, §5.4); if it matches, the stripe was converted, else the host converts it now from
//! the primary copies. Backup copies are never needed (the primary copies are on the HH), so
//! the whole transient area is trimmed and every VH is free again. A final checkpoint ends
//! recovery.
//!
//! Recovery needs every member: it reads primary copies, which a failed member does not have.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use flashrig_blockdev::{DevError, DevResult};
use futures_util::future::join_all;

use super::format::{check_superblock, Checkpoint, Delta, Oob, TrimRecord, AMT_PAGE_ENTRIES};
use super::tables::{entry, entry_afa, entry_is_data, entry_ts, state, TRIMMED};
use super::Inner;

/// The steps of recovery, in order.
pub const RECOVERY_STEPS: &[&str] = &[
    "read_superblock",
    "load_checkpoint",
    "scan_heroes",
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
                    let data = (!self.md_atomic).then(|| &d[off * bs..][..bs]);
                    let Some(o) = Oob::decode(&md[off * mdb..][..mdb], data) else { continue };
                    if o.slot as usize != j || o.user_block as u64 >= g.user_blocks {
                        continue;
                    }
                    has_data[s as usize] = true;
                    found += 1;
                    max_ts = max_ts.max(o.ts);
                    let cell = &self.t.amt[o.user_block as usize];
                    let cur = cell.load(Relaxed);
                    if cur == 0 || o.ts >= entry_ts(cur) {
                        cell.store(entry(o.ts, g.afa(s, j, off as u64)), Relaxed);
                    }
                }
            }
            rep.scanned_stripes += 1;
        }
        let detail = format!("{} stripes, {found} block versions", rep.scanned_stripes);
        step(&mut rep, 2, detail);

        // 4. replay_trims
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
        step(&mut rep, 3, format!("{trims} block trims applied"));

        // 5. rebuild_tables
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
        step(&mut rep, 4, format!("next timestamp {}", max_ts + 1));

        // 6. settle_stripes
        for &s in &ckpt.scan {
            let s = s as u64;
            if !has_data[s as usize] {
                continue;
            }
            if self.parity_matches(s).await? {
                rep.converted_found += 1;
            } else {
                self.write_parity(s).await?;
                rep.converted_now += 1;
            }
        }
        // Every backup copy is garbage now.
        let vh_blocks = g.vh_per_member * g.k as u64 * g.chunk_blocks;
        let trims = members.iter().map(|d| d.trim(g.vh_lba(0, 0), vh_blocks));
        for r in join_all(trims).await {
            r?;
        }
        let detail = format!(
            "{} stripes already converted, {} converted now",
            rep.converted_found, rep.converted_now
        );
        step(&mut rep, 5, detail);

        // 7. write_checkpoint: free what holds nothing (trimmed first when it was used).
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
        let inner = self.clone();
        let sm = self.sm_reactor;
        flashrig_runtime::spawn_on(sm, move || async move {
            let _g = inner.sm_work.lock(0).await;
            inner.write_full_checkpoint().await
        })
        .await?;
        step(&mut rep, 6, "recovered".into());
        Ok(rep)
    }

    /// Whether stripe `s`'s parity chunks carry the parity of its data blocks' metadata (what
    /// a conversion writes): the §5.4 check that a stripe is in the striping layout.
    async fn parity_matches(&self, s: u64) -> DevResult<bool> {
        let g = &self.geo;
        let bs = self.bs();
        let chunk = g.chunk_blocks as usize;
        let mut data = vec![vec![0u8; chunk * bs]; g.k];
        let mut mds = vec![vec![0u8; chunk * self.mdb]; g.k];
        for j in 0..g.k {
            self.member(g.data_member(s, j))
                .read(g.hh_lba(s), &mut data[j], Some(&mut mds[j]))
                .await?;
        }
        let (parity, pmd) = self.encode(&data, &mds)?;
        for i in 0..g.m {
            let mut d = vec![0u8; chunk * bs];
            let mut md = vec![0u8; chunk * self.mdb];
            self.member(g.parity_member(s, i)).read(g.hh_lba(s), &mut d, Some(&mut md)).await?;
            // Metadata decides (§5.4); the data is compared too when the payload is real, which
            // costs nothing extra here since the chunk was read whole.
            if md != pmd[i] || d != parity[i] {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
