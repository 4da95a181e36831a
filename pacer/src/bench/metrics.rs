//! The one adapter between what a run produced and the bench's metrics.
//!
//! A cell's metrics are flat [`Sample`]s: (VM, vCPU, metric name, value).
//! They are read from a [`VmResult`] by walking its published JSON form
//! (`vmm::results::events`, schema `pacer-run`), so every numeric per-vCPU field
//! a VM result carries becomes a metric without code here: `vcpus[].guest`
//! (what the workload measured: `cpu.units_per_s`,
//! `sleep.wake_latency.p99_ns`, `pingpong.roundtrips_per_s`,
//! `spinlock.acquisitions_per_s`, `burst.run_fraction`, ...) and
//! `vcpus[].sched` (the scheduling statistics, prefixed `sched.`: e.g.
//! `sched.wake_latency.p99_ns`). Nested objects give dotted names, null
//! (not measured) gives no sample; histograms (arrays of `{lo_ns, hi_ns,
//! count}`) give `NAME.histogram.bucket.HI` counts. The QEMU peer's
//! `pacer-result` console lines map onto the same names
//! ([`console_samples`]), so both columns line up; a Pacer VM's console
//! fills in per-vCPU metrics its result lacks (a guest newer than the
//! VMM's record decoder), the result's own values taking precedence.
//!
//! Derived here too, because they need the whole cell: Jain's fairness
//! index over equal-priority vCPUs (`jain.sched.run_ns`, and
//! `jain.METRIC` of every per-vCPU rate), migrations per second, and the
//! ready-wait (steal) fraction.
//!
//! [`info`] says how to show and aggregate a metric from its name alone
//! (unit, which direction is better, how vCPUs combine, whether it is a
//! headline column), so a new workload's metrics appear in the tables,
//! CSV/JSON and plots without touching the runner.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use vmm::results::VmResult;

/// One measured value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The VM's name, or `*` for a cell-wide value.
    pub vm: String,
    /// The layout's VM entry it belongs to (VMs from one `count` share it).
    pub group: String,
    /// None for a whole-VM or cell-wide value.
    pub vcpu: Option<u32>,
    pub metric: String,
    pub value: f64,
}

/// A hostile VM's one figure: 1 when it ended as planned (its triple
/// fault stopped only its own VM), a whole-VM sample (`run.rs`).
pub const CONTAINED: &str = "hostile.contained";

/// The scheduler's relaxed co-scheduling counts, cell-wide samples of a
/// cell with a co-scheduled VM ([`cosched_samples`]).
pub const COSCHED_COUNTS: [&str; 4] = [
    "sched.costops",
    "sched.costarts",
    "sched.directed_yields",
    "sched.gathers",
];

/// What relaxed co-scheduling did in a cell: the scheduler's per-CPU
/// counts of co-stops, co-starts, directed yields and gathering swaps
/// over the whole run,
/// summed into cell-wide samples (a count of 0 is a figure: the option
/// was on and did not act).
pub fn cosched_samples(cpus: &[vcpu_sched::stats::CpuStats]) -> Vec<Sample> {
    let sum = |f: fn(&vcpu_sched::stats::CpuStats) -> u64| cpus.iter().map(f).sum::<u64>();
    let counts = [
        sum(|c| c.costops),
        sum(|c| c.costarts),
        sum(|c| c.directed_yields),
        sum(|c| c.gathers),
    ];
    COSCHED_COUNTS
        .iter()
        .zip(counts)
        .map(|(metric, n)| Sample {
            vm: "*".into(),
            group: "*".into(),
            vcpu: None,
            metric: (*metric).into(),
            value: n as f64,
        })
        .collect()
}

/// Which way a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Higher,
    Lower,
    Neither,
}

/// How the per-vCPU values of a metric combine into one value per cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    Sum,
    Max,
    Median,
    Mean,
}

/// How to show and aggregate a metric.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricInfo {
    pub unit: Unit,
    pub better: Better,
    pub combine: Combine,
    /// Shown in the terminal summary and the report's table.
    pub headline: bool,
}

/// A metric's unit, for formatting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Nanoseconds,
    PerSecond,
    Ratio,
    Count,
    /// A benchmark score or index (one decimal).
    Score,
}

/// Where a VM of the cell came from (its layout entry and priority).
#[derive(Debug, Clone)]
pub struct VmMeta {
    pub group: String,
    pub priority: u8,
}

/// Keys of per-vCPU objects that are identifiers or bookkeeping, not
/// measurements.
const SKIP_KEYS: &[&str] = &[
    "vcpu",
    "done",
    "host_cpus",
    "partner_vcpu",
    "initiator",
    "peer",
    "interval_ns",
    "duration_ns",
];

