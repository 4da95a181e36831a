//! `pacer-sim` (`pacer sim --json`) and `pacer-sim-replay` (`pacer sim
//! --replay TRACE --json`): the simulator's reports under the documents'
//! naming rule. `vcpu_sched`'s report names its latencies' fields without
//! their unit and holds the scheduler's raw snapshot; here latencies are
//! `{count, p50_ns, p99_ns, p999_ns, max_ns, mean_ns}` and the snapshot is the one
//! the SIGUSR1 file carries (`vmm::documents::snapshot::SchedulerDoc`).

use serde_json::{json, Value};
use std::path::Path;
use vcpu_sched::sim::SimReport;
use vcpu_sched::LatencySummary;
use vmm::documents::snapshot::SchedulerDoc;
use vmm::documents::{with_header, SCHEMA_VERSION, SIM, SIM_REPLAY};

/// A latency summary with its unit in its fields' names; null when
/// nothing was measured.
fn latency(l: &LatencySummary) -> Value {
    if l.count == 0 {
        return Value::Null;
    }
    json!({
        "count": l.count,
        "p50_ns": l.p50,
        "p99_ns": l.p99,
        "p999_ns": l.p999,
        "max_ns": l.max,
        "mean_ns": l.mean,
    })
}

/// One report as a document's member.
pub fn report(r: &SimReport) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or_default();
    for (list, items) in [
        (
            "groups",
            &r.groups.iter().map(|g| g.wake_latency).collect::<Vec<_>>(),
        ),
        ("vcpus", &r.vcpus.iter().map(|c| c.wake_latency).collect()),
    ] {
        if let Some(rows) = v[list].as_array_mut() {
            for (row, l) in rows.iter_mut().zip(items.iter()) {
                row["wake_latency"] = latency(l);
            }
        }
    }
    if let Some(rows) = v["groups"].as_array_mut() {
        for (row, g) in rows.iter_mut().zip(&r.groups) {
            if let Some(l) = &g.round_trip {
                row["round_trip"] = latency(l);
            }
            if let Some(q) = &g.requests {
                row["requests"]["latency"] = latency(&q.latency);
            }
        }
    }
    if let Some(rows) = v["vcpus"].as_array_mut() {
        for (row, c) in rows.iter_mut().zip(&r.vcpus) {
            row["entity"] = json!(c.entity.to_string());
        }
    }
    v["snapshot"] = serde_json::to_value(SchedulerDoc::of(&r.snapshot)).unwrap_or_default();
    v
}

/// `pacer sim --json`: every policy's report, in the order run.
pub fn sim_document(reports: &[SimReport]) -> Value {
    with_header(
        SIM,
        SCHEMA_VERSION,
        json!({ "reports": reports.iter().map(report).collect::<Vec<_>>() }),
    )
}

/// [`sim_document`] as the file's text.
pub fn sim_json(reports: &[SimReport]) -> String {
    serde_json::to_string_pretty(&sim_document(reports)).unwrap_or_default() + "\n"
}

/// `pacer sim --replay --json`: each replay (`policy`, the per-vCPU
/// comparison with the recording, the report).
pub fn replay_document(trace: &Path, replays: Vec<Value>) -> Value {
    with_header(
        SIM_REPLAY,
        SCHEMA_VERSION,
        json!({ "trace": trace, "replays": replays }),
    )
}
