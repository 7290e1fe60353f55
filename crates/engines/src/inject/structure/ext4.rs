//! ext4's blocks by structure, from its on-disk format (the kernel's
//! Documentation/filesystems/ext4/, "Data Structures and Algorithms"): the superblock at byte
//! 1024 gives the geometry and where the group descriptors are; each descriptor gives its
//! group's block bitmap, inode bitmap and inode table; each inode in use gives its extent
//! tree (in `i_block`, deeper levels in extent blocks) or, without the extents flag, its
//! direct and indirect block pointers; the blocks an inode maps are directory blocks for a
//! directory, the journal for the journal inode, file data otherwise. The journal's own
//! blocks are also recognised by the jbd2 magic, wherever they are.
//!
//! Scope: the file system's block size must equal the device's (ext4's 4 KiB on flashrig's
//! 4 KiB blocks, what mkfs.ext4 chooses on a device of that size); `meta_bg` group-descriptor
//! layouts and the contents of indirect blocks are not followed (modern ext4 uses extents).
//! Structures it does not know stay unclassified rather than guessed.

use std::collections::{HashMap, VecDeque};

use super::Classifier;

/// Where the superblock starts, in bytes from the start of the device.
const SUPERBLOCK_OFFSET: usize = 1024;
const SUPERBLOCK_MAGIC: u16 = 0xEF53;
const EXTENT_MAGIC: u16 = 0xF30A;
/// jbd2's block header magic (big-endian), on its descriptor, commit and revoke blocks and
/// its superblock.
const JBD2_MAGIC: u32 = 0xC03B_3998;
const EXTENTS_FL: u32 = 0x8_0000;
const INLINE_DATA_FL: u32 = 0x1000_0000;
const INCOMPAT_64BIT: u32 = 0x80;
const RO_COMPAT_SPARSE_SUPER: u32 = 0x1;
/// `bg_flags`: the group's inode table was never initialised.
const BG_INODE_UNINIT: u16 = 0x1;
const S_IFMT: u16 = 0xF000;
const S_IFDIR: u16 = 0x4000;
const S_IFLNK: u16 = 0xA000;
/// `i_block` holds 60 bytes: an extent tree's root, 15 block pointers, or a short symlink.
const I_BLOCK_OFFSET: usize = 0x28;
const I_BLOCK_BYTES: usize = 60;
const ROOT_INODE: u64 = 2;

/// The structures, in the order of `STRUCTURES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Superblock,
    GroupDesc,
    ReservedGdt,
    BlockBitmap,
    InodeBitmap,
    Inode,
    Extent,
    Dir,
    Data,
    Journal,
    Indirect,
}

/// The names a fault's `structure` may take on an ext4 layer.
pub const STRUCTURES: &[&str] = &[
    "superblock",
    "group-desc",
    "reserved-gdt",
    "block-bitmap",
    "inode-bitmap",
    "inode",
    "extent",
    "dir",
    "data",
    "journal",
    "indirect",
];

impl Kind {
    fn name(self) -> &'static str {
        STRUCTURES[self as usize]
    }
}

/// What the superblock says.
#[derive(Clone, Debug)]
struct Geometry {
    block_bytes: u64,
    blocks: u64,
    first_data_block: u64,
    blocks_per_group: u64,
    inodes_per_group: u64,
    inode_bytes: u64,
    desc_bytes: u64,
    groups: u64,
    gdt_blocks: u64,
    journal_inode: u64,
    first_inode: u64,
}

impl Geometry {
    fn inode_table_blocks(&self) -> u64 {
        (self.inodes_per_group * self.inode_bytes).div_ceil(self.block_bytes)
    }
}

