//! Per-block integrity: what a member block must hold, whether it does, and rewriting the ones
//! that do not (self-heal).
//!
//! Every block the engine reads for a user, or reads to move or to rebuild redundancy, is
//! compared with what the host's tables say the location holds ([`Expect`]: the item, its
//! sequence number and the row's generation, as the mapping and the row's reverse map know
//! them). With 24 or more metadata bytes per block the comparison includes the block checksum
//! (format version 2), which covers the data, the member LBA and the metadata, so it catches:
//!
//! - silent corruption (the data no longer matches its checksum);
//! - a misdirected write (the block found carries another address or another item);
//! - a lost write (the location still holds an older version: another sequence number or
//!   generation than the tables expect).
//!
//! With 16 metadata bytes there is no checksum: only the metadata is compared, which still
//! catches lost and misdirected writes wherever the metadata differs, but not corrupt data.
//!
//! A block that fails is read again from redundancy (another replica of its log set, or rebuilt
//! from k other chunks of its stripe), the right contents are returned, and the bad copy is
//! rewritten in place under the row's shared lock (the lock writers take; a rebuild holds it
//! exclusive). Counters: `checksum_errors` (copies found bad), `healed_blocks` (copies
//! rewritten), `unrepairable_blocks` (blocks found bad on every copy, counted each time an
//! operation meets one).

use std::sync::atomic::Ordering;

use futures_util::future::join_all;

use flashrig_blockdev::{DevError, WriteHints};

use super::format::{BlockMd, ParityKey, TrimRecord, MD_BYTES, MD_BYTES_CHECKSUM};
use super::state::{Expect, Tables};
use super::Inner;

/// The state of a row's members when a read of the row was planned: its missing mask and each
/// member slot's incarnation. A slot whose incarnation changed since (a replacement came in)
/// is not read: the replacement holds nothing of the row until the rebuild reaches it.
pub(super) struct RowView {
    pub missing: u64,
    pub incs: Vec<u64>,
}

/// A rewrite of bad blocks on one member: `data` and `md` for the blocks from member LBA
/// `lba`, to the device of incarnation `inc` only.
pub(super) struct Fix {
    pub member: usize,
    pub inc: u64,
    pub lba: u64,
    pub data: Vec<u8>,
    pub md: Vec<u8>,
}

/// Adds one block's rewrite to `fixes`, extending the last one when the block follows it on the
/// same member (a lost multi-block write is healed with one write).
pub(super) fn push_fix(
    fixes: &mut Vec<Fix>,
    member: usize,
    inc: u64,
    lba: u64,
    data: &[u8],
    md: &[u8],
) {
    if let Some(f) = fixes.last_mut() {
        let blocks = (f.md.len() / md.len().max(1)) as u64;
        if f.member == member && f.inc == inc && f.lba + blocks == lba {
            f.data.extend_from_slice(data);
            f.md.extend_from_slice(md);
            return;
        }
    }
    fixes.push(Fix { member, inc, lba, data: data.to_vec(), md: md.to_vec() });
}

/// What one read, rebuild or scrub step found, in member blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Tally {
    /// Blocks read and compared with what they must hold.
    pub checked: u64,
    /// Blocks that were not what they must be.
    pub bad: u64,
    /// Blocks rewritten with their right contents.
    pub healed: u64,
    /// Blocks no copy (or no combination of chunks) holds intact.
    pub unrepairable: u64,
}

impl Inner {
    /// Whether blocks carry the checksum of data, address and metadata.
    pub(super) fn integrity(&self) -> bool {
        self.md_bytes >= MD_BYTES_CHECKSUM && self.checks()
    }

    /// Whether blocks are checked at all: off only over members that keep no payload (see
    /// `checks` in `Inner`).
    pub(super) fn checks(&self) -> bool {
        self.checks.load(Ordering::Relaxed)
    }

    /// The metadata bytes compared on every read: the 16 metadata bytes, and the checksum
    /// when there is one.
    fn compared_md_bytes(&self) -> usize {
        if self.integrity() {
            MD_BYTES_CHECKSUM
        } else {
            MD_BYTES
        }
    }

    /// The row's missing mask and the members' incarnations, taken together under the tables'
    /// lock (a rebuild marks a slot missing before it swaps the replacement in, so a view
    /// without the mark has the old incarnation).
    pub(super) fn view(&self, t: &Tables, row: u64) -> RowView {
        RowView {
            missing: t.row(row).missing,
            incs: self
                .incarnation
                .iter()
                .map(|x| x.load(std::sync::atomic::Ordering::Acquire))
                .collect(),
        }
    }

