//! The charts of `flashrig report` and of the reproduction documents: drawn with plotters as
//! SVG, rasterised to PNG with resvg.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::Run;
use crate::error::Error;

fn plot_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io(format!("cannot draw {}: {e}", path.display()))
}

type Plot = fn(&[Run], &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Result<(), String>;

/// The plots `flashrig report --plot DIR` draws, by file stem.
const PLOTS: &[(&str, Plot)] =
    &[("latency-cdf", draw_cdf), ("throughput", draw_throughput), ("iops", draw_iops)];

/// Draws each plot into `dir` as SVG and, rasterised from that SVG, as PNG; returns the paths.
pub fn plots(runs: &[Run], dir: &Path) -> Result<Vec<PathBuf>, Error> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::Input(format!("cannot create {}: {e}", dir.display())))?;
    let fonts = system_fonts();
    let mut written = Vec::new();
    for (stem, draw) in PLOTS {
        written.extend(draw_svg_png(&dir.join(stem), &fonts, |root| draw(runs, root))?);
    }
    Ok(written)
}

/// Draws one picture as `stem.svg` and, rasterised from it, `stem.png`; returns both paths.
fn draw_svg_png(
    stem: &Path,
    fonts: &std::sync::Arc<resvg::usvg::fontdb::Database>,
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Result<(), String>,
) -> Result<Vec<PathBuf>, Error> {
    let svg = stem.with_extension("svg");
    {
        let root = SVGBackend::new(&svg, (800, 500)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_err(&svg, e))?;
        draw(&root).map_err(|e| plot_err(&svg, e))?;
        root.present().map_err(|e| plot_err(&svg, e))?;
    }
    let png = stem.with_extension("png");
    svg_to_png(&svg, &png, fonts)?;
    Ok(vec![svg, png])
}

/// A named series of a chart: one value per category (or x), `None` where there is none.
pub struct Series {
    pub name: String,
    pub values: Vec<Option<f64>>,
}

/// Draws the latency CDF of `runs` (each named by its `name`) as `stem.svg` and `stem.png`.
pub fn cdf_chart(stem: &Path, title: &str, runs: &[Run]) -> Result<Vec<PathBuf>, Error> {
    draw_svg_png(stem, &system_fonts(), |root| draw_cdf_titled(runs, root, title))
}

/// Grouped bars: one group per category, one bar per series, as `stem.svg` and `stem.png`.
pub fn bar_chart(
    stem: &Path,
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[Series],
) -> Result<Vec<PathBuf>, Error> {
    draw_svg_png(stem, &system_fonts(), |root| draw_bars(root, title, y_label, categories, series))
}

/// Lines over a numeric x axis (one point per x where the series has a value), as
/// `stem.svg` and `stem.png`. Series whose name ends in "(ideal)" are drawn dashed.
pub fn line_chart(
    stem: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    xs: &[f64],
    series: &[Series],
) -> Result<Vec<PathBuf>, Error> {
    draw_svg_png(stem, &system_fonts(), |root| {
        draw_lines(root, title, x_label, y_label, xs, series)
    })
}

/// A grid of cells coloured by a level from 0 to 3 (green, yellow, orange, red; blank where
/// `None`), one row per `rows` entry, one column per `columns` entry, as `stem.svg` and
/// `stem.png`: the fault study's structure × program tables at a glance.
pub fn heat_map(
    stem: &Path,
    title: &str,
    rows: &[String],
    columns: &[String],
    values: &[Vec<Option<f64>>],
) -> Result<Vec<PathBuf>, Error> {
    draw_svg_png(stem, &system_fonts(), |root| draw_heat(root, title, rows, columns, values))
}

