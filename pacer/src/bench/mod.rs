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
//! [`summary`] (medians, ratios, the table), [`verdict`] (the
//! permutation test behind "best"), [`select`] (`--only-policy`,
//! `--only-layout`), [`plots`], [`report`] (HTML),
//! [`qemu`] (the QEMU peer), [`native`] (the suite on the host),
//! [`procs`] (a cell's child processes), [`progress`] (the terminal
//! progress bar), [`unixbench`] (the `unixbench` workload: a Linux
//! guest's boot and the suite's console lines as metrics).
//!
//! Beyond one host: [`shard`] (`--shard I/N`: a matrix's cells split over
//! hosts, `shard.json`), [`host_facts`] (the host recorded with every
//! cell), [`merge`] (`pacer bench merge`: folders into one, refusing
//! mixed matrices and doubled cells), [`hosts`] (machine kinds, the hosts
//! side by side), [`slurm`] (`--slurm`: a job array and a dependent
//! merge).

pub mod cells;
pub mod headline;
pub mod host_facts;
pub mod hosts;
mod load;
pub mod matrix;
pub mod merge;
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
pub mod shard;
pub mod slurm;
pub mod store;
pub mod summary;
pub mod unixbench;
pub mod verdict;
pub mod vm_check;
pub mod workload;

pub use matrix::{Matrix, MatrixError};
pub use run::{run_matrix, BenchEvent, BenchOptions, BenchOutcome, RunMatrixError};
