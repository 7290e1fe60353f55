//! Targets over text inputs: run configurations, SSD tables, block traces, fio job files.

use std::io::Cursor;
use std::path::Path;
use std::sync::OnceLock;

use flashrig_frontends::config::{Config, DeviceConfig, RamConfig, WorkloadConfig};
use flashrig_frontends::fiojob::FioJob;
use flashrig_frontends::size::Size;
use flashrig_frontends::sweep;
use flashrig_ssd::SsdConfig;
use flashrig_trace::write::{write_disksim, write_msr};
use flashrig_trace::{detect, Format, LocalityStats, Options, Reader, Request, TraceStats};

/// A configuration loaded from `text` must print (`flashrig config show`) as TOML that loads
/// back to the same configuration: what `config show` promises, and what a sweep relies on
/// when it writes each run's configuration into its result.
fn assert_fixed_point(cfg: &Config, what: &str) {
    let shown = cfg.to_toml();
    let again = Config::from_toml(&shown, Path::new("shown.toml")).unwrap_or_else(|e| {
        panic!("{what}: `config show` prints a configuration that is refused: {e}\n{shown}")
    });
    assert!(again == *cfg, "{what}: `config show` is not a fixed point:\n{shown}\nloads back as {again:?}\nnot {cfg:?}");
}

/// `config_toml`: a run configuration (`flashrig run FILE`), and the same text as an
/// experiment file (`flashrig sweep FILE`: a configuration with a `[sweep]` table).
pub fn config_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // An `ssd` device's table is validated by crates/ssd, which has open bugs (crate::known).
    crate::known::guard(|| config_text(text));
}

