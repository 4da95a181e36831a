//! The JSON documents Pacer writes, one published schema each: their
//! common header and kinds, and the documents the VMM itself writes (a
//! run's entries and event lines, the scheduler snapshot, the config's
//! view). The documents of the tool's outputs (the run document, bench
//! cells and summary, UnixBench) are the `pacer` crate's
//! (`pacer::documents`), built on this header.
//!
//! Every JSON output is a document of a named kind with a JSON Schema in
//! the repository (`schemas/<kind>.schema.json`, draft 2020-12), tested
//! against what the code writes (`pacer/tests/schemas.rs`):
//!
//! | kind | written by |
//! |---|---|
//! | `pacer-run` | `pacer run --json` (one run or `--compare`: always an object with `runs`) |
//! | `pacer-vm-events` | each line of a run's `<vm>.results.jsonl` |
//! | `pacer-sched-snapshot` | SIGUSR1: `sched-snapshot-<ms>.json` |
//! | `pacer-bench-cell` | each line of `pacer bench`'s `results.jsonl`, each row of `results.csv` |
//! | `pacer-bench-summary` | `pacer bench`'s `summary.json` |
//! | `pacer-bench-shard` | `pacer bench`'s `shard.json`: which part of which matrix a folder holds |
//! | `pacer-unixbench` | `pacer unixbench --json` |
//! | `pacer-control-change` | each line of a run's `control.jsonl` |
//! | `pacer-api-vms`, `-stats`, `-status`, `-samples`, `-keys`, `-set`, `-vm-state`, `-error` | the control API's answers (`pacer ctl --format json`) |
//! | `pacer-trace-summary` | `pacer trace summary --json` |
//! | `pacer-trace-export` | `otherData` of `pacer trace export`'s Chrome JSON |
//! | `pacer-sim`, `pacer-sim-replay` | `pacer sim --json`, `pacer sim --replay --json` |
//!
//! Each document (each line of a JSON-lines file) starts with the same
//! header ([`Header`]): `schema` (its kind), `schema_version`
//! ([`SCHEMA_VERSION`]; a change that renames or retypes a field bumps it)
//! and `pacer` (the version and the git commit it was built from). A run's
//! documents also carry the policy and mode it ran under and the resolved
//! config (`config.rs`), and the run directory holds a copy of the config.
//!
//! One naming rule for every field: the unit is in the name, once, as the
//! last word (`run_ns`, `p99_ns`, `units_per_s`, `memory_mib`, `tsc_khz`,
//! `wall_ns`); times and durations are integer nanoseconds; ratios and
//! fractions have no unit (`run_fraction`, 0..1); counts are plain words
//! (`wakeups`, one spelling). A value that was not measured is `null`,
//! never 0 or "" (the host kernel keeps no wake latency: `wake_latency` is
//! null under `host`). Lists of per-vCPU things are one array of objects
//! that name their vCPU, never parallel positional arrays.
//!
//! The in-memory structs stay what the code needs; the documents are views
//! built from them here, so the published shape changes only on purpose.

pub mod snapshot;

use serde::Serialize;

/// Version of every document schema. Bump it with any change that renames,
/// removes or retypes a field (adding a field is compatible).
pub const SCHEMA_VERSION: u32 = 1;

/// The document kinds (each names its schema file).
pub const RUN: &str = "pacer-run";
pub const VM_EVENTS: &str = "pacer-vm-events";
pub const SCHED_SNAPSHOT: &str = "pacer-sched-snapshot";
pub const BENCH_CELL: &str = "pacer-bench-cell";
pub const BENCH_SUMMARY: &str = "pacer-bench-summary";
pub const BENCH_SHARD: &str = "pacer-bench-shard";
pub const UNIXBENCH: &str = "pacer-unixbench";
pub const CONTROL_CHANGE: &str = "pacer-control-change";
pub const API_VMS: &str = "pacer-api-vms";
pub const API_STATS: &str = "pacer-api-stats";
pub const API_STATUS: &str = "pacer-api-status";
pub const API_SAMPLES: &str = "pacer-api-samples";
pub const API_KEYS: &str = "pacer-api-keys";
pub const API_SET: &str = "pacer-api-set";
pub const API_VM_STATE: &str = "pacer-api-vm-state";
pub const API_ERROR: &str = "pacer-api-error";
pub const TRACE_SUMMARY: &str = "pacer-trace-summary";
pub const TRACE_EXPORT: &str = "pacer-trace-export";
pub const SIM: &str = "pacer-sim";
pub const SIM_REPLAY: &str = "pacer-sim-replay";

