//! A device on a regular file or a block device.
//!
//! I/O goes through io_uring on the real runtime (one ring per reactor, see [`crate::uring`])
//! and through positioned `pread`/`pwrite` on the simulated runtime, where a command must
//! complete within the virtual instant it is issued in, or when io_uring is unavailable or
//! `io = "sync"` is asked for.
//!
//! Layout (see docs/formats.md): blocks `0..num_blocks` at byte `lba * block_size`; when the
//! device keeps per-block metadata, a sidecar region follows the data at the next 4 KiB
//! boundary, `md_bytes_per_block` bytes per block in LBA order. Data and metadata live in one
//! file, so one `fdatasync` makes both durable: `flush` is exactly that barrier.
//!
//! Data goes through `O_DIRECT` where the file system allows it (through an aligned bounce
//! buffer when the caller's buffer is not aligned), so the page cache neither hides device
//! behaviour nor doubles memory use; metadata goes through the page cache because its
//! records are smaller than a sector. Where `O_DIRECT` is refused (tmpfs, or a request the
//! medium cannot align), the device uses buffered I/O and says so in its metrics.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use flashrig_blockdev::{
    check_io, check_range, BlockDevice, DevError, DevResult, DeviceInfo, WriteHints,
};
use flashrig_metrics::{Counter, Registry};
use flashrig_runtime::{runtime_kind, RuntimeKind};
use serde::{Deserialize, Serialize};

use crate::aligned::{is_aligned, AlignedBuf, ALIGN};
use crate::uring;

/// How a file device submits I/O.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoEngine {
    /// io_uring on the real runtime when the kernel allows it, positioned I/O otherwise.
    #[default]
    Auto,
    /// io_uring; opening fails where it cannot be used (the simulated runtime, or a kernel
    /// that refuses it).
    Uring,
    /// Positioned `pread`/`pwrite` on the calling reactor's thread.
    Sync,
}

/// How to open a file device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileOptions {
    pub path: PathBuf,
    /// Data capacity in bytes. Required to create a regular file; when absent, the capacity is
    /// what the existing file or block device holds.
    pub size_bytes: Option<u64>,
    pub block_size: u32,
    pub md_bytes_per_block: u32,
    /// Use O_DIRECT for data where the file system allows it.
    pub direct: bool,
    /// Fixed latency added to every command on the runtime clock (0: none).
    pub latency_ns: u64,
    pub io: IoEngine,
}

impl FileOptions {
    pub fn new(path: impl Into<PathBuf>, size_bytes: Option<u64>) -> Self {
        Self {
            path: path.into(),
            size_bytes,
            block_size: 4096,
            md_bytes_per_block: 0,
            direct: true,
            latency_ns: 0,
            io: IoEngine::Auto,
        }
    }
}

pub struct FileDevice {
    info: DeviceInfo,
    path: PathBuf,
    /// Opened with O_DIRECT when `direct` is on and allowed; otherwise the same as `buffered`.
    data: Arc<File>,
    buffered: Arc<File>,
    direct_active: AtomicBool,
    uring: bool,
    md_offset: u64,
    latency_ns: u64,
    metrics: Arc<Registry>,
    reads: Arc<Counter>,
    writes: Arc<Counter>,
    read_bytes: Arc<Counter>,
    write_bytes: Arc<Counter>,
    flushes: Arc<Counter>,
    trims: Arc<Counter>,
}

fn align_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

/// Bytes a device of `num_blocks` needs on its medium (u64::MAX when that does not fit in 64
/// bits: no medium is that large, so opening fails rather than wrapping to a small size).
pub fn required_bytes(num_blocks: u64, block_size: u32, md_bytes: u32) -> u64 {
    let data = num_blocks.saturating_mul(block_size as u64);
    if md_bytes == 0 {
        data
    } else {
        data.checked_next_multiple_of(ALIGN as u64)
            .and_then(|d| d.checked_add(num_blocks.checked_mul(md_bytes as u64)?))
            .unwrap_or(u64::MAX)
    }
}

fn io_err(path: &Path, what: &str, e: std::io::Error) -> DevError {
    DevError::Io { path: path.display().to_string(), message: format!("{what}: {e}") }
}

impl FileDevice {
    /// Opens (creating a regular file if needed) the device described by `opts`. A file this
    /// call created is removed again if the device cannot be opened on it (say its size is
    /// more than the file system allows); a file that was there before is left as it was.
    pub fn open(name: &str, opts: &FileOptions) -> DevResult<Self> {
        if opts.block_size == 0 || !opts.block_size.is_multiple_of(512) {
            return Err(DevError::Invalid(format!(
                "block_size {} is not a positive multiple of 512",
                opts.block_size
            )));
        }
        let path = opts.path.clone();
        // `create_new`, so the file counts as this call's only if this call made it.
        let fresh = !path.exists();
        let opened = OpenOptions::new().read(true).write(true).create_new(fresh).open(&path);
        let (buffered, created) = match opened {
            Ok(f) => (f, fresh),
            // Made by someone else since the look: theirs, opened as it is.
            Err(e) if fresh && e.kind() == std::io::ErrorKind::AlreadyExists => {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(|e| io_err(&path, "open", e))?;
                (f, false)
            }
            Err(e) => return Err(io_err(&path, "open", e)),
        };
        Self::open_file(name, opts, buffered).inspect_err(|_| {
            if created {
                let _ = std::fs::remove_file(&path);
            }
        })
    }

