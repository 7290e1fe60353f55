//! Power, for crash tests: members whose unflushed writes a power cut can lose, fuses that cut
//! a whole stack at one instant, and triggers that cut it at an exact command boundary.
//!
//! - [`Store`] is a member's durable media: it outlives the power cut and the engine instance.
//! - [`Volatile`] is a member with a volatile write cache in front of a store: writes and trims
//!   stay in the cache until a flush (FUA writes go straight through). At a power cut the
//!   cache is handed back as [`Unflushed`], and [`Unflushed::tear`] decides, block by block
//!   with a seeded coin, what reached the media, so one crash point yields many crash states
//!   (CrashMonkey's subsets of unflushed writes).
//! - [`Fuse`] sits on every member and on top of the stack. Blown, it passes nothing on, and a
//!   command in flight at that moment fails as it completes, as nothing completes for a host
//!   after its power is gone. Pulled, one member fails like a drive taken out of its slot.
//! - [`Trigger`] counts completions seen by the fuses that share it and runs an action (the
//!   power cut) right after the n-th one, so a crash lands exactly between two commands of the
//!   engine, not only at a moment of the clock.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{
    check_io, check_range, BlockDevice, DevError, DevRef, DevResult, DeviceInfo, WriteHints,
};
use parking_lot::Mutex;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::tap::{Cmd, Tap, Tapped};

/// One block on the media: its data, then its metadata bytes.
pub type StoredBlock = Arc<(Box<[u8]>, Box<[u8]>)>;

/// A member's durable media: blocks by LBA (absent blocks read as zeros). Cloning shares the
/// media; [`Store::copy`] makes an independent one (cheap: blocks are shared until replaced).
#[derive(Clone, Default)]
pub struct Store(Arc<Mutex<HashMap<u64, StoredBlock>>>);

impl Store {
    /// An independent copy of the media as it is now.
    pub fn copy(&self) -> Store {
        Store(Arc::new(Mutex::new(self.0.lock().clone())))
    }

    /// The block at `lba`, if one was ever written (and not trimmed).
    pub fn get(&self, lba: u64) -> Option<StoredBlock> {
        self.0.lock().get(&lba).cloned()
    }

    /// Blocks on the media.
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn apply(&self, lba: u64, change: &Option<StoredBlock>) {
        let mut s = self.0.lock();
        match change {
            Some(b) => s.insert(lba, b.clone()),
            None => s.remove(&lba),
        };
    }
}

/// Writes (`Some`) and trims (`None`) not yet flushed, by LBA: the newest change of each block.
pub type Cache = BTreeMap<u64, Option<StoredBlock>>;

/// What a member's cache held at a power cut.
#[derive(Clone, Default)]
pub struct Unflushed(Cache);

impl Unflushed {
    /// Blocks whose fate the cut leaves open.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Lets each unflushed change reach `media` with probability `percent`/100, by a coin
    /// seeded with `seed`; returns how many did.
    pub fn tear(&self, media: &Store, seed: u64, percent: u8) -> usize {
        let mut coin = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut landed = 0;
        for (&lba, change) in &self.0 {
            if coin.next_u64() % 100 < percent as u64 {
                media.apply(lba, change);
                landed += 1;
            }
        }
        landed
    }
}

/// A member with a volatile write cache in front of a durable [`Store`]. Every command
/// completes without suspending. After [`Volatile::power_cut`] every command fails; a new
/// `Volatile` over the same (or a torn copy of the) store is the member after power returns.
pub struct Volatile {
    info: DeviceInfo,
    media: Store,
    cache: Mutex<Cache>,
    off: AtomicBool,
}

impl Volatile {
    /// A member of `num_blocks` blocks of `block_size` bytes with `md_bytes` of metadata each.
    pub fn new(name: &str, block_size: u32, num_blocks: u64, md_bytes: u32, media: Store) -> Self {
        let mut info = DeviceInfo::new(name, block_size, num_blocks).with_md_bytes(md_bytes);
        info.caps.md_atomic = true;
        info.caps.fua = true;
        Volatile { info, media, cache: Mutex::default(), off: AtomicBool::new(false) }
    }

