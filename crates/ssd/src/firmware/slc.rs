//! The SLC cache's evictor: when free SLC lines run short, pick an SLC line, move its valid
//! units to the dense area, erase it.
//!
//! Victim choice is an [`Evictor`]: FIFO, greedy, and ScalaAFA's transient-aware score
//! (§5.5: `factor * invalid - transient`, so lines full of soon-to-die backup copies stay in
//! SLC and die there instead of being copied to the dense blocks).
//!
//! Where transient units land is the FTL's choice (`slc_transient_placement`): in the one open
//! SLC line with every other host write, or in SLC lines of their own, which gives the
//! evictor lines that are all transient or not at all. The counters `slc_evicted_transient`
//! and `slc_transient_died` say how many transient units it moved to the dense area and how
//! many died in SLC.
//!
//! How the evictor spends NAND time is `slc_eviction`: `inline` moves and erases a whole
//! victim when a host stream opens an SLC line and free lines are short, and that host program
//! queues behind all of it; `paced` (the default) chooses the victim at the same moment, lets
//! the host take the line, and moves the victim a bounded step after each host SLC program
//! ([`PageMap::pace_eviction`]) and in idle time ([`PageMap::evict_in_idle_time`]). A partly evicted victim stays a closed line whose unmoved
//! units are mapped there; moved units keep their sequence numbers, so after a power loss
//! recovery maps each unit to one of two identical copies, and the victim is chosen again.

use flashrig_blockdev::DevResult;

use super::ftl::{Line, LineState, PageMap, Stream};
use crate::config::EvictorPolicy;

pub trait Evictor: Send {
    fn choose(&self, lines: &[Line], candidates: &mut dyn Iterator<Item = u32>) -> Option<u32>;
}

/// The SLC line closed first.
pub struct FifoEvictor;

impl Evictor for FifoEvictor {
    fn choose(&self, lines: &[Line], candidates: &mut dyn Iterator<Item = u32>) -> Option<u32> {
        candidates.min_by_key(|&l| lines[l as usize].closed_seq)
    }
}

/// The SLC line with the fewest valid units.
pub struct GreedyEvictor;

impl Evictor for GreedyEvictor {
    fn choose(&self, lines: &[Line], candidates: &mut dyn Iterator<Item = u32>) -> Option<u32> {
        candidates.min_by_key(|&l| (lines[l as usize].valid, lines[l as usize].closed_seq))
    }
}

/// ScalaAFA §5.5: the highest `factor * invalid - transient`; ties go to the oldest line.
pub struct TransientEvictor {
    pub factor: f64,
}

impl TransientEvictor {
    pub fn score(&self, line: &Line) -> f64 {
        let invalid = line.wp.saturating_sub(line.valid) as f64;
        self.factor * invalid - line.transient as f64
    }
}

impl Evictor for TransientEvictor {
    fn choose(&self, lines: &[Line], candidates: &mut dyn Iterator<Item = u32>) -> Option<u32> {
        let mut best: Option<(f64, u64, u32)> = None;
        for l in candidates {
            let line = &lines[l as usize];
            let s = self.score(line);
            let better = match best {
                None => true,
                Some((bs, bseq, _)) => s > bs || (s == bs && line.closed_seq < bseq),
            };
            if better {
                best = Some((s, line.closed_seq, l));
            }
        }
        best.map(|(_, _, l)| l)
    }
}

pub fn evictor(p: EvictorPolicy, factor: f64) -> Box<dyn Evictor> {
    match p {
        EvictorPolicy::Fifo => Box::new(FifoEvictor),
        EvictorPolicy::Greedy => Box::new(GreedyEvictor),
        EvictorPolicy::Transient => Box::new(TransientEvictor { factor }),
    }
}

impl PageMap {
    /// The evictor's victim among the closed SLC lines (a line being paced out is never
    /// offered: it is the one in progress, finished before another is chosen).
    fn choose_victim(&self) -> Option<u32> {
        let lines = &self.lines;
        let busy = self.evicting;
        let mut cands = (0..self.layout.slc_lines)
            .filter(|&l| lines[l as usize].state == LineState::Closed && Some(l) != busy);
        self.evictor.choose(lines, &mut cands)
    }

    /// Evicts one SLC line at `t_ns`, all of it at once; false when there is no closed SLC
    /// line. With paced eviction this is the backstop when a host stream must open a line
    /// and free lines are short anyway: the victim in progress is finished first.
    pub(super) fn evict_one(&mut self, t_ns: u64) -> DevResult<bool> {
        let Some(victim) = self.evicting.or_else(|| self.choose_victim()) else {
            return Ok(false);
        };
        // Every valid unit of the victim moves, the transient ones included, and it is erased.
        self.evict_step(t_ns, victim, usize::MAX)?;
        Ok(true)
    }

    /// Paced eviction: chooses a victim when at most `slc_evict_free` SLC lines are free and
    /// none is in progress. Called when a host stream is about to open an SLC line: the same
    /// moment, and so the same candidates, at which inline eviction chooses its victim.
    pub(super) fn start_paced_eviction(&mut self) {
        if self.paced_eviction
            && self.evicting.is_none()
            && self.free_slc.len() as u32 <= self.slc_evict_free
        {
            self.evicting = self.choose_victim();
        }
    }

