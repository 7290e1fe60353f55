use thiserror::Error;

/// Typed errors of the block-device contract. Engines match on these to decide between
/// retrying, reconstructing from redundancy, and failing the request.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DevError {
    #[error("blocks {lba}..{} are outside the device's {capacity_blocks} blocks", lba.saturating_add(*num_blocks))]
    OutOfRange { lba: u64, num_blocks: u64, capacity_blocks: u64 },
    #[error("length {len_bytes} bytes is not a positive multiple of the {block_size}-byte block")]
    Misaligned { len_bytes: usize, block_size: u32 },
    #[error("metadata buffer holds {got} bytes, the request needs {want}")]
    MetadataLength { got: usize, want: usize },
    #[error("{command} is not supported by this device")]
    Unsupported { command: &'static str },
    #[error("media error reading block {lba}")]
    ReadMedia { lba: u64 },
    #[error("media error writing block {lba}")]
    WriteMedia { lba: u64 },
    #[error("device {name} has failed")]
    DeviceFailed { name: String },
    #[error("device is full: {0}")]
    NoSpace(String),
    #[error("invalid command: {0}")]
    Invalid(String),
    #[error("I/O error on {path}: {message}")]
    Io { path: String, message: String },
    /// A block failed its checksum on every copy the engine holds (more members corrupt than
    /// the array's redundancy covers): the engine answers this instead of returning wrong data.
    #[error("{name}: block {lba} is corrupt beyond the array's redundancy ({detail})")]
    Corrupt { name: String, lba: u64, detail: String },
    /// A zoned namespace refused a write or zone command (NVMe ZNS status codes).
    #[error("zone {zone}: {error}")]
    Zone { zone: u64, error: ZoneError },
}

/// Why a zoned namespace refused a command: the NVMe ZNS command-specific status codes.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ZoneError {
    /// Zone Invalid Write: a write that does not start at the zone's write pointer.
    #[error("write at block {lba} is not at the write pointer {write_pointer}")]
    InvalidWrite { lba: u64, write_pointer: u64 },
    /// Zone Boundary Error: the command crosses the end of the zone's writable capacity.
    #[error("{blocks} blocks at {lba} cross the zone's writable end at {end}")]
    Boundary { lba: u64, blocks: u64, end: u64 },
    /// Zone Is Full.
    #[error("the zone is full")]
    Full,
    /// Zone Is Read Only.
    #[error("the zone is read-only")]
    ReadOnly,
    /// Zone Is Offline.
    #[error("the zone is offline")]
    Offline,
    /// Too Many Open Zones: opening one more would pass the open limit.
    #[error("opening it would exceed the limit of {limit} open zones")]
    TooManyOpen { limit: u32 },
    /// Too Many Active Zones: activating one more would pass the active limit.
    #[error("activating it would exceed the limit of {limit} active zones")]
    TooManyActive { limit: u32 },
    /// Zone Invalid State Transition: the command is not allowed in the zone's state.
    #[error("{command} is not allowed in state {state}")]
    InvalidTransition { command: &'static str, state: &'static str },
}

pub type DevResult<T> = Result<T, DevError>;
