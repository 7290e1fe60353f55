//! The runtime: reactors that run tasks, pollers and timers and talk only by messages.
//!
//! This follows SPDK's model, which ScalaAFA depends on (`scalaafa-atc24.txt` §3.2, §5.2): a
//! reactor is one core; each engine keeps per-reactor state; reactors share nothing on the I/O
//! path. There are two implementations behind the same free functions ([`now_ns`],
//! [`sleep_ns`], [`charge_cpu_ns`], [`spawn`], [`send`], ...):
//!
//! * [`sim`]: every reactor runs in one OS thread on a virtual clock in nanoseconds. Tasks run in
//!   a fixed order, timers fire in (time, insertion) order, so a run is deterministic. Each
//!   reactor has a virtual CPU: work is charged explicitly with [`charge_cpu_ns`], and the
//!   reactor's busy time gives its utilisation.
//! * [`real`]: one OS thread per reactor, lock-free queues between them, the real clock.
//!   [`charge_cpu_ns`] costs nothing there, because real work takes real CPU time.
//!
//! Engine code calls the free functions and never names a runtime, which is what lets the same
//! engine be measured in simulation and served to a kernel file system.

mod context;
pub mod cost;
mod join;
pub mod real;
pub mod sim;
mod slots;
mod stats;

pub use context::{
    charge_cpu_ns, current_reactor, handle, in_runtime, now_ns, num_reactors, register_poller,
    runtime_kind, send, sleep_ns, sleep_until_ns, spawn, spawn_on, yield_now, PollerId,
    PollerStatus, RemoteHandle,
};
pub use cost::HostCosts;
pub use join::JoinHandle;
pub use stats::ReactorStats;

use serde::{Deserialize, Serialize};

/// Index of a reactor, `0..num_reactors()`.
pub type ReactorId = usize;

/// A closure sent to another reactor and run there.
pub type Message = Box<dyn FnOnce() + Send + 'static>;

/// Which runtime runs a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    /// Deterministic simulation on a virtual clock.
    #[default]
    Sim,
    /// One OS thread per reactor on the real clock.
    Real,
}

/// What a finished runtime reports besides the job's own output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunStats {
    /// Elapsed time on the runtime's clock (virtual in sim, real in real).
    pub elapsed_ns: u64,
    pub reactors: Vec<ReactorStats>,
    /// Events processed (task polls, timer firings, messages); sim only, 0 in real.
    pub events: u64,
}

/// Runs `main` (built on reactor 0) on a runtime of `kind` with `reactors` reactors until the
/// future it returns completes, and returns its output with the runtime's statistics.
pub fn run<F, Fut, T>(kind: RuntimeKind, reactors: usize, main: F) -> (T, RunStats)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + 'static,
    T: Send + 'static,
{
    match kind {
        RuntimeKind::Sim => sim::Sim::new(reactors).run(main),
        RuntimeKind::Real => real::Real::new(reactors).run(main),
    }
}
