//! The space manager and the I/O reactors' hero lists (§5.2, Fig. 6).
//!
//! The space manager (one reactor, the paper's daemon thread) owns the free HH list and the
//! free VH list of every member. I/O reactors own what they were granted and build hero groups
//! (one HH plus a VH on each of the HH's m parity members) only from that, so two reactors can
//! never write the same place and the I/O path takes no lock. Heroes move only by message:
//!
//! - **grant** (A): a reactor out of heroes asks; the manager sends a batch of HHs (default
//!   1024) with one VH on each of their parity members.
//! - **return** (D): a reactor gives its unused heroes back ([`Inner::return_heroes`], on
//!   shutdown and on [`super::Scala::close`]).
//! - **recycle after conversion** (E): full hero groups wait in their reactor's list; the
//!   manager collects them and converts them in the background (`service`), and takes their
//!   VHs back.
//! - **recall**: when nothing is left to grant, the manager asks every other reactor for part of
//!   its unused heroes, less from reactors that asked for heroes more often lately.
//! - **AFA-level GC**: stripes whose data was overwritten are drained and their HHs recycled
//!   (`gc`).
//!
//! HHs go back to the free list only at a checkpoint, and the manager grants only from the
//! *grant window* the last checkpoint declared, so recovery knows which stripes may hold data
//! the checkpoint does not cover.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use flashrig_blockdev::{DevError, DevResult};
use flashrig_runtime::{current_reactor, spawn_on};
use futures_util::future::join_all;

use super::layout::ScalaGeometry;
use super::tables::{state, NONE};
use super::{Inner, ScalaStats};

/// Free HHs grants never take: GC's destinations.
pub const GC_KEEP_HH: usize = 2;

/// A hero group being filled by a reactor.
#[derive(Clone, Copy, Debug)]
pub struct OpenHg {
    pub stripe: u64,
    /// Blocks of the stripe's data slots filled so far.
    pub fill: u64,
}

/// What one I/O reactor holds.
pub struct ReactorState {
    pub hh: VecDeque<u32>,
    /// Granted VHs per member.
    pub vh: Vec<VecDeque<u32>>,
    pub open: Option<OpenHg>,
    /// Filled hero groups waiting for conversion (the paper's Full HG List).
    pub full: Vec<u64>,
    /// A grant request is on its way (others on this reactor wait for it).
    pub asking: bool,
}

impl ReactorState {
    pub fn new(n: usize) -> ReactorState {
        ReactorState {
            hh: VecDeque::new(),
            vh: (0..n).map(|_| VecDeque::new()).collect(),
            open: None,
            full: Vec::new(),
            asking: false,
        }
    }
}

/// The space manager's lists.
pub struct Manager {
    /// Free HHs not in the grant window.
    pub pool: VecDeque<u32>,
    /// Free HHs the last checkpoint declared grantable.
    pub window: VecDeque<u32>,
    /// Recycled HHs: free after the next checkpoint.
    pub pending: Vec<u32>,
    pub vh_free: Vec<VecDeque<u32>>,
    /// Grant requests per reactor since the last recall (the recall weights).
    pub requests: Vec<u64>,
    pub ckpt_seq: u64,
    /// The full checkpoint the delta log extends: its sequence number, slot and the members
    /// holding it; `None` until the first full checkpoint (and after recovery, which ends
    /// with a full one).
    pub ckpt_base: Option<CkptBase>,
    /// Blocks of the delta log used since the base.
    pub dlog_used_blocks: u64,
    /// Full hero groups collected from the reactors, not converted yet.
    pub to_convert: VecDeque<u64>,
    /// Collections of the reactors' full lists on their way (by message): until they land,
    /// an empty queue does not mean that nothing is left to convert.
    pub collecting: usize,
    /// Conversions in flight, and the most ever.
    pub converting: usize,
    pub converting_max: usize,
    /// Grants waiting for conversions to free VHs, and drains (shutdown, rebuild) waiting for
    /// every conversion: either makes conversion run whatever the idle and VH triggers say.
    pub grants_waiting: usize,
    pub draining: usize,
    /// The first error a background conversion met (a member failure beyond m); grants and
    /// drains report it, since no later conversion can succeed either.
    pub convert_error: Option<DevError>,
}

