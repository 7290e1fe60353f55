//! The WOM-v SSD (`[womv]` in a device's configuration): the WOM-v FTL of [`super::ftl`]
//! inside the emulated SSD, its media operations charged on the device's NAND timelines.
//!
//! Organisation (jaffer-thesis-2023.txt §3.6.1): the device's planes are LightNVM's parallel
//! units, and a line (block `l` of every plane) is an erase unit, its chunks filled in
//! parallel. A logical page is one mapping unit (`firmware.iu_bytes`); its coded page takes
//! n/k times its bits in cells, rounded up to whole mapping-unit slots of the line (§3.6.3:
//! "each 4KB incoming write is encoded and stored in 2 x 4KB physical pages" for
//! WOM-v(2,4)), so consecutive slots of one coded page sit on different planes and are
//! programmed in parallel. Each flash page is of the type its place in its block gives
//! (L/CL/CU/U on QLC, §3.6.4), with that type's read and program times.
//!
//! Costs: a program transfers and programs every flash page of its coded page; in the
//! default mode it first reads them (the read before write, §3.6.3), NR mode does not; the
//! GC reads a page before relocating it; an erase erases the erase unit's block on every
//! plane. A host write completes when its own program does. The GC's reads, programs and
//! erases it triggers are booked on the planes right behind it, so later commands wait for
//! them (pblk's GC thread shares the parallel units with the writes).
//!
//! Data: with `payload = "full"` the cells are derived from the bytes written, and the
//! per-block host metadata is kept in the page's out-of-band area. Timing-only payloads
//! (`tag`, `none`) carry no bytes, so the cells are derived from synthetic data: the old
//! content of the flash page the write goes to, each bit flipped with probability
//! `womv.bit_change_percent` (seeded by `womv.data_seed`; random over an erased page); the
//! unit's image (fingerprints, metadata) is kept out of band.

use flashrig_blockdev::{DevError, DevResult};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::ftl::{self as wftl, FtlError, MediaOp, WomFtl, RECOVERY_STEPS};
use super::page::cells_for;
use crate::config::{PayloadMode, SsdConfig, WomvGc, WomvSpace, WomvVictim};
use crate::firmware::ftl::{Ftl, FtlCounters, IuWrite, RecoveryStep};
use crate::media::store::{IuImage, Shape};
use crate::media::{Layout, NandTimer};

/// How the WOM-v firmware lays its erase units and coded pages over the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WomGeometry {
    /// Erase units: the device's lines, times the slots of a coded page under
    /// `space = "same_logical"`.
    pub erase_units: u32,
    /// Mapping-unit slots one coded page takes.
    pub slots_per_page: u32,
    pub pages_per_erase_unit: u32,
    /// Logical pages (mapping units) the device exports.
    pub logical_pages: u32,
    pub gc_free_erase_units: u32,
}

