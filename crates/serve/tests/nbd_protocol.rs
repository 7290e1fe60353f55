//! Goal: the NBD server speaks the protocol as proto.md describes it, byte for byte: the fixed
//! newstyle handshake and its options (GO, INFO, LIST, EXPORT_NAME, ABORT, STARTTLS refused,
//! structured replies, meta contexts, unknown names and options), every transmission command
//! with simple and structured replies, the protocol's error for every bad request while the
//! connection stays usable, an option too long answered NBD_REP_ERR_TOO_BIG (2^31 + 9) with
//! negotiation going on, a hang-up on a bad magic that leaves other connections alone, a
//! read-only export, two connections at once, bulk requests run on another reactor than their
//! connection's, a shutdown that answers the requests in flight, and large payloads that
//! arrive in pieces or never arrive whole; partition exports (`--partitions`, CSAL's tenants)
//! listed, chosen by name, each addressing its own window of the device.
//!
//! Method: a hand-written client over a raw Unix socket (no NBD library between the test and
//! the wire) against `nbd::start` on an export over a RAM disk, on the real runtime. The
//! client runs on a std thread while the runtime's main task waits for it, and stops the server
//! the way `flashrig serve` does when the client asks (stop, close the export, wait for the
//! requests in flight, flush, finish).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use flashrig_blockdev::DevRef;
use flashrig_devices::RamDevice;
use flashrig_runtime::{run, RuntimeKind};
use flashrig_serve::nbd::proto::*;
use flashrig_serve::nbd::{start, Listen, NbdConfig};
use flashrig_serve::{Export, Reply, Request};

const NAME: &str = "test";
const BLOCK: u64 = 4096;
const BLOCKS: u64 = 256;
const SIZE: u64 = BLOCK * BLOCKS;

/// What a client thread gets: where to connect, the export (to look at requests in flight),
/// and a way to ask the main task to shut the server down.
struct Env {
    path: PathBuf,
    export: Arc<Export>,
    stop: mpsc::Sender<()>,
}

struct Setup {
    read_only: bool,
    reactors: usize,
    latency_ns: u64,
    /// Partition exports beside the whole device's.
    partitions: u64,
}

const PLAIN: Setup = Setup { read_only: false, reactors: 2, latency_ns: 0, partitions: 0 };

/// Runs `client` against a server over a fresh RAM disk; returns what the export holds at the
/// end (read after the shutdown, so it shows what the requests left on the stack).
fn with_server<F>(setup: Setup, client: F) -> Vec<u8>
where
    F: FnOnce(Env) + Send + 'static,
{
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nbd.sock");
    let _watchdog = Watchdog::start(WATCHDOG);
    let (res, _) = run(RuntimeKind::Real, setup.reactors, move || async move {
        let dev: DevRef =
            Arc::new(RamDevice::new("ram", BLOCK as u32, BLOCKS, 0, setup.latency_ns));
        let export = Export::new("ram", dev, flashrig_runtime::handle().unwrap(), setup.read_only);
        let cfg = NbdConfig {
            listen: Listen::Unix(path.clone()),
            export_name: NAME.into(),
            description: "a RAM disk for the protocol tests".into(),
            partitions: setup.partitions,
        };
        let mut server = start(export.clone(), cfg).expect("server starts");
        assert!(server.describe().starts_with("nbd+unix:///test?socket="), "{}", server.describe());
        let (stop_tx, stop_rx) = mpsc::channel();
        let env = Env { path: path.clone(), export: export.clone(), stop: stop_tx };
        let th = std::thread::spawn(move || client(env));
        let mut stopped = false;
        while !th.is_finished() {
            if !stopped && stop_rx.try_recv().is_ok() {
                // As `flashrig serve` shuts down.
                server.stop();
                export.close();
                while export.in_flight() > 0 {
                    flashrig_runtime::sleep_ns(1_000_000).await;
                }
                export.device().flush().await.unwrap();
                server.finish();
                stopped = true;
            }
            flashrig_runtime::sleep_ns(1_000_000).await;
        }
        let outcome = th.join();
        server.stop();
        server.finish();
        assert!(!path.exists(), "the socket file is removed at the end");
        let contents = match export.execute(Request::Read { offset: 0, len: SIZE }).await {
            Ok(Reply::Data(d)) => d,
            other => panic!("{other:?}"),
        };
        (outcome, contents)
    });
    let (outcome, contents) = res;
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
    contents
}

/// How long one test's server may run. A server that never finishes (a connection waiting for
/// a reply that will not come) would otherwise hang the test run instead of failing it.
const WATCHDOG: Duration = Duration::from_secs(120);

/// Ends the test process, loudly, if it is still alive when the time is up.
struct Watchdog(Arc<std::sync::atomic::AtomicBool>);

