//! The hosts of a merge, and their results side by side.
//!
//! Cells are grouped by machine kind (`HostFacts::machine_kind`: CPU
//! model, topology, kernel, KVM; not the name or the load), so identical
//! nodes of a cluster pool their cells as one host would, and different
//! machines stay apart. With more than one kind, each record's layout
//! becomes `layout @ host` before the summary is built: the existing
//! summary, plots and report then keep every host's cells apart, each
//! with its own baselines, with no code of their own for hosts. This
//! module adds what only a merge has: the table of each headline and cost
//! column with the hosts as columns, for the terminal and the report.

use super::metrics;
use super::report::esc;
use super::store::CellRecord;
use super::summary::{Role, Summary};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Between a layout's name and its host's label (names are
/// `[A-Za-z0-9_-]`, so it cannot be part of one).
pub const SEP: &str = " @ ";

/// The matrix's layout of a (possibly host-labelled) layout name.
pub fn base_layout(name: &str) -> &str {
    name.split(SEP).next().unwrap_or(name)
}

/// The kind of machine a record ran on.
pub fn kind_of(r: &CellRecord) -> String {
    r.host
        .as_ref()
        .map(|h| h.machine_kind())
        .unwrap_or_else(|| "host not recorded (an older Pacer)".into())
}

/// One machine kind of a merge.
#[derive(Debug, Clone, PartialEq)]
pub struct HostGroup {
    /// Short name for tables: the first host's name (`+N` more).
    pub label: String,
    pub kind: String,
    /// The host names whose cells it holds, in order of appearance.
    pub names: Vec<String>,
    pub cells: usize,
}

/// The machine kinds of a set of records, in order of appearance.
#[derive(Debug, Clone, PartialEq)]
pub struct Hosts {
    pub groups: Vec<HostGroup>,
}

impl Hosts {
    pub fn of(records: &[CellRecord]) -> Hosts {
        let mut groups: Vec<HostGroup> = Vec::new();
        for r in records {
            let kind = kind_of(r);
            let name = r
                .host
                .as_ref()
                .map_or_else(|| "unknown".to_string(), |h| h.name.clone());
            let g = match groups.iter_mut().position(|g| g.kind == kind) {
                Some(i) => &mut groups[i],
                None => {
                    groups.push(HostGroup {
                        label: String::new(),
                        kind,
                        names: Vec::new(),
                        cells: 0,
                    });
                    groups.last_mut().expect("pushed")
                }
            };
            g.cells += 1;
            if !g.names.contains(&name) {
                g.names.push(name);
            }
        }
        let mut used: Vec<String> = Vec::new();
        for g in &mut groups {
            let mut label = match g.names.len() {
                1 => g.names[0].clone(),
                n => format!("{}+{}", g.names[0], n - 1),
            };
            // One host name on two kinds (a kernel update between runs).
            let base = label.clone();
            let mut k = 2;
            while used.contains(&label) {
                label = format!("{base}#{k}");
                k += 1;
            }
            used.push(label.clone());
            g.label = label;
        }
        Hosts { groups }
    }

    /// Whether the records span more than one kind of machine.
    pub fn several(&self) -> bool {
        self.groups.len() > 1
    }

    /// The label of `r`'s machine kind.
    fn label_of(&self, r: &CellRecord) -> &str {
        let kind = kind_of(r);
        self.groups
            .iter()
            .find(|g| g.kind == kind)
            .map_or("", |g| g.label.as_str())
    }

    /// With several kinds: each record's layout as `layout @ host`.
    pub fn relabel(&self, records: &mut [CellRecord]) {
        if !self.several() {
            return;
        }
        for r in records.iter_mut() {
            let label = self.label_of(r).to_string();
            r.layout = format!("{}{SEP}{label}", r.layout);
        }
    }

    /// Per (layout, workload) with cells on several hosts, per headline
    /// and cost column: each policy's median on each host (`rows[policy]
    /// [host]`), with its ratio to that host's first baseline.
    fn tables(&self, summary: &Summary) -> Vec<SideBySide> {
        let mut out: Vec<SideBySide> = Vec::new();
        for g in &summary.groups {
            let layout = base_layout(&g.layout);
            let host = g.layout.split(SEP).nth(1).unwrap_or("");
            let Some(hi) = self.groups.iter().position(|h| h.label == host) else {
                continue;
            };
            for (ci, col) in g.columns.iter().enumerate() {
                if col.role == Role::Detail {
                    continue;
                }
                let t = match out.iter_mut().position(|t| {
                    t.layout == layout
                        && t.workload == g.workload
                        && t.scope == col.scope
                        && t.metric == col.metric
                }) {
                    Some(i) => &mut out[i],
                    None => {
                        out.push(SideBySide {
                            layout: layout.to_string(),
                            workload: g.workload.clone(),
                            scope: col.scope.clone(),
                            metric: col.metric.clone(),
                            heading: col.heading(),
                            policies: Vec::new(),
                            cells: BTreeMap::new(),
                        });
                        out.last_mut().expect("pushed")
                    }
                };
                for row in &g.rows {
                    let Some(st) = row.values[ci] else { continue };
                    if !t.policies.contains(&row.policy) {
                        t.policies.push(row.policy.clone());
                    }
                    let ratio = row.ratios[ci].first().copied().flatten();
                    let f = metrics::format_value(&col.metric, st.median);
                    let text = match ratio {
                        Some(r) => format!("{f} ({r:.3})"),
                        None => f,
                    };
                    t.cells.insert((row.policy.clone(), hi), text);
                }
            }
        }
        out
    }

    /// The hosts and the side-by-side tables, for the terminal.
    pub fn side_by_side_text(&self, summary: &Summary) -> String {
        let mut s = String::from("\n== hosts (cells grouped by machine kind)\n");
        for g in &self.groups {
            let _ = writeln!(
                s,
                "  {}: {} ({} cells; {})",
                g.label,
                g.kind,
                g.cells,
                g.names.join(", ")
            );
        }
        let first = summary.baselines.first();
        for t in self.tables(summary) {
            let _ = writeln!(
                s,
                "\n== {} / {}: hosts side by side{}\n  {}",
                t.layout,
                t.workload,
                first.map_or(String::new(), |b| format!(
                    " (median, and its ratio to {b} on the same host)"
                )),
                t.heading
            );
            let pw = t.policies.iter().map(String::len).max().unwrap_or(6).max(6);
            let widths: Vec<usize> = (0..self.groups.len())
                .map(|hi| {
                    t.policies
                        .iter()
                        .filter_map(|p| t.cells.get(&(p.clone(), hi)))
                        .map(String::len)
                        .chain([self.groups[hi].label.len()])
                        .max()
                        .unwrap_or(1)
                })
                .collect();
            let _ = write!(s, "    {:<pw$}", "policy");
            for (g, w) in self.groups.iter().zip(&widths) {
                let _ = write!(s, "  {:>w$}", g.label);
            }
            s.push('\n');
            for p in &t.policies {
                let _ = write!(s, "    {p:<pw$}");
                for (hi, w) in widths.iter().enumerate() {
                    let v = t.cells.get(&(p.clone(), hi)).map_or("-", String::as_str);
                    let _ = write!(s, "  {v:>w$}");
                }
                s.push('\n');
            }
        }
        s
    }

    /// The hosts and the side-by-side tables, for report.html.
    pub fn html(&self, summary: &Summary) -> String {
        let mut h = String::from(
            "<h2>Hosts</h2>\n<p>Cells are grouped by machine kind (CPU model, topology, kernel, \
             KVM); each host's results below are its own, divided by its own baselines.</p>\n\
             <table><tr><th>host</th><th>machine kind</th><th>cells</th><th>host names</th></tr>\n",
        );
        for g in &self.groups {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td style=\"text-align:left\">{}</td><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
                esc(&g.label),
                esc(&g.kind),
                g.cells,
                esc(&g.names.join(", "))
            );
        }
        h.push_str("</table>\n");
        let tables = self.tables(summary);
        if !tables.is_empty() {
            let _ = writeln!(
                h,
                "<h2>Hosts side by side</h2>\n<p>Medians; in brackets the ratio to {} on the same host.</p>",
                esc(summary.baselines.first().map_or("the baseline", String::as_str))
            );
        }
        for t in tables {
            let _ = write!(
                h,
                "<h3>{} / {}: {}</h3>\n<table><tr><th>policy</th>",
                esc(&t.layout),
                esc(&t.workload),
                esc(&t.heading)
            );
            for g in &self.groups {
                let _ = write!(h, "<th>{}</th>", esc(&g.label));
            }
            h.push_str("</tr>\n");
            for p in &t.policies {
                let _ = write!(h, "<tr><td>{}</td>", esc(p));
                for hi in 0..self.groups.len() {
                    let v = t.cells.get(&(p.clone(), hi)).map_or("-", String::as_str);
                    let _ = write!(h, "<td>{}</td>", esc(v));
                }
                h.push_str("</tr>\n");
            }
            h.push_str("</table>\n");
        }
        h
    }
}

