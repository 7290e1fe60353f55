//! Goal: ScalaAFA's conversion vendor command (scalaafa-atc24.txt §5.3, §5.4) does what
//! docs/ssd.md says: the parity it writes at `dst` is, bit for bit, parity row `index` of the
//! `k` source chunks, both over the data and over each block's metadata; the sources read back
//! as zeros and are garbage to the FTL afterwards; the counters count it; a plain SSD refuses
//! it and a malformed command is refused with a message naming the problem; the parity is
//! durable like any write (survives a power cycle after a flush); sources still in the write
//! buffer are converted too; the command costs at least the parity engine's time, overlaps
//! its reads, engine and parity programs as docs/ssd.md composes them, and several
//! conversions in flight share the one engine and the NAND.
//!
//! Method: on the simulated runtime, seeded random blocks and metadata are written as the
//! source chunks, some blocks left unwritten (they read as zeros), and `dst` is first filled
//! with garbage. The expected parity is computed here, independently of flashrig-erasure:
//! a shift-and-add GF(2^8) multiply with the polynomial 0x11D and the coefficient (2^r)^j of
//! data chunk j in row r. Cases cover k in {2, 4, 6} and rows {0, 1, 2}, on 4 KiB mapping
//! units with aligned chunks and on 64 KiB units with chunks that start and end inside units.
//! Timing is checked on the virtual clock against a composition worked out by hand from the
//! configuration (`scalaafa-femu`) and against bounds derived from it.
//! Failures print the seed; `FLASHRIG_SEED=<n>` reruns with that seed.

use std::collections::BTreeMap;
use std::sync::Arc;

use flashrig_blockdev::{
    ComputeCommand, ConvertCommand, DevError, DevRef, ParityType, VendorCommand, VendorReply,
    WriteHints,
};
use flashrig_runtime::{now_ns, run, sleep_ns, spawn, RuntimeKind};
use flashrig_ssd::{tag_of, PayloadMode, Ssd, SsdConfig};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

// ---- an independent GF(2^8) (polynomial 0x11D) and parity -----------------------------------

fn gf_mul(mut a: u8, mut b: u8) -> u8 {
    let mut p = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            p ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= 0x1D; // x^8 = x^4 + x^3 + x^2 + 1
        }
        b >>= 1;
    }
    p
}

fn gf_pow(a: u8, e: usize) -> u8 {
    (0..e).fold(1, |acc, _| gf_mul(acc, a))
}

/// Coefficient of data chunk `j` in parity row `r`: (2^r)^j.
fn coefficient(r: usize, j: usize) -> u8 {
    gf_pow(gf_pow(2, r), j)
}

/// Parity row `r` of equal-length chunks.
fn host_parity(r: usize, chunks: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![0u8; chunks[0].len()];
    for (j, c) in chunks.iter().enumerate() {
        let coef = coefficient(r, j);
        for (o, &x) in out.iter_mut().zip(c) {
            *o ^= gf_mul(coef, x);
        }
    }
    out
}

#[test]
fn the_test_field_is_gf256_with_polynomial_0x11d() {
    assert_eq!(gf_mul(2, 0x80), 0x1D);
    assert_eq!(gf_pow(2, 255), 1, "2 generates the multiplicative group");
    assert!((1..255).all(|e| gf_pow(2, e) != 1));
    assert_eq!(coefficient(0, 5), 1);
    assert_eq!(coefficient(1, 3), 8);
    assert_eq!(coefficient(2, 2), 16);
    // RAID-6 Q of (1, 1) is 1 ^ 2.
    assert_eq!(host_parity(1, &[vec![1], vec![1]]), vec![3]);
}

// ---- helpers -----------------------------------------------------------------------------

fn base_seed() -> u64 {
    std::env::var("FLASHRIG_SEED").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(1)
}

fn convert_cfg(preset: &str) -> SsdConfig {
    let mut cfg = SsdConfig::preset(preset).unwrap();
    cfg.firmware.vendor_convert = true;
    cfg
}

