//! The one narrow seam between the codec and its two implementations: a coefficient matrix,
//! prepared once, that multiplies a set of equal-length source buffers into output buffers.
//! Encoding, single-row encoding, parity updates and reconstruction are all this one
//! operation with different matrices.

use crate::kernel::{Kernel, Tables};
use crate::{Result, MAX_PARITY_CHUNKS, MAX_SHARDS};

/// Which implementation does the arithmetic. Both use the same field and the same matrices,
/// so they produce identical bytes: parity written by one is decoded by the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Intel ISA-L (`ec_encode_data` and friends), when this build links it.
    IsaL,
    /// The pure-Rust backend with the fastest kernel for this CPU (AVX2 on x86-64 that has
    /// it, else the portable one).
    Rust,
    /// The pure-Rust backend with its portable kernel forced (for tests and comparisons).
    RustPortable,
}

impl Backend {
    /// ISA-L when this build links it, else [`Backend::Rust`].
    pub fn best() -> Backend {
        if Backend::IsaL.is_available() {
            Backend::IsaL
        } else {
            Backend::Rust
        }
    }

    /// Every backend this build and CPU can run.
    pub fn available() -> Vec<Backend> {
        [Backend::IsaL, Backend::Rust, Backend::RustPortable]
            .into_iter()
            .filter(|b| b.is_available())
            .collect()
    }

    pub fn is_available(self) -> bool {
        match self {
            Backend::IsaL => crate::isal::available(),
            Backend::Rust | Backend::RustPortable => true,
        }
    }

    /// "isa-l" or "rust".
    pub fn name(self) -> &'static str {
        match self {
            Backend::IsaL => "isa-l",
            Backend::Rust | Backend::RustPortable => "rust",
        }
    }
}

/// A `rows` x `cols` coefficient matrix prepared for one backend.
pub(crate) struct Matrix {
    rows: usize,
    cols: usize,
    imp: Imp,
}

enum Imp {
    Rust(Tables),
    /// ISA-L's expanded tables from `ec_init_tables`: 32 bytes per coefficient, row-major.
    #[cfg(has_isal)]
    IsaL(Vec<u8>),
}

/// ISA-L takes lengths as `int`; longer buffers go through in pieces of this many bytes.
#[cfg(has_isal)]
const ISAL_PIECE_BYTES: usize = 1 << 30;

impl Matrix {
    /// Prepares `coefs` (`rows` x `cols`, row-major) for `backend`.
    pub(crate) fn new(backend: Backend, rows: usize, cols: usize, coefs: &[u8]) -> Result<Matrix> {
        assert_eq!(coefs.len(), rows * cols);
        assert!(rows <= MAX_SHARDS && cols <= MAX_SHARDS);
        let imp = match backend {
            Backend::Rust => Imp::Rust(Tables::new(Kernel::detect(), rows, cols, coefs)),
            Backend::RustPortable => Imp::Rust(Tables::new(Kernel::Portable, rows, cols, coefs)),
            #[cfg(has_isal)]
            Backend::IsaL => {
                let mut a = coefs.to_vec();
                let mut gftbls = vec![0u8; 32 * rows * cols];
                // SAFETY: `a` holds rows * cols coefficients and `gftbls` the 32 * rows * cols
                // bytes ec_init_tables writes; both dimensions are at most MAX_SHARDS, so
                // they fit an int.
                unsafe {
                    crate::isal::ffi::ec_init_tables(
                        cols as i32,
                        rows as i32,
                        a.as_mut_ptr(),
                        gftbls.as_mut_ptr(),
                    )
                };
                Imp::IsaL(gftbls)
            }
            #[cfg(not(has_isal))]
            Backend::IsaL => return Err(crate::Error::BackendUnavailable { backend: "isa-l" }),
        };
        Ok(Matrix { rows, cols, imp })
    }

