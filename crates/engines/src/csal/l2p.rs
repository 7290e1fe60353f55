//! The two-level L2P table (§4.2): 4-byte entries, 1024 to a 4 KiB page. The top level (which
//! page is where) is implicit: page `p` lives at block `l2p_start + p` of the fast device and,
//! when cached, in [`PageCache`]. The cache holds at most `l2p_cache_pages` pages and evicts
//! the least recently used, in batches; a dirty page is written back when evicted, after a
//! flush of both members, so that a page on the fast device never maps an LBA to data that a power cut
//! could still lose (checkpoint recovery trusts the pages it loads).
//!
//! Every lookup and update runs under the state mutex with its page resident; a miss drops
//! the mutex, faults the page in, and retries. Faults of different pages run side by side;
//! evictions (and checkpoints' page writes) hold the pager lock. A page is never read from
//! the fast device while a newer copy of it is being written back: a page stays resident
//! until its write-back completes, so a fault never starts for it meanwhile.

use std::collections::{BTreeMap, HashMap, HashSet};

use flashrig_blockdev::{DevResult, WriteHints};

use super::format::{L2P_PAGE_ENTRIES, UNMAPPED};
use super::{Inner, State};

pub(crate) struct Page {
    pub entries: Vec<u32>,
    pub dirty: bool,
    stamp: u64,
}

/// Pages an eviction writes back after one flush, at most.
const EVICT_BATCH_PAGES: usize = 32;
/// Consecutive pages written back as one write, at most (1 MiB of 4 KiB pages).
const WRITE_RUN_PAGES: usize = 256;

/// The cached pages and their LRU order.
pub(crate) struct PageCache {
    pub pages: HashMap<u64, Page>,
    /// Pages being read in, each holding a slot of the capacity.
    pub faulting: HashSet<u64>,
    lru: BTreeMap<u64, u64>,
    clock: u64,
    pub capacity: usize,
}

impl PageCache {
    pub fn new(capacity: usize) -> PageCache {
        PageCache {
            pages: HashMap::new(),
            faulting: HashSet::new(),
            lru: BTreeMap::new(),
            clock: 0,
            capacity,
        }
    }

    fn touch(&mut self, page: u64) {
        self.clock += 1;
        let clock = self.clock;
        if let Some(p) = self.pages.get_mut(&page) {
            self.lru.remove(&p.stamp);
            p.stamp = clock;
            self.lru.insert(clock, page);
        }
    }

    /// The entry of `lba` if its page is resident.
    pub fn get(&mut self, lba: u64) -> Option<u32> {
        let page = lba / L2P_PAGE_ENTRIES as u64;
        let v = self.pages.get(&page)?.entries[(lba % L2P_PAGE_ENTRIES as u64) as usize];
        self.touch(page);
        Some(v)
    }

    /// Sets the entry of `lba`; its page must be resident.
    pub fn set(&mut self, lba: u64, pba: u32) {
        let page = lba / L2P_PAGE_ENTRIES as u64;
        let p = self.pages.get_mut(&page).expect("set on a resident page");
        p.entries[(lba % L2P_PAGE_ENTRIES as u64) as usize] = pba;
        p.dirty = true;
        self.touch(page);
    }

    pub fn resident(&self, lba: u64) -> bool {
        self.pages.contains_key(&(lba / L2P_PAGE_ENTRIES as u64))
    }

    pub fn insert(&mut self, page: u64, entries: Vec<u32>, dirty: bool) {
        self.pages.insert(page, Page { entries, dirty, stamp: 0 });
        self.touch(page);
    }

    fn remove(&mut self, page: u64) {
        if let Some(p) = self.pages.remove(&page) {
            self.lru.remove(&p.stamp);
        }
    }
}

