//! The host's volatile tables: the user mapping (one entry per user block that was ever
//! written: where its current version lives, or which trim record zeroed it), the trim
//! records, and per row its kind, generation and reverse map (which item each block holds).
//! Everything here is synchronous and runs under the engine's one `parking_lot` mutex (the
//! lock-based kernel engine this baseline models); the engine never holds it across an
//! `.await`.
//!
//! An *item* is a user block (key = LBA) or a trim record (key = `TRIM_KEY | seq`). Every
//! physical block of a live row records the item it was written for ([`Owner`]), so validity is
//! a look-up: a block is valid when the item's entry points at it with the same sequence
//! number. Counts of valid blocks per row and per replica set are kept up to date on every
//! change, which is what conversion and GC choose by.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::format::{next_gen, Tag};
use super::layout::TwophaseGeometry;

/// Key of stripe padding.
pub const PAD: u64 = u64::MAX;
/// Key of a log position that holds nothing usable (a hole left by a failed or lost write).
pub const HOLE: u64 = u64::MAX - 1;
/// Keys with this bit are trim records (the low bits are the record's sequence number).
pub const TRIM_KEY: u64 = 1 << 63;

/// What one physical block was written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub key: u64,
    pub seq: u64,
}

impl Owner {
    pub const HOLE: Owner = Owner { key: HOLE, seq: 0 };
    pub const PAD: Owner = Owner { key: PAD, seq: 0 };

    pub fn is_item(&self) -> bool {
        self.key != PAD && self.key != HOLE
    }

    /// The trim record's sequence number, if this is one.
    pub fn trim(&self) -> Option<u64> {
        (self.is_item() && self.key & TRIM_KEY != 0).then_some(self.key & !TRIM_KEY)
    }
}

/// Where an item lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Loc {
    /// Offset `off` of replica set `set` of log row `row` (on each of the set's members).
    Log { row: u64, set: u32, off: u32 },
    /// Data block `idx` (chunk `idx / chunk_blocks`, offset `idx % chunk_blocks`) of a stripe.
    Stripe { row: u64, idx: u32 },
}

impl Loc {
    pub fn row(&self) -> u64 {
        match *self {
            Loc::Log { row, .. } | Loc::Stripe { row, .. } => row,
        }
    }
}

/// What a member block must hold, as the tables know it: the metadata it was written with
/// (its replica or chunk index follows from the member it is read from). Readers compare what
/// they find with this, so a block that is not the version the mapping expects (an older one
/// left by a lost write, another block written there by mistake) is caught even without a
/// checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Nothing is known (a log position that holds no item): taken as found.
    Any,
    /// A user block, trim record or stripe padding. `key` is `None` for a trim record the
    /// tables no longer hold (nothing refers to it): its first LBA is then read from the
    /// record's contents.
    Item { tag: Tag, key: Option<u64>, seq: u64, gen: u16 },
    /// A parity block of the stripe written by conversion `seq`.
    Parity { seq: u64, gen: u16 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    At(Loc),
    /// Zeroed by the trim record with this sequence number.
    Trimmed(u64),
}

/// A user block's mapping entry: the sequence number of its current version and where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub seq: u64,
    pub target: Target,
}

/// A trim record that still zeroes at least one user block (`refs` of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trim {
    pub loc: Loc,
    pub refs: u64,
    pub start: u64,
    pub len: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Ready for use: never used, or trimmed after its last use.
    Free,
    /// No longer holds valid data; reusable once a member flush that started after
    /// `freed_epoch` has completed (and no reader pins it), then trimmed.
    Pending,
    /// Being trimmed before it becomes free.
    Trimming,
    Log,
    Stripe,
}

pub struct LogSet {
    /// Offsets handed out so far (the set's write pointer).
    pub fill: u32,
    pub valid: u32,
    pub owners: Vec<Owner>,
}

pub struct Row {
    pub kind: Kind,
    pub gen: u16,
    /// Allocation order (oldest first is coldest).
    pub created: u64,
    /// Readers (and the cleaner, and rebuild) working on the row: it is not reused meanwhile.
    pub pins: u32,
    /// Members whose slot in this row does not hold what it should (written while the member
    /// was failed, a write error, or a replacement not yet rebuilt).
    pub missing: u64,
    pub valid: u32,
    /// Log blocks handed out and not yet committed or aborted.
    pub pending: u32,
    /// No more blocks will be handed out (a stripe row; a log row whose sets are full).
    pub sealed: bool,
    /// A stripe row whose write is under way.
    pub building: bool,
    pub freed_epoch: u64,
    pub sets: Vec<LogSet>,
    /// Stripe rows: owner of each data block, `k * chunk_blocks` entries.
    pub owners: Vec<Owner>,
    /// Stripe rows: the sequence number of the conversion that wrote it (in parity metadata).
    pub stripe_seq: u64,
    victim_key: Option<(u32, u64)>,
}

