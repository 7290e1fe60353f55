//! Goal: the host cost model charges exactly what it says. In the simulation every `charge_*`
//! advances the calling reactor's virtual time and busy time by the modelled amount; the
//! shared-lock model serialises critical sections across reactors, charges spinning and
//! hand-offs as CPU, and never makes one reactor wait for itself; in the real runtime charges
//! and passes return at once. The kernel profile's paper-derived figures follow from their
//! documented arithmetic.
//!
//! Method: small programs on `run(RuntimeKind::Sim, ..)` with hand-picked cost tables, asserting
//! on virtual time, per-reactor busy time and the lock model's counters (all exact: the
//! simulation is deterministic); on the real runtime, only that the calls complete and count
//! nothing (no timing assertion).

use std::sync::Arc;

use flashrig_runtime::cost::{
    SharedLockModel, FSR_REP_AFA_OTHER_SHARE, FSR_REP_BIOS_PER_REQUEST, FSR_REP_BLOCK_LAYER_SHARE,
    FSR_REP_CONTEXT_SWITCH_SHARE, FSR_REP_GBPS_BY_THREADS, FSR_REP_THREAD_NS_PER_REQUEST,
    KERNEL_MEMBER_IO_NS, KERNEL_REQUEST_NS, KERNEL_SYNC_NS,
};
use flashrig_runtime::{now_ns, run, spawn, spawn_on, HostCosts, RuntimeKind};

fn costs() -> HostCosts {
    HostCosts {
        request_ns: 5_000,
        member_io_ns: 800,
        parity_ns_per_kib: 100.0,
        copy_ns_per_kib: 50.0,
        map_update_ns: 7,
        lock_handoff_ns: 300,
        lock_hold_ns: 1_000,
        sync_ns_by_threads: Vec::new(),
    }
}

#[test]
fn sim_charges_advance_time_and_busy_time_exactly() {
    let ((steps, end), stats) = run(RuntimeKind::Sim, 2, || async {
        let c = costs();
        let mut steps = Vec::new();
        let mut t = now_ns();
        c.charge_request().await;
        steps.push(now_ns() - t);
        t = now_ns();
        c.charge_member_ios(3).await;
        steps.push(now_ns() - t);
        t = now_ns();
        c.charge_parity(256 * 1024).await; // 256 KiB x 100 ns
        steps.push(now_ns() - t);
        t = now_ns();
        c.charge_copy(64 * 1024 + 512).await; // 64.5 KiB x 50 ns
        steps.push(now_ns() - t);
        t = now_ns();
        c.charge_map_updates(10).await;
        steps.push(now_ns() - t);
        (steps, now_ns())
    });
    assert_eq!(steps, vec![5_000, 2_400, 25_600, 3_225, 70]);
    assert_eq!(end, 5_000 + 2_400 + 25_600 + 3_225 + 70);
    assert_eq!(stats.reactors[0].busy_ns, end, "every charged ns is busy time");
    assert_eq!(stats.reactors[1].busy_ns, 0, "nothing charged to the idle reactor");
}

#[test]
fn sim_charges_of_one_reactor_queue_behind_each_other() {
    let (ends, stats) = run(RuntimeKind::Sim, 1, || async {
        let c = Arc::new(costs());
        let mut hs = Vec::new();
        for _ in 0..4 {
            let c = c.clone();
            hs.push(spawn(async move {
                c.charge_request().await;
                now_ns()
            }));
        }
        let mut ends = Vec::new();
        for h in hs {
            ends.push(h.await);
        }
        ends
    });
    assert_eq!(ends, vec![5_000, 10_000, 15_000, 20_000]);
    assert_eq!(stats.reactors[0].busy_ns, 20_000);
}

#[test]
fn zero_cost_profile_charges_nothing() {
    let (t, stats) = run(RuntimeKind::Sim, 1, || async {
        let c = HostCosts::default();
        c.charge_request().await;
        c.charge_member_ios(5).await;
        c.charge_parity(1 << 20).await;
        c.charge_copy(1 << 20).await;
        c.charge_map_updates(100).await;
        SharedLockModel::new().pass(&c).await;
        now_ns()
    });
    assert_eq!(t, 0);
    assert_eq!(stats.reactors[0].busy_ns, 0);
}

#[test]
fn one_reactor_never_spins_nor_pays_a_hand_off() {
    const N: u64 = 50;
    let lock = Arc::new(SharedLockModel::new());
    let l = lock.clone();
    let (end, stats) = run(RuntimeKind::Sim, 2, move || async move {
        // 4 tasks on reactor 0 pass the lock N times each, interleaved with other work.
        let c = Arc::new(costs());
        let mut hs = Vec::new();
        for _ in 0..4 {
            let (c, l) = (c.clone(), l.clone());
            hs.push(spawn(async move {
                for _ in 0..N {
                    c.charge_member_ios(1).await;
                    l.pass(&c).await;
                }
            }));
        }
        for h in hs {
            h.await;
        }
        now_ns()
    });
    assert_eq!(lock.acquisitions(), 4 * N);
    assert_eq!(lock.contended(), 0, "{lock:?}");
    assert_eq!(lock.handoffs(), 0, "{lock:?}");
    assert_eq!(lock.spin_ns(), 0);
    // The reactor's CPU did nothing but the charged work, back to back.
    assert_eq!(stats.reactors[0].busy_ns, 4 * N * (800 + 1_000));
    assert_eq!(end, stats.reactors[0].busy_ns);
}

