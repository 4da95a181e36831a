//! `pacer run FILE`: the VMs of a config file, once under the file's (or
//! the command line's) policy, or once per policy with `--compare`; what
//! it prints, the `--json` document, the exit code.

use super::validate::load_config;
use crate::documents::run::RunDocument;
use crate::documents::run::RunEntry;
use crate::output::{
    out, EXIT_BAD_INPUT, EXIT_NO_GUEST_STATUS, EXIT_OK, EXIT_VM_FAILED, EXIT_WRITE_FAILED,
};
use std::path::{Path, PathBuf};
use std::time::Instant;
use vmm::policy::PolicyChoice;
use vmm::results::format_summary;
use vmm::runner::{self, RunEvent, RunOptions};
use vmm::seccomp::ThreadKind;

/// The closing text of `pacer run --help`.
pub const HELP: &str = "Examples:
  pacer run configs/demo.toml                         under the file's policy
  pacer run configs/demo.toml --policy host           the same VMs left to the host kernel
  pacer run configs/demo.toml --compare haiku,host    one after the other; who did better per VM
  pacer run configs/demo.toml --compare haiku,haiku:power-saving --json cmp.json
  pacer run configs/demo.toml --compare haiku,host --repeat 5   a verdict with a p-value
  pacer run configs/engine-smoke.toml --status        a status line per second on stderr
  pacer run kut.toml --exit-status-from-guest         the guest's own exit status

