//! The flash translation layer: the [`Ftl`] interface the controller talks to, and the
//! page-mapping FTL ([`PageMap`]) that implements it.
//!
//! `PageMap` keeps a logical-to-physical table of mapping units (L2P, volatile DRAM), writes
//! out of place into open lines (one per stream: host writes to the SLC cache or the dense
//! area, transient host writes to SLC lines of their own when the firmware separates them,
//! relocations by GC and SLC eviction), and stamps every slot's OOB with its logical
//! number and the sequence number of the write that produced it, which is what recovery
//! ([`super::recover`]) rebuilds the table from. Garbage collection lives in [`super::gc`],
//! SLC eviction in [`super::slc`].

use std::collections::VecDeque;

use flashrig_blockdev::{DevError, DevResult};
use rustc_hash::FxHashMap;

use super::gc::VictimPolicy;
use super::slc::Evictor;
use crate::config::{SlcEviction, SsdConfig, TransientPlacement};
use crate::media::image::{LineEntry, NandImage, SlotHeader};
use crate::media::store::{IuImage, LineStore, Shape, FLAG_TRANSIENT};
use crate::media::{Layout, NandTimer};

/// A mapping unit to program.
#[derive(Clone, Debug)]
pub struct IuWrite {
    pub lpn: u32,
    pub seq: u64,
    pub flags: u8,
    pub img: IuImage,
    /// Bit `i` set: host block `i` of the unit is in `img`. A unit written back from the
    /// buffer may be partial (WAFLASH's partial page); the FTL decides how to complete it.
    pub present: u128,
}

/// One step of recovery, as logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryStep {
    pub name: &'static str,
    pub detail: String,
}

/// FTL counters (slots are mapping units).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FtlCounters {
    pub host_slots: u64,
    pub gc_copies: u64,
    pub slc_evictions: u64,
    pub pad_slots: u64,
    pub gc_lines: u64,
    pub gc_background_lines: u64,
    pub slc_evicted_lines: u64,
    /// Units the paced evictor moved in idle time (part of `slc_evictions`).
    pub slc_evicted_idle: u64,
    pub slot_reads: u64,
    /// Reads of a unit's old version to complete a partial unit (read-modify-write; the
    /// additional "update reads" of WAFLASH Fig. 12).
    pub rmw_reads: u64,
    pub oob_mismatches: u64,
    /// Host units written with the transient hint into SLC lines.
    pub slc_transient_units: u64,
    /// Transient units the SLC evictor moved to the dense area (part of `slc_evictions`).
    pub slc_evicted_transient: u64,
    /// Transient units invalidated (overwritten, trimmed, or deallocated by a conversion)
    /// while still in an SLC line: they died in SLC and cost no dense program.
    pub slc_transient_died: u64,
}

/// The interface between the controller and a mapping scheme. The page map implements it;
/// later mappings (WAFLASH's multi-version FTL, WOM-v coding, zoned) implement it beside.
pub trait Ftl: Send {
    fn layout(&self) -> &Layout;
    /// A fresh write sequence number (also orders trims).
    fn next_seq(&mut self) -> u64;
    fn is_mapped(&self, lpn: u32) -> bool;
    /// Reads a unit issued at `t_ns`: its content (`None` when unmapped) and when it is ready.
    fn read_iu(&mut self, t_ns: u64, lpn: u32) -> DevResult<(Option<IuImage>, u64)>;
    /// Programs host units issued at `t_ns` (grouped into pages by the FTL), leaving `ius`
    /// empty; returns when the last program is done. Units may be partial (`present`): the
    /// page-level FTL completes each from its old version first (a read-modify-write).
    fn program(&mut self, t_ns: u64, ius: &mut Vec<IuWrite>) -> DevResult<u64>;
    /// Unmaps a unit; durable at once.
    fn trim(&mut self, lpn: u32, seq: u64);
    /// Work the device does when idle at `t_ns` (background GC).
    fn background(&mut self, t_ns: u64) -> DevResult<()>;
    /// Power loss: forget what is volatile (the L2P table, open lines, queued timing).
    fn power_loss(&mut self);
    /// Rebuilds the volatile state from the media at power-on.
    fn recover(&mut self, t_ns: u64) -> Vec<RecoveryStep>;
    fn counters(&self) -> FtlCounters;
    /// The SLC line paced eviction is emptying and its valid units left, if any.
    fn eviction_in_progress(&self) -> Option<(u32, u32)> {
        None
    }
    fn timer(&self) -> &NandTimer;
    /// The plane holding (the first page of) `lpn`'s current version, if it is mapped.
    fn plane_of(&self, _lpn: u32) -> Option<u32> {
        None
    }
    /// The plane the next host program goes to (write-buffer policies ask whether it is
    /// busy), if the FTL can say.
    fn next_host_plane(&self) -> Option<u32> {
        None
    }
    /// Erase count of every physical block.
    fn block_erase_counts(&self) -> Vec<u32>;
    /// Keeps the media in a NAND image file from now on, first loading what the file holds
    /// and recovering from it as after a power loss (`media::image`). Returns the steps.
    fn attach_image(&mut self, path: &std::path::Path) -> Result<Vec<RecoveryStep>, String> {
        Err(format!("{}: this FTL cannot keep a NAND image file", path.display()))
    }
    /// The image file's first write error, if any (the device fails from then on).
    fn image_error(&self) -> Option<String> {
        None
    }
    /// Makes the image file durable (a flush of a device with a backing file).
    fn sync_image(&mut self) {}
}

