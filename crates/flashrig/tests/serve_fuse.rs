//! Goal: `flashrig serve fuse` makes a device stack a disk that kernel file systems live on:
//! ext4, btrfs and xfs made on a loop device over the exported file check clean with their own
//! fsck after a remount and keep every byte written to them; discards (`fstrim`) reach the
//! stack; a server killed with SIGKILL in the middle of writing loses nothing that was fsynced
//! once a restarted server has recovered its stack (scala and raid over files); and RocksDB's
//! db_bench runs on ext4 on ScalaAFA over emulated SSDs (scalaafa-atc24.txt §6.4); a read
//! error aimed at ext4's directory blocks by the `inject` layer reaches `ls` as EIO.
//!
//! Method: the real binary serves a TOML configuration from a scratch directory, mounted there;
//! the test waits for its "serving ..." line, attaches the file to a loop device with
//! `losetup --direct-io=on` (and checks that direct I/O is on), makes and mounts a file
//! system, writes a tree of files with seeded random content, and checks them after a
//! remount against the same generator. Guards with `Drop` unmount, detach and kill whatever is
//! left when an assertion fails. Each test skips, saying why, without root, /dev/fuse, loop
//! devices or the tools it drives.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{find_tool, scratch, text};

/// How long a server may take to start (recovery included) or to stop before the test gives
/// up on it: a hang guard, not a timing assertion.
const PATIENCE: Duration = Duration::from_secs(180);

/// Why the test cannot run here, if it cannot: not root, no /dev/fuse, no loop devices, or a
/// missing tool.
fn skip_reason(tools: &[&str]) -> Option<String> {
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (mounting FUSE and file systems needs root)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no loop devices (/dev/loop-control)".into());
    }
    for t in ["losetup", "mount", "umount"].iter().chain(tools) {
        if find_tool(t).is_none() {
            return Some(format!("{t} is not installed"));
        }
    }
    None
}

macro_rules! skip_unless_ready {
    ($($tool:expr),*) => {
        if let Some(why) = skip_reason(&[$($tool),*]) {
            eprintln!("skipped: {why}");
            return;
        }
    };
}

/// Runs `tool args` with no input and returns what it did.
fn run(tool: &str, args: &[&str]) -> Output {
    let exe = find_tool(tool).unwrap_or_else(|| PathBuf::from(tool));
    Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"))
}

