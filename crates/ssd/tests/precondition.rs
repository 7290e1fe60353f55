//! Goal: a write carrying the `precondition` hint (`WriteHints::PRECONDITION`, what every
//! `[precondition]` write of a run carries) leaves a congestion-aware write buffer's victim
//! choice out of the device state it prepares, so every buffer policy starts the measured
//! window from the state LRU would leave; without the hint the policy acts as usual.
//!
//! Method: the same burst of writes (20 KiB at 1 KiB past a page boundary: a partial page, a
//! full one and a partial one; 32 in flight, so the chips are busy whenever a victim is chosen) goes to fresh SSDs of WAFLASH's
//! shape with 512-byte sectors and 8 KiB pages: PC-LRU with the hint, PC-LRU without it, and
//! LRU. With the hint PC-LRU delays no partial page and programs exactly what LRU programs,
//! counter for counter; without it the same burst makes it delay partial pages, which shows
//! the burst congests the chips and the hint is what changed the choice.

use std::collections::BTreeMap;
use std::sync::Arc;

use flashrig_blockdev::{DevRef, WriteHints};
use flashrig_runtime::{run, spawn, RuntimeKind};
use flashrig_ssd::{Ssd, SsdConfig};

/// An SSD of 8 KiB pages mapped page by page, 512-byte sectors and a 64-page buffer.
fn ssd(policy: &str) -> SsdConfig {
    let text = format!(
        "preset = \"tiny\"\n\
         [geometry]\nblocks_per_plane = 40\npage_bytes = 8192\npages_per_block = 48\n\
         oob_bytes_per_page = 1024\n\
         [firmware]\nblock_bytes = 512\niu_bytes = 8192\nbuffer_bytes = 524288\n\
         buffer_policy = \"{policy}\"\nftl_policy = \"page\"\n"
    );
    SsdConfig::resolve(&text.parse().unwrap()).unwrap()
}

/// Writes the burst with `hints` and returns the SSD's counters after a flush.
fn burst(cfg: SsdConfig, hints: WriteHints) -> BTreeMap<String, u64> {
    const WRITES: u64 = 2_000;
    const IN_FLIGHT: u64 = 32;
    let (counters, _) = run(RuntimeKind::Sim, 1, move || async move {
        let ssd = Arc::new(Ssd::new("ssd", &cfg).unwrap());
        let dev: DevRef = ssd.clone();
        // 8 KiB pages of 16 sectors; the last pages are left out, since a write spans 3.
        let pages = dev.info().num_blocks / 16 - 3;
        let mut tasks = Vec::new();
        for q in 0..IN_FLIGHT {
            let dev = dev.clone();
            tasks.push(spawn(async move {
                let data = vec![q as u8; 20 * 1024];
                for i in (q..WRITES).step_by(IN_FLIGHT as usize) {
                    // Page i × 7 (spread over the device), starting 1 KiB in: the first and
                    // last pages the write touches are partial, the middle one full.
                    let lba = (i * 7 % pages) * 16 + 2;
                    dev.write(lba, &data, None, hints).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await;
        }
        dev.flush().await.unwrap();
        dev.metrics().unwrap().snapshot().counters
    });
    counters
}

#[test]
fn preconditioning_writes_leave_the_buffer_policy_out_of_the_state_they_prepare() {
    let hinted = burst(ssd("pc-lru"), WriteHints::PRECONDITION);
    let plain = burst(ssd("pc-lru"), WriteHints::NONE);
    let lru = burst(ssd("lru"), WriteHints::PRECONDITION);
    assert!(
        plain["buffer_delayed_partial"] > 0,
        "the burst must congest the chips, or the test shows nothing: {plain:?}"
    );
    assert_eq!(hinted["buffer_delayed_partial"], 0, "{hinted:?}");
    assert!(hinted["partial_writebacks"] > 0, "{hinted:?}");
    // Counter for counter what LRU did, except the policy's own bookkeeping (PC-LRU measures
    // page conversion distances as pages are overwritten, whoever chooses the victims).
    for (name, v) in &lru {
        if name.starts_with("buffer_pcd") {
            continue;
        }
        assert_eq!(hinted.get(name), Some(v), "counter {name}");
    }
}
