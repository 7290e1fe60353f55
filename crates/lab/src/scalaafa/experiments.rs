//! ScalaAFA's runs: the experiment files of `configs/experiments/scalaafa/`, the geometries
//! and thread counts each mode runs, and the plan of every run of every figure.

use std::path::Path;

use flashrig_frontends::config::{Config, DeviceConfig};
use flashrig_frontends::error::Error;
use flashrig_frontends::sweep::{self, Case};

use super::phase;
use super::traces::TraceRun;
use super::{
    arr, tr, CheckScale, Key, FSR_CONV, FULL_SCALE_RUNTIME_MS, FUSION, RAID5F, SCALA, SCALA_FAMILY,
    SCALA_PACED, SCALA_SEP, SCALA_WR, SCALA_WR_PACED,
};
use crate::core::scale::{reduce_device, scaled_count};
use crate::core::{Mode, Plan};
use flashrig_ssd::config::{Firmware, SlcEviction, TransientPlacement};

/// One experiment file: (name, text).
pub(super) const EXPERIMENTS: &[(&str, &str)] = &[
    (
        "fig03a-fsr-rep",
        include_str!("../../../../configs/experiments/scalaafa/fig03a-fsr-rep.toml"),
    ),
    ("fig09-micro", include_str!("../../../../configs/experiments/scalaafa/fig09-micro.toml")),
    (
        "fig09-full-stripe",
        include_str!("../../../../configs/experiments/scalaafa/fig09-full-stripe.toml"),
    ),
    ("fig10-latency", include_str!("../../../../configs/experiments/scalaafa/fig10-latency.toml")),
    ("fig11-threads", include_str!("../../../../configs/experiments/scalaafa/fig11-threads.toml")),
    ("fig12-traces", include_str!("../../../../configs/experiments/scalaafa/fig12-traces.toml")),
    ("fig15-sources", include_str!("../../../../configs/experiments/scalaafa/fig15-sources.toml")),
];

/// Virtual run time of a microbenchmark.
pub(super) fn runtime_ms(mode: Mode) -> u64 {
    mode.scaled_runtime_ms(FULL_SCALE_RUNTIME_MS)
}

/// The I/O thread counts of Fig. 11 each mode runs.
pub(super) fn threads(mode: Mode) -> &'static [u32] {
    match mode {
        Mode::Smoke => &[1],
        Mode::Quick => &[1, 2, 4],
        Mode::Full => &[1, 2, 4, 8, 12],
    }
}

/// The array geometries (k, m) each mode runs.
pub(super) fn geometries(mode: Mode) -> &'static [(usize, usize)] {
    match mode {
        Mode::Smoke => &[(4, 1)],
        _ => &[(2, 1), (4, 1), (6, 1), (6, 2)],
    }
}

/// (name, k, m, chunk bytes) of an array engine.
pub(super) fn array_of(d: &DeviceConfig) -> Option<(String, usize, usize, u64)> {
    let (name, k, m, chunk) = match d {
        DeviceConfig::Raid(r) => (&r.name, r.k, r.m, r.chunk),
        DeviceConfig::Twophase(t) => (&t.name, t.k, t.m, t.chunk),
        DeviceConfig::Scala(c) => (&c.name, c.k, c.m, c.chunk),
        _ => return None,
    };
    Some((name.clone().unwrap_or_default(), k, m, chunk.bytes()))
}

fn pattern_id(cfg: &Config, k: usize, chunk: u64) -> String {
    let w = &cfg.workload;
    let size = if w.bs.bytes() == k as u64 * chunk {
        "fs".to_string()
    } else {
        format!("{}k", w.bs.bytes() / 1024)
    };
    format!("{size}-{}-qd{}", if w.rw.is_random() { "rand" } else { "seq" }, w.iodepth)
}

/// A pattern id as a table or plot names it: "full-stripe random, QD32".
pub(super) fn pattern_title(p: &str) -> String {
    let mut parts = p.split('-');
    let size = match parts.next().unwrap_or("") {
        "fs" => "full-stripe".to_string(),
        s => format!("{} KiB", s.trim_end_matches('k')),
    };
    let kind = if parts.next() == Some("rand") { "random" } else { "sequential" };
    let qd = parts.next().unwrap_or("").trim_start_matches("qd");
    format!("{size} {kind}, QD{qd}")
}

