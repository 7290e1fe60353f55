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
//! 6. **repair replicas**: a replicated block found in fewer than m + 1 intact copies (its
//!    write was cut short, or a copy is damaged) gets its missing copies, and stripe blocks
//!    rebuilt from parity in step 2 are written back;
//! 7. **flush members**: what recovery found and repaired is durable, and freed rows may be
//!    reused.
//!
//! Every member must be present and readable (open does not run degraded).
//!
//! Blocks whose checksum fails (24 metadata bytes) are *damaged*: on members that write
//! metadata atomically with data they were corrupted after they were written; on others they
//! may also be torn by the crash. A damaged copy of a replicated block is rewritten from an
//! intact one. A damaged stripe block is rebuilt from the other chunks when at most m blocks of
//! its offset are damaged and the result matches the checksum it carries; otherwise the stripe
//! is torn on non-atomic members, and kept (with the block reading as corrupt) on atomic ones.
//! On atomic members, an item whose newest version is damaged on every copy is still mapped
//! there, so reads answer `DevError::Corrupt` instead of an older version.

use std::collections::{BTreeMap, HashMap};

use futures_util::future::{join_all, LocalBoxFuture};

use flashrig_blockdev::{DevError, DevRef, DevResult, WriteHints};
use flashrig_runtime::now_ns;

use super::format::{gen_newer, BlockMd, Tag, TrimRecord, FORMAT_VERSION};
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
    /// Current blocks whose checksum failed (damaged, or torn on non-atomic members).
    pub checksum_errors: u64,
    /// Damaged blocks rewritten with their right contents (a replica copied from an intact
    /// one, a stripe block rebuilt from parity).
    pub healed_blocks: u64,
    /// Damaged blocks that could not be repaired; reads of them answer `DevError::Corrupt`.
    pub unrepairable_blocks: u64,
    /// The sequence number the array continues with.
    pub next_seq: u64,
}

/// One replica set as found: the item at each offset and which replicas hold it.
struct SetScan {
    owners: Vec<Owner>,
    /// Replicas holding an intact copy of the offset's item.
    copies: Vec<u64>,
    /// Replicas holding a damaged copy of it.
    damaged: Vec<u64>,
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
        /// Data blocks left damaged (could not be rebuilt).
        damaged: Vec<bool>,
        stripe_seq: u64,
    },
}

/// A copy of an item and how it ranks against others of the same sequence number: intact
/// copies before damaged ones, then stripes before the log, and later stripes first.
#[derive(Clone, Copy)]
struct Cand {
    seq: u64,
    intact: bool,
    rank: (u8, u64),
    loc: Loc,
}

/// One decoded block: its metadata and whether its checksum holds (intact trim records are
/// registered in `Recovery::records` as they are decoded).
#[derive(Clone, Copy)]
struct FoundBlock {
    md: BlockMd,
    intact: bool,
}

type Found = Option<FoundBlock>;