impl Row {
    fn new() -> Row {
        Row {
            kind: Kind::Free,
            gen: 0,
            created: 0,
            pins: 0,
            missing: 0,
            valid: 0,
            pending: 0,
            sealed: false,
            building: false,
            freed_epoch: 0,
            sets: Vec::new(),
            owners: Vec::new(),
            stripe_seq: 0,
            victim_key: None,
        }
    }

    pub fn live(&self) -> bool {
        matches!(self.kind, Kind::Log | Kind::Stripe)
    }
}

/// Part of a log reservation: `count` blocks at offset `off` of a set, for request blocks
/// `first..first + count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub row: u64,
    pub set: usize,
    pub off: u32,
    pub count: u32,
    pub first: u64,
    pub gen: u16,
}

impl Piece {
    pub fn loc(&self, b: u32) -> Loc {
        Loc::Log { row: self.row, set: self.set as u32, off: self.off + b }
    }
}

/// Why a reservation cannot be made now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// The cleaner must run first (watermark, log budget, or too few spare rows).
    Clean,
    /// Freed rows must be flushed and trimmed before one can be used.
    Prepare,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Free rows: valid blocks of the emptiest rows first, then the oldest log blocks.
    Gc,
    /// Lower the replicated data: the oldest log blocks.
    Convert,
}

/// One item the cleaner moves into its new stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    pub owner: Owner,
    pub loc: Loc,
    /// Trim records: the first LBA (the metadata key).
    pub trim_start: u64,
}

/// What a committed move did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    pub from_log: u64,
    pub from_stripes: u64,
}

pub struct Tables {
    pub geo: TwophaseGeometry,
    pub rows: Vec<Row>,
    pub map: BTreeMap<u64, Entry>,
    pub trims: HashMap<u64, Trim>,
    pub open_row: Option<u64>,
    cursor: usize,
    pub next_seq: u64,
    next_created: u64,
    /// Valid items in log rows (the replicated data the watermark is about).
    pub replicated: u64,
    /// Bumped by each barrier when it starts.
    pub epoch: u64,
    /// Rows freed at an epoch below this are behind a completed member flush.
    pub barrier_passed: u64,
    /// Conversion started (replicated > watermark, or the log past its row budget) and has
    /// not reached the low watermark.
    pub converting: bool,
    /// Background conversion tasks running, and how many were ever started (to place the
    /// next one on the next reactor).
    pub converters: usize,
    pub converters_started: usize,
    /// Conversion tasks that stopped because nothing could be moved (what is left is in rows
    /// still being written, or the spare rows are GC's).
    pub convert_stalls: u64,
    /// The first error a background conversion met; writers report it.
    pub convert_error: Option<flashrig_blockdev::DevError>,
    /// Blocks some cleaner has chosen and not committed yet, so that concurrent cleaners
    /// (background conversions and GC) never move the same block twice.
    claimed: std::collections::HashSet<Loc>,
    /// Valid blocks no copy of which is intact: the cleaner leaves them where they are (moving
    /// them would give corrupt contents a fresh checksum). An entry goes when its row is
    /// reused; recovery starts without any, and the cleaner finds them again.
    stuck: std::collections::HashSet<Loc>,
    free: BTreeSet<u64>,
    pending: BTreeSet<u64>,
    trimming: u64,
    /// Live log rows, oldest first.
    pub log_rows: BTreeSet<(u64, u64)>,
    pub stripe_rows: u64,
    /// Sealed live rows by valid blocks (fewest first), then age.
    victims: BTreeSet<(u32, u64, u64)>,
    /// Rows whose valid counts changed since they were last re-filed: a commit re-files each
    /// once at its end instead of at every block (a stripe's commit moves 64 blocks out of a
    /// few rows, and re-filing is a remove and an insert in `victims`).
    touched: Vec<u64>,
}

impl Tables {
    pub fn new(geo: TwophaseGeometry) -> Tables {
        Tables {
            geo,
            rows: (0..geo.rows).map(|_| Row::new()).collect(),
            map: BTreeMap::new(),
            trims: HashMap::new(),
            open_row: None,
            cursor: 0,
            next_seq: 1,
            next_created: 0,
            replicated: 0,
            epoch: 0,
            barrier_passed: 0,
            converting: false,
            converters: 0,
            converters_started: 0,
            convert_stalls: 0,
            convert_error: None,
            claimed: std::collections::HashSet::new(),
            stuck: std::collections::HashSet::new(),
            free: (0..geo.rows).collect(),
            pending: BTreeSet::new(),
            trimming: 0,
            log_rows: BTreeSet::new(),
            stripe_rows: 0,
            victims: BTreeSet::new(),
            touched: Vec::new(),
        }
    }