/// Scales a case to the mode and gives `scala` its space manager's core: ScalaAFA runs its
/// space manager on a daemon thread pinned to a core of its own (§5.6), so a scala run has one
/// reactor more than it has I/O threads (the space manager defaults to the last reactor, where
/// no job runs). The grant batch is a share of the transient area, so it shrinks with it.
fn prepare(mut cfg: Config, mode: Mode) -> Result<Config, Error> {
    reduce_device(&mut cfg.device, mode.reduction()).map_err(Error::Input)?;
    if cfg.workload.runtime_ms.is_some() {
        cfg.workload.runtime_ms = Some(runtime_ms(mode));
    }
    if let DeviceConfig::Scala(c) = &mut cfg.device {
        let threads = if cfg.replay.is_some() { 1 } else { cfg.workload.jobs as usize };
        cfg.reactors = threads + 1;
        c.space_manager_reactor = None;
        c.grant_heroes = scaled_count(c.grant_heroes, mode);
    }
    cfg.validate().map_err(|message| Error::Config { origin: "reproduce".into(), message })?;
    Ok(cfg)
}

/// Changes the firmware of every SSD of a device tree for Fig. 16's bracket, recording the
/// changed key in each SSD's sources.
fn set_ssd_firmware(d: &mut DeviceConfig, key: &str, set: &dyn Fn(&mut Firmware)) {
    let (members, member): (&mut Vec<DeviceConfig>, &mut Option<Box<DeviceConfig>>) = match d {
        DeviceConfig::Ssd(s) => {
            set(&mut s.0.firmware);
            s.0.sources.insert(
                format!("firmware.{key}"),
                "set by `flashrig reproduce` for Fig. 16's bracket".into(),
            );
            return;
        }
        DeviceConfig::Scala(c) => (&mut c.members, &mut c.member),
        DeviceConfig::Twophase(t) => (&mut t.members, &mut t.member),
        DeviceConfig::Raid(r) => (&mut r.members, &mut r.member),
        _ => return,
    };
    for m in members.iter_mut() {
        set_ssd_firmware(m, key, set);
    }
    if let Some(m) = member {
        set_ssd_firmware(m, key, set);
    }
}

pub(super) fn experiment(name: &str) -> Result<Vec<Case>, Error> {
    let text = EXPERIMENTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .ok_or_else(|| Error::Input(format!("no experiment {name}")))?;
    sweep::expand(text, Path::new(&format!("configs/experiments/scalaafa/{name}.toml")))
}

/// The measured window of every Fig. 15 run: the one `phase::conversion_window_ms` gives its
/// ScalaAFA array, so that the three systems are compared over the same time.
fn fig15_window_ms(mode: Mode) -> Result<Option<u64>, Error> {
    for case in experiment("fig15-sources")? {
        if array_of(&case.config.device).is_some_and(|(system, ..)| system == SCALA) {
            return Ok(phase::conversion_window_ms(&prepare(case.config, mode)?));
        }
    }
    Ok(None)
}

