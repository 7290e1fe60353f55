//! The emulated SSD's configuration: geometry, NAND timing, firmware policies.
//!
//! A configuration usually starts from a named preset (`configs/presets/ssd/*.toml`, compiled
//! into the binary) and overrides a few keys; [`SsdConfig::resolve`] merges the two and
//! [`SsdConfig::validate`] checks every relation the firmware relies on, naming the key at
//! fault. Every preset cites, in its `[sources]` table, where each of its numbers comes from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What the media keeps of each block's bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PayloadMode {
    /// Real bytes: reads return exactly what was written.
    #[default]
    Full,
    /// A 64-bit fingerprint per logical block ([`crate::tag_of`]). A read returns the
    /// fingerprint in the block's first 8 bytes (little endian) and zeros after it, so a host
    /// that knows what it wrote can verify every read at a scale where the bytes would not fit
    /// in memory.
    Tag,
    /// Timing only: reads return zeros.
    None,
}

/// How commands complete on the real runtime. The simulated runtime always paces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Timing {
    /// At the modelled completion time (as FEMU does).
    #[default]
    Paced,
    /// As soon as the firmware has done its bookkeeping (functional emulation).
    Functional,
}

/// The cell type the media was built with. SLC-mode blocks of the SLC cache use the SLC
/// latencies whatever the native type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum CellType {
    Slc,
    Mlc,
    #[default]
    Tlc,
    Qlc,
}

impl CellType {
    /// Bits per cell, which is also the number of page types (L, CL, CU, U for QLC).
    pub fn bits(self) -> u32 {
        match self {
            CellType::Slc => 1,
            CellType::Mlc => 2,
            CellType::Tlc => 3,
            CellType::Qlc => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CellType::Slc => "slc",
            CellType::Mlc => "mlc",
            CellType::Tlc => "tlc",
            CellType::Qlc => "qlc",
        }
    }

    pub const ALL: [CellType; 4] = [CellType::Slc, CellType::Mlc, CellType::Tlc, CellType::Qlc];
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Geometry {
    pub channels: u32,
    pub chips_per_channel: u32,
    pub dies_per_chip: u32,
    pub planes_per_die: u32,
    pub blocks_per_plane: u32,
    /// Pages per block in the native cell mode.
    pub pages_per_block: u32,
    pub page_bytes: u32,
    /// Spare bytes per page available to the firmware (after ECC).
    pub oob_bytes_per_page: u32,
}

impl Default for Geometry {
    fn default() -> Self {
        Geometry {
            channels: 2,
            chips_per_channel: 1,
            dies_per_chip: 2,
            planes_per_die: 1,
            blocks_per_plane: 64,
            pages_per_block: 64,
            page_bytes: 4096,
            oob_bytes_per_page: 64,
        }
    }
}

impl Geometry {
    /// Dies in the device. Saturating, so that a configuration with absurd counts reaches
    /// validation (which refuses more than 65,536 planes) instead of overflowing first (found
    /// by fuzzing: `channels = 4294967295` with two chips per channel).
    pub fn dies(&self) -> u32 {
        self.channels.saturating_mul(self.chips_per_channel).saturating_mul(self.dies_per_chip)
    }
    /// Planes in the device: the units a line stripes over (saturating, as `dies`).
    pub fn planes(&self) -> u32 {
        self.dies().saturating_mul(self.planes_per_die)
    }
    pub fn physical_bytes(&self) -> u64 {
        self.planes() as u64
            * self.blocks_per_plane as u64
            * self.pages_per_block as u64
            * self.page_bytes as u64
    }
}

/// NAND array and bus timing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Nand {
    pub cell: CellType,
    /// Page read latency per page type in the native mode (one entry per bit of the cell:
    /// L, U for MLC; L, C, U for TLC; L, CL, CU, U for QLC). Page `p` of a block has type
    /// `p % bits`.
    pub read_ns: Vec<u64>,
    /// Page program latency per page type in the native mode.
    pub program_ns: Vec<u64>,
    pub erase_ns: u64,
    pub slc_read_ns: u64,
    pub slc_program_ns: u64,
    pub slc_erase_ns: u64,
    /// Bandwidth of one channel in MB/s (10^6 bytes); a page moves in `page_bytes / bandwidth`.
    pub channel_mb_per_s: f64,
}

impl Default for Nand {
    fn default() -> Self {
        // The `tiny` preset's numbers: FEMU's defaults (see configs/presets/ssd/tiny.toml).
        Nand {
            cell: CellType::Tlc,
            read_ns: vec![40_000; 3],
            program_ns: vec![200_000; 3],
            erase_ns: 2_000_000,
            slc_read_ns: 40_000,
            slc_program_ns: 200_000,
            slc_erase_ns: 2_000_000,
            channel_mb_per_s: 800.0,
        }
    }
}

/// Victim selection of garbage collection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GcPolicy {
    /// The closed line with the fewest valid slots.
    #[default]
    Greedy,
    /// The least recently written line (first in, first out), whatever its valid count.
    Fifo,
}

/// Victim selection of the SLC cache's evictor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvictorPolicy {
    /// The oldest SLC line.
    #[default]
    Fifo,
    /// The SLC line with the fewest valid slots.
    Greedy,
    /// ScalaAFA §5.5: the line with the highest `factor * invalid - transient` score.
    Transient,
}

/// How the SLC cache's evictor spends NAND time on a victim line (docs/ssd.md, "SLC cache").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlcEviction {
    /// A bounded share of the victim's units is moved after each host SLC program, paced so
    /// the victim is empty when the host needs the next free SLC line, and more in idle time;
    /// a host program never queues behind more than one step of eviction work.
    #[default]
    Paced,
    /// The whole victim is moved and erased at once when a host stream opens an SLC line and
    /// free lines are short; that host program queues behind all of it (the model before
    /// paced eviction, kept for comparison).
    Inline,
    /// The cache of Samsung's TurboWrite as reviewers describe it: host writes go to the SLC
    /// cache while it has a free line and straight to the dense area while it has none ("falls
    /// back to native TLC write speeds once the buffer fills", Tom's Hardware, 850 EVO review);
    /// the evictor works only in idle time ("You need a little bit of idle time for this copy
    /// to happen", AnandTech, 840 EVO review), while at most `slc_evict_free_lines` SLC lines
    /// are free. A write longer than the cache runs at the dense area's program rate instead of
    /// sharing the planes with eviction (docs/ssd.md, "SLC cache").
    Idle,
}

/// Where the SLC cache puts host writes that carry the transient hint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransientPlacement {
    /// One open SLC line takes every host write, so transient and other units share lines.
    #[default]
    Mixed,
    /// Transient units go to an open SLC line of their own (a second host stream), so a line
    /// holds either transient units or others, never both.
    Separate,
}

