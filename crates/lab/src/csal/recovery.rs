//! Table 4: CSAL's recovery time in its three modes (§4.4, §6.4). Filled in when the `csal`
//! engine's recovery report is wired (see the module's `measure`).

use std::path::Path;

use flashrig_frontends::error::Error;

use crate::core::Mode;

/// Runs Table 4's crash-and-recover measurements and writes their report into `results`.
pub(super) fn measure(_mode: Mode, _results: &Path) -> Result<(), Error> {
    Ok(())
}

/// Table 4's section.
pub(super) fn table4(out: &mut String, _results: &Path, _mode: Mode) -> Result<(), Error> {
    out.push_str("Not measured yet.\n\n");
    Ok(())
}
