//! A WOM-v coded page: the levels of its cells, derived from the real bytes written, and the
//! write cycles since its erase.
//!
//! A write encodes each k-bit symbol of the data into one cell (§3.6.3: "all writes are
//! encoded", a 4 KiB write takes n/k × 4 KiB of cells). In the default mode the page's levels
//! are read first and every cell takes the same-generation transition; in NR mode (§3.6.4) the
//! cells are written with the code-words of the erase unit's generation, without reading.
//!
//! Beyond GEN_MAX write cycles a cell that cannot take its symbol is raised to V_MAX and
//! becomes EINVAL (§3.3.1 "Reusing underutilized Cells"): its value is lost from the cells, and
//! the page's ECC, which knows where the erasures are, recovers it. The page keeps what the ECC
//! would recover (the symbol of each EINVAL cell) and accepts a write only while the EINVAL
//! cells stay within the ECC's budget; a write that would exceed it changes nothing and is
//! refused, so the caller writes the data to an erased page instead and no data is lost.
//!
//! Every program checks the invariant of the medium: no cell's level decreases between erases.

use super::code::WomCode;

/// How a write chooses the new levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// Read the page, then raise each cell to the lowest level holding its symbol.
    SameGeneration,
    /// NR mode: write every cell with the code-word of its symbol in this generation (1-based),
    /// without reading the page first.
    NoRead { generation: u32 },
}

/// What a write did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// The page's write cycle this write was (1 after an erase).
    pub cycle: u32,
    /// Cells whose level rose.
    pub cells_raised: u32,
    /// Cells that became EINVAL in this write.
    pub new_einval_cells: u32,
    /// EINVAL cells of the page after the write.
    pub einval_cells: u32,
}

/// Why a write was refused (the page is unchanged).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WriteRefused {
    /// The data needs more EINVAL cells than the ECC budget allows: erase first.
    #[error("{einval_cells} cells would be EINVAL, over the ECC budget of {budget_cells}")]
    EccBudget { einval_cells: u32, budget_cells: u32 },
    /// NR mode past the code's last generation, or a generation below the page's: erase first.
    #[error("generation {generation} cannot be written over generation {page_generation}")]
    Generation { generation: u32, page_generation: u32 },
    /// A cell would have to be lowered: a bug in the code or the caller.
    #[error("cell {cell} would fall from level {from} to {to}")]
    LevelDecrease { cell: u32, from: u8, to: u8 },
    /// The data does not fill the page's cells exactly.
    #[error("{bytes} bytes need {needed} cells; the page has {cells}")]
    Size { bytes: usize, needed: usize, cells: usize },
}

/// The cells of one coded page.
#[derive(Clone, Debug)]
pub struct CodedPage {
    /// One level per cell, two cells a byte (cell 2j in the low half of byte j: the levels
    /// have 4 bits, and packing them halves the memory a write and a read stream through),
    /// meaningful only once the page has been written since its erase
    /// (`cycles > 0`): an erased page's cells are all at level 0 whatever this holds. It is
    /// empty until the page's first write (an erased device of millions of pages holds no
    /// cells in memory until they are written), and an erase keeps it as it is (zeroing
    /// 16,384 cells at every erase cost as much as a write's pass).
    levels: Vec<u8>,
    cells: u32,
    /// What the ECC recovers: (cell, symbol) of each EINVAL cell, in cell order.
    recovered: Vec<(u32, u8)>,
    cycles: u32,
    /// NR mode: the generation last written (0: none since the erase).
    generation: u32,
    /// Cells at risk as of the last write (0 when erased; only read once a page has been
    /// written, since an erased page is within GEN_MAX).
    at_risk: u32,
}

/// Two pages are equal when their cells read the same (an erased page's stale buffer is not
/// part of its state) and so does what the ECC recovers and the write-cycle bookkeeping.
impl PartialEq for CodedPage {
    fn eq(&self, other: &CodedPage) -> bool {
        self.cells == other.cells
            && self.cycles == other.cycles
            && self.generation == other.generation
            && self.at_risk == other.at_risk
            && self.recovered == other.recovered
            && self.levels() == other.levels()
    }
}

impl Eq for CodedPage {}

/// A transition-table entry for a cell that cannot take its symbol.
const EINVAL: u8 = u8::MAX;

