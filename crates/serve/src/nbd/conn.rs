//! One connection: the handshake, then the transmission phase.
//!
//! The handshake runs on the connection's thread with blocking I/O. For the transmission
//! phase the connection moves to its reactor, which serves it the way an SPDK target serves a
//! socket: a poller reads what the socket holds without blocking (many requests per `recv`),
//! parses the requests, submits each to the export on the same reactor, and the replies go out
//! from the same reactor in batches ([`Outbox`]). Any number of requests run at once (up to a
//! budget), replies go out in any order, matched by the client's cookie.
//!
//! The poller only runs while the connection is busy. When the socket has had nothing to read
//! for [`IDLE_POLL_NS`], the poller ends itself and the connection's thread, its doorbell,
//! blocks until the socket is readable again and then starts the poller anew. A busy
//! connection thus costs no thread hand-off per request and no system call beyond its `recv`s
//! and `sendmsg`s, and an idle one costs nothing.
//!
//! Why not a thread that reads requests and hands them over: the reactors of the real runtime
//! spin for a while whenever they run out of work, so a reactor that serves a connection
//! already takes a core while the connection is busy. A reading thread would need a second
//! one, and on a small machine it competes with the client for it; measured on 2 cores, the
//! reading thread cost a third of the IOPS (docs/nbd.md, "Design").
//!
//! The connection ends at NBD_CMD_DISC, at the end of the stream, on a bad request magic (the
//! stream is out of step: the spec says hang up), when a write's payload is too long to skip,
//! or when the server stops; in every case the requests already submitted complete and are
//! answered before the socket closes.

use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::{ExportError, Reply, Request};

use super::handshake::{handshake, Negotiated};
use super::io::{is_eof, InBuf, Sock};
use super::outbox::Outbox;
use super::proto::*;
use super::ConnCtx;

/// The read buffer: room for dozens of 4 KiB writes with their headers per system call.
const READ_BUFFER: usize = 256 << 10;
/// Payloads up to this size are read through the buffer (the request waits there until its
/// whole payload arrived); larger ones are read straight into a vector of their own.
const SMALL_PAYLOAD: usize = 8 << 10;
/// Reads and writes of at least this many bytes run on another reactor than the connection's
/// when there is one ([`Conn::reactor_for`]); smaller ones are not worth a hand-off.
const BULK_BYTES: u64 = 128 << 10;
/// Unanswered requests per connection before the connection stops reading (qemu keeps 16 in
/// flight, the kernel client up to 128, fio what its iodepth says).
const MAX_OUTSTANDING: usize = 512;
/// Unanswered payload bytes (writes' data, reads' replies) per connection before it stops
/// reading: bounds what one client can make the server hold in memory.
const MAX_OUTSTANDING_BYTES: usize = 256 << 20;
/// A write longer than [`MAX_PAYLOAD`] is refused with EINVAL, and its payload is read and
/// thrown away when it is at most this long, so a client that ignored the advertised maximum
/// keeps its connection; a longer one closes the connection after the reply (reading gigabytes
/// to stay in step with a client that far out of line buys nothing).
const MAX_SKIPPED_PAYLOAD: u64 = 256 << 20;
/// Reads of what a client sent before a stop (each up to the read buffer) before the
/// connection stops reading.
const MAX_READS_AFTER_STOP: usize = 64;
/// How long the poller keeps polling a socket that has nothing to read before it hands the
/// connection back to its doorbell thread: long enough to cover a client's turnaround between
/// a reply and its next request, so a busy connection stays on the reactor.
const IDLE_POLL_NS: u64 = 200_000;
/// Requests parsed per poller run, so one busy connection does not starve the rest of the
/// reactor.
const MAX_REQUESTS_PER_POLL: usize = 128;
/// How long a stopping connection waits for its reactor to give the connection back before it
/// closes anyway (the reactor may be the one running the shutdown).
const STOP_WAIT: Duration = Duration::from_millis(200);

/// Runs a connection to its end; problems are logged with the peer.
pub fn serve(ctx: Arc<ConnCtx>, sock: Sock) {
    let mut inb = InBuf::new(READ_BUFFER);
    match handshake(&ctx, &sock, &mut inb) {
        Ok(Some(neg)) => {
            let ctx = Arc::new(ctx.with_export(neg.export));
            if let Err(e) = transmission(&ctx, &sock, inb, neg) {
                ctx.log(&format!("connection failed: {e}"));
            }
        }
        Ok(None) => {}
        Err(e) => {
            if !(is_eof(&e) && ctx.stopping()) {
                ctx.log(&format!("handshake ended: {}", describe(&e)));
            }
        }
    }
    // The server keeps other handles on the socket (to shut it down at a stop), so dropping
    // ours would not close the connection: the client sees the end now.
    sock.shutdown(Shutdown::Both);
}

