//! `pacer trace export`: the trace as Chrome/Perfetto trace event JSON
//! (the "JSON Array/Object Format" both ui.perfetto.dev and
//! chrome://tracing open).
//!
//! - process "host CPUs": one track per host CPU, a slice per turn (the
//!   vCPU's name; its effective priority, quantum and why it stopped in
//!   the slice's arguments), instants for kicks and quantum cuts;
//! - one process per VM: one track per vCPU, slices "running on CPU n",
//!   "ready" (woken, waiting for a CPU) and "halted", instants for
//!   notifications, injections and EOIs;
//! - wake arrows (flow events): from the cause (the sending vCPU's track
//!   for an IPI, the woken vCPU's own track for a timer or a device line)
//!   to the CPU slice where the woken vCPU starts running.
//!
//! Times are microseconds from the trace's first event.

use super::describe;
use super::read::TraceFile;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use vcpu_engine::trace::record::{Cause, Event, VcpuRef};

/// pid of the host CPUs' process; VM `n` is `VM_PID_BASE + n`.
const CPU_PID: u64 = 1;
const VM_PID_BASE: u64 = 100;

fn vm_pid(v: VcpuRef) -> u64 {
    VM_PID_BASE + u64::from(v.vm)
}

/// The Chrome trace event document of `trace`.
pub fn perfetto_json(trace: &TraceFile) -> String {
    let doc = document(trace);
    serde_json::to_string(&doc).unwrap_or_default() + "\n"
}

/// A slice being built: since when, and its arguments.
struct Open {
    since: u64,
    name: String,
    args: Value,
}

