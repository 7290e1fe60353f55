//! Goal: `twophase` with per-block checksums (24 metadata bytes per member block) never returns
//! wrong data when member blocks rot or member writes go missing or astray, and repairs what
//! its redundancy allows: bit flips in up to m copies of a block (log replicas, stripe data and
//! parity) are healed by the read that meets them; the same block bad on every copy answers
//! `DevError::Corrupt` (also after the cleaner ran, and after a reopen); a lost write and a
//! misdirected write on one member are caught and healed; the scrub finds and repairs
//! corruption no read touched, and a second scrub finds nothing; recovery heals what it finds
//! damaged; a randomized run of the reference-model driver with bit flips on up to m members
//! reads back everything. Without checksums (16 metadata bytes) `integrity()` says so, lost
//! writes are still caught by the metadata, and the scrub recomputes parity that disagrees with
//! the data.
//!
//! Method: RAM members behind `flashrig_check::Rot` (which flips bits of stored blocks, and
//! loses or misdirects armed writes) on the simulated runtime. `Twophase::placement` says where
//! a block's copies are (replicas in the order a one-block read tries them), and the tests read
//! the RAM members below `Rot` to check that a healed block is, byte for byte, what it was
//! before the fault (data and metadata). The counters `checksum_errors`, `healed_blocks` and
//! `unrepairable_blocks` and the scrub reports are asserted exactly where the test knows what
//! it broke. The randomized test (one and two reactors) takes its seeds from
//! `flashrig_check::seeds` and names the seed in its failure message (`FLASHRIG_SEED=<n>`
//! reruns one, `FLASHRIG_CASES=<n>` runs more).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use flashrig_blockdev::{
    snapshot_stack, BlockDevice, DevError, DevRef, ScrubReport, VendorCommand, VendorReply,
    WriteHints,
};
use flashrig_check::{run_check, seeds, verify_all, CheckConfig, Model, Rot, WriteFault};
use flashrig_devices::RamDevice;
use flashrig_engines::twophase::format::BlockMd;
use flashrig_engines::twophase::{Placement, Twophase, TwophaseOptions};
use flashrig_runtime::{run, sleep_ns, spawn, RuntimeKind};
use parking_lot::Mutex;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

const BS: usize = 4096;
const CHUNK_BLOCKS: u64 = 4;
const MEMBER_BLOCKS: u64 = 256;
/// Metadata bytes per member block with the checksum.
const MD_CHECKED: u32 = 24;
/// Member latency, so that I/O takes virtual time and the randomized test's bit flips fall
/// between commands.
const LATENCY_NS: u64 = 10_000;
/// Blocks rewritten after the conversion settled, which stay in the log.
const LOG_TAIL_BLOCKS: u64 = 8;

struct Array {
    tp: Arc<Twophase>,
    rots: Vec<Arc<Rot>>,
    rams: Vec<Arc<RamDevice>>,
}

fn options(k: usize, m: usize, watermark: f64) -> TwophaseOptions {
    TwophaseOptions {
        chunk_blocks: CHUNK_BLOCKS,
        watermark_fraction: watermark,
        low_watermark_fraction: watermark / 2.0,
        ..TwophaseOptions::new(k, m)
    }
}

fn members(k: usize, m: usize, md_bytes: u32) -> (Vec<Arc<Rot>>, Vec<Arc<RamDevice>>) {
    let rams: Vec<Arc<RamDevice>> = (0..k + m)
        .map(|i| {
            let name = format!("ram{i}");
            Arc::new(RamDevice::new(&name, BS as u32, MEMBER_BLOCKS, md_bytes, LATENCY_NS))
        })
        .collect();
    let rots = rams.iter().map(|r| Arc::new(Rot::new(r.clone() as DevRef))).collect();
    (rots, rams)
}

fn build(k: usize, m: usize, md_bytes: u32, watermark: f64) -> Array {
    let (rots, rams) = members(k, m, md_bytes);
    let devs: Vec<DevRef> = rots.iter().map(|r| r.clone() as DevRef).collect();
    let tp = Twophase::new("tp", devs, options(k, m, watermark)).expect("twophase");
    Array { tp: Arc::new(tp), rots, rams }
}

