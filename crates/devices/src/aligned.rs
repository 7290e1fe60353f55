//! Heap buffers aligned for direct I/O.

/// Alignment of direct-I/O buffers: the largest logical sector size in common use.
pub const ALIGN: usize = 4096;

/// A heap buffer whose start is [`ALIGN`]-aligned, for O_DIRECT, built without unsafe code by
/// over-allocating and slicing at the aligned offset.
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes.
    pub fn new(len: usize) -> Self {
        let storage = vec![0u8; len + ALIGN];
        let start = storage.as_ptr().align_offset(ALIGN);
        Self { storage, start, len }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }

    pub fn bytes(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

/// Whether `buf` can be handed to O_DIRECT as it is.
pub fn is_aligned(buf: &[u8]) -> bool {
    (buf.as_ptr() as usize).is_multiple_of(ALIGN) && buf.len().is_multiple_of(512)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_sized() {
        for len in [0, 1, 512, 4096, 12345] {
            let mut b = AlignedBuf::new(len);
            assert_eq!(b.bytes_mut().len(), len);
            assert_eq!(b.bytes().as_ptr() as usize % ALIGN, 0);
        }
    }
}
