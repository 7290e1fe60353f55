//! The run configuration: which runtime, which device stack, which workload.
//!
//! Every option has a default (see [`Config::default`] and `flashrig config show`), a TOML file
//! overrides what it names, and unknown keys are errors so a typo never silently does nothing.

use std::ops::Range;
use std::path::{Path, PathBuf};

use flashrig_devices::IoEngine;
use flashrig_engines::inject::FaultConfig;
use flashrig_engines::wbcache::{CleaningPolicy, SeqCutoffPolicy};
use flashrig_runtime::RuntimeKind;
use flashrig_ssd::SsdConfig;
use serde::{Deserialize, Serialize};

use crate::distribution::Distribution;
use crate::error::Error;
use crate::replay::{PreconditionConfig, ReplayConfig};
use crate::size::{BlockSizeMix, Size};

/// The built-in default configuration, shown by `flashrig config show` and run by
/// `flashrig run` without a file.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../../../configs/default.toml");

/// Requests in flight across all jobs: each holds a buffer and a task, so the product of jobs
/// and queue depth is bounded to keep a typo from exhausting memory.
pub const MAX_IN_FLIGHT: u64 = 1 << 20;

/// The most requests one job keeps in flight (`workload.iodepth`, fio's `iodepth`).
pub const MAX_IODEPTH: u64 = 65_536;

/// The most jobs a workload runs (`workload.jobs`, fio's `numjobs`).
pub const MAX_JOBS: u64 = 4096;

/// The longest ramp (`workload.ramp_ms`, fio's `ramp_time`): one day, so that the ramp's end
/// in nanoseconds cannot overflow and a typo cannot make a run that never measures.
pub const MAX_RAMP_MS: u64 = 24 * 3600 * 1000;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Seed of every random choice (workload offsets, data patterns, simulated faults).
    pub seed: u64,
    /// `sim` (virtual clock, deterministic) or `real` (threads, real clock).
    pub runtime: RuntimeKind,
    /// Reactors (cores) the runtime runs.
    pub reactors: usize,
    pub device: DeviceConfig,
    pub workload: WorkloadConfig,
    /// Bring the stack to steady state before measuring (fill, random overwrite).
    pub precondition: PreconditionConfig,
    /// Replay a block trace instead of running `workload`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayConfig>,
    /// Loads that run one after another on the same stack after one preconditioning, each
    /// measured on its own (`[[phase]]` tables, in order). CSAL's evaluation warms its devices
    /// up once and then runs its writes, reads and mixed loads in turn (csal-eurosys24.txt
    /// §6.2), and a phased run does the same: later phases find the state earlier ones left.
    /// With phases, `[workload]` is unused (each phase gives its own) and the run has one
    /// result per phase. Left out of the effective configuration when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub phase: Vec<PhaseConfig>,
}

/// One load of a phased run (`[[phase]]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseConfig {
    /// Names the phase in the summary and in its result file's name (letters, digits, `-`,
    /// `_`, `.` and `+`), unique within the run.
    pub name: String,
    /// The phase's workload, a whole `[workload]` table (defaults as there).
    #[serde(default)]
    pub workload: WorkloadConfig,
}

/// The most phases of one run.
pub const MAX_PHASES: usize = 1024;

impl Default for Config {
    fn default() -> Self {
        Self {
            seed: 42,
            runtime: RuntimeKind::Sim,
            reactors: 1,
            device: DeviceConfig::Ram(RamConfig::default()),
            workload: WorkloadConfig::default(),
            precondition: PreconditionConfig::default(),
            replay: None,
            phase: Vec::new(),
        }
    }
}

/// A layer of the device stack. Engines hold their members, so a stack is a tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum DeviceConfig {
    Ram(RamConfig),
    File(FileConfig),
    Stripe(StripeConfig),
    Concat(ConcatConfig),
    Ssd(SsdSpec),
    Raid(RaidConfig),
    Twophase(TwophaseConfig),
    Scala(ScalaConfig),
    Nbd(NbdDeviceConfig),
    Wbcache(WbcacheConfig),
    Dmzoned(DmzonedConfig),
    Zoned(ZonedConfig),
    Csal(CsalConfig),
    Inject(InjectConfig),
}

/// An emulated SSD: a named `preset` and any keys that override it (see
/// `configs/presets/ssd/`), resolved into the full configuration when the file is read, so
/// `flashrig config show` prints every effective value with its sources.
#[derive(Clone, Debug, PartialEq)]
pub struct SsdSpec(pub SsdConfig);

impl Serialize for SsdSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SsdSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let table = toml::Table::deserialize(d)?;
        SsdConfig::resolve(&table).map(SsdSpec).map_err(serde::de::Error::custom)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RamConfig {
    pub name: Option<String>,
    pub capacity: Size,
    pub block_size: u32,
    /// Metadata bytes stored with each block (0: none).
    pub md_bytes: u32,
    /// Fixed latency of every command on the runtime clock. A RAM disk's own latency is far
    /// below anything flashrig models, so the default is 0; set it to give a simulated stack
    /// of RAM devices a time scale.
    pub latency_ns: u64,
}

impl Default for RamConfig {
    fn default() -> Self {
        Self { name: None, capacity: Size::gib(1), block_size: 4096, md_bytes: 0, latency_ns: 0 }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    pub name: Option<String>,
    /// A regular file (created if missing) or a block device. In a member template `{i}` is
    /// replaced by the member's index.
    pub path: PathBuf,
    /// Data capacity; required to create a file, otherwise the file's own size.
    pub size: Option<Size>,
    pub block_size: u32,
    pub md_bytes: u32,
    /// O_DIRECT where the file system allows it.
    pub direct: bool,
    pub latency_ns: u64,
    /// `auto` (io_uring on the real runtime where the kernel allows it, positioned I/O
    /// otherwise), `uring`, or `sync`.
    pub io: IoEngine,
}

impl Default for FileConfig {
    fn default() -> Self {
        Self {
            name: None,
            path: PathBuf::new(),
            size: None,
            block_size: 4096,
            md_bytes: 0,
            direct: true,
            latency_ns: 0,
            io: IoEngine::Auto,
        }
    }
}

/// `nbd`: a remote NBD export (qemu-nbd, nbdkit, another `flashrig serve nbd`) as a device,
/// so a stack's members can live elsewhere (docs/nbd-device.md). Real runtime only; the
/// server is connected to when the stack is built.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NbdDeviceConfig {
    pub name: Option<String>,
    /// `nbd://host[:port]/export` (port 10809 by default) or
    /// `nbd+unix:///export?socket=/path`. In a member template `{i}` is replaced by the
    /// member's index.
    pub uri: String,
    /// Logical block size; the export's size must be a multiple of it.
    pub block_size: u32,
    /// Connections to the server; more than one needs a server that advertises
    /// `NBD_FLAG_CAN_MULTI_CONN`.
    pub connections: usize,
}

impl Default for NbdDeviceConfig {
    fn default() -> Self {
        Self { name: None, uri: String::new(), block_size: 4096, connections: 1 }
    }
}

/// Engines take their members listed one by one (`members = [...]`), or as one template
/// repeated `width` times (`member = {...}`, `width = 4`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StripeConfig {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default = "default_chunk")]
    pub chunk: Size,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<DeviceConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<Box<DeviceConfig>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<usize>,
}

