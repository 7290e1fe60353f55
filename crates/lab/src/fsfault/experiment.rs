//! One experiment, in the thesis' order (§2.4.5): a fresh copy of the populated image served
//! by `flashrig serve fuse` through an `inject` layer, a loop device over the exported file,
//! the kernel file system mounted on it; one fault armed; the test program; unmount. Then the
//! offline checks on the image: remount and read the tree (persisted damage meets the file
//! system again), the checker without and with repair, and a last mount whose tree is compared
//! with the one a fault-free run left.
//!
//! A tracing run is the same without a fault, with a `trace` fault logging every block access
//! and the structure it touched: which structures a program reads and writes, and the tree the
//! program should leave.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::host::{self, KernelLine, KernelLog, Loop, Server};
use super::image::{self, Comparison, FileSystem, Tree};
use super::programs::{Outcome, Step};

/// The step recorded for a program that died without its report (killed by a signal).
pub const PROGRAM_DIED: &str = "the program (died without its report)";

/// The pseudo-programs the study runs around the others: the fault is armed before the
/// mount (`mount`), or after a mount with no program before the unmount (`umount`).
pub const MOUNT: &str = "mount";
pub const UMOUNT: &str = "umount";

/// What every experiment of one file system shares.
pub struct Setup<'a> {
    /// The flashrig binary (for `serve fuse` and `debug fs-program`).
    pub exe: &'a Path,
    pub fs: &'a FileSystem,
    /// The populated image and its tree.
    pub golden: PathBuf,
    pub golden_tree: &'a Tree,
    /// When the image was made (seconds since the epoch; see `image::compare`).
    pub made_s: i64,
    /// The experiment's own scratch folder (emptied first).
    pub work: PathBuf,
    /// How long a program, a mount or an unmount may take before it counts as hung.
    pub deadline: Duration,
    /// The loop devices to use online and offline (`Loop::attach`).
    pub loops: (u32, u32),
}

/// One block access the tracing run saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    pub op: String,
    pub structure: String,
}

/// What a tracing run found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub fs: String,
    pub program: String,
    /// The distinct (op, structure) pairs of the program's window, in first-seen order: the
    /// mount for `mount`; from after the mount to the end of the unmount for the others (a
    /// file system writes much of what a program changed at the unmount).
    pub window: Vec<Access>,
    /// Block accesses in the window.
    pub accesses: u64,
    /// The tree the fault-free run left.
    pub expected: Tree,
    /// The program's steps (all must succeed in a fault-free run).
    pub steps: Vec<Step>,
    /// The checker's verdict on the image the fault-free run left (must be clean).
    pub clean: bool,
}

/// The fault of one experiment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// The inject kind: read-error, write-error, corrupt, shorn, lost, misdirect, stale, delay.
    pub kind: String,
    pub op: String,
    pub structure: String,
    /// More TOML fields of the fault (the corruption's pattern, the delay).
    pub extra: String,
}

impl Fault {
    /// The fault's TOML table: the first access of `op` to a block of `structure` in the
    /// window.
    pub fn toml(&self) -> String {
        format!(
            "kind = \"{}\"\nops = \"{}\"\nstructure = \"{}\"\nnth = 1\n{}",
            self.kind, self.op, self.structure, self.extra
        )
    }
}

