//! DiskSim ASCII as replayed by MQSim and SSDSim: whitespace separated
//! `arrival_time devno lba size flags`, lba and size in 512-byte sectors.
//!
//! Units chosen: arrival time is **nanoseconds**, because both simulators that ship such files
//! read it that way (MQSim with `<Time_Unit>NANOSECOND</Time_Unit>`, SSDSim's `time_ns`), and
//! both sample files here (`mqsim/tpcc-small.trace`, `ssdsim/example.ascii`) are integer ns.
//! Classic DiskSim used float milliseconds; a fractional value is accepted and its fraction
//! dropped (still read as ns) — convert such files first. flags bit 0 is DiskSim's read flag:
//! 1 = read, 0 = write, which is what MQSim (0=W,1=R) and SSDSim (1=R,0=W) both use.

use super::*;

const SHAPE: &str = "arrival_ns devno lba_sectors size_sectors flags";

pub(super) fn parse(line: &[u8]) -> Result<Option<Request>, String> {
    if is_blank(line) {
        return Ok(None);
    }
    let mut it = ws_fields(line);
    let t = need(it.next(), "arrival_time", SHAPE)?;
    let dev = need(it.next(), "devno", SHAPE)?;
    let lba = need(it.next(), "lba", SHAPE)?;
    let size = need(it.next(), "size", SHAPE)?;
    let flags = need(it.next(), "flags", SHAPE)?;
    if it.next().is_some() {
        return Err(format!("too many fields (expected {SHAPE})"));
    }
    let time_ns = if t.iter().all(u8::is_ascii_digit) {
        parse_u64(t, "arrival_time")?
    } else {
        let v = parse_f64(t, "arrival_time")?;
        if v >= u64::MAX as f64 {
            return Err(format!("arrival_time `{}` is out of range", show(t)));
        }
        v as u64
    };
    Ok(Some(Request {
        time_ns,
        write: parse_u64(flags, "flags")? & 1 == 0,
        offset_bytes: mul(parse_u64(lba, "lba")?, 512, "lba")?,
        size_bytes: mul(parse_u64(size, "size")?, 512, "size")?,
        device: parse_u32(dev, "devno")?,
    }))
}
