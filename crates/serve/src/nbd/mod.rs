//! The NBD server: a device stack as an NBD export (newstyle, fixed), for qemu, nbdkit's tools
//! (nbdinfo, nbdcopy), fio's nbd engine and the kernel's nbd client.
//!
//! Threads: one accepts connections; each connection has a thread that does the handshake and
//! then only wakes its reactor when the socket becomes readable, and a writer thread that only
//! writes replies the reactor could not write at once. Connection *i* belongs to reactor *i*
//! mod the number of reactors: a poller there reads and parses its requests and submits them
//! through the [`Export`] ([`conn`]); replies are queued and written in batches by whoever gets
//! there first ([`outbox`]). docs/nbd.md has the design, the options and flags, the choices
//! where the spec leaves room, and the benchmark.
//!
//! Files: [`proto`] the wire format, [`handshake`] option haggling, [`conn`] the transmission
//! phase, [`outbox`] the reply path, [`io`] sockets and the read buffer; this file the
//! listener and the [`Frontend`].

mod conn;
mod handshake;
mod io;
mod outbox;
pub mod proto;

use std::net::Shutdown;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use flashrig_runtime::real::Handle;

use crate::{Export, Frontend};
use io::Sock;

/// Where the server listens.
#[derive(Clone, Debug)]
pub enum Listen {
    /// A Unix socket at this path (created; an existing socket file is replaced).
    Unix(PathBuf),
    /// TCP on this address (loopback by default).
    Tcp(std::net::SocketAddr),
}

/// The server's settings.
#[derive(Clone, Debug)]
pub struct NbdConfig {
    pub listen: Listen,
    /// The export's name (clients may also ask for "" and get this export).
    pub export_name: String,
    /// A human description sent with NBD_INFO_DESCRIPTION.
    pub description: String,
    /// Also export the device split into this many equal partitions, named
    /// `{export_name}-{i}` (0: none). CSAL's tenants are such partitions
    /// (crates/engines/src/partition.rs).
    pub partitions: u64,
}

/// How long `finish` waits for a connection to send its last replies before it cuts it off
/// (a client that stopped reading would otherwise hold the server forever).
const FINISH_GRACE: Duration = Duration::from_secs(10);

/// What every connection shares.
struct Shared {
    export: Arc<Export>,
    /// The partition exports, after the whole device's.
    partitions: Vec<Arc<Export>>,
    handle: Handle,
    cfg: NbdConfig,
    stopping: AtomicBool,
    conns: Mutex<Vec<ConnEntry>>,
}

struct ConnEntry {
    /// A handle on the socket, to shut it down from `stop` and `finish`.
    sock: Sock,
    thread: Option<JoinHandle<()>>,
    done: Arc<AtomicBool>,
}

/// What a connection's threads know of the server.
pub(crate) struct ConnCtx {
    shared: Arc<Shared>,
    export: Arc<Export>,
    /// The runtime, to start a connection's poller on its reactor.
    handle: Handle,
    cfg: Arc<NbdConfigView>,
    id: usize,
    reactor: usize,
    peer: String,
}

/// The parts of the configuration the handshake reads.
pub(crate) struct NbdConfigView {
    export_name: String,
    description: String,
}

impl ConnCtx {
    fn stopping(&self) -> bool {
        self.shared.stopping.load(Ordering::Acquire)
    }

    /// The export a name selects: the configured name and the default name "" select the
    /// whole device (0), a partition's name that partition (1 and on).
    fn find_export(&self, name: &[u8]) -> Option<usize> {
        if name.is_empty() || name == self.cfg.export_name.as_bytes() {
            return Some(0);
        }
        self.shared.partitions.iter().position(|p| p.name().as_bytes() == name).map(|i| i + 1)
    }

    /// Export `i` as [`find_export`](Self::find_export) numbers them.
    fn export_at(&self, i: usize) -> &Arc<Export> {
        if i == 0 {
            &self.shared.export
        } else {
            &self.shared.partitions[i - 1]
        }
    }

    /// Every export's name, the whole device's first.
    fn export_names(&self) -> Vec<String> {
        let mut names = vec![self.cfg.export_name.clone()];
        names.extend(self.shared.partitions.iter().map(|p| p.name().to_string()));
        names
    }

