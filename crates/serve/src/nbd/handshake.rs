//! The handshake: fixed newstyle negotiation and option haggling, up to the transmission
//! phase (NBD_OPT_GO or NBD_OPT_EXPORT_NAME) or the end of the connection.
//!
//! Options served: EXPORT_NAME, ABORT, LIST, STARTTLS (refused: no TLS here, by policy),
//! INFO and GO (with EXPORT, NAME, DESCRIPTION and BLOCK_SIZE information), STRUCTURED_REPLY,
//! LIST_META_CONTEXT and SET_META_CONTEXT (`base:allocation` only). Anything else is answered
//! NBD_REP_ERR_UNSUP, so clients fall back (extended headers, for one).

use std::io;

use super::io::{InBuf, Sock};
use super::proto::*;
use super::ConnCtx;

/// Option data larger than this is not read: a real option is a few strings of at most 4096
/// bytes. Its data is discarded and the option answered NBD_REP_ERR_TOO_BIG, and negotiation
/// goes on.
pub const MAX_OPTION_BYTES: u32 = 64 << 10;

/// Option data larger than this closes the connection after the NBD_REP_ERR_TOO_BIG reply:
/// the spec lets a server hang up on a client that looks like a denial of service rather than
/// read gigabytes of option data (the same bound as a write's payload skipped in transmission).
pub const MAX_SKIPPED_OPTION_BYTES: u32 = 256 << 20;

/// What the client and the server agreed on for the transmission phase.
#[derive(Clone, Copy, Debug, Default)]
pub struct Negotiated {
    pub structured: bool,
    /// The id of `base:allocation` when the client selected it.
    pub meta_context: Option<u32>,
    /// Which of the server's exports the client chose (0: the whole device).
    pub export: usize,
}

