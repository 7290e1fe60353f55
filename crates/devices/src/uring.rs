//! io_uring for file devices on the real runtime: one ring per reactor thread, drained by a
//! poller, as SPDK's uring bdev does.
//!
//! A command's future owns its I/O buffer (an aligned bounce buffer, which O_DIRECT needs
//! anyway) and a handle on the file until the kernel has completed it. If the future is
//! dropped first, the operation is marked abandoned and its buffer is freed when its completion
//! arrives, never earlier; a ring that is torn down waits for every operation it still has in
//! the kernel. That is what makes the one `unsafe` call (pushing a submission entry that holds
//! raw pointers) sound.
//!
//! Each entry is submitted as soon as it is pushed (batching the entries of a reactor
//! iteration measured 11% slower here, see docs/benchmarks.md). The ring is single-issuer with
//! deferred task work, so the kernel posts completions when the poller enters it after seeing
//! the `IORING_SQ_TASKRUN` flag, not by interrupting the reactor. The poller is registered while
//! operations are outstanding and unregisters itself when the ring is idle, so an idle reactor
//! can still sleep.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::io::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use flashrig_runtime::{register_poller, PollerStatus};
use io_uring::{opcode, squeue, types, IoUring};

use crate::aligned::AlignedBuf;

/// Submission-queue entries per ring. A reactor rarely has more commands in flight than a
/// queue depth of a few hundred; when the queue is full, entries are submitted at once.
const RING_ENTRIES: u32 = 256;

enum OpState {
    InFlight,
    Done(i32),
    /// Its future was dropped; the slot is freed when the completion arrives.
    Abandoned,
}

struct Op {
    state: OpState,
    waker: Option<Waker>,
    /// The memory the kernel reads or writes; must outlive the operation.
    buf: Option<AlignedBuf>,
    /// Keeps the descriptor open until the kernel is done with it.
    _file: Arc<File>,
}

/// One reactor thread's ring.
pub(crate) struct Ring {
    ring: RefCell<IoUring>,
    ops: RefCell<Vec<Option<Op>>>,
    free: RefCell<Vec<usize>>,
    in_flight: Cell<usize>,
    unsubmitted: Cell<bool>,
    poller_registered: Cell<bool>,
}

thread_local! {
    static RING: RefCell<Option<Result<Rc<Ring>, String>>> = const { RefCell::new(None) };
}

/// This thread's ring, created on first use; an error when the kernel refuses io_uring (a
/// seccomp profile, an old kernel), so the caller can fall back to positioned I/O.
pub(crate) fn ring() -> Result<Rc<Ring>, String> {
    RING.with(|r| {
        r.borrow_mut()
            .get_or_insert_with(|| match new_ring() {
                Ok(ring) => Ok(Rc::new(Ring {
                    ring: RefCell::new(ring),
                    ops: RefCell::default(),
                    free: RefCell::default(),
                    in_flight: Cell::new(0),
                    unsubmitted: Cell::new(false),
                    poller_registered: Cell::new(false),
                })),
                Err(e) => Err(format!("io_uring is not available: {e}")),
            })
            .clone()
    })
}

/// A ring for one thread: single issuer with deferred task work where the kernel has them
/// (6.1+), so completions are posted when the poller asks (it sees the `IORING_SQ_TASKRUN`
/// flag) instead of by interrupting the reactor; cooperative task work on 5.19+; plain
/// otherwise. Deferred task work posts completions sooner for a busy-polling reactor that
/// rarely enters the kernel: see docs/benchmarks.md for what each setup measured.
fn new_ring() -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        .build(RING_ENTRIES)
        .or_else(|_| {
            IoUring::builder().setup_coop_taskrun().setup_taskrun_flag().build(RING_ENTRIES)
        })
        .or_else(|_| IoUring::new(RING_ENTRIES))
}

/// Whether this process may use io_uring (probed once per thread).
pub fn available() -> bool {
    ring().is_ok()
}

