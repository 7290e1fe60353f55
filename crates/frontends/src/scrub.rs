//! `flashrig scrub <config>`: opens the configuration's stack as a server would (arrays
//! recover what their members hold; nothing is formatted), walks every block the redundant
//! layers hold, verifies checksums and parity or replicas, repairs what redundancy allows,
//! flushes the repairs, and reports (ZFS's `zpool scrub`, md's `check`/`repair` in one).
//!
//! A served stack is scrubbed in place: `flashrig serve ... --scrub-every SECONDS`, or a
//! SIGUSR1 to the server, runs the same walk beside the clients' requests.

use flashrig_blockdev::{BlockDevice, DevError, ScrubReport, VendorCommand, VendorReply};
use flashrig_runtime::RuntimeKind;

use crate::config::Config;
use crate::error::Error;
use crate::serve::{serving_config, ServeOptions};

/// Scrubs `dev`; an error when nothing in it can be scrubbed.
pub async fn scrub_device(dev: &dyn BlockDevice) -> Result<ScrubReport, Error> {
    match dev.vendor(VendorCommand::Scrub).await {
        Ok(VendorReply::Scrubbed(r)) => Ok(r),
        Ok(other) => Err(Error::Run(format!("the stack answered a scrub with {other:?}"))),
        Err(DevError::Unsupported { .. }) => Err(Error::Input(format!(
            "{}: the stack keeps no redundancy to scrub (raid, twophase and scala layers do, \
             anywhere in the stack)",
            dev.info().name
        ))),
        Err(e) => Err(Error::Run(format!("scrub: {e}"))),
    }
}

/// One line per report, for the terminal and the server's log.
pub fn describe(r: &ScrubReport) -> String {
    format!(
        "{} blocks checked, {} failed their checksum, {} redundancy mismatches, {} repaired, \
         {} unrepairable",
        r.blocks_checked, r.checksum_errors, r.redundancy_mismatches, r.repaired, r.unrepairable
    )
}

/// Builds the stack of `cfg` on the real runtime, scrubs it, flushes the repairs.
pub fn scrub(cfg: Config) -> Result<ScrubReport, Error> {
    let cfg = serving_config(cfg, &ServeOptions::default());
    let device = cfg.device.clone();
    let (res, _) = flashrig_runtime::run(RuntimeKind::Real, cfg.reactors, move || async move {
        let dev = crate::stack::build(&device).await?;
        let report = scrub_device(dev.as_ref()).await;
        // The repairs are writes like any other: durable once flushed.
        let flushed = dev.flush().await;
        let report = report?;
        flushed.map_err(|e| Error::Run(format!("flushing the repairs: {e}")))?;
        Ok::<_, Error>(report)
    });
    res
}