    /// The media under the cache.
    pub fn media(&self) -> &Store {
        &self.media
    }

    /// Cuts power: every later command fails; what the cache held is returned, not applied.
    pub fn power_cut(&self) -> Unflushed {
        self.off.store(true, Ordering::SeqCst);
        Unflushed(std::mem::take(&mut *self.cache.lock()))
    }

    /// Bit rot: flips bit `bit % (block bits)` of the newest version of the block at `lba`
    /// (the cached one if unflushed, else the one on the media), leaving its metadata. Done
    /// under the cache's lock, so no write can slip between reading and replacing the block
    /// (which [`crate::Rot::flip`], going through the device's commands, cannot promise).
    /// Returns false, changing nothing, where no block was ever written (or it was trimmed).
    pub fn rot(&self, lba: u64, bit: u64) -> bool {
        let flip = |b: &StoredBlock| -> StoredBlock {
            let mut data = b.0.clone();
            let bit = bit % (data.len() as u64 * 8);
            data[(bit / 8) as usize] ^= 1 << (bit % 8);
            Arc::new((data, b.1.clone()))
        };
        let mut cache = self.cache.lock();
        match cache.get_mut(&lba) {
            Some(Some(b)) => {
                *b = flip(b);
                true
            }
            Some(None) => false,
            None => match self.media.get(lba) {
                Some(b) => {
                    self.media.apply(lba, &Some(flip(&b)));
                    true
                }
                None => false,
            },
        }
    }

    fn alive(&self) -> DevResult<()> {
        if self.off.load(Ordering::SeqCst) {
            return Err(DevError::DeviceFailed { name: self.info.name.clone() });
        }
        Ok(())
    }
}

#[async_trait(?Send)]
impl BlockDevice for Volatile {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn kind(&self) -> &'static str {
        "volatile"
    }
    async fn read(&self, lba: u64, buf: &mut [u8], mut md: Option<&mut [u8]>) -> DevResult<()> {
        check_io(&self.info, lba, buf.len(), md.as_ref().map(|m| m.len()))?;
        self.alive()?;
        let (bs, mdb) = (self.info.block_size as usize, self.info.md_bytes_per_block as usize);
        let cache = self.cache.lock();
        for (i, b) in buf.chunks_exact_mut(bs).enumerate() {
            let l = lba + i as u64;
            let found = match cache.get(&l) {
                Some(c) => c.clone(),
                None => self.media.get(l),
            };
            let m = md.as_deref_mut().map(|m| &mut m[i * mdb..(i + 1) * mdb]);
            match found {
                Some(block) => {
                    b.copy_from_slice(&block.0);
                    if let Some(m) = m {
                        m.copy_from_slice(&block.1);
                    }
                }
                None => {
                    b.fill(0);
                    if let Some(m) = m {
                        m.fill(0);
                    }
                }
            }
        }
        Ok(())
    }
    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        check_io(&self.info, lba, data.len(), md.map(|m| m.len()))?;
        self.alive()?;
        let (bs, mdb) = (self.info.block_size as usize, self.info.md_bytes_per_block as usize);
        let mut cache = self.cache.lock();
        for (i, b) in data.chunks_exact(bs).enumerate() {
            let m: Box<[u8]> =
                md.map_or_else(|| vec![0u8; mdb].into(), |m| m[i * mdb..(i + 1) * mdb].into());
            let block: StoredBlock = Arc::new((b.into(), m));
            let l = lba + i as u64;
            if hints.fua {
                cache.remove(&l);
                self.media.apply(l, &Some(block));
            } else {
                cache.insert(l, Some(block));
            }
        }
        Ok(())
    }
    async fn flush(&self) -> DevResult<()> {
        self.alive()?;
        let cache = std::mem::take(&mut *self.cache.lock());
        for (lba, change) in &cache {
            self.media.apply(*lba, change);
        }
        Ok(())
    }
    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        check_range(&self.info, lba, num_blocks)?;
        self.alive()?;
        let mut cache = self.cache.lock();
        for l in lba..lba + num_blocks {
            cache.insert(l, None);
        }
        Ok(())
    }
}

