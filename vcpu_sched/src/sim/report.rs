//! Results of a simulation run: throughput, wake latency, balance,
//! context switches, correctness violations and the policy's own snapshot.

pub use crate::monitor::Violations;
pub use crate::stats::jain_index;
use crate::{CpuId, EntityId, LatencySummary, Nanos, SchedSnapshot};
use serde::Serialize;
use std::fmt::Write as _;

/// Throughput of a set of vCPUs over the measured window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Throughput {
    /// Bursts completed.
    pub bursts: u64,
    /// Bursts completed per simulated second.
    pub bursts_per_sec: f64,
    /// Useful CPU time (burst progress, spinning excluded), ns.
    pub useful_ns: Nanos,
    /// Useful CPU time per simulated second (in CPUs: 1.0 = one CPU busy).
    pub useful_cpus: f64,
    /// CPU time spent spinning on a held lock, ns.
    pub spin_ns: Nanos,
    /// CPU time spent on the cost of wakes and blocks (the workload's
    /// `wake_cost` and `block_cost`: not useful), ns.
    pub overhead_ns: Nanos,
    /// Time on a CPU (useful + spinning + overhead), ns.
    pub run_ns: Nanos,
}

/// One vCPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VcpuReport {
    /// Global index (declaration order of groups).
    pub index: u32,
    /// Scheduler handle.
    pub entity: EntityId,
    /// Group name.
    pub group: String,
    /// VM id.
    pub vm: u32,
    /// Base priority.
    pub priority: u8,
    /// Throughput of this vCPU.
    pub throughput: Throughput,
    /// Wake event -> running again, measured by the simulator.
    pub wake_latency: LatencySummary,
    /// Time runnable but not running (ready-wait / steal), ns.
    pub ready_wait_ns: Nanos,
    /// The CPU it spent most run time on.
    pub home_cpu: Option<CpuId>,
    /// Share of its run time spent on `home_cpu` (0..=1).
    pub home_share: f64,
    /// Number of distinct CPUs it ran on.
    pub cpus_used: u32,
    /// Dispatches on a different CPU than its previous one.
    pub migrations: u64,
}

/// One group of vCPUs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupReport {
    /// Group name.
    pub name: String,
    /// Number of vCPUs.
    pub count: u32,
    /// Throughput summed over the group.
    pub throughput: Throughput,
    /// Wake latency over every wake of the group.
    pub wake_latency: LatencySummary,
    /// Jain's fairness index of the members' run times (1 = equal).
    pub jain_fairness: f64,
    /// Group run time per core, in CPUs (1.0 = one CPU-equivalent of the
    /// group's time on that core during the window), index = core id.
    pub per_core_cpus: Vec<f64>,
    /// Number of members whose home CPU is each CPU (index = CPU id).
    pub home_counts: Vec<u32>,
    /// Migrations summed over members.
    pub migrations: u64,
    /// Wakes with latency-bound budget and those of them later than the
    /// bound, summed over members (the policy's counts, whole run).
    pub bounded_wakes: u64,
    pub bound_misses: u64,
    /// A shootdown initiator's group: the round trips sent in the window,
    /// from the IPIs to the last acknowledgement (its bursts are the
    /// round trips); absent for other groups.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round_trip: Option<LatencySummary>,
    /// A server dispatcher's group: its VM's requests that arrived in
    /// the window; absent for other groups.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<Requests>,
}

/// A request server's figures over the window (`server.rs`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Requests {
    /// Requests that arrived in the window.
    pub offered: u64,
    /// Of those, the ones served by the end of the run.
    pub served: u64,
    /// `served` per second of the window.
    pub per_s: f64,
    /// Arrival to the end of service, over the served ones.
    pub latency: LatencySummary,
}

/// One VM.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmReport {
    /// VM id.
    pub vm: u32,
    /// Number of vCPUs.
    pub vcpus: u32,
    /// Throughput summed over the VM.
    pub throughput: Throughput,
}