    pub fn row(&self, r: u64) -> &Row {
        &self.rows[r as usize]
    }

    fn row_mut(&mut self, r: u64) -> &mut Row {
        &mut self.rows[r as usize]
    }

    /// Rows not holding live data: free, waiting for a flush, or being trimmed.
    pub fn spare_rows(&self) -> u64 {
        self.free.len() as u64 + self.pending.len() as u64 + self.trimming
    }

    pub fn free_rows(&self) -> u64 {
        self.free.len() as u64
    }

    pub fn pending_rows(&self) -> u64 {
        self.pending.len() as u64
    }

    pub fn alloc_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    /// Takes a free row for a new log row or stripe.
    fn alloc_row(&mut self, kind: Kind) -> Option<u64> {
        let r = self.free.pop_first()?;
        let (c, sets, d) = (
            self.geo.chunk_blocks as usize,
            self.geo.sets_per_row,
            self.geo.stripe_data_blocks() as usize,
        );
        let created = self.next_created;
        self.next_created += 1;
        let row = self.row_mut(r);
        row.kind = kind;
        row.gen = next_gen(row.gen);
        row.created = created;
        row.missing = 0;
        row.valid = 0;
        row.pending = 0;
        row.victim_key = None;
        match kind {
            Kind::Log => {
                row.sealed = false;
                row.building = false;
                row.sets = (0..sets)
                    .map(|_| LogSet { fill: 0, valid: 0, owners: vec![Owner::HOLE; c] })
                    .collect();
                self.log_rows.insert((created, r));
            }
            Kind::Stripe => {
                row.sealed = true;
                row.building = true;
                row.owners = vec![Owner::PAD; d];
                self.stripe_rows += 1;
            }
            _ => unreachable!("only live kinds are allocated"),
        }
        Some(r)
    }

    /// Whether the physical block at `loc` holds its item's current version.
    pub fn is_valid(&self, o: Owner, loc: Loc) -> bool {
        if !o.is_item() {
            return false;
        }
        match o.trim() {
            Some(rec) => self.trims.get(&rec).is_some_and(|t| t.loc == loc && t.refs > 0),
            None => {
                self.map.get(&o.key).is_some_and(|e| e.seq == o.seq && e.target == Target::At(loc))
            }
        }
    }

    pub(super) fn validate(&mut self, loc: Loc) {
        self.count(loc, true);
    }

    pub(super) fn invalidate(&mut self, loc: Loc) {
        self.count(loc, false);
    }

    fn count(&mut self, loc: Loc, up: bool) {
        let row = self.row_mut(loc.row());
        let step = |v: &mut u32| if up { *v += 1 } else { *v -= 1 };
        step(&mut row.valid);
        if let Loc::Log { set, .. } = loc {
            step(&mut row.sets[set as usize].valid);
            if up {
                self.replicated += 1;
            } else {
                self.replicated -= 1;
            }
        }
        if self.touched.last() != Some(&loc.row()) {
            self.touched.push(loc.row());
        }
    }

    /// Re-files every row whose counts changed (see `touched`); every commit that changes
    /// counts ends with this.
    fn refresh_touched(&mut self) {
        let mut rows = std::mem::take(&mut self.touched);
        rows.sort_unstable();
        rows.dedup();
        for &r in &rows {
            self.refresh(r);
        }
        rows.clear();
        self.touched = rows;
    }

    /// Re-files a row after a change: in the victim index while sealed and settled, freed
    /// when nothing valid is left.
    pub(super) fn refresh(&mut self, r: u64) {
        let row = &mut self.rows[r as usize];
        if let Some((v, c)) = row.victim_key.take() {
            self.victims.remove(&(v, c, r));
        }
        if !row.live() || !row.sealed || row.building || row.pending > 0 {
            return;
        }
        if row.valid == 0 {
            self.free_row(r);
        } else {
            row.victim_key = Some((row.valid, row.created));
            self.victims.insert((row.valid, row.created, r));
        }
    }

    fn free_row(&mut self, r: u64) {
        let epoch = self.epoch;
        let row = &mut self.rows[r as usize];
        match row.kind {
            Kind::Log => {
                self.log_rows.remove(&(row.created, r));
            }
            Kind::Stripe => self.stripe_rows -= 1,
            _ => return,
        }
        row.kind = Kind::Pending;
        row.freed_epoch = epoch;
        // The reverse map stays until the row is reused: a reader that pinned the row before
        // it was freed still checks what it reads against it (see `expect`).
        row.valid = 0;
        if self.open_row == Some(r) {
            self.open_row = None;
        }
        self.pending.insert(r);
    }