    /// [`FileDevice::open`] on the file `buffered`, opened read-write at `opts.path`.
    fn open_file(name: &str, opts: &FileOptions, mut buffered: File) -> DevResult<Self> {
        let path = opts.path.clone();
        let meta = buffered.metadata().map_err(|e| io_err(&path, "stat", e))?;
        let is_blockdev = meta.file_type().is_block_device();
        let medium_len = if is_blockdev {
            buffered.seek(SeekFrom::End(0)).map_err(|e| io_err(&path, "size", e))?
        } else {
            meta.len()
        };
        let bs = opts.block_size;
        let md = opts.md_bytes_per_block;
        let num_blocks = match opts.size_bytes {
            Some(size) => {
                if size == 0 || size % bs as u64 != 0 {
                    return Err(DevError::Invalid(format!(
                        "size_bytes {size} is not a positive multiple of block_size {bs}"
                    )));
                }
                let n = size / bs as u64;
                let need = required_bytes(n, bs, md);
                if medium_len < need {
                    if is_blockdev {
                        return Err(DevError::Invalid(format!(
                            "{} holds {medium_len} bytes, the device needs {need}",
                            path.display()
                        )));
                    }
                    buffered.set_len(need).map_err(|e| io_err(&path, "set_len", e))?;
                }
                n
            }
            None => {
                let mut n = medium_len / (bs as u64 + md as u64);
                while n > 0 && required_bytes(n, bs, md) > medium_len {
                    n -= 1;
                }
                if n == 0 {
                    return Err(DevError::Invalid(format!(
                        "{} is empty or too small and no size_bytes was given",
                        path.display()
                    )));
                }
                n
            }
        };
        let data = if opts.direct {
            match OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT).open(&path)
            {
                Ok(f) => Some(f),
                // tmpfs and some FUSE file systems refuse O_DIRECT: use the page cache.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
                Err(e) => return Err(io_err(&path, "open O_DIRECT", e)),
            }
        } else {
            None
        };
        let direct_active = data.is_some();
        let data = match data {
            Some(f) => f,
            None => buffered.try_clone().map_err(|e| io_err(&path, "dup", e))?,
        };
        let uring = match (opts.io, runtime_kind()) {
            (IoEngine::Sync, _) => false,
            (IoEngine::Auto, Some(RuntimeKind::Real)) => uring::available(),
            (IoEngine::Auto, _) => false,
            (IoEngine::Uring, Some(RuntimeKind::Real)) => {
                uring::ring().map_err(|e| io_err(&path, "io_uring", std::io::Error::other(e)))?;
                true
            }
            (IoEngine::Uring, _) => {
                return Err(DevError::Invalid(
                    "io = \"uring\" needs the real runtime: a simulated run completes commands \
                     in virtual time, which the kernel's completions know nothing of"
                        .into(),
                ))
            }
        };
        let metrics = Registry::new(name);
        metrics.counter("direct_io").set(direct_active as u64);
        metrics.counter("io_uring").set(uring as u64);
        let mut info = DeviceInfo::new(name, bs, num_blocks).with_md_bytes(md);
        info.caps.fua = true;
        // The sidecar is written after the data: a crash can separate them (docs/formats.md).
        info.caps.md_atomic = false;
        Ok(Self {
            info,
            md_offset: align_up(num_blocks * bs as u64, ALIGN as u64),
            path,
            data: Arc::new(data),
            buffered: Arc::new(buffered),
            direct_active: AtomicBool::new(direct_active),
            uring,
            latency_ns: opts.latency_ns,
            reads: metrics.counter("reads"),
            writes: metrics.counter("writes"),
            read_bytes: metrics.counter("read_bytes"),
            write_bytes: metrics.counter("write_bytes"),
            flushes: metrics.counter("flushes"),
            trims: metrics.counter("trims"),
            metrics,
        })
    }

    /// Whether data I/O currently bypasses the page cache.
    pub fn direct_io(&self) -> bool {
        self.direct_active.load(Ordering::Relaxed)
    }

    fn fall_back_to_buffered(&self) {
        self.direct_active.store(false, Ordering::Relaxed);
        self.metrics.counter("direct_io").set(0);
    }

    /// This thread's ring, when the device uses io_uring and the thread can have one.
    fn ring(&self) -> Option<Rc<uring::Ring>> {
        if self.uring {
            uring::ring().ok()
        } else {
            None
        }
    }

    async fn read_data(&self, offset: u64, buf: &mut [u8]) -> DevResult<()> {
        if self.direct_io() {
            let res = match self.ring() {
                Some(ring) => uring::read_exact_at(&ring, &self.data, buf, offset).await,
                None if is_aligned(buf) => self.data.read_exact_at(buf, offset),
                None => {
                    let mut bounce = AlignedBuf::new(buf.len());
                    let r = self.data.read_exact_at(bounce.bytes_mut(), offset);
                    if r.is_ok() {
                        buf.copy_from_slice(bounce.bytes());
                    }
                    r
                }
            };
            match res {
                Ok(()) => return Ok(()),
                // The medium cannot align this request after all: use the page cache.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.fall_back_to_buffered(),
                Err(e) => return Err(io_err(&self.path, "read", e)),
            }
        }
        let res = match self.ring() {
            Some(ring) => uring::read_exact_at(&ring, &self.buffered, buf, offset).await,
            None => self.buffered.read_exact_at(buf, offset),
        };
        res.map_err(|e| io_err(&self.path, "read", e))
    }

    async fn write_data(&self, offset: u64, data: &[u8]) -> DevResult<()> {
        if self.direct_io() {
            let res = match self.ring() {
                Some(ring) => uring::write_all_at(&ring, &self.data, data, offset).await,
                None if is_aligned(data) => self.data.write_all_at(data, offset),
                None => {
                    let mut bounce = AlignedBuf::new(data.len());
                    bounce.bytes_mut().copy_from_slice(data);
                    self.data.write_all_at(bounce.bytes(), offset)
                }
            };
            match res {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.fall_back_to_buffered(),
                Err(e) => return Err(io_err(&self.path, "write", e)),
            }
        }
        let res = match self.ring() {
            Some(ring) => uring::write_all_at(&ring, &self.buffered, data, offset).await,
            None => self.buffered.write_all_at(data, offset),
        };
        res.map_err(|e| io_err(&self.path, "write", e))
    }

    async fn sync(&self) -> DevResult<()> {
        let res = match self.ring() {
            Some(ring) => uring::fdatasync(&ring, &self.buffered).await,
            None => self.buffered.sync_data(),
        };
        res.map_err(|e| io_err(&self.path, "fdatasync", e))
    }

    /// Zeroes a byte range: punches a hole where the file system can, else writes zeros.
    fn zero_range(&self, offset: u64, len: u64) -> DevResult<()> {
        // SAFETY: fallocate takes a valid open descriptor and plain integers; it touches no
        // memory of ours.
        let rc = unsafe {
            libc::fallocate(
                self.buffered.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let zeros = vec![0u8; (len as usize).min(1 << 20)];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(zeros.len() as u64) as usize;
            self.buffered
                .write_all_at(&zeros[..n], offset + done)
                .map_err(|e| io_err(&self.path, "zero", e))?;
            done += n as u64;
        }
        Ok(())
    }
}

