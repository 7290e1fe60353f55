//! fio job files: users already describe workloads in fio's syntax, so `flashrig run --fio
//! job.fio` reads one and runs it on a flashrig stack.
//!
//! The file is fio's INI dialect: `[section]` headers, `key=value` or bare `key` flags, `#` and
//! `;` comment lines, `${VAR}` environment expansion, and a `[global]` section whose options
//! apply to the job sections after it. Each option either maps onto [`WorkloadConfig`] with
//! fio's meaning, is accepted and ignored because it has no meaning on a flashrig stack (the
//! I/O engine, `direct`, the file name: the stack comes from the flashrig configuration), or is
//! an error naming the file, line and option, so a job never silently runs differently from
//! what its file says.
//!
//! fio runs the job sections of a file together; flashrig runs one workload per run, so a file
//! with several job sections needs `--section NAME` to pick one.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::{Pattern, WorkloadConfig, MAX_IODEPTH, MAX_JOBS};
use crate::distribution::Distribution;
use crate::error::Error;
use crate::size::{parse_size, BlockSizeMix, Size};

/// A job section converted to a flashrig workload.
#[derive(Clone, Debug)]
pub struct FioJob {
    /// The section's name.
    pub name: String,
    pub workload: WorkloadConfig,
    /// `randseed`, when the file sets it.
    pub seed: Option<u64>,
    /// One line per option accepted without effect, to print to the user.
    pub notes: Vec<String>,
}

/// An option with the line it came from, for messages.
#[derive(Clone, Debug)]
struct Opt {
    value: Option<String>,
    line: usize,
}

type Section = BTreeMap<String, Opt>;

/// Options that describe how fio reaches its file or what it logs; on a flashrig stack they
/// have no meaning, and the reason is printed once per option.
const IGNORED: &[(&str, &str)] = &[
    ("ioengine", "flashrig issues requests through its own runtime"),
    ("direct", "flashrig stacks have no page cache"),
    ("buffered", "flashrig stacks have no page cache"),
    ("filename", "the device stack comes from the flashrig configuration"),
    ("directory", "the device stack comes from the flashrig configuration"),
    ("name", "the section name is used"),
    ("description", "descriptive only"),
    ("group_reporting", "flashrig reports each job and the total"),
    ("thread", "flashrig jobs are tasks on its reactors"),
    ("norandommap", "flashrig's random offsets never keep a map"),
    ("randrepeat", "flashrig runs repeat for a seed; set randseed or --seed"),
    ("invalidate", "flashrig stacks have no page cache"),
    ("iodepth_batch", "flashrig submits each request when a slot frees"),
    ("iodepth_batch_submit", "flashrig submits each request when a slot frees"),
    ("iodepth_batch_complete", "flashrig reaps each completion as it arrives"),
    ("iodepth_batch_complete_min", "flashrig reaps each completion as it arrives"),
    ("iodepth_batch_complete_max", "flashrig reaps each completion as it arrives"),
    ("iodepth_low", "flashrig refills each slot at once"),
    ("stonewall", "one job section runs per flashrig run"),
    ("wait_for_previous", "one job section runs per flashrig run"),
    ("new_group", "one job section runs per flashrig run"),
    ("exitall", "one job section runs per flashrig run"),
    ("allow_mounted_write", "flashrig writes its own stack"),
    ("clat_percentiles", "flashrig always reports percentiles and the full CDF"),
    ("lat_percentiles", "flashrig always reports percentiles and the full CDF"),
    ("percentile_list", "flashrig always reports percentiles and the full CDF"),
    ("unified_rw_reporting", "flashrig reports reads, writes and both"),
    ("gtod_reduce", "flashrig's clock is the runtime's"),
    ("disable_lat", "flashrig always records latency"),
    ("disable_clat", "flashrig always records latency"),
    ("disable_slat", "flashrig always records latency"),
    ("disable_bw_measurement", "flashrig always records bandwidth"),
    ("write_bw_log", "flashrig writes a per-second series into the result file"),
    ("write_lat_log", "flashrig writes a per-second series into the result file"),
    ("write_iops_log", "flashrig writes a per-second series into the result file"),
    ("log_avg_msec", "flashrig writes a per-second series into the result file"),
    ("zero_buffers", "written blocks carry flashrig's verifiable pattern"),
    ("refill_buffers", "written blocks carry flashrig's verifiable pattern"),
    ("scramble_buffers", "written blocks carry flashrig's verifiable pattern"),
    ("random_generator", "flashrig uses its own seeded generator"),
    ("kb_base", "sizes are binary (1024), fio's default"),
];

