//! The zoned namespace's firmware (NVMe ZNS): [`ZoneMap`], the [`Ftl`] of a device configured
//! with a `[zoned]` table.
//!
//! There is no page map and no garbage collection. Zone `z` owns one erase block on each of
//! `zone_planes` planes (block `z / plane_groups` of plane group `z % plane_groups`), and its
//! mapping units are programmed into those blocks in write-pointer order, striped over the
//! planes as a line is (channel fastest, then die, then plane), so a zone written alone uses
//! the parallelism of all its planes. Unit `k` of a zone is always slot `k` of its blocks: the
//! mapping is arithmetic, and the only per-zone state is how far the zone is programmed.
//!
//! NAND programs whole pages, and the host writes a zone a block at a time. Each zone stages
//! the units of its next program (a page, or one unit spanning pages) in controller DRAM and
//! programs them when the program is complete, when the zone reaches its capacity, or when it
//! is finished (the rest of the page padded). What is staged is volatile: power-loss
//! protection saves it on the capacitors' energy; without it, a flush (or a FUA write) saves
//! each zone's staged units to a reserved SLC area (one SLC page program on the zone's next
//! plane, counted in `zone_staged_saves`; the area is not modelled as capacity, like the page
//! map's trim records), and a power loss keeps only what the last save held. The zone state
//! machine is [`flashrig_blockdev::zones::ZoneTable`], kept by the controller; after a power
//! loss the controller rebuilds it from [`Ftl::zone_media_state`].

use flashrig_blockdev::{DevError, DevResult};

use super::ftl::{Ftl, FtlCounters, IuWrite, RecoveryStep};
use crate::config::{SsdConfig, ZoneLayout};
use crate::media::store::{IuImage, LineStore, Shape, NO_LPN};
use crate::media::{Layout, NandTimer, PageAddr};

/// The OOB unit number of a padding slot (a program the host's units did not fill).
pub const ZONE_PAD_LPN: u32 = u32::MAX - 2;

/// The recovery steps of a zoned namespace, in order.
pub const ZONED_STEPS: [&str; 3] = ["scan_zones", "restore_staged", "resume"];

/// One zone's media and staging.
#[derive(Default)]
struct Zone {
    /// The zone's erase blocks (allocated at the first program, dropped by a reset).
    store: Option<Box<LineStore>>,
    /// Slots programmed on NAND, padding included.
    programmed: u32,
    /// Slots holding host units (the others of `programmed` are padding).
    host_slots: u32,
    /// Units staged in DRAM for the next program: slots `programmed..` in order; the last may
    /// be partial.
    staged: Vec<IuWrite>,
    /// What the last save of the staging holds (without power-loss protection, what survives
    /// a power loss); `None` when nothing was saved since the last program.
    saved: Option<Vec<IuWrite>>,
    /// The staging changed since the last save.
    dirty: bool,
    /// Finished by the host: durable (kept with the zone's metadata in the system area).
    finished: bool,
    erase_count: u32,
}

pub struct ZoneMap {
    layout: Layout,
    shape: Shape,
    timer: NandTimer,
    zl: ZoneLayout,
    /// Slots one program fills.
    per_program: u32,
    /// Slots a zone's blocks hold.
    zone_slots: u32,
    /// Slots of the zone's capacity.
    capacity_slots: u32,
    /// Mapping units from one zone's start to the next (the zone size).
    zone_units: u64,
    zones: Vec<Zone>,
    seq: u64,
    plp: bool,
    full: u128,
    counters: FtlCounters,
}