/// A stripe block rebuilt from parity during the scan, to be written back.
struct Repair {
    member: usize,
    lba: u64,
    data: Vec<u8>,
    md: Vec<u8>,
}

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
    /// Stripe blocks rebuilt during the scan, for the repair step.
    repairs: Vec<Repair>,
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
                repairs: Vec::new(),
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
        eng.c.checksum_errors.add(report.checksum_errors);
        eng.c.healed_blocks.add(report.healed_blocks);
        eng.c.unrepairable_blocks.add(report.unrepairable_blocks);
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
            let (mut datas, mut mds) = (Vec::new(), Vec::new());
            for res in join_all(reads).await {
                let (data, md) = res?;
                let mut blocks = Vec::with_capacity(c);
                for (o, (block, mb)) in data.chunks_exact(bs).zip(md.chunks_exact(mdb)).enumerate()
                {
                    blocks.push(self.decode(block, mb, lba + o as u64)?);
                }
                found.push(blocks);
                datas.push(data);
                mds.push(md);
            }
            self.report.blocks_scanned += (members.len() * c) as u64;
            let scan = self.classify(r, &found, &mut datas, &mds)?;
            self.rows.push(scan);
        }
        Ok(())
    }

    fn decode(&mut self, block: &[u8], md: &[u8], lba: u64) -> DevResult<Found> {
        let Some(b) = BlockMd::decode(md)? else { return Ok(None) };
        self.max_seq = self.max_seq.max(b.seq);
        let intact = BlockMd::checksum_ok(md, lba, block);
        if !intact && BlockMd::is_version_1(md, block) {
            return Err(DevError::Invalid(format!(
                "the block at member LBA {lba} was written by format version 1, whose checksum \
                 covers the data alone; this version ({FORMAT_VERSION}) also covers address and \
                 metadata and does not open version 1 arrays with checksums"
            )));
        }
        if intact && matches!(b.tag, Tag::LogTrim | Tag::StripeTrim) {
            // A record block whose checksum holds but whose contents do not parse as the
            // record is as good as never written.
            match TrimRecord::decode(block) {
                Some(t) if t.seq == b.seq => {
                    self.records.insert(t.seq, t);
                }
                _ => return Ok(None),
            }
        }
        Ok(Some(FoundBlock { md: b, intact }))
    }

    fn classify(
        &mut self,
        r: u64,
        found: &[Vec<Found>],
        datas: &mut [Vec<u8>],
        mds: &[Vec<u8>],
    ) -> DevResult<RowScan> {
        let geo = self.eng.geo;
        let (k, m, c) = (geo.k, geo.m, geo.chunk_blocks as usize);
        let atomic = self.eng.md_atomic;
        // The row's current use: the newest generation among intact blocks; on atomic members,
        // among damaged ones when none is intact (a row whose every block was corrupted).
        let newest = |intact: bool| {
            let mut gen: Option<u16> = None;
            for f in found.iter().flatten().flatten().filter(|f| f.intact == intact) {
                gen = match gen {
                    Some(g) if !gen_newer(f.md.gen, g) => Some(g),
                    _ => Some(f.md.gen),
                };
            }
            gen
        };
        let Some(g) = newest(true).or_else(|| if atomic { newest(false) } else { None }) else {
            return Ok(RowScan::Empty);
        };
        let at = |i: usize, o: usize| found[i][o].filter(|f| f.md.gen == g);
        let any = |f: fn(Tag) -> bool, intact: bool| {
            (0..found.len()).any(|i| {
                (0..c).any(|o| at(i, o).is_some_and(|b| b.intact == intact && f(b.md.tag)))
            })
        };
        let (mut log, mut stripe) = (any(Tag::is_log, true), any(Tag::is_stripe, true));
        if log && stripe {
            return Err(DevError::Invalid(format!(
                "row {r} holds log and stripe blocks of one generation: the members are not one \
                 twophase array in this order"
            )));
        }
        if !log && !stripe {
            // Only damaged blocks: what they say is all there is.
            (log, stripe) = (any(Tag::is_log, false), any(Tag::is_stripe, false));
            if log == stripe {
                return Ok(RowScan::Dead { gen: g });
            }
        }
        // Damaged blocks of this generation, counted once here.
        let damaged_blocks = found
            .iter()
            .flatten()
            .flatten()
            .filter(|f| !f.intact && f.md.gen == g && f.md.tag.is_log() == log)
            .count() as u64;
        self.report.checksum_errors += damaged_blocks;
        let order = |i: usize, what: &str| {
            DevError::Invalid(format!(
                "row {r}: member {i} holds {what}: the members are given in another order, or \
                 the array was created with another geometry than {k}+{m} with {c}-block chunks"
            ))
        };
        if log {
            return self.classify_log(r, g, found, &order);
        }
        let mut owners = vec![Owner::PAD; k * c];
        let mut stripe_seq = None;
        let mut complete = true;
        // Damaged blocks that fit the stripe: (member, code index, offset).
        let mut damaged: Vec<(usize, usize, usize)> = Vec::new();
        for i in 0..found.len() {
            let x = geo.chunk_index(r, i);
            for o in 0..c {
                let Some(b) = at(i, o) else {
                    complete = false;
                    continue;
                };
                // A damaged block that does not fit its place counts as absent; an intact one
                // means the members are not this array.
                let misfit = |what: String| {
                    if b.intact {
                        Err(order(i, &what))
                    } else {
                        Ok(())
                    }
                };
                let b_md = b.md;
                if x < k {
                    if b_md.tag == Tag::Parity || !b_md.tag.is_stripe() || b_md.index != x {
                        misfit(format!("a block of chunk {} where chunk {x} belongs", b_md.index))?;
                        complete = false;
                        continue;
                    }
                    owners[x * c + o] = match b_md.tag {
                        Tag::StripeData => Owner { key: b_md.key, seq: b_md.seq },
                        Tag::StripeTrim => Owner { key: TRIM_KEY | b_md.seq, seq: b_md.seq },
                        _ => Owner::PAD,
                    };
                } else {
                    let Some(p) = b_md.parity else {
                        misfit("a data block where parity belongs".into())?;
                        complete = false;
                        continue;
                    };
                    if p.k != k || p.m != m {
                        if b.intact {
                            return Err(DevError::Invalid(format!(
                                "row {r}: parity written for a {}+{} array, opened as {k}+{m}",
                                p.k, p.m
                            )));
                        }
                        complete = false;
                        continue;
                    }
                    if p.row != r || p.r != x - k {
                        misfit(format!("parity row {} of stripe row {}", p.r, p.row))?;
                        complete = false;
                        continue;
                    }
                    if p.version != self.eng.format_version {
                        if b.intact {
                            return Err(DevError::Invalid(format!(
                                "row {r}: parity of format version {}, this array's members \
                                 ({} metadata bytes) are read as version {}",
                                p.version, self.eng.md_bytes, self.eng.format_version
                            )));
                        }
                        complete = false;
                        continue;
                    }
                    match stripe_seq {
                        None => stripe_seq = Some(b_md.seq),
                        Some(s) if s != b_md.seq => complete = false,
                        Some(_) => {}
                    }
                }
                if !b.intact {
                    damaged.push((i, x, o));
                }
            }
        }
        let Some(stripe_seq) = stripe_seq.filter(|_| complete) else {
            self.report.torn_stripes += 1;
            return Ok(RowScan::Dead { gen: g });
        };
        let mut left = vec![false; k * c];
        if !damaged.is_empty() {
            let lost = self.rebuild_damaged(r, &damaged, datas, mds)?;
            if !lost.is_empty() && !atomic {
                // On members without atomic metadata a block that cannot be rebuilt to match
                // its checksum may be torn by the crash: the stripe is torn.
                self.report.torn_stripes += 1;
                return Ok(RowScan::Dead { gen: g });
            }
            self.report.unrepairable_blocks += lost.len() as u64;
            for (x, o) in lost {
                if x < k {
                    left[x * c + o] = true;
                    // A damaged trim record cannot be read: it is not offered as one.
                    if owners[x * c + o].trim().is_some() {
                        owners[x * c + o] = Owner::PAD;
                    }
                }
            }
        }
        Ok(RowScan::Stripe { gen: g, owners, damaged: left, stripe_seq })
    }

    /// Rebuilds the damaged blocks of a complete stripe row from the others (offset by
    /// offset, where at most m are damaged) and keeps each one that then matches the checksum
    /// it carries, for the repair step; trim records among them are registered. Returns the
    /// blocks (code index, offset) that could not be rebuilt.
    fn rebuild_damaged(
        &mut self,
        r: u64,
        damaged: &[(usize, usize, usize)],
        datas: &mut [Vec<u8>],
        mds: &[Vec<u8>],
    ) -> DevResult<Vec<(usize, usize)>> {
        let eng = self.eng;
        let geo = eng.geo;
        let (n, m) = (geo.members(), geo.m);
        let (bs, mdb) = (eng.block_bytes(), eng.md_bytes);
        let mut lost = Vec::new();
        let mut offsets: Vec<usize> = damaged.iter().map(|&(_, _, o)| o).collect();
        offsets.sort_unstable();
        offsets.dedup();
        for o in offsets {
            let here: Vec<(usize, usize)> =
                damaged.iter().filter(|d| d.2 == o).map(|&(i, x, _)| (i, x)).collect();
            if here.len() > m {
                lost.extend(here.iter().map(|&(_, x)| (x, o)));
                continue;
            }
            let present: Vec<bool> = (0..n).map(|x| !here.iter().any(|&(_, hx)| hx == x)).collect();
            {
                let mut by_member: Vec<Option<&mut [u8]>> =
                    datas.iter_mut().map(|d| Some(&mut d[o * bs..(o + 1) * bs])).collect();
                let mut shards: Vec<&mut [u8]> = (0..n)
                    .map(|x| by_member[geo.chunk_member(r, x)].take().expect("each member once"))
                    .collect();
                eng.codec
                    .reconstruct_slices(&mut shards, &present)
                    .map_err(|e| DevError::Invalid(e.to_string()))?;
            }
            let lba = geo.member_lba(r) + o as u64;
            for (i, x) in here {
                let data = &datas[i][o * bs..(o + 1) * bs];
                let md = &mds[i][o * mdb..(o + 1) * mdb];
                if !BlockMd::checksum_ok(md, lba, data) {
                    lost.push((x, o));
                    continue;
                }
                if let Ok(Some(b)) = BlockMd::decode(md) {
                    if b.tag == Tag::StripeTrim {
                        match TrimRecord::decode(data) {
                            Some(t) if t.seq == b.seq => {
                                self.records.insert(t.seq, t);
                            }
                            _ => {
                                lost.push((x, o));
                                continue;
                            }
                        }
                    }
                }
                self.repairs.push(Repair { member: i, lba, data: data.to_vec(), md: md.to_vec() });
            }
        }
        Ok(lost)
    }

    /// The log part of [`Recovery::classify`]: generation `g` of row `r` is a log row.
    fn classify_log(
        &mut self,
        r: u64,
        g: u16,
        found: &[Vec<Found>],
        order: &dyn Fn(usize, &str) -> DevError,
    ) -> DevResult<RowScan> {
        let geo = self.eng.geo;
        let c = geo.chunk_blocks as usize;
        let atomic = self.eng.md_atomic;
        let new_set = || SetScan {
            owners: vec![Owner::HOLE; c],
            copies: vec![0; c],
            damaged: vec![0; c],
            fill: 0,
        };
        let mut sets: Vec<SetScan> = (0..geo.sets_per_row).map(|_| new_set()).collect();
        // Per set and offset, the newest item only damaged copies hold, and which.
        let mut only_damaged: Vec<Vec<(Owner, u64)>> =
            (0..geo.sets_per_row).map(|_| vec![(Owner::HOLE, 0); c]).collect();
        for (i, blocks) in found.iter().enumerate() {
            let Some((s, j)) = geo.set_of_member(r, i) else { continue };
            for (o, f) in blocks.iter().enumerate() {
                let Some(b) = f.filter(|f| f.md.gen == g && f.md.tag.is_log()) else { continue };
                let owner = match b.md.tag {
                    Tag::LogTrim => Owner { key: TRIM_KEY | b.md.seq, seq: b.md.seq },
                    _ => Owner { key: b.md.key, seq: b.md.seq },
                };
                if !b.intact {
                    // Damaged copies of trim records are never offered: the record cannot be
                    // read from them.
                    if b.md.index == j && b.md.tag == Tag::LogData {
                        let d = &mut only_damaged[s][o];
                        if d.0.key == HOLE || owner.seq > d.0.seq {
                            *d = (owner, 1 << j);
                        } else if d.0 == owner {
                            d.1 |= 1 << j;
                        }
                    }
                    continue;
                }
                if b.md.index != j {
                    return Err(order(
                        i,
                        &format!("replica {} where replica {j} belongs", b.md.index),
                    ));
                }
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
        for (set, dmg) in sets.iter_mut().zip(&only_damaged) {
            for (o, &(owner, mask)) in dmg.iter().enumerate() {
                if owner.key == HOLE {
                    continue;
                }
                if set.owners[o] == owner {
                    set.damaged[o] = mask;
                } else if set.owners[o].key == HOLE && atomic {
                    // Every copy of the newest version here is damaged: it is still the
                    // newest, and reads of it answer `Corrupt` (not an older version).
                    set.owners[o] = owner;
                    set.damaged[o] = mask;
                    set.fill = set.fill.max(o as u32 + 1);
                }
            }
        }
        Ok(RowScan::Log { gen: g, sets })
    }

    fn offer(&mut self, owner: Owner, loc: Loc, intact: bool, rank: (u8, u64)) {
        if !owner.is_item() {
            return;
        }
        let cand = Cand { seq: owner.seq, intact, rank, loc };
        self.best
            .entry(owner.key)
            .and_modify(|b| {
                if (cand.seq, cand.intact, cand.rank) > (b.seq, b.intact, b.rank) {
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
                            let intact = set.copies[off as usize] != 0;
                            self.offer(set.owners[off as usize], loc, intact, (0, 0));
                        }
                    }
                }
                RowScan::Stripe { owners, damaged, stripe_seq, .. } => {
                    for (idx, &o) in owners.iter().enumerate() {
                        let loc = Loc::Stripe { row: r, idx: idx as u32 };
                        self.offer(o, loc, !damaged[idx], (1, *stripe_seq));
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
                RowScan::Stripe { gen, owners, stripe_seq, .. } => {
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
                    let o = off as usize;
                    let (owner, have) = (set.owners[o], set.copies[o]);
                    let loc = Loc::Log { row: r, set: s as u32, off };
                    if have == full || !eng.tables.lock().is_valid(owner, loc) {
                        continue;
                    }
                    if have == 0 {
                        // Every copy is damaged: nothing to copy from.
                        self.report.unrepairable_blocks += 1;
                        continue;
                    }
                    let mut data = vec![0u8; bs];
                    let mut md = vec![0u8; mdb];
                    let lba = eng.geo.member_lba(r) + off as u64;
                    // The first intact copy (checked again: the scan kept only its verdict).
                    let mut source = None;
                    for from in (0..copies).filter(|&j| have & (1 << j) != 0) {
                        let (dev, _) = eng.member(eng.geo.set_member(r, s, from));
                        dev.read(lba, &mut data, Some(&mut md)).await?;
                        if BlockMd::checksum_ok(&md, lba, &data) {
                            source = Some(from);
                            break;
                        }
                    }
                    if source.is_none() {
                        self.report.unrepairable_blocks += 1;
                        continue;
                    }
                    for j in (0..copies).filter(|&j| have & (1 << j) == 0) {
                        BlockMd::reindex(&mut md, j, lba, &data);
                        let (dev, _) = eng.member(eng.geo.set_member(r, s, j));
                        dev.write(lba, &data, Some(&md), WriteHints::NONE).await?;
                        self.report.repaired_copies += 1;
                        eng.c.repaired_blocks.inc();
                        if set.damaged[o] & (1 << j) != 0 {
                            self.report.healed_blocks += 1;
                        }
                    }
                }
            }
        }
        for fix in std::mem::take(&mut self.repairs) {
            let (dev, _) = eng.member(fix.member);
            dev.write(fix.lba, &fix.data, Some(&fix.md), WriteHints::NONE).await?;
            self.report.healed_blocks += 1;
        }
        Ok(())
    }

    async fn flush(&mut self) -> DevResult<()> {
        self.eng.barrier().await
    }
}
