//! The micro-benchmarks of jaffer-thesis-2023.txt §3.7.1 (Figure 3.7) on the WOM-v FTL: erase
//! units erased for the same user data under NO_WOM, WOM-v(2,4) and WOM-v(1,4), with the
//! default GC and with GC_OPT, as the data changes more or less between rewrites (Fig. 3.7a)
//! and under five access patterns (Fig. 3.7b).
//!
//! The thesis' setup: "Each micro-benchmark writes 25GB data to 1GB physical emulated drive
//! containing 4 Parallel Units and 160 erase units", the same physical space for every mode
//! (§3.7's second setup: WOM-v(k,4) exposes k/4 of the logical space), and a workload whose
//! logical space is WOM-v(1,4)'s. Ours keeps the 160 erase units and the 25 physical
//! capacities of user data, with 16 NO_WOM pages of 256 bytes per erase unit (so k/4 as many
//! coded pages for WOM-v(k,4), each of n/k times the cells), a reduction of the erase unit's
//! size the erase counts do not depend on. The patterns are described in the thesis by one
//! sentence each; what each one is here is written beside it ([`Pattern`]). Functional
//! counts only: no timing (that needs the WOM-v FTL inside the emulated SSD).

use flashrig_ssd::firmware::womv::{FtlConfig, GcPolicy, VictimPolicy, WomCode, WomFtl};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Erase units, as the thesis' drive.
const ERASE_UNITS: u32 = 160;
/// NO_WOM pages per erase unit (the physical space of one erase unit).
const PLAIN_PAGES_PER_UNIT: u32 = 16;
const PAGE_BYTES: usize = 256;
const GC_FREE: u32 = 2;
/// User data written: 25 physical capacities, as 25 GB to 1 GB.
const CAPACITIES_WRITTEN: u32 = 25;
/// Pages of WOM-v(1,4)'s space the GC rotates through.
const USABLE_1_4: u32 = (ERASE_UNITS - GC_FREE - 1) * PLAIN_PAGES_PER_UNIT / 4;
/// The workload's logical pages: 80% of WOM-v(1,4)'s usable space (the thesis sizes the
/// workload to WOM-v(1,4)'s logical space and LightNVM keeps 11% spare).
const FOOTPRINT: u32 = USABLE_1_4 * 4 / 5;
/// High-GC's footprint: 95% of WOM-v(1,4)'s usable space.
const FOOTPRINT_HIGH: u32 = USABLE_1_4 * 19 / 20;
const _: () = assert!(FOOTPRINT < FOOTPRINT_HIGH && FOOTPRINT_HIGH < USABLE_1_4);

/// Fig. 3.7b's access patterns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pattern {
    /// "keeps updating the same data sequentially": passes over the footprint in order.
    HotS,
    /// "updates same data in a random order": each pass a new random order of the footprint.
    HotR,
    /// "only updates a fraction of pages": one pass over the footprint, then uniform random
    /// updates of its first 10%.
    Cold,
    /// "medium ... amount of Garbage collection": uniform random writes over the footprint.
    LowGc,
    /// "high amount of Garbage collection": uniform random writes over 95% of WOM-v(1,4)'s
    /// usable space.
    HighGc,
}

impl Pattern {
    pub const ALL: [Pattern; 5] =
        [Pattern::HotS, Pattern::HotR, Pattern::Cold, Pattern::LowGc, Pattern::HighGc];
    pub fn name(self) -> &'static str {
        match self {
            Pattern::HotS => "Hot-S",
            Pattern::HotR => "Hot-R",
            Pattern::Cold => "Cold",
            Pattern::LowGc => "Low-GC",
            Pattern::HighGc => "High-GC",
        }
    }
    fn footprint(self) -> u32 {
        if self == Pattern::HighGc {
            FOOTPRINT_HIGH
        } else {
            FOOTPRINT
        }
    }
}

/// The FTL modes compared, by the thesis' names.
pub const MODES: [&str; 5] =
    ["NO_WOM", "WOM-v(2,4)", "WOM-v(1,4)", "WOM-v(2,4)-GC_OPT", "WOM-v(1,4)-GC_OPT"];

fn config(mode: &str) -> FtlConfig {
    let (code, gc) = match mode {
        "NO_WOM" => (None, GcPolicy::Relocate),
        "WOM-v(2,4)" => (Some("wom-v(2,4)"), GcPolicy::Relocate),
        "WOM-v(1,4)" => (Some("wom-v(1,4)"), GcPolicy::Relocate),
        "WOM-v(2,4)-GC_OPT" => {
            (Some("wom-v(2,4)"), GcPolicy::ReuseInPlace { min_programmable_pages: 0 })
        }
        _ => (Some("wom-v(1,4)"), GcPolicy::ReuseInPlace { min_programmable_pages: 0 }),
    };
    let code = code.map(|c| WomCode::builtin(c).expect("built-in"));
    let k = code.as_ref().map_or(4, |c| c.data_bits() as u32);
    FtlConfig {
        code,
        no_read: false,
        gc,
        victim: VictimPolicy::Greedy,
        erase_units: ERASE_UNITS,
        // The same cells per erase unit: a coded page has 4/k times a plain page's cells.
        pages_per_erase_unit: PLAIN_PAGES_PER_UNIT * k / 4,
        logical_pages: FOOTPRINT_HIGH,
        page_bytes: PAGE_BYTES,
        ecc_fraction: 0.03,
        gc_free_erase_units: GC_FREE,
    }
}