impl ZoneMap {
    pub fn new(cfg: &SsdConfig, layout: Layout, shape: Shape) -> ZoneMap {
        let zl = layout.zones.expect("a zoned configuration has a zone layout");
        let per_program = layout.slots_per_page;
        let zone_slots = zl.zone_planes * layout.pages_per_block_native * layout.slots_per_page
            / layout.pages_per_slot;
        let bpi = layout.blocks_per_iu as u64;
        ZoneMap {
            timer: NandTimer::new(&cfg.nand, layout.channels, layout.planes),
            zl,
            per_program,
            zone_slots,
            capacity_slots: (zl.zone_capacity_blocks / bpi) as u32,
            zone_units: zl.zone_blocks / bpi,
            zones: (0..zl.num_zones).map(|_| Zone::default()).collect(),
            seq: 1,
            plp: cfg.firmware.plp,
            full: if layout.blocks_per_iu >= 128 {
                u128::MAX
            } else {
                (1u128 << layout.blocks_per_iu) - 1
            },
            counters: FtlCounters::default(),
            layout,
            shape,
        }
    }

    /// The zone of unit `lpn` and the unit's index inside it.
    fn split(&self, lpn: u32) -> (usize, u32) {
        ((lpn as u64 / self.zone_units) as usize, (lpn as u64 % self.zone_units) as u32)
    }

    /// Where page `page` of zone `zone` is (pages numbered in fill order over its planes).
    fn page_addr(&self, zone: usize, page: u32) -> PageAddr {
        let group = (zone as u64 % self.zl.plane_groups as u64) as u32;
        let zp = self.zl.zone_planes;
        self.layout.unit_page_addr(group * zp + page % zp, page / zp)
    }

    /// Programs the staged units of `zone` at `t_ns`, padding the program they do not fill;
    /// returns when the write that completed the program may complete.
    ///
    /// With power-loss protection that is when the program starts: the page has left the
    /// staging for the die's page register, and should power fail the capacitors' energy
    /// finishes the program, as it saves the staging. Starting waits for the plane's earlier
    /// programs, so a host that writes faster than the NAND programs is still held back, by
    /// one page per plane instead of a whole program time per write. Without it the write
    /// waits until the program is done, so that what a completed program holds is durable
    /// when the write that completed it is acknowledged.
    fn program_staged(&mut self, t_ns: u64, zone: usize) -> u64 {
        let first = self.zones[zone].programmed;
        let (first_page, pages) = self.layout.slot_pages(first);
        let mut done = t_ns;
        let page_bytes = self.layout.page_bytes;
        for p in first_page..first_page + pages {
            let a = self.page_addr(zone, p);
            let ty = self.layout.page_type(&a, false);
            let span = self.timer.program(t_ns, a.channel, a.plane, ty, false, page_bytes);
            done = done.max(if self.plp { span.start_ns } else { span.done_ns });
        }
        let (shape, zone_slots, per) = (self.shape, self.zone_slots, self.per_program);
        let z = &mut self.zones[zone];
        let st = z.store.get_or_insert_with(|| Box::new(LineStore::new(shape, zone_slots)));
        let staged = std::mem::take(&mut z.staged);
        let host = staged.len() as u32;
        for (k, w) in staged.into_iter().enumerate() {
            st.put(first + k as u32, w.lpn, w.seq, w.flags, &w.img);
        }
        let pad = IuImage::zeroed(&shape);
        for k in host..per {
            st.put(first + k, ZONE_PAD_LPN, 0, 0, &pad);
        }
        z.programmed = first + per;
        z.host_slots += host;
        z.saved = None;
        z.dirty = false;
        self.counters.host_slots += host as u64;
        self.counters.pad_slots += (per - host) as u64;
        done
    }

    /// Whether the staging of `zone` makes a complete program: a page of whole units, or
    /// the last units of the zone's capacity.
    fn staged_complete(&self, zone: usize) -> bool {
        let z = &self.zones[zone];
        let Some(last) = z.staged.last() else { return false };
        let whole = last.present & self.full == self.full;
        whole
            && (z.staged.len() as u32 == self.per_program
                || z.programmed + z.staged.len() as u32 >= self.capacity_slots)
    }

