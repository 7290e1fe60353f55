//! Reads: the AMT gives each block's AFA address; runs of blocks that are contiguous in one
//! slot are read with one member I/O. When the slot's member has failed, a stripe still being
//! replicated reads the backup copy in a VH; a converted stripe reconstructs from the other
//! chunks of its HH (degraded read). A block remapped while it was being read is read again
//! only if the stripe it was read from was freed meanwhile (GC recycled it, so the place may
//! hold other data now); a block overwritten by a concurrent write returns the version it was
//! mapped to when the read began, which stays in place until its stripe is freed. (Retrying on
//! every remapping starves reads of hot blocks that a trace overwrites at QD32.)
//!
//! Every block read is checked against the version the AMT mapped (checksum, place and
//! generation, integrity.rs); one that fails is repaired from the stripe's redundancy, and
//! the read fails with `DevError::Corrupt` when none is left.

use std::sync::atomic::Ordering::SeqCst;

use flashrig_blockdev::{DevError, DevResult};

use futures_util::future::join_all;

use crate::latency::MemberLatency;

use super::integrity::{holds, Want};
use super::tables::{entry_afa, entry_is_data, state, NONE};
use super::Inner;

/// A run of user blocks stored contiguously in one slot.
#[derive(Clone, Copy, Debug)]
struct Run {
    stripe: u64,
    slot: usize,
    off: u64,
    len: u64,
    /// Offset in the request, in blocks.
    req_off: u64,
}

impl Inner {
    pub(crate) async fn read(&self, lba: u64, buf: &mut [u8]) -> DevResult<()> {
        let bs = self.bs();
        let mdb = self.mdb;
        let blocks = (buf.len() / bs) as u64;
        self.c.user_reads.inc();
        self.c.user_read_bytes.add(buf.len() as u64);
        self.opts.costs.charge_request().await;
        let mut todo: Vec<u64> = (0..blocks).collect();
        for _attempt in 0..16 {
            let snapshot: Vec<u64> =
                todo.iter().map(|&b| self.t.amt[(lba + b) as usize].load(SeqCst)).collect();
            // The incarnation of each block's stripe, read after the mapping: if the mapping
            // still holds below, the stripe had not been freed when its incarnation was read
            // (GC remaps a victim's blocks before freeing it).
            let incarnations: Vec<u32> = snapshot
                .iter()
                .map(|&e| {
                    if entry_is_data(e) {
                        self.t.incarnation(self.stripe_of(entry_afa(e)))
                    } else {
                        0
                    }
                })
                .collect();
            let confirmed: Vec<bool> = todo
                .iter()
                .zip(&snapshot)
                .map(|(&b, &e)| self.t.amt[(lba + b) as usize].load(SeqCst) == e)
                .collect();
            let mut runs: Vec<Run> = Vec::new();
            for (&b, &e) in todo.iter().zip(&snapshot) {
                if !entry_is_data(e) {
                    buf[b as usize * bs..][..bs].fill(0);
                    continue;
                }
                let (s, j, off) = self.geo.split(entry_afa(e));
                match runs.last_mut() {
                    Some(r)
                        if r.stripe == s
                            && r.slot == j
                            && r.off + r.len == off
                            && r.req_off + r.len == b =>
                    {
                        r.len += 1
                    }
                    _ => runs.push(Run { stripe: s, slot: j, off, len: 1, req_off: b }),
                }
            }
            self.opts.costs.charge_member_ios(runs.len() as u64).await;
            let mds = self.read_runs(&runs, buf).await?;
            let mut again: Vec<u64> = Vec::new();
            // Every block is checked against the version the AMT mapped (its checksum, its
            // place and its generation); one that fails is repaired from the stripe's
            // redundancy, or read again when its place may have been recycled meanwhile.
            let checked = if self.checks() { runs.len() } else { 0 };
            for (r, md) in runs.iter().zip(&mds).take(checked) {
                for x in 0..r.len {
                    let b = r.req_off + x;
                    let Ok(i) = todo.binary_search(&b) else { continue };
                    let e = snapshot[i];
                    let want = Want::of(lba + b, e);
                    let data = &buf[b as usize * bs..][..bs];
                    if holds(entry_afa(e), data, &md[x as usize * mdb..][..mdb], want) {
                        continue;
                    }
                    if !confirmed[i] {
                        // The mapping moved before the stripe's incarnation was read: the place
                        // may hold another stripe's data by now, which says nothing.
                        again.push(b);
                        continue;
                    }
                    let inc = Some(incarnations[i]);
                    match self.repair_block(r.stripe, r.slot, r.off + x, want, inc, false).await? {
                        Some((d, _)) => buf[b as usize * bs..][..bs].copy_from_slice(&d),
                        None => again.push(b),
                    }
                }
            }
            // Blocks whose mapping changed meanwhile were read from a place that may have been
            // recycled: read them again unless their stripe is the same incarnation.
            for (i, (&b, &e)) in todo.iter().zip(&snapshot).enumerate() {
                if self.t.amt[(lba + b) as usize].load(SeqCst) == e {
                    continue;
                }
                // A block that was unwritten or trimmed read as zeros from no place at all.
                let same_place = !entry_is_data(e)
                    || (confirmed[i]
                        && self.t.incarnation(self.stripe_of(entry_afa(e))) == incarnations[i]);
                if !same_place {
                    again.push(b);
                }
            }
            if again.is_empty() {
                return Ok(());
            }
            again.sort_unstable();
            again.dedup();
            self.c.read_retries.inc();
            todo = again;
        }
        Err(DevError::Invalid(format!(
            "scala {}: blocks at {lba} kept moving while being read",
            self.info.name
        )))
    }

