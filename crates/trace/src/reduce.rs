//! Trace reduction after Jaffer's thesis (2023, §3.7.2 "Trace Reduction"): shrink a trace so
//! its footprint fits a smaller (emulated) drive while keeping (1) the distribution of page
//! update frequencies, (2) the relative order of accesses and (3) the pages per request.
//!
//! * Segment-based reduction: keep one contiguous segment of the trace — valid when the
//!   update-frequency distribution is stable along the trace (MSR, FIU in the thesis). The
//!   thesis sizes the segment so its distinct pages equal the device's page count
//!   ([`segment_by_capacity`]); [`segment_by_time`] is the plain time-window form.
//! * Subset-based selection: sort the distinct pages by update frequency and keep every
//!   `reduction_factor`-th one, then keep only requests to kept pages ([`subset`]) — for
//!   traces whose distribution drifts over time (Alibaba in the thesis).
//!
//! Validation ([`r_squared`]) compares the fraction of pages with each update frequency.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::record::Request;
use crate::stats::pages;

/// Acceptance bound on [`r_squared`] from Jaffer, "Improving the endurance of next generation
/// SSD's using WOM-v codes", PhD thesis 2023, §3.7.2 "Reduced Trace Validation": "We accept all
/// traces that can be reduced ... with the observed variance of r^2 >= 0.05". The statistic is
/// a *variance of errors* (their worked example, Alibaba device 4 reduced 10×, has
/// r² = 0.006 and "captures the trace ... very well"), so smaller is better and the printed
/// `>=` can only be read as an upper bound: a reduction is accepted when `r_squared <= 0.05`.
pub const R_SQUARED_BOUND: f64 = 0.05;

/// Keep requests with `start_ns <= time_ns < end_ns` (a contiguous time window).
pub fn segment_by_time(reqs: &[Request], start_ns: u64, end_ns: u64) -> Vec<Request> {
    reqs.iter().filter(|r| r.time_ns >= start_ns && r.time_ns < end_ns).copied().collect()
}

/// The thesis' segment: starting at request index `start`, the longest contiguous run of
/// requests whose distinct 4 KiB pages (read or written) do not exceed `capacity_pages`.
pub fn segment_by_capacity(reqs: &[Request], start: usize, capacity_pages: u64) -> Vec<Request> {
    let mut seen: FxHashSet<(u32, u64)> = FxHashSet::default();
    let mut end = start.min(reqs.len());
    'outer: for r in &reqs[end..] {
        let new: Vec<u64> = pages(r).filter(|p| !seen.contains(&(r.device, *p))).collect();
        if seen.len() as u64 + new.len() as u64 > capacity_pages {
            break 'outer;
        }
        seen.extend(new.into_iter().map(|p| (r.device, p)));
        end += 1;
    }
    reqs[start.min(reqs.len())..end].to_vec()
}

/// Subset-based selection with an explicit reduction factor (>= 1): pages touched by the trace
/// are sorted by (write count, device, page) and every `factor`-th is kept; a request is kept
/// when its first page is kept, so requests keep their size (property 3) and order (2).
/// Addresses are left unchanged (the footprint shrinks by ~`factor`; the address range does
/// not — remap if the target device is smaller than the original address space).
pub fn subset(reqs: &[Request], factor: u64) -> Vec<Request> {
    let factor = factor.max(1);
    let mut freq: FxHashMap<(u32, u64), u32> = FxHashMap::default();
    for r in reqs {
        for p in pages(r) {
            let c = freq.entry((r.device, p)).or_insert(0);
            if r.write {
                *c = c.saturating_add(1);
            }
        }
    }
    let mut sorted: Vec<((u32, u64), u32)> = freq.into_iter().collect();
    sorted.sort_unstable_by_key(|&(k, c)| (c, k));
    let keep: FxHashSet<(u32, u64)> = sorted
        .into_iter()
        .enumerate()
        .filter(|(i, _)| (*i as u64).is_multiple_of(factor))
        .map(|(_, (k, _))| k)
        .collect();
    reqs.iter()
        .filter(|r| {
            r.size_bytes > 0
                && keep.contains(&(r.device, r.offset_bytes / crate::stats::PAGE_BYTES))
        })
        .copied()
        .collect()
}