/// The NAND image file of a device with a `backing` file, and each line's generation: bumped
/// when the line is opened and when it is erased, so the file's slot records of a line's
/// earlier lives never count (`media::image`).
pub struct Persist {
    pub img: NandImage,
    pub gens: Vec<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineState {
    Free,
    Open,
    Closed,
}

pub struct Line {
    pub state: LineState,
    pub slc: bool,
    /// Next slot to program.
    pub wp: u32,
    /// Slots whose unit is still mapped here.
    pub valid: u32,
    /// Valid slots written with the transient hint.
    pub transient: u32,
    /// When the line was closed (a sequence number), for FIFO victim choice.
    pub closed_seq: u64,
    pub erase_count: u32,
    pub store: Option<Box<LineStore>>,
}

/// Open-line streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Host writes into the SLC cache (all of them with `slc_transient_placement = "mixed"`,
    /// the ones without the transient hint with `"separate"`).
    HostSlc = 0,
    HostDense = 1,
    /// Units moved by GC and SLC eviction.
    Relocate = 2,
    /// Host writes with the transient hint, with `slc_transient_placement = "separate"`.
    HostSlcTransient = 3,
}

impl Stream {
    /// Whether the stream's lines run in SLC mode.
    pub fn slc(self) -> bool {
        matches!(self, Stream::HostSlc | Stream::HostSlcTransient)
    }
}

/// Number of open-line streams ([`Stream`]).
pub const STREAMS: usize = 4;

const L2P_CHUNK: usize = 1 << 16;
const UNMAPPED: u32 = u32::MAX;

pub struct PageMap {
    pub(super) layout: Layout,
    pub(super) shape: Shape,
    pub(super) timer: NandTimer,
    pub(super) lines: Vec<Line>,
    /// L2P in chunks allocated on first use, so a large device costs memory only where
    /// written.
    l2p: Vec<Option<Box<[u32]>>>,
    pub(super) free_dense: VecDeque<u32>,
    pub(super) free_slc: VecDeque<u32>,
    pub(super) open: [Option<u32>; STREAMS],
    /// Durable trim records: unit -> sequence number of its newest trim not yet superseded
    /// by a programmed write. Kept in a reserved system area (not modelled as NAND capacity).
    pub(super) trims: FxHashMap<u32, u64>,
    pub(super) seq: u64,
    pub(super) gc_policy: Box<dyn VictimPolicy>,
    pub(super) evictor: Box<dyn Evictor>,
    pub(super) gc_fg_free: u32,
    pub(super) gc_bg_free: u32,
    pub(super) slc_evict_free: u32,
    /// Paced SLC eviction (`slc_eviction = "paced"`): victims are moved a step at a time.
    pub(super) paced_eviction: bool,
    /// The SLC line paced eviction is emptying, if any (volatile: a power loss forgets it,
    /// and the line, still closed with its unmoved units mapped, is a victim again later).
    pub(super) evicting: Option<u32>,
    /// Transient host writes go to their own SLC stream (`slc_transient_placement`).
    separate_transient: bool,
    /// GC is running (its own allocations must not start another GC).
    pub(super) in_gc: bool,
    /// Scratch buffers of relocation, reused so collecting a line does not allocate.
    pub(super) reloc_slots: Vec<u32>,
    pub(super) reloc_ius: Vec<IuWrite>,
    pub(super) counters: FtlCounters,
    /// The NAND image file, when the device has one.
    pub(super) persist: Option<Persist>,
}

