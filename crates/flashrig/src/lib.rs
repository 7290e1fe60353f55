//! flashrig as a library: configuration, stack building, workloads and results. The
//! `flashrig` binary is a thin command-line layer over this.

pub mod bench;
pub mod calibrate;
pub mod config;
pub mod crashcheck;
pub mod distribution;
pub mod error;
pub mod fiojob;
pub mod replay;
pub mod report;
pub mod reproduce;
pub mod run;
pub mod serve;
pub mod size;
pub mod ssdlab;
pub mod stack;
pub mod sweep;
pub mod tracecmd;
pub mod workload;

pub use config::Config;
pub use error::Error;
pub use run::{run, RunOutput};