    /// This connection's context serving export `i` (chosen in the handshake).
    fn with_export(&self, i: usize) -> ConnCtx {
        ConnCtx {
            shared: self.shared.clone(),
            export: self.export_at(i).clone(),
            handle: self.handle.clone(),
            cfg: self.cfg.clone(),
            id: self.id,
            reactor: self.reactor,
            peer: self.peer.clone(),
        }
    }

    fn log(&self, msg: &str) {
        eprintln!("nbd: connection {} ({}): {msg}", self.id, self.peer);
    }
}

enum Listener {
    Tcp(std::net::TcpListener),
    Unix(UnixListener),
}

impl Listener {
    fn accept(&self) -> std::io::Result<(Sock, String)> {
        match self {
            Listener::Tcp(l) => {
                let (s, addr) = l.accept()?;
                // Replies are small and latency-bound; never hold one back for more.
                s.set_nodelay(true)?;
                Ok((Sock::Tcp(s), addr.to_string()))
            }
            Listener::Unix(l) => Ok((Sock::Unix(l.accept()?.0), "unix socket".into())),
        }
    }

    /// Wakes a thread blocked in `accept` (Linux answers it with EINVAL).
    fn shutdown(&self) {
        let _ = match self {
            Listener::Tcp(l) => socket2::SockRef::from(l).shutdown(Shutdown::Both),
            Listener::Unix(l) => socket2::SockRef::from(l).shutdown(Shutdown::Both),
        };
    }

    fn try_clone(&self) -> std::io::Result<Listener> {
        Ok(match self {
            Listener::Tcp(l) => Listener::Tcp(l.try_clone()?),
            Listener::Unix(l) => Listener::Unix(l.try_clone()?),
        })
    }
}

/// Binds a Unix socket at `path`, replacing a stale socket file; refuses a path that is not a
/// socket, or a socket another server still listens on.
fn bind_unix(path: &std::path::Path) -> std::io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("{}: another server is listening on this socket", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{}: exists and is not a socket", path.display()),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
    UnixListener::bind(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Percent-encodes `s` for a URI, keeping RFC 3986's unreserved characters and `keep`.
fn uri_escape(s: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || keep.contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Memory the allocator keeps at the top of each heap when it trims (glibc's M_TOP_PAD), and
/// the size from which it maps allocations of their own (M_MMAP_THRESHOLD, at glibc's
/// largest).
///
/// Every write's payload is a fresh vector that the export frees once the stack has it, on the
/// reactor that allocated it. With glibc's defaults a payload of a megabyte is mapped for
/// itself and unmapped when freed, or, once glibc raised its threshold, returned from the top
/// of the reactor's heap with `madvise`; either way the next payload faults its pages in again,
/// one by one. Measured: 1 MiB sequential writes over TCP ran at 1.25 GB/s with the defaults
/// and at 3.1 GB/s with payloads kept in the heap (docs/nbd.md, "Memory of large payloads").
const MALLOC_TOP_PAD: i32 = 64 << 20;
const MALLOC_MMAP_THRESHOLD: i32 = 32 << 20;

/// Keeps freed payload memory in the process (see [`MALLOC_TOP_PAD`]), once, unless the user
/// tuned glibc's allocator with its environment variables.
fn keep_payload_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let tuned = ["MALLOC_TOP_PAD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"]
                .iter()
                .any(|v| std::env::var_os(v).is_some());
            if !tuned {
                // SAFETY: mallopt takes two integers and changes tuning parameters of glibc's
                // allocator under the allocator's own lock; no memory of ours is involved.
                unsafe {
                    libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD);
                    libc::mallopt(libc::M_TOP_PAD, MALLOC_TOP_PAD);
                }
            }
        });
    }
}

