//! Goal: `flashrig serve nbd` is a block device that real NBD clients use as they would any
//! other server: qemu-img converts into it and compares, qemu-io reads back the patterns it
//! wrote (aligned and not), nbdinfo sees the size, block sizes, multi-conn and structured
//! replies, nbdcopy copies both ways, fio's nbd engine verifies its own writes over two
//! connections; SIGTERM with a client connected ends the server with status 0 after a flush;
//! what a client flushed survives a SIGKILL of the server (raid and scala over files, found
//! again when the server restarts); bad configurations and addresses exit with status 2;
//! `--partitions` exports that nbdinfo lists and qemu-io writes into, each at its own offset;
//! faults armed through `--control` with `flashrig inject` fail a client's read.
//!
//! Method: the real binary serves a TOML configuration from a scratch directory, on a Unix
//! socket or TCP on a free loopback port; the test waits for its "serving ... at URI" line on
//! stderr and points the tools at that URI. A test whose tool is not installed says so and
//! skips (CI installs them). Devices are small so the file runs in well under two minutes.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::{have, scratch, text};

/// Skips the test (with the reason on stdout) unless every tool is installed.
macro_rules! require {
    ($($tool:expr),+) => {
        for t in [$($tool),+] {
            if !have(t) {
                println!("skipping: {t} is not installed");
                return;
            }
        }
    };
}

/// Runs a tool; panics with its output when it fails.
fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed ({}):\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

const RAM_64M: &str = "[device]\ntype = \"ram\"\ncapacity = \"64MiB\"\n";

/// A running `flashrig serve nbd`.
struct Server {
    child: Child,
    uri: String,
    /// Everything the server printed on stderr, line by line.
    lines: mpsc::Receiver<String>,
}

enum Where<'a> {
    Socket(&'a Path),
    Tcp,
}

impl Server {
    /// Starts serving the configuration `toml` (written into `dir`) and waits until it says
    /// where it serves.
    fn start(dir: &Path, toml: &str, at: Where<'_>, extra: &[&str]) -> Server {
        let cfg = dir.join("serve.toml");
        std::fs::write(&cfg, format!("runtime = \"real\"\nreactors = 2\n{toml}")).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flashrig"));
        cmd.args(["serve", "nbd", cfg.to_str().unwrap()]);
        match at {
            Where::Socket(p) => cmd.args(["--socket", p.to_str().unwrap()]),
            Where::Tcp => cmd.args(["--tcp", "127.0.0.1:0"]),
        };
        cmd.args(extra).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start flashrig serve");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(l) if l.starts_with("serving ") => {
                    // "serving STACK (N bytes) at URI on R reactor(s); ..."
                    let uri = l.split(" at ").nth(1).and_then(|r| r.split(' ').next());
                    let uri = uri.unwrap_or_else(|| panic!("no URI in {l:?}")).to_string();
                    return Server { child, uri, lines };
                }
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill();
                    let out = child.wait_with_output().unwrap();
                    panic!("the server did not start: {}", text(&out.stderr));
                }
            }
        }
    }

    fn signal(&self, sig: &str) {
        run("kill", &[sig, &self.child.id().to_string()]);
    }

    /// Waits for the server to exit (at most 30 s); returns its status and the rest of its
    /// stderr.
    fn wait(mut self) -> (ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut rest = String::new();
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            rest.push_str(&l);
            rest.push('\n');
        }
        (status, rest)
    }

    /// SIGTERM, then the exit status must be 0 and the stack flushed.
    fn stop(self) {
        self.signal("-TERM");
        let (status, rest) = self.wait();
        assert!(status.success(), "exit status {status}: {rest}");
        assert!(rest.contains("the stack was flushed"), "{rest}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Bytes that do not compress and differ everywhere (xorshift).
fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

/// FNV-1a: a checksum to compare copies with.
fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| (h ^ x as u64).wrapping_mul(0x0100_0000_01b3))
}

