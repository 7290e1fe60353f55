//! The crash writer behind `flashrig debug crash-writer`, and the replay of its log into the
//! reference model.
//!
//! The writer writes self-describing blocks (`flashrig_check::pattern`) with several writes in
//! flight, flushing now and then, and logs every step on stdout, one line each:
//!
//! | line            | meaning                                              |
//! |-----------------|------------------------------------------------------|
//! | `I lba n v`     | a write of `n` blocks at `lba`, version `v`, issued  |
//! | `W lba n v`     | that write completed                                 |
//! | `FI k`          | flush `k` issued                                     |
//! | `FD k`          | flush `k` completed                                  |
//!
//! Whoever kills the writer replays the lines it received into a [`Model`] and then knows,
//! for every block, which versions may have survived: at least the newest one that completed
//! before a completed flush was issued. A line cut short by the kill is ignored, which only
//! makes the model more permissive about the write it described (it stays "in flight").

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use flashrig_blockdev::{DevRef, DeviceInfo, WriteHints};
use flashrig_check::Model;
use flashrig_runtime::spawn;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Largest write the crash writer issues, in blocks.
pub const MAX_WRITE_BLOCKS: u64 = 8;

/// Writes random block ranges of `dev` until `max_writes` writes have been issued (or forever),
/// `iodepth` at a time, flushing after every `flush_every` writes, logging to stdout as above.
/// Two writes in flight never overlap, so the log of one block is in version order. Writes
/// carry per-block metadata when the stack stores any. Returns the first failed command.
pub async fn writer(
    dev: DevRef,
    seed: u64,
    iodepth: usize,
    flush_every: u64,
    max_writes: u64,
) -> Result<(), String> {
    let info = dev.info().clone();
    let bs = info.block_size as usize;
    let mdb = info.md_bytes_per_block as usize;
    let blocks = info.num_blocks;
    struct State {
        rng: Xoshiro256PlusPlus,
        model: Model,
        issued: u64,
        in_flight: Vec<(u64, u64)>,
        flushes: u64,
        failure: Option<String>,
    }
    let st = Rc::new(RefCell::new(State {
        rng: Xoshiro256PlusPlus::seed_from_u64(seed),
        model: Model::new(info.block_size, info.md_bytes_per_block, seed),
        issued: 0,
        in_flight: Vec::new(),
        flushes: 0,
        failure: None,
    }));
    let mut tasks = Vec::new();
    for _ in 0..iodepth.max(1) {
        let st = st.clone();
        let dev = dev.clone();
        tasks.push(spawn(async move {
            loop {
                let picked = {
                    let mut s = st.borrow_mut();
                    if s.issued >= max_writes || s.failure.is_some() {
                        return;
                    }
                    let n = 1 + s.rng.next_u64() % MAX_WRITE_BLOCKS.min(blocks);
                    let lba = s.rng.next_u64() % (blocks - n + 1);
                    let busy = s.in_flight.iter().any(|&(a, b)| lba < b && a < lba + n);
                    if busy {
                        None
                    } else {
                        s.issued += 1;
                        let v = s.model.next_version();
                        s.in_flight.push((lba, lba + n));
                        let flush = s.issued.is_multiple_of(flush_every).then(|| {
                            s.flushes += 1;
                            s.flushes
                        });
                        Some((lba, n, v, flush))
                    }
                };
                let Some((lba, n, version, flush_no)) = picked else {
                    // Collided with a write in flight: let time pass (on the simulated clock
                    // too, where yielding alone would never let the other write complete).
                    flashrig_runtime::sleep_ns(1_000).await;
                    continue;
                };
                let mut buf = vec![0u8; n as usize * bs];
                let mut md = (mdb > 0).then(|| vec![0u8; n as usize * mdb]);
                st.borrow().model.fill(lba, version, &mut buf, md.as_deref_mut());
                println!("I {lba} {n} {version}");
                let res = dev.write(lba, &buf, md.as_deref(), WriteHints::NONE).await;
                {
                    let mut s = st.borrow_mut();
                    let i = s.in_flight.iter().position(|r| *r == (lba, lba + n)).expect("ours");
                    s.in_flight.swap_remove(i);
                    if let Err(e) = res {
                        s.failure.get_or_insert(format!("write {n} blocks at {lba}: {e}"));
                        return;
                    }
                }
                println!("W {lba} {n} {version}");
                if let Some(k) = flush_no {
                    println!("FI {k}");
                    if let Err(e) = dev.flush().await {
                        st.borrow_mut().failure.get_or_insert(format!("flush {k}: {e}"));
                        return;
                    }
                    println!("FD {k}");
                }
                let _ = std::io::stdout().flush();
            }
        }));
    }
    for t in tasks {
        t.await;
    }
    let failure = st.borrow_mut().failure.take();
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Replays a crash writer's log into a model of the device `info` describes, written with
/// `seed`. Returns the model and the number of flushes that completed.
pub fn replay_log(log: &str, info: &DeviceInfo, seed: u64) -> (Model, u64) {
    let mut model = Model::for_device(info, seed);
    let md = info.md_bytes_per_block > 0;
    let mut flushes = std::collections::HashMap::new();
    let mut completed = 0;
    for line in log.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
        match (f.first().copied(), num(1), num(2), num(3)) {
            (Some("I"), Some(lba), Some(n), Some(v)) => {
                // Versions are issued in order; keep the model's counter in step.
                while model.next_version() < v {}
                model.write_issued(lba, n, v, md);
            }
            (Some("W"), Some(lba), Some(n), Some(v)) => model.write_done(lba, n, v, md, false),
            (Some("FI"), Some(k), None, None) => {
                flushes.insert(k, model.flush_issued());
            }
            (Some("FD"), Some(k), None, None) => {
                if let Some(token) = flushes.remove(&k) {
                    model.flush_done(token);
                    completed += 1;
                }
            }
            // A line cut short by the kill.
            _ => {}
        }
    }
    (model, completed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(m: &Model, lba: u64, v: u64) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        m.fill(lba, v, &mut b, None);
        b
    }

    #[test]
    fn replay_follows_flush_issue_points() {
        let log = "I 1 1 1\nW 1 1 1\nI 2 1 2\nW 2 1 2\nFI 1\nI 1 1 3\nW 1 1 3\nFD 1\n\
                   I 2 1 4\nW 2 1 4\nFI 2\nI 3 1 5\nW 3";
        let (m, flushes) = replay_log(log, &DeviceInfo::new("t", 4096, 100), 9);
        assert_eq!(flushes, 1);
        // Block 1: version 1 was flushed; version 3 may or may not have survived.
        assert!(m.clone().check_after_crash(1, &block(&m, 1, 1), None).is_ok());
        assert!(m.clone().check_after_crash(1, &block(&m, 1, 3), None).is_ok());
        assert!(m.clone().check_after_crash(1, &[0u8; 4096], None).is_err());
        // Block 2: version 2 flushed, version 4 unflushed (flush 2 never completed).
        assert!(m.clone().check_after_crash(2, &block(&m, 2, 4), None).is_ok());
        assert!(m.clone().check_after_crash(2, &[0u8; 4096], None).is_err());
        // Block 3: issued but its completion line was cut: anything it may hold.
        assert!(m.clone().check_after_crash(3, &[0u8; 4096], None).is_ok());
        assert!(m.clone().check_after_crash(3, &block(&m, 3, 5), None).is_ok());
    }
}

