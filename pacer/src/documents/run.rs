//! `pacer-run` (`pacer run --json`): one entry per policy run, each with
//! its VMs' results (`vmm::results::events::VmDoc`), in one document.
//!
//! A `--compare` run is the same document with one entry per policy in
//! `runs` and the verdicts in `comparison`; a single run has one entry and
//! `comparison: null`. The top level is an object either way.

use crate::compare::Comparison;
use serde::Serialize;
use std::path::PathBuf;
use vmm::config::view::ConfigView;
use vmm::config::Config;
use vmm::documents::snapshot::CpuDoc;
use vmm::documents::{Header, RUN};
use vmm::results::events::{ControlChangeDoc, VmDoc};
use vmm::results::RunResults;

/// One run of the config under one policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunEntry {
    pub policy: String,
    /// Null under `host`.
    pub mode: Option<String>,
    /// The config as this run used it.
    pub config: ConfigView,
    /// This run's directory (consoles, results, the config's copy).
    pub run_dir: Option<PathBuf>,
    pub ok: bool,
    pub vms: Vec<VmDoc>,
    /// The scheduling trace it recorded (`--trace FILE`), else null.
    pub trace: Option<vcpu_engine::trace::TraceOutcome>,
    /// What was changed through the control API (`--api-socket`) while
    /// the VMs ran; empty without the API.
    pub control_changes: Vec<ControlChangeDoc>,
    /// The scheduler's CPU rows once every VM had ended (the SIGUSR1
    /// snapshot's, whole run); null under `host`.
    pub scheduler_cpus: Option<Vec<CpuDoc>>,
}

impl RunEntry {
    pub fn of(config: &Config, r: &RunResults) -> RunEntry {
        let config = ConfigView::of(config);
        let (policy, mode) = config.policy_mode();
        RunEntry {
            policy,
            mode,
            config,
            run_dir: r.run_dir.clone(),
            ok: r.ok,
            vms: r.vms.iter().map(VmDoc::of).collect(),
            trace: r.trace.clone(),
            control_changes: r.control_changes.iter().map(ControlChangeDoc::of).collect(),
            scheduler_cpus: r
                .sched_cpus
                .as_ref()
                .map(|cpus| cpus.iter().map(CpuDoc::of).collect()),
        }
    }
}

/// `pacer run --json`: one entry per policy run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunDocument {
    #[serde(flatten)]
    pub header: Header,
    /// The config file as given on the command line.
    pub config_file: PathBuf,
    /// Every VM of every run succeeded.
    pub ok: bool,
    pub runs: Vec<RunEntry>,
    /// `--compare`: per VM its headline under each policy and the verdict.
    pub comparison: Option<Comparison>,
}

impl RunDocument {
    pub fn new(config_file: PathBuf, runs: Vec<RunEntry>, comparison: Option<Comparison>) -> Self {
        RunDocument {
            header: Header::new(RUN),
            config_file,
            ok: runs.iter().all(|r| r.ok),
            runs,
            comparison,
        }
    }
}
