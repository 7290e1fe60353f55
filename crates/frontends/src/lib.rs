//! flashrig's frontends (ARCHITECTURE.md's layer of that name): configuration, stack building,
//! workloads, trace replay, result files, reports and plots, sweeps, benchmarks, calibration
//! and the glue that serves a stack to real clients. The `flashrig` binary is a thin
//! command-line layer over this crate and `flashrig-lab` (the reproductions of papers).

pub mod bench;
pub mod calibrate;
pub mod config;
pub mod counters;
pub mod crashcheck;
pub mod distribution;
pub mod error;
pub mod faultctl;
pub mod fiojob;
pub mod replay;
pub mod report;
pub mod run;
pub mod scrub;
pub mod serve;
pub mod size;
pub mod ssdlab;
pub mod stack;
pub mod sweep;
pub mod tracecmd;
pub mod womvlab;
pub mod workload;

pub use config::Config;
pub use error::Error;
pub use run::{run, RunOutput};
