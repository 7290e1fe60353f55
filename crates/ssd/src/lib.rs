//! The emulated SSD: NAND media ([`media`]), firmware ([`firmware`]), presets ([`config`]),
//! and the block device that puts them together ([`Ssd`]).
//!
//! Layers, top to bottom, as in ARCHITECTURE.md: host interface (submission queue, host
//! link) -> DRAM write buffer -> FTL (page map; GC; SLC cache and its evictor) -> NAND
//! (channel and plane timelines, page types, OOB, payload). Each policy sits behind a narrow
//! trait ([`firmware::buffer::WriteBuffer`], [`firmware::ftl::Ftl`],
//! [`firmware::gc::VictimPolicy`], [`firmware::slc::Evictor`]) so one can be replaced in an
//! afternoon. docs/ssd.md describes the model and its simplifications.

pub mod config;
pub mod device;
pub mod firmware;
pub mod media;

pub use config::{PayloadMode, SsdConfig, Timing};
pub use device::{RecoveryReport, Ssd};

/// The 64-bit fingerprint payload mode `tag` keeps for a block: XXH3 of its bytes, except
/// that a block of zeros has the tag 0, so it reads back as zeros like a block never written.
pub fn tag_of(block: &[u8]) -> u64 {
    if block.iter().all(|&b| b == 0) {
        0
    } else {
        xxhash_rust::xxh3::xxh3_64(block)
    }
}
