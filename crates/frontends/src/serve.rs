//! `flashrig serve`: a device stack served to real clients (NBD, a FUSE file) on the real
//! runtime until SIGINT or SIGTERM.
//!
//! Start-up, in order: the configuration's stack is built on the real runtime's reactors (an
//! array with `start = "auto"` recovers what its members hold, or formats blank members), an
//! [`Export`] wraps it, the frontend starts, and one line on stderr says where clients find it.
//! Shutdown, in order: the frontend stops taking requests, the requests in flight complete, the
//! stack is flushed (so everything acknowledged is durable), and the frontend finishes (closes
//! its connections, unmounts). A second signal during shutdown exits at once.
//!
//! While serving, SIGUSR1 (or `--scrub-every`) starts a scrub of the stack beside the clients'
//! requests; its report goes to stderr.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use flashrig_runtime::RuntimeKind;
use flashrig_serve::{Export, Frontend};

use crate::config::{Config, DeviceConfig, ScalaStart, TwophaseStart};
use crate::error::Error;

/// How often the server looks for a shutdown signal.
const SIGNAL_POLL_NS: u64 = 20_000_000;
/// How often a shutdown looks whether the requests in flight completed.
const DRAIN_POLL_NS: u64 = 1_000_000;

/// What `serve` was asked besides the configuration.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// Refuse writes, trims and zeroing.
    pub read_only: bool,
    /// Format the stack's arrays even when their members hold one (`start = "create"` as
    /// configured); without it, `create` is served as `auto`.
    pub format: bool,
    pub quiet: bool,
    /// Where to write the stack's counters (every layer's, as JSON) when serving stops: what
    /// the engine did behind the requests (conversions, GC, grants, checkpoints).
    pub stats: Option<std::path::PathBuf>,
    /// Scrub the stack every this many seconds while serving (SIGUSR1 starts one at any time).
    pub scrub_every_s: Option<f64>,
    /// Listen on this Unix socket for `flashrig inject` requests (crate::faultctl).
    pub control: Option<std::path::PathBuf>,
}

/// What the server did, for the closing line.
#[derive(Clone, Debug, Default)]
pub struct ServeReport {
    pub requests: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
}

/// A frontend starter: called on reactor 0 with the export, returns the running frontend.
pub type StartFrontend = Box<dyn FnOnce(Arc<Export>) -> std::io::Result<Box<dyn Frontend>> + Send>;

/// Arrays whose `start` is `create` are served as `auto`, so a restarted server finds its data
/// instead of formatting it away; `--format` keeps `create`.
pub fn serving_config(mut cfg: Config, opts: &ServeOptions) -> Config {
    fn visit(d: &mut DeviceConfig, format: bool) {
        let (members, member) = match d {
            DeviceConfig::Scala(c) => {
                if !format && c.start == ScalaStart::Create {
                    c.start = ScalaStart::Auto;
                }
                (&mut c.members, &mut c.member)
            }
            DeviceConfig::Twophase(t) => {
                if !format && t.start == TwophaseStart::Create {
                    t.start = TwophaseStart::Auto;
                }
                (&mut t.members, &mut t.member)
            }
            DeviceConfig::Stripe(s) => (&mut s.members, &mut s.member),
            DeviceConfig::Concat(c) => (&mut c.members, &mut c.member),
            DeviceConfig::Dmzoned(d) => {
                for m in d.members.iter_mut() {
                    visit(m, format);
                }
                return;
            }
            DeviceConfig::Wbcache(w) => {
                for m in w.members.iter_mut() {
                    visit(m, format);
                }
                return;
            }
            DeviceConfig::Zoned(z) => return visit(&mut z.member, format),
            DeviceConfig::Inject(j) => return visit(&mut j.member, format),
            DeviceConfig::Csal(c) => {
                for m in c.members.iter_mut() {
                    visit(m, format);
                }
                return;
            }
            DeviceConfig::Raid(r) => (&mut r.members, &mut r.member),
            DeviceConfig::Ram(_)
            | DeviceConfig::File(_)
            | DeviceConfig::Ssd(_)
            | DeviceConfig::Nbd(_) => return,
        };
        for m in members.iter_mut() {
            visit(m, format);
        }
        if let Some(m) = member {
            visit(m, format);
        }
    }
    visit(&mut cfg.device, opts.format);
    cfg.runtime = RuntimeKind::Real;
    cfg
}

