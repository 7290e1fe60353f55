//! `inject`: SSD faults as a layer that stacks over any device (jaffer-thesis-2023.txt §2.4,
//! the thesis' dm-inject as a flashrig engine).
//!
//! The layer passes every command to the device below until one of its armed faults fires on
//! a block the command touches; then the fault decides what the command does instead (fault.rs
//! lists the kinds) and the injection is logged (log.rs). Faults are given when the layer is
//! built and can be armed and disarmed while it runs ([`Inject::arm`], [`Inject::disarm`]).
//!
//! Decisions are taken per block access, in the order commands reach the layer: each armed
//! fault counts the accesses that pass its filters (for `nth`) and draws from its own seeded
//! generator (for `probability` and for random corruption), so under the simulated runtime
//! the same seed injects the same faults into the same accesses.

pub mod fault;
pub mod log;
pub mod structure;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{
    check_io, check_range, BlockDevice, DevError, DevRef, DevResult, DeviceInfo, VendorCommand,
    VendorReply, WriteHints, ZoneCommand, ZoneReply,
};
use flashrig_metrics::Registry;
use parking_lot::Mutex;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

pub use fault::{CorruptHow, FaultConfig, FaultSpec, Kind, Op, Ops, Target};
pub use log::{InjectionLog, InjectionRecord};
pub use structure::Classifier;

use crate::EngineConstraints;

pub const CONSTRAINTS: EngineConstraints =
    EngineConstraints { name: "inject", min_members: 1, failures_tolerated: 0 };

/// A fault while it is armed: its spec and what it has seen and done so far.
struct Armed {
    id: u64,
    spec: FaultSpec,
    /// Block accesses that passed the fault's filters (what `nth` counts).
    seen: u64,
    /// Injections so far (what `count` limits).
    fired: u64,
    rng: Xoshiro256PlusPlus,
}

/// A fault that fired on one block access.
struct Fired {
    id: u64,
    lba: u64,
    /// The structure the block held, when the layer classifies blocks: the fault's target
    /// if it has one (a btrfs leaf holds several), else the block's own.
    structure: Option<String>,
    kind: Kind,
    /// Seeds the random bytes or bit positions of a corruption.
    salt: u64,
}

/// The `inject` layer.
pub struct Inject {
    info: DeviceInfo,
    below: DevRef,
    armed: Mutex<Vec<Armed>>,
    next_id: AtomicU64,
    seed: u64,
    failed: AtomicBool,
    log: InjectionLog,
    metrics: Arc<Registry>,
    classifier: Option<Mutex<Box<dyn Classifier>>>,
}

/// The most blocks a scan reads before it stops (a classifier asks for the metadata only; this
/// bounds a corrupt image that points everywhere): 4 GiB of 4 KiB blocks.
const SCAN_MAX_BLOCKS: u64 = 1 << 20;

impl Inject {
    /// The layer over `below` with `faults` armed (ids 0, 1, ... in order), drawing its random
    /// decisions from `seed`, logging to `log`, and classifying the blocks that pass with
    /// `classifier` when given (so that faults can target file-system structures and the log
    /// names them; [`Inject::scan`] teaches it an existing image).
    pub fn new(
        name: &str,
        below: DevRef,
        faults: Vec<FaultSpec>,
        seed: u64,
        log: InjectionLog,
        classifier: Option<Box<dyn Classifier>>,
    ) -> DevResult<Self> {
        crate::check_members(&CONSTRAINTS, std::slice::from_ref(&below))?;
        let mut info = below.info().clone();
        info.name = name.to_string();
        let layer = Inject {
            info,
            below,
            armed: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            seed,
            failed: AtomicBool::new(false),
            log,
            metrics: Registry::new(name),
            classifier: classifier.map(Mutex::new),
        };
        for (i, f) in faults.into_iter().enumerate() {
            layer.arm(f).map_err(|e| DevError::Invalid(format!("faults[{i}]: {e}")))?;
        }
        Ok(layer)
    }

    /// Reads, from the device below, the blocks the classifier asks for until it asks for no
    /// more (the superblock, the descriptors, the inode tables in use, extent blocks), so the
    /// layer knows an existing file system before anything above touches it. Returns the
    /// blocks read.
    pub async fn scan(&self) -> DevResult<u64> {
        let Some(c) = &self.classifier else { return Ok(0) };
        let bs = self.info.block_size as usize;
        let mut buf = vec![0u8; bs];
        // Each block is read once: a classifier that meets the superblock again asks again
        // for what it points at.
        let mut seen = std::collections::HashSet::new();
        loop {
            let wanted = c.lock().wanted();
            let fresh: Vec<u64> = wanted
                .into_iter()
                .filter(|&l| l < self.info.num_blocks && seen.insert(l))
                .collect();
            if fresh.is_empty() || seen.len() as u64 >= SCAN_MAX_BLOCKS {
                return Ok(seen.len() as u64);
            }
            for lba in fresh {
                self.below.read(lba, &mut buf, None).await?;
                c.lock().observe(lba, &buf);
            }
        }
    }

