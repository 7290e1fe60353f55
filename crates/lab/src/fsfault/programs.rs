//! The test programs of jaffer-thesis-2023.txt §2.4.4 (Table 2.2): each stresses one system
//! call on a populated file system, calls fsync on what it changed, and checks every return
//! value, recording each step's outcome so that a study can tell which call saw which error
//! (R_Propagate in Table 2.4 is an error code reaching one of these steps).
//!
//! `mount` and `umount`, also in Table 2.2, are not programs here: the study performs them
//! around every program, and observes them the same way.
//!
//! The population (`populate`) gives every program something to work on: a small and a tiny
//! file (the tiny one fits in an inode where the file system inlines data), a large one of
//! several extents, a directory of many entries (several directory blocks), a deep path with
//! an empty directory at its end, a short and a long symbolic link. Every file's bytes come
//! from a generator seeded by its name, so `read` checks what it reads.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The programs, in Table 2.2's order (less mount and umount).
pub const PROGRAMS: &[&str] = &[
    "open",
    "creat",
    "access",
    "stat",
    "lstat",
    "chmod",
    "chown",
    "utime",
    "rename",
    "read",
    "write",
    "truncate",
    "readlink",
    "symlink",
    "unlink",
    "chdir",
    "rmdir",
    "mkdir",
    "getdirentries",
    "chroot",
];

/// Entries in the populated directory `dir`: enough for several directory blocks.
pub const DIR_ENTRIES: usize = 300;
const LARGE_BYTES: usize = 8 << 20;
const SMALL_BYTES: usize = 3000;
const TINY_BYTES: usize = 40;
const DEEP_FILE: &str = "deep/a/b/c/d/e/file";
const EMPTY_DIR: &str = "deep/a/b/c/d/empty";
/// A symlink target longer than the 60 bytes an inode holds, so it takes a block.
const LONG_TARGET: &str =
    "./deep/./a/./b/./c/./d/./e/./././././././././././././././././././././././././file";

/// One system call of a program and what it returned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub call: String,
    /// The error number, if the call failed with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    /// The failure, in words (also for checks that are not calls: bytes that differ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a program did: its steps, up to and including the first that failed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub program: String,
    pub steps: Vec<Step>,
}

impl Outcome {
    /// Whether every step succeeded.
    pub fn ok(&self) -> bool {
        self.steps.iter().all(|s| s.error.is_none())
    }
}

/// The bytes of the populated file `name`, `len` of them (splitmix64 seeded by the name).
pub fn content(name: &str, len: usize) -> Vec<u8> {
    let mut x = name
        .bytes()
        .fold(0x9E37_79B9_7F4A_7C15u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01B3));
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

fn write_file(root: &Path, name: &str, len: usize) -> std::io::Result<()> {
    File::create(root.join(name))?.write_all(&content(name, len))
}

/// Fills `root` (an empty directory, usually a fresh file system's root) with what the
/// programs work on. It does not sync: the study unmounts the file system after populating
/// it, which writes everything.
pub fn populate(root: &Path) -> std::io::Result<()> {
    write_file(root, "tiny", TINY_BYTES)?;
    write_file(root, "small", SMALL_BYTES)?;
    write_file(root, "large", LARGE_BYTES)?;
    fs::create_dir_all(root.join("dir"))?;
    for i in 0..DIR_ENTRIES {
        write_file(root, &format!("dir/f{i}"), 100)?;
    }
    fs::create_dir_all(root.join("deep/a/b/c/d/e"))?;
    fs::create_dir_all(root.join(EMPTY_DIR))?;
    write_file(root, DEEP_FILE, 1024)?;
    std::os::unix::fs::symlink("small", root.join("link"))?;
    std::os::unix::fs::symlink(LONG_TARGET, root.join("longlink"))
}

/// Runs the steps of a program in order, stopping at the first that fails.
struct Steps<'a> {
    root: &'a Path,
    done: Vec<Step>,
    failed: bool,
}

impl Steps<'_> {
    fn call(&mut self, call: &str, f: impl FnOnce(&Path) -> std::io::Result<()>) -> &mut Self {
        if !self.failed {
            let r = f(self.root);
            let (errno, error) = match r {
                Ok(()) => (None, None),
                Err(e) => (e.raw_os_error(), Some(e.to_string())),
            };
            self.failed = error.is_some();
            self.done.push(Step { call: call.to_string(), errno, error });
        }
        self
    }

    /// A check that is not a system call: fails with `what` when `ok` is false.
    fn check(&mut self, what: &str, ok: impl FnOnce(&Path) -> std::io::Result<bool>) -> &mut Self {
        self.call(what, |root| match ok(root)? {
            true => Ok(()),
            false => Err(std::io::Error::other(format!("{what}: not as written"))),
        })
    }
}

fn fsync(root: &Path, path: &str) -> std::io::Result<()> {
    File::open(root.join(path))?.sync_all()
}

fn c_path(root: &Path, path: &str) -> std::io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(root.join(path).as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("a path with a NUL byte"))
}

