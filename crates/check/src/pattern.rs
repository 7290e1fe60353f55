//! Self-describing block contents.
//!
//! Every block a checker (or `flashrig run`) writes names itself: which LBA it was written to,
//! which version of that block it is, and which run wrote it (the salt), followed by
//! pseudo-random bytes derived from those three and a CRC-32C over the whole block. A block
//! read back is therefore recognisable on its own: all zeros (never written or trimmed), a
//! valid (lba, version, salt), or corrupt. That tells a failing test whether the engine lost a
//! write (an older version), misdirected one (another LBA), tore one (corrupt) or returned
//! another run's data (another salt).
//!
//! Layout of a block of `block_size` bytes (little-endian):
//!
//! | bytes     | field                                               |
//! |-----------|-----------------------------------------------------|
//! | 0..8      | magic `FLRGBLK1`                                    |
//! | 8..16     | lba                                                 |
//! | 16..24    | version (never 0)                                   |
//! | 24..32    | salt                                                |
//! | 32..36    | CRC-32C of bytes 0..32 and 40..block_size           |
//! | 36..40    | zero                                                |
//! | 40..      | splitmix64 stream seeded from (lba, version, salt)  |

/// The first eight bytes of every self-describing block.
pub const MAGIC: [u8; 8] = *b"FLRGBLK1";
/// The smallest block that holds the header.
pub const MIN_BLOCK_BYTES: usize = 40;

/// What a block read back holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockContent {
    /// All zeros: never written, or trimmed.
    Zero,
    /// A block written by [`fill_block`], intact.
    Valid { lba: u64, version: u64, salt: u64 },
    /// Anything else: torn, corrupted, or not written by flashrig.
    Corrupt,
}

impl std::fmt::Display for BlockContent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlockContent::Zero => f.write_str("zeros"),
            BlockContent::Valid { lba, version, salt } => {
                write!(f, "version {version} of lba {lba} (salt {salt:#x})")
            }
            BlockContent::Corrupt => f.write_str("corrupt data"),
        }
    }
}

/// splitmix64: a fast, well-mixed stream; the same seed gives the same bytes everywhere.
#[inline]
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn seed_of(lba: u64, version: u64, salt: u64) -> u64 {
    let mut s = lba ^ salt.rotate_left(17);
    let a = splitmix(&mut s);
    let mut t = version ^ a;
    splitmix(&mut t)
}

fn fill_stream(buf: &mut [u8], mut state: u64) {
    let mut words = buf.chunks_exact_mut(8);
    for w in &mut words {
        w.copy_from_slice(&splitmix(&mut state).to_le_bytes());
    }
    let rest = words.into_remainder();
    if !rest.is_empty() {
        let v = splitmix(&mut state).to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&v[..n]);
    }
}

fn crc_of(block: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&block[..32]), &block[40..])
}

/// Fills one block with the self-describing content of (`lba`, `version`, `salt`).
///
/// Panics if the block is shorter than [`MIN_BLOCK_BYTES`] or `version` is 0 (version 0 is
/// reserved for "never written").
pub fn fill_block(block: &mut [u8], lba: u64, version: u64, salt: u64) {
    assert!(block.len() >= MIN_BLOCK_BYTES, "a self-describing block needs 40 bytes");
    fill_stream(&mut block[40..], seed_of(lba, version, salt));
    stamp_header(block, lba, version, salt);
}

/// Writes the header fields and the CRC over the block as it now is.
fn stamp_header(block: &mut [u8], lba: u64, version: u64, salt: u64) {
    assert!(block.len() >= MIN_BLOCK_BYTES, "a self-describing block needs 40 bytes");
    assert!(version != 0, "version 0 means never written");
    block[0..8].copy_from_slice(&MAGIC);
    block[8..16].copy_from_slice(&lba.to_le_bytes());
    block[16..24].copy_from_slice(&version.to_le_bytes());
    block[24..32].copy_from_slice(&salt.to_le_bytes());
    block[36..40].fill(0);
    let crc = crc_of(block);
    block[32..36].copy_from_slice(&crc.to_le_bytes());
}