/// What a write's pass over the cells needs: the new level of every (level, symbol) at
/// `lut[level << k | symbol]`, `EINVAL` where the cell cannot take the symbol.
struct Transitions {
    lut: [u8; 256],
    data_bits: u8,
    v_max: u8,
    /// Bit l set: level l is at risk beyond GEN_MAX.
    risk_mask: u32,
}

impl Transitions {
    /// The new level of one cell; an EINVAL cell is recorded with its symbol (the ECC's
    /// erasures) and raised to V_MAX.
    #[inline(always)]
    fn step(&self, cell: usize, level: u8, d: u8, recovered: &mut Vec<(u32, u8)>) -> u8 {
        let t = self.lut[((level as usize) << self.data_bits | d as usize) & 0xff];
        if t == EINVAL {
            recovered.push((cell as u32, d));
            return self.v_max;
        }
        t
    }
}

/// A pass over the cells of a write: fills `new` from `old` (both packed, two cells a byte)
/// and the data for the first `cells` cells, and counts, in the same pass, the cells raised,
/// the cells at risk after the write, and whether any cell would fall (the medium's
/// invariant, checked cell by cell on every program).
type PassFn = fn(&[u8], &mut [u8], &[u8], usize, &Transitions, &mut Vec<(u32, u8)>) -> PassCounts;
use super::simd::PassCounts;

/// The level of cell `i` in packed cells (cell 2j in the low half of byte j, 2j + 1 in the
/// high half).
#[inline(always)]
fn nibble(packed: &[u8], i: usize) -> u8 {
    packed[i / 2] >> ((i & 1) * 4) & 15
}

/// The bytes that hold `cells` packed cells.
pub(crate) fn packed_len(cells: usize) -> usize {
    cells.div_ceil(2)
}

/// Every cell of packed cells, one level a byte.
fn unpack_levels(packed: &[u8], cells: usize) -> Vec<u8> {
    (0..cells).map(|i| nibble(packed, i)).collect()
}

/// The pass for K data bits per cell, K dividing 8: a byte holds 8/K (an even number of)
/// whole symbols, so a data byte's cells are whole bytes of cells, and the inner loop
/// unrolls.
fn pass_whole_bytes<const K: usize>(
    old: &[u8],
    new: &mut [u8],
    data: &[u8],
    cells: usize,
    t: &Transitions,
    recovered: &mut Vec<(u32, u8)>,
) -> PassCounts {
    let per = 8 / K;
    let mask = ((1u16 << K) - 1) as u8;
    let mut c = PassCounts::default();
    let mut step = |cell: usize, from: u8, d: u8| {
        let level = t.step(cell, from, d, recovered);
        c.raised += (level != from) as u32;
        c.at_risk += (t.risk_mask >> (level & 31)) & 1;
        c.fell |= level < from;
        level
    };
    let packed = old.chunks_exact(per / 2).zip(new.chunks_exact_mut(per / 2));
    for (b, (&byte, (old, new))) in data.iter().zip(packed).take(cells / per).enumerate() {
        for j in 0..per / 2 {
            let first = b * per + 2 * j;
            let low = step(first, old[j] & 15, (byte >> (2 * j * K)) & mask);
            let high = step(first + 1, old[j] >> 4, (byte >> ((2 * j + 1) * K)) & mask);
            new[j] = low | high << 4;
        }
    }
    c
}

