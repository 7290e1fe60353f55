//! The free functions engine code calls. Each consults the thread's current runtime context,
//! which the simulated or real runtime installs before running any task.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use crate::{real, sim, JoinHandle, Message, ReactorId};

#[derive(Clone)]
pub(crate) enum Ctx {
    Sim(Rc<sim::Inner>),
    Real(Rc<real::Local>),
}

thread_local! {
    static CTX: RefCell<Option<Ctx>> = const { RefCell::new(None) };
    static REACTOR: Cell<ReactorId> = const { Cell::new(0) };
}

pub(crate) fn install(ctx: Option<Ctx>) {
    CTX.with(|c| *c.borrow_mut() = ctx);
}

/// Removes the thread's runtime context when dropped.
pub(crate) struct UninstallOnDrop;

impl Drop for UninstallOnDrop {
    fn drop(&mut self) {
        install(None);
    }
}

pub(crate) fn set_reactor(r: ReactorId) {
    REACTOR.with(|c| c.set(r));
}

fn with_ctx<R>(f: impl FnOnce(&Ctx) -> R) -> R {
    CTX.with(|c| {
        let c = c.borrow();
        let ctx = c.as_ref().expect(
            "a flashrig runtime function was called outside a runtime: run the code inside \
             flashrig_runtime::run",
        );
        f(ctx)
    })
}

/// True when called from a task or message running in a runtime.
pub fn in_runtime() -> bool {
    CTX.with(|c| c.borrow().is_some())
}

/// Which runtime the caller runs in (`None` outside any). Engines never branch on this; devices
/// that touch the real world do, because asynchronous kernel I/O (io_uring) completes in real
/// time and has no place on a virtual clock.
pub fn runtime_kind() -> Option<crate::RuntimeKind> {
    CTX.with(|c| {
        c.borrow().as_ref().map(|ctx| match ctx {
            Ctx::Sim(_) => crate::RuntimeKind::Sim,
            Ctx::Real(_) => crate::RuntimeKind::Real,
        })
    })
}

/// A handle through which threads outside the runtime send messages to its reactors (real
/// runtime only: a simulated run has no outside world to take requests from, so `None`).
pub fn handle() -> Option<real::Handle> {
    with_ctx(|c| match c {
        Ctx::Sim(_) => None,
        Ctx::Real(r) => Some(r.handle()),
    })
}

/// The reactor the calling task runs on.
pub fn current_reactor() -> ReactorId {
    REACTOR.with(|c| c.get())
}

pub fn num_reactors() -> usize {
    with_ctx(|c| match c {
        Ctx::Sim(s) => s.num_reactors(),
        Ctx::Real(r) => r.num_reactors(),
    })
}

/// The runtime's clock in nanoseconds since the run started (virtual in sim).
pub fn now_ns() -> u64 {
    with_ctx(|c| match c {
        Ctx::Sim(s) => s.now_ns(),
        Ctx::Real(r) => r.now_ns(),
    })
}

/// A future that completes at `deadline_ns` on the runtime's clock.
pub fn sleep_until_ns(deadline_ns: u64) -> Sleep {
    Sleep { deadline_ns, registered: false }
}

/// A future that completes `duration_ns` from now.
pub fn sleep_ns(duration_ns: u64) -> Sleep {
    sleep_until_ns(now_ns().saturating_add(duration_ns))
}

/// Charges `cpu_ns` of work to the calling reactor's CPU and completes when that work is done.
///
/// In sim the reactor's virtual CPU is a serial resource: work charged by any task on the
/// reactor queues behind work already charged, and the charged time counts as busy time. In the
/// real runtime this completes at once, because the real work already took real CPU time.
pub fn charge_cpu_ns(cpu_ns: u64) -> Sleep {
    if cpu_ns == 0 {
        return sleep_until_ns(0);
    }
    let deadline_ns = with_ctx(|c| match c {
        Ctx::Sim(s) => s.charge_cpu(current_reactor(), cpu_ns),
        Ctx::Real(_) => 0,
    });
    sleep_until_ns(deadline_ns)
}

