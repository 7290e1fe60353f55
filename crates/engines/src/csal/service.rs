//! The internal work (§5): "CSAL uses a dedicated CPU core ... in polling mode for internal
//! events processing ... three pollers in its thread for I/O processing of client, compaction,
//! and GC tasks." Here one service task runs on the internal reactor (`internal_reactor`,
//! default the last one) while there is work, and each round polls, in this order:
//!
//! 1. **GC**, when fewer than `gc_free_zones` zones are free;
//! 2. **compaction**, when free chunks are below `compaction_free_fraction` of all chunks
//!    (or a writer waits for a chunk), in the same round as GC when both are due (while GC
//!    is due, compaction writes only into its streams' open zones);
//! 3. **checkpoint**, when released chunks or zones wait for one to become free and free
//!    space is short (a released container is reusable only after the next checkpoint):
//!    at once for zones, for chunks once a batch of them is released (a quarter of the free
//!    chunks compaction keeps) or when no free chunk is left. A compaction that is due runs
//!    beside the checkpoint (unless GC is due), so the compaction zone is written while the
//!    checkpoint flushes.
//!
//! When a round finds nothing, the task ends; a chunk opening, a writer waiting for space or a
//! chunk closing starts it again (`kick`). Client I/O is not routed through this reactor: a
//! request runs on the reactor that submitted it (SPDK's I/O channels, one per thread), and
//! the state it shares with the service is a mutex never held across an await, so the
//! dedicated reactor keeps the paper's split of work without a message per request.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use flashrig_blockdev::DevResult;
use flashrig_runtime::spawn_on;

use super::format::CState;
use super::Inner;

impl Inner {
    /// Starts the service task on the internal reactor, or wakes it if it runs.
    pub(crate) fn kick(self: &Arc<Self>) {
        if self.stopped() || !flashrig_runtime::in_runtime() {
            return;
        }
        if self.service_running.swap(true, SeqCst) {
            self.work_event.notify(usize::MAX);
            return;
        }
        let inner = self.clone();
        drop(spawn_on(self.internal_reactor, move || async move { inner.service().await }));
    }

    async fn service(self: Arc<Self>) {
        loop {
            if self.stopped() {
                break;
            }
            match self.step().await {
                Ok(true) => continue,
                Ok(false) => {}
                // A member failed under internal work (csal keeps no redundancy of its own): the
                // device stops, and requests waiting for space fail instead of waiting forever.
                Err(_) => {
                    self.stop();
                    break;
                }
            }
            self.service_running.store(false, SeqCst);
            // A kick between the last look and the store above would be lost: look again.
            if !self.stopped() && self.work_wanted() && !self.service_running.swap(true, SeqCst) {
                continue;
            }
            self.space_event.notify(usize::MAX);
            return;
        }
        self.service_running.store(false, SeqCst);
        self.space_event.notify(usize::MAX);
    }

    fn compaction_due(&self) -> bool {
        let st = self.st.lock();
        let free = st.count(&self.geo, false, CState::Free) as f64;
        free < self.opts.compaction_free_fraction * self.geo.chunks as f64 || free < 1.0
    }

    /// Released chunks and zones no read still uses (what a checkpoint would free).
    fn released_counts(&self) -> (u64, u64) {
        let st = self.st.lock();
        let mut n = (0, 0);
        for (i, c) in st.containers.iter().enumerate() {
            if c.state == CState::Released && c.readers == 0 {
                if self.geo.is_zone(i) {
                    n.1 += 1;
                } else {
                    n.0 += 1;
                }
            }
        }
        n
    }

    /// Released chunks a checkpoint waits for: a quarter of the chunks compaction keeps free
    /// (5% of all chunks at the paper's 20%), at least one.
    fn checkpoint_batch_chunks(&self) -> u64 {
        ((self.opts.compaction_free_fraction * self.geo.chunks as f64 / 4.0) as u64).max(1)
    }