#[test]
fn qemu_img_converts_into_the_export_and_compares_equal() {
    require!("qemu-img");
    let dir = scratch();
    let src = dir.path().join("src.img");
    std::fs::write(&src, random_bytes(8 << 20, 1)).unwrap();
    let server = Server::start(dir.path(), RAM_64M, Where::Socket(&dir.path().join("s")), &[]);
    let s = src.to_str().unwrap();
    run("qemu-img", &["convert", "-n", "-f", "raw", "-O", "raw", s, &server.uri]);
    // The export is larger; qemu-img compare checks that the rest reads as zeros.
    let out = run("qemu-img", &["compare", "-f", "raw", "-F", "raw", s, &server.uri]);
    assert!(out.contains("Images are identical"), "{out}");
    server.stop();
}

/// `--stats FILE`: when the server stops, every layer's counters are in FILE, and they count
/// what the client did (here 1 MiB written into a stripe of two RAM disks).
#[test]
fn stats_written_at_stop_count_what_clients_did() {
    require!("qemu-io");
    let dir = scratch();
    let stats = dir.path().join("stats.json");
    let stack = "[device]\ntype = \"stripe\"\nchunk = \"64KiB\"\n\
                 width = 2\nmember = { type = \"ram\", capacity = \"32MiB\" }\n";
    let server = Server::start(
        dir.path(),
        stack,
        Where::Socket(&dir.path().join("s")),
        &["--stats", stats.to_str().unwrap()],
    );
    run("qemu-io", &["-f", "raw", "-c", "write -P 0xab 0 1M", &server.uri]);
    assert!(!stats.exists(), "the statistics are written when serving stops, not before");
    server.stop();
    let snap: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).expect("stats written")).unwrap();
    assert_eq!(snap["kind"], "stripe", "{snap}");
    let children = snap["children"].as_array().expect("the members' counters");
    assert_eq!(children.len(), 2, "{snap}");
    let written: u64 =
        children.iter().map(|c| c["counters"]["write_bytes"].as_u64().unwrap_or(0)).sum();
    assert_eq!(written, 1 << 20, "the members wrote what the client did: {snap}");
}

#[test]
fn qemu_io_reads_back_aligned_and_unaligned_writes() {
    require!("qemu-io");
    let dir = scratch();
    let server = Server::start(dir.path(), RAM_64M, Where::Socket(&dir.path().join("s")), &[]);
    let io = |cmds: &[&str]| {
        let mut args = vec!["-f", "raw"];
        for c in cmds {
            args.extend(["-c", c]);
        }
        args.push(&server.uri);
        let out = run("qemu-io", &args);
        assert!(!out.contains("Pattern verification failed"), "{out}");
        out
    };
    io(&["write -P 0xab 4096 8192", "write -P 0xcd 100 512", "write -P 0xef 12287 2", "flush"]);
    // A second client sees the bytes, and the untouched ones around them as zeros.
    io(&[
        "read -P 0xab 4096 8191",
        "read -P 0xef 12287 2",
        "read -P 0xcd 100 512",
        "read -P 0 0 100",
        "read -P 0 612 3484",
        "read -P 0 12289 4096",
    ]);
    server.stop();
}

#[test]
fn nbdinfo_sees_size_block_sizes_and_features_over_tcp() {
    require!("nbdinfo");
    let dir = scratch();
    let server = Server::start(dir.path(), RAM_64M, Where::Tcp, &["--name", "disk"]);
    assert!(server.uri.starts_with("nbd://127.0.0.1:"), "{}", server.uri);
    assert!(server.uri.ends_with("/disk"), "{}", server.uri);
    let v: serde_json::Value = serde_json::from_str(&run("nbdinfo", &["--json", &server.uri]))
        .expect("nbdinfo --json prints JSON");
    assert_eq!(v["structured"], true, "{v}");
    let e = &v["exports"][0];
    assert_eq!(e["export-name"], "disk", "{e}");
    assert_eq!(e["export-size"], 64u64 << 20, "{e}");
    assert_eq!(e["block_size_minimum"], 1, "{e}");
    assert_eq!(e["block_size_preferred"], 4096, "{e}");
    assert_eq!(e["block_size_maximum"], 32u64 << 20, "{e}");
    for cap in ["can_multi_conn", "can_flush", "can_fua", "can_trim", "can_zero", "can_df"] {
        assert_eq!(e[cap], true, "{cap}: {e}");
    }
    assert_eq!(e["is_read_only"], false, "{e}");
    let list = run("nbdinfo", &["--list", &server.uri]);
    assert!(list.contains("export=\"disk\""), "{list}");
    server.stop();
}

