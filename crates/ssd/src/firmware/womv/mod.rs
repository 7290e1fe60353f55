//! WOM-v coding for QLC (jaffer-thesis-2023.txt chapter 3): cells reprogrammed without erase
//! by raising their voltage levels only.
//!
//! One file per role: [`code`] (a code's table and what follows from it: same-generation
//! transitions, generations, GEN_MAX, V_MAX), [`page`] (a coded page's cells, derived from
//! the real bytes written, with EINVAL cells and the ECC budget), [`analytic`] (the thesis'
//! models: Figures 3.3-3.5), [`simd`] (the page's write pass and decode with AVX-512 VBMI
//! or AVX2, chosen at run time), [`ftl`] (erase units of coded pages with the default GC, GC_OPT
//! and NR mode, and their recovery after a power cut), [`device`] (that FTL inside the
//! emulated SSD, on its NAND timelines); docs/womv.md describes the design and
//! what is still to come.

pub mod analytic;
pub mod code;
pub mod device;
pub mod ftl;
pub mod page;
pub mod simd;

pub use code::{WomCode, WomCodeSpec};
pub use ftl::{FtlConfig, FtlCounters, FtlError, GcPolicy, VictimPolicy, WomFtl};
pub use page::{CodedPage, WriteMode, WriteRefused, WriteReport};
