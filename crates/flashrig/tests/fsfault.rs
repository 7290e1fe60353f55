//! Goal: the test programs of the thesis' Table 2.2 (`flashrig debug fs-program`) each make
//! their system call on the populated tree (`flashrig debug fs-populate`), succeed and leave the
//! effect they should on a healthy file system; and when the file system misbehaves, the
//! program says which step failed and with which error number, and exits 1: a missing file is
//! ENOENT at the first step, bytes that differ from what was written fail `read`'s comparison.
//! An unknown program exits 2.
//!
//! And `flashrig fsfault`, the study over them, run short on ext4 as CI runs it: a read error
//! on a directory block reaches `getdirentries` as EIO (D_ErrorCode, R_Propagate); a write
//! error on the journal makes ext4 abort it and fail the fsync (R_Propagate, R_Stop); a lost
//! write of a directory block goes unnoticed online and e2fsck finds it (D_Zero, D_Fsck); the
//! tables, CSV and heat maps are written; a second run resumes (runs nothing); a study killed
//! after three experiments is finished by the next run, which takes back the loop devices and
//! mounts the killed one left; a run with another seed on the same folder is refused.
//!
//! Method: the real binary on a scratch directory of the machine's file system, a fresh
//! population for every program (chdir and chroot change the process, so each program is a
//! process of its own). `chroot` needs root: without it the program must fail with EPERM. The
//! study needs root, /dev/fuse, loop devices, /dev/kmsg and e2fsprogs, and skips saying which
//! is missing.

use std::path::Path;
use std::process::{Command, Output};

use flashrig::lab::fsfault::programs::{content, PROGRAMS};

mod common;
use common::{scratch, text};

fn flashrig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flashrig")).args(args).output().expect("run flashrig")
}