/// Which completions a [`Trigger`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// Every command.
    All,
    /// Flushes only (a cut right after a flush completed).
    Flushes,
}

type Action = Box<dyn FnOnce() + Send>;

/// Runs an action right after the n-th completion (of any command, or of flushes) counted by
/// the fuses that share it.
pub struct Trigger {
    seen_all: AtomicU64,
    seen_flushes: AtomicU64,
    count: Mutex<Count>,
    at: AtomicU64,
    action: Mutex<Option<Action>>,
    fired: AtomicBool,
}

impl Trigger {
    /// A trigger, not yet armed.
    pub fn new() -> Arc<Trigger> {
        Arc::new(Trigger {
            seen_all: AtomicU64::new(0),
            seen_flushes: AtomicU64::new(0),
            count: Mutex::new(Count::All),
            at: AtomicU64::new(u64::MAX),
            action: Mutex::new(None),
            fired: AtomicBool::new(false),
        })
    }

    /// Runs `action` right after the `n`-th completion (n >= 1) of `count` from now.
    pub fn arm(&self, count: Count, n: u64, action: impl FnOnce() + Send + 'static) {
        *self.action.lock() = Some(Box::new(action));
        *self.count.lock() = count;
        let now = match count {
            Count::All => self.seen_all.load(Ordering::SeqCst),
            Count::Flushes => self.seen_flushes.load(Ordering::SeqCst),
        };
        self.at.store(now + n.max(1), Ordering::SeqCst);
    }

    /// Disarms the trigger (its action will not run).
    pub fn disarm(&self) {
        self.action.lock().take();
        self.at.store(u64::MAX, Ordering::SeqCst);
    }

    /// Whether the action ran.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Completions counted so far (all commands).
    pub fn seen(&self) -> u64 {
        self.seen_all.load(Ordering::SeqCst)
    }

    fn completed(&self, flush: bool) {
        let all = self.seen_all.fetch_add(1, Ordering::SeqCst) + 1;
        let flushes = if flush {
            self.seen_flushes.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            self.seen_flushes.load(Ordering::SeqCst)
        };
        let n = match *self.count.lock() {
            Count::All => all,
            Count::Flushes if flush => flushes,
            Count::Flushes => return,
        };
        if n == self.at.load(Ordering::SeqCst) {
            let action = self.action.lock().take();
            if let Some(a) = action {
                self.fired.store(true, Ordering::SeqCst);
                a();
            }
        }
    }
}

/// A pass-through layer that a power cut blows (for the whole stack at once: fuses of one
/// stack share the `power` switch) and that can be pulled alone like a drive. Vendor and zone
/// commands pass through (a zoned member behind a fuse, as `csal:zns` has). Completions are
/// counted by an optional [`Trigger`]: [`Breaker`] tapped over the device below.
pub type Fuse = Tapped<Breaker>;

/// A [`Fuse`]'s state: the stack's power switch, whether this member was pulled, and the
/// trigger that counts completions.
pub struct Breaker {
    power: Arc<AtomicBool>,
    pulled: AtomicBool,
    trigger: Option<Arc<Trigger>>,
}

impl Fuse {
    /// A fuse over `inner` on the `power` switch (`true`: power is on).
    pub fn new(inner: DevRef, power: Arc<AtomicBool>, trigger: Option<Arc<Trigger>>) -> Self {
        Tapped::over(inner, Breaker { power, pulled: AtomicBool::new(false), trigger })
    }
}

impl Breaker {
    /// Fails this member alone from now on, like a pulled drive.
    pub fn pull(&self) {
        self.pulled.store(true, Ordering::SeqCst);
    }

    pub fn is_pulled(&self) -> bool {
        self.pulled.load(Ordering::SeqCst)
    }

