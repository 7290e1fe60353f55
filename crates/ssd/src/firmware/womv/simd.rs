//! The write pass and the decode of a coded page, vectorized. Two instruction sets, the best
//! the CPU has chosen at run time:
//!
//! - **AVX-512 VBMI** (128 cells at a time, any width k from 1 to 4): a cell's symbol and its
//!   level form one index, `symbol << 4 | level`, and the new level is one byte permute
//!   (`vpermb`, or `vpermi2b` over 128 entries for k = 3 and two of them for k = 4) into the
//!   transition table; symbols are cut out of the data by `vpmultishiftqb`, and the decode
//!   packs symbols back into bytes by multiply-adds and one more permute.
//! - **AVX2** (32 cells at a time, k dividing 8): each cell's new level is a 16-entry table
//!   lookup per symbol value (`vpshufb`), selected by the cell's symbol.
//!
//! Cells are packed two a byte (`page.rs`: cell 2j in the low half of byte j). The AVX-512
//! pass works on a group's even cells (the low halves of its 64 bytes) and its odd cells (the
//! high halves) as two vectors, one cell a byte; the AVX2 pass spreads a group's 16 bytes into
//! 32 cells in order, and packs the new levels back.
//!
//! The scalar pass of `page.rs` does one table lookup per cell; the vector passes are several
//! times faster (docs/benchmarks.md, "The WOM-v SSD"), which the WOM-v SSD's simulation
//! speed needs. A cell that cannot take its symbol (EINVAL, beyond GEN_MAX) is rare: the
//! vector passes raise it to V_MAX like the others and record it, with its symbol, one by one
//! from the group's mask. The scalar pass stays the reference: it runs where neither
//! instruction set is present and for the cells past the last whole group. `page.rs`'s tests
//! compare every pass the CPU has with a per-cell reference.

/// The instruction sets the passes use, in order of preference (last is best).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Scalar,
    Avx2,
    Avx512Vbmi,
}

thread_local! {
    /// The best instruction set a pass may use on this thread: tests lower it to compare the
    /// passes, benchmarks to measure what each gains.
    static LIMIT: std::cell::Cell<Isa> = const { std::cell::Cell::new(Isa::Avx512Vbmi) };
}

/// The best instruction set this CPU has for the passes.
pub fn best() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        // The AVX-512 pass counts with POPCNT too (every AVX-512 CPU has it, but a virtual
        // machine may hide CPU features one by one).
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vbmi")
            && std::arch::is_x86_feature_detected!("popcnt")
        {
            return Isa::Avx512Vbmi;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return Isa::Avx2;
        }
    }
    Isa::Scalar
}

/// The instruction set the passes use on this thread: the CPU's best, at most the limit.
pub fn isa() -> Isa {
    best().min(LIMIT.with(|l| l.get()))
}

/// Limits the passes on this thread to `limit` (and below); returns the previous limit.
pub fn set_limit(limit: Isa) -> Isa {
    LIMIT.with(|l| l.replace(limit))
}

/// What a pass counted over its cells.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PassCounts {
    /// Cells whose level rose.
    pub raised: u32,
    /// Cells at a level at risk after the write.
    pub at_risk: u32,
    /// Whether some cell's new level is below its old one (the medium forbids it).
    pub fell: bool,
}

/// The cells a vector pass did (from the first) and what it counted over them.
pub(super) type Done = (usize, PassCounts);

/// What a vector pass needs besides the cells and the data: `tables[d][level]` is the new
/// level of a cell at `level` given symbol `d` (`0xFF`: it cannot take it, EINVAL);
/// `risk[level]` has bit 7 set for levels at risk; an EINVAL cell is raised to `v_max`.
pub(super) struct PassTables<'a> {
    pub tables: &'a [[u8; 16]],
    pub risk: &'a [u8; 16],
    pub v_max: u8,
}

/// Runs the pass over the whole groups among the first `cells` cells, from the first cell
/// (`old` and `new` packed); EINVAL cells go to V_MAX and, in cell order, with their
/// symbols, to `recovered`. Returns `None` when the CPU has no vector pass for K.
pub(super) fn pass<const K: usize>(
    old: &[u8],
    new: &mut [u8],
    data: &[u8],
    cells: usize,
    t: &PassTables,
    recovered: &mut Vec<(u32, u8)>,
) -> Option<Done> {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vbmi => {
            // SAFETY: `isa()` found AVX-512 F, BW, VBMI and POPCNT on this CPU.
            Some(unsafe { avx512::pass::<K>(old, new, data, cells, t, recovered) })
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if 8 % K == 0 => {
            // SAFETY: `isa()` found AVX2 on this CPU.
            Some(unsafe { avx2::pass::<K>(old, new, data, cells, t, recovered) })
        }
        _ => None,
    }
}

