//! The NBD wire format: magic numbers, option, command and flag values, the request header,
//! and the byte layout of every reply the server sends (proto.md in the NBD repository).
//!
//! Everything on the wire is big-endian. Replies are built as [`OutMsg`]s: a short header kept
//! inline plus an optional body (a read's data, an error message) that is written from its own
//! buffer, so a read's data is never copied between the stack and the socket.

/// "NBDMAGIC": the first 8 bytes a server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": the newstyle magic, sent by the server and before every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply (fixed newstyle).
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Transmission flags.
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const FLAG_READ_ONLY: u16 = 1 << 1;
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const FLAG_SEND_FUA: u16 = 1 << 3;
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const FLAG_SEND_DF: u16 = 1 << 7;
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const FLAG_SEND_CACHE: u16 = 1 << 10;
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

// Option reply types.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
const REP_ERR: u32 = 1 << 31;
pub const REP_ERR_UNSUP: u32 = REP_ERR + 1;
pub const REP_ERR_POLICY: u32 = REP_ERR + 2;
pub const REP_ERR_INVALID: u32 = REP_ERR + 3;
pub const REP_ERR_UNKNOWN: u32 = REP_ERR + 6;
pub const REP_ERR_SHUTDOWN: u32 = REP_ERR + 7;
pub const REP_ERR_TOO_BIG: u32 = REP_ERR + 9;

// NBD_REP_INFO types.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Commands.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

// Command flags.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Structured reply flags and types.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) + 2;

/// The one metadata context served, and the id it gets when a client selects it.
pub const META_BASE_ALLOCATION: &str = "base:allocation";
pub const META_BASE_ALLOCATION_ID: u32 = 1;

/// The largest payload (a write's data, a read's reply) served: the 32 MiB the spec names as
/// the most a client should expect a server to take without asking, and what we advertise as
/// the maximum block size.
pub const MAX_PAYLOAD: u32 = 32 << 20;

// The error values of the protocol (proto.md, "Error values"). They happen to equal Linux's
// errnos, but they are the protocol's numbers, so they are spelled out here.
pub const NBD_EPERM: u32 = 1;
pub const NBD_EIO: u32 = 5;
pub const NBD_ENOMEM: u32 = 12;
pub const NBD_EINVAL: u32 = 22;
pub const NBD_ENOSPC: u32 = 28;
pub const NBD_EOVERFLOW: u32 = 75;
pub const NBD_ENOTSUP: u32 = 95;
pub const NBD_ESHUTDOWN: u32 = 108;

/// The protocol's error value for a host errno: the ones the protocol defines map to
/// themselves (EDQUOT and EFBIG to ENOSPC, as the spec asks), anything else to EIO.
pub fn nbd_error(errno: i32) -> u32 {
    match errno {
        libc::EPERM => NBD_EPERM,
        libc::EIO => NBD_EIO,
        libc::ENOMEM => NBD_ENOMEM,
        libc::EINVAL => NBD_EINVAL,
        libc::ENOSPC | libc::EDQUOT | libc::EFBIG => NBD_ENOSPC,
        libc::EOVERFLOW => NBD_EOVERFLOW,
        libc::EOPNOTSUPP => NBD_ENOTSUP,
        libc::ESHUTDOWN => NBD_ESHUTDOWN,
        _ => NBD_EIO,
    }
}

/// Size of a request header on the wire.
pub const REQUEST_BYTES: usize = 28;

/// A transmission-phase request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset: u64,
    pub len: u32,
}

/// Parses a request header; `None` when the magic is wrong (the stream is out of step and
/// the connection must close).
pub fn parse_request(b: &[u8; REQUEST_BYTES]) -> Option<RequestHeader> {
    if be_u32(&b[0..4]) != REQUEST_MAGIC {
        return None;
    }
    Some(RequestHeader {
        flags: u16::from_be_bytes([b[4], b[5]]),
        kind: u16::from_be_bytes([b[6], b[7]]),
        cookie: be_u64(&b[8..16]),
        offset: be_u64(&b[16..24]),
        len: be_u32(&b[24..28]),
    })
}

pub fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

