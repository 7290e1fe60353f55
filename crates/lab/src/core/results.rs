//! Our measurements as the comparisons read them: a paper module's keys resolved to the runs
//! that answer them, and the metrics read from each run's result file.

use flashrig_frontends::report::Run;
use flashrig_metrics::LayerSnapshot;

use super::scale::Mode;
use super::schedule::{Done, Plan};

/// What a paper module names its runs by (a system on a workload, one SSD alone, ...).
pub trait RunKey: Ord + Clone + std::fmt::Debug + Send + Sync {
    /// The system a run measured, for diagnostics that summarise several runs per system;
    /// `None` for reference runs (one SSD alone, a scale check).
    fn system(&self) -> Option<&str>;
}

/// A number read from a result file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Bytes written per second of the run, in GB/s (10^9 bytes, the papers' unit).
    WriteGbps,
    /// Bytes read per second of the run, in GB/s.
    ReadGbps,
    /// Bytes read and written per second of the run, in GB/s.
    TotalGbps,
    /// A counter of the layers named `layer` (the stack's names), over the measured window.
    Layer(&'static str, &'static str),
    /// A counter of the layers named `layer` over the measured window, times `bytes`, per
    /// second of the run, in GB/s (an engine's background traffic, counted in blocks).
    LayerGbps(&'static str, &'static str, u64),
    /// Write amplification of the SSD named `layer`: its NAND program bytes over the measured
    /// window per byte the workload wrote (CSAL §6.3: the device's SMART NAND writes over
    /// fio's logical writes).
    Waf(&'static str),
    MeanLatUs,
    P99LatUs,
    ElapsedS,
    /// NAND page programs in MLC mode, summed over every SSD of the stack.
    MlcPrograms,
    /// Mean latency of every request, reads and writes (WAFLASH §5.2.1: "We include request
    /// latencies of all reads and writes").
    MeanAllLatUs,
    /// Percentiles of every request's latency.
    P95AllLatUs,
    /// Mean latency of the reads.
    MeanReadLatUs,
    /// Percentiles of the writes' and the reads' latencies.
    WriteP90LatUs,
    WriteP95LatUs,
    ReadP90LatUs,
    ReadP95LatUs,
    /// A counter summed over every SSD of the stack, over the measured window (what
    /// preconditioning did is left out).
    Ssd(&'static str),
    /// Several counters summed over every SSD of the stack, over the measured window.
    SsdSum(&'static [&'static str]),
    /// NAND page programs of every cell mode, summed over every SSD of the stack, over the
    /// measured window.
    FlashPrograms,
    /// The time-mean over a run's `workload.counter_series` of one sampled counter divided by
    /// another (WAFLASH Fig. 10: `buffer_partial_units / buffer_units`); samples whose
    /// denominator is 0 are left out.
    SeriesShare(&'static str, &'static str),
}

/// A counter summed over every SSD layer under `layer`.
pub fn ssd_counter(layer: &LayerSnapshot, name: &str) -> u64 {
    kind_counter(layer, "ssd", name)
}

/// A counter summed over every layer of type `kind` under `layer` (itself included).
pub fn kind_counter(layer: &LayerSnapshot, kind: &str, name: &str) -> u64 {
    let own = if layer.kind == kind { layer.counters.get(name).copied().unwrap_or(0) } else { 0 };
    own + layer.children.iter().map(|c| kind_counter(c, kind, name)).sum::<u64>()
}

/// A counter summed over every layer named `name` under `layer` (itself included).
pub fn named_counter(layer: &LayerSnapshot, name: &str, counter: &str) -> u64 {
    let own =
        if layer.name == name { layer.counters.get(counter).copied().unwrap_or(0) } else { 0 };
    own + layer.children.iter().map(|c| named_counter(c, name, counter)).sum::<u64>()
}