/// Runs `program` on the populated tree at `root`. An unknown program is an `Err`.
pub fn run(program: &str, root: &Path) -> Result<Outcome, String> {
    let mut s = Steps { root, done: Vec::new(), failed: false };
    match program {
        "open" => {
            s.call("open(deep file, O_RDWR)", |r| {
                OpenOptions::new().read(true).write(true).open(r.join(DEEP_FILE))?.sync_all()
            });
        }
        "creat" => {
            s.call("creat(dir/new) + write + fsync", |r| {
                let mut f = File::create(r.join("dir/new"))?;
                f.write_all(&content("dir/new", 100))?;
                f.sync_all()
            })
            .call("fsync(dir)", |r| fsync(r, "dir"));
        }
        "access" => {
            s.call("access(deep file, R_OK | W_OK)", |r| {
                let p = c_path(r, DEEP_FILE)?;
                // SAFETY: `p` is a NUL-terminated path that lives across the call.
                match unsafe { libc::access(p.as_ptr(), libc::R_OK | libc::W_OK) } {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            });
        }
        "stat" => {
            s.call("stat(large)", |r| fs::metadata(r.join("large")).map(|_| ()))
                .check("stat(large) size", |r| {
                    Ok(fs::metadata(r.join("large"))?.len() == LARGE_BYTES as u64)
                });
        }
        "lstat" => {
            s.check("lstat(longlink) is a symlink", |r| {
                Ok(fs::symlink_metadata(r.join("longlink"))?.file_type().is_symlink())
            });
        }
        "chmod" => {
            s.call("chmod(small, 0600)", |r| {
                fs::set_permissions(r.join("small"), fs::Permissions::from_mode(0o600))
            })
            .call("fsync(small)", |r| fsync(r, "small"));
        }
        "chown" => {
            s.call("chown(small, 1000, 1000)", |r| {
                std::os::unix::fs::chown(r.join("small"), Some(1000), Some(1000))
            })
            .call("fsync(small)", |r| fsync(r, "small"));
        }
        "utime" => {
            s.call("utime(small)", |r| {
                let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
                let f = File::options().write(true).open(r.join("small"))?;
                f.set_times(fs::FileTimes::new().set_modified(t).set_accessed(t))?;
                f.sync_all()
            });
        }
        "rename" => {
            s.call("rename(dir/f1, deep/a/f1)", |r| {
                fs::rename(r.join("dir/f1"), r.join("deep/a/f1"))
            })
            .call("fsync(dir)", |r| fsync(r, "dir"))
            .call("fsync(deep/a)", |r| fsync(r, "deep/a"));
        }
        "read" => {
            for (name, len) in
                [("large", LARGE_BYTES), ("small", SMALL_BYTES), ("tiny", TINY_BYTES)]
            {
                s.check(&format!("read({name}) and compare"), |r| {
                    let mut got = Vec::new();
                    File::open(r.join(name))?.read_to_end(&mut got)?;
                    Ok(got == content(name, len))
                });
            }
        }
        "write" => {
            s.call("write(large, 64 KiB at 1 MiB) + fsync", |r| {
                let mut f = File::options().write(true).open(r.join("large"))?;
                f.seek(SeekFrom::Start(1 << 20))?;
                f.write_all(&content("write", 64 << 10))?;
                f.sync_all()
            });
        }
        "truncate" => {
            s.call("truncate(large, 1 MiB) + fsync", |r| {
                let f = File::options().write(true).open(r.join("large"))?;
                f.set_len(1 << 20)?;
                f.sync_all()
            });
        }
        "readlink" => {
            s.check("readlink(longlink)", |r| {
                Ok(fs::read_link(r.join("longlink"))? == Path::new(LONG_TARGET))
            });
        }
        "symlink" => {
            s.call("symlink(small, dir/newlink)", |r| {
                std::os::unix::fs::symlink("../small", r.join("dir/newlink"))
            })
            .call("fsync(dir)", |r| fsync(r, "dir"));
        }
        "unlink" => {
            s.call("unlink(dir/f2)", |r| fs::remove_file(r.join("dir/f2")))
                .call("fsync(dir)", |r| fsync(r, "dir"));
        }
        "chdir" => {
            s.call("chdir(deep/a/b/c)", |r| std::env::set_current_dir(r.join("deep/a/b/c")))
                .call("stat(d) from there", |_| fs::metadata("d").map(|_| ()));
        }
        "rmdir" => {
            s.call("rmdir(deep/a/b/c/d/empty)", |r| fs::remove_dir(r.join(EMPTY_DIR)))
                .call("fsync(deep/a/b/c/d)", |r| fsync(r, "deep/a/b/c/d"));
        }
        "mkdir" => {
            s.call("mkdir(dir/newdir)", |r| fs::create_dir(r.join("dir/newdir")))
                .call("fsync(dir)", |r| fsync(r, "dir"));
        }
        "getdirentries" => {
            s.check("getdirentries(dir): every entry", |r| {
                let mut n = 0;
                for e in fs::read_dir(r.join("dir"))? {
                    e?;
                    n += 1;
                }
                Ok(n == DIR_ENTRIES)
            });
        }
        "chroot" => {
            // The process's root changes for good: the program runs in a process of its own.
            s.call("chroot(deep)", |r| std::os::unix::fs::chroot(r.join("deep")))
                .call("stat(/a/b) inside", |_| fs::metadata("/a/b").map(|_| ()));
        }
        other => {
            return Err(format!("no test program {other:?}; the programs: {}", PROGRAMS.join(", ")))
        }
    }
    Ok(Outcome { program: program.to_string(), steps: s.done })
}
