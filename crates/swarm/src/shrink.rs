//! Shrinking a failing run before it is reported: the same seed under tighter limits draws a
//! smaller plan (the stack is drawn first, so the rest of the draw is unchanged by narrowing
//! the stack). Tried in order, each kept only if the run still fails:
//!
//! 1. fewer members: the same engine at its smallest geometries in the catalogue;
//! 2. fewer rounds: 1, 2, ... up to the failing plan's count;
//! 3. fewer commands per round: halved while the run fails.
//!
//! Each step runs the whole (shortened) plan, so a shrink costs a few dozen runs at most.

use crate::plan::{draw, Limits};
use crate::run_seed;
use crate::stack::catalogue;

/// Whether seed `seed` still fails under `limits`; the failure's message when it does.
fn fails(seed: u64, limits: &Limits) -> Option<String> {
    match run_seed(seed, limits) {
        Ok((_, Err(message))) => Some(message),
        _ => None,
    }
}

/// Shrinks the failing run `seed` (drawn under `limits`, which name its exact stack); returns
/// the smallest limits found that still fail, and that failure's message.
pub fn shrink(seed: u64, limits: &Limits, message: String) -> (Limits, String) {
    let mut best = (limits.clone(), message);
    let Ok(plan) = draw(seed, limits) else { return best };
    // 1. Fewer members: same engine family, smaller stacks first.
    let family = plan.stack.name.split(':').next().unwrap_or_default().to_string();
    let mut smaller: Vec<_> = catalogue()
        .into_iter()
        .filter(|s| {
            s.name.split(':').next() == Some(family.as_str()) && s.members() < plan.stack.members()
        })
        .collect();
    smaller.sort_by_key(|s| s.members());
    for s in smaller {
        let l = Limits { stack: Some(s.name.clone()), ..best.0.clone() };
        if let Some(m) = fails(seed, &l) {
            best = (l, m);
            break;
        }
    }
    // 2. Fewer rounds.
    let rounds = draw(seed, &best.0).map(|p| p.rounds.len()).unwrap_or(1);
    for r in 1..rounds {
        let l = Limits { rounds: Some(r), ..best.0.clone() };
        if let Some(m) = fails(seed, &l) {
            best = (l, m);
            break;
        }
    }
    // 3. Fewer commands per round.
    let mut ops =
        draw(seed, &best.0).map(|p| p.rounds.iter().map(|r| r.ops).max().unwrap_or(1)).unwrap_or(1);
    while ops > 1 {
        ops /= 2;
        let l = Limits { ops: Some(ops), ..best.0.clone() };
        match fails(seed, &l) {
            Some(m) => best = (l, m),
            None => break,
        }
    }
    best
}
