//! Goal: a phased run (`[[phase]]` tables) runs its loads one after another on one stack after
//! one preconditioning, and each phase's result is what a run of that load alone would have
//! measured from the state the phases before it left: the first phase is byte for byte the
//! same measurement as a plain run of its workload (same seed, same preconditioning), a later
//! phase's window starts where the previous phase ended (its `precondition_layers` are the
//! previous phase's final layers), each phase writes `<stem>.<phase>.json`, the run is
//! deterministic, and a phased configuration with a mistake is refused with the key's name
//! and exit status 2 before anything runs.
//!
//! Method: run the real binary on the `tiny` SSD preset, preconditioned by a fill, with two
//! phases (random writes with a ramp, then random reads), and compare the result files' JSON
//! with a plain run of the first phase's workload; then feed it broken configurations.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::{scratch, text};

fn flashrig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flashrig")).args(args).output().expect("run flashrig")
}

const STACK: &str = "seed = 7\nruntime = \"sim\"\n\
    [device]\ntype = \"ssd\"\npreset = \"tiny\"\n\
    [precondition]\nfill = true\n";

const WRITES: &str = "rw = \"randwrite\"\nbs = \"4KiB\"\niodepth = 16\nruntime_ms = 20\n\
    ramp_ms = 5\nstamp = false\n";

const READS: &str = "rw = \"randread\"\nbs = \"8KiB\"\niodepth = 8\nruntime_ms = 10\n\
    stamp = false\n";

fn write_config(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

fn phased() -> String {
    format!(
        "{STACK}[[phase]]\nname = \"writes\"\n[phase.workload]\n{WRITES}\
         [[phase]]\nname = \"reads\"\n[phase.workload]\n{READS}"
    )
}

fn load(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The result without what differs by construction between a phase and a plain run: the
/// configuration (which lists the phases) and the phase's name.
fn measurement(mut v: Value) -> Value {
    v.as_object_mut().unwrap().remove("config");
    v["workload"].as_object_mut().unwrap().remove("phase");
    v
}

#[test]
fn phases_measure_in_turn_from_the_state_the_previous_phase_left() {
    let dir = scratch();
    let cfg = write_config(dir.path(), "phased.toml", &phased());
    let out = dir.path().join("r.json");
    let o = flashrig(&["run", cfg.to_str().unwrap(), "--json", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(stdout.contains("phase writes (1 of 2):"), "{stdout}");
    assert!(stdout.contains("phase reads (2 of 2):"), "{stdout}");
    assert!(!out.exists(), "a phased run writes one file per phase, not {}", out.display());
    let writes = load(&dir.path().join("r.writes.json"));
    let reads = load(&dir.path().join("r.reads.json"));
    assert_eq!(writes["workload"]["phase"]["name"], "writes");
    assert_eq!(reads["workload"]["phase"]["index"], 1);
    assert_eq!(reads["workload"]["phase"]["phases"], 2);
    // Each phase's result carries its own workload as [workload], and the whole run's phases.
    assert_eq!(writes["config"]["workload"]["rw"], "randwrite");
    assert_eq!(reads["config"]["workload"]["rw"], "randread");
    assert_eq!(reads["config"]["phase"].as_array().unwrap().len(), 2);
    let t = &reads["workload"]["total"];
    assert!(t["reads"].as_u64().unwrap() > 0 && t["writes"].as_u64().unwrap() == 0, "{t}");

    // The second phase's window starts where the first one ended (after its final flush).
    assert_eq!(reads["workload"]["precondition_layers"], writes["layers"]);

    // The first phase is the measurement a plain run of its workload makes.
    let plain = write_config(dir.path(), "plain.toml", &format!("{STACK}[workload]\n{WRITES}"));
    let plain_out = dir.path().join("plain.json");
    let o = flashrig(&["run", plain.to_str().unwrap(), "--json", plain_out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let plain = load(&plain_out);
    // The reactors' figures are the whole run's in a phased run (the runtime reports them at
    // its end), so they are compared apart from the measurement.
    let strip = |mut v: Value| {
        let w = v["workload"].as_object_mut().unwrap();
        for k in ["reactors", "runtime_elapsed_ns", "sim_events"] {
            w.remove(k);
        }
        measurement(v)
    };
    assert_eq!(strip(writes.clone()), strip(plain));

    // Deterministic: a second run writes the same bytes.
    let again = dir.path().join("again.json");
    let o = flashrig(&["run", cfg.to_str().unwrap(), "--json", again.to_str().unwrap(), "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    for phase in ["writes", "reads"] {
        let a = std::fs::read(dir.path().join(format!("r.{phase}.json"))).unwrap();
        let b = std::fs::read(dir.path().join(format!("again.{phase}.json"))).unwrap();
        assert!(a == b, "phase {phase} differs between two runs of one configuration");
    }
}

#[test]
fn a_phased_configuration_with_a_mistake_is_refused_with_its_key() {
    let dir = scratch();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "bad-name",
            phased().replace("name = \"reads\"", "name = \"a/b\""),
            "phase[1].name = \"a/b\"",
        ),
        ("twice", phased().replace("name = \"reads\"", "name = \"writes\""), "must be unique"),
        (
            "workload-too",
            format!("{}[workload]\nrw = \"read\"\n", phased()),
            "workload: unused in a run with [[phase]] tables",
        ),
        (
            "bad-key",
            phased().replace("iodepth = 8", "iodepth = 0"),
            "phase[1].workload.iodepth = 0",
        ),
        ("no-name", phased().replace("name = \"reads\"\n", ""), "name"),
        (
            "too-large",
            phased().replace("bs = \"8KiB\"", "bs = \"8KiB\"\nrange = \"1TiB\""),
            "phase[1].workload.offset + phase[1].workload.range",
        ),
    ];
    for (name, body, expect) in cases {
        let cfg = write_config(dir.path(), &format!("{name}.toml"), &body);
        let out = dir.path().join(format!("{name}.json"));
        let o = flashrig(&["run", cfg.to_str().unwrap(), "--json", out.to_str().unwrap()]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(expect), "{name}: expected {expect:?} in: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
        // Nothing ran: no phase wrote a result.
        let stem = dir.path().join(format!("{name}.writes.json"));
        let written = std::fs::metadata(&stem).map(|m| m.len()).unwrap_or(0);
        assert_eq!(written, 0, "{name}: a result was written");
    }
}
