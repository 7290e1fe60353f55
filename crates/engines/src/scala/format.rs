//! On-member formats of `scala` (byte layouts in docs/scala.md).
//!
//! - The **persistent mapping table** (PMT, §5.4) is sliced per block into each block's
//!   metadata bytes (the SSD's OOB), written by the same program operation as the data:
//!   [`Oob`].
//! - A **checkpoint** holds the AMT, the converted stripes and the grant window: [`Checkpoint`];
//!   a **delta** holds only the AMT pages changed since the checkpoint before it: [`Delta`].
//! - The **superblock** names the geometry; the **trim journal** holds one record per trim.

use flashrig_blockdev::{DevError, DevResult};

use super::layout::{ScalaGeometry, CKPT_HEADER_BYTES};

/// Metadata bytes per block the engine needs from its members.
pub const MD_BYTES: usize = 16;

/// Version 3: every block record carries a crc32c and names the AFA block it is a copy of
/// (docs/scala.md, "Integrity"). Arrays of versions 1 and 2 are refused.
pub const SUPER_MAGIC: &[u8; 8] = b"FRSCALA3";
const CKPT_MAGIC: &[u8; 8] = b"FRSCCKP1";
const DELTA_MAGIC: &[u8; 8] = b"FRSCDLT1";

/// AMT entries per page of a delta (one 4 KiB block of 8-byte entries).
pub const AMT_PAGE_ENTRIES: usize = 512;
const TRIM_MAGIC: &[u8; 8] = b"FRSCTRM1";

/// The slice of the PMT stored with one member block (16 bytes):
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | user block number (LE u32) |
/// | 4..8 | timestamp of the write that produced the version (LE u32, 0 = never written) |
/// | 8..12 | AFA block number of the copy's home: stripe, slot and offset (LE u32) |
/// | 12..16 | crc32c of the block's data, then of bytes 0..12 |
///
/// The primary copy and the m backup copies of a block carry the same record: the AFA block
/// names the block's place in the stripe, not the member LBA the copy sits at. The SSD's
/// conversion computes the parity chunk's metadata over the backup copies' records, and
/// recovery compares it with the parity of the primary copies' records (§5.4), so the records
/// of the copies must be equal. The reader knows the AFA block of every place it reads (an HH
/// chunk, or a VH the HGMT names), so a record found at another place than its own (a
/// misdirected write) fails, as does a place that holds an older version than the AMT maps
/// there (a lost write): the AMT keeps each block's timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Oob {
    pub user_block: u32,
    pub ts: u32,
    pub afa: u32,
}

/// What a block's metadata says once checked against the block's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seal {
    /// No record (timestamp 0): never written since the place was last trimmed.
    Unwritten,
    /// A record whose checksum matches the data.
    Valid(Oob),
    /// A record whose checksum does not match: rot in the data or the metadata, a torn write
    /// on a member without atomic metadata, or a block marked corrupt by a move
    /// ([`Oob::encode_poisoned`]).
    Invalid,
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl Oob {
    fn crc(data: &[u8], record: &[u8]) -> u32 {
        crc32c::crc32c_append(crc32c::crc32c(data), &record[..12])
    }

    /// Encodes the record of a copy holding `data` into `out` (at least [`MD_BYTES`]).
    pub fn encode(&self, data: &[u8], out: &mut [u8]) {
        out[..MD_BYTES].fill(0);
        out[0..4].copy_from_slice(&self.user_block.to_le_bytes());
        out[4..8].copy_from_slice(&self.ts.to_le_bytes());
        out[8..12].copy_from_slice(&self.afa.to_le_bytes());
        let crc = Self::crc(data, out);
        out[12..16].copy_from_slice(&crc.to_le_bytes());
    }

    /// Encodes a record whose checksum never matches `data`: a block that was corrupt beyond
    /// redundancy when GC moved it keeps failing its check at its new place, instead of
    /// being laundered by a fresh checksum over wrong data.
    pub fn encode_poisoned(&self, data: &[u8], out: &mut [u8]) {
        self.encode(data, out);
        let crc = le32(out, 12) ^ u32::MAX;
        out[12..16].copy_from_slice(&crc.to_le_bytes());
    }

    /// The record in `md` checked against `data`. Never panics on what a member returns:
    /// metadata shorter than a record is [`Seal::Invalid`].
    pub fn check(md: &[u8], data: &[u8]) -> Seal {
        if md.len() < MD_BYTES {
            return Seal::Invalid;
        }
        let ts = le32(md, 4);
        if ts == 0 {
            return Seal::Unwritten;
        }
        if le32(md, 12) != Self::crc(data, md) {
            return Seal::Invalid;
        }
        Seal::Valid(Oob { user_block: le32(md, 0), ts, afa: le32(md, 8) })
    }
}

