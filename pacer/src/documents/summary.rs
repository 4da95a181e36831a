//! `pacer-bench-summary` (`pacer bench`'s `summary.json`): per (layout,
//! workload) its VM under test and headline, and per column (headline,
//! cost, details) every policy's median, range and ratios to the
//! baselines, each value named by its policy rather than by position.
//! Values are in the unit the metric's name ends with (`_ns`, `_per_s`;
//! fractions and indexes have none).

use super::matrix::MatrixView;
use crate::bench::headline::GroupHeadline;
use crate::bench::metrics::{self, Better};
use crate::bench::summary::{GroupSummary, Role, Summary, Versus};
use serde::Serialize;
use vmm::documents::Header;

/// A policy's figure in one column.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValueDoc {
    pub policy: String,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Repetitions it is taken over.
    pub n: usize,
    /// Median over each baseline's median (a baseline without the value
    /// is left out).
    pub ratios: Vec<RatioDoc>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RatioDoc {
    pub baseline: String,
    pub ratio: f64,
}

/// One column of a group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ColumnDoc {
    pub metric: String,
    /// `all` (the whole cell) or a VM group.
    pub scope: String,
    pub title: String,
    pub role: Role,
    pub better: Better,
    /// Headline columns: the policy called the best (only when a
    /// permutation test finds it ahead of every other), else null.
    pub best: Option<String>,
    /// Headline columns: the verdict in words.
    pub verdict: Option<String>,
    /// Headline columns: the leader against each other policy.
    pub tests: Vec<Versus>,
    pub values: Vec<ValueDoc>,
}

/// How the cells of a policy ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyCellsDoc {
    pub policy: String,
    pub ok: usize,
    pub total: usize,
    pub not_applicable: Vec<String>,
    pub failures: Vec<String>,
}

/// One (layout, workload).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupDoc {
    pub layout: String,
    pub workload: String,
    pub headline: Option<GroupHeadline>,
    pub policies: Vec<PolicyCellsDoc>,
    /// The policy best in every headline column, else null.
    pub best: Option<String>,
    /// The group's verdict in words ("best: P (...)", "no clear best: ...").
    pub verdict: Option<String>,
    pub columns: Vec<ColumnDoc>,
}

/// The whole `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryDocument {
    #[serde(flatten)]
    pub header: Header,
    pub matrix: Option<MatrixView>,
    pub baselines: Vec<String>,
    pub groups: Vec<GroupDoc>,
}

fn group(g: &GroupSummary, baselines: &[String]) -> GroupDoc {
    GroupDoc {
        layout: g.layout.clone(),
        workload: g.workload.clone(),
        headline: g.headline.clone(),
        policies: g
            .rows
            .iter()
            .map(|r| PolicyCellsDoc {
                policy: r.policy.clone(),
                ok: r.ok,
                total: r.total,
                not_applicable: r.not_applicable.clone(),
                failures: r.failures.clone(),
            })
            .collect(),
        best: g.best_policy.clone(),
        verdict: g.verdict.clone(),
        columns: g
            .columns
            .iter()
            .enumerate()
            .map(|(ci, c)| ColumnDoc {
                metric: c.metric.clone(),
                scope: c.scope.clone(),
                title: metrics::title(&c.metric),
                role: c.role,
                better: c.better,
                best: g.best[ci]
                    .as_ref()
                    .filter(|b| b.clear)
                    .map(|b| b.leader.clone()),
                verdict: g.best[ci].as_ref().map(|b| b.verdict.clone()),
                tests: g.best[ci]
                    .as_ref()
                    .map(|b| b.tests.clone())
                    .unwrap_or_default(),
                values: g
                    .rows
                    .iter()
                    .filter_map(|r| {
                        let st = r.values[ci]?;
                        Some(ValueDoc {
                            policy: r.policy.clone(),
                            median: st.median,
                            min: st.min,
                            max: st.max,
                            n: st.n,
                            ratios: baselines
                                .iter()
                                .zip(&r.ratios[ci])
                                .filter_map(|(b, x)| {
                                    Some(RatioDoc {
                                        baseline: b.clone(),
                                        ratio: (*x)?,
                                    })
                                })
                                .collect(),
                        })
                    })
                    .collect(),
            })
            .collect(),
    }
}

impl SummaryDocument {
    pub fn of(s: &Summary) -> SummaryDocument {
        SummaryDocument {
            header: s.header.clone(),
            matrix: s.matrix.clone(),
            baselines: s.baselines.clone(),
            groups: s.groups.iter().map(|g| group(g, &s.baselines)).collect(),
        }
    }
}
