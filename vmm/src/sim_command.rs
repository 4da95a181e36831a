//! `pacer sim SCENARIO`: the deterministic scheduler simulator
//! (`vcpu_sched::sim`), through the same front end as the `sim` example,
//! so both print the same tables, summaries and speed lines.
//!
//! `pacer sim --replay TRACE`: the vCPUs of a recorded run (`pacer run
//! --trace`) replayed through the simulator (`trace::replay`), on the
//! recorded topology or `--topology`, under the recorded policy or each
//! `--policy`; each report is followed by the per-vCPU comparison with the
//! recording.

use std::path::PathBuf;
use vcpu_sched::sim::front::{run_scenario, FrontError, SimOptions};
use vcpu_sched::PolicyKind;

/// Arguments of `pacer sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// The scenario file (TOML; see vcpu_sched/scenarios/).
    #[arg(required_unless_present = "replay", conflicts_with = "replay")]
    pub file: Option<PathBuf>,
    /// Replay the vCPUs of a scheduling trace (`pacer run --trace FILE`)
    /// instead of a scenario.
    #[arg(long, value_name = "TRACE")]
    pub replay: Option<PathBuf>,
    /// What a replayed turn asks for: its time on the CPU as scheduled,
    /// or only the CPU time its thread got (without the host's other
    /// processes).
    #[arg(long, value_enum, default_value_t, requires = "replay")]
    pub demand: crate::trace::replay::Demand,
    /// Run under this policy (repeatable): haiku, global-rr, pinned, eevdf.
    #[arg(long)]
    pub policy: Vec<PolicyKind>,
    /// Run under every policy and print a summary line per policy.
    #[arg(long)]
    pub compare: bool,
    /// Write the report(s) as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long)]
    pub seed: Option<u64>,
    #[arg(long)]
    pub duration_ms: Option<u64>,
    /// A synthetic topology instead of the scenario's, e.g. 2x22x2.
    #[arg(long)]
    pub topology: Option<String>,
    /// Multiply every group's vCPU count.
    #[arg(long, default_value_t = 1)]
    pub scale: u32,
    /// Summary lines only.
    #[arg(long)]
    pub quiet: bool,
    /// Print the first N scheduler calls.
    #[arg(long, default_value_t = 0)]
    pub trace: u64,
    /// Add the policy's own snapshot table.
    #[arg(long)]
    pub snapshot: bool,
}

/// Run `pacer sim`; returns the exit code (0 ok, 1 a policy failed, 2 bad input).
pub fn main(a: SimArgs) -> i32 {
    if let Some(trace) = &a.replay {
        return replay(&a, trace);
    }
    let opts = SimOptions {
        file: a.file.unwrap_or_default(),
        policies: if a.compare {
            PolicyKind::ALL.to_vec()
        } else {
            a.policy
        },
        json: a.json,
        seed: a.seed,
        duration_ms: a.duration_ms,
        topology: a.topology,
        scale: a.scale,
        quiet: a.quiet,
        trace: a.trace,
        snapshot: a.snapshot,
    };
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr());
    match run_scenario(&opts, &mut out, &mut err) {
        Ok(_) => crate::cli::EXIT_OK,
        Err(FrontError::Scenario(e)) => {
            eprintln!("{e}");
            crate::cli::EXIT_BAD_INPUT
        }
        Err(FrontError::PolicyFailed { .. }) => crate::cli::EXIT_VM_FAILED,
        Err(FrontError::Io(e)) => {
            eprintln!("{e}");
            crate::cli::EXIT_VM_FAILED
        }
    }
}

/// `pacer sim --replay TRACE`.
fn replay(a: &SimArgs, path: &std::path::Path) -> i32 {
    use crate::cli::{out, EXIT_BAD_INPUT, EXIT_OK, EXIT_VM_FAILED};
    use crate::trace::replay::{compare, comparison_table, replay_of};
    let trace = match crate::trace::TraceFile::read(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return EXIT_BAD_INPUT;
        }
    };
    let topology = match a.topology.as_deref().map(vcpu_sched::Topology::from_spec) {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            eprintln!("pacer sim: --topology: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    let policies: Vec<Option<PolicyKind>> = if a.compare {
        PolicyKind::ALL.iter().copied().map(Some).collect()
    } else if a.policy.is_empty() {
        vec![None]
    } else {
        a.policy.iter().copied().map(Some).collect()
    };
    let mut doc = Vec::new();
    let mut failed = false;
    for p in policies {
        let rec = match replay_of(&trace, topology.clone(), p, a.demand) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{}: {e}", path.display());
                return EXIT_BAD_INPUT;
            }
        };
        let policy = rec.replay.sched.policy;
        match rec.replay.run() {
            Ok(report) => {
                let rows = compare(&rec, &report);
                if !a.quiet {
                    out(&format!("{}\n", report.to_table()));
                }
                out(&format!(
                    "replay of {} under {policy} (kick latency {:.1} us, from the recording):\n{}\n",
                    path.display(),
                    rec.replay.kick_latency_us,
                    comparison_table(policy.as_str(), &rows)
                ));
                doc.push(serde_json::json!({
                    "policy": policy.as_str(),
                    "vcpus": rows,
                    "report": report,
                }));
            }
            Err(e) => {
                eprintln!("policy {policy}: {e}");
                failed = true;
            }
        }
    }
    if let Some(json) = &a.json {
        let text = serde_json::json!({
            "schema_version": crate::trace::format::SCHEMA_VERSION,
            "trace": path,
            "replays": doc,
        });
        if let Err(e) = std::fs::write(
            json,
            serde_json::to_string_pretty(&text).unwrap_or_default() + "\n",
        ) {
            eprintln!("pacer sim: cannot write {}: {e}", json.display());
            return EXIT_VM_FAILED;
        }
    }
    if failed {
        EXIT_VM_FAILED
    } else {
        EXIT_OK
    }
}
