//! Reed-Solomon erasure coding over GF(2^8) for RAID-5/6-style engines and for an SSD's
//! parity ("conversion") command, with Intel ISA-L when present and a byte-identical
//! pure-Rust fallback otherwise.
//!
//! # The code
//!
//! A stripe has `k` data chunks `D_0 .. D_{k-1}` and `m` parity chunks `P_0 .. P_{m-1}` of
//! one length. Parity row `r`, byte `i`:
//!
//! ```text
//! P_r[i] = XOR over j < k of  coefficient(r, j) * D_j[i],   coefficient(r, j) = (2^r)^j
//! ```
//!
//! in GF(2^8) with the polynomial 0x11D ([`gf`]). Row 0 is all ones, so `P_0` is the XOR of
//! the data: RAID-5 parity and RAID-6's P. Row 1 is `2^j`: RAID-6's Q, as in Linux md and
//! ISA-L's `raid.h`. Rows 2 and 3 continue with `4^j` and `8^j`.
//!
//! # Why this matrix
//!
//! It is exactly the parity part of ISA-L's `gf_gen_rs_matrix(a, k + m, k)`, the matrix
//! ISA-L's own examples encode with, as does Ceph's ISA-L plugin in its default
//! (Vandermonde) technique. Using it means parity written by ISA-L, by the Rust backend, or by anything
//! else that uses ISA-L's convention is the same bytes, rows 0 and 1 are the RAID-6 P and Q that
//! engines and papers talk about, and one parity row is computable on its own, so a device
//! can be asked for "the P" or "the Q" of a set of chunks ([`Codec::encode_row`]).
//!
//! # The MDS caveat
//!
//! A code can rebuild any `m` lost chunks only if every square submatrix of its parity
//! matrix is invertible (it is then *MDS*). ISA-L documents that `gf_gen_rs_matrix` does not
//! guarantee this. For this family:
//!
//! - `m = 1, 2`: MDS for `k <= 255`. Two lost data chunks `a, b` through P and Q need
//!   `2^a != 2^b`, true while `a, b < 255`.
//! - `m = 3`: MDS for `k <= 255`. With `x_j = 2^j` the 2 x 2 submatrices have determinants
//!   `x_a + x_b`, `(x_a + x_b)^2` and `x_a x_b (x_a + x_b)`, and the 3 x 3 one is a
//!   Vandermonde determinant; all nonzero for distinct `x_j`.
//! - `m = 4`: MDS only for `k <= 21`. At `k = 22`, losing data chunks 0, 10 and 21 with rows
//!   1 and 2 also lost leaves rows 0, 1, 3 on columns 0, 10, 21: a singular 3 x 3 matrix.
//!   ISA-L's header and Ceph's plugin give the same bounds ("m - k <= 3", "k <= 21, m - k =
//!   4" in ISA-L's notation, where its m counts all chunks).
//! - `m >= 5`: not offered (MDS only for a few small `k`).
//!
//! [`Codec::new`] accepts only geometries inside these bounds (and `k <= 253`), so every
//! pattern of up to `m` lost chunks is rebuildable; tests/mds.rs checks every submatrix.
//!
//! # Backends
//!
//! [`Backend::IsaL`] calls ISA-L through a small hand-written FFI ([`isal`]); build.rs links it
//! when it finds libisal, unless `FLASHRIG_NO_ISAL=1` at build time. [`Backend::Rust`] is
//! always compiled: split-nibble table look-ups, with an AVX2 kernel where the CPU has it.
//! [`Codec::new`] picks ISA-L when linked ([`Backend::best`]).
//!
//! ```
//! use flashrig_erasure::Codec;
//!
//! let codec = Codec::new(4, 2).unwrap(); // RAID-6 over 4 data chunks
//! let data: Vec<Vec<u8>> = (0..4).map(|j| vec![j as u8 + 1; 4096]).collect();
//! let mut p = vec![0u8; 4096];
//! let mut q = vec![0u8; 4096];
//! let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
//! codec.encode(&refs, &mut [&mut p, &mut q]).unwrap();
//! assert_eq!(p[0], 1 ^ 2 ^ 3 ^ 4);
//!
//! // Lose data chunk 1 and P; rebuild both.
//! let mut shards: Vec<Option<Vec<u8>>> = data.iter().cloned().map(Some).collect();
//! shards.push(Some(p.clone()));
//! shards.push(Some(q));
//! shards[1] = None;
//! shards[4] = None;
//! codec.reconstruct(&mut shards).unwrap();
//! assert_eq!(shards[1].as_deref(), Some(&data[1][..]));
//! assert_eq!(shards[4].as_deref(), Some(&p[..]));
//! ```