Results (each VM's summary, the comparison) go to stdout; status lines to
stderr. Each run writes its own directory under the log directory (consoles,
<vm>.results.jsonl, config.toml, config.resolved.toml); `latest` points at it.

Exit codes:
  0  every VM succeeded
  1  a VM failed or timed out, or the run was stopped (SIGINT, SIGTERM)
  2  bad input: the config, an argument, an unwritable --json, a busy
     --api-socket; nothing was started and no run directory was created
  3  a result or log could not be written (full disk, file-size limit): the
     results are incomplete (each such file ends with an \"incomplete\" line
     when the disk takes one, and has no \"stop\" line)
With --exit-status-from-guest: the low 8 bits of the guest's status, 2 if none.";

/// Arguments of `pacer run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The config file (TOML; see docs/config-reference.md).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Use this policy instead of the file's, optionally with a mode:
    /// haiku, haiku:power-saving, global-rr, pinned, eevdf, host.
    #[arg(long, value_name = "POLICY[:MODE]")]
    pub policy: Option<PolicyChoice>,
    /// Also write the run as one JSON document here (schema
    /// pacer-run, schemas/).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Print a status line every second on stderr, with one line per
    /// vCPU under the scheduled policies (SIGUSR1 writes the
    /// scheduler's snapshot to the run directory at any time).
    #[arg(long)]
    pub status: bool,
    /// Run the config once per policy, one after the other, and say per
    /// VM which did better, e.g. haiku,host or haiku,haiku:power-saving
    /// (bare: every policy).
    #[arg(
        long,
        value_name = "POLICY[:MODE],..",
        value_delimiter = ',',
        num_args = 0..=1,
        default_missing_value = "haiku,global-rr,pinned,eevdf,host",
        conflicts_with = "policy"
    )]
    pub compare: Vec<PolicyChoice>,
    /// With --compare: run every policy N times, round after round (each
    /// round every policy once), and judge each VM by a permutation test
    /// over the runs (p < 0.01 and more than 5 % apart, else "not
    /// significant" and the runs that would be needed).
    #[arg(long, value_name = "N", default_value_t = 1, requires = "compare", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// Exit with the guest's own exit status (isa-debug-exit:
    /// `(v << 1) | 1`; bench exit port: its value), low 8 bits; 2 if it
    /// set none. Needs a config with exactly one VM.
    #[arg(long)]
    pub exit_status_from_guest: bool,
    /// Run without the per-thread seccomp filters (for debugging).
    #[arg(long)]
    pub no_seccomp: bool,
    /// Use this Haiku mode instead of the file's: low-latency or
    /// power-saving (as --policy P:MODE).
    #[arg(long, value_name = "MODE", conflicts_with = "compare", value_parser = vmm::suggest::mode)]
    pub mode: Option<vcpu_sched::Mode>,
    /// Use this dispatch mechanism instead of the file's: ranked (the
    /// default: KVM's in-kernel local APIC, the host kernel switching
    /// vCPU threads by the engine's ranks), threads (Pacer's own local
    /// APIC), workers or kvm-irqchip; with --compare, for every scheduled
    /// policy.
    #[arg(long, value_name = "DISPATCH", value_parser = vmm::suggest::dispatch)]
    pub dispatch: Option<vcpu_engine::DispatchKind>,
    /// Write the run's directory under this directory instead of the
    /// file's `log_dir` (relative to the current directory).
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// Record a scheduling trace into FILE (scheduled policies; read it
    /// with `pacer trace summary|export|plot FILE`).
    #[arg(long, value_name = "FILE", conflicts_with = "compare")]
    pub trace: Option<PathBuf>,
    #[command(flatten)]
    pub api: crate::commands::ctl::ApiArgs,
}

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum RunCommandError {
    #[error("cannot write {path}: {source}")]
    WriteJson {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Run `pacer run`; returns the process exit code.
pub fn main(args: RunArgs, run_start: Instant) -> i32 {
    let RunArgs {
        file,
        policy,
        json,
        status,
        compare,
        repeat: args_repeat,
        exit_status_from_guest,
        no_seccomp,
        mode,
        dispatch,
        log_dir,
        trace,
        api,
    } = args;
    // Before any VM starts: a result that cannot be written is bad input.
    for (flag, path) in [("--json", &json), ("--trace", &trace)] {
        if let Some(path) = path {
            if let Err(why) = vmm::input::check_output_file(path) {
                eprintln!("pacer run: {flag}: {why}");
                return EXIT_BAD_INPUT;
            }
        }
    }
    if !no_seccomp {
        // Several runs one after the other: the thread that starts
        // them stays unconfined (it starts threads for each run).
        let kinds: &[ThreadKind] = if compare.is_empty() {
            &ThreadKind::ALL
        } else {
            ThreadKind::all_but_runner()
        };
        if let Err(e) = vmm::seccomp::enable(kinds) {
            eprintln!("pacer run: running without seccomp filters: {e}");
        }
    }
    if !compare.is_empty() {
        if api.options().is_enabled() {
            eprintln!("pacer run: --api-socket and --api-http serve one run, not --compare");
            return EXIT_BAD_INPUT;
        }
        let runs = RunsOf {
            file: &file,
            dispatch,
            log_dir: log_dir.as_deref(),
            json,
            status,
            run_start,
            repeat: args_repeat,
        };
        return run_compare(&runs, &compare);
    }
    let config = match load_config(&file, policy, mode, dispatch, log_dir.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return EXIT_BAD_INPUT;
        }
    };
    if exit_status_from_guest && config.vms.len() != 1 {
        eprintln!(
            "pacer run: --exit-status-from-guest needs exactly one [[vm]] ({} has {})",
            file.display(),
            config.vms.len()
        );
        return EXIT_BAD_INPUT;
    }
    let opts = RunOptions {
        run_start,
        status,
        trace,
        api: api.options(),
    };
    let results = match runner::run(&config, &opts, &print_event) {
        Ok(r) => r,
        Err(
            e @ (runner::RunError::LogDir(_)
            | runner::RunError::Api(_)
            | runner::RunError::TraceUnderHost
            | runner::RunError::Trace(_)),
        ) => {
            eprintln!("pacer run: {e}");
            return EXIT_BAD_INPUT;
        }
        Err(e) => {
            eprintln!("pacer run: {e}");
            return EXIT_VM_FAILED;
        }
    };
    if let Some(dir) = &results.run_dir {
        crate::output::status(&format!(
            "pacer: this run's logs and results: {}\n",
            dir.display()
        ));
    }
    if let Some(t) = &results.trace {
        crate::output::status(&format!(
            "pacer: scheduling trace: {} ({} events{}, {} lost{})\n",
            t.path.display(),
            t.records,
            if t.error.is_some() { " readable" } else { "" },
            t.lost,
            t.error
                .as_ref()
                .map(|e| format!("; incomplete: {e}"))
                .unwrap_or_default()
        ));
    }
    if let Some(path) = json {
        let doc = RunDocument::new(file.clone(), vec![RunEntry::of(&config, &results)], None);
        if let Err(e) = write_json(&path, &doc) {
            eprintln!("pacer run: results not saved: {e}");
            return EXIT_WRITE_FAILED;
        }
    }
    if let Some(code) = write_failures(&results) {
        return code;
    }
    if exit_status_from_guest {
        return guest_exit_code(results.vms.first().and_then(|v| v.exit_status));
    }
    let failed: Vec<&str> = results
        .vms
        .iter()
        .filter(|v| !v.ok)
        .map(|v| v.name.as_str())
        .collect();
    if failed.is_empty() {
        out(&format!(
            "pacer: all {} VM(s) succeeded\n",
            results.vms.len()
        ));
        EXIT_OK
    } else {
        out(&format!("pacer: failed VM(s): {}\n", failed.join(", ")));
        EXIT_VM_FAILED
    }
}

fn print_event(ev: RunEvent<'_>) {
    match ev {
        RunEvent::VmFinished(r) => out(&format_summary(r)),
        RunEvent::Stopping(sig) => eprintln!("pacer: {sig} received, stopping all VMs"),
        RunEvent::Status(line) => crate::output::status(&format!("{line}\n")),
        RunEvent::Snapshot(Ok(path)) => crate::output::status(&format!(
            "pacer: scheduler snapshot written to {}\n",
            path.display()
        )),
        RunEvent::Snapshot(Err(why)) => eprintln!("pacer: no snapshot: {why}"),
        RunEvent::ApiReady { socket, page } => {
            eprintln!("{}", crate::commands::ctl::api_ready_line(socket, page))
        }
    }
}

/// What every run of a `--compare` shares.
struct RunsOf<'a> {
    file: &'a Path,
    dispatch: Option<vcpu_engine::DispatchKind>,
    log_dir: Option<&'a Path>,
    json: Option<PathBuf>,
    status: bool,
    run_start: Instant,
    /// Runs of each policy (`--repeat`).
    repeat: u32,
}

