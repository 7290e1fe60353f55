//! The zones compaction and GC write into: one open zone per stream (compaction or GC, per
//! tenant or shared, as the isolation switches say), each written strictly in order by the
//! one service task.
//!
//! Open-zone policy: csal keeps at most `open_zone_limit` zones open (the smaller of the zoned
//! member's open and active limits). Opening one more closes the stream least recently
//! written: its zone is finished (its unwritten tail is given up until GC resets it), and its
//! P2L table written. So csal never leaves a zone merely closed: every zone it is not writing
//! is full, and a zone's only active time is while it is a stream's zone. Compaction may not
//! take the last `gc_free_zones` / 2 (at least one) free zones, nor any while GC is due:
//! those are GC's, which needs somewhere to move blocks to in order to free any.

use std::sync::Arc;

use flashrig_blockdev::{DevResult, WriteHints, ZoneCommand};

use super::format::{CState, P2lEntry, Record};
use super::{Inner, Stream};

impl Inner {
    /// Free zones compaction leaves to GC.
    pub(crate) fn gc_reserve_zones(&self) -> u64 {
        (self.opts.gc_free_zones / 2).max(1)
    }

    /// Whether every stream can keep its zone open at once (no open-zone limit, or one at
    /// least the number of streams).
    pub(crate) fn streams_fit_open_limit(&self) -> bool {
        self.open_zone_limit == 0 || self.opts.write_streams() as usize <= self.open_zone_limit
    }

    /// The stream a block of `tenant` moved by compaction (`gc = false`) or GC goes to.
    pub(crate) fn stream_for(&self, gc: bool, tenant: u16) -> Stream {
        Stream {
            gc: gc && self.opts.gc_isolation,
            tenant: if self.opts.user_isolation { tenant } else { 0 },
        }
    }

    /// Appends `items` (record, data) to stream `s`'s zone, opening zones as they fill.
    /// Returns each item's PBA, or `None` when no zone could be opened (compaction then waits
    /// for GC). Every record's container SID is set to its zone's SID here.
    pub(crate) async fn append(
        self: &Arc<Self>,
        s: Stream,
        for_gc: bool,
        items: &[(Record, Vec<u8>)],
    ) -> DevResult<Option<Vec<u32>>> {
        let bs = self.bs();
        let mdb = self.mdb();
        let mut pbas = Vec::with_capacity(items.len());
        let mut done = 0usize;
        while done < items.len() {
            let z = match self.stream_zone(s, for_gc).await? {
                Some(z) => z,
                None => return Ok(None),
            };
            let reserved = {
                let mut st = self.st.lock();
                // Another stream may have finished this zone to make room since
                // `stream_zone` returned it: look again.
                if st.streams.get(&s).map(|&(zz, _)| zz) != Some(z)
                    || st.containers[z].wp >= self.geo.zone_capacity_blocks
                {
                    None
                } else {
                    st.stream_clock += 1;
                    let clock = st.stream_clock;
                    st.streams.insert(s, (z, clock));
                    let c = &mut st.containers[z];
                    let room = self.geo.zone_capacity_blocks - c.wp;
                    let n = ((items.len() - done) as u64).min(room);
                    let off = c.wp;
                    // The write ends on the member's write unit: filler blocks (no record,
                    // no P2L entry) complete the last unit, so a block SSD with a coarse
                    // mapping unit never read-modify-writes the tail of a batch (SPDK's FTL
                    // pads a partly filled write unit the same way).
                    let (_, at) = self.dev_of((self.geo.first_pba(z) + off) as u32);
                    let unit = self.write_unit_blocks;
                    let padded = ((at + n).next_multiple_of(unit) - at).min(room);
                    c.wp += padded;
                    c.inflight += 1;
                    for i in 0..n as usize {
                        let r = &items[done + i].0;
                        let (trim, origin) = match r.kind {
                            super::format::Kind::Trim => (r.count, r.origin()),
                            super::format::Kind::Data => (0, 0),
                        };
                        c.p2l[off as usize + i] =
                            P2lEntry { sid: r.sid, lba: r.lba as u32, trim, origin };
                        c.top_sid = c.top_sid.max(r.sid);
                    }
                    Some((off, n, padded, c.sid))
                }
            };
            let Some((off, n, padded, zsid)) = reserved else { continue };
            self.c.pad_blocks_written.add(padded - n);
            let mut data = vec![0u8; padded as usize * bs];
            let mut md = vec![0u8; padded as usize * mdb];
            for i in 0..n as usize {
                let (r, d) = &items[done + i];
                data[i * bs..(i + 1) * bs].copy_from_slice(d);
                Record { container_sid: zsid, ..*r }.encode(&mut md[i * mdb..(i + 1) * mdb]);
            }
            let first = self.geo.first_pba(z) + off;
            let (dev, at) = self.dev_of(first as u32);
            let r = dev.write(at, &data, Some(&md), WriteHints::NONE).await;
            self.write_done(z);
            r?;
            pbas.extend((0..n).map(|i| (first + i) as u32));
            done += n as usize;
        }
        Ok(Some(pbas))
    }

