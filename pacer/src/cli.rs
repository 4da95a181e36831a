//! The `pacer` command line: the subcommands and their arguments (clap
//! derive), what each prints, and the exit codes.
//!
//! ```text
//! pacer run FILE [--policy P[:MODE]] [--compare P1,P2,..] [--json FILE] [--status]
//!                [--mode MODE] [--dispatch D] [--log-dir DIR] [--exit-status-from-guest] [--no-seccomp]
//!                [--trace FILE]   record a scheduling trace
//!                [--api-socket PATH] [--api-http 127.0.0.1:PORT]  with the control API
//! pacer validate FILE [--policy P[:MODE]] [--mode MODE] [--dispatch D] [--log-dir DIR]
//! pacer topology [--topology 2x22x2]  print the host (or a synthetic) topology
//! pacer bench MATRIX --out-dir DIR [--resume] [--dry-run] [--shard I/N]
//!             [--only-policy P,..] [--only-layout L,..]   (commands::bench)
//! pacer bench MATRIX --out-dir DIR --slurm --shards N [--partition P]  (commands::bench_lab)
//! pacer bench merge DIR... --out-dir DIR [--matrix FILE]   merge shards / hosts
//! pacer sim SCENARIO [--policy P] [--compare [P1,P2]]    (commands::sim)
//! pacer sim --replay TRACE [--topology S] [--policy P]   replay a scheduling trace
//! pacer trace summary|export|plot|dump TRACE   read a scheduling trace (commands::trace)
//! pacer unixbench --host | --report LOG                  (commands::unixbench)
//! pacer ctl SOCKET ls | stats | set | pause | resume | stop | watch  (commands::ctl)
//! pacer completions SHELL | man [--out-dir DIR] | config-reference
//! ```
//! One meaning per flag name across subcommands (README's "Flags", checked
//! over this tree by `flags_mean_one_thing_everywhere` below): `--policy
//! P[:MODE]` picks a policy, `--compare P1,P2,..` runs under each and
//! compares (bare: every policy), `--json FILE` writes a JSON document into
//! FILE, `--out FILE` writes the command's one output file, `--out-dir DIR`
//! a directory of results, `--topology SPEC` a synthetic topology. Old
//! spellings that meant something else ([`DEPRECATED`]) still work, hidden,
//! with a warning. `-q` silences the status lines (stderr), `-v`
//! adds debug messages; results go to stdout, status and errors to stderr.
//!
//! Exit codes ([`crate::output::EXIT_CODES`]): 0 ok, 1 a VM failed, 2 bad input, 3 a
//! result or log could not be written (full disk, file-size limit). With
//! `--exit-status-from-guest` (one VM only) `pacer run` exits instead with
//! the status the guest asked for, as QEMU does with isa-debug-exit: the
//! low 8 bits of `(v << 1) | 1` for a write of `v` to port 0xF4 (so 1 means
//! a kvm-unit-tests pass), or of the bench exit port's value; and with 2
//! when there is no such status (bad input, or the VM stopped otherwise:
//! timeout, fault, signal). isa-debug-exit statuses are odd, so 2 never
//! collides with them. The results JSON has the full value (`exit_status`).

use crate::output::{out, set_quiet, EXIT_BAD_INPUT, EXIT_OK, EXIT_VM_FAILED};
use clap::{ArgAction, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Parser)]
#[command(
    name = "pacer",
    version = vmm::documents::version_line(),
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

/// Old spellings kept, hidden, for what users already type: (subcommand,
/// flag, what replaced it). Each warns when used.
pub const DEPRECATED: &[(&str, &str, &str)] = &[
    ("ctl", "json", "--format json"),
    ("bench", "out", "--out-dir DIR"),
    ("man", "out", "--out-dir DIR"),
    ("topology", "spec", "--topology SPEC"),
];

