//! From cell records to what a person reads: per (layout, workload) and
//! policy, each headline metric's median over the repetitions with its
//! min-max, and its ratio to each baseline policy's median.
//!
//! A cell's value for a column is its samples combined over vCPUs as the
//! metric says ([`metrics::info`]): rates add up, p99s take the worst
//! vCPU, p50s the median. Columns are per VM group when a layout's groups
//! differ (the latency VM and the hog of a noisy-neighbour layout), else
//! for the whole cell. Only `ok` cells count; failed, timed-out and `n/a`
//! cells are listed with their reasons. Works from the records alone, so
//! the report can be rebuilt from `results.jsonl`.

use super::metrics::{self, Combine, Sample};
use super::store::{CellRecord, CellStatus};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// The scope of a column: the whole cell.
pub const ALL: &str = "all";

/// Median and range of one column over repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Stat {
    pub fn of(values: &[f64]) -> Option<Stat> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Stat {
            median: median_sorted(&v),
            min: v[0],
            max: v[v.len() - 1],
            n: v.len(),
        })
    }
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A column: a metric over a scope (`all` or a VM group).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Column {
    pub scope: String,
    pub metric: String,
}

impl Column {
    pub fn title(&self) -> String {
        let t = metrics::title(&self.metric);
        if self.scope == ALL {
            t
        } else {
            format!("{t} [{}]", self.scope)
        }
    }
}

/// One policy's line of a group.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyRow {
    pub policy: String,
    pub ok: usize,
    pub total: usize,
    /// Distinct reasons of its `n/a` cells.
    pub not_applicable: Vec<String>,
    /// `rN: error` of its failed and timed-out cells.
    pub failures: Vec<String>,
    /// Per column.
    pub values: Vec<Option<Stat>>,
    /// Per column, per baseline: median / baseline median.
    pub ratios: Vec<Vec<Option<f64>>>,
}

/// One (layout, workload) pair.
#[derive(Debug, Clone, Serialize)]
pub struct GroupSummary {
    pub layout: String,
    pub workload: String,
    pub columns: Vec<Column>,
    pub rows: Vec<PolicyRow>,
}

impl GroupSummary {
    pub fn key(&self) -> String {
        format!("{}/{}", self.layout, self.workload)
    }

    pub fn row(&self, policy: &str) -> Option<&PolicyRow> {
        self.rows.iter().find(|r| r.policy == policy)
    }

    /// Values of the cells of one policy for one column (one per ok cell).
    pub fn column_index(&self, scope: &str, metric: &str) -> Option<usize> {
        self.columns
            .iter()
            .position(|c| c.scope == scope && c.metric == metric)
    }
}

/// The whole summary.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub baselines: Vec<String>,
    pub groups: Vec<GroupSummary>,
}

/// The value of `col` in one cell.
pub fn cell_value(samples: &[Sample], col: &Column) -> Option<f64> {
    let matching = samples
        .iter()
        .filter(|s| s.metric == col.metric && (col.scope == ALL || s.group == col.scope));
    let mut values: Vec<f64> = Vec::new();
    for s in matching {
        if s.vm == "*" {
            // A cell-wide value stands as it is.
            return Some(s.value);
        }
        // Per-vCPU values, or whole-VM ones (one per VM): combined alike.
        values.push(s.value);
    }
    if values.is_empty() {
        return None;
    }
    Some(match metrics::info(&col.metric).combine {
        Combine::Sum => values.iter().sum(),
        Combine::Max => values.iter().copied().fold(f64::MIN, f64::max),
        Combine::Mean => values.iter().sum::<f64>() / values.len() as f64,
        Combine::Median => {
            values.sort_by(f64::total_cmp);
            median_sorted(&values)
        }
    })
}

