//! The storage-space abstraction of ScalaAFA (§5.1): where every hero lives on the members.
//!
//! Each member's LBA space is cut into chunks of `chunk_blocks` and laid out as
//!
//! ```text
//! | superblock | checkpoint A | checkpoint B | delta log   | trim journal | normal area (HH) | transient area (VH)      |
//! | 1 chunk    | ckpt_chunks  | ckpt_chunks  | ckpt_chunks | journal      | hh chunks        | vh_per_member * k chunks |
//! ```
//!
//! - A **horizontal hero** (HH) `s` is the chunk at the same member LBA on all k + m members
//!   (normal area). Stripe `s` of the AFA address space is bound to HH `s` (§5.2), so the stripe
//!   needs no table: its k data slots and m parity chunks rotate over the members like md's
//!   left-symmetric RAID.
//! - A **vertical hero** (VH) is k contiguous chunks on one member (transient area). The
//!   backup copies of a stripe's k slots go to the VH on each of its m parity members, so the
//!   chunks of a stripe gather where its parity will be computed (§5.3, Fig. 7).

use flashrig_blockdev::{DevError, DevResult};

/// Chunks of the trim journal: `journal_chunks * chunk_blocks` one-block records in a ring.
pub const JOURNAL_CHUNKS: u64 = 4;

/// Bytes of a checkpoint's header block.
pub const CKPT_HEADER_BYTES: u64 = 4096;

/// Bytes per user block in a checkpoint (one AMT entry).
pub const CKPT_AMT_ENTRY_BYTES: u64 = 8;

/// The geometry of a k + m ScalaAFA array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalaGeometry {
    pub k: usize,
    pub m: usize,
    pub n: usize,
    pub chunk_blocks: u64,
    pub block_size: u32,
    /// Blocks of the smallest member.
    pub member_blocks: u64,
    /// Chunks of one checkpoint slot.
    pub ckpt_chunks: u64,
    /// Horizontal heroes (= stripes).
    pub hh: u64,
    /// Vertical heroes on each member.
    pub vh_per_member: u64,
    /// HHs kept back from the exported capacity so AFA-level GC always finds room.
    pub reserve_hh: u64,
    /// Exported user capacity in blocks.
    pub user_blocks: u64,
}

/// Which copy of a data slot a member holds, or its parity role, in stripe `s`.
impl ScalaGeometry {
    /// Lays out an array on members of `member_blocks` blocks with a transient area of
    /// `transient_blocks` per member and `reserve_fraction` of the HHs held back for GC.
    pub fn new(
        k: usize,
        m: usize,
        chunk_blocks: u64,
        block_size: u32,
        member_blocks: u64,
        transient_blocks: u64,
        reserve_fraction: f64,
    ) -> DevResult<ScalaGeometry> {
        let n = k + m;
        let bad = |msg: String| Err(DevError::Invalid(format!("scala: {msg}")));
        if chunk_blocks == 0 {
            return bad("chunk_blocks must be at least 1".into());
        }
        let chunks = member_blocks / chunk_blocks;
        let vh_per_member = transient_blocks / chunk_blocks / k as u64;
        if vh_per_member < 2 {
            return bad(format!(
                "the transient area of {transient_blocks} blocks per member holds {vh_per_member} \
                 vertical heroes of {k} chunks of {chunk_blocks} blocks; at least 2 are needed"
            ));
        }
        let fixed = 1 + JOURNAL_CHUNKS + vh_per_member * k as u64;
        if chunks <= fixed + 4 {
            return bad(format!(
                "members of {member_blocks} blocks are too small for {k} + {m} with \
                 {chunk_blocks}-block chunks and a {transient_blocks}-block transient area"
            ));
        }
        // The checkpoint's size depends on the HH count and the HH count on the space the
        // checkpoints leave; start from the upper bound and shrink until both fit.
        let chunk_bytes = chunk_blocks * block_size as u64;
        let mut hh = chunks - fixed;
        let ckpt_chunks = loop {
            let user = hh * k as u64 * chunk_blocks;
            // AMT entries, a converted byte and a scan-list entry (u32) per stripe.
            let bytes = CKPT_HEADER_BYTES + user * CKPT_AMT_ENTRY_BYTES + hh * 5;
            let c = bytes.div_ceil(chunk_bytes);
            // Two full checkpoint slots and a delta log of the same size.
            if fixed + 3 * c + hh <= chunks {
                break c;
            }
            hh = chunks.saturating_sub(fixed + 3 * c);
        };
        let reserve_hh = ((hh as f64 * reserve_fraction).ceil() as u64).max(2 * n as u64 + 2);
        if hh <= reserve_hh + 1 {
            return bad(format!(
                "members of {member_blocks} blocks leave {hh} horizontal heroes, not more than \
                 the {reserve_hh} kept for GC"
            ));
        }
        let user_blocks = (hh - reserve_hh) * k as u64 * chunk_blocks;
        if hh * k as u64 * chunk_blocks >= u32::MAX as u64 {
            return bad(format!(
                "{} AFA blocks do not fit the 32-bit AFA block numbers of the mapping table",
                hh * k as u64 * chunk_blocks
            ));
        }
        Ok(ScalaGeometry {
            k,
            m,
            n,
            chunk_blocks,
            block_size,
            member_blocks,
            ckpt_chunks,
            hh,
            vh_per_member,
            reserve_hh,
            user_blocks,
        })
    }