    /// "isa-l", "rust-avx2" or "rust-portable".
    pub(crate) fn kernel_name(&self) -> &'static str {
        match &self.imp {
            Imp::Rust(t) => t.kernel().name(),
            #[cfg(has_isal)]
            Imp::IsaL(_) => "isa-l",
        }
    }

    /// `outs[i] = sum_j c[row_start + i][j] * srcs[j]` over the first `len` bytes, with
    /// `srcs.len() == cols`. The caller has checked counts and lengths.
    pub(crate) fn multiply(
        &self,
        row_start: usize,
        srcs: &[&[u8]],
        outs: &mut [&mut [u8]],
        len: usize,
    ) {
        debug_assert_eq!(srcs.len(), self.cols);
        debug_assert!(row_start + outs.len() <= self.rows && outs.len() <= MAX_PARITY_CHUNKS);
        if len == 0 || outs.is_empty() {
            return;
        }
        match &self.imp {
            Imp::Rust(t) => t.dot(row_start, 0, srcs, outs, len, false),
            #[cfg(has_isal)]
            Imp::IsaL(gftbls) => {
                let tbls = &gftbls[32 * row_start * self.cols..][..32 * outs.len() * self.cols];
                // A pointer array sized for the common small stripes, so a call does not clear
                // MAX_SHARDS pointers.
                if srcs.len() <= 32 {
                    isal_encode::<32>(tbls, srcs, outs, len);
                } else {
                    isal_encode::<MAX_SHARDS>(tbls, srcs, outs, len);
                }
            }
        }
    }

    /// `outs[r] ^= c[r][col] * src` over the first `len` bytes for every row `r`
    /// (`outs.len() == rows`): the contribution of one source column.
    pub(crate) fn multiply_add_column(
        &self,
        col: usize,
        src: &[u8],
        outs: &mut [&mut [u8]],
        len: usize,
    ) {
        debug_assert!(
            col < self.cols && outs.len() == self.rows && outs.len() <= MAX_PARITY_CHUNKS
        );
        if len == 0 {
            return;
        }
        match &self.imp {
            Imp::Rust(t) => t.dot(0, col, &[src], outs, len, true),
            #[cfg(has_isal)]
            Imp::IsaL(gftbls) => {
                assert!(src.len() >= len && outs.iter().all(|o| o.len() >= len));
                let mut out_ptrs = [std::ptr::null_mut::<u8>(); MAX_PARITY_CHUNKS];
                let mut off = 0;
                while off < len {
                    let piece = (len - off).min(ISAL_PIECE_BYTES);
                    for (p, o) in out_ptrs.iter_mut().zip(outs.iter_mut()) {
                        *p = o[off..].as_mut_ptr();
                    }
                    // SAFETY: `src` and the first `rows` output pointers each hold `piece`
                    // valid bytes from `off`; outputs are distinct `&mut` buffers; `gftbls`
                    // holds the full rows x cols tables that ec_encode_data_update indexes by
                    // `col`; ISA-L only reads `src`.
                    unsafe {
                        crate::isal::ffi::ec_encode_data_update(
                            piece as i32,
                            self.cols as i32,
                            self.rows as i32,
                            col as i32,
                            gftbls.as_ptr().cast_mut(),
                            src[off..].as_ptr().cast_mut(),
                            out_ptrs.as_mut_ptr(),
                        )
                    };
                    off += piece;
                }
                clear_upper_vector_state();
            }
        }
    }
}

/// `ec_encode_data` over `srcs` into `outs` (one output per table row of `tbls`), in pieces
/// whose length fits an `int`, with source pointers in an `N`-entry stack array.
#[cfg(has_isal)]
fn isal_encode<const N: usize>(tbls: &[u8], srcs: &[&[u8]], outs: &mut [&mut [u8]], len: usize) {
    assert!(
        srcs.len() <= N
            && outs.len() <= MAX_PARITY_CHUNKS
            && tbls.len() == 32 * srcs.len() * outs.len()
    );
    assert!(srcs.iter().all(|s| s.len() >= len) && outs.iter().all(|o| o.len() >= len));
    let mut src_ptrs = [std::ptr::null_mut::<u8>(); N];
    let mut out_ptrs = [std::ptr::null_mut::<u8>(); MAX_PARITY_CHUNKS];
    let mut off = 0;
    while off < len {
        let piece = (len - off).min(ISAL_PIECE_BYTES);
        for (p, s) in src_ptrs.iter_mut().zip(srcs) {
            // ISA-L's prototype takes `unsigned char **` but only reads sources.
            *p = s[off..].as_ptr().cast_mut();
        }
        for (p, o) in out_ptrs.iter_mut().zip(outs.iter_mut()) {
            *p = o[off..].as_mut_ptr();
        }
        // SAFETY: the first srcs.len() source pointers and outs.len() output pointers each
        // point at `piece` valid bytes (asserted above); outputs are distinct `&mut` buffers,
        // so they alias nothing; `tbls` holds the 32 * srcs * outs table bytes ISA-L reads;
        // counts are at most MAX_SHARDS and piece <= 2^30, so all fit an int; ISA-L does not
        // write through the source pointers or the tables.
        unsafe {
            crate::isal::ffi::ec_encode_data(
                piece as i32,
                srcs.len() as i32,
                outs.len() as i32,
                tbls.as_ptr().cast_mut(),
                src_ptrs.as_mut_ptr(),
                out_ptrs.as_mut_ptr(),
            )
        };
        off += piece;
    }
    clear_upper_vector_state();
}

/// Executes `vzeroupper` after an ISA-L call on CPUs with AVX.
///
/// ISA-L's AVX2 kernels return with the upper halves of the YMM registers dirty. Rust code
/// built for baseline x86-64 uses legacy SSE encodings, and the first of those after a dirty
/// AVX state pays a state transition (or, on newer cores, false dependencies): measured here
/// as ~0.3 us per call, which halved the rate of 1 KiB-chunk encodes compared with the
/// library called from a tight loop. Compilers emit `vzeroupper` before returning from AVX
/// code for exactly this reason; this restores that convention at the FFI boundary.
#[cfg(has_isal)]
#[inline]
pub(crate) fn clear_upper_vector_state() {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        #[target_feature(enable = "avx")]
        unsafe fn vzeroupper() {
            std::arch::x86_64::_mm256_zeroupper();
        }
        // SAFETY: the CPU has AVX (checked just above). vzeroupper only clears bits 128 and up
        // of the vector registers, which are caller-saved: no Rust value lives in them across
        // this call.
        unsafe { vzeroupper() };
    }
}
