use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Significant decimal digits kept by every latency histogram: 3 digits bound the relative
/// error of any percentile to 0.1%, which is below what any model parameter can claim.
const SIGNIFICANT_DIGITS: u8 = 3;

/// A latency histogram in nanoseconds (HdrHistogram, auto-resizing).
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    pub fn new() -> Self {
        let mut hist = Histogram::new(SIGNIFICANT_DIGITS).expect("3 significant digits is valid");
        hist.auto(true);
        Self { hist }
    }

    /// Records one latency. Zero is recorded as is; HdrHistogram stores it in its own bucket.
    pub fn record_ns(&mut self, latency_ns: u64) {
        // Auto-resize makes recording infallible for any u64 value.
        let _ = self.hist.record(latency_ns);
    }

    pub fn merge(&mut self, other: &LatencyHistogram) {
        let _ = self.hist.add(&other.hist);
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    pub fn value_at_quantile_ns(&self, quantile: f64) -> u64 {
        if self.hist.is_empty() {
            return 0;
        }
        self.hist.value_at_quantile(quantile)
    }

    pub fn summary(&self) -> LatencySummary {
        if self.hist.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: self.hist.len(),
            min_ns: self.hist.min(),
            mean_ns: self.hist.mean(),
            p50_ns: self.hist.value_at_quantile(0.50),
            p90_ns: self.hist.value_at_quantile(0.90),
            p95_ns: self.hist.value_at_quantile(0.95),
            p99_ns: self.hist.value_at_quantile(0.99),
            p999_ns: self.hist.value_at_quantile(0.999),
            max_ns: self.hist.max(),
        }
    }

    /// The full cumulative distribution as (latency_ns, fraction at or below) points, one per
    /// distinct recorded bucket, for CDF plots.
    pub fn cdf(&self) -> Vec<(u64, f64)> {
        let total = self.hist.len();
        if total == 0 {
            return Vec::new();
        }
        let mut points = Vec::new();
        let mut seen = 0u64;
        for v in self.hist.iter_recorded() {
            seen += v.count_since_last_iteration();
            points.push((
                self.hist.highest_equivalent(v.value_iterated_to()),
                seen as f64 / total as f64,
            ));
        }
        points
    }
}

/// The percentiles every report prints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min_ns: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    /// WAFLASH (§2.2) states its tail latencies at the 90th and 95th percentiles. Absent from
    /// result files written before it was added (read as 0).
    #[serde(default)]
    pub p95_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_uniform_ramp() {
        let mut h = LatencyHistogram::new();
        for v in 1..=10_000u64 {
            h.record_ns(v * 1000);
        }
        let s = h.summary();
        assert_eq!(s.count, 10_000);
        // 0.1% relative precision.
        assert!((s.p50_ns as f64 - 5_000_000.0).abs() / 5_000_000.0 < 0.002, "{s:?}");
        assert!((s.p99_ns as f64 - 9_900_000.0).abs() / 9_900_000.0 < 0.002, "{s:?}");
        assert!(s.min_ns <= 1000 && s.max_ns >= 10_000_000 - 10_000);
        let cdf = h.cdf();
        assert!((cdf.last().unwrap().1 - 1.0).abs() < 1e-12);
        assert!(cdf.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        a.record_ns(10);
        b.record_ns(1_000_000_000_000);
        a.merge(&b);
        assert_eq!(a.count(), 2);
        assert!(a.summary().max_ns >= 999_000_000_000);
    }

    #[test]
    fn empty_summary_is_zero() {
        assert_eq!(LatencyHistogram::new().summary(), LatencySummary::default());
    }
}