impl Manager {
    pub fn new(g: &ScalaGeometry, reactors: usize) -> Manager {
        Manager {
            pool: VecDeque::new(),
            window: VecDeque::new(),
            pending: Vec::new(),
            vh_free: (0..g.n).map(|_| VecDeque::new()).collect(),
            requests: vec![0; reactors],
            ckpt_seq: 0,
            ckpt_base: None,
            dlog_used_blocks: 0,
            to_convert: VecDeque::new(),
            collecting: 0,
            converting: 0,
            converting_max: 0,
            grants_waiting: 0,
            draining: 0,
            convert_error: None,
        }
    }
}

/// Where the current full checkpoint is (`Manager::ckpt_base`).
#[derive(Clone, Debug)]
pub struct CkptBase {
    pub seq: u64,
    pub slot: u64,
    pub members: Vec<usize>,
}

/// A batch of heroes sent to a reactor, or returned by one.
#[derive(Debug, Default)]
pub struct Heroes {
    pub hh: Vec<u32>,
    /// (member, VH number).
    pub vh: Vec<(usize, u32)>,
}

impl Inner {
    pub(crate) fn io_reactors(&self) -> usize {
        self.reactors.len()
    }

    /// The grant-window size in HHs.
    pub(crate) fn window_target(&self) -> usize {
        let grants = self.grant_batch() * 4 * self.io_reactors();
        let cap = (self.geo.hh as usize / 4).max(1);
        self.opts.window_heroes.unwrap_or(grants.min(cap)).max(1)
    }

    /// HHs per grant: the option, limited so that every reactor can hold a few grants.
    pub(crate) fn grant_batch(&self) -> usize {
        let fair = (self.geo.hh as usize / (16 * self.io_reactors())).max(1);
        self.opts.grant_heroes.clamp(1, fair)
    }

    /// Asks the space manager for heroes (from an I/O reactor) and adds them to this
    /// reactor's lists. Fails with `NoSpace` when none are left anywhere.
    pub(crate) async fn request_heroes(self: &Arc<Self>) -> DevResult<()> {
        let r = current_reactor();
        self.c.grant_requests.inc();
        self.c.manager_messages.inc();
        // A reactor asks when no HH it holds has a VH on each of its parity members (recalls
        // take HHs and VHs back by shares, so what is left need not pair up). What it holds
        // is of no use to it, so it goes back with the request and the manager grants fresh
        // pairs; otherwise VHs stranded with the wrong HHs could leave every reactor stuck.
        let leftovers = {
            let mut st = self.reactors[r].lock();
            let mut h = Heroes::default();
            h.hh.extend(st.hh.drain(..));
            for (mem, list) in st.vh.iter_mut().enumerate() {
                h.vh.extend(list.drain(..).map(|v| (mem, v)));
            }
            h
        };
        let inner = self.clone();
        let got = spawn_on(self.sm_reactor, move || async move {
            inner.c.returned_hh.add(leftovers.hh.len() as u64);
            inner.take_back(leftovers);
            inner.grant(r).await
        })
        .await?;
        self.c.manager_messages.inc();
        let mut st = self.reactors[r].lock();
        st.hh.extend(got.hh.iter().copied());
        for (mem, v) in got.vh {
            st.vh[mem].push_back(v);
        }
        Ok(())
    }

