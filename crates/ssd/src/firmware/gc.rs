//! Garbage collection of the dense area: pick a victim line, move its valid units to the
//! relocation stream, erase it.
//!
//! Victim choice is a [`VictimPolicy`]; greedy and FIFO (the thesis' LRW) are here, and the
//! validation report compares both with their analytic write amplification.

use flashrig_blockdev::DevResult;

use super::ftl::{IuWrite, Line, LineState, PageMap, Stream};
use crate::config::GcPolicy;
use crate::media::compacted::COMPACTED_LPN;
use crate::media::store::FLAG_TRANSIENT;

/// Chooses the line to collect among closed lines of one area.
pub trait VictimPolicy: Send {
    /// The victim among `candidates` (indices into `lines`), or `None` to collect nothing.
    fn choose(&self, lines: &[Line], candidates: &mut dyn Iterator<Item = u32>) -> Option<u32>;
}

/// The line with the fewest valid units; ties go to the line closed first.
pub struct Greedy;

impl VictimPolicy for Greedy {
    fn choose(&self, lines: &[Line], candidates: &mut dyn Iterator<Item = u32>) -> Option<u32> {
        candidates.min_by_key(|&l| (lines[l as usize].valid, lines[l as usize].closed_seq))
    }
}

/// The line closed first (least recently written), whatever its valid count.
pub struct Fifo;

impl VictimPolicy for Fifo {
    fn choose(&self, lines: &[Line], candidates: &mut dyn Iterator<Item = u32>) -> Option<u32> {
        candidates.min_by_key(|&l| lines[l as usize].closed_seq)
    }
}

pub fn policy(p: GcPolicy) -> Box<dyn VictimPolicy> {
    match p {
        GcPolicy::Greedy => Box::new(Greedy),
        GcPolicy::Fifo => Box::new(Fifo),
    }
}

impl PageMap {
    /// Collects one dense line at `t_ns`. Returns false when no closed line has anything to
    /// reclaim.
    pub(super) fn collect_one(&mut self, t_ns: u64, background: bool) -> DevResult<bool> {
        let full = self.layout.slots_per_line_native;
        let lines = &self.lines;
        let mut cands = (0..lines.len() as u32).filter(|&l| {
            let line = &lines[l as usize];
            !line.slc && line.state == LineState::Closed
        });
        let Some(victim) = self.gc_policy.choose(lines, &mut cands) else { return Ok(false) };
        if self.lines[victim as usize].valid >= full {
            // Everything in it is live: collecting would free nothing.
            return Ok(false);
        }
        self.in_gc = true;
        let result = self.relocate_and_erase(t_ns, victim);
        self.in_gc = false;
        let copied = result?;
        self.counters.gc_copies += copied;
        self.counters.gc_lines += 1;
        if background {
            self.counters.gc_background_lines += 1;
        }
        Ok(true)
    }

    /// Moves the valid units of `victim` to the relocation stream, a program's worth at a
    /// time (read, then program, as a controller pipelines GC), and erases it; returns how
    /// many units moved.
    pub(super) fn relocate_and_erase(&mut self, t_ns: u64, victim: u32) -> DevResult<u64> {
        let r = self.relocate(t_ns, victim, usize::MAX)?;
        self.erase_line(r.done, victim);
        Ok(r.moved)
    }

    /// Moves the first `limit` valid units of `victim` (in slot order; all of them with
    /// `usize::MAX`) to the relocation stream, a program's worth at a time, each read issued
    /// at `t_ns` and its program when the read is done. The victim is not erased.
    pub(super) fn relocate(
        &mut self,
        t_ns: u64,
        victim: u32,
        limit: usize,
    ) -> DevResult<Relocated> {
        if self.mv {
            return self.relocate_mv(t_ns, victim, limit);
        }
        let mut slots = std::mem::take(&mut self.reloc_slots);
        let mut ius = std::mem::take(&mut self.reloc_ius);
        slots.clear();
        if let Some(st) = self.lines[victim as usize].store.as_ref() {
            slots.extend(st.valid_slots().take(limit));
        }
        let per = self.layout.slots_per_page as usize;
        let mut r = Relocated { moved: slots.len() as u64, transient: 0, done: t_ns };
        let mut result = Ok(());
        for group in slots.chunks(per) {
            ius.clear();
            let read_done = self.read_for_relocation(t_ns, victim, group, &mut ius);
            if let Err(e) = self.program_relocated(read_done, &mut ius, &mut r) {
                result = Err(e);
                break;
            }
        }
        self.reloc_slots = slots;
        self.reloc_ius = ius;
        result.map(|()| r)
    }
}

