//! Goal: the `scala` engine (ScalaAFA) is usable from the command line as the README shows: a
//! `scala` stack over files stores data that a second process reads back through recovery, a
//! simulated run over emulated SSDs with the convert vendor command is byte-for-byte
//! reproducible and offloads conversion to the members, and bad `scala` configurations are
//! named with exit status 2.
//!
//! Method: run the real binary on scratch configurations, as `tests/engines.rs` does for `raid`
//! and `twophase`; the workload's stamped blocks are checked block by block by
//! `flashrig debug verify-pattern` in a second process that opens the array with
//! `start = "recover"`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{scratch, text};

fn flashrig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flashrig")).args(args).output().expect("run flashrig")
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write file");
    p
}

/// The sum of an SSD counter over the members of the stack's top layer.
fn member_sum(v: &serde_json::Value, counter: &str) -> u64 {
    v["layers"]["children"]
        .as_array()
        .expect("members")
        .iter()
        .map(|c| c["counters"][counter].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn scala_over_files_keeps_its_data_across_processes() {
    let dir = scratch();
    let stack = |start: &str| {
        format!(
            "[device]\ntype = \"scala\"\nk = 2\nm = 1\nchunk = \"16KiB\"\nstart = \"{start}\"\n\
             member = {{ type = \"file\", path = \"{}/sc{{i}}.img\", size = \"4MiB\", \
             md_bytes = 24, direct = false }}\n",
            dir.path().display()
        )
    };
    // Random overwrites of a small range, several times the transient area (5% of a member
    // by default on files, which have no SLC cache): conversion runs on the host (files do
    // not support the convert command, and `conversion` defaults to auto).
    let w = write(
        dir.path(),
        "w.toml",
        &format!(
            "runtime = \"sim\"\n{}[workload]\nrw = \"randwrite\"\nbs = \"4KiB\"\niodepth = 8\n\
             range = \"1MiB\"\nsize = \"3MiB\"\n",
            stack("create")
        ),
    );
    let json = dir.path().join("w.json");
    let out = flashrig(&["run", w.to_str().unwrap(), "-q", "--json", json.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["layers"]["kind"], "scala", "{}", v["layers"]);
    assert_eq!(v["workload"]["total"]["errors"].as_u64(), Some(0));
    // A second process rebuilds the mapping from the members and reads every block back.
    let r = write(dir.path(), "r.toml", &stack("recover"));
    let check = flashrig(&["debug", "verify-pattern", r.to_str().unwrap()]);
    let report = text(&check.stdout);
    assert!(check.status.success(), "{report}{}", text(&check.stderr));
    assert!(report.contains(" 0 bad"), "{report}");
    let written: u64 =
        report.split(" written").next().unwrap().rsplit(' ').next().unwrap().parse().unwrap();
    // 768 random 4 KiB writes over 256 blocks touch nearly all of them.
    assert!(written > 200, "{report}");
}

#[test]
fn scala_over_emulated_ssds_is_reproducible_and_offloads_conversion() {
    let dir = scratch();
    let cfg = write(
        dir.path(),
        "scala.toml",
        "runtime = \"sim\"\nreactors = 2\n[device]\ntype = \"scala\"\nk = 4\nm = 1\n\
         conversion = \"ssd\"\n\
         member = { type = \"ssd\", preset = \"tiny\", payload = \"none\", \
         firmware = { vendor_convert = true } }\n\
         [workload]\nrw = \"randwrite\"\nbs = \"4KiB\"\niodepth = 16\njobs = 2\n\
         range = \"8MiB\"\nsize = \"12MiB\"\nstamp = false\n",
    );
    let run = |name: &str| {
        let json = dir.path().join(name);
        let out = flashrig(&["run", cfg.to_str().unwrap(), "--json", json.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        (std::fs::read(&json).unwrap(), text(&out.stdout))
    };
    let (a, stdout) = run("a.json");
    let (b, _) = run("b.json");
    assert_eq!(a, b, "a simulated scala run is byte-identical for a seed");
    assert!(stdout.contains("scala(4+1, 64KiB) over 5 x ssd(tiny)"), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&a).unwrap();
    assert_eq!(v["layers"]["kind"], "scala");
    assert_eq!(v["workload"]["total"]["errors"].as_u64(), Some(0));
    // 24 MiB of 4 KiB writes (backup copies: as much again) pass the transient area of 5% of
    // each 77 MiB member many times over, so the members converted stripes themselves.
    assert!(member_sum(&v, "convert_cmds") > 0, "no conversion was offloaded: {}", v["layers"]);
    // The user-space cost profile charged the reactors' CPU.
    assert!(v["workload"]["reactors"][0]["busy_ns"].as_u64().unwrap() > 0);
}

#[test]
fn bad_scala_configurations_are_named_and_exit_2() {
    let dir = scratch();
    for (body, needle) in [
        ("k = 4\nm = 3\n", "m = 1 or 2"),
        ("k = 4\nm = 1\nwidth = 4\n", "needs 5 members"),
        ("k = 2\nm = 1\nhost = \"fast\"\n", "device.host"),
        ("k = 2\nm = 1\nconversion = \"gpu\"\n", "gpu"),
        ("k = 2\nm = 1\nstart = \"new\"\n", "new"),
        ("k = 2\nm = 1\ntransient_kib_per_member = 0\n", "device.transient_kib_per_member"),
        ("k = 2\nm = 1\ngrant_heroes = 0\n", "device.grant_heroes"),
        ("k = 2\nm = 1\nspace_manager_reactor = 2\n", "device.space_manager_reactor"),
        ("k = 2\nm = 1\nchunk = \"6KiB\"\n", "device.chunk"),
        ("k = 2\nm = 1\ntransient_tag = false\n", "transient_tag"),
    ] {
        let cfg = write(
            dir.path(),
            "bad.toml",
            &format!(
                "reactors = 2\n[device]\ntype = \"scala\"\n{body}\
                 member = {{ type = \"ram\", capacity = \"64MiB\", md_bytes = 16 }}\n"
            ),
        );
        let out = flashrig(&["run", cfg.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{body}: {stderr}");
        assert!(stderr.contains(needle) && !stderr.contains("panicked"), "{body}: {stderr}");
    }
}

#[test]
fn config_show_prints_the_scala_defaults() {
    let dir = scratch();
    let cfg = write(
        dir.path(),
        "s.toml",
        "[device]\ntype = \"scala\"\nk = 4\nm = 1\n\
         member = { type = \"ram\", capacity = \"64MiB\", md_bytes = 16 }\n",
    );
    let out = flashrig(&["config", "show", cfg.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    for line in [
        "type = \"scala\"",
        "chunk = \"64KiB\"",
        "conversion = \"auto\"",
        "transient_tags = true",
        "grant_heroes = 1024",
        "host = \"user\"",
        "start = \"create\"",
    ] {
        assert!(shown.contains(line), "{line} missing from:\n{shown}");
    }
    // What `config show` prints is itself a valid configuration.
    let again = write(dir.path(), "again.toml", &shown);
    let out = flashrig(&["config", "show", again.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), shown);
}
