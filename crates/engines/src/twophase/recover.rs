//! Recovery after a crash: [`Twophase::open`] rebuilds the host's tables from what the members
//! made durable, in named, ordered steps (as SPDK's FTL management runs its startup steps):
//!
//! 1. **check members**: every member answers (and the options' geometry fits them);
//! 2. **scan metadata**: every row of every member is read with its metadata. A row's blocks
//!    of its newest generation are its *current* blocks (older ones are stale leftovers of a
//!    previous use of the row that its trim did not reach). Current log blocks give the row's
//!    replica sets (which item each offset holds, and in which copies); a stripe row counts
//!    only if every block of all k + m chunks is current and consistent (a conversion torn by
//!    the crash leaves an incomplete stripe, whose blocks are ignored: their source replicas
//!    are still there, because a source row is reused only after a flush that follows the
//!    stripe's write);
//! 3. **pick newest**: for every item the copy with the highest sequence number; equal ones
//!    (a block converted but its replicas not yet reused) prefer the stripe, and of two
//!    stripes the later one;
//! 4. **rebuild mapping**: user blocks map to their newest copy, unless a newer trim record
//!    covers them (trim records are applied in sequence order);
//! 5. **rebuild free lists**: rows with valid items are live (every log set sealed), the rest
//!    are freed;
//! 6. **repair replicas**: a replicated block found in fewer than m + 1 copies (its write was
//!    cut short) gets its missing copies;
//! 7. **flush members**: what recovery found and repaired is durable, and freed rows may be
//!    reused.
//!
//! Every member must be present and readable (open does not run degraded).

use std::collections::{BTreeMap, HashMap};

use futures_util::future::{join_all, LocalBoxFuture};

use flashrig_blockdev::{DevError, DevRef, DevResult, WriteHints};
use flashrig_runtime::now_ns;

use super::format::{gen_newer, BlockMd, Tag, TrimRecord};
use super::state::{Entry, Kind, Loc, Owner, Tables, Target, Trim, HOLE, TRIM_KEY};
use super::{Inner, Twophase, TwophaseOptions};

/// The recovery steps, in order.
pub const RECOVERY_STEPS: [&str; 7] = [
    "check members",
    "scan metadata",
    "pick newest",
    "rebuild mapping",
    "rebuild free lists",
    "repair replicas",
    "flush members",
];

type StepFn = for<'r, 'e> fn(&'r mut Recovery<'e>) -> LocalBoxFuture<'r, DevResult<()>>;

const STEPS: [(&str, StepFn); 7] = [
    (RECOVERY_STEPS[0], |r| Box::pin(r.check_members())),
    (RECOVERY_STEPS[1], |r| Box::pin(r.scan())),
    (RECOVERY_STEPS[2], |r| Box::pin(async { r.pick_newest() })),
    (RECOVERY_STEPS[3], |r| Box::pin(async { r.rebuild_mapping() })),
    (RECOVERY_STEPS[4], |r| Box::pin(async { r.rebuild_free_lists() })),
    (RECOVERY_STEPS[5], |r| Box::pin(r.repair_replicas())),
    (RECOVERY_STEPS[6], |r| Box::pin(r.flush())),
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepReport {
    pub name: &'static str,
    /// Time the step took on the runtime's clock.
    pub elapsed_ns: u64,
}

/// What recovery found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub steps: Vec<StepReport>,
    pub blocks_scanned: u64,
    pub log_rows: u64,
    pub stripe_rows: u64,
    /// Stripe rows found incomplete (a conversion cut short) and dropped.
    pub torn_stripes: u64,
    /// User blocks mapped to data.
    pub user_blocks: u64,
    /// User blocks mapped to a trim record.
    pub trimmed_blocks: u64,
    pub trim_records: u64,
    /// Replica copies written by the repair step.
    pub repaired_copies: u64,
    /// The sequence number the array continues with.
    pub next_seq: u64,
}

