//! Encoding throughput, for `flashrig calibrate` and reports: data bytes encoded per second
//! through [`Codec::encode`], and through ISA-L's `ec_encode_data` called directly, on the same
//! buffers, so the wrapper's cost is visible.
//!
//! A working set of stripes is encoded round robin: a working set of one stripe
//! (`k * chunk_bytes`) measures "hot" encoding from cache; a large one (1 GiB) measures
//! "cold" encoding from memory, as an engine does for fresh writes. Parity buffers are
//! separate per stripe too. The set is filled with pseudo-random bytes and encoded once
//! before timing (page faults, cache state, ISA-L's CPU dispatch). Rates are in GB/s of data
//! (10^9 bytes per second; parity bytes are not counted), on the calling thread.

use std::time::{Duration, Instant};

use crate::{check_geometry, Backend, Codec, Error, Result};

/// Data GB/s (10^9 bytes/s) through [`Codec::encode`] on the best backend, for `seconds` of
/// wall time over `working_set_bytes` of data (at least one stripe).
pub fn bench_encode(
    k: usize,
    m: usize,
    chunk_bytes: usize,
    working_set_bytes: usize,
    seconds: f64,
) -> Result<f64> {
    bench_encode_with(Backend::best(), k, m, chunk_bytes, working_set_bytes, seconds)
}

/// [`bench_encode`] on a chosen backend.
pub fn bench_encode_with(
    backend: Backend,
    k: usize,
    m: usize,
    chunk_bytes: usize,
    working_set_bytes: usize,
    seconds: f64,
) -> Result<f64> {
    let codec = Codec::with_backend(k, m, backend)?;
    let mut set = WorkingSet::new(k, m, chunk_bytes, working_set_bytes)?;
    let (data, mut parity) = set.stripes();
    Ok(time_round_robin(seconds, data.len(), k * chunk_bytes, |s| {
        codec.encode(&data[s], &mut parity[s]).expect("buffers shaped for the codec");
    }))
}

/// Data GB/s of ISA-L's `ec_encode_data` called directly (no wrapper, no checks, followed
/// only by the `vzeroupper` the codec also issues) with the same matrix and working set as
/// [`bench_encode`]; `Ok(None)` in a build without ISA-L.
pub fn bench_encode_isal_raw(
    k: usize,
    m: usize,
    chunk_bytes: usize,
    working_set_bytes: usize,
    seconds: f64,
) -> Result<Option<f64>> {
    check_arguments(k, m, chunk_bytes)?;
    #[cfg(has_isal)]
    {
        let mut set = WorkingSet::new(k, m, chunk_bytes, working_set_bytes)?;
        use crate::isal::ffi;
        let Ok(len) = i32::try_from(chunk_bytes) else {
            return Err(Error::Geometry {
                k,
                m,
                reason: "ISA-L takes chunk lengths up to 2^31 - 1 bytes",
            });
        };
        let mut a = crate::isal::gen_rs_matrix(k, m)?;
        let mut gftbls = vec![0u8; 32 * k * m];
        // SAFETY: `a` is m x k and `gftbls` the 32 * k * m bytes ec_init_tables writes.
        unsafe { ffi::ec_init_tables(k as i32, m as i32, a.as_mut_ptr(), gftbls.as_mut_ptr()) };
        let (data, mut parity) = set.stripes();
        let mut data_ptrs: Vec<Vec<*mut u8>> =
            data.iter().map(|s| s.iter().map(|d| d.as_ptr().cast_mut()).collect()).collect();
        let mut parity_ptrs: Vec<Vec<*mut u8>> =
            parity.iter_mut().map(|s| s.iter_mut().map(|p| p.as_mut_ptr()).collect()).collect();
        let rate = time_round_robin(seconds, data.len(), k * chunk_bytes, |s| {
            // SAFETY: stripe `s` has k data and m parity pointers, each to `len` bytes of
            // buffers that `set` keeps alive; parity buffers are distinct and alias no data;
            // ISA-L only reads the data buffers.
            unsafe {
                ffi::ec_encode_data(
                    len,
                    k as i32,
                    m as i32,
                    gftbls.as_mut_ptr(),
                    data_ptrs[s].as_mut_ptr(),
                    parity_ptrs[s].as_mut_ptr(),
                )
            };
            // As the codec does after each ISA-L call (see its comment), so both loops
            // pay the same and the difference is the wrapper.
            crate::backend::clear_upper_vector_state();
        });
        Ok(Some(rate))
    }
    #[cfg(not(has_isal))]
    {
        let _ = (working_set_bytes, seconds);
        Ok(None)
    }
}

fn check_arguments(k: usize, m: usize, chunk_bytes: usize) -> Result<()> {
    check_geometry(k, m)?;
    if chunk_bytes == 0 {
        return Err(Error::Geometry {
            k,
            m,
            reason: "benchmark chunks must hold at least one byte",
        });
    }
    Ok(())
}

/// The data and parity of `stripes` stripes, each chunk its own `chunk_bytes` slice.
struct WorkingSet {
    k: usize,
    m: usize,
    chunk_bytes: usize,
    data: Vec<u8>,
    parity: Vec<u8>,
}

/// Per-stripe data chunks and parity chunks, borrowed from a [`WorkingSet`].
type Stripes<'a> = (Vec<Vec<&'a [u8]>>, Vec<Vec<&'a mut [u8]>>);

impl WorkingSet {
    fn new(k: usize, m: usize, chunk_bytes: usize, working_set_bytes: usize) -> Result<WorkingSet> {
        check_arguments(k, m, chunk_bytes)?;
        let stripe_bytes = k * chunk_bytes;
        let stripes = (working_set_bytes / stripe_bytes).max(1);
        let mut data = vec![0u8; stripes * stripe_bytes];
        // xorshift64: incompressible, and every page really written (not the shared zero page).
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for word in data.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            word.copy_from_slice(&x.to_le_bytes()[..word.len()]);
        }
        let parity = vec![0u8; stripes * m * chunk_bytes];
        Ok(WorkingSet { k, m, chunk_bytes, data, parity })
    }

    fn stripes(&mut self) -> Stripes<'_> {
        let data = self
            .data
            .chunks(self.k * self.chunk_bytes)
            .map(|s| s.chunks(self.chunk_bytes).collect())
            .collect();
        let parity = self
            .parity
            .chunks_mut(self.m * self.chunk_bytes)
            .map(|s| s.chunks_mut(self.chunk_bytes).collect())
            .collect();
        (data, parity)
    }
}

/// Calls `encode(stripe)` round robin over `stripes` stripes, once over all of them untimed,
/// then for `seconds`; returns data GB/s.
fn time_round_robin(
    seconds: f64,
    stripes: usize,
    data_bytes_per_call: usize,
    mut encode: impl FnMut(usize),
) -> f64 {
    for s in 0..stripes {
        encode(s);
    }
    let budget = Duration::from_secs_f64(seconds.max(0.0));
    let start = Instant::now();
    let mut calls: u64 = 0;
    let mut s = 0;
    let elapsed = loop {
        encode(s);
        calls += 1;
        s = if s + 1 == stripes { 0 } else { s + 1 };
        let elapsed = start.elapsed();
        if elapsed >= budget {
            break elapsed;
        }
    };
    calls as f64 * data_bytes_per_call as f64 / elapsed.as_secs_f64() / 1e9
}
