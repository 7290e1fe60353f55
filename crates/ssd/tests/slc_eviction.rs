//! Goal: paced SLC eviction (`firmware.slc_eviction = "paced"`, the default) removes the
//! head-of-line stall of inline eviction without losing data: no host write waits behind a
//! whole SLC line's relocation, every unit reads back while victims are half moved, and a
//! power loss in the middle of a paced eviction loses nothing that was acknowledged.
//!
//! Method: the firmware controller is driven directly (no runtime: each call takes the
//! simulated submission time and returns the completion time), on `tiny-slc` (4 MiB SLC cache
//! of 8 lines, 128 units each, TLC behind it). Latency: one writer at queue depth 1 writes
//! through (no DRAM buffer) over three times the cache, so every write is a NAND program and
//! the cache is full and evicting from the fourth line on; the longest simulated write
//! latency of each policy is compared with the time one plane needs to move its share of a
//! full victim line (read and dense program per unit), derived from the preset's timings.
//! Integrity: seeded random writes of 1 to 8 blocks (half of them hinted transient, with the
//! transient-aware evictor), trims and reads of random written blocks, each block carrying a
//! stamp the test checks; the run checks that paced victims were read while partly moved.
//! Power loss: with writes through, every completed write is durable; the test cuts power
//! whenever a paced victim is partly moved, recovers, reads every written block back, and
//! goes on, several times; then the same with a NAND image file reopened by a new controller.
//! Idle-time eviction (`slc_eviction = "idle"`, the TurboWrite cache of `scalaafa-femu`): writes
//! submitted faster than the device programs (never idle) must pass a full cache to the dense
//! area with nothing evicted, in less simulated time than paced eviction; a long idle gap must
//! empty lines so that the cache takes writes again; and random writes with idle gaps must
//! read back through power cuts taken while a victim is half moved.
//! Everything is seeded and simulated, so results are the same on every machine.

use std::collections::BTreeMap;

use flashrig_blockdev::WriteHints;
use flashrig_ssd::config::{EvictorPolicy, SlcEviction, SsdConfig};
use flashrig_ssd::firmware::Controller;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

const BS: usize = 4096;

fn cfg(eviction: SlcEviction) -> SsdConfig {
    let mut cfg = SsdConfig::preset("tiny-slc").unwrap();
    cfg.firmware.slc_eviction = eviction;
    cfg.firmware.buffer_bytes = 0;
    cfg
}

/// A block whose first 16 bytes name its address and version.
fn block(lba: u64, version: u64) -> Vec<u8> {
    let mut b = vec![(version % 251) as u8; BS];
    b[..8].copy_from_slice(&lba.to_le_bytes());
    b[8..16].copy_from_slice(&version.to_le_bytes());
    b
}

/// Reads every block the model holds (0 = trimmed or never written: zeros) and compares.
fn verify(ctl: &mut Controller, t: &mut u64, model: &BTreeMap<u64, u64>, what: &str) {
    let mut buf = vec![0u8; BS];
    for (&lba, &version) in model {
        *t = ctl.read(*t, lba, &mut buf, None).unwrap_or_else(|e| panic!("{what}: {e}"));
        let want = if version == 0 { vec![0u8; BS] } else { block(lba, version) };
        assert!(buf == want, "{what}: block {lba} does not read back as version {version}");
    }
}

/// Trims `lba` (`trim`), or reads back the first block from `lba` on that the model knows
/// and checks it; returns 1 when that read found a victim half moved, else 0.
fn trim_or_check(
    ctl: &mut Controller,
    t: &mut u64,
    model: &mut BTreeMap<u64, u64>,
    lba: u64,
    trim: bool,
    what: &str,
) -> u64 {
    if trim {
        *t = ctl.trim(*t, lba, 1).unwrap();
        model.insert(lba, 0);
        return 0;
    }
    let Some((&b, &v)) = model.range(lba..).next() else { return 0 };
    let mid = ctl.ftl.eviction_in_progress().is_some() as u64;
    let mut buf = vec![0u8; BS];
    *t = ctl.read(*t, b, &mut buf, None).unwrap();
    let want = if v == 0 { vec![0u8; BS] } else { block(b, v) };
    assert!(buf == want, "{what}: block {b} is not version {v}");
    mid
}

