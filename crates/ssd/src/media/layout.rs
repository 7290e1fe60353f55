//! Address arithmetic of the media.
//!
//! The FTL allocates space in *lines*: line `l` is block `l` of every plane, erased together
//! (FEMU's lines, the thesis' LightNVM erase units). Pages of a line are filled plane-first
//! (channel fastest, then die, then plane), so consecutive pages land on different channels
//! and dies and a stream of programs uses the whole device's parallelism.
//!
//! The FTL maps *mapping units* (IUs, `iu_bytes`). A page holds one or more IUs when the IU is
//! smaller than a page; an IU spans consecutive line pages when it is larger. Physical
//! addresses (PPAs) number IU-sized *slots*: `ppa = line << slot_bits | slot`, a power-of-two
//! stride so that splitting an address is a shift (address arithmetic runs for every NAND
//! operation, and a division costs more than the rest of it).

use crate::config::{SsdConfig, ZoneLayout};

/// Where one page of a line is: the plane (index into the timer's plane timelines), the
/// channel it transfers over, and the page number inside its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageAddr {
    pub plane: u32,
    pub channel: u32,
    pub page_in_block: u32,
    /// Page type in the native cell mode (`page_in_block % bits`).
    pub native_type: u8,
}

#[derive(Clone, Debug)]
pub struct Layout {
    pub channels: u32,
    pub dies_per_channel: u32,
    pub planes_per_die: u32,
    /// Planes in the device (units a line stripes over).
    pub planes: u32,
    /// Bits per cell of the native mode; page types cycle with this period.
    pub bits: u32,
    pub page_bytes: u32,
    pub iu_bytes: u32,
    pub block_bytes: u32,
    pub blocks_per_iu: u32,
    /// IUs per page (1 when an IU spans pages).
    pub slots_per_page: u32,
    /// Pages per IU (1 when pages hold one or more IUs).
    pub pages_per_slot: u32,
    pub pages_per_block_native: u32,
    pub pages_per_block_slc: u32,
    pub slots_per_line_native: u32,
    pub slots_per_line_slc: u32,
    /// Lines in the device (= blocks per plane).
    pub lines: u32,
    /// Lines run in SLC mode (the SLC cache), numbered first.
    pub slc_lines: u32,
    /// Mapping units the host can address.
    pub logical_ius: u64,
    /// Host blocks the device exports.
    pub num_blocks: u64,
    /// log2 of the PPA stride of a line (at least `slots_per_line_native`).
    pub slot_bits: u32,
    /// log2 of `slots_per_page` and of `pages_per_slot` (both powers of two).
    spp_bits: u32,
    pps_bits: u32,
    /// The zones of a zoned namespace (`None`: the conventional block interface).
    pub zones: Option<ZoneLayout>,
    /// Where each page of a line is, precomputed (empty for geometries too large to table,
    /// which compute it instead).
    page_table: Vec<PageAddr>,
}

/// Lines with more pages than this compute page addresses instead of tabling them.
const PAGE_TABLE_MAX: u64 = 1 << 20;