    /// Whether conversion should run: it starts when the replicated data passes the watermark
    /// (or the log its row budget) and goes on until the replicated data is back at the low
    /// watermark (and the log within its budget).
    pub fn conversion_due(&mut self) -> bool {
        let over_budget = (self.log_rows.len() as u64) > self.geo.log_row_budget;
        if self.replicated > self.geo.watermark_blocks || over_budget {
            self.converting = true;
        }
        if self.converting && self.replicated <= self.geo.low_watermark_blocks && !over_budget {
            self.converting = false;
        }
        self.converting
    }

    /// Whether user writes may go on now: the replicated data is within the watermark and the
    /// log within its row budget. Past either, writes wait for the background conversion to
    /// make room, so during the conversion phase they go on at the rate it converts (§3.1,
    /// Fig. 3b: "user I/O requests are delayed and the conversion phase starts").
    pub fn admit(&mut self) -> bool {
        self.conversion_due();
        self.replicated <= self.geo.watermark_blocks
            && (self.log_rows.len() as u64) <= self.geo.log_row_budget
    }

    /// Whether the cleaner must collect garbage before a writer that needs `rows_needed` new
    /// rows can go on.
    pub fn gc_needed(&self, rows_needed: u64) -> bool {
        self.spare_rows() < self.geo.reserve_rows + rows_needed
    }

    /// Hands out up to `want` log blocks (all in the open log row, opening one if needed) for
    /// request blocks `first..`, whose keys `key(i)` get sequence number `seq`.
    pub fn reserve(
        &mut self,
        want: u64,
        first: u64,
        seq: u64,
        key: impl Fn(u64) -> u64,
    ) -> Result<Vec<Piece>, Need> {
        let c = self.geo.chunk_blocks as u32;
        let has_room = |t: &Tables, r: u64| t.row(r).sets.iter().any(|s| s.fill < c);
        let r = match self.open_row {
            Some(r) if has_room(self, r) => r,
            _ => {
                if self.spare_rows() <= self.geo.reserve_rows {
                    return Err(Need::Clean);
                }
                if self.free.is_empty() {
                    return Err(Need::Prepare);
                }
                let r = self.alloc_row(Kind::Log).expect("a free row");
                self.open_row = Some(r);
                r
            }
        };
        let sets = self.geo.sets_per_row;
        let cursor = self.cursor;
        self.cursor = (self.cursor + 1) % sets;
        let row = &mut self.rows[r as usize];
        let gen = row.gen;
        let order = (0..sets).map(|x| (cursor + x) % sets);
        // A set with room for the whole request keeps it contiguous on its members.
        let mut takes: Vec<(usize, u32)> = Vec::new();
        if let Some(s) = order.clone().find(|&s| (c - row.sets[s].fill) as u64 >= want) {
            takes.push((s, want as u32));
        } else {
            let mut left = want;
            for s in order {
                let room = (c - row.sets[s].fill) as u64;
                if room > 0 && left > 0 {
                    let n = room.min(left);
                    takes.push((s, n as u32));
                    left -= n;
                }
            }
        }
        let mut pieces = Vec::with_capacity(takes.len());
        let mut at = first;
        for (s, n) in takes {
            let set = &mut row.sets[s];
            let off = set.fill;
            for b in 0..n {
                set.owners[(off + b) as usize] = Owner { key: key(at + b as u64), seq };
            }
            set.fill += n;
            row.pending += n;
            pieces.push(Piece { row: r, set: s, off, count: n, first: at, gen });
            at += n as u64;
        }
        if row.sets.iter().all(|s| s.fill == c) {
            row.sealed = true;
            self.open_row = None;
        }
        Ok(pieces)
    }

    /// Makes `key` (sequence `seq`) live at `loc` unless a newer version is already mapped;
    /// returns whether it did.
    fn install(&mut self, key: u64, seq: u64, loc: Loc) -> bool {
        use std::collections::btree_map::Entry as Slot;
        let new = Entry { seq, target: Target::At(loc) };
        // One look-up of the key, not a look-up and an insert.
        let old = match self.map.entry(key) {
            Slot::Vacant(v) => {
                v.insert(new);
                None
            }
            Slot::Occupied(mut o) => {
                if o.get().seq >= seq {
                    return false;
                }
                Some(o.insert(new))
            }
        };
        if let Some(old) = old {
            self.release(old.target);
        }
        self.validate(loc);
        true
    }

    fn release(&mut self, t: Target) {
        match t {
            Target::At(l) => self.invalidate(l),
            Target::Trimmed(rec) => self.unref_trim(rec),
        }
    }

    fn unref_trim(&mut self, rec: u64) {
        let t = self.trims.get_mut(&rec).expect("referenced trim record exists");
        t.refs -= 1;
        if t.refs == 0 {
            let loc = t.loc;
            self.trims.remove(&rec);
            self.invalidate(loc);
        }
    }

