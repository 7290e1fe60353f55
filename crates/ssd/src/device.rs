//! The emulated SSD as a block device.
//!
//! The controller sits behind one lock (an SSD's firmware handles commands in order); a
//! command does its bookkeeping under the lock, learns when it completes, and then waits on
//! the runtime's clock until that time (always in simulation; in `paced` timing on the real
//! runtime). A power loss bumps the device's epoch: commands submitted before it that had not
//! completed fail with `DeviceFailed`, as a host would see them time out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{
    check_io, check_range, BlockDevice, DevError, DevResult, DeviceInfo, VendorCommand,
    VendorReply, WriteHints, ZoneCommand, ZoneReply,
};
use flashrig_metrics::{LatencyHistogram, Registry};
use flashrig_runtime::{now_ns, runtime_kind, sleep_until_ns, RuntimeKind};
use parking_lot::Mutex;

use crate::config::{CellType, SsdConfig, Timing};
use crate::firmware::ftl::RecoveryStep;
use crate::firmware::Controller;

struct State {
    ctl: Controller,
    powered: bool,
}

pub struct Ssd {
    info: DeviceInfo,
    cfg: SsdConfig,
    state: Mutex<State>,
    /// Power losses so far; a command that sees it change while it waits has failed. Kept
    /// outside the lock so completing a command does not take it again.
    epoch: AtomicU64,
    metrics: Arc<Registry>,
    /// Device-side latency of host commands by kind, submission to completion in the
    /// runtime's clock (queueing inside the device included), in the layer's `latencies`.
    lat: CommandLatency,
}

/// The histograms of [`Ssd::lat`], kept so recording does not look them up by name.
struct CommandLatency {
    read: Arc<Mutex<LatencyHistogram>>,
    write: Arc<Mutex<LatencyHistogram>>,
    convert: Arc<Mutex<LatencyHistogram>>,
    /// Zone management commands of a zoned device (zone appends count as writes).
    zone: Option<Arc<Mutex<LatencyHistogram>>>,
}

/// What a power cycle did, step by step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryReport {
    pub steps: Vec<RecoveryStep>,
}

impl Ssd {
    /// Builds an SSD from a validated configuration; `name` names it in reports.
    pub fn new(name: &str, cfg: &SsdConfig) -> Result<Ssd, String> {
        let ctl = Controller::new(cfg)?;
        // In payload mode `none` metadata is accepted like data and, like data, not kept:
        // engines that write metadata (for their own recovery) still run in timing-only
        // experiments, and read zeros back.
        let mut info = DeviceInfo::new(name, cfg.firmware.block_bytes, ctl.layout.num_blocks)
            .with_md_bytes(cfg.firmware.md_bytes);
        info.caps.fua = true;
        info.caps.write_hints = true;
        // Host metadata is programmed in the same operation as its data.
        info.caps.md_atomic = true;
        // ScalaAFA's conversion command, when the firmware has it (docs/ssd.md).
        info.caps.convert = cfg.firmware.vendor_convert;
        info.caps.timing_only = cfg.payload != crate::config::PayloadMode::Full;
        // A write smaller than a mapping unit costs a read-modify-write, so the unit is the
        // granularity the device prefers; a zoned namespace stages such writes in the zone's
        // page (docs/ssd.md, "Zoned namespace") and prefers none.
        info.optimal_io_blocks = (cfg.firmware.iu_bytes / cfg.firmware.block_bytes).max(1);
        if let Some(table) = ctl.zones.as_ref() {
            info.zones = Some(*table.geometry());
            info.caps.zones = true;
            info.optimal_io_blocks = 1;
        }
        let metrics = Registry::new(name);
        let zoned = info.zones.is_some();
        Ok(Ssd {
            info,
            cfg: cfg.clone(),
            state: Mutex::new(State { ctl, powered: true }),
            epoch: AtomicU64::new(0),
            lat: CommandLatency {
                read: metrics.latency("read_ns"),
                write: metrics.latency("write_ns"),
                convert: metrics.latency("convert_ns"),
                // Registered only on zoned devices, so other results keep their histograms.
                zone: zoned.then(|| metrics.latency("zone_mgmt_ns")),
            },
            metrics,
        })
    }

