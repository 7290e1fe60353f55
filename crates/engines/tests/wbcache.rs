//! Goal: `wbcache`, the Open-CAS-like write-back cache (CSAL's "Open-CAS" baseline), returns
//! what was written while eviction, ALRU cleaning and the sequential cutoff move data between
//! its members, and each mechanism does what OCF does: an LRU eviction writes back exactly
//! the dirty sectors of the victim line as maximal contiguous runs (counted in the flush-size
//! buckets); the ALRU cleaner writes back a dirty line once its last write is older than the
//! staleness time and not before, and not at all while the cache keeps seeing I/O; a
//! sequential stream that reaches the cutoff threshold while the cache is full bypasses it,
//! invalidating the cached copies of what it overwrites.
//!
//! Method: RAM members (cache and core) on the simulated runtime, so every time value is
//! virtual and the OCF defaults (20 s wake-up, 120 s staleness, 10 s activity threshold) are
//! tested as they are. The targeted tests read the core RAM device directly to see what was
//! written back. The randomized test runs the reference-model driver (`run_check`) over a
//! cache of a few small lines with short cleaning times and a low cutoff threshold, checking
//! every payload byte, on one reactor and spread over two; its seeds come from
//! `flashrig_check::seeds` and a failure names `FLASHRIG_SEED=<n>`.

use std::sync::Arc;

use flashrig_blockdev::{BlockDevice, DevRef, WriteHints};
use flashrig_check::{run_check, seeds, CheckConfig, Model};
use flashrig_devices::RamDevice;
use flashrig_engines::wbcache::{CleaningPolicy, SeqCutoffPolicy, Wbcache, WbcacheOptions};
use flashrig_runtime::{now_ns, run, sleep_ns, RuntimeKind};
use parking_lot::Mutex;

const BS: usize = 4096;
const LATENCY_NS: u64 = 10_000;
const SECOND_NS: u64 = 1_000_000_000;

fn ram(name: &str, blocks: u64) -> Arc<RamDevice> {
    Arc::new(RamDevice::new(name, BS as u32, blocks, 0, LATENCY_NS))
}

fn build(
    cache_blocks: u64,
    core_blocks: u64,
    opts: WbcacheOptions,
) -> (Arc<Wbcache>, Arc<RamDevice>) {
    let core = ram("core", core_blocks);
    let members: Vec<DevRef> = vec![ram("cache", cache_blocks), core.clone()];
    (Arc::new(Wbcache::new("wbc", members, opts).expect("wbcache")), core)
}

fn counter(w: &Wbcache, name: &str) -> u64 {
    w.metrics().unwrap().snapshot().counters.get(name).copied().unwrap_or(0)
}

/// `blocks` blocks whose bytes name their LBA and `salt`.
fn data(lba: u64, blocks: u64, salt: u8) -> Vec<u8> {
    let mut v = vec![0u8; blocks as usize * BS];
    for (i, b) in v.chunks_mut(BS).enumerate() {
        b[..8].copy_from_slice(&(lba + i as u64).to_le_bytes());
        b[8..].fill(salt);
    }
    v
}

async fn read(dev: &dyn BlockDevice, lba: u64, blocks: u64) -> Vec<u8> {
    let mut buf = vec![0u8; blocks as usize * BS];
    dev.read(lba, &mut buf, None).await.unwrap();
    buf
}

fn no_background() -> WbcacheOptions {
    WbcacheOptions {
        cleaning: CleaningPolicy::Nop,
        seq_cutoff_policy: SeqCutoffPolicy::Never,
        ..WbcacheOptions::default()
    }
}

#[test]
fn defaults_are_ocfs() {
    let o = WbcacheOptions::default();
    assert_eq!(o.line_bytes, 64 << 10);
    assert_eq!(o.cleaning, CleaningPolicy::Alru);
    assert_eq!(
        (o.wake_up_ns, o.staleness_ns, o.activity_threshold_ns, o.flush_max_buffers),
        (20 * SECOND_NS, 120 * SECOND_NS, 10 * SECOND_NS, 100)
    );
    assert_eq!(
        (o.seq_cutoff_policy, o.seq_cutoff_threshold_bytes),
        (SeqCutoffPolicy::Full, 1 << 20)
    );
}

