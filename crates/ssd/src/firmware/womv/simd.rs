//! The write pass of a coded page 32 cells at a time with AVX2: each cell's new level is a
//! 16-entry table lookup per symbol value (`vpshufb` looks up 32 cells at once), selected by
//! the cell's symbol. The scalar pass of `page.rs` does one table lookup per cell; this one
//! is several times faster (docs/benchmarks.md, "The WOM-v SSD"), which the WOM-v SSD's
//! simulation speed needs. The scalar pass stays the reference: it runs where AVX2 is
//! missing, for widths that do not divide 8, for the cells past the last whole group of 32,
//! and for any group where a cell cannot take its symbol (EINVAL, beyond GEN_MAX), since only
//! the scalar pass records which cells those are. `page.rs`'s tests compare both passes with
//! a per-cell reference.

/// A group of 32 cells: how many were done, the cells raised and the cells at risk.
pub(super) type Done = (usize, u32, u32);

/// Runs the pass over the whole groups of 32 cells it can take, from the first cell, and
/// stops at the first group holding a cell that cannot take its symbol. `tables[d][level]`
/// is the new level of a cell at `level` given symbol `d` (`0xFF`: it cannot take it);
/// `risk[level]` has bit 7 set for levels at risk. Returns `None` when AVX2 is missing.
pub(super) fn pass<const K: usize>(
    old: &[u8],
    new: &mut [u8],
    data: &[u8],
    tables: &[[u8; 16]],
    risk: &[u8; 16],
) -> Option<Done> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 was detected just above.
            return Some(unsafe { avx2::pass::<K>(old, new, data, tables, risk) });
        }
    }
    let _ = (old, new, data, tables, risk);
    None
}

