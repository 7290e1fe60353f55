//! `flashrig fsfault`: the whole study as one command. For each file system: the populated
//! image; for each program a tracing run (which structures it reads and writes); for each
//! fault kind and each (op, structure) the program touches, one experiment; all of it in
//! parallel, resumable, reproducible from a seed.
//!
//! The results folder holds `study.json` (the seed and what was asked), `images/` (each file
//! system's populated image and its tree), `traces/` (each tracing run), `observations.jsonl`
//! (one line per finished experiment, appended as each ends) and `work/` (the experiments'
//! scratch). Run again on the same folder, the study runs only what has no line yet, so an
//! interrupted study resumes where it stopped.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use flashrig_frontends::error::Error;
use serde::{Deserialize, Serialize};

use super::experiment::{self, Fault, Observation, Setup, Trace, MOUNT, UMOUNT};
use super::image::{self, FileSystem, Tree};
use super::programs::PROGRAMS;

/// A fault kind of the study: the inject kind, the operations it acts on, and its settings.
pub struct KindDef {
    pub name: &'static str,
    pub ops: &'static [&'static str],
    pub extra: &'static str,
    /// What the thesis calls it (Table 2.1's fault modes), or why we added it.
    pub about: &'static str,
}

pub const KINDS: &[KindDef] = &[
    KindDef { name: "read-error", ops: &["read"], extra: "", about: "Read I/O error" },
    KindDef { name: "write-error", ops: &["write"], extra: "", about: "Write I/O error" },
    KindDef {
        name: "corrupt",
        ops: &["read"],
        extra: "how = \"random\"\n",
        about: "Corruption: the block read comes back as random bytes",
    },
    KindDef {
        name: "shorn",
        ops: &["write"],
        extra: "",
        about: "Shorn write: the first 3/8 of the block written, the rest left erased",
    },
    KindDef { name: "lost", ops: &["write"], extra: "", about: "Lost write" },
    KindDef {
        name: "misdirect",
        ops: &["write"],
        extra: "",
        about: "Misdirected write (ours, beyond the thesis: the data lands one block further)",
    },
    KindDef {
        name: "stale",
        ops: &["write"],
        extra: "",
        about: "Incomplete erase (ours: the block holds old AND new bits)",
    },
    KindDef {
        name: "delay",
        ops: &["read", "write"],
        extra: "delay_ms = 1000\n",
        about: "I/O latency (§2.5.4): 1 s added to the access",
    },
];

/// The thesis' fault modes (Tables 2.5 and 2.6), the default.
pub const THESIS_KINDS: &[&str] = &["read-error", "write-error", "corrupt", "shorn", "lost"];

/// The programs of `flashrig reproduce fsfault --quick`: mount and umount, and programs that
/// read (files, directories, links) and write (create, rename, remove) between them.
pub const QUICK_PROGRAMS: &[&str] =
    &[MOUNT, UMOUNT, "read", "getdirentries", "write", "creat", "mkdir", "rename", "unlink"];

/// The file systems of the full reproduction: the thesis' two, xfs for f2fs, and btrfs with
/// today's default of two metadata copies beside the thesis' one.
pub fn image_names() -> Vec<String> {
    image::FILE_SYSTEMS.iter().map(|f| f.name.to_string()).collect()
}

/// The programs the latency study runs (§2.5.4 names none; these read and write every kind of
/// structure between them).
pub const LATENCY_PROGRAMS: &[&str] = &["read", "write", "mkdir", "getdirentries"];

pub fn kind(name: &str) -> Result<&'static KindDef, String> {
    KINDS.iter().find(|k| k.name == name).ok_or_else(|| {
        let names: Vec<&str> = KINDS.iter().map(|k| k.name).collect();
        format!("no fault kind {name:?} in the study; it has: {}", names.join(", "))
    })
}

/// Every program of the study: the thesis' Table 2.2, mount and umount first.
pub fn all_programs() -> Vec<String> {
    [MOUNT, UMOUNT].iter().chain(PROGRAMS).map(|p| p.to_string()).collect()
}

