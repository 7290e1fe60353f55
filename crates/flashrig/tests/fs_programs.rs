//! Goal: the test programs of the thesis' Table 2.2 (`flashrig debug fs-program`) each make
//! their system call on the populated tree (`flashrig debug fs-populate`), succeed and leave the
//! effect they should on a healthy file system; and when the file system misbehaves, the
//! program says which step failed and with which error number, and exits 1: a missing file is
//! ENOENT at the first step, bytes that differ from what was written fail `read`'s comparison.
//! An unknown program exits 2.
//!
//! Method: the real binary on a scratch directory of the machine's file system, a fresh
//! population for every program (chdir and chroot change the process, so each program is a
//! process of its own). `chroot` needs root: without it the program must fail with EPERM.

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
