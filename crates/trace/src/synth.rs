//! Synthetic stand-ins for the six traces of ScalaAFA (ATC'24) Table 2, whose originals are not
//! available here (see `../shared/traces/MANIFEST.txt`). A stand-in keeps the row's read/write
//! mix and mean request sizes, as the first version did, and adds the locality that published
//! characterisations report for the original trace (or for the closest trace that has one):
//!
//! * a footprint: the share of requests that start at an address not used before
//!   ([`LocalityTargets::distinct_address_ratio`]), which fixes the working set relative to the
//!   run's length, so a run of 1/8 or 1/32 of Table 2's requests keeps the ratio, not the size;
//! * hot/cold skew: requests that revisit an address favour the oldest ones with a power law
//!   over the addresses' age ranks (or, where even uniform revisits hit too often, sweep the
//!   used addresses cyclically for a share of revisits), fitted so an LRU cache of 10% of the
//!   distinct addresses misses as often as on the original
//!   ([`LocalityTargets::lru_miss_ratio`]);
//! * sequential runs: a read (write) starts where the previous read (write) ended with the
//!   row's published probability, giving geometric runs.
//!
//! Every number carries its source in [`Provenance`]; `docs/traces.md` has the tables and says
//! what the stand-ins still cannot reproduce. [`Locality::None`] keeps the first version
//! (uniform offsets over the span) so the difference can be measured.
//!
//! The generator is deterministic for a seed (its own xoshiro256++ stream, seeded through
//! SplitMix64 as `rand_xoshiro`'s `seed_from_u64` does, so [`Locality::None`] repeats the first
//! version's traces byte for byte) and streams: [`Synth`] is an iterator whose memory is one
//! entry per distinct address.

use rustc_hash::FxHashSet;

use crate::record::Request;

/// Sector size of the traces: sizes are whole sectors, as in the MSR and FIU originals.
const SECTOR_BYTES: u64 = 512;
/// Alignment of a newly used address: a 4 KiB page, the unit most requests in the MSR and FIU
/// traces start on (and the page size the statistics use).
const PAGE_BYTES: u64 = 4096;
/// Mean time between arrivals of the first version (Poisson arrivals at 1,000 per second),
/// kept: ScalaAFA's trace runs replay closed-loop, so arrival times do not shape the results.
pub(crate) const MEAN_INTERARRIVAL_NS: f64 = 1e6;
/// Cache size, as a share of the distinct addresses, at which the published LRU miss ratios
/// were measured (opencoff/go-sieve, bench-results.md: "Cache sizing | 10% of unique keys").
pub const LRU_CACHE_FRACTION: f64 = 0.1;
/// Draws for a fresh address before giving up and revisiting one instead: only reached when
/// the span is almost full of used addresses, which a span sized for the run never is.
const FRESH_ADDRESS_TRIES: u32 = 64;
/// Addresses (and requests, for `collect`) reserved up front at most: 4 Mi, about 100 MiB
/// with the set. Longer stand-ins grow as they go.
const PREALLOCATED_ADDRESSES: usize = 1 << 22;
/// The most requests `flashrig trace synth` generates: a billion, about sixty times Table 2's
/// largest row (prn, 16.8 million), so a typo cannot start a run that never ends.
pub const MAX_REQUESTS: u64 = 1_000_000_000;
/// Mixed into the seed for the addressing stream, so its SplitMix64 seeding starts far from
/// the main stream's (which walks seed + k·0x9E37_79B9_7F4A_7C15): the first hexadecimal
/// digits of pi's fractional part, a constant with no structure to line up with that walk.
const ADDRESS_STREAM: u64 = 0x243F_6A88_85A3_08D3;