#[test]
fn read_only_serving_is_seen_and_refused_writes() {
    require!("nbdinfo", "qemu-io");
    let dir = scratch();
    let sock = dir.path().join("s");
    let server = Server::start(dir.path(), RAM_64M, Where::Socket(&sock), &["--read-only"]);
    let v: serde_json::Value =
        serde_json::from_str(&run("nbdinfo", &["--json", &server.uri])).unwrap();
    assert_eq!(v["exports"][0]["is_read_only"], true, "{v}");
    let out = Command::new("qemu-io")
        .args(["-f", "raw", "-c", "write 0 4096", &server.uri])
        .output()
        .unwrap();
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        !out.status.success() || all.contains("ermission denied") || all.contains("read-only"),
        "{all}"
    );
    server.stop();
}

#[test]
fn nbdcopy_copies_both_ways() {
    require!("nbdcopy");
    let dir = scratch();
    let src = dir.path().join("src.img");
    let data = random_bytes(64 << 20, 7);
    std::fs::write(&src, &data).unwrap();
    let server = Server::start(dir.path(), RAM_64M, Where::Socket(&dir.path().join("s")), &[]);
    // nbdcopy opens several connections at once (the export allows multi-conn).
    run("nbdcopy", &[src.to_str().unwrap(), &server.uri]);
    let back = dir.path().join("back.img");
    run("nbdcopy", &[&server.uri, back.to_str().unwrap()]);
    let got = std::fs::read(&back).unwrap();
    assert_eq!(got.len(), data.len());
    assert_eq!(checksum(&got), checksum(&data), "what came back is what went in");
    server.stop();
}

#[test]
fn fio_verifies_its_writes_over_two_connections() {
    require!("fio");
    let has_nbd = Command::new("fio").arg("--enghelp=nbd").output();
    if !has_nbd.is_ok_and(|o| o.status.success() && text(&o.stdout).contains("uri")) {
        println!("skipping: fio has no nbd engine");
        return;
    }
    let dir = scratch();
    let server = Server::start(dir.path(), RAM_64M, Where::Socket(&dir.path().join("s")), &[]);
    let uri = format!("--uri={}", server.uri);
    // Two jobs, each its own connection and its own 16 MiB, random 4 KiB writes at depth
    // 16, then fio reads everything back and checks the crc32c in every block.
    let out = run(
        "fio",
        &[
            "--name=nbdverify",
            "--ioengine=nbd",
            &uri,
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=16",
            "--numjobs=2",
            "--size=16M",
            "--offset_increment=16M",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            // No state file left behind in the working directory.
            "--verify_state_save=0",
        ],
    );
    assert_eq!(out.matches("err= 0").count(), 2, "{out}");
    assert!(!out.contains("bad magic") && !out.contains("mismatch"), "{out}");
    server.stop();
}

/// Fixed newstyle, GO on the default export, no structured replies: enough of a client to
/// hold a connection and write one block.
fn raw_client(sock: &Path) -> UnixStream {
    let mut s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut hello = [0u8; 18];
    s.read_exact(&mut hello).unwrap();
    assert_eq!(&hello[..8], b"NBDMAGIC");
    s.write_all(&3u32.to_be_bytes()).unwrap(); // fixed newstyle, no zeroes
    let mut opt = Vec::new();
    opt.extend_from_slice(b"IHAVEOPT");
    opt.extend_from_slice(&7u32.to_be_bytes()); // NBD_OPT_GO
    opt.extend_from_slice(&6u32.to_be_bytes());
    opt.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // name "", no info requests
    s.write_all(&opt).unwrap();
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).unwrap();
        let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
        let mut skip = vec![0u8; len];
        s.read_exact(&mut skip).unwrap();
        if kind == 1 {
            return s; // NBD_REP_ACK
        }
        assert_eq!(kind, 3, "NBD_REP_INFO before the ACK");
    }
}