/// One replica set as found: the item at each offset and which replicas hold it.
struct SetScan {
    owners: Vec<Owner>,
    copies: Vec<u64>,
    fill: u32,
}

enum RowScan {
    /// No block of this array.
    Empty,
    /// Only blocks nothing can use (a torn stripe): freed.
    Dead {
        gen: u16,
    },
    Log {
        gen: u16,
        sets: Vec<SetScan>,
    },
    Stripe {
        gen: u16,
        owners: Vec<Owner>,
        stripe_seq: u64,
    },
}

/// A copy of an item and how it ranks against others of the same sequence number.
#[derive(Clone, Copy)]
struct Cand {
    seq: u64,
    rank: (u8, u64),
    loc: Loc,
}

/// One decoded block: its metadata and, for trim records, the record.
type Found = Option<(BlockMd, Option<TrimRecord>)>;

struct Recovery<'e> {
    eng: &'e Inner,
    report: RecoveryReport,
    rows: Vec<RowScan>,
    records: HashMap<u64, TrimRecord>,
    max_seq: u64,
    best: BTreeMap<u64, Cand>,
    map: BTreeMap<u64, Entry>,
    trims: HashMap<u64, Trim>,
    /// Live log rows' replica sets as found, for the repair step.
    rows_copies: Vec<(u64, Vec<SetScan>)>,
}

impl Twophase {
    /// Recovers an array from its members after a crash (or a clean shutdown): rebuilds the
    /// mapping from the per-block metadata so that every write covered by a completed flush
    /// (or FUA) is found, and no block returns data it never held. `opts` must give the
    /// geometry the array was created with (a different one is detected from the metadata).
    pub async fn open(
        name: &str,
        members: Vec<DevRef>,
        opts: TwophaseOptions,
    ) -> DevResult<Twophase> {
        let mut eng = Inner::build(name, members, opts)?;
        let report = {
            let mut rec = Recovery {
                eng: &eng,
                report: RecoveryReport::default(),
                rows: Vec::new(),
                records: HashMap::new(),
                max_seq: 0,
                best: BTreeMap::new(),
                map: BTreeMap::new(),
                trims: HashMap::new(),
                rows_copies: Vec::new(),
            };
            for (name, step) in STEPS {
                let t0 = now_ns();
                step(&mut rec).await.map_err(|e| match e {
                    DevError::Invalid(m) => DevError::Invalid(format!("recovery step {name}: {m}")),
                    e => e,
                })?;
                rec.report.steps.push(StepReport { name, elapsed_ns: now_ns().saturating_sub(t0) });
            }
            rec.report
        };
        eng.recovery = Some(report);
        Ok(Twophase::wrap(eng))
    }
}

