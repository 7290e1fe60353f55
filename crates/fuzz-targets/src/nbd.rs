//! `nbd`: what a client sends to `flashrig serve nbd`, byte for byte.
//!
//! The server's decoding (the handshake's option haggling, request headers, payloads that
//! arrive in pieces, flags, ranges) is interleaved with its socket I/O and its reactors, so it
//! is fuzzed whole, through its public surface: `nbd::start` on an export over a RAM disk on
//! the real runtime, started once per process, and one Unix-socket connection per input that
//! sends the input and then closes its sending side. The first byte of an input chooses the
//! export (bit 0: read-only); the rest is the byte stream, from the client flags on.
//!
//! Checked: the server ends the connection (answering what it read) within [`HANG_LIMIT`] of
//! its start; no server thread panics; and after every input a well-behaved client still gets
//! through the handshake and reads a block.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use flashrig_blockdev::DevRef;
use flashrig_devices::RamDevice;
use flashrig_runtime::{run, RuntimeKind};
use flashrig_serve::nbd::proto::*;
use flashrig_serve::nbd::{start, Listen, NbdConfig};
use flashrig_serve::Export;

/// How long a connection may stay open (its input is sent at once, and a few KiB).
pub const HANG_LIMIT: Duration = Duration::from_secs(20);

/// The exports: 16 blocks of 4 KiB (small, so reads of the whole export stay cheap, and
/// requests past its end are easy to reach).
const BLOCK: u32 = 4096;
const BLOCKS: u64 = 16;
/// The export name; "" selects it too.
pub const EXPORT_NAME: &str = "fuzz";

struct Servers {
    rw: PathBuf,
    ro: PathBuf,
    _dir: tempfile::TempDir,
}

/// Panics in the server's threads (its connection threads and the runtime's reactors), which
/// the caller of a target cannot catch: counted by a panic hook.
static SERVER_PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_server_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let t = std::thread::current();
        let name = t.name().unwrap_or("");
        if name.starts_with("nbd-") || name.starts_with("reactor-") {
            SERVER_PANICS.fetch_add(1, Ordering::SeqCst);
        }
        previous(info);
    }));
}

fn servers() -> &'static Servers {
    static SERVERS: OnceLock<Servers> = OnceLock::new();
    SERVERS.get_or_init(|| {
        // As the flashrig binary (Rust's runtime ignores SIGPIPE in every Rust `main`; a
        // libFuzzer binary has libFuzzer's): a write to a client that went away is an error,
        // not the end of the process.
        // SAFETY: setting a signal's disposition to SIG_IGN installs no handler of ours.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        count_server_panics();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (rw, ro) = (dir.path().join("rw.sock"), dir.path().join("ro.sock"));
        let (tx, rx) = mpsc::channel();
        let paths = (rw.clone(), ro.clone());
        std::thread::Builder::new()
            .name("nbd-fuzz-runtime".into())
            .spawn(move || {
                run(RuntimeKind::Real, 2, move || async move {
                    let mut servers = Vec::new();
                    for (path, read_only) in [(paths.0, false), (paths.1, true)] {
                        let dev: DevRef = Arc::new(RamDevice::new("ram", BLOCK, BLOCKS, 0, 0));
                        let handle = flashrig_runtime::handle().expect("in the real runtime");
                        let export = Export::new("ram", dev, handle, read_only);
                        let cfg = NbdConfig {
                            listen: Listen::Unix(path),
                            export_name: EXPORT_NAME.into(),
                            description: "a RAM disk under fuzzing".into(),
                            partitions: 0,
                        };
                        servers.push(start(export, cfg).expect("the NBD server starts"));
                    }
                    tx.send(()).expect("the fuzzer waits for the servers");
                    // Serve until the process ends.
                    loop {
                        flashrig_runtime::sleep_ns(100_000_000).await;
                    }
                    #[allow(unreachable_code)]
                    drop(servers)
                });
            })
            .expect("the server's thread starts");
        rx.recv_timeout(Duration::from_secs(60)).expect("the NBD servers start within a minute");
        Servers { rw, ro, _dir: dir }
    })
}

/// Sends `stream` on a new connection to the server at `path`, closes the sending side, and
/// reads until the server closes the connection. Returns the bytes the server sent.
fn converse(path: &PathBuf, stream: &[u8]) -> Vec<u8> {
    let mut s = UnixStream::connect(path).expect("the server accepts connections");
    s.set_read_timeout(Some(Duration::from_millis(200))).expect("a read timeout");
    let mut w = s.try_clone().expect("a second handle");
    let data = stream.to_vec();
    // A thread sends, so that a server that answers before it reads everything (or stops
    // reading) never blocks the reading here.
    let sender = std::thread::spawn(move || {
        let _ = w.write_all(&data);
        let _ = w.shutdown(std::net::Shutdown::Write);
    });
    let mut got = Vec::new();
    let mut buf = [0u8; 64 << 10];
    let started = Instant::now();
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // Only the first bytes are kept (the handshake); the rest is counted.
                if got.len() < 4096 {
                    got.extend_from_slice(&buf[..n.min(4096 - got.len())]);
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if started.elapsed() > HANG_LIMIT {
                    panic!(
                        "nbd: the connection is still open {HANG_LIMIT:?} after it started (the \
                         client {} sending; {} server panics so far)",
                        if sender.is_finished() { "stopped" } else { "is still blocked" },
                        SERVER_PANICS.load(Ordering::SeqCst)
                    );
                }
            }
            // The server reset the connection: it ended, which is what is asked.
            Err(_) => break,
        }
    }
    let _ = sender.join();
    got
}

