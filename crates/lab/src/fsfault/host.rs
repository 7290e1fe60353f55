//! The host's side of an experiment: running tools with a time limit, loop devices, mounts,
//! the kernel log, and a `flashrig serve fuse` process with its control socket.
//!
//! Everything here can hang when a file system under it misbehaves (a program stuck in the
//! kernel, a mount that never returns), so every tool runs with a deadline, and the way out of
//! a hang is to kill the server: the FUSE file then fails every request, the loop device
//! fails its I/O and the stuck calls return.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flashrig_frontends::faultctl::{request, Reply, Request};

/// Where a tool is: `PATH`, then the sbin folders (mkfs and losetup live there).
pub fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Why the study cannot run on this machine, if it cannot: not root, no /dev/fuse, no loop
/// devices, no kernel log, or a missing tool.
pub fn unavailable(tools: &[&str]) -> Option<String> {
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (mounting FUSE and file systems needs root)".into());
    }
    for (path, what) in [
        ("/dev/fuse", "no /dev/fuse"),
        ("/dev/loop-control", "no loop devices (/dev/loop-control)"),
        ("/dev/kmsg", "no kernel log (/dev/kmsg)"),
    ] {
        if !Path::new(path).exists() {
            return Some(what.into());
        }
    }
    for t in ["losetup", "mount", "umount"].iter().chain(tools) {
        if find_tool(t).is_none() {
            return Some(format!("{t} is not installed"));
        }
    }
    None
}

/// What a tool did.
#[derive(Clone, Debug, Default)]
pub struct Ran {
    /// The exit status; `None` when it was killed (by the deadline or a signal).
    pub status: Option<i32>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn ok(&self) -> bool {
        self.status == Some(0)
    }

    /// The command's failure in one line, for the record.
    pub fn failure(&self, what: &str) -> String {
        if self.timed_out {
            return format!("{what}: no answer within the deadline");
        }
        let err = self.stderr.trim();
        let err = if err.is_empty() { self.stdout.trim() } else { err };
        format!("{what}: status {:?}: {}", self.status, last_lines(err, 3))
    }
}

/// The last `n` lines of `text`, joined with " / ".
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" / ")
}

/// Runs `cmd` (stdin `input`, or none) and waits at most `deadline`. A command still running
/// then is killed and left to a reaper thread: one stuck in the kernel cannot be reaped until
/// whatever holds it lets go.
pub fn run_cmd(mut cmd: Command, input: Option<&str>, deadline: Duration) -> Ran {
    cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Ran { stderr: format!("cannot start {cmd:?}: {e}"), ..Ran::default() };
        }
    };
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        use std::io::Write;
        let _ = stdin.write_all(text.as_bytes());
    }
    let out = pipe_reader(child.stdout.take());
    let err = pipe_reader(child.stderr.take());
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => break None,
        }
    };
    match status {
        Some(s) => Ran {
            status: s.code(),
            timed_out: false,
            stdout: out.recv().unwrap_or_default(),
            stderr: err.recv().unwrap_or_default(),
        },
        None => {
            let _ = child.kill();
            std::thread::spawn(move || child.wait());
            let grace = Duration::from_millis(200);
            Ran {
                status: None,
                timed_out: true,
                stdout: out.recv_timeout(grace).unwrap_or_default(),
                stderr: err.recv_timeout(grace).unwrap_or_default(),
            }
        }
    }
}

fn pipe_reader(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut p) = pipe {
            let mut bytes = Vec::new();
            let _ = p.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        let _ = tx.send(text);
    });
    rx
}

/// Runs the tool `tool` with `args`.
pub fn run(tool: &str, args: &[&str], deadline: Duration) -> Ran {
    let mut cmd = Command::new(find_tool(tool).unwrap_or_else(|| PathBuf::from(tool)));
    cmd.args(args);
    run_cmd(cmd, None, deadline)
}

/// The deadline of quick commands (losetup, umount of a healthy file system).
pub const SHORT: Duration = Duration::from_secs(60);

/// A loop device over a file; detached when dropped.
pub struct Loop {
    pub dev: String,
}

