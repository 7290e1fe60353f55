//! Random offset distributions of synthetic jobs, with fio's names and meanings
//! (`random_distribution`): `uniform`, `zipf:θ`, `pareto:h`, and `zoned:a/r:a/r...` (a% of
//! accesses to the next r% of the range; hot/cold is `zoned:90/10:10/90`). CSAL §6.2 writes
//! with Zipf 0.8 and 1.2, which is why skew matters here.
//!
//! Zipf follows Gray et al., "Quickly generating billion-record synthetic databases"
//! (SIGMOD 1994), the method fio and YCSB use; Pareto follows fio's `pareto_next`. Both draw a
//! rank (0 = hottest) and scatter ranks over the range with a fixed permutation, as fio hashes
//! them, so the hot blocks are not all at the start of the device.

use std::fmt;
use std::str::FromStr;

use rand_core::Rng;
use serde::{Deserialize, Serialize};

/// A distribution as configured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Distribution {
    #[default]
    Uniform,
    Zipf(f64),
    Pareto(f64),
    /// (access percent, range percent) per zone, in order from the start of the range.
    Zoned(Vec<(f64, f64)>),
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distribution::Uniform => write!(f, "uniform"),
            Distribution::Zipf(t) => write!(f, "zipf:{t}"),
            Distribution::Pareto(h) => write!(f, "pareto:{h}"),
            Distribution::Zoned(z) => {
                write!(f, "zoned")?;
                for (a, r) in z {
                    write!(f, ":{a}/{r}")?;
                }
                Ok(())
            }
        }
    }
}

impl From<Distribution> for String {
    fn from(d: Distribution) -> String {
        d.to_string()
    }
}

impl TryFrom<String> for Distribution {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl FromStr for Distribution {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let num = |v: &str, what: &str| -> Result<f64, String> {
            v.trim().parse::<f64>().map_err(|_| format!("{what} `{v}` in \"{s}\" is not a number"))
        };
        let (name, arg) = s.split_once(':').unwrap_or((s, ""));
        match name {
            "uniform" | "random" if arg.is_empty() => Ok(Distribution::Uniform),
            "zipf" => {
                let t = num(arg, "zipf θ")?;
                if !(t > 0.0 && t.is_finite()) || t == 1.0 {
                    return Err(format!("zipf:{arg}: θ must be positive and not 1 (fio's rule)"));
                }
                Ok(Distribution::Zipf(t))
            }
            "pareto" => {
                let h = num(arg, "pareto h")?;
                if !(h > 0.0 && h < 1.0) {
                    return Err(format!("pareto:{arg}: h must be between 0 and 1"));
                }
                Ok(Distribution::Pareto(h))
            }
            "zoned" => {
                let mut zones = Vec::new();
                for part in arg.split(':') {
                    let (a, r) = part.split_once('/').ok_or_else(|| {
                        format!("zoned zone `{part}` in \"{s}\": expected access%/range%")
                    })?;
                    let (a, r) = (num(a, "access percent")?, num(r, "range percent")?);
                    if !((0.0..=100.0).contains(&a) && r > 0.0 && r <= 100.0) {
                        return Err(format!("zoned zone `{part}` in \"{s}\": percentages 0-100"));
                    }
                    zones.push((a, r));
                }
                let (ta, tr): (f64, f64) =
                    zones.iter().fold((0.0, 0.0), |(x, y), (a, r)| (x + a, y + r));
                if (ta - 100.0).abs() > 1e-6 || (tr - 100.0).abs() > 1e-6 {
                    return Err(format!(
                        "\"{s}\": zone accesses sum to {ta}% and ranges to {tr}%; both must be 100"
                    ));
                }
                Ok(Distribution::Zoned(zones))
            }
            _ => Err(format!(
                "unknown random distribution \"{s}\"; expected uniform, zipf:θ, pareto:h or \
                 zoned:a/r:a/r..."
            )),
        }
    }
}

/// Draws slot numbers in `0..n` from a [`Distribution`].
pub struct Sampler {
    n: u64,
    kind: Kind,
    perm: Permutation,
}

enum Kind {
    Uniform,
    Zipf {
        zetan: f64,
        alpha: f64,
        eta: f64,
        half_pow_theta: f64,
    },
    Pareto {
        pow: f64,
    },
    /// Cumulative access fraction and the zone's [start, end) slot range.
    Zoned(Vec<(f64, u64, u64)>),
}

