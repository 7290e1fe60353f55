//! Goal: every fault kind of the `inject` layer does to the data exactly what the thesis'
//! taxonomy says it does (jaffer-thesis-2023.txt §2.4.1, Table 2.1), to the block it targets
//! and to no other, fires on the access its target names and on no other, is logged, and
//! leaves behind a power cut what a real device with that fault would leave.
//!
//! Method: an `inject` layer over a volatile member (a write cache in front of a durable
//! store, crates/check `Volatile`) on the simulated runtime. Each test writes blocks whose
//! bytes name their LBA and a generation, arms one fault, and compares what reads return, what
//! the store holds after a flush and a power cut, and the injection log with what the fault
//! should have done, computed independently in the test. Faults drawn at random (probability)
//! are checked for repeating under the same seed.

use std::sync::Arc;

use flashrig_blockdev::{BlockDevice, DevError, DevRef, WriteHints};
use flashrig_check::{Store, Volatile};
use flashrig_engines::inject::{FaultConfig, Inject, InjectionLog, Ops};
use flashrig_runtime::{now_ns, run, RuntimeKind};

const BS: usize = 4096;
const BLOCKS: u64 = 64;

/// Block `lba`'s contents in generation `generation`: every byte differs between blocks and
/// generations, and no byte is zero (so zeroed sectors show).
fn block(lba: u64, generation: u8) -> Vec<u8> {
    (0..BS)
        .map(|i| 1 + ((lba as usize * 7 + i * 13 + generation as usize * 101) % 251) as u8)
        .collect()
}

fn blocks(lba: u64, n: u64, generation: u8) -> Vec<u8> {
    (lba..lba + n).flat_map(|b| block(b, generation)).collect()
}

fn fault(toml_text: &str) -> FaultConfig {
    toml::from_str(toml_text).expect("a fault table")
}

struct Rig {
    inject: Arc<Inject>,
    member: Arc<Volatile>,
}

fn rig(faults: &[&str], seed: u64) -> Rig {
    let member = Arc::new(Volatile::new("m", BS as u32, BLOCKS, 0, Store::default()));
    let specs = faults.iter().map(|f| fault(f).to_spec(BS as u32).unwrap()).collect();
    let below: DevRef = member.clone();
    let inject = Arc::new(
        Inject::new("inject", below, specs, seed, InjectionLog::in_memory(), None).unwrap(),
    );
    Rig { inject, member }
}

/// Runs `body` on one simulated reactor.
fn sim<T: Send + 'static>(body: impl AsyncFnOnce() -> T + Send + 'static) -> T {
    run(RuntimeKind::Sim, 1, move || async move { body().await }).0
}

async fn read(d: &dyn BlockDevice, lba: u64, n: u64) -> Result<Vec<u8>, DevError> {
    let mut buf = vec![0u8; n as usize * BS];
    d.read(lba, &mut buf, None).await.map(|_| buf)
}

async fn write(d: &dyn BlockDevice, lba: u64, data: &[u8]) -> Result<(), DevError> {
    d.write(lba, data, None, WriteHints::default()).await
}

/// What the durable store holds at `lba` after a power cut (zeros if never written).
fn stored(r: &Rig, lba: u64) -> Vec<u8> {
    r.member.media().get(lba).map_or(vec![0; BS], |b| b.0.to_vec())
}

/// Writes generation 1 of every block and flushes it, with no fault armed yet.
async fn fill(r: &Rig) {
    let d = r.member.as_ref();
    write(d, 0, &blocks(0, BLOCKS, 1)).await.unwrap();
    d.flush().await.unwrap();
}

