//! One-pass trace characterisation: the columns of ScalaAFA (ATC'24) Table 2, the WAFLASH
//! (§2.2, Fig. 1) unaligned-write ratio for 4/8/16 KiB flash pages, and the distribution of
//! 4 KiB logical-page update frequencies used by the Jaffer thesis (§3.7.2) to validate
//! trace reduction. Memory is one hash-map entry per distinct page touched.

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use crate::record::Request;

/// Logical page size for update frequencies (the thesis' and most FTLs' 4 KiB page).
pub const PAGE_BYTES: u64 = 4096;

/// Page sizes for which the unaligned-write ratio is reported, as in WAFLASH Fig. 1.
pub const UNALIGNED_PAGE_SIZES: [u64; 3] = [4096, 8192, 16384];

const KIB: f64 = 1024.0;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Whether a write is *unaligned* for flash page size `page` (WAFLASH §1/§2.2: writes "not
/// aligned with the page boundary", i.e. writes that have to write a partial page). A write
/// is unaligned when its start offset or its end (offset + size) is not a multiple of the page
/// size — either way its first or last page is only partly written.
pub fn is_unaligned(r: &Request, page: u64) -> bool {
    !r.offset_bytes.is_multiple_of(page) || !r.end_bytes().is_multiple_of(page)
}

/// Accumulates statistics over a stream of requests; call [`TraceStats::add`] per request.
#[derive(Debug, Clone, Default)]
pub struct TraceStats {
    /// Number of write requests.
    pub writes: u64,
    /// Number of read requests.
    pub reads: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Writes unaligned for each of [`UNALIGNED_PAGE_SIZES`].
    pub unaligned_writes: [u64; 3],
    /// Times each written 4 KiB logical page (`offset / 4096`, per device) was written.
    page_writes: FxHashMap<(u32, u64), u32>,
}

/// A serialisable summary (Table 2 units: Kops, KiB, GiB — ScalaAFA's numbers are binary: e.g.
/// prn 7753.0 Kops × 10.4 KB ≈ 76.9 GB only with 1 KB = 1024 B, 1 GB = 2^30 B).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    pub write_count: u64,
    pub read_count: u64,
    pub avg_write_kib: f64,
    pub avg_read_kib: f64,
    pub data_written_gib: f64,
    pub data_read_gib: f64,
    /// Unaligned-write ratio (0..=1) for 4, 8 and 16 KiB pages.
    pub unaligned_write_ratio: [f64; 3],
    /// `hist[k]` = number of 4 KiB pages written exactly k times (`hist[0]` is always 0).
    pub update_freq_histogram: Vec<u64>,
}

impl TraceStats {
    /// Empty statistics.
    pub fn new() -> Self {
        Self::default()
    }

