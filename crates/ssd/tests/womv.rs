//! Goal: WOM-v codes (jaffer-thesis-2023.txt §3.3) store and return the bytes written through
//! every write cycle a page allows, with every code (the built-ins and a user's table read
//! from TOML) and both write modes; no cell's level ever falls between erases; a write that
//! the ECC could not recover is refused with the page unchanged; and the Markov model of a cell
//! (§3.4.2) predicts what coded pages do.
//!
//! Method: seeded random pages (`FLASHRIG_SEED=<n>` reruns one seed; failures print it) are
//! written cycle after cycle into one coded page until it refuses, each cycle read back and
//! compared, the levels compared before and after. The model is checked against the share of
//! EINVAL cells counted over many random pages, within five standard deviations.

use flashrig_check::seeds;
use flashrig_ssd::firmware::womv::analytic::einval_probability;
use flashrig_ssd::firmware::womv::page::cells_for;
use flashrig_ssd::firmware::womv::{CodedPage, WomCode, WomCodeSpec, WriteMode, WriteRefused};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

const PAGE_BYTES: usize = 512;

/// A user's code: 2 data bits in 16 levels, the values in another order in each group of four
/// levels (the thesis invites new tables, §3.6.4).
const USER_CODE: &str = r#"
name = "disjoint(2,4)"
data_bits = 2
level_bits = 4
decode = [0, 1, 2, 3, 3, 0, 1, 2, 2, 3, 0, 1, 1, 2, 3, 0]
"#;

fn codes() -> Vec<WomCode> {
    let mut codes: Vec<WomCode> =
        WomCode::BUILTIN.iter().map(|n| WomCode::builtin(n).unwrap()).collect();
    let spec: WomCodeSpec = toml::from_str(USER_CODE).unwrap();
    codes.push(WomCode::new(&spec).unwrap());
    codes
}

fn random_page(rng: &mut Xoshiro256PlusPlus) -> Vec<u8> {
    let mut data = vec![0u8; PAGE_BYTES];
    rng.fill_bytes(&mut data);
    data
}

/// Writes random pages into one page until it refuses; checks every read and every level.
/// Returns the cycles written and why it stopped.
fn cycles_until_refused(
    code: &WomCode,
    mode_of: impl Fn(u32) -> WriteMode,
    budget_cells: u32,
    seed: u64,
) -> (u32, WriteRefused) {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let cells = cells_for(PAGE_BYTES, code.data_bits());
    let mut page = CodedPage::erased(cells);
    let mut out = vec![0u8; PAGE_BYTES];
    let mut last = random_page(&mut rng);
    for cycle in 1.. {
        let data = random_page(&mut rng);
        let before = page.clone();
        match page.write(code, &data, mode_of(cycle), budget_cells) {
            Ok(r) => {
                assert_eq!(r.cycle, cycle);
                for (i, (a, b)) in before.levels().iter().zip(page.levels().iter()).enumerate() {
                    assert!(b >= a, "{}: seed {seed}: cell {i} fell from {a} to {b}", code.name());
                }
                page.read(code, &mut out);
                assert!(
                    out == data,
                    "{}: seed {seed}: cycle {cycle} reads back wrong",
                    code.name()
                );
                last = data;
            }
            Err(why) => {
                assert_eq!(
                    page,
                    before,
                    "{}: seed {seed}: a refused write changed the page",
                    code.name()
                );
                page.read(code, &mut out);
                assert!(out == last, "{}: seed {seed}: the page lost its data", code.name());
                assert!(
                    !matches!(why, WriteRefused::LevelDecrease { .. } | WriteRefused::Size { .. }),
                    "{}: seed {seed}: {why}",
                    code.name()
                );
                return (cycle - 1, why);
            }
        }
    }
    unreachable!()
}

#[test]
fn every_code_returns_every_cycle_and_never_lowers_a_cell() {
    for seed in seeds(1, 8) {
        for code in codes() {
            // Without ECC the page takes at least GEN_MAX cycles, and random data rarely
            // more: one cell of thousands that cannot take its value stops it.
            let (cycles, why) = cycles_until_refused(&code, |_| WriteMode::SameGeneration, 0, seed);
            assert!(cycles >= code.gen_max(), "{}: seed {seed}: {cycles} cycles", code.name());
            assert!(matches!(why, WriteRefused::EccBudget { .. }), "{why}");
            // A 3% ECC budget takes it further (§3.6.3's threshold).
            let cells = cells_for(PAGE_BYTES, code.data_bits()) as u32;
            let (more, _) =
                cycles_until_refused(&code, |_| WriteMode::SameGeneration, cells * 3 / 100, seed);
            assert!(more >= cycles, "{}: seed {seed}: {more} < {cycles}", code.name());
        }
    }
}

#[test]
fn nr_mode_writes_one_generation_per_cycle_and_reads_back() {
    for seed in seeds(100, 4) {
        for code in codes() {
            let gens = code.generations().len() as u32;
            let (cycles, why) =
                cycles_until_refused(&code, |c| WriteMode::NoRead { generation: c }, 0, seed);
            assert_eq!(cycles, gens, "{}: seed {seed}", code.name());
            assert!(matches!(why, WriteRefused::Generation { .. }), "{why}");
        }
    }
}

#[test]
fn with_the_ecc_budget_wom_v_1_4_goes_past_gen_max() {
    // §3.4.2: with about 3% of cells recoverable WOM-v(1,4) writes well past its 15
    // guaranteed cycles (the thesis: to about 20).
    let code = WomCode::builtin("wom-v(1,4)").unwrap();
    let cells = cells_for(PAGE_BYTES, 1) as u32;
    for seed in seeds(200, 4) {
        let (cycles, _) =
            cycles_until_refused(&code, |_| WriteMode::SameGeneration, cells * 3 / 100, seed);
        assert!(cycles > code.gen_max(), "seed {seed}: {cycles} cycles");
    }
}

#[test]
fn the_markov_model_predicts_the_einval_cells_of_random_pages() {
    // Write `PAGES` random pages each for `cycles` cycles with an unlimited budget, and count
    // the EINVAL cells after each cycle: the share is the model's probability.
    const PAGES: usize = 40;
    for code in codes() {
        let cycles = code.gen_max() + 4;
        let model = einval_probability(&code, cycles);
        let cells = cells_for(PAGE_BYTES, code.data_bits());
        let mut count = vec![0u64; cycles as usize];
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        for _ in 0..PAGES {
            let mut page = CodedPage::erased(cells);
            for c in count.iter_mut() {
                let data = random_page(&mut rng);
                page.write(&code, &data, WriteMode::SameGeneration, u32::MAX).unwrap();
                *c += page.einval_cells() as u64;
            }
        }
        let n = (PAGES * cells) as f64;
        for (c, (&k, &p)) in count.iter().zip(&model).enumerate() {
            let seen = k as f64 / n;
            let sd = (p * (1.0 - p) / n).sqrt();
            assert!(
                (seen - p).abs() <= 5.0 * sd + 1e-12,
                "{}: cycle {}: model {p:.4}, pages {seen:.4} (sd {sd:.5})",
                code.name(),
                c + 1
            );
        }
    }
}
