//! Every JSON document Pacer writes validates against its published
//! schema (`schemas/*.schema.json`), and the schemas are valid JSON
//! Schemas (draft 2020-12).
//!
//! Documents are built two ways: from the library's own builders over
//! results that cover every workload, record kind and null case (no KVM
//! needed), and as the binary writes them from real runs (`pacer run
//! --json`, `--compare`, the run directory's `<vm>.results.jsonl`, the
//! SIGUSR1 snapshot, `pacer bench`'s results.jsonl, results.csv and
//! summary.json, `pacer unixbench --json`; the VM runs print SKIPPED
//! without /dev/kvm).

mod common;

use common::pacer;

use common::{kvm_or_skip, vm_table, TempDir};
use devices::result_payload::{bucket_of, HIST_COUNT_BITS};
use devices::{Marker, RecordKind, ResultRecord};
use pacer::documents::run::RunDocument;
use pacer::documents::run::RunEntry;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use vmm::documents;

const BASE: &str = "https://example.invalid/pacer/schemas/";

fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas")
}

/// Every schema file, by file name.
fn schemas() -> &'static HashMap<String, Value> {
    static S: OnceLock<HashMap<String, Value>> = OnceLock::new();
    S.get_or_init(|| {
        std::fs::read_dir(schema_dir())
            .unwrap()
            .filter_map(|e| {
                let p = e.ok()?.path();
                let name = p.file_name()?.to_str()?.to_string();
                name.ends_with(".schema.json").then(|| {
                    let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap())
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                    (name, v)
                })
            })
            .collect()
    })
}

/// The errors of `doc` against `reference` (a schema file name, with an
/// optional `#/$defs/...` fragment); empty when it validates.
fn errors(reference: &str, doc: &Value) -> Vec<String> {
    let mut registry = jsonschema::Registry::new();
    for (name, schema) in schemas() {
        registry = registry
            .add(format!("{BASE}{name}"), schema.clone())
            .unwrap();
    }
    let registry = registry.prepare().unwrap();
    let validator = jsonschema::options()
        .with_registry(&registry)
        .build(&json!({ "$ref": format!("{BASE}{reference}") }))
        .unwrap_or_else(|e| panic!("{reference}: {e}"));
    validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

fn check(kind: &str, doc: &Value) {
    let errs = errors(&format!("{kind}.schema.json"), doc);
    assert!(
        errs.is_empty(),
        "{kind}: {}\n{}",
        errs.join("\n"),
        serde_json::to_string_pretty(doc).unwrap()
    );
}

/// Every field name under `v` that names a time in ms or us (the naming
/// rule: times are integer ns, `_ns`).
fn ms_or_us_fields(v: &Value, at: &str, found: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k.ends_with("_ms") || k.ends_with("_us") {
                    found.push(format!("{at}/{k}"));
                }
                ms_or_us_fields(x, &format!("{at}/{k}"), found);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                ms_or_us_fields(x, &format!("{at}/{i}"), found);
            }
        }
        _ => {}
    }
}

/// [`check`], and no time named in ms or us anywhere in it.
fn check_ns(kind: &str, doc: &Value) {
    check(kind, doc);
    let mut found = Vec::new();
    ms_or_us_fields(doc, "", &mut found);
    assert!(found.is_empty(), "{kind}: times not in ns: {found:?}");
    assert_eq!(doc["schema"], kind, "{doc}");
}

fn check_jsonl(kind: &str, text: &str) -> usize {
    let mut n = 0;
    for line in text.lines() {
        check(kind, &serde_json::from_str(line).unwrap());
        n += 1;
    }
    n
}

#[test]
fn the_schemas_are_valid_and_name_their_kind() {
    for (name, schema) in schemas() {
        jsonschema::meta::validate(schema).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            schema["$id"],
            format!("{BASE}{name}"),
            "{name}: $id names the file"
        );
    }
    for kind in documents::KINDS {
        let name = format!("{kind}.schema.json");
        let s = &schemas()[&name];
        // The header's schema name is pinned, whatever the document's
        // shape (a JSON-lines schema pins it on its start line).
        assert!(
            s.to_string().contains(&format!("\"const\":\"{kind}\"")),
            "{name} does not pin schema = {kind}"
        );
    }
}

fn rec(kind: RecordKind, vcpu: u32, values: [u64; 5]) -> ResultRecord {
    ResultRecord {
        kind,
        vcpu,
        seq: 0,
        tsc: 12345,
        values,
        text: (kind == RecordKind::Text).then(|| "guest=pacer-bench abi=3".into()),
    }
}

fn pair(ns: u64, count: u64) -> u64 {
    ((bucket_of(ns) as u64) << HIST_COUNT_BITS) | count
}

