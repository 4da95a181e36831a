//! Per-vCPU scheduling statistics, the same fields under every policy.
//!
//! Under Pacer's policies they come from `vcpu_sched`'s own accounting (its
//! snapshot: run time, time runnable but waiting, wake-to-run latency,
//! migrations, preemptions) plus the host CPUs the engine dispatched the
//! vCPU on. Under `host` they come from the kernel's per-thread counters
//! (`/proc/self/task/<tid>/schedstat` and `sched`): run and run-queue wait
//! time, voluntary switches as wake-ups, migrations, involuntary switches
//! as preemptions. The kernel keeps no per-wake latency, so under `host`
//! the wake latency fields are 0 ("unknown"), as documented in the README.
//!
//! [`VcpuNow`] is the live side: what the scheduler's snapshot says about
//! a vCPU at this moment (state, host CPU, effective priority, penalty,
//! time slice), for `--status` and the SIGUSR1 snapshot.
//!
//! The engine fills these; a VMM reads them. Each struct is
//! `#[non_exhaustive]`: later versions may add counters, so build one
//! (for a test) from `Default` and set fields.

use super::cpu_map::CpuMap;
use serde::Serialize;
use vcpu_sched::stats::EntityState;
use vcpu_sched::{EntityId, SchedSnapshot};

/// Wake-to-run latency percentiles, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct LatencyNs {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Longest seen.
    pub max: u64,
}

/// Scheduling statistics of one vCPU over its VM's run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct VcpuSchedStats {
    /// Time it ran on a host CPU.
    pub run_ns: u64,
    /// Time it was runnable but waited for a CPU (steal time).
    pub ready_wait_ns: u64,
    /// Times it was woken (a halt ended by an interrupt, a start-up IPI).
    pub wakeups: u64,
    /// Wake event -> running again.
    pub wake_latency_ns: LatencyNs,
    /// Dispatches on a different CPU than the previous one.
    pub migrations: u64,
    /// Times it was taken off a CPU before its time slice ended.
    pub preemptions: u64,
    /// Host CPUs it ran on (Linux list syntax).
    pub host_cpus: String,
    /// Halt polling after its blocks (zeros under `host`, where KVM polls).
    pub halt_poll: HaltPollStats,
    /// Its wake-to-run bound (`vcpu_sched::bound`; none unless promised).
    pub latency_bound_ns: Option<u64>,
    /// Wakes that came with budget for the bound (the scheduler's count).
    pub bounded_wakes: u64,
    /// Bounded wakes that reached a CPU later than the bound.
    pub bound_misses: u64,
    /// Times its thread was placed beside the sibling that owned a CPU,
    /// to share that CPU (`ranked`, a co-scheduled VM with more vCPUs
    /// than CPUs; 0 otherwise).
    pub beside_sibling: u64,
    /// Shared turns its thread ended at their slice's end while it ran
    /// beside the owning sibling, whose thread it kept off the CPU.
    pub shared_turns_ended: u64,
    /// Times its thread was ranked to take the host kernel's turns with
    /// the siblings beside it at the long slice, its VM's siblings
    /// spinning together (`ranked`, a relaxed VM wider than its CPUs).
    pub long_turns: u64,
}

/// Halt polling after a vCPU's blocks (the engine's counterpart of KVM's
/// `halt_attempted_poll`, `halt_successful_poll` and poll time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct HaltPollStats {
    /// Polls begun (a block with a non-zero window).
    pub polls: u64,
    /// Polls the wake-up ended: the vCPU was dispatched again (a worker:
    /// its CPU was given work) with no sleep and no futex wake.
    pub woken: u64,
    /// Time spent polling, successful or not.
    pub polled_ns: u64,
}

/// One vCPU as the scheduler sees it now (the snapshot's introspection),
/// named by its VM and index ([`crate::Engine::vcpus_now`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct VcpuNow {
    /// Its VM's name ([`crate::VmSchedSpec::name`]).
    pub vm: String,
    /// Its index in the VM.
    pub vcpu: u32,
    /// `blocked` (halted), `waiting` (runnable, in a queue) or `running`.
    pub state: &'static str,
    /// Running: the host CPU it runs on; waiting: the host CPU whose own
    /// queue holds it (none in a core's queue).
    pub host_cpu: Option<u32>,
    /// The level it waits or runs at: base priority less its penalty.
    pub effective_priority: u8,
    /// How far the policy has lowered it below its base priority (0 under
    /// policies without penalties).
    pub penalty: u8,
    /// The time slice of its current (or last) dispatch.
    pub quantum_ns: u64,
    /// How much of that slice it has used.
    pub quantum_used_ns: u64,
    /// Time it has waited runnable, over the run so far.
    pub ready_wait_ns: u64,
}

