//! A sparse RAM disk: memory is allocated per block on first write and freed on trim, so a
//! large capacity costs nothing until it is used.
//!
//! The blocks are found through a map of *chunks*, runs of [`CHUNK_BLOCKS`] consecutive
//! blocks that share one map entry and one lock, while each block keeps an allocation of its
//! own. A large I/O thus takes one lookup and one lock per chunk rather than per block:
//! profiling 1 MiB NBD writes into a `ram` export showed a third of the server's time in the
//! per-block lookups and locks beside the copy itself (docs/benchmarks.md, "Serving real
//! clients"). Allocating whole chunks instead would have saved the per-block allocations too,
//! but then a scattered 4 KiB write zeroes and faults in a whole chunk: the default workload's
//! random first writes lost a third of their IOPS that way.
//!
//! A trimmed block's allocation is kept as a *spare*, up to [`SPARE_BYTES`] per device (and
//! an eighth of its capacity), and the next write of a block that holds nothing takes a spare
//! instead of asking the allocator. Engines that trim and rewrite all the time (`scala` trims
//! each vertical hero it converts, `twophase` each row it frees) otherwise spent more than half
//! of their time on RAM members in `calloc`, the allocator growing and shrinking its heaps and
//! the kernel faulting in and clearing the pages again (docs/benchmarks.md, "`scala` and
//! `twophase` on RAM members"). Memory beyond the spares still goes back on trim.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{check_io, check_range, BlockDevice, DevResult, DeviceInfo, WriteHints};
use flashrig_metrics::{Counter, Registry};
use parking_lot::Mutex;

/// Shards of the chunk map, so reactors touching different regions rarely meet on one lock.
const SHARDS: usize = 64;
const _: () = assert!(SHARDS.is_power_of_two());
/// Blocks per chunk: 256 KiB of 4 KiB blocks per map lookup.
const CHUNK_BLOCKS: u64 = 64;
/// A trim of more chunks than this walks what is allocated instead of the range.
const TRIM_WALK_CHUNKS: u64 = 16 * SHARDS as u64;
/// Bytes of trimmed block allocations kept for reuse by later writes, per device.
const SPARE_BYTES: u64 = 16 << 20;

/// The blocks of one chunk: `None` for a block never written (or trimmed), which reads as
/// zeros; otherwise the block's data followed by its metadata, in one allocation.
struct Chunk {
    blocks: Box<[Option<Box<[u8]>>]>,
}

impl Chunk {
    fn new() -> Chunk {
        Chunk { blocks: (0..CHUNK_BLOCKS).map(|_| None).collect() }
    }

    fn is_empty(&self) -> bool {
        self.blocks.iter().all(Option::is_none)
    }
}

pub struct RamDevice {
    info: DeviceInfo,
    latency_ns: u64,
    shards: Vec<Mutex<HashMap<u64, Chunk>>>,
    /// Allocations of trimmed blocks (data and metadata bytes, contents stale), at most
    /// `spare_max` of them: a write to a block that holds nothing takes one before it
    /// allocates. Taken after a shard's lock or alone, never before one.
    spares: Mutex<Vec<Box<[u8]>>>,
    spare_max: usize,
    metrics: Arc<Registry>,
    reads: Arc<Counter>,
    writes: Arc<Counter>,
    read_bytes: Arc<Counter>,
    write_bytes: Arc<Counter>,
    flushes: Arc<Counter>,
    trims: Arc<Counter>,
}

/// The part of an I/O that falls into one chunk: blocks `first..first + blocks` of chunk
/// `chunk`, at block `done` of the I/O.
struct Piece {
    chunk: u64,
    first: usize,
    blocks: usize,
    done: usize,
}

