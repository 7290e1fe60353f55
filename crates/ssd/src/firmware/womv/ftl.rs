//! The WOM-v FTL (jaffer-thesis-2023.txt §3.6): a LightNVM-style log over erase units whose
//! pages are WOM-v coded, so an erase unit can be written again without an erase, with the
//! thesis' three garbage-collection behaviours and its NR mode.
//!
//! - **Erase units** (§3.6.1): one erase unit is open for writes at a time and its pages are
//!   written in order; an erase unit is erased as a whole. Here an erase unit is a list of
//!   pages, each holding one logical page (its cells n/k times the logical page's bits); the
//!   parallel units and their timing are the emulated SSD's business, not this module's.
//! - **NO_WOM** (no code): a page takes one write between erases; GC relocates the valid pages
//!   of the erase unit with the most invalid pages, then erases it (LightNVM's greedy GC).
//! - **Default WOM-v GC** (§3.6.3): relocate the valid pages, then erase only if some page has
//!   more cells at risk (the thesis' "cells in GEN_MAX") than the ECC threshold covers;
//!   otherwise the erase unit goes back to the pool and all its pages are written again.
//! - **GC_OPT** (§3.6.4, §3.7.3): an erase unit with at least `min_programmable_pages`
//!   programmable invalid pages goes back to the pool as it is, its valid pages left where
//!   they are; when it is next opened the writes skip valid and unprogrammable pages. Below
//!   the threshold it is collected as by the default GC.
//! - **NR mode** (§3.6.4): one generation number per erase unit, raised each time the erase
//!   unit is opened again; every page is written with that generation's code-words, without
//!   reading it first. An erase unit whose last generation is used up is erased.
//!
//! Every page keeps, beside its cells, the logical page it holds and a sequence number (the
//! out-of-band area). Writes are applied one page at a time, so a power cut falls between two
//! page programs; [`WomFtl::recover`] rebuilds the mapping, the valid pages, each erase unit's
//! generation and the pool from the pages alone (§3.6.4 keeps the generation in the
//! over-provisioned space; recomputing it from the pages is equivalent and needs no extra
//! write). docs/womv.md, "The WOM-v FTL".

use super::code::WomCode;
use super::page::{cells_for, CodedPage, WriteMode, WriteRefused};

/// How the GC treats an erase unit it collects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcPolicy {
    /// Relocate every valid page first (NO_WOM and the default WOM-v GC).
    Relocate,
    /// GC_OPT: reuse the erase unit in place while it has at least this many programmable
    /// invalid pages (the thesis' *minimum programmable page count*; 0 behaves as 1, since an
    /// erase unit with nothing to write gives no space).
    ReuseInPlace { min_programmable_pages: u32 },
}

/// Which closed erase unit the GC collects next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VictimPolicy {
    /// The one with the most invalid pages (LightNVM, §3.6.1).
    Greedy,
    /// The one closed longest ago (LRW, the model of §3.7.10).
    Lrw,
}

/// The FTL's shape and policies.
#[derive(Clone, Debug)]
pub struct FtlConfig {
    /// `None`: NO_WOM, every page written once between erases.
    pub code: Option<WomCode>,
    /// NR mode (needs a code).
    pub no_read: bool,
    pub gc: GcPolicy,
    pub victim: VictimPolicy,
    pub erase_units: u32,
    pub pages_per_erase_unit: u32,
    /// The logical pages users may write (0..logical_pages).
    pub logical_pages: u32,
    /// Bytes of user data per logical page.
    pub page_bytes: usize,
    /// Share of a page's cells the ECC recovers as erasures (§3.6.3: 3%).
    pub ecc_fraction: f64,
    /// GC runs while fewer erase units than this wait in the pool.
    pub gc_free_erase_units: u32,
}