fn describe(e: &io::Error) -> String {
    if is_eof(e) {
        "the client closed the connection".into()
    } else {
        e.to_string()
    }
}

/// How reading ended.
#[derive(Debug)]
enum End {
    /// NBD_CMD_DISC, the end of the stream, or the server stopping: answer what is in flight.
    Clean,
    /// The stream cannot go on (bad magic, over-long payload, a read error); logged.
    Abort(String),
}

/// Why the poller gave the connection back to its thread.
#[derive(Debug)]
enum Pause {
    /// Nothing to read for a while: wait until the socket is readable.
    Idle,
    /// Too much unanswered: wait until replies went out.
    Budget,
    /// Reading is over.
    End(End),
}

/// The doorbell: whether the poller runs, and why it stopped.
#[derive(Default)]
struct Door {
    polling: bool,
    paused: Option<Pause>,
    /// The thread stopped waiting for the poller (shutdown): a late poller run ends at once.
    abandoned: bool,
}

/// What the reactor's poller works on.
struct Rx {
    inb: InBuf,
    /// A large write whose payload is still arriving.
    pending: Option<(Answer, RequestHeader, Vec<u8>)>,
    /// Bytes of a refused over-long write still to throw away.
    skip: u64,
    reads_after_stop: usize,
    last_data_ns: u64,
}

/// A connection in the transmission phase, shared by its thread and its reactor.
struct Conn {
    ctx: Arc<ConnCtx>,
    sock: Sock,
    neg: Negotiated,
    outbox: Arc<Outbox>,
    rx: Mutex<Rx>,
    door: Mutex<Door>,
    door_cv: Condvar,
    /// Round robin over the other reactors for bulk requests (see [`BULK_BYTES`]).
    next_bulk: AtomicUsize,
}

fn transmission(ctx: &Arc<ConnCtx>, sock: &Sock, inb: InBuf, neg: Negotiated) -> io::Result<()> {
    let outbox = Outbox::new(sock.try_clone()?);
    let writer = {
        let ob = outbox.clone();
        std::thread::Builder::new()
            .name(format!("nbd-write-{}", ctx.id))
            .spawn(move || ob.writer_thread())?
    };
    let conn = Arc::new(Conn {
        ctx: ctx.clone(),
        sock: sock.try_clone()?,
        neg,
        outbox: outbox.clone(),
        rx: Mutex::new(Rx { inb, pending: None, skip: 0, reads_after_stop: 0, last_data_ns: 0 }),
        door: Mutex::new(Door::default()),
        door_cv: Condvar::new(),
        next_bulk: AtomicUsize::new(0),
    });
    let end = conn.doorbell();
    // A write whose payload never arrived whole (the client went away, or the server stopped
    // in the middle of it) was admitted but is never answered: count it out, or waiting for
    // the replies below would never end. The poller is not running any more (it ended, or
    // returns at once once the connection is abandoned), so its state is ours.
    if let Some((_, h, _)) = conn.rx.lock().pending.take() {
        conn.outbox.forget(h.len as usize);
    }
    // No more requests: let the ones in flight complete and their replies go out, then close.
    sock.shutdown(Shutdown::Read);
    while !outbox.drain(Duration::from_secs(1)) {}
    outbox.close();
    let _ = writer.join();
    if let End::Abort(why) = end {
        ctx.log(&format!("closing the connection: {why}"));
    }
    Ok(())
}

