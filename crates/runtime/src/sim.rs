//! The simulated runtime: all reactors in one OS thread on a virtual clock.
//!
//! Determinism rests on three rules: ready tasks run first-in first-out; timers, messages and
//! poller ticks fire in (time, insertion sequence) order; and nothing reads the real clock.
//! The same program therefore makes the same decisions in the same order on every run.

use std::cell::{Cell, RefCell};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use async_task::Runnable;
use parking_lot::Mutex;

use crate::context::{self, Ctx};
use crate::slots::Slots;
use crate::{JoinHandle, Message, PollerId, PollerStatus, ReactorId, ReactorStats, RunStats};

/// Period used for pollers registered with period 0, which in simulation would otherwise run
/// an unbounded number of times at one instant. One microsecond is finer than any device or
/// software cost flashrig models, so it does not change results.
pub const MIN_POLL_PERIOD_NS: u64 = 1_000;

type ReadyQueue = Arc<Mutex<VecDeque<Runnable<ReactorId>>>>;

enum TimerKind {
    Wake(Waker),
    Message(ReactorId, Message),
    Poller(usize),
}

struct Timer {
    at_ns: u64,
    seq: u64,
    kind: TimerKind,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Self) -> bool {
        (self.at_ns, self.seq) == (other.at_ns, other.seq)
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timer {
    // Reversed, so the std max-heap pops the earliest (time, sequence) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at_ns, other.seq).cmp(&(self.at_ns, self.seq))
    }
}

struct Poller {
    reactor: ReactorId,
    period_ns: u64,
    poll: Box<dyn FnMut() -> PollerStatus>,
}

#[derive(Default)]
struct VirtualCpu {
    free_at_ns: u64,
    stats: ReactorStats,
}

/// A spawned task's future, which the run takes out and drops when it ends (`Cancel`).
type FutureSlot<F> = RefCell<Option<Pin<Box<F>>>>;

/// A spawned task whose future the end of the run drops, finished or not.
trait Cancel {
    fn cancel(&self);
}

impl<F: Future> Cancel for FutureSlot<F> {
    fn cancel(&self) {
        // Taken out before it is dropped, so that a destructor that reaches this slot again
        // (through a waker, say) finds it empty rather than borrowed.
        let future = self.borrow_mut().take();
        drop(future);
    }
}

/// The future the executor runs for a spawned task: the task's own, until the run's end
/// drops it; then it never completes (nothing polls it any more).
struct Cancellable<F: Future> {
    slot: Rc<FutureSlot<F>>,
}

