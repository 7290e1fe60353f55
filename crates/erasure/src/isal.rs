//! A thin hand-written FFI to the erasure-code part of Intel ISA-L (`isa-l/erasure_code.h`),
//! and safe wrappers for the few calls this crate and its tests need.
//!
//! The library is linked by build.rs when it finds libisal (then `cfg(has_isal)` is set).
//! Without it this module still exists, and every function reports the library as absent, so
//! callers and tests need no `cfg` of their own.

use crate::{Error, Result};

/// Whether this build links Intel ISA-L.
pub const fn available() -> bool {
    cfg!(has_isal)
}

/// How build.rs found ISA-L ("pkg-config", "library directory" or "ISAL_LIB_DIR"), or `None`
/// when this build has no ISA-L (not found, or `FLASHRIG_NO_ISAL=1` at build time).
pub fn found_by() -> Option<&'static str> {
    let how = env!("FLASHRIG_ISAL_FOUND_BY");
    (!how.is_empty()).then_some(how)
}

#[cfg(has_isal)]
pub(crate) mod ffi {
    //! Declarations copied from ISA-L 2.x `erasure_code.h`; these signatures have been stable
    //! since ISA-L 2.10. `unsigned char` is `u8` and `int` is `c_int` on every platform ISA-L
    //! supports. ISA-L never writes through its `data` / source pointers even where the header
    //! does not say `const`.
    use std::os::raw::{c_int, c_uchar};

    extern "C" {
        /// Expands the `rows` x `k` coefficient matrix `a` into `32 * k * rows` bytes of
        /// split-nibble lookup tables for the `ec_encode_data*` functions.
        pub fn ec_init_tables(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
        /// `coding[r][i] = sum_j a[r][j] * data[j][i]` for `i < len`, dispatching at run time
        /// to the best SIMD kernel of the CPU.
        pub fn ec_encode_data(
            len: c_int,
            k: c_int,
            rows: c_int,
            gftbls: *mut c_uchar,
            data: *mut *mut c_uchar,
            coding: *mut *mut c_uchar,
        );
        /// `coding[r][i] ^= a[r][vec_i] * data[i]`: the contribution of one source.
        pub fn ec_encode_data_update(
            len: c_int,
            k: c_int,
            rows: c_int,
            vec_i: c_int,
            g_tbls: *mut c_uchar,
            data: *mut c_uchar,
            coding: *mut *mut c_uchar,
        );
        pub fn gf_mul(a: c_uchar, b: c_uchar) -> c_uchar;
        /// Inverts the `n` x `n` matrix `in_` into `out`, destroying `in_`; 0 on success,
        /// nonzero when singular.
        pub fn gf_invert_matrix(in_: *mut c_uchar, out: *mut c_uchar, n: c_int) -> c_int;
        /// Writes the `m` x `k` matrix: identity on top, then row `i` (for `k <= i < m`) holds
        /// `(2^(i-k))^j`.
        pub fn gf_gen_rs_matrix(a: *mut c_uchar, m: c_int, k: c_int);
    }
}

/// ISA-L's `gf_mul(a, b)`.
pub fn gf_mul(a: u8, b: u8) -> Result<u8> {
    #[cfg(has_isal)]
    {
        // SAFETY: a pure function of two bytes (table look-ups in the library's static data).
        Ok(unsafe { ffi::gf_mul(a, b) })
    }
    #[cfg(not(has_isal))]
    {
        let _ = (a, b);
        Err(Error::BackendUnavailable { backend: "isa-l" })
    }
}

/// ISA-L's `gf_gen_rs_matrix` for `k` data and `m` parity chunks: the `m` x `k` parity part,
/// row-major (the identity on top is left out).
pub fn gen_rs_matrix(k: usize, m: usize) -> Result<Vec<u8>> {
    #[cfg(has_isal)]
    {
        let total = k + m;
        let (Ok(total_c), Ok(k_c)) = (i32::try_from(total), i32::try_from(k)) else {
            return Err(Error::Geometry { k, m, reason: "too large for ISA-L" });
        };
        let mut a = vec![0u8; total * k];
        // SAFETY: `a` holds exactly `total * k` bytes, the size gf_gen_rs_matrix writes.
        unsafe { ffi::gf_gen_rs_matrix(a.as_mut_ptr(), total_c, k_c) };
        Ok(a.split_off(k * k))
    }
    #[cfg(not(has_isal))]
    {
        Err(Error::Geometry { k, m, reason: "ISA-L is not linked in this build" })
    }
}

/// Inverts the `n` x `n` row-major matrix with ISA-L's `gf_invert_matrix`; `Ok(None)` when it
/// is singular.
pub fn invert_matrix(a: &[u8], n: usize) -> Result<Option<Vec<u8>>> {
    #[cfg(has_isal)]
    {
        assert_eq!(a.len(), n * n, "invert_matrix: {} bytes is not a {n} x {n} matrix", a.len());
        let n_c = i32::try_from(n).expect("matrix dimension fits an int");
        let mut work = a.to_vec();
        let mut out = vec![0u8; n * n];
        // SAFETY: both buffers hold n * n bytes, as gf_invert_matrix reads and writes; `work`
        // is a scratch copy it may destroy.
        let rc = unsafe { ffi::gf_invert_matrix(work.as_mut_ptr(), out.as_mut_ptr(), n_c) };
        Ok((rc == 0).then_some(out))
    }
    #[cfg(not(has_isal))]
    {
        let _ = (a, n);
        Err(Error::BackendUnavailable { backend: "isa-l" })
    }
}