/// What a study runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Options {
    /// The flashrig binary, for `serve fuse` and `debug fs-program`.
    #[serde(skip)]
    pub exe: PathBuf,
    pub file_systems: Vec<String>,
    pub programs: Vec<String>,
    pub kinds: Vec<String>,
    /// Only these structures (empty: every structure a program touches).
    pub structures: Vec<String>,
    pub seed: u64,
    #[serde(skip)]
    pub jobs: usize,
    #[serde(skip)]
    pub results: PathBuf,
    /// Seconds a mount, a program or an unmount may take before it counts as hung.
    pub deadline_s: u64,
    #[serde(skip)]
    pub quiet: bool,
    /// Keep `work/` (each worker's last experiment: image, stack, inject log) for a look.
    #[serde(skip)]
    pub keep_work: bool,
}

impl Options {
    /// Checks every name against the study's lists; the error names the first unknown one.
    pub fn check(&self) -> Result<(), Error> {
        let bad = |e: String| Error::Input(e);
        for f in &self.file_systems {
            image::file_system(f).map_err(bad)?;
        }
        for k in &self.kinds {
            kind(k).map_err(bad)?;
        }
        let all = all_programs();
        for p in &self.programs {
            if !all.contains(p) {
                return Err(bad(format!(
                    "no test program {p:?} in the study; it has: {}",
                    all.join(", ")
                )));
            }
        }
        for (what, names) in [
            ("file system", &self.file_systems),
            ("program", &self.programs),
            ("fault kind", &self.kinds),
            ("structure", &self.structures),
        ] {
            if let Some((i, n)) = names.iter().enumerate().find(|(i, n)| names[..*i].contains(n)) {
                return Err(bad(format!("{what} {n:?} is named twice (item {})", i + 1)));
            }
        }
        if self.file_systems.is_empty() || self.programs.is_empty() || self.kinds.is_empty() {
            return Err(bad("the study needs a file system, a program and a fault kind".into()));
        }
        if self.deadline_s == 0 {
            return Err(bad("--deadline-s 0: a program needs some time".into()));
        }
        Ok(())
    }
}

/// One planned experiment.
#[derive(Clone, Debug)]
pub struct Planned {
    pub id: String,
    pub fs: String,
    pub program: String,
    pub fault: Fault,
    pub seed: u64,
}

/// A seed per experiment: FNV-1a of the study's seed and the experiment's id.
fn seed_of(seed: u64, id: &str) -> u64 {
    id.bytes()
        .fold(0xcbf2_9ce4_8422_2325 ^ seed, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// The experiments of `traces` under `opts`, in a fixed order.
pub fn plan(opts: &Options, traces: &[Trace]) -> Vec<Planned> {
    let mut out = Vec::new();
    for t in traces {
        for k in opts.kinds.iter().filter_map(|k| kind(k).ok()) {
            if k.name == "delay" && !LATENCY_PROGRAMS.contains(&t.program.as_str()) {
                continue;
            }
            for op in k.ops {
                for a in t.window.iter().filter(|a| a.op == *op) {
                    if !opts.structures.is_empty() && !opts.structures.contains(&a.structure) {
                        continue;
                    }
                    let id = format!("{}/{}/{}/{}/{}", t.fs, t.program, k.name, op, a.structure);
                    out.push(Planned {
                        seed: seed_of(opts.seed, &id),
                        id,
                        fs: t.fs.clone(),
                        program: t.program.clone(),
                        fault: Fault {
                            kind: k.name.into(),
                            op: op.to_string(),
                            structure: a.structure.clone(),
                            extra: k.extra.into(),
                        },
                    });
                }
            }
        }
    }
    out
}

/// A file system's populated image, as the study keeps it.
#[derive(Serialize, Deserialize)]
struct Golden {
    made_s: i64,
    tree: Tree,
}

/// A UUID from the seed, so that mkfs makes the same image for the same seed (ext4 also
/// seeds its directory hash with it).
fn uuid_of(seed: u64, fs: &str) -> String {
    let a = seed_of(seed, fs);
    let b = seed_of(a, "uuid");
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

/// What a finished study hands its report.
pub struct Study {
    pub opts: Options,
    pub traces: Vec<Trace>,
    pub observations: Vec<Observation>,
    /// Experiments planned (all of them have an observation when the study finished).
    pub planned: usize,
}

fn io(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io(format!("{}: {e}", path.display()))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<(), Error> {
    let text = serde_json::to_string_pretty(v).expect("serialises");
    std::fs::write(path, text + "\n").map_err(|e| io(path, e))
}

/// Runs `task(i, worker)` for i in 0..n on `jobs` threads, each with its own worker number.
fn parallel<F: Fn(usize, usize) + Sync>(n: usize, jobs: usize, task: F) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for w in 0..jobs.clamp(1, n.max(1)) {
            let (next, task) = (&next, &task);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                task(i, w);
            });
        }
    });
}