/// How to show and aggregate `metric`, from its name.
pub fn info(metric: &str) -> MetricInfo {
    let m = |unit, better, combine, headline| MetricInfo {
        unit,
        better,
        combine,
        headline,
    };
    let last = metric.rsplit('.').next().unwrap_or(metric);
    if metric.contains(".bucket.") {
        return m(Unit::Count, Better::Neither, Combine::Sum, false);
    }
    // The suite's whole-VM values (unixbench.rs): VMs of a cell average.
    if let Some(rest) = metric.strip_prefix("unixbench.") {
        return if rest.starts_with("failed_passes.") {
            m(Unit::Count, Better::Lower, Combine::Sum, false)
        } else {
            m(
                Unit::Score,
                Better::Higher,
                Combine::Mean,
                rest.starts_with("index."),
            )
        };
    }
    // A VM's part of the cell's total, and whether the parts follow the
    // VMs' priorities (`cell_samples`).
    if metric.starts_with("share.") {
        return m(Unit::Ratio, Better::Neither, Combine::Sum, false);
    }
    if metric.starts_with("priority_order.") {
        return m(Unit::Ratio, Better::Higher, Combine::Mean, false);
    }
    if metric.starts_with("jain.") {
        return m(
            Unit::Ratio,
            Better::Higher,
            Combine::Mean,
            metric == "jain.sched.run_ns",
        );
    }
    if metric == CONTAINED {
        return m(Unit::Ratio, Better::Higher, Combine::Mean, false);
    }
    // Relaxed co-scheduling's acts over the cell (`cosched_samples`):
    // shown beside the figures they explain, no direction of their own.
    if COSCHED_COUNTS.contains(&metric) {
        return m(Unit::Count, Better::Neither, Combine::Sum, true);
    }
    if metric == "sched.migrations_per_s" {
        return m(Unit::PerSecond, Better::Lower, Combine::Sum, true);
    }
    // Time a vCPU spun for its siblings: less is better.
    if metric == "barrier.spin_share" {
        return m(Unit::Ratio, Better::Lower, Combine::Mean, true);
    }
    if metric == "sched.ready_wait_fraction" {
        return m(Unit::Ratio, Better::Lower, Combine::Mean, false);
    }
    if metric.ends_with("_per_s") {
        return m(Unit::PerSecond, Better::Higher, Combine::Sum, true);
    }
    if last.contains("p99") {
        return m(Unit::Nanoseconds, Better::Lower, Combine::Max, true);
    }
    if last.contains("max") {
        // A guest latency's max is exact and worth its column beside the
        // percentiles (tails beyond p99); the scheduler's is a detail.
        let guest_latency = last == "max_ns" && !metric.starts_with("sched.");
        return m(
            Unit::Nanoseconds,
            Better::Lower,
            Combine::Max,
            guest_latency,
        );
    }
    if last.contains("p50") {
        return m(Unit::Nanoseconds, Better::Lower, Combine::Median, false);
    }
    if last.contains("fraction") {
        return m(Unit::Ratio, Better::Higher, Combine::Mean, true);
    }
    match metric {
        "sched.ready_wait_ns" | "sched.migrations" | "sched.preemptions" | "sched.bound_misses" => {
            m(Unit::Count, Better::Lower, Combine::Sum, false)
        }
        _ if last.ends_with("_ns") => m(Unit::Nanoseconds, Better::Neither, Combine::Sum, false),
        _ => m(Unit::Count, Better::Neither, Combine::Sum, false),
    }
}

