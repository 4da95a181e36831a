//! The one-page HTML report (`report.html`, its plots in `plots/` beside
//! it): per (layout, workload) a table of every policy's headline metrics
//! with the best one of each column marked, the ratios to the baselines,
//! the charts, every cell with its status and error, the matrix file, the
//! host's topology and the versions of what ran. Self-contained apart from
//! the plot files; no scripts.

use super::matrix::Matrix;
use super::metrics::{self, Better};
use super::plots::PlotSet;
use super::store::{CellRecord, CellStatus};
use super::summary::{GroupSummary, Summary};
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// File name of the report.
pub const REPORT: &str = "report.html";

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// HTML-escape text.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// The best median of column `ci` (by the metric's direction).
fn best_value(g: &GroupSummary, ci: usize) -> Option<f64> {
    let vals = g.rows.iter().filter_map(|r| Some(r.values[ci]?.median));
    match metrics::info(&g.columns[ci].metric).better {
        Better::Higher => vals.reduce(f64::max),
        Better::Lower => vals.reduce(f64::min),
        Better::Neither => None,
    }
}

/// "policy (ratio)" of every row whose median is the best of column `ci`.
fn winners(g: &GroupSummary, ci: usize) -> Vec<&str> {
    let Some(best) = best_value(g, ci) else {
        return Vec::new();
    };
    g.rows
        .iter()
        .filter(|r| r.values[ci].is_some_and(|s| s.median == best))
        .map(|r| r.policy.as_str())
        .collect()
}

/// One line per group: the best policy of each column.
fn at_a_glance(out: &mut String, summary: &Summary) {
    out.push_str("<h2>At a glance</h2>\n<table><tr><th>layout / workload</th><th>best policy per metric</th></tr>\n");
    for g in &summary.groups {
        let items: Vec<String> = (0..g.columns.len())
            .filter_map(|ci| {
                let w = winners(g, ci);
                (!w.is_empty() && w.len() < g.rows.iter().filter(|r| r.ok > 0).count()).then(|| {
                    let ratio = summary
                        .baselines
                        .first()
                        .and_then(|b| {
                            let r = g.row(w[0])?.ratios[ci].first().copied().flatten()?;
                            (w[0] != b).then(|| format!(", {r:.2}&times; {}", esc(b)))
                        })
                        .unwrap_or_default();
                    format!(
                        "{}: <b>{}</b>{ratio}",
                        esc(&g.columns[ci].title()),
                        esc(&w.join(", "))
                    )
                })
            })
            .collect();
        let text = if items.is_empty() {
            g.rows
                .iter()
                .find_map(|r| r.not_applicable.first().or(r.failures.first()))
                .map(|w| format!("<span class=\"na\">no results: {}</span>", esc(w)))
                .unwrap_or_else(|| "no results".into())
        } else {
            items.join(" &middot; ")
        };
        let _ = writeln!(
            out,
            "<tr><td>{} / {}</td><td style=\"text-align:left\">{text}</td></tr>",
            esc(&g.layout),
            esc(&g.workload)
        );
    }
    out.push_str("</table>\n");
}

