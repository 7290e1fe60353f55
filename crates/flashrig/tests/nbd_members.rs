//! Goal: "disaggregated members": a `raid` 2+1 whose members are NBD exports on other hosts
//! works end to end through the `flashrig` binary: a verifying write run stores stamped blocks
//! on the remote members, a second process reads every one of them back, a member whose
//! server dies leaves the array readable degraded with every block still correct, a member
//! that dies during a run is reported (the run ends, degraded, instead of hanging), and a
//! member that cannot be reached is a stack error naming the member and its URI.
//!
//! Method: the test makes three network namespaces (`flashrig-t<pid>-<i>`), each joined to
//! this one by a veth pair with addresses on a private /30, with `lo` and both ends up, and
//! starts one NBD server inside each with `ip netns exec`, listening on the namespace's veth
//! address: nbdkit's memory plugin, qemu-nbd on a raw image file, and `flashrig serve nbd` on
//! a RAM disk. The real `flashrig` binary then runs the array (`type = "nbd"` members with
//! `nbd://` URIs to those addresses) with `workload.stamp = true`, and `flashrig debug
//! verify-pattern` checks it from a second process. For the degraded read, the stack is built
//! in this process, the qemu-nbd member is killed, and every block is read back through
//! parity; qemu-nbd is then restarted on the same image. Next, nbdkit is killed while a
//! `flashrig run` of random reads is connected to it; the run's result file must show the
//! member failed and reads reconstructed. Last, a run against the dead member must exit with
//! status 2. A guard kills the servers and deletes the namespaces and links, also when the
//! test fails. Without root or network namespaces, or without nbdkit, qemu-nbd or ss, the test
//! says why and skips. The template test needs only nbdkit, on Unix sockets.

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use flashrig::Config;
use flashrig_blockdev::snapshot_stack;
use flashrig_metrics::LayerSnapshot;
use flashrig_runtime::RuntimeKind;

mod common;
use common::{have, text};

const PORT: u16 = 10809;

/// Runs a command to completion; `Err` carries its stderr.
fn sh(program: &str, args: &[&str]) -> Result<Output, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: cannot run: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!("{program} {}: {} {}", args.join(" "), out.status, text(&out.stderr).trim()))
    }
}

/// One member's host: a namespace, the veth pair to it, and the server inside.
struct Host {
    ns: String,
    host_link: String,
    ns_link: String,
    /// The namespace's address, where its server listens.
    addr: String,
    server: Option<Child>,
}

/// Everything the test created; torn down on drop, whatever happened.
struct Lab {
    hosts: Vec<Host>,
    dir: tempfile::TempDir,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for h in &mut self.hosts {
            if let Some(mut c) = h.server.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
            // Deleting the namespace removes its end of the pair, and with it ours; deleting
            // our end first makes the address free at once.
            let _ = sh("ip", &["link", "del", &h.host_link]);
            let _ = sh("ip", &["netns", "del", &h.ns]);
        }
    }
}

impl Lab {
    /// Creates `n` namespaces with a veth pair each; `Err` says why it cannot.
    fn new(n: usize) -> Result<Lab, String> {
        let pid = std::process::id();
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).map_err(|e| e.to_string())?;
        let mut lab = Lab { hosts: Vec::new(), dir };
        // A private 10.x.0.0/16 nobody here uses, so parallel runs and the host's own
        // networks do not meet.
        let used = sh("ip", &["-o", "-4", "addr", "show"]).map(|o| text(&o.stdout))?;
        let base = (0..100)
            .map(|k| 100 + (pid as usize + k) % 100)
            .find(|b| !used.contains(&format!("inet 10.{b}.")))
            .ok_or("no free 10.x.0.0/16 for the test's links")?;
        for i in 0..n {
            let h = Host {
                ns: format!("flashrig-t{pid}-{i}"),
                // Link names are at most 15 bytes: "frt" + pid (7 digits at most) + 2.
                host_link: format!("frt{pid}h{i}"),
                ns_link: format!("frt{pid}n{i}"),
                addr: format!("10.{base}.{i}.2"),
                server: None,
            };
            let host_addr = format!("10.{base}.{i}.1/30");
            let ns_addr = format!("{}/30", h.addr);
            sh("ip", &["netns", "add", &h.ns])?;
            let (ns, hl, nl) = (h.ns.clone(), h.host_link.clone(), h.ns_link.clone());
            lab.hosts.push(h);
            sh("ip", &["link", "add", &hl, "type", "veth", "peer", "name", &nl])?;
            sh("ip", &["link", "set", &nl, "netns", &ns])?;
            sh("ip", &["addr", "add", &host_addr, "dev", &hl])?;
            sh("ip", &["link", "set", &hl, "up"])?;
            sh("ip", &["netns", "exec", &ns, "ip", "addr", "add", &ns_addr, "dev", &nl])?;
            sh("ip", &["netns", "exec", &ns, "ip", "link", "set", &nl, "up"])?;
            sh("ip", &["netns", "exec", &ns, "ip", "link", "set", "lo", "up"])?;
        }
        Ok(lab)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts `program args...` inside host `i`'s namespace, its output in `server<i>.log`.
    fn start(&mut self, i: usize, program: &str, args: &[&str]) {
        let log = File::create(self.path(&format!("server{i}.log"))).unwrap();
        let mut all = vec!["netns", "exec", self.hosts[i].ns.as_str(), program];
        all.extend_from_slice(args);
        // `ip netns exec` execs the program, so this child is the server itself.
        let child = Command::new("ip")
            .args(&all)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        self.hosts[i].server = Some(child);
    }

