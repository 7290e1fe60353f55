//! The file systems of the study, the populated image each experiment starts from, and the
//! tree an image holds (what "the image against the expected one" compares).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::host::{self, Loop};
use super::programs;

/// A file system of the study and the tools that make and check it.
#[derive(Clone, Copy, Debug)]
pub struct FileSystem {
    /// The study's name for it.
    pub name: &'static str,
    /// The kernel's name for it and the inject layer's classifier (`filesystem`).
    pub kind: &'static str,
    /// The image's size: the tools' minimum or more (mkfs.xfs refuses less than 300 MiB).
    pub image_bytes: u64,
    /// mkfs and its arguments, before the device.
    pub mkfs: &'static [&'static str],
    /// The checker that only reports (exit status 0: clean).
    pub check: &'static [&'static str],
    /// The checker that repairs.
    pub repair: &'static [&'static str],
    /// Whether it keeps a second copy of its metadata to repair a block from (the
    /// `rewritten` observation is looked for only then).
    pub metadata_copies: bool,
    /// Mount options: xfs refuses a second file system with the UUID of one mounted already,
    /// which copies of one image running side by side are (`nouuid`).
    pub mount_options: &'static str,
    /// Exit statuses of `check` that mean "problems found" (others than 0 and these: the
    /// checker itself failed, reported as such).
    pub check_found: &'static [i32],
}

/// What the two btrfs setups share.
const BTRFS: FileSystem = FileSystem {
    name: "btrfs",
    kind: "btrfs",
    image_bytes: 192 << 20,
    mkfs: &["mkfs.btrfs", "-q", "-f"],
    check: &["btrfs", "check", "--readonly"],
    repair: &["btrfs", "check", "--repair", "--force"],
    metadata_copies: false,
    // Copies of one btrfs mount side by side since Linux 6.7 (temp-fsid).
    mount_options: "",
    // btrfs check: 1 = errors found.
    check_found: &[1],
};

/// The study's file systems: the thesis' ext4 and btrfs, xfs in place of f2fs (which this
/// kernel does not have), and btrfs as today's mkfs makes it (`btrfs-dup`). Every one with 4 KiB blocks, the device's block, so that the
/// inject layer's classifier sees one structure per block.
pub const FILE_SYSTEMS: &[FileSystem] = &[
    FileSystem {
        name: "ext4",
        kind: "ext4",
        image_bytes: 64 << 20,
        mkfs: &["mkfs.ext4", "-q", "-F", "-b", "4096"],
        check: &["e2fsck", "-f", "-n"],
        repair: &["e2fsck", "-f", "-y"],
        metadata_copies: false,
        mount_options: "",
        // e2fsck: 4 = errors left uncorrected (with -n, every error found); 8 = it could not
        // open the file system (a superblock it refuses), which is a finding too.
        check_found: &[1, 2, 4, 8],
    },
    FileSystem {
        name: "xfs",
        kind: "xfs",
        image_bytes: 320 << 20,
        mkfs: &["mkfs.xfs", "-q", "-f"],
        check: &["xfs_repair", "-n"],
        repair: &["xfs_repair"],
        metadata_copies: false,
        mount_options: "nouuid",
        // xfs_repair -n: 1 = corruption found.
        check_found: &[1],
    },
    // The thesis' btrfs on an SSD: one copy of the metadata (§2.5.1: "in case the underlying
    // device is an SSD, Btrfs turns off metadata replication by default"). btrfs-progs 5.15
    // and later keep two copies on every single device; that is `btrfs-dup`.
    FileSystem { name: "btrfs", mkfs: &["mkfs.btrfs", "-q", "-f", "-m", "single"], ..BTRFS },
    FileSystem {
        name: "btrfs-dup",
        mkfs: &["mkfs.btrfs", "-q", "-f", "-m", "dup"],
        metadata_copies: true,
        ..BTRFS
    },
];

pub fn file_system(name: &str) -> Result<&'static FileSystem, String> {
    FILE_SYSTEMS.iter().find(|f| f.name == name).ok_or_else(|| {
        let names: Vec<&str> = FILE_SYSTEMS.iter().map(|f| f.name).collect();
        format!("no file system {name:?} in the study; it has: {}", names.join(", "))
    })
}

impl FileSystem {
    /// The tools the study needs for this file system.
    pub fn tools(&self) -> Vec<&'static str> {
        vec![self.mkfs[0], self.check[0], self.repair[0]]
    }

    /// Runs `tool` (`check` or `repair`) on the image file `image`.
    pub fn run_checker(&self, tool: &[&str], image: &Path, deadline: Duration) -> host::Ran {
        let mut args: Vec<&str> = tool[1..].to_vec();
        let img = image.to_string_lossy();
        args.push(&img);
        let ran = host::run(tool[0], &args, deadline);
        // xfs_repair will not touch a file system whose log holds changes it cannot replay
        // (status 2); a repair then zeroes the log, as an administrator would (-L).
        if self.name == "xfs" && tool == self.repair && ran.status == Some(2) {
            let mut args = vec!["-L"];
            args.push(&img);
            return host::run(tool[0], &args, deadline);
        }
        ran
    }
}

