//! The reply path of one connection: a queue of replies, written to the socket in batches by
//! whoever gets there first, never blocking a reactor.
//!
//! Replies are produced on the connection's reactor: by the poller (a request refused before it
//! reached the stack) and by completions (usually on the same reactor, though an export may
//! call back from elsewhere, or at once when it is closed). Whoever queues a reply into an idle
//! outbox becomes its writer:
//!
//! - on a reactor, the write is deferred to a small task spawned on the same reactor; tasks run
//!   in order, so the replies of every request that completes in the same turn of the reactor
//!   go out together in one `sendmsg` (or at once when [`MAX_DEFERRED_REPLIES`] are waiting);
//! - on any other thread, it writes at once.
//!
//! Either writes with `MSG_DONTWAIT`: what the socket does not take at once (a client that
//! reads slowly, a full socket buffer) is handed to the connection's writer thread, which
//! blocks on the socket for as long as it takes. While a writer is busy, new replies only join
//! the queue; the writer takes them before it lets go.
//!
//! The outbox also counts the requests of its connection that have not been answered yet (and
//! the bytes they hold), which bounds the memory a client can make the server hold, and tells
//! the connection's thread when there is room again and when the connection has drained.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::Shutdown;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::io::Sock;
use super::proto::OutMsg;

/// Slices per `sendmsg` (Linux's IOV_MAX is 1024; each reply takes at most two).
const MAX_IOV: usize = 1024;
/// Replies a reactor lets wait for the end of its turn before it writes them at once: enough
/// to fill a `sendmsg`, few enough that the client gets the first replies early and keeps its
/// queue full (measured: 8 to 32 all within the noise at 4 KiB, QD32).
const MAX_DEFERRED_REPLIES: usize = 16;
/// Batches a non-blocking writer sends before it hands further replies to the writer thread,
/// so a reactor is not kept writing by a steady stream of replies from other reactors.
const MAX_NONBLOCKING_ROUNDS: usize = 4;

#[derive(Default)]
struct State {
    queue: VecDeque<OutMsg>,
    /// Someone is writing to the socket (only one may: replies must not interleave).
    busy: bool,
    /// A flush task is spawned on a reactor and has not run yet.
    scheduled: bool,
    /// The writer thread is asked to write what is queued.
    handoff: bool,
    /// A write failed: the client is gone. Replies are dropped from now on.
    broken: bool,
    /// The writer thread ends once nothing is left to write.
    closing: bool,
    /// Requests read and not answered on the wire yet, and the payload bytes they hold.
    outstanding: usize,
    outstanding_bytes: usize,
}

/// The reply side of a connection.
pub struct Outbox {
    sock: Sock,
    state: Mutex<State>,
    /// Wakes the writer thread.
    writer_cv: Condvar,
    /// Wakes the connection's thread waiting for replies to go out (budget, drain).
    reader_cv: Condvar,
}

impl Outbox {
    pub fn new(sock: Sock) -> Arc<Outbox> {
        Arc::new(Outbox {
            sock,
            state: Mutex::new(State::default()),
            writer_cv: Condvar::new(),
            reader_cv: Condvar::new(),
        })
    }

    /// Counts a request in if there is room: at most `max_requests` and `max_bytes` (unless
    /// nothing at all is outstanding) unanswered. The reactor's poller stops reading when
    /// there is none.
    pub fn try_admit(&self, bytes: usize, max_requests: usize, max_bytes: usize) -> bool {
        let mut st = self.state.lock();
        if st.outstanding > 0
            && (st.outstanding >= max_requests || st.outstanding_bytes + bytes > max_bytes)
        {
            return false;
        }
        st.outstanding += 1;
        st.outstanding_bytes += bytes;
        true
    }

    /// Counts out an admitted request that gets no reply (NBD_CMD_DISC).
    pub fn forget(&self, bytes: usize) {
        let mut st = self.state.lock();
        Self::account(&mut st, 1, bytes);
        self.reader_cv.notify_all();
    }

    /// Waits until at most `requests` and `bytes` are unanswered, or the connection broke.
    pub fn wait_for_room(&self, requests: usize, bytes: usize) {
        let mut st = self.state.lock();
        while !st.broken && (st.outstanding > requests || st.outstanding_bytes > bytes) {
            self.rescue(&mut st);
            self.reader_cv.wait_for(&mut st, Duration::from_millis(10));
        }
    }

    /// Queues the answer to an admitted request (its `cost` is the bytes it was admitted
    /// with).
    pub fn reply(self: &Arc<Self>, msg: OutMsg) {
        let mut st = self.state.lock();
        if st.broken {
            Self::account(&mut st, 1, msg.cost);
            self.reader_cv.notify_all();
            return;
        }
        st.queue.push_back(msg);
        if st.busy || st.handoff {
            return;
        }
        if st.scheduled && st.queue.len() < MAX_DEFERRED_REPLIES {
            return;
        }
        if flashrig_runtime::in_runtime() && st.queue.len() < MAX_DEFERRED_REPLIES {
            st.scheduled = true;
            drop(st);
            let me = self.clone();
            drop(flashrig_runtime::spawn(async move {
                let mut st = me.state.lock();
                st.scheduled = false;
                if st.busy || st.handoff || st.queue.is_empty() {
                    return;
                }
                st.busy = true;
                drop(st);
                me.write_nonblocking();
            }));
        } else {
            st.busy = true;
            drop(st);
            self.write_nonblocking();
        }
    }