/// `pacer run FILE --compare P1,P2,..`: the same VMs under each policy in
/// turn, then per VM who did better, then the per-vCPU table.
fn run_compare(runs_of: &RunsOf<'_>, policies: &[PolicyChoice]) -> i32 {
    // Every policy's config is checked before anything runs.
    let mut configs = Vec::new();
    for &p in policies {
        match load_config(
            runs_of.file,
            Some(p),
            None,
            runs_of.dispatch,
            runs_of.log_dir,
        ) {
            Ok(c) => configs.push((p, c)),
            Err(e) => {
                eprintln!("{e}");
                return EXIT_BAD_INPUT;
            }
        }
    }
    let mut runs = Vec::new();
    let mut entries = Vec::new();
    let mut all_ok = true;
    let mut write_failed = false;
    let rounds = runs_of.repeat.max(1);
    let rounds_of_configs = (1..=rounds).flat_map(|round| configs.iter().map(move |c| (round, c)));
    for (round, (p, config)) in rounds_of_configs {
        let (p, config) = (*p, config);
        if rounds > 1 {
            out(&format!("== policy {p} (round {round} of {rounds})\n"));
        } else {
            out(&format!("== policy {p}\n"));
        }
        let opts = RunOptions {
            run_start: runs_of.run_start,
            status: runs_of.status,
            trace: None,
            api: Default::default(),
        };
        match runner::run(config, &opts, &print_event) {
            Ok(r) => {
                all_ok &= r.ok;
                write_failed |= write_failures(&r).is_some();
                entries.push(RunEntry::of(config, &r));
                runs.push((p.to_string(), r));
            }
            Err(e) => {
                eprintln!("pacer run ({p}): {e}");
                return match e {
                    runner::RunError::LogDir(_) => EXIT_BAD_INPUT,
                    _ => EXIT_VM_FAILED,
                };
            }
        }
    }
    let comparison = if rounds > 1 {
        crate::compare::compare_repeated(&runs)
    } else {
        crate::compare::compare(&runs)
    };
    // The per-vCPU table of the first round (the others are in the JSON).
    let first_round = &runs[..runs.len().min(policies.len())];
    out(&format!(
        "\n{}\n{}",
        crate::compare::format(&comparison),
        crate::compare::format_vcpus(first_round)
    ));
    if let Some(path) = &runs_of.json {
        let doc = RunDocument::new(runs_of.file.to_path_buf(), entries, Some(comparison));
        if let Err(e) = write_json(path, &doc) {
            eprintln!("pacer run: results not saved: {e}");
            return EXIT_WRITE_FAILED;
        }
    }
    if write_failed {
        EXIT_WRITE_FAILED
    } else if all_ok {
        EXIT_OK
    } else {
        EXIT_VM_FAILED
    }
}