/// The root `--help`'s closing text: examples, then the exit codes.
const ROOT_HELP: &str = "Examples:
  pacer validate configs/demo.toml                 check a config, start nothing
  pacer run configs/demo.toml --compare haiku,host the same VMs under two policies
  pacer bench benches/smoke.toml --out-dir target/bench/smoke
  pacer sim vcpu_sched/scenarios/03_bursty_waker.toml --compare
  pacer completions bash > ~/.local/share/bash-completion/completions/pacer

Exit codes:
  0  success: every VM succeeded (bench: every cell ok or n/a)
  1  a VM (or a bench cell) failed or timed out, or the run was stopped
  2  bad input: a config, matrix or argument error; nothing was started
  3  a result or log could not be written (full disk): the results are incomplete";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the VMs of a config file.
    #[command(after_help = crate::commands::run::HELP)]
    Run(crate::commands::run::RunArgs),
    /// Check a config file (fields, paths, CPU sets, the host's limits)
    /// without starting anything.
    #[command(after_help = crate::commands::validate::HELP)]
    Validate(crate::commands::validate::ValidateArgs),
    /// Run a benchmark matrix: policies x VM layouts x workloads x repetitions.
    #[command(after_help = crate::commands::bench::HELP)]
    Bench(crate::commands::bench::BenchArgs),
    /// Run a scheduler simulation scenario (deterministic, no KVM).
    #[command(after_help = crate::commands::sim::HELP)]
    Sim(crate::commands::sim::SimArgs),
    /// Read a scheduling trace (`pacer run --trace`): summary, export, plot.
    #[command(after_help = crate::commands::trace::HELP)]
    Trace(crate::commands::trace::TraceArgs),
    /// Print the host CPU topology as vcpu_sched sees it.
    #[command(after_help = TOPOLOGY_HELP)]
    Topology {
        /// A synthetic topology instead of the host's: packages x cores x
        /// threads, or packages x LLCs x cores x threads (2x22x2, 1x8x8x2).
        #[arg(long, value_name = "SPEC")]
        topology: Option<String>,
        /// Deprecated: --topology SPEC (as `pacer sim --topology`).
        #[arg(long, value_name = "SPEC", hide = true, conflicts_with = "topology")]
        spec: Option<String>,
    },
    /// UnixBench-style suite: run it on the host, or score a guest's console log.
    #[command(after_help = crate::commands::unixbench::HELP)]
    Unixbench(crate::commands::unixbench::UnixbenchArgs),
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
        out_dir: Option<PathBuf>,
        /// Deprecated: --out-dir DIR (every other --out is a FILE).
        #[arg(long, value_name = "DIR", hide = true, conflicts_with = "out_dir")]
        out: Option<PathBuf>,
    },
    /// Print the reference of every config and matrix key (Markdown).
    #[command(after_help = REFERENCE_HELP)]
    ConfigReference,
    /// Operate a running `pacer run --api-socket`: list, inspect, change, pause, stop.
    #[command(after_help = crate::commands::ctl::HELP)]
    Ctl(crate::commands::ctl::CtlArgs),
}

const TOPOLOGY_HELP: &str = "Examples:
  pacer topology                  the host's, from sysfs
  pacer topology --topology 2x22x2    2 packages x 22 cores x 2 threads

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
  pacer man --out-dir ~/.local/share/man/man1 && man pacer-run
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

