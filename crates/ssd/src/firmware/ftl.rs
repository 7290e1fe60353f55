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
use super::trims::TrimTable;
use crate::config::{FtlPolicy, SlcEviction, SsdConfig, TransientPlacement};
use crate::media::compacted::{self, Compacted, Packing, COMPACTED_LPN};
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
    /// Host units written straight to the dense area because the SLC cache had no free line
    /// (`slc_eviction = "idle"` only; part of `host_slots`).
    pub slc_bypassed_units: u64,
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
    /// MV-FTL: partial units programmed as a new version, without a read (WAFLASH §3.2).
    pub mv_versions_written: u64,
    /// MV-FTL: reads of older versions a read needed for blocks its newest version lacks
    /// (beyond the one read of the newest version).
    pub mv_extra_reads: u64,
    /// MV-FTL: version chains merged into one whole unit (by GC, SLC eviction, or idle time).
    pub mv_merges: u64,
    /// MV-FTL: of `mv_merges`, those done in idle time.
    pub mv_idle_merges: u64,
    /// MV-FTL gauge: logical units with more than one version now.
    pub mv_chained_units: u64,
    /// MV-FTL gauge: versions those units hold now, the newest included (so
    /// `mv_chain_versions / mv_chained_units` is the mean number of versions per chained unit).
    pub mv_chain_versions: u64,
    /// MV-FTL compaction (WAFLASH §3.3): compacted pages programmed (each one slot, counted
    /// in `host_slots` as one).
    pub mv_compacted_pages: u64,
    /// MV-FTL compaction: partial units packed into those pages (each a new partial version
    /// of its unit, not counted in `mv_versions_written`).
    pub mv_compacted_units: u64,
    /// Zoned namespace: zone resets (each erases the zone's blocks if any were programmed).
    pub zone_resets: u64,
    /// Zoned namespace: zone finishes.
    pub zone_finishes: u64,
    /// Zoned namespace: saves of a zone's staged units to the reserved SLC area by a flush or
    /// FUA write without power-loss protection (`super::zoned`).
    pub zone_staged_saves: u64,
}

/// The interface between the controller and a mapping scheme. The page map implements it;
/// later mappings (WAFLASH's multi-version FTL, WOM-v coding, zoned) implement it beside.
pub trait Ftl: Send {
    fn layout(&self) -> &Layout;
    /// A fresh write sequence number (also orders trims).
    fn next_seq(&mut self) -> u64;
    fn is_mapped(&self, lpn: u32) -> bool;
    /// Reads a unit issued at `t_ns`: its content (`None` when unmapped) and when it is ready.
    /// `need` holds the host blocks the caller will use (bit `i`: block `i`); the others may
    /// hold anything (MV-FTL reads only the versions the needed blocks are in).
    fn read_iu(&mut self, t_ns: u64, lpn: u32, need: u128) -> DevResult<(Option<IuImage>, u64)>;
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
    /// Makes what the FTL holds in DRAM durable (a flush or FUA write without power-loss
    /// protection); returns when done. Only the zoned firmware stages data of its own.
    fn sync_staged(&mut self, t_ns: u64) -> u64 {
        t_ns
    }
    /// Zoned namespace: the physical part of a zone reset issued at `t_ns` (erasing the
    /// zone's blocks); returns when done.
    fn zone_reset(&mut self, t_ns: u64, _zone: u64) -> u64 {
        t_ns
    }
    /// Zoned namespace: the physical part of a zone finish; returns when done.
    fn zone_finish(&mut self, t_ns: u64, _zone: u64) -> u64 {
        t_ns
    }
    /// Counters of the FTL's own, published beside the common ones (the WOM-v firmware's).
    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Zoned namespace: each zone's written blocks and whether it was finished, as the media
    /// (and the saved staging) hold them, for rebuilding the zone table after a power loss.
    fn zone_media_state(&self) -> Vec<(u64, bool)> {
        Vec::new()
    }
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

pub(super) const L2P_CHUNK: usize = 1 << 16;

/// MV-FTL: the most versions one logical unit may have; a partial unit that would make more
/// is completed by a read-modify-write instead (which merges the chain), so a read never
/// needs more than this many page reads. The paper leaves the bound open (its PT/F field has
/// 6 bits, §3.2); 8 keeps reads bounded while letting a hot unit take several versions.
pub const MV_MAX_VERSIONS: usize = 8;
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
    pub(super) trims: TrimTable,
    pub(super) seq: u64,
    pub(super) gc_policy: Box<dyn VictimPolicy>,
    pub(super) evictor: Box<dyn Evictor>,
    pub(super) gc_fg_free: u32,
    pub(super) gc_bg_free: u32,
    pub(super) slc_evict_free: u32,
    /// Paced SLC eviction (`slc_eviction = "paced"`): victims are moved a step at a time.
    pub(super) paced_eviction: bool,
    /// Idle-time SLC eviction (`slc_eviction = "idle"`): a full cache sends host writes to
    /// the dense area, and victims are moved only while the device is idle.
    pub(super) idle_eviction: bool,
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
    /// MV-FTL (`ftl_policy = "mv"` with more than one host block per unit): partial units of
    /// more than half a unit become new versions.
    pub(super) mv: bool,
    /// Every host block of a unit.
    pub(super) full: u128,
    /// MV-FTL version chains: unit -> its older versions' PPAs, newest first (the L2P holds the
    /// newest). Only units with more than one version are here; volatile, rebuilt by recovery.
    pub(super) chains: FxHashMap<u32, Vec<u32>>,
    /// MV-FTL: the most older versions all chains together may hold. Older versions occupy
    /// slots that count as valid, so they use the over-provisioned space ("the spare pages
    /// that are provided by SSD manufacturers", §3.2); bounding them to a quarter of it keeps
    /// GC able to free lines whatever the chains hold.
    pub(super) mv_budget: u64,
    /// MV-FTL compaction (WAFLASH §3.3): the region, in logical units, whose small partial
    /// units one program call packs together; 0 turns compaction off.
    compaction_region_pages: u32,
    /// MV-FTL merges chains in idle time (`firmware.mv_idle_merge`).
    mv_idle_merge: bool,
    /// Compacted pages of the program call in progress, by the sequence number of the slot
    /// that carries each through `program_stream` (their tables cannot ride in an [`IuWrite`]).
    pending_compacted: Vec<(u64, Compacted)>,
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
            trims: TrimTable::new(layout.logical_ius),
            seq: 1,
            gc_policy: super::gc::policy(f.gc_policy),
            evictor: super::slc::evictor(f.slc_evictor, f.slc_transient_factor),
            gc_fg_free: f.gc_foreground_free_lines,
            gc_bg_free: f.gc_background_free_lines,
            slc_evict_free: f.slc_evict_free_lines,
            paced_eviction: f.slc_eviction == SlcEviction::Paced,
            idle_eviction: f.slc_eviction == SlcEviction::Idle,
            evicting: None,
            separate_transient: f.slc_transient_placement == TransientPlacement::Separate,
            in_gc: false,
            reloc_slots: Vec::new(),
            reloc_ius: Vec::new(),
            counters: FtlCounters::default(),
            persist: None,
            mv: f.ftl_policy == FtlPolicy::Mv && layout.blocks_per_iu > 1,
            full: if layout.blocks_per_iu >= 128 {
                u128::MAX
            } else {
                (1u128 << layout.blocks_per_iu) - 1
            },
            chains: FxHashMap::default(),
            mv_budget: {
                let dense =
                    (layout.lines - layout.slc_lines) as u64 * layout.slots_per_line_native as u64;
                dense.saturating_sub(layout.logical_ius) / 4
            },
            compaction_region_pages: if f.ftl_policy == FtlPolicy::Mv {
                f.compaction_region_pages
            } else {
                0
            },
            mv_idle_merge: f.mv_idle_merge,
            pending_compacted: Vec::new(),
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

