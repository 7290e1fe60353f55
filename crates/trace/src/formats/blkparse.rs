//! `blkparse` default text output:
//! `8,0 3 1 0.000000000 697 Q W 223490 + 8 [kjournald]` =
//! `maj,min cpu seq time_s pid action rwbs sector + nsectors [process]`, sectors of 512 bytes.
//!
//! Each request appears several times (Q queued, G, I, D issued, C completed). We replay the
//! Q events; for traces already filtered to D events (MQSim's recipe `grep ' D '`) there is no
//! Q, so the reader locks onto whichever of Q or D it meets first — a full trace always shows
//! a request's Q before its D, so this picks Q whenever Q exists, while staying one-pass.
//! Lines not starting with `maj,min` (blkparse's per-CPU summary at the end) are not events
//! and are skipped; event lines that are malformed are errors. Flushes, discards and
//! zero-length events carry no data and are skipped. device = `maj << 16 | min`.

use super::*;

pub(super) const SHAPE: &str = "maj,min cpu seq time pid action rwbs sector + nsectors";

fn devnum(f: &[u8]) -> Option<(u32, u32)> {
    let p = f.iter().position(|&b| b == b',')?;
    let maj = parse_u32(&f[..p], "major").ok()?;
    let min = parse_u32(&f[p + 1..], "minor").ok()?;
    Some((maj, min))
}

pub(super) fn parse(line: &[u8], st: &mut ParseState) -> Result<Option<Request>, String> {
    let mut it = ws_fields(line);
    let Some((maj, min)) = it.next().and_then(devnum) else {
        return Ok(None);
    };
    st.blk_event_seen = true;
    let _cpu = parse_u64(need(it.next(), "cpu", SHAPE)?, "cpu")?;
    let _seq = parse_u64(need(it.next(), "seq", SHAPE)?, "seq")?;
    let t = parse_f64(need(it.next(), "time", SHAPE)?, "time")?;
    let _pid = need(it.next(), "pid", SHAPE)?;
    let action = need(it.next(), "action", SHAPE)?;
    let &[a] = action else {
        return Err(format!("action `{}` is not one letter", show(action)));
    };
    if a != b'Q' && a != b'D' {
        return Ok(None);
    }
    match st.blk_action {
        None => st.blk_action = Some(a),
        Some(x) if x != a => return Ok(None),
        Some(_) => {}
    }
    let rwbs = need(it.next(), "rwbs", SHAPE)?;
    // Only events with a sector range carry data ("Q FWS [proc]" flushes have none).
    let Some(sector) = it.next() else {
        return Ok(None);
    };
    if sector.first() == Some(&b'[') {
        return Ok(None);
    }
    let write = if rwbs.contains(&b'D') || rwbs.contains(&b'F') && !rwbs.contains(&b'W') {
        return Ok(None); // discard / pure flush
    } else if rwbs.contains(&b'W') {
        true
    } else if rwbs.contains(&b'R') {
        false
    } else {
        return Ok(None); // e.g. `N` (no data)
    };
    let sector = parse_u64(sector, "sector")?;
    let plus = need(it.next(), "+", SHAPE)?;
    if plus != b"+" {
        return Err(format!("expected `+` after sector, found `{}`", show(plus)));
    }
    let n = parse_u64(need(it.next(), "nsectors", SHAPE)?, "nsectors")?;
    if n == 0 {
        return Ok(None);
    }
    Ok(Some(Request {
        time_ns: secs_to_ns(t, "time")?,
        write,
        offset_bytes: mul(sector, 512, "sector")?,
        size_bytes: mul(n, 512, "nsectors")?,
        device: (maj << 16) | (min & 0xffff),
    }))
}