    fn alive(&self, below: &DevRef) -> DevResult<()> {
        if !self.power.load(Ordering::SeqCst) || self.is_pulled() {
            return Err(DevError::DeviceFailed { name: below.info().name.clone() });
        }
        Ok(())
    }
}

#[async_trait(?Send)]
impl Tap for Breaker {
    fn kind(&self) -> &'static str {
        "fuse"
    }

    async fn before(&self, below: &DevRef, _cmd: Cmd) -> DevResult<()> {
        self.alive(below)
    }

    /// Counts the completion (which may cut the power), then fails the command if the power
    /// or the member is gone by now.
    fn after(&self, below: &DevRef, cmd: Cmd) -> DevResult<()> {
        if let Some(t) = &self.trigger {
            t.completed(cmd == Cmd::Flush);
        }
        self.alive(below)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashrig_runtime::{run, RuntimeKind};

    fn block(v: u8) -> Vec<u8> {
        vec![v; 512]
    }

    #[test]
    fn unflushed_writes_are_torn_by_the_coin_and_flushed_ones_stay() {
        let (res, _) = run(RuntimeKind::Sim, 1, || async {
            let media = Store::default();
            let v = Volatile::new("v", 512, 64, 0, media.clone());
            v.write(0, &block(1), None, WriteHints::NONE).await.unwrap();
            v.flush().await.unwrap();
            for l in 1..41 {
                v.write(l, &block(2), None, WriteHints::NONE).await.unwrap();
            }
            v.write(50, &block(3), None, WriteHints { fua: true, ..WriteHints::NONE })
                .await
                .unwrap();
            let lost = v.power_cut();
            assert!(v.read(0, &mut block(0), None).await.is_err(), "a dead member answered");
            assert_eq!(lost.len(), 40);
            let none = media.copy();
            assert_eq!(lost.tear(&none, 1, 0), 0);
            assert_eq!(none.len(), 2, "the flushed and the FUA block survive");
            let all = media.copy();
            assert_eq!(lost.tear(&all, 1, 100), 40);
            let some = media.copy();
            let landed = lost.tear(&some, 7, 50);
            assert!(landed > 5 && landed < 35, "{landed} of 40 landed at 50%");
            assert_eq!(some.len(), 2 + landed);
            assert_eq!(media.len(), 2, "tearing a copy leaves the media alone");
        });
        res
    }

    #[test]
    fn a_trigger_cuts_power_right_after_the_nth_completion() {
        let (res, _) = run(RuntimeKind::Sim, 1, || async {
            let power = Arc::new(AtomicBool::new(true));
            let trigger = Trigger::new();
            let v: DevRef = Arc::new(Volatile::new("v", 512, 64, 0, Store::default()));
            let f = Fuse::new(v, power.clone(), Some(trigger.clone()));
            let p = power.clone();
            trigger.arm(Count::All, 3, move || p.store(false, Ordering::SeqCst));
            f.write(0, &block(1), None, WriteHints::NONE).await.unwrap();
            f.write(1, &block(1), None, WriteHints::NONE).await.unwrap();
            assert!(!trigger.fired());
            // The third command reached the member but its completion never reaches the host.
            assert!(f.flush().await.is_err());
            assert!(trigger.fired());
            assert!(f.read(0, &mut block(0), None).await.is_err());
            let flushes = Trigger::new();
            let g = Fuse::new(
                Arc::new(Volatile::new("w", 512, 64, 0, Store::default())),
                Arc::new(AtomicBool::new(true)),
                Some(flushes.clone()),
            );
            flushes.arm(Count::Flushes, 1, || {});
            g.write(0, &block(1), None, WriteHints::NONE).await.unwrap();
            assert!(!flushes.fired(), "a write is not a flush");
            g.flush().await.unwrap();
            assert!(flushes.fired());
            g.pull();
            assert!(g.read(0, &mut block(0), None).await.is_err(), "a pulled member answered");
        });
        res
    }
}