/// A results log with every record kind and workload, written to `path`.
fn full_log(path: &Path) -> vmm::results::ResultsLog {
    let mut key = 0u64;
    for (i, b) in b"gap_ns".iter().enumerate() {
        key |= (*b as u64) << (8 * i);
    }
    let mut log = vmm::results::ResultsLog::create("all", 1000, Some(path)).unwrap();
    log.marker(0, Marker::FirstInstruction, 5.0, 7.0);
    log.marker(0, Marker::KernelReady, 5.5, 7.5);
    let records = [
        rec(RecordKind::Text, 0, [0x9000, 23, 0, 0, 0]),
        rec(RecordKind::BootTimes, 0, [1, 2, 3, 2, 0]),
        rec(RecordKind::WorkSample, 0, [5, 100, 5, 100, 0]),
        rec(RecordKind::WorkDone, 0, [20, 1000, 20_000, 0, 0]),
        rec(RecordKind::SleepDone, 1, [3, 1, 1_000_000, 4000, 0]),
        rec(RecordKind::Latency, 1, [1, 3, 2000, 9000, 9000]),
        rec(
            RecordKind::Histogram,
            1,
            [1 | (2 << 16), pair(2000, 2), pair(9000, 1), 0, 0],
        ),
        rec(RecordKind::PingpongDone, 2, [50, 500_000, 100, 3, 0]),
        rec(RecordKind::BurstDone, 3, [10, 2, 10_000, 4000, 300_000]),
        rec(RecordKind::Latency, 3, [2, 10, 5, 6, 7]),
        rec(RecordKind::SpinlockDone, 4, [200, 2_000_000, 100, 77, 2000]),
        rec(RecordKind::Latency, 4, [3, 200, 10, 50, 77]),
        rec(RecordKind::Error, 4, [2, key, 0, 0, 0]),
        rec(RecordKind::ServerDone, 5, [90, 1_000_000, 90, 100, 10]),
        rec(RecordKind::Latency, 5, [8, 90, 40_000, 90_000, 95_000]),
        rec(
            RecordKind::Histogram,
            5,
            [8 | (2 << 16), pair(40_000, 89), pair(95_000, 1), 0, 0],
        ),
    ];
    for (i, r) in records.into_iter().enumerate() {
        let vcpu = r.vcpu;
        log.record(vcpu, r, 6.0 + i as f64, 8.0 + i as f64);
    }
    log.rejected(0, &devices::RecordError::BadMagic(1), 30.0);
    log.stopped("success", true, "", 31.0);
    log
}

fn config(dir: &TempDir) -> vmm::config::Config {
    let p = dir.config(&format!(
        "[host]\nlog_dir = \"logs\"\n\n{}",
        vm_table("all", "cpu")
    ));
    vmm::config::Config::load(&p).unwrap()
}

/// A VM result with every workload: vCPU 0 as the engine reports it, vCPU
/// 1 as the host kernel does (no wake latency, no CPUs), vCPUs 2-5 with
/// no scheduling statistics.
fn full_result(dir: &TempDir) -> vmm::results::VmResult {
    let log = full_log(&dir.0.join("all.results.jsonl"));
    let mut r = vmm::results::VmResult::error("all", String::new(), 40.0, "workload=cpu");
    r.status = "success".into();
    r.ok = true;
    r.tsc_khz = 1000;
    r.milestones = log.milestones();
    r.work = log.work();
    r.total_units_per_s = r
        .work
        .iter()
        .filter_map(|w| w.units_per_s)
        .reduce(|a, b| a + b);
    r.vcpu_metrics = log.vcpu_metrics();
    r.guest_errors = log.guest_errors();
    r.markers = log.markers.clone();
    r.records = log.records.clone();
    r.rejected_records = log.rejected;
    r.results_file = Some(dir.0.join("all.results.jsonl"));
    // The engine's statistics are #[non_exhaustive]: default, then fields.
    let mut s0 = vcpu_engine::stats::VcpuSchedStats::default();
    s0.run_ns = 1_000_000;
    s0.ready_wait_ns = 5000;
    s0.wakeups = 3;
    s0.wake_latency_ns.p50 = 100;
    s0.wake_latency_ns.p99 = 900;
    s0.wake_latency_ns.max = 1000;
    s0.migrations = 1;
    s0.preemptions = 2;
    s0.host_cpus = "0-1".into();
    s0.halt_poll.polls = 7;
    s0.halt_poll.woken = 5;
    s0.halt_poll.polled_ns = 42_000;
    let mut s1 = vcpu_engine::stats::VcpuSchedStats::default();
    s1.run_ns = 2_000_000;
    s1.ready_wait_ns = 7000;
    s1.wakeups = 4;
    r.vcpu_sched = vec![s0, s1];
    r.vcpu_stats = vec![Default::default(); 2];
    r
}

/// A trace outcome as a run reports one (the engine fills these; the
/// struct is #[non_exhaustive], so a test takes a real tracer's).
fn trace_outcome(dir: &TempDir) -> vcpu_engine::trace::TraceOutcome {
    let config = vcpu_engine::trace::TraceConfig::new(&dir.0.join("run.trace"));
    let run = vcpu_engine::trace::format::RunMeta {
        policy: "haiku".into(),
        mode: "low-latency".into(),
        dispatch: "threads".into(),
        topology: vcpu_sched::Topology::from_spec("1x2x1").unwrap(),
        start_ns: 0,
        config: None,
        sched: None,
    };
    vcpu_engine::trace::Tracer::start(&config, run)
        .unwrap()
        .outcome()
}