pub(crate) fn decode_page(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

pub(crate) fn encode_page(e: &[u32], bs: usize) -> Vec<u8> {
    let mut b = vec![0u8; bs];
    for (i, v) in e.iter().enumerate() {
        b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
    }
    b
}

impl Inner {
    /// Runs `f` on the state with `lba`'s L2P page resident (the page's entry is read and
    /// updated through `st.l2p`), faulting the page in first when it is not.
    pub(crate) async fn with_entry<T>(
        &self,
        lba: u64,
        mut f: impl FnMut(&mut State) -> T,
    ) -> DevResult<T> {
        let mut missed = false;
        loop {
            {
                let mut st = self.st.lock();
                if st.l2p.resident(lba) {
                    if missed {
                        self.c.l2p_misses.inc();
                    } else {
                        self.c.l2p_hits.inc();
                    }
                    return Ok(f(&mut st));
                }
            }
            missed = true;
            self.fault(lba / L2P_PAGE_ENTRIES as u64).await?;
        }
    }

    /// The entry of `lba`.
    pub(crate) async fn l2p_get(&self, lba: u64) -> DevResult<u32> {
        self.with_entry(lba, |st| st.l2p.get(lba).unwrap()).await
    }

    /// Brings page `page` into the cache, evicting (and writing back) others as needed.
    ///
    /// Faults of different pages run side by side: each claims a cache slot and its page
    /// (`faulting`) before it reads, so a page is read once however many requests miss on
    /// it, and the cache never holds more than its capacity. Eviction runs under the pager
    /// lock, a batch at a time ([`Self::make_room`]).
    pub(crate) async fn fault(&self, page: u64) -> DevResult<()> {
        loop {
            let listener = {
                let mut st = self.st.lock();
                let c = &mut st.l2p;
                if c.pages.contains_key(&page) {
                    return Ok(());
                }
                if !c.faulting.contains(&page) && c.pages.len() + c.faulting.len() < c.capacity {
                    c.faulting.insert(page);
                    break;
                }
                // Another task reads this page, or the cache is full: listen before letting
                // go of the state, so that a wake-up in between is not missed.
                self.l2p_event.listen()
            };
            let full = {
                let st = self.st.lock();
                let c = &st.l2p;
                !c.faulting.contains(&page) && c.pages.len() + c.faulting.len() >= c.capacity
            };
            // When every slot is held by a fault in flight, there is nothing to evict: wait.
            if !full || !self.make_room().await? {
                listener.await;
            }
        }
        let read = self.read_page(page).await;
        let mut st = self.st.lock();
        st.l2p.faulting.remove(&page);
        let done = read.map(|entries| st.l2p.insert(page, entries, false));
        drop(st);
        self.l2p_event.notify(usize::MAX);
        done
    }

    /// Evicts up to `EVICT_BATCH_PAGES` least recently used pages, once the cache is full:
    /// clean ones at once, dirty ones after one flush of both members (a page on the fast
    /// device never maps an LBA to a block a power cut could still lose) and their writes,
    /// all side by side. A batch makes one flush serve many evictions, as SPDK's L2P cache
    /// evicts in batches too. False when there was nothing to evict (every slot is a fault
    /// in flight).
    async fn make_room(&self) -> DevResult<bool> {
        let _g = self.pager.lock(0).await;
        let dirty: Vec<(u64, Vec<u32>)> = {
            let mut st = self.st.lock();
            let c = &mut st.l2p;
            if c.pages.len() + c.faulting.len() < c.capacity {
                return Ok(true);
            }
            let victims: Vec<u64> = c.lru.values().take(EVICT_BATCH_PAGES).copied().collect();
            if victims.is_empty() {
                return Ok(false);
            }
            let mut dirty = Vec::new();
            for v in victims {
                let p = c.pages.get_mut(&v).expect("an LRU entry is resident");
                if p.dirty {
                    p.dirty = false;
                    dirty.push((v, p.entries.clone()));
                } else {
                    c.remove(v);
                }
            }
            dirty.sort_by_key(|(v, _)| *v);
            dirty
        };
        if !dirty.is_empty() {
            self.flush_members().await?;
            self.write_pages(&dirty).await?;
            let mut st = self.st.lock();
            for (v, _) in &dirty {
                // Updated while it was written: it stays (dirty) for a later batch.
                if !st.l2p.pages.get(v).is_some_and(|p| p.dirty) {
                    st.l2p.remove(*v);
                }
            }
        }
        self.l2p_event.notify(usize::MAX);
        Ok(true)
    }

    pub(crate) async fn read_page(&self, page: u64) -> DevResult<Vec<u32>> {
        let mut b = vec![0u8; self.bs()];
        self.fast.read(self.geo.l2p_start + page, &mut b, None).await?;
        self.c.l2p_page_reads.inc();
        Ok(decode_page(&b))
    }

    /// Writes `pages` (sorted by page number): each run of consecutive pages, up to
    /// `WRITE_RUN_PAGES`, as one write, and the runs side by side. The pages live in page
    /// order in the fast device's metadata region, so a checkpoint of a cache full of dirty
    /// pages is a few large writes; written one 4 KiB page at a time, one after another, a
    /// checkpoint of the whole table (the Fig. 19 "full cache" case: 3,400 pages at reduced
    /// scale) held the meta lock for ~20 ms, and every chunk opening waited behind it.
    pub(crate) async fn write_pages(&self, pages: &[(u64, Vec<u32>)]) -> DevResult<()> {
        debug_assert!(pages.windows(2).all(|w| w[0].0 < w[1].0), "pages sorted, once each");
        let bs = self.bs();
        let mut runs: Vec<&[(u64, Vec<u32>)]> = Vec::new();
        let mut first = 0;
        for i in 1..=pages.len() {
            if i == pages.len() || pages[i].0 != pages[i - 1].0 + 1 || i - first == WRITE_RUN_PAGES
            {
                runs.push(&pages[first..i]);
                first = i;
            }
        }
        let writes = runs.into_iter().map(|run| async move {
            let mut b = Vec::with_capacity(run.len() * bs);
            for (_, e) in run {
                b.extend_from_slice(&encode_page(e, bs));
            }
            self.fast.write(self.geo.l2p_start + run[0].0, &b, None, WriteHints::NONE).await?;
            self.c.l2p_page_writes.add(run.len() as u64);
            Ok(())
        });
        futures_util::future::try_join_all(writes).await.map(|_| ())
    }

    /// Copies every dirty cached page and marks it clean (a checkpoint's first step); an
    /// entry set after the copy marks its page dirty again. The caller holds the pager lock
    /// from the copy until the copies are written, so that no eviction writes a newer copy of
    /// a page that this older one would then overwrite.
    pub(crate) fn take_dirty_pages(st: &mut State) -> Vec<(u64, Vec<u32>)> {
        let mut v: Vec<(u64, Vec<u32>)> = st
            .l2p
            .pages
            .iter_mut()
            .filter(|(_, p)| p.dirty)
            .map(|(&k, p)| {
                p.dirty = false;
                (k, p.entries.clone())
            })
            .collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }

    /// A page of all-unmapped entries.
    pub(crate) fn empty_page() -> Vec<u32> {
        vec![UNMAPPED; L2P_PAGE_ENTRIES]
    }
}