fn draw_heat(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    rows: &[String],
    columns: &[String],
    values: &[Vec<Option<f64>>],
) -> Result<(), String> {
    const LEVELS: [RGBColor; 4] = [
        RGBColor(200, 230, 201),
        RGBColor(255, 241, 118),
        RGBColor(255, 167, 38),
        RGBColor(229, 57, 53),
    ];
    let (nr, nc) = (rows.len().max(1), columns.len().max(1));
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(30)
        .y_label_area_size(130)
        .build_cartesian_2d(0f64..nc as f64, 0f64..nr as f64)
        .map_err(|e| e.to_string())?;
    let (cols, names) = (columns.to_vec(), rows.to_vec());
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(nc * 2 + 1)
        .y_labels(nr * 2 + 1)
        .x_label_formatter(&|v| centre_label(&cols, *v))
        // Row 0 at the top, as in the tables.
        .y_label_formatter(&|v| centre_label(&names, nr as f64 - *v))
        .draw()
        .map_err(|e| e.to_string())?;
    let mut cells = Vec::new();
    for (r, row) in values.iter().enumerate() {
        for (c, v) in row.iter().enumerate() {
            let Some(v) = v else { continue };
            let colour = LEVELS[(v.round() as usize).min(3)];
            let y0 = (nr - 1 - r) as f64;
            cells.push(Rectangle::new(
                [(c as f64 + 0.04, y0 + 0.04), (c as f64 + 0.96, y0 + 0.96)],
                colour.filled(),
            ));
        }
    }
    chart.draw_series(cells).map_err(|e| e.to_string())?;
    Ok(())
}

/// The label of the cell whose centre is at `v` (the axis puts ticks at every half).
fn centre_label(names: &[String], v: f64) -> String {
    let c = v - v.floor();
    if (c - 0.5).abs() < 1e-6 {
        names.get(v.floor() as usize).cloned().unwrap_or_default()
    } else {
        String::new()
    }
}