fn default_chunk() -> Size {
    Size::kib(64)
}

/// `zoned`: a zoned namespace emulated over one block device, as SPDK's `bdev_zone_block`
/// (crates/engines/src/zoned.rs). CSAL-BLK is CSAL over a block-interface QLC SSD made zoned
/// this way (csal-eurosys24.txt §6.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZonedConfig {
    #[serde(default)]
    pub name: Option<String>,
    /// Zone size.
    pub zone: Size,
    /// Writable bytes per zone (default: the zone size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_capacity: Option<Size>,
    /// Zones open at once (0: no limit).
    #[serde(default)]
    pub max_open_zones: u32,
    /// Zones active (open or closed) at once (0: no limit).
    #[serde(default)]
    pub max_active_zones: u32,
    pub member: Box<DeviceConfig>,
}

/// `inject`: SSD faults over one device (jaffer-thesis-2023.txt §2.4; crates/engines/src/inject,
/// docs/inject.md). Each entry of `faults` is one fault; see `FaultConfig` for its fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectConfig {
    #[serde(default)]
    pub name: Option<String>,
    /// Seeds the faults' random decisions (probability, random corruption).
    #[serde(default)]
    pub seed: u64,
    /// Classify blocks as this file system's structures (`ext4`, `xfs`, `btrfs`), so that faults can target
    /// them (`structure = "inode"`) and the log names them. The layer first scans what the
    /// member holds, then follows what is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<String>,
    /// A JSON-lines file that receives one line per injection (default: kept in memory and
    /// counted in the layer's metrics only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<FaultConfig>,
    pub member: Box<DeviceConfig>,
}

/// `csal`: CSAL (csal-eurosys24.txt, docs/csal.md) over `members = [fast, zoned]`: a fast
/// device used as the write buffer and metadata region, and a zoned device (an SSD's zoned
/// namespace, or a `zoned` layer over a block device) holding the data. The zoned member needs
/// 64 metadata bytes per block (the per-block SID/LBA/tenant record), the fast member the same
/// or none (records then go to blocks of their own). Defaults are the paper's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsalConfig {
    #[serde(default)]
    pub name: Option<String>,
    /// Chunk size on the fast device (default: the zoned member's zone capacity, at most an
    /// eighth of the fast device; §4.2 "chunks and zones are of the same size").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<Size>,
    /// Memory for cached L2P pages (4 KiB each; §6.1: 2 GiB).
    #[serde(default = "default_l2p_cache")]
    pub l2p_cache: Size,
    /// Tenants: equal partitions of the LBA space, compacted into zones of their own.
    #[serde(default = "default_tenants")]
    pub tenants: u16,
    /// Compaction runs while free chunks are below this fraction (§4.3: 0.2).
    #[serde(default = "default_compaction_free")]
    pub compaction_free_fraction: f64,
    /// Compaction and GC write size (§4.3: 512 KiB).
    #[serde(default = "default_csal_batch")]
    pub batch: Size,
    /// GC runs while fewer zones are free (§4.3: 5).
    #[serde(default = "default_gc_free_zones")]
    pub gc_free_zones: u64,
    /// Zoned capacity kept back as over-provisioning (§4.3: 0.1).
    #[serde(default = "default_csal_op")]
    pub over_provisioning: f64,
    /// GC writes into zones of their own, not the compaction zones (Fig. 18).
    #[serde(default = "default_true")]
    pub gc_isolation: bool,
    /// Per-tenant compaction and GC zones (Fig. 18); false: one shared stream each.
    #[serde(default = "default_true")]
    pub user_isolation: bool,
    /// Recovery after a crash: `naive`, `p2l` or `checkpoint` (§4.4, Table 4).
    #[serde(default = "default_csal_recovery")]
    pub recovery: String,
    /// The reactor of compaction, GC and checkpoints (default: the last one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_reactor: Option<usize>,
    /// `create` (format; the default), `recover` (open what the members hold, after a crash
    /// or a clean close), or `auto` (recover when the fast member holds a csal superblock,
    /// create when it is blank).
    #[serde(default)]
    pub start: ScalaStart,
    pub members: Vec<DeviceConfig>,
}

fn default_l2p_cache() -> Size {
    Size::gib(2)
}
fn default_tenants() -> u16 {
    1
}
fn default_compaction_free() -> f64 {
    0.2
}
fn default_csal_batch() -> Size {
    Size::kib(512)
}
fn default_gc_free_zones() -> u64 {
    5
}
fn default_csal_op() -> f64 {
    0.1
}
fn default_true() -> bool {
    true
}
fn default_csal_recovery() -> String {
    "checkpoint".into()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcatConfig {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<DeviceConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<Box<DeviceConfig>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<usize>,
}

/// `wbcache`: an Open-CAS-like write-back cache, members = [cache device, core device] (see
/// `crates/engines/src/wbcache` and `docs/baselines.md`). Defaults are OCF's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WbcacheConfig {
    #[serde(default)]
    pub name: Option<String>,
    /// The cache device first, the core device second.
    pub members: Vec<DeviceConfig>,
    /// Cache line size: 4, 8, 16, 32 or 64 KiB (default 64 KiB, the QLC's indirection unit,
    /// as CSAL configures its Open-CAS baseline).
    #[serde(default = "default_wbcache_line")]
    pub line: Size,
    /// `alru` (OCF's default) or `nop`.
    #[serde(default = "default_wbcache_cleaning")]
    pub cleaning: CleaningPolicy,
    /// ALRU: seconds between the cleaner's wake-ups (OCF: 20, range 0 to 3600).
    #[serde(default = "default_wake_up_s")]
    pub wake_up_s: u64,
    /// ALRU: seconds after its last write before a dirty line is cleaned (OCF: 120, 1 to 3600).
    #[serde(default = "default_staleness_time_s")]
    pub staleness_time_s: u64,
    /// ALRU: dirty lines cleaned per wake-up (OCF: 100, 1 to 10000).
    #[serde(default = "default_flush_max_buffers")]
    pub flush_max_buffers: usize,
    /// ALRU: milliseconds without I/O before the cleaner may run (OCF: 10000, 0 to 1000000).
    #[serde(default = "default_activity_threshold_ms")]
    pub activity_threshold_ms: u64,
    /// `full` (OCF's default: only while the cache has no free line), `always` or `never`.
    #[serde(default = "default_seq_cutoff_policy")]
    pub seq_cutoff_policy: SeqCutoffPolicy,
    /// Bytes a sequential stream reaches before it bypasses the cache (OCF: 1 MiB).
    #[serde(default = "default_seq_cutoff_threshold")]
    pub seq_cutoff_threshold: Size,
}

fn default_wbcache_line() -> Size {
    Size::kib(64)
}
fn default_wbcache_cleaning() -> CleaningPolicy {
    CleaningPolicy::Alru
}
fn default_wake_up_s() -> u64 {
    20
}
fn default_staleness_time_s() -> u64 {
    120
}
fn default_flush_max_buffers() -> usize {
    100
}
fn default_activity_threshold_ms() -> u64 {
    10_000
}
fn default_seq_cutoff_policy() -> SeqCutoffPolicy {
    SeqCutoffPolicy::Full
}
fn default_seq_cutoff_threshold() -> Size {
    Size::mib(1)
}

