//! The fuzz targets of flashrig, one function per kind of input flashrig reads, so that the
//! same code runs under libFuzzer (`fuzz/`, `cargo fuzz run <target>`) and in the stable test
//! that replays the committed corpora and seeded mutations of them
//! (`tests/corpus.rs`, part of `cargo test --workspace`). docs/fuzzing.md has the how and why.
//!
//! The rule every target checks: any input gives `Ok` or a typed error, never a panic or a
//! hang. Some targets check more where the input allows an exact answer: a configuration that
//! loads prints (`config show`) as TOML that loads back to the same configuration; a trace
//! written back out by `flashrig trace convert` reads back as the same requests; an NBD server
//! still serves a well-behaved client after any byte stream; an unmodified member image
//! opens. A target reports a broken rule by panicking with what was broken.
//!
//! | target | input | entry point |
//! |---|---|---|
//! | `config_toml` | a run configuration | [`text::config_toml`] |
//! | `ssd_config` | an SSD table (preset + overrides) | [`text::ssd_config`] |
//! | `trace` | a block trace of any format, or detection | [`text::trace`] |
//! | `fiojob` | an fio job file | [`text::fiojob`] |
//! | `nbd` | a client's byte stream to the NBD server | [`nbd::session`] |
//! | `scala_open` | patches to `scala` members, then recovery | [`members::scala_open`] |
//! | `twophase_open` | patches to `twophase` members, then recovery | [`members::twophase_open`] |
//! | `ssd_image` | an emulated SSD's NAND image file (and trim sidecar) | [`ssd_image::start`] |

pub mod known;
pub mod members;
pub mod mutate;
pub mod nbd;
pub mod ssd_image;
pub mod text;

/// A target: it takes any bytes, and panics only when it found a bug.
pub type Target = fn(&[u8]);

/// Every target: (name, as in `fuzz/fuzz_targets/<name>.rs` and `fuzz/corpus/<name>/`;
/// function).
pub const TARGETS: &[(&str, Target)] = &[
    ("config_toml", text::config_toml),
    ("ssd_config", text::ssd_config),
    ("trace", text::trace),
    ("fiojob", text::fiojob),
    ("nbd", nbd::session),
    ("scala_open", members::scala_open),
    ("twophase_open", members::twophase_open),
    ("ssd_image", ssd_image::start),
    ("womv_code", text::womv_code),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}