/// Replacement policy of the DRAM write buffer (docs/waflash.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BufferPolicy {
    /// The bottom of the LRU stack (SSDSim's policy; WAFLASH's Baseline).
    #[default]
    Lru,
    /// WAFLASH §3.1: under chip congestion, the nearest full page goes and the partial pages
    /// passed over are re-inserted ACD entries above the bottom.
    #[serde(rename = "pc-lru")]
    PcLru,
    /// WAFLASH §5.3's MCA: a partial page whose additional read would wait is delayed by one
    /// LRU position.
    Mca,
}

/// Mapping scheme of the FTL (docs/waflash.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FtlPolicy {
    /// Page-level mapping: a partial unit is completed by a read-modify-write (WAFLASH's
    /// Baseline).
    #[default]
    Page,
    /// WAFLASH §3.2's MV-FTL: a partial unit of more than half a page is programmed as a new
    /// version without reading the old one, and reads merge the versions.
    Mv,
    /// Write in place (`firmware/inplace.rs`): every unit has a fixed slot, rewritten without
    /// an erase, so there is no log and no garbage collection. For media that are not NAND,
    /// such as 3D XPoint (the `p5800x` preset).
    #[serde(rename = "in_place")]
    InPlace,
}

impl FtlPolicy {
    fn is_page(&self) -> bool {
        *self == FtlPolicy::Page
    }
}

/// The default of `firmware.compaction_region_pages` (docs/waflash.md says why 256).
pub const DEFAULT_COMPACTION_REGION_PAGES: u32 = 256;

fn is_default_compaction_region(v: &u32) -> bool {
    *v == DEFAULT_COMPACTION_REGION_PAGES
}

fn is_true(v: &bool) -> bool {
    *v
}

fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Firmware {
    /// Host logical block size: 4096, or 512 (sectors, to study unaligned writes).
    pub block_bytes: u32,
    /// Mapping (indirection) unit of the FTL: 4 KiB in most SSDs, 64 KiB in the P5316 QLC.
    pub iu_bytes: u32,
    /// Over-provisioning of the dense (non-SLC) area: (physical - logical) / logical, percent.
    pub over_provisioning_percent: f64,
    /// Commands each I/O queue (one per host reactor) holds at once; later ones wait for a slot.
    pub queue_depth: u32,
    /// Host link bandwidth in MB/s (PCIe); 0 means instantaneous transfer.
    pub host_mb_per_s: f64,
    /// A cap on the rate the device reads data for the host, in MB/s (10^6 bytes), on top of
    /// the link; 0 (the default) leaves reads uncapped. CSAL §6.1 throttles its bundle of four
    /// ZN540s to one P5316's 6 GB/s this way. Left out of the serialized configuration at its
    /// default, so results of devices without a cap stay byte-identical.
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub host_read_mb_per_s: f64,
    /// The same cap for data the host writes (CSAL §6.1: 2.5 GB/s); 0 leaves writes uncapped.
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub host_write_mb_per_s: f64,
    /// Controller time per command. The controller processes commands one at a time (one
    /// timeline per device), so this is also a ceiling of `1e9 / command_ns` commands per
    /// second; 0 models no controller time.
    pub command_ns: u64,
    /// DRAM write-buffer size; 0 writes through to NAND.
    pub buffer_bytes: u64,
    pub buffer_policy: BufferPolicy,
    /// `page` (default): the page-level FTL; `mv`: WAFLASH's multi-version FTL. Left out of
    /// the serialized configuration when `page`, so results of runs that do not use MV-FTL
    /// (whose files echo the configuration) stay byte-identical to those from before it.
    #[serde(skip_serializing_if = "FtlPolicy::is_page")]
    pub ftl_policy: FtlPolicy,
    /// WAFLASH §3.3's compaction region, in logical pages (mapping units): MV-FTL packs partial
    /// units of at most half a page from one region into one flash page, and PC-LRU destages
    /// such pages of one region together. 0 turns compaction off (MV-FTL of §3.2 alone, as in
    /// Fig. 13's comparison). The paper says only that the region "should be significantly
    /// larger than the page size"; 256 pages (2 MiB at 8 KiB) is flashrig's choice
    /// (docs/waflash.md). Used only with `ftl_policy = "mv"`; left out of the serialized
    /// configuration at its default, so results of other runs stay byte-identical.
    #[serde(skip_serializing_if = "is_default_compaction_region")]
    pub compaction_region_pages: u32,
    /// MV-FTL merges version chains in idle time (§3.2: "when SSDs are idle"), in the gap
    /// before a command that finds the device idle. `false` leaves merging to GC and to the
    /// read-modify-writes of small partial pages: fewer flash writes, more reads of older
    /// versions. The paper does not say how eagerly it merges; `flashrig reproduce waflash`
    /// runs Fig. 13 both ways. Left out of the serialized configuration at its default.
    #[serde(skip_serializing_if = "is_true")]
    pub mv_idle_merge: bool,
    /// Write-back (in replacement-policy order) keeps the units not yet being written back
    /// below this percentage of the buffer; the rest of the buffer holds units whose programs
    /// are in flight. A host write waits only when the whole buffer is occupied.
    pub buffer_flush_percent: u8,
    /// `true` (default): a write smaller than a mapping unit waits in the buffer, where later
    /// writes to the same unit merge into it, and is read-modify-written only if it is still
    /// partial at write-back. `false`: every write's unit leaves the buffer for NAND at once,
    /// read-modify-written on its own (csal-eurosys24.txt §3.1, Figure 5(a): the P5316 reads
    /// the 64 KB unit, updates 4 KB and writes the whole unit back), while the write is
    /// acknowledged from the power-protected buffer, which then holds only units being
    /// programmed. Needs `plp = true` and a buffer. Left out of the serialized configuration
    /// at its default, so results of other devices stay byte-identical.
    #[serde(skip_serializing_if = "is_true")]
    pub buffer_merge: bool,
    /// Power-loss protection: the buffer is written to NAND on power loss, so a crash loses
    /// nothing that was acknowledged.
    pub plp: bool,
    pub gc_policy: GcPolicy,
    /// Foreground GC: when a line must be opened and at most this many free dense lines are
    /// left, GC runs first and the triggering write waits for it.
    pub gc_foreground_free_lines: u32,
    /// Background GC: when a command arrives at an idle device with at most this many free
    /// dense lines, one line is collected in the idle time.
    pub gc_background_free_lines: u32,
    /// SLC cache size (data capacity of the blocks run in SLC mode); 0 disables it.
    pub slc_cache_bytes: u64,
    pub slc_evictor: EvictorPolicy,
    /// The evictor frees an SLC line when at most this many free SLC lines are left.
    pub slc_evict_free_lines: u32,
    /// `paced` (default): eviction work is interleaved with host SLC programs and done in
    /// idle time; `inline`: a whole victim is evicted at once in front of the host program
    /// that needs a line; `idle`: a full cache sends host writes to the dense area, and
    /// eviction runs only in idle time.
    pub slc_eviction: SlcEviction,
    /// `factor` of the transient-aware score (ScalaAFA sets it to 1).
    pub slc_transient_factor: f64,
    /// Whether host writes with the transient hint share the open SLC line with other host
    /// writes (`mixed`) or fill SLC lines of their own (`separate`). ScalaAFA (§5.5) does not
    /// say which its SSD did; experiments can run both. Without an SLC cache it has no effect.
    pub slc_transient_placement: TransientPlacement,
    /// Host metadata bytes stored in OOB with each logical block (0: none).
    pub md_bytes: u32,
    /// ScalaAFA's conversion vendor command (scalaafa-atc24.txt §5.3): the firmware reads `k`
    /// chunks into its DRAM, computes one parity row of them (data and per-block metadata) on
    /// its parity engine, writes it at a destination and invalidates the sources. Off (a stock
    /// SSD): the command answers `Unsupported` and `DeviceInfo.caps.convert` is false.
    pub vendor_convert: bool,
    /// Time the controller's XOR/Reed-Solomon engine takes per KiB of source data it reads
    /// (one engine per SSD; conversions queue on it). The default is ScalaAFA's FPGA engine
    /// (§6.1: 20 us for a 64 KiB parity chunk from 6 data chunks = 20,000 ns / 384 KiB).
    /// Used only with `vendor_convert`.
    pub convert_engine_ns_per_kib: f64,
}