/// Starts serving `export`: binds the socket and returns once it accepts connections. Called
/// inside the real runtime (on a reactor), whose reactors serve the connections.
pub fn start(export: Arc<Export>, cfg: NbdConfig) -> std::io::Result<Box<dyn Frontend>> {
    let handle = (flashrig_runtime::in_runtime())
        .then(flashrig_runtime::handle)
        .flatten()
        .ok_or_else(|| std::io::Error::other("the NBD server runs inside the real runtime"))?;
    keep_payload_memory();
    let name = uri_escape(&cfg.export_name, b"");
    let (listener, uri, socket_path) = match &cfg.listen {
        Listen::Unix(path) => {
            let l = bind_unix(path)?;
            let p = uri_escape(&path.to_string_lossy(), b"/");
            (Listener::Unix(l), format!("nbd+unix:///{name}?socket={p}"), Some(path.clone()))
        }
        Listen::Tcp(addr) => {
            let l = std::net::TcpListener::bind(addr)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{addr}: {e}")))?;
            // The bound address: port 0 asks the kernel for a free one.
            let local = l.local_addr()?;
            (Listener::Tcp(l), format!("nbd://{local}/{name}"), None)
        }
    };
    let partitions = if cfg.partitions > 0 {
        export
            .partitions(&format!("{}-", cfg.export_name), cfg.partitions)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?
    } else {
        Vec::new()
    };
    let shared = Arc::new(Shared {
        export,
        partitions,
        handle,
        cfg,
        stopping: AtomicBool::new(false),
        conns: Mutex::new(Vec::new()),
    });
    let view = Arc::new(NbdConfigView {
        export_name: shared.cfg.export_name.clone(),
        description: shared.cfg.description.clone(),
    });
    let waker = listener.try_clone()?;
    let accept = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("nbd-accept".into())
            .spawn(move || accept_loop(shared, view, listener))?
    };
    Ok(Box::new(NbdServer {
        uri,
        shared,
        waker,
        accept: Some(accept),
        socket_path,
        stopped: false,
        finished: false,
    }))
}

fn accept_loop(shared: Arc<Shared>, view: Arc<NbdConfigView>, listener: Listener) {
    let mut next_id = 0usize;
    loop {
        let accepted = listener.accept();
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        let (sock, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors, say: keep serving the connections there are, and
                // try again a little later rather than spin.
                eprintln!("nbd: accepting a connection failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let id = next_id;
        next_id += 1;
        let mut conns = shared.conns.lock();
        // Connections that ended are joined here, so the list does not grow without bound.
        conns.retain_mut(|c| {
            let done = c.done.load(Ordering::Acquire);
            if done {
                if let Some(t) = c.thread.take() {
                    let _ = t.join();
                }
            }
            !done
        });
        // Checked under the lock `stop` takes, so no connection slips past a stop.
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        let handle = match sock.try_clone() {
            Ok(h) => h,
            Err(e) => {
                eprintln!("nbd: connection {id} ({peer}): {e}");
                continue;
            }
        };
        let done = Arc::new(AtomicBool::new(false));
        let ctx = Arc::new(ConnCtx {
            shared: shared.clone(),
            export: shared.export.clone(),
            handle: shared.handle.clone(),
            cfg: view.clone(),
            id,
            reactor: id % shared.export.reactors(),
            peer,
        });
        let d = done.clone();
        let spawned = std::thread::Builder::new().name(format!("nbd-conn-{id}")).spawn(move || {
            conn::serve(ctx, sock);
            d.store(true, Ordering::Release);
        });
        match spawned {
            Ok(t) => conns.push(ConnEntry { sock: handle, thread: Some(t), done }),
            Err(e) => eprintln!("nbd: connection {id}: cannot start its thread: {e}"),
        }
    }
}

struct NbdServer {
    uri: String,
    shared: Arc<Shared>,
    /// The listening socket, to wake the accept thread.
    waker: Listener,
    accept: Option<JoinHandle<()>>,
    socket_path: Option<PathBuf>,
    stopped: bool,
    finished: bool,
}

impl Frontend for NbdServer {
    fn describe(&self) -> String {
        self.uri.clone()
    }

    fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let conns = self.shared.conns.lock();
        self.shared.stopping.store(true, Ordering::Release);
        self.waker.shutdown();
        // Readers see the end of their stream; what they already read still runs and is
        // answered, and new requests are not read.
        for c in conns.iter() {
            c.sock.shutdown(Shutdown::Read);
        }
    }

    fn finished(&self) -> bool {
        false
    }

    fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.stop();
        self.finished = true;
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let conns = std::mem::take(&mut *self.shared.conns.lock());
        let deadline = Instant::now() + FINISH_GRACE;
        for mut c in conns {
            while !c.done.load(Ordering::Acquire) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            // Whatever is still open now has a client that does not read its replies.
            c.sock.shutdown(Shutdown::Both);
            if let Some(t) = c.thread.take() {
                let _ = t.join();
            }
        }
        if let Some(p) = &self.socket_path {
            if std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket()) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

impl Drop for NbdServer {
    fn drop(&mut self) {
        self.finish();
    }
}
