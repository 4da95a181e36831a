//! The `pacer` command line.
//!
//! ```text
//! pacer run FILE [--policy P | --compare P1,P2] [--json results.json] [--status]
//!                [--exit-status-from-guest] [--no-seccomp]   run the VMs of FILE
//! pacer validate FILE [--policy P]              check FILE without starting anything
//! pacer topology [--spec 2x22x2]         print the host (or a synthetic) topology
//! pacer unixbench --host | --report LOG  UnixBench-style suite (unixbench::cli)
//! pacer bench MATRIX --out DIR [--resume] run a benchmark matrix (vmm::bench)
//! pacer sim SCENARIO [--compare ...]     run a scheduler simulation scenario
//! ```
//! Exit codes: 0 ok, 1 a VM failed, 2 bad input. With
//! `--exit-status-from-guest` (one VM only) `pacer run` exits instead with
//! the status the guest asked for, as QEMU does with isa-debug-exit: the
//! low 8 bits of `(v << 1) | 1` for a write of `v` to port 0xF4 (so 1 means
//! a kvm-unit-tests pass), or of the bench exit port's value; and with 2
//! when there is no such status (bad input, or the VM stopped otherwise:
//! timeout, fault, signal). isa-debug-exit statuses are odd, so 2 never
//! collides with them. The results JSON has the full value (`exit_status`).

use crate::config::{Config, Overrides};
use crate::documents::run::{RunDocument, RunEntry};
use crate::engine::policy::Policy;
use crate::results::format_summary;
use crate::runner::{self, RunEvent, RunOptions};
use crate::seccomp::ThreadKind;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::time::Instant;

pub const EXIT_OK: i32 = 0;
pub const EXIT_VM_FAILED: i32 = 1;
pub const EXIT_BAD_INPUT: i32 = 2;
/// With `--exit-status-from-guest`: the VM stopped without a guest status.
pub const EXIT_NO_GUEST_STATUS: i32 = 2;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("cannot write {path}: {source}")]
    WriteJson {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Debug, Parser)]
#[command(
    name = "pacer",
    version,
    about = "Pacer: a KVM VMM with its own vCPU scheduler"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the VMs of a config file.
    Run {
        /// The config file (TOML).
        file: PathBuf,
        /// Use this policy instead of the file's: haiku, global-rr, pinned, host.
        #[arg(long)]
        policy: Option<Policy>,
        /// Also write all results as one JSON document here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Print a one-line status every second (SIGUSR1 writes the
        /// scheduler's snapshot to the log directory at any time).
        #[arg(long)]
        status: bool,
        /// Run the config once per policy, one after the other, and print
        /// a side-by-side per-vCPU table, e.g. `--compare haiku,host`.
        #[arg(long, value_delimiter = ',', conflicts_with = "policy")]
        compare: Vec<Policy>,
        /// Exit with the guest's own exit status (isa-debug-exit:
        /// `(v << 1) | 1`; bench exit port: its value), low 8 bits; 2 if it
        /// set none. Needs a config with exactly one VM.
        #[arg(long)]
        exit_status_from_guest: bool,
        /// Run without the per-thread seccomp filters (for debugging).
        #[arg(long)]
        no_seccomp: bool,
    },
    /// Check a config file (fields, paths, CPU sets) without starting anything.
    Validate {
        file: PathBuf,
        /// Check against this policy instead of the file's.
        #[arg(long)]
        policy: Option<Policy>,
    },
    /// Run a benchmark matrix: policies x VM layouts x workloads x repetitions.
    Bench(crate::bench::command::BenchArgs),
    /// Run a scheduler simulation scenario (deterministic, no KVM).
    Sim(crate::sim_command::SimArgs),
    /// Print the host CPU topology as vcpu_sched sees it.
    Topology {
        /// A synthetic topology instead of the host's, e.g. 2x22x2.
        #[arg(long)]
        spec: Option<String>,
    },
    /// UnixBench-style suite: run it on the host, or score a guest's console log.
    Unixbench(crate::unixbench::cli::UnixbenchArgs),
}

