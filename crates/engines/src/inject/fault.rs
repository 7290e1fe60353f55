//! What a fault is: its kind (what it does to a command), its target (which block accesses it
//! fires on), and the configuration form both are read from.
//!
//! The kinds are the five ways SSD faults manifest at the file system (jaffer-thesis-2023.txt
//! §2.4.1, Table 2.1: read I/O error, write I/O error, corruption, shorn write, lost write),
//! the two device-internal mechanisms the issue names beside them (a misdirected write, an
//! incomplete erase), added latency for fail-slow studies (§2.4.7) and a whole-device failure.
//! A target narrows a fault to an LBA range, to the n-th matching access, to a probability per
//! access and to a window of the runtime's clock; what is left fires, up to `count` times.

use serde::{Deserialize, Serialize};

/// Which commands a fault looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ops {
    Read,
    Write,
    Both,
}

impl Ops {
    pub fn covers(self, op: Op) -> bool {
        matches!((self, op), (Ops::Both, _) | (Ops::Read, Op::Read) | (Ops::Write, Op::Write))
    }
}

/// The command a block access belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
        }
    }
}

/// How a corruption changes the bytes it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CorruptHow {
    /// Every covered byte becomes 0.
    Zero,
    /// Every covered byte becomes `fill`.
    Fill,
    /// Every covered byte is replaced by a seeded random byte.
    Random,
    /// `bits` seeded random bits of the covered bytes are flipped.
    Bitflip,
}

/// What a fault does to the block access it fires on.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// The read fails with a media error (Table 2.1 (a)); nothing is returned.
    ReadError,
    /// The write fails with a media error (Table 2.1 (b)); none of the command's blocks is
    /// written.
    WriteError,
    /// Silent corruption (Table 2.1 (c)) of bytes `offset..offset + len` of the block: on a
    /// read, of what is returned (the stored block is intact); on a write, of what is stored.
    Corrupt { how: CorruptHow, offset: usize, len: Option<usize>, fill: u8, bits: u32 },
    /// A shorn write (Table 2.1 (d)): the block's 512-byte sectors marked `true` are written,
    /// the others are left erased (zeros), as §2.4.1 assumes.
    Shorn { keep_sectors: Vec<bool> },
    /// A lost (dropped) write (Table 2.1 (e)): acknowledged, never written.
    Lost,
    /// A misdirected write: the data lands `offset_blocks` away (modulo the capacity); the
    /// block addressed keeps what it held.
    Misdirect { offset_blocks: i64 },
    /// An incomplete erase before the block's program: flash programming can only clear bits
    /// of erased (all-ones) cells, so bits the erase left cleared stay cleared, and the block
    /// stores the bitwise AND of its old and new contents (§2.4.1, "Incomplete Erase").
    Stale,
    /// The command is held back `delay_ns` on the runtime's clock (fail-slow, §2.4.7).
    Delay { delay_ns: u64 },
    /// The whole device fails: this and every later command answer `DeviceFailed`.
    Fail,
    /// Nothing happens to the access; it is only logged, with its structure: the tracing run
    /// of §2.4.5 that finds which blocks and structures a program touches.
    Trace,
}

impl Kind {
    /// The kind's name in configurations and in the injection log.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::ReadError => "read-error",
            Kind::WriteError => "write-error",
            Kind::Corrupt { .. } => "corrupt",
            Kind::Shorn { .. } => "shorn",
            Kind::Lost => "lost",
            Kind::Misdirect { .. } => "misdirect",
            Kind::Stale => "stale",
            Kind::Delay { .. } => "delay",
            Kind::Fail => "fail",
            Kind::Trace => "trace",
        }
    }

    /// The commands the kind can act on, and the default when a fault does not say.
    fn ops(&self) -> (&'static [Ops], Ops) {
        match self {
            Kind::ReadError => (&[Ops::Read], Ops::Read),
            Kind::WriteError | Kind::Shorn { .. } | Kind::Lost | Kind::Misdirect { .. } => {
                (&[Ops::Write], Ops::Write)
            }
            Kind::Stale => (&[Ops::Write], Ops::Write),
            // Corruption of what a read returns leaves the medium intact, so the same fault
            // can be seen again; corrupting what is stored is `ops = "write"`.
            Kind::Corrupt { .. } => (&[Ops::Read, Ops::Write, Ops::Both], Ops::Read),
            Kind::Delay { .. } | Kind::Fail | Kind::Trace => {
                (&[Ops::Read, Ops::Write, Ops::Both], Ops::Both)
            }
        }
    }
}