/// `dmzoned`: a dm-zoned-like target, members = [fast device (random zones), zoned device
/// (sequential zones)] (see `crates/engines/src/dmzoned` and `docs/baselines.md`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmzonedConfig {
    #[serde(default)]
    pub name: Option<String>,
    /// The fast device first, the zoned device second.
    pub members: Vec<DeviceConfig>,
    /// Milliseconds without I/O before the target is idle and reclaims every random zone
    /// (dm-zoned's `DMZ_IDLE_PERIOD`, 10 s).
    #[serde(default = "default_idle_period_ms")]
    pub idle_period_ms: u64,
    /// Sequential zones kept out of the exposed capacity for reclaim (at least 1).
    #[serde(default = "default_reserved_seq_zones")]
    pub reserved_seq_zones: u64,
}

fn default_idle_period_ms() -> u64 {
    10_000
}
fn default_reserved_seq_zones() -> u64 {
    1
}

/// `raid`: k data + m parity chunks per stripe over k + m members (see
/// `crates/engines/src/raid`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RaidConfig {
    #[serde(default)]
    pub name: Option<String>,
    /// Data chunks per stripe.
    pub k: usize,
    /// Parity chunks per stripe (1: RAID-5, 2: RAID-6).
    pub m: usize,
    #[serde(default = "default_chunk")]
    pub chunk: Size,
    /// `any` (partial stripes by read-construct-write or read-modify-write) or `full-stripe`
    /// (only whole stripes, as SPDK RAID5F).
    #[serde(default)]
    pub mode: RaidMode,
    /// Stripes the stripe cache holds; 0 turns it off (md's default size is 256).
    #[serde(default)]
    pub stripe_cache: usize,
    /// Host cost profile charged in the simulation: `kernel` (md-like, the default),
    /// `user` (SPDK-like), or `none`. See docs/cost-model.md.
    #[serde(default = "default_kernel")]
    pub host: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<DeviceConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<Box<DeviceConfig>>,
    /// Defaults to k + m with `member`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<usize>,
}

/// `twophase`: a FusionRAID-like two-phase-write array over k + m members (see
/// docs/twophase.md): writes replicated m + 1 times, converted to k + m stripes past a
/// watermark. Members need at least 16 metadata bytes per block (24 without atomic metadata).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TwophaseConfig {
    #[serde(default)]
    pub name: Option<String>,
    pub k: usize,
    pub m: usize,
    #[serde(default = "default_chunk")]
    pub chunk: Size,
    /// Replicated data, as a fraction of the capacity, above which conversion starts (§2.2:
    /// 5%).
    #[serde(default = "default_watermark")]
    pub watermark: f64,
    /// Conversion goes on until replicated data is at most this fraction (default: half the
    /// watermark; the paper does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_watermark: Option<f64>,
    #[serde(default = "default_kernel")]
    pub host: String,
    /// Background conversion tasks (default: one per reactor, FusionRAID's kernel worker
    /// threads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub convert_workers: Option<usize>,
    /// `create` (trim the members, then start empty; the default), `new` (members known to
    /// be blank: fresh RAM disks or SSDs, skips the trims), or `recover` (rebuild the array
    /// from what the members hold, after a crash or a clean stop).
    #[serde(default)]
    pub start: TwophaseStart,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<DeviceConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<Box<DeviceConfig>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<usize>,
}

fn default_watermark() -> f64 {
    0.05
}

/// `scala`: a ScalaAFA-like two-phase-write array over k + m members (scalaafa-atc24.txt §5;
/// `crates/engines/src/scala`): a user-space engine whose I/O threads write with permissions
/// (heroes) granted by a space manager, backup copies land in a transient area, and
/// conversion runs on the members (the `convert` vendor command) or on the host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScalaConfig {
    #[serde(default)]
    pub name: Option<String>,
    pub k: usize,
    pub m: usize,
    /// The chunk, as `raid` and `twophase` name it (§6.1: 64 KB).
    #[serde(default = "default_chunk")]
    pub chunk: Size,
    /// Where conversion runs: `auto` (offloaded to members that support the convert vendor
    /// command, the host for the rest), `ssd` (offloaded; every member must support it) or
    /// `host` (the paper's Scala-CO ablation, §6.5).
    #[serde(default)]
    pub conversion: ScalaConversion,
    /// Mark backup copies as transient in their write commands (§5.5); `false` is the paper's
    /// Scala-WR ablation.
    #[serde(default = "default_true")]
    pub transient_tags: bool,
    /// Size of the transient (VH) area on each member, in KiB. When absent and every member is
    /// an emulated SSD with an SLC cache, the SLC cache's size (§5.1: the transient area is
    /// "determined by the total capacity of the SLC buffers"); otherwise the engine's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transient_kib_per_member: Option<u64>,
    /// Horizontal heroes the space manager grants per batch (§5.2: 1024).
    #[serde(default = "default_grant_heroes")]
    pub grant_heroes: usize,
    /// Conversions in flight at once (default: two per member when offloaded, two on the
    /// host; docs/scala.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub convert_depth: Option<usize>,
    /// Background conversion runs while free vertical heroes are below this fraction of all
    /// (§5.2 "heroes are running out"; default 0.25) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vh_low_fraction: Option<f64>,
    /// ... or once no user request has been outstanding for this long, in microseconds (§5.2
    /// "the CPU is idle"; default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_us: Option<u64>,
    /// The reactor the space manager runs on (default: the last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space_manager_reactor: Option<usize>,
    /// Host cost profile: `user` (the default: ScalaAFA is an SPDK engine), `kernel` or
    /// `none`. See docs/cost-model.md.
    #[serde(default = "default_user")]
    pub host: String,
    /// `create` (format the members, which must be blank) or `recover` (rebuild the array
    /// from what the members hold, after a crash or a clean stop).
    #[serde(default)]
    pub start: ScalaStart,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<DeviceConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<Box<DeviceConfig>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<usize>,
}

fn default_grant_heroes() -> usize {
    1024
}