/// A client that follows the protocol: fixed newstyle, NBD_OPT_GO for the default export,
/// a read of block 0, NBD_CMD_DISC. Panics when the server does not serve it.
fn well_behaved_client(path: &PathBuf) {
    let mut s = UnixStream::connect(path).expect("the server still accepts connections");
    s.set_read_timeout(Some(HANG_LIMIT)).expect("a read timeout");
    let fail = |what: &str| -> ! {
        panic!(
            "nbd: after the input, a well-behaved client fails: {what} ({} server panics)",
            SERVER_PANICS.load(Ordering::SeqCst)
        )
    };
    let mut hello = [0u8; 18];
    s.read_exact(&mut hello).unwrap_or_else(|e| fail(&format!("hello: {e}")));
    if be_u64(&hello[0..8]) != NBDMAGIC || be_u64(&hello[8..16]) != IHAVEOPT {
        fail("the hello has the wrong magic");
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes());
    out.extend_from_slice(&IHAVEOPT.to_be_bytes());
    out.extend_from_slice(&OPT_GO.to_be_bytes());
    out.extend_from_slice(&6u32.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes()); // name "" (the default export)
    out.extend_from_slice(&0u16.to_be_bytes()); // no information requested
    s.write_all(&out).unwrap_or_else(|e| fail(&format!("sending GO: {e}")));
    loop {
        let mut head = [0u8; 20];
        s.read_exact(&mut head).unwrap_or_else(|e| fail(&format!("option reply: {e}")));
        if be_u64(&head[0..8]) != OPT_REPLY_MAGIC {
            fail("an option reply with the wrong magic");
        }
        let kind = be_u32(&head[12..16]);
        let mut body = vec![0u8; be_u32(&head[16..20]) as usize];
        s.read_exact(&mut body).unwrap_or_else(|e| fail(&format!("option reply data: {e}")));
        match kind {
            REP_ACK => break,
            REP_INFO => {}
            other => fail(&format!("option reply type {other:#x} to GO")),
        }
    }
    let mut req = Vec::with_capacity(REQUEST_BYTES);
    req.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
    req.extend_from_slice(&0u16.to_be_bytes());
    req.extend_from_slice(&CMD_READ.to_be_bytes());
    req.extend_from_slice(&7u64.to_be_bytes());
    req.extend_from_slice(&0u64.to_be_bytes());
    req.extend_from_slice(&BLOCK.to_be_bytes());
    s.write_all(&req).unwrap_or_else(|e| fail(&format!("sending a read: {e}")));
    let mut reply = vec![0u8; 16 + BLOCK as usize];
    s.read_exact(&mut reply).unwrap_or_else(|e| fail(&format!("the read's reply: {e}")));
    if be_u32(&reply[0..4]) != SIMPLE_REPLY_MAGIC || be_u32(&reply[4..8]) != 0 {
        fail("the read was not answered with data");
    }
    if be_u64(&reply[8..16]) != 7 {
        fail("the read's reply has another cookie");
    }
    req[6..8].copy_from_slice(&CMD_DISC.to_be_bytes());
    req[24..28].copy_from_slice(&0u32.to_be_bytes());
    s.write_all(&req).unwrap_or_else(|e| fail(&format!("sending DISC: {e}")));
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
}

/// The target: the first byte chooses the export (bit 0: read-only), the rest is sent.
pub fn session(data: &[u8]) {
    let Some((&sel, stream)) = data.split_first() else {
        return;
    };
    let srv = servers();
    let path = if sel & 1 == 0 { &srv.rw } else { &srv.ro };
    let before = SERVER_PANICS.load(Ordering::SeqCst);
    converse(path, stream);
    well_behaved_client(path);
    let after = SERVER_PANICS.load(Ordering::SeqCst);
    assert_eq!(after, before, "nbd: a server thread panicked on this input (its message is above)");
}

/// A client's byte stream that goes through the handshake with `options` (each: option,
/// data) and then sends `requests` (each: flags, command, offset, length, payload): for
/// building seed inputs and regression tests. The export selector byte is not included.
pub fn stream(options: &[(u32, Vec<u8>)], requests: &[(u16, u16, u64, u32, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes());
    for (opt, data) in options {
        out.extend_from_slice(&IHAVEOPT.to_be_bytes());
        out.extend_from_slice(&opt.to_be_bytes());
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(data);
    }
    for (i, (flags, cmd, offset, len, payload)) in requests.iter().enumerate() {
        out.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out.extend_from_slice(&flags.to_be_bytes());
        out.extend_from_slice(&cmd.to_be_bytes());
        out.extend_from_slice(&(i as u64 + 1).to_be_bytes());
        out.extend_from_slice(&offset.to_be_bytes());
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(payload);
    }
    out
}
