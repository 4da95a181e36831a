//! The report's charts, each as SVG and PNG (plotters):
//!
//! - the headline: per (layout, workload) the headline metric of the VM
//!   under test (`headline.rs`) per policy, relative to the baseline and
//!   turned so that right of 1 is better whichever way the metric goes
//!   (bars at the median, min-max whiskers);
//! - the cost: the other VMs' own figure beside it, relative to the
//!   baseline (what the neighbours paid);
//! - fairness (Jain's index) and migrations per second per policy;
//! - per (layout, workload) the latency distribution of the VM under
//!   test as an exceedance curve (as HdrHistogram plots it: x the latency
//!   on a log axis, y = 1 - quantile, the fraction of wakes slower than
//!   x, on a log axis, so the tail gets the room), both axes spanning the
//!   data only; drawn only from the guest's real histograms
//!   (`*.bucket.*` samples), never from a few quantiles.
//!
//! Every bar chart is horizontal: one row per (layout, workload), labels
//! in a margin sized to the longest one (they never overlap), the legend
//! beside the plot, never on the data, and a log scale when the values
//! span a decade or more (migrations: 0.5/s under pinning, thousands/s
//! under the host).
//!
//! Text is drawn with ab_glyph from a TrueType font found at run time (no
//! font-kit or freetype): Debian's fonts-dejavu-core, which ci/install.sh
//! installs. Without a font the plots are skipped and the report says why.

use super::metrics;
use super::metrics::Better;
use super::store::{CellRecord, CellStatus};
use super::summary::{cell_value, Column, GroupSummary, Role, Stat, Summary, ALL};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

/// TrueType fonts tried in order.
const FONT_FILES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// One chart, in both formats.
#[derive(Debug, Clone)]
pub struct Plot {
    pub title: String,
    /// File names relative to the report's directory.
    pub svg: String,
    pub png: String,
}

/// The charts written, or why none were.
#[derive(Debug, Clone, Default)]
pub struct PlotSet {
    pub plots: Vec<Plot>,
    pub skipped: Option<String>,
}

/// Register a font for plotters' "sans-serif" once (also used by
/// `pacer trace plot`).
pub(crate) fn font() -> Result<(), String> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        for f in FONT_FILES {
            if let Ok(bytes) = std::fs::read(f) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                return plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                    .map_err(|_| format!("{f}: not a usable TrueType font"));
            }
        }
        Err(format!(
            "no TrueType font found (tried {}; Debian: apt-get install fonts-dejavu-core)",
            FONT_FILES.join(", ")
        ))
    })
    .clone()
}

/// A plotters error as text.
pub(crate) fn e<E: std::fmt::Debug>(err: E) -> String {
    format!("{err:?}")
}

/// (median, min, max) of a bar.
type Bar = (f64, f64, f64);
/// A series of bars: its name and one bar (or none) per category.
type BarSeries = (String, Vec<Option<Bar>>);

/// Horizontal bars: per category (a row), one bar per series with a
/// min-max whisker.
struct Bars<'a> {
    title: &'a str,
    x_label: &'a str,
    /// Per category: its label and a smaller second line.
    categories: Vec<(String, String)>,
    series: Vec<BarSeries>,
    /// Every policy of the run, so a policy has one colour in every chart.
    palette: &'a [String],
    /// A vertical reference line (1.0 for ratios).
    reference: Option<f64>,
    /// How to print an axis value.
    format: fn(f64) -> String,
}

/// The colour of a policy: its place in the run's policy list.
pub(crate) fn colour(palette: &[String], name: &str) -> RGBAColor {
    let i = palette
        .iter()
        .position(|p| p == name)
        .unwrap_or(palette.len());
    Palette99::pick(i).to_rgba()
}

const WIDTH: u32 = 960;
/// Pixels per bar and between categories.
const BAR_PX: u32 = 14;
const GAP_PX: u32 = 14;

/// The height a bar chart needs for its rows.
fn bars_height(b: &Bars<'_>) -> u32 {
    let rows = b.categories.len().max(1) as u32;
    let per = b.series.len().max(1) as u32 * BAR_PX + GAP_PX;
    (rows * per + 110).max(260)
}

/// The width of the widest text in `texts`, drawn in `style` on `area`.
fn text_width<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    texts: impl Iterator<Item = String>,
    style: &TextStyle,
) -> u32 {
    texts
        .map(|t| area.estimate_text_size(&t, style).map_or(0, |s| s.0))
        .max()
        .unwrap_or(0)
}

