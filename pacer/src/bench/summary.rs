//! From cell records to what a person reads: per (layout, workload) and
//! policy, each column's median over the repetitions with its min-max,
//! and its ratio to each baseline policy's median.
//!
//! Columns have a role (`headline.rs`): the *headline* of the VM under
//! test first, then the *cost* (the other VMs' own figures: what they
//! paid), then details (fairness, the scheduler's statistics). A policy
//! leads a headline column by its median; it is called the best only when
//! a permutation test over the repetitions ([`super::verdict`]) finds it
//! ahead of every other policy (p < 0.01, the means more than 5 % apart).
//! Otherwise the table says "not significant (p=...)" and how many
//! repetitions would be needed. "best:" is said once per (layout,
//! workload), when one policy is best in every headline column.
//!
//! A cell's value for a column is its samples combined over vCPUs as the
//! metric says ([`metrics::info`]): rates add up, p99s take the worst
//! vCPU, p50s the median. Columns are per VM group when a layout's groups
//! differ (the latency VM and the hog of a noisy-neighbour layout), else
//! for the whole cell. Only `ok` cells count; failed, timed-out and `n/a`
//! cells are listed with their reasons. Works from the records alone, so
//! the report can be rebuilt from `results.jsonl`.

use super::headline::{self, GroupHeadline, ALL_VMS};
use super::metrics::{self, Better, Combine, Sample};
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

/// What a column is to the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The VM under test's headline metric: what the layout is judged by.
    Headline,
    /// Another VM's own figure beside it: what it paid.
    Cost,
    /// Context: fairness, the scheduler's statistics, other guest figures.
    Detail,
}

/// A column: a metric over a scope (`all` or a VM group).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Column {
    pub scope: String,
    pub metric: String,
    pub role: Role,
    pub better: Better,
}

impl Column {
    /// A detail column, its direction from the metric's name.
    pub fn of(scope: &str, metric: &str) -> Column {
        Column {
            scope: scope.to_string(),
            metric: metric.to_string(),
            role: Role::Detail,
            better: metrics::info(metric).better,
        }
    }

    pub fn title(&self) -> String {
        let t = metrics::title(&self.metric);
        if self.scope == ALL {
            t
        } else {
            format!("{t} [{}]", self.scope)
        }
    }

    /// The title with its role and direction, for tables.
    pub fn heading(&self) -> String {
        let role = match self.role {
            Role::Headline => "HEADLINE ",
            Role::Cost => "cost: ",
            Role::Detail => "",
        };
        let dir = match (self.role, self.better) {
            (Role::Detail, _) | (_, Better::Neither) => String::new(),
            (_, b) => format!(" ({})", headline::direction(b)),
        };
        format!("{role}{}{dir}", self.title())
    }
}

/// Who did best in a headline column.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Best {
    /// The policy with the best median.
    pub leader: String,
    /// Whether the leader is significantly ahead of every other policy:
    /// only then is it called the best.
    pub clear: bool,
    /// In words: "haiku leads: vs host p=0.008, +12.0 %" or why not.
    pub verdict: String,
    /// The leader against each other policy.
    pub tests: Vec<Versus>,
}

/// The leader against one other policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Versus {
    pub policy: String,
    /// Null: fewer than two repetitions on a side.
    pub test: Option<super::verdict::Test>,
}

/// One policy's line of a group.
#[derive(Debug, Clone)]
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
    /// Per column: the value of each ok cell, in repetition order.
    pub samples: Vec<Vec<f64>>,
}

