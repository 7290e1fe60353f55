//! `scala_open` and `twophase_open`: what the two-phase engines read back from their members
//! when they open an array (superblock, checkpoints, delta log and trim journal of `scala`;
//! the per-block metadata records of both, which recovery scans).
//!
//! Method: once per process, an array is made on RAM members (16 or 24 metadata bytes per
//! block) on the simulated runtime and driven by a short seeded run (writes, overwrites,
//! trims, flushes, conversions), and the members' contents are kept as *images*: one taken
//! while the array is open (as a crash leaves it) and, for `scala`, one after a clean close.
//! An input is a list of patches to one image; the patched members are written to fresh RAM
//! disks and the engine's public `open` recovers from them, then every user block is read, a
//! few are written and flushed. The rule: any input gives `Ok` or a typed error
//! (`DevError`), never a panic, and recovery finishes within [`VIRTUAL_LIMIT`] of virtual
//! time (a deadlock or a livelock of recovery is reported as a hang). An input without
//! patches is the image as made, which must open and read back without an error.
//!
//! Input layout: byte 0 chooses the image; then records of
//! `op, member, lba (u16 LE), offset (u16 LE), len, payload`, where `op` bits 0..1 are
//! 0 overwrite with `len` payload bytes, 1 XOR with them, 2 fill `len` bytes with one payload
//! byte, 3 copy a whole block (data and metadata) from the block named by two payload bytes;
//! bit 2 targets the block's metadata instead of its data; bit 3 takes `lba` modulo the
//! member's size instead of as an index into the blocks the image holds. A record cut short
//! ends the list.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use flashrig_blockdev::{BlockDevice, DevRef, DevResult, WriteHints};
use flashrig_devices::RamDevice;
use flashrig_engines::scala::{Scala, ScalaOptions};
use flashrig_engines::twophase::{Twophase, TwophaseOptions};
use flashrig_runtime::{run, sleep_ns, RuntimeKind};
use futures_util::future::{select, Either};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Virtual time an open (with the reads and writes after it) may take before it counts as a
/// hang: recovery of these small arrays takes milliseconds of virtual time.
pub const VIRTUAL_LIMIT: u64 = 600_000_000_000;

const BLOCK: usize = 4096;
const MEMBER_BLOCKS: u64 = 256;

/// The blocks of one member that hold anything: LBA -> (data, metadata).
type Blocks = BTreeMap<u64, (Vec<u8>, Vec<u8>)>;

/// Members' contents, as an engine left them.
#[derive(Clone)]
pub struct Image {
    pub what: &'static str,
    pub md_bytes: usize,
    pub members: Vec<Blocks>,
}

impl Image {
    /// The image with `patches` (the input after its selector byte) applied.
    fn patched(&self, mut patches: &[u8]) -> Vec<Blocks> {
        let mut members = self.members.clone();
        let listed: Vec<Vec<u64>> =
            self.members.iter().map(|m| m.keys().copied().collect()).collect();
        let n = members.len();
        let md = self.md_bytes;
        let pick = |member: usize, raw: bool, v: u16| -> u64 {
            let list = &listed[member];
            if raw || list.is_empty() {
                v as u64 % MEMBER_BLOCKS
            } else {
                list[v as usize % list.len()]
            }
        };
        while let [op, member, l0, l1, o0, o1, len, rest @ ..] = patches {
            let member = *member as usize % n;
            let raw = op & 8 != 0;
            let lba = pick(member, raw, u16::from_le_bytes([*l0, *l1]));
            let off = u16::from_le_bytes([*o0, *o1]) as usize;
            let len = *len as usize;
            let zero = || (vec![0u8; BLOCK], vec![0u8; md]);
            match op & 3 {
                3 => {
                    let [s0, s1, tail @ ..] = rest else { break };
                    let src = pick(member, raw, u16::from_le_bytes([*s0, *s1]));
                    let block = members[member].get(&src).cloned().unwrap_or_else(zero);
                    members[member].insert(lba, block);
                    patches = tail;
                }
                kind => {
                    let need = if kind == 2 { 1 } else { len };
                    if rest.len() < need {
                        break;
                    }
                    let (payload, tail) = rest.split_at(need);
                    let block = members[member].entry(lba).or_insert_with(zero);
                    let region: &mut [u8] = if op & 4 != 0 { &mut block.1 } else { &mut block.0 };
                    let off = off % region.len();
                    let end = (off + len).min(region.len());
                    for (i, b) in region[off..end].iter_mut().enumerate() {
                        match kind {
                            0 => *b = payload[i],
                            1 => *b ^= payload[i],
                            _ => *b = payload[0],
                        }
                    }
                    patches = tail;
                }
            }
        }
        members
    }
}

