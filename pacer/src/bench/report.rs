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
use super::summary::{GroupSummary, Role, Summary};
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

/// The first baseline's ratio of `policy` in column `ci`, as text.
fn ratio_text(summary: &Summary, g: &GroupSummary, ci: usize, policy: &str) -> String {
    summary
        .baselines
        .first()
        .filter(|b| b.as_str() != policy)
        .and_then(|b| {
            let r = g.row(policy)?.ratios[ci].first().copied().flatten()?;
            Some(format!(" ({r:.2}&times; {})", esc(b)))
        })
        .unwrap_or_default()
}

/// One line per group: the VM under test's headline and who did best
/// (only when the ranges say so), then what the neighbours paid.
fn at_a_glance(out: &mut String, summary: &Summary) {
    out.push_str("<h2>At a glance</h2>\n<table class=\"glance\"><tr><th>layout / workload</th><th>under test</th><th>headline</th><th>cost to the neighbours</th></tr>\n");
    for g in &summary.groups {
        let no_results = || {
            g.rows
                .iter()
                .find_map(|r| r.not_applicable.first().or(r.failures.first()))
                .map(|w| format!("<span class=\"na\">no results: {}</span>", esc(w)))
                .unwrap_or_else(|| "no results".into())
        };
        let mut headline = Vec::new();
        let mut leader: Option<&str> = None;
        for (ci, col) in g.columns.iter().enumerate() {
            if col.role != Role::Headline {
                continue;
            }
            let text = match &g.best[ci] {
                Some(b) => {
                    let v = g
                        .row(&b.leader)
                        .and_then(|r| r.values[ci])
                        .map(|st| metrics::format_value(&col.metric, st.median))
                        .unwrap_or_default();
                    let ratio = ratio_text(summary, g, ci, &b.leader);
                    leader.get_or_insert(&b.leader);
                    if b.clear {
                        format!("best: <b>{}</b> {v}{ratio}", esc(&b.leader))
                    } else {
                        format!(
                            "<span class=\"na\">{}</span> ({} {v}{ratio})",
                            esc(b.verdict.split(':').next().unwrap_or("")),
                            esc(&b.leader)
                        )
                    }
                }
                // No direction, or one policy: the figures themselves.
                None if g.rows.iter().any(|r| r.values[ci].is_some()) => g
                    .rows
                    .iter()
                    .filter_map(|r| {
                        let st = r.values[ci]?;
                        Some(format!(
                            "{} {}",
                            esc(&r.policy),
                            metrics::format_value(&col.metric, st.median)
                        ))
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                None => continue,
            };
            headline.push(format!(
                "{}{}: {text}",
                esc(&col.title()),
                arrow(col.better)
            ));
        }
        let cost: Vec<String> = g
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.role == Role::Cost)
            .filter_map(|(ci, c)| {
                let p = leader?;
                let v = g.row(p)?.values[ci]?;
                Some(format!(
                    "{}: {} {}{}",
                    esc(&c.title()),
                    esc(p),
                    metrics::format_value(&c.metric, v.median),
                    ratio_text(summary, g, ci, p)
                ))
            })
            .collect();
        let under = g
            .headline
            .as_ref()
            .map(|h| h.under_test.clone())
            .unwrap_or_default();
        let headline = if headline.is_empty() {
            no_results()
        } else {
            headline.join("<br>")
        };
        let _ = writeln!(
            out,
            "<tr><td>{} / {}</td><td>{}</td><td style=\"text-align:left\">{headline}</td><td style=\"text-align:left\">{}</td></tr>",
            esc(&g.layout),
            esc(&g.workload),
            esc(&under),
            cost.join("<br>")
        );
    }
    out.push_str("</table>\n");
}

fn arrow(b: Better) -> &'static str {
    match b {
        Better::Higher => " &uarr;",
        Better::Lower => " &darr;",
        Better::Neither => "",
    }
}

