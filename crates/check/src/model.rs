//! The reference model: what every block of a device must hold now, and what it may hold after
//! a crash.
//!
//! The model follows the block-device contract (`flashrig_blockdev::BlockDevice`): a completed
//! write is visible to later reads; it is durable once a flush *issued after it completed* has
//! completed (or at once with FUA); a trim makes blocks read as zeros, durably like a write.
//! A crash may therefore leave each block holding its durable content or any content written
//! to it since (completed or still in flight), independently of its neighbours: devices do not
//! promise that a multi-block write lands atomically.
//!
//! Metadata bytes are part of the block: on a device that stores them atomically with the data
//! (`caps.md_atomic`: RAM, an SSD's OOB area) a crash leaves a block's data and metadata from
//! the same write; on one that does not (a file with a metadata sidecar) they may come from
//! different writes among those allowed, and the model accepts that for unflushed writes only.
//!
//! The model never holds block bytes: contents are named by (lba, version) and regenerated with
//! [`crate::pattern`], so a model of a terabyte device costs a few words per written block.

use std::collections::{BTreeSet, HashMap};

use crate::pattern::{decode_block, fill_md, BlockContent};

/// What a block holds, as the model names it: which write its data came from and which
/// write its metadata came from (`None`: zeros).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expect {
    pub data: Option<u64>,
    pub md: Option<u64>,
}

impl Expect {
    /// Zeros, data and metadata: never written, or trimmed.
    pub const ZERO: Expect = Expect { data: None, md: None };

    /// What a write of `version` leaves (its metadata zeros when it carried none).
    pub fn written(version: u64, md: bool) -> Expect {
        Expect { data: Some(version), md: md.then_some(version) }
    }
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.data, self.md) {
            (None, None) => f.write_str("zeros"),
            (Some(d), None) => write!(f, "version {d}"),
            (Some(d), Some(m)) if d == m => write!(f, "version {d} with metadata"),
            (Some(d), Some(m)) => write!(f, "version {d} with the metadata of version {m}"),
            (None, Some(m)) => write!(f, "zeros with the metadata of version {m}"),
        }
    }
}

/// One change to a block that is not yet known to be durable.
#[derive(Clone, Copy, Debug)]
struct Pending {
    /// Completion stamp, `None` while the command is in flight.
    done_at: Option<u64>,
    content: Expect,
}

#[derive(Clone, Debug)]
struct Block {
    durable: Expect,
    current: Expect,
    /// Changes since `durable`, in issue order. Commands touching one block never overlap in
    /// flight (drivers guarantee it), so issue order is also completion order.
    pending: Vec<Pending>,
}

impl Default for Block {
    fn default() -> Self {
        Block { durable: Expect::ZERO, current: Expect::ZERO, pending: Vec::new() }
    }
}

/// A flush's view of the model when it was issued: every change completed before this stamp
/// becomes durable when the flush completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushToken(u64);

/// The reference model of one device.
#[derive(Clone, Debug)]
pub struct Model {
    block_size: usize,
    md_bytes: usize,
    salt: u64,
    blocks: HashMap<u64, Block>,
    /// Blocks with pending changes.
    dirty: BTreeSet<u64>,
    /// Completion counter: stamps order completions against flush issues.
    stamp: u64,
    last_version: u64,
    /// Whether the device writes a block's metadata atomically with its data.
    md_atomic: bool,
    /// Set for devices that return a 64-bit fingerprint of each block instead of its bytes
    /// (the emulated SSD's payload mode `tag`): reads are checked against the fingerprint of
    /// what the block should hold.
    tag_of: Option<fn(&[u8]) -> u64>,
}

/// A read that does not match the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub lba: u64,
    pub expected: String,
    pub found: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lba {}: expected {}, read {}", self.lba, self.expected, self.found)
    }
}

impl Model {
    /// A model of a device whose blocks are all zeros. `salt` tells this run's blocks from any
    /// other run's.
    pub fn new(block_size: u32, md_bytes: u32, salt: u64) -> Self {
        Model {
            block_size: block_size as usize,
            md_bytes: md_bytes as usize,
            salt,
            blocks: HashMap::new(),
            dirty: BTreeSet::new(),
            stamp: 0,
            last_version: 0,
            md_atomic: true,
            tag_of: None,
        }
    }

    /// A model of `info`'s device (block size, metadata bytes, whether metadata is atomic).
    pub fn for_device(info: &flashrig_blockdev::DeviceInfo, salt: u64) -> Self {
        let mut m = Model::new(info.block_size, info.md_bytes_per_block, salt);
        m.md_atomic = info.caps.md_atomic;
        m
    }

