//! Goal: the WOM-v firmware inside the emulated SSD (`[womv]`, docs/womv.md "The WOM-v SSD")
//! stores and returns the host's bytes and metadata through its garbage collection in every
//! mode, survives power cuts at random points, and charges the costs the thesis describes:
//! a coded page of WOM-v(2,4) programs two flash pages, the default mode reads each page it
//! writes first and NR mode does not, the page types of the QLC timings are used, erase
//! units are erased less often than without a code, and the space setups of §3.7 size the
//! logical space as stated. Timing-only payloads derive the cells from synthetic data whose
//! bit-change rate shows in the cells raised.
//!
//! Method: small QLC devices (the `tiny` geometry with the thesis' FEMU QLC timings, 4 KiB
//! pages, write-through) on the simulated runtime, written with seeded random data and read
//! back; counters come from the device's metrics. Power cuts at random points, checked
//! against the reference model in every mode, are in `crash.rs`
//! (`crashes_with_the_womv_firmware`, on the same device).

use std::collections::BTreeMap;

use flashrig_blockdev::{BlockDevice, WriteHints};
use flashrig_runtime::{run, RuntimeKind};
use flashrig_ssd::config::{CellType, PayloadMode, Womv, WomvGc, WomvSpace, WomvVictim};
use flashrig_ssd::{Ssd, SsdConfig};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// `tiny`'s geometry (4 planes, 96 pages per block) as QLC with the thesis' FEMU QLC timings
/// (jaffer-thesis-2023.txt §3.6.4), `blocks` erase units, write-through, WOM-v as given.
fn qlc(blocks: u32, womv: Womv) -> SsdConfig {
    let mut cfg = SsdConfig::preset("tiny").unwrap();
    let qlc = SsdConfig::preset("qlc-femu").unwrap();
    cfg.nand = qlc.nand;
    assert_eq!(cfg.nand.cell, CellType::Qlc);
    cfg.geometry.blocks_per_plane = blocks;
    cfg.firmware.buffer_bytes = 0;
    cfg.womv = Some(Box::new(womv));
    cfg
}

fn womv(code: &str, gc: WomvGc, no_read: bool) -> Womv {
    Womv { code: code.into(), gc, no_read, ..Womv::default() }
}

fn counters(dev: &dyn BlockDevice) -> BTreeMap<String, u64> {
    dev.metrics().unwrap().snapshot().counters
}

/// Writes `writes` random whole 4 KiB blocks of seeded random data into a fresh device of
/// `cfg`, then reads every written block back; returns the counters.
fn write_random(cfg: SsdConfig, seed: u64, writes: u64) -> BTreeMap<String, u64> {
    write_span(cfg, seed, writes, u64::MAX)
}

/// [`write_random`] over the first `span` blocks only.
fn write_span(cfg: SsdConfig, seed: u64, writes: u64, span: u64) -> BTreeMap<String, u64> {
    let (out, _) = run(RuntimeKind::Sim, 1, move || async move {
        let ssd = Ssd::new("ssd", &cfg).unwrap();
        let dev: &dyn BlockDevice = &ssd;
        let n = dev.info().num_blocks.min(span);
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut last = BTreeMap::new();
        for _ in 0..writes {
            let lba = rng.next_u64() % n;
            let mut b = vec![0u8; 4096];
            rng.fill_bytes(&mut b);
            dev.write(lba, &b, None, WriteHints::default())
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: write of block {lba}: {e}"));
            last.insert(lba, b);
        }
        if cfg.payload == PayloadMode::Full {
            for (lba, want) in &last {
                let mut got = vec![0u8; 4096];
                dev.read(*lba, &mut got, None).await.unwrap();
                assert!(got == *want, "seed {seed}: block {lba} reads back different bytes");
            }
        }
        counters(dev)
    });
    out
}

