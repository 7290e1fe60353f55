//! Where things live: the AFA address space is a sequence of *rows*; row `r` is the chunk at
//! member LBA `r * chunk_blocks` on every member (one chunk-sized slot per member). A row is
//! free, part of the replica log, or one stripe.
//!
//! - A stripe row holds k data chunks and m parity chunks, rotated from row to row as in the
//!   `raid` engine (md's left-symmetric layout), so a stripe's members follow from its row.
//! - A log row holds `n / (m + 1)` *replica sets* (n = k + m): set `g` of row `r` is the m + 1
//!   slots on members `(r + g(m + 1) + j) mod n`, j = 0..m. The slots of a set are filled in
//!   lockstep (block `o` of every replica of the set is at member LBA `r * chunk + o`), so a
//!   replicated block is located by (row, set, offset). When n is not a multiple of m + 1
//!   the remaining slots of a log row stay unused; the rotation by row spreads them over the
//!   members.

use flashrig_blockdev::{DevError, DevResult};

use crate::raid::Geometry as StripeGeometry;

/// The shape of a two-phase array and its space budget (see [`TwophaseGeometry::plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TwophaseGeometry {
    pub k: usize,
    pub m: usize,
    pub chunk_blocks: u64,
    /// Rows in the AFA address space (chunk slots per member).
    pub rows: u64,
    /// Replica sets per log row.
    pub sets_per_row: usize,
    /// User-visible blocks.
    pub capacity_blocks: u64,
    /// Replicated (valid, logical) blocks above which conversion starts.
    pub watermark_blocks: u64,
    /// Conversion, once started, goes on until replicated blocks are at most this.
    pub low_watermark_blocks: u64,
    /// Log rows beyond which conversion starts regardless of the watermark (the log's
    /// physical budget: the watermark's worth of rows plus the open row).
    pub log_row_budget: u64,
    /// Rows user writes never take, kept for conversion and GC targets.
    pub reserve_rows: u64,
}

/// Rows kept back for the cleaner: one for its next target, one spare.
pub const RESERVE_ROWS: u64 = 2;

impl TwophaseGeometry {
    /// Lays out an array of `rows` rows and computes the capacity it can export.
    ///
    /// Capacity is what the array can hold in the worst case: `U = (rows - log_row_budget -
    /// reserve_rows - 1) * k * chunk_blocks`. With at most U valid blocks, whenever user
    /// writes have used up all but the reserve, the live rows hold at least
    /// `(log_row_budget + 1) * k * chunk_blocks` blocks of invalid or unused space, so the
    /// cleaner, which packs the valid blocks of the emptiest rows into one new stripe at a
    /// time, frees at least one row per stripe and eventually a net row (docs/twophase.md).
    pub fn plan(
        k: usize,
        m: usize,
        chunk_blocks: u64,
        rows: u64,
        watermark_fraction: f64,
        low_watermark_fraction: f64,
    ) -> DevResult<TwophaseGeometry> {
        let n = k + m;
        let sets_per_row = n / (m + 1);
        let data = k as u64 * chunk_blocks;
        let log_row = sets_per_row as u64 * chunk_blocks;
        let raw = rows as f64 * data as f64;
        let log_row_budget = ((watermark_fraction * raw / log_row as f64).ceil() as u64 + 1).max(2);
        let overhead = log_row_budget + RESERVE_ROWS + 1;
        if rows <= overhead {
            return Err(DevError::Invalid(format!(
                "twophase: {rows} rows of {chunk_blocks}-block chunks are too few for a {k}+{m} \
                 array: the log budget ({log_row_budget} rows), the cleaner's reserve \
                 ({RESERVE_ROWS}) and one row of slack need {} (use larger members, smaller \
                 chunks or a lower watermark)",
                overhead + 1
            )));
        }
        let capacity_blocks = (rows - overhead) * data;
        let watermark_blocks = ((watermark_fraction * capacity_blocks as f64) as u64).max(1);
        let low = ((low_watermark_fraction * capacity_blocks as f64) as u64).min(watermark_blocks);
        Ok(TwophaseGeometry {
            k,
            m,
            chunk_blocks,
            rows,
            sets_per_row,
            capacity_blocks,
            watermark_blocks,
            low_watermark_blocks: low,
            log_row_budget,
            reserve_rows: RESERVE_ROWS,
        })
    }