    /// Says whether the device writes metadata atomically with its block; when it does not, a
    /// crash may leave an unflushed block's data and metadata from different writes.
    pub fn set_md_atomic(&mut self, atomic: bool) {
        self.md_atomic = atomic;
    }

    /// Checks reads as fingerprints: a block reads as `tag_of(expected bytes)` in its first 8
    /// bytes (little endian) followed by zeros, and a block never written reads as zeros.
    pub fn set_tag_mode(&mut self, tag_of: fn(&[u8]) -> u64) {
        self.tag_of = Some(tag_of);
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn md_bytes(&self) -> usize {
        self.md_bytes
    }

    pub fn salt(&self) -> u64 {
        self.salt
    }

    /// A fresh version number for a write (versions are unique across the model).
    pub fn next_version(&mut self) -> u64 {
        self.last_version += 1;
        self.last_version
    }

    /// Fills `data` (and `md`, when given) with what a write of `version` at `lba` stores.
    pub fn fill(&self, lba: u64, version: u64, data: &mut [u8], md: Option<&mut [u8]>) {
        crate::pattern::fill_blocks(data, self.block_size, lba, version, self.salt);
        if let Some(md) = md {
            for (i, m) in md.chunks_exact_mut(self.md_bytes).enumerate() {
                fill_md(m, lba + i as u64, version, self.salt);
            }
        }
    }

    fn issue(&mut self, lba: u64, blocks: u64, content: impl Fn(u64) -> Expect) {
        for l in lba..lba + blocks {
            self.blocks
                .entry(l)
                .or_default()
                .pending
                .push(Pending { done_at: None, content: content(l) });
            self.dirty.insert(l);
        }
    }

    fn complete(&mut self, lba: u64, blocks: u64, content: impl Fn(u64) -> Expect, durable: bool) {
        self.stamp += 1;
        let stamp = self.stamp;
        for l in lba..lba + blocks {
            let b = self.blocks.get_mut(&l).expect("completed command was issued");
            let c = content(l);
            let p = b
                .pending
                .iter_mut()
                .find(|p| p.done_at.is_none() && p.content == c)
                .expect("completed command is pending");
            p.done_at = Some(stamp);
            b.current = c;
            if durable {
                // FUA: this change and everything before it on this block is durable.
                b.durable = c;
                b.pending.clear();
                self.dirty.remove(&l);
            }
        }
    }

    /// A write of `version` over `blocks` blocks at `lba` was submitted.
    pub fn write_issued(&mut self, lba: u64, blocks: u64, version: u64, md: bool) {
        self.issue(lba, blocks, |_| Expect::written(version, md));
    }

    /// That write completed successfully; `fua` when it was a forced-unit-access write.
    pub fn write_done(&mut self, lba: u64, blocks: u64, version: u64, md: bool, fua: bool) {
        self.complete(lba, blocks, |_| Expect::written(version, md), fua);
    }

    pub fn trim_issued(&mut self, lba: u64, blocks: u64) {
        self.issue(lba, blocks, |_| Expect::ZERO);
    }

    pub fn trim_done(&mut self, lba: u64, blocks: u64) {
        self.complete(lba, blocks, |_| Expect::ZERO, false);
    }

    /// A flush was submitted now.
    pub fn flush_issued(&self) -> FlushToken {
        FlushToken(self.stamp)
    }

    /// A flush completed: what had completed when it was issued is durable.
    pub fn flush_done(&mut self, token: FlushToken) {
        let mut clean = Vec::new();
        for &l in &self.dirty {
            let b = self.blocks.get_mut(&l).expect("dirty block exists");
            let covered = b.pending.iter().rposition(|p| p.done_at.is_some_and(|s| s <= token.0));
            if let Some(i) = covered {
                b.durable = b.pending[i].content;
                b.pending.drain(..=i);
            }
            if b.pending.is_empty() {
                clean.push(l);
            }
        }
        for l in clean {
            self.dirty.remove(&l);
        }
    }

    /// What a read of `lba` must return now.
    pub fn expected(&self, lba: u64) -> Expect {
        self.blocks.get(&lba).map_or(Expect::ZERO, |b| b.current)
    }

    /// What `lba` may hold after a crash: its durable content or any change since.
    pub fn allowed_after_crash(&self, lba: u64) -> Vec<Expect> {
        match self.blocks.get(&lba) {
            None => vec![Expect::ZERO],
            Some(b) => {
                let mut v = vec![b.durable];
                v.extend(b.pending.iter().map(|p| p.content));
                v
            }
        }
    }

    /// Every block the model has seen written or trimmed, in LBA order.
    pub fn touched_lbas(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.blocks.keys().copied().collect();
        v.sort_unstable();
        v
    }

    fn data_matches(&self, lba: u64, want: Option<u64>, data: &[u8]) -> bool {
        if let Some(tag_of) = self.tag_of {
            let tag = match want {
                None => return data.iter().all(|&b| b == 0),
                Some(version) => {
                    let mut expect = vec![0u8; data.len()];
                    crate::pattern::fill_block(&mut expect, lba, version, self.salt);
                    tag_of(&expect)
                }
            };
            return data[..8] == tag.to_le_bytes() && data[8..].iter().all(|&b| b == 0);
        }
        let content = decode_block(data);
        match want {
            None => content == BlockContent::Zero,
            Some(version) => content == BlockContent::Valid { lba, version, salt: self.salt },
        }
    }

    fn md_matches(&self, lba: u64, want: Option<u64>, md: Option<&[u8]>) -> bool {
        match (md, want) {
            (None, _) => true,
            (Some(m), None) => m.iter().all(|&b| b == 0),
            (Some(m), Some(version)) => {
                let mut expect = vec![0u8; m.len()];
                fill_md(&mut expect, lba, version, self.salt);
                m == expect.as_slice()
            }
        }
    }

    /// Whether `data` (one block) and `md` (its metadata, if read) match `want`.
    pub fn matches(&self, lba: u64, want: Expect, data: &[u8], md: Option<&[u8]>) -> bool {
        self.data_matches(lba, want.data, data) && self.md_matches(lba, want.md, md)
    }

    fn describe(&self, data: &[u8], md: Option<&[u8]>) -> String {
        let mut s = decode_block(data).to_string();
        if let Some(m) = md {
            if m.iter().all(|&b| b == 0) {
                s.push_str(", metadata zeros");
            } else {
                s.push_str(", metadata non-zero");
            }
        }
        s
    }

    /// Checks a read of `blocks` blocks at `lba` (`md` holding their metadata, if read).
    pub fn check_read(&self, lba: u64, data: &[u8], md: Option<&[u8]>) -> Result<(), Mismatch> {
        for (i, block) in data.chunks_exact(self.block_size).enumerate() {
            let l = lba + i as u64;
            let m = md.map(|m| &m[i * self.md_bytes..(i + 1) * self.md_bytes]);
            let want = self.expected(l);
            if !self.matches(l, want, block, m) {
                return Err(Mismatch {
                    lba: l,
                    expected: want.to_string(),
                    found: self.describe(block, m),
                });
            }
        }
        Ok(())
    }

    /// Checks what `lba` holds after a crash and recovery against what it may hold, and makes
    /// what was found the block's durable content.
    pub fn check_after_crash(
        &mut self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
    ) -> Result<(), Mismatch> {
        let allowed = self.allowed_after_crash(lba);
        let found = if self.md_atomic || md.is_none() {
            allowed.iter().copied().find(|a| self.matches(lba, *a, data, md))
        } else {
            // Data and metadata may each come from any allowed write.
            let d = allowed.iter().find(|a| self.data_matches(lba, a.data, data));
            let m = allowed.iter().find(|a| self.md_matches(lba, a.md, md));
            match (d, m) {
                (Some(d), Some(m)) => Some(Expect { data: d.data, md: m.md }),
                _ => None,
            }
        };
        match found {
            Some(found) => {
                let b = self.blocks.entry(lba).or_default();
                b.durable = found;
                b.current = found;
                b.pending.clear();
                self.dirty.remove(&lba);
                Ok(())
            }
            None => Err(Mismatch {
                lba,
                expected: format!(
                    "one of [{}]{}",
                    allowed.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", "),
                    if self.md_atomic { "" } else { " (data and metadata each)" }
                ),
                found: self.describe(data, md),
            }),
        }
    }

