//! The on-disk format of `csal` (docs/csal.md, "On-disk format"): where each region of the fast
//! device lies, and the byte layouts of the superblock, the per-block record kept in each
//! block's metadata bytes (the paper's 64-byte padding), the state slots, the L2P pages and
//! the P2L tables. Every integer is little-endian.

use flashrig_blockdev::{DevError, DevResult};

/// "CSALSB01": the superblock's first eight bytes.
pub const SB_MAGIC: &[u8; 8] = b"CSALSB01";
/// "CSALST01": a state slot's first eight bytes.
pub const STATE_MAGIC: &[u8; 8] = b"CSALST01";
/// "CSALP2L1": a P2L table's first eight bytes.
pub const P2L_MAGIC: &[u8; 8] = b"CSALP2L1";

/// Bytes of a block record; members must store at least this many metadata bytes per block.
pub const MD_BYTES: usize = 40;
/// L2P entries per 4 KiB page (4 bytes each).
pub const L2P_PAGE_ENTRIES: usize = 1024;
/// An L2P entry that maps nothing (never written, or trimmed).
pub const UNMAPPED: u32 = u32::MAX;
/// Bytes of one P2L entry.
pub const P2L_ENTRY_BYTES: usize = 20;
/// Bytes of a state slot's header, and of one container's state in it.
const STATE_HEADER_BYTES: usize = 64;
const STATE_ENTRY_BYTES: usize = 16;

/// What a block holds, by its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// User data of one LBA.
    Data = 1,
    /// A trim of `count` LBAs from `lba`; the block's data bytes are unused.
    Trim = 2,
}

/// The record in a block's metadata bytes. Byte layout (40 bytes, the rest of the device's
/// metadata bytes are zero):
///
/// | bytes | field |
/// |---|---|
/// | 0..8 | block SID: the SID of the chunk the user write landed in; compaction and GC keep it |
/// | 8..16 | container SID: the SID of the chunk or zone the block was written to now |
/// | 16..24 | LBA |
/// | 24..26 | tenant |
/// | 26..28 | kind (1 data, 2 trim) |
/// | 28..32 | trim: LBAs trimmed; data: 0 |
/// | 32..36 | data: CRC32C of the block's data bytes; trim: the PBA the trim was first written at |
/// | 36..40 | CRC32C of bytes 0..36 |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub sid: u64,
    pub container_sid: u64,
    pub lba: u64,
    pub tenant: u16,
    pub kind: Kind,
    pub count: u32,
    pub data_crc: u32,
}

impl Record {
    pub fn encode(&self, out: &mut [u8]) {
        out.fill(0);
        out[0..8].copy_from_slice(&self.sid.to_le_bytes());
        out[8..16].copy_from_slice(&self.container_sid.to_le_bytes());
        out[16..24].copy_from_slice(&self.lba.to_le_bytes());
        out[24..26].copy_from_slice(&self.tenant.to_le_bytes());
        out[26..28].copy_from_slice(&(self.kind as u16).to_le_bytes());
        out[28..32].copy_from_slice(&self.count.to_le_bytes());
        out[32..36].copy_from_slice(&self.data_crc.to_le_bytes());
        let crc = crc32c::crc32c(&out[0..36]);
        out[36..40].copy_from_slice(&crc.to_le_bytes());
    }

    /// The record in `md`, if its checksum holds (a block never written has zeros, which fail).
    pub fn decode(md: &[u8]) -> Option<Record> {
        if md.len() < MD_BYTES || md[0..40].iter().all(|&b| b == 0) {
            return None;
        }
        if crc32c::crc32c(&md[0..36]) != u32_at(md, 36) {
            return None;
        }
        let kind = match u16::from_le_bytes([md[26], md[27]]) {
            1 => Kind::Data,
            2 => Kind::Trim,
            _ => return None,
        };
        Some(Record {
            sid: u64_at(md, 0),
            container_sid: u64_at(md, 8),
            lba: u64_at(md, 16),
            tenant: u16::from_le_bytes([md[24], md[25]]),
            kind,
            count: u32_at(md, 28),
            data_crc: u32_at(md, 32),
        })
    }

    /// A trim's original PBA (kept in the data-checksum field, which a trim does not need).
    pub fn origin(&self) -> u32 {
        self.data_crc
    }