impl FtlConfig {
    /// Checks the configuration; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.page_bytes == 0 {
            return Err("page_bytes = 0: a page must hold data".into());
        }
        if self.pages_per_erase_unit == 0 {
            return Err("pages_per_erase_unit = 0: an erase unit must have pages".into());
        }
        if self.gc_free_erase_units < 2 {
            return Err(format!(
                "gc_free_erase_units = {}: must be at least 2 (one to relocate into while \
                 another fills)",
                self.gc_free_erase_units
            ));
        }
        if self.no_read && self.code.is_none() {
            return Err("no_read = true needs a code (NR mode is a WOM-v mode)".into());
        }
        if !(0.0..=0.5).contains(&self.ecc_fraction) {
            return Err(format!("ecc_fraction = {}: must be from 0 to 0.5", self.ecc_fraction));
        }
        // The GC's reserve and the open erase unit are not user space.
        let reserve = self.gc_free_erase_units as u64 + 1;
        let usable =
            (self.erase_units as u64).saturating_sub(reserve) * self.pages_per_erase_unit as u64;
        if self.logical_pages == 0 || self.logical_pages as u64 > usable {
            return Err(format!(
                "logical_pages = {}: must be from 1 to {usable} ({} erase units less {reserve} \
                 kept for the GC and the open one, {} pages each)",
                self.logical_pages, self.erase_units, self.pages_per_erase_unit
            ));
        }
        Ok(())
    }

    fn mode(&self, generation: u32) -> WriteMode {
        if self.no_read {
            WriteMode::NoRead { generation }
        } else {
            WriteMode::SameGeneration
        }
    }
}

/// What the FTL did, for endurance and cost accounting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FtlCounters {
    pub host_writes: u64,
    pub host_reads: u64,
    /// Valid pages the GC copied to the open erase unit.
    pub gc_writes: u64,
    /// Page programs of any origin (host + GC).
    pub page_programs: u64,
    /// Programs over a page already programmed since its erase (WOM-v rewrites).
    pub reprograms: u64,
    /// Pages read to encode a write (the default mode reads every page it writes, §3.6.3).
    pub reads_before_write: u64,
    /// Pages the GC read to relocate them.
    pub gc_reads: u64,
    pub erases: u64,
    /// Erase units the GC returned to the pool without erase after relocating.
    pub reused_after_relocation: u64,
    /// Erase units GC_OPT returned to the pool with their valid pages in place.
    pub reused_in_place: u64,
    /// Pages the open erase unit's writes skipped (valid or unprogrammable).
    pub pages_skipped: u64,
    /// Writes a page refused over the ECC budget (the data went to the next page).
    pub refused_writes: u64,
    /// Cells whose level rose.
    pub cells_raised: u64,
    /// Cells that became EINVAL (written beyond GEN_MAX, recovered by the page's ECC).
    pub einval_cells_written: u64,
}

/// Why an operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FtlError {
    #[error("logical page {lpn} is outside the {logical_pages} logical pages")]
    OutOfRange { lpn: u32, logical_pages: u32 },
    #[error("{bytes} bytes of data: a logical page holds {page_bytes}")]
    Size { bytes: usize, page_bytes: usize },
    /// The armed power cut happened: nothing more is written until [`WomFtl::recover`].
    #[error("power cut")]
    PowerCut,
    /// No erase unit left to write into: the configuration's reserve was too small.
    #[error("no erase unit left to write into")]
    OutOfSpace,
    /// The medium refused a program the FTL thought valid: a bug.
    #[error("the medium refused a program: {0}")]
    Medium(WriteRefused),
}

enum Cells {
    /// NO_WOM: the data, once programmed.
    Plain(Option<Vec<u8>>),
    Coded(CodedPage),
}

struct Page {
    cells: Cells,
    /// Out of band: the logical page and the program's sequence number.
    oob: Option<(u32, u64)>,
    /// Out of band too: bytes the caller keeps beside the cells (the emulated SSD's
    /// per-block host metadata, or a timing-only run's block fingerprints).
    meta: Vec<u8>,
    valid: bool,
}

/// A media operation the FTL performed, in order, for a caller that charges their time
/// (the emulated SSD, `super::device`); recorded only after [`WomFtl::record_ops`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediaOp {
    /// A page program; `read_first` when the page's cells were read to encode the data
    /// (the default mode's read before write), `gc` when it relocated a valid page.
    Program { eu: u32, page: u32, read_first: bool, gc: bool },
    /// A page read that did not lead to a program: the GC's read of a page it relocates, or
    /// the read before a write the page then refused over its ECC budget.
    Read { eu: u32, page: u32 },
    /// An erase of a whole erase unit.
    Erase { eu: u32 },
}

