//! The `csal` test rig both csal test files build on: the members' geometry (a 4 MiB fast
//! member, and 48 zones of 64 blocks behind a `Zoned` layer over a RAM member) and the zoned
//! layer's options. Each test file sets its own csal options and fault-injecting members.

use flashrig_engines::ZonedOptions;

pub const BS: u32 = 4096;
/// Metadata bytes per block on both members (the paper's 64-byte VSS padding).
pub const MD: u32 = 64;
pub const FAST_BLOCKS: u64 = 1024;
const ZONE_BLOCKS: u64 = 64;
const ZONES: u64 = 48;
/// The zoned member's member: the zones and `Zoned`'s write-pointer table behind them.
pub const ZMEM_BLOCKS: u64 = ZONES * ZONE_BLOCKS + 4;

/// Zones of `ZONE_BLOCKS` with no gap at their end, 4 open and 6 active at most.
pub fn zoned_opts() -> ZonedOptions {
    ZonedOptions {
        zone_blocks: ZONE_BLOCKS,
        zone_capacity_blocks: ZONE_BLOCKS,
        max_open_zones: 4,
        max_active_zones: 6,
    }
}