/// Everything one experiment observed; classified later (`classify`), so that a change of the
/// classification needs no rerun.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub id: String,
    pub fs: String,
    pub program: String,
    pub fault: Option<Fault>,
    pub seed: u64,
    /// How many times the fault fired (0: the run took another path than the tracing run).
    pub fired: u64,
    /// The block it fired on first.
    pub lba: Option<u64>,
    /// After an error it was handed (read-error, write-error), the file system accessed the
    /// same block again with the same op: a read at any later time, a write within the next
    /// 64 accesses the layer saw (after the fault's own record: a write's trace record comes
    /// before it, a failed read has none).
    pub retried: bool,
    /// On a file system that keeps copies of its metadata (`FileSystem::metadata_copies`),
    /// the block that failed to read (or read corrupt) was written within the next 64
    /// accesses: repaired from the other copy. Elsewhere a write of a block just read is the
    /// file system's own update (of data it may have taken in corrupt), so it is not looked
    /// for.
    #[serde(default)]
    pub rewritten: bool,
    /// Online: the mount's failure, the program's steps, whether the mount, the program or
    /// the unmount hung (outlived the deadline), whether the file system turned read-only,
    /// the unmount's failure.
    pub mount_error: Option<String>,
    pub steps: Vec<Step>,
    pub hung: bool,
    pub read_only: bool,
    pub umount_error: Option<String>,
    /// The kernel log lines naming the device while it was online: warnings and worse, and
    /// lines at any level that speak of an error or corruption.
    pub kernel_online: Vec<String>,
    /// Kernel lines that name no device but mean a kernel bug (BUG, Oops, WARNING, call
    /// traces), seen while the experiment ran.
    pub kernel_bugs: Vec<String>,
    /// Offline, before any repair: whether the image mounts, the kernel lines that mount and
    /// the walk of the tree drew, and the tree compared.
    pub remount_error: Option<String>,
    pub kernel_remount: Vec<String>,
    pub before_repair: Option<Comparison>,
    /// The checker: problems found (`check`), its status and last lines, and whether it
    /// outlived the deadline (then it found nothing we know of).
    pub check_found: bool,
    #[serde(default)]
    pub check_hung: bool,
    pub check_status: Option<i32>,
    pub check_tail: String,
    /// The repair's status, then the last mount: its failure, or the tree compared.
    pub repair_status: Option<i32>,
    pub final_mount_error: Option<String>,
    pub after_repair: Option<Comparison>,
    /// Wall-clock seconds of the program (the latency study's measure).
    pub program_s: f64,
    /// Seconds of the whole experiment.
    pub seconds: f64,
    /// A failure of the harness itself (not of the file system): the experiment says nothing.
    pub harness_error: Option<String>,
}

/// Whether a kernel line names device `name` (loop3 but not loop30).
fn names_device(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(i, _)| {
        let after = text[i + name.len()..].chars().next();
        let before = text[..i].chars().last();
        !after.is_some_and(|c| c.is_ascii_digit()) && !before.is_some_and(|c| c.is_alphanumeric())
    })
}

/// The lines of a file system about device `name` worth a look: warnings and worse, and the
/// informational lines that speak of an error (btrfs reports a read error it corrected from a
/// metadata copy at that level); less the block layer's own report of the failed request
/// (which the file system did not write).
fn device_lines(lines: &[KernelLine], name: &str) -> Vec<String> {
    let errorish = |t: &str| {
        let t = t.to_ascii_lowercase();
        (t.contains("error") && !t.contains("errors=")) || t.contains("corrupt")
    };
    lines
        .iter()
        .filter(|l| (l.level <= 4 || errorish(&l.text)) && names_device(&l.text, name))
        .filter(|l| !l.text.contains("I/O error, dev ") && !l.text.contains("blk_update_request"))
        .map(|l| l.text.clone())
        .collect()
}

fn bug_lines(lines: &[KernelLine]) -> Vec<String> {
    const BUG: &[&str] = &["BUG:", "Oops", "kernel BUG", "WARNING: CPU", "Call Trace", "panic"];
    lines
        .iter()
        .filter(|l| BUG.iter().any(|b| l.text.contains(b)))
        .map(|l| l.text.clone())
        .collect()
}

/// One line of the inject log.
#[derive(Deserialize)]
struct Record {
    op: String,
    lba: u64,
    kind: String,
    fault: u64,
    structure: Option<String>,
}

fn read_records(path: &Path) -> Vec<Record> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// What the online part left.
struct Online {
    mount_error: Option<String>,
    outcome: Option<Outcome>,
    hung: bool,
    read_only: bool,
    umount_error: Option<String>,
    fault_id: Option<u64>,
    fired: u64,
    /// Log records before the end of the mount.
    mount_records: usize,
    records: Vec<Record>,
    kernel: Vec<KernelLine>,
    device: String,
    program_s: f64,
}

fn clean_dir(dir: &Path) -> Result<(), String> {
    release(dir);
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
}

/// Lets go of what an experiment in `dir` may have left behind when its harness failed or its
/// study was interrupted: the kernel file system's mount, the loop devices, the FUSE mount,
/// in that order (each holds the next). Nothing may be removed through a mount.
pub fn release(dir: &Path) {
    let mnt = dir.join("mnt");
    if host::is_mountpoint(&mnt) {
        host::umount(&mnt, host::SHORT);
    }
    host::detach_loops_under(dir);
    let export = dir.join("export");
    if host::is_mountpoint(&export) {
        host::umount(&export, host::SHORT);
    }
}

