//! ScalaAFA's conversion vendor command (scalaafa-atc24.txt §5.3, §5.4): the controller reads
//! `k` source chunks (data and per-block metadata) into its DRAM, its parity engine computes
//! one parity row of them, the parity is written at the destination through the normal write
//! path, and the sources are invalidated as a trim would.
//!
//! The phases overlap as a streaming engine allows. The parity is computed in *parity units*,
//! one per mapping unit of the destination (its blocks at the same offsets in every chunk);
//! timing composition (docs/ssd.md, "Conversion command"):
//!
//! ```text
//! start       = admit(t)                              (queue slot + command_ns)
//! ready(b, j) = when block b of chunk j is in DRAM: its NAND read (sense + channel), issued
//!               at start in stripe-row order, or start for buffered blocks
//! computed(u) = max(max over j and b in u of ready(b, j), engine free) + engine_ns(u)
//!               (parity units in order; one engine per SSD, first come first served)
//! written(u)  = the write of parity unit u issued at computed(u) (buffer, or program when
//!               writing through)
//! done        = max over u of written(u), and the zero writes of partly covered source
//!               units, issued when the last parity unit is computed
//! ```
//!
//! No data crosses the host link. `engine_ns(u) = convert_engine_ns_per_kib x KiB of source
//! in u` (the `k` data chunks' blocks; the metadata is encoded in the same pass, §5.4), rounded
//! so that the units' times add up to the whole command's.

use flashrig_blockdev::{ConvertCommand, DevError, DevResult, ParityType};
use flashrig_erasure::Codec;
use rustc_hash::FxHashMap;

use super::{pieces, Controller, Piece};
use crate::config::PayloadMode;

/// Counters of the conversion command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConvertCounters {
    pub cmds: u64,
    /// Data bytes of the source chunks read into DRAM (metadata not counted).
    pub read_bytes: u64,
    /// Data bytes of parity written (metadata not counted).
    pub parity_bytes: u64,
    /// Time the parity engine spent computing.
    pub engine_busy_ns: u64,
}

/// The controller's XOR/Reed-Solomon engine: one per SSD, a timeline conversions queue on.
pub struct Engine {
    ns_per_kib: f64,
    /// When the engine is next free.
    free_ns: u64,
    /// Codecs by (data chunks, parity rows), built on first use.
    codecs: FxHashMap<(usize, usize), Codec>,
    pub counters: ConvertCounters,
}

impl Engine {
    pub fn new(ns_per_kib: f64) -> Engine {
        Engine {
            ns_per_kib,
            free_ns: 0,
            codecs: FxHashMap::default(),
            counters: Default::default(),
        }
    }

    /// Engine time for `bytes` of source data.
    pub fn busy_ns(&self, bytes: usize) -> u64 {
        // `as` saturates; validate() bounds ns_per_kib so this stays far below u64::MAX.
        (self.ns_per_kib * bytes as f64 / 1024.0).round() as u64
    }

    /// Runs a job that needs the engine from `ready` for `busy` ns; returns when it is done.
    fn run(&mut self, ready: u64, busy: u64) -> u64 {
        let done = ready.max(self.free_ns).saturating_add(busy);
        self.free_ns = done;
        self.counters.engine_busy_ns += busy;
        done
    }

    /// Power loss: the engine restarts idle.
    pub fn reset(&mut self, t_ns: u64) {
        self.free_ns = t_ns;
    }

    /// Parity row `row` of the `k` equal-length chunks laid end to end in `src`, into `out`.
    fn encode(&mut self, k: usize, row: usize, src: &[u8], out: &mut [u8]) -> DevResult<()> {
        if out.is_empty() {
            return Ok(());
        }
        let codec = match self.codecs.entry((k, row + 1)) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(
                Codec::new(k, row + 1).map_err(|e| DevError::Invalid(format!("convert: {e}")))?,
            ),
        };
        let chunks: Vec<&[u8]> = src.chunks_exact(out.len()).collect();
        codec.encode_row(row, &chunks, out).map_err(|e| DevError::Invalid(format!("convert: {e}")))
    }
}

