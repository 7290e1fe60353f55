//! `Tap`: the one seam of the pass-through test layers ([`crate::Failable`],
//! [`crate::Jitter`], [`crate::Rot`], [`crate::Fuse`], and the one-off layers tests build).
//!
//! A layer says only what it does differently from the device below: what happens before a
//! command goes down (a delay, a count, a refusal), what happens once it is answered (a count
//! that cuts the power, a check that the member is still there), and, where it must, how it
//! answers a write, a flush or a trim itself. [`Tapped`] forwards everything else unchanged,
//! reports the device below as its child, and keeps no metrics of its own, so a test layer
//! never repeats the forwarding of the whole [`BlockDevice`] interface.

use std::ops::Deref;
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{
    BlockDevice, DevRef, DevResult, DeviceInfo, VendorCommand, VendorReply, WriteHints,
    ZoneCommand, ZoneReply,
};
use flashrig_metrics::Registry;

/// Which command a hook sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmd {
    Read,
    Write,
    Flush,
    Trim,
    Zone,
    Vendor,
}

/// What a pass-through test layer does around the commands it forwards. Every hook defaults
/// to doing nothing, and every command to going down unchanged.
#[async_trait(?Send)]
pub trait Tap {
    /// The layer's kind, as [`BlockDevice::kind`] reports it.
    fn kind(&self) -> &'static str;

    /// Runs before `cmd` goes down to `below`; an error answers the command instead.
    async fn before(&self, _below: &DevRef, _cmd: Cmd) -> DevResult<()> {
        Ok(())
    }

    /// Runs once `below` has answered `cmd`; an error replaces the answer.
    fn after(&self, _below: &DevRef, _cmd: Cmd) -> DevResult<()> {
        Ok(())
    }

    /// Performs a write (after [`Tap::before`]); the default passes it down.
    async fn write(
        &self,
        below: &DevRef,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        below.write(lba, data, md, hints).await
    }

    /// Performs a flush (after [`Tap::before`]); the default passes it down.
    async fn flush(&self, below: &DevRef) -> DevResult<()> {
        below.flush().await
    }

    /// Performs a trim (after [`Tap::before`]); the default passes it down.
    async fn trim(&self, below: &DevRef, lba: u64, num_blocks: u64) -> DevResult<()> {
        below.trim(lba, num_blocks).await
    }
}

/// A [`Tap`] over a device: a [`BlockDevice`] that forwards every command to `below` through
/// the tap's hooks. It dereferences to the tap, so a layer's own controls (`fail`, `arm`, ...)
/// are called on it directly.
pub struct Tapped<T> {
    below: DevRef,
    tap: T,
}

impl<T: Tap> Tapped<T> {
    /// `tap` over `below`.
    pub fn over(below: DevRef, tap: T) -> Self {
        Tapped { below, tap }
    }

    /// The device below.
    pub fn below(&self) -> &DevRef {
        &self.below
    }

    /// Runs `cmd` through the hooks around `op`, the command's own work.
    async fn run<R>(
        &self,
        cmd: Cmd,
        op: impl std::future::Future<Output = DevResult<R>>,
    ) -> DevResult<R> {
        self.tap.before(&self.below, cmd).await?;
        let r = op.await;
        self.tap.after(&self.below, cmd)?;
        r
    }
}

impl<T> Deref for Tapped<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.tap
    }
}

#[async_trait(?Send)]
impl<T: Tap + Send + Sync> BlockDevice for Tapped<T> {
    fn info(&self) -> &DeviceInfo {
        self.below.info()
    }
    fn kind(&self) -> &'static str {
        self.tap.kind()
    }
    fn metrics(&self) -> Option<Arc<Registry>> {
        None
    }
    fn children(&self) -> Vec<DevRef> {
        vec![self.below.clone()]
    }
    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        self.run(Cmd::Read, self.below.read(lba, buf, md)).await
    }
    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        self.run(Cmd::Write, self.tap.write(&self.below, lba, data, md, hints)).await
    }
    async fn flush(&self) -> DevResult<()> {
        self.run(Cmd::Flush, self.tap.flush(&self.below)).await
    }
    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        self.run(Cmd::Trim, self.tap.trim(&self.below, lba, num_blocks)).await
    }
    async fn zone(&self, cmd: ZoneCommand) -> DevResult<ZoneReply> {
        self.run(Cmd::Zone, self.below.zone(cmd)).await
    }
    async fn vendor(&self, cmd: VendorCommand<'_>) -> DevResult<VendorReply> {
        self.run(Cmd::Vendor, self.below.vendor(cmd)).await
    }
}
