//! A remote NBD export as a block device: an NBD *client*, so the members of a stack can live
//! on other machines (or network namespaces), served by qemu-nbd, nbdkit, nbd-server or another
//! flashrig's `serve nbd`.
//!
//! Protocol: the NBD protocol (NetworkBlockDevice/nbd, `doc/proto.md`), fixed newstyle
//! handshake. The client asks for the export with `NBD_OPT_GO` (requesting
//! `NBD_INFO_BLOCK_SIZE`, so it learns the server's block size constraints) and falls back to
//! `NBD_OPT_EXPORT_NAME` when the server answers `NBD_REP_ERR_UNSUP`; non-fixed newstyle
//! servers get `NBD_OPT_EXPORT_NAME` directly. Structured replies are not negotiated: simple
//! replies carry everything this device needs, and without them a read's payload length is
//! known from the request.
//!
//! Contract commands map to NBD commands as follows (docs/nbd-device.md has the reasoning):
//!
//! * `read` → `NBD_CMD_READ`; `write` → `NBD_CMD_WRITE`, with `NBD_CMD_FLAG_FUA` when the hint
//!   asks for it and the server has `NBD_FLAG_SEND_FUA`; a FUA write to a server without it is
//!   followed by `NBD_CMD_FLUSH`. Requests larger than the server's maximum payload (32 MiB
//!   at most) are split and sent together.
//! * `flush` → `NBD_CMD_FLUSH`. A server that does not advertise `NBD_FLAG_SEND_FLUSH` says,
//!   by the convention of the Linux kernel's and QEMU's NBD clients, that it has no volatile
//!   write cache (a write is stable when it is acknowledged): flush is then a no-op, counted
//!   in `flushes_without_server_flush`. NBD has no other way for a server to say so.
//! * `trim` → `NBD_CMD_WRITE_ZEROES` without `NBD_CMD_FLAG_NO_HOLE` (the server may deallocate)
//!   when the server has `NBD_FLAG_SEND_WRITE_ZEROES`, else `NBD_CMD_WRITE` of zeros.
//!   `NBD_CMD_TRIM` is never sent: the protocol leaves trimmed bytes undefined until they are
//!   written again, and the contract says trimmed blocks read as zeros.
//!
//! Threads: the device's futures are polled on flashrig reactors, which must never block on a
//! socket. Each connection has a writer thread, fed by a channel, that serialises requests into
//! a buffered socket (flushing it whenever the channel runs dry, so a burst of requests leaves
//! in few system calls), and a receiver thread that reads replies, matches them to requests by
//! cookie and completes each request's one-shot slot; completing wakes the task on its reactor
//! from the receiver's thread, as the real runtime allows. Many requests are in flight at once.
//! Connecting and the handshake run on a helper thread too, awaited the same way.
//!
//! Failure: when a connection breaks (EOF, reset, a protocol violation by the server, or an
//! `ESHUTDOWN` reply), every request in flight on it and every later one fails with
//! [`DevError::DeviceFailed`], whose name carries the URI and the reason; an engine with
//! redundancy then runs degraded. Error replies map to typed errors (`EIO` → media error,
//! `ENOSPC` → no space, `EINVAL` → invalid, ...).
//!
//! The simulated runtime is refused: a remote server answers in real time, which a virtual
//! clock knows nothing of, and a simulated run would stop being deterministic.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;
use flashrig_blockdev::{
    check_io, check_range, BlockDevice, DevError, DevResult, DeviceInfo, WriteHints,
};
use flashrig_metrics::{Counter, Registry};
use flashrig_runtime::{runtime_kind, RuntimeKind};
use parking_lot::Mutex;

/// The IANA port of NBD, used when a URI names none.
pub const DEFAULT_PORT: u16 = 10809;
/// Connections one device may open.
pub const MAX_CONNECTIONS: usize = 64;

// Handshake magics and flags (proto.md, "Handshake").
const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const CLISERV_MAGIC: u64 = 0x0000_4202_8186_1253;
const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
const FLAG_NO_ZEROES: u16 = 1 << 1;
const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
const FLAG_C_NO_ZEROES: u32 = 1 << 1;
const OPT_EXPORT_NAME: u32 = 1;
const OPT_ABORT: u32 = 2;
const OPT_GO: u32 = 7;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const REP_ERR: u32 = 1 << 31;
const REP_ERR_UNSUP: u32 = REP_ERR | 1;
const INFO_EXPORT: u16 = 0;
const INFO_BLOCK_SIZE: u16 = 3;

// Transmission flags.
const TF_HAS_FLAGS: u16 = 1 << 0;
const TF_READ_ONLY: u16 = 1 << 1;
const TF_SEND_FLUSH: u16 = 1 << 2;
const TF_SEND_FUA: u16 = 1 << 3;
const TF_SEND_WRITE_ZEROES: u16 = 1 << 6;
const TF_CAN_MULTI_CONN: u16 = 1 << 8;

// Transmission messages.
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;
const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_DISC: u16 = 2;
const CMD_FLUSH: u16 = 3;
const CMD_WRITE_ZEROES: u16 = 6;
const CMD_FLAG_FUA: u16 = 1 << 0;

// Error values of replies (proto.md, "Error values"; ENOTSUP is sent by some servers too).
const EPERM: u32 = 1;
const EIO: u32 = 5;
const ENOMEM: u32 = 12;
const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;
const EOVERFLOW: u32 = 75;
const ENOTSUP: u32 = 95;
const ESHUTDOWN: u32 = 108;

/// The largest request sent, whatever the server allows: the protocol's advice for clients
/// that have not negotiated block sizes, and a bound on the memory one request holds.
const MAX_REQUEST_BYTES: u32 = 32 << 20;
/// How long a TCP connect may take before the server counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the server may stay silent during the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Option replies longer than this are a broken server, not data to allocate for.
const MAX_OPTION_REPLY: u32 = 64 << 10;
/// Socket buffer of each writer and receiver thread.
const IO_BUFFER: usize = 256 << 10;

/// Where an export lives: a TCP host and port, or a Unix socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NbdAddress {
    Tcp { host: String, port: u16 },
    Unix { socket: PathBuf },
}

/// A parsed NBD URI: `nbd://host[:port]/export` or `nbd+unix:///export?socket=/path` (the
/// forms of the NBD URI specification that need no TLS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUri {
    pub address: NbdAddress,
    /// The export name (empty: the server's default export).
    pub export: String,
}

impl NbdUri {
    /// Parses an NBD URI; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<NbdUri, String> {
        const FORMS: &str = "nbd://host[:port]/export or nbd+unix:///export?socket=/path";
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(format!("\"{text}\" is not an NBD URI: use {FORMS}"));
        };
        let unix = match scheme {
            "nbd" => false,
            "nbd+unix" => true,
            "nbds" | "nbds+unix" | "nbds+vsock" => {
                return Err(format!(
                    "{scheme}:// asks for TLS, which this client does not speak: use nbd:// or \
                     nbd+unix://"
                ))
            }
            "nbd+vsock" => return Err(format!("nbd+vsock:// is not supported: use {FORMS}")),
            other => {
                return Err(format!("unknown scheme \"{other}://\": use {FORMS}"));
            }
        };
        if rest.contains('#') {
            return Err("a URI fragment (#...) has no meaning for NBD".into());
        }
        let (before_query, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.find('/') {
            Some(i) => (&before_query[..i], &before_query[i..]),
            None => (before_query, ""),
        };
        let export = percent_decode(path.strip_prefix('/').unwrap_or(path), "export name")?;
        if export.len() > 4096 {
            return Err(format!(
                "the export name is {} bytes long; NBD allows at most 4096",
                export.len()
            ));
        }
        let mut socket = None;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "socket" if !unix => {
                    return Err("socket= belongs to nbd+unix:// URIs; nbd:// connects over TCP \
                                to the host"
                        .into())
                }
                "socket" if socket.is_some() => {
                    return Err("socket= is given twice".into());
                }
                "socket" => socket = Some(percent_decode(value, "socket path")?),
                other => {
                    return Err(format!(
                        "unknown query parameter \"{other}\" (this client knows only socket=)"
                    ))
                }
            }
        }
        let address = if unix {
            if !authority.is_empty() {
                return Err(format!(
                    "nbd+unix:// takes no host (nbd+unix:///export?socket=/path), found \
                     \"{authority}\""
                ));
            }
            match socket {
                Some(s) if !s.is_empty() => NbdAddress::Unix { socket: PathBuf::from(s) },
                _ => return Err("nbd+unix:// needs ?socket=/path/to/the/socket".into()),
            }
        } else {
            if authority.is_empty() {
                return Err(format!("nbd:// needs a host: {FORMS}"));
            }
            if authority.contains('@') {
                return Err("user names (user@host) are not part of NBD URIs".into());
            }
            let (host, port) = split_host_port(authority)?;
            NbdAddress::Tcp { host, port }
        };
        Ok(NbdUri { address, export })
    }
}