fn convert(src: Vec<u64>, dst: u64, chunk_blocks: u32, index: u8) -> VendorCommand<'static> {
    let data_chunks = src.len() as u8;
    VendorCommand::Convert(ConvertCommand {
        src,
        dst,
        chunk_blocks,
        ptype: ParityType::Row { index, data_chunks },
    })
}

fn counters(dev: &DevRef) -> BTreeMap<String, u64> {
    dev.metrics().unwrap().snapshot().counters
}

/// A stripe's source chunks as written: each chunk's data and metadata (zeros where a block was
/// left unwritten), and the number of write commands used.
struct Sources {
    data: Vec<Vec<u8>>,
    md: Vec<Vec<u8>>,
    writes: u64,
}

/// Writes random blocks with random metadata into the chunks at `src`, leaving about a quarter
/// of the blocks (and at least one per chunk) unwritten.
async fn write_sources(
    dev: &DevRef,
    rng: &mut Xoshiro256PlusPlus,
    src: &[u64],
    chunk_blocks: u32,
) -> Sources {
    let bs = dev.info().block_size as usize;
    let mdb = dev.info().md_bytes_per_block as usize;
    let n = chunk_blocks as usize;
    let mut s = Sources { data: Vec::new(), md: Vec::new(), writes: 0 };
    for (j, &lba) in src.iter().enumerate() {
        let mut data = vec![0u8; n * bs];
        let mut md = vec![0u8; n * mdb];
        for i in 0..n {
            if rng.next_u64().is_multiple_of(4) || i == j % n {
                continue; // unwritten: reads as zeros with zeroed metadata
            }
            let d = &mut data[i * bs..(i + 1) * bs];
            let m = &mut md[i * mdb..(i + 1) * mdb];
            rng.fill_bytes(d);
            rng.fill_bytes(m);
            let m = (mdb > 0).then_some(&*m);
            let hints = WriteHints { transient: true, ..WriteHints::NONE };
            dev.write(lba + i as u64, d, m, hints).await.unwrap();
            s.writes += 1;
        }
        s.data.push(data);
        s.md.push(md);
    }
    s
}

/// Fills `n` blocks at `lba` with garbage (so the conversion must overwrite them).
async fn write_garbage(dev: &DevRef, rng: &mut Xoshiro256PlusPlus, lba: u64, n: u32) {
    let bs = dev.info().block_size as usize;
    let mdb = dev.info().md_bytes_per_block as usize;
    let mut d = vec![0u8; n as usize * bs];
    let mut m = vec![0u8; n as usize * mdb];
    rng.fill_bytes(&mut d);
    rng.fill_bytes(&mut m);
    dev.write(lba, &d, (mdb > 0).then_some(&m[..]), WriteHints::NONE).await.unwrap();
}

async fn read_chunk(dev: &DevRef, lba: u64, n: u32) -> (Vec<u8>, Vec<u8>) {
    let bs = dev.info().block_size as usize;
    let mdb = dev.info().md_bytes_per_block as usize;
    let mut d = vec![0u8; n as usize * bs];
    let mut m = vec![0u8; n as usize * mdb];
    dev.read(lba, &mut d, (mdb > 0).then_some(&mut m[..])).await.unwrap();
    (d, m)
}

/// Checks that `dst` holds parity row `r` of the sources (data and metadata) and that every
/// source chunk reads back as zeros.
async fn check_result(
    dev: &DevRef,
    s: &Sources,
    src: &[u64],
    dst: u64,
    n: u32,
    r: usize,
    what: &str,
) {
    let (d, m) = read_chunk(dev, dst, n).await;
    let want_d = host_parity(r, &s.data);
    let want_m = host_parity(r, &s.md);
    for (name, got, want) in [("data", &d, &want_d), ("metadata", &m, &want_m)] {
        if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
            panic!(
                "{what}: parity {name} differs first at byte {i}: got {}, want {}",
                got[i], want[i]
            );
        }
    }
    for (j, &lba) in src.iter().enumerate() {
        let (d, m) = read_chunk(dev, lba, n).await;
        assert!(d.iter().all(|&b| b == 0), "{what}: source chunk {j} data not zero after convert");
        assert!(m.iter().all(|&b| b == 0), "{what}: source chunk {j} md not zero after convert");
    }
}