/// One column of one (layout, workload) across hosts.
struct SideBySide {
    layout: String,
    workload: String,
    scope: String,
    metric: String,
    heading: String,
    policies: Vec<String>,
    /// (policy, host index) -> "median (ratio)".
    cells: BTreeMap<(String, usize), String>,
}

#[cfg(test)]
mod tests {
    use super::super::store::tests::record;
    use super::super::store::CellStatus;
    use super::*;

    fn on(host: &str, kvm: &str, id: &str, policy: &str, units: f64) -> CellRecord {
        let mut r = record(id, policy, CellStatus::Ok, &[units]);
        let h = r.host.as_mut().unwrap();
        h.name = host.into();
        h.kvm = kvm.into();
        r
    }

    #[test]
    fn identical_nodes_pool_and_other_machines_stand_apart() {
        let same = [
            on("node1", "kvm_intel", "l/w/host/r1", "host", 10.0),
            on("node2", "kvm_intel", "l/w/host/r2", "host", 12.0),
        ];
        let hosts = Hosts::of(&same);
        assert!(!hosts.several());
        assert_eq!(hosts.groups[0].label, "node1+1");
        assert_eq!(hosts.groups[0].names, ["node1", "node2"]);
        let mut kept = same.to_vec();
        hosts.relabel(&mut kept);
        assert_eq!(kept, same, "one kind: records unchanged");

        let mut mixed = vec![
            on("a", "kvm_intel", "l/w/host/r1", "host", 10.0),
            on("a", "kvm_intel", "l/w/haiku/r1", "haiku", 15.0),
            on("b", "kvm_amd", "l/w/host/r1", "host", 20.0),
            on("b", "kvm_amd", "l/w/haiku/r1", "haiku", 10.0),
        ];
        let hosts = Hosts::of(&mixed);
        assert!(hosts.several());
        hosts.relabel(&mut mixed);
        assert_eq!(mixed[0].layout, "l @ a");
        assert_eq!(mixed[3].layout, "l @ b");
        assert_eq!(base_layout(&mixed[3].layout), "l");
        let summary = Summary::build(&mixed, &[], &["host".to_string()], &|_, _| None);
        // Each host its own group, divided by its own baseline.
        assert_eq!(summary.groups.len(), 2);
        let text = hosts.side_by_side_text(&summary);
        assert!(text.contains("a: ") && text.contains("kvm_amd"), "{text}");
        assert!(!text.contains("hosts side by side"), "details only: {text}");
        let html = hosts.html(&summary);
        assert!(html.contains("<h2>Hosts</h2>") && html.contains("kvm_intel"));
    }

