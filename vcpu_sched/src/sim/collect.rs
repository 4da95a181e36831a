//! Turning the engine's measurements into a [`SimReport`]: per vCPU, per
//! group, per VM and per CPU over the measured window, the monitor's
//! counts, and the policy's own snapshot at the end.

use super::engine::{CoschedCounts, Engine};
use super::report::{
    jain_index, summarise, CpuReport, GroupReport, HostTiming, Requests, SimReport, Throughput,
    VcpuReport, VmReport,
};
use crate::{CpuId, Nanos};

impl Engine {
    /// Every CPU's co-scheduling counters at `now` (the window's base).
    pub(super) fn cosched_counts(&self, now: Nanos) -> Vec<CoschedCounts> {
        self.sched
            .snapshot(now)
            .cpus
            .iter()
            .map(CoschedCounts::of)
            .collect()
    }

    /// CPU `c`'s co-scheduling counters in the window: the policy's at the
    /// end (`end`) less those when the window opened.
    fn window_cosched(&self, end: &crate::SchedSnapshot, c: usize) -> CoschedCounts {
        let at_end = end.cpus.get(c).map(CoschedCounts::of).unwrap_or_default();
        at_end.since(self.cosched_base.get(c).copied().unwrap_or_default())
    }

    pub(super) fn report(&mut self, wall_ns: u64) -> SimReport {
        let window = self.end - self.warmup;
        let secs = window as f64 / 1e9;
        let ncpu = self.cpus.len();
        let tp = |bursts: u64, useful: Nanos, spin: Nanos, cost: Nanos, run: Nanos| Throughput {
            bursts,
            bursts_per_sec: bursts as f64 / secs,
            useful_ns: useful,
            useful_cpus: useful as f64 / window as f64,
            spin_ns: spin,
            overhead_ns: cost,
            run_ns: run,
        };
        let mut vcpus = Vec::with_capacity(self.ents.len());
        let mut home_of = Vec::with_capacity(self.ents.len());
        for (i, ent) in self.ents.iter_mut().enumerate() {
            let row = &self.cpu_time[i * ncpu..(i + 1) * ncpu];
            let mut home = None;
            let mut best = 0;
            for (c, &t) in row.iter().enumerate() {
                if t > best {
                    best = t;
                    home = Some(c);
                }
            }
            home_of.push(home);
            let g = &self.w.groups[ent.group as usize];
            vcpus.push(VcpuReport {
                index: i as u32,
                entity: ent.id,
                group: g.name.clone(),
                vm: ent.vm,
                priority: g.priority,
                throughput: tp(ent.bursts, ent.useful, ent.spin, ent.overhead, ent.run),
                wake_latency: summarise(&mut ent.latencies),
                ready_wait_ns: ent.ready_wait,
                home_cpu: home.map(|c| CpuId(c as u32)),
                home_share: if ent.run > 0 {
                    best as f64 / ent.run as f64
                } else {
                    0.0
                },
                cpus_used: row.iter().filter(|&&t| t > 0).count() as u32,
                migrations: ent.migrations,
            });
        }
        let sum_tp = |vs: &[&VcpuReport]| {
            let b = vs.iter().map(|v| v.throughput.bursts).sum();
            let u = vs.iter().map(|v| v.throughput.useful_ns).sum();
            let s = vs.iter().map(|v| v.throughput.spin_ns).sum();
            let c = vs.iter().map(|v| v.throughput.overhead_ns).sum();
            let r = vs.iter().map(|v| v.throughput.run_ns).sum();
            tp(b, u, s, c, r)
        };
        let snapshot = self.sched.snapshot(self.end);
        let bound_counts = |range: std::ops::Range<usize>| {
            self.ents[range].iter().fold((0, 0), |(w, m), e| {
                match snapshot.entities.iter().find(|s| s.id == e.id) {
                    Some(s) => (w + s.bounded_wakes, m + s.bound_misses),
                    None => (w, m),
                }
            })
        };
        let ncores = self.topo.cores.len();
        let mut groups = Vec::with_capacity(self.groups.len());
        for (gi, g) in self.groups.iter().enumerate() {
            let range = g.first as usize..(g.first + g.count) as usize;
            let members: Vec<&VcpuReport> = vcpus[range.clone()].iter().collect();
            let mut lat: Vec<Nanos> = self.ents[range.clone()]
                .iter()
                .flat_map(|e| e.latencies.iter().copied())
                .collect();
            let mut per_core = vec![0.0; ncores];
            let mut home_counts = vec![0u32; ncpu];
            for e in range.clone() {
                for c in 0..ncpu {
                    per_core[self.cpus[c].core as usize] +=
                        self.cpu_time[e * ncpu + c] as f64 / window as f64;
                }
                if let Some(h) = home_of[e] {
                    home_counts[h] += 1;
                }
            }
            let (bounded_wakes, bound_misses) = bound_counts(range.clone());
            // The initiator's group: its VM's shootdown round trips.
            let round_trip = self
                .shootdowns
                .iter_mut()
                .find(|s| range.contains(&(s.initiator as usize)))
                .map(|s| summarise(&mut s.trips));
            // The dispatcher's group: its VM's requests.
            let requests = self
                .servers
                .iter_mut()
                .find(|s| range.contains(&(s.dispatcher as usize)))
                .map(|s| Requests {
                    offered: s.offered,
                    served: s.latencies.len() as u64,
                    per_s: s.latencies.len() as f64 * 1e9 / window.max(1) as f64,
                    latency: summarise(&mut s.latencies),
                });
            groups.push(GroupReport {
                name: self.w.groups[gi].name.clone(),
                count: g.count,
                throughput: sum_tp(&members),
                wake_latency: summarise(&mut lat),
                jain_fairness: jain_index(members.iter().map(|v| v.throughput.run_ns as f64)),
                per_core_cpus: per_core,
                home_counts,
                migrations: members.iter().map(|v| v.migrations).sum(),
                bounded_wakes,
                bound_misses,
                round_trip,
                requests,
            });
        }
        let mut vm_ids: Vec<u32> = self.ents.iter().map(|e| e.vm).collect();
        vm_ids.sort_unstable();
        vm_ids.dedup();
        let vms = vm_ids
            .iter()
            .map(|&vm| {
                let members: Vec<&VcpuReport> = vcpus.iter().filter(|v| v.vm == vm).collect();
                VmReport {
                    vm,
                    vcpus: members.len() as u32,
                    throughput: sum_tp(&members),
                }
            })
            .collect();
        let all: Vec<&VcpuReport> = vcpus.iter().collect();
        let total = sum_tp(&all);
        let cpus = self
            .cpus
            .iter()
            .enumerate()
            .map(|(c, cpu)| (c, cpu, self.window_cosched(&snapshot, c)))
            .map(|(c, cpu, co)| CpuReport {
                cpu: CpuId(c as u32),
                core: cpu.core,
                busy_ns: cpu.busy,
                utilisation: cpu.busy as f64 / window as f64,
                context_switches: cpu.ctx,
                context_switches_per_sec: cpu.ctx as f64 / secs,
                schedule_calls: cpu.sched_calls,
                kicks: cpu.kicks,
                kicks_wasted: cpu.kicks_wasted,
                quantum_cuts: cpu.quantum_cuts,
                costops: co.costops,
                costarts: co.costarts,
                directed_yields: co.directed_yields,
                gathers: co.gathers,
                smt_corun_foreign_ns: cpu.smt_foreign,
                hypervisor_wakes: cpu.hypervisor_wakes,
                found_running: cpu.found_running,
                placed_beside: cpu.placed_beside,
                spin_yields: cpu.spin_yields,
                turns_given_back: cpu.turns_given_back,
                home_vcpus: home_of.iter().filter(|h| **h == Some(c)).count() as u32,
            })
            .collect();
        let policy_iww = snapshot.cpus.iter().map(|c| c.idle_while_waiting).sum();
        let wall_s = (wall_ns.max(1)) as f64 / 1e9;
        SimReport {
            name: self.w.name.clone(),
            policy: self.sched.name().to_string(),
            topology: self.w.topology.clone(),
            seed: self.w.seed,
            duration_ns: self.end,
            window_ns: window,
            total,
            groups,
            vms,
            vcpus,
            cpus,
            violations: self.monitor.violations(),
            wake_queued_with_idle_cpu: self.monitor.passed_over(),
            policy_idle_while_waiting: policy_iww,
            events: self.events,
            sched_calls: self.sched_calls,
            host: HostTiming {
                wall_ns,
                events_per_sec: self.events as f64 / wall_s,
                sched_calls_per_sec: self.sched_calls as f64 / wall_s,
            },
            snapshot,
        }
    }
}
