//! Goal: the `scala` engine never returns silently corrupted data. Every block copy carries a
//! crc32c over its data and its record (user block, timestamp, AFA place), so bit rot, a lost
//! write and a misdirected write on a member are caught on read; the block is rebuilt from the
//! stripe's redundancy (another replica while the stripe is replicated, parity once it is
//! converted), returned right and rewritten in place; with every copy bad the read answers
//! `DevError::Corrupt`; a scrub (`VendorCommand::Scrub`) finds and repairs what no read
//! touched, parity included, and a second scrub finds nothing.
//!
//! Method: arrays over RAM disks (host conversion) behind `flashrig_check::Rot`, which flips
//! data bits under the engine (keeping the metadata), loses a write or sends it elsewhere. The
//! tests find where a block's copies are by reading the members' records directly (the record
//! format is public: `scala::format::Oob`), corrupt chosen copies or parity blocks, and check
//! what reads, the engine's counters (`checksum_errors`, `healed_blocks`,
//! `unrepairable_blocks`, `redundancy_mismatches`) and the members' raw contents show
//! afterwards. Conversion runs only when a test asks for it (`convert_all`), so a test knows
//! whether a stripe is replicated or converted. A crash test drops an instance without closing
//! it and reopens the members: a flushed write lost on its primary copy must come back from its
//! backup copy, not as the block's previous version. The last test runs the reference-model
//! driver of `flashrig-check` with conversion, GC and recalls going, and flips random written
//! blocks on up to m members between its phases; every read is checked against the model, and
//! a final scrub must leave nothing unrepairable and a second one nothing to do. Failures name
//! the seed; `FLASHRIG_SEED=<n>` reruns it. Members that keep no payload at all (as emulated
//! SSDs in timing-only payload modes) must not make every read fail: the engine turns its
//! checks off for them.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{
    check_io, snapshot_stack, BlockDevice, DevError, DevRef, DevResult, DeviceInfo, ScrubReport,
    VendorCommand, VendorReply, WriteHints,
};
use flashrig_check::{run_ops, seeds, verify_all, CheckConfig, Model, OpWeights, Rot, WriteFault};
use flashrig_devices::RamDevice;
use flashrig_engines::scala::format::{Oob, Seal};
use flashrig_engines::scala::{Scala, ScalaOptions};
use flashrig_runtime::{run, RuntimeKind};
use parking_lot::Mutex;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

const BS: usize = 4096;
const MD_BYTES: u32 = 16;
const RAM_BLOCKS: u64 = 2048;

struct Array {
    sc: Arc<Scala>,
    rots: Vec<Arc<Rot>>,
    /// The RAM disks under the `Rot` layers, to look at what the members hold.
    raw: Vec<DevRef>,
}

impl Array {
    fn dev(&self) -> DevRef {
        self.sc.clone()
    }

    fn counter(&self, name: &str) -> u64 {
        snapshot_stack(self.sc.as_ref()).counters.get(name).copied().unwrap_or(0)
    }

    fn counters(&self) -> BTreeMap<String, u64> {
        let c = snapshot_stack(self.sc.as_ref()).counters;
        ["checksum_errors", "healed_blocks", "unrepairable_blocks", "redundancy_mismatches"]
            .iter()
            .map(|n| (n.to_string(), c.get(*n).copied().unwrap_or(0)))
            .collect()
    }

    async fn scrub(&self) -> ScrubReport {
        match self.sc.vendor(VendorCommand::Scrub).await {
            Ok(VendorReply::Scrubbed(r)) => r,
            other => panic!("scrub answered {other:?}"),
        }
    }
}

