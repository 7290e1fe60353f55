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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodedPage {
    levels: Vec<u8>,
    /// What the ECC recovers: (cell, symbol) of each EINVAL cell, in cell order.
    recovered: Vec<(u32, u8)>,
    cycles: u32,
    /// NR mode: the generation last written (0: none since the erase).
    generation: u32,
}

/// Cells needed for `bytes` of data under a code of `data_bits` per cell.
pub fn cells_for(bytes: usize, data_bits: u8) -> usize {
    (bytes * 8).div_ceil(data_bits as usize)
}

/// The k-bit symbols of `data`, least significant bits first, the last one zero-padded.
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
        CodedPage { levels: vec![0; cells], recovered: Vec::new(), cycles: 0, generation: 0 }
    }

    pub fn cells(&self) -> usize {
        self.levels.len()
    }

    pub fn levels(&self) -> &[u8] {
        &self.levels
    }

    /// Write cycles since the last erase.
    pub fn cycles(&self) -> u32 {
        self.cycles
    }

    pub fn einval_cells(&self) -> u32 {
        self.recovered.len() as u32
    }

    /// Erases the page: every cell back to level 0.
    pub fn erase(&mut self) {
        self.levels.fill(0);
        self.recovered.clear();
        self.cycles = 0;
        self.generation = 0;
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
        if needed != self.levels.len() {
            return Err(WriteRefused::Size { bytes: data.len(), needed, cells: self.levels.len() });
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
        // First pass: the new levels, without changing anything.
        let mut new_levels = Vec::with_capacity(self.levels.len());
        let mut recovered = Vec::new();
        for (i, &level) in self.levels.iter().enumerate() {
            let d = symbol(data, k, i);
            let was_einval = beyond && level == v_max;
            let target = match mode {
                _ if was_einval => None,
                WriteMode::SameGeneration => code.encode(level, d, beyond),
                WriteMode::NoRead { generation } => code.codeword(generation, d),
            };
            let to = match target {
                Some(to) => to,
                None => {
                    recovered.push((i as u32, d));
                    v_max
                }
            };
            if to < level {
                return Err(WriteRefused::LevelDecrease { cell: i as u32, from: level, to });
            }
            new_levels.push(to);
        }
        let einval_cells = recovered.len() as u32;
        if einval_cells > ecc_budget_cells {
            return Err(WriteRefused::EccBudget { einval_cells, budget_cells: ecc_budget_cells });
        }
        let old_einval = self.recovered.len() as u32;
        let cells_raised =
            self.levels.iter().zip(&new_levels).filter(|(a, b)| a != b).count() as u32;
        self.levels = new_levels;
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
        let k = code.data_bits() as usize;
        out.fill(0);
        let mut erasures = self.recovered.iter().peekable();
        for (i, &level) in self.levels.iter().enumerate() {
            let d = match erasures.peek() {
                Some(&&(cell, d)) if cell as usize == i => {
                    erasures.next();
                    d
                }
                _ => code.decode(level).expect("a cell that is not EINVAL holds a code-word"),
            };
            for b in 0..k {
                let bit = i * k + b;
                if bit / 8 < out.len() {
                    out[bit / 8] |= ((d >> b) & 1) << (bit % 8);
                }
            }
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
}
