//! Goal: `firmware.buffer_merge = false` models the P5316 as CSAL describes it (csal-eurosys24.txt
//! §3.1, Figure 5(a)): every write smaller than a 64 KiB mapping unit is read-modify-written on
//! its own, even when the next write completes the same unit, while the write is acknowledged
//! from the power-protected buffer before its program is done; and every byte still reads back.
//! A merging buffer, given the same writes, gathers each unit and reads nothing back.
//!
//! Method: `tiny-qlc` (16 KiB QLC pages, 64 KiB units) with power-loss protection, its units
//! first written whole, then rewritten 4 KiB at a time in order, one write at a time, each
//! block with its own bytes. The counters after the rewrite say how many units were
//! read-modify-written; the virtual clock says whether the first write waited for a QLC
//! program (850 µs at the least), and `buffer_waits` that later ones waited for room in the
//! buffer of units being programmed; reads after a flush compare every block. Configurations that would
//! acknowledge a write the model cannot protect are refused with the key named.

use std::collections::BTreeMap;
use std::sync::Arc;

use flashrig_blockdev::{DevRef, WriteHints};
use flashrig_runtime::{now_ns, run, sleep_ns, RuntimeKind};
use flashrig_ssd::{Ssd, SsdConfig};

const UNIT_BLOCKS: u64 = 16;
const UNITS: u64 = 24;
/// The fastest QLC program of `tiny-qlc` (an L page).
const MIN_PROGRAM_NS: u64 = 850_000;

fn qlc(merge: bool) -> SsdConfig {
    let text = format!("preset = \"tiny-qlc\"\n[firmware]\nplp = true\nbuffer_merge = {merge}\n");
    SsdConfig::resolve(&text.parse().unwrap()).unwrap()
}

fn block(lba: u64, round: u8) -> Vec<u8> {
    (0..4096).map(|i| (lba as u8).wrapping_mul(31) ^ round ^ (i as u8)).collect()
}

struct Rewrite {
    /// Counters added by the 4 KiB rewrite.
    delta: BTreeMap<String, u64>,
    /// The first 4 KiB write of the rewrite, on the virtual clock (the buffer is empty).
    first_write_ns: u64,
}

fn rewrite(cfg: SsdConfig) -> Rewrite {
    let (r, _) = run(RuntimeKind::Sim, 1, move || async move {
        let ssd = Arc::new(Ssd::new("qlc", &cfg).unwrap());
        let dev: DevRef = ssd.clone();
        for u in 0..UNITS {
            let data: Vec<u8> =
                (0..UNIT_BLOCKS).flat_map(|b| block(u * UNIT_BLOCKS + b, 1)).collect();
            dev.write(u * UNIT_BLOCKS, &data, None, WriteHints::NONE).await.unwrap();
        }
        dev.flush().await.unwrap();
        // With power-loss protection the flush need not wait for the programs; let them end,
        // so the rewrite starts with an empty buffer.
        sleep_ns(1_000_000_000).await;
        let before = dev.metrics().unwrap().snapshot().counters;
        let mut first_write_ns = None;
        for lba in 0..UNITS * UNIT_BLOCKS {
            let t0 = now_ns();
            dev.write(lba, &block(lba, 2), None, WriteHints::NONE).await.unwrap();
            first_write_ns.get_or_insert(now_ns() - t0);
        }
        dev.flush().await.unwrap();
        let mut buf = vec![0u8; 4096];
        for lba in 0..UNITS * UNIT_BLOCKS {
            dev.read(lba, &mut buf, None).await.unwrap();
            assert!(buf == block(lba, 2), "block {lba} reads back wrong");
        }
        let after = dev.metrics().unwrap().snapshot().counters;
        let delta =
            after.iter().map(|(k, v)| (k.clone(), v - before.get(k).unwrap_or(&0))).collect();
        Rewrite { delta, first_write_ns: first_write_ns.unwrap() }
    });
    r
}

#[test]
fn without_merging_every_small_write_is_its_own_read_modify_write() {
    let r = rewrite(qlc(false));
    let writes = UNITS * UNIT_BLOCKS;
    // The first block of a unit is read-modify-written like the rest: nothing merges.
    assert_eq!(r.delta["partial_writebacks"], writes, "{:?}", r.delta);
    assert_eq!(r.delta["rmw_reads"], writes, "{:?}", r.delta);
    assert_eq!(r.delta["buffer_write_hits"], 0, "{:?}", r.delta);
    // A whole 64 KiB unit is programmed for every 4 KiB written (§3.1's 16x).
    assert_eq!(r.delta["nand_program_bytes"], writes * UNIT_BLOCKS * 4096, "{:?}", r.delta);
    assert!(
        r.first_write_ns < MIN_PROGRAM_NS,
        "a write waited {} ns, as long as a program: it must be acknowledged from the buffer",
        r.first_write_ns
    );
    // The buffer (16 units) holds the units being programmed, so a writer faster than the
    // programs waits for room: back-pressure, not an unbounded queue.
    assert!(r.delta["buffer_waits"] > 0, "{:?}", r.delta);
}

#[test]
fn a_merging_buffer_gathers_the_same_writes_into_whole_units() {
    let r = rewrite(qlc(true));
    assert_eq!(r.delta["rmw_reads"], 0, "{:?}", r.delta);
    assert_eq!(r.delta["partial_writebacks"], 0, "{:?}", r.delta);
    assert_eq!(r.delta["buffer_write_hits"], UNITS * (UNIT_BLOCKS - 1), "{:?}", r.delta);
}

#[test]
fn no_merging_without_power_loss_protection_or_a_buffer_is_refused() {
    let mut cfg = SsdConfig::preset("tiny-qlc").unwrap();
    cfg.firmware.buffer_merge = false;
    cfg.firmware.plp = false;
    let e = cfg.validate().unwrap_err();
    assert!(e.contains("buffer_merge") && e.contains("plp = true"), "{e}");
    cfg.firmware.plp = true;
    cfg.validate().unwrap();
    cfg.firmware.buffer_bytes = 0;
    let e = cfg.validate().unwrap_err();
    assert!(e.contains("buffer_merge") && e.contains("buffer_bytes > 0"), "{e}");
}
