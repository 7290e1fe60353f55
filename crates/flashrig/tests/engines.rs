//! Goal: the array engines are usable from the command line as the README shows: a `raid`
//! stack over real files stores data that survives a restart of the process, a simulated run
//! over emulated SSDs is byte-for-byte reproducible and reports the engine's counters, and bad
//! engine configurations are named with exit status 2.
//!
//! Method: run the real binary on scratch configurations; compare result files; for files,
//! write with one process and read back with another (the workload's stamped blocks are
//! checked block by block by `flashrig debug verify-pattern` in a second process).

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

#[test]
fn raid_over_emulated_ssds_is_reproducible_and_reports_its_counters() {
    let dir = scratch();
    let cfg = write(
        dir.path(),
        "raid.toml",
        "runtime = \"sim\"\n[device]\ntype = \"raid\"\nk = 4\nm = 1\nchunk = \"64KiB\"\n\
         member = { type = \"ssd\", preset = \"tiny\", payload = \"none\" }\n\
         [workload]\nrw = \"randwrite\"\nbs = \"4KiB\"\niodepth = 32\nsize = \"8MiB\"\n\
         stamp = false\n",
    );
    let run = |name: &str| {
        let json = dir.path().join(name);
        let out = flashrig(&["run", cfg.to_str().unwrap(), "--json", json.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        (std::fs::read(&json).unwrap(), text(&out.stdout))
    };
    let (a, stdout) = run("a.json");
    let (b, _) = run("b.json");
    assert_eq!(a, b, "a simulated raid run is byte-identical for a seed");
    assert!(stdout.contains("raid(4+1, 64KiB) over 5 x ssd(tiny)"), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&a).unwrap();
    let c = &v["layers"]["counters"];
    assert_eq!(v["layers"]["kind"], "raid");
    // Random 4 KiB writes into 64 KiB chunks are partial-stripe updates: read-modify-writes.
    assert_eq!(c["rmw_writes"].as_u64(), Some(2048), "{c}");
    assert_eq!(c["full_stripe_writes"].as_u64(), Some(0));
    // The kernel cost profile charged the reactor's CPU.
    assert!(v["workload"]["reactors"][0]["busy_ns"].as_u64().unwrap() > 0);
}

#[test]
fn raid_over_files_keeps_its_data_across_processes() {
    let dir = scratch();
    let stack = format!(
        "[device]\ntype = \"raid\"\nk = 2\nm = 1\nchunk = \"16KiB\"\nstripe_cache = 8\n\
         member = {{ type = \"file\", path = \"{}/disk{{i}}.img\", size = \"4MiB\", direct = false }}\n",
        dir.path().display()
    );
    // Write the whole array sequentially with stamped blocks, then read it back in a second
    // process: the read job fails (exit 1) if any block does not hold what was written.
    let w = write(
        dir.path(),
        "w.toml",
        &format!(
            "runtime = \"real\"\n{stack}[workload]\nrw = \"write\"\nbs = \"12KiB\"\niodepth = 4\n"
        ),
    );
    let out = flashrig(&["run", w.to_str().unwrap(), "-q"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let images: Vec<u64> = (0..3)
        .map(|i| std::fs::metadata(dir.path().join(format!("disk{i}.img"))).unwrap().len())
        .collect();
    assert!(images.iter().all(|&l| l >= 4 << 20), "{images:?}");
    // The parity member holds real data: no image is all zeros.
    for i in 0..3 {
        let bytes = std::fs::read(dir.path().join(format!("disk{i}.img"))).unwrap();
        assert!(bytes.iter().any(|&b| b != 0), "disk{i} is empty");
    }
    let check = flashrig(&["debug", "verify-pattern", w.to_str().unwrap()]);
    assert!(check.status.success(), "{}{}", text(&check.stdout), text(&check.stderr));
    // 4 MiB members hold 256 chunks of 16 KiB: 256 stripes x 2 data chunks x 4 blocks. The
    // 3-block writes cover 682 x 3 = 2046 of them; the last 2 stay zero.
    let report = text(&check.stdout);
    assert!(report.contains("2048 blocks verified: 2046 written, 2 zero, 0 bad"), "{report}");
}

#[test]
fn bad_raid_configurations_are_named_and_exit_2() {
    let dir = scratch();
    for (body, needle) in [
        ("k = 4\nm = 3\n", "m = 1 or 2"),
        ("k = 4\nm = 1\nwidth = 4\n", "needs 5 members"),
        ("k = 2\nm = 1\nhost = \"fast\"\n", "device.host"),
        ("k = 2\nm = 1\nmode = \"sideways\"\n", "sideways"),
        ("k = 2\nm = 1\nchunk = \"6KiB\"\n", "device.chunk"),
    ] {
        let cfg = write(
            dir.path(),
            "bad.toml",
            &format!(
                "[device]\ntype = \"raid\"\n{body}member = {{ type = \"ram\", capacity = \"64MiB\" }}\n"
            ),
        );
        let out = flashrig(&["run", cfg.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{body}: {stderr}");
        assert!(stderr.contains(needle) && !stderr.contains("panicked"), "{body}: {stderr}");
    }
}

#[test]
fn a_sweep_runs_every_combination_and_writes_each_result() {
    let dir = scratch();
    let exp = write(
        dir.path(),
        "exp.toml",
        "runtime = \"sim\"\n[device]\ntype = \"raid\"\nk = 2\nm = 1\n\
         member = { type = \"ssd\", preset = \"tiny\", payload = \"none\" }\n\
         [workload]\nrw = \"write\"\nsize = \"4MiB\"\nstamp = false\n\
         [sweep]\ndevice = [{ k = 2, m = 1 }, { k = 3, m = 2 }]\n\
         \"workload.bs\" = [\"4KiB\", \"64KiB\"]\n",
    );
    let out_dir = dir.path().join("results");
    let list = flashrig(&["sweep", exp.to_str().unwrap(), "--list"]);
    assert_eq!(
        text(&list.stdout),
        "k=2,m=1,bs=4KiB\nk=2,m=1,bs=64KiB\nk=3,m=2,bs=4KiB\nk=3,m=2,bs=64KiB\n"
    );
    let out = flashrig(&["sweep", exp.to_str().unwrap(), "-o", out_dir.to_str().unwrap(), "-q"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert_eq!(table.lines().count(), 5, "{table}");
    assert!(table.contains("2-phase ideal"), "{table}");
    for name in ["k=2_m=1_bs=4KiB", "k=3_m=2_bs=64KiB"] {
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out_dir.join(format!("{name}.json"))).unwrap())
                .unwrap();
        assert_eq!(v["workload"]["total"]["write_bytes"].as_u64(), Some(4 << 20), "{name}");
    }
    // 64 KiB writes on 3+2 with 64 KiB chunks are partial stripes; on 2+1 too.
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("k=3_m=2_bs=64KiB.json")).unwrap())
            .unwrap();
    assert_eq!(v["config"]["device"]["m"].as_u64(), Some(2));
    // A bad sweep is named.
    let bad = write(dir.path(), "bad.toml", "[sweep]\n\"workload.iodepth\" = [1, 0]\n");
    let out = flashrig(&["sweep", bad.to_str().unwrap(), "--list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("iodepth=0"), "{}", text(&out.stderr));
}

#[test]
fn twophase_over_files_recovers_its_mapping_in_a_new_process() {
    let dir = scratch();
    let stack = |start: &str| {
        format!(
            "[device]\ntype = \"twophase\"\nk = 2\nm = 1\nchunk = \"16KiB\"\nwatermark = 0.1\n\
             start = \"{start}\"\nmember = {{ type = \"file\", path = \"{}/tp{{i}}.img\", \
             size = \"4MiB\", md_bytes = 24, direct = false }}\n",
            dir.path().display()
        )
    };
    // Random overwrites of a small range: the log passes the watermark, so conversion runs
    // and blocks end up both replicated and striped.
    let w = write(
        dir.path(),
        "w.toml",
        &format!(
            "runtime = \"real\"\n{}[workload]\nrw = \"randwrite\"\nbs = \"4KiB\"\niodepth = 8\n\
             range = \"1MiB\"\nsize = \"3MiB\"\n",
            stack("create")
        ),
    );
    let json = dir.path().join("w.json");
    let out = flashrig(&["run", w.to_str().unwrap(), "-q", "--json", json.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(v["layers"]["counters"]["conversions"].as_u64().unwrap() > 0, "no conversion ran");
    // A second process rebuilds the mapping from the members' metadata and reads every block.
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