    /// Statistics of a whole request sequence.
    pub fn of<'a>(reqs: impl IntoIterator<Item = &'a Request>) -> Self {
        let mut s = Self::new();
        for r in reqs {
            s.add(r);
        }
        s
    }

    /// Account one request.
    pub fn add(&mut self, r: &Request) {
        if !r.write {
            self.reads += 1;
            self.read_bytes = self.read_bytes.saturating_add(r.size_bytes);
            return;
        }
        self.writes += 1;
        self.write_bytes = self.write_bytes.saturating_add(r.size_bytes);
        for (i, &p) in UNALIGNED_PAGE_SIZES.iter().enumerate() {
            self.unaligned_writes[i] += is_unaligned(r, p) as u64;
        }
        for page in pages(r) {
            let c = self.page_writes.entry((r.device, page)).or_insert(0);
            *c = c.saturating_add(1);
        }
    }

    /// Average write size in KiB (0 when there are no writes).
    pub fn avg_write_kib(&self) -> f64 {
        ratio(self.write_bytes as f64 / KIB, self.writes)
    }

    /// Average read size in KiB (0 when there are no reads).
    pub fn avg_read_kib(&self) -> f64 {
        ratio(self.read_bytes as f64 / KIB, self.reads)
    }

    /// Data written in GiB.
    pub fn data_written_gib(&self) -> f64 {
        self.write_bytes as f64 / GIB
    }

    /// Data read in GiB.
    pub fn data_read_gib(&self) -> f64 {
        self.read_bytes as f64 / GIB
    }

    /// Fraction of writes unaligned for each of [`UNALIGNED_PAGE_SIZES`].
    pub fn unaligned_write_ratio(&self) -> [f64; 3] {
        self.unaligned_writes.map(|u| ratio(u as f64, self.writes))
    }

    /// Number of distinct 4 KiB pages written.
    pub fn distinct_pages_written(&self) -> usize {
        self.page_writes.len()
    }

    /// `hist[k]` = number of distinct 4 KiB pages written exactly `k` times.
    pub fn update_freq_histogram(&self) -> Vec<u64> {
        update_freq_histogram_of(self.page_writes.values().copied())
    }

    /// Everything above in one serialisable value.
    pub fn summary(&self) -> Summary {
        Summary {
            write_count: self.writes,
            read_count: self.reads,
            avg_write_kib: self.avg_write_kib(),
            avg_read_kib: self.avg_read_kib(),
            data_written_gib: self.data_written_gib(),
            data_read_gib: self.data_read_gib(),
            unaligned_write_ratio: self.unaligned_write_ratio(),
            update_freq_histogram: self.update_freq_histogram(),
        }
    }
}

fn ratio(x: f64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        x / n as f64
    }
}

/// The 4 KiB logical pages a request touches (none for a zero-length request).
pub fn pages(r: &Request) -> std::ops::Range<u64> {
    if r.size_bytes == 0 {
        return 0..0;
    }
    let first = r.offset_bytes / PAGE_BYTES;
    let last = (r.end_bytes() - 1) / PAGE_BYTES;
    first..last.saturating_add(1)
}

/// Histogram of per-page write counts: `hist[k]` = pages written `k` times.
pub fn update_freq_histogram_of(counts: impl Iterator<Item = u32>) -> Vec<u64> {
    let mut h = vec![0u64];
    for c in counts {
        let c = c as usize;
        if c >= h.len() {
            h.resize(c + 1, 0);
        }
        h[c] += 1;
    }
    h
}

/// Locality of a request sequence, the statistics the synthetic Table 2 stand-ins
/// ([`crate::synth`]) are built to reproduce: how many distinct start addresses the requests
/// use (a footprint measure that needs no page size), how often a read or a write starts where
/// the previous one of its kind ended (sequentiality), how many distinct 4 KiB pages are
/// touched and written (the footprint in bytes), and how many reads start at an address that
/// was written before. Addresses are per device, so volumes merged into one stream stay apart.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LocalityReport {
    /// Requests seen.
    pub requests: u64,
    /// Read requests seen.
    pub reads: u64,
    /// Write requests seen.
    pub writes: u64,
    /// Distinct (device, start offset) pairs over all requests.
    pub distinct_addresses: u64,
    /// Reads starting exactly where the previous read on the same device ended.
    pub sequential_reads: u64,
    /// Writes starting exactly where the previous write on the same device ended.
    pub sequential_writes: u64,
    /// Reads whose (device, start offset) was the start of an earlier write.
    pub reads_to_written_addresses: u64,
    /// Distinct 4 KiB pages read or written.
    pub pages_touched: u64,
    /// Distinct 4 KiB pages written.
    pub pages_written: u64,
    /// 4 KiB pages read (counted once per read that touches them).
    pub pages_read: u64,
    /// Of `pages_read`, those written earlier in the trace.
    pub pages_read_after_write: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
}

