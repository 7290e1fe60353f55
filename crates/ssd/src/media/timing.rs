//! NAND timing: one timeline per channel and per plane.
//!
//! Each resource keeps the time it next becomes free, and the idle gaps before it that later
//! operations may still fill. An operation starts when both the time it is issued and the
//! resources it needs allow (FEMU's and SSDSim's "next available time" model), or earlier, in
//! a gap left idle ahead of it, when it fits there whole. A program transfers the page over
//! the channel, then holds the plane for the program time; a read holds the plane for the
//! read time, then transfers the bytes over the channel; an erase holds the plane. Planes of a
//! die run independently, as multi-plane commands allow, and share the die's channel. This
//! computes a command's completion when it is submitted, so simulating one NAND operation
//! costs a few additions and a short search, not a scheduled event.
//!
//! Why gaps: the firmware books some operations at a future time when a command is
//! submitted: a relocation's program when its read will be done, a conversion's parity
//! program when the engine will have computed it, an erase when the line's last relocation
//! program ends. A real controller issues such an operation only at that time, and the plane
//! serves whatever arrived in between. A timeline that only knows its next free time would
//! instead leave the plane idle until the future operation, and every host command submitted
//! meanwhile would queue behind it. Measured on the Fig. 11 ScalaAFA run (4+1, 64 KiB
//! sequential, at its conversion point), that lost 36% of every member's plane time (docs/ssd.md,
//! "NAND timing"). An operation placed in a gap must fit there whole, so it never delays an
//! operation already booked (whose completion time was already returned).

use crate::config::{CellType, Nand};

/// Idle gaps a timeline remembers; older ones are forgotten first (they are the least likely
/// to be reachable, since operations are never issued before the current command's time).
const MAX_GAPS: usize = 16;

/// One resource's schedule: when it is next free, and the idle gaps before that.
#[derive(Clone, Debug)]
struct Timeline {
    free_ns: u64,
    /// Idle intervals `[start, end)` before `free_ns`, in time order, non-overlapping.
    gaps: Vec<(u64, u64)>,
    /// At least the length of the longest gap, so an operation longer than every gap skips
    /// the search (exact after a search that found no room, an upper bound otherwise).
    longest_gap_ns: u64,
    /// The shortest operation booked so far: a gap shorter than it is not kept, since
    /// nothing this resource serves would fit.
    shortest_busy_ns: u64,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline { free_ns: 0, gaps: Vec::new(), longest_gap_ns: 0, shortest_busy_ns: u64::MAX }
    }
}

impl Timeline {
    /// Books `busy_ns` of this resource from `t_ns` on: in the first gap that holds it whole,
    /// else after everything booked. Returns when it starts, and whether it went into a gap.
    fn book(&mut self, t_ns: u64, busy_ns: u64, now_ns: u64) -> (u64, bool) {
        if busy_ns > 0 {
            self.shortest_busy_ns = self.shortest_busy_ns.min(busy_ns);
        }
        // Gaps lie before `free_ns`: an operation issued at or after it cannot use one.
        if busy_ns > 0 && busy_ns <= self.longest_gap_ns && t_ns < self.free_ns {
            // Gaps that end by the current command's time can never be used again.
            let stale = self.gaps.iter().take_while(|g| g.1 <= now_ns).count();
            self.gaps.drain(..stale);
            let mut longest = 0;
            for i in 0..self.gaps.len() {
                let (g0, g1) = self.gaps[i];
                let start = g0.max(t_ns);
                if start.saturating_add(busy_ns) <= g1 {
                    let end = start + busy_ns;
                    // What is left of the gap on either side, where something could still
                    // fit (the gap count stays within MAX_GAPS: the oldest goes first).
                    let min = self.shortest_busy_ns;
                    let left = (start - g0 >= min).then_some((g0, start));
                    let right = (g1 - end >= min).then_some((end, g1));
                    match (left, right) {
                        (Some(l), Some(r)) => {
                            self.gaps[i] = l;
                            self.gaps.insert(i + 1, r);
                            if self.gaps.len() > MAX_GAPS {
                                self.gaps.remove(0);
                            }
                        }
                        (Some(g), None) | (None, Some(g)) => self.gaps[i] = g,
                        (None, None) => {
                            self.gaps.remove(i);
                        }
                    }
                    return (start, true);
                }
                longest = longest.max(g1 - g0);
            }
            self.longest_gap_ns = longest;
        }
        let start = t_ns.max(self.free_ns);
        let gap_start = self.free_ns.max(now_ns);
        if start > gap_start && start - gap_start >= self.shortest_busy_ns {
            if self.gaps.len() == MAX_GAPS {
                self.gaps.remove(0);
            }
            self.gaps.push((gap_start, start));
            self.longest_gap_ns = self.longest_gap_ns.max(start - gap_start);
        }
        self.free_ns = start + busy_ns;
        (start, false)
    }