    #[test]
    fn headline_columns_show_each_host_beside_the_other() {
        use super::super::headline::{GroupHeadline, HeadlineMetric};
        use super::super::metrics::Better;
        let mut mixed = vec![
            on("a", "kvm_intel", "l/w/host/r1", "host", 10.0),
            on("a", "kvm_intel", "l/w/haiku/r1", "haiku", 15.0),
            on("b", "kvm_amd", "l/w/host/r1", "host", 20.0),
            on("b", "kvm_amd", "l/w/haiku/r1", "haiku", 10.0),
        ];
        let hosts = Hosts::of(&mixed);
        hosts.relabel(&mut mixed);
        let headline = |_: &str, _: &str| {
            Some(GroupHeadline {
                under_test: "a".into(),
                metrics: vec![HeadlineMetric {
                    metric: "cpu.units_per_s".into(),
                    better: Better::Higher,
                }],
                costs: Vec::new(),
            })
        };
        let order = ["host".to_string(), "haiku".to_string()];
        let summary = Summary::build(&mixed, &order, &["host".to_string()], &headline);
        let text = hosts.side_by_side_text(&summary);
        assert!(
            text.contains("== l / w, \"quoted\": hosts side by side"),
            "{text}"
        );
        // haiku: 1.5x host on a, 0.5x on b; each against its own host.
        let haiku = text
            .lines()
            .find(|l| l.trim_start().starts_with("haiku"))
            .unwrap();
        assert!(
            haiku.contains("(1.500)") && haiku.contains("(0.500)"),
            "{text}"
        );
        let a = haiku.find("(1.500)").unwrap();
        let b = haiku.find("(0.500)").unwrap();
        assert!(a < b, "host a's column first: {text}");
        assert!(hosts.html(&summary).contains("Hosts side by side"));
    }
}