/// The legend: a coloured box and the name of each series, top to bottom,
/// in its own area beside the plot.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    names: &[&str],
    palette: &[String],
    line: bool,
) -> Result<(), String> {
    let font = ("sans-serif", 14).into_font().color(&BLACK);
    for (i, name) in names.iter().enumerate() {
        let y = 50 + i as i32 * 22;
        let c = colour(palette, name);
        if line {
            area.draw(&PathElement::new(
                [(8, y + 7), (26, y + 7)],
                c.stroke_width(3),
            ))
            .map_err(e)?;
        } else {
            area.draw(&Rectangle::new([(8, y), (24, y + 14)], c.filled()))
                .map_err(e)?;
        }
        area.draw(&Text::new(name.to_string(), (32, y), font.clone()))
            .map_err(e)?;
    }
    Ok(())
}

fn draw_bars<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, b: &Bars<'_>) -> Result<(), String> {
    root.fill(&WHITE).map_err(e)?;
    let label_font: TextStyle = ("sans-serif", 14).into_font().color(&BLACK);
    let sub_font: TextStyle = ("sans-serif", 12).into_font().color(&RGBColor(80, 80, 80));
    let names: Vec<&str> = b.series.iter().map(|(n, _)| n.as_str()).collect();
    let legend_w = text_width(&root, names.iter().map(|n| n.to_string()), &label_font) + 48;
    let (w, _) = root.dim_in_pixel();
    let (plot, legend) = root.split_horizontally(w.saturating_sub(legend_w));
    let label_w = text_width(&root, b.categories.iter().map(|c| c.0.clone()), &label_font).max(
        text_width(&root, b.categories.iter().map(|c| c.1.clone()), &sub_font),
    ) + 16;

    let bars = b.series.iter().flat_map(|(_, v)| v.iter().flatten());
    let top = bars
        .clone()
        .map(|x| x.2.max(x.0))
        .chain(b.reference)
        .fold(0.0f64, f64::max);
    let bottom = bars
        .flat_map(|x| [x.0, x.1])
        .chain(b.reference)
        .filter(|v| *v > 0.0)
        .fold(f64::MAX, f64::min);
    // A log scale when the values span a decade or more.
    let log = bottom < f64::MAX && top / bottom >= 10.0;
    let (x0, x1) = if log {
        // One decade below the smallest value, so that it still shows.
        let lo = bottom.log10().floor() - 1.0;
        (lo, top.log10().ceil().max(lo + 2.0))
    } else {
        (0.0, if top > 0.0 { top * 1.1 } else { 1.0 })
    };
    let tx = move |v: f64| {
        if log {
            v.max(10f64.powf(x0)).log10()
        } else {
            v
        }
    };
    let n = b.categories.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&plot)
        .caption(b.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(45)
        .y_label_area_size(label_w)
        .build_cartesian_2d(x0..x1, 0.0..n)
        .map_err(e)?;
    let format = b.format;
    let x_desc = if log {
        format!("{} (log scale)", b.x_label)
    } else {
        b.x_label.to_string()
    };
    let decades = (x1 - x0).round() as usize;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_labels(if log { decades + 1 } else { 8 })
        .x_desc(x_desc)
        .x_label_formatter(&move |v| {
            if log {
                format(10f64.powf(*v))
            } else {
                format(*v)
            }
        })
        .draw()
        .map_err(e)?;
    let k = b.series.len().max(1) as f64;
    let bw = 0.8 / k;
    // Category ci is row n-1-ci, so the first category is on top.
    let row = |ci: usize| n - 1.0 - ci as f64;
    for (si, (name, values)) in b.series.iter().enumerate() {
        let color = colour(b.palette, name);
        let y = |ci: usize| row(ci) + 0.9 - (si as f64 + 1.0) * bw;
        let rects = values.iter().enumerate().filter_map(|(ci, v)| {
            let (med, _, _) = (*v)?;
            Some(Rectangle::new(
                [(x0, y(ci)), (tx(med), y(ci) + bw * 0.85)],
                color.filled(),
            ))
        });
        chart.draw_series(rects).map_err(e)?;
        let whiskers = values.iter().enumerate().filter_map(|(ci, v)| {
            let (med, lo, hi) = (*v)?;
            Some(ErrorBar::new_horizontal(
                y(ci) + bw * 0.42,
                tx(lo),
                tx(med),
                tx(hi),
                BLACK.stroke_width(1),
                6,
            ))
        });
        chart.draw_series(whiskers).map_err(e)?;
    }
    if let Some(r) = b.reference {
        chart
            .draw_series(LineSeries::new(
                [(tx(r), 0.0), (tx(r), n)],
                BLACK.stroke_width(1),
            ))
            .map_err(e)?;
    }
    // Category labels in the left margin, two lines each.
    for (ci, (label, sub)) in b.categories.iter().enumerate() {
        let (_, py) = chart.backend_coord(&(x0, row(ci) + 0.5));
        let px = chart.backend_coord(&(x0, 0.0)).0 - label_w as i32 + 4;
        root.draw(&Text::new(label.clone(), (px, py - 15), label_font.clone()))
            .map_err(e)?;
        root.draw(&Text::new(sub.clone(), (px, py + 2), sub_font.clone()))
            .map_err(e)?;
    }
    draw_legend(&legend, &names, b.palette, false)?;
    root.present().map_err(e)
}

