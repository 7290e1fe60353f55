//! Goal: `flashrig reproduce scalaafa` writes a document with a table per figure of the paper's
//! evaluation (Figs. 9-13, 15, 16), each with the paper's number beside ours and whether ours
//! points the same way, and the plots it links to; and a smaller run never overwrites the
//! document a full run wrote.
//!
//! Method: run the real binary with the hidden `--smoke` flag (every figure, 1 ms runs and
//! 300-request traces; README "Reproducing ScalaAFA") into a scratch directory, then read the
//! document: every figure's section and comparison table (header `| comparison | paper | ours |
//! ours / paper | direction | why |`) with at least one row, every direction cell one of the
//! forms the README describes and every opposite direction with a *why*, every image it links
//! exists as PNG and SVG, and no run failed. No timing or paper-agreement assertion: a smoke
//! run is not a reproduction. Then point `--smoke` and `--quick` at a document that says a
//! full run wrote it, and at one that is not a reproduction document: both refuse with exit
//! status 2 before running anything, and leave the file as it was. Last, `--dump-configs`
//! writes one planned run's configuration, which `flashrig run` runs alone, and refuses a
//! label that is not planned with exit status 2.

use std::process::Command;

mod common;
use common::{scratch, text};

#[test]
fn reproduce_scalaafa_smoke_writes_every_figure_and_its_plots() {
    let dir = scratch();
    let doc = dir.path().join("docs/reproduce.md");
    let plots = dir.path().join("docs/figures");
    let results = dir.path().join("results");
    let out = Command::new(env!("CARGO_BIN_EXE_flashrig"))
        .args(["reproduce", "scalaafa", "--smoke", "-q", "-j", "2"])
        .arg("--out")
        .arg(&doc)
        .arg("--plots")
        .arg(&plots)
        .arg("--results")
        .arg(&results)
        // No real traces: every Table 2 row is synthetic.
        .arg("--traces")
        .arg(dir.path().join("no-traces"))
        .output()
        .expect("run flashrig");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let text = std::fs::read_to_string(&doc).expect("the document");
    assert!(!text.contains("## Runs that failed"), "{text}");
    let summary = text.lines().find(|l| l.starts_with("**Summary.**")).expect("a summary");
    assert!(summary.contains("that state a direction point the same way"), "{summary}");
    let sections: Vec<&str> = text.split("\n## ").collect();
    let mut directions = 0;
    for fig in ["Fig. 9:", "Fig. 10:", "Fig. 11", "Fig. 12:", "Fig. 13:", "Fig. 15:", "Fig. 16:"] {
        let section = sections
            .iter()
            .find(|s| s.starts_with(fig))
            .unwrap_or_else(|| panic!("no section for {fig} in:\n{text}"));
        let mut lines = section.lines().skip_while(|l| !l.starts_with("| comparison |"));
        let header = lines.next().unwrap_or_else(|| panic!("{fig}: no comparison table"));
        assert_eq!(
            header, "| comparison | paper | ours | ours / paper | direction | why |",
            "{fig}"
        );
        let rows: Vec<&str> = lines.skip(1).take_while(|l| l.starts_with('|')).collect();
        assert!(!rows.is_empty(), "{fig}: the comparison table has no rows");
        for row in rows {
            // Every row has the paper's number, a cell for ours, its ratio, its direction and
            // its why.
            assert_eq!(row.matches(" | ").count(), 5, "{fig}: {row}");
            let cells: Vec<&str> = row.split(" | ").collect();
            let (direction, why) =
                (cells[4], cells[5].trim_end_matches(" |").trim_end_matches('|'));
            assert!(
                direction == "—"
                    || direction.starts_with("— (paper ")
                    || direction.starts_with("same (")
                    || direction.starts_with("**opposite** (paper "),
                "{fig}: direction cell {direction:?} in {row}"
            );
            if direction.starts_with("**opposite**") {
                assert!(why.contains("**opposite direction**"), "{fig}: no why for {row}");
            }
            directions += direction.starts_with("same") as usize;
            directions += direction.starts_with("**opposite**") as usize;
        }
        assert!(section.contains("!["), "{fig}: no plot");
    }
    // The smoke set computes the 4+1 comparisons, and with them some directions.
    assert!(directions >= 10, "{directions} directions computed");
    // Comparisons on 4+1 (the smoke set's geometry) are computed: ours is a number.
    let row = text
        .lines()
        .find(|l| l.starts_with("| ScalaAFA 4+1, 1 thread <br>"))
        .expect("the 11.4 GB/s row");
    let cells: Vec<&str> = row.split(" | ").collect();
    assert_eq!(cells[1], "11.40 GB/s", "{row}");
    assert!(cells[2].ends_with(" GB/s") && cells[2] != "—", "{row}");
    // An absolute number asserts no direction.
    assert_eq!(cells[4], "—", "{row}");
    // Every linked image exists, with its SVG beside it.
    let mut images = 0;
    for link in text.split("](").skip(1) {
        let target = link.split(')').next().unwrap();
        if !target.ends_with(".png") {
            continue;
        }
        let png = doc.parent().unwrap().join(target);
        assert!(png.exists(), "{} is missing", png.display());
        assert!(png.with_extension("svg").exists(), "{} has no SVG", png.display());
        images += 1;
    }
    assert!(images >= 15, "{images} plots");
    // The result files are kept, one per run.
    let jsons = std::fs::read_dir(&results)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "json"))
        .count();
    assert!(jsons > 40, "{jsons} result files");
}

