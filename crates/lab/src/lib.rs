//! flashrig's lab (ARCHITECTURE.md's top layer): `flashrig reproduce <paper>`, the papers'
//! evaluations rerun in simulation with the paper's numbers beside ours.

pub mod scalaafa;
