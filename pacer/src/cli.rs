//! The `pacer` command line: the subcommands and their arguments (clap
//! derive), what each prints, and the exit codes.
//!
//! ```text
//! pacer run FILE [--policy P[:MODE]] [--compare P1,P2,..] [--json FILE] [--status]
//!                [--mode MODE] [--dispatch D] [--log-dir DIR] [--exit-status-from-guest] [--no-seccomp]
//!                [--trace FILE]   record a scheduling trace
//!                [--api-socket PATH] [--api-http 127.0.0.1:PORT]  with the control API
//! pacer validate FILE [--policy P[:MODE]] [--mode MODE] [--dispatch D] [--log-dir DIR]
//! pacer topology [--spec 2x22x2]      print the host (or a synthetic) topology
//! pacer bench MATRIX --out DIR [--resume] [--dry-run]   (bench::command)
//! pacer sim SCENARIO [--policy P] [--compare [P1,P2]]    (sim_command)
//! pacer sim --replay TRACE [--topology S] [--policy P]   replay a scheduling trace
//! pacer trace summary|export|plot|dump TRACE   read a scheduling trace (trace::command)
//! pacer unixbench --host | --report LOG                  (unixbench::cli)
//! pacer ctl SOCKET ls | stats | set | pause | resume | stop | watch  (crate::ctl_command)
//! pacer completions SHELL | man [--out DIR] | config-reference
//! ```
//! One spelling per flag across subcommands: `--policy P[:MODE]` picks a
//! policy, `--compare P1,P2,..` runs under each and compares (bare: every
//! policy), `--json FILE` writes the run's document, `--out DIR` a
//! directory of results. `-q` silences the status lines (stderr), `-v`
//! adds debug messages; results go to stdout, status and errors to stderr.
//!
//! Exit codes ([`EXIT_CODES`]): 0 ok, 1 a VM failed, 2 bad input, 3 a
//! result or log could not be written (full disk, file-size limit). With
//! `--exit-status-from-guest` (one VM only) `pacer run` exits instead with
//! the status the guest asked for, as QEMU does with isa-debug-exit: the
//! low 8 bits of `(v << 1) | 1` for a write of `v` to port 0xF4 (so 1 means
//! a kvm-unit-tests pass), or of the bench exit port's value; and with 2
//! when there is no such status (bad input, or the VM stopped otherwise:
//! timeout, fault, signal). isa-debug-exit statuses are odd, so 2 never
//! collides with them. The results JSON has the full value (`exit_status`).

use crate::config::{Config, Overrides};
use crate::documents::run::{RunDocument, RunEntry};
use crate::policy::PolicyChoice;
use crate::results::format_summary;
use crate::runner::{self, RunEvent, RunOptions};
use crate::seccomp::ThreadKind;
use clap::{ArgAction, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

pub const EXIT_OK: i32 = 0;
pub const EXIT_VM_FAILED: i32 = 1;
pub const EXIT_BAD_INPUT: i32 = 2;
/// A result or log could not be written (full disk, file-size limit): the
/// run's results are incomplete whatever the VMs did.
pub const EXIT_WRITE_FAILED: i32 = 3;
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

/// The exit codes, as every `--help` states them.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  success: every VM succeeded (bench: every cell ok or n/a)
  1  a VM (or a bench cell) failed or timed out, or the run was stopped
  2  bad input: a config, matrix or argument error; nothing was started
  3  a result or log could not be written (full disk): the results are incomplete";

#[derive(Debug, Parser)]
#[command(
    name = "pacer",
    version = crate::documents::version_line(),
    about = "Pacer: a KVM VMM with its own vCPU scheduler",
    long_about = "Pacer: a virtual machine monitor on Linux KVM whose core is its own \
        vCPU scheduler (Haiku's, with SMT and cache awareness). It boots VMs from a \
        config file, runs benchmark matrices across scheduling policies, and \
        simulates the scheduler deterministically.",
    after_help = ROOT_HELP,
)]
pub struct Cli {
    /// Print no status lines (stderr), only results, warnings and errors.
    #[arg(
        short,
        long,
        global = true,
        conflicts_with = "verbose",
        help_heading = "Global options"
    )]
    pub quiet: bool,
    /// Print debug messages too (-vv: trace).
    #[arg(short, long, global = true, action = ArgAction::Count, help_heading = "Global options")]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// The root `--help`'s closing text: examples, then the exit codes.
