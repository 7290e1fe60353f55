//! The real runtime: one OS thread per reactor, lock-free queues between them, the real clock.
//!
//! Each reactor thread loops: deliver messages, run ready tasks, fire due timers, run pollers.
//! When it has found nothing to do for a while it parks until its next timer, and senders only
//! unpark a reactor that has said it is going to sleep, so a busy pair of reactors exchanges
//! messages without system calls.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::task::Waker;
use std::thread::Thread;
use std::time::{Duration, Instant};

use async_task::Runnable;
use crossbeam_queue::SegQueue;
use parking_lot::Mutex;

use crate::context::{self, Ctx};
use crate::slots::Slots;
use crate::{JoinHandle, Message, PollerId, PollerStatus, ReactorId, ReactorStats, RunStats};

/// Idle loop iterations before a reactor parks. Spinning briefly keeps message latency low
/// when the peer answers quickly, without burning a core when the reactor is really idle.
const IDLE_SPINS_BEFORE_PARK: u32 = 2_000;
/// A timer closer than this is waited for by spinning, because a park can oversleep by tens of
/// microseconds.
const SPIN_FOR_TIMER_NS: u64 = 50_000;
/// Ready tasks run per loop iteration before messages and timers get a turn.
const TASK_BATCH: usize = 256;

struct ReactorShared {
    inbox: SegQueue<Message>,
    wakes: SegQueue<Runnable<ReactorId>>,
    thread: OnceLock<Thread>,
    sleeping: AtomicBool,
    stats: Mutex<ReactorStats>,
}

struct Shared {
    reactors: Vec<ReactorShared>,
    start: Instant,
    stop: AtomicBool,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn notify(&self, reactor: ReactorId) {
        let r = &self.reactors[reactor];
        // Pairs with the SeqCst store of `sleeping` in the reactor loop: either the sleeper
        // sees our queue push, or we see its flag and unpark it.
        std::sync::atomic::fence(Ordering::SeqCst);
        if r.sleeping.load(Ordering::SeqCst) {
            if let Some(t) = r.thread.get() {
                t.unpark();
            }
        }
    }
}

thread_local! {
    /// The reactor this thread runs (usize::MAX on threads that are not reactors) and its
    /// local ready queue, so a wake-up from the reactor's own thread needs no atomics.
    static THIS_REACTOR: Cell<ReactorId> = const { Cell::new(usize::MAX) };
    static LOCAL_READY: RefCell<VecDeque<Runnable<ReactorId>>> = const { RefCell::new(VecDeque::new()) };
}

fn schedule(shared: &Arc<Shared>, runnable: Runnable<ReactorId>) {
    let target = *runnable.metadata();
    if THIS_REACTOR.with(|c| c.get()) == target {
        // While the reactor's thread exits, the queue's destructor drops the tasks left in it,
        // and dropping one may wake another (a lock handed on): that task has nowhere to run
        // any more and is dropped with the closure.
        let _ = LOCAL_READY.try_with(|q| q.borrow_mut().push_back(runnable));
    } else {
        shared.reactors[target].wakes.push(runnable);
        shared.notify(target);
    }
}

struct Poller {
    period_ns: u64,
    next_ns: u64,
    poll: Box<dyn FnMut() -> PollerStatus>,
}

/// A handle on a running real runtime for threads that are not reactors: the frontends' network
/// and FUSE threads use it to hand requests to reactors as messages. Obtained inside the
/// runtime with [`crate::handle`]. Messages sent after the runtime stopped are dropped.
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

impl Handle {
    pub fn num_reactors(&self) -> usize {
        self.shared.reactors.len()
    }

    /// Sends `msg` to run on `reactor`. From one thread to one reactor, messages arrive in
    /// order.
    pub fn send(&self, reactor: ReactorId, msg: Message) {
        assert!(
            reactor < self.num_reactors(),
            "message sent to reactor {reactor}, which does not exist"
        );
        self.shared.reactors[reactor].inbox.push(msg);
        self.shared.notify(reactor);
    }

    /// Whether the runtime has stopped (its main task ended).
    pub fn stopped(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }
}

/// One reactor's thread-local state.
pub(crate) struct Local {
    id: ReactorId,
    shared: Arc<Shared>,
    timers: RefCell<BinaryHeap<Reverse<(u64, u64)>>>,
    timer_wakers: RefCell<std::collections::HashMap<u64, Waker>>,
    timer_seq: Cell<u64>,
    pollers: RefCell<Slots<Poller>>,
}

impl Local {
    pub(crate) fn num_reactors(&self) -> usize {
        self.shared.reactors.len()
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.shared.now_ns()
    }

    pub(crate) fn add_timer(&self, at_ns: u64, waker: Waker) {
        let seq = self.timer_seq.get();
        self.timer_seq.set(seq + 1);
        self.timers.borrow_mut().push(Reverse((at_ns, seq)));
        self.timer_wakers.borrow_mut().insert(seq, waker);
    }

