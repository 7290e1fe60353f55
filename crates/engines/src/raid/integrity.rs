//! Integrity: a checksum per member block, verified on every read, repaired from parity.
//!
//! When every member stores at least [`MD_BYTES`] metadata bytes per block (an SSD's OOB
//! bytes, a file member's metadata sidecar), each block the array writes carries a *seal* in
//! its metadata:
//!
//! ```text
//! bytes 0..4  crc32c of the block's data, then its member LBA (u64 LE), its chunk index in
//!             code order (u32 LE: data 0..k, parity k..k+m) and bytes 4..8
//! bytes 4..8  magic "FRR1" (so a sealed block's metadata is never all zeros)
//! ```
//!
//! A block whose metadata and data are both all zeros was never written (or was trimmed) and
//! is valid. Anything else must match its seal. Because the seal covers the address, a block
//! that a member wrote to the wrong address (a misdirected write) fails where it landed; the
//! chunk index catches members swapped between slots. Data and parity are sealed alike, so a
//! reconstruction uses only chunks that passed.
//!
//! What the seal cannot see is a *lost* write on one member (the old block, with its valid
//! old seal, stays): an array that updates in place has no record of which version a block
//! should hold short of a journal. A lost write shows as parity that disagrees with checksummed
//! data, which only a scrub (or a later read-modify-write) reads; see [`Raid::scrub`] and
//! [`Raid::scrub_locating`] for what they repair. docs/raid.md discusses the choice.

use flashrig_blockdev::{DevError, DevResult, ScrubReport, WriteHints};

use super::Raid;
use crate::latency::MemberLatency;

/// Metadata bytes per member block the seal needs.
pub const MD_BYTES: usize = 8;
const MAGIC: &[u8; 4] = b"FRR1";

/// The seal of one block.
fn seal_of(data: &[u8], member_lba: u64, index: usize) -> u32 {
    let crc = crc32c::crc32c(data);
    let crc = crc32c::crc32c_append(crc, &member_lba.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &(index as u32).to_le_bytes());
    crc32c::crc32c_append(crc, MAGIC)
}

/// Writes the seals of `data` (whole blocks, the first at `member_lba`) into `md`, `mdb`
/// bytes per block; bytes past the seal are zeroed.
pub(super) fn seal(data: &[u8], member_lba: u64, index: usize, bs: usize, mdb: usize) -> Vec<u8> {
    let mut md = vec![0u8; data.len() / bs * mdb];
    for (b, (block, out)) in data.chunks(bs).zip(md.chunks_mut(mdb)).enumerate() {
        let crc = seal_of(block, member_lba + b as u64, index);
        out[0..4].copy_from_slice(&crc.to_le_bytes());
        out[4..8].copy_from_slice(MAGIC);
    }
    md
}

/// Whether one block matches its metadata (or is a never-written block of zeros).
pub(super) fn block_ok(block: &[u8], md: &[u8], member_lba: u64, index: usize) -> bool {
    if md[..MD_BYTES].iter().all(|&b| b == 0) {
        return block.iter().all(|&b| b == 0);
    }
    md[4..8] == *MAGIC
        && u32::from_le_bytes(md[0..4].try_into().expect("4 bytes"))
            == seal_of(block, member_lba, index)
}

impl Raid {
    /// Whether blocks carry seals (every member has metadata bytes for them).
    pub fn integrity(&self) -> bool {
        self.mdb > 0
    }

    /// The metadata to write with `data` at `member_lba` as chunk `index`, if blocks are
    /// sealed.
    pub(super) fn seal_for(&self, data: &[u8], member_lba: u64, index: usize) -> Option<Vec<u8>> {
        self.integrity().then(|| seal(data, member_lba, index, self.block_bytes(), self.mdb))
    }

    /// Reads `buf.len()` bytes at `lba` of member `mbr` (chunk `index` of its stripe) and
    /// verifies each block. Returns the indices of blocks that failed their seal (counted).
    pub(super) async fn read_member(
        &self,
        mbr: usize,
        index: usize,
        lba: u64,
        buf: &mut [u8],
    ) -> DevResult<Vec<usize>> {
        let dev = self.member(mbr);
        let start = MemberLatency::start();
        if !self.integrity() {
            dev.read(lba, buf, None).await?;
            self.latency.note(mbr, start);
            return Ok(Vec::new());
        }
        let bs = self.block_bytes();
        let mut md = vec![0u8; buf.len() / bs * self.mdb];
        dev.read(lba, buf, Some(&mut md)).await?;
        self.latency.note(mbr, start);
        let bad: Vec<usize> = buf
            .chunks(bs)
            .zip(md.chunks(self.mdb))
            .enumerate()
            .filter(|(b, (block, m))| !block_ok(block, m, lba + *b as u64, index))
            .map(|(b, _)| b)
            .collect();
        self.c.checksum_errors.add(bad.len() as u64);
        Ok(bad)
    }

    /// Rewrites blocks that failed their seal with their reconstructed contents. The caller
    /// holds the stripe's lock, so no write to these blocks can land in between. A member that
    /// fails the rewrite is handled like any write error; the read that found the damage has
    /// its data either way.
    pub(super) async fn heal(
        &self,
        stripe: u64,
        lo: u64,
        heals: &[(usize, usize, Vec<u8>)],
    ) -> DevResult<u64> {
        let base = self.geo.member_lba(stripe) + lo;
        let mut healed = 0;
        for (index, b, block) in heals {
            let mbr = self.geo.chunk_member(stripe, *index);
            if !self.available(mbr, stripe) {
                continue;
            }
            let lba = base + *b as u64;
            let md = self.seal_for(block, lba, *index);
            self.costs.charge_member_ios(1).await;
            match self.member(mbr).write(lba, block, md.as_deref(), WriteHints::NONE).await {
                Ok(()) => healed += 1,
                Err(e) if self.note_error(mbr, &e) => {}
                Err(e) => return Err(e),
            }
        }
        self.c.healed_blocks.add(healed);
        Ok(healed)
    }

