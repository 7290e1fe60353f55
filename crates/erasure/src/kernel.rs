//! The pure-Rust backend: multiply-accumulate of a GF(2^8) coefficient matrix over byte
//! buffers, `out[r] (^)= sum_j c[r][j] * src[j]`.
//!
//! Multiplication by a constant `c` is linear over GF(2), so `c * x = c * (x & 0x0F) ^
//! c * (x & 0xF0)`: two 16-entry look-ups, one per nibble ("split-nibble" tables, the method
//! of ISA-L and of Plank, Greenan and Miller's "Screaming fast Galois field arithmetic"). With
//! SIMD both look-ups are one byte shuffle each (`vpshufb` does 32 of them at once), which is
//! what the AVX2 kernel does. The portable kernel, used on other CPUs, writes the same product
//! as `c * x = XOR over set bits b of x of (c * 2^b)`: selects and XORs on fixed 32-byte blocks
//! that the compiler vectorises for whatever SIMD the target has.
//!
//! Two shortcuts keep the common RAID paths cheap: an output row whose coefficients are all 1
//! (RAID-5 P, the P row of RAID-6, rebuilding one data chunk through P) is plain XOR, and the
//! kernel keeps up to four output rows in registers while streaming each source once.

/// Look-up tables for multiplying by one constant `c`: `lo[i] = c * i` and `hi[i] = c *
/// (i << 4)` for `i < 16`, each written twice so one 32-byte aligned load fills both 128-bit
/// lanes of an AVX2 register.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(crate) struct NibbleTable {
    lo: [u8; 32],
    hi: [u8; 32],
}

impl NibbleTable {
    pub(crate) fn new(c: u8) -> Self {
        let mut t = NibbleTable { lo: [0; 32], hi: [0; 32] };
        for i in 0..16u8 {
            let lo = crate::gf::mul(c, i);
            let hi = crate::gf::mul(c, i << 4);
            t.lo[i as usize] = lo;
            t.lo[i as usize + 16] = lo;
            t.hi[i as usize] = hi;
            t.hi[i as usize + 16] = hi;
        }
        t
    }

    /// The constant itself.
    #[inline]
    fn coefficient(&self) -> u8 {
        self.lo[1]
    }

    #[inline]
    fn mul(&self, x: u8) -> u8 {
        self.lo[(x & 0x0F) as usize] ^ self.hi[(x >> 4) as usize]
    }

    /// `c * 2^b` for b in 0..8.
    #[inline]
    fn bit_products(&self) -> [u8; 8] {
        [
            self.lo[1], self.lo[2], self.lo[4], self.lo[8], self.hi[1], self.hi[2], self.hi[4],
            self.hi[8],
        ]
    }
}

/// Which loop does the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// Safe Rust on 32-byte blocks; the compiler vectorises it for the target.
    Portable,
    /// AVX2 `vpshufb` split-nibble look-ups (x86-64 CPUs that have AVX2, detected at run time).
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Kernel {
    /// The fastest kernel this CPU runs.
    pub(crate) fn detect() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            return Kernel::Avx2;
        }
        Kernel::Portable
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kernel::Portable => "rust-portable",
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => "rust-avx2",
        }
    }
}

/// A `rows` x `cols` coefficient matrix prepared for the Rust kernels.
pub(crate) struct Tables {
    cols: usize,
    /// Row-major, `tables[r * cols + j]` multiplies by `c[r][j]`.
    tables: Vec<NibbleTable>,
    kernel: Kernel,
}

/// Most output rows one pass keeps in registers.
const GROUP_ROWS: usize = 4;

impl Tables {
    pub(crate) fn new(kernel: Kernel, rows: usize, cols: usize, coefs: &[u8]) -> Tables {
        assert_eq!(coefs.len(), rows * cols);
        Tables { cols, tables: coefs.iter().map(|&c| NibbleTable::new(c)).collect(), kernel }
    }