pub fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Room for the longest inline header: a structured chunk header (20 bytes) plus the 8-byte
/// offset of OFFSET_DATA, or the 12 bytes of a one-extent block-status payload.
const HEAD_CAP: usize = 32;

/// One reply ready for the socket: an inline header and an optional body. `sent` counts the
/// bytes of it already written (a non-blocking write may stop inside a reply). `cost` is what
/// the request was charged against the connection's in-flight byte budget.
pub(crate) struct OutMsg {
    head: [u8; HEAD_CAP],
    head_len: u8,
    pub body: Vec<u8>,
    pub sent: usize,
    pub cost: usize,
}

impl OutMsg {
    fn new() -> OutMsg {
        OutMsg { head: [0; HEAD_CAP], head_len: 0, body: Vec::new(), sent: 0, cost: 0 }
    }

    fn put(&mut self, bytes: &[u8]) {
        let at = self.head_len as usize;
        self.head[at..at + bytes.len()].copy_from_slice(bytes);
        self.head_len += bytes.len() as u8;
    }

    pub fn wire_len(&self) -> usize {
        self.head_len as usize + self.body.len()
    }

    /// The bytes not yet sent, as at most two slices (header rest, body rest).
    pub fn unsent(&self) -> (&[u8], &[u8]) {
        let h = self.head_len as usize;
        if self.sent < h {
            (&self.head[self.sent..h], &self.body[..])
        } else {
            (&[], &self.body[self.sent - h..])
        }
    }

    /// A simple reply: magic, error, cookie, then `data` (a read's, when `error` is 0).
    pub fn simple(cookie: u64, error: u32, data: Vec<u8>) -> OutMsg {
        let mut m = OutMsg::new();
        m.put(&SIMPLE_REPLY_MAGIC.to_be_bytes());
        m.put(&error.to_be_bytes());
        m.put(&cookie.to_be_bytes());
        m.body = data;
        m
    }