/// The contents of version `version` of user block `lba`.
fn pattern(lba: u64, version: u64) -> Vec<u8> {
    let mut x =
        lba.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    (0..BS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn write(tp: &Twophase, lba: u64, version: u64) {
    tp.write(lba, &pattern(lba, version), None, WriteHints::NONE).await.expect("a write");
}

async fn read(tp: &Twophase, lba: u64) -> Result<Vec<u8>, DevError> {
    let mut b = vec![0u8; BS];
    tp.read(lba, &mut b, None).await.map(|()| b)
}

/// Writes version 1 of LBAs `0..blocks` and lets the background conversion settle (most of
/// them end up in stripes), then writes the last [`LOG_TAIL_BLOCKS`] again (same contents,
/// below the watermark: they stay in the log) and flushes.
async fn fill(tp: &Twophase, blocks: u64) {
    for lba in 0..blocks {
        write(tp, lba, 1).await;
    }
    settle(tp).await;
    for lba in blocks - LOG_TAIL_BLOCKS..blocks {
        write(tp, lba, 1).await;
    }
    tp.flush().await.expect("a flush");
}

async fn settle(tp: &Twophase) {
    sleep_ns(1_000_000_000).await;
    tp.flush().await.expect("a flush");
}

/// A block of a RAM member below `Rot`: (data, metadata).
async fn raw(a: &Array, member: usize, lba: u64) -> (Vec<u8>, Vec<u8>) {
    let ram = &a.rams[member];
    let mut data = vec![0u8; BS];
    let mut md = vec![0u8; ram.info().md_bytes_per_block as usize];
    ram.read(lba, &mut data, Some(&mut md)).await.expect("a raw read");
    (data, md)
}

fn counters(tp: &Twophase) -> BTreeMap<String, u64> {
    snapshot_stack(tp).counters
}

fn integrity_counters(tp: &Twophase) -> [u64; 3] {
    let c = counters(tp);
    [c["checksum_errors"], c["healed_blocks"], c["unrepairable_blocks"]]
}

async fn scrub(tp: &Twophase) -> ScrubReport {
    match tp.vendor(VendorCommand::Scrub).await.expect("a scrub") {
        VendorReply::Scrubbed(r) => r,
        other => panic!("a scrub answered {other:?}"),
    }
}

/// The first LBA below `blocks` stored in a stripe (`striped`) or in the log.
fn find(tp: &Twophase, blocks: u64, striped: bool) -> (u64, Placement) {
    (0..blocks)
        .find_map(|l| tp.placement(l).filter(|p| p.striped == striped).map(|p| (l, p)))
        .unwrap_or_else(|| panic!("no block {} the log", if striped { "out of" } else { "in" }))
}

/// Flips one bit of a member block and returns what the block held before.
async fn flip(a: &Array, member: usize, lba: u64, bit: u64) -> (Vec<u8>, Vec<u8>) {
    let before = raw(a, member, lba).await;
    a.rots[member].flip(lba, bit).await.expect("a flip");
    before
}

#[test]
fn bit_flips_on_up_to_m_copies_are_healed_on_read() {
    for (k, m) in [(4, 1), (4, 2)] {
        let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
            let a = build(k, m, MD_CHECKED, 0.02);
            let tp = &a.tp;
            fill(tp, 256).await;
            let geo = tp.geometry();

            // m of the m + 1 replicas of a log block, the first m a read tries.
            let (lba, p) = find(tp, 256, false);
            let mut saved = Vec::new();
            for (n, &(i, at)) in p.copies[..m].iter().enumerate() {
                saved.push((i, at, flip(&a, i, at, 100 + n as u64 * 977).await));
            }
            assert_eq!(read(tp, lba).await.expect("healed read"), pattern(lba, 1));
            assert_eq!(integrity_counters(tp), [m as u64, m as u64, 0], "log block {lba}");

            // A stripe's data block and, with m = 2, a parity block at the same offset.
            let (slba, sp) = find(tp, 256, true);
            let (di, dat) = sp.copies[0];
            saved.push((di, dat, flip(&a, di, dat, 4242).await));
            if m == 2 {
                let pi = geo.parity_member(sp.row, 1);
                saved.push((pi, dat, flip(&a, pi, dat, 31).await));
            }
            assert_eq!(read(tp, slba).await.expect("healed read"), pattern(slba, 1));
            let want = 2 * m as u64;
            assert_eq!(integrity_counters(tp), [want, want, 0], "stripe block {slba}");

            // Every bad block was rewritten with exactly what it held before the flip.
            for (i, at, before) in saved {
                assert!(raw(&a, i, at).await == before, "member {i} block {at} not healed");
            }
            // Everything else still reads back.
            for l in 0..256 {
                assert_eq!(read(tp, l).await.expect("a read"), pattern(l, 1), "block {l}");
            }
            assert_eq!(integrity_counters(tp), [want, want, 0]);
        });
        res
    }
}