/// One row of ScalaAFA Table 2 (§6.1, "Characteristics of real workloads"), in the paper's
/// units (binary: 1 KB = 1024 B, 1 GB = 2^30 B, see `docs/traces.md`), with the locality the
/// stand-in reproduces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Table2Row {
    /// The paper's name for the trace.
    pub name: &'static str,
    /// Write requests, thousands.
    pub writes_kops: f64,
    /// Read requests, thousands.
    pub reads_kops: f64,
    /// Mean write size, KiB.
    pub avg_write_kb: f64,
    /// Mean read size, KiB.
    pub avg_read_kb: f64,
    /// Data written, GiB.
    pub written_gb: f64,
    /// Data read, GiB.
    pub read_gb: f64,
    /// Locality of the original (or of the closest characterised trace).
    pub locality: LocalityTargets,
}

impl Table2Row {
    /// Requests in the original trace (writes + reads).
    pub fn requests(&self) -> u64 {
        ((self.writes_kops + self.reads_kops) * 1000.0).round() as u64
    }

    /// Share of requests that are writes.
    pub fn write_share(&self) -> f64 {
        self.writes_kops / (self.writes_kops + self.reads_kops)
    }

    /// Mean request size in bytes over reads and writes.
    pub fn mean_request_bytes(&self) -> f64 {
        let w = self.write_share();
        (w * self.avg_write_kb + (1.0 - w) * self.avg_read_kb) * 1024.0
    }

    /// Working set a stand-in of `requests` requests implies: its distinct addresses times the
    /// mean request size. A span well above this keeps the addresses' extents apart; a smaller
    /// span makes them overlap, so the footprint in pages saturates at the span while the
    /// distinct-address count still holds (`docs/traces.md` gives the numbers per row).
    pub fn working_set_bytes(&self, requests: u64) -> u64 {
        (self.locality.distinct_address_ratio * requests as f64 * self.mean_request_bytes()) as u64
    }
}

/// The locality statistics a stand-in is built to match, each measured the way its source
/// measured it (see [`crate::stats::LocalityReport`] and [`crate::stats::lru_miss_ratio_of`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LocalityTargets {
    /// Distinct request start addresses per request: the footprint relative to the run.
    pub distinct_address_ratio: f64,
    /// Miss ratio of an LRU cache holding [`LRU_CACHE_FRACTION`] of the distinct addresses,
    /// one entry per address, every request a lookup: the hot/cold skew.
    pub lru_miss_ratio: f64,
    /// Share of reads that start where the previous read ended.
    pub sequential_read_fraction: f64,
    /// Share of writes that start where the previous write ended.
    pub sequential_write_fraction: f64,
    /// Generator parameter, not a published statistic: a revisit (outside the scan share)
    /// picks the address of age rank floor(n · U^exponent) among the n used so far, oldest
    /// first, U uniform in (0, 1): 1 is uniform, larger concentrates revisits on the oldest
    /// addresses. Ranks are fractions of n, so the skew is the same for any run length.
    /// Fitted with [`fit_reuse`] so the stand-in reproduces `lru_miss_ratio`.
    pub reuse_exponent: f64,
    /// Generator parameter, not a published statistic: the share of revisits that take the
    /// next address of a cyclic sweep over the used addresses in first-use order instead, for
    /// traces whose LRU miss ratio is higher than uniform revisits give. Fitted with
    /// [`fit_reuse`].
    pub reuse_scan_share: f64,
    /// Where each number comes from.
    pub provenance: Provenance,
}

/// Sources of a row's locality numbers, short forms of the citations in `docs/traces.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Provenance {
    /// Source of [`LocalityTargets::distinct_address_ratio`].
    pub distinct_address_ratio: &'static str,
    /// Source of [`LocalityTargets::lru_miss_ratio`].
    pub lru_miss_ratio: &'static str,
    /// Source of the two sequential fractions.
    pub sequential: &'static str,
}