#[test]
fn smaller_runs_refuse_to_overwrite_a_full_runs_document() {
    let dir = scratch();
    let full = dir.path().join("reproduce-scalaafa.md");
    let full_text = "# Reproducing ScalaAFA (ATC'24) §6 at reduced scale\n\nGenerated by \
                     `flashrig reproduce scalaafa` (144 runs, 350 s of wall time).\n";
    std::fs::write(&full, full_text).unwrap();
    let mine = dir.path().join("notes.md");
    std::fs::write(&mine, "my notes\n").unwrap();
    for flag in ["--smoke", "--quick"] {
        for (doc, says) in [(&full, "holds a full run"), (&mine, "not a document")] {
            let out = Command::new(env!("CARGO_BIN_EXE_flashrig"))
                .current_dir(dir.path())
                .args(["reproduce", "scalaafa", flag, "-q", "-o"])
                .arg(doc)
                .output()
                .expect("run flashrig");
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{flag} {}: {stderr}", doc.display());
            assert!(stderr.contains("refusing to overwrite") && stderr.contains(says), "{stderr}");
            assert!(!stderr.contains("panicked"), "{stderr}");
        }
    }
    // Nothing ran and nothing changed.
    assert_eq!(std::fs::read_to_string(&full).unwrap(), full_text);
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "my notes\n");
    assert!(!dir.path().join("reproduce-results").exists(), "a refused run wrote results");
}

#[test]
fn dumped_run_configurations_run_alone_and_unknown_labels_are_refused() {
    let dir = scratch();
    let configs = dir.path().join("configs");
    let results = dir.path().join("results");
    let label = "ScalaAFA-4+1-64k-seq-qd32-t1";
    let dump = |only: &str| {
        Command::new(env!("CARGO_BIN_EXE_flashrig"))
            .args(["reproduce", "scalaafa", "--smoke", "-q", "--only", only])
            .arg("--dump-configs")
            .arg(&configs)
            .arg("--results")
            .arg(&results)
            .arg("--traces")
            .arg(dir.path().join("no-traces"))
            .output()
            .expect("run flashrig")
    };
    let out = dump(label);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let file = configs.join(format!("{label}.toml"));
    assert_eq!(text(&out.stdout).trim(), file.display().to_string());
    // Only the run asked for, and nothing run: no result file.
    assert_eq!(std::fs::read_dir(&configs).unwrap().count(), 1);
    assert!(!results.join(format!("{label}.json")).exists());
    let run = Command::new(env!("CARGO_BIN_EXE_flashrig"))
        .args(["run", "-q", "-o"])
        .arg(dir.path().join("alone.json"))
        .arg(&file)
        .output()
        .expect("run flashrig");
    assert!(run.status.success(), "{}", text(&run.stderr));
    let result = std::fs::read_to_string(dir.path().join("alone.json")).expect("a result");
    assert!(result.contains("\"conversions_ssd\""), "not a ScalaAFA run: {result}");

    let out = dump("ScalaAFA-4+1-no-such-run");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("no planned run is labelled \"ScalaAFA-4+1-no-such-run\""), "{err}");
    assert!(err.contains(label), "the message lists the planned runs: {err}");
}
