//! The subcommands of `pacer` with more to them than a few lines: each
//! module holds its arguments, its `--help` closing text and its `main`,
//! returning the process exit code. `topology`, `completions` and
//! `config-reference` (a few lines each) are in [`crate::cli`].
//!
//! A command imports [`crate::output`] for what it prints and its exit
//! codes, never [`crate::cli`]: the arrows run from the command line down.

pub mod bench;
pub mod bench_lab;
pub mod ctl;
pub mod man;
pub mod run;
pub mod sim;
pub mod trace;
pub mod unixbench;
pub mod validate;