/// Which block accesses a fault fires on. Every filter given must hold; `nth` and `count`
/// then pick among the accesses that pass them.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub ops: Ops,
    /// Blocks `first..first + blocks`, or every block.
    pub lbas: Option<(u64, u64)>,
    /// Fire on the n-th access (1-based) that passes the other filters, and on no other.
    pub nth: Option<u64>,
    /// Fire on each passing access with this probability (seeded, so a run repeats).
    pub probability: Option<f64>,
    /// Only while the runtime's clock is in `from_ns..until_ns`.
    pub from_ns: u64,
    pub until_ns: u64,
    /// At most this many injections (None: no limit).
    pub count: Option<u64>,
    /// Only blocks that the layer's classifier says hold this structure (structure/).
    pub structure: Option<String>,
}

impl Target {
    pub fn covers_lba(&self, lba: u64) -> bool {
        self.lbas.is_none_or(|(first, blocks)| lba >= first && lba - first < blocks)
    }
}

/// One fault: what it does and where.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultSpec {
    pub kind: Kind,
    pub target: Target,
}

/// A fault as a configuration file writes it: one flat table per fault, e.g.
///
/// ```toml
/// [[device.faults]]
/// kind = "shorn"
/// lba = 1000
/// nth = 2          # the second write to block 1000
/// keep = [3, 8]    # the first 3/8 of the block (the thesis' pattern)
/// ```
///
/// Fields that do not belong to the kind are refused with a message naming them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    /// read-error, write-error, corrupt, shorn, lost, misdirect, stale, delay, fail, trace.
    pub kind: String,
    /// read, write or both (default: what the kind acts on; corrupt: read).
    pub ops: Option<Ops>,
    /// First block of the target range (default: every block).
    pub lba: Option<u64>,
    /// Blocks in the target range from `lba` (default 1 when `lba` is given).
    pub blocks: Option<u64>,
    pub nth: Option<u64>,
    pub probability: Option<f64>,
    pub from_ms: Option<u64>,
    pub until_ms: Option<u64>,
    pub count: Option<u64>,
    /// Only blocks holding this file-system structure (the layer's `filesystem` names the
    /// classifier; docs/inject.md lists the structures).
    pub structure: Option<String>,
    /// corrupt: zero (default), fill, random, bitflip.
    pub how: Option<CorruptHow>,
    /// corrupt: the byte range within the block (default: the whole block).
    pub offset: Option<usize>,
    pub len: Option<usize>,
    /// corrupt, how = "fill": the byte written.
    pub fill: Option<u8>,
    /// corrupt, how = "bitflip": bits flipped (default 1).
    pub bits: Option<u32>,
    /// shorn: the fraction of the block kept from its start, [numerator, denominator]
    /// (default [3, 8], the thesis' pattern).
    pub keep: Option<[u32; 2]>,
    /// shorn: instead of `keep`, one character per 512-byte sector, '1' kept, '0' lost.
    pub sectors: Option<String>,
    /// misdirect: where the data lands, in blocks from the block addressed (default 1).
    pub offset_blocks: Option<i64>,
    /// delay: milliseconds added to the command.
    pub delay_ms: Option<u64>,
}

/// 512-byte sectors, the unit a shorn write keeps or loses (§2.4.1).
pub const SECTOR_BYTES: usize = 512;

impl FaultConfig {
    /// Checks the fault against the device's block size and returns it in typed form. The
    /// error names the field at fault; the caller adds where the fault is (`faults[2]`).
    pub fn to_spec(&self, block_size: u32) -> Result<FaultSpec, String> {
        self.spec(Some(block_size as usize))
    }

    /// Checks everything that does not depend on the block size, for a configuration checked
    /// before its stack is built; [`FaultConfig::to_spec`] checks the rest at the build.
    pub fn check(&self) -> Result<(), String> {
        self.spec(None).map(|_| ())
    }