/// Splits `lba..lba + blocks` at chunk boundaries.
fn pieces(lba: u64, blocks: u64) -> impl Iterator<Item = Piece> {
    let mut done = 0;
    std::iter::from_fn(move || {
        if done == blocks {
            return None;
        }
        let b = lba + done;
        let first = b % CHUNK_BLOCKS;
        let n = (CHUNK_BLOCKS - first).min(blocks - done);
        let p = Piece {
            chunk: b / CHUNK_BLOCKS,
            first: first as usize,
            blocks: n as usize,
            done: done as usize,
        };
        done += n;
        Some(p)
    })
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
            spares: Mutex::default(),
            spare_max: (SPARE_BYTES / (block_size as u64 + md_bytes as u64).max(1))
                .min(num_blocks / 8) as usize,
            reads: metrics.counter("reads"),
            writes: metrics.counter("writes"),
            read_bytes: metrics.counter("read_bytes"),
            write_bytes: metrics.counter("write_bytes"),
            flushes: metrics.counter("flushes"),
            trims: metrics.counter("trims"),
            metrics,
        }
    }

    fn shard(&self, chunk: u64) -> &Mutex<HashMap<u64, Chunk>> {
        &self.shards[(chunk as usize) & (SHARDS - 1)]
    }

    /// Keeps trimmed blocks' allocations as spares, up to the limit; the rest are freed.
    fn keep_spares(&self, freed: &mut Vec<Box<[u8]>>) {
        if freed.is_empty() {
            return;
        }
        let mut spares = self.spares.lock();
        let room = self.spare_max.saturating_sub(spares.len());
        let keep = freed.len().min(room);
        spares.extend(freed.drain(..keep));
        drop(spares);
        freed.clear();
    }

    /// Spare allocations kept right now (for tests).
    #[cfg(test)]
    fn spare_blocks(&self) -> usize {
        self.spares.lock().len()
    }

    /// Blocks currently holding written data (for tests of sparseness).
    pub fn allocated_blocks(&self) -> u64 {
        let count = |c: &Chunk| c.blocks.iter().filter(|b| b.is_some()).count() as u64;
        self.shards.iter().map(|s| s.lock().values().map(count).sum::<u64>()).sum()
    }

    /// Chunks in the map (for tests that chunks left empty by trims are dropped).
    #[cfg(test)]
    fn chunks(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
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
        for p in pieces(lba, blocks) {
            let shard = self.shard(p.chunk).lock();
            let chunk = shard.get(&p.chunk);
            for i in 0..p.blocks {
                let at = p.done + i;
                let dst = &mut buf[at * bs..(at + 1) * bs];
                let md_dst = md.as_deref_mut().map(|m| &mut m[at * mdb..(at + 1) * mdb]);
                match chunk.and_then(|c| c.blocks[p.first + i].as_deref()) {
                    Some(block) => {
                        dst.copy_from_slice(&block[..bs]);
                        if let Some(m) = md_dst {
                            m.copy_from_slice(&block[bs..]);
                        }
                    }
                    None => {
                        dst.fill(0);
                        if let Some(m) = md_dst {
                            m.fill(0);
                        }
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
        for p in pieces(lba, blocks) {
            let mut shard = self.shard(p.chunk).lock();
            let chunk = shard.entry(p.chunk).or_insert_with(Chunk::new);
            // Taken at the first block that holds nothing, so overwrites never touch it.
            let mut spares = None;
            for i in 0..p.blocks {
                let at = p.done + i;
                // Every byte of the block (data, then metadata or zeros) is written below, so
                // a spare's stale contents never show.
                let block = chunk.blocks[p.first + i].get_or_insert_with(|| {
                    spares
                        .get_or_insert_with(|| self.spares.lock())
                        .pop()
                        .unwrap_or_else(|| vec![0u8; bs + mdb].into_boxed_slice())
                });
                block[..bs].copy_from_slice(&data[at * bs..(at + 1) * bs]);
                match md {
                    Some(m) => block[bs..].copy_from_slice(&m[at * mdb..(at + 1) * mdb]),
                    None => block[bs..].fill(0),
                }
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
        let mut freed = Vec::new();
        if num_blocks / CHUNK_BLOCKS <= TRIM_WALK_CHUNKS {
            for p in pieces(lba, num_blocks) {
                let mut shard = self.shard(p.chunk).lock();
                if let Some(c) = shard.get_mut(&p.chunk) {
                    freed.extend(
                        c.blocks[p.first..p.first + p.blocks].iter_mut().flat_map(Option::take),
                    );
                    if c.is_empty() {
                        shard.remove(&p.chunk);
                    }
                }
                drop(shard);
                self.keep_spares(&mut freed);
            }
        } else {
            // A large trim (a whole-device discard) walks what is allocated, not the range.
            for shard in &self.shards {
                shard.lock().retain(|&chunk, c| {
                    let start = chunk * CHUNK_BLOCKS;
                    let from = start.max(lba);
                    let to = (start + CHUNK_BLOCKS).min(end);
                    if from < to {
                        let range = (from - start) as usize..(to - start) as usize;
                        freed.extend(c.blocks[range].iter_mut().flat_map(Option::take));
                    }
                    !c.is_empty()
                });
                self.keep_spares(&mut freed);
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

    #[test]
    fn a_chunk_is_dropped_when_its_last_written_block_is_trimmed() {
        let (steps, _) = run(RuntimeKind::Sim, 1, || async {
            let dev = RamDevice::new("r", 4096, 1 << 20, 0, 0);
            let mut steps = Vec::new();
            // Blocks 64 and 65 share the second chunk; block 1000 is in another.
            dev.write(64, &[1u8; 2 * 4096], None, WriteHints::NONE).await.unwrap();
            dev.write(1000, &[2u8; 4096], None, WriteHints::NONE).await.unwrap();
            steps.push((dev.allocated_blocks(), dev.chunks()));
            dev.trim(64, 1).await.unwrap();
            steps.push((dev.allocated_blocks(), dev.chunks()));
            // Trimming blocks that were never written changes nothing.
            dev.trim(66, 4).await.unwrap();
            steps.push((dev.allocated_blocks(), dev.chunks()));
            dev.trim(65, 1).await.unwrap();
            steps.push((dev.allocated_blocks(), dev.chunks()));
            let mut buf = vec![9u8; 3 * 4096];
            dev.read(64, &mut buf, None).await.unwrap();
            let zeros = buf.iter().all(|&b| b == 0);
            dev.read(1000, &mut buf[..4096], None).await.unwrap();
            (steps, zeros, buf[..4096].iter().all(|&b| b == 2))
        });
        let (steps, zeros, kept) = steps;
        assert_eq!(steps, vec![(3, 2), (2, 2), (2, 2), (1, 1)], "(blocks, chunks) after each step");
        assert!(zeros, "trimmed blocks read as zeros");
        assert!(kept, "block 1000 was not trimmed");
    }

    #[test]
    fn trimmed_allocations_are_reused_up_to_the_limit_and_never_show_old_bytes() {
        let (res, _) = run(RuntimeKind::Sim, 1, || async {
            // 1024 blocks: at most 128 spares (an eighth of the capacity).
            let dev = RamDevice::new("r", 4096, 1024, 16, 0);
            dev.write(0, &[7u8; 200 * 4096], Some(&[9u8; 200 * 16]), WriteHints::NONE)
                .await
                .unwrap();
            dev.trim(0, 200).await.unwrap();
            let kept = dev.spare_blocks();
            // Rewritten without metadata and with other data: nothing of the trimmed blocks'
            // bytes may come back.
            dev.write(500, &[1u8; 4096], None, WriteHints::NONE).await.unwrap();
            let after_write = dev.spare_blocks();
            let mut buf = vec![0u8; 4096];
            let mut md = vec![5u8; 16];
            dev.read(500, &mut buf, Some(&mut md)).await.unwrap();
            (kept, after_write, dev.allocated_blocks(), buf.iter().all(|&b| b == 1), md == [0; 16])
        });
        assert_eq!(res, (128, 127, 1, true, true));
    }

    /// Random reads, writes and trims of up to 150 blocks (so they cross chunk boundaries),
    /// checked block by block against the reference model.
    #[test]
    fn random_commands_across_chunk_boundaries_match_the_model() {
        use flashrig_blockdev::DevRef;
        use flashrig_check::{run_check, seeds, CheckConfig, Model, OpWeights};
        for seed in seeds(1, 3) {
            for (block_size, md_bytes) in [(512, 8), (4096, 0), (4096, 16)] {
                let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
                    let dev: DevRef = Arc::new(RamDevice::new("r", block_size, 1024, md_bytes, 0));
                    let model = Model::for_device(dev.info(), seed);
                    let check = CheckConfig {
                        seed,
                        ops: 1500,
                        max_io_blocks: 150,
                        weights: OpWeights { read: 35, write: 45, trim: 15, flush: 5 },
                        ..CheckConfig::default()
                    };
                    run_check(dev, Arc::new(parking_lot::Mutex::new(model)), &check)
                        .await
                        .map(|_| ())
                });
                if let Err(e) = res {
                    panic!("block size {block_size}, md {md_bytes}: {e}");
                }
            }
        }
    }
}