impl PageMap {
    pub fn new(cfg: &SsdConfig, layout: Layout, shape: Shape) -> PageMap {
        let f = &cfg.firmware;
        let lines = (0..layout.lines)
            .map(|l| Line {
                state: LineState::Free,
                slc: l < layout.slc_lines,
                wp: 0,
                valid: 0,
                transient: 0,
                closed_seq: 0,
                erase_count: 0,
                store: None,
            })
            .collect();
        let chunks = (layout.logical_ius as usize).div_ceil(L2P_CHUNK);
        PageMap {
            timer: NandTimer::new(&cfg.nand, layout.channels, layout.planes),
            lines,
            l2p: (0..chunks).map(|_| None).collect(),
            free_slc: (0..layout.slc_lines).collect(),
            free_dense: (layout.slc_lines..layout.lines).collect(),
            open: [None; STREAMS],
            trims: FxHashMap::default(),
            seq: 1,
            gc_policy: super::gc::policy(f.gc_policy),
            evictor: super::slc::evictor(f.slc_evictor, f.slc_transient_factor),
            gc_fg_free: f.gc_foreground_free_lines,
            gc_bg_free: f.gc_background_free_lines,
            slc_evict_free: f.slc_evict_free_lines,
            paced_eviction: f.slc_eviction == SlcEviction::Paced,
            evicting: None,
            separate_transient: f.slc_transient_placement == TransientPlacement::Separate,
            in_gc: false,
            reloc_slots: Vec::new(),
            reloc_ius: Vec::new(),
            counters: FtlCounters::default(),
            persist: None,
            layout,
            shape,
        }
    }

    pub(super) fn l2p_get(&self, lpn: u32) -> Option<u32> {
        let c = self.l2p[lpn as usize / L2P_CHUNK].as_ref()?;
        let p = c[lpn as usize % L2P_CHUNK];
        (p != UNMAPPED).then_some(p)
    }

    pub(super) fn l2p_set(&mut self, lpn: u32, ppa: u32) {
        let c = self.l2p[lpn as usize / L2P_CHUNK]
            .get_or_insert_with(|| vec![UNMAPPED; L2P_CHUNK].into_boxed_slice());
        c[lpn as usize % L2P_CHUNK] = ppa;
    }

    /// Maps `lpn` to `ppa` and returns where it was mapped before.
    #[inline]
    fn l2p_replace(&mut self, lpn: u32, ppa: u32) -> Option<u32> {
        let c = self.l2p[lpn as usize / L2P_CHUNK]
            .get_or_insert_with(|| vec![UNMAPPED; L2P_CHUNK].into_boxed_slice());
        let old = std::mem::replace(&mut c[lpn as usize % L2P_CHUNK], ppa);
        (old != UNMAPPED).then_some(old)
    }

    pub(super) fn l2p_clear_all(&mut self) {
        self.l2p.iter_mut().for_each(|c| *c = None);
    }

    /// Drops the mapping of `lpn`, invalidating its slot.
    fn unmap(&mut self, lpn: u32) {
        if let Some(old) = self.l2p_get(lpn) {
            if self.invalidate(old) {
                self.counters.slc_transient_died += 1;
            }
            let c = self.l2p[lpn as usize / L2P_CHUNK].as_mut().expect("mapped chunk exists");
            c[lpn as usize % L2P_CHUNK] = UNMAPPED;
        }
    }

    /// Marks the slot at `ppa` stale. Returns true when it held a transient unit in an SLC
    /// line, so callers can count transient units that died in SLC (a relocation, which also
    /// leaves its source slot stale, is not such a death).
    fn invalidate(&mut self, ppa: u32) -> bool {
        let (l, s) = self.layout.split_ppa(ppa);
        let line = &mut self.lines[l as usize];
        line.valid -= 1;
        let st = line.store.as_mut().expect("a mapped slot's line has a store");
        if st.clear_valid(s) {
            line.transient -= 1;
            line.slc
        } else {
            false
        }
    }

    /// Slots one program operation fills in a line: a page's worth of units, or one unit
    /// spanning pages.
    fn slots_per_program(&self) -> u32 {
        self.layout.slots_per_page
    }

