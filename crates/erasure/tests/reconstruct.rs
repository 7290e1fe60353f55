//! Goal: every pattern of up to m lost chunks (data, parity, or both) of a k+m stripe is
//! rebuilt exactly, through every rebuild API and on every backend; m+1 losses are an error.
//! Method: for k+m in {2+1, 4+1, 6+1, 6+2, 4+2, 12+2} plus 3- and 4-parity codes, enumerate
//! all erasure sets of size 1..=m as bitmasks, rebuild with `reconstruct` (owned chunks),
//! `reconstruct_slices` (caller buffers pre-filled with garbage), a reused `Decoder`, and a
//! one-target `decoder_for` + `reconstruct_split`, and compare with the original stripe.
//! The chunk length (161 = 2 x 64 + 32 + 1) runs every SIMD loop and the scalar tail.

mod common;

use common::{backends, random_stripe};
use flashrig_erasure::{Backend, Codec, Error};

const LEN: usize = 161;

fn patterns(n: usize, max: usize) -> impl Iterator<Item = Vec<bool>> {
    (1u32..1 << n).filter(move |mask| mask.count_ones() as usize <= max).map(move |mask| {
        (0..n).map(|i| mask & (1 << i) == 0).collect() // present = bit clear
    })
}

fn check_all_patterns(k: usize, m: usize, backend: Backend, every_api: bool) -> usize {
    let codec = Codec::with_backend(k, m, backend).unwrap();
    let stripe = common::full_stripe(&codec, &random_stripe(k, LEN, (k * 10 + m) as u64));
    let mut count = 0;
    for present in patterns(k + m, m) {
        let what = format!("{backend:?} {k}+{m} present {present:?}");
        // Owned chunks.
        let mut shards: Vec<Option<Vec<u8>>> =
            stripe.iter().zip(&present).map(|(c, &p)| p.then(|| c.clone())).collect();
        codec.reconstruct(&mut shards).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(shards.iter().zip(&stripe).all(|(s, c)| s.as_ref() == Some(c)), "{what}");
        count += 1;
        if !every_api {
            continue;
        }
        // Caller buffers, missing ones full of garbage.
        let mut bufs: Vec<Vec<u8>> = stripe
            .iter()
            .zip(&present)
            .map(|(c, &p)| if p { c.clone() } else { vec![0xEE; LEN] })
            .collect();
        let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
        codec.reconstruct_slices(&mut refs, &present).unwrap();
        assert_eq!(bufs, stripe, "{what} (slices)");
        // A decoder kept and used twice.
        let decoder = codec.decoder(&present).unwrap();
        for _ in 0..2 {
            let mut bufs: Vec<Vec<u8>> = stripe
                .iter()
                .zip(&present)
                .map(|(c, &p)| if p { c.clone() } else { vec![0x11; LEN] })
                .collect();
            let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
            decoder.reconstruct(&mut refs).unwrap();
            assert_eq!(bufs, stripe, "{what} (decoder)");
        }
        // One target at a time from separate source buffers, as a degraded read does.
        for target in (0..k + m).filter(|&i| !present[i]) {
            let d = codec.decoder_for(&present, &[target]).unwrap();
            assert_eq!(d.targets(), &[target]);
            assert!(d.sources().iter().all(|&s| present[s]));
            let sources: Vec<&[u8]> = d.sources().iter().map(|&s| stripe[s].as_slice()).collect();
            let mut out = vec![0u8; LEN];
            d.reconstruct_split(&sources, &mut [&mut out]).unwrap();
            assert_eq!(out, stripe[target], "{what} (target {target})");
        }
    }
    count
}

#[test]
fn raid5_and_raid6_geometries_every_pattern_every_backend() {
    for backend in backends() {
        for (k, m) in [(2, 1), (4, 1), (6, 1), (6, 2), (4, 2), (12, 2)] {
            let n = check_all_patterns(k, m, backend, true);
            let expected: usize = (1..=m).map(|e| binomial(k + m, e)).sum();
            assert_eq!(n, expected, "{k}+{m}");
        }
    }
}

#[test]
fn three_and_four_parity_every_pattern() {
    for backend in backends() {
        for (k, m) in [(5, 3), (10, 3), (8, 4)] {
            check_all_patterns(k, m, backend, false);
        }
    }
    // The largest 4-parity code: 15275 patterns, on the default backend.
    check_all_patterns(21, 4, Backend::best(), false);
}

#[test]
fn one_loss_too_many_is_an_error() {
    for (k, m) in [(4, 1), (6, 2), (8, 3), (8, 4)] {
        let codec = Codec::new(k, m).unwrap();
        let stripe = common::full_stripe(&codec, &random_stripe(k, 64, 3));
        let mut shards: Vec<Option<Vec<u8>>> = stripe.into_iter().map(Some).collect();
        shards.iter_mut().step_by(2).take(m + 1).for_each(|s| *s = None);
        let before = shards.clone();
        assert_eq!(
            codec.reconstruct(&mut shards),
            Err(Error::TooManyErasures { missing: m + 1, m })
        );
        assert_eq!(shards, before, "nothing written on error");
    }
}

#[test]
fn nothing_missing_is_a_no_op() {
    let codec = Codec::new(4, 2).unwrap();
    let stripe = common::full_stripe(&codec, &random_stripe(4, 64, 3));
    let mut shards: Vec<Option<Vec<u8>>> = stripe.iter().cloned().map(Some).collect();
    codec.reconstruct(&mut shards).unwrap();
    assert!(shards.iter().zip(&stripe).all(|(s, c)| s.as_ref() == Some(c)));
    let d = codec.decoder(&[true; 6]).unwrap();
    assert!(d.targets().is_empty());
}

#[test]
fn single_data_loss_through_p_is_xor() {
    // With P among the sources the recovery row of a lost data chunk is all ones.
    let codec = Codec::new(6, 2).unwrap();
    let mut present = vec![true; 8];
    present[2] = false;
    let d = codec.decoder(&present).unwrap();
    assert_eq!(d.sources(), &[0, 1, 3, 4, 5, 6]);
    assert_eq!(d.matrix(), &[1; 6]);
}

fn binomial(n: usize, k: usize) -> usize {
    (0..k).fold(1, |acc, i| acc * (n - i) / (i + 1))
}
