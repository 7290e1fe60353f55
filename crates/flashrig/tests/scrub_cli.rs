//! Goal: `flashrig scrub <config>` finds silent corruption in the member files of an array a
//! real run wrote, repairs it in the files from redundancy, reports what it did, and exits 1
//! when damage exceeds the redundancy and 2 for a stack with nothing to scrub.
//!
//! Method: a `raid` 2+1 over three file members with a 16-byte metadata sidecar, filled by
//! `flashrig run` (sequential writes of the whole array). The test flips bytes in the member
//! files between processes, as bit rot would, runs the real binary, and compares the files'
//! bytes with their contents before the damage.

mod common;

use std::path::Path;
use std::process::Command;

use common::{scratch, text};

const BLOCK_BYTES: u64 = 4096;

fn write_config(dir: &Path) -> std::path::PathBuf {
    let cfg = dir.join("raid.toml");
    let body = format!(
        r#"seed = 1
runtime = "real"
reactors = 1

[device]
type = "raid"
k = 2
m = 1
chunk = "16KiB"
member = {{ type = "file", path = "{}/m{{i}}.img", size = "1MiB", md_bytes = 16 }}

[workload]
rw = "write"
bs = "64KiB"
iodepth = 4
"#,
        dir.display()
    );
    std::fs::write(&cfg, body).unwrap();
    cfg
}

fn flashrig(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_flashrig")).args(args).output().expect("flashrig runs")
}

fn flip(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x20;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn scrub_repairs_rotted_member_files_and_fails_beyond_redundancy() {
    let dir = scratch();
    let cfg = write_config(dir.path());
    let cfg_s = cfg.to_str().unwrap();
    let run = flashrig(&["run", cfg_s, "-q"]);
    assert!(run.status.success(), "run: {}", text(&run.stderr));
    let members: Vec<_> = (0..3).map(|i| dir.path().join(format!("m{i}.img"))).collect();
    let before: Vec<Vec<u8>> = members.iter().map(|m| std::fs::read(m).unwrap()).collect();

    let clean = flashrig(&["scrub", cfg_s, "--json"]);
    assert!(clean.status.success(), "scrub: {}", text(&clean.stderr));
    let report: serde_json::Value = serde_json::from_slice(&clean.stdout).unwrap();
    assert_eq!(report["checksum_errors"], 0, "{report}");
    assert_eq!(report["blocks_checked"], 3 * 256, "every member block is read: {report}");

    // Rot two blocks of member 0 and one of member 2, in other rows.
    flip(&members[0], 3 * BLOCK_BYTES + 100);
    flip(&members[0], 40 * BLOCK_BYTES + 7);
    flip(&members[2], 77 * BLOCK_BYTES + 4095);
    let fixed = flashrig(&["scrub", cfg_s]);
    let out = text(&fixed.stdout);
    assert!(fixed.status.success(), "scrub: {out} {}", text(&fixed.stderr));
    assert!(out.contains("3 failed their checksum") && out.contains("3 repaired"), "{out}");
    for (i, m) in members.iter().enumerate() {
        assert!(std::fs::read(m).unwrap() == before[i], "member {i} is restored byte for byte");
    }

    // The same row rotted on two members of a single-parity array: beyond redundancy.
    flip(&members[0], 9 * BLOCK_BYTES);
    flip(&members[1], 9 * BLOCK_BYTES);
    let lost = flashrig(&["scrub", cfg_s]);
    assert_eq!(lost.status.code(), Some(1), "{}", text(&lost.stdout));
    assert!(text(&lost.stdout).contains("2 unrepairable"), "{}", text(&lost.stdout));
    assert!(text(&lost.stderr).contains("beyond the stack's redundancy"), "{}", text(&lost.stderr));
}

#[test]
fn scrubbing_a_stack_without_redundancy_is_bad_input() {
    let dir = scratch();
    let cfg = dir.path().join("ram.toml");
    std::fs::write(&cfg, "[device]\ntype = \"ram\"\ncapacity = \"1MiB\"\n").unwrap();
    let out = flashrig(&["scrub", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no redundancy to scrub"), "{}", text(&out.stderr));
    let missing = flashrig(&["scrub", "/nonexistent/flashrig.toml"]);
    assert_eq!(missing.status.code(), Some(2));
}