#[test]
fn the_same_block_bad_on_every_copy_fails_with_corrupt() {
    for (k, m) in [(4, 1), (4, 2)] {
        let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
            let a = build(k, m, MD_CHECKED, 0.02);
            let tp = &a.tp;
            fill(tp, 256).await;
            let geo = tp.geometry();

            // Every replica of a log block.
            let (lba, p) = find(tp, 256, false);
            for &(i, at) in &p.copies {
                flip(&a, i, at, 77).await;
            }
            let err = read(tp, lba).await.expect_err("a read of a block bad on every copy");
            assert!(
                matches!(err, DevError::Corrupt { lba: l, .. } if l == lba),
                "log block {lba}: {err}"
            );
            // A longer read over it fails the same way, naming the block.
            let first = lba.saturating_sub(1);
            let mut buf = vec![0u8; 3 * BS];
            let err = tp.read(first, &mut buf, None).await.expect_err("a read over it");
            assert!(matches!(err, DevError::Corrupt { lba: l, .. } if l == lba), "{err}");

            // A stripe's data block and m other chunks at its offset.
            let (slba, sp) = find(tp, 256, true);
            let (di, dat) = sp.copies[0];
            flip(&a, di, dat, 5).await;
            for r in 0..m {
                flip(&a, geo.parity_member(sp.row, r), dat, 6).await;
            }
            let err = read(tp, slba).await.expect_err("a read of a stripe block beyond parity");
            assert!(matches!(err, DevError::Corrupt { lba: l, .. } if l == slba), "{err}");
            let c = integrity_counters(tp);
            assert!(c[2] >= 3, "unrepairable blocks counted: {c:?}");

            // Other blocks read back; the cleaner, made to run by more writes, leaves the bad
            // log block where it is instead of moving it with a fresh checksum.
            for l in 256..512 {
                write(tp, l, 1).await;
            }
            settle(tp).await;
            for l in (0..512).filter(|&l| l != lba && l != slba) {
                assert_eq!(read(tp, l).await.expect("a read"), pattern(l, 1), "block {l}");
            }
            assert!(matches!(read(tp, lba).await, Err(DevError::Corrupt { .. })));
            assert!(matches!(read(tp, slba).await, Err(DevError::Corrupt { .. })));
            assert_eq!(tp.placement(lba).expect("mapped").copies, p.copies, "not moved");

            // The scrub finds both and can repair neither.
            let rep = scrub(tp).await;
            assert!(rep.unrepairable >= 2, "{rep:?}");
            // Overwriting a corrupt block makes it whole.
            write(tp, lba, 2).await;
            write(tp, slba, 2).await;
            assert_eq!(read(tp, lba).await.expect("rewritten"), pattern(lba, 2));
            assert_eq!(read(tp, slba).await.expect("rewritten"), pattern(slba, 2));
        });
        res
    }
}

/// Arms `fault` on each member in turn until a one-block write of `lba` (version `version`)
/// sets it off; returns the member.
async fn write_with_fault(a: &Array, lba: u64, version: u64, fault: WriteFault) -> usize {
    for (i, rot) in a.rots.iter().enumerate() {
        let before = rot.counts();
        rot.arm(0, fault);
        write(&a.tp, lba, version).await;
        if rot.counts() != before {
            return i;
        }
        rot.disarm();
    }
    panic!("the write of block {lba} reached no member");
}