    /// The open zone of stream `s` with room left, opening one (and closing others) as needed.
    async fn stream_zone(self: &Arc<Self>, s: Stream, for_gc: bool) -> DevResult<Option<usize>> {
        {
            let st = self.st.lock();
            if let Some(&(z, _)) = st.streams.get(&s) {
                if st.containers[z].wp < self.geo.zone_capacity_blocks {
                    return Ok(Some(z));
                }
            }
        }
        let _g = self.meta.lock(0).await;
        // Another batch of this stream, in flight beside this one, may have opened the
        // stream's next zone while this one waited for the lock.
        {
            let st = self.st.lock();
            if let Some(&(z, _)) = st.streams.get(&s) {
                if st.containers[z].wp < self.geo.zone_capacity_blocks {
                    return Ok(Some(z));
                }
            }
        }
        let full = self.st.lock().streams.get(&s).map(|&(z, _)| z);
        if let Some(z) = full {
            self.close_container(z).await?;
            self.st.lock().streams.remove(&s);
        }
        // Respect the member's open limit: finish the least recently written other stream.
        while self.open_zone_limit > 0 && self.st.lock().streams.len() >= self.open_zone_limit {
            // The victim leaves `streams` before its zone is finished: an append of that
            // stream running concurrently (compaction writes its streams side by side) then
            // either reserved its blocks already, and the finish waits for the write, or sees
            // its stream gone and opens a zone of its own.
            let z = {
                let mut st = self.st.lock();
                let (&v, &(z, _)) = st.streams.iter().min_by_key(|(_, (_, t))| *t).unwrap();
                st.streams.remove(&v);
                z
            };
            self.finish_zone(z).await?;
        }
        let z = {
            let st = self.st.lock();
            let free: Vec<usize> = (self.geo.chunks as usize..self.geo.containers())
                .filter(|&i| st.containers[i].state == super::format::CState::Free)
                .collect();
            // GC may take every free zone. Compaction leaves GC its reserve, and opens no
            // zone at all while GC is due: GC's streams (one per tenant with isolation) may
            // each still need one, and a GC that cannot open one stops half-way through its
            // victim, freeing nothing, while compaction sits at its floor (a livelock).
            let gc_due = (free.len() as u64) < self.opts.gc_free_zones;
            let floor = if for_gc { 0 } else { self.gc_reserve_zones() };
            if free.len() as u64 <= floor || (!for_gc && gc_due) {
                return Ok(None);
            }
            free[0]
        };
        self.zoned.zone(ZoneCommand::Reset { zone: self.geo.zone_no(z) }).await?;
        self.c.zone_resets.inc();
        {
            let mut st = self.st.lock();
            let sid = st.next_sid;
            st.next_sid += 1;
            let c = &mut st.containers[z];
            c.state = CState::Open;
            c.sid = sid;
            c.top_sid = sid;
            c.wp = 0;
            c.p2l = vec![P2lEntry::default(); self.geo.zone_capacity_blocks as usize];
            st.stream_clock += 1;
            let clock = st.stream_clock;
            st.streams.insert(s, (z, clock));
        }
        self.persist_state(false).await?;
        Ok(Some(z))
    }

    /// Closes an open zone before it is full: finishes it on the member, then closes it as a
    /// container. The caller holds the meta lock.
    pub(crate) async fn finish_zone(&self, z: usize) -> DevResult<()> {
        self.drain_container(z).await;
        if self.st.lock().containers[z].wp < self.geo.zone_capacity_blocks {
            self.zoned.zone(ZoneCommand::Finish { zone: self.geo.zone_no(z) }).await?;
            self.c.zone_finishes.inc();
        }
        self.close_container(z).await
    }
}