    fn server_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.path(&format!("server{i}.log"))).unwrap_or_default()
    }

    /// Waits until host `i`'s server accepts connections; `Err` with its log if it exits.
    fn wait_listening(&mut self, i: usize) -> Result<(), String> {
        let addr: SocketAddr = format!("{}:{PORT}", self.hosts[i].addr).parse().unwrap();
        let start = Instant::now();
        loop {
            if let Some(status) = self.hosts[i].server.as_mut().unwrap().try_wait().unwrap() {
                self.hosts[i].server = None;
                return Err(format!("exited with {status}: {}", self.server_log(i)));
            }
            // A bare connect and close: every server here shrugs off a client that leaves
            // during the handshake.
            if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
                return Ok(());
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "server {i} never listened: {}",
                self.server_log(i)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills host `i`'s server and reaps it.
    fn kill(&mut self, i: usize) {
        let mut c = self.hosts[i].server.take().expect("a running server");
        c.kill().unwrap();
        c.wait().unwrap();
    }

    fn server_pid(&self, i: usize) -> libc::pid_t {
        self.hosts[i].server.as_ref().expect("a running server").id() as libc::pid_t
    }

    /// Whether host `i`'s server has an established client connection.
    fn has_client(&self, i: usize) -> bool {
        let filter = format!("( sport = :{PORT} )");
        let args =
            ["netns", "exec", &self.hosts[i].ns, "ss", "-Htn", "state", "established", &filter];
        sh("ip", &args).is_ok_and(|o| !text(&o.stdout).trim().is_empty())
    }
}

fn flashrig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flashrig")).args(args).output().expect("run flashrig")
}

fn find<'a>(layer: &'a LayerSnapshot, name: &str) -> Option<&'a LayerSnapshot> {
    if layer.name == name {
        return Some(layer);
    }
    layer.children.iter().find_map(|c| find(c, name))
}

fn start_qemu_nbd(lab: &mut Lab, i: usize, image: &Path) {
    let addr = lab.hosts[i].addr.clone();
    let port = PORT.to_string();
    let img = image.to_str().unwrap().to_string();
    // -t: serve on after a client leaves; -e 4: a few clients at once.
    let args = ["-b", &addr, "-p", &port, "-f", "raw", "-t", "-e", "4", "--discard=unmap", &img];
    lab.start(i, "qemu-nbd", &args);
    lab.wait_listening(i).unwrap_or_else(|e| panic!("qemu-nbd: {e}"));
}

