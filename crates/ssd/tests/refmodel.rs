//! Goal: the emulated SSD stores and returns real bytes exactly as the block-device contract
//! says, while its firmware is busy: buffer merges and write-backs, read-modify-writes of
//! partial mapping units, garbage collection, SLC eviction, padding of partly filled pages.
//!
//! Method: the seeded random driver of `flashrig-check` runs reads, writes (with per-block
//! metadata and FUA), trims and flushes, several in flight, against SSDs built from the test
//! presets and a few overrides that cover each layout (one unit per page, four units per
//! page, one unit over four pages, 512-byte sectors), on the simulated runtime (one and two
//! reactors) and the real runtime. The span covers the whole device, so the writes overwrite
//! enough to run GC, and each case asserts from the counters that GC (and, with an SLC cache,
//! eviction) really ran. Payload mode `tag` is checked the same way against fingerprints.
//! WAFLASH's firmware runs here too: each write-buffer policy, and MV-FTL (`ftl_policy =
//! "mv"`, whose case asserts that new versions, reads of older versions and merges by GC and
//! in idle time all happened), with compaction of small partial units (§3.3) in mapping units
//! smaller than a page, whose case asserts that compacted pages were written, and PC-LRU's
//! batch destaging, which hands the compaction a region's small partial pages together. The
//! write-in-place firmware (`ftl_policy = "in_place"`) runs here too, and its case asserts
//! that it never collected or erased.
//! Failures print the seed; `FLASHRIG_SEED=<n>` reruns that case.

use std::sync::Arc;

use flashrig_blockdev::DevRef;
use flashrig_check::{run_check, seeds, CheckConfig, Model, OpWeights};
use flashrig_runtime::{run, RuntimeKind};
use flashrig_ssd::{tag_of, PayloadMode, Ssd, SsdConfig};
use parking_lot::Mutex;

fn preset(name: &str) -> SsdConfig {
    SsdConfig::preset(name).unwrap()
}

/// Runs the checker against a fresh SSD of `cfg`; returns the SSD's counters.
fn check(
    kind: RuntimeKind,
    reactors: usize,
    cfg: SsdConfig,
    ops: u64,
    seed: u64,
) -> std::collections::BTreeMap<String, u64> {
    let (res, _) = run(kind, reactors, move || async move {
        let ssd = Arc::new(Ssd::new("ssd", &cfg).unwrap());
        let dev: DevRef = ssd.clone();
        let info = dev.info().clone();
        let mut model = Model::for_device(&info, seed);
        if cfg.payload == PayloadMode::Tag {
            model.set_tag_mode(tag_of);
        }
        let model = Arc::new(Mutex::new(model));
        let bpi = (cfg.firmware.iu_bytes / cfg.firmware.block_bytes) as u64;
        let check = CheckConfig {
            seed,
            ops,
            queue_depth: 16,
            max_io_blocks: 2 * bpi.max(8),
            span_blocks: Some(info.num_blocks),
            weights: OpWeights { read: 25, write: 65, trim: 5, flush: 5 },
            spread_over_reactors: reactors > 1,
            // Idle time now and then (2 ms every 500 commands), for the firmware's idle-time
            // work: MV-FTL merges versions in the gaps the device is idle in.
            pause_every_ops: 500,
            pause_ns: 2_000_000,
            ..CheckConfig::default()
        };
        let r = run_check(dev.clone(), model, &check).await;
        (r.map(|_| ()), dev.metrics().unwrap().snapshot().counters)
    });
    let (r, counters) = res;
    if let Err(e) = r {
        panic!("{e}");
    }
    counters
}

fn assert_gc_ran(c: &std::collections::BTreeMap<String, u64>, what: &str) {
    assert!(c["gc_lines"] > 0, "{what}: GC never ran; counters {c:?}");
    assert_eq!(c["oob_mismatches"], 0, "{what}");
}

#[test]
fn tiny_on_every_runtime_with_gc() {
    for seed in seeds(1, 2) {
        for (kind, reactors) in
            [(RuntimeKind::Sim, 1), (RuntimeKind::Sim, 2), (RuntimeKind::Real, 2)]
        {
            let c = check(kind, reactors, preset("tiny"), 12_000, seed);
            assert_gc_ran(&c, &format!("tiny {kind:?}x{reactors} seed {seed}"));
        }
    }
}

#[test]
fn fifo_gc_and_write_through() {
    for seed in seeds(10, 2) {
        let mut cfg = preset("tiny");
        cfg.firmware.gc_policy = flashrig_ssd::config::GcPolicy::Fifo;
        assert_gc_ran(&check(RuntimeKind::Sim, 1, cfg.clone(), 12_000, seed), "fifo");
        cfg.firmware.buffer_bytes = 0;
        assert_gc_ran(&check(RuntimeKind::Sim, 1, cfg, 12_000, seed), "write-through");
    }
}