/// The headline columns of a group's cells.
fn columns(cells: &[&CellRecord]) -> Vec<Column> {
    let mut groups: BTreeSet<&str> = BTreeSet::new();
    let mut guest: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut cell_wide: BTreeSet<&str> = BTreeSet::new();
    for c in cells.iter().filter(|c| c.status == CellStatus::Ok) {
        for s in &c.samples {
            if !metrics::info(&s.metric).headline {
                continue;
            }
            if s.vm == "*" || s.metric.starts_with("sched.") {
                cell_wide.insert(&s.metric);
            } else {
                groups.insert(&s.group);
                guest.insert((&s.group, &s.metric));
            }
        }
    }
    let per_group = groups.len() > 1;
    let mut out: Vec<Column> = Vec::new();
    // A metric more than one group reports also gets a whole-cell column.
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, m) in &guest {
        *seen.entry(m).or_default() += 1;
    }
    for (m, n) in &seen {
        if !per_group || *n > 1 {
            out.push(Column {
                scope: ALL.into(),
                metric: m.to_string(),
            });
        }
    }
    if per_group {
        out.extend(guest.iter().map(|(g, m)| Column {
            scope: g.to_string(),
            metric: m.to_string(),
        }));
    }
    // Fairness first, then the scheduler's own.
    let mut wide: Vec<&str> = cell_wide.into_iter().collect();
    wide.sort_by_key(|m| (!m.starts_with("jain."), *m));
    out.extend(wide.into_iter().map(|m| Column {
        scope: ALL.into(),
        metric: m.to_string(),
    }));
    out
}

impl Summary {
    /// Summarise `records`; policies in `order` first (the matrix's order),
    /// then any others in order of appearance.
    pub fn build(records: &[CellRecord], order: &[String], baselines: &[String]) -> Summary {
        let mut pairs: Vec<(String, String)> = Vec::new();
        let mut policies: Vec<String> = order.to_vec();
        for r in records {
            let p = (r.layout.clone(), r.workload.clone());
            if !pairs.contains(&p) {
                pairs.push(p);
            }
            if !policies.contains(&r.policy) {
                policies.push(r.policy.clone());
            }
        }
        let groups = pairs
            .into_iter()
            .map(|(layout, workload)| {
                let cells: Vec<&CellRecord> = records
                    .iter()
                    .filter(|r| r.layout == layout && r.workload == workload)
                    .collect();
                let columns = columns(&cells);
                let mut rows: Vec<PolicyRow> =
                    policies
                        .iter()
                        .filter(|p| cells.iter().any(|c| &c.policy == *p))
                        .map(|p| {
                            let mine: Vec<&&CellRecord> =
                                cells.iter().filter(|c| &c.policy == p).collect();
                            let ok: Vec<&&&CellRecord> =
                                mine.iter().filter(|c| c.status == CellStatus::Ok).collect();
                            let mut not_applicable: Vec<String> = Vec::new();
                            let mut failures = Vec::new();
                            for c in &mine {
                                match c.status {
                                    CellStatus::NotApplicable => {
                                        if !not_applicable.contains(&c.error) {
                                            not_applicable.push(c.error.clone());
                                        }
                                    }
                                    CellStatus::Failed | CellStatus::Timeout => failures.push(
                                        format!("r{} {}: {}", c.rep, c.status.as_str(), c.error),
                                    ),
                                    CellStatus::Ok => {}
                                }
                            }
                            let values = columns
                                .iter()
                                .map(|col| {
                                    let v: Vec<f64> = ok
                                        .iter()
                                        .filter_map(|c| cell_value(&c.samples, col))
                                        .collect();
                                    Stat::of(&v)
                                })
                                .collect();
                            PolicyRow {
                                policy: p.clone(),
                                ok: ok.len(),
                                total: mine.len(),
                                not_applicable,
                                failures,
                                values,
                                ratios: Vec::new(),
                            }
                        })
                        .collect();
                let base: Vec<Option<Vec<Option<Stat>>>> = baselines
                    .iter()
                    .map(|b| {
                        rows.iter()
                            .find(|r| &r.policy == b)
                            .map(|r| r.values.clone())
                    })
                    .collect();
                for row in &mut rows {
                    row.ratios = (0..columns.len())
                        .map(|ci| {
                            base.iter()
                                .map(|b| {
                                    let b = b.as_ref()?[ci]?.median;
                                    let v = row.values[ci]?.median;
                                    (b != 0.0).then(|| v / b)
                                })
                                .collect()
                        })
                        .collect();
                }
                GroupSummary {
                    layout,
                    workload,
                    columns,
                    rows,
                }
            })
            .collect();
        Summary {
            baselines: baselines.to_vec(),
            groups,
        }
    }