    pub(crate) fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        let shared = self.shared.clone();
        let (runnable, task) = async_task::Builder::new()
            .metadata(self.id)
            .spawn_local(move |_| future, move |r| schedule(&shared, r));
        runnable.schedule();
        JoinHandle::new(task)
    }

    pub(crate) fn send(&self, reactor: ReactorId, msg: Message) {
        assert!(
            reactor < self.num_reactors(),
            "message sent to reactor {reactor}, which does not exist"
        );
        self.shared.reactors[reactor].inbox.push(msg);
        if reactor != self.id {
            self.shared.notify(reactor);
        }
    }

    pub(crate) fn handle(&self) -> Handle {
        Handle { shared: self.shared.clone() }
    }

    pub(crate) fn register_poller(
        &self,
        period_ns: u64,
        poll: Box<dyn FnMut() -> PollerStatus>,
    ) -> PollerId {
        let next_ns = self.now_ns() + period_ns;
        PollerId(self.pollers.borrow_mut().insert(Poller { period_ns, next_ns, poll }))
    }

    /// Fires due timers; returns whether any fired and the next deadline.
    fn fire_timers(&self, now: u64) -> (bool, Option<u64>) {
        let mut fired = false;
        loop {
            let top = self.timers.borrow().peek().map(|r| r.0);
            match top {
                Some((at, seq)) if at <= now => {
                    self.timers.borrow_mut().pop();
                    let w = self.timer_wakers.borrow_mut().remove(&seq);
                    if let Some(w) = w {
                        w.wake();
                    }
                    fired = true;
                }
                Some((at, _)) => return (fired, Some(at)),
                None => return (fired, None),
            }
        }
    }

    /// Runs the pollers that are due; returns whether any reported work and the next deadline.
    fn run_pollers(&self, now: u64) -> (bool, Option<u64>) {
        let n = self.pollers.borrow().len();
        let mut busy = false;
        let mut next: Option<u64> = None;
        for i in 0..n {
            let taken = {
                let mut ps = self.pollers.borrow_mut();
                match ps.get(i) {
                    Some(p) if p.next_ns <= now => ps.take(i),
                    Some(p) => {
                        next = Some(next.map_or(p.next_ns, |x| x.min(p.next_ns)));
                        None
                    }
                    None => None,
                }
            };
            if let Some(mut p) = taken {
                let status = (p.poll)();
                busy |= status == PollerStatus::Busy;
                if status == PollerStatus::Done {
                    self.pollers.borrow_mut().release(i);
                } else {
                    p.next_ns = now + p.period_ns;
                    next = Some(next.map_or(p.next_ns, |x| x.min(p.next_ns)));
                    self.pollers.borrow_mut().put_back(i, p);
                }
            }
        }
        (busy, next)
    }
}

/// A real runtime with a fixed number of reactor threads.
pub struct Real {
    reactors: usize,
}

impl Real {
    pub fn new(reactors: usize) -> Self {
        assert!(reactors > 0, "a runtime needs at least one reactor");
        Real { reactors }
    }