/// Writes one block at a time, back to back at queue depth 1, over three times the SLC cache;
/// returns the longest write latency once the cache had evicted, and how many lines it evicted.
fn longest_write_latency(eviction: SlcEviction) -> (u64, u64) {
    let mut ctl = Controller::new(&cfg(eviction)).unwrap();
    let slc_units = ctl.layout.slots_per_line_slc as u64 * ctl.layout.slc_lines as u64;
    let data = block(0, 1);
    let mut t = 0;
    let mut longest = 0;
    for i in 0..12 * slc_units {
        let lba = i % (3 * slc_units);
        let done = ctl.write(t, lba, &data, None, WriteHints::NONE).unwrap();
        if ctl.ftl.counters().slc_evictions > 0 {
            longest = longest.max(done - t);
        }
        t = done;
    }
    (longest, ctl.ftl.counters().slc_evicted_lines)
}

#[test]
fn paced_eviction_keeps_host_writes_from_waiting_for_a_whole_line() {
    let cfg = cfg(SlcEviction::Paced);
    let n = &cfg.nand;
    let layout = Controller::new(&cfg).unwrap().layout;
    // One plane's share of a full victim: each unit is read in SLC mode and programmed dense.
    let per_plane = (layout.slots_per_line_slc / layout.planes) as u64;
    let line_relocation_ns = per_plane * (n.slc_read_ns + n.program_ns[0]);
    let (inline, inline_lines) = longest_write_latency(SlcEviction::Inline);
    let (paced, paced_lines) = longest_write_latency(SlcEviction::Paced);
    eprintln!(
        "longest write: inline {inline} ns ({inline_lines} lines evicted), paced {paced} ns \
         ({paced_lines} lines); one plane's share of a line's relocation {line_relocation_ns} ns"
    );
    assert!(inline_lines > 20 && paced_lines > 20, "the cache must evict many lines");
    assert!(
        inline >= line_relocation_ns,
        "inline eviction: a write should wait for a whole line's relocation ({inline} ns < \
         {line_relocation_ns} ns)"
    );
    // Paced: a host program waits at most for the victim's erase (issued after its last
    // relocation program) plus a few programs and reads queued on its plane.
    let bound = n.slc_erase_ns + 4 * (n.slc_read_ns + n.program_ns[0]);
    assert!(paced <= bound, "paced eviction: a write waited {paced} ns (bound {bound} ns)");
    assert!(paced * 2 < line_relocation_ns, "paced {paced} ns vs a line {line_relocation_ns} ns");
}

#[test]
fn random_writes_read_back_while_victims_are_paced_out() {
    for seed in [1u64, 2, 3] {
        let mut c = cfg(SlcEviction::Paced);
        c.firmware.slc_evictor = EvictorPolicy::Transient;
        c.firmware.buffer_bytes = 64 * 4096;
        let mut ctl = Controller::new(&c).unwrap();
        let span = ctl.layout.num_blocks / 2;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let (mut t, mut version, mut reads_mid_eviction) = (0u64, 0u64, 0u64);
        for _ in 0..30_000 {
            let r = rng.next_u64();
            let lba = (r >> 16) % span;
            match r % 16 {
                0..=10 => {
                    let n = (1 + (r >> 8) % 8).min(span - lba);
                    let mut data = Vec::with_capacity(n as usize * BS);
                    for b in lba..lba + n {
                        version += 1;
                        data.extend(block(b, version));
                        model.insert(b, version);
                    }
                    let hints = WriteHints { transient: r & 32 != 0, ..WriteHints::NONE };
                    t = ctl.write(t, lba, &data, None, hints).unwrap();
                }
                k => {
                    let what = format!("seed {seed}");
                    reads_mid_eviction +=
                        trim_or_check(&mut ctl, &mut t, &mut model, lba, k == 11, &what);
                }
            }
        }
        verify(&mut ctl, &mut t, &model, &format!("seed {seed}, final check"));
        let f = ctl.ftl.counters();
        assert!(f.slc_evicted_lines > 20, "seed {seed}: {f:?}");
        assert!(reads_mid_eviction > 1000, "seed {seed}: {reads_mid_eviction} reads mid-eviction");
        // A transient unit leaves SLC once at most: it dies there or is evicted.
        assert!(f.slc_evicted_transient + f.slc_transient_died <= f.slc_transient_units, "{f:?}");
        assert!(f.slc_evicted_transient > 0 && f.slc_evicted_transient <= f.slc_evictions);
    }
}

/// Random single-block writes through (each durable once it completes) until a paced victim
/// is partly moved; returns false if `limit` writes never got there.
fn write_until_mid_eviction(
    ctl: &mut Controller,
    t: &mut u64,
    rng: &mut Xoshiro256PlusPlus,
    model: &mut BTreeMap<u64, u64>,
    version: &mut u64,
    limit: u32,
) -> bool {
    let span = ctl.layout.num_blocks / 2;
    let full = ctl.layout.slots_per_line_slc;
    for _ in 0..limit {
        let lba = rng.next_u64() % span;
        *version += 1;
        *t = ctl.write(*t, lba, &block(lba, *version), None, WriteHints::NONE).unwrap();
        model.insert(lba, *version);
        if let Some((_, valid)) = ctl.ftl.eviction_in_progress() {
            // Some units moved and some not (the victim was full when chosen only if nothing
            // in it died; `valid` below half a line means the move is well under way).
            if valid > 0 && valid < full / 2 {
                return true;
            }
        }
    }
    false
}

