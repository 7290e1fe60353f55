//! NAND media: where a mapping unit lives ([`layout`]), how long operations take on the
//! channels and planes ([`timing`]), and what the pages hold ([`store`]; WAFLASH's compacted pages: [`compacted`]).

pub mod compacted;
pub mod image;
pub mod layout;
pub mod store;
pub mod timing;

pub use layout::{Layout, PageAddr};
pub use store::LineStore;
pub use timing::{NandCounters, NandTimer, ProgramSpan};

/// OOB bytes the FTL keeps per mapping unit: logical unit number (4), write sequence number
/// (8), flags (1).
pub const OOB_FTL_BYTES_PER_SLOT: u32 = 13;