impl fmt::Display for NbdUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let export = percent_encode(&self.export, "/");
        match &self.address {
            NbdAddress::Tcp { host, port } if host.contains(':') => {
                write!(f, "nbd://[{host}]:{port}/{export}")
            }
            NbdAddress::Tcp { host, port } => write!(f, "nbd://{host}:{port}/{export}"),
            NbdAddress::Unix { socket } => write!(
                f,
                "nbd+unix:///{export}?socket={}",
                percent_encode(&socket.to_string_lossy(), "/")
            ),
        }
    }
}

fn split_host_port(authority: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err(format!("\"{authority}\": an IPv6 address needs its closing ]"));
        };
        match after {
            "" => (host, None),
            p => match p.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(format!("\"{authority}\": expected :port after ]")),
            },
        }
    } else {
        match authority.matches(':').count() {
            0 => (authority, None),
            1 => {
                let (h, p) = authority.split_once(':').expect("one colon");
                (h, Some(p))
            }
            _ => {
                return Err(format!(
                    "\"{authority}\": an IPv6 address goes in brackets, as in nbd://[::1]:10809/"
                ))
            }
        }
    };
    if host.is_empty() {
        return Err(format!("\"{authority}\": the host is empty"));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(format!("port \"{p}\" is not a number from 1 to 65535")),
        },
    };
    Ok((host.to_string(), port))
}

fn percent_decode(s: &str, what: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            match (b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
                (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                _ => {
                    return Err(format!(
                        "the {what} has a % not followed by two hex digits (write %25 for %)"
                    ))
                }
            }
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("the {what} is not UTF-8 after percent-decoding"))
}

fn percent_encode(s: &str, keep: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        let c = b as char;
        if c.is_ascii_alphanumeric() || "-._~".contains(c) || keep.contains(c) {
            out.push(c);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// How to reach an export and use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdOptions {
    pub uri: NbdUri,
    /// The device's logical block size: a power of two of at least 512, a multiple of the
    /// server's minimum block size; the export's size must be a multiple of it.
    pub block_size: u32,
    /// Connections to open (1 to [`MAX_CONNECTIONS`]); more than one needs a server that
    /// advertises `NBD_FLAG_CAN_MULTI_CONN`.
    pub connections: usize,
}

impl NbdOptions {
    pub fn new(uri: NbdUri) -> Self {
        Self { uri, block_size: 4096, connections: 1 }
    }
}

/// Why a device could not be opened: the URI and what went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdError {
    pub uri: String,
    pub message: String,
}

impl fmt::Display for NbdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.uri, self.message)
    }
}

impl std::error::Error for NbdError {}

/// What the handshake learnt about the export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Negotiated {
    size: u64,
    flags: u16,
    /// The server's block size constraints (0: not advertised).
    min_block: u32,
    preferred_block: u32,
    max_payload: u32,
}

// ---------------------------------------------------------------------------------------------
// One-shot completion slots, completed from any thread.

struct OneshotState<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

/// A value handed from another thread to a task: the receiver thread completes it, and the
/// waker it calls schedules the waiting task back on its own reactor.
struct Oneshot<T> {
    state: Mutex<OneshotState<T>>,
}

impl<T> Oneshot<T> {
    fn new() -> Arc<Self> {
        Arc::new(Oneshot { state: Mutex::new(OneshotState { value: None, waker: None }) })
    }

    fn complete(&self, v: T) {
        let waker = {
            let mut s = self.state.lock();
            s.value = Some(v);
            s.waker.take()
        };
        // Wake outside the lock: the woken task may be polled at once on another thread.
        if let Some(w) = waker {
            w.wake();
        }
    }
}

struct Wait<T>(Arc<Oneshot<T>>);

impl<T> Future for Wait<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut s = self.0.state.lock();
        match s.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                match &s.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => s.waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Sockets.

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    /// Ends both directions, which wakes a thread blocked reading or writing the socket.
    fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

    fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
            Stream::Unix(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// Connects to the export and negotiates it (blocking: runs on a helper thread).
fn connect(uri: &NbdUri) -> Result<(Stream, Negotiated), String> {
    let stream = match &uri.address {
        NbdAddress::Tcp { host, port } => {
            let addrs: Vec<SocketAddr> = (host.as_str(), *port)
                .to_socket_addrs()
                .map_err(|e| format!("cannot resolve the host \"{host}\": {e}"))?
                .collect();
            let mut last = format!("the host \"{host}\" resolves to no address");
            let mut found = None;
            for a in addrs {
                match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
                    Ok(s) => {
                        found = Some(s);
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                        last = format!(
                            "cannot connect to {a}: no answer within {} s",
                            CONNECT_TIMEOUT.as_secs()
                        )
                    }
                    Err(e) => last = format!("cannot connect to {a}: {e}"),
                }
            }
            let s = found.ok_or(last)?;
            // Requests are small and latency matters more than packet count.
            let _ = s.set_nodelay(true);
            Stream::Tcp(s)
        }
        NbdAddress::Unix { socket } => Stream::Unix(
            UnixStream::connect(socket)
                .map_err(|e| format!("cannot connect to the socket {}: {e}", socket.display()))?,
        ),
    };
    stream.set_timeouts(Some(HANDSHAKE_TIMEOUT)).map_err(|e| format!("socket setup: {e}"))?;
    let mut s = stream;
    let neg = handshake(&mut s, &uri.export)?;
    // From here on, silence is not an error: requests may legitimately take long.
    s.set_timeouts(None).map_err(|e| format!("socket setup: {e}"))?;
    Ok((s, neg))
}

fn handshake_io(e: io::Error, when: &str) -> String {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => format!("the server closed the connection {when}"),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            format!("the server sent nothing for {} s {when}", HANDSHAKE_TIMEOUT.as_secs())
        }
        _ => format!("{when}: {e}"),
    }
}

fn read_array<const N: usize>(s: &mut impl Read, when: &str) -> Result<[u8; N], String> {
    let mut b = [0u8; N];
    s.read_exact(&mut b).map_err(|e| handshake_io(e, when))?;
    Ok(b)
}

fn read_u16(s: &mut impl Read, when: &str) -> Result<u16, String> {
    read_array::<2>(s, when).map(u16::from_be_bytes)
}

fn read_u32(s: &mut impl Read, when: &str) -> Result<u32, String> {
    read_array::<4>(s, when).map(u32::from_be_bytes)
}

fn read_u64(s: &mut impl Read, when: &str) -> Result<u64, String> {
    read_array::<8>(s, when).map(u64::from_be_bytes)
}

/// Eight bytes the server sent where a magic number belonged, shown as text when they are.
fn show_magic(v: u64) -> String {
    let b = v.to_be_bytes();
    if b.iter().all(|c| c.is_ascii_graphic() || *c == b' ') {
        format!("\"{}\"", String::from_utf8_lossy(&b))
    } else {
        format!("{v:#018x}")
    }
}

fn send_option(s: &mut impl Write, option: u32, data: &[u8]) -> Result<(), String> {
    let mut m = Vec::with_capacity(16 + data.len());
    m.extend_from_slice(&IHAVEOPT.to_be_bytes());
    m.extend_from_slice(&option.to_be_bytes());
    m.extend_from_slice(&(data.len() as u32).to_be_bytes());
    m.extend_from_slice(data);
    s.write_all(&m).and_then(|_| s.flush()).map_err(|e| handshake_io(e, "while sending an option"))
}

