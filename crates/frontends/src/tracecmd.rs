//! `flashrig trace stats | convert | reduce | synth`: the trace tools, on top of
//! `flashrig-trace`.

use std::fmt::Write as _;
use std::path::Path;

use flashrig_trace::synth::Locality;
use flashrig_trace::{Format, LocalityStats, Options, Reader, Request, TraceStats};

use crate::error::Error;

/// How to open a trace: its format (detected when `None`), and the reader's options.
pub struct Source<'a> {
    pub path: &'a Path,
    pub format: Option<&'a str>,
    pub skip_bad: bool,
    pub assume_size_bytes: Option<u64>,
}

impl Source<'_> {
    pub fn open(&self) -> Result<Reader, Error> {
        let format = match self.format {
            Some(f) => f.parse::<Format>().map_err(|e| Error::Input(format!("format: {e}")))?,
            None => flashrig_trace::detect_file(self.path)
                .map_err(|e| Error::Input(e.to_string()))?
                .ok_or_else(|| {
                    Error::Input(format!(
                        "{}: cannot tell the trace format from its first lines; give the format",
                        self.path.display()
                    ))
                })?,
        };
        let opts = Options { skip_bad: self.skip_bad, assume_size_bytes: self.assume_size_bytes };
        flashrig_trace::open_with(self.path, format, opts).map_err(|e| Error::Input(e.to_string()))
    }

    /// Every request, and how many malformed lines were skipped.
    pub fn read_all(&self) -> Result<(Vec<Request>, u64, Format), Error> {
        let mut r = self.open()?;
        let mut v = Vec::new();
        for req in r.by_ref() {
            v.push(req.map_err(|e| Error::Input(e.to_string()))?);
        }
        Ok((v, r.skipped(), r.format()))
    }
}

/// `trace stats`: ScalaAFA Table 2's columns, WAFLASH's unaligned-write ratios, the
/// update-frequency distribution and the locality the synthetic stand-ins are built to match
/// (`flashrig_trace::LocalityReport`); as text or JSON.
pub fn stats(src: &Source, json: bool) -> Result<String, Error> {
    let mut r = src.open()?;
    let mut st = TraceStats::new();
    let mut loc = LocalityStats::new();
    for req in r.by_ref() {
        let req = req.map_err(|e| Error::Input(e.to_string()))?;
        st.add(&req);
        loc.add(&req);
    }
    let s = st.summary();
    let l = loc.report();
    if json {
        // The raw counts, and beside them the ratios docs/traces.md tabulates, so a reader
        // need not recompute them.
        let mut locality = serde_json::to_value(&l).expect("serialises");
        for (key, v) in [
            ("distinct_address_ratio", l.distinct_address_ratio()),
            ("sequential_read_fraction", l.sequential_read_fraction()),
            ("sequential_write_fraction", l.sequential_write_fraction()),
            ("read_after_write_fraction", l.read_after_write_fraction()),
            ("read_pages_written_fraction", l.read_pages_written_fraction()),
            ("footprint_ratio", l.footprint_ratio()),
            ("written_footprint_ratio", l.written_footprint_ratio()),
        ] {
            locality[key] = serde_json::json!(v);
        }
        let v = serde_json::json!({
            "trace": src.path.display().to_string(),
            "format": r.format().name(),
            "skipped_lines": r.skipped(),
            "stats": s,
            "locality": locality,
        });
        return Ok(serde_json::to_string_pretty(&v).expect("serialises") + "\n");
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} ({}, {} lines skipped)",
        src.path.display(),
        r.format().name(),
        r.skipped()
    );
    let _ = writeln!(
        out,
        "  Wr. cnt. (Kops) {:.1}   Rd. cnt. (Kops) {:.1}   Avg. wr. len. (KB) {:.1}   Avg. rd. len. (KB) {:.1}   Data wr. (GB) {:.2}   Data rd. (GB) {:.2}",
        s.write_count as f64 / 1e3,
        s.read_count as f64 / 1e3,
        s.avg_write_kib,
        s.avg_read_kib,
        s.data_written_gib,
        s.data_read_gib
    );
    let u = s.unaligned_write_ratio;
    let _ = writeln!(
        out,
        "  unaligned writes: {:.1}% for 4 KiB pages, {:.1}% for 8 KiB, {:.1}% for 16 KiB",
        u[0] * 100.0,
        u[1] * 100.0,
        u[2] * 100.0
    );
    let h = &s.update_freq_histogram;
    let pages: u64 = h.iter().sum();
    let mut line = format!("  4 KiB pages written: {pages}; written k times:");
    for (k, n) in h.iter().enumerate().skip(1).take(8) {
        let _ = write!(line, " k={k}: {n}");
    }
    if h.len() > 9 {
        let _ = write!(line, " k>8: {}", h[9..].iter().sum::<u64>());
    }
    let _ = writeln!(out, "{line}");
    let _ = writeln!(
        out,
        "  locality: {:.3} distinct addresses per request; sequential reads {:.1}%, writes \
         {:.1}%; footprint {:.3} (distinct 4 KiB pages per 4 KiB moved), written {:.3}; \
         {:.1}% of pages read were written earlier",
        l.distinct_address_ratio(),
        l.sequential_read_fraction() * 100.0,
        l.sequential_write_fraction() * 100.0,
        l.footprint_ratio(),
        l.written_footprint_ratio(),
        l.read_pages_written_fraction() * 100.0
    );
    Ok(out)
}