    fn spec(&self, block_size: Option<usize>) -> Result<FaultSpec, String> {
        // Without a block size, the largest the checks could meet, so none refuses a range
        // or a pattern that a real block size might allow.
        let known = block_size.is_some();
        let bs = block_size.unwrap_or(usize::MAX / 2);
        let mut allowed: Vec<&str> = Vec::new();
        let kind = match self.kind.as_str() {
            "read-error" => Kind::ReadError,
            "write-error" => Kind::WriteError,
            "corrupt" => {
                allowed.extend(["how", "offset", "len", "fill", "bits"]);
                let how = self.how.unwrap_or(CorruptHow::Zero);
                let offset = self.offset.unwrap_or(0);
                let len = self.len;
                if offset >= bs || len.is_some_and(|l| l == 0 || offset.saturating_add(l) > bs) {
                    return Err(format!(
                        "offset = {offset}, len = {}: the range must lie inside the {bs}-byte \
                         block and not be empty",
                        len.map_or("(rest of block)".to_string(), |l| l.to_string())
                    ));
                }
                if self.fill.is_some() && how != CorruptHow::Fill {
                    return Err("`fill` applies to how = \"fill\" only".into());
                }
                if self.bits.is_some() && how != CorruptHow::Bitflip {
                    return Err("`bits` applies to how = \"bitflip\" only".into());
                }
                let bits = self.bits.unwrap_or(1);
                let span = len.unwrap_or(bs - offset);
                if how == CorruptHow::Bitflip
                    && (bits == 0 || (known && bits as usize > span.saturating_mul(8)))
                {
                    return Err(format!("bits = {bits}: between 1 and the {span} bytes' bits"));
                }
                Kind::Corrupt { how, offset, len, fill: self.fill.unwrap_or(0), bits }
            }
            "shorn" => {
                allowed.extend(["keep", "sectors"]);
                let n = if known { bs / SECTOR_BYTES } else { 0 };
                if known && (n == 0 || !bs.is_multiple_of(SECTOR_BYTES)) {
                    return Err(format!("a {bs}-byte block is not whole 512-byte sectors"));
                }
                let keep_sectors = match (&self.sectors, self.keep) {
                    (Some(_), Some(_)) => return Err("give `keep` or `sectors`, not both".into()),
                    (Some(p), None) => {
                        if (known && p.len() != n) || p.chars().any(|c| c != '0' && c != '1') {
                            return Err(format!(
                                "sectors = \"{p}\": {n} characters of '0' (lost) and '1' (kept), \
                                 one per 512-byte sector of the {bs}-byte block"
                            ));
                        }
                        p.chars().map(|c| c == '1').collect()
                    }
                    (None, keep) => {
                        let [num, den] = keep.unwrap_or([3, 8]);
                        if den == 0 || num >= den {
                            return Err(format!(
                                "keep = [{num}, {den}]: a fraction below 1 (a write that keeps \
                                 the whole block is not shorn)"
                            ));
                        }
                        let kept = n * num as usize / den as usize;
                        (0..n).map(|i| i < kept).collect()
                    }
                };
                Kind::Shorn { keep_sectors }
            }
            "lost" => Kind::Lost,
            "misdirect" => {
                allowed.push("offset_blocks");
                let offset_blocks = self.offset_blocks.unwrap_or(1);
                if offset_blocks == 0 {
                    return Err("offset_blocks = 0: a write that lands where it was sent is not \
                                misdirected"
                        .into());
                }
                Kind::Misdirect { offset_blocks }
            }
            "stale" => Kind::Stale,
            "delay" => {
                allowed.push("delay_ms");
                let ms = self.delay_ms.ok_or("kind = \"delay\" needs `delay_ms`")?;
                Kind::Delay { delay_ns: ms.saturating_mul(1_000_000) }
            }
            "fail" => Kind::Fail,
            "trace" => Kind::Trace,
            other => {
                return Err(format!(
                    "kind = \"{other}\": unknown; one of read-error, write-error, corrupt, shorn, \
                     lost, misdirect, stale, delay, fail, trace"
                ))
            }
        };
        let given = [
            ("how", self.how.is_some()),
            ("offset", self.offset.is_some()),
            ("len", self.len.is_some()),
            ("fill", self.fill.is_some()),
            ("bits", self.bits.is_some()),
            ("keep", self.keep.is_some()),
            ("sectors", self.sectors.is_some()),
            ("offset_blocks", self.offset_blocks.is_some()),
            ("delay_ms", self.delay_ms.is_some()),
        ];
        if let Some((field, _)) = given.iter().find(|(f, set)| *set && !allowed.contains(f)) {
            return Err(format!("`{field}` does not apply to kind = \"{}\"", self.kind));
        }
        let (can, default) = kind.ops();
        let ops = self.ops.unwrap_or(default);
        if !can.contains(&ops) {
            return Err(format!(
                "ops = \"{}\": kind = \"{}\" acts on {} only",
                ops_name(ops),
                self.kind,
                ops_name(default)
            ));
        }
        if self.blocks.is_some() && self.lba.is_none() {
            return Err("`blocks` needs `lba`, the first block of the range".into());
        }
        let lbas = match (self.lba, self.blocks.unwrap_or(1)) {
            (None, _) => None,
            (Some(_), 0) => return Err("blocks = 0: the range is empty".into()),
            (Some(lba), blocks) => Some((lba, blocks)),
        };
        if self.nth == Some(0) {
            return Err("nth = 0: accesses are counted from 1".into());
        }
        if let Some(p) = self.probability {
            if !(p > 0.0 && p <= 1.0) {
                return Err(format!("probability = {p}: in (0, 1]"));
            }
        }
        let from_ns = self.from_ms.unwrap_or(0).saturating_mul(1_000_000);
        let until_ns = self.until_ms.map_or(u64::MAX, |ms| ms.saturating_mul(1_000_000));
        if from_ns >= until_ns {
            return Err("from_ms must be before until_ms".into());
        }
        if self.count == Some(0) {
            return Err("count = 0: the fault would never fire".into());
        }
        // The n-th access happens once: a fault aimed at it fires once unless told otherwise.
        let count = self.count.or(self.nth.map(|_| 1));
        let target = Target {
            ops,
            lbas,
            nth: self.nth,
            probability: self.probability,
            from_ns,
            until_ns,
            count,
            structure: self.structure.clone(),
        };
        Ok(FaultSpec { kind, target })
    }
}

