//! `zoned`: a zoned namespace emulated over any block device, as SPDK's `bdev_zone_block`
//! does. CSAL-BLK (csal-eurosys24.txt §6.1) is CSAL over a block-interface P5316 made zoned
//! this way; flashrig's tests use it over RAM to give zoned engines a fast member.
//!
//! The member's first `num_zones * zone_blocks` blocks are the zones; the zone state machine
//! is [`flashrig_blockdev::zones::ZoneTable`]. Writes must start at the zone's write pointer,
//! reads at or past it return zeros, a reset trims the zone's blocks on the member (so the
//! device below can reclaim them: on a block SSD that is where the emulation's hidden cost
//! lives, in the SSD's own GC), and `trim` itself is refused as on a ZNS drive.
//!
//! Unlike SPDK's module, whose zones start empty at every start, the write pointers survive a
//! restart: a flush (or a FUA write) persists them in a table at the end of the member, in two
//! alternating copies so a torn table write leaves the older copy readable. What a flush
//! persists is each zone's *completed* write pointer: the end of the longest prefix of the
//! zone whose writes have all completed, so a restarted zone never exposes blocks that an
//! in-flight write had not yet written (they would hold whatever was there before the last
//! reset). The on-disk layout is in docs/formats.md ("zoned: write-pointer table").

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::zones::ZoneTable;
use flashrig_blockdev::{
    check_io, BlockDevice, DevError, DevRef, DevResult, DeviceInfo, WriteHints, ZoneCommand,
    ZoneGeometry, ZoneReply, ZoneState,
};
use flashrig_metrics::Registry;
use parking_lot::Mutex;

use crate::{check_members, EngineConstraints};

pub const CONSTRAINTS: EngineConstraints =
    EngineConstraints { name: "zoned", min_members: 1, failures_tolerated: 0 };

/// "FRZONED1": the write-pointer table's magic.
const MAGIC: u64 = u64::from_le_bytes(*b"FRZONED1");
const VERSION: u32 = 1;
/// Header bytes before the per-zone entries: magic 8, version 4, crc 4, generation 8,
/// zone_blocks 8, zone_capacity_blocks 8, num_zones 8.
const HEADER_BYTES: usize = 48;
/// Per zone: blocks written (u64), with the top bit set for a finished zone.
const ENTRY_BYTES: usize = 8;
const FINISHED_BIT: u64 = 1 << 63;

/// Zone layout and limits of an emulated zoned namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZonedOptions {
    pub zone_blocks: u64,
    /// Writable blocks per zone (at most `zone_blocks`).
    pub zone_capacity_blocks: u64,
    /// 0 = no limit.
    pub max_open_zones: u32,
    /// 0 = no limit.
    pub max_active_zones: u32,
}

impl ZonedOptions {
    pub fn geometry(&self) -> ZoneGeometry {
        ZoneGeometry {
            zone_blocks: self.zone_blocks,
            zone_capacity_blocks: self.zone_capacity_blocks,
            max_open_zones: self.max_open_zones,
            max_active_zones: self.max_active_zones,
        }
    }
}

/// The zones' in-memory state beside the table: what has completed, for the flush.
struct State {
    table: ZoneTable,
    /// Per zone: the end (blocks from the zone's start) of the completed prefix.
    completed_blocks: Vec<u64>,
    /// Per zone: completed writes past the prefix, start -> end (blocks from the zone start).
    completed_beyond: Vec<BTreeMap<u64, u64>>,
    /// The generation of the newest persisted table copy.
    generation: u64,
}

impl State {
    fn complete(&mut self, zone: u64, start: u64, end: u64) {
        let z = zone as usize;
        if start != self.completed_blocks[z] {
            self.completed_beyond[z].insert(start, end);
            return;
        }
        let mut end = end;
        while let Some(next) = self.completed_beyond[z].remove(&end) {
            end = next;
        }
        self.completed_blocks[z] = end;
    }

    fn clear(&mut self, zone: u64) {
        self.completed_blocks[zone as usize] = 0;
        self.completed_beyond[zone as usize].clear();
    }
}

pub struct Zoned {
    info: DeviceInfo,
    member: DevRef,
    opts: ZonedOptions,
    /// Member blocks of one copy of the write-pointer table (whole write units of the member).
    table_blocks: u64,
    /// Member LBA of table copy 0 (the first write unit after the zones).
    table_start: u64,
    state: Mutex<State>,
    metrics: Arc<Registry>,
}