/// A short column title for a metric.
pub fn title(metric: &str) -> String {
    match metric {
        "cpu.units_per_s" => "units/s".into(),
        "jain.sched.run_ns" => "Jain (run time)".into(),
        "share.cpu.units_per_s" => "share of units/s".into(),
        "priority_order.cpu.units_per_s" => "priority order (units/s)".into(),
        "sched.wake_latency.p99_ns" => "wake p99 (sched)".into(),
        "sched.wake_latency.p999_ns" => "wake p99.9 (sched)".into(),
        "pingpong.roundtrips_per_s" => "round trips/s".into(),
        "spinlock.acquisitions_per_s" => "acquisitions/s".into(),
        "barrier.rounds_per_s" => "barrier rounds/s".into(),
        "barrier.spin_share" => "barrier spin share".into(),
        "shootdown.roundtrips_per_s" => "shootdowns/s".into(),
        "shootdown.latency.p99_ns" => "shootdown p99".into(),
        "burst.run_fraction" => "run fraction".into(),
        "burst.busy_fraction" => "busy fraction".into(),
        "burst.wake_latency.p99_ns" => "burst wake p99".into(),
        "sched.migrations_per_s" => "migrations/s".into(),
        "sched.costops" => "co-stops".into(),
        "sched.costarts" => "co-starts".into(),
        "sched.directed_yields" => "directed yields".into(),
        "sched.gathers" => "gathering swaps".into(),
        "sleep.wake_latency.p99_ns" => "sleep p99".into(),
        "sleep.wake_latency.p50_ns" => "sleep p50".into(),
        "sleep.wake_latency.p999_ns" => "sleep p99.9".into(),
        "sleep.wake_latency.max_ns" => "sleep max".into(),
        "burst.wake_latency.p999_ns" => "burst wake p99.9".into(),
        "burst.wake_latency.max_ns" => "burst wake max".into(),
        "server.requests_per_s" => "requests/s".into(),
        "server.request_latency.p99_ns" => "request p99".into(),
        "server.request_latency.p999_ns" => "request p99.9".into(),
        "server.request_latency.max_ns" => "request max".into(),
        "unixbench.index.copies_1" => "UB index (1 copy)".into(),
        "unixbench.index.copies_vcpus" => "UB index (copy per vCPU)".into(),
        _ if metric.starts_with("jain.") => format!("Jain ({})", title(&metric["jain.".len()..])),
        _ if metric.starts_with("unixbench.index.copies_") => {
            format!(
                "UB index ({} copies)",
                &metric["unixbench.index.copies_".len()..]
            )
        }
        _ => metric
            .replace("_per_s", "/s")
            .replace("_latency_ns", " latency")
            .replace("_ns", ""),
    }
}

/// Buckets per power of two of the histogram a latency metric is read
/// from (the guest's or the scheduler's), None for other metrics.
pub fn histogram_buckets(metric: &str) -> Option<u64> {
    if info(metric).unit != Unit::Nanoseconds || !(metric.contains("p50") || metric.contains("p99"))
    {
        return None;
    }
    Some(if metric.starts_with("sched.") {
        vmm::units::SCHED_SUB_BUCKETS
    } else {
        vmm::units::GUEST_SUB_BUCKETS
    })
}

/// Format a value for a table: units that scale, a latency percentile no
/// finer than its histogram bucket (`units`).
pub fn format_value(metric: &str, v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    match info(metric).unit {
        Unit::Nanoseconds => match histogram_buckets(metric) {
            Some(sub) => vmm::units::latency(v, sub),
            None => vmm::units::duration3(v),
        },
        Unit::Ratio => format!("{v:.3}"),
        Unit::Score => format!("{v:.1}"),
        Unit::PerSecond | Unit::Count => vmm::units::number(v),
    }
}

/// Flatten a per-vCPU JSON object into (name, value) pairs.
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, f64)>) {
    match v {
        Value::Number(n) => {
            if let Some(x) = n.as_f64() {
                out.push((prefix.to_string(), x));
            }
        }
        Value::Object(o) => {
            for (k, v) in o {
                if SKIP_KEYS.contains(&k.as_str()) {
                    continue;
                }
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&name, v, out);
            }
        }
        Value::Array(items) => {
            // A histogram: [{lo_ns, hi_ns, count}, ...].
            for b in items {
                if let (Some(hi), Some(count)) = (
                    b.get("hi_ns").and_then(Value::as_u64),
                    b.get("count").and_then(Value::as_f64),
                ) {
                    out.push((format!("{prefix}.bucket.{hi}"), count));
                }
            }
        }
        _ => {}
    }
}

