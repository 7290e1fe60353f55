//! `flashrig sweep`: one experiment file, many runs. The file is a run configuration plus a
//! `[sweep]` table; each key of `[sweep]` is a dotted path into the configuration and an array
//! of values, and the sweep runs every combination (the Cartesian product, in file order). A
//! value that is a table is merged into the path, so paired settings move together:
//!
//! ```toml
//! [sweep]
//! device = [{ k = 2, m = 1 }, { k = 4, m = 1 }, { k = 6, m = 2 }]
//! "workload.bs" = ["4KiB", "64KiB"]
//! reactors = [1, 2, 4]
//! ```
//!
//! Each run's result file goes to the output directory, named after its settings, and the
//! sweep prints one table row per run. For arrays of emulated SSDs (`raid`, `twophase` or `scala` with
//! an `ssd` member) the table adds the two-phase ideal of ScalaAFA §3.1, (k + m) / (m + 1) · S, where S
//! is one member SSD's own throughput under the same workload, measured by a run of its own.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::config::{Config, DeviceConfig};
use crate::error::Error;
use crate::run::human_bytes;

/// One run of a sweep: its settings and the configuration they give.
#[derive(Debug)]
pub struct Case {
    pub label: String,
    pub config: Config,
}

/// Expands an experiment file into its runs. Errors name the file and the sweep key.
pub fn expand(text: &str, origin: &Path) -> Result<Vec<Case>, Error> {
    let err = |message: String| Error::Config { origin: origin.display().to_string(), message };
    let mut base: toml::Table = text.parse().map_err(|e: toml::de::Error| err(e.to_string()))?;
    let sweep = match base.remove("sweep") {
        Some(toml::Value::Table(t)) => t,
        Some(_) => return Err(err("sweep must be a table of arrays".into())),
        None => toml::Table::new(),
    };
    let mut axes: Vec<(String, Vec<toml::Value>)> = Vec::new();
    for (key, values) in sweep {
        match values {
            toml::Value::Array(v) if !v.is_empty() => axes.push((key, v)),
            _ => return Err(err(format!("sweep.\"{key}\" must be a non-empty array of values"))),
        }
    }
    // Checked: many short axes multiply past usize (found by fuzzing: 41 keys of 3 values).
    let total = axes.iter().try_fold(1usize, |t, (_, v)| t.checked_mul(v.len()));
    let total = match total {
        Some(t) if t <= 10_000 => t,
        Some(t) => return Err(err(format!("the sweep has {t} runs; at most 10000"))),
        None => {
            return Err(err(format!(
                "the sweep has more runs than can be counted ({} axes); at most 10000",
                axes.len()
            )))
        }
    };
    let mut cases = Vec::with_capacity(total);
    for n in 0..total {
        let mut table = base.clone();
        let mut labels = Vec::new();
        let mut rest = n;
        // The last axis varies fastest, as nested loops written in file order would.
        let mut picks = vec![0; axes.len()];
        for (i, (_, v)) in axes.iter().enumerate().rev() {
            picks[i] = rest % v.len();
            rest /= v.len();
        }
        for (i, (key, values)) in axes.iter().enumerate() {
            let value = &values[picks[i]];
            set_path(&mut table, key, value.clone())
                .map_err(|m| err(format!("sweep.\"{key}\": {m}")))?;
            labels.push(label_of(key, value));
        }
        let text = toml::to_string(&table).map_err(|e| err(e.to_string()))?;
        let label = if labels.is_empty() { "run".to_string() } else { labels.join(",") };
        let config =
            Config::from_toml(&text, Path::new(&format!("{} [{label}]", origin.display())))?;
        cases.push(Case { label, config });
    }
    Ok(cases)
}

