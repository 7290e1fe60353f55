//! Goal: on `file` devices, every write acknowledged before a completed flush survives the
//! writer being killed with SIGKILL, and nothing reads back that was never written; and the
//! check that says so fails when a flushed block is damaged.
//!
//! Method: `flashrig debug crash-writer` writes self-describing blocks (with per-block
//! metadata in the file device's sidecar) to a stripe of three files, eight writes in flight,
//! flushing every 16 writes, and logs each issue, completion and flush on stdout. The test
//! reads the log as it comes, kills the child with SIGKILL after a chosen number of completed
//! flushes, and runs `flashrig debug crash-check`, which reopens the files, replays the log
//! into the reference model and reads every written block back. Runs on both runtimes, with
//! O_DIRECT and buffered I/O, at several kill points.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

fn flashrig() -> Command {
    Command::new(env!("CARGO_BIN_EXE_flashrig"))
}

fn config(dir: &Path, runtime: &str, direct: bool, seed: u64) -> String {
    format!(
        r#"seed = {seed}
runtime = "{runtime}"

[device]
type = "stripe"
chunk = "32KiB"
width = 3
member = {{ type = "file", path = "{}/member{{i}}.img", size = "4MiB", md_bytes = 16, direct = {direct} }}
"#,
        dir.display()
    )
}

/// Starts a crash writer, kills it after `flushes` completed flushes, returns its log.
fn write_and_kill(cfg: &Path, flushes: usize) -> String {
    let mut child = flashrig()
        .args(["debug", "crash-writer", cfg.to_str().unwrap(), "--iodepth", "8"])
        .args(["--flush-every", "16"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start crash writer");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut log = String::new();
    let mut seen = 0;
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    while seen < flushes {
        line.clear();
        let n = reader.read_line(&mut line).expect("read log");
        if n == 0 {
            let out = child.wait_with_output().expect("wait");
            panic!("the writer exited early: {}", String::from_utf8_lossy(&out.stderr));
        }
        if line.starts_with("FD ") {
            seen += 1;
        }
        log.push_str(&line);
    }
    // SIGKILL: no destructor, no flush, no goodbye.
    child.kill().expect("kill writer");
    // Whatever the writer printed before it died is part of the log.
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut reader, &mut rest);
    log.push_str(&rest);
    let status = child.wait().expect("reap writer");
    assert!(!status.success(), "the writer was killed, not finished");
    log
}

fn crash_check(cfg: &Path, log: &Path) -> std::process::Output {
    flashrig()
        .args(["debug", "crash-check", cfg.to_str().unwrap(), "--log", log.to_str().unwrap()])
        .output()
        .expect("run crash-check")
}

#[test]
fn flushed_writes_survive_sigkill() {
    let cases = [("real", true, 3, 5), ("real", false, 4, 40), ("sim", true, 5, 20)];
    for (runtime, direct, seed, flushes) in cases {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let cfg = dir.path().join("crash.toml");
        std::fs::write(&cfg, config(dir.path(), runtime, direct, seed)).unwrap();
        let log = write_and_kill(&cfg, flushes);
        let log_path = dir.path().join("writer.log");
        std::fs::write(&log_path, &log).unwrap();
        let out = crash_check(&cfg, &log_path);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{runtime} direct={direct} seed {seed}, killed after {flushes} flushes:\n{stderr}"
        );
        assert!(stdout.contains("crash check passed"), "{stdout}");
        assert!(flushes_at_least(&stdout, flushes), "{stdout}");
    }
}

/// Whether crash-check counted at least `flushes` completed flushes in the log. (The kill lands
/// after the `flushes`-th completion was read, so a few more may have made it into the log.)
fn flushes_at_least(stdout: &str, flushes: usize) -> bool {
    stdout
        .split('(')
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse::<usize>().ok())
        .is_some_and(|n| n >= flushes)
}

#[test]
fn the_crash_check_notices_a_damaged_flushed_block() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let cfg = dir.path().join("crash.toml");
    std::fs::write(&cfg, config(dir.path(), "real", true, 11)).unwrap();
    let log = write_and_kill(&cfg, 10);
    let log_path = dir.path().join("writer.log");
    std::fs::write(&log_path, &log).unwrap();
    // Zero the first 4 KiB of the first member that holds a written block: the stripe's LBA of
    // a block that a completed flush covered will read back as zeros.
    let first_write = log
        .lines()
        .find_map(|l| l.strip_prefix("W ").and_then(|r| r.split(' ').next()?.parse::<u64>().ok()))
        .expect("a completed write");
    // 32 KiB chunks of 4 KiB blocks over three members: where that LBA lives.
    let chunk = first_write / 8;
    let member = chunk % 3;
    let offset = ((chunk / 3) * 8 + first_write % 8) * 4096;
    let path = dir.path().join(format!("member{member}.img"));
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0u8; 4096], offset).unwrap();
    f.sync_all().unwrap();
    let out = crash_check(&cfg, &log_path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "the damage went unnoticed: {stderr}");
    assert!(stderr.contains(&format!("lba {first_write}")), "{stderr}");
}

/// Emulated SSDs with a `backing` NAND image file come back from it after SIGKILL: a stripe
/// of two `tiny` SSDs (their write buffers lost at the kill, as in a power cut without
/// protection), on both runtimes.
#[test]
fn emulated_ssds_with_image_files_keep_flushed_writes_through_sigkill() {
    for (runtime, seed, flushes) in [("real", 21, 30), ("sim", 22, 25)] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let cfg = dir.path().join("crash.toml");
        let text = format!(
            r#"seed = {seed}
runtime = "{runtime}"

[device]
type = "stripe"
chunk = "32KiB"
width = 2
member = {{ type = "ssd", preset = "tiny", timing = "functional", backing = "{}/ssd{{i}}.img" }}
"#,
            dir.path().display()
        );
        std::fs::write(&cfg, text).unwrap();
        let log = write_and_kill(&cfg, flushes);
        let log_path = dir.path().join("writer.log");
        std::fs::write(&log_path, &log).unwrap();
        assert!(dir.path().join("ssd1.img").exists(), "the image files were not made");
        let out = crash_check(&cfg, &log_path);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{runtime} seed {seed}:\n{stdout}\n{stderr}");
        assert!(stdout.contains("crash check passed"), "{stdout}");
        assert!(flushes_at_least(&stdout, flushes), "{stdout}");
    }
}