async fn build(k: usize, m: usize, o: ScalaOptions) -> Array {
    let raw: Vec<DevRef> = (0..k + m)
        .map(|i| {
            Arc::new(RamDevice::new(&format!("ram{i}"), BS as u32, RAM_BLOCKS, MD_BYTES, 0))
                as DevRef
        })
        .collect();
    let rots: Vec<Arc<Rot>> = raw.iter().map(|r| Arc::new(Rot::new(r.clone()))).collect();
    let devs: Vec<DevRef> = rots.iter().map(|r| r.clone() as DevRef).collect();
    let sc = Arc::new(Scala::create("sc", devs, o).await.expect("create"));
    Array { sc, rots, raw }
}

/// Options under which nothing converts unless the test asks (`convert_all`): chunks of
/// `chunk` blocks, eight VHs per member, no conversion for idleness or low VHs.
fn quiet(k: usize, m: usize, chunk: u64) -> ScalaOptions {
    ScalaOptions {
        chunk_blocks: chunk,
        transient_blocks_per_member: Some(8 * k as u64 * chunk),
        vh_low_fraction: 0.0,
        idle_ns: 3_600_000_000_000,
        ..ScalaOptions::new(k, m)
    }
}

/// Version `v` of user block `ub`: every byte depends on both and on its offset.
fn pattern(ub: u64, v: u64) -> Vec<u8> {
    (0..BS).map(|i| (ub.wrapping_mul(31) ^ v.wrapping_mul(101) ^ (i as u64 * 7)) as u8).collect()
}

async fn write(a: &Array, ub: u64, v: u64) {
    a.sc.write(ub, &pattern(ub, v), None, WriteHints::NONE).await.expect("write");
}

async fn read(a: &Array, ub: u64) -> Result<Vec<u8>, DevError> {
    let mut b = vec![0u8; BS];
    a.sc.read(ub, &mut b, None).await.map(|_| b)
}

/// A block as a member holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Raw {
    data: Vec<u8>,
    md: Vec<u8>,
}

async fn raw_block(a: &Array, mem: usize, lba: u64) -> Raw {
    let mut data = vec![0u8; BS];
    let mut md = vec![0u8; MD_BYTES as usize];
    a.raw[mem].read(lba, &mut data, Some(&mut md)).await.expect("raw read");
    Raw { data, md }
}

/// One copy of a user block on a member, found by its record.
#[derive(Clone, Copy, Debug)]
struct Copy {
    mem: usize,
    lba: u64,
    oob: Oob,
    /// In the HH area (a primary copy, or GC's) rather than a VH (a backup copy).
    primary: bool,
}

/// Every copy of the newest version of user block `ub` that the members hold, whose checksum
/// matches: read straight from the RAM disks.
async fn copies_of(a: &Array, ub: u32) -> Vec<Copy> {
    let g = a.sc.geometry().clone();
    let first = g.hh_lba(0);
    let vh_start = g.vh_lba(0, 0);
    let n = (g.member_blocks - first) as usize;
    let mut out = Vec::new();
    for mem in 0..g.n {
        let mut d = vec![0u8; n * BS];
        let mut md = vec![0u8; n * MD_BYTES as usize];
        a.raw[mem].read(first, &mut d, Some(&mut md)).await.expect("raw read");
        for b in 0..n {
            let mdb = &md[b * MD_BYTES as usize..][..MD_BYTES as usize];
            if let Seal::Valid(o) = Oob::check(mdb, &d[b * BS..][..BS]) {
                if o.user_block == ub {
                    let lba = first + b as u64;
                    out.push(Copy { mem, lba, oob: o, primary: lba < vh_start });
                }
            }
        }
    }
    let newest = out.iter().map(|c| c.oob.ts).max().unwrap_or(0);
    out.retain(|c| c.oob.ts == newest);
    out
}

/// The primary copy of `ub` and the (member, LBA) of parity row `i` of its row.
async fn converted_place(a: &Array, ub: u32) -> (Copy, Vec<(usize, u64)>) {
    let g = a.sc.geometry().clone();
    let c = copies_of(a, ub).await;
    assert_eq!(c.len(), 1, "block {ub} of a converted stripe has one copy: {c:?}");
    let (s, _, off) = g.split(c[0].oob.afa);
    let parity = (0..g.m).map(|i| (g.parity_member(s, i), g.hh_lba(s) + off)).collect();
    (c[0], parity)
}

