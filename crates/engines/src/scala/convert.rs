//! The conversion phase (§5.3): a replicated stripe becomes a k + m stripe in its own HH.
//!
//! Because the placement policy put the stripe's backup copies in a VH on each parity member,
//! offloaded conversion is one vendor command per parity member (Src: the VH's k chunks, Dst:
//! the HH's chunk on that member, ChunkSize, Num = k, Ptype = parity row): the SSD reads the
//! chunks into its DRAM, computes the row over data and metadata, programs it, and invalidates
//! the VH. Nothing crosses the host link but the command. Host conversion (Scala-CO, and plain
//! members) reads the k primary chunks, encodes on the space manager's reactor, writes the m
//! parity chunks and trims the VHs. Either way the data chunks never move: they are already in
//! the HH.
//!
//! Host conversion checks every block it reads against the AMT and repairs a bad primary copy
//! from a backup before computing parity over it. An offloaded conversion reads the backup
//! copies inside the SSD, where the host cannot check them: a backup that rotted between its
//! write and the conversion is folded into the parity data. The parity's metadata is the
//! parity of the records, which that rot does not touch, so a later reconstruction through
//! that parity fails its checksum (it is never returned as data), and a scrub finds the parity
//! disagreeing with the verified data and recomputes it (docs/scala.md, "Integrity").

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use flashrig_blockdev::{ConvertCommand, DevResult, ParityType, VendorCommand, WriteHints};
use flashrig_runtime::{now_ns, sleep_ns};
use futures_util::future::join_all;

use super::tables::{state, NONE};
use super::Inner;

/// A set of chunks (one `Vec` per chunk).
pub(crate) type Chunks = Vec<Vec<u8>>;

impl Inner {
    /// Converts stripe `s` (a full or closed hero group) and recycles its VHs.
    pub(crate) async fn convert_stripe(self: &Arc<Self>, s: u64) -> DevResult<()> {
        let started_ns = now_ns();
        // Writes placed in the group before it filled may still be in flight.
        while self.t.inflight[s as usize].load(Relaxed) > 0 {
            sleep_ns(1_000).await;
        }
        // Held to the end: a repair of one of the stripe's blocks must not rewrite a chunk
        // between the reads the parity is computed from and the parity's write (or while the
        // SSDs convert), and a scrub must not see the stripe half converted.
        let _g = self.stripe_locks.lock(s).await;
        let g = &self.geo;
        let vhs: Vec<u32> = (0..g.m).map(|i| self.t.vh(s, i)).collect();
        let offload = self.offload
            && (0..g.m).all(|i| vhs[i] != NONE || self.is_failed(g.parity_member(s, i)));
        if offload {
            // From the first command on, a VH may already be invalid while the parity is not
            // written yet: degraded reads of the stripe wait until the conversion is done.
            self.t.set_state(s, state::CONVERTING);
            self.c.conversions_ssd.inc();
            let members = self.members.read().clone();
            let cmds = (0..g.m).filter(|&i| !self.is_failed(g.parity_member(s, i))).map(|i| {
                let p = g.parity_member(s, i);
                let dev = members[p].clone();
                let cmd = ConvertCommand {
                    src: (0..g.k).map(|j| g.vh_lba(vhs[i], j)).collect(),
                    dst: g.hh_lba(s),
                    chunk_blocks: g.chunk_blocks as u32,
                    ptype: ParityType::Row { index: i as u8, data_chunks: g.k as u8 },
                };
                async move {
                    let r = dev.vendor(VendorCommand::Convert(cmd)).await;
                    (p, dev, r)
                }
            });
            self.opts.costs.charge_member_ios(g.m as u64).await;
            for (p, dev, r) in join_all(cmds).await {
                self.c.convert_commands.inc();
                if let Err(e) = r {
                    self.member_error(p, &dev, e)?;
                }
            }
        } else {
            self.c.conversions_host.inc();
            // The backup copies stay readable while the host reads the primaries (a degraded
            // read of this very conversion may need one), so the stripe is marked converting
            // only once the parity is written, before the copies are trimmed.
            self.write_parity(s).await?;
            self.t.set_state(s, state::CONVERTING);
            // The backup copies are garbage now: tell the members (an SSD invalidates them).
            let members = self.members.read().clone();
            let live_vhs = (0..g.m)
                .filter(|&i| vhs[i] != NONE && !self.is_failed(g.parity_member(s, i)))
                .count();
            self.opts.costs.charge_member_ios(live_vhs as u64).await;
            let trims = (0..g.m).filter(|&i| vhs[i] != NONE).map(|i| {
                let p = g.parity_member(s, i);
                let dev = members[p].clone();
                let lba = g.vh_lba(vhs[i], 0);
                let n = g.stripe_blocks();
                async move {
                    let r = if self.is_failed(p) { Ok(()) } else { dev.trim(lba, n).await };
                    (p, dev, r)
                }
            });
            for (p, dev, r) in join_all(trims).await {
                if let Err(e) = r {
                    self.member_error(p, &dev, e)?;
                }
            }
        }
        self.clear_vhs(s);
        self.t.set_state(s, state::CONVERTED);
        self.c.convert_ns.add(now_ns() - started_ns);
        let mut mgr = self.mgr.lock();
        for (i, &v) in vhs.iter().enumerate() {
            if v != NONE {
                mgr.vh_free[g.parity_member(s, i)].push_back(v);
                self.c.recycled_vh.inc();
            }
        }
        Ok(())
    }

