//! `flashrig bench`: the runtime's own speed, measured on this machine. These are benchmarks,
//! not tests: their figures go to docs/benchmarks.md with the command that produced them.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use flashrig_runtime::{run, send, sleep_ns, spawn, spawn_on, RuntimeKind};
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    pub name: String,
    pub value: f64,
    pub unit: String,
    pub detail: String,
}

/// Simulated events per wall-second: `tasks` tasks on 4 reactors each sleep a pseudo-random
/// virtual time `rounds` times, so every round is one timer event and one task poll.
pub fn sim_events(tasks: u64, rounds: u64) -> BenchResult {
    let t0 = Instant::now();
    let (_, stats) = run(RuntimeKind::Sim, 4, move || async move {
        let mut hs = Vec::new();
        for t in 0..tasks {
            hs.push(spawn_on((t % 4) as usize, move || async move {
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                for _ in 0..rounds {
                    // xorshift: a cheap deterministic delay between 0 and 1023 ns.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    sleep_ns(x & 1023).await;
                }
            }));
        }
        for h in hs {
            h.await;
        }
    });
    let wall = t0.elapsed().as_secs_f64();
    let polls: u64 = stats.reactors.iter().map(|r| r.polls).sum();
    let firings = stats.events - polls;
    BenchResult {
        name: format!("sim events ({tasks} timers)"),
        value: stats.events as f64 / wall,
        unit: "events/s".into(),
        detail: format!(
            "{} events ({} timer firings, {} task polls) in {:.3} s wall; {tasks} tasks x \
             {rounds} sleeps on 4 reactors; {:.0} timer firings/s",
            stats.events,
            firings,
            polls,
            wall,
            firings as f64 / wall
        ),
    }
}

/// Cross-reactor messages per second on the real runtime: reactor 0 streams `count` messages to
/// reactor 1, which counts them; the clock stops when reactor 1 has run the last one.
pub fn real_messages(count: u64) -> BenchResult {
    let received = Arc::new(AtomicU64::new(0));
    let r = received.clone();
    let t0 = Instant::now();
    let (elapsed, _) = run(RuntimeKind::Real, 2, move || async move {
        let start = Instant::now();
        for i in 0..count {
            let r = r.clone();
            send(
                1,
                Box::new(move || {
                    r.fetch_add(1, Ordering::Relaxed);
                }),
            );
            // Let reactor 0's loop breathe now and then, as a real engine would between
            // requests; the queue is unbounded so this is not needed for correctness.
            if i % 4096 == 4095 {
                flashrig_runtime::yield_now().await;
            }
        }
        spawn_on(1, || async {}).await;
        start.elapsed()
    });
    let _ = t0;
    let n = received.load(Ordering::Relaxed);
    assert_eq!(n, count, "every message was delivered");
    BenchResult {
        name: "real messages (stream)".into(),
        value: n as f64 / elapsed.as_secs_f64(),
        unit: "messages/s".into(),
        detail: format!("{n} messages reactor 0 -> 1 in {:.3} s", elapsed.as_secs_f64()),
    }
}

/// Round trips per second between two real reactors: each message answers with a message.
pub fn real_ping_pong(rounds: u64) -> BenchResult {
    let (elapsed, _) = run(RuntimeKind::Real, 2, move || async move {
        let start = Instant::now();
        let done = Rc::new(Cell::new(false));
        let d = done.clone();
        let h = spawn(async move {
            for _ in 0..rounds {
                spawn_on(1, || async {}).await;
            }
            d.set(true);
        });
        h.await;
        assert!(done.get());
        start.elapsed()
    });
    BenchResult {
        name: "real messages (ping-pong)".into(),
        value: rounds as f64 * 2.0 / elapsed.as_secs_f64(),
        unit: "messages/s".into(),
        detail: format!(
            "{rounds} round trips in {:.3} s ({:.2} us per round trip)",
            elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e6 / rounds as f64
        ),
    }
}

pub fn render(results: &[BenchResult]) -> String {
    let mut s = String::new();
    for r in results {
        // Rates below 100 (GB/s) need their decimals; event and message rates do not.
        let value =
            if r.value < 100.0 { format!("{:.2}", r.value) } else { format!("{:.0}", r.value) };
        s.push_str(&format!("{:<28} {:>14} {:<12} {}\n", r.name, value, r.unit, r.detail));
    }
    s
}