/// The costs of §3.6.3-§3.6.4 on the NAND counters: every coded page of WOM-v(2,4) is two
/// flash pages programmed; the default mode reads the flash pages of each page it writes,
/// NR mode reads none on a workload without GC; all four QLC page types are programmed.
#[test]
fn coded_pages_cost_what_the_thesis_says() {
    for no_read in [false, true] {
        let c = write_random(qlc(12, womv("wom-v(2,4)", WomvGc::Default, no_read)), 1, 600);
        let what = format!("no_read = {no_read}");
        assert_eq!(c["womv_gc_writes"], 0, "{what}: 600 writes should not need the GC");
        assert_eq!(c["nand_page_programs_qlc"], 2 * c["womv_page_programs"], "{what}");
        // Reads: the read-back (two flash pages per unit), plus the reads before write.
        let read_back = 2 * c["ftl_host_units"].min(c["host_read_cmds"]);
        let before_write = c["nand_page_reads_qlc"] - 2 * c["host_read_cmds"];
        if no_read {
            assert_eq!(c["womv_reads_before_write"], 0, "{what}");
            assert_eq!(before_write, 0, "{what}");
        } else {
            assert_eq!(c["womv_reads_before_write"], 600, "{what}");
            assert_eq!(before_write, 2 * 600, "{what}");
        }
        assert!(read_back > 0, "{what}");
    }
}

/// §3.7.4's wide pages (`wide_pages = true`): a coded page is timed as one flash page of its
/// size, so WOM-v(2,4) charges one program per coded page instead of two, and the planes are
/// busy for about half as long on the same writes; the bytes still come back.
#[test]
fn wide_pages_time_a_coded_page_as_one_program() {
    let run = |wide: bool| {
        let w = Womv { wide_pages: wide, ..womv("wom-v(2,4)", WomvGc::Default, false) };
        write_random(qlc(12, w), 3, 600)
    };
    let (narrow, wide) = (run(false), run(true));
    assert_eq!(narrow["womv_page_programs"], wide["womv_page_programs"], "the same FTL work");
    assert_eq!(narrow["nand_page_programs_qlc"], 2 * narrow["womv_page_programs"]);
    assert_eq!(wide["nand_page_programs_qlc"], wide["womv_page_programs"]);
    let (n, w) = (narrow["nand_plane_busy_ns"], wide["nand_plane_busy_ns"]);
    println!("plane busy: 4 KiB pages {n} ns, wide pages {w} ns");
    assert!(w * 10 < n * 6, "wide pages keep the planes busy {w} ns against {n} ns");
}

/// Over many overwrites of a workload space smaller than either device's (as §3.7's second
/// setup runs a 1 GB workload on the same 4 GB device), WOM-v(2,4) erases fewer erase units
/// per host write than NO_WOM on the same physical device, and GC_OPT fewer still (the
/// direction of §3.7.3). The same data (random, so WOM-v's worst case) goes to each.
#[test]
fn coding_erases_less_than_no_wom() {
    let erases = |code: &str, gc| {
        let c = write_span(qlc(12, womv(code, gc, false)), 2, 12_000, 1024);
        c["womv_erases"] as f64 / c["ftl_host_units"] as f64
    };
    let none = erases("none", WomvGc::Default);
    let wom = erases("wom-v(2,4)", WomvGc::Default);
    let opt = erases("wom-v(2,4)", WomvGc::GcOpt);
    println!("erases per host write: NO_WOM {none:.4}, WOM-v(2,4) {wom:.4}, GC_OPT {opt:.4}");
    assert!(none > 0.0, "NO_WOM never erased");
    assert!(wom < none, "WOM-v(2,4) {wom} vs NO_WOM {none}");
    assert!(opt < wom, "GC_OPT {opt} vs the default GC {wom}");
}

/// GC_OPT leaves valid pages in the units it puts back in the pool; with either victim
/// policy the GC must still find room when every closed unit is full or too full to
/// relocate (it takes a pool unit then), so the writes never run out of space while invalid
/// pages remain.
#[test]
fn gc_opt_never_runs_out_of_space_with_either_victim_policy() {
    for victim in [WomvVictim::Greedy, WomvVictim::Lrw] {
        let mut w = womv("wom-v(2,4)", WomvGc::GcOpt, false);
        w.victim = victim;
        // write_span panics (naming the seed) if a write fails.
        let c = write_span(qlc(12, w), 4, 12_000, 1024);
        assert!(c["womv_reused_in_place"] > 0, "{victim:?}: GC_OPT never reused a unit");
    }
}

