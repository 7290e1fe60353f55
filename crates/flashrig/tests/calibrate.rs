//! Goal: `flashrig calibrate --quick -o FILE` runs every measurement and writes a table that
//! other tools can read: valid TOML whose `[host.kernel]` and `[host.user]` are complete
//! `HostCosts` profiles, every figure positive.
//!
//! Method: run the real binary as a child process and parse what it wrote. No assertion on
//! any measured speed: the figures depend on the machine and its load.

use std::process::Command;

use flashrig_runtime::HostCosts;

fn all_positive(path: &str, v: &toml::Value, seen: &mut usize) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                all_positive(&format!("{path}.{k}"), v, seen);
            }
        }
        toml::Value::Integer(i) => {
            *seen += 1;
            assert!(*i > 0, "{path} = {i}");
        }
        toml::Value::Float(f) => {
            *seen += 1;
            assert!(*f > 0.0 && f.is_finite(), "{path} = {f}");
        }
        // The kernel profile's synchronisation cost by threads: (threads, ns) points, the cost
        // never falling as threads are added (one thread pays none).
        toml::Value::Array(points) if path.ends_with(".sync_ns_by_threads") => {
            let pairs: Vec<(i64, i64)> = points
                .iter()
                .map(|p| match p.as_array().map(|a| a.as_slice()) {
                    Some([toml::Value::Integer(t), toml::Value::Integer(ns)]) => (*t, *ns),
                    _ => panic!("{path}: {p:?} is not a (threads, ns) pair"),
                })
                .collect();
            assert!(!pairs.is_empty(), "{path} is empty");
            assert!(pairs.iter().all(|&(t, ns)| t > 0 && ns >= 0), "{path} = {pairs:?}");
            assert!(pairs.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1), "{pairs:?}");
            *seen += 1;
        }
        other => panic!("{path}: unexpected value {other:?}"),
    }
}

#[test]
fn calibrate_quick_writes_a_parsable_table_of_positive_figures() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch directory");
    let file = dir.path().join("calibration.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_flashrig"))
        .args(["calibrate", "--quick", "-o", file.to_str().unwrap()])
        .output()
        .expect("run flashrig");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).expect("calibrate wrote the file");
    assert_eq!(text, stdout, "stdout and the file carry the same table");

    let table: toml::Table = text.parse().expect("the output is TOML");
    let mut seen = 0;
    all_positive("", &toml::Value::Table(table.clone()), &mut seen);
    assert!(seen >= 2 * 7 + 10, "only {seen} figures");

    let host = table["host"].as_table().expect("[host]");
    for profile in ["kernel", "user"] {
        let costs: HostCosts = host[profile]
            .clone()
            .try_into()
            .unwrap_or_else(|e| panic!("[host.{profile}] is not a HostCosts: {e}"));
        assert!(costs.request_ns > 0 && costs.member_io_ns > 0, "{profile}: {costs:?}");
    }
    let cal = table["calibration"].as_table().expect("[calibration]");
    for key in ["parity_4p1_ns_per_kib", "parity_6p1_ns_per_kib", "parity_6p2_ns_per_kib"] {
        assert!(cal.contains_key(key), "{key} missing");
    }
    // The human summary rides along as comments.
    assert!(text.lines().any(|l| l.starts_with("# parity 4+1")), "{text}");
}
