//! One run of the swarm: carries out a [`Plan`] on the simulated runtime and checks every read
//! and every crash state against the reference model.
//!
//! A round runs the seeded driver against the stack's top fuse. A trigger on the members'
//! fuses (or the top's, or a timer) cuts the power; every tear of the cut is then a crash
//! state of its own: the members' media are copied, a seeded subset of the unflushed blocks
//! lands, the engine opens (with cuts during that recovery, as the plan says, each followed by
//! another recovery), and every block the model knows is read back and must hold what may
//! have survived. The run goes on from the last tear. A round with members lost pulls them at
//! a moment of the clock, rebuilds blank replacements while the driver runs, and ends with a
//! flush and a full read-back. An overload pulls more members than the stack tolerates: every
//! read must then fail or return the right data.

use std::collections::BTreeMap;
use std::sync::Arc;

use flashrig_blockdev::{DevRef, VendorCommand, VendorReply};
use std::sync::atomic::{AtomicBool, Ordering};

use flashrig_check::{
    run_ops, verify_after_crash, verify_all, CheckConfig, Count, Fuse, Model, Trigger,
};
use flashrig_runtime::{run, sleep_ns, spawn, RuntimeKind};
use parking_lot::Mutex;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::plan::{CrashPoint, Plan};
use crate::stack::{start, CrashImage, Instance, Members};

/// What one run did (summed over runs by the swarm).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub runs: u64,
    /// Crash states opened and checked block by block.
    pub crash_states: u64,
    /// Power cuts by where they landed: `member`, `host`, `flush`, `time`.
    pub cuts: BTreeMap<&'static str, u64>,
    /// Cuts during recovery.
    pub recovery_cuts: u64,
    /// Unflushed blocks whose fate tears decided, and how many of them landed.
    pub open_blocks: u64,
    pub landed_blocks: u64,
    pub member_losses: u64,
    pub rebuilds: u64,
    /// Second members pulled while the first one's rebuild ran.
    pub losses_during_rebuild: u64,
    /// Runs that ended with more members pulled than tolerated, and the reads that failed
    /// with a typed error then.
    pub overloads: u64,
    pub overload_refused_reads: u64,
    /// Commands the driver completed, and blocks compared with the model.
    pub commands: u64,
    pub blocks_checked: u64,
    /// Engine instances with background tasks started (`scala`), and how many of them were
    /// still alive after their run ended (a leak).
    pub instances: u64,
    pub instances_outlived: u64,
    /// Silent faults: blocks rotted, member writes lost or misdirected, and the scrubs that
    /// ended those rounds with what they repaired.
    pub flipped_blocks: u64,
    pub lost_writes: u64,
    pub misdirected_writes: u64,
    pub scrubs: u64,
    pub scrub_repaired: u64,
    /// Rounds with a slow member, and the reads the engine served around it.
    pub slow_rounds: u64,
    pub slow_reads_routed: u64,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        self.runs += o.runs;
        self.crash_states += o.crash_states;
        for (k, v) in &o.cuts {
            *self.cuts.entry(k).or_default() += v;
        }
        self.recovery_cuts += o.recovery_cuts;
        self.open_blocks += o.open_blocks;
        self.landed_blocks += o.landed_blocks;
        self.member_losses += o.member_losses;
        self.rebuilds += o.rebuilds;
        self.losses_during_rebuild += o.losses_during_rebuild;
        self.overloads += o.overloads;
        self.overload_refused_reads += o.overload_refused_reads;
        self.commands += o.commands;
        self.blocks_checked += o.blocks_checked;
        self.instances += o.instances;
        self.instances_outlived += o.instances_outlived;
        self.flipped_blocks += o.flipped_blocks;
        self.lost_writes += o.lost_writes;
        self.misdirected_writes += o.misdirected_writes;
        self.scrubs += o.scrubs;
        self.scrub_repaired += o.scrub_repaired;
        self.slow_rounds += o.slow_rounds;
        self.slow_reads_routed += o.slow_reads_routed;
    }
}

/// Runs `plan` on the simulated runtime; `Err` says what went wrong and where.
pub fn execute(plan: &Plan) -> Result<Tally, String> {
    let plan = plan.clone();
    let (res, _) = run(RuntimeKind::Sim, plan.reactors, move || async move {
        let mut t = Tally { runs: 1, ..Tally::default() };
        let outcome = go(&plan, &mut t).await.map(|()| t);
        (outcome, LIVE.with(|l| std::mem::take(&mut *l.borrow_mut())))
    });
    let (outcome, live) = res;
    let mut tally = outcome?;
    // Every engine instance of the run, those abandoned at power cuts included, should be
    // gone with the run: one that is not was kept alive by a task waiting forever on something
    // the instance itself owns, and a long-running process leaks it. Counted, not failed:
    // `scala` still leaks some (docs/reliability.md, "Not tested yet").
    tally.instances += live.len() as u64;
    tally.instances_outlived += live.iter().filter(|w| w.strong_count() > 0).count() as u64;
    Ok(tally)
}