/// A latency distribution from a histogram: the end of each non-empty
/// bucket (ns) with the fraction of samples at or below it, and how many
/// samples there are.
#[derive(Debug, Clone, PartialEq)]
struct Distribution {
    points: Vec<(f64, f64)>,
    total: f64,
}

/// Exceedance lines: per series, a distribution.
struct Exceedance<'a> {
    title: &'a str,
    palette: &'a [String],
    series: Vec<(String, Distribution)>,
}

/// How far an axis reaches past the data on each side (a factor on a
/// log axis): well under a decade, so no decade is empty.
const AXIS_PAD: f64 = 1.25;

/// The axes of an exceedance plot, from the data: x from the lowest to
/// the highest bucket end of any series; y from 1 (every sample is slower
/// than nothing) down to the smallest exceedance any series can show, one
/// sample of its total (where its curve ends).
fn exceedance_axes(series: &[(String, Distribution)]) -> (Range<f64>, Range<f64>) {
    let xs = series
        .iter()
        .flat_map(|(_, d)| d.points.iter().map(|p| p.0));
    let lo = xs.clone().fold(f64::MAX, f64::min).max(1.0);
    let hi = xs.fold(0.0f64, f64::max).max(lo);
    // One bucket only: a factor of AXIS_PAD either side still shows it.
    let y_lo = series
        .iter()
        .map(|(_, d)| 1.0 / d.total.max(1.0))
        .fold(1.0f64, f64::min);
    (
        lo / AXIS_PAD..hi * AXIS_PAD,
        (y_lo / AXIS_PAD).min(0.5)..AXIS_PAD,
    )
}

/// The step function of 1 - F: the fraction of samples slower than x.
/// Starting at 1 left of the first bucket, it drops at each bucket's end;
/// after the last bucket no sample is slower, which a log axis cannot
/// show: the curve ends at `floor` (the axis' bottom) there.
fn exceedance_steps(d: &Distribution, x_start: f64, floor: f64) -> Vec<(f64, f64)> {
    let mut steps = Vec::with_capacity(d.points.len() * 2 + 1);
    let mut prev = 1.0;
    steps.push((x_start, prev));
    for &(x, cum) in &d.points {
        let next = (1.0 - cum).max(floor);
        steps.push((x, prev));
        steps.push((x, next));
        prev = next;
    }
    steps
}

/// A y label of an exceedance axis: the fraction and the percentile it
/// marks (0.01 is p99).
fn exceedance_label(v: f64) -> String {
    if v >= 1.0 {
        return "1".into();
    }
    let p = format!("{:.4}", 100.0 * (1.0 - v));
    let p = p.trim_end_matches('0').trim_end_matches('.');
    format!("{} (p{p})", ratio_label(v))
}

