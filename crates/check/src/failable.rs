//! `Failable`: a pass-through layer that can be made to fail like a pulled drive, for testing
//! the redundancy of engines. Once [`Failable::fail`] is called, or after a set number of
//! commands, every command answers `DeviceFailed`; nothing reaches the device below any more.
//!
//! The `inject` engine of a later issue models the thesis' full fault catalogue; this is the
//! one fault the RAID tests need, with a deterministic trigger.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use flashrig_blockdev::{DevError, DevRef, DevResult};

use crate::tap::{Cmd, Tap, Tapped};

/// A device that can be failed: [`FailSwitch`] tapped over the device below.
pub type Failable = Tapped<FailSwitch>;

/// A [`Failable`]'s state: whether it has failed, and after how many commands it will.
pub struct FailSwitch {
    failed: AtomicBool,
    /// Fail when this many commands have been issued (u64::MAX: never by count).
    fail_after_ops: AtomicU64,
    ops: AtomicU64,
}

impl Failable {
    pub fn new(inner: DevRef) -> Self {
        Tapped::over(
            inner,
            FailSwitch {
                failed: AtomicBool::new(false),
                fail_after_ops: AtomicU64::new(u64::MAX),
                ops: AtomicU64::new(0),
            },
        )
    }
}

impl FailSwitch {
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
}

#[async_trait(?Send)]
impl Tap for FailSwitch {
    fn kind(&self) -> &'static str {
        "failable"
    }

    /// Counts the command, and refuses it once the device has failed.
    async fn before(&self, below: &DevRef, _cmd: Cmd) -> DevResult<()> {
        let op = self.ops.fetch_add(1, Ordering::SeqCst);
        if op >= self.fail_after_ops.load(Ordering::SeqCst) {
            self.failed.store(true, Ordering::SeqCst);
        }
        if self.is_failed() {
            return Err(DevError::DeviceFailed { name: below.info().name.clone() });
        }
        Ok(())
    }
}
