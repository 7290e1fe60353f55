//! Plain devices at the bottom of a stack: [`ram::RamDevice`] (sparse memory),
//! [`file::FileDevice`] (a regular file or a block device) and [`nbd::NbdDevice`] (a remote NBD
//! export, so a stack's members can live on other machines; real runtime only).
//!
//! RAM and file devices complete commands without modelled delay unless a fixed `latency_ns` is
//! configured, in which case every command takes that long on the runtime's clock (virtual in
//! sim). The emulated SSD, which models time in detail, lives in its own crate.

pub mod aligned;
pub mod file;
pub mod nbd;
pub mod ram;
pub mod uring;

pub use file::{FileDevice, FileOptions, IoEngine};
pub use nbd::{NbdDevice, NbdError, NbdOptions, NbdUri};
pub use ram::RamDevice;

/// Waits `latency_ns` on the runtime clock when a fixed device latency is configured.
pub(crate) async fn model_latency(latency_ns: u64) {
    if latency_ns > 0 {
        flashrig_runtime::sleep_ns(latency_ns).await;
    }
}