/// Median over the 13 MSR Cambridge volumes that opencoff/go-sieve characterises
/// (bench-results.md, Trace Inventory) of distinct keys per request: msr_prn_1's
/// 2,173,575 / 11,233,411. Used where a trace has no footprint statistic of its own.
pub(crate) const MSR_MEDIAN_DISTINCT: f64 = 2_173_575.0 / 11_233_411.0;
/// Median over the same 13 volumes of the LRU miss ratio at 10% of the distinct keys
/// (bench-results.md, Miss Ratio table, LRU column): msr_proj_1's 0.7215.
pub(crate) const MSR_MEDIAN_LRU_MISS: f64 = 0.7215;
/// DAP's share of requests that continue a run: reads are 610.4 of 1,085.7 Kops (Table 2)
/// and 97% of them sequential, writes the rest and 16% sequential (Amber, Table III).
const DAP_SEQUENTIAL_SHARE: f64 = (610.4 * 0.97 + 475.3 * 0.16) / (610.4 + 475.3);
/// CFS's share of requests that continue a run: 6% of reads and of writes (Amber, Table III).
const CFS_SEQUENTIAL_SHARE: f64 = 0.06;

/// ScalaAFA (ATC'24) Table 2 with the locality of each trace. Counts, sizes and volumes are
/// the paper's; the locality sources are in each row's [`Provenance`] and in `docs/traces.md`.
/// The reuse parameters were fitted with [`fit_reuse`] at the reproduction's full run (1/8 of
/// the row's requests over 2 GiB, seed 1); the ignored test `refit_reuse_parameters` in
/// `tests/synth.rs` repeats the fit.
pub const TABLE2: [Table2Row; 6] = [
    Table2Row {
        name: "proxy0",
        writes_kops: 12135.4,
        reads_kops: 383.5,
        avg_write_kb: 4.6,
        avg_read_kb: 8.3,
        written_gb: 53.8,
        read_gb: 3.1,
        locality: LocalityTargets {
            // msr_prxy_0: 155,681 distinct keys over 12,518,968 requests — the whole volume
            // (12,135,444 writes + 383,524 reads, the counts Table 2 rounds).
            distinct_address_ratio: 155_681.0 / 12_518_968.0,
            lru_miss_ratio: 0.0476,
            sequential_read_fraction: 0.0,
            sequential_write_fraction: 0.0,
            reuse_exponent: 59.1,
            reuse_scan_share: 0.0,
            provenance: Provenance {
                distinct_address_ratio: "msr_prxy_0 distinct keys / requests, opencoff/go-sieve \
                                         bench-results.md (Trace Inventory)",
                lru_miss_ratio: "msr_prxy_0 LRU miss ratio at 10% of distinct keys, \
                                 opencoff/go-sieve bench-results.md (Miss Ratio)",
                sequential: "assumption: none published for prxy_0; no runs are generated",
            },
        },
    },
    Table2Row {
        name: "prn",
        writes_kops: 7753.0,
        reads_kops: 9066.3,
        avg_write_kb: 10.4,
        avg_read_kb: 22.5,
        written_gb: 76.8,
        read_gb: 194.5,
        locality: LocalityTargets {
            // Table 2's 16,819.3 Kops are prn_0 (5,585,886 requests) and prn_1 (11,233,411)
            // together, so both volumes' distinct keys over both volumes' requests.
            distinct_address_ratio: (711_385.0 + 2_173_575.0) / (5_585_886.0 + 11_233_411.0),
            // Request-weighted mean of prn_0's 0.2310 and prn_1's 0.4341, each volume's cache
            // being 10% of its own distinct keys.
            lru_miss_ratio: (0.2310 * 5_585_886.0 + 0.4341 * 11_233_411.0)
                / (5_585_886.0 + 11_233_411.0),
            sequential_read_fraction: 0.0,
            sequential_write_fraction: 0.0,
            reuse_exponent: 8.75,
            reuse_scan_share: 0.0,
            provenance: Provenance {
                distinct_address_ratio: "msr_prn_0 + msr_prn_1 distinct keys / requests, \
                                         opencoff/go-sieve bench-results.md (Trace Inventory)",
                lru_miss_ratio: "request-weighted msr_prn_0 and msr_prn_1 LRU miss ratios at \
                                 10%, opencoff/go-sieve bench-results.md (Miss Ratio)",
                sequential: "assumption: none published for prn_0/prn_1; no runs are generated",
            },
        },
    },
    Table2Row {
        name: "src2",
        writes_kops: 2201.1,
        reads_kops: 1171.3,
        avg_write_kb: 23.2,
        avg_read_kb: 54.8,
        written_gb: 48.8,
        read_gb: 61.2,
        locality: LocalityTargets {
            // No statistic for src2_*: the closest characterised volumes are src1_0 and
            // src1_1, the other source-control server of the same data centre.
            distinct_address_ratio: (5_659_341.0 + 6_170_590.0) / (37_415_613.0 + 45_746_222.0),
            lru_miss_ratio: (0.9132 * 37_415_613.0 + 0.8129 * 45_746_222.0)
                / (37_415_613.0 + 45_746_222.0),
            sequential_read_fraction: 0.0,
            sequential_write_fraction: 0.0,
            reuse_exponent: 1.0,
            reuse_scan_share: 0.920,
            provenance: Provenance {
                distinct_address_ratio: "closest published: msr_src1_0 + msr_src1_1 (the other \
                                         source-control server), opencoff/go-sieve",
                lru_miss_ratio: "closest published: request-weighted msr_src1_0/msr_src1_1 LRU \
                                 miss ratios at 10%, opencoff/go-sieve",
                sequential: "assumption: none published for src2_*; no runs are generated",
            },
        },
    },
    Table2Row {
        name: "CFS",
        writes_kops: 1173.0,
        reads_kops: 3304.1,
        avg_write_kb: 12.6,
        avg_read_kb: 8.7,
        written_gb: 14.1,
        read_gb: 27.3,
        locality: LocalityTargets {
            // Sequential continuations land on new addresses, so they add to the footprint;
            // the remaining requests are given the median MSR volume's footprint and miss
            // ratio, for want of a published one for CFS.
            distinct_address_ratio: CFS_SEQUENTIAL_SHARE
                + (1.0 - CFS_SEQUENTIAL_SHARE) * MSR_MEDIAN_DISTINCT,
            lru_miss_ratio: CFS_SEQUENTIAL_SHARE
                + (1.0 - CFS_SEQUENTIAL_SHARE) * MSR_MEDIAN_LRU_MISS,
            sequential_read_fraction: 0.06,
            sequential_write_fraction: 0.06,
            reuse_exponent: 1.51,
            reuse_scan_share: 0.0,
            provenance: Provenance {
                distinct_address_ratio: "assumption: runs' share + the rest at the median MSR \
                                         volume's ratio (opencoff/go-sieve); none published",
                lru_miss_ratio: "assumption: runs' share + the rest at the median MSR volume's \
                                 miss ratio (opencoff/go-sieve); none published",
                sequential: "Amber (MICRO'18) Table III: CFS random read 94%, random write 94%",
            },
        },
    },
    Table2Row {
        name: "DAP",
        writes_kops: 475.3,
        reads_kops: 610.4,
        avg_write_kb: 97.2,
        avg_read_kb: 62.1,
        written_gb: 44.1,
        read_gb: 36.2,
        locality: LocalityTargets {
            distinct_address_ratio: DAP_SEQUENTIAL_SHARE
                + (1.0 - DAP_SEQUENTIAL_SHARE) * MSR_MEDIAN_DISTINCT,
            lru_miss_ratio: DAP_SEQUENTIAL_SHARE
                + (1.0 - DAP_SEQUENTIAL_SHARE) * MSR_MEDIAN_LRU_MISS,
            sequential_read_fraction: 0.97,
            sequential_write_fraction: 0.16,
            reuse_exponent: 2.46,
            reuse_scan_share: 0.0,
            provenance: Provenance {
                distinct_address_ratio: "assumption: runs' share + the rest at the median MSR \
                                         volume's ratio (opencoff/go-sieve); none published",
                lru_miss_ratio: "assumption: runs' share + the rest at the median MSR volume's \
                                 miss ratio (opencoff/go-sieve); none published",
                sequential: "Amber (MICRO'18) Table III: DAP random read 3%, random write 84%",
            },
        },
    },
    Table2Row {
        name: "webmail",
        writes_kops: 6381.9,
        reads_kops: 1413.8,
        avg_write_kb: 4.0,
        avg_read_kb: 4.0,
        written_gb: 24.3,
        read_gb: 5.4,
        locality: LocalityTargets {
            distinct_address_ratio: MSR_MEDIAN_DISTINCT,
            // CACHEUS (FAST'21) reports ARC hitting 30.08% on FIU webmail (day 16) with a cache
            // of 10% of the footprint; LRU is taken to miss the remaining 69.92%.
            lru_miss_ratio: 1.0 - 0.3008,
            sequential_read_fraction: 0.0,
            sequential_write_fraction: 0.0,
            reuse_exponent: 1.75,
            reuse_scan_share: 0.0,
            provenance: Provenance {
                distinct_address_ratio: "assumption: the median MSR volume's ratio \
                                         (opencoff/go-sieve); none published for FIU webmail",
                lru_miss_ratio: "closest published: CACHEUS (FAST'21) ARC hit ratio 30.08% on FIU \
                                 webmail day 16 at 10% of footprint, as an LRU miss ratio",
                sequential: "assumption: none published for FIU webmail; no runs are generated",
            },
        },
    },
];

