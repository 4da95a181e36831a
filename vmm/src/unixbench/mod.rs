//! The host side of the UnixBench-style suite (`guests/linux/suite`,
//! binary `ubench`): parse its result lines, score them as UnixBench's
//! System Benchmarks Index does, print the table, and run the same suite
//! natively on the host as the reference for a guest's numbers.
//!
//! The suite is this project's own code for UnixBench's twelve index tests
//! (same names, units, baselines, durations, pass counts and formula); its
//! numbers are not comparable with published UnixBench results, only with
//! each other: a guest against the host running the same binary.
//!
//! - [`catalog`]: the twelve tests, their baselines and units.
//! - [`parse`]: `UB ...` lines out of a console log (garbage-tolerant).
//! - [`score`]: per-test score and the index.
//! - [`report`]: the tables, with guest/host ratios when given a host run.
//! - [`host`]: running `ubench` natively (`pacer unixbench --host`).
//! - [`cli`]: the `pacer unixbench` subcommand.

pub mod catalog;
pub mod cli;
pub mod host;
pub mod parse;
pub mod report;
pub mod score;

pub use parse::{parse_log, Log, Run};
pub use score::{summarize, Summary};
