//! The document's sections: each figure's comparison table (the core renders it from the
//! claims) and, under it, our own numbers per system and the plots.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use flashrig_frontends::error::Error;
use flashrig_frontends::report::Series;

use super::experiments::{self, SIZES_KIB, TWO_SIZES_KIB};
use super::{claims, recovery, Key, Load, Sys, Variant};
use crate::core::plots::Plots;
use crate::core::results::{fmt_metric, Metric};
use crate::core::{Mode, Results, Section};

/// Which run of a system a table column shows.
type KeyOf = Box<dyn Fn(Sys) -> Key>;
/// A table column: its heading and its runs.
type Category = (String, KeyOf);

/// Every section, in the paper's order.
pub(super) fn sections(mode: Mode, results: &Path) -> Vec<Section<'static, Key>> {
    let mut v = Vec::new();
    if mode == Mode::Smoke {
        v.push(Section::text(
            "**Smoke run**: tiny devices and a few milliseconds per run, for flashrig's own \
             test. Not a reproduction.\n\n"
                .into(),
        ));
    }
    v.push(Section::new("Setup", Vec::new(), move |out, _, _| {
        setup(out, mode);
        Ok(())
    }));
    v.push(Section::new(
        "Figs. 3 and 10: uniform writes, 8 jobs x QD128",
        claims::fig10(mode),
        move |o, r, p| fig10(o, r, p, mode),
    ));
    v.push(Section::new("Fig. 11: skewed random writes", claims::fig11(), |o, r, p| {
        by_skew(o, r, p, "fig11", "Fig. 11: random writes", Metric::WriteGbps, Load::rand_write)
    }));
    v.push(Section::new("Figs. 12-13: reads", claims::figs12_13(), |o, r, p| {
        by_skew(o, r, p, "fig13", "Figs. 12-13: random reads", Metric::ReadGbps, |bs, z| {
            Load::Read { seq: false, bs_kib: bs, zipf_x10: z }
        })
    }));
    v.push(Section::new("Fig. 14: mixed reads and writes", claims::fig14(), fig14));
    v.push(Section::new(
        "Fig. 15: write amplification of the capacity device",
        claims::fig15(),
        |o, r, p| {
            by_skew(
                o,
                r,
                p,
                "fig15",
                "Fig. 15: WAF of the QLC device",
                Metric::Waf("qlc"),
                Load::rand_write,
            )
        },
    ));
    v.push(Section::new(
        "Figs. 16-17: backend traffic under random writes",
        claims::figs16_17(),
        backend,
    ));
    v.push(Section::new("Fig. 18: GC isolation", claims::fig18(), fig18));
    let results: PathBuf = results.to_path_buf();
    v.push(Section::new("Table 4: recovery time", Vec::new(), move |out, _, _| {
        recovery::table4(out, &results, mode)
    }));
    v.push(Section::new("Fig. 19: the L2P cache", claims::fig19(), fig19));
    v.push(Section::new("Not reproduced", Vec::new(), |out, _, _| {
        out.push_str(
            "- The 8 HDDs of Figs. 3 and 10-14: flashrig has no disk model. The claims \
             against HDDs (97.37x) are left out.\n\
             - Figs. 20-22 (Aerospike, RocksDB, HDFS in VMs): KVM guests hang on this machine; \
             the applications run on a kernel file system over FUSE or NBD (README), which is \
             future work.\n\
             - Fig. 18's mixed workloads (four VMs writing sequentially beside four writing at \
             random): a flashrig workload gives every job the same pattern.\n\
             - §6.6's CPU and memory use: the simulation charges engines' CPU per operation but \
             does not model dm-zoned's kernel threads; memory is not simulated.\n\n",
        );
        Ok(())
    }));
    v
}

