//! The block-device contract.
//!
//! Every layer of a flashrig stack, from a RAM disk to the ScalaAFA engine, implements
//! [`BlockDevice`], and every engine is built on `Arc<dyn BlockDevice>` members, so stacks
//! compose like SPDK bdevs or device-mapper targets.
//!
//! Addresses are logical block addresses (LBAs) in units of the device's
//! [`DeviceInfo::block_size`]. Buffers are borrowed for the duration of the call; a command
//! completes when its future resolves. Futures are not `Send`: a command is polled on the
//! reactor that issued it, which is how both runtimes (simulated and real) keep the I/O path
//! free of locks.

mod command;
mod error;
mod info;
pub mod zones;

pub use command::{
    ComputeCommand, ConvertCommand, ParityType, ScrubReport, VendorCommand, VendorReply,
    WriteHints, ZoneCommand, ZoneDescriptor, ZoneReply, ZoneState,
};
pub use error::{DevError, DevResult, ZoneError};
pub use info::{Capabilities, DeviceInfo, ZoneGeometry};

use std::sync::Arc;

use async_trait::async_trait;
use flashrig_metrics::{LayerSnapshot, Registry};

/// A shared handle to a device; engines hold their members this way.
pub type DevRef = Arc<dyn BlockDevice>;

/// The one interface between layers.
///
/// Required: `read`, `write`, `flush`, `trim`. Optional commands have default implementations
/// that answer [`DevError::Unsupported`]; a device lists what it supports in
/// [`DeviceInfo::caps`], and an engine that needs an optional command checks there and falls
/// back (host-side conversion, a metadata region) when it is missing.
#[async_trait(?Send)]
pub trait BlockDevice: Send + Sync {
    /// What the device is: block size, capacity, metadata bytes, supported commands.
    fn info(&self) -> &DeviceInfo;

    /// Reads `buf.len() / block_size` blocks at `lba` into `buf`. When `md` is given it must
    /// hold `md_bytes_per_block` bytes per block and receives each block's metadata.
    /// Blocks never written (or trimmed) read as zeros with zeroed metadata.
    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()>;

    /// Writes `data` (a whole number of blocks) at `lba`, with optional per-block metadata
    /// stored alongside in the same operation. The write is durable once a later `flush`
    /// completes, or at completion when `hints.fua` is set.
    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()>;

    /// Makes every write completed before this call durable.
    async fn flush(&self) -> DevResult<()>;

    /// Deallocates `num_blocks` blocks at `lba`; they read back as zeros. Durable like a write.
    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()>;

    /// Zone management and zone append (zoned devices only).
    async fn zone(&self, _cmd: ZoneCommand) -> DevResult<ZoneReply> {
        Err(DevError::Unsupported { command: "zone" })
    }

    /// Vendor commands: ScalaAFA's in-SSD conversion, near-storage compute.
    async fn vendor(&self, _cmd: VendorCommand<'_>) -> DevResult<VendorReply> {
        Err(DevError::Unsupported { command: "vendor" })
    }

    /// This layer's metrics, if it keeps any.
    fn metrics(&self) -> Option<Arc<Registry>> {
        None
    }

    /// The devices this layer is built on, top to bottom, so reports can walk the stack.
    fn children(&self) -> Vec<DevRef> {
        Vec::new()
    }

    /// The layer's type name (`ram`, `file`, `stripe`, ...), used in reports.
    fn kind(&self) -> &'static str;
}

/// Walks a stack and snapshots every layer's metrics, mirroring the stack's shape.
pub fn snapshot_stack(dev: &dyn BlockDevice) -> LayerSnapshot {
    let mut snap = match dev.metrics() {
        Some(r) => r.snapshot(),
        None => LayerSnapshot { name: dev.info().name.clone(), ..Default::default() },
    };
    snap.kind = dev.kind().to_string();
    snap.children = dev.children().iter().map(|c| snapshot_stack(c.as_ref())).collect();
    snap
}

/// Empties every layer's latency histograms, down the stack (counters stay): the measured
/// window of a run starts here.
pub fn reset_stack_latencies(dev: &dyn BlockDevice) {
    if let Some(r) = dev.metrics() {
        r.reset_latencies();
    }
    for c in dev.children() {
        reset_stack_latencies(c.as_ref());
    }
}

/// Checks that `len_bytes` at `lba` is a whole number of blocks inside the device, and that a
/// metadata buffer, if any, has the matching length. Every device calls this first, so every
/// layer rejects bad requests the same way.
pub fn check_io(
    info: &DeviceInfo,
    lba: u64,
    len_bytes: usize,
    md_len: Option<usize>,
) -> DevResult<u64> {
    let bs = info.block_size as usize;
    if len_bytes == 0 || !len_bytes.is_multiple_of(bs) {
        return Err(DevError::Misaligned { len_bytes, block_size: info.block_size });
    }
    let blocks = (len_bytes / bs) as u64;
    check_range(info, lba, blocks)?;
    if let Some(md_len) = md_len {
        let want = blocks as usize * info.md_bytes_per_block as usize;
        if info.md_bytes_per_block == 0 {
            return Err(DevError::Unsupported { command: "per-block metadata" });
        }
        if md_len != want {
            return Err(DevError::MetadataLength { got: md_len, want });
        }
    }
    Ok(blocks)
}

/// Checks that `num_blocks` at `lba` lies inside the device.
pub fn check_range(info: &DeviceInfo, lba: u64, num_blocks: u64) -> DevResult<()> {
    match lba.checked_add(num_blocks) {
        Some(end) if end <= info.num_blocks => Ok(()),
        _ => Err(DevError::OutOfRange { lba, num_blocks, capacity_blocks: info.num_blocks }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> DeviceInfo {
        DeviceInfo::new("t", 4096, 100).with_md_bytes(16)
    }

    #[test]
    fn check_io_accepts_whole_blocks_inside() {
        assert_eq!(check_io(&info(), 0, 8192, None).unwrap(), 2);
        assert_eq!(check_io(&info(), 98, 8192, Some(32)).unwrap(), 2);
    }

    #[test]
    fn check_io_rejects_bad_requests() {
        assert!(matches!(check_io(&info(), 0, 100, None), Err(DevError::Misaligned { .. })));
        assert!(matches!(check_io(&info(), 0, 0, None), Err(DevError::Misaligned { .. })));
        assert!(matches!(check_io(&info(), 99, 8192, None), Err(DevError::OutOfRange { .. })));
        assert!(matches!(
            check_io(&info(), u64::MAX, 4096, None),
            Err(DevError::OutOfRange { .. })
        ));
        assert!(matches!(
            check_io(&info(), 0, 4096, Some(15)),
            Err(DevError::MetadataLength { got: 15, want: 16 })
        ));
        let no_md = DeviceInfo::new("t", 4096, 100);
        assert!(matches!(check_io(&no_md, 0, 4096, Some(0)), Err(DevError::Unsupported { .. })));
    }
}