/// Run the CLI; returns the process exit code.
pub fn main_with(cli: Cli, run_start: Instant) -> i32 {
    set_quiet(cli.quiet);
    match cli.command {
        Command::Unixbench(args) => crate::commands::unixbench::run(&args),
        Command::Bench(args) => crate::commands::bench::main(args),
        Command::Sim(args) => crate::commands::sim::main(args),
        Command::Trace(args) => crate::commands::trace::main(args),
        Command::Ctl(args) => crate::commands::ctl::main(args),
        Command::Validate(args) => crate::commands::validate::main(&args),
        Command::Topology { topology, spec } => {
            if spec.is_some() {
                crate::output::deprecated("pacer topology --spec", "--topology");
            }
            let t = match topology.as_ref().or(spec.as_ref()) {
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
        Command::Run(args) => crate::commands::run::main(args, run_start),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut cmd, "pacer", &mut text);
            out(&String::from_utf8_lossy(&text));
            EXIT_OK
        }
        Command::Man { out_dir, out: old } => {
            if old.is_some() {
                crate::output::deprecated("pacer man --out DIR", "--out-dir DIR");
            }
            let dir = out_dir.or(old);
            let cmd = <Cli as clap::CommandFactory>::command();
            match crate::commands::man::write(cmd, dir.as_deref()) {
                Ok(text) => {
                    out(&text);
                    EXIT_OK
                }
                Err(e) => {
                    eprintln!("pacer man: {e}");
                    EXIT_VM_FAILED
                }
            }
        }
        Command::ConfigReference => {
            out(&crate::config_reference::markdown());
            EXIT_OK
        }
    }
}

