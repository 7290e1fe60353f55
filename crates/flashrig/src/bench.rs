//! `flashrig bench`: the runtime's own speed, measured on this machine. These are benchmarks,
//! not tests: their figures go to docs/benchmarks.md with the command that produced them.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use flashrig_runtime::{run, send, sleep_ns, spawn, spawn_on, RuntimeKind};
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    pub name: String,
    pub value: f64,
    pub unit: String,
    pub detail: String,
}

/// Simulated events per wall-second: `tasks` tasks on 4 reactors each sleep a pseudo-random
/// virtual time `rounds` times, so every round is one timer event and one task poll.
pub fn sim_events(tasks: u64, rounds: u64) -> BenchResult {
    let t0 = Instant::now();
    let (_, stats) = run(RuntimeKind::Sim, 4, move || async move {
        let mut hs = Vec::new();
        for t in 0..tasks {
            hs.push(spawn_on((t % 4) as usize, move || async move {
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                for _ in 0..rounds {
                    // xorshift: a cheap deterministic delay between 0 and 1023 ns.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    sleep_ns(x & 1023).await;
                }
            }));
        }
        for h in hs {
            h.await;
        }
    });
    let wall = t0.elapsed().as_secs_f64();
    let polls: u64 = stats.reactors.iter().map(|r| r.polls).sum();
    let firings = stats.events - polls;
    BenchResult {
        name: format!("sim events ({tasks} timers)"),
        value: stats.events as f64 / wall,
        unit: "events/s".into(),
        detail: format!(
            "{} events ({} timer firings, {} task polls) in {:.3} s wall; {tasks} tasks x \
             {rounds} sleeps on 4 reactors; {:.0} timer firings/s",
            stats.events,
            firings,
            polls,
            wall,
            firings as f64 / wall
        ),
    }
}

/// Cross-reactor messages per second on the real runtime: reactor 0 streams `count` messages to
/// reactor 1, which counts them; the clock stops when reactor 1 has run the last one.
pub fn real_messages(count: u64) -> BenchResult {
    let received = Arc::new(AtomicU64::new(0));
    let r = received.clone();
    let t0 = Instant::now();
    let (elapsed, _) = run(RuntimeKind::Real, 2, move || async move {
        let start = Instant::now();
        for i in 0..count {
            let r = r.clone();
            send(
                1,
                Box::new(move || {
                    r.fetch_add(1, Ordering::Relaxed);
                }),
            );
            // Let reactor 0's loop breathe now and then, as a real engine would between
            // requests; the queue is unbounded so this is not needed for correctness.
            if i % 4096 == 4095 {
                flashrig_runtime::yield_now().await;
            }
        }
        spawn_on(1, || async {}).await;
        start.elapsed()
    });
    let _ = t0;
    let n = received.load(Ordering::Relaxed);
    assert_eq!(n, count, "every message was delivered");
    BenchResult {
        name: "real messages (stream)".into(),
        value: n as f64 / elapsed.as_secs_f64(),
        unit: "messages/s".into(),
        detail: format!("{n} messages reactor 0 -> 1 in {:.3} s", elapsed.as_secs_f64()),
    }
}

/// Round trips per second between two real reactors: each message answers with a message.
pub fn real_ping_pong(rounds: u64) -> BenchResult {
    let (elapsed, _) = run(RuntimeKind::Real, 2, move || async move {
        let start = Instant::now();
        let done = Rc::new(Cell::new(false));
        let d = done.clone();
        let h = spawn(async move {
            for _ in 0..rounds {
                spawn_on(1, || async {}).await;
            }
            d.set(true);
        });
        h.await;
        assert!(done.get());
        start.elapsed()
    });
    BenchResult {
        name: "real messages (ping-pong)".into(),
        value: rounds as f64 * 2.0 / elapsed.as_secs_f64(),
        unit: "messages/s".into(),
        detail: format!(
            "{rounds} round trips in {:.3} s ({:.2} us per round trip)",
            elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e6 / rounds as f64
        ),
    }
}

pub fn render(results: &[BenchResult]) -> String {
    let mut s = String::new();
    for r in results {
        s.push_str(&format!("{:<28} {:>14.0} {:<12} {}\n", r.name, r.value, r.unit, r.detail));
    }
    s
}
