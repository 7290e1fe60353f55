//! The SSD firmware: host interface -> write buffer -> FTL -> (SLC cache, GC) -> NAND.
//!
//! [`Controller`] handles one command at a time (the device serialises them) and computes,
//! when a command is submitted, the time it completes: the NAND timelines, the submission
//! queue, the host link and the buffer's occupancy all move forward as the command is
//! processed. Effects on the media are applied at submission; see docs/ssd.md for what that
//! means for crashes.
//!
//! One file per role: [`hostif`] (submission queue, host link), [`buffer`] (write buffer and
//! its replacement policy), [`ftl`] (the page map), [`gc`] (victim choice, collection),
//! [`slc`] (the SLC cache's evictor), [`recover`] (power loss and recovery), [`convert`]
//! (ScalaAFA's conversion vendor command and the parity engine), [`womv`] (WOM-v codes for
//! QLC: code tables, coded pages, analytic models). Beside the page map, two
//! other mappings implement [`ftl::Ftl`]: [`zoned`] (NVMe ZNS) and [`inplace`] (media
//! written in place, such as 3D XPoint).

pub mod buffer;
pub mod convert;
pub mod ftl;
pub mod gc;
pub mod hostif;
pub mod inplace;
pub mod recover;
pub mod slc;
pub mod trims;
pub mod womv;
pub mod zoned;

use flashrig_blockdev::zones::ZoneTable;
use flashrig_blockdev::{
    DevError, DevResult, WriteHints, ZoneCommand, ZoneGeometry, ZoneReply, ZoneState,
};

use self::buffer::{BufEntry, ChipView, IdleChips, Lru, WriteBuffer};
use self::ftl::{Ftl, IuWrite, PageMap, RecoveryStep};
use self::hostif::{HostIf, Times};
use crate::config::{BufferPolicy, FtlPolicy, SsdConfig};
use crate::media::store::{IuImage, Shape, FLAG_TRANSIENT};
use crate::media::Layout;

/// Host-side counters of the controller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostCounters {
    pub read_cmds: u64,
    pub write_cmds: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    pub trims: u64,
    pub trim_bytes: u64,
    pub fua_writes: u64,
    /// Mapping units read entirely from the buffer.
    pub buffer_read_hits: u64,
    /// Mapping units read partly from the buffer, partly from NAND.
    pub buffer_partial_read_hits: u64,
    /// Writes merged into a unit already buffered.
    pub buffer_write_hits: u64,
    /// Units written back from the buffer.
    pub buffer_writebacks: u64,
    /// Writes that waited for buffer space.
    pub buffer_waits: u64,
    /// Units written back while partial (some blocks never written to the buffer entry):
    /// WAFLASH Fig. 11's partial-page writes to flash, whether or not they needed a read.
    pub partial_writebacks: u64,
    /// Buffered partial units that later writes filled up (WAFLASH Fig. 14d).
    pub buffer_partial_to_full: u64,
    /// Partial units in the buffer now (a gauge: WAFLASH Fig. 10's share is this over
    /// the buffered units).
    pub buffer_partial_units: u64,
    pub power_losses: u64,
}

/// One mapping unit's part of a request: the unit, the first block inside it, the number of
/// blocks, and where they start in the request (in blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    lpn: u32,
    first: u32,
    count: u32,
    offset: usize,
}

fn pieces(lba: u64, blocks: u64, bpi: u32) -> impl Iterator<Item = Piece> {
    let bpi64 = bpi as u64;
    let mut next = lba;
    let end = lba + blocks;
    std::iter::from_fn(move || {
        if next >= end {
            return None;
        }
        let lpn = next / bpi64;
        let first = (next % bpi64) as u32;
        let count = (bpi64 - first as u64).min(end - next) as u32;
        let p = Piece { lpn: lpn as u32, first, count, offset: (next - lba) as usize };
        next += count as u64;
        Some(p)
    })
}

/// Bits `first..first + count` set (host blocks of a mapping unit).
pub(crate) fn mask(first: u32, count: u32) -> u128 {
    let ones = if count >= 128 { u128::MAX } else { (1u128 << count) - 1 };
    ones << first
}

