//! An [`Export`]: a device stack seen as a disk of bytes, for frontends whose clients address
//! bytes (NBD, a FUSE file) rather than the stack's blocks.
//!
//! A frontend thread [`Export::submit`]s a [`Request`] to a reactor; the reactor runs it as a
//! task on the stack and calls the frontend's completion back on the reactor's thread, which is
//! where the frontend sends its reply from (or hands it to a writer thread). Requests in flight
//! are counted so a shutdown can wait for them before the stack is flushed.
//!
//! Byte ranges that do not start and end on block boundaries are served as the block-aligned
//! middle plus read-modify-write of the partial blocks at the ends. Two requests touching
//! different bytes of one block must not lose each other's update, so a partial block is held
//! under a per-block async lock ([`StripeLocks`]) from its read to its write. A full-block write
//! does not take the lock: a client that writes the same bytes from two requests at once gets
//! one of them, as from any disk.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use flashrig_blockdev::{BlockDevice, DevError, DevRef, WriteHints, ZoneError};
use flashrig_engines::raid::locks::StripeLocks;
use flashrig_runtime::real::Handle;
use thiserror::Error;

/// Largest piece of zeros written at once when zeros must really be written (not trimmed).
const ZERO_PIECE_BYTES: u64 = 1 << 20;

/// What a client asks of the export, in bytes.
#[derive(Debug)]
pub enum Request {
    Read {
        offset: u64,
        len: u64,
    },
    /// Writes `data` at `offset`; with `fua` the data is durable when the reply is sent.
    Write {
        offset: u64,
        data: Vec<u8>,
        fua: bool,
    },
    /// Every write completed before the flush is durable when it completes.
    Flush,
    /// Deallocates the range. Advisory, as NBD's trim and a disk's discard are: the whole blocks
    /// inside the range are trimmed, the partial ones at its ends are left alone.
    Trim {
        offset: u64,
        len: u64,
    },
    /// The range reads as zeros afterwards. Whole blocks are trimmed (the block-device contract
    /// has trimmed blocks read as zeros) unless `allocate` asks for zeros really written
    /// (NBD_CMD_FLAG_NO_HOLE, fallocate's ZERO_RANGE); the partial blocks are zeroed in place.
    WriteZeroes {
        offset: u64,
        len: u64,
        fua: bool,
        allocate: bool,
    },
}

impl Request {
    /// Whether the request changes the export's contents.
    pub fn writes(&self) -> bool {
        matches!(self, Request::Write { .. } | Request::Trim { .. } | Request::WriteZeroes { .. })
    }
}

/// The answer to a request that succeeded.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Data(Vec<u8>),
    Done,
}

/// Why a request failed, with the errno a frontend answers with ([`ExportError::errno`]).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ExportError {
    #[error("bytes {offset}..{} lie outside the export's {size_bytes} bytes", offset.saturating_add(*len))]
    OutOfRange { offset: u64, len: u64, size_bytes: u64, write: bool },
    #[error("the export is read-only")]
    ReadOnly,
    #[error("the export is shutting down")]
    ShuttingDown,
    #[error("device stack: {0}")]
    Device(#[from] DevError),
}

impl ExportError {
    /// The errno for the client: writes past the end are ENOSPC and other ranges EINVAL (as the
    /// NBD protocol asks), a read-only export EPERM, and the stack's errors by kind: a full
    /// device ENOSPC, an unsupported command EOPNOTSUPP, a malformed one EINVAL, and media,
    /// device and I/O failures EIO.
    pub fn errno(&self) -> i32 {
        match self {
            ExportError::OutOfRange { write: true, .. } => libc::ENOSPC,
            ExportError::OutOfRange { write: false, .. } => libc::EINVAL,
            ExportError::ReadOnly => libc::EPERM,
            ExportError::ShuttingDown => libc::ESHUTDOWN,
            ExportError::Device(e) => match e {
                DevError::NoSpace(_) => libc::ENOSPC,
                DevError::Unsupported { .. } => libc::EOPNOTSUPP,
                DevError::OutOfRange { .. }
                | DevError::Misaligned { .. }
                | DevError::MetadataLength { .. }
                | DevError::Invalid(_) => libc::EINVAL,
                DevError::ReadMedia { .. }
                | DevError::WriteMedia { .. }
                | DevError::DeviceFailed { .. }
                | DevError::Corrupt { .. }
                | DevError::Io { .. } => libc::EIO,
                // Linux's block layer maps the ZNS resource errors this way (blk_errors[]).
                DevError::Zone { error: ZoneError::TooManyOpen { .. }, .. } => libc::ETOOMANYREFS,
                DevError::Zone { error: ZoneError::TooManyActive { .. }, .. } => libc::EOVERFLOW,
                DevError::Zone { .. } => libc::EIO,
            },
        }
    }
}

