//! Goal: a power loss at any moment loses no write that a completed flush (or FUA) covered,
//! and recovery rebuilds the FTL from OOB alone, with GC, SLC eviction and partial mapping
//! units in play; with power-loss protection not even unflushed acknowledged writes are lost.
//!
//! Method: on the simulated runtime the reference-model driver runs random commands against
//! an SSD; a second task cuts power at a seeded virtual time, with commands in flight (they
//! fail, as a host would see them time out). Power comes back, recovery runs its named steps,
//! every block the model knows is read back and checked against what may have survived, and
//! the run goes on with the same model; each case crashes several times. Failures print the
//! seed; `FLASHRIG_SEED=<n>` reruns that case. The WOM-v firmware (`[womv]`) runs in each of
//! its modes, with its own recovery steps. MV-FTL (`ftl_policy = "mv"`) runs here too, and
//! its case asserts that recovery found version chains at the cuts (so partial versions,
//! their OOB bitmaps and the chain rule of recovery were exercised, not just whole units),
//! with compacted pages (§3.3) written in its configurations of several units per page. The
//! write-in-place firmware (`ftl_policy = "in_place"`) is crashed the same way.

use std::sync::Arc;

use flashrig_blockdev::DevRef;
use flashrig_check::{
    run_check, run_ops, seeds, verify_after_crash, CheckConfig, Model, OpWeights,
};
use flashrig_runtime::{run, sleep_ns, spawn, RuntimeKind};
use flashrig_ssd::config::{FtlPolicy, SlcEviction, Womv, WomvGc};
use flashrig_ssd::firmware::inplace::IN_PLACE_STEPS;
use flashrig_ssd::firmware::recover::STEPS;
use flashrig_ssd::firmware::womv::ftl::RECOVERY_STEPS as WOMV_STEPS;
use flashrig_ssd::{Ssd, SsdConfig};
use parking_lot::Mutex;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Runs `crashes` crash-and-recover rounds on an SSD of `cfg`; returns the SSD's counters,
/// with `chained_units_at_cuts` added: MV-FTL's chained units right after each recovery,
/// summed over the rounds (chains recovery rebuilt from the media, so chains that were
/// durable at the cut).
fn crash_case(
    cfg: SsdConfig,
    seed: u64,
    crashes: u32,
    expect_nothing_lost: bool,
    window_ns: (u64, u64),
) -> Result<std::collections::BTreeMap<String, u64>, String> {
    let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
        let ssd = Arc::new(Ssd::new("ssd", &cfg).unwrap());
        let dev: DevRef = ssd.clone();
        let info = dev.info().clone();
        let model = Arc::new(Mutex::new(Model::for_device(&info, seed)));
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut chained_at_cuts = 0u64;
        let bpi = (cfg.firmware.iu_bytes / cfg.firmware.block_bytes) as u64;
        for round in 0..crashes {
            let ops = CheckConfig {
                seed: seed * 1000 + round as u64,
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
            sleep_ns(window_ns.0 + rng.next_u64() % window_ns.1).await;
            ssd.power_fail();
            if driver.await.is_ok() {
                return Err(format!("seed {seed}: the driver finished before the crash"));
            }
            let report = ssd.power_on();
            let names: Vec<&str> = report.steps.iter().map(|s| s.name).collect();
            let steps: &[&str] = if cfg.womv.is_some() {
                &WOMV_STEPS
            } else if cfg.firmware.ftl_policy == FtlPolicy::InPlace {
                &IN_PLACE_STEPS
            } else {
                &STEPS
            };
            assert_eq!(names, steps, "recovery steps");
            chained_at_cuts += ssd.with_controller(|c| c.ftl.counters().mv_chained_units);
            if expect_nothing_lost {
                // Every acknowledged command must survive, as if a flush had completed at the
                // moment of the crash; commands in flight may or may not have landed.
                let mut m = model.lock();
                let token = m.flush_issued();
                m.flush_done(token);
            }
            verify_after_crash(&dev, &model)
                .await
                .map_err(|e| format!("seed {seed} round {round}: {e}"))?;
        }
        let tail = CheckConfig {
            seed: seed + 7,
            ops: 2000,
            span_blocks: Some(info.num_blocks),
            ..CheckConfig::default()
        };
        run_check(dev.clone(), model, &tail).await.map_err(|e| e.to_string())?;
        let mut counters = dev.metrics().unwrap().snapshot().counters;
        counters.insert("chained_units_at_cuts".into(), chained_at_cuts);
        Ok(counters)
    });
    res
}