    fn reset(&mut self, t_ns: u64) {
        self.free_ns = t_ns;
        self.gaps.clear();
        self.longest_gap_ns = 0;
    }
}

/// NAND operation counts, per cell mode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NandCounters {
    /// Page reads, indexed by [`CellType`] as `cell as usize` (SLC-mode reads under `Slc`).
    pub page_reads: [u64; 4],
    pub page_programs: [u64; 4],
    pub block_erases: u64,
    pub read_bytes: u64,
    pub program_bytes: u64,
    /// Plane operations (sense, program, erase) that started in an idle gap left ahead of an
    /// operation booked for a later time, instead of after it.
    pub gap_fills: u64,
    /// Time planes spent sensing, programming and erasing, summed over planes.
    pub plane_busy_ns: u64,
    /// Page reads and programs (the flash sub-requests of SSDSim's channel queues), and the
    /// time each spent from its issue to its completion, summed: divided by a run's length
    /// and the channel count, the mean number of sub-requests queued or in service on a
    /// channel (Little's law; WAFLASH Fig. 14c).
    pub sub_requests: u64,
    pub sub_request_ns: u64,
}

/// When a page program booked on a plane runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramSpan {
    /// When the plane starts programming: the page is off the channel, in the die's page
    /// register, and the plane has finished what was booked on it before.
    pub start_ns: u64,
    /// When the program is done.
    pub done_ns: u64,
}

pub struct NandTimer {
    channels: Vec<Timeline>,
    planes: Vec<Timeline>,
    /// The time of the command being processed: nothing is issued before it, so gaps that
    /// end by it are dropped.
    now_ns: u64,
    native: CellType,
    read_ns: Vec<u64>,
    program_ns: Vec<u64>,
    erase_ns: u64,
    slc_read_ns: u64,
    slc_program_ns: u64,
    slc_erase_ns: u64,
    /// Picoseconds to move one byte over a channel (integer, so timing is exact and the same
    /// on every machine).
    channel_ps_per_byte: u64,
    pub counters: NandCounters,
}

impl NandTimer {
    pub fn new(nand: &Nand, channels: u32, planes: u32) -> Self {
        NandTimer {
            channels: vec![Timeline::default(); channels as usize],
            planes: vec![Timeline::default(); planes as usize],
            now_ns: 0,
            native: nand.cell,
            read_ns: nand.read_ns.clone(),
            program_ns: nand.program_ns.clone(),
            erase_ns: nand.erase_ns,
            slc_read_ns: nand.slc_read_ns,
            slc_program_ns: nand.slc_program_ns,
            slc_erase_ns: nand.slc_erase_ns,
            channel_ps_per_byte: (1e6 / nand.channel_mb_per_s).round() as u64,
            counters: NandCounters::default(),
        }
    }

    fn xfer_ns(&self, bytes: u32) -> u64 {
        (bytes as u64 * self.channel_ps_per_byte).div_ceil(1000)
    }

    fn cell_index(&self, slc: bool) -> usize {
        if slc {
            CellType::Slc as usize
        } else {
            self.native as usize
        }
    }