/// The WOM-v geometry of `cfg` over lines of `slots_per_line` mapping-unit slots.
pub fn geometry(cfg: &SsdConfig, slots_per_line: u32, lines: u32) -> Result<WomGeometry, String> {
    let w = cfg.womv.as_ref().ok_or("the device has no [womv] section")?;
    let f = &cfg.firmware;
    let slots_per_page = match w.resolve_code()? {
        None => 1,
        Some(code) => {
            let cell_bytes = (cells_for(f.iu_bytes as usize, code.data_bits())
                * code.level_bits() as usize)
                .div_ceil(8);
            cell_bytes.div_ceil(f.iu_bytes as usize) as u32
        }
    };
    let pages_per_erase_unit = slots_per_line / slots_per_page;
    if pages_per_erase_unit == 0 {
        return Err(format!(
            "womv.code = \"{}\": a coded page takes {slots_per_page} mapping units, more than a \
             line's {slots_per_line}",
            w.code
        ));
    }
    let erase_units = match w.space {
        WomvSpace::SamePhysical => lines as u64,
        WomvSpace::SameLogical => lines as u64 * slots_per_page as u64,
    };
    let total_pages = erase_units * pages_per_erase_unit as u64;
    let gc_free_erase_units = f.gc_foreground_free_lines.max(2);
    // LightNVM's over-provisioning, and at least the GC's reserve and the open erase unit.
    let reserve_units = gc_free_erase_units as u64 + 1;
    let usable = erase_units.saturating_sub(reserve_units) * pages_per_erase_unit as u64;
    let logical_pages = match w.space {
        WomvSpace::SamePhysical => {
            (total_pages as f64 / (1.0 + f.over_provisioning_percent / 100.0)) as u64
        }
        // The uncoded device's logical space.
        WomvSpace::SameLogical => {
            ((lines as u64 * slots_per_line as u64) as f64
                / (1.0 + f.over_provisioning_percent / 100.0)) as u64
        }
    }
    .min(usable);
    if logical_pages == 0 || erase_units > u32::MAX as u64 || logical_pages >= u32::MAX as u64 {
        return Err(format!(
            "womv: {erase_units} erase units of {pages_per_erase_unit} coded pages leave no \
             usable logical space after the GC's {reserve_units} erase units (raise \
             geometry.blocks_per_plane)"
        ));
    }
    Ok(WomGeometry {
        erase_units: erase_units as u32,
        slots_per_page,
        pages_per_erase_unit,
        logical_pages: logical_pages as u32,
        gc_free_erase_units,
    })
}

/// The WOM-v firmware's [`Ftl`].
pub struct WomMap {
    layout: Layout,
    shape: Shape,
    timer: NandTimer,
    geo: WomGeometry,
    /// `None` only while recovery rebuilds it.
    ftl: Option<WomFtl>,
    full: u128,
    seq: u64,
    counters: FtlCounters,
    /// When each erase unit's last erase is done: nothing on the unit may start before it
    /// (a plane timeline would otherwise fit a later-booked program into an idle gap ahead
    /// of the erase of its block).
    erased_at_ns: Vec<u64>,
    /// Scratch: the FTL's media operations of one command, and one page of cell data.
    ops: Vec<MediaOp>,
    data: Vec<u8>,
    /// Timing-only payloads: the synthetic data's generator and bit-change probability in
    /// 1/256 steps.
    rng: Xoshiro256PlusPlus,
    flip_256: u32,
    /// §3.7.4's wide pages: a coded page is timed as one flash page of its size.
    wide_pages: bool,
}

impl WomMap {
    pub fn new(cfg: &SsdConfig, layout: Layout, shape: Shape) -> Result<WomMap, String> {
        let w = cfg.womv.as_ref().ok_or("the device has no [womv] section")?;
        let geo = geometry(cfg, layout.slots_per_line_native, layout.lines)?;
        let config = wftl::FtlConfig {
            code: w.resolve_code()?,
            no_read: w.no_read,
            gc: match w.gc {
                WomvGc::Default => wftl::GcPolicy::Relocate,
                WomvGc::GcOpt => wftl::GcPolicy::ReuseInPlace {
                    min_programmable_pages: w.min_programmable_pages,
                },
            },
            victim: match w.victim {
                WomvVictim::Greedy => wftl::VictimPolicy::Greedy,
                WomvVictim::Lrw => wftl::VictimPolicy::Lrw,
            },
            erase_units: geo.erase_units,
            pages_per_erase_unit: geo.pages_per_erase_unit,
            logical_pages: geo.logical_pages,
            page_bytes: layout.iu_bytes as usize,
            ecc_fraction: w.ecc_threshold_percent / 100.0,
            gc_free_erase_units: geo.gc_free_erase_units,
        };
        let mut ftl = WomFtl::new(config).map_err(|e| format!("womv: {e}"))?;
        ftl.record_ops();
        Ok(WomMap {
            timer: NandTimer::new(&cfg.nand, layout.channels, layout.planes),
            full: super::super::mask(0, layout.blocks_per_iu),
            data: vec![0; layout.iu_bytes as usize],
            rng: Xoshiro256PlusPlus::seed_from_u64(w.data_seed),
            flip_256: (w.bit_change_percent / 100.0 * 256.0).round() as u32,
            wide_pages: w.wide_pages,
            seq: 1,
            counters: FtlCounters::default(),
            ops: Vec::new(),
            erased_at_ns: vec![0; geo.erase_units as usize],
            ftl: Some(ftl),
            geo,
            layout,
            shape,
        })
    }

