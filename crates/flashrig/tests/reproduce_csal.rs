//! Goal: `flashrig reproduce csal` writes a document with a section per figure of CSAL's
//! raw-device evaluation (Figs. 3 and 10-19, Table 4, and what is not reproduced), each
//! figure the paper states a number or a direction for carrying a comparison table (the
//! paper's number or "direction only", ours, the direction and a why where they disagree),
//! Table 4 with a row per recovery mode, the plots it links, and no failed run; and the same
//! document and byte-identical result files (Table 4's report included) with one worker thread
//! and with two.
//!
//! Method: run the real binary with the hidden `--smoke` flag (every figure over the reduced
//! devices, no warm-up, 512 KiB per job) twice, with `-j 1` and `-j 2`, each in a scratch
//! directory with the default outputs. Read the first document's sections, tables and image
//! links; then compare the two documents line by line except the line that states the wall
//! time, and every result file byte for byte. No timing or paper-agreement assertion: a smoke
//! run is not a reproduction.

mod common;
use common::{assert_same_reproduction, comparison_rows, reproduce_smoke_twice, scratch};

const OUT: &str = "reproduce-results/csal-smoke";

#[test]
fn reproduce_csal_smoke_writes_every_figure_and_is_deterministic() {
    let (one, two) = (scratch(), scratch());
    reproduce_smoke_twice(one.path(), two.path(), "csal", &[]);
    let doc_path = one.path().join(OUT).join("reproduce-csal.md");
    let doc = std::fs::read_to_string(&doc_path).expect("the document");
    assert!(!doc.contains("## Runs that failed"), "{doc}");
    let sections: Vec<&str> = doc.split("\n## ").collect();
    for fig in [
        "Figs. 3 and 10:",
        "Fig. 11:",
        "Figs. 12-13:",
        "Fig. 14:",
        "Fig. 15:",
        "Figs. 16-17:",
        "Fig. 18:",
        "Fig. 19:",
    ] {
        comparison_rows(&sections, fig, false);
    }
    let table4 = sections.iter().find(|s| s.starts_with("Table 4:")).expect("Table 4");
    for mode in ["| naive |", "| p2l |", "| checkpoint |"] {
        assert!(table4.lines().any(|l| l.starts_with(mode)), "no {mode} row in:\n{table4}");
    }
    assert!(sections.iter().any(|s| s.starts_with("Not reproduced")), "{doc}");
    let mut images = 0;
    for link in doc.split("](").skip(1) {
        let target = link.split(')').next().unwrap();
        if target.ends_with(".png") {
            let png = doc_path.parent().unwrap().join(target);
            assert!(png.exists() && png.with_extension("svg").exists(), "{}", png.display());
            images += 1;
        }
    }
    assert!(images >= 8, "{images} plots");

    // Determinism: everything but the wall-time line, and every result file.
    assert_same_reproduction(one.path(), two.path(), "csal", 100);
}