/// The superblock: the geometry the array was created with (block 0 of every member).
pub fn encode_superblock(g: &ScalaGeometry, block: &mut [u8]) {
    block.fill(0);
    block[0..8].copy_from_slice(SUPER_MAGIC);
    let fields = [
        g.k as u64,
        g.m as u64,
        g.chunk_blocks,
        g.block_size as u64,
        g.member_blocks,
        g.hh,
        g.vh_per_member,
        g.user_blocks,
    ];
    for (i, f) in fields.iter().enumerate() {
        block[8 + i * 8..16 + i * 8].copy_from_slice(&f.to_le_bytes());
    }
    let crc = crc32c::crc32c(&block[..8 + fields.len() * 8]);
    block[100..104].copy_from_slice(&crc.to_le_bytes());
}

/// Whether `block` starts like a scala superblock of any format version.
pub fn is_scala_superblock(block: &[u8]) -> bool {
    block.len() >= 8 && block[..7] == SUPER_MAGIC[..7]
}

/// Checks that `block` is a superblock of geometry `g`.
pub fn check_superblock(g: &ScalaGeometry, block: &[u8], member: &str) -> DevResult<()> {
    let mut want = vec![0u8; block.len()];
    encode_superblock(g, &mut want);
    if is_scala_superblock(block) && block[0..8] != *SUPER_MAGIC {
        return Err(DevError::Invalid(format!(
            "scala: member {member} holds an array of another format version ({}; this \
             version reads {}): re-create the array",
            String::from_utf8_lossy(&block[..8]),
            String::from_utf8_lossy(SUPER_MAGIC)
        )));
    }
    if block.len() < 104 || block[0..8] != *SUPER_MAGIC {
        return Err(DevError::Invalid(format!(
            "scala: member {member} holds no scala superblock (was the array created?)"
        )));
    }
    if block[..104] != want[..104] {
        return Err(DevError::Invalid(format!(
            "scala: member {member}'s superblock describes another geometry than k = {}, m = {}, \
             chunk_blocks = {} on these members",
            g.k, g.m, g.chunk_blocks
        )));
    }
    Ok(())
}

/// What a checkpoint covers (§5.4 "periodical checkpoints").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// Checkpoint sequence number; slot = seq % 2.
    pub seq: u64,
    /// The next timestamp to hand out when it was taken.
    pub next_ts: u32,
    /// AMT: per user block `ts << 32 | afa block` (0: never written; afa block `u32::MAX`:
    /// trimmed).
    pub amt: Vec<u64>,
    /// Per stripe: 1 when converted (its blocks are all in `amt`), else 0.
    pub converted: Vec<u8>,
    /// The stripes that may be written before the next checkpoint (granted, open, or in the
    /// grant window): recovery scans exactly these.
    pub scan: Vec<u32>,
}

