//! Goal: `update` (read-modify-write parity for a partial-stripe write) and `update_delta`
//! give exactly the parity a full re-encode of the new stripe gives.
//! Method: on every backend, encode a random stripe, change one data chunk (every index, with
//! lengths that cross the 8 KiB internal delta pieces and the SIMD tails), update parity from
//! old and new bytes only, and compare with encoding the modified stripe; also build parity
//! chunk by chunk from zero with `update_delta`, and check that wrong shapes are errors.

mod common;

use common::{backends, random_bytes, random_stripe};
use flashrig_erasure::{Codec, Error};

#[test]
fn update_equals_reencode() {
    for backend in backends() {
        for (k, m) in [(2, 1), (4, 1), (6, 2), (12, 2), (8, 3), (21, 4)] {
            let codec = Codec::with_backend(k, m, backend).unwrap();
            for len in [1, 100, 8192, 8193, 20_000] {
                let mut data = random_stripe(k, len, len as u64);
                let mut parity = common::encode(&codec, &data);
                for j in 0..k {
                    let new = random_bytes((j * 31 + len) as u64, len);
                    let mut outs: Vec<&mut [u8]> =
                        parity.iter_mut().map(Vec::as_mut_slice).collect();
                    codec.update(j, &data[j], &new, &mut outs).unwrap();
                    data[j] = new;
                    assert_eq!(
                        parity,
                        common::encode(&codec, &data),
                        "{backend:?} {k}+{m} len {len} chunk {j}"
                    );
                }
            }
        }
    }
}

#[test]
fn incremental_encode_with_update_delta() {
    for backend in backends() {
        let (k, m) = (6, 2);
        let codec = Codec::with_backend(k, m, backend).unwrap();
        let data = random_stripe(k, 5000, 9);
        let mut parity = vec![vec![0u8; 5000]; m];
        // Data arrives out of order.
        for j in [3, 0, 5, 1, 4, 2] {
            let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            codec.update_delta(j, &data[j], &mut outs).unwrap();
        }
        assert_eq!(parity, common::encode(&codec, &data), "{backend:?}");
    }
}

#[test]
fn update_checks_its_arguments() {
    let codec = Codec::new(4, 2).unwrap();
    let (old, new) = (vec![0u8; 64], vec![1u8; 64]);
    let mut p = vec![0u8; 64];
    let mut q = vec![0u8; 64];
    let mut short = vec![0u8; 63];
    assert_eq!(
        codec.update(4, &old, &new, &mut [&mut p, &mut q]),
        Err(Error::DataIndex { index: 4, k: 4 })
    );
    assert_eq!(
        codec.update(0, &old, &new, &mut [&mut p]),
        Err(Error::ChunkCount { what: "parity chunks", expected: 2, got: 1 })
    );
    assert_eq!(
        codec.update(1, &old, &new[..10], &mut [&mut p, &mut q]),
        Err(Error::ChunkLength { index: 1, len_bytes: 10, expected_bytes: 64 })
    );
    assert_eq!(
        codec.update(1, &old, &new, &mut [&mut p, &mut short]),
        Err(Error::ChunkLength { index: 5, len_bytes: 63, expected_bytes: 64 })
    );
    assert!(p.iter().chain(&q).all(|&b| b == 0), "nothing written on error");
}
