//! The document's setup section: the paper's systems and the engines that stand in for them,
//! the SSDs at reduced scale and what the reduction does to their bandwidth (measured), the
//! runs, the traces, and how to read the comparison tables.

use std::fmt::Write as _;

use flashrig_frontends::size::Size;
use flashrig_ssd::SsdConfig;
use flashrig_trace::synth::TABLE2;

use super::experiments::runtime_ms;
use super::traces::{replayed, TraceRun};
use super::{CheckScale, Key};
use crate::core::scale::reduce_ssd;
use crate::core::{Metric, Results};

pub(super) fn render(out: &mut String, r: &Results<Key>, traces: &[TraceRun]) {
    let mode = r.mode;
    let div = mode.divisor();
    let femu = SsdConfig::preset("scalaafa-femu").ok();
    let reduced =
        femu.clone().and_then(|mut c| reduce_ssd(&mut c, mode.reduction()).ok().map(|_| c));
    let _ = writeln!(
        out,
        "**Systems.** The paper's systems (§6.1) and the flashrig engines that stand in for \
         them; the host cost profiles are docs/cost-model.md's.\n\n\
         | paper | flashrig | host profile | notes |\n|---|---|---|---|\n\
         | mdraid | `raid` | kernel (+ md's shared-lock model) | md's default 256-stripe cache |\n\
         | RAID5F | `raid`, `mode = \"full-stripe\"` | user | full-stripe RAID 5 only |\n\
         | FusionRAID | `twophase` | kernel (+ shared-lock model) | host conversion past a 5% watermark |\n\
         | ScalaAFA | `scala`, `conversion = \"auto\"`, `transient_tags = true` | user | members with `firmware.vendor_convert = true` and `slc_evictor = \"transient\"`; one more reactor for the space manager (§5.6) |\n\
         | Scala-CO | `scala`, `conversion = \"host\"` | user | ScalaAFA's members |\n\
         | Scala-WR | `scala`, `transient_tags = false` | user | ScalaAFA's members |\n\n\
         ScalaRAID and stRAID (Figs. 9-11) have no flashrig engine and are left out.\n"
    );
    if let (Some(f), Some(c)) = (&femu, &reduced) {
        let layout = |c: &SsdConfig| flashrig_ssd::media::Layout::new(c).ok();
        let (lf, lc) = (layout(f), layout(c));
        let cap = |l: &Option<flashrig_ssd::media::Layout>| {
            l.as_ref().map_or(String::new(), |l| {
                flashrig_frontends::run::human_bytes(l.capacity_bytes() as f64)
            })
        };
        let slc = |c: &SsdConfig, l: &Option<flashrig_ssd::media::Layout>| {
            l.as_ref().map_or(String::new(), |l| {
                let line = l.slots_per_line_slc as u64 * l.iu_bytes as u64;
                format!(
                    "{} = {} SLC lines of {}",
                    Size(c.firmware.slc_cache_bytes),
                    l.slc_lines,
                    Size(line)
                )
            })
        };
        let (b, p) = mode.reduction();
        let _ = writeln!(
            out,
            "**SSDs at 1/{div}.** Every member is the `scalaafa-femu` preset (§6.1, Table 1) \
             with payload `none` and shorter blocks:\n\n\
             | key | full scale | here | rule |\n|---|---|---|---|\n\
             | `geometry.blocks_per_plane` (lines) | {} | {} | ÷ {b} |\n\
             | `geometry.pages_per_block` | {} | {} | ÷ {p} |\n\
             | `firmware.slc_cache_bytes` | {} | {} | ÷ {div} |\n\
             | `firmware.gc_foreground_free_lines` | {} | {} | 5% of the dense lines (FEMU's `gc_thres_pcent_high`) |\n\
             | `firmware.gc_background_free_lines` | {} | {} | 25% of the dense lines (FEMU's `gc_thres_pcent`), at most the spare lines − 3 |\n\
             | `firmware.slc_evict_free_lines` | {} | {} | unchanged |\n\
             | `nand.erase_ns` / `nand.slc_erase_ns` | {} / {} ns | {} / {} ns | ÷ {p}: the erase time per programmed page kept |\n\
             | scala `grant_heroes` (VHs per grant) | 1024 | {} | ÷ {div}: the same share of the transient area (1.25%) |\n\
             | logical capacity | {} | {} | |\n\
             | microbenchmark run time | {} ms | {} ms | ÷ {div}, rounded to a millisecond |\n\
             | Fig. 15 run time (all three systems) | — | {} | ten of ScalaAFA's reserves of free VHs at the ideal rate (*Which phase each run measured*) |\n\
             | trace length | Table 2 | Table 2 ÷ {div} | |\n",
            f.geometry.blocks_per_plane,
            c.geometry.blocks_per_plane,
            f.geometry.pages_per_block,
            c.geometry.pages_per_block,
            slc(f, &lf),
            slc(c, &lc),
            f.firmware.gc_foreground_free_lines,
            c.firmware.gc_foreground_free_lines,
            f.firmware.gc_background_free_lines,
            c.firmware.gc_background_free_lines,
            f.firmware.slc_evict_free_lines,
            c.firmware.slc_evict_free_lines,
            f.nand.erase_ns,
            f.nand.slc_erase_ns,
            c.nand.erase_ns,
            c.nand.slc_erase_ns,
            crate::core::scale::scaled_count(1024, mode),
            cap(&lf),
            cap(&lc),
            runtime_ms(mode) * div,
            runtime_ms(mode),
            sources_window(r),
        );
    }
    scale_check(out, r);
    let _ = writeln!(
        out,
        "**Runs.** Deterministic simulation (seed 1), microbenchmarks over the whole array. \
         ScalaAFA, Scala-CO and Scala-WR microbenchmarks and FSR-Conv start at their engine's \
         conversion point, every other run fresh (see *Which phase each run measured*). Each \
         scala run has one reactor for its space manager beside the I/O threads' (§5.6: a \
         daemon thread pinned to its own core). {}\n",
        r.plan.skipped.iter().map(|s| format!("{s}.")).collect::<Vec<_>>().join(" ")
    );
    traces_table(out, r, traces);
    let _ = writeln!(
        out,
        "**Reading the tables.** *ours / paper* is our number divided by the paper's; \
         *direction* says whether ours points the way the paper's text does: a ratio the paper \
         calls a gain (\"improves by 2.4×\") asserts >1, a reduction (\"reduces latency to \
         24.2%\") <1, \"almost the same as the ideal\" ≈1 within 10% (and \"only 37.5% of the \
         ideal\" <0.9), \"the highest of all workloads\" an ordering of runs; an absolute \
         number asserts none (—). Where ours is off by more than 25%, or points the other way \
         at any magnitude, the *why* column says which of our models set the numbers (cost \
         profiles, SSD timing, scale, synthetic traces) and what bounded each run, from its \
         result file: whether the busiest reactor was saturated by the cost model \
         (host-bound) or not (device-bound), how much the SSDs' SLC caches overflowed into MLC, \
         SSD GC, writes that waited for host conversion, partial-stripe writes and offloaded \
         conversions. Averages (\"on average\") are means of the per-case ratios.\n"
    );
}