/// The per-vCPU samples of one VM's result.
pub fn vm_samples(r: &VmResult, group: &str) -> Vec<Sample> {
    let json = serde_json::to_value(r).unwrap_or(Value::Null);
    let wall_s = r.wall_ms / 1e3;
    let mut per_vcpu: BTreeMap<u32, BTreeMap<String, f64>> = BTreeMap::new();
    for item in json["vcpus"].as_array().into_iter().flatten() {
        let Some(vcpu) = item["vcpu"].as_u64() else {
            continue;
        };
        let mut pairs = Vec::new();
        flatten("", &item["guest"], &mut pairs);
        let s = &item["sched"];
        flatten("sched", s, &mut pairs);
        let slot = per_vcpu.entry(vcpu as u32).or_default();
        slot.extend(pairs);
        // run_ns is null when the counters could not be read.
        if let (Some(run), Some(wait)) = (s["run_ns"].as_f64(), s["ready_wait_ns"].as_f64()) {
            if run + wait > 0.0 {
                slot.insert("sched.ready_wait_fraction".into(), wait / (run + wait));
            }
        }
        if let (true, Some(migrations)) = (wall_s > 0.0, s["migrations"].as_f64()) {
            slot.insert("sched.migrations_per_s".into(), migrations / wall_s);
        }
        // A bounded vCPU's wakes with budget and its misses (the VM
        // document sums them; the cells keep them per vCPU).
        if let Some(st) = r
            .vcpu_sched
            .get(vcpu as usize)
            .filter(|st| st.latency_bound_ns.is_some())
        {
            slot.insert("sched.bounded_wakes".into(), st.bounded_wakes as f64);
            slot.insert("sched.bound_misses".into(), st.bound_misses as f64);
        }
    }
    // What the guest printed on its console fills in what the VM result
    // lacks (a VMM that does not decode a newer guest's records yet).
    if let Some(text) = r
        .console_log
        .as_ref()
        .and_then(|p| vmm::input::read_lossy(p, vmm::input::MAX_LOG_BYTES, "a console log").ok())
    {
        for s in console_samples(&text, &r.name, group).0 {
            if let Some(vcpu) = s.vcpu {
                per_vcpu
                    .entry(vcpu)
                    .or_default()
                    .entry(s.metric)
                    .or_insert(s.value);
            }
        }
    }
    per_vcpu
        .into_iter()
        .flat_map(|(vcpu, metrics)| {
            metrics.into_iter().map(move |(metric, value)| Sample {
                vm: r.name.clone(),
                group: group.to_string(),
                vcpu: Some(vcpu),
                metric,
                value,
            })
        })
        .collect()
}

/// Jain's fairness index: (sum x)^2 / (n * sum x^2); 1 = equal shares.
pub fn jain(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let sum: f64 = values.iter().sum();
    let sq: f64 = values.iter().map(|v| v * v).sum();
    (sq > 0.0).then(|| sum * sum / (values.len() as f64 * sq))
}

/// Cell-wide derived samples: Jain's index over the vCPUs of each
/// priority (the lowest over the priorities), for the scheduler's run
/// time and for every per-vCPU rate the guest reported.
pub fn cell_samples(samples: &[Sample], meta: &BTreeMap<String, VmMeta>) -> Vec<Sample> {
    let mut by: BTreeMap<(&str, u8), Vec<f64>> = BTreeMap::new();
    // vCPUs per priority: an index over only some of them would mislead.
    let mut vcpus: BTreeMap<u8, std::collections::BTreeSet<(&str, u32)>> = BTreeMap::new();
    for s in samples {
        if let Some(v) = s.vcpu {
            let prio = meta.get(&s.vm).map_or(0, |m| m.priority);
            vcpus.entry(prio).or_default().insert((&s.vm, v));
        }
    }
    for s in samples.iter().filter(|s| s.vcpu.is_some()) {
        let rate = s.metric.ends_with("_per_s") && !s.metric.starts_with("sched.");
        if s.metric != "sched.run_ns" && !rate {
            continue;
        }
        let prio = meta.get(&s.vm).map_or(0, |m| m.priority);
        by.entry((s.metric.as_str(), prio))
            .or_default()
            .push(s.value);
    }
    let mut lowest: BTreeMap<&str, f64> = BTreeMap::new();
    for ((metric, prio), values) in &by {
        if values.len() < vcpus.get(prio).map_or(0, |v| v.len()) {
            continue;
        }
        if let Some(j) = jain(values) {
            let e = lowest.entry(metric).or_insert(j);
            *e = e.min(j);
        }
    }
    let mut out: Vec<Sample> = lowest
        .into_iter()
        .map(|(metric, value)| Sample {
            vm: "*".into(),
            group: "*".into(),
            vcpu: None,
            metric: format!("jain.{metric}"),
            value,
        })
        .collect();
    out.extend(shares(samples, meta, "cpu.units_per_s"));
    out
}