#[test]
fn read_error_fails_the_nth_read_of_its_block_only() {
    let r = rig(&[], 1);
    sim(async move || {
        fill(&r).await;
        r.inject
            .arm(fault("kind = 'read-error'\nlba = 5\nnth = 2").to_spec(4096).unwrap())
            .unwrap();
        let d = r.inject.as_ref();
        // The first read of block 5 (inside a larger read) passes; reads of others never count.
        assert_eq!(read(d, 4, 3).await.unwrap(), blocks(4, 3, 1));
        assert_eq!(read(d, 6, 1).await.unwrap(), block(6, 1));
        let e = read(d, 5, 1).await.unwrap_err();
        assert!(matches!(e, DevError::ReadMedia { lba: 5 }), "{e:?}");
        // It fired once: the third read passes, and the block was never changed.
        assert_eq!(read(d, 5, 1).await.unwrap(), block(5, 1));
        let log = r.inject.log().records();
        assert_eq!(log.len(), 1);
        assert_eq!(
            (log[0].op.as_str(), log[0].lba, log[0].kind.as_str()),
            ("read", 5, "read-error")
        );
    });
}

#[test]
fn write_error_writes_nothing_of_the_command() {
    let r = rig(&["kind = 'write-error'\nlba = 10"], 1);
    sim(async move || {
        fill(&r).await;
        let d = r.inject.as_ref();
        let e = write(d, 8, &blocks(8, 4, 2)).await.unwrap_err();
        assert!(matches!(e, DevError::WriteMedia { lba: 10 }), "{e:?}");
        assert_eq!(read(d, 8, 4).await.unwrap(), blocks(8, 4, 1));
        // Untargeted writes pass.
        write(d, 20, &block(20, 2)).await.unwrap();
        assert_eq!(read(d, 20, 1).await.unwrap(), block(20, 2));
    });
}

#[test]
fn corruption_of_a_read_changes_what_is_returned_and_not_what_is_stored() {
    let r = rig(&["kind = 'corrupt'\nhow = 'bitflip'\nbits = 3\nlba = 7\ncount = 1\noffset = 100\nlen = 16"], 9);
    sim(async move || {
        fill(&r).await;
        let d = r.inject.as_ref();
        let got = read(d, 6, 3).await.unwrap();
        let want = blocks(6, 3, 1);
        let flipped: u32 = got.iter().zip(&want).map(|(a, b)| (a ^ b).count_ones()).sum();
        assert_eq!(flipped, 3, "three bits flipped in all");
        let changed: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
        assert!(changed.iter().all(|&i| (BS + 100..BS + 116).contains(&i)), "{changed:?}");
        // The medium is intact: the next read (count exhausted) returns the block.
        assert_eq!(read(d, 7, 1).await.unwrap(), block(7, 1));
        let log = r.inject.log().records();
        assert!(log[0].detail.as_deref().unwrap().starts_with("bits "), "{log:?}");
    });
}

#[test]
fn corruption_of_a_write_is_stored() {
    let r = rig(&["kind = 'corrupt'\nops = 'write'\nhow = 'fill'\nfill = 0xAB\nlba = 3\noffset = 8\nlen = 8"], 1);
    sim(async move || {
        let d = r.inject.as_ref();
        write(d, 2, &blocks(2, 2, 2)).await.unwrap();
        d.flush().await.unwrap();
        r.member.power_cut();
        let mut want = block(3, 2);
        want[8..16].fill(0xAB);
        assert_eq!(stored(&r, 3), want);
        assert_eq!(stored(&r, 2), block(2, 2));
    });
}

#[test]
fn a_shorn_write_keeps_the_first_three_eighths_and_leaves_the_rest_erased() {
    let r = rig(&["kind = 'shorn'\nlba = 12"], 1);
    sim(async move || {
        fill(&r).await;
        let d = r.inject.as_ref();
        write(d, 11, &blocks(11, 3, 2)).await.unwrap();
        d.flush().await.unwrap();
        r.member.power_cut();
        let mut want = block(12, 2);
        want[3 * 512..].fill(0);
        assert_eq!(stored(&r, 12), want, "sectors 3..8 left erased");
        assert_eq!(stored(&r, 11), block(11, 2));
        assert_eq!(stored(&r, 13), block(13, 2));
        assert_eq!(r.inject.log().records()[0].detail.as_deref(), Some("sectors 11100000"));
    });
}

#[test]
fn a_shorn_write_follows_a_sector_pattern() {
    let r = rig(&["kind = 'shorn'\nlba = 1\nsectors = '10000001'"], 1);
    sim(async move || {
        let d = r.inject.as_ref();
        write(d, 1, &block(1, 2)).await.unwrap();
        let got = read(d, 1, 1).await.unwrap();
        let mut want = block(1, 2);
        want[512..7 * 512].fill(0);
        assert_eq!(got, want);
    });
}