    /// The metadata of a block that is what `exp` says, as index `index` of row `row`
    /// (replica index in a log set; code index in a stripe: data `0..k`, then parity), with
    /// data `data`. `None` when nothing is expected, or for a trim record the tables no longer
    /// hold whose contents do not parse as that record.
    pub(super) fn expected_md(
        &self,
        exp: Expect,
        row: u64,
        index: usize,
        data: &[u8],
    ) -> Option<BlockMd> {
        match exp {
            Expect::Any => None,
            Expect::Item { tag, key, seq, gen } => {
                let key = match key {
                    Some(k) => k,
                    None => match TrimRecord::decode(data) {
                        Some(t) if t.seq == seq => t.start,
                        _ => return None,
                    },
                };
                Some(BlockMd::item(tag, key, index, seq, gen))
            }
            Expect::Parity { seq, gen } => {
                let (k, m) = (self.geo.k, self.geo.m);
                let r = index.checked_sub(k)?;
                let p = ParityKey { row, k, m, r, version: self.format_version };
                Some(BlockMd::parity(p, seq, gen))
            }
        }
    }

    /// Whether the block read from member LBA `lba` (data `data`, metadata `md`) is what `exp`
    /// says, as index `index` of row `row`: its metadata is the expected one and, with 24
    /// metadata bytes, its checksum matches data, address and metadata.
    pub(super) fn block_ok(
        &self,
        exp: Expect,
        row: u64,
        index: usize,
        lba: u64,
        data: &[u8],
        md: &[u8],
    ) -> bool {
        if exp == Expect::Any || !self.checks() {
            return true;
        }
        let Some(want) = self.expected_md(exp, row, index, data) else { return false };
        let n = self.compared_md_bytes();
        let mut enc = [0u8; MD_BYTES_CHECKSUM];
        want.encode(&mut enc[..n], lba, data);
        enc[..n] == md[..n]
    }

    /// Whether `md` carries the metadata words `exp` says (bytes 0..16), whatever its data.
    pub(super) fn head_ok(
        &self,
        exp: Expect,
        row: u64,
        index: usize,
        data: &[u8],
        md: &[u8],
    ) -> bool {
        if !self.checks() {
            return true;
        }
        let Some(want) = self.expected_md(exp, row, index, data) else { return false };
        let mut enc = [0u8; MD_BYTES];
        want.encode(&mut enc, 0, data);
        enc[..] == md[..MD_BYTES]
    }

    /// Encodes into `out` (one block's metadata) what `exp` says for the block of data `data`
    /// at member LBA `lba`; `false` when nothing is known (then `out` is zeroed).
    pub(super) fn encode_expected(
        &self,
        exp: Expect,
        row: u64,
        index: usize,
        lba: u64,
        data: &[u8],
        out: &mut [u8],
    ) -> bool {
        match self.expected_md(exp, row, index, data) {
            Some(bm) => {
                bm.encode(out, lba, data);
                true
            }
            None => {
                out.fill(0);
                false
            }
        }
    }

    /// Rewrites bad blocks of row `row` with their right contents (the caller holds a pin on
    /// the row, so it is not reused meanwhile). Takes the row's shared lock unless the caller
    /// holds the row (`locked`: a rebuild step holds it exclusive); skips a member that has
    /// failed, is missing in the row or was replaced since the blocks were read. A rewrite
    /// that fails leaves the block as it was: it stays bad, and the next read heals it again
    /// from redundancy. Returns the blocks rewritten.
    pub(super) async fn heal(&self, row: u64, fixes: Vec<Fix>, locked: bool) -> u64 {
        if fixes.is_empty() {
            return 0;
        }
        let _row = if locked { None } else { Some(self.rowlocks.shared(row).await) };
        let missing = self.tables.lock().row(row).missing;
        let mdb = self.md_bytes;
        let writes = fixes.into_iter().map(|f| async move {
            let (dev, inc) = self.member(f.member);
            if inc != f.inc || !self.available(f.member, missing) {
                return 0;
            }
            self.costs.charge_member_ios(1).await;
            match dev.write(f.lba, &f.data, Some(&f.md), WriteHints::NONE).await {
                Ok(()) => (f.md.len() / mdb) as u64,
                Err(e) => {
                    self.note_error(f.member, inc, &e);
                    0
                }
            }
        });
        let healed: u64 = join_all(writes).await.into_iter().sum();
        self.c.healed_blocks.add(healed);
        healed
    }

    /// Counts what a read found in the engine's counters.
    pub(super) fn count(&self, t: &Tally) {
        self.c.checksum_errors.add(t.bad);
        self.c.unrepairable_blocks.add(t.unrepairable);
    }

    /// The error a read answers for a block no copy holds intact.
    pub(super) fn corrupt(&self, lba: u64, detail: String) -> DevError {
        DevError::Corrupt { name: self.info.name.clone(), lba, detail }
    }
}
