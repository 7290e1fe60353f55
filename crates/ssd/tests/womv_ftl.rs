//! Goal: the WOM-v FTL (jaffer-thesis-2023.txt §3.6) stores and returns every logical page in
//! every mode (NO_WOM; WOM-v with the default GC, with GC_OPT, in NR mode) while its GC runs,
//! after power cuts at random page programs too; its counters add up; and its modes do what
//! the thesis says they are for: WOM-v erases less than NO_WOM, GC_OPT relocates less than the
//! default GC, NR mode reads nothing before a write.
//!
//! Method: seeded random writes (`FLASHRIG_SEED=<n>` reruns one seed; failures print it) of
//! data that changes a chosen share of its bits between rewrites, checked against a map of
//! what was acknowledged; every read compared; a power cut armed at a random program, the FTL
//! recovered from its pages alone, and every acknowledged page read back (the write the cut
//! interrupted may hold either its old or its new data).

use std::collections::HashMap;

use flashrig_check::seeds;
use flashrig_ssd::firmware::womv::{
    FtlConfig, FtlCounters, FtlError, GcPolicy, VictimPolicy, WomCode, WomFtl,
};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

const PAGE_BYTES: usize = 512;

/// A named FTL mode over 24 erase units of 16 pages.
fn config(code: Option<&str>, no_read: bool, gc: GcPolicy, logical_pages: u32) -> FtlConfig {
    FtlConfig {
        code: code.map(|c| WomCode::builtin(c).unwrap()),
        no_read,
        gc,
        victim: VictimPolicy::Greedy,
        erase_units: 24,
        pages_per_erase_unit: 16,
        logical_pages,
        page_bytes: PAGE_BYTES,
        ecc_fraction: 0.03,
        gc_free_erase_units: 2,
    }
}

const GC_OPT: GcPolicy = GcPolicy::ReuseInPlace { min_programmable_pages: 0 };

fn modes() -> Vec<(&'static str, FtlConfig)> {
    let l = 24 * 16 * 3 / 4;
    vec![
        ("NO_WOM", config(None, false, GcPolicy::Relocate, l)),
        ("WOM-v(2,4)", config(Some("wom-v(2,4)"), false, GcPolicy::Relocate, l)),
        ("WOM-v(1,4)", config(Some("wom-v(1,4)"), false, GcPolicy::Relocate, l)),
        ("WOM-v(3,4)", config(Some("wom-v(3,4)"), false, GcPolicy::Relocate, l)),
        ("WOM-v(2,4)-GC_OPT", config(Some("wom-v(2,4)"), false, GC_OPT, l)),
        ("WOM-v(1,4)-GC_OPT", config(Some("wom-v(1,4)"), false, GC_OPT, l)),
        (
            "WOM-v(2,4)-GC_OPT-min4",
            config(
                Some("wom-v(2,4)"),
                false,
                GcPolicy::ReuseInPlace { min_programmable_pages: 4 },
                l,
            ),
        ),
        ("WOM-v(2,4)-NR", config(Some("wom-v(2,4)"), true, GcPolicy::Relocate, l)),
        ("WOM-v(2,4)-NR-GC_OPT", config(Some("wom-v(2,4)"), true, GC_OPT, l)),
        ("WOM-v(2,4)-NR-GC_OPT-LRW", {
            let mut c = config(Some("wom-v(2,4)"), true, GC_OPT, l);
            c.victim = VictimPolicy::Lrw;
            c
        }),
        ("NO_WOM-LRW", {
            let mut c = config(None, false, GcPolicy::Relocate, l);
            c.victim = VictimPolicy::Lrw;
            c
        }),
    ]
}

/// Flips each bit of `data` with probability `rate`.
fn mutate(data: &mut [u8], rate: f64, rng: &mut Xoshiro256PlusPlus) {
    for b in data.iter_mut() {
        let mut mask = 0u8;
        for bit in 0..8 {
            if (rng.next_u64() as f64 / u64::MAX as f64) < rate {
                mask |= 1 << bit;
            }
        }
        *b ^= mask;
    }
}

struct Driver {
    rng: Xoshiro256PlusPlus,
    model: HashMap<u32, Vec<u8>>,
    /// The write a power cut interrupted: its page may hold the old or the new data.
    uncertain: Option<(u32, Vec<u8>)>,
    rate: f64,
}

impl Driver {
    fn new(seed: u64, rate: f64) -> Driver {
        Driver {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            model: HashMap::new(),
            uncertain: None,
            rate,
        }
    }

    fn next_data(&mut self, lpn: u32) -> Vec<u8> {
        match self.model.get(&lpn) {
            Some(old) => {
                let mut d = old.clone();
                mutate(&mut d, self.rate, &mut self.rng);
                d
            }
            None => {
                let mut d = vec![0u8; PAGE_BYTES];
                self.rng.fill_bytes(&mut d);
                d
            }
        }
    }