#[test]
fn a_lost_write_is_acknowledged_and_survives_no_flush() {
    let r = rig(&["kind = 'lost'\nlba = 30\nnth = 1"], 1);
    sim(async move || {
        fill(&r).await;
        let d = r.inject.as_ref();
        write(d, 29, &blocks(29, 3, 2)).await.unwrap();
        d.flush().await.unwrap();
        // Before the crash the host already reads the old block back ...
        assert_eq!(read(d, 30, 1).await.unwrap(), block(30, 1));
        r.member.power_cut();
        // ... and after it the store holds its neighbours' new data and its old data.
        assert_eq!(stored(&r, 29), block(29, 2));
        assert_eq!(stored(&r, 30), block(30, 1));
        assert_eq!(stored(&r, 31), block(31, 2));
    });
}

#[test]
fn a_misdirected_write_lands_elsewhere_and_leaves_its_block_old() {
    let r = rig(&["kind = 'misdirect'\nlba = 40\noffset_blocks = -8"], 1);
    sim(async move || {
        fill(&r).await;
        let d = r.inject.as_ref();
        write(d, 40, &block(40, 2)).await.unwrap();
        d.flush().await.unwrap();
        r.member.power_cut();
        assert_eq!(stored(&r, 40), block(40, 1));
        assert_eq!(stored(&r, 32), block(40, 2), "block 32 holds block 40's data");
        assert_eq!(r.inject.log().records()[0].detail.as_deref(), Some("landed on block 32"));
    });
}

#[test]
fn an_incomplete_erase_leaves_old_bits_cleared() {
    let r = rig(&["kind = 'stale'\nlba = 50"], 1);
    sim(async move || {
        fill(&r).await;
        let d = r.inject.as_ref();
        write(d, 50, &block(50, 2)).await.unwrap();
        let want: Vec<u8> = block(50, 1).iter().zip(block(50, 2)).map(|(o, n)| o & n).collect();
        assert_ne!(want, block(50, 2));
        assert_eq!(read(d, 50, 1).await.unwrap(), want);
    });
}

#[test]
fn a_delay_holds_back_only_the_commands_it_targets() {
    let r = rig(&["kind = 'delay'\ndelay_ms = 250\nlba = 9\nops = 'read'"], 1);
    sim(async move || {
        fill(&r).await;
        let d = r.inject.as_ref();
        let t0 = now_ns();
        read(d, 8, 1).await.unwrap();
        write(d, 9, &block(9, 2)).await.unwrap();
        let untargeted_ns = now_ns() - t0;
        let t1 = now_ns();
        assert_eq!(read(d, 9, 1).await.unwrap(), block(9, 2));
        let targeted_ns = now_ns() - t1;
        assert!(untargeted_ns < 1_000_000, "{untargeted_ns} ns");
        assert!(targeted_ns >= 250_000_000, "{targeted_ns} ns on the simulated clock");
    });
}

#[test]
fn a_device_failure_fails_every_later_command() {
    let r = rig(&["kind = 'fail'\nnth = 3"], 1);
    sim(async move || {
        let d = r.inject.as_ref();
        write(d, 0, &block(0, 2)).await.unwrap();
        write(d, 1, &block(1, 2)).await.unwrap();
        assert!(matches!(write(d, 2, &block(2, 2)).await, Err(DevError::DeviceFailed { .. })));
        assert!(matches!(read(d, 0, 1).await, Err(DevError::DeviceFailed { .. })));
        assert!(matches!(d.flush().await, Err(DevError::DeviceFailed { .. })));
        assert!(matches!(d.trim(0, 1).await, Err(DevError::DeviceFailed { .. })));
        assert!(r.inject.is_failed());
    });
}

