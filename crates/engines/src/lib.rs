//! Engines: block devices built on block devices.
//!
//! Every engine implements [`flashrig_blockdev::BlockDevice`] over members that implement it
//! too, so engines stack. An engine does its work on the reactor that submitted the request
//! (SPDK's I/O-channel model): there is no engine-wide lock on the I/O path.

mod bufpool;
pub mod concat;
pub mod csal;
pub mod dmzoned;
mod fanout;
pub mod inject;
pub mod latency;
pub mod layout;
pub mod partition;
pub mod raid;
pub mod scala;
pub mod stripe;
pub mod twophase;
pub mod wbcache;
pub mod zoned;

pub use concat::Concat;
pub use csal::{Csal, CsalOptions};
pub use dmzoned::{Dmzoned, DmzonedOptions};
pub use inject::Inject;
pub use partition::Partition;
pub use raid::{Raid, RaidOptions};
pub use scala::{Scala, ScalaOptions};
pub use stripe::Stripe;
pub use twophase::{Twophase, TwophaseOptions};
pub use wbcache::{Wbcache, WbcacheOptions};
pub use zoned::{Zoned, ZonedOptions};

use flashrig_blockdev::{DevError, DevRef, DevResult};

/// The constraints an engine places on its members, as data (after SPDK's
/// `raid_bdev_module`), checked once when a stack is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConstraints {
    pub name: &'static str,
    pub min_members: usize,
    /// Members that may fail without losing data.
    pub failures_tolerated: usize,
}

/// Checks the members against an engine's constraints and returns their common block size
/// and the metadata bytes per block the engine can offer.
pub fn check_members(c: &EngineConstraints, members: &[DevRef]) -> DevResult<(u32, u32)> {
    if members.len() < c.min_members {
        return Err(DevError::Invalid(format!(
            "{} needs at least {} members, got {}",
            c.name,
            c.min_members,
            members.len()
        )));
    }
    let bs = members[0].info().block_size;
    if let Some(m) = members.iter().find(|m| m.info().block_size != bs) {
        return Err(DevError::Invalid(format!(
            "{}: member {} has block size {}, member {} has {}",
            c.name,
            m.info().name,
            m.info().block_size,
            members[0].info().name,
            bs
        )));
    }
    // Metadata passes through only when every member stores the same amount; otherwise the
    // engine offers none (members then store zeroed metadata).
    let md = members[0].info().md_bytes_per_block;
    let md = if members.iter().all(|m| m.info().md_bytes_per_block == md) { md } else { 0 };
    Ok((bs, md))
}
