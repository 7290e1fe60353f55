//! Detects Intel ISA-L (libisal) and, when found, links it and sets `cfg(has_isal)`.
//!
//! Order of detection:
//! 1. `FLASHRIG_NO_ISAL` set to anything but "" or "0": no ISA-L, the pure-Rust backend only.
//! 2. `ISAL_LIB_DIR` set: that directory must hold `libisal.so` or `libisal.a`.
//! 3. `pkg-config --exists libisal` (Debian's libisal-dev ships `libisal.pc`).
//! 4. `libisal.so` / `libisal.a` in the standard library directories.
//!
//! Only the link-time library is needed: the FFI declarations are written by hand in
//! src/isal.rs, so no headers and no bindgen. A runtime-only `libisal.so.2` without the dev
//! symlink is not enough to link, so it does not count. When cross-compiling, steps 3 and 4 are
//! skipped (they describe the host), so only `ISAL_LIB_DIR` enables ISA-L.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(has_isal)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=FLASHRIG_NO_ISAL");
    println!("cargo::rerun-if-env-changed=ISAL_LIB_DIR");
    println!("cargo::rerun-if-env-changed=PKG_CONFIG_PATH");

    match detect() {
        Some(found) => {
            for dir in &found.search_dirs {
                println!("cargo::rustc-link-search=native={}", dir.display());
            }
            println!("cargo::rustc-link-lib=isal");
            println!("cargo::rustc-cfg=has_isal");
            println!("cargo::rustc-env=FLASHRIG_ISAL_FOUND_BY={}", found.how);
        }
        None => println!("cargo::rustc-env=FLASHRIG_ISAL_FOUND_BY="),
    }
}

struct Found {
    how: &'static str,
    search_dirs: Vec<PathBuf>,
}

fn detect() -> Option<Found> {
    if env::var("FLASHRIG_NO_ISAL").is_ok_and(|v| !v.is_empty() && v != "0") {
        return None;
    }
    if let Some(dir) = env::var_os("ISAL_LIB_DIR") {
        let dir = PathBuf::from(dir);
        if has_lib(&dir) {
            return Some(Found { how: "ISAL_LIB_DIR", search_dirs: vec![dir] });
        }
        println!(
            "cargo::warning=ISAL_LIB_DIR={} holds no libisal.so or libisal.a; \
             building the pure-Rust erasure backend only",
            dir.display()
        );
        return None;
    }
    let cross = env::var("TARGET").ok() != env::var("HOST").ok();
    if cross {
        return None;
    }
    if let Some(dirs) = pkg_config() {
        return Some(Found { how: "pkg-config", search_dirs: dirs });
    }
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/lib/{arch}-linux-gnu");
    let standard = [
        multiarch.as_str(),
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/lib64",
        "/usr/local/lib",
        "/opt/homebrew/lib",
    ];
    standard
        .iter()
        .map(Path::new)
        .find(|dir| has_lib(dir))
        .map(|dir| Found { how: "library directory", search_dirs: vec![dir.to_path_buf()] })
}

fn has_lib(dir: &Path) -> bool {
    ["libisal.so", "libisal.a", "libisal.dylib"].iter().any(|name| dir.join(name).exists())
}

/// `Some(extra search directories)` when pkg-config knows libisal.
fn pkg_config() -> Option<Vec<PathBuf>> {
    let exists = Command::new("pkg-config").args(["--exists", "libisal"]).status().ok()?;
    if !exists.success() {
        return None;
    }
    let out = Command::new("pkg-config").args(["--libs-only-L", "libisal"]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.split_whitespace()
            .filter_map(|flag| flag.strip_prefix("-L"))
            .map(PathBuf::from)
            .collect(),
    )
}
