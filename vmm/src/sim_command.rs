//! `pacer sim SCENARIO`: the deterministic scheduler simulator
//! (`vcpu_sched::sim`), through the same front end as the `sim` example,
//! so both print the same tables, summaries and speed lines.

use std::path::PathBuf;
use vcpu_sched::sim::front::{run_scenario, FrontError, SimOptions};
use vcpu_sched::PolicyKind;

/// The closing text of `pacer sim --help`.
pub const HELP: &str = "Examples:
  pacer sim vcpu_sched/scenarios/03_bursty_waker.toml                  under haiku
  pacer sim vcpu_sched/scenarios/03_bursty_waker.toml --compare        every policy
  pacer sim vcpu_sched/scenarios/01_overload_balance.toml --compare haiku,pinned -q
  pacer sim vcpu_sched/scenarios/04_message_passing.toml --topology 2x22x2 --scale 4

With -q only the summary lines are printed. Scenario files and what they
expect: vcpu_sched/scenarios/README.md.

Exit codes:
  0  every policy ran with no violation of the scheduler's rules
  1  a policy violated one (the monitor's counts say which)
  2  bad input: the scenario file or an argument";

/// Arguments of `pacer sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// The scenario file (TOML; see vcpu_sched/scenarios/).
    #[arg(value_name = "SCENARIO")]
    pub file: PathBuf,
    /// Run under this policy: haiku, global-rr, pinned, eevdf (repeat the
    /// flag for several) [default: haiku].
    #[arg(long, value_name = "POLICY")]
    pub policy: Vec<PolicyKind>,
    /// Run under each of these policies and print a summary line per
    /// policy (bare: every policy), e.g. haiku,pinned.
    #[arg(
        long,
        value_name = "POLICY,..",
        value_delimiter = ',',
        num_args = 0..=1,
        conflicts_with = "policy"
    )]
    pub compare: Option<Vec<PolicyKind>>,
    /// Write the report(s) as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// The random seed (same seed, same report, bit for bit) [default: the
    /// scenario's].
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Simulated time to run [default: the scenario's].
    #[arg(long, value_name = "MS")]
    pub duration_ms: Option<u64>,
    /// A synthetic topology instead of the scenario's, e.g. 2x22x2.
    #[arg(long, value_name = "SPEC")]
    pub topology: Option<String>,
    /// Multiply every group's vCPU count.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub scale: u32,
    /// Print the first N scheduler calls.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub trace: u64,
    /// Add the policy's own snapshot table.
    #[arg(long)]
    pub snapshot: bool,
}

/// Run `pacer sim`; returns the exit code (0 ok, 1 a policy failed, 2 bad input).
pub fn main(a: SimArgs) -> i32 {
    let opts = SimOptions {
        file: a.file,
        policies: match a.compare {
            Some(list) if list.is_empty() => PolicyKind::ALL.to_vec(),
            Some(list) => list,
            None => a.policy,
        },
        json: a.json,
        seed: a.seed,
        duration_ms: a.duration_ms,
        topology: a.topology,
        scale: a.scale,
        // -q (global): the summary lines only.
        quiet: crate::cli::quiet(),
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
