//! A claim: a number the paper's text states, where it says it, how ours is computed from the
//! result files, and what the paper asserts qualitatively about it (its direction).

use super::direction::Direction;
use super::results::{Metric, Results, RunKey};

/// How a paper number is computed from ours.
pub enum Eval<K> {
    /// A metric of one run.
    Abs(K, Metric),
    /// A metric of one run divided by the same metric of another.
    Ratio(K, K, Metric),
    /// The mean of several ratios (the papers' "on average").
    MeanRatio(Vec<(K, K)>, Metric),
    /// A run's metric as a fraction of `factor` times a reference run's (ScalaAFA's ideal:
    /// (k+m)/(m+1) times one SSD alone). The reference is a yardstick, not one of the systems
    /// compared, so the comparison's diagnostics leave it out.
    Fraction {
        run: K,
        reference: K,
        factor: f64,
        metric: Metric,
    },
    /// The smallest (largest) of several ratios: a paper's "by 8-15.1%" range across
    /// workloads compares its ends with ours.
    MinRatio(Vec<(K, K)>, Metric),
    MaxRatio(Vec<(K, K)>, Metric),
    /// A computation the variants above cannot express (a difference of two improvements),
    /// over the runs `keys` names; `f` returns `None` where a run is missing.
    Custom {
        keys: Vec<K>,
        f: CustomEval<K>,
    },
}

/// How [`Eval::Custom`] computes ours.
pub type CustomEval<K> = Box<dyn Fn(&Results<K>) -> Option<f64>>;

/// The unit a claim's numbers are shown in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Ratio,
    Gbps,
}

/// A number the paper states, and how ours is computed.
pub struct Claim<K> {
    /// What is compared, as the table's first column names it.
    pub what: String,
    /// The paper's number.
    pub paper: f64,
    pub unit: Unit,
    /// Where the paper says it (section and quotation).
    pub cite: &'static str,
    pub eval: Eval<K>,
    /// What the paper asserts qualitatively: A beats B, a reduction, almost the ideal, the
    /// highest of several runs, or nothing (an absolute number).
    pub direction: Direction<K>,
    /// A note that qualifies the comparison (shown in the why column whatever the gap).
    pub note: Option<&'static str>,
}

impl<K: RunKey> Claim<K> {
    /// A claim with no direction and no note; see [`Claim::asserts`] and [`Claim::note`].
    pub fn new(
        what: impl Into<String>,
        paper: f64,
        unit: Unit,
        cite: &'static str,
        eval: Eval<K>,
    ) -> Self {
        Claim { what: what.into(), paper, unit, cite, eval, direction: Direction::None, note: None }
    }
    /// A claim whose text asserts a direction and states no number ("PC-LRU has more partial
    /// pages in the buffer compared to Baseline"): its paper number is `NaN`, shown as "—", and
    /// the summary counts it among the directions, not among the numbers.
    pub fn direction_only(
        what: impl Into<String>,
        cite: &'static str,
        eval: Eval<K>,
        direction: Direction<K>,
    ) -> Self {
        Claim {
            what: what.into(),
            paper: f64::NAN,
            unit: Unit::Ratio,
            cite,
            eval,
            direction,
            note: None,
        }
    }
    /// Whether the paper states a number for the claim (not [`Claim::direction_only`]).
    pub fn has_number(&self) -> bool {
        !self.paper.is_nan()
    }
    /// The same claim, asserting `direction`.
    pub fn asserts(mut self, direction: Direction<K>) -> Self {
        self.direction = direction;
        self
    }
    /// The same claim, with a note for the why column.
    pub fn note(mut self, note: &'static str) -> Self {
        self.note = Some(note);
        self
    }
    /// The runs the claim compares (not a reference run it is measured against).
    pub fn keys(&self) -> Vec<&K> {
        match &self.eval {
            Eval::Abs(k, _) | Eval::Fraction { run: k, .. } => vec![k],
            Eval::Ratio(a, b, _) => vec![a, b],
            Eval::MeanRatio(v, _) | Eval::MinRatio(v, _) | Eval::MaxRatio(v, _) => {
                v.iter().flat_map(|(a, b)| [a, b]).collect()
            }
            Eval::Custom { keys, .. } => keys.iter().collect(),
        }
    }
    /// Our number, if every run it needs succeeded and no denominator is zero.
    pub fn ours(&self, r: &Results<K>) -> Option<f64> {
        match &self.eval {
            Eval::Abs(k, m) => r.get(k, *m),
            Eval::Ratio(a, b, m) => ratio(r.get(a, *m)?, r.get(b, *m)?),
            Eval::MeanRatio(v, m) => {
                let ratios: Option<Vec<f64>> =
                    v.iter().map(|(a, b)| ratio(r.get(a, *m)?, r.get(b, *m)?)).collect();
                let ratios = ratios?;
                (!ratios.is_empty()).then(|| ratios.iter().sum::<f64>() / ratios.len() as f64)
            }
            Eval::Fraction { run, reference, factor, metric } => {
                ratio(r.get(run, *metric)?, r.get(reference, *metric)? * factor)
            }
            Eval::MinRatio(v, m) | Eval::MaxRatio(v, m) => {
                let ratios: Option<Vec<f64>> =
                    v.iter().map(|(a, b)| ratio(r.get(a, *m)?, r.get(b, *m)?)).collect();
                let ratios = ratios?.into_iter();
                match &self.eval {
                    Eval::MinRatio(..) => ratios.reduce(f64::min),
                    _ => ratios.reduce(f64::max),
                }
            }
            Eval::Custom { f, .. } => f(r),
        }
    }
}

/// A paper's stated range of reductions "by best-worst%" across its workloads, as two ratio
/// claims of ours over the baseline's (1 - x/100, so a gain is below 1): its best end against
/// our best workload (the smallest ratio of `pairs`) and its worst end against our worst.
pub fn reduction_range<K: RunKey>(
    what: &str,
    (best, worst): (f64, f64),
    cite: &'static str,
    pairs: Vec<(K, K)>,
    metric: Metric,
) -> [Claim<K>; 2] {
    [
        Claim::new(
            format!("{what}: best trace"),
            1.0 - best / 100.0,
            Unit::Ratio,
            cite,
            Eval::MinRatio(pairs.clone(), metric),
        )
        .asserts(Direction::Below(1.0)),
        Claim::new(
            format!("{what}: worst trace"),
            1.0 - worst / 100.0,
            Unit::Ratio,
            cite,
            Eval::MaxRatio(pairs, metric),
        )
        .asserts(Direction::Below(1.0)),
    ]
}

/// Checks a paper module's claims (for its unit tests): there are at least `min`, the paper's
/// own number satisfies the direction each claim asserts, and every ratio asserts one.
#[cfg(test)]
pub fn assert_claims_consistent<K: RunKey>(all: &[Claim<K>], min: usize) {
    assert!(all.len() >= min, "{} claims", all.len());
    for c in all {
        if c.has_number() {
            assert!(c.direction.holds(c.paper), "{}: {}", c.what, c.paper);
        }
        if c.unit == Unit::Ratio {
            assert!(c.direction.stated(), "{} states no direction", c.what);
        }
    }
}

/// `a / b`, or `None` when `b` is zero.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (b != 0.0).then(|| a / b)
}

/// A claim's number as its table shows it.
pub fn fmt_unit(v: f64, u: Unit) -> String {
    match u {
        Unit::Ratio => format!("{v:.3}"),
        Unit::Gbps => format!("{v:.2} GB/s"),
    }
}