impl LocalityReport {
    /// Characterise a whole request sequence in one pass. Memory is one hash-set entry per
    /// distinct address and per distinct page.
    pub fn of<'a>(reqs: impl IntoIterator<Item = &'a Request>) -> Self {
        let mut acc = LocalityStats::new();
        for r in reqs {
            acc.add(r);
        }
        acc.report()
    }

    /// Distinct start addresses per request (0 for an empty trace).
    pub fn distinct_address_ratio(&self) -> f64 {
        ratio(self.distinct_addresses as f64, self.requests)
    }

    /// Fraction of reads that continue the previous read.
    pub fn sequential_read_fraction(&self) -> f64 {
        ratio(self.sequential_reads as f64, self.reads)
    }

    /// Fraction of writes that continue the previous write.
    pub fn sequential_write_fraction(&self) -> f64 {
        ratio(self.sequential_writes as f64, self.writes)
    }

    /// Fraction of reads that start at an address written earlier in the trace.
    pub fn read_after_write_fraction(&self) -> f64 {
        ratio(self.reads_to_written_addresses as f64, self.reads)
    }

    /// Fraction of the pages reads touch that were written earlier in the trace: how much of
    /// what is read is data the trace itself wrote.
    pub fn read_pages_written_fraction(&self) -> f64 {
        ratio(self.pages_read_after_write as f64, self.pages_read)
    }

    /// Bytes of distinct pages touched per byte transferred: 1 when nothing is accessed twice,
    /// small when the trace keeps returning to a small working set.
    pub fn footprint_ratio(&self) -> f64 {
        let moved = self.read_bytes.saturating_add(self.write_bytes);
        if moved == 0 {
            0.0
        } else {
            (self.pages_touched * PAGE_BYTES) as f64 / moved as f64
        }
    }

    /// Bytes of distinct pages written per byte written: the write working set relative to the
    /// data written, 1 when no page is overwritten.
    pub fn written_footprint_ratio(&self) -> f64 {
        if self.write_bytes == 0 {
            0.0
        } else {
            (self.pages_written * PAGE_BYTES) as f64 / self.write_bytes as f64
        }
    }
}

/// Accumulates a [`LocalityReport`] over a stream of requests, for traces read line by line
/// (`flashrig trace stats`) that are too long to hold in memory; [`LocalityReport::of`] runs
/// it over a sequence already in memory. Memory is one hash-set entry per distinct address and
/// per distinct page.
#[derive(Debug, Clone, Default)]
pub struct LocalityStats {
    out: LocalityReport,
    /// Every (device, start offset) seen, and whether a write started there.
    addresses: FxHashMap<(u32, u64), bool>,
    touched: FxHashSet<(u32, u64)>,
    written: FxHashSet<(u32, u64)>,
    /// The end of the previous read (index 0) and of the previous write (1), with its device.
    last_end: [Option<(u32, u64)>; 2],
}

impl LocalityStats {
    /// Nothing seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Account one request.
    pub fn add(&mut self, r: &Request) {
        let out = &mut self.out;
        out.requests += 1;
        let kind = r.write as usize;
        if self.last_end[kind] == Some((r.device, r.offset_bytes)) {
            if r.write {
                out.sequential_writes += 1;
            } else {
                out.sequential_reads += 1;
            }
        }
        self.last_end[kind] = Some((r.device, r.end_bytes()));
        let key = (r.device, r.offset_bytes);
        if r.write {
            out.writes += 1;
            out.write_bytes = out.write_bytes.saturating_add(r.size_bytes);
            self.addresses.insert(key, true);
            for p in pages(r) {
                self.written.insert((r.device, p));
                self.touched.insert((r.device, p));
            }
        } else {
            out.reads += 1;
            out.read_bytes = out.read_bytes.saturating_add(r.size_bytes);
            let was_written = self.addresses.entry(key).or_insert(false);
            out.reads_to_written_addresses += *was_written as u64;
            for p in pages(r) {
                out.pages_read += 1;
                out.pages_read_after_write += self.written.contains(&(r.device, p)) as u64;
                self.touched.insert((r.device, p));
            }
        }
    }

    /// The statistics of everything added so far.
    pub fn report(&self) -> LocalityReport {
        LocalityReport {
            distinct_addresses: self.addresses.len() as u64,
            pages_touched: self.touched.len() as u64,
            pages_written: self.written.len() as u64,
            ..self.out.clone()
        }
    }
}

