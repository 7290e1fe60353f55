//! WAFLASH's compacted partial pages (§3.3, Fig. 7): several small partial versions of
//! logical units from one region packed into one slot.
//!
//! A compacted slot's page starts with the identifier `0xFFFF`, then a table with one entry
//! per packed unit, then the units' data sections, one after another (docs/formats.md gives
//! the byte layout). The paper's entry is ⟨LPN, offset, len⟩; ours adds the write's sequence
//! number (recovery orders a unit's versions by it, and the units of one page were written at
//! different times), its flags, and the unit's sector bitmap, because a unit's present
//! sectors need not be one contiguous run: its section holds the present sectors in ascending
//! order, `len` of them, and the bitmap says where each goes. One entry per unit keeps the
//! table small whatever the pattern.
//!
//! The table is also kept beside the line's OOB ([`super::store::LineStore`]'s sparse list),
//! because payload modes `tag` and `none` keep no data bytes to hold it; with payload `full`
//! the slot's bytes hold exactly this layout, and [`parse`] reads the table back from them.

use super::store::{IuImage, Shape};
use crate::config::PayloadMode;

/// The first two bytes of a compacted page (WAFLASH §3.3: "its first two bytes should contain
/// a unique identifier (e.g., 0xFFFF)").
pub const COMPACTED_ID: u16 = 0xFFFF;

/// The logical unit number a compacted slot's OOB holds: it belongs to several units, which
/// its table names. No logical unit has this number (units are numbered below `u32::MAX - 1`).
pub const COMPACTED_LPN: u32 = u32::MAX - 1;

/// Bytes before the table: the identifier and the number of entries (u16 each).
pub const HEADER_BYTES: usize = 4;

/// Bytes of one table entry for units of `blocks_per_iu` host blocks: LPN u32, sequence
/// number u64, offset u32 (bytes from the page's start), len u16 (blocks), flags u8, one
/// reserved byte, then the sector bitmap (`blocks_per_iu / 8` bytes, rounded up).
pub fn entry_bytes(blocks_per_iu: usize) -> usize {
    20 + blocks_per_iu.div_ceil(8)
}

/// One packed unit: a partial version of `lpn`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub lpn: u32,
    pub seq: u64,
    pub flags: u8,
    /// The host blocks of the unit this version holds (bit `i`: block `i`).
    pub present: u128,
    /// Where the section's data starts in the page, in bytes.
    pub offset_bytes: u32,
    /// Blocks in the section (`present.count_ones()`).
    pub len_blocks: u16,
}

/// A compacted slot's table, and how many units still use one of its sections (volatile:
/// recovery counts them again). The slot stays valid while that count is above zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Compacted {
    pub sections: Vec<Section>,
    pub live: u32,
}

impl Compacted {
    /// The section of `lpn`, if the page holds one.
    pub fn section_of(&self, lpn: u32) -> Option<&Section> {
        self.sections.iter().find(|s| s.lpn == lpn)
    }
}

/// Bytes a compacted page of `units` units holding `blocks` host blocks in all needs.
pub fn packed_bytes(shape: &Shape, units: usize, blocks: usize) -> usize {
    HEADER_BYTES + units * entry_bytes(shape.blocks_per_iu) + blocks * shape.block_bytes
}

/// Whether a compacted page of `units` units and `blocks` blocks fits one slot (a unit's
/// bytes).
pub fn fits(shape: &Shape, units: usize, blocks: usize) -> bool {
    packed_bytes(shape, units, blocks) <= shape.blocks_per_iu * shape.block_bytes
}

/// One unit to pack: its number, sequence number, flags, present blocks and content.
pub struct Packing<'a> {
    pub lpn: u32,
    pub seq: u64,
    pub flags: u8,
    pub present: u128,
    pub img: &'a IuImage,
}

