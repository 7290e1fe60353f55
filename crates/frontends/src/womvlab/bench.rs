//! `flashrig bench womv`: the simulation speed of WOM-v coding, in the FTL alone and in the
//! emulated SSD, beside NO_WOM in the same run (docs/benchmarks.md, "The WOM-v SSD").

use std::sync::Arc;
use std::time::Instant;

use flashrig_blockdev::{DevRef, WriteHints};
use flashrig_runtime::{run, spawn, RuntimeKind};
use flashrig_ssd::config::{Womv, WomvGc};
use flashrig_ssd::firmware::womv::{FtlConfig, GcPolicy, VictimPolicy, WomCode, WomFtl};
use flashrig_ssd::{PayloadMode, Ssd, SsdConfig};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// One mode's measurement.
#[derive(Clone, Debug)]
pub struct BenchRow {
    pub mode: &'static str,
    pub writes: u64,
    pub secs: f64,
    /// Coded (or plain) page programs per host write, GC included.
    pub programs_per_write: f64,
}

/// `flashrig bench womv`: host writes per wall-second of the WOM-v FTL with 4 KiB pages
/// (32,768 cells under WOM-v(1,4)), uniform random writes of random data at 75% of the space
/// the GC rotates through, for NO_WOM, WOM-v(2,4) with the default GC (read, encode, program)
/// and in NR mode with GC_OPT, in the same run.
pub fn bench_ftl(writes: u64) -> Vec<BenchRow> {
    let modes: [(&'static str, Option<&str>, bool, GcPolicy); 3] = [
        ("NO_WOM", None, false, GcPolicy::Relocate),
        ("wom-v(2,4)", Some("wom-v(2,4)"), false, GcPolicy::Relocate),
        (
            "wom-v(2,4)-NR-GC_OPT",
            Some("wom-v(2,4)"),
            true,
            GcPolicy::ReuseInPlace { min_programmable_pages: 0 },
        ),
    ];
    let mut out = Vec::new();
    for (label, code, no_read, gc) in modes {
        let config = FtlConfig {
            code: code.map(|c| WomCode::builtin(c).expect("built-in")),
            no_read,
            gc,
            victim: VictimPolicy::Greedy,
            erase_units: 64,
            pages_per_erase_unit: 64,
            logical_pages: 61 * 64 * 3 / 4,
            page_bytes: 4096,
            ecc_fraction: 0.03,
            gc_free_erase_units: 2,
        };
        let logical = config.logical_pages;
        let mut ftl = WomFtl::new(config).expect("a valid configuration");
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(9);
        let mut data = vec![0u8; 4096];
        let start = std::time::Instant::now();
        for _ in 0..writes {
            rng.fill_bytes(&mut data);
            let lpn = (rng.next_u64() % logical as u64) as u32;
            ftl.write(lpn, &data).expect("the FTL has room for its user pages");
        }
        let secs = start.elapsed().as_secs_f64();
        let c = ftl.counters();
        out.push(BenchRow {
            mode: label,
            writes,
            secs,
            programs_per_write: c.page_programs as f64 / c.host_writes as f64,
        });
    }
    out
}

/// The SSD of the WOM-v SSD benchmark: `tiny`'s geometry (4 planes, 64 blocks of 96 pages of
/// 4 KiB) with the thesis' FEMU QLC timings, write-through (pblk's ring buffer is on the
/// host), full payload, and the WOM-v firmware in `womv` (`None`: the page map).
fn bench_device(womv: Option<Womv>) -> SsdConfig {
    let mut cfg = SsdConfig::preset("tiny").expect("preset");
    cfg.nand = SsdConfig::preset("qlc-femu").expect("preset").nand;
    cfg.firmware.buffer_bytes = 0;
    cfg.payload = PayloadMode::Full;
    cfg.womv = womv.map(Box::new);
    cfg
}

/// `flashrig bench womv`: host writes per wall-second of the emulated SSD on the simulated
/// runtime, for the page map, the WOM-v firmware without a code (NO_WOM), with WOM-v(2,4)
/// (default GC) and in NR mode with GC_OPT, in the same run: the same workload of 4 KiB
/// writes of seeded random data at QD32, uniformly over the WOM-v(2,4) device's logical space
/// (half of NO_WOM's on the same flash), after a sequential fill and as many random writes
/// again (so the GC runs in the measured part).
pub fn bench_ssd(writes: u64) -> Vec<BenchRow> {
    let wom =
        |code: &str, gc, no_read| Some(Womv { code: code.into(), gc, no_read, ..Womv::default() });
    let modes: [(&'static str, Option<Womv>); 4] = [
        ("page-map", None),
        ("NO_WOM", wom("none", WomvGc::Default, false)),
        ("wom-v(2,4)", wom("wom-v(2,4)", WomvGc::Default, false)),
        ("wom-v(2,4)-NR-GC_OPT", wom("wom-v(2,4)", WomvGc::GcOpt, true)),
    ];
    let span = {
        let ssd =
            Ssd::new("span", &bench_device(modes[2].1.clone())).expect("a valid configuration");
        flashrig_blockdev::BlockDevice::info(&ssd).num_blocks
    };
    let mut out = Vec::new();
    for (mode, womv) in modes {
        let cfg = bench_device(womv);
        let ((secs, programs_per_write), _) = run(RuntimeKind::Sim, 1, move || async move {
            let dev: DevRef = Arc::new(Ssd::new("bench", &cfg).expect("a valid configuration"));
            random_writes(&dev, span, span, 1, true).await;
            random_writes(&dev, writes, span, 2, false).await;
            let before = programs(&dev);
            let t = Instant::now();
            random_writes(&dev, writes, span, 3, false).await;
            let secs = t.elapsed().as_secs_f64();
            (secs, (programs(&dev) - before) as f64 / writes as f64)
        });
        out.push(BenchRow { mode, writes, secs, programs_per_write });
    }
    out
}

/// Host units programmed so far, GC copies included (coded pages under WOM-v).
fn programs(dev: &DevRef) -> u64 {
    let c = dev.metrics().expect("an SSD has metrics").snapshot().counters;
    match c.get("womv_page_programs") {
        Some(&p) => p,
        None => c["ftl_host_units"] + c["gc_copies"],
    }
}

/// `count` 4 KiB writes of seeded random data at QD32 over the first `span` blocks, in order
/// (`seq`) or uniformly at random. Not `workload::closed_loop`: its blocks are zeros but for a
/// counter, which a WOM-v page takes with almost no cell raised, so the coding would be
/// measured on its cheapest data.
async fn random_writes(dev: &DevRef, count: u64, span: u64, seed: u64, seq: bool) {
    let next = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let mut tasks = Vec::new();
    for q in 0..32u64 {
        let (dev, next) = (dev.clone(), next.clone());
        tasks.push(spawn(async move {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed * 1000 + q);
            let mut buf = vec![0u8; 4096];
            loop {
                let i = next.get();
                if i >= count {
                    break;
                }
                next.set(i + 1);
                let lba = if seq { i % span } else { rng.next_u64() % span };
                rng.fill_bytes(&mut buf);
                dev.write(lba, &buf, None, WriteHints::NONE)
                    .await
                    .expect("the SSD takes the write");
            }
        }));
    }
    for t in tasks {
        t.await;
    }
}
