//! `Failable`: a pass-through layer that can be made to fail like a pulled drive, for testing
//! the redundancy of engines. Once [`Failable::fail`] is called, or after a set number of
//! commands, every command answers `DeviceFailed`; nothing reaches the device below any more.
//!
//! The `inject` engine of a later issue models the thesis' full fault catalogue; this is the
//! one fault the RAID tests need, with a deterministic trigger.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{BlockDevice, DevError, DevRef, DevResult, DeviceInfo, WriteHints};
use flashrig_metrics::Registry;

pub struct Failable {
    inner: DevRef,
    failed: AtomicBool,
    /// Fail when this many commands have been issued (u64::MAX: never by count).
    fail_after_ops: AtomicU64,
    ops: AtomicU64,
}

impl Failable {
    pub fn new(inner: DevRef) -> Self {
        Failable {
            inner,
            failed: AtomicBool::new(false),
            fail_after_ops: AtomicU64::new(u64::MAX),
            ops: AtomicU64::new(0),
        }
    }

    /// Fails the device now.
    pub fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
    }

    /// Fails the device once `n` more commands have been issued to it.
    pub fn fail_after(&self, n: u64) {
        let now = self.ops.load(Ordering::SeqCst);
        self.fail_after_ops.store(now.saturating_add(n), Ordering::SeqCst);
    }

    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    fn check(&self) -> DevResult<()> {
        let op = self.ops.fetch_add(1, Ordering::SeqCst);
        if op >= self.fail_after_ops.load(Ordering::SeqCst) {
            self.failed.store(true, Ordering::SeqCst);
        }
        if self.is_failed() {
            return Err(DevError::DeviceFailed { name: self.inner.info().name.clone() });
        }
        Ok(())
    }
}

#[async_trait(?Send)]
impl BlockDevice for Failable {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn kind(&self) -> &'static str {
        "failable"
    }
    fn metrics(&self) -> Option<Arc<Registry>> {
        None
    }
    fn children(&self) -> Vec<DevRef> {
        vec![self.inner.clone()]
    }
    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        self.check()?;
        self.inner.read(lba, buf, md).await
    }
    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        self.check()?;
        self.inner.write(lba, data, md, hints).await
    }
    async fn flush(&self) -> DevResult<()> {
        self.check()?;
        self.inner.flush().await
    }
    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        self.check()?;
        self.inner.trim(lba, num_blocks).await
    }
}
