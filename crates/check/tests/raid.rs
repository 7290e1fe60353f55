//! Goal: the `raid` engine stores and returns real bytes for every geometry and write mode,
//! keeps parity bit-exact, survives up to m member failures mid-run, rebuilds a replacement
//! that holds exactly the right chunks, and refuses cleanly beyond its tolerance.
//!
//! Method: the seeded random driver of `flashrig-check` (reads, writes, trims, flushes, several
//! in flight) against `raid` over RAM disks behind `Jitter` (out-of-order completions), for
//! 2+1, 4+1, 6+1, 4+2 and 6+2, with and without the stripe cache, in full-stripe-only mode
//! with stripe-aligned requests, on the simulated runtime (one and two reactors) and the real
//! one. Members sit behind `Failable`, which a test pulls like a drive after a number of
//! commands; after a rebuild onto a fresh disk, another member is failed, so every read must
//! come through the rebuilt chunks. Parity is checked against an independent GF(2^8)
//! computation written here, not the engine's codec. Failures print the seed;
//! `FLASHRIG_SEED=<n>` reruns that case.

mod common;
use common::{gf_mul, gf_pow};
use std::sync::Arc;

use flashrig_blockdev::{BlockDevice, DevError, DevRef, WriteHints};
use flashrig_check::{run_check, run_ops, seeds, verify_all, CheckConfig, Failable, Jitter, Model};
use flashrig_devices::RamDevice;
use flashrig_engines::raid::{Raid, RaidOptions, WriteMode};
use flashrig_runtime::{run, HostCosts, RuntimeKind};
use parking_lot::Mutex;

const RUNTIMES: [(RuntimeKind, usize); 3] =
    [(RuntimeKind::Sim, 1), (RuntimeKind::Sim, 2), (RuntimeKind::Real, 2)];
const CHUNK_BLOCKS: u64 = 4;
const MEMBER_BLOCKS: u64 = 256;

struct Array {
    raid: Arc<Raid>,
    members: Vec<Arc<Failable>>,
    rams: Vec<Arc<RamDevice>>,
}

fn build(k: usize, m: usize, mode: WriteMode, cache_stripes: usize, seed: u64) -> Array {
    let rams: Vec<Arc<RamDevice>> = (0..k + m)
        .map(|i| Arc::new(RamDevice::new(&format!("ram{i}"), 4096, MEMBER_BLOCKS, 0, 0)))
        .collect();
    let members: Vec<Arc<Failable>> = rams
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let j: DevRef = Arc::new(Jitter::new(r.clone(), 20_000, seed + i as u64));
            Arc::new(Failable::new(j))
        })
        .collect();
    let devs: Vec<DevRef> = members.iter().map(|f| f.clone() as DevRef).collect();
    let opt = RaidOptions {
        k,
        m,
        chunk_blocks: CHUNK_BLOCKS,
        write_mode: mode,
        cache_stripes,
        costs: Arc::new(HostCosts::default()),
        lock_model: None,
    };
    Array { raid: Arc::new(Raid::new("raid", devs, opt).expect("raid")), members, rams }
}

fn config(seed: u64, reactors: usize, k: usize, mode: WriteMode) -> CheckConfig {
    let stripe = k as u64 * CHUNK_BLOCKS;
    let (align, max) = match mode {
        WriteMode::Any => (1, 3 * stripe / 2),
        WriteMode::FullStripeOnly => (stripe, 2 * stripe),
    };
    CheckConfig {
        seed,
        ops: 1500,
        align_blocks: align,
        max_io_blocks: max,
        spread_over_reactors: reactors > 1,
        ..CheckConfig::default()
    }
}

const GEOMETRIES: [(usize, usize); 5] = [(2, 1), (4, 1), (6, 1), (4, 2), (6, 2)];

