//! Goal: the crash half of the reference model is right, before any engine relies on it: it
//! accepts everything a correct volatile write-back cache may leave after a power cut, and it
//! rejects a cache whose flush forgets a write.
//!
//! Method: a test-only write-back cache in front of a RAM disk keeps writes and trims in
//! volatile memory until a flush (FUA writes go straight through). The driver runs random
//! commands through it on the simulated runtime; at a seeded virtual time the cache "loses
//! power": a seeded random half of its unflushed blocks reach the disk (as if evicted early),
//! the rest are lost, and every later command fails. A fresh cache over the same disk is then
//! read back with `verify_after_crash`, and the run goes on with the same model. A variant
//! whose flush skips one block must be caught.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{BlockDevice, DevError, DevRef, DevResult, DeviceInfo, WriteHints};
use flashrig_check::{run_check, run_ops, seeds, verify_after_crash, CheckConfig, Jitter, Model};
use flashrig_devices::RamDevice;
use flashrig_runtime::{run, sleep_ns, spawn, RuntimeKind};
use parking_lot::Mutex;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// A cached block: its data and metadata, or `None` for a trimmed block.
type Cached = Option<(Vec<u8>, Vec<u8>)>;

/// The write-back cache. Its disk is a RAM disk without latency, whose commands complete on
/// their first poll, so a flush persists its snapshot without ever suspending and two flushes
/// (or a flush and a FUA write) cannot interleave; over a slower disk this cache would need an
/// ordering of its own.
struct WriteBack {
    disk: DevRef,
    cache: Mutex<BTreeMap<u64, Cached>>,
    crashed: Mutex<bool>,
    /// The bug under test: flush leaves the lowest cached block behind.
    forgetful: bool,
}

impl WriteBack {
    fn new(disk: DevRef, forgetful: bool) -> Self {
        WriteBack { disk, cache: Mutex::default(), crashed: Mutex::new(false), forgetful }
    }

    fn alive(&self) -> DevResult<()> {
        if *self.crashed.lock() {
            return Err(DevError::DeviceFailed { name: "writeback".into() });
        }
        Ok(())
    }

    async fn persist(&self, lba: u64, c: &Cached) -> DevResult<()> {
        match c {
            Some((d, m)) => self.disk.write(lba, d, Some(m), WriteHints::NONE).await,
            None => self.disk.trim(lba, 1).await,
        }
    }

    /// Power cut: each unflushed block reaches the disk or not, by a coin the seed decides.
    async fn crash(&self, seed: u64) {
        *self.crashed.lock() = true;
        let cache = std::mem::take(&mut *self.cache.lock());
        let mut coin = Xoshiro256PlusPlus::seed_from_u64(seed);
        for (lba, c) in cache {
            if coin.next_u64() & 1 == 1 {
                self.persist(lba, &c).await.expect("ram write");
            }
        }
    }
}

