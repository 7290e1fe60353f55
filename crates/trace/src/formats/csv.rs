//! CSV traces whose first line names the columns, read by name rather than by position. The
//! CloudPhysics VMware vscsi traces as CSV are the motivating case (libCacheSim ships one as
//! `data/cloudPhysicsIO.csv`, header `version,time,op,size,lbn`: `op` a SCSI opcode in hex
//! without `0x`, `2a` WRITE(10) and `28` READ(10); `size` in bytes; `lbn` in 512-byte sectors;
//! `time` in whole seconds, as libCacheSim's vscsi reader divides the binary traces'
//! microsecond stamps by 10^6).
//!
//! Column names are matched without regard to case or surrounding spaces; columns not listed
//! here (`version`, a volume id, a latency) are ignored:
//!
//! | role | names | unit |
//! |---|---|---|
//! | time (optional) | `time`, `timestamp`, `ts` / `time_s` / `time_ms` / `time_us` / `time_ns` | seconds (may be fractional) / as the suffix says |
//! | operation | `op`, `opcode`, `type`, `rw`, `iotype` | `r`/`w`, `read`/`write`, or a SCSI opcode in hex (with or without `0x`) |
//! | offset | `lbn`, `lba`, `lsn`, `sector`, `offset_sectors` / `offset`, `offset_bytes` | 512-byte sectors / bytes |
//! | size | `size`, `length`, `len`, `bytes`, `size_bytes` / `size_sectors`, `nsectors` | bytes / 512-byte sectors |
//! | device (optional) | `device`, `devno`, `disk`, `volume`, `asu` | a number |
//!
//! SCSI READ(6/10/12/16) (`08`, `28`, `a8`, `88`) are reads and WRITE(6/10/12/16) (`0a`, `2a`,
//! `aa`, `8a`) writes; any other opcode (SYNCHRONIZE CACHE `35`, INQUIRY `12`, ...) moves no
//! data and yields no request. A bare `0` or `1` is refused: traces disagree on which is the
//! write (DiskSim's 0 is a write, Tencent's 1), so guessing would swap reads and writes.

use super::*;

/// Where each role's column is, and the units the header gave.
#[derive(Debug, Clone, Default)]
pub(crate) struct Columns {
    time: Option<(usize, u64)>,
    op: usize,
    offset: (usize, u64),
    size: (usize, u64),
    device: Option<usize>,
    count: usize,
}

const NAMES: &str =
    "op, offset (lbn/lba/sector, or offset in bytes) and size columns; time is optional";

/// The column layout a header line names, or why it is not a usable header.
fn header(line: &[u8]) -> Result<Columns, String> {
    let (mut time, mut op, mut offset, mut size, mut device) = (None, None, None, None, None);
    let mut count = 0;
    for (i, raw) in line.split(|&b| b == b',').enumerate() {
        count += 1;
        let name = String::from_utf8_lossy(trim(raw)).to_ascii_lowercase();
        if name.is_empty() || name.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(format!(
                "the first line is not a header naming the columns (column {} is `{}`)",
                i + 1,
                show(raw)
            ));
        }
        match name.as_str() {
            "time" | "timestamp" | "ts" | "time_s" => time = Some((i, 1_000_000_000)),
            "time_ms" => time = Some((i, 1_000_000)),
            "time_us" => time = Some((i, 1_000)),
            "time_ns" => time = Some((i, 1)),
            "op" | "opcode" | "type" | "rw" | "iotype" => op = Some(i),
            "lbn" | "lba" | "lsn" | "sector" | "offset_sectors" => offset = Some((i, 512)),
            "offset" | "offset_bytes" => offset = Some((i, 1)),
            "size" | "length" | "len" | "bytes" | "size_bytes" => size = Some((i, 1)),
            "size_sectors" | "nsectors" => size = Some((i, 512)),
            "device" | "devno" | "disk" | "volume" | "asu" => device = Some(i),
            _ => {}
        }
    }
    let missing: Vec<&str> =
        [("op", op.is_none()), ("offset", offset.is_none()), ("size", size.is_none())]
            .iter()
            .filter(|(_, m)| *m)
            .map(|(n, _)| *n)
            .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the header `{}` names no {} column (a named-column CSV needs {NAMES})",
            show(line),
            missing.join(", no ")
        ));
    }
    Ok(Columns {
        time,
        op: op.expect("checked"),
        offset: offset.expect("checked"),
        size: size.expect("checked"),
        device,
        count,
    })
}