    /// A user write's piece reached the members: map its blocks (user LBA `lba + first + b`).
    /// Returns the mapping updates made.
    pub fn commit_user(&mut self, p: &Piece, lba: u64, seq: u64) -> u64 {
        let mut updated = 0;
        for b in 0..p.count {
            if self.install(lba + p.first + b as u64, seq, p.loc(b)) {
                updated += 1;
            }
        }
        self.refresh_touched();
        self.settle(p);
        updated
    }

    /// Whether a trim of `len` blocks at `start` changes anything (some block there has data).
    pub fn trim_needed(&self, start: u64, len: u64) -> bool {
        self.map.range(start..start + len).any(|(_, e)| matches!(e.target, Target::At(_)))
    }

    /// A trim record (sequence `seq`, one block in piece `p`) reached the members: every block
    /// of its range mapped to something older now maps to the record. Returns the blocks.
    pub fn commit_trim(&mut self, p: &Piece, seq: u64, start: u64, len: u64) -> u64 {
        let loc = p.loc(0);
        let older: Vec<(u64, Target)> = self
            .map
            .range(start..start + len)
            .filter(|(_, e)| e.seq < seq)
            .map(|(&l, e)| (l, e.target))
            .collect();
        self.trims.insert(seq, Trim { loc, refs: older.len() as u64, start, len });
        for &(l, _) in &older {
            self.map.insert(l, Entry { seq, target: Target::Trimmed(seq) });
        }
        if older.is_empty() {
            self.trims.remove(&seq);
        } else {
            self.validate(loc);
        }
        let n = older.len() as u64;
        for (_, t) in older {
            self.release(t);
        }
        self.refresh_touched();
        self.settle(p);
        n
    }

    /// A piece's write failed: its blocks stay unmapped holes.
    pub fn abort(&mut self, p: &Piece) {
        let row = self.row_mut(p.row);
        for b in 0..p.count {
            row.sets[p.set].owners[(p.off + b) as usize] = Owner::HOLE;
        }
        self.settle(p);
    }

    fn settle(&mut self, p: &Piece) {
        self.row_mut(p.row).pending -= p.count;
        self.refresh(p.row);
    }

    /// Pins the rows of a read plan (one pin per block).
    pub fn pin(&mut self, r: u64) {
        self.row_mut(r).pins += 1;
    }

    pub fn unpin(&mut self, r: u64) {
        self.row_mut(r).pins -= 1;
    }

    /// Valid items of row `r` in position order.
    fn valid_items(&self, r: u64, out: &mut Vec<Source>, limit: usize) {
        let row = self.row(r);
        let mut push = |t: &Tables, owner: Owner, loc: Loc| {
            let skip = t.claimed.contains(&loc) || t.stuck.contains(&loc);
            if out.len() < limit && !skip && t.is_valid(owner, loc) {
                let trim_start = owner.trim().map_or(0, |rec| t.trims[&rec].start);
                out.push(Source { owner, loc, trim_start });
            }
        };
        match row.kind {
            Kind::Log => {
                for (s, set) in row.sets.iter().enumerate() {
                    for off in 0..set.fill {
                        let loc = Loc::Log { row: r, set: s as u32, off };
                        push(self, set.owners[off as usize], loc);
                    }
                }
            }
            Kind::Stripe => {
                for (idx, &o) in row.owners.iter().enumerate() {
                    push(self, o, Loc::Stripe { row: r, idx: idx as u32 });
                }
            }
            _ => {}
        }
    }

    /// Chooses what the cleaner's next stripe holds (at most one stripe's data blocks) and
    /// pins the rows it reads. In GC mode the rows with the fewest valid blocks come first
    /// (skipping full stripes, which moving would not shrink); then, in either mode, the
    /// oldest log blocks (the coldest data, and whole log rows empty in order).
    pub fn plan(&mut self, mode: Mode) -> Vec<Source> {
        let d = self.geo.stripe_data_blocks() as usize;
        let mut rows: Vec<u64> = Vec::new();
        if mode == Mode::Gc {
            let mut total = 0usize;
            for &(valid, _, r) in &self.victims {
                if total >= d {
                    break;
                }
                if self.row(r).kind == Kind::Stripe && valid as usize >= d {
                    continue;
                }
                rows.push(r);
                total += valid as usize;
            }
        }
        let mut out = Vec::new();
        for &r in &rows {
            self.valid_items(r, &mut out, d);
        }
        // Walk the log rows in place: collecting them all first cost a pass over every log
        // row per plan (6% of a FusionRAID trace replay's wall time), when a plan needs a few.
        for &(_, r) in &self.log_rows {
            if out.len() >= d {
                break;
            }
            if !rows.contains(&r) {
                self.valid_items(r, &mut out, d);
            }
        }
        for s in &out {
            self.pin(s.loc.row());
            self.claimed.insert(s.loc);
        }
        out
    }

