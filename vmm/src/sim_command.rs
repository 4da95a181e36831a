//! `pacer sim SCENARIO`: the deterministic scheduler simulator
//! (`vcpu_sched::sim`), through the same front end as the `sim` example,
//! so both print the same tables, summaries and speed lines.

use std::path::PathBuf;
use vcpu_sched::sim::front::{run_scenario, FrontError, SimOptions};
use vcpu_sched::PolicyKind;

/// Arguments of `pacer sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// The scenario file (TOML; see vcpu_sched/scenarios/).
    pub file: PathBuf,
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
    let opts = SimOptions {
        file: a.file,
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
