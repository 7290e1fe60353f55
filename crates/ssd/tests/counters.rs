//! Goal: the SSD's counters add up, so the write amplification and endurance figures built on
//! them can be trusted; a run is deterministic; the SLC evictor policies differ as ScalaAFA
//! says they should.
//!
//! Method: seeded random writes, reads, trims and flushes on the simulated runtime (payload
//! `none` where bytes do not matter), then identities between independent counters: units
//! programmed (from the NAND page counts) = host units + GC copies + SLC evictions + padding;
//! erases = lines collected or evicted x planes; SLC-mode programs carry exactly the host
//! units when an SLC cache fronts the device; with MV-FTL's compaction, units handed to the
//! FTL = host units - compacted pages + units packed into them. Two runs of the same seed must give identical
//! counters and the same virtual end time.

use std::collections::BTreeMap;
use std::sync::Arc;

use flashrig_blockdev::{BlockDevice, DevRef, WriteHints};
use flashrig_runtime::{now_ns, run, spawn, RuntimeKind};
use flashrig_ssd::config::{EvictorPolicy, SsdConfig};
use flashrig_ssd::{PayloadMode, Ssd};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Runs `ops` random 4 KiB commands (`transient_percent` of writes hinted transient) at
/// queue depth 8; returns the counters and the virtual end time.
fn workload(
    cfg: SsdConfig,
    seed: u64,
    ops: u64,
    hot_blocks: Option<u64>,
    transient_percent: u64,
) -> (BTreeMap<String, u64>, u64) {
    let (out, _) = run(RuntimeKind::Sim, 1, move || async move {
        let ssd = Arc::new(Ssd::new("ssd", &cfg).unwrap());
        let dev: DevRef = ssd.clone();
        let blocks = dev.info().num_blocks;
        let bs = dev.info().block_size as usize;
        let mut tasks = Vec::new();
        for q in 0..8u64 {
            let dev = dev.clone();
            tasks.push(spawn(async move {
                let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed * 64 + q);
                let mut buf = vec![0u8; bs];
                for i in 0..ops / 8 {
                    let r = rng.next_u64();
                    let transient = r % 100 < transient_percent;
                    // Transient data is rewritten in a small hot range, so it dies young.
                    let span = match (transient, hot_blocks) {
                        (true, Some(h)) => h,
                        _ => blocks,
                    };
                    let lba = (r >> 8) % span;
                    match r % 20 {
                        0..=13 => {
                            buf[..8].copy_from_slice(&i.to_le_bytes());
                            let hints = WriteHints { transient, ..WriteHints::NONE };
                            dev.write(lba, &buf, None, hints).await.unwrap();
                        }
                        14..=17 => dev.read(lba, &mut buf, None).await.unwrap(),
                        18 => dev.trim(lba, 1).await.unwrap(),
                        _ => dev.flush().await.unwrap(),
                    }
                }
            }));
        }
        for t in tasks {
            t.await;
        }
        (dev.metrics().unwrap().snapshot().counters, now_ns())
    });
    out
}

fn units_programmed(c: &BTreeMap<String, u64>, cfg: &SsdConfig) -> u64 {
    let pages: u64 =
        ["slc", "mlc", "tlc", "qlc"].iter().map(|k| c[&format!("nand_page_programs_{k}")]).sum();
    let g = &cfg.geometry;
    let f = &cfg.firmware;
    if f.iu_bytes >= g.page_bytes {
        pages / (f.iu_bytes / g.page_bytes) as u64
    } else {
        pages * (g.page_bytes / f.iu_bytes) as u64
    }
}

fn check_identities(cfg: &SsdConfig, c: &BTreeMap<String, u64>) {
    let programmed = units_programmed(c, cfg);
    assert_eq!(
        programmed,
        c["ftl_host_units"] + c["gc_copies"] + c["slc_evictions"] + c["pad_units"],
        "NAND units programmed = host + GC copies + SLC evictions + padding; {c:?}"
    );
    let planes = cfg.geometry.planes() as u64;
    assert_eq!(c["block_erases"], (c["gc_lines"] + c["slc_evicted_lines"]) * planes);
    let commands = c["host_write_cmds"] + c["host_read_cmds"] + c["host_trims"] + c["host_flushes"];
    assert!(commands > 0);
    assert!(c["gc_lines"] > 0, "GC never ran");
}