#[test]
fn faults_are_armed_and_disarmed_while_the_layer_runs() {
    let r = rig(&[], 1);
    sim(async move || {
        fill(&r).await;
        let d = r.inject.as_ref();
        let id =
            r.inject.arm(fault("kind = 'read-error'\nlba = 2").to_spec(4096).unwrap()).unwrap();
        assert!(read(d, 2, 1).await.is_err());
        assert!(read(d, 2, 1).await.is_err(), "no count: it keeps firing");
        assert!(r.inject.disarm(id));
        assert!(!r.inject.disarm(id));
        assert_eq!(read(d, 2, 1).await.unwrap(), block(2, 1));
        let outside = fault("kind = 'lost'\nlba = 60\nblocks = 8").to_spec(4096).unwrap();
        assert!(r.inject.arm(outside).unwrap_err().contains("outside the device's 64 blocks"));
    });
}

/// The blocks a probability fault dropped, with its seed.
fn lost_blocks(seed: u64) -> Vec<u64> {
    let r = rig(&["kind = 'lost'\nprobability = 0.25"], seed);
    let inject = r.inject.clone();
    sim(async move || {
        for lba in 0..BLOCKS {
            write(r.inject.as_ref(), lba, &block(lba, 2)).await.unwrap();
        }
    });
    inject.log().records().iter().map(|l| l.lba).collect()
}

#[test]
fn a_probability_fault_repeats_under_its_seed() {
    let a = lost_blocks(7);
    assert_eq!(a, lost_blocks(7), "seed 7 dropped different blocks twice");
    assert!(!a.is_empty() && a.len() < BLOCKS as usize, "{a:?}");
    assert_ne!(a, lost_blocks(8), "seeds 7 and 8 dropped the same blocks");
}

#[test]
fn a_window_of_the_clock_bounds_a_fault() {
    let r = rig(&["kind = 'read-error'\nfrom_ms = 10\nuntil_ms = 20"], 1);
    sim(async move || {
        let d = r.inject.as_ref();
        assert!(read(d, 0, 1).await.is_ok(), "before the window");
        flashrig_runtime::sleep_ns(15_000_000).await;
        assert!(read(d, 0, 1).await.is_err(), "inside it");
        flashrig_runtime::sleep_ns(10_000_000).await;
        assert!(read(d, 0, 1).await.is_ok(), "after it");
    });
}

#[test]
fn the_log_file_holds_one_json_line_per_injection() {
    let dir = std::env::temp_dir().join(format!("flashrig-inject-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("log.jsonl");
    let member: DevRef = Arc::new(Volatile::new("m", BS as u32, BLOCKS, 0, Store::default()));
    let spec = fault("kind = 'lost'\nlba = 4\nblocks = 2").to_spec(4096).unwrap();
    let log = InjectionLog::to_file(&path).unwrap();
    let inject = Arc::new(Inject::new("inject", member, vec![spec], 1, log, None).unwrap());
    let d = inject.clone();
    sim(async move || write(d.as_ref(), 3, &blocks(3, 4, 2)).await.unwrap());
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines.len(), 2, "{text}");
    for (line, lba) in lines.iter().zip([4, 5]) {
        assert_eq!(line["lba"], lba);
        assert_eq!(line["kind"], "lost");
        assert_eq!(line["op"], "write");
        assert!(line["time_ns"].is_u64() && line.get("structure").is_some(), "{line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(Ops::Both, fault("kind = 'delay'\ndelay_ms = 1").to_spec(4096).unwrap().target.ops);
}

#[test]
fn a_trace_logs_every_access_it_targets_and_changes_nothing() {
    let r = rig(&["kind = 'trace'\nlba = 10\nblocks = 4"], 1);
    sim(async move || {
        let d = r.inject.as_ref();
        write(d, 8, &blocks(8, 8, 2)).await.unwrap();
        assert_eq!(read(d, 8, 8).await.unwrap(), blocks(8, 8, 2));
        let log = r.inject.log().records();
        let seen: Vec<(&str, u64)> = log.iter().map(|l| (l.op.as_str(), l.lba)).collect();
        let want: Vec<(&str, u64)> =
            ["write", "read"].iter().flat_map(|op| (10..14).map(move |b| (*op, b))).collect();
        assert_eq!(seen, want);
        assert!(log.iter().all(|l| l.kind == "trace"));
    });
}