/// ScalaAFA's XOR engine (scalaafa-atc24.txt §6.1): 20 us to compute a 64 KiB parity chunk
/// from 6 data chunks, i.e. 20,000 ns per 384 KiB of source data.
pub const SCALAAFA_ENGINE_NS_PER_KIB: f64 = 20_000.0 / 384.0;

impl Default for Firmware {
    fn default() -> Self {
        Firmware {
            block_bytes: 4096,
            iu_bytes: 4096,
            over_provisioning_percent: 25.0,
            queue_depth: 64,
            host_mb_per_s: 0.0,
            host_read_mb_per_s: 0.0,
            host_write_mb_per_s: 0.0,
            command_ns: 0,
            buffer_bytes: 256 * 1024,
            buffer_policy: BufferPolicy::Lru,
            ftl_policy: FtlPolicy::Page,
            compaction_region_pages: DEFAULT_COMPACTION_REGION_PAGES,
            mv_idle_merge: true,
            buffer_flush_percent: 50,
            buffer_merge: true,
            plp: false,
            gc_policy: GcPolicy::Greedy,
            gc_foreground_free_lines: 2,
            gc_background_free_lines: 4,
            slc_cache_bytes: 0,
            slc_evictor: EvictorPolicy::Fifo,
            slc_evict_free_lines: 1,
            slc_eviction: SlcEviction::Paced,
            slc_transient_factor: 1.0,
            slc_transient_placement: TransientPlacement::Mixed,
            md_bytes: 16,
            vendor_convert: false,
            convert_engine_ns_per_kib: SCALAAFA_ENGINE_NS_PER_KIB,
        }
    }
}

/// A zoned namespace (NVMe ZNS) in place of the conventional block interface: the firmware
/// maps each zone to a fixed set of erase blocks instead of running a page-mapping FTL with
/// garbage collection (docs/ssd.md, "Zoned namespace").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Zoned {
    /// Zone size (NVMe ZSZE): the LBA stride from one zone's start to the next.
    pub zone_bytes: u64,
    /// Zone capacity (ZCAP): the writable bytes of a zone, at most `zone_bytes`; the LBAs from
    /// the capacity to the zone size are a hole that reads as zeros and cannot be written.
    pub zone_capacity_bytes: u64,
    /// Zones that may be open at once (0: no limit).
    pub max_open_zones: u32,
    /// Zones that may be open or closed at once (0: no limit).
    pub max_active_zones: u32,
    /// Planes one zone is striped over, one erase block on each; 0 (the default) stripes
    /// every zone over every plane of the device.
    pub zone_planes: u32,
}

/// The WOM-v firmware (jaffer-thesis-2023.txt ch. 3; docs/womv.md, "The WOM-v SSD"): the
/// LightNVM-style FTL of `firmware::womv::ftl` over the device's lines as erase units, its
/// pages WOM-v coded, in place of the page map. Absent, the device has no WOM-v coding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Womv {
    /// A built-in code (`"wom-v(3,4)"`, `"wom-v(2,4)"`, `"wom-v(1,4)"`) or `"none"`: NO_WOM,
    /// the same LightNVM-style firmware with every page written once between erases (the
    /// thesis' baseline).
    pub code: String,
    /// `"default"`: relocate a victim's valid pages, then erase it only if some page has more
    /// cells at risk than the ECC threshold (§3.6.3); `"gc_opt"`: reuse it in place while it
    /// has `min_programmable_pages` programmable invalid pages (§3.6.4).
    pub gc: WomvGc,
    /// GC_OPT's minimum of programmable pages for reuse in place (0 behaves as 1).
    pub min_programmable_pages: u32,
    /// NR mode (§3.6.4): one generation per erase unit, no read before write.
    pub no_read: bool,
    /// Victim choice: `"greedy"` (most pages gained, LightNVM) or `"lrw"` (least recently
    /// written, the model of §3.7.10).
    pub victim: WomvVictim,
    /// Share of a page's cells the ECC recovers as erasures (§3.6.3: 3%).
    pub ecc_threshold_percent: f64,
    /// `"same_physical"` (default): the device's blocks hold k/n of the logical pages they
    /// would hold uncoded (§3.7's second setup); `"same_logical"`: the logical capacity of
    /// the uncoded device, over n/k times the erase units (§3.7's first setup; the extra
    /// erase units share the device's planes).
    pub space: WomvSpace,
    /// Timing-only payloads (`tag`, `none`) carry no bytes, so the cells are derived from
    /// synthetic data: the old content of the flash page a write programs, each bit flipped
    /// with this probability (in 1/256 steps; random data over an erased page), as the
    /// thesis' data-buffer micro-benchmark changes its buffer between fills (§3.7.1).
    /// Unused with `payload = "full"`.
    pub bit_change_percent: f64,
    /// Seed of that synthetic data.
    pub data_seed: u64,
    /// §3.7.4's performance assumption: "increasing the logical page size to 2x and 4x ...
    /// for WOM-v(2,4) and WOM-v(1,4)", with "the time to program 4K, 8K and 16K pages ...
    /// the same". `true` times a coded page as one flash page of its n/k mapping units (one
    /// parallel unit, one page time, all its bytes over the channel); `false` (default)
    /// programs its n/k flash pages on n/k parallel units, as the media is.
    pub wide_pages: bool,
}