const ROOT_HELP: &str = "Examples:
  pacer validate configs/demo.toml                 check a config, start nothing
  pacer run configs/demo.toml --compare haiku,host the same VMs under two policies
  pacer bench benches/smoke.toml --out target/bench/smoke
  pacer sim vcpu_sched/scenarios/03_bursty_waker.toml --compare
  pacer completions bash > ~/.local/share/bash-completion/completions/pacer

Exit codes:
  0  success: every VM succeeded (bench: every cell ok or n/a)
  1  a VM (or a bench cell) failed or timed out, or the run was stopped
  2  bad input: a config, matrix or argument error; nothing was started
  3  a result or log could not be written (full disk): the results are incomplete";

/// Whether `-q` asked for no status lines.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Silence (or not) the status lines of [`status`].
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether status lines are silenced (`-q`).
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// A status line on stderr (progress, where files went), unless `-q`.
pub fn status(text: &str) {
    if !quiet() {
        use std::io::Write;
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the VMs of a config file.
    #[command(after_help = RUN_HELP)]
    Run {
        /// The config file (TOML; see docs/config-reference.md).
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Use this policy instead of the file's, optionally with a mode:
        /// haiku, haiku:power-saving, global-rr, pinned, eevdf, host.
        #[arg(long, value_name = "POLICY[:MODE]")]
        policy: Option<PolicyChoice>,
        /// Also write the run as one JSON document here (schema
        /// pacer-run, schemas/).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Print a status line every second on stderr, with one line per
        /// vCPU under the scheduled policies (SIGUSR1 writes the
        /// scheduler's snapshot to the run directory at any time).
        #[arg(long)]
        status: bool,
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
        compare: Vec<PolicyChoice>,
        /// Exit with the guest's own exit status (isa-debug-exit:
        /// `(v << 1) | 1`; bench exit port: its value), low 8 bits; 2 if it
        /// set none. Needs a config with exactly one VM.
        #[arg(long)]
        exit_status_from_guest: bool,
        /// Run without the per-thread seccomp filters (for debugging).
        #[arg(long)]
        no_seccomp: bool,
        /// Use this Haiku mode instead of the file's: low-latency or
        /// power-saving (as --policy P:MODE).
        #[arg(long, value_name = "MODE", conflicts_with = "compare")]
        mode: Option<vcpu_sched::Mode>,
        /// Use this dispatch mechanism instead of the file's: threads,
        /// workers or kvm-irqchip (KVM's in-kernel local APIC); with
        /// --compare, for every scheduled policy.
        #[arg(long, value_name = "DISPATCH")]
        dispatch: Option<vcpu_engine::DispatchKind>,
        /// Write the run's directory under this directory instead of the
        /// file's `log_dir` (relative to the current directory).
        #[arg(long, value_name = "DIR")]
        log_dir: Option<PathBuf>,
        /// Record a scheduling trace into FILE (scheduled policies; read it
        /// with `pacer trace summary|export|plot FILE`).
        #[arg(long, value_name = "FILE", conflicts_with = "compare")]
        trace: Option<PathBuf>,
        #[command(flatten)]
        api: crate::ctl_command::ApiArgs,
    },
    /// Check a config file (fields, paths, CPU sets, the host's limits)
    /// without starting anything.
    #[command(after_help = VALIDATE_HELP)]
    Validate {
        /// The config file (TOML; see docs/config-reference.md).
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Check against this policy (and mode) instead of the file's.
        #[arg(long, value_name = "POLICY[:MODE]")]
        policy: Option<PolicyChoice>,
        /// Check with this Haiku mode instead of the file's.
        #[arg(long, value_name = "MODE")]
        mode: Option<vcpu_sched::Mode>,
        /// Check with this dispatch mechanism instead of the file's.
        #[arg(long, value_name = "DISPATCH")]
        dispatch: Option<vcpu_engine::DispatchKind>,
        /// Check this log directory instead of the file's `log_dir`.
        #[arg(long, value_name = "DIR")]
        log_dir: Option<PathBuf>,
    },
    /// Run a benchmark matrix: policies x VM layouts x workloads x repetitions.
    #[command(after_help = crate::bench::command::HELP)]
    Bench(crate::bench::command::BenchArgs),
    /// Run a scheduler simulation scenario (deterministic, no KVM).
    #[command(after_help = crate::sim_command::HELP)]
    Sim(crate::sim_command::SimArgs),
    /// Read a scheduling trace (`pacer run --trace`): summary, export, plot.
    #[command(after_help = crate::trace::command::HELP)]
    Trace(crate::trace::command::TraceArgs),
    /// Print the host CPU topology as vcpu_sched sees it.
    #[command(after_help = TOPOLOGY_HELP)]
    Topology {
        /// A synthetic topology instead of the host's: packages x cores x
        /// threads, or packages x LLCs x cores x threads (2x22x2, 1x8x8x2).
        #[arg(long, value_name = "SPEC")]
        spec: Option<String>,
    },
    /// UnixBench-style suite: run it on the host, or score a guest's console log.
    #[command(after_help = crate::unixbench::cli::HELP)]
    Unixbench(crate::unixbench::cli::UnixbenchArgs),
    /// Print a shell completion script for pacer.
    #[command(after_help = COMPLETIONS_HELP)]
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Write the man pages of pacer and its subcommands.
    #[command(after_help = MAN_HELP)]
    Man {
        /// Write pacer.1 and pacer-SUBCOMMAND.1 into this directory
        /// (created); without it, print pacer.1 on stdout.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Print the reference of every config and matrix key (Markdown).
    #[command(after_help = REFERENCE_HELP)]
    ConfigReference,
    /// Operate a running `pacer run --api-socket`: list, inspect, change, pause, stop.
    #[command(after_help = crate::ctl_command::HELP)]
    Ctl(crate::ctl_command::CtlArgs),
}

const RUN_HELP: &str = "Examples:
  pacer run configs/demo.toml                         under the file's policy
  pacer run configs/demo.toml --policy host           the same VMs left to the host kernel
  pacer run configs/demo.toml --compare haiku,host    one after the other; who did better per VM
  pacer run configs/demo.toml --compare haiku,haiku:power-saving --json cmp.json
  pacer run configs/engine-smoke.toml --status        a status line per second on stderr
  pacer run kut.toml --exit-status-from-guest         the guest's own exit status

Results (each VM's summary, the comparison) go to stdout; status lines to
stderr. Each run writes its own directory under the log directory (consoles,
<vm>.results.jsonl, config.toml, config.resolved.toml); `latest` points at it.

Exit codes:
  0  every VM succeeded
  1  a VM failed or timed out, or the run was stopped (SIGINT, SIGTERM)
  2  bad input: the config, an argument, an unwritable --json; nothing was started
  3  a result or log could not be written (full disk, file-size limit): the
     results are incomplete (each such file ends with an \"incomplete\" line
     when the disk takes one, and has no \"stop\" line)
With --exit-status-from-guest: the low 8 bits of the guest's status, 2 if none.";

const VALIDATE_HELP: &str = "Examples:
  pacer validate configs/demo.toml
  pacer validate configs/demo.toml --policy pinned    would pinned honour it?

Prints the config as resolved on stdout; every error is one line,
file:line:col: field.path: what was expected, what was found.

Exit codes:
  0  the config is valid
  2  it is not (every problem is listed)";

const TOPOLOGY_HELP: &str = "Examples:
  pacer topology                  the host's, from sysfs
  pacer topology --spec 2x22x2    2 packages x 22 cores x 2 threads

Exit codes:
  0  printed
  2  bad --spec, or the host's topology cannot be read";

const COMPLETIONS_HELP: &str = "Examples:
  pacer completions bash > ~/.local/share/bash-completion/completions/pacer
  pacer completions zsh > ~/.zfunc/_pacer
  pacer completions fish > ~/.config/fish/completions/pacer.fish
  bash ci/install-cli.sh ~/.local            binary, completions and man pages

Exit codes:
  0  printed";

const MAN_HELP: &str = "Examples:
  pacer man --out ~/.local/share/man/man1 && man pacer-run
  pacer man | man -l -

Exit codes:
  0  written
  1  the directory or a page could not be written";

const REFERENCE_HELP: &str = "Every key of a host config ([host], [[vm]]) and of a bench matrix
([matrix], [[workload]], [[layout]]) with its type, unit, default and
range, generated from the tables the parsers are tested against; the same
text as docs/config-reference.md.

Examples:
  pacer config-reference | less

Exit codes:
  0  printed";

/// Write to stdout, ignoring errors (a closed pipe must not turn into a
/// panic or a lost run; results are in the files anyway).
pub fn out(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Load `file` with the command line's choices: `--policy P[:MODE]`,
/// `--mode`, `--dispatch` and `--log-dir` override the file's; an error
/// is one line.
pub fn load_config(
    file: &Path,
    policy: Option<PolicyChoice>,
    mode: Option<vcpu_sched::Mode>,
    dispatch: Option<vcpu_engine::DispatchKind>,
    log_dir: Option<&Path>,
) -> Result<Config, String> {
    let mut config = Config::load_overridden(
        file,
        Overrides {
            policy: policy.map(|c| c.policy),
        },
    )
    .map_err(|e| e.to_string())?;
    if let Some(m) = policy.and_then(|c| c.mode).or(mode) {
        if !config.host.policy.uses_mode() {
            return Err(format!(
                "{}: --mode {m}: policy \"{}\" has no mode (the host kernel schedules its threads)",
                file.display(),
                config.host.policy
            ));
        }
        config.host.mode = m;
    }
    if let Some(d) = dispatch {
        config.host.dispatch = d;
    }
    if let Some(dir) = log_dir {
        crate::preflight::check_dir_writable(dir).map_err(|why| {
            format!(
                "--log-dir {}: expected a directory Pacer can create and write, but {why}",
                dir.display()
            )
        })?;
        config.host.log_dir = dir.to_path_buf();
    }
    Ok(config)
}

/// Run the CLI; returns the process exit code.
pub fn main_with(cli: Cli, run_start: Instant) -> i32 {
    set_quiet(cli.quiet);
    match cli.command {
        Command::Unixbench(args) => crate::unixbench::cli::run(&args),
        Command::Bench(args) => crate::bench::command::main(args),
        Command::Sim(args) => crate::sim_command::main(args),
        Command::Trace(args) => crate::trace::command::main(args),
        Command::Ctl(args) => crate::ctl_command::main(args),
        Command::Validate {
            file,
            policy,
            mode,
            dispatch,
            log_dir,
        } => match load_config(&file, policy, mode, dispatch, log_dir.as_deref()) {
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
        Command::Run {
            file,
            policy,
            json,
            status,
            compare,
            exit_status_from_guest,
            no_seccomp,
            mode,
            dispatch,
            log_dir,
            trace,
            api,
        } => {
            // Before any VM starts: a result that cannot be written is bad input.
            for (flag, path) in [("--json", &json), ("--trace", &trace)] {
                if let Some(path) = path {
                    if let Err(why) = crate::preflight::check_output_file(path) {
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
                if let Err(e) = crate::seccomp::enable(kinds) {
                    eprintln!("pacer run: running without seccomp filters: {e}");
                }
            }
            if !compare.is_empty() {
                if api.options().is_enabled() {
                    eprintln!(
                        "pacer run: --api-socket and --api-http serve one run, not --compare"
                    );
                    return EXIT_BAD_INPUT;
                }
                let runs = RunsOf {
                    file: &file,
                    dispatch,
                    log_dir: log_dir.as_deref(),
                    json,
                    status,
                    run_start,
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
                self::status(&format!(
                    "pacer: this run's logs and results: {}\n",
                    dir.display()
                ));
            }
            if let Some(t) = &results.trace {
                self::status(&format!(
                    "pacer: scheduling trace: {} ({} events, {} lost{})\n",
                    t.path.display(),
                    t.records,
                    t.lost,
                    t.error
                        .as_ref()
                        .map(|e| format!("; incomplete: {e}"))
                        .unwrap_or_default()
                ));
            }
            if let Some(path) = json {
                let doc =
                    RunDocument::new(file.clone(), vec![RunEntry::of(&config, &results)], None);
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
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut cmd, "pacer", &mut text);
            out(&String::from_utf8_lossy(&text));
            EXIT_OK
        }
        Command::Man { out: dir } => match crate::manpages::write(dir.as_deref()) {
            Ok(text) => {
                out(&text);
                EXIT_OK
            }
            Err(e) => {
                eprintln!("pacer man: {e}");
                EXIT_VM_FAILED
            }
        },
        Command::ConfigReference => {
            out(&crate::config_reference::markdown());
            EXIT_OK
        }
    }
}

fn print_event(ev: RunEvent<'_>) {
    match ev {
        RunEvent::VmFinished(r) => out(&format_summary(r)),
        RunEvent::Stopping(sig) => eprintln!("pacer: {sig} received, stopping all VMs"),
        RunEvent::Status(line) => status(&format!("{line}\n")),
        RunEvent::Snapshot(Ok(path)) => status(&format!(
            "pacer: scheduler snapshot written to {}\n",
            path.display()
        )),
        RunEvent::Snapshot(Err(why)) => eprintln!("pacer: no snapshot: {why}"),
        RunEvent::ApiReady { socket, page } => {
            eprintln!("{}", crate::ctl_command::api_ready_line(socket, page))
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
    for (p, config) in configs {
        out(&format!("== policy {p}\n"));
        let opts = RunOptions {
            run_start: runs_of.run_start,
            status: runs_of.status,
            trace: None,
            api: Default::default(),
        };
        match runner::run(&config, &opts, &print_event) {
            Ok(r) => {
                all_ok &= r.ok;
                write_failed |= write_failures(&r).is_some();
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
fn write_failures(results: &crate::results::RunResults) -> Option<i32> {
    let failed: Vec<_> = results
        .vms
        .iter()
        .filter(|v| v.status == crate::results::STATUS_WRITE_ERROR)
        .collect();
    // A scheduling trace whose write failed is a lost result too.
    let trace = results.trace.as_ref().and_then(|t| t.error.clone());
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
    use crate::policy::Policy;
    use devices::debug_exit::debug_exit_status;

    #[test]
    fn every_argument_is_described() {
        use clap::CommandFactory;
        let root = Cli::command();
        for sub in root.get_subcommands() {
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                assert!(
                    arg.get_help().is_some() || ["help", "version"].contains(&id),
                    "pacer {} {id}: no description",
                    sub.get_name()
                );
            }
        }
        root.debug_assert();
    }

    #[test]
    fn policies_take_a_mode_and_compare_means_the_same_everywhere() {
        let cli = Cli::try_parse_from([
            "pacer",
            "run",
            "f.toml",
            "--compare",
            "haiku,haiku:power-saving",
        ])
        .unwrap();
        let Command::Run { compare, .. } = cli.command else {
            panic!()
        };
        assert_eq!(compare.len(), 2);
        assert_eq!(compare[1].to_string(), "haiku:power-saving");
        // Bare: every policy.
        let cli = Cli::try_parse_from(["pacer", "run", "f.toml", "--compare"]).unwrap();
        let Command::Run { compare, .. } = cli.command else {
            panic!()
        };
        assert_eq!(compare.len(), Policy::ALL.len());
        let cli = Cli::try_parse_from(["pacer", "sim", "s.toml", "--compare"]).unwrap();
        let Command::Sim(a) = cli.command else {
            panic!()
        };
        assert_eq!(a.compare, Some(vec![]));
        let cli =
            Cli::try_parse_from(["pacer", "sim", "s.toml", "--compare", "haiku,pinned", "-q"])
                .unwrap();
        assert!(cli.quiet);
        let Command::Sim(a) = cli.command else {
            panic!()
        };
        assert_eq!(a.compare.map(|c| c.len()), Some(2));
        assert!(
            Cli::try_parse_from(["pacer", "run", "f.toml", "--policy", "host:power-saving"])
                .is_err()
        );
        assert!(Cli::try_parse_from(["pacer", "-q", "-v", "topology"]).is_err());
        let cli = Cli::try_parse_from(["pacer", "topology", "-vv"]).unwrap();
        assert_eq!(cli.verbose, 2);
    }

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
