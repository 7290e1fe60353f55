//! Goal: every input kind flashrig parses — run configurations and experiment files, SSD
//! tables, block traces of every format, fio job files, an NBD client's byte stream, the
//! members of `scala` and `twophase` arrays, emulated SSDs' image files, and WOM-v code tables
//! — gives a result or a typed error, never a panic or a hang, on the fuzzing corpora and on
//! seeded mutations of them, in a plain `cargo test` on the stable toolchain (libFuzzer itself
//! needs `cargo fuzz`; docs/fuzzing.md). Every input a fuzzer found a bug with is in its
//! corpus, so this test is also the regression test of those bugs.
//!
//! Method: for each target of `flashrig-fuzz-targets` (the same functions the cargo-fuzz
//! targets in `fuzz/fuzz_targets/` call), every file of `fuzz/corpus/<target>/` is run, then
//! a number of deterministic mutations (`flashrig_fuzz_targets::mutate`, seeded from
//! `flashrig_check::seeds`: `FLASHRIG_SEED=n` reruns one, `FLASHRIG_CASES=n` runs more) of
//! corpus files chosen by the seed. A failure names the target, the corpus file or the seed,
//! saves the input to the temporary directory for `cargo fuzz run <target> <file>`, and
//! repeats the target's panic message. A watchdog aborts the process, naming the target and
//! the input, if one input runs for more than [`STUCK`] (a hang the targets' own limits did
//! not catch). Also checked: the generated seeds are real (the SSD images start and read back
//! without an error), and the mutator is deterministic.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flashrig_check::seeds;
use flashrig_fuzz_targets::mutate::mutate;
use flashrig_fuzz_targets::{known, nbd, ssd_image, target, TARGETS};

/// Longest one input may run before the watchdog calls it stuck.
const STUCK: Duration = Duration::from_secs(120);

fn corpus_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(name)
}

/// The corpus of `name`: (file name, contents), in file-name order.
fn corpus(name: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(name);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.expect("a directory entry").path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        })
        .collect();
    files.sort();
    files
}

fn message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(a panic without a message)".into())
}

/// Aborts the process when the input it was last told about runs for more than [`STUCK`].
struct Watchdog {
    current: Arc<Mutex<(String, Instant)>>,
    done: Arc<AtomicBool>,
}

impl Watchdog {
    fn start(target: &str) -> Watchdog {
        let current = Arc::new(Mutex::new((String::new(), Instant::now())));
        let done = Arc::new(AtomicBool::new(false));
        let (c, d, t) = (current.clone(), done.clone(), target.to_string());
        std::thread::spawn(move || {
            while !d.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(200));
                let (what, since) = c.lock().unwrap().clone();
                if since.elapsed() > STUCK && !d.load(Ordering::Acquire) {
                    eprintln!("{t}: {what} runs for more than {STUCK:?} (a hang); aborting");
                    std::process::abort();
                }
            }
        });
        Watchdog { current, done }
    }

    fn now(&self, what: String) {
        *self.current.lock().unwrap() = (what, Instant::now());
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
    }
}

/// Runs every corpus file of `name` and `mutations` seeded mutations of them.
fn replay(name: &str, mutations: u64) {
    let f = target(name).unwrap_or_else(|| panic!("no target {name}"));
    let files = corpus(name);
    assert!(!files.is_empty(), "the corpus of {name} is empty");
    let dog = Watchdog::start(name);
    let t0 = Instant::now();
    for (file, data) in &files {
        dog.now(format!("corpus file {file}"));
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(data))) {
            panic!("{name}: corpus file {file} fails: {}", message(p.as_ref()));
        }
    }
    let inputs: Vec<Vec<u8>> = files.iter().map(|(_, d)| d.clone()).collect();
    // As libFuzzer's -max_len: the largest seed, and at least 4 KiB.
    let max_len = inputs.iter().map(Vec::len).max().unwrap_or(0).max(4096) + 64;
    for seed in seeds(1, mutations) {
        let i = (seed % inputs.len() as u64) as usize;
        let input = mutate(seed, &inputs[i], &inputs, max_len);
        dog.now(format!("mutation {seed} of {} (reproduce with FLASHRIG_SEED={seed})", files[i].0));
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(&input))) {
            let saved = std::env::temp_dir().join(format!("flashrig-fuzz-{name}-seed-{seed}"));
            let _ = std::fs::write(&saved, &input);
            panic!(
                "{name}: mutation {seed} of corpus file {} fails: {}; the input is saved as {} \
                 (reproduce with FLASHRIG_SEED={seed})",
                files[i].0,
                message(p.as_ref()),
                saved.display()
            );
        }
    }
    let known: Vec<String> = known::hits()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(id, n)| format!("{id} x{n}"))
        .collect();
    eprintln!(
        "{name}: {} corpus files and {mutations} mutations in {:.1} s; known open bugs hit so \
         far in this process (any target): {}",
        files.len(),
        t0.elapsed().as_secs_f64(),
        if known.is_empty() { "none".to_string() } else { known.join(", ") }
    );
}