    /// The open line of `stream` with room for one program, opening a new one (and running
    /// GC or SLC eviction first when free lines are short) if needed.
    fn line_for(&mut self, t_ns: u64, stream: Stream) -> DevResult<u32> {
        let slc = stream.slc();
        loop {
            if let Some(l) = self.open[stream as usize] {
                let line = &self.lines[l as usize];
                if line.wp + self.slots_per_program() <= self.layout.slots_per_line(line.slc) {
                    return Ok(l);
                }
                self.close_line(l);
                self.open[stream as usize] = None;
            }
            if slc {
                // Inline eviction frees lines here, before the line is taken. Paced eviction
                // evicts here only as a backstop (short of lines anyway, say after a power
                // loss forgot its victim), then chooses its victim at the point where inline
                // eviction would, and empties it while the host fills this line (`super::slc`).
                while self.free_slc.len() as u32 <= self.slc_backstop_free() {
                    if !self.evict_one(t_ns)? {
                        break;
                    }
                }
                self.start_paced_eviction();
            } else if !self.in_gc {
                while self.free_dense.len() as u32 <= self.gc_fg_free {
                    if !self.collect_one(t_ns, false)? {
                        break;
                    }
                }
            }
            // GC relocates through the relocation stream and may have opened a line for it
            // meanwhile; use that one rather than leaving it half written.
            if self.open[stream as usize].is_none() {
                break;
            }
        }
        let free = if slc { &mut self.free_slc } else { &mut self.free_dense };
        let l = free.pop_front().ok_or_else(|| {
            DevError::NoSpace(format!(
                "no free {} line left and garbage collection found nothing to reclaim",
                if slc { "SLC" } else { "dense" }
            ))
        })?;
        let slots = self.layout.slots_per_line(slc);
        let line = &mut self.lines[l as usize];
        line.state = LineState::Open;
        line.wp = 0;
        line.valid = 0;
        line.transient = 0;
        line.store = Some(Box::new(LineStore::new(self.shape, slots)));
        let erase_count = line.erase_count;
        if let Some(p) = self.persist.as_mut() {
            p.gens[l as usize] += 1;
            let generation = p.gens[l as usize];
            p.img.write_line(l, LineEntry { generation, erase_count, closed_seq: 0 });
        }
        self.open[stream as usize] = Some(l);
        Ok(l)
    }

    fn close_line(&mut self, l: u32) {
        self.seq += 1;
        let line = &mut self.lines[l as usize];
        line.state = LineState::Closed;
        line.closed_seq = self.seq;
        let (erase_count, closed_seq) = (line.erase_count, line.closed_seq);
        if let Some(p) = self.persist.as_mut() {
            let generation = p.gens[l as usize];
            p.img.write_line(l, LineEntry { generation, erase_count, closed_seq });
        }
    }

    /// Programs units into `stream`, a page (or a unit spanning pages) at a time, padding a
    /// page that `ius` does not fill. Relocated units keep their sequence numbers.
    pub(super) fn program_stream(
        &mut self,
        t_ns: u64,
        stream: Stream,
        ius: impl Iterator<Item = IuWrite>,
    ) -> DevResult<u64> {
        let per = self.slots_per_program() as usize;
        let mut done = t_ns;
        let mut it = ius.peekable();
        while it.peek().is_some() {
            let l = self.line_for(t_ns, stream)?;
            let slc = self.lines[l as usize].slc;
            let wp = self.lines[l as usize].wp;
            // Timing: each page of this program.
            let (first_page, pages) = self.layout.slot_pages(wp);
            let page_bytes = self.layout.page_bytes;
            for p in first_page..first_page + pages {
                let a = self.layout.page_addr(p);
                let ty = self.layout.page_type(&a, slc);
                done = done.max(self.timer.program(t_ns, a.channel, a.plane, ty, slc, page_bytes));
            }
            // Contents and mapping.
            for k in 0..per as u32 {
                let slot = wp + k;
                let ppa = self.layout.ppa(l, slot);
                match it.next() {
                    Some(w) => {
                        // One L2P access maps the unit here and yields its old place, which
                        // goes stale (a host write supersedes it; a relocated unit leaves it).
                        if let Some(old) = self.l2p_replace(w.lpn, ppa) {
                            let died = self.invalidate(old);
                            if died && stream != Stream::Relocate {
                                self.counters.slc_transient_died += 1;
                            }
                        }
                        if stream != Stream::Relocate {
                            if slc && w.flags & FLAG_TRANSIENT != 0 {
                                self.counters.slc_transient_units += 1;
                            }
                            if !self.trims.is_empty()
                                && self.trims.get(&w.lpn).is_some_and(|&ts| ts < w.seq)
                            {
                                self.trims.remove(&w.lpn);
                            }
                            self.counters.host_slots += 1;
                        }
                        let line = &mut self.lines[l as usize];
                        let st = line.store.as_mut().expect("open line has a store");
                        st.put(slot, w.lpn, w.seq, w.flags, &w.img);
                        st.set_valid(slot);
                        if let Some(p) = self.persist.as_mut() {
                            let h = SlotHeader {
                                lpn: w.lpn,
                                generation: p.gens[l as usize],
                                seq: w.seq,
                                flags: w.flags,
                            };
                            p.img.write_slot(l, slot, h, w.img.as_bytes());
                        }
                        line.valid += 1;
                        if w.flags & FLAG_TRANSIENT != 0 {
                            line.transient += 1;
                        }
                    }
                    None => self.counters.pad_slots += 1,
                }
            }
            self.lines[l as usize].wp = wp + per as u32;
            if slc && stream != Stream::Relocate {
                // After the host page is on its plane's timeline, a step of paced eviction
                // (nothing without a victim in progress).
                self.pace_eviction(t_ns)?;
            }
        }
        Ok(done)
    }