/// Line 0 holds dirty sectors {0,1}, {4} and {10,11,12}; evicting it writes three runs of 2,
/// 1 and 3 blocks to the core and nothing else.
#[test]
fn eviction_writes_back_exactly_the_dirty_runs() {
    let ((), _) = run(RuntimeKind::Sim, 1, || async {
        // Two 64 KiB lines of 16 blocks.
        let (w, core) = build(32, 1024, no_background());
        for (lba, n) in [(0, 2), (4, 1), (10, 3)] {
            w.write(lba, &data(lba, n, 1), None, WriteHints::NONE).await.unwrap();
        }
        assert_eq!(w.line_state(0), Some((0b1_1100_0001_0011, 0b1_1100_0001_0011)));
        w.write(16, &data(16, 1, 2), None, WriteHints::NONE).await.unwrap();
        assert_eq!(counter(&w, "flush_writes"), 0, "nothing written back before eviction");
        // A third line evicts the least recently used, line 0.
        w.write(32, &data(32, 1, 3), None, WriteHints::NONE).await.unwrap();
        assert_eq!(w.line_state(0), None);
        assert_eq!(counter(&w, "evictions"), 1);
        assert_eq!(counter(&w, "flush_writes"), 3);
        assert_eq!(counter(&w, "flushed_blocks"), 6);
        assert_eq!(counter(&w, "flush_writes_le_4k"), 1);
        assert_eq!(counter(&w, "flush_writes_le_8k"), 1);
        assert_eq!(counter(&w, "flush_writes_le_16k"), 1);
        assert_eq!(read(core.as_ref(), 0, 2).await, data(0, 2, 1));
        assert_eq!(read(core.as_ref(), 4, 1).await, data(4, 1, 1));
        assert_eq!(read(core.as_ref(), 10, 3).await, data(10, 3, 1));
        for lba in [2, 3, 5, 9, 13, 15] {
            assert!(read(core.as_ref(), lba, 1).await.iter().all(|&b| b == 0), "block {lba}");
        }
        // The evicted data reads back from the core; a read miss promotes it.
        assert_eq!(read(w.as_ref(), 10, 3).await, data(10, 3, 1));
        assert_eq!(counter(&w, "read_misses"), 1);
        assert_eq!(w.line_state(0), Some((0b1_1100_0000_0000, 0)));
        assert_eq!(read(w.as_ref(), 10, 3).await, data(10, 3, 1));
        assert_eq!(counter(&w, "read_hits"), 1);
    });
}

/// With OCF's ALRU defaults, a dirty line written at time ~0 stays dirty at 119 s (younger
/// than the 120 s staleness time) and is written back by 200 s; a cache that keeps seeing I/O
/// every 5 s (under the 10 s activity threshold) is never cleaned.
#[test]
fn the_cleaner_waits_for_staleness_and_idleness() {
    let ((), _) = run(RuntimeKind::Sim, 1, || async {
        let (w, core) = build(64, 1024, WbcacheOptions::default());
        w.write(0, &data(0, 4, 7), None, WriteHints::NONE).await.unwrap();
        sleep_ns(119 * SECOND_NS).await;
        assert_eq!((w.dirty_lines(), counter(&w, "flushed_blocks")), (1, 0), "not before 120 s");
        assert!(counter(&w, "cleaner_wakeups") >= 5, "the cleaner ran meanwhile");
        sleep_ns(81 * SECOND_NS).await;
        assert_eq!(w.dirty_lines(), 0, "cleaned by 200 s");
        assert_eq!((counter(&w, "flushed_blocks"), counter(&w, "cleaner_flushes")), (4, 1));
        assert_eq!(read(core.as_ref(), 0, 4).await, data(0, 4, 7));
        assert_eq!(w.mapped_lines(), 1, "cleaning keeps the line, clean");

        let (busy, _) = build(64, 1024, WbcacheOptions::default());
        busy.write(0, &data(0, 4, 7), None, WriteHints::NONE).await.unwrap();
        let until = now_ns() + 400 * SECOND_NS;
        while now_ns() < until {
            sleep_ns(5 * SECOND_NS).await;
            read(busy.as_ref(), 64, 1).await;
        }
        assert_eq!(busy.dirty_lines(), 1, "busy caches are not cleaned");
        assert_eq!(counter(&busy, "flushed_blocks"), 0);
    });
}