impl FioJob {
    /// Reads a job file and converts one job section: `section`, or the only one there is.
    pub fn load(path: &Path, section: Option<&str>) -> Result<FioJob, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Input(format!("cannot read fio job file {}: {e}", path.display()))
        })?;
        Self::parse(&text, &path.display().to_string(), section)
    }

    /// Converts one job section of `text`; `origin` names the file in messages.
    pub fn parse(text: &str, origin: &str, section: Option<&str>) -> Result<FioJob, Error> {
        let at = |line: usize, msg: String| Error::Input(format!("{origin}:{line}: {msg}"));
        let mut global = Section::new();
        let mut jobs: Vec<(String, usize, Section)> = Vec::new();
        // Which section the next options belong to: None = global.
        let mut current: Option<usize> = None;
        let mut in_global = false;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let t = raw.trim();
            if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
                continue;
            }
            if let Some(rest) = t.strip_prefix('[') {
                let name = rest
                    .strip_suffix(']')
                    .ok_or_else(|| at(line, format!("\"{t}\": a section header ends with ]")))?
                    .trim();
                if name.is_empty() {
                    return Err(at(line, "empty section name".into()));
                }
                if name == "global" {
                    in_global = true;
                    current = None;
                } else {
                    if jobs.iter().any(|(n, _, _)| n == name) {
                        return Err(at(line, format!("job section [{name}] appears twice")));
                    }
                    in_global = false;
                    // A job inherits the global options given before it, as in fio.
                    jobs.push((name.to_string(), line, global.clone()));
                    current = Some(jobs.len() - 1);
                }
                continue;
            }
            if !in_global && current.is_none() {
                return Err(at(line, format!("\"{t}\": an option before any [section]")));
            }
            let (key, value) = match t.split_once('=') {
                Some((k, v)) => (k.trim(), Some(expand_env(v.trim()).map_err(|e| at(line, e))?)),
                None => (t, None),
            };
            let key = key.to_ascii_lowercase();
            if key == "include" || key.starts_with("include ") {
                return Err(at(line, "include: not supported; put the options in one file".into()));
            }
            let target = match current {
                Some(j) => &mut jobs[j].2,
                None => &mut global,
            };
            target.insert(key, Opt { value, line });
        }
        let names: Vec<&str> = jobs.iter().map(|(n, _, _)| n.as_str()).collect();
        let (name, _, opts) = match section {
            Some(want) => jobs.iter().find(|(n, _, _)| n == want).ok_or_else(|| {
                Error::Input(format!(
                    "{origin}: no job section [{want}] (sections: {})",
                    if names.is_empty() { "none".to_string() } else { names.join(", ") }
                ))
            })?,
            None => match jobs.len() {
                0 => return Err(Error::Input(format!("{origin}: no job section, only [global]"))),
                1 => &jobs[0],
                _ => {
                    return Err(Error::Input(format!(
                        "{origin}: {} job sections ({}); fio runs them together, flashrig runs \
                         one per run: choose one with --section NAME",
                        jobs.len(),
                        names.join(", ")
                    )))
                }
            },
        };
        convert(name, opts, origin)
    }
}