    /// Host-side parity of stripe `s` (the caller holds its lock): reads its k data chunks with
    /// their metadata, checks every block the AMT maps there (a bad primary copy is repaired
    /// from a backup first, so the parity protects the right data), encodes the m rows over
    /// data and metadata, and writes them to the parity members.
    pub(crate) async fn write_parity(&self, s: u64) -> DevResult<()> {
        let g = &self.geo;
        let bs = self.bs();
        let chunk = g.chunk_blocks as usize * bs;
        let mdc = g.chunk_blocks as usize * self.mdb;
        // Pooled buffers: the reads below fill every byte of them.
        let mut data: Chunks = (0..g.k).map(|_| self.bufs.take(chunk)).collect();
        let mut mds: Chunks = (0..g.k).map(|_| self.bufs.take(mdc)).collect();
        let reads = data
            .iter_mut()
            .zip(mds.iter_mut())
            .enumerate()
            .map(|(j, (d, m))| self.read_slot_verified(s, j, 0, d, m, true));
        for r in join_all(reads).await {
            // On an error the buffers are dropped, not pooled: errors are rare. A block lost
            // beyond redundancy is encoded as it is: the parity then agrees with the chunk,
            // and reads of the block keep answering `Corrupt`.
            r?;
        }
        self.opts.costs.charge_member_ios(g.k as u64).await;
        self.opts.costs.charge_copy((g.k * chunk) as u64).await;
        let encoded = self.encode(&data, &mds);
        self.bufs.give(data.into_iter().chain(mds));
        let (parity, pmd) = encoded?;
        self.opts.costs.charge_parity((g.k * chunk) as u64).await;
        self.c.parity_bytes.add((g.m * chunk) as u64);
        // The m parity writes are member I/Os of the host's too (Scala-CO pays for them on the
        // space manager's core, §6.5).
        let live = (0..g.m).filter(|&i| !self.is_failed(g.parity_member(s, i))).count();
        self.opts.costs.charge_member_ios(live as u64).await;
        let written = self.write_parity_chunks(s, &parity, &pmd, None).await;
        self.bufs.give(parity.into_iter().chain(pmd));
        written
    }

    /// The m parity rows of `data` and of `mds` (per-block metadata, encoded like data), in
    /// buffers of the pool (callers may give them back).
    pub(crate) fn encode(&self, data: &[Vec<u8>], mds: &[Vec<u8>]) -> DevResult<(Chunks, Chunks)> {
        let g = &self.geo;
        let err = |e: flashrig_erasure::Error| super::invalid(format!("encode: {e}"));
        // Encoding writes every byte of the rows, so pooled buffers need no clearing.
        let mut parity: Chunks = (0..g.m).map(|_| self.bufs.take(data[0].len())).collect();
        let mut pmd: Chunks = (0..g.m).map(|_| self.bufs.take(mds[0].len())).collect();
        let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
        let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
        self.codec.encode(&d, &mut p).map_err(err)?;
        let d: Vec<&[u8]> = mds.iter().map(|v| v.as_slice()).collect();
        let mut p: Vec<&mut [u8]> = pmd.iter_mut().map(|v| v.as_mut_slice()).collect();
        self.codec.encode(&d, &mut p).map_err(err)?;
        Ok((parity, pmd))
    }

    /// Writes parity rows to their members (only to `only` when given).
    pub(crate) async fn write_parity_chunks(
        &self,
        s: u64,
        parity: &[Vec<u8>],
        pmd: &[Vec<u8>],
        only: Option<usize>,
    ) -> DevResult<()> {
        let g = &self.geo;
        let members = self.members.read().clone();
        let ios = (0..g.m)
            .map(|i| (i, g.parity_member(s, i)))
            .filter(|&(_, p)| only.is_none_or(|o| o == p) && (only.is_some() || !self.is_failed(p)))
            .map(|(i, p)| {
                let dev = members[p].clone();
                let (d, md) = (&parity[i], &pmd[i]);
                async move {
                    let r = dev.write(g.hh_lba(s), d, Some(md), WriteHints::NONE).await;
                    (p, dev, r)
                }
            });
        for (p, dev, r) in join_all(ios).await {
            self.c.member_write_bytes.add(parity[0].len() as u64);
            if let Err(e) = r {
                self.member_error(p, &dev, e)?;
            }
        }
        Ok(())
    }
}
