//! The simulator's command-line front end, shared by `pacer sim` and the
//! `sim` example so both print the same thing: load a scenario file, apply
//! the overrides, run it under one or more policies, and write the tables,
//! the one-line summaries, the speed lines and (optionally) the JSON.
//!
//! Argument parsing stays with each caller (clap in `pacer`, a hand loop
//! in the example); both fill in [`SimOptions`] and call [`run_scenario`].

use super::report::fmt_ns;
use super::{SimReport, Simulator, Workload};
use crate::PolicyKind;
use std::io::Write;
use std::path::PathBuf;

/// Writes a whole file (`SimOptions::write_file`).
pub type WriteFile = fn(&std::path::Path, &[u8]) -> std::io::Result<()>;

/// The JSON text of the reports (`SimOptions::to_json`).
pub type ReportsJson = fn(&[crate::sim::SimReport]) -> String;

/// What to run and what to print.
#[derive(Debug, Clone, Default)]
pub struct SimOptions {
    /// The scenario file (TOML).
    pub file: PathBuf,
    /// Policies to run (empty: the scenario's own).
    pub policies: Vec<PolicyKind>,
    /// Write the report(s) as JSON here.
    pub json: Option<PathBuf>,
    /// How the JSON file is written (None: `std::fs::write`); the `pacer`
    /// binary writes it whole or not at all (`vmm::whole_file`).
    pub write_file: Option<WriteFile>,
    /// The JSON text of the reports (None: the report, or a list of them,
    /// as serialized); the `pacer` binary writes its `pacer-sim` document.
    pub to_json: Option<ReportsJson>,
    pub seed: Option<u64>,
    pub duration_ms: Option<u64>,
    /// A synthetic topology instead of the scenario's, e.g. `2x22x2`.
    pub topology: Option<String>,
    /// Multiply every group's vCPU count (1: unchanged).
    pub scale: u32,
    /// Summary lines only, no tables.
    pub quiet: bool,
    /// Print the first N scheduler calls.
    pub trace: u64,
    /// Add the policy's own snapshot table.
    pub snapshot: bool,
}

/// Why a simulation run did not complete.
#[derive(Debug, thiserror::Error)]
pub enum FrontError {
    /// The scenario file could not be read or is invalid (bad input).
    #[error("{0}")]
    Scenario(String),
    /// A policy failed to run the scenario (its error was printed to the
    /// error stream); the others ran.
    #[error("{failed} of {total} policies failed")]
    PolicyFailed { failed: usize, total: usize },
    /// Writing the output or the JSON file failed.
    #[error("{0}")]
    Io(String),
}

/// The one-line comparison of a report (`summary:` block).
pub fn summary_line(r: &SimReport) -> String {
    let worst_p99 = r
        .groups
        .iter()
        .map(|g| g.wake_latency.p99)
        .max()
        .unwrap_or(0);
    let min_jain = r
        .groups
        .iter()
        .map(|g| g.jain_fairness)
        .fold(1.0f64, f64::min);
    format!(
        "{:<12} bursts/s {:>11.0}  useful CPUs {:>7.3}  worst group p99 wake {:>9}  min Jain {:.3}  ctxsw/s/CPU {:>9.0}  violations {}",
        r.policy,
        r.total.bursts_per_sec,
        r.total.useful_cpus,
        fmt_ns(worst_p99),
        min_jain,
        r.context_switches_per_sec_per_cpu(),
        r.violations.total()
    )
}

