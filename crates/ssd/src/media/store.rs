//! What programmed pages hold: each slot's OOB (reverse map, sequence number, flags, host
//! metadata) and its payload in the run's payload mode. Storage is allocated per line when
//! the line is opened and freed when it is erased, so memory follows the data written.

use super::compacted::Compacted;
use crate::config::PayloadMode;

/// The OOB logical number of a slot holding no data (padding, or never programmed).
pub const NO_LPN: u32 = u32::MAX;
/// The slot holds a transient copy (write hint), which ScalaAFA's evictor leaves in SLC.
pub const FLAG_TRANSIENT: u8 = 1;

/// The shape of one mapping unit's content in this run.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub mode: PayloadMode,
    pub block_bytes: usize,
    pub blocks_per_iu: usize,
    pub md_bytes: usize,
}

impl Shape {
    pub(crate) fn data_len(&self) -> usize {
        if self.mode == PayloadMode::Full {
            self.block_bytes * self.blocks_per_iu
        } else {
            0
        }
    }
    fn tags_len(&self) -> usize {
        if self.mode == PayloadMode::Tag {
            self.blocks_per_iu
        } else {
            0
        }
    }
    fn md_len(&self) -> usize {
        if self.mode == PayloadMode::None {
            0
        } else {
            self.md_bytes * self.blocks_per_iu
        }
    }
}

/// One mapping unit's content on its way between host, buffer and media: one allocation
/// laid out as `[data | tags (8 bytes each, little endian) | metadata]`, holding only the parts
/// the payload mode keeps (nothing at all in mode `none`, so moving a unit costs a pointer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IuImage {
    bytes: Vec<u8>,
}

impl Shape {
    /// Bytes of one unit's image (what a slot stores beside its OOB).
    pub fn image_len(&self) -> usize {
        self.data_len() + 8 * self.tags_len() + self.md_len()
    }
    fn md_offset(&self) -> usize {
        self.data_len() + 8 * self.tags_len()
    }
}

impl IuImage {
    pub fn zeroed(s: &Shape) -> IuImage {
        IuImage { bytes: vec![0; s.image_len()] }
    }

