//! Goal: `raid` over members with metadata bytes seals every block with a checksum of its
//! data and address, never returns a block that fails it, rebuilds such a block from the
//! stripe's other chunks and rewrites it (self-heal), answers `DevError::Corrupt` when more
//! chunks of a row are damaged than parity covers, and a scrub finds and repairs what no read
//! touched, including (with two parity chunks) a write a member lost or misdirected.
//!
//! Method: arrays of RAM members (16 metadata bytes per block) behind `Rot`, which flips bits
//! of stored blocks and loses or misdirects armed writes. The tests write known contents,
//! damage members below the engine, and compare every read with what was written and every
//! raw member block with its contents before the damage. The randomized test draws damage
//! on at most m members per round from a seed and prints the seed on failure.

use std::sync::Arc;

use flashrig_blockdev::{
    BlockDevice, DevError, DevRef, ScrubReport, VendorCommand, VendorReply, WriteHints,
};
use flashrig_check::{seeds, Rot, WriteFault};
use flashrig_devices::RamDevice;
use flashrig_engines::raid::{Raid, RaidOptions, WriteMode};
use flashrig_runtime::{run, HostCosts, RuntimeKind};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

const BS: usize = 4096;
const CHUNK_BLOCKS: u64 = 4;
const MEMBER_BLOCKS: u64 = 64;

struct Array {
    raid: Raid,
    rots: Vec<Arc<Rot>>,
}

fn build(k: usize, m: usize, md_bytes: u32) -> Array {
    let rots: Vec<Arc<Rot>> = (0..k + m)
        .map(|i| {
            let ram: DevRef =
                Arc::new(RamDevice::new(&format!("ram{i}"), BS as u32, MEMBER_BLOCKS, md_bytes, 0));
            Arc::new(Rot::new(ram))
        })
        .collect();
    let opt = RaidOptions {
        k,
        m,
        chunk_blocks: CHUNK_BLOCKS,
        write_mode: WriteMode::Any,
        cache_stripes: 0,
        costs: Arc::new(HostCosts::default()),
        lock_model: None,
    };
    let devs = rots.iter().map(|r| r.clone() as DevRef).collect();
    Array { raid: Raid::new("raid", devs, opt).expect("raid"), rots }
}

/// The contents of user block `lba` in version `v`: every byte names both.
fn block(lba: u64, v: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    for (i, w) in b.chunks_mut(8).enumerate() {
        w.copy_from_slice(&(lba << 32 | v << 16 | i as u64).to_le_bytes());
    }
    b
}

/// Writes every user block (version `v`) with a mix of full-stripe and partial writes.
async fn fill(raid: &Raid, v: u64) -> Vec<Vec<u8>> {
    let n = raid.info().num_blocks;
    let all: Vec<Vec<u8>> = (0..n).map(|l| block(l, v)).collect();
    let mut lba = 0;
    let mut len = 1;
    while lba < n {
        let blocks = len.min(n - lba);
        let data: Vec<u8> = all[lba as usize..(lba + blocks) as usize].concat();
        raid.write(lba, &data, None, WriteHints::NONE).await.unwrap();
        lba += blocks;
        len = len % 19 + 3;
    }
    raid.flush().await.unwrap();
    all
}

async fn raw(dev: &dyn BlockDevice) -> Vec<u8> {
    let mut b = vec![0u8; MEMBER_BLOCKS as usize * BS];
    dev.read(0, &mut b, None).await.unwrap();
    b
}

async fn scrub(raid: &Raid) -> ScrubReport {
    match raid.vendor(VendorCommand::Scrub).await.unwrap() {
        VendorReply::Scrubbed(r) => r,
        other => panic!("scrub answered {other:?}"),
    }
}

fn counter(raid: &Raid, name: &str) -> u64 {
    raid.metrics().unwrap().counter(name).get()
}

/// Reads every user block one at a time and checks it against `want`.
async fn check_all(raid: &Raid, want: &[Vec<u8>], what: &str) {
    for (lba, w) in want.iter().enumerate() {
        let mut got = vec![0u8; BS];
        raid.read(lba as u64, &mut got, None)
            .await
            .unwrap_or_else(|e| panic!("{what}: {lba}: {e}"));
        assert!(got == *w, "{what}: block {lba} read back wrong");
    }
}