fn default_user() -> String {
    "user".into()
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScalaConversion {
    #[default]
    Auto,
    Ssd,
    Host,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScalaStart {
    /// Format the members (they are trimmed whole).
    #[default]
    Create,
    /// Recover the array the members hold (after a crash or a stop).
    Recover,
    /// Recover when the members hold an array, create when they are blank; anything else is
    /// refused. `flashrig serve` serves `create` as `auto` unless `--format` is given.
    Auto,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TwophaseStart {
    /// Trim the members whole and start empty.
    #[default]
    Create,
    /// The members are blank: start empty without trimming.
    New,
    /// Rebuild the mapping from the members' metadata.
    Recover,
    /// Recover what the members hold; blank members recover as an empty array. What
    /// `flashrig serve` uses for `create` unless `--format` is given.
    Auto,
}

fn default_kernel() -> String {
    "kernel".into()
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RaidMode {
    #[default]
    Any,
    FullStripe,
}

/// The I/O pattern of a closed-loop job (fio's `rw`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    Read,
    Write,
    RandRead,
    RandWrite,
    /// Sequential mixed reads and writes (`rwmixread` percent reads).
    Rw,
    RandRw,
}

impl Pattern {
    /// The name used in configuration files (fio's `rw` values).
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Read => "read",
            Pattern::Write => "write",
            Pattern::RandRead => "randread",
            Pattern::RandWrite => "randwrite",
            Pattern::Rw => "rw",
            Pattern::RandRw => "randrw",
        }
    }

    pub fn is_random(self) -> bool {
        matches!(self, Pattern::RandRead | Pattern::RandWrite | Pattern::RandRw)
    }
    /// Percentage of reads.
    pub fn read_percent(self, rwmixread: u8) -> u8 {
        match self {
            Pattern::Read | Pattern::RandRead => 100,
            Pattern::Write | Pattern::RandWrite => 0,
            Pattern::Rw | Pattern::RandRw => rwmixread,
        }
    }
}

/// A closed-loop workload: `jobs` jobs, each keeping `iodepth` requests in flight.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkloadConfig {
    pub rw: Pattern,
    /// Request size.
    pub bs: Size,
    /// A mix of request sizes (fio's `bssplit`, e.g. `"4k/70:64k/30"`); when given, it replaces
    /// `bs`.
    #[serde(skip_serializing_if = "BlockSizeMix::is_empty")]
    pub bssplit: BlockSizeMix,
    /// Requests each job keeps in flight.
    pub iodepth: u32,
    /// Jobs, spread round robin over the reactors.
    pub jobs: u32,
    /// Bytes each job transfers. Without it (as in fio) a job covers its range once, or, when
    /// `runtime_ms` is given, runs until that time; with both, whichever comes first.
    pub size: Option<Size>,
    /// Time limit in milliseconds of the runtime's clock (virtual in sim).
    pub runtime_ms: Option<u64>,
    /// Run the jobs this many milliseconds before measuring (fio's `ramp_time`): the measured
    /// window, which `runtime_ms` and `size` then bound, starts when the ramp ends. Requests
    /// completing during the ramp count nowhere in the result, and the layers' counters and
    /// latencies restart at its end (`workload.precondition_layers` is their snapshot there).
    /// A stack whose caches hold the preconditioning's data reaches the workload's own steady
    /// state during the ramp.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ramp_ms: Option<u64>,
    /// Percentage of reads for `rw` and `randrw`.
    pub rwmixread: u8,
    /// Offsets of random patterns: `uniform`, `zipf:θ`, `pareto:h`, `zoned:a/r:...` (fio's
    /// `random_distribution`; hot/cold is `zoned:90/10:10/90`).
    pub random_distribution: Distribution,
    /// Bytes of the device the jobs address, from `offset` (default: all of it after `offset`).
    pub range: Option<Size>,
    /// Where the addressed range starts (fio's `offset`; default 0). On a stack with 512-byte
    /// blocks an offset that is not a multiple of the page size misaligns every request.
    pub offset: Option<Size>,
    /// Job `j` addresses its range from `offset + j * offset_increment` (fio's
    /// `offset_increment`): with `range` equal to it, every job has a partition of its own, as
    /// CSAL's eight VMs each write their own virtual disk (csal-eurosys24.txt §3.1). Sequential
    /// jobs then start at their own range's start.
    pub offset_increment: Option<Size>,
    /// Random offsets are multiples of this (fio's `blockalign`; default: `bs`). A smaller
    /// alignment than the request size makes unaligned writes (WAFLASH §2.2).
    pub blockalign: Option<Size>,
    /// Issue at most this many requests per second per job (fio's `rate_iops`), on the
    /// runtime's clock.
    pub rate_iops: Option<u64>,
    /// Flush the stack when the jobs end, and count the flush in the run.
    pub final_flush: bool,
    /// The result's time series: one point per this many milliseconds of the runtime's clock
    /// (default 1000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series_ms: Option<u64>,
    /// Counters of the stack to sample once per `series_ms` while the jobs run, each summed
    /// over the layers that have it (e.g. `["buffer_partial_units", "buffer_units"]` for
    /// WAFLASH's partial page ratio over time); the result holds them as
    /// `workload.counter_series`. Empty (the default) samples nothing. Left out of the
    /// effective configuration when empty, so results of runs without it stay as they were.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub series_counters: Vec<String>,
    /// Stamp every written block with its address and version (a header and a CRC, as
    /// flashrig-check verifies). `false` sends the same buffer for every write, for
    /// timing-only runs (an SSD in payload mode `none`) where stamping would dominate.
    pub stamp: bool,
}

impl WorkloadConfig {
    /// The time series' interval in ns (0: the default of one second).
    pub fn series_interval_ns(&self) -> u64 {
        self.series_ms.map_or(0, |ms| ms.saturating_mul(1_000_000))
    }

    /// The largest request a job issues (`bs`, or the largest size of `bssplit`).
    pub fn max_request_bytes(&self) -> u64 {
        self.bssplit.max_bytes().unwrap_or(self.bs.bytes())
    }
    /// The smallest request a job issues.
    pub fn min_request_bytes(&self) -> u64 {
        self.bssplit.min_bytes().unwrap_or(self.bs.bytes())
    }
    /// The request sizes a job issues.
    pub fn request_sizes(&self) -> Vec<Size> {
        if self.bssplit.is_empty() {
            vec![self.bs]
        } else {
            self.bssplit.0.iter().map(|&(s, _)| s).collect()
        }
    }
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            rw: Pattern::RandWrite,
            bs: Size::kib(4),
            bssplit: BlockSizeMix::default(),
            iodepth: 32,
            jobs: 1,
            size: None,
            runtime_ms: None,
            ramp_ms: None,
            rwmixread: 50,
            random_distribution: Distribution::Uniform,
            range: None,
            offset: None,
            offset_increment: None,
            blockalign: None,
            rate_iops: None,
            final_flush: true,
            stamp: true,
            series_ms: None,
            series_counters: Vec::new(),
        }
    }
}

impl Config {
    /// The built-in default configuration.
    pub fn builtin() -> Config {
        Config::from_toml(DEFAULT_CONFIG_TOML, Path::new("<built-in default>"))
            .expect("the built-in default configuration is valid")
    }

    /// Parses and validates a configuration. Errors name the file and where in it: the key
    /// (`device.members[1].k`) and its line.
    pub fn from_toml(text: &str, origin: &Path) -> Result<Config, Error> {
        let cfg: Config = toml::from_str(text).map_err(|e| Error::Config {
            origin: origin.display().to_string(),
            message: locate(text, e),
        })?;
        cfg.validate()
            .map_err(|message| Error::Config { origin: origin.display().to_string(), message })?;
        Ok(cfg)
    }