    /// Drops the mapping of `lpn`, invalidating its slot (and, in MV-FTL, every older
    /// version).
    fn unmap(&mut self, lpn: u32) {
        let died = self.drop_chain(lpn);
        self.counters.slc_transient_died += died;
        if let Some(old) = self.l2p_get(lpn) {
            if self.invalidate(old) {
                self.counters.slc_transient_died += 1;
            }
            let c = self.l2p[lpn as usize / L2P_CHUNK].as_mut().expect("mapped chunk exists");
            c[lpn as usize % L2P_CHUNK] = UNMAPPED;
        }
    }

    /// Invalidates the older versions of `lpn` and forgets its chain (a whole-unit write, a
    /// merge or a trim supersedes them all). Returns how many were transient units in SLC.
    pub(super) fn drop_chain(&mut self, lpn: u32) -> u64 {
        if self.chains.is_empty() {
            return 0;
        }
        let Some(chain) = self.chains.remove(&lpn) else { return 0 };
        self.counters.mv_chained_units -= 1;
        self.counters.mv_chain_versions -= chain.len() as u64 + 1;
        chain.iter().map(|&ppa| self.invalidate(ppa) as u64).sum()
    }

    /// Older versions all chains hold now.
    fn older_versions(&self) -> u64 {
        self.counters.mv_chain_versions - self.counters.mv_chained_units
    }

    /// Whether MV-FTL programs the partial unit `w` (of a unit mapped now) as a new version:
    /// more than half its blocks are present (smaller ones are compaction's, §3.3, or take the
    /// read-modify-write), and [`Self::room_for_version`].
    fn takes_new_version(&self, w: &IuWrite) -> bool {
        !self.is_small(w) && self.room_for_version(w.lpn, 0)
    }

    /// Whether the partial unit `w` has at most half its blocks present (§3.3's "small
    /// portion (e.g., ≤ 50%) of a logical page").
    fn is_small(&self, w: &IuWrite) -> bool {
        2 * (w.present & self.full).count_ones() <= self.layout.blocks_per_iu
    }

    /// Whether `lpn` may take one more version, with `pending` more older versions already
    /// promised in this program call: it has fewer than [`MV_MAX_VERSIONS`], and the older
    /// versions fit the budget.
    fn room_for_version(&self, lpn: u32, pending: u64) -> bool {
        let versions = self.chains.get(&lpn).map_or(1, |c| c.len() + 1);
        versions < MV_MAX_VERSIONS && self.older_versions() + pending < self.mv_budget
    }