    /// Reads the units in `slots` of `line` (valid slots, in slot order) for relocation into
    /// `out`, sensing each page once; returns when the last is off the channel.
    pub(super) fn read_for_relocation(
        &mut self,
        t_ns: u64,
        line: u32,
        slots: &[u32],
        out: &mut Vec<IuWrite>,
    ) -> u64 {
        let slc = self.lines[line as usize].slc;
        let mut done = t_ns;
        let mut last_page = u32::MAX;
        for &s in slots {
            let (first, pages) = self.layout.slot_pages(s);
            if first != last_page {
                last_page = first;
                for p in first..first + pages {
                    let a = self.layout.page_addr(p);
                    let ty = self.layout.page_type(&a, slc);
                    let bytes = self.layout.iu_bytes.min(self.layout.page_bytes);
                    done = done.max(self.timer.read(t_ns, a.channel, a.plane, ty, slc, bytes));
                }
            }
            let st = self.lines[line as usize].store.as_ref().expect("closed line has a store");
            out.push(IuWrite {
                lpn: st.lpn[s as usize],
                seq: st.seq[s as usize],
                flags: st.flags[s as usize],
                img: st.get(s),
                present: u128::MAX,
            });
        }
        done
    }

    /// Erases every block of `line` at `t_ns` and returns it to its free list.
    pub(super) fn erase_line(&mut self, t_ns: u64, line: u32) -> u64 {
        let slc = self.lines[line as usize].slc;
        let mut done = t_ns;
        for plane in 0..self.layout.planes {
            done = done.max(self.timer.erase(t_ns, plane, slc));
        }
        let l = &mut self.lines[line as usize];
        debug_assert_eq!(l.valid, 0, "erasing a line with valid data");
        l.state = LineState::Free;
        l.store = None;
        l.wp = 0;
        l.valid = 0;
        l.transient = 0;
        l.erase_count += 1;
        let erase_count = l.erase_count;
        if let Some(p) = self.persist.as_mut() {
            p.gens[line as usize] += 1;
            let generation = p.gens[line as usize];
            p.img.write_line(line, LineEntry { generation, erase_count, closed_seq: 0 });
        }
        if slc {
            self.free_slc.push_back(line);
        } else {
            self.free_dense.push_back(line);
        }
        done
    }
}

impl PageMap {
    /// Completes the partial units of a write-back group issued at `t_ns`: each unit written
    /// before is read (all reads issued at `t_ns`) and its missing blocks are taken from the
    /// old version. Returns when the last read is done, the time the group's programs may
    /// start. A unit never written keeps zeros in its missing blocks.
    fn complete_partial_units(&mut self, t_ns: u64, ius: &mut [IuWrite]) -> DevResult<u64> {
        let full = if self.layout.blocks_per_iu >= 128 {
            u128::MAX
        } else {
            (1u128 << self.layout.blocks_per_iu) - 1
        };
        let shape = self.shape;
        let mut start = t_ns;
        for w in ius.iter_mut() {
            if w.present & full == full || !self.is_mapped(w.lpn) {
                continue;
            }
            let (old, ready) = self.read_iu(t_ns, w.lpn)?;
            self.counters.rmw_reads += 1;
            start = start.max(ready);
            if let Some(old) = old {
                for i in 0..self.layout.blocks_per_iu {
                    if w.present & (1u128 << i) == 0 {
                        w.img.copy_block_from(&shape, i as usize, &old);
                    }
                }
            }
        }
        Ok(start)
    }
}