    /// Free SLC lines at or below which a host stream evicts before opening a line, all of the
    /// victim at once: `slc_evict_free` with inline eviction; with paced eviction one fewer
    /// (down to 0), because a paced victim is emptied while the host fills the line it opened
    /// with the last of the reserve. With `slc_evict_free = 0` paced eviction therefore
    /// behaves as inline.
    pub(super) fn slc_backstop_free(&self) -> u32 {
        if self.paced_eviction {
            self.slc_evict_free.saturating_sub(1)
        } else {
            self.slc_evict_free
        }
    }

    /// Host SLC slots that can surely be programmed before a host stream must open an SLC
    /// line with at most [`Self::slc_backstop_free`] lines free (where the backstop would
    /// evict inline): the fewest slots left in an open host SLC line (whichever stream fills
    /// first), plus a whole line per free line above the backstop.
    fn host_slc_budget(&self) -> u64 {
        let per_line = self.layout.slots_per_line(true) as u64;
        let left = [Stream::HostSlc, Stream::HostSlcTransient]
            .iter()
            .filter_map(|&s| self.open[s as usize])
            .map(|l| per_line.saturating_sub(self.lines[l as usize].wp as u64))
            .min()
            .unwrap_or(0);
        let spare = (self.free_slc.len() as u64).saturating_sub(self.slc_backstop_free() as u64);
        left + spare * per_line
    }

    /// One step of paced eviction at `t_ns`, after a host SLC program: moves
    /// `ceil(valid * P / budget)` units of the victim, rounded up to whole relocation
    /// programs (`P` units each), where `valid` is what the victim still holds, `P` the units
    /// of one program and `budget` the host slots left before the victim must be empty
    /// ([`Self::host_slc_budget`], at least `P`). Each host program of `P` units uses `P` of
    /// the budget and moves at least that share of the victim, so the victim is empty by the
    /// time the budget is used up (the last step, with a budget of `P` or less, moves all that
    /// is left). The docs (docs/ssd.md, "SLC cache") give the arithmetic.
    pub(super) fn pace_eviction(&mut self, t_ns: u64) -> DevResult<()> {
        let Some(victim) = self.evicting else { return Ok(()) };
        if self.idle_eviction {
            // Idle-time eviction leaves a victim it did not finish until the next idle gap.
            return Ok(());
        }
        let per = self.layout.slots_per_page as u64;
        let valid = self.lines[victim as usize].valid as u64;
        let budget = self.host_slc_budget().max(per);
        let quota = (valid * per).div_ceil(budget).next_multiple_of(per);
        self.evict_step(t_ns, victim, quota as usize)?;
        Ok(())
    }

    /// Moves up to `limit` valid units of `victim` at `t_ns` (the paced victim, or a whole
    /// inline one); when none is left, erases it (after the last program), counts the line
    /// and ends the paced eviction of it. Returns how many units moved.
    fn evict_step(&mut self, t_ns: u64, victim: u32, limit: usize) -> DevResult<u64> {
        let r = self.relocate(t_ns, victim, limit)?;
        self.counters.slc_evictions += r.moved;
        self.counters.slc_evicted_transient += r.transient;
        if self.lines[victim as usize].valid == 0 {
            self.erase_line(r.done, victim);
            self.counters.slc_evicted_lines += 1;
            self.evicting = None;
        }
        Ok(r.moved)
    }

    /// Eviction in idle time (a command arrived at `t_ns` and found every plane and channel
    /// idle): the victim in progress, if any, is moved a program's worth at a time from the
    /// moment the device went idle, until the NAND is busy up to `t_ns` or the victim is gone.
    /// With paced eviction a victim is only ever chosen when a host stream opens a line, so
    /// idle time changes no victim choice. With idle-time eviction (`slc_eviction = "idle"`)
    /// idle time is the only place it works: a finished victim is followed by the evictor's
    /// next choice while at most `slc_evict_free` SLC lines are free. The gap was empty on
    /// every timeline, so using it changes no earlier command's timing; the command at `t_ns`
    /// queues behind at most the last step (and the victim's erase, when that step finished
    /// it).
    pub(super) fn evict_in_idle_time(&mut self, t_ns: u64) -> DevResult<()> {
        if !(self.paced_eviction || self.idle_eviction) || !self.timer.idle_at(t_ns) {
            return Ok(());
        }
        let from = self.timer.busy_until();
        let per = self.layout.slots_per_page as usize;
        loop {
            if self.idle_eviction
                && self.evicting.is_none()
                && self.free_slc.len() as u32 <= self.slc_evict_free
            {
                self.evicting = self.choose_victim();
            }
            let Some(victim) = self.evicting else { break };
            if self.timer.busy_until() >= t_ns {
                break;
            }
            let moved = self.evict_step(from, victim, per)?;
            self.counters.slc_evicted_idle += moved;
        }
        Ok(())
    }
}
