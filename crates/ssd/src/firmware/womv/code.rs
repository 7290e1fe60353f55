//! WOM-v(k, n) codes (jaffer-thesis-2023.txt §3.3.1): which k-bit data value each of the 2^n
//! voltage levels of a cell stands for, and how a cell is reprogrammed without erase.
//!
//! A code is a decode table: level -> data value, or no value (a level that is not a
//! code-word). Everything else is derived from it, so a user's table (the thesis invites new
//! codes, §3.6.4 "Testbed for Future SSDs and Coding Schemes") behaves like the built-ins:
//!
//! - *same-generation transition*: a write of `d` raises the cell to the lowest level at or
//!   above its current one that decodes to `d` (no change if it already does);
//! - *generations*: consecutive windows of levels that each hold every data value, each
//!   starting at the previous one's last level (*code-word sharing*), which NR mode writes
//!   into by number;
//! - `GEN_MAX`: how many writes of adversarial data any cell takes from the erased level, the
//!   guarantee the thesis states for each code (2, 5 and 15 for (3,4), (2,4) and (1,4));
//! - `V_MAX`, the highest level, which marks a cell that cannot take a write once the write
//!   cycles exceed `GEN_MAX` (`EINVAL`, §3.3.1 "Reusing underutilized Cells").
//!
//! The built-in tables are reconstructed from the thesis' text, since Figure 3.2 itself is not
//! in our copy: the worked example of §3.3.1 (WOM-v(2,4): data 01, 01, 10, 00 go to levels
//! 0001, 0001, 0010, 0100, and without same-generation transitions to 0001, 0001, 0110, 1000),
//! the shared code-words it names (3, 6, 9, 12; code-word 0011 is data 11 in generations 1
//! and 2) and the generation counts all say that level `l` stands for `l mod 2^k`. WOM-v(3,4)
//! uses levels 0-14 (two generations of eight sharing level 7); level 15 is its V_MAX and no
//! code-word. docs/womv.md.

use serde::{Deserialize, Serialize};

/// A level that is no code-word.
const NO_DATA: u8 = u8::MAX;

/// A WOM-v code as data (a TOML table for user codes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WomCodeSpec {
    /// Shown in results and error messages.
    pub name: String,
    /// k: data bits per cell.
    pub data_bits: u8,
    /// n: bits a cell's level encodes (2^n levels: 4 for QLC).
    pub level_bits: u8,
    /// For each level from 0 (erased) up, the data value it stands for, or -1 for a level
    /// that is no code-word.
    pub decode: Vec<i16>,
}

/// A validated WOM-v code with its derived tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WomCode {
    name: String,
    data_bits: u8,
    level_bits: u8,
    /// level -> data value, or `NO_DATA`.
    decode: Vec<u8>,
    /// `next[level << data_bits | d]`: the lowest level at or above `level` that decodes to
    /// `d`, or `NO_DATA`.
    next: Vec<u8>,
    /// The same, never choosing V_MAX (write cycles beyond GEN_MAX, where V_MAX is EINVAL).
    next_below_vmax: Vec<u8>,
    /// Each generation's levels, first to last (consecutive generations share one level).
    generations: Vec<(u8, u8)>,
    gen_max: u32,
    /// Bit l set: a cell at level l is at risk beyond GEN_MAX (see [`WomCode::at_risk`]).
    risky_levels: u32,
}

impl WomCode {
    /// The three codes of the thesis' Figure 3.2 by name (`"wom-v(3,4)"`, `"wom-v(2,4)"`,
    /// `"wom-v(1,4)"`), reconstructed as the module documentation explains.
    pub fn builtin(name: &str) -> Option<WomCode> {
        let (k, used) = match name {
            "wom-v(3,4)" => (3u8, 15usize),
            "wom-v(2,4)" => (2, 16),
            "wom-v(1,4)" => (1, 16),
            _ => return None,
        };
        let decode =
            (0..16).map(|l| if l < used { (l % (1usize << k)) as i16 } else { -1 }).collect();
        let spec = WomCodeSpec { name: name.into(), data_bits: k, level_bits: 4, decode };
        Some(WomCode::new(&spec).expect("built-in codes are valid"))
    }

