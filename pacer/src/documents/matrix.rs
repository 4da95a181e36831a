//! The resolved matrix as `summary.json` (`pacer-bench-summary`) carries
//! it: every axis as the run used it (defaults filled in, paths resolved,
//! each policy's runner, mode and dispatch, each layout's VMs and its VM
//! under test), beside the copy of the matrix file in the output
//! directory (`matrix.toml`).

use crate::bench::headline::HeadlineMetric;
use crate::bench::matrix::{Matrix, Runner};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One entry of the policy axis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyView {
    pub label: String,
    /// `pacer`, `qemu` or `native`.
    pub runner: &'static str,
    /// Pacer's policy (`haiku`, `global-rr`, `pinned`, `host`); null otherwise.
    pub policy: Option<String>,
    /// Null where no Haiku mode applies.
    pub mode: Option<String>,
    pub dispatch: Option<String>,
}

/// One VM of a layout.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmSpecView {
    pub name: String,
    pub group: String,
    pub vcpus: u32,
    pub cpus: String,
    pub class: vcpu_sched::SchedClass,
    pub priority: u8,
    /// Weight, cap, reservation and latency bound of each vCPU (per mille
    /// of one CPU; the bound in ns).
    pub shares: vcpu_engine::Shares,
    pub coschedule: vcpu_sched::Coschedule,
    pub memory_mib: u64,
    /// Its own workload, or null for the cell's.
    pub workload: Option<String>,
}

/// One layout.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayoutView {
    pub name: String,
    pub vms: Vec<VmSpecView>,
    pub workloads: Vec<String>,
    /// As the file says it (null: the default of each workload).
    pub under_test: Option<String>,
    pub headline: Vec<HeadlineMetric>,
}

/// One workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadView {
    pub name: String,
    pub kind: String,
    pub params: BTreeMap<String, String>,
    pub extra_args: Vec<String>,
}

/// The matrix as run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MatrixView {
    pub name: String,
    pub file: PathBuf,
    pub description: String,
    pub kernel: PathBuf,
    pub host_cpus: String,
    pub repetitions: u32,
    pub cell_timeout_ns: u64,
    pub baselines: Vec<String>,
    pub policies: Vec<PolicyView>,
    pub workloads: Vec<WorkloadView>,
    pub layouts: Vec<LayoutView>,
}

impl MatrixView {
    pub fn of(m: &Matrix) -> MatrixView {
        MatrixView {
            name: m.name.clone(),
            file: m.path.clone(),
            description: m.description.clone(),
            kernel: m.kernel.clone(),
            host_cpus: m.host_cpus.to_list(),
            repetitions: m.repetitions,
            cell_timeout_ns: m.cell_timeout.as_nanos() as u64,
            baselines: m.baselines.clone(),
            policies: m
                .policies
                .iter()
                .map(|p| match p.runner {
                    Runner::Pacer {
                        policy,
                        mode,
                        dispatch,
                        ..
                    } => PolicyView {
                        label: p.label.clone(),
                        runner: "pacer",
                        policy: Some(policy.to_string()),
                        mode: policy.uses_mode().then(|| mode.as_str().to_string()),
                        dispatch: dispatch
                            .filter(|_| policy != vmm::policy::Policy::Host)
                            .map(|d| d.as_str().to_string()),
                    },
                    Runner::Qemu | Runner::Native => PolicyView {
                        label: p.label.clone(),
                        runner: if p.runner == Runner::Qemu {
                            "qemu"
                        } else {
                            "native"
                        },
                        policy: None,
                        mode: None,
                        dispatch: None,
                    },
                })
                .collect(),
            workloads: m
                .workloads
                .iter()
                .map(|w| WorkloadView {
                    name: w.name.clone(),
                    kind: w.kind.to_string(),
                    params: w.params.clone(),
                    extra_args: w.extra_args.clone(),
                })
                .collect(),
            layouts: m
                .layouts
                .iter()
                .map(|l| LayoutView {
                    name: l.name.clone(),
                    vms: l
                        .vms
                        .iter()
                        .map(|v| VmSpecView {
                            name: v.name.clone(),
                            group: v.group.clone(),
                            vcpus: v.vcpus,
                            cpus: v.cpus.to_list(),
                            class: v.class,
                            priority: v.priority,
                            shares: v.shares,
                            coschedule: v.coschedule,
                            memory_mib: v.memory_mib,
                            workload: v.workload.map(|i| m.workloads[i].name.clone()),
                        })
                        .collect(),
                    workloads: l
                        .workloads
                        .iter()
                        .map(|&i| m.workloads[i].name.clone())
                        .collect(),
                    under_test: l.headline.under_test.clone(),
                    headline: l.headline.metrics.clone(),
                })
                .collect(),
        }
    }
}