impl Conn {
    /// The connection's thread during transmission: starts the poller whenever the socket has
    /// something to read (bytes the handshake read ahead count), and waits while it runs.
    fn doorbell(self: &Arc<Self>) -> End {
        let mut wait_for_data = self.rx.lock().inb.buffered().is_empty();
        loop {
            if wait_for_data {
                // Also returns at the end of the stream or after a stop's shutdown, which the
                // poller then finds out about.
                if let Err(e) = self.sock.wait_readable() {
                    return End::Abort(format!("read failed: {e}"));
                }
            }
            {
                let mut d = self.door.lock();
                d.polling = true;
                d.paused = None;
            }
            let me = self.clone();
            self.ctx.handle.send(
                self.ctx.reactor,
                Box::new(move || {
                    flashrig_runtime::register_poller(0, move || me.poll());
                }),
            );
            let mut d = self.door.lock();
            let since = Instant::now();
            while d.polling {
                self.door_cv.wait_for(&mut d, Duration::from_millis(50));
                let ending = self.ctx.stopping() || self.ctx.handle.stopped();
                if d.polling && ending && since.elapsed() > STOP_WAIT {
                    // The reactor is busy with the shutdown itself (or the runtime is gone):
                    // what was read is in flight or answered, and the rest is not read any
                    // more.
                    d.abandoned = true;
                    return End::Clean;
                }
            }
            match d.paused.take() {
                Some(Pause::End(end)) => return end,
                Some(Pause::Budget) => {
                    drop(d);
                    self.outbox.wait_for_room(MAX_OUTSTANDING / 2, MAX_OUTSTANDING_BYTES / 2);
                    wait_for_data = false;
                }
                Some(Pause::Idle) | None => wait_for_data = true,
            }
        }
    }

    /// Hands the connection back to its thread.
    fn pause(&self, why: Pause) -> flashrig_runtime::PollerStatus {
        let mut d = self.door.lock();
        d.polling = false;
        d.paused = Some(why);
        self.door_cv.notify_all();
        flashrig_runtime::PollerStatus::Done
    }

    /// The poller: reads and handles what the socket holds, on the connection's reactor.
    fn poll(&self) -> flashrig_runtime::PollerStatus {
        use flashrig_runtime::PollerStatus;
        if self.door.lock().abandoned {
            return PollerStatus::Done;
        }
        let mut rx = self.rx.lock();
        let now = flashrig_runtime::now_ns();
        if rx.last_data_ns == 0 {
            rx.last_data_ns = now;
        }
        let mut busy = false;
        for _ in 0..MAX_REQUESTS_PER_POLL {
            match self.step(&mut rx) {
                Ok(true) => busy = true,
                Ok(false) => break,
                Err(pause) => {
                    rx.last_data_ns = 0;
                    return self.pause(pause);
                }
            }
        }
        if busy {
            rx.last_data_ns = now;
            PollerStatus::Busy
        } else if now.saturating_sub(rx.last_data_ns) > IDLE_POLL_NS {
            rx.last_data_ns = 0;
            self.pause(Pause::Idle)
        } else {
            PollerStatus::Idle
        }
    }

    /// One step of reading: `Ok(true)` when it got somewhere, `Ok(false)` when the socket has
    /// nothing now, `Err` when the poller must hand the connection back.
    fn step(&self, rx: &mut Rx) -> Result<bool, Pause> {
        if let Some((ans, h, mut data)) = rx.pending.take() {
            let want = h.len as usize - data.len();
            return match self.sock.recv_append_nonblocking(&mut data, want) {
                Ok(0) => {
                    // Kept, so that the end of the connection counts it out.
                    rx.pending = Some((ans, h, data));
                    Err(mid_request())
                }
                Ok(_) if data.len() == h.len as usize => {
                    self.write(ans, h, data);
                    Ok(true)
                }
                Ok(_) => {
                    rx.pending = Some((ans, h, data));
                    Ok(true)
                }
                Err(e) => {
                    rx.pending = Some((ans, h, data));
                    self.read_error(e)
                }
            };
        }
        if rx.skip > 0 {
            let have = (rx.inb.buffered().len() as u64).min(rx.skip);
            rx.inb.consume(have as usize);
            rx.skip -= have;
            if rx.skip > 0 {
                return self.fill(rx);
            }
            return Ok(true);
        }
        if rx.inb.buffered().len() < REQUEST_BYTES {
            return self.fill(rx);
        }
        let mut raw = [0u8; REQUEST_BYTES];
        raw.copy_from_slice(&rx.inb.buffered()[..REQUEST_BYTES]);
        let Some(h) = parse_request(&raw) else {
            return Err(Pause::End(End::Abort(format!(
                "bad request magic {:#010x} (the stream is out of step)",
                be_u32(&raw)
            ))));
        };
        if h.kind == CMD_WRITE && h.len as usize <= SMALL_PAYLOAD {
            // A small write is handled once its whole payload is buffered.
            if rx.inb.buffered().len() < REQUEST_BYTES + h.len as usize {
                return self.fill(rx);
            }
        }
        let cost = match h.kind {
            CMD_WRITE | CMD_READ if h.len <= MAX_PAYLOAD => h.len as usize,
            _ => 0,
        };
        if !self.outbox.try_admit(cost, MAX_OUTSTANDING, MAX_OUTSTANDING_BYTES) {
            return Err(Pause::Budget);
        }
        rx.inb.consume(REQUEST_BYTES);
        self.request(rx, h)?;
        Ok(true)
    }

