//! The plan of a reproduction (every run, each once) and the scheduler that runs it on worker
//! threads.
//!
//! Identical configurations run once (a run shared by several figures is one run); runs go to
//! worker threads, longest first (each simulated run is single-threaded and deterministic, so
//! the results do not depend on the number of workers). A run that fails, or panics, is
//! recorded with its error rather than stopping the others.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use flashrig_frontends::config::Config;
use flashrig_frontends::report::{self, Run};

/// One run.
pub struct Job {
    /// Names the run in progress lines and its result file.
    pub label: String,
    pub config: Config,
    /// The configuration as TOML: identical runs run once.
    pub text: String,
    /// Wall-time guess, to start the longest runs first.
    pub weight: f64,
}

/// Every run of a reproduction, and which run answers which of the paper module's keys.
pub struct Plan<K> {
    pub jobs: Vec<Job>,
    pub keys: BTreeMap<K, usize>,
    /// Why some cases were left out, for the document.
    pub skipped: Vec<String>,
}

impl<K: Ord> Default for Plan<K> {
    fn default() -> Self {
        Plan { jobs: Vec::new(), keys: BTreeMap::new(), skipped: Vec::new() }
    }
}

impl<K: Ord> Plan<K> {
    /// Adds a run for `key`, or points `key` at an identical run already planned.
    pub fn add(&mut self, key: K, label: String, config: Config, weight: f64) {
        let text = config.to_toml();
        let idx = match self.jobs.iter().position(|j| j.text == text) {
            Some(i) => i,
            None => {
                self.jobs.push(Job { label, config, text, weight });
                self.jobs.len() - 1
            }
        };
        self.keys.insert(key, idx);
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

/// Runs every job on `workers` threads, longest first; writes each result file and loads it
/// back (the comparisons read our numbers from the result files).
pub fn run_jobs(jobs: &[Job], results: &Path, workers: usize, quiet: bool) -> Vec<Done> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| jobs[b].weight.total_cmp(&jobs[a].weight));
    let next = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let done: Mutex<Vec<Option<Done>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..workers.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&j) = order.get(i) else { break };
                let job = &jobs[j];
                let path = results.join(format!("{}.json", file_label(&job.label)));
                let started = Instant::now();
                let error = run_one(job, &path);
                let run = match &error {
                    None => {
                        report::load(std::slice::from_ref(&path)).ok().and_then(|mut v| v.pop())
                    }
                    Some(_) => None,
                };
                let wall_s = started.elapsed().as_secs_f64();
                let n = finished.fetch_add(1, Ordering::Relaxed) + 1;
                if !quiet {
                    eprintln!(
                        "reproduce: [{n}/{}] {} {:.1} s{}",
                        jobs.len(),
                        job.label,
                        wall_s,
                        error.as_ref().map_or(String::new(), |e| format!(" FAILED: {e}"))
                    );
                }
                done.lock().expect("results")[j] = Some(Done { run, error, wall_s, path });
            });
        }
    });
    done.into_inner().expect("results").into_iter().map(|d| d.expect("every job ran")).collect()
}

/// Runs one job and writes its result file; returns what went wrong, if anything. A panic in
/// a run is caught so that one broken configuration does not cost the other runs.
fn run_one(job: &Job, path: &Path) -> Option<String> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        flashrig_frontends::run::run(&job.config)
    }));
    match outcome {
        Ok(Ok(out)) if out.summary.errors == 0 => std::fs::write(path, out.result.to_json_pretty())
            .err()
            .map(|e| format!("cannot write {}: {e}", path.display())),
        Ok(Ok(out)) => {
            let _ = std::fs::write(path, out.result.to_json_pretty());
            Some(format!(
                "{} requests failed; the first: {}",
                out.summary.errors,
                out.summary.first_error.unwrap_or_default()
            ))
        }
        Ok(Err(e)) => Some(e.to_string()),
        Err(panic) => Some(format!(
            "panicked: {}",
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}