fn setup(out: &mut String, mode: Mode) {
    let s = experiments::scale(mode);
    let _ = writeln!(
        out,
        "Every system is a flashrig stack over emulated SSDs, each a sourced preset \
         (docs/ssd-presets.md) with its capacity divided by {div}: the P5800X (`p5800x`) as the \
         fast device, the P5316 (`p5316-qlc`, block interface, 64 KiB mapping unit) and the \
         four ZN540s throttled to one P5316 (`zn540x4`, zoned) as capacity devices. Channels, \
         dies, planes and NAND timing, which set each device's bandwidth, are the presets'. \
         CSAL's chunks and zones ({chunk} KiB for the paper's 1 GB), its L2P cache (the \
         paper's 2 GB over a 16 GB table) and the warm-up shrink by the same factor; request \
         sizes, queue depths, the 512 KiB compaction batch and every threshold do not.\n\n\
         | system | stack | paper |\n|---|---|---|\n\
         | QLC | the P5316 alone; 8 jobs on 8 eighths (LVM-like partitions) | §3.1 |\n\
         | Open-CAS | `wbcache`: LRU write-back cache of 64 KiB lines on the P5800X over the P5316 | §3.2 |\n\
         | dm-zoned | `dmzoned`: random zones on the P5800X, sequential zones on the ZN540s | §3.3 |\n\
         | CSAL-BLK | `csal` over the P5800X and the P5316 made zoned (`zoned`, SPDK's zoned bdev) | §6.1 |\n\
         | CSAL-ZNS | `csal` over the P5800X and the ZN540s | §6.1 |\n\n\
         Each stack is warmed up once and then runs its loads in turn, as phases of one run \
         (§6.2: the SSDs are warmed up \"before the tests\", and \"we first evaluate writes and \
         reads (including uniform and skewed workloads for both of them), and then we evaluate \
         mixed reads and writes\"): random writes, uniform then skewed; one more sequential \
         pass over the stack, unmeasured, then the sequential writes; reads, uniform, skewed \
         and sequential; the mixed loads. A later load finds the state the loads before it \
         left. The warm-up: one sequential fill in 128 KiB writes, then 4 KiB random writes for \
         {warm} ms of virtual time (the paper: two fills and four hours; four hours divided by \
         {div} is {warm} ms, and moves the same share of every device, whose bandwidth is \
         kept). Each load: 8 jobs, each on its own eighth of the device (fio's \
         `offset_increment`), QD128, for {ms} ms of virtual time ({rms} ms for random writes \
         and the mixed loads, whose compaction and GC cycle lasts seconds) after a {ramp} ms \
         ramp in which the cache turns over to the load. docs/csal.md (Reproduction) says why; \
         docs/csal.md and docs/baselines.md describe the engines and what was chosen where the paper is \
         silent.\n",
        div = s.divisor,
        chunk = experiments::chunk_bytes(s) >> 10,
        ms = s.runtime_ms,
        rms = s.random_write_runtime_ms,
        warm = experiments::warmup_ms(s),
        ramp = experiments::ramp_ms(s),
    );
}

/// A table of `metric` with one row per system and one column per category, and its bars.
#[allow(clippy::too_many_arguments)]
fn table(
    out: &mut String,
    r: &Results<Key>,
    plots: &mut Plots,
    stem: &str,
    title: &str,
    metric: Metric,
    y: &str,
    cats: &[Category],
) -> Result<(), Error> {
    let _ = write!(out, "{title} ({y}):\n\n| system |");
    for (c, _) in cats {
        let _ = write!(out, " {c} |");
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(cats.len()));
    out.push('\n');
    let mut series = Vec::new();
    for sys in Sys::ALL {
        let _ = write!(out, "| {} |", sys.name());
        let mut values = Vec::new();
        for (_, key) in cats {
            let v = r.get(&key(sys), metric);
            let _ = write!(out, " {} |", v.map_or("—".into(), |v| fmt_metric(v, metric)));
            values.push(v);
        }
        out.push('\n');
        series.push(Series { name: sys.name().into(), values });
    }
    out.push('\n');
    let names: Vec<String> = cats.iter().map(|(c, _)| c.clone()).collect();
    plots.bars(out, stem, title, y, &names, &series)
}

fn fig10(out: &mut String, r: &Results<Key>, plots: &mut Plots, mode: Mode) -> Result<(), Error> {
    let planned = experiments::keys(mode);
    for seq in [false, true] {
        let cats: Vec<Category> = SIZES_KIB
            .iter()
            .copied()
            .filter(|&bs| {
                planned.iter().any(|k| k.load == Load::Write { seq, bs_kib: bs, zipf_x10: 0 })
            })
            .map(|bs| {
                let f: KeyOf =
                    Box::new(move |s| Key::new(s, Load::Write { seq, bs_kib: bs, zipf_x10: 0 }));
                (format!("{bs} KiB"), f)
            })
            .collect();
        let what = if seq { "sequential" } else { "random" };
        table(
            out,
            r,
            plots,
            &format!("fig10-{what}"),
            &format!("Fig. 10: uniform {what} writes"),
            Metric::WriteGbps,
            "GB/s",
            &cats,
        )?;
    }
    Ok(())
}

/// A figure over the two sizes and the three skews.
fn by_skew(
    out: &mut String,
    r: &Results<Key>,
    plots: &mut Plots,
    stem: &str,
    title: &str,
    metric: Metric,
    load: fn(u32, u32) -> Load,
) -> Result<(), Error> {
    let mut cats: Vec<Category> = Vec::new();
    for bs in TWO_SIZES_KIB {
        for z in experiments::SKEWS_X10 {
            let name = if z == 0 {
                format!("{bs} KiB uniform")
            } else {
                format!("{bs} KiB Zipf {:.1}", z as f64 / 10.0)
            };
            cats.push((name, Box::new(move |s| Key::new(s, load(bs, z)))));
        }
    }
    let y = match metric {
        Metric::Waf(_) => "WAF",
        _ => "GB/s",
    };
    table(out, r, plots, stem, title, metric, y, &cats)
}