impl Ftl for PageMap {
    fn layout(&self) -> &Layout {
        &self.layout
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn is_mapped(&self, lpn: u32) -> bool {
        self.l2p_get(lpn).is_some()
    }

    fn read_iu(&mut self, t_ns: u64, lpn: u32) -> DevResult<(Option<IuImage>, u64)> {
        let Some(ppa) = self.l2p_get(lpn) else { return Ok((None, t_ns)) };
        let (l, s) = self.layout.split_ppa(ppa);
        let slc = self.lines[l as usize].slc;
        let (first, pages) = self.layout.slot_pages(s);
        let bytes = self.layout.iu_bytes.min(self.layout.page_bytes);
        let mut done = t_ns;
        for p in first..first + pages {
            let a = self.layout.page_addr(p);
            let ty = self.layout.page_type(&a, slc);
            done = done.max(self.timer.read(t_ns, a.channel, a.plane, ty, slc, bytes));
        }
        self.counters.slot_reads += 1;
        let st = self.lines[l as usize].store.as_ref().expect("mapped line has a store");
        // The OOB names the unit stored in the slot; a mismatch means the mapping is wrong,
        // and returning the bytes would hand the host another block's data.
        if st.lpn[s as usize] != lpn {
            self.counters.oob_mismatches += 1;
            return Err(DevError::ReadMedia { lba: lpn as u64 * self.layout.blocks_per_iu as u64 });
        }
        Ok((Some(st.get(s)), done))
    }

    fn program(&mut self, t_ns: u64, ius: &mut Vec<IuWrite>) -> DevResult<u64> {
        let t_ns = self.complete_partial_units(t_ns, ius)?;
        if self.layout.slc_lines == 0 {
            // No SLC cache: every host write goes to the dense area's one host stream, and
            // the transient placement has nothing to separate.
            return self.program_stream(t_ns, Stream::HostDense, ius.drain(..));
        }
        if !self.separate_transient {
            return self.program_stream(t_ns, Stream::HostSlc, ius.drain(..));
        }
        let transient = ius.iter().filter(|w| w.flags & FLAG_TRANSIENT != 0).count();
        if transient == 0 || transient == ius.len() {
            // One stream takes the whole group (always so when writing through, one unit at
            // a time).
            let stream = if transient == 0 { Stream::HostSlc } else { Stream::HostSlcTransient };
            return self.program_stream(t_ns, stream, ius.drain(..));
        }
        // A write-back group that mixes both kinds is split, each part padded to whole pages
        // in its own line (docs/ssd.md, "SLC cache").
        let (tr, other): (Vec<IuWrite>, Vec<IuWrite>) =
            ius.drain(..).partition(|w| w.flags & FLAG_TRANSIENT != 0);
        let a = self.program_stream(t_ns, Stream::HostSlc, other.into_iter())?;
        let b = self.program_stream(t_ns, Stream::HostSlcTransient, tr.into_iter())?;
        Ok(a.max(b))
    }

    fn trim(&mut self, lpn: u32, seq: u64) {
        self.unmap(lpn);
        self.trims.insert(lpn, seq);
        if let Some(p) = self.persist.as_mut() {
            p.img.write_trim(lpn, seq);
        }
    }

    fn background(&mut self, t_ns: u64) -> DevResult<()> {
        self.timer.set_now(t_ns);
        self.evict_in_idle_time(t_ns)?;
        if self.free_dense.len() as u32 <= self.gc_bg_free && self.timer.idle_at(t_ns) {
            self.collect_one(t_ns, true)?;
        }
        Ok(())
    }

    fn power_loss(&mut self) {
        super::recover::power_loss(self);
    }

    fn recover(&mut self, t_ns: u64) -> Vec<RecoveryStep> {
        super::recover::recover(self, t_ns)
    }

    fn counters(&self) -> FtlCounters {
        self.counters.clone()
    }

    fn eviction_in_progress(&self) -> Option<(u32, u32)> {
        self.evicting.map(|l| (l, self.lines[l as usize].valid))
    }

    fn timer(&self) -> &NandTimer {
        &self.timer
    }

    fn plane_of(&self, lpn: u32) -> Option<u32> {
        let (_, slot) = self.layout.split_ppa(self.l2p_get(lpn)?);
        Some(self.layout.page_addr(self.layout.slot_pages(slot).0).plane)
    }

    fn next_host_plane(&self) -> Option<u32> {
        let stream = if self.layout.slc_lines == 0 { Stream::HostDense } else { Stream::HostSlc };
        // A stream without an open line opens one and starts at its first slot.
        let slot = self.open[stream as usize].map_or(0, |l| self.lines[l as usize].wp);
        Some(self.layout.page_addr(self.layout.slot_pages(slot).0).plane)
    }

    fn attach_image(&mut self, path: &std::path::Path) -> Result<Vec<RecoveryStep>, String> {
        super::recover::load_image(self, path)
    }

    fn image_error(&self) -> Option<String> {
        self.persist.as_ref().and_then(|p| p.img.error().map(str::to_string))
    }

    fn sync_image(&mut self) {
        if let Some(p) = self.persist.as_mut() {
            p.img.sync();
        }
    }

    fn block_erase_counts(&self) -> Vec<u32> {
        // All blocks of a line are erased together, so each has its line's count.
        let mut v = Vec::with_capacity(self.lines.len() * self.layout.planes as usize);
        for l in &self.lines {
            v.extend(std::iter::repeat_n(l.erase_count, self.layout.planes as usize));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PayloadMode;

    /// Programs `n` units one at a time (as writing through does), every other one transient,
    /// then `n` more in write-back groups of four that mix both kinds; returns the FTL.
    fn filled(preset: &str, placement: TransientPlacement, n: u32) -> PageMap {
        let mut cfg = SsdConfig::preset(preset).unwrap();
        cfg.payload = PayloadMode::None;
        cfg.firmware.slc_transient_placement = placement;
        let layout = Layout::new(&cfg).unwrap();
        let shape =
            Shape { mode: PayloadMode::None, block_bytes: 4096, blocks_per_iu: 1, md_bytes: 0 };
        let mut ftl = PageMap::new(&cfg, layout, shape);
        let unit = |lpn: u32| IuWrite {
            lpn,
            seq: lpn as u64 + 10,
            flags: if lpn.is_multiple_of(2) { FLAG_TRANSIENT } else { 0 },
            img: IuImage::zeroed(&shape),
            present: u128::MAX,
        };
        for lpn in 0..n {
            ftl.program(0, &mut vec![unit(lpn)]).unwrap();
        }
        for first in (n..2 * n).step_by(4) {
            let mut group: Vec<IuWrite> = (first..first + 4).map(unit).collect();
            ftl.program(0, &mut group).unwrap();
        }
        ftl
    }

    #[test]
    fn separate_placement_gives_transient_units_slc_lines_of_their_own() {
        let n = 300; // more than two SLC lines' worth (128 units each) over the two calls
        let sep = filled("tiny-slc", TransientPlacement::Separate, n);
        let slc = sep.layout.slc_lines as usize;
        let used: Vec<&Line> = sep.lines[..slc].iter().filter(|l| l.wp > 0).collect();
        assert!(used.len() >= 4, "both streams filled lines");
        for l in &used {
            assert!(l.transient == 0 || l.transient == l.valid, "a line mixes both kinds");
        }
        assert_eq!(sep.counters.slc_transient_units, n as u64);
        assert_eq!(sep.counters.pad_slots, 0, "one unit per page: splitting pads nothing");
        // Mixed placement: every line holds both kinds.
        let mixed = filled("tiny-slc", TransientPlacement::Mixed, n);
        for l in mixed.lines[..slc].iter().filter(|l| l.wp > 0) {
            assert!(
                l.transient > 0 && l.transient < l.valid,
                "mixed line {}/{}",
                l.transient,
                l.valid
            );
        }
        // Without an SLC cache there is nothing to separate: one dense host stream takes all.
        let dense = filled("tiny", TransientPlacement::Separate, n);
        assert_eq!(dense.counters.slc_transient_units, 0);
        assert_eq!(dense.lines.iter().filter(|l| l.wp > 0).count(), 2, "600 units in 2 lines");
    }
}