/// The ext4 classifier.
pub struct Ext4 {
    device_block_bytes: u64,
    geometry: Option<Geometry>,
    map: HashMap<u64, Kind>,
    /// For each extent-tree block, what its leaves map (directory, data or journal blocks).
    extent_leaves: HashMap<u64, Kind>,
    /// Each group's inode table: first block and length.
    inode_tables: Vec<(u64, u64)>,
    wanted: VecDeque<u64>,
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl Ext4 {
    pub fn new(device_block_bytes: u32) -> Result<Ext4, String> {
        if (device_block_bytes as usize) < SUPERBLOCK_OFFSET * 2 {
            return Err(format!(
                "the ext4 classifier needs device blocks of at least 2048 bytes, not {device_block_bytes}"
            ));
        }
        Ok(Ext4 {
            device_block_bytes: device_block_bytes as u64,
            geometry: None,
            map: HashMap::new(),
            extent_leaves: HashMap::new(),
            inode_tables: Vec::new(),
            wanted: VecDeque::from([0]),
        })
    }

    fn mark(&mut self, block: u64, kind: Kind) {
        if self.geometry.as_ref().is_some_and(|g| block < g.blocks) {
            self.map.insert(block, kind);
        }
    }

    /// Reads the superblock in device block 0 (at byte 1024) and lays out what follows from it.
    fn superblock(&mut self, block: &[u8]) {
        let sb = &block[SUPERBLOCK_OFFSET..SUPERBLOCK_OFFSET + 1024];
        if le16(sb, 0x38) != SUPERBLOCK_MAGIC {
            return;
        }
        let block_bytes = 1024u64 << le32(sb, 0x18).min(16);
        if block_bytes != self.device_block_bytes {
            // Another block size: the file system's blocks are not the device's, and this
            // classifier does not split or join them (see the module's comment).
            return;
        }
        let incompat = le32(sb, 0x60);
        let is_64bit = incompat & INCOMPAT_64BIT != 0;
        let blocks =
            le32(sb, 0x4) as u64 | if is_64bit { (le32(sb, 0x150) as u64) << 32 } else { 0 };
        let first_data_block = le32(sb, 0x14) as u64;
        let blocks_per_group = (le32(sb, 0x20) as u64).max(1);
        let rev = le32(sb, 0x4C);
        let (inode_bytes, first_inode) =
            if rev == 0 { (128, 11) } else { (le16(sb, 0x58) as u64, le32(sb, 0x54) as u64) };
        let desc_bytes = if is_64bit { (le16(sb, 0xFE) as u64).max(32) } else { 32 };
        let groups = blocks.saturating_sub(first_data_block).div_ceil(blocks_per_group);
        let g = Geometry {
            block_bytes,
            blocks,
            first_data_block,
            blocks_per_group,
            inodes_per_group: le32(sb, 0x28) as u64,
            inode_bytes: inode_bytes.max(128),
            desc_bytes,
            groups,
            gdt_blocks: (groups * desc_bytes).div_ceil(block_bytes),
            journal_inode: le32(sb, 0xE0) as u64,
            first_inode,
        };
        let sparse = le32(sb, 0x64) & RO_COMPAT_SPARSE_SUPER != 0;
        let reserved_gdt = le16(sb, 0xCE) as u64;
        let gdt_blocks = g.gdt_blocks;
        self.geometry = Some(g.clone());
        // The superblock and its backups, each followed by a copy of the descriptors and the
        // blocks reserved for growing them.
        for group in 0..g.groups {
            if sparse && !has_backup(group) {
                continue;
            }
            let base = first_data_block + group * g.blocks_per_group;
            self.mark(base, Kind::Superblock);
            for b in 0..gdt_blocks {
                self.mark(base + 1 + b, Kind::GroupDesc);
            }
            for b in 0..reserved_gdt {
                self.mark(base + 1 + gdt_blocks + b, Kind::ReservedGdt);
            }
        }
        self.wanted.extend((0..gdt_blocks).map(|b| first_data_block + 1 + b));
    }

    /// A block of the primary group descriptor table: each group's bitmaps and inode table.
    fn descriptors(&mut self, lba: u64, block: &[u8]) {
        let Some(g) = self.geometry.clone() else { return };
        let Some(index) = lba.checked_sub(g.first_data_block + 1) else { return };
        if index >= g.gdt_blocks {
            return; // a backup copy: the primary says the same
        }
        let per_block = g.block_bytes / g.desc_bytes;
        let long = g.desc_bytes >= 64;
        let hi = |d: &[u8], at: usize| if long { (le32(d, at) as u64) << 32 } else { 0 };
        let table_blocks = g.inode_table_blocks();
        if self.inode_tables.len() < g.groups as usize {
            self.inode_tables.resize(g.groups as usize, (0, 0));
        }
        for i in 0..per_block {
            let group = index * per_block + i;
            if group >= g.groups {
                break;
            }
            let d = &block[(i * g.desc_bytes) as usize..((i + 1) * g.desc_bytes) as usize];
            let block_bitmap = le32(d, 0x0) as u64 | hi(d, 0x20);
            let inode_bitmap = le32(d, 0x4) as u64 | hi(d, 0x24);
            let inode_table = le32(d, 0x8) as u64 | hi(d, 0x28);
            let unused = le16(d, 0x1C) as u64 | if long { (le16(d, 0x32) as u64) << 16 } else { 0 };
            let flags = le16(d, 0x12);
            self.mark(block_bitmap, Kind::BlockBitmap);
            self.mark(inode_bitmap, Kind::InodeBitmap);
            for b in 0..table_blocks {
                self.mark(inode_table + b, Kind::Inode);
            }
            self.inode_tables[group as usize] = (inode_table, table_blocks);
            // Only the part of the table that has held inodes is worth reading.
            let used = if flags & BG_INODE_UNINIT != 0 {
                0
            } else {
                g.inodes_per_group.saturating_sub(unused)
            };
            let used_blocks = (used * g.inode_bytes).div_ceil(g.block_bytes).min(table_blocks);
            self.wanted.extend((0..used_blocks).map(|b| inode_table + b));
        }
    }

    /// A block of an inode table: what each inode in use maps.
    fn inodes(&mut self, lba: u64, block: &[u8]) {
        let Some(g) = self.geometry.clone() else { return };
        let Some((group, &(start, _))) = self
            .inode_tables
            .iter()
            .enumerate()
            .find(|(_, &(start, len))| len > 0 && lba >= start && lba < start + len)
        else {
            return;
        };
        let per_block = g.block_bytes / g.inode_bytes;
        for i in 0..per_block {
            let number = group as u64 * g.inodes_per_group + (lba - start) * per_block + i + 1;
            // Reserved inodes other than the root and the journal (the resize inode's block
            // map points at the reserved descriptor blocks, already laid out) are skipped.
            if number != ROOT_INODE && number != g.journal_inode && number < g.first_inode {
                continue;
            }
            let raw = &block[(i * g.inode_bytes) as usize..((i + 1) * g.inode_bytes) as usize];
            let mode = le16(raw, 0x0);
            if mode == 0 || le16(raw, 0x1A) == 0 {
                continue; // free, or deleted
            }
            let flags = le32(raw, 0x20);
            let size = le32(raw, 0x4) as u64 | (le32(raw, 0x6C) as u64) << 32;
            let leaf = if number == g.journal_inode {
                Kind::Journal
            } else if mode & S_IFMT == S_IFDIR {
                Kind::Dir
            } else {
                Kind::Data
            };
            let i_block = &raw[I_BLOCK_OFFSET..I_BLOCK_OFFSET + I_BLOCK_BYTES];
            if flags & INLINE_DATA_FL != 0 || (mode & S_IFMT == S_IFLNK && size < 60) {
                continue; // the data lives in the inode itself
            }
            if flags & EXTENTS_FL != 0 {
                self.extent_node(i_block, leaf);
            } else {
                for j in 0..15 {
                    let b = le32(i_block, j * 4) as u64;
                    if b != 0 {
                        self.mark(b, if j < 12 { leaf } else { Kind::Indirect });
                    }
                }
            }
        }
    }

    /// An extent-tree node (the root in `i_block`, or an extent block): leaves map `leaf`
    /// blocks, index entries point at deeper extent blocks.
    fn extent_node(&mut self, node: &[u8], leaf: Kind) {
        if node.len() < 12 || le16(node, 0) != EXTENT_MAGIC {
            return;
        }
        let entries = (le16(node, 2) as usize).min((node.len() - 12) / 12);
        let depth = le16(node, 6);
        for e in 0..entries {
            let x = &node[12 + e * 12..24 + e * 12];
            if depth == 0 {
                let raw_len = le16(x, 4) as u64;
                // Lengths above 32768 mark unwritten (preallocated) extents.
                let len = if raw_len > 32768 { raw_len - 32768 } else { raw_len };
                let start = le32(x, 8) as u64 | (le16(x, 6) as u64) << 32;
                if self.geometry.as_ref().is_some_and(|g| start + len <= g.blocks) {
                    for b in start..start + len {
                        self.mark(b, leaf);
                    }
                }
            } else {
                let child = le32(x, 4) as u64 | (le16(x, 8) as u64) << 32;
                self.mark(child, Kind::Extent);
                self.extent_leaves.insert(child, leaf);
                self.wanted.push_back(child);
            }
        }
    }
}

/// Groups that hold a superblock backup with `sparse_super`: 0, 1 and powers of 3, 5 and 7.
fn has_backup(group: u64) -> bool {
    if group <= 1 {
        return true;
    }
    [3u64, 5, 7].iter().any(|&p| {
        let mut x = p;
        while x < group {
            x *= p;
        }
        x == group
    })
}

impl Classifier for Ext4 {
    fn filesystem(&self) -> &'static str {
        "ext4"
    }

