//! Table 2.4 of jaffer-thesis-2023.txt: what an experiment's observations say about the file
//! system's detection and recovery, and its checker's.
//!
//! The thesis classified its experiments by hand; these rules are ours, written down so that
//! anyone can argue with one of them and rerun the classification (the raw observations are
//! kept, and `flashrig fsfault` on a folder whose experiments are all done only classifies and
//! reports again):
//!
//! Detection (several can hold):
//! - `ErrorCode`: an error-returning fault (read or write error) and the file system showed it
//!   knew while the fault acted: a kernel line of its own (not the buffer cache's "Buffer I/O
//!   error"), an error code to the program, a read-only turn, a failed mount or unmount.
//! - `Redundancy`: a silent fault and a kernel line about a checksum ("checksum", "csum",
//!   "crc"), online or at the remount that meets the persisted damage again.
//! - `Sanity`: a silent fault and another line of the file system saying what it found wrong
//!   (not only what it did about it: "read-only", "aborting journal", "run e2fsck" and the
//!   like are consequences), or an error code or a line with no checksum line beside it.
//! - On a file system with metadata copies (btrfs-dup), a block written within 64 accesses
//!   after it failed to read (or read corrupt) counts as detected (`ErrorCode` or
//!   `Redundancy`) even without a line: the kernel rate-limits btrfs' line saying it
//!   repaired the block from its copy.
//! - `Zero`: none of these.
//! - `Fsck` (offline): the checker, run without repair after the unmount, found problems
//!   (a checker that outlived the deadline found nothing we know of).
//!
//! Recovery (online; several can hold):
//! - `Retry`: after an error code, the block was accessed again with the same operation (a
//!   read at any later time, a write within the next 64 accesses), or the file system said it
//!   corrected a read error, or rewrote the block from its copy (above).
//! - `Propagate`: an error code reached a program step, or the mount or unmount failed.
//! - `Stop`: the file system went read-only, aborted its journal or shut down (seen in
//!   /proc/self/mountinfo or said in the kernel log), the mount, the program or the unmount
//!   hung, or the kernel reported a bug.
//! - `Previous`: the tree after the run is the one before the program and not the expected
//!   one, the image mounts and its checker says clean (status 0): the file system stayed at
//!   the state before the operation.
//! - `Zero`: none of these.
//!
//! The checker's recovery (after a repair, of the image as a last mount finds it): `Fail`
//! (does not mount), `Full` (the tree the fault-free run left), `Orig` (the tree before the
//! program), `Partial` (anything else: the operation half done, or data lost beyond it).
//!
//! Severe, the thesis' "severe failure cases": unmountable after repair, a kernel bug, a hang,
//! data lost beyond the operation (a file or directory the program does not touch is missing
//! or differs after the repair), wrong bytes handed to a program with nothing noticed, or the
//! image ends differing from the expected one with nothing (file system, program or checker)
//! having noticed (silent corruption).

use serde::Serialize;