    /// Whether `data` is what the record says the block holds (a torn write fails).
    pub fn data_matches(&self, data: &[u8]) -> bool {
        self.kind == Kind::Trim || crc32c::crc32c(data) == self.data_crc
    }
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Where everything lies. PBAs (the L2P's 32-bit values) number the chunks' blocks first,
/// then the zones' writable blocks: PBA `p < fast_data_blocks` is block
/// `data_start + p` of the fast device; otherwise `p - fast_data_blocks` is offset
/// `% zone_capacity` of zone `/ zone_capacity`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsalGeometry {
    pub block_size: u32,
    /// Metadata bytes per block on both members.
    pub md_bytes: u32,
    pub chunk_blocks: u64,
    pub chunks: u64,
    pub zones: u64,
    /// Zone size (the distance between zone starts) and writable capacity, in blocks.
    pub zone_blocks: u64,
    pub zone_capacity_blocks: u64,
    /// User-visible blocks (the csal device's capacity).
    pub user_blocks: u64,
    pub tenants: u16,
    /// Record blocks per chunk when the fast device has no metadata bytes (the paper's
    /// fallback: "merge the paddings as separate data blocks"), 0 when it has them.
    pub record_blocks_per_chunk: u64,
    /// Fast-device block offset of the record blocks (the fallback's region).
    pub record_start: u64,
    /// Blocks of one state slot (there are two, written alternately).
    pub state_blocks: u64,
    pub l2p_pages: u64,
    /// Blocks of the validity bitmaps written at checkpoints.
    pub bitmap_blocks: u64,
    /// Blocks of one chunk's and of one zone's P2L table.
    pub chunk_p2l_blocks: u64,
    pub zone_p2l_blocks: u64,
    /// Fast-device block offsets of the regions.
    pub state_start: u64,
    pub l2p_start: u64,
    pub bitmap_start: u64,
    pub p2l_start: u64,
    pub data_start: u64,
}

impl CsalGeometry {
    /// Lays the regions out on a fast device of `fast_blocks` blocks. `user_blocks` is decided
    /// by the caller from the zoned device's capacity.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        block_size: u32,
        md_bytes: u32,
        fast_blocks: u64,
        chunk_blocks: u64,
        zones: u64,
        zone_blocks: u64,
        zone_capacity_blocks: u64,
        user_blocks: u64,
        tenants: u16,
        fast_has_md: bool,
    ) -> DevResult<CsalGeometry> {
        let bs = block_size as u64;
        let per_block = |bytes: u64| bytes.div_ceil(bs);
        let l2p_pages = user_blocks.div_ceil(L2P_PAGE_ENTRIES as u64);
        let chunk_p2l_blocks = per_block(64 + chunk_blocks * P2L_ENTRY_BYTES as u64);
        let zone_p2l_blocks = per_block(64 + zone_capacity_blocks * P2L_ENTRY_BYTES as u64);
        // The number of chunks decides the metadata's size, which decides the number of
        // chunks: start from the upper bound and shrink until everything fits.
        let mut chunks = fast_blocks / chunk_blocks.max(1);
        loop {
            if chunks < 3 {
                return Err(DevError::Invalid(format!(
                    "csal: the fast device ({fast_blocks} blocks) holds fewer than 3 chunks of \
                     {chunk_blocks} blocks beside the metadata region (L2P {l2p_pages} pages)"
                )));
            }
            let containers = chunks + zones;
            let state_blocks =
                per_block((STATE_HEADER_BYTES + STATE_ENTRY_BYTES * containers as usize) as u64);
            let bitmap_blocks =
                per_block((chunks * chunk_blocks + zones * zone_capacity_blocks).div_ceil(8));
            let state_start = 1;
            let l2p_start = state_start + 2 * state_blocks;
            let bitmap_start = l2p_start + l2p_pages;
            let p2l_start = bitmap_start + bitmap_blocks;
            let record_start = p2l_start + chunks * chunk_p2l_blocks + zones * zone_p2l_blocks;
            let record_blocks_per_chunk =
                if fast_has_md { 0 } else { (chunk_blocks * md_bytes as u64).div_ceil(bs) };
            let data_start = record_start + chunks * record_blocks_per_chunk;
            if data_start + chunks * chunk_blocks <= fast_blocks {
                let total_pba = chunks * chunk_blocks + zones * zone_capacity_blocks;
                if total_pba >= UNMAPPED as u64 {
                    return Err(DevError::Invalid(format!(
                        "csal: {total_pba} physical blocks do not fit 32-bit L2P entries"
                    )));
                }
                return Ok(CsalGeometry {
                    block_size,
                    md_bytes,
                    chunk_blocks,
                    chunks,
                    zones,
                    zone_blocks,
                    zone_capacity_blocks,
                    user_blocks,
                    tenants,
                    record_blocks_per_chunk,
                    record_start,
                    state_blocks,
                    l2p_pages,
                    bitmap_blocks,
                    chunk_p2l_blocks,
                    zone_p2l_blocks,
                    state_start,
                    l2p_start,
                    bitmap_start,
                    p2l_start,
                    data_start,
                });
            }
            chunks -= 1;
        }
    }

