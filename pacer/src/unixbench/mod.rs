//! The host side of the UnixBench-style suite (`guests/linux/suite`,
//! binary `ubench`): score its result lines as UnixBench's System
//! Benchmarks Index does, print the table, and run the same suite natively
//! on the host as the reference for a guest's numbers.
//!
//! The suite is this project's own code for UnixBench's twelve index tests
//! (same names, units, baselines, durations, pass counts and formula); its
//! numbers are not comparable with published UnixBench results, only with
//! each other: a guest against the host running the same binary.
//!
//! - [`score`]: per-test score and the index.
//! - [`report`]: the tables, with guest/host ratios when given a host run.
//! - [`host`]: running `ubench` natively (`pacer unixbench --host`).
//!
//! The tests' catalog and the console lines' parser are the VMM's
//! (`vmm::unixbench`); the subcommand is `commands::unixbench`.

pub mod host;
pub mod report;
pub mod score;

pub use score::{summarize, Summary};
