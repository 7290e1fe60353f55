//! Goal: the `nbd` device, an NBD client, stores and returns real bytes on real NBD servers
//! exactly as the block-device contract says; flush, FUA and trim reach the server as the
//! device documents (native FUA, FUA emulated by a flush, write-zeroes for trim, zeros written
//! where the server cannot zero, no flush where the server has no write cache); a server that
//! dies mid-run makes every request in flight and every later one fail with `DeviceFailed`,
//! neither hanging nor panicking; and unsuitable servers are refused with a message that names
//! the problem.
//!
//! Method: each test starts its own server on a Unix socket in a fresh directory: `nbdkit
//! memory` (alone, or behind the `log`, `fua`, `nozero` and `blocksize-policy` filters to vary
//! what it advertises and to record what it receives), `nbdkit eval` for a server without
//! flush, and `qemu-nbd` on a raw image file. The seeded reference-model checker of
//! `flashrig-check` drives the device on the real runtime (two reactors, several commands in
//! flight, one or three connections); after a qemu-nbd run, a second connection and the image
//! file itself are read back against the same model. The failure test stops the server
//! (SIGSTOP) so that requests are certainly in flight, then kills it. A test whose tool is
//! missing says so and skips. A watchdog aborts a test that hangs, since a hang is the failure
//! this device must not have.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flashrig_blockdev::{BlockDevice, DevError, DevRef, WriteHints};
use flashrig_check::{run_check, seeds, verify_all, CheckConfig, CheckReport, Model};
use flashrig_devices::{FileDevice, FileOptions, IoEngine, NbdDevice, NbdOptions, NbdUri};
use flashrig_runtime::{run, RuntimeKind};
use parking_lot::Mutex;

/// Whether `tool` runs here; prints why the test skips when not.
fn have(tool: &str, test: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipping {test}: {tool} is not installed (Debian: nbdkit, qemu-utils)");
    }
    ok
}