/// Where the chunks go: `k` source chunks of `chunk_blocks` from `first`, `gap` blocks apart,
/// and the destination after them.
#[derive(Clone, Copy, Debug)]
struct Placement {
    preset: &'static str,
    /// Overrides of firmware.block_bytes and firmware.md_bytes.
    block_bytes: u32,
    md_bytes: u32,
    chunk_blocks: u32,
    first: u64,
    gap: u64,
}

impl Placement {
    fn src(&self, k: usize) -> Vec<u64> {
        (0..k as u64).map(|j| self.first + j * (self.chunk_blocks as u64 + self.gap)).collect()
    }
    fn dst(&self, k: usize) -> u64 {
        self.first + k as u64 * (self.chunk_blocks as u64 + self.gap) + 1
    }
}

const PLACEMENTS: [Placement; 3] = [
    // 4 KiB mapping units, 64 KiB chunks: every source unit is whole.
    Placement {
        preset: "tiny",
        block_bytes: 4096,
        md_bytes: 16,
        chunk_blocks: 16,
        first: 32,
        gap: 0,
    },
    // 64 KiB mapping units (16 blocks), 10-block chunks starting mid-unit: sources share
    // units with each other and with untouched blocks, so invalidation writes zeros.
    Placement {
        preset: "tiny-qlc",
        block_bytes: 4096,
        md_bytes: 16,
        chunk_blocks: 10,
        first: 21,
        gap: 3,
    },
    // 512-byte sectors (8 per unit) and no per-block metadata: the parity is data only.
    Placement { preset: "tiny", block_bytes: 512, md_bytes: 0, chunk_blocks: 20, first: 5, gap: 1 },
];

impl Placement {
    fn cfg(&self) -> SsdConfig {
        let mut cfg = convert_cfg(self.preset);
        cfg.firmware.block_bytes = self.block_bytes;
        cfg.firmware.md_bytes = self.md_bytes;
        cfg
    }
}

// ---- tests -------------------------------------------------------------------------------

#[test]
fn parity_matches_an_independent_computation() {
    let mut case = 0u64;
    for p in PLACEMENTS {
        for k in [2usize, 4, 6] {
            for r in [0usize, 1, 2] {
                case += 1;
                let seed = base_seed() * 1000 + case;
                let what = format!("seed {seed}, {p:?}, k {k}, row {r}");
                let cfg = p.cfg();
                sim(move || async move {
                    let ssd = Arc::new(Ssd::new("ssd", &cfg).unwrap());
                    let dev: DevRef = ssd.clone();
                    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
                    let (src, dst, n) = (p.src(k), p.dst(k), p.chunk_blocks);
                    let bs = cfg.firmware.block_bytes as u64;
                    write_garbage(&dev, &mut rng, dst, n).await;
                    let s = write_sources(&dev, &mut rng, &src, n).await;
                    dev.flush().await.unwrap();
                    let before = counters(&dev);
                    let reply = dev.vendor(convert(src.clone(), dst, n, r as u8)).await;
                    assert_eq!(reply, Ok(VendorReply::Done), "{what}");
                    let c = counters(&dev);
                    check_result(&dev, &s, &src, dst, n, r, &what).await;

                    let chunk = n as u64 * bs;
                    assert_eq!(c["convert_cmds"], 1, "{what}");
                    assert_eq!(c["convert_read_bytes"], k as u64 * chunk, "{what}");
                    assert_eq!(c["convert_parity_bytes"], chunk, "{what}");
                    let engine = (cfg.firmware.convert_engine_ns_per_kib
                        * (k as u64 * chunk) as f64
                        / 1024.0)
                        .round() as u64;
                    assert_eq!(c["convert_engine_busy_ns"], engine, "{what}");
                    // The conversion is no host read, write or trim.
                    for key in ["host_read_cmds", "host_write_cmds", "host_trims"] {
                        assert_eq!(c[key], before[key], "{what}: {key}");
                    }
                    assert_eq!(c["host_write_cmds"], s.writes + 1, "{what}");
                    // Whole source units are unmapped: GC sees their slots as garbage.
                    let bpi = (cfg.firmware.iu_bytes / cfg.firmware.block_bytes) as u64;
                    for &lba in &src {
                        for lpn in lba.div_ceil(bpi)..(lba + n as u64) / bpi {
                            let mapped = ssd.with_controller(|ctl| ctl.ftl.is_mapped(lpn as u32));
                            assert!(!mapped, "{what}: source unit {lpn} still mapped");
                        }
                    }
                });
            }
        }
    }
}