    /// What start-up from the `backing` image file did (`None` without one).
    pub fn start_report(&self) -> Option<RecoveryReport> {
        self.state.lock().ctl.start_report.clone().map(|steps| RecoveryReport { steps })
    }

    pub fn config(&self) -> &SsdConfig {
        &self.cfg
    }

    /// Cuts power now: volatile state is lost and commands in flight fail.
    pub fn power_fail(&self) -> RecoveryStep {
        let mut st = self.state.lock();
        st.powered = false;
        self.epoch.fetch_add(1, Ordering::SeqCst);
        let t = if flashrig_runtime::in_runtime() { now_ns() } else { 0 };
        st.ctl.power_loss(t)
    }

    /// Restores power: rebuilds the FTL from the media; commands are accepted again.
    pub fn power_on(&self) -> RecoveryReport {
        let mut st = self.state.lock();
        let t = if flashrig_runtime::in_runtime() { now_ns() } else { 0 };
        let steps = st.ctl.recover(t);
        st.powered = true;
        RecoveryReport { steps }
    }

    /// Power loss followed by recovery.
    pub fn power_cycle(&self) -> RecoveryReport {
        let first = self.power_fail();
        let mut r = self.power_on();
        r.steps.insert(0, first);
        r
    }

    /// Runs `f` on the controller (for tests and reports).
    pub fn with_controller<T>(&self, f: impl FnOnce(&mut Controller) -> T) -> T {
        f(&mut self.state.lock().ctl)
    }

    /// Submits a command to the controller and returns its completion time and epoch.
    fn submit(
        &self,
        f: impl FnOnce(&mut Controller, u64) -> DevResult<u64>,
    ) -> DevResult<(u64, u64)> {
        let mut st = self.state.lock();
        if !st.powered {
            return Err(DevError::DeviceFailed { name: self.info.name.clone() });
        }
        let t = now_ns();
        let done = f(&mut st.ctl, t)?;
        // A device whose image file cannot be written has lost its media: fail like one.
        if let Some(e) = st.ctl.ftl.image_error() {
            return Err(DevError::Io { path: self.info.name.clone(), message: e });
        }
        Ok((done, self.epoch.load(Ordering::SeqCst)))
    }

    /// Records a command submitted now that completes at `done_ns`.
    fn record(&self, hist: &Mutex<LatencyHistogram>, done_ns: u64) {
        hist.lock().record_ns(done_ns.saturating_sub(now_ns()));
    }

    async fn complete(&self, (done_ns, epoch): (u64, u64)) -> DevResult<()> {
        let pace = self.cfg.timing == Timing::Paced || runtime_kind() == Some(RuntimeKind::Sim);
        if pace && done_ns > now_ns() {
            sleep_until_ns(done_ns).await;
        }
        if self.epoch.load(Ordering::SeqCst) != epoch {
            return Err(DevError::DeviceFailed { name: self.info.name.clone() });
        }
        Ok(())
    }