/// Miss ratio of an LRU cache of `capacity` entries (one entry per key, whatever the request
/// size) over `keys`, every access a lookup that inserts on a miss: the statistic published
/// for the MSR Cambridge volumes by opencoff/go-sieve (bench-results.md, cache = 10% of the
/// distinct keys), so a synthetic trace can be checked against it the same way. Capacity 0
/// misses everything.
pub fn lru_miss_ratio<K: std::hash::Hash + Eq + Copy>(
    keys: impl IntoIterator<Item = K>,
    capacity: usize,
) -> f64 {
    const NIL: u32 = u32::MAX;
    struct Node<K> {
        key: K,
        prev: u32,
        next: u32,
    }
    let mut nodes: Vec<Node<K>> = Vec::with_capacity(capacity.min(1 << 24));
    let mut index: FxHashMap<K, u32> = FxHashMap::default();
    let (mut head, mut tail) = (NIL, NIL);
    let (mut accesses, mut misses) = (0u64, 0u64);
    // Unlinks node `i` from the recency list.
    fn unlink<K>(nodes: &mut [Node<K>], head: &mut u32, tail: &mut u32, i: u32) {
        let (p, n) = (nodes[i as usize].prev, nodes[i as usize].next);
        if p == NIL {
            *head = n;
        } else {
            nodes[p as usize].next = n;
        }
        if n == NIL {
            *tail = p;
        } else {
            nodes[n as usize].prev = p;
        }
    }
    // Links node `i` in front of the recency list (most recently used).
    fn push_front<K>(nodes: &mut [Node<K>], head: &mut u32, tail: &mut u32, i: u32) {
        nodes[i as usize].prev = NIL;
        nodes[i as usize].next = *head;
        if *head != NIL {
            nodes[*head as usize].prev = i;
        }
        *head = i;
        if *tail == NIL {
            *tail = i;
        }
    }
    for key in keys {
        accesses += 1;
        if let Some(&i) = index.get(&key) {
            unlink(&mut nodes, &mut head, &mut tail, i);
            push_front(&mut nodes, &mut head, &mut tail, i);
            continue;
        }
        misses += 1;
        if capacity == 0 {
            continue;
        }
        let i = if nodes.len() < capacity {
            nodes.push(Node { key, prev: NIL, next: NIL });
            (nodes.len() - 1) as u32
        } else {
            // Evict the least recently used entry and reuse its node.
            let victim = tail;
            unlink(&mut nodes, &mut head, &mut tail, victim);
            index.remove(&nodes[victim as usize].key);
            nodes[victim as usize].key = key;
            victim
        };
        index.insert(key, i);
        push_front(&mut nodes, &mut head, &mut tail, i);
    }
    ratio(misses as f64, accesses)
}

/// LRU miss ratio over the requests' (device, start offset) with a cache holding
/// `cache_fraction` of the distinct addresses (rounded, at least one entry) — go-sieve's
/// measurement at `cache_fraction` = 0.1.
pub fn lru_miss_ratio_of(reqs: &[Request], cache_fraction: f64) -> f64 {
    let distinct: FxHashSet<(u32, u64)> = reqs.iter().map(|r| (r.device, r.offset_bytes)).collect();
    let capacity = ((distinct.len() as f64 * cache_fraction).round() as usize).max(1);
    lru_miss_ratio(reqs.iter().map(|r| (r.device, r.offset_bytes)), capacity)
}

/// Share of requests that go to the most requested `fraction` of distinct start addresses
/// (at least one address): a hot/cold skew measure, "x% of requests go to y% of addresses".
pub fn hot_share(reqs: &[Request], fraction: f64) -> f64 {
    let mut counts: FxHashMap<(u32, u64), u64> = FxHashMap::default();
    for r in reqs {
        *counts.entry((r.device, r.offset_bytes)).or_insert(0) += 1;
    }
    let mut c: Vec<u64> = counts.into_values().collect();
    c.sort_unstable_by(|a, b| b.cmp(a));
    let k = ((c.len() as f64 * fraction).round() as usize).clamp(1.min(c.len()), c.len());
    ratio(c[..k].iter().sum::<u64>() as f64, reqs.len() as u64)
}
