//! Prints encoding throughput (GB/s of data, one core) of `Codec::encode` on each backend and
//! of ISA-L's `ec_encode_data` called directly, for 64 KiB chunks (by default), hot (one stripe, from
//! cache) and cold (a 1 GiB working set, from memory). The candidates are measured in
//! interleaved rounds and each figure is the best round, so a neighbour's burst of CPU use
//! does not favour one of them.
//!
//! `cargo run --release -p flashrig-erasure --example encode_speed [seconds per figure] [rounds] [chunk KiB]`

use flashrig_erasure::{bench_encode_isal_raw, bench_encode_with, Backend};

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(0.5);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    let chunk_kib: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(64);
    let chunk_bytes = chunk_kib << 10;
    println!("GB/s of data, {chunk_kib} KiB chunks, best of {rounds} rounds of {seconds} s");
    println!(
        "{:<6} {:<5} {:>9} {:>9} {:>9} {:>13}",
        "code", "set", "isa-l raw", "isa-l", "rust", "rust-portable"
    );
    for (k, m) in [(4, 1), (6, 1), (6, 2)] {
        for (set, working_set_bytes) in [("hot", k * chunk_bytes), ("1GiB", 1 << 30)] {
            let mut best = [None::<f64>; 4];
            for _ in 0..rounds {
                let raw = bench_encode_isal_raw(k, m, chunk_bytes, working_set_bytes, seconds)
                    .expect("geometry");
                let mut rates = vec![raw];
                for b in [Backend::IsaL, Backend::Rust, Backend::RustPortable] {
                    rates.push(b.is_available().then(|| {
                        bench_encode_with(b, k, m, chunk_bytes, working_set_bytes, seconds)
                            .expect("geometry")
                    }));
                }
                for (best, rate) in best.iter_mut().zip(rates) {
                    *best = match (*best, rate) {
                        (Some(b), Some(r)) => Some(b.max(r)),
                        (b, r) => b.or(r),
                    };
                }
            }
            let show = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.1}"));
            println!(
                "{:<6} {:<5} {:>9} {:>9} {:>9} {:>13}",
                format!("{k}+{m}"),
                set,
                show(best[0]),
                show(best[1]),
                show(best[2]),
                show(best[3]),
            );
        }
    }
}
