//! xfs's blocks by structure, from its on-disk format (the kernel's
//! Documentation/filesystems/xfs/ and fs/xfs/libxfs/xfs_format.h). Version 5 file systems
//! (the default since xfsprogs 3.2.3) put a magic number at the start of every metadata block,
//! so most blocks name themselves; the rest come from the superblock (the log) and from the
//! inodes (their extents map directory blocks and file data):
//!
//! - every allocation group starts with its headers: superblock, AGF, AGI and AGFL, in one
//!   block when sectors are 512 bytes;
//! - the AGI's inode btree leads to the inode chunks, which a scan reads to find the extents
//!   of every inode in use (in the inode, or in bmap btree blocks for files with many);
//! - a directory's extents are directory blocks (data, leaf, node and free-index blocks alike),
//!   a regular file's or symlink's are data.
//!
//! Scope: the file system's block size must equal the device's; version 4 file systems (no
//! magic on directory blocks) are classified by their headers and inodes only; the realtime
//! device and external logs are not followed.

use std::collections::{HashMap, VecDeque};

use super::Classifier;

const SB_MAGIC: u32 = 0x5846_5342; // "XFSB"
const INODE_MAGIC: u16 = 0x494E; // "IN"
/// Bytes of a version 3 inode's core; the data fork follows.
const INODE_CORE_V3: usize = 176;
const S_IFMT: u16 = 0xF000;
const S_IFDIR: u16 = 0x4000;
const FORMAT_EXTENTS: u8 = 2;
const FORMAT_BTREE: u8 = 3;
/// A long-form (bmap) btree block's header bytes; a short-form (per-AG) one's.
const LONG_BTREE_HEADER: usize = 72;
const SHORT_BTREE_HEADER: usize = 56;
/// Inodes per inode chunk.
const CHUNK_INODES: u64 = 64;

/// The structures, in the order of `STRUCTURES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    AgHeaders,
    FreeBtree,
    InodeBtree,
    RmapBtree,
    RefcountBtree,
    BmapBtree,
    Inode,
    Dir,
    Attr,
    Symlink,
    Log,
    Data,
}

/// The names a fault's `structure` may take on an xfs layer.
pub const STRUCTURES: &[&str] = &[
    "ag-headers",
    "free-btree",
    "inode-btree",
    "rmap-btree",
    "refcount-btree",
    "bmap-btree",
    "inode",
    "dir",
    "attr",
    "symlink",
    "log",
    "data",
];

impl Kind {
    fn name(self) -> &'static str {
        STRUCTURES[self as usize]
    }
}

