//! Stripe locks: at most one writer (or degraded reader, or rebuild step) works on a stripe at
//! a time, so parity is always computed from the data it protects.
//!
//! An async lock table rather than a mutex per stripe: holders keep the lock across member
//! I/O, and a waiting task must yield its reactor instead of blocking the thread (in the
//! simulation every reactor shares one thread). The table itself is a short critical section
//! under a `parking_lot` mutex, which is the lock-based kernel baselines' way (md's
//! `device_lock`); its modelled cost is charged separately by the cost model.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

#[derive(Default)]
pub struct StripeLocks {
    /// Locked stripes and the tasks waiting for each.
    held: Mutex<HashMap<u64, Vec<Waker>>>,
}

/// Held while a task works on a stripe; unlocks when dropped.
pub struct StripeGuard<'a> {
    locks: &'a StripeLocks,
    stripe: u64,
}

impl StripeLocks {
    pub fn lock(&self, stripe: u64) -> LockFuture<'_> {
        LockFuture { locks: self, stripe }
    }

    /// Stripes locked right now (for tests and counters).
    pub fn held(&self) -> usize {
        self.held.lock().len()
    }
}

pub struct LockFuture<'a> {
    locks: &'a StripeLocks,
    stripe: u64,
}

impl<'a> Future for LockFuture<'a> {
    type Output = StripeGuard<'a>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<StripeGuard<'a>> {
        let mut held = self.locks.held.lock();
        match held.get_mut(&self.stripe) {
            None => {
                held.insert(self.stripe, Vec::new());
                Poll::Ready(StripeGuard { locks: self.locks, stripe: self.stripe })
            }
            Some(waiters) => {
                // Woken waiters race for the lock again; the losers re-register here.
                if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
                    waiters.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        let waiters = self.locks.held.lock().remove(&self.stripe).unwrap_or_default();
        for w in waiters {
            w.wake();
        }
    }
}