#[test]
fn four_units_per_page_and_512_byte_sectors() {
    for seed in seeds(20, 2) {
        let mut cfg = preset("tiny");
        cfg.geometry.page_bytes = 16384;
        cfg.geometry.pages_per_block = 24;
        cfg.geometry.oob_bytes_per_page = 128;
        let c = check(RuntimeKind::Sim, 1, cfg, 12_000, seed);
        assert_gc_ran(&c, "16 KiB pages");
        assert!(c["pad_units"] > 0, "flushes of a partly filled page should pad it");

        let mut cfg = preset("tiny");
        cfg.firmware.block_bytes = 512;
        cfg.geometry.oob_bytes_per_page = 256;
        let c = check(RuntimeKind::Sim, 1, cfg, 40_000, seed);
        assert_gc_ran(&c, "512-byte sectors");
        assert!(c["rmw_reads"] > 0, "sector writes should need read-modify-writes");
    }
}

/// The write-in-place firmware (`ftl_policy = "in_place"`, the P5800X's): whole units and
/// 512-byte sectors read back exactly, with no GC and no erase, and sector writes complete
/// their unit by a read-modify-write in place.
#[test]
fn in_place_firmware_without_gc() {
    for seed in seeds(25, 2) {
        for block_bytes in [4096u32, 512] {
            let mut cfg = preset("tiny");
            cfg.firmware.ftl_policy = flashrig_ssd::config::FtlPolicy::InPlace;
            cfg.firmware.block_bytes = block_bytes;
            cfg.geometry.oob_bytes_per_page = 256;
            let c = check(RuntimeKind::Sim, 1, cfg, 12_000, seed);
            let what = format!("in_place, {block_bytes}-byte blocks, seed {seed}");
            assert_eq!((c["gc_lines"], c["gc_copies"], c["block_erases"]), (0, 0, 0), "{what}");
            assert_eq!(c["oob_mismatches"], 0, "{what}");
            assert!(c["ftl_host_units"] > 0, "{what}: nothing reached the medium");
            if block_bytes == 512 {
                assert!(c["rmw_reads"] > 0, "{what}: sector writes should read-modify-write");
            }
        }
    }
}

#[test]
fn coarse_mapping_unit_over_qlc_pages() {
    for seed in seeds(30, 2) {
        let c = check(RuntimeKind::Sim, 1, preset("tiny-qlc"), 6_000, seed);
        assert_gc_ran(&c, "tiny-qlc");
        assert!(c["rmw_reads"] > 0);
        assert!(c["nand_page_programs_qlc"] > 0);
    }
}

#[test]
fn slc_cache_evicts_and_keeps_data() {
    for seed in seeds(40, 2) {
        // Every evictor under both eviction policies (`slc_eviction`, docs/ssd.md).
        for (ev, eviction) in ["fifo", "greedy", "transient"]
            .into_iter()
            .flat_map(|ev| ["paced", "inline"].map(|p| (ev, p)))
        {
            let mut t: toml::Table = "preset = \"tiny-slc\"".parse().unwrap();
            let mut fw = toml::Table::new();
            fw.insert("slc_evictor".into(), toml::Value::String(ev.into()));
            fw.insert("slc_eviction".into(), toml::Value::String(eviction.into()));
            t.insert("firmware".into(), toml::Value::Table(fw));
            let cfg = SsdConfig::resolve(&t).unwrap();
            let c = check(RuntimeKind::Sim, 1, cfg, 12_000, seed);
            assert!(c["slc_evicted_lines"] > 0, "{ev}: the SLC cache never evicted");
            assert!(c["nand_page_programs_slc"] > 0 && c["nand_page_programs_tlc"] > 0);
            assert_gc_ran(&c, ev);
        }
    }
}

#[test]
fn tag_payload_is_verified_on_read() {
    for seed in seeds(50, 2) {
        let mut cfg = preset("tiny");
        cfg.payload = PayloadMode::Tag;
        assert_gc_ran(&check(RuntimeKind::Sim, 1, cfg.clone(), 12_000, seed), "tag");
        cfg.firmware.block_bytes = 512;
        cfg.geometry.oob_bytes_per_page = 256;
        check(RuntimeKind::Sim, 1, cfg, 4_000, seed);
    }
}

/// A small SSD shaped as WAFLASH's: 512-byte sectors, pages of `page_kib` KiB mapped page by
/// page, a 64-page write buffer under `policy`, and the FTL `ftl`.
fn waflash_ssd(page_kib: u32, policy: &str, ftl: &str) -> SsdConfig {
    waflash_ssd_with_units(page_kib, page_kib, policy, ftl)
}

