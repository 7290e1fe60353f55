//! Goal: the backends are interchangeable byte for byte: ISA-L, the Rust backend with its
//! best kernel (AVX2 where the CPU has it) and the portable Rust kernel give identical
//! parity, single rows, updates, recovery matrices and rebuilt chunks, so parity written
//! with one decodes with another.
//! Method: run every operation on every available backend over many geometries and lengths
//! (including the tails after 64- and 32-byte SIMD blocks and unaligned sub-slices) and
//! compare against the first backend; compare ISA-L's `gf_invert_matrix` with the Rust
//! Gauss-Jordan elimination on random matrices. Without ISA-L the Rust kernels are still
//! compared with each other.

mod common;

use common::{backends, random_bytes, random_stripe};
use flashrig_erasure::{gf, isal, Backend, Codec};

const GEOMETRIES: [(usize, usize); 10] =
    [(2, 1), (4, 1), (6, 1), (6, 2), (4, 2), (12, 2), (8, 3), (4, 4), (21, 4), (100, 2)];
const LENS: [usize; 9] = [1, 31, 64, 95, 96, 127, 1000, 4096, 65536 + 7];

#[test]
fn report_backends() {
    for b in backends() {
        eprintln!("{:?}: {} ({})", b, b.name(), Codec::with_backend(4, 2, b).unwrap().kernel());
    }
    eprintln!("ISA-L found by: {:?}", isal::found_by());
    assert_eq!(isal::available(), Backend::IsaL.is_available());
    assert_eq!(isal::available(), isal::found_by().is_some());
    assert_eq!(
        Codec::new(4, 2).unwrap().backend(),
        if isal::available() { "isa-l" } else { "rust" }
    );
}

#[test]
fn encode_and_rows_agree() {
    let all = backends();
    assert!(all.len() >= 2, "at least the two Rust kernels");
    for (k, m) in GEOMETRIES {
        for len in LENS {
            let data = random_stripe(k, len, (k * 7 + m + len) as u64);
            let reference = common::encode(&Codec::with_backend(k, m, all[0]).unwrap(), &data);
            for &b in &all[1..] {
                let codec = Codec::with_backend(k, m, b).unwrap();
                assert_eq!(common::encode(&codec, &data), reference, "{b:?} {k}+{m} len {len}");
                let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
                for (row, expected) in reference.iter().enumerate() {
                    let mut out = vec![0u8; len];
                    codec.encode_row(row, &refs, &mut out).unwrap();
                    assert_eq!(&out, expected, "{b:?} row {row} {k}+{m} len {len}");
                }
            }
        }
    }
}

#[test]
fn unaligned_slices_agree() {
    let (k, m) = (6, 2);
    let all = backends();
    let backing = random_bytes(99, k * 5000 + 64);
    for offset in [1usize, 3, 17, 33] {
        let data: Vec<&[u8]> =
            (0..k).map(|j| &backing[offset + j * 5000..][..4500 - offset]).collect();
        let mut results = Vec::new();
        for &b in &all {
            let codec = Codec::with_backend(k, m, b).unwrap();
            let mut parity = vec![0u8; 2 * 4600];
            let (p, q) = parity.split_at_mut(4600);
            codec.encode(&data, &mut [&mut p[offset..4500], &mut q[offset + 5..4505]]).unwrap();
            results.push(parity);
        }
        assert!(results.windows(2).all(|w| w[0] == w[1]), "offset {offset}");
    }
}

#[test]
fn updates_agree() {
    let all = backends();
    for (k, m) in GEOMETRIES {
        let len = 10_000 + k;
        let data = random_stripe(k, len, 5);
        let new = random_bytes(77, len);
        let mut results = Vec::new();
        for &b in &all {
            let codec = Codec::with_backend(k, m, b).unwrap();
            let mut parity = common::encode(&codec, &data);
            let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            codec.update(k - 1, &data[k - 1], &new, &mut outs).unwrap();
            codec.update_delta(0, &new, &mut outs).unwrap();
            results.push(parity);
        }
        assert!(results.windows(2).all(|w| w[0] == w[1]), "{k}+{m}");
    }
}

#[test]
fn parity_from_one_backend_decodes_on_another() {
    let all = backends();
    for (k, m) in [(4, 2), (6, 2), (8, 3), (21, 4)] {
        let data = random_stripe(k, 3000, 11);
        for &writer in &all {
            let stripe = common::full_stripe(&Codec::with_backend(k, m, writer).unwrap(), &data);
            for &reader in &all {
                let codec = Codec::with_backend(k, m, reader).unwrap();
                // Lose the first m chunks (all data) and rebuild them.
                let mut shards: Vec<Option<Vec<u8>>> = stripe.iter().cloned().map(Some).collect();
                shards.iter_mut().take(m).for_each(|s| *s = None);
                codec.reconstruct(&mut shards).unwrap();
                let rebuilt: Vec<Vec<u8>> = shards.into_iter().map(Option::unwrap).collect();
                assert_eq!(rebuilt, stripe, "written by {writer:?}, read by {reader:?}, {k}+{m}");
            }
        }
    }
}

#[test]
fn recovery_matrices_agree() {
    let all = backends();
    for (k, m) in [(4, 2), (12, 2), (8, 3), (21, 4)] {
        let mut present = vec![true; k + m];
        for lost in [1, k - 1, k].into_iter().take(m) {
            present[lost] = false;
        }
        let reference = Codec::with_backend(k, m, all[0]).unwrap().decoder(&present).unwrap();
        for &b in &all[1..] {
            let d = Codec::with_backend(k, m, b).unwrap().decoder(&present).unwrap();
            assert_eq!(d.sources(), reference.sources());
            assert_eq!(d.targets(), reference.targets());
            assert_eq!(d.matrix(), reference.matrix(), "{b:?} {k}+{m}");
        }
    }
}

#[test]
fn isal_and_rust_inversion_agree() {
    if !isal::available() {
        eprintln!("ISA-L not linked: skipped");
        return;
    }
    let (mut invertible, mut singular) = (0, 0);
    for seed in 0..2000u64 {
        let n = 1 + (seed % 12) as usize;
        let mut a = random_bytes(seed, n * n);
        if seed % 5 == 0 && n > 1 {
            // A singular one: row 1 a multiple of row 0.
            for c in 0..n {
                a[n + c] = gf::mul(a[c], 7);
            }
        }
        let rust = gf::invert_matrix(&a, n);
        let ours = isal::invert_matrix(&a, n).unwrap();
        assert_eq!(rust, ours, "seed {seed} n {n}");
        match rust {
            Some(_) => invertible += 1,
            None => singular += 1,
        }
    }
    assert!(invertible > 1000 && singular > 300, "{invertible} invertible, {singular} singular");
}
