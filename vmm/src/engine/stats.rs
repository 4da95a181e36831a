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

use super::cpu_map::CpuMap;
use serde::Serialize;
use vcpu_sched::{EntityId, SchedSnapshot};

/// Wake-to-run latency percentiles, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LatencyNs {
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

/// Scheduling statistics of one vCPU over its VM's run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
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
}

impl VcpuSchedStats {
    /// The row of `entity` in a `vcpu_sched` snapshot (zeros if absent).
    pub fn from_snapshot(snap: &SchedSnapshot, entity: EntityId, _cpus: &CpuMap) -> Self {
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
                max: e.wake_latency.max,
            },
            migrations: e.migrations.total(),
            preemptions: e.preemptions,
            host_cpus: String::new(),
        }
    }

    /// The kernel's counters of thread `tid` of this process (host policy).
    /// Fields the kernel does not expose stay 0.
    pub fn from_host_thread(tid: i32) -> Self {
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
    fn host_thread_counters_are_read() {
        // Burn a little CPU so the counters move.
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let s = VcpuSchedStats::from_host_thread(crate::signals::current_tid());
        if std::path::Path::new("/proc/self/schedstat").exists() {
            assert!(s.run_ns > 0, "{s:?}");
        }
        assert_eq!(s.wake_latency_ns, LatencyNs::default());
    }
}