    /// Saves the staging of every zone that changed since its last save (a flush or a FUA
    /// write on a device without power-loss protection); returns when the saves are done.
    pub fn save_staged(&mut self, t_ns: u64) -> u64 {
        let mut done = t_ns;
        for zone in 0..self.zones.len() {
            if !self.zones[zone].dirty {
                continue;
            }
            // One SLC page program on the plane the zone programs next: the staged units
            // take at most one page.
            let next = self.zones[zone].programmed;
            let a = self.page_addr(zone, self.layout.slot_pages(next).0);
            let bytes = self.layout.page_bytes;
            done = done.max(self.timer.program(t_ns, a.channel, a.plane, 0, true, bytes).done_ns);
            let z = &mut self.zones[zone];
            z.saved = Some(z.staged.clone());
            z.dirty = false;
            self.counters.zone_staged_saves += 1;
        }
        done
    }
}

impl Ftl for ZoneMap {
    fn layout(&self) -> &Layout {
        &self.layout
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn is_mapped(&self, lpn: u32) -> bool {
        let (zone, k) = self.split(lpn);
        let z = &self.zones[zone];
        k < z.programmed || k < z.programmed + z.staged.len() as u32
    }

    fn read_iu(&mut self, t_ns: u64, lpn: u32, _need: u128) -> DevResult<(Option<IuImage>, u64)> {
        let (zone, k) = self.split(lpn);
        let z = &self.zones[zone];
        if k >= z.programmed {
            // Staged units are in DRAM; past them the zone is unwritten and reads as zeros.
            let img = z.staged.get((k - z.programmed) as usize).map(|w| w.img.clone());
            return Ok((img, t_ns));
        }
        let st = z.store.as_ref().expect("a programmed zone has a store");
        if st.lpn[k as usize] == ZONE_PAD_LPN {
            // Padding (of a finished zone, or past its capacity) holds no host data.
            return Ok((None, t_ns));
        }
        if st.lpn[k as usize] != lpn {
            self.counters.oob_mismatches += 1;
            return Err(DevError::ReadMedia { lba: lpn as u64 * self.layout.blocks_per_iu as u64 });
        }
        let img = st.get(k);
        let (first, pages) = self.layout.slot_pages(k);
        let bytes = self.layout.iu_bytes.min(self.layout.page_bytes);
        let mut done = t_ns;
        for p in first..first + pages {
            let a = self.page_addr(zone, p);
            let ty = self.layout.page_type(&a, false);
            done = done.max(self.timer.read(t_ns, a.channel, a.plane, ty, false, bytes));
        }
        self.counters.slot_reads += 1;
        Ok((Some(img), done))
    }

    /// Stages host units in write-pointer order (the controller's zone table has checked
    /// that they are) and programs each program's worth as it completes.
    fn program(&mut self, t_ns: u64, ius: &mut Vec<IuWrite>) -> DevResult<u64> {
        let mut done = t_ns;
        let shape = self.shape;
        for w in ius.drain(..) {
            let (zone, k) = self.split(w.lpn);
            let z = &mut self.zones[zone];
            let next = z.programmed + z.staged.len() as u32;
            if k == next {
                z.staged.push(w);
            } else if k + 1 == next && !z.staged.is_empty() {
                // More blocks of the partial unit staged last (the write pointer is inside it).
                let last = z.staged.last_mut().expect("checked non-empty");
                for i in 0..self.layout.blocks_per_iu as usize {
                    if w.present & (1u128 << i) != 0 {
                        last.img.copy_block_from(&shape, i, &w.img);
                    }
                }
                last.present |= w.present;
                last.seq = w.seq;
            } else {
                return Err(DevError::Invalid(format!(
                    "zoned firmware: unit {k} of zone {zone} is not at the zone's next unit {next}"
                )));
            }
            z.dirty = true;
            if self.staged_complete(zone) {
                done = done.max(self.program_staged(t_ns, zone));
            }
        }
        Ok(done)
    }

    /// A zoned namespace answers trims itself (`Unsupported`); nothing reaches here.
    fn trim(&mut self, _lpn: u32, _seq: u64) {}

    fn background(&mut self, _t_ns: u64) -> DevResult<()> {
        Ok(())
    }

    fn power_loss(&mut self) {
        for z in &mut self.zones {
            if self.plp {
                // The capacitors' energy saves every zone's staging.
                z.saved = Some(z.staged.clone());
            }
            z.staged.clear();
            z.dirty = false;
            // Forgotten, and recounted from the media by recovery.
            z.programmed = 0;
            z.host_slots = 0;
        }
    }

    fn recover(&mut self, t_ns: u64) -> Vec<RecoveryStep> {
        let mut log = Vec::new();
        let (mut scanned, mut with_data) = (0u64, 0u64);
        for z in &mut self.zones {
            let Some(st) = z.store.as_ref() else { continue };
            // Programs go in slot order, so the programmed slots are a prefix: the first slot
            // whose OOB names no unit ends it.
            let programmed = st.lpn.iter().take_while(|&&l| l != NO_LPN).count() as u32;
            z.programmed = programmed;
            z.host_slots =
                st.lpn[..programmed as usize].iter().filter(|&&l| l != ZONE_PAD_LPN).count() as u32;
            scanned += programmed as u64;
            with_data += (programmed > 0) as u64;
        }
        log.push(RecoveryStep {
            name: "scan_zones",
            detail: format!("{scanned} programmed slots in {with_data} zones"),
        });
        let mut restored = 0u64;
        for z in &mut self.zones {
            if let Some(saved) = z.saved.take() {
                restored += saved.len() as u64;
                z.staged = saved.clone();
                z.saved = Some(saved);
            }
        }
        log.push(RecoveryStep {
            name: "restore_staged",
            detail: format!("{restored} staged units restored from the saved staging"),
        });
        self.timer.reset_timelines(t_ns);
        log.push(RecoveryStep { name: "resume", detail: String::new() });
        log
    }

    fn counters(&self) -> FtlCounters {
        self.counters.clone()
    }

    fn timer(&self) -> &NandTimer {
        &self.timer
    }

    fn block_erase_counts(&self) -> Vec<u32> {
        let zp = self.zl.zone_planes as usize;
        self.zones.iter().flat_map(|z| std::iter::repeat_n(z.erase_count, zp)).collect()
    }

    fn sync_staged(&mut self, t_ns: u64) -> u64 {
        self.save_staged(t_ns)
    }

    /// Erases the zone's blocks, one per plane of its group, all issued at `t_ns`; a zone
    /// with nothing programmed has erased blocks already and costs nothing.
    fn zone_reset(&mut self, t_ns: u64, zone: u64) -> u64 {
        let zone = zone as usize;
        let mut done = t_ns;
        if self.zones[zone].store.is_some() {
            for u in 0..self.zl.zone_planes {
                let plane = self.page_addr(zone, u).plane;
                done = done.max(self.timer.erase(t_ns, plane, false));
            }
            self.zones[zone].erase_count += 1;
        }
        let erase_count = self.zones[zone].erase_count;
        self.zones[zone] = Zone { erase_count, ..Zone::default() };
        self.counters.zone_resets += 1;
        done
    }

    /// Programs what the zone has staged (padded) and records that it is finished.
    fn zone_finish(&mut self, t_ns: u64, zone: u64) -> u64 {
        let zone = zone as usize;
        let mut done = t_ns;
        if !self.zones[zone].staged.is_empty() {
            done = self.program_staged(t_ns, zone);
        }
        self.zones[zone].finished = true;
        self.counters.zone_finishes += 1;
        done
    }

    fn zone_media_state(&self) -> Vec<(u64, bool)> {
        let bpi = self.layout.blocks_per_iu as u64;
        let cap = self.zl.zone_capacity_blocks;
        self.zones
            .iter()
            .map(|z| {
                let staged: u64 =
                    z.staged.iter().map(|w| (w.present & self.full).count_ones() as u64).sum();
                ((z.host_slots as u64 * bpi + staged).min(cap), z.finished)
            })
            .collect()
    }
}