#[test]
fn flipped_bits_on_up_to_m_members_are_rebuilt_rewritten_and_counted() {
    for (k, m) in [(4, 1), (4, 2)] {
        let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
            let a = build(k, m, 16);
            assert!(a.raid.integrity());
            let want = fill(&a.raid, 1).await;
            let mut before = Vec::new();
            for r in &a.rots {
                before.push(raw(r.as_ref()).await);
            }
            // Damage m members, some rows on several of them at once (data and parity alike).
            let mut flips = 0;
            for i in 0..m {
                for lba in (i as u64..MEMBER_BLOCKS).step_by(3) {
                    a.rots[i].flip(lba, lba * 977 + i as u64).await.unwrap();
                    flips += 1;
                }
            }
            check_all(&a.raid, &want, &format!("{k}+{m} after flips")).await;
            assert!(counter(&a.raid, "checksum_errors") > 0);
            assert!(counter(&a.raid, "healed_blocks") > 0);
            // The reads healed the data blocks they touched; the scrub heals the rest (parity).
            let r = scrub(&a.raid).await;
            assert_eq!(r.unrepairable, 0, "{k}+{m}: {r:?}");
            assert_eq!(r.redundancy_mismatches, 0, "{k}+{m}: {r:?}");
            let healed = counter(&a.raid, "healed_blocks");
            assert_eq!(healed, flips, "{k}+{m}: every flipped block was rewritten once");
            for (i, rot) in a.rots.iter().enumerate() {
                assert!(raw(rot.as_ref()).await == before[i], "{k}+{m}: member {i} not restored");
            }
            let again = scrub(&a.raid).await;
            assert_eq!(again.checksum_errors + again.repaired, 0, "{again:?}");
            assert_eq!(again.blocks_checked, (k + m) as u64 * MEMBER_BLOCKS);
        });
        res
    }
}

#[test]
fn a_row_damaged_beyond_parity_answers_corrupt_never_wrong_data() {
    let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
        let (k, m) = (4, 1);
        let a = build(k, m, 16);
        let want = fill(&a.raid, 1).await;
        // Row 5 of every member: with two of them damaged, one data chunk block at least.
        for i in 0..=m {
            a.rots[i].flip(5, 11).await.unwrap();
        }
        let mut corrupt = 0;
        for (lba, w) in want.iter().enumerate() {
            let mut got = vec![0u8; BS];
            match a.raid.read(lba as u64, &mut got, None).await {
                Ok(()) => assert!(got == *w, "block {lba} read back wrong"),
                Err(DevError::Corrupt { .. }) => corrupt += 1,
                Err(e) => panic!("block {lba}: {e}"),
            }
        }
        assert!(corrupt >= 1, "a damaged data block was read");
        assert!(counter(&a.raid, "unrepairable_blocks") >= 2);
        let r = scrub(&a.raid).await;
        assert!(r.unrepairable >= 2, "{r:?}");
        // A full-stripe write needs no old data: it makes the row whole again.
        let stripe_blocks = k * CHUNK_BLOCKS as usize;
        let mut fresh = want.clone();
        for (l, b) in fresh.iter_mut().enumerate().skip(stripe_blocks).take(stripe_blocks) {
            *b = block(l as u64, 2);
        }
        let data: Vec<u8> = fresh[stripe_blocks..2 * stripe_blocks].concat();
        a.raid.write(stripe_blocks as u64, &data, None, WriteHints::NONE).await.unwrap();
        check_all(&a.raid, &fresh, "after rewriting the stripe").await;
        assert!(scrub(&a.raid).await.clean());
    });
    res
}

#[test]
fn with_two_parity_chunks_a_locating_scrub_repairs_lost_and_misdirected_writes() {
    let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
        let (k, m) = (4, 2);
        let a = build(k, m, 16);
        let mut want = fill(&a.raid, 1).await;
        // Single-block writes are read-modify-writes: member writes are data then parity
        // (order of issue); whichever the armed fault hits, one chunk of the row goes wrong.
        for (n, rot) in a.rots.iter().enumerate() {
            let fault = match n % 2 {
                0 => WriteFault::Lose,
                _ => WriteFault::Misdirect { shift_blocks: 7 },
            };
            rot.arm(0, fault);
            // A block of stripe n whose data chunk lives on member n, or, where member n holds
            // parity of stripe n, any block of it (its parity write is the one hit).
            let geo = a.raid.geometry();
            let s = n as u64;
            let d = (0..k).find(|&d| geo.data_member(s, d) == n).unwrap_or(0);
            let lba = s * geo.stripe_data_blocks() + d as u64 * CHUNK_BLOCKS + 1;
            want[lba as usize] = block(lba, 3);
            a.raid.write(lba, &want[lba as usize], None, WriteHints::NONE).await.unwrap();
            rot.disarm();
            // One damaged chunk per scrub round: each is located on its own.
            let r = a.raid.scrub_locating().await.unwrap();
            assert!(r.unrepairable == 0, "member {n}: {r:?}");
        }
        let lost: u64 = a.rots.iter().map(|r| r.counts().lost_writes).sum();
        let moved: u64 = a.rots.iter().map(|r| r.counts().misdirected_writes).sum();
        assert_eq!((lost, moved), (3, 3), "every armed fault fired");
        check_all(&a.raid, &want, "after scrubs").await;
        assert!(counter(&a.raid, "parity_mismatches") >= 1);
        let r = scrub(&a.raid).await;
        assert_eq!(r.checksum_errors + r.redundancy_mismatches + r.repaired, 0, "{r:?}");
    });
    res
}