#[test]
fn a_raid_of_nbd_members_in_network_namespaces_survives_a_dead_member() {
    // SAFETY: geteuid has no preconditions and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: creating network namespaces needs root");
        return;
    }
    for tool in ["nbdkit", "qemu-nbd", "ss"] {
        if !have(tool) {
            eprintln!("skipping: {tool} is not installed (Debian: nbdkit, qemu-utils, iproute2)");
            return;
        }
    }
    let mut lab = match Lab::new(3) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("skipping: network namespaces are not available here: {e}");
            return;
        }
    };
    let addr = |lab: &Lab, i: usize| lab.hosts[i].addr.clone();
    let port = PORT.to_string();

    // Member 0: nbdkit's memory plugin.
    let a0 = addr(&lab, 0);
    lab.start(0, "nbdkit", &["-f", "--exit-with-parent", "-i", &a0, "-p", &port, "memory", "64M"]);
    lab.wait_listening(0).unwrap_or_else(|e| panic!("nbdkit: {e}"));
    // Member 1: qemu-nbd on a raw image file (which outlives the server).
    let image = lab.path("member1.raw");
    File::create(&image).unwrap().set_len(64 << 20).unwrap();
    start_qemu_nbd(&mut lab, 1, &image);
    // Member 2: another flashrig serving a RAM disk.
    let ram = lab.path("ram.toml");
    std::fs::write(&ram, "runtime = \"real\"\n[device]\ntype = \"ram\"\ncapacity = \"64MiB\"\n")
        .unwrap();
    let a2 = addr(&lab, 2);
    let listen = format!("{a2}:{PORT}");
    let bin = env!("CARGO_BIN_EXE_flashrig");
    lab.start(2, bin, &["serve", "nbd", ram.to_str().unwrap(), "--tcp", &listen, "-q"]);
    lab.wait_listening(2).unwrap_or_else(|e| panic!("flashrig serve nbd: {e}"));
    let uris = [
        format!("nbd://{}:{PORT}/", addr(&lab, 0)),
        format!("nbd://{}:{PORT}/", addr(&lab, 1)),
        // The export's default name; `flashrig serve nbd --name` changes it.
        format!("nbd://{a2}:{PORT}/flashrig"),
    ];
    let stack = format!(
        "seed = 5\nruntime = \"real\"\nreactors = 2\n\n[device]\ntype = \"raid\"\nk = 2\nm = 1\n\
         chunk = \"64KiB\"\nmembers = [\n  {{ type = \"nbd\", uri = \"{}\" }},\n  \
         {{ type = \"nbd\", uri = \"{}\" }},\n  {{ type = \"nbd\", uri = \"{}\", connections = 2 }},\n]\n",
        uris[0], uris[1], uris[2]
    );
    let write_cfg = lab.path("write.toml");
    std::fs::write(
        &write_cfg,
        format!(
            "{stack}\n[workload]\nrw = \"randwrite\"\nbs = \"16KiB\"\niodepth = 16\njobs = 2\n\
             size = \"16MiB\"\nstamp = true\n"
        ),
    )
    .unwrap();
    let cfg = write_cfg.to_str().unwrap();

    // A verifying write run over the three remote members.
    let out = flashrig(&["run", cfg, "-q"]);
    assert!(out.status.success(), "run: {}\n{}", text(&out.stdout), text(&out.stderr));
    // A second process reads every block back.
    let out = flashrig(&["debug", "verify-pattern", cfg]);
    let report = text(&out.stdout);
    assert!(out.status.success(), "verify-pattern: {report}\n{}", text(&out.stderr));
    let written: u64 = report
        .split(", ")
        .find_map(|p| p.split(": ").last()?.strip_suffix(" written")?.parse().ok())
        .unwrap_or_else(|| panic!("no written count in {report}"));
    assert!(written > 0 && report.contains(", 0 bad"), "{report}");

    // Degraded: member 1's server dies under a built stack; every block still reads back
    // right, through parity.
    let victim = lab.server_pid(1);
    let config = Config::load(&write_cfg).unwrap();
    let (res, _) = flashrig_runtime::run(RuntimeKind::Real, 2, move || async move {
        let dev = flashrig::stack::build(&config.device).await.expect("build the stack");
        // SAFETY: kill(2) on a process this test started, with a plain signal number.
        assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
        let check = flashrig::crashcheck::verify_pattern(dev.clone()).await;
        (check, snapshot_stack(dev.as_ref()))
    });
    let (check, layers) = res;
    let check = check.unwrap_or_else(|e| panic!("degraded read-back: {e}"));
    assert_eq!((check.written, check.bad_count), (written, 0), "{:?}", check.bad);
    assert_eq!(layers.counters["member_failures"], 1, "{layers:#?}");
    assert!(layers.counters["degraded_reads"] > 0, "{layers:#?}");
    let nbd1 = find(&layers, "nbd1").expect("member nbd1 in the stack");
    assert_eq!(nbd1.counters["failed_connections"], 1, "{nbd1:#?}");
    lab.kill(1);
    // The image file kept everything qemu-nbd acknowledged: the member comes back whole.
    start_qemu_nbd(&mut lab, 1, &image);

    // Member 0 dies while a run is connected to it: the run ends (degraded), it does not hang.
    let read_cfg = lab.path("read.toml");
    std::fs::write(
        &read_cfg,
        format!(
            "{stack}\n[workload]\nrw = \"randread\"\nbs = \"16KiB\"\niodepth = 16\n\
             runtime_ms = 8000\n"
        ),
    )
    .unwrap();
    let json = lab.path("read.json");
    // The connections of the stack built above are closing; the run's must be the ones seen.
    let start = Instant::now();
    while (0..3).any(|i| lab.has_client(i)) {
        assert!(start.elapsed() < Duration::from_secs(60), "old connections never closed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut run = Command::new(bin)
        .args(["run", read_cfg.to_str().unwrap(), "-q", "--json", json.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !(0..3).all(|i| lab.has_client(i)) {
        if let Some(status) = run.try_wait().unwrap() {
            panic!("the read run ended ({status}) before all members were connected");
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the read run never connected");
        std::thread::sleep(Duration::from_millis(20));
    }
    lab.kill(0);
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "degraded run: {}\n{}", text(&out.stdout), text(&out.stderr));
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let raid = &result["layers"];
    assert_eq!(raid["kind"], "raid");
    assert_eq!(raid["counters"]["member_failures"], 1, "{raid:#}");
    assert!(raid["counters"]["degraded_reads"].as_u64().unwrap() > 0, "{raid:#}");
    assert_eq!(raid["children"][0]["kind"], "nbd");
    assert_eq!(raid["children"][0]["counters"]["failed_connections"], 1, "{raid:#}");
    assert_eq!(result["workload"]["total"]["errors"], 0, "{:#}", result["workload"]["total"]);

    // A member nobody serves any more: a stack error (status 2) naming it and its URI.
    let out = flashrig(&["run", cfg, "-q"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("device.members[0]") && err.contains(&uris[0]), "{err}");
    assert!(err.contains("cannot connect"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A member template (`member = {...}`, `width`) reaches one export per member through `{i}`
/// in its URI, and a template without `{i}` is refused before anything connects (every member
/// would be the same export, and the array would overwrite itself).
#[test]
fn a_member_template_gives_each_member_its_own_export() {
    if !have("nbdkit") {
        eprintln!("skipping: nbdkit is not installed (Debian: nbdkit)");
        return;
    }
    let dir = tempfile::Builder::new().prefix("frnbdm").tempdir().unwrap();
    let mut servers: Vec<Child> = Vec::new();
    struct Reap<'a>(&'a mut Vec<Child>);
    impl Drop for Reap<'_> {
        fn drop(&mut self) {
            for c in self.0.iter_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let reap = Reap(&mut servers);
    for i in 0..2 {
        let sock = dir.path().join(format!("m{i}.sock"));
        let child = Command::new("nbdkit")
            .args(["-f", "--exit-with-parent", "-U", sock.to_str().unwrap(), "memory", "32M"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        reap.0.push(child);
        let start = Instant::now();
        while !sock.exists() {
            assert!(start.elapsed() < Duration::from_secs(60), "nbdkit never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let write = |name: &str, uri: &str| {
        let p = dir.path().join(name);
        let body = format!(
            "runtime = \"real\"\n[device]\ntype = \"stripe\"\nwidth = 2\n\
             member = {{ type = \"nbd\", uri = \"{uri}\" }}\n\
             [workload]\nrw = \"randwrite\"\nsize = \"8MiB\"\n"
        );
        std::fs::write(&p, body).unwrap();
        p
    };
    let sock_dir = dir.path().to_str().unwrap().to_string();
    let good = write("good.toml", &format!("nbd+unix:///?socket={sock_dir}/m{{i}}.sock"));
    let out = flashrig(&["run", good.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // The summary describes the template; the run wrote through both members.
    assert!(stdout.contains("stripe(64KiB) over 2 x nbd(nbd+unix:///?socket="), "{stdout}");
    let bad = write("bad.toml", &format!("nbd+unix:///?socket={sock_dir}/m0.sock"));
    let out = flashrig(&["run", bad.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("device.member.uri") && err.contains("needs {i}"), "{err}");
    drop(reap);
}