#[test]
fn config_toml_corpus_and_mutations() {
    replay("config_toml", 10000);
}

#[test]
fn ssd_config_corpus_and_mutations() {
    replay("ssd_config", 5000);
}

#[test]
fn trace_corpus_and_mutations() {
    replay("trace", 20000);
}

#[test]
fn fiojob_corpus_and_mutations() {
    replay("fiojob", 20000);
}

#[test]
fn nbd_corpus_and_mutations() {
    replay("nbd", 2000);
}

#[test]
fn scala_open_corpus_and_mutations() {
    replay("scala_open", 2000);
}

#[test]
fn twophase_open_corpus_and_mutations() {
    replay("twophase_open", 2000);
}

#[test]
fn ssd_image_corpus_and_mutations() {
    replay("ssd_image", 2000);
}

#[test]
fn womv_code_corpus_and_mutations() {
    replay("womv_code", 5000);
}

#[test]
fn every_target_has_a_corpus_and_a_cargo_fuzz_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    for (name, _) in TARGETS {
        assert!(!corpus(name).is_empty(), "{name}: empty corpus");
        let t = root.join("fuzz_targets").join(format!("{name}.rs"));
        let src = std::fs::read_to_string(&t).unwrap_or_else(|e| panic!("{}: {e}", t.display()));
        assert!(
            src.contains(&format!("flashrig_fuzz_targets::target(\"{name}\")")),
            "{}",
            t.display()
        );
    }
}

#[test]
fn the_ssd_image_seeds_are_real_images() {
    for (file, data) in corpus("ssd_image") {
        if file.starts_with("run-") {
            ssd_image::starts_cleanly(&data).unwrap_or_else(|e| panic!("{file}: {e}"));
        }
    }
}