/// The names of [`WomFtl::recover`]'s steps, in order.
pub const RECOVERY_STEPS: [&str; 4] = ["scan", "generations", "pool", "gc"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EuState {
    Pool,
    Open,
    Closed,
}

struct EraseUnit {
    pages: Vec<Page>,
    valid_pages: u32,
    erase_count: u32,
    /// NR mode: the generation its open pages are written in (0: erased, never opened).
    generation: u32,
    state: EuState,
    /// When it was last closed (a count of closes), for LRW.
    closed_at: u64,
}

/// The WOM-v FTL over erase units of coded pages.
pub struct WomFtl {
    config: FtlConfig,
    units: Vec<EraseUnit>,
    /// lpn -> (erase unit, page).
    map: Vec<Option<(u32, u32)>>,
    /// Erase units ready to be opened, oldest first, each with the pages it could take
    /// when it joined the pool.
    pool: std::collections::VecDeque<(u32, u32)>,
    /// The pages the pool can take (the sum of the above).
    pool_pages: u64,
    /// The open erase unit and the next page its writes try.
    open: Option<(u32, u32)>,
    next_seq: u64,
    closes: u64,
    counters: FtlCounters,
    ecc_budget_cells: u32,
    /// Programs left before the armed power cut.
    power_cut_in: Option<u64>,
    dead: bool,
    /// Durable trim records: per logical page, the sequence number of its last trim (0:
    /// none). A trim after a page's newest program keeps recovery from bringing it back.
    trimmed: Vec<u64>,
    /// The media operations since the caller last took them (`None`: not recorded).
    ops: Option<Vec<MediaOp>>,
    /// Whether the operation being performed is the GC's (for [`MediaOp::Program`]).
    in_gc: bool,
}

impl WomFtl {
    /// A fresh FTL: every erase unit erased and in the pool.
    pub fn new(config: FtlConfig) -> Result<WomFtl, String> {
        config.validate()?;
        let units = (0..config.erase_units)
            .map(|_| EraseUnit {
                pages: (0..config.pages_per_erase_unit)
                    .map(|_| Self::erased_page(&config))
                    .collect(),
                valid_pages: 0,
                erase_count: 0,
                generation: 0,
                state: EuState::Pool,
                closed_at: 0,
            })
            .collect();
        let ecc_budget_cells = Self::budget(&config);
        let logical_pages = config.logical_pages as usize;
        Ok(WomFtl {
            map: vec![None; config.logical_pages as usize],
            pool: (0..config.erase_units).map(|e| (e, config.pages_per_erase_unit)).collect(),
            pool_pages: config.erase_units as u64 * config.pages_per_erase_unit as u64,
            units,
            config,
            open: None,
            next_seq: 1,
            closes: 0,
            counters: FtlCounters::default(),
            ecc_budget_cells,
            power_cut_in: None,
            dead: false,
            trimmed: vec![0; logical_pages],
            ops: None,
            in_gc: false,
        })
    }

    fn budget(config: &FtlConfig) -> u32 {
        match &config.code {
            Some(code) => (cells_for(config.page_bytes, code.data_bits()) as f64
                * config.ecc_fraction)
                .floor() as u32,
            None => 0,
        }
    }

    fn erased_page(config: &FtlConfig) -> Page {
        let cells = match &config.code {
            Some(code) => {
                Cells::Coded(CodedPage::erased(cells_for(config.page_bytes, code.data_bits())))
            }
            None => Cells::Plain(None),
        };
        Page { cells, oob: None, meta: Vec::new(), valid: false }
    }

    pub fn config(&self) -> &FtlConfig {
        &self.config
    }

    pub fn counters(&self) -> FtlCounters {
        self.counters
    }

    /// Arms a power cut: after `programs` more page programs (attempts a page refused over
    /// its ECC budget included) the next one does not happen, the call that needed it fails
    /// with [`FtlError::PowerCut`], and so does every later call.
    pub fn arm_power_cut(&mut self, programs: u64) {
        self.power_cut_in = Some(programs);
    }

    /// Writes one logical page; once it returns, the data survives a power cut.
    pub fn write(&mut self, lpn: u32, data: &[u8]) -> Result<(), FtlError> {
        self.write_with_meta(lpn, data, &[])
    }

    /// [`WomFtl::write`] with `meta` kept in the page's out-of-band area beside the cells
    /// (read back by [`WomFtl::meta`], moved with the page by the GC).
    pub fn write_with_meta(&mut self, lpn: u32, data: &[u8], meta: &[u8]) -> Result<(), FtlError> {
        self.check(lpn, data.len())?;
        self.place(lpn, data, meta)?;
        self.counters.host_writes += 1;
        self.collect_if_needed()
    }

    /// Unmaps a logical page; durable at once (a trim record, kept across power cuts).
    pub fn trim(&mut self, lpn: u32) -> Result<(), FtlError> {
        self.check(lpn, self.config.page_bytes)?;
        if let Some((eu, page)) = self.map[lpn as usize].take() {
            let unit = &mut self.units[eu as usize];
            unit.pages[page as usize].valid = false;
            unit.valid_pages -= 1;
        }
        self.trimmed[lpn as usize] = self.next_seq;
        self.next_seq += 1;
        Ok(())
    }

    /// Where a logical page's valid copy is: (erase unit, page).
    pub fn location(&self, lpn: u32) -> Option<(u32, u32)> {
        self.map.get(lpn as usize).copied().flatten()
    }

    /// The out-of-band bytes written with a logical page's valid copy.
    pub fn meta(&self, lpn: u32) -> Option<&[u8]> {
        let (eu, page) = self.location(lpn)?;
        Some(&self.units[eu as usize].pages[page as usize].meta)
    }

    /// Decodes a logical page's valid copy into `out` without counting a host read (what
    /// the caller's own read-modify-write or data synthesis needs); false if unmapped.
    pub fn peek(&self, lpn: u32, out: &mut [u8]) -> bool {
        match self.location(lpn) {
            Some((eu, page)) => {
                self.read_page(eu, page, out);
                true
            }
            None => false,
        }
    }

    /// Decodes the page the next write would most likely program (the open erase unit's
    /// next writable page, else the first writable page of the erase unit the pool gives
    /// next) into `out`; false when that page is erased or unknown. Timing-only runs derive
    /// synthetic data from it, so their bit-change rate is between a flash page's old
    /// content and what overwrites it (a write the page refuses goes to the next one, whose
    /// content may differ).
    pub fn next_page_content(&mut self, out: &mut [u8]) -> bool {
        let per = self.config.pages_per_erase_unit;
        if let Some((eu, next)) = self.open {
            if let Some(p) = (next..per).find(|&p| self.writable(eu, p)) {
                self.read_page(eu, p, out);
                return self.units[eu as usize].pages[p as usize].oob.is_some();
            }
        }
        let Some(&(eu, _)) = self.pool.front() else { return false };
        self.units[eu as usize].generation += 1;
        let erased = self.needs_erase_to_open(eu);
        let page = (0..per).find(|&p| self.writable(eu, p));
        self.units[eu as usize].generation -= 1;
        match page {
            Some(p) if !erased => {
                self.read_page(eu, p, out);
                self.units[eu as usize].pages[p as usize].oob.is_some()
            }
            _ => false,
        }
    }

    /// Erases so far of every erase unit.
    pub fn erase_counts(&self) -> Vec<u32> {
        self.units.iter().map(|u| u.erase_count).collect()
    }

    /// Starts recording media operations (see [`MediaOp`]).
    pub fn record_ops(&mut self) {
        self.ops.get_or_insert_with(Vec::new);
    }

    /// Moves the operations recorded since the last call into `into`.
    pub fn take_ops(&mut self, into: &mut Vec<MediaOp>) {
        if let Some(ops) = self.ops.as_mut() {
            into.append(ops);
        }
    }

    fn log(&mut self, op: MediaOp) {
        if let Some(ops) = self.ops.as_mut() {
            ops.push(op);
        }
    }

    /// Reads one logical page into `out`; returns false (and zeros) if it was never written.
    pub fn read(&mut self, lpn: u32, out: &mut [u8]) -> Result<bool, FtlError> {
        self.check(lpn, out.len())?;
        self.counters.host_reads += 1;
        match self.map[lpn as usize] {
            Some((eu, page)) => {
                self.read_page(eu, page, out);
                Ok(true)
            }
            None => {
                out.fill(0);
                Ok(false)
            }
        }
    }

    fn check(&self, lpn: u32, bytes: usize) -> Result<(), FtlError> {
        if self.dead {
            return Err(FtlError::PowerCut);
        }
        if lpn >= self.config.logical_pages {
            return Err(FtlError::OutOfRange { lpn, logical_pages: self.config.logical_pages });
        }
        if bytes != self.config.page_bytes {
            return Err(FtlError::Size { bytes, page_bytes: self.config.page_bytes });
        }
        Ok(())
    }

    fn read_page(&self, eu: u32, page: u32, out: &mut [u8]) {
        match &self.units[eu as usize].pages[page as usize].cells {
            Cells::Plain(Some(data)) => out.copy_from_slice(data),
            Cells::Plain(None) => out.fill(0),
            Cells::Coded(p) => {
                p.read(self.config.code.as_ref().expect("coded pages have a code"), out)
            }
        }
    }

    /// Whether the open erase unit's writes may program this page now.
    fn writable(&self, eu: u32, page: u32) -> bool {
        let unit = &self.units[eu as usize];
        let p = &unit.pages[page as usize];
        if p.valid {
            return false;
        }
        match (&p.cells, &self.config.code) {
            (Cells::Plain(data), _) => data.is_none(),
            (Cells::Coded(c), Some(code)) => {
                c.programmable(code, self.config.mode(unit.generation), self.ecc_budget_cells)
            }
            (Cells::Coded(_), None) => false,
        }
    }

    /// Programs `data` for `lpn` into the next writable page of the open erase unit, opening
    /// erase units from the pool as needed, and remaps `lpn`.
    fn place(&mut self, lpn: u32, data: &[u8], meta: &[u8]) -> Result<(), FtlError> {
        loop {
            let Some((eu, next)) = self.open else {
                self.open_next()?;
                continue;
            };
            if next >= self.config.pages_per_erase_unit {
                self.closes += 1;
                self.units[eu as usize].closed_at = self.closes;
                self.units[eu as usize].state = EuState::Closed;
                self.open = None;
                continue;
            }
            self.open = Some((eu, next + 1));
            if !self.writable(eu, next) {
                self.counters.pages_skipped += 1;
                continue;
            }
            if self.program(eu, next, lpn, data, meta)? {
                return Ok(());
            }
        }
    }

    /// One page program; false when the page refused the data (ECC budget) and is left as it
    /// was.
    fn program(
        &mut self,
        eu: u32,
        page: u32,
        lpn: u32,
        data: &[u8],
        meta: &[u8],
    ) -> Result<bool, FtlError> {
        if let Some(left) = self.power_cut_in.as_mut() {
            if *left == 0 {
                self.dead = true;
                return Err(FtlError::PowerCut);
            }
            *left -= 1;
        }
        let mode = self.config.mode(self.units[eu as usize].generation);
        let budget = self.ecc_budget_cells;
        let unit = &mut self.units[eu as usize];
        let p = &mut unit.pages[page as usize];
        let reprogram = p.oob.is_some();
        match &mut p.cells {
            Cells::Plain(slot) => *slot = Some(data.to_vec()),
            Cells::Coded(c) => {
                let code = self.config.code.as_ref().expect("coded pages have a code");
                match c.write(code, data, mode, budget) {
                    Ok(report) => {
                        self.counters.cells_raised += report.cells_raised as u64;
                        self.counters.einval_cells_written += report.new_einval_cells as u64;
                    }
                    Err(WriteRefused::EccBudget { .. }) => {
                        self.counters.refused_writes += 1;
                        if mode == WriteMode::SameGeneration {
                            // The page was read to encode the data it then refused.
                            self.counters.reads_before_write += 1;
                            self.log(MediaOp::Read { eu, page });
                        }
                        return Ok(false);
                    }
                    Err(e) => return Err(FtlError::Medium(e)),
                }
                if mode == WriteMode::SameGeneration {
                    self.counters.reads_before_write += 1;
                }
            }
        }
        p.oob = Some((lpn, self.next_seq));
        p.meta.clear();
        p.meta.extend_from_slice(meta);
        p.valid = true;
        unit.valid_pages += 1;
        self.next_seq += 1;
        self.counters.page_programs += 1;
        self.counters.reprograms += reprogram as u64;
        let read_first = self.config.code.is_some() && mode == WriteMode::SameGeneration;
        self.log(MediaOp::Program { eu, page, read_first, gc: self.in_gc });
        if let Some((old_eu, old_page)) = self.map[lpn as usize].replace((eu, page)) {
            let old = &mut self.units[old_eu as usize];
            old.pages[old_page as usize].valid = false;
            old.valid_pages -= 1;
        }
        Ok(true)
    }

    /// Opens the oldest erase unit of the pool (erasing it first if it has nothing to write).
    fn open_next(&mut self) -> Result<(), FtlError> {
        let (eu, pages) = self.pool.pop_front().ok_or(FtlError::OutOfSpace)?;
        self.pool_pages -= pages as u64;
        let unit = &mut self.units[eu as usize];
        unit.state = EuState::Open;
        unit.generation += 1;
        if self.needs_erase_to_open(eu) {
            self.erase(eu);
            self.units[eu as usize].generation = 1;
        }
        self.open = Some((eu, 0));
        Ok(())
    }

    /// Whether an erase unit must be erased before its writes (asked with the generation it
    /// would be written in): under GC_OPT when no page is writable, under the default GC
    /// (and NO_WOM) unless every page is, since the default GC either erases a unit or writes
    /// all its pages again. In normal operation the GC has decided already; after a recovery
    /// the pool holds units the GC never saw.
    fn needs_erase_to_open(&self, eu: u32) -> bool {
        let writable = self.programmable_invalid_pages(eu);
        match self.config.gc {
            GcPolicy::ReuseInPlace { .. } => writable == 0,
            GcPolicy::Relocate => writable < self.config.pages_per_erase_unit,
        }
    }

    fn erase(&mut self, eu: u32) {
        let unit = &mut self.units[eu as usize];
        // Erasing valid pages would lose data silently: stop instead.
        assert_eq!(unit.valid_pages, 0, "erase unit {eu} erased with valid pages");
        for p in &mut unit.pages {
            // A coded page keeps its cells' memory through the erase (`CodedPage::erase`):
            // freeing it and allocating it again at the next write cost more than the write.
            match &mut p.cells {
                Cells::Coded(c) => c.erase(),
                Cells::Plain(data) => *data = None,
            }
            p.oob = None;
            p.meta.clear();
            p.valid = false;
        }
        unit.erase_count += 1;
        unit.generation = 0;
        self.counters.erases += 1;
        self.log(MediaOp::Erase { eu });
    }

    fn return_to_pool(&mut self, eu: u32, pages: u32) {
        self.units[eu as usize].state = EuState::Pool;
        self.pool.push_back((eu, pages));
        self.pool_pages += pages as u64;
    }

    /// Runs the GC while the pool holds fewer pages than `gc_free_erase_units` whole erase
    /// units (counted in pages, since GC_OPT returns erase units with only some pages
    /// writable).
    fn collect_if_needed(&mut self) -> Result<(), FtlError> {
        let want = self.config.gc_free_erase_units as u64 * self.config.pages_per_erase_unit as u64;
        while self.pool_pages < want {
            let Some(victim) = self.victim() else { break };
            self.collect(victim)?;
        }
        Ok(())
    }

    /// The next erase unit to collect, among the closed ones with an invalid page. With LRW,
    /// the one closed longest ago. With greedy, the one whose collection gives the most pages
    /// to write: its invalid pages when it is relocated (LightNVM's choice, §3.6.1), or under
    /// GC_OPT its programmable invalid pages when it would be reused in place. (Preferring any
    /// erase unit that can be reused in place would keep reusing those with a few invalid
    /// pages, spending a write cycle of every page on a few pages' worth of data, while the
    /// exhausted ones fill with invalid pages: the erasure factor doubles.)
    ///
    /// A unit that must be relocated is a candidate only if its valid pages fit in the room
    /// left (the pool's pages and the open unit's writable ones), so a relocation never runs
    /// out of space half-way.
    fn victim(&mut self) -> Option<u32> {
        let per = self.config.pages_per_erase_unit;
        let in_place_min = match self.config.gc {
            GcPolicy::ReuseInPlace { min_programmable_pages } => min_programmable_pages.max(1),
            GcPolicy::Relocate => u32::MAX,
        };
        let room = self.room_pages();
        // (unit, pages its collection gives, reused in place).
        let mut candidates = Vec::new();
        for e in 0..self.config.erase_units {
            let u = &self.units[e as usize];
            if u.state != EuState::Closed || u.valid_pages == per {
                continue;
            }
            let (invalid, valid) = (per - u.valid_pages, u.valid_pages as u64);
            let programmable =
                if in_place_min == u32::MAX { 0 } else { self.programmable_next_time(e) };
            if programmable >= in_place_min {
                candidates.push((e, programmable));
            } else if valid <= room {
                candidates.push((e, invalid));
            }
        }
        if self.config.victim == VictimPolicy::Lrw {
            return candidates
                .into_iter()
                .min_by_key(|&(e, _)| self.units[e as usize].closed_at)
                .map(|(e, _)| e)
                .or_else(|| self.pool_victim(room));
        }
        let mut best: Option<(u32, u32)> = None;
        for (e, gain) in candidates {
            if best.is_none_or(|(_, g)| gain > g) {
                best = Some((e, gain));
            }
        }
        best.map(|(e, _)| e).or_else(|| self.pool_victim(room))
    }

    /// GC_OPT returns erase units to the pool with valid pages in them and only a few pages
    /// to write. When every closed unit is full of valid pages or has more of them than the
    /// room left, such pool units may be all the invalid space there is: the one whose
    /// relocation gains the most (its invalid pages less those it already counts in the
    /// pool) is taken out of the pool and relocated, or the writes would run out of space
    /// while the pool still holds invalid pages.
    fn pool_victim(&self, room: u64) -> Option<u32> {
        let per = self.config.pages_per_erase_unit;
        let mut best: Option<(u32, u32)> = None;
        for &(e, counted) in &self.pool {
            let valid = self.units[e as usize].valid_pages;
            let gain = (per - valid).saturating_sub(counted);
            if valid == 0 || gain == 0 || valid as u64 > room.saturating_sub(counted as u64) {
                continue;
            }
            if best.is_none_or(|(_, g)| gain > g) {
                best = Some((e, gain));
            }
        }
        best.map(|(e, _)| e)
    }

    /// Pages the writes can still go to without the GC: the pool's and the open unit's
    /// writable pages past its cursor.
    fn room_pages(&self) -> u64 {
        let open = match self.open {
            Some((eu, next)) => (next..self.config.pages_per_erase_unit)
                .filter(|&p| self.writable(eu, p))
                .count() as u64,
            None => 0,
        };
        self.pool_pages + open
    }

    /// Programmable invalid pages of an erase unit when it is next opened (NR mode writes the
    /// next generation, so it asks with that one).
    fn programmable_next_time(&mut self, eu: u32) -> u32 {
        self.units[eu as usize].generation += 1;
        let pages = self.programmable_invalid_pages(eu);
        self.units[eu as usize].generation -= 1;
        pages
    }

    fn programmable_invalid_pages(&self, eu: u32) -> u32 {
        (0..self.config.pages_per_erase_unit).filter(|&p| self.writable(eu, p)).count() as u32
    }

    fn collect(&mut self, eu: u32) -> Result<(), FtlError> {
        if self.units[eu as usize].state == EuState::Pool {
            // A pool victim (see `pool_victim`): out of the pool, then relocated.
            let at = self.pool.iter().position(|&(e, _)| e == eu).expect("a pool unit");
            let (_, counted) = self.pool.remove(at).expect("in range");
            self.pool_pages -= counted as u64;
            self.units[eu as usize].state = EuState::Closed;
        } else if let GcPolicy::ReuseInPlace { min_programmable_pages } = self.config.gc {
            let programmable = self.programmable_next_time(eu);
            if programmable >= min_programmable_pages.max(1) {
                self.return_to_pool(eu, programmable);
                self.counters.reused_in_place += 1;
                return Ok(());
            }
        }
        // Relocate the valid pages, oldest page first.
        let mut buf = vec![0u8; self.config.page_bytes];
        for page in 0..self.config.pages_per_erase_unit {
            let p = &self.units[eu as usize].pages[page as usize];
            if !p.valid {
                continue;
            }
            let (lpn, _) = p.oob.expect("a valid page has its out-of-band data");
            let meta = p.meta.clone();
            self.read_page(eu, page, &mut buf);
            self.counters.gc_reads += 1;
            self.log(MediaOp::Read { eu, page });
            self.in_gc = true;
            let placed = self.place(lpn, &buf, &meta);
            self.in_gc = false;
            placed?;
            self.counters.gc_writes += 1;
        }
        let reuse = self.config.code.is_some()
            && self.programmable_next_time(eu) == self.config.pages_per_erase_unit;
        if reuse {
            self.counters.reused_after_relocation += 1;
        } else {
            self.erase(eu);
        }
        self.return_to_pool(eu, self.config.pages_per_erase_unit);
        Ok(())
    }

    /// After a power cut (or at any time): keeps only what the pages hold — cells, and each
    /// page's logical page and sequence number — and the erase counts (kept in the erase
    /// units' headers), and rebuilds the rest in named steps:
    ///
    /// 1. `scan`: the newest program of each logical page is its valid copy;
    /// 2. `generations`: each erase unit's NR generation is the highest of its pages';
    /// 3. `pool`: erase units without valid pages go to the pool (in index order), and under
    ///    GC_OPT so do those it would reuse in place; the rest are closed; none is open;
    /// 4. `gc`: the GC runs until the pool is as full as it wants (GC_OPT's erase units that
    ///    were in the pool with valid pages come back through it).
    pub fn recover(self) -> Result<WomFtl, FtlError> {
        let WomFtl { config, mut units, counters, ecc_budget_cells, trimmed, ops, .. } = self;
        // Step 1, scan.
        let mut newest: Vec<Option<(u64, u32, u32)>> = vec![None; config.logical_pages as usize];
        let mut next_seq = 1;
        for (e, unit) in units.iter_mut().enumerate() {
            unit.valid_pages = 0;
            for (p, page) in unit.pages.iter_mut().enumerate() {
                page.valid = false;
                if let Some((lpn, seq)) = page.oob {
                    next_seq = next_seq.max(seq + 1);
                    let slot = &mut newest[lpn as usize];
                    if slot.is_none_or(|(s, _, _)| seq > s) {
                        *slot = Some((seq, e as u32, p as u32));
                    }
                }
            }
        }
        next_seq = next_seq.max(trimmed.iter().max().copied().unwrap_or(0) + 1);
        let mut map = vec![None; config.logical_pages as usize];
        for (lpn, slot) in newest.iter().enumerate() {
            if let Some((seq, e, p)) = *slot {
                if trimmed[lpn] > seq {
                    continue; // trimmed after its newest program
                }
                units[e as usize].pages[p as usize].valid = true;
                units[e as usize].valid_pages += 1;
                map[lpn] = Some((e, p));
            }
        }
        // Step 2, generations.
        for unit in &mut units {
            unit.generation = unit
                .pages
                .iter()
                .map(|p| match &p.cells {
                    Cells::Coded(c) => c.generation(),
                    Cells::Plain(_) => 0,
                })
                .max()
                .unwrap_or(0);
        }
        // Step 3, pool.
        for unit in &mut units {
            unit.state = EuState::Closed;
        }
        // LRW order survives as far as the pages tell it: by each unit's newest program.
        let mut order: Vec<(u64, usize)> = units
            .iter()
            .enumerate()
            .map(|(e, u)| {
                (u.pages.iter().filter_map(|p| p.oob.map(|(_, s)| s)).max().unwrap_or(0), e)
            })
            .collect();
        order.sort_unstable();
        for (rank, &(_, e)) in order.iter().enumerate() {
            units[e].closed_at = rank as u64 + 1;
        }
        let closes = units.len() as u64;
        let mut ftl = WomFtl {
            config,
            units,
            map,
            pool: Default::default(),
            pool_pages: 0,
            open: None,
            next_seq,
            closes,
            counters,
            ecc_budget_cells,
            power_cut_in: None,
            dead: false,
            trimmed,
            ops,
            in_gc: false,
        };
        let per = ftl.config.pages_per_erase_unit;
        for e in 0..ftl.config.erase_units {
            ftl.units[e as usize].generation += 1;
            let erase = ftl.needs_erase_to_open(e);
            ftl.units[e as usize].generation -= 1;
            let programmable = ftl.programmable_next_time(e);
            if ftl.units[e as usize].valid_pages == 0 {
                // A unit that must be erased first gives all its pages when opened.
                ftl.return_to_pool(e, if erase { per } else { programmable });
            } else if let GcPolicy::ReuseInPlace { min_programmable_pages } = ftl.config.gc {
                // GC_OPT's pool held units with valid pages; the pages do not say which, so
                // every unit the GC would reuse in place goes back (without them the pool
                // could be empty and the first relocation would find no room).
                if programmable >= min_programmable_pages.max(1) {
                    ftl.return_to_pool(e, programmable);
                }
            }
        }
        // Step 4, gc.
        ftl.collect_if_needed()?;
        Ok(ftl)
    }
}