/// A counter of the layers named `name` over the measured window only.
pub fn window_named_counter(run: &Run, name: &str, counter: &str) -> u64 {
    let total = named_counter(&run.result.layers, name, counter);
    let before = run
        .result
        .workload
        .get("precondition_layers")
        .and_then(|v| serde_json::from_value::<LayerSnapshot>(v.clone()).ok())
        .map_or(0, |l| named_counter(&l, name, counter));
    total.saturating_sub(before)
}

/// A counter of the layers of type `kind` over the measured window only: the run's total minus
/// what it stood at when preconditioning ended (the result's `precondition_layers`).
pub fn window_counter(run: &Run, kind: &str, name: &str) -> u64 {
    let total = kind_counter(&run.result.layers, kind, name);
    let before = run
        .result
        .workload
        .get("precondition_layers")
        .and_then(|v| serde_json::from_value::<LayerSnapshot>(v.clone()).ok())
        .map_or(0, |l| kind_counter(&l, kind, name));
    total.saturating_sub(before)
}

/// A metric of a run, or `None` where the run has nothing to measure it by.
pub fn metric_of(run: &Run, m: Metric) -> Option<f64> {
    let t = &run.total;
    match m {
        Metric::WriteGbps => (t.elapsed_ns > 0).then(|| t.write_bytes as f64 / t.elapsed_ns as f64),
        Metric::ReadGbps => (t.elapsed_ns > 0).then(|| t.read_bytes as f64 / t.elapsed_ns as f64),
        Metric::TotalGbps => {
            (t.elapsed_ns > 0).then(|| (t.read_bytes + t.write_bytes) as f64 / t.elapsed_ns as f64)
        }
        Metric::Layer(name, counter) => Some(window_named_counter(run, name, counter) as f64),
        Metric::LayerGbps(name, counter, bytes) => (t.elapsed_ns > 0).then(|| {
            (window_named_counter(run, name, counter) * bytes) as f64 / t.elapsed_ns as f64
        }),
        Metric::Waf(name) => (t.write_bytes > 0).then(|| {
            window_named_counter(run, name, "nand_program_bytes") as f64 / t.write_bytes as f64
        }),
        Metric::MeanLatUs => (t.write_latency.count > 0).then(|| t.write_latency.mean_ns / 1e3),
        Metric::P99LatUs => {
            (t.write_latency.count > 0).then(|| t.write_latency.p99_ns as f64 / 1e3)
        }
        Metric::ElapsedS => (t.elapsed_ns > 0).then(|| t.elapsed_ns as f64 / 1e9),
        Metric::MlcPrograms => {
            Some(ssd_counter(&run.result.layers, "nand_page_programs_mlc") as f64)
        }
        Metric::MeanAllLatUs => (t.latency.count > 0).then(|| t.latency.mean_ns / 1e3),
        Metric::P95AllLatUs => (t.latency.count > 0).then(|| t.latency.p95_ns as f64 / 1e3),
        Metric::MeanReadLatUs => (t.read_latency.count > 0).then(|| t.read_latency.mean_ns / 1e3),
        Metric::WriteP90LatUs => {
            (t.write_latency.count > 0).then(|| t.write_latency.p90_ns as f64 / 1e3)
        }
        Metric::WriteP95LatUs => {
            (t.write_latency.count > 0).then(|| t.write_latency.p95_ns as f64 / 1e3)
        }
        Metric::ReadP90LatUs => {
            (t.read_latency.count > 0).then(|| t.read_latency.p90_ns as f64 / 1e3)
        }
        Metric::ReadP95LatUs => {
            (t.read_latency.count > 0).then(|| t.read_latency.p95_ns as f64 / 1e3)
        }
        Metric::Ssd(name) => Some(window_counter(run, "ssd", name) as f64),
        Metric::SsdSum(names) => {
            Some(names.iter().map(|n| window_counter(run, "ssd", n)).sum::<u64>() as f64)
        }
        Metric::FlashPrograms => Some(
            flashrig_ssd::config::CellType::ALL
                .iter()
                .map(|c| window_counter(run, "ssd", &format!("nand_page_programs_{}", c.name())))
                .sum::<u64>() as f64,
        ),
        Metric::SeriesShare(num, den) => series_share(run, num, den),
    }
}