/// Runs `tool args` and asserts that it succeeded; returns its stdout.
fn run_ok(tool: &str, args: &[&str]) -> String {
    let out = run(tool, args);
    assert!(
        out.status.success(),
        "{tool} {args:?} failed ({}):\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Whether `dir` is a mountpoint (of anything), from /proc/self/mountinfo.
fn is_mountpoint(dir: &Path) -> bool {
    // A dead FUSE mount cannot be resolved (ENOTCONN): take the path as it is then.
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines().any(|l| l.split(' ').nth(4).is_some_and(|m| Path::new(m) == dir))
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on the id of a child we started and have not reaped yet.
    unsafe {
        libc::kill(child.id() as libc::pid_t, sig);
    }
}

/// A running `flashrig serve fuse`; killed and its mount lazily unmounted if still there when
/// dropped.
struct Server {
    child: Option<Child>,
    mountpoint: PathBuf,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Starts serving `config` on `mountpoint` and waits for the "serving" line.
    fn start(config: &Path, mountpoint: &Path) -> Server {
        Server::start_with(config, mountpoint, &[])
    }

    /// `start` with more arguments for `flashrig serve fuse`.
    fn start_with(config: &Path, mountpoint: &Path, extra: &[&str]) -> Server {
        std::fs::create_dir_all(mountpoint).expect("create the mountpoint");
        let mut child = Command::new(env!("CARGO_BIN_EXE_flashrig"))
            .args(["serve", "fuse"])
            .arg(config)
            .arg(mountpoint)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start flashrig serve fuse");
        let pipe = child.stderr.take().expect("stderr piped");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let log = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                eprintln!("  server: {line}");
                let serving = line.starts_with("serving ");
                {
                    let mut log = log.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
                if serving {
                    let _ = tx.send(());
                }
            }
        });
        let server = Server { child: Some(child), mountpoint: mountpoint.to_path_buf(), stderr };
        // The sender is dropped at EOF: the server died before it served.
        if rx.recv_timeout(PATIENCE).is_err() {
            panic!("the server did not start serving:\n{}", server.log());
        }
        assert!(server.file().exists(), "{} is missing", server.file().display());
        server
    }

    fn file(&self) -> PathBuf {
        self.mountpoint.join("disk")
    }

    fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn wait(&mut self) -> ExitStatus {
        let child = self.child.as_mut().expect("server running");
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("wait for the server") {
                self.child = None;
                return status;
            }
            if start.elapsed() > PATIENCE {
                let _ = child.kill();
                let _ = child.wait();
                self.child = None;
                panic!("the server did not stop:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM: the server flushes the stack and unmounts; returns its exit status.
    fn terminate(&mut self) -> ExitStatus {
        signal(self.child.as_ref().expect("server running"), libc::SIGTERM);
        let status = self.wait();
        // The log's last line is written just before the exit; give the reader a moment.
        std::thread::sleep(Duration::from_millis(50));
        status
    }

    /// SIGKILL, as a crash: nothing is flushed, the FUSE mount is left dead.
    fn kill(&mut self) {
        signal(self.child.as_ref().expect("server running"), libc::SIGKILL);
        self.wait();
    }

    /// Unmounts a dead server's mount (it answers ENOTCONN until then).
    fn clean_dead_mount(&self) {
        if is_mountpoint(&self.mountpoint) {
            run_ok("umount", &["-l", self.mountpoint.to_str().unwrap()]);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if is_mountpoint(&self.mountpoint) {
            let _ = run("umount", &["-l", self.mountpoint.to_str().unwrap()]);
        }
    }
}

/// A loop device over a file; detached when dropped.
struct Loop {
    dev: String,
    attached: bool,
}

impl Loop {
    /// Attaches `file` with direct I/O and checks that the kernel really uses it.
    fn attach(file: &Path) -> Loop {
        Loop::attach_with(file, &[])
    }

    /// `attach` with more `losetup` options.
    fn attach_with(file: &Path, options: &[&str]) -> Loop {
        let file = file.to_str().unwrap();
        let mut args = vec!["--direct-io=on", "--find", "--show"];
        args.extend_from_slice(options);
        args.push(file);
        // `--find` races with other tests attaching at the same time; losetup retries a
        // device taken under it, and so do we, a few times.
        let mut out = run("losetup", &args);
        for _ in 0..5 {
            if out.status.success() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
            out = run("losetup", &args);
        }
        assert!(out.status.success(), "losetup {file}: {}", text(&out.stderr));
        let l = Loop { dev: text(&out.stdout).trim().to_string(), attached: true };
        let dio = run_ok("losetup", &["--list", "--noheadings", "--output", "DIO", &l.dev]);
        assert_eq!(dio.trim(), "1", "{} does not use direct I/O on {file}", l.dev);
        l
    }

    /// A value from the device's queue limits in sysfs.
    fn queue_limit(&self, name: &str) -> u64 {
        let dev = Path::new(&self.dev).file_name().expect("a device path").to_string_lossy();
        let p = format!("/sys/block/{dev}/queue/{name}");
        let v = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"));
        v.trim().parse().unwrap_or_else(|e| panic!("{p}: {v:?}: {e}"))
    }

    fn detach(&mut self) {
        if self.attached {
            run_ok("losetup", &["-d", &self.dev]);
            self.attached = false;
        }
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        if self.attached {
            let _ = run("losetup", &["-d", &self.dev]);
        }
    }
}

/// A file system mounted from a loop device; unmounted (lazily if busy) when dropped.
struct FsMount {
    dir: PathBuf,
    mounted: bool,
}

impl FsMount {
    fn mount(dev: &str, dir: &Path, options: &str) -> FsMount {
        std::fs::create_dir_all(dir).expect("create the mountpoint");
        let d = dir.to_str().unwrap();
        if options.is_empty() {
            run_ok("mount", &[dev, d]);
        } else {
            run_ok("mount", &["-o", options, dev, d]);
        }
        FsMount { dir: dir.to_path_buf(), mounted: true }
    }

    fn unmount(&mut self) {
        run_ok("umount", &[self.dir.to_str().unwrap()]);
        self.mounted = false;
    }

    /// Detaches a file system whose device died under it.
    fn unmount_lazily(&mut self) {
        run_ok("umount", &["-l", self.dir.to_str().unwrap()]);
        self.mounted = false;
    }
}

impl Drop for FsMount {
    fn drop(&mut self) {
        if self.mounted {
            let d = self.dir.to_str().unwrap();
            if !run("umount", &[d]).status.success() {
                let _ = run("umount", &["-l", d]);
            }
        }
    }
}

/// splitmix64: the content generator (small, seedable, good enough to catch misplaced bytes).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&splitmix(&mut s).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// One file of a tree: where, and the generator's seed and length for its content.
#[derive(Clone, Debug)]
struct Entry {
    rel: PathBuf,
    seed: u64,
    len: usize,
}

/// `count` files under `prefix` in nested directories, of sizes from empty through odd
/// lengths to 1 MiB, every content a function of `seed` and the file's index.
fn plan_tree(seed: u64, prefix: &str, count: usize) -> Vec<Entry> {
    let mut s = seed;
    (0..count)
        .map(|i| {
            let r = splitmix(&mut s);
            let len = match r % 20 {
                0 => 0,
                1..=7 => (r >> 8) as usize % 4096 + 1,
                8..=15 => ((r >> 8) as usize % 16 + 1) * 4096 + (r >> 20) as usize % 3 * 511,
                16..=18 => (r >> 8) as usize % (256 << 10) + 1,
                _ => 1 << 20,
            };
            let rel = PathBuf::from(prefix)
                .join(format!("d{}", i % 7))
                .join(format!("e{}", (i / 7) % 3))
                .join(format!("f{i:04}"));
            Entry { rel, seed: splitmix(&mut s), len }
        })
        .collect()
}

fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Writes `entry` under `root`, fsynced when asked (with its directory, so the name is
/// durable too).
fn write_entry(root: &Path, e: &Entry, fsync: bool) -> std::io::Result<()> {
    let path = root.join(&e.rel);
    let dir = path.parent().expect("entries are in directories");
    std::fs::create_dir_all(dir)?;
    let mut f = std::fs::File::create(&path)?;
    f.write_all(&content(e.seed, e.len))?;
    if fsync {
        f.sync_all()?;
        fsync_dir(dir)?;
    }
    Ok(())
}

/// Writes every entry and fsyncs all of it: files, their directories and the file system.
fn write_tree(root: &Path, entries: &[Entry]) {
    for e in entries {
        write_entry(root, e, false).unwrap_or_else(|err| panic!("write {:?}: {err}", e.rel));
    }
    for e in entries {
        std::fs::File::open(root.join(&e.rel)).and_then(|f| f.sync_all()).expect("fsync");
    }
    let mut dirs: Vec<PathBuf> =
        entries.iter().flat_map(|e| e.rel.ancestors().skip(1).map(Path::to_path_buf)).collect();
    dirs.sort();
    dirs.dedup();
    for d in dirs {
        fsync_dir(&root.join(d)).expect("fsync a directory");
    }
    run_ok("sync", &[]);
}

/// Asserts that every entry reads back as written.
fn verify_tree(root: &Path, entries: &[Entry]) {
    let mut bad = Vec::new();
    for e in entries {
        match std::fs::read(root.join(&e.rel)) {
            Ok(got) if got == content(e.seed, e.len) => {}
            Ok(got) => bad.push(format!(
                "{:?}: {} bytes differ from the {} written",
                e.rel,
                got.len(),
                e.len
            )),
            Err(err) => bad.push(format!("{:?}: {err}", e.rel)),
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} files are wrong:\n{}",
        bad.len(),
        entries.len(),
        bad.join("\n")
    );
}

/// Bytes the files in `dir` occupy on disk (holes excluded).
fn allocated_bytes(dir: &Path, prefix: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .expect("scratch directory")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.metadata().map(|m| m.blocks() * 512).unwrap_or(0))
        .sum()
}

/// Writes the configuration file `name` into `dir`.
fn config(dir: &Path, name: &str, device: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("runtime = \"real\"\nreactors = 2\n{device}"))
        .expect("write the configuration");
    p
}

/// `[device]` for an array of `kind` over `n` files of `size` in `dir` (`extra` keys added).
fn array_over_files(kind: &str, extra: &str, dir: &Path, size: &str, md: u32) -> String {
    format!(
        "[device]\ntype = \"{kind}\"\n{extra}chunk = \"64KiB\"\n\
         member = {{ type = \"file\", path = \"{}/member{{i}}.img\", size = \"{size}\", \
         md_bytes = {md} }}\n",
        dir.display()
    )
}

#[test]
fn ext4_on_raid_over_files_checks_clean_keeps_its_files_and_trims() {
    skip_unless_ready!("mkfs.ext4", "e2fsck", "fstrim", "sync");
    let dir = scratch();
    let cfg = config(
        dir.path(),
        "raid.toml",
        &array_over_files("raid", "k = 2\nm = 1\n", dir.path(), "256MiB", 0),
    );
    let mut server = Server::start(&cfg, &dir.path().join("export"));
    let mut lo = Loop::attach(&server.file());
    // The loop device offers discard because the file has fallocate, at the stack's block.
    assert!(lo.queue_limit("discard_max_bytes") > 0, "{} has no discard", lo.dev);
    assert_eq!(lo.queue_limit("discard_granularity"), 4096);
    run_ok("mkfs.ext4", &["-q", "-F", &lo.dev]);
    let fs_dir = dir.path().join("ext4");
    let mut fs = FsMount::mount(&lo.dev, &fs_dir, "");
    let tree = plan_tree(1, "tree", 300);
    write_tree(&fs_dir, &tree);
    fs.unmount();
    run_ok("e2fsck", &["-f", "-n", &lo.dev]);
    let mut fs = FsMount::mount(&lo.dev, &fs_dir, "");
    verify_tree(&fs_dir, &tree);
    // Free the 1 MiB files (whole 128 KiB stripes among them), then fstrim: the discards
    // reach the raid, which punches whole stripes out of its member files.
    let big: Vec<_> = tree.iter().filter(|e| e.len == 1 << 20).collect();
    assert!(big.len() >= 5, "the tree has big files to free ({})", big.len());
    for e in &big {
        std::fs::remove_file(fs_dir.join(&e.rel)).expect("remove");
    }
    run_ok("sync", &[]);
    let before = allocated_bytes(dir.path(), "member");
    let trimmed = run_ok("fstrim", &["-v", fs_dir.to_str().unwrap()]);
    let after = allocated_bytes(dir.path(), "member");
    assert!(trimmed.contains("trimmed"), "{trimmed}");
    assert!(
        after + (big.len() as u64 - 1) * (1 << 20) <= before,
        "fstrim freed member space: {before} -> {after} bytes allocated ({trimmed})"
    );
    fs.unmount();
    run_ok("e2fsck", &["-f", "-n", &lo.dev]);
    lo.detach();
    let status = server.terminate();
    assert!(status.success(), "SIGTERM: {status}\n{}", server.log());
    assert!(server.log().contains("the stack was flushed"), "{}", server.log());
    assert!(!is_mountpoint(&server.mountpoint), "the server unmounted its file system");
}

/// Writes and fsyncs a first set of files on ext4, SIGKILLs the server while a second set is
/// being written, restarts it on the same members, and checks that fsck repairs what the crash
/// left and that every fsynced file is intact.
fn ext4_survives_a_killed_server(device: &str) {
    let dir = scratch();
    let cfg = config(dir.path(), "stack.toml", device);
    let first = plan_tree(7, "first", 120);
    {
        let mut server = Server::start(&cfg, &dir.path().join("export"));
        let mut lo = Loop::attach(&server.file());
        run_ok("mkfs.ext4", &["-q", "-F", &lo.dev]);
        let fs_dir = dir.path().join("ext4");
        let mut fs = FsMount::mount(&lo.dev, &fs_dir, "");
        write_tree(&fs_dir, &first);
        // The second set, each file fsynced so that the stack is busy with writes and
        // flushes when the server dies; the writer stops at its first error.
        let second = plan_tree(8, "second", 400);
        let done = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicBool::new(false));
        let writer = {
            let (root, done, failed) = (fs_dir.clone(), done.clone(), failed.clone());
            std::thread::spawn(move || {
                for e in &second {
                    if write_entry(&root, e, true).is_err() {
                        failed.store(true, Ordering::SeqCst);
                        return;
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        while done.load(Ordering::SeqCst) < 10 && !writer.is_finished() {
            std::thread::sleep(Duration::from_millis(5));
        }
        server.kill();
        writer.join().expect("the writer thread");
        eprintln!(
            "killed the server after {} files of the second set (writer failed: {})",
            done.load(Ordering::SeqCst),
            failed.load(Ordering::SeqCst)
        );
        // Clean up the dead stack: the file system and the loop device go lazily (the
        // kernel finishes them once their I/O has failed), then the dead FUSE mount.
        fs.unmount_lazily();
        lo.detach();
        server.clean_dead_mount();
    }
    // A new server recovers the stack from its members.
    let mut server = Server::start(&cfg, &dir.path().join("export2"));
    let mut lo = Loop::attach(&server.file());
    let fsck = run("e2fsck", &["-f", "-y", &lo.dev]);
    let code = fsck.status.code().unwrap_or(-1);
    eprintln!("e2fsck -fy after the crash: exit {code}");
    assert!(
        (0..4).contains(&code),
        "e2fsck -fy could not repair the file system (exit {code}):\n{}{}",
        text(&fsck.stdout),
        text(&fsck.stderr)
    );
    let fs_dir = dir.path().join("ext4-again");
    let mut fs = FsMount::mount(&lo.dev, &fs_dir, "");
    verify_tree(&fs_dir, &first);
    fs.unmount();
    run_ok("e2fsck", &["-f", "-n", &lo.dev]);
    lo.detach();
    let status = server.terminate();
    assert!(status.success(), "SIGTERM: {status}\n{}", server.log());
}

#[test]
fn ext4_on_scala_over_files_keeps_fsynced_files_when_the_server_is_killed() {
    skip_unless_ready!("mkfs.ext4", "e2fsck", "sync");
    let dir = scratch();
    // The stack's files live in their own scratch directory so that the two servers of the
    // test find the same members.
    let device = array_over_files("scala", "k = 2\nm = 1\n", dir.path(), "256MiB", 16);
    ext4_survives_a_killed_server(&device);
}

#[test]
fn ext4_on_raid_over_files_keeps_fsynced_files_when_the_server_is_killed() {
    skip_unless_ready!("mkfs.ext4", "e2fsck", "sync");
    let dir = scratch();
    let device = array_over_files("raid", "k = 2\nm = 1\n", dir.path(), "256MiB", 0);
    ext4_survives_a_killed_server(&device);
}

/// mkfs, write a tree, fsck clean, remount and verify, on a fresh server over `device`, with
/// the loop device attached with `losetup` options.
fn other_fs_round_trip(
    device: &str,
    losetup: &[&str],
    mkfs: &[&str],
    check: &[&str],
    files: usize,
) {
    let dir = scratch();
    let cfg = config(dir.path(), "stack.toml", device);
    let mut server = Server::start(&cfg, &dir.path().join("export"));
    let mut lo = Loop::attach_with(&server.file(), losetup);
    let mut args = mkfs[1..].to_vec();
    args.push(&lo.dev);
    run_ok(mkfs[0], &args);
    let fs_dir = dir.path().join("fs");
    let mut fs = FsMount::mount(&lo.dev, &fs_dir, "");
    let tree = plan_tree(3, "tree", files);
    write_tree(&fs_dir, &tree);
    fs.unmount();
    let mut args = check[1..].to_vec();
    args.push(&lo.dev);
    run_ok(check[0], &args);
    let mut fs = FsMount::mount(&lo.dev, &fs_dir, "");
    verify_tree(&fs_dir, &tree);
    fs.unmount();
    lo.detach();
    let status = server.terminate();
    assert!(status.success(), "SIGTERM: {status}\n{}", server.log());
}

/// A fault aimed at a file-system structure reaches ext4 through FUSE and the loop device:
/// the inject layer classifies ext4's blocks as mkfs and the kernel write them, so a read
/// error armed (at run time, through `--control`) for directory blocks fails `ls` with EIO,
/// which ext4 passes up (the thesis' R_Propagate); the log names the structure; disarmed, the
/// same listing works and finds what was written.
#[test]
fn ext4_sees_a_read_error_aimed_at_its_directory_blocks() {
    skip_unless_ready!("mkfs.ext4", "ls");
    let dir = scratch();
    let log = dir.path().join("inject.jsonl");
    let device = format!(
        "[device]\ntype = \"inject\"\nfilesystem = \"ext4\"\nlog = \"{}\"\n\
         member = {{ type = \"file\", path = \"{}/disk.img\", size = \"128MiB\" }}\n",
        log.display(),
        dir.path().display()
    );
    let cfg = config(dir.path(), "inject.toml", &device);
    let control = dir.path().join("control");
    let control_s = control.to_str().unwrap().to_string();
    let mut server =
        Server::start_with(&cfg, &dir.path().join("export"), &["--control", &control_s]);
    let mut lo = Loop::attach(&server.file());
    // 4 KiB blocks, the device's (mke2fs.conf makes a file system this small with 1 KiB
    // blocks, which the classifier does not split out of the device's; docs/inject.md).
    run_ok("mkfs.ext4", &["-q", "-F", "-b", "4096", &lo.dev]);
    let fs_dir = dir.path().join("ext4");
    let mut fs = FsMount::mount(&lo.dev, &fs_dir, "");
    std::fs::create_dir_all(fs_dir.join("d/e")).unwrap();
    std::fs::write(fs_dir.join("d/f"), b"x").unwrap();
    // Unmounted, every block reached its home through the layer; mounted again, none of the
    // directories' blocks is cached.
    fs.unmount();
    let mut fs = FsMount::mount(&lo.dev, &fs_dir, "");
    let ctl = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_flashrig"))
            .args(["inject", &control_s])
            .args(args)
            .output()
            .expect("run flashrig inject");
        assert!(out.status.success(), "flashrig inject {args:?}: {}", text(&out.stderr));
    };
    ctl(&["arm", "kind = \"read-error\"", "structure = \"dir\""]);
    let d = fs_dir.join("d");
    let ls = run("ls", &[d.to_str().unwrap()]);
    assert!(!ls.status.success(), "ls read a directory whose blocks fail: {}", text(&ls.stdout));
    assert!(text(&ls.stderr).contains("Input/output error"), "{}", text(&ls.stderr));
    ctl(&["disarm", "0"]);
    let listing = run_ok("ls", &[d.to_str().unwrap()]);
    assert_eq!(listing.split_whitespace().collect::<Vec<_>>(), ["e", "f"]);
    fs.unmount();
    lo.detach();
    assert!(server.terminate().success(), "{}", server.log());
    let lines = std::fs::read_to_string(&log).expect("the injection log");
    assert!(
        lines
            .lines()
            .any(|l| l.contains("\"kind\":\"read-error\"") && l.contains("\"structure\":\"dir\"")),
        "{lines}"
    );
}

#[test]
fn btrfs_on_stripe_over_files_checks_clean_and_keeps_its_files() {
    skip_unless_ready!("mkfs.btrfs", "btrfs", "sync");
    let dir = scratch();
    let device = array_over_files("stripe", "width = 2\n", dir.path(), "192MiB", 0);
    // 4 KiB logical blocks on the loop device: no request smaller than the stack's block.
    let losetup = ["--sector-size", "4096"];
    other_fs_round_trip(&device, &losetup, &["mkfs.btrfs", "-q", "-f"], &["btrfs", "check"], 120);
}

#[test]
fn xfs_on_raid_over_files_checks_clean_and_keeps_its_files() {
    skip_unless_ready!("mkfs.xfs", "xfs_repair", "sync");
    let dir = scratch();
    let device = array_over_files("raid", "k = 2\nm = 1\n", dir.path(), "192MiB", 0);
    // 512-byte logical blocks (the default): xfs's log writes sectors, which the export serves
    // by read-modify-write of the stack's 4 KiB blocks.
    other_fs_round_trip(&device, &[], &["mkfs.xfs", "-q", "-f"], &["xfs_repair", "-n"], 120);
}

#[test]
fn db_bench_runs_on_ext4_on_scala_over_emulated_ssds() {
    skip_unless_ready!("mkfs.ext4", "e2fsck", "db_bench");
    let dir = scratch();
    // ScalaAFA 4+1 over SSDs that model their firmware (SLC cache, the convert vendor command,
    // the transient-aware evictor) but complete at once, so the run is quick.
    let cfg = config(
        dir.path(),
        "scala.toml",
        "[device]\ntype = \"scala\"\nk = 4\nm = 1\nchunk = \"64KiB\"\n\
         member = { type = \"ssd\", preset = \"tiny-slc\", payload = \"full\", \
         timing = \"functional\", firmware = { vendor_convert = true, \
         slc_evictor = \"transient\" } }\n",
    );
    let mut server = Server::start(&cfg, &dir.path().join("export"));
    let mut lo = Loop::attach(&server.file());
    run_ok("mkfs.ext4", &["-q", "-F", &lo.dev]);
    let fs_dir = dir.path().join("ext4");
    // `discard`: RocksDB's deleted SST files are trimmed in the array at once.
    let mut fs = FsMount::mount(&lo.dev, &fs_dir, "discard");
    let db = fs_dir.join("db");
    // Small memtables and files, so that the 20 MB of each phase are flushed and compacted
    // through the array rather than kept in memory.
    let out = run(
        "db_bench",
        &[
            &format!("--db={}", db.display()),
            "--benchmarks=fillrandom,overwrite,readrandom",
            "--num=20000",
            "--value_size=1024",
            "--key_size=16",
            "--compression_type=none",
            "--write_buffer_size=1048576",
            "--target_file_size_base=1048576",
            "--max_bytes_for_level_base=4194304",
            "--cache_size=0",
            "--threads=1",
        ],
    );
    let report = text(&out.stdout);
    assert!(
        out.status.success(),
        "db_bench failed ({}):\n{report}{}",
        out.status,
        text(&out.stderr)
    );
    for bench in ["fillrandom", "overwrite", "readrandom"] {
        let line = report.lines().find(|l| l.starts_with(bench) && l.contains("ops/sec"));
        let line = line.unwrap_or_else(|| panic!("no {bench} result in:\n{report}"));
        assert!(line.contains("20000 operations"), "{line}");
        eprintln!("{line}");
    }
    fs.unmount();
    run_ok("e2fsck", &["-f", "-n", &lo.dev]);
    lo.detach();
    let status = server.terminate();
    assert!(status.success(), "SIGTERM: {status}\n{}", server.log());
}
