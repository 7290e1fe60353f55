//! Streaming trace readers: one file per source format, a shared line-oriented [`Reader`]
//! driving them, and [`detect`] to guess a format from a file's first lines.
//!
//! Design: the reader reuses one line buffer and every format parses its fields straight from
//! the byte slice, so reading allocates nothing per line (error messages are the only
//! allocations, and only on bad lines). Each per-format `parse` returns `Ok(None)` for lines
//! that carry no request (headers, blank lines, blkparse events we do not replay).

mod alibaba;
mod blkparse;
mod csv;
mod disksim;
mod fiu;
mod msr;
mod spc;
mod vscsi;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::str::FromStr;

use crate::error::TraceError;
use crate::record::Request;

/// The trace formats this crate can read. `FromStr` accepts the `--format` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// MSR Cambridge CSV (SNIA IOTTA 388), optionally with a leading `idx ` column.
    Msr,
    /// FIU text traces (blkparse-derived, 512-byte blocks).
    Fiu,
    /// SPC / UMass CSV (Financial, WebSearch).
    Spc,
    /// Alibaba block-trace CSV.
    Alibaba,
    /// DiskSim ASCII as replayed by MQSim and SSDSim.
    DiskSim,
    /// CloudPhysics vscsi traces converted to CSV.
    Vscsi,
    /// `blkparse` default text output.
    Blkparse,
    /// CSV whose first line names the columns (a CloudPhysics vscsi CSV, `version,time,op,
    /// size,lbn`, for one); the columns are found by name.
    Csv,
}

impl Format {
    /// Every format, in the order [`detect`] tries them (most distinctive shape first).
    pub const ALL: [Format; 8] = [
        Format::Csv,
        Format::Blkparse,
        Format::Fiu,
        Format::DiskSim,
        Format::Msr,
        Format::Spc,
        Format::Alibaba,
        Format::Vscsi,
    ];

    /// The fields that give a record's start and length, as errors name them.
    fn extent_fields(self) -> (&'static str, &'static str) {
        match self {
            Format::Msr => ("Offset", "Size"),
            Format::Fiu | Format::DiskSim | Format::Vscsi => ("lba", "size"),
            Format::Spc => ("LBA", "Size"),
            Format::Alibaba => ("offset", "length"),
            Format::Blkparse => ("sector", "nsectors"),
            Format::Csv => ("offset", "size"),
        }
    }

    /// The `--format` name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Msr => "msr",
            Format::Fiu => "fiu",
            Format::Spc => "spc",
            Format::Alibaba => "alibaba",
            Format::DiskSim => "disksim",
            Format::Vscsi => "vscsi",
            Format::Blkparse => "blkparse",
            Format::Csv => "csv",
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = TraceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let l = s.trim().to_ascii_lowercase();
        Ok(match l.as_str() {
            "msr" => Format::Msr,
            "fiu" => Format::Fiu,
            "spc" | "umass" => Format::Spc,
            "alibaba" => Format::Alibaba,
            "disksim" | "mqsim" | "ssdsim" | "ascii" => Format::DiskSim,
            "vscsi" | "cloudphysics" => Format::Vscsi,
            "blkparse" => Format::Blkparse,
            "csv" | "named-csv" => Format::Csv,
            _ => return Err(TraceError::UnknownFormat(s.to_string())),
        })
    }
}

/// Reader options.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Skip malformed lines instead of yielding an error; see [`Reader::skipped`].
    pub skip_bad: bool,
    /// Size to assume for MSR records that have no Size column (lossy "reduced" MSR traces
    /// such as `prn_0_reduced`, `timestamp,Type,Offset`). `None` (default) rejects such records
    /// with an explicit error, because silently inventing sizes would skew every statistic.
    pub assume_size_bytes: Option<u64>,
}

/// Per-file parser state (only blkparse needs any: which event action it replays).
#[derive(Debug, Default, Clone)]
pub(crate) struct ParseState {
    /// blkparse: the action letter (b'Q' or b'D') locked in by the first Q/D event seen.
    pub blk_action: Option<u8>,
    /// blkparse: a line was an event (`maj,min cpu ...`), replayed or not; a file with none
    /// is not blkparse output at all.
    pub blk_event_seen: bool,
    /// Named-column CSV: the layout its header line gave.
    pub csv_columns: Option<csv::Columns>,
}

