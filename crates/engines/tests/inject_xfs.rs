//! Goal: the `inject` layer's xfs classifier names each block of a real xfs image as xfs_db
//! does (every allocation group's headers, the free-space, inode and refcount btree roots, the
//! inode chunk of the root directory, a directory's blocks, a file's data, the log), both when
//! it scans an existing image and when it only sees the image written through it.
//!
//! Method: mkfs.xfs makes a 512 MiB image (four allocation groups) populated from a prototype
//! file (`-p`, no mount needed): a directory of 200 files (a directory in blocks, not in its
//! inode) and a 300 KB file. The expected structure of each block comes from xfs_db (`sb`,
//! `agf`, `agi` fields, `bmap` of paths). The image is loaded into a RAM device and classified
//! as in inject_ext4.rs. Skips, saying why, when xfsprogs is not installed.

mod fsimage;
use fsimage::{check_scan, check_written, have_all, tool, Image, Scratch};

/// The number after `name = ` in xfs_db's output.
fn field(out: &str, name: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} = ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{out}"))
}

/// The device blocks of `path`'s extents, from xfs_db's `bmap` ("startblock N (a/b) count C").
fn bmap(img: &str, path: &str, ag_blocks: u64) -> Vec<u64> {
    let out = tool("xfs_db", &["-r", "-c", &format!("path {path}"), "-c", "bmap", img], None);
    let mut blocks = Vec::new();
    for l in out.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let at = |k: &str| w.iter().position(|&x| x == k).map(|i| w[i + 1]);
        let (Some(ag_bno), Some(count)) = (at("startblock").and(w.get(5)), at("count")) else {
            continue;
        };
        // "(a/b)": allocation group a, block b within it.
        let (a, b) = ag_bno.trim_matches(|c| c == '(' || c == ')').split_once('/').unwrap();
        let first = a.parse::<u64>().unwrap() * ag_blocks + b.parse::<u64>().unwrap();
        blocks.extend(first..first + count.parse::<u64>().unwrap());
    }
    assert!(!blocks.is_empty(), "xfs_db maps no blocks of {path}:\n{out}");
    blocks
}

fn make_image() -> Option<Image> {
    if !have_all(&["mkfs.xfs", "xfs_db"]) {
        return None;
    }
    let dir = Scratch::new("xfs");
    let img = dir.0.join("xfs.img");
    let img_s = img.to_str().unwrap();
    std::fs::File::create(&img).unwrap().set_len(512 << 20).unwrap();
    let big = dir.0.join("big");
    std::fs::write(&big, (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>()).unwrap();
    let small = dir.0.join("small");
    std::fs::write(&small, b"hi\n").unwrap();
    // The prototype: root, then d1 holding the big file, then d2 holding 200 small files.
    let mut proto = String::from("/dummy\n0 0\nd--755 0 0\nd1 d--755 0 0\n");
    proto += &format!("big ---644 0 0 {}\n$\nd2 d--755 0 0\n", big.display());
    for i in 0..200 {
        proto += &format!("f{i} ---644 0 0 {}\n", small.display());
    }
    proto += "$\n$\n";
    let proto_path = dir.0.join("proto");
    std::fs::write(&proto_path, proto).unwrap();
    tool(
        "mkfs.xfs",
        &["-q", "-f", "-b", "size=4096", "-p", proto_path.to_str().unwrap(), img_s],
        None,
    );
    let db = |cmds: &[&str]| {
        let mut args = vec!["-r"];
        for c in cmds {
            args.extend(["-c", c]);
        }
        args.push(img_s);
        tool("xfs_db", &args, None)
    };
    let sb = db(&["sb 0", "print agblocks agcount logstart logblocks rootino inopblog"]);
    let (ag_blocks, ags) = (field(&sb, "agblocks"), field(&sb, "agcount"));
    let mut expected: Vec<(u64, &'static str)> = Vec::new();
    for ag in 0..ags {
        expected.push((ag * ag_blocks, "ag-headers"));
        let agf = db(&[&format!("agf {ag}"), "print bnoroot cntroot refcntroot"]);
        expected.push((ag * ag_blocks + field(&agf, "bnoroot"), "free-btree"));
        expected.push((ag * ag_blocks + field(&agf, "cntroot"), "free-btree"));
        expected.push((ag * ag_blocks + field(&agf, "refcntroot"), "refcount-btree"));
        let agi = db(&[&format!("agi {ag}"), "print root"]);
        expected.push((ag * ag_blocks + field(&agi, "root"), "inode-btree"));
    }
    // The log: its start is a file-system block, AG number in the high bits; with a power-of-
    // two AG size, as here, that is the device block.
    let log_start = field(&sb, "logstart");
    expected.extend((log_start..log_start + field(&sb, "logblocks")).map(|b| (b, "log")));
    // The root's inode chunk: 64 inodes from the root's, `1 << inopblog` to a block.
    let root = field(&sb, "rootino");
    let first = root >> field(&sb, "inopblog");
    let chunk_blocks = 64 >> field(&sb, "inopblog");
    expected.extend((first..first + chunk_blocks).map(|b| (b, "inode")));
    expected.extend(bmap(img_s, "/d2", ag_blocks).into_iter().map(|b| (b, "dir")));
    expected.extend(bmap(img_s, "/d1/big", ag_blocks).into_iter().map(|b| (b, "data")));
    let bytes = std::fs::read(&img).unwrap();
    Some(Image { _dir: dir, bytes, expected })
}

#[test]
fn a_scan_classifies_xfs_blocks_as_xfs_db_does() {
    let Some(img) = make_image() else { return };
    let read = check_scan("xfs", &img);
    assert!(read > 4 && read < 5000, "{read} blocks read");
}

#[test]
fn xfs_blocks_written_through_the_layer_are_classified() {
    let Some(img) = make_image() else { return };
    let (inject, _) = check_written("xfs", &img, &["kind = 'lost'\nstructure = 'dir'\ncount = 1"]);
    let log = inject.log().records();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].structure.as_deref(), Some("dir"));
}