#[test]
fn lost_and_misdirected_writes_on_one_member_are_caught_and_healed() {
    let (res, _) = run(RuntimeKind::Sim, 1, || async {
        // A high watermark: no conversion moves blocks while the test looks at them.
        let a = build(4, 1, MD_CHECKED, 0.3);
        let tp = &a.tp;
        fill(tp, 80).await;
        assert_eq!(tp.stats().stripe_rows, 0);

        // A lost write: the member keeps what was there before (nothing: a fresh log block).
        let y = 5;
        let i = write_with_fault(&a, y, 2, WriteFault::Lose).await;
        let p = tp.placement(y).expect("mapped");
        let &(_, at) = p.copies.iter().find(|c| c.0 == i).expect("a copy on the member");
        assert_ne!(raw(&a, i, at).await.0, pattern(y, 2), "the write was lost");
        assert_eq!(read(tp, y).await.expect("a read"), pattern(y, 2));
        // Caught by the read if it tried that copy first, otherwise by the scrub.
        scrub(tp).await;
        assert_eq!(integrity_counters(tp), [1, 1, 0]);
        let (data, md) = raw(&a, i, at).await;
        assert_eq!(data, pattern(y, 2), "the lost copy is rewritten");
        assert!(BlockMd::checksum_ok(&md, at, &data));
        let copy = BlockMd::decode(&md).unwrap().expect("metadata");
        assert_eq!((copy.key, copy.seq), {
            let other = p.copies.iter().find(|c| c.0 != i).unwrap();
            let b = BlockMd::decode(&raw(&a, other.0, other.1).await.1).unwrap().unwrap();
            (y, b.seq)
        });

        // A misdirected write: the member keeps the old contents where the block belongs and
        // the block overwrites another one. Shifts go one row back at a time until the block
        // lands on a live block of another user block.
        let mut hit_live = false;
        for back in 1..8u64 {
            let z = 10 + back;
            let image: Vec<Vec<(Vec<u8>, Vec<u8>)>> = {
                let mut image = Vec::new();
                for m in 0..a.rams.len() {
                    let mut blocks = Vec::new();
                    for l in 0..MEMBER_BLOCKS {
                        blocks.push(raw(&a, m, l).await);
                    }
                    image.push(blocks);
                }
                image
            };
            let before = integrity_counters(tp);
            let shift = MEMBER_BLOCKS - back * CHUNK_BLOCKS;
            let i = write_with_fault(&a, z, 2, WriteFault::Misdirect { shift_blocks: shift }).await;
            let p = tp.placement(z).expect("mapped");
            let &(_, at) = p.copies.iter().find(|c| c.0 == i).expect("a copy on the member");
            let dest = (at + shift) % MEMBER_BLOCKS;
            assert_eq!(raw(&a, i, dest).await.0, pattern(z, 2), "the write landed elsewhere");
            // Which user block lived where it landed.
            let live: HashMap<(usize, u64), u64> = (0..80)
                .filter_map(|l| tp.placement(l).map(|p| (l, p)))
                .flat_map(|(l, p)| p.copies.into_iter().map(move |c| (c, l)))
                .collect();
            let victim = live.get(&(i, dest)).copied();
            for l in 0..80 {
                let v = if l == y || l == z { 2 } else { 1 };
                assert_eq!(read(tp, l).await.expect("a read"), pattern(l, v), "block {l}");
            }
            scrub(tp).await;
            let bad = 1 + victim.is_some() as u64;
            let after = integrity_counters(tp);
            assert_eq!(
                [after[0] - before[0], after[1] - before[1], after[2]],
                [bad, bad, 0],
                "shift {shift}, landed on {victim:?}"
            );
            assert_eq!(raw(&a, i, at).await.0, pattern(z, 2), "the missed copy is rewritten");
            if victim.is_some() {
                let want = &image[i][dest as usize];
                assert!(raw(&a, i, dest).await == *want, "the overwritten block is healed");
                hit_live = true;
                break;
            }
        }
        assert!(hit_live, "no misdirected write landed on a live block");
        let rep = scrub(tp).await;
        assert_eq!((rep.checksum_errors, rep.repaired, rep.unrepairable), (0, 0, 0));
    });
    res
}

