//! Goal: `raid`, `twophase` and `scala` notice a member that has become much slower than its peers (a
//! drive in trouble, 100x latency) and serve reads of its blocks elsewhere: `raid` rebuilds the
//! chunk from the other members as long as all of them hold the stripe, `twophase` reads
//! another replica (or rebuilds a stripe chunk); both still send one read in
//! `SLOW_PROBE_EVERY` to the slow member to measure it, and `raid` never routes around when a
//! second member is missing (then the slow one is needed); `scala` reads a backup copy or
//! rebuilds from the parity instead of a slow primary.
//!
//! Method: arrays of RAM members with 10 us reads, one of them at 1 ms, on the simulated
//! runtime. After writing the array, single-block reads at seeded random addresses; every read
//! is checked against what was written, and each member's own read counter says where the
//! reads went.

use std::sync::Arc;

use flashrig_blockdev::{BlockDevice, DevRef, WriteHints};
use flashrig_check::seeds;
use flashrig_devices::RamDevice;
use flashrig_engines::latency::SLOW_PROBE_EVERY;
use flashrig_engines::raid::{Raid, RaidOptions, WriteMode};
use flashrig_engines::scala::{ConversionMode, Scala, ScalaOptions};
use flashrig_engines::twophase::{Twophase, TwophaseOptions};
use flashrig_runtime::{run, HostCosts, RuntimeKind};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

const BS: usize = 4096;
const SLOW: usize = 2;

fn rams(n: usize) -> Vec<Arc<RamDevice>> {
    rams_of(n, 256)
}

fn rams_of(n: usize, blocks: u64) -> Vec<Arc<RamDevice>> {
    (0..n)
        .map(|i| {
            let latency_ns = if i == SLOW { 1_000_000 } else { 10_000 };
            Arc::new(RamDevice::new(&format!("ram{i}"), BS as u32, blocks, 16, latency_ns))
        })
        .collect()
}

fn build() -> (Raid, Vec<Arc<RamDevice>>) {
    let rams = rams(5);
    let opt = RaidOptions {
        k: 4,
        m: 1,
        chunk_blocks: 4,
        write_mode: WriteMode::Any,
        cache_stripes: 0,
        costs: Arc::new(HostCosts::default()),
        lock_model: None,
    };
    let devs = rams.iter().map(|r| r.clone() as DevRef).collect();
    (Raid::new("raid", devs, opt).unwrap(), rams)
}

fn reads_of(r: &RamDevice) -> u64 {
    r.metrics().unwrap().counter("reads").get()
}

fn content(lba: u64) -> Vec<u8> {
    (0..BS).map(|i| (lba as usize * 31 + i) as u8).collect()
}

async fn fill(dev: &dyn BlockDevice, blocks: u64) {
    let data: Vec<u8> = (0..blocks).flat_map(content).collect();
    dev.write(0, &data, None, WriteHints::NONE).await.unwrap();
}

/// `count` single-block reads at random addresses, each checked.
async fn read_randomly(
    raid: &dyn BlockDevice,
    n: u64,
    rng: &mut Xoshiro256PlusPlus,
    count: usize,
    what: &str,
) {
    for _ in 0..count {
        let lba = rng.next_u64() % n;
        let mut buf = vec![0u8; BS];
        raid.read(lba, &mut buf, None).await.unwrap();
        assert!(buf == content(lba), "{what}: block {lba} read back wrong");
    }
}

/// Runs `count` checked random reads over the first `blocks` of `dev` and returns how many
/// reads each member served meanwhile and how many the array routed around its slow member;
/// asserts that at least 100 were routed and that the slow member served no more than its
/// probes (one read in `SLOW_PROBE_EVERY`, plus slack for the first and last).
async fn routed_reads(
    dev: &dyn BlockDevice,
    rams: &[Arc<RamDevice>],
    blocks: u64,
    rng: &mut Xoshiro256PlusPlus,
    count: usize,
    what: &str,
) -> Vec<u64> {
    let routed_counter = || dev.metrics().unwrap().counter("slow_reads_routed").get();
    let before: Vec<u64> = rams.iter().map(|r| reads_of(r)).collect();
    let routed = routed_counter();
    read_randomly(dev, blocks, rng, count, what).await;
    let served: Vec<u64> = rams.iter().zip(&before).map(|(r, b)| reads_of(r) - b).collect();
    let routed = routed_counter() - routed;
    assert!(routed > 100, "{what}: {routed} reads routed around, served {served:?}");
    assert!(
        served[SLOW] <= routed / (SLOW_PROBE_EVERY - 1) + 2,
        "{what}: the slow member served {} reads ({routed} routed around)",
        served[SLOW]
    );
    served
}