#[test]
fn sources_still_in_the_write_buffer_are_converted() {
    // tiny has a 256 KiB write buffer; 4 chunks of 8 blocks and the parity fit in it, so the
    // sources are never programmed: the conversion reads them from DRAM.
    let seed = base_seed() * 1000 + 101;
    let cfg = convert_cfg("tiny");
    sim(move || async move {
        let ssd = Arc::new(Ssd::new("ssd", &cfg).unwrap());
        let dev: DevRef = ssd.clone();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let (src, dst, n) = (vec![100, 108, 116, 124], 200, 8);
        let s = write_sources(&dev, &mut rng, &src, n).await;
        assert!(ssd.with_controller(|c| c.buffered_units()) > 0);
        let before = counters(&dev);
        assert_eq!(before["nand_page_programs_tlc"], 0, "seed {seed}: nothing programmed yet");
        dev.vendor(convert(src.clone(), dst, n, 1)).await.unwrap();
        let c = counters(&dev);
        assert!(
            c["buffer_read_hits"] > before["buffer_read_hits"],
            "seed {seed}: the conversion read its sources from the buffer"
        );
        assert_eq!(c["nand_read_bytes"], 0, "seed {seed}: no NAND read");
        check_result(&dev, &s, &src, dst, n, 1, &format!("seed {seed}, from buffer")).await;
        // Durable after a flush like any write, although its sources never reached NAND.
        dev.flush().await.unwrap();
        ssd.power_cycle();
        check_result(&dev, &s, &src, dst, n, 1, &format!("seed {seed}, after power cycle")).await;
    });
}

#[test]
fn parity_survives_a_power_cycle_after_a_flush() {
    let seed = base_seed() * 1000 + 102;
    for p in PLACEMENTS {
        let cfg = p.cfg();
        sim(move || async move {
            let ssd = Arc::new(Ssd::new("ssd", &cfg).unwrap());
            let dev: DevRef = ssd.clone();
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            let (k, n) = (6, p.chunk_blocks);
            let (src, dst) = (p.src(k), p.dst(k));
            write_garbage(&dev, &mut rng, dst, n).await;
            let s = write_sources(&dev, &mut rng, &src, n).await;
            dev.flush().await.unwrap();
            dev.vendor(convert(src.clone(), dst, n, 0)).await.unwrap();
            dev.flush().await.unwrap();
            let report = ssd.power_cycle();
            assert!(!report.steps.is_empty());
            let what = format!("seed {seed}, {p:?}, after power cycle");
            check_result(&dev, &s, &src, dst, n, 0, &what).await;
        });
    }
}