/// User write throughput of one reactor of `raid` k+m on RAM members in the real runtime,
/// full-stripe writes (request = one stripe, 64 KiB chunks) at queue depth 32: what the engine's
/// own path costs per byte when the devices cost nothing. `stripes` stripes are written.
pub fn raid_full_stripe_write(k: usize, m: usize, stripes: u64) -> BenchResult {
    use flashrig_blockdev::DevRef;
    use flashrig_devices::RamDevice;
    use flashrig_engines::raid::{Raid, RaidOptions, WriteMode};
    let chunk_blocks = 16u64; // 64 KiB of 4 KiB blocks
    let member_blocks = 4096u64; // 16 MiB per member: 256 stripes, reused round robin
    let (res, _) = run(RuntimeKind::Real, 1, move || async move {
        let members: Vec<DevRef> = (0..k + m)
            .map(|i| {
                Arc::new(RamDevice::new(&format!("ram{i}"), 4096, member_blocks, 0, 0)) as DevRef
            })
            .collect();
        let opt = RaidOptions {
            k,
            m,
            chunk_blocks,
            write_mode: WriteMode::FullStripeOnly,
            cache_stripes: 0,
            costs: Arc::new(flashrig_runtime::HostCosts::default()),
            lock_model: None,
        };
        let raid: DevRef = Arc::new(Raid::new("raid", members, opt).expect("raid"));
        let stripe_blocks = k as u64 * chunk_blocks;
        let range = raid.info().num_blocks;
        // Fill once so the timed pass does not measure the RAM disks' first-touch allocation.
        crate::workload::closed_loop(
            raid.clone(),
            true,
            crate::workload::Access::Seq,
            stripe_blocks,
            32,
            range / stripe_blocks,
            range,
            1,
        )
        .await
        .expect("fill");
        let t0 = Instant::now();
        crate::workload::closed_loop(
            raid,
            true,
            crate::workload::Access::Seq,
            stripe_blocks,
            32,
            stripes,
            range,
            2,
        )
        .await
        .expect("write");
        t0.elapsed().as_secs_f64()
    });
    let bytes = stripes * k as u64 * 65536;
    BenchResult {
        name: format!("raid {k}+{m} full-stripe writes"),
        value: bytes as f64 / res / 1e9,
        unit: "GB/s".into(),
        detail: format!(
            "{stripes} stripes of {k} x 64 KiB at QD32, one reactor, real runtime, RAM members; \
             user bytes per second"
        ),
    }
}

/// Parity encoding through flashrig-erasure's `Codec::encode` against ISA-L's
/// `ec_encode_data` called directly on the same buffers, 64 KiB chunks, hot (one stripe) and
/// from a 1 GiB working set.
pub fn parity_encode(k: usize, m: usize, seconds: f64) -> Vec<BenchResult> {
    let mut out = Vec::new();
    for (label, set) in [("hot", k * 65536), ("1 GiB set", 1usize << 30)] {
        let ours = flashrig_erasure::bench_encode(k, m, 65536, set, seconds).unwrap_or(f64::NAN);
        let raw = flashrig_erasure::bench_encode_isal_raw(k, m, 65536, set, seconds).ok().flatten();
        out.push(BenchResult {
            name: format!("parity {k}+{m} {label}"),
            value: ours,
            unit: "GB/s".into(),
            detail: match raw {
                Some(r) => format!(
                    "data GB/s through Codec::encode ({}); ISA-L ec_encode_data direct: {r:.1} \
                     GB/s; ours/library = {:.0}%",
                    flashrig_erasure::Codec::new(k, m).map(|c| c.backend()).unwrap_or("?"),
                    100.0 * ours / r
                ),
                None => {
                    "data GB/s through Codec::encode (pure-Rust backend; ISA-L not linked)".into()
                }
            },
        });
    }
    out
}

/// `count` sequential 64 KiB writes at QD32 over the first `range_blocks` of `eng`, seeded
/// with `seed`: the engine benchmarks' workload. Each first runs one untimed pass over the
/// array (`range_blocks / 16` writes), as `raid_full_stripe_write` fills its array first: the
/// RAM members' first-touch allocation (the kernel faulting in and clearing every page once)
/// is not the engine's cost. An array that trims (conversion, GC) keeps its members' memory
/// after that pass, since the RAM disk reuses trimmed blocks' allocations, so the timed passes
/// measure the engine's steady state.
async fn seq_writes_64k(eng: &flashrig_blockdev::DevRef, count: u64, range_blocks: u64, seed: u64) {
    crate::workload::closed_loop(
        eng.clone(),
        true,
        crate::workload::Access::Seq,
        16,
        32,
        count,
        range_blocks,
        seed,
    )
    .await
    .expect("write");
}