thread_local! {
    /// Liveness tokens of the engine instances started by the run on this thread.
    static LIVE: std::cell::RefCell<Vec<std::sync::Weak<()>>> = const {
        std::cell::RefCell::new(Vec::new())
    };
}

/// The engine instance of this power-on, the top of the stack the driver uses, and the
/// triggers on the members' fuses and on the top.
struct Up {
    inst: Instance,
    top: DevRef,
    member_trigger: Arc<Trigger>,
    top_trigger: Arc<Trigger>,
}

/// Powers on and starts the engine (fresh, or by recovery) with fresh triggers.
async fn power_up(
    plan: &Plan,
    members: &Members,
    fresh: bool,
    member_trigger: Arc<Trigger>,
) -> Result<Up, String> {
    let devs = members.power_on(Some(member_trigger.clone()));
    let inst = start(&plan.stack, devs, plan.reactors, fresh, plan.planted_bug)
        .await
        .map_err(|e| format!("{} the engine: {e}", if fresh { "creating" } else { "opening" }))?;
    if let Some(w) = inst.liveness() {
        LIVE.with(|l| l.borrow_mut().push(w));
    }
    let top_trigger = Trigger::new();
    let top: DevRef = Arc::new(Fuse::new(inst.dev(), members.power(), Some(top_trigger.clone())));
    Ok(Up { inst, top, member_trigger, top_trigger })
}

/// After a cut: opens the engine again, cutting power during recovery after each of `nested`
/// member completions (each cut followed by a tear of what that recovery left unflushed).
async fn recover(
    plan: &Plan,
    members: &Arc<Members>,
    nested: &[u64],
    seed: u64,
    t: &mut Tally,
) -> Result<Up, String> {
    for (i, &n) in nested.iter().enumerate() {
        let trig = Trigger::new();
        let image: Arc<Mutex<Option<CrashImage>>> = Arc::default();
        {
            let (members, image) = (members.clone(), image.clone());
            trig.arm(Count::All, n, move || *image.lock() = members.power_cut());
        }
        let res = power_up(plan, members, false, trig.clone()).await;
        if !trig.fired() {
            // Recovery finished in fewer than n commands: this is the instance to go on with.
            let up = res.map_err(|e| format!("recovery: {e}"))?;
            up.member_trigger.disarm();
            return Ok(up);
        }
        t.recovery_cuts += 1;
        let img = image.lock().take();
        members.restore(img.as_ref(), seed.wrapping_add(1000 + i as u64), 50);
    }
    let cuts = nested.len();
    power_up(plan, members, false, Trigger::new())
        .await
        .map_err(|e| format!("recovery (after {cuts} cuts during recovery): {e}"))
}

async fn flush(dev: &DevRef, model: &Arc<Mutex<Model>>) -> Result<(), String> {
    let token = model.lock().flush_issued();
    dev.flush().await.map_err(|e| format!("flush: {e}"))?;
    model.lock().flush_done(token);
    Ok(())
}

