//! The thesis' analytic models of WOM-v codes (jaffer-thesis-2023.txt §3.4), computed from a
//! code's table rather than typed in, so a user's code gets them too.
//!
//! - Figure 3.3: physical space per unit of user data (n/k) against the logical writes
//!   possible before an erase (GEN_MAX, and beyond it with an ECC budget).
//! - Figure 3.4: the Markov model of one cell. Each write cycle writes an independent,
//!   uniformly distributed data value (§3.4.2: "each data bit sequence that is written to be an
//!   Independent and Identically Distributed (IID) random variable"); the cell takes the
//!   same-generation transition; beyond GEN_MAX a cell that cannot take its value, or sits at
//!   V_MAX, is EINVAL and stays so. The model gives the probability that a cell is EINVAL after
//!   each write cycle.
//! - Figure 3.5: the number of EINVAL cells in a page as a binomial distribution over its
//!   cells (cells independent), and from it the write cycles a page survives within an ECC
//!   budget.
//! - §3.7.7, §3.7.10 and §3.7.11: the erasure factor (erases per erase unit's worth of user
//!   pages written) under GC_OPT with `t` write cycles per erase, for uniform page
//!   invalidation (the Lambert-W closed form) and for Rosenblum's hot/cold model (solved
//!   numerically).

use super::code::WomCode;

/// P(a cell is EINVAL after write cycle w) for w = 1..=cycles (index w - 1).
pub fn einval_probability(code: &WomCode, cycles: u32) -> Vec<f64> {
    let levels = code.levels();
    let values = code.data_values();
    let v_max = code.v_max();
    let mut dist = vec![0.0f64; levels];
    dist[0] = 1.0;
    let mut einval = 0.0f64;
    let mut out = Vec::with_capacity(cycles as usize);
    for w in 1..=cycles {
        let beyond = w > code.gen_max();
        let mut next = vec![0.0f64; levels];
        for (level, &p) in dist.iter().enumerate() {
            if p == 0.0 {
                continue;
            }
            if beyond && level == v_max as usize {
                einval += p;
                continue;
            }
            for d in 0..values {
                match code.encode(level as u8, d, beyond) {
                    Some(m) => next[m as usize] += p / values as f64,
                    None => einval += p / values as f64,
                }
            }
        }
        dist = next;
        out.push(einval);
    }
    out
}

/// P(X > limit) for X ~ Binomial(n, p), summed in log space so large pages do not underflow.
pub fn binomial_tail_above(n: u32, p: f64, limit: u32) -> f64 {
    if p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return if limit < n { 1.0 } else { 0.0 };
    }
    if limit >= n {
        return 0.0;
    }
    // log pmf(i) from log pmf(0) = n ln(1 - p), by the ratio pmf(i+1)/pmf(i).
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    let mut log_pmf = n as f64 * lq;
    let mut terms = Vec::with_capacity((n - limit) as usize);
    for i in 0..n {
        if i > limit {
            terms.push(log_pmf);
        }
        log_pmf += ((n - i) as f64).ln() - ((i + 1) as f64).ln() + lp - lq;
    }
    terms.push(log_pmf); // i = n
    let max = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return 0.0;
    }
    (max.exp() * terms.iter().map(|t| (t - max).exp()).sum::<f64>()).min(1.0)
}

/// The write cycles a page of `cells` cells takes before the chance that its EINVAL cells
/// exceed `ecc_fraction` of them passes `risk` (at least GEN_MAX, which needs no ECC).
pub fn cycles_within_ecc(code: &WomCode, cells: u32, ecc_fraction: f64, risk: f64) -> u32 {
    let limit = (ecc_fraction * cells as f64).floor() as u32;
    let probs = einval_probability(code, 64 * code.gen_max().max(1));
    let mut cycles = code.gen_max();
    for (i, &p) in probs.iter().enumerate() {
        let w = i as u32 + 1;
        if w <= code.gen_max() {
            continue;
        }
        if binomial_tail_above(cells, p, limit) > risk {
            break;
        }
        cycles = w;
    }
    cycles
}

/// One point of Figure 3.3: physical space per unit of user data and logical writes before an
/// erase.
#[derive(Clone, Debug, PartialEq)]
pub struct SpacePoint {
    pub code: String,
    pub space_factor: f64,
    pub logical_writes: u32,
}

/// Figure 3.3's points for `codes`: GEN_MAX, and the cycles within an ECC budget.
pub fn space_points(
    codes: &[WomCode],
    cells: u32,
    ecc_fraction: f64,
    risk: f64,
) -> Vec<SpacePoint> {
    let mut points =
        vec![SpacePoint { code: "no WOM".into(), space_factor: 1.0, logical_writes: 1 }];
    for c in codes {
        points.push(SpacePoint {
            code: c.name().into(),
            space_factor: c.space_factor(),
            logical_writes: c.gen_max(),
        });
        if ecc_fraction > 0.0 {
            points.push(SpacePoint {
                code: format!("{} + ECC {:.1}%", c.name(), ecc_fraction * 100.0),
                space_factor: c.space_factor(),
                logical_writes: cycles_within_ecc(c, cells, ecc_fraction, risk),
            });
        }
    }
    points
}