    /// Programs a page issued at `t_ns`; returns when the program starts and when it is done.
    pub fn program(
        &mut self,
        t_ns: u64,
        channel: u32,
        plane: u32,
        page_type: usize,
        slc: bool,
        bytes: u32,
    ) -> ProgramSpan {
        let xfer = self.xfer_ns(bytes);
        let now = self.now_ns;
        let (xfer_start, _) = self.channels[channel as usize].book(t_ns, xfer, now);
        let prog = if slc { self.slc_program_ns } else { self.program_ns[page_type] };
        let cell = self.cell_index(slc);
        let (start, filled) = self.planes[plane as usize].book(xfer_start + xfer, prog, now);
        self.counters.gap_fills += filled as u64;
        let done = start + prog;
        self.counters.plane_busy_ns += prog;
        self.counters.sub_requests += 1;
        self.counters.sub_request_ns += done.saturating_sub(t_ns);
        self.counters.page_programs[cell] += 1;
        self.counters.program_bytes += bytes as u64;
        ProgramSpan { start_ns: start, done_ns: done }
    }

    /// Reads `bytes` of a page issued at `t_ns`; returns when the bytes are off the channel.
    pub fn read(
        &mut self,
        t_ns: u64,
        channel: u32,
        plane: u32,
        page_type: usize,
        slc: bool,
        bytes: u32,
    ) -> u64 {
        let sense = if slc { self.slc_read_ns } else { self.read_ns[page_type] };
        let now = self.now_ns;
        let (start, filled) = self.planes[plane as usize].book(t_ns, sense, now);
        self.counters.gap_fills += filled as u64;
        let sensed = start + sense;
        self.counters.plane_busy_ns += sense;
        let xfer = self.xfer_ns(bytes);
        let cell = self.cell_index(slc);
        let (xfer_start, _) = self.channels[channel as usize].book(sensed, xfer, now);
        let done = xfer_start + xfer;
        self.counters.sub_requests += 1;
        self.counters.sub_request_ns += done.saturating_sub(t_ns);
        self.counters.page_reads[cell] += 1;
        self.counters.read_bytes += bytes as u64;
        done
    }

    /// Erases a block on `plane`; returns when done.
    pub fn erase(&mut self, t_ns: u64, plane: u32, slc: bool) -> u64 {
        let busy = if slc { self.slc_erase_ns } else { self.erase_ns };
        let (start, filled) = self.planes[plane as usize].book(t_ns, busy, self.now_ns);
        self.counters.gap_fills += filled as u64;
        self.counters.block_erases += 1;
        self.counters.plane_busy_ns += busy;
        start + busy
    }

    /// Tells the timer the time of the command being processed (commands arrive in time
    /// order, and every operation is issued at or after its command's time).
    pub fn set_now(&mut self, t_ns: u64) {
        self.now_ns = self.now_ns.max(t_ns);
    }

    /// True when no plane or channel is busy at `t_ns`.
    pub fn idle_at(&self, t_ns: u64) -> bool {
        self.planes.iter().all(|p| p.free_ns <= t_ns)
            && self.channels.iter().all(|c| c.free_ns <= t_ns)
    }

    /// Whether `plane` has work queued past `t_ns` (an operation issued there now would
    /// wait). Write-buffer policies read it to tell congested chips from idle ones.
    pub fn plane_busy_at(&self, plane: u32, t_ns: u64) -> bool {
        self.planes.get(plane as usize).is_some_and(|p| p.free_ns > t_ns)
    }

    /// When the last queued operation on any plane or channel ends (the device is idle from
    /// then on until something new is issued).
    pub fn busy_until(&self) -> u64 {
        let planes = self.planes.iter().map(|p| p.free_ns).max().unwrap_or(0);
        planes.max(self.channels.iter().map(|c| c.free_ns).max().unwrap_or(0))
    }