/// The `--locality` of `flashrig trace synth`: `published` (the default) or `none`.
pub fn parse_locality(s: &str) -> Result<Locality, Error> {
    match s {
        "published" => Ok(Locality::Published),
        "none" => Ok(Locality::None),
        other => Err(Error::Input(format!(
            "--locality {other}: expected published (the locality published for the trace, \
             docs/traces.md) or none (offsets uniform over the span)"
        ))),
    }
}

/// `trace synth`: a stand-in for the ScalaAFA Table 2 row named `like` (case-insensitive)
/// with `requests` requests (at most [`flashrig_trace::synth::MAX_REQUESTS`]) over
/// `span_bytes`, addressed as `locality` says (`flashrig_trace::synth`; docs/traces.md has
/// the sources and what the stand-ins lack). The requests come one at a time, for
/// [`write_trace`] to write without holding them all.
pub fn synth_like(
    like: &str,
    requests: u64,
    span_bytes: u64,
    seed: u64,
    locality: Locality,
) -> Result<flashrig_trace::Synth, Error> {
    let row = flashrig_trace::synth::row(like).ok_or_else(|| {
        Error::Input(format!(
            "--like {like}: not a row of ScalaAFA Table 2 ({})",
            flashrig_trace::TABLE2.iter().map(|r| r.name).collect::<Vec<_>>().join(", ")
        ))
    })?;
    // The generator needs a page to place a fresh address in; 1 MiB keeps a stand-in from
    // being all one address, as the first version's check did.
    if span_bytes < 1 << 20 {
        return Err(Error::Input(format!("--span: at least 1 MiB, got {span_bytes} bytes")));
    }
    let max = flashrig_trace::synth::MAX_REQUESTS;
    if requests > max {
        return Err(Error::Input(format!(
            "--requests {requests}: at most {max} (ScalaAFA Table 2's largest row, prn, has \
             16.8 million)"
        )));
    }
    Ok(flashrig_trace::Synth::new(row, requests, span_bytes, seed, locality))
}

/// The `--like` value that selects WAFLASH Fig. 2's noise workload.
pub const WAFLASH_NOISE: &str = "waflash-noise";
/// Prefix that selects a WAFLASH stand-in by name where ScalaAFA Table 2 has the same name
/// (CFS): `waflash-CFS`.
const WAFLASH_PREFIX: &str = "waflash-";