    /// Copies the controller's counters into the metrics registry.
    fn publish(&self) {
        let st = self.state.lock();
        let c = &st.ctl.counters;
        let f = st.ctl.ftl.counters();
        let n = &st.ctl.ftl.timer().counters;
        let layout = &st.ctl.layout;
        let r = &self.metrics;
        let set = |name: &str, v: u64| r.counter(name).set(v);
        set("host_read_cmds", c.read_cmds);
        set("host_write_cmds", c.write_cmds);
        set("host_read_bytes", c.read_bytes);
        set("host_write_bytes", c.write_bytes);
        set("host_flushes", c.flushes);
        set("host_trims", c.trims);
        set("host_trim_bytes", c.trim_bytes);
        set("host_fua_writes", c.fua_writes);
        set("buffer_read_hits", c.buffer_read_hits);
        set("buffer_partial_read_hits", c.buffer_partial_read_hits);
        set("buffer_write_hits", c.buffer_write_hits);
        set("buffer_writebacks", c.buffer_writebacks);
        set("buffer_waits", c.buffer_waits);
        set("rmw_reads", f.rmw_reads);
        set("partial_writebacks", c.partial_writebacks);
        set("buffer_partial_to_full", c.buffer_partial_to_full);
        set("buffer_partial_units", c.buffer_partial_units);
        set("buffer_units", st.ctl.buffered_units() as u64);
        let ps = st.ctl.buffer_stats();
        set("buffer_delayed_partial", ps.delayed_partial);
        set("buffer_pcd_samples", ps.pcd_samples);
        // Only runs that batch-destage publish this, so other results keep their counters.
        if let Some(batched) = ps.batch_destaged {
            set("buffer_batch_destaged", batched);
        }
        set("power_losses", c.power_losses);
        let cv = &st.ctl.engine.counters;
        set("convert_cmds", cv.cmds);
        set("convert_read_bytes", cv.read_bytes);
        set("convert_parity_bytes", cv.parity_bytes);
        set("convert_engine_busy_ns", cv.engine_busy_ns);
        set("host_queue_waits", st.ctl.hostif.queue_waits);
        set("ftl_host_units", f.host_slots);
        set("gc_copies", f.gc_copies);
        set("gc_lines", f.gc_lines);
        set("gc_background_lines", f.gc_background_lines);
        set("slc_evictions", f.slc_evictions);
        set("slc_evicted_lines", f.slc_evicted_lines);
        set("slc_evicted_idle", f.slc_evicted_idle);
        // Only an idle-time evictor lets host writes pass a full cache, so other results keep
        // their counter set.
        if self.cfg.firmware.slc_eviction == crate::config::SlcEviction::Idle {
            set("slc_bypassed_units", f.slc_bypassed_units);
        }
        set("slc_transient_units", f.slc_transient_units);
        set("slc_evicted_transient", f.slc_evicted_transient);
        set("slc_transient_died", f.slc_transient_died);
        set("pad_units", f.pad_slots);
        set("oob_mismatches", f.oob_mismatches);
        // MV-FTL's counters exist only in its runs, so the page-level FTL's results keep the
        // counter set they always had.
        if self.cfg.firmware.ftl_policy == crate::config::FtlPolicy::Mv {
            set("mv_versions_written", f.mv_versions_written);
            set("mv_extra_reads", f.mv_extra_reads);
            set("mv_merges", f.mv_merges);
            set("mv_idle_merges", f.mv_idle_merges);
            set("mv_chained_units", f.mv_chained_units);
            set("mv_chain_versions", f.mv_chain_versions);
            set("mv_compacted_pages", f.mv_compacted_pages);
            set("mv_compacted_units", f.mv_compacted_units);
        }
        // Only zoned namespaces publish zone counters, so other results keep their set.
        if st.ctl.zones.is_some() {
            set("zone_resets", f.zone_resets);
            set("zone_finishes", f.zone_finishes);
            set("zone_staged_saves", f.zone_staged_saves);
        }
        for (name, v) in st.ctl.ftl.extra_counters() {
            set(name, v);
        }
        set("block_erases", n.block_erases);
        set("nand_read_bytes", n.read_bytes);
        set("nand_program_bytes", n.program_bytes);
        set("nand_plane_busy_ns", n.plane_busy_ns);
        set("nand_gap_fills", n.gap_fills);
        set("nand_sub_requests", n.sub_requests);
        set("nand_sub_request_ns", n.sub_request_ns);
        for cell in CellType::ALL {
            set(&format!("nand_page_reads_{}", cell.name()), n.page_reads[cell as usize]);
            set(&format!("nand_page_programs_{}", cell.name()), n.page_programs[cell as usize]);
        }
        let iu = layout.iu_bytes as f64;
        let host_units = f.host_slots as f64;
        let all_units = (f.host_slots + f.gc_copies + f.slc_evictions + f.pad_slots) as f64;
        // Bytes the host asked the device to store: its writes, and the parity its conversion
        // commands produced (which the FTL programs as host units).
        let stored = c.write_bytes + cv.parity_bytes;
        if stored > 0 {
            // Device level: mapping units programmed for the host per byte it asked to store
            // (a 4 KiB write into a 64 KiB unit programs 64 KiB).
            r.set_value("waf_device", host_units * iu / stored as f64);
            r.set_value("waf_total", n.program_bytes as f64 / stored as f64);
        }
        if f.host_slots > 0 {
            // NAND level: everything programmed per unit the host's writes produced.
            r.set_value("waf_nand", all_units / host_units);
        }
        if ps.pcd_samples > 0 {
            r.set_value("buffer_acd", ps.acd);
        }
        let mut erases = st.ctl.ftl.block_erase_counts();
        erases.sort_unstable();
        if let (Some(&min), Some(&max)) = (erases.first(), erases.last()) {
            let mean = erases.iter().map(|&e| e as f64).sum::<f64>() / erases.len() as f64;
            r.set_value("erase_count_min", min as f64);
            r.set_value("erase_count_mean", mean);
            r.set_value("erase_count_p99", erases[(erases.len() - 1) * 99 / 100] as f64);
            r.set_value("erase_count_max", max as f64);
        }
    }
}