    fn chunk_header(&mut self, flags: u16, kind: u16, cookie: u64, len: u32) {
        self.put(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
        self.put(&flags.to_be_bytes());
        self.put(&kind.to_be_bytes());
        self.put(&cookie.to_be_bytes());
        self.put(&len.to_be_bytes());
    }

    /// The final chunk of a structured reply that carries nothing (NBD_REPLY_TYPE_NONE).
    pub fn done(cookie: u64) -> OutMsg {
        let mut m = OutMsg::new();
        m.chunk_header(REPLY_FLAG_DONE, REPLY_TYPE_NONE, cookie, 0);
        m
    }

    /// A read's data as one OFFSET_DATA chunk that is also the final one: the data is complete
    /// before the header is queued, so no error can follow it. Empty data (a zero-length read)
    /// is answered with NONE, as OFFSET_DATA must describe at least one byte.
    pub fn read_data(cookie: u64, offset: u64, data: Vec<u8>) -> OutMsg {
        if data.is_empty() {
            return OutMsg::done(cookie);
        }
        let mut m = OutMsg::new();
        // Reads are capped at MAX_PAYLOAD, so the length fits the 32-bit field.
        m.chunk_header(REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, cookie, 8 + data.len() as u32);
        m.put(&offset.to_be_bytes());
        m.body = data;
        m
    }

    /// An error chunk that ends the reply: ERROR_OFFSET with the request's offset for reads
    /// (the spec's way of saying which data is bad), plain ERROR otherwise. `message` is for
    /// the human behind the client (qemu and nbdkit's tools print it).
    pub fn error(cookie: u64, error: u32, message: &str, offset: Option<u64>) -> OutMsg {
        // The message length field is 16 bits; the spec's strings are at most 4096 bytes.
        let mut end = message.len().min(4096);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        let msg = &message.as_bytes()[..end];
        let kind = if offset.is_some() { REPLY_TYPE_ERROR_OFFSET } else { REPLY_TYPE_ERROR };
        let len = 6 + msg.len() + if offset.is_some() { 8 } else { 0 };
        let mut m = OutMsg::new();
        m.chunk_header(REPLY_FLAG_DONE, kind, cookie, len as u32);
        let mut body = Vec::with_capacity(len);
        body.extend_from_slice(&error.to_be_bytes());
        body.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        body.extend_from_slice(msg);
        if let Some(o) = offset {
            body.extend_from_slice(&o.to_be_bytes());
        }
        m.body = body;
        m
    }

    /// A BLOCK_STATUS chunk for one context with a single extent of `len` bytes whose status
    /// is `flags` (0: allocated data, which the spec says a server may always report).
    pub fn block_status(cookie: u64, context: u32, len: u32, flags: u32) -> OutMsg {
        let mut m = OutMsg::new();
        m.chunk_header(REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, cookie, 12);
        let mut body = Vec::with_capacity(12);
        body.extend_from_slice(&context.to_be_bytes());
        body.extend_from_slice(&len.to_be_bytes());
        body.extend_from_slice(&flags.to_be_bytes());
        m.body = body;
        m
    }
}

/// An option reply (fixed newstyle): magic, option, reply type, length, data.
pub fn option_reply(out: &mut Vec<u8>, option: u32, kind: u32, data: &[u8]) {
    out.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

#[cfg(test)]
mod tests {
    //! Goal: the byte layouts match proto.md. Method: build each message and compare with the
    //! bytes written out by hand from the spec.

    use super::*;

    fn bytes(m: &OutMsg) -> Vec<u8> {
        let (h, b) = m.unsent();
        [h, b].concat()
    }

    #[test]
    fn request_headers_parse_and_bad_magic_is_refused() {
        let mut b = [0u8; REQUEST_BYTES];
        b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&1u16.to_be_bytes());
        b[6..8].copy_from_slice(&CMD_WRITE.to_be_bytes());
        b[8..16].copy_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
        b[16..24].copy_from_slice(&4096u64.to_be_bytes());
        b[24..28].copy_from_slice(&512u32.to_be_bytes());
        let h = parse_request(&b).unwrap();
        assert_eq!(
            h,
            RequestHeader {
                flags: 1,
                kind: CMD_WRITE,
                cookie: 0x0102_0304_0506_0708,
                offset: 4096,
                len: 512
            }
        );
        b[0] ^= 1;
        assert_eq!(parse_request(&b), None);
    }

    #[test]
    fn replies_have_the_spec_layout() {
        let s = OutMsg::simple(7, NBD_EINVAL, vec![]);
        assert_eq!(bytes(&s), [0x67, 0x44, 0x66, 0x98, 0, 0, 0, 22, 0, 0, 0, 0, 0, 0, 0, 7]);
        let r = OutMsg::read_data(9, 512, vec![0xaa; 3]);
        let want: Vec<u8> = [
            &[0x66, 0x8e, 0x33, 0xef, 0, 1, 0, 1][..],
            &9u64.to_be_bytes(),
            &11u32.to_be_bytes(),
            &512u64.to_be_bytes(),
            &[0xaa; 3],
        ]
        .concat();
        assert_eq!(bytes(&r), want);
        let e = OutMsg::error(1, NBD_EIO, "bad", Some(4096));
        let want: Vec<u8> = [
            &[0x66, 0x8e, 0x33, 0xef, 0, 1, 0x80, 2][..],
            &1u64.to_be_bytes(),
            &17u32.to_be_bytes(),
            &5u32.to_be_bytes(),
            &3u16.to_be_bytes(),
            b"bad",
            &4096u64.to_be_bytes(),
        ]
        .concat();
        assert_eq!(bytes(&e), want);
        let d = OutMsg::done(2);
        assert_eq!(bytes(&d)[4..8], [0, 1, 0, 0]);
        let bs = OutMsg::block_status(3, 1, 8192, 0);
        assert_eq!(bytes(&bs).len(), 20 + 12);
        assert_eq!(bytes(&bs)[20..], [0, 0, 0, 1, 0, 0, 0x20, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn errnos_map_to_protocol_values() {
        assert_eq!(nbd_error(libc::EPERM), 1);
        assert_eq!(nbd_error(libc::ENOSPC), 28);
        assert_eq!(nbd_error(libc::EDQUOT), 28);
        assert_eq!(nbd_error(libc::EOPNOTSUPP), 95);
        assert_eq!(nbd_error(libc::ESHUTDOWN), 108);
        assert_eq!(nbd_error(libc::EOVERFLOW), 75);
        assert_eq!(nbd_error(libc::EBADF), 5);
    }
}
