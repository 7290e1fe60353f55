//! Direction: does ours point the same way as the paper? A paper's number usually carries a
//! qualitative assertion beside its magnitude — "2.4× the throughput" says A beats B, "reduces
//! latency to 24.2%" says A is below B, "almost the same as the ideal" says about 1, "the
//! highest of all workloads" orders runs. A reproduction can miss the magnitude by a wide
//! margin for reasons of scale and still confirm the assertion, or come close in magnitude and
//! contradict it; the comparison tables report both.

use super::results::{fmt_metric, Metric, Results, RunKey};

/// What the paper asserts qualitatively about a number it states.
pub enum Direction<K> {
    /// No assertion: an absolute number stated for itself.
    None,
    /// Ours is above the bound (a ratio claim "A beats B" is `Above(1.0)`).
    Above(f64),
    /// Ours is below the bound (a ratio claim "A reduces B's latency" is `Below(1.0)`).
    Below(f64),
    /// Ours is within `band` (a fraction) of `target` ("almost the same as the ideal").
    Near { target: f64, band: f64 },
    /// The claim's run is the highest of these runs on `metric` ("the highest throughput of
    /// all workloads"); each run is named by its label, and `of` names what the runs vary
    /// ("traces", "thread counts").
    Highest { run: (String, K), others: Vec<(String, K)>, metric: Metric, of: &'static str },
}

/// How ours compares with the paper's assertion.
#[derive(Debug, PartialEq)]
pub enum Verdict<K> {
    /// The paper asserts nothing qualitative.
    Unstated,
    /// It does, but ours could not be computed in this run.
    Unknown,
    Same,
    /// Ours points the other way: `ours` says how, and `explain` names runs beyond the
    /// claim's own whose result files explain it (the run that ranks first instead), each with
    /// its label.
    Opposite {
        ours: String,
        explain: Vec<(String, K)>,
    },
}

impl<K> Direction<K> {
    /// Whether the paper states a direction.
    pub fn stated(&self) -> bool {
        !matches!(self, Direction::None)
    }
    /// What the paper asserts, as a cell shows it: ">1", "<1", "≈1 ±10%", "highest of 6".
    pub fn assertion(&self) -> String {
        match self {
            Direction::None => String::new(),
            Direction::Above(b) => format!(">{b}"),
            Direction::Below(b) => format!("<{b}"),
            Direction::Near { target, band } => format!("≈{target} ±{:.0}%", band * 100.0),
            Direction::Highest { others, of, .. } => {
                format!("highest of {} {of}", others.len() + 1)
            }
        }
    }
    /// Whether a value satisfies an assertion about one number (always true for an ordering,
    /// which is about several runs).
    pub fn holds(&self, v: f64) -> bool {
        match self {
            Direction::None | Direction::Highest { .. } => true,
            Direction::Above(b) => v > *b,
            Direction::Below(b) => v < *b,
            Direction::Near { target, band } => (v / target - 1.0).abs() <= *band,
        }
    }
}

impl<K: RunKey> Direction<K> {
    /// Judges ours (`None` where it could not be computed) against the assertion.
    pub fn judge(&self, ours: Option<f64>, r: &Results<K>) -> Verdict<K> {
        let v = match (self, ours) {
            (Direction::None, _) => return Verdict::Unstated,
            (Direction::Highest { run, others, metric, .. }, _) => {
                return judge_highest(run, others, *metric, r)
            }
            (_, None) => return Verdict::Unknown,
            (_, Some(v)) => v,
        };
        if self.holds(v) {
            return Verdict::Same;
        }
        let side = |b: f64| {
            if v < b {
                format!("<{b}")
            } else if v > b {
                format!(">{b}")
            } else {
                format!("={b}")
            }
        };
        let ours = match self {
            Direction::Above(b) | Direction::Below(b) => side(*b),
            _ => format!("{v:.2}"),
        };
        Verdict::Opposite { ours, explain: Vec::new() }
    }
}

/// "The highest of these runs": the claim's run must be strictly above every other.
fn judge_highest<K: RunKey>(
    run: &(String, K),
    others: &[(String, K)],
    metric: Metric,
    r: &Results<K>,
) -> Verdict<K> {
    let Some(mine) = r.get(&run.1, metric) else { return Verdict::Unknown };
    let mut values = Vec::new();
    for (label, key) in others {
        let Some(v) = r.get(key, metric) else { return Verdict::Unknown };
        values.push((label, key, v));
    }
    let above = values.iter().filter(|(_, _, v)| *v > mine).count();
    let Some((top_label, top_key, top)) =
        values.iter().max_by(|a, b| a.2.total_cmp(&b.2)).filter(|(_, _, v)| *v >= mine)
    else {
        return Verdict::Same;
    };
    let ours = if above == 0 {
        format!("tied with {top_label}")
    } else {
        format!(
            "{}: {top_label} highest ({} against {})",
            ordinal(above + 1),
            fmt_metric(*top, metric),
            fmt_metric(mine, metric)
        )
    };
    Verdict::Opposite { ours, explain: vec![(top_label.to_string(), (*top_key).clone())] }
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

impl<K> Verdict<K> {
    /// Whether ours points the other way.
    pub fn is_opposite(&self) -> bool {
        matches!(self, Verdict::Opposite { .. })
    }
    /// The direction cell: `same (>1)`, `**opposite** (paper >1, ours <1)`, "—" where the
    /// paper states none, `— (paper >1)` where ours could not be computed.
    pub fn cell(&self, assertion: &str) -> String {
        match self {
            Verdict::Unstated => "—".into(),
            Verdict::Unknown => format!("— (paper {assertion})"),
            Verdict::Same => format!("same ({assertion})"),
            Verdict::Opposite { ours, .. } => {
                format!("**opposite** (paper {assertion}, ours {ours})")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assertions_and_one_number_verdicts() {
        let above: Direction<u8> = Direction::Above(1.0);
        assert_eq!(above.assertion(), ">1");
        assert!(above.holds(2.4) && !above.holds(1.0) && !above.holds(0.7));
        let near: Direction<u8> = Direction::Near { target: 1.0, band: 0.1 };
        assert_eq!(near.assertion(), "≈1 ±10%");
        assert!(near.holds(0.93) && !near.holds(0.62));
        assert_eq!(Direction::<u8>::Below(0.9).assertion(), "<0.9");
        assert_eq!(Verdict::<u8>::Same.cell(">1"), "same (>1)");
        let opp = Verdict::<u8>::Opposite { ours: "<1".into(), explain: vec![] };
        assert_eq!(opp.cell(">1"), "**opposite** (paper >1, ours <1)");
        assert_eq!(Verdict::<u8>::Unstated.cell(""), "—");
        assert_eq!(ordinal(2), "2nd");
        assert_eq!(ordinal(11), "11th");
    }
}