    fn released(&self) -> bool {
        self.st.lock().containers.iter().any(|c| c.state == CState::Released && c.readers == 0)
    }

    /// Whether a round would find something to do (cheap check for the lost-kick race).
    fn work_wanted(&self) -> bool {
        (self.gc_due() && self.pick_victim(true).is_some())
            || (self.compaction_due() && (self.pick_victim(false).is_some() || self.released()))
    }

    /// One round of the pollers; true when one of them did something.
    pub(crate) async fn step(self: &Arc<Self>) -> DevResult<bool> {
        let gc_due = self.gc_due();
        let compaction_due = self.compaction_due();
        // Released containers become free at a checkpoint. A checkpoint writes every dirty
        // L2P page and the bitmaps and flushes both members, so chunks are released in
        // batches (`checkpoint_batch_chunks`), while there is still free space to write into;
        // a released zone is worth one at once (GC runs only when zones are scarce), and so
        // is any released chunk when no free chunk is left or nothing more can be compacted.
        let (rel_chunks, rel_zones) = self.released_counts();
        let free_chunks = self.st.lock().count(&self.geo, false, CState::Free);
        let checkpoint_now = (gc_due && rel_zones > 0)
            || (compaction_due
                && rel_chunks > 0
                && (rel_chunks >= self.checkpoint_batch_chunks()
                    || free_chunks == 0
                    || self.pick_victim(false).is_none()));
        if checkpoint_now {
            // A checkpoint flushes both members and writes the dirty L2P pages; with the cache
            // full that came after every compaction, and the compaction zone sat idle through
            // it (in the first full reproduce run, CSAL-ZNS's sequential writes went at the
            // pace of compaction-then-checkpoint rounds, docs/csal.md). So the compaction that
            // is due runs beside the checkpoint, as SPDK's FTL runs its compactors as pollers
            // of their own, apart from metadata persistence (`FTL_NV_CACHE_NUM_COMPACTORS`,
            // lib/ftl/ftl_nv_cache.h). It is safe because the checkpoint was made to run
            // beside writes: it copies the pages, bitmaps and released containers first, a move
            // after the copy lands in an open zone at or above the checkpoint SID (replayed by
            // recovery), and the chunks that compaction releases meanwhile wait for the next
            // checkpoint. The checkpoint is polled first, so it takes its locks and its copy
            // before the compaction moves anything. GC keeps its turn to itself.
            if compaction_due && !gc_due && self.pick_victim(false).is_some() {
                self.c.compactions_beside_checkpoint.inc();
                let (checkpointed, compacted) =
                    futures_util::future::join(self.checkpoint(false), self.compact_one()).await;
                checkpointed?;
                compacted?;
            } else {
                self.checkpoint(false).await?;
            }
            return Ok(true);
        }
        // GC and compaction both get a turn in a round where both are due, as two pollers on
        // one core do (§5): with GC alone until the free zones are back above its threshold,
        // compaction stopped for the whole refill (tens of victims at the valid ratios random
        // writes leave), the cache filled, and user writes stalled in bursts. Compaction
        // opens no zone while GC is due (`stream_zone`), so the free zones GC needs for its
        // own streams stay its.
        // When the streams outnumber the zoned member's open-zone limit, a stream that
        // writes finishes another's zone early (`stream_zone`), and GC and compaction taking
        // turns would do so at every turn, giving up zone tails faster than GC frees zones:
        // there, GC runs alone while it is due, so its streams keep their zones.
        if gc_due && self.gc_one().await? {
            if !self.streams_fit_open_limit() {
                return Ok(true);
            }
            if compaction_due {
                self.compact_one().await?;
            }
            return Ok(true);
        }
        Ok(compaction_due && self.compact_one().await?)
    }

    /// Runs rounds until none finds work.
    pub(crate) async fn settle(self: Arc<Self>) -> DevResult<()> {
        while self.step().await? {}
        Ok(())
    }
}