    /// The built-in names, for error messages and listings.
    pub const BUILTIN: [&'static str; 3] = ["wom-v(3,4)", "wom-v(2,4)", "wom-v(1,4)"];

    /// Checks a table and derives the code's tables. The error names the problem.
    pub fn new(spec: &WomCodeSpec) -> Result<WomCode, String> {
        let name = &spec.name;
        let (k, n) = (spec.data_bits, spec.level_bits);
        if !(1..=4).contains(&n) {
            return Err(format!("code {name:?}: level_bits = {n}: must be from 1 to 4"));
        }
        if k == 0 || k > n {
            return Err(format!("code {name:?}: data_bits = {k}: must be from 1 to level_bits"));
        }
        let levels = 1usize << n;
        if spec.decode.len() != levels {
            return Err(format!(
                "code {name:?}: decode has {} entries: needs one per level, {levels}",
                spec.decode.len()
            ));
        }
        let values = 1i16 << k;
        let mut decode = Vec::with_capacity(levels);
        for (l, &d) in spec.decode.iter().enumerate() {
            if d == -1 {
                decode.push(NO_DATA);
            } else if (0..values).contains(&d) {
                decode.push(d as u8);
            } else {
                return Err(format!(
                    "code {name:?}: decode[{l}] = {d}: must be -1 (no code-word) or a data \
                     value from 0 to {}",
                    values - 1
                ));
            }
        }
        if decode[0] == NO_DATA {
            return Err(format!(
                "code {name:?}: decode[0] = -1: the erased level must stand for a data value"
            ));
        }
        let next_of = |skip_vmax: bool| {
            let mut next = vec![NO_DATA; levels << k];
            for l in 0..levels {
                for d in 0..(1usize << k) {
                    next[l << k | d] = (l..levels)
                        .filter(|&m| !(skip_vmax && m == levels - 1))
                        .find(|&m| decode[m] as usize == d)
                        .map_or(NO_DATA, |m| m as u8);
                }
            }
            next
        };
        let next = next_of(false);
        let next_below_vmax = next_of(true);
        // Generations: from level 0, the shortest window holding every value; the next
        // starts at its last level.
        let all = (1u32 << (1 << k)) - 1;
        let window_end = |start: usize| {
            let mut seen = 0u32;
            decode.iter().enumerate().skip(start).find_map(|(end, &d)| {
                if d != NO_DATA {
                    seen |= 1 << d;
                }
                (seen == all).then_some(end)
            })
        };
        let mut generations = Vec::new();
        let mut start = 0usize;
        while let Some(end) = window_end(start) {
            generations.push((start as u8, end as u8));
            if end == start {
                break;
            }
            start = end;
        }
        if generations.is_empty() {
            return Err(format!(
                "code {name:?}: no generation: the levels never hold all {values} data values"
            ));
        }
        let mut code = WomCode {
            name: name.clone(),
            data_bits: k,
            level_bits: n,
            decode,
            next,
            next_below_vmax,
            generations,
            gen_max: 0,
            risky_levels: 0,
        };
        code.risky_levels = (0..levels)
            .filter(|&l| (0..code.data_values()).any(|d| code.encode(l as u8, d, true).is_none()))
            .fold(0u32, |m, l| m | 1 << l);
        code.gen_max = code.guaranteed_writes();
        if code.gen_max == 0 {
            return Err(format!(
                "code {name:?}: from the erased level some data value has no code-word, so \
                 not even one write is guaranteed"
            ));
        }
        Ok(code)
    }

    /// GEN_MAX: writes guaranteed from the erased level whatever the data. `f(l)`, the writes
    /// guaranteed from level `l`, is the least over the data values other than `l`'s own of
    /// `1 + f(next)` (0 where there is no next level); rewriting the value a cell holds costs
    /// nothing, so the adversary never picks it. Levels only rise, so one pass from the top
    /// down computes it.
    fn guaranteed_writes(&self) -> u32 {
        let levels = self.levels();
        let mut f = vec![0u32; levels];
        for l in (0..levels).rev() {
            f[l] = (0..self.data_values())
                .filter(|&d| d != self.decode[l])
                .map(|d| match self.next[(l << self.data_bits) | d as usize] {
                    NO_DATA => 0,
                    m => 1 + f[m as usize],
                })
                .min()
                .unwrap_or(0);
        }
        f[0]
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// k.
    pub fn data_bits(&self) -> u8 {
        self.data_bits
    }

    /// n.
    pub fn level_bits(&self) -> u8 {
        self.level_bits
    }

    pub fn levels(&self) -> usize {
        1 << self.level_bits
    }

    pub fn data_values(&self) -> u8 {
        1 << self.data_bits
    }

    /// The highest level: the cell must be erased after it, and beyond GEN_MAX write cycles it
    /// marks a cell that could not take its data (EINVAL).
    pub fn v_max(&self) -> u8 {
        (self.levels() - 1) as u8
    }

    /// Guaranteed write cycles between erases (the thesis' GEN_MAX).
    pub fn gen_max(&self) -> u32 {
        self.gen_max
    }

    /// The generations, each as its first and last level.
    pub fn generations(&self) -> &[(u8, u8)] {
        &self.generations
    }

    /// Physical space per unit of user data, n / k (Figure 3.3's x axis).
    pub fn space_factor(&self) -> f64 {
        self.level_bits as f64 / self.data_bits as f64
    }

    /// The data value a level stands for, or `None` for a level that is no code-word.
    pub fn decode(&self, level: u8) -> Option<u8> {
        match self.decode.get(level as usize) {
            Some(&NO_DATA) | None => None,
            Some(&d) => Some(d),
        }
    }

    /// Same-generation transition: the lowest level at or above `level` that stands for
    /// `data`, or `None` if the cell cannot take it before an erase. With `vmax_is_einval`
    /// (write cycles beyond GEN_MAX) V_MAX is never chosen.
    pub fn encode(&self, level: u8, data: u8, vmax_is_einval: bool) -> Option<u8> {
        debug_assert!(data < self.data_values());
        let table = if vmax_is_einval { &self.next_below_vmax } else { &self.next };
        match table[(level as usize) << self.data_bits | data as usize] {
            NO_DATA => None,
            m => Some(m),
        }
    }

    /// Whether a cell at `level` may fail to take some data value in a write cycle beyond
    /// GEN_MAX (where V_MAX is EINVAL): the thesis' "cells in GEN_MAX", which the GC counts
    /// against the ECC threshold before it reuses a page without erase (§3.6.3).
    pub fn at_risk(&self, level: u8) -> bool {
        self.risky_levels >> level & 1 == 1
    }

    /// [`WomCode::at_risk`] of every level as a bit mask (bit l: level l).
    pub fn risky_level_mask(&self) -> u32 {
        self.risky_levels
    }

    /// NR mode (§3.6.4): the code-word of `data` in generation `generation` (1-based), whatever
    /// the cell holds; `None` past the last generation.
    pub fn codeword(&self, generation: u32, data: u8) -> Option<u8> {
        let &(first, last) = self.generations.get(generation.checked_sub(1)? as usize)?;
        (first..=last).find(|&l| self.decode[l as usize] == data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_theses_generation_counts_and_shared_code_words() {
        let c = WomCode::builtin("wom-v(2,4)").unwrap();
        assert_eq!(c.gen_max(), 5);
        assert_eq!(c.generations(), &[(0, 3), (3, 6), (6, 9), (9, 12), (12, 15)]);
        // "code-word 0011 maps to data bit sequence 11 in both Gen 1 and Gen 2".
        assert_eq!(c.decode(0b0011), Some(0b11));
        assert_eq!(WomCode::builtin("wom-v(1,4)").unwrap().gen_max(), 15);
        let c34 = WomCode::builtin("wom-v(3,4)").unwrap();
        assert_eq!(c34.gen_max(), 2);
        assert_eq!(c34.generations(), &[(0, 7), (7, 14)]);
        assert_eq!(c34.decode(15), None);
    }

    #[test]
    fn the_worked_example_of_section_3_3_1() {
        let c = WomCode::builtin("wom-v(2,4)").unwrap();
        // Same-generation transitions: 01, 01, 10, 00 -> 0001, 0001, 0010, 0100.
        let mut level = 0;
        let mut seen = Vec::new();
        for d in [0b01, 0b01, 0b10, 0b00] {
            level = c.encode(level, d, false).unwrap();
            seen.push(level);
        }
        assert_eq!(seen, [0b0001, 0b0001, 0b0010, 0b0100]);
        // Always to the next generation (NR mode): 0001, 0001 (same data, no write),
        // 0110, 1000.
        assert_eq!(c.codeword(1, 0b01), Some(0b0001));
        assert_eq!(c.codeword(2, 0b10), Some(0b0110));
        assert_eq!(c.codeword(3, 0b00), Some(0b1000));
        assert_eq!(c.codeword(6, 0b00), None);
    }

    #[test]
    fn bad_tables_are_refused_with_the_problem_named() {
        let spec = |decode: Vec<i16>| WomCodeSpec {
            name: "mine".into(),
            data_bits: 1,
            level_bits: 2,
            decode,
        };
        let e = WomCode::new(&spec(vec![0, 1, 0])).unwrap_err();
        assert!(e.contains("4 entries") || e.contains("one per level"), "{e}");
        let e = WomCode::new(&spec(vec![0, 1, 2, 0])).unwrap_err();
        assert!(e.contains("decode[2] = 2"), "{e}");
        let e = WomCode::new(&spec(vec![-1, 0, 1, 0])).unwrap_err();
        assert!(e.contains("decode[0]"), "{e}");
        let e = WomCode::new(&spec(vec![0, 0, 0, 0])).unwrap_err();
        assert!(e.contains("no generation"), "{e}");
        // A valid 2-level-bit code: 0 1 0 1 gives 3 generations.
        assert_eq!(WomCode::new(&spec(vec![0, 1, 0, 1])).unwrap().gen_max(), 3);
    }
}