    /// An image from bytes read back from a NAND image file (`Shape::image_len` of them).
    pub fn from_bytes(bytes: Vec<u8>) -> IuImage {
        IuImage { bytes }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn tag(&self, s: &Shape, i: usize) -> u64 {
        let o = s.data_len() + 8 * i;
        u64::from_le_bytes(self.bytes[o..o + 8].try_into().expect("8 bytes"))
    }

    /// Stores host block `i` of the unit from `src` (one block) and its metadata.
    pub fn put_block(&mut self, s: &Shape, i: usize, src: &[u8], md: Option<&[u8]>) {
        match s.mode {
            PayloadMode::Full => {
                self.bytes[i * s.block_bytes..(i + 1) * s.block_bytes].copy_from_slice(src)
            }
            PayloadMode::Tag => {
                let o = s.data_len() + 8 * i;
                self.bytes[o..o + 8].copy_from_slice(&crate::tag_of(src).to_le_bytes());
            }
            PayloadMode::None => return,
        }
        if s.md_bytes > 0 {
            let o = s.md_offset() + i * s.md_bytes;
            let dst = &mut self.bytes[o..o + s.md_bytes];
            match md {
                Some(m) => dst.copy_from_slice(m),
                None => dst.fill(0),
            }
        }
    }

    /// Copies host block `i` of the unit into `dst` (one block) and its metadata.
    pub fn get_block(&self, s: &Shape, i: usize, dst: &mut [u8], md: Option<&mut [u8]>) {
        match s.mode {
            PayloadMode::Full => {
                dst.copy_from_slice(&self.bytes[i * s.block_bytes..(i + 1) * s.block_bytes])
            }
            PayloadMode::Tag => {
                dst.fill(0);
                dst[..8].copy_from_slice(&self.tag(s, i).to_le_bytes());
            }
            PayloadMode::None => dst.fill(0),
        }
        if let Some(m) = md {
            if s.md_len() == 0 {
                m.fill(0);
            } else {
                let o = s.md_offset() + i * s.md_bytes;
                m.copy_from_slice(&self.bytes[o..o + s.md_bytes]);
            }
        }
    }

    /// The data part of the image (empty unless the payload mode is `full`).
    pub(crate) fn data_mut(&mut self, s: &Shape) -> &mut [u8] {
        &mut self.bytes[..s.data_len()]
    }

    /// Copies host block `i` of `src` into a compacted page (`super::compacted`): its data to
    /// byte `data_offset`, its tag and metadata to those of packed block `j`.
    pub(crate) fn copy_block_packed(
        &mut self,
        s: &Shape,
        j: usize,
        data_offset: usize,
        src: &IuImage,
        i: usize,
    ) {
        self.move_block(s, (j, data_offset), &src.bytes, (i, i * s.block_bytes));
    }

    /// The reverse of [`Self::copy_block_packed`]: host block `i` of this unit from packed
    /// block `j` of the compacted page `page`, whose data is at byte `data_offset`.
    pub(crate) fn copy_block_unpacked(
        &mut self,
        s: &Shape,
        i: usize,
        page: &IuImage,
        j: usize,
        data_offset: usize,
    ) {
        self.move_block(s, (i, i * s.block_bytes), &page.bytes, (j, data_offset));
    }

    /// Copies one block from `src` (block index and data offset `from`) to this image (`to`):
    /// the data in mode `full`, the tag in mode `tag`, and the host metadata. Offsets past an
    /// image's end copy nothing (a page that claims more than it holds reads as zeros).
    fn move_block(&mut self, s: &Shape, to: (usize, usize), src: &[u8], from: (usize, usize)) {
        let mut copy = |dst: usize, at: usize, n: usize| {
            if let (Some(d), Some(f)) = (self.bytes.get_mut(dst..dst + n), src.get(at..at + n)) {
                d.copy_from_slice(f);
            }
        };
        match s.mode {
            PayloadMode::Full => copy(to.1, from.1, s.block_bytes),
            PayloadMode::Tag => copy(s.data_len() + 8 * to.0, s.data_len() + 8 * from.0, 8),
            PayloadMode::None => return,
        }
        if s.md_len() > 0 {
            copy(
                s.md_offset() + to.0 * s.md_bytes,
                s.md_offset() + from.0 * s.md_bytes,
                s.md_bytes,
            );
        }
    }

    /// Copies host block `i` from `other`.
    pub fn copy_block_from(&mut self, s: &Shape, i: usize, other: &IuImage) {
        let mut copy =
            |o: usize, n: usize| self.bytes[o..o + n].copy_from_slice(&other.bytes[o..o + n]);
        match s.mode {
            PayloadMode::Full => copy(i * s.block_bytes, s.block_bytes),
            PayloadMode::Tag => copy(s.data_len() + 8 * i, 8),
            PayloadMode::None => return,
        }
        if s.md_len() > 0 {
            copy(s.md_offset() + i * s.md_bytes, s.md_bytes);
        }
    }
}

/// The OOB and payload of every slot of one line.
pub struct LineStore {
    /// Per 64 slots, two words: bit `s` of the first set when slot `s` holds the current
    /// version of its unit (volatile: rebuilt by recovery), of the second when it was written
    /// transient. Side by side so invalidating a slot touches one cache line.
    bits: Vec<u64>,
    pub lpn: Vec<u32>,
    pub seq: Vec<u64>,
    pub flags: Vec<u8>,
    /// Each slot's [`IuImage`] bytes, one after another.
    images: Vec<u8>,
    /// The sector bitmaps of MV-FTL's partial versions (WAFLASH Fig. 6's patterns), as
    /// `(slot, bitmap)` in slot order: OOB data, so it survives a power loss, and sparse,
    /// because whole-unit slots (all of them outside MV-FTL) need none. A line's slots are
    /// programmed in order, so appending keeps it sorted.
    partial: Vec<(u32, u128)>,
    /// The tables of WAFLASH's compacted pages (§3.3) in this line, as `(slot, table)` in slot
    /// order: the page header recovery reads them from (`super::compacted`), sparse like
    /// `partial`.
    compacted: Vec<(u32, Compacted)>,
    shape: Shape,
}

impl LineStore {
    pub fn new(shape: Shape, slots: u32) -> LineStore {
        let n = slots as usize;
        LineStore {
            bits: vec![0; 2 * n.div_ceil(64)],
            lpn: vec![NO_LPN; n],
            seq: vec![0; n],
            flags: vec![0; n],
            images: vec![0; n * shape.image_len()],
            partial: Vec::new(),
            compacted: Vec::new(),
            shape,
        }
    }