/// Builds every run of every figure.
pub(super) fn plan(mode: Mode, traces: &[TraceRun]) -> Result<Plan<Key>, Error> {
    let mut p = Plan::default();
    // Every Fig. 15 run lasts as long as its ScalaAFA array's window (phase.rs).
    let fig15_ms = if mode == Mode::Smoke { None } else { fig15_window_ms(mode)? };
    // Microbenchmarks: Figs. 9, 10, 11, 15.
    for file in [
        "fig03a-fsr-rep",
        "fig09-micro",
        "fig09-full-stripe",
        "fig10-latency",
        "fig11-threads",
        "fig15-sources",
    ] {
        for case in experiment(file)? {
            let Some((system, k, m, chunk)) = array_of(&case.config.device) else { continue };
            if !geometries(mode).contains(&(k, m)) {
                continue;
            }
            let threads = case.config.workload.jobs;
            if !self::threads(mode).contains(&threads) {
                continue;
            }
            let pattern = pattern_id(&case.config, k, chunk);
            if system == RAID5F && (m != 1 || !pattern.starts_with("fs")) {
                p.skip("RAID5F serves only RAID 5 full-stripe writes (§6.1)");
                continue;
            }
            let mut cfg = prepare(case.config, mode)?;
            // §6.5 measures ScalaAFA and its variants while conversion is active. A smoke run
            // (flashrig's own test, not a reproduction) skips the preconditioning, which would
            // write hundreds of MiB before each 1 ms run.
            let scala = SCALA_FAMILY.contains(&system.as_str());
            if scala && mode != Mode::Smoke {
                phase::to_conversion_phase(&mut cfg);
            }
            // Fig. 15 compares conversion paths: its runs last long enough that the reserve
            // of free VHs cannot carry the slower one (phase.rs), all of them alike.
            if file == "fig15-sources" {
                if mode != Mode::Smoke {
                    cfg.workload.runtime_ms = fig15_ms;
                }
                let ms = cfg.workload.runtime_ms.unwrap_or(1) as f64;
                let label = format!("{system}-{k}+{m}-{pattern}-t{threads}-sources");
                let weight =
                    (threads as f64 + if scala { 1.0 } else { 0.2 }) * ms / runtime_ms(mode) as f64;
                p.add(Key::Sources { system, pattern }, label, cfg, weight);
                continue;
            }
            let label = format!("{system}-{k}+{m}-{pattern}-t{threads}");
            let weight = threads as f64 + if system == SCALA { 1.0 } else { 0.5 };
            p.add(arr(&system, k, m, &pattern, threads), label, cfg, weight);
        }
    }
    // The S of Fig. 11's ideal: one member alone under the same workload (as `flashrig
    // sweep`), for each thread count; fresh, and in the state of a 4+1 ScalaAFA's member at
    // its conversion point.
    for case in experiment("fig11-threads")? {
        let Some((system, k, m, _)) = array_of(&case.config.device) else { continue };
        let threads = case.config.workload.jobs;
        if (k, m) != (4, 1) || !self::threads(mode).contains(&threads) {
            continue;
        }
        let mut cfg = prepare(case.config, mode)?;
        let Some((mut one, _, _)) = sweep::single_member_config(&cfg) else { continue };
        if system == FUSION {
            p.add(
                Key::Single { threads, conversion: false },
                format!("ssd-alone-t{threads}"),
                one.clone(),
                0.3,
            );
            // Fig. 3b: FusionRAID continuously written past its watermark, one I/O thread.
            if threads == 1 {
                if mode != Mode::Smoke {
                    phase::to_conversion_phase(&mut cfg);
                }
                p.add(arr(FSR_CONV, k, m, "64k-seq-qd32", 1), "FSR-Conv-4+1-t1".into(), cfg, 2.0);
            }
        } else if system == SCALA {
            if mode != Mode::Smoke {
                phase::to_conversion_phase(&mut cfg);
                phase::single_in_conversion_phase(&mut one, &cfg);
            }
            p.add(
                Key::Single { threads, conversion: true },
                format!("ssd-alone-conversion-t{threads}"),
                one,
                0.6,
            );
        }
    }
    // The scale check: one member SSD, 64 KiB sequential writes at QD32, at full scale, as
    // reduced here, and with blocks_per_plane divided alone; for a run as long as the
    // microbenchmarks' (in proportion) and one three times as long, deep into SLC eviction.
    let base = experiment("fig11-threads")?
        .into_iter()
        .find(|c| c.config.workload.jobs == 1)
        .ok_or_else(|| Error::Input("fig11-threads has no one-thread case".into()))?;
    let (one, _, _) = sweep::single_member_config(&base.config)
        .ok_or_else(|| Error::Input("fig11-threads: members are not SSDs".into()))?;
    for long in [false, true] {
        let full_ms = runtime_ms(mode) * mode.divisor() * if long { 3 } else { 1 };
        for (scale, reduction) in [
            (CheckScale::Full, (1, 1)),
            (CheckScale::Reduced, mode.reduction()),
            (CheckScale::BlocksOnly, (16, 1)),
        ] {
            let mut cfg = one.clone();
            reduce_device(&mut cfg.device, reduction).map_err(Error::Input)?;
            let div = reduction.0 * reduction.1;
            cfg.workload.runtime_ms = Some((full_ms as f64 / div as f64).round().max(1.0) as u64);
            let label = format!("ssd-alone-{scale:?}-{}", if long { "long" } else { "short" });
            let weight = full_ms as f64 / div as f64 / 100.0;
            p.add(Key::ScaleCheck { scale, long }, label.to_lowercase(), cfg, weight);
        }
    }
    // Traces: Figs. 12, 13, 16.
    for case in experiment("fig12-traces")? {
        let Some((system, ..)) = array_of(&case.config.device) else { continue };
        for t in traces {
            let mut cfg = case.config.clone();
            cfg.replay = Some(t.replay.clone());
            let cfg = prepare(cfg, mode)?;
            let weight = 50.0 + t.requests as f64 / 10_000.0;
            // Fig. 16: ScalaAFA and Scala-WR again on SSDs that evict when their SLC cache
            // is full (§5.5), ScalaAFA in both placements of its transient data (a bracket;
            // Scala-WR has no transient data, so its one run is the denominator of both).
            let paced = |mut c: Config| {
                set_ssd_firmware(&mut c.device, "slc_eviction", &|f| {
                    f.slc_eviction = SlcEviction::Paced
                });
                c
            };
            if system == SCALA {
                let mut c = paced(cfg.clone());
                set_ssd_firmware(&mut c.device, "slc_transient_placement", &|f| {
                    f.slc_transient_placement = TransientPlacement::Separate
                });
                let label = format!("{system}-separate-paced-{}", t.name);
                p.add(tr(SCALA_SEP, &t.name), label, c, weight);
            }
            let paced_system = match system.as_str() {
                SCALA => Some(SCALA_PACED),
                SCALA_WR => Some(SCALA_WR_PACED),
                _ => None,
            };
            if let Some(paced_system) = paced_system {
                let label = format!("{system}-paced-{}", t.name);
                p.add(tr(paced_system, &t.name), label, paced(cfg.clone()), weight);
            }
            p.add(tr(&system, &t.name), format!("{system}-{}", t.name), cfg, weight);
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::super::{FSR_REP, MDRAID, SCALA_CO, SCALA_WR};
    use super::*;

    #[test]
    fn every_experiment_expands_and_names_its_engines() {
        for (name, _) in EXPERIMENTS {
            let cases = experiment(name).unwrap();
            assert!(!cases.is_empty(), "{name}");
            for c in cases {
                let (system, ..) = array_of(&c.config.device).unwrap();
                assert!(
                    [MDRAID, RAID5F, FUSION, SCALA, SCALA_CO, SCALA_WR, FSR_REP]
                        .contains(&system.as_str()),
                    "{name}: {system}"
                );
            }
        }
    }

    /// Collects the `slc_eviction` and `slc_transient_placement` of every SSD in a stack.
    fn ssd_policies(d: &DeviceConfig, out: &mut Vec<(SlcEviction, TransientPlacement)>) {
        match d {
            DeviceConfig::Ssd(s) => {
                let f = &s.0.firmware;
                out.push((f.slc_eviction, f.slc_transient_placement));
            }
            DeviceConfig::Scala(c) => {
                c.members.iter().chain(c.member.as_deref()).for_each(|m| ssd_policies(m, out))
            }
            DeviceConfig::Twophase(t) => {
                t.members.iter().chain(t.member.as_deref()).for_each(|m| ssd_policies(m, out))
            }
            DeviceConfig::Raid(r) => {
                r.members.iter().chain(r.member.as_deref()).for_each(|m| ssd_policies(m, out))
            }
            _ => {}
        }
    }

    /// Fig. 16 compares runs on the SSD §5.5 describes, which evicts when its SLC cache is
    /// full: every compared run must use paced eviction, ScalaAFA in both placements, and
    /// Scala-WR (no transient hint) in one; the other figures keep the preset's cache.
    #[test]
    fn fig16_runs_evict_when_full_in_both_placements() {
        let dir = std::env::temp_dir();
        let traces = super::super::traces::traces(Mode::Quick, &dir, &dir);
        let plan = plan(Mode::Quick, &traces).unwrap();
        let t = &traces.iter().find(|t| t.table2).unwrap().name;
        let policies = |system: &str| {
            let job = &plan.jobs[plan.keys[&tr(system, t)]];
            let mut v = Vec::new();
            ssd_policies(&job.config.device, &mut v);
            assert!(!v.is_empty(), "{system}: an array of SSDs");
            v.dedup();
            assert_eq!(v.len(), 1, "{system}: every member alike");
            v[0]
        };
        use {SlcEviction::Paced, TransientPlacement::*};
        assert_eq!(policies(SCALA_PACED), (Paced, Mixed));
        assert_eq!(policies(SCALA_SEP), (Paced, Separate));
        assert_eq!(policies(SCALA_WR_PACED), (Paced, Mixed));
        // Figs. 12 and 13 run the preset's own cache.
        let preset = policies(SCALA);
        assert_ne!(preset.0, Paced, "the scalaafa-femu preset's cache is not paced");
        assert_eq!(policies(SCALA_WR), preset);
    }

    #[test]
    fn pattern_titles() {
        assert_eq!(pattern_title("fs-rand-qd32"), "full-stripe random, QD32");
        assert_eq!(pattern_title("4k-seq-qd1"), "4 KiB sequential, QD1");
    }
}
