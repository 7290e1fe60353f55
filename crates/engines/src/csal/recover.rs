//! Recovery (§4.4) as an ordered list of named steps, each timed on the runtime's clock
//! (virtual in sim), for reproducing Table 4. Three modes:
//!
//! - **naive**: no persisted metadata but the superblock: every block of every chunk and zone
//!   is read and its record decoded; a container's SID is the largest container SID among its
//!   records (older records are from an earlier life), a container with none is free.
//! - **p2l** (Optimization 1): the newest whole state slot gives each container's state and
//!   SID; closed ones contribute their P2L table, open ones are scanned whole.
//! - **checkpoint** (Optimization 2): the L2P on the fast device as the last checkpoint (and
//!   evictions since, which only write pages whose blocks were durable) left it; only records
//!   with a block SID at or above the checkpoint SID are replayed, from the containers that can
//!   hold them (open at the checkpoint or opened since). After a clean shutdown nothing is
//!   replayed: the metadata region is loaded as it is.
//!
//! Conflicts between candidates for one LBA are resolved by [`resolve`] (the paper's three
//! cases), trims by [`trim_kills`]. Then validity is rebuilt from the L2P, chunks and zones
//! that were open are closed (their P2L written, zones finished), and a checkpoint ends
//! recovery: a crash during recovery finds the previous state slot and recovers again.

use std::collections::HashMap;
use std::sync::Arc;

use flashrig_blockdev::{DevError, DevResult, WriteHints, ZoneCommand, ZoneState};
use flashrig_runtime::now_ns;

use super::format::{
    decode_p2l, CState, Kind, P2lEntry, Record, StateSlot, L2P_PAGE_ENTRIES, UNMAPPED,
};
use super::l2p::{decode_page, encode_page};
use super::Inner;

/// How a crash is recovered from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    Naive,
    P2l,
    #[default]
    Checkpoint,
}

impl RecoveryMode {
    pub fn parse(s: &str) -> Option<RecoveryMode> {
        match s {
            "naive" => Some(RecoveryMode::Naive),
            "p2l" => Some(RecoveryMode::P2l),
            "checkpoint" => Some(RecoveryMode::Checkpoint),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            RecoveryMode::Naive => "naive",
            RecoveryMode::P2l => "p2l",
            RecoveryMode::Checkpoint => "checkpoint",
        }
    }
}

/// The steps, in order (a mode runs the ones it needs).
pub const RECOVERY_STEPS: &[&str] = &[
    "read_superblock",
    "load_state",
    "load_bitmaps",
    "scan_all_blocks",
    "read_p2l",
    "scan_open",
    "load_l2p",
    "resolve",
    "rebuild_validity",
    "close_open",
    "write_checkpoint",
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepReport {
    pub name: &'static str,
    /// Time the step took on the runtime's clock.
    pub ns: u64,
    pub detail: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub mode: Option<RecoveryMode>,
    /// The state slot said the device was shut down cleanly.
    pub clean: bool,
    pub steps: Vec<StepReport>,
    /// Blocks whose records were read (naive scan, open containers).
    pub blocks_scanned: u64,
    pub p2l_entries: u64,
    pub l2p_pages_read: u64,
    /// LBAs with more than one candidate.
    pub conflicts: u64,
}

impl RecoveryReport {
    pub fn total_ns(&self) -> u64 {
        self.steps.iter().map(|s| s.ns).sum()
    }

    pub fn step_ns(&self, name: &str) -> u64 {
        self.steps.iter().filter(|s| s.name == name).map(|s| s.ns).sum()
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.steps.iter().map(|s| s.name).collect()
    }
}

/// A copy of an LBA found during recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The block SID (kept by compaction and GC).
    pub sid: u64,
    pub pba: u32,
    /// On the zoned device (else in a chunk of the fast device).
    pub zoned: bool,
}

/// Whether candidate `a` beats `b` for the same LBA (§4.4 "Resolving LBA conflicts"): the
/// highest SID wins; with equal SIDs on different devices both hold the same data (SIDs are
/// immutable), and the zoned copy is kept (it is where compaction put it; the chunk is on its
/// way to being freed); with equal SIDs on the same device the largest PBA wins (blocks are
/// appended: within one chunk it is the newer write; within the zoned device the copies are
/// moves of one block, so which one is kept does not matter).
pub fn resolve(a: &Candidate, b: &Candidate) -> bool {
    if a.sid != b.sid {
        return a.sid > b.sid;
    }
    if a.zoned != b.zoned {
        return a.zoned;
    }
    a.pba > b.pba
}