#[async_trait(?Send)]
impl BlockDevice for FileDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn kind(&self) -> &'static str {
        "file"
    }

    fn metrics(&self) -> Option<Arc<Registry>> {
        Some(self.metrics.clone())
    }

    async fn read(&self, lba: u64, buf: &mut [u8], md: Option<&mut [u8]>) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, buf.len(), md.as_ref().map(|m| m.len()))?;
        crate::model_latency(self.latency_ns).await;
        self.read_data(lba * self.info.block_size as u64, buf).await?;
        if let Some(md) = md {
            let off = self.md_offset + lba * self.info.md_bytes_per_block as u64;
            self.buffered.read_exact_at(md, off).map_err(|e| io_err(&self.path, "read md", e))?;
        }
        let _ = blocks;
        self.reads.inc();
        self.read_bytes.add(buf.len() as u64);
        Ok(())
    }

    async fn write(
        &self,
        lba: u64,
        data: &[u8],
        md: Option<&[u8]>,
        hints: WriteHints,
    ) -> DevResult<()> {
        let blocks = check_io(&self.info, lba, data.len(), md.map(|m| m.len()))?;
        crate::model_latency(self.latency_ns).await;
        self.write_data(lba * self.info.block_size as u64, data).await?;
        let mdb = self.info.md_bytes_per_block as u64;
        if mdb > 0 {
            let off = self.md_offset + lba * mdb;
            match md {
                Some(m) => self.buffered.write_all_at(m, off),
                // A write without metadata leaves zeroed metadata, as on a device with OOB.
                None => self.buffered.write_all_at(&vec![0u8; (blocks * mdb) as usize], off),
            }
            .map_err(|e| io_err(&self.path, "write md", e))?;
        }
        if hints.fua {
            self.sync().await?;
        }
        self.writes.inc();
        self.write_bytes.add(data.len() as u64);
        Ok(())
    }

    async fn flush(&self) -> DevResult<()> {
        crate::model_latency(self.latency_ns).await;
        self.sync().await?;
        self.flushes.inc();
        Ok(())
    }

    async fn trim(&self, lba: u64, num_blocks: u64) -> DevResult<()> {
        check_range(&self.info, lba, num_blocks)?;
        crate::model_latency(self.latency_ns).await;
        let bs = self.info.block_size as u64;
        self.zero_range(lba * bs, num_blocks * bs)?;
        let mdb = self.info.md_bytes_per_block as u64;
        if mdb > 0 {
            self.zero_range(self.md_offset + lba * mdb, num_blocks * mdb)?;
        }
        self.trims.inc();
        Ok(())
    }
}
