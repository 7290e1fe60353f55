//! GC of the zoned device (§4.3 "Garbage collection"): the same mover as compaction, run when
//! fewer than `gc_free_zones` zones are free. The victim is the closed zone (compaction's and
//! GC's alike, never one a stream is writing) with the lowest valid ratio; its valid blocks go
//! to the GC zone of their tenant (with GC isolation) or to the tenant's compaction zone
//! (without), and the zone is reset when it is next opened, after the checkpoint that frees it.

use std::sync::Arc;

use flashrig_blockdev::DevResult;

use super::format::CState;
use super::Inner;

impl Inner {
    /// Whether GC is due: fewer free zones than the threshold.
    pub(crate) fn gc_due(&self) -> bool {
        self.st.lock().count(&self.geo, true, CState::Free) < self.opts.gc_free_zones
    }

    /// One GC pass over the best victim zone. Returns whether it made progress.
    pub(crate) async fn gc_one(self: &Arc<Self>) -> DevResult<bool> {
        let Some(v) = self.pick_victim(true) else { return Ok(false) };
        self.c.gc_runs.inc();
        self.evacuate(v, true).await
    }
}
