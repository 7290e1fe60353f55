//! flashrig-trace: read real block I/O traces (MSR Cambridge, FIU, SPC/UMass, Alibaba, DiskSim
//! ASCII as replayed by MQSim/SSDSim, CloudPhysics vscsi CSV, blkparse text) into one
//! [`Request`] stream, characterise them ([`stats`]), shrink them ([`reduce`]) and write them
//! back out ([`write`]). Readers stream line by line so multi-GB traces never sit in memory.
//! [`synth`] generates stand-ins for ScalaAFA's Table 2 traces with published locality,
//! [`waflash`] those for WAFLASH's six traces (unaligned-write ratios) and its Fig. 2 noise.

pub mod bench;
pub mod error;
pub mod formats;
pub mod record;
pub mod reduce;
pub mod stats;
pub mod synth;
pub mod waflash;
pub mod write;

pub use bench::bench_parse_msr;
pub use error::TraceError;
pub use formats::{detect, detect_file, open, open_with, Format, Options, Reader};
pub use record::Request;
pub use stats::{LocalityReport, LocalityStats, TraceStats};
pub use synth::{Locality, Synth, Table2Row, TABLE2};