fn config_text(text: &str) {
    match Config::from_toml(text, Path::new("fuzz.toml")) {
        Ok(cfg) => assert_fixed_point(&cfg, "config"),
        Err(e) => {
            let _ = e.to_string();
        }
    }
    match sweep::expand(text, Path::new("fuzz.toml")) {
        Ok(cases) => {
            for case in cases.iter().take(4) {
                assert_fixed_point(&case.config, &format!("sweep case {}", case.label));
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// `ssd_config`: an SSD's table as a configuration's `device` of type `ssd` holds it: a
/// `preset` and overrides of any key (`flashrig ssd show`, the presets in
/// configs/presets/ssd/). A table that resolves and validates must print as TOML that
/// resolves back to the same SSD.
pub fn ssd_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    crate::known::guard(|| ssd_text(text));
}

fn ssd_text(text: &str) {
    let Ok(table) = text.parse::<toml::Table>() else {
        return;
    };
    let Ok(cfg) = SsdConfig::resolve(&table) else {
        return;
    };
    if cfg.validate().is_err() {
        return;
    }
    let shown = toml::to_string(&cfg).expect("an SSD configuration serialises");
    let table: toml::Table = shown
        .parse()
        .unwrap_or_else(|e| panic!("a shown SSD configuration is not TOML: {e}\n{shown}"));
    let again = SsdConfig::resolve(&table)
        .unwrap_or_else(|e| panic!("a shown SSD configuration is refused: {e}\n{shown}"));
    assert!(again == cfg, "a shown SSD configuration reads back differently:\n{shown}");
    again.validate().unwrap_or_else(|e| panic!("a shown SSD configuration is invalid: {e}"));
}

/// The most requests of one input that are kept for the round trips (the rest are read and
/// counted, not kept).
const KEEP: usize = 100_000;

/// `trace`: a block trace. The first byte chooses how it is read: bits 0..2 the format
/// ([`Format::ALL`] order; 7 = detect it from the first 20 lines, as `flashrig trace` does
/// without `--format`), bit 3 `skip_bad`, bit 4 an assumed size for reduced MSR traces. Every
/// record read feeds the statistics of `flashrig trace stats`, and the records are written
/// back as MSR and as DiskSim (`flashrig trace convert`) and must read back the same.
pub fn trace(data: &[u8]) {
    let Some((&sel, text)) = data.split_first() else {
        return;
    };
    let opts =
        Options { skip_bad: sel & 8 != 0, assume_size_bytes: (sel & 16 != 0).then_some(4096) };
    let format = match (sel & 7) as usize {
        7 => {
            // As `detect_file`: the first 20 lines of at most 64 KiB, lossily decoded.
            let head = String::from_utf8_lossy(&text[..text.len().min(64 << 10)]);
            let lines: Vec<&str> = head.lines().take(20).collect();
            match detect(&lines) {
                Some(f) => f,
                None => return,
            }
        }
        i => Format::ALL[i],
    };
    let reader = Reader::from_bufread("fuzz", Box::new(Cursor::new(text.to_vec())), format, opts);
    let mut stats = TraceStats::new();
    let mut loc = LocalityStats::new();
    let mut reqs = Vec::new();
    for r in reader {
        match r {
            Ok(r) => {
                assert!(
                    r.offset_bytes.checked_add(r.size_bytes).is_some(),
                    "{format}: a request ending past 2^64 was read: {r:?}"
                );
                stats.add(&r);
                loc.add(&r);
                if reqs.len() < KEEP {
                    reqs.push(r);
                }
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
    let _ = stats.summary();
    let report = loc.report();
    let _ = (report.distinct_address_ratio(), report.footprint_ratio());

    // MSR keeps time in 100 ns ticks: the round trip truncates to them and keeps the rest.
    let mut msr = Vec::new();
    write_msr(&mut msr, "fuzz", &reqs).expect("writing to memory");
    let back = read_all(&msr, Format::Msr);
    let want: Vec<Request> =
        reqs.iter().map(|r| Request { time_ns: r.time_ns / 100 * 100, ..*r }).collect();
    assert_eq!(back, want, "{format} -> msr -> read differs");

    // DiskSim is in sectors: exact for requests on sector boundaries.
    let aligned: Vec<Request> = reqs
        .iter()
        .filter(|r| r.offset_bytes % 512 == 0 && r.size_bytes % 512 == 0)
        .copied()
        .collect();
    let mut ds = Vec::new();
    write_disksim(&mut ds, &aligned).expect("writing to memory");
    let back = read_all(&ds, Format::DiskSim);
    assert_eq!(back, aligned, "{format} -> disksim -> read differs");
}

/// Every record of `bytes` read as `format`; a bad line is a failure of the writer.
fn read_all(bytes: &[u8], format: Format) -> Vec<Request> {
    let text = String::from_utf8_lossy(bytes).into_owned();
    Reader::from_bufread(
        "written",
        Box::new(Cursor::new(bytes.to_vec())),
        format,
        Options::default(),
    )
    .map(|r| r.unwrap_or_else(|e| panic!("written {format} does not read back: {e}\n{text}")))
    .collect()
}

/// The built-in default configuration, which `flashrig run --fio` starts from.
fn builtin() -> &'static Config {
    static BUILTIN: OnceLock<Config> = OnceLock::new();
    BUILTIN.get_or_init(Config::builtin)
}

/// `fiojob`: an fio job file (`flashrig run --fio FILE [--section NAME]`), with no section
/// named and with `--section a`. A job that converts replaces the default configuration's
/// workload as `flashrig run` does; the result is validated, and when valid must print and
/// load back the same (`config show --fio`).
pub fn fiojob(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for section in [None, Some("a")] {
        let job = match FioJob::parse(text, "fuzz.fio", section) {
            Ok(job) => job,
            Err(e) => {
                let _ = e.to_string();
                continue;
            }
        };
        let mut cfg = builtin().clone();
        cfg.workload = job.workload;
        if let Some(s) = job.seed {
            cfg.seed = s;
        }
        if cfg.validate().is_ok() {
            assert_fixed_point(&cfg, "fio job");
        }
        run_small(&cfg.workload);
    }
}

/// Runs a job's workload on a 1 GiB RAM disk (sparse: only what is written takes memory) on
/// the simulated runtime, when it is small enough to be cheap (at most 256 requests in
/// flight, at most 256 KiB per job): the values of a job file reach the workload's arithmetic
/// (offsets, ranges, alignment, rates, deadlines) only when it runs. `Ok` or an error, never
/// a panic.
fn run_small(w: &WorkloadConfig) {
    if w.jobs as u64 * w.iodepth as u64 > 256 {
        return;
    }
    let mut cfg = Config {
        device: DeviceConfig::Ram(RamConfig {
            capacity: Size::gib(1),
            latency_ns: 1000,
            ..RamConfig::default()
        }),
        workload: w.clone(),
        ..Config::default()
    };
    let most = Size::kib(256);
    cfg.workload.size = Some(w.size.map_or(most, |s| s.min(most)));
    if cfg.validate().is_ok() {
        let _ = flashrig_frontends::run(&cfg);
    }
}

/// `womv_code`: a WOM-v code table (`flashrig validate womv --code FILE`, docs/womv.md). A table
/// that makes a code must store and return data: pages of 6 bytes (48 bits, whole cells for
/// every k up to 4) made from the input's bytes are written into one coded page cycle after
/// cycle, in the default mode with an ECC budget of one cell and in NR mode, each accepted
/// write reading back and each refused one leaving the page as it was, for at most 64 cycles.
pub fn womv_code(data: &[u8]) {
    use flashrig_ssd::firmware::womv::page::cells_for;
    use flashrig_ssd::firmware::womv::{CodedPage, WomCode, WomCodeSpec, WriteMode};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(spec) = toml::from_str::<WomCodeSpec>(text) else {
        return;
    };
    let Ok(code) = WomCode::new(&spec) else {
        return;
    };
    if data.is_empty() {
        return;
    }
    const BYTES: usize = 6;
    let cells = cells_for(BYTES, code.data_bits());
    for nr in [false, true] {
        let mut page = CodedPage::erased(cells);
        let mut last: Option<Vec<u8>> = None;
        let mut out = [0u8; BYTES];
        for cycle in 1..=64u32 {
            let page_data: Vec<u8> = (0..BYTES)
                .map(|i| data[(cycle as usize * 7 + i * 13) % data.len()] ^ (cycle as u8))
                .collect();
            let mode = if nr {
                WriteMode::NoRead { generation: cycle }
            } else {
                WriteMode::SameGeneration
            };
            let before = page.clone();
            match page.write(&code, &page_data, mode, 1) {
                Ok(_) => {
                    page.read(&code, &mut out);
                    assert_eq!(out[..], page_data[..], "cycle {cycle} reads back wrong");
                    last = Some(page_data);
                }
                Err(e) => {
                    assert_eq!(page, before, "refused write changed the page: {e}");
                    if let Some(last) = &last {
                        page.read(&code, &mut out);
                        assert_eq!(out[..], last[..], "a refused write lost the data");
                    }
                    break;
                }
            }
        }
    }
}