#[test]
fn sigterm_with_a_client_connected_exits_zero_after_a_flush() {
    let dir = scratch();
    let sock = dir.path().join("s");
    let server = Server::start(dir.path(), RAM_64M, Where::Socket(&sock), &[]);
    let mut c = raw_client(&sock);
    let mut req = Vec::new();
    req.extend_from_slice(&0x2560_9513u32.to_be_bytes());
    req.extend_from_slice(&[0, 0, 0, 1]); // no flags, NBD_CMD_WRITE
    req.extend_from_slice(&42u64.to_be_bytes());
    req.extend_from_slice(&0u64.to_be_bytes());
    req.extend_from_slice(&4096u32.to_be_bytes());
    req.extend_from_slice(&[0x11; 4096]);
    c.write_all(&req).unwrap();
    let mut reply = [0u8; 16];
    c.read_exact(&mut reply).unwrap();
    assert_eq!(&reply[4..8], &[0, 0, 0, 0], "the write succeeded");
    server.stop();
    // The server closed the connection on its way out, and removed its socket.
    let mut b = [0u8; 1];
    assert_eq!(c.read(&mut b).unwrap(), 0);
    assert!(!sock.exists());
}

/// Writes with qemu-io and flushes, kills the server (SIGKILL: no shutdown flush), starts
/// it again over the same files and reads everything back.
fn survives_sigkill(stack: &str) {
    let dir = scratch();
    let stack = stack.replace("DIR", dir.path().to_str().unwrap());
    let sock = dir.path().join("s");
    let data = random_bytes(1 << 20, 3);
    let src = dir.path().join("data.img");
    std::fs::write(&src, &data).unwrap();
    let server = Server::start(dir.path(), &stack, Where::Socket(&sock), &[]);
    // A megabyte of random data (qemu-img writes and flushes), then patterns, one of them
    // unaligned, and a flush.
    let s = src.to_str().unwrap();
    run("qemu-img", &["convert", "-n", "-f", "raw", "-O", "raw", s, &server.uri]);
    run(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0x5a 2M 256k",
            "-c",
            "write -P 0xa5 3000000 1000",
            "-c",
            "flush",
            &server.uri,
        ],
    );
    server.signal("-KILL");
    let (status, _) = server.wait();
    assert!(!status.success(), "SIGKILL ends the server at once");
    let server = Server::start(dir.path(), &stack, Where::Socket(&sock), &[]);
    let out = run(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "read -P 0x5a 2M 256k",
            "-c",
            "read -P 0xa5 3000000 1000",
            "-c",
            "read -P 0 3001000 4096",
            &server.uri,
        ],
    );
    assert!(!out.contains("Pattern verification failed"), "{out}");
    let back = dir.path().join("back.img");
    run("qemu-img", &["convert", "-f", "raw", "-O", "raw", &server.uri, back.to_str().unwrap()]);
    let got = std::fs::read(&back).unwrap();
    assert_eq!(checksum(&got[..1 << 20]), checksum(&data), "the random megabyte survived");
    server.stop();
}

#[test]
fn raid_over_files_keeps_flushed_data_across_a_sigkill() {
    require!("qemu-img", "qemu-io");
    survives_sigkill(
        "[device]\ntype = \"raid\"\nk = 2\nm = 1\nchunk = \"64KiB\"\n\
         member = { type = \"file\", path = \"DIR/r{i}.img\", size = \"32MiB\", direct = false }\n",
    );
}