fn unit(rng: &mut impl Rng) -> f64 {
    // 53 random bits: uniform in [0, 1).
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

impl Sampler {
    /// A sampler over `n` slots (at least 1). Zipf precomputes ζ(n), O(n) once per job.
    pub fn new(d: &Distribution, n: u64, seed: u64) -> Sampler {
        let n = n.max(1);
        let kind = match d {
            Distribution::Uniform => Kind::Uniform,
            Distribution::Zipf(theta) => {
                let zeta = |k: u64| (1..=k).map(|i| 1.0 / (i as f64).powf(*theta)).sum::<f64>();
                let zetan = zeta(n);
                let zeta2 = zeta(2.min(n));
                let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
                Kind::Zipf {
                    zetan,
                    alpha: 1.0 / (1.0 - theta),
                    eta,
                    half_pow_theta: 0.5f64.powf(*theta),
                }
            }
            Distribution::Pareto(h) => Kind::Pareto { pow: h.ln() / (1.0 - h).ln() },
            Distribution::Zoned(zones) => {
                // Zone boundaries at the cumulative range percentages; each zone at least one
                // slot, the last ending at `n`.
                let mut out = Vec::new();
                let (mut acc, mut cum_r, mut start) = (0.0, 0.0, 0u64);
                for (i, &(a, r)) in zones.iter().enumerate() {
                    acc += a / 100.0;
                    cum_r += r;
                    let end = if i + 1 == zones.len() {
                        n
                    } else {
                        ((cum_r / 100.0 * n as f64).round() as u64).clamp(start + 1, n)
                    };
                    out.push((acc, start.min(n - 1), end.max(start.min(n - 1) + 1)));
                    start = end;
                }
                Kind::Zoned(out)
            }
        };
        Sampler { n, kind, perm: Permutation::new(n, seed) }
    }

    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        match &self.kind {
            Kind::Uniform => rng.next_u64() % self.n,
            Kind::Zipf { zetan, alpha, eta, half_pow_theta } => {
                let u = unit(rng);
                let uz = u * zetan;
                let rank = if uz < 1.0 {
                    0
                } else if uz < 1.0 + half_pow_theta {
                    1
                } else {
                    let v = (self.n as f64 * (eta * u - eta + 1.0).powf(*alpha)) as u64;
                    v.min(self.n - 1)
                };
                self.perm.apply(rank)
            }
            Kind::Pareto { pow } => {
                let rank = ((self.n - 1) as f64 * unit(rng).powf(*pow)) as u64;
                self.perm.apply(rank.min(self.n - 1))
            }
            Kind::Zoned(zones) => {
                let u = unit(rng);
                let &(_, start, end) =
                    zones.iter().find(|z| u < z.0).unwrap_or_else(|| zones.last().expect("zones"));
                start + rng.next_u64() % (end - start).max(1)
            }
        }
    }
}

/// A fixed bijection of `0..n` (an affine map modulo the next power of two, walked until it
/// lands inside the range), so ranks spread over the device without two ranks sharing a slot.
struct Permutation {
    n: u64,
    mask: u64,
    mul: u64,
    add: u64,
}

impl Permutation {
    fn new(n: u64, seed: u64) -> Permutation {
        let mask = n.next_power_of_two().wrapping_sub(1).max(1);
        Permutation {
            n,
            mask,
            mul: (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1) & mask | 1,
            add: seed.rotate_left(17) & mask,
        }
    }

    fn apply(&self, mut x: u64) -> u64 {
        loop {
            x = (x.wrapping_mul(self.mul).wrapping_add(self.add)) & self.mask;
            if x < self.n {
                return x;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    fn counts(d: &str, n: u64, draws: usize) -> Vec<u64> {
        let s = Sampler::new(&d.parse().unwrap(), n, 7);
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let mut c = vec![0u64; n as usize];
        for _ in 0..draws {
            c[s.sample(&mut rng) as usize] += 1;
        }
        c
    }

    /// Share of draws taken by the hottest `k` slots.
    fn top_share(c: &[u64], k: usize) -> f64 {
        let mut v = c.to_vec();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v[..k].iter().sum::<u64>() as f64 / c.iter().sum::<u64>() as f64
    }

    #[test]
    fn parses_fio_names_and_rejects_bad_ones() {
        assert_eq!("zipf:1.2".parse::<Distribution>().unwrap(), Distribution::Zipf(1.2));
        assert_eq!(
            "zoned:90/10:10/90".parse::<Distribution>().unwrap(),
            Distribution::Zoned(vec![(90.0, 10.0), (10.0, 90.0)])
        );
        for bad in ["zipf:1", "zipf:x", "pareto:1.5", "zoned:90/10", "zoned:50", "gauss:3"] {
            assert!(bad.parse::<Distribution>().is_err(), "{bad}");
        }
        let d: Distribution = "pareto:0.9".parse().unwrap();
        assert_eq!(d.to_string().parse::<Distribution>().unwrap(), d);
    }

    #[test]
    fn zipf_matches_its_analytic_head() {
        // With θ = 1.2 over 1,000 slots the hottest slot has probability 1/ζ(1000) ≈ 0.185 and
        // the ten hottest 0.524 (sums of i^-1.2); Gray's method is approximate beyond rank 2.
        let c = counts("zipf:1.2", 1000, 200_000);
        let z: f64 = (1..=1000).map(|i| (i as f64).powf(-1.2)).sum();
        let top1 = 1.0 / z;
        assert!((top_share(&c, 1) - top1).abs() < 0.01, "{} vs {top1}", top_share(&c, 1));
        assert!(top_share(&c, 10) > 0.4);
        // Uniform spreads evenly; a permutation keeps every slot reachable.
        let u = counts("uniform", 1000, 200_000);
        assert!(top_share(&u, 10) < 0.02);
        assert!(counts("zipf:0.8", 1000, 200_000).iter().all(|&x| x > 0));
    }

    #[test]
    fn zoned_sends_accesses_to_their_zones() {
        let c = counts("zoned:90/10:10/90", 1000, 100_000);
        let hot: u64 = c[..100].iter().sum();
        let share = hot as f64 / 100_000.0;
        assert!((share - 0.9).abs() < 0.01, "{share}");
        let p = counts("pareto:0.9", 1000, 100_000);
        assert!(top_share(&p, 100) > 0.5);
    }
}