/// Counters of what the export served (all frontends of one export together).
#[derive(Debug, Default)]
pub struct ExportCounters {
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    pub writes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub flushes: AtomicU64,
    pub trims: AtomicU64,
    pub write_zeroes: AtomicU64,
    /// Partial blocks served by read-modify-write.
    pub partial_blocks: AtomicU64,
    pub errors: AtomicU64,
}

/// A stack exported as a disk of `size_bytes()` bytes.
pub struct Export {
    name: String,
    dev: DevRef,
    handle: Handle,
    block_bytes: u64,
    size_bytes: u64,
    read_only: bool,
    /// The stack makes a write durable at completion when asked (else FUA is a write and a
    /// flush).
    fua_native: bool,
    /// Read-modify-write locks by block of the device below the whole export, shared with
    /// the export's partitions so that sub-block writes through two views of one block are
    /// serialised too.
    partial: Arc<StripeLocks>,
    /// Added to a block number before locking it: where this view starts on the whole device.
    lock_base_blocks: u64,
    /// In-flight accounting, shutdown and counters are the whole export's, shared by its
    /// partitions: a shutdown drains and reports every view.
    inflight: Arc<AtomicU64>,
    closing: Arc<AtomicBool>,
    pub counters: Arc<ExportCounters>,
}

/// What a frontend is called back with when its request completes (on a reactor thread).
pub type Completion = Box<dyn FnOnce(Result<Reply, ExportError>) + Send>;

impl Export {
    /// Exports `dev`, whose requests will run on the reactors of the runtime behind `handle`.
    pub fn new(name: &str, dev: DevRef, handle: Handle, read_only: bool) -> Arc<Export> {
        let info = dev.info();
        let block_bytes = info.block_size as u64;
        Arc::new(Export {
            name: name.to_string(),
            size_bytes: info.num_blocks * block_bytes,
            fua_native: info.caps.fua,
            dev,
            handle,
            block_bytes,
            read_only,
            partial: Arc::new(StripeLocks::default()),
            lock_base_blocks: 0,
            inflight: Arc::new(AtomicU64::new(0)),
            closing: Arc::new(AtomicBool::new(false)),
            counters: Arc::new(ExportCounters::default()),
        })
    }