fn draw_exceedance<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    c: &Exceedance<'_>,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(e)?;
    let label_font: TextStyle = ("sans-serif", 14).into_font().into();
    let names: Vec<&str> = c.series.iter().map(|(n, _)| n.as_str()).collect();
    let legend_w = text_width(&root, names.iter().map(|n| n.to_string()), &label_font) + 48;
    let (w, _) = root.dim_in_pixel();
    let (plot, legend) = root.split_horizontally(w.saturating_sub(legend_w));
    let (x, y) = exceedance_axes(&c.series);
    let mut chart = ChartBuilder::on(&plot)
        .caption(c.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(100)
        .build_cartesian_2d(x.clone().log_scale(), y.clone().log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("latency (log scale)")
        .y_desc("fraction of wakes slower: 1 - quantile (log scale)")
        .x_label_formatter(&|v| metrics::format_value("latency_ns", *v))
        .y_label_formatter(&|v| exceedance_label(*v))
        .draw()
        .map_err(e)?;
    for (name, d) in &c.series {
        let color = colour(c.palette, name);
        chart
            .draw_series(LineSeries::new(
                exceedance_steps(d, x.start, y.start),
                color.stroke_width(2),
            ))
            .map_err(e)?;
    }
    draw_legend(&legend, &names, c.palette, true)?;
    root.present().map_err(e)
}

fn plot(name: &str, title: &str) -> Plot {
    Plot {
        title: title.to_string(),
        svg: format!("plots/{name}.svg"),
        png: format!("plots/{name}.png"),
    }
}

/// A plot file that could not be written, in words.
fn io_error(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}

/// Write `name`.svg and `name`.png of a bar chart in `dir`, leaving out
/// the categories without any bar.
fn write_bars(dir: &Path, name: &str, b: &Bars<'_>) -> Result<Plot, String> {
    let keep: Vec<usize> = (0..b.categories.len())
        .filter(|&ci| {
            b.series
                .iter()
                .any(|(_, v)| v.get(ci).is_some_and(Option::is_some))
        })
        .collect();
    let b = &Bars {
        categories: keep.iter().map(|&ci| b.categories[ci].clone()).collect(),
        series: b
            .series
            .iter()
            .map(|(n, v)| (n.clone(), keep.iter().map(|&ci| v[ci]).collect()))
            .collect(),
        ..*b
    };
    let (svg, png) = (
        dir.join(format!("{name}.svg")),
        dir.join(format!("{name}.png")),
    );
    let size = (WIDTH, bars_height(b));
    vmm::whole_file::write_with(
        &svg,
        |tmp| draw_bars(SVGBackend::new(tmp, size).into_drawing_area(), b),
        |e| io_error(&svg, e),
    )?;
    vmm::whole_file::write_with(
        &png,
        |tmp| draw_bars(BitMapBackend::new(tmp, size).into_drawing_area(), b),
        |e| io_error(&png, e),
    )?;
    Ok(plot(name, b.title))
}

/// Write `name`.svg and `name`.png of an exceedance chart in `dir`.
fn write_exceedance(dir: &Path, name: &str, c: &Exceedance<'_>) -> Result<Plot, String> {
    let (svg, png) = (
        dir.join(format!("{name}.svg")),
        dir.join(format!("{name}.png")),
    );
    let size = (WIDTH, 480);
    vmm::whole_file::write_with(
        &svg,
        |tmp| draw_exceedance(SVGBackend::new(tmp, size).into_drawing_area(), c),
        |e| io_error(&svg, e),
    )?;
    vmm::whole_file::write_with(
        &png,
        |tmp| draw_exceedance(BitMapBackend::new(tmp, size).into_drawing_area(), c),
        |e| io_error(&png, e),
    )?;
    Ok(plot(name, c.title))
}

fn ok_cells<'a>(
    records: &'a [CellRecord],
    layout: &'a str,
    workload: &'a str,
    policy: &'a str,
) -> impl Iterator<Item = &'a CellRecord> + 'a {
    records.iter().filter(move |r| {
        r.status == CellStatus::Ok
            && r.layout == layout
            && r.workload == workload
            && r.policy == policy
    })
}

/// Per policy, per group: the stat over ok cells of what `pick` reads.
fn per_policy(
    summary: &Summary,
    records: &[CellRecord],
    palette: &[String],
    pick: &dyn Fn(&CellRecord) -> Option<f64>,
) -> Vec<(String, Vec<Option<Stat>>)> {
    palette
        .iter()
        .map(|p| {
            let per_group = summary
                .groups
                .iter()
                .map(|g| {
                    let v: Vec<f64> = ok_cells(records, &g.layout, &g.workload, p)
                        .filter_map(pick)
                        .collect();
                    Stat::of(&v)
                })
                .collect();
            (p.clone(), per_group)
        })
        .filter(|(_, v): &(String, Vec<Option<Stat>>)| v.iter().any(Option::is_some))
        .collect()
}

fn triple(s: Option<Stat>) -> Option<Bar> {
    s.map(|s| (s.median, s.min, s.max))
}