/// One logical CPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuReport {
    /// CPU id.
    pub cpu: CpuId,
    /// Its core.
    pub core: u32,
    /// Time running a vCPU in the window, ns.
    pub busy_ns: Nanos,
    /// `busy_ns` / window.
    pub utilisation: f64,
    /// Changes of the running entity (idle counts as an entity), in the window.
    pub context_switches: u64,
    /// `context_switches` per simulated second.
    pub context_switches_per_sec: f64,
    /// `schedule` calls on this CPU in the window.
    pub schedule_calls: u64,
    /// Kicks delivered to this CPU in the window.
    pub kicks: u64,
    /// Kicks after which the CPU kept running what it ran before (the same
    /// entity, or idle): an IPI and an exit spent for nothing.
    pub kicks_wasted: u64,
    /// Wakes that queued behind this CPU's runner and brought its quantum
    /// timer forward ([`crate::WakeDecision::shorten_quantum`]), in the window.
    pub quantum_cuts: u64,
    /// Relaxed co-scheduling, in the window (the policy's counts; 0 under
    /// policies without it): co-stops, co-start kicks and directed yields
    /// of dispatches on this CPU (see [`crate::stats::CpuStats`]).
    pub costops: u64,
    pub costarts: u64,
    pub directed_yields: u64,
    /// Sibling gathering's swaps decided here, in the window (see
    /// [`crate::stats::CpuStats::gathers`]).
    pub gathers: u64,
    /// Time this CPU ran a vCPU while an SMT sibling ran a vCPU of another
    /// VM (measured by the simulator; 0 under SMT isolation), ns.
    pub smt_corun_foreign_ns: Nanos,
    /// Under `dispatch = "ranked"`: wakes the hypervisor ran here at a
    /// real-time rank, the policy not asked, in the window (0 otherwise).
    pub hypervisor_wakes: u64,
    /// Under `dispatch = "ranked"`: vCPUs the agent found awake at that
    /// rank at two looks in a row and handed to the policy, running here
    /// or waiting for a CPU (counted where they last ran), in the window.
    pub found_running: u64,
    /// Under `dispatch = "ranked"`: queued siblings of a co-scheduled VM
    /// wider than its CPUs placed beside the sibling that owns this CPU
    /// (sibling sharing), in the window.
    pub placed_beside: u64,
    /// Under `dispatch = "ranked"`: sibling turns given away here from a
    /// spin-wait loop, in the window.
    pub spin_yields: u64,
    /// Under `dispatch = "ranked"`: sibling turns given back here to a
    /// sibling that gave its CPU away from a spin-wait loop, in the window.
    pub turns_given_back: u64,
    /// vCPUs whose home CPU (most run time) is this CPU.
    pub home_vcpus: u32,
}

/// Host-side cost of the run (not deterministic: excluded from comparisons).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct HostTiming {
    /// Wall-clock time of the event loop, ns.
    pub wall_ns: u64,
    /// Simulator events processed per wall-clock second.
    pub events_per_sec: f64,
    /// Scheduler calls (`wake` + `schedule`) per wall-clock second.
    pub sched_calls_per_sec: f64,
}

/// Everything a run produced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimReport {
    /// Scenario name.
    pub name: String,
    /// Policy name as reported by the scheduler.
    pub policy: String,
    /// Topology spec.
    pub topology: String,
    /// Seed.
    pub seed: u64,
    /// Simulated time, ns.
    pub duration_ns: Nanos,
    /// Measured window (duration - warm-up), ns: the simulator's own metrics cover it.
    pub window_ns: Nanos,
    /// All vCPUs together.
    pub total: Throughput,
    /// Per group.
    pub groups: Vec<GroupReport>,
    /// Per VM (ascending VM id).
    pub vms: Vec<VmReport>,
    /// Per vCPU.
    pub vcpus: Vec<VcpuReport>,
    /// Per logical CPU.
    pub cpus: Vec<CpuReport>,
    /// Correctness checks.
    pub violations: Violations,
    /// Wakes queued without a kick on a busy CPU, and requeues, while a CPU
    /// that could run the entity was idle, in any mode (power-saving packing does this on
    /// purpose; in low-latency mode each also counts as
    /// [`Violations::idle_cpu_passed_over`]).
    pub wake_queued_with_idle_cpu: u64,
    /// Sum of the policy's own `idle_while_waiting` counters (whole run).
    pub policy_idle_while_waiting: u64,
    /// Simulator events processed (timers, kicks, sleep ends).
    pub events: u64,
    /// Calls into the scheduler (`wake` + `schedule`).
    pub sched_calls: u64,
    /// Host wall time (not deterministic).
    pub host: HostTiming,
    /// The policy's snapshot at the end of the run.
    pub snapshot: SchedSnapshot,
}

impl SimReport {
    /// The group with this name.
    pub fn group(&self, name: &str) -> Option<&GroupReport> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// The VM with this id.
    pub fn vm(&self, vm: u32) -> Option<&VmReport> {
        self.vms.iter().find(|v| v.vm == vm)
    }

