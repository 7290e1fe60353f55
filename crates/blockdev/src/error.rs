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
}

pub type DevResult<T> = Result<T, DevError>;