#[test]
fn counters_add_up_on_every_layout() {
    let mut qlc = SsdConfig::preset("tiny-qlc").unwrap();
    qlc.payload = PayloadMode::None;
    let mut big_pages = SsdConfig::preset("tiny").unwrap();
    big_pages.geometry.page_bytes = 16384;
    big_pages.geometry.pages_per_block = 24;
    big_pages.geometry.oob_bytes_per_page = 128;
    let mut slc = SsdConfig::preset("tiny-slc").unwrap();
    slc.payload = PayloadMode::None;
    for cfg in [SsdConfig::preset("tiny").unwrap(), qlc, big_pages, slc] {
        let (c, _) = workload(cfg.clone(), 3, 60_000, None, 0);
        check_identities(&cfg, &c);
        if cfg.firmware.slc_cache_bytes > 0 {
            // Host writes land in SLC; the dense blocks receive only evictions and GC copies.
            assert_eq!(c["nand_page_programs_slc"], c["ftl_host_units"] + c["pad_units"]);
            assert!(c["slc_evicted_lines"] > 0);
        }
    }
}

#[test]
fn same_seed_same_counters_and_time() {
    let cfg = SsdConfig::preset("tiny").unwrap();
    let a = workload(cfg.clone(), 9, 20_000, None, 0);
    let b = workload(cfg.clone(), 9, 20_000, None, 0);
    assert_eq!(a, b);
    let c = workload(cfg, 10, 20_000, None, 0);
    assert_ne!(a.0, c.0, "a different seed should change something");
}

/// MV-FTL with compaction (WAFLASH §3.3) at 512-byte sectors, four 4 KiB units per 16 KiB
/// page, so write-back groups hold several single-sector partial units: the identities above
/// hold with compacted pages counted as one host unit each, idle merges (programmed into the
/// relocation stream, counted by `mv_idle_merges` alone) added to what NAND programmed, and
/// units the buffer handed the FTL = host units - compacted pages + units packed into them.
#[test]
fn counters_add_up_with_mv_ftl_compaction() {
    let mut cfg = SsdConfig::preset("tiny").unwrap();
    cfg.firmware.block_bytes = 512;
    cfg.firmware.ftl_policy = flashrig_ssd::config::FtlPolicy::Mv;
    cfg.geometry.page_bytes = 16384;
    cfg.geometry.pages_per_block = 24;
    cfg.geometry.oob_bytes_per_page = 1024;
    let (c, _) = workload(cfg.clone(), 4, 60_000, None, 0);
    eprintln!("{c:?}");
    assert_eq!(
        units_programmed(&c, &cfg),
        c["ftl_host_units"]
            + c["gc_copies"]
            + c["slc_evictions"]
            + c["pad_units"]
            + c["mv_idle_merges"],
        "NAND units programmed = host + GC copies + SLC evictions + padding + idle merges"
    );
    assert_eq!(
        c["buffer_writebacks"],
        c["ftl_host_units"] - c["mv_compacted_pages"] + c["mv_compacted_units"],
        "units handed to the FTL = host units - compacted pages + units packed"
    );
    assert!(c["mv_compacted_pages"] > 0, "nothing compacted");
    assert!(c["mv_compacted_units"] >= 2 * c["mv_compacted_pages"], "a page holds two or more");
    // Each partial unit written back over a mapped unit is compacted, versioned or read,
    // once; partial units of unmapped units are whole with zeros and take none.
    assert!(
        c["partial_writebacks"]
            >= c["mv_compacted_units"] + c["mv_versions_written"] + c["rmw_reads"]
    );
    let planes = cfg.geometry.planes() as u64;
    assert_eq!(c["block_erases"], (c["gc_lines"] + c["slc_evicted_lines"]) * planes);
    assert!(c["gc_lines"] > 0, "GC never ran");
}