fn tiny() -> SsdConfig {
    SsdConfig::preset("tiny").unwrap()
}

/// Crash between 20 and 420 ms of virtual time: long enough for GC to run in most rounds.
const GC_WINDOW: (u64, u64) = (20_000_000, 400_000_000);

/// A device whose large buffer acknowledges writes long before they reach NAND (a host link
/// of 3 GB/s paces the writes), crashed in its first 5 ms while the buffer fills.
fn buffered(plp: bool) -> SsdConfig {
    let mut cfg = tiny();
    cfg.firmware.plp = plp;
    cfg.firmware.buffer_bytes = 16 << 20;
    cfg.firmware.host_mb_per_s = 3000.0;
    cfg
}
const BUFFER_WINDOW: (u64, u64) = (500_000, 4_500_000);

#[test]
fn crashes_at_random_points_lose_no_flushed_write() {
    let mut gc_rounds = 0;
    for seed in seeds(1, 6) {
        let c = crash_case(tiny(), seed, 4, false, GC_WINDOW).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c["power_losses"], 4);
        gc_rounds += (c["gc_lines"] > 0) as u32;
    }
    assert!(gc_rounds > 0, "no case crashed with GC having run");
}

#[test]
fn crashes_with_slc_cache_and_coarse_units() {
    for seed in seeds(100, 3) {
        // Both SLC eviction policies (paced, the default, and inline).
        for eviction in [SlcEviction::Paced, SlcEviction::Inline] {
            let mut slc = SsdConfig::preset("tiny-slc").unwrap();
            slc.firmware.slc_eviction = eviction;
            let c = crash_case(slc, seed, 3, false, GC_WINDOW)
                .unwrap_or_else(|e| panic!("{eviction:?} eviction: {e}"));
            assert!(c["slc_evicted_lines"] > 0, "seed {seed}: no SLC eviction happened");
        }
        crash_case(SsdConfig::preset("tiny-qlc").unwrap(), seed, 3, false, GC_WINDOW)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut sectors = tiny();
        sectors.firmware.block_bytes = 512;
        sectors.geometry.oob_bytes_per_page = 256;
        crash_case(sectors, seed, 2, false, GC_WINDOW).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The write-in-place firmware (`ftl_policy = "in_place"`) has nothing volatile of its own:
/// crashes with the controller's buffer in play, whole units and 512-byte sectors (whose
/// writes read-modify-write their unit in place), lose no flushed write.
#[test]
fn crashes_with_the_in_place_firmware() {
    for seed in seeds(400, 3) {
        for block_bytes in [4096u32, 512] {
            let mut cfg = tiny();
            cfg.firmware.ftl_policy = FtlPolicy::InPlace;
            cfg.firmware.block_bytes = block_bytes;
            cfg.geometry.oob_bytes_per_page = 256;
            let what = format!("in_place, {block_bytes}-byte blocks, seed {seed}");
            let c = crash_case(cfg, seed, 3, false, GC_WINDOW)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!((c["gc_lines"], c["block_erases"]), (0, 0), "{what}");
            assert!(c["ftl_host_units"] > 0, "{what}: nothing reached the medium");
        }
    }
}

#[test]
fn power_loss_protection_keeps_every_acknowledged_write() {
    for seed in seeds(200, 4) {
        crash_case(buffered(true), seed, 3, true, BUFFER_WINDOW).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn without_protection_unflushed_writes_can_be_lost() {
    // The same check that PLP passes must fail without PLP for some seed, or it proves nothing.
    let lost = (200..206)
        .filter(|&s| crash_case(buffered(false), s, 1, true, BUFFER_WINDOW).is_err())
        .count();
    assert!(lost > 0, "no seed lost an unflushed write without power-loss protection");
}

/// MV-FTL at 512-byte sectors over 8 KiB pages (WAFLASH's SSD), with and without an SLC cache
/// (paced eviction relocates, and so merges, too): every flushed write survives crashes with
/// version chains live, and the chains recovery rebuilds read exactly what was durable. With
/// 4 KiB units in 16 KiB pages a write-back group holds four units, so small partial ones are
/// compacted (§3.3) and crashes also cut with compacted pages live, whose tables recovery
/// reads to rebuild the chains.
#[test]
fn crashes_with_mv_ftl_version_chains_and_compacted_pages() {
    let mut chained = 0;
    let mut compacted = 0;
    for seed in seeds(300, 3) {
        for slc in [false, true] {
            for (page_bytes, iu_bytes) in [(8192u32, 8192u32), (16384, 4096)] {
                let mut cfg = SsdConfig::preset(if slc { "tiny-slc" } else { "tiny" }).unwrap();
                cfg.firmware.block_bytes = 512;
                cfg.firmware.iu_bytes = iu_bytes;
                cfg.geometry.page_bytes = page_bytes;
                cfg.geometry.pages_per_block = 48 * 8192 / page_bytes;
                cfg.geometry.oob_bytes_per_page = 1024;
                cfg.firmware.ftl_policy = flashrig_ssd::config::FtlPolicy::Mv;
                let what = format!("mv, slc {slc}, {iu_bytes}-byte units, seed {seed}");
                let c = crash_case(cfg, seed, 3, false, GC_WINDOW)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                println!(
                    "{what}: {} versions written, {} compacted pages, {} merges, {} chained \
                     units at the cuts, {} GC lines, {} SLC lines evicted",
                    c["mv_versions_written"],
                    c["mv_compacted_pages"],
                    c["mv_merges"],
                    c["chained_units_at_cuts"],
                    c["gc_lines"],
                    c["slc_evicted_lines"]
                );
                assert!(c["mv_versions_written"] > 0, "{what}: no version written");
                assert!(c["mv_merges"] > 0, "{what}: no merge");
                chained += c["chained_units_at_cuts"];
                compacted += c["mv_compacted_pages"];
            }
        }
    }
    assert!(chained > 0, "no crash found a version chain to recover");
    assert!(compacted > 0, "no compacted page was written");
}

/// The WOM-v firmware (`[womv]`, docs/womv.md "The WOM-v SSD") on `tiny`'s geometry as QLC
/// with the thesis' FEMU QLC timings, 12 erase units, write-through: in every mode (NO_WOM,
/// WOM-v(2,4) with the default GC and with GC_OPT, WOM-v(1,4) in NR mode with GC_OPT) every
/// flushed write survives power cuts at random points with the GC active (recovery rebuilds
/// the mapping, the NR generations and the pool from the pages), and the coded modes
/// rewrite pages without erasing them.
#[test]
fn crashes_with_the_womv_firmware() {
    let modes = [
        ("none", WomvGc::Default, false),
        ("wom-v(2,4)", WomvGc::Default, false),
        ("wom-v(2,4)", WomvGc::GcOpt, false),
        ("wom-v(1,4)", WomvGc::GcOpt, true),
    ];
    for seed in seeds(500, 2) {
        for (code, gc, no_read) in modes {
            let what = format!("{code} {gc:?} no_read={no_read} seed {seed}");
            let mut cfg = tiny();
            cfg.nand = SsdConfig::preset("qlc-femu").unwrap().nand;
            cfg.geometry.blocks_per_plane = 12;
            cfg.firmware.buffer_bytes = 0;
            cfg.womv = Some(Box::new(Womv { code: code.into(), gc, no_read, ..Womv::default() }));
            // QLC programs are slow: 0.3 to 1.5 s of writes reach the first GC in most rounds.
            let c = crash_case(cfg, seed, 2, false, (300_000_000, 1_200_000_000))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            println!(
                "{what}: {} host units, {} programs, {} reprograms, {} erases, {} GC writes, \
                 {} reused in place",
                c["ftl_host_units"],
                c["womv_page_programs"],
                c["womv_reprograms"],
                c["womv_erases"],
                c["womv_gc_writes"],
                c["womv_reused_in_place"]
            );
            assert_eq!(c["power_losses"], 2, "{what}");
            let collected =
                c["womv_erases"] + c["womv_reused_after_relocation"] + c["womv_reused_in_place"];
            assert!(collected > 0, "{what}: the GC never ran");
            if code == "none" {
                assert_eq!(c["womv_reprograms"], 0, "{what}");
            } else {
                assert!(c["womv_reprograms"] > 0, "{what}: no page was rewritten");
            }
        }
    }
}