fn sim<F, Fut>(main: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let (res, _) = run(RuntimeKind::Sim, 1, main);
    res
}

// ---------------------------------------------------------------------------------------------
// (a) Bit flips on up to m members are healed on read

#[test]
fn bit_flips_in_replicas_and_converted_stripes_are_healed_on_read() {
    for (k, m) in [(2, 1), (4, 2)] {
        sim(move || async move {
            let what = format!("{k}+{m}");
            let a = build(k, m, quiet(k, m, 2)).await;
            for ub in 0..12 {
                write(&a, ub, 1).await;
            }
            // Replicated: the primary and m - 1 backups of block 3 rot, one copy stays good.
            let c3 = copies_of(&a, 3).await;
            assert_eq!(c3.len(), m + 1, "{what}: block 3 is replicated: {c3:?}");
            let good = c3.iter().position(|c| !c.primary).expect("a backup");
            for (x, c) in c3.iter().enumerate() {
                if x != good {
                    a.rots[c.mem].flip(c.lba, 1000 + x as u64).await.unwrap();
                }
            }
            for ub in 0..12 {
                assert_eq!(read(&a, ub).await.unwrap(), pattern(ub, 1), "{what}: block {ub}");
            }
            assert_eq!(a.counter("checksum_errors"), m as u64, "{what}: {:?}", a.counters());
            assert_eq!(a.counter("healed_blocks"), m as u64, "{what}: {:?}", a.counters());
            for c in &c3 {
                let r = raw_block(&a, c.mem, c.lba).await;
                assert_eq!(r.data, pattern(3, 1), "{what}: copy {c:?} was rewritten");
            }

            // Converted: block 5's data and (m = 2) parity row 0 of its row rot; block 8's
            // data rots on its own.
            a.sc.convert_all().await.unwrap();
            let (c5, p5) = converted_place(&a, 5).await;
            let (c8, _) = converted_place(&a, 8).await;
            let parity_before = raw_block(&a, p5[0].0, p5[0].1).await;
            a.rots[c5.mem].flip(c5.lba, 7).await.unwrap();
            a.rots[c8.mem].flip(c8.lba, 30_000).await.unwrap();
            if m == 2 {
                a.rots[p5[0].0].flip(p5[0].1, 99).await.unwrap();
            }
            let before = a.counters();
            for ub in 0..12 {
                assert_eq!(read(&a, ub).await.unwrap(), pattern(ub, 1), "{what}: block {ub}");
            }
            let after = a.counters();
            let bad = if m == 2 { 3 } else { 2 };
            assert_eq!(
                after["healed_blocks"] - before["healed_blocks"],
                bad,
                "{what}: data of blocks 5 and 8 (and the parity) rewritten: {after:?}"
            );
            assert_eq!(after["unrepairable_blocks"], 0, "{what}: {after:?}");
            assert_eq!(raw_block(&a, c5.mem, c5.lba).await.data, pattern(5, 1), "{what}");
            assert_eq!(raw_block(&a, c8.mem, c8.lba).await.data, pattern(8, 1), "{what}");
            assert_eq!(
                raw_block(&a, p5[0].0, p5[0].1).await,
                parity_before,
                "{what}: the parity block holds its parity again"
            );
            let rep = a.scrub().await;
            assert_eq!(rep.checksum_errors + rep.redundancy_mismatches, 0, "{what}: {rep:?}");
        });
    }
}

// ---------------------------------------------------------------------------------------------
// (b) Every copy bad: Corrupt, never wrong data