/// The online part: serve a copy of the image, mount, arm, run `program`, unmount.
fn online(
    s: &Setup,
    program: &str,
    fault: Option<&Fault>,
    seed: u64,
    klog: &mut KernelLog,
) -> Result<Online, String> {
    clean_dir(&s.work)?;
    let image = s.work.join("image");
    image::copy_image(&s.golden, &image)?;
    let log = s.work.join("inject.jsonl");
    let config = s.work.join("stack.toml");
    let device = format!(
        "runtime = \"real\"\nreactors = 1\n[device]\ntype = \"inject\"\nfilesystem = \"{}\"\n\
         seed = {seed}\nlog = \"{}\"\n\
         member = {{ type = \"file\", path = \"{}\", size = \"{}MiB\" }}\n",
        s.fs.kind,
        log.display(),
        image.display(),
        s.fs.image_bytes >> 20
    );
    std::fs::write(&config, device).map_err(|e| format!("{}: {e}", config.display()))?;
    let mut server =
        Server::start(s.exe, &config, &s.work.join("export"), &s.work.join("control"))?;
    let lo = Loop::attach(&server.file(), true, Some(s.loops.0))?;
    let mnt = s.work.join("mnt");
    // The tracing run logs every access from the start; an experiment logs every access from
    // when its fault is armed, to see retries.
    let arm = |server: &Server| -> Result<Option<u64>, String> {
        server.arm("kind = \"trace\"")?;
        fault.map(|f| server.arm(&f.toml())).transpose()
    };
    let mut fault_id = None;
    if program == MOUNT || fault.is_none() {
        fault_id = arm(&server)?;
    }
    let m = host::mount(&lo.dev, &mnt, s.fs.kind, s.fs.mount_options, s.deadline);
    let mount_records = read_records(&log).len();
    let mut o = Online {
        mount_error: None,
        outcome: None,
        hung: m.timed_out,
        read_only: false,
        umount_error: None,
        fault_id,
        fired: 0,
        mount_records,
        records: Vec::new(),
        kernel: Vec::new(),
        device: lo.name(),
        program_s: 0.0,
    };
    if m.timed_out {
        // A mount stuck in the kernel: free it, and take away what it may still mount.
        server.kill();
        host::umount(&mnt, host::SHORT);
    }
    if !m.ok() {
        o.mount_error = Some(m.failure("mount"));
    } else {
        let armed = if program != MOUNT && fault.is_some() { arm(&server) } else { Ok(None) };
        match armed {
            Ok(Some(id)) => o.fault_id = Some(id),
            Ok(None) => {}
            Err(e) => {
                host::umount(&mnt, s.deadline);
                return Err(format!("arming the fault: {e}"));
            }
        }
        if program != MOUNT && program != UMOUNT {
            let mut cmd = Command::new(s.exe);
            cmd.args(["debug", "fs-program", program]).arg(&mnt);
            let start = Instant::now();
            let ran = host::run_cmd(cmd, None, s.deadline);
            o.program_s = start.elapsed().as_secs_f64();
            o.hung = ran.timed_out;
            o.outcome = serde_json::from_str(ran.stdout.trim()).ok();
            if o.outcome.is_none() && !ran.timed_out {
                // The program died without its report (a signal): say so as its step.
                o.outcome = Some(Outcome {
                    program: program.into(),
                    steps: vec![Step {
                        call: PROGRAM_DIED.into(),
                        errno: None,
                        error: Some(ran.failure("fs-program")),
                    }],
                });
            }
        }
        o.read_only = host::is_read_only(&mnt);
        if o.hung {
            // Free whatever is stuck: the FUSE file fails, the file system's I/O with it.
            server.kill();
        }
        let u = host::umount(&mnt, s.deadline);
        if !u.ok() {
            o.umount_error = Some(u.failure("umount"));
            o.hung |= u.timed_out;
        }
    }
    drop(lo);
    server.stop();
    o.records = read_records(&log);
    // The injections, from the log: the server may be gone (killed to free a hang).
    if let Some(id) = o.fault_id {
        o.fired = o.records.iter().filter(|r| r.fault == id && r.kind != "trace").count() as u64;
    }
    // The kernel writes its lines as things happen; a moment lets the last ones land.
    std::thread::sleep(Duration::from_millis(20));
    o.kernel = klog.read_new();
    Ok(o)
}

