//! Arithmetic in GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D), the field of
//! ISA-L, Linux md RAID-6 and most Reed-Solomon storage codes. Addition is XOR; 2 (the
//! polynomial x) generates the multiplicative group, so every nonzero byte is 2^e for one
//! e in 0..255.
//!
//! Everything here is `const` table arithmetic for scalars and small matrices; the bulk
//! multiply-accumulate over buffers lives in the backends.

/// The field's reduction polynomial, x^8 + x^4 + x^3 + x^2 + 1.
pub const POLYNOMIAL: u16 = 0x11D;

/// `EXP[e] = 2^e` for e in 0..510 (doubled so `EXP[log a + log b]` needs no reduction).
static EXP: [u8; 510] = build_exp();
/// `LOG[a] = e` with 2^e = a, for a != 0 (`LOG[0]` is unused and 0).
static LOG: [u8; 256] = build_log();

const fn build_exp() -> [u8; 510] {
    let mut exp = [0u8; 510];
    let mut x: u16 = 1;
    let mut e = 0;
    while e < 510 {
        exp[e] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLYNOMIAL;
        }
        e += 1;
    }
    exp
}

const fn build_log() -> [u8; 256] {
    let exp = build_exp();
    let mut log = [0u8; 256];
    let mut e = 0;
    while e < 255 {
        log[exp[e] as usize] = e as u8;
        e += 1;
    }
    log
}

/// The product `a * b` in GF(2^8) / 0x11D (ISA-L's `gf_mul`).
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// The multiplicative inverse of `a`; `inv(0)` is 0 (as ISA-L's `gf_inv`).
#[inline]
pub fn inv(a: u8) -> u8 {
    if a == 0 {
        0
    } else {
        EXP[255 - LOG[a as usize] as usize]
    }
}

/// `2^e` for any exponent (the group has order 255).
#[inline]
pub fn exp2(e: usize) -> u8 {
    EXP[e % 255]
}

/// Inverts the `n` x `n` row-major matrix `a` by Gauss-Jordan elimination; `None` when it is
/// singular. The inverse of an invertible matrix is unique, so this and ISA-L's
/// `gf_invert_matrix` return the same bytes.
pub fn invert_matrix(a: &[u8], n: usize) -> Option<Vec<u8>> {
    assert_eq!(a.len(), n * n, "invert_matrix: {} bytes is not a {n} x {n} matrix", a.len());
    let mut work = a.to_vec();
    let mut out = vec![0u8; n * n];
    for i in 0..n {
        out[i * n + i] = 1;
    }
    for col in 0..n {
        // Pivot: the first row at or below `col` with a nonzero entry in this column.
        let pivot = (col..n).find(|&r| work[r * n + col] != 0)?;
        if pivot != col {
            for c in 0..n {
                work.swap(pivot * n + c, col * n + c);
                out.swap(pivot * n + c, col * n + c);
            }
        }
        let scale = inv(work[col * n + col]);
        for c in 0..n {
            work[col * n + c] = mul(work[col * n + c], scale);
            out[col * n + c] = mul(out[col * n + c], scale);
        }
        for r in 0..n {
            let factor = work[r * n + col];
            if r == col || factor == 0 {
                continue;
            }
            for c in 0..n {
                work[r * n + c] ^= mul(factor, work[col * n + c]);
                out[r * n + c] ^= mul(factor, out[col * n + c]);
            }
        }
    }
    Some(out)
}

/// Multiplies `a` (`rows` x `inner`) by `b` (`inner` x `cols`), row-major.
pub(crate) fn mul_matrix(a: &[u8], b: &[u8], rows: usize, inner: usize, cols: usize) -> Vec<u8> {
    let mut out = vec![0u8; rows * cols];
    for r in 0..rows {
        for i in 0..inner {
            let f = a[r * inner + i];
            if f == 0 {
                continue;
            }
            for c in 0..cols {
                out[r * cols + c] ^= mul(f, b[i * cols + c]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slow_mul(mut a: u8, mut b: u8) -> u8 {
        let mut p = 0u8;
        while b != 0 {
            if b & 1 != 0 {
                p ^= a;
            }
            let carry = a & 0x80 != 0;
            a <<= 1;
            if carry {
                a ^= 0x1D;
            }
            b >>= 1;
        }
        p
    }

    #[test]
    fn tables_match_shift_and_add() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), slow_mul(a, b), "{a} * {b}");
            }
            if a != 0 {
                assert_eq!(mul(a, inv(a)), 1);
            }
        }
    }

    #[test]
    fn invert_round_trip() {
        let a = [1, 1, 1, 1, 2, 4, 1, 4, 16];
        let b = invert_matrix(&a, 3).unwrap();
        let id = mul_matrix(&a, &b, 3, 3, 3);
        assert_eq!(id, vec![1, 0, 0, 0, 1, 0, 0, 0, 1]);
        assert!(invert_matrix(&[1, 1, 1, 1], 2).is_none());
    }
}
