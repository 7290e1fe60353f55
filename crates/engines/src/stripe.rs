//! `stripe`: RAID-0 over equal members, `chunk_blocks` per chunk, round robin.

use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{
    check_io, check_range, BlockDevice, DevError, DevRef, DevResult, DeviceInfo, VendorCommand,
    VendorReply, WriteHints,
};
use flashrig_metrics::{Counter, Registry};

use crate::layout::stripe_pieces;
use crate::{check_members, fanout, EngineConstraints};

pub const CONSTRAINTS: EngineConstraints =
    EngineConstraints { name: "stripe", min_members: 1, failures_tolerated: 0 };

pub struct Stripe {
    info: DeviceInfo,
    members: Vec<DevRef>,
    chunk_blocks: u64,
    metrics: Arc<Registry>,
    reads: Arc<Counter>,
    writes: Arc<Counter>,
    trims: Arc<Counter>,
    flushes: Arc<Counter>,
}

impl Stripe {
    pub fn new(name: &str, members: Vec<DevRef>, chunk_blocks: u64) -> DevResult<Self> {
        let (bs, md) = check_members(&CONSTRAINTS, &members)?;
        if chunk_blocks == 0 {
            return Err(DevError::Invalid("stripe: chunk size must be at least one block".into()));
        }
        // Every member contributes the same number of whole chunks.
        let rows = members.iter().map(|m| m.info().num_blocks / chunk_blocks).min().unwrap_or(0);
        if rows == 0 {
            return Err(DevError::Invalid(format!(
                "stripe: a member is smaller than one {chunk_blocks}-block chunk"
            )));
        }
        let mut info =
            DeviceInfo::new(name, bs, rows * chunk_blocks * members.len() as u64).with_md_bytes(md);
        info.optimal_io_blocks = (chunk_blocks * members.len() as u64) as u32;
        info.caps.fua = members.iter().all(|m| m.info().caps.fua);
        info.caps.md_atomic = members.iter().all(|m| m.info().caps.md_atomic);
        let metrics = Registry::new(name);
        Ok(Self {
            info,
            members,
            chunk_blocks,
            reads: metrics.counter("reads"),
            writes: metrics.counter("writes"),
            trims: metrics.counter("trims"),
            flushes: metrics.counter("flushes"),
            metrics,
        })
    }
}

#[async_trait(?Send)]
impl BlockDevice for Stripe {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn kind(&self) -> &'static str {
        "stripe"
    }
    fn metrics(&self) -> Option<Arc<Registry>> {
        Some(self.metrics.clone())
    }
    fn children(&self) -> Vec<DevRef> {
        self.members.clone()
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, buf.len(), md.as_ref().map(|m| m.len()))?;
        let pieces = stripe_pieces(lba, blocks, self.chunk_blocks, self.members.len());
        self.reads.inc();
        let bs = self.info.block_size as usize;
        let mdb = self.info.md_bytes_per_block as usize;
        fanout::read(&self.members, &pieces, bs, mdb, buf, md).await
    }

    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, data.len(), md.map(|m| m.len()))?;
        let pieces = stripe_pieces(lba, blocks, self.chunk_blocks, self.members.len());
        self.writes.inc();
        let bs = self.info.block_size as usize;
        let mdb = self.info.md_bytes_per_block as usize;
        fanout::write(&self.members, &pieces, bs, mdb, data, md, hints).await
    }

    async fn flush(&self) -> DevResult<()> {
        self.flushes.inc();
        fanout::flush(&self.members).await
    }

    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        check_range(&self.info, lba, num_blocks)?;
        self.trims.inc();
        let pieces = stripe_pieces(lba, num_blocks, self.chunk_blocks, self.members.len());
        fanout::trim(&self.members, &pieces).await
    }

    async fn vendor(&self, cmd: VendorCommand<'_>) -> DevResult<VendorReply> {
        match cmd {
            VendorCommand::Scrub => fanout::scrub(&self.members).await,
            _ => Err(DevError::Unsupported { command: "vendor" }),
        }
    }
}