/// The scheduler's CPU rows at the end of a run: haiku, a relaxed
/// co-scheduled VM whose first vCPU ran while its sibling waited.
fn run_sched_cpus() -> Vec<vcpu_sched::stats::CpuStats> {
    use vcpu_sched::{
        build, Coschedule, EntitySpec, SchedClass, SchedConfig, StopReason, Topology, VmId,
    };
    let topo = Topology::from_spec("1x1x1").unwrap();
    let sched = build(topo.clone(), SchedConfig::default()).unwrap();
    sched
        .set_coschedule(VmId(0), Coschedule::Relaxed, 0)
        .unwrap();
    let spec = EntitySpec {
        vm: VmId(0),
        class: SchedClass::Timeshare,
        priority: 10,
        affinity: topo.all_cpus(),
    };
    let a = sched.add_entity(spec.clone(), 0).unwrap();
    let b = sched.add_entity(spec, 0).unwrap();
    for id in [a, b] {
        sched.wake(id, 0).unwrap();
    }
    sched
        .schedule(vcpu_sched::CpuId(0), 0, StopReason::Idle)
        .unwrap();
    sched.snapshot(500_000).cpus
}

fn run_results(dir: &TempDir) -> vmm::results::RunResults {
    vmm::results::RunResults {
        config: dir.0.join("pacer.toml"),
        run_dir: Some(dir.0.join("logs/run-1")),
        ok: true,
        vms: vec![
            full_result(dir),
            vmm::results::VmResult::error("dead", "no kernel".into(), 1.0, ""),
        ],
        trace: Some(trace_outcome(dir)),
        control_changes: vec![vmm::results::ControlChange {
            t_run_ns: 120_000_000,
            unix_time_ns: 1_700_000_000_000_000_000,
            uid: 0,
            target: "all/0".into(),
            key: "priority".into(),
            previous: Some("10".into()),
            value: "20".into(),
        }],
        sched_cpus: Some(run_sched_cpus()),
    }
}

#[test]
fn run_documents_single_and_compare_validate() {
    let dir = TempDir::new("schema-run");
    let config = config(&dir);
    let results = run_results(&dir);
    let single = RunDocument::new(
        dir.0.join("pacer.toml"),
        vec![RunEntry::of(&config, &results)],
        None,
    );
    let doc = serde_json::to_value(&single).unwrap();
    check(documents::RUN, &doc);
    // Not measured is null: the host-like vCPU has no wake latency, a
    // VM without a message has none.
    let vcpus = &doc["runs"][0]["vms"][0]["vcpus"];
    assert!(vcpus[1]["sched"]["wake_latency"].is_null(), "{vcpus}");
    assert!(vcpus[1]["sched"]["host_cpus"].is_null(), "{vcpus}");
    assert_eq!(vcpus[0]["sched"]["wake_latency"]["p99_ns"], 900);
    assert_eq!(
        vcpus[0]["sched"]["halt_poll"],
        json!({"polls": 7, "woken": 5, "polled_ns": 42_000}),
        "{vcpus}"
    );
    // No CPUs of Pacer's named (host): nobody polled in user space.
    assert!(vcpus[1]["sched"]["halt_poll"].is_null(), "{vcpus}");
    assert!(vcpus[2]["sched"].is_null());
    assert!(doc["runs"][0]["vms"][0]["message"].is_null());
    // The server's dispatcher carries the VM's requests and their tail.
    let server = &vcpus[5]["guest"]["server"];
    assert_eq!(server["requests"], 90, "{vcpus}");
    assert_eq!(server["dropped"], 10, "{vcpus}");
    assert_eq!(server["request_latency"]["p99_ns"], 90_000, "{vcpus}");
    assert!(server["request_latency"]["p999_ns"].as_u64() >= Some(90_000));
    assert_eq!(doc["pacer"]["version"], env!("CARGO_PKG_VERSION"));

    let runs = vec![
        ("haiku".to_string(), results.clone()),
        ("host".to_string(), results),
    ];
    let comparison = pacer::compare::compare(&runs);
    let entries = runs.iter().map(|(_, r)| RunEntry::of(&config, r)).collect();
    let both = RunDocument::new(dir.0.join("pacer.toml"), entries, Some(comparison));
    let doc = serde_json::to_value(&both).unwrap();
    check(documents::RUN, &doc);
    assert!(doc.is_object() && doc["runs"].as_array().unwrap().len() == 2);
    // --repeat: each policy twice, a tested verdict per row.
    let twice: Vec<(String, _)> = runs.iter().chain(&runs).cloned().collect();
    let comparison = pacer::compare::compare_repeated(&twice);
    assert_eq!(comparison.repetitions, 2);
    assert!(comparison
        .rows
        .iter()
        .any(|r| r.tests.iter().any(|t| t.test.is_some())));
    let entries = twice
        .iter()
        .map(|(_, r)| RunEntry::of(&config, r))
        .collect();
    let doc = serde_json::to_value(RunDocument::new(
        dir.0.join("pacer.toml"),
        entries,
        Some(comparison),
    ))
    .unwrap();
    check(documents::RUN, &doc);
}

