//! Goal: an SSD with a `backing` NAND image file comes back from the file after its process
//! is gone, as a real SSD comes back after a power cut: every write covered by a completed
//! flush (or FUA), and every trim, survives; nothing reads back that was never written; this
//! holds with GC, the SLC cache, coarse mapping units and 512-byte sectors in play, over
//! several lives of the same file. An image made for another device, or a file that is no
//! image, is refused with a message naming the problem.
//!
//! Method: on the simulated runtime the reference-model driver runs random reads, writes,
//! trims and flushes against an SSD whose media is written through to an image file in a
//! temporary directory. At a seeded virtual time the device loses power (its commands in
//! flight fail and it writes nothing more, as a killed process would not), and a *new* device
//! is built from the same configuration: it loads the file (step `load_image`), recovers, and
//! every block the model knows is read back and checked against what may have survived. Each
//! case does this several times, then runs a verified tail. Failures print the seed;
//! `FLASHRIG_SEED=<n>` reruns that case. `crates/flashrig/tests/crash.rs` kills a real
//! process with SIGKILL over an image file.

use std::path::Path;
use std::sync::Arc;

use flashrig_blockdev::{BlockDevice, DevRef};
use flashrig_check::{
    run_check, run_ops, seeds, verify_after_crash, CheckConfig, Model, OpWeights,
};
use flashrig_runtime::{run, sleep_ns, spawn, RuntimeKind};
use flashrig_ssd::firmware::recover::STEPS;
use flashrig_ssd::{Ssd, SsdConfig};
use parking_lot::Mutex;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

fn backed(preset: &str, dir: &Path) -> SsdConfig {
    let mut cfg = SsdConfig::preset(preset).unwrap();
    cfg.backing = Some(dir.join("ssd.img"));
    cfg
}

/// `lives` rounds of: random commands, power cut at a seeded time, a new device from the
/// file. Returns the counters of all lives' devices added up.
fn lives(
    cfg: SsdConfig,
    seed: u64,
    lives: u32,
) -> Result<std::collections::BTreeMap<String, u64>, String> {
    let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
        let mut ssd = Arc::new(Ssd::new("ssd", &cfg)?);
        let first = ssd.start_report().ok_or("a backed device reports its start")?;
        if !first.steps[0].detail.ends_with("created") {
            return Err(format!("a new image file should be created: {:?}", first.steps[0]));
        }
        let info = ssd.info().clone();
        let model = Arc::new(Mutex::new(Model::for_device(&info, seed)));
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut total = std::collections::BTreeMap::new();
        let bpi = (cfg.firmware.iu_bytes / cfg.firmware.block_bytes) as u64;
        for life in 0..lives {
            let dev: DevRef = ssd.clone();
            let ops = CheckConfig {
                seed: seed * 1000 + life as u64,
                ops: 1_000_000,
                queue_depth: 16,
                max_io_blocks: 2 * bpi.max(8),
                span_blocks: Some(info.num_blocks),
                weights: OpWeights { read: 20, write: 70, trim: 5, flush: 5 },
                ..CheckConfig::default()
            };
            let driver = {
                let (dev, model) = (dev.clone(), model.clone());
                spawn(async move { run_ops(dev, model, &ops).await })
            };
            sleep_ns(20_000_000 + rng.next_u64() % 400_000_000).await;
            // The process dies: nothing more reaches the file, commands in flight fail.
            ssd.power_fail();
            add(&mut total, &dev);
            if driver.await.is_ok() {
                return Err(format!("seed {seed}: the driver finished before the crash"));
            }
            ssd = Arc::new(Ssd::new("ssd", &cfg)?);
            let report = ssd.start_report().ok_or("no start report")?;
            let names: Vec<&str> = report.steps.iter().map(|s| s.name).collect();
            let mut want = vec!["load_image"];
            want.extend(STEPS);
            if names != want {
                return Err(format!("start steps {names:?}, want {want:?}"));
            }
            let dev: DevRef = ssd.clone();
            verify_after_crash(&dev, &model)
                .await
                .map_err(|e| format!("seed {seed} life {life}: {e}; start: {report:?}"))?;
        }
        let dev: DevRef = ssd.clone();
        let tail = CheckConfig {
            seed: seed + 7,
            ops: 2000,
            span_blocks: Some(info.num_blocks),
            ..CheckConfig::default()
        };
        run_check(dev.clone(), model, &tail).await.map_err(|e| e.to_string())?;
        add(&mut total, &dev);
        Ok(total)
    });
    res
}