    pub fn load(path: &Path) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Input(format!("cannot read configuration {}: {e}", path.display()))
        })?;
        Config::from_toml(&text, path)
    }

    /// The effective configuration as TOML, defaults filled in.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("configuration serialises")
    }

    /// Checks relations between options that the types cannot express. Messages name the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.reactors == 0 || self.reactors > 256 {
            return Err(format!("reactors = {}: must be between 1 and 256", self.reactors));
        }
        validate_device(&self.device, "device")?;
        check_reactor_choices(&self.device, "device", self.reactors)?;
        if let Some(r) = &self.replay {
            r.validate()?;
        }
        let p = &self.precondition;
        if p.trace_reads && self.replay.is_none() {
            return Err("precondition.trace_reads: writes what a replayed trace reads, and there \
                        is no [replay] section"
                .into());
        }
        if p.trace_requests > 0 && self.replay.is_none() {
            return Err(format!(
                "precondition.trace_requests = {}: replays the [replay] trace as a warm-up, and \
                 there is no [replay] section",
                p.trace_requests
            ));
        }
        if p.fill && p.fill_bs.bytes() == 0 {
            return Err("precondition.fill_bs must be positive".into());
        }
        if p.random_overwrite_ms > MAX_RAMP_MS {
            return Err(format!(
                "precondition.random_overwrite_ms = {}: at most {MAX_RAMP_MS} (one day of the \
                 runtime's clock)",
                p.random_overwrite_ms
            ));
        }
        if p.iodepth == 0 || p.iodepth > 65_536 {
            return Err(format!(
                "precondition.iodepth = {}: must be between 1 and 65536",
                p.iodepth
            ));
        }
        self.validate_phases()?;
        if self.phase.is_empty() {
            validate_workload(&self.workload, "workload", self.replay.is_some())?;
        }
        Ok(())
    }

    /// The loads of the run: `[workload]` alone, or each `[[phase]]` (name, workload).
    pub fn loads(&self) -> Vec<(Option<&str>, &WorkloadConfig)> {
        if self.phase.is_empty() {
            vec![(None, &self.workload)]
        } else {
            self.phase.iter().map(|p| (Some(p.name.as_str()), &p.workload)).collect()
        }
    }

    /// The configuration as phase `index` ran it: its workload in `[workload]`, every phase
    /// kept (so a phase's result file holds the whole run's configuration).
    pub fn for_phase(&self, index: usize) -> Config {
        let mut c = self.clone();
        if let Some(p) = self.phase.get(index) {
            c.workload = p.workload.clone();
        }
        c
    }

    fn validate_phases(&self) -> Result<(), String> {
        if self.phase.is_empty() {
            return Ok(());
        }
        if self.phase.len() > MAX_PHASES {
            return Err(format!("phase: {} phases, at most {MAX_PHASES}", self.phase.len()));
        }
        if self.replay.is_some() {
            return Err("phase: a [replay] is one load; give either [replay] or [[phase]] \
                        tables"
                .into());
        }
        if self.workload != WorkloadConfig::default() {
            return Err("workload: unused in a run with [[phase]] tables; give each phase its \
                        workload ([phase.workload]) and leave [workload] out"
                .into());
        }
        for (i, p) in self.phase.iter().enumerate() {
            let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+');
            if p.name.is_empty() || !p.name.chars().all(ok) || p.name.starts_with('.') {
                return Err(format!(
                    "phase[{i}].name = {:?}: must be non-empty, made of letters, digits, '-', \
                     '_', '.' and '+', and not start with '.' (it names the phase's result file)",
                    p.name
                ));
            }
            if self.phase[..i].iter().any(|q| q.name == p.name) {
                return Err(format!("phase[{i}].name = {:?}: names must be unique", p.name));
            }
            validate_workload(&p.workload, &format!("phase[{i}].workload"), false)?;
        }
        Ok(())
    }
}

/// Checks one workload; messages name its keys under `at` (`workload`, `phase[2].workload`).
fn validate_workload(w: &WorkloadConfig, at: &str, replay: bool) -> Result<(), String> {
    if w.bs.bytes() == 0 {
        return Err(format!("{at}.bs must be positive"));
    }
    if w.iodepth == 0 || w.iodepth as u64 > MAX_IODEPTH {
        return Err(format!("{at}.iodepth = {}: must be between 1 and {MAX_IODEPTH}", w.iodepth));
    }
    if w.jobs == 0 || w.jobs as u64 > MAX_JOBS {
        return Err(format!("{at}.jobs = {}: must be between 1 and {MAX_JOBS}", w.jobs));
    }
    if w.jobs as u64 * w.iodepth as u64 > MAX_IN_FLIGHT {
        return Err(format!(
            "{at}.jobs x {at}.iodepth = {}: at most {MAX_IN_FLIGHT} requests in flight",
            w.jobs as u64 * w.iodepth as u64
        ));
    }
    if w.range.map(|r| r.bytes()) == Some(0) {
        return Err(format!("{at}.range must be positive"));
    }
    if w.rwmixread > 100 {
        return Err(format!("{at}.rwmixread = {}: a percentage, 0 to 100", w.rwmixread));
    }
    if w.runtime_ms == Some(0) {
        return Err(format!("{at}.runtime_ms must be positive"));
    }
    if let Some(ramp) = w.ramp_ms {
        if ramp == 0 {
            return Err(format!("{at}.ramp_ms must be positive (leave it out for no ramp)"));
        }
        if ramp > MAX_RAMP_MS {
            return Err(format!(
                "{at}.ramp_ms = {ramp}: at most {MAX_RAMP_MS} (one day of the runtime's clock)"
            ));
        }
        if replay {
            return Err(format!(
                "{at}.ramp_ms: a [replay] runs its trace from the first request; \
                            warm the stack up with [precondition] instead"
            ));
        }
    }
    if w.size.map(|s| s.bytes()) == Some(0) {
        return Err(format!("{at}.size must be positive"));
    }
    if let Some(a) = w.blockalign {
        let smallest = w.min_request_bytes();
        if a.bytes() == 0 || a.bytes() > smallest {
            return Err(format!(
                "{at}.blockalign = {a}: must be positive and at most the smallest request \
                     size ({})",
                Size(smallest)
            ));
        }
    }
    if w.rate_iops == Some(0) {
        return Err(format!("{at}.rate_iops must be positive"));
    }
    for (i, name) in w.series_counters.iter().enumerate() {
        // A name twice would be one column of the result recorded twice.
        if name.is_empty() || w.series_counters[..i].contains(name) {
            return Err(format!(
                "{at}.series_counters[{i}] = \"{name}\": names must be non-empty and \
                     listed once"
            ));
        }
    }
    Ok(())
}

/// A deserialisation error of `text` as a user needs it: the key path of the offending value
/// (or key), its line and column, and the line itself. serde reads a `type`-tagged device
/// table whole before choosing its type, so an error inside one carries neither the key nor
/// its place, only the table's; such an error is found again by reading each device table
/// as the type it names, members first, which keeps both.
fn locate(text: &str, e: toml::de::Error) -> String {
    use toml::de::{DeTable, DeValue};
    let Ok(root) = DeTable::parse(text) else {
        // Not TOML at all: toml's own message has the line.
        return e.to_string().trim_end().to_string();
    };
    let device = root.get_ref().get("device");
    let inside_device = device.is_some_and(|d| e.span() == Some(d.span()));
    let (message, span) = match device.filter(|_| inside_device).and_then(device_error) {
        Some((message, span)) => (message, Some(span)),
        None => (e.message().to_string(), e.span()),
    };
    // Some messages carry toml's own `in `key`` line (an SSD's keys, resolved on their own).
    let message = message.trim_end().replace("\nin `", " in `");
    let Some(span) = span else {
        return message;
    };
    let table = DeValue::Table(root.get_ref().clone());
    let key = value_path(&table, span.start);
    // Line and column (1-based), and the line with the span underlined.
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |p| p + 1);
    let line_no = text[..start].matches('\n').count() + 1;
    let line = text[line_start..].lines().next().unwrap_or("");
    let col = text[line_start..start].chars().count();
    let room = line.chars().count().saturating_sub(col).max(1);
    let width = text[start..span.end.clamp(start, text.len())].chars().count().clamp(1, room);
    let gutter = " ".repeat(line_no.to_string().len());
    let what = key.map(|k| format!("{k} ")).unwrap_or_default();
    format!(
        "{what}(line {line_no}, column {}): {message}\n{gutter} |\n{line_no} | {line}\n{gutter} | {}{}",
        col + 1,
        " ".repeat(col),
        "^".repeat(width)
    )
}