    /// The terminal table. `describe` gives a layout's description.
    pub fn to_table(&self, describe: &dyn Fn(&str) -> Option<String>) -> String {
        let mut s = String::new();
        for g in &self.groups {
            s += &format!("\n== {} / {}", g.layout, g.workload);
            if let Some(d) = describe(&g.layout) {
                s += &format!(": {d}");
            }
            s += "\n";
            let width = g
                .rows
                .iter()
                .map(|r| r.policy.len())
                .chain(g.columns.iter().map(|c| c.title().len().saturating_sub(2)))
                .max()
                .unwrap_or(6)
                .max(6);
            for (ci, col) in g.columns.iter().enumerate() {
                s += &format!(
                    "  {:<w$}  {:>6}  {:>9}  {:>21}",
                    col.title(),
                    "cells",
                    "median",
                    "min - max",
                    w = width + 2
                );
                for b in &self.baselines {
                    s += &format!("  {:>9}", format!("/{b}"));
                }
                s += "\n";
                for row in &g.rows {
                    if row.ok == 0 {
                        continue;
                    }
                    let cells = format!("{}/{}", row.ok, row.total);
                    match row.values[ci] {
                        Some(st) => {
                            let f = |v| metrics::format_value(&col.metric, v);
                            s += &format!(
                                "    {:<width$}  {:>6}  {:>9}  {:>21}",
                                row.policy,
                                cells,
                                f(st.median),
                                format!("{} - {}", f(st.min), f(st.max)),
                            );
                        }
                        None => {
                            s += &format!(
                                "    {:<width$}  {:>6}  {:>9}  {:>21}",
                                row.policy, cells, "-", ""
                            )
                        }
                    }
                    for r in &row.ratios[ci] {
                        s += &format!(
                            "  {:>9}",
                            r.map(|r| format!("{r:.3}")).unwrap_or_else(|| "-".into())
                        );
                    }
                    s += "\n";
                }
            }
            for row in &g.rows {
                for why in &row.not_applicable {
                    s += &format!("  {}: n/a ({why})\n", row.policy);
                }
                for f in &row.failures {
                    let first = f.lines().next().unwrap_or("");
                    s += &format!("  {}: {first}\n", row.policy);
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::tests::record;
    use super::*;

    #[test]
    fn stat_median_and_range() {
        let s = Stat::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.5, 1.0, 10.0, 4));
        assert_eq!(Stat::of(&[f64::NAN]), None);
    }

    #[test]
    fn medians_ranges_ratios_and_reasons() {
        let mut recs = vec![
            record("l/w/host/r1", "host", CellStatus::Ok, &[100.0, 100.0]),
            record("l/w/host/r2", "host", CellStatus::Ok, &[150.0, 150.0]),
            record("l/w/host/r3", "host", CellStatus::Ok, &[125.0, 125.0]),
            record("l/w/haiku/r1", "haiku", CellStatus::Ok, &[110.0, 140.0]),
            record("l/w/haiku/r2", "haiku", CellStatus::Timeout, &[1.0]),
            record("l/w/qemu/r1", "qemu", CellStatus::NotApplicable, &[]),
        ];
        recs[5].error = "no PVH entry in the guest image".into();
        for (r, rep) in recs.iter_mut().zip([1, 2, 3, 1, 2, 1]) {
            r.rep = rep;
        }
        let order = vec!["host".to_string(), "haiku".into(), "qemu".into()];
        let s = Summary::build(&recs, &order, &["host".into()]);
        assert_eq!(s.groups.len(), 1);
        let g = &s.groups[0];
        let ci = g.column_index(ALL, "units_per_s").unwrap();
        let host = g.row("host").unwrap();
        let st = host.values[ci].unwrap();
        // Per cell the vCPUs add up: 200, 300, 250.
        assert_eq!((st.median, st.min, st.max, st.n), (250.0, 200.0, 300.0, 3));
        let haiku = g.row("haiku").unwrap();
        assert_eq!((haiku.ok, haiku.total), (1, 2));
        assert_eq!(haiku.ratios[ci][0], Some(1.0));
        assert_eq!(haiku.failures.len(), 1);
        let qemu = g.row("qemu").unwrap();
        assert_eq!(qemu.not_applicable, ["no PVH entry in the guest image"]);
        let table = s.to_table(&|_| Some("a 2v@0-1".into()));
        assert!(table.contains("== l / w, \"quoted\": a 2v@0-1"), "{table}");
        assert!(
            table.contains("units/s") && table.contains("/host"),
            "{table}"
        );
        assert!(
            table.contains("250") && table.contains("200 - 300"),
            "{table}"
        );
        assert!(
            table.contains("qemu: n/a (no PVH entry in the guest image)"),
            "{table}"
        );
        assert!(
            table.contains("haiku: r2 timeout: vm a: timeout"),
            "{table}"
        );
    }

    #[test]
    fn fake_latency_results_summarise_per_group() {
        // A noisy-neighbour cell: a sleep VM (latency) and a cpu hog.
        let sample = |vm: &str, vcpu, metric: &str, value| Sample {
            vm: vm.into(),
            group: vm.into(),
            vcpu: Some(vcpu),
            metric: metric.into(),
            value,
        };
        let mk = |policy: &str, p99: [f64; 2], units: f64| {
            let mut r = record(&format!("nn/mix/{policy}/r1"), policy, CellStatus::Ok, &[]);
            r.samples = vec![
                sample("lat", 0, "sleep_latency_ns.p99_ns", p99[0]),
                sample("lat", 1, "sleep_latency_ns.p99_ns", p99[1]),
                sample("lat", 0, "sleep_latency_ns.p50_ns", 1000.0),
                sample("hog", 0, "units_per_s", units),
                sample("hog", 0, "sched.wake_latency_ns.p99", 5000.0),
            ];
            r
        };
        let recs = vec![
            mk("host", [40_000.0, 90_000.0], 1000.0),
            mk("haiku", [8_000.0, 9_000.0], 980.0),
        ];
        let s = Summary::build(&recs, &[], &["host".into()]);
        let g = &s.groups[0];
        let titles: Vec<String> = g.columns.iter().map(Column::title).collect();
        assert!(
            titles.contains(&"sleep p99 [lat]".to_string()),
            "{titles:?}"
        );
        assert!(titles.contains(&"units/s [hog]".to_string()), "{titles:?}");
        // p50 is not a headline column.
        assert!(!titles.iter().any(|t| t.contains("p50")), "{titles:?}");
        let ci = g.column_index("lat", "sleep_latency_ns.p99_ns").unwrap();
        // The worst vCPU counts: 90 us vs 9 us.
        assert_eq!(g.row("host").unwrap().values[ci].unwrap().median, 90_000.0);
        assert_eq!(g.row("haiku").unwrap().ratios[ci][0], Some(0.1));
    }

    #[test]
    fn whole_vm_suite_indexes_average_over_the_vms() {
        // Two Linux VMs of one group, each with its own index.
        let vm_sample = |vm: &str, metric: &str, value| Sample {
            vm: vm.into(),
            group: "linux".into(),
            vcpu: None,
            metric: metric.into(),
            value,
        };
        let mk = |policy: &str, a: f64, b: f64| {
            let mut r = record(&format!("two/ub/{policy}/r1"), policy, CellStatus::Ok, &[]);
            r.samples = vec![
                vm_sample("linux-1", "unixbench.index.copies_1", a),
                vm_sample("linux-2", "unixbench.index.copies_1", b),
                vm_sample("linux-1", "unixbench.score.pipe.copies_1", 1.0),
                vm_sample("linux-1", "unixbench.failed_passes.copies_1", 0.0),
            ];
            r
        };
        let recs = vec![mk("host", 400.0, 600.0), mk("haiku", 450.0, 650.0)];
        let s = Summary::build(&recs, &[], &["host".into()]);
        let g = &s.groups[0];
        let titles: Vec<String> = g.columns.iter().map(Column::title).collect();
        // Only the index is a headline column.
        assert_eq!(titles, ["UB index (1 copy)"]);
        let host = g.row("host").unwrap().values[0].unwrap().median;
        assert_eq!(host, 500.0);
        assert_eq!(g.row("haiku").unwrap().ratios[0][0], Some(1.1));
        assert_eq!(
            metrics::format_value("unixbench.index.copies_1", 1234.56),
            "1234.6"
        );
    }
}
