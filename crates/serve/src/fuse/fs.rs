//! The file system the kernel talks to: a root directory holding one regular file whose bytes
//! are the export's.
//!
//! Every handler runs on fuser's session thread, which reads the kernel's requests from
//! `/dev/fuse` one at a time. Metadata requests (lookup, getattr, readdir, ...) are answered
//! there at once from memory. Requests that touch the file's bytes (read, write, fsync,
//! fallocate) are handed to a reactor with [`Export::submit`] together with their fuser reply
//! object, and the reactor answers the kernel when the stack completes: the session thread goes
//! straight back to reading, so as many requests are in flight as the kernel sends (the loop
//! driver's queue depth, with asynchronous direct I/O).

use std::ffi::{OsStr, OsString};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;

use crate::export::Completion;
use crate::{Export, ExportError, Reply, Request};

/// The root directory's inode (FUSE fixes it at 1).
const ROOT: INodeNo = INodeNo::ROOT;
/// The one file's inode.
const FILE: INodeNo = INodeNo(2);

/// How long the kernel may cache names and attributes. Nothing changes them behind the kernel's
/// back (the size is fixed and every change comes through this mount), so the value only bounds
/// how stale `stat`'s times may look.
const TTL: Duration = Duration::from_secs(1);

/// The largest write the kernel sends in one request. 1 MiB is the kernel's default
/// `fs.fuse.max_pages_limit` (256 pages): larger values are cut to it anyway.
const MAX_WRITE_BYTES: u32 = 1 << 20;

/// Asynchronous ("background") requests the kernel keeps in flight before it queues more:
/// asynchronous direct I/O from a loop device is counted here, so this is the mount's queue
/// depth. fuser's default, 16 (the kernel's is 12), would cap a loop device at QD 16.
const MAX_BACKGROUND: u16 = 256;

/// `FALLOC_FL_WRITE_ZEROES` (Linux 6.17): zeros that must be allocated, as `ZERO_RANGE`.
/// Not in the `libc` crate yet.
const FALLOC_FL_WRITE_ZEROES: i32 = 0x80;

/// What `fallocate` asks of the export.
#[derive(Debug, PartialEq, Eq)]
enum FallocatePlan {
    /// Nothing to do: the file's bytes are all there already.
    Nothing,
    /// Zero `len` bytes at `offset` ([`Request::WriteZeroes`]); `allocate` = really written.
    Zero { offset: u64, len: u64, allocate: bool },
}

/// Decides what `fallocate(mode, offset, len)` on a file of `size` bytes does, or the errno it
/// fails with. The file cannot grow or shrink, and every byte of it is already "allocated":
///
/// - `PUNCH_HOLE | KEEP_SIZE` (a loop device's discard) deallocates: the whole blocks are
///   trimmed, which the block-device contract makes read as zeros, the partial ones zeroed;
/// - `ZERO_RANGE` and `WRITE_ZEROES` (a loop device's write-zeroes with REQ_NOUNMAP: the caller
///   wants the zeros allocated) write real zeros, so a thin stack does not deallocate them;
/// - mode 0 or `KEEP_SIZE` alone (preallocation) succeeds inside the file, and fails beyond it:
///   EFBIG where the file would have to grow, ENOSPC where only space was asked for;
/// - the parts of a punched or zeroed range beyond the end are ignored with `KEEP_SIZE` (as a
///   regular file does), and without it the range must not reach past the end (EFBIG);
/// - everything else (collapse, insert, unshare, unknown bits) is EOPNOTSUPP.
fn fallocate_plan(size: u64, offset: u64, len: u64, mode: i32) -> Result<FallocatePlan, i32> {
    let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
    let op = mode & !libc::FALLOC_FL_KEEP_SIZE;
    let end = offset.checked_add(len).ok_or(libc::EFBIG)?;
    let within = |allocate: bool| {
        let end = end.min(size);
        Ok(if offset >= end {
            FallocatePlan::Nothing
        } else {
            FallocatePlan::Zero { offset, len: end - offset, allocate }
        })
    };
    match op {
        libc::FALLOC_FL_PUNCH_HOLE if keep => within(false),
        libc::FALLOC_FL_ZERO_RANGE | FALLOC_FL_WRITE_ZEROES => {
            if !keep && end > size {
                return Err(libc::EFBIG);
            }
            within(true)
        }
        0 if end <= size => Ok(FallocatePlan::Nothing),
        0 if keep => Err(libc::ENOSPC),
        0 => Err(libc::EFBIG),
        _ => Err(libc::EOPNOTSUPP),
    }
}

