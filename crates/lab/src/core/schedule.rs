//! The plan of a reproduction (every run, each once) and the scheduler that runs it on worker
//! threads.
//!
//! Identical configurations run once (a run shared by several figures is one run); runs go to
//! worker threads, longest first (each simulated run is single-threaded and deterministic, so
//! the results do not depend on the number of workers). A run that fails, or panics, is
//! recorded with its error rather than stopping the others.
//!
//! A paper whose evaluation warms its devices up once and then runs its loads in turn (CSAL
//! §6.2) plans its loads as phases of a [`Sequence`]: one phased run (`[[phase]]`) per stack,
//! whose phases each answer keys as a run of their own would, with one result file each.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use flashrig_frontends::config::{Config, PhaseConfig};
use flashrig_frontends::report::{self, Run};

/// One measured load: a run of its own, or a phase of a [`Sequence`].
pub struct Job {
    /// Names the run in progress lines and its result file.
    pub label: String,
    /// The configuration as the load runs: for a phase, the sequence's stack and warm-up with
    /// the phase's workload (what the phase's result file records, less the other phases).
    pub config: Config,
    /// The configuration as TOML: identical runs run once.
    pub text: String,
    /// Wall-time guess, to start the longest runs first.
    pub weight: f64,
    /// The sequence (an index into [`Plan::sequences`]) this load is a phase of.
    pub sequence: Option<usize>,
}

/// Loads that run as phases of one run, in order, after one warm-up of one stack.
pub struct Sequence {
    /// Names the run in progress lines and its `--dump-configs` file.
    pub label: String,
    /// The stack and warm-up every phase shares (`[workload]` left at its default).
    base: Config,
    /// The phases' jobs, in the order they run.
    pub jobs: Vec<usize>,
}

impl Sequence {
    /// The phased configuration that runs the sequence: one `[[phase]]` per job, named by
    /// its label.
    pub fn config(&self, jobs: &[Job]) -> Config {
        let mut c = self.base.clone();
        c.phase = self
            .jobs
            .iter()
            .map(|&j| PhaseConfig {
                name: jobs[j].label.clone(),
                workload: jobs[j].config.workload.clone(),
            })
            .collect();
        c
    }
}

/// Every run of a reproduction, and which run answers which of the paper module's keys.
pub struct Plan<K> {
    pub jobs: Vec<Job>,
    pub sequences: Vec<Sequence>,
    pub keys: BTreeMap<K, usize>,
    /// Why some cases were left out, for the document.
    pub skipped: Vec<String>,
}

impl<K: Ord> Default for Plan<K> {
    fn default() -> Self {
        Plan { jobs: Vec::new(), sequences: Vec::new(), keys: BTreeMap::new(), skipped: Vec::new() }
    }
}

/// What a worker runs: a load alone, or a sequence's phases.
#[derive(Clone, Copy)]
enum Unit {
    Job(usize),
    Sequence(usize),
}

impl<K: Ord> Plan<K> {
    /// Adds a run for `key`, or points `key` at an identical run already planned.
    pub fn add(&mut self, key: K, label: String, config: Config, weight: f64) {
        let text = config.to_toml();
        let idx = match self.jobs.iter().position(|j| j.sequence.is_none() && j.text == text) {
            Some(i) => i,
            None => {
                self.jobs.push(Job { label, config, text, weight, sequence: None });
                self.jobs.len() - 1
            }
        };
        self.keys.insert(key, idx);
    }

    /// Adds `config`'s workload as the next phase of the sequence `sequence` (started by its
    /// first phase), answering `key` if one is given (a phase without a key prepares the
    /// ones after it). Every phase of a sequence must share the first one's stack, warm-up
    /// and seed: only `[workload]` may differ. A phase identical to one already in the
    /// sequence is not run twice.
    pub fn add_phase(
        &mut self,
        sequence: &str,
        key: Option<K>,
        label: String,
        config: Config,
        weight: f64,
    ) {
        let base = Config { workload: Default::default(), ..config.clone() };
        let s = match self.sequences.iter().position(|s| s.label == sequence) {
            Some(s) => s,
            None => {
                self.sequences.push(Sequence { label: sequence.into(), base, jobs: Vec::new() });
                self.sequences.len() - 1
            }
        };
        assert!(
            self.sequences[s].base == Config { workload: Default::default(), ..config.clone() },
            "phase {label} of sequence {sequence}: only [workload] may differ between phases"
        );
        let same = self.sequences[s]
            .jobs
            .iter()
            .copied()
            .find(|&j| self.jobs[j].config.workload == config.workload);
        let idx = match same {
            Some(j) => j,
            None => {
                let text = config.to_toml();
                self.jobs.push(Job { label, config, text, weight, sequence: Some(s) });
                self.sequences[s].jobs.push(self.jobs.len() - 1);
                self.jobs.len() - 1
            }
        };
        if let Some(k) = key {
            self.keys.insert(k, idx);
        }
    }