/// A failure of the handshake worth a line in the log (the caller adds the peer).
fn refuse(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// The transmission flags of the export as this client negotiated it.
pub fn transmission_flags(ctx: &ConnCtx, neg: &Negotiated) -> u16 {
    let mut f = FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_CACHE;
    // The export is one stack behind every connection, and a flush goes to the whole stack,
    // so what one connection flushed is durable for all of them.
    f |= FLAG_CAN_MULTI_CONN;
    if ctx.export.read_only() {
        f |= FLAG_READ_ONLY;
    } else {
        f |= FLAG_SEND_FUA | FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FAST_ZERO;
    }
    if neg.structured {
        // Every read is answered with one data chunk, so "don't fragment" always holds.
        f |= FLAG_SEND_DF;
    }
    f
}

/// The block sizes advertised: any alignment is served (the export reads, modifies and writes
/// the partial blocks), the stack's preferred request size rounded down to a power of two as
/// the spec requires, and [`MAX_PAYLOAD`].
pub fn block_sizes(ctx: &ConnCtx) -> (u32, u32, u32) {
    let preferred = ctx.export.preferred_bytes().clamp(512, MAX_PAYLOAD as u64);
    let preferred = 1u32 << (63 - preferred.leading_zeros());
    (1, preferred, MAX_PAYLOAD)
}

/// Runs the handshake. `Ok(Some(_))`: go on to transmission; `Ok(None)`: the client ended the
/// session (NBD_OPT_ABORT); errors end the connection (and are logged by the caller).
pub fn handshake(ctx: &ConnCtx, sock: &Sock, inb: &mut InBuf) -> io::Result<Option<Negotiated>> {
    let mut hello = Vec::with_capacity(18);
    hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    sock.write_all(&hello)?;
    let client = inb.read_u32(sock)?;
    if client & FLAG_C_FIXED_NEWSTYLE == 0 {
        // Old newstyle clients cannot be told about errors; this server speaks only fixed
        // newstyle, so it hangs up on them.
        return Err(refuse(format!(
            "client flags {client:#x} lack NBD_FLAG_C_FIXED_NEWSTYLE (only fixed newstyle is served)"
        )));
    }
    if client & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(refuse(format!("unknown client flags {client:#x}")));
    }
    let no_zeroes = client & FLAG_C_NO_ZEROES != 0;
    let mut neg = Negotiated::default();
    let mut out = Vec::new();
    loop {
        let magic = inb.read_u64(sock)?;
        if magic != IHAVEOPT {
            return Err(refuse(format!("option magic {magic:#x} instead of IHAVEOPT")));
        }
        let option = inb.read_u32(sock)?;
        let len = inb.read_u32(sock)?;
        if len > MAX_OPTION_BYTES {
            let msg =
                format!("option {option} with {len} bytes of data (more than {MAX_OPTION_BYTES})");
            if option == OPT_EXPORT_NAME || len > MAX_SKIPPED_OPTION_BYTES {
                // EXPORT_NAME has no error reply (the spec says hang up); past the skip bound
                // the client gets the reason, then the connection ends.
                if option != OPT_EXPORT_NAME {
                    out.clear();
                    error_reply(&mut out, option, REP_ERR_TOO_BIG, &msg);
                    let _ = sock.write_all(&out);
                }
                return Err(refuse(msg));
            }
            discard(sock, inb, len as usize)?;
            out.clear();
            error_reply(&mut out, option, REP_ERR_TOO_BIG, &msg);
            sock.write_all(&out)?;
            continue;
        }
        let mut data = vec![0u8; len as usize];
        inb.read_exact(sock, &mut data)?;
        out.clear();
        let stopping = ctx.stopping();
        match option {
            OPT_EXPORT_NAME => {
                if stopping {
                    return Err(refuse("NBD_OPT_EXPORT_NAME while shutting down".into()));
                }
                let Some(chosen) = ctx.find_export(&data) else {
                    // This option cannot be answered with an error: the spec says hang up.
                    return Err(refuse(format!(
                        "NBD_OPT_EXPORT_NAME for unknown export {:?}",
                        String::from_utf8_lossy(&data)
                    )));
                };
                neg.export = chosen;
                out.extend_from_slice(&ctx.export_at(chosen).size_bytes().to_be_bytes());
                out.extend_from_slice(&transmission_flags(ctx, &neg).to_be_bytes());
                if !no_zeroes {
                    out.extend_from_slice(&[0u8; 124]);
                }
                sock.write_all(&out)?;
                return Ok(Some(neg));
            }
            OPT_ABORT => {
                option_reply(&mut out, option, REP_ACK, &[]);
                // The client may already have closed; it asked for the end anyway.
                let _ = sock.write_all(&out);
                return Ok(None);
            }
            _ if stopping => {
                error_reply(&mut out, option, REP_ERR_SHUTDOWN, "the server is shutting down");
            }
            OPT_LIST => {
                if data.is_empty() {
                    for name in ctx.export_names() {
                        let name = name.as_bytes();
                        let mut d = Vec::with_capacity(4 + name.len());
                        d.extend_from_slice(&(name.len() as u32).to_be_bytes());
                        d.extend_from_slice(name);
                        option_reply(&mut out, option, REP_SERVER, &d);
                    }
                    option_reply(&mut out, option, REP_ACK, &[]);
                } else {
                    error_reply(&mut out, option, REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
                }
            }
            OPT_STARTTLS => {
                error_reply(&mut out, option, REP_ERR_POLICY, "this server does not offer TLS");
            }
            OPT_INFO | OPT_GO => {
                if info(ctx, &mut neg, option, &data, &mut out) && option == OPT_GO {
                    sock.write_all(&out)?;
                    return Ok(Some(neg));
                }
            }
            OPT_STRUCTURED_REPLY => {
                if data.is_empty() {
                    neg.structured = true;
                    option_reply(&mut out, option, REP_ACK, &[]);
                } else {
                    error_reply(
                        &mut out,
                        option,
                        REP_ERR_INVALID,
                        "NBD_OPT_STRUCTURED_REPLY takes no data",
                    );
                }
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                meta_context(ctx, &mut neg, option, &data, &mut out);
            }
            _ => {
                error_reply(&mut out, option, REP_ERR_UNSUP, "option not supported");
            }
        }
        sock.write_all(&out)?;
    }
}

/// Reads and drops `n` bytes, through the buffer (no allocation of their size).
fn discard(sock: &Sock, inb: &mut InBuf, mut n: usize) -> io::Result<()> {
    while n > 0 {
        if inb.buffered().is_empty() && inb.fill(sock)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let take = inb.buffered().len().min(n);
        inb.consume(take);
        n -= take;
    }
    Ok(())
}

fn error_reply(out: &mut Vec<u8>, option: u32, kind: u32, msg: &str) {
    option_reply(out, option, kind, msg.as_bytes());
}

/// A string with a 32-bit length in front, at `*at` of `data`; advances `at`.
fn take_string<'a>(data: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let len = data.get(*at..*at + 4).map(be_u32)? as usize;
    let s = data.get(*at + 4..(*at + 4).checked_add(len)?)?;
    *at += 4 + len;
    Some(s)
}