impl Loop {
    /// Attaches `file` with 4 KiB logical sectors (the stack's block: no request smaller than
    /// a block reaches it), with direct I/O when `direct` (over a FUSE file, so that what the
    /// file system writes reaches the server at once instead of sitting in the page cache).
    ///
    /// `number` asks for /dev/loop<number>: a study gives each worker devices of its own, so
    /// that the kernel lines naming a device are that worker's. Taken (by another program),
    /// any free device will do.
    pub fn attach(file: &Path, direct: bool, number: Option<u32>) -> Result<Loop, String> {
        let f = file.to_str().ok_or("a path that is not UTF-8")?;
        let mut base = vec!["--sector-size", "4096"];
        if direct {
            base.push("--direct-io=on");
        }
        if let Some(n) = number {
            let dev = format!("/dev/loop{n}");
            let mut args = base.clone();
            args.extend([dev.as_str(), f]);
            if run("losetup", &args, SHORT).ok() {
                return Ok(Loop { dev });
            }
        }
        let mut args = base;
        args.extend(["--find", "--show", f]);
        // `--find` races with other experiments attaching at the same time: retry.
        let mut last = Ran::default();
        for _ in 0..10 {
            last = run("losetup", &args, SHORT);
            if last.ok() {
                return Ok(Loop { dev: last.stdout.trim().to_string() });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(last.failure(&format!("losetup {f}")))
    }

    /// The device's name without /dev/ (as the kernel log names it).
    pub fn name(&self) -> String {
        self.dev.trim_start_matches("/dev/").to_string()
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = run("losetup", &["-d", &self.dev], SHORT);
    }
}

/// Detaches every loop device whose backing file lies under `dir`: a study interrupted
/// (Ctrl-C, a kill) leaves its loop devices attached, and the next run on the folder takes
/// them back before it clears the folder.
pub fn detach_loops_under(dir: &Path) {
    let Ok(dir) = std::path::absolute(dir) else { return };
    let list = ["--list", "--noheadings", "--raw", "--output", "NAME,BACK-FILE"];
    for line in run("losetup", &list, SHORT).stdout.lines() {
        if let Some((name, back)) = line.split_once(' ') {
            if Path::new(back).starts_with(&dir) {
                let _ = run("losetup", &["-d", name], SHORT);
            }
        }
    }
}

/// Mounts `dev` (a file system of type `fs_type`) on `dir` with `options` (none when empty).
/// The type is given so that mount(8) does not probe the device from user space first: a
/// fault armed for the mount must meet the kernel's reads, not libblkid's.
pub fn mount(dev: &str, dir: &Path, fs_type: &str, options: &str, deadline: Duration) -> Ran {
    let _ = std::fs::create_dir_all(dir);
    let d = dir.to_string_lossy();
    let mut args = vec!["-t", fs_type, dev, &d];
    if !options.is_empty() {
        args.extend(["-o", options]);
    }
    run("mount", &args, deadline)
}

/// Unmounts `dir`; lazily when a plain unmount fails, so that nothing stays behind.
pub fn umount(dir: &Path, deadline: Duration) -> Ran {
    let d = dir.to_string_lossy();
    let r = run("umount", &[&d], deadline);
    if !r.ok() && is_mountpoint(dir) {
        let _ = run("umount", &["-l", &d], SHORT);
    }
    r
}

/// The mount of `dir` in /proc/self/mountinfo: (per-mount options, super-block options).
fn mount_entry(dir: &Path) -> Option<(String, String)> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let fields: Vec<&str> = l.split(' ').collect();
        if fields.get(4).map(Path::new) != Some(dir.as_path()) {
            return None;
        }
        let sep = fields.iter().position(|f| *f == "-")?;
        Some((fields.get(5)?.to_string(), fields.get(sep + 3)?.to_string()))
    })
}

pub fn is_mountpoint(dir: &Path) -> bool {
    mount_entry(dir).is_some()
}

/// Whether the file system on `dir` is read-only now (a file system that remounts itself
/// read-only after an error sets it in the super block's options).
pub fn is_read_only(dir: &Path) -> bool {
    mount_entry(dir)
        .is_some_and(|(m, s)| m.split(',').any(|o| o == "ro") || s.split(',').any(|o| o == "ro"))
}

/// One kernel log record.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelLine {
    /// The syslog level: 0 emergency ... 3 error, 4 warning ... 7 debug.
    pub level: u8,
    pub text: String,
}

/// The kernel log from the moment it was opened on: /dev/kmsg, each reader with its own
/// position, so experiments running side by side each read everything once.
pub struct KernelLog {
    file: File,
}