    /// Walks every stripe under its lock: reads all chunks, verifies every block, rebuilds
    /// and rewrites the ones that fail, then checks parity against the (verified) data.
    ///
    /// Parity that disagrees with data whose checksums all pass is recomputed from the data
    /// (md's `repair`; counted in `redundancy_mismatches`). After a crash that is the resync
    /// closing the write hole: the data blocks are each an old or a new version, and parity
    /// that missed an update is what is stale. See [`Raid::scrub_locating`] for lost writes.
    pub async fn scrub(&self) -> DevResult<ScrubReport> {
        self.scrub_rows(false).await
    }

    /// [`Raid::scrub`], but with two or more parity chunks a row that disagrees is first
    /// searched for the one chunk that makes it consistent when rebuilt from the others
    /// (RAID-6's single-error correction), which is rewritten: this repairs a data write a
    /// member lost, which the plain scrub would bake into parity. Only for an array that has
    /// not crashed since its last resync: after a crash several chunks of a row can be
    /// stale at once, and the reliability swarm found rows where a single chunk rebuilt from
    /// stale parity "explained" the row with a version older than one already flushed.
    pub async fn scrub_locating(&self) -> DevResult<ScrubReport> {
        self.scrub_rows(true).await
    }

    async fn scrub_rows(&self, locate: bool) -> DevResult<ScrubReport> {
        let mut report = ScrubReport::default();
        let (k, m, n) = (self.geo.k, self.geo.m, self.geo.members());
        let chunk = self.geo.chunk_blocks;
        let bs = self.block_bytes();
        let all: Vec<usize> = (0..n).collect();
        for s in 0..self.geo.stripes {
            let _g = self.locks.lock(s).await;
            let mut shards = self.read_rows(s, 0, chunk, &all, None, true, &mut report).await?;
            if shards.iter().any(|sh| sh.is_none()) {
                continue; // rows beyond redundancy, counted by read_rows
            }
            let chunks: Vec<Vec<u8>> = shards.iter_mut().map(|sh| sh.take().unwrap()).collect();
            let mut parity = vec![vec![0u8; chunks[0].len()]; m];
            {
                let data: Vec<&[u8]> = chunks[..k].iter().map(|c| c.as_slice()).collect();
                let mut rows: Vec<&mut [u8]> =
                    parity.iter_mut().map(|p| p.as_mut_slice()).collect();
                self.costs.charge_parity(chunks[0].len() as u64 * k as u64).await;
                self.codec
                    .encode(&data, &mut rows)
                    .map_err(|e| DevError::Invalid(e.to_string()))?;
            }
            let mut heals = Vec::new();
            for b in 0..chunk as usize {
                let at = b * bs..(b + 1) * bs;
                if (0..m).all(|r| parity[r][at.clone()] == chunks[k + r][at.clone()]) {
                    continue;
                }
                report.redundancy_mismatches += 1;
                self.c.parity_mismatches.inc();
                let row: Vec<&[u8]> = chunks.iter().map(|c| &c[at.clone()]).collect();
                let located = match locate {
                    true => self.locate_bad_chunk(&row)?,
                    false => None,
                };
                match located {
                    Some((index, block)) => heals.push((index, b, block)),
                    None => {
                        for (r, p) in parity.iter().enumerate() {
                            heals.push((k + r, b, p[at.clone()].to_vec()));
                        }
                    }
                }
            }
            report.repaired += self.heal(s, 0, &heals).await?;
        }
        self.c.scrubbed_blocks.add(report.blocks_checked);
        Ok(report)
    }

    /// For one inconsistent row (one block of each chunk), finds the single chunk whose
    /// reconstruction from the others makes the whole row consistent, with its right contents.
    /// Needs m >= 2 (with one parity chunk every candidate fits); `None` when no single chunk
    /// or more than one explains the row.
    fn locate_bad_chunk(&self, row: &[&[u8]]) -> DevResult<Option<(usize, Vec<u8>)>> {
        let (k, m, n) = (self.geo.k, self.geo.m, self.geo.members());
        if m < 2 {
            return Ok(None);
        }
        let mut found = None;
        for j in 0..n {
            let mut shards: Vec<Option<Vec<u8>>> =
                row.iter().enumerate().map(|(i, c)| (i != j).then(|| c.to_vec())).collect();
            self.codec.reconstruct(&mut shards).map_err(|e| DevError::Invalid(e.to_string()))?;
            let full: Vec<Vec<u8>> = shards.into_iter().map(|s| s.unwrap()).collect();
            let mut parity = vec![vec![0u8; full[0].len()]; m];
            let data: Vec<&[u8]> = full[..k].iter().map(|c| c.as_slice()).collect();
            let mut rows: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
            self.codec.encode(&data, &mut rows).map_err(|e| DevError::Invalid(e.to_string()))?;
            if (0..m).all(|r| parity[r] == full[k + r]) {
                if found.is_some() {
                    return Ok(None);
                }
                found = Some((j, full[j].clone()));
            }
        }
        Ok(found)
    }
}
