//! btrfs's blocks by structure, from its on-disk format (btrfs's documentation, "On-disk
//! format", and kernel-shared/ctree.h of btrfs-progs). Everything but file data lives in
//! B-trees of `nodesize` blocks (16 KiB by default, four device blocks), each starting with a
//! header that names its file system (fsid), its own logical address, its owner tree and its
//! level; a leaf holds items whose keys carry a type (INODE_ITEM, DIR_ITEM, EXTENT_DATA, ...).
//! Addresses are logical: the chunk tree (and, for itself, the superblock's system-chunk
//! array) maps them to device offsets, once per copy (metadata is DUP on one device).
//!
//! The classifier reads the superblock (64 KiB and its mirror at 64 MiB), maps the system
//! chunks, and from then on recognises a tree block by its header wherever it passes: the
//! fsid is the file system's and the logical address in the header maps to where the block
//! is. It labels the block's device blocks with the owner tree, and a leaf's also with the item
//! types it holds, so that a fault can target `fs-tree` or `dir-item` alike. Leaves teach it
//! more: chunk items extend the logical map, root items point at the other trees' roots (which
//! a scan then reads), and EXTENT_DATA items map file data. Scope: one device; a node's block
//! size must be a multiple of the device's.

use std::collections::{HashMap, VecDeque};

use super::Classifier;

/// Where the superblock and its first mirror are, in bytes from the start of the device.
const SUPERBLOCK_OFFSETS: [u64; 2] = [64 << 10, 64 << 20];
const MAGIC: &[u8; 8] = b"_BHRfS_M";
const HEADER_BYTES: usize = 0x65;
const ITEM_BYTES: usize = 25;
const KEY_PTR_BYTES: usize = 33;
/// The superblock's array of the system chunks, which map the chunk tree itself.
const SYS_CHUNK_ARRAY: usize = 0x32B;

// Item types (key.type).
const INODE_ITEM: u8 = 1;
const INODE_REF: u8 = 12;
const XATTR_ITEM: u8 = 24;
const DIR_ITEM: u8 = 84;
const DIR_INDEX: u8 = 96;
const EXTENT_DATA: u8 = 108;
const EXTENT_CSUM: u8 = 128;
const ROOT_ITEM: u8 = 132;
const EXTENT_ITEM: u8 = 168;
const METADATA_ITEM: u8 = 169;
const BLOCK_GROUP_ITEM: u8 = 192;
const DEV_EXTENT: u8 = 204;
const CHUNK_ITEM: u8 = 228;

/// Tree labels (by the header's owner), then item labels (by key type), in one list: a block
/// carries one tree label and, for a leaf, a set of item labels.
pub const STRUCTURES: &[&str] = &[
    "superblock",
    "root-tree",
    "extent-tree",
    "chunk-tree",
    "dev-tree",
    "fs-tree",
    "csum-tree",
    "free-space-tree",
    "uuid-tree",
    "log-tree",
    "data-reloc-tree",
    "block-group-tree",
    "other-tree",
    "data",
    // item types
    "inode-item",
    "inode-ref",
    "xattr-item",
    "dir-item",
    "dir-index",
    "extent-data",
    "extent-csum",
    "root-item",
    "extent-item",
    "block-group-item",
    "dev-extent",
    "chunk-item",
];

const FIRST_ITEM_LABEL: usize = 14;
const ITEM_TYPES: [u8; 12] = [
    INODE_ITEM,
    INODE_REF,
    XATTR_ITEM,
    DIR_ITEM,
    DIR_INDEX,
    EXTENT_DATA,
    EXTENT_CSUM,
    ROOT_ITEM,
    EXTENT_ITEM,
    BLOCK_GROUP_ITEM,
    DEV_EXTENT,
    CHUNK_ITEM,
];
const _: () = assert!(FIRST_ITEM_LABEL + ITEM_TYPES.len() == STRUCTURES.len());

/// The label of a tree, by its owner objectid.
fn tree_label(owner: u64) -> usize {
    match owner {
        1 => 1,
        2 => 2,
        3 => 3,
        4 => 4,
        5 | 256..=0xFFFF_FFFF_FFFF_FEFF => 5, // the top subvolume and every other
        7 => 6,
        10 => 7,
        9 => 8,
        0xFFFF_FFFF_FFFF_FFFA => 9,  // TREE_LOG (-6)
        0xFFFF_FFFF_FFFF_FFF7 => 10, // DATA_RELOC (-9)
        11 => 11,
        _ => 12,
    }
}