/// Writes the seeds that are made by code rather than copied from the repository: NBD
/// sessions, the image selectors of `scala_open` and `twophase_open` (with a few patches),
/// and SSD images made by short runs. Run by hand after a format changes:
/// `cargo test -p flashrig-fuzz-targets --test corpus -- --ignored write_generated_seeds`.
#[test]
#[ignore]
fn write_generated_seeds() {
    use flashrig_serve::nbd::proto::*;
    use rand_core::{Rng, SeedableRng};
    use rand_xoshiro::Xoshiro256PlusPlus;
    let put = |target: &str, file: &str, data: &[u8]| {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), data).unwrap();
    };
    let go = |name: &[u8], infos: &[u16]| {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name);
        d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            d.extend_from_slice(&i.to_be_bytes());
        }
        d
    };
    let meta = |queries: &[&[u8]]| {
        let mut d = 0u32.to_be_bytes().to_vec();
        d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in queries {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q);
        }
        d
    };
    let with = |sel: u8, s: Vec<u8>| [vec![sel], s].concat();
    let block = vec![0xabu8; 4096];
    let all_commands = vec![
        (0, CMD_WRITE, 0, 4096, block.clone()),
        (CMD_FLAG_FUA, CMD_WRITE, 6000, 100, vec![7u8; 100]),
        (0, CMD_READ, 0, 8192, vec![]),
        (0, CMD_READ, 4090, 12, vec![]),
        (0, CMD_FLUSH, 0, 0, vec![]),
        (0, CMD_TRIM, 4096, 8192, vec![]),
        (0, CMD_WRITE_ZEROES, 100, 5000, vec![]),
        (CMD_FLAG_NO_HOLE, CMD_WRITE_ZEROES, 0, 4096, vec![]),
        (0, CMD_CACHE, 0, 65536, vec![]),
        (0, CMD_BLOCK_STATUS, 0, 65536, vec![]),
        (0, CMD_READ, 65536, 4096, vec![]),
        (0, 99, 0, 0, vec![]),
        (0, CMD_DISC, 0, 0, vec![]),
    ];
    put(
        "nbd",
        "go-simple-commands",
        &with(0, nbd::stream(&[(OPT_GO, go(b"", &[]))], &all_commands)),
    );
    put(
        "nbd",
        "go-structured-meta-commands",
        &with(
            0,
            nbd::stream(
                &[
                    (OPT_STRUCTURED_REPLY, vec![]),
                    (OPT_LIST_META_CONTEXT, meta(&[b"base:"])),
                    (OPT_SET_META_CONTEXT, meta(&[b"base:allocation"])),
                    (OPT_INFO, go(b"fuzz", &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE])),
                    (OPT_GO, go(b"fuzz", &[INFO_BLOCK_SIZE])),
                ],
                &all_commands,
            ),
        ),
    );
    put(
        "nbd",
        "read-only-writes-refused",
        &with(1, nbd::stream(&[(OPT_EXPORT_NAME, b"fuzz".to_vec())], &all_commands[..6])),
    );
    put(
        "nbd",
        "options-then-abort",
        &with(
            0,
            nbd::stream(
                &[
                    (OPT_LIST, vec![]),
                    (OPT_STARTTLS, vec![]),
                    (OPT_INFO, go(b"nope", &[])),
                    (OPT_SET_META_CONTEXT, meta(&[b"base:allocation"])),
                    (42, vec![1, 2, 3]),
                    (OPT_ABORT, vec![]),
                ],
                &[],
            ),
        ),
    );
    // A write whose payload never comes, and a request cut short.
    let mut cut = nbd::stream(&[(OPT_GO, go(b"", &[]))], &[(0, CMD_WRITE, 0, 65536, vec![1; 300])]);
    cut.extend_from_slice(&REQUEST_MAGIC.to_be_bytes()[..3]);
    put("nbd", "payload-cut-short", &with(0, cut));

    // scala_open and twophase_open: each image as made, and a few patches.
    for (target, images) in [("scala_open", 2u8), ("twophase_open", 2)] {
        for i in 0..images {
            put(target, &format!("image-{i}"), &[i]);
        }
        // Overwrite the first block's first bytes, flip a metadata byte of a written block,
        // copy one block over another, zero a run of metadata.
        put(
            target,
            "patch-overwrite-first-block",
            &[0, 8, 0, 0, 0, 0, 0, 8, b'F', b'R', b'S', b'C', b'A', b'L', b'A', b'9'],
        );
        put(target, "patch-xor-metadata", &[1, 1 | 4, 1, 5, 0, 4, 0, 4, 0xff, 0x00, 0x10, 0x01]);
        put(target, "patch-copy-block", &[0, 3, 2, 7, 0, 0, 0, 0, 9, 0]);
        put(target, "patch-fill-metadata", &[1, 2 | 4, 0, 3, 0, 0, 0, 16, 0xee]);
        // Many small patches at once: metadata bytes set, data bytes flipped, blocks copied.
        for (image, seed) in [(0u8, 1u64), (1, 2)] {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            let mut input = vec![image];
            for _ in 0..40 {
                let op = (rng.next_u32() % 16) as u8;
                let [l0, l1, o0, o1, ..] = rng.next_u32().to_le_bytes();
                let len = 1 + (rng.next_u32() % 8) as u8;
                input.extend_from_slice(&[op, (rng.next_u32() % 3) as u8, l0, l1, o0, o1, len]);
                let payload = match op & 3 {
                    3 => 2,
                    2 => 1,
                    _ => len as usize,
                };
                input.extend((0..payload).map(|_| rng.next_u32() as u8));
            }
            put(target, &format!("patch-many-image-{image}"), &input);
        }
    }

    // ssd_image: images after short runs, cut off by a power failure.
    for v in 0..ssd_image::VARIANTS {
        for (seed, ops) in [(1u64, 60usize), (2, 400)] {
            put(
                "ssd_image",
                &format!("run-device{v}-seed{seed}"),
                &ssd_image::make_input(v, seed, ops),
            );
        }
    }
}
