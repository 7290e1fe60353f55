//! `Jitter`: a pass-through layer that delays every command by a seeded pseudo-random time on
//! the runtime's clock, so that concurrent commands complete out of order.
//!
//! A RAM disk completes commands in the order they were issued; engines must also be right
//! when their members do not. Under the simulated runtime the delays are deterministic for a
//! seed, so an interleaving that exposes a bug can be replayed.

use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{
    BlockDevice, DevRef, DevResult, DeviceInfo, VendorCommand, VendorReply, WriteHints,
    ZoneCommand, ZoneReply,
};
use flashrig_metrics::Registry;
use parking_lot::Mutex;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

pub struct Jitter {
    inner: DevRef,
    max_delay_ns: u64,
    rng: Mutex<Xoshiro256PlusPlus>,
}

impl Jitter {
    /// Wraps `inner`, delaying each command by 0 to `max_delay_ns` before passing it on.
    pub fn new(inner: DevRef, max_delay_ns: u64, seed: u64) -> Self {
        Jitter { inner, max_delay_ns, rng: Mutex::new(Xoshiro256PlusPlus::seed_from_u64(seed)) }
    }

    async fn delay(&self) {
        let d = self.rng.lock().next_u64() % (self.max_delay_ns + 1);
        if d > 0 {
            flashrig_runtime::sleep_ns(d).await;
        }
    }
}

#[async_trait(?Send)]
impl BlockDevice for Jitter {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }

    fn kind(&self) -> &'static str {
        "jitter"
    }

    fn metrics(&self) -> Option<Arc<Registry>> {
        None
    }

    fn children(&self) -> Vec<DevRef> {
        vec![self.inner.clone()]
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        self.delay().await;
        self.inner.read(lba, buf, md).await
    }

    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        self.delay().await;
        self.inner.write(lba, data, md, hints).await
    }

    async fn flush(&self) -> DevResult<()> {
        self.delay().await;
        self.inner.flush().await
    }

    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        self.delay().await;
        self.inner.trim(lba, num_blocks).await
    }

    async fn zone(&self, cmd: ZoneCommand) -> DevResult<ZoneReply> {
        self.delay().await;
        self.inner.zone(cmd).await
    }

    async fn vendor(&self, cmd: VendorCommand<'_>) -> DevResult<VendorReply> {
        self.delay().await;
        self.inner.vendor(cmd).await
    }
}
