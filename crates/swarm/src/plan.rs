//! A run's plan, drawn from its seed alone: the stack, the workload, and the fault schedule
//! round by round. Drawing everything up front (rather than deciding as the run goes) is what
//! makes a failure replay byte for byte from `--seed`, and what the shrinker edits.

use flashrig_check::{CheckConfig, OpWeights, WriteFault};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::stack::{catalogue, Engine, SsdVariant, StackSpec};

/// Where a round's power cut lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// Right after the n-th command completed at a member (anywhere inside the engine's work:
    /// between a journal write and its data, mid-conversion, mid-GC, mid-checkpoint).
    Member(u64),
    /// Right after the n-th command completed for the host.
    Host(u64),
    /// Right after the n-th host flush completed.
    Flush(u64),
    /// At a moment of the simulated clock (ns after the round starts).
    Time(u64),
}

/// Members lost in a round, and whether they are rebuilt while the workload goes on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// Member slots pulled, at most the stack's tolerated failures.
    pub members: Vec<usize>,
    /// When (ns after the round starts).
    pub at_ns: u64,
    /// Rebuild onto blank replacements right after (the workload keeps running).
    pub rebuild: bool,
    /// With two members lost: the second is pulled this long after the first, while the
    /// first one's rebuild runs (`None`: both at once).
    pub second_after_ns: Option<u64>,
}

/// Silent faults of a round: bit rot on up to the tolerated number of members, and (on stacks
/// that catch them on read) writes those members lose or misdirect. The round ends cleanly
/// with a scrub, which must leave nothing unrepairable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rot {
    /// Bits flipped: (member slot, member LBA, bit, ns after the round starts). Flips of
    /// blocks never written change nothing.
    pub flips: Vec<(usize, u64, u64, u64)>,
    /// Armed write faults: (member slot, the n-th write from the round's start, fault).
    pub writes: Vec<(usize, u64, WriteFault)>,
    /// One of the damaged members answers every command this much later, for the whole
    /// round (on stacks that route reads around a slow member).
    pub slow: Option<(usize, u64)>,
}

/// One round: a workload segment that ends in a power cut (or cleanly), or runs with members
/// lost, or with silent faults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Round {
    /// Commands the driver issues this round.
    pub ops: u64,
    pub crash: Option<CrashPoint>,
    /// Crash states checked from this cut (subsets of the unflushed blocks; RAM members).
    pub tears: u32,
    /// Power cuts during the recovery after this cut, each after some of its commands.
    pub nested: Vec<u64>,
    pub loss: Option<Loss>,
    pub rot: Option<Rot>,
}

/// Everything one run does.
#[derive(Clone, Debug)]
pub struct Plan {
    pub seed: u64,
    pub stack: StackSpec,
    pub reactors: usize,
    pub workload: CheckConfig,
    pub rounds: Vec<Round>,
    /// At the end, more members than tolerated are pulled: reads must fail with a typed
    /// error or return the right data, never wrong data.
    pub overload: bool,
    /// See [`Limits::planted_bug`].
    pub planted_bug: bool,
}

/// What a plan may be narrowed to (the CLI's `--stack`, and the shrinker's cuts).
#[derive(Clone, Debug, Default)]
pub struct Limits {
    /// Only the stack of this name, or else the stacks whose names start with it.
    pub stack: Option<String>,
    /// At most this many rounds.
    pub rounds: Option<usize>,
    /// At most this many commands per round.
    pub ops: Option<u64>,
    /// Plant a bug in `twophase` (its flushes skip the last member), to prove the swarm
    /// catches one; for that test only.
    pub planted_bug: bool,
}

impl Limits {
    /// The stacks these limits allow; an error names the unknown prefix and the choices.
    pub fn stacks(&self) -> Result<Vec<StackSpec>, String> {
        let all = catalogue();
        let Some(prefix) = &self.stack else { return Ok(all) };
        // An exact name is that stack alone (`raid:4+1` is not also `raid:4+1:cache`).
        if let Some(s) = all.iter().find(|s| &s.name == prefix) {
            return Ok(vec![s.clone()]);
        }
        let chosen: Vec<StackSpec> =
            all.iter().filter(|s| s.name.starts_with(prefix.as_str())).cloned().collect();
        if chosen.is_empty() {
            let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
            return Err(format!(
                "no stack is named like {prefix:?}; the stacks are: {}",
                names.join(", ")
            ));
        }
        Ok(chosen)
    }
}

fn pick<T: Copy>(rng: &mut Xoshiro256PlusPlus, xs: &[T]) -> T {
    xs[(rng.next_u64() % xs.len() as u64) as usize]
}

fn between(rng: &mut Xoshiro256PlusPlus, lo: u64, hi: u64) -> u64 {
    lo + rng.next_u64() % (hi - lo + 1)
}