/// The measured window of Fig. 15's scala runs, read from the plan.
fn sources_window(r: &Results<Key>) -> String {
    let window = r.plan.keys.iter().find_map(|(key, &i)| match key {
        Key::Sources { .. } => r.plan.jobs[i].config.workload.runtime_ms,
        _ => None,
    });
    window.map_or("—".into(), |ms| format!("{ms} ms"))
}

/// What the reduction does to one SSD's bandwidth, measured.
fn scale_check(out: &mut String, r: &Results<Key>) {
    let mode = r.mode;
    let div = mode.divisor();
    let p = mode.reduction().1;
    let check = |scale, long| r.get(&Key::ScaleCheck { scale, long }, Metric::WriteGbps);
    let fmt = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.2} GB/s"));
    let rel = |v: Option<f64>, base: Option<f64>| match (v, base) {
        (Some(v), Some(b)) => format!(" ({:+.0}%)", (v / b - 1.0) * 100.0),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "What the reduction does to an SSD's bandwidth: a write's time comes from the channels (8 × 937.5 MB/s), the \
         96 dies (each programs one page at a time: 75 µs in SLC mode, 80.4 µs in MLC) and the \
         queues; none depends on how many pages a block has, and a line still spans all 96 \
         dies. What capacity sets is *when* things happen — the SLC cache filling, the \
         two-phase watermark (5% of capacity), GC — so every run shrinks by the same factor: \
         microbenchmarks run {} ms instead of the full-scale experiments' 1 s (the paper does \
         not state fio's run time), and traces replay 1/{div} of Table 2's requests, so the \
         bytes written per byte of capacity, SLC cache and watermark are the full-scale run's. \
         Shortening blocks rather than removing them keeps every line-counted parameter (the \
         43 SLC lines, the evictor's one free line, the GC thresholds) as the preset has it; \
         removing blocks (`blocks_per_plane`, at most ÷ 16 = 22 lines) leaves the SLC cache 3 \
         lines, one of which the evictor keeps free. Shorter blocks would raise the erase \
         (2 ms per block) per byte programmed — at 1/8 an SLC erase would take 45% of a \
         line's plane time instead of 9% — so the erase time shrinks with the pages per block, \
         and ScalaAFA's grant batch (1,024 VHs, 1.25% of a member's VHs) with the transient \
         area. What the reduction still distorts: an erase blocks its plane for 1/{p} of the \
         time, {p} times as often, so a write that queues behind one waits less each time; \
         SLC eviction empties lines that are 1/{p} as large, so with \
         `slc_eviction = \"inline\"` an eviction's head-of-line stall is shorter and more \
         frequent (paced eviction has none, and the preset's idle-time eviction works only \
         while the device idles; docs/ssd.md); the space manager's checkpoints \
         (the AMT scales with capacity) and the checkpoint's fixed header do not shrink in \
         the same proportion; and events that happen a fixed number of times per run (the \
         first grant, the first eviction) weigh {div} times more in a run {div} times \
         shorter. Measured, one member alone, 64 KiB sequential writes at QD32:\n\n\
         | run (full-scale length) | full scale | reduced as here | `blocks_per_plane` ÷ 16 alone |\n\
         |---|---|---|---|\n\
         | {} ms: the microbenchmarks' | {} | {}{} | {}{} |\n\
         | {} ms: 3× longer, deep into SLC eviction | {} | {}{} | {}{} |\n",
        runtime_ms(mode),
        runtime_ms(mode) * div,
        fmt(check(CheckScale::Full, false)),
        fmt(check(CheckScale::Reduced, false)),
        rel(check(CheckScale::Reduced, false), check(CheckScale::Full, false)),
        fmt(check(CheckScale::BlocksOnly, false)),
        rel(check(CheckScale::BlocksOnly, false), check(CheckScale::Full, false)),
        runtime_ms(mode) * div * 3,
        fmt(check(CheckScale::Full, true)),
        fmt(check(CheckScale::Reduced, true)),
        rel(check(CheckScale::Reduced, true), check(CheckScale::Full, true)),
        fmt(check(CheckScale::BlocksOnly, true)),
        rel(check(CheckScale::BlocksOnly, true), check(CheckScale::Full, true)),
    );
}