/// The error of the device table `v` (a `DeviceConfig`): its message and the span of what is
/// wrong (the table's when the error has none of its own). Members are read first.
fn device_error(v: &toml::Spanned<toml::de::DeValue>) -> Option<(String, Range<usize>)> {
    use toml::de::{DeValue, ValueDeserializer};
    let as_device =
        |v: toml::Spanned<DeValue>| DeviceConfig::deserialize(ValueDeserializer::from(v)).err();
    let err = match v.get_ref() {
        DeValue::Table(t) => {
            let members = match t.get("members").map(|m| m.get_ref()) {
                Some(DeValue::Array(a)) => a.iter().collect(),
                _ => Vec::new(),
            };
            if let Some(found) = t.get("member").into_iter().chain(members).find_map(device_error) {
                return Some(found);
            }
            let kind = t.get("type").map(|k| (k.get_ref().as_str(), k));
            let mut rest = t.clone();
            rest.remove("type");
            let de = || {
                ValueDeserializer::from(toml::Spanned::new(v.span(), DeValue::Table(rest.clone())))
            };
            match kind {
                Some((Some("ram"), _)) => RamConfig::deserialize(de()).err(),
                Some((Some("file"), _)) => FileConfig::deserialize(de()).err(),
                Some((Some("stripe"), _)) => StripeConfig::deserialize(de()).err(),
                Some((Some("concat"), _)) => ConcatConfig::deserialize(de()).err(),
                Some((Some("ssd"), _)) => SsdSpec::deserialize(de()).err(),
                Some((Some("raid"), _)) => RaidConfig::deserialize(de()).err(),
                Some((Some("twophase"), _)) => TwophaseConfig::deserialize(de()).err(),
                Some((Some("scala"), _)) => ScalaConfig::deserialize(de()).err(),
                Some((Some("nbd"), _)) => NbdDeviceConfig::deserialize(de()).err(),
                Some((Some("zoned"), _)) => ZonedConfig::deserialize(de()).err(),
                Some((Some("wbcache"), _)) => WbcacheConfig::deserialize(de()).err(),
                Some((Some("dmzoned"), _)) => DmzonedConfig::deserialize(de()).err(),
                Some((Some("csal"), _)) => CsalConfig::deserialize(de()).err(),
                Some((Some("inject"), _)) => InjectConfig::deserialize(de()).err(),
                // An unknown or malformed type: serde's message, pointing at the type.
                Some((_, k)) => {
                    let mut only = toml::de::DeTable::new();
                    only.insert(toml::Spanned::new(k.span(), "type".into()), k.clone());
                    as_device(toml::Spanned::new(k.span(), DeValue::Table(only)))
                }
                None => as_device(v.clone()),
            }
        }
        _ => as_device(v.clone()),
    };
    err.map(|e| (e.message().to_string(), e.span().unwrap_or(v.span())))
}

/// The key path, inside `v`, of the deepest key or value whose span holds byte `pos`:
/// `device.members[1].k`, or `[1].k` inside an array.
fn value_path(v: &toml::de::DeValue, pos: usize) -> Option<String> {
    use toml::de::DeValue;
    match v {
        DeValue::Table(t) => t.iter().find_map(|(k, v)| {
            let name = k.get_ref().to_string();
            match value_path(v.get_ref(), pos) {
                Some(rest) if rest.starts_with('[') => Some(format!("{name}{rest}")),
                Some(rest) => Some(format!("{name}.{rest}")),
                None if k.span().contains(&pos) || v.span().contains(&pos) => Some(name),
                None => None,
            }
        }),
        DeValue::Array(a) => {
            a.iter().enumerate().find_map(|(i, item)| match value_path(item.get_ref(), pos) {
                Some(rest) if rest.starts_with('[') => Some(format!("[{i}]{rest}")),
                Some(rest) => Some(format!("[{i}].{rest}")),
                None if item.span().contains(&pos) => Some(format!("[{i}]")),
                None => None,
            })
        }
        _ => None,
    }
}