fn file_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The distribution of one policy's cells in a group, from the
/// histograms of `scope` (a VM group, or `all`) whose metric starts with
/// `base`. Returns the histogram's metric and the distribution.
fn histogram_distribution(
    cells: &[&CellRecord],
    scope: &str,
    base: Option<&str>,
) -> Option<(String, Distribution)> {
    let mut buckets: BTreeMap<(String, u64), f64> = BTreeMap::new();
    for c in cells {
        for s in c
            .samples
            .iter()
            .filter(|s| scope == ALL || s.group == scope)
        {
            let Some((name, hi)) = s.metric.split_once(".bucket.") else {
                continue;
            };
            let Ok(hi) = hi.parse::<u64>() else { continue };
            *buckets.entry((name.to_string(), hi)).or_default() += s.value;
        }
    }
    let chosen = base
        .and_then(|b| buckets.keys().find(|(n, _)| n.starts_with(b)))
        .or_else(|| buckets.keys().next())?
        .0
        .clone();
    let mine: Vec<(u64, f64)> = buckets
        .iter()
        .filter(|((n, _), _)| *n == chosen)
        .map(|((_, hi), n)| (*hi, *n))
        .collect();
    let total: f64 = mine.iter().map(|x| x.1).sum();
    if total <= 0.0 {
        return None;
    }
    let mut cum = 0.0;
    let points = mine
        .into_iter()
        .filter(|(_, n)| *n > 0.0)
        .map(|(hi, n)| {
            cum += n;
            (hi as f64, cum / total)
        })
        .collect();
    Some((
        chosen.trim_end_matches(".histogram").to_string(),
        Distribution { points, total },
    ))
}