/// The Table 2 row called `name` (case-insensitive).
pub fn row(name: &str) -> Option<&'static Table2Row> {
    TABLE2.iter().find(|r| r.name.eq_ignore_ascii_case(name))
}

/// Which addressing a stand-in uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Locality {
    /// The first version: every offset uniform over the span at sector granularity, no
    /// footprint, skew or runs; kept so the effect of locality can be measured.
    None,
    /// The row's [`LocalityTargets`].
    #[default]
    Published,
}

/// A stand-in for `row` with the row's locality: `requests` requests over offsets below
/// `span_bytes` (at least 4 KiB), the same trace for the same arguments.
pub fn synth(row: &Table2Row, requests: u64, span_bytes: u64, seed: u64) -> Vec<Request> {
    synth_with(row, requests, span_bytes, seed, Locality::Published)
}

/// [`synth`] with the addressing chosen by `locality`.
pub fn synth_with(
    row: &Table2Row,
    requests: u64,
    span_bytes: u64,
    seed: u64,
    locality: Locality,
) -> Vec<Request> {
    Synth::new(row, requests, span_bytes, seed, locality).collect()
}

/// The generator as an iterator, for writing a long stand-in without holding it in memory.
///
/// Per request: the arrival time (exponential gaps), the kind (write with the row's write
/// share) and the size (1 + an exponential number of extra sectors, mean the row's size)
/// are drawn as in the first version. The offset then either continues the previous request
/// of the same kind (with the row's sequential probability), or jumps: to a fresh
/// page-aligned address uniform over the span while the distinct addresses are fewer than
/// `distinct_address_ratio` × requests so far, else to an address already used: the next
/// one of a cyclic sweep with probability `reuse_scan_share`, otherwise the one of age rank
/// floor(n · U^`reuse_exponent`).
#[derive(Debug, Clone)]
pub struct Synth {
    /// Time, kind, size and the first version's per-request offset draw.
    rng: Xoshiro256pp,
    /// Everything else the addressing draws, a separate stream so the published stand-in has
    /// the same times, kinds and sizes as [`Locality::None`] and differs only in addresses.
    addr_rng: Xoshiro256pp,
    targets: LocalityTargets,
    locality: Locality,
    remaining: u64,
    issued: u64,
    time_ns: u64,
    write_share: f64,
    mean_write_sectors: f64,
    mean_read_sectors: f64,
    span_sectors: u64,
    span_pages: u64,
    /// Addresses used so far, oldest first: the ranks of the reuse power law.
    used: Vec<u64>,
    /// The same addresses, for the membership test.
    used_set: FxHashSet<u64>,
    /// End of the previous read (index 0) and write (1).
    last_end: [Option<u64>; 2],
    /// Position of the cyclic sweep in `used`.
    scan_next: usize,
}