/// Decodes whole groups of 32 cells into `out` (`dec[level]` is a level's symbol), from the
/// first cell; returns the cells done (`None`: no AVX2). Cells the ECC recovers are the
/// caller's to patch.
pub(super) fn unpack<const K: usize>(
    levels: &[u8],
    dec: &[u8; 16],
    out: &mut [u8],
) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 was detected just above.
            return Some(unsafe { avx2::unpack::<K>(levels, dec, out) });
        }
    }
    let _ = (levels, dec, out);
    None
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU supports AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pass<const K: usize>(
        old: &[u8],
        new: &mut [u8],
        data: &[u8],
        tables: &[[u8; 16]],
        risk: &[u8; 16],
    ) -> super::Done {
        const { assert!(K == 1 || K == 2 || K == 4) };
        let per = 8 / K;
        let bytes_per_group = 32 * K / 8;
        let groups = (old.len().min(new.len()) / 32).min(data.len() / bytes_per_group);
        // Cell c of a group takes its symbol from data byte c / per, bits (c % per) * K and
        // up; a symbol is compared in place (shifted) rather than shifted down.
        let mut idx = [0u8; 32];
        let mut mask = [0u8; 32];
        for c in 0..32 {
            idx[c] = (c / per) as u8;
            mask[c] = (((1u16 << K) - 1) << ((c % per) * K)) as u8;
        }
        let load32 = |a: &[u8; 32]| {
            // SAFETY: reads the 32 bytes of `a`.
            unsafe { _mm256_loadu_si256(a.as_ptr().cast()) }
        };
        let (idx, mask) = (load32(&idx), load32(&mask));
        let mut patterns = [_mm256_setzero_si256(); 16];
        let mut lookups = [_mm256_setzero_si256(); 16];
        for (d, table) in tables.iter().enumerate().take(16) {
            let mut p = [0u8; 32];
            for (c, b) in p.iter_mut().enumerate() {
                *b = ((d as u16) << ((c % per) * K)) as u8;
            }
            patterns[d] = load32(&p);
            // SAFETY: reads the table's 16 bytes.
            lookups[d] =
                _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(table.as_ptr().cast()) });
        }
        // A constant trip count, so the loop below unrolls with its tables in registers.
        let values = 1 << K;
        debug_assert_eq!(tables.len(), values);
        // Risky levels count 1 each (bit 7 of `risk` marks them).
        let risk: [u8; 16] = std::array::from_fn(|l| risk[l] >> 7);
        // SAFETY: reads the 16 bytes of `risk`.
        let risk = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(risk.as_ptr().cast()) });
        let einval = _mm256_set1_epi8(-1);
        let zero = _mm256_setzero_si256();
        // Cells left unchanged and cells at risk, counted per byte lane and summed into 64-bit
        // lanes every 255 groups (before a byte lane could overflow).
        let (mut same8, mut risky8) = (zero, zero);
        let (mut same64, mut risky64) = (zero, zero);
        let sum = |same8: &mut __m256i,
                   risky8: &mut __m256i,
                   same64: &mut __m256i,
                   risky64: &mut __m256i| {
            *same64 = _mm256_add_epi64(*same64, _mm256_sad_epu8(*same8, zero));
            *risky64 = _mm256_add_epi64(*risky64, _mm256_sad_epu8(*risky8, zero));
            *same8 = zero;
            *risky8 = zero;
        };
        let total = |v: __m256i| {
            let mut l = [0u64; 4];
            // SAFETY: writes the 32 bytes of `l`.
            unsafe { _mm256_storeu_si256(l.as_mut_ptr().cast(), v) };
            l.iter().sum::<u64>() as u32
        };
        let mut done = groups;
        for g in 0..groups {
            if g % 255 == 0 {
                sum(&mut same8, &mut risky8, &mut same64, &mut risky64);
            }
            // SAFETY: g < groups, so the 32 cells at g * 32 lie inside `old` and `new`, and
            // the group's `bytes_per_group` data bytes inside `data`; each load reads exactly
            // those bytes (loading them straight into a register: copying them through a
            // buffer first stalled every group on store forwarding).
            let (o, d) = unsafe {
                let p = data.as_ptr().add(g * bytes_per_group);
                let d = match K {
                    1 => _mm_cvtsi32_si128(std::ptr::read_unaligned(p.cast::<i32>())),
                    2 => _mm_loadl_epi64(p.cast()),
                    _ => _mm_loadu_si128(p.cast()),
                };
                (_mm256_loadu_si256(old.as_ptr().add(g * 32).cast()), d)
            };
            let sym =
                _mm256_and_si256(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(d), idx), mask);
            let mut n = _mm256_setzero_si256();
            for v in 0..values {
                let selected = _mm256_cmpeq_epi8(sym, patterns[v]);
                n = _mm256_or_si256(
                    n,
                    _mm256_and_si256(selected, _mm256_shuffle_epi8(lookups[v], o)),
                );
            }
            if _mm256_movemask_epi8(_mm256_cmpeq_epi8(n, einval)) != 0 {
                done = g;
                break;
            }
            same8 = _mm256_sub_epi8(same8, _mm256_cmpeq_epi8(n, o));
            risky8 = _mm256_add_epi8(risky8, _mm256_shuffle_epi8(risk, n));
            // SAFETY: as for the load above.
            unsafe { _mm256_storeu_si256(new.as_mut_ptr().add(g * 32).cast(), n) };
        }
        sum(&mut same8, &mut risky8, &mut same64, &mut risky64);
        let cells = done * 32;
        (cells, cells as u32 - total(same64), total(risky64))
    }

    /// # Safety
    /// The CPU supports AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn unpack<const K: usize>(
        levels: &[u8],
        dec: &[u8; 16],
        out: &mut [u8],
    ) -> usize {
        const { assert!(K == 1 || K == 2 || K == 4) };
        let bytes_per_group = 32 * K / 8;
        let groups = (levels.len() / 32).min(out.len() / bytes_per_group);
        // SAFETY: reads the 16 bytes of `dec`.
        let dec = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(dec.as_ptr().cast()) });
        // Symbols are packed by multiply-adds: pairs of bytes into 16-bit lanes (s0 + s1 <<
        // K), then pairs of those into 32-bit lanes (+ (s2 + s3 << K) << 2K).
        let w1 = _mm256_set1_epi16((1 | 1 << (8 + K)) as i16);
        let w2 = _mm256_set1_epi32(1 | 1 << (16 + 2 * K));
        let mut lanes = [0u32; 8];
        for g in 0..groups {
            // SAFETY: g < groups, so the 32 cells at g * 32 lie inside `levels`.
            let l = unsafe { _mm256_loadu_si256(levels.as_ptr().add(g * 32).cast()) };
            let sym = _mm256_shuffle_epi8(dec, _mm256_and_si256(l, _mm256_set1_epi8(15)));
            let quads = _mm256_madd_epi16(_mm256_maddubs_epi16(sym, w1), w2);
            // SAFETY: writes the 32 bytes of `lanes`.
            unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), quads) };
            let o = &mut out[g * bytes_per_group..(g + 1) * bytes_per_group];
            // Each 32-bit lane holds 4 symbols: 4K bits.
            match K {
                1 => {
                    for (j, b) in o.iter_mut().enumerate() {
                        *b = (lanes[2 * j] | lanes[2 * j + 1] << 4) as u8;
                    }
                }
                2 => {
                    for (b, lane) in o.iter_mut().zip(lanes) {
                        *b = lane as u8;
                    }
                }
                _ => {
                    for (j, lane) in lanes.iter().enumerate() {
                        o[2 * j] = *lane as u8;
                        o[2 * j + 1] = (*lane >> 8) as u8;
                    }
                }
            }
        }
        groups * 32
    }
}