/// One (layout, workload) pair.
#[derive(Debug, Clone)]
pub struct GroupSummary {
    pub layout: String,
    pub workload: String,
    /// The VM under test and its headline, when the matrix is known.
    pub headline: Option<GroupHeadline>,
    pub columns: Vec<Column>,
    pub rows: Vec<PolicyRow>,
    /// Per column: who did best (headline columns with a direction only).
    pub best: Vec<Option<Best>>,
    /// The policy best in every headline column, if one is.
    pub best_policy: Option<String>,
    /// The group's verdict in words (None without headline verdicts).
    pub verdict: Option<String>,
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
#[derive(Debug, Clone)]
pub struct Summary {
    pub header: vmm::documents::Header,
    /// The matrix as run (set by the runner; null when summarising records
    /// alone).
    pub matrix: Option<crate::documents::matrix::MatrixView>,
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

/// The columns of a group's cells: the headline of the VM under test,
/// the others' cost, then details.
fn columns(cells: &[&CellRecord], h: Option<&GroupHeadline>) -> Vec<Column> {
    let ok: Vec<&&CellRecord> = cells
        .iter()
        .filter(|c| c.status == CellStatus::Ok)
        .collect();
    let samples = || ok.iter().flat_map(|c| c.samples.iter());
    let cell_wide = |m: &str| samples().any(|s| s.metric == m && s.vm == "*");
    // VM groups in the layout's order (the order their samples come in).
    let mut order: Vec<&str> = Vec::new();
    for s in samples().filter(|s| s.vm != "*") {
        if !order.contains(&s.group.as_str()) {
            order.push(&s.group);
        }
    }
    let groups_of = |m: &str| {
        let with: Vec<&str> = samples()
            .filter(|s| s.metric == m && s.vm != "*")
            .map(|s| s.group.as_str())
            .collect();
        order
            .iter()
            .copied()
            .filter(|g| with.contains(g))
            .collect::<Vec<&str>>()
    };
    let mut out: Vec<Column> = Vec::new();
    let push = |out: &mut Vec<Column>, c: Column| {
        if !out
            .iter()
            .any(|x| x.scope == c.scope && x.metric == c.metric)
        {
            out.push(c);
        }
    };
    if let Some(h) = h {
        for hm in &h.metrics {
            let col = |scope: &str| Column {
                scope: scope.to_string(),
                metric: hm.metric.clone(),
                role: Role::Headline,
                better: hm.better,
            };
            if cell_wide(&hm.metric) {
                push(&mut out, col(ALL));
            } else if h.under_test != ALL_VMS {
                push(&mut out, col(&h.under_test));
            } else if hm.per_vm() {
                for g in groups_of(&hm.metric) {
                    push(&mut out, col(g));
                }
            } else {
                push(&mut out, col(ALL));
            }
        }
        for c in &h.costs {
            push(
                &mut out,
                Column {
                    scope: c.vm.clone(),
                    metric: c.metric.clone(),
                    role: Role::Cost,
                    better: c.better,
                },
            );
        }
    }
    // Details: the metrics marked as worth a column (`metrics::info`).
    let mut groups: BTreeSet<&str> = BTreeSet::new();
    let mut guest: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut wide: BTreeSet<&str> = BTreeSet::new();
    for s in samples().filter(|s| metrics::info(&s.metric).headline) {
        if s.vm == "*" || s.metric.starts_with("sched.") {
            wide.insert(&s.metric);
        } else {
            groups.insert(&s.group);
            guest.insert((&s.group, &s.metric));
        }
    }
    let under_test = h.map(|h| h.under_test.as_str());
    match under_test {
        // Beside a headline: the VM under test's other figures only (the
        // others' are their cost).
        Some(u) if u != ALL_VMS => {
            for (g, m) in &guest {
                if *g == u {
                    push(&mut out, Column::of(g, m));
                }
            }
        }
        _ => {
            let per_group = groups.len() > 1;
            // A metric more than one group reports also gets a whole-cell column.
            let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
            for (_, m) in &guest {
                *seen.entry(m).or_default() += 1;
            }
            for (m, n) in &seen {
                if !per_group || *n > 1 {
                    push(&mut out, Column::of(ALL, m));
                }
            }
            if per_group {
                for (g, m) in &guest {
                    push(&mut out, Column::of(g, m));
                }
            }
        }
    }
    // Fairness first, then the scheduler's own.
    let mut wide: Vec<&str> = wide.into_iter().collect();
    wide.sort_by_key(|m| (!m.starts_with("jain."), *m));
    for m in wide {
        push(&mut out, Column::of(ALL, m));
    }
    out
}

/// Who did best in column `ci` of `rows`, for headline columns with a
/// direction: the best median, called the best only if a permutation test
/// finds it ahead of every other policy that has the value.
fn best_of(col: &Column, ci: usize, rows: &[PolicyRow]) -> Option<Best> {
    if col.role != Role::Headline || col.better == Better::Neither {
        return None;
    }
    let have: Vec<(&str, Stat, &[f64])> = rows
        .iter()
        .filter_map(|r| Some((r.policy.as_str(), r.values[ci]?, r.samples[ci].as_slice())))
        .collect();
    if have.len() < 2 {
        return None;
    }
    let higher = col.better == Better::Higher;
    let (leader, _, mine) = have.iter().copied().reduce(|a, b| {
        let b_wins = if higher {
            b.1.median > a.1.median
        } else {
            b.1.median < a.1.median
        };
        if b_wins {
            b
        } else {
            a
        }
    })?;
    let tests: Vec<Versus> = have
        .iter()
        .filter(|(p, _, _)| *p != leader)
        .map(|(p, _, theirs)| Versus {
            policy: p.to_string(),
            test: super::verdict::Test::of(mine, theirs),
        })
        .collect();
    // Significant, and ahead in the column's direction (the leader is
    // chosen by median, the test is on means).
    let ahead = |t: &super::verdict::Test| t.significant && ((t.effect > 0.0) == higher);
    let clear = tests.iter().all(|v| v.test.as_ref().is_some_and(ahead));
    let parts: Vec<String> = tests
        .iter()
        .map(|v| match &v.test {
            Some(t) => format!("vs {} {}", v.policy, t.describe()),
            None => format!("vs {}: fewer than 2 repetitions a side, no test", v.policy),
        })
        .collect();
    let verdict = format!("{leader} leads: {}", parts.join("; "));
    Some(Best {
        leader: leader.to_string(),
        clear,
        verdict,
        tests,
    })
}

/// The group's one verdict over its headline columns: "best: P" when one
/// policy is best in all of them.
fn group_verdict(best: &[Option<Best>]) -> (Option<String>, Option<String>) {
    let judged: Vec<&Best> = best.iter().flatten().collect();
    let Some(first) = judged.first() else {
        return (None, None);
    };
    if judged.iter().all(|b| b.clear && b.leader == first.leader) {
        let policy = first.leader.clone();
        let text = format!(
            "best: {policy} (ahead of every other policy, p < {}, by more than {:.0} %)",
            super::verdict::ALPHA,
            super::verdict::NOISE * 100.0
        );
        return (Some(policy), Some(text));
    }
    let leaders: BTreeSet<&str> = judged.iter().map(|b| b.leader.as_str()).collect();
    let text = if leaders.len() > 1 {
        format!(
            "no clear best: the headline columns are led by {}",
            leaders.into_iter().collect::<Vec<_>>().join(", ")
        )
    } else {
        format!(
            "no clear best: {} leads, but not significantly ahead of every policy",
            first.leader
        )
    };
    (None, Some(text))
}

impl Summary {
    /// Summarise `records`; policies in `order` first (the matrix's order),
    /// then any others in order of appearance. `headline` gives a (layout,
    /// workload)'s VM under test and headline (None: no roles, every
    /// column a detail).
    pub fn build(
        records: &[CellRecord],
        order: &[String],
        baselines: &[String],
        headline: &dyn Fn(&str, &str) -> Option<GroupHeadline>,
    ) -> Summary {
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
                let headline = headline(&layout, &workload);
                let columns = columns(&cells, headline.as_ref());
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
                            let mut ok_by_rep = ok.clone();
                            ok_by_rep.sort_by_key(|c| c.rep);
                            let samples: Vec<Vec<f64>> = columns
                                .iter()
                                .map(|col| {
                                    ok_by_rep
                                        .iter()
                                        .filter_map(|c| cell_value(&c.samples, col))
                                        .filter(|v| v.is_finite())
                                        .collect()
                                })
                                .collect();
                            let values = samples.iter().map(|v| Stat::of(v)).collect();
                            PolicyRow {
                                policy: p.clone(),
                                ok: ok.len(),
                                total: mine.len(),
                                not_applicable,
                                failures,
                                values,
                                ratios: Vec::new(),
                                samples,
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
                let best: Vec<Option<Best>> = columns
                    .iter()
                    .enumerate()
                    .map(|(ci, col)| best_of(col, ci, &rows))
                    .collect();
                let (best_policy, verdict) = group_verdict(&best);
                // A verdict on a busy host says so (the hosts of its ok cells).
                let busy = super::host_facts::busy_note(
                    cells
                        .iter()
                        .filter(|c| c.status == CellStatus::Ok)
                        .filter_map(|c| c.host.as_ref()),
                );
                let verdict = match (verdict, busy) {
                    (Some(v), Some(b)) => Some(format!("{v}; {b}")),
                    (v, _) => v,
                };
                GroupSummary {
                    layout,
                    workload,
                    headline,
                    columns,
                    rows,
                    best,
                    best_policy,
                    verdict,
                }
            })
            .collect();
        Summary {
            header: vmm::documents::Header::new(vmm::documents::BENCH_SUMMARY),
            matrix: None,
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
            if let Some(h) = &g.headline {
                s += &format!("   {}\n", h.describe());
            }
            let width = g
                .rows
                .iter()
                .map(|r| r.policy.len() + 6)
                .max()
                .unwrap_or(6)
                .max(12);
            for (ci, col) in g.columns.iter().enumerate() {
                let heading = col.heading();
                s += &format!(
                    "  {heading}\n    {:<width$}  {:>6}  {:>9}  {:>21}",
                    "", "cells", "median", "min - max",
                );
                for b in &self.baselines {
                    s += &format!("  {:>9}", format!("/{b}"));
                }
                s += "\n";
                let best = g.best[ci].as_ref();
                let mut shown = 0;
                for row in &g.rows {
                    if row.ok == 0 {
                        continue;
                    }
                    let cells = format!("{}/{}", row.ok, row.total);
                    let mark = match best {
                        Some(b) if b.clear && b.leader == row.policy => " *",
                        _ => "",
                    };
                    let name = format!("{}{mark}", row.policy);
                    match row.values[ci] {
                        Some(st) => {
                            shown += 1;
                            let f = |v| metrics::format_value(&col.metric, v);
                            s += &format!(
                                "    {name:<width$}  {cells:>6}  {:>9}  {:>21}",
                                f(st.median),
                                format!("{} - {}", f(st.min), f(st.max)),
                            );
                        }
                        None => {
                            s += &format!("    {name:<width$}  {cells:>6}  {:>9}  {:>21}", "-", "")
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
                if let Some(b) = best {
                    s += &format!("    -> {}\n", b.verdict);
                }
                if col.role == Role::Headline && shown == 0 {
                    s += &format!(
                        "    -> no cell reported {} for {}\n",
                        col.metric,
                        if col.scope == ALL {
                            "the cell"
                        } else {
                            &col.scope
                        }
                    );
                }
            }
            if let Some(v) = &g.verdict {
                s += &format!("  => {v}\n");
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
        let s = Summary::build(&recs, &order, &["host".into()], &|_, _| None);
        assert_eq!(s.groups.len(), 1);
        let g = &s.groups[0];
        let ci = g.column_index(ALL, "cpu.units_per_s").unwrap();
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
                sample("lat", 0, "sleep.wake_latency.p99_ns", p99[0]),
                sample("lat", 1, "sleep.wake_latency.p99_ns", p99[1]),
                sample("lat", 0, "sleep.wake_latency.p50_ns", 1000.0),
                sample("hog", 0, "cpu.units_per_s", units),
                sample("hog", 0, "sched.wake_latency.p99_ns", 5000.0),
            ];
            r
        };
        let recs = vec![
            mk("host", [40_000.0, 90_000.0], 1000.0),
            mk("haiku", [8_000.0, 9_000.0], 980.0),
        ];
        let s = Summary::build(&recs, &[], &["host".into()], &|_, _| None);
        let g = &s.groups[0];
        let titles: Vec<String> = g.columns.iter().map(Column::title).collect();
        assert!(
            titles.contains(&"sleep p99 [lat]".to_string()),
            "{titles:?}"
        );
        assert!(titles.contains(&"units/s [hog]".to_string()), "{titles:?}");
        // p50 is not a headline column.
        assert!(!titles.iter().any(|t| t.contains("p50")), "{titles:?}");
        let ci = g.column_index("lat", "sleep.wake_latency.p99_ns").unwrap();
        // The worst vCPU counts: 90 us vs 9 us.
        assert_eq!(g.row("host").unwrap().values[ci].unwrap().median, 90_000.0);
        assert_eq!(g.row("haiku").unwrap().ratios[ci][0], Some(0.1));
    }

    #[test]
    fn headline_first_cost_next_best_only_when_significant() {
        use super::super::plots::tests::{cells, headline};
        let mut recs = cells();
        // Five repetitions: the fewest with which p < 0.01 can be reached.
        let more: Vec<CellRecord> = recs
            .iter()
            .filter(|r| r.id.ends_with("/r2"))
            .flat_map(|r| {
                (3..=5).map(move |rep| {
                    let mut c = r.clone();
                    c.rep = rep;
                    c.id = c.id.replace("/r2", &format!("/r{rep}"));
                    for x in &mut c.samples {
                        x.value *= 1.0 + f64::from(rep) / 50.0;
                    }
                    c
                })
            })
            .collect();
        recs.extend(more);
        let s = Summary::build(&recs, &[], &["host".into()], &headline);
        let g = s.groups.iter().find(|g| g.layout == "nn").unwrap();
        let roles: Vec<(Role, String)> = g
            .columns
            .iter()
            .map(|c| (c.role, c.title()))
            .take(2)
            .collect();
        assert_eq!(
            roles,
            [
                (Role::Headline, "sleep p99 [lat]".to_string()),
                (Role::Cost, "units/s [hog]".to_string())
            ]
        );
        // The hog's units/s is a cost: no best is named for it.
        assert_eq!(g.best[1], None);
        let best = g.best[0].as_ref().unwrap();
        assert_eq!(
            (best.leader.as_str(), best.clear),
            ("haiku", true),
            "{best:?}"
        );
        let table = s.to_table(&|_| None);
        assert!(
            table.contains("HEADLINE sleep p99 [lat] (lower is better)"),
            "{table}"
        );
        assert!(table.contains("cost: units/s [hog]"), "{table}");
        assert!(table.contains("haiku *"), "{table}");
        assert!(table.contains("under test: VM lat"), "{table}");
        assert!(
            best.verdict.starts_with("haiku leads: vs host p=0.008, -9"),
            "{}",
            best.verdict
        );
        assert_eq!(g.best_policy.as_deref(), Some("haiku"));
        let nn = table.split("== solo").next().unwrap();
        assert_eq!(nn.matches("best:").count(), 1, "{nn}");
        assert!(nn.contains("=> best: haiku"), "{nn}");
        assert!(!nn.contains("busy host"), "{nn}");
        // The same cells, one of them run on a busy host (its recorded
        // host facts): the verdict says so.
        let mut busy = recs.clone();
        let cell = busy
            .iter_mut()
            .find(|r| r.id == "nn/sleep/host/r3")
            .unwrap();
        let host = cell.host.as_mut().expect("the fixture records its host");
        host.others_cpu_share = Some(0.7);
        let s = Summary::build(&busy, &[], &["host".into()], &headline);
        let g = s.groups.iter().find(|g| g.layout == "nn").unwrap();
        let v = g.verdict.as_deref().unwrap();
        assert!(
            v.starts_with("best: haiku (")
                && v.contains("; measured on a busy host (")
                && v.contains("others up to 70 % of CPU time"),
            "{v}"
        );
        // One of host's repetitions as low as haiku's: not significant,
        // and how many repetitions would tell.
        for r in recs.iter_mut().filter(|r| r.id == "nn/sleep/host/r2") {
            for x in r
                .samples
                .iter_mut()
                .filter(|x| x.metric.ends_with("p99_ns"))
            {
                x.value = 100_000.0;
            }
        }
        let s = Summary::build(&recs, &[], &["host".into()], &headline);
        let g = s.groups.iter().find(|g| g.layout == "nn").unwrap();
        let best = g.best[0].as_ref().unwrap();
        assert!(!best.clear, "{best:?}");
        assert!(
            best.verdict.contains("vs host not significant (p=0.0"),
            "{}",
            best.verdict
        );
        assert!(
            best.verdict
                .contains("repetitions a policy would be needed"),
            "{}",
            best.verdict
        );
        assert_eq!(g.best_policy, None);
        assert!(g
            .verdict
            .as_deref()
            .unwrap()
            .starts_with("no clear best: haiku leads"));
        // Two repetitions: never significant (p >= 1/3), five needed.
        recs.retain(|r| {
            (r.id.ends_with("/r1") || r.id.ends_with("/r2")) && r.id != "nn/sleep/host/r2"
        });
        recs.extend(cells().into_iter().filter(|r| r.id == "nn/sleep/host/r2"));
        let s = Summary::build(&recs, &[], &["host".into()], &headline);
        let g = s.groups.iter().find(|g| g.layout == "nn").unwrap();
        let best = g.best[0].as_ref().unwrap();
        assert!(!best.clear);
        assert!(best.verdict.contains("~5 repetitions"), "{}", best.verdict);
    }

    #[test]
    fn best_is_said_once_for_a_group_with_two_headlines() {
        let clear = |leader: &str, clear: bool| {
            Some(Best {
                leader: leader.into(),
                clear,
                verdict: String::new(),
                tests: Vec::new(),
            })
        };
        let (p, v) = group_verdict(&[clear("haiku", true), None, clear("haiku", true)]);
        assert_eq!(p.as_deref(), Some("haiku"));
        assert!(v.unwrap().starts_with("best: haiku ("));
        let (p, v) = group_verdict(&[clear("haiku", true), clear("pinned", true)]);
        assert_eq!(p, None);
        assert_eq!(
            v.unwrap(),
            "no clear best: the headline columns are led by haiku, pinned"
        );
        let (p, _) = group_verdict(&[clear("haiku", true), clear("haiku", false)]);
        assert_eq!(p, None);
        assert_eq!(group_verdict(&[None]), (None, None));
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
        let s = Summary::build(&recs, &[], &["host".into()], &|_, _| None);
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