impl Synth {
    /// Set up a stand-in of `requests` requests; panics when `span_bytes` is below 4 KiB (one
    /// page; the first version needed one sector) since no address could be drawn.
    pub fn new(
        row: &Table2Row,
        requests: u64,
        span_bytes: u64,
        seed: u64,
        locality: Locality,
    ) -> Self {
        let min_span = if locality == Locality::None { SECTOR_BYTES } else { PAGE_BYTES };
        assert!(span_bytes >= min_span, "span of {span_bytes} B is below {min_span} B");
        // Room for the addresses the run is expected to use, so the set seldom rehashes; at
        // most PREALLOCATED_ADDRESSES, since `requests` is the caller's word and a huge one
        // must not turn into a huge allocation before a single request is drawn.
        let expected = match locality {
            Locality::None => 0,
            Locality::Published => {
                let want = row.locality.distinct_address_ratio * requests as f64 * 1.05;
                want.min(PREALLOCATED_ADDRESSES as f64) as usize + 16
            }
        };
        let mut used_set = FxHashSet::default();
        used_set.reserve(expected);
        Self {
            rng: Xoshiro256pp::seed_from_u64(seed),
            addr_rng: Xoshiro256pp::seed_from_u64(seed ^ ADDRESS_STREAM),
            targets: row.locality,
            locality,
            remaining: requests,
            issued: 0,
            time_ns: 0,
            write_share: row.write_share(),
            mean_write_sectors: row.avg_write_kb * 2.0,
            mean_read_sectors: row.avg_read_kb * 2.0,
            span_sectors: span_bytes / SECTOR_BYTES,
            span_pages: span_bytes / PAGE_BYTES,
            used: Vec::with_capacity(expected),
            used_set,
            last_end: [None, None],
            scan_next: 0,
        }
    }