async fn go(plan: &Plan, t: &mut Tally) -> Result<(), String> {
    let members = Arc::new(Members::new(&plan.stack)?);
    let promise = plan.stack.promise();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(plan.seed.wrapping_mul(0x9E37_79B9));
    let mut up = power_up(plan, &members, true, Trigger::new()).await?;
    let mut model = Arc::new(Mutex::new(Model::for_device(up.top.info(), plan.seed)));
    for (r, round) in plan.rounds.iter().enumerate() {
        let ctx = |what: String| format!("round {r}: {what}");
        // Arm the round's power cut. The cut takes the crash image as it happens.
        let image: Arc<Mutex<Option<CrashImage>>> = Arc::default();
        let cut = {
            let (members, image) = (members.clone(), image.clone());
            move || *image.lock() = members.power_cut()
        };
        let round_over = Arc::new(AtomicBool::new(false));
        let cut_now = Arc::new(AtomicBool::new(false));
        match round.crash {
            Some(CrashPoint::Member(n)) => up.member_trigger.arm(Count::All, n, cut),
            Some(CrashPoint::Host(n)) => up.top_trigger.arm(Count::All, n, cut),
            Some(CrashPoint::Flush(n)) => up.top_trigger.arm(Count::Flushes, n, cut),
            Some(CrashPoint::Time(ns)) => {
                let (over, fired) = (round_over.clone(), cut_now.clone());
                spawn(async move {
                    sleep_ns(ns).await;
                    if !over.load(Ordering::SeqCst) {
                        fired.store(true, Ordering::SeqCst);
                        cut();
                    }
                });
            }
            None => {}
        }
        // Members lost this round, rebuilt onto blank replacements while the driver runs.
        let loss = round.loss.clone().map(|loss| {
            let members = members.clone();
            let trig = up.member_trigger.clone();
            let inst = up.inst.clone();
            spawn(async move {
                sleep_ns(loss.at_ns).await;
                // A second loss during the first one's rebuild is pulled by a task of its own.
                let (now, later) = match loss.second_after_ns {
                    Some(ns) => (&loss.members[..1], Some((loss.members[1], ns))),
                    None => (&loss.members[..], None),
                };
                for &i in now {
                    members.pull(i);
                    inst.fail_member(i);
                }
                let rebuilding = Arc::new(AtomicBool::new(false));
                let mut second = later.map(|(i, ns)| {
                    let (members, inst, rebuilding) =
                        (members.clone(), inst.clone(), rebuilding.clone());
                    spawn(async move {
                        sleep_ns(ns).await;
                        members.pull(i);
                        inst.fail_member(i);
                        rebuilding.load(Ordering::SeqCst)
                    })
                });
                let mut during_rebuild = false;
                if loss.rebuild {
                    for (n, &i) in loss.members.iter().enumerate() {
                        if n == 1 {
                            if let Some(h) = second.take() {
                                during_rebuild = h.await;
                            }
                        }
                        let fresh = members.replacement(i, Some(trig.clone()));
                        rebuilding.store(true, Ordering::SeqCst);
                        inst.rebuild(i, fresh)
                            .await
                            .map_err(|e| format!("rebuilding member {i}: {e}"))?;
                        rebuilding.store(false, Ordering::SeqCst);
                    }
                }
                Ok::<_, String>((loss.members.len(), during_rebuild))
            })
        });
        // Silent faults: write faults armed now, bits flipped at moments of the round.
        let routed = || up.inst.dev().metrics().map_or(0, |r| r.counter("slow_reads_routed").get());
        let routed_before = routed();
        let slow = round.rot.as_ref().and_then(|rot| rot.slow);
        if let Some((slot, ns)) = slow {
            members.set_delay(slot, ns);
        }
        let flips = round.rot.as_ref().map(|rot| {
            for &(slot, n, fault) in &rot.writes {
                members.arm_write(slot, n, fault);
            }
            let mut flips = rot.flips.clone();
            flips.sort_by_key(|f| f.3);
            let members = members.clone();
            spawn(async move {
                let (mut done, mut waited) = (0u64, 0u64);
                for (slot, lba, bit, at_ns) in flips {
                    sleep_ns(at_ns - waited).await;
                    waited = at_ns;
                    done += members.rot(slot, lba, bit) as u64;
                }
                done
            })
        });
        let cfg = CheckConfig {
            seed: plan.seed.wrapping_mul(1000) + r as u64,
            ops: round.ops,
            ..plan.workload.clone()
        };
        let driven = run_ops(up.top.clone(), model.clone(), &cfg).await;
        if let Some(h) = loss {
            let (lost, during_rebuild) = h.await.map_err(ctx)?;
            t.member_losses += lost as u64;
            t.rebuilds += lost as u64;
            t.losses_during_rebuild += during_rebuild as u64;
        }
        round_over.store(true, Ordering::SeqCst);
        let was_cut =
            up.member_trigger.fired() || up.top_trigger.fired() || cut_now.load(Ordering::SeqCst);
        up.member_trigger.disarm();
        up.top_trigger.disarm();
        match &driven {
            Ok(rep) => {
                t.commands += rep.reads + rep.writes + rep.trims + rep.flushes;
                t.blocks_checked += rep.blocks_checked;
            }
            Err(e) if e.mismatch || !was_cut => return Err(ctx(e.message.clone())),
            Err(_) => {}
        }
        if !was_cut {
            // The round ends cleanly: everything flushed must read back. After silent faults
            // (every flip done first), those reads heal what they meet, and a scrub the rest.
            if let Some(h) = flips {
                t.flipped_blocks += h.await;
                members.disarm_writes();
            }
            if let Some((slot, _)) = slow {
                members.set_delay(slot, 0);
                t.slow_rounds += 1;
                t.slow_reads_routed += routed() - routed_before;
            }
            flush(&up.top, &model).await.map_err(ctx)?;
            t.blocks_checked += verify_all(&up.top, &model).await.map_err(ctx)?;
            if round.rot.is_some() {
                scrub(&up, t).await.map_err(ctx)?;
                t.blocks_checked += verify_all(&up.top, &model).await.map_err(ctx)?;
            }
            continue;
        }
        let kind = match round.crash {
            Some(CrashPoint::Member(_)) => "member",
            Some(CrashPoint::Host(_)) => "host",
            Some(CrashPoint::Flush(_)) => "flush",
            _ => "time",
        };
        *t.cuts.entry(kind).or_default() += 1;
        let image = image.lock().take();
        if let Some(img) = &image {
            t.open_blocks += img.open_blocks() as u64;
        }
        // An SSD's crash state cannot be copied: one state per cut where any member is one.
        let tears = if members.any_ssd() { 1 } else { round.tears.max(1) };
        for tear in 0..tears {
            let last = tear + 1 == tears;
            let percent = match rng.next_u64() % 4 {
                0 => 0,
                1 => 100,
                _ => (1 + rng.next_u64() % 99) as u8,
            };
            let tear_seed =
                plan.seed.wrapping_mul(7919).wrapping_add((r as u64) << 8 | tear as u64);
            t.landed_blocks += members.restore(image.as_ref(), tear_seed, percent) as u64;
            let nested: &[u64] = if last { &round.nested } else { &[] };
            let state = if members.on_ssds() {
                "the SSDs' own power loss".to_string()
            } else if members.any_ssd() {
                format!("the SSDs' own power loss, {percent}% of RAM members' unflushed landed")
            } else {
                format!("tear {tear}: {percent}% of unflushed blocks landed")
            };
            let next = recover(plan, &members, nested, tear_seed, t)
                .await
                .map_err(|e| ctx(format!("{state}: {e}")))?;
            // Only the state the run goes on from needs whole redundancy (for the losses and
            // rot of later rounds); the others are read back and dropped.
            if promise.resyncs_after_crash && last {
                scrub(&next, t).await.map_err(|e| ctx(format!("{state}: resync: {e}")))?;
            }
            let m = Arc::new(Mutex::new(model.lock().clone()));
            if promise.acked_is_durable {
                let mut g = m.lock();
                let token = g.flush_issued();
                g.flush_done(token);
            }
            t.blocks_checked += verify_after_crash(&next.top, &m)
                .await
                .map_err(|e| ctx(format!("{state}: {e}")))?;
            t.crash_states += 1;
            if last {
                up = next;
                model = m;
            } else {
                // Discard this state: the next tear starts from the cut's image again.
                members.power_cut();
            }
        }
    }
    let injected = members.rot_counts();
    t.lost_writes += injected.lost_writes;
    t.misdirected_writes += injected.misdirected_writes;
    flush(&up.top, &model).await.map_err(|e| format!("the end: {e}"))?;
    t.blocks_checked += verify_all(&up.top, &model).await.map_err(|e| format!("the end: {e}"))?;
    if plan.overload {
        overload(plan, &members, &up, &model, t).await?;
    }
    Ok(())
}

