//! Structure-aware targeting: which file-system structure each block holds, learned from the
//! blocks as they pass through the `inject` layer (jaffer-thesis-2023.txt §2.4.5: "put logic
//! inside our module to interpret blocks as requests pass through it").
//!
//! A classifier parses a file system's on-disk format from the blocks it is shown, written or
//! read, and keeps a map of block to structure: the superblock says where the group
//! descriptors are, the descriptors where the bitmaps and inode tables are, the inodes which
//! blocks are directory blocks, extent-tree blocks, the journal or file data. A layer over an
//! image that already holds a file system first reads what its classifier asks for (`scan`),
//! so it knows the image before the file system above mounts it; after that, it follows what
//! the file system writes. One file per file system.

pub mod btrfs;
pub mod ext4;
pub mod xfs;

/// A file system's block classifier.
pub trait Classifier: Send {
    /// The file system's name (`ext4`).
    fn filesystem(&self) -> &'static str;

    /// The structure names this classifier can give, for checking a fault's target.
    fn structures(&self) -> &'static [&'static str];

    /// Learns from the contents of device block `lba` (one block of the device's size), as it
    /// was written or read.
    fn observe(&mut self, lba: u64, block: &[u8]);

    /// The structure block `lba` holds, as far as the classifier knows.
    fn classify(&self, lba: u64) -> Option<&'static str>;

    /// Whether block `lba` holds `structure`. A block has one structure in ext4 and xfs; a
    /// btrfs leaf also holds items of several types, each a structure a fault can target.
    fn matches(&self, lba: u64, structure: &str) -> bool {
        self.classify(lba) == Some(structure)
    }

    /// Device blocks the classifier would read next to complete its map (a scan reads them
    /// and shows them to [`Classifier::observe`] until none is left).
    fn wanted(&mut self) -> Vec<u64>;
}

/// The file systems with a classifier.
pub const FILESYSTEMS: &[&str] = &["ext4", "xfs", "btrfs"];

/// The classifier of `filesystem` for a device of `block_size`-byte blocks.
pub fn classifier(filesystem: &str, block_size: u32) -> Result<Box<dyn Classifier>, String> {
    match filesystem {
        "ext4" => Ok(Box::new(ext4::Ext4::new(block_size)?)),
        "xfs" => Ok(Box::new(xfs::Xfs::new(block_size)?)),
        "btrfs" => Ok(Box::new(btrfs::Btrfs::new(block_size)?)),
        other => Err(format!(
            "filesystem = \"{other}\": no classifier; one of {}",
            FILESYSTEMS.join(", ")
        )),
    }
}
