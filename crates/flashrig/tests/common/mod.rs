//! Helpers shared by the `flashrig` crate's integration tests: scratch directories, process
//! output as text, and finding the external tools a test drives (so it can skip, saying why,
//! where one is missing). Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

use std::path::PathBuf;

/// A fresh directory under cargo's target tmpdir, removed when dropped.
pub fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch directory")
}

/// A process's output as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The full path of `tool`, looked up in PATH and the sbin directories (root's tools).
pub fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Whether `tool` is installed.
pub fn have(tool: &str) -> bool {
    find_tool(tool).is_some()
}

/// Every result file (`*.json`) in `dir`, by file name, for byte-for-byte comparisons.
#[allow(dead_code)]
pub fn result_files(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("the results folder")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect()
}
