//! Goal: a `csal` checkpoint never writes an L2P page that maps an LBA to a block written
//! after the checkpoint's flush of the members. Such a block is not durable until the
//! checkpoint's last flush, and checkpoint recovery trusts the L2P pages it loads: a power cut
//! in between left the page pointing at a block the cut lost, and the LBA read whatever that
//! place held before (zeros here; another LBA's older data in the swarm failure this test
//! reproduces, `flashrig swarm --seed 9002511 --runs 1 --stack csal:zns`, where the ZNS SSD's
//! slow flush gave a user write time to complete inside the checkpoint).
//!
//! Method: `Csal` over a fast member whose volatile write cache this test controls (`Cached`:
//! writes wait in the cache until a flush, and the power cut lands exactly the cached blocks
//! the test names) and a `Zoned` member behind `SlowFlush` (every flush takes 1 ms of virtual
//! time, as an SSD's does). On the simulated runtime, so the interleaving is exact: version A
//! of LBA 7 is written and flushed, a second chunk is opened and a first checkpoint moves the
//! checkpoint SID past A's chunk (so recovery does not replay A's record); a second
//! checkpoint starts, and while it waits for the zoned member's flush, version B of LBA 7 is
//! written (not flushed). The checkpoint's next flush of the fast member is the power cut,
//! with only the L2P pages landing. After recovery LBA 7 must read A or B, and every other
//! flushed LBA its data.

mod common;

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use common::{zoned_opts, BS, FAST_BLOCKS, MD, ZMEM_BLOCKS};
use flashrig_blockdev::{
    check_io, BlockDevice, DevError, DevRef, DevResult, DeviceInfo, WriteHints, ZoneCommand,
    ZoneReply,
};
use flashrig_check::{Store, Volatile};
use flashrig_engines::csal::RecoveryMode;
use flashrig_engines::{Csal, CsalOptions, Zoned};
use flashrig_runtime::{run, sleep_ns, spawn, RuntimeKind};
use parking_lot::Mutex;

const CHUNK: u64 = 32;
/// How long a flush of the zoned member takes.
const FLUSH_NS: u64 = 1_000_000;
const LBA: u64 = 7;
/// The LBAs written to fill the first chunk and open a second one.
const FILL: Range<u64> = 100..140;

fn opts() -> CsalOptions {
    CsalOptions {
        chunk_blocks: Some(CHUNK),
        // Every L2P page stays cached: no eviction writes a page behind the test's back.
        l2p_cache_pages: 8,
        tenants: 1,
        batch_blocks: 16,
        recovery: RecoveryMode::Checkpoint,
        ..CsalOptions::default()
    }
}

/// A cached block: its data and its metadata bytes.
type CachedBlock = (Vec<u8>, Vec<u8>);

/// A fast member with a write cache the test controls, over a durable `Volatile` that is only
/// ever written through (FUA), so its store is the media. Once armed, the next flush is the
/// power cut: the cached blocks in `lands` reach the media, the others are lost, and every
/// later command fails.
struct Cached {
    inner: Arc<Volatile>,
    cache: Mutex<BTreeMap<u64, CachedBlock>>,
    armed: Mutex<Option<Range<u64>>>,
    off: AtomicBool,
}

impl Cached {
    fn new(inner: Arc<Volatile>) -> Cached {
        Cached {
            inner,
            cache: Mutex::default(),
            armed: Mutex::default(),
            off: AtomicBool::default(),
        }
    }

    fn arm_cut(&self, lands: Range<u64>) {
        *self.armed.lock() = Some(lands);
    }

    fn alive(&self) -> DevResult<()> {
        if self.off.load(Ordering::SeqCst) {
            return Err(DevError::DeviceFailed { name: "cached".into() });
        }
        Ok(())
    }

    fn bs(&self) -> usize {
        self.inner.info().block_size as usize
    }

    fn mdb(&self) -> usize {
        self.inner.info().md_bytes_per_block as usize
    }

