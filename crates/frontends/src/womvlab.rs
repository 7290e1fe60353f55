//! `flashrig validate womv`: the thesis' analytic models of WOM-v codes (jaffer-thesis-2023.txt
//! §3.4) beside coded pages written with random data, and the thesis' stated numbers beside
//! both.
//!
//! The pages are the firmware's own [`CodedPage`]s (cell levels derived from the bytes
//! written), of the thesis' 4096 cells (§3.4.2, Figure 3.5: "We consider the flash page size to
//! be 4096"), each write cycle a fresh page of seeded random bytes, so the data is what the
//! Markov model assumes (independent, uniform symbols). Deterministic: the same codes give the
//! same report.

use std::fmt::Write as _;

use flashrig_ssd::firmware::womv::analytic::{
    cycles_within_ecc, einval_probability, space_points, SpacePoint,
};
use flashrig_ssd::firmware::womv::page::cells_for;
use flashrig_ssd::firmware::womv::{CodedPage, WomCode, WriteMode};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Cells per page (§3.4.2, Figure 3.5).
pub const PAGE_CELLS: u32 = 4096;
/// Random pages written per code.
const PAGES: usize = 200;
/// ECC budgets compared: the thesis' 1% (§3.6.3), 2% (§3.4.2, "Eg. 0.02"), 1/35 (§3.4.2)
/// and its default threshold 3% (§3.6.3).
const BUDGETS: [(&str, f64); 4] = [("1%", 0.01), ("2%", 0.02), ("1/35", 1.0 / 35.0), ("3%", 0.03)];
/// The chance a page write may exceed the ECC budget in the strict column.
const STRICT_RISK: f64 = 1e-6;

/// One code's generations.
pub struct CodeRow {
    pub name: String,
    pub data_bits: u8,
    pub space_factor: f64,
    pub gen_max: u32,
    pub generations: Vec<(u8, u8)>,
}

/// P(EINVAL) after one write cycle: model and pages.
pub struct EinvalRow {
    pub code: String,
    pub cycle: u32,
    pub model: f64,
    pub pages: f64,
}