/// Checks a conversion against a device of `num_blocks` blocks; returns `(k, parity row)`.
/// Every problem is a `DevError::Invalid` whose message names it.
pub fn check_convert(num_blocks: u64, cmd: &ConvertCommand) -> DevResult<(usize, usize)> {
    let bad = |m: String| Err(DevError::Invalid(format!("convert: {m}")));
    let ParityType::Row { index, data_chunks } = cmd.ptype;
    let (k, row) = (data_chunks as usize, index as usize);
    if k == 0 {
        return bad("data_chunks is 0: a parity needs at least one data chunk".into());
    }
    if cmd.src.len() != k {
        return bad(format!("{} source chunks given, but data_chunks (Num) = {k}", cmd.src.len()));
    }
    if let Err(e) = flashrig_erasure::check_geometry(k, row + 1) {
        return bad(format!(
            "parity row (Ptype) {row} of a code with {k} data chunks is not supported: {e}"
        ));
    }
    if cmd.chunk_blocks == 0 {
        return bad("chunk_blocks (ChunkSize) is 0".into());
    }
    let n = cmd.chunk_blocks as u64;
    let span = |lba: u64| format!("blocks {lba}..{}", lba.saturating_add(n));
    let inside = |lba: u64| lba.checked_add(n).is_some_and(|end| end <= num_blocks);
    let overlap = |a: u64, b: u64| a < b.saturating_add(n) && b < a.saturating_add(n);
    for (j, &s) in cmd.src.iter().enumerate() {
        if !inside(s) {
            return bad(format!(
                "source chunk {j} ({}) is outside the device's {num_blocks} blocks",
                span(s)
            ));
        }
    }
    if !inside(cmd.dst) {
        return bad(format!(
            "destination ({}) is outside the device's {num_blocks} blocks",
            span(cmd.dst)
        ));
    }
    for (j, &s) in cmd.src.iter().enumerate() {
        if overlap(cmd.dst, s) {
            return bad(format!(
                "destination ({}) overlaps source chunk {j} ({})",
                span(cmd.dst),
                span(s)
            ));
        }
        for (i, &r) in cmd.src[..j].iter().enumerate() {
            if overlap(r, s) {
                return bad(format!(
                    "source chunks {i} ({}) and {j} ({}) overlap",
                    span(r),
                    span(s)
                ));
            }
        }
    }
    Ok((k, row))
}