    pub(crate) fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// For each output `i`, row `row_start + i` of the matrix over columns
    /// `col_start .. col_start + srcs.len()`: `outs[i] = sum_j c * srcs[j]`, or `^=` when
    /// `accumulate`. Every buffer holds at least `len` bytes (checked by the caller; asserted).
    pub(crate) fn dot(
        &self,
        row_start: usize,
        col_start: usize,
        srcs: &[&[u8]],
        outs: &mut [&mut [u8]],
        len: usize,
        accumulate: bool,
    ) {
        assert!(srcs.iter().all(|s| s.len() >= len) && outs.iter().all(|o| o.len() >= len));
        assert!(col_start + srcs.len() <= self.cols);
        if srcs.is_empty() {
            if !accumulate {
                outs.iter_mut().for_each(|o| o[..len].fill(0));
            }
            return;
        }
        let mut row = row_start;
        for group in outs.chunks_mut(GROUP_ROWS) {
            let mut tables: [&[NibbleTable]; GROUP_ROWS] = Default::default();
            for (i, t) in tables.iter_mut().take(group.len()).enumerate() {
                *t = &self.tables[(row + i) * self.cols + col_start..][..srcs.len()];
            }
            let rows = &tables[..group.len()];
            match self.kernel {
                Kernel::Portable => portable::dot(rows, srcs, group, len, accumulate),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2 => {
                    let xor_first = rows[0].iter().all(|t| t.coefficient() == 1);
                    avx2::dispatch(rows, srcs, group, len, accumulate, xor_first)
                }
            }
            row += group.len();
        }
    }
}

/// Bytes `from..len` of each output, one byte at a time (the tails the SIMD loops leave).
fn scalar_tail(
    rows: &[&[NibbleTable]],
    srcs: &[&[u8]],
    outs: &mut [&mut [u8]],
    from: usize,
    len: usize,
    accumulate: bool,
) {
    for (tables, out) in rows.iter().zip(outs.iter_mut()) {
        for i in from..len {
            let mut y = if accumulate { out[i] } else { 0 };
            for (t, s) in tables.iter().zip(srcs) {
                y ^= t.mul(s[i]);
            }
            out[i] = y;
        }
    }
}

mod portable {
    use super::NibbleTable;

    /// Bytes per block: sources and outputs of a block stay in L1 while every row is summed.
    const BLOCK_BYTES: usize = 2048;
    const LANE_BYTES: usize = 32;

    pub(super) fn dot(
        rows: &[&[NibbleTable]],
        srcs: &[&[u8]],
        outs: &mut [&mut [u8]],
        len: usize,
        accumulate: bool,
    ) {
        let mut start = 0;
        while start < len {
            let end = (start + BLOCK_BYTES).min(len);
            for (tables, out) in rows.iter().zip(outs.iter_mut()) {
                let out = &mut out[start..end];
                for (j, (t, src)) in tables.iter().zip(srcs).enumerate() {
                    mul_into(t, &src[start..end], out, j == 0 && !accumulate);
                }
            }
            start = end;
        }
    }

    /// `out = c * src` when `assign`, else `out ^= c * src`.
    fn mul_into(t: &NibbleTable, src: &[u8], out: &mut [u8], assign: bool) {
        match (t.coefficient(), assign) {
            (0, true) => out.fill(0),
            (0, false) => {}
            (1, true) => out.copy_from_slice(src),
            (1, false) => lanes(
                src,
                out,
                |x, o| {
                    let mut y = o;
                    for i in 0..LANE_BYTES {
                        y[i] ^= x[i];
                    }
                    y
                },
                |x, o| o ^ x,
            ),
            _ => {
                let bits = t.bit_products();
                lanes(
                    src,
                    out,
                    |x, o| {
                        let mut y = if assign { [0u8; LANE_BYTES] } else { o };
                        // Bits of x from the top: the sign of `v` is bit b of x, and
                        // `v + v` brings the next bit up. Sign to mask is one compare.
                        let mut v = x;
                        for b in (0..8).rev() {
                            for i in 0..LANE_BYTES {
                                // All ones when bit b of x is set: selects c * 2^b.
                                let select = ((v[i] as i8) >> 7) as u8;
                                y[i] ^= bits[b] & select;
                                v[i] = v[i].wrapping_add(v[i]);
                            }
                        }
                        y
                    },
                    |x, o| if assign { t.mul(x) } else { o ^ t.mul(x) },
                )
            }
        }
    }

