//! The report's charts, each as SVG and PNG (plotters): throughput per
//! policy relative to the baseline (bars, min-max whiskers), fairness
//! (Jain's index) per policy, migrations per second per policy, and per
//! (layout, workload) the wake-latency CDF of each policy.
//!
//! The latency CDF comes from the guest's histograms when it sends them
//! (`*.bucket.*` samples), else from the quantiles it has (p50, p99, max;
//! the guest's own latency metrics first, the scheduler's wake latency
//! otherwise), drawn as a CDF through those points.
//!
//! Text is drawn with ab_glyph from a TrueType font found at run time (no
//! font-kit or freetype): Debian's fonts-dejavu-core, which ci/install.sh
//! installs. Without a font the plots are skipped and the report says why.

use super::metrics;
use super::store::{CellRecord, CellStatus};
use super::summary::{cell_value, Column, Stat, Summary, ALL};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::BTreeMap;
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

/// Bars: per category, one bar per series with a min-max whisker.
struct Bars<'a> {
    title: &'a str,
    y_label: &'a str,
    categories: Vec<String>,
    series: Vec<BarSeries>,
    /// Every policy of the run, so a policy has one colour in every chart.
    palette: &'a [String],
    /// A horizontal reference line (1.0 for ratios).
    reference: Option<f64>,
}

/// The colour of a policy: its place in the run's policy list.
pub(crate) fn colour(palette: &[String], name: &str) -> RGBAColor {
    let i = palette
        .iter()
        .position(|p| p == name)
        .unwrap_or(palette.len());
    Palette99::pick(i).to_rgba()
}

fn draw_bars<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, b: &Bars<'_>) -> Result<(), String> {
    root.fill(&WHITE).map_err(e)?;
    // Categories without any bar are left out.
    let keep: Vec<usize> = (0..b.categories.len())
        .filter(|&ci| {
            b.series
                .iter()
                .any(|(_, v)| v.get(ci).is_some_and(Option::is_some))
        })
        .collect();
    let categories: Vec<&String> = keep.iter().map(|&ci| &b.categories[ci]).collect();
    let series: Vec<(&String, Vec<Option<Bar>>)> = b
        .series
        .iter()
        .map(|(n, v)| (n, keep.iter().map(|&ci| v[ci]).collect()))
        .collect();
    let y_max = series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().map(|x| x.2.max(x.0)))
        .chain(b.reference)
        .fold(0.0f64, f64::max)
        * 1.4;
    let y_max = if y_max > 0.0 { y_max } else { 1.0 };
    let n = categories.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(b.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(10)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n, 0.0..y_max)
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(b.y_label)
        .y_label_formatter(&|v| format!("{v:.3}"))
        .draw()
        .map_err(e)?;
    let k = series.len().max(1) as f64;
    let w = 0.8 / k;
    for (si, (name, values)) in series.iter().enumerate() {
        let color = colour(b.palette, name);
        let rects = values.iter().enumerate().filter_map(|(ci, v)| {
            let (med, _, _) = (*v)?;
            let x0 = ci as f64 + 0.1 + si as f64 * w;
            Some(Rectangle::new(
                [(x0, 0.0), (x0 + w * 0.9, med)],
                color.filled(),
            ))
        });
        chart
            .draw_series(rects)
            .map_err(e)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        let whiskers = values.iter().enumerate().filter_map(|(ci, v)| {
            let (med, lo, hi) = (*v)?;
            let x = ci as f64 + 0.1 + si as f64 * w + w * 0.45;
            Some(ErrorBar::new_vertical(
                x,
                lo,
                med,
                hi,
                BLACK.stroke_width(1),
                6,
            ))
        });
        chart.draw_series(whiskers).map_err(e)?;
    }
    if let Some(r) = b.reference {
        chart
            .draw_series(LineSeries::new([(0.0, r), (n, r)], BLACK.stroke_width(1)))
            .map_err(e)?;
    }
    let labels = categories.iter().enumerate().map(|(ci, c)| {
        Text::new(
            c.to_string(),
            (ci as f64 + 0.1, y_max * 0.97),
            ("sans-serif", 14).into_font().color(&BLACK),
        )
    });
    chart.draw_series(labels).map_err(e)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)
}

