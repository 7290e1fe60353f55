//! User writes and trims (§4.3 "Write"): every block is appended to the one open chunk with
//! its record (block SID = the chunk's SID, LBA, tenant) in the block's metadata bytes; once
//! the data is written, the L2P entry moves to the new place, the old place's validity bit is
//! cleared and the new one's set. A trim appends one trim record per tenant partition it
//! touches (recovery needs it to know that older copies are dead) and unmaps the entries.

use std::sync::Arc;

use flashrig_blockdev::{DevResult, WriteHints};

use super::format::{CState, Kind, P2lEntry, Record, UNMAPPED};
use super::Inner;

impl Inner {
    pub(crate) async fn flush_members(&self) -> DevResult<()> {
        self.fast.flush().await?;
        self.zoned.flush().await
    }

    /// Hands out up to `want` consecutive places in the open chunk, opening a new chunk when
    /// the open one is full: (chunk, first offset, count, chunk SID).
    async fn allocate(self: &Arc<Self>, want: u64) -> DevResult<(usize, u64, u64, u64)> {
        loop {
            {
                let mut st = self.st.lock();
                if let Some(c) = st.open_chunk {
                    let cap = self.geo.chunk_blocks;
                    let ch = &mut st.containers[c];
                    if ch.wp < cap {
                        let n = want.min(cap - ch.wp);
                        let off = ch.wp;
                        ch.wp += n;
                        ch.inflight += 1;
                        let sid = ch.sid;
                        return Ok((c, off, n, sid));
                    }
                }
            }
            self.open_new_chunk().await?;
        }
    }

    /// Closes the full open chunk and opens a free one, waiting for compaction to free one
    /// when there is none. The wait happens outside the meta lock, which compaction needs to
    /// open zones.
    async fn open_new_chunk(self: &Arc<Self>) -> DevResult<()> {
        loop {
            if self.stopped() {
                return Err(super::invalid("the device is closed".into()));
            }
            let l = self.space_event.listen();
            if self.try_open_chunk().await? {
                return Ok(());
            }
            self.c.space_waits.inc();
            self.kick();
            l.await;
        }
    }

    /// Opens a new chunk if the open one is full and a free one exists; false: none is free.
    async fn try_open_chunk(self: &Arc<Self>) -> DevResult<bool> {
        let _g = self.meta.lock(0).await;
        let full = {
            let st = self.st.lock();
            match st.open_chunk {
                Some(c) if st.containers[c].wp < self.geo.chunk_blocks => return Ok(true),
                other => other,
            }
        };
        if let Some(c) = full {
            self.close_container(c).await?;
            self.st.lock().open_chunk = None;
            self.kick();
        }
        let free = {
            let st = self.st.lock();
            (0..self.geo.chunks as usize).find(|&i| st.containers[i].state == CState::Free)
        };
        let Some(c) = free else { return Ok(false) };
        {
            let mut st = self.st.lock();
            let sid = st.next_sid;
            st.next_sid += 1;
            let ch = &mut st.containers[c];
            ch.state = CState::Open;
            ch.sid = sid;
            ch.top_sid = sid;
            ch.wp = 0;
            ch.p2l = vec![P2lEntry::default(); self.geo.chunk_blocks as usize];
        }
        self.reset_records(c);
        // The chunk's SID is in a durable state slot before any block of it is written, so
        // recovery knows which records in it belong to this life: a FUA write into the chunk
        // is durable at once, with no user flush to carry the slot along.
        self.persist_state(false).await?;
        self.fast.flush().await?;
        self.st.lock().open_chunk = Some(c);
        self.c.chunks_opened.inc();
        self.kick();
        Ok(true)
    }

    /// Waits until no write handed a place in container `c` is in flight.
    pub(crate) async fn drain_container(&self, c: usize) {
        loop {
            let l = self.space_event.listen();
            if self.st.lock().containers[c].inflight == 0 {
                return;
            }
            l.await;
        }
    }

    pub(crate) fn write_done(&self, c: usize) {
        let mut st = self.st.lock();
        st.containers[c].inflight -= 1;
        if st.containers[c].inflight == 0 {
            drop(st);
            self.space_event.notify(usize::MAX);
        }
    }