#[test]
fn a_document_that_breaks_the_naming_rule_is_refused() {
    let dir = TempDir::new("schema-refuse");
    let results = run_results(&dir);
    let doc = RunDocument::new(
        dir.0.join("pacer.toml"),
        vec![RunEntry::of(&config(&dir), &results)],
        None,
    );
    let good = serde_json::to_value(&doc).unwrap();
    let mut unit_twice = good.clone();
    let l = &mut unit_twice["runs"][0]["vms"][0]["vcpus"][1]["guest"]["sleep"]["wake_latency"];
    l["p99"] = l["p99_ns"].take();
    assert!(!errors("pacer-run.schema.json", &unit_twice).is_empty());
    let mut zero_for_unknown = good.clone();
    zero_for_unknown["runs"][0]["vms"][0]["vcpus"][1]["sched"]["wake_latency"] = json!(0);
    assert!(!errors("pacer-run.schema.json", &zero_for_unknown).is_empty());
    let mut list = good;
    list = list["runs"].take();
    assert!(!errors("pacer-run.schema.json", &list).is_empty());
}

#[test]
fn vm_event_lines_validate() {
    let dir = TempDir::new("schema-events");
    let path = dir.0.join("all.results.jsonl");
    full_log(&path);
    let n = check_jsonl(
        documents::VM_EVENTS,
        &std::fs::read_to_string(&path).unwrap(),
    );
    assert_eq!(n, 2 + 16 + 1 + 2, "start, markers, records, rejected, stop");
}

#[test]
fn a_stop_line_with_every_vcpus_counters_validates() {
    // A VM with 3 vCPUs whose guest sent nothing: each vCPU has an entry
    // with its scheduling and exits (as the pacer-run document has them).
    let dir = TempDir::new("schema-stop");
    let path = dir.0.join("quiet.results.jsonl");
    let mut log = vmm::results::ResultsLog::create("quiet", 1000, Some(&path)).unwrap();
    let r = full_result(&dir);
    log.stopped_with(
        "timeout",
        false,
        "timed out",
        1000.0,
        vmm::results::StopVcpus {
            count: 3,
            exits: &r.vcpu_stats,
            sched: &r.vcpu_sched,
        },
    );
    drop(log);
    let text = std::fs::read_to_string(&path).unwrap();
    check_jsonl(documents::VM_EVENTS, &text);
    let stop: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let vcpus = stop["vcpus"].as_array().unwrap();
    assert_eq!(vcpus.len(), 3, "{stop}");
    assert_eq!(vcpus[0]["sched"]["run_ns"], 1_000_000, "{stop}");
    assert_eq!(vcpus[2]["sched"], Value::Null, "{stop}");
}

#[test]
fn a_log_cut_by_a_failed_write_ends_with_a_valid_incomplete_line() {
    // /dev/full takes no byte: every line fails, and so does the
    // incomplete line (a file-size limit is what lets a cut log end with
    // it: tests/io_limits.rs); here the line itself against the schema.
    let log = vmm::results::ResultsLog::create("cut", 1000, Some(Path::new("/dev/full"))).unwrap();
    let why = log.write_error().expect("a write to /dev/full fails");
    assert!(why.contains("No space left on device"), "{why}");
    let line = vmm::results::events::events_incomplete("cut", why, 3, 5.0);
    check(documents::VM_EVENTS, &line);
    let mut bad = line.clone();
    bad["lines_lost"] = serde_json::json!(-1);
    assert!(!errors("pacer-vm-events.schema.json", &bad).is_empty());
}

#[test]
fn sched_snapshot_validates() {
    use vcpu_sched::{build, EntitySpec, SchedClass, SchedConfig, StopReason, Topology, VmId};
    let topo = Topology::from_spec("1x2x1").unwrap();
    let sched = build(topo.clone(), SchedConfig::default()).unwrap();
    let spec = EntitySpec {
        vm: VmId(0),
        class: SchedClass::Timeshare,
        priority: 10,
        affinity: topo.all_cpus(),
    };
    let a = sched.add_entity(spec.clone(), 0).unwrap();
    sched.add_entity(spec, 0).unwrap();
    let w = sched.wake(a, 0).unwrap().unwrap();
    sched.schedule(w.cpu, 0, StopReason::Idle).unwrap();
    let snap = sched.snapshot(500_000);
    let mut now = vcpu_engine::stats::VcpuNow::default();
    now.vm = "a".into();
    now.vcpu = 0;
    now.state = "running";
    now.host_cpu = Some(1);
    now.effective_priority = 10;
    now.penalty = 0;
    now.quantum_ns = 2_000_000;
    now.quantum_used_ns = 500_000;
    now.ready_wait_ns = 0;
    let vcpus = vec![now];
    let mut engine_now = vcpu_engine::stats::VcpuEngineNow::default();
    engine_now.vm = "a".into();
    engine_now.vcpu = 0;
    engine_now.run_state = "Running".into();
    engine_now.events = "Events { nmi: 0 }".into();
    engine_now.awaiting_sipi = false;
    engine_now.interrupt_controller = Some(json!({ "irr": [0], "ppr": 0 }));
    let engine = vec![engine_now];
    let doc = documents::snapshot::SnapshotDocument::new(&snap, vcpus, engine, 42);
    check(
        documents::SCHED_SNAPSHOT,
        &serde_json::to_value(&doc).unwrap(),
    );
}