    pub fn fast_data_blocks(&self) -> u64 {
        self.chunks * self.chunk_blocks
    }

    pub fn containers(&self) -> usize {
        (self.chunks + self.zones) as usize
    }

    /// Container index of a PBA: chunks `0..chunks`, zones `chunks..`.
    pub fn container_of(&self, pba: u32) -> usize {
        let p = pba as u64;
        if p < self.fast_data_blocks() {
            (p / self.chunk_blocks) as usize
        } else {
            (self.chunks + (p - self.fast_data_blocks()) / self.zone_capacity_blocks) as usize
        }
    }

    pub fn is_zone(&self, c: usize) -> bool {
        c as u64 >= self.chunks
    }

    /// Blocks a container can hold.
    pub fn capacity(&self, c: usize) -> u64 {
        if self.is_zone(c) {
            self.zone_capacity_blocks
        } else {
            self.chunk_blocks
        }
    }

    /// The first PBA of a container.
    pub fn first_pba(&self, c: usize) -> u64 {
        if self.is_zone(c) {
            self.fast_data_blocks() + (c as u64 - self.chunks) * self.zone_capacity_blocks
        } else {
            c as u64 * self.chunk_blocks
        }
    }

    /// The device (false: fast, true: zoned) and block of a PBA.
    pub fn locate(&self, pba: u32) -> (bool, u64) {
        let p = pba as u64;
        if p < self.fast_data_blocks() {
            (false, self.data_start + p)
        } else {
            let z = p - self.fast_data_blocks();
            (true, z / self.zone_capacity_blocks * self.zone_blocks + z % self.zone_capacity_blocks)
        }
    }

    /// The zone number of container `c`.
    pub fn zone_no(&self, c: usize) -> u64 {
        c as u64 - self.chunks
    }

    /// Fast-device block of container `c`'s P2L table.
    pub fn p2l_at(&self, c: usize) -> u64 {
        if self.is_zone(c) {
            self.p2l_start
                + self.chunks * self.chunk_p2l_blocks
                + self.zone_no(c) * self.zone_p2l_blocks
        } else {
            self.p2l_start + c as u64 * self.chunk_p2l_blocks
        }
    }

    pub fn p2l_blocks(&self, c: usize) -> u64 {
        if self.is_zone(c) {
            self.zone_p2l_blocks
        } else {
            self.chunk_p2l_blocks
        }
    }

    /// Offset of container `c`'s first bit in the validity bitmap.
    pub fn bitmap_offset(&self, c: usize) -> u64 {
        self.first_pba(c)
    }

    pub fn total_pba(&self) -> u64 {
        self.chunks * self.chunk_blocks + self.zones * self.zone_capacity_blocks
    }

    /// The tenant of an LBA: tenants split the LBA space into equal partitions.
    pub fn tenant_of(&self, lba: u64) -> u16 {
        let part = self.user_blocks.div_ceil(self.tenants.max(1) as u64).max(1);
        (lba / part) as u16
    }

    /// Where tenant `t`'s partition ends.
    pub fn partition_end(&self, t: u16) -> u64 {
        let part = self.user_blocks.div_ceil(self.tenants.max(1) as u64).max(1);
        ((t as u64 + 1) * part).min(self.user_blocks)
    }