    fn structures(&self) -> &'static [&'static str] {
        STRUCTURES
    }

    fn observe(&mut self, lba: u64, block: &[u8]) {
        if lba == 0 {
            self.superblock(block);
        }
        match self.map.get(&lba) {
            Some(Kind::GroupDesc) => self.descriptors(lba, block),
            Some(Kind::Inode) => self.inodes(lba, block),
            Some(Kind::Extent) => {
                let leaf = self.extent_leaves.get(&lba).copied().unwrap_or(Kind::Data);
                self.extent_node(block, leaf);
            }
            Some(_) => {}
            None => {
                if self.geometry.is_some()
                    && block.len() >= 8
                    && u32::from_be_bytes(block[0..4].try_into().expect("4 bytes")) == JBD2_MAGIC
                {
                    self.mark(lba, Kind::Journal);
                }
            }
        }
    }

    fn classify(&self, lba: u64) -> Option<&'static str> {
        self.map.get(&lba).map(|k| k.name())
    }

    fn wanted(&mut self) -> Vec<u64> {
        self.wanted.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backups_sit_in_groups_zero_one_and_powers_of_three_five_seven() {
        let with: Vec<u64> = (0..60).filter(|&g| has_backup(g)).collect();
        assert_eq!(with, [0, 1, 3, 5, 7, 9, 25, 27, 49]);
    }

    #[test]
    fn the_names_follow_the_kinds() {
        assert_eq!(Kind::Superblock.name(), "superblock");
        assert_eq!(Kind::Indirect.name(), "indirect");
        assert_eq!(Kind::Journal.name(), "journal");
        assert_eq!(STRUCTURES.len(), Kind::Indirect as usize + 1);
    }
}