    /// Marks the slot at `ppa` stale. Returns true when it held a transient unit in an SLC
    /// line, so callers can count transient units that died in SLC (a relocation, which also
    /// leaves its source slot stale, is not such a death).
    ///
    /// A compacted page (§3.3) is used by several units: it goes stale only when the last of
    /// them stops using its section.
    fn invalidate(&mut self, ppa: u32) -> bool {
        let (l, s) = self.layout.split_ppa(ppa);
        let line = &mut self.lines[l as usize];
        let st = line.store.as_mut().expect("a mapped slot's line has a store");
        if st.release_compacted(s).is_some_and(|live| live > 0) {
            return false;
        }
        line.valid -= 1;
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
            if slc && self.idle_eviction {
                // A full cache takes nothing more until idle time empties a line: the host
                // program goes to the dense area's host stream, at the dense program rate
                // and without eviction work beside it (`super::slc`).
                if self.free_slc.is_empty() {
                    return self.line_for(t_ns, Stream::HostDense);
                }
            } else if slc {
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
                let span = self.timer.program(t_ns, a.channel, a.plane, ty, slc, page_bytes);
                done = done.max(span.done_ns);
            }
            // Contents and mapping.
            for k in 0..per as u32 {
                let slot = wp + k;
                let ppa = self.layout.ppa(l, slot);
                match it.next() {
                    Some(w) if w.lpn == COMPACTED_LPN => self.place_compacted(l, slot, w),
                    Some(w) => {
                        // MV-FTL: a unit still partial here is a new version (the FTL chose not
                        // to complete it); its old place stays valid as the newest older one.
                        let version = self.mv && w.present & self.full != self.full;
                        // One L2P access maps the unit here and yields its old place, which
                        // goes stale (a host write supersedes it; a relocated unit leaves it).
                        let old = self.l2p_replace(w.lpn, ppa);
                        if version {
                            self.counters.mv_versions_written += 1;
                            self.chain_push(w.lpn, old);
                        } else {
                            let mut died = self.drop_chain(w.lpn);
                            if let Some(old) = old {
                                died += self.invalidate(old) as u64;
                            }
                            if stream != Stream::Relocate {
                                self.counters.slc_transient_died += died;
                            }
                        }
                        if stream != Stream::Relocate {
                            if slc && w.flags & FLAG_TRANSIENT != 0 {
                                self.counters.slc_transient_units += 1;
                            }
                            if stream.slc() && !slc {
                                self.counters.slc_bypassed_units += 1;
                            }
                            self.trims.supersede(w.lpn, w.seq);
                            self.counters.host_slots += 1;
                        }
                        let line = &mut self.lines[l as usize];
                        let st = line.store.as_mut().expect("open line has a store");
                        st.put(slot, w.lpn, w.seq, w.flags, &w.img);
                        st.set_valid(slot);
                        if version {
                            st.set_partial(slot, w.present & self.full);
                        }
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

    /// Makes `old`, the place `lpn` was mapped to before a new version, the newest of its older
    /// versions.
    fn chain_push(&mut self, lpn: u32, old: Option<u32>) {
        // A unit never written is completed with zeros rather than versioned
        // (`complete_partial_units`), so there is always an old place here.
        let Some(old) = old else { return };
        let chain = self.chains.entry(lpn).or_default();
        if chain.is_empty() {
            self.counters.mv_chained_units += 1;
            self.counters.mv_chain_versions += 1;
        }
        chain.insert(0, old);
        self.counters.mv_chain_versions += 1;
    }

    /// Senses the page(s) of the slot at `ppa` at `t_ns`; returns when the data is off the
    /// channel.
    fn read_slot(&mut self, t_ns: u64, ppa: u32) -> u64 {
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
        done
    }

    /// The OOB of the slot at `ppa` read as a version of `lpn`: its sequence number, flags, and
    /// its sector bitmap when it is a partial version; `None` when the slot holds no version of
    /// `lpn` (its OOB names another unit, or, for a compacted page, its table has no section
    /// of `lpn`).
    fn version_at(&self, ppa: u32, lpn: u32) -> Option<(u64, u8, Option<u128>)> {
        let (l, s) = self.layout.split_ppa(ppa);
        let st = self.lines[l as usize].store.as_ref()?;
        let i = s as usize;
        if st.lpn[i] == COMPACTED_LPN {
            let sec = st.compacted_of(s)?.section_of(lpn)?;
            return Some((sec.seq, sec.flags, Some(sec.present)));
        }
        (st.lpn[i] == lpn).then(|| (st.seq[i], st.flags[i], st.partial_of(s)))
    }

    /// The content of the version of `lpn` at `ppa`: the slot's unit, or, for a compacted page,
    /// `lpn`'s section taken out by the page's table (blocks it lacks are zeros).
    fn image_at(&self, ppa: u32, lpn: u32) -> IuImage {
        let (l, s) = self.layout.split_ppa(ppa);
        let st = self.lines[l as usize].store.as_ref().expect("mapped line has a store");
        if let Some(c) = st.compacted_of(s) {
            if let Some(sec) = c.section_of(lpn) {
                let start = compacted::data_start(&self.shape, c.sections.len());
                return compacted::unpack(&self.shape, &st.get(s), sec, start);
            }
        }
        st.get(s)
    }

    /// Whether the version of `lpn` at `ppa` is still one of its versions (its newest, or in
    /// its chain).
    pub(super) fn uses(&self, lpn: u32, ppa: u32) -> bool {
        self.l2p_get(lpn) == Some(ppa) || self.chains.get(&lpn).is_some_and(|c| c.contains(&ppa))
    }

    /// Reads the blocks `need` of `lpn` (mapped to `newest`) issued at `t_ns`: its newest
    /// version and, when that one is partial, the older versions holding needed blocks it
    /// lacks (§3.2: "if the requested data is not available according to the write pattern,
    /// it will issue another read for its earlier version"), all issued at `t_ns` and merged in
    /// DRAM (the newest version of each block wins; needed blocks no version holds read as
    /// zeros). Returns the unit (with the newest version's sequence number and flags), when
    /// the last read is done, and how many older versions were read.
    fn read_versions(
        &mut self,
        t_ns: u64,
        lpn: u32,
        newest: u32,
        need: u128,
    ) -> DevResult<(IuWrite, u64, u64)> {
        let mismatch = |ftl: &mut PageMap| {
            ftl.counters.oob_mismatches += 1;
            DevError::ReadMedia { lba: lpn as u64 * ftl.layout.blocks_per_iu as u64 }
        };
        let mut done = self.read_slot(t_ns, newest);
        // The OOB (or a compacted page's table) names the units stored in the slot; a mismatch
        // means the mapping is wrong, and returning the bytes would hand the host another
        // block's data.
        let Some((seq, flags, partial)) = self.version_at(newest, lpn) else {
            return Err(mismatch(self));
        };
        let mut img = self.image_at(newest, lpn);
        let mut extra = 0;
        if let Some(bits) = partial {
            let shape = self.shape;
            let mut missing = need & self.full & !bits;
            let older = self.chains.get(&lpn).map_or(0, |c| c.len());
            for k in 0..older {
                if missing == 0 {
                    break;
                }
                let ppa = self.chains[&lpn][k];
                let Some((_, _, partial)) = self.version_at(ppa, lpn) else {
                    return Err(mismatch(self));
                };
                let take = partial.unwrap_or(self.full) & missing;
                if take == 0 {
                    continue;
                }
                done = done.max(self.read_slot(t_ns, ppa));
                extra += 1;
                let old = self.image_at(ppa, lpn);
                for i in 0..self.layout.blocks_per_iu {
                    if take & (1u128 << i) != 0 {
                        img.copy_block_from(&shape, i as usize, &old);
                    }
                }
                missing &= !take;
            }
            if missing != 0 {
                let zeros = IuImage::zeroed(&shape);
                for i in 0..self.layout.blocks_per_iu {
                    if missing & (1u128 << i) != 0 {
                        img.copy_block_from(&shape, i as usize, &zeros);
                    }
                }
            }
        }
        Ok((IuWrite { lpn, seq, flags, img, present: self.full }, done, extra))
    }

    /// MV-FTL: reads every version of the chained unit `lpn` needed for its content at `t_ns`
    /// and returns it as one whole unit to program (which then supersedes every version), with
    /// when the reads are done. Counts a merge.
    pub(super) fn read_merged(&mut self, t_ns: u64, lpn: u32) -> DevResult<(IuWrite, u64)> {
        let newest = self.l2p_get(lpn).expect("a chained unit is mapped");
        let (w, done, _) = self.read_versions(t_ns, lpn, newest, self.full)?;
        self.counters.mv_merges += 1;
        Ok((w, done))
    }

    /// MV-FTL in the idle time before a command that arrives at `t_ns`: merges version
    /// chains (in the table's order, which is deterministic) into whole units in the
    /// relocation stream, starting when the device went idle (its last plane or channel to
    /// finish) and going on while that moment is still before `t_ns`. The merges fill the gap
    /// the device was idle in, as paced SLC eviction does (`evict_in_idle_time`); starting them
    /// at `t_ns` would queue them in front of the command that found the device idle, and at a
    /// trace's pace every read would wait for a merge (8 KiB pages, DTR stand-in: reads 9%
    /// slower than the Baseline's with one merge per command at `t_ns`; docs/waflash.md,
    /// "Merging", gives the command). The last
    /// merge may still run when the command arrives, as the last eviction step may.
    fn merge_in_idle_time(&mut self, t_ns: u64) -> DevResult<()> {
        loop {
            let from = self.timer.busy_until();
            if from >= t_ns {
                return Ok(());
            }
            let Some(&lpn) = self.chains.keys().next() else { return Ok(()) };
            let (w, ready) = self.read_merged(from, lpn)?;
            self.counters.mv_idle_merges += 1;
            self.program_stream(ready, Stream::Relocate, std::iter::once(w))?;
            // A merge that left its chain (or took no time) would loop forever.
            if self.chains.contains_key(&lpn) || self.timer.busy_until() <= from {
                return Ok(());
            }
        }
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
    ///
    /// MV-FTL first packs small partial units of one region into compacted pages
    /// ([`Self::compact_small_units`]), which need no read.
    fn complete_partial_units(&mut self, t_ns: u64, ius: &mut Vec<IuWrite>) -> DevResult<u64> {
        let full = self.full;
        let shape = self.shape;
        if self.compaction_region_pages > 0 && ius.len() > 1 {
            self.compact_small_units(ius);
        }
        let mut start = t_ns;
        for w in ius.iter_mut() {
            if w.present & full == full {
                continue;
            }
            if !self.is_mapped(w.lpn) {
                // Its missing blocks are zeros: a whole unit (for MV-FTL too, so every partial
                // version has an older one).
                if self.mv {
                    w.present = full;
                }
                continue;
            }
            if self.mv && self.takes_new_version(w) {
                continue;
            }
            let (old, ready) = self.read_iu(t_ns, w.lpn, full & !w.present)?;
            self.counters.rmw_reads += 1;
            start = start.max(ready);
            if let Some(old) = old {
                for i in 0..self.layout.blocks_per_iu {
                    if w.present & (1u128 << i) == 0 {
                        w.img.copy_block_from(&shape, i as usize, &old);
                    }
                }
            }
            if self.mv {
                w.present = full;
            }
        }
        Ok(start)
    }
}

/// A compacted page being filled by [`PageMap::compact_small_units`]: its region and flags, the
/// indices of its units in the program call, and the blocks they hold.
struct OpenPage {
    region: u32,
    flags: u8,
    units: Vec<usize>,
    blocks: usize,
}

impl PageMap {
    /// WAFLASH §3.3: packs the small partial units of `ius` (at most half their blocks present,
    /// of units mapped now, each with room for one more version) that share a region
    /// (`compaction_region_pages` logical units) and flags into compacted pages, greedily in
    /// arrival order: a unit that does not fit its region's page closes it and starts another.
    /// A page that would hold a single unit is not made: its unit stays for the
    /// read-modify-write, as without compaction. Packed units leave `ius`; each page joins its
    /// end as one slot to program (lpn [`COMPACTED_LPN`], a fresh sequence number), its table
    /// waiting in `pending_compacted`.
    fn compact_small_units(&mut self, ius: &mut Vec<IuWrite>) {
        self.pending_compacted.clear();
        let full = self.full;
        let region_pages = self.compaction_region_pages;
        let mut open: Vec<OpenPage> = Vec::new();
        let mut pages: Vec<Vec<usize>> = Vec::new();
        // Older versions the call's compacted units would add, so the budget holds for all.
        let mut promised = 0u64;
        for (i, w) in ius.iter().enumerate() {
            let blocks = (w.present & full).count_ones() as usize;
            if blocks == 0
                || !self.is_small(w)
                || !self.is_mapped(w.lpn)
                || !self.room_for_version(w.lpn, promised)
                // Compacted pages are programmed after the call's other units, so a unit
                // written twice in one call is left out to keep its writes in order.
                || ius.iter().filter(|o| o.lpn == w.lpn).count() > 1
            {
                continue;
            }
            promised += 1;
            let (region, flags) = (w.lpn / region_pages, w.flags);
            match open.iter_mut().find(|p| p.region == region && p.flags == flags) {
                Some(p) if compacted::fits(&self.shape, p.units.len() + 1, p.blocks + blocks) => {
                    p.units.push(i);
                    p.blocks += blocks;
                }
                Some(p) => {
                    pages.push(std::mem::replace(&mut p.units, vec![i]));
                    p.blocks = blocks;
                }
                None => open.push(OpenPage { region, flags, units: vec![i], blocks }),
            }
        }
        pages.extend(open.into_iter().map(|p| p.units));
        pages.retain(|p| p.len() > 1);
        if pages.is_empty() {
            return;
        }
        // In the order of each page's first unit: arrival order.
        pages.sort_unstable_by_key(|p| p[0]);
        let mut packed = vec![false; ius.len()];
        let mut slots = Vec::with_capacity(pages.len());
        for page in &pages {
            self.seq += 1;
            let seq = self.seq;
            let units: Vec<Packing> = page
                .iter()
                .map(|&i| {
                    let w = &ius[i];
                    Packing {
                        lpn: w.lpn,
                        seq: w.seq,
                        flags: w.flags,
                        present: w.present,
                        img: &w.img,
                    }
                })
                .collect();
            let (img, table) = compacted::pack(&self.shape, &units);
            let flags = ius[page[0]].flags;
            self.pending_compacted.push((seq, table));
            slots.push(IuWrite { lpn: COMPACTED_LPN, seq, flags, img, present: full });
            page.iter().for_each(|&i| packed[i] = true);
        }
        let mut k = 0;
        ius.retain(|_| {
            k += 1;
            !packed[k - 1]
        });
        ius.extend(slots);
    }

    /// Programs the compacted page `w` into `slot` of line `l` (an open host line): each packed
    /// unit's newest version is now its section there, chained over its older versions (the
    /// paper's PT pointers of several units pointing at one page), and the slot stays valid
    /// while any of them uses it.
    fn place_compacted(&mut self, l: u32, slot: u32, w: IuWrite) {
        let found = self.pending_compacted.iter().position(|p| p.0 == w.seq);
        debug_assert!(found.is_some(), "a compacted slot without its table");
        let Some(i) = found else {
            // Every compacted slot is made with its table by `compact_small_units`; without
            // one the slot is written as padding rather than mapped wrong.
            self.counters.pad_slots += 1;
            return;
        };
        let (_, table) = self.pending_compacted.swap_remove(i);
        let ppa = self.layout.ppa(l, slot);
        for sec in &table.sections {
            let old = self.l2p_replace(sec.lpn, ppa);
            self.chain_push(sec.lpn, old);
            self.trims.supersede(sec.lpn, sec.seq);
        }
        self.counters.mv_compacted_pages += 1;
        self.counters.mv_compacted_units += table.sections.len() as u64;
        self.counters.host_slots += 1;
        let transient = w.flags & FLAG_TRANSIENT != 0;
        let line = &mut self.lines[l as usize];
        if line.slc && transient {
            self.counters.slc_transient_units += 1;
        }
        let st = line.store.as_mut().expect("open line has a store");
        st.put(slot, COMPACTED_LPN, w.seq, w.flags, &w.img);
        st.set_valid(slot);
        st.set_compacted(slot, table);
        // No NAND image file here: MV-FTL refuses `backing` (its slot header has no field for
        // a partial version's bitmap, nor for a compacted page's table).
        line.valid += 1;
        if transient {
            line.transient += 1;
        }
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

    fn read_iu(&mut self, t_ns: u64, lpn: u32, need: u128) -> DevResult<(Option<IuImage>, u64)> {
        let Some(ppa) = self.l2p_get(lpn) else { return Ok((None, t_ns)) };
        if self.mv {
            let (w, done, extra) = self.read_versions(t_ns, lpn, ppa, need)?;
            self.counters.mv_extra_reads += extra;
            return Ok((Some(w.img), done));
        }
        let done = self.read_slot(t_ns, ppa);
        let (l, s) = self.layout.split_ppa(ppa);
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
        // MV-FTL's merges fill the idle gap before `t_ns`; background GC starts at `t_ns`
        // (it always has), so it goes after them or it would leave them no idle time.
        if self.mv && self.mv_idle_merge && !self.chains.is_empty() && self.timer.idle_at(t_ns) {
            self.merge_in_idle_time(t_ns)?;
        }
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
        let bypass = self.idle_eviction
            && self.open[Stream::HostSlc as usize].is_none()
            && self.free_slc.is_empty();
        let stream =
            if self.layout.slc_lines == 0 || bypass { Stream::HostDense } else { Stream::HostSlc };
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

    /// MV-FTL at WAFLASH Fig. 6's geometry: 4 KiB units of eight 512-byte sectors, payload
    /// `full`, no host metadata.
    fn mv_ftl() -> PageMap {
        let mut cfg = SsdConfig::preset("tiny").unwrap();
        cfg.firmware.block_bytes = 512;
        cfg.firmware.md_bytes = 0;
        cfg.firmware.ftl_policy = FtlPolicy::Mv;
        cfg.validate().unwrap();
        let layout = Layout::new(&cfg).unwrap();
        let shape =
            Shape { mode: PayloadMode::Full, block_bytes: 512, blocks_per_iu: 8, md_bytes: 0 };
        let ftl = PageMap::new(&cfg, layout, shape);
        assert!(ftl.mv);
        ftl
    }

    /// Sector `i` of version `v`: 512 bytes of `v * 16 + i`.
    fn sector(v: u8, i: usize) -> Vec<u8> {
        vec![v * 16 + i as u8; 512]
    }

    /// Programs version `v` of `lpn` holding the sectors of `present` (a write-back unit).
    fn write(ftl: &mut PageMap, lpn: u32, v: u8, present: u128) {
        let shape = ftl.shape;
        let mut img = IuImage::zeroed(&shape);
        for i in 0..8 {
            if present & (1 << i) != 0 {
                img.put_block(&shape, i, &sector(v, i), None);
            }
        }
        let seq = ftl.next_seq();
        ftl.program(0, &mut vec![IuWrite { lpn, seq, flags: 0, img, present }]).unwrap();
    }

    /// Reads the sectors `need` of `lpn`; returns each sector's first byte (0 when unread).
    fn read(ftl: &mut PageMap, lpn: u32, need: u128) -> Vec<u8> {
        let shape = ftl.shape;
        let (img, _) = ftl.read_iu(0, lpn, need).unwrap();
        let img = img.expect("mapped");
        let mut buf = vec![0u8; 512];
        (0..8)
            .map(|i| {
                if need & (1 << i) == 0 {
                    return 0;
                }
                img.get_block(&shape, i, &mut buf, None);
                assert!(buf.iter().all(|&b| b == buf[0]), "sector {i} is torn");
                buf[0]
            })
            .collect()
    }

    /// What sectors `need` of a unit whose versions are `layers` (oldest first: version and
    /// sector bitmap) read as.
    fn expected(layers: &[(u8, u128)], need: u128) -> Vec<u8> {
        (0..8)
            .map(|i| {
                if need & (1 << i) == 0 {
                    return 0;
                }
                let v = layers.iter().rev().find(|&&(_, bits)| bits & (1 << i) != 0);
                v.map_or(0, |&(v, _)| sector(v, i)[0])
            })
            .collect()
    }

    /// Total valid slots over all lines.
    fn valid_slots(ftl: &PageMap) -> u32 {
        ftl.lines.iter().map(|l| l.valid).sum()
    }

    /// WAFLASH Fig. 6's nine unaligned write patterns (sector 0 first).
    const FIG6: [[u8; 8]; 9] = [
        [1, 1, 1, 1, 1, 1, 1, 0],
        [0, 1, 1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 1, 0, 0],
        [0, 1, 1, 1, 1, 1, 1, 0],
        [0, 0, 1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 0, 0, 0],
        [0, 1, 1, 1, 1, 1, 0, 0],
        [0, 0, 1, 1, 1, 1, 1, 0],
        [0, 0, 0, 1, 1, 1, 1, 1],
    ];

    fn bits(pattern: &[u8; 8]) -> u128 {
        pattern.iter().enumerate().map(|(i, &b)| (b as u128) << i).sum()
    }

    #[test]
    fn each_fig6_pattern_is_a_new_version_read_back_merged() {
        for (n, p) in FIG6.iter().enumerate() {
            let mut ftl = mv_ftl();
            let pat = bits(p);
            write(&mut ftl, 3, 1, 0xff);
            write(&mut ftl, 3, 2, pat);
            let c = ftl.counters();
            assert_eq!((c.mv_versions_written, c.rmw_reads), (1, 0), "pattern {n}: no read");
            assert_eq!((c.mv_chained_units, c.mv_chain_versions), (1, 2), "pattern {n}");
            assert_eq!(valid_slots(&ftl), 2, "pattern {n}: both versions stay valid");
            let (l, s) = ftl.layout.split_ppa(ftl.l2p_get(3).unwrap());
            let oob = ftl.lines[l as usize].store.as_ref().unwrap().partial_of(s);
            assert_eq!(oob, Some(pat), "pattern {n}: the OOB keeps the pattern");
            assert_eq!(read(&mut ftl, 3, 0xff), expected(&[(1, 0xff), (2, pat)], 0xff));
            assert_eq!(ftl.counters().mv_extra_reads, 1, "pattern {n}: the old version read");
        }
    }

    #[test]
    fn a_read_needs_the_older_version_only_for_sectors_the_newest_lacks() {
        // §3.2's example: the newest version has Pattern 3 (sectors 1-6).
        let mut ftl = mv_ftl();
        let pat = bits(&FIG6[3]);
        write(&mut ftl, 0, 1, 0xff);
        write(&mut ftl, 0, 2, pat);
        let layers = [(1, 0xff), (2, pat)];
        // Sectors 1-3: the newest version alone.
        assert_eq!(read(&mut ftl, 0, 0b1110), expected(&layers, 0b1110));
        assert_eq!(ftl.counters().mv_extra_reads, 0);
        // Sectors 0-3: sector 0 from the older version, 1-3 from the newest.
        assert_eq!(read(&mut ftl, 0, 0b1111), expected(&layers, 0b1111));
        assert_eq!(ftl.counters().mv_extra_reads, 1);
        // A third version (Pattern 8, sectors 3-7): sector 0 from the first, 1-2 from the
        // second, 3-7 from the third; three versions read.
        let pat8 = bits(&FIG6[8]);
        write(&mut ftl, 0, 3, pat8);
        let layers = [(1, 0xff), (2, pat), (3, pat8)];
        assert_eq!(read(&mut ftl, 0, 0xff), expected(&layers, 0xff));
        assert_eq!(ftl.counters().mv_extra_reads, 3);
        assert_eq!(ftl.counters().mv_chain_versions, 3);
        // Sectors 2-7: the newest two, not the full one at the bottom.
        assert_eq!(read(&mut ftl, 0, 0xfc), expected(&layers, 0xfc));
        assert_eq!(ftl.counters().mv_extra_reads, 4);
    }

    #[test]
    fn small_partial_units_and_units_never_written_take_no_version() {
        let mut ftl = mv_ftl();
        // Never written: a whole unit with zeros in the missing sectors.
        write(&mut ftl, 5, 1, 0b0111_1111);
        assert_eq!(ftl.counters().mv_versions_written, 0);
        assert_eq!(read(&mut ftl, 5, 0xff), expected(&[(1, 0b0111_1111)], 0xff));
        // Half a unit: the read-modify-write.
        write(&mut ftl, 5, 2, 0b1111_0000);
        let c = ftl.counters();
        assert_eq!((c.mv_versions_written, c.rmw_reads, c.mv_chained_units), (0, 1, 0));
        assert_eq!(valid_slots(&ftl), 1);
        let layers = [(1, 0b0111_1111), (2, 0b1111_0000)];
        assert_eq!(read(&mut ftl, 5, 0xff), expected(&layers, 0xff));
    }

    #[test]
    fn a_full_write_or_a_trim_invalidates_every_version() {
        let mut ftl = mv_ftl();
        write(&mut ftl, 7, 1, 0xff);
        write(&mut ftl, 7, 2, bits(&FIG6[0]));
        write(&mut ftl, 7, 3, bits(&FIG6[1]));
        assert_eq!(ftl.counters().mv_chain_versions, 3);
        assert_eq!(valid_slots(&ftl), 3);
        write(&mut ftl, 7, 4, 0xff);
        let c = ftl.counters();
        assert_eq!((c.mv_chained_units, c.mv_chain_versions), (0, 0));
        assert!(ftl.chains.is_empty());
        assert_eq!(valid_slots(&ftl), 1, "only the full write is valid");
        assert_eq!(read(&mut ftl, 7, 0xff), expected(&[(4, 0xff)], 0xff));
        // A chain again, then a trim.
        write(&mut ftl, 7, 5, bits(&FIG6[4]));
        assert_eq!(valid_slots(&ftl), 2);
        let seq = ftl.next_seq();
        ftl.trim(7, seq);
        assert!(!ftl.is_mapped(7) && ftl.chains.is_empty());
        assert_eq!(valid_slots(&ftl), 0);
        assert_eq!(ftl.counters().mv_chain_versions, 0);
    }

    #[test]
    fn recovery_rebuilds_chains_and_a_merge_outranks_its_versions() {
        let mut ftl = mv_ftl();
        // Unit 1: three versions; unit 2: a chain merged in idle time, then a new version;
        // unit 3: a chain, then trimmed, then written whole.
        write(&mut ftl, 1, 1, 0xff);
        write(&mut ftl, 1, 2, bits(&FIG6[2]));
        write(&mut ftl, 1, 3, bits(&FIG6[7]));
        write(&mut ftl, 2, 1, 0xff);
        write(&mut ftl, 2, 2, bits(&FIG6[5]));
        write(&mut ftl, 3, 1, 0xff);
        write(&mut ftl, 3, 2, bits(&FIG6[6]));
        let seq = ftl.next_seq();
        ftl.trim(3, seq);
        write(&mut ftl, 3, 3, 0b0000_0011);
        // Idle: one chain merged per call.
        let idle = ftl.timer.busy_until() + 1;
        ftl.background(idle).unwrap();
        let c = ftl.counters();
        assert_eq!((c.mv_merges, c.mv_idle_merges, c.mv_chained_units), (1, 1, 1));
        let merged = if ftl.chains.contains_key(&1) { 2 } else { 1 };
        let want = |lpn: u32| match lpn {
            1 => expected(&[(1, 0xff), (2, bits(&FIG6[2])), (3, bits(&FIG6[7]))], 0xff),
            2 => expected(&[(1, 0xff), (2, bits(&FIG6[5]))], 0xff),
            _ => expected(&[(3, 0b0000_0011)], 0xff),
        };
        for lpn in 1..=3 {
            assert_eq!(read(&mut ftl, lpn, 0xff), want(lpn), "unit {lpn} before the crash");
        }
        let before = (ftl.chains.clone(), valid_slots(&ftl), ftl.counters().mv_chain_versions);
        ftl.power_loss();
        let steps = ftl.recover(idle + 1);
        assert_eq!(steps.iter().map(|s| s.name).collect::<Vec<_>>(), super::super::recover::STEPS);
        assert_eq!(
            (ftl.chains.clone(), valid_slots(&ftl), ftl.counters().mv_chain_versions),
            before,
            "recovery rebuilt the same chains (unit {merged} merged)"
        );
        for lpn in 1..=3 {
            assert_eq!(read(&mut ftl, lpn, 0xff), want(lpn), "unit {lpn} after recovery");
        }
    }

    #[test]
    fn gc_merges_a_chain_whose_versions_share_the_victim_into_one_unit() {
        let mut ftl = mv_ftl();
        let (p2, p0) = (bits(&FIG6[2]), bits(&FIG6[0]));
        write(&mut ftl, 1, 1, 0xff);
        write(&mut ftl, 1, 2, p2);
        write(&mut ftl, 1, 3, p0);
        let victim = ftl.layout.split_ppa(ftl.l2p_get(1).unwrap()).0;
        let per_line = ftl.layout.slots_per_line(false);
        // Fill the rest of the line (and a little more, so it closes) with whole units.
        for lpn in 100..100 + per_line {
            write(&mut ftl, lpn, 4, 0xff);
        }
        assert_eq!(ftl.lines[victim as usize].state, LineState::Closed);
        let valid_before = valid_slots(&ftl);
        let moved = ftl.relocate_and_erase(ftl.timer.busy_until(), victim).unwrap();
        // Three versions of unit 1 became one unit; every other valid slot moved once.
        let others = per_line as u64 - 3;
        assert_eq!(moved, others + 1);
        assert_eq!(ftl.counters().mv_merges, 1);
        assert!(ftl.chains.is_empty() && ftl.counters().mv_chain_versions == 0);
        assert_eq!(valid_slots(&ftl), valid_before - 2);
        assert_eq!(ftl.lines[victim as usize].state, LineState::Free);
        let layers = [(1, 0xff), (2, p2), (3, p0)];
        assert_eq!(read(&mut ftl, 1, 0xff), expected(&layers, 0xff));
        assert_eq!(read(&mut ftl, 100, 0xff), expected(&[(4, 0xff)], 0xff));
        let (l, s) = ftl.layout.split_ppa(ftl.l2p_get(1).unwrap());
        assert_eq!(ftl.lines[l as usize].store.as_ref().unwrap().partial_of(s), None);
    }

    /// Programs versions of several units in one call (one write-back group): `(lpn, version,
    /// sector bitmap)` each.
    fn write_group(ftl: &mut PageMap, units: &[(u32, u8, u128)]) {
        let shape = ftl.shape;
        let mut ius = Vec::new();
        for &(lpn, v, present) in units {
            let mut img = IuImage::zeroed(&shape);
            for i in 0..8 {
                if present & (1 << i) != 0 {
                    img.put_block(&shape, i, &sector(v, i), None);
                }
            }
            let seq = ftl.next_seq();
            ius.push(IuWrite { lpn, seq, flags: 0, img, present });
        }
        ftl.program(0, &mut ius).unwrap();
    }

    /// Slots programmed so far (host and relocation, padding included).
    fn slots_programmed(ftl: &PageMap) -> u64 {
        ftl.lines.iter().filter(|l| l.store.is_some()).map(|l| l.wp as u64).sum()
    }

    /// WAFLASH §3.3's example (Fig. 7): units 6, 7 and 8 written before, then small partial
    /// writes of all three in one write-back group: one page program, no read, and each unit's
    /// newest version is its section of the one compacted page, chained over the old one.
    /// Unit 8's sectors are not contiguous (two runs). Every later write, trim or merge that
    /// supersedes a section releases the page, which stays valid until the last one does.
    #[test]
    fn three_small_partial_writes_cost_one_page_program_and_no_read() {
        let mut ftl = mv_ftl();
        write_group(&mut ftl, &[(6, 1, 0xff), (7, 1, 0xff), (8, 1, 0xff)]);
        let (p6, p7, p8) = (0b0000_0011, 0b0000_0100, 0b1000_0001);
        let before = slots_programmed(&ftl);
        write_group(&mut ftl, &[(6, 2, p6), (7, 2, p7), (8, 2, p8)]);
        assert_eq!(slots_programmed(&ftl) - before, 1, "one page program");
        let c = ftl.counters();
        assert_eq!((c.rmw_reads, c.mv_versions_written), (0, 0), "no read, no plain version");
        assert_eq!((c.mv_compacted_pages, c.mv_compacted_units), (1, 3));
        assert_eq!((c.mv_chained_units, c.mv_chain_versions), (3, 6));
        let ppa = ftl.l2p_get(6).unwrap();
        assert_eq!((ftl.l2p_get(7), ftl.l2p_get(8)), (Some(ppa), Some(ppa)), "shared pointers");
        assert_eq!(valid_slots(&ftl), 4, "three old versions and the compacted page");
        for (lpn, p) in [(6, p6), (7, p7), (8, p8)] {
            let layers = [(1, 0xff), (2, p)];
            // The section alone serves the sectors it holds; the rest come from the old version.
            assert_eq!(read(&mut ftl, lpn, p), expected(&layers, p), "unit {lpn}");
            assert_eq!(read(&mut ftl, lpn, 0xff), expected(&layers, 0xff), "unit {lpn}");
        }
        assert_eq!(ftl.counters().mv_extra_reads, 3, "one older version per whole read");
        // A whole write of 6, a trim of 7, a merge of 8 in idle time: the page goes stale with
        // the last of them.
        write(&mut ftl, 6, 3, 0xff);
        assert_eq!(valid_slots(&ftl), 4, "6's old version went, the page stays");
        let seq = ftl.next_seq();
        ftl.trim(7, seq);
        assert_eq!(valid_slots(&ftl), 3);
        let (l, s) = ftl.layout.split_ppa(ppa);
        assert!(ftl.lines[l as usize].store.as_ref().unwrap().is_valid(s));
        let idle = ftl.timer.busy_until() + 1;
        ftl.background(idle).unwrap();
        assert!(!ftl.lines[l as usize].store.as_ref().unwrap().is_valid(s), "page stale");
        assert_eq!(valid_slots(&ftl), 2, "6 and the merged 8");
        assert_eq!(read(&mut ftl, 8, 0xff), expected(&[(1, 0xff), (2, p8)], 0xff));
        assert_eq!(read(&mut ftl, 6, 0xff), expected(&[(3, 0xff)], 0xff));
        let c = ftl.counters();
        assert_eq!((c.mv_chained_units, c.mv_chain_versions), (0, 0));
    }

    /// Packing is greedy in arrival order: a unit that does not fit its region's page starts
    /// another, units of different regions never share a page, and a unit left alone takes the
    /// read-modify-write. Payload `full` bytes come back exactly through every path.
    #[test]
    fn what_does_not_fit_starts_another_page_and_regions_pack_apart() {
        let mut ftl = mv_ftl();
        ftl.compaction_region_pages = 4;
        let units = [0u32, 1, 2, 5, 6, 9];
        let whole: Vec<(u32, u8, u128)> = units.iter().map(|&l| (l, 1, 0xff)).collect();
        write_group(&mut ftl, &whole);
        // Region 0: 0 and 1 hold four sectors each, which with the table do not fit one page,
        // so 0's page closes with 0 alone (read-modify-write) and 1 and 2 share the next.
        // Region 1: 5 and 6, a sector each. Region 2: 9 alone (read-modify-write).
        let small = [
            (0, 2, 0x0f),
            (5, 2, 0x01),
            (1, 2, 0xf0),
            (9, 2, 0x10),
            (2, 2, 0b0101_0100),
            (6, 2, 0x80),
        ];
        write_group(&mut ftl, &small);
        let c = ftl.counters();
        assert_eq!((c.mv_compacted_pages, c.mv_compacted_units, c.rmw_reads), (2, 4, 2));
        assert_eq!(ftl.l2p_get(1), ftl.l2p_get(2));
        assert_eq!(ftl.l2p_get(5), ftl.l2p_get(6));
        assert_ne!(ftl.l2p_get(1), ftl.l2p_get(5));
        assert!(!ftl.chains.contains_key(&0) && !ftl.chains.contains_key(&9), "RMW: whole");
        for &(lpn, v, p) in &small {
            assert_eq!(read(&mut ftl, lpn, 0xff), expected(&[(1, 0xff), (v, p)], 0xff));
        }
        // A second compaction over the first: unit 1's newest version is a section again, over
        // its compacted one; both sections serve a read.
        write_group(&mut ftl, &[(1, 3, 0x01), (2, 3, 0x02)]);
        assert_eq!(ftl.counters().mv_compacted_pages, 3);
        assert_eq!(ftl.chains[&1].len(), 2);
        let layers = [(1, 0xff), (2, 0xf0), (3, 0x01)];
        assert_eq!(read(&mut ftl, 1, 0xff), expected(&layers, 0xff));
        // 0 and 9 read-modify-written (one slot each); 1, 2, 5 and 6 keep their old versions;
        // the three compacted pages are each one slot.
        assert_eq!(valid_slots(&ftl), 2 + 4 + 3);
    }

    /// GC relocating a compacted page merges every unit still using a section of it (and only
    /// those), so the page goes stale and the victim is erased with every unit's data intact;
    /// recovery after a power loss rebuilds the same chains and shared pointers first.
    #[test]
    fn gc_merges_the_units_of_a_compacted_page_and_recovery_rebuilds_it() {
        let mut ftl = mv_ftl();
        write_group(&mut ftl, &[(1, 1, 0xff), (2, 1, 0xff), (3, 1, 0xff)]);
        write_group(&mut ftl, &[(1, 2, 0x03), (2, 2, 0x0c), (3, 2, 0x30)]);
        // Unit 3 is written whole again: the page keeps two users.
        write(&mut ftl, 3, 3, 0xff);
        let page = ftl.l2p_get(1).unwrap();
        let victim = ftl.layout.split_ppa(page).0;
        let per_line = ftl.layout.slots_per_line(false);
        for lpn in 100..100 + per_line {
            write(&mut ftl, lpn, 4, 0xff);
        }
        let want = |lpn: u32| match lpn {
            1 => expected(&[(1, 0xff), (2, 0x03)], 0xff),
            2 => expected(&[(1, 0xff), (2, 0x0c)], 0xff),
            _ => expected(&[(3, 0xff)], 0xff),
        };
        let before = (ftl.chains.clone(), valid_slots(&ftl), ftl.counters().mv_chain_versions);
        ftl.power_loss();
        let idle = ftl.timer.busy_until() + 1;
        ftl.recover(idle);
        let after = (ftl.chains.clone(), valid_slots(&ftl), ftl.counters().mv_chain_versions);
        assert_eq!(after, before, "recovery rebuilt the chains over the compacted page");
        assert_eq!((ftl.l2p_get(1), ftl.l2p_get(2)), (Some(page), Some(page)));
        for lpn in 1..=3 {
            assert_eq!(read(&mut ftl, lpn, 0xff), want(lpn), "unit {lpn} after recovery");
        }
        assert_eq!(ftl.lines[victim as usize].state, LineState::Closed);
        let merges = ftl.counters().mv_merges;
        ftl.relocate_and_erase(ftl.timer.busy_until(), victim).unwrap();
        assert_eq!(ftl.counters().mv_merges - merges, 2, "the page's two users merged");
        assert_eq!(ftl.lines[victim as usize].state, LineState::Free);
        assert!(ftl.chains.is_empty());
        for lpn in 1..=3 {
            assert_eq!(read(&mut ftl, lpn, 0xff), want(lpn), "unit {lpn} after GC");
        }
    }
}