/// NBD_OPT_INFO and NBD_OPT_GO: the export's details, then ACK. Returns whether the export
/// was found and the details sent.
fn info(ctx: &ConnCtx, neg: &mut Negotiated, option: u32, data: &[u8], out: &mut Vec<u8>) -> bool {
    let mut at = 0;
    let parsed = take_string(data, &mut at).and_then(|name| {
        let n = data.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]))? as usize;
        let list = data.get(at + 2..)?;
        (list.len() == 2 * n).then(|| {
            let wanted: Vec<u16> =
                list.chunks_exact(2).map(|b| u16::from_be_bytes([b[0], b[1]])).collect();
            (name, wanted)
        })
    });
    let Some((name, wanted)) = parsed else {
        error_reply(out, option, REP_ERR_INVALID, "malformed NBD_OPT_INFO/GO data");
        return false;
    };
    let Some(chosen) = ctx.find_export(name) else {
        let msg = format!(
            "no export named {:?} (this server has {})",
            String::from_utf8_lossy(name),
            ctx.export_names().iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
        );
        error_reply(out, option, REP_ERR_UNKNOWN, &msg);
        return false;
    };
    // INFO only asks; GO chooses (the last GO is the one that counts).
    if option == OPT_GO {
        neg.export = chosen;
    }
    let export = ctx.export_at(chosen);
    // NBD_INFO_EXPORT always; block sizes always (a server may send them unasked, and clients
    // that know them avoid requests we would refuse); name and description when asked.
    let mut d = Vec::with_capacity(16);
    d.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    d.extend_from_slice(&export.size_bytes().to_be_bytes());
    d.extend_from_slice(&transmission_flags(ctx, neg).to_be_bytes());
    option_reply(out, option, REP_INFO, &d);
    let (min, pref, max) = block_sizes(ctx);
    d.clear();
    d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    for v in [min, pref, max] {
        d.extend_from_slice(&v.to_be_bytes());
    }
    option_reply(out, option, REP_INFO, &d);
    if wanted.contains(&INFO_NAME) {
        d.clear();
        d.extend_from_slice(&INFO_NAME.to_be_bytes());
        d.extend_from_slice(ctx.export_names()[chosen].as_bytes());
        option_reply(out, option, REP_INFO, &d);
    }
    if wanted.contains(&INFO_DESCRIPTION) && !ctx.cfg.description.is_empty() {
        d.clear();
        d.extend_from_slice(&INFO_DESCRIPTION.to_be_bytes());
        d.extend_from_slice(truncate_str(&ctx.cfg.description, 4096).as_bytes());
        option_reply(out, option, REP_INFO, &d);
    }
    option_reply(out, option, REP_ACK, &[]);
    true
}

fn truncate_str(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// NBD_OPT_LIST_META_CONTEXT and NBD_OPT_SET_META_CONTEXT over the one context we have.
/// Queries are matched exactly; for a list, the namespace alone ("base:") and no query at all
/// also match every context, as the spec allows.
fn meta_context(ctx: &ConnCtx, neg: &mut Negotiated, option: u32, data: &[u8], out: &mut Vec<u8>) {
    if !neg.structured {
        error_reply(out, option, REP_ERR_INVALID, "negotiate structured replies first");
        return;
    }
    let mut at = 0;
    let parsed = take_string(data, &mut at).and_then(|name| {
        let n = data.get(at..at + 4).map(be_u32)? as usize;
        at += 4;
        let mut queries = Vec::new();
        for _ in 0..n {
            queries.push(take_string(data, &mut at)?);
        }
        (at == data.len()).then_some((name, queries))
    });
    let Some((name, queries)) = parsed else {
        error_reply(out, option, REP_ERR_INVALID, "malformed meta context data");
        return;
    };
    if ctx.find_export(name).is_none() {
        let msg = format!("no export named {:?}", String::from_utf8_lossy(name));
        error_reply(out, option, REP_ERR_UNKNOWN, &msg);
        return;
    }
    let list = option == OPT_LIST_META_CONTEXT;
    let base = META_BASE_ALLOCATION.as_bytes();
    let selected = if list {
        queries.is_empty() || queries.iter().any(|q| *q == base || *q == b"base:")
    } else {
        queries.contains(&base)
    };
    if selected {
        let id = if list { 0 } else { META_BASE_ALLOCATION_ID };
        let mut d = Vec::with_capacity(4 + base.len());
        d.extend_from_slice(&id.to_be_bytes());
        d.extend_from_slice(base);
        option_reply(out, option, REP_META_CONTEXT, &d);
    }
    if !list {
        // A set replaces the previous selection, even with nothing.
        neg.meta_context = selected.then_some(META_BASE_ALLOCATION_ID);
    }
    option_reply(out, option, REP_ACK, &[]);
}