/// Draws the plan of run `seed` within `limits`.
pub fn draw(seed: u64, limits: &Limits) -> Result<Plan, String> {
    let stacks = limits.stacks()?;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5A4D_5741_524D);
    let stack = stacks[(rng.next_u64() % stacks.len() as u64) as usize].clone();
    let promise = stack.promise();
    let reactors = pick(&mut rng, &[1, 1, 2]);
    let stripe = stack.stripe_data_blocks();
    let full_stripe = matches!(stack.engine, Engine::Raid { full_stripe: true, .. });
    let (align, max_io) = if full_stripe {
        (stripe, stripe * pick(&mut rng, &[1, 2]))
    } else {
        (pick(&mut rng, &[1, 1, 1, 2, 4]), between(&mut rng, 1, 2 * stripe).max(1))
    };
    let align = align.min(max_io);
    let max_io = max_io / align * align;
    let workload = CheckConfig {
        seed,
        ops: 0,
        queue_depth: pick(&mut rng, &[1, 2, 4, 8, 16]),
        max_io_blocks: max_io,
        align_blocks: align,
        // Small spans make overwrites (and so versions that a cut may tear) common, and keep
        // each crash state's read-back short.
        span_blocks: Some(pick(&mut rng, &[128, 512, 512, 2048, u64::MAX])),
        weights: OpWeights {
            read: between(&mut rng, 10, 40) as u32,
            write: between(&mut rng, 40, 70) as u32,
            trim: between(&mut rng, 0, 10) as u32,
            flush: between(&mut rng, 1, 12) as u32,
        },
        md_percent: pick(&mut rng, &[0, 50, 100]),
        fua_percent: pick(&mut rng, &[0, 0, 5, 20]),
        spread_over_reactors: reactors > 1,
        // No idle pauses, but for the SSD whose cache empties only in idle time: its pauses
        // come from no draw, so every plan and seed stays as it was.
        pause_every_ops: 0,
        pause_ns: 0,
    };
    let workload = if stack.engine == Engine::Ssd(SsdVariant::SlcIdle) {
        // A pause of 20 ms every 256 commands moves about two and a half of `tiny-slc`'s
        // eight SLC lines (a unit's SLC read and TLC program take 240 us, 32 units per plane
        // and line), so bursts still fill the cache past its size and cuts can find victims
        // half moved.
        CheckConfig { pause_every_ops: 256, pause_ns: 20_000_000, ..workload }
    } else {
        workload
    };
    let n_rounds = between(&mut rng, 1, 4) as usize;
    let n_rounds = limits.rounds.map_or(n_rounds, |r| n_rounds.min(r.max(1)));
    let members = stack.members() as u64;
    let mut rounds = Vec::new();
    // Once a cut has happened, a member loss (or rot) is a promise only of engines whose
    // parity is crash safe, or that resync after the crash (raid's write hole).
    let mut crashed = false;
    let after_cut_ok = promise.parity_crash_safe || promise.resyncs_after_crash;
    for _ in 0..n_rounds {
        let ops = between(&mut rng, 100, 1500);
        let ops = limits.ops.map_or(ops, |o| ops.min(o.max(1)));
        let lose =
            promise.failures_tolerated > 0 && (after_cut_ok || !crashed) && rng.next_u64() % 4 == 0;
        let loss = lose.then(|| {
            let n = between(&mut rng, 1, promise.failures_tolerated as u64) as usize;
            let mut slots: Vec<usize> = (0..members as usize).collect();
            let mut pulled = Vec::new();
            for _ in 0..n {
                let i = (rng.next_u64() % slots.len() as u64) as usize;
                pulled.push(slots.swap_remove(i));
            }
            let at_ns = between(&mut rng, 0, 3_000_000);
            let second_after_ns = (pulled.len() > 1 && rng.next_u64() % 2 == 0)
                .then(|| between(&mut rng, 0, 2_000_000));
            Loss { members: pulled, at_ns, rebuild: true, second_after_ns }
        });
        // A round with members lost ends cleanly: no engine opens degraded or journals its
        // rebuild yet (docs/reliability.md), so a cut there is not a promise to check.
        let crash = if loss.is_some() {
            None
        } else {
            match rng.next_u64() % 10 {
                0 => None,
                1..=4 if members > 1 || matches!(stack.engine, Engine::Scala { .. }) => {
                    Some(CrashPoint::Member(between(&mut rng, 1, ops * members * 2)))
                }
                1..=6 => Some(CrashPoint::Host(between(&mut rng, 1, ops))),
                7 | 8 => Some(CrashPoint::Flush(between(&mut rng, 1, 8))),
                _ => Some(CrashPoint::Time(between(&mut rng, 50_000, 5_000_000))),
            }
        };
        crashed |= crash.is_some();
        let tears = if stack.members() > 0 && crash.is_some() {
            between(&mut rng, 1, 16) as u32
        } else {
            0
        };
        let nested = if promise.recovery_writes && crash.is_some() {
            (0..pick(&mut rng, &[0, 0, 1, 2, 3])).map(|_| between(&mut rng, 1, 200)).collect()
        } else {
            Vec::new()
        };
        rounds.push(Round { ops, crash, tears, nested, loss, rot: None });
    }
    // Rounds of silent faults come last, drawn from a stream of their own, so that adding them
    // left every earlier round of every seed as it was (the regression seeds still draw the
    // plans that found their bugs).
    let mut rot_rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x0B17_B0B1_7ED5);
    let room = limits.rounds.is_none_or(|r| rounds.len() < r.max(1));
    if promise.heals_corruption && (after_cut_ok || !crashed) && room && rot_rng.next_u64() % 3 == 0
    {
        let ops = between(&mut rot_rng, 200, 1500);
        let ops = limits.ops.map_or(ops, |o| ops.min(o.max(1)));
        rounds.push(Round {
            ops,
            crash: None,
            tears: 0,
            nested: Vec::new(),
            loss: None,
            rot: Some(draw_rot(&mut rot_rng, &stack, ops)),
        });
    }
    let overload = (after_cut_ok || !crashed) && rng.next_u64() % 4 == 0;
    Ok(Plan { seed, stack, reactors, workload, rounds, overload, planted_bug: limits.planted_bug })
}