/// Aborts the test process if a test runs far longer than it can: a hang is the failure the
/// NBD device must not have, and a hung test would otherwise never report.
struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    fn new(what: &'static str) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        std::thread::spawn(move || {
            let limit = Duration::from_secs(600);
            let start = Instant::now();
            while start.elapsed() < limit {
                if d.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            eprintln!("{what}: still running after {} s, so it hangs; aborting", limit.as_secs());
            std::process::abort();
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A server process on a Unix socket in its own directory; killed and reaped on drop.
struct Server {
    child: Child,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Server {
    /// Starts `program args...` (with `{sock}` and `{dir}` replaced) and waits until its
    /// socket exists.
    fn start(program: &str, args: &[&str]) -> Server {
        // Under /tmp: a Unix socket path must stay short.
        let dir = tempfile::Builder::new().prefix("frnbd").tempdir().expect("scratch directory");
        let socket = dir.path().join("s.sock");
        let fill = |a: &&str| {
            a.replace("{sock}", socket.to_str().unwrap())
                .replace("{dir}", dir.path().to_str().unwrap())
        };
        let child = Command::new(program)
            .args(args.iter().map(fill))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let mut s = Server { child, dir, socket };
        let start = Instant::now();
        while !s.socket.exists() {
            if let Ok(Some(status)) = s.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = s.child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                panic!("{program} {args:?} exited with {status} before serving: {err}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{program} never created its socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    fn nbdkit(args: &[&str]) -> Server {
        let mut all = vec!["-f", "--exit-with-parent", "-U", "{sock}"];
        all.extend_from_slice(args);
        Server::start("nbdkit", &all)
    }

    fn uri(&self, export: &str) -> NbdUri {
        NbdUri::parse(&format!("nbd+unix:///{export}?socket={}", self.socket.display())).unwrap()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn options(uri: NbdUri, connections: usize) -> NbdOptions {
    NbdOptions { connections, ..NbdOptions::new(uri) }
}

async fn open(opts: NbdOptions) -> Arc<NbdDevice> {
    Arc::new(NbdDevice::open("nbd", opts).await.unwrap_or_else(|e| panic!("open: {e}")))
}

/// Runs the checker against the export on the real runtime (two reactors).
fn check(opts: NbdOptions, cfg: CheckConfig, model: Option<Arc<Mutex<Model>>>) -> CheckReport {
    let what = format!("{} x{}", opts.uri, opts.connections);
    let (res, _) = run(RuntimeKind::Real, 2, move || async move {
        let dev: DevRef = open(opts).await;
        // The server outlives one check: start from zeros (a 64 MiB trim, itself split into
        // several requests, and checked by everything that follows).
        dev.trim(0, dev.info().num_blocks).await.expect("wiping the export");
        let model =
            model.unwrap_or_else(|| Arc::new(Mutex::new(Model::for_device(dev.info(), cfg.seed))));
        run_check(dev, model, &cfg).await
    });
    let rep = res.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(rep.writes > 0 && rep.reads > 0 && rep.trims > 0 && rep.flushes > 0, "{rep:?}");
    rep
}

fn config(seed: u64) -> CheckConfig {
    CheckConfig { seed, spread_over_reactors: true, queue_depth: 16, ..CheckConfig::default() }
}

#[test]
fn nbdkit_memory_matches_the_model() {
    if !have("nbdkit", "nbdkit_memory_matches_the_model") {
        return;
    }
    let _w = Watchdog::new("nbdkit_memory_matches_the_model");
    let server = Server::nbdkit(&["memory", "64M"]);
    for seed in seeds(1, 2) {
        // nbdkit memory advertises CAN_MULTI_CONN, so three connections are allowed.
        for connections in [1, 3] {
            check(options(server.uri(""), connections), config(seed), None);
        }
    }
    // A server that takes at most 64 KiB per request: larger commands are split.
    let small = Server::nbdkit(&[
        "--filter=blocksize-policy",
        "memory",
        "64M",
        "blocksize-maximum=65536",
        "blocksize-preferred=8192",
    ]);
    let (info, _) = run(RuntimeKind::Real, 1, {
        let uri = small.uri("");
        move || async move {
            let dev = open(options(uri, 1)).await;
            // 256 KiB each way: four requests each.
            let data: Vec<u8> = (0..256 << 10).map(|i: u32| (i % 251) as u8).collect();
            dev.write(3, &data, None, WriteHints::NONE).await.unwrap();
            let mut back = vec![0u8; data.len()];
            dev.read(3, &mut back, None).await.unwrap();
            assert!(back == data, "a split read returns the split write's bytes in order");
            let m = dev.metrics().unwrap();
            (dev.info().clone(), m.counter("max_request_bytes").get(), m.counter("requests").get())
        }
    });
    assert_eq!((info.1, info.2), (65536, 8));
    assert_eq!(info.0.optimal_io_blocks, 2);
    for seed in seeds(10, 2) {
        let cfg = CheckConfig { max_io_blocks: 64, ..config(seed) };
        check(options(small.uri(""), 1), cfg, None);
    }
}

#[test]
fn qemu_nbd_on_a_raw_image_matches_the_model_and_keeps_the_data() {
    if !have("qemu-nbd", "qemu_nbd_on_a_raw_image_matches_the_model_and_keeps_the_data") {
        return;
    }
    let _w = Watchdog::new("qemu_nbd_on_a_raw_image");
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let image = dir.path().join("disk.raw");
    std::fs::File::create(&image).unwrap().set_len(64 << 20).unwrap();
    let img = image.to_str().unwrap();
    // -t: keep serving after a client leaves, for the second connection below.
    let server =
        Server::start("qemu-nbd", &["-k", "{sock}", "-f", "raw", "-t", "--discard=unmap", img]);
    for seed in seeds(100, 2) {
        let cfg = config(seed);
        let model = Arc::new(Mutex::new(Model::new(4096, 0, seed)));
        check(options(server.uri(""), 1), cfg, Some(model.clone()));
        // A new connection reads what the first one wrote: the data lives on the server.
        let (res, _) = run(RuntimeKind::Real, 1, {
            let (uri, model) = (server.uri(""), model.clone());
            move || async move {
                let dev: DevRef = open(options(uri, 1)).await;
                verify_all(&dev, &model).await
            }
        });
        assert!(res.unwrap_or_else(|e| panic!("second connection: {e}")) > 0);
        // And the image file itself holds it: the final flush reached qemu-nbd's medium.
        let (res, _) = run(RuntimeKind::Real, 1, {
            let (image, model) = (image.clone(), model.clone());
            move || async move {
                let opts = FileOptions {
                    direct: false,
                    io: IoEngine::Sync,
                    ..FileOptions::new(image, None)
                };
                let dev: DevRef = Arc::new(FileDevice::open("image", &opts).unwrap());
                verify_all(&dev, &model).await
            }
        });
        assert!(res.unwrap_or_else(|e| panic!("image file: {e}")) > 0);
    }
}

/// The transactions nbdkit's log filter recorded, once the connection has ended (the log is
/// written as requests arrive; `Disconnect` is its last line for a connection).
fn log_lines(log: &Path) -> Vec<String> {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("Disconnect") || start.elapsed() > Duration::from_secs(60) {
            return text.lines().map(str::to_string).collect();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The log's request lines of one kind (`Write`, `Zero`, `Flush`, `Trim`), without timestamps.
fn requests(lines: &[String], kind: &str) -> Vec<String> {
    let pat = format!(" {kind} id=");
    lines
        .iter()
        .filter(|l| l.contains(&pat))
        .map(|l| l[l.find(&pat).unwrap() + 1..].to_string())
        .collect()
}

/// Writes with and without FUA, flushes, trims 4 blocks at 8, reads them back as zeros.
fn exercise(uri: NbdUri) -> (bool, u64) {
    let (r, _) = run(RuntimeKind::Real, 1, move || async move {
        let dev = open(options(uri, 1)).await;
        let fua = dev.info().caps.fua;
        let data = vec![0xA5u8; 4 * 4096];
        dev.write(8, &data, None, WriteHints::NONE).await.unwrap();
        dev.write(0, &data[..4096], None, WriteHints::FUA).await.unwrap();
        dev.flush().await.unwrap();
        dev.trim(8, 4).await.unwrap();
        let mut back = vec![1u8; 4 * 4096];
        dev.read(8, &mut back, None).await.unwrap();
        assert!(back.iter().all(|&b| b == 0), "trimmed blocks must read as zeros");
        let skipped = dev.metrics().unwrap().counter("flushes_without_server_flush").get();
        (fua, skipped)
    });
    r
}

#[test]
fn flush_fua_and_trim_reach_the_server_as_documented() {
    if !have("nbdkit", "flush_fua_and_trim_reach_the_server_as_documented") {
        return;
    }
    let _w = Watchdog::new("flush_fua_and_trim");
    // Native FUA, flush, write-zeroes that may deallocate.
    let s = Server::nbdkit(&["--filter=log", "memory", "64M", "logfile={dir}/log"]);
    let (fua, skipped) = exercise(s.uri(""));
    let lines = log_lines(&s.path("log"));
    assert!(fua && skipped == 0);
    let writes = requests(&lines, "Write");
    assert_eq!(writes.len(), 2, "{lines:#?}");
    assert!(writes[0].contains("offset=0x8000 count=0x4000") && writes[0].contains("fua=0"));
    assert!(writes[1].contains("offset=0x0 count=0x1000") && writes[1].contains("fua=1"));
    assert_eq!(requests(&lines, "Flush").len(), 1, "{lines:#?}");
    let zeros = requests(&lines, "Zero");
    assert_eq!(zeros.len(), 1, "{lines:#?}");
    assert!(
        zeros[0].contains("offset=0x8000 count=0x4000") && zeros[0].contains(" trim=1"),
        "{zeros:#?}"
    );
    // (trim=1: NBD_CMD_FLAG_NO_HOLE was not set, the server may deallocate.) NBD_CMD_TRIM
    // leaves contents undefined, so it is never sent.
    assert!(requests(&lines, "Trim").is_empty(), "{lines:#?}");

    // No FUA and no write-zeroes on the server: FUA becomes a flush after the write, and a
    // trim writes zeros.
    let s = Server::nbdkit(&[
        "--filter=log",
        "--filter=fua",
        "--filter=nozero",
        "memory",
        "64M",
        "logfile={dir}/log",
    ]);
    let (fua, skipped) = exercise(s.uri(""));
    let lines = log_lines(&s.path("log"));
    assert!(!fua && skipped == 0);
    let writes = requests(&lines, "Write");
    assert_eq!(writes.len(), 3, "{lines:#?}");
    assert!(writes.iter().all(|w| w.contains("fua=0")), "{writes:#?}");
    assert!(writes[2].contains("offset=0x8000 count=0x4000"), "the trim's zeros: {writes:#?}");
    // One flush for the FUA write, one for the flush command.
    assert_eq!(requests(&lines, "Flush").len(), 2, "{lines:#?}");
    assert!(requests(&lines, "Zero").is_empty() && requests(&lines, "Trim").is_empty());
    // The FUA write's flush comes after the write's reply, before the next command.
    let pos = |needle: &str| lines.iter().position(|l| l.contains(needle)).unwrap();
    assert!(pos(" Write id=2 ") < pos(" Flush id="), "{lines:#?}");

    // A server without flush has no write cache: flush sends nothing, FUA holds anyway.
    let s = Server::nbdkit(&[
        "--filter=log",
        "eval",
        "get_size=echo 67108864",
        "pread=dd if=/dev/zero bs=$3 count=1 status=none",
        "can_write=exit 0",
        "pwrite=cat >/dev/null",
        "logfile={dir}/log",
    ]);
    let (r, _) = run(RuntimeKind::Real, 1, {
        let uri = s.uri("");
        move || async move {
            let dev = open(options(uri, 1)).await;
            let fua = dev.info().caps.fua;
            dev.write(0, &[7u8; 4096], None, WriteHints::FUA).await.unwrap();
            dev.flush().await.unwrap();
            (fua, dev.metrics().unwrap().counter("flushes_without_server_flush").get())
        }
    });
    assert_eq!(r, (true, 1));
    let lines = log_lines(&s.path("log"));
    assert!(requests(&lines, "Flush").is_empty(), "{lines:#?}");
    assert_eq!(requests(&lines, "Write").len(), 1, "{lines:#?}");
}

#[test]
fn a_killed_server_fails_every_request_with_device_failed() {
    if !have("nbdkit", "a_killed_server_fails_every_request_with_device_failed") {
        return;
    }
    let _w = Watchdog::new("a_killed_server");
    let server = Server::nbdkit(&["memory", "64M"]);
    let pid = server.pid();
    let (outcome, _) = run(RuntimeKind::Real, 2, {
        let uri = server.uri("");
        move || async move {
            let dev = open(options(uri, 2)).await;
            dev.write(0, &[1u8; 4096], None, WriteHints::NONE).await.unwrap();
            // Stopped, the server reads nothing and answers nothing: what is sent now stays
            // in flight until the kill.
            // SAFETY: kill(2) with a pid this test started and a plain signal number.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
            wait_until_stopped(pid);
            let mut tasks = Vec::new();
            for i in 0..32u64 {
                let dev = dev.clone();
                // Spread over both reactors, so both connections carry requests.
                tasks.push(flashrig_runtime::spawn_on(i as usize % 2, move || async move {
                    if i % 2 == 0 {
                        let mut buf = vec![0u8; 8192];
                        dev.read(i, &mut buf, None).await
                    } else {
                        dev.write(i, &vec![2u8; 8192], None, WriteHints::NONE).await
                    }
                }));
            }
            // Let the tasks send their requests (nothing below depends on how many did).
            flashrig_runtime::sleep_ns(100_000_000).await;
            // SAFETY: as above.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
            let mut results = Vec::new();
            for t in tasks {
                results.push(t.await);
            }
            let mut buf = vec![0u8; 4096];
            let later = dev.read(0, &mut buf, None).await;
            let flush = dev.flush().await;
            let failed = dev.metrics().unwrap().counter("failed_connections").get();
            (results, later, flush, dev.failure(), failed)
        }
    });
    let (results, later, flush, failure, failed) = outcome;
    for r in results.iter().chain([&later, &flush]) {
        match r {
            Err(DevError::DeviceFailed { name }) => {
                assert!(name.contains("nbd") && name.contains("socket="), "{name}")
            }
            other => panic!("expected DeviceFailed, got {other:?}"),
        }
    }
    let failure = failure.expect("the device reports why it failed");
    assert!(
        ["closed the connection", "reset", "sending to the server"]
            .iter()
            .any(|w| failure.contains(w)),
        "{failure}"
    );
    assert_eq!(failed, 2, "both connections failed");
}

/// Waits until every thread of `pid` has stopped: a signal is delivered asynchronously, and a
/// server thread still running could answer a request sent after the SIGSTOP.
fn wait_until_stopped(pid: libc::pid_t) {
    let start = Instant::now();
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc of the server");
        let all_stopped = tasks.flatten().all(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            // The state follows the parenthesised command name.
            stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T'))
        });
        if all_stopped {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the server never stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn open_error(opts: NbdOptions) -> String {
    let (r, _) = run(RuntimeKind::Real, 1, move || async move {
        NbdDevice::open("nbd", opts).await.map(|_| ()).map_err(|e| e.to_string())
    });
    r.expect_err("the open must fail")
}

#[test]
fn unreachable_and_unsuitable_servers_are_refused_with_clear_errors() {
    let _w = Watchdog::new("unreachable_and_unsuitable_servers");
    let gone = NbdUri::parse("nbd+unix:///?socket=/nonexistent/flashrig.sock").unwrap();
    let e = open_error(options(gone, 1));
    assert!(e.contains("cannot connect") && e.contains("/nonexistent/flashrig.sock"), "{e}");
    // Port 1 on the loopback: nothing listens there.
    let e = open_error(options(NbdUri::parse("nbd://127.0.0.1:1/").unwrap(), 1));
    assert!(e.contains("nbd://127.0.0.1:1/") && e.contains("cannot connect"), "{e}");
    if !have("nbdkit", "unreachable_and_unsuitable_servers (nbdkit part)") {
        return;
    }
    let odd = Server::nbdkit(&["memory", "1000000"]);
    let e = open_error(options(odd.uri(""), 1));
    assert!(e.contains("1000000 bytes") && e.contains("block_size 4096"), "{e}");
    let big_blocks =
        Server::nbdkit(&["--filter=blocksize-policy", "memory", "64M", "blocksize-minimum=4096"]);
    let e = open_error(NbdOptions { block_size: 512, ..options(big_blocks.uri(""), 1) });
    assert!(e.contains("minimum block size is 4096"), "{e}");
    let single =
        Server::nbdkit(&["--filter=multi-conn", "memory", "64M", "multi-conn-mode=disable"]);
    let e = open_error(options(single.uri(""), 2));
    assert!(e.contains("CAN_MULTI_CONN") && e.contains("connections = 1"), "{e}");
    if !have("qemu-nbd", "unreachable_and_unsuitable_servers (qemu-nbd part)") {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let image = dir.path().join("disk.raw");
    std::fs::File::create(&image).unwrap().set_len(16 << 20).unwrap();
    let q = Server::start(
        "qemu-nbd",
        &["-k", "{sock}", "-f", "raw", "-t", "-e", "4", "-x", "disk", image.to_str().unwrap()],
    );
    let e = open_error(options(q.uri("other"), 1));
    assert!(e.contains("no export named \"other\""), "{e}");
    // The right export opens.
    let (r, _) = run(RuntimeKind::Real, 1, {
        let uri = q.uri("disk");
        move || async move { open(options(uri, 1)).await.info().num_blocks }
    });
    assert_eq!(r, 4096);
}
