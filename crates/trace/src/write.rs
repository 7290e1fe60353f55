//! Trace writers for `flashrig trace convert`: MSR Cambridge CSV and DiskSim ASCII (the format
//! MQSim/SSDSim replay), each the exact inverse of the matching reader for representable input.

use std::io::{self, Write};

use crate::record::Request;

/// Write MSR CSV: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, Timestamp in
/// 100 ns FILETIME ticks (`time_ns / 100`, truncated), hostname `hostname`, ResponseTime 0
/// (unknown). No header, as in the SNIA files.
pub fn write_msr<'a, W: Write>(
    mut w: W,
    hostname: &str,
    reqs: impl IntoIterator<Item = &'a Request>,
) -> io::Result<()> {
    for r in reqs {
        writeln!(
            w,
            "{},{},{},{},{},{},0",
            r.time_ns / 100,
            hostname,
            r.device,
            if r.write { "Write" } else { "Read" },
            r.offset_bytes,
            r.size_bytes
        )?;
    }
    Ok(())
}

/// Write DiskSim ASCII as MQSim/SSDSim read it: `time_ns devno lba_sectors size_sectors flags`
/// (flags 0 = write, 1 = read). Byte ranges not on 512-byte sector boundaries are widened to
/// the sectors they cover, because the format cannot express partial sectors.
pub fn write_disksim<'a, W: Write>(
    mut w: W,
    reqs: impl IntoIterator<Item = &'a Request>,
) -> io::Result<()> {
    for r in reqs {
        let lba = r.offset_bytes / 512;
        let end = r.end_bytes().div_ceil(512);
        writeln!(
            w,
            "{} {} {} {} {}",
            r.time_ns,
            r.device,
            lba,
            end - lba,
            if r.write { 0 } else { 1 }
        )?;
    }
    Ok(())
}