impl Controller {
    /// Executes a conversion submitted at `t0`; returns when it completes (when the last of
    /// its parity units is written). See the module documentation for the timing.
    pub fn convert(&mut self, t0: u64, cmd: &ConvertCommand) -> DevResult<u64> {
        let (k, row) = check_convert(self.layout.num_blocks, cmd)?;
        self.ftl.background(t0)?;
        let t = self.hostif.admit(t0);
        let bs = self.block_bytes();
        let mdb = self.md_bytes();
        let blocks = cmd.chunk_blocks as usize;
        let (chunk_bytes, chunk_md) = (blocks * bs, blocks * mdb);
        let bpi = self.layout.blocks_per_iu;

        // 1. The sources into DRAM: from the write buffer where it holds them, from NAND
        //    otherwise, as a host read gathers them (but nothing crosses the host link). The
        //    reads are issued in stripe-row order, the order the engine consumes them: the
        //    first mapping unit of every chunk, then the second of every chunk, and so on
        //    (by offset in the chunk, then chunk). Each channel and plane serves its
        //    operations in the order they were issued, so this delivers the first parity
        //    unit's inputs first; chunk after chunk would deliver the last chunk's first unit
        //    only after every earlier chunk's pages on its channel. `ready[j * blocks + i]` is
        //    when block `i` of chunk `j` is in DRAM.
        let mut data = vec![0u8; k * chunk_bytes];
        let mut md = vec![0u8; k * chunk_md];
        let mut ready = vec![t; k * blocks];
        let mut reads: Vec<(usize, Piece)> = Vec::new();
        for (j, &src) in cmd.src.iter().enumerate() {
            reads.extend(pieces(src, blocks as u64, bpi).map(|p| (j, p)));
        }
        reads.sort_by_key(|&(j, p)| (p.offset, j));
        for &(j, p) in &reads {
            let range = j * blocks + p.offset..j * blocks + p.offset + p.count as usize;
            let d = &mut data[range.start * bs..range.end * bs];
            let m = (mdb > 0).then(|| &mut md[range.start * mdb..range.end * mdb]);
            let lba = cmd.src[j] + p.offset as u64;
            let at = self.gather(t, lba, d, m)?;
            ready[range].fill(at);
        }

        // 2. The engine, one parity unit at a time: the blocks of one mapping unit of the
        //    destination, started when those blocks of every source chunk are in DRAM and the
        //    engine is free (one engine per SSD, first come first served). A unit costs the
        //    engine time of its source bytes; the costs are rounded cumulatively so that they
        //    add up to the whole command's `busy_ns`.
        let rows: Vec<Piece> = pieces(cmd.dst, blocks as u64, bpi).collect();
        let mut computed = Vec::with_capacity(rows.len());
        let mut charged = 0u64;
        for p in &rows {
            let end = p.offset + p.count as usize;
            let inputs = (0..k).flat_map(|j| ready[j * blocks + p.offset..j * blocks + end].iter());
            let at = inputs.copied().max().unwrap_or(t);
            let total = self.engine.busy_ns(k * end * bs);
            computed.push(self.engine.run(at, total - charged));
            charged = total;
        }
        let all_computed = computed.last().copied().unwrap_or(t);

        // The parity of the data, and of the metadata (block i's metadata of every chunk
        // encoded together), as one pass over the whole chunk: the bytes do not depend on
        // the order the engine's time was charged in.
        let mut parity = vec![0u8; chunk_bytes];
        let mut parity_md = vec![0u8; chunk_md];
        // Bytes of each block that can be nonzero in what the reads returned: all of them in
        // `full`, the 8-byte fingerprint in `tag`, none in `none`. The code is linear, so the
        // parity of the zero rest is zero and only the prefixes need encoding.
        let significant = match self.shape.mode {
            PayloadMode::Full => bs,
            PayloadMode::Tag => 8,
            PayloadMode::None => 0,
        };
        if significant == bs {
            self.engine.encode(k, row, &data, &mut parity)?;
        } else if significant > 0 {
            let prefixes: Vec<u8> =
                data.chunks_exact(bs).flat_map(|b| b[..significant].iter().copied()).collect();
            let mut out = vec![0u8; blocks * significant];
            self.engine.encode(k, row, &prefixes, &mut out)?;
            for (b, o) in parity.chunks_exact_mut(bs).zip(out.chunks_exact(significant)) {
                b[..significant].copy_from_slice(o);
            }
        }
        if self.shape.mode != PayloadMode::None {
            self.engine.encode(k, row, &md, &mut parity_md)?;
        }

        // 3. Each parity unit through the normal write path (not transient, not FUA) as soon
        //    as the engine has computed it.
        let mut done = all_computed;
        for (p, &at) in rows.iter().zip(&computed) {
            let range = p.offset..p.offset + p.count as usize;
            let d = &parity[range.start * bs..range.end * bs];
            let m = (mdb > 0).then(|| &parity_md[range.start * mdb..range.end * mdb]);
            done = done.max(self.write_piece(at, *p, d, m, 0, false, false)?);
        }

        // 4. The sources invalidated, as a trim does, once the engine has consumed them.
        for &src in &cmd.src {
            done = done.max(self.deallocate(all_computed, src, blocks as u64)?);
        }

        let c = &mut self.engine.counters;
        c.cmds += 1;
        c.read_bytes += (k * chunk_bytes) as u64;
        c.parity_bytes += chunk_bytes as u64;
        self.hostif.complete(done);
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(src: Vec<u64>, dst: u64, chunk_blocks: u32, index: u8, k: u8) -> ConvertCommand {
        ConvertCommand { src, dst, chunk_blocks, ptype: ParityType::Row { index, data_chunks: k } }
    }

    #[test]
    fn checks_name_the_problem() {
        let err = |c: ConvertCommand| match check_convert(1000, &c) {
            Err(DevError::Invalid(m)) => m,
            other => panic!("{c:?}: expected Invalid, got {other:?}"),
        };
        assert_eq!(check_convert(1000, &cmd(vec![0, 16], 32, 16, 1, 2)).unwrap(), (2, 1));
        assert!(err(cmd(vec![], 32, 16, 0, 0)).contains("data_chunks is 0"));
        assert!(err(cmd(vec![0], 32, 16, 0, 2)).contains("1 source chunks given"));
        assert!(err(cmd(vec![0, 16], 32, 16, 4, 2)).contains("parity row (Ptype) 4"));
        assert!(err(cmd(vec![0, 16], 32, 0, 0, 2)).contains("chunk_blocks"));
        assert!(err(cmd(vec![0, 990], 32, 16, 0, 2)).contains("source chunk 1"));
        assert!(err(cmd(vec![0, u64::MAX], 32, 16, 0, 2)).contains("source chunk 1"));
        assert!(err(cmd(vec![0, 16], 995, 16, 0, 2)).contains("destination"));
        assert!(err(cmd(vec![0, 16], 20, 16, 0, 2)).contains("overlaps source chunk 1"));
        assert!(err(cmd(vec![0, 8], 32, 16, 0, 2)).contains("source chunks 0"));
    }

    #[test]
    fn engine_time_scales_with_source_bytes_and_queues() {
        let mut e = Engine::new(crate::config::SCALAAFA_ENGINE_NS_PER_KIB);
        assert_eq!(e.busy_ns(6 * 64 * 1024), 20_000);
        assert_eq!(e.run(100, 500), 600);
        // Ready earlier than the engine is free: it waits.
        assert_eq!(e.run(0, 500), 1100);
        assert_eq!(e.counters.engine_busy_ns, 1000);
        e.reset(50);
        assert_eq!(e.run(0, 10), 60);
    }
}