/// Expands `${VAR}` from the environment, as fio does.
fn expand_env(v: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = v;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| format!("\"{v}\": unclosed ${{"))?;
        let var = &after[..end];
        let val = std::env::var(var)
            .map_err(|_| format!("\"{v}\": environment variable {var} is not set"))?;
        out.push_str(&val);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn convert(name: &str, opts: &Section, origin: &str) -> Result<FioJob, Error> {
    let mut w = WorkloadConfig {
        // fio's defaults where they differ from flashrig's: sequential reads, 4 KiB, depth 1,
        // no fsync at the end.
        rw: Pattern::Read,
        iodepth: 1,
        final_flush: false,
        ..WorkloadConfig::default()
    };
    let mut seed = None;
    let mut notes = Vec::new();
    let mut time_based = false;
    let mut io_size = None;
    let mut region = None;
    for (key, opt) in opts {
        let line = opt.line;
        let bad = |msg: String| Error::Input(format!("{origin}:{line}: {key}: {msg}"));
        let value = || -> Result<&str, Error> {
            opt.value.as_deref().ok_or_else(|| bad("needs a value (key=value)".into()))
        };
        // fio allows "read,write" pairs for sizes and rates; flashrig jobs use one value.
        let single = |v: &str| -> Result<String, Error> {
            let parts: Vec<&str> = v.split(',').map(str::trim).collect();
            if parts.len() > 1 && parts.iter().any(|p| *p != parts[0]) {
                return Err(bad(format!(
                    "\"{v}\": separate read and write values are not supported; give one value"
                )));
            }
            Ok(parts[0].to_string())
        };
        let size =
            |v: &str| -> Result<Size, Error> { parse_size(&single(v)?).map(Size).map_err(bad) };
        let number = |v: &str| -> Result<u64, Error> {
            single(v)?.parse::<u64>().map_err(|_| bad(format!("\"{v}\" is not a whole number")))
        };
        let flag = || -> Result<bool, Error> {
            match opt.value.as_deref().map(str::trim) {
                None | Some("1") | Some("true") => Ok(true),
                Some("0") | Some("false") => Ok(false),
                Some(v) => Err(bad(format!("\"{v}\": expected 0 or 1"))),
            }
        };
        match key.as_str() {
            "rw" | "readwrite" => {
                let v = value()?;
                if v.contains(':') {
                    return Err(bad(format!(
                        "\"{v}\": an offset modifier (rw=...:N) is not supported"
                    )));
                }
                w.rw = match v {
                    "read" => Pattern::Read,
                    "write" => Pattern::Write,
                    "randread" => Pattern::RandRead,
                    "randwrite" => Pattern::RandWrite,
                    "rw" | "readwrite" => Pattern::Rw,
                    "randrw" => Pattern::RandRw,
                    "trim" | "randtrim" | "trimwrite" | "randtrimwrite" => {
                        return Err(bad(format!("\"{v}\": flashrig jobs do not issue trims")))
                    }
                    other => return Err(bad(format!("\"{other}\" is not an fio rw pattern"))),
                }
            }
            "bs" | "blocksize" => w.bs = size(value()?)?,
            "bssplit" => {
                let v = single(value()?)?;
                w.bssplit = v.parse::<BlockSizeMix>().map_err(bad)?;
            }
            "blockalign" | "ba" => w.blockalign = Some(size(value()?)?),
            "offset" => {
                let v = value()?;
                if v.ends_with('%') {
                    return Err(bad(format!("\"{v}\": give the offset in bytes")));
                }
                w.offset = Some(size(v)?);
            }
            "offset_increment" => {
                let v = value()?;
                if v.ends_with('%') {
                    return Err(bad(format!("\"{v}\": give the increment in bytes")));
                }
                w.offset_increment = Some(size(v)?);
            }
            "size" => {
                let v = value()?.trim();
                region = match v.strip_suffix('%') {
                    Some("100") => None,
                    Some(_) => {
                        return Err(bad(format!(
                            "\"{v}\": only 100% is supported; give other sizes in bytes"
                        )))
                    }
                    None => Some(size(v)?),
                };
            }
            "io_size" | "io_limit" => io_size = Some(size(value()?)?),
            "runtime" | "timeout" => w.runtime_ms = Some(parse_time_ms(value()?).map_err(bad)?),
            "time_based" => time_based = flag()?,
            // fio's ramp_time is seconds by default, like runtime; 0 means no ramp.
            "ramp_time" => {
                let v = value()?;
                w.ramp_ms = match v.trim() {
                    "0" => None,
                    t => Some(parse_time_ms(t).map_err(bad)?),
                }
            }
            // Checked as given, before narrowing, so the message shows the number written.
            "iodepth" => w.iodepth = within(number(value()?)?, MAX_IODEPTH).map_err(bad)?,
            "numjobs" => w.jobs = within(number(value()?)?, MAX_JOBS).map_err(bad)?,
            "rwmixread" => w.rwmixread = percent(number(value()?)?).map_err(bad)?,
            "rwmixwrite" => w.rwmixread = 100 - percent(number(value()?)?).map_err(bad)?,
            "random_distribution" => {
                w.random_distribution = value()?.parse::<Distribution>().map_err(bad)?
            }
            "rate_iops" => w.rate_iops = Some(number(value()?)?),
            "randseed" => seed = Some(number(value()?)?),
            "end_fsync" | "fsync_on_close" => w.final_flush = flag()?,
            "loops" => {
                if number(value()?)? != 1 {
                    return Err(bad("only loops=1 is supported; use size or runtime".into()));
                }
            }
            _ => {
                match IGNORED.iter().find(|(k, _)| k == key) {
                    Some((_, why)) => notes.push(format!(
                        "{origin}:{line}: {key}{} ignored: {why}",
                        opt.value.as_deref().map(|v| format!("={v}")).unwrap_or_default()
                    )),
                    None => return Err(bad(
                        "not supported by flashrig's fio reader (see README, \"fio job files\")"
                            .into(),
                    )),
                }
            }
        }
    }
    if w.iodepth == 0 || w.jobs == 0 {
        return Err(Error::Input(format!(
            "{origin}: [{name}]: iodepth and numjobs must be positive"
        )));
    }
    // fio's `size` is the region a job addresses; the job moves `io_size` bytes (default: the
    // region once) unless `time_based`, when it loops over the region until `runtime`.
    w.range = region;
    w.size = if time_based && w.runtime_ms.is_some() { io_size } else { io_size.or(region) };
    if time_based && w.runtime_ms.is_none() {
        return Err(Error::Input(format!("{origin}: [{name}]: time_based needs runtime")));
    }
    Ok(FioJob { name: name.to_string(), workload: w, seed, notes })
}

