//! Goal: the `inject` layer's btrfs classifier names each block of a real btrfs image as
//! btrfs-progs does (both superblock copies; every copy of every tree block of the root,
//! chunk, extent, dev, fs, csum and free-space trees, by owner; the fs tree's leaves also by the
//! item types they hold: INODE_ITEM, INODE_REF, DIR_ITEM, DIR_INDEX, EXTENT_DATA; a file's
//! data), both when it scans an existing image and when it only sees the image written
//! through it.
//!
//! Method: mkfs.btrfs makes a 512 MiB image populated from a directory (`--rootdir`, no mount
//! needed: nested directories, 50 small files, a 300 KB file). The expected structure of each
//! block comes from `btrfs inspect-internal dump-tree` (each tree's blocks, their owners and
//! the item types in each leaf, the data extents' logical addresses) and `btrfs-map-logical`
//! (logical to device addresses, one per copy). The image is loaded into a RAM device and
//! classified as in inject_ext4.rs. Skips, saying why, when btrfs-progs is not installed.

mod fsimage;
use fsimage::{check_written, have_all, layer, ram_with, tool, Image, Scratch, BS};

/// The device blocks of every copy of `bytes` at logical address `logical`.
fn device_blocks(img: &str, logical: u64, bytes: u64) -> Vec<u64> {
    let out = tool("btrfs-map-logical", &["-l", &logical.to_string(), img], None);
    let mut blocks = Vec::new();
    for l in out.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if let Some(i) = w.iter().position(|&x| x == "physical") {
            let p: u64 = w[i + 1].parse().unwrap();
            blocks.extend(p / BS as u64..(p + bytes).div_ceil(BS as u64));
        }
    }
    assert!(!blocks.is_empty(), "btrfs-map-logical maps nothing at {logical}:\n{out}");
    blocks
}

