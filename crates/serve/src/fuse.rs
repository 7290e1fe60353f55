//! The FUSE single-file export: the stack as one regular file in a FUSE mount, for a loop device
//! and a kernel file system on top (docs/fuse.md).
//!
//! fuser's session thread reads the kernel's requests from `/dev/fuse`; the file system in
//! [`fs`] answers metadata from memory and hands reads, writes, fsyncs and fallocates to the
//! reactors through the [`Export`], whose completions answer the kernel from the reactor
//! threads. The file is opened with direct I/O, so the kernel's page cache never stands between
//! a client and the stack, and `losetup --direct-io=on` passes a file system's requests
//! through as they are.
//!
//! The mount ends in one of three ways: [`Frontend::finish`] unmounts it once `flashrig serve`
//! has flushed the stack (lazily, if a loop device still holds the file); an `umount` from
//! outside ends the session thread, which [`Frontend::finished`] reports so the server shuts
//! down; and if the server dies, the kernel aborts the connection and the mount answers
//! ENOTCONN until someone unmounts it.

mod fs;

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{BackgroundSession, Config, MountOption, SessionACL};

use crate::{Export, Frontend};

/// How long `finish` waits for the session thread to end after unmounting.
const SESSION_END_WAIT: Duration = Duration::from_secs(10);

/// The mount's settings.
#[derive(Clone, Debug)]
pub struct FuseConfig {
    /// An existing empty directory to mount on.
    pub mountpoint: PathBuf,
    /// The name of the one file in the mount.
    pub file_name: String,
}

/// A mounted export.
struct FuseFrontend {
    /// The file's path in the mount.
    file: PathBuf,
    /// The mountpoint, canonical (as the kernel knows it).
    mountpoint: PathBuf,
    /// None once finished.
    session: Option<BackgroundSession>,
    stopped: Arc<AtomicBool>,
}

/// Mounts the file system and returns once the file is visible.
pub fn mount(export: Arc<Export>, cfg: FuseConfig) -> io::Result<Box<dyn Frontend>> {
    let name = &cfg.file_name;
    if name.is_empty() || name.contains('/') || name.contains('\0') || name == "." || name == ".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("file name {name:?}: a file name, without '/'"),
        ));
    }
    let shown = cfg.mountpoint.display();
    let mountpoint = cfg.mountpoint.canonicalize().map_err(|e| {
        let hint = if e.raw_os_error() == Some(libc::ENOTCONN) {
            " (a FUSE mount whose server died: `umount -l` it first)"
        } else {
            ""
        };
        io::Error::new(e.kind(), format!("mountpoint {shown}: {e}{hint}"))
    })?;
    // Mounting over files would hide them, and a non-empty mountpoint is most often a typo.
    let mut entries = std::fs::read_dir(&mountpoint)
        .map_err(|e| io::Error::new(e.kind(), format!("mountpoint {shown}: {e}")))?;
    if entries.next().is_some() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("mountpoint {shown}: not empty"),
        ));
    }
    let stopped = Arc::new(AtomicBool::new(false));
    let filesystem = fs::DiskFs::new(export.clone(), name, stopped.clone());
    let mut options = vec![
        // The mount's source in /proc/mounts; the subtype shows (as `fuse.flashrig`) only
        // where fusermount mounts, mount(2) as root ignores it.
        MountOption::FSName("flashrig".into()),
        MountOption::Subtype("flashrig".into()),
        // The kernel checks permissions from the file's mode, as on a local file system.
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoExec,
    ];
    if export.read_only() {
        options.push(MountOption::RO);
    }
    let mut config = Config::default();
    config.mount_options = options;
    // root serves everyone (a loop device's I/O, other users' tools); anyone else serves
    // themselves, since `allow_other` needs `user_allow_other` in /etc/fuse.conf.
    // SAFETY: geteuid cannot fail and touches no memory.
    config.acl = if unsafe { libc::geteuid() } == 0 { SessionACL::All } else { SessionACL::Owner };
    let session = fuser::spawn_mount(filesystem, &mountpoint, &config)
        .map_err(|e| io::Error::new(e.kind(), format!("mount FUSE on {shown}: {e}")))?;
    let file = mountpoint.join(name);
    let mut frontend =
        FuseFrontend { file, mountpoint, session: Some(session), stopped: stopped.clone() };
    // The mount is live once spawn_mount returns; looking the file up proves the session
    // thread answers. Nothing here needs a reactor, so waiting on reactor 0 is safe.
    if let Err(e) = std::fs::metadata(&frontend.file) {
        frontend.finish();
        return Err(io::Error::new(
            e.kind(),
            format!("{}: not visible after mounting: {e}", frontend.file.display()),
        ));
    }
    Ok(Box::new(frontend))
}