    /// Reads the runs into their places in `buf`; returns each run's metadata.
    async fn read_runs(&self, runs: &[Run], buf: &mut [u8]) -> DevResult<Vec<Vec<u8>>> {
        let bs = self.bs();
        let mdb = self.mdb;
        // Split the buffer into the runs' pieces (runs are in request order).
        let mut pieces: Vec<(Run, &mut [u8])> = Vec::with_capacity(runs.len());
        let mut rest: &mut [u8] = buf;
        let mut at = 0u64;
        for r in runs {
            let skip = (r.req_off - at) as usize * bs;
            let tail = std::mem::take(&mut rest);
            let (_, tail) = tail.split_at_mut(skip);
            let (piece, tail) = tail.split_at_mut(r.len as usize * bs);
            rest = tail;
            at = r.req_off + r.len;
            pieces.push((*r, piece));
        }
        let futs = pieces.into_iter().map(|(r, piece)| async move {
            let mut md = vec![0u8; r.len as usize * mdb];
            self.read_slot(r.stripe, r.slot, r.off, piece, Some(&mut md)).await.map(|_| md)
        });
        join_all(futs).await.into_iter().collect()
    }

    /// Reads `buf.len()` blocks of slot `j` of stripe `s` from `off` (and their metadata into
    /// `md` when given), from the primary copy, a backup copy, or by reconstruction.
    pub(crate) async fn read_slot(
        &self,
        s: u64,
        j: usize,
        off: u64,
        buf: &mut [u8],
        mut md: Option<&mut [u8]>,
    ) -> DevResult<()> {
        let g = &self.geo;
        let primary = g.data_member(s, j);
        self.c.member_read_bytes.add(buf.len() as u64);
        // A slow primary (crates/engines/src/latency.rs) is read around, from a backup copy or
        // the parity, while every other member holds the stripe and no conversion is under
        // way (which the other paths would wait for).
        let routed = self.readable(primary, s)
            && self.latency.is_slow(primary)
            && (0..g.k + g.m).all(|i| i == primary || self.readable(i, s))
            && self.t.state(s) != state::CONVERTING
            && self.latency.avoid(primary);
        if routed {
            self.c.slow_reads_routed.inc();
            if self.read_around(s, j, off, buf, md.as_deref_mut()).await.is_ok() {
                return Ok(());
            }
        }
        if self.readable(primary, s) {
            let dev = self.member(primary);
            let start = MemberLatency::start();
            let r = dev.read(g.hh_lba(s) + off, buf, md.as_deref_mut()).await;
            self.latency.note(primary, start);
            match r {
                Ok(()) => return Ok(()),
                Err(e) => self.member_error(primary, &dev, e)?,
            }
        }
        self.c.degraded_reads.inc();
        self.read_around(s, j, off, buf, md).await
    }

