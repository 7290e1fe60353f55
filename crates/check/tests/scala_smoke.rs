//! Goal: a quick end-to-end check of `scala` (temporary; the full suite is scala.rs).
//! Method: the seeded driver against scala over RAM disks, then convert, reopen and verify.

use std::collections::BTreeMap;
use std::sync::Arc;

use flashrig_blockdev::{snapshot_stack, DevRef};
use flashrig_check::{run_check, verify_all, CheckConfig, Jitter, Model};
use flashrig_devices::RamDevice;
use flashrig_engines::scala::{Scala, ScalaOptions};
use flashrig_runtime::{run, RuntimeKind};
use parking_lot::Mutex;

fn opts(k: usize, m: usize) -> ScalaOptions {
    ScalaOptions {
        chunk_blocks: 4,
        transient_blocks_per_member: Some(64),
        grant_heroes: 4,
        idle_ns: 200_000,
        ..ScalaOptions::new(k, m)
    }
}

#[test]
fn smoke() {
    for (kind, reactors) in [(RuntimeKind::Sim, 1), (RuntimeKind::Sim, 3), (RuntimeKind::Real, 2)] {
        for (k, m) in [(4, 1), (4, 2), (2, 1)] {
            let seed = 5;
            let what = format!("{k}+{m} {kind:?}x{reactors}");
            let (res, _) = run(kind, reactors, move || async move {
                let rams: Vec<Arc<RamDevice>> = (0..k + m)
                    .map(|i| Arc::new(RamDevice::new(&format!("ram{i}"), 4096, 1024, 16, 0)))
                    .collect();
                let devs: Vec<DevRef> = rams
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        Arc::new(Jitter::new(r.clone(), 20_000, seed + i as u64)) as DevRef
                    })
                    .collect();
                let sc = Arc::new(
                    Scala::create("sc", devs.clone(), opts(k, m))
                        .await
                        .map_err(|e| e.to_string())?,
                );
                let dev: DevRef = sc.clone();
                let cfg = CheckConfig {
                    seed,
                    ops: 3000,
                    max_io_blocks: 12,
                    span_blocks: Some(dev.info().num_blocks),
                    spread_over_reactors: reactors > 1,
                    ..CheckConfig::default()
                };
                let model = Arc::new(Mutex::new(Model::for_device(dev.info(), seed)));
                run_check(dev.clone(), model.clone(), &cfg)
                    .await
                    .map_err(|e| format!("run: {e}"))?;
                sc.close().await.map_err(|e| e.to_string())?;
                let c: BTreeMap<String, u64> = snapshot_stack(sc.as_ref()).counters;
                drop(dev);
                drop(sc);
                let sc2 = Arc::new(
                    Scala::open("sc", devs, opts(k, m)).await.map_err(|e| format!("open: {e}"))?,
                );
                let dev2: DevRef = sc2.clone();
                verify_all(&dev2, &model).await.map_err(|e| format!("after reopen: {e}"))?;
                Ok::<_, String>((c, sc2.recovery()))
            });
            let (c, rec) = res.unwrap_or_else(|e| panic!("{what}: {e}"));
            eprintln!("{what}: {c:?}\n{rec:?}");
        }
    }
}

#[test]
fn smoke_ssd() {
    use flashrig_ssd::config::SsdConfig;
    use flashrig_ssd::Ssd;
    let (res, _) = run(RuntimeKind::Sim, 2, || async {
        let (k, m) = (4, 1);
        let mut cfg = SsdConfig::preset("tiny-slc").unwrap();
        cfg.firmware.vendor_convert = true;
        cfg.firmware.slc_evictor = flashrig_ssd::config::EvictorPolicy::Transient;
        let ssds: Vec<Arc<Ssd>> =
            (0..k + m).map(|i| Arc::new(Ssd::new(&format!("ssd{i}"), &cfg).unwrap())).collect();
        let devs: Vec<DevRef> = ssds.iter().map(|s| s.clone() as DevRef).collect();
        let o = ScalaOptions { chunk_blocks: 4, grant_heroes: 8, ..ScalaOptions::new(k, m) };
        let sc = Arc::new(
            Scala::create("sc", devs.clone(), o.clone()).await.map_err(|e| e.to_string())?,
        );
        assert!(sc.offloaded());
        let dev: DevRef = sc.clone();
        let cfgc = CheckConfig {
            seed: 9,
            ops: 3000,
            max_io_blocks: 12,
            span_blocks: Some(dev.info().num_blocks.min(4096)),
            spread_over_reactors: true,
            ..CheckConfig::default()
        };
        let model = Arc::new(Mutex::new(Model::for_device(dev.info(), 9)));
        run_check(dev.clone(), model.clone(), &cfgc).await.map_err(|e| format!("run: {e}"))?;
        sc.close().await.map_err(|e| e.to_string())?;
        let snap = snapshot_stack(sc.as_ref());
        drop(dev);
        drop(sc);
        for s in &ssds {
            s.power_cycle();
        }
        let sc2 = Arc::new(Scala::open("sc", devs, o).await.map_err(|e| format!("open: {e}"))?);
        let dev2: DevRef = sc2.clone();
        verify_all(&dev2, &model).await.map_err(|e| format!("after reopen: {e}"))?;
        Ok::<_, String>((snap.counters, snap.children[0].counters.clone(), sc2.recovery()))
    });
    let (c, m0, rec) = res.unwrap();
    eprintln!("{c:?}\n{m0:?}\n{rec:?}");
    assert!(c["conversions_ssd"] > 0);
}