#[test]
fn scala_over_files_keeps_flushed_data_across_a_sigkill() {
    require!("qemu-img", "qemu-io");
    survives_sigkill(
        "[device]\ntype = \"scala\"\nk = 2\nm = 1\nchunk = \"64KiB\"\n\
         member = { type = \"file\", path = \"DIR/s{i}.img\", size = \"32MiB\", md_bytes = 16, \
         direct = false }\n",
    );
}

fn flashrig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flashrig")).args(args).output().expect("run flashrig")
}

#[test]
fn bad_configurations_and_addresses_exit_with_status_2() {
    let dir = scratch();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, format!("runtime = \"real\"\n{RAM_64M}")).unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[device]\ntype = \"ram\"\ncapacity = \"4 parsecs\"\n").unwrap();
    let g = good.to_str().unwrap();
    let not_a_socket = dir.path().join("file");
    std::fs::write(&not_a_socket, "keep me").unwrap();
    let cases: [(Vec<&str>, &str); 4] = [
        (vec!["serve", "nbd", bad.to_str().unwrap(), "--tcp", "127.0.0.1:0"], "parsecs"),
        (vec!["serve", "nbd", g, "--tcp", "localhost:port"], "not an address:port"),
        (vec!["serve", "nbd", "/nonexistent/cfg.toml", "--tcp", "127.0.0.1:0"], "cfg.toml"),
        (
            vec!["serve", "nbd", g, "--socket", not_a_socket.to_str().unwrap()],
            "exists and is not a socket",
        ),
    ];
    for (args, says) in cases {
        let out = flashrig(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?} should say {says:?}: {err}");
    }
    assert_eq!(std::fs::read(&not_a_socket).unwrap(), b"keep me", "the file was left alone");
}

/// The socket path of a server that died (a stale socket file) is taken over.
#[test]
fn a_stale_socket_file_is_replaced() {
    let dir = scratch();
    let sock: PathBuf = dir.path().join("s");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let server = Server::start(dir.path(), RAM_64M, Where::Socket(&sock), &[]);
    drop(raw_client(&sock));
    server.stop();
}

/// A served array is scrubbed in place: SIGUSR1 starts a scrub beside the clients' requests,
/// which finds a block rotted in a member file under the running server and rewrites it.
#[test]
fn sigusr1_scrubs_a_served_raid_and_heals_a_rotted_member_file() {
    use std::os::unix::fs::FileExt;
    let dir = scratch();
    let sock = dir.path().join("nbd.sock");
    let toml = format!(
        "[device]\ntype = \"raid\"\nk = 2\nm = 1\nchunk = \"16KiB\"\n\
         member = {{ type = \"file\", path = \"{}/m{{i}}.img\", size = \"1MiB\", md_bytes = 16 }}\n",
        dir.path().display()
    );
    let server = Server::start(dir.path(), &toml, Where::Socket(&sock), &[]);
    // Block 5 of member 1 was never written: it must read as zeros with zeroed metadata.
    let member =
        std::fs::OpenOptions::new().read(true).write(true).open(dir.path().join("m1.img")).unwrap();
    member.write_at(&[0x5A], 5 * 4096 + 17).unwrap();
    member.sync_all().unwrap();
    server.signal("-USR1");
    let deadline = Instant::now() + Duration::from_secs(30);
    let line = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match server.lines.recv_timeout(left) {
            Ok(l) if l.starts_with("scrub: ") => break l,
            Ok(_) => {}
            Err(_) => panic!("no scrub report within 30 s"),
        }
    };
    assert!(line.contains("1 failed their checksum") && line.contains("1 repaired"), "{line}");
    server.stop();
    let mut byte = [0xFFu8];
    member.read_at(&mut byte, 5 * 4096 + 17).unwrap();
    assert_eq!(byte[0], 0, "the rotted byte is rewritten");
}