    /// Starts the reactor threads, runs `main` on reactor 0 until it completes, then stops every
    /// reactor and joins the threads.
    pub fn run<F, Fut, T>(self, main: F) -> (T, RunStats)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let shared = Arc::new(Shared {
            reactors: (0..self.reactors)
                .map(|_| ReactorShared {
                    inbox: SegQueue::new(),
                    wakes: SegQueue::new(),
                    thread: OnceLock::new(),
                    sleeping: AtomicBool::new(false),
                    stats: Mutex::default(),
                })
                .collect(),
            start: Instant::now(),
            stop: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel::<T>();
        let mut main = Some(main);
        let mut handles = Vec::new();
        for id in 0..self.reactors {
            let shared = shared.clone();
            let job: Option<Box<dyn FnOnce() + Send>> = if id == 0 {
                let main = main.take().expect("main taken once");
                let tx = tx.clone();
                Some(Box::new(move || {
                    context::spawn(async move {
                        let v = main().await;
                        let _ = tx.send(v);
                    });
                }))
            } else {
                None
            };
            let h = std::thread::Builder::new()
                .name(format!("reactor-{id}"))
                .spawn(move || reactor_loop(id, shared, job))
                .expect("spawn reactor thread");
            handles.push(h);
        }
        drop(tx);
        // Wait for the main task's output, or for a reactor that panicked to stop the run: a
        // task that panics on another reactor may leave the main task waiting forever.
        let output = loop {
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(v) => break Some(v),
                Err(mpsc::RecvTimeoutError::Disconnected) => break None,
                Err(mpsc::RecvTimeoutError::Timeout) if shared.stop.load(Ordering::SeqCst) => {
                    break None
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        };
        shared.stop.store(true, Ordering::SeqCst);
        for r in &shared.reactors {
            if let Some(t) = r.thread.get() {
                t.unpark();
            }
        }
        let mut panicked = None;
        for h in handles {
            if let Err(e) = h.join() {
                panicked = Some(e);
            }
        }
        if let Some(e) = panicked {
            std::panic::resume_unwind(e);
        }
        let output = output.expect("the main task ended without producing its output");
        let stats = RunStats {
            elapsed_ns: shared.now_ns(),
            reactors: shared.reactors.iter().map(|r| r.stats.lock().clone()).collect(),
            events: 0,
        };
        (output, stats)
    }
}

fn reactor_loop(id: ReactorId, shared: Arc<Shared>, job: Option<Box<dyn FnOnce() + Send>>) {
    let me = &shared.reactors[id];
    me.thread.set(std::thread::current()).expect("thread set once");
    THIS_REACTOR.with(|c| c.set(id));
    let local = Rc::new(Local {
        id,
        shared: shared.clone(),
        timers: RefCell::default(),
        timer_wakers: RefCell::default(),
        timer_seq: Cell::new(0),
        pollers: RefCell::default(),
    });
    context::install(Some(Ctx::Real(local.clone())));
    context::set_reactor(id);
    // If the main task panics, tell every other reactor to stop too, so the run ends with the
    // panic instead of hanging.
    struct StopOnPanic<'a>(&'a Shared);
    impl Drop for StopOnPanic<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                self.0.stop.store(true, Ordering::SeqCst);
                for r in &self.0.reactors {
                    if let Some(t) = r.thread.get() {
                        t.unpark();
                    }
                }
            }
        }
    }
    let _guard = StopOnPanic(&shared);
    if let Some(job) = job {
        job();
    }
    let mut stats = ReactorStats::default();
    let mut idle_spins = 0u32;
    // One clock reading per iteration serves the timers, the pollers and the busy-time
    // accounting (an iteration that did work is busy until the next one starts): a busy-polling
    // reactor iterates millions of times a second, and clock reads were a third of its time.
    let mut last_ns = shared.now_ns();
    let mut last_did = false;
    while !shared.stop.load(Ordering::Relaxed) {
        let now = shared.now_ns();
        if last_did {
            stats.busy_ns += now - last_ns;
        }
        last_ns = now;
        let mut did = false;
        while let Some(msg) = me.inbox.pop() {
            msg();
            stats.messages += 1;
            did = true;
        }
        while let Some(r) = me.wakes.pop() {
            LOCAL_READY.with(|q| q.borrow_mut().push_back(r));
        }
        for _ in 0..TASK_BATCH {
            let next = LOCAL_READY.with(|q| q.borrow_mut().pop_front());
            let Some(r) = next else { break };
            r.run();
            stats.polls += 1;
            did = true;
        }
        let (fired, next_timer) = local.fire_timers(now);
        let (polled, next_poll) = local.run_pollers(now);
        did |= fired | polled;
        last_did = did;
        if did {
            idle_spins = 0;
            continue;
        }
        idle_spins += 1;
        if idle_spins < IDLE_SPINS_BEFORE_PARK {
            std::hint::spin_loop();
            continue;
        }
        let next = match (next_timer, next_poll) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let now = shared.now_ns();
        if let Some(n) = next {
            if n.saturating_sub(now) < SPIN_FOR_TIMER_NS {
                std::thread::yield_now();
                continue;
            }
        }
        me.sleeping.store(true, Ordering::SeqCst);
        let has_work = !me.inbox.is_empty()
            || !me.wakes.is_empty()
            || LOCAL_READY.with(|q| !q.borrow().is_empty())
            || shared.stop.load(Ordering::SeqCst);
        if !has_work {
            let wait = next.map_or(Duration::from_millis(10), |n| {
                Duration::from_nanos(n.saturating_sub(now) - SPIN_FOR_TIMER_NS / 2)
            });
            std::thread::park_timeout(wait);
        }
        me.sleeping.store(false, Ordering::SeqCst);
        idle_spins = 0;
    }
    if last_did {
        stats.busy_ns += shared.now_ns() - last_ns;
    }
    *me.stats.lock() = stats;
    // Drop leftover tasks and timers while the context is installed.
    // Dropping a task may wake another into this queue (a lock handed on), so the queue is
    // taken out before its tasks drop, until nothing is left.
    loop {
        let leftovers = LOCAL_READY.with(|q| std::mem::take(&mut *q.borrow_mut()));
        if leftovers.is_empty() {
            break;
        }
        drop(leftovers);
    }
    while me.wakes.pop().is_some() {}
    while me.inbox.pop().is_some() {}
    local.timer_wakers.borrow_mut().clear();
    local.pollers.borrow_mut().clear();
    context::install(None);
}