/// Runs the study (what is not done yet in `opts.results`) and returns everything it has.
pub fn run(opts: &Options) -> Result<Study, Error> {
    opts.check()?;
    let mut tools: Vec<&str> = vec!["cp"];
    for f in &opts.file_systems {
        tools.extend(image::file_system(f).map_err(Error::Input)?.tools());
    }
    if let Some(why) = super::host::unavailable(&tools) {
        return Err(Error::Run(format!("fsfault cannot run here: {why}")));
    }
    let dir = &opts.results;
    for sub in ["images", "traces", "work"] {
        std::fs::create_dir_all(dir.join(sub)).map_err(|e| io(&dir.join(sub), e))?;
    }
    let _lock = crate::core::output::lock_results(dir)?;
    // The seed and settings of the observations already here must be this study's.
    let study_file = dir.join("study.json");
    if let Some(old) = read_json::<Options>(&study_file) {
        if old.seed != opts.seed || old.deadline_s != opts.deadline_s {
            return Err(Error::Input(format!(
                "{} holds a study with seed {} and deadline {} s; give the same, or another \
                 results folder",
                dir.display(),
                old.seed,
                old.deadline_s
            )));
        }
    }
    write_json(&study_file, opts)?;
    release_work(dir);
    let say = |s: String| {
        if !opts.quiet {
            eprintln!("{s}");
        }
    };
    let deadline = Duration::from_secs(opts.deadline_s);

    // Step 1: the populated images. An image made anew makes the traces and observations of
    // the old one meaningless (their expected trees, their times): they go.
    let obs_path = dir.join("observations.jsonl");
    let mut goldens: BTreeMap<String, Golden> = BTreeMap::new();
    for f in &opts.file_systems {
        let fs = image::file_system(f).map_err(Error::Input)?;
        let img = dir.join(format!("images/{f}.img"));
        let meta = dir.join(format!("images/{f}.json"));
        let golden = match (img.exists(), read_json::<Golden>(&meta)) {
            (true, Some(g)) => g,
            _ => {
                say(format!("fsfault: making the populated {f} image"));
                let uuid = with_uuid(fs, &uuid_of(opts.seed, f));
                let tree = image::make_golden(fs, &uuid, &img, &dir.join("work/golden"))
                    .map_err(|e| Error::Run(format!("the {f} image: {e}")))?;
                let made_s = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                let g = Golden { made_s, tree };
                forget(dir, &obs_path, f)?;
                write_json(&meta, &g)?;
                g
            }
        };
        goldens.insert(f.clone(), golden);
    }
    // Loop devices of the study's own, well above those `losetup --find` hands out, two per
    // worker; another study running at once (another process) gets other numbers.
    let loop_base = 256 + (std::process::id() % 64) * 64;
    let setup = |f: &str, worker: usize| -> Setup<'_> {
        let g = &goldens[f];
        Setup {
            exe: &opts.exe,
            fs: image::file_system(f).expect("checked"),
            golden: dir.join(format!("images/{f}.img")),
            golden_tree: &g.tree,
            made_s: g.made_s,
            work: dir.join(format!("work/w{worker}")),
            deadline,
            loops: (loop_base + 2 * worker as u32, loop_base + 2 * worker as u32 + 1),
        }
    };

    // Step 2: the tracing runs.
    let pairs: Vec<(String, String)> = opts
        .file_systems
        .iter()
        .flat_map(|f| opts.programs.iter().map(move |p| (f.clone(), p.clone())))
        .collect();
    let trace_errors = Mutex::new(Vec::new());
    parallel(pairs.len(), opts.jobs, |i, w| {
        let (f, p) = &pairs[i];
        let path = dir.join(format!("traces/{f}-{p}.json"));
        if read_json::<Trace>(&path).is_some() {
            return;
        }
        say(format!("fsfault: tracing {f} {p}"));
        let t = experiment::trace(&setup(f, w), p);
        match t.map_err(Error::Run).and_then(|t| write_json(&path, &t)) {
            Ok(()) => {}
            Err(e) => trace_errors.lock().expect("lock").push(format!("{f} {p}: {e}")),
        }
    });
    let errors = trace_errors.into_inner().expect("lock");
    if !errors.is_empty() {
        return Err(Error::Run(format!("tracing runs failed: {}", errors.join("; "))));
    }
    let traces: Vec<Trace> = pairs
        .iter()
        .map(|(f, p)| read_json(&dir.join(format!("traces/{f}-{p}.json"))).expect("just written"))
        .collect();

    // Step 3: the experiments not done yet.
    let planned = plan(opts, &traces);
    let mut done: BTreeMap<String, Observation> = BTreeMap::new();
    for line in std::fs::read_to_string(&obs_path).unwrap_or_default().lines() {
        if let Ok(o) = serde_json::from_str::<Observation>(line) {
            if o.harness_error.is_none() {
                done.insert(o.id.clone(), o);
            }
        }
    }
    let todo: Vec<&Planned> = planned.iter().filter(|p| !done.contains_key(&p.id)).collect();
    say(format!(
        "fsfault: {} experiments planned, {} done before, {} to run on {} worker(s)",
        planned.len(),
        planned.len() - todo.len(),
        todo.len(),
        opts.jobs.max(1)
    ));
    let expected: BTreeMap<(String, String), &Tree> =
        traces.iter().map(|t| ((t.fs.clone(), t.program.clone()), &t.expected)).collect();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&obs_path)
        .map_err(|e| io(&obs_path, e))?;
    // A study killed while writing a line leaves it torn: end it, so the next line stands
    // alone (the torn one is not an observation and its experiment runs again).
    let text = std::fs::read(&obs_path).map_err(|e| io(&obs_path, e))?;
    if text.last().is_some_and(|&b| b != b'\n') {
        writeln!(file).map_err(|e| io(&obs_path, e))?;
    }
    let out = Mutex::new(file);
    let finished = AtomicUsize::new(0);
    let fresh = Mutex::new(Vec::new());
    parallel(todo.len(), opts.jobs, |i, w| {
        let p = todo[i];
        let e = expected[&(p.fs.clone(), p.program.clone())];
        let o = experiment::run(&setup(&p.fs, w), &p.id, &p.program, &p.fault, p.seed, e);
        let line = serde_json::to_string(&o).expect("serialises");
        let _ = writeln!(out.lock().expect("lock"), "{line}");
        let n = finished.fetch_add(1, Ordering::Relaxed) + 1;
        let what = match (&o.harness_error, o.fired) {
            (Some(e), _) => format!("harness error: {e}"),
            (None, 0) => "did not fire".into(),
            (None, _) => super::classify::cell(&super::classify::classify(&o)),
        };
        say(format!("[{n}/{}] {}: {what} ({:.1} s)", todo.len(), p.id, o.seconds));
        fresh.lock().expect("lock").push(o);
    });
    for o in fresh.into_inner().expect("lock") {
        done.insert(o.id.clone(), o);
    }
    if !opts.keep_work {
        release_work(dir);
        let _ = std::fs::remove_dir_all(dir.join("work"));
    }
    // In the plan's order, only what this study planned.
    let observations = planned.iter().filter_map(|p| done.remove(&p.id)).collect();
    Ok(Study { opts: opts.clone(), traces, observations, planned: planned.len() })
}