const MATRIX: &str = r#"
[matrix]
name = "schema"
kernel = "@KERNEL@"
host_cpus = "0-1"
repetitions = 2
cell_timeout_s = 60
policies = ["host", "haiku"]
memory_mib = 16

[[workload]]
name = "sleep"
kind = "sleep"
duration_ms = 300

[[layout]]
name = "nn"
under_test = "lat"
headline = { metric = "sleep.wake_latency.p99_ns", better = "lower" }
vm = [
  { name = "lat", vcpus = 1, cpus = "0-1" },
  { name = "hog", vcpus = 1, cpus = "0-1", workload = "cpu" },
]

[[workload]]
name = "cpu"
kind = "cpu"
duration_ms = 300
"#;

fn matrix_file(dir: &TempDir) -> PathBuf {
    let p = dir.0.join("m.toml");
    let text = MATRIX.replace("@KERNEL@", &common::kernel().display().to_string());
    std::fs::write(&p, text).unwrap();
    p
}

/// results.csv's rows as typed JSON objects (empty fields null).
fn csv_rows(path: &Path) -> Vec<Value> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let headers = reader.headers().unwrap().clone();
    reader
        .records()
        .map(|row| {
            let row = row.unwrap();
            let obj = headers
                .iter()
                .zip(row.iter())
                .map(|(h, v)| {
                    let typed = if v.is_empty() {
                        Value::Null
                    } else if let Ok(n) = v.parse::<u64>() {
                        json!(n)
                    } else if let (Ok(x), true) = (
                        v.parse::<f64>(),
                        ["value", "host_load_1m", "host_others_cpu_share"]
                            .contains(&&*h.to_string()),
                    ) {
                        json!(x)
                    } else {
                        json!(v)
                    };
                    (h.to_string(), typed)
                })
                .collect::<serde_json::Map<_, _>>();
            Value::Object(obj)
        })
        .collect()
}

fn check_bench_dir(out: &Path) {
    let cells = check_jsonl(
        documents::BENCH_CELL,
        &std::fs::read_to_string(out.join("results.jsonl")).unwrap(),
    );
    assert!(cells > 0);
    let rows = csv_rows(&out.join("results.csv"));
    assert!(rows.len() >= cells);
    for row in &rows {
        let errs = errors("pacer-bench-cell.schema.json#/$defs/csv_row", row);
        assert!(errs.is_empty(), "{}\n{row}", errs.join("\n"));
    }
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    check(documents::BENCH_SUMMARY, &summary);
    // A run's and a merge's shard.json (the built documents have none).
    if let Ok(text) = std::fs::read_to_string(out.join("shard.json")) {
        check(
            documents::BENCH_SHARD,
            &serde_json::from_str(&text).unwrap(),
        );
    }
}

#[test]
fn bench_cells_csv_and_summary_validate() {
    use pacer::bench::metrics::Sample;
    use pacer::bench::store::{CellRecord, CellStatus, Store};
    let dir = TempDir::new("schema-bench");
    let m = pacer::bench::Matrix::load(&matrix_file(&dir)).unwrap();
    let out = dir.0.join("out");
    let mut store = Store::open(&out, false).unwrap();
    let sample = |vm: &str, vcpu: Option<u32>, metric: &str, value: f64| Sample {
        vm: vm.into(),
        group: vm.into(),
        vcpu,
        metric: metric.into(),
        value,
    };
    for (policy, mode) in [("host", None), ("haiku", Some("low-latency".to_string()))] {
        for rep in 1..=2 {
            let p99 = if policy == "host" { 4e6 } else { 2e5 } * (1.0 + rep as f64 / 10.0);
            store
                .append(CellRecord {
                    header: documents::Header::new(documents::BENCH_CELL),
                    id: format!("nn/sleep/{policy}/r{rep}"),
                    layout: "nn".into(),
                    workload: "sleep".into(),
                    policy: policy.into(),
                    mode: mode.clone(),
                    rep,
                    status: CellStatus::Ok,
                    error: String::new(),
                    started_unix_ns: 1_700_000_000_000_000_000,
                    wall_ns: 400_000_000,
                    host: Some(pacer::bench::host_facts::HostFacts {
                        others_cpu_share: Some(0.1),
                        cpu_freq_khz: if rep == 1 { Some(2_400_000) } else { None },
                        ..pacer::bench::host_facts::HostFacts::detect()
                    }),
                    samples: vec![
                        sample("lat", Some(0), "sleep.wake_latency.p99_ns", p99),
                        sample(
                            "lat",
                            Some(0),
                            "sleep.wake_latency.histogram.bucket.2047",
                            3.0,
                        ),
                        sample("hog", Some(0), "cpu.units_per_s", 1e5),
                        sample("*", None, "jain.sched.run_ns", 0.9),
                    ],
                })
                .unwrap();
        }
    }
    let mut na = store.records()[0].clone();
    na.id = "nn/sleep/qemu/r1".into();
    na.policy = "qemu".into();
    na.mode = None;
    na.status = CellStatus::NotApplicable;
    na.error = "QEMU is not installed".into();
    na.samples.clear();
    store.append(na).unwrap();
    let order: Vec<String> = m.policies.iter().map(|p| p.label.clone()).collect();
    let headline = |_: &str, _: &str| Some(pacer::bench::headline::resolve(&m, 0, 0));
    let mut summary =
        pacer::bench::summary::Summary::build(store.records(), &order, &m.baselines, &headline);
    summary.matrix = Some(pacer::documents::matrix::MatrixView::of(&m));
    let doc = pacer::documents::summary::SummaryDocument::of(&summary);
    std::fs::write(
        out.join("summary.json"),
        serde_json::to_string(&doc).unwrap(),
    )
    .unwrap();
    check_bench_dir(&out);
}