pub struct Controller {
    pub layout: Layout,
    shape: Shape,
    pub(crate) hostif: HostIf,
    buffer: Box<dyn WriteBuffer>,
    /// Buffer capacity in mapping units (0: write through).
    buffer_cap: usize,
    /// Resident units at which write-back starts.
    flush_at: usize,
    /// Space held by units being written back: when each program completes.
    draining: Times,
    /// The latest completion of any program issued so far (what a flush waits for).
    last_program_done_ns: u64,
    /// `firmware.buffer_merge`: whether a unit waits in the buffer for later writes to merge.
    merge: bool,
    plp: bool,
    /// Scratch: the units being written back, and their program requests (reused so the
    /// write path does not allocate).
    group: Vec<BufEntry>,
    ius: Vec<IuWrite>,
    pub ftl: Box<dyn Ftl>,
    pub counters: HostCounters,
    /// The parity engine of the conversion command, and its counters.
    pub engine: convert::Engine,
    /// What start-up from a NAND image file did (devices with a `backing` file).
    pub start_report: Option<Vec<RecoveryStep>>,
    /// The zone state machine of a zoned namespace (`None`: the conventional interface).
    pub zones: Option<ZoneTable>,
}

impl Controller {
    pub fn new(cfg: &SsdConfig) -> Result<Controller, String> {
        cfg.validate()?;
        let layout = Layout::new(cfg)?;
        let f = &cfg.firmware;
        let shape = Shape {
            mode: cfg.payload,
            block_bytes: f.block_bytes as usize,
            blocks_per_iu: layout.blocks_per_iu as usize,
            md_bytes: f.md_bytes as usize,
        };
        let buffer_cap = (f.buffer_bytes / f.iu_bytes as u64) as usize;
        let flush_at = (buffer_cap * f.buffer_flush_percent as usize).div_ceil(100).max(1);
        let full = mask(0, layout.blocks_per_iu);
        let buffer: Box<dyn WriteBuffer> = match f.buffer_policy {
            BufferPolicy::Lru => Box::new(Lru::new(buffer_cap)),
            BufferPolicy::PcLru => {
                // §3.3's batch destaging feeds MV-FTL's compaction, so it is on only when the
                // FTL compacts.
                let batch = (f.ftl_policy == FtlPolicy::Mv && f.compaction_region_pages > 0)
                    .then_some(buffer::pclru::BatchDestage {
                        region_pages: f.compaction_region_pages,
                        block_bytes: f.block_bytes,
                        unit_bytes: f.iu_bytes,
                    });
                Box::new(buffer::pclru::PcLru::new(buffer_cap, full, batch))
            }
            BufferPolicy::Mca => Box::new(buffer::mca::Mca::new(buffer_cap, full)),
        };
        let zones = match (&cfg.zoned, layout.zones) {
            (Some(z), Some(zl)) => Some(
                ZoneTable::new(zone_geometry(z, &zl), zl.num_zones)
                    .map_err(|e| format!("zoned: {e}"))?,
            ),
            _ => None,
        };
        let mut ftl: Box<dyn Ftl> = if zones.is_some() {
            Box::new(zoned::ZoneMap::new(cfg, layout.clone(), shape))
        } else if cfg.womv.is_some() {
            Box::new(womv::device::WomMap::new(cfg, layout.clone(), shape)?)
        } else if f.ftl_policy == FtlPolicy::InPlace {
            Box::new(inplace::InPlaceMap::new(cfg, layout.clone(), shape))
        } else {
            Box::new(PageMap::new(cfg, layout.clone(), shape))
        };
        let start_report = match &cfg.backing {
            Some(path) => Some(ftl.attach_image(path)?),
            None => None,
        };
        Ok(Controller {
            hostif: HostIf::new(f.queue_depth, f.host_mb_per_s, f.command_ns)
                .with_caps(f.host_read_mb_per_s, f.host_write_mb_per_s),
            buffer,
            buffer_cap,
            flush_at,
            draining: Times::default(),
            last_program_done_ns: 0,
            merge: f.buffer_merge,
            // A device kept in an image file belongs to a process that can be killed, and a
            // killed process has no capacitors to write its buffer back: flushes and FUA
            // writes then really write, whatever the preset's power-loss protection.
            plp: f.plp && cfg.backing.is_none(),
            group: Vec::new(),
            ius: Vec::new(),
            ftl,
            start_report,
            zones,
            counters: HostCounters::default(),
            engine: convert::Engine::new(f.convert_engine_ns_per_kib),
            layout,
            shape,
        })
    }

