//! Goal: `flashrig reproduce scalaafa` writes a document with a table per figure of the paper's
//! evaluation (Figs. 9-13, 15, 16), each with the paper's number beside ours, and the plots it
//! links to.
//!
//! Method: run the real binary with the hidden `--smoke` flag (every figure, 1 ms runs and
//! 300-request traces; README "Reproducing ScalaAFA") into a scratch directory, then read the
//! document: every figure's section and comparison table (header `| comparison | paper | ours |
//! ours / paper | why |`) with at least one row, every image it links exists as PNG and SVG,
//! and no run failed. No timing or paper-agreement assertion: a smoke run is not a
//! reproduction.

use std::process::Command;

#[test]
fn reproduce_scalaafa_smoke_writes_every_figure_and_its_plots() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch directory");
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
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = std::fs::read_to_string(&doc).expect("the document");
    assert!(!text.contains("## Runs that failed"), "{text}");
    let sections: Vec<&str> = text.split("\n## ").collect();
    for fig in ["Fig. 9:", "Fig. 10:", "Fig. 11", "Fig. 12:", "Fig. 13:", "Fig. 15:", "Fig. 16:"] {
        let section = sections
            .iter()
            .find(|s| s.starts_with(fig))
            .unwrap_or_else(|| panic!("no section for {fig} in:\n{text}"));
        let mut lines = section.lines().skip_while(|l| !l.starts_with("| comparison |"));
        let header = lines.next().unwrap_or_else(|| panic!("{fig}: no comparison table"));
        assert_eq!(header, "| comparison | paper | ours | ours / paper | why |", "{fig}");
        let rows: Vec<&str> = lines.skip(1).take_while(|l| l.starts_with('|')).collect();
        assert!(!rows.is_empty(), "{fig}: the comparison table has no rows");
        // Every row has the paper's number and a cell for ours.
        for row in rows {
            assert_eq!(row.matches(" | ").count(), 4, "{fig}: {row}");
        }
        assert!(section.contains("!["), "{fig}: no plot");
    }
    // Comparisons on 4+1 (the smoke set's geometry) are computed: ours is a number.
    let row = text
        .lines()
        .find(|l| l.starts_with("| ScalaAFA 4+1, 1 thread <br>"))
        .expect("the 11.4 GB/s row");
    let cells: Vec<&str> = row.split(" | ").collect();
    assert_eq!(cells[1], "11.40 GB/s", "{row}");
    assert!(cells[2].ends_with(" GB/s") && cells[2] != "—", "{row}");
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
