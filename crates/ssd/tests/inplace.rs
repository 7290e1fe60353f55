//! Goal: the write-in-place firmware (`firmware.ftl_policy = "in_place"`, docs/ssd.md "Write
//! in place") does what 3D XPoint does and NAND cannot: every overwrite lands in the unit's
//! own slot, so the medium receives exactly the units the host wrote (write amplification 1),
//! with no garbage collection and no erase, while the data, its per-block metadata and trims
//! read back exactly across power cycles; and the `p5800x` preset uses it.
//!
//! Method: the `tiny` preset switched to `in_place`, write-through (no buffer), on the
//! simulated runtime. The whole logical space is overwritten four times in a seeded random
//! order and read back; counters come from the device's metrics. The same workload on the
//! page-map FTL must garbage-collect, so the comparison shows the counters can tell the two
//! apart. Configurations the firmware cannot serve are refused with a message naming the key.

use std::collections::BTreeMap;
use std::sync::Arc;

use flashrig_blockdev::{BlockDevice, WriteHints};
use flashrig_check::seeds;
use flashrig_runtime::{run, RuntimeKind};
use flashrig_ssd::config::FtlPolicy;
use flashrig_ssd::firmware::inplace::IN_PLACE_STEPS;
use flashrig_ssd::{Ssd, SsdConfig};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

const BS: usize = 4096;

fn in_place() -> SsdConfig {
    let mut cfg = SsdConfig::preset("tiny").unwrap();
    cfg.firmware.ftl_policy = FtlPolicy::InPlace;
    cfg.firmware.buffer_bytes = 0;
    cfg
}

/// Block `lba`'s content in overwrite pass `pass`.
fn block(seed: u64, lba: u64, pass: u64) -> Vec<u8> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ lba << 20 ^ pass << 52);
    let mut b = vec![0u8; BS];
    rng.fill_bytes(&mut b);
    b
}

fn md(lba: u64, pass: u64, md_bytes: usize) -> Vec<u8> {
    (0..md_bytes).map(|i| (lba as u8) ^ (pass as u8).wrapping_mul(7) ^ i as u8).collect()
}

fn counters(dev: &dyn BlockDevice) -> BTreeMap<String, u64> {
    dev.metrics().unwrap().snapshot().counters
}

/// Overwrites every block of a fresh device of `cfg` `passes` times, each pass in a seeded
/// random order, power-cycles it, and checks every block (and its metadata) is the last
/// pass's; returns the counters and the recovery steps' names.
fn overwrite_all(cfg: SsdConfig, seed: u64, passes: u64) -> (BTreeMap<String, u64>, Vec<String>) {
    let (out, _) = run(RuntimeKind::Sim, 1, move || async move {
        let ssd = Arc::new(Ssd::new("ssd", &cfg).unwrap());
        let dev: &dyn BlockDevice = ssd.as_ref();
        let n = dev.info().num_blocks;
        let md_bytes = dev.info().md_bytes_per_block as usize;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        for pass in 0..passes {
            let mut order: Vec<u64> = (0..n).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
            }
            for lba in order {
                let m = md(lba, pass, md_bytes);
                let m = (md_bytes > 0).then_some(&m[..]);
                dev.write(lba, &block(seed, lba, pass), m, WriteHints::NONE).await.unwrap();
            }
        }
        dev.flush().await.unwrap();
        let report = ssd.power_cycle();
        let steps = report.steps.iter().skip(1).map(|s| s.name.to_string()).collect();
        let (mut buf, mut got_md) = (vec![0u8; BS], vec![0u8; md_bytes]);
        for lba in 0..n {
            let m = (md_bytes > 0).then_some(&mut got_md[..]);
            dev.read(lba, &mut buf, m).await.unwrap();
            assert!(buf == block(seed, lba, passes - 1), "seed {seed}: block {lba} differs");
            assert_eq!(got_md, md(lba, passes - 1, md_bytes), "seed {seed}: metadata of {lba}");
        }
        (counters(dev), steps)
    });
    out
}