/// User write throughput of one reactor of `twophase` k+m on RAM members in the real runtime:
/// 64 KiB writes at queue depth 32 over the whole array, `passes` times after an untimed
/// filling pass, so the replica log is past the watermark and conversion runs alongside (the
/// steady state of §3.1).
pub fn twophase_write(k: usize, m: usize, passes: u64) -> BenchResult {
    use flashrig_blockdev::DevRef;
    use flashrig_devices::RamDevice;
    use flashrig_engines::{Twophase, TwophaseOptions};
    let member_blocks = 16384u64; // 64 MiB per member
    let (res, _) = run(RuntimeKind::Real, 1, move || async move {
        let members: Vec<DevRef> = (0..k + m)
            .map(|i| {
                Arc::new(RamDevice::new(&format!("ram{i}"), 4096, member_blocks, 16, 0)) as DevRef
            })
            .collect();
        let eng: DevRef = Arc::new(
            Twophase::new("twophase", members, TwophaseOptions::new(k, m)).expect("twophase"),
        );
        let range = eng.info().num_blocks / 16 * 16;
        let count = passes * range / 16;
        seq_writes_64k(&eng, range / 16, range, 1).await;
        let t0 = Instant::now();
        seq_writes_64k(&eng, count, range, 3).await;
        let secs = t0.elapsed().as_secs_f64();
        let wa = flashrig_blockdev::snapshot_stack(eng.as_ref()).values["host_write_amplification"];
        (secs, count * 65536, wa)
    });
    let (secs, bytes, wa) = res;
    BenchResult {
        name: format!("twophase {k}+{m} 64 KiB writes"),
        value: bytes as f64 / secs / 1e9,
        unit: "GB/s".into(),
        detail: format!(
            "{passes} sequential passes over the array at QD32 after an untimed one, one \
             reactor, real runtime, RAM members (conversion running); host write \
             amplification {wa:.2}"
        ),
    }
}

/// User write throughput of one I/O reactor of `scala` k+m on RAM members in the real runtime
/// (the space manager on a second reactor, as the paper's daemon thread): 64 KiB writes at QD32
/// over the whole array, `passes` times after an untimed filling pass, so hero groups fill,
/// are converted on the host (RAM disks have no conversion command) and GC runs.
pub fn scala_write(k: usize, m: usize, passes: u64) -> BenchResult {
    use flashrig_blockdev::DevRef;
    use flashrig_devices::RamDevice;
    use flashrig_engines::{Scala, ScalaOptions};
    let member_blocks = 16384u64; // 64 MiB per member
    let (res, _) = run(RuntimeKind::Real, 2, move || async move {
        let members: Vec<DevRef> = (0..k + m)
            .map(|i| {
                Arc::new(RamDevice::new(&format!("ram{i}"), 4096, member_blocks, 16, 0)) as DevRef
            })
            .collect();
        let opts = ScalaOptions::new(k, m);
        let sc = Arc::new(Scala::create("scala", members, opts).await.expect("scala"));
        let eng: DevRef = sc.clone();
        let range = eng.info().num_blocks / 16 * 16;
        let count = passes * range / 16;
        seq_writes_64k(&eng, range / 16, range, 1).await;
        let t0 = Instant::now();
        seq_writes_64k(&eng, count, range, 3).await;
        let secs = t0.elapsed().as_secs_f64();
        let snap = flashrig_blockdev::snapshot_stack(eng.as_ref());
        let wa = snap.values["host_write_amplification"];
        (secs, count * 65536, wa, snap.counters["conversions_host"], snap.counters["gc_stripes"])
    });
    let (secs, bytes, wa, conv, gc) = res;
    BenchResult {
        name: format!("scala {k}+{m} 64 KiB writes"),
        value: bytes as f64 / secs / 1e9,
        unit: "GB/s".into(),
        detail: format!(
            "{passes} sequential passes at QD32 after an untimed one, one I/O reactor + the \
             space manager's, real runtime, RAM members; {conv} host conversions, {gc} GC \
             stripes, host write amplification {wa:.2}"
        ),
    }
}