    fn account(st: &mut State, n: usize, bytes: usize) {
        st.outstanding -= n;
        st.outstanding_bytes -= bytes;
    }

    /// Writes what is queued without blocking; the caller holds `busy`. Whatever the socket
    /// does not take is handed to the writer thread.
    fn write_nonblocking(&self) {
        let mut rounds = 0;
        loop {
            let mut st = self.state.lock();
            if st.queue.is_empty() {
                st.busy = false;
                if st.closing {
                    // The writer thread may be waiting for us to finish before it ends.
                    self.writer_cv.notify_one();
                }
                return;
            }
            if rounds == MAX_NONBLOCKING_ROUNDS {
                st.busy = false;
                st.handoff = true;
                self.writer_cv.notify_one();
                return;
            }
            let mut batch = std::mem::take(&mut st.queue);
            drop(st);
            let r = self.send(&mut batch, false);
            let mut st = self.state.lock();
            match r {
                Ok((n, bytes)) => {
                    Self::account(&mut st, n, bytes);
                    self.reader_cv.notify_all();
                    if !batch.is_empty() {
                        // The socket is full: the rest goes first, from the writer thread.
                        batch.append(&mut st.queue);
                        st.queue = batch;
                        st.busy = false;
                        st.handoff = true;
                        self.writer_cv.notify_one();
                        return;
                    }
                }
                Err(_) => {
                    self.break_down(&mut st, batch);
                    return;
                }
            }
            rounds += 1;
        }
    }

    /// Sends from the front of `batch` until it is empty or (non-blocking) the socket is full;
    /// removes the replies fully sent and returns how many and their cost.
    fn send(&self, batch: &mut VecDeque<OutMsg>, blocking: bool) -> io::Result<(usize, usize)> {
        let mut done = (0, 0);
        while !batch.is_empty() {
            let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity((batch.len() * 2).min(MAX_IOV));
            for m in batch.iter() {
                if iov.len() + 2 > MAX_IOV {
                    break;
                }
                let (h, b) = m.unsent();
                if !h.is_empty() {
                    iov.push(IoSlice::new(h));
                }
                if !b.is_empty() {
                    iov.push(IoSlice::new(b));
                }
            }
            let r = if blocking {
                self.sock.send_blocking(&iov)
            } else {
                self.sock.send_nonblocking(&iov)
            };
            drop(iov);
            let mut n = match r {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if !blocking && e.kind() == io::ErrorKind::WouldBlock => return Ok(done),
                Err(e) => return Err(e),
            };
            while n > 0 {
                let m = batch.front_mut().expect("sent bytes belong to queued replies");
                let left = m.wire_len() - m.sent;
                if n >= left {
                    n -= left;
                    done.0 += 1;
                    done.1 += m.cost;
                    batch.pop_front();
                } else {
                    m.sent += n;
                    n = 0;
                }
            }
        }
        Ok(done)
    }

    /// The client is gone: drop every reply, wake everyone, and shut the socket so reading
    /// stops too.
    fn break_down(&self, st: &mut State, batch: VecDeque<OutMsg>) {
        st.broken = true;
        st.busy = false;
        st.handoff = false;
        for m in batch.into_iter().chain(std::mem::take(&mut st.queue)) {
            Self::account(st, 1, m.cost);
        }
        self.sock.shutdown(Shutdown::Both);
        self.reader_cv.notify_all();
        self.writer_cv.notify_all();
    }

    /// Replies queued behind a flush task whose reactor is not running it (blocked, or the
    /// runtime ending) are handed to the writer thread.
    fn rescue(&self, st: &mut State) {
        if !st.queue.is_empty() && !st.busy && !st.handoff {
            st.handoff = true;
            self.writer_cv.notify_one();
        }
    }

    /// The writer thread: writes, blocking, whatever is handed to it, until [`Outbox::close`].
    pub fn writer_thread(&self) {
        let mut st = self.state.lock();
        loop {
            if st.handoff && !st.busy && !st.broken {
                if st.queue.is_empty() {
                    st.handoff = false;
                    continue;
                }
                st.busy = true;
                let mut batch = std::mem::take(&mut st.queue);
                drop(st);
                let r = self.send(&mut batch, true);
                st = self.state.lock();
                match r {
                    Ok((n, bytes)) => {
                        Self::account(&mut st, n, bytes);
                        st.busy = false;
                        self.reader_cv.notify_all();
                    }
                    Err(_) => self.break_down(&mut st, batch),
                }
                continue;
            }
            if st.closing && !st.busy && (st.queue.is_empty() || st.broken) {
                return;
            }
            self.writer_cv.wait(&mut st);
        }
    }

    /// Waits until every admitted request is answered on the wire (or the connection broke),
    /// for at most `timeout`; returns whether it drained.
    pub fn drain(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.state.lock();
        while st.outstanding > 0 && !st.broken {
            self.rescue(&mut st);
            if Instant::now() >= deadline {
                return false;
            }
            self.reader_cv.wait_for(&mut st, Duration::from_millis(10));
        }
        true
    }

    /// Lets the writer thread end once nothing is left to write.
    pub fn close(&self) {
        let mut st = self.state.lock();
        st.closing = true;
        self.rescue(&mut st);
        self.writer_cv.notify_all();
    }
}