impl VcpuNow {
    /// The row of `entity` in `snap`, if the scheduler knows it.
    pub(crate) fn from_snapshot(
        snap: &SchedSnapshot,
        vm: &str,
        vcpu: u32,
        entity: EntityId,
        cpus: &CpuMap,
    ) -> Option<Self> {
        let e = snap.entities.iter().find(|e| e.id == entity)?;
        let host_cpu = match e.state {
            EntityState::Blocked => None,
            _ => e.cpu.and_then(|c| cpus.host(c)).map(|h| h.0),
        };
        Some(VcpuNow {
            vm: vm.to_string(),
            vcpu,
            state: e.state.as_str(),
            host_cpu,
            effective_priority: e.effective_priority,
            penalty: e.penalty,
            quantum_ns: e.quantum,
            quantum_used_ns: e.quantum_used,
            ready_wait_ns: e.ready_wait,
        })
    }

    /// One line for `--status`, e.g.
    /// `  a/0 running on CPU 1: E 8 (penalty 2), slice 1200/2500 us, waited 3.1 ms`.
    pub fn line(&self) -> String {
        let place = match (self.state, self.host_cpu) {
            ("running", Some(c)) => format!("running on CPU {c}"),
            ("waiting", Some(c)) => format!("waiting for CPU {c}"),
            (state, _) => state.to_string(),
        };
        format!(
            "  {}/{} {place}: E {} (penalty {}), slice {}/{} us, waited {:.1} ms",
            self.vm,
            self.vcpu,
            self.effective_priority,
            self.penalty,
            self.quantum_used_ns / 1000,
            self.quantum_ns / 1000,
            self.ready_wait_ns as f64 / 1e6
        )
    }
}

/// One vCPU as the engine and its VM's interrupt controller see it now
/// (the SIGUSR1 snapshot, next to the scheduler's [`VcpuNow`]): what a
/// guest that stopped making progress is diagnosed from — a vCPU halted
/// with a vector requested, or both sides of an IPI halted with nothing
/// ([`crate::Engine::vcpus_engine_now`]).
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct VcpuEngineNow {
    /// Its VM's name.
    pub vm: String,
    /// Its index in the VM.
    pub vcpu: u32,
    /// The engine's run state (`Halted { interruptible: true }`, ...).
    pub run_state: String,
    /// NMI, INIT and start-up IPIs taken from the controller, not yet acted on.
    pub events: String,
    /// An application processor not started yet (or sent INIT): only a
    /// start-up IPI lets it run.
    pub awaiting_sipi: bool,
    /// The interrupt controller's registers of this vCPU (Pacer's local
    /// APIC: IRR, ISR, PPR, LVT, timer, ...).
    pub interrupt_controller: Option<serde_json::Value>,
}

impl VcpuEngineNow {
    /// One phrase for a message: `vcpu2 Halted { interruptible: true },
    /// vectors 0xec requested, timer armed`.
    pub fn brief(&self) -> String {
        let mut out = format!("vcpu{} {}", self.vcpu, self.run_state);
        if self.awaiting_sipi {
            out.push_str(", awaiting a start-up IPI");
        }
        let Some(lapic) = &self.interrupt_controller else {
            return out;
        };
        let vectors = |key: &str| -> Vec<String> {
            let words = lapic[key].as_array().cloned().unwrap_or_default();
            (0..256u32)
                .filter(|v| {
                    words
                        .get((v / 32) as usize)
                        .and_then(serde_json::Value::as_u64)
                        .is_some_and(|w| w >> (v % 32) & 1 == 1)
                })
                .map(|v| format!("{v:#x}"))
                .collect()
        };
        for (key, what) in [("irr", "requested"), ("isr", "in service")] {
            let v = vectors(key);
            if !v.is_empty() {
                out.push_str(&format!(", vectors {} {what}", v.join(" ")));
            }
        }
        if !lapic["timer_deadline_ns"].is_null() {
            out.push_str(", timer armed");
        }
        out
    }
}

impl VcpuSchedStats {
    /// The row of `entity` in a `vcpu_sched` snapshot (zeros if absent).
    pub(crate) fn from_snapshot(snap: &SchedSnapshot, entity: EntityId, _cpus: &CpuMap) -> Self {
        let Some(e) = snap.entities.iter().find(|e| e.id == entity) else {
            return Self::default();
        };
        VcpuSchedStats {
            run_ns: e.run_time,
            ready_wait_ns: e.ready_wait,
            wakeups: e.wakes,
            wake_latency_ns: LatencyNs {
                p50: e.wake_latency.p50,
                p99: e.wake_latency.p99,
                p999: e.wake_latency.p999,
                max: e.wake_latency.max,
            },
            migrations: e.migrations.total(),
            preemptions: e.preemptions,
            host_cpus: String::new(),
            halt_poll: HaltPollStats::default(),
            latency_bound_ns: e.latency_bound,
            bounded_wakes: e.bounded_wakes,
            bound_misses: e.bound_misses,
            beside_sibling: 0,
            shared_turns_ended: 0,
            long_turns: 0,
        }
    }

