//! Goal: for random geometries, chunk lengths, data and erasure patterns, encode then lose up
//! to m chunks then rebuild returns the original stripe, on every backend, and a random
//! partial write through `update` matches re-encoding.
//! Method: proptest generates (k, m within the supported MDS bounds, length, seed, erasure
//! set) and checks the round trip; proptest shrinks a failure and prints the failing input
//! and its seed (and saves it under proptest-regressions/) so it can be replayed.

mod common;

use common::{backends, random_bytes, random_stripe};
use flashrig_erasure::{max_data_chunks, Codec};
use proptest::prelude::*;

fn geometry() -> impl Strategy<Value = (usize, usize)> {
    (1usize..=4).prop_flat_map(|m| (1..=max_data_chunks(m).min(40), Just(m)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn lose_and_rebuild((k, m) in geometry(), len in 0usize..3000, seed in any::<u64>(), picks in proptest::collection::vec(any::<usize>(), 0..=4)) {
        let data = random_stripe(k, len, seed);
        // Up to m distinct chunks lost.
        let mut lost: Vec<usize> = picks.iter().take(m).map(|p| p % (k + m)).collect();
        lost.sort_unstable();
        lost.dedup();
        for backend in backends() {
            let codec = Codec::with_backend(k, m, backend).unwrap();
            let stripe = common::full_stripe(&codec, &data);
            let mut shards: Vec<Option<Vec<u8>>> = stripe.iter().cloned().map(Some).collect();
            for &i in &lost {
                shards[i] = None;
            }
            codec.reconstruct(&mut shards).unwrap();
            for (i, (s, c)) in shards.iter().zip(&stripe).enumerate() {
                prop_assert_eq!(s.as_ref(), Some(c), "{:?} {}+{} len {} lost {:?}: chunk {}", backend, k, m, len, &lost, i);
            }
        }
    }

    #[test]
    fn update_matches_reencode((k, m) in geometry(), len in 1usize..20_000, seed in any::<u64>(), index in any::<usize>()) {
        let mut data = random_stripe(k, len, seed);
        let j = index % k;
        for backend in backends() {
            let codec = Codec::with_backend(k, m, backend).unwrap();
            let mut parity = common::encode(&codec, &data);
            let new = random_bytes(seed ^ 0xFFFF, len);
            let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            codec.update(j, &data[j], &new, &mut outs).unwrap();
            let old = std::mem::replace(&mut data[j], new);
            prop_assert_eq!(&parity, &common::encode(&codec, &data), "{:?} {}+{} len {} chunk {}", backend, k, m, len, j);
            data[j] = old;
        }
    }
}