/// What [`verify_pattern`] found.
#[derive(Debug, Default)]
pub struct PatternCheck {
    pub written: u64,
    pub zero: u64,
    /// Blocks holding another block's data or garbage, with what they held (first 10).
    pub bad: Vec<String>,
    pub bad_count: u64,
}

/// Reads every block of the stack and checks that each holds zeros or a stamped block naming
/// its own address (what `flashrig run` writes with `stamp = true`): the check behind
/// `flashrig debug verify-pattern`, used to read back a stack in a later process.
pub async fn verify_pattern(dev: DevRef) -> Result<PatternCheck, String> {
    use flashrig_check::pattern::{decode_block, BlockContent};
    let info = dev.info().clone();
    let bs = info.block_size as usize;
    let step = 256u64;
    let mut buf = vec![0u8; step as usize * bs];
    let mut out = PatternCheck::default();
    let mut lba = 0;
    while lba < info.num_blocks {
        let n = step.min(info.num_blocks - lba);
        let b = &mut buf[..n as usize * bs];
        dev.read(lba, b, None).await.map_err(|e| format!("read at {lba}: {e}"))?;
        for (i, block) in b.chunks_exact(bs).enumerate() {
            let at = lba + i as u64;
            match decode_block(block) {
                BlockContent::Zero => out.zero += 1,
                BlockContent::Valid { lba: l, .. } if l == at => out.written += 1,
                other => {
                    out.bad_count += 1;
                    if out.bad.len() < 10 {
                        out.bad.push(format!("lba {at} holds {other}"));
                    }
                }
            }
        }
        lba += n;
    }
    Ok(out)
}