impl KernelLog {
    pub fn open() -> Result<KernelLog, String> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg")
            .map_err(|e| format!("/dev/kmsg: {e}"))?;
        file.seek(SeekFrom::End(0)).map_err(|e| format!("/dev/kmsg: {e}"))?;
        Ok(KernelLog { file })
    }

    /// The records written since the last call (or the opening).
    pub fn read_new(&mut self) -> Vec<KernelLine> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 8192];
        loop {
            match self.file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let rec = String::from_utf8_lossy(&buf[..n]);
                    let (head, body) = rec.split_once(';').unwrap_or(("6", &rec));
                    let pri: u32 = head.split(',').next().and_then(|p| p.parse().ok()).unwrap_or(6);
                    // The message is the first line; the rest are "KEY=value" dictionary lines.
                    let text = body.lines().next().unwrap_or("").to_string();
                    out.push(KernelLine { level: (pri & 7) as u8, text });
                }
                // Records overwritten before we read them: the next read goes on.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                Err(_) => break,
            }
        }
        out
    }
}

/// A running `flashrig serve fuse` with a control socket; killed when dropped.
pub struct Server {
    child: Option<Child>,
    pub mountpoint: PathBuf,
    pub control: PathBuf,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Serves `config` on `mountpoint` with `flashrig` (the binary at `exe`), and waits for
    /// its "serving" line.
    pub fn start(
        exe: &Path,
        config: &Path,
        mountpoint: &Path,
        control: &Path,
    ) -> Result<Server, String> {
        std::fs::create_dir_all(mountpoint)
            .map_err(|e| format!("{}: {e}", mountpoint.display()))?;
        let mut child = Command::new(exe)
            .args(["serve", "fuse"])
            .arg(config)
            .arg(mountpoint)
            .arg("--control")
            .arg(control)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {} serve fuse: {e}", exe.display()))?;
        let pipe = child.stderr.take().expect("stderr is piped");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let log = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let serving = line.starts_with("serving ");
                {
                    let mut log = log.lock().expect("the log lock");
                    log.push_str(&line);
                    log.push('\n');
                }
                if serving {
                    let _ = tx.send(());
                }
            }
        });
        let mut server = Server {
            child: Some(child),
            mountpoint: mountpoint.to_path_buf(),
            control: control.to_path_buf(),
            stderr,
        };
        if rx.recv_timeout(SHORT).is_err() {
            server.kill();
            return Err(format!("the server did not start: {}", last_lines(&server.log(), 3)));
        }
        Ok(server)
    }

    /// The exported file.
    pub fn file(&self) -> PathBuf {
        self.mountpoint.join("disk")
    }

    pub fn log(&self) -> String {
        self.stderr.lock().expect("the log lock").clone()
    }

    /// Sends a request to the control socket.
    pub fn control(&self, req: &Request) -> Result<Reply, String> {
        let reply = request(&self.control, req).map_err(|e| e.to_string())?;
        match reply.ok {
            true => Ok(reply),
            false => Err(reply.error.unwrap_or_default()),
        }
    }

    /// Arms a fault (TOML fields) and returns its id.
    pub fn arm(&self, fault: &str) -> Result<u64, String> {
        let reply = self.control(&Request::Arm { layer: None, fault: fault.to_string() })?;
        reply.id.ok_or_else(|| "the server armed no fault".into())
    }

    /// How many times the fault `id` fired.
    pub fn fired(&self, id: u64) -> Result<u64, String> {
        let reply = self.control(&Request::List)?;
        Ok(reply.faults.unwrap_or_default().iter().find(|f| f.id == id).map_or(0, |f| f.fired))
    }

    /// SIGTERM: the server flushes its stack and unmounts; waits for it (and kills it when it
    /// does not stop). Returns whether it stopped by itself with status 0.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else { return false };
        // SAFETY: kill(2) on the id of a child we started and have not reaped.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let start = Instant::now();
        let clean = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s.success(),
                Ok(None) if start.elapsed() < SHORT => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break false;
                }
            }
        };
        self.clean_mount();
        clean
    }

    /// SIGKILL: what frees anything stuck on the FUSE file.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.clean_mount();
    }

    fn clean_mount(&self) {
        if is_mountpoint(&self.mountpoint) {
            let _ = run("umount", &["-l", &self.mountpoint.to_string_lossy()], SHORT);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}