impl<F: Future> Future for Cancellable<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut slot = self.slot.borrow_mut();
        match slot.as_mut() {
            Some(f) => f.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

/// State shared by every task of one simulation (single-threaded, hence `Rc` and `Cell`).
pub(crate) struct Inner {
    now_ns: Cell<u64>,
    seq: Cell<u64>,
    events: Cell<u64>,
    ready: ReadyQueue,
    timers: RefCell<BinaryHeap<Timer>>,
    cpus: RefCell<Vec<VirtualCpu>>,
    pollers: RefCell<Slots<Poller>>,
    /// Every task spawned and not known to be finished: at the end of the run, the futures of
    /// those still waiting are dropped. A task waiting on something its own future owns (an
    /// engine's service task on an event of the engine it holds) is otherwise never woken and
    /// never dropped, and keeps the whole stack alive: `reproduce csal` grew by 1.2 GB per
    /// run, one emulated stack each, until the machine ran out of memory.
    tasks: RefCell<Vec<Weak<dyn Cancel>>>,
}

impl Inner {
    pub(crate) fn num_reactors(&self) -> usize {
        self.cpus.borrow().len()
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.now_ns.get()
    }

    fn next_seq(&self) -> u64 {
        let s = self.seq.get();
        self.seq.set(s + 1);
        s
    }

    fn push_timer(&self, at_ns: u64, kind: TimerKind) {
        let seq = self.next_seq();
        self.timers.borrow_mut().push(Timer { at_ns, seq, kind });
    }

    pub(crate) fn add_timer(&self, at_ns: u64, waker: Waker) {
        self.push_timer(at_ns, TimerKind::Wake(waker));
    }

    pub(crate) fn charge_cpu(&self, reactor: ReactorId, cpu_ns: u64) -> u64 {
        let now = self.now_ns();
        let mut cpus = self.cpus.borrow_mut();
        let cpu = &mut cpus[reactor];
        let start = cpu.free_at_ns.max(now);
        cpu.free_at_ns = start + cpu_ns;
        cpu.stats.busy_ns += cpu_ns;
        cpu.free_at_ns
    }

    pub(crate) fn spawn<F>(&self, reactor: ReactorId, future: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        let ready = self.ready.clone();
        let slot: Rc<FutureSlot<F>> = Rc::new(RefCell::new(Some(Box::pin(future))));
        self.register(Rc::downgrade(&slot) as Weak<dyn Cancel>);
        let (runnable, task) = async_task::Builder::new()
            .metadata(reactor)
            .spawn_local(move |_| Cancellable { slot }, move |r| ready.lock().push_back(r));
        runnable.schedule();
        JoinHandle::new(task)
    }

    /// Keeps a way to drop a spawned task's future at the end of the run, pruning the
    /// entries of tasks that have finished once they make up half the list.
    fn register(&self, task: Weak<dyn Cancel>) {
        let mut tasks = self.tasks.borrow_mut();
        if tasks.len() >= 64 && tasks.len() == tasks.capacity() {
            tasks.retain(|t| t.strong_count() > 0);
        }
        tasks.push(task);
    }

    pub(crate) fn send(&self, reactor: ReactorId, msg: Message) {
        assert!(
            reactor < self.num_reactors(),
            "message sent to reactor {reactor}, which does not exist"
        );
        // Delivered at the current instant, after the tasks already ready: a message is an
        // event of its own, ordered by its sequence number.
        self.push_timer(self.now_ns(), TimerKind::Message(reactor, msg));
    }

    pub(crate) fn register_poller(
        &self,
        reactor: ReactorId,
        period_ns: u64,
        poll: Box<dyn FnMut() -> PollerStatus>,
    ) -> PollerId {
        let period_ns = period_ns.max(MIN_POLL_PERIOD_NS);
        let id = { self.pollers.borrow_mut().insert(Poller { reactor, period_ns, poll }) };
        self.push_timer(self.now_ns() + period_ns, TimerKind::Poller(id));
        PollerId(id)
    }

    fn run_poller(&self, id: usize) {
        let taken = self.pollers.borrow_mut().take(id);
        let Some(mut p) = taken else { return };
        context::set_reactor(p.reactor);
        if (p.poll)() == PollerStatus::Done {
            self.pollers.borrow_mut().release(id);
        } else {
            let next = self.now_ns() + p.period_ns;
            self.pollers.borrow_mut().put_back(id, p);
            self.push_timer(next, TimerKind::Poller(id));
        }
    }
}

/// A simulation with a fixed number of reactors.
pub struct Sim {
    inner: Rc<Inner>,
}

impl Sim {
    pub fn new(reactors: usize) -> Self {
        assert!(reactors > 0, "a runtime needs at least one reactor");
        Sim {
            inner: Rc::new(Inner {
                now_ns: Cell::new(0),
                seq: Cell::new(0),
                events: Cell::new(0),
                ready: Arc::default(),
                timers: RefCell::default(),
                cpus: RefCell::new((0..reactors).map(|_| VirtualCpu::default()).collect()),
                pollers: RefCell::default(),
                tasks: RefCell::default(),
            }),
        }
    }

    /// Runs `main` on reactor 0 until it completes.
    ///
    /// Panics if the main task waits for something that can never happen (no ready task and no
    /// pending event): in a simulation that is always a lost wake-up, and hanging would hide it.
    pub fn run<F, Fut, T>(self, main: F) -> (T, RunStats)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T> + 'static,
        T: 'static,
    {
        let inner = self.inner;
        context::install(Some(Ctx::Sim(inner.clone())));
        // Uninstalls the context however the run ends, so a panicking simulation does not leave
        // a dead runtime installed on this thread for the next one.
        let _uninstall = context::UninstallOnDrop;
        context::set_reactor(0);
        let mut main_task = inner.spawn(0, main());
        let output = loop {
            // Run every ready task at the current instant.
            loop {
                let next = inner.ready.lock().pop_front();
                let Some(runnable) = next else { break };
                let reactor = *runnable.metadata();
                context::set_reactor(reactor);
                inner.cpus.borrow_mut()[reactor].stats.polls += 1;
                inner.events.set(inner.events.get() + 1);
                runnable.run();
            }
            let mut cx = Context::from_waker(Waker::noop());
            if let Poll::Ready(v) = std::pin::Pin::new(&mut main_task).poll(&mut cx) {
                break v;
            }
            let timer = inner.timers.borrow_mut().pop();
            let Some(timer) = timer else {
                panic!(
                    "simulation stalled at {} ns: the main task is waiting but no task is ready \
                     and no timer or message is pending (a lost wake-up)",
                    inner.now_ns()
                );
            };
            debug_assert!(timer.at_ns >= inner.now_ns(), "timer in the past");
            inner.now_ns.set(timer.at_ns.max(inner.now_ns()));
            inner.events.set(inner.events.get() + 1);
            match timer.kind {
                TimerKind::Wake(w) => w.wake(),
                TimerKind::Message(reactor, msg) => {
                    context::set_reactor(reactor);
                    inner.cpus.borrow_mut()[reactor].stats.messages += 1;
                    msg();
                }
                TimerKind::Poller(id) => inner.run_poller(id),
            }
        };
        let stats = RunStats {
            elapsed_ns: inner.now_ns(),
            reactors: inner.cpus.borrow().iter().map(|c| c.stats.clone()).collect(),
            events: inner.events.get(),
        };
        // Drop what is left (detached background tasks, timers) while the context is still
        // installed, so destructors that touch the runtime find it. Until nothing is left:
        // dropping a timer drops the waker of a task waiting on it, and a task whose last waker
        // goes is scheduled once more so that its future can be dropped; left in the ready
        // queue, that future (which holds the runtime) and the runtime (which holds the queue)
        // kept each other alive, and every run leaked its tasks' memory (the reliability
        // swarm's many short runs grew by half a megabyte each).
        // First the futures of every task still waiting, whatever it waits on: that breaks
        // the cycles through which a task keeps alive what would wake it.
        // (A destructor may spawn a task of its own: until none is left.)
        loop {
            let tasks = std::mem::take(&mut *inner.tasks.borrow_mut());
            if tasks.is_empty() {
                break;
            }
            for t in tasks.iter().filter_map(Weak::upgrade) {
                t.cancel();
            }
        }
        loop {
            let timers = std::mem::take(&mut *inner.timers.borrow_mut());
            let had_timers = !timers.is_empty();
            drop(timers);
            let leftovers: Vec<_> = inner.ready.lock().drain(..).collect();
            let had_tasks = !leftovers.is_empty();
            drop(leftovers);
            inner.pollers.borrow_mut().clear();
            if !had_timers && !had_tasks {
                break;
            }
        }
        (output, stats)
    }
}
