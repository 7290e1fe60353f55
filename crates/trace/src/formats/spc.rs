//! SPC / UMass trace repository CSV (Financial1/2, WebSearch1-3):
//! `ASU,LBA,Size,Opcode,Timestamp[,...]` with LBA in 512-byte sectors, Size in bytes, Opcode
//! `r`/`w`, Timestamp in seconds (float). device = ASU.

use super::*;

const SHAPE: &str = "ASU,LBA,Size,Opcode,Timestamp";

pub(super) fn parse(line: &[u8]) -> Result<Option<Request>, String> {
    if is_blank(line) {
        return Ok(None);
    }
    let mut it = line.split(|&b| b == b',');
    let asu = need(it.next(), "ASU", SHAPE)?;
    let lba = need(it.next(), "LBA", SHAPE)?;
    let size = need(it.next(), "Size", SHAPE)?;
    let op = need(it.next(), "Opcode", SHAPE)?;
    let ts = need(it.next(), "Timestamp", SHAPE)?;
    Ok(Some(Request {
        time_ns: secs_to_ns(parse_f64(ts, "Timestamp")?, "Timestamp")?,
        write: parse_rw(op, "Opcode")?,
        offset_bytes: mul(parse_u64(lba, "LBA")?, 512, "LBA")?,
        size_bytes: parse_u64(size, "Size")?,
        device: parse_u32(asu, "ASU")?,
    }))
}