    /// The structure block `lba` holds, as far as the layer's classifier knows.
    pub fn structure_of(&self, lba: u64) -> Option<&'static str> {
        self.classifier.as_ref().and_then(|c| c.lock().classify(lba))
    }

    /// Whether block `lba` holds `structure`, as far as the layer's classifier knows (a btrfs
    /// leaf holds the structures of its item types besides its tree's).
    pub fn matches_structure(&self, lba: u64, structure: &str) -> bool {
        self.classifier.as_ref().is_some_and(|c| c.lock().matches(lba, structure))
    }

    /// Shows the classifier the blocks of `data` at `lba`.
    fn observe(&self, lba: u64, data: &[u8]) {
        if let Some(c) = &self.classifier {
            let mut c = c.lock();
            let bs = self.info.block_size as usize;
            for (i, block) in data.chunks_exact(bs).enumerate() {
                c.observe(lba + i as u64, block);
            }
        }
    }

    /// Arms a fault and returns its id (its `fault` in the log). Refuses a target range
    /// outside the device, and a structure target the layer cannot classify.
    pub fn arm(&self, spec: FaultSpec) -> Result<u64, String> {
        if let Some(s) = &spec.target.structure {
            let Some(c) = &self.classifier else {
                return Err(format!(
                    "structure = \"{s}\" needs the layer to classify blocks (filesystem = ...)"
                ));
            };
            let c = c.lock();
            if !c.structures().contains(&s.as_str()) {
                return Err(format!(
                    "structure = \"{s}\": {} has {}",
                    c.filesystem(),
                    c.structures().join(", ")
                ));
            }
        }
        if let Some((first, blocks)) = spec.target.lbas {
            if first.checked_add(blocks).is_none_or(|end| end > self.info.num_blocks) {
                return Err(format!(
                    "lba = {first}, blocks = {blocks}: outside the device's {} blocks",
                    self.info.num_blocks
                ));
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let rng = Xoshiro256PlusPlus::seed_from_u64(
            self.seed ^ id.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        self.armed.lock().push(Armed { id, spec, seen: 0, fired: 0, rng });
        Ok(id)
    }

    /// Disarms fault `id`; false if no such fault is armed.
    pub fn disarm(&self, id: u64) -> bool {
        let mut a = self.armed.lock();
        let before = a.len();
        a.retain(|f| f.id != id);
        a.len() != before
    }

    /// The armed faults: id, spec, injections so far.
    pub fn armed(&self) -> Vec<(u64, FaultSpec, u64)> {
        self.armed.lock().iter().map(|f| (f.id, f.spec.clone(), f.fired)).collect()
    }

    /// The injections logged so far.
    pub fn log(&self) -> &InjectionLog {
        &self.log
    }

    /// Whether a `fail` fault has failed the device.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    fn check_failed(&self) -> DevResult<()> {
        if self.is_failed() {
            return Err(DevError::DeviceFailed { name: self.info.name.clone() });
        }
        Ok(())
    }

    /// The faults that fire on the blocks `lba..lba + blocks` of an `op` command, in block
    /// order, each fault taking the accesses in that order.
    fn decide(&self, op: Op, lba: u64, blocks: u64) -> Vec<Fired> {
        let mut armed = self.armed.lock();
        if armed.is_empty() {
            return Vec::new();
        }
        let now_ns = now_ns();
        let classifier = self.classifier.as_ref().map(|c| c.lock());
        let mut fired = Vec::new();
        for b in lba..lba + blocks {
            let structure = classifier.as_ref().and_then(|c| c.classify(b));
            for f in armed.iter_mut() {
                let t = &f.spec.target;
                if !t.ops.covers(op)
                    || !t.covers_lba(b)
                    || t.structure
                        .as_ref()
                        .is_some_and(|s| !classifier.as_ref().is_some_and(|c| c.matches(b, s)))
                    || now_ns < t.from_ns
                    || now_ns >= t.until_ns
                    || t.count.is_some_and(|c| f.fired >= c)
                {
                    continue;
                }
                f.seen += 1;
                if t.nth.is_some_and(|n| f.seen != n) {
                    continue;
                }
                if let Some(p) = t.probability {
                    // 53 random bits, as a uniform draw in [0, 1).
                    let u = (f.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                    if u >= p {
                        continue;
                    }
                }
                f.fired += 1;
                let salt = f.rng.next_u64();
                let structure = t.structure.clone().or(structure.map(str::to_string));
                fired.push(Fired { id: f.id, lba: b, structure, kind: f.spec.kind.clone(), salt });
            }
        }
        fired
    }

    fn note(&self, op: Op, f: &Fired, detail: Option<String>) {
        self.metrics.counter("injections").inc();
        self.metrics.counter(&format!("injected_{}", f.kind.name().replace('-', "_"))).inc();
        self.log.record(InjectionRecord {
            time_ns: now_ns(),
            op: op.name().to_string(),
            lba: f.lba,
            kind: f.kind.name().to_string(),
            fault: f.id,
            structure: f.structure.clone(),
            detail,
        });
    }

    /// What every command does first with the faults that fired on it: the delays, then a
    /// device failure. Returns the faults left for the command to apply.
    async fn delay_and_fail(&self, op: Op, fired: Vec<Fired>) -> DevResult<Vec<Fired>> {
        let mut delay_ns = 0u64;
        let mut rest = Vec::with_capacity(fired.len());
        for f in fired {
            match f.kind {
                Kind::Delay { delay_ns: d } => {
                    self.note(op, &f, Some(format!("{d} ns")));
                    delay_ns = delay_ns.saturating_add(d);
                }
                Kind::Fail => {
                    self.note(op, &f, None);
                    self.failed.store(true, Ordering::Release);
                }
                _ => rest.push(f),
            }
        }
        if delay_ns > 0 && flashrig_runtime::in_runtime() {
            flashrig_runtime::sleep_ns(delay_ns).await;
        }
        self.check_failed()?;
        Ok(rest)
    }

    /// Writes the blocks of `data` whose `plan` says so, where it says, as few commands as
    /// the plan allows: runs of consecutive blocks that stay at their address go down as one
    /// write, a misdirected block as a write of its own.
    async fn write_planned(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
        plan: &[Dest],
    ) -> DevResult<()> {
        let bs = self.info.block_size as usize;
        let mdb = self.info.md_bytes_per_block as usize;
        let md_of = |i: usize, n: usize| md.map(|m| &m[i * mdb..(i + n) * mdb]);
        let mut i = 0;
        while i < plan.len() {
            match plan[i] {
                Dest::Drop => i += 1,
                Dest::At(to) => {
                    self.below.write(to, &data[i * bs..(i + 1) * bs], md_of(i, 1), hints).await?;
                    i += 1;
                }
                Dest::Home => {
                    let start = i;
                    while i < plan.len() && plan[i] == Dest::Home {
                        i += 1;
                    }
                    let at = lba + start as u64;
                    let bytes = &data[start * bs..i * bs];
                    self.below.write(at, bytes, md_of(start, i - start), hints).await?;
                }
            }
        }
        Ok(())
    }
}

/// Where one block of a write goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dest {
    /// To the block addressed.
    Home,
    /// Nowhere (a lost write).
    Drop,
    /// To another block (a misdirected write).
    At(u64),
}

fn now_ns() -> u64 {
    if flashrig_runtime::in_runtime() {
        flashrig_runtime::now_ns()
    } else {
        0
    }
}

/// Applies a corruption to one block's bytes; returns what it did, for the log.
fn corrupt(block: &mut [u8], kind: &Kind, salt: u64) -> Option<String> {
    let Kind::Corrupt { how, offset, len, fill, bits } = *kind else { return None };
    let end = len.map_or(block.len(), |l| offset + l);
    let span = &mut block[offset..end];
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(salt);
    match how {
        CorruptHow::Zero => span.fill(0),
        CorruptHow::Fill => span.fill(fill),
        CorruptHow::Random => rng.fill_bytes(span),
        CorruptHow::Bitflip => {
            let total_bits = span.len() as u64 * 8;
            let mut flipped: Vec<u64> = Vec::with_capacity(bits as usize);
            while flipped.len() < bits as usize {
                let bit = rng.next_u64() % total_bits;
                if !flipped.contains(&bit) {
                    flipped.push(bit);
                    span[(bit / 8) as usize] ^= 1 << (bit % 8);
                }
            }
            flipped.sort_unstable();
            let at: Vec<String> =
                flipped.iter().map(|b| (offset as u64 * 8 + b).to_string()).collect();
            return Some(format!("bits {}", at.join(",")));
        }
    }
    Some(format!("bytes {offset}..{end}"))
}

#[async_trait(?Send)]
impl BlockDevice for Inject {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn kind(&self) -> &'static str {
        "inject"
    }
    fn metrics(&self) -> Option<Arc<Registry>> {
        Some(self.metrics.clone())
    }
    fn children(&self) -> Vec<DevRef> {
        vec![self.below.clone()]
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, buf.len(), md.as_ref().map(|m| m.len()))?;
        self.check_failed()?;
        let fired = self.delay_and_fail(Op::Read, self.decide(Op::Read, lba, blocks)).await?;
        if let Some(f) = fired.iter().find(|f| f.kind == Kind::ReadError) {
            self.note(Op::Read, f, None);
            return Err(DevError::ReadMedia { lba: f.lba });
        }
        self.below.read(lba, buf, md).await?;
        // The classifier learns from what the medium holds, before any corruption.
        self.observe(lba, buf);
        let bs = self.info.block_size as usize;
        for f in &fired {
            let i = (f.lba - lba) as usize;
            let detail = corrupt(&mut buf[i * bs..(i + 1) * bs], &f.kind, f.salt);
            self.note(Op::Read, f, detail);
        }
        Ok(())
    }

    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, data.len(), md.map(|m| m.len()))?;
        self.check_failed()?;
        // Blocks are classified as the file system writes them: a new inode table block says
        // what its inodes map before the fault decides.
        self.observe(lba, data);
        let fired = self.delay_and_fail(Op::Write, self.decide(Op::Write, lba, blocks)).await?;
        // Traces only log; the write goes down as it came unless another fault fired.
        let (traces, fired): (Vec<Fired>, Vec<Fired>) =
            fired.into_iter().partition(|f| f.kind == Kind::Trace);
        for f in &traces {
            self.note(Op::Write, f, None);
        }
        if fired.is_empty() {
            return self.below.write(lba, data, md, hints).await;
        }
        if let Some(f) = fired.iter().find(|f| f.kind == Kind::WriteError) {
            self.note(Op::Write, f, None);
            return Err(DevError::WriteMedia { lba: f.lba });
        }
        // Faults that change what is stored work on a copy; the caller's buffer is theirs.
        let bs = self.info.block_size as usize;
        let mut data = data.to_vec();
        let mut plan = vec![Dest::Home; blocks as usize];
        for f in &fired {
            let i = (f.lba - lba) as usize;
            let block = &mut data[i * bs..(i + 1) * bs];
            let detail = match &f.kind {
                Kind::Corrupt { .. } => corrupt(block, &f.kind, f.salt),
                Kind::Shorn { keep_sectors } => {
                    for (s, keep) in keep_sectors.iter().enumerate() {
                        if !keep {
                            block[s * fault::SECTOR_BYTES..(s + 1) * fault::SECTOR_BYTES].fill(0);
                        }
                    }
                    let pattern: String =
                        keep_sectors.iter().map(|k| if *k { '1' } else { '0' }).collect();
                    Some(format!("sectors {pattern}"))
                }
                Kind::Stale => {
                    let mut old = vec![0u8; bs];
                    self.below.read(f.lba, &mut old, None).await?;
                    for (b, o) in block.iter_mut().zip(&old) {
                        *b &= o;
                    }
                    None
                }
                Kind::Lost => {
                    plan[i] = Dest::Drop;
                    None
                }
                Kind::Misdirect { offset_blocks } => {
                    let n = self.info.num_blocks as i128;
                    let to = (f.lba as i128 + *offset_blocks as i128).rem_euclid(n) as u64;
                    plan[i] = Dest::At(to);
                    Some(format!("landed on block {to}"))
                }
                _ => None,
            };
            self.note(Op::Write, f, detail);
        }
        self.write_planned(lba, &data, md, hints, &plan).await
    }

    async fn flush(&self) -> DevResult<()> {
        self.check_failed()?;
        self.below.flush().await
    }

    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        check_range(&self.info, lba, num_blocks)?;
        self.check_failed()?;
        self.below.trim(lba, num_blocks).await
    }

    async fn zone(&self, cmd: ZoneCommand) -> DevResult<ZoneReply> {
        self.check_failed()?;
        self.below.zone(cmd).await
    }

    async fn vendor(&self, cmd: VendorCommand<'_>) -> DevResult<VendorReply> {
        self.check_failed()?;
        self.below.vendor(cmd).await
    }
}