struct BtrfsImage {
    image: Image,
    /// The first device block of each copy of each fs-tree leaf, with the item types it holds.
    leaf_items: Vec<(Vec<u64>, Vec<&'static str>)>,
}

fn make_image() -> Option<BtrfsImage> {
    if !have_all(&["mkfs.btrfs", "btrfs", "btrfs-map-logical"]) {
        return None;
    }
    let dir = Scratch::new("btrfs");
    let root = dir.0.join("root");
    std::fs::create_dir_all(root.join("d1")).unwrap();
    std::fs::create_dir_all(root.join("d2")).unwrap();
    std::fs::write(
        root.join("d1/big"),
        (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>(),
    )
    .unwrap();
    for i in 0..50 {
        std::fs::write(root.join(format!("d2/f{i}")), format!("file {i}\n")).unwrap();
    }
    let img = dir.0.join("btrfs.img");
    let img_s = img.to_str().unwrap();
    std::fs::File::create(&img).unwrap().set_len(512 << 20).unwrap();
    tool("mkfs.btrfs", &["-q", "-f", "--rootdir", root.to_str().unwrap(), img_s], None);
    let super_out = tool("btrfs", &["inspect-internal", "dump-super", img_s], None);
    let nodesize: u64 = super_out
        .lines()
        .find_map(|l| l.strip_prefix("nodesize"))
        .and_then(|v| v.trim().parse().ok())
        .expect("nodesize");
    let mut expected: Vec<(u64, &'static str)> = vec![(16, "superblock"), (16384, "superblock")];
    let mut leaf_items = Vec::new();
    for (tree, label) in [
        ("root", "root-tree"),
        ("chunk", "chunk-tree"),
        ("extent", "extent-tree"),
        ("dev", "dev-tree"),
        ("fs", "fs-tree"),
        ("csum", "csum-tree"),
        ("10", "free-space-tree"),
    ] {
        let dump = tool("btrfs", &["inspect-internal", "dump-tree", "-t", tree, img_s], None);
        // "leaf 30441472 items 135 free space ... owner FS_TREE", then its items' keys.
        let mut current: Option<usize> = None;
        for l in dump.lines() {
            let w: Vec<&str> = l.split_whitespace().collect();
            let header = matches!(w.first(), Some(&"leaf") | Some(&"node"))
                && matches!(w.get(2), Some(&"items") | Some(&"level"));
            if header {
                let logical: u64 = w[1].parse().unwrap();
                let blocks = device_blocks(img_s, logical, nodesize);
                expected.extend(blocks.iter().map(|&b| (b, label)));
                current = None;
                if tree == "fs" && w[0] == "leaf" {
                    // One entry per copy (metadata is DUP): the first block of each.
                    let per_node = (nodesize / BS as u64) as usize;
                    let firsts = blocks.chunks(per_node).map(|c| c[0]).collect();
                    leaf_items.push((firsts, Vec::new()));
                    current = Some(leaf_items.len() - 1);
                }
            }
            if let (Some(c), Some(k)) = (current, w.iter().position(|&x| x == "key")) {
                let item = match w.get(k + 2).copied() {
                    Some("INODE_ITEM") => "inode-item",
                    Some("INODE_REF") => "inode-ref",
                    Some("DIR_ITEM") => "dir-item",
                    Some("DIR_INDEX") => "dir-index",
                    Some("EXTENT_DATA") => "extent-data",
                    _ => continue,
                };
                if !leaf_items[c].1.contains(&item) {
                    leaf_items[c].1.push(item);
                }
            }
            // "extent data disk byte 13631488 nr 303104": a file's data.
            if let Some(i) = l.find("extent data disk byte ") {
                let v: Vec<&str> = l[i..].split_whitespace().collect();
                let (logical, bytes): (u64, u64) = (v[4].parse().unwrap(), v[6].parse().unwrap());
                if logical != 0 {
                    expected.extend(
                        device_blocks(img_s, logical, bytes).into_iter().map(|b| (b, "data")),
                    );
                }
            }
        }
    }
    assert!(leaf_items.iter().any(|(_, i)| i.contains(&"dir-index")), "{leaf_items:?}");
    let bytes = std::fs::read(&img).unwrap();
    Some(BtrfsImage { image: Image { _dir: dir, bytes, expected }, leaf_items })
}

/// Every fs-tree leaf's blocks match each item type it holds and none it does not.
fn check_items(inject: &flashrig_engines::Inject, leaves: &[(Vec<u64>, Vec<&'static str>)]) {
    for (firsts, items) in leaves {
        for block in firsts {
            for item in ["inode-item", "inode-ref", "dir-item", "dir-index", "extent-data"] {
                let want = items.contains(&item);
                assert_eq!(inject.matches_structure(*block, item), want, "block {block}, {item}");
            }
        }
    }
}

#[test]
fn a_scan_classifies_btrfs_blocks_as_btrfs_progs_does() {
    let Some(b) = make_image() else { return };
    let inject = layer("btrfs", ram_with(&b.image.bytes), &[]);
    let i = inject.clone();
    let (read, _) =
        flashrig_runtime::run(flashrig_runtime::RuntimeKind::Sim, 1, move || async move {
            i.scan().await.unwrap()
        });
    assert!(read > 4 && read < 5000, "{read} blocks read");
    fsimage::check(&inject, &b.image.expected, "scan");
    check_items(&inject, &b.leaf_items);
}

#[test]
fn btrfs_blocks_written_through_the_layer_are_classified_and_an_item_target_hits_a_leaf() {
    let Some(b) = make_image() else { return };
    let (inject, _) =
        check_written("btrfs", &b.image, &["kind = 'lost'\nstructure = 'dir-index'\ncount = 1"]);
    check_items(&inject, &b.leaf_items);
    let log = inject.log().records();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].structure.as_deref(), Some("dir-index"));
    let lost = log[0].lba;
    let in_a_dir_index_leaf = b.leaf_items.iter().any(|(firsts, items)| {
        items.contains(&"dir-index") && firsts.iter().any(|f| (*f..*f + 4).contains(&lost))
    });
    assert!(in_a_dir_index_leaf, "block {lost} is not in a leaf with DIR_INDEX items");
}