    /// Sources the cleaner could not move because no copy of them is intact: unpinned, and
    /// left out of every later plan while their row lives.
    pub fn stick(&mut self, sources: &[Source]) {
        for s in sources {
            self.unpin(s.loc.row());
            self.claimed.remove(&s.loc);
            self.stuck.insert(s.loc);
        }
    }

    /// Lets go of a plan that will not be carried out (no row for it).
    pub fn unplan(&mut self, sources: &[Source]) {
        for s in sources {
            self.unpin(s.loc.row());
            self.claimed.remove(&s.loc);
        }
    }

    /// Takes a free row for the cleaner's next stripe.
    pub fn alloc_stripe(&mut self) -> Result<u64, Need> {
        if self.free.is_empty() {
            return Err(Need::Prepare);
        }
        Ok(self.alloc_row(Kind::Stripe).expect("a free row"))
    }

    pub fn gen_of(&self, r: u64) -> u16 {
        self.row(r).gen
    }

    /// What the block at `loc` must hold: the item of the row's reverse map (whose sequence
    /// number is the mapping's when the block is valid) with the row's generation. Asked only
    /// for rows that are live or pinned, whose reverse map is kept.
    pub fn expect(&self, loc: Loc) -> Expect {
        let row = self.row(loc.row());
        let gen = row.gen;
        let (owner, log) = match loc {
            Loc::Log { set, off, .. } => {
                (row.sets.get(set as usize).and_then(|s| s.owners.get(off as usize)).copied(), true)
            }
            Loc::Stripe { idx, .. } => (row.owners.get(idx as usize).copied(), false),
        };
        let Some(o) = owner else { return Expect::Any };
        if o.key == HOLE || (o.key == PAD && log) {
            return Expect::Any;
        }
        if o.key == PAD {
            return Expect::Item { tag: Tag::StripePad, key: Some(0), seq: row.stripe_seq, gen };
        }
        match o.trim() {
            Some(rec) => Expect::Item {
                tag: if log { Tag::LogTrim } else { Tag::StripeTrim },
                key: self.trims.get(&rec).map(|t| t.start),
                seq: rec,
                gen,
            },
            None => Expect::Item {
                tag: if log { Tag::LogData } else { Tag::StripeData },
                key: Some(o.key),
                seq: o.seq,
                gen,
            },
        }
    }

    /// What blocks `lo..hi` of chunk `x` (code order: data `0..k`, then parity) of stripe row
    /// `r` must hold.
    pub fn expect_chunk(&self, r: u64, x: usize, lo: u64, hi: u64) -> Vec<Expect> {
        let c = self.geo.chunk_blocks;
        if x < self.geo.k {
            (lo..hi)
                .map(|b| self.expect(Loc::Stripe { row: r, idx: (x as u64 * c + b) as u32 }))
                .collect()
        } else {
            let row = self.row(r);
            vec![Expect::Parity { seq: row.stripe_seq, gen: row.gen }; (hi - lo) as usize]
        }
    }

    /// What offsets `lo..hi` of replica set `set` of log row `r` must hold.
    pub fn expect_set(&self, r: u64, set: usize, lo: u32, hi: u32) -> Vec<Expect> {
        (lo..hi).map(|off| self.expect(Loc::Log { row: r, set: set as u32, off })).collect()
    }

    /// The cleaner's stripe reached the members: items still current at their source move to
    /// it; the rest are born invalid. Unpins the sources.
    pub fn commit_stripe(&mut self, t: u64, sources: &[Source], stripe_seq: u64) -> Moved {
        let mut moved = Moved::default();
        {
            let row = self.row_mut(t);
            for (i, s) in sources.iter().enumerate() {
                row.owners[i] = s.owner;
            }
            row.stripe_seq = stripe_seq;
            row.building = false;
        }
        for (i, s) in sources.iter().enumerate() {
            let dst = Loc::Stripe { row: t, idx: i as u32 };
            // Still current at its source (`is_valid`), moved in the same look-up.
            let moved_here = match s.owner.trim() {
                _ if !s.owner.is_item() => false,
                Some(rec) => match self.trims.get_mut(&rec) {
                    Some(tr) if tr.loc == s.loc && tr.refs > 0 => {
                        tr.loc = dst;
                        true
                    }
                    _ => false,
                },
                None => match self.map.get_mut(&s.owner.key) {
                    Some(e) if e.seq == s.owner.seq && e.target == Target::At(s.loc) => {
                        e.target = Target::At(dst);
                        true
                    }
                    _ => false,
                },
            };
            if moved_here {
                self.validate(dst);
                self.invalidate(s.loc);
                match s.loc {
                    Loc::Log { .. } => moved.from_log += 1,
                    Loc::Stripe { .. } => moved.from_stripes += 1,
                }
            }
        }
        self.refresh_touched();
        for s in sources {
            self.unpin(s.loc.row());
            self.claimed.remove(&s.loc);
        }
        self.refresh(t);
        moved
    }