    fn ftl(&self) -> &WomFtl {
        self.ftl.as_ref().expect("the FTL is rebuilt before the next command")
    }

    fn ftl_mut(&mut self) -> &mut WomFtl {
        self.ftl.as_mut().expect("the FTL is rebuilt before the next command")
    }

    /// The WOM-v FTL's own counters.
    pub fn womv_counters(&self) -> wftl::FtlCounters {
        self.ftl().counters()
    }

    pub fn geometry(&self) -> WomGeometry {
        self.geo
    }

    /// Reads a coded page's flash pages, issued at `t_ns`; returns when the last is off
    /// the channel.
    fn read_coded(&mut self, t_ns: u64, page: u32) -> u64 {
        let (pages, bytes) =
            timed_pages(&self.layout, self.geo.slots_per_page, self.wide_pages, page);
        let mut done = t_ns;
        for (channel, plane, ty) in pages {
            done = done.max(self.timer.read(t_ns, channel, plane, ty, false, bytes));
        }
        done
    }

    /// Programs a coded page's flash pages, issued at `t_ns`; returns when the last is done.
    fn program_coded(&mut self, t_ns: u64, page: u32) -> u64 {
        let (pages, bytes) =
            timed_pages(&self.layout, self.geo.slots_per_page, self.wide_pages, page);
        let mut done = t_ns;
        for (channel, plane, ty) in pages {
            done = done.max(self.timer.program(t_ns, channel, plane, ty, false, bytes).done_ns);
        }
        done
    }

    /// Charges the media operations the FTL recorded, issued at `t_ns`; returns when the
    /// host's programs among them are done (`t_ns` if there were none). A program starts
    /// after every read recorded before it in the same command (a relocation programs what
    /// its read brought in; a write a page refused goes to the next page once the read
    /// showed it), and any operation on an erase unit after the unit's erase.
    fn charge(&mut self, t_ns: u64) -> u64 {
        let mut ops = std::mem::take(&mut self.ops);
        self.ftl_mut().take_ops(&mut ops);
        let (mut host_done, mut all_done, mut reads_done) = (t_ns, t_ns, t_ns);
        for op in ops.drain(..) {
            match op {
                MediaOp::Read { eu, page } => {
                    let at = t_ns.max(self.erased_at_ns[eu as usize]);
                    let done = self.read_coded(at, page);
                    reads_done = reads_done.max(done);
                    all_done = all_done.max(done);
                }
                MediaOp::Program { eu, page, read_first, gc } => {
                    let mut start = reads_done.max(self.erased_at_ns[eu as usize]);
                    if read_first {
                        start = self.read_coded(start, page);
                    }
                    let done = self.program_coded(start, page);
                    all_done = all_done.max(done);
                    if !gc {
                        host_done = host_done.max(done);
                    }
                }
                MediaOp::Erase { eu } => {
                    // After the relocations that emptied it.
                    let at = all_done;
                    let mut erased = at;
                    for plane in 0..self.layout.planes {
                        erased = erased.max(self.timer.erase(at, plane, false));
                    }
                    self.erased_at_ns[eu as usize] = erased;
                    all_done = all_done.max(erased);
                }
            }
        }
        self.ops = ops;
        host_done
    }

    /// Timing-only payloads: fills `data` with what the next program's cells are derived
    /// from, the content of the flash page the write will most likely program with each bit
    /// flipped at the configured rate (random over an erased page). The rate is thus between
    /// a page's old data and what overwrites it, as in the thesis' data-buffer
    /// micro-benchmark (§3.7.1), whatever the workload's order.
    fn synthesize(&mut self, data: &mut [u8]) {
        if self.ftl_mut().next_page_content(data) {
            flip_bits(&mut self.rng, data, self.flip_256);
        } else {
            self.rng.fill_bytes(data);
        }
    }