/// The kind a block names by its magic number, if it does.
fn by_magic(block: &[u8]) -> Option<Kind> {
    let m32 = be32(block, 0);
    let kind = match &m32.to_be_bytes() {
        b"XFSB" | b"XAGF" | b"XAGI" | b"XAFL" => Kind::AgHeaders,
        b"AB3B" | b"AB3C" => Kind::FreeBtree,
        b"IAB3" | b"FIB3" => Kind::InodeBtree,
        b"RMB3" => Kind::RmapBtree,
        b"R3FC" => Kind::RefcountBtree,
        b"BMA3" => Kind::BmapBtree,
        b"XDB3" | b"XDD3" | b"XDF3" => Kind::Dir,
        b"XSLM" => Kind::Symlink,
        _ => {
            // Directory and attribute btree blocks keep a 16-bit magic after two sibling
            // pointers (struct xfs_da3_blkinfo).
            return match be16(block, 8) {
                0x3DF1 | 0x3DFF => Some(Kind::Dir),
                0x3BEE => Some(Kind::Attr),
                _ if be16(block, 0) == INODE_MAGIC && block[4] == 3 => Some(Kind::Inode),
                _ => None,
            };
        }
    };
    Some(kind)
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// What the primary superblock says.
#[derive(Clone, Debug)]
struct Geometry {
    block_bytes: u64,
    blocks: u64,
    ag_blocks: u64,
    ag_count: u64,
    ag_block_log: u32,
    inode_bytes: u64,
    sector_bytes: u64,
}

impl Geometry {
    /// Device blocks at the start of each AG that hold its four header sectors.
    fn header_blocks(&self) -> u64 {
        (4 * self.sector_bytes).div_ceil(self.block_bytes)
    }

    /// A file-system block number (AG number in the high bits) as a device block.
    fn lba(&self, fsblock: u64) -> u64 {
        let ag = fsblock >> self.ag_block_log;
        let agbno = fsblock & ((1u64 << self.ag_block_log) - 1);
        ag * self.ag_blocks + agbno
    }
}

/// The xfs classifier.
pub struct Xfs {
    device_block_bytes: u64,
    geometry: Option<Geometry>,
    map: HashMap<u64, Kind>,
    /// What a bmap btree block's leaves map (directory or data blocks).
    bmap_leaves: HashMap<u64, Kind>,
    wanted: VecDeque<u64>,
}

impl Xfs {
    pub fn new(device_block_bytes: u32) -> Result<Xfs, String> {
        if device_block_bytes < 512 {
            return Err(format!(
                "the xfs classifier needs 512-byte blocks or larger, not {device_block_bytes}"
            ));
        }
        Ok(Xfs {
            device_block_bytes: device_block_bytes as u64,
            geometry: None,
            map: HashMap::new(),
            bmap_leaves: HashMap::new(),
            wanted: VecDeque::from([0]),
        })
    }

    fn mark(&mut self, lba: u64, kind: Kind) {
        if self.geometry.as_ref().is_none_or(|g| lba < g.blocks) {
            self.map.insert(lba, kind);
        }
    }

    fn superblock(&mut self, block: &[u8]) {
        if be32(block, 0) != SB_MAGIC {
            return;
        }
        let block_bytes = be32(block, 4) as u64;
        if block_bytes != self.device_block_bytes {
            return; // see the module's comment
        }
        let g = Geometry {
            block_bytes,
            blocks: be64(block, 8),
            ag_blocks: (be32(block, 84) as u64).max(1),
            ag_count: be32(block, 88) as u64,
            ag_block_log: block[124] as u32,
            inode_bytes: (be16(block, 104) as u64).max(256),
            sector_bytes: (be16(block, 102) as u64).max(512),
        };
        let log_start = be64(block, 48);
        let log_blocks = be32(block, 96) as u64;
        self.geometry = Some(g.clone());
        if log_start != 0 {
            let first = g.lba(log_start);
            for b in first..first + log_blocks {
                self.mark(b, Kind::Log);
            }
        }
        for ag in 0..g.ag_count {
            for b in 0..g.header_blocks() {
                self.mark(ag * g.ag_blocks + b, Kind::AgHeaders);
                self.wanted.push_back(ag * g.ag_blocks + b);
            }
        }
    }

    /// An AG header block: from the AGF (the second sector), the roots of the free-space,
    /// reverse-mapping and refcount btrees; from the AGI (the third), the inode btree's root.
    fn ag_headers(&mut self, lba: u64, block: &[u8]) {
        let Some(g) = self.geometry.clone() else { return };
        let ag = lba / g.ag_blocks;
        if let Some(agf) = (0..block.len().saturating_sub(96))
            .step_by(g.sector_bytes as usize)
            .find(|&at| &block[at..at + 4] == b"XAGF")
        {
            for (at, kind) in [
                (16, Kind::FreeBtree),
                (20, Kind::FreeBtree),
                (24, Kind::RmapBtree),
                (88, Kind::RefcountBtree),
            ] {
                let root = be32(block, agf + at) as u64;
                if root != 0 && root < g.ag_blocks {
                    self.mark(ag * g.ag_blocks + root, kind);
                }
            }
        }
        let Some(agi) = (0..block.len().saturating_sub(28))
            .step_by(g.sector_bytes as usize)
            .find(|&at| &block[at..at + 4] == b"XAGI")
        else {
            return;
        };
        let root = be32(block, agi + 20) as u64;
        if root != 0 {
            self.wanted.push_back(ag * g.ag_blocks + root);
        }
    }

    /// An inode btree block: its children, or (in a leaf) the inode chunks it records.
    fn inode_btree(&mut self, lba: u64, block: &[u8]) {
        let Some(g) = self.geometry.clone() else { return };
        if &block[0..4] != b"IAB3" {
            return; // the free-inode btree repeats what the inode btree says
        }
        let ag = lba / g.ag_blocks;
        let level = be16(block, 4);
        let records = be16(block, 6) as usize;
        let per_block = g.block_bytes / g.inode_bytes;
        if level == 0 {
            for r in 0..records.min((block.len() - SHORT_BTREE_HEADER) / 16) {
                let start_inode = be32(block, SHORT_BTREE_HEADER + r * 16) as u64;
                let first = ag * g.ag_blocks + start_inode / per_block;
                let chunk_blocks = CHUNK_INODES.div_ceil(per_block);
                self.wanted.extend(first..first + chunk_blocks);
            }
        } else {
            let max = (block.len() - SHORT_BTREE_HEADER) / 8;
            for r in 0..records.min(max) {
                let ptr = be32(block, SHORT_BTREE_HEADER + max * 4 + r * 4) as u64;
                self.wanted.push_back(ag * g.ag_blocks + ptr);
            }
        }
    }

    /// A block of inodes: the extents of each inode in use.
    fn inodes(&mut self, block: &[u8]) {
        let Some(g) = self.geometry.clone() else { return };
        for raw in block.chunks_exact(g.inode_bytes as usize) {
            if be16(raw, 0) != INODE_MAGIC || raw[4] < 3 {
                continue;
            }
            let mode = be16(raw, 2);
            if mode == 0 {
                continue; // free
            }
            let leaf = if mode & S_IFMT == S_IFDIR { Kind::Dir } else { Kind::Data };
            let fork_offset = raw[82] as usize * 8;
            let fork_end = if fork_offset > 0 { INODE_CORE_V3 + fork_offset } else { raw.len() }
                .min(raw.len());
            let fork = &raw[INODE_CORE_V3..fork_end];
            match raw[5] {
                FORMAT_EXTENTS => {
                    let n = (be32(raw, 76) as usize).min(fork.len() / 16);
                    self.extents(&fork[..n * 16], leaf);
                }
                FORMAT_BTREE if fork.len() >= 4 => {
                    // The root in the inode: level, record count, keys, then pointers.
                    let records = be16(fork, 2) as usize;
                    let max = (fork.len() - 4) / 16;
                    for r in 0..records.min(max) {
                        let ptr = g.lba(be64(fork, 4 + max * 8 + r * 8));
                        self.mark(ptr, Kind::BmapBtree);
                        self.bmap_leaves.insert(ptr, leaf);
                        self.wanted.push_back(ptr);
                    }
                }
                _ => {} // local: the data lives in the inode
            }
        }
    }

    /// Packed extent records (128 bits each: flag, offset, start block, length).
    fn extents(&mut self, records: &[u8], leaf: Kind) {
        let Some(g) = self.geometry.clone() else { return };
        for r in records.chunks_exact(16) {
            let (hi, lo) = (be64(r, 0), be64(r, 8));
            let start = ((hi & 0x1FF) << 43) | (lo >> 21);
            let length = lo & 0x1F_FFFF;
            let first = g.lba(start);
            if first + length <= g.blocks {
                for b in first..first + length {
                    self.mark(b, leaf);
                }
            }
        }
    }

    /// A bmap btree block: its records (leaves) or children.
    fn bmap_btree(&mut self, lba: u64, block: &[u8]) {
        let Some(g) = self.geometry.clone() else { return };
        let leaf = self.bmap_leaves.get(&lba).copied().unwrap_or(Kind::Data);
        let level = be16(block, 4);
        let records = be16(block, 6) as usize;
        let body = &block[LONG_BTREE_HEADER..];
        if level == 0 {
            let n = records.min(body.len() / 16);
            self.extents(&body[..n * 16], leaf);
        } else {
            let max = body.len() / 16;
            for r in 0..records.min(max) {
                let ptr = g.lba(be64(body, max * 8 + r * 8));
                self.mark(ptr, Kind::BmapBtree);
                self.bmap_leaves.insert(ptr, leaf);
                self.wanted.push_back(ptr);
            }
        }
    }
}

impl Classifier for Xfs {
    fn filesystem(&self) -> &'static str {
        "xfs"
    }

    fn structures(&self) -> &'static [&'static str] {
        STRUCTURES
    }

    fn observe(&mut self, lba: u64, block: &[u8]) {
        if block.len() < 64 {
            return;
        }
        if lba == 0 {
            self.superblock(block);
        }
        if self.geometry.is_none() {
            return;
        }
        // A block that names itself is what it says; a known log block stays log (a log
        // record may start with anything the file system logged).
        let known = self.map.get(&lba).copied();
        let kind = match (known, by_magic(block)) {
            (Some(Kind::Log), _) => return,
            (_, Some(k)) => k,
            (Some(k), None) => k,
            (None, None) => return,
        };
        self.mark(lba, kind);
        match kind {
            Kind::AgHeaders => self.ag_headers(lba, block),
            Kind::InodeBtree => self.inode_btree(lba, block),
            Kind::Inode => self.inodes(block),
            Kind::BmapBtree => self.bmap_btree(lba, block),
            _ => {}
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
    fn blocks_name_themselves_by_magic() {
        let mut b = vec![0u8; 4096];
        for (magic, kind) in
            [(b"AB3C", Kind::FreeBtree), (b"IAB3", Kind::InodeBtree), (b"XDD3", Kind::Dir)]
        {
            b[0..4].copy_from_slice(magic);
            assert_eq!(by_magic(&b), Some(kind));
        }
        b[0..4].copy_from_slice(&[0, 0, 0, 0]);
        b[8..10].copy_from_slice(&0x3DF1u16.to_be_bytes());
        assert_eq!(by_magic(&b), Some(Kind::Dir));
        assert_eq!(STRUCTURES.len(), Kind::Data as usize + 1);
    }

    #[test]
    fn extent_records_unpack() {
        // Start block 32792, 74 blocks, at file offset 0 (xfs_db: "startblock 32792 count 74").
        let mut x = Xfs::new(4096).unwrap();
        x.geometry = Some(Geometry {
            block_bytes: 4096,
            blocks: 131072,
            ag_blocks: 32768,
            ag_count: 4,
            ag_block_log: 15,
            inode_bytes: 512,
            sector_bytes: 512,
        });
        let start = 32792u64;
        let hi = start >> 43;
        let lo = (start << 21) | 74;
        let mut rec = hi.to_be_bytes().to_vec();
        rec.extend(lo.to_be_bytes());
        x.extents(&rec, Kind::Data);
        assert_eq!(x.classify(32792), Some("data"));
        assert_eq!(x.classify(32792 + 73), Some("data"));
        assert_eq!(x.classify(32792 + 74), None);
    }
}