#[test]
fn tag_mode_converts_what_the_reads_return() {
    // Payload `tag` reads a block as its 8-byte fingerprint and zeros; the engine encodes that,
    // and the parity block written is stored (and read back) as its own fingerprint. The
    // metadata is kept in `tag`, so its parity is exact.
    let seed = base_seed() * 1000 + 103;
    let mut cfg = convert_cfg("tiny");
    cfg.payload = PayloadMode::Tag;
    sim(move || async move {
        let dev: DevRef = Arc::new(Ssd::new("ssd", &cfg).unwrap());
        let bs = dev.info().block_size as usize;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let (src, dst, n, r) = (vec![0, 16, 32, 48], 64, 16u32, 1usize);
        let s = write_sources(&dev, &mut rng, &src, n).await;
        dev.flush().await.unwrap();
        dev.vendor(convert(src.clone(), dst, n, r as u8)).await.unwrap();
        let as_read: Vec<Vec<u8>> = s
            .data
            .iter()
            .map(|c| {
                let mut v = vec![0u8; c.len()];
                for (o, b) in v.chunks_exact_mut(bs).zip(c.chunks_exact(bs)) {
                    o[..8].copy_from_slice(&tag_of(b).to_le_bytes());
                }
                v
            })
            .collect();
        let parity = host_parity(r, &as_read);
        let (d, m) = read_chunk(&dev, dst, n).await;
        for (i, (got, p)) in d.chunks_exact(bs).zip(parity.chunks_exact(bs)).enumerate() {
            let want = tag_of(p).to_le_bytes();
            assert_eq!(&got[..8], &want, "seed {seed}: block {i} fingerprint");
            assert!(got[8..].iter().all(|&b| b == 0));
        }
        assert_eq!(m, host_parity(r, &s.md), "seed {seed}: metadata parity");
    });
}

#[test]
fn a_plain_ssd_answers_unsupported() {
    sim(|| async {
        let plain = SsdConfig::preset("tiny").unwrap();
        assert!(!plain.firmware.vendor_convert);
        let dev: DevRef = Arc::new(Ssd::new("ssd", &plain).unwrap());
        assert!(!dev.info().caps.convert);
        let r = dev.vendor(convert(vec![0, 16], 32, 16, 0)).await;
        assert_eq!(r, Err(DevError::Unsupported { command: "convert" }));
        assert_eq!(counters(&dev)["convert_cmds"], 0);

        let dev: DevRef = Arc::new(Ssd::new("ssd", &convert_cfg("tiny")).unwrap());
        assert!(dev.info().caps.convert);
        assert!(!dev.info().caps.compute);
        let compute = ComputeCommand { function: "sum", lba: 0, num_blocks: 1, args: &[] };
        let r = dev.vendor(VendorCommand::Compute(compute)).await;
        assert_eq!(r, Err(DevError::Unsupported { command: "compute" }));
    });
}

#[test]
fn invalid_commands_name_the_problem() {
    sim(|| async {
        let dev: DevRef = Arc::new(Ssd::new("ssd", &convert_cfg("tiny")).unwrap());
        let blocks = dev.info().num_blocks;
        let row = |index, data_chunks| ParityType::Row { index, data_chunks };
        let cmd = |src: Vec<u64>, dst, chunk_blocks, ptype| ConvertCommand {
            src,
            dst,
            chunk_blocks,
            ptype,
        };
        let outside_src =
            format!("source chunk 1 (blocks {}..{}) is outside", blocks - 8, blocks + 8);
        let outside_dst = format!("destination (blocks {blocks}..{}) is outside", blocks + 16);
        let cases: Vec<(ConvertCommand, &str)> = vec![
            (cmd(vec![], 32, 16, row(0, 0)), "data_chunks is 0"),
            (
                cmd(vec![0, 16, 48], 32, 16, row(0, 2)),
                "3 source chunks given, but data_chunks (Num) = 2",
            ),
            (cmd(vec![0, 16], 32, 16, row(4, 2)), "parity row (Ptype) 4"),
            (
                cmd((0..22).map(|j| j * 16).collect(), 1000, 16, row(3, 22)),
                "parity row (Ptype) 3 of a code with 22 data chunks",
            ),
            (cmd(vec![0, 16], 32, 0, row(0, 2)), "chunk_blocks (ChunkSize) is 0"),
            (cmd(vec![0, blocks - 8], 32, 16, row(0, 2)), &outside_src),
            (cmd(vec![0, 16], blocks, 16, row(0, 2)), &outside_dst),
            (
                cmd(vec![0, 16], 24, 16, row(0, 2)),
                "destination (blocks 24..40) overlaps source chunk 1 (blocks 16..32)",
            ),
            (
                cmd(vec![0, 8], 32, 16, row(0, 2)),
                "source chunks 0 (blocks 0..16) and 1 (blocks 8..24) overlap",
            ),
        ];
        for (c, want) in cases {
            let shown = format!("{c:?}");
            match dev.vendor(VendorCommand::Convert(c)).await {
                Err(DevError::Invalid(msg)) => {
                    assert!(msg.contains(want), "{shown}: message {msg:?} should name {want:?}")
                }
                other => panic!("{shown}: expected Invalid, got {other:?}"),
            }
        }
        let c = counters(&dev);
        assert_eq!(c["convert_cmds"], 0);
        assert_eq!(c["nand_read_bytes"] + c["nand_program_bytes"], 0, "refused before any I/O");
    });
}

