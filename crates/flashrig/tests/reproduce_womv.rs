//! Goal: `flashrig reproduce womv` writes a document with a section per figure of the thesis'
//! WOM-v evaluation (§3.7: Figs. 3.7a-3.14 and §3.7.12's models against the traces), each carrying a comparison table (the thesis'
//! number or "direction only", ours, the direction and a why where they disagree) and the
//! setup's table of traces; no run fails; the same document and byte-identical result files
//! come out with one worker thread and with two; and a dumped run configuration runs alone.
//!
//! Method: run the real binary with the hidden `--smoke` flag (every figure, the smallest
//! drives and traces) twice, with `-j 1` and `-j 2`, each in a scratch directory, the real
//! trace slices read from `../shared/traces` (when that folder is missing the stand-ins run
//! alone, and the document says so). Read the first document's sections and tables; compare
//! the two line by line except the line that states the wall time, and every result file byte
//! for byte. No timing or thesis-agreement assertion: a smoke run is not a reproduction.

mod common;
use common::{assert_same_reproduction, comparison_rows, reproduce_smoke_twice, scratch, text};

const OUT: &str = "reproduce-results/womv-smoke";

fn traces_dir() -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces");
    if !std::path::Path::new(dir).join("MANIFEST.txt").exists() {
        eprintln!("no real traces at {dir}: the smoke run replays the stand-ins alone");
    }
    dir.to_string()
}

#[test]
fn reproduce_womv_smoke_writes_every_figure_and_is_deterministic() {
    let (one, two) = (scratch(), scratch());
    let traces = traces_dir();
    reproduce_smoke_twice(one.path(), two.path(), "womv", &["--traces", &traces]);
    let doc_path = one.path().join(OUT).join("reproduce-womv.md");
    let doc = std::fs::read_to_string(&doc_path).expect("the document");
    assert!(!doc.contains("## Runs that failed"), "{doc}");
    let sections: Vec<&str> = doc.split("\n## ").collect();
    for fig in [
        "Fig. 3.7a:",
        "Fig. 3.7b:",
        "Fig. 3.9:",
        "Fig. 3.10:",
        "Figs. 3.11-3.12:",
        "Fig. 3.14:",
        "§3.7.12 (Fig. 3.18):",
    ] {
        comparison_rows(&sections, fig, true);
    }
    for s in ["Setup", "Figs. 3.3-3.4", "Fig. 3.13:"] {
        assert!(sections.iter().any(|x| x.starts_with(s)), "no section {s}");
    }
    // The setup lists every trace that ran: the six stand-ins at least.
    let setup = sections.iter().find(|s| s.starts_with("Setup")).unwrap();
    let synth_rows = setup.lines().filter(|l| l.starts_with('|') && l.contains("-synth |")).count();
    assert_eq!(synth_rows, 6, "{setup}");
    let images = doc.matches(".png)").count();
    assert!(images >= 7, "{images} plots");

    // Determinism: everything but the wall-time line, and every result file.
    assert_same_reproduction(one.path(), two.path(), "womv", 100);
}

/// A dumped configuration runs alone with `flashrig run`, and an unknown label is refused.
#[test]
fn a_dumped_womv_run_runs_alone() {
    let dir = scratch();
    let dump = dir.path().join("configs");
    let bin = env!("CARGO_BIN_EXE_flashrig");
    let run = |args: &[&str]| {
        std::process::Command::new(bin)
            .current_dir(dir.path())
            .args(args)
            .output()
            .expect("run flashrig")
    };
    let label = "WOM24-GC_OPT-DAP-synth";
    let missing = dir.path().join("no-traces");
    let missing = missing.to_str().unwrap();
    let dump_arg = dump.to_str().unwrap();
    let dump_only = |only: &str| {
        let args = ["reproduce", "womv", "--smoke", "--traces", missing, "--dump-configs"];
        run(&[&args[..], &[dump_arg, "--only", only]].concat())
    };
    let out = dump_only(label);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let config = dump.join(format!("{label}.toml"));
    let toml = std::fs::read_to_string(&config).expect("the dumped configuration");
    assert!(toml.contains("gc = \"gc_opt\"") && toml.contains("trace_requests ="), "{toml}");
    let result = dir.path().join("result.json");
    let out = run(&["run", "-q", "-o", result.to_str().unwrap(), config.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json = std::fs::read_to_string(&result).expect("the result file");
    assert!(json.contains("womv_erases") && json.contains("precondition_layers"), "{json}");

    let out = dump_only("WOM94-nothing");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("WOM94-nothing"), "{}", text(&out.stderr));
}
