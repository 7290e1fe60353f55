//! Row locks: writers of a row (user replica writes, a stripe being written, recovery's
//! replica repair) hold it shared, and a rebuild step holds it exclusive, so a replacement
//! member's slot is copied only when no write to that row is in flight. The pattern of the
//! `raid` engine's [`StripeLocks`](crate::raid::locks::StripeLocks), with a shared mode: an
//! async lock table whose waiting tasks yield their reactor, and whose table is a short
//! critical section under a `parking_lot` mutex that is never held across an `.await`.
//!
//! A waiting exclusive request stops new shared holders (a rebuild is not starved by a
//! stream of writes).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

#[derive(Default)]
pub struct RowLocks {
    rows: Mutex<HashMap<u64, Entry>>,
}

#[derive(Default)]
struct Entry {
    shared: usize,
    exclusive: bool,
    /// Exclusive requests waiting.
    waiting_exclusive: usize,
    waiters: Vec<Waker>,
}

impl Entry {
    fn idle(&self) -> bool {
        self.shared == 0
            && !self.exclusive
            && self.waiting_exclusive == 0
            && self.waiters.is_empty()
    }
    fn wait(&mut self, w: &Waker) {
        if !self.waiters.iter().any(|x| x.will_wake(w)) {
            self.waiters.push(w.clone());
        }
    }
}

/// Held while a task writes to (or, exclusive, rebuilds) a row; unlocks when dropped.
pub struct RowGuard<'a> {
    locks: &'a RowLocks,
    row: u64,
    exclusive: bool,
}

impl RowLocks {
    pub fn shared(&self, row: u64) -> LockFuture<'_> {
        LockFuture { locks: self, row, exclusive: false, registered: false, done: false }
    }

    pub fn exclusive(&self, row: u64) -> LockFuture<'_> {
        LockFuture { locks: self, row, exclusive: true, registered: false, done: false }
    }

    /// Rows with holders or waiters right now (for tests).
    pub fn busy(&self) -> usize {
        self.rows.lock().len()
    }
}

pub struct LockFuture<'a> {
    locks: &'a RowLocks,
    row: u64,
    exclusive: bool,
    /// This exclusive request is counted in `waiting_exclusive`.
    registered: bool,
    done: bool,
}

impl<'a> Future for LockFuture<'a> {
    type Output = RowGuard<'a>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RowGuard<'a>> {
        let locks = self.locks;
        let mut rows = locks.rows.lock();
        let e = rows.entry(self.row).or_default();
        let got = if self.exclusive {
            if e.shared == 0 && !e.exclusive {
                if self.registered {
                    e.waiting_exclusive -= 1;
                }
                e.exclusive = true;
                true
            } else {
                if !self.registered {
                    e.waiting_exclusive += 1;
                }
                e.wait(cx.waker());
                false
            }
        } else if !e.exclusive && e.waiting_exclusive == 0 {
            e.shared += 1;
            true
        } else {
            e.wait(cx.waker());
            false
        };
        drop(rows);
        if got {
            self.registered = false;
            self.done = true;
            Poll::Ready(RowGuard { locks, row: self.row, exclusive: self.exclusive })
        } else {
            if self.exclusive {
                self.registered = true;
            }
            Poll::Pending
        }
    }
}

impl Drop for LockFuture<'_> {
    fn drop(&mut self) {
        // An exclusive request abandoned while waiting stops blocking shared requests.
        if self.registered && !self.done {
            let waiters = {
                let mut rows = self.locks.rows.lock();
                let Some(e) = rows.get_mut(&self.row) else { return };
                e.waiting_exclusive -= 1;
                let w = std::mem::take(&mut e.waiters);
                if e.idle() {
                    rows.remove(&self.row);
                }
                w
            };
            waiters.into_iter().for_each(Waker::wake);
        }
    }
}

impl Drop for RowGuard<'_> {
    fn drop(&mut self) {
        let waiters = {
            let mut rows = self.locks.rows.lock();
            let e = rows.get_mut(&self.row).expect("a held row has an entry");
            if self.exclusive {
                e.exclusive = false;
            } else {
                e.shared -= 1;
            }
            let w = if e.shared == 0 { std::mem::take(&mut e.waiters) } else { Vec::new() };
            if e.idle() {
                rows.remove(&self.row);
            }
            w
        };
        // Woken tasks race for the row again; the losers re-register.
        waiters.into_iter().for_each(Waker::wake);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashrig_runtime::{run, sleep_ns, spawn, RuntimeKind};
    use std::sync::Arc;

    #[test]
    fn shared_holders_overlap_and_exclusive_waits_for_them() {
        let (log, _) = run(RuntimeKind::Sim, 1, || async {
            let locks = Arc::new(RowLocks::default());
            let log = Arc::new(Mutex::new(Vec::new()));
            let mut tasks = Vec::new();
            for (name, excl, start, hold) in [
                ("s1", false, 0, 100),
                ("s2", false, 10, 100),
                ("x", true, 20, 50),
                ("s3", false, 30, 10),
            ] {
                let (locks, log) = (locks.clone(), log.clone());
                tasks.push(spawn(async move {
                    sleep_ns(start).await;
                    let _g = if excl { locks.exclusive(7).await } else { locks.shared(7).await };
                    log.lock().push((name, flashrig_runtime::now_ns()));
                    sleep_ns(hold).await;
                }));
            }
            for t in tasks {
                t.await;
            }
            assert_eq!(locks.busy(), 0);
            let v = log.lock().clone();
            v
        });
        // s1 and s2 share; x waits for both (until 110); s3 arrives while x waits and goes after.
        assert_eq!(log, vec![("s1", 0), ("s2", 10), ("x", 110), ("s3", 160)]);
    }
}