#[test]
fn a_block_bad_on_every_copy_reads_as_corrupt() {
    for (k, m) in [(2, 1), (4, 2)] {
        sim(move || async move {
            let what = format!("{k}+{m}");
            let a = build(k, m, quiet(k, m, 2)).await;
            for ub in 0..8 {
                write(&a, ub, 1).await;
            }
            // Replicated: all m + 1 copies of block 2.
            for c in copies_of(&a, 2).await {
                a.rots[c.mem].flip(c.lba, 5).await.unwrap();
            }
            match read(&a, 2).await {
                Err(DevError::Corrupt { lba, .. }) => assert_eq!(lba, 2, "{what}"),
                other => panic!("{what}: read of block 2 answered {other:?}"),
            }
            let mut four = vec![0u8; 4 * BS];
            let r = a.sc.read(0, &mut four, None).await;
            assert!(matches!(r, Err(DevError::Corrupt { .. })), "{what}: a range read: {r:?}");
            assert_eq!(read(&a, 3).await.unwrap(), pattern(3, 1), "{what}: its neighbour");
            assert!(a.counter("unrepairable_blocks") >= 1, "{what}: {:?}", a.counters());
            // A scrub cannot repair it either, and says so.
            let rep = a.scrub().await;
            assert_eq!(rep.unrepairable, 1, "{what}: {rep:?}");
            assert!(!rep.clean());
            // Overwritten, the block is whole again.
            write(&a, 2, 2).await;
            assert_eq!(read(&a, 2).await.unwrap(), pattern(2, 2), "{what}");

            // Converted: block 6's data and all m parity blocks of its row.
            a.sc.convert_all().await.unwrap();
            let (c6, p6) = converted_place(&a, 6).await;
            a.rots[c6.mem].flip(c6.lba, 77).await.unwrap();
            for (mem, lba) in p6 {
                a.rots[mem].flip(lba, 77).await.unwrap();
            }
            let r = read(&a, 6).await;
            assert!(matches!(r, Err(DevError::Corrupt { lba: 6, .. })), "{what}: {r:?}");
            for ub in (0..8).filter(|&b| b != 6) {
                let v = if ub == 2 { 2 } else { 1 };
                assert_eq!(read(&a, ub).await.unwrap(), pattern(ub, v), "{what}: block {ub}");
            }
            let r = read(&a, 6).await;
            assert!(matches!(r, Err(DevError::Corrupt { .. })), "{what}: still: {r:?}");
        });
    }
}

// ---------------------------------------------------------------------------------------------
// (c) A lost write and a misdirected write on one member