    /// Reads what [`Inner::read_slot`] reads without its primary copy: a backup copy of a
    /// replicated stripe, or a reconstruction from the parity of a converted one.
    async fn read_around(
        &self,
        s: u64,
        j: usize,
        off: u64,
        buf: &mut [u8],
        mut md: Option<&mut [u8]>,
    ) -> DevResult<()> {
        let g = &self.geo;
        loop {
            // Neither a backup copy nor the parity is reliable mid-conversion: wait for it.
            // (Conversion marks the stripe only once its own reads are done, so a host
            // conversion's degraded reads never wait for themselves.)
            while self.t.state(s) == state::CONVERTING {
                if self.failed_count() > g.m {
                    // The conversion failed with the array: it will never finish.
                    return Err(DevError::ReadMedia { lba: g.hh_lba(s) + off });
                }
                flashrig_runtime::sleep_ns(1_000).await;
            }
            // A replicated stripe: a backup copy.
            let mut from_backup = None;
            for i in 0..g.m {
                let v = self.t.vh(s, i);
                let p = g.parity_member(s, i);
                if v == NONE || !self.readable(p, s) {
                    continue;
                }
                let dev = self.member(p);
                let start = MemberLatency::start();
                let r = dev.read(g.vh_lba(v, j) + off, buf, md.as_deref_mut()).await;
                self.latency.note(p, start);
                match r {
                    Ok(()) => {
                        from_backup = Some((i, v));
                        break;
                    }
                    Err(e) => self.member_error(p, &dev, e)?,
                }
            }
            let Some((i, v)) = from_backup else {
                return self.reconstruct(s, j, off, buf, md).await;
            };
            // A conversion that began while the copy was read may have invalidated it under
            // the read: then read again, from the parity.
            if self.t.vh(s, i) == v && self.t.state(s) != state::CONVERTING {
                return Ok(());
            }
        }
    }

    /// Rebuilds blocks of data slot `j` of converted stripe `s` from the stripe's other
    /// chunks (data and metadata).
    pub(crate) async fn reconstruct(
        &self,
        s: u64,
        j: usize,
        off: u64,
        buf: &mut [u8],
        md: Option<&mut [u8]>,
    ) -> DevResult<()> {
        let g = &self.geo;
        let (k, m) = (g.k, g.m);
        let blocks = buf.len() / self.bs();
        let mdb = self.mdb;
        // Shards 0..k are the data slots, k..k+m the parity rows.
        let member_of =
            |x: usize| if x < k { g.data_member(s, x) } else { g.parity_member(s, x - k) };
        let mut data: Vec<Option<Vec<u8>>> = vec![None; k + m];
        let mut mds: Vec<Option<Vec<u8>>> = vec![None; k + m];
        let mut have = 0;
        for x in 0..k + m {
            if x == j || have == k {
                continue;
            }
            let mem = member_of(x);
            if !self.readable(mem, s) {
                continue;
            }
            let mut d = vec![0u8; buf.len()];
            let mut mdv = vec![0u8; blocks * mdb];
            let dev = self.member(mem);
            match dev.read(g.hh_lba(s) + off, &mut d, Some(&mut mdv)).await {
                Ok(()) => {
                    data[x] = Some(d);
                    mds[x] = Some(mdv);
                    have += 1;
                }
                Err(e) => self.member_error(mem, &dev, e)?,
            }
        }
        if have < k {
            return Err(DevError::ReadMedia { lba: g.hh_lba(s) + off });
        }
        let err = |e: flashrig_erasure::Error| DevError::Invalid(format!("scala: decode: {e}"));
        // The codec wants exactly k present shards: drop the extra ones (none are read).
        self.codec.reconstruct(&mut data).map_err(err)?;
        buf.copy_from_slice(data[j].as_ref().expect("reconstructed"));
        if let Some(md) = md {
            self.codec.reconstruct(&mut mds).map_err(err)?;
            md.copy_from_slice(mds[j].as_ref().expect("reconstructed"));
        }
        self.c.reconstructed_blocks.add(blocks as u64);
        Ok(())
    }
}