impl PageMap {
    /// Programs the relocated units `ius` from `start` into the relocation stream, counting
    /// the transient ones and the completion in `r`.
    fn program_relocated(
        &mut self,
        start: u64,
        ius: &mut Vec<IuWrite>,
        r: &mut Relocated,
    ) -> DevResult<()> {
        r.transient += ius.iter().filter(|w| w.flags & FLAG_TRANSIENT != 0).count() as u64;
        let done = self.program_stream(start, Stream::Relocate, ius.drain(..))?;
        r.done = r.done.max(done);
        Ok(())
    }

    /// [`Self::relocate`] for MV-FTL: a slot of a unit with a version chain is not copied on
    /// its own; the unit's versions are read and merged into one whole unit, whose program
    /// supersedes every version (in this line and elsewhere). A compacted page (§3.3) is not
    /// copied either: each unit still using one of its sections is merged, and the page goes
    /// stale with the last of them (docs/waflash.md says why it is not moved whole). The slots are taken up front, so
    /// each is checked again when its turn comes: an earlier merge (of this call, or of GC
    /// that the relocation stream's allocation ran) may have made it stale, and a unit
    /// already merged in the batch being gathered is skipped. Units are gathered until a
    /// program's worth is read, so merges do not leave pages half empty.
    fn relocate_mv(&mut self, t_ns: u64, victim: u32, limit: usize) -> DevResult<Relocated> {
        let mut slots = std::mem::take(&mut self.reloc_slots);
        let mut ius = std::mem::take(&mut self.reloc_ius);
        slots.clear();
        if let Some(st) = self.lines[victim as usize].store.as_ref() {
            slots.extend(st.valid_slots().take(limit));
        }
        let per = self.layout.slots_per_page as usize;
        let mut r = Relocated { moved: 0, transient: 0, done: t_ns };
        // The batch: plain slots of the victim (read together, each page sensed once) and
        // merged units (read when gathered), and when the merged units' reads are done.
        let mut plain: Vec<u32> = Vec::with_capacity(per);
        let mut merged: Vec<IuWrite> = Vec::with_capacity(per);
        let mut merged_done = t_ns;
        let mut result = Ok(());
        let mut i = 0;
        while i <= slots.len() {
            let last = i == slots.len();
            if !last {
                let s = slots[i];
                i += 1;
                let st = self.lines[victim as usize].store.as_ref().expect("victim has a store");
                let lpn = st.lpn[s as usize];
                if !st.is_valid(s) || merged.iter().any(|w| w.lpn == lpn) {
                    continue;
                }
                // The units to merge: a chained unit's, or every unit still using a section
                // of a compacted page (WAFLASH §3.3), which is never copied whole.
                let users: Vec<u32> = if lpn == COMPACTED_LPN {
                    let ppa = self.layout.ppa(victim, s);
                    let table = st.compacted_of(s).map_or(&[][..], |c| &c.sections[..]);
                    let lpns: Vec<u32> = table.iter().map(|x| x.lpn).collect();
                    lpns.into_iter()
                        .filter(|&u| self.uses(u, ppa) && !merged.iter().any(|w| w.lpn == u))
                        .collect()
                } else if self.chains.contains_key(&lpn) {
                    vec![lpn]
                } else {
                    plain.push(s);
                    Vec::new()
                };
                for u in users {
                    match self.read_merged(t_ns, u) {
                        Ok((w, d)) => {
                            merged.push(w);
                            merged_done = merged_done.max(d);
                        }
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
                if result.is_err() {
                    break;
                }
                if plain.len() + merged.len() < per {
                    continue;
                }
            } else {
                i += 1;
                if plain.is_empty() && merged.is_empty() {
                    break;
                }
            }
            ius.clear();
            let read_done = self.read_for_relocation(t_ns, victim, &plain, &mut ius);
            ius.append(&mut merged);
            plain.clear();
            r.moved += ius.len() as u64;
            let start = read_done.max(merged_done);
            merged_done = t_ns;
            if let Err(e) = self.program_relocated(start, &mut ius, &mut r) {
                result = Err(e);
                break;
            }
        }
        self.reloc_slots = slots;
        self.reloc_ius = ius;
        result.map(|()| r)
    }
}

/// What [`PageMap::relocate`] did.
#[derive(Clone, Copy, Debug)]
pub(super) struct Relocated {
    /// Units moved.
    pub moved: u64,
    /// Of those, units written with the transient hint.
    pub transient: u64,
    /// When the last program is done (the time it was issued when nothing moved).
    pub done: u64,
}