    /// Reads more into the buffer.
    fn fill(&self, rx: &mut Rx) -> Result<bool, Pause> {
        if self.ctx.stopping() {
            rx.reads_after_stop += 1;
            if rx.reads_after_stop > MAX_READS_AFTER_STOP {
                return Err(Pause::End(End::Clean));
            }
        }
        match rx.inb.fill_nonblocking(&self.sock) {
            Ok(0) if rx.inb.buffered().is_empty() && rx.skip == 0 => Err(Pause::End(End::Clean)),
            Ok(0) => Err(mid_request()),
            Ok(_) => Ok(true),
            Err(e) => self.read_error(e),
        }
    }

    fn read_error(&self, e: io::Error) -> Result<bool, Pause> {
        if e.kind() == io::ErrorKind::WouldBlock {
            Ok(false)
        } else {
            Err(Pause::End(End::Abort(format!("read failed: {e}"))))
        }
    }

    /// Handles one admitted request whose header was consumed.
    fn request(&self, rx: &mut Rx, h: RequestHeader) -> Result<(), Pause> {
        let ans = Answer {
            cookie: h.cookie,
            offset: h.offset,
            read: h.kind == CMD_READ,
            structured: self.neg.structured,
        };
        let fua = h.flags & CMD_FLAG_FUA != 0;
        // FUA is accepted on every command, as the spec asks (some clients set it on reads).
        let allowed = CMD_FLAG_FUA
            | match h.kind {
                CMD_READ if self.neg.structured => CMD_FLAG_DF,
                CMD_WRITE_ZEROES => CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
                CMD_BLOCK_STATUS => CMD_FLAG_REQ_ONE,
                _ => 0,
            };
        let bad_flags = h.flags & !allowed;
        let len = h.len as u64;
        match h.kind {
            CMD_WRITE => {
                if h.len > MAX_PAYLOAD {
                    let msg = format!("a write of {len} bytes is over the maximum {MAX_PAYLOAD}");
                    self.answer(ans.error(NBD_EINVAL, &msg));
                    if len > MAX_SKIPPED_PAYLOAD {
                        return Err(Pause::End(End::Abort(format!(
                            "{msg}, and too long to skip ({len} bytes)"
                        ))));
                    }
                    rx.skip = len;
                    return Ok(());
                }
                let n = h.len as usize;
                let have = rx.inb.buffered().len().min(n);
                let mut data = Vec::with_capacity(n);
                data.extend_from_slice(&rx.inb.buffered()[..have]);
                rx.inb.consume(have);
                if have < n {
                    rx.pending = Some((ans, h, data));
                } else {
                    self.write(ans, h, data);
                }
            }
            _ if bad_flags != 0 => self.answer(ans.error(NBD_EINVAL, &bad_flags_msg(bad_flags))),
            CMD_READ => {
                if h.len > MAX_PAYLOAD {
                    let msg = format!("a read of {len} bytes is over the maximum {MAX_PAYLOAD}");
                    self.answer(ans.error(NBD_EINVAL, &msg));
                } else {
                    self.submit(ans, len as usize, Request::Read { offset: h.offset, len });
                }
            }
            CMD_DISC => {
                // Not a request that is answered: it was admitted for nothing.
                self.outbox.forget(0);
                return Err(Pause::End(End::Clean));
            }
            CMD_FLUSH => {
                if h.offset != 0 || h.len != 0 {
                    self.answer(ans.error(NBD_EINVAL, "a flush has offset and length 0"));
                } else {
                    self.submit(ans, 0, Request::Flush);
                }
            }
            CMD_TRIM => self.submit(ans, 0, Request::Trim { offset: h.offset, len }),
            CMD_WRITE_ZEROES => {
                let allocate = h.flags & CMD_FLAG_NO_HOLE != 0;
                if h.flags & CMD_FLAG_FAST_ZERO != 0 && allocate && !self.ctx.export.read_only() {
                    // Zeros that must be allocated are written like data: not faster than a
                    // write, which is what NBD_CMD_FLAG_FAST_ZERO asks to know at once.
                    self.answer(ans.error(NBD_ENOTSUP, "allocated zeroes are not fast"));
                } else {
                    let req = Request::WriteZeroes { offset: h.offset, len, fua, allocate };
                    self.submit(ans, 0, req);
                }
            }
            CMD_CACHE => {
                // Everything is as close to the client as it gets; only the range is checked.
                if self.in_range(h.offset, len) {
                    self.answer(OutMsg::simple(h.cookie, 0, Vec::new()));
                } else {
                    self.answer(ans.error(NBD_EINVAL, "range beyond the end of the export"));
                }
            }
            CMD_BLOCK_STATUS => match self.neg.meta_context {
                None => self.answer(ans.error(NBD_EINVAL, "no metadata context was selected")),
                Some(_) if h.len == 0 || !self.in_range(h.offset, len) => {
                    let msg = "empty range or beyond the end of the export";
                    self.answer(ans.error(NBD_EINVAL, msg));
                }
                // Every byte of a stack is data as far as the protocol is concerned (trimmed
                // blocks read as zeros, but whether a range is trimmed is not tracked).
                Some(id) => self.answer(OutMsg::block_status(h.cookie, id, h.len, 0)),
            },
            kind => self.answer(ans.error(NBD_EINVAL, &format!("unknown command {kind}"))),
        }
        Ok(())
    }