/// [`waflash_ssd`] with mapping units of `iu_kib` KiB, so one write-back group (a page's
/// worth of units) can hold several small partial units to compact.
fn waflash_ssd_with_units(page_kib: u32, iu_kib: u32, policy: &str, ftl: &str) -> SsdConfig {
    let text = format!(
        "preset = \"tiny\"\n\
         [geometry]\nblocks_per_plane = 40\npage_bytes = {}\npages_per_block = {}\n\
         oob_bytes_per_page = 1024\n\
         [firmware]\nblock_bytes = 512\niu_bytes = {}\nbuffer_bytes = {}\n\
         buffer_policy = \"{policy}\"\nftl_policy = \"{ftl}\"\n",
        page_kib * 1024,
        96 * 4 / page_kib,
        iu_kib * 1024,
        64 * page_kib * 1024,
    );
    SsdConfig::resolve(&text.parse().unwrap()).unwrap()
}

/// Every write-buffer policy (LRU, WAFLASH's PC-LRU, MCA) at 512-byte sectors with 4, 8 and
/// 16 KiB pages mapped page by page, as WAFLASH's SSD: the data stays exact through merges,
/// partial write-backs with read-modify-writes, and GC, and each policy's own mechanism ran
/// (the counters say partial pages were delayed and partial pages filled up in the buffer).
#[test]
fn every_buffer_policy_at_512_byte_sectors_and_4_to_16_kib_pages() {
    for seed in seeds(60, 2) {
        for page_kib in [4u32, 8, 16] {
            for policy in ["lru", "pc-lru", "mca"] {
                let cfg = waflash_ssd(page_kib, policy, "page");
                let what = format!("{policy} with {page_kib} KiB pages, seed {seed}");
                let c = check(RuntimeKind::Sim, 1, cfg, 30_000, seed);
                assert_gc_ran(&c, &what);
                assert!(c["partial_writebacks"] > 0, "{what}: no partial page written back");
                assert!(c["rmw_reads"] > 0, "{what}: no read-modify-write");
                assert!(c["buffer_partial_to_full"] > 0, "{what}: no partial page filled up");
                match policy {
                    "lru" => assert_eq!(c["buffer_delayed_partial"], 0, "{what}"),
                    _ => assert!(c["buffer_delayed_partial"] > 0, "{what}: nothing delayed"),
                }
                if policy == "pc-lru" {
                    assert!(c["buffer_pcd_samples"] > 0, "{what}: no PCD measured");
                }
            }
        }
    }
}

/// Runs the checker on [`waflash_ssd_with_units`] with MV-FTL, prints what MV-FTL did, and
/// asserts what every MV-FTL case must show: GC ran, reads took older versions, chains were
/// merged, and small partial pages left alone took the read-modify-write. Returns the case's
/// name and its counters.
fn mv_case(
    page_kib: u32,
    iu_kib: u32,
    policy: &str,
    seed: u64,
) -> (String, std::collections::BTreeMap<String, u64>) {
    let cfg = waflash_ssd_with_units(page_kib, iu_kib, policy, "mv");
    let what = format!("mv, {policy} with {page_kib} KiB pages of {iu_kib} KiB units, seed {seed}");
    println!("{what}");
    let c = check(RuntimeKind::Sim, 1, cfg, 30_000, seed);
    println!(
        "  {} versions written, {} compacted pages holding {} units, {} extra reads, {} merges \
         ({} idle), {} RMW reads, {} GC lines",
        c["mv_versions_written"],
        c["mv_compacted_pages"],
        c["mv_compacted_units"],
        c["mv_extra_reads"],
        c["mv_merges"],
        c["mv_idle_merges"],
        c["rmw_reads"],
        c["gc_lines"]
    );
    assert_gc_ran(&c, &what);
    assert!(c["mv_extra_reads"] > 0, "{what}: no read of an older version");
    assert!(c["mv_merges"] > 0, "{what}: no merge");
    assert!(c["rmw_reads"] > 0, "{what}: small partial pages take no RMW");
    (what, c)
}

