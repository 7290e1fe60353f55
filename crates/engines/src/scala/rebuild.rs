//! Rebuild of a failed member onto a replacement, while I/O goes on.
//!
//! 1. Under the space manager's work lock: every reactor returns its heroes (closing its open
//!    group) and every replicated stripe is converted, so every stripe that existed before the
//!    replacement is in the striping layout; then the replacement takes the failed member's
//!    place. New hero groups (built from new grants) are written to it whole.
//! 2. Stripe by stripe, in order (each under the work lock, so GC cannot move it meanwhile,
//!    and the stripe's lock): the member's chunk of every converted stripe is recomputed, a
//!    data chunk by reconstruction from the other chunks, a parity chunk by encoding the data,
//!    metadata included. Every block the AMT maps into the stripe is checked first and
//!    repaired if it can be (integrity.rs), so no bad source is rebuilt into the
//!    replacement. A cursor says how far it got: reads of the member's chunks beyond it
//!    reconstruct instead.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use flashrig_blockdev::{DevError, DevRef, DevResult, WriteHints};
use flashrig_runtime::spawn_on;
use futures_util::future::join_all;

use super::integrity::Pass;
use super::tables::state;
use super::Inner;

impl Inner {
    /// Whether member `i`'s copy of stripe `s` can be read (not failed, and rebuilt if it is
    /// being rebuilt).
    pub(crate) fn readable(&self, i: usize, s: u64) -> bool {
        !self.is_failed(i)
            && (self.rebuilding.load(Ordering::Acquire) != i
                || s < self.rebuild_cursor.load(Ordering::Acquire))
    }

    pub(crate) async fn rebuild(
        self: Arc<Self>,
        slot: usize,
        replacement: DevRef,
    ) -> DevResult<()> {
        let g = self.geo.clone();
        if slot >= g.n {
            return Err(super::invalid(format!(
                "rebuild: member {slot} of {} does not exist",
                g.n
            )));
        }
        if !self.is_failed(slot) {
            return Err(super::invalid(format!("rebuild: member {slot} has not failed")));
        }
        let info = replacement.info();
        if info.block_size != g.block_size
            || info.num_blocks < g.member_blocks
            || (info.md_bytes_per_block as usize) != self.mdb
        {
            return Err(super::invalid(format!(
                "rebuild: replacement {} must have {}-byte blocks, at least {} blocks and {} \
                 metadata bytes per block",
                info.name, g.block_size, g.member_blocks, self.mdb
            )));
        }
        let inner = self.clone();
        let sm = self.sm_reactor;
        spawn_on(sm, move || async move { inner.rebuild_on_manager(slot, replacement).await }).await
    }

    async fn rebuild_on_manager(
        self: Arc<Self>,
        slot: usize,
        replacement: DevRef,
    ) -> DevResult<()> {
        let g = self.geo.clone();
        {
            let _g = self.sm_work.lock(0).await;
            let mut handles = Vec::new();
            for r in 0..self.reactors.len() {
                let inner = self.clone();
                handles.push(spawn_on(r, move || async move { inner.return_heroes() }));
            }
            for h in join_all(handles).await {
                let mut mgr = self.mgr.lock();
                mgr.window.extend(h.hh);
                for (mem, v) in h.vh {
                    mgr.vh_free[mem].push_back(v);
                }
            }
            self.drain_conversions().await?;
            // The replacement's superblock, and its copy of the current checkpoint is written
            // by the next checkpoint.
            let mut sb = vec![0u8; self.bs()];
            super::format::encode_superblock(&g, &mut sb);
            replacement.trim(0, replacement.info().num_blocks).await?;
            replacement.write(0, &sb, None, WriteHints::NONE).await?;
            self.rebuild_cursor.store(0, Ordering::Release);
            self.rebuilding.store(slot, Ordering::Release);
            self.members.write()[slot] = replacement;
            self.failed[slot].store(false, Ordering::Release);
        }
        for s in 0..g.hh {
            let _g = self.sm_work.lock(0).await;
            let _s = self.stripe_locks.lock(s).await;
            if self.t.state(s) == state::CONVERTED {
                // The member's shard of the stripe: a data slot or a parity row.
                if let Some(x) = (0..g.n).find(|&x| self.shard_member(s, x) == slot) {
                    // Its sources are checked (and repaired) row by row before they are used:
                    // a bad block would otherwise be rebuilt into the replacement.
                    self.verify_stripe(s, Pass::Rebuild(x), None).await?;
                }
                self.c.rebuilt_stripes.inc();
            }
            self.rebuild_cursor.store(s + 1, Ordering::Release);
        }
        self.rebuilding.store(usize::MAX, Ordering::Release);
        if self.is_failed(slot) {
            return Err(DevError::DeviceFailed { name: format!("replacement for member {slot}") });
        }
        let _g = self.sm_work.lock(0).await;
        // Full: the replacement holds no checkpoint that deltas could extend.
        self.write_full_checkpoint().await
    }
}
