//! Reading and writing blocks with their records. With VSS (a fast member with metadata
//! bytes, and always on the zoned member) a record travels in the block's metadata bytes, in
//! the same command. Without (a fast member with `md_bytes = 0`), the paper's fallback: "merge
//! the paddings as separate data blocks". Each chunk then has `record_blocks_per_chunk` record
//! blocks in the fast device's record region, `block_size / md_bytes` records per block, at
//! the chunk offset's position. A write writes the data, then every record block it touched,
//! whole, from an in-memory copy; one lock per record block orders those writes, so a later
//! record block write always carries every earlier update. The record holds the data's CRC32C,
//! so a crash that leaves a record without its data (or the reverse) leaves a block recovery
//! rejects, as a torn VSS write would be; a FUA write is FUA for both.

use flashrig_blockdev::{DevResult, WriteHints};

use super::Inner;

impl Inner {
    fn fast_fallback(&self, pba: u32) -> bool {
        self.geo.record_blocks_per_chunk > 0 && !self.geo.locate(pba).0
    }

    /// Record block (fast-device LBA) and byte offset of the record of chunk PBA `pba`.
    fn record_place(&self, pba: u32) -> (u64, usize) {
        let c = self.geo.container_of(pba);
        let off = pba as u64 - self.geo.first_pba(c);
        let per = self.bs() as u64 / self.mdb() as u64;
        let blk = self.geo.record_start + c as u64 * self.geo.record_blocks_per_chunk + off / per;
        (blk, (off % per) as usize * self.mdb())
    }

    /// Reads `data.len() / bs` blocks from `pba` (one container) with their records.
    pub(crate) async fn read_with_md(
        &self,
        pba: u32,
        data: &mut [u8],
        md: &mut [u8],
    ) -> DevResult<()> {
        let (dev, at) = self.dev_of(pba);
        if !self.fast_fallback(pba) {
            return dev.read(at, data, Some(md)).await;
        }
        dev.read(at, data, None).await?;
        let n = data.len() / self.bs();
        let mdb = self.mdb();
        let mut cur: Option<(u64, Vec<u8>)> = None;
        for i in 0..n {
            let (blk, byte) = self.record_place(pba + i as u32);
            if cur.as_ref().is_none_or(|(b, _)| *b != blk) {
                let mut b = vec![0u8; self.bs()];
                self.fast.read(blk, &mut b, None).await?;
                cur = Some((blk, b));
            }
            let b = &cur.as_ref().unwrap().1;
            md[i * mdb..(i + 1) * mdb].copy_from_slice(&b[byte..byte + mdb]);
        }
        Ok(())
    }

    /// Writes blocks at `pba` (one container) with their records.
    pub(crate) async fn write_with_md(
        &self,
        pba: u32,
        data: &[u8],
        md: &[u8],
        hints: WriteHints,
    ) -> DevResult<()> {
        let (dev, at) = self.dev_of(pba);
        if !self.fast_fallback(pba) {
            return dev.write(at, data, Some(md), hints).await;
        }
        dev.write(at, data, None, hints).await?;
        let n = data.len() / self.bs();
        let mdb = self.mdb();
        let mut i = 0;
        while i < n {
            let (blk, _) = self.record_place(pba + i as u32);
            let _g = self.record_locks.lock(blk).await;
            let snapshot = {
                let mut recs = self.records.lock();
                let b = recs.entry(blk).or_insert_with(|| vec![0u8; self.bs()]);
                while i < n {
                    let (bb, byte) = self.record_place(pba + i as u32);
                    if bb != blk {
                        break;
                    }
                    b[byte..byte + mdb].copy_from_slice(&md[i * mdb..(i + 1) * mdb]);
                    i += 1;
                }
                b.clone()
            };
            self.fast.write(blk, &snapshot, None, hints).await?;
        }
        Ok(())
    }

    /// Forgets the in-memory record blocks of chunk `c` (it starts a new life: its record
    /// blocks are rewritten from zeros, and old records in them are told apart by SID).
    pub(crate) fn reset_records(&self, c: usize) {
        if self.geo.record_blocks_per_chunk == 0 {
            return;
        }
        let first = self.geo.record_start + c as u64 * self.geo.record_blocks_per_chunk;
        let mut recs = self.records.lock();
        for b in first..first + self.geo.record_blocks_per_chunk {
            recs.remove(&b);
        }
    }
}