/// Whether a trim (block SID `sid`, first written at `origin` in its chunk) removes data
/// candidate `d`: data of an older SID, or of the same SID written earlier in the same chunk.
/// A same-SID copy on the zoned device was moved by compaction, which runs only after the
/// chunk closed, so after every trim written into it: it was valid then, hence newer.
pub fn trim_kills(sid: u64, origin: u32, d: &Candidate) -> bool {
    d.sid < sid || (d.sid == sid && !d.zoned && d.pba < origin)
}

/// A record found during recovery.
#[derive(Clone, Copy, Debug)]
struct Found {
    pba: u32,
    sid: u64,
    lba: u64,
    /// 0: data; n: a trim of n LBAs.
    trim: u32,
    origin: u32,
}

struct Timer<'a> {
    rep: &'a mut RecoveryReport,
    t: u64,
}

impl Timer<'_> {
    fn step(&mut self, name: &'static str, detail: String) {
        let now = now_ns();
        self.rep.steps.push(StepReport { name, ns: now - self.t, detail });
        self.t = now;
    }
}

impl Inner {
    fn found_of(&self, c: usize, off: u64, r: &Record) -> Found {
        Found {
            pba: (self.geo.first_pba(c) + off) as u32,
            sid: r.sid,
            lba: r.lba,
            trim: if r.kind == Kind::Trim { r.count } else { 0 },
            origin: if r.kind == Kind::Trim { r.origin() } else { 0 },
        }
    }

    /// Reads container `c` whole and returns its records that check, with their container
    /// SIDs.
    async fn scan_container(&self, c: usize) -> DevResult<Vec<(u64, Found)>> {
        let bs = self.bs();
        let mdb = self.mdb();
        let cap = self.geo.capacity(c);
        let first = self.geo.first_pba(c);
        let mut out = Vec::new();
        let mut off = 0;
        while off < cap {
            let n = (cap - off).min(256);
            let mut data = vec![0u8; n as usize * bs];
            let mut md = vec![0u8; n as usize * mdb];
            self.read_with_md((first + off) as u32, &mut data, &mut md).await?;
            for i in 0..n as usize {
                if let Some(r) = Record::decode(&md[i * mdb..(i + 1) * mdb]) {
                    if r.data_matches(&data[i * bs..(i + 1) * bs]) && r.lba < self.geo.user_blocks {
                        out.push((r.container_sid, self.found_of(c, off + i as u64, &r)));
                    }
                }
            }
            off += n;
        }
        Ok(out)
    }

    async fn read_p2l(&self, c: usize, sid: u64) -> DevResult<Option<Vec<P2lEntry>>> {
        let mut b = vec![0u8; self.geo.p2l_blocks(c) as usize * self.bs()];
        self.fast.read(self.geo.p2l_at(c), &mut b, None).await?;
        Ok(decode_p2l(&b, sid))
    }

    async fn load_slot(&self) -> DevResult<Option<StateSlot>> {
        let mut best: Option<StateSlot> = None;
        for i in 0..2 {
            let mut b = vec![0u8; self.geo.state_blocks as usize * self.bs()];
            self.fast.read(self.geo.state_start + i * self.geo.state_blocks, &mut b, None).await?;
            if let Some(s) = StateSlot::decode(&b, self.geo.containers()) {
                if best.as_ref().is_none_or(|x| s.generation > x.generation) {
                    best = Some(s);
                }
            }
        }
        Ok(best)
    }

    async fn block_sid(&self, pba: u32) -> DevResult<Option<u64>> {
        let mut data = vec![0u8; self.bs()];
        let mut md = vec![0u8; self.mdb()];
        self.read_with_md(pba, &mut data, &mut md).await?;
        Ok(Record::decode(&md).filter(|r| r.kind == Kind::Data).map(|r| r.sid))
    }