    /// The cleaner's stripe failed: the row is freed and the sources unpinned.
    pub fn abort_stripe(&mut self, t: u64, sources: &[Source]) {
        self.row_mut(t).building = false;
        for s in sources {
            self.unpin(s.loc.row());
            self.claimed.remove(&s.loc);
        }
        self.refresh(t);
    }

    /// Whether some freed row can be reused after a flush that has already completed.
    pub fn reusable(&self) -> bool {
        self.pending
            .iter()
            .any(|&r| self.row(r).freed_epoch < self.barrier_passed && self.row(r).pins == 0)
    }

    /// Freed rows behind a completed flush and unpinned, now to be trimmed.
    pub fn take_reusable(&mut self) -> Vec<u64> {
        let rows: Vec<u64> = self
            .pending
            .iter()
            .copied()
            .filter(|&r| self.row(r).freed_epoch < self.barrier_passed && self.row(r).pins == 0)
            .collect();
        if !self.stuck.is_empty() {
            self.stuck.retain(|l| !rows.contains(&l.row()));
        }
        for &r in &rows {
            self.pending.remove(&r);
            let row = self.row_mut(r);
            row.kind = Kind::Trimming;
            row.sets = Vec::new();
            row.owners = Vec::new();
        }
        self.trimming += rows.len() as u64;
        rows
    }

    pub fn finish_trim(&mut self, rows: &[u64]) {
        for &r in rows {
            self.row_mut(r).kind = Kind::Free;
            self.free.insert(r);
        }
        self.trimming -= rows.len() as u64;
    }

    /// Marks member `i`'s slot missing in every live row (a replacement joins the array).
    pub fn mark_missing_everywhere(&mut self, i: usize) {
        for row in self.rows.iter_mut().filter(|r| r.live()) {
            row.missing |= 1 << i;
        }
    }

    pub fn mark_missing(&mut self, r: u64, i: usize) {
        self.row_mut(r).missing |= 1 << i;
    }

    pub fn clear_missing(&mut self, r: u64, i: usize) {
        self.row_mut(r).missing &= !(1 << i);
    }

    /// Live rows whose slot on member `i` is missing.
    pub fn rows_missing(&self, i: usize) -> Vec<u64> {
        (0..self.geo.rows)
            .filter(|&r| self.row(r).live() && self.row(r).missing & 1 << i != 0)
            .collect()
    }

    /// Installs a row found by recovery (kind, generation, sets or owners as found).
    pub(super) fn restore_row(&mut self, r: u64, mut row: Row) {
        self.free.remove(&r);
        row.created = self.next_created;
        self.next_created += 1;
        match row.kind {
            Kind::Log => {
                self.log_rows.insert((row.created, r));
            }
            Kind::Stripe => self.stripe_rows += 1,
            Kind::Pending => {
                self.pending.insert(r);
            }
            Kind::Free => {
                self.free.insert(r);
            }
            Kind::Trimming => unreachable!("recovery never restores a row being trimmed"),
        }
        self.rows[r as usize] = row;
    }

    /// A blank row of generation `gen` of the given kind, for recovery to fill in.
    pub(super) fn blank_row(&self, kind: Kind, gen: u16) -> Row {
        let mut row = Row::new();
        row.kind = kind;
        row.gen = gen;
        row.sealed = true;
        match kind {
            Kind::Log => {
                let c = self.geo.chunk_blocks as usize;
                row.sets = (0..self.geo.sets_per_row)
                    .map(|_| LogSet { fill: 0, valid: 0, owners: vec![Owner::HOLE; c] })
                    .collect();
            }
            Kind::Stripe => row.owners = vec![Owner::PAD; self.geo.stripe_data_blocks() as usize],
            _ => {}
        }
        row
    }

    /// Recounts valid blocks and re-files every row after recovery filled the tables.
    pub(super) fn recount(&mut self) {
        self.replicated = 0;
        for r in 0..self.geo.rows {
            let row = self.row_mut(r);
            row.valid = 0;
            for s in row.sets.iter_mut() {
                s.valid = 0;
            }
        }
        let locs: Vec<Loc> = self
            .map
            .values()
            .filter_map(|e| match e.target {
                Target::At(l) => Some(l),
                Target::Trimmed(_) => None,
            })
            .chain(self.trims.values().map(|t| t.loc))
            .collect();
        for loc in locs {
            let row = self.row_mut(loc.row());
            row.valid += 1;
            if let Loc::Log { set, .. } = loc {
                row.sets[set as usize].valid += 1;
                self.replicated += 1;
            }
        }
        for r in 0..self.geo.rows {
            self.refresh(r);
        }
    }

