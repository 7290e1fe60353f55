//! `concat`: members laid end to end.

use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{
    check_io, check_range, BlockDevice, DevError, DevRef, DevResult, DeviceInfo, VendorCommand,
    VendorReply, WriteHints,
};
use flashrig_metrics::Registry;

use crate::layout::concat_pieces;
use crate::{check_members, fanout, EngineConstraints};

pub const CONSTRAINTS: EngineConstraints =
    EngineConstraints { name: "concat", min_members: 1, failures_tolerated: 0 };

pub struct Concat {
    info: DeviceInfo,
    members: Vec<DevRef>,
    starts: Vec<u64>,
    metrics: Arc<Registry>,
}

impl Concat {
    pub fn new(name: &str, members: Vec<DevRef>) -> DevResult<Self> {
        let (bs, md) = check_members(&CONSTRAINTS, &members)?;
        let mut starts = Vec::with_capacity(members.len());
        let mut total = 0;
        for m in &members {
            starts.push(total);
            total += m.info().num_blocks;
        }
        let mut info = DeviceInfo::new(name, bs, total).with_md_bytes(md);
        info.caps.fua = members.iter().all(|m| m.info().caps.fua);
        info.caps.md_atomic = members.iter().all(|m| m.info().caps.md_atomic);
        Ok(Self { info, members, starts, metrics: Registry::new(name) })
    }

    fn pieces(&self, lba: u64, blocks: u64) -> Vec<crate::layout::Piece> {
        concat_pieces(lba, blocks, &self.starts, self.info.num_blocks)
    }
}

#[async_trait(?Send)]
impl BlockDevice for Concat {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn kind(&self) -> &'static str {
        "concat"
    }
    fn metrics(&self) -> Option<Arc<Registry>> {
        Some(self.metrics.clone())
    }
    fn children(&self) -> Vec<DevRef> {
        self.members.clone()
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, buf.len(), md.as_ref().map(|m| m.len()))?;
        let bs = self.info.block_size as usize;
        let mdb = self.info.md_bytes_per_block as usize;
        fanout::read(&self.members, &self.pieces(lba, blocks), bs, mdb, buf, md).await
    }

    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, data.len(), md.map(|m| m.len()))?;
        let bs = self.info.block_size as usize;
        let mdb = self.info.md_bytes_per_block as usize;
        fanout::write(&self.members, &self.pieces(lba, blocks), bs, mdb, data, md, hints).await
    }

    async fn flush(&self) -> DevResult<()> {
        fanout::flush(&self.members).await
    }

    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        check_range(&self.info, lba, num_blocks)?;
        fanout::trim(&self.members, &self.pieces(lba, num_blocks)).await
    }

    async fn vendor(&self, cmd: VendorCommand<'_>) -> DevResult<VendorReply> {
        match cmd {
            VendorCommand::Scrub => fanout::scrub(&self.members).await,
            _ => Err(DevError::Unsupported { command: "vendor" }),
        }
    }
}