/// Parse one line (without its newline) of `format`.
pub(crate) fn parse_line(
    format: Format,
    line: &[u8],
    st: &mut ParseState,
    opts: &Options,
) -> Result<Option<Request>, String> {
    match format {
        Format::Msr => msr::parse(line, opts),
        Format::Fiu => fiu::parse(line),
        Format::Spc => spc::parse(line),
        Format::Alibaba => alibaba::parse(line),
        Format::DiskSim => disksim::parse(line),
        Format::Vscsi => vscsi::parse(line),
        Format::Blkparse => blkparse::parse(line, st),
        Format::Csv => csv::parse(line, st),
    }
}

/// A streaming reader yielding one [`Request`] per trace record.
pub struct Reader {
    src: Box<dyn BufRead + Send>,
    name: String,
    format: Format,
    opts: Options,
    state: ParseState,
    line_no: u64,
    buf: Vec<u8>,
    skipped: u64,
    done: bool,
    /// Requests yielded so far.
    requests: u64,
    /// The first malformed line (number, problem), skipped or reported.
    first_bad: Option<(u64, String)>,
    /// The first line with content that yielded no request (a header, an event not replayed).
    first_quiet: Option<u64>,
    /// An error was already yielded: the end of the file adds none.
    reported: bool,
}

impl Reader {
    /// Read from any buffered source; `name` is what errors call the file.
    pub fn from_bufread(
        name: impl Into<String>,
        src: Box<dyn BufRead + Send>,
        format: Format,
        opts: Options,
    ) -> Reader {
        Reader {
            src,
            name: name.into(),
            format,
            opts,
            state: ParseState::default(),
            line_no: 0,
            buf: Vec::with_capacity(256),
            skipped: 0,
            done: false,
            requests: 0,
            first_bad: None,
            first_quiet: None,
            reported: false,
        }
    }

    /// Number of malformed lines skipped so far (only non-zero with `skip_bad`).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Number of lines read so far (including headers, blank and skipped lines).
    pub fn lines_read(&self) -> u64 {
        self.line_no
    }

    /// The format being read.
    pub fn format(&self) -> Format {
        self.format
    }

    /// At the end of the file: an error when no line of it was a record of the format (a
    /// wrong `--format`, or a file that is not a trace), naming the format and the first
    /// line that is not one of its records. Lines skipped as malformed count as not.
    fn end_of_file(&mut self) -> Option<TraceError> {
        if self.requests > 0 || self.reported {
            return None;
        }
        let format = self.format;
        let (line, msg) = match self.first_bad.take() {
            Some((line, msg)) => (
                line,
                format!(
                    "no line reads as a {format} trace ({} malformed lines skipped); the first: \
                     {msg}",
                    self.skipped
                ),
            ),
            None if format == Format::Blkparse && !self.state.blk_event_seen => (
                self.first_quiet?,
                format!(
                    "no line reads as a {format} trace: none is a blkparse event ({})",
                    blkparse::SHAPE
                ),
            ),
            None => return None,
        };
        Some(TraceError::Parse { file: self.name.clone(), line, msg })
    }
}

impl Iterator for Reader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.buf.clear();
            match self.src.read_until(b'\n', &mut self.buf) {
                Ok(0) => {
                    self.done = true;
                    return self.end_of_file().map(Err);
                }
                Ok(_) => {}
                Err(e) => {
                    // An I/O error is not a bad line: stop rather than loop on it forever.
                    self.done = true;
                    return Some(Err(TraceError::Io { file: self.name.clone(), source: e }));
                }
            }
            self.line_no += 1;
            let mut line: &[u8] = &self.buf;
            while let [rest @ .., b'\n' | b'\r'] = line {
                line = rest;
            }
            // A record whose end does not fit in 64 bits is malformed, not wrapped around, and
            // so is one too large to be a request. (Not checked in `parse_line`, so that
            // detection still recognises the file's format.)
            let parsed =
                parse_line(self.format, line, &mut self.state, &self.opts).and_then(|r| match &r {
                    Some(req) => check_end(req, self.format.extent_fields()).map(|()| r),
                    None => Ok(r),
                });
            match parsed {
                Ok(Some(r)) => {
                    self.requests += 1;
                    return Some(Ok(r));
                }
                Ok(None) => {
                    if self.first_quiet.is_none() && !is_blank(line) {
                        self.first_quiet = Some(self.line_no);
                    }
                    continue;
                }
                Err(msg) => {
                    if self.opts.skip_bad {
                        self.skipped += 1;
                        if self.first_bad.is_none() {
                            self.first_bad = Some((self.line_no, msg));
                        }
                        continue;
                    }
                    // Before any record, the format itself may be wrong: say which was used.
                    let msg = if self.requests == 0 {
                        format!("{msg} (reading the file as {})", self.format)
                    } else {
                        msg
                    };
                    self.reported = true;
                    return Some(Err(TraceError::Parse {
                        file: self.name.clone(),
                        line: self.line_no,
                        msg,
                    }));
                }
            }
        }
        None
    }
}

