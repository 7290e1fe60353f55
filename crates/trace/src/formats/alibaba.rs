//! Alibaba cloud block-trace CSV (alibaba/block-traces, 2020):
//! `device_id,opcode,offset,length,timestamp` with opcode `R`/`W`, offset and length in bytes,
//! timestamp in microseconds.

use super::*;

const SHAPE: &str = "device_id,opcode,offset,length,timestamp";

pub(super) fn parse(line: &[u8]) -> Result<Option<Request>, String> {
    if is_blank(line) {
        return Ok(None);
    }
    let mut it = line.split(|&b| b == b',');
    let dev = need(it.next(), "device_id", SHAPE)?;
    let op = need(it.next(), "opcode", SHAPE)?;
    let off = need(it.next(), "offset", SHAPE)?;
    let len = need(it.next(), "length", SHAPE)?;
    let ts = need(it.next(), "timestamp", SHAPE)?;
    Ok(Some(Request {
        time_ns: mul(parse_u64(ts, "timestamp")?, 1000, "timestamp")?,
        write: parse_rw(op, "opcode")?,
        offset_bytes: parse_u64(off, "offset")?,
        size_bytes: parse_u64(len, "length")?,
        device: parse_u32(dev, "device_id")?,
    }))
}