    /// How many runs the plan makes: its sequences, and its loads outside them.
    pub fn runs(&self) -> usize {
        self.sequences.len() + self.jobs.iter().filter(|j| j.sequence.is_none()).count()
    }

    /// What each run is called and its configuration as TOML (phased for a sequence), in
    /// the plan's order: what `--dump-configs` writes.
    pub fn run_configs(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .jobs
            .iter()
            .filter(|j| j.sequence.is_none())
            .map(|j| (j.label.clone(), j.text.clone()))
            .collect();
        v.extend(self.sequences.iter().map(|s| (s.label.clone(), s.config(&self.jobs).to_toml())));
        v
    }
    /// Records why cases were left out (once per reason).
    pub fn skip(&mut self, why: &str) {
        if !self.skipped.iter().any(|s| s == why) {
            self.skipped.push(why.into());
        }
    }
}

/// A finished run, loaded back from its result file.
pub struct Done {
    pub run: Option<Run>,
    pub error: Option<String>,
    pub wall_s: f64,
    pub path: PathBuf,
}

/// A run's label as a file name.
fn file_label(label: &str) -> String {
    label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '+' { c } else { '_' })
        .collect()
}

/// The number of worker threads: `requested`, or one per available CPU when it is 0.
pub fn workers(requested: usize) -> usize {
    if requested > 0 {
        requested
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// Runs every job (each sequence as one run of its phases) on `workers` threads, longest
/// first; writes each load's result file and loads it back (the comparisons read our numbers
/// from the result files).
pub fn run_jobs(
    jobs: &[Job],
    sequences: &[Sequence],
    results: &Path,
    workers: usize,
    quiet: bool,
) -> Vec<Done> {
    let mut units: Vec<(Unit, f64)> = jobs
        .iter()
        .enumerate()
        .filter(|(_, j)| j.sequence.is_none())
        .map(|(i, j)| (Unit::Job(i), j.weight))
        .collect();
    units.extend(
        sequences
            .iter()
            .enumerate()
            .map(|(i, s)| (Unit::Sequence(i), s.jobs.iter().map(|&j| jobs[j].weight).sum())),
    );
    units.sort_by(|a, b| b.1.total_cmp(&a.1));
    let next = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let done: Mutex<Vec<Option<Done>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    let path_of = |j: usize| results.join(format!("{}.json", file_label(&jobs[j].label)));
    std::thread::scope(|s| {
        for _ in 0..workers.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(unit, _)) = units.get(i) else { break };
                let started = Instant::now();
                let (label, members, errors): (&str, Vec<usize>, Vec<Option<String>>) = match unit {
                    Unit::Job(j) => (&jobs[j].label, vec![j], vec![run_one(&jobs[j], &path_of(j))]),
                    Unit::Sequence(q) => {
                        let seq = &sequences[q];
                        let paths: Vec<PathBuf> = seq.jobs.iter().map(|&j| path_of(j)).collect();
                        (&seq.label, seq.jobs.clone(), run_phases(&seq.config(jobs), &paths))
                    }
                };
                let wall_s = started.elapsed().as_secs_f64();
                let n = finished.fetch_add(1, Ordering::Relaxed) + 1;
                if !quiet {
                    let failed = errors.iter().flatten().next();
                    eprintln!(
                        "reproduce: [{n}/{}] {label} {wall_s:.1} s{}",
                        units.len(),
                        failed.map_or(String::new(), |e| format!(" FAILED: {e}"))
                    );
                }
                for (j, error) in members.into_iter().zip(errors) {
                    let path = path_of(j);
                    let run = match &error {
                        None => {
                            report::load(std::slice::from_ref(&path)).ok().and_then(|mut v| v.pop())
                        }
                        Some(_) => None,
                    };
                    done.lock().expect("results")[j] = Some(Done { run, error, wall_s, path });
                }
            });
        }
    });
    done.into_inner().expect("results").into_iter().map(|d| d.expect("every job ran")).collect()
}

/// Runs a phased configuration and writes each phase's result file to `paths` (in phase
/// order); returns what went wrong in each phase, if anything. A failure of the run as a
/// whole (or a panic) is every phase's.
fn run_phases(config: &Config, paths: &[PathBuf]) -> Vec<Option<String>> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        flashrig_frontends::run::run_all(config, false)
    }));
    let outs = match outcome {
        Ok(Ok(outs)) => outs,
        Ok(Err(e)) => return vec![Some(e.to_string()); paths.len()],
        Err(panic) => return vec![Some(panic_message(panic)); paths.len()],
    };
    outs.into_iter().zip(paths).map(|(out, path)| write_result(out, path)).collect()
}