impl Checkpoint {
    /// Encodes into whole chunks of `g`.
    pub fn encode(&self, g: &ScalaGeometry) -> Vec<u8> {
        let bytes = (g.ckpt_chunks * g.chunk_blocks * g.block_size as u64) as usize;
        let mut out = vec![0u8; bytes];
        out[0..8].copy_from_slice(CKPT_MAGIC);
        out[8..16].copy_from_slice(&self.seq.to_le_bytes());
        out[16..20].copy_from_slice(&self.next_ts.to_le_bytes());
        out[20..28].copy_from_slice(&(self.amt.len() as u64).to_le_bytes());
        out[28..36].copy_from_slice(&(self.converted.len() as u64).to_le_bytes());
        out[36..44].copy_from_slice(&(self.scan.len() as u64).to_le_bytes());
        let mut p = CKPT_HEADER_BYTES as usize;
        for e in &self.amt {
            out[p..p + 8].copy_from_slice(&e.to_le_bytes());
            p += 8;
        }
        out[p..p + self.converted.len()].copy_from_slice(&self.converted);
        p += self.converted.len();
        // The scan list goes in the header block's tail when it fits, else after the stripes.
        let scan_at = p;
        for s in &self.scan {
            out[p..p + 4].copy_from_slice(&s.to_le_bytes());
            p += 4;
        }
        out[44..52].copy_from_slice(&(scan_at as u64).to_le_bytes());
        out[52..60].copy_from_slice(&(p as u64).to_le_bytes());
        let crc =
            crc32c::crc32c_append(crc32c::crc32c(&out[..60]), &out[CKPT_HEADER_BYTES as usize..p]);
        out[60..64].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a checkpoint, or `None` when the slot holds none or a torn one.
    pub fn decode(buf: &[u8]) -> Option<Checkpoint> {
        if buf.len() < CKPT_HEADER_BYTES as usize || buf[0..8] != *CKPT_MAGIC {
            return None;
        }
        let u64_at = |p: usize| u64::from_le_bytes(buf[p..p + 8].try_into().unwrap());
        let end = u64_at(52) as usize;
        if end > buf.len() || end < CKPT_HEADER_BYTES as usize {
            return None;
        }
        let crc = crc32c::crc32c_append(
            crc32c::crc32c(&buf[..60]),
            &buf[CKPT_HEADER_BYTES as usize..end],
        );
        if u32::from_le_bytes(buf[60..64].try_into().unwrap()) != crc {
            return None;
        }
        let n_amt = u64_at(20) as usize;
        let n_conv = u64_at(28) as usize;
        let n_scan = u64_at(36) as usize;
        // A checkpoint whose checksum matches can still describe lists that do not fit (a
        // crafted or buggy one): it is refused like a torn one rather than read out of bounds.
        let start = CKPT_HEADER_BYTES as usize;
        let conv_at = n_amt.checked_mul(8).and_then(|b| b.checked_add(start))?;
        let conv_end = conv_at.checked_add(n_conv)?;
        let scan_at = u64_at(44) as usize;
        let scan_end = n_scan.checked_mul(4).and_then(|b| b.checked_add(scan_at))?;
        if conv_end > end || scan_end > end || scan_at < start {
            return None;
        }
        let mut p = start;
        let amt = (0..n_amt).map(|i| u64_at(p + i * 8)).collect();
        p += n_amt * 8;
        let converted = buf[p..p + n_conv].to_vec();
        p = scan_at;
        let scan = (0..n_scan)
            .map(|i| u32::from_le_bytes(buf[p + i * 4..p + i * 4 + 4].try_into().unwrap()))
            .collect();
        Some(Checkpoint {
            seq: u64_at(8),
            next_ts: u32::from_le_bytes(buf[16..20].try_into().unwrap()),
            amt,
            converted,
            scan,
        })
    }
}

/// An incremental checkpoint: the AMT pages that changed since the previous checkpoint (full or
/// delta) of the same base, and the converted stripes and grant window as of now. Deltas of a
/// base are appended to the delta log of the members that hold the base, in sequence; recovery
/// applies them in order to the base.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    pub seq: u64,
    /// The full checkpoint this delta extends.
    pub base_seq: u64,
    pub next_ts: u32,
    /// Changed AMT pages: (page index, its `AMT_PAGE_ENTRIES` entries; the last page of the
    /// table may be shorter).
    pub pages: Vec<(u32, Vec<u64>)>,
    /// Per stripe: converted (a bitset, stripe `s` at bit `s % 8` of byte `s / 8`).
    pub converted: Vec<u8>,
    pub stripes: u64,
    pub scan: Vec<u32>,
}