#[test]
fn lost_and_misdirected_writes_are_caught_and_healed() {
    for (k, m) in [(2, 1), (4, 2)] {
        sim(move || async move {
            let what = format!("{k}+{m}");
            // Chunks of 4 blocks: the first three one-block writes of a fresh array land at
            // offsets 0, 1 and 2 of slot 0 of one stripe, all on the same data member.
            let a = build(k, m, quiet(k, m, 4)).await;
            let g = a.sc.geometry().clone();
            write(&a, 100, 1).await;
            let probe = copies_of(&a, 100).await;
            let p = *probe.iter().find(|c| c.primary).expect("primary");
            let (s, j, off) = g.split(p.oob.afa);
            assert_eq!((j, off), (0, 0), "{what}: the first write opens a hero group");
            let data_mem = g.data_member(s, 0);
            assert_eq!(p.mem, data_mem);

            // Lost: block 7's primary copy never reaches its member.
            a.rots[data_mem].arm(0, WriteFault::Lose);
            write(&a, 7, 1).await;
            a.rots[data_mem].disarm();
            assert_eq!(a.rots[data_mem].counts().lost_writes, 1, "{what}");
            let c7 = copies_of(&a, 7).await;
            assert!(c7.iter().all(|c| !c.primary) && c7.len() == m, "{what}: {c7:?}");
            assert_eq!(read(&a, 7).await.unwrap(), pattern(7, 1), "{what}: lost write");
            assert_eq!(a.counter("checksum_errors"), 1, "{what}: {:?}", a.counters());
            let place = g.hh_lba(s) + 1;
            let r = raw_block(&a, data_mem, place).await;
            assert_eq!(r.data, pattern(7, 1), "{what}: the primary copy is back in place");

            // Misdirected: block 8's primary copy lands two blocks back, on block 100's.
            a.rots[data_mem].arm(0, WriteFault::Misdirect { shift_blocks: RAM_BLOCKS - 2 });
            write(&a, 8, 1).await;
            a.rots[data_mem].disarm();
            assert_eq!(a.rots[data_mem].counts().misdirected_writes, 1, "{what}");
            let hit = raw_block(&a, data_mem, g.hh_lba(s)).await;
            assert_eq!(hit.data, pattern(8, 1), "{what}: block 8 landed on block 100's place");
            assert_eq!(read(&a, 100).await.unwrap(), pattern(100, 1), "{what}: overwritten one");
            assert_eq!(read(&a, 8).await.unwrap(), pattern(8, 1), "{what}: misdirected one");
            assert_eq!(a.counter("checksum_errors"), 3, "{what}: {:?}", a.counters());
            assert_eq!(raw_block(&a, data_mem, g.hh_lba(s)).await.data, pattern(100, 1));
            assert_eq!(raw_block(&a, data_mem, g.hh_lba(s) + 2).await.data, pattern(8, 1));
            assert_eq!(a.scrub().await.checksum_errors, 0, "{what}: nothing left to find");

            // A lost parity write during conversion: only the parity disagrees with the data,
            // which a scrub finds and recomputes.
            let parity_mem = g.parity_member(s, 0);
            a.rots[parity_mem].arm(0, WriteFault::Lose);
            a.sc.convert_all().await.unwrap();
            a.rots[parity_mem].disarm();
            assert_eq!(a.rots[parity_mem].counts().lost_writes, 1, "{what}");
            let rep = a.scrub().await;
            assert!(rep.redundancy_mismatches > 0 && rep.repaired > 0, "{what}: {rep:?}");
            assert_eq!(rep.checksum_errors + rep.unrepairable, 0, "{what}: {rep:?}");
            let again = a.scrub().await;
            assert_eq!(again.redundancy_mismatches + again.repaired, 0, "{what}: {again:?}");
            for ub in [7, 8, 100] {
                assert_eq!(read(&a, ub).await.unwrap(), pattern(ub, 1), "{what}: block {ub}");
            }
        });
    }
}

/// Recovery after a crash: a flushed write whose primary copy was lost is found in its backup
/// copy (recovery reads the transient area), mapped, and its primary copy rewritten. Mapping
/// only what the primary copies hold would bring back the block's previous version.
#[test]
fn a_write_lost_on_its_primary_copy_survives_a_crash_through_its_backup() {
    for (k, m) in [(2, 1), (4, 2)] {
        sim(move || async move {
            let what = format!("{k}+{m}");
            let a = build(k, m, quiet(k, m, 4)).await;
            let g = a.sc.geometry().clone();
            write(&a, 7, 0).await;
            let p = *copies_of(&a, 7).await.iter().find(|c| c.primary).expect("primary");
            let (s, j, off) = g.split(p.oob.afa);
            assert_eq!((j, off), (0, 0), "{what}: the first write opens a hero group");
            // The checkpoint maps version 0; version 1 goes to offset 1 of the same slot.
            a.sc.checkpoint().await.unwrap();
            a.rots[p.mem].arm(0, WriteFault::Lose);
            write(&a, 7, 1).await;
            a.rots[p.mem].disarm();
            assert_eq!(a.rots[p.mem].counts().lost_writes, 1, "{what}");
            a.sc.flush().await.unwrap();
            // A crash: the instance goes away without closing; the members keep what they hold.
            let Array { sc, rots, raw } = a;
            drop(sc);
            let devs: Vec<DevRef> = rots.iter().map(|r| r.clone() as DevRef).collect();
            let sc = Arc::new(Scala::open("sc", devs, quiet(k, m, 4)).await.expect("open"));
            let rec = sc.recovery().expect("report");
            let backups = rec.steps.iter().find(|st| st.name == "scan_backups").expect("step");
            assert!(backups.detail.starts_with("1 "), "{what}: {rec:?}");
            let a = Array { sc, rots, raw };
            assert_eq!(read(&a, 7).await.unwrap(), pattern(7, 1), "{what}: the flushed version");
            let r = raw_block(&a, p.mem, g.hh_lba(s) + 1).await;
            assert_eq!(r.data, pattern(7, 1), "{what}: its primary copy was rewritten");
            let rep = a.scrub().await;
            assert_eq!(rep.checksum_errors + rep.redundancy_mismatches, 0, "{what}: {rep:?}");
        });
    }
}