#[test]
fn without_metadata_bytes_there_are_no_checksums_and_scrub_compares_parity() {
    let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
        let a = build(2, 1, 0);
        assert!(!a.raid.integrity());
        let want = fill(&a.raid, 1).await;
        let r = scrub(&a.raid).await;
        assert_eq!(r.redundancy_mismatches, 0, "{r:?}");
        // Without checksums a mismatch cannot be pinned on a chunk: parity is recomputed from
        // the data (md's repair). Damage the parity chunk, so the data stays right.
        let p = a.raid.geometry().parity_member(0, 0);
        a.rots[p].flip(0, 3).await.unwrap();
        a.rots[p].flip(1, 3).await.unwrap();
        let r = scrub(&a.raid).await;
        assert_eq!(r.checksum_errors, 0);
        assert!(r.redundancy_mismatches >= 1, "{r:?}");
        assert!(scrub(&a.raid).await.redundancy_mismatches == 0);
        check_all(&a.raid, &want, "no-checksum array").await;
    });
    res
}

#[test]
fn seeded_rounds_of_writes_and_damage_on_at_most_m_members_never_read_wrong() {
    for seed in seeds(7000, 6) {
        for (k, m) in [(2, 1), (4, 2)] {
            let (res, _) = run(RuntimeKind::Sim, 1, move || async move {
                let what = format!("raid {k}+{m} seed {seed} (FLASHRIG_SEED={seed} to rerun)");
                let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
                let a = build(k, m, 16);
                let mut want = fill(&a.raid, 1).await;
                let n = want.len() as u64;
                for round in 0..6u64 {
                    for _ in 0..20 {
                        let lba = rng.next_u64() % n;
                        let blocks = (1 + rng.next_u64() % 6).min(n - lba);
                        for l in lba..lba + blocks {
                            want[l as usize] = block(l, 10 + round);
                        }
                        let data: Vec<u8> = want[lba as usize..(lba + blocks) as usize].concat();
                        a.raid.write(lba, &data, None, WriteHints::NONE).await.unwrap();
                    }
                    // Damage: up to m members, a few blocks each.
                    let mut hit: Vec<usize> = Vec::new();
                    while hit.len() < m {
                        let i = (rng.next_u64() % (k + m) as u64) as usize;
                        if !hit.contains(&i) {
                            hit.push(i);
                        }
                    }
                    for &i in &hit {
                        for _ in 0..1 + rng.next_u64() % 4 {
                            let lba = rng.next_u64() % MEMBER_BLOCKS;
                            a.rots[i].flip(lba, rng.next_u64()).await.unwrap();
                        }
                    }
                    for _ in 0..30 {
                        let lba = rng.next_u64() % n;
                        let blocks = (1 + rng.next_u64() % 8).min(n - lba);
                        let mut got = vec![0u8; blocks as usize * BS];
                        a.raid
                            .read(lba, &mut got, None)
                            .await
                            .unwrap_or_else(|e| panic!("{what}: read {lba}+{blocks}: {e}"));
                        let w = want[lba as usize..(lba + blocks) as usize].concat();
                        assert!(got == w, "{what}: round {round}: read {lba}+{blocks} wrong");
                    }
                    // Damage does not pile up beyond m members between scrubs.
                    let r = scrub(&a.raid).await;
                    assert_eq!(r.unrepairable, 0, "{what}: round {round}: {r:?}");
                }
                check_all(&a.raid, &want, &what).await;
            });
            res
        }
    }
}
