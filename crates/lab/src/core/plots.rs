//! Plots for a reproduction document: each drawn as SVG and PNG into the plots folder and
//! embedded (the PNG) in the document by a path relative to it.

use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use flashrig_frontends::error::Error;
use flashrig_frontends::report::{self, Run, Series};

/// Path of `target` relative to the directory of `doc` (for links in the document).
pub fn relative_to(doc: &Path, target: &Path) -> String {
    let abs = |p: &Path| {
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            std::env::current_dir().unwrap_or_default().join(p)
        };
        p.components().fold(PathBuf::new(), |mut acc, c| {
            match c {
                Component::ParentDir => {
                    acc.pop();
                }
                Component::CurDir => {}
                c => acc.push(c),
            }
            acc
        })
    };
    let from = abs(doc.parent().unwrap_or(Path::new(".")));
    let to = abs(target);
    let a: Vec<_> = from.components().collect();
    let b: Vec<_> = to.components().collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut parts: Vec<String> = (common..a.len()).map(|_| "..".to_string()).collect();
    parts.extend(b[common..].iter().map(|c| c.as_os_str().to_string_lossy().to_string()));
    parts.join("/")
}

/// A run renamed, for a plot's legend.
pub fn named(run: &Run, name: &str) -> Run {
    let mut r = run.clone();
    r.name = name.to_string();
    r
}

/// Draws a document's plots and writes the Markdown that shows them.
pub struct Plots<'a> {
    /// Where the plots go.
    pub dir: &'a Path,
    /// The document that links them.
    pub doc: &'a Path,
    /// Every file drawn (SVG and PNG).
    pub written: Vec<PathBuf>,
}

impl Plots<'_> {
    fn embed(&mut self, out: &mut String, alt: &str, paths: Vec<PathBuf>) {
        if let Some(png) = paths.iter().find(|p| p.extension().is_some_and(|e| e == "png")) {
            let _ = writeln!(out, "![{alt}]({})\n", relative_to(self.doc, png));
        }
        self.written.extend(paths);
    }
    /// Grouped bars, one group per category, one bar per series.
    pub fn bars(
        &mut self,
        out: &mut String,
        stem: &str,
        title: &str,
        y: &str,
        cats: &[String],
        series: &[Series],
    ) -> Result<(), Error> {
        let paths = report::bar_chart(&self.dir.join(stem), title, y, cats, series)?;
        self.embed(out, title, paths);
        Ok(())
    }
    /// Lines over a numeric x axis.
    pub fn lines(
        &mut self,
        out: &mut String,
        stem: &str,
        title: &str,
        (x, y): (&str, &str),
        xs: &[f64],
        series: &[Series],
    ) -> Result<(), Error> {
        let paths = report::line_chart(&self.dir.join(stem), title, x, y, xs, series)?;
        self.embed(out, title, paths);
        Ok(())
    }
    /// Latency CDFs of `runs`, each named by its `name`; nothing when there are none.
    pub fn cdf(
        &mut self,
        out: &mut String,
        stem: &str,
        title: &str,
        runs: Vec<Run>,
    ) -> Result<(), Error> {
        if runs.is_empty() {
            return Ok(());
        }
        let paths = report::cdf_chart(&self.dir.join(stem), title, &runs)?;
        self.embed(out, title, paths);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        assert_eq!(
            relative_to(Path::new("/a/docs/r.md"), Path::new("/a/docs/figures/x.png")),
            "figures/x.png"
        );
        assert_eq!(relative_to(Path::new("/a/docs/r.md"), Path::new("/a/b/x.png")), "../b/x.png");
    }
}
