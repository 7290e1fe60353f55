//! One-pass trace characterisation: the columns of ScalaAFA (ATC'24) Table 2, the WAFLASH
//! (§2.2, Fig. 1) unaligned-write ratio for 4/8/16 KiB flash pages, and the distribution of
//! 4 KiB logical-page update frequencies used by the Jaffer thesis (§3.7.2) to validate
//! trace reduction. Memory is one hash-map entry per distinct page touched.

use rustc_hash::FxHashMap;
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