#[test]
fn power_loss_in_the_middle_of_a_paced_eviction_loses_nothing() {
    for seed in [11u64, 12, 13] {
        let mut ctl = Controller::new(&cfg(SlcEviction::Paced)).unwrap();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut model = BTreeMap::new();
        let (mut t, mut version) = (0u64, 0u64);
        for cut in 0..6 {
            // Skip a random stretch so the cuts land at different points of different victims.
            let skip = rng.next_u64() % 300;
            for _ in 0..skip {
                let lba = rng.next_u64() % (ctl.layout.num_blocks / 2);
                version += 1;
                t = ctl.write(t, lba, &block(lba, version), None, WriteHints::NONE).unwrap();
                model.insert(lba, version);
            }
            let mid = write_until_mid_eviction(
                &mut ctl,
                &mut t,
                &mut rng,
                &mut model,
                &mut version,
                20_000,
            );
            assert!(mid, "seed {seed} cut {cut}: no paced eviction in progress");
            ctl.power_loss(t);
            let steps = ctl.recover(t);
            assert_eq!(steps.len(), flashrig_ssd::firmware::recover::STEPS.len());
            assert!(ctl.ftl.eviction_in_progress().is_none(), "a power loss forgets the victim");
            verify(&mut ctl, &mut t, &model, &format!("seed {seed} cut {cut}"));
        }
        // The half-moved victims are evicted again later, and everything still reads back.
        for _ in 0..5000 {
            let lba = rng.next_u64() % (ctl.layout.num_blocks / 2);
            version += 1;
            t = ctl.write(t, lba, &block(lba, version), None, WriteHints::NONE).unwrap();
            model.insert(lba, version);
        }
        verify(&mut ctl, &mut t, &model, &format!("seed {seed} after the cuts"));
    }
}

#[test]
fn a_nand_image_cut_mid_eviction_reopens_with_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(SlcEviction::Paced);
    c.backing = Some(dir.path().join("ssd.img"));
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(21);
    let mut model = BTreeMap::new();
    let (mut t, mut version) = (0u64, 0u64);
    for life in 0..3 {
        // A new controller loads the file as the media held it at the cut (the previous
        // controller is dropped without a flush, as a killed process would leave it).
        let mut ctl = Controller::new(&c).unwrap();
        assert!(ctl.ftl.eviction_in_progress().is_none());
        verify(&mut ctl, &mut t, &model, &format!("life {life}"));
        let mid =
            write_until_mid_eviction(&mut ctl, &mut t, &mut rng, &mut model, &mut version, 20_000);
        assert!(mid, "life {life}: no paced eviction in progress");
    }
    let mut ctl = Controller::new(&c).unwrap();
    verify(&mut ctl, &mut t, &model, "last life");
}

// Idle-time eviction (`slc_eviction = "idle"`): a full cache passes host writes to the dense
// area, and the evictor works only in idle gaps.

/// Submits `n` single-block writes arriving faster than the device programs them (one every
/// microsecond, so it is never idle), over distinct blocks; returns the last completion time.
fn write_without_idle_time(ctl: &mut Controller, n: u64) -> u64 {
    let data = block(0, 1);
    let mut last = 0;
    for i in 0..n {
        last = last.max(ctl.write(i * 1000, i, &data, None, WriteHints::NONE).unwrap());
    }
    last
}

