//! Goal: every device and stacked engine of the foundation stores and returns real bytes
//! exactly as the block-device contract says, on both runtimes, and the checker that says so
//! would notice if one did not.
//!
//! Method: the seeded random driver of `flashrig-check` runs reads, writes (some with
//! per-block metadata, some FUA), trims and flushes with several commands in flight against
//! `ram`, `file` (direct and buffered, with a metadata sidecar), and `stripe` and `concat` over
//! both, under the simulated runtime (one and two reactors) and the real runtime (two reactor
//! threads); members sit behind `Jitter` so commands complete out of order. Every read is
//! compared with the reference model and, at the end, every block written is read back.
//! Deliberately broken devices (one that drops a write, one that misdirects one) must fail the
//! same check. Failures print the seed; `FLASHRIG_SEED=<n>` reruns exactly that case.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{DevRef, DevResult, WriteHints};
use flashrig_check::{
    run_check, seeds, CheckConfig, CheckError, CheckReport, Jitter, Model, Tap, Tapped,
};
use flashrig_devices::{FileDevice, FileOptions, IoEngine, RamDevice};
use flashrig_engines::{Concat, Stripe};
use flashrig_runtime::{run, RuntimeKind};
use parking_lot::Mutex;

/// Runs the checker against the stack `build` makes (inside the runtime).
fn check(
    kind: RuntimeKind,
    reactors: usize,
    cfg: CheckConfig,
    build: impl FnOnce() -> DevRef + Send + 'static,
) -> Result<CheckReport, CheckError> {
    let (res, _) = run(kind, reactors, move || async move {
        let dev = build();
        let info = dev.info().clone();
        let model = Arc::new(Mutex::new(Model::for_device(&info, cfg.seed)));
        run_check(dev, model, &cfg).await
    });
    res
}

/// The runtimes every stack is checked on: (runtime, reactors); with two reactors the driver
/// spreads its in-flight slots over both.
const RUNTIMES: [(RuntimeKind, usize); 3] =
    [(RuntimeKind::Sim, 1), (RuntimeKind::Sim, 2), (RuntimeKind::Real, 2)];

fn config(seed: u64, reactors: usize) -> CheckConfig {
    CheckConfig { seed, spread_over_reactors: reactors > 1, ..CheckConfig::default() }
}

fn ram(name: &str, block_size: u32, blocks: u64, md: u32) -> DevRef {
    Arc::new(RamDevice::new(name, block_size, blocks, md, 0))
}

fn jitter(dev: DevRef, seed: u64) -> DevRef {
    Arc::new(Jitter::new(dev, 20_000, seed))
}

fn assert_checked(r: Result<CheckReport, CheckError>, what: &str) {
    match r {
        Ok(rep) => {
            assert!(rep.writes > 0 && rep.reads > 0 && rep.blocks_checked > 0, "{what}: {rep:?}")
        }
        Err(e) => panic!("{what}: {e}"),
    }
}

#[test]
fn ram_matches_the_model() {
    for seed in seeds(1, 4) {
        for (kind, reactors) in RUNTIMES {
            for (bs, md) in [(4096, 0), (4096, 16), (512, 8)] {
                let r = check(kind, reactors, config(seed, reactors), move || {
                    jitter(ram("ram", bs, 2048, md), seed)
                });
                assert_checked(r, &format!("ram bs={bs} md={md} on {kind:?}x{reactors}"));
            }
        }
    }
}

fn scratch_dir() -> tempfile::TempDir {
    // Under target/, on the disk: tmpfs (often /tmp) refuses O_DIRECT.
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch directory")
}

fn file(path: &Path, blocks: u64, md: u32, direct: bool, io: IoEngine) -> DevRef {
    let opts = FileOptions {
        path: path.to_path_buf(),
        size_bytes: Some(blocks * 4096),
        block_size: 4096,
        md_bytes_per_block: md,
        direct,
        latency_ns: 0,
        io,
    };
    Arc::new(FileDevice::open("file", &opts).expect("open file device"))
}