/// §3.7's setups: the same physical device exports k/n of the logical space (half under
/// WOM-v(2,4), a quarter under (1,4)); the same logical space keeps NO_WOM's.
#[test]
fn space_setups_size_the_logical_space() {
    let blocks = |code: &str, space| {
        let mut w = womv(code, WomvGc::Default, false);
        w.space = space;
        Ssd::new("ssd", &qlc(24, w)).unwrap().info().num_blocks
    };
    let none = blocks("none", WomvSpace::SamePhysical);
    for (code, factor) in [("wom-v(2,4)", 2), ("wom-v(1,4)", 4)] {
        let physical = blocks(code, WomvSpace::SamePhysical);
        assert!(physical * factor <= none && physical * factor > none * 9 / 10, "{code}");
        assert_eq!(blocks(code, WomvSpace::SameLogical), none, "{code}");
    }
}

/// Timing-only payloads: the cells come from synthetic data, and a higher bit-change rate
/// (between a flash page's old data and what overwrites it) raises more cells per write;
/// fingerprints still read back.
#[test]
fn timing_only_runs_use_the_bit_change_rate() {
    let raised = |percent: f64| {
        let mut w = womv("wom-v(2,4)", WomvGc::Default, false);
        w.bit_change_percent = percent;
        let mut cfg = qlc(12, w);
        cfg.payload = PayloadMode::Tag;
        let (c, _) = run(RuntimeKind::Sim, 1, move || async move {
            let dev = Ssd::new("ssd", &cfg).unwrap();
            let span = 1000u64;
            for pass in 0..8u64 {
                for lba in 0..span {
                    let b = vec![(lba ^ pass << 5) as u8; 4096];
                    dev.write(lba, &b, None, WriteHints::default()).await.unwrap();
                }
            }
            for lba in (0..span).step_by(7) {
                let mut got = vec![0u8; 4096];
                dev.read(lba, &mut got, None).await.unwrap();
                let want = flashrig_ssd::tag_of(&vec![(lba ^ 7 << 5) as u8; 4096]);
                assert_eq!(got[..8], want.to_le_bytes(), "block {lba}'s fingerprint");
            }
            counters(&dev)
        });
        c["womv_cells_raised"] as f64 / c["womv_page_programs"] as f64
    };
    let (low, high) = (raised(2.0), raised(50.0));
    println!("cells raised per program: 2% -> {low:.0}, 50% -> {high:.0}");
    assert!(low * 3.0 < high, "2%: {low}, 50%: {high}");
}

/// Configurations the firmware cannot serve are refused, naming the key.
#[test]
fn bad_womv_configurations_name_their_key() {
    let bad = |f: &dyn Fn(&mut SsdConfig), key: &str| {
        let mut cfg = qlc(12, Womv::default());
        f(&mut cfg);
        let e = Ssd::new("ssd", &cfg).err().unwrap_or_else(|| panic!("{key} accepted"));
        let e = e.to_string();
        assert!(e.contains(key), "{key}: {e}");
    };
    bad(&|c| c.womv.as_mut().unwrap().code = "wom-v(9,4)".into(), "womv.code");
    let no_wom = |c: &mut SsdConfig| c.womv.as_mut().unwrap().code = "none".into();
    bad(
        &|c| {
            no_wom(c);
            c.womv.as_mut().unwrap().gc = WomvGc::GcOpt
        },
        "womv.gc",
    );
    bad(
        &|c| {
            no_wom(c);
            c.womv.as_mut().unwrap().no_read = true
        },
        "womv.no_read",
    );
    bad(&|c| c.firmware.slc_cache_bytes = 1 << 20, "slc_cache_bytes");
    bad(&|c| c.womv.as_mut().unwrap().ecc_threshold_percent = 60.0, "ecc_threshold_percent");
    bad(&|c| c.geometry.blocks_per_plane = 3, "womv");
    bad(&|c| c.nand = SsdConfig::preset("tiny").unwrap().nand, "nand.cell");
    let t: toml::Table =
        "preset = \"tiny\"\n[womv]\ncode = \"wom-v(1,4)\"\nspeed = 3".parse().unwrap();
    let e = SsdConfig::resolve(&t).unwrap_err();
    assert!(e.contains("speed"), "{e}");
}
