//! The crash-consistency check used by `flashrig debug crash-writer` and its tests.
//!
//! A writer process writes self-describing blocks (each names its LBA and a version) with
//! several requests in flight, flushing now and then, and prints every acknowledgement:
//! `W <lba> <version>` when a write completes, `FI <n>` when flush `n` is issued and
//! `FD <n>` when it completes. Whoever kills the writer can then say, from what was printed,
//! which version of every block must have survived: a write acknowledged before a flush was
//! issued is durable once that flush completes.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::rc::Rc;

use flashrig_blockdev::{DevRef, WriteHints};
use flashrig_runtime::spawn;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

const MAGIC: u64 = 0x464c_5348_5249_4721; // "FLSHRIG!"

/// A block that names its LBA and version, with a checksum over the whole block so a torn or
/// misdirected block is detected.
pub fn encode_block(buf: &mut [u8], lba: u64, version: u64) {
    buf[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    buf[8..16].copy_from_slice(&lba.to_le_bytes());
    buf[16..24].copy_from_slice(&version.to_le_bytes());
    let mut x = lba ^ version.rotate_left(32) ^ MAGIC;
    for w in buf[32..].chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
    }
    let sum = checksum(&buf[32..]);
    buf[24..32].copy_from_slice(&sum.to_le_bytes());
}

fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100_0000_01b3))
}

/// What a block holds: never written (all zeros), a valid (lba, version), or garbage.
#[derive(Debug, PartialEq, Eq)]
pub enum BlockState {
    Zero,
    Valid { lba: u64, version: u64 },
    Corrupt,
}

pub fn decode_block(buf: &[u8]) -> BlockState {
    if buf.iter().all(|&b| b == 0) {
        return BlockState::Zero;
    }
    let word = |i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
    if word(0) != MAGIC || word(24) != checksum(&buf[32..]) {
        return BlockState::Corrupt;
    }
    let mut check = buf.to_vec();
    encode_block(&mut check, word(8), word(16));
    if check != buf {
        return BlockState::Corrupt;
    }
    BlockState::Valid { lba: word(8), version: word(16) }
}

/// Writes random blocks of `dev` forever (or `max_writes`), `iodepth` at a time, flushing every
/// `flush_every` writes, printing acknowledgements to stdout as described above. Never has two
/// writes to one block in flight, so acknowledgements of one block are in version order.
pub async fn writer(dev: DevRef, seed: u64, iodepth: usize, flush_every: u64, max_writes: u64) {
    let bs = dev.info().block_size as usize;
    let blocks = dev.info().num_blocks;
    struct State {
        rng: Xoshiro256PlusPlus,
        version: u64,
        in_flight: HashSet<u64>,
        flushes: u64,
    }
    let st = Rc::new(RefCell::new(State {
        rng: Xoshiro256PlusPlus::seed_from_u64(seed),
        version: 0,
        in_flight: HashSet::new(),
        flushes: 0,
    }));
    let mut tasks = Vec::new();
    for _ in 0..iodepth {
        let st = st.clone();
        let dev = dev.clone();
        tasks.push(spawn(async move {
            let mut buf = vec![0u8; bs];
            loop {
                let (lba, version, flush_no) = {
                    let mut s = st.borrow_mut();
                    if s.version >= max_writes {
                        return;
                    }
                    let mut lba = s.rng.next_u64() % blocks;
                    while s.in_flight.contains(&lba) {
                        lba = (lba + 1) % blocks;
                    }
                    s.version += 1;
                    let v = s.version;
                    s.in_flight.insert(lba);
                    let f = if v.is_multiple_of(flush_every) {
                        s.flushes += 1;
                        Some(s.flushes)
                    } else {
                        None
                    };
                    (lba, v, f)
                };
                encode_block(&mut buf, lba, version);
                dev.write(lba, &buf, None, WriteHints::NONE).await.expect("write");
                st.borrow_mut().in_flight.remove(&lba);
                println!("W {lba} {version}");
                if let Some(n) = flush_no {
                    println!("FI {n}");
                    dev.flush().await.expect("flush");
                    println!("FD {n}");
                    let _ = std::io::stdout().flush();
                }
            }
        }));
    }
    for t in tasks {
        t.await;
    }
}

/// The versions that must have survived, from a writer's output: for every block, the newest
/// version acknowledged before the last completed flush was issued; and the highest version
/// the writer could have issued.
pub fn durable_versions(output: &str) -> (HashMap<u64, u64>, u64) {
    let mut acked: Vec<(u64, u64)> = Vec::new();
    let mut issued_at: HashMap<u64, usize> = HashMap::new();
    let mut durable_prefix = 0usize;
    let mut max_version = 0;
    for line in output.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["W", lba, v] => {
                if let (Ok(l), Ok(v)) = (lba.parse(), v.parse()) {
                    acked.push((l, v));
                    max_version = max_version.max(v);
                }
            }
            ["FI", n] => {
                if let Ok(n) = n.parse::<u64>() {
                    issued_at.insert(n, acked.len());
                }
            }
            ["FD", n] => {
                if let Some(&pos) = n.parse::<u64>().ok().and_then(|n| issued_at.get(&n)) {
                    durable_prefix = durable_prefix.max(pos);
                }
            }
            _ => {}
        }
    }
    let mut durable = HashMap::new();
    for &(lba, v) in &acked[..durable_prefix] {
        let e = durable.entry(lba).or_insert(v);
        *e = (*e).max(v);
    }
    (durable, max_version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_and_damage_is_seen() {
        let mut b = vec![0u8; 4096];
        assert_eq!(decode_block(&b), BlockState::Zero);
        encode_block(&mut b, 17, 99);
        assert_eq!(decode_block(&b), BlockState::Valid { lba: 17, version: 99 });
        b[1000] ^= 1;
        assert_eq!(decode_block(&b), BlockState::Corrupt);
    }

    #[test]
    fn durable_versions_follow_flush_issue_points() {
        let out = "W 1 1\nW 2 2\nFI 1\nW 1 3\nFD 1\nW 2 4\nFI 2\nW 3 5\n";
        let (d, max) = durable_versions(out);
        // Flush 1 was issued after versions 1 and 2; version 3 was acked during it; flush 2
        // never completed.
        assert_eq!(d.get(&1), Some(&1));
        assert_eq!(d.get(&2), Some(&2));
        assert_eq!(d.get(&3), None);
        assert_eq!(max, 5);
    }
}
