//! The space manager's background work (§5.2): "When the CPU is idle or heroes are running out
//! (i.e., the conversion phase starts), the space manager scans the list of each I/O thread and
//! conducts conversion for HGs in the list."
//!
//! One *service* task runs on the space manager's reactor while there is something to do: it
//! brings the reactors' full hero groups into the conversion queue, runs its duties (AFA-level
//! GC when HHs run low, a checkpoint when the trim journal fills or the grant window runs
//! low), and starts conversions when
//! something wants them. A group filling on an I/O reactor kicks it; a kick while it runs only
//! wakes it, so there is never more than one.
//!
//! Conversion runs in the background, several stripes at once (`convert_depth`), each in a
//! task of its own, and never under the work lock: grants, GC and checkpoints go on beside
//! conversions instead of queueing behind them. A conversion starts when one of these wants
//! it, in this order (each conversion counts its reason):
//!
//! 1. **drain**: shutdown, `convert_all` or a rebuild needs every group converted;
//! 2. **grant**: a grant waits for VHs (it waits only until a whole batch can be granted);
//! 3. **low**: free VHs are below `vh_low_fraction` of all VHs ("heroes are running out");
//! 4. **idle**: no user request has been outstanding at the array for `idle_ns` ("the CPU is
//!    idle"). Outstanding requests are counted, not arrivals: a device that stalls with
//!    writes in flight (an SLC eviction blocking its planes) leaves the host busy waiting,
//!    not idle.
//!
//! Conversions stop starting once no reason is left; those in flight finish.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use flashrig_blockdev::{DevError, DevResult};
use flashrig_runtime::{now_ns, sleep_until_ns, spawn, spawn_on};
use futures_util::future::{join_all, select};

use super::space::Manager;
use super::Inner;

/// Why a conversion runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trigger {
    Drain,
    Grant,
    Low,
    Idle,
}

/// Counts a user request as outstanding while it lives (idle detection).
pub(crate) struct UserIo<'a>(&'a Inner);

impl Drop for UserIo<'_> {
    fn drop(&mut self) {
        if self.0.user_inflight.fetch_sub(1, SeqCst) == 1 {
            self.0.idle_since_ns.store(now_ns(), SeqCst);
        }
    }
}

