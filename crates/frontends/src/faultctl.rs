//! Arming and disarming faults on a served stack: `flashrig serve ... --control SOCKET` listens
//! on a Unix socket, and `flashrig inject SOCKET list|arm|disarm` talks to it.
//!
//! The protocol is one JSON request per connection, one JSON reply, then the connection
//! closes:
//!
//! ```text
//! {"op":"list"}                                      -> {"ok":true,"faults":[...]}
//! {"op":"arm","layer":null,"fault":"kind = \"read-error\"\nlba = 5"}  -> {"ok":true,"id":3}
//! {"op":"disarm","layer":"inject","id":3}            -> {"ok":true}
//! {"ok":false,"error":"..."}                         (any request that cannot be done)
//! ```
//!
//! `fault` is a fault's table in the configuration's TOML form (docs/inject.md); `layer` names
//! the `inject` layer when the stack has more than one. The faults act from the next command
//! the layer sees: arming takes the layer's lock, as every command's fault decision does.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flashrig_blockdev::BlockDevice;
use flashrig_engines::inject::{FaultConfig, Inject};
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// A request to the control socket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    List,
    Arm { layer: Option<String>, fault: String },
    Disarm { layer: Option<String>, id: u64 },
}

/// One armed fault, as `list` reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmedFault {
    pub layer: String,
    pub id: u64,
    pub kind: String,
    pub fired: u64,
}

/// The reply to a request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<Vec<ArmedFault>>,
}

impl Reply {
    fn error(e: impl Into<String>) -> Reply {
        Reply { ok: false, error: Some(e.into()), ..Reply::default() }
    }
}

/// The fault layers of a served stack, by name.
pub struct FaultLayers(pub Vec<Arc<Inject>>);

impl FaultLayers {
    fn layer(&self, name: &Option<String>) -> Result<&Arc<Inject>, String> {
        let names = || {
            let n: Vec<&str> = self.0.iter().map(|l| l.info().name.as_str()).collect();
            n.join(", ")
        };
        match name {
            Some(n) => {
                self.0.iter().find(|l| &l.info().name == n).ok_or_else(|| {
                    format!("no inject layer named {n:?}; the stack has: {}", names())
                })
            }
            None if self.0.len() == 1 => Ok(&self.0[0]),
            None if self.0.is_empty() => Err("the served stack has no inject layer".into()),
            None => Err(format!("the stack has several inject layers; name one ({})", names())),
        }
    }

    /// Does what `req` asks.
    pub fn handle(&self, req: Request) -> Reply {
        match req {
            Request::List => {
                let faults = self
                    .0
                    .iter()
                    .flat_map(|l| {
                        l.armed().into_iter().map(|(id, spec, fired)| ArmedFault {
                            layer: l.info().name.clone(),
                            id,
                            kind: spec.kind.name().to_string(),
                            fired,
                        })
                    })
                    .collect();
                Reply { ok: true, faults: Some(faults), ..Reply::default() }
            }
            Request::Arm { layer, fault } => {
                let armed = self.layer(&layer).and_then(|l| {
                    let cfg: FaultConfig = toml::from_str(&fault)
                        .map_err(|e| format!("the fault: {}", e.message()))?;
                    let spec = cfg.to_spec(l.info().block_size)?;
                    l.arm(spec)
                });
                match armed {
                    Ok(id) => Reply { ok: true, id: Some(id), ..Reply::default() },
                    Err(e) => Reply::error(e),
                }
            }
            Request::Disarm { layer, id } => match self.layer(&layer) {
                Ok(l) if l.disarm(id) => Reply { ok: true, ..Reply::default() },
                Ok(l) => Reply::error(format!("no fault {id} is armed on {}", l.info().name)),
                Err(e) => Reply::error(e),
            },
        }
    }
}

/// A listening control socket; dropping it stops listening and removes the socket file.
pub struct ControlSocket {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How often the listener looks whether it should stop.
const POLL: Duration = Duration::from_millis(20);

impl ControlSocket {
    /// Listens on `path` (a stale socket file there is replaced) for requests to `layers`.
    pub fn listen(path: &Path, layers: FaultLayers) -> Result<ControlSocket, Error> {
        let at = |e: std::io::Error| Error::Input(format!("--control {}: {e}", path.display()));
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(Error::Input(format!(
                    "--control {}: exists and is not a socket",
                    path.display()
                )));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(Error::Input(format!(
                    "--control {}: another server is listening there",
                    path.display()
                )));
            }
            std::fs::remove_file(path).map_err(at)?;
        }
        let listener = UnixListener::bind(path).map_err(at)?;
        listener.set_nonblocking(true).map_err(at)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fault-control".into())
            .spawn(move || {
                while !flag.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((conn, _)) => answer(conn, &layers),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(POLL)
                        }
                        Err(e) => eprintln!("fault control: {e}"),
                    }
                }
            })
            .map_err(at)?;
        Ok(ControlSocket { path: path.to_path_buf(), stop, thread: Some(thread) })
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Longest request the socket reads (a fault's table is a few hundred bytes).
const MAX_REQUEST_BYTES: u64 = 64 * 1024;

fn answer(conn: UnixStream, layers: &FaultLayers) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let mut line = String::new();
    let read = BufReader::new((&conn).take(MAX_REQUEST_BYTES)).read_line(&mut line);
    let reply = match read {
        Ok(_) => match serde_json::from_str::<Request>(line.trim()) {
            Ok(req) => layers.handle(req),
            Err(e) => Reply::error(format!("not a request: {e}")),
        },
        Err(e) => Reply::error(format!("reading the request: {e}")),
    };
    let text = serde_json::to_string(&reply).expect("a reply serialises");
    let _ = (&conn).write_all(format!("{text}\n").as_bytes());
}

/// Sends `req` to the control socket at `path` and returns the reply; a reply that says the
/// request could not be done is an input error (exit status 2).
pub fn request(path: &Path, req: &Request) -> Result<Reply, Error> {
    let mut conn = UnixStream::connect(path).map_err(|e| {
        Error::Input(format!("{}: no flashrig control socket there ({e})", path.display()))
    })?;
    let text = serde_json::to_string(req).expect("a request serialises");
    conn.write_all(format!("{text}\n").as_bytes())
        .map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    let mut line = String::new();
    BufReader::new(conn)
        .read_line(&mut line)
        .map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    let reply: Reply = serde_json::from_str(line.trim())
        .map_err(|e| Error::Io(format!("{}: not a control reply ({e})", path.display())))?;
    match reply.ok {
        true => Ok(reply),
        false => Err(Error::Input(reply.error.unwrap_or_else(|| "refused".into()))),
    }
}
