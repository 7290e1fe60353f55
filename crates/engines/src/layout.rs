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
