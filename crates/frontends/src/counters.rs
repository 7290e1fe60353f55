//! `workload.series_counters`: chosen counters of the stack sampled over a run's measured
//! window, so a figure can plot a gauge over time (WAFLASH's Fig. 10 plots the partial page
//! ratio in the write buffer, `buffer_partial_units / buffer_units`, against running time).
//!
//! A sampler task on the calling reactor wakes once per series interval of the runtime's clock,
//! snapshots the stack and records, for each named counter, its sum over every layer that has
//! it. It issues no I/O and charges no CPU, so the simulated run it watches makes the same
//! decisions at the same times as one without it; the run's end is still the last completion
//! (or the final flush), because the main task never waits for the sampler.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;

use flashrig_blockdev::{snapshot_stack, BlockDevice, DevRef};
use flashrig_metrics::LayerSnapshot;
use flashrig_runtime::{now_ns, sleep_until_ns, spawn};
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The most samples one run keeps. A run longer than this many intervals keeps its first
/// samples and says `truncated`, so that a tiny `series_ms` cannot exhaust memory and a
/// simulation whose jobs wait forever (a lost wake-up) still ends in the runtime's stall panic
/// instead of being kept alive by the sampler's timer.
pub const MAX_SAMPLES: usize = 1_000_000;

/// The sampled counters of a run, as the result file's `workload.counter_series` holds them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CounterSeries {
    /// The sampling interval on the runtime's clock.
    pub interval_ns: u64,
    /// When each sample was taken, relative to the start of the measured window: the first at
    /// 0 (the state the window starts from), then one per interval while the jobs run.
    pub time_ns: Vec<u64>,
    /// Per counter name, its sum over the stack's layers at each sample of `time_ns`.
    pub counters: BTreeMap<String, Vec<u64>>,
    /// The run outlasted [`MAX_SAMPLES`] intervals and sampling stopped there.
    pub truncated: bool,
}

/// The sum of counter `name` over every layer of `snap` that has it, or `None` if none does.
pub fn sum_counter(snap: &LayerSnapshot, name: &str) -> Option<u64> {
    let own = snap.counters.get(name).copied();
    snap.children.iter().map(|c| sum_counter(c, name)).fold(own, |acc, v| match (acc, v) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    })
}

/// Every counter name any layer of `snap` has.
fn counter_names(snap: &LayerSnapshot, out: &mut BTreeSet<String>) {
    out.extend(snap.counters.keys().cloned());
    for c in &snap.children {
        counter_names(c, out);
    }
}

/// Refuses a name in `names` that no layer of the stack has, naming it and the counters the
/// stack does have, so that a typo fails before a long run rather than producing a flat line.
pub fn check_names(snap: &LayerSnapshot, names: &[String]) -> Result<(), Error> {
    let Some(missing) = names.iter().find(|n| sum_counter(snap, n).is_none()) else {
        return Ok(());
    };
    let mut known = BTreeSet::new();
    counter_names(snap, &mut known);
    let known: Vec<_> = known.into_iter().collect();
    Err(Error::Input(format!(
        "workload.series_counters: no layer of the stack has a counter named \"{missing}\"; \
         its counters are: {}",
        if known.is_empty() { "none".to_string() } else { known.join(", ") }
    )))
}

/// What the sampler and the run share: the series so far.
struct Shared {
    names: Vec<String>,
    start_ns: u64,
    series: CounterSeries,
}

impl Shared {
    /// Records one sample of `dev` taken now.
    fn sample(&mut self, dev: &dyn BlockDevice) -> Result<(), Error> {
        if self.series.time_ns.len() >= MAX_SAMPLES {
            self.series.truncated = true;
            return Ok(());
        }
        // The sample's time is when the reading starts: on the real clock, reading the stack
        // takes a moment of its own.
        let t_ns = now_ns().saturating_sub(self.start_ns);
        let snap = snapshot_stack(dev);
        let mut row = Vec::with_capacity(self.names.len());
        for name in &self.names {
            match sum_counter(&snap, name) {
                Some(v) => row.push(v),
                None => return check_names(&snap, &self.names),
            }
        }
        self.series.time_ns.push(t_ns);
        for (name, v) in self.names.iter().zip(row) {
            self.series.counters.entry(name.clone()).or_default().push(v);
        }
        Ok(())
    }
}