/// The K-bit symbol of cell `cell` in `data` (bits past its end read as 0).
fn symbol_of<const K: usize>(data: &[u8], cell: usize) -> u8 {
    let bit = cell * K;
    let byte = |i: usize| data.get(i).copied().unwrap_or(0) as u16;
    let two = byte(bit / 8) | byte(bit / 8 + 1) << 8;
    ((two >> (bit % 8)) & ((1 << K) - 1)) as u8
}

/// Records the EINVAL cells of an AVX-512 group, whose even and odd cells are two vectors
/// (bit p of `masks[h]`: cell `first + 2p + h`), in cell order.
#[cold]
fn record_einval_pairs<const K: usize>(
    masks: [u64; 2],
    first: usize,
    data: &[u8],
    recovered: &mut Vec<(u32, u8)>,
) {
    let mut both = masks[0] | masks[1];
    while both != 0 {
        let p = both.trailing_zeros() as usize;
        for (h, mask) in masks.iter().enumerate() {
            if mask >> p & 1 == 1 {
                let cell = first + 2 * p + h;
                recovered.push((cell as u32, symbol_of::<K>(data, cell)));
            }
        }
        both &= both - 1;
    }
}

/// Records the EINVAL cells of a group (bit c of `mask`: cell `first + c`), in cell order.
#[cold]
fn record_einval<const K: usize>(
    mut mask: u64,
    first: usize,
    data: &[u8],
    recovered: &mut Vec<(u32, u8)>,
) {
    while mask != 0 {
        let cell = first + mask.trailing_zeros() as usize;
        recovered.push((cell as u32, symbol_of::<K>(data, cell)));
        mask &= mask - 1;
    }
}