impl Ring {
    fn submit_pending(&self) -> io::Result<()> {
        // Enter the kernel when there is something to submit, or completions waiting for us to
        // run their task work (IORING_SQ_TASKRUN).
        let taskrun = self.ring.borrow_mut().submission().taskrun();
        if self.unsubmitted.replace(false) || taskrun {
            let ring = self.ring.borrow();
            loop {
                match ring.submit() {
                    Ok(_) => break,
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    // The completion queue is full: reap first, the poller will try again.
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        self.unsubmitted.set(true);
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Hands completions to their operations; returns how many arrived.
    fn reap(&self) -> usize {
        let mut done = Vec::new();
        {
            let mut ring = self.ring.borrow_mut();
            for cqe in ring.completion() {
                done.push((cqe.user_data() as usize, cqe.result()));
            }
        }
        let mut wake = Vec::with_capacity(done.len());
        {
            let mut ops = self.ops.borrow_mut();
            for &(slot, res) in &done {
                let op = ops[slot].as_mut().expect("a completion names a live operation");
                if matches!(op.state, OpState::Abandoned) {
                    ops[slot] = None;
                    self.free.borrow_mut().push(slot);
                } else {
                    op.state = OpState::Done(res);
                    wake.extend(op.waker.take());
                }
                self.in_flight.set(self.in_flight.get() - 1);
            }
        }
        for w in wake {
            w.wake();
        }
        done.len()
    }

    fn poll(&self) -> PollerStatus {
        if let Err(e) = self.submit_pending() {
            // A submission failure the kernel will not explain per operation: fail them all
            // rather than leave their tasks waiting forever.
            self.fail_all(e.raw_os_error().unwrap_or(libc::EIO));
        }
        let reaped = self.reap();
        if self.in_flight.get() == 0 {
            self.poller_registered.set(false);
            PollerStatus::Done
        } else if reaped > 0 {
            PollerStatus::Busy
        } else {
            PollerStatus::Idle
        }
    }

    fn fail_all(&self, errno: i32) {
        let mut ops = self.ops.borrow_mut();
        for op in ops.iter_mut().flatten() {
            if matches!(op.state, OpState::InFlight) {
                op.state = OpState::Done(-errno);
                if let Some(w) = op.waker.take() {
                    w.wake();
                }
            }
        }
    }

    /// Submits queued entries until the submission queue has a free entry, reaping
    /// completions when the kernel asks for room in the completion queue first.
    fn make_room(&self) -> io::Result<()> {
        while self.ring.borrow_mut().submission().is_full() {
            self.unsubmitted.set(true);
            self.submit_pending()?;
            if self.unsubmitted.get() {
                self.reap();
            }
        }
        Ok(())
    }

    fn push(self: &Rc<Self>, entry: squeue::Entry, buf: AlignedBuf, file: Arc<File>) -> OpFuture {
        let op = Op { state: OpState::InFlight, waker: None, buf: Some(buf), _file: file };
        let slot = {
            let mut ops = self.ops.borrow_mut();
            match self.free.borrow_mut().pop() {
                Some(i) => {
                    ops[i] = Some(op);
                    i
                }
                None => {
                    ops.push(Some(op));
                    ops.len() - 1
                }
            }
        };
        let entry = entry.user_data(slot as u64);
        if let Err(e) = self.make_room() {
            // Leave the slot to be freed by the future, which completes at once with the error.
            self.ops.borrow_mut()[slot].as_mut().expect("just inserted").state =
                OpState::Done(-e.raw_os_error().unwrap_or(libc::EIO));
            return OpFuture { ring: self.clone(), slot, finished: false };
        }
        {
            let mut ring = self.ring.borrow_mut();
            // SAFETY: the entry points at the buffer held by `ops[slot]` and at a descriptor
            // kept open by the `Arc<File>` beside it; neither is released before the
            // operation's completion has been reaped (an abandoned operation keeps both until
            // then, and dropping the ring waits for all completions).
            let pushed = unsafe { ring.submission().push(&entry) };
            pushed.expect("the submission queue has room after submitting");
        }
        self.unsubmitted.set(true);
        self.in_flight.set(self.in_flight.get() + 1);
        // Submit at once, as fio does by default: on the disks measured here this beat
        // batching one reactor iteration's entries into one `io_uring_enter` by 11% at queue
        // depth 32 (docs/benchmarks.md), because batches reach the device in bursts. A failure
        // is retried by the poller.
        let _ = self.submit_pending();
        if !self.poller_registered.replace(true) {
            let me = self.clone();
            register_poller(0, move || me.poll());
        }
        OpFuture { ring: self.clone(), slot, finished: false }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // The kernel may still write into buffers of operations in flight: wait for them all
        // before the buffers are freed with `ops`.
        while self.in_flight.get() > 0 {
            let _ = self.ring.borrow().submit_and_wait(1);
            self.reap();
        }
    }
}

/// The completion of one operation: its result (bytes or `-errno`) and its buffer back.
struct OpFuture {
    ring: Rc<Ring>,
    slot: usize,
    finished: bool,
}

impl Future for OpFuture {
    type Output = (i32, AlignedBuf);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut ops = self.ring.ops.borrow_mut();
        let op = ops[self.slot].as_mut().expect("our operation");
        match op.state {
            OpState::Done(res) => {
                let buf = op.buf.take().expect("buffer present until completion");
                ops[self.slot] = None;
                drop(ops);
                self.ring.free.borrow_mut().push(self.slot);
                self.finished = true;
                Poll::Ready((res, buf))
            }
            _ => {
                op.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Drop for OpFuture {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut ops = self.ring.ops.borrow_mut();
        let op = ops[self.slot].as_mut().expect("our operation");
        match op.state {
            // Completed but never collected: free the slot now.
            OpState::Done(_) => {
                ops[self.slot] = None;
                drop(ops);
                self.ring.free.borrow_mut().push(self.slot);
            }
            _ => op.state = OpState::Abandoned,
        }
    }
}

fn check(res: i32) -> io::Result<usize> {
    if res < 0 {
        Err(io::Error::from_raw_os_error(-res))
    } else {
        Ok(res as usize)
    }
}

/// Reads `buf.len()` bytes at `offset`, resubmitting the rest after a short read.
pub(crate) async fn read_exact_at(
    ring: &Rc<Ring>,
    file: &Arc<File>,
    buf: &mut [u8],
    offset: u64,
) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let len = buf.len() - done;
        let mut bounce = AlignedBuf::new(len);
        let entry = opcode::Read::new(
            types::Fd(file.as_raw_fd()),
            bounce.bytes_mut().as_mut_ptr(),
            len as u32,
        )
        .offset(offset + done as u64)
        .build();
        let (res, bounce) = ring.push(entry, bounce, file.clone()).await;
        let n = check(res)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"));
        }
        buf[done..done + n].copy_from_slice(&bounce.bytes()[..n]);
        done += n;
    }
    Ok(())
}

/// Writes all of `data` at `offset`, resubmitting the rest after a short write.
pub(crate) async fn write_all_at(
    ring: &Rc<Ring>,
    file: &Arc<File>,
    data: &[u8],
    offset: u64,
) -> io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        let len = data.len() - done;
        let mut bounce = AlignedBuf::new(len);
        bounce.bytes_mut().copy_from_slice(&data[done..]);
        let entry =
            opcode::Write::new(types::Fd(file.as_raw_fd()), bounce.bytes().as_ptr(), len as u32)
                .offset(offset + done as u64)
                .build();
        let (res, _) = ring.push(entry, bounce, file.clone()).await;
        let n = check(res)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "the device took no bytes"));
        }
        done += n;
    }
    Ok(())
}

/// `fdatasync` through the ring, so a flush does not stall the reactor's other work.
pub(crate) async fn fdatasync(ring: &Rc<Ring>, file: &Arc<File>) -> io::Result<()> {
    let entry =
        opcode::Fsync::new(types::Fd(file.as_raw_fd())).flags(types::FsyncFlags::DATASYNC).build();
    let (res, _) = ring.push(entry, AlignedBuf::new(0), file.clone()).await;
    check(res).map(|_| ())
}