/// Serves the stack of `cfg` through the frontend `start` makes, until a signal.
pub fn serve(cfg: Config, opts: ServeOptions, start: StartFrontend) -> Result<ServeReport, Error> {
    if cfg.runtime != RuntimeKind::Real && !opts.quiet {
        eprintln!(
            "note: serving runs on the real runtime (the configuration says runtime = \"sim\", \
             which has no clock for outside clients)"
        );
    }
    let cfg = serving_config(cfg, &opts);
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal while shutting down exits at once (status 130/143 as a shell
        // reports a killed process), in case a flush hangs.
        signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, stop.clone())
            .map_err(|e| Error::Io(format!("cannot install the signal handler: {e}")))?;
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| Error::Io(format!("cannot install the signal handler: {e}")))?;
    }
    let scrub_now = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, scrub_now.clone())
        .map_err(|e| Error::Io(format!("cannot install the signal handler: {e}")))?;
    if let Some(s) = opts.scrub_every_s {
        if !(s > 0.0 && s.is_finite()) {
            return Err(Error::Input(format!("--scrub-every {s}: a positive number of seconds")));
        }
    }
    let describe = crate::run::describe_device(&cfg.device);
    let reactors = cfg.reactors;
    let device = cfg.device.clone();
    let stats_path = opts.stats.clone();
    let (res, _stats) = flashrig_runtime::run(RuntimeKind::Real, reactors, move || async move {
        let (dev, fault_layers) = crate::stack::build_with_fault_layers(&device).await?;
        // Dropped when serving ends, which stops it listening and removes its socket file.
        let _control = match &opts.control {
            Some(path) => Some(crate::faultctl::ControlSocket::listen(
                path,
                crate::faultctl::FaultLayers(fault_layers),
            )?),
            None => None,
        };
        let handle = flashrig_runtime::handle().expect("serve runs on the real runtime");
        let export = Export::new(&dev.info().name.clone(), dev, handle, opts.read_only);
        let mut frontend = start(export.clone())
            .map_err(|e| Error::Input(format!("cannot start serving: {e}")))?;
        if !opts.quiet {
            eprintln!(
                "serving {describe} ({} bytes) at {} on {reactors} reactor(s); SIGINT or SIGTERM \
                 stops after a flush",
                export.size_bytes(),
                frontend.describe()
            );
        }
        let every_ns = opts.scrub_every_s.map(|s| (s * 1e9) as u64);
        let mut next_scrub_ns = every_ns.map(|e| flashrig_runtime::now_ns().saturating_add(e));
        let scrubbing = Arc::new(AtomicBool::new(false));
        while !stop.load(Ordering::SeqCst) && !frontend.finished() {
            flashrig_runtime::sleep_ns(SIGNAL_POLL_NS).await;
            let now = flashrig_runtime::now_ns();
            let due = next_scrub_ns.is_some_and(|t| now >= t);
            if (scrub_now.swap(false, Ordering::SeqCst) || due)
                && !scrubbing.swap(true, Ordering::SeqCst)
            {
                next_scrub_ns = every_ns.map(|e| now.saturating_add(e));
                // The scrub runs beside the clients' requests, taking the engine's locks
                // stripe by stripe as a write would.
                let (dev, busy, quiet) = (export.device().clone(), scrubbing.clone(), opts.quiet);
                flashrig_runtime::spawn(async move {
                    let r = crate::scrub::scrub_device(dev.as_ref()).await;
                    match r {
                        Ok(r) if !quiet || !r.clean() => {
                            eprintln!("scrub: {}", crate::scrub::describe(&r))
                        }
                        Ok(_) => {}
                        Err(e) => eprintln!("scrub: {e}"),
                    }
                    busy.store(false, Ordering::SeqCst);
                });
            }
        }
        frontend.stop();
        export.close();
        while export.in_flight() > 0 {
            flashrig_runtime::sleep_ns(DRAIN_POLL_NS).await;
        }
        let flushed = export.device().flush().await;
        frontend.finish();
        let snapshot = opts
            .stats
            .is_some()
            .then(|| flashrig_blockdev::snapshot_stack(export.device().as_ref()));
        let c = &export.counters;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let report = ServeReport {
            requests: get(&c.reads)
                + get(&c.writes)
                + get(&c.flushes)
                + get(&c.trims)
                + get(&c.write_zeroes),
            read_bytes: get(&c.read_bytes),
            write_bytes: get(&c.write_bytes),
            errors: get(&c.errors),
        };
        flushed.map_err(|e| Error::Run(format!("the final flush failed: {e}")))?;
        Ok::<_, Error>((report, snapshot))
    });
    let (report, snapshot) = res?;
    if let (Some(path), Some(snap)) = (&stats_path, snapshot) {
        let json = serde_json::to_string_pretty(&snap).expect("a snapshot serialises");
        std::fs::write(path, json + "\n").map_err(|e| {
            Error::Io(format!("cannot write the statistics to {}: {e}", path.display()))
        })?;
    }
    if !opts.quiet {
        eprintln!(
            "stopped after {} requests ({} read, {} written, {} failed); the stack was flushed",
            report.requests,
            crate::run::human_bytes(report.read_bytes as f64),
            crate::run::human_bytes(report.write_bytes as f64),
            report.errors
        );
    }
    Ok(report)
}
