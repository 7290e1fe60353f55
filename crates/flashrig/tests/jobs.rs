//! Goal: synthetic jobs do what their options say: a block-size mix (`bssplit`) draws its
//! sizes in proportion, `offset` confines a job to its region of the device (and a job whose
//! `offset_increment` window passes the device's end is refused), and an fio job
//! file runs as the same workload a TOML file would describe (and is one fio itself accepts).
//!
//! Method: run the real binary on scratch configurations; read the result files, and for
//! `offset` the bytes of the real file the stack wrote; where fio is installed, let
//! `fio --parse-only` check that the job file used here is valid fio syntax.

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

/// Runs `flashrig run <cfg> <extra...> --json` and returns the result file.
fn run_json(dir: &Path, cfg: &Path, extra: &[&str]) -> (serde_json::Value, Output) {
    let json = dir.join("out.json");
    let mut args = vec!["run", cfg.to_str().unwrap(), "--json", json.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = flashrig(&args);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    (serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap(), out)
}

const SIM_RAM: &str = "runtime = \"sim\"\n[device]\ntype = \"ram\"\ncapacity = \"64MiB\"\n\
                       latency_ns = 20000\n";

#[test]
fn a_block_size_mix_draws_sizes_in_proportion() {
    let dir = scratch();
    let cfg = write(
        dir.path(),
        "mix.toml",
        &format!(
            "{SIM_RAM}[workload]\nrw = \"randwrite\"\nbssplit = \"4k/50:64k/50\"\n\
             size = \"32MiB\"\n"
        ),
    );
    let (v, _) = run_json(dir.path(), &cfg, &[]);
    let t = &v["workload"]["total"];
    let (writes, bytes) = (t["writes"].as_u64().unwrap(), t["write_bytes"].as_u64().unwrap());
    // Half 4 KiB and half 64 KiB requests average 34 KiB; ~1,000 draws stay within 4 KiB.
    let mean_kib = bytes as f64 / writes as f64 / 1024.0;
    assert!((30.0..38.0).contains(&mean_kib), "mean request {mean_kib:.1} KiB");
    // A size-bounded job stops once it has issued `size`, overshooting by less than a request.
    assert!((32 << 20..(32 << 20) + (64 << 10)).contains(&bytes), "{bytes} bytes written");
    // Sizes that are not whole blocks of the stack are refused before the run.
    let bad =
        write(dir.path(), "bad.toml", &format!("{SIM_RAM}[workload]\nbssplit = \"4k/50:6k/50\"\n"));
    let out = flashrig(&["run", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("workload.bssplit: 6KiB"), "{}", text(&out.stderr));
}

#[test]
fn offset_confines_a_job_to_its_region_of_a_real_file() {
    let dir = scratch();
    let file = dir.path().join("disk.img");
    let cfg = write(
        dir.path(),
        "offset.toml",
        &format!(
            "runtime = \"real\"\n[device]\ntype = \"file\"\npath = \"{}\"\nsize = \"8MiB\"\n\
             direct = false\n[workload]\nrw = \"write\"\nbs = \"64KiB\"\niodepth = 4\n\
             offset = \"6MiB\"\nrange = \"1MiB\"\n",
            file.display()
        ),
    );
    let (v, _) = run_json(dir.path(), &cfg, &["-q"]);
    assert_eq!(v["workload"]["total"]["write_bytes"].as_u64(), Some(1 << 20));
    let bytes = std::fs::read(&file).unwrap();
    let mib = 1 << 20;
    assert!(bytes[..6 * mib].iter().all(|&b| b == 0), "written before the offset");
    assert!(bytes[7 * mib..].iter().all(|&b| b == 0), "written past the range");
    // Every 4 KiB block of the region carries the workload's stamped pattern (non-zero).
    for (i, block) in bytes[6 * mib..7 * mib].chunks(4096).enumerate() {
        assert!(block.iter().any(|&b| b != 0), "block {i} of the region not written");
    }
    let bad = write(
        dir.path(),
        "bad.toml",
        &format!("{SIM_RAM}[workload]\noffset = \"60MiB\"\nrange = \"8MiB\"\n"),
    );
    let out = flashrig(&["run", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("workload.offset + workload.range"));
    // offset_increment: the last job's window must fit too.
    let bad = write(
        dir.path(),
        "bad-inc.toml",
        &format!(
            "{SIM_RAM}[workload]\njobs = 4\nrange = \"16MiB\"\noffset_increment = \"20MiB\"\n"
        ),
    );
    let out = flashrig(&["run", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let e = text(&out.stderr);
    assert!(
        e.contains("workload.offset_increment = 20MiB: job 3 would address 16MiB from 60MiB"),
        "{e}"
    );
}

const JOB_FILE: &str = "\
; 64 KiB sequential writes, then 4 KiB random reads, as fio job sections
[global]
ioengine=libaio
direct=1
size=16m
randseed=5

[seqwrite]
rw=write
bs=64k
iodepth=8
numjobs=2

[randread]
rw=randread
bs=4k
iodepth=16
random_distribution=zipf:1.1
";

#[test]
fn an_fio_job_file_runs_as_the_workload() {
    let dir = scratch();
    let job = write(dir.path(), "two.fio", JOB_FILE);
    // The file is fio's own syntax: fio accepts it (where fio is installed).
    match Command::new("fio").arg("--parse-only").arg(&job).output() {
        Ok(o) => assert!(o.status.success(), "fio rejects the job file: {}", text(&o.stderr)),
        Err(e) => eprintln!("skipping the fio syntax check: cannot run fio ({e})"),
    }
    let cfg = write(dir.path(), "stack.toml", SIM_RAM);
    // Two job sections: the user picks one.
    let out = flashrig(&["run", cfg.to_str().unwrap(), "--fio", job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--section"), "{}", text(&out.stderr));

    let (v, out) =
        run_json(dir.path(), &cfg, &["--fio", job.to_str().unwrap(), "--section", "seqwrite"]);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("ioengine=libaio ignored"), "{stderr}");
    let w = &v["config"]["workload"];
    assert_eq!((w["rw"].as_str(), w["bs"].as_str()), (Some("write"), Some("64KiB")));
    assert_eq!((w["iodepth"].as_u64(), w["jobs"].as_u64()), (Some(8), Some(2)));
    assert_eq!(v["seed"].as_u64(), Some(5), "randseed sets the seed");
    // fio's size is each job's region, covered once: 2 jobs x 16 MiB / 64 KiB.
    assert_eq!(v["workload"]["total"]["writes"].as_u64(), Some(2 * 256));
    assert_eq!(v["workload"]["jobs"].as_array().unwrap().len(), 2);

    let (v, _) =
        run_json(dir.path(), &cfg, &["--fio", job.to_str().unwrap(), "--section", "randread"]);
    assert_eq!(v["config"]["workload"]["random_distribution"].as_str(), Some("zipf:1.1"));
    assert_eq!(v["workload"]["total"]["reads"].as_u64(), Some(4096));

    // `config show --fio` prints the converted workload, which reads back as a configuration.
    let out = flashrig(&[
        "config",
        "show",
        cfg.to_str().unwrap(),
        "--fio",
        job.to_str().unwrap(),
        "--section",
        "randread",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = write(dir.path(), "shown.toml", &text(&out.stdout));
    let (again, _) = run_json(dir.path(), &shown, &["-q"]);
    assert_eq!(again["workload"]["total"]["reads"].as_u64(), Some(4096));
}

#[test]
fn bad_fio_job_files_are_named_with_their_line() {
    let dir = scratch();
    let cfg = write(dir.path(), "stack.toml", SIM_RAM);
    for (body, needle) in [
        ("[a]\nrw=write\nfsync=8\n", "bad.fio:3: fsync"),
        ("[a]\nrw=sideways\n", "bad.fio:2: rw: \"sideways\""),
        ("[a]\nbs=4k\niodepth=0\n", "iodepth"),
        ("[a]\nrw=write\nbs=4k\nblockalign=8k\n", "blockalign"),
    ] {
        let job = write(dir.path(), "bad.fio", body);
        let out = flashrig(&["run", cfg.to_str().unwrap(), "--fio", job.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{body:?}: {stderr}");
        assert!(stderr.contains(needle) && !stderr.contains("panicked"), "{body:?}: {stderr}");
    }
    let out = flashrig(&["run", "--fio", "/nonexistent/job.fio"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/job.fio"));
}
