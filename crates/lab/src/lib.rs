//! flashrig's lab (ARCHITECTURE.md's top layer): `flashrig reproduce <paper>`, the papers'
//! evaluations rerun in simulation with the paper's numbers beside ours.
//!
//! [`core`] is what every paper's reproduction shares: claims and their directions, the
//! comparison tables with their *why*, the diagnostics that explain a run from its result
//! file, plots, the reduced-scale rules and the run scheduler. Each paper is a module over it
//! that holds only what is the paper's own (its experiments, claims, setup text and figures):
//! [`scalaafa`], [`waflash`], [`csal`], [`fsfault`] and [`womv`].

pub mod core;
pub mod csal;
pub mod fsfault;
pub mod scalaafa;
pub mod waflash;
pub mod womv;
