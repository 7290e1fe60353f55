//! `Jitter`: a pass-through layer that delays every command by a seeded pseudo-random time on
//! the runtime's clock, so that concurrent commands complete out of order.
//!
//! A RAM disk completes commands in the order they were issued; engines must also be right
//! when their members do not. Under the simulated runtime the delays are deterministic for a
//! seed, so an interleaving that exposes a bug can be replayed.

use async_trait::async_trait;
use flashrig_blockdev::{DevRef, DevResult};
use parking_lot::Mutex;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::tap::{Cmd, Tap, Tapped};

/// A device whose commands are delayed: [`Delays`] tapped over the device below.
pub type Jitter = Tapped<Delays>;

/// A [`Jitter`]'s delays: up to `max_delay_ns`, drawn from a seeded generator.
pub struct Delays {
    max_delay_ns: u64,
    rng: Mutex<Xoshiro256PlusPlus>,
}

impl Jitter {
    /// Wraps `inner`, delaying each command by 0 to `max_delay_ns` before passing it on.
    pub fn new(inner: DevRef, max_delay_ns: u64, seed: u64) -> Self {
        Tapped::over(
            inner,
            Delays { max_delay_ns, rng: Mutex::new(Xoshiro256PlusPlus::seed_from_u64(seed)) },
        )
    }
}

#[async_trait(?Send)]
impl Tap for Delays {
    fn kind(&self) -> &'static str {
        "jitter"
    }

    async fn before(&self, _below: &DevRef, _cmd: Cmd) -> DevResult<()> {
        let d = self.rng.lock().next_u64() % (self.max_delay_ns + 1);
        if d > 0 {
            flashrig_runtime::sleep_ns(d).await;
        }
        Ok(())
    }
}