/// Lets go of whatever experiments of an interrupted study left mounted or attached in the
/// results folder's `work/` (`experiment::release`).
fn release_work(dir: &Path) {
    let work = dir.join("work");
    if let Ok(entries) = std::fs::read_dir(&work) {
        for e in entries.flatten() {
            experiment::release(&e.path());
        }
    }
    super::host::detach_loops_under(&work);
}

/// Removes file system `fs`'s traces and observations from the results folder.
fn forget(dir: &Path, obs_path: &Path, fs: &str) -> Result<(), Error> {
    for p in all_programs() {
        let _ = std::fs::remove_file(dir.join(format!("traces/{fs}-{p}.json")));
    }
    let Ok(text) = std::fs::read_to_string(obs_path) else { return Ok(()) };
    let kept: String = text
        .lines()
        .filter(|l| serde_json::from_str::<Observation>(l).is_ok_and(|o| o.fs != fs))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(obs_path, kept).map_err(|e| io(obs_path, e))
}

/// The mkfs arguments that fix `fs`'s UUID.
fn with_uuid(fs: &FileSystem, uuid: &str) -> Vec<String> {
    match fs.kind {
        "ext4" => vec!["-U".into(), uuid.into(), "-E".into(), format!("hash_seed={uuid}")],
        "xfs" => vec!["-m".into(), format!("uuid={uuid}")],
        _ => vec!["-U".into(), uuid.into()],
    }
}