    fn image_of(&self, lpn: u32) -> Option<IuImage> {
        let ftl = self.ftl();
        let meta = ftl.meta(lpn)?;
        let mut bytes = vec![0u8; self.shape.data_len()];
        if !bytes.is_empty() {
            ftl.peek(lpn, &mut bytes);
        }
        bytes.extend_from_slice(meta);
        Some(IuImage::from_bytes(bytes))
    }

    fn dev_error(&self, lpn: u32, e: FtlError) -> DevError {
        let lba = lpn as u64 * self.layout.blocks_per_iu as u64;
        match e {
            FtlError::OutOfSpace => DevError::NoSpace(format!("womv: {e}")),
            FtlError::PowerCut => DevError::WriteMedia { lba },
            _ => DevError::Invalid(format!("womv: logical page {lpn}: {e}")),
        }
    }
}

/// The flash operations that time coded page `page` of an erase unit (every erase unit has
/// the same layout over the planes; only the block differs), each as (channel, plane, page
/// type), and the bytes each moves: by default the coded page's own flash pages. With wide
/// pages (§3.7.4: "We assume the time to program 4K, 8K and 16K pages will be the same") the
/// coded page is one flash page of n/k times the size, as on a device whose blocks hold k/n as
/// many pages of n/k the size: page `page` of the erase unit is on parallel unit `page` modulo
/// the units and is page `page / units` of its block, so every unit takes the L/CL/CU/U types
/// in turn (a block of k/n as many pages holds whole cycles when `pages_per_block` is a
/// multiple of 4n/k), and it moves all of its bytes over the channel. Wide pages assume a
/// mapping unit of one flash page, as `qlc-femu` has.
fn timed_pages(
    layout: &Layout,
    slots_per_page: u32,
    wide: bool,
    page: u32,
) -> (impl Iterator<Item = (u32, u32, usize)> + '_, u32) {
    let (slots, bytes) = if wide {
        (1, layout.page_bytes * slots_per_page)
    } else {
        (slots_per_page, layout.page_bytes)
    };
    let first_slot = page * slots_per_page;
    let pages = (first_slot..first_slot + slots).flat_map(move |slot| {
        let (first, n) = layout.slot_pages(slot);
        (first..first + n).map(move |p| {
            let a = if wide {
                layout.unit_page_addr(page % layout.planes, page / layout.planes)
            } else {
                layout.page_addr(p)
            };
            (a.channel, a.plane, layout.page_type(&a, false))
        })
    });
    (pages, bytes)
}

/// Flips each bit of `data` with probability `p_256 / 256`: each 64-bit word's mask is built
/// from the probability's binary digits, least significant first (a 1 digit ORs a random
/// word in, a 0 digit ANDs one), so eight random words at most give the exact rate.
fn flip_bits(rng: &mut Xoshiro256PlusPlus, data: &mut [u8], p_256: u32) {
    if p_256 == 0 {
        return;
    }
    if p_256 >= 256 {
        data.iter_mut().for_each(|b| *b = !*b);
        return;
    }
    let lowest = p_256.trailing_zeros();
    for chunk in data.chunks_mut(8) {
        let mut mask = 0u64;
        for digit in lowest..8 {
            let r = rng.next_u64();
            mask = if p_256 >> digit & 1 == 1 { mask | r } else { mask & r };
        }
        for (b, m) in chunk.iter_mut().zip(mask.to_le_bytes()) {
            *b ^= m;
        }
    }
}