/// A running sampler; [`CounterSampler::finish`] stops it and hands over the series.
pub struct CounterSampler {
    shared: Rc<RefCell<Shared>>,
    done: Rc<Cell<bool>>,
}

impl CounterSampler {
    /// Takes the first sample of `dev` now (time 0 of the measured window) and starts a task
    /// on the calling reactor that takes one every `interval_ns` of the runtime's clock after
    /// it. `None` when `names` is empty: no sampler, and the result has no counter series.
    pub fn start(
        dev: &DevRef,
        names: &[String],
        interval_ns: u64,
    ) -> Result<Option<CounterSampler>, Error> {
        if names.is_empty() {
            return Ok(None);
        }
        let interval_ns = interval_ns.max(1);
        let start_ns = now_ns();
        let mut first = Shared {
            names: names.to_vec(),
            start_ns,
            series: CounterSeries { interval_ns, ..Default::default() },
        };
        first.sample(dev.as_ref())?;
        let shared = Rc::new(RefCell::new(first));
        let done = Rc::new(Cell::new(false));
        // The task holds the stack weakly: it must not keep the devices alive past the run,
        // since the main task does not wait for it.
        let weak = Arc::downgrade(dev);
        let (task_shared, task_done) = (shared.clone(), done.clone());
        drop(spawn(async move {
            let mut k = 1u64;
            loop {
                sleep_until_ns(start_ns.saturating_add(k.saturating_mul(interval_ns))).await;
                if task_done.get() {
                    break;
                }
                let Some(dev) = weak.upgrade() else { break };
                let mut s = task_shared.borrow_mut();
                // The names were checked at the first sample and layers do not drop counters.
                let _ = s.sample(dev.as_ref());
                if s.series.truncated {
                    break;
                }
                // The next boundary after now: a real clock that overslept skips the
                // intervals it missed rather than sampling them late in a burst.
                k = (now_ns().saturating_sub(start_ns) / interval_ns).saturating_add(1);
            }
        }));
        Ok(Some(CounterSampler { shared, done }))
    }

    /// Stops sampling (the jobs have finished) and returns the series. The task, if asleep,
    /// ends at its next wake-up without sampling; a simulation that finishes first simply
    /// drops its timer.
    pub fn finish(self) -> CounterSeries {
        std::mem::take(&mut self.shared.borrow_mut().series)
    }
}

impl Drop for CounterSampler {
    /// Stops the task however the run ends, an error included, so that it never samples a
    /// stack the run has given up.
    fn drop(&mut self) {
        self.done.set(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(counters: &[(&str, u64)], children: Vec<LayerSnapshot>) -> LayerSnapshot {
        LayerSnapshot {
            counters: counters.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
            children,
            ..Default::default()
        }
    }

    #[test]
    fn counters_sum_over_the_layers_that_have_them() {
        let stack = layer(
            &[("writes", 1)],
            vec![layer(&[("buffer_units", 3)], vec![]), layer(&[("buffer_units", 4)], vec![])],
        );
        assert_eq!(sum_counter(&stack, "buffer_units"), Some(7));
        assert_eq!(sum_counter(&stack, "writes"), Some(1));
        assert_eq!(sum_counter(&stack, "nope"), None);
        assert!(check_names(&stack, &["writes".into(), "buffer_units".into()]).is_ok());
        let e = check_names(&stack, &["buffer_units".into(), "bufer_units".into()]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("\"bufer_units\""), "{msg}");
        assert!(msg.contains("buffer_units, writes"), "{msg}");
        assert_eq!(e.exit_code(), 2);
    }
}
