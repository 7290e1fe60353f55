//! The shapes of the optional commands. Devices that do not implement one answer
//! `DevError::Unsupported`; later layers (emulated SSD firmware, zoned namespaces) fill them in.

use serde::{Deserialize, Serialize};

/// Hints attached to a write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteHints {
    /// Forced unit access: durable when the write completes.
    pub fua: bool,
    /// The data is a transient replica that will soon be invalidated (ScalaAFA §5.5 tags backup
    /// copies this way so the SLC evictor can leave them in place).
    pub transient: bool,
    /// Stream or tenant id, for placement (CSAL groups compaction by tenant).
    pub stream: Option<u16>,
    /// The write prepares the device for a measurement (`[precondition]`) rather than being
    /// part of one. An emulated SSD then chooses the write buffer's victims in stack order, as
    /// a flush does, so a congestion-aware buffer policy (PC-LRU, MCA) starts the measured
    /// window from the state LRU would leave: SSDSim, which WAFLASH's evaluation ran on, makes
    /// a trace's pages valid before it simulates without passing its buffer at all
    /// (`pre_process_page`). Only the emulated SSD acts on it; a layer that forwards a
    /// write's hints to its members carries it with the user data.
    #[serde(default)]
    pub precondition: bool,
}

impl WriteHints {
    pub const NONE: WriteHints =
        WriteHints { fua: false, transient: false, stream: None, precondition: false };
    pub const FUA: WriteHints = WriteHints { fua: true, ..WriteHints::NONE };
    pub const PRECONDITION: WriteHints = WriteHints { precondition: true, ..WriteHints::NONE };
}

/// Zone commands of a zoned namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZoneCommand {
    Report {
        first_zone: u64,
        max_zones: u64,
    },
    Reset {
        zone: u64,
    },
    Finish {
        zone: u64,
    },
    Open {
        zone: u64,
    },
    Close {
        zone: u64,
    },
    /// Appends `data` to the zone; the reply gives the LBA where it landed.
    Append {
        zone: u64,
        data: Vec<u8>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ZoneState {
    Empty,
    ImplicitOpen,
    ExplicitOpen,
    Closed,
    Full,
    Offline,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneDescriptor {
    pub start_lba: u64,
    pub write_pointer: u64,
    pub capacity_blocks: u64,
    pub state: ZoneState,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZoneReply {
    Done,
    Zones(Vec<ZoneDescriptor>),
    Appended { lba: u64 },
}

/// Which parity row a conversion computes: P (XOR) or Q (the second Reed-Solomon row).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ParityType {
    /// Parity row `index` of the code's generator matrix (0 = P, 1 = Q, ...).
    Row { index: u8, data_chunks: u8 },
}

/// ScalaAFA's conversion command (§5.3): read `num` chunks of `chunk_blocks` starting at each
/// `src` LBA into device memory, compute parity row `ptype`, write it at `dst`, and invalidate
/// the source (transient) copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvertCommand {
    pub src: Vec<u64>,
    pub dst: u64,
    pub chunk_blocks: u32,
    pub ptype: ParityType,
}

/// A near-storage compute request: run `function` over the given blocks inside the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeCommand<'a> {
    pub function: &'a str,
    pub lba: u64,
    pub num_blocks: u64,
    pub args: &'a [u8],
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VendorCommand<'a> {
    Convert(ConvertCommand),
    Compute(ComputeCommand<'a>),
    /// Walk every block the device holds, verify it (checksums, and parity or replicas against
    /// the data they protect), and repair what redundancy allows (ZFS's `zpool scrub`). Layers
    /// without redundancy of their own forward it to their members and sum the reports.
    Scrub,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VendorReply {
    Done,
    Computed(Vec<u8>),
    Scrubbed(ScrubReport),
}

/// What a scrub found and did. Every count is in blocks of the scrubbing layer's members.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubReport {
    /// Member blocks read and verified.
    pub blocks_checked: u64,
    /// Blocks whose checksum did not match their data, address or generation (silent
    /// corruption, a misdirected write, or a lost one).
    pub checksum_errors: u64,
    /// Parity or replica blocks that disagreed with the data they protect although every
    /// checksum matched (possible only where blocks carry no checksum, or after a lost write
    /// that no checksum covers).
    pub redundancy_mismatches: u64,
    /// Blocks rewritten with their reconstructed contents.
    pub repaired: u64,
    /// Blocks that could not be reconstructed (more copies bad than the redundancy covers);
    /// reads of them answer `DevError::Corrupt`.
    pub unrepairable: u64,
}

impl ScrubReport {
    /// Adds another layer's or member's report to this one.
    pub fn add(&mut self, o: &ScrubReport) {
        self.blocks_checked += o.blocks_checked;
        self.checksum_errors += o.checksum_errors;
        self.redundancy_mismatches += o.redundancy_mismatches;
        self.repaired += o.repaired;
        self.unrepairable += o.unrepairable;
    }

    /// Whether the scrub left every block readable with its right contents.
    pub fn clean(&self) -> bool {
        self.unrepairable == 0
    }
}