impl Watchdog {
    fn start(limit: Duration) -> Watchdog {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        let name = std::thread::current().name().unwrap_or("a test").to_string();
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + limit;
            while std::time::Instant::now() < deadline {
                if flag.load(std::sync::atomic::Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            eprintln!("{name}: the server did not finish within {limit:?} (hung); aborting");
            std::process::abort();
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// A reply as the client saw it: the error (0 for success) and a read's data.
#[derive(Debug, PartialEq)]
struct Answer {
    error: u32,
    data: Vec<u8>,
    /// Structured replies: the chunk types received, in order.
    chunks: Vec<u16>,
}

struct Client {
    s: UnixStream,
    structured: bool,
    /// Simple replies carry no length: the client remembers what its reads asked for.
    reads: HashMap<u64, usize>,
    /// Chunks of structured replies not finished yet.
    partial: HashMap<u64, Answer>,
    next_cookie: u64,
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().unwrap())
}

impl Client {
    /// Connects and reads the server's greeting.
    fn connect(env: &Env) -> Client {
        let s = UnixStream::connect(&env.path).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut c = Client {
            s,
            structured: false,
            reads: HashMap::new(),
            partial: HashMap::new(),
            next_cookie: 1,
        };
        let hello = c.read_n(18);
        assert_eq!(be64(&hello[0..8]), NBDMAGIC);
        assert_eq!(be64(&hello[8..16]), IHAVEOPT);
        assert_eq!(
            u16::from_be_bytes([hello[16], hello[17]]),
            FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES
        );
        c
    }

    /// Connects with the client flags `flags` sent.
    fn start(env: &Env, flags: u32) -> Client {
        let mut c = Client::connect(env);
        c.write(&flags.to_be_bytes());
        c
    }

    fn write(&mut self, b: &[u8]) {
        self.s.write_all(b).expect("write to the server");
    }

    fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.s.read_exact(&mut b).expect("read from the server");
        b
    }

    /// Whether the server closed the connection: the end of the stream (or a reset), not
    /// the read timeout.
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.s.read(&mut b) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Ok(_) => false,
        }
    }

    fn option(&mut self, opt: u32, data: &[u8]) {
        let mut m = Vec::new();
        m.extend_from_slice(&IHAVEOPT.to_be_bytes());
        m.extend_from_slice(&opt.to_be_bytes());
        m.extend_from_slice(&(data.len() as u32).to_be_bytes());
        m.extend_from_slice(data);
        self.write(&m);
    }

    /// One option reply: (reply type, data); checks the magic and the option echoed.
    fn option_reply(&mut self, opt: u32) -> (u32, Vec<u8>) {
        let h = self.read_n(20);
        assert_eq!(be64(&h[0..8]), OPT_REPLY_MAGIC);
        assert_eq!(be32(&h[8..12]), opt);
        let kind = be32(&h[12..16]);
        let len = be32(&h[16..20]) as usize;
        (kind, self.read_n(len))
    }

    /// Replies to an option up to its final one (ACK or an error): the data of each INFO,
    /// SERVER or META_CONTEXT reply, and the final reply type.
    fn option_replies(&mut self, opt: u32) -> (Vec<(u32, Vec<u8>)>, u32) {
        let mut got = Vec::new();
        loop {
            let (kind, data) = self.option_reply(opt);
            if kind == REP_ACK || kind & 0x8000_0000 != 0 {
                return (got, kind);
            }
            got.push((kind, data));
        }
    }