#[test]
fn overwrites_land_in_place_with_no_gc_and_no_erase() {
    for seed in seeds(1, 2) {
        let (c, steps) = overwrite_all(in_place(), seed, 4);
        let written = c["host_write_bytes"] / BS as u64;
        assert_eq!(c["ftl_host_units"], written, "seed {seed}: write amplification is not 1");
        assert_eq!((c["gc_lines"], c["gc_copies"], c["block_erases"]), (0, 0, 0), "seed {seed}");
        assert_eq!(steps, IN_PLACE_STEPS, "seed {seed}: recovery steps");

        // The page map, on the same medium and workload, cannot avoid collecting.
        let mut page = in_place();
        page.firmware.ftl_policy = FtlPolicy::Page;
        let (c, _) = overwrite_all(page, seed, 4);
        assert!(c["gc_copies"] > 0 && c["block_erases"] > 0, "seed {seed}: {c:?}");
    }
}

#[test]
fn trims_and_sector_writes_are_kept_across_power_cycles() {
    let mut cfg = in_place();
    cfg.firmware.block_bytes = 512;
    cfg.geometry.oob_bytes_per_page = 256;
    let (out, _) = run(RuntimeKind::Sim, 1, move || async move {
        let ssd = Arc::new(Ssd::new("ssd", &cfg).unwrap());
        let dev: &dyn BlockDevice = ssd.as_ref();
        // Units 0 and 1 (eight sectors each), then one sector rewritten in unit 0 and unit 1
        // trimmed.
        let a: Vec<u8> = (0..16 * 512).map(|i| (i / 512) as u8 + 1).collect();
        dev.write(0, &a, None, WriteHints::NONE).await.unwrap();
        dev.write(3, &[0xee; 512], None, WriteHints::NONE).await.unwrap();
        dev.trim(8, 8).await.unwrap();
        let rmw = counters(dev)["rmw_reads"];
        ssd.power_cycle();
        let mut buf = vec![0u8; 16 * 512];
        dev.read(0, &mut buf, None).await.unwrap();
        (buf, a, rmw)
    });
    let (buf, a, rmw) = out;
    assert_eq!(rmw, 1, "the sector write completes its unit from the old content once");
    for s in 0..16 {
        let want: &[u8] = match s {
            3 => &[0xee; 512],
            8.. => &[0; 512],
            _ => &a[s * 512..(s + 1) * 512],
        };
        assert_eq!(&buf[s * 512..(s + 1) * 512], want, "sector {s}");
    }
}

#[test]
fn the_p5800x_preset_writes_in_place() {
    let cfg = SsdConfig::preset("p5800x").unwrap();
    assert_eq!(cfg.firmware.ftl_policy, FtlPolicy::InPlace);
    assert!(cfg.sources.contains_key("firmware.ftl_policy"));
}

#[test]
fn configurations_the_firmware_cannot_serve_are_refused() {
    /// A key the message must name, and the edit that breaks it.
    type Case = (&'static str, fn(&mut SsdConfig));
    let cases: [Case; 3] = [
        ("iu_bytes", |c| {
            // Four 4 KiB units per 16 KiB page.
            c.geometry.page_bytes = 16384;
            c.geometry.pages_per_block = 24;
            c.geometry.oob_bytes_per_page = 256;
        }),
        ("slc_cache_bytes", |c| c.firmware.slc_cache_bytes = 1 << 20),
        ("backing", |c| c.backing = Some("/tmp/flashrig-never-created.img".into())),
    ];
    for (key, edit) in cases {
        let mut cfg = in_place();
        edit(&mut cfg);
        let e = cfg.validate().expect_err(key);
        assert!(e.contains("in_place") && e.contains(key), "{key}: {e}");
    }
    // A zoned namespace has its own firmware.
    let mut zns = SsdConfig::preset("tiny-zns").unwrap();
    zns.firmware.ftl_policy = FtlPolicy::InPlace;
    let e = zns.validate().expect_err("zoned");
    assert!(e.contains("ftl_policy"), "{e}");
}