/// Each VM's share of the cell's total `rate` (`share.RATE`, per VM) and,
/// when the VMs have different priorities, `priority_order.RATE`: the
/// fraction of VM pairs of different priority in which the higher
/// priority got strictly more (1 = the shares follow the priorities).
fn shares(samples: &[Sample], meta: &BTreeMap<String, VmMeta>, rate: &str) -> Vec<Sample> {
    let mut per_vm: BTreeMap<&str, f64> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.metric == rate && s.vm != "*") {
        *per_vm.entry(&s.vm).or_default() += s.value;
    }
    let total: f64 = per_vm.values().sum();
    if per_vm.len() < 2 || total <= 0.0 {
        return Vec::new();
    }
    let mut out: Vec<Sample> = per_vm
        .iter()
        .map(|(vm, v)| Sample {
            vm: vm.to_string(),
            group: meta
                .get(*vm)
                .map_or_else(|| vm.to_string(), |m| m.group.clone()),
            vcpu: None,
            metric: format!("share.{rate}"),
            value: v / total,
        })
        .collect();
    let prio = |vm: &str| meta.get(vm).map_or(0, |m| m.priority);
    let vms: Vec<(&str, f64)> = per_vm.iter().map(|(k, v)| (*k, *v)).collect();
    let (mut pairs, mut ordered) = (0u32, 0u32);
    for (i, a) in vms.iter().enumerate() {
        for b in &vms[i + 1..] {
            let (pa, pb) = (prio(a.0), prio(b.0));
            if pa == pb {
                continue;
            }
            pairs += 1;
            let (hi, lo) = if pa > pb { (a.1, b.1) } else { (b.1, a.1) };
            ordered += u32::from(hi > lo);
        }
    }
    if pairs > 0 {
        out.push(Sample {
            vm: "*".into(),
            group: "*".into(),
            vcpu: None,
            metric: format!("priority_order.{rate}"),
            value: f64::from(ordered) / f64::from(pairs),
        });
    }
    out
}

/// Console keys of a `pacer-result` line that name the same quantity as a
/// VM result field, per workload (everything else becomes
/// `WORKLOAD.KEY`).
fn console_name(workload: &str, key: &str) -> Option<String> {
    let name = match (workload, key) {
        ("cpu", "units" | "cpu.units_per_s") => format!("cpu.{key}"),
        ("pingpong", "roundtrips" | "pingpong.roundtrips_per_s") => format!("pingpong.{key}"),
        ("spinlock", "acquisitions" | "spinlock.acquisitions_per_s") => format!("spinlock.{key}"),
        ("sleep", "p50_ns" | "p99_ns" | "p999_ns" | "max_ns" | "count") => {
            format!("sleep.wake_latency.{key}")
        }
        ("sleep", "missed") => "sleep.missed".into(),
        ("burst", k) if k.starts_with("wake_") => {
            format!("burst.wake_latency.{}", &k["wake_".len()..])
        }
        ("shootdown", "p50_ns" | "p99_ns" | "max_ns") => format!("shootdown.latency.{key}"),
        ("shootdown", "acks") => "shootdown.count".into(),
        ("barrier", "spin_ppm") => "barrier.spin_share".into(),
        ("shootdown", "role" | "initiator" | "targets") => return None,
        ("spinlock", k) if k.starts_with("wait_") => {
            format!("spinlock.lock_wait.{}", &k["wait_".len()..])
        }
        ("burst", "bursts" | "missed") => format!("burst.{key}"),
        ("server", k) if k.starts_with("request_") => {
            format!("server.request_latency.{}", &k["request_".len()..])
        }
        ("pingpong" | "sleep", "interval_us" | "role") => return None,
        (w, k) => format!("{w}.{k}"),
    };
    Some(name)
}

/// Samples from a VM's serial console (`pacer-result vcpu=N workload=W
/// key=value ...` lines, guests/PROTOCOL.md), for VMMs that only give the
/// console (the QEMU peer). `vcpu=all` lines are totals and are skipped
/// (the cell sums the vCPUs itself). Returns the samples and the vCPUs
/// that reported.
pub fn console_samples(console: &str, vm: &str, group: &str) -> (Vec<Sample>, Vec<u32>) {
    let mut out = Vec::new();
    let mut vcpus = Vec::new();
    for line in console.lines() {
        let Some(rest) = line.trim().strip_prefix("pacer-result ") else {
            continue;
        };
        let fields: BTreeMap<&str, &str> = rest
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .collect();
        let (Some(vcpu), Some(workload)) = (
            fields.get("vcpu").and_then(|v| v.parse::<u32>().ok()),
            fields.get("workload"),
        ) else {
            continue;
        };
        if !vcpus.contains(&vcpu) {
            vcpus.push(vcpu);
        }
        for (key, value) in &fields {
            if matches!(*key, "vcpu" | "workload" | "ticks" | "partner") {
                continue;
            }
            let Some(mut value) = value.parse::<f64>().ok().filter(|v| v.is_finite()) else {
                continue;
            };
            let Some(mut metric) = console_name(workload, key) else {
                continue;
            };
            if matches!(*key, "run_fraction_ppm" | "spin_ppm") {
                value /= 1e6;
            }
            if *key == "run_fraction_ppm" {
                metric = "burst.run_fraction".into();
            }
            out.push(Sample {
                vm: vm.to_string(),
                group: group.to_string(),
                vcpu: Some(vcpu),
                metric,
                value,
            });
        }
    }
    (out, vcpus)
}