/// Fresh RAM members holding `blocks`.
async fn materialise(blocks: &[Blocks], md_bytes: usize) -> Vec<DevRef> {
    let mut devs = Vec::new();
    for (i, m) in blocks.iter().enumerate() {
        let dev = RamDevice::new(&format!("m{i}"), BLOCK as u32, MEMBER_BLOCKS, md_bytes as u32, 0);
        for (&lba, (data, md)) in m {
            dev.write(lba, data, Some(md), WriteHints::default())
                .await
                .expect("a RAM member takes a block in range");
        }
        devs.push(Arc::new(dev) as DevRef);
    }
    devs
}

/// Reads the members' non-zero blocks back into an image.
async fn snapshot(what: &'static str, devs: &[Arc<RamDevice>], md_bytes: usize) -> Image {
    let mut members = Vec::new();
    for d in devs {
        let mut blocks = Blocks::new();
        for lba in 0..MEMBER_BLOCKS {
            let (mut data, mut md) = (vec![0u8; BLOCK], vec![0u8; md_bytes]);
            d.read(lba, &mut data, Some(&mut md)).await.expect("a RAM member reads");
            if data.iter().chain(&md).any(|&b| b != 0) {
                blocks.insert(lba, (data, md));
            }
        }
        members.push(blocks);
    }
    Image { what, md_bytes, members }
}

/// Runs `f` on the simulated runtime; a result not there within [`VIRTUAL_LIMIT`] is a hang.
pub(crate) fn within_limit<F, Fut>(what: &str, f: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let (finished, _) = run(RuntimeKind::Sim, 1, move || async move {
        let work = Box::pin(f());
        let limit = Box::pin(sleep_ns(VIRTUAL_LIMIT));
        matches!(select(work, limit).await, Either::Left(_))
    });
    assert!(finished, "{what}: open and the reads after it did not finish within {VIRTUAL_LIMIT} ns of virtual time (a hang)");
}

/// What is done with an array once it opened: every user block read, a few blocks written
/// and flushed. Errors are allowed (the members may hold anything); `strict` (an image
/// without patches) allows none.
pub(crate) async fn exercise(dev: &dyn BlockDevice, strict: bool, what: &str) {
    let info = dev.info().clone();
    let bs = info.block_size as usize;
    let check = |r: DevResult<()>, op: &str| {
        if let Err(e) = r {
            assert!(!strict, "{what}: {op} of the unmodified image failed: {e}");
        }
    };
    let step = 16u64;
    let mut buf = vec![0u8; step as usize * bs];
    let mut lba = 0;
    while lba < info.num_blocks {
        let n = step.min(info.num_blocks - lba);
        let r = dev.read(lba, &mut buf[..n as usize * bs], None).await;
        check(r, "a read");
        lba += n;
    }
    let data = vec![0x5au8; 4 * bs];
    for at in [0, info.num_blocks / 2, info.num_blocks.saturating_sub(4)] {
        check(dev.write(at, &data, None, WriteHints::default()).await, "a write");
    }
    check(dev.flush().await, "a flush");
}

// ---- scala ----

fn scala_options() -> ScalaOptions {
    ScalaOptions {
        chunk_blocks: 2,
        transient_blocks_per_member: Some(3 * 2 * 2),
        window_heroes: Some(16),
        idle_ns: 200_000,
        ..ScalaOptions::new(2, 1)
    }
}

/// A seeded run of writes (some overwriting, some several blocks long), trims and flushes.
pub(crate) async fn drive(dev: &dyn BlockDevice, seed: u64, ops: usize) {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let cap = dev.info().num_blocks;
    let bs = dev.info().block_size as usize;
    for i in 0..ops {
        let lba = rng.next_u64() % cap;
        let n = (1 + rng.next_u64() % 6).min(cap - lba);
        match rng.next_u32() % 10 {
            0 => dev.trim(lba, n).await.expect("a trim"),
            1 => dev.flush().await.expect("a flush"),
            _ => {
                let data: Vec<u8> =
                    (0..n as usize * bs).map(|b| (b as u64 ^ i as u64 ^ lba) as u8).collect();
                dev.write(lba, &data, None, WriteHints::default()).await.expect("a write");
            }
        }
    }
}

