//! The NBD server (to be written).

use std::path::PathBuf;
use std::sync::Arc;

use crate::{Export, Frontend};

/// Where the server listens.
#[derive(Clone, Debug)]
pub enum Listen {
    /// A Unix socket at this path (created; an existing socket file is replaced).
    Unix(PathBuf),
    /// TCP on this address (loopback by default).
    Tcp(std::net::SocketAddr),
}

/// The server's settings.
#[derive(Clone, Debug)]
pub struct NbdConfig {
    pub listen: Listen,
    /// The export's name (clients may also ask for "" and get this export).
    pub export_name: String,
    /// A human description sent with NBD_INFO_DESCRIPTION.
    pub description: String,
}

/// Starts serving `export`: binds the socket and returns once it accepts connections.
pub fn start(export: Arc<Export>, cfg: NbdConfig) -> std::io::Result<Box<dyn Frontend>> {
    let _ = (export, cfg);
    Err(std::io::Error::other("the NBD server is not written yet"))
}
