//! NAND timing: one timeline per channel and per plane.
//!
//! Each resource keeps the time it next becomes free. An operation starts when both the time
//! it is issued and the resources it needs allow, and moves them forward (FEMU's and SSDSim's
//! "next available time" model). A program transfers the page over the channel, then holds
//! the plane for the program time; a read holds the plane for the read time, then transfers
//! the bytes over the channel; an erase holds the plane. Planes of a die run independently,
//! as multi-plane commands allow, and share the die's channel. This computes a command's
//! completion when it is submitted, so simulating one NAND operation costs a few additions,
//! not a scheduled event.

use crate::config::{CellType, Nand};

/// NAND operation counts, per cell mode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NandCounters {
    /// Page reads, indexed by [`CellType`] as `cell as usize` (SLC-mode reads under `Slc`).
    pub page_reads: [u64; 4],
    pub page_programs: [u64; 4],
    pub block_erases: u64,
    pub read_bytes: u64,
    pub program_bytes: u64,
}

pub struct NandTimer {
    channel_free_ns: Vec<u64>,
    plane_free_ns: Vec<u64>,
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
            channel_free_ns: vec![0; channels as usize],
            plane_free_ns: vec![0; planes as usize],
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

    /// Programs a page issued at `t_ns`; returns when it is done.
    pub fn program(
        &mut self,
        t_ns: u64,
        channel: u32,
        plane: u32,
        page_type: usize,
        slc: bool,
        bytes: u32,
    ) -> u64 {
        let xfer = self.xfer_ns(bytes);
        let ch = &mut self.channel_free_ns[channel as usize];
        let xfer_start = t_ns.max(*ch);
        *ch = xfer_start + xfer;
        let prog = if slc { self.slc_program_ns } else { self.program_ns[page_type] };
        let cell = self.cell_index(slc);
        let pl = &mut self.plane_free_ns[plane as usize];
        let start = (xfer_start + xfer).max(*pl);
        *pl = start + prog;
        let done = *pl;
        self.counters.page_programs[cell] += 1;
        self.counters.program_bytes += bytes as u64;
        done
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
        let pl = &mut self.plane_free_ns[plane as usize];
        let start = t_ns.max(*pl);
        *pl = start + sense;
        let sensed = *pl;
        let xfer = self.xfer_ns(bytes);
        let cell = self.cell_index(slc);
        let ch = &mut self.channel_free_ns[channel as usize];
        let xfer_start = sensed.max(*ch);
        *ch = xfer_start + xfer;
        let done = *ch;
        self.counters.page_reads[cell] += 1;
        self.counters.read_bytes += bytes as u64;
        done
    }

    /// Erases a block on `plane`; returns when done.
    pub fn erase(&mut self, t_ns: u64, plane: u32, slc: bool) -> u64 {
        let pl = &mut self.plane_free_ns[plane as usize];
        let start = t_ns.max(*pl);
        *pl = start + if slc { self.slc_erase_ns } else { self.erase_ns };
        self.counters.block_erases += 1;
        *pl
    }

    /// True when no plane or channel is busy at `t_ns`.
    pub fn idle_at(&self, t_ns: u64) -> bool {
        self.plane_free_ns.iter().all(|&f| f <= t_ns)
            && self.channel_free_ns.iter().all(|&f| f <= t_ns)
    }

    /// When the last queued operation on any plane or channel ends (the device is idle from
    /// then on until something new is issued).
    pub fn busy_until(&self) -> u64 {
        let planes = self.plane_free_ns.iter().copied().max().unwrap_or(0);
        planes.max(self.channel_free_ns.iter().copied().max().unwrap_or(0))
    }

    /// Forgets all queued work (power loss: the device restarts idle).
    pub fn reset_timelines(&mut self, t_ns: u64) {
        self.channel_free_ns.iter_mut().for_each(|f| *f = t_ns);
        self.plane_free_ns.iter_mut().for_each(|f| *f = t_ns);
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
        assert_eq!(t.program(0, 0, 0, 0, false, 100), 200);
        // Same plane: the transfer overlaps the first program, the program waits for it.
        assert_eq!(t.program(0, 0, 0, 1, false, 100), 400);
        // Other plane: waits only for the channel (free at 200).
        assert_eq!(t.program(0, 0, 1, 2, false, 100), 300 + 300);
        assert_eq!(t.counters.page_programs[CellType::Tlc as usize], 3);
    }

    #[test]
    fn reads_sense_then_transfer_and_slc_is_faster() {
        let mut t = timer();
        assert_eq!(t.read(0, 0, 0, 2, false, 10), 30 + 10);
        // SLC sense ends at 5, but the channel is busy until 40.
        assert_eq!(t.read(0, 0, 1, 0, true, 10), 50);
        assert_eq!(t.counters.page_reads[CellType::Slc as usize], 1);
        assert_eq!(t.erase(0, 1, true), 5 + 500);
        assert!(!t.idle_at(100));
        assert!(t.idle_at(10_000));
    }
}