    /// Kicks delivered and kicks wasted, summed over the CPUs.
    pub fn kicks(&self) -> (u64, u64) {
        self.cpus
            .iter()
            .fold((0, 0), |(k, w), c| (k + c.kicks, w + c.kicks_wasted))
    }

    /// SMT co-run time with another VM, summed over the CPUs, ns.
    pub fn smt_corun_foreign_ns(&self) -> Nanos {
        self.cpus.iter().map(|c| c.smt_corun_foreign_ns).sum()
    }

    /// Mean context switches per second per CPU.
    pub fn context_switches_per_sec_per_cpu(&self) -> f64 {
        if self.cpus.is_empty() {
            return 0.0;
        }
        self.cpus
            .iter()
            .map(|c| c.context_switches_per_sec)
            .sum::<f64>()
            / self.cpus.len() as f64
    }

    /// A copy with the host timing zeroed: equal for equal inputs.
    pub fn without_host_timing(&self) -> SimReport {
        let mut r = self.clone();
        r.host = HostTiming::default();
        r
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// A readable text table of the main metrics.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let w = self.window_ns as f64 / 1e6;
        let _ = writeln!(
            s,
            "scenario {:?}  policy {}  topology {}  seed {}  window {:.1} ms",
            self.name, self.policy, self.topology, self.seed, w
        );
        let _ = writeln!(
            s,
            "total: {:.0} bursts/s, useful {:.3} CPUs, spin {:.3} ms",
            self.total.bursts_per_sec,
            self.total.useful_cpus,
            self.total.spin_ns as f64 / 1e6
        );
        let _ = writeln!(
            s,
            "\n{:<14} {:>5} {:>12} {:>8} {:>9} {:>9} {:>9} {:>9} {:>6} {:>7}",
            "group",
            "n",
            "bursts/s",
            "cpus",
            "wake p50",
            "wake p99",
            "wake max",
            "wakes",
            "jain",
            "migr"
        );
        for g in self.groups.iter().filter(|g| g.bounded_wakes > 0) {
            let _ = writeln!(
                s,
                "bounded group {}: {} bounded wakes, {} later than the bound",
                g.name, g.bounded_wakes, g.bound_misses
            );
        }
        for g in &self.groups {
            if let Some(r) = g.requests.as_ref() {
                let _ = writeln!(
                    s,
                    "server group {}: {} of {} requests served ({:.0}/s), p50 {} p99 {} p99.9 {} max {}",
                    g.name,
                    r.served,
                    r.offered,
                    r.per_s,
                    fmt_ns(r.latency.p50),
                    fmt_ns(r.latency.p99),
                    fmt_ns(r.latency.p999),
                    fmt_ns(r.latency.max)
                );
            }
        }
        for g in &self.groups {
            if let Some(rt) = g.round_trip.as_ref() {
                let _ = writeln!(
                    s,
                    "shootdown group {}: {} round trips, p50 {} p99 {} max {}",
                    g.name,
                    rt.count,
                    fmt_ns(rt.p50),
                    fmt_ns(rt.p99),
                    fmt_ns(rt.max)
                );
            }
        }
        for g in &self.groups {
            let _ = writeln!(
                s,
                "{:<14} {:>5} {:>12.0} {:>8.3} {:>9} {:>9} {:>9} {:>9} {:>6.3} {:>7}",
                g.name,
                g.count,
                g.throughput.bursts_per_sec,
                g.throughput.useful_cpus,
                fmt_ns(g.wake_latency.p50),
                fmt_ns(g.wake_latency.p99),
                fmt_ns(g.wake_latency.max),
                g.wake_latency.count,
                g.jain_fairness,
                g.migrations
            );
        }
        let _ = writeln!(
            s,
            "\n{:<4} {:>8} {:>10} {:>10} {:>8} {:>6}",
            "vm", "vcpus", "bursts/s", "cpus", "spin ms", ""
        );
        for v in &self.vms {
            let _ = writeln!(
                s,
                "{:<4} {:>8} {:>10.0} {:>10.3} {:>8.2}",
                v.vm,
                v.vcpus,
                v.throughput.bursts_per_sec,
                v.throughput.useful_cpus,
                v.throughput.spin_ns as f64 / 1e6
            );
        }
        let _ = writeln!(
            s,
            "\n{:<4} {:>5} {:>7} {:>10} {:>10} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>6} {:>10}",
            "cpu",
            "core",
            "util",
            "ctxsw/s",
            "sched",
            "kicks",
            "wasted",
            "cuts",
            "costops",
            "costart",
            "dyields",
            "homes",
            "smt-vm ms"
        );
        for c in &self.cpus {
            let _ = writeln!(
                s,
                "{:<4} {:>5} {:>7.3} {:>10.0} {:>10} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>6} {:>10.3}",
                c.cpu.0,
                c.core,
                c.utilisation,
                c.context_switches_per_sec,
                c.schedule_calls,
                c.kicks,
                c.kicks_wasted,
                c.quantum_cuts,
                c.costops,
                c.costarts,
                c.directed_yields,
                c.home_vcpus,
                c.smt_corun_foreign_ns as f64 / 1e6
            );
        }
        if self.vcpus.len() <= 32 {
            let _ = writeln!(
                s,
                "\n{:<5} {:<12} {:>4} {:>10} {:>9} {:>9} {:>9} {:>5} {:>6} {:>6}",
                "vcpu",
                "group",
                "prio",
                "run ms",
                "wait ms",
                "wake p99",
                "bursts",
                "home",
                "share",
                "migr"
            );
            for v in &self.vcpus {
                let _ = writeln!(
                    s,
                    "{:<5} {:<12} {:>4} {:>10.2} {:>9.2} {:>9} {:>9} {:>5} {:>6.2} {:>6}",
                    v.index,
                    v.group,
                    v.priority,
                    v.throughput.run_ns as f64 / 1e6,
                    v.ready_wait_ns as f64 / 1e6,
                    fmt_ns(v.wake_latency.p99),
                    v.throughput.bursts,
                    v.home_cpu
                        .map(|c| c.0.to_string())
                        .unwrap_or_else(|| "-".into()),
                    v.home_share,
                    v.migrations
                );
            }
        }
        let v = &self.violations;
        let _ = writeln!(
            s,
            "\nviolations: {} (double_run {}, affinity {}, dispatched_blocked {}, lost_wake {}, unnoticed_wake {}, idle_while_waiting {}, idle_cpu_passed_over {}, smt_corun {}); info: idle_while_wake_in_flight {}, smt_handover_idle {}, zero_quantum {}, wake_queued_with_idle_cpu {}; policy idle_while_waiting {}",
            v.total(),
            v.double_run,
            v.affinity,
            v.dispatched_blocked,
            v.lost_wake,
            v.unnoticed_wake,
            v.idle_while_waiting,
            v.idle_cpu_passed_over,
            v.smt_corun,
            v.idle_while_wake_in_flight,
            v.smt_handover_idle,
            v.zero_quantum,
            self.wake_queued_with_idle_cpu,
            self.policy_idle_while_waiting
        );
        let _ = writeln!(
            s,
            "events {}  sched calls {}  host {:.1} ms  {:.2} M events/s  {:.2} M sched calls/s",
            self.events,
            self.sched_calls,
            self.host.wall_ns as f64 / 1e6,
            self.host.events_per_sec / 1e6,
            self.host.sched_calls_per_sec / 1e6
        );
        s
    }
}