// ---------------------------------------------------------------------------------------------
// (d) Scrub repairs what no read touched

#[test]
fn scrub_repairs_corruption_no_read_touched_and_a_second_scrub_finds_nothing() {
    for (k, m) in [(2, 1), (4, 2)] {
        sim(move || async move {
            let what = format!("{k}+{m}");
            let a = build(k, m, quiet(k, m, 2)).await;
            for ub in 0..24 {
                write(&a, ub, 1).await;
            }
            a.sc.convert_all().await.unwrap();
            for ub in 24..30 {
                write(&a, ub, 1).await;
            }
            // Replicated stripes: a backup copy of block 25, the primary copy of block 27.
            let c25 = copies_of(&a, 25).await;
            let c27 = copies_of(&a, 27).await;
            assert_eq!((c25.len(), c27.len()), (m + 1, m + 1), "{what}: replicated");
            let b25 = *c25.iter().find(|c| !c.primary).unwrap();
            let p27 = *c27.iter().find(|c| c.primary).unwrap();
            // Converted stripes: block 4's data, the parity of block 10's row, and for m = 2
            // block 16's data together with parity row 1 of its row.
            let (c4, _) = converted_place(&a, 4).await;
            let (_, p10) = converted_place(&a, 10).await;
            let mut targets =
                vec![(b25.mem, b25.lba), (p27.mem, p27.lba), (c4.mem, c4.lba), p10[0]];
            if m == 2 {
                let (c16, p16) = converted_place(&a, 16).await;
                targets.push((c16.mem, c16.lba));
                targets.push(p16[1]);
            }
            let mut saved = Vec::new();
            for (x, &(mem, lba)) in targets.iter().enumerate() {
                saved.push(raw_block(&a, mem, lba).await);
                a.rots[mem].flip(lba, 3 + 97 * x as u64).await.unwrap();
            }
            assert_eq!(a.counter("checksum_errors"), 0, "{what}: no read has looked yet");
            let rep = a.scrub().await;
            let data_bad = if m == 2 { 4 } else { 3 };
            let parity_bad = if m == 2 { 2 } else { 1 };
            assert_eq!(rep.checksum_errors, data_bad, "{what}: {rep:?}");
            assert_eq!(rep.redundancy_mismatches, parity_bad, "{what}: {rep:?}");
            assert_eq!(rep.repaired, data_bad + parity_bad, "{what}: {rep:?}");
            assert_eq!(rep.unrepairable, 0, "{what}: {rep:?}");
            assert!(rep.blocks_checked > 0 && rep.clean(), "{what}: {rep:?}");
            for (&(mem, lba), before) in targets.iter().zip(&saved) {
                assert_eq!(
                    &raw_block(&a, mem, lba).await,
                    before,
                    "{what}: member {mem} block {lba} holds what it held before the flip"
                );
            }
            let second = a.scrub().await;
            assert_eq!(
                (second.checksum_errors, second.redundancy_mismatches, second.repaired),
                (0, 0, 0),
                "{what}: {second:?}"
            );
            assert_eq!(second.unrepairable, 0, "{what}");
            assert_eq!(second.blocks_checked, rep.blocks_checked, "{what}: the same walk");
            for ub in 0..30 {
                assert_eq!(read(&a, ub).await.unwrap(), pattern(ub, 1), "{what}: block {ub}");
            }
            assert_eq!(a.counter("healed_blocks"), data_bad + parity_bad, "{what}");
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Members that keep no payload

/// A member that keeps nothing, as an emulated SSD in payload mode `none` (timing-only
/// experiments): writes succeed, reads return zeros, data and metadata.
struct Forgetful {
    info: DeviceInfo,
}

#[async_trait(?Send)]
impl BlockDevice for Forgetful {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn kind(&self) -> &'static str {
        "forgetful"
    }
    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        check_io(&self.info, lba, buf.len(), md.as_ref().map(|m| m.len()))?;
        buf.fill(0);
        if let Some(m) = md {
            m.fill(0);
        }
        Ok(())
    }
    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        _hints: WriteHints,
    ) -> DevResult<()> {
        check_io(&self.info, lba, data.len(), md.map(|m| m.len())).map(|_| ())
    }
    async fn flush(&self) -> DevResult<()> {
        Ok(())
    }
    async fn trim(&self, _lba: u64, _num_blocks: u64) -> DevResult<()> {
        Ok(())
    }
}

#[test]
fn members_that_keep_no_payload_turn_the_checks_off() {
    sim(|| async {
        let devs: Vec<DevRef> = (0..3)
            .map(|i| {
                let info =
                    DeviceInfo::new(format!("f{i}"), BS as u32, RAM_BLOCKS).with_md_bytes(MD_BYTES);
                Arc::new(Forgetful { info }) as DevRef
            })
            .collect();
        let sc = Scala::create("sc", devs, quiet(2, 1, 2)).await.expect("create");
        for ub in 0..8 {
            sc.write(ub, &pattern(ub, 1), None, WriteHints::NONE).await.unwrap();
        }
        let mut b = vec![1u8; BS];
        sc.read(3, &mut b, None).await.expect("a timing-only read succeeds");
        assert!(b.iter().all(|&x| x == 0), "and returns what the members return");
        sc.convert_all().await.unwrap();
        sc.read(5, &mut b, None).await.expect("also once converted");
        let r = sc.vendor(VendorCommand::Scrub).await;
        assert!(matches!(r, Err(DevError::Unsupported { .. })), "scrub: {r:?}");
        let c = snapshot_stack(&sc).counters;
        assert_eq!(c["checksum_errors"] + c["unrepairable_blocks"], 0, "{c:?}");
    });
}

// ---------------------------------------------------------------------------------------------
// (e) The reference model, with rot on up to m members

/// Options that keep the space manager busy (as the scala tests of flashrig-check do): chunks
/// of 2 blocks, `reactors + 1` VHs per member, a grant window of 32 HHs.
fn busy(k: usize, m: usize, reactors: usize) -> ScalaOptions {
    ScalaOptions {
        chunk_blocks: 2,
        transient_blocks_per_member: Some((reactors as u64 + 1) * k as u64 * 2),
        window_heroes: Some(32),
        idle_ns: 200_000,
        ..ScalaOptions::new(k, m)
    }
}

/// Flips one bit in each of up to `flips` written blocks (metadata not zero: data, backup or
/// parity) of the members in `rotting`, in their HH and VH areas.
async fn rot_some(a: &Array, rotting: &[usize], flips: usize, rng: &mut Xoshiro256PlusPlus) -> u64 {
    let g = a.sc.geometry().clone();
    let first = g.hh_lba(0);
    let span = g.member_blocks - first;
    let mut done = 0;
    for _ in 0..flips * 8 {
        if done == flips as u64 {
            break;
        }
        let mem = rotting[(rng.next_u64() % rotting.len() as u64) as usize];
        let lba = first + rng.next_u64() % span;
        if raw_block(a, mem, lba).await.md.iter().all(|&b| b == 0) {
            continue;
        }
        a.rots[mem].flip(lba, rng.next_u64()).await.unwrap();
        done += 1;
    }
    done
}

#[test]
fn the_reference_model_holds_with_rot_on_up_to_m_members() {
    const REACTORS: usize = 2;
    const PHASES: u64 = 6;
    for seed in seeds(1, 3) {
        for (k, m) in [(2, 1), (4, 2)] {
            let what = format!("scala {k}+{m} with rot, seed {seed} (FLASHRIG_SEED={seed})");
            let (res, _) = run(RuntimeKind::Sim, REACTORS, move || async move {
                let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed * 1000 + (k * 10 + m) as u64);
                let a = build(k, m, busy(k, m, REACTORS)).await;
                let n = k + m;
                let rot_count = 1 + (rng.next_u64() % m as u64) as usize;
                let mut rotting: Vec<usize> = (0..n).collect();
                for i in 0..n {
                    rotting.swap(i, i + (rng.next_u64() % (n - i) as u64) as usize);
                }
                rotting.truncate(rot_count);
                let dev = a.dev();
                let cap = dev.info().num_blocks;
                let model = Arc::new(Mutex::new(Model::for_device(dev.info(), seed)));
                let max_io = k as u64 * 2;
                // Enough to write the capacity about 1.5 times, so that GC runs.
                let ops = (1.5 * cap as f64 / ((max_io + 1) as f64 / 2.0) / 0.7) as u64;
                let mut flipped = 0;
                for phase in 0..PHASES {
                    let cfg = CheckConfig {
                        seed: seed * 100 + phase,
                        ops: ops / PHASES,
                        max_io_blocks: max_io,
                        span_blocks: Some(cap),
                        spread_over_reactors: true,
                        weights: OpWeights { read: 25, write: 65, trim: 3, flush: 7 },
                        ..CheckConfig::default()
                    };
                    run_ops(dev.clone(), model.clone(), &cfg)
                        .await
                        .map_err(|e| format!("phase {phase}, rotting {rotting:?}: {e}"))?;
                    flipped += rot_some(&a, &rotting, 12, &mut rng).await;
                }
                let rep = a.scrub().await;
                if rep.unrepairable > 0 {
                    return Err(format!("scrub found unrepairable blocks: {rep:?}"));
                }
                let second = a.scrub().await;
                if second.checksum_errors + second.redundancy_mismatches + second.repaired > 0 {
                    return Err(format!("a second scrub still found something: {second:?}"));
                }
                verify_all(&dev, &model).await.map_err(|e| format!("after the scrubs: {e}"))?;
                let c = snapshot_stack(a.sc.as_ref()).counters;
                Ok::<_, String>((c, flipped, rotting))
            });
            let (c, flipped, rotting) = res.unwrap_or_else(|e| panic!("{what}: {e}"));
            eprintln!(
                "{what}: {flipped} flips on members {rotting:?}; {} checksum errors, {} parity \
                 mismatches, {} healed, {} conversions, {} GC stripes",
                c["checksum_errors"],
                c["redundancy_mismatches"],
                c["healed_blocks"],
                c["conversions_host"],
                c["gc_stripes"]
            );
            assert!(flipped > 0, "{what}: no block was flipped");
            assert_eq!(c["unrepairable_blocks"], 0, "{what}: {c:?}");
            assert!(c["checksum_errors"] + c["redundancy_mismatches"] > 0, "{what}: {c:?}");
            assert!(c["healed_blocks"] > 0, "{what}: {c:?}");
            for name in ["conversions_host", "gc_stripes"] {
                assert!(c[name] > 0, "{what}: {name} = 0; {c:?}");
            }
        }
    }
}