/// umount2(2) on `path` with `flags`.
fn umount(path: &Path, flags: libc::c_int) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Frontend for FuseFrontend {
    fn describe(&self) -> String {
        self.file.display().to_string()
    }

    fn stop(&mut self) {
        // The session goes on answering metadata (the mount stays usable for an unmount), but
        // reads, writes, fsyncs and fallocates now fail with ESHUTDOWN. Those already
        // submitted complete and are answered from their reactors.
        self.stopped.store(true, Ordering::Release);
    }

    fn finished(&self) -> bool {
        // The session thread ends when the kernel closes the connection: the file system was
        // unmounted from outside (and nothing holds the file any more) or aborted.
        self.session.as_ref().is_none_or(|s| s.guard.is_finished())
    }

    fn finish(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        if session.guard.is_finished() {
            // Unmounted from outside: fuser's own unmount sees the closed connection and
            // leaves the mountpoint alone.
            let _ = session.join();
            return;
        }
        match umount(&self.mountpoint, 0) {
            Ok(()) => {
                // The kernel aborts the connection; the session thread sees it and ends.
                // Waited for with a bound, so that a connection kept alive by something
                // unforeseen cannot hang the server's exit.
                let start = Instant::now();
                while !session.guard.is_finished() && start.elapsed() < SESSION_END_WAIT {
                    std::thread::sleep(Duration::from_millis(5));
                }
                if session.guard.is_finished() {
                    let _ = session.join();
                } else {
                    eprintln!(
                        "note: {} was unmounted, but its FUSE session goes on; leaving it to \
                         end with the process",
                        self.mountpoint.display()
                    );
                    std::mem::forget(session);
                }
            }
            Err(e) => {
                // Busy (a loop device or an open file holds the file): detach the mount from
                // the tree now. It lives on, failing its requests, until the holder lets go;
                // it ends for good when this process exits and closes /dev/fuse.
                let lazy = umount(&self.mountpoint, libc::MNT_DETACH);
                eprintln!(
                    "note: {} is still in use ({e}); {} it goes away once released (detach \
                     the loop device: losetup -d)",
                    self.mountpoint.display(),
                    match lazy {
                        Ok(()) => "detached it lazily:".to_string(),
                        Err(e2) => format!("a lazy unmount failed too ({e2});"),
                    }
                );
                // Dropping the session would have fuser unmount the mountpoint path again,
                // which after the detach may be someone else's mount; the thread and its
                // /dev/fuse descriptor end with the process.
                std::mem::forget(session);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Goal: the mounted file behaves as a fixed-size disk through the kernel: bytes written
    //! at any alignment read back, the size cannot change, discards read as zeros, fsync
    //! reaches the stack, bad requests get the documented errno, a read-only export refuses
    //! writes, and unmounting from outside ends the frontend.
    //! Method: a RAM export on the real runtime, mounted in a temporary directory; plain file
    //! system calls from a separate thread (the reactors must stay free to complete them),
    //! checked against a byte model. Skips, saying why, without root or /dev/fuse.

    use super::*;
    use flashrig_blockdev::DevRef;
    use flashrig_devices::RamDevice;
    use flashrig_runtime::{run, RuntimeKind};
    use std::fs::OpenOptions;
    use std::os::unix::fs::{FileExt, PermissionsExt};
    use std::os::unix::io::AsRawFd;

    fn skip_reason() -> Option<String> {
        // SAFETY: geteuid cannot fail and touches no memory.
        if unsafe { libc::geteuid() } != 0 {
            return Some("not root (mounting FUSE directly needs root)".into());
        }
        if !Path::new("/dev/fuse").exists() {
            return Some("no /dev/fuse".into());
        }
        None
    }

    /// Mounts a 4 MiB RAM export, runs `body` on a thread of its own with the file's path,
    /// then shuts down as `flashrig serve` does; returns the export's counters' flush count.
    fn with_mount<F>(read_only: bool, body: F) -> u64
    where
        F: FnOnce(PathBuf) + Send + 'static,
    {
        let (res, _) = run(RuntimeKind::Real, 2, move || async move {
            let dir = tempfile::tempdir().expect("temporary directory");
            let dev: DevRef = Arc::new(RamDevice::new("ram", 4096, 1024, 0, 0));
            let ex = Export::new("t", dev, flashrig_runtime::handle().unwrap(), read_only);
            let cfg = FuseConfig { mountpoint: dir.path().to_path_buf(), file_name: "disk".into() };
            let mut fe = mount(ex.clone(), cfg).expect("mount");
            let path = PathBuf::from(fe.describe());
            let th = std::thread::spawn(move || body(path));
            while !th.is_finished() {
                flashrig_runtime::sleep_ns(1_000_000).await;
            }
            let outcome = th.join();
            fe.stop();
            ex.close();
            while ex.in_flight() > 0 {
                flashrig_runtime::sleep_ns(1_000_000).await;
            }
            fe.finish();
            assert!(fe.finished());
            if let Err(p) = outcome {
                std::panic::resume_unwind(p);
            }
            ex.counters.flushes.load(Ordering::Relaxed)
        });
        res
    }

    fn errno_of(r: io::Result<impl Sized>) -> Option<i32> {
        r.err().and_then(|e| e.raw_os_error())
    }

    fn fallocate(f: &std::fs::File, mode: i32, offset: u64, len: u64) -> io::Result<()> {
        // SAFETY: a plain syscall on an open descriptor; no memory is passed.
        let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, offset as i64, len as i64) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    #[test]
    fn the_file_is_a_fixed_size_disk() {
        if let Some(why) = skip_reason() {
            eprintln!("skipped: {why}");
            return;
        }
        let flushes = with_mount(false, |path| {
            const SIZE: u64 = 4 << 20;
            let dir = path.parent().unwrap().to_path_buf();
            let names: Vec<_> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            assert_eq!(names, ["disk"]);
            let md = std::fs::metadata(&path).unwrap();
            assert_eq!(md.len(), SIZE);
            assert_eq!(md.permissions().mode() & 0o777, 0o644);
            let f = OpenOptions::new().read(true).write(true).open(&path).unwrap();
            let mut model = vec![0u8; SIZE as usize];
            for (i, &(off, len)) in
                [(0u64, 4096usize), (10, 100), (4090, 9000), (SIZE - 3, 3), (65536, 1 << 20)]
                    .iter()
                    .enumerate()
            {
                let data: Vec<u8> = (0..len).map(|x| (x * 7 + i * 13 + 1) as u8).collect();
                f.write_all_at(&data, off).unwrap();
                model[off as usize..off as usize + len].copy_from_slice(&data);
            }
            let mut back = vec![0u8; SIZE as usize];
            f.read_exact_at(&mut back, 0).unwrap();
            assert!(back == model, "the file reads back what was written");
            // Reads stop at the end; writes there are cut short, then refused.
            let mut buf = [0u8; 100];
            assert_eq!(f.read_at(&mut buf, SIZE - 10).unwrap(), 10);
            assert_eq!(f.read_at(&mut buf, SIZE).unwrap(), 0);
            assert_eq!(f.write_at(&[1; 100], SIZE - 10).unwrap(), 10);
            model[SIZE as usize - 10..].fill(1);
            assert_eq!(errno_of(f.write_at(&[1; 10], SIZE)), Some(libc::ENOSPC));
            // Punching a hole reads back as zeros (whole and partial blocks), and shows in
            // the export's counters as write-zeroes.
            let (po, pl) = (4000u64, 3 * 4096 + 500);
            fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, po, pl).unwrap();
            model[po as usize..(po + pl) as usize].fill(0);
            fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, 70000, 5000).unwrap();
            model[70000..75000].fill(0);
            fallocate(&f, 0, 0, SIZE).unwrap();
            assert_eq!(errno_of(fallocate(&f, 0, 0, SIZE + 1)), Some(libc::EFBIG));
            assert_eq!(
                errno_of(fallocate(&f, libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096)),
                Some(libc::EOPNOTSUPP)
            );
            f.read_exact_at(&mut back, 0).unwrap();
            assert!(back == model, "holes and zeroed ranges read as zeros, the rest is kept");
            f.sync_all().unwrap();
            // The size is the stack's.
            f.set_len(SIZE).unwrap();
            assert_eq!(errno_of(f.set_len(SIZE - 4096)), Some(libc::EPERM));
            assert_eq!(errno_of(f.set_len(SIZE + 4096)), Some(libc::EPERM));
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
            // One file, no others.
            assert!(std::fs::File::create(dir.join("other")).is_err());
            assert!(std::fs::create_dir(dir.join("d")).is_err());
            assert!(std::fs::remove_file(&path).is_err());
            assert_eq!(errno_of(std::fs::metadata(dir.join("nope"))), Some(libc::ENOENT));
        });
        assert!(flushes >= 1, "fsync reached the stack as a flush");
    }

    #[test]
    fn a_read_only_export_refuses_writes() {
        if let Some(why) = skip_reason() {
            eprintln!("skipped: {why}");
            return;
        }
        with_mount(true, |path| {
            let md = std::fs::metadata(&path).unwrap();
            assert_eq!(md.permissions().mode() & 0o777, 0o444);
            assert_eq!(errno_of(OpenOptions::new().write(true).open(&path)), Some(libc::EROFS));
            let f = std::fs::File::open(&path).unwrap();
            let mut buf = [1u8; 4096];
            f.read_exact_at(&mut buf, 8192).unwrap();
            assert_eq!(buf, [0u8; 4096]);
        });
    }

    #[test]
    fn an_outside_unmount_finishes_the_frontend() {
        if let Some(why) = skip_reason() {
            eprintln!("skipped: {why}");
            return;
        }
        let (done, _) = run(RuntimeKind::Real, 1, || async {
            let dir = tempfile::tempdir().expect("temporary directory");
            let dev: DevRef = Arc::new(RamDevice::new("ram", 4096, 16, 0, 0));
            let ex = Export::new("t", dev, flashrig_runtime::handle().unwrap(), false);
            let cfg = FuseConfig { mountpoint: dir.path().to_path_buf(), file_name: "disk".into() };
            let mut fe = mount(ex, cfg).expect("mount");
            assert!(!fe.finished());
            umount(&dir.path().canonicalize().unwrap(), 0).expect("umount from outside");
            let mut waited = 0;
            while !fe.finished() && waited < 10_000 {
                flashrig_runtime::sleep_ns(1_000_000).await;
                waited += 1;
            }
            let done = fe.finished();
            fe.finish();
            done
        });
        assert!(done, "the frontend saw the unmount");
    }
}