/// Write to stdout, ignoring errors (a closed pipe must not turn into a
/// panic or a lost run; results are in the files anyway).
pub fn out(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Run the CLI; returns the process exit code.
pub fn main_with(cli: Cli, run_start: Instant) -> i32 {
    match cli.command {
        Command::Unixbench(args) => crate::unixbench::cli::run(&args),
        Command::Bench(args) => crate::bench::command::main(args),
        Command::Sim(args) => crate::sim_command::main(args),
        Command::Validate { file, policy } => {
            match Config::load_overridden(&file, Overrides { policy }) {
                Ok(c) => {
                    out(&format!("{}: OK\n{c}", file.display()));
                    EXIT_OK
                }
                Err(e) => {
                    eprintln!("{e}");
                    EXIT_BAD_INPUT
                }
            }
        }
        Command::Topology { spec } => {
            let t = match &spec {
                Some(s) => vcpu_sched::Topology::from_spec(s),
                None => vcpu_sched::Topology::from_sysfs(),
            };
            match t {
                Ok(t) => {
                    out(&t.describe());
                    EXIT_OK
                }
                Err(e) => {
                    eprintln!("pacer topology: {e}");
                    EXIT_BAD_INPUT
                }
            }
        }
        Command::Run {
            file,
            policy,
            json,
            status,
            compare,
            exit_status_from_guest,
            no_seccomp,
        } => {
            // Before any VM starts: a result that cannot be written is bad input.
            if let Some(path) = &json {
                if let Err(why) = crate::preflight::check_output_file(path) {
                    eprintln!("pacer run: --json: {why}");
                    return EXIT_BAD_INPUT;
                }
            }
            if !no_seccomp {
                // Several runs one after the other: the thread that starts
                // them stays unconfined (it starts threads for each run).
                let kinds: &[ThreadKind] = if compare.is_empty() {
                    &ThreadKind::ALL
                } else {
                    &ThreadKind::ALL[..4]
                };
                if let Err(e) = crate::seccomp::enable(kinds) {
                    eprintln!("pacer run: running without seccomp filters: {e}");
                }
            }
            if !compare.is_empty() {
                return run_compare(&file, &compare, json, status, run_start);
            }
            let config = match Config::load_overridden(&file, Overrides { policy }) {
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
            let opts = RunOptions { run_start, status };
            let results = match runner::run(&config, &opts, &print_event) {
                Ok(r) => r,
                Err(e @ runner::RunError::LogDir(_)) => {
                    eprintln!("pacer run: {e}");
                    return EXIT_BAD_INPUT;
                }
                Err(e) => {
                    eprintln!("pacer run: {e}");
                    return EXIT_VM_FAILED;
                }
            };
            if let Some(dir) = &results.run_dir {
                out(&format!(
                    "pacer: this run's logs and results: {}\n",
                    dir.display()
                ));
            }
            if let Some(path) = json {
                let doc =
                    RunDocument::new(file.clone(), vec![RunEntry::of(&config, &results)], None);
                if let Err(e) = write_json(&path, &doc) {
                    eprintln!("{e}");
                    return EXIT_VM_FAILED;
                }
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
    }
}

fn print_event(ev: RunEvent<'_>) {
    match ev {
        RunEvent::VmFinished(r) => out(&format_summary(r)),
        RunEvent::Stopping(sig) => eprintln!("pacer: {sig} received, stopping all VMs"),
        RunEvent::Status(line) => out(&format!("{line}\n")),
        RunEvent::Snapshot(Ok(path)) => {
            eprintln!("pacer: scheduler snapshot written to {}", path.display())
        }
        RunEvent::Snapshot(Err(why)) => eprintln!("pacer: no snapshot: {why}"),
    }
}

/// `pacer run FILE --compare P1,P2,..`: the same VMs under each policy in
/// turn, then one side-by-side table.
fn run_compare(
    file: &std::path::Path,
    policies: &[Policy],
    json: Option<PathBuf>,
    status: bool,
    run_start: Instant,
) -> i32 {
    // Every policy's config is checked before anything runs.
    let mut configs = Vec::new();
    for &p in policies {
        match Config::load_overridden(file, Overrides { policy: Some(p) }) {
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
    for (p, config) in configs {
        out(&format!("== policy {p}\n"));
        let opts = RunOptions { run_start, status };
        match runner::run(&config, &opts, &print_event) {
            Ok(r) => {
                all_ok &= r.ok;
                entries.push(RunEntry::of(&config, &r));
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
    let comparison = crate::compare::compare(&runs);
    out(&format!(
        "\n{}\n{}",
        crate::compare::format(&comparison),
        crate::compare::format_vcpus(&runs)
    ));
    if let Some(path) = json {
        let doc = RunDocument::new(file.to_path_buf(), entries, Some(comparison));
        if let Err(e) = write_json(&path, &doc) {
            eprintln!("{e}");
            return EXIT_VM_FAILED;
        }
    }
    if all_ok {
        EXIT_OK
    } else {
        EXIT_VM_FAILED
    }
}

/// Write a JSON document (pretty, one trailing newline).
fn write_json(path: &std::path::Path, doc: &impl serde::Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(doc).unwrap_or_default();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::write(path, text + "\n").map_err(|source| CliError::WriteJson {
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