impl Layout {
    pub fn new(cfg: &SsdConfig) -> Result<Layout, String> {
        let g = &cfg.geometry;
        let f = &cfg.firmware;
        let bits = cfg.nand.cell.bits();
        let planes = g.planes();
        let slots_per_page = (g.page_bytes / f.iu_bytes).max(1);
        let pages_per_slot = (f.iu_bytes / g.page_bytes).max(1);
        let pages_per_block_slc = g.pages_per_block / bits;
        let line_pages_native = planes as u64 * g.pages_per_block as u64;
        let line_pages_slc = planes as u64 * pages_per_block_slc as u64;
        let slots_native = line_pages_native * slots_per_page as u64 / pages_per_slot as u64;
        let slots_slc = line_pages_slc * slots_per_page as u64 / pages_per_slot as u64;
        if slots_native > u32::MAX as u64 / 2 {
            return Err(format!(
                "geometry: a line of {slots_native} mapping units is too large (at most 2^31)"
            ));
        }
        let slc_line_bytes = slots_slc * f.iu_bytes as u64;
        let slc_lines = if f.slc_cache_bytes == 0 {
            0
        } else {
            f.slc_cache_bytes.div_ceil(slc_line_bytes.max(1)) as u32
        };
        let lines = g.blocks_per_plane;
        if slc_lines >= lines {
            return Err(format!(
                "firmware.slc_cache_bytes = {} needs {slc_lines} SLC lines of {slc_line_bytes} \
                 bytes, but the device has only {lines} lines (geometry.blocks_per_plane)",
                f.slc_cache_bytes
            ));
        }
        if f.slc_cache_bytes > 0 && slc_lines < f.slc_evict_free_lines + 2 {
            return Err(format!(
                "firmware.slc_cache_bytes = {} gives {slc_lines} SLC lines; the evictor keeps \
                 {} free, so at least {} are needed",
                f.slc_cache_bytes,
                f.slc_evict_free_lines,
                f.slc_evict_free_lines + 2
            ));
        }
        let dense_lines = (lines - slc_lines) as u64;
        let dense_slots = dense_lines * slots_native;
        let zones = match &cfg.zoned {
            Some(z) => Some(z.layout(g, f.block_bytes, f.iu_bytes)?),
            None => None,
        };
        // A zoned namespace exports every zone, holes past each zone's capacity included, and
        // keeps no spare lines: without device GC, over-provisioning has no use.
        let womv = match &cfg.womv {
            Some(_) => {
                Some(crate::firmware::womv::device::geometry(cfg, slots_native as u32, lines)?)
            }
            None => None,
        };
        let logical_ius = match &zones {
            // Saturating: a namespace too large to address is refused just below.
            Some(z) => {
                z.num_zones.saturating_mul(z.zone_blocks * f.block_bytes as u64 / f.iu_bytes as u64)
            }
            // The WOM-v firmware exports its logical pages (coded pages take several slots).
            None if womv.is_some() => womv.map_or(0, |w| w.logical_pages as u64),
            None => (dense_slots as f64 / (1.0 + f.over_provisioning_percent / 100.0)) as u64,
        };
        let logical_lines = logical_ius.div_ceil(slots_native);
        let spare = dense_lines.saturating_sub(logical_lines);
        let needed = f.gc_background_free_lines.max(f.gc_foreground_free_lines) as u64 + 3;
        // The WOM-v firmware checked its own reserve (in erase units of coded pages).
        if zones.is_none() && womv.is_none() && spare < needed {
            return Err(format!(
                "firmware.over_provisioning_percent = {}: leaves {spare} spare lines of {} \
                 dense lines; garbage collection needs at least {needed} (its free-line \
                 thresholds plus open lines); raise over-provisioning or blocks_per_plane",
                f.over_provisioning_percent, dense_lines
            ));
        }
        if logical_ius >= u32::MAX as u64 {
            return Err(format!(
                "the device has {logical_ius} mapping units; at most 2^32 - 1 are supported \
                 (raise firmware.iu_bytes)"
            ));
        }
        let slot_bits = slots_native.next_power_of_two().trailing_zeros();
        if (lines as u64) << slot_bits >= u32::MAX as u64 {
            return Err(format!(
                "{lines} lines x {} unit addresses exceed 2^32 physical addresses (raise \
                 firmware.iu_bytes or lower geometry.blocks_per_plane)",
                1u64 << slot_bits
            ));
        }
        let blocks_per_iu = f.iu_bytes / f.block_bytes;
        let mut layout = Layout {
            channels: g.channels,
            dies_per_channel: g.chips_per_channel * g.dies_per_chip,
            planes_per_die: g.planes_per_die,
            planes,
            bits,
            page_bytes: g.page_bytes,
            iu_bytes: f.iu_bytes,
            block_bytes: f.block_bytes,
            blocks_per_iu,
            slots_per_page,
            pages_per_slot,
            pages_per_block_native: g.pages_per_block,
            pages_per_block_slc,
            slots_per_line_native: slots_native as u32,
            slots_per_line_slc: slots_slc as u32,
            lines,
            slc_lines,
            logical_ius,
            num_blocks: logical_ius * blocks_per_iu as u64,
            slot_bits,
            spp_bits: slots_per_page.trailing_zeros(),
            pps_bits: pages_per_slot.trailing_zeros(),
            zones,
            page_table: Vec::new(),
        };
        if line_pages_native <= PAGE_TABLE_MAX {
            layout.page_table =
                (0..line_pages_native as u32).map(|p| layout.compute_page_addr(p)).collect();
        }
        Ok(layout)
    }