/// Subset-based selection sized as in the thesis: reduction factor = distinct pages of the
/// trace / `capacity_pages`, rounded up.
pub fn subset_for_capacity(reqs: &[Request], capacity_pages: u64) -> Vec<Request> {
    let mut distinct: FxHashSet<(u32, u64)> = FxHashSet::default();
    for r in reqs {
        distinct.extend(pages(r).map(|p| (r.device, p)));
    }
    let factor = (distinct.len() as u64).div_ceil(capacity_pages.max(1));
    subset(reqs, factor)
}

/// Update-frequency histogram of a request slice (`hist[k]` = 4 KiB pages written k times).
pub fn update_freq(reqs: &[Request]) -> Vec<u64> {
    crate::stats::TraceStats::of(reqs).update_freq_histogram()
}

/// The thesis' validation statistic. With p_i = (pages with update frequency i) / (pages in
/// the trace) for the original and p'_i for the reduced trace, e_i = p_i − p'_i; the thesis
/// calls the *variance* of e_i "r²". Over every frequency i ≥ 1 present in either trace the
/// e_i sum to zero (both p and p' sum to 1), so the variance is the mean of e_i². Returns 0
/// when both histograms are empty and 1 (worst) when exactly one is. Inputs are histograms as
/// returned by [`update_freq`] (`hist[k]` = pages written k times; index 0 ignored).
pub fn r_squared(original_update_freq: &[u64], reduced_update_freq: &[u64]) -> f64 {
    let total = |h: &[u64]| h.iter().skip(1).sum::<u64>();
    let (to, tr) = (total(original_update_freq), total(reduced_update_freq));
    if to == 0 || tr == 0 {
        return if to == tr { 0.0 } else { 1.0 };
    }
    let n = original_update_freq.len().max(reduced_update_freq.len());
    let (mut sum_sq, mut buckets) = (0.0, 0u64);
    for i in 1..n {
        let a = original_update_freq.get(i).copied().unwrap_or(0);
        let b = reduced_update_freq.get(i).copied().unwrap_or(0);
        if a == 0 && b == 0 {
            continue;
        }
        let e = a as f64 / to as f64 - b as f64 / tr as f64;
        sum_sq += e * e;
        buckets += 1;
    }
    sum_sq / buckets as f64
}

/// True when a reduction passes the thesis' bound ([`R_SQUARED_BOUND`]).
pub fn accepted(original_update_freq: &[u64], reduced_update_freq: &[u64]) -> bool {
    r_squared(original_update_freq, reduced_update_freq) <= R_SQUARED_BOUND
}

/// The coefficient of determination R² = 1 − SS_res/SS_tot between the two p_i vectors — not
/// what the thesis computes, offered for callers who want the usual "higher is better" fit.
pub fn coefficient_of_determination(original: &[u64], reduced: &[u64]) -> f64 {
    let total = |h: &[u64]| h.iter().skip(1).sum::<u64>().max(1) as f64;
    let (to, tr) = (total(original), total(reduced));
    let n = original.len().max(reduced.len());
    let p: Vec<f64> = (1..n).map(|i| original.get(i).copied().unwrap_or(0) as f64 / to).collect();
    let q: Vec<f64> = (1..n).map(|i| reduced.get(i).copied().unwrap_or(0) as f64 / tr).collect();
    if p.is_empty() {
        return 1.0;
    }
    let mean = p.iter().sum::<f64>() / p.len() as f64;
    let ss_tot: f64 = p.iter().map(|x| (x - mean) * (x - mean)).sum();
    let ss_res: f64 = p.iter().zip(&q).map(|(x, y)| (x - y) * (x - y)).sum();
    if ss_tot == 0.0 {
        return if ss_res == 0.0 { 1.0 } else { 0.0 };
    }
    1.0 - ss_res / ss_tot
}
