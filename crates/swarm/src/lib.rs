//! The reliability swarm: many short seeded runs, each drawing from its seed a stack (every
//! engine and geometry, the emulated SSD alone with each firmware variant), a workload and a
//! fault schedule, carried out on the deterministic simulated runtime against the reference
//! model. The faults: power cuts right after a command completes at a member, at the host or
//! after a flush, or at a moment of the clock; every tear of the unflushed blocks a cut leaves
//! (a crash state each); cuts during recovery, repeatedly; members lost in any round and
//! rebuilt while the workload runs; more members lost than tolerated, where reads must fail
//! rather than return wrong data.
//!
//! It follows TigerBeetle's VOPR in spirit: everything comes from the seed, so a failure
//! replays byte for byte from one command line, and the shrinker cuts a failing plan down
//! (fewer rounds, fewer commands, fewer members) before it is printed.
//!
//! Modules: [`stack`] (the catalogue of stacks as data, members and power), [`plan`] (what a
//! seed draws), [`run`] (carrying a plan out and checking it), [`shrink`].

pub mod plan;
pub mod run;
pub mod shrink;
pub mod stack;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

pub use plan::{draw, Limits, Plan};
pub use run::{execute, Tally};
pub use stack::{catalogue, StackSpec, KNOWN_FAILING};

/// What a swarm does.
#[derive(Clone, Debug, Default)]
pub struct SwarmOptions {
    /// The first run's seed; run i has seed `first_seed + i`.
    pub first_seed: u64,
    /// Stop after this many runs.
    pub runs: Option<u64>,
    /// Stop after this much wall time.
    pub minutes: Option<f64>,
    /// Narrow the draw (a stack, rounds, commands per round).
    pub limits: Limits,
    /// Shrink a failing case before reporting it.
    pub shrink: bool,
}

/// A failed run: the seed, what failed, and how to replay it (shrunk, when shrinking found a
/// smaller case that fails too).
#[derive(Clone, Debug)]
pub struct Failure {
    pub seed: u64,
    pub stack: String,
    pub message: String,
    /// The command line that replays the (shrunk) failure byte for byte.
    pub replay: String,
    /// The command line that replays the run as first drawn.
    pub original: String,
}

/// What a swarm did.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub tally: Tally,
    pub elapsed_s: f64,
    pub failure: Option<Failure>,
    /// Runs per stack.
    pub stacks: std::collections::BTreeMap<String, u64>,
}

impl Summary {
    /// Crash states checked per second of wall time.
    pub fn states_per_s(&self) -> f64 {
        self.tally.crash_states as f64 / self.elapsed_s.max(1e-9)
    }
}

/// The command line that replays seed `seed` under `limits`.
pub fn replay_line(seed: u64, limits: &Limits) -> String {
    let mut s = format!("flashrig swarm --seed {seed} --runs 1");
    if let Some(st) = &limits.stack {
        s += &format!(" --stack {st}");
    }
    if let Some(r) = limits.rounds {
        s += &format!(" --rounds {r}");
    }
    if let Some(o) = limits.ops {
        s += &format!(" --ops {o}");
    }
    if limits.planted_bug {
        s += " --planted-bug";
    }
    s
}

/// Draws and runs one seed, turning a panic into an error.
pub fn run_seed(seed: u64, limits: &Limits) -> Result<(Plan, Result<Tally, String>), String> {
    let plan = draw(seed, limits)?;
    let outcome = catch_unwind(AssertUnwindSafe(|| execute(&plan))).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into());
        Err(format!("panicked: {msg}"))
    });
    Ok((plan, outcome))
}

/// Runs the swarm; `progress` is called after every run. Stops at the first failure.
/// `Err` only for options that draw nothing (an unknown stack).
pub fn swarm(opts: &SwarmOptions, mut progress: impl FnMut(&Summary)) -> Result<Summary, String> {
    opts.limits.stacks()?;
    let start = Instant::now();
    let mut sum = Summary::default();
    let mut seed = opts.first_seed;
    loop {
        if opts.runs.is_some_and(|n| sum.tally.runs >= n) {
            break;
        }
        if opts.minutes.is_some_and(|m| start.elapsed().as_secs_f64() >= m * 60.0) {
            break;
        }
        if opts.runs.is_none() && opts.minutes.is_none() && sum.tally.runs >= 100 {
            break;
        }
        let (plan, outcome) = run_seed(seed, &opts.limits)?;
        *sum.stacks.entry(plan.stack.name.clone()).or_default() += 1;
        match outcome {
            Ok(t) => sum.tally.add(&t),
            Err(message) => {
                sum.tally.runs += 1;
                let exact = Limits { stack: Some(plan.stack.name.clone()), ..opts.limits.clone() };
                let original = replay_line(seed, &exact);
                let (limits, message) = if opts.shrink {
                    shrink::shrink(seed, &exact, message)
                } else {
                    (exact, message)
                };
                sum.failure = Some(Failure {
                    seed,
                    stack: limits.stack.clone().unwrap_or_default(),
                    message,
                    replay: replay_line(seed, &limits),
                    original,
                });
                sum.elapsed_s = start.elapsed().as_secs_f64();
                progress(&sum);
                return Ok(sum);
            }
        }
        sum.elapsed_s = start.elapsed().as_secs_f64();
        progress(&sum);
        seed += 1;
    }
    sum.elapsed_s = start.elapsed().as_secs_f64();
    Ok(sum)
}

/// The swarm's counters as text: runs, crash states, faults by kind, states per second.
pub fn render(s: &Summary) -> String {
    let t = &s.tally;
    let cuts: Vec<String> = t.cuts.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let stacks: Vec<String> = s.stacks.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let mut out = String::new();
    out += &format!("runs:                 {} in {:.1} s\n", t.runs, s.elapsed_s);
    out +=
        &format!("crash states checked: {} ({:.0} per second)\n", t.crash_states, s.states_per_s());
    out += &format!(
        "power cuts:           {} ({})\n",
        t.cuts.values().sum::<u64>(),
        if cuts.is_empty() { "none".into() } else { cuts.join(", ") }
    );
    out += &format!("cuts during recovery: {}\n", t.recovery_cuts);
    out += &format!(
        "torn blocks:          {} unflushed at the cuts, {} landed over all tears\n",
        t.open_blocks, t.landed_blocks
    );
    out += &format!(
        "members lost:         {} (rebuilt: {}; {} lost during another's rebuild)\n",
        t.member_losses, t.rebuilds, t.losses_during_rebuild
    );
    out += &format!(
        "overloads:            {} ({} reads refused with an error, none wrong)\n",
        t.overloads, t.overload_refused_reads
    );
    out += &format!(
        "commands checked:     {} driver commands, {} blocks compared\n",
        t.commands, t.blocks_checked
    );
    out += &format!(
        "engine instances:     {} with background tasks, {} still alive after their run (leaked)\n",
        t.instances, t.instances_outlived
    );
    out += &format!(
        "silent faults:        {} blocks rotted, {} writes lost, {} misdirected; {} scrubs \
         repaired {} blocks, none left unrepairable\n",
        t.flipped_blocks, t.lost_writes, t.misdirected_writes, t.scrubs, t.scrub_repaired
    );
    out += &format!(
        "slow members:         {} rounds, {} reads served around them\n",
        t.slow_rounds, t.slow_reads_routed
    );
    out += &format!("stacks:               {}\n", stacks.join(", "));
    out
}