fn fig14(out: &mut String, r: &Results<Key>, plots: &mut Plots) -> Result<(), Error> {
    let cats: Vec<Category> = TWO_SIZES_KIB
        .iter()
        .map(|&bs| {
            let f: KeyOf = Box::new(move |s| Key::new(s, Load::Mixed { write_kib: bs }));
            (format!("{bs} KiB writes"), f)
        })
        .collect();
    table(
        out,
        r,
        plots,
        "fig14",
        "Fig. 14: mixed random reads and writes",
        Metric::TotalGbps,
        "GB/s",
        &cats,
    )
}

/// Figs. 16-17: each system's user writes beside its background traffic, from its counters.
fn backend(out: &mut String, r: &Results<Key>, _plots: &mut Plots) -> Result<(), Error> {
    // (system, its engine layer, (label, counter) of each background stream)
    type Row<'a> = (Sys, &'a str, &'a [(&'a str, &'a str)]);
    let rows: [Row; 4] = [
        (Sys::OpenCas, "opencas", &[("flush", "flushed_blocks")]),
        (
            Sys::DmZoned,
            "dmzoned",
            &[("RC-1", "reclaim_rc1_blocks"), ("RC-2", "reclaim_rc2_blocks")],
        ),
        (Sys::CsalBlk, "csal", &[("CP", "compaction_blocks_written"), ("GC", "gc_blocks_written")]),
        (Sys::CsalZns, "csal", &[("CP", "compaction_blocks_written"), ("GC", "gc_blocks_written")]),
    ];
    for bs in TWO_SIZES_KIB {
        let _ = writeln!(
            out,
            "{bs} KiB random writes, GB/s (the engines' counters over the measured window):\n\n\
             | system | user writes | background |\n|---|---|---|"
        );
        for (sys, layer, counters) in rows {
            let k = Key::new(sys, Load::rand_write(bs, 0));
            let user = r.get(&k, Metric::WriteGbps);
            let bg: Vec<String> = counters
                .iter()
                .map(|(name, c)| {
                    let v = r.get(&k, Metric::LayerGbps(layer, c, 4096));
                    format!("{name} {}", v.map_or("—".into(), |v| fmt_metric(v, Metric::WriteGbps)))
                })
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                sys.name(),
                user.map_or("—".into(), |v| fmt_metric(v, Metric::WriteGbps)),
                bg.join(", ")
            );
        }
        out.push('\n');
    }
    Ok(())
}

fn fig18(out: &mut String, r: &Results<Key>, plots: &mut Plots) -> Result<(), Error> {
    variants(
        out,
        r,
        plots,
        "fig18",
        "Fig. 18: WAF of the QLC device by isolation (CSAL-ZNS)",
        Metric::Waf("qlc"),
        &[
            (Variant::NoIsolation, "no isolation"),
            (Variant::GcIsolation, "GC isolation"),
            (Variant::Default, "GC + user isolation"),
        ],
        &experiments::SKEWS_X10,
    )
}

fn fig19(out: &mut String, r: &Results<Key>, plots: &mut Plots) -> Result<(), Error> {
    variants(
        out,
        r,
        plots,
        "fig19",
        "Fig. 19: CSAL-ZNS write throughput by L2P cache",
        Metric::WriteGbps,
        &[
            (Variant::L2pNone, "no cache (10 KB)"),
            (Variant::Default, "default cache"),
            (Variant::L2pFull, "full cache"),
        ],
        &[0, 12],
    )
}

/// CSAL-ZNS's variants over the two sizes and some skews.
#[allow(clippy::too_many_arguments)]
fn variants(
    out: &mut String,
    r: &Results<Key>,
    plots: &mut Plots,
    stem: &str,
    title: &str,
    metric: Metric,
    vs: &[(Variant, &str)],
    skews: &[u32],
) -> Result<(), Error> {
    let mut cats = Vec::new();
    let mut keys = Vec::new();
    for bs in TWO_SIZES_KIB {
        for &z in skews {
            cats.push(if z == 0 {
                format!("{bs} KiB uniform")
            } else {
                format!("{bs} KiB Zipf {:.1}", z as f64 / 10.0)
            });
            keys.push((bs, z));
        }
    }
    let _ = write!(out, "{title}:\n\n| variant |");
    for c in &cats {
        let _ = write!(out, " {c} |");
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(cats.len()));
    out.push('\n');
    let mut series = Vec::new();
    for &(variant, name) in vs {
        let _ = write!(out, "| {name} |");
        let mut values = Vec::new();
        for &(bs, z) in &keys {
            let k = Key { variant, ..Key::new(Sys::CsalZns, Load::rand_write(bs, z)) };
            let v = r.get(&k, metric);
            let _ = write!(out, " {} |", v.map_or("—".into(), |v| fmt_metric(v, metric)));
            values.push(v);
        }
        out.push('\n');
        series.push(Series { name: name.into(), values });
    }
    out.push('\n');
    let y = if matches!(metric, Metric::Waf(_)) { "WAF" } else { "GB/s" };
    plots.bars(out, stem, title, y, &cats, &series)
}