#[test]
fn scrub_repairs_what_no_read_touched_and_a_second_scrub_finds_nothing() {
    for (k, m) in [(4, 1), (4, 2)] {
        let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
            let a = build(k, m, MD_CHECKED, 0.02);
            let tp = &a.tp;
            fill(tp, 256).await;
            let geo = tp.geometry();
            let mut saved = Vec::new();
            // The replicas a read tries last (never read while the first is good).
            let (_, p) = find(tp, 256, false);
            for (n, &(i, at)) in p.copies[1..].iter().enumerate() {
                saved.push((i, at, flip(&a, i, at, 9 + n as u64).await));
            }
            // A stripe's data block, and its parity blocks at other offsets.
            let (_, sp) = find(tp, 256, true);
            let (di, dat) = sp.copies[0];
            saved.push((di, dat, flip(&a, di, dat, 1234).await));
            let base = geo.member_lba(sp.row);
            for r in 0..m {
                let at = base + (dat - base + 1 + r as u64) % CHUNK_BLOCKS;
                let pi = geo.parity_member(sp.row, r);
                saved.push((pi, at, flip(&a, pi, at, 4321).await));
            }
            let flipped = saved.len() as u64;
            assert_eq!(integrity_counters(tp), [0, 0, 0], "nothing read them");

            let first = scrub(tp).await;
            assert!(first.blocks_checked > 0);
            assert_eq!(first.checksum_errors, flipped, "{first:?}");
            assert_eq!(first.repaired, flipped, "{first:?}");
            assert_eq!((first.unrepairable, first.redundancy_mismatches), (0, 0), "{first:?}");
            assert_eq!(integrity_counters(tp), [flipped, flipped, 0]);
            for (i, at, before) in saved {
                assert!(raw(&a, i, at).await == before, "member {i} block {at} not repaired");
            }
            let second = scrub(tp).await;
            assert_eq!(
                second,
                ScrubReport { blocks_checked: first.blocks_checked, ..ScrubReport::default() }
            );
            for l in 0..256 {
                assert_eq!(read(tp, l).await.expect("a read"), pattern(l, 1), "block {l}");
            }
        });
        res
    }
}

#[test]
fn recovery_heals_damaged_blocks_and_never_falls_back_to_an_older_version() {
    let (res, _) = run(RuntimeKind::Sim, 1, || async {
        let a = build(4, 1, MD_CHECKED, 0.02);
        let tp = a.tp.clone();
        fill(&tp, 256).await;
        // One replica of a log block and one stripe data block, damaged.
        let (lba, p) = find(&tp, 256, false);
        let (slba, sp) = find(&tp, 256, true);
        let mut saved = Vec::new();
        for &(i, at) in [p.copies[0], sp.copies[0]].iter() {
            saved.push((i, at, flip(&a, i, at, 99).await));
        }
        // A block whose older version is in a stripe and whose newest is bad on every copy.
        let old = (slba + 1..256).find(|&l| tp.placement(l).unwrap().striped).expect("striped");
        write(&tp, old, 2).await;
        tp.flush().await.expect("a flush");
        let newest = tp.placement(old).expect("mapped");
        assert!(!newest.striped);
        for &(i, at) in &newest.copies {
            flip(&a, i, at, 3).await;
        }
        drop(tp);
        drop(a.tp);
        let devs: Vec<DevRef> = a.rots.iter().map(|r| r.clone() as DevRef).collect();
        let tp = Twophase::open("tp", devs, options(4, 1, 0.02)).await.expect("reopens");
        let rec = tp.recovery().expect("a recovery report");
        assert_eq!((rec.checksum_errors, rec.healed_blocks), (4, 2), "{rec:?}");
        assert_eq!(rec.unrepairable_blocks, 1, "{rec:?}");
        let a = Array { tp: Arc::new(tp), rots: a.rots, rams: a.rams };
        for (i, at, before) in saved {
            assert!(raw(&a, i, at).await == before, "member {i} block {at} not healed");
        }
        for l in (0..256).filter(|&l| l != old) {
            assert_eq!(read(&a.tp, l).await.expect("a read"), pattern(l, 1), "block {l}");
        }
        assert_eq!(read(&a.tp, lba).await.unwrap(), pattern(lba, 1));
        let err = read(&a.tp, old).await.expect_err("the newest version is bad everywhere");
        assert!(matches!(err, DevError::Corrupt { .. }), "{err}");
    });
    res
}