/// Renames a block already filled by [`fill_block`] as (`lba`, `version`, `salt`), keeping its
/// payload and recomputing the CRC: a fifth of the cost of a fresh fill, for load generators
/// that write at memory speed and only need every block to name itself. (A checker wants
/// [`fill_block`]: with a reused payload, a block torn between two versions of itself is only
/// noticed if the tear crosses the header.)
pub fn restamp_block(block: &mut [u8], lba: u64, version: u64, salt: u64) {
    stamp_header(block, lba, version, salt);
}

/// Fills consecutive blocks starting at `lba`, all with `version`.
pub fn fill_blocks(buf: &mut [u8], block_size: usize, lba: u64, version: u64, salt: u64) {
    for (i, b) in buf.chunks_exact_mut(block_size).enumerate() {
        fill_block(b, lba + i as u64, version, salt);
    }
}

/// Reads what a block holds.
pub fn decode_block(block: &[u8]) -> BlockContent {
    if block.iter().all(|&b| b == 0) {
        return BlockContent::Zero;
    }
    if block.len() < MIN_BLOCK_BYTES || block[0..8] != MAGIC {
        return BlockContent::Corrupt;
    }
    let word = |i: usize| u64::from_le_bytes(block[i..i + 8].try_into().expect("8 bytes"));
    let stored_crc = u32::from_le_bytes(block[32..36].try_into().expect("4 bytes"));
    if stored_crc != crc_of(block) || block[36..40] != [0; 4] {
        return BlockContent::Corrupt;
    }
    let (lba, version, salt) = (word(8), word(16), word(24));
    if version == 0 {
        return BlockContent::Corrupt;
    }
    BlockContent::Valid { lba, version, salt }
}

/// Fills the metadata bytes of one block written as (`lba`, `version`, `salt`).
pub fn fill_md(md: &mut [u8], lba: u64, version: u64, salt: u64) {
    fill_stream(md, seed_of(lba, version, salt) ^ 0x4D44_4D44_4D44_4D44);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_and_any_flipped_bit_is_seen() {
        for bs in [40usize, 512, 4096] {
            let mut b = vec![0u8; bs];
            assert_eq!(decode_block(&b), BlockContent::Zero);
            fill_block(&mut b, 17, 99, 5);
            assert_eq!(decode_block(&b), BlockContent::Valid { lba: 17, version: 99, salt: 5 });
            for pos in [0, 9, 17, 25, 33, 37, bs - 1] {
                let mut c = b.clone();
                c[pos] ^= 0x10;
                assert_eq!(decode_block(&c), BlockContent::Corrupt, "bs {bs} bit at {pos}");
            }
        }
    }

    #[test]
    fn a_restamped_block_names_its_new_position() {
        let mut b = vec![0u8; 512];
        fill_block(&mut b, 1, 1, 1);
        restamp_block(&mut b, 9, 3, 1);
        assert_eq!(decode_block(&b), BlockContent::Valid { lba: 9, version: 3, salt: 1 });
    }

    #[test]
    fn contents_differ_by_lba_version_and_salt() {
        let mut a = vec![0u8; 512];
        let mut b = vec![0u8; 512];
        fill_block(&mut a, 1, 1, 1);
        for (l, v, s) in [(2, 1, 1), (1, 2, 1), (1, 1, 2)] {
            fill_block(&mut b, l, v, s);
            assert_ne!(a[40..], b[40..], "payload of ({l},{v},{s})");
        }
    }

    #[test]
    fn a_block_from_another_position_keeps_its_own_name() {
        // Misdirected writes show up as a valid block naming another LBA.
        let mut buf = vec![0u8; 3 * 512];
        fill_blocks(&mut buf, 512, 10, 4, 0);
        assert_eq!(
            decode_block(&buf[512..1024]),
            BlockContent::Valid { lba: 11, version: 4, salt: 0 }
        );
    }
}
