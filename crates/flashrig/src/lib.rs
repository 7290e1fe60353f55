//! flashrig as a library. The code lives in `flashrig-frontends` (configuration, stack
//! building, workloads, results) and `flashrig-lab` (reproductions of papers); this crate holds
//! the `flashrig` binary and re-exports both, so `flashrig::config`, `flashrig::run` and the
//! other paths that users and the integration tests name keep working.

pub use flashrig_frontends::*;
pub use flashrig_lab as lab;
/// `flashrig reproduce scalaafa`, under the name it had before the lab crate existed.
pub use flashrig_lab::scalaafa as reproduce;