    /// First chunk of checkpoint slot `slot` (0 or 1).
    pub fn ckpt_lba(&self, slot: u64) -> u64 {
        (1 + slot * self.ckpt_chunks) * self.chunk_blocks
    }

    /// First block of the delta log (incremental checkpoints since the last full one).
    pub fn dlog_lba(&self) -> u64 {
        (1 + 2 * self.ckpt_chunks) * self.chunk_blocks
    }

    /// Blocks of the delta log.
    pub fn dlog_blocks(&self) -> u64 {
        self.ckpt_chunks * self.chunk_blocks
    }

    /// First block of the trim journal.
    pub fn journal_lba(&self) -> u64 {
        (1 + 3 * self.ckpt_chunks) * self.chunk_blocks
    }

    pub fn journal_blocks(&self) -> u64 {
        JOURNAL_CHUNKS * self.chunk_blocks
    }

    fn first_hh_chunk(&self) -> u64 {
        1 + 3 * self.ckpt_chunks + JOURNAL_CHUNKS
    }

    /// Member LBA of HH `s` (the same on every member).
    pub fn hh_lba(&self, s: u64) -> u64 {
        (self.first_hh_chunk() + s) * self.chunk_blocks
    }

    /// Member LBA of slot `j` of VH `v` (on whichever member it belongs to).
    pub fn vh_lba(&self, v: u32, j: usize) -> u64 {
        (self.first_hh_chunk() + self.hh + v as u64 * self.k as u64 + j as u64) * self.chunk_blocks
    }

    /// The member holding parity row `i` of stripe `s`.
    pub fn parity_member(&self, s: u64, i: usize) -> usize {
        let n = self.n as u64;
        ((n - 1 - s % n + i as u64) % n) as usize
    }

    /// The member holding data slot `j` of stripe `s`.
    pub fn data_member(&self, s: u64, j: usize) -> usize {
        let n = self.n as u64;
        ((n - 1 - s % n + (self.m + j) as u64) % n) as usize
    }

    /// Blocks in a stripe's data slots.
    pub fn stripe_blocks(&self) -> u64 {
        self.k as u64 * self.chunk_blocks
    }

    /// Splits an AFA block number into (stripe, slot, offset in the chunk).
    pub fn split(&self, afa: u32) -> (u64, usize, u64) {
        let afa = afa as u64;
        let s = afa / self.stripe_blocks();
        let r = afa % self.stripe_blocks();
        (s, (r / self.chunk_blocks) as usize, r % self.chunk_blocks)
    }

    pub fn afa(&self, s: u64, j: usize, off: u64) -> u32 {
        (s * self.stripe_blocks() + j as u64 * self.chunk_blocks + off) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_do_not_overlap_and_fit() {
        let g = ScalaGeometry::new(4, 1, 16, 4096, 1 << 16, 4096, 0.05).unwrap();
        assert!(g.ckpt_lba(1) >= g.ckpt_lba(0) + g.ckpt_chunks * 16);
        assert_eq!(g.dlog_lba(), g.ckpt_lba(1) + g.ckpt_chunks * 16);
        assert_eq!(g.journal_lba(), g.dlog_lba() + g.dlog_blocks());
        assert_eq!(g.hh_lba(0), g.journal_lba() + g.journal_blocks());
        assert_eq!(g.vh_lba(0, 0), g.hh_lba(g.hh));
        assert!(g.vh_lba(g.vh_per_member as u32 - 1, 3) + 16 <= g.member_blocks);
        // Every stripe has k + m distinct members.
        for s in 0..10 {
            let mut seen = [false; 5];
            for i in 0..1 {
                seen[g.parity_member(s, i)] = true;
            }
            for j in 0..4 {
                assert!(!seen[g.data_member(s, j)]);
                seen[g.data_member(s, j)] = true;
            }
        }
        let (s, j, off) = g.split(g.afa(7, 2, 5));
        assert_eq!((s, j, off), (7, 2, 5));
    }

    #[test]
    fn too_small_members_are_refused() {
        assert!(ScalaGeometry::new(4, 1, 16, 4096, 1000, 1024, 0.05).is_err());
        assert!(ScalaGeometry::new(4, 1, 16, 4096, 1 << 16, 64, 0.05).is_err());
    }
}