impl Inner {
    /// Marks a user request outstanding until the guard drops.
    pub(crate) fn user_io(&self) -> UserIo<'_> {
        self.user_inflight.fetch_add(1, SeqCst);
        UserIo(self)
    }

    /// Conversions in flight at most.
    pub(crate) fn convert_depth(&self) -> usize {
        self.opts.convert_depth.unwrap_or(2 * self.geo.n).max(1)
    }

    fn vh_low_in(&self, mgr: &Manager) -> bool {
        let free: usize = mgr.vh_free.iter().map(|v| v.len()).sum();
        let total = self.geo.vh_per_member as usize * self.geo.n;
        (free as f64) < self.opts.vh_low_fraction * total as f64
    }

    /// Free VHs are below the low fraction: the conversion phase.
    pub(crate) fn vh_low(&self) -> bool {
        self.vh_low_in(&self.mgr.lock())
    }

    /// No user request outstanding, and none for `idle_ns`.
    pub(crate) fn host_idle(&self) -> bool {
        self.user_inflight.load(SeqCst) == 0
            && now_ns() >= self.idle_since_ns.load(SeqCst).saturating_add(self.opts.idle_ns)
    }

    /// Whether a conversion should start now, and why.
    fn trigger(&self, mgr: &Manager) -> Option<Trigger> {
        if mgr.draining > 0 {
            Some(Trigger::Drain)
        } else if mgr.grants_waiting > 0 {
            Some(Trigger::Grant)
        } else if self.vh_low_in(mgr) {
            Some(Trigger::Low)
        } else if self.host_idle() {
            Some(Trigger::Idle)
        } else {
            None
        }
    }

    /// Tells the space manager that there is work (a hero group filled, the trim journal
    /// fills, VHs run low): starts the service task, or wakes it if it runs.
    pub(crate) fn kick(self: &Arc<Self>) {
        if self.sm_kicked.swap(true, SeqCst) {
            self.sm_event.notify(usize::MAX);
            return;
        }
        let inner = self.clone();
        self.c.manager_messages.inc();
        drop(spawn_on(self.sm_reactor, move || async move { inner.service().await }));
    }

    /// The service task: runs until nothing is queued, converting or waiting in the reactors'
    /// full lists.
    async fn service(self: Arc<Self>) {
        self.c.service_runs.inc();
        let running = self.services_running.fetch_add(1, SeqCst) + 1;
        self.services_max.fetch_max(running, SeqCst);
        loop {
            // Listen before looking, so that a kick while we look is not lost.
            let listener = self.sm_event.listen();
            if self.stopped() {
                break;
            }
            if self.full_waiting() {
                self.collect_full().await;
            }
            // Duty errors (a member failure beyond m) surface in later grants and writes.
            let _ = self.duties().await;
            self.start_conversions();
            let (queued, converting) = {
                let mgr = self.mgr.lock();
                (mgr.to_convert.len(), mgr.converting)
            };
            let failed = self.mgr.lock().convert_error.is_some();
            if failed || (queued == 0 && converting == 0 && !self.full_waiting()) {
                self.sm_kicked.store(false, SeqCst);
                // A kick between the look and the store found the flag set and only notified:
                // look once more before leaving.
                if !failed && self.full_waiting() && !self.sm_kicked.swap(true, SeqCst) {
                    continue;
                }
                break;
            }
            if converting == 0 {
                // Groups wait, but nothing wants them converted yet: look again when the host
                // may count as idle, or at the next kick.
                let idle_at = if self.user_inflight.load(SeqCst) == 0 {
                    self.idle_since_ns.load(SeqCst).saturating_add(self.opts.idle_ns)
                } else {
                    now_ns().saturating_add(self.opts.idle_ns)
                };
                let wake = idle_at.max(now_ns() + 1);
                select(listener, Box::pin(sleep_until_ns(wake))).await;
            } else {
                // Conversions run on their own; their end (or a kick) wakes us.
                listener.await;
            }
        }
        self.services_running.fetch_sub(1, SeqCst);
    }

    /// GC when free HHs run low, a checkpoint when the trim journal is half full since the
    /// last one or the grant window holds less than a batch per reactor; under the work lock,
    /// as every multi-step job of the manager.
    async fn duties(self: &Arc<Self>) -> DevResult<()> {
        let journal_due = || {
            let jp = self.journal_pos.load(SeqCst);
            jp.saturating_sub(self.journal_ckpt_pos.load(SeqCst)) > self.geo.journal_blocks() / 2
        };
        // The window running low: refill it before a grant finds it empty and has to wait
        // for the checkpoint.
        let window_low = || {
            let mgr = self.mgr.lock();
            mgr.window.len() < self.grant_batch() * self.io_reactors() && !mgr.pool.is_empty()
                || !mgr.pending.is_empty() && mgr.window.len() < self.grant_batch()
        };
        if !self.hh_low() && !journal_due() && !window_low() {
            return Ok(());
        }
        let _g = self.sm_work.lock(0).await;
        if self.hh_low() {
            self.gc().await?;
            self.write_checkpoint().await?;
        }
        if journal_due() || window_low() {
            self.write_checkpoint().await?;
        }
        Ok(())
    }

    /// Starts conversion tasks while something wants conversion, groups are queued, and fewer
    /// than `convert_depth` are in flight. Runs on the space manager's reactor.
    pub(crate) fn start_conversions(self: &Arc<Self>) {
        let depth = self.convert_depth();
        loop {
            {
                let mut mgr = self.mgr.lock();
                if mgr.converting >= depth
                    || mgr.to_convert.is_empty()
                    || mgr.convert_error.is_some()
                    || self.trigger(&mgr).is_none()
                {
                    return;
                }
                mgr.converting += 1;
                mgr.converting_max = mgr.converting_max.max(mgr.converting);
            }
            let inner = self.clone();
            drop(spawn(async move { inner.conversion_task().await }));
        }
    }

    /// One conversion slot: converts queued stripes one after another while conversion is
    /// wanted, then frees its slot.
    async fn conversion_task(self: Arc<Self>) {
        loop {
            let next = {
                let mut mgr = self.mgr.lock();
                let why = if mgr.convert_error.is_none() { self.trigger(&mgr) } else { None };
                match why {
                    Some(why) if !mgr.to_convert.is_empty() => {
                        Some((mgr.to_convert.pop_front().expect("not empty"), why))
                    }
                    _ => {
                        mgr.converting -= 1;
                        None
                    }
                }
            };
            let Some((s, why)) = next else { break };
            match why {
                Trigger::Drain => self.c.conversions_drain.inc(),
                Trigger::Grant => self.c.conversions_grant.inc(),
                Trigger::Low => self.c.conversions_low.inc(),
                Trigger::Idle => self.c.conversions_idle.inc(),
            }
            if let Err(e) = self.convert_stripe(s).await {
                self.mgr.lock().convert_error.get_or_insert(e);
            }
            self.vh_event.notify(usize::MAX);
        }
        self.vh_event.notify(usize::MAX);
        self.sm_event.notify(usize::MAX);
    }

    /// Waits until `done` holds or nothing is left to convert, with conversion wanted
    /// meanwhile (the caller counts itself in `grants_waiting` or `draining`).
    async fn wait_conversions(self: &Arc<Self>, done: impl Fn(&Self) -> bool) -> DevResult<()> {
        if self.full_waiting() {
            self.collect_full().await;
        }
        loop {
            let listener = self.vh_event.listen();
            if done(self) {
                return Ok(());
            }
            if self.stopped() {
                return Err(DevError::DeviceFailed {
                    name: format!("{}: the array was dropped", self.info.name),
                });
            }
            let settled = {
                let mgr = self.mgr.lock();
                if let Some(e) = &mgr.convert_error {
                    return Err(e.clone());
                }
                mgr.to_convert.is_empty() && mgr.converting == 0 && mgr.collecting == 0
            };
            if settled {
                if self.full_waiting() {
                    self.collect_full().await;
                    continue;
                }
                return Ok(());
            }
            self.start_conversions();
            listener.await;
        }
    }

    /// A grant found nothing: conversions run until something can be granted (or nothing is
    /// left to convert). The reactor asking has every request waiting: it gets what the first
    /// conversions free and asks again, while conversion goes on. (Waiting for a whole batch
    /// kept a reactor idle for a batch of conversions at every grant in the conversion phase;
    /// waiting for the whole queue, for every full group of every reactor.)
    pub(crate) async fn wait_conversions_for_grant(self: &Arc<Self>) -> DevResult<()> {
        self.mgr.lock().grants_waiting += 1;
        let r = self.wait_conversions(|inner| inner.grantable(1)).await;
        self.mgr.lock().grants_waiting -= 1;
        r
    }

    /// Converts every queued and full group and waits for every conversion in flight.
    pub(crate) async fn drain_conversions(self: &Arc<Self>) -> DevResult<()> {
        self.mgr.lock().draining += 1;
        let r = self.wait_conversions(|_| false).await;
        self.mgr.lock().draining -= 1;
        r
    }

    /// Returns every reactor's heroes, then converts everything (shutdown, tests).
    pub(crate) async fn convert_everything(self: Arc<Self>) -> DevResult<()> {
        let sm = self.sm_reactor;
        spawn_on(sm, move || async move {
            let _g = self.sm_work.lock(0).await;
            let mut handles = Vec::new();
            for r in 0..self.io_reactors() {
                let inner = self.clone();
                handles.push(spawn_on(r, move || async move { inner.return_heroes() }));
            }
            for h in join_all(handles).await {
                self.c.returned_hh.add(h.hh.len() as u64);
                self.take_back(h);
            }
            // Returned groups are in the full lists now; writes still in flight to them are
            // waited for by the conversion.
            self.drain_conversions().await
        })
        .await
    }
}