fn ops_name(ops: Ops) -> &'static str {
    match ops {
        Ops::Read => "read",
        Ops::Write => "write",
        Ops::Both => "both",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(kind: &str) -> FaultConfig {
        FaultConfig { kind: kind.into(), ..Default::default() }
    }

    #[test]
    fn shorn_defaults_to_the_thesis_three_eighths() {
        let s = cfg("shorn").to_spec(4096).unwrap();
        let Kind::Shorn { keep_sectors } = s.kind else { panic!() };
        assert_eq!(keep_sectors, [true, true, true, false, false, false, false, false]);
        assert_eq!(s.target.ops, Ops::Write);
        let p = FaultConfig { sectors: Some("10000001".into()), ..cfg("shorn") };
        let Kind::Shorn { keep_sectors } = p.to_spec(4096).unwrap().kind else { panic!() };
        assert_eq!(keep_sectors.iter().filter(|k| **k).count(), 2);
    }

    #[test]
    fn bad_faults_name_their_field() {
        let e = |c: FaultConfig| c.to_spec(4096).unwrap_err();
        assert!(e(cfg("melt")).contains("kind = \"melt\""));
        assert!(e(FaultConfig { bits: Some(3), ..cfg("lost") }).contains("`bits`"));
        assert!(e(FaultConfig { ops: Some(Ops::Read), ..cfg("shorn") }).contains("ops = \"read\""));
        assert!(e(FaultConfig { sectors: Some("11".into()), ..cfg("shorn") }).contains("sectors"));
        assert!(e(FaultConfig { keep: Some([8, 8]), ..cfg("shorn") }).contains("keep"));
        assert!(e(FaultConfig { probability: Some(1.5), ..cfg("lost") }).contains("probability"));
        assert!(e(FaultConfig { nth: Some(0), ..cfg("lost") }).contains("nth = 0"));
        assert!(e(FaultConfig { blocks: Some(2), ..cfg("lost") }).contains("`blocks` needs"));
        assert!(e(cfg("delay")).contains("delay_ms"));
        assert!(e(FaultConfig { offset: Some(4096), ..cfg("corrupt") }).contains("offset"));
        assert!(e(FaultConfig { offset_blocks: Some(0), ..cfg("misdirect") }).contains("0"));
    }

    #[test]
    fn nth_fires_once_unless_counted() {
        let s = FaultConfig { nth: Some(3), lba: Some(9), ..cfg("lost") }.to_spec(4096).unwrap();
        assert_eq!((s.target.count, s.target.lbas), (Some(1), Some((9, 1))));
        assert!(s.target.covers_lba(9) && !s.target.covers_lba(10));
    }
}