impl Delta {
    /// Bytes of the encoding, in whole blocks of `block_bytes`.
    pub fn encoded_len(&self, block_bytes: usize) -> usize {
        let body = self.pages.len() * 4
            + self.pages.iter().map(|(_, e)| e.len() * 8).sum::<usize>()
            + self.converted.len()
            + self.scan.len() * 4;
        (CKPT_HEADER_BYTES as usize + body).div_ceil(block_bytes) * block_bytes
    }

    /// Encodes: a header block, then page indices (u32), page entries (u64, page by page),
    /// the converted bitset and the scan list (u32), padded to whole blocks. Header: magic,
    /// seq, base_seq (u64), next_ts (u32), counts of pages, entries, converted bytes, stripes
    /// and scan entries (u64), the encoded length (u64), crc32c of header bytes 0..76 and the
    /// body at 76..80.
    pub fn encode(&self, block_bytes: usize) -> Vec<u8> {
        let len = self.encoded_len(block_bytes);
        let mut out = vec![0u8; len];
        let entries: usize = self.pages.iter().map(|(_, e)| e.len()).sum();
        out[0..8].copy_from_slice(DELTA_MAGIC);
        out[8..16].copy_from_slice(&self.seq.to_le_bytes());
        out[16..24].copy_from_slice(&self.base_seq.to_le_bytes());
        out[24..28].copy_from_slice(&self.next_ts.to_le_bytes());
        out[28..36].copy_from_slice(&(self.pages.len() as u64).to_le_bytes());
        out[36..44].copy_from_slice(&(entries as u64).to_le_bytes());
        out[44..52].copy_from_slice(&(self.converted.len() as u64).to_le_bytes());
        out[52..60].copy_from_slice(&self.stripes.to_le_bytes());
        out[60..68].copy_from_slice(&(self.scan.len() as u64).to_le_bytes());
        out[68..76].copy_from_slice(&(len as u64).to_le_bytes());
        let mut p = CKPT_HEADER_BYTES as usize;
        for (i, _) in &self.pages {
            out[p..p + 4].copy_from_slice(&i.to_le_bytes());
            p += 4;
        }
        for (_, e) in &self.pages {
            for v in e {
                out[p..p + 8].copy_from_slice(&v.to_le_bytes());
                p += 8;
            }
        }
        out[p..p + self.converted.len()].copy_from_slice(&self.converted);
        p += self.converted.len();
        for s in &self.scan {
            out[p..p + 4].copy_from_slice(&s.to_le_bytes());
            p += 4;
        }
        let crc =
            crc32c::crc32c_append(crc32c::crc32c(&out[..76]), &out[CKPT_HEADER_BYTES as usize..]);
        out[76..80].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes the delta at the start of `buf` and its length, or `None` when there is none
    /// or a torn one. `amt_len` is the AMT's length (the last page may be shorter).
    pub fn decode(buf: &[u8], amt_len: usize) -> Option<(Delta, usize)> {
        if buf.len() < CKPT_HEADER_BYTES as usize || buf[0..8] != *DELTA_MAGIC {
            return None;
        }
        let u64_at = |p: usize| u64::from_le_bytes(buf[p..p + 8].try_into().unwrap());
        let len = u64_at(68) as usize;
        if len > buf.len() || len < CKPT_HEADER_BYTES as usize {
            return None;
        }
        let crc = crc32c::crc32c_append(
            crc32c::crc32c(&buf[..76]),
            &buf[CKPT_HEADER_BYTES as usize..len],
        );
        if u32::from_le_bytes(buf[76..80].try_into().unwrap()) != crc {
            return None;
        }
        let (n_pages, n_entries, n_conv, n_scan) =
            (u64_at(28) as usize, u64_at(36) as usize, u64_at(44) as usize, u64_at(60) as usize);
        let mut p = CKPT_HEADER_BYTES as usize;
        let need =
            [n_pages.checked_mul(4), n_entries.checked_mul(8), Some(n_conv), n_scan.checked_mul(4)]
                .into_iter()
                .try_fold(p, |acc, part| acc.checked_add(part?));
        if need.is_none_or(|need| need > len) {
            return None;
        }
        let u32_at = |p: usize| u32::from_le_bytes(buf[p..p + 4].try_into().unwrap());
        let idx: Vec<u32> = (0..n_pages).map(|i| u32_at(p + i * 4)).collect();
        p += n_pages * 4;
        let mut pages = Vec::with_capacity(n_pages);
        let mut left = n_entries;
        for i in idx {
            let first = i as usize * AMT_PAGE_ENTRIES;
            let n = AMT_PAGE_ENTRIES.min(amt_len.saturating_sub(first)).min(left);
            pages.push((i, (0..n).map(|k| u64_at(p + k * 8)).collect()));
            p += n * 8;
            left -= n;
        }
        let converted = buf[p..p + n_conv].to_vec();
        p += n_conv;
        let scan = (0..n_scan).map(|i| u32_at(p + i * 4)).collect();
        let d = Delta {
            seq: u64_at(8),
            base_seq: u64_at(16),
            next_ts: u32::from_le_bytes(buf[24..28].try_into().unwrap()),
            pages,
            converted,
            stripes: u64_at(52),
            scan,
        };
        Some((d, len))
    }
}

/// One trim, as a journal block: user blocks `first..first + count` were trimmed at `ts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrimRecord {
    pub first: u64,
    pub count: u64,
    pub ts: u32,
}