/// Read, write, or a command that moves no data (`None`).
fn operation(field: &[u8]) -> Result<Option<bool>, String> {
    let f = trim(field);
    if let Ok(rw) = parse_rw(f, "op") {
        return Ok(Some(rw));
    }
    if f == b"0" || f == b"1" {
        return Err(format!(
            "op `{}` is ambiguous: traces disagree on whether 0 or 1 is the write; name it r/w, \
             read/write or a SCSI opcode",
            show(f)
        ));
    }
    let hex = f.strip_prefix(b"0x").or_else(|| f.strip_prefix(b"0X")).unwrap_or(f);
    let code = std::str::from_utf8(hex)
        .ok()
        .filter(|h| !h.is_empty() && h.len() <= 2)
        .and_then(|h| u8::from_str_radix(h, 16).ok())
        .ok_or_else(|| {
            format!("op `{}` is neither read/write nor a SCSI opcode in hex", show(f))
        })?;
    Ok(match code {
        0x08 | 0x28 | 0xa8 | 0x88 => Some(false),
        0x0a | 0x2a | 0xaa | 0x8a => Some(true),
        _ => None,
    })
}

pub(super) fn parse(line: &[u8], st: &mut ParseState) -> Result<Option<Request>, String> {
    if is_blank(line) {
        return Ok(None);
    }
    let Some(cols) = &st.csv_columns else {
        st.csv_columns = Some(header(line)?);
        return Ok(None);
    };
    let mut fields: [&[u8]; 32] = [&[]; 32];
    let mut n = 0;
    for f in line.split(|&b| b == b',') {
        if n < fields.len() {
            fields[n] = f;
        }
        n += 1;
    }
    if n != cols.count {
        return Err(format!("{n} fields where the header names {}", cols.count));
    }
    let field = |i: usize| fields.get(i).copied().unwrap_or(&[]);
    let Some(write) = operation(field(cols.op))? else { return Ok(None) };
    let time_ns = match cols.time {
        Some((i, 1_000_000_000)) => secs_to_ns(parse_f64(field(i), "time")?, "time")?,
        Some((i, ns)) => mul(parse_u64(field(i), "time")?, ns, "time")?,
        None => 0,
    };
    let (oi, ou) = cols.offset;
    let (si, su) = cols.size;
    Ok(Some(Request {
        time_ns,
        write,
        offset_bytes: mul(parse_u64(field(oi), "offset")?, ou, "offset")?,
        size_bytes: mul(parse_u64(field(si), "size")?, su, "size")?,
        device: match cols.device {
            Some(i) => parse_u32(field(i), "device")?,
            None => 0,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(lines: &[&str]) -> Vec<Result<Option<Request>, String>> {
        let mut st = ParseState::default();
        lines.iter().map(|l| parse(l.as_bytes(), &mut st)).collect()
    }

    #[test]
    fn cloudphysics_vscsi_csv() {
        let r = read(&[
            "version,time,op,size,lbn",
            "1,5633898,2a,512,42932745",
            "1,5633899,28,4096,6160447",
            "1,5633899,35,0,0",
        ]);
        assert_eq!(r[0], Ok(None), "the header yields no request");
        assert_eq!(
            r[1],
            Ok(Some(Request {
                time_ns: 5_633_898_000_000_000,
                write: true,
                offset_bytes: 42_932_745 * 512,
                size_bytes: 512,
                device: 0
            }))
        );
        assert!(matches!(r[2], Ok(Some(Request { write: false, size_bytes: 4096, .. }))));
        assert_eq!(r[3], Ok(None), "SYNCHRONIZE CACHE moves no data");
    }

    #[test]
    fn units_follow_the_column_names() {
        let r = read(&["Offset_Bytes, Size_Sectors ,Type,time_us,disk", "4096,8,0x2A,1500,3"]);
        assert_eq!(
            r[1],
            Ok(Some(Request {
                time_ns: 1_500_000,
                write: true,
                offset_bytes: 4096,
                size_bytes: 4096,
                device: 3
            }))
        );
    }

    #[test]
    fn bad_headers_and_fields_are_named() {
        let e = read(&["1,2,3"]).remove(0).unwrap_err();
        assert!(e.contains("not a header"), "{e}");
        let e = read(&["time,size,lbn"]).remove(0).unwrap_err();
        assert!(e.contains("no op column"), "{e}");
        let r = read(&["op,size,lba", "1,512,0", "w,512", "x9,1,1", "r,big,0"]);
        assert!(r[1].as_ref().unwrap_err().contains("ambiguous"));
        assert!(r[2].as_ref().unwrap_err().contains("2 fields where the header names 3"));
        assert!(r[3].as_ref().unwrap_err().contains("neither read/write nor a SCSI opcode"));
        assert!(r[4].as_ref().unwrap_err().contains("size `big` is not a number"));
    }
}