/// The conversion's timing composition on a fresh `scalaafa-femu` device, worked out here
/// from the configuration alone (docs/ssd.md, "Conversion command"): the `k` source chunks of
/// one vertical hero are line pages 0.. of the open SLC line (page `p` on channel
/// `p % channels` and plane `p % planes`), the parity follows them in the same line (the
/// preset writes through, no buffer), every channel and plane serves its operations in the
/// order they are issued, the reads are issued in stripe-row order, and each 4 KiB parity unit
/// is computed when its row is in DRAM and the engine is free, then programmed at once.
/// Returns (completion, last source in DRAM, engine done, the phases run one after another),
/// in ns from the command's start.
fn femu_conversion_by_hand(cfg: &SsdConfig, k: u64) -> (u64, u64, u64, u64) {
    let nand = &cfg.nand;
    let g = &cfg.geometry;
    let (channels, planes) = (g.channels as u64, g.planes() as u64);
    let n = 16u64; // 64 KiB chunks of 4 KiB pages, one mapping unit per page
    let xfer = (g.page_bytes as u64 * (1e6 / nand.channel_mb_per_s).round() as u64).div_ceil(1000);
    let unit_kib = (k * g.page_bytes as u64) as f64 / 1024.0;
    let per_kib = cfg.firmware.convert_engine_ns_per_kib;
    let engine_to = |units: u64| (per_kib * unit_kib * units as f64).round() as u64;
    let start = cfg.firmware.command_ns;
    let mut channel = vec![start; channels as usize];
    let mut plane = vec![start; planes as usize];
    // Reads, row by row: unit u of chunk j is page j * n + u.
    let mut ready = vec![start; n as usize];
    for u in 0..n {
        for j in 0..k {
            let page = j * n + u;
            let (c, p) = ((page % channels) as usize, (page % planes) as usize);
            let sensed = plane[p].max(start) + nand.slc_read_ns;
            plane[p] = sensed;
            channel[c] = channel[c].max(sensed) + xfer;
            ready[u as usize] = ready[u as usize].max(channel[c]);
        }
    }
    // The engine, unit by unit, then each unit's program (page k * n + u of the line).
    let (mut engine, mut done) = (0u64, 0u64);
    for u in 0..n {
        engine = engine.max(ready[u as usize]) + engine_to(u + 1) - engine_to(u);
        let page = k * n + u;
        let (c, p) = ((page % channels) as usize, (page % planes) as usize);
        channel[c] = channel[c].max(engine) + xfer;
        plane[p] = plane[p].max(channel[c]) + nand.slc_program_ns;
        done = done.max(plane[p]);
    }
    let in_dram = *ready.iter().max().unwrap();
    // The serial composition this replaced: all reads, then the whole engine, then the program.
    let serial = in_dram + engine_to(n) + n.div_ceil(channels) * xfer + nand.slc_program_ns;
    (done, in_dram, engine, serial)
}

