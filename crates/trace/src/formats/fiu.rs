//! FIU text traces (homes, webmail, mail; SNIA IOTTA 390): whitespace separated
//! `ts pid process lba size_blocks op major minor md5`, ts in nanoseconds, lba and size in
//! 512-byte blocks, op `R`/`W`. The process name may contain spaces, so the fixed fields after it
//! are taken from the end of the line. device = `major << 16 | minor`.

use super::*;

const SHAPE: &str = "ts pid process lba size op major minor md5";

pub(super) fn parse(line: &[u8]) -> Result<Option<Request>, String> {
    if is_blank(line) {
        return Ok(None);
    }
    let mut it = ws_fields(line);
    let ts = need(it.next(), "ts", SHAPE)?;
    let _pid = need(it.next(), "pid", SHAPE)?;
    // Last six fields, read backwards.
    let mut back = ws_fields(line).rev();
    let _md5 = need(back.next(), "md5", SHAPE)?;
    let minor = need(back.next(), "minor", SHAPE)?;
    let major = need(back.next(), "major", SHAPE)?;
    let op = need(back.next(), "op", SHAPE)?;
    let size = need(back.next(), "size", SHAPE)?;
    let lba = need(back.next(), "lba", SHAPE)?;
    // Need at least one process-name field between pid and lba: 9 fields minimum.
    if ws_fields(line).count() < 9 {
        return Err(format!("expected 9 fields ({SHAPE})"));
    }
    let major = parse_u32(major, "major")?;
    let minor = parse_u32(minor, "minor")?;
    Ok(Some(Request {
        time_ns: parse_u64(ts, "ts")?,
        write: parse_rw(op, "op")?,
        offset_bytes: mul(parse_u64(lba, "lba")?, 512, "lba")?,
        size_bytes: mul(parse_u64(size, "size")?, 512, "size")?,
        device: (major << 16) | (minor & 0xffff),
    }))
}