    pub(crate) async fn write(self: Arc<Self>, lba: u64, data: &[u8], fua: bool) -> DevResult<()> {
        let bs = self.bs();
        let mdb = self.mdb();
        let blocks = (data.len() / bs) as u64;
        self.c.user_writes.inc();
        self.c.user_write_blocks.add(blocks);
        let mut done = 0u64;
        while done < blocks {
            let (c, off, n, sid) = self.allocate(blocks - done).await?;
            let first_pba = self.geo.first_pba(c) + off;
            let mut md = vec![0u8; n as usize * mdb];
            let mut p2l = Vec::with_capacity(n as usize);
            for i in 0..n as usize {
                let l = lba + done + i as u64;
                let d = &data[(done as usize + i) * bs..(done as usize + i + 1) * bs];
                let r = Record {
                    sid,
                    container_sid: sid,
                    lba: l,
                    tenant: self.geo.tenant_of(l),
                    kind: Kind::Data,
                    count: 0,
                    data_crc: crc32c::crc32c(d),
                };
                r.encode(&mut md[i * mdb..(i + 1) * mdb]);
                p2l.push(P2lEntry { sid, lba: l as u32, trim: 0, origin: 0 });
            }
            {
                let mut st = self.st.lock();
                st.containers[c].p2l[off as usize..(off + n) as usize].copy_from_slice(&p2l);
            }
            let slice = &data[done as usize * bs..(done + n) as usize * bs];
            let hints = if fua { WriteHints::FUA } else { WriteHints::NONE };
            let r = self.write_with_md(first_pba as u32, slice, &md, hints).await;
            if let Err(e) = r {
                self.write_done(c);
                return Err(e);
            }
            for i in 0..n {
                let l = lba + done + i;
                let new = (first_pba + i) as u32;
                let g = &self.geo;
                let r = self
                    .with_entry(l, |st| {
                        let old = st.l2p.get(l).unwrap();
                        if old != UNMAPPED {
                            st.set_valid(g, old as u64, false);
                        }
                        st.l2p.set(l, new);
                        st.set_valid(g, new as u64, true);
                    })
                    .await;
                if let Err(e) = r {
                    self.write_done(c);
                    return Err(e);
                }
            }
            self.write_done(c);
            done += n;
        }
        Ok(())
    }

    pub(crate) async fn trim(self: Arc<Self>, lba: u64, num_blocks: u64) -> DevResult<()> {
        self.c.trims.inc();
        let mdb = self.mdb();
        let end = lba + num_blocks;
        let mut at = lba;
        while at < end {
            let tenant = self.geo.tenant_of(at);
            let piece_end = self.geo.partition_end(tenant).min(end);
            let count = piece_end - at;
            let (c, off, _, sid) = self.allocate(1).await?;
            let pba = self.geo.first_pba(c) + off;
            let mut md = vec![0u8; mdb];
            Record {
                sid,
                container_sid: sid,
                lba: at,
                tenant,
                kind: Kind::Trim,
                count: count as u32,
                data_crc: pba as u32,
            }
            .encode(&mut md);
            self.st.lock().containers[c].p2l[off as usize] =
                P2lEntry { sid, lba: at as u32, trim: count as u32, origin: pba as u32 };
            let zeros = vec![0u8; self.bs()];
            if let Err(e) = self.write_with_md(pba as u32, &zeros, &md, WriteHints::NONE).await {
                self.write_done(c);
                return Err(e);
            }
            let g = &self.geo;
            // The record stays valid (compaction carries it on) while an older copy of one
            // of its LBAs may still be on the media.
            self.st.lock().set_valid(g, pba, true);
            for l in at..piece_end {
                let r = self
                    .with_entry(l, |st| {
                        let old = st.l2p.get(l).unwrap();
                        if old != UNMAPPED {
                            st.set_valid(g, old as u64, false);
                            st.l2p.set(l, UNMAPPED);
                        }
                    })
                    .await;
                if let Err(e) = r {
                    self.write_done(c);
                    return Err(e);
                }
            }
            self.write_done(c);
            at = piece_end;
        }
        Ok(())
    }
}
