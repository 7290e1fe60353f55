//! Goal: the `flashrig` command does what the README says: the built-in default runs, the
//! effective configuration prints and reads back, simulated runs are byte-for-byte
//! reproducible, and bad input of every kind gets a message naming the problem and exit
//! status 2 without a panic.
//!
//! Method: run the real binary as a child process, as a user would, on configuration files
//! written to a scratch directory; compare exit codes, stdout, stderr and result files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{scratch, text};

fn flashrig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flashrig")).args(args).output().expect("run flashrig")
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write config");
    p
}

/// The first number after `label` in `line`, e.g. `number_after(l, "converted (")`.
fn number_after(line: &str, label: &str) -> f64 {
    let rest =
        &line[line.find(label).unwrap_or_else(|| panic!("no {label:?} in {line}")) + label.len()..];
    let n: String =
        rest.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    n.parse().unwrap_or_else(|_| panic!("no number after {label:?} in {line}"))
}

#[test]
fn the_built_in_default_runs_and_reports_the_numbers() {
    // The default is ScalaAFA 4+1 over emulated SSDs, simulated, preconditioned into its
    // conversion phase (configs/default.toml): the summary must show what the README's
    // "Reading the output" explains, and a simulated run prints the same numbers every time.
    let run = || {
        let out = flashrig(&["run"]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "stdout: {stdout}\nstderr: {}", text(&out.stderr));
        stdout
    };
    let (a, b) = std::thread::scope(|s| {
        let first = s.spawn(run);
        (run(), first.join().unwrap())
    });
    assert_eq!(a, b, "the built-in default is deterministic");
    assert!(
        a.starts_with(
            "write bs=64KiB iodepth=32 jobs=1 on scala(4+1, 64KiB) over 5 x ssd(scalaafa-femu) \
             (sim runtime, seed 42)"
        ),
        "{a}"
    );
    for needle in ["IOPS", "bandwidth", "p50", "p99 ", "p99.9", "of virtual time", "r0 ", "r1 "] {
        assert!(a.contains(needle), "missing {needle:?} in:\n{a}");
    }
    let line = |prefix: &str| {
        a.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{a}"))
    };
    assert!(number_after(line("IOPS"), "bandwidth") > 0.0, "{a}");
    // Conversions ran, in the SSDs, started because the vertical heroes ran low: the run
    // reached the conversion phase.
    let engine = line("scala:");
    let converted = number_after(engine, "scala:");
    assert!(converted > 0.0, "{engine}");
    assert_eq!(number_after(engine, "converted ("), converted, "all in the SSDs: {engine}");
    assert!(number_after(engine, "running low") > 0.0, "{engine}");
    assert_eq!(number_after(engine, "host write amplification"), 2.0, "{engine}");
    // Every member reports, and the SSDs together amplify writes (the parity they compute).
    // Their SLC caches filled during preconditioning, and `scalaafa-femu`'s cache passes what
    // it cannot take straight to MLC (docs/ssd.md, SLC cache).
    for i in 0..5 {
        let ssd = line(&format!("ssd{i}:"));
        assert!(ssd.contains("WAF device"), "{a}");
        assert!(number_after(ssd, "written past the full SLC cache") > 0.0, "{ssd}");
    }
    let ssds = line("5 SSDs together:");
    assert!(number_after(ssds, "SLC pages,") > 0.0, "dense pages (evictions): {ssds}");
    assert!(number_after(ssds, "NAND write amplification") > 1.0, "{ssds}");
}

