use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::{LatencyHistogram, LatencySummary};

/// A monotonically increasing (or explicitly set) 64-bit counter shared by all reactors.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The metrics of one layer: named counters, named latency histograms and derived values
/// (ratios such as write amplification), identified by the layer's name in the stack.
///
/// Names sort in the snapshot (BTreeMap) so result files are byte-stable across runs.
#[derive(Debug)]
pub struct Registry {
    name: String,
    counters: Mutex<BTreeMap<String, Arc<Counter>>>,
    latencies: Mutex<BTreeMap<String, Arc<Mutex<LatencyHistogram>>>>,
    values: Mutex<BTreeMap<String, f64>>,
}

impl Registry {
    pub fn new(name: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            counters: Mutex::default(),
            latencies: Mutex::default(),
            values: Mutex::default(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Returns the counter with this name, creating it at zero. Layers call this once at
    /// construction and keep the `Arc`, so the map lookup is off the I/O path.
    pub fn counter(&self, name: &str) -> Arc<Counter> {
        self.counters.lock().entry(name.to_string()).or_default().clone()
    }

    pub fn latency(&self, name: &str) -> Arc<Mutex<LatencyHistogram>> {
        self.latencies.lock().entry(name.to_string()).or_default().clone()
    }

    /// Empties every latency histogram (counters and values stay): a run calls it when
    /// preconditioning ends, so the layers' latencies cover the measured window only.
    pub fn reset_latencies(&self) {
        for h in self.latencies.lock().values() {
            *h.lock() = LatencyHistogram::default();
        }
    }

    /// Sets a derived value (for example `write_amplification`).
    pub fn set_value(&self, name: &str, value: f64) {
        self.values.lock().insert(name.to_string(), value);
    }

    pub fn snapshot(&self) -> LayerSnapshot {
        LayerSnapshot {
            name: self.name.clone(),
            kind: String::new(),
            counters: self.counters.lock().iter().map(|(k, v)| (k.clone(), v.get())).collect(),
            latencies: self
                .latencies
                .lock()
                .iter()
                .map(|(k, v)| (k.clone(), v.lock().summary()))
                .collect(),
            values: self.values.lock().clone(),
            children: Vec::new(),
        }
    }
}

/// What one layer reported at the end of a run, with the layers below it as children, so the
/// result file mirrors the device stack.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LayerSnapshot {
    pub name: String,
    /// The layer's type (`ram`, `file`, `stripe`, ...).
    pub kind: String,
    pub counters: BTreeMap<String, u64>,
    pub latencies: BTreeMap<String, LatencySummary>,
    pub values: BTreeMap<String, f64>,
    pub children: Vec<LayerSnapshot>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_latencies_empties_histograms_and_keeps_counters() {
        let r = Registry::new("x");
        r.counter("writes").add(3);
        r.latency("write_ns").lock().record_ns(5);
        r.reset_latencies();
        let s = r.snapshot();
        assert_eq!(s.latencies["write_ns"].count, 0);
        assert_eq!(s.counters["writes"], 3);
        r.latency("write_ns").lock().record_ns(7);
        assert_eq!(r.snapshot().latencies["write_ns"].count, 1);
    }

    #[test]
    fn counters_are_shared_by_name() {
        let r = Registry::new("dev0");
        let a = r.counter("writes");
        let b = r.counter("writes");
        a.add(2);
        b.inc();
        r.latency("write_ns").lock().record_ns(5);
        r.set_value("waf", 1.5);
        let s = r.snapshot();
        assert_eq!(s.counters["writes"], 3);
        assert_eq!(s.latencies["write_ns"].count, 1);
        assert_eq!(s.values["waf"], 1.5);
        assert_eq!(s.name, "dev0");
    }
}
