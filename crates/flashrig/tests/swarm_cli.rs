//! Goal: `flashrig swarm` works as the README says: it runs seeded runs and prints its
//! counters, lists the stacks, refuses bad options with exit status 2 and a message naming the
//! problem, and on a failure exits with status 1 and prints a replay command that fails the
//! same way when run.
//!
//! Method: run the real binary as a child process; the failure comes from the planted bug
//! (`--planted-bug`: twophase flushes that skip a member), whose printed replay line is run
//! again.

use std::process::{Command, Output};

mod common;
use common::text;

fn flashrig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flashrig")).args(args).output().expect("run flashrig")
}

#[test]
fn a_short_swarm_runs_and_prints_its_counters() {
    let out = flashrig(&["swarm", "--runs", "6", "--stack", "concat"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout {stdout}\nstderr {stderr}");
    assert!(stdout.contains("runs:                 6"), "{stdout}");
    assert!(stdout.contains("crash states checked:"), "{stdout}");
    assert!(stdout.contains("concat:3 6"), "{stdout}");
    let list = flashrig(&["swarm", "--list"]);
    let listed = text(&list.stdout);
    assert!(list.status.success());
    for name in [
        "ssd:plp",
        "ssd:in-place",
        "ssd:slc-idle",
        "raid:6+2:cache",
        "twophase:4+2",
        "scala:2+1:host",
        "scala:4+2:offload",
        "csal:naive",
        "csal:zns",
        "csal:zns-plp",
    ] {
        assert!(listed.contains(name), "{name} not listed: {listed}");
    }
}

#[test]
fn bad_options_are_refused_with_status_2() {
    for (args, says) in [
        (vec!["swarm", "--stack", "zfs"], "no stack is named like \"zfs\""),
        (vec!["swarm", "--minutes=0"], "--minutes must be a positive number"),
        (vec!["swarm", "--rounds", "0"], "--rounds and --ops must be at least 1"),
        (vec!["swarm", "--runs", "many"], "invalid value 'many'"),
    ] {
        let out = flashrig(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn a_failure_exits_1_and_its_replay_line_fails_the_same_way() {
    let out = flashrig(&["swarm", "--runs", "50", "--stack", "twophase", "--planted-bug"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let line = |prefix: &str| {
        stderr
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in {stderr}"))
            .to_string()
    };
    let replay = line("replay: ");
    let failed = line("flashrig: run failed: ");
    let words: Vec<&str> = replay.split_whitespace().collect();
    assert_eq!(words[..2], ["flashrig", "swarm"], "{replay}");
    let again = flashrig(&words[1..]);
    let again_err = text(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{again_err}");
    // The same message: the replay is the same run, byte for byte.
    let reason = |l: &str| l.split(" failed: ").nth(1).unwrap_or_default().to_string();
    let again_failed = again_err
        .lines()
        .find_map(|l| l.strip_prefix("flashrig: run failed: "))
        .unwrap_or_else(|| panic!("no failure in {again_err}"));
    assert!(!reason(&failed).is_empty(), "{failed}");
    assert_eq!(reason(again_failed), reason(&failed));
    assert!(text(&again.stdout).contains("runs:                 1"), "{}", text(&again.stdout));
}
