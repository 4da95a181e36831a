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
use vcpu_sched::sim::front::{run_workload, FrontError, SimOptions};
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
    #[arg(
        value_name = "SCENARIO",
        required_unless_present = "replay",
        conflicts_with = "replay"
    )]
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
    /// Run under this policy: haiku, global-rr, pinned, eevdf (repeat the
    /// flag for several) [default: haiku].
    #[arg(long, value_name = "POLICY", value_parser = vmm::suggest::sim_policy)]
    pub policy: Vec<PolicyKind>,
    /// Run under each of these policies and print a summary line per
    /// policy (bare: every policy), e.g. haiku,pinned.
    #[arg(
        long,
        value_name = "POLICY,..",
        value_delimiter = ',',
        num_args = 0..=1,
        conflicts_with = "policy",
        value_parser = vmm::suggest::sim_policy
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
    /// Print the first N scheduler calls (`--trace` is a trace file, as
    /// in `pacer run`; see --replay).
    #[arg(long = "print-calls", value_name = "N", default_value_t = 0)]
    pub trace: u64,
    /// Add the policy's own snapshot table.
    #[arg(long)]
    pub snapshot: bool,
}

/// Run `pacer sim`; returns the exit code (0 ok, 1 a policy failed, 2 bad input).
pub fn main(a: SimArgs) -> i32 {
    // Before simulating: a report that cannot be written is bad input.
    if let Some(path) = &a.json {
        if let Err(why) = vmm::input::check_output_file(path) {
            eprintln!("pacer sim: --json: {why}");
            return crate::output::EXIT_BAD_INPUT;
        }
    }
    if let Some(trace) = &a.replay {
        return replay(&a, trace);
    }
    let opts = SimOptions {
        file: a.file.unwrap_or_default(),
        policies: match a.compare {
            Some(list) if list.is_empty() => PolicyKind::ALL.to_vec(),
            Some(list) => list,
            None => a.policy,
        },
        json: a.json,
        write_file: Some(|path, bytes| vmm::whole_file::write(path, bytes)),
        to_json: Some(crate::documents::sim::sim_json),
        seed: a.seed,
        duration_ms: a.duration_ms,
        topology: a.topology,
        scale: a.scale,
        // -q (global): the summary lines only.
        quiet: crate::output::quiet(),
        trace: a.trace,
        snapshot: a.snapshot,
    };
    // The scenario through Pacer's bounded reader (a FIFO or /dev/zero is
    // refused, not read for ever).
    let workload = vmm::input::read_config_text(&opts.file, "a scenario")
        .map_err(|e| format!("cannot read {}: {e}", opts.file.display()))
        .and_then(|text| {
            vcpu_sched::sim::Workload::from_toml(&text)
                .map_err(|e| format!("{}: {e}", opts.file.display()))
        });
    let workload = match workload {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{e}");
            return crate::output::EXIT_BAD_INPUT;
        }
    };
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr());
    match run_workload(&opts, workload, &mut out, &mut err) {
        Ok(_) => crate::output::EXIT_OK,
        Err(FrontError::Scenario(e)) => {
            eprintln!("{e}");
            crate::output::EXIT_BAD_INPUT
        }
        Err(FrontError::PolicyFailed { .. }) => crate::output::EXIT_VM_FAILED,
        Err(FrontError::Io(e)) => {
            eprintln!("{e}");
            crate::output::EXIT_VM_FAILED
        }
    }
}

/// `pacer sim --replay TRACE`.
fn replay(a: &SimArgs, path: &std::path::Path) -> i32 {
    use crate::output::{out, EXIT_BAD_INPUT, EXIT_OK, EXIT_VM_FAILED};
    use crate::trace::replay::{compare, comparison_table, replay_of};
    let trace = match crate::commands::trace::load(path) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let topology = match a.topology.as_deref().map(vcpu_sched::Topology::from_spec) {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            eprintln!("pacer sim: --topology: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    let policies: Vec<Option<PolicyKind>> = match &a.compare {
        Some(list) if list.is_empty() => PolicyKind::ALL.iter().copied().map(Some).collect(),
        Some(list) => list.iter().copied().map(Some).collect(),
        None if a.policy.is_empty() => vec![None],
        None => a.policy.iter().copied().map(Some).collect(),
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
                if !crate::output::quiet() {
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
                    "report": crate::documents::sim::report(&report),
                }));
            }
            Err(e) => {
                eprintln!("policy {policy}: {e}");
                failed = true;
            }
        }
    }
    if let Some(json) = &a.json {
        let text = crate::documents::sim::replay_document(path, doc);
        if let Err(e) = vmm::whole_file::write(
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