    /// Forgets all queued work (power loss: the device restarts idle).
    pub fn reset_timelines(&mut self, t_ns: u64) {
        self.channels.iter_mut().for_each(|c| c.reset(t_ns));
        self.planes.iter_mut().for_each(|p| p.reset(t_ns));
        self.now_ns = t_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timer() -> NandTimer {
        let nand = Nand {
            cell: CellType::Tlc,
            read_ns: vec![10, 20, 30],
            program_ns: vec![100, 200, 300],
            erase_ns: 1000,
            slc_read_ns: 5,
            slc_program_ns: 50,
            slc_erase_ns: 500,
            channel_mb_per_s: 1000.0, // 1 byte per ns
        };
        NandTimer::new(&nand, 1, 2)
    }

    #[test]
    fn programs_on_one_plane_queue_and_planes_overlap() {
        let mut t = timer();
        // 100 bytes: 100 ns of transfer, then 100 ns of L-page program.
        assert_eq!(t.program(0, 0, 0, 0, false, 100).done_ns, 200);
        // Same plane: the transfer overlaps the first program, the program waits for it.
        assert_eq!(t.program(0, 0, 0, 1, false, 100).done_ns, 400);
        // Other plane: waits only for the channel (free at 200).
        assert_eq!(t.program(0, 0, 1, 2, false, 100).done_ns, 300 + 300);
        assert_eq!(t.counters.page_programs[CellType::Tlc as usize], 3);
        // Three sub-requests, each in the system from 0 to its completion.
        assert_eq!(t.counters.sub_requests, 3);
        assert_eq!(t.counters.sub_request_ns, 200 + 400 + 600);
        // A read issued later counts from its issue.
        assert_eq!(t.read(1000, 0, 0, 0, false, 10), 1020);
        assert_eq!((t.counters.sub_requests, t.counters.sub_request_ns), (4, 1200 + 20));
    }

    #[test]
    fn reads_sense_then_transfer_and_slc_is_faster() {
        let mut t = timer();
        assert_eq!(t.read(0, 0, 0, 2, false, 10), 30 + 10);
        // SLC sense ends at 5; the channel is idle until the first read's transfer at 30, and
        // 10 ns of transfer fit there.
        assert_eq!(t.read(0, 0, 1, 0, true, 10), 15);
        // Another: sensed at 10 (its plane's sense ends at 5, then this one's), transfer in
        // the rest of the gap.
        assert_eq!(t.read(0, 0, 1, 0, true, 10), 25);
        // A third does not fit whole before 30 (25 + 10 > 30): it goes after the transfer
        // booked there.
        assert_eq!(t.read(0, 0, 1, 0, true, 10), 50);
        assert_eq!(t.counters.page_reads[CellType::Slc as usize], 3);
        assert_eq!(t.erase(0, 1, true), 15 + 500);
        assert!(!t.idle_at(100));
        assert!(t.idle_at(10_000));
        assert_eq!(t.counters.plane_busy_ns, 30 + 3 * 5 + 500);
    }

    #[test]
    fn an_operation_booked_for_later_leaves_a_gap_that_earlier_work_fills() {
        let mut t = timer();
        // A program issued for 1000 (a relocation's program when its read will be done):
        // plane 0 is idle before it.
        assert_eq!(t.program(1000, 0, 0, 0, false, 100).done_ns, 1200);
        // Work issued at 0 on the same plane fits in the gap and does not wait for it.
        assert_eq!(t.program(0, 0, 0, 0, false, 100).done_ns, 200);
        // A read issued at 0 senses at once (the program's data is still on the channel until
        // 100), then its transfer waits for the channel.
        assert_eq!(t.read(0, 0, 0, 0, false, 100), 200);
        assert_eq!(t.counters.gap_fills, 2);
        // What does not fit whole before 1000 goes after, so nothing booked earlier moves:
        // a TLC erase (1000 ns) from 200 would end at 1200, after the program booked at 1100.
        assert_eq!(t.erase(0, 0, false), 1200 + 1000);
        assert_eq!(t.counters.gap_fills, 2);
        // Gaps that end before the current command's time are gone: at 950, 100 ns of
        // program no longer fit before 1000.
        t.set_now(950);
        assert_eq!(t.program(950, 0, 0, 0, false, 100).done_ns, 2200 + 100);
        // A power loss forgets queued work and its gaps.
        t.reset_timelines(5000);
        assert_eq!(t.program(5000, 0, 0, 0, false, 100).done_ns, 5200);
    }
}