/// The pass for K data bits per cell: whole groups of cells vectorized where the CPU can
/// (`super::simd`), the cells past the last group by the scalar pass ([`pass_whole_bytes`]
/// where K divides 8, [`pass_any_width`] otherwise).
fn pass_fast<const K: usize>(
    old: &[u8],
    new: &mut [u8],
    data: &[u8],
    cells: usize,
    t: &Transitions,
    recovered: &mut Vec<(u32, u8)>,
) -> PassCounts {
    let values = 1usize << K;
    let mut tables = [[EINVAL; 16]; 16];
    for (d, table) in tables.iter_mut().enumerate().take(values) {
        for (level, entry) in table.iter_mut().enumerate() {
            *entry = t.lut[(level << K | d) & 0xff];
        }
    }
    let mut risk = [0u8; 16];
    for (level, r) in risk.iter_mut().enumerate() {
        *r = if t.risk_mask >> level & 1 == 1 { 0x80 } else { 0 };
    }
    let scalar: PassFn = if 8 % K == 0 { pass_whole_bytes::<K> } else { pass_any_width };
    let tables = super::simd::PassTables { tables: &tables[..values], risk: &risk, v_max: t.v_max };
    let Some((done, c)) = super::simd::pass::<K>(old, new, data, cells, &tables, recovered) else {
        return scalar(old, new, data, cells, t, recovered);
    };
    // The scalar pass numbers cells from its slices' start: shift its EINVAL records. (A
    // group is a whole number of bytes of cells and of data.)
    let first = recovered.len();
    let (o, n, d) = (&old[done / 2..], &mut new[done / 2..], &data[done * K / 8..]);
    let rest = scalar(o, n, d, cells - done, t, recovered);
    for rec in &mut recovered[first..] {
        rec.0 += done as u32;
    }
    PassCounts {
        raised: c.raised + rest.raised,
        at_risk: c.at_risk + rest.at_risk,
        fell: c.fell | rest.fell,
    }
}

/// The pass for any width (symbols may straddle bytes, as with 3 data bits per cell).
fn pass_any_width(
    old: &[u8],
    new: &mut [u8],
    data: &[u8],
    cells: usize,
    t: &Transitions,
    recovered: &mut Vec<(u32, u8)>,
) -> PassCounts {
    let mut c = PassCounts::default();
    for (j, to) in new.iter_mut().enumerate().take(packed_len(cells)) {
        // The high half of an odd page's last byte is no cell: it stays 0.
        let mut byte = 0u8;
        for i in (2 * j..2 * j + 2).take_while(|&i| i < cells) {
            let from = nibble(old, i);
            let level = t.step(i, from, symbol(data, t.data_bits, i), recovered);
            c.raised += (level != from) as u32;
            c.at_risk += (t.risk_mask >> (level & 31)) & 1;
            c.fell |= level < from;
            byte |= level << ((i & 1) * 4);
        }
        *to = byte;
    }
    c
}

