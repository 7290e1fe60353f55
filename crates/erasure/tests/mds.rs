//! Goal: the geometries `Codec::new` accepts are exactly those where the code is MDS (any m
//! lost chunks are rebuildable), as the crate documentation claims: m <= 3 for every
//! k <= 253, m = 4 only for k <= 21.
//! Method: a systematic code [I; A] is MDS iff every square submatrix of the parity part A
//! is invertible. Enumerate every choice of e <= m rows and e columns of A for the largest
//! accepted k and compute the determinant in GF(2^8) by elimination; show that k = 22 with
//! 4 parity rows has a singular one (so the bound is tight).

use flashrig_erasure::{coefficient, gf, max_data_chunks};

fn det(mut a: Vec<u8>, n: usize) -> u8 {
    let mut d = 1u8;
    for c in 0..n {
        let Some(p) = (c..n).find(|&r| a[r * n + c] != 0) else { return 0 };
        if p != c {
            for x in 0..n {
                a.swap(p * n + x, c * n + x);
            }
        }
        d = gf::mul(d, a[c * n + c]);
        let inv = gf::inv(a[c * n + c]);
        for r in c + 1..n {
            let f = gf::mul(a[r * n + c], inv);
            for x in c..n {
                a[r * n + x] ^= gf::mul(f, a[c * n + x]);
            }
        }
    }
    d
}

fn combinations(n: usize, e: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut idx: Vec<usize> = (0..e).collect();
    if e > n {
        return out;
    }
    loop {
        out.push(idx.clone());
        let Some(i) = (0..e).rev().find(|&i| idx[i] != i + n - e) else { return out };
        idx[i] += 1;
        for j in i + 1..e {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

/// The first singular square submatrix of the m x k parity matrix: (rows, columns).
fn first_singular(k: usize, m: usize) -> Option<(Vec<usize>, Vec<usize>)> {
    for e in 1..=m.min(k) {
        let row_sets = combinations(m, e);
        for cols in combinations(k, e) {
            for rows in &row_sets {
                let sub: Vec<u8> = rows
                    .iter()
                    .flat_map(|&r| cols.iter().map(move |&c| coefficient(r, c)))
                    .collect();
                if det(sub, e) == 0 {
                    return Some((rows.clone(), cols));
                }
            }
        }
    }
    None
}

#[test]
fn accepted_geometries_are_mds() {
    for m in 1..=3 {
        assert_eq!(
            first_singular(max_data_chunks(m), m),
            None,
            "m = {m}, k = {}",
            max_data_chunks(m)
        );
    }
    assert_eq!(first_singular(max_data_chunks(4), 4), None, "m = 4, k = 21");
}

#[test]
fn four_parity_rows_stop_being_mds_at_22_data_chunks() {
    let (rows, cols) = first_singular(22, 4).expect("k = 22 has a singular submatrix");
    assert_eq!((rows, cols), (vec![0, 1, 3], vec![0, 10, 21]));
}