/// Spawns a task on the calling reactor.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    let reactor = current_reactor();
    with_ctx(|c| match c {
        Ctx::Sim(s) => s.spawn(reactor, future),
        Ctx::Real(r) => r.spawn(future),
    })
}

/// Sends `msg` to run on `reactor`. Messages between one pair of reactors arrive in order.
pub fn send(reactor: ReactorId, msg: Message) {
    with_ctx(|c| match c {
        Ctx::Sim(s) => s.send(reactor, msg),
        Ctx::Real(r) => r.send(reactor, msg),
    })
}

/// Builds a task on `reactor` (by message) and returns a handle that yields its output here.
pub fn spawn_on<F, Fut, T>(reactor: ReactorId, make: F) -> RemoteHandle<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let slot = Arc::new(Mutex::new(RemoteSlot { value: None, waker: None }));
    let remote = slot.clone();
    send(
        reactor,
        Box::new(move || {
            spawn(async move {
                let v = make().await;
                let waker = {
                    let mut s = remote.lock();
                    s.value = Some(v);
                    s.waker.take()
                };
                if let Some(w) = waker {
                    w.wake();
                }
            });
        }),
    );
    RemoteHandle { slot }
}

struct RemoteSlot<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

/// The output of a task spawned on another reactor.
pub struct RemoteHandle<T> {
    slot: Arc<Mutex<RemoteSlot<T>>>,
}

impl<T> Future for RemoteHandle<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut s = self.slot.lock();
        match s.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Lets the other ready tasks of this reactor run before continuing.
pub fn yield_now() -> YieldNow {
    YieldNow { yielded: false }
}

pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            Poll::Ready(())
        } else {
            self.yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Identifies a registered poller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollerId(pub usize);

/// What a poller reports after each run (SPDK's `SPDK_POLLER_BUSY` / `SPDK_POLLER_IDLE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollerStatus {
    /// It found work: the real runtime counts the iteration as busy time.
    Busy,
    /// It found nothing to do; keep polling.
    Idle,
    /// Unregister it.
    Done,
}

/// Registers a poller on the calling reactor, run every `period_ns` (0: as often as the runtime
/// can; in sim that is every [`crate::sim::MIN_POLL_PERIOD_NS`]). A real reactor with a
/// period-0 poller never sleeps, as an SPDK reactor busy-polls its devices; pollers that only
/// matter while work is outstanding should return [`PollerStatus::Done`] when it is done and
/// register again later. Pollers do not keep a run alive: a run ends when its main task does.
pub fn register_poller(period_ns: u64, poller: impl FnMut() -> PollerStatus + 'static) -> PollerId {
    let reactor = current_reactor();
    with_ctx(|c| match c {
        Ctx::Sim(s) => s.register_poller(reactor, period_ns, Box::new(poller)),
        Ctx::Real(r) => r.register_poller(period_ns, Box::new(poller)),
    })
}

/// The future returned by [`sleep_until_ns`], [`sleep_ns`] and [`charge_cpu_ns`].
pub struct Sleep {
    deadline_ns: u64,
    registered: bool,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.deadline_ns;
        let registered = self.registered;
        let ready = with_ctx(|c| match c {
            Ctx::Sim(s) => {
                if s.now_ns() >= deadline {
                    return true;
                }
                if !registered {
                    s.add_timer(deadline, cx.waker().clone());
                }
                false
            }
            Ctx::Real(r) => {
                if r.now_ns() >= deadline {
                    return true;
                }
                // Real timers may be polled spuriously by cross-thread wake-ups; registering
                // again is harmless (a stale timer only causes one extra poll).
                if !registered {
                    r.add_timer(deadline, cx.waker().clone());
                }
                false
            }
        });
        if ready {
            Poll::Ready(())
        } else {
            self.registered = true;
            Poll::Pending
        }
    }
}