mod backend;
pub mod bench;
pub mod gf;
pub mod isal;
mod kernel;

pub use backend::Backend;
pub use bench::{bench_encode, bench_encode_isal_raw, bench_encode_with};

use backend::Matrix;

/// Most data chunks in a stripe.
pub const MAX_DATA_CHUNKS: usize = 253;
/// Most parity chunks in a stripe (and so most chunks one stripe can lose).
pub const MAX_PARITY_CHUNKS: usize = 4;
/// Most data chunks with [`MAX_PARITY_CHUNKS`] parity chunks for the code to stay MDS.
pub const MAX_DATA_CHUNKS_WITH_4_PARITY: usize = 21;
/// Most chunks in a stripe, data and parity.
pub const MAX_SHARDS: usize = MAX_DATA_CHUNKS + MAX_PARITY_CHUNKS;

/// Most data chunks supported with `parity_chunks` parity chunks; 0 when that parity count is
/// not supported. See the crate documentation for why.
pub const fn max_data_chunks(parity_chunks: usize) -> usize {
    match parity_chunks {
        1..=3 => MAX_DATA_CHUNKS,
        4 => MAX_DATA_CHUNKS_WITH_4_PARITY,
        _ => 0,
    }
}

/// The coefficient of data chunk `col` in parity row `row`: `(2^row)^col` in GF(2^8) / 0x11D,
/// as ISA-L's `gf_gen_rs_matrix` writes it. Row 0 is all ones (P), row 1 is `2^col` (Q).
pub fn coefficient(row: usize, col: usize) -> u8 {
    // (2^r)^c = 2^(r * c); reduce each factor first so the product cannot overflow.
    gf::exp2((row % 255) * (col % 255))
}

/// The product `a * b` in GF(2^8) with the polynomial 0x11D (ISA-L's `gf_mul`).
pub fn gf_mul(a: u8, b: u8) -> u8 {
    gf::mul(a, b)
}

/// What can go wrong; every check happens before any byte is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("unsupported erasure-code geometry {k}+{m}: {reason}")]
    Geometry { k: usize, m: usize, reason: &'static str },
    #[error("expected {expected} {what}, got {got}")]
    ChunkCount { what: &'static str, expected: usize, got: usize },
    #[error(
        "chunk {index} is {len_bytes} bytes, but the stripe's chunks are {expected_bytes} bytes"
    )]
    ChunkLength { index: usize, len_bytes: usize, expected_bytes: usize },
    #[error("parity row {row} out of range: the code has {m} parity rows")]
    Row { row: usize, m: usize },
    #[error("data chunk {index} out of range: the code has {k} data chunks")]
    DataIndex { index: usize, k: usize },
    #[error("{missing} chunks are missing, but the code rebuilds at most {m}")]
    TooManyErasures { missing: usize, m: usize },
    #[error("chunk {index} cannot be rebuilt: it is out of range or not missing")]
    Target { index: usize },
    #[error("the {backend} backend is not available in this build")]
    BackendUnavailable { backend: &'static str },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Checks that `k` data and `m` parity chunks form a supported, MDS geometry.
pub fn check_geometry(k: usize, m: usize) -> Result<()> {
    let reason = if k == 0 {
        "a stripe needs at least one data chunk"
    } else if k > MAX_DATA_CHUNKS {
        "at most 253 data chunks"
    } else if m == 0 {
        "a stripe needs at least one parity chunk"
    } else if m > MAX_PARITY_CHUNKS {
        "at most 4 parity chunks (beyond that ISA-L's Vandermonde-style matrix is not MDS)"
    } else if k > max_data_chunks(m) {
        "with 4 parity chunks at most 21 data chunks keep every loss of 4 chunks rebuildable"
    } else {
        return Ok(());
    };
    Err(Error::Geometry { k, m, reason })
}

/// Checks that every `(chunk number, length)` has the length of the first; returns it.
fn common_len(bufs: impl IntoIterator<Item = (usize, usize)>) -> Result<Option<usize>> {
    let mut expected = None;
    for (index, len_bytes) in bufs {
        match expected {
            None => expected = Some(len_bytes),
            Some(expected_bytes) if expected_bytes != len_bytes => {
                return Err(Error::ChunkLength { index, len_bytes, expected_bytes })
            }
            Some(_) => {}
        }
    }
    Ok(expected)
}

fn check_count(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::ChunkCount { what, expected, got })
    }
}