    /// Checks every logical page against the model.
    fn verify(&mut self, ftl: &mut WomFtl, what: &str) {
        let mut out = vec![0u8; PAGE_BYTES];
        for lpn in 0..ftl.config().logical_pages {
            let written = ftl.read(lpn, &mut out).unwrap();
            match (&self.uncertain, self.model.get(&lpn)) {
                (Some((u, new)), old) if *u == lpn => {
                    let ok = Some(&out) == old || out == *new || (old.is_none() && !written);
                    assert!(ok, "{what}: logical page {lpn} holds neither its old nor new data");
                    // Whatever it holds is now what it holds.
                    if written {
                        self.model.insert(lpn, out.clone());
                    }
                }
                (_, Some(data)) => {
                    assert!(written, "{what}: logical page {lpn} lost");
                    assert_eq!(&out, data, "{what}: logical page {lpn} holds other bytes");
                }
                (_, None) => assert!(!written, "{what}: logical page {lpn} was never written"),
            }
        }
        self.uncertain = None;
    }
}

#[test]
fn every_mode_returns_what_was_written_while_its_gc_runs() {
    let rate = 0.25;
    for (name, cfg) in modes() {
        for seed in seeds(1, 2) {
            let name = &format!("{name} (seed {seed})");
            let mut ftl = WomFtl::new(cfg.clone()).unwrap();
            let mut d = Driver::new(seed, rate);
            let logical = cfg.logical_pages;
            let mut out = vec![0u8; PAGE_BYTES];
            for i in 0..8 * 24 * 16u32 {
                let lpn = d.rng.next_u32() % logical;
                let data = d.next_data(lpn);
                ftl.write(lpn, &data).unwrap_or_else(|e| panic!("{name}: write {i}: {e}"));
                d.model.insert(lpn, data);
                if i.is_multiple_of(7) {
                    let r = d.rng.next_u32() % logical;
                    let written = ftl.read(r, &mut out).unwrap_or_else(|e| panic!("{name}: {e}"));
                    assert_eq!(written, d.model.contains_key(&r), "{name}: page {r}");
                    if let Some(data) = d.model.get(&r) {
                        assert_eq!(&out, data, "{name}: page {r} after {i} writes");
                    }
                }
            }
            d.verify(&mut ftl, name);
            let c = ftl.counters();
            assert_eq!(c.page_programs, c.host_writes + c.gc_writes, "{name}: {c:?}");
            // The GC ran: erase units came back to the pool one way or another.
            assert!(c.erases + c.reused_after_relocation + c.reused_in_place > 0, "{name}: {c:?}");
            if cfg.code.is_none() {
                assert_eq!(c.reprograms, 0, "{name}: NO_WOM programs a page once per erase");
            } else {
                assert!(c.reprograms > 0, "{name}: WOM-v rewrites pages without erase: {c:?}");
            }
            if cfg.no_read {
                assert_eq!(c.reads_before_write, 0, "{name}: NR mode reads before no write");
            } else if cfg.code.is_some() {
                assert_eq!(c.reads_before_write, c.page_programs, "{name}: {c:?}");
                // A page the FTL deems programmable takes any data: none refuses a write.
                assert_eq!(c.refused_writes, 0, "{name}: {c:?}");
            }
        }
    }
}

#[test]
fn power_cuts_at_random_programs_lose_nothing_acknowledged() {
    for (name, cfg) in modes() {
        for seed in seeds(100, 6) {
            let name = &format!("{name} (seed {seed})");
            let mut ftl = WomFtl::new(cfg.clone()).unwrap();
            let mut d = Driver::new(seed, 0.25);
            let logical = cfg.logical_pages;
            let mut cuts = 0;
            for _ in 0..6 * 24 * 16 {
                if d.rng.next_u32().is_multiple_of(200) {
                    ftl.arm_power_cut(d.rng.next_u64() % 40);
                }
                let lpn = d.rng.next_u32() % logical;
                let data = d.next_data(lpn);
                match ftl.write(lpn, &data) {
                    Ok(()) => {
                        d.model.insert(lpn, data);
                    }
                    Err(FtlError::PowerCut) => {
                        cuts += 1;
                        d.uncertain = Some((lpn, data));
                        ftl = ftl.recover().unwrap_or_else(|e| panic!("{name}: recovery: {e}"));
                        d.verify(&mut ftl, &format!("{name}, after power cut {cuts}"));
                    }
                    Err(e) => panic!("{name}: {e}"),
                }
            }
            // Recovery at a quiet moment changes nothing either.
            ftl = ftl.recover().unwrap_or_else(|e| panic!("{name}: recovery: {e}"));
            d.verify(&mut ftl, &format!("{name}, recovered at the end"));
            assert!(cuts > 0, "{name}: no power cut happened");
        }
    }
}

