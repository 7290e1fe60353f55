//! `flashrig run`: build the stack, run the jobs, collect the result file.

use flashrig_blockdev::snapshot_stack;
use flashrig_metrics::{RunResult, RESULT_FORMAT, RESULT_VERSION};
use flashrig_runtime::{spawn_on, RunStats, RuntimeKind};
use serde_json::json;

use crate::config::{Config, DeviceConfig};
use crate::error::Error;
use crate::size::format_size;
use crate::workload::{run_job, JobOutcome, WorkloadSummary};

/// A finished run: the result file and the numbers the terminal summary prints.
pub struct RunOutput {
    pub result: RunResult,
    pub summary: WorkloadSummary,
    pub stats: RunStats,
}

/// Runs `cfg` to completion.
pub fn run(cfg: &Config) -> Result<RunOutput, Error> {
    let job_cfg = cfg.clone();
    let (outcome, stats) = flashrig_runtime::run(cfg.runtime, cfg.reactors, move || async move {
        let cfg = job_cfg;
        // The stack is built inside the runtime, so devices may start pollers and tasks.
        let dev = crate::stack::build(&cfg.device)?;
        let bs = dev.info().block_size as u64;
        if !cfg.workload.bs.bytes().is_multiple_of(bs) {
            return Err(Error::Input(format!(
                "workload.bs = {}: not a multiple of the stack's {bs}-byte block",
                cfg.workload.bs
            )));
        }
        let capacity = dev.info().capacity_bytes();
        let range = cfg.workload.range.map_or(capacity, |r| r.bytes());
        if range > capacity {
            return Err(Error::Input(format!(
                "workload.range = {} is larger than the stack ({})",
                format_size(range),
                format_size(capacity)
            )));
        }
        if cfg.workload.bs.bytes() > range {
            return Err(Error::Input(format!(
                "workload.bs = {} is larger than the range it addresses ({})",
                cfg.workload.bs,
                format_size(range)
            )));
        }
        if cfg.precondition.is_active() {
            crate::replay::precondition(&dev, &cfg.precondition, cfg.seed).await?;
        }
        if let Some(r) = &cfg.replay {
            let (total, counts) = crate::replay::replay(dev.clone(), r.clone()).await?;
            let layers = snapshot_stack(dev.as_ref());
            return Ok((vec![total.clone()], total, layers, Some(counts)));
        }
        let reactors = flashrig_runtime::num_reactors();
        let mut handles = Vec::new();
        for job in 0..cfg.workload.jobs as u64 {
            let dev = dev.clone();
            let w = cfg.workload.clone();
            let seed = cfg.seed;
            handles.push(spawn_on(job as usize % reactors, move || run_job(dev, w, job, seed)));
        }
        let mut jobs = Vec::new();
        for h in handles {
            jobs.push(h.await);
        }
        let mut total = JobOutcome { start_ns: u64::MAX, ..Default::default() };
        for j in &jobs {
            total.merge(j);
        }
        if cfg.workload.final_flush {
            let t0 = flashrig_runtime::now_ns();
            if let Err(e) = dev.flush().await {
                return Err(Error::Run(format!("final flush: {e}")));
            }
            total.end_ns = total.end_ns.max(flashrig_runtime::now_ns()).max(t0);
        }
        let layers = snapshot_stack(dev.as_ref());
        Ok((jobs, total, layers, None))
    });
    let (jobs, total, layers, replay_counts) = outcome?;
    if total.stalled {
        return Err(Error::Input(format!(
            "workload.runtime_ms = {}: the stack completes every request in zero {} time, so \
             the time limit is never reached; give workload.size, or device latencies",
            cfg.workload.runtime_ms.unwrap_or(0),
            if cfg.runtime == RuntimeKind::Sim { "simulated" } else { "measured" }
        )));
    }
    let summary = total.summary();
    let job_summaries: Vec<_> = jobs.iter().map(|j| j.summary()).collect();
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
    let result = RunResult {
        format: RESULT_FORMAT.to_string(),
        version: RESULT_VERSION,
        flashrig_version: env!("CARGO_PKG_VERSION").to_string(),
        runtime: match cfg.runtime {
            RuntimeKind::Sim => "sim".into(),
            RuntimeKind::Real => "real".into(),
        },
        seed: cfg.seed,
        config: serde_json::to_value(cfg).expect("config serialises"),
        workload,
        layers,
    };
    Ok(RunOutput { result, summary, stats })
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
    render_ssd_layers(&run.result.layers, &mut out);
    if s.errors > 0 {
        out.push_str(&format!(
            "  ERRORS {}: first: {}\n",
            s.errors,
            s.first_error.as_deref().unwrap_or("?")
        ));
    }
    out
}

/// One line per emulated SSD in the stack: write amplification, GC and wear.
fn render_ssd_layers(layer: &flashrig_metrics::LayerSnapshot, out: &mut String) {
    if layer.kind == "ssd" {
        let v = |k: &str| layer.values.get(k).copied().unwrap_or(f64::NAN);
        let c = |k: &str| layer.counters.get(k).copied().unwrap_or(0);
        out.push_str(&format!(
            "  {}: WAF device {:.2} x NAND {:.2} = {:.2}; GC copied {} units, SLC evicted {}; \
             {} block erases (max {} per block)\n",
            layer.name,
            v("waf_device"),
            v("waf_nand"),
            v("waf_total"),
            c("gc_copies"),
            c("slc_evictions"),
            c("block_erases"),
            v("erase_count_max")
        ));
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
        DeviceConfig::Ssd(spec) => match &spec.0.preset {
            Some(p) => format!("ssd({p})"),
            None => "ssd".to_string(),
        },
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