/// A `k + m` Reed-Solomon code with its tables prepared once. Cheap to share: `Send + Sync`,
/// and every method takes `&self`.
///
/// Chunks are numbered as a stripe lays them out: data chunks `0 .. k`, then parity chunks
/// `k .. k + m` (parity row `r` is chunk `k + r`). Chunks can have any length, but the chunks
/// of one call must all have the same length.
pub struct Codec {
    k: usize,
    m: usize,
    backend: Backend,
    /// The parity rows, `m` x `k` row-major.
    coefs: Vec<u8>,
    matrix: Matrix,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Codec")
            .field("k", &self.k)
            .field("m", &self.m)
            .field("kernel", &self.kernel())
            .finish()
    }
}

/// Bytes of the stack buffer [`Codec::update`] forms `old ^ new` in, piece by piece.
const DELTA_PIECE_BYTES: usize = 8192;

impl Codec {
    /// A code with `k` data and `m` parity chunks on the best backend ([`Backend::best`]).
    pub fn new(k: usize, m: usize) -> Result<Codec> {
        Codec::with_backend(k, m, Backend::best())
    }

    /// A code on a chosen backend; [`Error::BackendUnavailable`] for ISA-L in a build without
    /// it.
    pub fn with_backend(k: usize, m: usize, backend: Backend) -> Result<Codec> {
        check_geometry(k, m)?;
        let coefs: Vec<u8> = (0..m).flat_map(|r| (0..k).map(move |j| coefficient(r, j))).collect();
        let matrix = Matrix::new(backend, m, k, &coefs)?;
        Ok(Codec { k, m, backend, coefs, matrix })
    }

    /// Data chunks per stripe.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Parity chunks per stripe.
    pub fn m(&self) -> usize {
        self.m
    }

