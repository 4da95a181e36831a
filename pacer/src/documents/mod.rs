//! The JSON documents of the tool's outputs, one published schema each
//! (`schemas/`), with the header every document starts with
//! (`vmm::documents::Header`):
//!
//! | kind | written by |
//! |---|---|
//! | `pacer-run` | `pacer run --json` ([`run`]) |
//! | `pacer-bench-cell` | each line of `pacer bench`'s `results.jsonl` ([`matrix`]) |
//! | `pacer-bench-summary` | `pacer bench`'s `summary.json` ([`summary`]) |
//! | `pacer-unixbench` | `pacer unixbench --json` ([`unixbench`]) |
//! | `pacer-sim`, `pacer-sim-replay` | `pacer sim --json`, `pacer sim --replay --json` ([`sim`]) |
//! | `pacer-trace-summary` | `pacer trace summary --json` (`trace::summary`) |
//! | `pacer-trace-export` | `otherData` of `pacer trace export` (`trace::export`) |
//!
//! The VMM's own documents (a run's event lines, the scheduler snapshot)
//! are `vmm::documents`.

pub mod matrix;
pub mod run;
pub mod sim;
pub mod summary;
pub mod unixbench;