/// Flips each bit of `data` with probability `rate`.
fn flip(data: &mut [u8], rate: f64, rng: &mut Xoshiro256PlusPlus) {
    for b in data.iter_mut() {
        for bit in 0..8 {
            if ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < rate {
                *b ^= 1 << bit;
            }
        }
    }
}

/// One run's outcome.
#[derive(Clone, Debug)]
pub struct MicroRow {
    pub mode: &'static str,
    /// The pattern's name, or "change 5%" for Fig. 3.7a.
    pub workload: String,
    pub erases: u64,
    pub relocated: u64,
}

pub(super) fn writes() -> u64 {
    (CAPACITIES_WRITTEN * ERASE_UNITS * PLAIN_PAGES_PER_UNIT) as u64
}

/// Fig. 3.7b: `mode` under `pattern`, random data on every write.
fn run_pattern(mode: &'static str, pattern: Pattern, seed: u64) -> MicroRow {
    let mut ftl = WomFtl::new(config(mode)).expect("a valid configuration");
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let footprint = pattern.footprint();
    let mut data = vec![0u8; PAGE_BYTES];
    let mut order: Vec<u32> = (0..footprint).collect();
    let total = writes();
    let mut written = 0u64;
    let mut write = |ftl: &mut WomFtl, lpn: u32, rng: &mut Xoshiro256PlusPlus| {
        rng.fill_bytes(&mut data);
        ftl.write(lpn, &data).expect("the footprint fits");
    };
    while written < total {
        match pattern {
            Pattern::HotS | Pattern::HotR => {
                if pattern == Pattern::HotR {
                    for i in (1..order.len()).rev() {
                        order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
                    }
                }
                for &lpn in &order {
                    if written == total {
                        break;
                    }
                    write(&mut ftl, lpn, &mut rng);
                    written += 1;
                }
            }
            Pattern::Cold => {
                let lpn = if written < footprint as u64 {
                    written as u32
                } else {
                    (rng.next_u64() % (footprint as u64 / 10)) as u32
                };
                write(&mut ftl, lpn, &mut rng);
                written += 1;
            }
            Pattern::LowGc | Pattern::HighGc => {
                let lpn = if written < footprint as u64 {
                    written as u32
                } else {
                    (rng.next_u64() % footprint as u64) as u32
                };
                write(&mut ftl, lpn, &mut rng);
                written += 1;
            }
        }
    }
    let c = ftl.counters();
    MicroRow { mode, workload: pattern.name().into(), erases: c.erases, relocated: c.gc_writes }
}

/// Fig. 3.7a: the drive filled in order again and again with one buffer of data whose bits
/// change by `rate` between fills ("we flip a fraction of all bits in the data buffer, and
/// fill the entire drive again with this partially modified page").
fn run_change(mode: &'static str, rate: f64, seed: u64) -> MicroRow {
    let mut ftl = WomFtl::new(config(mode)).expect("a valid configuration");
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut data = vec![0u8; PAGE_BYTES];
    rng.fill_bytes(&mut data);
    let total = writes();
    let mut written = 0u64;
    'fill: loop {
        for lpn in 0..FOOTPRINT {
            if written == total {
                break 'fill;
            }
            ftl.write(lpn, &data).expect("the footprint fits");
            written += 1;
        }
        flip(&mut data, rate, &mut rng);
    }
    let c = ftl.counters();
    MicroRow {
        mode,
        workload: format!("change {:.0}%", rate * 100.0),
        erases: c.erases,
        relocated: c.gc_writes,
    }
}

/// The bit-change rates of Fig. 3.7a (its axis values are not in our copy of the text).
pub const CHANGE_RATES: [f64; 5] = [0.01, 0.05, 0.1, 0.25, 0.5];

/// Every run: Fig. 3.7a for NO_WOM and the two codes with the default GC, Fig. 3.7b for every
/// mode and pattern.
pub fn run_all() -> (Vec<MicroRow>, Vec<MicroRow>) {
    let mut seed = 5000;
    let mut change = Vec::new();
    for mode in &MODES[..3] {
        for rate in CHANGE_RATES {
            seed += 1;
            change.push(run_change(mode, rate, seed));
        }
    }
    let mut patterns = Vec::new();
    for mode in MODES {
        for pattern in Pattern::ALL {
            seed += 1;
            patterns.push(run_pattern(mode, pattern, seed));
        }
    }
    (change, patterns)
}

/// The setup in a sentence, for the report.
pub fn setup() -> String {
    format!(
        "{ERASE_UNITS} erase units of {PLAIN_PAGES_PER_UNIT} NO_WOM pages of {PAGE_BYTES} bytes \
         (k/4 as many coded pages for WOM-v(k,4): the same cells), {CAPACITIES_WRITTEN} \
         physical capacities of user data ({} page writes), a footprint of {FOOTPRINT} logical \
         pages ({FOOTPRINT_HIGH} for High-GC; WOM-v(1,4) rotates through {USABLE_1_4}), \
         greedy GC",
        writes()
    )
}