/// The part of `offset..offset + len` inside a file of `size` bytes, for reads: reads stop at
/// the end of the file, as on any file.
fn read_range(size: u64, offset: u64, len: u64) -> Option<(u64, u64)> {
    let end = offset.saturating_add(len).min(size);
    (offset < end).then(|| (offset, end - offset))
}

/// How many of `len` bytes written at `offset` fit in a file of `size` bytes, or ENOSPC when
/// none does: a write reaching past the end is cut short, as on a block device.
fn write_len(size: u64, offset: u64, len: u64) -> Result<u64, i32> {
    if len == 0 {
        return Ok(0);
    }
    if offset >= size {
        return Err(libc::ENOSPC);
    }
    Ok(len.min(size - offset))
}

/// The errno a failed request is answered with: the export's, except that writes to a
/// read-only export are EROFS, which is what a read-only file system answers.
fn errno_of(e: &ExportError) -> i32 {
    match e {
        ExportError::ReadOnly => libc::EROFS,
        e => e.errno(),
    }
}

fn errno(code: i32) -> Errno {
    Errno::from_i32(code)
}

/// The attributes `chmod`, `chown` and `touch` may change, kept in memory for the mount's life.
struct Meta {
    perm: u16,
    uid: u32,
    gid: u32,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
}

/// The file system handed to fuser.
pub(super) struct DiskFs {
    export: Arc<Export>,
    name: OsString,
    /// Requests go to the reactors in turn.
    next_reactor: AtomicUsize,
    /// Set by the frontend's `stop`: new requests fail with ESHUTDOWN.
    stopped: Arc<AtomicBool>,
    meta: Mutex<Meta>,
    created: SystemTime,
    /// The root directory's owner: the server's user.
    owner: (u32, u32),
}

impl DiskFs {
    pub(super) fn new(export: Arc<Export>, name: &str, stopped: Arc<AtomicBool>) -> DiskFs {
        let now = SystemTime::now();
        // SAFETY: geteuid and getegid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let perm = if export.read_only() { 0o444 } else { 0o644 };
        DiskFs {
            export,
            name: OsString::from(name),
            next_reactor: AtomicUsize::new(0),
            stopped,
            meta: Mutex::new(Meta { perm, uid, gid, atime: now, mtime: now, ctime: now }),
            created: now,
            owner: (uid, gid),
        }
    }

    fn size(&self) -> u64 {
        self.export.size_bytes()
    }

    fn read_only(&self) -> bool {
        self.export.read_only()
    }

    fn attr(&self, ino: INodeNo) -> Option<FileAttr> {
        let m = self.meta.lock();
        let (kind, perm, nlink, size, (uid, gid)) = match ino {
            ROOT => {
                let perm = if self.read_only() { 0o555 } else { 0o755 };
                (FileType::Directory, perm, 2, 0, self.owner)
            }
            FILE => (FileType::RegularFile, m.perm, 1, self.size(), (m.uid, m.gid)),
            _ => return None,
        };
        Some(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: m.atime,
            mtime: m.mtime,
            ctime: m.ctime,
            crtime: self.created,
            kind,
            perm,
            nlink,
            uid,
            gid,
            rdev: 0,
            // stat's "preferred I/O size": the stack's chunk, which `cp` and friends use as
            // their buffer size.
            blksize: self.export.preferred_bytes().min(MAX_WRITE_BYTES as u64) as u32,
            flags: 0,
        })
    }

    /// The errno for a request on `ino` that only the file supports.
    fn not_the_file(ino: INodeNo) -> Errno {
        if ino == ROOT {
            Errno::EISDIR
        } else {
            Errno::ENOENT
        }
    }

    /// Whether the frontend was stopped: new requests are then answered with ESHUTDOWN.
    fn refusing(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Hands `req` to the next reactor; `done` answers the kernel from there.
    fn submit(&self, req: Request, done: Completion) {
        let reactor = self.next_reactor.fetch_add(1, Ordering::Relaxed);
        self.export.submit(reactor, req, done);
    }

    fn touch_written(&self) {
        let now = SystemTime::now();
        let mut m = self.meta.lock();
        m.mtime = now;
        m.ctime = now;
    }

    /// The errno for a request that would create, remove or rename names.
    fn no_names(&self) -> Errno {
        if self.read_only() {
            Errno::EROFS
        } else {
            Errno::EPERM
        }
    }
}

