//! The single error type of the crate. Parse errors carry file name and 1-based line number so
//! a user can jump straight to the offending record in a multi-GB trace.

use thiserror::Error;

/// Everything that can go wrong reading or writing a trace.
#[derive(Debug, Error)]
pub enum TraceError {
    /// A malformed record: `file:line: problem`.
    #[error("{file}:{line}: {msg}")]
    Parse {
        /// File name (last path component) or the in-memory source's label.
        file: String,
        /// 1-based line number.
        line: u64,
        /// What is wrong with the record.
        msg: String,
    },
    /// The file could not be opened or read.
    #[error("{file}: {source}")]
    Io {
        /// File name.
        file: String,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An unknown `--format` name.
    #[error("unknown trace format `{0}` (expected one of: msr, fiu, spc, alibaba, disksim, vscsi, blkparse)")]
    UnknownFormat(String),
}
