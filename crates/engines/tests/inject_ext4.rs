//! Goal: the `inject` layer's ext4 classifier names each block of a real ext4 image as e2fsprogs
//! does (superblocks and their backups, group descriptors, reserved descriptor blocks, block and
//! inode bitmaps, inode tables, directory blocks, file data, an extent-tree block, the
//! journal), both when it scans an existing image and when it only sees the image written
//! through it; and a fault aimed at a structure ("the second write to an inode block") hits
//! that block and no other, with the structure in its log record.
//!
//! Method: mkfs.ext4 makes a 256 MiB image (two block groups) in a scratch directory and
//! debugfs populates it without mounting (nested directories, a 300 KB file, a small file, a
//! symlink, and a sparse file of ten 4 KiB pieces, whose five-plus extents need an extent
//! block). The expected structure of each block comes from dumpe2fs (group layout) and debugfs
//! (`blocks` of each path, `ex` for the extent block, the journal inode's blocks). The image is
//! loaded into a RAM device; the layer over it either scans it or receives it as writes in
//! block order, on the simulated runtime. Skips, saying why, when e2fsprogs is not installed.

use std::sync::Arc;

use flashrig_blockdev::DevRef;
use flashrig_devices::RamDevice;
use flashrig_engines::inject::{structure, FaultConfig, Inject, InjectionLog};

mod fsimage;
use fsimage::{check_scan, check_written, have_all, read_block, tool, Image, Scratch, BS};

/// Numbers in "A-B" or "A" form, as a range.
fn span(text: &str) -> std::ops::RangeInclusive<u64> {
    let t = text.trim().trim_end_matches(',');
    match t.split_once('-') {
        Some((a, b)) => a.trim().parse().unwrap()..=b.trim().parse().unwrap(),
        None => {
            let n: u64 = t.parse().unwrap_or_else(|_| panic!("not a block number: {t:?}"));
            n..=n
        }
    }
}

/// The number or range following `key` in a dumpe2fs line.
fn after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = &line[line.find(key)? + key.len()..];
    rest.split([' ', ',', '(']).find(|w| !w.is_empty())
}

fn make_image() -> Option<Image> {
    if !have_all(&["mkfs.ext4", "debugfs", "dumpe2fs"]) {
        return None;
    }
    let dir = Scratch::new("ext4");
    let img = dir.0.join("ext4.img");
    let img_s = img.to_str().unwrap();
    std::fs::File::create(&img).unwrap().set_len(256 << 20).unwrap();
    tool("mkfs.ext4", &["-q", "-F", "-b", "4096", img_s], None);
    let big = dir.0.join("big");
    std::fs::write(&big, (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>()).unwrap();
    let small = dir.0.join("small");
    std::fs::write(&small, b"hi\n").unwrap();
    let sparse = dir.0.join("sparse");
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::File::create(&sparse).unwrap();
        for i in 0..10u64 {
            f.seek(SeekFrom::Start(i * 65536)).unwrap();
            f.write_all(&[b'x'; 4096]).unwrap();
        }
    }
    let script = format!(
        "mkdir d1\nmkdir d1/d2\nwrite {} d1/big\nwrite {} small\nwrite {} sparse\nsymlink lnk /d1/big\n",
        big.display(),
        small.display(),
        sparse.display()
    );
    tool("debugfs", &["-w", "-f", "-", img_s], Some(&script));
    let mut expected = Vec::new();
    let mut add = |r: std::ops::RangeInclusive<u64>, s: &'static str| {
        expected.extend(r.map(|b| (b, s)));
    };
    for line in tool("dumpe2fs", &[img_s], None).lines() {
        if let Some(n) = after(line, "superblock at ") {
            add(span(n), "superblock");
        }
        if let Some(n) = after(line, "Group descriptors at ") {
            add(span(n), "group-desc");
        }
        if let Some(n) = after(line, "Reserved GDT blocks at ") {
            add(span(n), "reserved-gdt");
        }
        if let Some(n) = after(line, "Block bitmap at ") {
            add(span(n), "block-bitmap");
        }
        if let Some(n) = after(line, "Inode bitmap at ") {
            add(span(n), "inode-bitmap");
        }
        if let Some(n) = after(line, "Inode table at ") {
            add(span(n), "inode");
        }
    }
    let blocks = |path: &str| -> Vec<u64> {
        tool("debugfs", &["-R", &format!("blocks {path}"), img_s], None)
            .split_whitespace()
            .map(|w| w.parse().unwrap())
            .collect()
    };
    for (path, s) in [
        ("/", "dir"),
        ("d1", "dir"),
        ("d1/d2", "dir"),
        ("d1/big", "data"),
        ("sparse", "data"),
        ("<8>", "journal"),
    ] {
        let b = blocks(path);
        assert!(!b.is_empty(), "debugfs lists no blocks of {path}");
        expected.extend(b.into_iter().map(|b| (b, s)));
    }
    // The sparse file's extent tree has depth 1: its level-0 entry points at the extent block.
    let ex = tool("debugfs", &["-R", "ex sparse", img_s], None);
    // Its columns: level, entries, logical "first - last", physical, length.
    let node = ex
        .lines()
        .find(|l| l.trim_start().starts_with("0/"))
        .and_then(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.iter().position(|&t| t == "-").and_then(|i| w.get(i + 2).copied())
        })
        .unwrap_or_else(|| panic!("no index entry in:\n{ex}"));
    let node: u64 = node.parse().unwrap();
    // debugfs's `blocks` lists the extent block among the file's blocks; it is the tree's.
    expected.retain(|(b, _)| *b != node);
    expected.push((node, "extent"));
    let bytes = std::fs::read(&img).unwrap();
    Some(Image { _dir: dir, bytes, expected })
}