fn validate_device(d: &DeviceConfig, at: &str) -> Result<(), String> {
    let block = |bs: u32, at: &str| -> Result<(), String> {
        if bs == 0 || !bs.is_multiple_of(512) || !bs.is_power_of_two() {
            return Err(format!("{at}.block_size = {bs}: must be a power of two, at least 512"));
        }
        Ok(())
    };
    match d {
        DeviceConfig::Ram(r) => {
            block(r.block_size, at)?;
            if r.capacity.bytes() == 0 || r.capacity.bytes() % r.block_size as u64 != 0 {
                return Err(format!(
                    "{at}.capacity = {}: must be a positive multiple of block_size {}",
                    r.capacity, r.block_size
                ));
            }
        }
        DeviceConfig::File(f) => {
            block(f.block_size, at)?;
            if f.path.as_os_str().is_empty() {
                return Err(format!("{at}.path: a file device needs a path"));
            }
            if let Some(s) = f.size {
                if s.bytes() == 0 || s.bytes() % f.block_size as u64 != 0 {
                    return Err(format!(
                        "{at}.size = {s}: must be a positive multiple of block_size {}",
                        f.block_size
                    ));
                }
            }
        }
        DeviceConfig::Stripe(s) => {
            if s.chunk.bytes() == 0 {
                return Err(format!("{at}.chunk must be positive"));
            }
            validate_members(&s.members, &s.member, s.width, at)?;
        }
        DeviceConfig::Concat(c) => validate_members(&c.members, &c.member, c.width, at)?,
        DeviceConfig::Zoned(z) => {
            let cap = z.zone_capacity.unwrap_or(z.zone);
            if z.zone.bytes() == 0 || cap.bytes() == 0 || cap.bytes() > z.zone.bytes() {
                return Err(format!(
                    "{at}: zone = {}, zone_capacity = {cap}: need 0 < zone_capacity <= zone",
                    z.zone
                ));
            }
            if z.max_open_zones > 0
                && z.max_active_zones > 0
                && z.max_open_zones > z.max_active_zones
            {
                return Err(format!(
                    "{at}: max_open_zones = {} exceeds max_active_zones = {}",
                    z.max_open_zones, z.max_active_zones
                ));
            }
            validate_device(&z.member, &format!("{at}.member"))?;
        }
        DeviceConfig::Inject(j) => {
            // The block size is the member's, known once the stack is built, which checks
            // what depends on it.
            for (i, f) in j.faults.iter().enumerate() {
                f.check().map_err(|e| format!("{at}.faults[{i}]: {e}"))?;
            }
            if let Some(fs) = &j.filesystem {
                if !flashrig_engines::inject::structure::FILESYSTEMS.contains(&fs.as_str()) {
                    return Err(format!(
                        "{at}.filesystem = \"{fs}\": no classifier; one of {}",
                        flashrig_engines::inject::structure::FILESYSTEMS.join(", ")
                    ));
                }
            }
            validate_device(&j.member, &format!("{at}.member"))?;
        }
        DeviceConfig::Csal(c) => {
            if c.members.len() != 2 {
                return Err(format!(
                    "{at}.members: csal takes exactly 2 members, [fast, zoned]; got {}",
                    c.members.len()
                ));
            }
            if c.tenants == 0 {
                return Err(format!("{at}.tenants must be at least 1"));
            }
            for (key, v) in [
                ("compaction_free_fraction", c.compaction_free_fraction),
                ("over_provisioning", c.over_provisioning),
            ] {
                if !(0.0..0.9).contains(&v) {
                    return Err(format!("{at}.{key} = {v}: must be in [0, 0.9)"));
                }
            }
            if flashrig_engines::csal::RecoveryMode::parse(&c.recovery).is_none() {
                return Err(format!(
                    "{at}.recovery = \"{}\": one of \"naive\", \"p2l\", \"checkpoint\"",
                    c.recovery
                ));
            }
            for (i, m) in c.members.iter().enumerate() {
                validate_device(m, &format!("{at}.members[{i}]"))?;
            }
        }
        DeviceConfig::Twophase(t) => {
            check_array(t.k, t.m, t.chunk, &t.host, &t.members, &t.member, t.width, at)?;
            let low = t.low_watermark.unwrap_or(t.watermark / 2.0);
            let ordered = 0.0 <= low && low <= t.watermark && t.watermark < 1.0;
            if !(ordered && t.watermark > 0.0) {
                return Err(format!(
                    "{at}: watermark = {}, low_watermark = {low}: need 0 < low_watermark <= \
                     watermark < 1",
                    t.watermark
                ));
            }
            if t.convert_workers == Some(0) {
                return Err(format!("{at}.convert_workers must be at least 1"));
            }
        }
        DeviceConfig::Raid(r) => {
            check_array(r.k, r.m, r.chunk, &r.host, &r.members, &r.member, r.width, at)?
        }
        DeviceConfig::Scala(c) => {
            check_array(c.k, c.m, c.chunk, &c.host, &c.members, &c.member, c.width, at)?;
            if c.transient_kib_per_member == Some(0) {
                return Err(format!("{at}.transient_kib_per_member must be positive"));
            }
            if c.grant_heroes == 0 {
                return Err(format!("{at}.grant_heroes must be at least 1"));
            }
            if c.convert_depth == Some(0) {
                return Err(format!("{at}.convert_depth must be at least 1"));
            }
            if let Some(f) = c.vh_low_fraction {
                if !(0.0..=1.0).contains(&f) {
                    return Err(format!("{at}.vh_low_fraction = {f}: must be between 0 and 1"));
                }
            }
        }
        DeviceConfig::Ssd(spec) => spec.0.validate().map_err(|e| format!("{at}: {e}"))?,
        DeviceConfig::Wbcache(w) => {
            if w.members.len() != 2 {
                return Err(format!(
                    "{at}.members: wbcache needs exactly 2 members, the cache device first and \
                     the core device second (got {})",
                    w.members.len()
                ));
            }
            validate_members(&w.members, &None, None, at)?;
            let kib = w.line.bytes() >> 10;
            if w.line.bytes() % 1024 != 0 || ![4, 8, 16, 32, 64].contains(&kib) {
                return Err(format!(
                    "{at}.line = {}: OCF's cache line sizes are 4, 8, 16, 32 and 64 KiB",
                    w.line
                ));
            }
            let ranges: [(&str, u64, u64, u64); 4] = [
                ("wake_up_s", w.wake_up_s, 0, 3600),
                ("staleness_time_s", w.staleness_time_s, 1, 3600),
                ("flush_max_buffers", w.flush_max_buffers as u64, 1, 10_000),
                ("activity_threshold_ms", w.activity_threshold_ms, 0, 1_000_000),
            ];
            for (key, v, lo, hi) in ranges {
                if !(lo..=hi).contains(&v) {
                    return Err(format!("{at}.{key} = {v}: OCF accepts {lo} to {hi}"));
                }
            }
            if w.seq_cutoff_threshold.bytes() == 0 {
                return Err(format!("{at}.seq_cutoff_threshold must be positive"));
            }
        }
        DeviceConfig::Dmzoned(d) => {
            if d.members.len() != 2 {
                return Err(format!(
                    "{at}.members: dmzoned needs exactly 2 members, the fast device first and \
                     the zoned device second (got {})",
                    d.members.len()
                ));
            }
            validate_members(&d.members, &None, None, at)?;
            if d.reserved_seq_zones == 0 {
                return Err(format!("{at}.reserved_seq_zones must be at least 1"));
            }
        }
        DeviceConfig::Nbd(n) => {
            block(n.block_size, at)?;
            if n.uri.is_empty() {
                return Err(format!(
                    "{at}.uri: an nbd device needs a uri (nbd://host[:port]/export or \
                     nbd+unix:///export?socket=/path)"
                ));
            }
            // A member template's `{i}` becomes a number when the stack is built.
            flashrig_devices::NbdUri::parse(&n.uri.replace("{i}", "0"))
                .map_err(|e| format!("{at}.uri = \"{}\": {e}", n.uri))?;
            if n.connections == 0 || n.connections > flashrig_devices::nbd::MAX_CONNECTIONS {
                return Err(format!(
                    "{at}.connections = {}: must be between 1 and {}",
                    n.connections,
                    flashrig_devices::nbd::MAX_CONNECTIONS
                ));
            }
        }
    }
    Ok(())
}

/// Settings that name a reactor must name one the run has.
fn check_reactor_choices(d: &DeviceConfig, at: &str, reactors: usize) -> Result<(), String> {
    let (members, member): (&[DeviceConfig], &Option<Box<DeviceConfig>>) = match d {
        DeviceConfig::Scala(c) => {
            if let Some(r) = c.space_manager_reactor {
                if r >= reactors {
                    return Err(format!(
                        "{at}.space_manager_reactor = {r}: the run has {reactors} reactor(s), \
                         numbered from 0"
                    ));
                }
            }
            (&c.members, &c.member)
        }
        DeviceConfig::Stripe(s) => (&s.members, &s.member),
        DeviceConfig::Zoned(z) => {
            return check_reactor_choices(&z.member, &format!("{at}.member"), reactors)
        }
        DeviceConfig::Inject(j) => {
            return check_reactor_choices(&j.member, &format!("{at}.member"), reactors)
        }
        DeviceConfig::Csal(c) => {
            if let Some(r) = c.internal_reactor {
                if r >= reactors {
                    return Err(format!(
                        "{at}.internal_reactor = {r}: the run has {reactors} reactor(s), \
                         numbered from 0"
                    ));
                }
            }
            for (i, m) in c.members.iter().enumerate() {
                check_reactor_choices(m, &format!("{at}.members[{i}]"), reactors)?;
            }
            return Ok(());
        }
        DeviceConfig::Concat(c) => (&c.members, &c.member),
        DeviceConfig::Raid(r) => (&r.members, &r.member),
        DeviceConfig::Twophase(t) => (&t.members, &t.member),
        DeviceConfig::Wbcache(w) => (&w.members, &None),
        DeviceConfig::Dmzoned(d) => (&d.members, &None),
        DeviceConfig::Ram(_)
        | DeviceConfig::File(_)
        | DeviceConfig::Ssd(_)
        | DeviceConfig::Nbd(_) => return Ok(()),
    };
    for (i, m) in members.iter().enumerate() {
        check_reactor_choices(m, &format!("{at}.members[{i}]"), reactors)?;
    }
    if let Some(m) = member {
        check_reactor_choices(m, &format!("{at}.member"), reactors)?;
    }
    Ok(())
}