/// Write cycles a page takes within an ECC budget.
pub struct EccRow {
    pub code: String,
    pub budget: &'static str,
    /// The last cycle whose expected EINVAL share is within the budget (risk 1/2).
    pub model_mean: u32,
    /// The last cycle at which a page exceeds the budget with probability at most 1e-6.
    pub model_strict: u32,
    /// Median over the random pages of the cycles written before one was refused.
    pub pages_median: u32,
    /// The thesis' number, where it states one.
    pub thesis: Option<(u32, &'static str)>,
}

pub struct WomvValidation {
    pub codes: Vec<CodeRow>,
    pub einval: Vec<EinvalRow>,
    pub ecc: Vec<EccRow>,
    pub space: Vec<SpacePoint>,
}

fn thesis_cycles(code: &str, budget: &str) -> Option<(u32, &'static str)> {
    match (code, budget) {
        ("wom-v(2,4)", "1%") => {
            Some((7, "§3.6.3: \"7 and 20 generations ... with 1% ECC_threshold\""))
        }
        ("wom-v(1,4)", "1%") => Some((20, "§3.6.3, as above")),
        ("wom-v(2,4)", "2%") => Some((7, "§3.4.2: at \"(Eg. 0.02)\" EINVAL \"from 5X to 7X\"")),
        ("wom-v(1,4)", "2%") => Some((20, "§3.4.2: \"from 15X to 20X\"")),
        ("wom-v(2,4)", "1/35") => Some((7, "§3.4.2: \"1/35 would help us do WC 7 and WC 20\"")),
        ("wom-v(1,4)", "1/35") => Some((20, "§3.4.2, as above")),
        _ => None,
    }
}

fn random_bytes(rng: &mut Xoshiro256PlusPlus, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

/// Runs the comparison for the built-in codes and `extra` (users' tables).
pub fn validate(extra: Vec<WomCode>) -> WomvValidation {
    let mut codes: Vec<WomCode> =
        WomCode::BUILTIN.iter().map(|n| WomCode::builtin(n).expect("built-in")).collect();
    codes.extend(extra);
    let mut v = WomvValidation {
        codes: Vec::new(),
        einval: Vec::new(),
        ecc: Vec::new(),
        space: space_points(&codes, PAGE_CELLS, 0.02, 0.5),
    };
    for (ci, code) in codes.iter().enumerate() {
        let name = code.name().to_string();
        v.codes.push(CodeRow {
            name: name.clone(),
            data_bits: code.data_bits(),
            space_factor: code.space_factor(),
            gen_max: code.gen_max(),
            generations: code.generations().to_vec(),
        });
        // Page bytes that fill 4096 cells (whole bytes: 4096 cells x k bits / 8).
        let bytes = PAGE_CELLS as usize * code.data_bits() as usize / 8;
        debug_assert_eq!(cells_for(bytes, code.data_bits()), PAGE_CELLS as usize);
        // EINVAL share after each cycle past GEN_MAX, pages written with no budget.
        let cycles = code.gen_max() + 6;
        let model = einval_probability(code, cycles);
        let mut einval = vec![0u64; cycles as usize];
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1000 + ci as u64);
        for _ in 0..PAGES {
            let mut page = CodedPage::erased(PAGE_CELLS as usize);
            for e in einval.iter_mut() {
                let data = random_bytes(&mut rng, bytes);
                page.write(code, &data, WriteMode::SameGeneration, u32::MAX)
                    .expect("an unlimited budget takes every write");
                *e += page.einval_cells() as u64;
            }
        }
        for w in code.gen_max() + 1..=cycles {
            v.einval.push(EinvalRow {
                code: name.clone(),
                cycle: w,
                model: model[w as usize - 1],
                pages: einval[w as usize - 1] as f64 / (PAGES as f64 * PAGE_CELLS as f64),
            });
        }
        // Cycles within each budget.
        for (label, fraction) in BUDGETS {
            let budget_cells = (fraction * PAGE_CELLS as f64).floor() as u32;
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(2000 + ci as u64);
            let mut reached: Vec<u32> = (0..PAGES)
                .map(|_| {
                    let mut page = CodedPage::erased(PAGE_CELLS as usize);
                    loop {
                        let data = random_bytes(&mut rng, bytes);
                        if page.write(code, &data, WriteMode::SameGeneration, budget_cells).is_err()
                        {
                            break page.cycles();
                        }
                    }
                })
                .collect();
            reached.sort_unstable();
            v.ecc.push(EccRow {
                code: name.clone(),
                budget: label,
                model_mean: cycles_within_ecc(code, PAGE_CELLS, fraction, 0.5),
                model_strict: cycles_within_ecc(code, PAGE_CELLS, fraction, STRICT_RISK),
                pages_median: reached[PAGES / 2],
                thesis: thesis_cycles(&name, label),
            });
        }
    }
    v
}

/// The report, Markdown.
pub fn render(v: &WomvValidation, command: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# WOM-v codes: analytic models beside coded pages\n");
    let _ = writeln!(
        s,
        "Generated by `{command}` (deterministic: rerunning it reproduces the file). The codes \
         are jaffer-thesis-2023.txt §3.3.1's, reconstructed from its text (docs/womv.md); the \
         models are §3.4's, computed from each code's table \
         (crates/ssd/src/firmware/womv/analytic.rs); the pages are the firmware's coded pages \
         of {PAGE_CELLS} cells, {PAGES} per code, each write cycle a page of seeded random \
         bytes.\n"
    );
    let _ = writeln!(s, "## The codes\n");
    let _ = writeln!(s, "| code | data bits per cell | physical space per unit of data | GEN_MAX | generations (levels) |");
    let _ = writeln!(s, "|---|---:|---:|---:|---|");
    for c in &v.codes {
        let gens: Vec<String> = c.generations.iter().map(|(a, b)| format!("{a}-{b}")).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {:.2}x | {} | {} |",
            c.name,
            c.data_bits,
            c.space_factor,
            c.gen_max,
            gens.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "\nThe thesis: GEN_MAX 2, 5 and 15 for WOM-v(3,4), (2,4) and (1,4), at 1.33x, 2x and \
         4x physical space (§3.4.1).\n"
    );
    let _ = writeln!(s, "## Figure 3.3: physical space against logical writes before an erase\n");
    let _ = writeln!(s, "| code | physical space | logical writes before an erase |");
    let _ = writeln!(s, "|---|---:|---:|");
    for p in &v.space {
        let _ = writeln!(s, "| {} | {:.2}x | {}x |", p.code, p.space_factor, p.logical_writes);
    }
    let _ = writeln!(
        s,
        "\nWith ECC: the last write cycle whose expected share of EINVAL cells is within 2% \
         of a page (the thesis' \"Eg. 0.02\": WOM-v(2,4) from 5x to 7x, WOM-v(1,4) from 15x to \
         20x).\n"
    );
    let _ =
        writeln!(s, "## Figure 3.4: cells that are EINVAL after each write cycle past GEN_MAX\n");
    let _ = writeln!(
        s,
        "The Markov model of one cell (each cycle an independent uniform data value, the \
         same-generation transition, beyond GEN_MAX V_MAX counts as EINVAL) beside the share \
         of EINVAL cells in the coded pages (no ECC limit, so every page takes every cycle).\n"
    );
    let _ = writeln!(s, "| code | write cycle | model | pages | pages vs model |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for r in &v.einval {
        let rel = if r.model > 0.0 {
            format!("{:+.1}%", (r.pages / r.model - 1.0) * 100.0)
        } else {
            "-".into()
        };
        let _ =
            writeln!(s, "| {} | {} | {:.4} | {:.4} | {rel} |", r.code, r.cycle, r.model, r.pages);
    }
    let _ = writeln!(s, "\n## Figure 3.5: write cycles within an ECC budget\n");
    let _ = writeln!(
        s,
        "A page refuses a write that would leave more EINVAL cells than the ECC can recover \
         (the budget, a share of its {PAGE_CELLS} cells). *Model, mean*: the last cycle whose \
         expected EINVAL share is within the budget. *Model, strict*: the last cycle at which \
         the binomial tail of Figure 3.5 gives a page at most a {STRICT_RISK:e} chance of \
         exceeding it. *Pages*: the median, over {PAGES} random pages, of the cycles written \
         before the first refusal.\n"
    );
    let _ = writeln!(s, "| code | ECC budget | model, mean | model, strict | pages (median) | the thesis | model, mean vs the thesis |");
    let _ = writeln!(s, "|---|---|---:|---:|---:|---|---|");
    for r in &v.ecc {
        let (thesis, dir) = match r.thesis {
            Some((n, src)) => (
                format!("{n} ({src})"),
                format!("{:+.0}%", (r.model_mean as f64 / n as f64 - 1.0) * 100.0),
            ),
            None => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {thesis} | {dir} |",
            r.code, r.budget, r.model_mean, r.model_strict, r.pages_median
        );
    }
    let _ = writeln!(s, "\n{}", DISCUSSION.trim_end());
    s
}

const DISCUSSION: &str = r#"
**Reading the tables.** The pages and the model agree within sampling error (the unit test
`the_markov_model_predicts_the_einval_cells_of_random_pages` holds them to five standard
deviations), so the model is the code's own behaviour under uniform data, and where the
thesis' number differs the difference lies in the thesis' arithmetic or model, not in the
pages. Its statements disagree with each other: the same WC 7 and WC 20 are attributed to a 1%
budget in §3.6.3 and to 1/35, nearly 3%, in §3.4.2; and its Figure 3.4 plots a conditional
probability whose definition the text leaves open. docs/womv.md discusses the gaps.

**Not yet here** (issue 21): the WOM-v SSD (coded pages in the emulated SSD's FTL, GC and
GC_OPT, NR mode over erase units), the erasure-factor and hot/cold models beside its
simulation, and `flashrig reproduce womv`.
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_the_model_and_the_report_names_every_code() {
        let spec: flashrig_ssd::firmware::womv::WomCodeSpec = toml::from_str(
            "name = \"mine\"\ndata_bits = 1\nlevel_bits = 2\ndecode = [0, 1, 0, 1]\n",
        )
        .unwrap();
        let v = validate(vec![WomCode::new(&spec).unwrap()]);
        for r in &v.einval {
            let sd = (r.model * (1.0 - r.model) / (PAGES as f64 * PAGE_CELLS as f64)).sqrt();
            assert!((r.pages - r.model).abs() <= 5.0 * sd + 1e-12, "{} cycle {}", r.code, r.cycle);
        }
        let text = render(&v, "test");
        for name in ["wom-v(3,4)", "wom-v(2,4)", "wom-v(1,4)", "mine"] {
            assert!(text.contains(&format!("| {name} |")), "{name} missing");
        }
    }
}
