//! The two-level L2P table (§4.2): 4-byte entries, 1024 to a 4 KiB page. The top level (which
//! page is where) is implicit: page `p` lives at block `l2p_start + p` of the fast device and,
//! when cached, in [`PageCache`]. The cache holds at most `l2p_cache_pages` pages and evicts
//! the least recently used; a dirty page is written back when evicted, after a flush of both
//! members, so that a page on the fast device never maps an LBA to data that a power cut
//! could still lose (checkpoint recovery trusts the pages it loads).
//!
//! Every lookup and update runs under the state mutex with its page resident; a miss drops
//! the mutex, faults the page in under the pager lock (one fault at a time, so a page is never
//! read from the fast device while a newer copy of it is being written back), and retries.

use std::collections::{BTreeMap, HashMap};

use flashrig_blockdev::{DevResult, WriteHints};

use super::format::{L2P_PAGE_ENTRIES, UNMAPPED};
use super::{Inner, State};

pub(crate) struct Page {
    pub entries: Vec<u32>,
    pub dirty: bool,
    stamp: u64,
}

/// The cached pages and their LRU order.
pub(crate) struct PageCache {
    pub pages: HashMap<u64, Page>,
    lru: BTreeMap<u64, u64>,
    clock: u64,
    pub capacity: usize,
}

impl PageCache {
    pub fn new(capacity: usize) -> PageCache {
        PageCache { pages: HashMap::new(), lru: BTreeMap::new(), clock: 0, capacity }
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

    fn victim(&self) -> Option<u64> {
        self.lru.values().next().copied()
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
    pub(crate) async fn fault(&self, page: u64) -> DevResult<()> {
        let _g = self.pager.lock(0).await;
        loop {
            let wb = {
                let mut st = self.st.lock();
                if st.l2p.pages.contains_key(&page) {
                    return Ok(());
                }
                if st.l2p.pages.len() < st.l2p.capacity {
                    break;
                }
                let v = st.l2p.victim().expect("a full cache has a victim");
                let p = st.l2p.pages.get_mut(&v).unwrap();
                if !p.dirty {
                    st.l2p.remove(v);
                    continue;
                }
                p.dirty = false;
                (v, p.entries.clone())
            };
            // The page may map LBAs to blocks not yet durable: make them durable first.
            self.flush_members().await?;
            self.write_page(wb.0, &wb.1).await?;
            let mut st = self.st.lock();
            // Updated while it was written: it stays (dirty), and the next round picks the
            // next least recently used page.
            if !st.l2p.pages.get(&wb.0).is_some_and(|p| p.dirty) {
                st.l2p.remove(wb.0);
            }
        }
        let entries = self.read_page(page).await?;
        self.st.lock().l2p.insert(page, entries, false);
        Ok(())
    }

    pub(crate) async fn read_page(&self, page: u64) -> DevResult<Vec<u32>> {
        let mut b = vec![0u8; self.bs()];
        self.fast.read(self.geo.l2p_start + page, &mut b, None).await?;
        self.c.l2p_page_reads.inc();
        Ok(decode_page(&b))
    }

    pub(crate) async fn write_page(&self, page: u64, e: &[u32]) -> DevResult<()> {
        let b = encode_page(e, self.bs());
        self.fast.write(self.geo.l2p_start + page, &b, None, WriteHints::NONE).await?;
        self.c.l2p_page_writes.inc();
        Ok(())
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