/// The checks every array engine shares: geometry, chunk, host profile, member count.
#[allow(clippy::too_many_arguments)]
fn check_array(
    k: usize,
    m: usize,
    chunk: Size,
    host: &str,
    members: &[DeviceConfig],
    member: &Option<Box<DeviceConfig>>,
    width: Option<usize>,
    at: &str,
) -> Result<(), String> {
    if k == 0 || m == 0 || m > 2 || k.saturating_add(m) > 64 {
        return Err(format!("{at}: k = {k}, m = {m}: need k >= 1, m = 1 or 2, k + m <= 64"));
    }
    if chunk.bytes() == 0 {
        return Err(format!("{at}.chunk must be positive"));
    }
    if flashrig_runtime::HostCosts::named(host).is_none() {
        return Err(format!("{at}.host = \"{host}\": use \"kernel\", \"user\" or \"none\""));
    }
    let width = if member.is_some() { Some(width.unwrap_or(k + m)) } else { width };
    validate_members(members, member, width, at)?;
    let n = if member.is_some() { width.unwrap_or(0) } else { members.len() };
    if n != k + m {
        return Err(format!(
            "{at}: {k} + {m} needs {} members, the configuration gives {n}",
            k + m
        ));
    }
    Ok(())
}

fn validate_members(
    members: &[DeviceConfig],
    member: &Option<Box<DeviceConfig>>,
    width: Option<usize>,
    at: &str,
) -> Result<(), String> {
    match (members.is_empty(), member, width) {
        (false, None, None) => {
            for (i, m) in members.iter().enumerate() {
                validate_device(m, &format!("{at}.members[{i}]"))?;
            }
            Ok(())
        }
        (true, Some(m), Some(w)) if w > 0 => validate_device(m, &format!("{at}.member")),
        (true, Some(_), _) => {
            Err(format!("{at}: `member` needs `width` (how many copies), at least 1"))
        }
        (true, None, _) => Err(format!(
            "{at}: an engine needs `members = [...]` or `member = {{...}}` with `width`"
        )),
        (false, _, _) => {
            Err(format!("{at}: give either `members` or `member` + `width`, not both"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_default_is_valid_and_round_trips() {
        let c = Config::builtin();
        let again = Config::from_toml(&c.to_toml(), Path::new("x")).unwrap();
        assert_eq!(c, again);
    }

    #[test]
    fn trace_reads_needs_a_replay() {
        let e = Config::from_toml("[precondition]\ntrace_reads = true", Path::new("a.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("precondition.trace_reads") && e.contains("[replay]"), "{e}");
        let ok = "[replay]\ntrace = \"t.csv\"\n[precondition]\ntrace_reads = true";
        assert!(Config::from_toml(ok, Path::new("a.toml")).unwrap().precondition.trace_reads);
        let e = Config::from_toml("[precondition]\ntrace_requests = 10", Path::new("a.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("precondition.trace_requests = 10") && e.contains("[replay]"), "{e}");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let e = Config::from_toml("seeed = 3", Path::new("a.toml")).unwrap_err().to_string();
        assert!(e.contains("a.toml") && e.contains("seeed"), "{e}");
        let e = Config::from_toml("[workload]\nbs = \"4 parsecs\"", Path::new("a.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown size unit"), "{e}");
        let e = Config::from_toml("[workload]\niodepth = 0", Path::new("a.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("workload.iodepth"), "{e}");
        let e = Config::from_toml(
            "[device]\ntype = \"stripe\"\nmembers = [{ type = \"ram\", capacity = \"3KiB\" }]",
            Path::new("a.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("device.members[0].capacity"), "{e}");
        let e = Config::from_toml("[device]\ntype = \"floppy\"", Path::new("a.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("floppy"), "{e}");
    }

    #[test]
    fn nbd_devices_read_back_and_bad_ones_are_named() {
        let text = "runtime = \"real\"\n[device]\ntype = \"raid\"\nk = 2\nm = 1\nmembers = [\
                    { type = \"nbd\", uri = \"nbd://10.0.0.1/a\" },\
                    { type = \"nbd\", uri = \"nbd://[::1]:10810/\", connections = 2 },\
                    { type = \"nbd\", uri = \"nbd+unix:///?socket=/run/m2.sock\", name = \"m2\" }]";
        let c = Config::from_toml(text, Path::new("a.toml")).unwrap();
        let DeviceConfig::Raid(r) = &c.device else { panic!("{:?}", c.device) };
        assert_eq!(
            r.members[1],
            DeviceConfig::Nbd(NbdDeviceConfig {
                uri: "nbd://[::1]:10810/".into(),
                connections: 2,
                ..NbdDeviceConfig::default()
            })
        );
        let again = Config::from_toml(&c.to_toml(), Path::new("x")).unwrap();
        assert_eq!(c, again);
        assert!(c.to_toml().contains("block_size = 4096"), "{}", c.to_toml());
        let bad = |member: &str| {
            let text = format!(
                "[device]\ntype = \"stripe\"\nmembers = [{{ type = \"ram\" }}, {{ type = \"ram\" }}, \
                 {member}]"
            );
            Config::from_toml(&text, Path::new("a.toml")).unwrap_err().to_string()
        };
        let e = bad("{ type = \"nbd\", uri = \"nbd://h:99999/\" }");
        assert!(e.contains("device.members[2].uri") && e.contains("99999"), "{e}");
        let e = bad("{ type = \"nbd\" }");
        assert!(e.contains("device.members[2].uri") && e.contains("needs a uri"), "{e}");
        let e = bad("{ type = \"nbd\", uri = \"nbd://h/\", connections = 0 }");
        assert!(e.contains("device.members[2].connections = 0"), "{e}");
        let e = bad("{ type = \"nbd\", uri = \"nbd://h/\", block_size = 1000 }");
        assert!(e.contains("device.members[2].block_size = 1000"), "{e}");
        let e = bad("{ type = \"nbd\", url = \"nbd://h/\" }");
        assert!(e.contains("url"), "{e}");
        // A template's {i} is a placeholder, not a port.
        let text = "[device]\ntype = \"stripe\"\nwidth = 2\n\
                    member = { type = \"nbd\", uri = \"nbd://127.0.0.1:1080{i}/\" }";
        Config::from_toml(text, Path::new("a.toml")).unwrap();
    }
}
