//! MSR Cambridge CSV (SNIA IOTTA 388): `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`
//! with Timestamp in Windows FILETIME units (100 ns), Offset and Size in bytes, Type `Read`/`Write`.
//! Also accepts: a leading `idx ` column separated by a space (as in `hm_0_first899.csv`), a
//! missing ResponseTime, a `Timestamp...` header line, and the lossy reduced variant
//! `timestamp(sci. notation),Type,Offset` (e.g. `prn_0_reduced`), which has no size and is
//! rejected unless [`Options::assume_size_bytes`] says what to assume.

use super::*;

const SHAPE: &str = "Timestamp,Hostname,DiskNumber,Type,Offset,Size[,ResponseTime]";

/// FILETIME timestamp: an integer normally, scientific notation in reduced traces.
fn timestamp(f: &[u8]) -> Result<u64, String> {
    let f = trim(f);
    // The idx variant: "0 128166385295514663" — the timestamp is the last space-separated token.
    let f = match f.iter().rposition(|&b| b == b' ') {
        Some(p) => &f[p + 1..],
        None => f,
    };
    let ticks = if f.iter().all(u8::is_ascii_digit) {
        parse_u64(f, "Timestamp")?
    } else {
        let v = parse_f64(f, "Timestamp")?;
        if v >= u64::MAX as f64 {
            return Err(format!("Timestamp `{}` is out of range", show(f)));
        }
        v as u64
    };
    mul(ticks, 100, "Timestamp")
}

pub(super) fn parse(line: &[u8], opts: &Options) -> Result<Option<Request>, String> {
    if is_blank(line) || trim(line).get(..9).is_some_and(|p| p.eq_ignore_ascii_case(b"timestamp")) {
        return Ok(None);
    }
    // Counted first, so a short line is reported as short rather than as a bad field that
    // happens to sit where another column was expected.
    let fields = line.split(|&b| b == b',').count();
    let mut it = line.split(|&b| b == b',');
    let ts = need(it.next(), "Timestamp", SHAPE)?;
    if fields == 3 {
        // Reduced variant: timestamp,Type,Offset — no Size, no disk.
        let (f1, f2) = (need(it.next(), "Type", SHAPE)?, need(it.next(), "Offset", SHAPE)?);
        let write = parse_rw(f1, "Type").map_err(|e| {
            format!(
                "too few fields: 3 ({SHAPE} has 6 or 7; a reduced trace's \
                 Timestamp,Type,Offset has 3, but {e})"
            )
        })?;
        let offset_bytes = parse_u64(f2, "Offset")?;
        let Some(size_bytes) = opts.assume_size_bytes else {
            return Err(
                "record has only Timestamp,Type,Offset: Size is missing (a lossy reduced MSR \
                 trace); set Options::assume_size_bytes (e.g. 4096) to read it"
                    .to_string(),
            );
        };
        return Ok(Some(Request {
            time_ns: timestamp(ts)?,
            write,
            offset_bytes,
            size_bytes,
            device: 0,
        }));
    }
    if fields < 6 {
        return Err(format!("too few fields: {fields} (expected {SHAPE})"));
    }
    let _host = need(it.next(), "Hostname", SHAPE)?;
    let f2 = need(it.next(), "DiskNumber", SHAPE)?;
    let f3 = need(it.next(), "Type", SHAPE)?;
    let offset = need(it.next(), "Offset", SHAPE)?;
    let size = need(it.next(), "Size", SHAPE)?;
    // ResponseTime (and anything after it) is not part of the request; ignored.
    let time_ns = timestamp(ts)?;
    let write = parse_rw(f3, "Type")?;
    let offset_bytes = parse_u64(offset, "Offset")?;
    let size_bytes = parse_u64(size, "Size")?;
    let device = parse_u32(f2, "DiskNumber")?;
    Ok(Some(Request { time_ns, write, offset_bytes, size_bytes, device }))
}
