//! Goal: the parity bytes are exactly the documented code, `P_r[i] = XOR_j (2^r)^j * D_j[i]`
//! over GF(2^8) / 0x11D (ISA-L's `gf_gen_rs_matrix`), on every backend, and P is the XOR of
//! the data.
//! Method: an independent naive implementation written here (shift-and-add multiply, one bit
//! at a time, powers by repeated multiplication, parity byte by byte) is compared with
//! `Codec::encode` and `Codec::encode_row` for geometries up to 4 parity rows and lengths
//! that hit every SIMD tail; the field and matrix are also compared with ISA-L's own
//! `gf_mul` and `gf_gen_rs_matrix` when ISA-L is linked.

mod common;

use common::{backends, random_stripe};
use flashrig_erasure::{coefficient, gf_mul, isal, Codec};

/// a * b in GF(2^8) modulo x^8 + x^4 + x^3 + x^2 + 1, one bit of b at a time.
fn naive_mul(a: u8, b: u8) -> u8 {
    let (mut a, mut b, mut p) = (a as u16, b, 0u16);
    while b != 0 {
        if b & 1 == 1 {
            p ^= a;
        }
        a <<= 1;
        if a & 0x100 != 0 {
            a ^= 0x11D;
        }
        b >>= 1;
    }
    p as u8
}

fn naive_pow(base: u8, e: usize) -> u8 {
    (0..e).fold(1, |acc, _| naive_mul(acc, base))
}

fn naive_coefficient(row: usize, col: usize) -> u8 {
    naive_pow(naive_pow(2, row), col)
}

fn naive_parity(data: &[Vec<u8>], m: usize) -> Vec<Vec<u8>> {
    let len = data[0].len();
    (0..m)
        .map(|r| {
            let coefs: Vec<u8> = (0..data.len()).map(|j| naive_coefficient(r, j)).collect();
            (0..len)
                .map(|i| data.iter().zip(&coefs).fold(0u8, |acc, (d, &c)| acc ^ naive_mul(c, d[i])))
                .collect()
        })
        .collect()
}

const LENS: [usize; 14] = [0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 4096, 4099];
const GEOMETRIES: [(usize, usize); 12] = [
    (1, 1),
    (2, 1),
    (4, 1),
    (1, 2),
    (2, 2),
    (4, 2),
    (6, 2),
    (12, 2),
    (5, 3),
    (10, 3),
    (4, 4),
    (21, 4),
];

#[test]
fn field_matches_shift_and_add() {
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            assert_eq!(gf_mul(a, b), naive_mul(a, b), "{a} * {b}");
        }
    }
}

#[test]
fn isal_field_matches_shift_and_add() {
    if !isal::available() {
        eprintln!("ISA-L not linked: skipped");
        return;
    }
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            assert_eq!(isal::gf_mul(a, b).unwrap(), naive_mul(a, b), "{a} * {b}");
        }
    }
}

#[test]
fn coefficients_are_powers_of_powers_of_two() {
    for row in 0..4 {
        for col in 0..253 {
            assert_eq!(coefficient(row, col), naive_coefficient(row, col), "row {row} col {col}");
        }
    }
    assert!((0..253).all(|j| coefficient(0, j) == 1), "row 0 is P");
    assert_eq!(coefficient(1, 0), 1);
    assert_eq!(coefficient(1, 1), 2);
    assert_eq!(coefficient(1, 8), 0x1D, "2^8 = x^4 + x^3 + x^2 + 1");
}

#[test]
fn matrix_is_isal_gf_gen_rs_matrix() {
    for (k, m) in GEOMETRIES.into_iter().chain([(253, 3), (253, 2)]) {
        let codec = Codec::new(k, m).unwrap();
        let naive: Vec<u8> =
            (0..m).flat_map(|r| (0..k).map(move |j| naive_coefficient(r, j))).collect();
        assert_eq!(codec.matrix(), &naive[..], "{k}+{m}");
        if isal::available() {
            assert_eq!(isal::gen_rs_matrix(k, m).unwrap(), naive, "ISA-L {k}+{m}");
        }
    }
}

#[test]
fn parity_is_bit_exact_on_every_backend() {
    for backend in backends() {
        for (k, m) in GEOMETRIES {
            let codec = Codec::with_backend(k, m, backend).unwrap();
            for (n, len) in LENS.into_iter().enumerate() {
                let data = random_stripe(k, len, (k * 100 + m * 10 + n) as u64);
                let expected = naive_parity(&data, m);
                let got = common::encode(&codec, &data);
                assert_eq!(got, expected, "{backend:?} ({}) {k}+{m} len {len}", codec.kernel());
                let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
                for (row, expected_row) in expected.iter().enumerate() {
                    let mut out = vec![0x5Au8; len];
                    codec.encode_row(row, &refs, &mut out).unwrap();
                    assert_eq!(
                        &out, expected_row,
                        "{backend:?} encode_row {row} of {k}+{m} len {len}"
                    );
                }
            }
        }
    }
}

#[test]
fn p_is_the_xor_of_the_data() {
    for backend in backends() {
        for k in [1, 2, 3, 4, 6, 12, 24, 253] {
            let m = if k <= 21 { 4 } else { 3 };
            let codec = Codec::with_backend(k, m, backend).unwrap();
            let data = random_stripe(k, 1000, k as u64);
            let xor: Vec<u8> =
                (0..1000).map(|i| data.iter().fold(0, |acc, d| acc ^ d[i])).collect();
            assert_eq!(common::encode(&codec, &data)[0], xor, "{backend:?} k={k}");
            let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
            let mut p = vec![0u8; 1000];
            codec.encode_row(0, &refs, &mut p).unwrap();
            assert_eq!(p, xor);
        }
    }
}