#[test]
fn unixbench_json_validates() {
    let dir = TempDir::new("schema-ub");
    let log = dir.0.join("console.log");
    std::fs::write(
        &log,
        "UB begin copies=1 cpus=2\n\
         UB test=syscall copies=1 pass=1 score=30000 unit=lps\n\
         UB test=pipe copies=1 pass=1 score=20000 unit=lps\n\
         UB end copies=1 status=ok\n\
         UB test=pipe copies=2 pass=1 score=10000 unit=lps\n",
    )
    .unwrap();
    let json = dir.0.join("ub.json");
    let (code, out, err) = pacer(&[
        "unixbench",
        "--report",
        log.to_str().unwrap(),
        "--host-ref",
        log.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(code == 0 || code == 1, "{out}{err}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    check(documents::UNIXBENCH, &doc);
    // copies=2 has no cpus line: null, not 0.
    assert!(doc["sections"][1]["result"]["cpus"].is_null(), "{doc}");
}

/// Every `<vm>.results.jsonl` of the run directories under `logs`.
fn check_run_dirs(logs: &Path) -> usize {
    let mut lines = 0;
    for run in std::fs::read_dir(logs).unwrap().flatten() {
        let dir = run.path();
        if !run.file_name().to_string_lossy().starts_with("run-") {
            continue;
        }
        assert!(dir.join("config.toml").is_file(), "{}", dir.display());
        let resolved = std::fs::read_to_string(dir.join("config.resolved.toml")).unwrap();
        assert!(
            resolved.contains("[host]") && resolved.contains("policy ="),
            "{resolved}"
        );
        for f in std::fs::read_dir(&dir).unwrap().flatten() {
            if f.file_name().to_string_lossy().ends_with(".results.jsonl") {
                lines += check_jsonl(
                    documents::VM_EVENTS,
                    &std::fs::read_to_string(f.path()).unwrap(),
                );
            }
        }
    }
    lines
}

#[test]
fn real_runs_write_valid_documents() {
    if !kvm_or_skip("real_runs_write_valid_documents") {
        return;
    }
    let dir = TempDir::new("schema-real");
    let cfg = dir.config(&format!(
        "[host]\nlog_dir = \"logs\"\n\n{}{}",
        vm_table("lat", "sleep duration_ms=300 interval_us=1000"),
        vm_table("hog", "cpu duration_ms=300 report_ms=100")
    ));
    let json = dir.0.join("compare.json");
    let (code, out, err) = pacer(&[
        "run",
        cfg.to_str().unwrap(),
        "--compare",
        "haiku,host",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    check(documents::RUN, &doc);
    assert_eq!(doc["runs"].as_array().unwrap().len(), 2);
    assert!(doc["comparison"]["rows"]
        .as_array()
        .is_some_and(|r| !r.is_empty()));
    // Under host the scheduler's wake latency is unknown: null.
    let host = &doc["runs"][1];
    assert_eq!(host["policy"], "host");
    assert!(host["mode"].is_null());
    assert!(host["vms"][0]["vcpus"][0]["sched"]["wake_latency"].is_null());
    assert!(host["vms"][0]["vcpus"][0]["sched"]["halt_poll"].is_null());
    // Under haiku the engine's halt polling is read back: an object whose
    // successes are among its polls.
    let haiku = &doc["runs"][0];
    assert_eq!(haiku["policy"], "haiku");
    for vm in haiku["vms"].as_array().unwrap() {
        for v in vm["vcpus"].as_array().unwrap() {
            let p = &v["sched"]["halt_poll"];
            assert!(
                p["polls"].as_u64().unwrap() >= p["woken"].as_u64().unwrap(),
                "{p}"
            );
            assert!(p["polled_ns"].is_u64(), "{p}");
        }
    }

    let single = dir.0.join("single.json");
    let (code, out, err) = pacer(&[
        "run",
        cfg.to_str().unwrap(),
        "--json",
        single.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&single).unwrap()).unwrap();
    check(documents::RUN, &doc);
    assert!(doc["comparison"].is_null());
    assert!(check_run_dirs(&dir.0.join("logs")) > 0);
}

#[test]
fn sigusr1_snapshot_validates() {
    if !kvm_or_skip("sigusr1_snapshot_validates") {
        return;
    }
    let dir = TempDir::new("schema-snap");
    let cfg = dir.config(&format!(
        "[host]\nlog_dir = \"logs\"\n\n{}",
        vm_table("long", "cpu duration_ms=3000 report_ms=100")
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args(["run", cfg.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let latest = dir.0.join("logs/latest");
    let start = std::time::Instant::now();
    let snapshot = loop {
        std::thread::sleep(std::time::Duration::from_millis(300));
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGUSR1) };
        std::thread::sleep(std::time::Duration::from_millis(200));
        let found = std::fs::read_dir(&latest)
            .into_iter()
            .flatten()
            .flatten()
            .find(|f| {
                f.file_name()
                    .to_string_lossy()
                    .starts_with("sched-snapshot-")
            });
        if let Some(f) = found {
            break f.path();
        }
        assert!(start.elapsed().as_secs() < 30, "no snapshot written");
    };
    let _ = child.wait();
    // Read it once the run has ended (it is written in one go, not renamed).
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&snapshot).unwrap()).unwrap();
    check(documents::SCHED_SNAPSHOT, &doc);
    assert_eq!(doc["vcpus"][0]["vm"], "long");
}

#[test]
fn real_bench_run_writes_valid_documents() {
    if !kvm_or_skip("real_bench_run_writes_valid_documents") {
        return;
    }
    let dir = TempDir::new("schema-realbench");
    let m = matrix_file(&dir);
    let out = dir.0.join("out");
    let (code, stdout, err) = pacer(&[
        "bench",
        m.to_str().unwrap(),
        "--out-dir",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{err}");
    check_bench_dir(&out);
    assert!(out.join("shard.json").is_file());
    // A merge of the run (one folder) writes the same documents.
    let merged = dir.0.join("merged");
    let (code, stdout, err) = pacer(&[
        "bench",
        "merge",
        out.to_str().unwrap(),
        "--out-dir",
        merged.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{err}");
    check_bench_dir(&merged);
}

#[test]
fn dropped_lines_validate() {
    let dir = TempDir::new("schema-dropped");
    let path = dir.0.join("f.results.jsonl");
    let mut log = vmm::results::ResultsLog::create("f", 1000, Some(&path))
        .unwrap()
        .with_limits(vmm::results::LogLimits {
            log_bytes: 1 << 20,
            records_per_s: 1,
        });
    for i in 0..3 {
        log.record(0, rec(RecordKind::WorkSample, 0, [i, 1, 1, 1, 0]), 1.0, 1.0);
    }
    log.stopped("success", true, "", 2.0);
    let text = std::fs::read_to_string(&path).unwrap();
    let n = check_jsonl(documents::VM_EVENTS, &text);
    assert_eq!(n, 5, "start, record, dropped, dropped, stop:\n{text}");
}

/// A scheduling trace of a real ping-pong run (`pacer run --trace`).
fn traced_pingpong(dir: &TempDir) -> PathBuf {
    let vm = vm_table("pp", "pingpong duration_ms=400").replace("vcpus = 1", "vcpus = 2");
    let cfg = dir.config(&format!(
        "[host]\ncpus = \"0-1\"\ndispatch = \"threads\"\nlog_dir = \"logs\"\n\n{vm}"
    ));
    let trace = dir.0.join("pp.trace");
    let (code, out, err) = pacer(&[
        "run",
        cfg.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    trace
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn trace_summary_export_and_replay_documents_validate() {
    if !kvm_or_skip("trace_summary_export_and_replay_documents_validate") {
        return;
    }
    let dir = TempDir::new("schema-trace");
    let trace = traced_pingpong(&dir);
    let t = trace.to_str().unwrap();
    let summary = dir.0.join("summary.json");
    let (code, out, err) = pacer(&["trace", "summary", t, "--json", summary.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let doc = read_json(&summary);
    check_ns(documents::TRACE_SUMMARY, &doc);
    assert!(!doc["wake_paths"].as_array().unwrap().is_empty(), "{doc}");
    assert!(!doc["round_trips"].as_array().unwrap().is_empty(), "{doc}");

    let export = dir.0.join("export.json");
    let (code, out, err) = pacer(&["trace", "export", t, "--out", export.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let doc = read_json(&export);
    check_ns(documents::TRACE_EXPORT, &doc["otherData"]);
    assert_eq!(doc["otherData"]["policy"], "haiku");

    let replay = dir.0.join("replay.json");
    let (code, out, err) = pacer(&[
        "sim",
        "--replay",
        t,
        "--compare",
        "haiku,pinned",
        "--json",
        replay.to_str().unwrap(),
        "-q",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let doc = read_json(&replay);
    check_ns(documents::SIM_REPLAY, &doc);
    assert_eq!(doc["replays"].as_array().unwrap().len(), 2, "{doc}");
}

#[test]
fn sim_documents_validate() {
    let dir = TempDir::new("schema-sim");
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vcpu_sched/scenarios");
    let bursty = scenarios.join("03_bursty_waker.toml");
    // A request server's group reports its requests.
    let server = scenarios.join("24_server_vs_hogs.toml");
    for (scenario, policies, n) in [
        (&bursty, &["--policy", "haiku"][..], 1),
        (&bursty, &["--compare"][..], 4),
        (&server, &["--policy", "eevdf"][..], 1),
    ] {
        let json = dir.0.join("sim.json");
        let mut args = vec![
            "sim",
            scenario.to_str().unwrap(),
            "--duration-ms",
            "100",
            "-q",
            "--json",
            json.to_str().unwrap(),
        ];
        args.extend_from_slice(policies);
        let (code, out, err) = pacer(&args);
        assert_eq!(code, 0, "{out}{err}");
        let doc = read_json(&json);
        check_ns(documents::SIM, &doc);
        let reports = doc["reports"].as_array().unwrap();
        assert_eq!(reports.len(), n, "{args:?}");
        if scenario == &server {
            let requests = &reports[0]["groups"][0]["requests"];
            assert!(requests["served"].as_u64() > Some(0), "{requests}");
            assert!(
                requests["latency"]["p99_ns"].as_u64() > Some(0),
                "{requests}"
            );
        }
        // A group that was never woken has no wake latency: null, not 0.
        for r in reports {
            for g in r["groups"].as_array().unwrap() {
                let l = &g["wake_latency"];
                assert!(l.is_null() || l["count"].as_u64() > Some(0), "{g}");
            }
        }
    }
}

/// One HTTP/1.1 request on the API socket: status and the JSON body.
fn http(socket: &Path, method: &str, path: &str, body: &str) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: pacer\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn api_documents_and_control_lines_validate() {
    if !kvm_or_skip("api_documents_and_control_lines_validate") {
        return;
    }
    let dir = TempDir::new("schema-api");
    let vm =
        vm_table("web", "cpu duration_ms=60000 report_ms=100").replace("vcpus = 1", "vcpus = 2");
    let cfg = dir.config(&format!(
        "[host]\ncpus = \"0-1\"\nlog_dir = \"logs\"\n\n{vm}"
    ));
    let socket = dir.0.join("api.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args(["run", cfg.to_str().unwrap(), "--api-socket"])
        .arg(&socket)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ctl = |args: &[&str]| {
        let mut all = vec!["ctl", socket.to_str().unwrap(), "--json"];
        all.extend_from_slice(args);
        let (code, out, err) = pacer(&all);
        assert_eq!(code, 0, "ctl {args:?}: {out}{err}");
        out
    };
    let start = std::time::Instant::now();
    // Until the VM runs under the scheduler: its rows are live.
    let ls = loop {
        if socket.exists() {
            let ls: Value = serde_json::from_str(&ctl(&["ls"])).unwrap();
            if ls["vms"][0]["live"] == true {
                break ls;
            }
        }
        assert!(start.elapsed().as_secs() < 60, "the VM never ran");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    check_ns(documents::API_VMS, &ls);
    let stats: Value = serde_json::from_str(&ctl(&["stats"])).unwrap();
    check_ns(documents::API_STATS, &stats);
    assert!(
        stats["vms"][0]["vcpus"]
            .as_array()
            .is_some_and(|v| v.len() == 2),
        "{stats}"
    );
    let set: Value = serde_json::from_str(&ctl(&["set", "web", "priority=20"])).unwrap();
    check_ns(documents::API_SET, &set);
    for action in ["pause", "resume"] {
        let doc: Value = serde_json::from_str(&ctl(&[action, "web"])).unwrap();
        check_ns(documents::API_VM_STATE, &doc);
    }
    let watched = ctl(&["watch", "--count", "2"]);
    assert_eq!(watched.lines().count(), 2, "{watched}");
    for line in watched.lines() {
        check_ns(documents::API_STATUS, &serde_json::from_str(line).unwrap());
    }
    let (status, samples) = http(&socket, "GET", "/api/v1/status?after=0", "");
    assert_eq!(status, 200);
    check_ns(documents::API_SAMPLES, &samples);
    assert!(!samples["samples"].as_array().unwrap().is_empty());
    let (status, keys) = http(&socket, "GET", "/api/v1/keys", "");
    assert_eq!(status, 200);
    check_ns(documents::API_KEYS, &keys);
    // Refusals are documents too, with their status.
    for (method, path, body, want) in [
        ("GET", "/api/v1/nothing", "", 404),
        (
            "POST",
            "/api/v1/set",
            "{\"target\": \"web\", \"set\": {\"priority\": \"100\"}}",
            422,
        ),
        ("POST", "/api/v1/set", "not json", 400),
    ] {
        let (status, doc) = http(&socket, method, path, body);
        assert_eq!(status, want, "{method} {path}: {doc}");
        check_ns(documents::API_ERROR, &doc);
        assert_eq!(doc["status"], want);
    }
    let stop: Value = serde_json::from_str(&ctl(&["stop", "web"])).unwrap();
    check_ns(documents::API_VM_STATE, &stop);
    let _ = child.wait();
    // Every change above is a valid line of control.jsonl.
    let lines = std::fs::read_to_string(dir.0.join("logs/latest/control.jsonl")).unwrap();
    for line in lines.lines() {
        check_ns(
            documents::CONTROL_CHANGE,
            &serde_json::from_str(line).unwrap(),
        );
    }
    // priority, pause, resume, stop.
    assert_eq!(lines.lines().count(), 4, "{lines}");
}