/// An axis label for a ratio: two significant digits at most, no
/// trailing zeros (0.001, 0.05, 0.5, 1, 1.2, 10), so a log axis that
/// spans decades below 1 does not read 0.00.
fn ratio_label(v: f64) -> String {
    if v <= 0.0 || !v.is_finite() {
        return "0".into();
    }
    let decimals = (1.0 - v.log10().floor()).max(0.0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The ratio bars of column `ci` of every group (None: the group has no
/// such column), relative to the first baseline with a value (else the
/// best median), turned so that right of 1 is better when `turn`.
fn ratio_bars(
    summary: &Summary,
    palette: &[String],
    column: &dyn Fn(&GroupSummary) -> Option<usize>,
    turn: bool,
) -> Vec<BarSeries> {
    let norms: Vec<Option<(usize, f64, Better)>> = summary
        .groups
        .iter()
        .map(|g| {
            let ci = column(g)?;
            let better = g.columns[ci].better;
            let base = summary
                .baselines
                .iter()
                .find_map(|b| g.row(b).and_then(|r| r.values[ci]))
                .map(|s| s.median)
                .or_else(|| {
                    g.rows
                        .iter()
                        .filter_map(|r| r.values[ci].map(|s| s.median))
                        .reduce(f64::max)
                })
                .filter(|v| *v > 0.0)?;
            Some((ci, base, better))
        })
        .collect();
    palette
        .iter()
        .map(|p| {
            let v = summary
                .groups
                .iter()
                .zip(&norms)
                .map(|(g, norm)| {
                    let (ci, base, better) = (*norm)?;
                    let s = g.row(p)?.values[ci]?;
                    if turn && better == Better::Lower {
                        // base / value: right of 1 is lower, i.e. better.
                        let inv = |v: f64| if v > 0.0 { base / v } else { f64::NAN };
                        Some((inv(s.median), inv(s.max), inv(s.min)))
                    } else {
                        Some((s.median / base, s.min / base, s.max / base))
                    }
                })
                .map(|b| b.filter(|b: &Bar| b.0.is_finite() && b.1.is_finite() && b.2.is_finite()))
                .collect();
            (p.clone(), v)
        })
        .filter(|(_, v): &BarSeries| v.iter().any(Option::is_some))
        .collect()
}

/// Write every chart into `dir`.
pub fn write_all(summary: &Summary, records: &[CellRecord], dir: &Path) -> PlotSet {
    if let Err(why) = font() {
        return PlotSet {
            plots: Vec::new(),
            skipped: Some(why),
        };
    }
    if let Err(err) = std::fs::create_dir_all(dir) {
        return PlotSet {
            plots: Vec::new(),
            skipped: Some(format!("{}: {err}", dir.display())),
        };
    }
    let mut set = PlotSet::default();
    let mut push = |r: Result<Plot, String>| match r {
        Ok(p) => set.plots.push(p),
        Err(why) => set.skipped = Some(why),
    };
    let mut palette: Vec<String> = Vec::new();
    for r in summary.groups.iter().flat_map(|g| &g.rows) {
        if !palette.contains(&r.policy) {
            palette.push(r.policy.clone());
        }
    }
    let palette = &palette;
    let base = summary
        .baselines
        .first()
        .map_or("the best policy", String::as_str);
    let plain = |g: &GroupSummary| (g.key(), String::new());
    let fmt_ratio: fn(f64) -> String = ratio_label;

    // The headline of the VM under test.
    let first = |role: Role| move |g: &GroupSummary| g.columns.iter().position(|c| c.role == role);
    let headline = first(Role::Headline);
    let series = ratio_bars(summary, palette, &headline, true);
    if !series.is_empty() {
        let categories = summary
            .groups
            .iter()
            .map(|g| match headline(g) {
                Some(ci) => {
                    let c = &g.columns[ci];
                    let dir = match c.better {
                        Better::Lower => "lower is better: shown as baseline / value",
                        _ => "higher is better",
                    };
                    (g.key(), format!("{} ({dir})", c.title()))
                }
                None => plain(g),
            })
            .collect();
        push(write_bars(
            dir,
            "headline",
            &Bars {
                title: "Headline metric of the VM under test (right of 1 = better)",
                x_label: &format!("relative to {base}"),
                categories,
                series,
                reference: Some(1.0),
                palette,
                format: fmt_ratio,
            },
        ));
    }

    // What the neighbours paid.
    let cost = first(Role::Cost);
    let series = ratio_bars(summary, palette, &cost, false);
    if !series.is_empty() {
        let categories = summary
            .groups
            .iter()
            .map(|g| match cost(g) {
                Some(ci) => (g.key(), g.columns[ci].title()),
                None => plain(g),
            })
            .collect();
        push(write_bars(
            dir,
            "cost",
            &Bars {
                title: "Cost: the neighbours' own figure beside the VM under test",
                x_label: &format!("relative to {base}"),
                categories,
                series,
                reference: Some(1.0),
                palette,
                format: fmt_ratio,
            },
        ));
    }

    // Fairness: the scheduler's run time, else the guest's first rate.
    let jain = |r: &CellRecord| {
        cell_value(&r.samples, &Column::of(ALL, "jain.sched.run_ns")).or_else(|| {
            r.samples
                .iter()
                .find(|s| s.metric.starts_with("jain."))
                .map(|s| s.value)
        })
    };
    let fair = per_policy(summary, records, palette, &jain);
    if !fair.is_empty() {
        push(write_bars(
            dir,
            "fairness",
            &Bars {
                title: "Fairness: Jain's index over equal-priority vCPUs (1 = equal shares)",
                x_label: "Jain's index",
                categories: summary.groups.iter().map(plain).collect(),
                series: fair
                    .into_iter()
                    .map(|(p, v)| (p, v.into_iter().map(triple).collect()))
                    .collect(),
                reference: Some(1.0),
                palette,
                format: ratio_label,
            },
        ));
    }

    // Migrations per second.
    let migr = |r: &CellRecord| cell_value(&r.samples, &Column::of(ALL, "sched.migrations_per_s"));
    let migrations = per_policy(summary, records, palette, &migr);
    if !migrations.is_empty() {
        push(write_bars(
            dir,
            "migrations",
            &Bars {
                title: "vCPU migrations per second (all vCPUs of a cell)",
                x_label: "migrations/s",
                categories: summary.groups.iter().map(plain).collect(),
                series: migrations
                    .into_iter()
                    .map(|(p, v)| (p, v.into_iter().map(triple).collect()))
                    .collect(),
                reference: None,
                palette,
                format: |v| metrics::format_value("sched.migrations_per_s", v),
            },
        ));
    }

    // Latency exceedance curves of the VM under test, from real
    // histograms only.
    for g in &summary.groups {
        let (scope, base) = match &g.headline {
            Some(h) => {
                let scope = if h.under_test == super::headline::ALL_VMS {
                    ALL
                } else {
                    h.under_test.as_str()
                };
                let base = h
                    .metrics
                    .iter()
                    .find_map(|m| m.metric.rsplit_once('.').map(|(b, _)| b.to_string()));
                (scope, base)
            }
            None => (ALL, None),
        };
        let mut series = Vec::new();
        let mut what = String::new();
        for row in &g.rows {
            let cells: Vec<&CellRecord> =
                ok_cells(records, &g.layout, &g.workload, &row.policy).collect();
            if let Some((source, d)) = histogram_distribution(&cells, scope, base.as_deref()) {
                what = source;
                series.push((row.policy.clone(), d));
            }
        }
        if series.is_empty() {
            continue;
        }
        let who = if scope == ALL {
            String::new()
        } else {
            format!(" of {scope}")
        };
        let title = format!(
            "{}: {what}{who}, exceedance from the guest's histograms",
            g.key()
        );
        push(write_exceedance(
            dir,
            &format!("latency-{}", file_name(&g.key())),
            &Exceedance {
                title: &title,
                palette,
                series,
            },
        ));
    }
    set
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::headline::{Cost, GroupHeadline, HeadlineMetric};
    use super::super::metrics::Sample;
    use super::super::store::tests::record;
    use super::*;

    fn sample(vm: &str, vcpu: Option<u32>, metric: &str, value: f64) -> Sample {
        Sample {
            vm: vm.into(),
            group: vm.into(),
            vcpu,
            metric: metric.into(),
            value,
        }
    }

    /// Cells of two groups: "nn/sleep" (a sleep VM with histograms beside a
    /// hog) and "solo/cpu" (quantiles only, no histogram).
    pub(crate) fn cells() -> Vec<CellRecord> {
        let mut recs = Vec::new();
        for (policy, p99, units, migr) in [
            ("host", 4_000_000.0, 1000.0, 3000.0),
            ("haiku", 150_000.0, 900.0, 40.0),
            ("pinned", 9_000_000.0, 1100.0, 0.5),
        ] {
            for rep in 1..=2 {
                let f = 1.0 + rep as f64 / 20.0;
                let mut r = record(
                    &format!("nn/sleep/{policy}/r{rep}"),
                    policy,
                    CellStatus::Ok,
                    &[],
                );
                r.layout = "nn".into();
                r.workload = "sleep".into();
                r.samples = vec![
                    sample("lat", Some(0), "sleep.wake_latency.p99_ns", p99 * f),
                    sample(
                        "lat",
                        Some(0),
                        "sleep.wake_latency.histogram.bucket.1023",
                        90.0,
                    ),
                    sample(
                        "lat",
                        Some(0),
                        "sleep.wake_latency.histogram.bucket.65535",
                        9.0,
                    ),
                    sample(
                        "lat",
                        Some(0),
                        &format!("sleep.wake_latency.histogram.bucket.{}", p99 as u64),
                        1.0,
                    ),
                    sample("hog", Some(0), "cpu.units_per_s", units * f),
                    sample("hog", Some(0), "sched.migrations_per_s", migr * f),
                ];
                recs.push(r);
                let mut r = record(
                    &format!("solo/cpu/{policy}/r{rep}"),
                    policy,
                    CellStatus::Ok,
                    &[units, units],
                );
                r.layout = "solo".into();
                r.workload = "cpu".into();
                r.samples
                    .push(sample("a", Some(0), "sched.wake_latency.p99_ns", 5000.0));
                recs.push(r);
            }
        }
        recs
    }

    pub(crate) fn headline(layout: &str, _: &str) -> Option<GroupHeadline> {
        Some(match layout {
            "nn" => GroupHeadline {
                under_test: "lat".into(),
                metrics: vec![HeadlineMetric::named("sleep.wake_latency.p99_ns")],
                costs: vec![Cost::new("hog", HeadlineMetric::named("cpu.units_per_s"))],
            },
            _ => GroupHeadline {
                under_test: "all".into(),
                metrics: vec![HeadlineMetric::named("cpu.units_per_s")],
                costs: Vec::new(),
            },
        })
    }

    #[test]
    fn charts_are_written_and_not_empty() {
        let dir = std::env::temp_dir().join(format!("pacer-plots-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let recs = cells();
        let summary = Summary::build(&recs, &[], &["host".into()], &headline);
        let set = write_all(&summary, &recs, &dir);
        if let Some(why) = set
            .skipped
            .as_deref()
            .filter(|w| w.contains("no TrueType font"))
        {
            println!("SKIPPED: {why}");
            return;
        }
        assert_eq!(set.skipped, None);
        let names: Vec<&str> = set.plots.iter().map(|p| p.svg.as_str()).collect();
        for n in [
            "headline",
            "cost",
            "fairness",
            "migrations",
            "latency-nn_sleep",
        ] {
            assert!(
                names.contains(&format!("plots/{n}.svg").as_str()),
                "{n}: {names:?}"
            );
        }
        // No CDF from quantiles: the solo group has no histogram.
        assert!(!names.iter().any(|n| n.contains("solo")), "{names:?}");
        for p in &set.plots {
            let svg =
                std::fs::read_to_string(dir.join(p.svg.trim_start_matches("plots/"))).unwrap();
            assert!(
                svg.starts_with("<svg") && svg.contains("haiku"),
                "{}",
                p.svg
            );
            let png = std::fs::read(dir.join(p.png.trim_start_matches("plots/"))).unwrap();
            assert_eq!(&png[1..4], b"PNG");
            assert!(png.len() > 5000, "{} is {} bytes", p.png, png.len());
        }
        // Latency as an exceedance curve: 1 - quantile on a log axis.
        let lat = std::fs::read_to_string(dir.join("latency-nn_sleep.svg")).unwrap();
        assert!(lat.contains("1 - quantile (log scale)"), "linear CDF axis");
        assert!(lat.contains("(p99)"), "no percentile labels");
        // Migrations span four decades: a log scale.
        let migr = std::fs::read_to_string(dir.join("migrations.svg")).unwrap();
        assert!(migr.contains("log scale"), "migrations axis is linear");
        if std::env::var_os("PACER_KEEP_PLOTS").is_none() {
            std::fs::remove_dir_all(&dir).unwrap();
        } else {
            println!("plots kept in {}", dir.display());
        }
    }

    fn dist(points: &[(f64, f64)], total: f64) -> (String, Distribution) {
        (
            "p".into(),
            Distribution {
                points: points.to_vec(),
                total,
            },
        )
    }

    #[test]
    fn exceedance_axes_come_from_the_data() {
        let a = dist(&[(2000.0, 0.5), (8000.0, 0.9), (64_000.0, 1.0)], 1000.0);
        let b = dist(&[(4000.0, 0.2), (1_000_000.0, 1.0)], 50.0);
        let (x, y) = exceedance_axes(&[a.clone(), b]);
        // x: the lowest and highest bucket end, a quarter beyond.
        assert_eq!(x, 2000.0 / AXIS_PAD..1_000_000.0 * AXIS_PAD);
        // No empty decade on either side.
        assert!(x.start > 2000.0 / 10.0 && x.end < 1_000_000.0 * 10.0);
        // y: down to one sample of the largest total, up to 1.
        assert_eq!(y, 0.001 / AXIS_PAD..AXIS_PAD);
        // Other data, other axes: nothing fixed (no 10 ns start).
        let (x, y) = exceedance_axes(&[a]);
        assert_eq!(x, 2000.0 / AXIS_PAD..64_000.0 * AXIS_PAD);
        assert_eq!(y.start, 0.001 / AXIS_PAD);
        let (x, y) = exceedance_axes(&[dist(&[(3_000_000.0, 1.0)], 1.0)]);
        assert_eq!(x, 3_000_000.0 / AXIS_PAD..3_000_000.0 * AXIS_PAD);
        assert_eq!(y.start, 0.5);
    }

    #[test]
    fn exceedance_steps_down_from_one_at_each_bucket() {
        let (_, d) = dist(&[(1000.0, 0.5), (2000.0, 0.99), (4000.0, 1.0)], 100.0);
        let steps = exceedance_steps(&d, 800.0, 0.008);
        let want = [
            (800.0, 1.0),
            (1000.0, 1.0),
            (1000.0, 0.5),
            (2000.0, 0.5),
            (2000.0, 0.01),
            (4000.0, 0.01),
            (4000.0, 0.008),
        ];
        assert_eq!(steps.len(), want.len());
        for (got, want) in steps.iter().zip(want) {
            assert!(
                (got.0 - want.0).abs() < 1e-9 && (got.1 - want.1).abs() < 1e-9,
                "{steps:?}"
            );
        }
        assert_eq!(exceedance_label(0.01), "0.01 (p99)");
        assert_eq!(exceedance_label(0.001), "0.001 (p99.9)");
        assert_eq!(exceedance_label(0.5), "0.5 (p50)");
        assert_eq!(exceedance_label(1.0), "1");
    }

    #[test]
    fn ratio_labels_keep_their_digits() {
        let labels: Vec<String> = [0.001, 0.05, 0.5, 1.0, 1.2, 10.0, 0.0]
            .into_iter()
            .map(ratio_label)
            .collect();
        assert_eq!(labels, ["0.001", "0.05", "0.5", "1", "1.2", "10", "0"]);
    }

    #[test]
    fn lower_is_better_bars_are_turned() {
        let recs = cells();
        let summary = Summary::build(&recs, &[], &["host".into()], &headline);
        let palette: Vec<String> = ["host", "haiku", "pinned"].map(String::from).to_vec();
        let col = |g: &GroupSummary| g.columns.iter().position(|c| c.role == Role::Headline);
        let bars = ratio_bars(&summary, &palette, &col, true);
        let haiku = bars.iter().find(|(p, _)| p == "haiku").unwrap();
        let (med, lo, hi) = haiku.1[0].unwrap();
        // host's p99 over haiku's: about 26x, whiskers ordered.
        assert!((med - 4_000_000.0 / 150_000.0).abs() < 1.0, "{med}");
        assert!(lo <= med && med <= hi, "{lo} {med} {hi}");
        let pinned = bars.iter().find(|(p, _)| p == "pinned").unwrap();
        assert!(pinned.1[0].unwrap().0 < 1.0);
    }
}