/// Scrubs the engine after a round of silent faults: damage on no more members than it
/// tolerates must leave nothing unrepairable.
async fn scrub(up: &Up, t: &mut Tally) -> Result<(), String> {
    let report = match up.inst.dev().vendor(VendorCommand::Scrub).await {
        Ok(VendorReply::Scrubbed(r)) => r,
        Ok(other) => return Err(format!("scrub answered {other:?}")),
        Err(e) => return Err(format!("scrub: {e}")),
    };
    if !report.clean() {
        return Err(format!("scrub left blocks unrepairable: {report:?}"));
    }
    t.scrubs += 1;
    t.scrub_repaired += report.repaired;
    Ok(())
}

/// Pulls one member more than the stack tolerates and reads every block the model knows,
/// one at a time: each read must fail or return what the model expects.
async fn overload(
    plan: &Plan,
    members: &Members,
    up: &Up,
    model: &Arc<Mutex<Model>>,
    t: &mut Tally,
) -> Result<(), String> {
    let n = plan.stack.members();
    let pull = (plan.stack.promise().failures_tolerated + 1).min(n);
    for i in 0..pull {
        members.pull((plan.seed as usize + i) % n);
    }
    t.overloads += 1;
    let (lbas, bs, mdb) = {
        let m = model.lock();
        (m.touched_lbas(), m.block_size(), m.md_bytes())
    };
    for lba in lbas {
        let mut buf = vec![0u8; bs];
        let mut md = (mdb > 0).then(|| vec![0u8; mdb]);
        match up.top.read(lba, &mut buf, md.as_deref_mut()).await {
            Ok(()) => {
                model
                    .lock()
                    .check_read(lba, &buf, md.as_deref())
                    .map_err(|e| format!("with {pull} of {n} members lost: {e}"))?;
                t.blocks_checked += 1;
            }
            Err(_) => t.overload_refused_reads += 1,
        }
    }
    Ok(())
}
