//! `flashrig run`: build the stack, run the jobs, collect the result file.

use flashrig_blockdev::snapshot_stack;
use flashrig_metrics::{RunResult, RESULT_FORMAT, RESULT_VERSION};
use flashrig_runtime::{spawn_on, RunStats, RuntimeKind};
use serde_json::json;

use crate::config::{Config, DeviceConfig, WorkloadConfig};
use crate::counters::{CounterSampler, CounterSeries};
use crate::error::Error;
use crate::size::format_size;
use crate::workload::{run_job, JobOutcome, Progress, WorkloadSummary, SERIES_INTERVAL_NS};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The progress bar: a thread that reads [`Progress`] a few times a second. It shows the
/// runtime's clock against `runtime_ms` for time-bounded jobs and bytes against the total for
/// size-bounded ones; replays, whose length is the trace's, get a byte counter.
struct ProgressDisplay {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl ProgressDisplay {
    fn start(cfg: &Config, progress: Arc<Progress>) -> ProgressDisplay {
        let w = &cfg.workload;
        // (total, counts time) for the bar; None: a spinner.
        // Replays, whose length is the trace's, and phased runs get a spinner.
        let total = if cfg.replay.is_some() || !cfg.phase.is_empty() {
            None
        } else {
            match (w.size, w.runtime_ms) {
                (Some(s), _) => Some((s.bytes() * w.jobs as u64, false)),
                // The clock the jobs publish runs from their start, ramp included.
                (None, Some(ms)) => Some((ms + w.ramp_ms.unwrap_or(0), true)),
                (None, None) => w.range.map(|r| (r.bytes() * w.jobs as u64, false)),
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut bar: Option<indicatif::ProgressBar> = None;
            while !stop2.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                if started.elapsed() < Duration::from_secs(1) {
                    continue;
                }
                let b = bar.get_or_insert_with(|| {
                    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
                    let b = match total {
                        Some((t, _)) => ProgressBar::with_draw_target(
                            Some(t),
                            ProgressDrawTarget::stderr_with_hz(4),
                        ),
                        None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
                    };
                    let template = match total {
                        Some((_, true)) => {
                            "{elapsed_precise} [{bar:40}] {pos}/{len} ms of run time {msg}"
                        }
                        Some((_, false)) => {
                            "{elapsed_precise} [{bar:40}] {bytes}/{total_bytes} {msg}"
                        }
                        None => "{elapsed_precise} {spinner} {msg}",
                    };
                    if let Ok(style) = ProgressStyle::with_template(template) {
                        b.set_style(style.progress_chars("=> "));
                    }
                    b.with_elapsed(started.elapsed())
                });
                let bytes = progress.bytes.load(Ordering::Relaxed);
                match total {
                    Some((_, true)) => {
                        b.set_position(progress.clock_ns.load(Ordering::Relaxed) / 1_000_000);
                        b.set_message(human_bytes(bytes as f64));
                    }
                    Some((_, false)) => b.set_position(bytes),
                    None => b.tick(),
                }
            }
            if let Some(b) = bar {
                b.finish_and_clear();
            }
        });
        ProgressDisplay { stop, thread }
    }

    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

/// A finished run (or one phase of a phased run): the result file and the numbers the
/// terminal summary prints.
pub struct RunOutput {
    pub result: RunResult,
    pub summary: WorkloadSummary,
    pub stats: RunStats,
    /// The phase's name (`[[phase]]`), or `None` for a run of `[workload]` or `[replay]`.
    pub phase: Option<String>,
}

/// Runs `cfg` to completion. A phased configuration is refused here: [`run_all`] runs it.
pub fn run(cfg: &Config) -> Result<RunOutput, Error> {
    run_with_progress(cfg, false)
}

/// Runs `cfg` to completion; with `show_progress`, a progress bar on stderr for runs that take
/// more than a second of wall time (drawn only when stderr is a terminal).
pub fn run_with_progress(cfg: &Config, show_progress: bool) -> Result<RunOutput, Error> {
    if !cfg.phase.is_empty() {
        return Err(Error::Input(format!(
            "phase: this configuration has {} phases, each with a result of its own; run it \
             with `flashrig run` (or run::run_all)",
            cfg.phase.len()
        )));
    }
    let mut outs = run_all(cfg, show_progress)?;
    Ok(outs.remove(0))
}

/// Runs `cfg` to completion: one output, or one per `[[phase]]` in order. With
/// `show_progress`, a progress bar on stderr for runs that take more than a second of wall
/// time (drawn only when stderr is a terminal).
pub fn run_all(cfg: &Config, show_progress: bool) -> Result<Vec<RunOutput>, Error> {
    let progress = Arc::new(Progress::default());
    let bar = show_progress.then(|| ProgressDisplay::start(cfg, progress.clone()));
    let result = run_inner(cfg, progress);
    if let Some(b) = bar {
        b.finish();
    }
    result
}

/// What the runtime's main task hands back to [`run_inner`] for each load.
struct Outcome {
    jobs: Vec<JobOutcome>,
    total: JobOutcome,
    layers: flashrig_metrics::LayerSnapshot,
    replay_counts: Option<crate::replay::ReplayCounts>,
    /// The layers at the measured window's start (after preconditioning, a ramp, or, for a
    /// later phase, the phases before it).
    preconditioned: Option<flashrig_metrics::LayerSnapshot>,
    counter_series: Option<CounterSeries>,
}

/// The seed of phase `index`'s jobs: the run's seed for the first, so a one-phase run draws
/// what the same `[workload]` would, and a different one for each later phase, so that
/// phases of the same workload do not repeat each other's offsets.
pub fn phase_seed(seed: u64, index: usize) -> u64 {
    seed.wrapping_add((index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

fn run_inner(cfg: &Config, progress: Arc<Progress>) -> Result<Vec<RunOutput>, Error> {
    let job_cfg = cfg.clone();
    let (outcomes, stats) = flashrig_runtime::run(cfg.runtime, cfg.reactors, move || async move {
        let cfg = job_cfg;
        // The stack is built inside the runtime, so devices may start pollers and tasks.
        let dev = crate::stack::build(&cfg.device).await?;
        let loads = cfg.loads();
        // Every load is checked before preconditioning and the first phase, so a mistake in
        // the last phase does not cost the run before it. Unknown counter names fail here too.
        for (index, (name, w)) in loads.iter().enumerate() {
            let at = match name {
                None => "workload".to_string(),
                Some(_) => format!("phase[{index}].workload"),
            };
            check_workload_fits(w, &at, dev.info().block_size as u64, dev.info().capacity_bytes())?;
            if !w.series_counters.is_empty() {
                crate::counters::check_names(&snapshot_stack(dev.as_ref()), &w.series_counters)?;
            }
        }
        // The layers' counters after preconditioning, so a reader can tell what the measured
        // window did (a two-phase engine's conversions, an SSD's programs) from what the
        // preconditioning did.
        let mut preconditioned = None;
        if cfg.precondition.is_active() {
            crate::replay::precondition(&dev, &cfg.precondition, cfg.seed, cfg.replay.as_ref())
                .await?;
            preconditioned = Some(snapshot_stack(dev.as_ref()));
            // Latency histograms cannot be subtracted like counters: they restart here, so
            // the layers' latencies in the result are the measured window's.
            flashrig_blockdev::reset_stack_latencies(dev.as_ref());
        }
        if let Some(r) = &cfg.replay {
            let w = &cfg.workload;
            let interval = w.series_interval_ns();
            let counter_interval_ns = match interval {
                0 => SERIES_INTERVAL_NS,
                ns => ns,
            };
            let sampler = CounterSampler::start(&dev, &w.series_counters, counter_interval_ns)?;
            let (total, counts) =
                crate::replay::replay_with_series(dev.clone(), r.clone(), interval).await?;
            let counter_series = sampler.map(CounterSampler::finish);
            let layers = snapshot_stack(dev.as_ref());
            return Ok(vec![Outcome {
                jobs: vec![total.clone()],
                total,
                layers,
                replay_counts: Some(counts),
                preconditioned,
                counter_series,
            }]);
        }
        let mut outcomes = Vec::new();
        for (index, (_, w)) in loads.iter().enumerate() {
            if index > 0 {
                // A later phase's window starts where the phase before it ended: its counters
                // are subtracted from there and its latencies restart.
                preconditioned = Some(snapshot_stack(dev.as_ref()));
                flashrig_blockdev::reset_stack_latencies(dev.as_ref());
            }
            let seed = phase_seed(cfg.seed, index);
            let outcome = measure(&dev, w, seed, preconditioned.take(), progress.clone()).await?;
            outcomes.push(outcome);
        }
        Ok(outcomes)
    });
    let outcomes = outcomes?;
    let loads = cfg.loads();
    let phases = cfg.phase.len();
    let mut outputs = Vec::new();
    for (index, (outcome, (name, w))) in outcomes.into_iter().zip(&loads).enumerate() {
        let Outcome { jobs, total, layers, replay_counts, preconditioned, counter_series } =
            outcome;
        if total.stalled {
            let clock = if cfg.runtime == RuntimeKind::Sim { "simulated" } else { "measured" };
            let at = match name {
                None => "workload".to_string(),
                Some(_) => format!("phase[{index}].workload"),
            };
            return Err(Error::Input(match w.ramp_ms {
                Some(ramp) => format!(
                    "{at}.ramp_ms = {ramp}: the stack completes every request in zero {clock} \
                     time, so the ramp never ends; leave the ramp out, or give device latencies"
                ),
                None => format!(
                    "{at}.runtime_ms = {}: the stack completes every request in zero {clock} \
                     time, so the time limit is never reached; give {at}.size, or device \
                     latencies",
                    w.runtime_ms.unwrap_or(0)
                ),
            }));
        }
        let summary = total.summary();
        let job_summaries: Vec<_> = jobs.iter().map(|j| j.summary()).collect();
        // The reactors' figures are the whole run's: the runtime reports them once, at its end.
        let reactors: Vec<_> = stats
            .reactors
            .iter()
            .enumerate()
            .map(|(i, r)| {
                json!({
                    "reactor": i,
                    "busy_ns": r.busy_ns,
                    "utilisation": r.utilisation(stats.elapsed_ns),
                    "polls": r.polls,
                    "messages": r.messages,
                })
            })
            .collect();
        let mut workload = json!({
            "total": summary,
            "jobs": job_summaries,
            "reactors": reactors,
            "runtime_elapsed_ns": stats.elapsed_ns,
        });
        if cfg.runtime == RuntimeKind::Sim {
            workload["sim_events"] = json!(stats.events);
        }
        if let Some(c) = &replay_counts {
            workload["replay"] = json!(c);
        }
        if let Some(p) = &preconditioned {
            workload["precondition_layers"] = serde_json::to_value(p).expect("snapshot serialises");
        }
        if let Some(c) = &counter_series {
            workload["counter_series"] = serde_json::to_value(c).expect("series serialises");
        }
        if let Some(n) = name {
            workload["phase"] = json!({ "name": n, "index": index, "phases": phases });
        }
        let result = RunResult {
            format: RESULT_FORMAT.to_string(),
            version: RESULT_VERSION,
            flashrig_version: env!("CARGO_PKG_VERSION").to_string(),
            runtime: match cfg.runtime {
                RuntimeKind::Sim => "sim".into(),
                RuntimeKind::Real => "real".into(),
            },
            seed: cfg.seed,
            config: serde_json::to_value(cfg.for_phase(index)).expect("config serialises"),
            workload,
            layers,
        };
        outputs.push(RunOutput {
            result,
            summary,
            stats: stats.clone(),
            phase: name.map(str::to_string),
        });
    }
    Ok(outputs)
}

/// Runs one load's jobs on `dev` and collects them. `preconditioned` is the layers' snapshot
/// at the window's start when the load has no ramp (the ramp's end replaces it otherwise).
async fn measure(
    dev: &flashrig_blockdev::DevRef,
    w: &WorkloadConfig,
    seed: u64,
    mut preconditioned: Option<flashrig_metrics::LayerSnapshot>,
    progress: Arc<Progress>,
) -> Result<Outcome, Error> {
    let series_counters = &w.series_counters;
    let counter_interval_ns = match w.series_interval_ns() {
        0 => SERIES_INTERVAL_NS,
        ns => ns,
    };
    // Sampling starts with the measured window: without a ramp at the instant the jobs
    // start, taking its first sample before they issue anything; with one when it ends.
    let ramp_ns = w.ramp_ms.map(|ms| ms * 1_000_000);
    let sampler = match ramp_ns {
        None => CounterSampler::start(dev, series_counters, counter_interval_ns)?,
        Some(_) => None,
    };
    let ramp_start_ns = flashrig_runtime::now_ns();
    let reactors = flashrig_runtime::num_reactors();
    let mut handles = Vec::new();
    for job in 0..w.jobs as u64 {
        let dev = dev.clone();
        let w = w.clone();
        let progress = progress.clone();
        handles
            .push(spawn_on(job as usize % reactors, move || run_job(dev, w, job, seed, progress)));
    }
    let sampler = match ramp_ns {
        None => sampler,
        Some(ns) => {
            // The ramp's end is the measured window's start: the layers' counters are
            // taken there (what the result subtracts), and their latencies restart.
            flashrig_runtime::sleep_until_ns(ramp_start_ns + ns).await;
            preconditioned = Some(snapshot_stack(dev.as_ref()));
            flashrig_blockdev::reset_stack_latencies(dev.as_ref());
            CounterSampler::start(dev, series_counters, counter_interval_ns)?
        }
    };
    let mut jobs = Vec::new();
    for h in handles {
        jobs.push(h.await);
    }
    // The jobs are done: the sampler stops here, so the final flush below is not sampled
    // and its last wake-up can neither extend the run nor count as I/O (the run's end is
    // the jobs' last completion or the flush, never the sampler's clock).
    let counter_series = sampler.map(CounterSampler::finish);
    let mut total = JobOutcome {
        start_ns: u64::MAX,
        series_interval_ns: w.series_interval_ns(),
        ..Default::default()
    };
    for j in &jobs {
        total.merge(j);
    }
    if w.final_flush {
        let t0 = flashrig_runtime::now_ns();
        if let Err(e) = dev.flush().await {
            return Err(Error::Run(format!("final flush: {e}")));
        }
        total.end_ns = total.end_ns.max(flashrig_runtime::now_ns()).max(t0);
    }
    let layers = snapshot_stack(dev.as_ref());
    Ok(Outcome { jobs, total, layers, replay_counts: None, preconditioned, counter_series })
}

/// Checks the workload's sizes against the stack it runs on: request sizes and offset are whole
/// blocks, and the addressed range lies on the device and holds the largest request.
fn check_workload_fits(
    w: &WorkloadConfig,
    at: &str,
    block_bytes: u64,
    capacity: u64,
) -> Result<(), Error> {
    for s in w.request_sizes() {
        if !s.bytes().is_multiple_of(block_bytes) {
            let key = if w.bssplit.is_empty() { "bs" } else { "bssplit" };
            return Err(Error::Input(format!(
                "{at}.{key}: {s} is not a multiple of the stack's {block_bytes}-byte block"
            )));
        }
    }
    let offset = w.offset.map_or(0, |o| o.bytes());
    if !offset.is_multiple_of(block_bytes) || offset >= capacity {
        return Err(Error::Input(format!(
            "{at}.offset = {}: must be a multiple of the stack's {block_bytes}-byte block and \
             below its capacity ({})",
            format_size(offset),
            format_size(capacity)
        )));
    }
    let range = w.range.map_or(capacity - offset, |r| r.bytes());
    if offset + range > capacity {
        return Err(Error::Input(format!(
            "{at}.offset + {at}.range = {} is larger than the stack ({})",
            format_size(offset + range),
            format_size(capacity)
        )));
    }
    if let Some(inc) = w.offset_increment {
        let last_job = w.jobs.saturating_sub(1) as u64;
        let last_offset = inc.bytes().saturating_mul(last_job).saturating_add(offset);
        if !inc.bytes().is_multiple_of(block_bytes) {
            return Err(Error::Input(format!(
                "{at}.offset_increment = {inc}: not a multiple of the stack's \
                 {block_bytes}-byte block"
            )));
        }
        // Without `range` each job addresses the rest of the device from its own offset.
        let last_range = w.range.map_or(capacity.saturating_sub(last_offset), |r| r.bytes());
        if last_offset.saturating_add(last_range) > capacity || last_range == 0 {
            return Err(Error::Input(format!(
                "{at}.offset_increment = {inc}: job {last_job} would address {} from {}, \
                 past the stack's {}",
                format_size(last_range),
                format_size(last_offset),
                format_size(capacity)
            )));
        }
        if w.max_request_bytes() > last_range {
            return Err(Error::Input(format!(
                "{at}: request size {} is larger than job {last_job}'s range ({})",
                format_size(w.max_request_bytes()),
                format_size(last_range)
            )));
        }
    }
    if w.max_request_bytes() > range {
        return Err(Error::Input(format!(
            "{at}: request size {} is larger than the range it addresses ({})",
            format_size(w.max_request_bytes()),
            format_size(range)
        )));
    }
    Ok(())
}

/// The terminal summary of a run.
pub fn render_summary(cfg: &Config, run: &RunOutput) -> String {
    let s = &run.summary;
    let mut out = String::new();
    let clock = match cfg.runtime {
        RuntimeKind::Sim => "virtual",
        RuntimeKind::Real => "real",
    };
    let what = match &cfg.replay {
        Some(r) => format!(
            "replay {} ({})",
            r.trace.display(),
            match r.mode {
                crate::replay::ReplayMode::Open => format!("open loop, speed {}", r.speed),
                crate::replay::ReplayMode::Closed => format!("closed loop, iodepth {}", r.iodepth),
            }
        ),
        None => format!(
            "{} bs={} iodepth={} jobs={}",
            cfg.workload.rw.name(),
            cfg.workload.bs,
            cfg.workload.iodepth,
            cfg.workload.jobs
        ),
    };
    out.push_str(&format!(
        "{what} on {} ({} runtime, seed {})\n",
        stack_label(cfg),
        match cfg.runtime {
            RuntimeKind::Sim => "sim",
            RuntimeKind::Real => "real",
        },
        cfg.seed
    ));
    out.push_str(&format!(
        "  {} I/Os ({} reads, {} writes), {} moved in {:.3} ms of {clock} time\n",
        s.ios,
        s.reads,
        s.writes,
        human_bytes(s.bytes as f64),
        s.elapsed_ns as f64 / 1e6
    ));
    match (s.iops, s.bandwidth_bytes_per_s) {
        (Some(iops), Some(bw)) => {
            out.push_str(&format!("  IOPS {:.0}   bandwidth {}/s\n", iops, human_bytes(bw)))
        }
        _ => out.push_str(
            "  IOPS and bandwidth: undefined, no time elapsed (the stack models no latency)\n",
        ),
    }
    out.push_str(&format!(
        "  latency  p50 {}   p99 {}   p99.9 {}   max {}\n",
        human_ns(s.latency.p50_ns),
        human_ns(s.latency.p99_ns),
        human_ns(s.latency.p999_ns),
        human_ns(s.latency.max_ns)
    ));
    let busy: Vec<String> = run
        .stats
        .reactors
        .iter()
        .enumerate()
        .map(|(i, r)| format!("r{i} {:.1}%", 100.0 * r.utilisation(run.stats.elapsed_ns)))
        .collect();
    out.push_str(&format!(
        "  reactor CPU busy ({}): {}\n",
        match cfg.runtime {
            RuntimeKind::Sim => "charged by the cost model",
            RuntimeKind::Real => "measured",
        },
        busy.join("  ")
    ));
    render_engine_layers(&run.result.layers, &mut out);
    render_ssd_layers(&run.result.layers, &mut out);
    render_ssd_totals(&run.result.layers, &mut out);
    if s.errors > 0 {
        out.push_str(&format!(
            "  ERRORS {}: first: {}\n",
            s.errors,
            s.first_error.as_deref().unwrap_or("?")
        ));
    }
    out
}

/// One line per engine with background work in the stack: for the two-phase engines
/// conversions (by where they ran and why), GC, waits and the host write amplification; for
/// CSAL's baselines their hits, evictions and write-back sizes (`wbcache`) or reclaim
/// (`dmzoned`).
fn render_engine_layers(layer: &flashrig_metrics::LayerSnapshot, out: &mut String) {
    let c = |k: &str| layer.counters.get(k).copied().unwrap_or(0);
    let wa = layer.values.get("host_write_amplification").copied().unwrap_or(f64::NAN);
    match layer.kind.as_str() {
        "scala" => out.push_str(&format!(
            "  {}: {} stripes converted ({} in the SSDs, {} on the host; started by VHs \
             running low {}, idle host {}, waiting grants {}, drains {}), {} GC stripes, \
             {} writes waited for a grant; host write amplification {:.2}\n",
            layer.name,
            c("conversions_ssd") + c("conversions_host"),
            c("conversions_ssd"),
            c("conversions_host"),
            c("conversions_low"),
            c("conversions_idle"),
            c("conversions_grant"),
            c("conversions_drain"),
            c("gc_stripes"),
            c("grant_waits"),
            wa
        )),
        "wbcache" => out.push_str(&format!(
            "  {}: hits {} reads / {} writes, misses {} / {}, {} evictions, {} cleaner \
             flushes, {} cutoff bypasses; write-backs {} ({} blocks; <=4k {}, <=8k {}, <=16k {}, \
             <=32k {}, <=64k {}, more {})\n",
            layer.name,
            c("read_hits"),
            c("write_hits"),
            c("read_misses"),
            c("write_misses"),
            c("evictions"),
            c("cleaner_flushes"),
            c("cutoff_bypasses"),
            c("flush_writes"),
            c("flushed_blocks"),
            c("flush_writes_le_4k"),
            c("flush_writes_le_8k"),
            c("flush_writes_le_16k"),
            c("flush_writes_le_32k"),
            c("flush_writes_le_64k"),
            c("flush_writes_gt_64k")
        )),
        "dmzoned" => out.push_str(&format!(
            "  {}: {} direct and {} buffered writes; {} reclaims: RC-1 (random to sequential) {} \
             blocks, RC-2 (sequential to random) {} blocks, {} padding blocks, {} zone resets\n",
            layer.name,
            c("direct_writes"),
            c("buffered_writes"),
            c("reclaims"),
            c("reclaim_rc1_blocks"),
            c("reclaim_rc2_blocks"),
            c("padding_blocks"),
            c("zone_resets")
        )),
        "twophase" => out.push_str(&format!(
            "  {}: {} stripes converted, {} GC stripes, {} writes delayed by conversion or GC; \
             host write amplification {:.2}\n",
            layer.name,
            c("conversions"),
            c("gc_runs"),
            c("delayed_writes"),
            wa
        )),
        _ => {}
    }
    for child in &layer.children {
        render_engine_layers(child, out);
    }
}

/// The emulated SSDs of the stack together: what the host wrote, what the NAND programmed in
/// SLC and dense pages, and the write amplification from host writes to NAND programs.
fn render_ssd_totals(layer: &flashrig_metrics::LayerSnapshot, out: &mut String) {
    fn sum(l: &flashrig_metrics::LayerSnapshot, acc: &mut [u64; 6]) {
        if l.kind == "ssd" {
            let c = |k: &str| l.counters.get(k).copied().unwrap_or(0);
            acc[0] += 1;
            acc[1] += c("host_write_bytes");
            acc[2] += c("nand_program_bytes");
            acc[3] += c("nand_page_programs_slc");
            acc[4] += c("nand_page_programs_mlc")
                + c("nand_page_programs_tlc")
                + c("nand_page_programs_qlc");
            acc[5] += c("slc_evictions");
        }
        for ch in &l.children {
            sum(ch, acc);
        }
    }
    let mut a = [0u64; 6];
    sum(layer, &mut a);
    if a[0] < 2 || a[1] == 0 {
        return;
    }
    out.push_str(&format!(
        "  {} SSDs together: host wrote {}, NAND programmed {} ({} SLC pages, {} dense pages; \
         {} units evicted from SLC): NAND write amplification {:.2}\n",
        a[0],
        human_bytes(a[1] as f64),
        human_bytes(a[2] as f64),
        a[3],
        a[4],
        a[5],
        a[2] as f64 / a[1] as f64
    ));
}

/// One line per emulated SSD in the stack (write amplification, GC and wear) and per fault
/// layer (its injections by kind).
fn render_ssd_layers(layer: &flashrig_metrics::LayerSnapshot, out: &mut String) {
    if layer.kind == "inject" {
        let kinds: Vec<String> = layer
            .counters
            .iter()
            .filter_map(|(k, n)| Some(format!("{} {}", k.strip_prefix("injected_")?, n)))
            .collect();
        let total = layer.counters.get("injections").copied().unwrap_or(0);
        let by_kind =
            if kinds.is_empty() { String::new() } else { format!(" ({})", kinds.join(", ")) };
        out.push_str(&format!("  {}: {total} faults injected{by_kind}\n", layer.name));
    }
    if layer.kind == "ssd" {
        let v = |k: &str| layer.values.get(k).copied().unwrap_or(f64::NAN);
        let c = |k: &str| layer.counters.get(k).copied().unwrap_or(0);
        // An idle-time evictor publishes the writes that passed its full cache (docs/ssd.md).
        let bypassed = match layer.counters.get("slc_bypassed_units") {
            Some(n) => format!(", written past the full SLC cache {n}"),
            None => String::new(),
        };
        out.push_str(&format!(
            "  {}: WAF device {:.2} x NAND {:.2} = {:.2}; GC copied {} units, SLC evicted \
             {}{bypassed}; {} block erases (max {} per block)\n",
            layer.name,
            v("waf_device"),
            v("waf_nand"),
            v("waf_total"),
            c("gc_copies"),
            c("slc_evictions"),
            c("block_erases"),
            v("erase_count_max")
        ));
        if c("partial_writebacks") > 0 {
            // Unaligned writes reached the flash (WAFLASH's partial pages, docs/waflash.md).
            let mut acd = layer.values.get("buffer_acd").map(|a| format!(", ACD {a:.1}"));
            if layer.counters.contains_key("mv_versions_written") {
                // MV-FTL (ftl_policy = "mv") publishes its counters only in its runs.
                acd.get_or_insert_with(String::new).push_str(&format!(
                    "; MV-FTL: {} new versions, {} extra reads, {} merges",
                    c("mv_versions_written"),
                    c("mv_extra_reads"),
                    c("mv_merges")
                ));
                if c("mv_compacted_pages") > 0 || c("buffer_batch_destaged") > 0 {
                    // §3.3: PC-LRU's batches and the compacted pages MV-FTL packed them into.
                    acd.get_or_insert_with(String::new).push_str(&format!(
                        ", {} compacted pages holding {} units ({} batch-mates destaged)",
                        c("mv_compacted_pages"),
                        c("mv_compacted_units"),
                        c("buffer_batch_destaged")
                    ));
                }
            }
            out.push_str(&format!(
                "    partial pages: {} written back, {} update reads, {} filled in the buffer, \
                 {} delayed by the buffer policy{}\n",
                c("partial_writebacks"),
                c("rmw_reads"),
                c("buffer_partial_to_full"),
                c("buffer_delayed_partial"),
                acd.unwrap_or_default()
            ));
        }
    }
    for child in &layer.children {
        render_ssd_layers(child, out);
    }
}

fn stack_label(cfg: &Config) -> String {
    describe_device(&cfg.device)
}

/// A one-line description of a stack: `stripe(64KiB) over 4 x ram(256MiB)`.
pub fn describe_device(d: &DeviceConfig) -> String {
    match d {
        DeviceConfig::Ram(r) => format!("ram({})", r.capacity),
        DeviceConfig::File(f) => format!("file({})", f.path.display()),
        DeviceConfig::Stripe(s) => {
            format!("stripe({}) over {}", s.chunk, describe_members(&s.members, &s.member, s.width))
        }
        DeviceConfig::Concat(c) => {
            format!("concat over {}", describe_members(&c.members, &c.member, c.width))
        }
        DeviceConfig::Dmzoned(d) => {
            format!("dmzoned over {}", describe_members(&d.members, &None, None))
        }
        DeviceConfig::Wbcache(w) => {
            format!("wbcache({} lines) over {}", w.line, describe_members(&w.members, &None, None))
        }
        DeviceConfig::Raid(r) => format!(
            "raid({}+{}, {}) over {}",
            r.k,
            r.m,
            r.chunk,
            describe_members(
                &r.members,
                &r.member,
                r.member.as_ref().map(|_| r.width.unwrap_or(r.k + r.m))
            )
        ),
        DeviceConfig::Twophase(t) => format!(
            "twophase({}+{}, {}) over {}",
            t.k,
            t.m,
            t.chunk,
            describe_members(
                &t.members,
                &t.member,
                t.member.as_ref().map(|_| t.width.unwrap_or(t.k + t.m))
            )
        ),
        DeviceConfig::Scala(c) => format!(
            "scala({}+{}, {}) over {}",
            c.k,
            c.m,
            c.chunk,
            describe_members(
                &c.members,
                &c.member,
                c.member.as_ref().map(|_| c.width.unwrap_or(c.k + c.m))
            )
        ),
        DeviceConfig::Ssd(spec) => match &spec.0.preset {
            Some(p) => format!("ssd({p})"),
            None => "ssd".to_string(),
        },
        DeviceConfig::Nbd(n) => format!("nbd({})", n.uri),
        DeviceConfig::Zoned(z) => format!("zoned({}) over {}", z.zone, describe_device(&z.member)),
        DeviceConfig::Inject(j) => {
            format!("inject({} faults) over {}", j.faults.len(), describe_device(&j.member))
        }
        DeviceConfig::Csal(c) => format!(
            "csal({} tenants) over [{}]",
            c.tenants,
            c.members.iter().map(describe_device).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn describe_members(
    list: &[DeviceConfig],
    member: &Option<Box<DeviceConfig>>,
    width: Option<usize>,
) -> String {
    match (member, width) {
        (Some(m), Some(w)) => format!("{w} x {}", describe_device(m)),
        _ => format!("[{}]", list.iter().map(describe_device).collect::<Vec<_>>().join(", ")),
    }
}

pub fn human_bytes(b: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.2} {}", units[i])
}

pub fn human_ns(ns: u64) -> String {
    if ns < 10_000 {
        format!("{ns} ns")
    } else if ns < 10_000_000 {
        format!("{:.1} us", ns as f64 / 1e3)
    } else {
        format!("{:.2} ms", ns as f64 / 1e6)
    }
}