/// Open `path` as `format` with default [`Options`] (errors on bad lines).
pub fn open(path: impl AsRef<Path>, format: Format) -> Result<Reader, TraceError> {
    open_with(path, format, Options::default())
}

/// Open `path` as `format` with explicit [`Options`].
pub fn open_with(
    path: impl AsRef<Path>,
    format: Format,
    opts: Options,
) -> Result<Reader, TraceError> {
    let path = path.as_ref();
    // Errors name only the file's last component, as in `hm_0.csv:17: ...`.
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let f = File::open(path).map_err(|source| TraceError::Io { file: name.clone(), source })?;
    Ok(Reader::from_bufread(name, Box::new(BufReader::with_capacity(1 << 16, f)), format, opts))
}

/// Guess a file's format from its first 20 lines, reading at most 64 KiB of it (so a
/// multi-GB trace is not read to detect it); `Ok(None)` when no format fits. See [`detect`].
pub fn detect_file(path: impl AsRef<Path>) -> Result<Option<Format>, TraceError> {
    use std::io::Read;
    let path = path.as_ref();
    let file = path
        .file_name()
        .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let mut head = Vec::new();
    File::open(path)
        .and_then(|f| f.take(64 * 1024).read_to_end(&mut head))
        .map_err(|source| TraceError::Io { file, source })?;
    let text = String::from_utf8_lossy(&head);
    let lines: Vec<&str> = text.lines().take(20).collect();
    Ok(detect(&lines))
}

/// Guess the format from a file's first lines: the first format (in [`Format::ALL`] order)
/// that parses every given line without error and yields at least one request; failing that,
/// the format that reads the most of them as requests, as long as those are at least as many
/// as the lines it cannot read. So a malformed line among good ones does not hide the format:
/// reading then stops at that line with its own error (`file:line: problem`). Reduced MSR
/// traces without sizes are recognised as `msr` (reading them still needs
/// [`Options::assume_size_bytes`]).
pub fn detect(first_lines: &[&str]) -> Option<Format> {
    let opts = Options { skip_bad: false, assume_size_bytes: Some(4096) };
    let mut best: Option<(Format, usize)> = None;
    for f in Format::ALL {
        let mut st = ParseState::default();
        let (mut records, mut bad) = (0, 0);
        for l in first_lines {
            let l = l.trim_end_matches(['\r', '\n']);
            match parse_line(f, l.as_bytes(), &mut st, &opts) {
                Ok(Some(_)) => records += 1,
                Ok(None) => {}
                Err(_) => bad += 1,
            }
        }
        if records > 0 && bad == 0 {
            return Some(f);
        }
        if records > 0 && records >= bad && best.is_none_or(|(_, most)| records > most) {
            best = Some((f, records));
        }
    }
    best.map(|(f, _)| f)
}

// ---- shared field helpers: byte-slice based so parsing never allocates on good lines ----

/// Strip ASCII spaces/tabs at both ends.
pub(crate) fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// A field rendered for an error message, bounded so a binary blob cannot flood the terminal.
pub(crate) fn show(s: &[u8]) -> String {
    let s = &s[..s.len().min(40)];
    String::from_utf8_lossy(s).into_owned()
}