/// What a 6 x 64 KiB (and a 4 x 64 KiB) conversion costs on the scalaafa-femu preset: exactly
/// the composition worked out by hand above, at least the engine's 20 us (§6.1), and less than
/// the same phases run one after another. §6.1 quotes 103 us for "the conversion of a stripe";
/// docs/ssd.md compares.
#[test]
fn a_6_by_64k_conversion_on_scalaafa_femu_overlaps_its_phases() {
    for k in [6u64, 4] {
        let cfg = SsdConfig::preset("scalaafa-femu").unwrap();
        assert!(cfg.firmware.vendor_convert);
        let (want, in_dram, engine_done, serial) = femu_conversion_by_hand(&cfg, k);
        let elapsed = sim(move || async move {
            let dev: DevRef = Arc::new(Ssd::new("ssd", &cfg).unwrap());
            let n = 16u32; // 64 KiB chunks of 4 KiB blocks
            let bs = dev.info().block_size as usize;
            // The backup copies as ScalaAFA writes them: one vertical hero of k contiguous
            // chunks.
            let chunk = vec![0xA5u8; n as usize * bs];
            for j in 0..k {
                let hints = WriteHints { transient: true, ..WriteHints::NONE };
                dev.write(j * n as u64, &chunk, None, hints).await.unwrap();
            }
            dev.flush().await.unwrap();
            sleep_ns(10_000_000).await; // let every plane and channel go idle
            let src: Vec<u64> = (0..k).map(|j| j * n as u64).collect();
            let t0 = now_ns();
            dev.vendor(convert(src, 4096, n, 0)).await.unwrap();
            now_ns() - t0
        });
        eprintln!(
            "scalaafa-femu {k} x 64 KiB conversion: {:.1} us (paper §6.1: 103 us for a stripe); \
             last source in DRAM at {:.1} us, engine done at {:.1} us, parity programmed at \
             {:.1} us; the phases one after another: {:.1} us",
            elapsed as f64 / 1000.0,
            in_dram as f64 / 1000.0,
            engine_done as f64 / 1000.0,
            want as f64 / 1000.0,
            serial as f64 / 1000.0
        );
        let engine =
            (SsdConfig::preset("scalaafa-femu").unwrap().firmware.convert_engine_ns_per_kib
                * (k * 64) as f64)
                .round() as u64;
        assert!(elapsed >= engine, "the engine alone takes {engine} ns, got {elapsed} ns");
        assert!(elapsed < serial, "overlap saves time: {elapsed} ns vs {serial} ns serial");
        assert_eq!(elapsed, want, "{k} x 64 KiB: the composition docs/ssd.md describes");
    }
}

/// Several conversions in flight on one SSD at once (as an engine issuing many does) compose
/// on the shared timelines: every parity is exact, the engine's time is the sum of theirs and
/// it is one resource (the last completes no earlier than the engine could have done all of
/// them after the first source arrived), and running them together takes less time than one
/// after another.
#[test]
fn concurrent_conversions_share_the_engine_and_the_nand() {
    for preset in ["tiny", "scalaafa-femu"] {
        let seed = base_seed() * 1000 + 104;
        let mut cfg = convert_cfg(preset);
        cfg.payload = PayloadMode::Full;
        // tiny's write buffer would absorb the parity; write through so programs compose too.
        cfg.firmware.buffer_bytes = 0;
        let (k, n, stripes) = (4usize, 16u32, 6u64);
        let what = format!("seed {seed}, {preset}");
        let run_all = |together: bool| {
            let cfg = cfg.clone();
            let what = what.clone();
            sim(move || async move {
                let dev: DevRef = Arc::new(Ssd::new("ssd", &cfg).unwrap());
                let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
                let stripe_blocks = (k as u64 + 1) * n as u64;
                let mut written = Vec::new();
                for s in 0..stripes {
                    let src: Vec<u64> =
                        (0..k as u64).map(|j| s * stripe_blocks + j * n as u64).collect();
                    written.push((write_sources(&dev, &mut rng, &src, n).await, src));
                }
                dev.flush().await.unwrap();
                sleep_ns(50_000_000).await;
                let t0 = now_ns();
                let mut tasks = Vec::new();
                for (s, (_, src)) in written.iter().enumerate() {
                    let dst = s as u64 * stripe_blocks + k as u64 * n as u64;
                    let (dev, src) = (dev.clone(), src.clone());
                    let task = spawn(async move {
                        dev.vendor(convert(src, dst, n, 1)).await.unwrap();
                        now_ns()
                    });
                    if together {
                        tasks.push(task);
                    } else {
                        task.await;
                    }
                }
                for t in tasks {
                    t.await;
                }
                let elapsed = now_ns() - t0;
                for (s, (sources, src)) in written.iter().enumerate() {
                    let dst = s as u64 * stripe_blocks + k as u64 * n as u64;
                    check_result(&dev, sources, src, dst, n, 1, &what).await;
                }
                (elapsed, counters(&dev)["convert_engine_busy_ns"])
            })
        };
        let (together, busy) = run_all(true);
        let (one_by_one, busy_serial) = run_all(false);
        let one = busy / stripes;
        assert_eq!(busy, busy_serial, "{what}");
        assert_eq!(one * stripes, busy, "{what}: every conversion costs the engine alike");
        assert!(together >= busy, "{what}: {together} ns for {busy} ns of engine work");
        assert!(
            together < one_by_one,
            "{what}: together {together} ns, one by one {one_by_one} ns"
        );
        eprintln!(
            "{what}: {stripes} conversions together {together} ns, one by one {one_by_one} ns"
        );
    }
}

