//! Stripe locks: at most one writer (or degraded reader, or rebuild step) works on a stripe at
//! a time, so parity is always computed from the data it protects.
//!
//! An async lock table rather than a mutex per stripe: holders keep the lock across member
//! I/O, and a waiting task must yield its reactor instead of blocking the thread (in the
//! simulation every reactor shares one thread). The table itself is a short critical section
//! under a `parking_lot` mutex, which is the lock-based kernel baselines' way (md's
//! `device_lock`); its modelled cost is charged separately by the cost model.
//!
//! The locks are fair: a released lock is handed to the task that has waited longest, which
//! owns it from that moment even before it runs. Without the hand-off a task that releases a
//! lock and takes it again in the same turn (a loop doing one step per turn) always wins
//! against the waiter it just woke; `scala`'s space manager starved a grant for most of a
//! second that way while its idle service converted a long queue one stripe per turn.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

#[derive(Default)]
pub struct StripeLocks {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Locked stripes: who owns each and who waits for it, in arrival order.
    held: HashMap<u64, Slot>,
    next_ticket: u64,
}

struct Slot {
    owner: u64,
    waiters: VecDeque<(u64, Waker)>,
}

impl State {
    fn ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        self.next_ticket
    }

    /// The owner of `stripe` lets go: the longest waiter owns it now (its waker is returned,
    /// to be woken once the table is unlocked), or nobody does. Waking under the table's
    /// mutex could deadlock: waking a task on a runtime that is shutting down drops it, and
    /// its `LockFuture` locks the table to leave the queue.
    #[must_use]
    fn release(&mut self, stripe: u64) -> Option<Waker> {
        let slot = self.held.get_mut(&stripe)?;
        match slot.waiters.pop_front() {
            Some((t, w)) => {
                slot.owner = t;
                Some(w)
            }
            None => {
                self.held.remove(&stripe);
                None
            }
        }
    }
}

/// Held while a task works on a stripe; unlocks when dropped.
pub struct StripeGuard<'a> {
    locks: &'a StripeLocks,
    stripe: u64,
}

impl StripeLocks {
    pub fn lock(&self, stripe: u64) -> LockFuture<'_> {
        LockFuture { locks: self, stripe, ticket: None, acquired: false }
    }

    /// Takes the lock of `stripe` only if nobody holds it or waits for it. Background work
    /// (a cache's cleaner or evictor) uses it to skip what a request is busy with instead of
    /// waiting, so it never waits while holding other locks.
    pub fn try_lock(&self, stripe: u64) -> Option<StripeGuard<'_>> {
        let mut st = self.state.lock();
        if st.held.contains_key(&stripe) {
            return None;
        }
        let t = st.ticket();
        st.held.insert(stripe, Slot { owner: t, waiters: VecDeque::new() });
        Some(StripeGuard { locks: self, stripe })
    }

    /// Whether `stripe` is locked (or queued for) right now.
    pub fn is_held(&self, stripe: u64) -> bool {
        self.state.lock().held.contains_key(&stripe)
    }

    /// Stripes locked right now (for tests and counters).
    pub fn held(&self) -> usize {
        self.state.lock().held.len()
    }
}

pub struct LockFuture<'a> {
    locks: &'a StripeLocks,
    stripe: u64,
    /// Set once the future has queued for the lock.
    ticket: Option<u64>,
    /// The future returned the guard, which releases the lock from then on.
    acquired: bool,
}

impl<'a> Future for LockFuture<'a> {
    type Output = StripeGuard<'a>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<StripeGuard<'a>> {
        let locks = self.locks;
        let stripe = self.stripe;
        let mut st = locks.state.lock();
        let ready = match self.ticket {
            None => {
                let t = st.ticket();
                match st.held.get_mut(&stripe) {
                    None => {
                        st.held.insert(stripe, Slot { owner: t, waiters: VecDeque::new() });
                        true
                    }
                    Some(slot) => {
                        slot.waiters.push_back((t, cx.waker().clone()));
                        self.ticket = Some(t);
                        false
                    }
                }
            }
            Some(t) => {
                let slot = st.held.get_mut(&stripe).expect("a queued ticket keeps its stripe held");
                if slot.owner == t {
                    true
                } else {
                    if let Some(w) = slot.waiters.iter_mut().find(|(x, _)| *x == t) {
                        if !w.1.will_wake(cx.waker()) {
                            w.1 = cx.waker().clone();
                        }
                    }
                    false
                }
            }
        };
        if ready {
            self.acquired = true;
            Poll::Ready(StripeGuard { locks, stripe })
        } else {
            Poll::Pending
        }
    }
}

impl Drop for LockFuture<'_> {
    /// A future dropped while it waited leaves the queue; one dropped after the lock was
    /// handed to it (but before it ran) passes the lock on.
    fn drop(&mut self) {
        let (Some(t), false) = (self.ticket, self.acquired) else { return };
        let next = {
            let mut st = self.locks.state.lock();
            let Some(slot) = st.held.get_mut(&self.stripe) else { return };
            if slot.owner == t {
                st.release(self.stripe)
            } else {
                slot.waiters.retain(|(x, _)| *x != t);
                None
            }
        };
        if let Some(w) = next {
            w.wake();
        }
    }
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        let next = self.locks.state.lock().release(self.stripe);
        if let Some(w) = next {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashrig_runtime::{run, spawn, yield_now, RuntimeKind};
    use std::cell::RefCell;
    use std::rc::Rc;

    /// A task that releases the lock and takes it again at once must not overtake a task
    /// that was already waiting: the waiter gets the lock next.
    #[test]
    fn a_released_lock_goes_to_the_longest_waiter() {
        let (order, _) = run(RuntimeKind::Sim, 1, || async {
            let locks = Rc::new(StripeLocks::default());
            let order = Rc::new(RefCell::new(Vec::new()));
            let g = locks.lock(7).await;
            let waiter = {
                let (locks, order) = (locks.clone(), order.clone());
                spawn(async move {
                    let _g = locks.lock(7).await;
                    order.borrow_mut().push("waiter");
                })
            };
            yield_now().await; // the waiter queues
            drop(g);
            let _g2 = locks.lock(7).await; // re-lock in the same turn: must queue behind
            order.borrow_mut().push("looper");
            drop(_g2);
            waiter.await;
            Rc::try_unwrap(order).unwrap().into_inner()
        });
        assert_eq!(order, vec!["waiter", "looper"]);
    }

    /// A waiter that gives up (its future dropped) leaves the queue, and a future dropped
    /// after the lock was handed to it passes the lock on instead of keeping it forever.
    #[test]
    fn dropped_waiters_do_not_keep_the_lock() {
        let (held, _) = run(RuntimeKind::Sim, 1, || async {
            let locks = StripeLocks::default();
            let g = locks.lock(1).await;
            let mut a = Box::pin(locks.lock(1));
            let mut b = Box::pin(locks.lock(1));
            let waker = futures_util::task::noop_waker();
            let mut cx = Context::from_waker(&waker);
            assert!(a.as_mut().poll(&mut cx).is_pending());
            assert!(b.as_mut().poll(&mut cx).is_pending());
            drop(g); // handed to `a`
            drop(a); // never ran: passes it to `b`
            let gb = b.as_mut().poll(&mut cx);
            assert!(gb.is_ready(), "the lock reached the next waiter");
            drop(gb);
            drop(b);
            locks.held()
        });
        assert_eq!(held, 0, "nothing stays locked");
    }
}