/// Write amplification of LRW garbage collection under uniform page invalidation (§3.7.10,
/// eq. 3.5; for t = 1 it is also the greedy closed form of eq. 3.1): the rate at which erase
/// units move through the queues per erase unit of user data. `x` is the physical space over
/// the space the user's (coded) pages take; eq. 3.5 prints its argument as alpha, the inverse,
/// and docs/validation.md shows why x = T/U is the ratio its derivation uses.
pub fn lrw_amplification(x: f64) -> f64 {
    x / (x + lambert_w::lambert_w0(-x * (-x).exp()))
}

/// Rosenblum's hot/cold model under LRW (§3.7.11, eq. 3.10): a share `r` of invalidations hit
/// the hot pages, which are a share `f` of the user's pages; `x` as for
/// [`lrw_amplification`]. The equation's root above 1, by bisection (it has no closed form).
pub fn hot_cold_amplification(x: f64, r: f64, f: f64) -> f64 {
    let g = |a: f64| {
        let hot = r / ((x * r / (a * f)).exp() - 1.0);
        let cold = (1.0 - r) / ((x * (1.0 - r) / (a * (1.0 - f))).exp() - 1.0);
        1.0 + hot + cold - a
    };
    // g(1) > 0 and g(a) ~ 1 + a/x - a < 0 for large a when x > 1.
    let (mut lo, mut hi) = (1.0f64, 1e9f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if g(mid) > 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The erasure factor under GC_OPT with `t` write cycles per erase (§3.7.10-§3.7.11): of the
/// erase units leaving the t queues only the last queue's are erased, so A / t erases per
/// erase unit of user pages written.
pub fn erasure_factor(amplification: f64, t: u32) -> f64 {
    amplification / t as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_cold_with_no_skew_is_the_uniform_closed_form() {
        for x in [1.1, 1.25, 1.5, 2.0] {
            let uniform = lrw_amplification(x);
            let hc = hot_cold_amplification(x, 0.3, 0.3);
            assert!((uniform - hc).abs() < 1e-9 * uniform, "x {x}: {uniform} vs {hc}");
            // A = 1 / (1 - e^(-x/A)) holds for the closed form.
            assert!((uniform - 1.0 / (1.0 - (-x / uniform).exp())).abs() < 1e-9);
        }
        // Under LRW skew raises the amplification: LRW ignores temperature, so a victim still
        // holds many cold pages; the model says so at 90/10.
        assert!(hot_cold_amplification(1.25, 0.9, 0.1) > lrw_amplification(1.25));
        assert_eq!(erasure_factor(5.0, 5), 1.0);
    }

    #[test]
    fn no_cell_is_einval_within_gen_max() {
        for name in WomCode::BUILTIN {
            let c = WomCode::builtin(name).unwrap();
            let p = einval_probability(&c, c.gen_max() + 3);
            assert!(p[..c.gen_max() as usize].iter().all(|&x| x == 0.0), "{name}: {p:?}");
            assert!(p[c.gen_max() as usize] > 0.0, "{name}: {p:?}");
            assert!(p.windows(2).all(|w| w[0] <= w[1]), "{name}: EINVAL never heals: {p:?}");
        }
    }

    #[test]
    fn the_first_cycle_past_gen_max_worked_by_hand() {
        // WOM-v(3,4), cycle 3: after two uniform writes a cell sits at level l with some
        // probability; beyond GEN_MAX it is EINVAL if l = 15 (impossible: 15 is no code-word)
        // or if no level from l up to 14 holds the new value. Two writes from 0: the first
        // goes to d1 (0-7), the second to the lowest level >= d1 holding d2, which is d2 if
        // d2 >= d1, else d2 + 8. A third value d3 fits below 15 iff d3 >= l (l <= 7) or
        // d3 + 8 >= l and d3 + 8 <= 14, i.e. d3 in [l - 8, 6] (l >= 8).
        let mut p = 0.0;
        for d1 in 0..8u32 {
            for d2 in 0..8u32 {
                let l = if d2 >= d1 { d2 } else { d2 + 8 };
                for d3 in 0..8u32 {
                    let fits =
                        if l <= 7 { d3 >= l || d3 + 8 <= 14 } else { d3 + 8 >= l && d3 <= 6 };
                    if !fits {
                        p += 1.0 / 512.0;
                    }
                }
            }
        }
        let c = WomCode::builtin("wom-v(3,4)").unwrap();
        let model = einval_probability(&c, 3)[2];
        assert!((model - p).abs() < 1e-12, "model {model}, by hand {p}");
    }

    #[test]
    fn the_binomial_tail_matches_a_direct_sum_on_a_small_case() {
        // n = 10, p = 0.3, P(X > 3) = 1 - sum_{i<=3} C(10,i) 0.3^i 0.7^(10-i).
        let c = [1.0, 10.0, 45.0, 120.0];
        let below: f64 =
            (0..4).map(|i| c[i] * 0.3f64.powi(i as i32) * 0.7f64.powi(10 - i as i32)).sum();
        let tail = binomial_tail_above(10, 0.3, 3);
        assert!((tail - (1.0 - below)).abs() < 1e-12, "{tail} vs {}", 1.0 - below);
        // A 4096-cell page at p = 0.5 does not underflow.
        let t = binomial_tail_above(4096, 0.5, 2048);
        assert!(t > 0.4 && t < 0.5, "{t}");
    }
}