#[test]
fn partition_exports_are_listed_by_nbdinfo_and_written_by_qemu_io() {
    require!("nbdinfo", "qemu-io");
    let dir = scratch();
    let sock = dir.path().join("s");
    let server = Server::start(
        dir.path(),
        RAM_64M,
        Where::Socket(&sock),
        &["--name", "vm", "--partitions", "4"],
    );
    let list = run("nbdinfo", &["--list", &server.uri]);
    for name in ["vm", "vm-0", "vm-1", "vm-2", "vm-3"] {
        assert!(list.contains(&format!("export=\"{name}\"")), "{name}: {list}");
    }
    let uri = |name: &str| format!("nbd+unix:///{name}?socket={}", sock.display());
    let v: serde_json::Value =
        serde_json::from_str(&run("nbdinfo", &["--json", &uri("vm-2")])).unwrap();
    assert_eq!(v["exports"][0]["export-size"], 16u64 << 20, "{v}");
    // Written through partition 2 at 100, read back through the whole device 32 MiB later.
    let out =
        run("qemu-io", &["-f", "raw", "-c", "write -P 0x5a 100 5000", "-c", "flush", &uri("vm-2")]);
    assert!(out.contains("wrote 5000/5000"), "{out}");
    let at = (32u64 << 20) + 100;
    let out = run(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            &format!("read -P 0x5a {at} 5000"),
            "-c",
            "read -P 0 0 4096",
            &uri("vm"),
        ],
    );
    assert!(!out.contains("Pattern verification failed"), "{out}");
    server.stop();
}

/// `flashrig inject` arms and disarms faults of a served `inject` layer while qemu-io reads
/// through it: a read error armed for the next read of block 5 fails exactly that read, `list`
/// shows it fired once, and a bad fault or an unknown id exits 2 with the reason.
#[test]
fn faults_armed_at_run_time_fail_a_clients_read() {
    require!("qemu-io");
    let dir = scratch();
    let control = dir.path().join("control");
    let stack = "[device]\ntype = \"inject\"\nmember = { type = \"ram\", capacity = \"16MiB\" }\n";
    let server = Server::start(
        dir.path(),
        stack,
        Where::Socket(&dir.path().join("s")),
        &["--control", control.to_str().unwrap()],
    );
    let ctl = |args: &[&str]| {
        let mut all = vec!["inject", control.to_str().unwrap()];
        all.extend_from_slice(args);
        flashrig(&all)
    };
    let qemu_io = |cmd: &str| {
        Command::new("qemu-io").args(["-f", "raw", "-c", cmd, &server.uri]).output().unwrap()
    };
    let read_5 = "read -P 0x5a 20480 4096";
    assert!(qemu_io("write -P 0x5a 16384 12288").status.success());
    let armed = ctl(&["arm", "kind = \"read-error\"", "lba = 5", "nth = 1"]);
    assert!(armed.status.success(), "{}", text(&armed.stderr));
    assert_eq!(text(&armed.stdout).trim(), "armed fault 0");
    let failed = qemu_io(read_5);
    let said = format!("{}{}", text(&failed.stdout), text(&failed.stderr));
    assert!(said.contains("Input/output error"), "the read did not fail: {said}");
    // Fired once (nth = 1): the next read passes and finds the data intact.
    let again = qemu_io(read_5);
    assert!(again.status.success() && !text(&again.stdout).contains("failed"), "{again:?}");
    let list = ctl(&["list"]);
    assert_eq!(text(&list.stdout).trim(), "inject 0 read-error fired 1");
    assert!(ctl(&["disarm", "0"]).status.success());
    assert_eq!(text(&ctl(&["list"]).stdout), "");
    for (args, says) in [
        (vec!["arm", "kind = \"melt\""], "melt"),
        (vec!["arm", "kind = \"lost\"", "lba = 99999"], "outside the device"),
        (vec!["disarm", "7"], "no fault 7"),
        (vec!["arm", "--layer", "other", "kind = \"lost\""], "no inject layer named"),
    ] {
        let out = ctl(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(text(&out.stderr).contains(says), "{args:?}: {}", text(&out.stderr));
    }
    server.stop();
    assert!(!control.exists(), "the control socket is removed when serving stops");
    let gone = ctl(&["list"]);
    assert_eq!(gone.status.code(), Some(2));
    assert!(text(&gone.stderr).contains("no flashrig control socket"));
}