    /// Whether any block has changes not yet known to be durable (including commands still in
    /// flight, or cancelled by a crash: they stay possible contents until
    /// [`Model::check_after_crash`] settles them).
    pub fn has_pending(&self) -> bool {
        !self.dirty.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(m: &Model, lba: u64, version: u64) -> Vec<u8> {
        let mut b = vec![0u8; m.block_size()];
        m.fill(lba, version, &mut b, None);
        b
    }

    #[test]
    fn reads_see_the_latest_completed_write() {
        let mut m = Model::new(512, 0, 9);
        let v = m.next_version();
        m.write_issued(3, 2, v, false);
        m.write_done(3, 2, v, false, false);
        assert!(m.check_read(3, &block(&m, 3, v), None).is_ok());
        assert!(m.check_read(5, &[0u8; 512], None).is_ok());
        let e = m.check_read(4, &block(&m, 4, v + 1), None).unwrap_err();
        assert_eq!(e.lba, 4);
        assert!(e.to_string().contains("expected version 1"), "{e}");
        m.trim_issued(3, 1);
        m.trim_done(3, 1);
        assert!(m.check_read(3, &[0u8; 512], None).is_ok());
    }

    #[test]
    fn a_flush_makes_durable_only_what_completed_before_it_was_issued() {
        let mut m = Model::new(512, 0, 1);
        let v1 = m.next_version();
        m.write_issued(0, 1, v1, false);
        m.write_done(0, 1, v1, false, false);
        let f = m.flush_issued();
        let v2 = m.next_version();
        m.write_issued(0, 1, v2, false);
        m.write_done(0, 1, v2, false, false);
        m.flush_done(f);
        assert_eq!(
            m.allowed_after_crash(0),
            vec![Expect::written(v1, false), Expect::written(v2, false)]
        );
        // Zeros are no longer allowed: version 1 was flushed.
        assert!(m.clone().check_after_crash(0, &[0u8; 512], None).is_err());
        assert!(m.clone().check_after_crash(0, &block(&m, 0, v2), None).is_ok());
        let f2 = m.flush_issued();
        m.flush_done(f2);
        assert_eq!(m.allowed_after_crash(0), vec![Expect::written(v2, false)]);
        assert!(!m.has_pending());
    }

    #[test]
    fn unflushed_and_in_flight_writes_may_or_may_not_survive() {
        let mut m = Model::new(512, 0, 1);
        let v1 = m.next_version();
        m.write_issued(7, 1, v1, false);
        let v2 = m.next_version();
        m.write_issued(8, 1, v2, false);
        m.write_done(8, 1, v2, false, false);
        for (lba, v) in [(7, v1), (8, v2)] {
            assert!(m.clone().check_after_crash(lba, &[0u8; 512], None).is_ok());
            assert!(m.clone().check_after_crash(lba, &block(&m, lba, v), None).is_ok());
        }
        // FUA is durable at once.
        let v3 = m.next_version();
        m.write_issued(9, 1, v3, false);
        m.write_done(9, 1, v3, false, true);
        assert!(m.clone().check_after_crash(9, &[0u8; 512], None).is_err());
    }

    #[test]
    fn torn_metadata_is_accepted_only_where_the_device_allows_it() {
        let mut m = Model::new(512, 16, 3);
        let v1 = m.next_version();
        m.write_issued(1, 1, v1, true);
        m.write_done(1, 1, v1, true, false);
        let f = m.flush_issued();
        m.flush_done(f);
        let v2 = m.next_version();
        m.write_issued(1, 1, v2, true);
        m.write_done(1, 1, v2, true, false);
        // New data beside the old metadata: a write torn by the crash.
        let (mut d2, mut md1) = (vec![0u8; 512], vec![0u8; 16]);
        m.fill(1, v2, &mut d2, None);
        let mut scratch = vec![0u8; 512];
        m.fill(1, v1, &mut scratch, Some(&mut md1));
        assert!(m.clone().check_after_crash(1, &d2, Some(&md1)).is_err(), "atomic device");
        let mut torn = m.clone();
        torn.set_md_atomic(false);
        assert!(torn.clone().check_after_crash(1, &d2, Some(&md1)).is_ok());
        torn.check_after_crash(1, &d2, Some(&md1)).unwrap();
        assert_eq!(torn.expected(1), Expect { data: Some(v2), md: Some(v1) });
        // Flushed state is never torn: zeros in the metadata of a flushed block are wrong.
        let mut flushed = Model::new(512, 16, 3);
        flushed.set_md_atomic(false);
        let v = flushed.next_version();
        flushed.write_issued(1, 1, v, true);
        flushed.write_done(1, 1, v, true, true);
        let mut d = vec![0u8; 512];
        flushed.fill(1, v, &mut d, None);
        assert!(flushed.check_after_crash(1, &d, Some(&[0u8; 16])).is_err());
    }

    #[test]
    fn metadata_is_checked_with_the_data() {
        let mut m = Model::new(512, 16, 3);
        let v = m.next_version();
        m.write_issued(1, 1, v, true);
        m.write_done(1, 1, v, true, false);
        let mut d = vec![0u8; 512];
        let mut md = vec![0u8; 16];
        m.fill(1, v, &mut d, Some(&mut md));
        assert!(m.check_read(1, &d, Some(&md)).is_ok());
        assert!(m.check_read(1, &d, Some(&[0u8; 16])).is_err());
        assert!(m.check_read(1, &d, None).is_ok());
    }
}
