//! CloudPhysics vscsi traces converted to CSV (the layout used by pyCydonia /
//! BlockTraceFeatures): `ts,lba,op,size` with ts in microseconds, lba in 512-byte sectors,
//! op `r`/`w`, size in bytes. The original vscsi1/vscsi2 files are binary; convert them first.
//! No sample of this CSV was available, so the column layout is an assumption (see report).

use super::*;

const SHAPE: &str = "ts_us,lba,op,size";

pub(super) fn parse(line: &[u8]) -> Result<Option<Request>, String> {
    if is_blank(line) {
        return Ok(None);
    }
    let mut it = line.split(|&b| b == b',');
    let ts = need(it.next(), "ts", SHAPE)?;
    let lba = need(it.next(), "lba", SHAPE)?;
    let op = need(it.next(), "op", SHAPE)?;
    let size = need(it.next(), "size", SHAPE)?;
    if it.next().is_some() {
        return Err(format!("too many fields (expected {SHAPE})"));
    }
    Ok(Some(Request {
        time_ns: mul(parse_u64(ts, "ts")?, 1000, "ts")?,
        write: parse_rw(op, "op")?,
        offset_bytes: mul(parse_u64(lba, "lba")?, 512, "lba")?,
        size_bytes: parse_u64(size, "size")?,
        device: 0,
    }))
}
