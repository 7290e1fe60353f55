use serde::{Deserialize, Serialize};

/// Which optional commands a device supports. Engines read this to pick a fast path or a
/// fallback.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Forced unit access on writes is honoured (otherwise a device emulates it with a flush).
    pub fua: bool,
    /// Write hints (transient replica, stream id) are recorded by the device.
    pub write_hints: bool,
    /// Zone management commands.
    pub zones: bool,
    /// ScalaAFA's conversion vendor command.
    pub convert: bool,
    /// The near-storage compute vendor command.
    pub compute: bool,
    /// A block's metadata bytes are written atomically with its data, as an SSD programs OOB
    /// bytes with the page: after a crash, an unflushed block holds data and metadata of the
    /// same write. Without it (a file with a metadata sidecar) they may come from different
    /// writes; flushed blocks are consistent either way.
    pub md_atomic: bool,
    /// The device keeps no data, or only a fingerprint of it, for timing-only experiments (an
    /// emulated SSD in payload mode `none` or `tag`): reads do not return what was written,
    /// so engines turn their checksums off over it rather than fail every read.
    #[serde(default)]
    pub timing_only: bool,
}

/// Zone layout of a zoned device (NVMe ZNS: zone size ZSZE, zone capacity ZCAP, maximum open
/// resources MOR + 1, maximum active resources MAR + 1). Zone `z` starts at `z * zone_blocks`;
/// its first `zone_capacity_blocks` blocks are writable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneGeometry {
    pub zone_blocks: u64,
    pub zone_capacity_blocks: u64,
    /// Zones that may be open (implicitly or explicitly) at once; 0 = no limit.
    pub max_open_zones: u32,
    /// Zones that may be active (open or closed) at once; 0 = no limit.
    #[serde(default)]
    pub max_active_zones: u32,
}

/// The description every device gives of itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// The layer's name in the stack (for reports and error messages).
    pub name: String,
    /// Logical block size in bytes: the unit of `lba` and of I/O lengths.
    pub block_size: u32,
    /// Capacity in logical blocks.
    pub num_blocks: u64,
    /// Metadata bytes the device stores with each block (0: none).
    pub md_bytes_per_block: u32,
    /// Largest single I/O the device takes, in blocks (0: no limit).
    pub max_io_blocks: u32,
    /// Preferred I/O granularity in blocks (a stripe engine reports its full-stripe size).
    pub optimal_io_blocks: u32,
    pub zones: Option<ZoneGeometry>,
    pub caps: Capabilities,
}

impl DeviceInfo {
    pub fn new(name: impl Into<String>, block_size: u32, num_blocks: u64) -> Self {
        Self {
            name: name.into(),
            block_size,
            num_blocks,
            md_bytes_per_block: 0,
            max_io_blocks: 0,
            optimal_io_blocks: 1,
            zones: None,
            caps: Capabilities::default(),
        }
    }

    pub fn with_md_bytes(mut self, md_bytes_per_block: u32) -> Self {
        self.md_bytes_per_block = md_bytes_per_block;
        self
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.num_blocks * self.block_size as u64
    }
}