#[test]
fn without_checksums_lost_writes_are_caught_by_the_metadata_and_scrub_rechecks_parity() {
    let (res, _) = run(RuntimeKind::Sim, 1, || async {
        let a = build(4, 1, 16, 0.02);
        let tp = &a.tp;
        assert!(!tp.integrity());
        assert!(build(4, 1, MD_CHECKED, 0.02).tp.integrity());
        fill(tp, 256).await;

        let y = 300;
        let i = write_with_fault(&a, y, 1, WriteFault::Lose).await;
        let p = tp.placement(y).expect("mapped");
        let &(_, at) = p.copies.iter().find(|c| c.0 == i).expect("a copy on the member");
        assert_eq!(read(tp, y).await.expect("a read"), pattern(y, 1));
        let rep = scrub(tp).await;
        assert_eq!(integrity_counters(tp), [1, 1, 0], "{rep:?}");
        assert_eq!(raw(&a, i, at).await.0, pattern(y, 1), "the lost copy is rewritten");

        // Parity that disagrees with the data it protects is recomputed.
        let (_, sp) = find(tp, 256, true);
        let (_, dat) = sp.copies[0];
        let pi = tp.geometry().parity_member(sp.row, 0);
        let before = flip(&a, pi, dat, 17).await;
        let rep = scrub(tp).await;
        assert_eq!((rep.redundancy_mismatches, rep.repaired, rep.checksum_errors), (1, 1, 0));
        assert!(raw(&a, pi, dat).await == before, "parity recomputed");
        let rep = scrub(tp).await;
        assert_eq!((rep.redundancy_mismatches, rep.repaired), (0, 0));
    });
    res
}

#[test]
fn random_io_with_bit_flips_on_up_to_m_members_reads_back_right() {
    for seed in seeds(1700, 3) {
        for ((k, m), reactors) in [((4, 1), 1), ((4, 2), 2), ((2, 1), 1), ((2, 1), 2)] {
            let what =
                format!("twophase {k}+{m} with bit flips on {reactors} reactors, seed {seed}");
            let (res, _) = run(RuntimeKind::Sim, reactors, move || async move {
                let a = build(k, m, MD_CHECKED, 0.02);
                let dev: DevRef = a.tp.clone();
                let cap = dev.info().num_blocks;
                let cfg = CheckConfig {
                    seed,
                    ops: 1500,
                    max_io_blocks: 2 * CHUNK_BLOCKS,
                    span_blocks: Some(cap),
                    spread_over_reactors: reactors > 1,
                    ..CheckConfig::default()
                };
                let model = Arc::new(Mutex::new(Model::for_device(dev.info(), seed)));
                // Bit flips at random times and places, on members 0..m only, so no block
                // ever has more than m bad copies (or chunks at one offset).
                let stop = Arc::new(AtomicBool::new(false));
                let flipper = {
                    let (rots, stop) = (a.rots.clone(), stop.clone());
                    spawn(async move {
                        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xF11F);
                        let mut flips = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            sleep_ns(rng.next_u64() % 40_000).await;
                            let member = (rng.next_u64() % m as u64) as usize;
                            let lba = rng.next_u64() % MEMBER_BLOCKS;
                            if rots[member].flip(lba, rng.next_u64()).await.is_ok() {
                                flips += 1;
                            }
                        }
                        flips
                    })
                };
                let rep = run_check(dev.clone(), model.clone(), &cfg).await;
                stop.store(true, Ordering::Relaxed);
                let flips = flipper.await;
                let rep = rep.map_err(|e| e.to_string())?;
                verify_all(&dev, &model).await?;
                let first = scrub(&a.tp).await;
                let second = scrub(&a.tp).await;
                let c = counters(&a.tp);
                Ok::<_, String>((rep, flips, first, second, c))
            });
            let (rep, flips, first, second, c) = res.unwrap_or_else(|e| panic!("{what}: {e}"));
            eprintln!(
                "{what}: {flips} flips, {} blocks checked by the driver; checksum_errors {}, \
                 healed_blocks {}; the scrub after the run repaired {}",
                rep.blocks_checked, c["checksum_errors"], c["healed_blocks"], first.repaired
            );
            assert!(rep.blocks_checked > 0 && flips > 50, "{what}: {flips} flips, {rep:?}");
            assert_eq!(first.unrepairable, 0, "{what}: {first:?}");
            assert_eq!(c["unrepairable_blocks"], 0, "{what}: {c:?}");
            assert!(c["checksum_errors"] > 0, "{what}: no flip was ever found, {c:?}");
            assert_eq!(
                (second.checksum_errors, second.repaired, second.unrepairable),
                (0, 0, 0),
                "{what}: the second scrub found {second:?}"
            );
        }
    }
}