    pub(crate) async fn recover(self: &Arc<Self>) -> DevResult<RecoveryReport> {
        let mode = self.opts.recovery;
        let g = self.geo.clone();
        let bs = self.bs();
        let mut rep = RecoveryReport { mode: Some(mode), ..Default::default() };
        let mut tm = Timer { t: now_ns(), rep: &mut rep };

        let mut b = vec![0u8; bs];
        self.fast.read(0, &mut b, None).await?;
        g.check_superblock(&b)?;
        tm.step("read_superblock", String::new());

        // Naive recovery does not trust the slot's contents, but the slot it writes at the end
        // must be newer than any slot on the device, or a later recovery would pick a stale one.
        let newest = self.load_slot().await?;
        let last_generation = newest.as_ref().map_or(0, |s| s.generation);
        let slot = if mode == RecoveryMode::Naive { None } else { newest };
        if mode != RecoveryMode::Naive && slot.is_none() {
            return Err(DevError::Invalid(
                "csal: no whole state slot on the fast device (recovery = \"naive\" scans \
                 without one)"
                    .into(),
            ));
        }
        tm.step(
            "load_state",
            slot.as_ref().map_or(String::new(), |s| {
                format!(
                    "generation {}, checkpoint SID {}, clean {}",
                    s.generation, s.ckpt_sid, s.clean
                )
            }),
        );

        // Clean shutdown: the metadata region is the state, as it is.
        if let Some(s) = slot.as_ref().filter(|s| s.clean) {
            tm.rep.clean = true;
            let bits = self.read_bitmaps().await?;
            {
                let mut st = self.st.lock();
                st.generation = s.generation;
                st.ckpt_sid = s.ckpt_sid;
                st.next_sid = s.next_sid;
                st.bitmap_generation = s.bitmap_generation;
                for (i, &(cs, sid)) in s.containers.iter().enumerate() {
                    let c = &mut st.containers[i];
                    c.state = if cs == CState::Released { CState::Free } else { cs };
                    c.sid = sid;
                    c.top_sid = s.top_sids[i];
                    c.wp = if cs == CState::Closed { g.capacity(i) } else { 0 };
                }
                for (i, w) in bits.iter().enumerate() {
                    st.valid_bits[i] = *w;
                }
                for i in 0..g.containers() {
                    let first = g.first_pba(i);
                    let n = (0..g.capacity(i)).filter(|&o| st.bit(first + o)).count() as u64;
                    st.containers[i].valid = n;
                }
            }
            tm.step("load_bitmaps", String::new());
            let _g = self.meta.lock(0).await;
            // Not clean any more: a crash from now on must recover.
            self.persist_state(false).await?;
            self.fast.flush().await?;
            drop(_g);
            tm.step("write_checkpoint", String::new());
            return Ok(rep);
        }

        // Which containers to read, and how.
        let n = g.containers();
        let mut csid = vec![0u64; n];
        // Each container's top SID (the largest record SID in it), from the slot, raised by
        // what is found in it.
        let mut ctop = vec![0u64; n];
        let mut cstate = vec![CState::Free; n];
        let mut found: Vec<Vec<Found>> = vec![Vec::new(); n];
        let mut max_sid = 0u64;
        let mut table: Vec<u32>;
        let ckpt_sid = slot.as_ref().map_or(0, |s| s.ckpt_sid);
        match mode {
            RecoveryMode::Naive => {
                for c in 0..n {
                    let recs = self.scan_container(c).await?;
                    tm.rep.blocks_scanned += g.capacity(c);
                    let top = recs.iter().map(|(cs, _)| *cs).max();
                    if let Some(top) = top {
                        csid[c] = top;
                        cstate[c] = CState::Closed;
                        found[c] =
                            recs.into_iter().filter(|(cs, _)| *cs == top).map(|(_, f)| f).collect();
                    }
                }
                let blocks = tm.rep.blocks_scanned;
                tm.step("scan_all_blocks", format!("{blocks} blocks"));
                table = vec![UNMAPPED; g.user_blocks as usize];
            }
            RecoveryMode::P2l | RecoveryMode::Checkpoint => {
                let s = slot.as_ref().unwrap();
                let mut open = Vec::new();
                for c in 0..n {
                    let (cs, sid) = s.containers[c];
                    csid[c] = sid;
                    ctop[c] = s.top_sids[c];
                    cstate[c] = cs;
                    if cs == CState::Free {
                        continue;
                    }
                    // A closed container can hold a record at or above the checkpoint SID when
                    // its own SID is (it was written after the checkpoint), or when a newer
                    // record was moved into it: its top SID says so.
                    let wanted =
                        mode == RecoveryMode::P2l || cs == CState::Open || ctop[c] >= ckpt_sid;
                    if !wanted {
                        continue;
                    }
                    if cs == CState::Open {
                        open.push(c);
                        continue;
                    }
                    match self.read_p2l(c, sid).await? {
                        Some(entries) => {
                            tm.rep.p2l_entries += entries.len() as u64;
                            found[c] = entries
                                .iter()
                                .enumerate()
                                .filter(|(_, e)| e.sid != 0 && (e.lba as u64) < g.user_blocks)
                                .map(|(i, e)| Found {
                                    pba: (g.first_pba(c) + i as u64) as u32,
                                    sid: e.sid,
                                    lba: e.lba as u64,
                                    trim: e.trim,
                                    origin: e.origin,
                                })
                                .collect();
                        }
                        // A closed container whose table did not survive is scanned.
                        None => open.push(c),
                    }
                }
                let entries = tm.rep.p2l_entries;
                tm.step("read_p2l", format!("{entries} entries"));
                for &c in &open {
                    let recs = self.scan_container(c).await?;
                    tm.rep.blocks_scanned += g.capacity(c);
                    found[c] =
                        recs.into_iter().filter(|(cs, _)| *cs == csid[c]).map(|(_, f)| f).collect();
                }
                let blocks = tm.rep.blocks_scanned;
                tm.step("scan_open", format!("{} containers, {blocks} blocks", open.len()));
                if mode == RecoveryMode::Checkpoint {
                    table = Vec::with_capacity(g.l2p_pages as usize * L2P_PAGE_ENTRIES);
                    let mut p = 0;
                    while p < g.l2p_pages {
                        let k = (g.l2p_pages - p).min(64);
                        let mut b = vec![0u8; k as usize * bs];
                        self.fast.read(g.l2p_start + p, &mut b, None).await?;
                        table.extend(decode_page(&b));
                        p += k;
                    }
                    table.truncate(g.user_blocks as usize);
                    tm.rep.l2p_pages_read = g.l2p_pages;
                    self.c.l2p_page_reads.add(g.l2p_pages);
                    tm.step("load_l2p", format!("{} pages", g.l2p_pages));
                } else {
                    table = vec![UNMAPPED; g.user_blocks as usize];
                }
            }
        }
        for f in found.iter().flatten() {
            max_sid = max_sid.max(f.sid);
        }
        for &s in &csid {
            max_sid = max_sid.max(s);
        }

        // Resolve: data first, then trims against what won.
        let is_zoned = |pba: u32| g.is_zone(g.container_of(pba));
        let replay_floor = if mode == RecoveryMode::Checkpoint { ckpt_sid } else { 0 };
        let mut sid_of: HashMap<u32, u64> = HashMap::new();
        for f in found.iter().flatten().filter(|f| f.trim == 0) {
            sid_of.insert(f.pba, f.sid);
        }
        let mut conflicts = 0u64;
        // The current winner's candidate (its SID from what was found, or from its block).
        for f in found.iter().flatten().filter(|f| f.trim == 0 && f.sid >= replay_floor) {
            let cur = table[f.lba as usize];
            let new = Candidate { sid: f.sid, pba: f.pba, zoned: is_zoned(f.pba) };
            if cur == UNMAPPED {
                table[f.lba as usize] = f.pba;
                continue;
            }
            if cur == f.pba {
                continue;
            }
            conflicts += 1;
            let cur_sid = match sid_of.get(&cur) {
                Some(&s) => Some(s),
                None => self.block_sid(cur).await?,
            };
            let keep_new = match cur_sid {
                Some(s) => resolve(&new, &Candidate { sid: s, pba: cur, zoned: is_zoned(cur) }),
                None => true,
            };
            if keep_new {
                table[f.lba as usize] = f.pba;
            }
        }
        let mut trim_places = Vec::new();
        for f in found.iter().flatten().filter(|f| f.trim > 0) {
            trim_places.push(f.pba);
            if f.sid < replay_floor {
                continue;
            }
            for l in f.lba..(f.lba + f.trim as u64).min(g.user_blocks) {
                let cur = table[l as usize];
                if cur == UNMAPPED {
                    continue;
                }
                let cur_sid = match sid_of.get(&cur) {
                    Some(&s) => Some(s),
                    None => self.block_sid(cur).await?,
                };
                let d = Candidate { sid: cur_sid.unwrap_or(0), pba: cur, zoned: is_zoned(cur) };
                if trim_kills(f.sid, f.origin, &d) {
                    table[l as usize] = UNMAPPED;
                }
            }
        }
        tm.rep.conflicts = conflicts;
        tm.step("resolve", format!("{conflicts} conflicts"));

        // Validity: what the L2P maps, and the trim records found (or, for containers not
        // read, the bitmaps of the last checkpoint, which only over-estimate: a bit set on a
        // block nothing maps costs compaction a read, never data).
        let persisted =
            if mode == RecoveryMode::Checkpoint { Some(self.read_bitmaps().await?) } else { None };
        {
            let mut st = self.st.lock();
            for c in 0..n {
                let ch = &mut st.containers[c];
                ch.sid = csid[c];
                let found_top = found[c].iter().map(|f| f.sid).max().unwrap_or(0);
                ch.top_sid = ctop[c].max(csid[c]).max(found_top);
                ch.state = match cstate[c] {
                    CState::Free => CState::Free,
                    _ => CState::Closed,
                };
                ch.wp = if ch.state == CState::Free { 0 } else { g.capacity(c) };
                ch.valid = 0;
            }
            st.valid_bits.iter_mut().for_each(|w| *w = 0);
            for &p in table.iter().filter(|&&p| p != UNMAPPED) {
                st.set_valid(&g, p as u64, true);
            }
            for &p in &trim_places {
                st.set_valid(&g, p as u64, true);
            }
            if let Some(bits) = persisted {
                for (c, &was) in cstate.iter().enumerate() {
                    if st.containers[c].state != CState::Closed || was == CState::Open {
                        continue;
                    }
                    let first = g.first_pba(c);
                    for o in 0..g.capacity(c) {
                        let p = first + o;
                        if bits[(p / 64) as usize] & (1 << (p % 64)) != 0 {
                            st.set_valid(&g, p, true);
                        }
                    }
                }
            }
            st.next_sid = slot.as_ref().map_or(1, |s| s.next_sid).max(max_sid + 1);
            st.generation = last_generation;
        }
        tm.step("rebuild_validity", String::new());

        // Containers that were open: their P2L from what was found, zones finished.
        let reports =
            self.zoned.zone(ZoneCommand::Report { first_zone: 0, max_zones: g.zones }).await;
        let zone_states: Vec<ZoneState> = match reports {
            Ok(flashrig_blockdev::ZoneReply::Zones(z)) => z.iter().map(|d| d.state).collect(),
            _ => Vec::new(),
        };
        let mut closed_now = 0;
        for c in 0..n {
            let was_open = cstate[c] == CState::Open
                || (mode == RecoveryMode::Naive && cstate[c] == CState::Closed);
            if g.is_zone(c) && cstate[c] != CState::Free {
                let z = g.zone_no(c);
                if matches!(
                    zone_states.get(z as usize),
                    Some(ZoneState::ImplicitOpen | ZoneState::ExplicitOpen | ZoneState::Closed)
                ) {
                    self.zoned.zone(ZoneCommand::Finish { zone: z }).await?;
                    self.c.zone_finishes.inc();
                }
            }
            if was_open {
                let cap = g.capacity(c) as usize;
                let mut p2l = vec![P2lEntry::default(); cap];
                let first = g.first_pba(c);
                for f in &found[c] {
                    p2l[(f.pba as u64 - first) as usize] =
                        P2lEntry { sid: f.sid, lba: f.lba as u32, trim: f.trim, origin: f.origin };
                }
                self.write_p2l(c, csid[c], &p2l).await?;
                closed_now += 1;
            }
        }
        tm.step("close_open", format!("{closed_now} containers"));

        // Write the rebuilt L2P whole, then a checkpoint (no container is open now).
        let mut p = 0;
        while p < g.l2p_pages {
            let k = (g.l2p_pages - p).min(64);
            let mut b = Vec::with_capacity(k as usize * bs);
            for q in p..p + k {
                let lo = (q as usize) * L2P_PAGE_ENTRIES;
                let mut e = vec![UNMAPPED; L2P_PAGE_ENTRIES];
                let hi = (lo + L2P_PAGE_ENTRIES).min(table.len());
                if lo < hi {
                    e[..hi - lo].copy_from_slice(&table[lo..hi]);
                }
                b.extend(encode_page(&e, bs));
            }
            self.fast.write(g.l2p_start + p, &b, None, WriteHints::NONE).await?;
            self.c.l2p_page_writes.add(k);
            p += k;
        }
        {
            let _g = self.meta.lock(0).await;
            self.flush_members().await?;
            let bits = self.st.lock().valid_bits.clone();
            self.write_bitmaps(&bits).await?;
            self.fast.flush().await?;
            {
                let mut st = self.st.lock();
                st.ckpt_sid = st.next_sid;
                st.bitmap_generation = st.generation + 1;
            }
            self.persist_state(false).await?;
            self.fast.flush().await?;
        }
        tm.step("write_checkpoint", String::new());
        Ok(rep)
    }