fn populate(root: &Path) {
    let out = flashrig(&["debug", "fs-populate", root.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Runs a program; returns its exit code and its steps (call, errno, error).
fn program(name: &str, root: &Path) -> (Option<i32>, Vec<serde_json::Value>) {
    let out = flashrig(&["debug", "fs-program", name, root.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(text(&out.stdout).trim())
        .unwrap_or_else(|e| panic!("{name}: no JSON outcome ({e}): {}", text(&out.stderr)));
    assert_eq!(v["program"], name);
    (out.status.code(), v["steps"].as_array().unwrap().clone())
}

#[test]
fn every_program_succeeds_on_a_healthy_tree_and_does_its_call() {
    // SAFETY: geteuid cannot fail and touches no memory.
    let root_user = unsafe { libc::geteuid() } == 0;
    // Table 2.2's programs less mount and umount, which the study performs around each.
    assert_eq!(PROGRAMS.len(), 20);
    for &name in PROGRAMS {
        let dir = scratch();
        let r = dir.path().join("fs");
        std::fs::create_dir(&r).unwrap();
        populate(&r);
        let (code, steps) = program(name, &r);
        if name == "chroot" && !root_user {
            assert_eq!(code, Some(1));
            assert_eq!(steps[0]["errno"], libc::EPERM, "{steps:?}");
            continue;
        }
        assert_eq!(code, Some(0), "{name}: {steps:?}");
        assert!(!steps.is_empty() && steps.iter().all(|s| s.get("error").is_none()), "{steps:?}");
        // The effect, where the call has one to see.
        let meta = |p: &str| std::fs::symlink_metadata(r.join(p));
        match name {
            "creat" => assert_eq!(meta("dir/new").unwrap().len(), 100),
            "rename" => assert!(meta("dir/f1").is_err() && meta("deep/a/f1").is_ok()),
            "truncate" => assert_eq!(meta("large").unwrap().len(), 1 << 20),
            "unlink" => assert!(meta("dir/f2").is_err()),
            "mkdir" => assert!(meta("dir/newdir").unwrap().is_dir()),
            "rmdir" => assert!(meta("deep/a/b/c/d/empty").is_err()),
            "symlink" => assert!(meta("dir/newlink").unwrap().file_type().is_symlink()),
            "chmod" => {
                use std::os::unix::fs::PermissionsExt;
                assert_eq!(meta("small").unwrap().permissions().mode() & 0o777, 0o600)
            }
            "write" => {
                let large = std::fs::read(r.join("large")).unwrap();
                let written = content("write", 64 << 10);
                assert_eq!(large.len(), 8 << 20);
                assert_eq!(&large[1 << 20..(1 << 20) + (64 << 10)], &written[..]);
                assert_eq!(&large[..1 << 20], &content("large", 1 << 20)[..]);
            }
            _ => {}
        }
    }
}

#[test]
fn a_failing_step_is_named_with_its_errno_and_exits_1() {
    let dir = scratch();
    let r = dir.path().join("fs");
    std::fs::create_dir(&r).unwrap();
    // Nothing populated: open's first step finds no file.
    let (code, steps) = program("open", &r);
    assert_eq!(code, Some(1));
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0]["errno"], libc::ENOENT, "{steps:?}");
    // One byte of `small` changed: `read` reads it and its comparison fails, after `large`'s
    // passed.
    populate(&r);
    let path = r.join("small");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let (code, steps) = program("read", &r);
    assert_eq!(code, Some(1));
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert!(steps[0].get("error").is_none());
    assert!(steps[1]["call"].as_str().unwrap().contains("small"), "{steps:?}");
    assert!(steps[1]["error"].as_str().unwrap().contains("not as written"), "{steps:?}");
    // An unknown program.
    let out = flashrig(&["debug", "fs-program", "fly", r.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no test program \"fly\""), "{}", text(&out.stderr));
}

/// The arguments of the short ext4 study into `results`.
fn study_args(results: &Path, seed: &str) -> Vec<String> {
    let args = [
        "fsfault",
        "--fs",
        "ext4",
        "--programs",
        "mkdir,getdirentries",
        "--kinds",
        "read-error,write-error,lost",
        "--seed",
        seed,
        "-j",
        "2",
        "--results",
        results.to_str().unwrap(),
    ];
    args.iter().map(|a| a.to_string()).collect()
}

/// Runs the short ext4 study into `results`; returns its exit code and stderr.
fn study(results: &Path, seed: &str) -> (Option<i32>, String) {
    let args = study_args(results, seed);
    let out = flashrig(&args.iter().map(String::as_str).collect::<Vec<_>>());
    (out.status.code(), text(&out.stderr))
}

#[test]
fn a_short_fsfault_study_on_ext4_classifies_what_ext4_does() {
    use flashrig::lab::fsfault::classify::{classify, Detection, Recovery};
    use flashrig::lab::fsfault::experiment::{Observation, Trace};
    if let Some(why) = flashrig::lab::fsfault::host::unavailable(&["mkfs.ext4", "e2fsck", "cp"]) {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = scratch();
    let results = dir.path().join("study");
    let (code, err) = study(&results, "1");
    assert_eq!(code, Some(0), "{err}");
    let lines = std::fs::read_to_string(results.join("observations.jsonl")).unwrap();
    let obs: Vec<Observation> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(obs.len() >= 10, "{} experiments", obs.len());
    assert!(obs.iter().all(|o| o.harness_error.is_none()), "{obs:#?}");
    let get = |id: &str| {
        obs.iter().find(|o| o.id == id).unwrap_or_else(|| panic!("no experiment {id} in {lines}"))
    };

    // The tracing run of mkdir saw it read a directory block and write the journal, and the
    // fault-free image checks clean.
    let t: Trace = serde_json::from_str(
        &std::fs::read_to_string(results.join("traces/ext4-mkdir.json")).unwrap(),
    )
    .unwrap();
    assert!(t.clean);
    let seen = |op: &str, s: &str| t.window.iter().any(|a| a.op == op && a.structure == s);
    assert!(seen("read", "dir") && seen("write", "journal"), "{:?}", t.window);

    let o = get("ext4/getdirentries/read-error/read/dir");
    assert_eq!(o.fired, 1);
    assert!(o.steps.iter().any(|s| s.errno == Some(libc::EIO)), "{o:#?}");
    let c = classify(o);
    assert_eq!(c.detection, [Detection::ErrorCode], "{o:#?}");
    assert!(c.recovery.contains(&Recovery::Propagate), "{c:?}");
    assert_eq!(c.severe, None);

    let o = get("ext4/mkdir/write-error/write/journal");
    let c = classify(o);
    assert!(o.kernel_online.iter().any(|l| l.contains("Aborting journal")), "{o:#?}");
    assert!(c.recovery.contains(&Recovery::Propagate), "{c:?}");
    assert!(c.recovery.contains(&Recovery::Stop), "{c:?}");

    let o = get("ext4/mkdir/lost/write/dir");
    assert_eq!(o.fired, 1);
    let c = classify(o);
    assert_eq!(c.detection, [Detection::Zero, Detection::Fsck], "{o:#?}");

    // The report: a table per kind with Table 2.5's letters (p mkdir, r getdirentries), the
    // CSV with a row per experiment, the heat maps.
    let md = std::fs::read_to_string(results.join("fsfault.md")).unwrap();
    assert!(md.contains("### ext4, read-error") && md.contains("| structure | p | r |"), "{md}");
    assert!(md.contains("the thesis: ~16% of ~7,000"), "{md}");
    let csv = std::fs::read_to_string(results.join("fsfault.csv")).unwrap();
    assert_eq!(csv.lines().count(), obs.len() + 1);
    for kind in ["read-error", "write-error", "lost"] {
        assert!(results.join(format!("figures/ext4-{kind}.svg")).exists());
        assert!(results.join(format!("figures/ext4-{kind}.png")).exists());
    }

    // Run again: everything is done, nothing runs, nothing is appended.
    let (code, err) = study(&results, "1");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains(&format!("{} done before, 0 to run", obs.len())), "{err}");
    assert_eq!(std::fs::read_to_string(results.join("observations.jsonl")).unwrap(), lines);
    // Killed (SIGKILL, nothing cleaned up) after three experiments: the next run takes back
    // the loop devices and mounts left behind, runs the rest, and the study ends with every
    // experiment once and nothing left attached or mounted under the folder.
    std::fs::remove_file(results.join("observations.jsonl")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_flashrig"))
        .args(study_args(&results, "1"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let obs_file = results.join("observations.jsonl");
    let start = std::time::Instant::now();
    while std::fs::read_to_string(&obs_file).unwrap_or_default().lines().count() < 3 {
        assert!(start.elapsed().as_secs() < 300, "the study wrote no 3 observations");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let (code, err) = study(&results, "1");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("done before"), "{err}");
    let again = std::fs::read_to_string(&obs_file).unwrap();
    let mut ids: Vec<String> = again
        .lines()
        .filter_map(|l| serde_json::from_str::<Observation>(l).ok())
        .map(|o| o.id)
        .collect();
    let mut want: Vec<String> = obs.iter().map(|o| o.id.clone()).collect();
    ids.sort();
    want.sort();
    assert_eq!(ids, want);
    let abs = std::path::absolute(&results).unwrap();
    let loops = text(&Command::new("losetup").args(["--list", "--raw"]).output().unwrap().stdout);
    assert!(!loops.contains(abs.to_str().unwrap()), "{loops}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(abs.to_str().unwrap()), "{mounts}");
    // Another seed would mix two studies in one folder.
    let (code, err) = study(&results, "2");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("seed 1"), "{err}");
}

#[test]
fn fsfault_names_what_it_does_not_know_and_exits_2() {
    for (args, what) in [
        (&["--kinds", "bitrot"][..], "\"bitrot\""),
        (&["--fs", "f2fs"][..], "\"f2fs\""),
        (&["--programs", "fork"][..], "\"fork\""),
    ] {
        let mut all = vec!["fsfault"];
        all.extend_from_slice(args);
        let out = flashrig(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains(what), "{args:?}: {}", text(&out.stderr));
    }
    // The study runs no configurations of its own: nothing to dump.
    let out = flashrig(&["reproduce", "fsfault", "--dump-configs", "/tmp/nowhere"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--dump-configs"), "{}", text(&out.stderr));
}