    /// Uniform in (0, 1) from the main stream.
    fn unit(&mut self) -> f64 {
        unit(self.rng.next_u64())
    }

    /// Uniform in (0, 1) from the addressing stream.
    fn addr_unit(&mut self) -> f64 {
        unit(self.addr_rng.next_u64())
    }

    /// Offset for a request of kind `write`, following the run, a fresh address or a revisit;
    /// `candidate` is the main stream's per-request draw, tried first for a fresh address.
    fn offset(&mut self, write: bool, candidate: u64) -> u64 {
        let kind = write as usize;
        let p_seq = if write {
            self.targets.sequential_write_fraction
        } else {
            self.targets.sequential_read_fraction
        };
        if let Some(end) = self.last_end[kind] {
            if p_seq > 0.0 && self.addr_unit() < p_seq {
                let offset = end % (self.span_sectors * SECTOR_BYTES);
                if self.used_set.insert(offset) {
                    self.used.push(offset);
                }
                return offset;
            }
        }
        let due = self.targets.distinct_address_ratio * (self.issued + 1) as f64;
        if self.used.is_empty() || (self.used.len() as f64) < due {
            if let Some(offset) = self.fresh(candidate) {
                return offset;
            }
        }
        let n = self.used.len();
        let scan = self.targets.reuse_scan_share;
        let k = if scan > 0.0 && self.addr_unit() < scan {
            let k = self.scan_next % n;
            self.scan_next = k + 1;
            k
        } else {
            rank(self.addr_unit(), n, self.targets.reuse_exponent)
        };
        self.used[k]
    }

    /// A page-aligned address not used before, if one turns up within a few draws.
    fn fresh(&mut self, candidate: u64) -> Option<u64> {
        let mut draw = candidate;
        for _ in 0..FRESH_ADDRESS_TRIES {
            let offset = draw % self.span_pages * PAGE_BYTES;
            draw = self.addr_rng.next_u64();
            if self.used_set.insert(offset) {
                self.used.push(offset);
                return Some(offset);
            }
        }
        None
    }
}