    /// Slots (IUs) a line holds in its mode.
    pub fn slots_per_line(&self, slc: bool) -> u32 {
        if slc {
            self.slots_per_line_slc
        } else {
            self.slots_per_line_native
        }
    }

    #[inline]
    pub fn ppa(&self, line: u32, slot: u32) -> u32 {
        line << self.slot_bits | slot
    }

    #[inline]
    pub fn split_ppa(&self, ppa: u32) -> (u32, u32) {
        (ppa >> self.slot_bits, ppa & ((1 << self.slot_bits) - 1))
    }

    /// Where page `page` of a line is (pages numbered in fill order).
    #[inline]
    pub fn page_addr(&self, page: u32) -> PageAddr {
        match self.page_table.get(page as usize) {
            Some(a) => *a,
            None => self.compute_page_addr(page),
        }
    }

    fn compute_page_addr(&self, page: u32) -> PageAddr {
        self.unit_page_addr(page % self.planes, page / self.planes)
    }

    /// Where page `page_in_block` of the block on plane unit `unit` is; units number the
    /// planes in a line's fill order (channel fastest, then die, then plane), so any run of
    /// consecutive units spreads over the channels first.
    pub fn unit_page_addr(&self, unit: u32, page_in_block: u32) -> PageAddr {
        let channel = unit % self.channels;
        let rest = unit / self.channels;
        let die_in_channel = rest % self.dies_per_channel;
        let plane_in_die = rest / self.dies_per_channel;
        let die = channel * self.dies_per_channel + die_in_channel;
        PageAddr {
            plane: die * self.planes_per_die + plane_in_die,
            channel,
            page_in_block,
            native_type: (page_in_block % self.bits) as u8,
        }
    }

    /// The first line page holding `slot`, and how many pages it spans.
    #[inline]
    pub fn slot_pages(&self, slot: u32) -> (u32, u32) {
        (slot << self.pps_bits >> self.spp_bits, self.pages_per_slot)
    }

    /// Page type (0 = L ... bits-1 = U) of a page in its block; SLC-mode pages are type 0.
    #[inline]
    pub fn page_type(&self, a: &PageAddr, slc: bool) -> usize {
        if slc {
            0
        } else {
            a.native_type as usize
        }
    }

    /// Logical capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.num_blocks * self.block_bytes as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_layout() {
        let cfg = SsdConfig::preset("tiny").unwrap();
        let l = Layout::new(&cfg).unwrap();
        assert_eq!(l.planes, 4);
        assert_eq!(l.slots_per_line_native, 4 * 96);
        assert_eq!(l.lines, 64);
        // 64 lines / 1.25 = 51.2 lines of logical space.
        assert_eq!(l.logical_ius, (64.0 * 384.0 / 1.25) as u64);
        // Consecutive pages go to different channels first, then dies.
        let a: Vec<_> = (0..4).map(|p| (l.page_addr(p).channel, l.page_addr(p).plane)).collect();
        assert_eq!(a, vec![(0, 0), (1, 2), (0, 1), (1, 3)]);
        assert_eq!(l.page_addr(4).page_in_block, 1);
        assert_eq!(l.split_ppa(l.ppa(3, 17)), (3, 17));
    }

    #[test]
    fn coarse_iu_spans_pages() {
        let cfg = SsdConfig::preset("tiny-qlc").unwrap();
        let l = Layout::new(&cfg).unwrap();
        assert_eq!(l.pages_per_slot, 4);
        assert_eq!(l.slot_pages(2), (8, 4));
        // Page 21 of a line over 4 planes is page 5 of its block: type CL (5 % 4).
        let a = l.page_addr(21);
        assert_eq!(a.page_in_block, 5);
        assert_eq!(l.page_type(&a, false), 1);
        assert_eq!(l.page_type(&a, true), 0);
    }

    #[test]
    fn too_little_over_provisioning_is_refused() {
        let mut cfg = SsdConfig::preset("tiny").unwrap();
        cfg.firmware.over_provisioning_percent = 1.0;
        let e = Layout::new(&cfg).unwrap_err();
        assert!(e.contains("over_provisioning_percent"), "{e}");
    }
}