/// `trace synth` for any `--like`: WAFLASH Fig. 2's noise workload (`waflash-noise`, which
/// needs `unaligned_percent`), a WAFLASH stand-in (`MSNFS`, `DTR`, `RA`, `Ex`, `Web`, or any
/// of the six as `waflash-NAME`; `CFS` alone stays ScalaAFA's, whose row came first), or a
/// ScalaAFA Table 2 stand-in ([`synth_like`]). Flags that mean nothing for the chosen
/// generator are refused rather than ignored, so a typo cannot pass for a setting.
pub fn synth_trace(
    like: &str,
    requests: u64,
    span_bytes: u64,
    seed: u64,
    locality: Locality,
    unaligned_percent: Option<f64>,
) -> Result<Box<dyn Iterator<Item = Request>>, Error> {
    use flashrig_trace::waflash;
    let lower = like.to_ascii_lowercase();
    let waflash_row = if lower == WAFLASH_NOISE {
        None
    } else if let Some(name) = lower.strip_prefix(WAFLASH_PREFIX) {
        Some(waflash::row(name).ok_or_else(|| {
            Error::Input(format!(
                "--like {like}: not a WAFLASH trace ({}, or {WAFLASH_NOISE})",
                waflash::WAFLASH_TRACES.join(", ")
            ))
        })?)
    } else if flashrig_trace::synth::row(like).is_some() {
        if unaligned_percent.is_some() {
            return Err(Error::Input(format!(
                "--unaligned-percent: only for --like {WAFLASH_NOISE}, not {like}"
            )));
        }
        return Ok(Box::new(synth_like(like, requests, span_bytes, seed, locality)?));
    } else {
        Some(waflash::row(like).ok_or_else(|| {
            Error::Input(format!(
                "--like {like}: not a row of ScalaAFA Table 2 ({}) nor a WAFLASH trace ({}, \
                 or {WAFLASH_NOISE})",
                flashrig_trace::TABLE2.iter().map(|r| r.name).collect::<Vec<_>>().join(", "),
                waflash::WAFLASH_TRACES.join(", ")
            ))
        })?)
    };
    if locality != Locality::Published {
        return Err(Error::Input(format!(
            "--locality none: only for ScalaAFA Table 2 rows; the WAFLASH stand-ins always have \
             their working set ({like})"
        )));
    }
    if !span_bytes.is_multiple_of(waflash::EXTENT_BYTES) || span_bytes < 1 << 20 {
        return Err(Error::Input(format!(
            "--span: at least 1 MiB and a multiple of 16 KiB for the WAFLASH stand-ins, got \
             {span_bytes} bytes"
        )));
    }
    let max = waflash::MAX_REQUESTS;
    if requests > max {
        return Err(Error::Input(format!(
            "--requests {requests}: at most {max} for the WAFLASH stand-ins, which are built in \
             memory (Fig. 2 uses 120000)"
        )));
    }
    let reqs = match (waflash_row, unaligned_percent) {
        (Some(_), Some(_)) => {
            return Err(Error::Input(format!(
                "--unaligned-percent: only for --like {WAFLASH_NOISE}, not {like}"
            )));
        }
        (Some(row), None) => waflash::stand_in(row, requests, span_bytes, seed),
        (None, Some(p)) if (0.0..=100.0).contains(&p) => {
            waflash::noise(p / 100.0, requests, span_bytes, seed)
        }
        (None, Some(p)) => {
            return Err(Error::Input(format!("--unaligned-percent {p}: expected 0 to 100")));
        }
        (None, None) => {
            return Err(Error::Input(format!(
                "--like {WAFLASH_NOISE} needs --unaligned-percent (0 to 100): the share of \
                 writes that start 1 KiB past an 8 KiB page (WAFLASH Fig. 2 varies it from 0 \
                 to 100)"
            )));
        }
    };
    Ok(Box::new(reqs.into_iter()))
}

/// Writes `reqs` (a slice, or requests as they are made) to `out` in `to` (msr or disksim).
pub fn write_trace<R: std::borrow::Borrow<Request>>(
    reqs: impl IntoIterator<Item = R>,
    out: &Path,
    to: &str,
) -> Result<(), Error> {
    use flashrig_trace::write::{write_disksim, write_msr};
    use std::io::Write as _;
    let msr = match to {
        "msr" => true,
        "disksim" => false,
        other => return Err(Error::Input(format!("--to {other}: expected msr or disksim"))),
    };
    let f = std::fs::File::create(out)
        .map_err(|e| Error::Input(format!("cannot create {}: {e}", out.display())))?;
    let mut w = std::io::BufWriter::new(f);
    let mut res = Ok(());
    for r in reqs {
        let one = [r.borrow()];
        res = if msr { write_msr(&mut w, "flashrig", one) } else { write_disksim(&mut w, one) };
        if res.is_err() {
            break;
        }
    }
    res.and_then(|()| w.flush())
        .map_err(|e| Error::Io(format!("cannot write {}: {e}", out.display())))
}

/// `trace reduce`: the thesis' segment- or subset-based reduction, with its r² check.
pub fn reduce(
    src: &Source,
    out: &Path,
    to: &str,
    method: &str,
    capacity_bytes: Option<u64>,
    factor: Option<u64>,
) -> Result<String, Error> {
    use flashrig_trace::reduce as r;
    let (reqs, _, _) = src.read_all()?;
    let reduced = match (method, capacity_bytes, factor) {
        ("segment", Some(c), _) => r::segment_by_capacity(&reqs, 0, c / 4096),
        ("subset", _, Some(f)) => r::subset(&reqs, f),
        ("subset", Some(c), None) => r::subset_for_capacity(&reqs, c / 4096),
        ("segment", None, _) => {
            return Err(Error::Input("--method segment needs --capacity".into()));
        }
        ("subset", None, None) => {
            return Err(Error::Input("--method subset needs --factor or --capacity".into()));
        }
        (m, _, _) => return Err(Error::Input(format!("--method {m}: expected segment or subset"))),
    };
    let (a, b) = (r::update_freq(&reqs), r::update_freq(&reduced));
    let r2 = r::r_squared(&a, &b);
    write_trace(&reduced, out, to)?;
    Ok(format!(
        "{} requests -> {} ({method}); update-frequency r^2 = {r2:.4} ({} the thesis' bound {})\n",
        reqs.len(),
        reduced.len(),
        if r2 <= r::R_SQUARED_BOUND { "within" } else { "OUTSIDE" },
        r::R_SQUARED_BOUND
    ))
}
