//! Helpers shared by the engine tests: GF(2^8) arithmetic written independently of
//! `flashrig-erasure`, so parity checks do not trust the code they check.

/// Multiplication in GF(2^8) with the polynomial 0x11D, bit by bit.
pub fn gf_mul(mut a: u8, mut b: u8) -> u8 {
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

/// `base` to the power `e` in GF(2^8).
pub fn gf_pow(base: u8, e: usize) -> u8 {
    (0..e).fold(1, |acc, _| gf_mul(acc, base))
}