    pub fn members(&self) -> usize {
        self.k + self.m
    }

    /// Copies of each replicated block.
    pub fn copies(&self) -> usize {
        self.m + 1
    }

    /// Data blocks per stripe row.
    pub fn stripe_data_blocks(&self) -> u64 {
        self.k as u64 * self.chunk_blocks
    }

    /// Replicated blocks one log row holds.
    pub fn log_row_blocks(&self) -> u64 {
        self.sets_per_row as u64 * self.chunk_blocks
    }

    fn stripe(&self) -> StripeGeometry {
        StripeGeometry { k: self.k, m: self.m, chunk_blocks: self.chunk_blocks, stripes: self.rows }
    }

    /// The LBA on every member where `row`'s slot starts.
    pub fn member_lba(&self, row: u64) -> u64 {
        row * self.chunk_blocks
    }

    /// The member holding replica `j` of set `set` of log row `row`.
    pub fn set_member(&self, row: u64, set: usize, j: usize) -> usize {
        let n = self.members();
        ((row % n as u64) as usize + set * self.copies() + j) % n
    }

    /// Which set of log row `row` member `i` serves, and as which replica (`None`: the member's
    /// slot in this row is one of the unused remainder).
    pub fn set_of_member(&self, row: u64, i: usize) -> Option<(usize, usize)> {
        let n = self.members();
        let rel = (i + n - (row % n as u64) as usize) % n;
        let (set, j) = (rel / self.copies(), rel % self.copies());
        (set < self.sets_per_row).then_some((set, j))
    }

    /// The member of chunk `index` (data `0..k`, then parity rows) of stripe row `row`.
    pub fn chunk_member(&self, row: u64, index: usize) -> usize {
        self.stripe().chunk_member(row, index)
    }

    pub fn data_member(&self, row: u64, d: usize) -> usize {
        self.stripe().data_member(row, d)
    }

    pub fn parity_member(&self, row: u64, r: usize) -> usize {
        self.stripe().parity_member(row, r)
    }

    /// The code index (data `0..k`, then parity) member `i` holds in stripe row `row`.
    pub fn chunk_index(&self, row: u64, i: usize) -> usize {
        (0..self.members()).find(|&x| self.chunk_member(row, x) == i).expect("every member")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_sets_use_distinct_members_and_rotate() {
        for (k, m) in [(2, 1), (4, 1), (6, 1), (4, 2), (6, 2), (3, 2), (1, 1)] {
            let g = TwophaseGeometry::plan(k, m, 4, 400, 0.05, 0.025).unwrap();
            let n = k + m;
            let mut unused = vec![0; n];
            for row in 0..n as u64 {
                let mut seen = vec![false; n];
                for set in 0..g.sets_per_row {
                    for j in 0..m + 1 {
                        let i = g.set_member(row, set, j);
                        assert!(!seen[i], "{k}+{m} row {row}: member {i} twice");
                        seen[i] = true;
                        assert_eq!(g.set_of_member(row, i), Some((set, j)));
                    }
                }
                for (i, s) in seen.iter().enumerate() {
                    if !s {
                        unused[i] += 1;
                        assert_eq!(g.set_of_member(row, i), None);
                    }
                }
                for x in 0..n {
                    assert_eq!(g.chunk_index(row, g.chunk_member(row, x)), x);
                }
            }
            // Over n rows every member is left out equally often.
            assert!(unused.iter().all(|&u| u == unused[0]), "{k}+{m}: {unused:?}");
        }
    }

    #[test]
    fn capacity_leaves_the_log_budget_and_reserve() {
        let g = TwophaseGeometry::plan(4, 1, 16, 1000, 0.05, 0.025).unwrap();
        // 5% of 1000 rows x 64 blocks over 32-block log rows = 100 rows, + 1 open row.
        assert_eq!(g.log_row_budget, 101);
        assert_eq!(g.capacity_blocks, (1000 - 101 - 2 - 1) * 64);
        assert_eq!(g.watermark_blocks, (0.05 * g.capacity_blocks as f64) as u64);
        assert!(TwophaseGeometry::plan(4, 1, 16, 5, 0.05, 0.025).is_err());
    }
}
