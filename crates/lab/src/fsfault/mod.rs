//! File systems under SSD faults (jaffer-thesis-2023.txt chapter 2; issue 20; docs/fsfault.md):
//! `flashrig fsfault` and `flashrig reproduce fsfault`.
//!
//! The pieces, in the order an experiment uses them:
//! - [`programs`]: the test programs of Table 2.2 and the population they run on;
//! - [`image`]: the file systems, their populated images, and the trees compared;
//! - [`host`]: tools with deadlines, loop devices, mounts, the kernel log, the FUSE server;
//! - [`experiment`]: a tracing run, and one experiment with its observations;
//! - [`classify`]: Table 2.4's taxonomy applied to an experiment's observations;
//! - [`study`]: the plan, parallel and resumable;
//! - [`report`]: the tables, CSV, heat maps, and the thesis beside ours.
//!
//! The `inject` layer the experiments run under is `flashrig_engines::inject`
//! (docs/inject.md).

pub mod classify;
pub mod experiment;
pub mod host;
pub mod image;
pub mod programs;
pub mod report;
pub mod study;