/// The bit of an item type among the item labels, if it has one.
fn item_bit(kind: u8) -> Option<u32> {
    let k = if kind == METADATA_ITEM { EXTENT_ITEM } else { kind };
    ITEM_TYPES.iter().position(|&t| t == k).map(|i| 1 << i)
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// One chunk: a logical range and the device offsets of its copies.
#[derive(Clone, Debug)]
struct Chunk {
    logical: u64,
    length: u64,
    copies: Vec<u64>,
}

/// What a device block holds: its tree (or superblock, data) label and its leaf's item types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Label {
    primary: u8,
    items: u32,
}

/// The btrfs classifier.
pub struct Btrfs {
    device_block_bytes: u64,
    fsid: Option<[u8; 16]>,
    node_bytes: u64,
    chunks: Vec<Chunk>,
    map: HashMap<u64, Label>,
    /// A tree block being assembled from its device blocks: its first block and bytes so far.
    partial: Option<(u64, Vec<u8>)>,
    /// Logical addresses of tree blocks to read once their chunk is known.
    pending: Vec<u64>,
    wanted: VecDeque<u64>,
}

impl Btrfs {
    pub fn new(device_block_bytes: u32) -> Result<Btrfs, String> {
        let bs = device_block_bytes as u64;
        if bs == 0 || !(64u64 << 10).is_multiple_of(bs) {
            return Err(format!("the btrfs classifier needs blocks that divide 64 KiB, not {bs}"));
        }
        Ok(Btrfs {
            device_block_bytes: bs,
            fsid: None,
            node_bytes: 0,
            chunks: Vec::new(),
            map: HashMap::new(),
            partial: None,
            pending: Vec::new(),
            wanted: SUPERBLOCK_OFFSETS.iter().map(|o| o / bs).collect(),
        })
    }

    fn blocks_per_node(&self) -> u64 {
        (self.node_bytes / self.device_block_bytes).max(1)
    }

    /// The device offsets of logical address `logical` (one per copy).
    fn physical(&self, logical: u64) -> Vec<u64> {
        self.chunks
            .iter()
            .filter(|c| logical >= c.logical && logical - c.logical < c.length)
            .flat_map(|c| c.copies.iter().map(move |p| p + (logical - c.logical)))
            .collect()
    }

    fn add_chunk(&mut self, logical: u64, item: &[u8]) {
        if item.len() < 48 {
            return;
        }
        let length = le64(item, 0);
        let stripes = (le16(item, 44) as usize).min((item.len() - 48) / 32);
        let copies = (0..stripes).map(|s| le64(item, 48 + s * 32 + 8)).collect();
        if !self.chunks.iter().any(|c| c.logical == logical) {
            self.chunks.push(Chunk { logical, length, copies });
        }
        // Tree blocks asked for before their chunk was known may be readable now.
        let pending = std::mem::take(&mut self.pending);
        for l in pending {
            self.want_tree_block(l);
        }
    }

    /// Asks a scan for the tree block at `logical` (every copy, every device block of it).
    fn want_tree_block(&mut self, logical: u64) {
        let copies = self.physical(logical);
        if copies.is_empty() {
            self.pending.push(logical);
            return;
        }
        let n = self.blocks_per_node();
        for p in copies {
            let first = p / self.device_block_bytes;
            self.wanted.extend(first..first + n);
        }
    }

    fn superblock(&mut self, block: &[u8], at: usize) {
        let sb = &block[at..];
        if sb.len() < SYS_CHUNK_ARRAY + 2048 || &sb[0x40..0x48] != MAGIC {
            return;
        }
        let node_bytes = le32(sb, 0x94) as u64;
        if node_bytes == 0 || !node_bytes.is_multiple_of(self.device_block_bytes) {
            return; // see the module's comment
        }
        let mut fsid = [0u8; 16];
        fsid.copy_from_slice(&sb[0x20..0x30]);
        self.fsid = Some(fsid);
        self.node_bytes = node_bytes;
        let array = &sb[SYS_CHUNK_ARRAY..SYS_CHUNK_ARRAY + (le32(sb, 0xA0) as usize).min(2048)];
        let mut i = 0;
        while i + 17 + 48 <= array.len() {
            let logical = le64(array, i + 9);
            let stripes = le16(array, i + 17 + 44) as usize;
            let end = (i + 17 + 48 + stripes * 32).min(array.len());
            self.add_chunk(logical, &array[i + 17..end]);
            i = end;
        }
        self.want_tree_block(le64(sb, 0x58)); // the chunk tree
        self.want_tree_block(le64(sb, 0x50)); // the root tree
    }