impl TrimRecord {
    pub fn encode(&self, block: &mut [u8]) {
        block.fill(0);
        block[0..8].copy_from_slice(TRIM_MAGIC);
        block[8..16].copy_from_slice(&self.first.to_le_bytes());
        block[16..24].copy_from_slice(&self.count.to_le_bytes());
        block[24..28].copy_from_slice(&self.ts.to_le_bytes());
        let crc = crc32c::crc32c(&block[..28]);
        block[28..32].copy_from_slice(&crc.to_le_bytes());
    }

    pub fn decode(block: &[u8]) -> Option<TrimRecord> {
        if block[0..8] != *TRIM_MAGIC
            || u32::from_le_bytes(block[28..32].try_into().unwrap()) != crc32c::crc32c(&block[..28])
        {
            return None;
        }
        Some(TrimRecord {
            first: u64::from_le_bytes(block[8..16].try_into().unwrap()),
            count: u64::from_le_bytes(block[16..24].try_into().unwrap()),
            ts: u32::from_le_bytes(block[24..28].try_into().unwrap()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oob_round_trips_and_checks_data_address_and_generation() {
        let data = vec![7u8; 4096];
        let o = Oob { user_block: 42, ts: 9, afa: 1234 };
        let mut md = [0u8; 16];
        o.encode(&data, &mut md);
        assert_eq!(Oob::check(&md, &data), Seal::Valid(o));
        let mut flipped = data.clone();
        flipped[100] ^= 4;
        assert_eq!(Oob::check(&md, &flipped), Seal::Invalid, "bit rot in the data");
        for byte in [0, 5, 9, 13] {
            let mut bad = md;
            bad[byte] ^= 1;
            assert_eq!(Oob::check(&bad, &data), Seal::Invalid, "rot in record byte {byte}");
        }
        assert_eq!(Oob::check(&[0u8; 16], &data), Seal::Unwritten);
        assert_eq!(Oob::check(&md[..8], &data), Seal::Invalid, "short metadata");
        o.encode_poisoned(&data, &mut md);
        assert_eq!(Oob::check(&md, &data), Seal::Invalid);
    }

    #[test]
    fn superblocks_of_older_versions_are_named_as_such() {
        let g = ScalaGeometry::new(2, 1, 16, 4096, 1 << 14, 2048, 0.05).unwrap();
        let mut b = vec![0u8; 4096];
        encode_superblock(&g, &mut b);
        assert!(check_superblock(&g, &b, "m0").is_ok());
        b[..8].copy_from_slice(b"FRSCALA2");
        let e = check_superblock(&g, &b, "m0").unwrap_err().to_string();
        assert!(e.contains("another format version (FRSCALA2"), "{e}");
        assert!(check_superblock(&g, &[0u8; 4096], "m0").is_err());
    }

    #[test]
    fn checkpoints_round_trip_and_reject_torn_ones() {
        let g = ScalaGeometry::new(2, 1, 16, 4096, 1 << 14, 2048, 0.05).unwrap();
        let c = Checkpoint {
            seq: 3,
            next_ts: 77,
            amt: (0..g.user_blocks).map(|i| i * 3).collect(),
            converted: (0..g.hh).map(|s| (s % 2) as u8).collect(),
            scan: vec![1, 5, 9],
        };
        let mut buf = c.encode(&g);
        assert_eq!(Checkpoint::decode(&buf), Some(c));
        buf[5000] ^= 1;
        assert_eq!(Checkpoint::decode(&buf), None);
    }

    #[test]
    fn a_checkpoint_whose_lists_do_not_fit_is_refused_even_with_a_matching_checksum() {
        let g = ScalaGeometry::new(2, 1, 16, 4096, 1 << 14, 2048, 0.05).unwrap();
        let c = Checkpoint {
            seq: 1,
            next_ts: 2,
            amt: vec![7; 64],
            converted: vec![1; 8],
            scan: vec![3],
        };
        let good = c.encode(&g);
        let end = u64::from_le_bytes(good[52..60].try_into().unwrap()) as usize;
        // Field offsets: 20 AMT entries, 28 converted bytes, 36 scan entries, 44 scan offset.
        for (at, value) in [(20, u64::MAX / 4), (28, u64::MAX), (36, 1 << 40), (44, u64::MAX - 2)] {
            let mut buf = good.clone();
            buf[at..at + 8].copy_from_slice(&value.to_le_bytes());
            let crc = crc32c::crc32c_append(
                crc32c::crc32c(&buf[..60]),
                &buf[CKPT_HEADER_BYTES as usize..end],
            );
            buf[60..64].copy_from_slice(&crc.to_le_bytes());
            assert_eq!(Checkpoint::decode(&buf), None, "field at byte {at} = {value}");
        }
    }

    #[test]
    fn deltas_round_trip_follow_each_other_and_reject_torn_ones() {
        let amt_len = 3 * AMT_PAGE_ENTRIES + 100;
        let d = Delta {
            seq: 8,
            base_seq: 5,
            next_ts: 1234,
            pages: vec![
                (1, (0..AMT_PAGE_ENTRIES as u64).collect()),
                (3, (0..100u64).map(|i| i << 32 | 7).collect()),
            ],
            converted: vec![0b1010_0001, 0xff],
            stripes: 16,
            scan: vec![4, 9],
        };
        let mut log = d.encode(4096);
        assert_eq!(log.len() % 4096, 0);
        let next = Delta { seq: 9, pages: vec![], ..d.clone() };
        log.extend(next.encode(4096));
        let (got, len) = Delta::decode(&log, amt_len).expect("first");
        assert_eq!(got, d);
        let (got2, _) = Delta::decode(&log[len..], amt_len).expect("second");
        assert_eq!(got2, next);
        log[4096 + 10] ^= 1;
        assert!(Delta::decode(&log, amt_len).is_none(), "a torn delta ends the chain");
        assert!(Delta::decode(&vec![0u8; 8192], amt_len).is_none());
    }

    #[test]
    fn trim_records_round_trip() {
        let r = TrimRecord { first: 10, count: 5, ts: 99 };
        let mut b = vec![0u8; 4096];
        r.encode(&mut b);
        assert_eq!(TrimRecord::decode(&b), Some(r));
        b[9] ^= 1;
        assert_eq!(TrimRecord::decode(&b), None);
    }
}