/// Decodes whole groups among the first `cells` cells (`levels` packed) into `out`
/// (`dec[level]` is a level's symbol), from the first cell; returns the cells done (`None`:
/// no vector decode for K on this CPU). Cells the ECC recovers are the caller's to patch.
pub(super) fn unpack<const K: usize>(
    levels: &[u8],
    cells: usize,
    dec: &[u8; 16],
    out: &mut [u8],
) -> Option<usize> {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vbmi => {
            // SAFETY: `isa()` found AVX-512 F, BW and VBMI on this CPU.
            Some(unsafe { avx512::unpack::<K>(levels, cells, dec, out) })
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if 8 % K == 0 => {
            // SAFETY: `isa()` found AVX2 on this CPU.
            Some(unsafe { avx2::unpack::<K>(levels, cells, dec, out) })
        }
        _ => None,
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// 16 bytes of packed cells as 32 cells, one a byte.
    #[target_feature(enable = "avx2")]
    fn spread(p: __m128i) -> __m256i {
        let low_nibbles = _mm_set1_epi8(15);
        let low = _mm_and_si128(p, low_nibbles);
        let high = _mm_and_si128(_mm_srli_epi16::<4>(p), low_nibbles);
        _mm256_set_m128i(_mm_unpackhi_epi8(low, high), _mm_unpacklo_epi8(low, high))
    }

    /// 32 cells of levels below 16, one a byte, packed into 16 bytes.
    #[target_feature(enable = "avx2")]
    fn pack(n: __m256i) -> __m128i {
        // In each 128-bit half: its even cells to bytes 0-7, its odd ones to bytes 8-15; then
        // each odd cell over its even neighbour, and the halves' low 8 bytes together.
        #[rustfmt::skip]
        let evens_then_odds = _mm256_setr_epi8(
            0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
            0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
        );
        let v = _mm256_shuffle_epi8(n, evens_then_odds);
        let w = _mm256_or_si256(v, _mm256_slli_epi16::<4>(_mm256_srli_si256::<8>(v)));
        _mm256_castsi256_si128(_mm256_permute4x64_epi64::<0b1000>(w))
    }

    /// # Safety
    /// The CPU supports AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pass<const K: usize>(
        old: &[u8],
        new: &mut [u8],
        data: &[u8],
        cells: usize,
        t: &super::PassTables,
        recovered: &mut Vec<(u32, u8)>,
    ) -> super::Done {
        let (tables, risk) = (t.tables, t.risk);
        // Symbols straddle bytes unless K divides 8: the dispatcher never calls this then.
        if 8 % K != 0 {
            return (0, super::PassCounts::default());
        }
        let per = 8 / K;
        let bytes_per_group = 32 * K / 8;
        let groups =
            (cells / 32).min(old.len().min(new.len()) / 16).min(data.len() / bytes_per_group);
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
        let v_max = _mm256_set1_epi8(t.v_max as i8);
        let zero = _mm256_setzero_si256();
        let mut fell = zero;
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
        for g in 0..groups {
            if g % 255 == 0 {
                sum(&mut same8, &mut risky8, &mut same64, &mut risky64);
            }
            // SAFETY: g < groups, so the 32 cells at g * 32 (16 bytes at g * 16) lie inside
            // `old` and `new`, and
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
                (spread(_mm_loadu_si128(old.as_ptr().add(g * 16).cast())), d)
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
            let einval_cells = _mm256_movemask_epi8(_mm256_cmpeq_epi8(n, einval)) as u32;
            if einval_cells != 0 {
                super::record_einval::<K>(einval_cells as u64, g * 32, data, recovered);
                // Every other level is at most V_MAX.
                n = _mm256_min_epu8(n, v_max);
            }
            // A cell fell where the larger of its levels is not the new one.
            fell = _mm256_or_si256(
                fell,
                _mm256_xor_si256(_mm256_cmpeq_epi8(_mm256_max_epu8(n, o), n), einval),
            );
            same8 = _mm256_sub_epi8(same8, _mm256_cmpeq_epi8(n, o));
            risky8 = _mm256_add_epi8(risky8, _mm256_shuffle_epi8(risk, n));
            // SAFETY: as for the load above.
            unsafe { _mm_storeu_si128(new.as_mut_ptr().add(g * 16).cast(), pack(n)) };
        }
        sum(&mut same8, &mut risky8, &mut same64, &mut risky64);
        let cells = groups * 32;
        let counts = super::PassCounts {
            raised: cells as u32 - total(same64),
            at_risk: total(risky64),
            fell: _mm256_testz_si256(fell, fell) == 0,
        };
        (cells, counts)
    }

    /// # Safety
    /// The CPU supports AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn unpack<const K: usize>(
        levels: &[u8],
        cells: usize,
        dec: &[u8; 16],
        out: &mut [u8],
    ) -> usize {
        if 8 % K != 0 {
            return 0;
        }
        let bytes_per_group = 32 * K / 8;
        let groups = (cells / 32).min(levels.len() / 16).min(out.len() / bytes_per_group);
        // SAFETY: reads the 16 bytes of `dec`.
        let dec = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(dec.as_ptr().cast()) });
        // Symbols are packed by multiply-adds: pairs of bytes into 16-bit lanes (s0 + s1 <<
        // K), then pairs of those into 32-bit lanes (+ (s2 + s3 << K) << 2K).
        let w1 = _mm256_set1_epi16((1 | 1 << (8 + K)) as i16);
        let w2 = _mm256_set1_epi32(1 | 1 << (16 + 2 * K));
        let mut lanes = [0u32; 8];
        for g in 0..groups {
            // SAFETY: g < groups, so the 32 cells at g * 32 (16 bytes at g * 16) lie inside
            // `levels`.
            let l = spread(unsafe { _mm_loadu_si128(levels.as_ptr().add(g * 16).cast()) });
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

#[cfg(target_arch = "x86_64")]
mod avx512 {
    //! 128 cells at a time: a group is 64 bytes of packed cells, whose low halves are the
    //! group's even cells and whose high halves are its odd ones. Each is one vector of 64
    //! cells (cell 2p + h at byte p of vector h), so spreading the bytes into cells is a mask
    //! and a shift, and packing them back is a shift and an or, with no byte permutes; the
    //! permutes go to the table lookups and to the symbols.

    use std::arch::x86_64::*;

    /// How far ahead of a group its cells are asked for (`prefetch`): a page's cells lie
    /// in DRAM, long unread, and the hardware prefetcher stops at every 4 KiB boundary.
    const PREFETCH_BYTES: usize = 1024;

    /// Asks for the cache line `PREFETCH_BYTES` past `p` (a hint: it never faults, and an
    /// address past the slice's end is never dereferenced).
    #[inline(always)]
    fn prefetch(p: *const u8) {
        // SAFETY: a prefetch reads nothing the program sees and cannot fault.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH_BYTES).cast()) }
    }

    /// Loads the 64 bytes at `p`.
    ///
    /// # Safety
    /// `p` points to 64 readable bytes and the CPU supports AVX-512 F.
    #[target_feature(enable = "avx512f")]
    unsafe fn load64(p: *const u8) -> __m512i {
        // SAFETY: the caller's.
        unsafe { _mm512_loadu_si512(p.cast()) }
    }

    /// The low `bytes` bits set (up to 64).
    fn low_bits(bytes: usize) -> u64 {
        u64::MAX >> (64 - bytes)
    }

    /// A group's even and odd cells (levels below 16), one a byte, from its packed bytes.
    #[target_feature(enable = "avx512f,avx512bw")]
    fn even_and_odd(packed: __m512i) -> [__m512i; 2] {
        let low_nibbles = _mm512_set1_epi8(15);
        [
            _mm512_and_si512(packed, low_nibbles),
            _mm512_and_si512(_mm512_srli_epi16::<4>(packed), low_nibbles),
        ]
    }

    /// # Safety
    /// The CPU supports AVX-512 F, BW and VBMI, and POPCNT.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi,popcnt")]
    pub(super) unsafe fn pass<const K: usize>(
        old: &[u8],
        new: &mut [u8],
        data: &[u8],
        cells: usize,
        t: &super::PassTables,
        recovered: &mut Vec<(u32, u8)>,
    ) -> super::Done {
        let (tables, risk) = (t.tables, t.risk);
        // A group's 128 symbols are 16K data bytes.
        let data_per_group = 16 * K;
        let groups =
            (cells / 128).min(old.len().min(new.len()) / 64).min(data.len() / data_per_group);
        // The transition of (symbol d, level l) at `d << 4 | l`: 2^(K+4) entries, in up to
        // four 64-byte tables.
        let mut lut = [0xFFu8; 256];
        for (d, table) in tables.iter().enumerate().take(1 << K) {
            lut[d << 4..(d << 4) + 16].copy_from_slice(table);
        }
        // SAFETY: each reads 64 bytes inside `lut`.
        let lut: [__m512i; 4] = std::array::from_fn(|i| unsafe { load64(lut[64 * i..].as_ptr()) });
        // Byte j of 64-bit lane q of either vector is cell 16q + 2j + h, so lane q needs the
        // group's data bytes 2Kq .. 2Kq + 2K - 1 (the symbols of cells 16q .. 16q + 15): one
        // byte permute puts them at the bottom of the lane (the bytes past them repeat the
        // group's last and are never used). `vpmultishiftqb` then moves bits K(2j + h) - 4
        // .. K(2j + h) + 3 (mod 64) of the lane into byte j, which puts the cell's symbol at
        // bits 4 .. 4 + K, where the table index wants it.
        let spread: [u8; 64] =
            std::array::from_fn(|i| (2 * K * (i / 8) + i % 8).min(16 * K - 1) as u8);
        let shifts: [[u8; 64]; 2] = std::array::from_fn(|h| {
            std::array::from_fn(|i| ((K * (2 * (i % 8) + h) + 60) % 64) as u8)
        });
        // SAFETY: each reads a 64-byte array.
        let (spread, shifts) = unsafe {
            (load64(spread.as_ptr()), [load64(shifts[0].as_ptr()), load64(shifts[1].as_ptr())])
        };
        let symbol_bits = _mm512_set1_epi8((((1u16 << K) - 1) << 4) as u8 as i8);
        let data_bytes = low_bits(data_per_group);
        // SAFETY: reads the 16 bytes of `risk`.
        let risk = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(risk.as_ptr().cast()) });
        let einval = _mm512_set1_epi8(-1);
        let v_max = _mm512_set1_epi8(t.v_max as i8);
        let (mut raised, mut at_risk, mut fell) = (0u32, 0u32, 0u64);
        for g in 0..groups {
            prefetch(old.as_ptr().wrapping_add(g * 64));
            // SAFETY: g < groups, so the group's 64 bytes of cells lie inside `old`, and its
            // `data_per_group` data bytes inside `data` (the masked load reads no byte past
            // them).
            let (o, d) = unsafe {
                let d = _mm512_maskz_loadu_epi8(
                    data_bytes,
                    data.as_ptr().add(g * data_per_group).cast(),
                );
                (even_and_odd(load64(old.as_ptr().add(g * 64))), _mm512_permutexvar_epi8(spread, d))
            };
            let mut n = [0, 1].map(|h| {
                let sym = _mm512_multishift_epi64_epi8(shifts[h], d);
                // Levels are below 16, so the index is the symbol's bits over the level's.
                let index = _mm512_or_si512(_mm512_and_si512(sym, symbol_bits), o[h]);
                match K {
                    1 | 2 => _mm512_permutexvar_epi8(index, lut[0]),
                    3 => _mm512_permutex2var_epi8(lut[0], index, lut[1]),
                    _ => {
                        let low = _mm512_permutex2var_epi8(lut[0], index, lut[1]);
                        let high = _mm512_permutex2var_epi8(lut[2], index, lut[3]);
                        _mm512_mask_blend_epi8(_mm512_movepi8_mask(index), low, high)
                    }
                }
            });
            let einval_cells = n.map(|n| _mm512_cmpeq_epi8_mask(n, einval));
            if einval_cells[0] | einval_cells[1] != 0 {
                super::record_einval_pairs::<K>(einval_cells, g * 128, data, recovered);
                for h in 0..2 {
                    n[h] = _mm512_mask_mov_epi8(n[h], einval_cells[h], v_max);
                }
            }
            for h in 0..2 {
                raised += _mm512_cmpneq_epi8_mask(n[h], o[h]).count_ones();
                fell |= _mm512_cmplt_epu8_mask(n[h], o[h]);
                // New levels are below 16 here: `vpshufb` looks each up in `risk`.
                at_risk += _mm512_movepi8_mask(_mm512_shuffle_epi8(risk, n[h])).count_ones();
            }
            let packed = _mm512_or_si512(n[0], _mm512_slli_epi16::<4>(n[1]));
            // SAFETY: the group's 64 bytes of cells lie inside `new`.
            unsafe { _mm512_storeu_si512(new.as_mut_ptr().add(g * 64).cast(), packed) };
        }
        (groups * 128, super::PassCounts { raised, at_risk, fell: fell != 0 })
    }

    /// # Safety
    /// The CPU supports AVX-512 F, BW and VBMI.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
    pub(super) unsafe fn unpack<const K: usize>(
        levels: &[u8],
        cells: usize,
        dec: &[u8; 16],
        out: &mut [u8],
    ) -> usize {
        let out_per_group = 16 * K;
        let groups = (cells / 128).min(levels.len() / 64).min(out.len() / out_per_group);
        // SAFETY: reads the 16 bytes of `dec`.
        let dec = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(dec.as_ptr().cast()) });
        // Byte p of the group gets the symbols of cells 2p and 2p + 1 (2K bits); then
        // multiply-adds pack pairs of bytes into 16-bit lanes (4K bits) and pairs of those
        // into 32-bit lanes (8K bits: K bytes at the lane's bottom), and a permute gathers
        // the K bytes of each lane. With K = 4 a byte is already whole.
        let odd_shift = _mm_cvtsi32_si128(K as i32);
        let w1 = _mm512_set1_epi16((1 | (1 << (2 * K)) << 8) as i16);
        let w2 = _mm512_set1_epi32(1 | (1 << (4 * K)) << 16);
        let gather: [u8; 64] = std::array::from_fn(|i| ((i / K) * 4 + i % K).min(63) as u8);
        // SAFETY: reads a 64-byte array.
        let gather = unsafe { load64(gather.as_ptr()) };
        let out_bytes = low_bits(out_per_group);
        for g in 0..groups {
            prefetch(levels.as_ptr().wrapping_add(g * 64));
            // SAFETY: g < groups, so the group's 64 bytes of cells lie inside `levels`.
            let [even, odd] = even_and_odd(unsafe { load64(levels.as_ptr().add(g * 64)) });
            let pairs = _mm512_or_si512(
                _mm512_shuffle_epi8(dec, even),
                _mm512_sll_epi16(_mm512_shuffle_epi8(dec, odd), odd_shift),
            );
            let packed = if K == 4 {
                pairs
            } else {
                let quads = _mm512_madd_epi16(_mm512_maddubs_epi16(pairs, w1), w2);
                _mm512_permutexvar_epi8(gather, quads)
            };
            // SAFETY: the group's `out_per_group` output bytes lie inside `out`; the masked
            // store writes no byte past them.
            unsafe {
                _mm512_mask_storeu_epi8(
                    out.as_mut_ptr().add(g * out_per_group).cast(),
                    out_bytes,
                    packed,
                )
            };
        }
        groups * 128
    }
}