    /// A whole tree block at device block `first`: label its blocks and learn from it.
    fn tree_block(&mut self, first: u64, node: &[u8]) {
        let owner = le64(node, 0x58);
        let level = node[0x64];
        let items = (le32(node, 0x60) as usize).min(node.len() / ITEM_BYTES);
        let mut item_bits = 0u32;
        if level == 0 {
            for i in 0..items {
                let at = HEADER_BYTES + i * ITEM_BYTES;
                if at + ITEM_BYTES > node.len() {
                    break;
                }
                let (objectid, kind, offset) = (le64(node, at), node[at + 8], le64(node, at + 9));
                let data_at = HEADER_BYTES + le32(node, at + 17) as usize;
                let data_len = le32(node, at + 21) as usize;
                let Some(data) = node.get(data_at..data_at + data_len) else { continue };
                item_bits |= item_bit(kind).unwrap_or(0);
                match kind {
                    CHUNK_ITEM => self.add_chunk(offset, data),
                    // A tree's root item: its root block is at offset 176 (after the inode
                    // item, generation and root directory).
                    ROOT_ITEM if data.len() >= 184 && objectid != 0 => {
                        self.want_tree_block(le64(data, 176))
                    }
                    EXTENT_DATA if data.len() >= 53 && data[20] != 0 => {
                        // A regular or preallocated extent: disk bytenr and its length.
                        let (disk, len) = (le64(data, 21), le64(data, 29));
                        if disk != 0 {
                            self.data_extent(disk, len);
                        }
                    }
                    _ => {}
                }
            }
        } else {
            for i in 0..items.min((node.len() - HEADER_BYTES) / KEY_PTR_BYTES) {
                let at = HEADER_BYTES + i * KEY_PTR_BYTES;
                self.want_tree_block(le64(node, at + 17));
            }
        }
        let label = Label { primary: tree_label(owner) as u8, items: item_bits };
        for b in first..first + self.blocks_per_node() {
            self.map.insert(b, label);
        }
    }

    fn data_extent(&mut self, logical: u64, bytes: u64) {
        let bs = self.device_block_bytes;
        for p in self.physical(logical) {
            for b in p / bs..(p + bytes).div_ceil(bs) {
                self.map.insert(b, Label { primary: 13, items: 0 });
            }
        }
    }

    /// Whether device block `lba` starts a tree block of this file system: its header names
    /// the fsid and a logical address that maps here.
    fn starts_tree_block(&self, lba: u64, block: &[u8]) -> bool {
        let Some(fsid) = &self.fsid else { return false };
        block.len() >= HEADER_BYTES
            && &block[0x20..0x30] == fsid
            && self.physical(le64(block, 0x30)).contains(&(lba * self.device_block_bytes))
    }
}

impl Classifier for Btrfs {
    fn filesystem(&self) -> &'static str {
        "btrfs"
    }

    fn structures(&self) -> &'static [&'static str] {
        STRUCTURES
    }

    fn observe(&mut self, lba: u64, block: &[u8]) {
        let bs = self.device_block_bytes;
        for &o in &SUPERBLOCK_OFFSETS {
            if lba == o / bs {
                self.map.insert(lba, Label { primary: 0, items: 0 });
                self.superblock(block, (o % bs) as usize);
            }
        }
        // Device blocks of a tree block arrive in order (one command, or a scan's reads).
        if let Some((first, mut bytes)) = self.partial.take() {
            if lba == first + (bytes.len() as u64 / bs) {
                bytes.extend_from_slice(block);
                if bytes.len() as u64 >= self.node_bytes {
                    self.tree_block(first, &bytes);
                } else {
                    self.partial = Some((first, bytes));
                }
                return;
            }
        }
        if self.starts_tree_block(lba, block) {
            if self.node_bytes <= bs {
                self.tree_block(lba, block);
            } else {
                self.partial = Some((lba, block.to_vec()));
            }
        }
    }

    fn classify(&self, lba: u64) -> Option<&'static str> {
        self.map.get(&lba).map(|l| STRUCTURES[l.primary as usize])
    }

    fn matches(&self, lba: u64, structure: &str) -> bool {
        let Some(l) = self.map.get(&lba) else { return false };
        match STRUCTURES.iter().position(|&s| s == structure) {
            Some(i) if i >= FIRST_ITEM_LABEL => l.items & (1 << (i - FIRST_ITEM_LABEL)) != 0,
            Some(i) => l.primary as usize == i,
            None => false,
        }
    }

    fn wanted(&mut self) -> Vec<u64> {
        self.wanted.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_line_up() {
        assert_eq!(STRUCTURES[tree_label(5)], "fs-tree");
        assert_eq!(STRUCTURES[tree_label(257)], "fs-tree");
        assert_eq!(STRUCTURES[tree_label(7)], "csum-tree");
        assert_eq!(STRUCTURES[tree_label(u64::MAX - 5)], "log-tree");
        assert_eq!(STRUCTURES[13], "data");
        let dir = item_bit(DIR_ITEM).unwrap().trailing_zeros() as usize;
        assert_eq!(STRUCTURES[FIRST_ITEM_LABEL + dir], "dir-item");
        assert_eq!(item_bit(METADATA_ITEM), item_bit(EXTENT_ITEM));
    }
}