/// Why a VM's run says the guest does not implement its workload
/// (an ERROR record with code 1, UNKNOWN_WORKLOAD), if it does.
pub fn unknown_workload(r: &VmResult) -> bool {
    r.guest_errors
        .iter()
        .any(|e| e.error.code == devices::result_payload::GuestErrorCode::UnknownWorkload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vcpu_engine::stats::{LatencyNs, VcpuSchedStats};
    use vmm::results::VcpuWork;

    pub(crate) fn vm(name: &str, units: &[f64]) -> VmResult {
        let mut r = VmResult::error(name, String::new(), 2000.0, "");
        r.ok = true;
        r.status = "success".into();
        for (i, &u) in units.iter().enumerate() {
            r.work.push(VcpuWork {
                vcpu: i as u32,
                units: 10,
                ticks: 100,
                units_per_s: Some(u),
                done: true,
            });
            let mut s = VcpuSchedStats::default();
            s.run_ns = 1_000_000 * (i as u64 + 1);
            s.ready_wait_ns = 1_000_000;
            s.wakeups = 5;
            s.wake_latency_ns.p50 = 1000;
            s.wake_latency_ns.p99 = 5000 * (i as u64 + 1);
            s.wake_latency_ns.max = 9000;
            s.migrations = 4;
            s.preemptions = 1;
            s.host_cpus = "0-1".into();
            r.vcpu_sched.push(s);
        }
        r
    }

    fn get(s: &[Sample], vcpu: u32, metric: &str) -> Option<f64> {
        s.iter()
            .find(|x| x.vcpu == Some(vcpu) && x.metric == metric)
            .map(|x| x.value)
    }

    #[test]
    fn vm_result_fields_become_samples() {
        let s = vm_samples(&vm("a", &[100.0, 300.0]), "a");
        assert_eq!(get(&s, 0, "cpu.units_per_s"), Some(100.0));
        assert_eq!(get(&s, 1, "cpu.units_per_s"), Some(300.0));
        assert_eq!(get(&s, 1, "sched.wake_latency.p99_ns"), Some(10000.0));
        assert_eq!(get(&s, 0, "sched.migrations"), Some(4.0));
        assert_eq!(get(&s, 0, "sched.migrations_per_s"), Some(2.0));
        assert_eq!(get(&s, 0, "sched.ready_wait_fraction"), Some(0.5));
        assert_eq!(get(&s, 0, "ticks"), None, "bookkeeping keys skipped");
        assert!(s.iter().all(|x| x.vm == "a" && x.group == "a"));
    }

    #[test]
    fn console_fills_in_what_the_result_lacks() {
        let dir = std::env::temp_dir().join(format!("pacer-metrics-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("a.console.log");
        std::fs::write(
            &log,
            "pacer-result vcpu=0 workload=cpu units=1 ticks=2 units_per_s=999\n\
             pacer-result vcpu=1 workload=sleep count=5 missed=0 interval_us=1000 p50_ns=10 p99_ns=20 max_ns=30\n",
        )
        .unwrap();
        let mut r = vm("a", &[100.0]);
        r.console_log = Some(log);
        let s = vm_samples(&r, "a");
        // The VM result's own value wins; the console adds the rest.
        assert_eq!(get(&s, 0, "cpu.units_per_s"), Some(100.0));
        assert_eq!(get(&s, 1, "sleep.wake_latency.p99_ns"), Some(20.0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unreadable_run_time_is_unknown_not_zero() {
        let mut r = vm("h", &[100.0, 100.0]);
        r.vcpu_sched[1].run_ns = 0;
        let s = vm_samples(&r, "h");
        assert_eq!(get(&s, 0, "sched.run_ns"), Some(1_000_000.0));
        assert_eq!(get(&s, 1, "sched.run_ns"), None);
        let meta: BTreeMap<String, VmMeta> = [(
            "h".to_string(),
            VmMeta {
                group: "h".into(),
                priority: 10,
            },
        )]
        .into();
        let cell = cell_samples(&s, &meta);
        // No index over one of the two vCPUs; the guest's rates still have one.
        assert!(
            cell.iter().all(|x| x.metric != "jain.sched.run_ns"),
            "{cell:?}"
        );
        assert!(cell.iter().any(|x| x.metric == "jain.cpu.units_per_s"));
    }

    #[test]
    fn host_wake_latency_zeros_are_unknown() {
        let mut r = vm("h", &[1.0]);
        r.vcpu_sched[0].wake_latency_ns = LatencyNs::default();
        let s = vm_samples(&r, "h");
        assert!(s
            .iter()
            .all(|x| !x.metric.starts_with("sched.wake_latency")));
        assert_eq!(get(&s, 0, "sched.wakeups"), Some(5.0));
    }

    #[test]
    fn new_guest_metrics_appear_without_code() {
        // The SMP guest's per-vCPU results, as its VmResult field will
        // serialize them: read through the same JSON walk.
        let json = serde_json::json!({
            "sleep": {"wakeups": 100, "missed": 0, "interval_ns": 1000000,
                "wake_latency": {"count": 100, "p50_ns": 2000, "p99_ns": 9000, "max_ns": 20000,
                "histogram": [{"lo_ns": 0, "hi_ns": 1023, "count": 3},
                              {"lo_ns": 1024, "hi_ns": 2047, "count": 97}],
                "histogram_count": 100}},
            "pingpong": {"roundtrips": 10, "roundtrips_per_s": 5000.0, "partner_vcpu": 0, "initiator": false},
            "burst": null
        });
        let mut pairs = Vec::new();
        flatten("", &json, &mut pairs);
        let names: Vec<&str> = pairs.iter().map(|(n, _)| n.as_str()).collect();
        for n in [
            "sleep.wake_latency.p99_ns",
            "sleep.wake_latency.histogram.bucket.2047",
            "pingpong.roundtrips_per_s",
            "pingpong.roundtrips",
        ] {
            assert!(names.contains(&n), "{n} missing in {names:?}");
        }
        assert!(!names
            .iter()
            .any(|n| n.contains("partner") || n.contains("initiator") || n.starts_with("burst")));
        assert!(info("sleep.wake_latency.p99_ns").headline);
        assert_eq!(info("sleep.wake_latency.p99_ns").better, Better::Lower);
        assert_eq!(info("pingpong.roundtrips_per_s").combine, Combine::Sum);
        assert!(!info("sleep.wake_latency.histogram.bucket.2047").headline);
    }

    #[test]
    fn jain_over_equal_priorities() {
        assert_eq!(jain(&[1.0, 1.0, 1.0]), Some(1.0));
        assert!((jain(&[1.0, 0.0]).unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(jain(&[3.0]), None);
        let mut s = vm_samples(&vm("a", &[100.0, 100.0]), "a");
        s.extend(vm_samples(&vm("b", &[400.0]), "b"));
        let meta: BTreeMap<String, VmMeta> = [("a", 10), ("b", 20)]
            .into_iter()
            .map(|(n, p)| {
                (
                    n.to_string(),
                    VmMeta {
                        group: n.into(),
                        priority: p,
                    },
                )
            })
            .collect();
        let cell = cell_samples(&s, &meta);
        let units = cell
            .iter()
            .find(|x| x.metric == "jain.cpu.units_per_s")
            .unwrap();
        // Priority 10 has two equal vCPUs; priority 20 one (no index).
        assert_eq!(units.value, 1.0);
        let run = cell
            .iter()
            .find(|x| x.metric == "jain.sched.run_ns")
            .unwrap();
        assert!((run.value - 0.9).abs() < 1e-12, "{run:?}");
        assert!(cell
            .iter()
            .all(|x| x.vcpu.is_none() && (x.vm == "*") != x.metric.starts_with("share.")));
    }

    /// A co-scheduled cell's counts are the sum over the scheduler's
    /// CPUs, one cell-wide sample each, shown as a column.
    #[test]
    fn cosched_counts_sum_the_cpus_into_cell_wide_samples() {
        let cpu = |id: u32, costops: u64, costarts: u64, yields: u64, gathers: u64| {
            serde_json::from_value::<vcpu_sched::stats::CpuStats>(serde_json::json!({
                "cpu": id, "busy_time": 0, "idle_time": 0, "dispatches": 0,
                "context_switches": 0, "smt_corun_foreign": 0,
                "idle_while_waiting": 0, "core_load": 0,
                "costops": costops, "costarts": costarts, "directed_yields": yields,
                "gathers": gathers,
            }))
            .unwrap()
        };
        let s = cosched_samples(&[cpu(0, 1, 7, 0, 4), cpu(1, 2, 5, 3, 0)]);
        let got: Vec<(&str, f64)> = s.iter().map(|x| (x.metric.as_str(), x.value)).collect();
        assert_eq!(
            got,
            vec![
                ("sched.costops", 3.0),
                ("sched.costarts", 12.0),
                ("sched.directed_yields", 3.0),
                ("sched.gathers", 4.0)
            ]
        );
        assert!(s.iter().all(|x| x.vm == "*" && x.vcpu.is_none()));
        assert!(info("sched.costarts").headline);
        assert_eq!(title("sched.directed_yields"), "directed yields");
        assert_eq!(title("sched.gathers"), "gathering swaps");
    }

    /// A bounded vCPU's wakes with budget and misses become per-vCPU
    /// samples; a vCPU with no bound gives none (not zeros).
    #[test]
    fn bound_misses_are_samples_of_bounded_vcpus_only() {
        let mut r = VmResult::error("lat0", String::new(), 1000.0, "");
        let mut bounded = vcpu_engine::stats::VcpuSchedStats::default();
        bounded.latency_bound_ns = Some(1_000_000);
        bounded.bounded_wakes = 10;
        bounded.bound_misses = 2;
        r.vcpu_sched = vec![bounded, vcpu_engine::stats::VcpuSchedStats::default()];
        let s = vm_samples(&r, "lat");
        let of = |metric: &str| -> Vec<(Option<u32>, f64)> {
            s.iter()
                .filter(|x| x.metric == metric)
                .map(|x| (x.vcpu, x.value))
                .collect()
        };
        assert_eq!(of("sched.bound_misses"), vec![(Some(0), 2.0)]);
        assert_eq!(of("sched.bounded_wakes"), vec![(Some(0), 10.0)]);
        assert_eq!(info("sched.bound_misses").better, Better::Lower);
    }

    #[test]
    fn shares_and_priority_order() {
        let mut s = vm_samples(&vm("p20", &[600.0]), "p20");
        s.extend(vm_samples(&vm("p10", &[300.0]), "p10"));
        s.extend(vm_samples(&vm("p5", &[100.0]), "p5"));
        let meta: BTreeMap<String, VmMeta> = [("p20", 20), ("p10", 10), ("p5", 5)]
            .into_iter()
            .map(|(n, p)| {
                (
                    n.to_string(),
                    VmMeta {
                        group: n.into(),
                        priority: p,
                    },
                )
            })
            .collect();
        let cell = cell_samples(&s, &meta);
        let share = |vm: &str| {
            cell.iter()
                .find(|x| x.vm == vm && x.metric == "share.cpu.units_per_s")
                .map(|x| x.value)
        };
        assert_eq!(share("p20"), Some(0.6));
        assert_eq!(share("p5"), Some(0.1));
        let order = |c: &[Sample]| {
            c.iter()
                .find(|x| x.metric == "priority_order.cpu.units_per_s")
                .map(|x| x.value)
        };
        assert_eq!(order(&cell), Some(1.0));
        // p5 ahead of p10: one pair of three out of order.
        let mut s = vm_samples(&vm("p20", &[600.0]), "p20");
        s.extend(vm_samples(&vm("p10", &[100.0]), "p10"));
        s.extend(vm_samples(&vm("p5", &[300.0]), "p5"));
        let o = order(&cell_samples(&s, &meta)).unwrap();
        assert!((o - 2.0 / 3.0).abs() < 1e-12, "{o}");
    }

    #[test]
    fn console_lines_map_to_the_same_names() {
        let console = "boot...\n\
            pacer-result vcpu=0 workload=cpu units=10 ticks=5 units_per_s=1234.5\n\
            pacer-result vcpu=1 workload=sleep count=9 missed=0 interval_us=1000 p50_ns=100 p99_ns=900 max_ns=1000\n\
            pacer-result vcpu=2 workload=burst bursts=4 missed=1 run_fraction_ppm=300000 wake_p50_ns=1 wake_p99_ns=2 wake_max_ns=3\n\
            pacer-result vcpu=all workload=spinlock acquisitions=5 acquisitions_per_s=7\n\
            pacer-result garbage\n";
        let (s, vcpus) = console_samples(console, "q", "g");
        assert_eq!(vcpus, [0, 1, 2]);
        assert_eq!(get(&s, 0, "cpu.units_per_s"), Some(1234.5));
        assert_eq!(get(&s, 1, "sleep.wake_latency.p99_ns"), Some(900.0));
        assert_eq!(get(&s, 1, "sleep.missed"), Some(0.0));
        assert_eq!(get(&s, 2, "burst.run_fraction"), Some(0.3));
        assert_eq!(get(&s, 2, "burst.wake_latency.p99_ns"), Some(2.0));
        assert!(s
            .iter()
            .all(|x| x.metric != "interval_us" && x.metric != "ticks"));
    }

    #[test]
    fn formatting() {
        assert_eq!(
            format_value("sleep.wake_latency.p99_ns", 1500.0),
            "1.500 us"
        );
        assert_eq!(
            format_value("sleep.wake_latency.p99_ns", 8_388_608.0),
            "8.39 ms"
        );
        assert_eq!(
            format_value("sched.wake_latency.p99_ns", 2_228_200.0),
            "2.2 ms"
        );
        assert_eq!(format_value("cpu.units_per_s", 2.5e6), "2.50M");
        assert_eq!(format_value("jain.sched.run_ns", 0.99), "0.990");
        assert_eq!(title("cpu.units_per_s"), "units/s");
    }
}