    async fn land(&self, lba: u64, data: &[u8], md: &[u8]) -> DevResult<()> {
        self.inner.write(lba, data, Some(md), WriteHints::FUA).await
    }
}

#[async_trait(?Send)]
impl BlockDevice for Cached {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn kind(&self) -> &'static str {
        "cached"
    }
    async fn read(&self, lba: u64, buf: &mut [u8], mut md: Option<&mut [u8]>) -> DevResult<()> {
        check_io(self.info(), lba, buf.len(), md.as_ref().map(|m| m.len()))?;
        self.alive()?;
        let (bs, mdb) = (self.bs(), self.mdb());
        for (i, b) in buf.chunks_exact_mut(bs).enumerate() {
            let l = lba + i as u64;
            let cached = self.cache.lock().get(&l).cloned();
            let m = md.as_deref_mut().map(|m| &mut m[i * mdb..(i + 1) * mdb]);
            match cached {
                Some((d, dm)) => {
                    b.copy_from_slice(&d);
                    if let Some(m) = m {
                        m.copy_from_slice(&dm);
                    }
                }
                None => self.inner.read(l, b, m).await?,
            }
        }
        Ok(())
    }
    async fn write(&self, lba: u64, d: &[u8], md: Option<&[u8]>, h: WriteHints) -> DevResult<()> {
        check_io(self.info(), lba, d.len(), md.map(|m| m.len()))?;
        self.alive()?;
        let (bs, mdb) = (self.bs(), self.mdb());
        for (i, b) in d.chunks_exact(bs).enumerate() {
            let l = lba + i as u64;
            let m = md.map_or_else(|| vec![0u8; mdb], |m| m[i * mdb..(i + 1) * mdb].to_vec());
            if h.fua {
                self.cache.lock().remove(&l);
                self.land(l, b, &m).await?;
            } else {
                self.cache.lock().insert(l, (b.to_vec(), m));
            }
        }
        Ok(())
    }
    async fn flush(&self) -> DevResult<()> {
        self.alive()?;
        let cut = self.armed.lock().take();
        let cache = std::mem::take(&mut *self.cache.lock());
        for (l, (d, m)) in &cache {
            if cut.as_ref().is_none_or(|lands| lands.contains(l)) {
                self.land(*l, d, m).await?;
            }
        }
        if cut.is_some() {
            self.off.store(true, Ordering::SeqCst);
            return Err(DevError::DeviceFailed { name: "cached (power cut)".into() });
        }
        Ok(())
    }
    async fn trim(&self, lba: u64, n: u64) -> DevResult<()> {
        // Only the format trims (the metadata region): through to the media at once.
        self.alive()?;
        self.cache.lock().retain(|l, _| !(lba..lba + n).contains(l));
        self.inner.trim(lba, n).await?;
        self.inner.flush().await
    }
}

/// Passes everything through; a flush first waits `FLUSH_NS` of virtual time.
struct SlowFlush(DevRef);

#[async_trait(?Send)]
impl BlockDevice for SlowFlush {
    fn info(&self) -> &DeviceInfo {
        self.0.info()
    }
    fn kind(&self) -> &'static str {
        "slow-flush"
    }
    fn children(&self) -> Vec<DevRef> {
        vec![self.0.clone()]
    }
    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        self.0.read(lba, buf, md).await
    }
    async fn write(&self, lba: u64, d: &[u8], md: Option<&[u8]>, h: WriteHints) -> DevResult<()> {
        self.0.write(lba, d, md, h).await
    }
    async fn flush(&self) -> DevResult<()> {
        sleep_ns(FLUSH_NS).await;
        self.0.flush().await
    }
    async fn trim(&self, lba: u64, n: u64) -> DevResult<()> {
        self.0.trim(lba, n).await
    }
    async fn zone(&self, cmd: ZoneCommand) -> DevResult<ZoneReply> {
        self.0.zone(cmd).await
    }
}

/// The members' media, and the members of one power-on over them.
struct Rig {
    csal: Arc<Csal>,
    fast: Arc<Cached>,
    zmem: Arc<Volatile>,
}

