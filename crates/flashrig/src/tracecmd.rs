//! `flashrig trace stats | convert | reduce`: the trace tools, on top of `flashrig-trace`.

use std::fmt::Write as _;
use std::path::Path;

use flashrig_trace::{Format, Options, Reader, Request, TraceStats};

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
            Some(f) => f.parse::<Format>().map_err(|e| Error::Input(format!("--format: {e}")))?,
            None => {
                let text = std::fs::read(self.path).map_err(|e| {
                    Error::Input(format!("cannot read {}: {e}", self.path.display()))
                })?;
                let head = String::from_utf8_lossy(&text[..text.len().min(64 * 1024)]);
                let lines: Vec<&str> = head.lines().take(20).collect();
                flashrig_trace::detect(&lines).ok_or_else(|| {
                    Error::Input(format!(
                        "{}: cannot tell the trace format from its first lines; give --format",
                        self.path.display()
                    ))
                })?
            }
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

/// `trace stats`: ScalaAFA Table 2's columns, WAFLASH's unaligned-write ratios, and the
/// update-frequency distribution; as text or JSON.
pub fn stats(src: &Source, json: bool) -> Result<String, Error> {
    let mut r = src.open()?;
    let mut st = TraceStats::new();
    for req in r.by_ref() {
        st.add(&req.map_err(|e| Error::Input(e.to_string()))?);
    }
    let s = st.summary();
    if json {
        let v = serde_json::json!({
            "trace": src.path.display().to_string(),
            "format": r.format().name(),
            "skipped_lines": r.skipped(),
            "stats": s,
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
    Ok(out)
}

/// Writes `reqs` to `out` in `to` (msr or disksim).
pub fn write_trace(reqs: &[Request], out: &Path, to: &str) -> Result<(), Error> {
    let f = std::fs::File::create(out)
        .map_err(|e| Error::Input(format!("cannot create {}: {e}", out.display())))?;
    let w = std::io::BufWriter::new(f);
    let res = match to {
        "msr" => flashrig_trace::write::write_msr(w, "flashrig", reqs),
        "disksim" => flashrig_trace::write::write_disksim(w, reqs),
        other => {
            return Err(Error::Input(format!("--to {other}: expected msr or disksim")));
        }
    };
    res.map_err(|e| Error::Io(format!("cannot write {}: {e}", out.display())))
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
