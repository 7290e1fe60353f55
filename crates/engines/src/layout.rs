//! Mapping a request on an engine's address space to pieces on its members.

/// One contiguous piece of a request that lands on one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub member: usize,
    pub member_lba: u64,
    /// Offset of the piece within the request, in blocks.
    pub offset_blocks: u64,
    pub blocks: u64,
}

/// Splits `blocks` at `lba` of a RAID-0 layout with `chunk_blocks` per chunk over `members`.
pub fn stripe_pieces(lba: u64, blocks: u64, chunk_blocks: u64, members: usize) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut done = 0;
    while done < blocks {
        let l = lba + done;
        let chunk = l / chunk_blocks;
        let within = l % chunk_blocks;
        let n = (chunk_blocks - within).min(blocks - done);
        pieces.push(Piece {
            member: (chunk % members as u64) as usize,
            member_lba: (chunk / members as u64) * chunk_blocks + within,
            offset_blocks: done,
            blocks: n,
        });
        done += n;
    }
    pieces
}

/// Splits `blocks` at `lba` of members laid end to end, member `i` starting at `starts[i]`.
pub fn concat_pieces(lba: u64, blocks: u64, starts: &[u64], total: u64) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut done = 0;
    while done < blocks {
        let l = lba + done;
        let member = starts.partition_point(|&s| s <= l) - 1;
        let end = starts.get(member + 1).copied().unwrap_or(total);
        let n = (end - l).min(blocks - done);
        pieces.push(Piece {
            member,
            member_lba: l - starts[member],
            offset_blocks: done,
            blocks: n,
        });
        done += n;
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripe_maps_round_robin() {
        // 3 members, 4-block chunks: lba 10 is chunk 2 (member 2, row 0), offset 2.
        let p = stripe_pieces(10, 8, 4, 3);
        assert_eq!(
            p,
            vec![
                Piece { member: 2, member_lba: 2, offset_blocks: 0, blocks: 2 },
                Piece { member: 0, member_lba: 4, offset_blocks: 2, blocks: 4 },
                Piece { member: 1, member_lba: 4, offset_blocks: 6, blocks: 2 },
            ]
        );
    }

    use proptest::prelude::*;

    /// Checks that `pieces` tile a request of `blocks` blocks in order, each inside its
    /// member, and returns (member, member_lba, request offset) for every block.
    fn blocks_of(pieces: &[Piece], blocks: u64, member_blocks: &[u64]) -> Vec<(usize, u64, u64)> {
        let mut out = Vec::new();
        let mut next = 0;
        for p in pieces {
            assert_eq!(p.offset_blocks, next, "pieces are contiguous and in order");
            assert!(p.blocks > 0);
            assert!(p.member_lba + p.blocks <= member_blocks[p.member], "piece inside member");
            for i in 0..p.blocks {
                out.push((p.member, p.member_lba + i, p.offset_blocks + i));
            }
            next += p.blocks;
        }
        assert_eq!(next, blocks, "pieces cover the request");
        out
    }

    proptest! {
        #[test]
        fn stripe_pieces_tile_the_request_and_never_collide(
            members in 1usize..7, chunk in 1u64..9, rows in 1u64..6,
            start in 0u64..400, len in 1u64..60,
        ) {
            let total = members as u64 * chunk * rows;
            let start = start % total;
            let len = len.min(total - start);
            let pieces = stripe_pieces(start, len, chunk, members);
            let member_blocks = vec![chunk * rows; members];
            let got = blocks_of(&pieces, len, &member_blocks);
            // The whole address space maps one-to-one onto member blocks.
            let all = blocks_of(&stripe_pieces(0, total, chunk, members), total, &member_blocks);
            let mut seen = std::collections::HashSet::new();
            for &(m, l, _) in &all {
                prop_assert!(seen.insert((m, l)), "two LBAs share member {m} block {l}");
            }
            for (i, &(m, l, _)) in got.iter().enumerate() {
                prop_assert_eq!((m, l), (all[(start + i as u64) as usize].0, all[(start + i as u64) as usize].1));
            }
        }

        #[test]
        fn concat_pieces_tile_the_request(
            sizes in proptest::collection::vec(1u64..20, 1..6), start in 0u64..100, len in 1u64..50,
        ) {
            let mut starts = Vec::new();
            let mut total = 0;
            for s in &sizes {
                starts.push(total);
                total += s;
            }
            let start = start % total;
            let len = len.min(total - start);
            let got = blocks_of(&concat_pieces(start, len, &starts, total), len, &sizes);
            for (i, &(m, l, _)) in got.iter().enumerate() {
                prop_assert_eq!(starts[m] + l, start + i as u64);
            }
        }
    }

    #[test]
    fn concat_crosses_members() {
        let p = concat_pieces(8, 6, &[0, 10, 12], 20);
        assert_eq!(
            p,
            vec![
                Piece { member: 0, member_lba: 8, offset_blocks: 0, blocks: 2 },
                Piece { member: 1, member_lba: 0, offset_blocks: 2, blocks: 2 },
                Piece { member: 2, member_lba: 0, offset_blocks: 4, blocks: 2 },
            ]
        );
    }
}
