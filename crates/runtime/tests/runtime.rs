//! Goal: the runtime's contract holds on both implementations: timers fire at their time,
//! messages reach the reactor they were sent to, tasks on one reactor see their own reactor
//! id, CPU charging serialises work on a reactor (sim), a simulation is deterministic, and
//! tasks left over when a real reactor's thread exits are dropped without a panic even when
//! dropping one wakes another.
//! Method: small programs run on `sim` and `real`, asserting on what they observed (never on
//! how long the real runtime took).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use flashrig_runtime::{
    charge_cpu_ns, current_reactor, now_ns, num_reactors, register_poller, run, send, sleep_ns,
    spawn, spawn_on, yield_now, PollerStatus, RuntimeKind,
};

const BOTH: [RuntimeKind; 2] = [RuntimeKind::Sim, RuntimeKind::Real];

#[test]
fn sleeps_complete_no_earlier_than_asked() {
    for kind in BOTH {
        let (elapsed, _) = run(kind, 1, || async {
            let t0 = now_ns();
            sleep_ns(2_000_000).await;
            now_ns() - t0
        });
        assert!(elapsed >= 2_000_000, "{kind:?}: slept {elapsed} ns");
        if kind == RuntimeKind::Sim {
            assert_eq!(elapsed, 2_000_000, "virtual sleep is exact");
        }
    }
}

#[test]
fn messages_run_on_their_target_reactor() {
    for kind in BOTH {
        let (seen, stats) = run(kind, 4, || async {
            assert_eq!(num_reactors(), 4);
            let mut handles = Vec::new();
            for r in 0..4 {
                handles.push(spawn_on(r, move || async move {
                    sleep_ns(1000).await;
                    current_reactor()
                }));
            }
            let mut seen = Vec::new();
            for h in handles {
                seen.push(h.await);
            }
            seen
        });
        assert_eq!(seen, vec![0, 1, 2, 3], "{kind:?}");
        assert!(stats.reactors.iter().skip(1).all(|r| r.messages >= 1), "{kind:?}: {stats:?}");
    }
}

#[test]
fn messages_between_a_pair_arrive_in_order() {
    for kind in BOTH {
        let (order, _) = run(kind, 2, || async {
            let got = Arc::new(parking_lot::Mutex::new(Vec::new()));
            for i in 0..1000u32 {
                let got = got.clone();
                send(1, Box::new(move || got.lock().push(i)));
            }
            // A final message that answers back tells us reactor 1 drained its inbox.
            let done = spawn_on(1, || async {});
            done.await;
            let v = got.lock().clone();
            v
        });
        assert_eq!(order, (0..1000).collect::<Vec<_>>(), "{kind:?}");
    }
}

#[test]
fn sim_cpu_charging_serialises_work_on_one_reactor() {
    let ((a, b), stats) = run(RuntimeKind::Sim, 2, || async {
        // Two tasks on reactor 0 each charge 10 us: the second finishes at 20 us.
        let t1 = spawn(async {
            charge_cpu_ns(10_000).await;
            now_ns()
        });
        let t2 = spawn(async {
            charge_cpu_ns(10_000).await;
            now_ns()
        });
        (t1.await, t2.await)
    });
    assert_eq!((a, b), (10_000, 20_000));
    assert_eq!(stats.reactors[0].busy_ns, 20_000);
    assert_eq!(stats.reactors[1].busy_ns, 0);
    assert_eq!(stats.reactors[0].utilisation(stats.elapsed_ns), 1.0);
}

#[test]
fn sim_cpus_of_different_reactors_run_in_parallel() {
    let (t, _) = run(RuntimeKind::Sim, 2, || async {
        let other = spawn_on(1, || async {
            charge_cpu_ns(10_000).await;
            now_ns()
        });
        charge_cpu_ns(10_000).await;
        (now_ns(), other.await)
    });
    assert_eq!(t, (10_000, 10_000));
}

#[test]
fn pollers_run_periodically_until_they_stop() {
    for kind in BOTH {
        let (count, _) = run(kind, 1, move || async move {
            let count = Rc::new(RefCell::new(0u32));
            let c = count.clone();
            let t0 = now_ns();
            let first = Rc::new(RefCell::new(None));
            let f = first.clone();
            register_poller(100_000, move || {
                f.borrow_mut().get_or_insert(now_ns() - t0);
                *c.borrow_mut() += 1;
                if *c.borrow() < 5 {
                    PollerStatus::Busy
                } else {
                    PollerStatus::Done
                }
            });
            // Wait for the fifth run however long the machine takes (no timing assertion on
            // the real runtime), then make sure the poller stopped after it asked to.
            while *count.borrow() < 5 {
                sleep_ns(100_000).await;
            }
            sleep_ns(1_000_000).await;
            let first_ns = first.borrow().expect("poller ran");
            assert!(first_ns >= 100_000, "{kind:?}: first poll after {first_ns} ns, period 100 us");
            let n = *count.borrow();
            n
        });
        assert_eq!(count, 5, "{kind:?}");
    }
}

#[test]
#[should_panic(expected = "boom on reactor 1")]
fn real_runtime_surfaces_a_panic_on_another_reactor() {
    run(RuntimeKind::Real, 2, || async {
        spawn_on(1, || async {
            panic!("boom on reactor 1");
        })
        .await;
    });
}