    /// The kernel's counters of thread `tid` of this process (host policy).
    /// Fields the kernel does not expose stay 0.
    pub(crate) fn from_host_thread(tid: i32) -> Self {
        let mut s = VcpuSchedStats::default();
        let base = format!("/proc/self/task/{tid}");
        if let Ok(text) = std::fs::read_to_string(format!("{base}/schedstat")) {
            let mut it = text
                .split_whitespace()
                .map(|v| v.parse::<u64>().unwrap_or(0));
            s.run_ns = it.next().unwrap_or(0);
            s.ready_wait_ns = it.next().unwrap_or(0);
        }
        if let Ok(text) = std::fs::read_to_string(format!("{base}/sched")) {
            for line in text.lines() {
                let Some((key, value)) = line.split_once(':') else {
                    continue;
                };
                let value = value.trim().parse::<f64>().unwrap_or(0.0) as u64;
                match key.trim() {
                    "se.nr_migrations" => s.migrations = value,
                    "nr_voluntary_switches" => s.wakeups = value,
                    "nr_involuntary_switches" => s.preemptions = value,
                    _ => {}
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stuck_vcpu_is_said_in_one_phrase() {
        let mut irr = vec![0u64; 8];
        irr[7] = 1 << 12; // vector 0xec
        let now = VcpuEngineNow {
            vm: "web".into(),
            vcpu: 2,
            run_state: "Halted { interruptible: false }".into(),
            interrupt_controller: Some(serde_json::json!({
                "irr": irr,
                "isr": [0, 0, 0, 0, 0, 0, 0, 0],
                "timer_deadline_ns": 5,
            })),
            ..Default::default()
        };
        assert_eq!(
            now.brief(),
            "vcpu2 Halted { interruptible: false }, vectors 0xec requested, timer armed"
        );
        let bare = VcpuEngineNow {
            vcpu: 0,
            run_state: "Ready".into(),
            awaiting_sipi: true,
            ..Default::default()
        };
        assert_eq!(bare.brief(), "vcpu0 Ready, awaiting a start-up IPI");
    }

    #[test]
    fn host_thread_counters_are_read() {
        // Burn CPU for 20 ms so the counters move: the kernel folds a
        // running thread's time into schedstat at its ticks (4 ms at
        // HZ=250) and switches, so a burn shorter than a tick (a fixed
        // loop in a release build) can read 0.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(20) {
            for i in 0..10_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            std::hint::black_box(x);
        }
        let s = VcpuSchedStats::from_host_thread(crate::signals::current_tid());
        if std::path::Path::new("/proc/self/schedstat").exists() {
            assert!(s.run_ns > 0, "{s:?}");
        }
        assert_eq!(s.wake_latency_ns, LatencyNs::default());
    }

    #[test]
    fn vcpu_now_reads_the_introspection_and_names_host_cpus() {
        use vcpu_sched::{build, EntitySpec, SchedClass, SchedConfig, StopReason, Topology, VmId};
        // Scheduler CPUs 0, 1 are host CPUs 4, 6.
        let topo = Topology::from_spec("1x4x2")
            .unwrap()
            .restrict([4, 6])
            .unwrap();
        let cpus = CpuMap::from_topology(topo.clone());
        let sched = build(topo.clone(), SchedConfig::default()).unwrap();
        let spec = EntitySpec {
            vm: VmId(0),
            class: SchedClass::Timeshare,
            priority: 10,
            affinity: topo.all_cpus(),
        };
        let a = sched.add_entity(spec.clone(), 0).unwrap();
        let b = sched.add_entity(spec, 0).unwrap();
        let w = sched.wake(a, 0).unwrap().unwrap();
        sched.schedule(w.cpu, 0, StopReason::Idle).unwrap();
        let snap = sched.snapshot(500_000);
        let now = VcpuNow::from_snapshot(&snap, "vm", 0, a, &cpus).unwrap();
        let host = cpus.host(w.cpu).unwrap().0;
        assert_eq!(now.state, "running");
        assert_eq!(now.host_cpu, Some(host));
        assert_eq!((now.effective_priority, now.penalty), (10, 0));
        assert_eq!(now.quantum_ns, 2_000_000, "base quantum of priority 10");
        assert_eq!(now.quantum_used_ns, 500_000, "running for 500 us");
        assert_eq!(
            now.line(),
            format!(
                "  vm/0 running on CPU {host}: E 10 (penalty 0), slice 500/2000 us, waited 0.0 ms"
            )
        );
        let halted = VcpuNow::from_snapshot(&snap, "vm", 1, b, &cpus).unwrap();
        assert_eq!((halted.state, halted.host_cpu), ("blocked", None));
        assert!(halted.line().starts_with("  vm/1 blocked: E 10"));
        assert_eq!(
            VcpuNow::from_snapshot(&snap, "vm", 2, EntityId::new(9, 0), &cpus),
            None
        );
    }
}
