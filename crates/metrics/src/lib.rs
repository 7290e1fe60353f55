//! Metrics core: counters, latency histograms, one registry per layer of a device stack, and
//! the versioned JSON result file that every run writes.
//!
//! A layer (a device or an engine) owns a [`Registry`]. Counters are atomics so any reactor may
//! bump them; histograms sit behind a mutex because HdrHistogram is not thread-safe, so hot
//! paths that record many latencies keep a private [`LatencyHistogram`] and merge it at the end.

mod histogram;
mod registry;
mod result;

pub use histogram::{LatencyHistogram, LatencySummary};
pub use registry::{Counter, LayerSnapshot, Registry};
pub use result::{RunResult, RESULT_FORMAT, RESULT_VERSION};