    /// The export's device split into `count` equal partitions (the last takes the
    /// remainder), each an export of its own named `{prefix}{i}`, sharing this export's
    /// shutdown, in-flight count, counters and sub-block write locks.
    pub fn partitions(
        self: &Arc<Self>,
        prefix: &str,
        count: u64,
    ) -> Result<Vec<Arc<Export>>, DevError> {
        let parts = flashrig_engines::Partition::split(prefix, &self.dev, count)?;
        Ok(parts
            .into_iter()
            .map(|p| {
                let lock_base_blocks = self.lock_base_blocks + p.first_block();
                let name = p.info().name.clone();
                let dev: DevRef = Arc::new(p);
                let info = dev.info();
                Arc::new(Export {
                    name,
                    size_bytes: info.num_blocks * self.block_bytes,
                    fua_native: info.caps.fua,
                    dev,
                    handle: self.handle.clone(),
                    block_bytes: self.block_bytes,
                    read_only: self.read_only,
                    partial: self.partial.clone(),
                    lock_base_blocks,
                    inflight: self.inflight.clone(),
                    closing: self.closing.clone(),
                    counters: self.counters.clone(),
                })
            })
            .collect())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// The stack's block: the smallest request served without read-modify-write.
    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// The request size the stack prefers (its chunk, for arrays), at least a block.
    pub fn preferred_bytes(&self) -> u64 {
        (self.dev.info().optimal_io_blocks as u64 * self.block_bytes).max(self.block_bytes)
    }

    pub fn read_only(&self) -> bool {
        self.read_only
    }

    pub fn reactors(&self) -> usize {
        self.handle.num_reactors()
    }

    pub fn device(&self) -> &DevRef {
        &self.dev
    }

    /// Requests submitted and not completed yet.
    pub fn in_flight(&self) -> u64 {
        self.inflight.load(Ordering::Acquire)
    }

    /// Refuses new requests from now on (they complete with [`ExportError::ShuttingDown`]);
    /// the ones in flight run to completion.
    pub fn close(&self) {
        self.closing.store(true, Ordering::Release);
    }

    /// Runs `req` on reactor `reactor % reactors()` and calls `done` with its outcome there.
    pub fn submit(self: &Arc<Self>, reactor: usize, req: Request, done: Completion) {
        if self.closing.load(Ordering::Acquire) || self.handle.stopped() {
            done(Err(ExportError::ShuttingDown));
            return;
        }
        self.inflight.fetch_add(1, Ordering::AcqRel);
        let me = self.clone();
        let target = reactor % self.handle.num_reactors();
        self.handle.send(
            target,
            Box::new(move || {
                drop(flashrig_runtime::spawn(async move {
                    let r = me.execute(req).await;
                    if r.is_err() {
                        me.counters.errors.fetch_add(1, Ordering::Relaxed);
                    }
                    // Counted out before the reply leaves, so a shutdown that sees zero knows
                    // every reply's data is on the stack.
                    me.inflight.fetch_sub(1, Ordering::AcqRel);
                    done(r);
                }));
            }),
        );
    }

    /// Runs `req` on the calling reactor.
    pub async fn execute(&self, req: Request) -> Result<Reply, ExportError> {
        if self.read_only && req.writes() {
            return Err(ExportError::ReadOnly);
        }
        let c = &self.counters;
        match req {
            Request::Read { offset, len } => {
                self.check(offset, len, false)?;
                c.reads.fetch_add(1, Ordering::Relaxed);
                c.read_bytes.fetch_add(len, Ordering::Relaxed);
                let mut buf = vec![0u8; len as usize];
                self.read_bytes(offset, &mut buf).await?;
                Ok(Reply::Data(buf))
            }
            Request::Write { offset, data, fua } => {
                self.check(offset, data.len() as u64, true)?;
                c.writes.fetch_add(1, Ordering::Relaxed);
                c.write_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                self.write_bytes(offset, &data, fua).await?;
                Ok(Reply::Done)
            }
            Request::Flush => {
                c.flushes.fetch_add(1, Ordering::Relaxed);
                self.dev.flush().await?;
                Ok(Reply::Done)
            }
            Request::Trim { offset, len } => {
                self.check(offset, len, true)?;
                c.trims.fetch_add(1, Ordering::Relaxed);
                let (first, end) = self.whole_blocks(offset, len);
                if end > first {
                    self.dev.trim(first, end - first).await?;
                }
                Ok(Reply::Done)
            }
            Request::WriteZeroes { offset, len, fua, allocate } => {
                self.check(offset, len, true)?;
                c.write_zeroes.fetch_add(1, Ordering::Relaxed);
                self.zero_bytes(offset, len, fua, allocate).await?;
                Ok(Reply::Done)
            }
        }
    }

    fn check(&self, offset: u64, len: u64, write: bool) -> Result<(), ExportError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(ExportError::OutOfRange { offset, len, size_bytes: self.size_bytes, write }),
        }
    }

    /// The whole blocks inside `offset..offset + len`, as a block range `first..end`.
    fn whole_blocks(&self, offset: u64, len: u64) -> (u64, u64) {
        let bs = self.block_bytes;
        (offset.div_ceil(bs), (offset + len) / bs)
    }

    async fn read_bytes(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        if buf.is_empty() {
            return Ok(());
        }
        let bs = self.block_bytes;
        let end = offset + buf.len() as u64;
        if offset.is_multiple_of(bs) && end.is_multiple_of(bs) {
            self.dev.read(offset / bs, buf, None).await?;
            return Ok(());
        }
        // Unaligned: read the covering blocks and copy out the bytes asked for.
        let first = offset / bs;
        let last = end.div_ceil(bs);
        let mut cover = vec![0u8; ((last - first) * bs) as usize];
        self.dev.read(first, &mut cover, None).await?;
        let skip = (offset - first * bs) as usize;
        buf.copy_from_slice(&cover[skip..skip + buf.len()]);
        Ok(())
    }

    fn hints(&self, fua: bool) -> WriteHints {
        if fua && self.fua_native {
            WriteHints::FUA
        } else {
            WriteHints::NONE
        }
    }

    /// A FUA request on a stack that cannot make one write durable by itself: flush.
    async fn finish_fua(&self, fua: bool) -> Result<(), ExportError> {
        if fua && !self.fua_native {
            self.dev.flush().await?;
        }
        Ok(())
    }

    async fn write_bytes(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ExportError> {
        if data.is_empty() {
            return self.finish_fua(fua).await;
        }
        let bs = self.block_bytes;
        let end = offset + data.len() as u64;
        let (first, last) = self.whole_blocks(offset, data.len() as u64);
        let hints = self.hints(fua);
        if last > first {
            let from = (first * bs - offset) as usize;
            let to = (last * bs - offset) as usize;
            self.dev.write(first, &data[from..to], None, hints).await?;
        }
        // The partial blocks at the ends (one block when the range lies inside it).
        let head = offset / bs;
        let tail = (end - 1) / bs;
        if !offset.is_multiple_of(bs) || (last <= first && !end.is_multiple_of(bs)) {
            self.patch_block(head, offset, data, hints).await?;
        }
        if tail != head && !end.is_multiple_of(bs) {
            self.patch_block(tail, offset, data, hints).await?;
        }
        self.finish_fua(fua).await
    }

    /// Read-modify-write of block `block` with the bytes of `data` (which starts at byte
    /// `offset` of the export) that fall in it; `None` data means zeros.
    async fn patch_block(
        &self,
        block: u64,
        offset: u64,
        data: &[u8],
        hints: WriteHints,
    ) -> Result<(), ExportError> {
        self.patch(block, offset, offset + data.len() as u64, Some(data), hints).await
    }

    async fn patch(
        &self,
        block: u64,
        offset: u64,
        end: u64,
        data: Option<&[u8]>,
        hints: WriteHints,
    ) -> Result<(), ExportError> {
        let bs = self.block_bytes;
        let b0 = block * bs;
        let from = offset.max(b0);
        let to = end.min(b0 + bs);
        let _held = self.partial.lock(self.lock_base_blocks + block).await;
        self.counters.partial_blocks.fetch_add(1, Ordering::Relaxed);
        let mut buf = vec![0u8; bs as usize];
        self.dev.read(block, &mut buf, None).await?;
        let dst = &mut buf[(from - b0) as usize..(to - b0) as usize];
        match data {
            Some(d) => dst.copy_from_slice(&d[(from - offset) as usize..(to - offset) as usize]),
            None => dst.fill(0),
        }
        self.dev.write(block, &buf, None, hints).await?;
        Ok(())
    }

    async fn zero_bytes(
        &self,
        offset: u64,
        len: u64,
        fua: bool,
        allocate: bool,
    ) -> Result<(), ExportError> {
        if len == 0 {
            return self.finish_fua(fua).await;
        }
        let bs = self.block_bytes;
        let end = offset + len;
        let (first, last) = self.whole_blocks(offset, len);
        let hints = self.hints(fua);
        if last > first {
            if allocate {
                let zeros = vec![0u8; ZERO_PIECE_BYTES.min((last - first) * bs) as usize];
                let mut b = first;
                while b < last {
                    let n = (last - b).min(zeros.len() as u64 / bs);
                    self.dev.write(b, &zeros[..(n * bs) as usize], None, hints).await?;
                    b += n;
                }
            } else {
                self.dev.trim(first, last - first).await?;
            }
        }
        let head = offset / bs;
        let tail = (end - 1) / bs;
        if !offset.is_multiple_of(bs) || (last <= first && !end.is_multiple_of(bs)) {
            self.patch(head, offset, end, None, hints).await?;
        }
        if tail != head && !end.is_multiple_of(bs) {
            self.patch(tail, offset, end, None, hints).await?;
        }
        // A trim is durable like a write; FUA asks for it now.
        if fua && (!self.fua_native || (last > first && !allocate)) {
            self.dev.flush().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! Goal: byte ranges of every alignment read back what was written, trims and zeroing
    //! leave zeros exactly where asked, and bad requests fail with the right errno. Method: an
    //! export over a RAM disk on the real runtime, driven through `execute`, checked against a
    //! plain byte vector.

    use super::*;
    use flashrig_devices::RamDevice;
    use flashrig_runtime::{run, RuntimeKind};

    fn with_export<F, Fut>(f: F)
    where
        F: FnOnce(Arc<Export>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + 'static,
    {
        run(RuntimeKind::Real, 1, move || async move {
            let dev: DevRef = Arc::new(RamDevice::new("ram", 4096, 16, 0, 0));
            let ex = Export::new("t", dev, flashrig_runtime::handle().unwrap(), false);
            f(ex).await
        });
    }

    async fn read(ex: &Export, offset: u64, len: u64) -> Vec<u8> {
        match ex.execute(Request::Read { offset, len }).await.unwrap() {
            Reply::Data(d) => d,
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn unaligned_writes_and_zeroes_match_a_byte_model() {
        with_export(|ex| async move {
            let size = ex.size_bytes();
            let mut model = vec![0u8; size as usize];
            // Ranges inside one block, across one boundary, across several, aligned.
            let cases: [(u64, u64); 8] = [
                (0, 4096),
                (100, 200),
                (4000, 200),
                (4095, 1),
                (5000, 3 * 4096 + 7),
                (8192, 8192),
                (size - 10, 10),
                (1, size - 2),
            ];
            for (i, &(off, len)) in cases.iter().enumerate() {
                let data: Vec<u8> = (0..len)
                    .map(|x| (x as u8) ^ (i as u8).wrapping_mul(37).wrapping_add(1))
                    .collect();
                ex.execute(Request::Write { offset: off, data: data.clone(), fua: i % 2 == 0 })
                    .await
                    .unwrap();
                model[off as usize..(off + len) as usize].copy_from_slice(&data);
                assert_eq!(read(&ex, 0, size).await, model, "after write {off}+{len}");
                assert_eq!(read(&ex, off, len).await, data, "read-back of {off}+{len}");
            }
            for (i, &(off, len)) in
                [(10u64, 5u64), (4090, 20), (3 * 4096 + 1, 2 * 4096)].iter().enumerate()
            {
                let allocate = i == 1;
                ex.execute(Request::WriteZeroes { offset: off, len, fua: false, allocate })
                    .await
                    .unwrap();
                model[off as usize..(off + len) as usize].fill(0);
                assert_eq!(read(&ex, 0, size).await, model, "after zeroes {off}+{len}");
            }
            // A trim only drops whole blocks: block 5 goes, the bytes around it stay.
            ex.execute(Request::Trim { offset: 5 * 4096 - 3, len: 4096 + 6 }).await.unwrap();
            model[5 * 4096..6 * 4096].fill(0);
            assert_eq!(read(&ex, 0, size).await, model, "after trim");
            assert!(ex.counters.partial_blocks.load(Ordering::Relaxed) > 0);
        });
    }

    #[test]
    fn bad_requests_fail_with_the_protocol_errno() {
        with_export(|ex| async move {
            let size = ex.size_bytes();
            let e = ex.execute(Request::Read { offset: size - 1, len: 2 }).await.unwrap_err();
            assert_eq!(e.errno(), libc::EINVAL, "{e}");
            let e = ex
                .execute(Request::Write { offset: size, data: vec![1], fua: false })
                .await
                .unwrap_err();
            assert_eq!(e.errno(), libc::ENOSPC, "{e}");
            let e = ex.execute(Request::Trim { offset: u64::MAX, len: 2 }).await.unwrap_err();
            assert!(matches!(e, ExportError::OutOfRange { .. }), "{e}");
            let ro =
                Export::new("ro", ex.device().clone(), flashrig_runtime::handle().unwrap(), true);
            let e = ro.execute(Request::Write { offset: 0, data: vec![1], fua: false }).await;
            assert_eq!(e.unwrap_err().errno(), libc::EPERM);
            assert!(ro.execute(Request::Read { offset: 0, len: 1 }).await.is_ok());
        });
    }

    #[test]
    fn submitted_requests_complete_on_the_reactors_and_are_counted_out() {
        let (tx, rx) = std::sync::mpsc::channel();
        with_export(move |ex| async move {
            // Submitted from a thread outside the runtime, as frontends do.
            let ex2 = ex.clone();
            let th = std::thread::spawn(move || {
                for i in 0..64u64 {
                    let tx = tx.clone();
                    let data = vec![i as u8; 512];
                    ex2.submit(
                        i as usize,
                        Request::Write { offset: i * 512, data, fua: false },
                        Box::new(move |r| tx.send(r.is_ok()).unwrap()),
                    );
                }
            });
            th.join().unwrap();
            while ex.in_flight() > 0 {
                flashrig_runtime::sleep_ns(100_000).await;
            }
            for i in 0..64u64 {
                assert_eq!(read(&ex, i * 512, 512).await, vec![i as u8; 512]);
            }
            ex.close();
            let (t2, r2) = std::sync::mpsc::channel();
            ex.submit(0, Request::Flush, Box::new(move |r| t2.send(r).unwrap()));
            assert_eq!(r2.recv().unwrap(), Err(ExportError::ShuttingDown));
        });
        let oks: Vec<bool> = rx.iter().collect();
        assert_eq!(oks.len(), 64);
        assert!(oks.iter().all(|&ok| ok));
    }
}
