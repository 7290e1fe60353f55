//! Helpers shared by the integration tests: deterministic pseudo-random stripes and encoding
//! into owned buffers.
#![allow(dead_code)]

use flashrig_erasure::{Backend, Codec};

/// `len` pseudo-random bytes (xorshift64) determined by `seed`.
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// `k` data chunks of `len` bytes.
pub fn random_stripe(k: usize, len: usize, seed: u64) -> Vec<Vec<u8>> {
    (0..k).map(|j| random_bytes(seed.wrapping_mul(1000).wrapping_add(j as u64), len)).collect()
}

/// Every backend this build and CPU run (ISA-L only when linked).
pub fn backends() -> Vec<Backend> {
    Backend::available()
}

/// The `m` parity chunks of `data`, freshly allocated.
pub fn encode(codec: &Codec, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data.first().map_or(0, Vec::len);
    let mut parity = vec![vec![0xA5u8; len]; codec.m()];
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    codec.encode(&refs, &mut outs).expect("encode");
    parity
}

/// Data followed by parity: the `k + m` chunks of a stripe.
pub fn full_stripe(codec: &Codec, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut all = data.to_vec();
    all.extend(encode(codec, data));
    all
}