    /// The superblock (block 0 of the fast device): magic, then the geometry as u64s
    /// (block size, metadata bytes, chunk blocks, chunks, zones, zone blocks, zone capacity,
    /// user blocks, tenants), then a CRC32C of everything before it.
    pub fn encode_superblock(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.block_size as usize];
        b[0..8].copy_from_slice(SB_MAGIC);
        let fields = self.sb_fields();
        for (i, f) in fields.iter().enumerate() {
            b[8 + i * 8..16 + i * 8].copy_from_slice(&f.to_le_bytes());
        }
        let end = 8 + fields.len() * 8;
        let crc = crc32c::crc32c(&b[..end]);
        b[end..end + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn sb_fields(&self) -> [u64; 10] {
        [
            self.block_size as u64,
            self.md_bytes as u64,
            self.chunk_blocks,
            self.chunks,
            self.zones,
            self.zone_blocks,
            self.zone_capacity_blocks,
            self.user_blocks,
            self.tenants as u64,
            self.record_blocks_per_chunk,
        ]
    }

    /// Checks that a superblock describes this geometry, naming what differs.
    pub fn check_superblock(&self, b: &[u8]) -> DevResult<()> {
        if &b[0..8] != SB_MAGIC {
            return Err(DevError::Invalid(
                "csal: the fast device holds no csal superblock (create formats it)".into(),
            ));
        }
        let names = [
            "block_size",
            "md_bytes",
            "chunk_blocks",
            "chunks",
            "zones",
            "zone_blocks",
            "zone_capacity_blocks",
            "user_blocks",
            "tenants",
            "record_blocks_per_chunk",
        ];
        let end = 8 + names.len() * 8;
        if crc32c::crc32c(&b[..end]) != u32_at(b, end) {
            return Err(DevError::Invalid("csal: the superblock's checksum does not match".into()));
        }
        for (i, want) in self.sb_fields().iter().enumerate() {
            let got = u64_at(b, 8 + i * 8);
            if got != *want {
                return Err(DevError::Invalid(format!(
                    "csal: the superblock says {} = {got}, the options give {want}",
                    names[i]
                )));
            }
        }
        Ok(())
    }
}

/// A container's state as persisted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CState {
    Free = 0,
    Open = 1,
    Closed = 2,
    /// Every valid block moved out; free once the next checkpoint is durable (the last
    /// checkpoint's L2P may still point into it).
    Released = 3,
}

impl CState {
    fn from_u32(v: u32) -> CState {
        match v {
            1 => CState::Open,
            2 => CState::Closed,
            3 => CState::Released,
            _ => CState::Free,
        }
    }
}

/// A state slot: the paper's "most recently synched SID, the chunk/zone status" plus the
/// clean flag and the checkpoint SID. Layout: magic (8), generation (8), checkpoint SID (8),
/// next SID (8), clean flag (8), bitmap generation (8: the generation whose checkpoint wrote
/// the validity bitmaps), reserved (12), CRC32C of the slot's bytes after the header and of
/// bytes 0..60 (4); then per container: state (4), reserved (4), SID (8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateSlot {
    pub generation: u64,
    pub ckpt_sid: u64,
    pub next_sid: u64,
    pub clean: bool,
    pub bitmap_generation: u64,
    pub containers: Vec<(CState, u64)>,
    /// Each container's top SID: the largest record SID it holds (see `Container::top_sid`).
    /// Stored as its excess over the container's SID in the entry's second u32 (0 in slots
    /// written before 2026-11-27, which reads as the container SID, the old rule);
    /// `u64::MAX` when the excess did not fit (recovery then always reads the container).
    pub top_sids: Vec<u64>,
}

impl StateSlot {
    pub fn encode(&self, blocks: u64, bs: usize) -> Vec<u8> {
        let mut b = vec![0u8; blocks as usize * bs];
        b[0..8].copy_from_slice(STATE_MAGIC);
        b[8..16].copy_from_slice(&self.generation.to_le_bytes());
        b[16..24].copy_from_slice(&self.ckpt_sid.to_le_bytes());
        b[24..32].copy_from_slice(&self.next_sid.to_le_bytes());
        b[32..40].copy_from_slice(&(self.clean as u64).to_le_bytes());
        b[40..48].copy_from_slice(&self.bitmap_generation.to_le_bytes());
        for (i, (s, sid)) in self.containers.iter().enumerate() {
            let at = STATE_HEADER_BYTES + i * STATE_ENTRY_BYTES;
            b[at..at + 4].copy_from_slice(&(*s as u32).to_le_bytes());
            let top = self.top_sids.get(i).copied().unwrap_or(*sid);
            let excess = top.saturating_sub(*sid).min(u32::MAX as u64) as u32;
            b[at + 4..at + 8].copy_from_slice(&excess.to_le_bytes());
            b[at + 8..at + 16].copy_from_slice(&sid.to_le_bytes());
        }
        let mut h = crc32c::crc32c(&b[STATE_HEADER_BYTES..]);
        h = crc32c::crc32c_append(h, &b[0..60]);
        b[60..64].copy_from_slice(&h.to_le_bytes());
        b
    }