/// Adds a device's counters to `total` (each life's device counts from zero).
fn add(total: &mut std::collections::BTreeMap<String, u64>, dev: &DevRef) {
    for (k, v) in dev.metrics().unwrap().snapshot().counters {
        *total.entry(k).or_insert(0) += v;
    }
}

#[test]
fn a_device_rebuilt_from_its_image_keeps_every_flushed_write() {
    let mut gc = 0;
    for seed in seeds(1, 4) {
        let dir = tempfile::tempdir().unwrap();
        let c = lives(backed("tiny", dir.path()), seed, 4)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        gc += (c["gc_lines"] > 0) as u32;
    }
    assert!(gc > 0, "GC never ran: the image was not tested with erased and reused lines");
}

#[test]
fn slc_cache_coarse_units_and_sectors_come_back_from_the_image() {
    for seed in seeds(50, 2) {
        let dir = tempfile::tempdir().unwrap();
        let c = lives(backed("tiny-slc", dir.path()), seed, 2)
            .unwrap_or_else(|e| panic!("tiny-slc seed {seed}: {e}"));
        assert!(c["slc_evicted_lines"] > 0, "seed {seed}: no SLC eviction happened");
        let dir = tempfile::tempdir().unwrap();
        lives(backed("tiny-qlc", dir.path()), seed, 2)
            .unwrap_or_else(|e| panic!("tiny-qlc seed {seed}: {e}"));
        let dir = tempfile::tempdir().unwrap();
        let mut sectors = backed("tiny", dir.path());
        sectors.firmware.block_bytes = 512;
        sectors.geometry.oob_bytes_per_page = 256;
        lives(sectors, seed, 2).unwrap_or_else(|e| panic!("512-byte sectors seed {seed}: {e}"));
        // Payload `tag` keeps fingerprints: they come back too.
        let dir = tempfile::tempdir().unwrap();
        let mut tags = backed("tiny", dir.path());
        tags.payload = flashrig_ssd::PayloadMode::Tag;
        let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
            use flashrig_blockdev::WriteHints;
            let block: Vec<u8> = (0..4096u32).map(|i| (i * 7 + seed as u32) as u8).collect();
            let a = Ssd::new("a", &tags).unwrap();
            a.write(3, &block, None, WriteHints::NONE).await.unwrap();
            a.flush().await.unwrap();
            a.power_fail();
            let b = Ssd::new("b", &tags).unwrap();
            let mut got = vec![0u8; 4096];
            b.read(3, &mut got, None).await.unwrap();
            got[..8].to_vec() == flashrig_ssd::tag_of(&block).to_le_bytes()
        });
        assert!(res, "seed {seed}: a tag did not come back from the image");
    }
}

#[test]
fn an_image_of_another_device_or_no_image_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = backed("tiny", dir.path());
    let (ok, _) = run(RuntimeKind::Sim, 1, {
        let tiny = tiny.clone();
        move || async move { Ssd::new("a", &tiny).is_ok() }
    });
    assert!(ok);
    let mut other = tiny.clone();
    other.geometry.blocks_per_plane *= 2;
    let e = Ssd::new("b", &other).err().expect("another geometry is refused");
    assert!(e.contains("made for another device") && e.contains("lines"), "{e}");
    let mut md = tiny.clone();
    md.firmware.md_bytes = 32;
    let e = Ssd::new("c", &md).err().expect("another metadata size is refused");
    assert!(e.contains("metadata bytes per block"), "{e}");
    let junk = dir.path().join("junk.img");
    std::fs::write(&junk, vec![7u8; 8192]).unwrap();
    let mut j = tiny.clone();
    j.backing = Some(junk);
    let e = Ssd::new("d", &j).err().expect("a file that is no image is refused");
    assert!(e.contains("not a flashrig SSD image"), "{e}");
    let mut none = tiny;
    none.payload = flashrig_ssd::PayloadMode::None;
    let e = Ssd::new("e", &none).err().expect("payload none cannot be kept");
    assert!(e.contains("backing") && e.contains("none"), "{e}");
}