/// Answers a request that completes with nothing but success or an errno.
fn empty_reply(reply: ReplyEmpty) -> Completion {
    Box::new(move |r| match r {
        Ok(_) => reply.ok(),
        Err(e) => reply.error(errno(errno_of(&e))),
    })
}

impl Filesystem for DiskFs {
    fn init(&mut self, _req: &fuser::Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Asynchronous direct I/O: the kernel sends a loop device's direct I/O requests
        // without waiting for each (else the loop worker waits, one request at a time).
        if config.add_capabilities(InitFlags::FUSE_ASYNC_DIO).is_err() {
            eprintln!(
                "note: this kernel's FUSE has no asynchronous direct I/O: a loop device over \
                 the file sends one request at a time"
            );
        }
        // Each setter answers with the nearest value the kernel or fuser allows when the one
        // asked for is out of range; that value is as good, so take it.
        if let Err(nearest) = config.set_max_write(MAX_WRITE_BYTES) {
            let _ = config.set_max_write(nearest);
        }
        if let Err(nearest) = config.set_max_background(MAX_BACKGROUND) {
            let _ = config.set_max_background(nearest);
        }
        let _ = config.set_congestion_threshold(MAX_BACKGROUND / 4 * 3);
        Ok(())
    }

    fn lookup(&self, _req: &fuser::Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent != ROOT {
            return reply.error(if parent == FILE { Errno::ENOTDIR } else { Errno::ENOENT });
        }
        match self.attr(FILE) {
            Some(attr) if name == self.name.as_os_str() => reply.entry(&TTL, &attr, Generation(0)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(
        &self,
        _req: &fuser::Request,
        ino: INodeNo,
        _fh: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        match self.attr(ino) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &fuser::Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if ino != ROOT && ino != FILE {
            return reply.error(Errno::ENOENT);
        }
        if let Some(size) = size {
            if ino == ROOT {
                return reply.error(Errno::EISDIR);
            }
            // The file is the stack, so its size is the stack's. Setting it to that size
            // changes nothing and succeeds (`truncate -s` with the same size); any other size
            // would need a stack that grows or shrinks.
            if size != self.size() {
                return reply.error(self.no_names());
            }
        }
        let now = SystemTime::now();
        {
            let mut m = self.meta.lock();
            // The root's mode, owner and times are fixed; only the file's are kept.
            if ino == FILE {
                if let Some(mode) = mode {
                    m.perm = (mode & 0o7777) as u16;
                }
                if let Some(uid) = uid {
                    m.uid = uid;
                }
                if let Some(gid) = gid {
                    m.gid = gid;
                }
                let at = |t: TimeOrNow| match t {
                    TimeOrNow::SpecificTime(t) => t,
                    TimeOrNow::Now => now,
                };
                if let Some(t) = atime {
                    m.atime = at(t);
                }
                if let Some(t) = mtime {
                    m.mtime = at(t);
                }
                m.ctime = now;
            }
        }
        match self.attr(ino) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn mknod(
        &self,
        _req: &fuser::Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(self.no_names());
    }

    fn mkdir(
        &self,
        _req: &fuser::Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(self.no_names());
    }

    fn unlink(&self, _req: &fuser::Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(self.no_names());
    }

    fn rmdir(&self, _req: &fuser::Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(self.no_names());
    }

    fn symlink(
        &self,
        _req: &fuser::Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        reply.error(self.no_names());
    }

    fn rename(
        &self,
        _req: &fuser::Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(self.no_names());
    }

    fn link(
        &self,
        _req: &fuser::Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(self.no_names());
    }

    fn create(
        &self,
        _req: &fuser::Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(self.no_names());
    }

    fn open(&self, _req: &fuser::Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if ino != FILE {
            return reply.error(Self::not_the_file(ino));
        }
        if self.read_only() && flags.acc_mode() != OpenAccMode::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        // Direct I/O: every read and write reaches the stack (the kernel's page cache would
        // hide it, and a loop device with --direct-io=on needs it), and writes to different
        // places run in parallel instead of under the inode lock.
        reply.opened(
            FileHandle(0),
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES,
        );
    }

    fn read(
        &self,
        _req: &fuser::Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ino != FILE {
            return reply.error(Self::not_the_file(ino));
        }
        let Some((offset, len)) = read_range(self.size(), offset, size as u64) else {
            return reply.data(&[]);
        };
        if self.refusing() {
            return reply.error(Errno::from_i32(libc::ESHUTDOWN));
        }
        self.submit(
            Request::Read { offset, len },
            Box::new(move |r| match r {
                Ok(Reply::Data(d)) => reply.data(&d),
                Ok(Reply::Done) => reply.data(&[]),
                Err(e) => reply.error(errno(errno_of(&e))),
            }),
        );
    }

    fn write(
        &self,
        _req: &fuser::Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if ino != FILE {
            return reply.error(Self::not_the_file(ino));
        }
        if self.read_only() {
            return reply.error(Errno::EROFS);
        }
        let n = match write_len(self.size(), offset, data.len() as u64) {
            Ok(0) => return reply.written(0),
            Ok(n) => n,
            Err(code) => return reply.error(errno(code)),
        };
        if self.refusing() {
            return reply.error(errno(libc::ESHUTDOWN));
        }
        self.touch_written();
        // A file opened O_SYNC or O_DSYNC wants each write durable when it returns: FUA.
        let fua = flags.0 & libc::O_DSYNC != 0;
        let data = data[..n as usize].to_vec();
        self.submit(
            Request::Write { offset, data, fua },
            Box::new(move |r| match r {
                // n <= data.len(), which the kernel's 32-bit size field bounds.
                Ok(_) => reply.written(n as u32),
                Err(e) => reply.error(errno(errno_of(&e))),
            }),
        );
    }

    fn flush(
        &self,
        _req: &fuser::Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Called on every close(). With direct I/O nothing is buffered in the kernel or here,
        // and close() is no durability point (fsync is), so there is nothing to do.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &fuser::Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        if ino != FILE {
            return reply.error(Self::not_the_file(ino));
        }
        if self.refusing() {
            return reply.error(errno(libc::ESHUTDOWN));
        }
        // The durability barrier: every write answered before it is durable in the stack
        // when this answers. A loop device's REQ_PREFLUSH (a file system's journal commit,
        // `sync`) arrives here as vfs_fsync.
        self.submit(Request::Flush, empty_reply(reply));
    }

    fn opendir(&self, _req: &fuser::Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match ino {
            ROOT => reply.opened(FileHandle(0), FopenFlags::empty()),
            FILE => reply.error(Errno::ENOTDIR),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn readdir(
        &self,
        _req: &fuser::Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino != ROOT {
            return reply.error(if ino == FILE { Errno::ENOTDIR } else { Errno::ENOENT });
        }
        let entries = [
            (ROOT, FileType::Directory, OsStr::new(".")),
            (ROOT, FileType::Directory, OsStr::new("..")),
            (FILE, FileType::RegularFile, self.name.as_os_str()),
        ];
        // `offset` is the index after the last entry the kernel has; each entry carries the
        // offset of the one after it.
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(*ino, i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &fuser::Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // The directory never changes, so it has nothing to make durable.
        reply.ok();
    }

    fn statfs(&self, _req: &fuser::Request, _ino: INodeNo, reply: ReplyStatfs) {
        // A full file system of the file's blocks. A loop device takes `f_bsize` as its
        // discard granularity, so it is the stack's block.
        let bs = self.export.block_bytes();
        let blocks = self.size() / bs;
        reply.statfs(blocks, 0, 0, 1, 0, bs as u32, 255, bs as u32);
    }

    fn access(&self, _req: &fuser::Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // Mounted with default_permissions, the kernel checks modes itself and does not call
        // this; it stays correct without it.
        if ino != ROOT && ino != FILE {
            return reply.error(Errno::ENOENT);
        }
        if mask.contains(AccessFlags::W_OK) && self.read_only() {
            return reply.error(Errno::EROFS);
        }
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &fuser::Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if ino != FILE {
            return reply.error(Self::not_the_file(ino));
        }
        if self.read_only() {
            return reply.error(Errno::EROFS);
        }
        // Never ENOSYS: the kernel would take it as "no fallocate at all" and stop sending
        // discards for good.
        match fallocate_plan(self.size(), offset, length, mode) {
            Err(code) => reply.error(errno(code)),
            Ok(FallocatePlan::Nothing) => reply.ok(),
            Ok(FallocatePlan::Zero { offset, len, allocate }) => {
                if self.refusing() {
                    return reply.error(errno(libc::ESHUTDOWN));
                }
                self.touch_written();
                self.submit(
                    Request::WriteZeroes { offset, len, fua: false, allocate },
                    empty_reply(reply),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Goal: the decisions the handlers make from the kernel's numbers alone (ranges cut at
    //! the end of the file, fallocate's modes) are right at the edges and never overflow.
    //! Method: the pure functions, on a 1 MiB file, at and around its end and at u64::MAX.

    use super::*;

    const SIZE: u64 = 1 << 20;
    const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
    const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE;
    const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;

    #[test]
    fn reads_stop_at_the_end_and_writes_are_cut_there() {
        assert_eq!(read_range(SIZE, 0, 4096), Some((0, 4096)));
        assert_eq!(read_range(SIZE, SIZE - 100, 4096), Some((SIZE - 100, 100)));
        assert_eq!(read_range(SIZE, SIZE, 4096), None);
        assert_eq!(read_range(SIZE, u64::MAX, u64::MAX), None);
        assert_eq!(read_range(SIZE, 5, 0), None);
        assert_eq!(write_len(SIZE, 0, 4096), Ok(4096));
        assert_eq!(write_len(SIZE, SIZE - 1, 4096), Ok(1));
        assert_eq!(write_len(SIZE, SIZE, 1), Err(libc::ENOSPC));
        assert_eq!(write_len(SIZE, u64::MAX, u64::MAX), Err(libc::ENOSPC));
        assert_eq!(write_len(SIZE, SIZE + 5, 0), Ok(0));
    }

    #[test]
    fn fallocate_modes_map_to_zeroing_or_errors() {
        let zero = |offset, len, allocate| Ok(FallocatePlan::Zero { offset, len, allocate });
        // Discard: deallocate, cut at the end.
        assert_eq!(fallocate_plan(SIZE, 4096, 8192, PUNCH | KEEP), zero(4096, 8192, false));
        assert_eq!(fallocate_plan(SIZE, SIZE - 10, 100, PUNCH | KEEP), zero(SIZE - 10, 10, false));
        assert_eq!(fallocate_plan(SIZE, SIZE, 100, PUNCH | KEEP), Ok(FallocatePlan::Nothing));
        // Punch without KEEP_SIZE is refused by the VFS before us; if it came, not ours to do.
        assert_eq!(fallocate_plan(SIZE, 0, 1, PUNCH), Err(libc::EOPNOTSUPP));
        // Zeroing: allocated zeros; past the end only with KEEP_SIZE.
        assert_eq!(fallocate_plan(SIZE, 1, 2, ZERO), zero(1, 2, true));
        assert_eq!(fallocate_plan(SIZE, SIZE - 1, 2, ZERO), Err(libc::EFBIG));
        assert_eq!(fallocate_plan(SIZE, SIZE - 1, 2, ZERO | KEEP), zero(SIZE - 1, 1, true));
        assert_eq!(fallocate_plan(SIZE, 0, 4096, FALLOC_FL_WRITE_ZEROES), zero(0, 4096, true));
        // Preallocation: everything inside is there already; the file cannot grow.
        assert_eq!(fallocate_plan(SIZE, 0, SIZE, 0), Ok(FallocatePlan::Nothing));
        assert_eq!(fallocate_plan(SIZE, 0, SIZE + 1, 0), Err(libc::EFBIG));
        assert_eq!(fallocate_plan(SIZE, 0, SIZE + 1, KEEP), Err(libc::ENOSPC));
        assert_eq!(fallocate_plan(SIZE, 0, SIZE, KEEP), Ok(FallocatePlan::Nothing));
        // Overflowing ranges and modes we do not do.
        assert_eq!(fallocate_plan(SIZE, u64::MAX, 2, PUNCH | KEEP), Err(libc::EFBIG));
        for mode in [
            libc::FALLOC_FL_COLLAPSE_RANGE,
            libc::FALLOC_FL_INSERT_RANGE,
            libc::FALLOC_FL_UNSHARE_RANGE,
            PUNCH | ZERO | KEEP,
            0x4000,
        ] {
            assert_eq!(fallocate_plan(SIZE, 0, 4096, mode), Err(libc::EOPNOTSUPP), "{mode:#x}");
        }
    }

    #[test]
    fn read_only_writes_are_erofs_and_the_rest_keep_the_export_errno() {
        assert_eq!(errno_of(&ExportError::ReadOnly), libc::EROFS);
        assert_eq!(errno_of(&ExportError::ShuttingDown), libc::ESHUTDOWN);
        let e = ExportError::OutOfRange { offset: 0, len: 1, size_bytes: 0, write: true };
        assert_eq!(errno_of(&e), libc::ENOSPC);
    }
}