    /// Checks the counts against a recount from scratch (tests).
    #[cfg(test)]
    pub fn check_counts(&self) {
        let mut valid = vec![0u32; self.rows.len()];
        for (r, row) in self.rows.iter().enumerate() {
            match row.kind {
                Kind::Log => {
                    for (s, set) in row.sets.iter().enumerate() {
                        let mut sv = 0;
                        for off in 0..set.fill {
                            let loc = Loc::Log { row: r as u64, set: s as u32, off };
                            sv += self.is_valid(set.owners[off as usize], loc) as u32;
                        }
                        assert_eq!(sv, set.valid, "row {r} set {s}");
                        valid[r] += sv;
                    }
                }
                Kind::Stripe => {
                    for (i, &o) in row.owners.iter().enumerate() {
                        valid[r] +=
                            self.is_valid(o, Loc::Stripe { row: r as u64, idx: i as u32 }) as u32;
                    }
                }
                _ => {}
            }
            assert_eq!(valid[r], row.valid, "row {r}");
        }
        for t in self.trims.values() {
            assert!(t.refs > 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables() -> Tables {
        Tables::new(TwophaseGeometry::plan(2, 1, 4, 40, 0.05, 0.0).unwrap())
    }

    fn write(t: &mut Tables, lba: u64, n: u64) -> u64 {
        let seq = t.alloc_seq();
        let mut done = 0;
        while done < n {
            let pieces = t.reserve(n - done, done, seq, |i| lba + i).unwrap();
            for p in &pieces {
                t.commit_user(p, lba, seq);
                done += p.count as u64;
            }
        }
        seq
    }

    #[test]
    fn overwrites_invalidate_and_free_log_rows() {
        let mut t = tables();
        // 2+1: one set of 4 blocks per log row.
        write(&mut t, 0, 4);
        assert_eq!((t.replicated, t.log_rows.len()), (4, 1));
        write(&mut t, 0, 4);
        t.check_counts();
        assert_eq!(t.replicated, 4);
        assert_eq!(t.pending_rows(), 1, "the first row is all invalid");
        assert!(!t.reusable(), "not before a flush");
        t.epoch += 1;
        t.barrier_passed = t.epoch;
        assert!(t.reusable());
        let rows = t.take_reusable();
        t.finish_trim(&rows);
        assert_eq!(t.pending_rows(), 0);
    }

    #[test]
    fn trims_reference_records_until_rewritten() {
        let mut t = tables();
        write(&mut t, 10, 3);
        assert!(t.trim_needed(9, 4));
        let seq = t.alloc_seq();
        let p = t.reserve(1, 0, seq, |_| TRIM_KEY | seq).unwrap();
        t.commit_trim(&p[0], seq, 9, 4);
        t.check_counts();
        assert_eq!(t.trims[&seq].refs, 3);
        assert!(!t.trim_needed(9, 4));
        assert_eq!(t.replicated, 1, "only the record is valid");
        write(&mut t, 10, 3);
        t.check_counts();
        assert!(!t.trims.contains_key(&seq), "a record nothing refers to is dropped");
    }

    #[test]
    fn the_cleaner_moves_the_oldest_valid_blocks_into_a_stripe() {
        let mut t = tables();
        for l in 0..5 {
            write(&mut t, l * 4, 4);
        }
        write(&mut t, 0, 2); // half of the first row is now invalid
        let sources = t.plan(Mode::Convert);
        assert_eq!(sources.len(), 8, "one 2+1 stripe of 4-block chunks");
        assert_eq!(sources[0].owner.key, 2, "oldest first, valid blocks only");
        let row = t.alloc_stripe().unwrap();
        let seq = t.alloc_seq();
        let moved = t.commit_stripe(row, &sources, seq);
        assert_eq!(moved, Moved { from_log: 8, from_stripes: 0 });
        t.check_counts();
        assert_eq!(t.stripe_rows, 1);
        assert_eq!(t.map[&2].target, Target::At(Loc::Stripe { row, idx: 0 }));
        // A stripe whose data was overwritten is a GC victim (the emptiest rows come first).
        write(&mut t, 2, 6);
        let sources = t.plan(Mode::Gc);
        assert!(sources.iter().any(|s| matches!(s.loc, Loc::Stripe { .. })));
        let row = t.alloc_stripe().unwrap();
        t.abort_stripe(row, &sources);
        t.check_counts();
    }
}