    /// The space manager's side of a grant (runs on its reactor). Grants take the work lock,
    /// which serialises them with GC, checkpoints and rebuild, but never with conversions:
    /// those run in the background (`service`), so a grant never queues behind them.
    async fn grant(self: Arc<Self>, r: usize) -> DevResult<Heroes> {
        let _g = self.sm_work.lock(0).await;
        self.mgr.lock().requests[r] += 1;
        // Take what is free; else, in order of cost: wait for the conversions of full groups
        // (their VHs come back) and refresh a window of unusable HHs; recall unused heroes
        // from the other reactors (§5.2 (3): VHs parked there help at once, and GC could not
        // free them); GC and a checkpoint (recycled HHs become grantable), and recall once
        // more.
        for round in 0..5 {
            let got = self.take_grant();
            if !got.hh.is_empty() {
                self.c.granted_hh.add(got.hh.len() as u64);
                self.c.granted_vh.add(got.vh.len() as u64);
                if self.vh_low() {
                    // The VHs this grant took may start the conversion phase.
                    self.kick();
                }
                return Ok(got);
            }
            match round {
                0 => {
                    // HHs are short, not VHs: only a checkpoint brings more into the window,
                    // and waiting for conversions first would wait for all of them.
                    if self.window_short() {
                        self.write_checkpoint().await?;
                    }
                    self.wait_conversions_for_grant().await?;
                    // A checkpoint refills the window, and swaps window HHs that cannot form
                    // a group for ones that can.
                    let stuck = {
                        let mgr = self.mgr.lock();
                        !mgr.window.iter().any(|&h| self.hh_usable(&mgr, h as u64))
                    };
                    if stuck {
                        self.write_checkpoint().await?;
                    }
                }
                1 | 3 => {
                    self.recall(r).await;
                    self.wait_conversions_for_grant().await?;
                }
                2 => {
                    self.gc().await?;
                    self.write_checkpoint().await?;
                }
                _ => {}
            }
        }
        let mgr = self.mgr.lock();
        if let Some(e) = &mgr.convert_error {
            return Err(e.clone());
        }
        Err(DevError::NoSpace(format!(
            "scala {}: no hero can be granted (window {}, pool {}, pending {}, free VHs {:?})",
            self.info.name,
            mgr.window.len(),
            mgr.pool.len(),
            mgr.pending.len(),
            mgr.vh_free.iter().map(|v| v.len()).collect::<Vec<_>>()
        )))
    }

    /// Takes a batch from the window: HHs whose parity members all have a free VH, one VH each.
    /// Whether an HH can form a group depends only on its rotation (`s mod n` names its parity
    /// members), so once a rotation is short of VHs its other HHs are passed over unchecked;
    /// the scan ends when every rotation is short or the batch is full. Passed-over HHs keep
    /// their place at the window's front.
    fn take_grant(&self) -> Heroes {
        let batch = self.grant_batch();
        let n = self.geo.n;
        let mut mgr = self.mgr.lock();
        let mut out = Heroes::default();
        let mut skipped = Vec::new();
        let mut short = vec![false; n];
        let mut short_count = 0;
        while out.hh.len() < batch && short_count < n {
            // The last few free HHs are GC's: it needs a destination to free anything.
            if mgr.window.len() + skipped.len() + mgr.pool.len() <= GC_KEEP_HH {
                break;
            }
            let Some(h) = mgr.window.pop_front() else { break };
            let s = h as u64;
            let rot = (s % n as u64) as usize;
            let ok = !short[rot] && self.hh_usable(&mgr, s);
            if !ok {
                // Without VHs on its parity members this HH cannot form a group yet.
                if !short[rot] {
                    short[rot] = true;
                    short_count += 1;
                }
                skipped.push(h);
                continue;
            }
            for i in 0..self.geo.m {
                let p = self.geo.parity_member(s, i);
                if let Some(v) = mgr.vh_free[p].pop_front() {
                    out.vh.push((p, v));
                }
            }
            out.hh.push(h);
        }
        for h in skipped.into_iter().rev() {
            mgr.window.push_front(h);
        }
        out
    }