/// Zones, table-copy size and table start that fit a member of `member_blocks` blocks of
/// `block_bytes` whose write unit is `unit` blocks: each table copy is whole units starting on
/// a unit boundary, so a flush rewrites whole units of the member (a block SSD with a coarse
/// mapping unit then never reads one back to merge a table write into it).
fn layout(member_blocks: u64, block_bytes: u64, zone_blocks: u64, unit: u64) -> (u64, u64, u64) {
    let unit = unit.max(1);
    let mut zones = member_blocks / zone_blocks;
    loop {
        let table_blocks = (HEADER_BYTES as u64 + zones * ENTRY_BYTES as u64)
            .div_ceil(block_bytes)
            .next_multiple_of(unit);
        let table_start = (zones * zone_blocks).next_multiple_of(unit);
        if zones == 0 || table_start + 2 * table_blocks <= member_blocks {
            return (zones, table_blocks, table_start);
        }
        zones -= 1;
    }
}

impl Zoned {
    /// A zoned namespace over `member`, formatted fresh: every zone empty, the table persisted.
    pub async fn create(name: &str, member: DevRef, opts: ZonedOptions) -> DevResult<Self> {
        let z = Self::new(name, member, opts)?;
        z.persist(0).await?;
        z.member.flush().await?;
        Ok(z)
    }

    /// Opens a zoned namespace this layer formatted before, restoring every zone's write
    /// pointer from the newest readable table copy (open zones come back closed, as after a
    /// ZNS drive's power cycle). Fails when neither copy is readable or the geometry differs.
    pub async fn open(name: &str, member: DevRef, opts: ZonedOptions) -> DevResult<Self> {
        let z = Self::new(name, member, opts)?;
        let (generation, entries) = z.read_table().await?.ok_or_else(|| {
            DevError::Invalid(format!(
                "{name}: member {} holds no zoned write-pointer table",
                z.member.info().name
            ))
        })?;
        {
            let mut st = z.state.lock();
            for (zone, e) in entries.iter().enumerate() {
                let written = e & !FINISHED_BIT;
                st.table.restore(zone as u64, written, e & FINISHED_BIT != 0)?;
                st.completed_blocks[zone] = st.table.written_blocks(zone as u64);
            }
            st.generation = generation;
        }
        Ok(z)
    }

    /// Opens the namespace if the member holds one, otherwise formats it.
    pub async fn open_or_create(name: &str, member: DevRef, opts: ZonedOptions) -> DevResult<Self> {
        let probe = Self::new(name, member.clone(), opts)?;
        match probe.read_table().await? {
            Some(_) => Self::open(name, member, opts).await,
            None => Self::create(name, member, opts).await,
        }
    }

    fn new(name: &str, member: DevRef, opts: ZonedOptions) -> DevResult<Self> {
        let (bs, md) = check_members(&CONSTRAINTS, std::slice::from_ref(&member))?;
        if opts.zone_blocks == 0
            || opts.zone_capacity_blocks == 0
            || opts.zone_capacity_blocks > opts.zone_blocks
        {
            return Err(DevError::Invalid(format!(
                "{name}: zone of {} blocks with capacity {}: need 0 < capacity <= zone size",
                opts.zone_blocks, opts.zone_capacity_blocks
            )));
        }
        let unit = member.info().optimal_io_blocks as u64;
        let (zones, table_blocks, table_start) =
            layout(member.info().num_blocks, bs as u64, opts.zone_blocks, unit);
        if zones == 0 {
            return Err(DevError::Invalid(format!(
                "{name}: member {} ({} blocks) cannot hold one zone of {} blocks and the \
                 write-pointer table",
                member.info().name,
                member.info().num_blocks,
                opts.zone_blocks
            )));
        }
        let table = ZoneTable::new(opts.geometry(), zones)
            .map_err(|e| DevError::Invalid(format!("{name}: {e}")))?;
        let mut info = DeviceInfo::new(name, bs, zones * opts.zone_blocks).with_md_bytes(md);
        info.zones = Some(opts.geometry());
        info.caps.zones = true;
        info.caps.fua = true;
        info.caps.md_atomic = member.info().caps.md_atomic;
        info.caps.timing_only = member.info().caps.timing_only;
        info.caps.write_hints = member.info().caps.write_hints;
        info.max_io_blocks = member.info().max_io_blocks;
        // A zone's writes reach the member as they are, so the member's preferred granularity
        // (a block SSD's mapping unit) is the zones' too.
        info.optimal_io_blocks = member.info().optimal_io_blocks;
        let state = State {
            table,
            completed_blocks: vec![0; zones as usize],
            completed_beyond: vec![BTreeMap::new(); zones as usize],
            generation: 0,
        };
        Ok(Self {
            info,
            member,
            opts,
            table_blocks,
            table_start,
            state: Mutex::new(state),
            metrics: Registry::new(name),
        })
    }