/// The silent faults of one round on `stack`.
fn draw_rot(rng: &mut Xoshiro256PlusPlus, stack: &StackSpec, ops: u64) -> Rot {
    let promise = stack.promise();
    let n = stack.members();
    let mut slots: Vec<usize> = (0..n).collect();
    let damaged: Vec<usize> = (0..between(rng, 1, promise.failures_tolerated as u64))
        .map(|_| slots.swap_remove((rng.next_u64() % slots.len() as u64) as usize))
        .collect();
    let blocks = stack.ram_member_blocks();
    let flips = (0..between(rng, 1, 24))
        .map(|_| {
            let slot = pick(rng, &damaged);
            (slot, rng.next_u64() % blocks, rng.next_u64(), between(rng, 0, 4_000_000))
        })
        .collect();
    let writes = match promise.catches_lost_writes {
        true => (0..pick(rng, &[0, 1, 2]))
            .map(|_| {
                let fault = match rng.next_u64() % 2 {
                    0 => WriteFault::Lose,
                    _ => WriteFault::Misdirect { shift_blocks: between(rng, 1, blocks) },
                };
                (pick(rng, &damaged), between(rng, 0, ops), fault)
            })
            .collect(),
        false => Vec::new(),
    };
    // Members answer at once in the swarm, so "100x slower" is a fixed delay of the order of
    // a flash read instead; the engine compares a member with its peers.
    let slow = (promise.routes_around_slow && rng.next_u64().is_multiple_of(2))
        .then(|| (pick(rng, &damaged), pick(rng, &[50_000, 200_000, 1_000_000])));
    Rot { flips, writes, slow }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_plan_and_limits_narrow_it() {
        for seed in 0..200 {
            let a = draw(seed, &Limits::default()).unwrap();
            let b = draw(seed, &Limits::default()).unwrap();
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
            let l = Limits {
                stack: Some("twophase".into()),
                rounds: Some(1),
                ops: Some(50),
                planted_bug: false,
            };
            let c = draw(seed, &l).unwrap();
            assert!(c.stack.name.starts_with("twophase"));
            assert_eq!(c.rounds.len(), 1);
            assert!(c.rounds[0].ops <= 50);
            assert_eq!(c.workload.max_io_blocks % c.workload.align_blocks, 0);
        }
        let err = draw(1, &Limits { stack: Some("zfs".into()), ..Limits::default() }).unwrap_err();
        assert!(err.contains("zfs") && err.contains("twophase:2+1"), "{err}");
    }

    #[test]
    fn only_engines_that_are_crash_safe_or_resync_lose_members_after_a_power_cut() {
        for stack in catalogue() {
            let p = stack.promise();
            let allowed = p.parity_crash_safe || p.resyncs_after_crash;
            for seed in 0..100 {
                let plan =
                    draw(seed, &Limits { stack: Some(stack.name.clone()), ..Limits::default() })
                        .unwrap();
                let first_cut = plan.rounds.iter().position(|r| r.crash.is_some());
                if let (Some(c), false) = (first_cut, allowed) {
                    assert!(plan.rounds[c..].iter().all(|r| r.loss.is_none() && r.rot.is_none()));
                    assert!(!plan.overload, "seed {seed}");
                }
                for r in &plan.rounds {
                    assert!(r.rot.is_none() || p.heals_corruption, "{}: {r:?}", stack.name);
                    if let Some(rot) = &r.rot {
                        let slots: std::collections::BTreeSet<usize> = rot
                            .flips
                            .iter()
                            .map(|f| f.0)
                            .chain(rot.writes.iter().map(|w| w.0))
                            .collect();
                        assert!(slots.len() <= p.failures_tolerated, "{}: {rot:?}", stack.name);
                        assert!(r.crash.is_none() && r.loss.is_none());
                        assert!(rot.writes.is_empty() || p.catches_lost_writes);
                    }
                }
            }
        }
    }
}
