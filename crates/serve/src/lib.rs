//! Frontends that serve a device stack to software nobody here wrote (ARCHITECTURE.md,
//! "frontends"): an NBD server ([`nbd`]) and a FUSE single-file export ([`fuse`]).
//!
//! Both run beside the real runtime: their threads read requests from the network or from
//! `/dev/fuse` and hand them to a reactor through an [`Export`], which turns byte ranges into
//! block commands on the stack (read-modify-write for the odd bytes at the ends) and calls back
//! when the stack completes. The stack itself runs on its reactors exactly as in `flashrig
//! run`, so what a kernel file system or qemu does to it is what the engines do under a
//! workload.

pub mod export;

pub use export::{Export, ExportError, Reply, Request};
pub mod fuse;
pub mod nbd;

/// A running frontend, as `flashrig serve` drives it: started over an [`Export`], asked to stop
/// on SIGINT or SIGTERM, and finished once the stack has been flushed.
pub trait Frontend: Send {
    /// Where clients find the export (an NBD URI, a file path), for the log line.
    fn describe(&self) -> String;
    /// Stops taking new connections and requests. Requests already submitted to the export
    /// still complete and are answered.
    fn stop(&mut self);
    /// Whether the frontend ended by itself (the FUSE file system was unmounted, say), which
    /// ends the server as a signal would.
    fn finished(&self) -> bool;
    /// Called after the stack was flushed: closes what is left (connections, the mount).
    fn finish(&mut self);
}
