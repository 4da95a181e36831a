//! What the control API shows: the VM list (`GET /api/v1/vms`), the live
//! per-vCPU scheduler state and statistics (`GET /api/v1/stats`), and the
//! per-second status sample (`/api/v1/status`, `/api/v1/events`, the live
//! page). Every document starts with the documents' header (`schema`,
//! `schema_version`, `pacer`; `crate::documents`) and has a schema in
//! `schemas/`; figures carry their unit in their name, once (times in ns);
//! what is not measured is `null`.
//!
//! Statistics come from the scheduler's snapshot (`vcpu_sched`'s own
//! accounting, as `--status` and the SIGUSR1 file use it), matched to VMs
//! and vCPUs through the engine; a sample's fractions are the differences
//! between two snapshots one interval apart.

use super::ApiContext;
use crate::documents::{with_header, API_SCHEMA_VERSION, API_STATS, API_STATUS, API_VMS};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use vcpu_engine::RunState;
use vcpu_engine::{Engine, EngineVm};
use vcpu_sched::stats::{EntityStats, LatencySummary};
use vcpu_sched::{EntityId, SchedSnapshot};

/// A VM's state as the API names it.
pub fn vm_state(ctx: &ApiContext<'_>, name: &str) -> &'static str {
    if ctx.vms.has_ended(name) {
        return "stopped";
    }
    match ctx.vms.find(name) {
        None => "starting",
        Some(h) if h.is_stopping() => "stopped",
        Some(h) if h.is_paused() => "paused",
        Some(_) => "running",
    }
}

/// `GET /api/v1/vms`.
///
/// A VM's `cpus`, `class` and `priority` are the scheduler's now (what
/// `set` changed), not the config's: the value all its vCPUs share, or
/// `null` when they differ; `per_vcpu` has each vCPU's. The config's
/// values stand only where no scheduler holds the VM (policy host, a VM
/// starting or stopped), and `live` says which.
pub fn vm_list(ctx: &ApiContext<'_>) -> Value {
    let snap = ctx.engine.map(|e| (e, e.snapshot()));
    let live: HashMap<String, Vec<(String, &'static str, u8)>> = snap
        .as_ref()
        .map(|(engine, snap)| {
            live_rows(ctx, snap)
                .into_iter()
                .filter_map(|(vm, rows)| {
                    // A vCPU the scheduler does not hold now: not live.
                    let per: Option<Vec<_>> = rows
                        .iter()
                        .map(|r| {
                            r.map(|e| {
                                (
                                    engine.host_set(&e.affinity).to_list(),
                                    crate::config::sched_rules::class_name(e.class),
                                    e.base_priority,
                                )
                            })
                        })
                        .collect();
                    per.filter(|p| !p.is_empty())
                        .map(|p| (vm.name().to_string(), p))
                })
                .collect()
        })
        .unwrap_or_default();
    let vms: Vec<Value> = ctx
        .configs
        .iter()
        .map(|c| match live.get(&c.name) {
            Some(per) => {
                let shared = |f: &dyn Fn(&(String, &'static str, u8)) -> Value| {
                    let first = f(&per[0]);
                    if per.iter().all(|p| f(p) == first) {
                        first
                    } else {
                        Value::Null
                    }
                };
                json!({
                    "name": c.name,
                    "state": vm_state(ctx, &c.name),
                    "vcpus": c.vcpus,
                    "live": true,
                    "cpus": shared(&|p| json!(p.0)),
                    "class": shared(&|p| json!(p.1)),
                    "priority": shared(&|p| json!(p.2)),
                    "per_vcpu": per
                        .iter()
                        .enumerate()
                        .map(|(i, p)| json!({
                            "vcpu": i, "cpus": p.0, "class": p.1, "priority": p.2,
                        }))
                        .collect::<Vec<_>>(),
                })
            }
            None => json!({
                "name": c.name,
                "state": vm_state(ctx, &c.name),
                "vcpus": c.vcpus,
                "live": false,
                "cpus": c.cpus.to_list(),
                "class": crate::config::sched_rules::class_name(c.class),
                "priority": c.priority,
                "per_vcpu": null,
            }),
        })
        .collect();
    let body = json!({
        "policy": ctx.policy.as_str(),
        "mode": ctx.engine.map(|e| e.mode().as_str()),
        "host_cpus": ctx.host_cpus.to_list(),
        "cpus_out_of_service": snap.as_ref().map(|(e, s)| out_of_service(e, s)),
        "vms": vms,
    });
    with_header(API_VMS, API_SCHEMA_VERSION, body)
}

/// The scheduled CPUs out of service, as a list ("" when none).
fn out_of_service(e: &vcpu_engine::Engine, snap: &SchedSnapshot) -> String {
    let cpus = e.cpu_map();
    let out: vcpu_engine::host_cpus::HostCpuSet = snap
        .cpus
        .iter()
        .filter(|c| !c.in_service)
        .filter_map(|c| cpus.host(c.cpu))
        .collect();
    out.to_list()
}

fn latency(l: &LatencySummary) -> Value {
    if l.count == 0 {
        Value::Null
    } else {
        json!({ "count": l.count, "p50_ns": l.p50, "p99_ns": l.p99, "p999_ns": l.p999, "max_ns": l.max })
    }
}

/// The engine's name of a run state.
fn engine_state(s: RunState) -> &'static str {
    match s {
        RunState::Ready => "ready",
        RunState::Running { .. } => "running",
        RunState::Halted { .. } | RunState::HaltedInKvm => "halted",
        RunState::WaitForSipi => "wait_for_sipi",
        RunState::Paused => "paused",
        RunState::Exited => "exited",
    }
}

/// One vCPU's live row.
fn vcpu_row(engine: &Engine, vm: &EngineVm, index: usize, e: &EntityStats) -> Value {
    let cpus = engine.cpu_map();
    let run_state = vm.vcpus()[index].state();
    json!({
        "vcpu": index,
        "state": e.state.as_str(),
        "engine_state": engine_state(run_state),
        "host_cpu": match e.state {
            vcpu_sched::stats::EntityState::Blocked => None,
            _ => e.cpu.and_then(|c| cpus.host(c)).map(|h| h.0),
        },
        "affinity": engine.host_set(&e.affinity).to_list(),
        "class": crate::config::sched_rules::class_name(e.class),
        "base_priority": e.base_priority,
        "effective_priority": e.effective_priority,
        "penalty": e.penalty,
        "quantum_ns": e.quantum,
        "quantum_used_ns": e.quantum_used,
        "run_ns": e.run_time,
        "ready_wait_ns": e.ready_wait,
        "wakeups": e.wakes,
        "wake_latency": latency(&e.wake_latency),
        "migrations": e.migrations.total(),
        "preemptions": e.preemptions,
        "load_permille": e.load,
        "weight": e.weight,
        "cap_permille": e.cap,
        "reservation_permille": e.reservation,
        "throttles": e.throttles,
        "throttled_ns": e.throttled_time,
        "latency_bound_ns": e.latency_bound,
        "bound_budget_permille": e.latency_bound.map(|_| e.bound_budget),
        "bounded_wakes": e.bounded_wakes,
        "bound_misses": e.bound_misses,
    })
}

/// The live VMs of the engine with each vCPU's row in `snap`.
pub fn live_rows<'s>(
    ctx: &ApiContext<'_>,
    snap: &'s SchedSnapshot,
) -> Vec<(Arc<EngineVm>, Vec<Option<&'s EntityStats>>)> {
    let Some(engine) = ctx.engine else {
        return Vec::new();
    };
    let by_id: HashMap<EntityId, &EntityStats> = snap.entities.iter().map(|e| (e.id, e)).collect();
    // In the config's order, whichever VM the engine took first.
    let mut vms = engine.live_vms();
    vms.sort_by_key(|vm| ctx.configs.iter().position(|c| c.name == vm.name()));
    vms.into_iter()
        .map(|vm| {
            let rows = vm
                .vcpus()
                .iter()
                .map(|v| by_id.get(&v.entity()).copied())
                .collect();
            (vm, rows)
        })
        .collect()
}

/// `GET /api/v1/stats[?vm=NAME]`: `None` if `only` names no VM.
pub fn stats(ctx: &ApiContext<'_>, only: Option<&str>) -> Option<Value> {
    if let Some(name) = only {
        ctx.configs.iter().find(|c| c.name == name)?;
    }
    let snap = ctx.engine.map(|e| (e, e.snapshot()));
    let live: HashMap<String, Value> = snap
        .as_ref()
        .map(|(engine, snap)| {
            live_rows(ctx, snap)
                .into_iter()
                .map(|(vm, rows)| {
                    let list: Vec<Value> = rows
                        .iter()
                        .enumerate()
                        .filter_map(|(i, r)| r.map(|e| vcpu_row(engine, &vm, i, e)))
                        .collect();
                    (vm.name().to_string(), Value::Array(list))
                })
                .collect()
        })
        .unwrap_or_default();
    let vms: Vec<Value> = ctx
        .configs
        .iter()
        .filter(|c| only.is_none_or(|n| n == c.name))
        .map(|c| {
            json!({
                "name": c.name,
                "state": vm_state(ctx, &c.name),
                // Not scheduled by Pacer (policy host) or not in the
                // engine (starting, stopped): no rows.
                "vcpus": live.get(&c.name).cloned().unwrap_or(Value::Null),
            })
        })
        .collect();
    let body = json!({
        "t_run_ns": run_ns(ctx),
        "policy": ctx.policy.as_str(),
        "mode": ctx.engine.map(|e| e.mode().as_str()),
        "vms": vms,
    });
    Some(with_header(API_STATS, API_SCHEMA_VERSION, body))
}

/// Nanoseconds since the run started.
fn run_ns(ctx: &ApiContext<'_>) -> u64 {
    u64::try_from(ctx.run_start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Successive per-second samples: each the difference from the last.
#[derive(Default)]
pub struct Sampler {
    seq: u64,
    /// Per entity: run and ready-wait time at the last sample.
    last: HashMap<EntityId, (u64, u64)>,
    /// Per CPU: busy time at the last sample.
    last_busy: HashMap<u32, u64>,
    last_now: Option<u64>,
}

impl Sampler {
    /// The next sample (`seq` counts from 1).
    pub fn sample(&mut self, ctx: &ApiContext<'_>) -> Value {
        self.seq += 1;
        let t_run_ns = run_ns(ctx);
        let Some(engine) = ctx.engine else {
            let vms: Vec<Value> = ctx
                .configs
                .iter()
                .map(|c| json!({ "name": c.name, "state": vm_state(ctx, &c.name), "host_share": null, "vcpus": [] }))
                .collect();
            let body = json!({
                "seq": self.seq, "t_run_ns": t_run_ns,
                "interval_ns": null, "policy": ctx.policy.as_str(), "mode": null,
                "vcpu_count": ctx.configs.iter().map(|c| c.vcpus).sum::<u32>(),
                "cpus": [], "vms": vms,
            });
            return with_header(API_STATUS, API_SCHEMA_VERSION, body);
        };
        let snap = engine.snapshot();
        let dt = self
            .last_now
            .map(|t| snap.now.saturating_sub(t))
            .filter(|d| *d > 0);
        self.last_now = Some(snap.now);
        let frac = |delta: u64| dt.map(|d| (delta as f64 / d as f64).clamp(0.0, 1.0));
        let rows = live_rows(ctx, &snap);
        let cpus = engine.cpu_map();
        // Who runs where, from the vCPU rows (the CPU rows of a snapshot
        // are read at another instant: one picture must agree with itself).
        let mut on_cpu: HashMap<u32, (String, usize, u8)> = HashMap::new();
        let mut vms = Vec::new();
        let mut vcpu_count = 0;
        let mut last = HashMap::new();
        for (vm, vrows) in &rows {
            let mut vm_run = 0u64;
            let mut list = Vec::new();
            for (i, e) in vrows.iter().enumerate() {
                let Some(e) = e else { continue };
                vcpu_count += 1;
                let host_cpu = match e.state {
                    vcpu_sched::stats::EntityState::Blocked => None,
                    _ => e.cpu.and_then(|c| cpus.host(c)).map(|h| h.0),
                };
                if let (vcpu_sched::stats::EntityState::Running, Some(h)) = (e.state, host_cpu) {
                    on_cpu.insert(h, (vm.name().to_string(), i, e.effective_priority));
                }
                let (run0, wait0) = self
                    .last
                    .get(&e.id)
                    .copied()
                    .unwrap_or((e.run_time, e.ready_wait));
                let run = e.run_time.saturating_sub(run0);
                let wait = e.ready_wait.saturating_sub(wait0);
                vm_run += run;
                last.insert(e.id, (e.run_time, e.ready_wait));
                list.push(json!({
                    "vcpu": i,
                    "state": e.state.as_str(),
                    "engine_state": engine_state(vm.vcpus()[i].state()),
                    "host_cpu": host_cpu,
                    "effective_priority": e.effective_priority,
                    "run_fraction": frac(run),
                    "ready_wait_fraction": frac(wait),
                    "wake_latency": latency(&e.wake_latency),
                    "run_ns": e.run_time,
                }));
            }
            let share =
                dt.map(|d| (vm_run as f64 / (d as f64 * cpus.len().max(1) as f64)).clamp(0.0, 1.0));
            vms.push(json!({
                "name": vm.name(),
                "state": vm_state(ctx, vm.name()),
                "host_share": share,
                "vcpus": list,
            }));
        }
        self.last = last;
        let cpu_rows: Vec<Value> = snap
            .cpus
            .iter()
            .map(|c| {
                let busy0 = self
                    .last_busy
                    .insert(c.cpu.0, c.busy_time)
                    .unwrap_or(c.busy_time);
                let host = cpus.host(c.cpu).map(|h| h.0);
                let who = host.and_then(|h| on_cpu.get(&h));
                json!({
                    "cpu": host,
                    "in_service": c.in_service,
                    "vm": who.map(|w| w.0.clone()),
                    "vcpu": who.map(|w| w.1),
                    "effective_priority": who.map(|w| w.2),
                    "busy_fraction": frac(c.busy_time.saturating_sub(busy0)),
                })
            })
            .collect();
        let body = json!({
            "seq": self.seq,
            "t_run_ns": t_run_ns,
            "interval_ns": dt,
            "policy": ctx.policy.as_str(),
            "mode": engine.mode().as_str(),
            "vcpu_count": vcpu_count,
            "cpus": cpu_rows,
            "vms": vms,
        });
        with_header(API_STATUS, API_SCHEMA_VERSION, body)
    }
}
