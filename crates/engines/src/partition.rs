//! `partition`: a window of blocks of one device, as an LVM logical volume or a disk partition
//! is. CSAL's evaluation gives each of its eight VMs such a slice of the shared device
//! (csal-eurosys24.txt §2.1, §3.1: "the host can multiplex a large-capacity QLC SSD as
//! multiple logical devices via LVM partitioning"), and `flashrig serve nbd --partitions N`
//! exports each slice under its own name. A flush flushes the whole device below, as a flush
//! of an LVM volume does.

use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{
    check_io, check_range, BlockDevice, DevError, DevRef, DevResult, DeviceInfo, WriteHints,
};
use flashrig_metrics::Registry;

pub struct Partition {
    info: DeviceInfo,
    dev: DevRef,
    first_block: u64,
    metrics: Arc<Registry>,
}

impl Partition {
    /// Blocks `first_block .. first_block + num_blocks` of `dev`.
    pub fn new(name: &str, dev: DevRef, first_block: u64, num_blocks: u64) -> DevResult<Self> {
        let below = dev.info();
        if num_blocks == 0
            || first_block.checked_add(num_blocks).is_none_or(|e| e > below.num_blocks)
        {
            return Err(DevError::Invalid(format!(
                "{name}: blocks {first_block}..{} do not lie inside {} ({} blocks)",
                first_block.saturating_add(num_blocks),
                below.name,
                below.num_blocks
            )));
        }
        let mut info = DeviceInfo::new(name, below.block_size, num_blocks)
            .with_md_bytes(below.md_bytes_per_block);
        info.caps = below.caps;
        // Zone commands address zones by number from the device's start: not offered through a
        // window that may not start on a zone.
        info.caps.zones = false;
        info.caps.convert = false;
        info.caps.compute = false;
        info.max_io_blocks = below.max_io_blocks;
        info.optimal_io_blocks = below.optimal_io_blocks;
        Ok(Self { info, dev, first_block, metrics: Registry::new(name) })
    }

    /// `count` equal partitions of `dev` (the last one also takes the remainder), named
    /// `{prefix}{i}`.
    pub fn split(prefix: &str, dev: &DevRef, count: u64) -> DevResult<Vec<Partition>> {
        let total = dev.info().num_blocks;
        if count == 0 || count > total {
            return Err(DevError::Invalid(format!(
                "{}: cannot split {total} blocks into {count} partitions",
                dev.info().name
            )));
        }
        let each = total / count;
        (0..count)
            .map(|i| {
                let n = if i + 1 == count { total - i * each } else { each };
                Partition::new(&format!("{prefix}{i}"), dev.clone(), i * each, n)
            })
            .collect()
    }

    pub fn first_block(&self) -> u64 {
        self.first_block
    }
}

#[async_trait(?Send)]
impl BlockDevice for Partition {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn kind(&self) -> &'static str {
        "partition"
    }
    fn metrics(&self) -> Option<Arc<Registry>> {
        Some(self.metrics.clone())
    }
    fn children(&self) -> Vec<DevRef> {
        vec![self.dev.clone()]
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        check_io(&self.info, lba, buf.len(), md.as_deref().map(|m| m.len()))?;
        self.dev.read(self.first_block + lba, buf, md).await
    }

    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        check_io(&self.info, lba, data.len(), md.map(|m| m.len()))?;
        self.dev.write(self.first_block + lba, data, md, hints).await
    }

    async fn flush(&self) -> DevResult<()> {
        self.dev.flush().await
    }

    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        check_range(&self.info, lba, num_blocks)?;
        self.dev.trim(self.first_block + lba, num_blocks).await
    }
}

#[cfg(test)]
mod tests {
    use flashrig_devices::RamDevice;
    use flashrig_runtime::{run, RuntimeKind};

    use super::*;

    #[test]
    fn partitions_address_their_own_window_and_nothing_else() {
        run(RuntimeKind::Sim, 1, || async {
            let ram: DevRef = Arc::new(RamDevice::new("ram", 4096, 10, 8, 0));
            let parts = Partition::split("p", &ram, 3).unwrap();
            assert_eq!(
                parts.iter().map(|p| (p.first_block(), p.info().num_blocks)).collect::<Vec<_>>(),
                [(0, 3), (3, 3), (6, 4)]
            );
            parts[1].write(2, &[7u8; 4096], Some(&[1u8; 8]), WriteHints::NONE).await.unwrap();
            let mut buf = vec![0u8; 4096];
            ram.read(5, &mut buf, None).await.unwrap();
            assert_eq!(buf, [7u8; 4096]);
            // The window's end is its own.
            assert!(matches!(
                parts[1].write(3, &[0u8; 4096], None, WriteHints::NONE).await,
                Err(DevError::OutOfRange { .. })
            ));
            parts[1].trim(2, 1).await.unwrap();
            ram.read(5, &mut buf, None).await.unwrap();
            assert_eq!(buf, [0u8; 4096]);
            assert!(Partition::new("x", ram.clone(), 8, 3).is_err());
            assert!(Partition::split("p", &ram, 11).is_err());
        });
    }
}