#[test]
fn conversions_queue_on_the_one_engine() {
    // Sources in the write buffer and a buffered parity write cost nothing but the engine, so
    // two conversions submitted together complete one engine time apart.
    let mut cfg = convert_cfg("tiny");
    cfg.firmware.command_ns = 0;
    cfg.firmware.convert_engine_ns_per_kib = 1000.0;
    let (ends, t0) = sim(move || async move {
        let dev: DevRef = Arc::new(Ssd::new("ssd", &cfg).unwrap());
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(base_seed());
        let n = 4;
        write_sources(&dev, &mut rng, &[0, 4, 8, 12], n).await;
        let t0 = now_ns();
        let mut tasks = Vec::new();
        for (src, dst) in [(vec![0, 4], 100), (vec![8, 12], 200)] {
            let dev = dev.clone();
            tasks.push(spawn(async move {
                dev.vendor(convert(src, dst, n, 0)).await.unwrap();
                now_ns()
            }));
        }
        let mut ends = Vec::new();
        for t in tasks {
            ends.push(t.await);
        }
        (ends, t0)
    });
    // 2 chunks x 4 blocks x 4 KiB = 32 KiB at 1000 ns/KiB.
    let engine = 32_000;
    assert_eq!(ends, vec![t0 + engine, t0 + 2 * engine]);
}

fn sim<T, F, Fut>(main: F) -> T
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + 'static,
    T: Send + 'static,
{
    run(RuntimeKind::Sim, 1, main).0
}

#[test]
fn timing_is_the_same_in_every_payload_mode() {
    let times: Vec<(u64, u64)> = [PayloadMode::Full, PayloadMode::Tag, PayloadMode::None]
        .into_iter()
        .map(|mode| {
            let mut cfg = convert_cfg("tiny");
            cfg.payload = mode;
            sim(move || async move {
                let dev: DevRef = Arc::new(Ssd::new("ssd", &cfg).unwrap());
                let mut rng = Xoshiro256PlusPlus::seed_from_u64(base_seed());
                let src = [0, 16, 32, 48];
                write_sources(&dev, &mut rng, &src, 16).await;
                dev.flush().await.unwrap();
                let t0 = now_ns();
                dev.vendor(convert(src.to_vec(), 64, 16, 1)).await.unwrap();
                let t1 = now_ns();
                dev.flush().await.unwrap();
                (t1 - t0, now_ns())
            })
        })
        .collect();
    assert!(times.iter().all(|&t| t == times[0]), "full, tag, none: {times:?}");
    assert!(times[0].0 > 0);
}