/// If a VM's results or logs could not be written: say so (one line per
/// VM) and give [`EXIT_WRITE_FAILED`].
fn write_failures(results: &vmm::results::RunResults) -> Option<i32> {
    let failed: Vec<_> = results
        .vms
        .iter()
        .filter(|v| v.status == vmm::results::STATUS_WRITE_ERROR)
        .collect();
    // A scheduling trace whose write failed is a lost result too; what
    // the file holds up to the failure (its whole frames) still reads.
    let trace = results.trace.as_ref().and_then(|t| {
        t.error.as_ref().map(|e| {
            format!(
                "{e}; the file holds {} readable events up to the failure",
                t.records
            )
        })
    });
    if failed.is_empty() && trace.is_none() {
        return None;
    }
    for v in &failed {
        eprintln!("pacer run: results not saved: vm {}: {}", v.name, v.message);
    }
    if let Some(e) = &trace {
        eprintln!("pacer run: results not saved: {e}");
    }
    let mut what = Vec::new();
    if !failed.is_empty() {
        what.push(format!(
            "{} VM(s) could not write their results or logs",
            failed.len()
        ));
    }
    if trace.is_some() {
        what.push("the scheduling trace could not be written".to_string());
    }
    out(&format!("pacer: results incomplete: {}\n", what.join("; ")));
    Some(EXIT_WRITE_FAILED)
}

/// Write a JSON document (pretty, one trailing newline).
fn write_json(path: &std::path::Path, doc: &impl serde::Serialize) -> Result<(), RunCommandError> {
    let text = serde_json::to_string_pretty(doc).unwrap_or_default();
    vmm::whole_file::write(path, text + "\n").map_err(|source| RunCommandError::WriteJson {
        path: path.to_path_buf(),
        source,
    })
}

/// The process exit code for a guest exit status under
/// `--exit-status-from-guest` (a process status has 8 bits).
pub fn guest_exit_code(status: Option<u64>) -> i32 {
    match status {
        Some(s) => (s & 0xff) as i32,
        None => EXIT_NO_GUEST_STATUS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use devices::debug_exit::debug_exit_status;

    #[test]
    fn guest_exit_codes() {
        // kvm-unit-tests: exit(0) -> 1 (pass), exit(1) -> 3 (failures).
        assert_eq!(guest_exit_code(Some(debug_exit_status(0))), 1);
        assert_eq!(guest_exit_code(Some(debug_exit_status(1))), 3);
        assert_eq!(guest_exit_code(Some(debug_exit_status(0x80))), 1);
        assert_eq!(guest_exit_code(Some(0)), 0);
        assert_eq!(guest_exit_code(None), 2);
    }
}