    /// Whether HH `s` can form a hero group now: each of its parity members has a free VH (or
    /// has failed, and gets no backup copy).
    pub(crate) fn hh_usable(&self, mgr: &Manager, s: u64) -> bool {
        (0..self.geo.m).all(|i| {
            let p = self.geo.parity_member(s, i);
            self.is_failed(p) || !mgr.vh_free[p].is_empty()
        })
    }

    /// Recall (§5.2 (3)): every reactor but the asker returns part of its unused heroes; the
    /// share is `1 - requests_r / sum(requests)`, so busy reactors keep more.
    async fn recall(self: &Arc<Self>, asker: usize) {
        self.c.recalls.inc();
        let requests = {
            let mut mgr = self.mgr.lock();
            let rq = mgr.requests.clone();
            // "Over a period of time": the weights decay at every recall.
            mgr.requests.iter_mut().for_each(|x| *x /= 2);
            rq
        };
        let total: u64 = requests.iter().sum::<u64>().max(1);
        let mut handles = Vec::new();
        for (r, &asked) in requests.iter().enumerate() {
            if r == asker {
                continue;
            }
            let share = 1.0 - asked as f64 / total as f64;
            let inner = self.clone();
            self.c.manager_messages.inc();
            handles.push(spawn_on(r, move || async move { inner.give_back(share) }));
        }
        for h in join_all(handles).await {
            self.c.recalled_hh.add(h.hh.len() as u64);
            self.c.recalled_vh.add(h.vh.len() as u64);
            self.take_back(h);
        }
    }

    /// Runs on an I/O reactor: hands back `share` of its unused heroes (rounded up).
    fn give_back(&self, share: f64) -> Heroes {
        let mut st = self.reactors[current_reactor()].lock();
        let mut out = Heroes::default();
        let nh = (st.hh.len() as f64 * share).ceil() as usize;
        for _ in 0..nh.min(st.hh.len()) {
            out.hh.push(st.hh.pop_back().expect("counted"));
        }
        for (mem, list) in st.vh.iter_mut().enumerate() {
            let nv = (list.len() as f64 * share).ceil() as usize;
            for _ in 0..nv.min(list.len()) {
                out.vh.push((mem, list.pop_back().expect("counted")));
            }
        }
        out
    }

    /// Puts returned heroes back on the manager's lists (returned HHs were never written, so
    /// they go straight back to the window).
    pub(crate) fn take_back(&self, h: Heroes) {
        let mut mgr = self.mgr.lock();
        for s in h.hh {
            mgr.window.push_back(s);
        }
        for (mem, v) in h.vh {
            mgr.vh_free[mem].push_back(v);
        }
    }

    /// Runs on an I/O reactor: returns every unused hero and closes the open hero group (it
    /// joins the full list, to be converted partly filled). What a reactor does when its I/O
    /// thread ends (§5.2 (1)).
    pub(crate) fn return_heroes(&self) -> Heroes {
        let mut st = self.reactors[current_reactor()].lock();
        if let Some(open) = st.open.take() {
            self.t.set_state(open.stripe, state::FULL);
            st.full.push(open.stripe);
        }
        let mut out = Heroes::default();
        out.hh.extend(st.hh.drain(..));
        for (mem, list) in st.vh.iter_mut().enumerate() {
            out.vh.extend(list.drain(..).map(|v| (mem, v)));
        }
        out
    }

    /// The window holds less than one batch (beyond GC's reserve).
    pub(crate) fn window_short(&self) -> bool {
        self.mgr.lock().window.len() < self.grant_batch() + GC_KEEP_HH
    }

    /// Whether [`take_grant`](Self::take_grant) would grant at least `want` hero groups now
    /// (capped at a batch and at what the window offers beyond GC's reserve): enough window
    /// HHs can form groups with the free VHs (each group takes one VH on each of its m parity
    /// members).
    pub(crate) fn grantable(&self, want: usize) -> bool {
        let mgr = self.mgr.lock();
        let cap = self.grant_batch().min(mgr.window.len().saturating_sub(GC_KEEP_HH));
        let batch = want.min(cap).max(1);
        let mut free: Vec<usize> = mgr.vh_free.iter().map(|v| v.len()).collect();
        let mut groups = 0;
        for &h in mgr.window.iter() {
            let s = h as u64;
            let parity = (0..self.geo.m).map(|i| self.geo.parity_member(s, i));
            if parity.clone().all(|p| self.is_failed(p) || free[p] > 0) {
                for p in parity.filter(|&p| !self.is_failed(p)) {
                    free[p] -= 1;
                }
                groups += 1;
                if groups >= batch {
                    return true;
                }
            }
        }
        false
    }