/// Sequential passes over the whole logical space (the thesis' Hot-S, §3.7.1), the same
/// physical space for every mode (§3.7's second setup: the logical space shrinks by k/n).
fn hot_s_erases(
    code: Option<&str>,
    gc: GcPolicy,
    no_read: bool,
    passes: u32,
) -> (u64, FtlCounters) {
    let mut cfg = config(code, no_read, gc, 64);
    let k = cfg.code.as_ref().map_or(4, |c| c.data_bits() as u32);
    // Same cells: a WOM-v page's cells are n/k NO_WOM pages' worth, so k/n as many pages. The
    // same user data in every mode: 20 passes over 64 logical pages (WOM-v(1,4) has room for
    // 84 here).
    cfg.pages_per_erase_unit = 16 * k / 4;
    let mut ftl = WomFtl::new(cfg.clone()).unwrap();
    let mut d = Driver::new(7, 0.5);
    let logical = cfg.logical_pages;
    for _ in 0..passes {
        for lpn in 0..logical {
            let data = d.next_data(lpn);
            ftl.write(lpn, &data).unwrap();
            d.model.insert(lpn, data);
        }
    }
    d.verify(&mut ftl, "hot-s");
    (ftl.counters().erases, ftl.counters())
}

#[test]
fn wom_v_erases_less_than_no_wom_for_the_same_data_on_the_same_cells() {
    let (no_wom, _) = hot_s_erases(None, GcPolicy::Relocate, false, 20);
    let (wom24, c24) = hot_s_erases(Some("wom-v(2,4)"), GcPolicy::Relocate, false, 20);
    assert!(c24.reused_after_relocation > 0, "{c24:?}");
    let (wom14, _) = hot_s_erases(Some("wom-v(1,4)"), GcPolicy::Relocate, false, 20);
    let (nr24, _) = hot_s_erases(Some("wom-v(2,4)"), GcPolicy::Relocate, true, 20);
    assert!(no_wom > 0);
    assert!(wom24 < no_wom, "WOM-v(2,4) {wom24} erases, NO_WOM {no_wom}");
    assert!(wom14 < no_wom, "WOM-v(1,4) {wom14} erases, NO_WOM {no_wom}");
    assert!(nr24 < no_wom, "WOM-v(2,4)-NR {nr24} erases, NO_WOM {no_wom}");
}

#[test]
fn pages_are_written_past_gen_max_and_read_back_through_the_ecc() {
    // WOM-v(1,4) under random data: after its 15 guaranteed cycles few cells sit at the top
    // two levels, so the default GC keeps reusing pages, and cells that cannot take their
    // value become EINVAL; every page is read back and compared at the end.
    let (_, c) = hot_s_erases(Some("wom-v(1,4)"), GcPolicy::Relocate, false, 60);
    assert!(c.einval_cells_written > 0, "{c:?}");
    assert_eq!(c.refused_writes, 0, "{c:?}");
}

#[test]
fn gc_opt_relocates_less_than_the_default_gc_under_random_writes() {
    let run = |gc: GcPolicy| {
        let cfg = config(Some("wom-v(2,4)"), false, gc, 24 * 16 * 3 / 4);
        let mut ftl = WomFtl::new(cfg.clone()).unwrap();
        let mut d = Driver::new(11, 0.5);
        for _ in 0..10 * 24 * 16 {
            let lpn = d.rng.next_u32() % cfg.logical_pages;
            let data = d.next_data(lpn);
            ftl.write(lpn, &data).unwrap();
            d.model.insert(lpn, data);
        }
        d.verify(&mut ftl, "random");
        ftl.counters()
    };
    let default = run(GcPolicy::Relocate);
    let opt = run(GC_OPT);
    assert!(opt.reused_in_place > 0, "{opt:?}");
    assert!(opt.gc_writes < default.gc_writes, "GC_OPT {opt:?}\ndefault {default:?}");
    assert!(opt.erases <= default.erases, "GC_OPT {opt:?}\ndefault {default:?}");
}

#[test]
fn bad_configurations_are_refused_with_the_field_named() {
    let base = config(Some("wom-v(2,4)"), false, GcPolicy::Relocate, 100);
    let e = |f: &dyn Fn(&mut FtlConfig)| {
        let mut c = base.clone();
        f(&mut c);
        WomFtl::new(c).err().expect("refused")
    };
    assert!(e(&|c| c.logical_pages = 24 * 16).contains("logical_pages"));
    assert!(e(&|c| c.logical_pages = 0).contains("logical_pages"));
    assert!(e(&|c| c.page_bytes = 0).contains("page_bytes"));
    assert!(e(&|c| c.pages_per_erase_unit = 0).contains("pages_per_erase_unit"));
    assert!(e(&|c| c.gc_free_erase_units = 1).contains("gc_free_erase_units"));
    assert!(e(&|c| c.ecc_fraction = 0.9).contains("ecc_fraction"));
    assert!(e(&|c| {
        c.code = None;
        c.no_read = true
    })
    .contains("no_read"));
    let mut ftl = WomFtl::new(base).unwrap();
    assert_eq!(
        ftl.write(100, &[0u8; PAGE_BYTES]),
        Err(FtlError::OutOfRange { lpn: 100, logical_pages: 100 })
    );
    assert_eq!(ftl.write(0, &[0u8; 3]), Err(FtlError::Size { bytes: 3, page_bytes: PAGE_BYTES }));
}
