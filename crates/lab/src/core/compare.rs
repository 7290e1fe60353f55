//! The comparison tables: per claim the paper's number, ours, their ratio, whether ours points
//! the same way (direction), and *why* wherever they disagree — in magnitude by more than 25%,
//! or in direction at any magnitude — named from the paper module's models and the result
//! files' diagnostics.

use std::fmt::Write as _;

use super::claim::{fmt_unit, Claim};
use super::diagnose::{diagnose, diagnose_keys};
use super::direction::Verdict;
use super::results::{Results, RunKey};

/// Beyond this relative gap a comparison's magnitude differs from the paper's.
pub const WITHIN: f64 = 0.25;

/// The table's header and rule.
pub const HEADER: &str = "| comparison | paper | ours | ours / paper | direction | why |\n\
                          |---|---|---|---|---|---|";

/// Which of our models set the numbers a claim compares (cost profiles, SSD timing, scale,
/// synthetic traces): the paper module's part of the why column.
pub type Reasons<'a, K> = &'a dyn Fn(&Claim<K>, &Results<K>) -> Vec<String>;

/// Writes the comparison table of `claims`.
pub fn claim_table<K: RunKey>(
    out: &mut String,
    claims: &[Claim<K>],
    r: &Results<K>,
    reasons: Reasons<K>,
) {
    let _ = writeln!(out, "{HEADER}");
    for c in claims {
        let ours = c.ours(r);
        let failed = c.keys().iter().any(|k| r.failed(k));
        let ours_text = match ours {
            Some(v) => fmt_unit(v, c.unit),
            None if failed => "failed".into(),
            None => "—".into(),
        };
        // A direction-only claim has no number to compare in magnitude.
        let rel = ours.filter(|_| c.has_number()).map(|v| v / c.paper);
        let verdict = c.direction.judge(ours, r);
        let mut why = Vec::new();
        if let Some(n) = c.note {
            why.push(n.to_string());
        }
        match (ours, rel) {
            (Some(_), None) if verdict.is_opposite() => {
                why.push("**opposite direction**".into());
                why.extend(reasons(c, r));
                why.extend(diagnose_keys(&c.keys(), r));
            }
            (Some(_), None) => {}
            (_, Some(x)) => {
                let gap = (x - 1.0).abs() > WITHIN;
                if gap {
                    why.push(format!("**differs by {:+.0}%**", (x - 1.0) * 100.0));
                }
                if verdict.is_opposite() {
                    why.push("**opposite direction**".into());
                }
                if gap || verdict.is_opposite() {
                    why.extend(reasons(c, r));
                    why.extend(diagnose_keys(&c.keys(), r));
                    if let Verdict::Opposite { explain, .. } = &verdict {
                        for (label, key) in explain {
                            if let Some(run) = r.run(key) {
                                why.push(format!("{label}: {}", diagnose(run)));
                            }
                        }
                    }
                }
            }
            (None, _) if failed => why.push("a run failed (see *Runs that failed*)".into()),
            (None, _) if c.keys().iter().all(|k| r.run(k).is_some()) => {
                why.push("undefined: the denominator is zero".into())
            }
            (None, _) => why.push(format!("not run with `{}`", r.mode.name())),
        }
        let _ = writeln!(
            out,
            "| {} <br><sub>{}</sub> | {} | {} | {} | {} | {} |",
            c.what,
            c.cite,
            if c.has_number() { fmt_unit(c.paper, c.unit) } else { "— (direction only)".into() },
            ours_text,
            rel.map_or("—".into(), |x| format!("{x:.2}")),
            verdict.cell(&c.direction.assertion()),
            why.join("; ")
        );
    }
    out.push('\n');
}

/// The document's summary line over every claim: how many were computed, how many of those
/// that state a direction point the paper's way, how many are within 25%.
pub fn summary<K: RunKey>(claims: &[&Claim<K>], r: &Results<K>) -> String {
    let mut computed = 0;
    let mut within = 0;
    let numbers = claims.iter().filter(|c| c.has_number()).count();
    let (mut directed, mut same, mut unknown) = (0, 0, 0);
    for c in claims {
        let ours = c.ours(r);
        if let Some(v) = ours.filter(|_| c.has_number()) {
            computed += 1;
            if (v / c.paper - 1.0).abs() <= WITHIN {
                within += 1;
            }
        }
        match c.direction.judge(ours, r) {
            Verdict::Unstated => {}
            Verdict::Unknown => unknown += 1,
            Verdict::Same => {
                directed += 1;
                same += 1;
            }
            Verdict::Opposite { .. } => directed += 1,
        }
    }
    let unknown = if unknown > 0 {
        format!("; {unknown} more state one but could not be computed")
    } else {
        String::new()
    };
    format!(
        "**Summary.** {} of the paper's stated numbers{} are compared below and {computed} \
         could be computed in this run: {same} of the {directed} that state a direction point the \
         same way as the paper ({} opposite{unknown}), and {within} are within 25% of the \
         paper's ({} beyond). Every opposite direction and every gap beyond 25% has its \
         *why*.\n",
        numbers,
        match claims.len() - numbers {
            0 => String::new(),
            n => format!(" (and {n} statements of a direction with no number)"),
        },
        directed - same,
        computed - within
    )
}