#[test]
fn reads_route_around_a_member_a_hundred_times_slower() {
    for seed in seeds(40, 3) {
        let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
            let what = format!("seed {seed} (FLASHRIG_SEED={seed} to rerun)");
            let (raid, rams) = build();
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            fill(&raid, raid.info().num_blocks).await;
            // Warm up: the averages learn the members' latencies.
            read_randomly(&raid, raid.info().num_blocks, &mut rng, 100, &what).await;
            assert!(raid.is_slow(SLOW), "{what}: the 1 ms member is slow");
            assert!((0..5).filter(|&i| i != SLOW).all(|i| !raid.is_slow(i)), "{what}");
            // About a fifth of the reads want the slow member's chunks; all but the probes are
            // rebuilt from the other four.
            let n = raid.info().num_blocks;
            let served = routed_reads(&raid, &rams, n, &mut rng, 1000, &what).await;
            assert!(served.iter().enumerate().all(|(i, &s)| i == SLOW || s > 200), "{served:?}");
        });
        res
    }
}

#[test]
fn with_another_member_missing_the_slow_member_is_read_anyway() {
    let (res, _) = run(RuntimeKind::Sim, 1, || async {
        let (raid, rams) = build();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(5);
        fill(&raid, raid.info().num_blocks).await;
        read_randomly(&raid, raid.info().num_blocks, &mut rng, 100, "warm-up").await;
        assert!(raid.is_slow(SLOW));
        raid.fail_member(0);
        let before = reads_of(&rams[SLOW]);
        let routed = raid.metrics().unwrap().counter("slow_reads_routed").get();
        read_randomly(&raid, raid.info().num_blocks, &mut rng, 300, "degraded").await;
        assert_eq!(raid.metrics().unwrap().counter("slow_reads_routed").get(), routed);
        assert!(reads_of(&rams[SLOW]) - before > 100, "the slow member serves: it is needed");
    });
    res
}

#[test]
fn twophase_reads_another_replica_than_the_slow_members() {
    for seed in seeds(60, 3) {
        let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
            let what = format!("seed {seed} (FLASHRIG_SEED={seed} to rerun)");
            let rams = rams(3);
            let devs: Vec<DevRef> = rams.iter().map(|r| r.clone() as DevRef).collect();
            // 2+1 keeps two replicas of every block in its log; 64 blocks stay below the
            // conversion watermark, so every read is a replica read.
            let tp = Twophase::create("tp", devs, TwophaseOptions::new(2, 1)).await.unwrap();
            let blocks = 64;
            fill(&tp, blocks).await;
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            read_randomly(&tp, blocks, &mut rng, 100, &what).await;
            assert!(tp.is_slow(SLOW), "{what}: the 1 ms member is slow");
            routed_reads(&tp, &rams, blocks, &mut rng, 600, &what).await;
        });
        res
    }
}

#[test]
fn scala_reads_around_a_slow_primary() {
    for seed in seeds(80, 3) {
        let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
            let what = format!("seed {seed} (FLASHRIG_SEED={seed} to rerun)");
            let rams = rams_of(3, 2048);
            let devs: Vec<DevRef> = rams.iter().map(|r| r.clone() as DevRef).collect();
            let opts = ScalaOptions {
                chunk_blocks: 2,
                conversion: ConversionMode::Host,
                ..ScalaOptions::new(2, 1)
            };
            let sc = Scala::create("sc", devs, opts).await.unwrap();
            let blocks = 64;
            fill(&sc, blocks).await;
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            read_randomly(&sc, blocks, &mut rng, 200, &what).await;
            assert!(sc.is_slow(SLOW), "{what}: the 1 ms member is slow");
            routed_reads(&sc, &rams, blocks, &mut rng, 600, &what).await;
        });
        res
    }
}
