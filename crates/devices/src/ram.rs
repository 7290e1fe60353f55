//! A sparse RAM disk: memory is allocated per block on first write and freed on trim, so a
//! large capacity costs nothing until it is used.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{check_io, check_range, BlockDevice, DevResult, DeviceInfo, WriteHints};
use flashrig_metrics::{Counter, Registry};
use parking_lot::Mutex;

/// Shards of the block map. Blocks are grouped into runs of [`RUN_BLOCKS`] that share a shard,
/// so a large sequential I/O takes few locks while reactors touching different regions rarely
/// meet on one lock.
const SHARDS: usize = 64;
const RUN_BLOCKS: u64 = 64;
const _: () = assert!(SHARDS.is_power_of_two());

struct Block {
    data: Box<[u8]>,
    md: Box<[u8]>,
}

pub struct RamDevice {
    info: DeviceInfo,
    latency_ns: u64,
    shards: Vec<Mutex<HashMap<u64, Block>>>,
    metrics: Arc<Registry>,
    reads: Arc<Counter>,
    writes: Arc<Counter>,
    read_bytes: Arc<Counter>,
    write_bytes: Arc<Counter>,
    flushes: Arc<Counter>,
    trims: Arc<Counter>,
}

impl RamDevice {
    /// A RAM device of `num_blocks` blocks of `block_size` bytes, each with `md_bytes` bytes of
    /// metadata, completing every command after `latency_ns` (0: at once).
    pub fn new(
        name: &str,
        block_size: u32,
        num_blocks: u64,
        md_bytes: u32,
        latency_ns: u64,
    ) -> Self {
        let metrics = Registry::new(name);
        let mut info = DeviceInfo::new(name, block_size, num_blocks).with_md_bytes(md_bytes);
        info.caps.fua = true;
        // Data and metadata of a block are copied under one lock.
        info.caps.md_atomic = true;
        Self {
            info,
            latency_ns,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            reads: metrics.counter("reads"),
            writes: metrics.counter("writes"),
            read_bytes: metrics.counter("read_bytes"),
            write_bytes: metrics.counter("write_bytes"),
            flushes: metrics.counter("flushes"),
            trims: metrics.counter("trims"),
            metrics,
        }
    }

    fn shard(&self, lba: u64) -> &Mutex<HashMap<u64, Block>> {
        &self.shards[((lba / RUN_BLOCKS) as usize) & (SHARDS - 1)]
    }

    /// Bytes of block data currently held (for tests of sparseness).
    pub fn allocated_blocks(&self) -> u64 {
        self.shards.iter().map(|s| s.lock().len() as u64).sum()
    }
}

#[async_trait(?Send)]
impl BlockDevice for RamDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn kind(&self) -> &'static str {
        "ram"
    }

    fn metrics(&self) -> Option<Arc<Registry>> {
        Some(self.metrics.clone())
    }

    async fn read(&self, lba: u64, buf: &mut [u8], mut md: Option<&mut [u8]>) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, buf.len(), md.as_ref().map(|m| m.len()))?;
        let bs = self.info.block_size as usize;
        let mdb = self.info.md_bytes_per_block as usize;
        crate::model_latency(self.latency_ns).await;
        for i in 0..blocks {
            let b = lba + i;
            let dst = &mut buf[i as usize * bs..(i as usize + 1) * bs];
            let shard = self.shard(b).lock();
            match shard.get(&b) {
                Some(block) => {
                    dst.copy_from_slice(&block.data);
                    if let Some(m) = md.as_deref_mut() {
                        m[i as usize * mdb..(i as usize + 1) * mdb].copy_from_slice(&block.md);
                    }
                }
                None => {
                    dst.fill(0);
                    if let Some(m) = md.as_deref_mut() {
                        m[i as usize * mdb..(i as usize + 1) * mdb].fill(0);
                    }
                }
            }
        }
        self.reads.inc();
        self.read_bytes.add(buf.len() as u64);
        Ok(())
    }

    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        _hints: WriteHints,
    ) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, data.len(), md.map(|m| m.len()))?;
        let bs = self.info.block_size as usize;
        let mdb = self.info.md_bytes_per_block as usize;
        crate::model_latency(self.latency_ns).await;
        for i in 0..blocks {
            let b = lba + i;
            let src = &data[i as usize * bs..(i as usize + 1) * bs];
            let md_src = md.map(|m| &m[i as usize * mdb..(i as usize + 1) * mdb]);
            let mut shard = self.shard(b).lock();
            let block = shard.entry(b).or_insert_with(|| Block {
                data: vec![0u8; bs].into_boxed_slice(),
                md: vec![0u8; mdb].into_boxed_slice(),
            });
            block.data.copy_from_slice(src);
            match md_src {
                Some(m) => block.md.copy_from_slice(m),
                None => block.md.fill(0),
            }
        }
        self.writes.inc();
        self.write_bytes.add(data.len() as u64);
        Ok(())
    }

    async fn flush(&self) -> DevResult<()> {
        crate::model_latency(self.latency_ns).await;
        self.flushes.inc();
        Ok(())
    }

    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        check_range(&self.info, lba, num_blocks)?;
        crate::model_latency(self.latency_ns).await;
        let end = lba + num_blocks;
        if num_blocks <= 4 * RUN_BLOCKS * SHARDS as u64 {
            for b in lba..end {
                self.shard(b).lock().remove(&b);
            }
        } else {
            // A large trim (a whole-device discard) walks what is allocated, not the range.
            for shard in &self.shards {
                shard.lock().retain(|b, _| !(lba..end).contains(b));
            }
        }
        self.trims.inc();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashrig_runtime::{run, RuntimeKind};

    #[test]
    fn memory_is_taken_on_write_and_given_back_on_trim() {
        let ((after_write, after_trim, zero), _) = run(RuntimeKind::Sim, 1, || async {
            // A terabyte of capacity costs nothing until written.
            let dev = RamDevice::new("r", 4096, 1 << 28, 8, 0);
            dev.write(1000, &[1u8; 3 * 4096], None, WriteHints::NONE).await.unwrap();
            dev.write((1 << 28) - 1, &[2u8; 4096], None, WriteHints::NONE).await.unwrap();
            let after_write = dev.allocated_blocks();
            dev.trim(1001, 1).await.unwrap();
            // A trim larger than the shard walk threshold takes the other path.
            dev.trim(0, 1 << 27).await.unwrap();
            let after_trim = dev.allocated_blocks();
            let mut buf = vec![9u8; 4096];
            let mut md = vec![9u8; 8];
            dev.read(1001, &mut buf, Some(&mut md)).await.unwrap();
            (after_write, after_trim, buf.iter().chain(&md).all(|&b| b == 0))
        });
        assert_eq!(after_write, 4);
        assert_eq!(after_trim, 1, "only the block at the far end is left");
        assert!(zero, "a trimmed block reads as zeros, metadata too");
    }
}