/// Sets `path` (dotted) in `table` to `value`; a table value is merged key by key. The keys
/// `case` and `engine` merge their table into the whole configuration, for settings in several sections
/// that must move together (a geometry and the full-stripe request size that goes with it).
fn set_path(table: &mut toml::Table, path: &str, value: toml::Value) -> Result<(), String> {
    if path == "case" || path == "engine" {
        let toml::Value::Table(t) = value else {
            return Err("each case is a table of settings".into());
        };
        merge(table, t);
        return Ok(());
    }
    let mut parts: Vec<&str> = path.split('.').collect();
    let last = parts.pop().ok_or("empty key")?;
    let mut t = table;
    for p in parts {
        let entry =
            t.entry(p.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        t = entry.as_table_mut().ok_or_else(|| format!("\"{p}\" is not a table"))?;
    }
    match (t.get_mut(last), value) {
        (Some(toml::Value::Table(existing)), toml::Value::Table(new)) => merge(existing, new),
        (_, v) => {
            t.insert(last.to_string(), v);
        }
    }
    Ok(())
}

/// Merges `new` into `into`, table by table.
fn merge(into: &mut toml::Table, new: toml::Table) {
    for (k, v) in new {
        match (into.get_mut(&k), v) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

fn label_of(key: &str, value: &toml::Value) -> String {
    fn flat(t: &toml::Table) -> Vec<String> {
        t.iter()
            .flat_map(|(k, v)| match v {
                toml::Value::Table(inner) => flat(inner),
                v => vec![format!("{k}={}", plain(v))],
            })
            .collect()
    }
    let v = match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Table(t) => flat(t).join(","),
        other => plain(other),
    };
    let short = key.rsplit('.').next().unwrap_or(key);
    if matches!(value, toml::Value::Table(_)) {
        v
    } else {
        format!("{short}={v}")
    }
}

fn plain(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A file name for a case's result.
fn file_name(label: &str) -> String {
    let s: String = label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '=' || c == '-' { c } else { '_' })
        .collect();
    format!("{s}.json")
}

/// The single-SSD throughput behind the two-phase ideal, for arrays over `ssd` members: the
/// member alone under the same workload (its `range` and `size` scaled to one member's share).
pub fn single_member_config(cfg: &Config) -> Option<(Config, usize, usize)> {
    let (member, k, m) = match &cfg.device {
        DeviceConfig::Raid(r) => (r.member.as_deref()?, r.k, r.m),
        DeviceConfig::Twophase(t) => (t.member.as_deref()?, t.k, t.m),
        DeviceConfig::Scala(c) => (c.member.as_deref()?, c.k, c.m),
        _ => return None,
    };
    if !matches!(member, DeviceConfig::Ssd(_)) {
        return None;
    }
    let mut one = cfg.clone();
    one.device = member.clone();
    one.workload.range = None;
    one.workload.offset = None;
    one.precondition = Default::default();
    Some((one, k, m))
}

/// Runs every case, writes the result files into `out_dir`, and returns the table.
pub fn run_all(cases: &[Case], out_dir: &Path, quiet: bool) -> Result<String, Error> {
    std::fs::create_dir_all(out_dir)
        .map_err(|e| Error::Input(format!("cannot create {}: {e}", out_dir.display())))?;
    let mut table = String::new();
    let _ = writeln!(
        table,
        "{:<44} {:>12} {:>12} {:>10} {:>10} {:>14}",
        "run", "IOPS", "bandwidth", "p50", "p99", "2-phase ideal"
    );
    // One measurement of S per distinct single-member configuration.
    let mut single: BTreeMap<String, Option<f64>> = BTreeMap::new();
    for c in cases {
        if !quiet {
            eprintln!("sweep: running {}", c.label);
        }
        let out = crate::run::run(&c.config)?;
        let path: PathBuf = out_dir.join(file_name(&c.label));
        std::fs::write(&path, out.result.to_json_pretty())
            .map_err(|e| Error::Io(format!("cannot write {}: {e}", path.display())))?;
        let s = &out.summary;
        let ideal = match single_member_config(&c.config) {
            Some((one, k, m)) => {
                let key = one.to_toml();
                let bw = match single.get(&key) {
                    Some(v) => *v,
                    None => {
                        let v = crate::run::run(&one)?.summary.bandwidth_bytes_per_s;
                        single.insert(key, v);
                        v
                    }
                };
                bw.map(|b| format!("{}/s", human_bytes(b * (k + m) as f64 / (m + 1) as f64)))
            }
            None => None,
        };
        let _ = writeln!(
            table,
            "{:<44} {:>12} {:>12} {:>10} {:>10} {:>14}",
            c.label,
            s.iops.map_or("-".into(), |v| format!("{v:.0}")),
            s.bandwidth_bytes_per_s.map_or("-".into(), |b| format!("{}/s", human_bytes(b))),
            crate::run::human_ns(s.latency.p50_ns),
            crate::run::human_ns(s.latency.p99_ns),
            ideal.unwrap_or_else(|| "-".into())
        );
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "runtime = \"sim\"\n[device]\ntype = \"raid\"\nk = 2\nm = 1\n\
                        member = { type = \"ram\", capacity = \"64MiB\", latency_ns = 1000 }\n\
                        [workload]\nsize = \"1MiB\"\n";

    #[test]
    fn a_sweep_runs_the_product_of_its_axes_in_file_order() {
        let text = format!(
            "{BASE}[sweep]\ndevice = [{{ k = 2, m = 1 }}, {{ k = 6, m = 2 }}]\n\
             \"workload.bs\" = [\"4KiB\", \"64KiB\"]\n"
        );
        let cases = expand(&text, Path::new("e.toml")).unwrap();
        let labels: Vec<&str> = cases.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            labels,
            ["k=2,m=1,bs=4KiB", "k=2,m=1,bs=64KiB", "k=6,m=2,bs=4KiB", "k=6,m=2,bs=64KiB"]
        );
        let DeviceConfig::Raid(r) = &cases[3].config.device else { panic!() };
        assert_eq!((r.k, r.m), (6, 2));
        assert_eq!(cases[3].config.workload.bs.bytes(), 65536);
        // The member template survived the merge.
        assert!(r.member.is_some());
    }

    #[test]
    fn bad_sweeps_are_named() {
        let e = expand(&format!("{BASE}[sweep]\nreactors = 3\n"), Path::new("e.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sweep.\"reactors\""), "{e}");
        let e = expand(&format!("{BASE}[sweep]\nreactors = [1, 0]\n"), Path::new("e.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("reactors=0") && e.contains("reactors = 0"), "{e}");
    }

    #[test]
    fn a_sweep_too_large_to_count_is_refused() {
        // 3^41 runs do not fit a usize: the product used to overflow (found by fuzzing).
        let axes: String = (0..41).map(|i| format!("\"x{i}\" = [1, 2, 3]\n")).collect();
        let e = expand(&format!("{BASE}[sweep]\n{axes}"), Path::new("e.toml")).unwrap_err();
        assert!(e.to_string().contains("more runs than can be counted (41 axes)"), "{e}");
        let axes: String = (0..9).map(|i| format!("\"x{i}\" = [1, 2, 3]\n")).collect();
        let e = expand(&format!("{BASE}[sweep]\n{axes}"), Path::new("e.toml")).unwrap_err();
        assert!(e.to_string().contains("19683 runs; at most 10000"), "{e}");
    }
}