pub fn document(trace: &TraceFile) -> Value {
    let (first, last) = trace.span();
    let ts = |t: u64| (t.saturating_sub(first)) as f64 / 1000.0;
    let mut ev: Vec<Value> = Vec::new();
    // Track names.
    ev.push(
        json!({"ph": "M", "name": "process_name", "pid": CPU_PID, "args": {"name": "host CPUs"}}),
    );
    for c in &trace.run.topology.cpus {
        ev.push(
            json!({"ph": "M", "name": "thread_name", "pid": CPU_PID, "tid": c.os_id,
            "args": {"name": format!("CPU {}", c.os_id)}}),
        );
    }
    for vm in &trace.vms {
        let pid = VM_PID_BASE + u64::from(vm.id);
        ev.push(json!({"ph": "M", "name": "process_name", "pid": pid,
            "args": {"name": format!("VM {} ({}, priority {})", vm.name, vm.class, vm.priority)}}));
        for i in 0..vm.vcpus {
            ev.push(
                json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": i,
                "args": {"name": format!("vcpu{i}")}}),
            );
        }
    }
    let mut on_cpu: BTreeMap<u16, Open> = BTreeMap::new();
    let mut vcpu_state: BTreeMap<VcpuRef, Open> = BTreeMap::new();
    // Wake arrows waiting for their vCPU's dispatch: flow id.
    let mut arrows: BTreeMap<VcpuRef, u64> = BTreeMap::new();
    let mut next_flow = 1u64;
    let slice = |ev: &mut Vec<Value>, pid: u64, tid: u64, o: Open, end: u64| {
        ev.push(json!({"ph": "X", "pid": pid, "tid": tid, "name": o.name,
            "ts": ts(o.since), "dur": ts(end) - ts(o.since), "args": o.args}));
    };
    let set_state = |ev: &mut Vec<Value>,
                     states: &mut BTreeMap<VcpuRef, Open>,
                     v: VcpuRef,
                     t: u64,
                     name: Option<String>| {
        if let Some(o) = states.remove(&v) {
            slice(ev, vm_pid(v), u64::from(v.vcpu), o, t);
        }
        if let Some(name) = name {
            states.insert(
                v,
                Open {
                    since: t,
                    name,
                    args: json!({}),
                },
            );
        }
    };
    for e in &trace.events {
        let t = e.t_ns;
        match e.event {
            Event::Dispatch {
                cpu,
                vcpu,
                quantum_ns,
                priority,
                by_waker,
            } => {
                if let Some(o) = on_cpu.remove(&cpu) {
                    slice(&mut ev, CPU_PID, u64::from(cpu), o, t);
                }
                on_cpu.insert(
                    cpu,
                    Open {
                        since: t,
                        name: trace.vcpu_name(vcpu),
                        args: json!({"quantum_us": quantum_ns / 1000,
                            "effective_priority": priority, "dispatched_by_waker": by_waker}),
                    },
                );
                set_state(
                    &mut ev,
                    &mut vcpu_state,
                    vcpu,
                    t,
                    Some(format!("running on CPU {cpu}")),
                );
                if let Some(id) = arrows.remove(&vcpu) {
                    ev.push(
                        json!({"ph": "f", "bp": "e", "id": id, "name": "wake", "cat": "wake",
                        "pid": CPU_PID, "tid": cpu, "ts": ts(t)}),
                    );
                }
            }
            Event::Stop { cpu, vcpu, why, .. } => {
                if let Some(mut o) = on_cpu.remove(&cpu) {
                    o.args["stop"] = json!(why.as_str());
                    slice(&mut ev, CPU_PID, u64::from(cpu), o, t);
                }
                let next = match why {
                    vcpu_engine::trace::record::StopWhy::Halted => Some("halted".to_string()),
                    vcpu_engine::trace::record::StopWhy::Exited => None,
                    vcpu_engine::trace::record::StopWhy::WaitSipi => {
                        Some("waiting for SIPI".into())
                    }
                    vcpu_engine::trace::record::StopWhy::Paused => Some("paused".into()),
                    _ => Some("ready".into()),
                };
                set_state(&mut ev, &mut vcpu_state, vcpu, t, next);
            }
            Event::Idle { cpu } => {
                if let Some(o) = on_cpu.remove(&cpu) {
                    slice(&mut ev, CPU_PID, u64::from(cpu), o, t);
                }
            }
            Event::Wake {
                vcpu, cpu: Some(_), ..
            } => {
                set_state(&mut ev, &mut vcpu_state, vcpu, t, Some("ready".into()));
                instant(
                    &mut ev,
                    vm_pid(vcpu),
                    u64::from(vcpu.vcpu),
                    "wake",
                    ts(t),
                    describe::details(trace, &e.event),
                );
            }
            Event::Notify { vcpu, cause } => {
                let id = next_flow;
                next_flow += 1;
                let (pid, tid) = match cause {
                    Cause::Ipi { from } => (vm_pid(vcpu), u64::from(from)),
                    _ => (vm_pid(vcpu), u64::from(vcpu.vcpu)),
                };
                let what = describe::cause(trace, vcpu, cause);
                instant(
                    &mut ev,
                    pid,
                    tid,
                    "notify",
                    ts(t),
                    format!("{what} for {}", trace.vcpu_name(vcpu)),
                );
                ev.push(json!({"ph": "s", "id": id, "name": "wake", "cat": "wake",
                    "pid": pid, "tid": tid, "ts": ts(t)}));
                // A newer cause replaces an arrow still waiting.
                arrows.insert(vcpu, id);
            }
            Event::Kick { cpu, .. } | Event::Cut { cpu, .. } | Event::HaltPoll { cpu, .. } => {
                instant(
                    &mut ev,
                    CPU_PID,
                    u64::from(cpu),
                    describe::name(&e.event),
                    ts(t),
                    describe::details(trace, &e.event),
                );
            }
            Event::Inject { vcpu, .. }
            | Event::Eoi { vcpu, .. }
            | Event::ExitSeen { vcpu, .. }
            | Event::Migrate { vcpu, .. } => {
                instant(
                    &mut ev,
                    vm_pid(vcpu),
                    u64::from(vcpu.vcpu),
                    describe::name(&e.event),
                    ts(t),
                    describe::details(trace, &e.event),
                );
            }
            Event::Lost { count } => {
                ev.push(
                    json!({"ph": "i", "s": "g", "name": format!("{count} events lost"), "ts": ts(t),
                    "pid": CPU_PID, "tid": 0}),
                );
            }
            _ => {}
        }
    }
    for (cpu, o) in std::mem::take(&mut on_cpu) {
        slice(&mut ev, CPU_PID, u64::from(cpu), o, last);
    }
    for (v, o) in std::mem::take(&mut vcpu_state) {
        slice(&mut ev, vm_pid(v), u64::from(v.vcpu), o, last);
    }
    json!({
        "traceEvents": ev,
        "displayTimeUnit": "ns",
        // Chrome's format keeps our own fields here: a `pacer-trace-export`
        // document (its schema: `schemas/`).
        "otherData": vmm::documents::with_header(vmm::documents::TRACE_EXPORT, vmm::documents::SCHEMA_VERSION, json!({
            "policy": trace.run.policy,
            "mode": trace.run.mode,
            "dispatch": trace.run.dispatch,
            "config": trace.run.config,
            "events_lost": trace.lost,
            "complete": trace.complete,
        }))
    })
}

fn instant(ev: &mut Vec<Value>, pid: u64, tid: u64, name: &str, ts: f64, detail: String) {
    ev.push(
        json!({"ph": "i", "s": "t", "pid": pid, "tid": tid, "name": name, "ts": ts,
        "args": {"detail": detail}}),
    );
}
