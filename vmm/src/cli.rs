//! The `pacer` command line.
//!
//! ```text
//! pacer run FILE [--json results.json]   run the VMs of FILE
//! pacer validate FILE                    check FILE without starting anything
//! pacer topology [--spec 2x22x2]         print the host (or a synthetic) topology
//! pacer unixbench --host | --report LOG  UnixBench-style suite (unixbench::cli)
//! ```
//! Exit codes: 0 ok, 1 a VM failed, 2 bad input.

use crate::config::Config;
use crate::runner::{self, RunOptions};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::time::Instant;

pub const EXIT_OK: i32 = 0;
pub const EXIT_VM_FAILED: i32 = 1;
pub const EXIT_BAD_INPUT: i32 = 2;

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
        /// Also write all results as one JSON document here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Check a config file (fields, paths, CPU sets) without starting anything.
    Validate { file: PathBuf },
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
        Command::Validate { file } => match Config::load(&file) {
            Ok(c) => {
                out(&format!("{}: OK\n{c}", file.display()));
                EXIT_OK
            }
            Err(e) => {
                eprintln!("{e}");
                EXIT_BAD_INPUT
            }
        },
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
        Command::Run { file, json } => {
            let config = match Config::load(&file) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return EXIT_BAD_INPUT;
                }
            };
            let opts = RunOptions {
                run_start,
                print_summaries: true,
            };
            let results = match runner::run(&config, &opts) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("pacer run: {e}");
                    return EXIT_VM_FAILED;
                }
            };
            if let Some(path) = json {
                let text = serde_json::to_string_pretty(&results).unwrap_or_default();
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    let _ = std::fs::create_dir_all(dir);
                }
                if let Err(source) = std::fs::write(&path, text + "\n") {
                    eprintln!("{}", CliError::WriteJson { path, source });
                    return EXIT_VM_FAILED;
                }
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