/// A preconditioned run's layer latencies cover the measured window only (counters cover the
/// whole run): each member SSD's `write_ns` holds exactly the write commands the window sent it,
/// the difference of its `host_write_cmds` counter and the snapshot taken when preconditioning
/// ended.
#[test]
fn layer_latencies_cover_the_measured_window() {
    let d = scratch();
    let json = d.path().join("r.json");
    let out = flashrig(&["run", "--json", json.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let pre = &r["workload"]["precondition_layers"];
    let members = r["layers"]["children"].as_array().expect("members");
    assert_eq!(members.len(), 5);
    for (i, m) in members.iter().enumerate() {
        let cmds = |l: &serde_json::Value| l["counters"]["host_write_cmds"].as_u64().unwrap();
        let window = cmds(m) - cmds(&pre["children"][i]);
        assert!(window > 0, "member {i} wrote in the window");
        let lat = &m["latencies"]["write_ns"];
        assert_eq!(lat["count"].as_u64(), Some(window), "member {i}: {lat}");
        assert!(lat["p50_ns"].as_u64().unwrap() > 0, "member {i}: {lat}");
    }
}

#[test]
fn the_built_in_default_reduces_its_ssds_as_reproduce_does() {
    // configs/default.toml writes its 1/8-scale members out as numbers (the frontends cannot
    // call the lab's rules); they must stay what `flashrig reproduce` computes for its full run.
    use flashrig::config::{Config, DeviceConfig};
    use flashrig::lab::core::scale::{reduce_ssd, Mode};
    let cfg = Config::builtin();
    let DeviceConfig::Scala(sc) = &cfg.device else { panic!("{:?}", cfg.device) };
    assert_eq!((sc.k, sc.m, sc.grant_heroes), (4, 1, 1024 / Mode::Full.divisor() as usize));
    let Some(DeviceConfig::Ssd(member)) = sc.member.as_deref() else { panic!("{sc:?}") };
    let member = &member.0;
    let preset = flashrig_ssd::SsdConfig::preset("scalaafa-femu").unwrap();
    let mut reduced = preset.clone();
    reduce_ssd(&mut reduced, Mode::Full.reduction()).unwrap();
    assert_eq!(member.geometry, reduced.geometry);
    assert_eq!(member.firmware.slc_cache_bytes, reduced.firmware.slc_cache_bytes);
    assert_eq!(
        (member.firmware.gc_foreground_free_lines, member.firmware.gc_background_free_lines),
        (reduced.firmware.gc_foreground_free_lines, reduced.firmware.gc_background_free_lines)
    );
    // The erase time per programmed page is the preset's; the rest of the NAND timing is too.
    let pages_div = Mode::Full.reduction().1;
    assert_eq!(member.nand.erase_ns * pages_div, preset.nand.erase_ns);
    assert_eq!(member.nand.slc_erase_ns * pages_div, preset.nand.slc_erase_ns);
    let (mut ours, mut theirs) = (member.nand.clone(), preset.nand.clone());
    (ours.erase_ns, ours.slc_erase_ns, theirs.erase_ns, theirs.slc_erase_ns) = (0, 0, 0, 0);
    assert_eq!(ours, theirs);
    // ScalaAFA's firmware: the conversion command and the transient-aware evictor (§5.3, §5.5).
    assert!(member.firmware.vendor_convert);
    assert_eq!(member.firmware.slc_evictor, flashrig_ssd::config::EvictorPolicy::Transient);
}

#[test]
fn config_show_prints_every_default_and_reads_back() {
    let out = flashrig(&["config", "show"]);
    assert!(out.status.success());
    let shown = text(&out.stdout);
    // Defaults the built-in file does not spell out are filled in.
    for key in ["final_flush", "rwmixread", "host = ", "start = ", "md_bytes", "queue_depth"] {
        assert!(shown.contains(key), "{key} missing from:\n{shown}");
    }
    let dir = scratch();
    let p = write(dir.path(), "shown.toml", &shown);
    let again = flashrig(&["config", "show", p.to_str().unwrap()]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(text(&again.stdout), shown, "config show is a fixed point");
}

const SIM_CONFIG: &str = r#"
seed = 7
runtime = "sim"
reactors = 2

[device]
type = "stripe"
chunk = "16KiB"
width = 3
# A test's own time scale for the RAM disks (not a model of any device).
member = { type = "ram", capacity = "16MiB", latency_ns = 3000, md_bytes = 8 }

[workload]
rw = "randrw"
rwmixread = 30
bs = "8KiB"
iodepth = 8
jobs = 3
size = "2MiB"
"#;

#[test]
fn simulated_runs_are_byte_identical_for_a_seed() {
    let dir = scratch();
    let cfg = write(dir.path(), "sim.toml", SIM_CONFIG);
    let run = |seed: &str, name: &str| {
        let json = dir.path().join(name);
        let out = flashrig(&[
            "run",
            cfg.to_str().unwrap(),
            "--seed",
            seed,
            "--json",
            json.to_str().unwrap(),
            "--quiet",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(out.stdout.is_empty(), "--quiet prints nothing");
        std::fs::read(json).expect("result file")
    };
    let a = run("7", "a.json");
    let b = run("7", "b.json");
    assert_eq!(a, b, "same config and seed, different result files");
    let c = run("8", "c.json");
    assert_ne!(a, c, "another seed should change the run");
    let v: serde_json::Value = serde_json::from_slice(&a).unwrap();
    assert_eq!(v["format"], "flashrig-result");
    assert_eq!(v["version"], 1);
    assert_eq!(v["seed"], 7);
    let total = &v["workload"]["total"];
    assert_eq!(total["bytes"], 3 * 2 * 1024 * 1024, "three jobs of 2 MiB");
    assert!(total["iops"].as_f64().unwrap() > 0.0);
    // The stack's layers are in the file, top first, with their counters.
    assert_eq!(v["layers"]["kind"], "stripe");
    assert_eq!(v["layers"]["children"].as_array().unwrap().len(), 3);
    let member_writes: u64 = v["layers"]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["counters"]["write_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(member_writes, total["write_bytes"].as_u64().unwrap());
}

/// Runs flashrig on a configuration and expects exit status 2 with `needles` in stderr.
fn expect_bad_input(dir: &Path, body: &str, extra: &[&str], needles: &[&str]) {
    let cfg = write(dir, "bad.toml", body);
    let mut args = vec!["run", cfg.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = flashrig(&args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "config:\n{body}\nstderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for n in needles {
        assert!(stderr.contains(n), "expected {n:?} in: {stderr}");
    }
}

#[test]
fn bad_configurations_are_named_and_exit_2() {
    let dir = scratch();
    let d = dir.path();
    expect_bad_input(d, "seeed = 3\n", &[], &["bad.toml", "seeed"]);
    expect_bad_input(d, "[workload]\nbs = \"4 parsecs\"\n", &[], &["unknown size unit"]);
    expect_bad_input(d, "[workload\nbs = 1\n", &[], &["bad.toml", "line 1"]);
    expect_bad_input(d, "[workload]\niodepth = 0\n", &[], &["workload.iodepth"]);
    expect_bad_input(d, "[workload]\nrw = \"sideways\"\n", &[], &["sideways"]);
    expect_bad_input(d, "[workload]\njobs = 4096\niodepth = 65536\n", &[], &["in flight"]);
    expect_bad_input(d, "[workload]\nbs = \"6KiB\"\n", &[], &["workload.bs", "4096-byte block"]);
    expect_bad_input(d, "[workload]\nrange = \"8GiB\"\n", &[], &["workload.range"]);
    expect_bad_input(d, "[device]\ntype = \"floppy\"\n", &[], &["floppy"]);
    expect_bad_input(
        d,
        "[device]\ntype = \"ram\"\ncapacity = \"1000B\"\n",
        &[],
        &["device.capacity"],
    );
    expect_bad_input(
        d,
        "[device]\ntype = \"file\"\npath = \"/nonexistent-dir/x.img\"\nsize = \"1MiB\"\n",
        &[],
        &["device", "/nonexistent-dir/x.img"],
    );
    expect_bad_input(
        d,
        "[device]\ntype = \"stripe\"\nwidth = 2\nmember = { type = \"file\", path = \"same.img\", size = \"1MiB\" }\n",
        &[],
        &["{i}"],
    );
    // A time-limited run on a simulated stack that takes no time would never end.
    expect_bad_input(
        d,
        "runtime = \"sim\"\n[device]\ntype = \"ram\"\ncapacity = \"1MiB\"\n[workload]\nruntime_ms = 10\n",
        &["--runtime", "sim"],
        &["runtime_ms", "never reached"],
    );
    // A fault of the inject layer: a field of another kind, an unknown kind, an unknown key.
    let inject = "[device]\ntype = \"inject\"\nmember = { type = \"ram\", capacity = \"1MiB\" }\n";
    expect_bad_input(
        d,
        &format!("{inject}[[device.faults]]\nkind = \"lost\"\nbits = 2\n"),
        &[],
        &["device.faults[0]", "`bits` does not apply to kind = \"lost\""],
    );
    expect_bad_input(
        d,
        &format!(
            "{inject}[[device.faults]]\nkind = \"lost\"\n[[device.faults]]\nkind = \"melt\"\n"
        ),
        &[],
        &["device.faults[1]", "melt"],
    );
    expect_bad_input(
        d,
        &format!("{inject}[[device.faults]]\nkind = \"lost\"\nlbaa = 3\n"),
        &[],
        &["lbaa"],
    );
    expect_bad_input(
        d,
        &format!("{inject}[[device.faults]]\nkind = \"lost\"\nlba = 300\n"),
        &[],
        &["device", "faults[0]", "outside the device's 256 blocks"],
    );
    expect_bad_input(
        d,
        &inject.replace("type = \"inject\"\n", "type = \"inject\"\nfilesystem = \"zfs\"\n"),
        &[],
        &["device.filesystem", "zfs", "ext4"],
    );
    expect_bad_input(
        d,
        &format!("{inject}[[device.faults]]\nkind = \"lost\"\nstructure = \"inode\"\n"),
        &[],
        &["faults[0]", "structure = \"inode\" needs the layer to classify blocks"],
    );
    // Bad command-line input.
    expect_bad_input(d, "", &["--seed", "minus-one"], &["--seed"]);
    expect_bad_input(d, "", &["--json", "/nonexistent-dir/r.json"], &["--json"]);
}

#[test]
fn bad_command_lines_exit_2() {
    for args in
        [&["frobnicate"][..], &["run", "/no/such/config.toml"], &["run", "--runtime", "warp"]]
    {
        let out = flashrig(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!stderr.is_empty());
    }
    let out = flashrig(&["--help"]);
    assert!(out.status.success());
    for verb in ["run", "config", "bench"] {
        assert!(text(&out.stdout).contains(verb), "--help lists {verb}");
    }
}

#[test]
fn every_shipped_configuration_is_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let mut checked = 0;
    for dir in [root.clone(), root.join("examples"), root.join("bench")] {
        for entry in std::fs::read_dir(&dir).expect("configs directory") {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let out = flashrig(&["config", "show", path.to_str().unwrap()]);
                assert!(out.status.success(), "{}: {}", path.display(), text(&out.stderr));
                checked += 1;
            }
        }
    }
    assert!(checked >= 5, "found only {checked} configurations under {}", root.display());
}

#[test]
fn an_emulated_ssd_runs_reproducibly_and_reports_its_counters() {
    let dir = scratch();
    let cfg = write(
        dir.path(),
        "ssd.toml",
        "runtime = \"sim\"\n[device]\ntype = \"ssd\"\npreset = \"tiny\"\n\
         [device.firmware]\nover_provisioning_percent = 15.0\n\
         [workload]\nrw = \"randrw\"\nbs = \"8KiB\"\nruntime_ms = 1500\n",
    );
    let a = dir.path().join("a.json");
    let b = dir.path().join("b.json");
    for out in [&a, &b] {
        let run = flashrig(&["run", cfg.to_str().unwrap(), "--json", out.to_str().unwrap()]);
        assert!(run.status.success(), "{}", text(&run.stderr));
        assert!(text(&run.stdout).contains("ssd: WAF device"), "{}", text(&run.stdout));
    }
    let (ja, jb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert_eq!(ja, jb, "two simulated SSD runs with one seed differ");
    let v: serde_json::Value = serde_json::from_slice(&ja).unwrap();
    let layer = &v["layers"];
    assert_eq!(layer["kind"], "ssd");
    assert!(layer["counters"]["gc_lines"].as_u64().unwrap() > 0, "GC did not run: {layer}");
    assert!(layer["values"]["waf_total"].as_f64().unwrap() > 1.0);
    // The effective configuration carries the resolved preset and reads back.
    let show = flashrig(&["config", "show", cfg.to_str().unwrap()]);
    let shown = write(dir.path(), "shown.toml", &text(&show.stdout));
    let again = flashrig(&["config", "show", shown.to_str().unwrap()]);
    assert_eq!(text(&again.stdout), text(&show.stdout));
    assert!(text(&show.stdout).contains("over_provisioning_percent = 15.0"));
}

#[test]
fn bad_ssd_configurations_are_named_and_exit_2() {
    let dir = scratch();
    let d = dir.path();
    let head = "runtime = \"sim\"\n[device]\ntype = \"ssd\"\n";
    expect_bad_input(
        d,
        &format!("{head}preset = \"nope\"\n"),
        &[],
        &["unknown SSD preset", "tiny"],
    );
    expect_bad_input(
        d,
        &format!("{head}preset = \"tiny\"\n[device.geometry]\nchanels = 4\n"),
        &[],
        &["chanels"],
    );
    expect_bad_input(
        d,
        &format!("{head}preset = \"tiny\"\n[device.firmware]\nover_provisioning_percent = 2.0\n"),
        &[],
        &["over_provisioning_percent", "spare lines"],
    );
    expect_bad_input(
        d,
        &format!("{head}preset = \"tiny\"\n[device.nand]\nread_ns = [1, 2]\n"),
        &[],
        &["nand.read_ns", "3 page types"],
    );
    expect_bad_input(
        d,
        &format!("{head}preset = \"tiny\"\npayload = \"most\"\n"),
        &[],
        &["payload", "most"],
    );
}

#[test]
fn ssd_presets_are_listed_and_shown() {
    let out = flashrig(&["ssd", "presets"]);
    assert!(out.status.success());
    let list = text(&out.stdout);
    for p in [
        "tiny",
        "scalaafa-femu",
        "samsung-980pro",
        "micron-waflash",
        "p5800x",
        "p5316-qlc",
        "qlc-femu",
    ] {
        assert!(list.contains(p), "{p} missing from:\n{list}");
    }
    // Zoned presets show their zones and writable capacity.
    for p in ["tiny-zns", "zn540", "zn540x4", "p5316-zns"] {
        let line = list.lines().find(|l| l.starts_with(p)).unwrap_or_else(|| panic!("{p}"));
        assert!(line.contains(" zones of "), "{line}");
    }
    assert!(list.contains("3542 zones of 1.05 GiB"), "{list}");
    let show = flashrig(&["ssd", "show", "p5316-qlc"]);
    let shown = text(&show.stdout);
    assert!(shown.contains("iu_bytes = 65536") && shown.contains("[device.sources]"), "{shown}");
    let bad = flashrig(&["ssd", "show", "p9999"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("known presets"));
}

/// The WOM-v SSD from a run configuration (`[device.womv]`, as configs/examples/womv-qlc.toml
/// has it): the run reports its coded-page counters, and a code the cells cannot hold is
/// refused with status 2, naming the keys.
#[test]
fn a_womv_ssd_runs_from_a_configuration() {
    let dir = scratch();
    let run_cfg = |womv: &str| {
        write(
            dir.path(),
            "womv.toml",
            &format!(
                "runtime = \"sim\"\n[device]\ntype = \"ssd\"\npreset = \"qlc-femu\"\n\
                 [device.geometry]\nblocks_per_plane = 16\n[device.womv]\n{womv}\n\
                 [workload]\nrw = \"randwrite\"\nbs = \"4KiB\"\nruntime_ms = 3000\n"
            ),
        )
    };
    let cfg = run_cfg("code = \"wom-v(2,4)\"");
    let json = dir.path().join("womv.json");
    let out = flashrig(&["run", cfg.to_str().unwrap(), "--json", json.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let c = &v["layers"]["counters"];
    let programs = c["womv_page_programs"].as_u64().unwrap();
    assert!(programs > 0, "{c}");
    // The default mode reads every page it writes, and each coded page is two flash pages.
    assert_eq!(c["womv_reads_before_write"].as_u64().unwrap(), programs, "{c}");
    assert_eq!(c["nand_page_programs_qlc"].as_u64().unwrap(), 2 * programs, "{c}");
    let bad = run_cfg("code = \"wom-v(2,4)\"\nno_read = true\ngc = \"sometimes\"");
    let out = flashrig(&["run", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("sometimes"), "{}", text(&out.stderr));
}

#[test]
fn validate_womv_writes_its_report_with_a_users_code_and_refuses_bad_tables() {
    let dir = scratch();
    let out_md = dir.path().join("womv.md");
    // `flashrig validate womv --code <a file holding table>`.
    let validate = |name: &str, table: &str| {
        let code = write(dir.path(), name, table);
        flashrig(&[
            "validate",
            "womv",
            "-o",
            out_md.to_str().unwrap(),
            "--code",
            code.to_str().unwrap(),
        ])
    };
    let out = validate(
        "mine.toml",
        "name = \"mine(1,2)\"\ndata_bits = 1\nlevel_bits = 2\ndecode = [0, 1, 0, 1]\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = std::fs::read_to_string(&out_md).unwrap();
    // The user's code is there with its derived GEN_MAX (levels 0-1, 1-2, 2-3: 3 writes).
    assert!(report.contains("| mine(1,2) | 1 | 2.00x | 3 |"), "{report}");
    assert!(report.contains("| wom-v(2,4) | 2 | 2.00x | 5 |"), "{report}");
    // A level standing for a value the code has no bits for names the entry and the file.
    let out = validate(
        "bad.toml",
        "name = \"bad\"\ndata_bits = 1\nlevel_bits = 2\ndecode = [0, 1, 2, 1]\n",
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("bad.toml") && err.contains("decode[2] = 2"), "{err}");
    // An unknown key in the table, too.
    let out = validate(
        "typo.toml",
        "name = \"t\"\ndata_bits = 1\nlevel_bits = 2\ndecodes = [0, 1, 0, 1]\n",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("typo.toml"), "{}", text(&out.stderr));
}

#[test]
fn skewed_writes_amplify_less_than_uniform_ones_on_an_ssd() {
    // CSAL §6.2 writes uniform and Zipf; under greedy GC, skew concentrates invalidations in
    // hot lines, so the NAND-level write amplification must drop.
    let dir = scratch();
    let waf = |dist: &str| {
        let cfg = write(
            dir.path(),
            &format!("{}.toml", dist.replace(':', "_")),
            &format!(
                "runtime = \"sim\"\n[device]\ntype = \"ssd\"\npreset = \"tiny\"\npayload = \"none\"\n\
                 [workload]\nrw = \"randwrite\"\nruntime_ms = 12000\nstamp = false\n\
                 random_distribution = \"{dist}\"\n"
            ),
        );
        let json = dir.path().join("out.json");
        let out = flashrig(&["run", cfg.to_str().unwrap(), "--json", json.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        v["layers"]["values"]["waf_nand"].as_f64().unwrap()
    };
    let (uniform, zipf) = (waf("uniform"), waf("zipf:1.2"));
    assert!(zipf < uniform * 0.8, "zipf:1.2 WAF {zipf} vs uniform {uniform}");
    let bad = write(dir.path(), "bad.toml", "[workload]\nrandom_distribution = \"zipf:one\"\n");
    let out = flashrig(&["run", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("zipf"), "{}", text(&out.stderr));
}

#[test]
fn trace_tools_read_count_convert_and_reduce() {
    let dir = scratch();
    let d = dir.path();
    // Four MSR records (100 ns ticks): two writes of 4 KiB and 6 KiB (aligned, then not),
    // two reads of 8 KiB. Table 2 columns: 2 writes, 2 reads, 5 KiB average write, 8 KiB
    // average read; the 6 KiB write ends off every page boundary: 50% unaligned at 4 KiB.
    let good = write(
        d,
        "t.csv",
        "128166372000000000,hm,0,Write,0,4096,10\n\
         128166372000010000,hm,0,Write,8192,6144,10\n\
         128166372000020000,hm,0,Read,0,8192,10\n\
         128166372000030000,hm,0,Read,16384,8192,10\n",
    );
    let out = flashrig(&["trace", "stats", good.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &v["stats"];
    assert_eq!((s["write_count"].as_u64(), s["read_count"].as_u64()), (Some(2), Some(2)));
    assert_eq!(s["avg_write_kib"].as_f64(), Some(5.0));
    assert_eq!(s["avg_read_kib"].as_f64(), Some(8.0));
    assert_eq!(s["unaligned_write_ratio"][0].as_f64(), Some(0.5));
    assert_eq!(v["format"], "msr");
    // Their locality: start addresses 0, 8192 and 16384 (the first read starts where the first
    // write did); no request starts where the previous one of its kind ended; pages 0-5
    // touched, 0, 2 and 3 written, and of the four pages read only page 0 was written before.
    let l = &v["locality"];
    assert_eq!(l["distinct_addresses"], 3);
    assert_eq!(l["distinct_address_ratio"].as_f64(), Some(0.75));
    assert_eq!(l["reads_to_written_addresses"], 1);
    assert_eq!(
        (l["sequential_reads"].as_u64(), l["sequential_writes"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!((l["pages_touched"].as_u64(), l["pages_written"].as_u64()), (Some(6), Some(3)));
    assert_eq!(l["read_pages_written_fraction"].as_f64(), Some(0.25));

    // Convert to DiskSim and back: the same statistics.
    let ds = d.join("t.disksim");
    let out = flashrig(&[
        "trace",
        "convert",
        good.to_str().unwrap(),
        "--to",
        "disksim",
        "-o",
        ds.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let again = flashrig(&["trace", "stats", ds.to_str().unwrap(), "--json"]);
    let w: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(w["format"], "disksim");
    assert_eq!(w["stats"], v["stats"]);
    assert_eq!(w["locality"], v["locality"]);

    // A malformed line names the file and the line; --skip-bad skips and counts it.
    let bad = write(
        d,
        "bad.csv",
        "128166372000000000,hm,0,Write,0,4096,10\n128166372000010000,hm,0,Write,8192,abc,10\n",
    );
    let out = flashrig(&["trace", "stats", bad.to_str().unwrap(), "--format", "msr"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("bad.csv:2:"), "{}", text(&out.stderr));
    let out = flashrig(&[
        "trace",
        "stats",
        bad.to_str().unwrap(),
        "--format",
        "msr",
        "--skip-bad",
        "--json",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["skipped_lines"], 1);
    let out = flashrig(&["trace", "stats", good.to_str().unwrap(), "--format", "nope"]);
    assert_eq!(out.status.code(), Some(2));

    // A CSV whose header names its columns (CloudPhysics vscsi: SCSI opcodes in hex, lbn in
    // 512-byte sectors, whole-second times) is detected without --format; its 4 KiB writes
    // start at odd sectors, so every one is unaligned at 4 KiB pages (WAFLASH Fig. 1), and
    // the SYNCHRONIZE CACHE (0x35) moves no data.
    let mut cp = String::from("version,time,op,size,lbn\n");
    for i in 0..8u64 {
        cp.push_str(&format!("1,{},2a,4096,{}\n", 5633898 + i, 1 + 16 * i + 2 * (i % 2)));
    }
    cp.push_str("1,5633907,28,8192,0\n1,5633907,35,0,0\n");
    let cpf = write(d, "cloudphysics.csv", &cp);
    let out = flashrig(&["trace", "stats", cpf.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format"], "csv");
    let s = &v["stats"];
    assert_eq!((s["write_count"].as_u64(), s["read_count"].as_u64()), (Some(8), Some(1)));
    assert_eq!(s["avg_write_kib"].as_f64(), Some(4.0));
    assert_eq!(s["unaligned_write_ratio"][0].as_f64(), Some(1.0));

    // Reduction prints the thesis' r^2 check.
    let red = d.join("r.csv");
    let out = flashrig(&[
        "trace",
        "reduce",
        good.to_str().unwrap(),
        "-o",
        red.to_str().unwrap(),
        "--method",
        "subset",
        "--factor",
        "2",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("r^2"), "{}", text(&out.stdout));
}

#[test]
fn report_compares_runs_and_its_output_parses_back() {
    let dir = scratch();
    let d = dir.path();
    let mut results = Vec::new();
    for (name, dist) in [("uniform", "uniform"), ("zipf", "zipf:0.9")] {
        let cfg = write(
            d,
            &format!("{name}.toml"),
            &format!(
                "runtime = \"sim\"\n[device]\ntype = \"ssd\"\npreset = \"tiny\"\npayload = \"none\"\n\
                 [workload]\nrw = \"randrw\"\nruntime_ms = 2500\nstamp = false\n\
                 random_distribution = \"{dist}\"\n"
            ),
        );
        let json = d.join(format!("{name}.json"));
        let out = flashrig(&["run", cfg.to_str().unwrap(), "--json", json.to_str().unwrap(), "-q"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        // The time series covers every request; the CDF ends at 1.
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let t = &v["workload"]["total"];
        let series: u64 = t["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["reads"].as_u64().unwrap() + p["writes"].as_u64().unwrap())
            .sum();
        assert_eq!(series, t["ios"].as_u64().unwrap());
        assert!(t["series"].as_array().unwrap().len() >= 3, "2.5 s of virtual time: 3 points");
        let cdf = t["latency_cdf"].as_array().unwrap();
        assert_eq!(cdf.last().unwrap()[1].as_f64(), Some(1.0));
        results.push((name, json, t["ios"].as_u64().unwrap()));
    }
    let csv = d.join("r.csv");
    let series_csv = d.join("series.csv");
    let plots = d.join("plots");
    let out = flashrig(&[
        "report",
        results[0].1.to_str().unwrap(),
        results[1].1.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
        "--series-csv",
        series_csv.to_str().unwrap(),
        "--plot",
        plots.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.contains("uniform") && table.contains("zipf") && table.contains("SSD WAF"));
    // The CSV has a row for all jobs and one per job (one job here) for each run.
    let csv = std::fs::read_to_string(csv).unwrap();
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    let col = |name: &str| rows[0].iter().position(|c| *c == name).unwrap();
    assert_eq!(rows.len(), 1 + 2 * 2, "{csv}");
    for (i, (name, _, ios)) in results.iter().enumerate() {
        for (row, job) in [(rows[1 + 2 * i].clone(), "all"), (rows[2 + 2 * i].clone(), "0")] {
            assert_eq!((row[col("run")], row[col("job")]), (*name, job));
            assert_eq!(row[col("ios")].parse::<u64>().unwrap(), *ios);
        }
    }
    // The series CSV adds up to the run's requests.
    let series = std::fs::read_to_string(series_csv).unwrap();
    let mut lines = series.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(head, ["run", "job", "t_s", "reads", "writes", "bytes"]);
    for (name, _, ios) in &results {
        let sum: u64 = series
            .lines()
            .skip(1)
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|r| r[0] == *name && r[1] == "all")
            .map(|r| r[3].parse::<u64>().unwrap() + r[4].parse::<u64>().unwrap())
            .sum();
        assert_eq!(sum, *ios, "{name}");
    }
    for f in ["latency-cdf", "throughput", "iops"] {
        let svg = std::fs::read_to_string(plots.join(format!("{f}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("uniform"), "{f}");
        // The PNG is a real 800x500 PNG (signature, then the IHDR chunk's width and height).
        let png = std::fs::read(plots.join(format!("{f}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{f}.png");
        assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 800);
        assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), 500);
    }
    // A file that is not a result is named.
    let bogus = write(d, "bogus.json", "{\"hello\": 1}");
    let out = flashrig(&["report", bogus.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("bogus.json"));
}

#[test]
fn rate_limits_and_block_alignment_are_honoured() {
    let dir = scratch();
    let d = dir.path();
    let run = |name: &str, body: &str| -> serde_json::Value {
        let cfg = write(d, &format!("{name}.toml"), body);
        let json = d.join(format!("{name}.json"));
        let out = flashrig(&["run", cfg.to_str().unwrap(), "--json", json.to_str().unwrap(), "-q"]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
    };
    // 2,000 requests per second for one virtual second on a 10 us RAM disk: 2,000 requests,
    // although queue depth 32 could do 3.2 million.
    let v = run(
        "rate",
        "runtime = \"sim\"\n[device]\ntype = \"ram\"\ncapacity = \"64MiB\"\nlatency_ns = 10000\n\
         [workload]\nrw = \"randread\"\nruntime_ms = 1000\nrate_iops = 2000\n",
    );
    let ios = v["workload"]["total"]["ios"].as_u64().unwrap();
    assert!((1999..=2001).contains(&ios), "{ios} requests at 2000/s for 1 s");
    // 4 KiB writes at 512-byte alignment on a sector-addressed SSD straddle mapping units and
    // need read-modify-writes; at the default (4 KiB) alignment they need none.
    let ssd = |align: &str| {
        format!(
            "runtime = \"sim\"\n[device]\ntype = \"ssd\"\npreset = \"tiny\"\n\
             [device.firmware]\nblock_bytes = 512\n[device.geometry]\noob_bytes_per_page = 256\n\
             [workload]\nrw = \"randwrite\"\nruntime_ms = 300\n{align}"
        )
    };
    let rmw = |v: &serde_json::Value| v["layers"]["counters"]["rmw_reads"].as_u64().unwrap();
    assert_eq!(rmw(&run("aligned", &ssd(""))), 0);
    assert!(rmw(&run("unaligned", &ssd("blockalign = 512\n"))) > 0);
    let bad = write(d, "bad.toml", "[workload]\nbs = \"4KiB\"\nblockalign = \"8KiB\"\n");
    let out = flashrig(&["run", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("blockalign"));
}

#[test]
fn synthetic_traces_match_their_table_2_rows() {
    // ScalaAFA Table 2: (row, write share, avg write KB, avg read KB).
    let rows = [
        ("proxy0", 12135.4 / (12135.4 + 383.5), 4.6, 8.3),
        ("prn", 7753.0 / (7753.0 + 9066.3), 10.4, 22.5),
        ("DAP", 475.3 / (475.3 + 610.4), 97.2, 62.1),
    ];
    let dir = scratch();
    let stats = |path: &Path| -> serde_json::Value {
        let out = flashrig(&["trace", "stats", path.to_str().unwrap(), "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["stats"].clone()
    };
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/samples");
    for (row, share, wkb, rkb) in rows {
        let generated = dir.path().join(format!("{row}.csv"));
        let out = flashrig(&[
            "trace",
            "synth",
            "--like",
            row,
            "--requests",
            "50000",
            "-o",
            generated.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        // 50,000 requests: tight; the committed 2,000-request samples: loose.
        for (path, tol) in [(generated, 0.03), (samples.join(format!("{row}-synth.csv")), 0.10)] {
            let s = stats(&path);
            let (w, r) = (s["write_count"].as_f64().unwrap(), s["read_count"].as_f64().unwrap());
            assert!(
                (w / (w + r) - share).abs() < tol,
                "{}: write share {}",
                path.display(),
                w / (w + r)
            );
            for (got, want) in [
                (s["avg_write_kib"].as_f64().unwrap(), wkb),
                (s["avg_read_kib"].as_f64().unwrap(), rkb),
            ] {
                assert!(
                    (got / want - 1.0).abs() < tol.max(0.03) * 2.0,
                    "{}: {got} vs {want}",
                    path.display()
                );
            }
        }
    }
    let out = flashrig(&[
        "trace",
        "synth",
        "--like",
        "nope",
        "-o",
        dir.path().join("x").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("Table 2"));
}

#[test]
fn synthetic_traces_have_published_locality_unless_told_otherwise() {
    // `--locality published` (the default) gives a stand-in the working set published for its
    // trace: prn revisits its addresses (0.1715 distinct start addresses per request,
    // docs/traces.md), where `none` draws offsets uniformly over 16 GiB and almost never
    // repeats one. Both draw the same times, kinds and sizes, so Table 2's columns agree.
    let dir = scratch();
    let synth = |extra: &[&str], name: &str| -> PathBuf {
        let path = dir.path().join(name);
        let mut args = vec![
            "trace",
            "synth",
            "--like",
            "prn",
            "--requests",
            "20000",
            "-o",
            path.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = flashrig(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        path
    };
    let stats = |path: &Path| -> serde_json::Value {
        let out = flashrig(&["trace", "stats", path.to_str().unwrap(), "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let default = synth(&[], "default.csv");
    let published = synth(&["--locality", "published"], "published.csv");
    let none = synth(&["--locality", "none"], "none.csv");
    assert_eq!(std::fs::read(&default).unwrap(), std::fs::read(&published).unwrap());
    let (p, n) = (stats(&published), stats(&none));
    assert_eq!(p["stats"]["write_count"], n["stats"]["write_count"]);
    assert_eq!(p["stats"]["avg_write_kib"], n["stats"]["avg_write_kib"]);
    assert_eq!(p["stats"]["avg_read_kib"], n["stats"]["avg_read_kib"]);
    let ratio = |v: &serde_json::Value, key: &str| v["locality"][key].as_f64().unwrap();
    let (pd, nd) = (ratio(&p, "distinct_address_ratio"), ratio(&n, "distinct_address_ratio"));
    assert!((pd - 0.1715).abs() < 0.01, "published: {pd} distinct addresses per request");
    assert!(nd > 0.99, "none: {nd} distinct addresses per request");
    // Fewer distinct pages written per byte written: a working set, overwritten.
    let (pw, nw) = (ratio(&p, "written_footprint_ratio"), ratio(&n, "written_footprint_ratio"));
    assert!(pw < nw / 2.0, "written footprint: published {pw}, none {nw}");
    // The text form says it too.
    let out = flashrig(&["trace", "stats", published.to_str().unwrap()]);
    assert!(text(&out.stdout).contains("distinct addresses per request"), "{}", text(&out.stdout));

    // The committed samples are the first version's output, `--locality none`, byte for byte.
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/samples");
    for row in ["proxy0", "prn", "DAP"] {
        let path = dir.path().join(format!("{row}-none.csv"));
        let out = flashrig(&[
            "trace",
            "synth",
            "--like",
            row,
            "--requests",
            "2000",
            "--locality",
            "none",
            "-o",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let committed = samples.join(format!("{row}-synth.csv"));
        assert!(
            std::fs::read(&path).unwrap() == std::fs::read(&committed).unwrap(),
            "{} is not `--locality none` output",
            committed.display()
        );
    }

    // A value that is neither names the flag and the choices, with exit status 2.
    let out = flashrig(&[
        "trace",
        "synth",
        "--like",
        "prn",
        "--locality",
        "sparse",
        "-o",
        dir.path().join("x.csv").to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for needle in ["--locality sparse", "published", "none"] {
        assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
    }
    assert!(!dir.path().join("x.csv").exists(), "nothing written for a bad option");
}

/// Runs flashrig with `args` and expects exit status 2, no panic, and `needles` in stderr.
fn expect_exit_2(args: &[&str], needles: &[&str]) {
    let out = flashrig(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}\nstderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{args:?}: expected {n:?} in: {stderr}");
    }
}

#[test]
fn bad_trace_input_is_named_and_exits_2() {
    // Issue 17, items 1-3 and 5: each used to panic, pass, or blame the wrong thing.
    let dir = scratch();
    let d = dir.path();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    // A request count that cannot be allocated is refused before anything is made.
    let out = d.join("synth.csv");
    expect_exit_2(
        &["trace", "synth", "--like", "prn", "--requests", "18446744073709551615", "-o", &s(&out)],
        &["--requests 18446744073709551615", "at most 1000000000"],
    );
    // An offset of 2^64 - 1: offset + size would wrap.
    let big = write(
        d,
        "big.csv",
        "128166372000000000,hm,0,Write,0,4096,10\n\
         128166372000010000,hm,0,Write,18446744073709551615,4096,10\n",
    );
    expect_exit_2(&["trace", "stats", &s(&big)], &["big.csv:2: Offset + Size overflows"]);
    let cfg = write(
        d,
        "replay.toml",
        &format!(
            "[device]\ntype = \"ram\"\ncapacity = \"64MiB\"\n[replay]\ntrace = \"{}\"\n",
            s(&big)
        ),
    );
    expect_exit_2(&["run", &s(&cfg)], &["big.csv:2: Offset + Size overflows"]);
    // A bad third line does not hide the format: the error names it.
    let bad3 = write(
        d,
        "bad3.csv",
        "128166372000000000,hm,0,Write,0,4096,10\n\
         128166372000010000,hm,0,Write,4096,4096,10\n\
         128166372000020000,hm,0,Write,abc,4096,10\n",
    );
    expect_exit_2(&["trace", "stats", &s(&bad3)], &["bad3.csv:3: Offset `abc` is not a number"]);
    // A format none of the file's lines is in is an error, not zero requests.
    let good = write(d, "good.csv", "128166372000000000,hm,0,Write,0,4096,10\n");
    expect_exit_2(
        &["trace", "stats", &s(&good), "--format", "blkparse"],
        &["good.csv:1: no line reads as a blkparse trace"],
    );
    // A short MSR line says it is short, and how short.
    let short = write(d, "short.csv", "128166372000000000,hm,0\n");
    expect_exit_2(
        &["trace", "stats", &s(&short), "--format", "msr"],
        &["short.csv:1: too few fields: 3"],
    );
}

#[test]
fn bad_configuration_values_name_key_and_line_and_exit_2() {
    // Issue 17, items 4-6.
    let dir = scratch();
    let d = dir.path();
    expect_bad_input(
        d,
        "seed = 1\n\n[device]\ntype = \"raid\"\nk = \"four\"\nm = 1\n\
         member = { type = \"ram\", capacity = \"64MiB\" }\n",
        &[],
        &["bad.toml", "device.k (line 5, column 5)"],
    );
    expect_bad_input(
        d,
        "[device]\ntype = \"ram\"\ncapacity = \"99999999TiB\"\n",
        &[],
        &["device.capacity (line 3", "too large"],
    );
    let job = write(d, "job.fio", "[job]\nrw=randread\nnumjobs=99999999999\n");
    expect_bad_input(
        d,
        "[device]\ntype = \"ram\"\ncapacity = \"64MiB\"\n",
        &["--fio", job.to_str().unwrap()],
        &["job.fio:3: numjobs: 99999999999: must be between 1 and 4096"],
    );
    expect_bad_input(
        d,
        "[device]\ntype = \"stripe\"\nchunk = \"1GiB\"\nwidth = 2\n\
         member = { type = \"ram\", capacity = \"64MiB\" }\n",
        &[],
        &["device.chunk = 1GiB (262144 blocks) is larger than member device.members[0] `ram0` (16384 blocks"],
    );
    // A file member that cannot be made at its size (2^63 bytes) leaves no file behind.
    let img = d.join("huge.img");
    expect_bad_input(
        d,
        &format!(
            "[device]\ntype = \"file\"\npath = \"{}\"\nsize = 9223372036854775808\n",
            img.display()
        ),
        &[],
        &["huge.img", "set_len"],
    );
    assert!(!img.exists(), "the file it created is removed");
}

#[test]
fn help_lists_every_command_without_promises() {
    let out = flashrig(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    assert!(!help.contains("later"), "emulated SSDs are here: {help}");
    assert!(help.contains("\n  debug "), "the README uses `flashrig debug`: {help}");
}

/// The `inject` layer in a user's run: its log file holds one JSON line per injection, as many
/// as the result's inject layer counts, and the same seed gives the same log.
#[test]
fn an_inject_run_logs_every_injection_and_repeats_under_its_seed() {
    let dir = scratch();
    let run = |name: &str| {
        let log = dir.path().join(format!("{name}.jsonl"));
        let body = format!(
            "seed = 1\nruntime = \"sim\"\n[device]\ntype = \"inject\"\nseed = 3\nlog = {:?}\n\
             member = {{ type = \"ssd\", preset = \"tiny\", payload = \"full\" }}\n\
             [[device.faults]]\nkind = \"corrupt\"\nprobability = 0.05\n\
             [[device.faults]]\nkind = \"lost\"\nops = \"write\"\nlba = 7\nnth = 2\n\
             [workload]\nrw = \"randrw\"\nbs = \"4KiB\"\niodepth = 8\nrange = \"64KiB\"\nsize = \"4MiB\"\n",
            log.to_str().unwrap()
        );
        let cfg = write(dir.path(), &format!("{name}.toml"), &body);
        let json = dir.path().join(format!("{name}.json"));
        let out = flashrig(&["run", cfg.to_str().unwrap(), "--json", json.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains("faults injected"), "{}", text(&out.stdout));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
        assert_eq!(v["layers"]["kind"], "inject");
        let counted = v["layers"]["counters"]["injections"].as_u64().unwrap();
        let lines = std::fs::read_to_string(log).unwrap();
        assert_eq!(lines.lines().count() as u64, counted, "{lines}");
        assert!(lines.lines().any(|l| l.contains("\"kind\":\"lost\"") && l.contains("\"lba\":7")));
        assert!(counted > 1, "{lines}");
        lines
    };
    assert_eq!(run("a"), run("b"), "the same seeds injected different faults");
}
