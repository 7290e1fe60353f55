//! The one request type every trace format is normalised into, so stats, reduction and the
//! simulator never need to know which reader produced a trace.

use serde::{Deserialize, Serialize};

/// One block I/O request, in absolute units (nanoseconds, bytes) whatever the source format used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Request {
    /// Arrival time in nanoseconds, on the source trace's own clock (not rebased), so that
    /// converting back to the source format is exact.
    pub time_ns: u64,
    /// `true` for a write, `false` for a read.
    pub write: bool,
    /// Start of the request in bytes from the start of the device.
    pub offset_bytes: u64,
    /// Length in bytes.
    pub size_bytes: u64,
    /// Device/volume number as the format names it (MSR DiskNumber, SPC ASU, DiskSim devno, ...).
    pub device: u32,
}

impl Request {
    /// One past the last byte, saturating so hostile inputs never overflow.
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes.saturating_add(self.size_bytes)
    }
}
