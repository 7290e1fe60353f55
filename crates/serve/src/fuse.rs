//! The FUSE single-file export (to be written).

use std::path::PathBuf;
use std::sync::Arc;

use crate::{Export, Frontend};

/// The mount's settings.
#[derive(Clone, Debug)]
pub struct FuseConfig {
    /// An existing empty directory to mount on.
    pub mountpoint: PathBuf,
    /// The name of the one file in the mount.
    pub file_name: String,
}

/// Mounts the file system and returns once the file is visible.
pub fn mount(export: Arc<Export>, cfg: FuseConfig) -> std::io::Result<Box<dyn Frontend>> {
    let _ = (export, cfg);
    Err(std::io::Error::other("the FUSE export is not written yet"))
}
