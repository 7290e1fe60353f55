//! What bounded a run, read from its result file: whether the host cost model saturated the
//! busiest reactor (host-bound) or not (device-bound), and what the SSDs and the engine report
//! (SLC overflow, GC, writes that waited for conversion or for a grant, partial-stripe
//! writes). The comparison tables put this in the *why* column of every comparison that
//! differs from the paper in magnitude or direction.

use std::collections::BTreeMap;

use flashrig_frontends::report::Run;

use super::results::{ssd_counter, Results, RunKey};

/// A reactor at least this busy is taken as the bound of its run.
const HOST_BOUND_BUSY: f64 = 0.9;

/// The busiest reactor's share of the run (the host cost model's charges).
pub fn busiest(run: &Run) -> f64 {
    run.result.workload["reactors"]
        .as_array()
        .map(|rs| rs.iter().filter_map(|r| r["utilisation"].as_f64()).fold(0.0, f64::max))
        .unwrap_or(0.0)
}

/// Whether a run's stack charged host CPU on its reactors (an engine's cost model did; an SSD
/// alone charges none, and "device-bound (busiest reactor 0%)" would say nothing about it).
fn has_reactors(run: &Run) -> bool {
    busiest(run) > 0.0
}

/// The size of `units` 4 KiB units, in MiB, or in KiB below one MiB (so a few units evicted
/// do not read as "0 MiB").
fn size_of_units(units: u64) -> String {
    let bytes = units * 4096;
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// The engines' own counters of work that held writes back, with the words both diagnoses
/// use for them: one table, so a run's line and a comparison's summary name them alike.
const ENGINE_WAITS: &[(&str, &str)] = &[
    ("delayed_writes", "writes waited for host conversion"),
    ("conversions_host", "stripes converted on the host"),
    ("grant_waits", "writes waited for a hero grant"),
];

/// What bounded one run, as one line: the top layer's name, then the findings.
pub fn diagnose(run: &Run) -> String {
    let busy = busiest(run);
    let l = &run.result.layers;
    let mut parts = Vec::new();
    if has_reactors(run) {
        parts.push(if busy >= HOST_BOUND_BUSY {
            format!("host-bound (busiest reactor {:.0}%)", busy * 100.0)
        } else {
            format!("device-bound (busiest reactor {:.0}%)", busy * 100.0)
        });
    }
    let evicted = ssd_counter(l, "slc_evictions");
    if evicted > 0 {
        parts.push(format!("SLC overflowed: {} evicted to MLC", size_of_units(evicted)));
    }
    // An idle-time evictor (`slc_eviction = "idle"`) lets writes pass a full cache instead.
    let bypassed = ssd_counter(l, "slc_bypassed_units");
    if bypassed > 0 {
        parts.push(format!("SLC full: {} written straight to MLC", size_of_units(bypassed)));
    }
    let gc = ssd_counter(l, "gc_copies");
    if gc > 0 {
        parts.push(format!("SSD GC copied {}", size_of_units(gc)));
    }
    let c = |name: &str| l.counters.get(name).copied().unwrap_or(0);
    if c("rmw_writes") + c("rcw_writes") > 0 {
        parts
            .push(format!("{} partial-stripe writes (RMW/RCW)", c("rmw_writes") + c("rcw_writes")));
    }
    for &(name, what) in ENGINE_WAITS {
        if c(name) > 0 {
            parts.push(format!("{} {what}", c(name)));
        }
    }
    // WAFLASH's mechanisms: partial pages reaching the flash and the reads they cost.
    let partial = ssd_counter(l, "partial_writebacks");
    if partial > 0 {
        let rmw = ssd_counter(l, "rmw_reads");
        let extra = ssd_counter(l, "mv_extra_reads");
        let versions = ssd_counter(l, "mv_versions_written");
        parts.push(format!(
            "{partial} partial pages written back, {rmw} update reads{}{}",
            if versions > 0 { format!(", {versions} written as new versions") } else { "".into() },
            if extra > 0 { format!(", {extra} older versions read") } else { "".into() }
        ));
    }
    let convert = ssd_counter(l, "convert_cmds");
    if convert > 0 {
        parts.push(format!("{convert} conversions offloaded"));
    }
    format!("{}: {}", l.name, parts.join(", "))
}

/// The diagnoses of a comparison's runs: each run's when there are two or one, and per
/// system a summary when a comparison averages over several.
pub fn diagnose_keys<K: RunKey>(keys: &[&K], r: &Results<K>) -> Vec<String> {
    if keys.len() <= 2 {
        // A run with nothing to report (no finding after its layer's name) says nothing.
        return keys
            .iter()
            .filter_map(|k| r.run(k))
            .map(diagnose)
            .filter(|d| !d.ends_with(": "))
            .collect();
    }
    let mut by_system: BTreeMap<String, Vec<&Run>> = BTreeMap::new();
    for k in keys {
        if let (Some(system), Some(run)) = (k.system(), r.run(k)) {
            by_system.entry(system.to_string()).or_default().push(run);
        }
    }
    by_system
        .iter()
        .map(|(system, runs)| {
            if !runs.iter().any(|run| has_reactors(run)) {
                // SSDs alone: what their firmware did says more than a reactor's load.
                let sum = |name: &str| -> u64 {
                    runs.iter().map(|run| ssd_counter(&run.result.layers, name)).sum()
                };
                return format!(
                    "{system}: {} runs of an SSD alone, {} partial pages written back, {} update \
                     reads, {} older versions read, GC copied {} units in all",
                    runs.len(),
                    sum("partial_writebacks"),
                    sum("rmw_reads"),
                    sum("mv_extra_reads"),
                    sum("gc_copies")
                );
            }
            let busy: Vec<f64> = runs.iter().map(|run| busiest(run)).collect();
            let host = busy.iter().filter(|&&b| b >= HOST_BOUND_BUSY).count();
            let evicted: u64 =
                runs.iter().map(|run| ssd_counter(&run.result.layers, "slc_evictions")).sum();
            let bypassed: u64 =
                runs.iter().map(|run| ssd_counter(&run.result.layers, "slc_bypassed_units")).sum();
            let (lo, hi) = busy.iter().fold((f64::MAX, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
            let mut slc = String::new();
            if evicted > 0 {
                slc +=
                    &format!(", SLC overflowed: {} evicted to MLC in all", size_of_units(evicted));
            }
            if bypassed > 0 {
                slc += &format!(
                    ", SLC full: {} written straight to MLC in all",
                    size_of_units(bypassed)
                );
            }
            // The engines' waits, as the one-run diagnosis names them.
            let sum = |name: &str| -> u64 {
                runs.iter()
                    .map(|run| run.result.layers.counters.get(name).copied().unwrap_or(0))
                    .sum()
            };
            for &(name, what) in ENGINE_WAITS {
                let total = sum(name);
                if total > 0 {
                    slc += &format!(", {total} {what} in all");
                }
            }
            format!(
                "{system}: host-bound in {host} of {} runs (busiest reactor {:.0}-{:.0}%){slc}",
                runs.len(),
                lo * 100.0,
                hi * 100.0,
            )
        })
        .collect()
}