impl Default for Womv {
    fn default() -> Self {
        Womv {
            code: "wom-v(2,4)".into(),
            gc: WomvGc::Default,
            min_programmable_pages: 1,
            no_read: false,
            victim: WomvVictim::Greedy,
            ecc_threshold_percent: 3.0,
            space: WomvSpace::SamePhysical,
            bit_change_percent: 50.0,
            data_seed: 1,
            wide_pages: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WomvGc {
    Default,
    GcOpt,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WomvVictim {
    Greedy,
    Lrw,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WomvSpace {
    SamePhysical,
    SameLogical,
}

impl Womv {
    /// The code, `None` for NO_WOM; the message names the key.
    pub fn resolve_code(&self) -> Result<Option<crate::firmware::womv::WomCode>, String> {
        if self.code == "none" {
            return Ok(None);
        }
        crate::firmware::womv::WomCode::builtin(&self.code).map(Some).ok_or_else(|| {
            format!(
                "womv.code = \"{}\": not a code; use \"none\" or one of {}",
                self.code,
                crate::firmware::womv::WomCode::BUILTIN.join(", ")
            )
        })
    }
}

/// The zone layout a configuration gives: how zones map onto the media.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneLayout {
    /// Planes a zone is striped over (one block on each).
    pub zone_planes: u32,
    /// Groups of `zone_planes` planes: zone `z` lives in group `z % plane_groups`, in block
    /// `z / plane_groups` of each of the group's planes.
    pub plane_groups: u32,
    pub num_zones: u64,
    /// Host blocks from one zone's start to the next (ZSZE).
    pub zone_blocks: u64,
    /// Writable host blocks of a zone (ZCAP).
    pub zone_capacity_blocks: u64,
    /// Physical bytes of a zone's erase blocks.
    pub zone_physical_bytes: u64,
}

impl Zoned {
    /// The zone layout over `g` with host blocks of `block_bytes`, or what is wrong.
    pub fn layout(
        &self,
        g: &Geometry,
        block_bytes: u32,
        iu_bytes: u32,
    ) -> Result<ZoneLayout, String> {
        let planes = g.planes();
        let zone_planes = if self.zone_planes == 0 { planes } else { self.zone_planes };
        if !planes.is_multiple_of(zone_planes) {
            return Err(format!(
                "zoned.zone_planes = {zone_planes} must divide the device's {planes} planes"
            ));
        }
        // Saturating, so that absurd geometries reach the checks below instead of overflowing.
        let zone_physical_bytes = (zone_planes as u64)
            .saturating_mul(g.pages_per_block as u64)
            .saturating_mul(g.page_bytes as u64);
        let iu = iu_bytes as u64;
        if self.zone_capacity_bytes == 0 || !self.zone_capacity_bytes.is_multiple_of(iu) {
            return Err(format!(
                "zoned.zone_capacity_bytes = {} must be a positive multiple of firmware.iu_bytes \
                 = {iu_bytes}",
                self.zone_capacity_bytes
            ));
        }
        if self.zone_bytes < self.zone_capacity_bytes || !self.zone_bytes.is_multiple_of(iu) {
            return Err(format!(
                "zoned.zone_bytes = {} must be a multiple of firmware.iu_bytes = {iu_bytes} and \
                 at least zoned.zone_capacity_bytes = {}",
                self.zone_bytes, self.zone_capacity_bytes
            ));
        }
        if self.zone_capacity_bytes > zone_physical_bytes {
            return Err(format!(
                "zoned.zone_capacity_bytes = {} exceeds the {zone_physical_bytes} bytes of a \
                 zone's erase blocks ({zone_planes} planes x one block of {} pages x {} bytes)",
                self.zone_capacity_bytes, g.pages_per_block, g.page_bytes
            ));
        }
        if self.max_open_zones > 0
            && self.max_active_zones > 0
            && self.max_open_zones > self.max_active_zones
        {
            return Err(format!(
                "zoned.max_open_zones = {} exceeds zoned.max_active_zones = {}",
                self.max_open_zones, self.max_active_zones
            ));
        }
        let plane_groups = planes / zone_planes;
        Ok(ZoneLayout {
            zone_planes,
            plane_groups,
            num_zones: plane_groups as u64 * g.blocks_per_plane as u64,
            zone_blocks: self.zone_bytes / block_bytes as u64,
            zone_capacity_blocks: self.zone_capacity_bytes / block_bytes as u64,
            zone_physical_bytes,
        })
    }
}

/// An emulated SSD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SsdConfig {
    /// The preset this configuration started from (informational once resolved).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub payload: PayloadMode,
    pub timing: Timing,
    /// A NAND image file that keeps the media across runs (`media::image`): created when
    /// missing, loaded and recovered from (as after a power loss) when present. Without it the
    /// media lives in memory only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backing: Option<std::path::PathBuf>,
    pub geometry: Geometry,
    pub nand: Nand,
    pub firmware: Firmware,
    /// A zoned namespace (NVMe ZNS); absent, the conventional block interface. Left out of
    /// the serialized configuration when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zoned: Option<Zoned>,
    /// The WOM-v firmware; absent, the device codes nothing. Left out of the serialized
    /// configuration when absent (boxed: most devices have none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub womv: Option<Box<Womv>>,
    /// Where each number comes from: key path -> citation.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, String>,
}

impl Default for SsdConfig {
    fn default() -> Self {
        SsdConfig {
            preset: None,
            name: None,
            payload: PayloadMode::Full,
            timing: Timing::Paced,
            backing: None,
            geometry: Geometry::default(),
            nand: Nand::default(),
            firmware: Firmware::default(),
            zoned: None,
            womv: None,
            sources: BTreeMap::new(),
        }
    }
}

/// The presets compiled into flashrig: (name, TOML text).
pub const PRESETS: &[(&str, &str)] = &[
    ("tiny", include_str!("../../../configs/presets/ssd/tiny.toml")),
    ("tiny-slc", include_str!("../../../configs/presets/ssd/tiny-slc.toml")),
    ("tiny-qlc", include_str!("../../../configs/presets/ssd/tiny-qlc.toml")),
    ("scalaafa-femu", include_str!("../../../configs/presets/ssd/scalaafa-femu.toml")),
    ("samsung-980pro", include_str!("../../../configs/presets/ssd/samsung-980pro.toml")),
    ("micron-waflash", include_str!("../../../configs/presets/ssd/micron-waflash.toml")),
    ("micron-waflash-4k", include_str!("../../../configs/presets/ssd/micron-waflash-4k.toml")),
    ("micron-waflash-16k", include_str!("../../../configs/presets/ssd/micron-waflash-16k.toml")),
    ("micron-waflash-tlc", include_str!("../../../configs/presets/ssd/micron-waflash-tlc.toml")),
    ("p5800x", include_str!("../../../configs/presets/ssd/p5800x.toml")),
    ("p5316-qlc", include_str!("../../../configs/presets/ssd/p5316-qlc.toml")),
    ("qlc-femu", include_str!("../../../configs/presets/ssd/qlc-femu.toml")),
    ("tiny-zns", include_str!("../../../configs/presets/ssd/tiny-zns.toml")),
    ("zn540", include_str!("../../../configs/presets/ssd/zn540.toml")),
    ("zn540x4", include_str!("../../../configs/presets/ssd/zn540x4.toml")),
    ("p5316-zns", include_str!("../../../configs/presets/ssd/p5316-zns.toml")),
];

/// The names of the compiled-in presets.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|(n, _)| *n).collect()
}

/// A preset's TOML table, or an error naming the known presets. A preset may itself start
/// from another (`preset = "base"` in its file: a variant states only what it changes, with
/// its sources); the base's table comes first and the variant's keys replace its keys.
pub fn preset_table(name: &str) -> Result<toml::Table, String> {
    let text = PRESETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t).ok_or_else(|| {
        format!("unknown SSD preset \"{name}\"; known presets: {}", preset_names().join(", "))
    })?;
    let mut table = text.parse::<toml::Table>().map_err(|e| format!("preset {name}: {e}"))?;
    match table.remove("preset") {
        None => Ok(table),
        Some(toml::Value::String(base)) if base != name => {
            let mut merged = preset_table(&base)?;
            merge_tables(&mut merged, &table);
            Ok(merged)
        }
        Some(other) => {
            Err(format!("preset {name}: its base preset = {other} is not another preset"))
        }
    }
}

/// Merges `over` into `base` key by key (tables recursively, everything else replaced).
pub fn merge_tables(base: &mut toml::Table, over: &toml::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge_tables(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

impl SsdConfig {
    /// Builds a configuration from a TOML table that may name a `preset`: the preset's table
    /// first, then the keys given here over it.
    pub fn resolve(table: &toml::Table) -> Result<SsdConfig, String> {
        let mut merged = match table.get("preset") {
            Some(toml::Value::String(p)) => preset_table(p)?,
            Some(other) => return Err(format!("preset = {other}: expected a preset name")),
            None => toml::Table::new(),
        };
        merge_tables(&mut merged, table);
        let cfg: SsdConfig = merged.try_into().map_err(|e: toml::de::Error| e.to_string())?;
        Ok(cfg)
    }

    /// A preset with nothing overridden.
    pub fn preset(name: &str) -> Result<SsdConfig, String> {
        let mut t = toml::Table::new();
        t.insert("preset".into(), toml::Value::String(name.into()));
        SsdConfig::resolve(&t)
    }

    /// Checks every relation the firmware relies on; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        let g = &self.geometry;
        let n = &self.nand;
        let f = &self.firmware;
        for (key, v) in [
            ("geometry.channels", g.channels),
            ("geometry.chips_per_channel", g.chips_per_channel),
            ("geometry.dies_per_chip", g.dies_per_chip),
            ("geometry.planes_per_die", g.planes_per_die),
            ("geometry.blocks_per_plane", g.blocks_per_plane),
            ("geometry.pages_per_block", g.pages_per_block),
            ("firmware.queue_depth", f.queue_depth),
        ] {
            if v == 0 {
                return Err(format!("{key} must be at least 1"));
            }
        }
        if self.backing.is_some() && self.payload == PayloadMode::None {
            return Err("backing: a NAND image keeps the payload, and payload = \"none\" has none                         (use \"full\" or \"tag\")"
                .into());
        }
        // MV-FTL keeps each partial version's sector bitmap in the slot's OOB, and the NAND
        // image file's slot header (docs/formats.md) has no field for it yet: a device loaded
        // from a file would lose the bitmaps and read partial versions as whole units.
        if self.backing.is_some() && f.ftl_policy == FtlPolicy::Mv {
            return Err("backing: firmware.ftl_policy = \"mv\" cannot keep a NAND image file yet \
                        (the image's slot header has no field for a version's sector bitmap); \
                        use ftl_policy = \"page\" or drop backing"
                .into());
        }
        if g.planes() > 1 << 16 {
            return Err(format!("geometry: {} planes is more than 65536", g.planes()));
        }
        for (key, v) in [("geometry.page_bytes", g.page_bytes), ("firmware.iu_bytes", f.iu_bytes)] {
            if !v.is_power_of_two() || !(512..=1 << 20).contains(&v) {
                return Err(format!("{key} = {v}: must be a power of two from 512 to 1 MiB"));
            }
        }
        if f.block_bytes != 512 && f.block_bytes != 4096 {
            return Err(format!("firmware.block_bytes = {}: must be 512 or 4096", f.block_bytes));
        }
        if f.iu_bytes < f.block_bytes {
            return Err(format!(
                "firmware.iu_bytes = {} is smaller than firmware.block_bytes = {}",
                f.iu_bytes, f.block_bytes
            ));
        }
        if f.iu_bytes / f.block_bytes > 128 {
            return Err(format!(
                "firmware.iu_bytes / firmware.block_bytes = {} blocks: at most 128 blocks per \
                 mapping unit are supported",
                f.iu_bytes / f.block_bytes
            ));
        }
        let bits = n.cell.bits();
        if !g.pages_per_block.is_multiple_of(bits) {
            return Err(format!(
                "geometry.pages_per_block = {} is not a multiple of {bits} (bits per {} cell)",
                g.pages_per_block,
                n.cell.name()
            ));
        }
        if f.iu_bytes > g.page_bytes {
            let pages = f.iu_bytes / g.page_bytes;
            if !(g.planes() * (g.pages_per_block / bits)).is_multiple_of(pages) {
                return Err(format!(
                    "firmware.iu_bytes = {} spans {pages} pages, which must divide the pages of \
                     an SLC-mode line ({} planes x {} pages)",
                    f.iu_bytes,
                    g.planes(),
                    g.pages_per_block / bits
                ));
            }
        }
        for (key, list) in [("nand.read_ns", &n.read_ns), ("nand.program_ns", &n.program_ns)] {
            if list.len() != bits as usize {
                return Err(format!(
                    "{key} has {} entries; a {} cell has {bits} page types",
                    list.len(),
                    n.cell.name()
                ));
            }
        }
        if !(n.channel_mb_per_s > 0.0 && n.channel_mb_per_s.is_finite()) {
            return Err(format!(
                "nand.channel_mb_per_s = {}: must be positive",
                n.channel_mb_per_s
            ));
        }
        for (key, v) in [
            ("firmware.host_mb_per_s", f.host_mb_per_s),
            ("firmware.host_read_mb_per_s", f.host_read_mb_per_s),
            ("firmware.host_write_mb_per_s", f.host_write_mb_per_s),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(format!("{key} = {v}: must be 0 or more"));
            }
        }
        if let Some(z) = &self.zoned {
            z.layout(g, f.block_bytes, f.iu_bytes)?;
            // The zoned firmware has no page map, so nothing that relies on one: no SLC cache
            // to evict from, no MV-FTL versions, no conversion command (it invalidates
            // sources in place), no image file (its format records lines, not zones).
            for (bad, msg) in [
                (f.slc_cache_bytes > 0, "firmware.slc_cache_bytes must be 0"),
                (f.ftl_policy != FtlPolicy::Page, "firmware.ftl_policy must be \"page\""),
                (f.vendor_convert, "firmware.vendor_convert must be false"),
                (self.backing.is_some(), "backing (a NAND image file) is not supported"),
                // Each open zone stages its partly filled page in the controller (docs/ssd.md,
                // "Zoned namespace"); a second DRAM buffer in front of it would only reorder.
                (
                    f.buffer_bytes > 0,
                    "firmware.buffer_bytes must be 0 (zones stage their own pages)",
                ),
            ] {
                if bad {
                    return Err(format!("zoned: {msg} on a zoned namespace"));
                }
            }
        }
        if let Some(w) = &self.womv {
            let code = w.resolve_code()?;
            if let Some(c) = &code {
                // A code's levels are the cell's voltage levels.
                if c.level_bits() as u32 != bits {
                    return Err(format!(
                        "womv.code = \"{}\" needs cells of {} bits; nand.cell = \"{}\" holds {bits}",
                        w.code,
                        c.level_bits(),
                        n.cell.name()
                    ));
                }
            }
            for (bad, msg) in [
                (self.zoned.is_some(), "a zoned namespace ([zoned]) is not supported"),
                (f.ftl_policy != FtlPolicy::Page, "firmware.ftl_policy must be \"page\""),
                (f.slc_cache_bytes > 0, "firmware.slc_cache_bytes must be 0"),
                (f.vendor_convert, "firmware.vendor_convert must be false"),
                (self.backing.is_some(), "backing (a NAND image file) is not supported"),
                (
                    f.iu_bytes < g.page_bytes,
                    "firmware.iu_bytes must be at least geometry.page_bytes (a coded page \
                     is programmed in whole flash pages)",
                ),
                (w.no_read && code.is_none(), "womv.no_read = true needs a code"),
                (code.is_none() && w.gc == WomvGc::GcOpt, "womv.gc = \"gc_opt\" needs a code"),
                (
                    !(0.0..=50.0).contains(&w.ecc_threshold_percent),
                    "womv.ecc_threshold_percent must be from 0 to 50",
                ),
                (
                    !(0.0..=100.0).contains(&w.bit_change_percent),
                    "womv.bit_change_percent must be from 0 to 100",
                ),
            ] {
                if bad {
                    return Err(format!("womv: {msg}"));
                }
            }
        }
        if f.ftl_policy == FtlPolicy::InPlace {
            // A unit's slot is rewritten alone, so a page must not hold several units (each
            // write would have to read and rewrite its neighbours); an SLC cache and the image
            // file's line records belong to the log-structured FTL.
            for (bad, msg) in [
                (
                    f.iu_bytes < g.page_bytes,
                    "firmware.iu_bytes must be at least geometry.page_bytes",
                ),
                (f.slc_cache_bytes > 0, "firmware.slc_cache_bytes must be 0"),
                (self.backing.is_some(), "backing (a NAND image file) is not supported"),
            ] {
                if bad {
                    return Err(format!("firmware.ftl_policy = \"in_place\": {msg}"));
                }
            }
        }
        if !(0.5..=400.0).contains(&f.over_provisioning_percent) {
            return Err(format!(
                "firmware.over_provisioning_percent = {}: must be from 0.5 to 400",
                f.over_provisioning_percent
            ));
        }
        if !(1..=100).contains(&f.buffer_flush_percent) {
            return Err(format!(
                "firmware.buffer_flush_percent = {}: must be from 1 to 100",
                f.buffer_flush_percent
            ));
        }
        if !f.buffer_merge {
            // Acknowledging a write before its program is done is safe only with capacitors
            // to finish it; the model keeps the unit's new contents from the moment it is
            // written, so without them it would keep a write a power loss must lose.
            if !f.plp {
                return Err("firmware.buffer_merge = false needs plp = true (writes are \
                            acknowledged before their programs are done)"
                    .into());
            }
            if f.buffer_bytes == 0 {
                return Err("firmware.buffer_merge = false needs a write buffer \
                            (firmware.buffer_bytes > 0) to hold the units being programmed"
                    .into());
            }
        }
        if f.md_bytes > 0 && f.md_bytes < 16 {
            return Err(format!(
                "firmware.md_bytes = {}: host metadata is 0 or at least 16 bytes per block",
                f.md_bytes
            ));
        }
        if f.gc_foreground_free_lines < 1 {
            return Err("firmware.gc_foreground_free_lines must be at least 1".into());
        }
        if f.gc_background_free_lines < f.gc_foreground_free_lines {
            return Err(format!(
                "firmware.gc_background_free_lines = {} is below gc_foreground_free_lines = {}",
                f.gc_background_free_lines, f.gc_foreground_free_lines
            ));
        }
        if !(f.slc_transient_factor.is_finite() && f.slc_transient_factor >= 0.0) {
            return Err("firmware.slc_transient_factor must be 0 or more".into());
        }
        // A bound of 1 s per KiB keeps every engine time (KiB of source times this) far from
        // overflowing u64 nanoseconds for any command that fits a device.
        if !(f.convert_engine_ns_per_kib.is_finite()
            && (0.0..=1e9).contains(&f.convert_engine_ns_per_kib))
        {
            return Err(format!(
                "firmware.convert_engine_ns_per_kib = {}: must be from 0 to 1e9",
                f.convert_engine_ns_per_kib
            ));
        }
        // OOB budget: each mapping unit in a page keeps its logical number (4 bytes), its write
        // sequence number (8), a flag byte, and the host metadata of its blocks.
        let slots_per_page = (g.page_bytes / f.iu_bytes).max(1);
        let blocks_per_iu = f.iu_bytes / f.block_bytes;
        // MV-FTL adds a version's sector bitmap, one bit per host block of the unit.
        let bitmap = if f.ftl_policy == FtlPolicy::Mv { blocks_per_iu.div_ceil(8) } else { 0 };
        let per_slot = crate::media::OOB_FTL_BYTES_PER_SLOT
            + bitmap
            + f.md_bytes * blocks_per_iu / (f.iu_bytes / g.page_bytes).max(1);
        if slots_per_page * per_slot > g.oob_bytes_per_page {
            return Err(format!(
                "geometry.oob_bytes_per_page = {}: a page holds {slots_per_page} mapping unit(s) \
                 needing {per_slot} OOB bytes each (reverse map {} + host metadata, and with \
                 ftl_policy = \"mv\" a sector bitmap); raise it or lower firmware.md_bytes",
                g.oob_bytes_per_page,
                crate::media::OOB_FTL_BYTES_PER_SLOT
            ));
        }
        crate::media::Layout::new(self).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_parses_and_validates() {
        for name in preset_names() {
            let cfg = SsdConfig::preset(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            cfg.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!cfg.sources.is_empty(), "preset {name} cites no sources");
        }
    }

    #[test]
    fn a_preset_variant_starts_from_its_base_and_changes_only_what_it_states() {
        let base = SsdConfig::preset("micron-waflash").unwrap();
        for (name, page, oob) in
            [("micron-waflash-4k", 4096, 128), ("micron-waflash-16k", 16384, 512)]
        {
            let v = SsdConfig::preset(name).unwrap();
            assert_eq!((v.geometry.page_bytes, v.firmware.iu_bytes), (page, page), "{name}");
            assert_eq!(v.geometry.oob_bytes_per_page, oob, "{name}");
            assert_eq!(v.geometry.channels, base.geometry.channels, "{name}: the base's geometry");
            assert_eq!(v.nand, base.nand, "{name}: the base's timings");
            assert_eq!(v.firmware.block_bytes, 512, "{name}");
            // The base's sources stay, and the variant's replace the keys it changed.
            assert_eq!(v.sources.get("nand.read_ns"), base.sources.get("nand.read_ns"));
            assert_ne!(
                v.sources.get("geometry.page_bytes"),
                base.sources.get("geometry.page_bytes")
            );
        }
        assert_eq!(
            SsdConfig::preset("micron-waflash-4k").unwrap().geometry.physical_bytes(),
            256 << 30,
            "Table 1's 256 GB"
        );
        // §5.4's TLC chip: only the latencies change.
        let tlc = SsdConfig::preset("micron-waflash-tlc").unwrap();
        assert_eq!((tlc.nand.read_ns[0], tlc.nand.program_ns[0]), (75_000, 1_200_000));
        assert_eq!(tlc.nand.erase_ns, 4_500_000);
        assert_eq!((tlc.geometry, tlc.firmware), (base.geometry.clone(), base.firmware.clone()));
    }

    #[test]
    fn only_scalaafas_ssd_has_the_conversion_command() {
        for name in preset_names() {
            let cfg = SsdConfig::preset(name).unwrap();
            assert_eq!(cfg.firmware.vendor_convert, name == "scalaafa-femu", "{name}");
        }
        let f = SsdConfig::preset("scalaafa-femu").unwrap().firmware;
        // 20 us for 6 x 64 KiB of source (scalaafa-atc24.txt §6.1).
        assert!((f.convert_engine_ns_per_kib * 384.0 - 20_000.0).abs() < 1e-6);
        assert_eq!(f.convert_engine_ns_per_kib, SCALAAFA_ENGINE_NS_PER_KIB);
        let mut cfg = SsdConfig::preset("tiny").unwrap();
        for bad in [-1.0, f64::NAN, f64::INFINITY, 2e9] {
            cfg.firmware.convert_engine_ns_per_kib = bad;
            assert!(cfg.validate().unwrap_err().contains("firmware.convert_engine_ns_per_kib"));
        }
    }

    #[test]
    fn derived_device_costs_follow_their_arithmetic() {
        // scalaafa-femu: 96 LUNs x 4 KiB pages programming in parallel at §6.1's configured
        // 4890 MB/s peak write.
        let femu = SsdConfig::preset("scalaafa-femu").unwrap();
        let luns = femu.geometry.planes() as f64;
        let page = femu.geometry.page_bytes as f64;
        for &p in &femu.nand.program_ns {
            assert!((luns * page / (p as f64 * 1e-9) / 1e6 - 4890.0).abs() < 0.1, "{p} ns");
        }
        // Controller times from peak random 4 KiB IOPS: 1 s / rating.
        for (name, iops) in [("samsung-980pro", 1e6f64), ("p5800x", 1.5e6), ("p5316-qlc", 8e5)] {
            let f = SsdConfig::preset(name).unwrap().firmware;
            assert_eq!(f.command_ns, (1e9 / iops).round() as u64, "{name}");
        }
        // p5800x: the brief's ~5 us latency is controller + media + two 4 KiB transfers (520 ns
        // each at 7876.9 MB/s).
        let x = SsdConfig::preset("p5800x").unwrap();
        assert_eq!(x.nand.read_ns[0] + x.firmware.command_ns + 2 * 520, 5000);
        // Emulators without a host link or controller time keep none.
        for name in ["scalaafa-femu", "qlc-femu"] {
            let f = SsdConfig::preset(name).unwrap().firmware;
            assert_eq!((f.host_mb_per_s, f.command_ns), (0.0, 0), "{name}");
        }
    }

    #[test]
    fn overrides_replace_preset_keys() {
        let t: toml::Table =
            "preset = \"tiny\"\n[firmware]\nover_provisioning_percent = 50.0\n".parse().unwrap();
        let cfg = SsdConfig::resolve(&t).unwrap();
        assert_eq!(cfg.firmware.over_provisioning_percent, 50.0);
        let tiny = SsdConfig::preset("tiny").unwrap();
        assert_eq!(cfg.geometry, tiny.geometry);
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut cfg = SsdConfig::preset("tiny").unwrap();
        cfg.nand.read_ns.pop();
        assert!(cfg.validate().unwrap_err().contains("nand.read_ns"));
        let mut cfg = SsdConfig::preset("tiny").unwrap();
        cfg.firmware.iu_bytes = 3000;
        assert!(cfg.validate().unwrap_err().contains("firmware.iu_bytes"));
        let t: toml::Table = "preset = \"nope\"".parse().unwrap();
        assert!(SsdConfig::resolve(&t).unwrap_err().contains("known presets"));
        let t: toml::Table = "[geometry]\nchanels = 3".parse().unwrap();
        assert!(SsdConfig::resolve(&t).unwrap_err().contains("chanels"));
    }

    #[test]
    fn transient_placement_is_mixed_by_default_and_names_its_key_when_wrong() {
        for name in preset_names() {
            let cfg = SsdConfig::preset(name).unwrap();
            assert_eq!(cfg.firmware.slc_transient_placement, TransientPlacement::Mixed, "{name}");
        }
        let t: toml::Table =
            "preset = \"tiny-slc\"\n[firmware]\nslc_transient_placement = \"separate\"\n"
                .parse()
                .unwrap();
        let cfg = SsdConfig::resolve(&t).unwrap();
        assert_eq!(cfg.firmware.slc_transient_placement, TransientPlacement::Separate);
        let t: toml::Table = "[firmware]\nslc_transient_placement = \"apart\"\n".parse().unwrap();
        let e = SsdConfig::resolve(&t).unwrap_err();
        assert!(e.contains("slc_transient_placement") && e.contains("separate"), "{e}");
    }

    #[test]
    fn slc_eviction_is_paced_by_default_and_inline_or_idle_on_request() {
        // ScalaAFA's FEMU device takes its reference SSD's TurboWrite behaviour (the preset's
        // source); every other preset keeps the default.
        for name in preset_names() {
            let cfg = SsdConfig::preset(name).unwrap();
            let want = if name == "scalaafa-femu" { SlcEviction::Idle } else { SlcEviction::Paced };
            assert_eq!(cfg.firmware.slc_eviction, want, "{name}");
        }
        let t: toml::Table =
            "preset = \"tiny-slc\"\n[firmware]\nslc_eviction = \"inline\"\n".parse().unwrap();
        assert_eq!(SsdConfig::resolve(&t).unwrap().firmware.slc_eviction, SlcEviction::Inline);
        let t: toml::Table = "[firmware]\nslc_eviction = \"lazy\"\n".parse().unwrap();
        let e = SsdConfig::resolve(&t).unwrap_err();
        assert!(e.contains("slc_eviction") && e.contains("paced"), "{e}");
    }

    #[test]
    fn zoned_presets_follow_their_sources() {
        let zl = |name: &str| {
            let c = SsdConfig::preset(name).unwrap();
            let z = c.zoned.clone().unwrap_or_else(|| panic!("{name} is zoned"));
            (c.clone(), z.layout(&c.geometry, c.firmware.block_bytes, c.firmware.iu_bytes).unwrap())
        };
        // ZN540: 1077 MiB zones 2 GiB apart, 14 open and active, at least 4 TB.
        let (c, l) = zl("zn540");
        assert_eq!((l.zone_blocks, l.zone_capacity_blocks), (512 << 10, 1077 << 8));
        assert_eq!(l.num_zones, 3542);
        assert!(l.num_zones * l.zone_capacity_blocks * 4096 >= 4_000_000_000_000);
        assert!(l.zone_physical_bytes >= 1077 << 20);
        let z = c.zoned.unwrap();
        assert_eq!((z.max_open_zones, z.max_active_zones), (14, 14));
        // The bundle: four ZN540s' zones, throttled as CSAL §6.1 says.
        let (b, bl) = zl("zn540x4");
        assert_eq!(bl.num_zones, 4 * 3542);
        assert_eq!(bl.zone_capacity_blocks, l.zone_capacity_blocks);
        assert_eq!(
            (b.firmware.host_read_mb_per_s, b.firmware.host_write_mb_per_s),
            (6000.0, 2500.0)
        );
        // p5316-zns: the p5316-qlc media, 1 GiB zones.
        let (p, pl) = zl("p5316-zns");
        let q = SsdConfig::preset("p5316-qlc").unwrap();
        assert_eq!((p.geometry, p.nand), (q.geometry, q.nand));
        assert_eq!(pl.zone_blocks * 4096, 1 << 30);
        // Nothing else is zoned or throttled.
        for name in preset_names() {
            let c = SsdConfig::preset(name).unwrap();
            let zoned = ["tiny-zns", "zn540", "zn540x4", "p5316-zns"].contains(&name);
            assert_eq!(c.zoned.is_some(), zoned, "{name}");
            if name != "zn540x4" {
                assert_eq!(
                    (c.firmware.host_read_mb_per_s, c.firmware.host_write_mb_per_s),
                    (0.0, 0.0)
                );
            }
        }
    }

    #[test]
    fn new_keys_are_left_out_of_serialized_configurations_at_their_defaults() {
        // Results echo their configuration, so devices without zones or caps must serialise as
        // they did before the keys existed.
        let shown = toml::to_string(&SsdConfig::preset("tiny").unwrap()).unwrap();
        for key in ["zoned", "host_read_mb_per_s", "host_write_mb_per_s"] {
            assert!(!shown.contains(key), "{key} in {shown}");
        }
        let shown = toml::to_string(&SsdConfig::preset("zn540x4").unwrap()).unwrap();
        let back = SsdConfig::resolve(&shown.parse().unwrap()).unwrap();
        assert_eq!(back, SsdConfig::preset("zn540x4").unwrap());
    }

    #[test]
    fn bad_zoned_values_name_their_key() {
        let bad = |edit: &dyn Fn(&mut SsdConfig), key: &str| {
            let mut c = SsdConfig::preset("tiny-zns").unwrap();
            edit(&mut c);
            let e = c.validate().unwrap_err();
            assert!(e.contains(key), "{key}: {e}");
        };
        bad(&|c| c.zoned.as_mut().unwrap().zone_capacity_bytes = 3 << 20, "zone_capacity_bytes");
        bad(&|c| c.zoned.as_mut().unwrap().zone_capacity_bytes = 1000, "zone_capacity_bytes");
        bad(&|c| c.zoned.as_mut().unwrap().zone_bytes = 1 << 20, "zoned.zone_bytes");
        bad(&|c| c.zoned.as_mut().unwrap().zone_planes = 3, "zone_planes");
        bad(&|c| c.zoned.as_mut().unwrap().max_open_zones = 9, "max_open_zones");
        bad(&|c| c.firmware.buffer_bytes = 1 << 20, "buffer_bytes");
        bad(&|c| c.firmware.slc_cache_bytes = 1 << 20, "slc_cache_bytes");
        bad(&|c| c.firmware.ftl_policy = FtlPolicy::Mv, "ftl_policy");
        bad(&|c| c.firmware.host_write_mb_per_s = -1.0, "host_write_mb_per_s");
        // Two zones per plane group: a zone over 2 of tiny-zns's 4 planes.
        let mut c = SsdConfig::preset("tiny-zns").unwrap();
        c.zoned.as_mut().unwrap().zone_planes = 2;
        c.zoned.as_mut().unwrap().zone_capacity_bytes = 768 << 10;
        c.validate().unwrap();
    }

    #[test]
    fn mv_ftl_refuses_an_image_file_and_allows_whole_block_units() {
        let mut cfg = SsdConfig::preset("micron-waflash").unwrap();
        cfg.firmware.ftl_policy = FtlPolicy::Mv;
        cfg.validate().unwrap();
        cfg.backing = Some("x.img".into());
        let e = cfg.validate().unwrap_err();
        assert!(e.contains("ftl_policy") && e.contains("bitmap"), "{e}");
        // One host block per unit: no unit is ever partial, so MV-FTL has nothing to do, and
        // the configuration is valid.
        let mut cfg = SsdConfig::preset("tiny").unwrap();
        cfg.firmware.ftl_policy = FtlPolicy::Mv;
        cfg.validate().unwrap();
        let t: toml::Table = "preset = \"tiny\"\n[firmware]\nftl_policy = \"mv\"".parse().unwrap();
        assert_eq!(SsdConfig::resolve(&t).unwrap().firmware.ftl_policy, FtlPolicy::Mv);
    }
}