#[test]
fn sim_is_deterministic() {
    fn trace() -> (Vec<(u64, usize, u32)>, u64) {
        let (log, stats) = run(RuntimeKind::Sim, 3, || async {
            let log = Arc::new(parking_lot::Mutex::new(Vec::new()));
            let mut hs = Vec::new();
            for i in 0..30u32 {
                let log = log.clone();
                hs.push(spawn_on(i as usize % 3, move || async move {
                    sleep_ns((i as u64 * 7919) % 1000).await;
                    charge_cpu_ns(100 + i as u64).await;
                    log.lock().push((now_ns(), current_reactor(), i));
                }));
            }
            for h in hs {
                h.await;
            }
            let v = log.lock().clone();
            v
        });
        (log, stats.events)
    }
    assert_eq!(trace(), trace());
}

#[test]
fn real_runtime_spreads_work_over_threads() {
    let (n, _) = run(RuntimeKind::Real, 2, || async {
        let counter = Arc::new(AtomicU64::new(0));
        let mut hs = Vec::new();
        for r in 0..2 {
            let c = counter.clone();
            hs.push(spawn_on(r, move || async move {
                for _ in 0..100 {
                    c.fetch_add(1, Ordering::Relaxed);
                    flashrig_runtime::yield_now().await;
                }
                std::thread::current().name().map(|s| s.to_string())
            }));
        }
        let mut names = Vec::new();
        for h in hs {
            names.push(h.await.unwrap());
        }
        assert_eq!(names, vec!["reactor-0".to_string(), "reactor-1".to_string()]);
        counter.load(Ordering::Relaxed)
    });
    assert_eq!(n, 200);
}

#[test]
#[should_panic(expected = "simulation stalled")]
fn sim_reports_a_lost_wakeup() {
    run(RuntimeKind::Sim, 1, || async {
        std::future::pending::<()>().await;
    });
}

/// A task still queued when its reactor's thread exits is dropped there; if dropping it wakes
/// another task of that reactor (a lock handed on by a future's `Drop`), the wake-up must be
/// dropped quietly, not panic in the exiting thread.
#[test]
fn waking_a_task_while_the_reactor_thread_exits_is_harmless() {
    struct WakeOnDrop(Option<std::task::Waker>);
    impl Drop for WakeOnDrop {
        fn drop(&mut self) {
            if let Some(w) = self.0.take() {
                w.wake();
            }
        }
    }
    let (done, _) = run(RuntimeKind::Real, 2, || async {
        spawn_on(1, || async {
            // B waits forever and leaves its waker with A; A yields forever, so it sits in
            // the ready queue when the run ends.
            let slot: Rc<RefCell<Option<std::task::Waker>>> = Rc::new(RefCell::new(None));
            let s = slot.clone();
            drop(spawn(std::future::poll_fn(move |cx| {
                *s.borrow_mut() = Some(cx.waker().clone());
                std::task::Poll::<()>::Pending
            })));
            yield_now().await;
            drop(spawn(async move {
                let _guard = WakeOnDrop(slot.borrow_mut().take());
                loop {
                    yield_now().await;
                }
            }));
        })
        .await;
        true
    });
    assert!(done);
}

/// Tasks still waiting when a simulation ends (detached background tasks asleep on long
/// timers, on two reactors) are dropped with the run, and their memory with them. They used
/// to keep the runtime alive from its own ready queue, so every run leaked (found through the
/// reliability swarm's memory growth).
#[test]
fn tasks_left_waiting_at_the_end_of_a_simulation_are_dropped() {
    let held = Arc::new(vec![0u8; 1 << 20]);
    for _ in 0..3 {
        let (h1, h2) = (held.clone(), held.clone());
        let ((), _) = run(RuntimeKind::Sim, 2, move || async move {
            spawn(async move {
                sleep_ns(1_000_000_000_000).await;
                drop(h1);
            });
            spawn_on(1, move || async move {
                sleep_ns(u64::MAX / 4).await;
                drop(h2);
            });
            sleep_ns(1_000).await;
        });
    }
    assert_eq!(Arc::strong_count(&held), 1, "a task outlived its simulation");
}

/// A task waiting on something its own future owns, which nothing else will ever wake, is
/// dropped when the simulation ends too: an engine's service task waiting on an event of the
/// engine it holds. Its waker lives inside what it holds, so neither timers nor the ready
/// queue reach it, and it kept a whole emulated stack alive per run (`reproduce csal` grew
/// by 1.2 GB a run). Method: a task holds an `Arc` to a cell that stores the task's own waker
/// and waits forever; after the run, a `Weak` to the cell must be dead.
#[test]
fn a_task_waiting_on_what_it_owns_is_dropped_at_the_end_of_a_simulation() {
    use std::future::poll_fn;
    use std::task::{Poll, Waker};
    struct Owned {
        waker: parking_lot::Mutex<Option<Waker>>,
        _payload: Vec<u8>,
    }
    let (weak, _) = run(RuntimeKind::Sim, 1, || async {
        let owned = Arc::new(Owned { waker: Default::default(), _payload: vec![0u8; 1 << 20] });
        let weak = Arc::downgrade(&owned);
        spawn(async move {
            poll_fn(|cx| {
                // Parked on itself: the only waker is stored where only this task can reach.
                *owned.waker.lock() = Some(cx.waker().clone());
                Poll::<()>::Pending
            })
            .await;
        });
        sleep_ns(1_000).await;
        weak
    });
    assert!(weak.upgrade().is_none(), "a task that waits on what it owns outlived its run");
}