/// The fixed newstyle handshake up to the transmission phase.
fn handshake<S: Read + Write>(s: &mut S, export: &str) -> Result<Negotiated, String> {
    let greeting = read_u64(s, "before greeting")?;
    if greeting != NBDMAGIC {
        return Err(format!(
            "not an NBD server: it greeted with {} instead of NBDMAGIC",
            show_magic(greeting)
        ));
    }
    match read_u64(s, "during the greeting")? {
        IHAVEOPT => {}
        CLISERV_MAGIC => {
            return Err("the server speaks the oldstyle handshake, which this client does not \
                        (it needs a newstyle server: qemu-nbd, nbdkit, nbd-server 3.10 or later)"
                .into())
        }
        other => {
            return Err(format!(
                "not an NBD server: it sent {} where IHAVEOPT belongs",
                show_magic(other)
            ))
        }
    }
    let hflags = read_u16(s, "during the greeting")?;
    let fixed = hflags & FLAG_FIXED_NEWSTYLE != 0;
    let no_zeroes = hflags & FLAG_NO_ZEROES != 0;
    let mut cflags = 0u32;
    if fixed {
        cflags |= FLAG_C_FIXED_NEWSTYLE;
    }
    if no_zeroes {
        cflags |= FLAG_C_NO_ZEROES;
    }
    s.write_all(&cflags.to_be_bytes())
        .and_then(|_| s.flush())
        .map_err(|e| handshake_io(e, "while answering the greeting"))?;
    if fixed {
        match opt_go(s, export) {
            Ok(Some(n)) => return Ok(n),
            // The server does not know NBD_OPT_GO: ask the old way.
            Ok(None) => {}
            Err(e) => {
                // A soft disconnect, as the protocol asks of a client that gives up.
                let _ = send_option(s, OPT_ABORT, &[]);
                return Err(e);
            }
        }
    }
    export_name(s, export, no_zeroes)
}

/// `NBD_OPT_GO`; `Ok(None)` when the server does not support it.
fn opt_go<S: Read + Write>(s: &mut S, export: &str) -> Result<Option<Negotiated>, String> {
    let mut data = Vec::with_capacity(export.len() + 8);
    data.extend_from_slice(&(export.len() as u32).to_be_bytes());
    data.extend_from_slice(export.as_bytes());
    // One information request: the block size constraints (the export's size and flags come
    // unasked). Asking also tells the server that this client honours them.
    data.extend_from_slice(&1u16.to_be_bytes());
    data.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    send_option(s, OPT_GO, &data)?;
    let when = "while negotiating the export (NBD_OPT_GO)";
    let mut export_info: Option<(u64, u16)> = None;
    let mut sizes = (0, 0, 0);
    loop {
        let magic = read_u64(s, when)?;
        if magic != OPT_REPLY_MAGIC {
            return Err(format!("protocol error {when}: option reply magic {}", show_magic(magic)));
        }
        let option = read_u32(s, when)?;
        if option != OPT_GO {
            return Err(format!(
                "protocol error {when}: the server answered option {option}, not NBD_OPT_GO"
            ));
        }
        let kind = read_u32(s, when)?;
        let len = read_u32(s, when)?;
        if len > MAX_OPTION_REPLY {
            return Err(format!(
                "protocol error {when}: an option reply of {len} bytes is implausible"
            ));
        }
        let mut payload = vec![0u8; len as usize];
        s.read_exact(&mut payload).map_err(|e| handshake_io(e, when))?;
        match kind {
            REP_ACK => break,
            REP_INFO if payload.len() >= 2 => {
                let info = u16::from_be_bytes([payload[0], payload[1]]);
                let body = &payload[2..];
                match info {
                    INFO_EXPORT if body.len() == 10 => {
                        let size = u64::from_be_bytes(body[0..8].try_into().expect("8 bytes"));
                        let flags = u16::from_be_bytes([body[8], body[9]]);
                        export_info = Some((size, flags));
                    }
                    INFO_BLOCK_SIZE if body.len() == 12 => {
                        let word = |i: usize| {
                            u32::from_be_bytes(body[i..i + 4].try_into().expect("4 bytes"))
                        };
                        sizes = (word(0), word(4), word(8));
                    }
                    INFO_EXPORT | INFO_BLOCK_SIZE => {
                        return Err(format!(
                            "protocol error {when}: information {info} with {} bytes",
                            body.len()
                        ))
                    }
                    // Names and descriptions the server volunteers are not needed.
                    _ => {}
                }
            }
            REP_INFO => {
                return Err(format!("protocol error {when}: an empty NBD_REP_INFO"));
            }
            REP_ERR_UNSUP => return Ok(None),
            k if k & REP_ERR != 0 => {
                let message = String::from_utf8_lossy(&payload);
                let message = message.trim();
                let what = match k & !REP_ERR {
                    2 => "refused by the server's policy".to_string(),
                    3 => "the server found the request invalid".to_string(),
                    4 => "not supported on the server's platform".to_string(),
                    5 => "the server requires TLS, which this client does not speak".to_string(),
                    6 => format!("the server has no export named \"{export}\""),
                    7 => "the server is shutting down".to_string(),
                    8 => "the server requires block size negotiation".to_string(),
                    9 => "the request is too big for the server".to_string(),
                    n => format!("the server refused it (error {n})"),
                };
                let shown: String = message.chars().take(300).collect();
                return Err(if shown.is_empty() {
                    format!("cannot open the export: {what}")
                } else {
                    format!("cannot open the export: {what}: {shown}")
                });
            }
            // Unknown non-error replies carry nothing this client asked for.
            _ => {}
        }
    }
    let Some((size, flags)) = export_info else {
        return Err(format!(
            "protocol error {when}: the server acknowledged without describing the export"
        ));
    };
    Ok(Some(Negotiated {
        size,
        flags,
        min_block: sizes.0,
        preferred_block: sizes.1,
        max_payload: sizes.2,
    }))
}

/// `NBD_OPT_EXPORT_NAME`: the server answers with the export's size and flags, or hangs up.
fn export_name<S: Read + Write>(
    s: &mut S,
    export: &str,
    no_zeroes: bool,
) -> Result<Negotiated, String> {
    send_option(s, OPT_EXPORT_NAME, export.as_bytes())?;
    let when = format!(
        "after NBD_OPT_EXPORT_NAME (it has no export named \"{export}\", or refused this client)"
    );
    let size = read_u64(s, &when)?;
    let flags = read_u16(s, &when)?;
    if !no_zeroes {
        read_array::<124>(s, &when)?;
    }
    Ok(Negotiated { size, flags, min_block: 0, preferred_block: 0, max_payload: 0 })
}

// ---------------------------------------------------------------------------------------------
// Transmission.

/// How a request ended.
enum Outcome {
    /// Success; a read's data.
    Done(Vec<u8>),
    /// The server's error value.
    ServerError(u32),
    /// The connection failed before the reply (the reason).
    Failed(String),
}

/// A request waiting for its reply.
struct Pending {
    /// Bytes of data the reply carries (a read's length; 0 for the rest).
    read_len: u32,
    slot: Arc<Oneshot<Outcome>>,
}

#[derive(Default)]
struct ConnState {
    next_cookie: u64,
    pending: HashMap<u64, Pending>,
    /// Why the connection failed; set once, and from then on every request fails.
    failure: Option<String>,
}

/// What the reactors, the writer and the receiver of one connection share.
struct ConnShared {
    state: Mutex<ConnState>,
    /// Mirrors `state.failure.is_some()` for the writer, which checks it per request.
    failed: AtomicBool,
    /// The socket was shut down: nothing more can be sent, not even `NBD_CMD_DISC`.
    broken: AtomicBool,
    /// Set when the device is being dropped: the end of the connection is then no failure.
    closing: AtomicBool,
    /// A handle on the socket, to shut it down and so stop both threads.
    socket: Stream,
    failed_connections: Arc<Counter>,
}

impl ConnShared {
    /// Records that the connection failed (the first reason wins) and fails every request in
    /// flight, leaving the socket open (for a soft disconnect).
    fn mark_failed(&self, reason: String) {
        let (pending, reason) = {
            let mut st = self.state.lock();
            if st.failure.is_none() {
                st.failure = Some(reason);
                self.failed.store(true, Ordering::Release);
                if !self.closing.load(Ordering::Acquire) {
                    self.failed_connections.inc();
                }
            }
            (std::mem::take(&mut st.pending), st.failure.clone().unwrap_or_default())
        };
        for (_, p) in pending {
            p.slot.complete(Outcome::Failed(reason.clone()));
        }
    }