#[test]
fn every_geometry_and_mode_matches_the_model_with_exact_parity() {
    for seed in seeds(500, 2) {
        for (k, m) in GEOMETRIES {
            for (mode, cache) in
                [(WriteMode::Any, 0), (WriteMode::Any, 4), (WriteMode::FullStripeOnly, 0)]
            {
                for (kind, reactors) in RUNTIMES {
                    let what = format!(
                        "raid {k}+{m} {mode:?} cache {cache} on {kind:?}x{reactors}, seed {seed}"
                    );
                    let cfg = config(seed, reactors, k, mode);
                    let (res, _) = run(kind, reactors, move || async move {
                        let a = build(k, m, mode, cache, seed);
                        let dev: DevRef = a.raid.clone();
                        let model = Arc::new(Mutex::new(Model::for_device(dev.info(), seed)));
                        let rep = run_check(dev, model, &cfg).await.map_err(|e| e.to_string())?;
                        check_parity(&a, k, m).await?;
                        Ok::<_, String>(rep)
                    });
                    let rep = res.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert!(rep.blocks_checked > 0, "{what}: nothing checked");
                }
            }
        }
    }
}

/// Reads every member's chunks straight from the RAM disks and recomputes each stripe's
/// parity with the GF(2^8) arithmetic below (P = XOR, Q = sum of 2^d * D_d, polynomial 0x11D).
async fn check_parity(a: &Array, k: usize, m: usize) -> Result<(), String> {
    let geo = a.raid.geometry();
    let bytes = CHUNK_BLOCKS as usize * 4096;
    for s in 0..geo.stripes {
        let mut chunks = Vec::new();
        for i in 0..k + m {
            let mut b = vec![0u8; bytes];
            let ram = &a.rams[geo.chunk_member(s, i)];
            ram.read(geo.member_lba(s), &mut b, None).await.map_err(|e| e.to_string())?;
            chunks.push(b);
        }
        for r in 0..m {
            let coef: Vec<u8> = (0..k).map(|d| gf_pow(1 << r, d)).collect();
            for x in 0..bytes {
                let mut want = 0u8;
                for (d, chunk) in chunks.iter().take(k).enumerate() {
                    want ^= gf_mul(coef[d], chunk[x]);
                }
                if chunks[k + r][x] != want {
                    return Err(format!("stripe {s} parity row {r} byte {x} is stale"));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn members_fail_mid_run_and_a_rebuild_restores_redundancy() {
    for seed in seeds(600, 2) {
        for (k, m) in [(4, 1), (6, 2), (2, 1)] {
            for cache in [0, 4] {
                for (kind, reactors) in RUNTIMES {
                    let what = format!(
                        "raid {k}+{m} cache {cache}: failures on {kind:?}x{reactors}, seed {seed}"
                    );
                    let cfg =
                        CheckConfig { ops: 3000, ..config(seed, reactors, k, WriteMode::Any) };
                    let (res, _) = run(kind, reactors, move || async move {
                        fail_rebuild_fail(k, m, cache, seed, cfg).await
                    });
                    res.unwrap_or_else(|e| panic!("{what}: {e}"));
                }
            }
        }
    }
}

async fn fail_rebuild_fail(
    k: usize,
    m: usize,
    cache: usize,
    seed: u64,
    cfg: CheckConfig,
) -> Result<(), String> {
    let a = build(k, m, WriteMode::Any, cache, seed);
    let dev: DevRef = a.raid.clone();
    let model = Arc::new(Mutex::new(Model::for_device(dev.info(), seed)));
    // m members fail part-way through the run (after a few hundred of their commands each).
    for f in 0..m {
        a.members[f * 2 % (k + m)].fail_after(300 + 150 * f as u64);
    }
    run_ops(dev.clone(), model.clone(), &cfg).await.map_err(|e| e.to_string())?;
    let failed = a.raid.failed_members();
    if failed.len() != m {
        return Err(format!("expected {m} failed members, the array saw {failed:?}"));
    }
    // Degraded: everything still reads back.
    flush(&dev, &model).await?;
    verify_all(&dev, &model).await.map_err(|e| format!("degraded read-back: {e}"))?;
    // Rebuild every failed slot onto a fresh disk, then fail m *other* members: reads must
    // now come through the rebuilt chunks.
    for &slot in &failed {
        let fresh: DevRef = Arc::new(RamDevice::new("spare", 4096, MEMBER_BLOCKS, 0, 0));
        a.raid.rebuild(slot, fresh).await.map_err(|e| format!("rebuild {slot}: {e}"))?;
    }
    if !a.raid.failed_members().is_empty() {
        return Err("members still failed after rebuild".into());
    }
    let others: Vec<usize> = (0..k + m).filter(|i| !failed.contains(i)).take(m).collect();
    for &o in &others {
        a.members[o].fail();
    }
    verify_all(&dev, &model).await.map_err(|e| format!("read-back through rebuilt: {e}"))?;
    // More writes while degraded again, then a final check.
    let cfg2 = CheckConfig { seed: seed + 1000, ops: 500, ..cfg.clone() };
    run_ops(dev.clone(), model.clone(), &cfg2).await.map_err(|e| e.to_string())?;
    flush(&dev, &model).await?;
    verify_all(&dev, &model).await.map_err(|e| format!("final read-back: {e}"))?;
    Ok(())
}

async fn flush(dev: &DevRef, model: &Arc<Mutex<Model>>) -> Result<(), String> {
    let t = model.lock().flush_issued();
    dev.flush().await.map_err(|e| format!("flush: {e}"))?;
    model.lock().flush_done(t);
    Ok(())
}

#[test]
fn beyond_m_failures_requests_fail_with_device_failed() {
    let (res, _) = run(RuntimeKind::Sim, 1, || async {
        let a = build(4, 1, WriteMode::Any, 0, 1);
        let block = vec![7u8; 4096];
        a.raid.write(0, &block, None, WriteHints::NONE).await.unwrap();
        a.members[0].fail();
        a.members[1].fail();
        let mut buf = vec![0u8; 4096 * 16];
        let r = a.raid.read(0, &mut buf, None).await;
        let w = a.raid.write(0, &block, None, WriteHints::NONE).await;
        (r, w)
    });
    assert!(matches!(res.0, Err(DevError::DeviceFailed { .. })), "{:?}", res.0);
    assert!(matches!(res.1, Err(DevError::DeviceFailed { .. })), "{:?}", res.1);
}

#[test]
fn partial_writes_pick_the_cheaper_update_and_the_cache_merges_sequential_writes() {
    let counters = |cache: usize, writes: Vec<(u64, u64)>| {
        let (c, _) = run(RuntimeKind::Sim, 1, move || async move {
            let a = build(4, 1, WriteMode::Any, cache, 3);
            for (lba, blocks) in writes {
                let data = vec![0xA5u8; blocks as usize * 4096];
                a.raid.write(lba, &data, None, WriteHints::NONE).await.unwrap();
            }
            a.raid.flush().await.unwrap();
            flashrig_blockdev::snapshot_stack(a.raid.as_ref()).counters
        });
        c
    };
    // One block of a 4+1 stripe: read it and P (2 reads) beats reading 3 other chunks.
    let c = counters(0, vec![(1, 1)]);
    assert_eq!((c["rmw_writes"], c["rcw_writes"], c["full_stripe_writes"]), (1, 0, 0));
    // Three whole chunks: reading the fourth (1 read) beats 3 old chunks + P.
    let c = counters(0, vec![(0, 12)]);
    assert_eq!((c["rmw_writes"], c["rcw_writes"]), (0, 1));
    // A whole stripe needs no reads.
    let c = counters(0, vec![(16, 16)]);
    assert_eq!((c["full_stripe_writes"], c["rcw_read_bytes"], c["rmw_read_bytes"]), (1, 0, 0));
    // 64 sequential one-block writes = 4 stripes: the cache sends 4 full stripes, no reads.
    let c = counters(4, (0..64).map(|l| (l, 1)).collect());
    assert_eq!((c["cache_full_stripes"], c["full_stripe_writes"]), (4, 4));
    assert_eq!((c["rcw_writes"], c["rmw_writes"]), (0, 0));
    // Without the cache the same writes are 64 read-modify-writes.
    let c = counters(0, (0..64).map(|l| (l, 1)).collect());
    assert_eq!((c["rmw_writes"], c["full_stripe_writes"]), (64, 0));
}

#[test]
fn full_stripe_only_rejects_partial_writes() {
    let (res, _) = run(RuntimeKind::Sim, 1, || async {
        let a = build(4, 1, WriteMode::FullStripeOnly, 0, 1);
        let stripe = vec![1u8; 16 * 4096];
        let two = vec![1u8; 32 * 4096];
        let ok = a.raid.write(16, &stripe, None, WriteHints::NONE).await;
        let ok2 = a.raid.write(32, &two, None, WriteHints::NONE).await;
        let partial = a.raid.write(0, &stripe[..4096], None, WriteHints::NONE).await;
        let shifted = a.raid.write(4, &stripe, None, WriteHints::NONE).await;
        (ok, ok2, partial, shifted)
    });
    assert_eq!(res.0, Ok(()));
    assert_eq!(res.1, Ok(()));
    assert!(
        matches!(&res.2, Err(DevError::Invalid(m)) if m.contains("full-stripe")),
        "{:?}",
        res.2
    );
    assert!(matches!(res.3, Err(DevError::Invalid(_))));
}

/// Found by the reliability swarm (`flashrig swarm --seed 69 --stack raid:4+1:cache`): a FUA
/// write that went into the stripe cache was written out without FUA and without a member
/// flush, so a power cut right after its completion lost it. Method: members are volatile
/// caches over durable stores; a partial-stripe FUA write completes, power is cut with none of
/// the unflushed blocks landing, and a new array over the stores must read the write back.
#[test]
fn a_fua_write_through_the_stripe_cache_is_durable_at_completion() {
    use flashrig_check::{Store, Volatile};
    let (res, _) = run(RuntimeKind::Sim, 1, || async {
        let stores: Vec<Store> = (0..5).map(|_| Store::default()).collect();
        let open = |stores: &[Store]| {
            let vols: Vec<Arc<Volatile>> = stores
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    Arc::new(Volatile::new(&format!("v{i}"), 4096, MEMBER_BLOCKS, 0, s.clone()))
                })
                .collect();
            let devs: Vec<DevRef> = vols.iter().map(|v| v.clone() as DevRef).collect();
            let opt = RaidOptions {
                k: 4,
                m: 1,
                chunk_blocks: CHUNK_BLOCKS,
                write_mode: WriteMode::Any,
                cache_stripes: 8,
                costs: Arc::new(HostCosts::default()),
                lock_model: None,
            };
            (Raid::new("raid", devs, opt).expect("raid"), vols)
        };
        let (raid, vols) = open(&stores);
        let model = Arc::new(Mutex::new(Model::for_device(raid.info(), 69)));
        // Three blocks in the middle of stripe 1: partial, so they stay in the cache.
        let (lba, blocks) = (16 + 5, 3u64);
        let mut buf = vec![0u8; blocks as usize * 4096];
        let version = model.lock().next_version();
        model.lock().fill(lba, version, &mut buf, None);
        let fua = WriteHints { fua: true, ..WriteHints::NONE };
        raid.write(lba, &buf, None, fua).await.expect("FUA write");
        for v in &vols {
            v.power_cut(); // nothing unflushed lands
        }
        let (raid, _) = open(&stores);
        let mut back = vec![0u8; buf.len()];
        raid.read(lba, &mut back, None).await.expect("read after the cut");
        assert!(back == buf, "the FUA write did not survive the power cut");
    });
    res
}