/// Two reactors each pass the lock `n` times back to back (`tasks` tasks per reactor).
/// Returns (virtual end, busy ns per reactor, the lock model).
fn two_reactors(n: u64, tasks: usize) -> (u64, Vec<u64>, Arc<SharedLockModel>) {
    let lock = Arc::new(SharedLockModel::new());
    let l = lock.clone();
    let (end, stats) = run(RuntimeKind::Sim, 2, move || async move {
        let mut hs = Vec::new();
        for r in 0..2 {
            for _ in 0..tasks {
                let l = l.clone();
                hs.push(spawn_on(r, move || async move {
                    let c = costs();
                    for _ in 0..n {
                        l.pass(&c).await;
                    }
                }));
            }
        }
        for h in hs {
            h.await;
        }
        now_ns()
    });
    (end, stats.reactors.iter().map(|r| r.busy_ns).collect(), lock)
}

#[test]
fn the_lock_serialises_critical_sections_across_reactors() {
    const N: u64 = 100;
    let c = costs();
    let (end, busy, lock) = two_reactors(N, 1);
    assert_eq!(lock.acquisitions(), 2 * N);
    // One critical section at a time: 2N holds end to end at least.
    assert!(end >= 2 * N * c.lock_hold_ns, "end {end} ns");
    // Strict alternation: every pass but the first takes the lock from the other reactor and
    // waits for it.
    assert_eq!(lock.handoffs(), 2 * N - 1, "{lock:?}");
    assert_eq!(lock.contended(), 2 * N - 1, "{lock:?}");
    assert_eq!(end, 2 * N * c.lock_hold_ns + (2 * N - 1) * c.lock_handoff_ns);
    assert_eq!(lock.free_at_ns(), end, "the lock timeline and the CPUs agree");
    // Spinning burns CPU: busy time is holds, hand-offs and spins, exactly.
    let total: u64 = busy.iter().sum();
    assert_eq!(
        total,
        2 * N * c.lock_hold_ns + lock.handoffs() * c.lock_handoff_ns + lock.spin_ns()
    );
    assert!(lock.spin_ns() > 0);
    // Both cores were busy (spinning or holding) nearly all the time.
    for b in &busy {
        assert!(*b + c.lock_hold_ns + c.lock_handoff_ns >= end, "busy {busy:?}, end {end}");
    }
}

#[test]
fn tasks_of_one_reactor_take_turns_and_do_not_spin_on_each_other() {
    // 8 tasks per reactor: the same critical sections, the same timeline as 1 task per
    // reactor doing all of them, because a core runs one critical section at a time.
    const N: u64 = 20;
    let (end8, busy8, lock8) = two_reactors(N, 8);
    let (end1, busy1, lock1) = two_reactors(8 * N, 1);
    assert_eq!(lock8.acquisitions(), lock1.acquisitions());
    assert_eq!(end8, end1);
    assert_eq!(busy8, busy1);
    assert_eq!(lock8.spin_ns(), lock1.spin_ns());
}

#[test]
fn the_lock_model_is_deterministic() {
    let run_once = || {
        let (end, busy, lock) = two_reactors(30, 3);
        (end, busy, lock.acquisitions(), lock.contended(), lock.handoffs(), lock.spin_ns())
    };
    assert_eq!(run_once(), run_once());
}

#[test]
fn a_cancelled_pass_hands_its_turn_on() {
    let lock = Arc::new(SharedLockModel::new());
    let l = lock.clone();
    let (done, _) = run(RuntimeKind::Sim, 1, move || async move {
        let c = Arc::new(costs());
        // The first task holds the reactor's turn for its hold time; the second waits for the
        // turn and is cancelled while waiting; the third must still get through.
        let first = {
            let (c, l) = (c.clone(), l.clone());
            spawn(async move { l.pass(&c).await })
        };
        let second = {
            let (c, l) = (c.clone(), l.clone());
            spawn(async move { l.pass(&c).await })
        };
        let third = {
            let (c, l) = (c.clone(), l.clone());
            spawn(async move {
                l.pass(&c).await;
                now_ns()
            })
        };
        flashrig_runtime::yield_now().await;
        second.cancel();
        first.await;
        third.await
    });
    assert_eq!(done, 2 * costs().lock_hold_ns);
    assert_eq!(lock.acquisitions(), 2);
}