/// CDF lines: per series, points (ns, fraction).
struct Cdf<'a> {
    title: &'a str,
    palette: &'a [String],
    series: Vec<(String, Vec<(f64, f64)>)>,
}

fn draw_cdf<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &Cdf<'_>) -> Result<(), String> {
    root.fill(&WHITE).map_err(e)?;
    let xs = c.series.iter().flat_map(|(_, p)| p.iter().map(|x| x.0));
    let lo = xs.clone().fold(f64::MAX, f64::min).max(1.0);
    let hi = xs.fold(1.0f64, f64::max).max(lo * 10.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(c.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((lo / 2.0..hi * 2.0).log_scale(), 0.0..1.02)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("latency")
        .y_desc("fraction of wakes <=")
        .x_label_formatter(&|v| metrics::format_value("latency_ns", *v))
        .draw()
        .map_err(e)?;
    for (name, points) in &c.series {
        let color = colour(c.palette, name);
        // A step function: each fraction holds until the next latency.
        let mut steps = Vec::with_capacity(points.len() * 2 + 1);
        let mut prev = 0.0;
        steps.push((lo / 2.0, 0.0));
        for &(x, y) in points {
            steps.push((x, prev));
            steps.push((x, y));
            prev = y;
        }
        chart
            .draw_series(LineSeries::new(steps, color.stroke_width(2)))
            .map_err(e)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)
}

const SIZE: (u32, u32) = (960, 480);

fn plot(name: &str, title: &str) -> Plot {
    Plot {
        title: title.to_string(),
        svg: format!("plots/{name}.svg"),
        png: format!("plots/{name}.png"),
    }
}

/// Write `name`.svg and `name`.png of a bar chart in `dir`.
fn write_bars(dir: &Path, name: &str, b: &Bars<'_>) -> Result<Plot, String> {
    let (svg, png) = (
        dir.join(format!("{name}.svg")),
        dir.join(format!("{name}.png")),
    );
    draw_bars(SVGBackend::new(&svg, SIZE).into_drawing_area(), b)?;
    draw_bars(BitMapBackend::new(&png, SIZE).into_drawing_area(), b)?;
    Ok(plot(name, b.title))
}

/// Write `name`.svg and `name`.png of a CDF chart in `dir`.
fn write_cdf(dir: &Path, name: &str, c: &Cdf<'_>) -> Result<Plot, String> {
    let (svg, png) = (
        dir.join(format!("{name}.svg")),
        dir.join(format!("{name}.png")),
    );
    draw_cdf(SVGBackend::new(&svg, SIZE).into_drawing_area(), c)?;
    draw_cdf(BitMapBackend::new(&png, SIZE).into_drawing_area(), c)?;
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

/// Per policy, per group: the stat of `col` over ok cells.
fn per_policy(
    summary: &Summary,
    records: &[CellRecord],
    pick: &dyn Fn(&CellRecord) -> Option<f64>,
) -> Vec<(String, Vec<Option<Stat>>)> {
    let mut policies: Vec<String> = Vec::new();
    for g in &summary.groups {
        for r in &g.rows {
            if !policies.contains(&r.policy) {
                policies.push(r.policy.clone());
            }
        }
    }
    policies
        .into_iter()
        .map(|p| {
            let per_group = summary
                .groups
                .iter()
                .map(|g| {
                    let v: Vec<f64> = ok_cells(records, &g.layout, &g.workload, &p)
                        .filter_map(pick)
                        .collect();
                    Stat::of(&v)
                })
                .collect();
            (p, per_group)
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

/// The latency CDF points of one policy's cells in a group.
fn latency_points(cells: &[&CellRecord]) -> Option<(String, Vec<(f64, f64)>)> {
    // Histograms first.
    let mut buckets: BTreeMap<(String, u64), f64> = BTreeMap::new();
    for c in cells {
        for s in &c.samples {
            if let Some((base, hi)) = s.metric.split_once(".bucket.") {
                if let Ok(hi) = hi.parse::<u64>() {
                    *buckets.entry((base.to_string(), hi)).or_default() += s.value;
                }
            }
        }
    }
    if let Some(((base, _), _)) = buckets.iter().next() {
        let base = base.clone();
        let mine: Vec<(u64, f64)> = buckets
            .iter()
            .filter(|((b, _), _)| *b == base)
            .map(|((_, hi), n)| (*hi, *n))
            .collect();
        let total: f64 = mine.iter().map(|x| x.1).sum();
        if total > 0.0 {
            let mut cum = 0.0;
            let points = mine
                .into_iter()
                .map(|(hi, n)| {
                    cum += n;
                    (hi as f64, cum / total)
                })
                .collect();
            return Some((format!("{base} (histogram)"), points));
        }
    }
    // Else quantiles: the guest's latency metrics, then the scheduler's.
    let names: Vec<&str> = cells
        .iter()
        .flat_map(|c| c.samples.iter().map(|s| s.metric.as_str()))
        .collect();
    let guest = names
        .iter()
        .find(|m| !m.starts_with("sched.") && m.ends_with(".p99_ns"))
        .map(|m| m.trim_end_matches(".p99_ns").to_string());
    let (base, keys) = match guest {
        Some(b) => (b, ["p50_ns", "p99_ns", "max_ns"]),
        None if names.contains(&"sched.wake_latency_ns.p99") => {
            ("sched.wake_latency_ns".to_string(), ["p50", "p99", "max"])
        }
        None => return None,
    };
    let mut points = Vec::new();
    for (key, frac) in keys.iter().zip([0.5, 0.99, 1.0]) {
        let col = Column {
            scope: ALL.into(),
            metric: format!("{base}.{key}"),
        };
        let v: Vec<f64> = cells
            .iter()
            .filter_map(|c| cell_value(&c.samples, &col))
            .collect();
        if let Some(s) = Stat::of(&v) {
            points.push((s.median.max(1.0), frac));
        }
    }
    (!points.is_empty()).then(|| (format!("{base} (p50, p99, max)"), points))
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
    let categories: Vec<String> = summary.groups.iter().map(|g| g.key()).collect();
    let mut palette: Vec<String> = Vec::new();
    for r in summary.groups.iter().flat_map(|g| &g.rows) {
        if !palette.contains(&r.policy) {
            palette.push(r.policy.clone());
        }
    }
    let palette = &palette;

    // Throughput relative to the baseline (or to the best policy): the
    // guest's first rate, or the suite's index.
    let rate = |g: &super::summary::GroupSummary| {
        g.columns
            .iter()
            .find(|c| {
                (c.metric.ends_with("_per_s") && !c.metric.starts_with("sched."))
                    || c.metric.starts_with("unixbench.index.")
            })
            .cloned()
    };
    let norms: Vec<Option<f64>> = summary
        .groups
        .iter()
        .map(|g| {
            let ci = g.columns.iter().position(|c| Some(c) == rate(g).as_ref())?;
            let base = summary
                .baselines
                .iter()
                .find_map(|b| g.row(b).and_then(|r| r.values[ci]))
                .map(|s| s.median);
            base.or_else(|| {
                g.rows
                    .iter()
                    .filter_map(|r| r.values[ci].map(|s| s.median))
                    .reduce(f64::max)
            })
            .filter(|v| *v > 0.0)
        })
        .collect();
    if norms.iter().any(Option::is_some) {
        let series: Vec<BarSeries> = palette
            .iter()
            .map(|p| {
                let v = summary
                    .groups
                    .iter()
                    .zip(&norms)
                    .map(|(g, norm)| {
                        let col = rate(g)?;
                        let ci = g.column_index(&col.scope, &col.metric)?;
                        let s = g.row(p)?.values[ci]?;
                        let n = (*norm)?;
                        Some((s.median / n, s.min / n, s.max / n))
                    })
                    .collect();
                (p.clone(), v)
            })
            .filter(|(_, v): &BarSeries| v.iter().any(Option::is_some))
            .collect();
        let base = summary
            .baselines
            .first()
            .map_or("the best policy", String::as_str);
        push(write_bars(
            dir,
            "throughput",
            &Bars {
                title: "Guest throughput (median, min-max whiskers)",
                y_label: &format!("relative to {base}"),
                categories: categories.clone(),
                series,
                reference: Some(1.0),
                palette,
            },
        ));
    }

    // Fairness: the scheduler's run time, else the guest's first rate.
    let jain = |r: &CellRecord| {
        let get = |m: &str| {
            cell_value(
                &r.samples,
                &Column {
                    scope: ALL.into(),
                    metric: m.into(),
                },
            )
        };
        get("jain.sched.run_ns").or_else(|| {
            r.samples
                .iter()
                .find(|s| s.metric.starts_with("jain."))
                .map(|s| s.value)
        })
    };
    let fair = per_policy(summary, records, &jain);
    if !fair.is_empty() {
        push(write_bars(
            dir,
            "fairness",
            &Bars {
                title: "Fairness: Jain's index over equal-priority vCPUs (1 = equal shares)",
                y_label: "Jain's index",
                categories: categories.clone(),
                series: fair
                    .into_iter()
                    .map(|(p, v)| (p, v.into_iter().map(triple).collect()))
                    .collect(),
                reference: Some(1.0),
                palette,
            },
        ));
    }

    // Migrations per second.
    let migr = |r: &CellRecord| {
        cell_value(
            &r.samples,
            &Column {
                scope: ALL.into(),
                metric: "sched.migrations_per_s".into(),
            },
        )
    };
    let migrations = per_policy(summary, records, &migr);
    if !migrations.is_empty() {
        push(write_bars(
            dir,
            "migrations",
            &Bars {
                title: "vCPU migrations per second (all vCPUs of a cell)",
                y_label: "migrations/s",
                categories,
                series: migrations
                    .into_iter()
                    .map(|(p, v)| (p, v.into_iter().map(triple).collect()))
                    .collect(),
                reference: None,
                palette,
            },
        ));
    }

    // Latency CDFs per group.
    for g in &summary.groups {
        let mut series = Vec::new();
        let mut what = String::new();
        for row in &g.rows {
            let cells: Vec<&CellRecord> =
                ok_cells(records, &g.layout, &g.workload, &row.policy).collect();
            if let Some((source, points)) = latency_points(&cells) {
                what = source;
                series.push((row.policy.clone(), points));
            }
        }
        if series.is_empty() {
            continue;
        }
        let title = format!("{}: latency CDF, {what}", g.key());
        push(write_cdf(
            dir,
            &format!("latency-{}", file_name(&g.key())),
            &Cdf {
                title: &title,
                palette,
                series,
            },
        ));
    }
    set
}

#[cfg(test)]
mod tests {
    use super::super::metrics::Sample;
    use super::super::store::tests::record;
    use super::*;

    #[test]
    fn charts_are_written_and_not_empty() {
        let dir = std::env::temp_dir().join(format!("pacer-plots-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut recs = Vec::new();
        for (policy, units, p99) in [("host", 100.0, 50_000.0), ("haiku", 95.0, 8_000.0)] {
            for rep in 1..=2 {
                let mut r = record(
                    &format!("l/w/{policy}/r{rep}"),
                    policy,
                    CellStatus::Ok,
                    &[units + rep as f64, units],
                );
                for (vcpu, (m, v)) in [
                    ("sched.migrations_per_s", 3.0),
                    ("sched.wake_latency_ns.p50", 1000.0),
                    ("sched.wake_latency_ns.p99", p99),
                    ("sched.wake_latency_ns.max", p99 * 2.0),
                ]
                .into_iter()
                .enumerate()
                {
                    r.samples.push(Sample {
                        vm: "a".into(),
                        group: "a".into(),
                        vcpu: Some(vcpu as u32 % 2),
                        metric: m.into(),
                        value: v,
                    });
                }
                recs.push(r);
            }
        }
        let summary = Summary::build(&recs, &[], &["host".into()]);
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
        assert!(names.contains(&"plots/throughput.svg"), "{names:?}");
        assert!(names.contains(&"plots/fairness.svg"), "{names:?}");
        assert!(names.contains(&"plots/migrations.svg"), "{names:?}");
        assert!(
            names.iter().any(|n| n.starts_with("plots/latency-")),
            "{names:?}"
        );
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
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