fn group_table(out: &mut String, g: &GroupSummary, baselines: &[String]) {
    let _ = write!(out, "<table><tr><th>policy</th><th>cells ok</th>");
    for c in &g.columns {
        let arrow = match metrics::info(&c.metric).better {
            Better::Higher => " &uarr;",
            Better::Lower => " &darr;",
            Better::Neither => "",
        };
        let _ = write!(out, "<th>{}{arrow}</th>", esc(&c.title()));
    }
    out.push_str("</tr>\n");
    let best: Vec<Option<f64>> = (0..g.columns.len()).map(|ci| best_value(g, ci)).collect();
    for row in &g.rows {
        let _ = write!(
            out,
            "<tr><td><b>{}</b></td><td>{}/{}</td>",
            esc(&row.policy),
            row.ok,
            row.total
        );
        if row.ok == 0 {
            let why = row
                .not_applicable
                .first()
                .map(|w| format!("n/a ({w})"))
                .or_else(|| row.failures.first().cloned())
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "<td colspan=\"{}\" class=\"na\">{}</td></tr>",
                g.columns.len().max(1),
                esc(&why)
            );
            continue;
        }
        for (ci, col) in g.columns.iter().enumerate() {
            let Some(st) = row.values[ci] else {
                out.push_str("<td>-</td>");
                continue;
            };
            let f = |v| metrics::format_value(&col.metric, v);
            let ratios: Vec<String> = baselines
                .iter()
                .zip(&row.ratios[ci])
                .filter(|(b, _)| **b != row.policy)
                .filter_map(|(b, r)| r.map(|r| format!("{r:.2}&times; {}", esc(b))))
                .collect();
            let class = if best[ci] == Some(st.median) {
                " class=\"best\""
            } else {
                ""
            };
            let _ = write!(
                out,
                "<td{class}>{}<br><small>{} &ndash; {}{}</small></td>",
                f(st.median),
                f(st.min),
                f(st.max),
                if ratios.is_empty() {
                    String::new()
                } else {
                    format!("<br>{}", ratios.join(", "))
                }
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    for row in &g.rows {
        for f in &row.failures {
            let _ = writeln!(
                out,
                "<p class=\"fail\">{}: {}</p>",
                esc(&row.policy),
                esc(f)
            );
        }
        if row.ok > 0 {
            for w in &row.not_applicable {
                let _ = writeln!(
                    out,
                    "<p class=\"na\">{}: n/a ({})</p>",
                    esc(&row.policy),
                    esc(w)
                );
            }
        }
    }
}

fn first_line(path: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// Host facts for the report.
fn host_section(m: &Matrix) -> String {
    let topo = vcpu_sched::Topology::from_sysfs()
        .map(|t| t.describe())
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let cpu = first_line("/proc/cpuinfo", "model name").unwrap_or_default();
    format!(
        "<p>CPU: {} &middot; Linux {} &middot; cells ran on CPUs {}</p><pre>{}</pre>",
        esc(&cpu),
        esc(&kernel),
        esc(&m.host_cpus.to_list()),
        esc(&topo)
    )
}

/// Write `report.html` into `dir`; returns its path.
pub fn write(
    m: &Matrix,
    summary: &Summary,
    records: &[CellRecord],
    plots: &PlotSet,
    qemu_version: Option<String>,
    dir: &Path,
) -> Result<PathBuf, ReportError> {
    let mut h = String::new();
    let title = format!("Pacer bench: {}", m.name);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\n<style>\
         body{{font-family:sans-serif;margin:1.5em;max-width:1200px}}\
         table{{border-collapse:collapse;margin:.5em 0}}\
         td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:right;vertical-align:top}}\
         th{{background:#eee}} td:first-child{{text-align:left}}\
         td.best{{background:#d8f5d0}} .na{{color:#777}} .fail{{color:#b00}}\
         small{{color:#555}} img{{max-width:100%;border:1px solid #ddd;margin:.3em 0}}\
         pre{{background:#f6f6f6;padding:.6em;overflow-x:auto}}\
         </style></head><body>\n<h1>{t}</h1>\n",
        t = esc(&title)
    );
    if !m.description.is_empty() {
        let _ = writeln!(h, "<p>{}</p>", esc(&m.description));
    }
    let ok = records
        .iter()
        .filter(|r| r.status == CellStatus::Ok)
        .count();
    let na = records
        .iter()
        .filter(|r| r.status == CellStatus::NotApplicable)
        .count();
    let wall: f64 = records.iter().map(|r| r.wall_s).sum();
    let _ = writeln!(
        h,
        "<p>{} cells recorded: {ok} ok, {na} n/a, {} failed or timed out; {:.0} s of cell time. \
         Medians over repetitions, min&ndash;max below; green = best policy of a column \
         (&uarr; higher is better, &darr; lower); ratios are to the baseline{} {}.</p>",
        records.len(),
        records.len() - ok - na,
        wall,
        if summary.baselines.len() > 1 { "s" } else { "" },
        esc(&summary.baselines.join(", "))
    );
    at_a_glance(&mut h, summary);
    h.push_str("<h2>Results</h2>\n");
    for g in &summary.groups {
        let desc = m
            .layouts
            .iter()
            .find(|l| l.name == g.layout)
            .map(|l| l.describe())
            .unwrap_or_default();
        let _ = writeln!(
            h,
            "<h3>{} / {}</h3><p><small>{}</small></p>",
            esc(&g.layout),
            esc(&g.workload),
            esc(&desc)
        );
        group_table(&mut h, g, &summary.baselines);
    }
    h.push_str("<h2>Plots</h2>\n");
    if let Some(why) = &plots.skipped {
        let _ = writeln!(
            h,
            "<p class=\"fail\">Some plots were not drawn: {}</p>",
            esc(why)
        );
    }
    for p in &plots.plots {
        let _ = writeln!(
            h,
            "<figure><img src=\"{}\" alt=\"{t}\"><figcaption>{t} (<a href=\"{}\">PNG</a>)</figcaption></figure>",
            esc(&p.svg),
            esc(&p.png),
            t = esc(&p.title)
        );
    }
    h.push_str("<h2>Cells</h2>\n<table><tr><th>cell</th><th>status</th><th>wall</th><th>error / reason</th></tr>\n");
    for r in records {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{:.1} s</td><td style=\"text-align:left\">{}</td></tr>",
            esc(&r.id),
            r.status.as_str(),
            r.wall_s,
            esc(&r.error)
        );
    }
    h.push_str("</table>\n<h2>Host</h2>\n");
    h.push_str(&host_section(m));
    h.push_str("<h2>Versions</h2>\n<ul>");
    let _ = write!(h, "<li>pacer {}</li>", env!("CARGO_PKG_VERSION"));
    let guest = std::fs::metadata(&m.kernel)
        .map(|md| format!("{} bytes", md.len()))
        .unwrap_or_default();
    let _ = write!(
        h,
        "<li>bench guest {} ({guest})</li>",
        esc(&m.kernel.display().to_string())
    );
    let _ = writeln!(
        h,
        "<li>QEMU: {}</li></ul>",
        esc(&qemu_version.unwrap_or_else(|| "not used".into()))
    );
    let matrix_text = std::fs::read_to_string(&m.path).unwrap_or_default();
    let _ = writeln!(
        h,
        "<h2>Matrix</h2>\n<p>{}</p><pre>{}</pre>\n<p>Data: <a href=\"results.jsonl\">results.jsonl</a>, \
         <a href=\"results.csv\">results.csv</a>, <a href=\"summary.json\">summary.json</a>; VM logs in logs/.</p>\n</body></html>",
        esc(&m.path.display().to_string()),
        esc(&matrix_text)
    );
    let path = dir.join(REPORT);
    std::fs::write(&path, h).map_err(|source| ReportError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}