#[test]
fn a_scan_classifies_every_block_as_e2fsprogs_does() {
    let Some(img) = make_image() else { return };
    let read = check_scan("ext4", &img);
    // The scan reads metadata only: far fewer blocks than the image holds.
    assert!(read > 2 && read < 5000, "{read} blocks read");
}

#[test]
fn blocks_written_through_the_layer_are_classified_and_a_structure_fault_hits_its_block() {
    let Some(img) = make_image() else { return };
    let (inject, ram) =
        check_written("ext4", &img, &["kind = 'lost'\nstructure = 'inode'\nnth = 2"]);
    // The second inode-table block written (in block order) was lost, and only it.
    let log = inject.log().records();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].structure.as_deref(), Some("inode"));
    let lost = log[0].lba;
    let first_inode_block =
        img.expected.iter().filter(|(_, s)| *s == "inode").map(|(b, _)| *b).min();
    assert!(Some(lost) > first_inode_block, "the first inode block was not the target");
    assert!(read_block(&ram, lost).iter().all(|&x| x == 0), "block {lost} was written");
    let want = &img.bytes[lost as usize * BS..(lost as usize + 1) * BS];
    assert!(want.iter().any(|&x| x != 0), "the lost block held inodes in the image");
}

#[test]
fn a_structure_target_needs_a_classifier_and_a_known_name() {
    let ram: DevRef = Arc::new(RamDevice::new("ram", BS as u32, 64, 0, 0));
    let spec = |s: &str| {
        toml::from_str::<FaultConfig>(&format!("kind = 'lost'\nstructure = '{s}'"))
            .unwrap()
            .to_spec(4096)
            .unwrap()
    };
    let plain = Inject::new("i", ram.clone(), vec![], 1, InjectionLog::in_memory(), None).unwrap();
    assert!(plain.arm(spec("inode")).unwrap_err().contains("needs the layer to classify"));
    let c = structure::classifier("ext4", 4096).unwrap();
    let ext4 = Inject::new("i", ram, vec![], 1, InjectionLog::in_memory(), Some(c)).unwrap();
    assert!(ext4.arm(spec("inode")).is_ok());
    assert!(ext4.arm(spec("inodes")).unwrap_err().contains("ext4 has superblock"));
    assert!(structure::classifier("zfs", 4096).is_err());
}