#[test]
fn file_matches_the_model() {
    for seed in seeds(100, 2) {
        for (kind, reactors) in RUNTIMES {
            // io_uring only exists on the real runtime; `auto` picks it there.
            let engines: &[IoEngine] = match kind {
                RuntimeKind::Real => &[IoEngine::Auto, IoEngine::Sync],
                RuntimeKind::Sim => &[IoEngine::Auto],
            };
            for &io in engines {
                for (md, direct) in [(0, true), (16, true), (16, false)] {
                    let dir = scratch_dir();
                    let path = dir.path().join("dev.img");
                    let r = check(kind, reactors, config(seed, reactors), move || {
                        jitter(file(&path, 2048, md, direct, io), seed)
                    });
                    let what =
                        format!("file md={md} direct={direct} io={io:?} on {kind:?}x{reactors}");
                    assert_checked(r, &what);
                }
            }
        }
    }
}

#[test]
fn stripe_and_concat_over_ram_match_the_model() {
    for seed in seeds(200, 4) {
        for (kind, reactors) in RUNTIMES {
            let r = check(kind, reactors, config(seed, reactors), move || {
                let members = (0..3u64)
                    .map(|i| jitter(ram(&format!("ram{i}"), 4096, 1024, 16), seed + i))
                    .collect();
                Arc::new(Stripe::new("stripe", members, 4).expect("stripe"))
            });
            assert_checked(r, &format!("stripe over ram on {kind:?}x{reactors}"));
            let r = check(kind, reactors, config(seed, reactors), move || {
                // Unequal members, so requests cross member boundaries at odd places.
                let members = [700u64, 37, 1500]
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| jitter(ram(&format!("ram{i}"), 4096, n, 16), seed + i as u64))
                    .collect();
                Arc::new(Concat::new("concat", members).expect("concat"))
            });
            assert_checked(r, &format!("concat over ram on {kind:?}x{reactors}"));
        }
    }
}

#[test]
fn stripe_over_files_matches_the_model() {
    for seed in seeds(300, 2) {
        for (kind, reactors) in RUNTIMES {
            let dir = scratch_dir();
            let base = dir.path().to_path_buf();
            let r = check(kind, reactors, config(seed, reactors), move || {
                let members = (0..4u64)
                    .map(|i| {
                        let f =
                            file(&base.join(format!("m{i}.img")), 512, 16, true, IoEngine::Auto);
                        jitter(f, seed + i)
                    })
                    .collect();
                Arc::new(Stripe::new("stripe", members, 16).expect("stripe"))
            });
            assert_checked(r, &format!("stripe over files on {kind:?}x{reactors}"));
        }
    }
}

/// A broken device's tap: passes everything through except that it acknowledges every `nth`
/// write without performing it, or performs it one block off. (Every nth, not just one: a
/// single damaged block may be overwritten before anything reads it, and then no checker
/// could tell.)
struct Broken {
    nth: u64,
    misdirect: bool,
    writes: Mutex<u64>,
}

#[async_trait(?Send)]
impl Tap for Broken {
    fn kind(&self) -> &'static str {
        "broken"
    }
    async fn write(
        &self,
        below: &DevRef,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        let n = {
            let mut w = self.writes.lock();
            *w += 1;
            *w
        };
        if n % self.nth == 0 {
            if !self.misdirect {
                return Ok(());
            }
            let blocks = (data.len() / below.info().block_size as usize) as u64;
            let to = if lba + blocks < below.info().num_blocks { lba + 1 } else { lba - 1 };
            return below.write(to, data, md, hints).await;
        }
        below.write(lba, data, md, hints).await
    }
}

#[test]
fn the_checker_catches_lost_and_misdirected_writes() {
    for misdirect in [false, true] {
        for (kind, reactors) in RUNTIMES {
            let seed = 7;
            let cfg = CheckConfig {
                // No trims: a trim could hide the damage before it is read.
                weights: flashrig_check::OpWeights { read: 40, write: 50, trim: 0, flush: 10 },
                ..config(seed, reactors)
            };
            let r = check(kind, reactors, cfg, move || {
                Arc::new(Tapped::over(
                    ram("ram", 4096, 256, 0),
                    Broken { nth: 50, misdirect, writes: Mutex::new(0) },
                ))
            });
            let e = r.expect_err(&format!(
                "broken (misdirect={misdirect}) on {kind:?}x{reactors} must fail the check"
            ));
            let text = e.to_string();
            assert!(text.contains("FLASHRIG_SEED=7"), "{text}");
            assert!(text.contains("expected"), "{text}");
        }
    }
}