/// The default results folder of `flashrig fsfault`.
pub fn default_results() -> PathBuf {
    PathBuf::from("fsfault-results")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsfault::experiment::Access;

    fn trace(fs: &str, program: &str, window: &[(&str, &str)]) -> Trace {
        Trace {
            fs: fs.into(),
            program: program.into(),
            window: window
                .iter()
                .map(|(o, s)| Access { op: o.to_string(), structure: s.to_string() })
                .collect(),
            ..Trace::default()
        }
    }

    fn opts(kinds: &[&str]) -> Options {
        Options {
            exe: PathBuf::new(),
            file_systems: vec!["ext4".into()],
            programs: vec!["mkdir".into()],
            kinds: kinds.iter().map(|k| k.to_string()).collect(),
            structures: vec![],
            seed: 7,
            jobs: 1,
            results: PathBuf::new(),
            deadline_s: 60,
            quiet: true,
            keep_work: false,
        }
    }

    #[test]
    fn the_plan_has_one_experiment_per_kind_op_and_structure_touched() {
        let t =
            [trace("ext4", "mkdir", &[("read", "dir"), ("write", "journal"), ("write", "dir")])];
        let p = plan(&opts(&["read-error", "lost"]), &t);
        let ids: Vec<&str> = p.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "ext4/mkdir/read-error/read/dir",
                "ext4/mkdir/lost/write/journal",
                "ext4/mkdir/lost/write/dir"
            ]
        );
        // Seeds depend on the study's seed and the id, nothing else.
        assert_ne!(p[0].seed, p[1].seed);
        assert_eq!(plan(&opts(&["read-error"]), &t)[0].seed, p[0].seed);
        // The latency study runs on its programs only.
        assert!(plan(&opts(&["delay"]), &[trace("ext4", "chmod", &[("read", "dir")])]).is_empty());
    }

    #[test]
    fn unknown_and_repeated_names_are_refused_by_name() {
        let mut o = opts(&["read-error"]);
        o.programs = vec!["fork".into()];
        assert!(o.check().unwrap_err().to_string().contains("\"fork\""));
        let o = opts(&["bitrot"]);
        assert!(o.check().unwrap_err().to_string().contains("\"bitrot\""));
        let o = opts(&["lost", "read-error", "lost"]);
        let e = o.check().unwrap_err().to_string();
        assert!(e.contains("\"lost\" is named twice (item 3)"), "{e}");
    }

    #[test]
    fn uuids_are_well_formed_and_seeded() {
        let u = uuid_of(1, "ext4");
        assert_eq!(u.len(), 36);
        assert_eq!(u, uuid_of(1, "ext4"));
        assert_ne!(u, uuid_of(2, "ext4"));
    }
}