impl Iterator for Synth {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        self.time_ns += (-self.unit().ln() * MEAN_INTERARRIVAL_NS) as u64;
        let write = self.unit() < self.write_share;
        let mean_sectors = if write { self.mean_write_sectors } else { self.mean_read_sectors };
        // Exponential sizes with the row's mean, at least one sector: mean - 1 above it.
        let extra = -self.unit().ln() * (mean_sectors - 1.0).max(0.0);
        let size_bytes = (1 + extra.round() as u64) * SECTOR_BYTES;
        let draw = self.rng.next_u64();
        let offset_bytes = match self.locality {
            Locality::None => draw % self.span_sectors * SECTOR_BYTES,
            Locality::Published => {
                let offset = self.offset(write, draw);
                self.last_end[write as usize] = Some(offset + size_bytes);
                offset
            }
        };
        self.issued += 1;
        Some(Request { time_ns: self.time_ns, write, offset_bytes, size_bytes, device: 0 })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // The lower bound is what `collect` reserves up front: bounded like the address set,
        // so a huge request count grows the vector as it fills instead of failing at once.
        let n = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        (n.min(PREALLOCATED_ADDRESSES), usize::try_from(self.remaining).ok())
    }
}

/// Uniform in (0, 1) from the top 53 bits of `x`, never 0 so its logarithm is finite (the
/// first version's mapping).
pub(crate) fn unit(x: u64) -> f64 {
    ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// Age rank in `0..n` (n >= 1) for uniform `u` in (0, 1): floor(n · u^exponent), so the
/// rank's share of n has the same distribution whatever n is.
fn rank(u: f64, n: usize, exponent: f64) -> usize {
    ((n as f64 * u.powf(exponent)) as usize).min(n - 1)
}

/// The reuse parameters, (`reuse_exponent`, `reuse_scan_share`), that make a stand-in of `row`
/// (its other targets as they are) reach `row.locality.lru_miss_ratio` on a run of `requests`
/// requests over `span_bytes` with `seed`. The miss ratio falls as the exponent grows and rises
/// with the scan share, so: if uniform revisits (exponent 1, no scan) miss too rarely, the
/// scan share is bisected over [0, 1]; otherwise log2 of the exponent is bisected over
/// [0, 12]. This is how the values in [`TABLE2`] were obtained (`docs/traces.md` has the
/// command); a target out of reach returns the nearer end.
pub fn fit_reuse(row: &Table2Row, requests: u64, span_bytes: u64, seed: u64) -> (f64, f64) {
    let target = row.locality.lru_miss_ratio;
    let miss = |exponent: f64, scan: f64| {
        let mut r = *row;
        r.locality.reuse_exponent = exponent;
        r.locality.reuse_scan_share = scan;
        let t = synth(&r, requests, span_bytes, seed);
        crate::stats::lru_miss_ratio_of(&t, LRU_CACHE_FRACTION)
    };
    const STEPS: u32 = 24;
    if miss(1.0, 0.0) < target {
        let (mut lo, mut hi) = (0.0f64, 1.0f64);
        for _ in 0..STEPS {
            let mid = 0.5 * (lo + hi);
            if miss(1.0, mid) < target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        return (1.0, 0.5 * (lo + hi));
    }
    let (mut lo, mut hi) = (0.0f64, 12.0f64);
    for _ in 0..STEPS {
        let mid = 0.5 * (lo + hi);
        if miss(mid.exp2(), 0.0) > target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    ((0.5 * (lo + hi)).exp2(), 0.0)
}

/// xoshiro256++ (Blackman and Vigna, "Scrambled linear pseudorandom number generators",
/// 2021), the generator the first version used through `rand_xoshiro`, written out here so
/// the crate needs no random-number dependency.
#[derive(Debug, Clone)]
pub(crate) struct Xoshiro256pp {
    s: [u64; 4],
}

impl Xoshiro256pp {
    /// The state is four successive outputs of SplitMix64 started at `seed`, the seeding the
    /// xoshiro authors recommend and `rand_xoshiro`'s `seed_from_u64` performs.
    pub(crate) fn seed_from_u64(seed: u64) -> Self {
        let mut x = seed;
        let mut split_mix = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let s = [split_mix(), split_mix(), split_mix(), split_mix()];
        Self { s }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }
}