/// A parse error for `args` (the process's, program name first) with a
/// "did you mean" for an unknown subcommand: ours ([`vmm::suggest::command`],
/// the rule every other closed set of names uses, which also knows
/// abbreviations: `rn` for `run`, `sts` for `stats`) wins over clap's,
/// which misses short names and offers `stop` for `sts`; clap's stays
/// when ours has none.
pub fn with_subcommand_hint(mut e: clap::Error, args: &[String]) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    use clap::CommandFactory;
    if e.kind() != ErrorKind::InvalidSubcommand {
        return e;
    }
    let Some(ContextValue::String(bad)) = e.get(ContextKind::InvalidSubcommand).cloned() else {
        return e;
    };
    // The command the unknown word was given to: follow the words before
    // it down the subcommands.
    let mut cmd = Cli::command();
    for word in args.iter().skip(1) {
        if *word == bad {
            break;
        }
        if let Some(sub) = cmd.find_subcommand(word).cloned() {
            cmd = sub;
        }
    }
    let names: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
    if let Some(name) = vmm::suggest::command(&bad, &names) {
        e.insert(
            ContextKind::SuggestedSubcommand,
            ContextValue::String(name.to_string()),
        );
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::run::RunArgs;
    use vmm::policy::Policy;

    #[test]
    fn unknown_subcommands_get_a_near_miss() {
        let hint = |args: &[&str]| {
            let e = Cli::try_parse_from(args).unwrap_err();
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            with_subcommand_hint(e, &args).to_string()
        };
        assert!(
            hint(&["pacer", "rn"]).contains("'run'"),
            "{}",
            hint(&["pacer", "rn"])
        );
        assert!(hint(&["pacer", "-q", "valdate"]).contains("'validate'"));
        // clap alone offers 'stop' for `sts`.
        let sts = hint(&["pacer", "ctl", "/tmp/s", "sts"]);
        assert!(sts.contains("'stats'") && !sts.contains("'stop'"), "{sts}");
        assert!(!hint(&["pacer", "frobnicate"]).contains("similar"));
    }

    /// Every leaf command of the tree with its path (`trace summary`),
    /// and every command that runs something of its own beside its
    /// subcommands (`bench MATRIX` beside `bench merge`).
    fn leaves(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
        let subs: Vec<&clap::Command> = cmd
            .get_subcommands()
            .filter(|c| c.get_name() != "help")
            .collect();
        let runs_itself = cmd.get_positionals().next().is_some();
        if subs.is_empty() || (runs_itself && !path.is_empty()) {
            out.push((path.trim().to_string(), cmd.clone()));
        }
        for sub in subs {
            leaves(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn every_leaf_help_has_examples_and_exit_codes() {
        use clap::CommandFactory;
        let mut all = Vec::new();
        let mut root = Cli::command();
        root.build();
        leaves(&root, "", &mut all);
        assert!(all.len() >= 20, "{} leaves", all.len());
        for (path, mut cmd) in all {
            let help = cmd.render_long_help().to_string();
            assert!(
                help.contains("Examples:\n  pacer "),
                "pacer {path} --help has no examples:\n{help}"
            );
            assert!(
                help.contains("Exit codes:\n  0  "),
                "pacer {path} --help has no exit codes:\n{help}"
            );
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                let id = arg.get_id().as_str();
                assert!(
                    arg.get_help().is_some() || ["help", "version"].contains(&id),
                    "pacer {path} {id}: no description"
                );
            }
        }
    }

    /// A flag's kind: the value it takes (without the policy's optional
    /// mode, which only some subcommands' policies have), or a switch.
    fn kind(arg: &clap::Arg) -> String {
        if !arg.get_action().takes_values() {
            return "switch".into();
        }
        let names: Vec<String> = arg
            .get_value_names()
            .map(|v| v.iter().map(|s| s.replace("[:MODE]", "")).collect())
            .unwrap_or_else(|| vec![arg.get_id().as_str().to_uppercase()]);
        names.join(" ")
    }

    #[test]
    fn flags_mean_one_thing_everywhere() {
        use clap::CommandFactory;
        use std::collections::BTreeMap;
        let mut all = Vec::new();
        let mut root = Cli::command();
        root.build();
        leaves(&root, "", &mut all);
        // Flag -> (kind -> the commands that use it so).
        let mut uses: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
        for (path, cmd) in &all {
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if ["help", "version", "quiet", "verbose"].contains(&long) {
                    continue;
                }
                let top = path.split(' ').next().unwrap_or_default();
                if arg.is_hide_set() {
                    assert!(
                        DEPRECATED.iter().any(|(c, f, _)| *c == top && *f == long),
                        "pacer {path} --{long}: hidden but not in DEPRECATED"
                    );
                    continue;
                }
                uses.entry(long.to_string())
                    .or_default()
                    .entry(kind(arg))
                    .or_default()
                    .push(path.clone());
            }
        }
        for (flag, kinds) in &uses {
            assert_eq!(
                kinds.len(),
                1,
                "--{flag} means {} things: {kinds:?}",
                kinds.len()
            );
        }
        // The convention as README states it.
        let want = [
            ("json", "FILE"),
            ("out", "FILE"),
            ("out-dir", "DIR"),
            ("log-dir", "DIR"),
            ("trace", "FILE"),
            ("topology", "SPEC"),
        ];
        for (flag, kind) in want {
            let kinds = uses.get(flag).unwrap_or_else(|| panic!("no --{flag}"));
            assert!(kinds.contains_key(kind), "--{flag}: {kinds:?}, not {kind}");
        }
        let readme = include_str!("../../README.md");
        let table = readme
            .split("\n## Flags")
            .nth(1)
            .expect("README has a \"## Flags\" section");
        for (flag, kinds) in &uses {
            // Subcommands, not leaves: ctl's global flags reach all of its.
            let used_by: std::collections::BTreeSet<&str> = kinds
                .values()
                .flatten()
                .map(|p| p.split(' ').next().unwrap_or_default())
                .collect();
            if used_by.len() > 1 || want.iter().any(|(f, _)| f == flag) {
                let kind = kinds.keys().next().unwrap();
                let spelled = if kind == "switch" {
                    format!("`--{flag}`")
                } else {
                    format!("`--{flag} {kind}")
                };
                assert!(
                    table.contains(&spelled),
                    "README's Flags section lacks {spelled}"
                );
            }
        }
        for (cmd, flag, new) in DEPRECATED {
            assert!(
                table.contains(&format!("pacer {cmd} --{flag}")) && table.contains(new),
                "README: deprecated pacer {cmd} --{flag}"
            );
        }
    }

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
        let Command::Run(RunArgs { compare, .. }) = cli.command else {
            panic!()
        };
        assert_eq!(compare.len(), 2);
        assert_eq!(compare[1].to_string(), "haiku:power-saving");
        // Bare: every policy.
        let cli = Cli::try_parse_from(["pacer", "run", "f.toml", "--compare"]).unwrap();
        let Command::Run(RunArgs { compare, .. }) = cli.command else {
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
}