/// Packs `units` (which [`fits`] one slot) into a compacted page: its image in the run's
/// payload mode and its table, with every section live.
pub fn pack(shape: &Shape, units: &[Packing<'_>]) -> (IuImage, Compacted) {
    let entry = entry_bytes(shape.blocks_per_iu);
    let data_start = HEADER_BYTES + units.len() * entry;
    let mut img = IuImage::zeroed(shape);
    let mut sections = Vec::with_capacity(units.len());
    // The index of the next packed block among all the page's blocks: tags and host metadata,
    // which have a fixed place per block in a slot's image, go at these indices.
    let mut packed = 0usize;
    for u in units {
        let len = (u.present & full_mask(shape)).count_ones() as usize;
        let offset = data_start + packed * shape.block_bytes;
        let blocks = (0..shape.blocks_per_iu).filter(|&i| u.present & (1u128 << i) != 0);
        for (k, i) in blocks.enumerate() {
            img.copy_block_packed(shape, packed + k, offset + k * shape.block_bytes, u.img, i);
        }
        sections.push(Section {
            lpn: u.lpn,
            seq: u.seq,
            flags: u.flags,
            present: u.present & full_mask(shape),
            offset_bytes: offset as u32,
            len_blocks: len as u16,
        });
        packed += len;
    }
    if shape.mode == PayloadMode::Full {
        let b = img.data_mut(shape);
        b[0..2].copy_from_slice(&COMPACTED_ID.to_le_bytes());
        b[2..4].copy_from_slice(&(units.len() as u16).to_le_bytes());
        for (k, s) in sections.iter().enumerate() {
            let e = &mut b[HEADER_BYTES + k * entry..HEADER_BYTES + (k + 1) * entry];
            e[0..4].copy_from_slice(&s.lpn.to_le_bytes());
            e[4..12].copy_from_slice(&s.seq.to_le_bytes());
            e[12..16].copy_from_slice(&s.offset_bytes.to_le_bytes());
            e[16..18].copy_from_slice(&s.len_blocks.to_le_bytes());
            e[18] = s.flags;
            e[20..].copy_from_slice(&s.present.to_le_bytes()[..entry - 20]);
        }
    }
    let live = sections.len() as u32;
    (img, Compacted { sections, live })
}

/// The unit `section` of the compacted page `page` holds, as a unit image: its blocks in
/// place, zeros in the blocks it lacks.
pub fn unpack(shape: &Shape, page: &IuImage, section: &Section, data_start: usize) -> IuImage {
    let mut img = IuImage::zeroed(shape);
    let offset = section.offset_bytes as usize;
    let first = offset.saturating_sub(data_start) / shape.block_bytes.max(1);
    let blocks = (0..shape.blocks_per_iu).filter(|&i| section.present & (1u128 << i) != 0);
    for (k, i) in blocks.enumerate() {
        img.copy_block_unpacked(shape, i, page, first + k, offset + k * shape.block_bytes);
    }
    img
}

/// Where the data sections of a page of `units` units start.
pub fn data_start(shape: &Shape, units: usize) -> usize {
    HEADER_BYTES + units * entry_bytes(shape.blocks_per_iu)
}

/// Reads the table back from a compacted page's bytes (payload `full` only); `None` when the
/// bytes do not start with the identifier or the table does not fit the page.
pub fn parse(shape: &Shape, page: &IuImage) -> Option<Vec<Section>> {
    if shape.mode != PayloadMode::Full {
        return None;
    }
    let b = page.as_bytes();
    let page_bytes = shape.blocks_per_iu * shape.block_bytes;
    if b.len() < page_bytes.max(HEADER_BYTES) || b[0..2] != COMPACTED_ID.to_le_bytes() {
        return None;
    }
    let n = u16::from_le_bytes([b[2], b[3]]) as usize;
    let entry = entry_bytes(shape.blocks_per_iu);
    if data_start(shape, n) > page_bytes {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for k in 0..n {
        let e = &b[HEADER_BYTES + k * entry..HEADER_BYTES + (k + 1) * entry];
        let mut bits = [0u8; 16];
        bits[..entry - 20].copy_from_slice(&e[20..]);
        out.push(Section {
            lpn: u32::from_le_bytes(e[0..4].try_into().ok()?),
            seq: u64::from_le_bytes(e[4..12].try_into().ok()?),
            offset_bytes: u32::from_le_bytes(e[12..16].try_into().ok()?),
            len_blocks: u16::from_le_bytes(e[16..18].try_into().ok()?),
            flags: e[18],
            present: u128::from_le_bytes(bits),
        });
    }
    Some(out)
}

/// Every host block of a unit of `shape`.
fn full_mask(shape: &Shape) -> u128 {
    if shape.blocks_per_iu >= 128 {
        u128::MAX
    } else {
        (1u128 << shape.blocks_per_iu) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(mode: PayloadMode, md_bytes: usize) -> Shape {
        Shape { mode, block_bytes: 512, blocks_per_iu: 16, md_bytes }
    }

    /// A unit whose block `i` is 512 bytes of `tag + i` (metadata: 8 bytes of the same).
    fn unit(s: &Shape, tag: u8, present: u128) -> IuImage {
        let mut img = IuImage::zeroed(s);
        for i in 0..16 {
            if present & (1 << i) != 0 {
                let md = [tag + i as u8; 8];
                img.put_block(s, i, &[tag + i as u8; 512], Some(&md[..s.md_bytes]));
            }
        }
        img
    }

    #[test]
    fn a_page_holds_what_fits_and_the_table_reads_back_from_its_bytes() {
        let s = shape(PayloadMode::Full, 0);
        // 16 blocks of 512 bytes: the header and two 22-byte entries take 48 bytes, so two
        // units fit with 15 blocks between them, not 16.
        assert_eq!(entry_bytes(16), 22);
        assert!(fits(&s, 2, 15) && !fits(&s, 2, 16));
        // A run at the start, one at the end, and a unit with two runs (non-contiguous).
        let units = [(7u32, 0b111u128), (9, 0xE000), (300, 0b1100_0011)];
        let imgs: Vec<IuImage> =
            units.iter().enumerate().map(|(k, &(_, p))| unit(&s, 40 * k as u8, p)).collect();
        let packing: Vec<Packing> = units
            .iter()
            .zip(&imgs)
            .enumerate()
            .map(|(k, (&(lpn, present), img))| Packing {
                lpn,
                seq: 100 + k as u64,
                flags: 0,
                present,
                img,
            })
            .collect();
        let (page, table) = pack(&s, &packing);
        assert_eq!(table.live, 3);
        assert_eq!(parse(&s, &page), Some(table.sections.clone()));
        assert_eq!(&page.as_bytes()[0..2], &[0xFF, 0xFF]);
        let start = data_start(&s, 3);
        assert_eq!(table.sections[1].offset_bytes as usize, start + 3 * 512);
        assert_eq!(table.sections[2].len_blocks, 4);
        for (k, sec) in table.sections.iter().enumerate() {
            assert_eq!(unpack(&s, &page, sec, start), imgs[k], "section {k}");
        }
    }

    #[test]
    fn tags_and_metadata_keep_each_block_apart() {
        for mode in [PayloadMode::Tag, PayloadMode::Full] {
            let s = shape(mode, 8);
            let (a, b) = (unit(&s, 10, 0b0110), unit(&s, 50, 0x8001));
            let packing = [
                Packing { lpn: 1, seq: 1, flags: 0, present: 0b0110, img: &a },
                Packing { lpn: 2, seq: 2, flags: 0, present: 0x8001, img: &b },
            ];
            let (page, table) = pack(&s, &packing);
            let start = data_start(&s, 2);
            assert_eq!(unpack(&s, &page, &table.sections[0], start), a, "{mode:?}");
            assert_eq!(unpack(&s, &page, &table.sections[1], start), b, "{mode:?}");
        }
    }
}
