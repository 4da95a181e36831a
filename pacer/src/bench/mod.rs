//! `pacer bench`: guest benchmark matrices.
//!
//! A matrix file names the axes — policies (Pacer's, `host`, the `qemu`
//! peer, and `native`: the Linux suite on the host without a VM), VM
//! layouts, workloads, repetitions — and a per-cell time limit. Every cell runs in turn on the matrix's host CPUs, in an order
//! interleaved across policies, and is written to `results.jsonl` and
//! `results.csv` as soon as it ends (so `--resume` continues an
//! interrupted run); at the end come a terminal summary (medians, min-max,
//! ratios to the baselines), `summary.json`, plots and `report.html`.
//!
//! Module map: [`matrix`] (the file, validation; `load.rs` reads it and
//! checks its VMs with `vm_check.rs`), [`workload`] (workload
//! kinds and their parameters), [`cells`] (expansion, order, the `Config`
//! of a cell), [`run`] (the runner, resume), [`metrics`] (the one adapter
//! from VM results and console lines to metrics), [`store`] (JSONL + CSV),
//! [`summary`] (medians, ratios, the table), [`plots`], [`report`] (HTML),
//! [`qemu`] (the QEMU peer), [`native`] (the suite on the host),
//! [`procs`] (a cell's child processes), [`progress`] (the terminal
//! progress bar), [`unixbench`] (the `unixbench` workload: a Linux
//! guest's boot and the suite's console lines as metrics).

pub mod cells;
pub mod headline;
pub mod host_load;
mod load;
pub mod matrix;
pub mod metrics;
pub mod native;
pub mod plots;
pub mod procs;
pub mod progress;
pub mod qemu;
pub mod report;
pub mod run;
pub mod select;
pub mod settings;
pub mod store;
pub mod summary;
pub mod unixbench;
pub mod verdict;
pub mod vm_check;
pub mod workload;

pub use matrix::{Matrix, MatrixError};
pub use run::{run_matrix, BenchEvent, BenchOptions, BenchOutcome, RunMatrixError};