    pub(crate) async fn read_bitmaps(&self) -> DevResult<Vec<u64>> {
        let mut b = vec![0u8; self.geo.bitmap_blocks as usize * self.bs()];
        self.fast.read(self.geo.bitmap_start, &mut b, None).await?;
        let words = self.geo.total_pba().div_ceil(64) as usize;
        Ok((0..words)
            .map(|i| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap()))
            .collect())
    }

    /// Every zone's number, whether it is a GC zone... (see [`super::Csal::zone_tenants`]).
    pub(crate) async fn zone_tenants(&self) -> DevResult<Vec<(u64, bool, Vec<u16>)>> {
        let g = &self.geo;
        let mut out = Vec::new();
        for c in g.chunks as usize..g.containers() {
            let (first, wp) = {
                let st = self.st.lock();
                if st.containers[c].state == CState::Free {
                    continue;
                }
                (g.first_pba(c), st.containers[c].wp)
            };
            let mut tenants = Vec::new();
            let bs = self.bs();
            let mdb = self.mdb();
            for o in 0..wp.min(g.capacity(c)) {
                if !self.st.lock().bit(first + o) {
                    continue;
                }
                let mut d = vec![0u8; bs];
                let mut md = vec![0u8; mdb];
                let (dev, at) = self.dev_of((first + o) as u32);
                dev.read(at, &mut d, Some(&mut md)).await?;
                if let Some(r) = Record::decode(&md) {
                    tenants.push(r.tenant);
                }
            }
            let gc = self.st.lock().streams.iter().any(|(s, (z, _))| *z == c && s.gc);
            out.push((g.zone_no(c), gc, tenants));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(sid: u64, pba: u32, zoned: bool) -> Candidate {
        Candidate { sid, pba, zoned }
    }

    /// Case 1: an update in the open chunk beats an older copy compaction put in a zone.
    #[test]
    fn highest_sid_wins() {
        let newer = cand(9, 10, false);
        let older = cand(4, 5000, true);
        assert!(resolve(&newer, &older));
        assert!(!resolve(&older, &newer));
    }

    /// Case 2: a crash during compaction leaves the same block (same SID) in a chunk and a
    /// zone: the same data; the zone copy is kept, whichever is met first.
    #[test]
    fn same_sid_on_different_devices_is_the_same_data() {
        let chunk = cand(7, 100, false);
        let zone = cand(7, 9000, true);
        assert!(resolve(&zone, &chunk));
        assert!(!resolve(&chunk, &zone));
    }

    /// Case 3: two writes of one LBA in one chunk: the later one (larger PBA) wins.
    #[test]
    fn same_sid_same_chunk_largest_pba_wins() {
        let first = cand(3, 40, false);
        let second = cand(3, 41, false);
        assert!(resolve(&second, &first));
        assert!(!resolve(&first, &second));
    }

    #[test]
    fn trims_kill_older_writes_only() {
        // A trim at PBA 50 of SID 3 kills older SIDs and earlier places of its own chunk.
        assert!(trim_kills(3, 50, &cand(2, 10_000, true)));
        assert!(trim_kills(3, 50, &cand(3, 49, false)));
        assert!(!trim_kills(3, 50, &cand(3, 51, false)));
        // A same-SID copy in a zone was moved after the chunk closed: written after the trim.
        assert!(!trim_kills(3, 50, &cand(3, 7000, true)));
        assert!(!trim_kills(3, 50, &cand(4, 1, false)));
    }
}