    /// Programs `slot` with a unit's OOB and content.
    pub fn put(&mut self, slot: u32, lpn: u32, seq: u64, flags: u8, img: &IuImage) {
        let i = slot as usize;
        self.lpn[i] = lpn;
        self.seq[i] = seq;
        self.flags[i] = flags;
        let (w, b) = (i / 64, slot % 64);
        if flags & FLAG_TRANSIENT != 0 {
            self.bits[2 * w + 1] |= 1 << b;
        } else {
            self.bits[2 * w + 1] &= !(1 << b);
        }
        let n = self.shape.image_len();
        if n > 0 {
            self.images[i * n..(i + 1) * n].copy_from_slice(&img.bytes);
        }
    }

    /// Records in `slot`'s OOB that it holds a partial version with the host blocks of
    /// `present` (MV-FTL). Slots are programmed in order, so `slot` is past every recorded one.
    pub fn set_partial(&mut self, slot: u32, present: u128) {
        debug_assert!(self.partial.last().is_none_or(|&(s, _)| s < slot), "slots out of order");
        self.partial.push((slot, present));
    }

    /// The sector bitmap of `slot` when it holds a partial version; `None` for a whole unit.
    pub fn partial_of(&self, slot: u32) -> Option<u128> {
        if self.partial.is_empty() {
            return None;
        }
        self.partial.binary_search_by_key(&slot, |&(s, _)| s).ok().map(|i| self.partial[i].1)
    }

    /// Records that `slot` holds the compacted page `table` (its slot is programmed in order,
    /// so past every recorded one).
    pub fn set_compacted(&mut self, slot: u32, table: Compacted) {
        debug_assert!(self.compacted.last().is_none_or(|(s, _)| *s < slot), "slots out of order");
        self.compacted.push((slot, table));
    }

    /// The table of `slot` when it holds a compacted page.
    pub fn compacted_of(&self, slot: u32) -> Option<&Compacted> {
        if self.compacted.is_empty() {
            return None;
        }
        let i = self.compacted.binary_search_by_key(&slot, |(s, _)| *s).ok()?;
        Some(&self.compacted[i].1)
    }

    fn compacted_mut(&mut self, slot: u32) -> Option<&mut Compacted> {
        if self.compacted.is_empty() {
            return None;
        }
        let i = self.compacted.binary_search_by_key(&slot, |(s, _)| *s).ok()?;
        Some(&mut self.compacted[i].1)
    }

    /// One unit stops using its section of the compacted page in `slot`: returns the units
    /// still using one, or `None` when `slot` is not a compacted page.
    pub fn release_compacted(&mut self, slot: u32) -> Option<u32> {
        let c = self.compacted_mut(slot)?;
        c.live = c.live.saturating_sub(1);
        Some(c.live)
    }

    /// One more unit uses its section of the compacted page in `slot` (recovery): returns the
    /// units using one now, or `None` when `slot` is not a compacted page.
    pub fn acquire_compacted(&mut self, slot: u32) -> Option<u32> {
        let c = self.compacted_mut(slot)?;
        c.live += 1;
        Some(c.live)
    }

    /// Whether `slot` holds the current version (or, in MV-FTL, a live older version) of its
    /// unit.
    pub fn is_valid(&self, slot: u32) -> bool {
        self.bits[2 * (slot as usize / 64)] & (1 << (slot % 64)) != 0
    }

    /// Marks `slot` as holding the current version of its unit.
    pub fn set_valid(&mut self, slot: u32) {
        self.bits[2 * (slot as usize / 64)] |= 1 << (slot % 64);
    }

    /// Marks `slot` stale; returns whether it had been written transient.
    pub fn clear_valid(&mut self, slot: u32) -> bool {
        let (w, b) = (slot as usize / 64, slot % 64);
        self.bits[2 * w] &= !(1 << b);
        self.bits[2 * w + 1] & (1 << b) != 0
    }

    /// Forgets which slots are valid (power loss).
    pub fn clear_all_valid(&mut self) {
        self.bits.iter_mut().step_by(2).for_each(|w| *w = 0);
        self.compacted.iter_mut().for_each(|(_, c)| c.live = 0);
    }

    /// The valid slots, in order.
    pub fn valid_slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.bits.iter().step_by(2).enumerate().flat_map(|(w, &word)| {
            let mut b = word;
            std::iter::from_fn(move || {
                if b == 0 {
                    return None;
                }
                let s = w as u32 * 64 + b.trailing_zeros();
                b &= b - 1;
                Some(s)
            })
        })
    }

    /// The content of `slot`.
    pub fn get(&self, slot: u32) -> IuImage {
        let n = self.shape.image_len();
        let i = slot as usize;
        IuImage { bytes: self.images[i * n..(i + 1) * n].to_vec() }
    }
}