#[async_trait(?Send)]
impl BlockDevice for WriteBack {
    fn info(&self) -> &DeviceInfo {
        self.disk.info()
    }
    fn kind(&self) -> &'static str {
        "writeback"
    }
    async fn read(&self, lba: u64, buf: &mut [u8], mut md: Option<&mut [u8]>) -> DevResult<()> {
        self.alive()?;
        self.disk.read(lba, buf, md.as_deref_mut()).await?;
        let bs = self.info().block_size as usize;
        let mdb = self.info().md_bytes_per_block as usize;
        let cache = self.cache.lock();
        for (i, b) in buf.chunks_exact_mut(bs).enumerate() {
            if let Some(c) = cache.get(&(lba + i as u64)) {
                let m = md.as_deref_mut().map(|m| &mut m[i * mdb..(i + 1) * mdb]);
                match c {
                    Some((d, cm)) => {
                        b.copy_from_slice(d);
                        if let Some(m) = m {
                            m.copy_from_slice(cm);
                        }
                    }
                    None => {
                        b.fill(0);
                        if let Some(m) = m {
                            m.fill(0);
                        }
                    }
                }
            }
        }
        Ok(())
    }
    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        self.alive()?;
        let bs = self.info().block_size as usize;
        let mdb = self.info().md_bytes_per_block as usize;
        if hints.fua {
            {
                let mut cache = self.cache.lock();
                for i in 0..data.len() / bs {
                    cache.remove(&(lba + i as u64));
                }
            }
            return self.disk.write(lba, data, md, hints).await;
        }
        let mut cache = self.cache.lock();
        for (i, b) in data.chunks_exact(bs).enumerate() {
            let m = md.map_or(vec![0u8; mdb], |m| m[i * mdb..(i + 1) * mdb].to_vec());
            cache.insert(lba + i as u64, Some((b.to_vec(), m)));
        }
        Ok(())
    }
    async fn flush(&self) -> DevResult<()> {
        self.alive()?;
        let mut dirty = std::mem::take(&mut *self.cache.lock());
        if self.forgetful {
            if let Some((&lba, _)) = dirty.iter().next() {
                let kept = dirty.remove(&lba).expect("present");
                self.cache.lock().entry(lba).or_insert(kept);
            }
        }
        for (lba, c) in dirty {
            self.persist(lba, &c).await?;
        }
        self.disk.flush().await
    }
    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        self.alive()?;
        let mut cache = self.cache.lock();
        for l in lba..lba + num_blocks {
            cache.insert(l, None);
        }
        Ok(())
    }
}

/// Runs commands, cuts power at `crash_at_ns`, recovers and checks; returns the crash check's
/// verdict, then (if it passed) goes on running against the recovered stack.
fn crash_case(seed: u64, forgetful: bool) -> Result<(), String> {
    let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
        let disk: DevRef = Arc::new(RamDevice::new("disk", 4096, 512, 16, 0));
        let cache = Arc::new(WriteBack::new(disk.clone(), forgetful));
        let top: DevRef = Arc::new(Jitter::new(cache.clone(), 5_000, seed));
        let model = Arc::new(Mutex::new(Model::new(4096, 16, seed)));
        let cfg = CheckConfig { seed, ops: 3000, span_blocks: Some(512), ..Default::default() };
        let driver = {
            let (top, model, cfg) = (top.clone(), model.clone(), cfg.clone());
            spawn(async move { run_ops(top, model, &cfg).await })
        };
        // Cut power part-way, with commands in flight.
        sleep_ns(50_000 + seed % 8 * 40_000).await;
        cache.crash(seed).await;
        let outcome = driver.await;
        assert!(outcome.is_err(), "seed {seed}: the driver ran to the end before the crash");
        let recovered: DevRef = Arc::new(WriteBack::new(disk, forgetful));
        verify_after_crash(&recovered, &model).await.map_err(|e| format!("seed {seed}: {e}"))?;
        let more = CheckConfig { seed: seed + 1_000_000, ops: 500, ..cfg };
        run_check(recovered, model, &more).await.map_err(|e| e.to_string())?;
        Ok(())
    });
    res
}

#[test]
fn a_correct_write_back_cache_passes_the_crash_check() {
    for seed in seeds(1, 20) {
        if let Err(e) = crash_case(seed, false) {
            panic!("{e}");
        }
    }
}

#[test]
fn a_flush_that_forgets_a_write_is_caught() {
    // A forgotten block goes unnoticed when it is overwritten before the crash or happens to
    // reach the disk anyway, so not every seed catches it; a fixed set of seeds (not
    // FLASHRIG_SEED) keeps the expectation stable.
    let caught = (1..=20).filter(|&s| crash_case(s, true).is_err()).count();
    eprintln!("{caught} of 20 seeds caught the forgetful flush");
    assert!(caught > 0, "no seed caught a flush that leaves a block behind");
}