/// Every kind, in the order of the table above.
pub const KINDS: [&str; 20] = [
    RUN,
    VM_EVENTS,
    SCHED_SNAPSHOT,
    BENCH_CELL,
    BENCH_SUMMARY,
    BENCH_SHARD,
    UNIXBENCH,
    CONTROL_CHANGE,
    API_VMS,
    API_STATS,
    API_STATUS,
    API_SAMPLES,
    API_KEYS,
    API_SET,
    API_VM_STATE,
    API_ERROR,
    TRACE_SUMMARY,
    TRACE_EXPORT,
    SIM,
    SIM_REPLAY,
];

/// The version of the control API's documents and of `control.jsonl`'s
/// lines: 2 since their times are in ns (`t_run_ns`, `interval_ns`,
/// `unix_time_ns`) and latencies name their unit (`p99_ns`).
pub const API_SCHEMA_VERSION: u32 = 2;

/// The git commit Pacer was built from (`build.rs`), if known.
pub const COMMIT: Option<&str> = option_env!("PACER_COMMIT");

/// Who wrote a document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Producer {
    pub version: String,
    /// Null when built without git and without `PACER_COMMIT`.
    pub commit: Option<String>,
}

impl Producer {
    /// This build of Pacer.
    pub fn this() -> Producer {
        Producer {
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: COMMIT.map(str::to_string),
        }
    }
}

/// `0.1.0 (commit 0123456789ab)`, for `--version`.
pub fn version_line() -> &'static str {
    static LINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    LINE.get_or_init(|| match COMMIT {
        Some(c) => format!(
            "{} (commit {})",
            env!("CARGO_PKG_VERSION"),
            &c[..c.len().min(12)]
        ),
        None => format!("{} (commit unknown)", env!("CARGO_PKG_VERSION")),
    })
}

/// The fields every document starts with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Header {
    pub schema: String,
    pub schema_version: u32,
    pub pacer: Producer,
}

impl Header {
    pub fn new(kind: &str) -> Header {
        Header::versioned(kind, SCHEMA_VERSION)
    }

    /// The header of a kind whose shape has its own version.
    pub fn versioned(kind: &str, schema_version: u32) -> Header {
        Header {
            schema: kind.to_string(),
            schema_version,
            pacer: Producer::this(),
        }
    }
}

/// `body` (a JSON object) with the header of `kind` at `schema_version`
/// added: for documents built as JSON values.
pub fn with_header(
    kind: &str,
    schema_version: u32,
    mut body: serde_json::Value,
) -> serde_json::Value {
    if let serde_json::Value::Object(map) = &mut body {
        let header = Header::versioned(kind, schema_version);
        map.insert("schema".into(), header.schema.into());
        map.insert("schema_version".into(), header.schema_version.into());
        map.insert(
            "pacer".into(),
            serde_json::to_value(&header.pacer).unwrap_or_default(),
        );
    }
    body
}

/// `null` for a value that reads 0 when it was not measured.
pub fn nonzero(v: u64) -> Option<u64> {
    (v != 0).then_some(v)
}

/// `null` for an empty string.
pub fn nonempty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// Milliseconds (as the runner keeps them) to integer nanoseconds.
pub fn ms_to_ns(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1e6).round() as u64
    } else {
        0
    }
}
