//! Reference-model checking of block-device stacks.
//!
//! Every engine and device in flashrig is tested the same way: a seeded [`driver`] issues
//! random reads, writes, trims and flushes (several in flight) against the stack and checks
//! every read against a [`model::Model`] of what each block must hold; crash tests stop the
//! driver part-way, crash and recover the stack, and check that each block holds what the
//! model says may have survived. Blocks carry self-describing contents ([`pattern`]), so a
//! mismatch says what was found: an older version, another block's data, zeros, or garbage.
//!
//! Randomised tests take their seed from `FLASHRIG_SEED` when it is set, and every failure
//! message names the seed that reproduces it.

pub mod driver;
pub mod failable;
pub mod jitter;
pub mod model;
pub mod pattern;
pub mod power;
pub mod rot;
pub mod tap;

pub use driver::{
    run_check, run_ops, verify_after_crash, verify_all, CheckConfig, CheckError, CheckReport,
    OpWeights,
};
pub use failable::{FailSwitch, Failable};
pub use jitter::{Delays, Jitter};
pub use model::{Expect, FlushToken, Model};
pub use power::{Breaker, Count, Fuse, Store, Trigger, Unflushed, Volatile};
pub use rot::{Faults, Rot, RotCounts, WriteFault};
pub use tap::{Cmd, Tap, Tapped};

/// The seeds a randomised test runs: `FLASHRIG_SEED` alone when it is set (to reproduce a
/// failure), otherwise `cases` seeds starting at `first`, or `FLASHRIG_CASES` seeds when that
/// is set (to run a longer campaign).
pub fn seeds(first: u64, cases: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("FLASHRIG_SEED").ok().and_then(|s| s.trim().parse().ok()) {
        return vec![seed];
    }
    let n =
        std::env::var("FLASHRIG_CASES").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(cases);
    (first..first + n).collect()
}
