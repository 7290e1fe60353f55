//! Rebuild: a replacement member takes a failed member's slot and is refilled stripe by
//! stripe from the others, under each stripe's lock. Stripes below the rebuild cursor are
//! served by the replacement; the rest still count as missing, so reads reconstruct them and
//! writes skip them (the rebuild computes them from the updated stripe later).

use std::sync::atomic::Ordering;

use flashrig_blockdev::{DevError, DevRef, DevResult, WriteHints};

use super::Raid;

impl Raid {
    /// Replaces member `slot` with `replacement` and rebuilds its chunks of every stripe.
    pub async fn rebuild(&self, slot: usize, replacement: DevRef) -> DevResult<()> {
        if slot >= self.geo.members() {
            return Err(DevError::Invalid(format!("raid: no member slot {slot}")));
        }
        let need = self.geo.stripes * self.geo.chunk_blocks;
        let ri = replacement.info();
        if ri.block_size != self.info.block_size
            || ri.num_blocks < need
            || (self.integrity() && ri.md_bytes_per_block as usize != self.mdb)
        {
            return Err(DevError::Invalid(format!(
                "raid: replacement {} ({} blocks of {} bytes, {} metadata bytes each) cannot hold \
                 {need} blocks of {} with {} metadata bytes",
                ri.name,
                ri.num_blocks,
                ri.block_size,
                ri.md_bytes_per_block,
                self.info.block_size,
                self.mdb
            )));
        }
        let st = &self.state[slot];
        st.rebuilt_below.store(0, Ordering::Release);
        st.rebuilding.store(true, Ordering::Release);
        self.members.write()[slot] = replacement.clone();
        st.failed.store(false, Ordering::Release);
        let chunk = self.geo.chunk_blocks;
        for s in 0..self.geo.stripes {
            let _g = self.locks.lock(s).await;
            let index = (0..self.geo.members())
                .find(|&i| self.geo.chunk_member(s, i) == slot)
                .expect("every member holds a chunk of every stripe");
            let mut shards = self.read_chunks(s, 0, chunk, &[index], Some(slot)).await?;
            let data = shards[index].take().expect("reconstructed");
            self.costs.charge_member_ios(1).await;
            let lba = self.geo.member_lba(s);
            let md = self.seal_for(&data, lba, index);
            replacement.write(lba, &data, md.as_deref(), WriteHints::NONE).await?;
            st.rebuilt_below.store(s + 1, Ordering::Release);
            self.c.rebuilt_stripes.inc();
        }
        replacement.flush().await?;
        st.rebuilding.store(false, Ordering::Release);
        Ok(())
    }
}