fn draw_bars(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[Series],
) -> Result<(), String> {
    let max_y = series.iter().flat_map(|s| s.values.iter().flatten()).fold(0f64, |a, &b| a.max(b));
    let max_y = if max_y > 0.0 { max_y * 1.15 } else { 1.0 };
    let n = categories.len().max(1) as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0f64..n, 0f64..max_y)
        .map_err(|e| e.to_string())?;
    let names = categories.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(categories.len().max(1) * 2 + 1)
        // Label each group at its centre.
        .x_label_formatter(&|v| centre_label(&names, *v))
        .y_desc(y_label)
        .draw()
        .map_err(|e| e.to_string())?;
    let width = 0.8 / series.len().max(1) as f64;
    for (j, s) in series.iter().enumerate() {
        let c = colour(j);
        let bars: Vec<_> = s
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (i, v)))
            .map(|(i, v)| {
                let x0 = i as f64 + 0.1 + j as f64 * width;
                Rectangle::new([(x0, 0.0), (x0 + width * 0.95, v)], c.filled())
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|e| e.to_string())?
            .label(s.name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

fn draw_lines(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    xs: &[f64],
    series: &[Series],
) -> Result<(), String> {
    let max_x = xs.iter().copied().fold(1f64, f64::max);
    let max_y = series.iter().flat_map(|s| s.values.iter().flatten()).fold(0f64, |a, &b| a.max(b));
    let max_y = if max_y > 0.0 { max_y * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0f64..max_x * 1.05, 0f64..max_y)
        .map_err(|e| e.to_string())?;
    chart.configure_mesh().x_desc(x_label).y_desc(y_label).draw().map_err(|e| e.to_string())?;
    for (j, s) in series.iter().enumerate() {
        let c = colour(j);
        let pts: Vec<(f64, f64)> =
            xs.iter().zip(&s.values).filter_map(|(&x, v)| v.map(|v| (x, v))).collect();
        let dashed = s.name.ends_with("(ideal)");
        if dashed {
            chart
                .draw_series(DashedLineSeries::new(pts.iter().copied(), 8, 5, c.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        } else {
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                .map_err(|e| e.to_string())?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

/// The machine's fonts, for the text of PNG plots (CI installs DejaVu, fonts-dejavu-core).
/// Without any font the PNGs are still drawn, without their text.
fn system_fonts() -> std::sync::Arc<resvg::usvg::fontdb::Database> {
    let mut db = resvg::usvg::fontdb::Database::new();
    db.load_system_fonts();
    db.set_sans_serif_family("DejaVu Sans");
    std::sync::Arc::new(db)
}

/// Rasterises an SVG plot, so PNG and SVG show exactly the same picture.
fn svg_to_png(
    svg: &Path,
    png: &Path,
    fonts: &std::sync::Arc<resvg::usvg::fontdb::Database>,
) -> Result<(), Error> {
    use resvg::{tiny_skia, usvg};
    let data = std::fs::read(svg).map_err(|e| plot_err(png, e))?;
    let opt = usvg::Options { fontdb: fonts.clone(), ..usvg::Options::default() };
    let tree = usvg::Tree::from_data(&data, &opt).map_err(|e| plot_err(png, e))?;
    let size = tree.size().to_int_size();
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| plot_err(png, "empty picture"))?;
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap.save_png(png).map_err(|e| plot_err(png, e))
}

fn colour(i: usize) -> RGBAColor {
    Palette99::pick(i).to_rgba()
}

/// Latency CDF, log-scaled in microseconds.
fn draw_cdf(
    runs: &[Run],
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
) -> Result<(), String> {
    draw_cdf_titled(runs, root, "Latency CDF")
}

fn draw_cdf_titled(
    runs: &[Run],
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
) -> Result<(), String> {
    let max_us = runs
        .iter()
        .flat_map(|r| r.total.latency_cdf.last().map(|p| p.0 as f64 / 1e3))
        .fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((0.1f64..max_us * 1.2).log_scale(), 0f64..1f64)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("latency (µs)")
        .y_desc("fraction of requests")
        .draw()
        .map_err(|e| e.to_string())?;
    draw_labelled_lines(
        &mut chart,
        runs.iter().map(|r| {
            let pts = r.total.latency_cdf.iter().map(|&(ns, f)| ((ns as f64 / 1e3).max(0.1), f));
            (r.name.clone(), pts.collect())
        }),
    )
}

/// One coloured line per run, each named in the chart's legend.
fn draw_labelled_lines<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    lines: impl Iterator<Item = (String, Vec<(f64, f64)>)>,
) -> Result<(), String>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, (name, pts)) in lines.enumerate() {
        let c = colour(i);
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

/// Throughput over time (MiB/s per interval of the runtime's clock).
fn draw_throughput(
    runs: &[Run],
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
) -> Result<(), String> {
    let secs = |r: &Run| r.total.series_interval_ns.max(1) as f64 / 1e9;
    let points: Vec<Vec<(f64, f64)>> = runs
        .iter()
        .map(|r| {
            r.total
                .series
                .iter()
                .enumerate()
                .map(|(i, p)| (i as f64 * secs(r), p.bytes as f64 / secs(r) / (1 << 20) as f64))
                .collect()
        })
        .collect();
    let max_x = points.iter().flatten().map(|p| p.0).fold(1.0f64, f64::max);
    let max_y = points.iter().flatten().map(|p| p.1).fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(root)
        .caption("Throughput over time", ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0f64..max_x * 1.05, 0f64..max_y * 1.1)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("time (s, runtime clock)")
        .y_desc("MiB/s")
        .draw()
        .map_err(|e| e.to_string())?;
    draw_labelled_lines(&mut chart, runs.iter().map(|r| r.name.clone()).zip(points))
}

/// IOPS bars across runs.
fn draw_iops(
    runs: &[Run],
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
) -> Result<(), String> {
    let max_y = runs.iter().filter_map(|r| r.total.iops).fold(1.0f64, f64::max);
    let n = runs.len().max(1);
    let names: Vec<String> = runs.iter().map(|r| r.name.clone()).collect();
    let mut chart = ChartBuilder::on(root)
        .caption("IOPS", ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d((0..n).into_segmented(), 0f64..max_y * 1.1)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_desc("IOPS")
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(runs.iter().enumerate().map(|(i, r)| {
            let v = r.total.iops.unwrap_or(0.0);
            Rectangle::new(
                [(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), v)],
                colour(i).filled(),
            )
        }))
        .map_err(|e| e.to_string())?;
    Ok(())
}