    /// The slot in `b`, if whole (a torn slot fails its checksum).
    pub fn decode(b: &[u8], containers: usize) -> Option<StateSlot> {
        if &b[0..8] != STATE_MAGIC {
            return None;
        }
        let mut h = crc32c::crc32c(&b[STATE_HEADER_BYTES..]);
        h = crc32c::crc32c_append(h, &b[0..60]);
        if h != u32_at(b, 60) {
            return None;
        }
        let cs: Vec<(CState, u64)> = (0..containers)
            .map(|i| {
                let at = STATE_HEADER_BYTES + i * STATE_ENTRY_BYTES;
                (CState::from_u32(u32_at(b, at)), u64_at(b, at + 8))
            })
            .collect();
        let top_sids = (0..containers)
            .map(|i| match u32_at(b, STATE_HEADER_BYTES + i * STATE_ENTRY_BYTES + 4) {
                u32::MAX => u64::MAX,
                excess => cs[i].1 + excess as u64,
            })
            .collect();
        Some(StateSlot {
            generation: u64_at(b, 8),
            ckpt_sid: u64_at(b, 16),
            next_sid: u64_at(b, 24),
            clean: u64_at(b, 32) != 0,
            bitmap_generation: u64_at(b, 40),
            containers: cs,
            top_sids,
        })
    }
}

/// One P2L entry: block SID (8), LBA (4), trim count or 0 (4), a trim's original PBA (4).
/// An entry whose SID is 0 maps nothing (SIDs start at 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct P2lEntry {
    pub sid: u64,
    pub lba: u32,
    /// 0: data; n > 0: a trim of n LBAs.
    pub trim: u32,
    /// A trim's original PBA (where the user's trim was written, in its chunk).
    pub origin: u32,
}

/// A P2L table: magic (8), container SID (8), entries (8), CRC32C of the entries (4), then
/// the entries from offset 64.
pub fn encode_p2l(container_sid: u64, entries: &[P2lEntry], blocks: u64, bs: usize) -> Vec<u8> {
    let mut b = vec![0u8; blocks as usize * bs];
    b[0..8].copy_from_slice(P2L_MAGIC);
    b[8..16].copy_from_slice(&container_sid.to_le_bytes());
    b[16..24].copy_from_slice(&(entries.len() as u64).to_le_bytes());
    for (i, e) in entries.iter().enumerate() {
        let at = 64 + i * P2L_ENTRY_BYTES;
        b[at..at + 8].copy_from_slice(&e.sid.to_le_bytes());
        b[at + 8..at + 12].copy_from_slice(&e.lba.to_le_bytes());
        b[at + 12..at + 16].copy_from_slice(&e.trim.to_le_bytes());
        b[at + 16..at + 20].copy_from_slice(&e.origin.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b[64..64 + entries.len() * P2L_ENTRY_BYTES]);
    b[24..28].copy_from_slice(&crc.to_le_bytes());
    b
}

/// The P2L table in `b` if it is whole and belongs to the container's life with SID `sid`.
pub fn decode_p2l(b: &[u8], sid: u64) -> Option<Vec<P2lEntry>> {
    if &b[0..8] != P2L_MAGIC || u64_at(b, 8) != sid {
        return None;
    }
    let n = u64_at(b, 16) as usize;
    if 64 + n * P2L_ENTRY_BYTES > b.len()
        || crc32c::crc32c(&b[64..64 + n * P2L_ENTRY_BYTES]) != u32_at(b, 24)
    {
        return None;
    }
    Some(
        (0..n)
            .map(|i| {
                let at = 64 + i * P2L_ENTRY_BYTES;
                P2lEntry {
                    sid: u64_at(b, at),
                    lba: u32_at(b, at + 8),
                    trim: u32_at(b, at + 12),
                    origin: u32_at(b, at + 16),
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_rejects_damage() {
        let r = Record {
            sid: 7,
            container_sid: 9,
            lba: 1234,
            tenant: 3,
            kind: Kind::Data,
            count: 0,
            data_crc: 55,
        };
        let mut md = vec![0u8; 64];
        r.encode(&mut md);
        assert_eq!(Record::decode(&md), Some(r));
        md[17] ^= 1;
        assert_eq!(Record::decode(&md), None);
        assert_eq!(Record::decode(&[0u8; 64]), None);
    }

    #[test]
    fn state_and_p2l_round_trip() {
        let s = StateSlot {
            generation: 3,
            ckpt_sid: 5,
            next_sid: 9,
            clean: true,
            bitmap_generation: 2,
            containers: vec![(CState::Open, 4), (CState::Released, 2), (CState::Free, 0)],
            top_sids: vec![4, 7, u64::MAX],
        };
        let b = s.encode(1, 4096);
        assert_eq!(StateSlot::decode(&b, 3), Some(s));
        let e = vec![
            P2lEntry { sid: 4, lba: 10, trim: 0, origin: 0 },
            P2lEntry { sid: 4, lba: 20, trim: 3, origin: 77 },
        ];
        let b = encode_p2l(4, &e, 1, 4096);
        assert_eq!(decode_p2l(&b, 4), Some(e));
        assert_eq!(decode_p2l(&b, 5), None);
    }
}