fn group_table(out: &mut String, g: &GroupSummary, baselines: &[String]) {
    if let Some(h) = &g.headline {
        let _ = writeln!(out, "<p>{}</p>", esc(&h.describe()));
    }
    let _ = write!(out, "<table><tr><th>policy</th><th>cells ok</th>");
    for c in &g.columns {
        let class = match c.role {
            Role::Headline => " class=\"headline\"",
            Role::Cost => " class=\"cost\"",
            Role::Detail => "",
        };
        let role = match c.role {
            Role::Headline => "headline: ",
            Role::Cost => "cost: ",
            Role::Detail => "",
        };
        let _ = write!(
            out,
            "<th{class}>{role}{}{}</th>",
            esc(&c.title()),
            arrow(c.better)
        );
    }
    out.push_str("</tr>\n");
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
            let class = match &g.best[ci] {
                Some(b) if b.clear && b.leader == row.policy => " class=\"best\"",
                _ => "",
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
    if let Some(v) = &g.verdict {
        let _ = writeln!(out, "<p><b>{}</b></p>", esc(v));
    }
    for b in g.best.iter().flatten() {
        let _ = writeln!(out, "<p><small>{}</small></p>", esc(&b.verdict));
    }
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
    write_with_hosts(m, summary, records, plots, qemu_version, None, dir)
}

/// [`write`], with `hosts` (a merge's hosts side by side, HTML) before
/// the results and in place of this host's section.
pub fn write_with_hosts(
    m: &Matrix,
    summary: &Summary,
    records: &[CellRecord],
    plots: &PlotSet,
    qemu_version: Option<String>,
    hosts: Option<&str>,
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
         th.headline{{background:#cfe3ff}} th.cost{{background:#f3e3c8}} table.glance th{{text-align:left}}\
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
    let wall: f64 = records.iter().map(CellRecord::wall_s).sum();
    let _ = writeln!(
        h,
        "<p>{} cells recorded: {ok} ok, {na} n/a, {} failed or timed out; {:.0} s of cell time. \
         Each layout is judged by the headline metric of its VM under test (blue); the other \
         VMs' own figures are the cost (what they paid), never the score. Medians over repetitions, \
         min&ndash;max below; green = the best policy of a headline column, marked only when a \
         permutation test over the repetitions finds it ahead of every other policy (p &lt; 0.01, more than 5 % apart) (&uarr; higher is better, &darr; lower); \
         ratios are to the baseline{} {}.</p>",
        records.len(),
        records.len() - ok - na,
        wall,
        if summary.baselines.len() > 1 { "s" } else { "" },
        esc(&summary.baselines.join(", "))
    );
    at_a_glance(&mut h, summary);
    if let Some(hosts) = hosts {
        h.push_str(hosts);
    }
    h.push_str("<h2>Results</h2>\n");
    for g in &summary.groups {
        let desc = m
            .layouts
            .iter()
            .find(|l| l.name == super::hosts::base_layout(&g.layout))
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
            r.wall_s(),
            esc(&r.error)
        );
    }
    h.push_str("</table>\n");
    if hosts.is_none() {
        h.push_str("<h2>Host</h2>\n");
        h.push_str(&host_section(m));
    }
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
    let matrix_text = vmm::input::read_config_text(&m.path, "a matrix").unwrap_or_default();
    let _ = writeln!(
        h,
        "<h2>Matrix</h2>\n<p>{}</p><pre>{}</pre>\n<p>Data: <a href=\"results.jsonl\">results.jsonl</a>, \
         <a href=\"results.csv\">results.csv</a>, <a href=\"summary.json\">summary.json</a>; VM logs in logs/.</p>\n</body></html>",
        esc(&m.path.display().to_string()),
        esc(&matrix_text)
    );
    let path = dir.join(REPORT);
    vmm::whole_file::write(&path, h).map_err(|source| ReportError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}