/// What a mount of the image offline found.
struct Remount {
    /// The mount's (or the walk's) failure.
    error: Option<String>,
    tree: Option<Tree>,
    /// The kernel lines about the device, and those of a kernel bug.
    lines: Vec<String>,
    bugs: Vec<String>,
}

/// Walks the tree at `root` on a thread of its own, waiting at most `deadline`: a walk stuck
/// in a damaged file system is abandoned (the thread stays blocked in the kernel until the
/// lazy unmount lets go) instead of stopping the study.
fn read_tree(root: &Path, deadline: Duration) -> Result<Tree, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let root = root.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(Tree::read(&root));
    });
    rx.recv_timeout(deadline).unwrap_or_else(|_| Err("the walk did not end".into()))
}

/// Mounts the image file, reads its tree and unmounts.
fn mount_and_read(s: &Setup, image: &Path, klog: &mut KernelLog) -> Result<Remount, String> {
    let lo = Loop::attach(image, false, Some(s.loops.1))?;
    let mnt = s.work.join("mnt");
    let m = host::mount(&lo.dev, &mnt, s.fs.kind, s.fs.mount_options, s.deadline);
    let mut r = Remount { error: None, tree: None, lines: Vec::new(), bugs: Vec::new() };
    if m.ok() {
        match read_tree(&mnt, s.deadline) {
            Ok(t) => r.tree = Some(t),
            Err(e) => r.error = Some(format!("reading the tree: {e}")),
        }
        let u = host::umount(&mnt, s.deadline);
        if !u.ok() {
            r.error.get_or_insert(u.failure("umount"));
        }
    } else {
        r.error = Some(m.failure("mount"));
        if m.timed_out {
            host::umount(&mnt, host::SHORT);
        }
    }
    let name = lo.name();
    drop(lo);
    std::thread::sleep(Duration::from_millis(20));
    let lines = klog.read_new();
    r.lines = device_lines(&lines, &name);
    r.bugs = bug_lines(&lines);
    Ok(r)
}

/// Runs the tracing run of `program`.
pub fn trace(s: &Setup, program: &str) -> Result<Trace, String> {
    let mut klog = KernelLog::open()?;
    let o = online(s, program, None, 0, &mut klog)?;
    if let Some(e) = o.mount_error.or(o.umount_error) {
        return Err(format!("the fault-free run of {program}: {e}"));
    }
    if o.hung {
        return Err(format!("the fault-free run of {program} hung"));
    }
    let window = if program == MOUNT {
        &o.records[..o.mount_records]
    } else {
        &o.records[o.mount_records..]
    };
    let mut pairs: Vec<Access> = Vec::new();
    for r in window.iter().filter(|r| r.kind == "trace") {
        if let Some(st) = &r.structure {
            let a = Access { op: r.op.clone(), structure: st.clone() };
            if !pairs.contains(&a) {
                pairs.push(a);
            }
        }
    }
    let image = s.work.join("image");
    let r = mount_and_read(s, &image, &mut klog)?;
    let expected =
        r.tree.ok_or_else(|| format!("the fault-free run of {program}: {:?}", r.error))?;
    let steps = o.outcome.map(|x| x.steps).unwrap_or_default();
    if let Some(bad) = steps.iter().find(|x| x.error.is_some()) {
        return Err(format!(
            "the fault-free run of {program}: {} failed: {:?}",
            bad.call, bad.error
        ));
    }
    let check = s.fs.run_checker(s.fs.check, &image, s.deadline);
    if !check.ok() {
        return Err(check.failure(&format!("the image after the fault-free run of {program}")));
    }
    Ok(Trace {
        fs: s.fs.name.into(),
        program: program.into(),
        window: pairs,
        accesses: window.len() as u64,
        expected,
        steps,
        clean: true,
    })
}

/// Runs one experiment: `fault` while `program` runs, then the offline checks.
pub fn run(
    s: &Setup,
    id: &str,
    program: &str,
    fault: &Fault,
    seed: u64,
    expected: &Tree,
) -> Observation {
    let start = Instant::now();
    let mut obs = Observation {
        id: id.into(),
        fs: s.fs.name.into(),
        program: program.into(),
        fault: Some(fault.clone()),
        seed,
        ..Observation::default()
    };
    if let Err(e) = observe(s, program, fault, seed, expected, &mut obs) {
        obs.harness_error = Some(e);
    }
    obs.seconds = start.elapsed().as_secs_f64();
    obs
}

