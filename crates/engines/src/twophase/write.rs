//! The replication phase: user writes and trim records go to the replica log.
//!
//! A write takes log blocks in the open log row (one sequence number for the whole request),
//! waiting first while conversion must run (the watermark) or the cleaner must free rows;
//! writes its m + 1 copies to the members of the replica set under the row's shared lock;
//! and maps its blocks once every copy is written (a copy whose member has failed is skipped
//! and the row marked missing there, as long as the array is within its tolerance). A large
//! request goes in rounds of at most one log row.
//!
//! A trim that finds data in its range writes one *trim record* (a block of the log holding
//! the range and its sequence number) and maps the range's blocks to it, so recovery knows the
//! older versions it finds are gone. A trim of blocks that hold nothing writes nothing.

use std::sync::Arc;

use futures_util::future::join_all;

use flashrig_blockdev::{DevError, DevResult, WriteHints};

use super::format::{data_hash, BlockMd, Tag, TrimRecord};
use super::state::{Need, Piece, TRIM_KEY};
use super::Inner;

impl Inner {
    pub(super) async fn write_blocks(
        self: &Arc<Self>,
        lba: u64,
        blocks: u64,
        data: &[u8],
        hints: WriteHints,
    ) -> DevResult<()> {
        self.check_alive()?;
        let bs = self.block_bytes();
        let seq = self.tables.lock().alloc_seq();
        let mut done = 0;
        while done < blocks {
            let pieces = self.reserve(blocks - done, done, seq, |i| lba + i).await?;
            let results = join_all(pieces.iter().map(|p| {
                let bytes = &data[p.first as usize * bs..][..p.count as usize * bs];
                self.write_piece(p, bytes, Tag::LogData, |b| lba + p.first + b, seq, hints)
            }))
            .await;
            let mut first_err = None;
            let mut updates = 0;
            {
                let mut t = self.tables.lock();
                for (p, r) in pieces.iter().zip(results) {
                    match r {
                        Ok(()) => updates += t.commit_user(p, lba, seq),
                        Err(e) => {
                            t.abort(p);
                            first_err.get_or_insert(e);
                        }
                    }
                    done += p.count as u64;
                }
            }
            self.c.map_updates.add(updates);
            self.costs.charge_map_updates(updates).await;
            if let Some(e) = first_err {
                return Err(e);
            }
        }
        Ok(())
    }

    pub(super) async fn trim_blocks(self: &Arc<Self>, lba: u64, blocks: u64) -> DevResult<()> {
        self.check_alive()?;
        let seq = {
            let mut t = self.tables.lock();
            if !t.trim_needed(lba, blocks) {
                return Ok(());
            }
            t.alloc_seq()
        };
        let mut record = vec![0u8; self.block_bytes()];
        TrimRecord { seq, start: lba, len: blocks }.encode(&mut record);
        let pieces = self.reserve(1, 0, seq, |_| TRIM_KEY | seq).await?;
        let p = pieces[0];
        let r = self.write_piece(&p, &record, Tag::LogTrim, |_| lba, seq, WriteHints::NONE).await;
        let updates = {
            let mut t = self.tables.lock();
            match r {
                Ok(()) => t.commit_trim(&p, seq, lba, blocks),
                Err(e) => {
                    t.abort(&p);
                    return Err(e);
                }
            }
        };
        self.c.trim_records.inc();
        self.c.map_updates.add(updates);
        self.costs.charge_map_updates(updates).await;
        Ok(())
    }

    /// Takes up to `want` log blocks for request blocks `first..`: waits for the background
    /// conversion while the log is past its watermark, runs GC or prepares freed rows as long
    /// as that is what stands in the way.
    async fn reserve(
        self: &Arc<Self>,
        want: u64,
        first: u64,
        seq: u64,
        key: impl Fn(u64) -> u64,
    ) -> DevResult<Vec<Piece>> {
        let mut delayed = false;
        // Set when conversion cannot lower the log any further for now (what is left is in
        // rows still being written): the write then goes ahead.
        let mut force = false;
        loop {
            let need = {
                let mut t = self.tables.lock();
                if !force && !t.admit() {
                    None
                } else {
                    match t.reserve(want, first, seq, &key) {
                        Ok(p) => {
                            drop(t);
                            // Writes that go in past the watermark (forced) still start the
                            // conversion that has to follow them.
                            self.start_converters();
                            return Ok(p);
                        }
                        Err(n) => Some(n),
                    }
                }
            };
            if matches!(need, None | Some(Need::Clean)) && !delayed {
                delayed = true;
                self.c.delayed_writes.inc();
            }
            match need {
                None => force = !self.wait_for_conversion().await?,
                Some(Need::Clean) => self.make_room(1).await?,
                Some(Need::Prepare) => {
                    // Nothing free or freed: every row is in use, so room comes from cleaning
                    // (which reports a full array when it finds nothing to collect).
                    if !self.prepare_rows().await? {
                        self.make_room(1).await?;
                    }
                }
            }
        }
    }

    /// Writes one piece's copies (data `data`, metadata tag `tag`, metadata key `key(b)` for
    /// block `b` of the piece) to the members of its replica set.
    pub(super) async fn write_piece(
        &self,
        p: &Piece,
        data: &[u8],
        tag: Tag,
        key: impl Fn(u64) -> u64,
        seq: u64,
        hints: WriteHints,
    ) -> DevResult<()> {
        let _row = self.rowlocks.shared(p.row).await;
        let (bs, mdb) = (self.block_bytes(), self.md_bytes);
        let copies = self.geo.copies();
        let lba = self.geo.member_lba(p.row) + p.off as u64;
        // The checksum covers each replica's own index, so each copy gets its own metadata;
        // the data's hash is computed once for all of them.
        let sums: Vec<Option<u64>> =
            data.chunks_exact(bs).map(|d| self.integrity().then(|| data_hash(d))).collect();
        let mds: Vec<Vec<u8>> = (0..copies)
            .map(|j| {
                let mut md = vec![0u8; p.count as usize * mdb];
                for (b, m) in md.chunks_exact_mut(mdb).enumerate() {
                    let bm = BlockMd::item(tag, key(b as u64), j, seq, p.gen);
                    bm.encode_summed(m, lba + b as u64, sums[b]);
                }
                md
            })
            .collect();
        let missing = self.tables.lock().row(p.row).missing;
        let results = join_all(mds.iter().enumerate().map(|(j, md)| {
            let i = self.geo.set_member(p.row, p.set, j);
            async move {
                if !self.available(i, missing) {
                    return Ok(false);
                }
                self.write_member(i, lba, data, md, hints).await
            }
        }))
        .await;
        let mut written = 0;
        let mut err = None;
        {
            let mut t = self.tables.lock();
            for (j, r) in results.into_iter().enumerate() {
                match r {
                    Ok(true) => written += 1,
                    Ok(false) => t.mark_missing(p.row, self.geo.set_member(p.row, p.set, j)),
                    Err(e) => {
                        err.get_or_insert(e);
                    }
                }
            }
        }
        if let Some(e) = err {
            return Err(e);
        }
        self.c.replica_writes.add(written);
        self.c.replica_write_bytes.add(written * data.len() as u64);
        if written == 0 {
            return Err(DevError::DeviceFailed {
                name: format!(
                    "{}: no member of replica set {} of row {} could be written",
                    self.info.name, p.set, p.row
                ),
            });
        }
        self.check_alive()
    }
}