    /// Fails the connection and shuts the socket, so both threads end.
    fn fail(&self, reason: String) {
        self.mark_failed(reason);
        self.broken.store(true, Ordering::Release);
        self.socket.shutdown();
    }
}

/// Fails the connection when a thread ends, however it ends, so that no request can wait for
/// a reply nobody will read.
struct FailOnExit(Arc<ConnShared>, &'static str);

impl Drop for FailOnExit {
    fn drop(&mut self) {
        self.0.fail(self.1.to_string());
    }
}

enum Payload {
    None,
    Data(Vec<u8>),
    /// This many zero bytes (a trim on a server without WRITE_ZEROES).
    Zeros(usize),
}

enum Outgoing {
    Request {
        header: [u8; 28],
        payload: Payload,
    },
    /// Send `NBD_CMD_DISC` and close.
    Disconnect,
}

fn request_header(flags: u16, cmd: u16, cookie: u64, offset: u64, len: u32) -> [u8; 28] {
    let mut h = [0u8; 28];
    h[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    h[4..6].copy_from_slice(&flags.to_be_bytes());
    h[6..8].copy_from_slice(&cmd.to_be_bytes());
    h[8..16].copy_from_slice(&cookie.to_be_bytes());
    h[16..24].copy_from_slice(&offset.to_be_bytes());
    h[24..28].copy_from_slice(&len.to_be_bytes());
    h
}

static ZEROS: [u8; 64 << 10] = [0u8; 64 << 10];

fn writer_loop(shared: Arc<ConnShared>, stream: Stream, rx: mpsc::Receiver<Outgoing>) {
    let _guard = FailOnExit(shared.clone(), "the sending thread ended");
    let mut w = BufWriter::with_capacity(IO_BUFFER, stream);
    loop {
        let msg = match rx.try_recv() {
            Ok(m) => m,
            Err(mpsc::TryRecvError::Empty) => {
                // Nothing more queued: put what is buffered on the wire before waiting.
                if let Err(e) = w.flush() {
                    shared.fail(format!("sending to the server: {e}"));
                    return;
                }
                match rx.recv() {
                    Ok(m) => m,
                    Err(_) => return,
                }
            }
            Err(mpsc::TryRecvError::Disconnected) => return,
        };
        match msg {
            Outgoing::Request { header, payload } => {
                // Requests queued behind a failure were already failed: do not send them.
                if shared.failed.load(Ordering::Acquire) {
                    continue;
                }
                let res = w.write_all(&header).and_then(|_| match &payload {
                    Payload::None => Ok(()),
                    Payload::Data(d) => w.write_all(d),
                    Payload::Zeros(n) => {
                        let mut left = *n;
                        while left > 0 {
                            let k = left.min(ZEROS.len());
                            w.write_all(&ZEROS[..k])?;
                            left -= k;
                        }
                        Ok(())
                    }
                });
                if let Err(e) = res {
                    shared.fail(format!("sending to the server: {e}"));
                    return;
                }
            }
            Outgoing::Disconnect => {
                if !shared.broken.load(Ordering::Acquire) {
                    let h = request_header(0, CMD_DISC, 0, 0, 0);
                    let _ = w.write_all(&h).and_then(|_| w.flush());
                }
                shared.fail("the device was closed".into());
                return;
            }
        }
    }
}

fn receiver_loop(shared: Arc<ConnShared>, stream: Stream, tx: mpsc::Sender<Outgoing>) {
    let _guard = FailOnExit(shared.clone(), "the receiving thread ended");
    let mut r = BufReader::with_capacity(IO_BUFFER, stream);
    let reason = loop {
        let mut hdr = [0u8; 16];
        if let Err(e) = r.read_exact(&mut hdr) {
            break receive_error(e);
        }
        let magic = u32::from_be_bytes(hdr[0..4].try_into().expect("4 bytes"));
        if magic != SIMPLE_REPLY_MAGIC {
            break if magic == STRUCTURED_REPLY_MAGIC {
                "protocol error: the server sent a structured reply, which was not negotiated"
                    .to_string()
            } else {
                format!("protocol error: reply magic {magic:#010x}")
            };
        }
        let error = u32::from_be_bytes(hdr[4..8].try_into().expect("4 bytes"));
        let cookie = u64::from_be_bytes(hdr[8..16].try_into().expect("8 bytes"));
        let Some(p) = shared.state.lock().pending.remove(&cookie) else {
            break format!(
                "protocol error: a reply with cookie {cookie}, which no request in flight carries"
            );
        };
        let outcome = if error != 0 {
            // A simple reply to a failed read carries no data.
            Outcome::ServerError(error)
        } else if p.read_len > 0 {
            let mut data = vec![0u8; p.read_len as usize];
            if let Err(e) = r.read_exact(&mut data) {
                let reason = receive_error(e);
                p.slot.complete(Outcome::Failed(reason.clone()));
                break reason;
            }
            Outcome::Done(data)
        } else {
            Outcome::Done(Vec::new())
        };
        p.slot.complete(outcome);
        if error == ESHUTDOWN {
            // The protocol asks for a soft disconnect: fail everything (without closing the
            // socket yet) and let the writer send NBD_CMD_DISC and close; this thread reads
            // on until it does.
            shared.mark_failed("the server is shutting down (ESHUTDOWN)".into());
            if tx.send(Outgoing::Disconnect).is_err() {
                break "the server is shutting down (ESHUTDOWN)".to_string();
            }
        }
    };
    shared.fail(reason);
}

fn receive_error(e: io::Error) -> String {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => "the server closed the connection".to_string(),
        io::ErrorKind::ConnectionReset => "the connection was reset".to_string(),
        _ => format!("receiving from the server: {e}"),
    }
}

/// One connection: the channel to its writer thread and the state shared with its threads.
struct Connection {
    shared: Arc<ConnShared>,
    outbox: mpsc::Sender<Outgoing>,
}

/// A request sent, waiting for its reply.
struct InFlight {
    slot: Arc<Oneshot<Outcome>>,
    cmd: u16,
    offset: u64,
}

/// An NBD export as a block device. See the module documentation.
pub struct NbdDevice {
    info: DeviceInfo,
    uri: String,
    flags: u16,
    /// The largest request sent, in bytes: a multiple of the block size.
    max_request: u32,
    conns: Vec<Connection>,
    next_conn: AtomicUsize,
    metrics: Arc<Registry>,
    reads: Arc<Counter>,
    writes: Arc<Counter>,
    read_bytes: Arc<Counter>,
    write_bytes: Arc<Counter>,
    flushes: Arc<Counter>,
    trims: Arc<Counter>,
    requests: Arc<Counter>,
    fua_emulated: Arc<Counter>,
    flushes_without_server_flush: Arc<Counter>,
}

impl NbdDevice {
    /// Connects to the export (all connections, each with its own handshake) and returns the
    /// device. The blocking work runs on helper threads, so the calling reactor stays free.
    pub async fn open(name: &str, opts: NbdOptions) -> Result<NbdDevice, NbdError> {
        let uri = opts.uri.to_string();
        let err = |message: String| NbdError { uri: uri.clone(), message };
        if runtime_kind() == Some(RuntimeKind::Sim) {
            return Err(err(
                "the nbd device needs the real runtime (runtime = \"real\"): a remote server \
                 answers in real time, which the simulation's virtual clock knows nothing of, \
                 and a simulated run would no longer be deterministic"
                    .into(),
            ));
        }
        let bs = opts.block_size;
        if bs < 512 || !bs.is_power_of_two() {
            return Err(err(format!("block_size = {bs}: must be a power of two, at least 512")));
        }
        if opts.connections == 0 || opts.connections > MAX_CONNECTIONS {
            return Err(err(format!(
                "connections = {}: must be between 1 and {MAX_CONNECTIONS}",
                opts.connections
            )));
        }
        let mut waits = Vec::with_capacity(opts.connections);
        for i in 0..opts.connections {
            let slot = Oneshot::new();
            let done = slot.clone();
            let target = opts.uri.clone();
            std::thread::Builder::new()
                .name(format!("nbd-connect-{i}"))
                .spawn(move || {
                    let r = std::panic::catch_unwind(|| connect(&target))
                        .unwrap_or_else(|_| Err("the connecting thread panicked".into()));
                    done.complete(r);
                })
                .map_err(|e| err(format!("cannot start a thread: {e}")))?;
            waits.push(Wait(slot));
        }
        let mut links = Vec::with_capacity(waits.len());
        let mut first_error = None;
        for w in waits {
            match w.await {
                Ok(link) => links.push(link),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            disconnect_all(links);
            return Err(err(e));
        }
        Self::assemble(name, &opts, uri.clone(), links).map_err(err)
    }

    /// Checks what the handshakes found against the options and starts each connection's
    /// threads.
    fn assemble(
        name: &str,
        opts: &NbdOptions,
        uri: String,
        links: Vec<(Stream, Negotiated)>,
    ) -> Result<NbdDevice, String> {
        let bs = opts.block_size;
        let n = links[0].1;
        // Without HAS_FLAGS the other bits mean nothing.
        let flags = if n.flags & TF_HAS_FLAGS != 0 { n.flags } else { 0 };
        let checked = (|| {
            if let Some((_, o)) = links.iter().find(|(_, o)| (o.size, o.flags) != (n.size, n.flags))
            {
                return Err(format!(
                    "two connections to one export disagree: {} bytes with flags {:#06x}, then \
                     {} bytes with flags {:#06x}",
                    n.size, n.flags, o.size, o.flags
                ));
            }
            if n.size == 0 || !n.size.is_multiple_of(bs as u64) {
                return Err(format!(
                    "the export holds {} bytes, not a positive multiple of block_size {bs}",
                    n.size
                ));
            }
            if n.min_block > 0 && (n.min_block > bs || !bs.is_multiple_of(n.min_block)) {
                return Err(format!(
                    "the server's minimum block size is {} bytes, which block_size {bs} is not \
                     a multiple of",
                    n.min_block
                ));
            }
            if n.max_payload > 0 && n.max_payload < bs {
                return Err(format!(
                    "the server takes at most {} bytes per request, less than block_size {bs}",
                    n.max_payload
                ));
            }
            if links.len() > 1 && flags & TF_CAN_MULTI_CONN == 0 {
                return Err(format!(
                    "connections = {}, but the server does not advertise NBD_FLAG_CAN_MULTI_CONN: \
                     its connections need not see each other's writes and flushes; use \
                     connections = 1",
                    links.len()
                ));
            }
            Ok(())
        })();
        if let Err(e) = checked {
            disconnect_all(links);
            return Err(e);
        }
        let limit = match n.max_payload {
            0 | u32::MAX => MAX_REQUEST_BYTES,
            m => m.min(MAX_REQUEST_BYTES),
        };
        let max_request = limit / bs * bs;
        let metrics = Registry::new(name);
        let mut info = DeviceInfo::new(name, bs, n.size / bs as u64);
        // A server without flush has no volatile cache (see the module documentation), so
        // every acknowledged write is already durable: FUA holds trivially.
        info.caps.fua = flags & TF_SEND_FUA != 0 || flags & TF_SEND_FLUSH == 0;
        if n.preferred_block > bs {
            info.optimal_io_blocks = n.preferred_block / bs;
        }
        let set = |k: &str, v: bool| metrics.counter(k).set(v as u64);
        set("server_flush", flags & TF_SEND_FLUSH != 0);
        set("server_fua", flags & TF_SEND_FUA != 0);
        set("server_write_zeroes", flags & TF_SEND_WRITE_ZEROES != 0);
        set("server_multi_conn", flags & TF_CAN_MULTI_CONN != 0);
        set("read_only", flags & TF_READ_ONLY != 0);
        metrics.counter("connections").set(links.len() as u64);
        metrics.counter("max_request_bytes").set(max_request as u64);
        let failed_connections = metrics.counter("failed_connections");
        let mut conns = Vec::with_capacity(links.len());
        let mut links = links.into_iter();
        while let Some((stream, _)) = links.next() {
            match Self::start_connection(stream, conns.len(), failed_connections.clone()) {
                Ok(c) => conns.push(c),
                Err(e) => {
                    disconnect_all(links.collect());
                    for c in &conns {
                        let _ = c.outbox.send(Outgoing::Disconnect);
                    }
                    return Err(e);
                }
            }
        }
        Ok(NbdDevice {
            info,
            uri,
            flags,
            max_request,
            conns,
            next_conn: AtomicUsize::new(0),
            reads: metrics.counter("reads"),
            writes: metrics.counter("writes"),
            read_bytes: metrics.counter("read_bytes"),
            write_bytes: metrics.counter("write_bytes"),
            flushes: metrics.counter("flushes"),
            trims: metrics.counter("trims"),
            requests: metrics.counter("requests"),
            fua_emulated: metrics.counter("fua_emulated"),
            flushes_without_server_flush: metrics.counter("flushes_without_server_flush"),
            metrics,
        })
    }

    fn start_connection(
        stream: Stream,
        index: usize,
        failed_connections: Arc<Counter>,
    ) -> Result<Connection, String> {
        let clone = |s: &Stream| s.try_clone().map_err(|e| format!("socket setup: {e}"));
        let (writer_stream, reader_stream, socket) = (clone(&stream)?, clone(&stream)?, stream);
        let shared = Arc::new(ConnShared {
            state: Mutex::new(ConnState::default()),
            failed: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            socket,
            failed_connections,
        });
        let (tx, rx) = mpsc::channel();
        let spawn_err = |e: io::Error| format!("cannot start a thread: {e}");
        let s = shared.clone();
        std::thread::Builder::new()
            .name(format!("nbd-send-{index}"))
            .spawn(move || writer_loop(s, writer_stream, rx))
            .map_err(spawn_err)?;
        let (s, t) = (shared.clone(), tx.clone());
        if let Err(e) = std::thread::Builder::new()
            .name(format!("nbd-recv-{index}"))
            .spawn(move || receiver_loop(s, reader_stream, t))
        {
            let _ = tx.send(Outgoing::Disconnect);
            return Err(spawn_err(e));
        }
        Ok(Connection { shared, outbox: tx })
    }

    /// The URI the device is connected to.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Why the device failed, when a connection has (`None` while every connection works).
    pub fn failure(&self) -> Option<String> {
        self.conns.iter().find_map(|c| {
            if c.shared.closing.load(Ordering::Acquire) {
                return None;
            }
            c.shared.state.lock().failure.clone()
        })
    }

    /// The connection a request goes on. Reactors keep to their own connections where there
    /// are enough (connection `j` serves reactor `j % reactors`), so they rarely meet on a
    /// connection's lock; within a reactor's share, requests go round robin.
    fn pick(&self) -> &Connection {
        let n = self.conns.len();
        if n == 1 {
            return &self.conns[0];
        }
        let (r, nr) = if flashrig_runtime::in_runtime() {
            (flashrig_runtime::current_reactor(), flashrig_runtime::num_reactors().max(1))
        } else {
            (0, 1)
        };
        if n <= nr {
            return &self.conns[r % n];
        }
        let share = (n - r).div_ceil(nr);
        let k = self.next_conn.fetch_add(1, Ordering::Relaxed) % share;
        &self.conns[r + k * nr]
    }

    fn failed_error(&self, reason: &str) -> DevError {
        DevError::DeviceFailed { name: format!("{} ({}: {reason})", self.info.name, self.uri) }
    }

    /// Queues one NBD request on `conn`.
    fn submit(
        &self,
        conn: &Connection,
        cmd: u16,
        flags: u16,
        offset: u64,
        len: u32,
        payload: Payload,
    ) -> DevResult<InFlight> {
        let slot = Oneshot::new();
        let read_len = if cmd == CMD_READ { len } else { 0 };
        let cookie = {
            let mut st = conn.shared.state.lock();
            if let Some(reason) = &st.failure {
                return Err(self.failed_error(reason));
            }
            let cookie = st.next_cookie;
            st.next_cookie = st.next_cookie.wrapping_add(1);
            st.pending.insert(cookie, Pending { read_len, slot: slot.clone() });
            cookie
        };
        let header = request_header(flags, cmd, cookie, offset, len);
        if conn.outbox.send(Outgoing::Request { header, payload }).is_err() {
            // The writer has ended, which failed the connection (and this request with it).
            conn.shared.fail("the sending thread ended".into());
        }
        self.requests.inc();
        Ok(InFlight { slot, cmd, offset })
    }

    /// Waits for a request's reply.
    async fn finish(&self, f: InFlight) -> DevResult<Vec<u8>> {
        match Wait(f.slot).await {
            Outcome::Done(data) => Ok(data),
            Outcome::Failed(reason) => Err(self.failed_error(&reason)),
            Outcome::ServerError(code) => Err(self.server_error(code, f.cmd, f.offset)),
        }
    }

    /// The contract's error for an NBD error value.
    fn server_error(&self, code: u32, cmd: u16, offset: u64) -> DevError {
        let what = match cmd {
            CMD_READ => "read",
            CMD_WRITE => "write",
            CMD_FLUSH => "flush",
            CMD_WRITE_ZEROES => "write-zeroes",
            _ => "request",
        };
        let lba = offset / self.info.block_size as u64;
        let name = &self.info.name;
        let at = format!("{name} ({}): {what} at block {lba}", self.uri);
        match code {
            EIO if cmd == CMD_READ => DevError::ReadMedia { lba },
            EIO if cmd == CMD_WRITE || cmd == CMD_WRITE_ZEROES => DevError::WriteMedia { lba },
            ENOSPC => DevError::NoSpace(format!("{at}: the server answered ENOSPC")),
            EINVAL => DevError::Invalid(format!("{at}: the server answered EINVAL")),
            EOVERFLOW => DevError::Invalid(format!("{at}: the server answered EOVERFLOW")),
            EPERM => DevError::Invalid(format!(
                "{at}: the server answered EPERM (operation not permitted: a read-only export?)"
            )),
            ENOTSUP => DevError::Unsupported { command: what },
            ESHUTDOWN => self.failed_error("the server is shutting down (ESHUTDOWN)"),
            ENOMEM => DevError::Io {
                path: self.uri.clone(),
                message: format!("{what} at block {lba}: the server is out of memory (ENOMEM)"),
            },
            other => DevError::Io {
                path: self.uri.clone(),
                message: format!("{what} at block {lba}: the server answered error {other}"),
            },
        }
    }

    /// Byte ranges of at most `max_request` covering `len` bytes from 0.
    fn pieces(&self, len: u64) -> impl Iterator<Item = (u64, u32)> {
        let step = self.max_request as u64;
        (0..len.div_ceil(step)).map(move |i| {
            let start = i * step;
            (start, (len - start).min(step) as u32)
        })
    }

    fn check_writable(&self) -> DevResult<()> {
        if self.flags & TF_READ_ONLY != 0 {
            return Err(DevError::Invalid(format!(
                "{} ({}): the export is read-only",
                self.info.name, self.uri
            )));
        }
        Ok(())
    }

    async fn flush_on(&self, conn: &Connection) -> DevResult<()> {
        let f = self.submit(conn, CMD_FLUSH, 0, 0, 0, Payload::None)?;
        self.finish(f).await.map(|_| ())
    }
}

/// Ends connections that will not be used: a soft disconnect where the socket still works.
fn disconnect_all(links: Vec<(Stream, Negotiated)>) {
    for (mut s, _) in links {
        // 28 bytes into a fresh socket's buffer; the timeout only guards against the absurd.
        let _ = s.set_timeouts(Some(Duration::from_secs(1)));
        let _ = s.write_all(&request_header(0, CMD_DISC, 0, 0, 0));
        s.shutdown();
    }
}

impl Drop for NbdDevice {
    fn drop(&mut self) {
        // Each writer sends NBD_CMD_DISC and closes; the receivers see the end and stop. No
        // waiting here: a drop may run on a reactor.
        for c in &self.conns {
            c.shared.closing.store(true, Ordering::Release);
            if c.outbox.send(Outgoing::Disconnect).is_err() {
                c.shared.fail("the device was closed".into());
            }
        }
    }
}

#[async_trait(?Send)]
impl BlockDevice for NbdDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn kind(&self) -> &'static str {
        "nbd"
    }

    fn metrics(&self) -> Option<Arc<Registry>> {
        Some(self.metrics.clone())
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        check_io(&self.info, lba, buf.len(), md.as_ref().map(|m| m.len()))?;
        let conn = self.pick();
        let base = lba * self.info.block_size as u64;
        // Every piece goes out before the first reply is awaited, so they are served together.
        let mut sent = Vec::new();
        for (start, len) in self.pieces(buf.len() as u64) {
            sent.push((start, self.submit(conn, CMD_READ, 0, base + start, len, Payload::None)?));
        }
        for (start, f) in sent {
            let data = self.finish(f).await?;
            buf[start as usize..start as usize + data.len()].copy_from_slice(&data);
        }
        self.reads.inc();
        self.read_bytes.add(buf.len() as u64);
        Ok(())
    }

    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        check_io(&self.info, lba, data.len(), md.map(|m| m.len()))?;
        self.check_writable()?;
        let conn = self.pick();
        let base = lba * self.info.block_size as u64;
        let native_fua = hints.fua && self.flags & TF_SEND_FUA != 0;
        let flags = if native_fua { CMD_FLAG_FUA } else { 0 };
        // The data is copied: the writer thread may send it after this future is gone.
        let mut sent = Vec::new();
        for (start, len) in self.pieces(data.len() as u64) {
            let piece = data[start as usize..start as usize + len as usize].to_vec();
            sent.push(self.submit(
                conn,
                CMD_WRITE,
                flags,
                base + start,
                len,
                Payload::Data(piece),
            )?);
        }
        for f in sent {
            self.finish(f).await?;
        }
        if hints.fua && !native_fua && self.flags & TF_SEND_FLUSH != 0 {
            // No FUA on the wire: a flush after the write's reply makes it durable.
            self.fua_emulated.inc();
            self.flush_on(conn).await?;
        }
        self.writes.inc();
        self.write_bytes.add(data.len() as u64);
        Ok(())
    }

    async fn flush(&self) -> DevResult<()> {
        self.flushes.inc();
        if self.flags & TF_SEND_FLUSH == 0 {
            // The server has no volatile write cache (the module documentation says why this
            // is what a missing NBD_FLAG_SEND_FLUSH means): acknowledged writes are durable.
            self.flushes_without_server_flush.inc();
            return Ok(());
        }
        // With several connections the server has CAN_MULTI_CONN, so a flush on any of them
        // covers the writes completed on all.
        self.flush_on(self.pick()).await
    }

    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        check_range(&self.info, lba, num_blocks)?;
        if num_blocks == 0 {
            return Ok(());
        }
        self.check_writable()?;
        let conn = self.pick();
        let bs = self.info.block_size as u64;
        let base = lba * bs;
        let zeroes = self.flags & TF_SEND_WRITE_ZEROES != 0;
        let mut sent = Vec::new();
        for (start, len) in self.pieces(num_blocks * bs) {
            sent.push(if zeroes {
                // Without NBD_CMD_FLAG_NO_HOLE the server may deallocate: a trim that reads
                // back as zeros, as the contract wants.
                self.submit(conn, CMD_WRITE_ZEROES, 0, base + start, len, Payload::None)?
            } else {
                self.submit(conn, CMD_WRITE, 0, base + start, len, Payload::Zeros(len as usize))?
            });
        }
        for f in sent {
            self.finish(f).await?;
        }
        self.trims.inc();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16, export: &str) -> NbdUri {
        NbdUri { address: NbdAddress::Tcp { host: host.into(), port }, export: export.into() }
    }

    #[test]
    fn uris_parse_in_every_documented_form() {
        assert_eq!(NbdUri::parse("nbd://10.0.0.2/").unwrap(), tcp("10.0.0.2", 10809, ""));
        assert_eq!(NbdUri::parse("nbd://10.0.0.2").unwrap(), tcp("10.0.0.2", 10809, ""));
        assert_eq!(NbdUri::parse("nbd://host:1234/disk0").unwrap(), tcp("host", 1234, "disk0"));
        assert_eq!(NbdUri::parse("nbd://[::1]:99/a%20b").unwrap(), tcp("::1", 99, "a b"));
        assert_eq!(NbdUri::parse("nbd://[fe80::1]/x/y").unwrap(), tcp("fe80::1", 10809, "x/y"));
        let u = NbdUri::parse("nbd+unix:///exp?socket=/tmp/a%20b.sock").unwrap();
        assert_eq!(
            u,
            NbdUri {
                address: NbdAddress::Unix { socket: "/tmp/a b.sock".into() },
                export: "exp".into()
            }
        );
        let u = NbdUri::parse("nbd+unix://?socket=/s").unwrap();
        assert_eq!(u.export, "");
        // Display gives a URI that parses back to the same thing.
        for text in [
            "nbd://h:1/a%20b",
            "nbd://[::1]:2/",
            "nbd+unix:///e?socket=/x%26y/s",
            "nbd://h:3/%C3%A9t%C3%A9",
        ] {
            let u = NbdUri::parse(text).unwrap();
            assert_eq!(NbdUri::parse(&u.to_string()).unwrap(), u, "{text} -> {u}");
        }
    }

    #[test]
    fn bad_uris_say_what_is_wrong() {
        let cases = [
            ("10.0.0.2:10809", "not an NBD URI"),
            ("http://h/", "unknown scheme"),
            ("nbds://h/", "TLS"),
            ("nbd:///export", "needs a host"),
            ("nbd://h:0/", "port \"0\""),
            ("nbd://h:99999/", "port \"99999\""),
            ("nbd://h:12x/", "port \"12x\""),
            ("nbd://::1/", "brackets"),
            ("nbd://[::1/", "closing ]"),
            ("nbd://u@h/", "user"),
            ("nbd://h/?socket=/s", "nbd+unix"),
            ("nbd://h/?tls=on", "unknown query parameter \"tls\""),
            ("nbd+unix:///e", "needs ?socket="),
            ("nbd+unix://h/e?socket=/s", "takes no host"),
            ("nbd+unix:///e?socket=/a&socket=/b", "twice"),
            ("nbd://h/%zz", "two hex digits"),
            ("nbd://h/%ff", "not UTF-8"),
            ("nbd://h/#frag", "fragment"),
        ];
        for (text, needle) in cases {
            let e = NbdUri::parse(text).expect_err(text);
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    /// A scripted server on the other end of a socket pair; join the handle to see its
    /// assertions.
    fn fake_server(
        script: impl FnOnce(&mut UnixStream) + Send + 'static,
    ) -> (UnixStream, std::thread::JoinHandle<()>) {
        let (client, mut server) = UnixStream::pair().unwrap();
        let h = std::thread::spawn(move || script(&mut server));
        client.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        (client, h)
    }

    fn greet(s: &mut UnixStream, hflags: u16) -> u32 {
        s.write_all(&NBDMAGIC.to_be_bytes()).unwrap();
        s.write_all(&IHAVEOPT.to_be_bytes()).unwrap();
        s.write_all(&hflags.to_be_bytes()).unwrap();
        read_u32(s, "test").unwrap()
    }

    /// Reads one option; returns (option, data).
    fn read_option(s: &mut UnixStream) -> (u32, Vec<u8>) {
        assert_eq!(read_u64(s, "test").unwrap(), IHAVEOPT);
        let opt = read_u32(s, "test").unwrap();
        let len = read_u32(s, "test").unwrap();
        let mut data = vec![0u8; len as usize];
        s.read_exact(&mut data).unwrap();
        (opt, data)
    }

    fn option_reply(s: &mut UnixStream, opt: u32, kind: u32, data: &[u8]) {
        s.write_all(&OPT_REPLY_MAGIC.to_be_bytes()).unwrap();
        s.write_all(&opt.to_be_bytes()).unwrap();
        s.write_all(&kind.to_be_bytes()).unwrap();
        s.write_all(&(data.len() as u32).to_be_bytes()).unwrap();
        s.write_all(data).unwrap();
    }

    fn info_export(size: u64, flags: u16) -> Vec<u8> {
        let mut d = INFO_EXPORT.to_be_bytes().to_vec();
        d.extend_from_slice(&size.to_be_bytes());
        d.extend_from_slice(&flags.to_be_bytes());
        d
    }

    /// Greets, answers NBD_OPT_GO with the export, and returns for the transmission phase.
    fn serve_go(s: &mut UnixStream, size: u64, flags: u16) {
        greet(s, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
        let (opt, data) = read_option(s);
        assert_eq!(opt, OPT_GO);
        // Name length, name, one info request: BLOCK_SIZE.
        assert_eq!(&data[data.len() - 4..], &[0, 1, 0, 3]);
        option_reply(s, OPT_GO, REP_INFO, &info_export(size, flags));
        let mut bsz = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
        for v in [512u32, 4096, 1 << 20] {
            bsz.extend_from_slice(&v.to_be_bytes());
        }
        option_reply(s, OPT_GO, REP_INFO, &bsz);
        option_reply(s, OPT_GO, REP_ACK, &[]);
    }

    #[test]
    fn opt_go_learns_size_flags_and_block_sizes() {
        let (mut c, server) = fake_server(|s| serve_go(s, 1 << 20, TF_HAS_FLAGS | TF_SEND_FLUSH));
        let n = handshake(&mut c, "disk").unwrap();
        server.join().unwrap();
        assert_eq!(
            n,
            Negotiated {
                size: 1 << 20,
                flags: TF_HAS_FLAGS | TF_SEND_FLUSH,
                min_block: 512,
                preferred_block: 4096,
                max_payload: 1 << 20
            }
        );
    }

    #[test]
    fn an_unsupported_opt_go_falls_back_to_export_name() {
        for no_zeroes in [false, true] {
            let (mut c, server) = fake_server(move |s| {
                let hflags = FLAG_FIXED_NEWSTYLE | if no_zeroes { FLAG_NO_ZEROES } else { 0 };
                let cflags = greet(s, hflags);
                assert_eq!(cflags & FLAG_C_NO_ZEROES != 0, no_zeroes);
                let (opt, _) = read_option(s);
                assert_eq!(opt, OPT_GO);
                option_reply(s, OPT_GO, REP_ERR_UNSUP, b"what is GO?");
                let (opt, name) = read_option(s);
                assert_eq!((opt, name.as_slice()), (OPT_EXPORT_NAME, &b"disk"[..]));
                s.write_all(&(8192u64).to_be_bytes()).unwrap();
                s.write_all(&(TF_HAS_FLAGS | TF_SEND_FUA).to_be_bytes()).unwrap();
                if !no_zeroes {
                    s.write_all(&[0u8; 124]).unwrap();
                }
            });
            let n = handshake(&mut c, "disk").unwrap();
            server.join().unwrap();
            assert_eq!((n.size, n.flags), (8192, TF_HAS_FLAGS | TF_SEND_FUA));
        }
    }

    #[test]
    fn servers_that_refuse_or_speak_something_else_get_clear_errors() {
        let run = |script: Box<dyn FnOnce(&mut UnixStream) + Send>| {
            let (mut c, server) = fake_server(script);
            let e = handshake(&mut c, "disk").unwrap_err();
            drop(c);
            server.join().unwrap();
            e
        };
        let e = run(Box::new(|s| {
            greet(s, FLAG_FIXED_NEWSTYLE);
            read_option(s);
            option_reply(s, OPT_GO, REP_ERR | 6, b"no such thing here");
            // The client aborts softly.
            assert_eq!(read_option(s).0, OPT_ABORT);
        }));
        assert!(e.contains("no export named \"disk\"") && e.contains("no such thing"), "{e}");
        let e = run(Box::new(|s| {
            greet(s, FLAG_FIXED_NEWSTYLE);
            read_option(s);
            option_reply(s, OPT_GO, REP_ERR | 5, &[]);
        }));
        assert!(e.contains("TLS"), "{e}");
        let e = run(Box::new(|s| {
            s.write_all(b"HTTP/1.1 400 Bad Request\r\n").unwrap();
        }));
        assert!(e.contains("not an NBD server") && e.contains("HTTP/1.1"), "{e}");
        let e = run(Box::new(|s| {
            s.write_all(&NBDMAGIC.to_be_bytes()).unwrap();
            s.write_all(&CLISERV_MAGIC.to_be_bytes()).unwrap();
        }));
        assert!(e.contains("oldstyle"), "{e}");
        let e = run(Box::new(|s| {
            greet(s, FLAG_FIXED_NEWSTYLE);
            read_option(s);
            s.write_all(&OPT_REPLY_MAGIC.to_be_bytes()).unwrap();
            s.write_all(&OPT_GO.to_be_bytes()).unwrap();
            s.write_all(&REP_INFO.to_be_bytes()).unwrap();
            s.write_all(&u32::MAX.to_be_bytes()).unwrap();
        }));
        assert!(e.contains("implausible"), "{e}");
        let e = run(Box::new(|s| {
            greet(s, FLAG_FIXED_NEWSTYLE);
            read_option(s);
            option_reply(s, OPT_GO, REP_ACK, &[]);
        }));
        assert!(e.contains("without describing the export"), "{e}");
        // Non-fixed newstyle: straight to EXPORT_NAME, and a refusal is a hang-up.
        let e = run(Box::new(|s| {
            greet(s, 0);
            read_option(s);
        }));
        assert!(e.contains("closed the connection") && e.contains("no export named"), "{e}");
    }

    /// A device over a scripted server: the handshake, then `transmission` plays the server.
    fn device_over(
        flags: u16,
        transmission: impl FnOnce(&mut UnixStream) + Send + 'static,
    ) -> (NbdDevice, std::thread::JoinHandle<()>) {
        let (mut c, server) = fake_server(move |s| {
            serve_go(s, 1 << 20, flags);
            transmission(s);
        });
        let n = handshake(&mut c, "").unwrap();
        c.set_read_timeout(None).unwrap();
        let opts = NbdOptions::new(NbdUri::parse("nbd+unix:///?socket=/fake").unwrap());
        let dev =
            NbdDevice::assemble("fake", &opts, opts.uri.to_string(), vec![(Stream::Unix(c), n)])
                .unwrap();
        (dev, server)
    }

    /// Reads one request: (flags, cmd, cookie, offset, len), skipping a write's data.
    fn read_request(s: &mut UnixStream) -> (u16, u16, u64, u64, u32) {
        let h: [u8; 28] = read_array(s, "test").unwrap();
        assert_eq!(u32::from_be_bytes(h[0..4].try_into().unwrap()), REQUEST_MAGIC);
        let flags = u16::from_be_bytes([h[4], h[5]]);
        let cmd = u16::from_be_bytes([h[6], h[7]]);
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
        let offset = u64::from_be_bytes(h[16..24].try_into().unwrap());
        let len = u32::from_be_bytes(h[24..28].try_into().unwrap());
        if cmd == CMD_WRITE {
            let mut d = vec![0u8; len as usize];
            s.read_exact(&mut d).unwrap();
        }
        (flags, cmd, cookie, offset, len)
    }

    fn simple_reply(s: &mut UnixStream, error: u32, cookie: u64, data: &[u8]) {
        s.write_all(&SIMPLE_REPLY_MAGIC.to_be_bytes()).unwrap();
        s.write_all(&error.to_be_bytes()).unwrap();
        s.write_all(&cookie.to_be_bytes()).unwrap();
        s.write_all(data).unwrap();
    }

    fn on_real<T: Send + 'static, F: Future<Output = T> + 'static>(
        f: impl FnOnce() -> F + Send + 'static,
    ) -> T {
        flashrig_runtime::run(RuntimeKind::Real, 1, f).0
    }

    #[test]
    fn server_errors_map_to_typed_errors() {
        let flags = TF_HAS_FLAGS | TF_SEND_FLUSH | TF_SEND_FUA | TF_SEND_WRITE_ZEROES;
        let (dev, server) = device_over(flags, |s| {
            for error in [EIO, EIO, ENOSPC, EINVAL, EPERM, ENOTSUP, 4242] {
                let (_, _, cookie, _, _) = read_request(s);
                simple_reply(s, error, cookie, &[]);
            }
            // Then a good read, replied out of order with a second one.
            let a = read_request(s);
            let b = read_request(s);
            simple_reply(s, 0, b.2, &[2u8; 4096]);
            simple_reply(s, 0, a.2, &[1u8; 4096]);
        });
        let errors = on_real(move || async move {
            let mut buf = vec![0u8; 4096];
            let mut out = vec![format!("{:?}", dev.read(7, &mut buf, None).await)];
            let data = vec![0u8; 4096];
            for _ in 0..6 {
                out.push(format!("{:?}", dev.write(3, &data, None, WriteHints::NONE).await));
            }
            let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
            let (ra, rb) =
                futures_util::join!(dev.read(0, &mut a, None), dev.read(1, &mut b, None));
            ra.unwrap();
            rb.unwrap();
            assert!(a.iter().all(|&x| x == 1) && b.iter().all(|&x| x == 2));
            out
        });
        server.join().unwrap();
        assert!(errors[0].contains("ReadMedia { lba: 7 }"), "{errors:?}");
        assert!(errors[1].contains("WriteMedia { lba: 3 }"), "{errors:?}");
        assert!(errors[2].contains("NoSpace"), "{errors:?}");
        assert!(errors[3].contains("Invalid") && errors[3].contains("EINVAL"), "{errors:?}");
        assert!(errors[4].contains("EPERM"), "{errors:?}");
        assert!(errors[5].contains("Unsupported"), "{errors:?}");
        assert!(errors[6].contains("4242"), "{errors:?}");
    }

    #[test]
    fn a_protocol_violation_fails_the_device_instead_of_panicking() {
        let (dev, server) = device_over(TF_HAS_FLAGS | TF_SEND_FLUSH, |s| {
            let (_, _, cookie, _, _) = read_request(s);
            // A reply to a request never sent.
            simple_reply(s, 0, cookie + 1000, &[]);
            // Keep the socket open: the client must fail on its own.
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
        });
        let (first, later, failure) = on_real(move || async move {
            let first = dev.flush().await;
            let mut buf = vec![0u8; 4096];
            let later = dev.read(0, &mut buf, None).await;
            (first, later, dev.failure())
        });
        server.join().unwrap();
        for r in [&first, &later] {
            match r {
                Err(DevError::DeviceFailed { name }) => {
                    assert!(name.contains("cookie") && name.contains("fake"), "{name}")
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(failure.unwrap().contains("protocol error"));
    }

    #[test]
    fn fua_without_server_fua_is_a_write_then_a_flush_and_no_flush_means_no_cache() {
        // SEND_FLUSH without SEND_FUA: FUA is emulated with a flush.
        let (dev, server) = device_over(TF_HAS_FLAGS | TF_SEND_FLUSH, |s| {
            let mut seen = Vec::new();
            for _ in 0..2 {
                let (flags, cmd, cookie, _, _) = read_request(s);
                seen.push((flags, cmd));
                simple_reply(s, 0, cookie, &[]);
            }
            assert_eq!(seen, vec![(0, CMD_WRITE), (0, CMD_FLUSH)]);
        });
        assert!(!dev.info().caps.fua);
        on_real(move || async move {
            dev.write(0, &[5u8; 4096], None, WriteHints::FUA).await.unwrap();
        });
        server.join().unwrap();
        // Neither flush nor FUA: writes are durable when acknowledged; flush sends nothing.
        let (dev, server) = device_over(TF_HAS_FLAGS, |s| {
            let (flags, cmd, cookie, _, _) = read_request(s);
            assert_eq!((flags, cmd), (0, CMD_WRITE));
            simple_reply(s, 0, cookie, &[]);
            // Trim without WRITE_ZEROES: zeros are written.
            let (_, cmd, cookie, offset, len) = read_request(s);
            assert_eq!((cmd, offset, len), (CMD_WRITE, 4096, 8192));
            simple_reply(s, 0, cookie, &[]);
        });
        assert!(dev.info().caps.fua);
        let m = dev.metrics().unwrap();
        on_real(move || async move {
            dev.write(0, &[5u8; 4096], None, WriteHints::FUA).await.unwrap();
            dev.flush().await.unwrap();
            dev.trim(1, 2).await.unwrap();
        });
        server.join().unwrap();
        assert_eq!(m.counter("flushes_without_server_flush").get(), 1);
    }

    #[test]
    fn the_simulated_runtime_is_refused() {
        let uri = NbdUri::parse("nbd://127.0.0.1:1/").unwrap();
        let (r, _) = flashrig_runtime::run(RuntimeKind::Sim, 1, move || async move {
            NbdDevice::open("n", NbdOptions::new(uri)).await.map(|_| ())
        });
        let e = r.unwrap_err().to_string();
        assert!(e.contains("real runtime") && e.contains("nbd://127.0.0.1:1/"), "{e}");
    }
}