#[async_trait(?Send)]
impl BlockDevice for Ssd {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn kind(&self) -> &'static str {
        "ssd"
    }

    fn metrics(&self) -> Option<Arc<Registry>> {
        self.publish();
        Some(self.metrics.clone())
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        check_io(&self.info, lba, buf.len(), md.as_ref().map(|m| m.len()))?;
        let sub = self.submit(|c, t| c.read(t, lba, buf, md))?;
        self.record(&self.lat.read, sub.0);
        self.complete(sub).await
    }

    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        check_io(&self.info, lba, data.len(), md.map(|m| m.len()))?;
        let sub = self.submit(|c, t| c.write(t, lba, data, md, hints))?;
        self.record(&self.lat.write, sub.0);
        self.complete(sub).await
    }

    async fn flush(&self) -> DevResult<()> {
        let sub = self.submit(|c, t| c.flush(t))?;
        self.complete(sub).await
    }

    /// On a zoned namespace a trim answers `Unsupported`: a zone's blocks are freed only by
    /// resetting the zone, and a deallocation inside a zone would have to move the write
    /// pointer backwards or leave a hole the zone model has no state for (Linux likewise
    /// offers no discard on a zoned NVMe namespace). `Unsupported` rather than `Invalid`
    /// because no arguments would make it succeed.
    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        if self.info.zones.is_some() {
            return Err(DevError::Unsupported { command: "trim on a zoned namespace" });
        }
        check_range(&self.info, lba, num_blocks)?;
        if num_blocks == 0 {
            return Ok(());
        }
        let sub = self.submit(|c, t| c.trim(t, lba, num_blocks))?;
        self.complete(sub).await
    }

    /// Zone management and zone append on a zoned namespace (`[zoned]` in the configuration;
    /// docs/ssd.md, "Zoned namespace"); `Unsupported` otherwise.
    async fn zone(&self, cmd: ZoneCommand) -> DevResult<ZoneReply> {
        if self.info.zones.is_none() {
            return Err(DevError::Unsupported { command: "zone" });
        }
        let append = matches!(cmd, ZoneCommand::Append { .. });
        let mut reply = None;
        let sub = self.submit(|c, t| {
            let (done, r) = c.zone(t, cmd)?;
            reply = Some(r);
            Ok(done)
        })?;
        match (append, self.lat.zone.as_ref()) {
            (false, Some(h)) => self.record(h, sub.0),
            _ => self.record(&self.lat.write, sub.0),
        }
        self.complete(sub).await?;
        Ok(reply.expect("a submitted zone command replies"))
    }

    /// ScalaAFA's conversion command when `firmware.vendor_convert` is set (docs/ssd.md,
    /// "Conversion command"); nothing else.
    async fn vendor(&self, cmd: VendorCommand<'_>) -> DevResult<VendorReply> {
        match cmd {
            VendorCommand::Convert(c) if self.cfg.firmware.vendor_convert => {
                let sub = self.submit(|ctl, t| ctl.convert(t, &c))?;
                self.record(&self.lat.convert, sub.0);
                self.complete(sub).await?;
                Ok(VendorReply::Done)
            }
            VendorCommand::Convert(_) => Err(DevError::Unsupported { command: "convert" }),
            VendorCommand::Compute(_) => Err(DevError::Unsupported { command: "compute" }),
            // The SSD keeps no redundancy of its own above its ECC, which the model does not
            // fail; a scrub is the array's job.
            VendorCommand::Scrub => Err(DevError::Unsupported { command: "scrub" }),
        }
    }
}