/// `csal` over RAM for the benchmarks: a 64 MiB fast RAM member and a 256 MiB `Zoned` layer
/// (64 zones of 4 MiB) over a second RAM member, both with 64 metadata bytes per block;
/// chunks of a zone (4 MiB); `cache_pages` L2P pages cached (4 KiB each, 1024 entries).
async fn csal_on_ram(
    fast: flashrig_blockdev::DevRef,
    zmem: flashrig_blockdev::DevRef,
    cache_pages: usize,
    fresh: bool,
) -> flashrig_engines::Csal {
    use flashrig_engines::{Csal, CsalOptions, Zoned, ZonedOptions};
    let zo = ZonedOptions {
        zone_blocks: 1024,
        zone_capacity_blocks: 1024,
        max_open_zones: 0,
        max_active_zones: 0,
    };
    let opts = CsalOptions { l2p_cache_pages: cache_pages, ..CsalOptions::default() };
    if fresh {
        let zoned = Arc::new(Zoned::create("zoned", zmem, zo).await.expect("zoned"));
        Csal::create("csal", fast, zoned, opts).await.expect("csal")
    } else {
        let zoned = Arc::new(Zoned::open("zoned", zmem, zo).await.expect("zoned"));
        Csal::open("csal", fast, zoned, opts).await.expect("csal")
    }
}

/// The RAM members of [`csal_on_ram`].
fn csal_ram_members() -> (flashrig_blockdev::DevRef, flashrig_blockdev::DevRef) {
    use flashrig_devices::RamDevice;
    let fast = Arc::new(RamDevice::new("fast", 4096, 16384, 64, 0));
    // 64 zones and the zoned layer's two write-pointer table copies.
    let zmem = Arc::new(RamDevice::new("zmem", 4096, 64 * 1024 + 2, 64, 0));
    (fast, zmem)
}

/// User write throughput of one I/O reactor of `csal` on RAM members in the real runtime (the
/// internal work — compaction, GC, checkpoints — on a second reactor, the engine's default):
/// 4 KiB random writes at QD32 over the whole device, `passes` times the device's blocks after
/// an untimed sequential filling pass, so the buffer is full and compaction moves chunks into
/// zones (and GC runs on the zones) alongside; every L2P page is cached.
pub fn csal_write(passes: u64) -> BenchResult {
    let (res, _) = run(RuntimeKind::Real, 2, move || async move {
        let (fast, zmem) = csal_ram_members();
        let cs = Arc::new(csal_on_ram(fast, zmem, 1024, true).await);
        let eng: flashrig_blockdev::DevRef = cs.clone();
        let range = eng.info().num_blocks / 16 * 16;
        seq_writes_64k(&eng, range / 16, range, 1).await;
        let count = passes * range;
        let t0 = Instant::now();
        crate::workload::closed_loop(
            eng.clone(),
            true,
            crate::workload::Access::Rand,
            1,
            32,
            count,
            range,
            3,
        )
        .await
        .expect("write");
        let secs = t0.elapsed().as_secs_f64();
        let snap = flashrig_blockdev::snapshot_stack(eng.as_ref());
        let c = |n: &str| snap.counters.get(n).copied().unwrap_or(0);
        let wa = snap.values.get("zoned_write_amplification").copied().unwrap_or(f64::NAN);
        (secs, count, wa, c("compactions"), c("gc_runs"))
    });
    let (secs, count, wa, compactions, gc) = res;
    BenchResult {
        name: "csal 4 KiB random writes".into(),
        value: count as f64 / secs,
        unit: "IOPS".into(),
        detail: format!(
            "{:.2} GB/s of user data; {count} writes ({passes} x the 224 MiB device) at QD32 \
             after an untimed sequential fill, one I/O reactor + the internal one, real \
             runtime, RAM members (64 MiB fast, 256 MiB zoned); {compactions} compactions, \
             {gc} GC runs, zoned write amplification {wa:.2}",
            count as f64 * 4096.0 / secs / 1e9
        ),
    }
}