#[test]
fn a_full_cache_sends_writes_to_the_dense_area_without_eviction_work() {
    let paced_cfg = cfg(SlcEviction::Paced);
    let idle_cfg = cfg(SlcEviction::Idle);
    let mut paced = Controller::new(&paced_cfg).unwrap();
    let mut idle = Controller::new(&idle_cfg).unwrap();
    let slc_units = idle.layout.slots_per_line_slc as u64 * idle.layout.slc_lines as u64;
    let n = 3 * slc_units;
    let paced_ns = write_without_idle_time(&mut paced, n);
    let idle_ns = write_without_idle_time(&mut idle, n);
    let (p, i) = (paced.ftl.counters(), idle.ftl.counters());
    eprintln!(
        "{n} writes: paced {paced_ns} ns ({} evicted), idle {idle_ns} ns ({} bypassed)",
        p.slc_evictions, i.slc_bypassed_units
    );
    // The cache took its size and the rest went straight to the dense area: nothing was
    // evicted, because the device never idled.
    assert_eq!(i.slc_evictions, 0, "{i:?}");
    assert_eq!(i.slc_bypassed_units, n - slc_units, "{i:?}");
    assert_eq!(i.host_slots, n);
    assert_eq!(p.slc_bypassed_units, 0);
    assert!(p.slc_evictions >= n - 2 * slc_units, "paced eviction must have run: {p:?}");
    // tiny-slc programs SLC and TLC pages in the same 200 us, so the paced cache does about
    // twice the NAND work per unit past its size (a program into SLC, a read and a program to
    // move it on) and the idle-time cache once.
    assert!(idle_ns * 4 < paced_ns * 3, "idle {idle_ns} ns vs paced {paced_ns} ns");
}

#[test]
fn idle_time_empties_lines_and_the_cache_takes_writes_again() {
    let mut ctl = Controller::new(&cfg(SlcEviction::Idle)).unwrap();
    let slc_units = ctl.layout.slots_per_line_slc as u64 * ctl.layout.slc_lines as u64;
    let mut t = write_without_idle_time(&mut ctl, slc_units + 10);
    let before = ctl.ftl.counters();
    assert_eq!(before.slc_bypassed_units, 10);
    // A long idle gap: the next command finds the device idle and the evictor empties lines
    // until more than `slc_evict_free_lines` are free, in the gap before the command.
    t += 10_000_000_000;
    let data = block(0, 2);
    t = ctl.write(t, 0, &data, None, WriteHints::NONE).unwrap();
    let after = ctl.ftl.counters();
    assert!(after.slc_evicted_lines >= 2, "{after:?}");
    assert_eq!(after.slc_evictions, after.slc_evicted_idle, "only idle time evicts: {after:?}");
    assert_eq!(after.slc_bypassed_units, 10, "the write went to a freed SLC line: {after:?}");
    let mut buf = vec![0u8; BS];
    ctl.read(t, 0, &mut buf, None).unwrap();
    assert!(buf == data);
}

#[test]
fn random_writes_with_idle_gaps_read_back_through_power_losses_mid_eviction() {
    for seed in [31u64, 32, 33] {
        let mut c = cfg(SlcEviction::Idle);
        c.firmware.slc_evictor = EvictorPolicy::Transient;
        let mut ctl = Controller::new(&c).unwrap();
        let span = ctl.layout.num_blocks / 2;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let (mut t, mut version, mut cuts, mut reads_mid) = (0u64, 0u64, 0u32, 0u64);
        for _ in 0..30_000 {
            let r = rng.next_u64();
            let lba = (r >> 16) % span;
            // Bursts with gaps: one command in 64 comes after an idle gap of up to 20 ms, long
            // enough to move part of a line (a unit's read and program take 240 us) but, on
            // average, not all the bursts wrote, so the cache also fills and is passed.
            if r % 64 == 0 {
                t += (r >> 40) % 20_000_000;
            }
            match (r >> 4) % 16 {
                0..=10 => {
                    version += 1;
                    let hints = WriteHints { transient: r & 32 != 0, ..WriteHints::NONE };
                    t = ctl.write(t, lba, &block(lba, version), None, hints).unwrap();
                    model.insert(lba, version);
                }
                k => {
                    let what = format!("seed {seed}");
                    reads_mid += trim_or_check(&mut ctl, &mut t, &mut model, lba, k == 11, &what);
                }
            }
            // Writes go through (no buffer), so every completed write is durable: cut the power
            // now and then while a victim is half moved.
            if cuts < 4 && ctl.ftl.eviction_in_progress().is_some_and(|(_, v)| v > 0) {
                cuts += 1;
                ctl.power_loss(t);
                ctl.recover(t);
                verify(&mut ctl, &mut t, &model, &format!("seed {seed} cut {cuts}"));
            }
        }
        verify(&mut ctl, &mut t, &model, &format!("seed {seed}, final check"));
        let f = ctl.ftl.counters();
        eprintln!("seed {seed}: {cuts} cuts, {reads_mid} reads mid-eviction, {f:?}");
        assert_eq!(cuts, 4, "seed {seed}: a victim was never caught half moved");
        assert!(reads_mid > 100, "seed {seed}: {reads_mid} reads mid-eviction");
        assert!(f.slc_bypassed_units > 0 && f.slc_evicted_idle > 0, "seed {seed}: {f:?}");
        assert_eq!(f.slc_evictions, f.slc_evicted_idle, "seed {seed}: {f:?}");
    }
}