#[test]
fn real_runtime_charges_and_passes_return_at_once() {
    let lock = Arc::new(SharedLockModel::new());
    let l = lock.clone();
    let (n, _) = run(RuntimeKind::Real, 2, move || async move {
        // Costs of an hour each: were they charged, the test would not finish.
        let hour = 3_600_000_000_000u64;
        let c = HostCosts {
            request_ns: hour,
            member_io_ns: hour,
            parity_ns_per_kib: hour as f64,
            copy_ns_per_kib: hour as f64,
            map_update_ns: hour,
            lock_handoff_ns: hour,
            lock_hold_ns: hour,
            sync_ns_by_threads: vec![(1, hour), (2, 2 * hour)],
        };
        let mut n = 0;
        for _ in 0..100 {
            c.charge_request().await;
            c.charge_member_ios(2).await;
            c.charge_parity(4096).await;
            c.charge_copy(4096).await;
            c.charge_map_updates(1).await;
            l.pass(&c).await;
            n += 1;
        }
        let other = {
            let l = l.clone();
            spawn_on(1, move || async move {
                l.pass(&HostCosts::kernel()).await;
            })
        };
        other.await;
        n
    });
    assert_eq!(n, 100);
    assert_eq!(lock.acquisitions(), 0, "the real runtime's lock model is a no-op");
}

#[test]
fn a_request_pays_the_synchronisation_of_the_runtimes_threads() {
    // The same request costs request_ns alone on one reactor and request_ns + sync(4) on four.
    let c = HostCosts { sync_ns_by_threads: vec![(1, 0), (2, 1_000), (8, 7_000)], ..costs() };
    for (reactors, want) in [(1, 5_000), (4, 5_000 + 3_000)] {
        let c = c.clone();
        let (took, _) = run(RuntimeKind::Sim, reactors, move || async move {
            let t = now_ns();
            c.charge_request().await;
            now_ns() - t
        });
        assert_eq!(took, want, "{reactors} reactors");
    }
}

#[test]
fn kernel_profile_follows_its_documented_arithmetic() {
    // 65536 B / 4.8 GB/s = 13 653.3 ns of thread time per 64 KiB request.
    assert!((FSR_REP_THREAD_NS_PER_REQUEST - 13_653.333).abs() < 0.001);
    let t = FSR_REP_THREAD_NS_PER_REQUEST;
    let bio = t * FSR_REP_BLOCK_LAYER_SHARE / FSR_REP_BIOS_PER_REQUEST;
    let request = t * FSR_REP_CONTEXT_SWITCH_SHARE + bio + t * FSR_REP_AFA_OTHER_SHARE;
    assert_eq!(KERNEL_REQUEST_NS, request.round() as u64);
    assert_eq!(KERNEL_MEMBER_IO_NS, bio.round() as u64);
    // Every share but the I/O stall (20.8%): 79.2% of the thread per replicated request.
    let replicated = KERNEL_REQUEST_NS + 2 * KERNEL_MEMBER_IO_NS;
    assert!((replicated as f64 / t - 0.792).abs() < 0.001, "{replicated}");
    // Synchronisation: thread time per request at T threads minus one thread's.
    let thread_ns = |threads: u32, gbps: f64| threads as f64 * 65_536.0 / gbps;
    let (t1, g1) = FSR_REP_GBPS_BY_THREADS[0];
    for (i, &(threads, gbps)) in FSR_REP_GBPS_BY_THREADS.iter().enumerate() {
        let sync = thread_ns(threads, gbps) - thread_ns(t1, g1);
        assert_eq!(KERNEL_SYNC_NS[i], (threads, sync.round() as u64));
    }
    let k = HostCosts::kernel();
    assert_eq!((k.request_ns, k.member_io_ns), (9_102, 856));
    assert_eq!(k.sync_ns_by_threads, KERNEL_SYNC_NS.to_vec());
    // Interpolated between the measured points, extended with the last slope, none alone.
    assert_eq!(k.sync_ns(1), 0);
    assert_eq!(k.sync_ns(2), 4_551);
    assert_eq!(k.sync_ns(5), 4_551 + (29_321 - 4_551) / 2);
    assert_eq!(k.sync_ns(8), 29_321);
    assert_eq!(k.sync_ns(12), 29_321 + ((29_321 - 4_551) as f64 * 4.0 / 6.0).round() as u64);
    assert_eq!(HostCosts::user().sync_ns(8), 0);
    // The measured figures are committed (nonzero) and shared by both profiles.
    let u = HostCosts::user();
    for p in [&k, &u] {
        assert!(p.parity_ns_per_kib > 0.0 && p.copy_ns_per_kib > 0.0, "{p:?}");
        assert!(p.map_update_ns > 0 && p.lock_handoff_ns > 0 && p.lock_hold_ns > 0, "{p:?}");
    }
    assert!(u.request_ns > 0 && u.member_io_ns > 0, "{u:?}");
    assert!(u.request_ns < k.request_ns, "a polled user-space submit is cheaper than a syscall");
    assert_eq!(HostCosts::named("kernel"), Some(k));
    assert_eq!(HostCosts::named("none"), Some(HostCosts::default()));
    assert_eq!(HostCosts::named("bogus"), None);
}

#[test]
fn the_lock_model_is_shared_by_every_reactor() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<SharedLockModel>();
    send_sync::<HostCosts>();
}
