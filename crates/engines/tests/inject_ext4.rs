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

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use flashrig_blockdev::{BlockDevice, DevRef, WriteHints};
use flashrig_devices::RamDevice;
use flashrig_engines::inject::{structure, FaultConfig, Inject, InjectionLog};
use flashrig_runtime::{run, RuntimeKind};

const BS: usize = 4096;

fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

fn tool(name: &str, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut cmd = Command::new(find_tool(name).expect("checked by the caller"));
    cmd.args(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    if stdin.is_some() {
        cmd.stdin(std::process::Stdio::piped());
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{name}: {e}"));
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{name} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A populated ext4 image, and each block's structure as e2fsprogs reports it.
struct Image {
    _dir: tempdir::Scratch,
    bytes: Vec<u8>,
    expected: Vec<(u64, &'static str)>,
}

mod tempdir {
    /// A scratch directory removed when dropped.
    pub struct Scratch(pub std::path::PathBuf);
    impl Scratch {
        pub fn new() -> Scratch {
            use std::sync::atomic::{AtomicU64, Ordering};
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "flashrig-ext4-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

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
    for t in ["mkfs.ext4", "debugfs", "dumpe2fs"] {
        if find_tool(t).is_none() {
            println!("skipping: {t} is not installed (e2fsprogs)");
            return None;
        }
    }
    let dir = tempdir::Scratch::new();
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

/// A RAM device holding `bytes` (written below any layer).
fn ram_with(bytes: &[u8]) -> Arc<RamDevice> {
    let ram = Arc::new(RamDevice::new("ram", BS as u32, (bytes.len() / BS) as u64, 0, 0));
    let r = ram.clone();
    let b = bytes.to_vec();
    run(RuntimeKind::Sim, 1, move || async move {
        r.write(0, &b, None, WriteHints::default()).await.unwrap();
    });
    ram
}

fn layer(below: DevRef, faults: &[&str]) -> Arc<Inject> {
    let specs = faults
        .iter()
        .map(|f| toml::from_str::<FaultConfig>(f).unwrap().to_spec(BS as u32).unwrap())
        .collect();
    let c = structure::classifier("ext4", BS as u32).unwrap();
    Arc::new(Inject::new("inject", below, specs, 1, InjectionLog::in_memory(), Some(c)).unwrap())
}

fn check(inject: &Inject, expected: &[(u64, &'static str)], how: &str) {
    let wrong: Vec<String> = expected
        .iter()
        .filter(|(b, s)| inject.structure_of(*b) != Some(*s))
        .map(|(b, s)| format!("block {b}: expected {s}, got {:?}", inject.structure_of(*b)))
        .collect();
    assert!(
        wrong.is_empty(),
        "{how}: {} of {} wrong: {:?}",
        wrong.len(),
        expected.len(),
        &wrong[..wrong.len().min(20)]
    );
    // Blocks no structure claims (the free space at the end) stay unclassified.
    let last = inject.info().num_blocks - 1;
    assert_eq!(inject.structure_of(last), None, "{how}: a free block was classified");
}

#[test]
fn a_scan_classifies_every_block_as_e2fsprogs_does() {
    let Some(img) = make_image() else { return };
    let inject = layer(ram_with(&img.bytes), &[]);
    let i = inject.clone();
    let (read, _) = run(RuntimeKind::Sim, 1, move || async move { i.scan().await.unwrap() });
    // The scan reads metadata only: far fewer blocks than the image holds.
    assert!(read > 2 && read < 5000, "{read} blocks read");
    check(&inject, &img.expected, "scan");
}

#[test]
fn blocks_written_through_the_layer_are_classified_and_a_structure_fault_hits_its_block() {
    let Some(img) = make_image() else { return };
    let blocks = (img.bytes.len() / BS) as u64;
    let ram = Arc::new(RamDevice::new("ram", BS as u32, blocks, 0, 0));
    let inject = layer(ram.clone(), &["kind = 'lost'\nstructure = 'inode'\nnth = 2"]);
    let (i, bytes) = (inject.clone(), img.bytes.clone());
    run(RuntimeKind::Sim, 1, move || async move {
        // The image as a file system would write it: block by block, skipping zeros.
        for b in 0..blocks {
            let block = &bytes[b as usize * BS..(b as usize + 1) * BS];
            if block.iter().any(|&x| x != 0) {
                i.write(b, block, None, WriteHints::default()).await.unwrap();
            }
        }
    });
    check(&inject, &img.expected, "written");
    // The second inode-table block written (in block order) was lost, and only it.
    let log = inject.log().records();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].structure.as_deref(), Some("inode"));
    let lost = log[0].lba;
    let first_inode_block =
        img.expected.iter().filter(|(_, s)| *s == "inode").map(|(b, _)| *b).min();
    assert!(Some(lost) > first_inode_block, "the first inode block was not the target");
    let r = ram.clone();
    let (stored, _) = run(RuntimeKind::Sim, 1, move || async move {
        let mut buf = vec![0u8; BS];
        r.read(lost, &mut buf, None).await.unwrap();
        buf
    });
    assert!(stored.iter().all(|&x| x == 0), "block {lost} was written");
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