/// Writes a run's result file; returns what went wrong (a request that failed, or the file).
fn write_result(out: flashrig_frontends::run::RunOutput, path: &Path) -> Option<String> {
    let written = std::fs::write(path, out.result.to_json_pretty())
        .err()
        .map(|e| format!("cannot write {}: {e}", path.display()));
    if out.summary.errors > 0 {
        return Some(format!(
            "{} requests failed; the first: {}",
            out.summary.errors,
            out.summary.first_error.unwrap_or_default()
        ));
    }
    written
}

fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    format!(
        "panicked: {}",
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    )
}

/// Runs one job and writes its result file; returns what went wrong, if anything. A panic in
/// a run is caught so that one broken configuration does not cost the other runs.
fn run_one(job: &Job, path: &Path) -> Option<String> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        flashrig_frontends::run::run(&job.config)
    }));
    match outcome {
        Ok(Ok(out)) => write_result(out, path),
        Ok(Err(e)) => Some(e.to_string()),
        Err(panic) => Some(panic_message(panic)),
    }
}

#[cfg(test)]
mod tests {
    //! Goal: loads planned as phases of a sequence run as one phased run, each phase's result
    //! lands in its own load's file and answers its key, a phase identical to one already in
    //! its sequence runs once, and `--dump-configs` sees one phased configuration per
    //! sequence. Method: plan two phases on a RAM device and one load alone, run the plan,
    //! read the result files back.
    use super::*;

    fn config(rw: &str, runtime_ms: u64) -> Config {
        let text = format!(
            "seed = 3\nruntime = \"sim\"\n[device]\ntype = \"ssd\"\npreset = \"tiny\"\n\
             [precondition]\nfill = true\n[workload]\nrw = \"{rw}\"\nruntime_ms = {runtime_ms}\nstamp = false\n"
        );
        Config::from_toml(&text, Path::new("<test>")).unwrap()
    }

    #[test]
    fn a_sequence_runs_its_phases_once_each_into_their_own_files() {
        let mut plan: Plan<&str> = Plan::default();
        plan.add_phase("seq", Some("w"), "seq-w".into(), config("randwrite", 5), 1.0);
        plan.add_phase("seq", Some("r"), "seq-r".into(), config("randread", 5), 1.0);
        // The same workload again answers its key from the phase already planned.
        plan.add_phase("seq", Some("w-again"), "seq-w2".into(), config("randwrite", 5), 1.0);
        plan.add("alone", "alone".into(), config("randwrite", 3), 1.0);
        assert_eq!(plan.jobs.len(), 3);
        assert_eq!(plan.runs(), 2);
        assert_eq!(plan.keys["w"], plan.keys["w-again"]);
        let runs = plan.run_configs();
        let labels: Vec<&str> = runs.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["alone", "seq"]);
        let phased = Config::from_toml(&runs[1].1, Path::new("<dump>")).unwrap();
        let names: Vec<&str> = phased.phase.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["seq-w", "seq-r"]);

        let dir = tempfile::tempdir().unwrap();
        let done = run_jobs(&plan.jobs, &plan.sequences, dir.path(), 2, true);
        assert_eq!(done.len(), 3);
        for (job, d) in plan.jobs.iter().zip(&done) {
            assert!(d.error.is_none(), "{}: {:?}", job.label, d.error);
            let run = d.run.as_ref().unwrap_or_else(|| panic!("{}: no result", job.label));
            let rw = run.result.config["workload"]["rw"].as_str().unwrap();
            assert_eq!(rw, job.config.workload.rw.name(), "{}", job.label);
            assert!(d.path.ends_with(format!("{}.json", job.label)), "{}", d.path.display());
        }
        let phase = |j: usize| done[j].run.as_ref().unwrap().result.workload["phase"].clone();
        assert_eq!(phase(plan.keys["w"])["index"], 0);
        assert_eq!(phase(plan.keys["r"])["index"], 1);
        assert!(phase(plan.keys["alone"]).is_null());
    }

    #[test]
    #[should_panic(expected = "only [workload] may differ")]
    fn phases_of_one_sequence_share_their_stack() {
        let mut plan: Plan<&str> = Plan::default();
        plan.add_phase("seq", Some("a"), "a".into(), config("randwrite", 5), 1.0);
        let mut other = config("randread", 5);
        other.seed = 4;
        plan.add_phase("seq", Some("b"), "b".into(), other, 1.0);
    }
}