use super::experiment::{Observation, PROGRAM_DIED};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Detection {
    Zero,
    ErrorCode,
    Sanity,
    Redundancy,
    Fsck,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Recovery {
    Zero,
    Retry,
    Propagate,
    Previous,
    Stop,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum FsckRecovery {
    Fail,
    Partial,
    Orig,
    Full,
}

/// An experiment, classified.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Class {
    pub detection: Vec<Detection>,
    pub recovery: Vec<Recovery>,
    pub fsck: FsckRecovery,
    pub severe: Option<&'static str>,
}

/// Whether a fault kind hands the file system an error code (the others are silent).
pub fn returns_error(kind: &str) -> bool {
    matches!(kind, "read-error" | "write-error")
}

fn is_checksum(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    l.contains("checksum") || l.contains("csum") || l.contains("crc")
}

/// Lines the buffer cache writes about a failed request ("Buffer I/O error on dev ..."): the
/// kernel's generic I/O path, not the file system's own check.
fn is_buffer_layer(line: &str) -> bool {
    line.starts_with("Buffer I/O error")
}

/// What a kernel line says when the file system stopped: read-only, journal aborted, shut
/// down (R_Stop).
const STOP_WORDS: &[&str] =
    &["shut down", "shutting down", "forced readonly", "read-only", "aborting journal"];

/// What a kernel line says when the file system corrected an error from another copy.
const CORRECTED_WORDS: &[&str] = &["corrected", "fixed up", "repaired"];

/// Whether `line` says any of `words` (case aside).
fn says(line: &str, words: &[&str]) -> bool {
    let l = line.to_ascii_lowercase();
    words.iter().any(|w| l.contains(w))
}

/// Lines that say what the file system did about an error it found (turned read-only,
/// aborted the journal, corrected a block, asks for a check), not how it found it.
fn is_consequence(line: &str) -> bool {
    const OTHER: &[&str] = &[
        "readonly",
        "run e2fsck",
        "run xfs_repair",
        "need of filesystem check",
        "mounting fs with errors",
        "error recorded from previous mount",
        "first 128 bytes",
    ];
    says(line, STOP_WORDS) || says(line, CORRECTED_WORDS) || says(line, OTHER)
}

/// Classifies one experiment that ran (fired, no harness error).
pub fn classify(o: &Observation) -> Class {
    let kind = o.fault.as_ref().map_or("", |f| f.kind.as_str());
    // An error code reached the program (a failed content check has none: the file system
    // handed over wrong bytes without a word).
    let errno = o.steps.iter().any(|s| s.errno.is_some());
    let wrong_data =
        o.steps.iter().any(|s| s.error.is_some() && s.errno.is_none() && s.call != PROGRAM_DIED);
    // An error code exists only while the fault acts (online); persisted silent damage is
    // also met again at the remount and its walk (the thesis' "Shorn Write + Program Read").
    let lines: Vec<&String> = if returns_error(kind) {
        o.kernel_online.iter().collect()
    } else {
        o.kernel_online.iter().chain(&o.kernel_remount).collect()
    };
    let fs_lines: Vec<&&String> = lines.iter().filter(|l| !is_buffer_layer(l)).collect();
    let bug = !o.kernel_bugs.is_empty();
    let failed_mount = o.mount_error.is_some() || o.umount_error.is_some();
    let mut detection = Vec::new();
    if returns_error(kind) {
        if !fs_lines.is_empty() || errno || o.read_only || failed_mount {
            detection.push(Detection::ErrorCode);
        }
    } else {
        if fs_lines.iter().any(|l| is_checksum(l)) {
            detection.push(Detection::Redundancy);
        }
        let checked = fs_lines.iter().any(|l| !is_checksum(l) && !is_consequence(l));
        if checked || (detection.is_empty() && (errno || !fs_lines.is_empty())) {
            detection.push(Detection::Sanity);
        }
    }
    // A block rewritten right after it failed to read was found bad by the file system
    // (which then repaired it from a copy), whether or not its rate-limited line made it.
    if detection.is_empty() && o.rewritten {
        detection.push(if returns_error(kind) {
            Detection::ErrorCode
        } else {
            Detection::Redundancy
        });
    }
    if detection.is_empty() {
        detection.push(Detection::Zero);
    }
    if o.check_found {
        detection.push(Detection::Fsck);
    }
    let mut recovery = Vec::new();
    // A read served again from another copy (btrfs' "read error corrected" from its metadata
    // copy) is a retry that the thesis' Table 2.4 has no closer class for.
    let read_fault = o.fault.as_ref().is_some_and(|f| f.op == "read");
    let corrected = read_fault && lines.iter().any(|l| says(l, CORRECTED_WORDS));
    if o.retried || o.rewritten || corrected {
        recovery.push(Recovery::Retry);
    }
    if errno || failed_mount {
        recovery.push(Recovery::Propagate);
    }
    let shut_down = o.kernel_online.iter().any(|l| says(l, STOP_WORDS));
    let stop = o.read_only || shut_down || o.hung || bug;
    let before = o.before_repair.as_ref();
    let previous = before.is_some_and(|c| c.same_as_previous && !c.same_as_expected)
        && o.check_status == Some(0)
        && o.remount_error.is_none();
    if previous {
        recovery.push(Recovery::Previous);
    }
    if stop {
        recovery.push(Recovery::Stop);
    }
    if recovery.is_empty() {
        recovery.push(Recovery::Zero);
    }
    let fsck = match &o.after_repair {
        None => FsckRecovery::Fail,
        Some(c) if c.same_as_expected => FsckRecovery::Full,
        Some(c) if c.same_as_previous => FsckRecovery::Orig,
        Some(_) => FsckRecovery::Partial,
    };
    let lost = o.after_repair.as_ref().is_some_and(|c| !c.lost.is_empty());
    let noticed = detection.iter().any(|d| *d != Detection::Zero);
    let severe = if fsck == FsckRecovery::Fail {
        Some("unmountable")
    } else if bug {
        Some("kernel bug")
    } else if o.hung {
        Some("hung")
    } else if lost {
        Some("data loss")
    } else if wrong_data && !noticed {
        Some("wrong data returned")
    } else if fsck != FsckRecovery::Full && !noticed && !errno {
        Some("silent corruption")
    } else {
        None
    };
    Class { detection, recovery, fsck, severe }
}

/// A cell's text in the tables: detection letters, '/', recovery letters, and the checker's
/// recovery when it had something to do. Legend in `LEGEND`.
pub fn cell(c: &Class) -> String {
    let d: String = c
        .detection
        .iter()
        .map(|d| match d {
            Detection::Zero => '0',
            Detection::ErrorCode => 'e',
            Detection::Sanity => 's',
            Detection::Redundancy => 'r',
            Detection::Fsck => 'f',
        })
        .collect();
    let r: String = c
        .recovery
        .iter()
        .map(|r| match r {
            Recovery::Zero => '0',
            Recovery::Retry => 't',
            Recovery::Propagate => 'p',
            Recovery::Previous => 'v',
            Recovery::Stop => 'x',
        })
        .collect();
    let f = match c.fsck {
        FsckRecovery::Full => "",
        FsckRecovery::Orig => " O",
        FsckRecovery::Partial => " P",
        FsckRecovery::Fail => " F",
    };
    let bang = if c.severe.is_some() { "!" } else { "" };
    format!("{d}/{r}{f}{bang}")
}

/// The legend of `cell`.
pub const LEGEND: &str = "Each cell: detection / recovery, then the checker's recovery where \
it left something other than the expected tree, `!` when severe. Detection: `0` D_Zero, `e` \
D_ErrorCode, `s` D_Sanity, `r` D_Redundancy, `f` D_Fsck. Recovery: `0` R_Zero, `t` R_Retry, \
`p` R_Propagate, `v` R_Previous, `x` R_Stop. Checker: `F` R_Fsck_Fail, `P` R_Fsck_Partial, `O` \
R_Fsck_Orig (none: R_Fsck_Full). Several outcomes in one cell (several blocks, several \
experiments) are joined with `;`.";

/// A number for the heat maps: 0 nothing visible went wrong (the expected tree, no error), 1
/// detected and handled (an error reported or a stop, nothing lost), 2 the operation lost or
/// half done (R_Fsck_Orig, or Partial without loss) or only the checker noticed, 3 severe.
pub fn severity(c: &Class) -> u8 {
    if c.severe.is_some() {
        3
    } else if c.fsck != FsckRecovery::Full
        || (c.detection.contains(&Detection::Fsck) && c.detection.contains(&Detection::Zero))
    {
        2
    } else if c.detection.iter().any(|d| *d != Detection::Zero) {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsfault::experiment::Fault;
    use crate::fsfault::image::Comparison;
    use crate::fsfault::programs::Step;

    fn obs(kind: &str) -> Observation {
        let same = Comparison { same_as_expected: true, ..Comparison::default() };
        Observation {
            fault: Some(Fault {
                kind: kind.into(),
                op: "read".into(),
                structure: "dir".into(),
                extra: String::new(),
            }),
            fired: 1,
            check_status: Some(0),
            before_repair: Some(same.clone()),
            after_repair: Some(same),
            ..Observation::default()
        }
    }

    #[test]
    fn an_error_code_reaching_the_program_is_detected_and_propagated() {
        let mut o = obs("read-error");
        o.steps = vec![Step { call: "ls".into(), errno: Some(5), error: Some("EIO".into()) }];
        o.kernel_online = vec!["EXT4-fs error (device loop3): reading directory".into()];
        let c = classify(&o);
        assert_eq!(c.detection, [Detection::ErrorCode]);
        assert_eq!(c.recovery, [Recovery::Propagate]);
        assert_eq!((c.fsck, c.severe), (FsckRecovery::Full, None));
        assert_eq!(cell(&c), "e/p");
        assert_eq!(severity(&c), 1);
    }

    #[test]
    fn a_checksum_line_is_redundancy_and_a_silent_change_is_severe() {
        let mut o = obs("corrupt");
        o.kernel_online = vec!["EXT4-fs error (device loop3): inode checksum invalid".into()];
        o.read_only = true;
        let c = classify(&o);
        assert_eq!(c.detection, [Detection::Redundancy]);
        assert_eq!(c.recovery, [Recovery::Stop]);
        let mut o = obs("lost");
        o.after_repair = Some(Comparison::default());
        let c = classify(&o);
        assert_eq!((c.fsck, c.severe), (FsckRecovery::Partial, Some("silent corruption")));
        assert_eq!(severity(&c), 3);
        o.after_repair = None;
        assert_eq!(classify(&o).severe, Some("unmountable"));
    }

    #[test]
    fn wrong_bytes_handed_over_silently_are_severe_and_not_propagated() {
        let mut o = obs("corrupt");
        o.steps = vec![Step {
            call: "read(large) and compare".into(),
            errno: None,
            error: Some("not as written".into()),
        }];
        let c = classify(&o);
        assert_eq!(c.detection, [Detection::Zero]);
        assert_eq!(c.recovery, [Recovery::Zero]);
        assert_eq!(c.severe, Some("wrong data returned"));
    }

    #[test]
    fn the_buffer_caches_line_is_not_the_file_systems_and_consequences_are_not_checks() {
        let mut o = obs("write-error");
        o.kernel_online = vec!["Buffer I/O error on dev loop3, logical block 9".into()];
        assert_eq!(classify(&o).detection, [Detection::Zero]);
        let mut o = obs("corrupt");
        o.kernel_online = vec![
            "EXT4-fs error (device loop3): inode checksum invalid".into(),
            "EXT4-fs (loop3): Remounting filesystem read-only".into(),
        ];
        assert_eq!(classify(&o).detection, [Detection::Redundancy]);
    }

    #[test]
    fn an_unchanged_clean_image_after_a_failed_program_is_previous() {
        let mut o = obs("write-error");
        o.steps = vec![Step { call: "mkdir".into(), errno: Some(30), error: Some("EROFS".into()) }];
        let back = Comparison { same_as_previous: true, ..Comparison::default() };
        o.before_repair = Some(back.clone());
        o.after_repair = Some(back);
        let c = classify(&o);
        assert_eq!(c.recovery, [Recovery::Propagate, Recovery::Previous]);
        assert_eq!(c.fsck, FsckRecovery::Orig);
        assert_eq!(c.severe, None);
    }
}