/// MV-FTL (`ftl_policy = "mv"`, WAFLASH §3.2) under every write-buffer policy at 512-byte
/// sectors with 4, 8 and 16 KiB pages mapped page by page: the data stays exact while partial
/// pages become new versions, reads merge versions, GC and SLC-less idle time merge chains,
/// and small partial pages still take the read-modify-write. The counters say each happened.
#[test]
fn mv_ftl_under_every_buffer_policy_at_512_byte_sectors_and_4_to_16_kib_pages() {
    for seed in seeds(70, 2) {
        for page_kib in [4u32, 8, 16] {
            for policy in ["lru", "pc-lru", "mca"] {
                let (what, c) = mv_case(page_kib, page_kib, policy, seed);
                assert!(c["mv_versions_written"] > 0, "{what}: no new version; {c:?}");
                assert!(c["mv_idle_merges"] > 0, "{what}: no merge in idle time");
            }
        }
    }
}

/// MV-FTL with compaction (WAFLASH §3.3, `compaction_region_pages` at its default) under
/// every write-buffer policy at 512-byte sectors with 4, 8 and 16 KiB pages. Mapping units
/// are smaller than a page (2, 4 and 4 KiB), so a write-back group holds several units and
/// small partial ones of one region are packed into compacted pages (with one unit per page,
/// groups hold one unit until PC-LRU's batch destaging hands the FTL several). The data stays
/// exact while reads take sections out of compacted pages and older versions, GC, SLC-less
/// idle time and read-modify-writes merge them, and the counters say each happened.
#[test]
fn mv_ftl_compaction_under_every_buffer_policy_at_4_to_16_kib_pages() {
    let mut idle_merges = 0;
    for seed in seeds(80, 2) {
        for (page_kib, iu_kib) in [(4u32, 2u32), (8, 4), (16, 4)] {
            for policy in ["lru", "pc-lru", "mca"] {
                let (what, c) = mv_case(page_kib, iu_kib, policy, seed);
                assert!(c["mv_compacted_pages"] > 0, "{what}: nothing compacted; {c:?}");
                assert!(c["mv_compacted_units"] >= 2 * c["mv_compacted_pages"], "{what}");
                // Idle time comes and goes with the random commands: some case must merge in
                // it, not every one.
                idle_merges += c["mv_idle_merges"];
            }
        }
    }
    assert!(idle_merges > 0, "no merge in idle time");
}

/// `mv_idle_merge = false` (the bracket `flashrig reproduce waflash` runs Fig. 13 with):
/// MV-FTL merges nothing in idle time, yet GC still merges chains, and the data stays exact.
#[test]
fn mv_ftl_without_idle_merging_merges_only_in_gc() {
    for seed in seeds(95, 1) {
        let mut cfg = waflash_ssd_with_units(8, 8, "pc-lru", "mv");
        cfg.firmware.mv_idle_merge = false;
        let what = format!("mv without idle merging, seed {seed}");
        let c = check(RuntimeKind::Sim, 1, cfg, 30_000, seed);
        assert_gc_ran(&c, &what);
        assert_eq!(c["mv_idle_merges"], 0, "{what}");
        assert!(c["mv_merges"] > 0, "{what}: GC merged nothing");
    }
}

/// Compaction with payload `tag`: a compacted page keeps each packed block's fingerprint at
/// its packed index rather than the data bytes, and reads must still hand back each block's.
#[test]
fn mv_ftl_compaction_with_tag_payload() {
    for seed in seeds(90, 2) {
        let mut cfg = waflash_ssd_with_units(16, 4, "lru", "mv");
        cfg.payload = PayloadMode::Tag;
        let c = check(RuntimeKind::Sim, 1, cfg, 20_000, seed);
        assert_gc_ran(&c, &format!("tag, seed {seed}"));
        assert!(c["mv_compacted_pages"] > 0, "seed {seed}: nothing compacted");
    }
}

/// WAFLASH's firmware with §3.3's batch destaging: PC-LRU over MV-FTL with a compaction
/// region, payload full, at 4, 8 and 16 KiB pages. Small partial pages of one region leave
/// the buffer together in one write-back group (the counter says batches were destaged), the
/// FTL packs them into compacted pages even with one mapping unit per page, and the data read
/// back is what was written.
#[test]
fn waflash_batch_destaging_keeps_data_exact() {
    for seed in seeds(80, 2) {
        for page_kib in [4u32, 8, 16] {
            let mut cfg = waflash_ssd(page_kib, "pc-lru", "mv");
            cfg.payload = PayloadMode::Full;
            // Small regions, so the checker's random addresses often share one.
            cfg.firmware.compaction_region_pages = 16;
            let what = format!("batch destaging with {page_kib} KiB pages, seed {seed}");
            let c = check(RuntimeKind::Sim, 1, cfg, 30_000, seed);
            assert_gc_ran(&c, &what);
            assert!(c["buffer_batch_destaged"] > 0, "{what}: no batch destaged; {c:?}");
            assert!(c["mv_compacted_pages"] > 0, "{what}: nothing compacted; {c:?}");
        }
    }
}