impl Recovery<'_> {
    async fn check_members(&mut self) -> DevResult<()> {
        let eng = self.eng;
        let (bs, mdb) = (eng.block_bytes(), eng.md_bytes);
        let members = eng.members.read().clone();
        for d in &members {
            let mut b = vec![0u8; bs];
            let mut md = vec![0u8; mdb];
            d.read(0, &mut b, Some(&mut md)).await?;
        }
        Ok(())
    }

    async fn scan(&mut self) -> DevResult<()> {
        let eng = self.eng;
        let geo = eng.geo;
        let (bs, mdb, c) = (eng.block_bytes(), eng.md_bytes, geo.chunk_blocks as usize);
        let members = eng.members.read().clone();
        for r in 0..geo.rows {
            let lba = geo.member_lba(r);
            let reads = members.iter().map(|d| async move {
                let mut data = vec![0u8; c * bs];
                let mut md = vec![0u8; c * mdb];
                d.read(lba, &mut data, Some(&mut md)).await.map(|()| (data, md))
            });
            let mut found: Vec<Vec<Found>> = Vec::with_capacity(members.len());
            for res in join_all(reads).await {
                let (data, md) = res?;
                let mut blocks = Vec::with_capacity(c);
                for (block, mb) in data.chunks_exact(bs).zip(md.chunks_exact(mdb)) {
                    blocks.push(self.decode(block, mb)?);
                }
                found.push(blocks);
            }
            self.report.blocks_scanned += (members.len() * c) as u64;
            let scan = self.classify(r, &found)?;
            self.rows.push(scan);
        }
        Ok(())
    }

    fn decode(&mut self, block: &[u8], md: &[u8]) -> DevResult<Found> {
        let Some(b) = BlockMd::decode(md)? else { return Ok(None) };
        self.max_seq = self.max_seq.max(b.seq);
        // A block whose data is not the data its metadata was written with (a member without
        // atomic metadata, cut off by the crash) is as good as never written.
        if !BlockMd::checksum_ok(md, block) {
            return Ok(None);
        }
        if matches!(b.tag, Tag::LogTrim | Tag::StripeTrim) {
            return Ok(match TrimRecord::decode(block) {
                Some(t) if t.seq == b.seq => {
                    self.records.insert(t.seq, t);
                    Some((b, Some(t)))
                }
                _ => None,
            });
        }
        Ok(Some((b, None)))
    }

    fn classify(&mut self, r: u64, found: &[Vec<Found>]) -> DevResult<RowScan> {
        let geo = self.eng.geo;
        let (k, m, c) = (geo.k, geo.m, geo.chunk_blocks as usize);
        let mut gen: Option<u16> = None;
        for (b, _) in found.iter().flatten().flatten() {
            gen = match gen {
                Some(g) if !gen_newer(b.gen, g) => Some(g),
                _ => Some(b.gen),
            };
        }
        let Some(g) = gen else { return Ok(RowScan::Empty) };
        let current = |i: usize, o: usize| found[i][o].as_ref().filter(|(b, _)| b.gen == g);
        let any = |f: fn(Tag) -> bool| {
            (0..found.len()).any(|i| (0..c).any(|o| current(i, o).is_some_and(|(b, _)| f(b.tag))))
        };
        let (log, stripe) = (any(Tag::is_log), any(Tag::is_stripe));
        if log && stripe {
            return Err(DevError::Invalid(format!(
                "row {r} holds log and stripe blocks of one generation: the members are not one \
                 twophase array in this order"
            )));
        }
        let order = |i: usize, what: &str| {
            DevError::Invalid(format!(
                "row {r}: member {i} holds {what}: the members are given in another order, or \
                 the array was created with another geometry than {k}+{m} with {c}-block chunks"
            ))
        };
        if log {
            let mut sets: Vec<SetScan> = (0..geo.sets_per_row)
                .map(|_| SetScan { owners: vec![Owner::HOLE; c], copies: vec![0; c], fill: 0 })
                .collect();
            for (i, blocks) in found.iter().enumerate() {
                let Some((s, j)) = geo.set_of_member(r, i) else { continue };
                for o in 0..blocks.len() {
                    let Some((b, _)) = current(i, o) else { continue };
                    if b.index != j {
                        return Err(order(
                            i,
                            &format!("replica {} where replica {j} belongs", b.index),
                        ));
                    }
                    let owner = match b.tag {
                        Tag::LogTrim => Owner { key: TRIM_KEY | b.seq, seq: b.seq },
                        _ => Owner { key: b.key, seq: b.seq },
                    };
                    let set = &mut sets[s];
                    if set.owners[o].key == HOLE || owner.seq > set.owners[o].seq {
                        set.owners[o] = owner;
                        set.copies[o] = 1 << j;
                    } else if set.owners[o] == owner {
                        set.copies[o] |= 1 << j;
                    }
                    set.fill = set.fill.max(o as u32 + 1);
                }
            }
            return Ok(RowScan::Log { gen: g, sets });
        }
        let mut owners = vec![Owner::PAD; k * c];
        let mut stripe_seq = None;
        let mut complete = true;
        for i in 0..found.len() {
            let x = geo.chunk_index(r, i);
            for o in 0..c {
                let Some((b, _)) = current(i, o) else {
                    complete = false;
                    continue;
                };
                if x < k {
                    if b.tag == Tag::Parity || b.index != x {
                        return Err(order(
                            i,
                            &format!("a block of chunk {} where chunk {x} belongs", b.index),
                        ));
                    }
                    owners[x * c + o] = match b.tag {
                        Tag::StripeData => Owner { key: b.key, seq: b.seq },
                        Tag::StripeTrim => Owner { key: TRIM_KEY | b.seq, seq: b.seq },
                        _ => Owner::PAD,
                    };
                } else {
                    let Some(p) = b.parity else {
                        return Err(order(i, "a data block where parity belongs"));
                    };
                    if p.k != k || p.m != m {
                        return Err(DevError::Invalid(format!(
                            "row {r}: parity written for a {}+{} array, opened as {k}+{m}",
                            p.k, p.m
                        )));
                    }
                    if p.row != r || p.r != x - k {
                        return Err(order(
                            i,
                            &format!("parity row {} of stripe row {}", p.r, p.row),
                        ));
                    }
                    match stripe_seq {
                        None => stripe_seq = Some(b.seq),
                        Some(s) if s != b.seq => complete = false,
                        Some(_) => {}
                    }
                }
            }
        }
        match (complete, stripe_seq) {
            (true, Some(stripe_seq)) => Ok(RowScan::Stripe { gen: g, owners, stripe_seq }),
            _ => {
                self.report.torn_stripes += 1;
                Ok(RowScan::Dead { gen: g })
            }
        }
    }

    fn offer(&mut self, owner: Owner, loc: Loc, rank: (u8, u64)) {
        if !owner.is_item() {
            return;
        }
        let cand = Cand { seq: owner.seq, rank, loc };
        self.best
            .entry(owner.key)
            .and_modify(|b| {
                if (cand.seq, cand.rank) > (b.seq, b.rank) {
                    *b = cand;
                }
            })
            .or_insert(cand);
    }

    fn pick_newest(&mut self) -> DevResult<()> {
        let rows = std::mem::take(&mut self.rows);
        for (r, scan) in rows.iter().enumerate() {
            let r = r as u64;
            match scan {
                RowScan::Log { sets, .. } => {
                    for (s, set) in sets.iter().enumerate() {
                        for off in 0..set.fill {
                            let loc = Loc::Log { row: r, set: s as u32, off };
                            self.offer(set.owners[off as usize], loc, (0, 0));
                        }
                    }
                }
                RowScan::Stripe { owners, stripe_seq, .. } => {
                    for (idx, &o) in owners.iter().enumerate() {
                        self.offer(o, Loc::Stripe { row: r, idx: idx as u32 }, (1, *stripe_seq));
                    }
                }
                RowScan::Empty | RowScan::Dead { .. } => {}
            }
        }
        self.rows = rows;
        Ok(())
    }

    fn rebuild_mapping(&mut self) -> DevResult<()> {
        let cap = self.eng.geo.capacity_blocks;
        let mut records: Vec<(u64, Loc)> = Vec::new();
        for (&key, c) in &self.best {
            if key & TRIM_KEY != 0 {
                records.push((key & !TRIM_KEY, c.loc));
            } else if key >= cap {
                return Err(DevError::Invalid(format!(
                    "a block of user LBA {key} lies beyond the capacity of {cap} blocks: the \
                     array was created with another geometry"
                )));
            } else {
                self.map.insert(key, Entry { seq: c.seq, target: Target::At(c.loc) });
            }
        }
        records.sort_unstable_by_key(|&(seq, _)| seq);
        for &(rec, _) in &records {
            let t = self.records[&rec];
            for (_, e) in self.map.range_mut(t.start..t.start.saturating_add(t.len)) {
                if e.seq < rec {
                    *e = Entry { seq: rec, target: Target::Trimmed(rec) };
                }
            }
        }
        let mut refs: HashMap<u64, u64> = HashMap::new();
        for e in self.map.values() {
            match e.target {
                Target::Trimmed(rec) => *refs.entry(rec).or_default() += 1,
                Target::At(_) => self.report.user_blocks += 1,
            }
        }
        for (rec, loc) in records {
            if let Some(&n) = refs.get(&rec) {
                let t = self.records[&rec];
                self.trims.insert(rec, Trim { loc, refs: n, start: t.start, len: t.len });
                self.report.trimmed_blocks += n;
            }
        }
        self.report.trim_records = self.trims.len() as u64;
        Ok(())
    }

    fn rebuild_free_lists(&mut self) -> DevResult<()> {
        let eng = self.eng;
        let mut t = Tables::new(eng.geo);
        for (r, scan) in std::mem::take(&mut self.rows).into_iter().enumerate() {
            let r = r as u64;
            match scan {
                RowScan::Empty => {}
                RowScan::Dead { gen } => t.restore_row(r, t.blank_row(Kind::Pending, gen)),
                RowScan::Log { gen, sets } => {
                    let mut row = t.blank_row(Kind::Log, gen);
                    for (dst, src) in row.sets.iter_mut().zip(&sets) {
                        dst.owners.clone_from(&src.owners);
                        dst.fill = src.fill;
                    }
                    t.restore_row(r, row);
                    self.report.log_rows += 1;
                    // Kept for the repair step.
                    self.rows_copies.push((r, sets));
                }
                RowScan::Stripe { gen, owners, stripe_seq } => {
                    let mut row = t.blank_row(Kind::Stripe, gen);
                    row.owners = owners;
                    row.stripe_seq = stripe_seq;
                    t.restore_row(r, row);
                    self.report.stripe_rows += 1;
                }
            }
        }
        t.map = std::mem::take(&mut self.map);
        t.trims = std::mem::take(&mut self.trims);
        t.next_seq = self.max_seq + 1;
        self.report.next_seq = t.next_seq;
        t.recount();
        *eng.tables.lock() = t;
        Ok(())
    }

    async fn repair_replicas(&mut self) -> DevResult<()> {
        let eng = self.eng;
        let (bs, mdb, copies) = (eng.block_bytes(), eng.md_bytes, eng.geo.copies());
        let full = (1u64 << copies) - 1;
        for (r, sets) in std::mem::take(&mut self.rows_copies) {
            for (s, set) in sets.iter().enumerate() {
                for off in 0..set.fill {
                    let (owner, have) = (set.owners[off as usize], set.copies[off as usize]);
                    let loc = Loc::Log { row: r, set: s as u32, off };
                    if have == full || !eng.tables.lock().is_valid(owner, loc) {
                        continue;
                    }
                    let from =
                        (0..copies).find(|&j| have & (1 << j) != 0).expect("found in a copy");
                    let mut data = vec![0u8; bs];
                    let mut md = vec![0u8; mdb];
                    let lba = eng.geo.member_lba(r) + off as u64;
                    let src = eng.geo.set_member(r, s, from);
                    let (dev, _) = eng.member(src);
                    dev.read(lba, &mut data, Some(&mut md)).await?;
                    for j in (0..copies).filter(|&j| have & (1 << j) == 0) {
                        BlockMd::set_index(&mut md, j);
                        let (dev, _) = eng.member(eng.geo.set_member(r, s, j));
                        dev.write(lba, &data, Some(&md), WriteHints::NONE).await?;
                        self.report.repaired_copies += 1;
                        eng.c.repaired_blocks.inc();
                    }
                }
            }
        }
        Ok(())
    }

    async fn flush(&mut self) -> DevResult<()> {
        self.eng.barrier().await
    }
}