/// Run the scenario as `opts` says, printing to `out` (a failing policy's
/// error goes to `err`). Returns the reports of the policies that ran.
pub fn run_scenario(
    opts: &SimOptions,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Vec<SimReport>, FrontError> {
    let w = Workload::from_file(&opts.file).map_err(|e| FrontError::Scenario(e.to_string()))?;
    run_workload(opts, w, out, err)
}

/// [`run_scenario`] on a scenario already read (`opts.file` only names
/// it): the `pacer` binary reads files through its own bounded reader.
pub fn run_workload(
    opts: &SimOptions,
    mut w: Workload,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Vec<SimReport>, FrontError> {
    let io = |e: std::io::Error| FrontError::Io(e.to_string());
    if let Some(s) = opts.seed {
        w.seed = s;
    }
    if let Some(d) = opts.duration_ms {
        w.duration_ms = d;
        w.warmup_ms = w.warmup_ms.min(d / 10);
    }
    if let Some(t) = &opts.topology {
        w.topology = t.clone();
    }
    if opts.scale > 1 {
        w = w.scale_groups(opts.scale);
    }
    let policies = if opts.policies.is_empty() {
        vec![w.sched.policy]
    } else {
        opts.policies.clone()
    };
    if !w.description.is_empty() && !opts.quiet {
        writeln!(out, "# {}", w.description).map_err(io)?;
    }
    let mut reports = Vec::new();
    for p in &policies {
        let mut wp = w.clone();
        wp.sched.policy = *p;
        match Simulator::new(wp).and_then(|s| s.with_trace(opts.trace).run()) {
            Ok(r) => {
                if !opts.quiet {
                    writeln!(out, "{}", r.to_table()).map_err(io)?;
                }
                if opts.snapshot {
                    writeln!(out, "{}", r.snapshot.to_table()).map_err(io)?;
                }
                reports.push(r);
            }
            Err(e) => writeln!(err, "policy {p:?}: {e}").map_err(io)?,
        }
    }
    if reports.len() > 1 || opts.quiet {
        writeln!(out, "summary:").map_err(io)?;
        for r in &reports {
            writeln!(out, "  {}", summary_line(r)).map_err(io)?;
        }
    }
    for r in &reports {
        writeln!(
            out,
            "speed [{}]: {} events, {} scheduler calls in {:.1} ms host time = {:.2} M events/s, {:.2} M scheduler calls/s",
            r.policy,
            r.events,
            r.sched_calls,
            r.host.wall_ns as f64 / 1e6,
            r.host.events_per_sec / 1e6,
            r.host.sched_calls_per_sec / 1e6
        )
        .map_err(io)?;
    }
    if let Some(path) = &opts.json {
        let text = if let Some(to_json) = opts.to_json {
            to_json(&reports)
        } else if reports.len() == 1 {
            reports[0].to_json()
        } else {
            serde_json::to_string_pretty(&reports).unwrap_or_default()
        };
        let write = opts
            .write_file
            .unwrap_or(|p: &std::path::Path, b: &[u8]| std::fs::write(p, b));
        write(path, text.as_bytes())
            .map_err(|e| FrontError::Io(format!("{}: {e}", path.display())))?;
    }
    if reports.len() != policies.len() {
        return Err(FrontError::PolicyFailed {
            failed: policies.len() - reports.len(),
            total: policies.len(),
        });
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/01_overload_balance.toml")
    }

    #[test]
    fn quiet_run_prints_summary_and_speed() {
        let opts = SimOptions {
            file: scenario(),
            policies: vec![PolicyKind::Haiku, PolicyKind::GlobalRoundRobin],
            duration_ms: Some(200),
            quiet: true,
            scale: 1,
            ..Default::default()
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let reports = run_scenario(&opts, &mut out, &mut err).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(reports.len(), 2);
        assert!(text.starts_with("summary:\n"), "{text}");
        assert!(text.contains(&summary_line(&reports[0])), "{text}");
        assert_eq!(text.matches("speed [").count(), 2, "{text}");
        assert!(err.is_empty());
    }

    #[test]
    fn missing_file_is_a_scenario_error() {
        let opts = SimOptions {
            file: PathBuf::from("/nonexistent/scenario.toml"),
            scale: 1,
            ..Default::default()
        };
        let r = run_scenario(&opts, &mut Vec::new(), &mut Vec::new());
        assert!(matches!(r, Err(FrontError::Scenario(_))), "{r:?}");
    }
}