    fn full_mask(&self) -> u128 {
        mask(0, self.layout.blocks_per_iu)
    }

    fn block_bytes(&self) -> usize {
        self.layout.block_bytes as usize
    }

    fn md_bytes(&self) -> usize {
        self.shape.md_bytes
    }

    /// Writes `data` (whole blocks) at `lba`; returns when the command completes. On a zoned
    /// namespace the zone table first checks the write against the zone's write pointer.
    pub fn write(
        &mut self,
        t0: u64,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<u64> {
        if let Some(z) = self.zones.as_mut() {
            z.write(lba, (data.len() / self.layout.block_bytes as usize) as u64)?;
        }
        self.write_accepted(t0, lba, data, md, hints)
    }

    /// The write path after any zone check.
    fn write_accepted(
        &mut self,
        t0: u64,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<u64> {
        self.ftl.background(t0)?;
        let t = self.hostif.admit(t0);
        let t = self.hostif.to_device(t, data.len());
        let bs = self.block_bytes();
        let flags = if hints.transient { FLAG_TRANSIENT } else { 0 };
        let fua = hints.fua && !self.plp;
        // A preconditioning write takes its buffer victims in stack order, as a flush does,
        // whatever the chips are doing (see `WriteHints::precondition`).
        let in_order = hints.precondition;
        let mut done = t;
        for p in pieces(lba, (data.len() / bs) as u64, self.layout.blocks_per_iu) {
            let d = &data[p.offset * bs..(p.offset + p.count as usize) * bs];
            let m =
                md.map(|m| &m[p.offset * self.md_bytes()..][..p.count as usize * self.md_bytes()]);
            done = done.max(self.write_piece(t, p, d, m, flags, fua, in_order)?);
        }
        if fua && self.zones.is_some() {
            // The zone's staged units are durable only once saved.
            done = done.max(self.ftl.sync_staged(t));
        }
        self.counters.write_cmds += 1;
        self.counters.write_bytes += data.len() as u64;
        if hints.fua {
            self.counters.fua_writes += 1;
        }
        self.hostif.complete(done);
        Ok(done)
    }

    // One piece of a write command: where it goes, its data, and how the command asked for it
    // (hint flags, FUA, preconditioning), each spelled out at the three call sites.
    #[allow(clippy::too_many_arguments)]
    fn write_piece(
        &mut self,
        t: u64,
        p: Piece,
        data: &[u8],
        md: Option<&[u8]>,
        flags: u8,
        fua: bool,
        in_order: bool,
    ) -> DevResult<u64> {
        let shape = self.shape;
        let bs = self.block_bytes();
        let mdb = self.md_bytes();
        let seq = self.ftl.next_seq();
        let put = |img: &mut IuImage| {
            for i in 0..p.count as usize {
                let m = md.map(|m| &m[i * mdb..(i + 1) * mdb]);
                img.put_block(&shape, p.first as usize + i, &data[i * bs..(i + 1) * bs], m);
            }
        };
        let bits = mask(p.first, p.count);
        if self.buffer_cap == 0 {
            let mut img = IuImage::zeroed(&shape);
            put(&mut img);
            let e = BufEntry { lpn: p.lpn, present: bits, seq, flags, img };
            self.group.push(e);
            return self.write_back(t);
        }
        if !self.merge {
            // No merging (`firmware.buffer_merge = false`): the unit goes to NAND at once,
            // read-modify-written on its own, and holds a place in the buffer until its
            // program is done. The write is acknowledged once it has that place (with power-loss
            // protection, which the configuration requires), or when programmed with FUA.
            let room = self.make_room(t, in_order)?;
            let mut img = IuImage::zeroed(&shape);
            put(&mut img);
            self.group.push(BufEntry { lpn: p.lpn, present: bits, seq, flags, img });
            let programmed = self.write_back(room)?;
            self.draining.push(programmed);
            return Ok(if fua { programmed } else { room });
        }
        let mut done = t;
        let full = self.full_mask();
        if let Some(e) = self.buffer.touch(p.lpn) {
            put(&mut e.img);
            let was_partial = e.present != full;
            e.present |= bits;
            e.seq = seq;
            e.flags = flags;
            let now_full = e.present == full;
            self.counters.buffer_write_hits += 1;
            if was_partial && now_full {
                self.counters.buffer_partial_to_full += 1;
                self.counters.buffer_partial_units -= 1;
            }
            self.buffer.wrote(p.lpn, was_partial);
        } else {
            done = done.max(self.make_room(t, in_order)?);
            let mut img = IuImage::zeroed(&shape);
            put(&mut img);
            if bits != full {
                self.counters.buffer_partial_units += 1;
            }
            self.buffer.insert(BufEntry { lpn: p.lpn, present: bits, seq, flags, img });
        }
        if fua {
            let e = self.buffer.remove(p.lpn).expect("just buffered");
            self.left_buffer(&e);
            self.group.push(e);
            done = done.max(self.write_back(t)?);
        }
        Ok(done)
    }

    /// Makes room for one more unit in the buffer at `t`: starts write-back when occupancy
    /// reaches the flush mark, and waits for space when the buffer is full. Returns when the
    /// space is available. With `in_order` (a preconditioning write) the victims are taken in
    /// the stack's order rather than by the policy's view of the chips.
    fn make_room(&mut self, t: u64, in_order: bool) -> DevResult<u64> {
        self.draining.drop_until(t);
        let per = self.layout.slots_per_page as usize;
        // Units not yet being written back stay below the flush mark; the rest of the buffer
        // holds units whose programs are in flight.
        while !self.buffer.is_empty() && self.buffer.len() >= self.flush_at {
            let n =
                if in_order { self.take_victims_in_order(per) } else { self.take_victims(t, per) };
            let done = self.write_back(t)?;
            for _ in 0..n {
                self.draining.push(done);
            }
        }
        if self.buffer.len() + self.draining.len() >= self.buffer_cap {
            self.counters.buffer_waits += 1;
            let free_at = self.draining.pop_earliest().expect("a full buffer is draining");
            return Ok(t.max(free_at));
        }
        Ok(t)
    }

    /// Moves up to `n` victims of the replacement policy into the write-back group, chosen
    /// with the chips as they are at `t`.
    fn take_victims(&mut self, t: u64, n: usize) -> usize {
        self.take_group(n, Some(t))
    }

    /// Victims for a flush, a power loss or a preconditioning write: the stack's order, with no
    /// regard to the chips.
    fn take_victims_in_order(&mut self, n: usize) -> usize {
        self.take_group(n, None)
    }

    /// Moves up to `n` victims into the write-back group, with the chips as they are at `t`
    /// (idle chips without one), and then any batch-mates the policy still holds, so a batch
    /// reaches the FTL in one group (WAFLASH §3.3). Returns how many were moved.
    fn take_group(&mut self, n: usize, t: Option<u64>) -> usize {
        let mut taken = 0;
        while taken < n || self.buffer.batch_pending() > 0 {
            let victim = match t {
                Some(t_ns) => self.buffer.pop_victim(&FlashChips { ftl: self.ftl.as_ref(), t_ns }),
                None => self.buffer.pop_victim(&IdleChips),
            };
            let Some(e) = victim else { break };
            self.left_buffer(&e);
            self.group.push(e);
            taken += 1;
        }
        taken
    }

    /// Keeps the partial-unit gauge as an entry leaves the buffer.
    fn left_buffer(&mut self, e: &BufEntry) {
        if e.present != self.full_mask() {
            self.counters.buffer_partial_units -= 1;
        }
    }

    /// Programs the units in the write-back group at `t` (the FTL completes partial ones);
    /// returns when done.
    fn write_back(&mut self, t: u64) -> DevResult<u64> {
        let full = self.full_mask();
        let mut ius = std::mem::take(&mut self.ius);
        let mut group = std::mem::take(&mut self.group);
        for e in group.drain(..) {
            if e.present != full {
                self.counters.partial_writebacks += 1;
            }
            ius.push(IuWrite {
                lpn: e.lpn,
                seq: e.seq,
                flags: e.flags,
                img: e.img,
                present: e.present,
            });
        }
        self.group = group;
        self.counters.buffer_writebacks += ius.len() as u64;
        let done = self.ftl.program(t, &mut ius);
        self.ius = ius;
        let done = done?;
        self.last_program_done_ns = self.last_program_done_ns.max(done);
        Ok(done)
    }

    /// Reads blocks at `lba` into `buf` (and metadata into `md`); returns when complete.
    pub fn read(
        &mut self,
        t0: u64,
        lba: u64,
        buf: &mut [u8],
        md: Option<&mut [u8]>,
    ) -> DevResult<u64> {
        self.ftl.background(t0)?;
        let t = self.hostif.admit(t0);
        let ready = self.gather(t, lba, buf, md)?;
        let done = self.hostif.to_host(ready, buf.len());
        self.counters.read_cmds += 1;
        self.counters.read_bytes += buf.len() as u64;
        self.hostif.complete(done);
        Ok(done)
    }

    /// Assembles blocks at `lba` into `buf` (and metadata into `md`) in device DRAM, from the
    /// write buffer where it holds them and from NAND (issued at `t`) otherwise; blocks never
    /// written read as zeros. Returns when the last byte is in DRAM. Host reads and the
    /// conversion command both read this way.
    fn gather(
        &mut self,
        t: u64,
        lba: u64,
        buf: &mut [u8],
        mut md: Option<&mut [u8]>,
    ) -> DevResult<u64> {
        let bs = self.block_bytes();
        let mdb = self.md_bytes();
        let shape = self.shape;
        let mut ready = t;
        for p in pieces(lba, (buf.len() / bs) as u64, self.layout.blocks_per_iu) {
            let need = mask(p.first, p.count);
            let present = self.buffer.touch(p.lpn).map(|e| e.present).unwrap_or(0);
            let from_nand = if present & need == need {
                self.counters.buffer_read_hits += 1;
                None
            } else {
                if present != 0 {
                    self.counters.buffer_partial_read_hits += 1;
                }
                let (img, r) = self.ftl.read_iu(t, p.lpn, need & !present)?;
                ready = ready.max(r);
                Some(img)
            };
            let entry = self.buffer.peek(p.lpn);
            for i in 0..p.count as usize {
                let b = p.first as usize + i;
                let dst = &mut buf[(p.offset + i) * bs..(p.offset + i + 1) * bs];
                let mdst = md.as_deref_mut().map(|m| &mut m[(p.offset + i) * mdb..][..mdb]);
                match (entry, &from_nand) {
                    (Some(e), _) if e.present & (1u128 << b) != 0 => {
                        e.img.get_block(&shape, b, dst, mdst)
                    }
                    (_, Some(Some(img))) => img.get_block(&shape, b, dst, mdst),
                    _ => {
                        dst.fill(0);
                        if let Some(m) = mdst {
                            m.fill(0);
                        }
                    }
                }
            }
        }
        Ok(ready)
    }

    /// Deallocates blocks; whole units are unmapped (durably at once), parts of units are
    /// written as zeros.
    pub fn trim(&mut self, t0: u64, lba: u64, blocks: u64) -> DevResult<u64> {
        let t = self.hostif.admit(t0);
        let done = self.deallocate(t, lba, blocks)?;
        self.counters.trims += 1;
        self.counters.trim_bytes += blocks * self.block_bytes() as u64;
        self.hostif.complete(done);
        Ok(done)
    }

    /// What a trim does at `t`: whole units leave the buffer and are unmapped (their slots
    /// become garbage, and a durable trim record keeps them unmapped across a power loss);
    /// blocks of partly covered units are written as zeros. Returns when the zero writes are
    /// done (`t` when there are none).
    fn deallocate(&mut self, t: u64, lba: u64, blocks: u64) -> DevResult<u64> {
        let bs = self.block_bytes();
        let mut done = t;
        for p in pieces(lba, blocks, self.layout.blocks_per_iu) {
            if p.count == self.layout.blocks_per_iu {
                if let Some(e) = self.buffer.remove(p.lpn) {
                    self.left_buffer(&e);
                }
                let seq = self.ftl.next_seq();
                self.ftl.trim(p.lpn, seq);
            } else {
                let zeros = vec![0u8; p.count as usize * bs];
                done = done.max(self.write_piece(t, p, &zeros, None, 0, false, false)?);
            }
        }
        Ok(done)
    }

    /// Makes every completed write durable: writes the buffer back and waits for every
    /// program in flight. With power-loss protection the buffer is already durable.
    pub fn flush(&mut self, t0: u64) -> DevResult<u64> {
        let t = self.hostif.admit(t0);
        let mut done = t;
        if !self.plp {
            let per = self.layout.slots_per_page as usize;
            while !self.buffer.is_empty() {
                let n = self.take_victims_in_order(per);
                let d = self.write_back(t)?;
                for _ in 0..n {
                    self.draining.push(d);
                }
            }
            done = done.max(self.last_program_done_ns);
            done = done.max(self.ftl.sync_staged(t));
        }
        self.ftl.sync_image();
        self.counters.flushes += 1;
        self.hostif.complete(done);
        Ok(done)
    }

    /// Power loss at `t`: the buffer is lost (or, with power-loss protection, written to
    /// NAND on the capacitors' energy), and the FTL forgets its volatile state.
    pub fn power_loss(&mut self, t: u64) -> RecoveryStep {
        let buffered = self.buffer.len();
        let step = if self.plp {
            let per = self.layout.slots_per_page as usize;
            while !self.buffer.is_empty() {
                self.take_victims_in_order(per);
                // A failure here would be a firmware bug (no space for buffered data).
                let _ = self.write_back(t);
            }
            RecoveryStep {
                name: "plp_drain",
                detail: format!("{buffered} buffered units written on capacitor power"),
            }
        } else {
            self.buffer.drain();
            self.counters.buffer_partial_units = 0;
            RecoveryStep {
                name: "drop_buffer",
                detail: format!("{buffered} buffered (unflushed) units lost"),
            }
        };
        self.draining.clear();
        self.hostif.reset(t);
        self.engine.reset(t);
        self.ftl.power_loss();
        self.counters.power_losses += 1;
        step
    }

    /// Rebuilds the FTL from the media at power-on `t`, and a zoned namespace's zone table
    /// from what the FTL found: open zones come back closed (`ZoneTable::restore`).
    pub fn recover(&mut self, t: u64) -> Vec<RecoveryStep> {
        self.last_program_done_ns = t;
        let mut steps = self.ftl.recover(t);
        if let Some(table) = self.zones.as_mut() {
            let mut fresh = ZoneTable::new(*table.geometry(), table.num_zones())
                .expect("the geometry was valid before");
            let mut failed = Vec::new();
            for (zone, (written, finished)) in self.ftl.zone_media_state().into_iter().enumerate() {
                if let Err(e) = fresh.restore(zone as u64, written, finished) {
                    failed.push(format!("zone {zone}: {e}"));
                }
            }
            let count =
                |s: ZoneState| (0..fresh.num_zones()).filter(|&z| fresh.state(z) == s).count();
            let detail = format!(
                "{} closed, {} full, {} empty{}",
                count(ZoneState::Closed),
                count(ZoneState::Full),
                count(ZoneState::Empty),
                if failed.is_empty() { String::new() } else { format!("; {}", failed.join("; ")) }
            );
            *table = fresh;
            // Before "resume", the last step.
            let at = steps.len().saturating_sub(1);
            steps.insert(at, RecoveryStep { name: "restore_zones", detail });
        }
        steps
    }

    /// A zone management command or zone append at `t0`; returns when it completes and its
    /// reply. Management commands cost the controller's command time, a reset the erase of
    /// the zone's blocks, a finish the program of the zone's staged units.
    pub fn zone(&mut self, t0: u64, cmd: ZoneCommand) -> DevResult<(u64, ZoneReply)> {
        if self.zones.is_none() {
            return Err(DevError::Unsupported { command: "zone" });
        }
        if let ZoneCommand::Append { zone, data } = &cmd {
            let bs = self.block_bytes();
            if data.is_empty() || !data.len().is_multiple_of(bs) {
                return Err(DevError::Misaligned { len_bytes: data.len(), block_size: bs as u32 });
            }
            let table = self.zones.as_mut().expect("checked above");
            let lba = table.append(*zone, (data.len() / bs) as u64)?;
            let done = self.write_accepted(t0, lba, data, None, WriteHints::NONE)?;
            return Ok((done, ZoneReply::Appended { lba }));
        }
        let table = self.zones.as_mut().expect("checked above");
        let mut reply = ZoneReply::Done;
        let physical = match cmd {
            ZoneCommand::Report { first_zone, max_zones } => {
                reply = ZoneReply::Zones(table.report(first_zone, max_zones)?);
                None
            }
            ZoneCommand::Reset { zone } => {
                table.reset(zone)?;
                Some((zone, true))
            }
            ZoneCommand::Finish { zone } => {
                table.finish(zone)?;
                Some((zone, false))
            }
            ZoneCommand::Open { zone } => {
                table.open(zone)?;
                None
            }
            ZoneCommand::Close { zone } => {
                table.close(zone)?;
                None
            }
            ZoneCommand::Append { .. } => unreachable!("handled above"),
        };
        let t = self.hostif.admit(t0);
        let done = match physical {
            Some((zone, true)) => self.ftl.zone_reset(t, zone),
            Some((zone, false)) => self.ftl.zone_finish(t, zone),
            None => t,
        };
        self.hostif.complete(done);
        Ok((done, reply))
    }

    /// Units in the write buffer.
    pub fn buffered_units(&self) -> usize {
        self.buffer.len()
    }

    /// What the write buffer's replacement policy counts about its choices.
    pub fn buffer_stats(&self) -> buffer::PolicyStats {
        self.buffer.stats()
    }
}

/// The zone geometry a `[zoned]` table exports.
pub fn zone_geometry(z: &crate::config::Zoned, zl: &crate::config::ZoneLayout) -> ZoneGeometry {
    ZoneGeometry {
        zone_blocks: zl.zone_blocks,
        zone_capacity_blocks: zl.zone_capacity_blocks,
        max_open_zones: z.max_open_zones,
        max_active_zones: z.max_active_zones,
    }
}

/// The NAND timelines as a write-buffer policy sees them at `t_ns` (see [`ChipView`]).
struct FlashChips<'a> {
    ftl: &'a dyn Ftl,
    t_ns: u64,
}

impl ChipView for FlashChips<'_> {
    fn read_would_wait(&self, lpn: u32) -> bool {
        self.ftl.plane_of(lpn).is_some_and(|p| self.ftl.timer().plane_busy_at(p, self.t_ns))
    }

    fn program_would_wait(&self) -> bool {
        self.ftl.next_host_plane().is_some_and(|p| self.ftl.timer().plane_busy_at(p, self.t_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_requests_at_unit_boundaries() {
        let v: Vec<Piece> = pieces(6, 7, 4).collect();
        assert_eq!(
            v,
            vec![
                Piece { lpn: 1, first: 2, count: 2, offset: 0 },
                Piece { lpn: 2, first: 0, count: 4, offset: 2 },
                Piece { lpn: 3, first: 0, count: 1, offset: 6 },
            ]
        );
        assert_eq!(mask(2, 2), 0b1100);
        assert_eq!(mask(0, 128), u128::MAX);
    }
}
