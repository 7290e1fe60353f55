//! The write-in-place firmware (`firmware.ftl_policy = "in_place"`): [`InPlaceMap`], the
//! [`Ftl`] of a device whose medium is overwritten where it lies, as 3D XPoint is.
//!
//! NAND cannot be programmed twice without an erase, so a NAND SSD writes out of place and
//! must garbage-collect. 3D XPoint (Intel Optane, the P5800X CSAL caches on) stores a bit as
//! the resistance of a cell, is bit-addressable and is rewritten without an erase, so the
//! drive needs neither a log nor GC (Wikipedia, "3D XPoint": "byte-addressable, techniques
//! such as read-modify-write and caching used to enhance traditional SSDs are not needed";
//! Yang, Li and Lilja, "Exploring Performance Characteristics of the Optane 3D Xpoint
//! Storage Technology", TOMPECS 2020, jaffer-thesis-2023.txt ref. [195]). Modelled with the
//! page map, such a drive would pay greedy GC copies the real one never makes.
//!
//! The mapping is arithmetic, like the zoned firmware's: unit `lpn` always lives in slot
//! `lpn % slots_per_line` of line `lpn / slots_per_line`, and a line's slots stripe over
//! the planes as the page map's lines do (channel fastest), so consecutive units spread over
//! every channel. A write programs its slot directly; a partial unit is first completed from
//! the unit's current content (a read-modify-write, counted in `rmw_reads`). Nothing is
//! volatile: the controller holds no mapping table, a trim is recorded in the slot's
//! metadata at once, and after a power loss everything programmed is where it was.
//!
//! The lines past the logical capacity (the over-provisioning of the preset) are never
//! used: on the real drive they are spare media for wear and defect management, which
//! flashrig does not model.

use flashrig_blockdev::{DevError, DevResult};

use super::ftl::{Ftl, FtlCounters, IuWrite, RecoveryStep};
use crate::config::SsdConfig;
use crate::media::store::{IuImage, LineStore, Shape, NO_LPN};
use crate::media::{Layout, NandTimer};

/// The recovery steps of a write-in-place device, in order.
pub const IN_PLACE_STEPS: [&str; 2] = ["count_units", "resume"];

pub struct InPlaceMap {
    layout: Layout,
    shape: Shape,
    timer: NandTimer,
    /// Each line's slots, allocated when the line is first written (a device that is never
    /// filled costs no memory for what it never holds).
    lines: Vec<Option<Box<LineStore>>>,
    seq: u64,
    full: u128,
    counters: FtlCounters,
}

impl InPlaceMap {
    /// `cfg` was validated: its mapping units are whole pages (`validate` refuses a page of
    /// several units, which would need a page read-modify-write per unit).
    pub fn new(cfg: &SsdConfig, layout: Layout, shape: Shape) -> InPlaceMap {
        let lines = layout.logical_ius.div_ceil(layout.slots_per_line_native as u64) as usize;
        InPlaceMap {
            timer: NandTimer::new(&cfg.nand, layout.channels, layout.planes),
            lines: (0..lines).map(|_| None).collect(),
            seq: 1,
            full: super::mask(0, layout.blocks_per_iu),
            counters: FtlCounters::default(),
            layout,
            shape,
        }
    }

    /// The line of unit `lpn` and its slot there.
    fn split(&self, lpn: u32) -> (usize, u32) {
        let per = self.layout.slots_per_line_native;
        ((lpn / per) as usize, lpn % per)
    }

    /// The unit's slot, if its line holds it now.
    fn holds(&self, lpn: u32) -> bool {
        let (l, s) = self.split(lpn);
        self.lines[l].as_ref().is_some_and(|st| st.lpn[s as usize] == lpn)
    }

    /// Senses the page(s) of `lpn`'s slot at `t_ns`; returns when the data is off the channel.
    fn read_slot(&mut self, t_ns: u64, lpn: u32) -> u64 {
        let (_, s) = self.split(lpn);
        let (first, pages) = self.layout.slot_pages(s);
        let bytes = self.layout.iu_bytes.min(self.layout.page_bytes);
        let mut done = t_ns;
        for p in first..first + pages {
            let a = self.layout.page_addr(p);
            let ty = self.layout.page_type(&a, false);
            done = done.max(self.timer.read(t_ns, a.channel, a.plane, ty, false, bytes));
        }
        self.counters.slot_reads += 1;
        done
    }