/// Parse an unsigned decimal integer field.
pub(crate) fn parse_u64(field: &[u8], what: &str) -> Result<u64, String> {
    let f = trim(field);
    if f.is_empty() {
        return Err(format!("{what} is empty"));
    }
    let mut v: u64 = 0;
    for &b in f {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return Err(format!("{what} `{}` is not a number", show(f)));
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(d as u64))
            .ok_or_else(|| format!("{what} `{}` is too large", show(f)))?;
    }
    Ok(v)
}

/// Parse a u32 field (device numbers).
pub(crate) fn parse_u32(field: &[u8], what: &str) -> Result<u32, String> {
    let v = parse_u64(field, what)?;
    u32::try_from(v).map_err(|_| format!("{what} `{v}` is too large"))
}

/// Parse a non-negative finite float field.
pub(crate) fn parse_f64(field: &[u8], what: &str) -> Result<f64, String> {
    let f = trim(field);
    let v: f64 = std::str::from_utf8(f)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{what} `{}` is not a number", show(f)))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{what} `{}` is not a non-negative number", show(f)));
    }
    Ok(v)
}

/// Seconds (float) to nanoseconds, rejecting values that do not fit in u64.
pub(crate) fn secs_to_ns(s: f64, what: &str) -> Result<u64, String> {
    let ns = (s * 1e9).round();
    if ns >= u64::MAX as f64 {
        return Err(format!("{what} `{s}` is out of range"));
    }
    Ok(ns as u64)
}

/// `a * b` or an out-of-range error naming the field.
pub(crate) fn mul(a: u64, b: u64, what: &str) -> Result<u64, String> {
    a.checked_mul(b).ok_or_else(|| format!("{what} `{a}` is out of range"))
}

/// The largest request a trace record may describe: 1 GiB. Block layers split I/O far smaller
/// (Linux's `max_sectors_kb` and NVMe's MDTS allow a few MiB), so a larger size is a misread
/// field (a timestamp read as a size, a file read in the wrong format) or a damaged line; and
/// the statistics, which account every 4 KiB page a request touches, would spend minutes and
/// gigabytes on one such line (found by fuzzing: a 40-byte trace stalled `trace stats`).
pub const MAX_REQUEST_BYTES: u64 = 1 << 30;

/// Rejects a request whose end, `offset + size` in bytes, does not fit in 64 bits (it would
/// wrap around to the start of the device), or that is larger than [`MAX_REQUEST_BYTES`];
/// `off` and `size` name the fields.
fn check_end(r: &Request, (off, size): (&str, &str)) -> Result<(), String> {
    if r.size_bytes > MAX_REQUEST_BYTES {
        return Err(format!(
            "{size} gives a request of {} bytes, more than the {MAX_REQUEST_BYTES} bytes (1 GiB) \
             a trace record may describe",
            r.size_bytes
        ));
    }
    match r.offset_bytes.checked_add(r.size_bytes) {
        Some(_) => Ok(()),
        None => Err(format!(
            "{off} + {size} overflows: a request at byte {} of {} bytes would end past 2^64 - 1",
            r.offset_bytes, r.size_bytes
        )),
    }
}

/// Whitespace-separated fields.
pub(crate) fn ws_fields(line: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    line.split(|b| b.is_ascii_whitespace()).filter(|f| !f.is_empty())
}

/// True for lines with no content (only whitespace and separators), e.g. prn_0's trailing `,,`.
pub(crate) fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|&b| b.is_ascii_whitespace() || b == b',')
}

/// Fetch field `i` of a split, or a "missing field" error.
pub(crate) fn need<'a>(
    f: Option<&'a [u8]>,
    what: &str,
    expected: &str,
) -> Result<&'a [u8], String> {
    f.ok_or_else(|| format!("missing field {what} (expected {expected})"))
}

/// `R`/`Read`/`r` → false, `W`/`Write`/`w` → true (case-insensitive).
pub(crate) fn parse_rw(field: &[u8], what: &str) -> Result<bool, String> {
    let f = trim(field);
    if f.eq_ignore_ascii_case(b"w") || f.eq_ignore_ascii_case(b"write") {
        Ok(true)
    } else if f.eq_ignore_ascii_case(b"r") || f.eq_ignore_ascii_case(b"read") {
        Ok(false)
    } else {
        Err(format!("{what} `{}` is neither read nor write", show(f)))
    }
}
