//! Where a stripe's chunks live: k data chunks and m parity chunks over k + m members, parity
//! rotating from stripe to stripe (Linux md's default `left-symmetric` layout, generalised to m
//! parity chunks: parity row r of stripe s on member (p0 + r) mod n with p0 = n - 1 - s mod n,
//! data chunk d on member (p0 + m + d) mod n).
//!
//! Rotation spreads the parity writes of small updates over every member instead of making
//! one member the bottleneck (RAID-4's problem).

/// The shape of a RAID array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Data chunks per stripe.
    pub k: usize,
    /// Parity chunks per stripe.
    pub m: usize,
    pub chunk_blocks: u64,
    /// Stripes in the array (every member holds one chunk of each).
    pub stripes: u64,
}

/// A contiguous piece of a request inside one data chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkPiece {
    /// Data chunk index within its stripe, `0..k`.
    pub data: usize,
    /// Block offset inside the chunk.
    pub offset_blocks: u64,
    pub blocks: u64,
    /// Offset of the piece within the request, in blocks.
    pub request_offset_blocks: u64,
}

/// The part of a request that falls into one stripe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeSpan {
    pub stripe: u64,
    /// Offset within the stripe's data (k x chunk_blocks blocks), in blocks.
    pub offset_blocks: u64,
    pub blocks: u64,
    /// Offset of the span within the request, in blocks.
    pub request_offset_blocks: u64,
}

impl Geometry {
    pub fn members(&self) -> usize {
        self.k + self.m
    }

    /// Data blocks per stripe.
    pub fn stripe_data_blocks(&self) -> u64 {
        self.k as u64 * self.chunk_blocks
    }

    pub fn capacity_blocks(&self) -> u64 {
        self.stripes * self.stripe_data_blocks()
    }

    /// The member holding parity row `row` of `stripe`.
    pub fn parity_member(&self, stripe: u64, row: usize) -> usize {
        let n = self.members();
        let p0 = n - 1 - (stripe % n as u64) as usize;
        (p0 + row) % n
    }

    /// The member holding data chunk `data` of `stripe`.
    pub fn data_member(&self, stripe: u64, data: usize) -> usize {
        self.parity_member(stripe, self.m + data)
    }

    /// The member of chunk `index` of `stripe` in code order: data `0..k`, then parity rows.
    pub fn chunk_member(&self, stripe: u64, index: usize) -> usize {
        if index < self.k {
            self.data_member(stripe, index)
        } else {
            self.parity_member(stripe, index - self.k)
        }
    }

    /// The LBA on every member where `stripe`'s chunk starts.
    pub fn member_lba(&self, stripe: u64) -> u64 {
        stripe * self.chunk_blocks
    }

    /// Splits `blocks` at array `lba` into per-stripe spans.
    pub fn spans(&self, lba: u64, blocks: u64) -> Vec<StripeSpan> {
        let per = self.stripe_data_blocks();
        let mut out = Vec::new();
        let mut done = 0;
        while done < blocks {
            let l = lba + done;
            let offset = l % per;
            let n = (per - offset).min(blocks - done);
            out.push(StripeSpan {
                stripe: l / per,
                offset_blocks: offset,
                blocks: n,
                request_offset_blocks: done,
            });
            done += n;
        }
        out
    }

    /// Splits a span into pieces per data chunk (offsets relative to the span).
    pub fn pieces(&self, span_offset_blocks: u64, blocks: u64) -> Vec<ChunkPiece> {
        let mut out = Vec::new();
        let mut done = 0;
        while done < blocks {
            let o = span_offset_blocks + done;
            let within = o % self.chunk_blocks;
            let n = (self.chunk_blocks - within).min(blocks - done);
            out.push(ChunkPiece {
                data: (o / self.chunk_blocks) as usize,
                offset_blocks: within,
                blocks: n,
                request_offset_blocks: done,
            });
            done += n;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stripe_puts_each_chunk_on_a_different_member_and_parity_rotates() {
        for (k, m) in [(2, 1), (4, 1), (6, 2), (3, 2)] {
            let g = Geometry { k, m, chunk_blocks: 4, stripes: 100 };
            let n = k + m;
            let mut parity_seen = vec![0; n];
            for s in 0..n as u64 {
                let mut used: Vec<usize> = (0..n).map(|i| g.chunk_member(s, i)).collect();
                parity_seen[g.parity_member(s, 0)] += 1;
                used.sort();
                assert_eq!(used, (0..n).collect::<Vec<_>>(), "k={k} m={m} stripe {s}");
            }
            assert!(parity_seen.iter().all(|&c| c == 1), "P visits every member once per cycle");
        }
        // md left-symmetric RAID-5 over 3 members: stripe 0 has parity on member 2 and data
        // on 0, 1; stripe 1 parity on 1, data on 2, 0.
        let g = Geometry { k: 2, m: 1, chunk_blocks: 4, stripes: 10 };
        assert_eq!((g.parity_member(0, 0), g.data_member(0, 0), g.data_member(0, 1)), (2, 0, 1));
        assert_eq!((g.parity_member(1, 0), g.data_member(1, 0), g.data_member(1, 1)), (1, 2, 0));
    }

    #[test]
    fn spans_and_pieces_cover_a_request_exactly() {
        let g = Geometry { k: 3, m: 1, chunk_blocks: 4, stripes: 10 };
        let spans = g.spans(10, 20);
        assert_eq!(spans.iter().map(|s| s.blocks).sum::<u64>(), 20);
        assert_eq!((spans[0].stripe, spans[0].offset_blocks, spans[0].blocks), (0, 10, 2));
        assert_eq!((spans[1].stripe, spans[1].blocks), (1, 12));
        let pieces = g.pieces(2, 9);
        assert_eq!(
            pieces.iter().map(|p| (p.data, p.offset_blocks, p.blocks)).collect::<Vec<_>>(),
            vec![(0, 2, 2), (1, 0, 4), (2, 0, 3)]
        );
    }
}
