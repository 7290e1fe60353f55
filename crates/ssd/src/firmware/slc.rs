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

use flashrig_blockdev::DevResult;

use super::ftl::{Line, LineState, PageMap};
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
    /// Evicts one SLC line at `t_ns`; false when there is no closed SLC line.
    pub(super) fn evict_one(&mut self, t_ns: u64) -> DevResult<bool> {
        let lines = &self.lines;
        let mut cands = (0..self.layout.slc_lines).filter(|&l| {
            let line = &lines[l as usize];
            line.state == LineState::Closed
        });
        let Some(victim) = self.evictor.choose(lines, &mut cands) else { return Ok(false) };
        // Every valid unit of the victim moves, the transient ones included.
        let transient = self.lines[victim as usize].transient as u64;
        let moved = self.relocate_and_erase(t_ns, victim)?;
        self.counters.slc_evictions += moved;
        self.counters.slc_evicted_transient += transient;
        self.counters.slc_evicted_lines += 1;
        Ok(true)
    }
}