    /// Moves every reactor's list of full hero groups (by message) to the conversion queue.
    /// While the lists are on their way, `collecting` says so, so that nobody concludes from
    /// an empty queue that nothing is left to convert.
    pub(crate) async fn collect_full(self: &Arc<Self>) {
        self.mgr.lock().collecting += 1;
        let mut handles = Vec::new();
        for r in 0..self.io_reactors() {
            let inner = self.clone();
            self.c.manager_messages.inc();
            handles.push(spawn_on(r, move || async move {
                std::mem::take(&mut inner.reactors[current_reactor()].lock().full)
            }));
        }
        let mut stripes: Vec<u64> = join_all(handles).await.into_iter().flatten().collect();
        stripes.sort_unstable();
        {
            let mut mgr = self.mgr.lock();
            mgr.to_convert.extend(stripes);
            mgr.collecting -= 1;
        }
        self.vh_event.notify(usize::MAX);
    }

    /// Whether any reactor has full groups waiting (read without messages: a hint only).
    pub(crate) fn full_waiting(&self) -> bool {
        self.reactors.iter().any(|r| r.try_lock().is_none_or(|st| !st.full.is_empty()))
    }

    /// Free HHs (window, pool, pending) are below half the GC reserve.
    pub(crate) fn hh_low(&self) -> bool {
        let mgr = self.mgr.lock();
        ((mgr.window.len() + mgr.pool.len() + mgr.pending.len()) as u64)
            < self.geo.reserve_hh / 2 + 1
    }

    pub(crate) fn stats(&self) -> ScalaStats {
        let mgr = self.mgr.lock();
        let mut s = ScalaStats {
            free_hh: mgr.pool.len() as u64,
            window_hh: mgr.window.len() as u64,
            pending_hh: mgr.pending.len() as u64,
            free_vh: mgr.vh_free.iter().map(|v| v.len() as u64).sum(),
            ..Default::default()
        };
        drop(mgr);
        for r in &self.reactors {
            s.granted_hh += r.lock().hh.len() as u64;
        }
        for st in self.t.state.iter() {
            match st.load(Relaxed) {
                state::OPEN => s.open_stripes += 1,
                state::FULL => s.full_stripes += 1,
                state::CONVERTED => s.converted_stripes += 1,
                _ => {}
            }
        }
        s.mapped_blocks =
            self.t.amt.iter().filter(|e| super::tables::entry_is_data(e.load(Relaxed))).count()
                as u64;
        s
    }

    /// Flushes every live member.
    pub(crate) async fn flush_members(&self) -> DevResult<()> {
        if self.failed_count() > self.geo.m {
            return Err(DevError::DeviceFailed {
                name: format!("{}: more than {} members failed", self.info.name, self.geo.m),
            });
        }
        let members = self.members.read().clone();
        let futs = members.iter().enumerate().filter(|(i, _)| !self.is_failed(*i)).map(|(i, d)| {
            let d = d.clone();
            async move {
                let r = d.flush().await;
                (i, d, r)
            }
        });
        for (i, d, r) in join_all(futs).await {
            if let Err(e) = r {
                self.member_error(i, &d, e)?;
            }
        }
        Ok(())
    }

    /// Sets every stripe's VH list empty (after conversion or recovery).
    pub(crate) fn clear_vhs(&self, s: u64) {
        for i in 0..self.geo.m {
            self.t.set_vh(s, i, NONE);
        }
    }
}