    /// `out = lane(src, out)` for every whole 32-byte lane, then `byte(src, out)` for the
    /// tail. Each lane is copied into local arrays, computed, and stored back, so the
    /// arithmetic vectorises whatever the optimiser concludes about aliasing between `out`
    /// and `src` after inlining (it did not always, reading them in place).
    #[inline(always)]
    fn lanes(
        src: &[u8],
        out: &mut [u8],
        lane: impl Fn([u8; LANE_BYTES], [u8; LANE_BYTES]) -> [u8; LANE_BYTES],
        byte: impl Fn(u8, u8) -> u8,
    ) {
        let mut o = out.chunks_exact_mut(LANE_BYTES);
        let mut s = src.chunks_exact(LANE_BYTES);
        for (o, s) in (&mut o).zip(&mut s) {
            let x: [u8; LANE_BYTES] = s.try_into().expect("exact chunk");
            let old: [u8; LANE_BYTES] = (&*o).try_into().expect("exact chunk");
            o.copy_from_slice(&lane(x, old));
        }
        for (o, &x) in o.into_remainder().iter_mut().zip(s.remainder()) {
            *o = byte(x, *o);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{scalar_tail, NibbleTable, GROUP_ROWS};
    use std::arch::x86_64::*;

    /// Monomorphises the kernel for the group's row count and flags.
    pub(super) fn dispatch(
        rows: &[&[NibbleTable]],
        srcs: &[&[u8]],
        outs: &mut [&mut [u8]],
        len: usize,
        accumulate: bool,
        xor_first: bool,
    ) {
        debug_assert!(rows.len() == outs.len() && rows.len() <= GROUP_ROWS);
        macro_rules! go {
            ($m:literal) => {
                match (xor_first, accumulate) {
                    // SAFETY: Kernel::Avx2 is only chosen after is_x86_feature_detected!("avx2"),
                    // and Tables::dot checked that every source and output holds `len` bytes and
                    // each row has one table per source.
                    (false, false) => unsafe { dot::<$m, false, false>(rows, srcs, outs, len) },
                    // SAFETY: as above.
                    (false, true) => unsafe { dot::<$m, false, true>(rows, srcs, outs, len) },
                    // SAFETY: as above.
                    (true, false) => unsafe { dot::<$m, true, false>(rows, srcs, outs, len) },
                    // SAFETY: as above.
                    (true, true) => unsafe { dot::<$m, true, true>(rows, srcs, outs, len) },
                }
            };
        }
        match rows.len() {
            1 => go!(1),
            2 => go!(2),
            3 => go!(3),
            4 => go!(4),
            n => unreachable!("group of {n} rows"),
        }
    }

    /// `outs[r] (^)= sum_j rows[r][j] * srcs[j]` over the first `len` bytes, 64 bytes per step
    /// with `M` rows in registers. `XOR0`: every coefficient of row 0 is 1. `ACC`: XOR into the
    /// outputs instead of overwriting them.
    ///
    /// # Safety
    /// The CPU supports AVX2; `rows.len() == outs.len() == M`; every `rows[r]` has
    /// `srcs.len()` tables; every source and output holds at least `len` bytes.
    #[target_feature(enable = "avx2")]
    unsafe fn dot<const M: usize, const XOR0: bool, const ACC: bool>(
        rows: &[&[NibbleTable]],
        srcs: &[&[u8]],
        outs: &mut [&mut [u8]],
        len: usize,
    ) {
        let tables: [*const NibbleTable; M] = std::array::from_fn(|r| rows[r].as_ptr());
        let out_ptrs: [*mut u8; M] = std::array::from_fn(|r| outs[r].as_mut_ptr());
        let mask = _mm256_set1_epi8(0x0F);
        let mut i = 0;
        while i + 64 <= len {
            let mut acc0 = [_mm256_setzero_si256(); M];
            let mut acc1 = [_mm256_setzero_si256(); M];
            for (j, src) in srcs.iter().enumerate() {
                // SAFETY: i + 64 <= len <= src.len(); unaligned loads.
                let (x0, x1) = unsafe {
                    let p = src.as_ptr().add(i);
                    (_mm256_loadu_si256(p.cast()), _mm256_loadu_si256(p.add(32).cast()))
                };
                let lo0 = _mm256_and_si256(x0, mask);
                let hi0 = _mm256_and_si256(_mm256_srli_epi64::<4>(x0), mask);
                let lo1 = _mm256_and_si256(x1, mask);
                let hi1 = _mm256_and_si256(_mm256_srli_epi64::<4>(x1), mask);
                for r in 0..M {
                    if XOR0 && r == 0 {
                        acc0[0] = _mm256_xor_si256(acc0[0], x0);
                        acc1[0] = _mm256_xor_si256(acc1[0], x1);
                        continue;
                    }
                    // SAFETY: j < srcs.len() == rows[r].len(), and NibbleTable is 32-byte
                    // aligned, so both aligned loads read inside the table.
                    let (tl, th) = unsafe {
                        let t = tables[r].add(j);
                        (
                            _mm256_load_si256((*t).lo.as_ptr().cast()),
                            _mm256_load_si256((*t).hi.as_ptr().cast()),
                        )
                    };
                    let p0 = _mm256_xor_si256(
                        _mm256_shuffle_epi8(tl, lo0),
                        _mm256_shuffle_epi8(th, hi0),
                    );
                    let p1 = _mm256_xor_si256(
                        _mm256_shuffle_epi8(tl, lo1),
                        _mm256_shuffle_epi8(th, hi1),
                    );
                    acc0[r] = _mm256_xor_si256(acc0[r], p0);
                    acc1[r] = _mm256_xor_si256(acc1[r], p1);
                }
            }
            for r in 0..M {
                // SAFETY: i + 64 <= len <= outs[r].len(); the outputs are distinct `&mut`
                // buffers, so they alias neither each other nor the sources.
                unsafe {
                    let p = out_ptrs[r].add(i);
                    let (mut y0, mut y1) = (acc0[r], acc1[r]);
                    if ACC {
                        y0 = _mm256_xor_si256(y0, _mm256_loadu_si256(p.cast()));
                        y1 = _mm256_xor_si256(y1, _mm256_loadu_si256(p.add(32).cast()));
                    }
                    _mm256_storeu_si256(p.cast(), y0);
                    _mm256_storeu_si256(p.add(32).cast(), y1);
                }
            }
            i += 64;
        }
        while i + 32 <= len {
            let mut acc = [_mm256_setzero_si256(); M];
            for (j, src) in srcs.iter().enumerate() {
                // SAFETY: i + 32 <= len <= src.len().
                let x = unsafe { _mm256_loadu_si256(src.as_ptr().add(i).cast()) };
                let lo = _mm256_and_si256(x, mask);
                let hi = _mm256_and_si256(_mm256_srli_epi64::<4>(x), mask);
                for r in 0..M {
                    if XOR0 && r == 0 {
                        acc[0] = _mm256_xor_si256(acc[0], x);
                        continue;
                    }
                    // SAFETY: as in the 64-byte loop.
                    let (tl, th) = unsafe {
                        let t = tables[r].add(j);
                        (
                            _mm256_load_si256((*t).lo.as_ptr().cast()),
                            _mm256_load_si256((*t).hi.as_ptr().cast()),
                        )
                    };
                    let p =
                        _mm256_xor_si256(_mm256_shuffle_epi8(tl, lo), _mm256_shuffle_epi8(th, hi));
                    acc[r] = _mm256_xor_si256(acc[r], p);
                }
            }
            for r in 0..M {
                // SAFETY: i + 32 <= len <= outs[r].len(); distinct buffers as above.
                unsafe {
                    let p = out_ptrs[r].add(i);
                    let mut y = acc[r];
                    if ACC {
                        y = _mm256_xor_si256(y, _mm256_loadu_si256(p.cast()));
                    }
                    _mm256_storeu_si256(p.cast(), y);
                }
            }
            i += 32;
        }
        if i < len {
            scalar_tail(rows, srcs, outs, i, len, ACC);
        }
    }
}
