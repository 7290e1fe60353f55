//! Goal: `flashrig reproduce waflash` writes a document with a section per figure of WAFLASH's
//! evaluation (Figs. 1, 2 and 8-16, and why Fig. 17 is not reproduced), each figure with data
//! the paper states a number or a direction for carrying a comparison table (the paper's
//! number or "direction only", ours, the direction and a why where they disagree), the plots it
//! links, and no failed run; and the same document and byte-identical result files with one
//! worker thread and with two.
//!
//! Method: run the real binary with the hidden `--smoke` flag (every figure, 300-request
//! stand-in traces) twice, with `-j 1` and `-j 2`, each in a scratch directory with the default
//! outputs (`reproduce-results/waflash-smoke/`, so the trace paths inside the result files are
//! the same relative paths). Read the first document's sections, tables and image links; then
//! compare the two documents line by line except the line that states the wall time, and every
//! result file byte for byte. No timing or paper-agreement assertion: a smoke run is not a
//! reproduction.

mod common;
use common::{assert_same_reproduction, comparison_rows, reproduce_smoke_twice, scratch};

const OUT: &str = "reproduce-results/waflash-smoke";

#[test]
fn reproduce_waflash_smoke_writes_every_figure_and_is_deterministic() {
    let (one, two) = (scratch(), scratch());
    reproduce_smoke_twice(one.path(), two.path(), "waflash", &[]);
    let doc_path = one.path().join(OUT).join("reproduce-waflash.md");
    let doc = std::fs::read_to_string(&doc_path).expect("the document");
    assert!(!doc.contains("## Runs that failed"), "{doc}");
    let sections: Vec<&str> = doc.split("\n## ").collect();
    for fig in ["Fig. 2:", "Fig. 8:", "Fig. 9:", "Figs. 10-13:", "Fig. 14:", "Fig. 15:", "Fig. 16:"]
    {
        comparison_rows(&sections, fig, true);
    }
    for fig in ["Fig. 1:", "Fig. 17:"] {
        assert!(sections.iter().any(|s| s.starts_with(fig)), "no section for {fig}");
    }
    // Fig. 1's table has a row per trace with three ratios.
    let fig1 = sections.iter().find(|s| s.starts_with("Fig. 1:")).unwrap();
    let rows = fig1.lines().filter(|l| l.starts_with("| ") && l.ends_with("% |")).count();
    assert_eq!(rows, 6, "{fig1}");
    let mut images = 0;
    for link in doc.split("](").skip(1) {
        let target = link.split(')').next().unwrap();
        if target.ends_with(".png") {
            let png = doc_path.parent().unwrap().join(target);
            assert!(png.exists() && png.with_extension("svg").exists(), "{}", png.display());
            images += 1;
        }
    }
    assert!(images >= 10, "{images} plots");

    // Determinism: everything but the wall-time line, and every result file.
    assert_same_reproduction(one.path(), two.path(), "waflash", 101);
}