    /// "isa-l" or "rust".
    pub fn backend(&self) -> &'static str {
        self.backend.name()
    }

    pub fn backend_kind(&self) -> Backend {
        self.backend
    }

    /// The loop that does the work: "isa-l", "rust-avx2" or "rust-portable".
    pub fn kernel(&self) -> &'static str {
        self.matrix.kernel_name()
    }

    /// The parity matrix, `m` x `k` row-major: `matrix()[r * k + j] == coefficient(r, j)`.
    pub fn matrix(&self) -> &[u8] {
        &self.coefs
    }

    /// Computes all `m` parity chunks of the `k` data chunks.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<()> {
        check_count("data chunks", self.k, data.len())?;
        check_count("parity chunks", self.m, parity.len())?;
        let lens = data.iter().map(|d| d.len()).chain(parity.iter().map(|p| p.len()));
        let len = common_len(lens.enumerate())?.unwrap_or(0);
        self.matrix.multiply(0, data, parity, len);
        Ok(())
    }

    /// Computes parity row `row` only (0 = P, 1 = Q, ...) into `out`: what an SSD's
    /// conversion command computes for one parity type.
    pub fn encode_row(&self, row: usize, data: &[&[u8]], out: &mut [u8]) -> Result<()> {
        if row >= self.m {
            return Err(Error::Row { row, m: self.m });
        }
        check_count("data chunks", self.k, data.len())?;
        let lens = data.iter().map(|d| d.len()).enumerate().chain([(self.k + row, out.len())]);
        let len = common_len(lens)?.unwrap_or(0);
        self.matrix.multiply(row, data, &mut [out], len);
        Ok(())
    }

    /// Read-modify-write parity update for a partial-stripe write: data chunk `data_index`
    /// changes from `old` to `new`, and each parity row becomes
    /// `parity[r] ^= coefficient(r, data_index) * (old ^ new)`. Needs no other data chunk.
    pub fn update(
        &self,
        data_index: usize,
        old: &[u8],
        new: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<()> {
        self.check_update(data_index, parity, [old.len(), new.len()])?;
        let len = old.len();
        let mut delta = [0u8; DELTA_PIECE_BYTES];
        let mut off = 0;
        while off < len {
            let n = (len - off).min(DELTA_PIECE_BYTES);
            for ((d, o), w) in delta[..n].iter_mut().zip(&old[off..off + n]).zip(&new[off..off + n])
            {
                *d = o ^ w;
            }
            let mut outs: [&mut [u8]; MAX_PARITY_CHUNKS] = Default::default();
            for (o, p) in outs.iter_mut().zip(parity.iter_mut()) {
                *o = &mut p[off..off + n];
            }
            self.matrix.multiply_add_column(data_index, &delta[..n], &mut outs[..self.m], n);
            off += n;
        }
        Ok(())
    }

    /// `parity[r] ^= coefficient(r, data_index) * delta`: [`Codec::update`] when the caller
    /// already has `old ^ new`. With zeroed parity and `delta` = a data chunk, it adds that
    /// chunk's share, so a stripe can also be encoded chunk by chunk as data arrives.
    pub fn update_delta(
        &self,
        data_index: usize,
        delta: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<()> {
        self.check_update(data_index, parity, [delta.len(), delta.len()])?;
        self.matrix.multiply_add_column(data_index, delta, parity, delta.len());
        Ok(())
    }

    fn check_update(
        &self,
        data_index: usize,
        parity: &[&mut [u8]],
        lens: [usize; 2],
    ) -> Result<()> {
        if data_index >= self.k {
            return Err(Error::DataIndex { index: data_index, k: self.k });
        }
        check_count("parity chunks", self.m, parity.len())?;
        let all = lens
            .into_iter()
            .map(|l| (data_index, l))
            .chain(parity.iter().enumerate().map(|(r, p)| (self.k + r, p.len())));
        common_len(all)?;
        Ok(())
    }

    /// Prepares the rebuild of every missing chunk: `present[i]` says whether chunk `i` of the
    /// `k + m` is readable. The decoder is the per-erasure-pattern work (a `k` x `k` matrix
    /// inversion and table set-up); keep it while the pattern lasts, for example for all
    /// degraded reads while one member is failed.
    pub fn decoder(&self, present: &[bool]) -> Result<Decoder> {
        check_count("entries in the present mask", self.k + self.m, present.len())?;
        let missing: Vec<usize> = (0..present.len()).filter(|&i| !present[i]).collect();
        self.decoder_for(present, &missing)
    }

    /// Like [`Codec::decoder`], but rebuilds only `targets` (chunk numbers, each missing), for
    /// example just the data chunk a degraded read wants.
    pub fn decoder_for(&self, present: &[bool], targets: &[usize]) -> Result<Decoder> {
        let (k, m) = (self.k, self.m);
        check_count("entries in the present mask", k + m, present.len())?;
        let missing = present.iter().filter(|&&p| !p).count();
        if missing > m {
            return Err(Error::TooManyErasures { missing, m });
        }
        let mut targets = targets.to_vec();
        targets.sort_unstable();
        targets.dedup();
        if let Some(&index) = targets.iter().find(|&&t| t >= k + m || present[t]) {
            return Err(Error::Target { index });
        }
        // Any k readable chunks determine the stripe; take the first k.
        let sources: Vec<usize> = (0..k + m).filter(|&i| present[i]).take(k).collect();
        debug_assert_eq!(sources.len(), k);
        // Rows of the full generator [I; A] for the sources, inverted: data = inv * sources.
        let generator_row = |i: usize| -> Vec<u8> {
            if i < k {
                (0..k).map(|j| u8::from(j == i)).collect()
            } else {
                self.coefs[(i - k) * k..][..k].to_vec()
            }
        };
        let b: Vec<u8> = sources.iter().flat_map(|&i| generator_row(i)).collect();
        let inv = match self.backend {
            Backend::IsaL => isal::invert_matrix(&b, k)?,
            Backend::Rust | Backend::RustPortable => gf::invert_matrix(&b, k),
        }
        .expect("every k x k matrix of an MDS geometry's generator is invertible");
        // A target's recovery row: its generator row times the inverse.
        let recovery: Vec<u8> = targets
            .iter()
            .flat_map(|&t| gf::mul_matrix(&generator_row(t), &inv, 1, k, k))
            .collect();
        let matrix = Matrix::new(self.backend, targets.len(), k, &recovery)?;
        let mut role = vec![Role::None; k + m];
        sources.iter().for_each(|&s| role[s] = Role::Source);
        targets.iter().for_each(|&t| role[t] = Role::Target);
        Ok(Decoder { k, m, sources, targets, recovery, role, matrix })
    }

    /// Rebuilds every `None` chunk of a `k + m` stripe in place (allocating it). At most `m`
    /// may be missing; the present ones must have one length.
    pub fn reconstruct(&self, shards: &mut [Option<Vec<u8>>]) -> Result<()> {
        check_count("chunks", self.k + self.m, shards.len())?;
        let present: Vec<bool> = shards.iter().map(Option::is_some).collect();
        if present.iter().all(|&p| p) {
            return Ok(());
        }
        let lens = shards.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|v| (i, v.len())));
        let len = common_len(lens)?.unwrap_or(0);
        let decoder = self.decoder(&present)?;
        for s in shards.iter_mut().filter(|s| s.is_none()) {
            *s = Some(vec![0u8; len]);
        }
        let mut srcs: Vec<&[u8]> = Vec::with_capacity(self.k);
        let mut tgts: Vec<&mut [u8]> = Vec::with_capacity(self.m);
        for (i, s) in shards.iter_mut().enumerate() {
            let v = s.as_mut().expect("filled above");
            match decoder.role[i] {
                Role::Source => srcs.push(v.as_slice()),
                Role::Target => tgts.push(v.as_mut_slice()),
                Role::None => {}
            }
        }
        decoder.reconstruct_split(&srcs, &mut tgts)
    }

    /// Rebuilds the chunks that `present` marks missing, in caller-provided buffers:
    /// `shards` holds all `k + m` chunks, equal lengths, and the missing ones are overwritten.
    /// Allocates only the decoder; use [`Codec::decoder`] and [`Decoder::reconstruct`] to
    /// reuse it across calls.
    pub fn reconstruct_slices(&self, shards: &mut [&mut [u8]], present: &[bool]) -> Result<()> {
        self.decoder(present)?.reconstruct(shards)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    None,
    Source,
    Target,
}