/// With the cache full (policy `full`), a sequential write stream that reaches the threshold
/// bypasses the cache and invalidates what it overwrites.
#[test]
fn a_sequential_stream_bypasses_a_full_cache() {
    let ((), _) = run(RuntimeKind::Sim, 1, || async {
        let opts = WbcacheOptions {
            cleaning: CleaningPolicy::Nop,
            seq_cutoff_threshold_bytes: 128 << 10,
            ..WbcacheOptions::default()
        };
        // Four 64 KiB lines, filled with lines 100, 200, 300 and 5 (block 83 dirty).
        let (w, core) = build(64, 8192, opts);
        for lba in [1600, 3200, 4800, 83] {
            w.write(lba, &data(lba, 1, 1), None, WriteHints::NONE).await.unwrap();
        }
        assert_eq!(w.free_lines(), 0);
        // A new stream: 64 KiB, under the threshold, cached (evicting line 100).
        w.write(0, &data(0, 16, 2), None, WriteHints::NONE).await.unwrap();
        assert_eq!(counter(&w, "cutoff_bypasses"), 0);
        assert_eq!(counter(&w, "evictions"), 1);
        // The stream reaches 128 KiB and goes on over line 5.
        for lba in (16..96).step_by(16) {
            w.write(lba, &data(lba, 16, 2), None, WriteHints::NONE).await.unwrap();
        }
        assert_eq!(counter(&w, "cutoff_bypasses"), 5);
        assert_eq!(counter(&w, "evictions"), 1, "bypassing writes map nothing");
        assert_eq!(w.line_state(83), None, "the stale cached copy was invalidated");
        assert_eq!(read(core.as_ref(), 16, 80).await, data(16, 80, 2));
        assert_eq!(read(w.as_ref(), 0, 96).await, data(0, 96, 2));
    });
}

/// The reference model over a small cache with every mechanism active: eviction (16 lines of
/// 4 blocks over a 512-block span), the ALRU cleaner (millisecond times, with pauses for idle
/// time), the sequential cutoff (policy `always` at 32 KiB) and pass-through when no line can
/// be mapped.
#[test]
fn the_reference_model_holds_with_eviction_cleaning_and_cutoff() {
    for seed in seeds(1, 6) {
        // Odd seeds on one reactor, even seeds spread over two.
        let reactors = 1 + (seed % 2 == 0) as usize;
        let (res, _) = run(RuntimeKind::Sim, reactors, move || async move {
            let opts = WbcacheOptions {
                line_bytes: 4 * BS as u64,
                wake_up_ns: 200_000,
                staleness_ns: 300_000,
                activity_threshold_ns: 100_000,
                flush_max_buffers: 4,
                seq_cutoff_policy: SeqCutoffPolicy::Always,
                seq_cutoff_threshold_bytes: 32 << 10,
                ..WbcacheOptions::default()
            };
            let (w, _core) = build(64, 1024, opts);
            let dev: DevRef = w.clone();
            let model = Arc::new(Mutex::new(Model::for_device(dev.info(), seed)));
            let cfg = CheckConfig {
                seed,
                ops: 3000,
                queue_depth: 6,
                max_io_blocks: 12,
                span_blocks: Some(512),
                pause_every_ops: 200,
                pause_ns: 2_000_000,
                spread_over_reactors: reactors > 1,
                ..CheckConfig::default()
            };
            let rep = run_check(dev, model, &cfg).await.map_err(|e| e.to_string())?;
            Ok::<_, String>((rep, w))
        });
        let (rep, w) = res.unwrap_or_else(|e| panic!("{e}"));
        let c = |n| counter(&w, n);
        eprintln!(
            "seed {seed} ({reactors} reactors): {} blocks checked; hits {}/{} misses {}/{}, evictions {}, cleaner {}, \
             bypasses {}, pass-through {}",
            rep.blocks_checked,
            c("read_hits"),
            c("write_hits"),
            c("read_misses"),
            c("write_misses"),
            c("evictions"),
            c("cleaner_flushes"),
            c("cutoff_bypasses"),
            c("pass_through")
        );
        let what = format!("FLASHRIG_SEED={seed}");
        assert!(rep.blocks_checked > 1000, "{what}: {rep:?}");
        assert!(c("evictions") > 0, "{what}: no eviction");
        assert!(c("cleaner_flushes") > 0, "{what}: the cleaner never ran");
        assert!(c("cutoff_bypasses") > 0, "{what}: no cutoff");
        assert!(c("read_hits") > 0 && c("write_hits") > 0, "{what}: no hits");
    }
}