/// L2P lookups per second in `csal`, measured through 4 KiB reads of mapped blocks at QD1 on
/// one I/O reactor of the real runtime: the device is filled, closed cleanly and opened again
/// with every L2P page cached (each read a cache hit), then with a one-page cache and reads
/// spread over the whole device (nearly every read a miss: the page is read from the fast
/// member's metadata region, the clean victim dropped). Each lookup includes reading its 4 KiB
/// block from RAM; the difference between the two is the page fault.
pub fn csal_l2p_lookups(reads: u64) -> Vec<BenchResult> {
    let (res, _) = run(RuntimeKind::Real, 2, move || async move {
        let (fast, zmem) = csal_ram_members();
        let mut cur = Arc::new(csal_on_ram(fast.clone(), zmem.clone(), 1024, true).await);
        let range = flashrig_blockdev::BlockDevice::info(cur.as_ref()).num_blocks / 16 * 16;
        let dev: flashrig_blockdev::DevRef = cur.clone();
        seq_writes_64k(&dev, range / 16, range, 1).await;
        let mut out = Vec::new();
        for (label, pages) in [("hit", 1024usize), ("miss", 1)] {
            // A clean close, so the next open loads the metadata region without replay.
            cur.close().await.expect("close");
            drop(cur);
            cur = Arc::new(csal_on_ram(fast.clone(), zmem.clone(), pages, false).await);
            let dev: flashrig_blockdev::DevRef = cur.clone();
            let before = flashrig_blockdev::snapshot_stack(dev.as_ref());
            let t0 = Instant::now();
            crate::workload::closed_loop(
                dev.clone(),
                false,
                crate::workload::Access::Rand,
                1,
                1,
                reads,
                range,
                5,
            )
            .await
            .expect("read");
            let secs = t0.elapsed().as_secs_f64();
            let after = flashrig_blockdev::snapshot_stack(dev.as_ref());
            let d = |n: &str| {
                after.counters.get(n).copied().unwrap_or(0)
                    - before.counters.get(n).copied().unwrap_or(0)
            };
            out.push((label, pages, secs, d("l2p_hits"), d("l2p_misses")));
        }
        out
    });
    res.into_iter()
        .map(|(label, pages, secs, hits, misses)| BenchResult {
            name: format!("csal L2P lookups, cache {label}"),
            value: reads as f64 / secs,
            unit: "lookups/s".into(),
            detail: format!(
                "{reads} random 4 KiB reads of mapped blocks at QD1 over the 224 MiB device \
                 (56 L2P pages), {pages} page(s) cached: {hits} hits, {misses} misses; one I/O \
                 reactor, real runtime, RAM members; includes each block's read"
            ),
        })
        .collect()
}

/// The space manager's messages under recall pressure (issue 6): `io` I/O reactors and the
/// manager's reactor on the real runtime, a `scala` 4+1 over RAM disks with one-block chunks
/// and one more VH per member than there are reactors. Each round, every I/O reactor but the
/// first writes one block (taking a grant as large as the engine allows, which holds VHs it
/// will not use), then the first writes a burst of `burst` blocks at QD8: its grants find the
/// free VHs held elsewhere and the manager must recall them, converting the full groups as it
/// goes. Counts every message to and from the manager (grant requests and answers, recall
/// broadcasts, full-list collections, service kicks) per wall-second.
pub fn scala_manager_messages(io: usize, rounds: u64, burst: u64) -> BenchResult {
    use flashrig_blockdev::DevRef;
    use flashrig_devices::RamDevice;
    use flashrig_engines::{Scala, ScalaOptions};
    assert!(io >= 2, "recall pressure needs a reactor to recall from");
    let (res, _) = run(RuntimeKind::Real, io + 1, move || async move {
        let members: Vec<DevRef> = (0..5)
            .map(|i| Arc::new(RamDevice::new(&format!("ram{i}"), 4096, 16384, 16, 0)) as DevRef)
            .collect();
        let opts = ScalaOptions {
            chunk_blocks: 1,
            transient_blocks_per_member: Some((io as u64 + 1) * 4),
            ..ScalaOptions::new(4, 1)
        };
        let sc = Arc::new(Scala::create("scala", members, opts).await.expect("scala"));
        let eng: DevRef = sc.clone();
        let range = eng.info().num_blocks;
        let write = |r: usize, qd: u64, n: u64, seed: u64| {
            let eng = eng.clone();
            spawn_on(r, move || async move {
                crate::workload::closed_loop(
                    eng,
                    true,
                    crate::workload::Access::Rand,
                    1,
                    qd,
                    n,
                    range,
                    seed,
                )
                .await
                .expect("write")
            })
        };
        let t0 = Instant::now();
        for round in 0..rounds {
            for r in 1..io {
                write(r, 1, 1, round * 100 + r as u64).await;
            }
            write(0, 8, burst, round * 100 + 99).await;
        }
        let secs = t0.elapsed().as_secs_f64();
        let c = flashrig_blockdev::snapshot_stack(eng.as_ref()).counters;
        (secs, c["manager_messages"], c["grant_requests"], c["recalls"], c["recalled_vh"])
    });
    let (secs, msgs, grants, recalls, recalled) = res;
    BenchResult {
        name: format!("scala space manager under recall pressure, {io} I/O reactors"),
        value: msgs as f64 / secs / 1e3,
        unit: "K messages/s".into(),
        detail: format!(
            "{msgs} messages in {secs:.2} s: {grants} grants ({:.0}/s), {recalls} recalls \
             ({:.0}/s) returning {recalled} VHs; {rounds} rounds of {burst}-block bursts, 4 KiB \
             random writes, one-block chunks, RAM members",
            grants as f64 / secs,
            recalls as f64 / secs
        ),
    }
}
