//! The `pacer` tool: the command line and its commands over the `vmm`
//! library, benchmark matrices, scheduling-trace analysis, plots, the
//! UnixBench-style suite's host side, and the documents of the tool's
//! outputs.
//!
//! Module map: [`cli`] (the argument tree and the dispatch to a command),
//! [`output`] (stdout, status lines, exit codes), [`commands`] (one module per subcommand that has more
//! than a few lines), [`bench`] (benchmark matrices: cells, runs, results,
//! summary, plots, report), [`trace`] (reading and analysing a scheduling
//! trace), [`compare`] (`run --compare`: per VM its headline under each
//! policy, ratios, verdict), [`unixbench`] (scoring and the host's
//! reference run), [`documents`] (`pacer-run`, bench and UnixBench
//! documents), [`config_reference`] (every key of a config and a matrix).
//!
//! The VMM itself (config, boot, VMs, the runner, the control API,
//! results) is the `vmm` crate; the vCPU engine is `vcpu_engine`.

pub mod bench;
pub mod cli;
pub mod commands;
pub mod compare;
pub mod config_reference;
pub mod documents;
pub mod output;
pub mod trace;
pub mod unixbench;