/// A run's sampled `num / den` (see [`Metric::SeriesShare`]): the sample times in seconds of
/// the measured window, and the share at each (`None` where `den` is 0).
pub fn share_series(run: &Run, num: &str, den: &str) -> Option<(Vec<f64>, Vec<Option<f64>>)> {
    let s = run.result.workload.get("counter_series")?;
    let numbers = |v: &serde_json::Value| -> Option<Vec<f64>> {
        v.as_array()?.iter().map(|x| x.as_f64()).collect()
    };
    let times: Vec<f64> = numbers(s.get("time_ns")?)?.iter().map(|t| t / 1e9).collect();
    let c = s.get("counters")?;
    let (n, d) = (numbers(c.get(num)?)?, numbers(c.get(den)?)?);
    let shares = n.iter().zip(&d).map(|(n, d)| (*d > 0.0).then(|| n / d)).collect();
    Some((times, shares))
}

/// The time-mean of `num / den` over a run's sampled counters (see [`Metric::SeriesShare`]).
pub fn series_share(run: &Run, num: &str, den: &str) -> Option<f64> {
    let (_, shares) = share_series(run, num, den)?;
    let shares: Vec<f64> = shares.into_iter().flatten().collect();
    (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64)
}

/// A metric as a table shows it.
pub fn fmt_metric(v: f64, m: Metric) -> String {
    match m {
        Metric::WriteGbps | Metric::ReadGbps | Metric::TotalGbps | Metric::LayerGbps(..) => {
            if v < 0.1 {
                format!("{v:.4}")
            } else {
                format!("{v:.2}")
            }
        }
        Metric::Waf(_) => format!("{v:.2}"),
        Metric::Layer(..) => format!("{v:.0}"),
        Metric::MeanLatUs
        | Metric::P99LatUs
        | Metric::MeanAllLatUs
        | Metric::P95AllLatUs
        | Metric::MeanReadLatUs
        | Metric::WriteP90LatUs
        | Metric::WriteP95LatUs
        | Metric::ReadP90LatUs
        | Metric::ReadP95LatUs => {
            if v >= 10_000.0 {
                format!("{:.1} ms", v / 1e3)
            } else {
                format!("{v:.0} µs")
            }
        }
        Metric::ElapsedS => format!("{v:.3} s"),
        Metric::MlcPrograms | Metric::Ssd(_) | Metric::SsdSum(_) | Metric::FlashPrograms => {
            format!("{v:.0}")
        }
        Metric::SeriesShare(..) => format!("{:.1}%", v * 100.0),
    }
}

/// Our measurements, by key.
pub struct Results<'a, K> {
    pub plan: &'a Plan<K>,
    pub done: &'a [Done],
    pub mode: Mode,
}

impl<K: RunKey> Results<'_, K> {
    /// The finished run that answers `key`, if it was planned.
    pub fn done(&self, key: &K) -> Option<&Done> {
        self.plan.keys.get(key).map(|&i| &self.done[i])
    }
    /// The run that answers `key`, if it was planned and succeeded.
    pub fn run(&self, key: &K) -> Option<&Run> {
        self.done(key).and_then(|d| d.run.as_ref())
    }
    pub fn get(&self, key: &K, m: Metric) -> Option<f64> {
        self.run(key).and_then(|r| metric_of(r, m))
    }
    /// Whether the run that answers `key` failed.
    pub fn failed(&self, key: &K) -> bool {
        self.done(key).is_some_and(|d| d.error.is_some())
    }
    /// A table cell: the value, "failed" or "—" (not run in this mode).
    pub fn cell(&self, key: &K, m: Metric) -> String {
        match (self.done(key), self.get(key, m)) {
            (_, Some(v)) => fmt_metric(v, m),
            (Some(d), None) if d.error.is_some() => "failed".into(),
            _ => "—".into(),
        }
    }
}