/// `v` if it is between 1 and `max`.
fn within(v: u64, max: u64) -> Result<u32, String> {
    match u32::try_from(v) {
        Ok(n) if (1..=max).contains(&v) => Ok(n),
        _ => Err(format!("{v}: must be between 1 and {max}")),
    }
}

fn percent(v: u64) -> Result<u8, String> {
    u8::try_from(v).ok().filter(|&p| p <= 100).ok_or_else(|| format!("{v} is not a percentage"))
}

/// fio's time values: a bare number is seconds; suffixes us, ms, s, m, h, d.
fn parse_time_ms(v: &str) -> Result<u64, String> {
    let t = v.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("\"{v}\" is not a time (e.g. 30, 500ms, 2m)"))?;
    let (mul, div) = match unit {
        "us" | "usec" => (1, 1000),
        "ms" | "msec" => (1, 1),
        "" | "s" | "sec" => (1000, 1),
        "m" | "min" => (60_000, 1),
        "h" | "hr" => (3_600_000, 1),
        "d" => (86_400_000, 1),
        other => return Err(format!("\"{v}\": unknown time unit \"{other}\"")),
    };
    // Found by fuzzing: `runtime=999999999999999d` overflowed the multiplication.
    let ms = n
        .checked_mul(mul)
        .ok_or_else(|| format!("\"{v}\" is too long: more than 2^64 - 1 milliseconds"))?
        / div;
    if ms == 0 {
        return Err(format!("\"{v}\": must be at least a millisecond"));
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typical_job_file_maps_onto_a_workload() {
        let text = "; 4k random writes\n[global]\nioengine=libaio\ndirect=1\nbs=4k\n\
                    iodepth=32\nruntime=2\nramp_time=500ms\ntime_based\n\n[randw]\nrw=randwrite\nnumjobs=2\n\
                    random_distribution=zipf:1.2\nsize=64m\nrandseed=9\n";
        let job = FioJob::parse(text, "t.fio", None).unwrap();
        assert_eq!(job.name, "randw");
        let w = &job.workload;
        assert_eq!((w.rw, w.bs, w.iodepth, w.jobs), (Pattern::RandWrite, Size::kib(4), 32, 2));
        assert_eq!(w.runtime_ms, Some(2000));
        assert_eq!(w.ramp_ms, Some(500));
        assert_eq!(w.range, Some(Size::mib(64)));
        assert_eq!(w.size, None, "time_based loops over the region");
        assert_eq!(w.random_distribution, Distribution::Zipf(1.2));
        assert_eq!(job.seed, Some(9));
        assert_eq!(job.notes.len(), 2, "{:?}", job.notes);
        assert!(job.notes[0].starts_with("t.fio:4: direct=1 ignored"), "{:?}", job.notes);
    }

    #[test]
    fn without_time_based_a_job_covers_its_region_once() {
        let job =
            FioJob::parse("[a]\nrw=write\nsize=1m\nbssplit=4k/50:64k/50\n", "t", None).unwrap();
        assert_eq!(job.workload.size, Some(Size::mib(1)));
        assert_eq!(job.workload.bssplit.0.len(), 2);
        let io = FioJob::parse("[a]\nrw=write\nsize=1m\nio_size=4m\n", "t", None).unwrap();
        assert_eq!((io.workload.range, io.workload.size), (Some(Size::mib(1)), Some(Size::mib(4))));
    }

    #[test]
    fn global_options_apply_only_to_later_jobs_and_sections_are_chosen() {
        let text = "[a]\nrw=read\n[global]\nbs=8k\n[b]\nrw=write\n";
        assert!(FioJob::parse(text, "t", None).unwrap_err().to_string().contains("--section"));
        let a = FioJob::parse(text, "t", Some("a")).unwrap();
        let b = FioJob::parse(text, "t", Some("b")).unwrap();
        assert_eq!((a.workload.bs, b.workload.bs), (Size::kib(4), Size::kib(8)));
        let e = FioJob::parse(text, "t", Some("c")).unwrap_err().to_string();
        assert!(e.contains("no job section [c]") && e.contains("a, b"), "{e}");
    }

    #[test]
    fn unsupported_and_malformed_options_name_file_and_line() {
        for (text, needle) in [
            ("[a]\nrw=trim\n", "t:2: rw"),
            ("[a]\nrw=randread:8\n", "offset modifier"),
            ("[a]\nbs=4k,8k\n", "separate read and write"),
            ("[a]\nfsync=4\n", "t:2: fsync: not supported"),
            ("[a]\niodepth=lots\n", "not a whole number"),
            ("[a]\nruntime=3fortnights\n", "unknown time unit"),
            ("[a]\nrwmixread=120\n", "not a percentage"),
            ("[a]\nsize=50%\n", "only 100%"),
            ("[a]\ntime_based\n", "needs runtime"),
            ("bs=4k\n", "before any [section]"),
            ("[a\n", "ends with ]"),
            ("[a]\nfilename=${FLASHRIG_SURELY_UNSET_VAR}\n", "is not set"),
            ("[global]\nbs=4k\n", "no job section"),
            ("[a]\nrandom_distribution=normal\n", "t:2: random_distribution"),
        ] {
            let e = FioJob::parse(text, "t", None).unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn times_take_fio_units() {
        assert_eq!(parse_time_ms("30").unwrap(), 30_000);
        assert_eq!(parse_time_ms("500ms").unwrap(), 500);
        assert_eq!(parse_time_ms("2m").unwrap(), 120_000);
        assert!(parse_time_ms("10us").is_err());
        assert_eq!(parse_time_ms("18446744073709551615ms").unwrap(), u64::MAX);
        let e = parse_time_ms("18446744073709551615s").unwrap_err();
        assert!(e.contains("too long"), "{e}");
        assert!(parse_time_ms("999999999999999d").unwrap_err().contains("too long"));
    }
}