async fn power_up(fast_media: &Store, zmem_media: &Store, create: bool) -> Rig {
    let fv = Arc::new(Volatile::new("fast", BS, FAST_BLOCKS, MD, fast_media.clone()));
    let fast = Arc::new(Cached::new(fv));
    let zmem = Arc::new(Volatile::new("zmem", BS, ZMEM_BLOCKS, MD, zmem_media.clone()));
    let zoned = if create {
        Zoned::create("zoned", zmem.clone(), zoned_opts()).await
    } else {
        Zoned::open("zoned", zmem.clone(), zoned_opts()).await
    };
    let zoned: DevRef = Arc::new(SlowFlush(Arc::new(zoned.expect("zoned member"))));
    let csal = if create {
        Csal::create("csal", fast.clone(), zoned, opts()).await
    } else {
        Csal::open("csal", fast.clone(), zoned, opts()).await
    };
    Rig { csal: Arc::new(csal.expect("csal")), fast, zmem }
}

fn block(tag: u8, lba: u64) -> Vec<u8> {
    let mut b = vec![tag; BS as usize];
    b[..8].copy_from_slice(&lba.to_le_bytes());
    b
}

async fn read(csal: &Csal, lba: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS as usize];
    csal.read(lba, &mut b, None).await.expect("read");
    b
}

#[test]
fn a_checkpoint_maps_no_block_written_during_its_flush() {
    let ((b_during_checkpoint, got), _) = run(RuntimeKind::Sim, 1, || async {
        let (fast_media, zmem_media) = (Store::default(), Store::default());
        let rig = power_up(&fast_media, &zmem_media, true).await;
        let csal = rig.csal.clone();
        assert_eq!(csal.geometry().chunk_blocks, CHUNK);
        let (a, b) = (block(0xA1, LBA), block(0xB2, LBA));
        // Version A in the first chunk, then enough to close it and open a second one.
        csal.write(LBA, &a, None, WriteHints::NONE).await.unwrap();
        for l in FILL {
            csal.write(l, &block(0x33, l), None, WriteHints::NONE).await.unwrap();
        }
        csal.flush().await.unwrap();
        // The checkpoint SID moves to the second chunk's: A's record is no longer replayed,
        // recovery takes LBA 7's place from the checkpointed L2P.
        csal.checkpoint().await.unwrap();

        let done = Arc::new(AtomicBool::new(false));
        let (c2, d2) = (csal.clone(), done.clone());
        let ckpt = spawn(async move {
            let r = c2.checkpoint().await;
            d2.store(true, Ordering::SeqCst);
            r
        });
        // Inside the checkpoint's flush of the zoned member.
        sleep_ns(FLUSH_NS / 2).await;
        csal.write(LBA, &b, None, WriteHints::NONE).await.unwrap();
        let b_during_checkpoint = !done.load(Ordering::SeqCst);
        // The checkpoint's next flush of the fast member is the cut: its L2P pages land, B
        // (never flushed) does not.
        let g = csal.geometry();
        rig.fast.arm_cut(g.l2p_start..g.l2p_start + g.l2p_pages);
        assert!(ckpt.await.is_err(), "the checkpoint's flush was the power cut");
        // The zoned member keeps all it was given (nothing of LBA 7 is there).
        rig.zmem.power_cut().tear(rig.zmem.media(), 0, 100);
        drop(csal);
        drop(rig);

        let r = power_up(&fast_media, &zmem_media, false).await;
        let got = read(&r.csal, LBA).await;
        for l in FILL {
            assert_eq!(read(&r.csal, l).await, block(0x33, l), "flushed lba {l}");
        }
        (b_during_checkpoint, (got == a, got == b, got[..16].to_vec()))
    });
    assert!(b_during_checkpoint, "B was written while the checkpoint flushed the members");
    let (is_a, is_b, head) = got;
    assert!(
        is_a || is_b,
        "lba {LBA} after the cut reads neither flushed version A nor the later B: {head:02x?}"
    );
}
