//! What the classifier tests of the `inject` layer share: running the file systems' own tools
//! (mkfs, debugfs, dumpe2fs, xfs_db) on an image in a scratch directory, loading the image into
//! a RAM device, building a classifying layer over it, and comparing the layer's structure of
//! each block with what the tools say.

// Each test file uses the helpers its file system needs.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;

use flashrig_blockdev::{BlockDevice, DevRef, WriteHints};
use flashrig_devices::RamDevice;
use flashrig_engines::inject::{structure, FaultConfig, Inject, InjectionLog};
use flashrig_runtime::{run, RuntimeKind};

pub const BS: usize = 4096;

pub fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Whether every tool is installed; prints which is missing (the test then skips).
pub fn have_all(tools: &[&str]) -> bool {
    match tools.iter().find(|t| find_tool(t).is_none()) {
        Some(t) => {
            println!("skipping: {t} is not installed");
            false
        }
        None => true,
    }
}

/// Runs `name args` (with `stdin` fed to it) and returns its stdout; panics if it fails.
pub fn tool(name: &str, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut cmd = Command::new(find_tool(name).expect("checked by the caller"));
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{name}: {e}"));
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{name} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A scratch directory removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(prefix: &str) -> Scratch {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "flashrig-{prefix}-{}-{}",
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

/// A populated image, and each block's structure as the file system's tools report it.
pub struct Image {
    pub _dir: Scratch,
    pub bytes: Vec<u8>,
    pub expected: Vec<(u64, &'static str)>,
}

/// A RAM device holding `bytes` (written below any layer).
pub fn ram_with(bytes: &[u8]) -> Arc<RamDevice> {
    let ram = Arc::new(RamDevice::new("ram", BS as u32, (bytes.len() / BS) as u64, 0, 0));
    let r = ram.clone();
    let b = bytes.to_vec();
    run(RuntimeKind::Sim, 1, move || async move {
        r.write(0, &b, None, WriteHints::default()).await.unwrap();
    });
    ram
}

/// An `inject` layer over `below` that classifies `filesystem`, with `faults` (TOML tables).
pub fn layer(filesystem: &str, below: DevRef, faults: &[&str]) -> Arc<Inject> {
    let specs = faults
        .iter()
        .map(|f| toml::from_str::<FaultConfig>(f).unwrap().to_spec(BS as u32).unwrap())
        .collect();
    let c = structure::classifier(filesystem, BS as u32).unwrap();
    Arc::new(Inject::new("inject", below, specs, 1, InjectionLog::in_memory(), Some(c)).unwrap())
}

/// Asserts that the layer gives every expected block its structure, and leaves the last
/// block of the device (free space) unclassified.
pub fn check(inject: &Inject, expected: &[(u64, &'static str)], how: &str) {
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
    let last = inject.info().num_blocks - 1;
    assert_eq!(inject.structure_of(last), None, "{how}: a free block was classified");
}

/// Scans the image from a RAM device and checks every block; returns the blocks read.
pub fn check_scan(filesystem: &str, img: &Image) -> u64 {
    let inject = layer(filesystem, ram_with(&img.bytes), &[]);
    let i = inject.clone();
    let (read, _) = run(RuntimeKind::Sim, 1, move || async move { i.scan().await.unwrap() });
    check(&inject, &img.expected, "scan");
    read
}

/// Writes the image through a layer with `faults` over an empty RAM device, as a file system
/// writes: in 64 KiB commands (a btrfs tree block is one command of four blocks, its free
/// middle zeros included), skipping the commands that would write only zeros; checks every
/// block, and returns the layer and the RAM device.
pub fn check_written(
    filesystem: &str,
    img: &Image,
    faults: &[&str],
) -> (Arc<Inject>, Arc<RamDevice>) {
    let blocks = (img.bytes.len() / BS) as u64;
    let ram = Arc::new(RamDevice::new("ram", BS as u32, blocks, 0, 0));
    let inject = layer(filesystem, ram.clone(), faults);
    let (i, bytes) = (inject.clone(), img.bytes.clone());
    run(RuntimeKind::Sim, 1, move || async move {
        const CHUNK_BLOCKS: u64 = 16;
        for first in (0..blocks).step_by(CHUNK_BLOCKS as usize) {
            let n = CHUNK_BLOCKS.min(blocks - first) as usize;
            let chunk = &bytes[first as usize * BS..(first as usize + n) * BS];
            if chunk.iter().any(|&x| x != 0) {
                i.write(first, chunk, None, WriteHints::default()).await.unwrap();
            }
        }
    });
    check(&inject, &img.expected, "written");
    (inject, ram)
}

/// Block `lba` of a RAM device.
pub fn read_block(ram: &Arc<RamDevice>, lba: u64) -> Vec<u8> {
    let r = ram.clone();
    run(RuntimeKind::Sim, 1, move || async move {
        let mut buf = vec![0u8; BS];
        r.read(lba, &mut buf, None).await.unwrap();
        buf
    })
    .0
}