    /// Programs `lpn`'s slot at `t_ns` with `w`; returns when the program is done.
    fn program_slot(&mut self, t_ns: u64, w: &IuWrite) -> u64 {
        let (l, s) = self.split(w.lpn);
        let (first, pages) = self.layout.slot_pages(s);
        let page_bytes = self.layout.page_bytes;
        let mut done = t_ns;
        for p in first..first + pages {
            let a = self.layout.page_addr(p);
            let ty = self.layout.page_type(&a, false);
            done = done
                .max(self.timer.program(t_ns, a.channel, a.plane, ty, false, page_bytes).done_ns);
        }
        let (shape, per) = (self.shape, self.layout.slots_per_line_native);
        let st = self.lines[l].get_or_insert_with(|| Box::new(LineStore::new(shape, per)));
        st.put(s, w.lpn, w.seq, w.flags, &w.img);
        self.counters.host_slots += 1;
        done
    }
}

impl Ftl for InPlaceMap {
    fn layout(&self) -> &Layout {
        &self.layout
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn is_mapped(&self, lpn: u32) -> bool {
        self.holds(lpn)
    }

    fn read_iu(&mut self, t_ns: u64, lpn: u32, _need: u128) -> DevResult<(Option<IuImage>, u64)> {
        let (l, s) = self.split(lpn);
        let Some(st) = self.lines[l].as_ref() else { return Ok((None, t_ns)) };
        match st.lpn[s as usize] {
            // Never written, or trimmed: reads as zeros without touching the medium.
            NO_LPN => Ok((None, t_ns)),
            owner if owner == lpn => {
                let img = st.get(s);
                Ok((Some(img), self.read_slot(t_ns, lpn)))
            }
            _ => {
                // The slot's metadata names another unit: the arithmetic mapping cannot do
                // that, so the medium is corrupt, and its bytes are not this unit's.
                self.counters.oob_mismatches += 1;
                Err(DevError::ReadMedia { lba: lpn as u64 * self.layout.blocks_per_iu as u64 })
            }
        }
    }

    /// Programs each unit in its own slot. Partial units are completed first, their reads all
    /// issued at `t_ns`, and the programs start when the last read is done (as the page map
    /// does for a write-back group).
    fn program(&mut self, t_ns: u64, ius: &mut Vec<IuWrite>) -> DevResult<u64> {
        let (full, shape) = (self.full, self.shape);
        let mut start = t_ns;
        for w in ius.iter_mut() {
            if w.present & full == full || !self.holds(w.lpn) {
                // A unit never written keeps zeros in its missing blocks.
                continue;
            }
            let (old, ready) = self.read_iu(t_ns, w.lpn, full & !w.present)?;
            self.counters.rmw_reads += 1;
            start = start.max(ready);
            let old = old.expect("a held unit reads back");
            for i in 0..self.layout.blocks_per_iu as usize {
                if w.present & (1u128 << i) == 0 {
                    w.img.copy_block_from(&shape, i, &old);
                }
            }
        }
        let mut done = start;
        for w in ius.drain(..) {
            done = done.max(self.program_slot(start, &w));
        }
        Ok(done)
    }

    /// Records in the slot's metadata that it holds nothing; durable at once, like the page
    /// map's trim records.
    fn trim(&mut self, lpn: u32, _seq: u64) {
        let (l, s) = self.split(lpn);
        if let Some(st) = self.lines[l].as_mut() {
            if st.lpn[s as usize] == lpn {
                st.lpn[s as usize] = NO_LPN;
            }
        }
    }

    /// Nothing to collect: an overwrite leaves no stale copy behind.
    fn background(&mut self, t_ns: u64) -> DevResult<()> {
        self.timer.set_now(t_ns);
        Ok(())
    }

    /// Nothing is volatile here: there is no mapping table, and with no DRAM buffer of its
    /// own the FTL has nothing staged (the controller's buffer is the controller's business).
    fn power_loss(&mut self) {}

    fn recover(&mut self, t_ns: u64) -> Vec<RecoveryStep> {
        let mut units = 0u64;
        for st in self.lines.iter().flatten() {
            units += st.lpn.iter().filter(|&&l| l != NO_LPN).count() as u64;
        }
        self.timer.reset_timelines(t_ns);
        vec![
            RecoveryStep {
                name: IN_PLACE_STEPS[0],
                detail: format!("{units} units in place (nothing to rebuild)"),
            },
            RecoveryStep { name: IN_PLACE_STEPS[1], detail: String::new() },
        ]
    }

    fn counters(&self) -> FtlCounters {
        self.counters.clone()
    }

    fn timer(&self) -> &NandTimer {
        &self.timer
    }

    fn plane_of(&self, lpn: u32) -> Option<u32> {
        if !self.holds(lpn) {
            return None;
        }
        let (_, s) = self.split(lpn);
        Some(self.layout.page_addr(self.layout.slot_pages(s).0).plane)
    }

    /// Nothing is ever erased.
    fn block_erase_counts(&self) -> Vec<u32> {
        vec![0; self.layout.lines as usize * self.layout.planes as usize]
    }
}
