//! `ssd_image`: the NAND image file an emulated SSD with a `backing` file starts from (and its
//! trim sidecar, `<image>.trims`): the header, the line table, every slot record, the trim
//! records, and the recovery that rebuilds the FTL from them (`crates/ssd/src/media/image.rs`,
//! `firmware::recover`).
//!
//! Input layout: byte 0 chooses the device (see [`variant`]); bytes 1..3 are the trim file's
//! length `t` (u16 LE); the next `t` bytes are the trim file and the rest is the image file.
//! The files are written, an `Ssd` is built over them (`Ssd::new`, which loads and recovers),
//! and, when it starts, every block is read and a few written and flushed. The rule: any
//! input gives `Ok` or a typed error, never a panic or a hang. Seeds are real images made by
//! short runs ([`make_input`]), cut off by a power failure, so the fuzzer mutates images that
//! start.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use flashrig_blockdev::BlockDevice;
use flashrig_runtime::{run, RuntimeKind};
use flashrig_ssd::config::CellType;
use flashrig_ssd::{PayloadMode, Ssd, SsdConfig};

use crate::members::{drive, exercise, within_limit};

/// Devices an input can choose.
pub const VARIANTS: usize = 2;

/// Device `v` (modulo [`VARIANTS`]), backed by `path`. Both keep fingerprints (payload mode
/// `tag`), so an image is a few KiB of records rather than pages of data:
///
/// - 0: SLC cells, 16 lines of 8 pages of 4 KiB, 4 KiB blocks and mapping units, 16 bytes
///   of host metadata per block.
/// - 1: TLC cells with an SLC cache of 3 lines, 16 lines of 12 pages, 512-byte blocks in
///   4 KiB mapping units (read-modify-writes), no host metadata.
pub fn variant(v: usize, path: &Path) -> SsdConfig {
    let mut cfg = SsdConfig::preset("tiny").expect("the tiny preset");
    cfg.payload = PayloadMode::Tag;
    cfg.backing = Some(path.to_path_buf());
    let g = &mut cfg.geometry;
    (g.channels, g.chips_per_channel, g.dies_per_chip, g.planes_per_die) = (1, 1, 1, 1);
    g.blocks_per_plane = 16;
    let f = &mut cfg.firmware;
    f.buffer_bytes = 8 * 4096;
    f.over_provisioning_percent = 100.0;
    match v % VARIANTS {
        0 => {
            cfg.nand.cell = CellType::Slc;
            cfg.nand.read_ns = vec![cfg.nand.slc_read_ns];
            cfg.nand.program_ns = vec![cfg.nand.slc_program_ns];
            cfg.geometry.pages_per_block = 8;
        }
        _ => {
            cfg.geometry.pages_per_block = 12;
            let f = &mut cfg.firmware;
            f.block_bytes = 512;
            f.md_bytes = 0;
            f.slc_cache_bytes = 3 * 4 * 4096;
            f.over_provisioning_percent = 150.0;
        }
    }
    cfg.validate().expect("the fuzzed SSD's configuration is valid");
    cfg
}

/// A directory for the image files of this process.
fn dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory")).path()
}

fn trims_of(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".trims");
    PathBuf::from(p)
}

/// Splits an input into (device, trim file, image file).
fn split(data: &[u8]) -> Option<(usize, &[u8], &[u8])> {
    let (&sel, rest) = data.split_first()?;
    let (t, rest) = match rest {
        [a, b, rest @ ..] => (u16::from_le_bytes([*a, *b]) as usize, rest),
        _ => (0, rest),
    };
    let (trims, image) = rest.split_at(t.min(rest.len()));
    Some((sel as usize % VARIANTS, trims, image))
}

/// The target.
pub fn start(data: &[u8]) {
    let Some((v, trims, image)) = split(data) else {
        return;
    };
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let path = dir().join(format!("ssd-{}.img", NEXT.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&path, image).expect("writing the image file");
    std::fs::write(trims_of(&path), trims).expect("writing the trim file");
    let cfg = variant(v, &path);
    crate::known::guard(|| {
        within_limit("ssd image", move || async move {
            if let Ok(ssd) = Ssd::new("ssd", &cfg) {
                exercise(&ssd, false, "ssd image").await;
            }
        })
    });
    let _ = std::fs::remove_file(trims_of(&path));
    let _ = std::fs::remove_file(&path);
}

/// A seed input: device `v` after a seeded run of `ops` writes, trims and flushes, cut off by
/// a power failure (so its last writes never reached the image), as the files it left.
pub fn make_input(v: usize, seed: u64, ops: usize) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("ssd.img");
    let cfg = variant(v, &path);
    let (started, _) = run(RuntimeKind::Sim, 1, move || async move {
        let ssd = Arc::new(Ssd::new("ssd", &cfg)?);
        drive(ssd.as_ref(), seed, ops).await;
        ssd.power_fail();
        // The files as they are now are what a process killed here leaves.
        Ok::<_, String>(ssd.info().num_blocks)
    });
    started.expect("the SSD starts over a new image");
    let trims = std::fs::read(trims_of(&path)).expect("the trim file");
    let image = std::fs::read(&path).expect("the image file");
    let t = u16::try_from(trims.len()).expect("a seed's trim file fits the length field");
    let mut out = vec![v as u8];
    out.extend_from_slice(&t.to_le_bytes());
    out.extend_from_slice(&trims);
    out.extend_from_slice(&image);
    out
}

/// Whether `data` starts an SSD without an error and reads back every block without one (for
/// checking that seeds are real images).
pub fn starts_cleanly(data: &[u8]) -> Result<(), String> {
    let (v, trims, image) = split(data).ok_or("an empty input")?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("ssd.img");
    std::fs::write(&path, image).map_err(|e| e.to_string())?;
    std::fs::write(trims_of(&path), trims).map_err(|e| e.to_string())?;
    let cfg = variant(v, &path);
    let (r, _) = run(RuntimeKind::Sim, 1, move || async move {
        let ssd = Ssd::new("ssd", &cfg)?;
        let report = ssd.start_report().ok_or("no start report")?;
        if report.steps.first().is_some_and(|s| s.detail.ends_with("created")) {
            return Err("the image was created, not loaded".to_string());
        }
        exercise(&ssd, true, "a seed image").await;
        Ok(())
    });
    r
}