fn rams(n: usize, md_bytes: usize) -> Vec<Arc<RamDevice>> {
    (0..n)
        .map(|i| {
            Arc::new(RamDevice::new(
                &format!("m{i}"),
                BLOCK as u32,
                MEMBER_BLOCKS,
                md_bytes as u32,
                0,
            ))
        })
        .collect()
}

fn refs(devs: &[Arc<RamDevice>]) -> Vec<DevRef> {
    devs.iter().map(|d| d.clone() as DevRef).collect()
}

/// The `scala` images: 2 + 1 with 2-block chunks, taken open after a run that converted
/// stripes (and trimmed, and wrote the trim journal), and after a clean close.
pub fn scala_images() -> &'static [Image] {
    static IMAGES: OnceLock<Vec<Image>> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let (images, _) = run(RuntimeKind::Sim, 1, || async {
            let devs = rams(3, 16);
            let sc =
                Scala::create("sc", refs(&devs), scala_options()).await.expect("scala creates");
            drive(&sc, 1, 300).await;
            sc.flush().await.expect("a flush");
            sc.convert_all().await.expect("conversion");
            sc.checkpoint().await.expect("a checkpoint");
            drive(&sc, 2, 150).await;
            sc.flush().await.expect("a flush");
            let open = snapshot("scala, open (as a crash leaves it)", &devs, 16).await;
            sc.close().await.expect("a clean close");
            let closed = snapshot("scala, after a clean close", &devs, 16).await;
            vec![open, closed]
        });
        images
    })
}

/// The target `scala_open`.
pub fn scala_open(data: &[u8]) {
    let Some((&sel, patches)) = data.split_first() else {
        return;
    };
    let images = scala_images();
    let image = &images[sel as usize % images.len()];
    let blocks = image.patched(patches);
    let (strict, md, what) = (patches.is_empty(), image.md_bytes, image.what);
    crate::known::guard(|| {
        within_limit(what, move || async move {
            let devs = materialise(&blocks, md).await;
            match Scala::open("sc", devs, scala_options()).await {
                Ok(sc) => {
                    exercise(&sc, strict, what).await;
                    let r = sc.close().await;
                    assert!(!strict || r.is_ok(), "{what}: close failed: {r:?}");
                }
                Err(e) => assert!(!strict, "{what}: the unmodified image does not open: {e}"),
            }
        })
    });
}

// ---- twophase ----

fn twophase_options() -> TwophaseOptions {
    TwophaseOptions {
        chunk_blocks: 2,
        watermark_fraction: 0.1,
        low_watermark_fraction: 0.05,
        ..TwophaseOptions::new(2, 1)
    }
}

/// The `twophase` images: 2 + 1 with 2-block chunks over members with 16 metadata bytes
/// (atomic with the data) and with 24 (a checksum of the data too), each taken after a run
/// that converted rows and logged trims.
pub fn twophase_images() -> &'static [Image] {
    static IMAGES: OnceLock<Vec<Image>> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let (images, _) = run(RuntimeKind::Sim, 1, || async {
            let mut images = Vec::new();
            for (md, what) in
                [(16, "twophase, 16 metadata bytes"), (24, "twophase, 24 metadata bytes")]
            {
                let devs = rams(3, md);
                let tp = Twophase::create("tp", refs(&devs), twophase_options())
                    .await
                    .expect("twophase creates");
                drive(&tp, 3, 400).await;
                tp.flush().await.expect("a flush");
                images.push(snapshot(what, &devs, md).await);
            }
            images
        });
        images
    })
}

/// The target `twophase_open`.
pub fn twophase_open(data: &[u8]) {
    let Some((&sel, patches)) = data.split_first() else {
        return;
    };
    let images = twophase_images();
    let image = &images[sel as usize % images.len()];
    let blocks = image.patched(patches);
    let (strict, md, what) = (patches.is_empty(), image.md_bytes, image.what);
    crate::known::guard(|| {
        within_limit(what, move || async move {
            let devs = materialise(&blocks, md).await;
            match Twophase::open("tp", devs, twophase_options()).await {
                Ok(tp) => exercise(&tp, strict, what).await,
                Err(e) => assert!(!strict, "{what}: the unmodified image does not open: {e}"),
            }
        })
    });
}