/// The traces replayed, beside their Table 2 rows.
fn traces_table(out: &mut String, r: &Results<Key>, traces: &[TraceRun]) {
    let _ = writeln!(
        out,
        "**Traces** (Figs. 12, 13, 16), replayed in a closed loop at QD32 (§6.3). None of \
         Table 2's traces is in `/work/shared/traces` with its request sizes (MANIFEST.txt: \
         the MSR prn_0 slice there has no sizes or precise times), so each row is synthetic: \
         the row's read/write mix and mean request sizes, exponential sizes in 512-byte \
         sectors (rounded out to 4 KiB blocks on replay), and the locality published for the \
         trace or its closest characterised relative (working-set size, hot/cold reuse, \
         sequential runs; [docs/traces.md](traces.md) cites each statistic and marks what is \
         assumed); a real trace that lacks sizes replays as a supplementary row with 4 KiB \
         assumed and is not compared.\n"
    );
    let _ = writeln!(
        out,
        "| trace | Table 2: writes / reads (Kops), mean write / read (KB) | replayed | source |"
    );
    let _ = writeln!(out, "|---|---|---|---|");
    for t in traces {
        let row = TABLE2.iter().find(|row| row.name == t.name);
        let _ = writeln!(
            out,
            "| {} | {} | {} requests | {} |",
            t.name,
            row.map_or("(not in Table 2)".into(), |row| format!(
                "{} / {}, {} / {}",
                row.writes_kops, row.reads_kops, row.avg_write_kb, row.avg_read_kb
            )),
            replayed(r, t),
            t.source
        );
    }
    out.push('\n');
}