fn observe(
    s: &Setup,
    program: &str,
    fault: &Fault,
    seed: u64,
    expected: &Tree,
    obs: &mut Observation,
) -> Result<(), String> {
    let mut klog = KernelLog::open()?;
    let o = online(s, program, Some(fault), seed, &mut klog)?;
    obs.fired = o.fired;
    obs.mount_error = o.mount_error;
    obs.steps = o.outcome.map(|x| x.steps).unwrap_or_default();
    obs.hung = o.hung;
    obs.read_only = o.read_only;
    obs.umount_error = o.umount_error;
    obs.program_s = o.program_s;
    obs.kernel_online = device_lines(&o.kernel, &o.device);
    obs.kernel_bugs = bug_lines(&o.kernel);
    if let Some(id) = o.fault_id {
        let at = o.records.iter().position(|r| r.fault == id && r.kind != "trace");
        if let Some(i) = at {
            let hit = &o.records[i];
            obs.lba = Some(hit.lba);
            // A read retried may come much later (a read-ahead that failed is read again when
            // the program reaches it); a write retried comes at once, while a later write of
            // the same block is the file system's next update of it.
            let end =
                if hit.op == "read" { o.records.len() } else { (i + 65).min(o.records.len()) };
            let again = o.records[i + 1..end]
                .iter()
                .any(|r| r.kind == "trace" && r.op == hit.op && r.lba == hit.lba);
            obs.retried = fault.kind.ends_with("-error") && again;
            // A block that failed to read (or read corrupt) and is written soon after was
            // rewritten from another copy: how btrfs repairs its duplicated metadata. Its own
            // line saying so is rate-limited by the kernel, the write is not.
            obs.rewritten = s.fs.metadata_copies
                && hit.op == "read"
                && o.records[i + 1..(i + 65).min(o.records.len())]
                    .iter()
                    .any(|r| r.kind == "trace" && r.op == "write" && r.lba == hit.lba);
        }
    }
    // The checker first, without repair: it sees the image as the run left it (a mount would
    // replay a journal first). Then the remount and the walk: persisted damage met again.
    let image = s.work.join("image");
    let check = s.fs.run_checker(s.fs.check, &image, s.deadline);
    obs.check_status = check.status;
    obs.check_found =
        check.status.is_some_and(|c| s.fs.check_found.contains(&c)) || check.timed_out;
    obs.check_tail = host::last_lines(&format!("{}\n{}", check.stdout, check.stderr), 4);
    let r = mount_and_read(s, &image, &mut klog)?;
    obs.remount_error = r.error;
    obs.kernel_remount = r.lines;
    obs.kernel_bugs.extend(r.bugs);
    obs.before_repair = r.tree.map(|t| image::compare(&t, s.golden_tree, expected, s.made_s));
    let repair = s.fs.run_checker(s.fs.repair, &image, s.deadline);
    obs.repair_status = repair.status;
    let r = mount_and_read(s, &image, &mut klog)?;
    obs.kernel_remount.extend(r.lines);
    obs.kernel_bugs.extend(r.bugs);
    obs.final_mount_error = r.error;
    obs.after_repair = r.tree.map(|t| image::compare(&t, s.golden_tree, expected, s.made_s));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_do_not_match_longer_ones() {
        assert!(names_device("EXT4-fs error (device loop3): bad", "loop3"));
        assert!(names_device("XFS (loop3): Metadata corruption", "loop3"));
        assert!(!names_device("EXT4-fs error (device loop30): bad", "loop3"));
        assert!(!names_device("EXT4-fs error (device xloop3): bad", "loop3"));
    }

    #[test]
    fn the_block_layers_own_error_line_is_not_the_file_systems() {
        let lines = [
            KernelLine { level: 3, text: "I/O error, dev loop3, sector 8 op 0x0:(READ)".into() },
            KernelLine { level: 3, text: "EXT4-fs error (device loop3): ext4_find_entry".into() },
            KernelLine { level: 6, text: "EXT4-fs (loop3): mounted filesystem".into() },
        ];
        assert_eq!(
            device_lines(&lines, "loop3"),
            ["EXT4-fs error (device loop3): ext4_find_entry"]
        );
    }
}
