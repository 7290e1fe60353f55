//! Seeded mutations of corpus inputs, for the stable replay test: the same few kinds of change
//! libFuzzer's default mutators make (bits flipped, bytes set to boundary values, bytes
//! inserted, erased, repeated, runs copied from another input), plus text-aware ones that
//! put numbers at their limits and break the structure of lines, so that a run without
//! libFuzzer still reaches the parsers' error paths. Deterministic: the same seed gives the
//! same input.

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Bytes that sit on boundaries of the formats flashrig reads.
const INTERESTING_BYTES: &[u8] = &[
    0, 1, 0x7f, 0x80, 0xff, b'\n', b'\r', b',', b' ', b'\t', b'=', b'[', b']', b'"', b'.', b'-',
    b'+', b':', b'/', b'#', b'0', b'9', b'e', b'%', b'{', b'}', b'\\',
];

/// Text that puts a number field at a limit, or a value where a number belongs.
const INTERESTING_TEXT: &[&str] = &[
    "0",
    "-1",
    "1",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "9223372036854775807",
    "1e308",
    "1e309",
    "-0.0",
    "nan",
    "inf",
    "0.5",
    "1.0",
    "4k",
    "16EiB",
    "\"",
    "[]",
    "{}",
    "${HOME}",
    "\u{feff}",
    "\u{e9}",
];

/// A mutation of `input` by `seed`, with `others` (the rest of the corpus) to splice from.
/// The result is at most `max_len` bytes.
pub fn mutate(seed: u64, input: &[u8], others: &[Vec<u8>], max_len: usize) -> Vec<u8> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut v = input.to_vec();
    let rounds = 1 + rng.next_u32() % 4;
    for _ in 0..rounds {
        step(&mut rng, &mut v, others);
    }
    v.truncate(max_len);
    v
}

fn below(rng: &mut Xoshiro256PlusPlus, n: usize) -> usize {
    if n == 0 {
        0
    } else {
        (rng.next_u64() % n as u64) as usize
    }
}

fn step(rng: &mut Xoshiro256PlusPlus, v: &mut Vec<u8>, others: &[Vec<u8>]) {
    let len = v.len();
    match rng.next_u32() % 11 {
        0 if len > 0 => {
            let i = below(rng, len);
            v[i] ^= 1 << (rng.next_u32() % 8);
        }
        1 if len > 0 => {
            let i = below(rng, len);
            v[i] = INTERESTING_BYTES[below(rng, INTERESTING_BYTES.len())];
        }
        2 if len > 0 => {
            let i = below(rng, len);
            v[i] = rng.next_u32() as u8;
        }
        3 => {
            let i = below(rng, len + 1);
            let n = 1 + below(rng, 8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u32() as u8).collect();
            v.splice(i..i, bytes);
        }
        4 if len > 0 => {
            let i = below(rng, len);
            let n = 1 + below(rng, (len - i).min(64));
            v.drain(i..i + n);
        }
        5 if len > 0 => {
            // Repeat a run (a line, a record) in place.
            let i = below(rng, len);
            let n = 1 + below(rng, (len - i).min(256));
            let run = v[i..i + n].to_vec();
            v.splice(i..i, run);
        }
        6 if !others.is_empty() => {
            // Copy a run of another input over or into this one.
            let o = &others[below(rng, others.len())];
            if !o.is_empty() {
                let i = below(rng, o.len());
                let n = 1 + below(rng, (o.len() - i).min(512));
                let at = below(rng, len + 1);
                if rng.next_u32().is_multiple_of(2) {
                    let end = (at + n).min(len);
                    v.splice(at..end, o[i..i + n].iter().copied());
                } else {
                    v.splice(at..at, o[i..i + n].iter().copied());
                }
            }
        }
        7 | 8 => {
            // Replace a run of ASCII digits (or insert at a random place) by a limit.
            let t = INTERESTING_TEXT[below(rng, INTERESTING_TEXT.len())].as_bytes();
            let digits: Vec<usize> = (0..len).filter(|&i| v[i].is_ascii_digit()).collect();
            if digits.is_empty() {
                let at = below(rng, len + 1);
                v.splice(at..at, t.iter().copied());
            } else {
                let start = digits[below(rng, digits.len())];
                let mut end = start;
                while end < len && (v[end].is_ascii_digit() || v[end] == b'.') {
                    end += 1;
                }
                v.splice(start..end, t.iter().copied());
            }
        }
        9 if len >= 4 => {
            // Overwrite an aligned little- or big-endian word with a boundary value.
            let words = [0u64, 1, u32::MAX as u64, u64::MAX, 1 << 31, 1 << 63, 0x8000, 4096];
            let w = words[below(rng, words.len())];
            let size = [2usize, 4, 8][below(rng, 3)].min(len);
            let at = below(rng, len - size + 1);
            let bytes =
                if rng.next_u32().is_multiple_of(2) { w.to_le_bytes() } else { w.to_be_bytes() };
            v[at..at + size].copy_from_slice(&bytes[..size]);
        }
        _ if len > 0 => {
            // Cut the input short (a file truncated mid-record).
            let at = below(rng, len);
            v.truncate(at);
        }
        _ => v.push(rng.next_u32() as u8),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_deterministic_and_bounded() {
        let input = b"[workload]\nbs = 4096\niodepth = 32\n".to_vec();
        let others = vec![b"seed = 7\n".to_vec()];
        for seed in 0..200 {
            let a = mutate(seed, &input, &others, 64);
            assert_eq!(a, mutate(seed, &input, &others, 64));
            assert!(a.len() <= 64);
        }
        let distinct: std::collections::HashSet<Vec<u8>> =
            (0..200).map(|s| mutate(s, &input, &others, 1 << 10)).collect();
        assert!(distinct.len() > 150, "{} distinct", distinct.len());
    }
}