    /// A write whose payload arrived, checked for flags, to the export.
    fn write(&self, ans: Answer, h: RequestHeader, data: Vec<u8>) {
        let bad_flags = h.flags & !CMD_FLAG_FUA;
        if bad_flags != 0 {
            let mut m = ans.error(NBD_EINVAL, &bad_flags_msg(bad_flags));
            m.cost = data.len();
            self.outbox.reply(m);
            return;
        }
        let fua = h.flags & CMD_FLAG_FUA != 0;
        self.submit(ans, data.len(), Request::Write { offset: h.offset, data, fua });
    }

    fn in_range(&self, offset: u64, len: u64) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.ctx.export.size_bytes())
    }

    /// Answers an admitted request that never reaches the stack (cost 0).
    fn answer(&self, msg: OutMsg) {
        self.outbox.reply(msg);
    }

    /// Hands an admitted request to the export on this reactor; the reply is queued from the
    /// completion.
    fn submit(&self, ans: Answer, cost: usize, req: Request) {
        let outbox = self.outbox.clone();
        let reactor = self.reactor_for(&req);
        self.ctx.export.submit(
            reactor,
            req,
            Box::new(move |r| {
                let mut m = ans.outcome(r);
                m.cost = cost;
                outbox.reply(m);
            }),
        );
    }
}

impl Conn {
    /// Where a request runs. Small requests stay on the connection's reactor (no hand-off).
    /// A bulk read or write goes to the other reactors in turn, so that copying its payload
    /// into or out of the stack runs beside the reactor that copies the next payload out of
    /// the socket, as a server with worker threads spreads the copies over the cores.
    fn reactor_for(&self, req: &Request) -> usize {
        let home = self.ctx.reactor;
        let n = self.ctx.export.reactors();
        let bulk = match req {
            Request::Read { len, .. } => *len >= BULK_BYTES,
            Request::Write { data, .. } => data.len() as u64 >= BULK_BYTES,
            _ => false,
        };
        if !bulk || n < 2 {
            return home;
        }
        let i = self.next_bulk.fetch_add(1, Ordering::Relaxed) % (n - 1);
        (home + 1 + i) % n
    }
}

fn mid_request() -> Pause {
    Pause::End(End::Abort("the client closed the connection mid-request".into()))
}

/// What a request needs besides its header to be answered.
#[derive(Clone, Copy)]
struct Answer {
    cookie: u64,
    offset: u64,
    read: bool,
    structured: bool,
}

impl Answer {
    fn error(&self, error: u32, msg: &str) -> OutMsg {
        if self.structured {
            // Reads say where the bad data starts: at the beginning, nothing of it is good.
            let at = self.read.then_some(self.offset);
            OutMsg::error(self.cookie, error, msg, at)
        } else {
            OutMsg::simple(self.cookie, error, Vec::new())
        }
    }

    fn outcome(&self, r: Result<Reply, ExportError>) -> OutMsg {
        match r {
            Ok(Reply::Data(d)) if self.structured => OutMsg::read_data(self.cookie, self.offset, d),
            Ok(Reply::Data(d)) => OutMsg::simple(self.cookie, 0, d),
            // A simple reply is allowed for anything but reads even with structured replies,
            // and it is the shorter one.
            Ok(Reply::Done) => OutMsg::simple(self.cookie, 0, Vec::new()),
            Err(e) => self.error(nbd_error(e.errno()), &e.to_string()),
        }
    }
}

fn bad_flags_msg(bad: u16) -> String {
    format!("command flags {bad:#x} are not valid for this command")
}