/// Format nanoseconds as a short human string (us with one decimal, or ms).
pub fn fmt_ns(ns: Nanos) -> String {
    if ns >= 10_000_000 {
        format!("{:.1}ms", ns as f64 / 1e6)
    } else {
        format!("{:.1}us", ns as f64 / 1e3)
    }
}

/// Summary (count, p50, p99, max, mean) of latency samples; sorts them in place.
pub fn summarise(samples: &mut [Nanos]) -> LatencySummary {
    if samples.is_empty() {
        return LatencySummary::default();
    }
    samples.sort_unstable();
    let n = samples.len();
    let pct = |p: f64| samples[((n as f64 * p).ceil() as usize).clamp(1, n) - 1];
    let sum: u128 = samples.iter().map(|&x| x as u128).sum();
    LatencySummary {
        count: n as u64,
        p50: pct(0.50),
        p99: pct(0.99),
        p999: pct(0.999),
        max: samples[n - 1],
        mean: (sum / n as u128) as Nanos,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let mut v: Vec<Nanos> = (1..=100).rev().collect();
        let s = summarise(&mut v);
        assert_eq!(
            (s.count, s.p50, s.p99, s.max, s.mean),
            (100, 50, 99, 100, 50)
        );
        // The tail beyond p99: the 999th of 1000 samples.
        let mut v: Vec<Nanos> = (1..=1000).rev().collect();
        assert_eq!(summarise(&mut v).p999, 999);
    }
}