/// Makes the populated image of `fs` at `path` (mkfs, with `mkfs_extra` arguments, on a loop
/// device over the file; mount; `programs::populate`; unmount) and returns its tree.
pub fn make_golden(
    fs: &FileSystem,
    mkfs_extra: &[String],
    path: &Path,
    mountpoint: &Path,
) -> Result<Tree, String> {
    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    file.set_len(fs.image_bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    drop(file);
    let lo = Loop::attach(path, false, None)?;
    let mut args: Vec<&str> = fs.mkfs[1..].to_vec();
    args.extend(mkfs_extra.iter().map(String::as_str));
    args.push(&lo.dev);
    let made = host::run(fs.mkfs[0], &args, host::SHORT);
    if !made.ok() {
        return Err(made.failure(fs.mkfs[0]));
    }
    let m = host::mount(&lo.dev, mountpoint, fs.kind, fs.mount_options, host::SHORT);
    if !m.ok() {
        return Err(m.failure("mount the new file system"));
    }
    let populated = programs::populate(mountpoint).map_err(|e| format!("populate: {e}"));
    let tree = populated.and_then(|_| Tree::read(mountpoint));
    let u = host::umount(mountpoint, host::SHORT);
    let tree = tree?;
    if !u.ok() {
        return Err(u.failure("umount the populated file system"));
    }
    drop(lo);
    let checked = fs.run_checker(fs.check, path, host::SHORT);
    if !checked.ok() {
        return Err(checked.failure("the populated image does not check clean"));
    }
    Ok(tree)
}

/// Copies an image without filling its holes.
pub fn copy_image(from: &Path, to: &Path) -> Result<(), String> {
    let ran = host::run(
        "cp",
        &["--sparse=always", &from.to_string_lossy(), &to.to_string_lossy()],
        host::SHORT,
    );
    if ran.ok() {
        Ok(())
    } else {
        Err(ran.failure("cp"))
    }
}

/// One entry of a tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// "file", "dir", "symlink", "other", or "unreadable: <error>".
    pub kind: String,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Files: the length; others 0.
    pub size: u64,
    /// Files: the CRC-32C of the content (0 when it could not be read: `kind` says why).
    pub crc: u32,
    /// Symbolic links: the target.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target: String,
    /// The modification time (seconds); compared only where a program set it (below).
    pub mtime_s: i64,
}

/// What a mounted file system holds: each path (relative to the root, lost+found left out:
/// a checker's salvage is judged by what is missing elsewhere) and its entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tree {
    pub entries: BTreeMap<String, Entry>,
}

impl Tree {
    /// Walks the tree at `root`. A directory that cannot be listed or a file that cannot be
    /// read is an entry saying so, not an error: it is what the experiment observes.
    pub fn read(root: &Path) -> Result<Tree, String> {
        let mut tree = Tree::default();
        let mut stack = vec![String::new()];
        while let Some(dir) = stack.pop() {
            let path = root.join(&dir);
            let list = match std::fs::read_dir(&path) {
                Ok(l) => l,
                Err(e) if dir.is_empty() => return Err(format!("{}: {e}", path.display())),
                Err(e) => {
                    if let Some(entry) = tree.entries.get_mut(&dir) {
                        entry.kind = format!("unreadable: {e}");
                    }
                    continue;
                }
            };
            for item in list {
                let item = match item {
                    Ok(i) => i,
                    Err(e) => {
                        tree.entries.insert(format!("{dir}/?"), unreadable(&e));
                        continue;
                    }
                };
                let name = item.file_name().to_string_lossy().into_owned();
                let rel = if dir.is_empty() { name.clone() } else { format!("{dir}/{name}") };
                if rel == "lost+found" {
                    continue;
                }
                let entry = entry_of(&item.path());
                if entry.kind == "dir" {
                    stack.push(rel.clone());
                }
                tree.entries.insert(rel, entry);
            }
        }
        Ok(tree)
    }
}

fn unreadable(e: &std::io::Error) -> Entry {
    Entry {
        kind: format!("unreadable: {e}"),
        mode: 0,
        uid: 0,
        gid: 0,
        size: 0,
        crc: 0,
        target: String::new(),
        mtime_s: 0,
    }
}