impl Ftl for WomMap {
    fn layout(&self) -> &Layout {
        &self.layout
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn is_mapped(&self, lpn: u32) -> bool {
        self.ftl().location(lpn).is_some()
    }

    fn read_iu(&mut self, t_ns: u64, lpn: u32, _need: u128) -> DevResult<(Option<IuImage>, u64)> {
        let Some((_, page)) = self.ftl().location(lpn) else { return Ok((None, t_ns)) };
        let done = self.read_coded(t_ns, page);
        self.counters.slot_reads += 1;
        Ok((self.image_of(lpn), done))
    }

    /// Programs each unit through the WOM-v FTL. Partial units are completed first from the
    /// unit's current content (a read-modify-write), the programs issued when the last such
    /// read is done.
    fn program(&mut self, t_ns: u64, ius: &mut Vec<IuWrite>) -> DevResult<u64> {
        let (full, shape) = (self.full, self.shape);
        let mut start = t_ns;
        for w in ius.iter_mut() {
            if w.present & full == full {
                continue;
            }
            let Some((_, page)) = self.ftl().location(w.lpn) else { continue };
            start = start.max(self.read_coded(t_ns, page));
            self.counters.rmw_reads += 1;
            let old = self.image_of(w.lpn).expect("a mapped unit has an image");
            for i in 0..self.layout.blocks_per_iu as usize {
                if w.present & (1u128 << i) == 0 {
                    w.img.copy_block_from(&shape, i, &old);
                }
            }
        }
        let mut done = start;
        let data_len = shape.data_len();
        let mut synthetic = std::mem::take(&mut self.data);
        for w in ius.drain(..) {
            // The cells come from the unit's bytes (full payload) or synthetic data; the rest
            // of the image (metadata, fingerprints) goes out of band.
            let (bytes, meta) = w.img.as_bytes().split_at(data_len);
            let data: &[u8] = if shape.mode == PayloadMode::Full {
                bytes
            } else {
                self.synthesize(&mut synthetic);
                &synthetic
            };
            let before = self.ftl().counters();
            let res = self.ftl_mut().write_with_meta(w.lpn, data, meta);
            let after = self.ftl().counters();
            self.counters.host_slots += 1;
            self.counters.gc_copies += after.gc_writes - before.gc_writes;
            self.counters.gc_lines +=
                after.erases + after.reused_after_relocation + after.reused_in_place
                    - before.erases
                    - before.reused_after_relocation
                    - before.reused_in_place;
            done = done.max(self.charge(start));
            if let Err(e) = res {
                self.data = synthetic;
                return Err(self.dev_error(w.lpn, e));
            }
        }
        self.data = synthetic;
        Ok(done)
    }

    /// Durable at once: the FTL keeps a trim record.
    fn trim(&mut self, lpn: u32, _seq: u64) {
        // The controller checked the range; a failure here is the FTL refusing after a cut.
        let _ = self.ftl_mut().trim(lpn);
    }

    /// The GC runs inside the writes that need it (its work booked on the planes behind
    /// them), so idle time has nothing left to do.
    fn background(&mut self, t_ns: u64) -> DevResult<()> {
        self.timer.set_now(t_ns);
        Ok(())
    }

    /// Every program is durable once applied; what is volatile (the mapping, the pool, the
    /// open erase unit) is rebuilt from the pages by [`WomMap::recover`].
    fn power_loss(&mut self) {}

    fn recover(&mut self, t_ns: u64) -> Vec<RecoveryStep> {
        self.timer.reset_timelines(t_ns);
        // The restarted timelines hold no erase in flight.
        self.erased_at_ns.fill(0);
        let ftl = self.ftl.take().expect("one recovery at a time");
        let before = ftl.counters();
        let ftl = ftl.recover().expect("recovery's GC has the reserve the configuration keeps");
        let after = ftl.counters();
        let mapped = (0..self.geo.logical_pages).filter(|&l| ftl.location(l).is_some()).count();
        self.ftl = Some(ftl);
        self.charge(t_ns);
        let details = [
            format!("{mapped} logical pages mapped from the pages' out-of-band areas"),
            "NR generations from the pages".to_string(),
            "erase units without valid pages (and GC_OPT's reusable ones) in the pool".into(),
            format!(
                "{} pages relocated, {} erase units erased",
                after.gc_writes - before.gc_writes,
                after.erases - before.erases
            ),
        ];
        RECOVERY_STEPS
            .iter()
            .zip(details)
            .map(|(name, detail)| RecoveryStep { name, detail })
            .collect()
    }

    fn counters(&self) -> FtlCounters {
        self.counters.clone()
    }

    fn timer(&self) -> &NandTimer {
        &self.timer
    }

    fn plane_of(&self, lpn: u32) -> Option<u32> {
        let (_, page) = self.ftl().location(lpn)?;
        let (mut pages, _) =
            timed_pages(&self.layout, self.geo.slots_per_page, self.wide_pages, page);
        pages.next().map(|(_, plane, _)| plane)
    }

    /// Each erase unit's count, for each of its blocks (one per plane).
    fn block_erase_counts(&self) -> Vec<u32> {
        let planes = self.layout.planes as usize;
        self.ftl().erase_counts().iter().flat_map(|&c| std::iter::repeat_n(c, planes)).collect()
    }

    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.ftl().counters();
        vec![
            ("womv_page_programs", c.page_programs),
            ("womv_reprograms", c.reprograms),
            ("womv_reads_before_write", c.reads_before_write),
            ("womv_gc_reads", c.gc_reads),
            ("womv_gc_writes", c.gc_writes),
            ("womv_erases", c.erases),
            ("womv_reused_after_relocation", c.reused_after_relocation),
            ("womv_reused_in_place", c.reused_in_place),
            ("womv_pages_skipped", c.pages_skipped),
            ("womv_refused_writes", c.refused_writes),
            ("womv_cells_raised", c.cells_raised),
            ("womv_einval_cells_written", c.einval_cells_written),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wide pages rotate consecutive coded pages over every parallel unit and give each unit
    /// the L/CL/CU/U types in turn, as a device with k/n as many pages per block of n/k the
    /// size: on `qlc-femu`'s 4 planes with 16 pages per block, WOM-v(1,4)'s 16 coded pages of
    /// an erase unit are 4 per plane, one of each type (a first version kept each coded page
    /// at the word line of its first 4 KiB page, which gave two planes only L and CU pages and
    /// the other two only CL and U, so half the units were slower than the mix).
    #[test]
    fn wide_pages_rotate_over_the_planes_and_their_page_types() {
        let mut cfg = SsdConfig::preset("qlc-femu").unwrap();
        cfg.geometry.blocks_per_plane = 160;
        cfg.geometry.pages_per_block = 16;
        let layout = Layout::new(&cfg).unwrap();
        let mut types_per_plane = std::collections::BTreeMap::<u32, Vec<usize>>::new();
        for page in 0..16 {
            let (narrow, narrow_bytes) = timed_pages(&layout, 4, false, page);
            assert_eq!((narrow.count(), narrow_bytes), (4, 4096), "four 4 KiB flash pages");
            let (wide, wide_bytes) = timed_pages(&layout, 4, true, page);
            let wide: Vec<_> = wide.collect();
            assert_eq!((wide.len(), wide_bytes), (1, 4 * 4096), "one 16 KiB page");
            types_per_plane.entry(wide[0].1).or_default().push(wide[0].2);
        }
        assert_eq!(types_per_plane.len(), 4, "{types_per_plane:?}");
        for (plane, types) in &types_per_plane {
            assert_eq!(types, &vec![0, 1, 2, 3], "plane {plane}");
        }
    }

    #[test]
    fn flipped_bits_follow_the_rate() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        for p_256 in [0u32, 1, 13, 64, 128, 200, 255, 256] {
            let mut data = vec![0u8; 1 << 16];
            flip_bits(&mut rng, &mut data, p_256);
            let ones: u32 = data.iter().map(|b| b.count_ones()).sum();
            let rate = ones as f64 / (data.len() * 8) as f64;
            let want = p_256 as f64 / 256.0;
            // 524,288 bits: the standard deviation of the rate is at most 0.0007.
            assert!((rate - want).abs() < 0.004, "p = {p_256}/256: measured {rate}");
        }
    }
}