    pub fn options(&self) -> &ZonedOptions {
        &self.opts
    }

    pub fn num_zones(&self) -> u64 {
        self.info.num_blocks / self.opts.zone_blocks
    }

    /// Member LBA of table copy `copy` (0 or 1).
    fn table_lba(&self, copy: u64) -> u64 {
        self.table_start + copy * self.table_blocks
    }

    fn encode(&self, generation: u64, entries: &[u64]) -> Vec<u8> {
        let bs = self.info.block_size as usize;
        let mut buf = vec![0u8; self.table_blocks as usize * bs];
        buf[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        buf[8..12].copy_from_slice(&VERSION.to_le_bytes());
        buf[16..24].copy_from_slice(&generation.to_le_bytes());
        buf[24..32].copy_from_slice(&self.opts.zone_blocks.to_le_bytes());
        buf[32..40].copy_from_slice(&self.opts.zone_capacity_blocks.to_le_bytes());
        buf[40..48].copy_from_slice(&(entries.len() as u64).to_le_bytes());
        for (i, e) in entries.iter().enumerate() {
            let at = HEADER_BYTES + i * ENTRY_BYTES;
            buf[at..at + ENTRY_BYTES].copy_from_slice(&e.to_le_bytes());
        }
        let end = HEADER_BYTES + entries.len() * ENTRY_BYTES;
        let crc = crc32c::crc32c(&buf[16..end]);
        buf[12..16].copy_from_slice(&crc.to_le_bytes());
        buf
    }

    /// One copy's generation and entries, if it is intact and matches this geometry.
    fn decode(&self, buf: &[u8]) -> Option<(u64, Vec<u64>)> {
        let u64_at = |at: usize| u64::from_le_bytes(buf[at..at + 8].try_into().unwrap());
        if u64_at(0) != MAGIC
            || u32::from_le_bytes(buf[8..12].try_into().unwrap()) != VERSION
            || u64_at(24) != self.opts.zone_blocks
            || u64_at(32) != self.opts.zone_capacity_blocks
            || u64_at(40) != self.num_zones()
        {
            return None;
        }
        let end = HEADER_BYTES + self.num_zones() as usize * ENTRY_BYTES;
        let crc = u32::from_le_bytes(buf[12..16].try_into().unwrap());
        if crc32c::crc32c(&buf[16..end]) != crc {
            return None;
        }
        let entries = (0..self.num_zones() as usize)
            .map(|i| u64_at(HEADER_BYTES + i * ENTRY_BYTES))
            .collect();
        Some((u64_at(16), entries))
    }

    /// The newest intact table copy.
    async fn read_table(&self) -> DevResult<Option<(u64, Vec<u64>)>> {
        let bs = self.info.block_size as usize;
        let mut best: Option<(u64, Vec<u64>)> = None;
        for copy in 0..2 {
            let mut buf = vec![0u8; self.table_blocks as usize * bs];
            self.member.read(self.table_lba(copy), &mut buf, None).await?;
            if let Some((generation, entries)) = self.decode(&buf) {
                if best.as_ref().is_none_or(|(g, _)| generation > *g) {
                    best = Some((generation, entries));
                }
            }
        }
        Ok(best)
    }

    /// Writes the completed write pointers as table generation `generation`, into the copy
    /// that generation alternates to.
    async fn persist(&self, generation: u64) -> DevResult<()> {
        let entries: Vec<u64> = {
            let st = self.state.lock();
            (0..self.num_zones())
                .map(|z| match st.table.state(z) {
                    ZoneState::Full => {
                        // A zone finished early holds fewer blocks than its capacity.
                        st.completed_blocks[z as usize].max(st.table.written_blocks(z))
                            | FINISHED_BIT
                    }
                    _ => st.completed_blocks[z as usize],
                })
                .collect()
        };
        let buf = self.encode(generation, &entries);
        self.member.write(self.table_lba(generation % 2), &buf, None, WriteHints::NONE).await?;
        self.metrics.counter("table_writes").inc();
        Ok(())
    }

    /// Persists the table and flushes the member: every write completed before the call, and
    /// every reset and finish, becomes durable.
    async fn sync(&self) -> DevResult<()> {
        // Data first, then the table that exposes it.
        self.member.flush().await?;
        let generation = {
            let mut st = self.state.lock();
            st.generation += 1;
            st.generation
        };
        self.persist(generation).await?;
        self.member.flush().await
    }

    /// Writes `data` at `lba` once the table has accepted it, and records its completion.
    async fn write_accepted(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        let bs = self.info.block_size as u64;
        let blocks = data.len() as u64 / bs;
        let zone = lba / self.opts.zone_blocks;
        let start = lba - zone * self.opts.zone_blocks;
        let member_hints = WriteHints { fua: false, ..hints };
        let r = self.member.write(lba, data, md, member_hints).await;
        // A failed write still ends the range: the zone's later blocks are not held back by
        // it, and what it left on the member is what a failed ZNS write leaves, undefined.
        self.state.lock().complete(zone, start, start + blocks);
        r?;
        self.metrics.counter("blocks_written").add(blocks);
        if hints.fua {
            self.sync().await?;
        }
        Ok(())
    }
}

#[async_trait(?Send)]
impl BlockDevice for Zoned {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn kind(&self) -> &'static str {
        "zoned"
    }
    fn metrics(&self) -> Option<Arc<Registry>> {
        Some(self.metrics.clone())
    }
    fn children(&self) -> Vec<DevRef> {
        vec![self.member.clone()]
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        check_io(&self.info, lba, buf.len(), md.as_deref().map(|m| m.len()))?;
        let bs = self.info.block_size as u64;
        let blocks = buf.len() as u64 / bs;
        let mdb = self.info.md_bytes_per_block as usize;
        // Blocks at or past their zone's write pointer read as zeros; the rest come from the
        // member. A read may span zones, so it is cut at zone boundaries.
        let mut md = md;
        let mut done = 0u64;
        while done < blocks {
            let at = lba + done;
            let zone = at / self.opts.zone_blocks;
            let zone_end = (zone + 1) * self.opts.zone_blocks;
            let n = (blocks - done).min(zone_end - at);
            let wp = self.state.lock().table.write_pointer(zone);
            let valid = wp.saturating_sub(at).min(n);
            let (b0, b1) = ((done * bs) as usize, ((done + n) * bs) as usize);
            let (v1, m0, m1) =
                (((done + valid) * bs) as usize, done as usize * mdb, (done + n) as usize * mdb);
            if valid > 0 {
                let part_md = md.as_deref_mut().map(|m| &mut m[m0..m0 + valid as usize * mdb]);
                self.member.read(at, &mut buf[b0..v1], part_md).await?;
            }
            buf[v1..b1].fill(0);
            if let Some(m) = md.as_deref_mut() {
                m[m0 + valid as usize * mdb..m1].fill(0);
            }
            done += n;
        }
        self.metrics.counter("blocks_read").add(blocks);
        Ok(())
    }

    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        check_io(&self.info, lba, data.len(), md.map(|m| m.len()))?;
        let blocks = data.len() as u64 / self.info.block_size as u64;
        self.state.lock().table.write(lba, blocks)?;
        self.write_accepted(lba, data, md, hints).await
    }

    async fn flush(&self) -> DevResult<()> {
        self.sync().await
    }

    async fn trim(&self, _lba: u64, _num_blocks: u64) -> DevResult<()> {
        // A ZNS namespace frees space only by resetting zones.
        Err(DevError::Unsupported { command: "trim on a zoned namespace (reset the zone)" })
    }

    async fn zone(&self, cmd: ZoneCommand) -> DevResult<ZoneReply> {
        match cmd {
            ZoneCommand::Report { first_zone, max_zones } => {
                Ok(ZoneReply::Zones(self.state.lock().table.report(first_zone, max_zones)?))
            }
            ZoneCommand::Reset { zone } => {
                let t = {
                    let mut st = self.state.lock();
                    let t = st.table.reset(zone)?;
                    st.clear(zone);
                    t
                };
                if t.written_blocks > 0 {
                    let start = zone * self.opts.zone_blocks;
                    self.member.trim(start, t.written_blocks).await?;
                }
                self.metrics.counter("zone_resets").inc();
                Ok(ZoneReply::Done)
            }
            ZoneCommand::Finish { zone } => {
                self.state.lock().table.finish(zone)?;
                self.metrics.counter("zone_finishes").inc();
                Ok(ZoneReply::Done)
            }
            ZoneCommand::Open { zone } => {
                self.state.lock().table.open(zone)?;
                Ok(ZoneReply::Done)
            }
            ZoneCommand::Close { zone } => {
                self.state.lock().table.close(zone)?;
                Ok(ZoneReply::Done)
            }
            ZoneCommand::Append { zone, data } => {
                let bs = self.info.block_size as usize;
                if data.is_empty() || data.len() % bs != 0 {
                    return Err(DevError::Misaligned {
                        len_bytes: data.len(),
                        block_size: bs as u32,
                    });
                }
                let lba = self.state.lock().table.append(zone, (data.len() / bs) as u64)?;
                self.write_accepted(lba, &data, None, WriteHints::NONE).await?;
                self.metrics.counter("appends").inc();
                Ok(ZoneReply::Appended { lba })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use flashrig_blockdev::ZoneError;
    use flashrig_devices::RamDevice;
    use flashrig_runtime::{run, sleep_ns, spawn, RuntimeKind};

    use super::*;

    const BS: usize = 4096;

    fn opts() -> ZonedOptions {
        ZonedOptions {
            zone_blocks: 8,
            zone_capacity_blocks: 6,
            max_open_zones: 2,
            max_active_zones: 3,
        }
    }

    fn block(v: u8) -> Vec<u8> {
        vec![v; BS]
    }

    #[test]
    fn zones_fill_in_order_and_read_zeros_past_the_write_pointer() {
        run(RuntimeKind::Sim, 1, || async {
            let ram: DevRef = Arc::new(RamDevice::new("ram", BS as u32, 64, 8, 0));
            let z = Zoned::create("z", ram, opts()).await.unwrap();
            // 64 blocks: 7 zones of 8 leave 8 blocks, enough for two 1-block table copies.
            assert_eq!(z.num_zones(), 7);
            assert_eq!(z.info().zones.unwrap().zone_capacity_blocks, 6);
            z.write(8, &[block(1), block(2)].concat(), Some(&[7u8; 16]), WriteHints::NONE)
                .await
                .unwrap();
            let err = z.write(8, &block(3), None, WriteHints::NONE).await.unwrap_err();
            assert_eq!(
                err,
                DevError::Zone {
                    zone: 1,
                    error: ZoneError::InvalidWrite { lba: 8, write_pointer: 10 }
                }
            );
            let mut buf = vec![9u8; 3 * BS];
            let mut md = vec![9u8; 24];
            z.read(8, &mut buf, Some(&mut md)).await.unwrap();
            assert_eq!(buf, [block(1), block(2), block(0)].concat());
            assert_eq!(md, [[7u8; 16].as_slice(), &[0u8; 8]].concat());
            let lba = match z.zone(ZoneCommand::Append { zone: 1, data: block(4) }).await.unwrap() {
                ZoneReply::Appended { lba } => lba,
                other => panic!("{other:?}"),
            };
            assert_eq!(lba, 10);
            assert!(z.trim(8, 1).await.is_err());
        });
    }

    #[test]
    fn a_reset_zone_reads_zeros_and_accepts_writes_from_its_start() {
        run(RuntimeKind::Sim, 1, || async {
            let ram: DevRef = Arc::new(RamDevice::new("ram", BS as u32, 64, 0, 0));
            let z = Zoned::create("z", ram, opts()).await.unwrap();
            for i in 0..6 {
                z.write(i, &block(i as u8 + 1), None, WriteHints::NONE).await.unwrap();
            }
            let zones = match z.zone(ZoneCommand::Report { first_zone: 0, max_zones: 1 }).await {
                Ok(ZoneReply::Zones(d)) => d,
                other => panic!("{other:?}"),
            };
            assert_eq!(zones[0].state, ZoneState::Full);
            z.zone(ZoneCommand::Reset { zone: 0 }).await.unwrap();
            let mut buf = vec![1u8; BS];
            z.read(0, &mut buf, None).await.unwrap();
            assert_eq!(buf, block(0));
            z.write(0, &block(9), None, WriteHints::NONE).await.unwrap();
            assert_eq!(z.metrics.counter("zone_resets").get(), 1);
        });
    }

    /// A member that reports a write unit of 4 blocks and records every write (lba, blocks).
    struct UnitMember {
        inner: DevRef,
        info: DeviceInfo,
        writes: Mutex<Vec<(u64, u64)>>,
    }

    #[async_trait(?Send)]
    impl BlockDevice for UnitMember {
        fn info(&self) -> &DeviceInfo {
            &self.info
        }
        fn kind(&self) -> &'static str {
            "unit"
        }
        async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
            self.inner.read(lba, buf, md).await
        }
        async fn write(
            &self,
            lba: u64,
            d: &[u8],
            md: Option<&[u8]>,
            h: WriteHints,
        ) -> DevResult<()> {
            self.writes.lock().push((lba, (d.len() / BS) as u64));
            self.inner.write(lba, d, md, h).await
        }
        async fn flush(&self) -> DevResult<()> {
            self.inner.flush().await
        }
        async fn trim(&self, lba: u64, n: u64) -> DevResult<()> {
            self.inner.trim(lba, n).await
        }
    }

    #[test]
    fn table_copies_are_whole_aligned_write_units_of_the_member() {
        // A member with a 4-block write unit (a block SSD's mapping unit): 7 zones of 8 blocks
        // with capacity 6, so the zones end on a unit, and a one-block table would not fill
        // one. Every table write must start on a unit and be whole units, and the table must
        // still come back on reopening.
        assert_eq!(layout(64, 4096, 8, 1), (7, 1, 56), "a unit of 1 keeps the layout");
        assert_eq!(layout(72, 4096, 8, 4), (8, 4, 64));
        run(RuntimeKind::Sim, 1, || async {
            let ram: DevRef = Arc::new(RamDevice::new("ram", BS as u32, 72, 0, 0));
            let mut info = ram.info().clone();
            info.optimal_io_blocks = 4;
            let member = Arc::new(UnitMember { inner: ram, info, writes: Mutex::new(Vec::new()) });
            let m: DevRef = member.clone();
            let z = Zoned::create("z", m.clone(), opts()).await.unwrap();
            assert_eq!(z.info().optimal_io_blocks, 4, "the zones take the member's unit");
            for i in 0..3u8 {
                z.write(i as u64, &block(i + 1), None, WriteHints::NONE).await.unwrap();
                z.flush().await.unwrap();
            }
            let zone_area = z.num_zones() * 8;
            let table_writes: Vec<(u64, u64)> =
                member.writes.lock().iter().copied().filter(|&(lba, _)| lba >= zone_area).collect();
            assert!(table_writes.len() >= 3, "{table_writes:?}");
            for (lba, n) in table_writes {
                assert!(lba % 4 == 0 && n % 4 == 0, "table write at {lba} of {n} blocks");
            }
            drop(z);
            let z = Zoned::open("z", m, opts()).await.unwrap();
            let d = match z.zone(ZoneCommand::Report { first_zone: 0, max_zones: 1 }).await {
                Ok(ZoneReply::Zones(d)) => d,
                other => panic!("{other:?}"),
            };
            assert_eq!(d[0].write_pointer, 3);
        });
    }

    #[test]
    fn flushed_write_pointers_survive_a_reopen_and_unflushed_ones_do_not() {
        run(RuntimeKind::Sim, 1, || async {
            let ram: DevRef = Arc::new(RamDevice::new("ram", BS as u32, 64, 0, 0));
            let z = Zoned::create("z", ram.clone(), opts()).await.unwrap();
            z.write(0, &block(1), None, WriteHints::NONE).await.unwrap();
            z.write(8, &[block(2), block(3)].concat(), None, WriteHints::NONE).await.unwrap();
            z.zone(ZoneCommand::Finish { zone: 2 }).await.unwrap();
            z.flush().await.unwrap();
            // After the flush: one more write, never flushed.
            z.write(1, &block(4), None, WriteHints::NONE).await.unwrap();
            drop(z);
            let z = Zoned::open("z", ram, opts()).await.unwrap();
            let d = match z.zone(ZoneCommand::Report { first_zone: 0, max_zones: 3 }).await {
                Ok(ZoneReply::Zones(d)) => d,
                other => panic!("{other:?}"),
            };
            assert_eq!(
                d.iter().map(|d| (d.write_pointer, d.state)).collect::<Vec<_>>(),
                [(1, ZoneState::Closed), (10, ZoneState::Closed), (16 + 6, ZoneState::Full)]
            );
            let mut buf = vec![0u8; 2 * BS];
            z.read(0, &mut buf, None).await.unwrap();
            assert_eq!(buf, [block(1), block(0)].concat(), "the unflushed block is past the wp");
            // Writing resumes at the restored write pointer.
            z.write(1, &block(5), None, WriteHints::NONE).await.unwrap();
        });
    }

    #[test]
    fn a_write_still_in_flight_is_not_persisted_as_written() {
        run(RuntimeKind::Sim, 1, || async {
            // The member takes 10 us per command, so the second write is still in flight
            // when the table is persisted.
            let ram: DevRef = Arc::new(RamDevice::new("ram", BS as u32, 64, 0, 10_000));
            let z = Arc::new(Zoned::create("z", ram.clone(), opts()).await.unwrap());
            z.write(0, &block(1), None, WriteHints::NONE).await.unwrap();
            let z2 = z.clone();
            let slow = spawn(async move {
                z2.write(1, &[block(2), block(3)].concat(), None, WriteHints::NONE).await
            });
            sleep_ns(1_000).await;
            assert_eq!(z.state.lock().table.write_pointer(0), 3, "accepted, not completed");
            z.persist(7).await.unwrap();
            slow.await.unwrap();
            drop(z);
            let z = Zoned::open("z", ram.clone(), opts()).await.unwrap();
            assert_eq!(z.state.lock().table.write_pointer(0), 1);
            let mut buf = vec![1u8; BS];
            z.read(1, &mut buf, None).await.unwrap();
            assert_eq!(buf, block(0));
            // Once it has completed, a flush persists it.
            z.write(1, &[block(2), block(3)].concat(), None, WriteHints::NONE).await.unwrap();
            z.flush().await.unwrap();
            drop(z);
            let z = Zoned::open("z", ram, opts()).await.unwrap();
            assert_eq!(z.state.lock().table.write_pointer(0), 3);
        });
    }

    #[test]
    fn the_completed_prefix_waits_for_out_of_order_completions() {
        let geo = opts().geometry();
        let mut st = State {
            table: ZoneTable::new(geo, 1).unwrap(),
            completed_blocks: vec![0],
            completed_beyond: vec![BTreeMap::new()],
            generation: 0,
        };
        st.complete(0, 2, 4);
        st.complete(0, 4, 5);
        assert_eq!(st.completed_blocks[0], 0);
        st.complete(0, 0, 2);
        assert_eq!(st.completed_blocks[0], 5);
        assert!(st.completed_beyond[0].is_empty());
    }

    #[test]
    fn a_torn_table_copy_falls_back_to_the_older_one() {
        run(RuntimeKind::Sim, 1, || async {
            let ram: DevRef = Arc::new(RamDevice::new("ram", BS as u32, 64, 0, 0));
            let z = Zoned::create("z", ram.clone(), opts()).await.unwrap();
            z.write(0, &block(1), None, WriteHints::NONE).await.unwrap();
            z.flush().await.unwrap(); // generation 1, copy 1
            z.write(1, &block(2), None, WriteHints::NONE).await.unwrap();
            z.flush().await.unwrap(); // generation 2, copy 0
                                      // Tear copy 0.
            ram.write(z.table_lba(0), &block(0xEE), None, WriteHints::NONE).await.unwrap();
            drop(z);
            let z = Zoned::open("z", ram.clone(), opts()).await.unwrap();
            assert_eq!(z.state.lock().table.write_pointer(0), 1);
            // Neither copy: not a zoned namespace.
            ram.write(z.table_lba(1), &block(0xEE), None, WriteHints::NONE).await.unwrap();
            assert!(Zoned::open("z", ram.clone(), opts()).await.is_err());
            let fresh = Zoned::open_or_create("z", ram, opts()).await.unwrap();
            assert_eq!(fresh.state.lock().table.write_pointer(0), 0);
        });
    }
}