fn entry_of(path: &Path) -> Entry {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => return unreadable(&e),
    };
    let mut e = Entry {
        kind: "other".into(),
        mode: meta.mode(),
        uid: meta.uid(),
        gid: meta.gid(),
        size: 0,
        crc: 0,
        target: String::new(),
        mtime_s: meta.mtime(),
    };
    let t = meta.file_type();
    if t.is_dir() {
        e.kind = "dir".into();
    } else if t.is_symlink() {
        e.kind = "symlink".into();
        match std::fs::read_link(path) {
            Ok(target) => e.target = target.to_string_lossy().into_owned(),
            Err(err) => e.kind = format!("unreadable: {err}"),
        }
    } else if t.is_file() {
        e.kind = "file".into();
        e.size = meta.len();
        match std::fs::read(path) {
            Ok(bytes) => e.crc = crc32c::crc32c(&bytes),
            Err(err) => e.kind = format!("unreadable: {err}"),
        }
    }
    e
}

/// How a tree compares with the tree before the program (`previous`) and the one a fault-free
/// run left (`expected`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub same_as_expected: bool,
    pub same_as_previous: bool,
    /// Paths the program does not change (the same in `previous` and `expected`) that are
    /// missing or differ: data lost beyond the operation.
    pub lost: Vec<String>,
    /// Paths in neither `previous` nor `expected` (what a repair left, say).
    pub extra: Vec<String>,
}

/// Whether two entries are the same. Times are compared only where `expected` holds a time
/// from before the image was made (`made_s`): a time a program set (utime), which a later run
/// reproduces exactly; other times are the moment of a run and differ between runs.
fn same_entry(a: &Entry, b: &Entry, made_s: i64) -> bool {
    let times = b.mtime_s < made_s - 60;
    let strip = |e: &Entry| Entry { mtime_s: 0, ..e.clone() };
    strip(a) == strip(b) && (!times || a.mtime_s == b.mtime_s)
}

fn same_tree(a: &Tree, b: &Tree, made_s: i64) -> bool {
    a.entries.len() == b.entries.len()
        && a.entries.iter().all(|(p, e)| b.entries.get(p).is_some_and(|x| same_entry(e, x, made_s)))
}

/// Compares `got` with `previous` and `expected` (`made_s`: when the image was made).
pub fn compare(got: &Tree, previous: &Tree, expected: &Tree, made_s: i64) -> Comparison {
    let mut c = Comparison {
        same_as_expected: same_tree(got, expected, made_s),
        same_as_previous: same_tree(got, previous, made_s),
        ..Comparison::default()
    };
    for (path, before) in &previous.entries {
        let untouched = expected.entries.get(path).is_some_and(|e| same_entry(before, e, made_s));
        if untouched && !got.entries.get(path).is_some_and(|g| same_entry(g, before, made_s)) {
            c.lost.push(path.clone());
        }
    }
    for path in got.entries.keys() {
        if !previous.entries.contains_key(path) && !expected.entries.contains_key(path) {
            c.extra.push(path.clone());
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(crc: u32, mtime_s: i64) -> Entry {
        Entry {
            kind: "file".into(),
            mode: 0o100644,
            uid: 0,
            gid: 0,
            size: 1,
            crc,
            target: String::new(),
            mtime_s,
        }
    }

    fn tree(entries: &[(&str, Entry)]) -> Tree {
        Tree { entries: entries.iter().map(|(p, e)| (p.to_string(), e.clone())).collect() }
    }

    const MADE: i64 = 2_000_000_000;

    #[test]
    fn a_changed_untouched_file_is_lost_and_run_times_do_not_count() {
        let previous = tree(&[("a", file(1, MADE)), ("b", file(2, MADE))]);
        let expected = tree(&[("a", file(1, MADE + 5)), ("b", file(3, MADE + 5))]);
        // Same contents as expected, other run times: the same tree.
        let got = tree(&[("a", file(1, MADE + 9)), ("b", file(3, MADE + 9))]);
        let c = compare(&got, &previous, &expected, MADE);
        assert!(c.same_as_expected && !c.same_as_previous && c.lost.is_empty());
        // `a` is untouched by the program: a different `a` is data lost; `b` is the program's.
        let got = tree(&[("a", file(7, MADE)), ("b", file(2, MADE))]);
        let c = compare(&got, &previous, &expected, MADE);
        assert_eq!(c.lost, ["a"]);
        assert!(!c.same_as_expected && !c.same_as_previous);
    }

    #[test]
    fn a_time_a_program_set_is_compared() {
        let previous = tree(&[("a", file(1, MADE))]);
        let expected = tree(&[("a", file(1, 1_000_000_000))]);
        let got = tree(&[("a", file(1, MADE))]);
        let c = compare(&got, &previous, &expected, MADE);
        assert!(!c.same_as_expected && c.same_as_previous);
        let c = compare(&tree(&[("a", file(1, 1_000_000_000))]), &previous, &expected, MADE);
        assert!(c.same_as_expected);
    }

    #[test]
    fn unknown_file_systems_are_named() {
        let e = file_system("f2fs").unwrap_err();
        assert!(e.contains("f2fs") && e.contains("ext4, xfs, btrfs"), "{e}");
    }
}
