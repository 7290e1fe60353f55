//! Bugs the fuzzers found in crates this fuzzing work leaves to their owners (`crates/ssd`,
//! `crates/engines`): reported with a reproducing input, not fixed here. While one is open its
//! panic would stop every fuzzing run at the first input that reaches it and fail the stable
//! replay test on any mutation that does, so the targets run code of those crates inside
//! [`guard`], which lets a panic that matches an entry of [`KNOWN`] (the file it is raised in
//! and its message) end the input quietly, and passes every other panic on. When a bug is
//! fixed, its entry goes, and its reproducer joins the target's corpus as the regression test.
//! docs/fuzzing.md lists them with their inputs; [`ENV_OFF`] shows them.

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};

/// An open bug: where its panic is raised and what it says.
pub struct KnownBug {
    /// A short name, as docs/fuzzing.md lists it.
    pub id: &'static str,
    /// The end of the path of the file that panics.
    pub file: &'static str,
    /// A part of the panic message.
    pub message: &'static str,
    /// How it is reached.
    pub what: &'static str,
}

/// The open bugs.
pub const KNOWN: &[KnownBug] = &[
    // None open. The four `crates/ssd` bugs found first (geometry counts multiplied before
    // validation; an image's unit numbers, sequence numbers and line generations taken
    // unchecked) are fixed, and their reproducers are in the corpora (`bug-*`).
];

/// How many inputs ended in each known bug (by index in [`KNOWN`]), for reports.
static HITS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
const _: () = assert!(KNOWN.len() <= 8);

thread_local! {
    /// Inside [`guard`] on this thread.
    static GUARDED: Cell<bool> = const { Cell::new(false) };
    /// The known bug the first panic inside the current guard matched, if any (`Some(None)`:
    /// a panic that matched none).
    static FIRST: RefCell<Option<Option<usize>>> = const { RefCell::new(None) };
}

/// Set to anything, `FLASHRIG_FUZZ_KNOWN_PANIC` turns the guard off, so that a known bug's
/// reproducer panics as it would without this module (to check a fix, or to see the bug).
pub const ENV_OFF: &str = "FLASHRIG_FUZZ_KNOWN_PANIC";

fn matching(file: &str, message: &str) -> Option<usize> {
    static OFF: OnceLock<bool> = OnceLock::new();
    if *OFF.get_or_init(|| std::env::var_os(ENV_OFF).is_some()) {
        return None;
    }
    KNOWN.iter().position(|k| file.ends_with(k.file) && message.contains(k.message))
}

fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.get() {
                let file = info.location().map(|l| l.file()).unwrap_or("");
                let msg = info.payload_as_str().unwrap_or("");
                let first = FIRST.with_borrow_mut(|f| *f.get_or_insert(matching(file, msg)));
                if first.is_some() {
                    // A known bug: no report, and no abort (libFuzzer's hook aborts).
                    return;
                }
            }
            previous(info);
        }));
    });
}

/// Runs `f`; `None` when it panicked with a known bug, which is counted. Any other panic goes
/// on as it came.
pub fn guard<T>(f: impl FnOnce() -> T) -> Option<T> {
    install();
    let outer = GUARDED.replace(true);
    let saved = FIRST.take();
    let r = catch_unwind(AssertUnwindSafe(f));
    let first = FIRST.replace(saved);
    GUARDED.set(outer);
    match r {
        Ok(v) => Some(v),
        Err(p) => match first {
            Some(Some(i)) => {
                HITS[i].fetch_add(1, Ordering::Relaxed);
                None
            }
            _ => resume_unwind(p),
        },
    }
}

/// Inputs that ended in each known bug so far: (id, count).
pub fn hits() -> Vec<(&'static str, u64)> {
    KNOWN.iter().zip(&HITS).map(|(k, h)| (k.id, h.load(Ordering::Relaxed))).collect()
}