#[test]
fn transient_aware_evictor_moves_fewer_units_to_dense_blocks() {
    // ScalaAFA §5.5: backup copies written transient die soon; an evictor that scores them
    // low leaves them in SLC until they die, so fewer units are copied to the dense blocks.
    let run_with = |ev: EvictorPolicy| {
        let mut cfg = SsdConfig::preset("tiny-slc").unwrap();
        cfg.payload = PayloadMode::None;
        cfg.firmware.slc_evictor = ev;
        workload(cfg, 5, 60_000, Some(2048), 50).0
    };
    let fifo = run_with(EvictorPolicy::Fifo);
    let transient = run_with(EvictorPolicy::Transient);
    eprintln!(
        "slc_evictions: fifo {} transient {}",
        fifo["slc_evictions"], transient["slc_evictions"]
    );
    assert!(
        transient["slc_evictions"] < fifo["slc_evictions"],
        "transient-aware eviction copied {} units, FIFO {}",
        transient["slc_evictions"],
        fifo["slc_evictions"]
    );
}

/// Each reactor has its own I/O queue: two reactors each keeping `queue_depth` commands in
/// flight never wait for a slot, while one reactor keeping twice as many does.
#[test]
fn every_reactor_has_its_own_io_queue() {
    let waits = |reactors: usize, per_reactor_qd: u64| {
        let (w, _) = flashrig_runtime::run(RuntimeKind::Sim, reactors, move || async move {
            let mut cfg = SsdConfig::preset("tiny").unwrap();
            cfg.firmware.queue_depth = 4;
            cfg.payload = PayloadMode::None;
            let ssd = Arc::new(Ssd::new("ssd", &cfg).unwrap());
            let mut hs = Vec::new();
            for r in 0..reactors {
                for q in 0..per_reactor_qd {
                    let dev = ssd.clone();
                    hs.push(flashrig_runtime::spawn_on(r, move || async move {
                        let buf = vec![0u8; 4096];
                        for i in 0..50u64 {
                            let lba = (r as u64 * 1000 + q * 50 + i) % 2000;
                            dev.write(lba, &buf, None, WriteHints::NONE).await.unwrap();
                        }
                    }));
                }
            }
            for h in hs {
                h.await;
            }
            flashrig_blockdev::snapshot_stack(ssd.as_ref()).counters["host_queue_waits"]
        });
        w
    };
    assert_eq!(waits(2, 4), 0, "two reactors at depth 4 each fit their own queues");
    assert!(waits(1, 8) > 0, "one reactor at depth 8 overflows its queue of 4");
}

/// The layer's latencies: one sample per host read and write, each the command's time in the
/// device (here on the sim runtime, where a command's completion is known at submission), so
/// a reader can tell which members of an array were slow. A write issued alone to an idle
/// device takes at least one program; a queue of writes waits behind each other.
#[test]
fn read_and_write_latencies_count_every_command_and_grow_with_queueing() {
    let cfg = SsdConfig::preset("tiny").unwrap();
    let program_ns = cfg.nand.program_ns.iter().copied().min().unwrap();
    let (snap, _) = run(RuntimeKind::Sim, 1, move || async move {
        let ssd = Arc::new(Ssd::new("ssd", &cfg).unwrap());
        let dev: DevRef = ssd.clone();
        let bs = dev.info().block_size as usize;
        // One write alone, then 32 at once (FUA, so each waits for its program), then reads.
        dev.write(0, &vec![1u8; bs], None, WriteHints { fua: true, ..WriteHints::NONE })
            .await
            .unwrap();
        let alone = dev.metrics().unwrap().snapshot().latencies["write_ns"].clone();
        let mut tasks = Vec::new();
        for i in 0..32u64 {
            let dev = dev.clone();
            tasks.push(spawn(async move {
                let hints = WriteHints { fua: true, ..WriteHints::NONE };
                dev.write(1 + i, &vec![2u8; bs], None, hints).await.unwrap();
            }));
        }
        for t in tasks {
            t.await;
        }
        let mut buf = vec![0u8; bs];
        for i in 0..5 {
            dev.read(i, &mut buf, None).await.unwrap();
        }
        (alone, dev.metrics().unwrap().snapshot().latencies)
    });
    let (alone, lat) = snap;
    assert_eq!(alone.count, 1);
    assert!(alone.min_ns >= program_ns, "{alone:?} against a {program_ns} ns program");
    assert_eq!(lat["write_ns"].count, 33, "{lat:?}");
    assert_eq!(lat["read_ns"].count, 5, "{lat:?}");
    assert!(lat["write_ns"].max_ns > alone.max_ns, "queued writes wait longer: {lat:?}");
    assert_eq!(lat["convert_ns"].count, 0, "no conversion was issued");
}