/// The rebuild of one erasure pattern, prepared: which `k` chunks it reads (`sources`), which
/// it writes (`targets`), and the matrix between them. Rebuilding allocates nothing.
pub struct Decoder {
    k: usize,
    m: usize,
    sources: Vec<usize>,
    targets: Vec<usize>,
    recovery: Vec<u8>,
    role: Vec<Role>,
    matrix: Matrix,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("sources", &self.sources)
            .field("targets", &self.targets)
            .field("kernel", &self.matrix.kernel_name())
            .finish()
    }
}

impl Decoder {
    /// The chunk numbers read, ascending (`k` of them).
    pub fn sources(&self) -> &[usize] {
        &self.sources
    }

    /// The chunk numbers rebuilt, ascending.
    pub fn targets(&self) -> &[usize] {
        &self.targets
    }

    /// The recovery matrix, `targets().len()` x `k` row-major: target `t` is
    /// `XOR over s of matrix()[t * k + s] * chunk sources()[s]`.
    pub fn matrix(&self) -> &[u8] {
        &self.recovery
    }

    /// Rebuilds the targets in place: `shards` holds all `k + m` chunks of one length; the
    /// sources are read, the targets overwritten, the rest left alone.
    pub fn reconstruct(&self, shards: &mut [&mut [u8]]) -> Result<()> {
        check_count("chunks", self.k + self.m, shards.len())?;
        let used = shards.iter().enumerate().filter(|(i, _)| self.role[*i] != Role::None);
        let len = common_len(used.map(|(i, s)| (i, s.len())))?.unwrap_or(0);
        // A source array sized for the common small stripes, so a call does not clear
        // MAX_SHARDS slice references.
        if self.k <= 32 {
            self.gather_and_multiply::<32>(shards, len);
        } else {
            self.gather_and_multiply::<MAX_SHARDS>(shards, len);
        }
        Ok(())
    }

    fn gather_and_multiply<const N: usize>(&self, shards: &mut [&mut [u8]], len: usize) {
        let mut srcs: [&[u8]; N] = [&[]; N];
        let mut tgts: [&mut [u8]; MAX_PARITY_CHUNKS] = Default::default();
        let (mut ns, mut nt) = (0, 0);
        for (i, s) in shards.iter_mut().enumerate() {
            match self.role[i] {
                Role::Source => {
                    srcs[ns] = &**s;
                    ns += 1;
                }
                Role::Target => {
                    tgts[nt] = &mut **s;
                    nt += 1;
                }
                Role::None => {}
            }
        }
        self.matrix.multiply(0, &srcs[..ns], &mut tgts[..nt], len);
    }

    /// Rebuilds from separate buffers: `sources[s]` is chunk `sources()[s]`, `targets[t]`
    /// receives chunk `targets()[t]`; all of one length.
    pub fn reconstruct_split(&self, sources: &[&[u8]], targets: &mut [&mut [u8]]) -> Result<()> {
        check_count("source chunks", self.sources.len(), sources.len())?;
        check_count("target chunks", self.targets.len(), targets.len())?;
        let lens = (sources.iter().map(|s| s.len()).zip(&self.sources))
            .chain(targets.iter().map(|t| t.len()).zip(&self.targets))
            .map(|(len, &i)| (i, len));
        let len = common_len(lens)?.unwrap_or(0);
        self.matrix.multiply(0, sources, targets, len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn codec_and_decoder_are_shareable() {
        fn shareable<T: Send + Sync>() {}
        shareable::<super::Codec>();
        shareable::<super::Decoder>();
    }
}