    fn go_data(name: &str, infos: &[u16]) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&(name.len() as u32).to_be_bytes());
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            d.extend_from_slice(&i.to_be_bytes());
        }
        d
    }

    /// NBD_OPT_GO on `name`: returns (size, transmission flags).
    fn go(&mut self, name: &str) -> (u64, u16) {
        self.option(OPT_GO, &Client::go_data(name, &[]));
        let (infos, last) = self.option_replies(OPT_GO);
        assert_eq!(last, REP_ACK);
        let export = infos
            .iter()
            .find(|(k, d)| *k == REP_INFO && u16::from_be_bytes([d[0], d[1]]) == INFO_EXPORT)
            .expect("NBD_INFO_EXPORT")
            .1
            .clone();
        (be64(&export[2..10]), u16::from_be_bytes([export[10], export[11]]))
    }

    fn negotiate_structured(&mut self) {
        self.option(OPT_STRUCTURED_REPLY, &[]);
        assert_eq!(self.option_reply(OPT_STRUCTURED_REPLY).0, REP_ACK);
        self.structured = true;
    }

    /// A client in transmission: fixed newstyle, optionally structured replies, then GO.
    fn ready(env: &Env, structured: bool) -> (Client, u16) {
        let mut c = Client::start(env, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
        if structured {
            c.negotiate_structured();
        }
        let (size, flags) = c.go(NAME);
        assert_eq!(size, SIZE);
        (c, flags)
    }

    /// Sends a request; returns its cookie.
    fn send(&mut self, flags: u16, kind: u16, offset: u64, len: u32, payload: &[u8]) -> u64 {
        let (cookie, m) = self.encode(flags, kind, offset, len, payload);
        self.write(&m);
        cookie
    }

    /// A request's bytes on the wire, not sent yet (a test may send them together with
    /// others); returns its cookie too.
    fn encode(
        &mut self,
        flags: u16,
        kind: u16,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) -> (u64, Vec<u8>) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        let mut m = Vec::with_capacity(28 + payload.len());
        m.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        m.extend_from_slice(&flags.to_be_bytes());
        m.extend_from_slice(&kind.to_be_bytes());
        m.extend_from_slice(&cookie.to_be_bytes());
        m.extend_from_slice(&offset.to_be_bytes());
        m.extend_from_slice(&len.to_be_bytes());
        m.extend_from_slice(payload);
        if kind == CMD_READ {
            self.reads.insert(cookie, len as usize);
        }
        (cookie, m)
    }

    /// Reads the next complete reply: (cookie, answer).
    fn next_reply(&mut self) -> (u64, Answer) {
        loop {
            let magic = be32(&self.read_n(4));
            if magic == SIMPLE_REPLY_MAGIC {
                let h = self.read_n(12);
                let error = be32(&h[0..4]);
                let cookie = be64(&h[4..12]);
                let len = self.reads.remove(&cookie).unwrap_or(0);
                let data = if error == 0 { self.read_n(len) } else { Vec::new() };
                return (cookie, Answer { error, data, chunks: Vec::new() });
            }
            assert_eq!(magic, STRUCTURED_REPLY_MAGIC, "reply magic");
            assert!(self.structured, "a structured reply without negotiation");
            let h = self.read_n(16);
            let flags = u16::from_be_bytes([h[0], h[1]]);
            let kind = u16::from_be_bytes([h[2], h[3]]);
            let cookie = be64(&h[4..12]);
            let len = be32(&h[12..16]) as usize;
            let payload = self.read_n(len);
            let a = self.partial.entry(cookie).or_insert(Answer {
                error: 0,
                data: Vec::new(),
                chunks: Vec::new(),
            });
            a.chunks.push(kind);
            match kind {
                REPLY_TYPE_NONE => assert_eq!(len, 0),
                REPLY_TYPE_OFFSET_DATA => {
                    let start = self.reads[&cookie];
                    let _ = start;
                    a.data.extend_from_slice(&payload[8..]);
                }
                REPLY_TYPE_BLOCK_STATUS => a.data.extend_from_slice(&payload),
                REPLY_TYPE_ERROR | REPLY_TYPE_ERROR_OFFSET => {
                    a.error = be32(&payload[0..4]);
                    let mlen = u16::from_be_bytes([payload[4], payload[5]]) as usize;
                    let tail = if kind == REPLY_TYPE_ERROR_OFFSET { 8 } else { 0 };
                    assert_eq!(len, 6 + mlen + tail, "error chunk length");
                    assert!(mlen > 0, "errors carry a message for humans");
                }
                other => panic!("unexpected chunk type {other}"),
            }
            if flags & REPLY_FLAG_DONE != 0 {
                self.reads.remove(&cookie);
                return (cookie, self.partial.remove(&cookie).unwrap());
            }
        }
    }

    /// Sends a request and waits for its reply (nothing else in flight).
    fn call(&mut self, flags: u16, kind: u16, offset: u64, len: u32, payload: &[u8]) -> Answer {
        let cookie = self.send(flags, kind, offset, len, payload);
        let (got, a) = self.next_reply();
        assert_eq!(got, cookie, "reply to the request sent");
        a
    }

    fn write_at(&mut self, offset: u64, data: &[u8], flags: u16) -> u32 {
        self.call(flags, CMD_WRITE, offset, data.len() as u32, data).error
    }

    fn read_at(&mut self, offset: u64, len: u32) -> Vec<u8> {
        let a = self.call(0, CMD_READ, offset, len, &[]);
        assert_eq!(a.error, 0, "read {offset}+{len}");
        assert_eq!(a.data.len(), len as usize);
        a.data
    }

    fn disconnect(mut self) {
        self.send(0, CMD_DISC, 0, 0, &[]);
        assert!(self.closed(), "the server closes after NBD_CMD_DISC");
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn handshake_options_info_list_and_export_names() {
    with_server(PLAIN, |env| {
        let mut c = Client::start(&env, FLAG_C_FIXED_NEWSTYLE);
        // NBD_OPT_INFO with every info type: the export, block sizes, name, description.
        c.option(OPT_INFO, &Client::go_data("", &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]));
        let (infos, last) = c.option_replies(OPT_INFO);
        assert_eq!(last, REP_ACK);
        let by_type: HashMap<u16, Vec<u8>> = infos
            .iter()
            .map(|(k, d)| {
                assert_eq!(*k, REP_INFO);
                (u16::from_be_bytes([d[0], d[1]]), d[2..].to_vec())
            })
            .collect();
        let export = &by_type[&INFO_EXPORT];
        assert_eq!(be64(&export[0..8]), SIZE);
        let flags = u16::from_be_bytes([export[8], export[9]]);
        for f in [
            FLAG_HAS_FLAGS,
            FLAG_SEND_FLUSH,
            FLAG_SEND_FUA,
            FLAG_SEND_TRIM,
            FLAG_SEND_WRITE_ZEROES,
            FLAG_CAN_MULTI_CONN,
            FLAG_SEND_CACHE,
        ] {
            assert_ne!(flags & f, 0, "flag {f:#x} in {flags:#x}");
        }
        assert_eq!(flags & (FLAG_READ_ONLY | FLAG_SEND_DF), 0, "{flags:#x}");
        assert_eq!(by_type[&INFO_NAME], NAME.as_bytes());
        assert_eq!(by_type[&INFO_DESCRIPTION], b"a RAM disk for the protocol tests");
        let bs = &by_type[&INFO_BLOCK_SIZE];
        assert_eq!((be32(&bs[0..4]), be32(&bs[4..8]), be32(&bs[8..12])), (1, 4096, 32 << 20));
        // NBD_OPT_LIST names the export; with data it is malformed.
        c.option(OPT_LIST, &[]);
        let (servers, last) = c.option_replies(OPT_LIST);
        assert_eq!(last, REP_ACK);
        assert_eq!(servers.len(), 1);
        assert_eq!(servers[0].0, REP_SERVER);
        assert_eq!(be32(&servers[0].1) as usize, NAME.len());
        assert_eq!(&servers[0].1[4..], NAME.as_bytes());
        c.option(OPT_LIST, b"x");
        assert_eq!(c.option_reply(OPT_LIST).0, REP_ERR_INVALID);
        // Unknown export names, TLS, unknown options, malformed INFO.
        c.option(OPT_GO, &Client::go_data("nope", &[]));
        let (kind, msg) = c.option_reply(OPT_GO);
        assert_eq!(kind, REP_ERR_UNKNOWN);
        assert!(String::from_utf8_lossy(&msg).contains("nope"));
        c.option(OPT_STARTTLS, &[]);
        assert_eq!(c.option_reply(OPT_STARTTLS).0, REP_ERR_POLICY);
        c.option(99, b"whatever");
        assert_eq!(c.option_reply(99).0, REP_ERR_UNSUP);
        c.option(OPT_INFO, &[0, 0, 0, 9, b'x']);
        assert_eq!(c.option_reply(OPT_INFO).0, REP_ERR_INVALID);
        // Meta contexts need structured replies first.
        let mut q = Vec::new();
        q.extend_from_slice(&(NAME.len() as u32).to_be_bytes());
        q.extend_from_slice(NAME.as_bytes());
        q.extend_from_slice(&1u32.to_be_bytes());
        q.extend_from_slice(&(META_BASE_ALLOCATION.len() as u32).to_be_bytes());
        q.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
        c.option(OPT_SET_META_CONTEXT, &q);
        assert_eq!(c.option_reply(OPT_SET_META_CONTEXT).0, REP_ERR_INVALID);
        c.negotiate_structured();
        let mut all = Vec::new();
        all.extend_from_slice(&0u32.to_be_bytes());
        all.extend_from_slice(&0u32.to_be_bytes());
        c.option(OPT_LIST_META_CONTEXT, &all);
        let (ctxs, last) = c.option_replies(OPT_LIST_META_CONTEXT);
        assert_eq!(last, REP_ACK);
        assert_eq!(ctxs.len(), 1);
        assert_eq!(&ctxs[0].1[4..], META_BASE_ALLOCATION.as_bytes());
        c.option(OPT_SET_META_CONTEXT, &q);
        let (ctxs, last) = c.option_replies(OPT_SET_META_CONTEXT);
        assert_eq!(last, REP_ACK);
        assert_eq!(ctxs.len(), 1);
        let id = be32(&ctxs[0].1);
        assert_ne!(id, 0);
        // GO: structured replies add "don't fragment".
        let (size, flags) = c.go(NAME);
        assert_eq!(size, SIZE);
        assert_ne!(flags & FLAG_SEND_DF, 0);
        // Block status: one extent of allocated data for the whole range.
        let a = c.call(0, CMD_BLOCK_STATUS, 4096, 8192, &[]);
        assert_eq!(a.error, 0);
        assert_eq!(a.chunks, vec![REPLY_TYPE_BLOCK_STATUS]);
        assert_eq!((be32(&a.data[0..4]), be32(&a.data[4..8]), be32(&a.data[8..12])), (id, 8192, 0));
        let a = c.call(0, CMD_BLOCK_STATUS, SIZE - 1, 2, &[]);
        assert_eq!(a.error, NBD_EINVAL);
        c.disconnect();

        // NBD_OPT_EXPORT_NAME: size, flags and (without NO_ZEROES) 124 zero bytes.
        let mut c = Client::start(&env, FLAG_C_FIXED_NEWSTYLE);
        c.option(OPT_EXPORT_NAME, NAME.as_bytes());
        let r = c.read_n(8 + 2 + 124);
        assert_eq!(be64(&r), SIZE);
        assert!(r[10..].iter().all(|&b| b == 0));
        assert_eq!(c.read_at(0, 16), vec![0u8; 16]);
        c.disconnect();
        let mut c = Client::start(&env, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
        c.option(OPT_EXPORT_NAME, b"");
        assert_eq!(be64(&c.read_n(10)), SIZE);
        c.disconnect();
        // An unknown name with EXPORT_NAME cannot be answered: the server hangs up.
        let mut c = Client::start(&env, FLAG_C_FIXED_NEWSTYLE);
        c.option(OPT_EXPORT_NAME, b"nope");
        assert!(c.closed());
        // NBD_OPT_ABORT is acknowledged, then the connection ends.
        let mut c = Client::start(&env, FLAG_C_FIXED_NEWSTYLE);
        c.option(OPT_ABORT, &[]);
        assert_eq!(c.option_reply(OPT_ABORT).0, REP_ACK);
        assert!(c.closed());
        // Clients without fixed newstyle, with unknown flags, or sending garbage are closed.
        assert!(Client::start(&env, 0).closed());
        assert!(Client::start(&env, FLAG_C_FIXED_NEWSTYLE | 0x100).closed());
        let mut c = Client::start(&env, FLAG_C_FIXED_NEWSTYLE);
        c.write(b"this is not an option header at all");
        assert!(c.closed());
        let mut c = Client::start(&env, FLAG_C_FIXED_NEWSTYLE);
        let mut huge = Vec::new();
        huge.extend_from_slice(&IHAVEOPT.to_be_bytes());
        huge.extend_from_slice(&OPT_GO.to_be_bytes());
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        c.write(&huge);
        assert_eq!(c.option_reply(OPT_GO).0, REP_ERR_TOO_BIG, "told why");
        assert!(c.closed(), "a 4 GiB option closes the connection");
        // The server still serves.
        let (mut c, _) = Client::ready(&env, false);
        assert_eq!(c.read_at(0, 1), vec![0]);
        c.disconnect();
    });
}

#[test]
fn an_option_too_long_is_answered_too_big_and_negotiation_goes_on() {
    with_server(PLAIN, |env| {
        assert_eq!(REP_ERR_TOO_BIG, (1 << 31) + 9, "the spec's value");
        let mut c = Client::start(&env, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
        // One byte over the 64 KiB the server reads, in an option it knows and one it does
        // not: the data is read and thrown away, the reply says why.
        for opt in [OPT_INFO, 99] {
            let data = vec![0xa5u8; (64 << 10) + 1];
            c.option(opt, &data);
            let (kind, msg) = c.option_reply(opt);
            assert_eq!(kind, REP_ERR_TOO_BIG, "option {opt}");
            assert!(String::from_utf8_lossy(&msg).contains("65537 bytes"), "{msg:?}");
        }
        // The stream is still in step: the next options are answered and GO works.
        c.option(OPT_LIST, &[]);
        assert_eq!(c.option_replies(OPT_LIST).1, REP_ACK);
        let (size, _) = c.go(NAME);
        assert_eq!(size, SIZE);
        assert_eq!(c.read_at(0, 4), vec![0; 4]);
        c.disconnect();
    });
}

/// Read, write (aligned and not, with FUA), flush, trim, write-zeroes (with and without
/// NO_HOLE), cache, against a byte model of the export; returns the model.
fn round_trips(c: &mut Client) -> Vec<u8> {
    let mut model = vec![0u8; SIZE as usize];
    let cases: [(u64, usize, u16); 6] = [
        (0, 4096, 0),
        (4096, 8192, CMD_FLAG_FUA),
        (100, 512, 0),
        (3 * 4096 - 7, 4096 + 14, CMD_FLAG_FUA),
        (SIZE - 3, 3, 0),
        (64 * 4096, 200 * 1024, 0),
    ];
    for (i, &(off, len, flags)) in cases.iter().enumerate() {
        let data = pattern(len, i as u8 + 1);
        assert_eq!(c.write_at(off, &data, flags), 0, "write {off}+{len}");
        model[off as usize..off as usize + len].copy_from_slice(&data);
        assert_eq!(c.read_at(off, len as u32), data, "read back {off}+{len}");
    }
    assert_eq!(c.call(0, CMD_FLUSH, 0, 0, &[]).error, 0);
    assert_eq!(c.call(CMD_FLAG_FUA, CMD_CACHE, 0, 8192, &[]).error, 0);
    // Trim drops whole blocks (they read as zeros on this stack); partial ones stay.
    assert_eq!(c.call(CMD_FLAG_FUA, CMD_TRIM, 4096 - 10, 4096 + 20, &[]).error, 0);
    model[4096..8192].fill(0);
    // Zeroes: trimmed whole blocks and patched ends; NO_HOLE writes them.
    assert_eq!(c.call(0, CMD_WRITE_ZEROES, 90, 30, &[]).error, 0);
    model[90..120].fill(0);
    let nohole = CMD_FLAG_NO_HOLE | CMD_FLAG_FUA;
    assert_eq!(c.call(nohole, CMD_WRITE_ZEROES, 65 * 4096 + 1, 3 * 4096, &[]).error, 0);
    model[65 * 4096 + 1..68 * 4096 + 1].fill(0);
    // A zero-length read and write are fine.
    assert_eq!(c.read_at(10, 0), Vec::<u8>::new());
    assert_eq!(c.write_at(10, &[], 0), 0);
    assert_eq!(c.read_at(0, SIZE as u32), model, "the whole export");
    model
}

#[test]
fn simple_replies_round_trip() {
    let model = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let m = model.clone();
    let end = with_server(PLAIN, move |env| {
        let (mut c, flags) = Client::ready(&env, false);
        assert_eq!(flags & FLAG_SEND_DF, 0);
        *m.lock().unwrap() = round_trips(&mut c);
        c.disconnect();
    });
    assert_eq!(end, *model.lock().unwrap(), "the export holds what the client wrote");
}

#[test]
fn structured_replies_round_trip() {
    with_server(PLAIN, |env| {
        let (mut c, _) = Client::ready(&env, true);
        round_trips(&mut c);
        // A read is one data chunk that ends the reply; a zero-length read is NONE; DF is
        // accepted.
        let a = c.call(CMD_FLAG_DF, CMD_READ, 0, 4096, &[]);
        assert_eq!((a.error, a.chunks.clone()), (0, vec![REPLY_TYPE_OFFSET_DATA]));
        assert_eq!(c.call(0, CMD_READ, 5, 0, &[]).chunks, vec![REPLY_TYPE_NONE]);
        // Errors come as error chunks, with the offset for reads.
        let a = c.call(0, CMD_READ, SIZE, 1, &[]);
        assert_eq!((a.error, a.chunks), (NBD_EINVAL, vec![REPLY_TYPE_ERROR_OFFSET]));
        let a = c.call(0, CMD_WRITE, SIZE, 1, &[1]);
        assert_eq!((a.error, a.chunks), (NBD_ENOSPC, vec![REPLY_TYPE_ERROR]));
        c.disconnect();
    });
}

#[test]
fn bad_requests_get_the_protocol_errors_and_the_connection_goes_on() {
    for structured in [false, true] {
        with_server(PLAIN, move |env| {
            let (mut c, _) = Client::ready(&env, structured);
            let e = |a: Answer| a.error;
            // Ranges: reads past the end EINVAL, writes past the end ENOSPC.
            assert_eq!(e(c.call(0, CMD_READ, SIZE - 1, 2, &[])), NBD_EINVAL);
            assert_eq!(e(c.call(0, CMD_READ, u64::MAX, 1, &[])), NBD_EINVAL);
            assert_eq!(e(c.call(0, CMD_WRITE, SIZE - 1, 2, &[7, 7])), NBD_ENOSPC);
            assert_eq!(e(c.call(0, CMD_TRIM, SIZE, 4096, &[])), NBD_ENOSPC);
            assert_eq!(e(c.call(0, CMD_WRITE_ZEROES, u64::MAX - 1, 4, &[])), NBD_ENOSPC);
            assert_eq!(e(c.call(0, CMD_CACHE, SIZE, 1, &[])), NBD_EINVAL);
            // Lengths over the 32 MiB maximum: no allocation, EINVAL; a write's payload is
            // skipped and the stream stays in step.
            assert_eq!(e(c.call(0, CMD_READ, 0, u32::MAX, &[])), NBD_EINVAL);
            let big = vec![0x5a; (32 << 20) + 1];
            assert_eq!(e(c.call(0, CMD_WRITE, 0, big.len() as u32, &big)), NBD_EINVAL);
            // Flags that do not belong to the command, unknown commands, a flush with a
            // range, block status without a context, DF without structured replies.
            assert_eq!(e(c.call(CMD_FLAG_NO_HOLE, CMD_READ, 0, 1, &[])), NBD_EINVAL);
            assert_eq!(e(c.call(1 << 12, CMD_WRITE, 0, 1, &[9])), NBD_EINVAL);
            assert_eq!(e(c.call(CMD_FLAG_REQ_ONE, CMD_TRIM, 0, 1, &[])), NBD_EINVAL);
            assert_eq!(e(c.call(0, 42, 0, 0, &[])), NBD_EINVAL);
            assert_eq!(e(c.call(0, CMD_FLUSH, 0, 4096, &[])), NBD_EINVAL);
            assert_eq!(e(c.call(0, CMD_BLOCK_STATUS, 0, 4096, &[])), NBD_EINVAL);
            let df = e(c.call(CMD_FLAG_DF, CMD_READ, 0, 1, &[]));
            assert_eq!(df, if structured { 0 } else { NBD_EINVAL });
            // Fast zeroing that would have to write: ENOTSUP, at once.
            let fast = CMD_FLAG_FAST_ZERO | CMD_FLAG_NO_HOLE;
            assert_eq!(e(c.call(fast, CMD_WRITE_ZEROES, 0, 4096, &[])), NBD_ENOTSUP);
            assert_eq!(e(c.call(CMD_FLAG_FAST_ZERO, CMD_WRITE_ZEROES, 0, 4096, &[])), 0);
            // None of it hurt: the rejected write left nothing, and the connection works.
            assert_eq!(c.read_at(0, 4096), vec![0u8; 4096]);
            assert_eq!(c.write_at(0, &[1, 2, 3], 0), 0);
            assert_eq!(c.read_at(0, 3), vec![1, 2, 3]);
            // A write far over the maximum is refused and the connection closed rather than
            // read gigabytes to stay in step.
            c.send(0, CMD_WRITE, 0, u32::MAX, &[]);
            let (_, a) = c.next_reply();
            assert_eq!(a.error, NBD_EINVAL);
            assert!(c.closed());
            // The server goes on.
            let (mut c, _) = Client::ready(&env, structured);
            assert_eq!(c.read_at(0, 3), vec![1, 2, 3]);
            c.disconnect();
        });
    }
}

#[test]
fn a_bad_magic_closes_only_that_connection() {
    with_server(PLAIN, |env| {
        let (mut good, _) = Client::ready(&env, false);
        let (mut bad, _) = Client::ready(&env, true);
        assert_eq!(good.write_at(0, b"still here", 0), 0);
        let mut garbage = vec![0xde, 0xad, 0xbe, 0xef];
        garbage.extend_from_slice(&[0u8; 24]);
        bad.write(&garbage);
        assert!(bad.closed(), "a bad magic closes the connection");
        assert_eq!(good.read_at(0, 10), b"still here");
        // Requests in flight before the garbage are still answered.
        let (mut bad, _) = Client::ready(&env, false);
        let cookie = bad.send(0, CMD_WRITE, 4096, 4, b"abcd");
        bad.write(&garbage);
        let (got, a) = bad.next_reply();
        assert_eq!((got, a.error), (cookie, 0));
        assert!(bad.closed());
        assert_eq!(good.read_at(4096, 4), b"abcd");
        good.disconnect();
    });
}

#[test]
fn a_read_only_export_refuses_writes() {
    let setup = Setup { read_only: true, ..PLAIN };
    with_server(setup, |env| {
        for structured in [false, true] {
            let (mut c, flags) = Client::ready(&env, structured);
            assert_ne!(flags & FLAG_READ_ONLY, 0);
            assert_eq!(flags & (FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES), 0);
            assert_eq!(c.write_at(0, &[1; 512], 0), NBD_EPERM);
            assert_eq!(c.call(0, CMD_TRIM, 0, 4096, &[]).error, NBD_EPERM);
            assert_eq!(c.call(0, CMD_WRITE_ZEROES, 0, 4096, &[]).error, NBD_EPERM);
            assert_eq!(c.call(0, CMD_FLUSH, 0, 0, &[]).error, 0);
            assert_eq!(c.read_at(0, 512), vec![0u8; 512]);
            c.disconnect();
        }
    });
}

#[test]
fn two_connections_at_once_with_many_requests_in_flight() {
    let end = with_server(PLAIN, |env| {
        let env = Arc::new(env);
        // Each connection writes its half of the export with 64 requests in flight, then
        // checks every block; the other connection's blocks are checked after both finished.
        let workers: Vec<_> = (0..2u64)
            .map(|w| {
                let env = env.clone();
                std::thread::spawn(move || {
                    let (mut c, _) = Client::ready(&env, w == 1);
                    let half = BLOCKS / 2;
                    let mut expect = HashMap::new();
                    for b in 0..half {
                        let blk = w * half + b;
                        let data = pattern(BLOCK as usize, blk as u8);
                        let cookie = c.send(0, CMD_WRITE, blk * BLOCK, BLOCK as u32, &data);
                        expect.insert(cookie, ());
                        if expect.len() == 64 {
                            let (cookie, a) = c.next_reply();
                            assert_eq!(a.error, 0);
                            expect.remove(&cookie).expect("a reply to a request in flight");
                        }
                    }
                    while !expect.is_empty() {
                        let (cookie, a) = c.next_reply();
                        assert_eq!(a.error, 0);
                        expect.remove(&cookie).expect("a reply to a request in flight");
                    }
                    assert_eq!(c.call(0, CMD_FLUSH, 0, 0, &[]).error, 0);
                    // Reads pipelined too, answered by cookie.
                    let mut reads = HashMap::new();
                    for b in 0..half {
                        let blk = w * half + b;
                        reads.insert(c.send(0, CMD_READ, blk * BLOCK, BLOCK as u32, &[]), blk);
                    }
                    while !reads.is_empty() {
                        let (cookie, a) = c.next_reply();
                        let blk = reads.remove(&cookie).expect("a read in flight");
                        assert_eq!(a.data, pattern(BLOCK as usize, blk as u8), "block {blk}");
                    }
                    c
                })
            })
            .collect();
        let mut clients: Vec<Client> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        // Each sees what the other wrote (one stack behind both connections).
        let other = clients[0].read_at(SIZE / 2, BLOCK as u32);
        assert_eq!(other, pattern(BLOCK as usize, (BLOCKS / 2) as u8));
        for c in clients.drain(..) {
            c.disconnect();
        }
    });
    for b in 0..BLOCKS {
        let at = (b * BLOCK) as usize;
        assert_eq!(end[at..at + BLOCK as usize], pattern(BLOCK as usize, b as u8), "block {b}");
    }
}

#[test]
fn shutdown_answers_the_requests_in_flight() {
    // Every command takes 20 ms on this disk, so the writes are surely in flight at the stop.
    let setup = Setup { latency_ns: 20_000_000, ..PLAIN };
    let end = with_server(setup, |env| {
        let (mut c, _) = Client::ready(&env, false);
        let (mut idle, _) = Client::ready(&env, true);
        let mut cookies = Vec::new();
        for i in 0..16u64 {
            cookies.push(c.send(CMD_FLAG_FUA, CMD_WRITE, i * BLOCK, 8, &[i as u8 + 1; 8]));
        }
        while env.export.in_flight() < 16 {
            std::thread::sleep(Duration::from_millis(1));
        }
        env.stop.send(()).unwrap();
        for _ in 0..16 {
            let (cookie, a) = c.next_reply();
            assert_eq!(a.error, 0, "a write in flight at the stop completes");
            cookies.retain(|&x| x != cookie);
        }
        assert!(cookies.is_empty());
        assert!(c.closed(), "then the server closes the connection");
        assert!(idle.closed(), "and the idle one");
        // No new connections.
        assert!(UnixStream::connect(&env.path).is_err());
    });
    for i in 0..16usize {
        assert_eq!(end[i * BLOCK as usize..i * BLOCK as usize + 8], [i as u8 + 1; 8]);
    }
}

/// Bulk requests (128 KiB and more) run on the other reactor than their connection's; with
/// several in flight, unaligned, and small requests between them, every byte must still land.
#[test]
fn bulk_requests_spread_over_reactors_keep_every_byte() {
    let expect = Arc::new(std::sync::Mutex::new(vec![0u8; SIZE as usize]));
    let model = expect.clone();
    let end = with_server(PLAIN, move |env| {
        let (mut c, _) = Client::ready(&env, true);
        let mut model = model.lock().unwrap();
        // Four writes in flight at a time, never overlapping one another (the order of
        // overlapping writes in flight is the client's problem, not the server's).
        let pieces: [(u64, usize); 8] = [
            (1000, 200 << 10),
            (300 << 10, 128 << 10),
            (600 << 10, 131_073),
            (800 << 10, 4096),
            (205 << 10, 90 << 10),
            (430 << 10, 160 << 10),
            (740 << 10, 7),
            (900 << 10, (SIZE - (900 << 10)) as usize),
        ];
        for (round, group) in pieces.chunks(4).enumerate() {
            let mut in_flight = HashMap::new();
            for (i, &(off, len)) in group.iter().enumerate() {
                let data = pattern(len, (round * 4 + i) as u8 + 1);
                model[off as usize..off as usize + len].copy_from_slice(&data);
                in_flight.insert(c.send(0, CMD_WRITE, off, len as u32, &data), off);
            }
            while !in_flight.is_empty() {
                let (cookie, a) = c.next_reply();
                assert_eq!(a.error, 0);
                in_flight.remove(&cookie).expect("a reply to a write in flight");
            }
        }
        // Bulk and small reads pipelined, answered by cookie.
        let mut reads = HashMap::new();
        for &(off, len) in &[(0u64, 256u32 << 10), (256 << 10, 512 << 10), (768 << 10, 256 << 10)] {
            reads.insert(c.send(0, CMD_READ, off, len, &[]), (off, len));
        }
        reads.insert(c.send(0, CMD_READ, 999, 3000, &[]), (999, 3000));
        while !reads.is_empty() {
            let (cookie, a) = c.next_reply();
            let (off, len) = reads.remove(&cookie).expect("a read in flight");
            assert_eq!(a.error, 0);
            let want = &model[off as usize..(off + len as u64) as usize];
            assert!(a.data == want, "read of {len} bytes at {off} differs from what was written");
        }
        c.disconnect();
    });
    assert!(end == *expect.lock().unwrap(), "the export holds what the client wrote");
}

/// A large write's payload is read by the connection's thread, blocking, once the poller saw
/// its header: a payload that arrives in pieces with pauses between them must still be read
/// whole, with the request the client sent right behind it; a client that goes away in the
/// middle of a payload must leave the export and the other connections as they were; and a
/// stop while a payload is half sent must not hang the server.
#[test]
fn a_payload_arriving_in_pieces_is_read_whole_and_a_half_sent_one_writes_nothing() {
    let end = with_server(PLAIN, |env| {
        let (mut a, _) = Client::ready(&env, false);
        // 300 KiB in three pieces, 30 ms apart; a read of another block follows the last
        // piece in the same system call.
        assert_eq!(a.write_at(0, &pattern(4096, 9), 0), 0);
        let len = 300usize << 10;
        let data = pattern(len, 3);
        let cookie = a.send(0, CMD_WRITE, 8192, len as u32, &[]);
        a.write(&data[..1000]);
        std::thread::sleep(Duration::from_millis(30));
        a.write(&data[1000..200 << 10]);
        std::thread::sleep(Duration::from_millis(30));
        let mut tail = data[200 << 10..].to_vec();
        let (read_cookie, read) = a.encode(0, CMD_READ, 0, 4096, &[]);
        tail.extend_from_slice(&read);
        a.write(&tail);
        let mut replies = HashMap::new();
        for _ in 0..2 {
            let (c, ans) = a.next_reply();
            replies.insert(c, ans);
        }
        assert_eq!(replies[&cookie].error, 0, "the write in pieces succeeds");
        assert_eq!(replies[&read_cookie].data, pattern(4096, 9), "the read behind it too");
        assert!(a.read_at(8192, len as u32) == data, "the write in pieces landed whole");

        // A client that closes half way through a payload.
        let (mut b, _) = Client::ready(&env, true);
        b.send(0, CMD_WRITE, 512 << 10, 200 << 10, &pattern(10 << 10, 4));
        drop(b);
        assert_eq!(a.read_at(0, 4096), pattern(4096, 9), "the other connection goes on");

        // A stop while a payload is half sent: the server ends without answering it.
        let (mut c, _) = Client::ready(&env, false);
        c.send(0, CMD_WRITE, 768 << 10, 128 << 10, &pattern(4 << 10, 5));
        std::thread::sleep(Duration::from_millis(20));
        env.stop.send(()).unwrap();
        assert!(c.closed(), "the server closes the connection of the unfinished write");
    });
    assert!(end[512 << 10..1 << 20].iter().all(|&b| b == 0), "unfinished writes wrote nothing");
}

#[test]
fn partition_exports_are_listed_and_each_addresses_its_own_window() {
    let setup = Setup { partitions: 3, ..PLAIN };
    let disk = with_server(setup, |env| {
        let mut c = Client::start(&env, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
        c.option(OPT_LIST, &[]);
        let (servers, last) = c.option_replies(OPT_LIST);
        assert_eq!(last, REP_ACK);
        let names: Vec<String> = servers
            .iter()
            .map(|(_, d)| String::from_utf8(d[4..4 + be32(&d[0..4]) as usize].to_vec()).unwrap())
            .collect();
        assert_eq!(names, ["test", "test-0", "test-1", "test-2"]);
        // INFO on a partition names it and gives its size (256 blocks in 85, 85 and 86).
        c.option(OPT_INFO, &Client::go_data("test-2", &[INFO_NAME]));
        let (infos, _) = c.option_replies(OPT_INFO);
        let name = infos.iter().find(|(_, d)| u16::from_be_bytes([d[0], d[1]]) == INFO_NAME);
        assert_eq!(&name.unwrap().1[2..], b"test-2");
        c.option(OPT_GO, &Client::go_data("test-9", &[]));
        assert_eq!(c.option_reply(OPT_GO).0, REP_ERR_UNKNOWN);
        let (size, _) = c.go("test-1");
        assert_eq!(size, 85 * BLOCK);
        // An unaligned write through the partition lands at its window's offset.
        assert_eq!(c.write_at(100, &pattern(5000, 3), 0), 0);
        assert_eq!(c.read_at(100, 5000), pattern(5000, 3));
        assert_ne!(c.call(0, CMD_READ, 85 * BLOCK - 512, 1024, &[]).error, 0, "past its end");
        c.disconnect();
        let mut last = Client::start(&env, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
        assert_eq!(last.go("test-2").0, 86 * BLOCK);
        assert_eq!(last.write_at(0, &pattern(4096, 9), 0), 0);
        last.disconnect();
    });
    assert_eq!(&disk[(85 * BLOCK + 100) as usize..][..5000], pattern(5000, 3).as_slice());
    assert_eq!(&disk[(170 * BLOCK) as usize..][..4096], pattern(4096, 9).as_slice());
}