thread_local! {
    /// The new levels of the write being computed (see [`CodedPage::write`]).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Zeros: the old levels of a page written for the first time since its erase.
    static ZEROS: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Cells needed for `bytes` of data under a code of `data_bits` per cell.
pub fn cells_for(bytes: usize, data_bits: u8) -> usize {
    (bytes * 8).div_ceil(data_bits as usize)
}

/// The k-bit symbols of `data`, least significant bits first, the last one zero-padded (the
/// write pass for widths dividing 8 extracts them a byte at a time instead).
fn symbol(data: &[u8], data_bits: u8, i: usize) -> u8 {
    let k = data_bits as usize;
    let mut v = 0u8;
    for b in 0..k {
        let bit = i * k + b;
        let byte = data.get(bit / 8).copied().unwrap_or(0);
        v |= ((byte >> (bit % 8)) & 1) << b;
    }
    v
}

impl CodedPage {
    /// An erased page of `cells` cells.
    pub fn erased(cells: usize) -> CodedPage {
        CodedPage {
            levels: Vec::new(),
            cells: cells as u32,
            recovered: Vec::new(),
            cycles: 0,
            generation: 0,
            at_risk: 0,
        }
    }

    pub fn cells(&self) -> usize {
        self.cells as usize
    }

    /// The level of every cell, one a byte (all 0 while erased).
    pub fn levels(&self) -> Vec<u8> {
        if self.cycles == 0 {
            vec![0; self.cells as usize]
        } else {
            unpack_levels(&self.levels, self.cells as usize)
        }
    }

    /// Write cycles since the last erase.
    pub fn cycles(&self) -> u32 {
        self.cycles
    }

    pub fn einval_cells(&self) -> u32 {
        self.recovered.len() as u32
    }

    /// NR mode: the generation last written since the erase (0: none).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Cells that may fail to take a value in a write cycle beyond GEN_MAX (EINVAL cells
    /// included): at most this many cells become EINVAL in the next such write. Counted at
    /// each write, so asking is free.
    pub fn cells_at_risk(&self) -> u32 {
        self.at_risk
    }

    /// Whether the next write cycle is sure to be accepted whatever its data: within GEN_MAX
    /// (same-generation mode) or a generation left (NR mode), or beyond GEN_MAX with no more
    /// cells at risk than the ECC budget covers (§3.6.3's reuse rule).
    pub fn programmable(&self, code: &WomCode, mode: WriteMode, ecc_budget_cells: u32) -> bool {
        match mode {
            WriteMode::SameGeneration => {
                self.cycles < code.gen_max() || self.at_risk <= ecc_budget_cells
            }
            WriteMode::NoRead { generation } => {
                generation > self.generation && generation as usize <= code.generations().len()
            }
        }
    }

    /// Erases the page: every cell back to level 0.
    pub fn erase(&mut self) {
        // A page written once keeps its cells' memory, unchanged: with no write cycle since
        // the erase they read as level 0 (see `levels`), so the erase costs nothing per cell.
        self.recovered.clear();
        self.cycles = 0;
        self.generation = 0;
        self.at_risk = 0;
    }

    /// Writes `data` (exactly the page's worth) as the next write cycle. `ecc_budget_cells` is
    /// how many EINVAL cells the ECC can recover in this page.
    pub fn write(
        &mut self,
        code: &WomCode,
        data: &[u8],
        mode: WriteMode,
        ecc_budget_cells: u32,
    ) -> Result<WriteReport, WriteRefused> {
        let k = code.data_bits();
        let needed = cells_for(data.len(), k);
        if needed != self.cells as usize {
            return Err(WriteRefused::Size { bytes: data.len(), needed, cells: self.cells() });
        }
        let cycle = self.cycles + 1;
        // Past GEN_MAX V_MAX means EINVAL; NR mode writes whole generations, each of which
        // holds every value, so it never needs it.
        let beyond = mode == WriteMode::SameGeneration && cycle > code.gen_max();
        let v_max = code.v_max();
        if let WriteMode::NoRead { generation } = mode {
            if generation as usize > code.generations().len() || generation <= self.generation {
                return Err(WriteRefused::Generation {
                    generation,
                    page_generation: self.generation,
                });
            }
        }
        // The transition of every (level, symbol) for this write, so the pass over the cells
        // is one table lookup each; `EINVAL` where the cell cannot take the symbol (beyond
        // GEN_MAX, or a cell already EINVAL at V_MAX).
        let values = code.data_values() as usize;
        // At most 16 levels and 4 data bits: 256 entries, indexed without a bounds check.
        let mut lut = [EINVAL; 256];
        for level in 0..code.levels() as u8 {
            for d in 0..values as u8 {
                let target = match mode {
                    _ if beyond && level == v_max => None,
                    WriteMode::SameGeneration => code.encode(level, d, beyond),
                    WriteMode::NoRead { generation } => code.codeword(generation, d),
                };
                lut[(level as usize) << k | d as usize] = target.unwrap_or(EINVAL);
            }
        }
        // First pass: the new levels, without changing anything.
        let cells = self.cells as usize;
        // The new levels go to a per-thread scratch buffer first (a refused write leaves the
        // page as it was), then are copied over the old ones: a fresh buffer per write cost
        // more than the pass (the allocator zeroing new memory).
        let bytes = packed_len(cells);
        let mut new_levels = SCRATCH.with(|s| s.take());
        new_levels.resize(bytes, 0);
        // The old levels: the page's, or zeros for its first write since the erase.
        let mut zeros = Vec::new();
        let old: &[u8] = if self.cycles == 0 {
            zeros = ZEROS.with(|z| z.take());
            if zeros.len() < bytes {
                zeros.resize(bytes, 0);
            }
            &zeros[..bytes]
        } else {
            &self.levels
        };
        let mut recovered = Vec::new();
        let t = Transitions { lut, data_bits: k, v_max, risk_mask: code.risky_level_mask() };
        // Vectorized where the CPU can, the scalar pass otherwise (`pass_fast`).
        let pass: PassFn = match k {
            1 => pass_fast::<1>,
            2 => pass_fast::<2>,
            3 => pass_fast::<3>,
            _ => pass_fast::<4>,
        };
        let counts = pass(old, &mut new_levels, data, cells, &t, &mut recovered);
        let (cells_raised, at_risk) = (counts.raised, counts.at_risk);
        // The medium's invariant, checked cell by cell by the pass; the cell is looked for
        // only when it fails.
        let refused = if counts.fell {
            let fell = |&i: &usize| nibble(&new_levels, i) < nibble(old, i);
            let i = (0..cells).find(fell).unwrap_or(0);
            let (from, to) = (nibble(old, i), nibble(&new_levels, i));
            Some(WriteRefused::LevelDecrease { cell: i as u32, from, to })
        } else if recovered.len() as u32 > ecc_budget_cells {
            let einval_cells = recovered.len() as u32;
            Some(WriteRefused::EccBudget { einval_cells, budget_cells: ecc_budget_cells })
        } else {
            None
        };
        if !zeros.is_empty() {
            ZEROS.with(|z| z.replace(zeros));
        }
        if refused.is_none() {
            // The new levels become the page's, and its old buffer the next write's scratch
            // (swapping them copies nothing).
            std::mem::swap(&mut self.levels, &mut new_levels);
        }
        SCRATCH.with(|s| s.replace(new_levels));
        if let Some(e) = refused {
            return Err(e);
        }
        let einval_cells = recovered.len() as u32;
        let old_einval = self.recovered.len() as u32;
        self.at_risk = at_risk;
        self.recovered = recovered;
        self.cycles = cycle;
        if let WriteMode::NoRead { generation } = mode {
            self.generation = generation;
        }
        Ok(WriteReport {
            cycle,
            cells_raised,
            new_einval_cells: einval_cells.saturating_sub(old_einval),
            einval_cells,
        })
    }

    /// Decodes the page into `out` (the page's worth of bytes), EINVAL cells through the ECC.
    pub fn read(&self, code: &WomCode, out: &mut [u8]) {
        let k = code.data_bits();
        // The symbol of every level (a level without a code-word is only ever reached by an
        // EINVAL cell, whose symbol the ECC supplies below), and of every pair of levels.
        let mut dec = [0u8; 16];
        for (level, d) in dec.iter_mut().enumerate().take(code.levels()) {
            *d = code.decode(level as u8).unwrap_or(0);
        }
        let mut pairs = [0u16; 256];
        for (i, p) in pairs.iter_mut().enumerate() {
            *p = dec[i & 15] as u16 | (dec[i >> 4] as u16) << k;
        }
        let zeros;
        let cells = self.cells as usize;
        let levels: &[u8] = if self.cycles == 0 {
            zeros = vec![0u8; packed_len(cells)];
            &zeros
        } else {
            &self.levels
        };
        match k {
            1 => unpack_fast::<1>(levels, cells, &dec, &pairs, out),
            2 => unpack_fast::<2>(levels, cells, &dec, &pairs, out),
            3 => unpack_fast::<3>(levels, cells, &dec, &pairs, out),
            _ => unpack_fast::<4>(levels, cells, &dec, &pairs, out),
        }
        for &(cell, d) in &self.recovered {
            set_symbol(out, k, cell as usize, d);
        }
    }
}

/// Decodes whole groups of cells vectorized where the CPU can (`super::simd`), the rest a
/// byte of cells at a time where K divides 8, or bit by bit where symbols straddle bytes.
fn unpack_fast<const K: usize>(
    levels: &[u8],
    cells: usize,
    dec: &[u8; 16],
    pairs: &[u16; 256],
    out: &mut [u8],
) {
    let done = super::simd::unpack::<K>(levels, cells, dec, out).unwrap_or(0);
    let (levels, out) = (&levels[done / 2..], &mut out[done * K / 8..]);
    if 8 % K == 0 {
        unpack_whole_bytes::<K>(levels, pairs, out);
    } else {
        // Set bit by bit over zeros (the widths dividing 8 write every byte whole).
        out.fill(0);
        for i in 0..cells - done {
            set_symbol(out, K as u8, i, dec[nibble(levels, i) as usize]);
        }
    }
}

/// Decodes a byte of packed cells at a time (`pairs[byte]` is its two cells' symbols) into
/// whole bytes, for K data bits per cell with K dividing 8.
fn unpack_whole_bytes<const K: usize>(levels: &[u8], pairs: &[u16; 256], out: &mut [u8]) {
    let per = 8 / K;
    for (byte, packed) in out.iter_mut().zip(levels.chunks_exact(per / 2)) {
        let mut v = 0u16;
        for (j, &two) in packed.iter().enumerate() {
            v |= pairs[two as usize] << (2 * j * K);
        }
        *byte = v as u8;
    }
}

/// Writes symbol `d` of cell `i` into `out` (clearing what was there), bits past the end of
/// `out` dropped.
fn set_symbol(out: &mut [u8], k: u8, i: usize, d: u8) {
    for b in 0..k as usize {
        let bit = i * k as usize + b;
        if let Some(byte) = out.get_mut(bit / 8) {
            *byte = *byte & !(1 << (bit % 8)) | ((d >> b) & 1) << (bit % 8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_pack_and_unpack_for_every_width() {
        for k in 1..=4u8 {
            let data: Vec<u8> = (0..=255).collect();
            let cells = cells_for(data.len(), k);
            let mut out = vec![0u8; data.len()];
            for i in 0..cells {
                let d = symbol(&data, k, i);
                for b in 0..k as usize {
                    let bit = i * k as usize + b;
                    if bit / 8 < out.len() {
                        out[bit / 8] |= ((d >> b) & 1) << (bit % 8);
                    }
                }
            }
            assert_eq!(out, data, "k = {k}");
        }
    }

    /// The invariant check inside every pass: a transition table that lowers one level (a
    /// broken code) is caught wherever the lowered cell lies, in a vector group or in the
    /// scalar tail, with every instruction set this CPU has, and a page whose cells never
    /// fall passes.
    #[test]
    fn every_pass_catches_a_falling_cell() {
        use super::super::simd::{self, Isa};
        let isas = [Isa::Scalar, Isa::Avx2, Isa::Avx512Vbmi];
        for isa in isas.into_iter().filter(|&i| i <= simd::best()) {
            simd::set_limit(isa);
            for k in [1u8, 2, 3, 4] {
                let bytes = 4157;
                let cells = cells_for(bytes, k);
                // Every (level, symbol) keeps its level, except level 7, which falls to 6.
                let mut lut = [EINVAL; 256];
                for level in 0..16usize {
                    for d in 0..1usize << k {
                        lut[(level << k | d) & 0xff] = if level == 7 { 6 } else { level as u8 };
                    }
                }
                let t = Transitions { lut, data_bits: k, v_max: 15, risk_mask: 0 };
                let pass: PassFn = match k {
                    1 => pass_fast::<1>,
                    2 => pass_fast::<2>,
                    3 => pass_fast::<3>,
                    _ => pass_fast::<4>,
                };
                let data = vec![0x5au8; bytes];
                for at in [None, Some(100), Some(cells - 1)] {
                    let mut levels: Vec<u8> = (0..cells).map(|i| [3, 9, 12][i % 3]).collect();
                    if let Some(i) = at {
                        levels[i] = 7;
                    }
                    // Packed two cells a byte, as a page holds them.
                    let old: Vec<u8> =
                        levels.chunks(2).map(|c| c[0] | c.get(1).unwrap_or(&0) << 4).collect();
                    let mut new = vec![0u8; packed_len(cells)];
                    let c = pass(&old, &mut new, &data, cells, &t, &mut Vec::new());
                    assert_eq!(c.fell, at.is_some(), "k = {k}, cell {at:?}, {isa:?}");
                    // (A fallen cell counts as changed.)
                    assert_eq!(c.raised, at.is_some() as u32, "k = {k}, cell {at:?}, {isa:?}");
                }
            }
        }
        simd::set_limit(Isa::Avx512Vbmi);
    }

    /// The write pass against a plain per-cell reference built from the code's public
    /// transitions: the same levels, EINVAL cells with their symbols, cells raised and cells
    /// at risk, for every width (k = 3 with a padded last cell) and a code of fewer than 16
    /// levels, in both modes, through cycles past GEN_MAX, with every instruction set this
    /// CPU has (`super::super::simd`: scalar, AVX2, AVX-512 VBMI; the ones it lacks are named
    /// on stderr). Seeded; the seed is in every message.
    #[test]
    fn the_write_pass_matches_a_per_cell_reference() {
        use super::super::simd::{self, Isa};
        use rand_core::{Rng, SeedableRng};
        let spec = |k: u8, n: u8| crate::firmware::womv::WomCodeSpec {
            name: format!("mod({k},{n})"),
            data_bits: k,
            level_bits: n,
            decode: (0..1 << n).map(|l| (l % (1 << k)) as i16).collect(),
        };
        let mut codes: Vec<WomCode> =
            WomCode::BUILTIN.iter().map(|n| WomCode::builtin(n).unwrap()).collect();
        codes.push(WomCode::new(&spec(4, 4)).unwrap());
        codes.push(WomCode::new(&spec(2, 3)).unwrap());
        let isas: Vec<Isa> = [Isa::Scalar, Isa::Avx2, Isa::Avx512Vbmi]
            .into_iter()
            .filter(|&i| i <= simd::best())
            .collect();
        if simd::best() < Isa::Avx512Vbmi {
            eprintln!("this CPU has no {:?}: only {isas:?} compared", Isa::Avx512Vbmi);
        }
        for (seed, isa) in (0..4u64).flat_map(|s| isas.iter().map(move |&i| (s, i))) {
            simd::set_limit(isa);
            for code in &codes {
                let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
                let k = code.data_bits();
                // Odd, so k = 3 leaves a padded last cell (an odd cell count, so a half-used
                // last byte); groups of 32 (AVX2) and 128 cells (AVX-512; with seeds 0 and 1
                // only for k = 1 to 3) and a tail for the vector passes, and with seeds 2 and
                // 3 more than the 255 groups after which the AVX2 pass sums its lane counts.
                let bytes = if seed < 2 { 61 } else { 4157 };
                let cells = cells_for(bytes, k);
                let mut page = CodedPage::erased(cells);
                for cycle in 1..=code.gen_max() + 4 {
                    let mut data = vec![0u8; bytes];
                    rng.fill_bytes(&mut data);
                    let nr = seed % 2 == 1 && (cycle as usize) <= code.generations().len();
                    let mode = if nr {
                        WriteMode::NoRead { generation: cycle }
                    } else {
                        WriteMode::SameGeneration
                    };
                    if nr != (page.generation > 0) && cycle > 1 {
                        break; // modes are not mixed on one page
                    }
                    let beyond = mode == WriteMode::SameGeneration && cycle > code.gen_max();
                    let (mut want, mut einval, mut raised, mut risky) = (vec![], vec![], 0, 0);
                    for (i, &level) in page.levels().iter().enumerate() {
                        let d = symbol(&data, k, i);
                        let to = if beyond && level == code.v_max() {
                            None
                        } else {
                            match mode {
                                WriteMode::SameGeneration => code.encode(level, d, beyond),
                                WriteMode::NoRead { generation } => code.codeword(generation, d),
                            }
                        };
                        let to = to.unwrap_or_else(|| {
                            einval.push((i as u32, d));
                            code.v_max()
                        });
                        raised += (to != level) as u32;
                        risky += code.at_risk(to) as u32;
                        want.push(to);
                    }
                    let what = format!("{} seed {seed} cycle {cycle} {isa:?}", code.name());
                    let report = page.write(code, &data, mode, u32::MAX).expect(&what);
                    assert_eq!(page.levels(), &want[..], "{what}");
                    assert_eq!(page.recovered, einval, "{what}");
                    assert_eq!(report.cells_raised, raised, "{what}");
                    assert_eq!(page.cells_at_risk(), risky, "{what}");
                    // And the page decodes to the data, EINVAL cells through the ECC.
                    let mut back = vec![0u8; bytes];
                    page.read(code, &mut back);
                    assert_eq!(back, data, "{what}: read back");
                    // The at-risk mask is the definition's, level by level.
                    for l in 0..code.levels() as u8 {
                        let def =
                            (0..code.data_values()).any(|d| code.encode(l, d, true).is_none());
                        assert_eq!(code.at_risk(l), def, "{what}: level {l}");
                    }
                }
            }
        }
        // The built-in codes' levels at risk: from level l a value must be reachable below
        // V_MAX, so (2,4) risks 12-15, (3,4) 8-15, (1,4) 14-15.
        let mask = |n: &str| WomCode::builtin(n).unwrap().risky_level_mask();
        assert_eq!(mask("wom-v(2,4)"), 0xf000);
        assert_eq!(mask("wom-v(3,4)"), 0xff00);
        assert_eq!(mask("wom-v(1,4)"), 0xc000);
    }
}
