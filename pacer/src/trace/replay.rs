//! From a trace to a simulator replay (`pacer sim --replay FILE`): each
//! recorded vCPU's script (`vcpu_sched::sim::replay`) is what its guest
//! asked for, read from the events:
//!
//! - a run is the time between two halts, summed over its turns (quantum
//!   ends and preemptions do not end it; time waiting for a CPU is not in
//!   it). A turn counts from its dispatch to its stop ([`Demand::Scheduled`],
//!   the scheduler's view: it includes the wake-up of the vCPU's thread
//!   and any time the host kernel gave that CPU to another process), or
//!   only the CPU time its thread got from the moment it took the CPU
//!   ([`Demand::ThreadCpu`]: what the guest itself used). The two agree
//!   on a quiet host. A turn split by an IPI sent or taken is split by
//!   wall time, its total staying what the mode says;
//! - a halt ended by a timer is a sleep until the timer's deadline; by a
//!   device line (or a resume, or the VM's start), a sleep until then;
//! - every IPI from vCPU x to vCPU y is a message: x's script sends it
//!   where x's run was when it sent the IPI, and y's script waits for it
//!   where y took it: at the halt it ended, or, if y was running, where
//!   the interrupt was injected (the guest's code after its handler
//!   depends on it: a ping-pong peer that gets its answer before it halts
//!   would have halted without it);
//! - a run that went on without a halt for more than a quarter of the
//!   recording and got more than a tenth of it (a CPU-bound loop) runs
//!   until the time it ended: such loops are bounded by wall time, not by
//!   the CPU they got (a hog given more CPU does not stop sooner). A long
//!   run that got less (a vCPU starved while runnable) cannot be told
//!   from a loop by its events; it is replayed as the work it did.
//!
//! The recorded wake mechanism's cost (a kicking wake decision -> the
//! woken vCPU dispatched, or, counting thread CPU, running: the median
//! over the trace) becomes the simulator's kick latency. The guest's own cost of a wake (its handler,
//! on this KVM ~100 us of emulated ring 0) is part of its runs.

use super::read::TraceFile;
use std::collections::BTreeMap;
use vcpu_engine::trace::record::{Cause, Event, StopWhy, VcpuRef};
use vcpu_sched::sim::replay::{Replay, ReplayVcpu, Step};
use vcpu_sched::{CpuId, CpuSet, PolicyKind, SchedClass, SchedConfig, Topology};

/// What a replayed run asks for (see the module comment).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Demand {
    /// A turn's time from its thread taking the CPU to its stop.
    #[default]
    Scheduled,
    /// The CPU time the turn's thread got.
    ThreadCpu,
}

/// A replay and what the recording measured of the same vCPUs.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub replay: Replay,
    /// Per vCPU (the replay's order): time on a CPU as the scheduler
    /// counted it (dispatch -> stop) in the recording, ns.
    pub sched_run_ns: Vec<u64>,
    /// Per vCPU: its runs' total as `demand` counts them, ns.
    pub run_ns: Vec<u64>,
    pub demand: Demand,
    /// Per vCPU: decision -> dispatched of each wake, ns.
    pub wake_to_dispatch_ns: Vec<Vec<u64>>,
}

/// What is known of one vCPU while its events are read.
#[derive(Default)]
struct Acc {
    script: Vec<Step>,
    /// The piece of its turn in progress began at this time (dispatch,
    /// then unpark, then each split).
    since: Option<u64>,
    /// Its thread's CPU time when its turn began (unpark).
    turn_cpu0: Option<u64>,
    /// Guest time given to the pieces of this turn already split off.
    turn_split: u64,
    dispatched_at: Option<u64>,
    /// Guest time of the run in progress.
    run: u64,
    total_run: u64,
    sched_run: u64,
    halted_at: Option<u64>,
    notified: Option<(u64, Cause)>,
    exited: bool,
    /// IPIs sent to it that its script does not wait for yet.
    messages: u32,
    /// When its current run (since its last wake) began.
    run_began: u64,
    woke_at: Option<u64>,
    wake_to_dispatch: Vec<u64>,
}

impl Acc {
    /// Its turn ends at `t`, its thread's CPU time then `cpu`.
    fn stop_running(&mut self, t: u64, cpu: u64, demand: Demand) {
        if let Some(s) = self.since.take() {
            let d = match (self.turn_cpu0.take(), demand) {
                (Some(c0), Demand::ThreadCpu) => {
                    cpu.saturating_sub(c0).saturating_sub(self.turn_split)
                }
                _ => t.saturating_sub(s),
            };
            self.run = self.run.saturating_add(d);
            self.total_run = self.total_run.saturating_add(d);
        }
        if let Some(d) = self.dispatched_at.take() {
            self.sched_run = self.sched_run.saturating_add(t.saturating_sub(d));
        }
        self.turn_split = 0;
    }

    /// Split the piece of its turn in progress at `t` (by wall time).
    fn split(&mut self, t: u64) {
        if let Some(s) = self.since {
            let d = t.saturating_sub(s);
            self.run = self.run.saturating_add(d);
            self.total_run = self.total_run.saturating_add(d);
            self.turn_split = self.turn_split.saturating_add(d);
            self.since = Some(t);
        }
    }

    /// The run in progress ends at `t` (a halt, a yield, an IPI it sent
    /// or took, its VM's stop, the recording's end): a CPU-bound loop
    /// (no halt for more than a quarter of the recording, more than a
    /// tenth of it on a CPU) runs until `t`, anything else for the guest
    /// time it ran.
    fn end_run_at(&mut self, t: u64, t0: u64, end: u64) {
        if self.run == 0 {
            return;
        }
        let span = end.saturating_sub(t0);
        // Saturating: a trace's times are whatever its file says.
        if t.saturating_sub(self.run_began.max(t0)).saturating_mul(4) > span
            && self.run.saturating_mul(10) > span
        {
            self.run = 0;
            self.script.push(Step::RunUntil(t.saturating_sub(t0)));
        } else {
            self.script.push(Step::Run(std::mem::take(&mut self.run)));
        }
        self.run_began = t;
    }
}

/// Where a recorded core set goes on the replay's topology: the same CPUs
/// (by OS number) on the recorded topology; on another one, everywhere
/// if it spanned every recorded CPU, else the CPUs of the same numbers.
fn affinity(cpus: &[u32], recorded: &Topology, target: &Topology, same: bool) -> Option<CpuSet> {
    let ids: Vec<CpuId> = if same {
        cpus.iter()
            .filter_map(|&os| target.cpu_by_os_id(os))
            .collect()
    } else {
        if recorded.cpus.iter().all(|c| cpus.contains(&c.os_id)) {
            return None;
        }
        cpus.iter()
            .filter(|&&c| (c as usize) < target.num_cpus())
            .map(|&c| CpuId(c))
            .collect()
    };
    if ids.is_empty() || ids.len() == target.num_cpus() {
        return None;
    }
    ids.into_iter().collect::<Result<CpuSet, _>>().ok()
}

/// The replay of `trace` on `topology` (None: the recorded one) under
/// `policy` (None: the recorded one).
pub fn replay_of(
    trace: &TraceFile,
    topology: Option<Topology>,
    policy: Option<PolicyKind>,
    demand: Demand,
) -> Result<Recorded, String> {
    let (t0, end) = trace.span();
    let mut sched = trace.run.sched.clone().unwrap_or_else(|| SchedConfig {
        policy: trace.run.policy.parse().unwrap_or_default(),
        mode: trace.run.mode.parse().unwrap_or_default(),
        ..SchedConfig::default()
    });
    if let Some(p) = policy {
        sched.policy = p;
    }
    let same = topology.is_none();
    let target = topology.unwrap_or_else(|| trace.run.topology.clone());
    // Every vCPU of every VM, in (VM, index) order.
    let mut order: Vec<VcpuRef> = Vec::new();
    for vm in &trace.vms {
        for i in 0..vm.vcpus {
            order.push(VcpuRef { vm: vm.id, vcpu: i });
        }
    }
    if order.is_empty() {
        return Err("the trace describes no VM".into());
    }
    let index: BTreeMap<VcpuRef, usize> = order.iter().enumerate().map(|(i, v)| (*v, i)).collect();
    let mut acc: Vec<Acc> = order
        .iter()
        .map(|_| Acc {
            halted_at: Some(t0),
            ..Acc::default()
        })
        .collect();
    for e in &trace.events {
        let t = e.t_ns;
        match e.event {
            Event::Dispatch { vcpu, .. } => {
                if let Some(&i) = index.get(&vcpu) {
                    acc[i].since = Some(t);
                    acc[i].dispatched_at = Some(t);
                    acc[i].turn_cpu0 = None;
                    acc[i].turn_split = 0;
                    if let Some(w) = acc[i].woke_at.take() {
                        acc[i].wake_to_dispatch.push(t.saturating_sub(w));
                    }
                }
            }
            Event::Unpark {
                vcpu,
                thread_cpu_ns,
                ..
            } => {
                if let Some(&i) = index.get(&vcpu) {
                    if acc[i].since.is_some() && demand == Demand::ThreadCpu {
                        acc[i].since = Some(t);
                        acc[i].turn_cpu0 = Some(thread_cpu_ns);
                        acc[i].turn_split = 0;
                    }
                }
            }
            Event::Stop {
                vcpu,
                why,
                thread_cpu_ns,
                ..
            } => {
                let Some(&i) = index.get(&vcpu) else { continue };
                let a = &mut acc[i];
                a.stop_running(t, thread_cpu_ns, demand);
                match why {
                    StopWhy::Halted | StopWhy::WaitSipi | StopWhy::Paused => {
                        a.end_run_at(t, t0, end);
                        a.halted_at = Some(t);
                    }
                    StopWhy::Yielded => {
                        a.end_run_at(t, t0, end);
                        a.script.push(Step::Yield);
                    }
                    StopWhy::Exited if !a.exited => {
                        a.end_run_at(t, t0, end);
                        a.exited = true;
                    }
                    _ => {}
                }
            }
            Event::Notify { vcpu, cause } => {
                let Some(&i) = index.get(&vcpu) else { continue };
                acc[i].notified = Some((t, cause));
                let Cause::Ipi { from } = cause else { continue };
                let sender = VcpuRef {
                    vm: vcpu.vm,
                    vcpu: from,
                };
                if let Some(s) = index.get(&sender).copied().filter(|&s| s != i) {
                    // Split the sender's run where it sent.
                    let a = &mut acc[s];
                    a.split(t);
                    a.end_run_at(t, t0, end);
                    a.script.push(Step::Send(i as u32));
                    acc[i].messages += 1;
                }
            }
            Event::Inject { vcpu, .. } => {
                // A running vCPU takes the IPIs sent to it here.
                let Some(&i) = index.get(&vcpu) else { continue };
                let a = &mut acc[i];
                if a.messages > 0 {
                    a.split(t);
                    a.end_run_at(t, t0, end);
                    for _ in 0..std::mem::take(&mut a.messages) {
                        a.script.push(Step::WaitMessage);
                    }
                }
            }
            Event::Wake {
                vcpu, cpu: Some(_), ..
            } => {
                let Some(&i) = index.get(&vcpu) else { continue };
                acc[i].woke_at = Some(t);
                let Some(h) = acc[i].halted_at.take() else {
                    continue;
                };
                let (nt, cause) = match acc[i].notified.take() {
                    Some((nt, c)) if nt >= h => (nt, Some(c)),
                    _ => (t, None),
                };
                acc[i].run_began = t;
                match cause {
                    Some(Cause::Ipi { .. }) if acc[i].messages > 0 => {
                        acc[i].messages -= 1;
                        acc[i].script.push(Step::WaitMessage);
                    }
                    Some(Cause::Timer { deadline_ns }) if deadline_ns > 0 => {
                        acc[i]
                            .script
                            .push(Step::Sleep(deadline_ns.saturating_sub(h)));
                    }
                    _ => acc[i].script.push(Step::Sleep(nt.saturating_sub(h))),
                }
            }
            _ => {}
        }
    }
    // The mechanism's cost: a kicked wake until the woken vCPU runs.
    let mut mechanism = super::summary::wake_mechanism_ns(trace, demand == Demand::ThreadCpu);
    mechanism.sort_unstable();
    let kick_latency_us = mechanism
        .get(mechanism.len() / 2)
        .map_or(2.0, |&ns| ns as f64 / 1000.0);
    let mut vcpus = Vec::with_capacity(order.len());
    let mut run_ns = Vec::with_capacity(order.len());
    let mut sched_run_ns = Vec::with_capacity(order.len());
    let mut wake_to_dispatch_ns = Vec::with_capacity(order.len());
    for (v, mut a) in order.iter().zip(acc) {
        if !a.exited && a.halted_at.is_none() {
            // Still runnable when the recording ended.
            a.split(end);
            a.stop_running(end, 0, demand);
            a.end_run_at(end, t0, end);
        }
        let vm = trace.vm(v.vm).ok_or("a vCPU of an undescribed VM")?;
        vcpus.push(ReplayVcpu {
            name: trace.vcpu_name(*v),
            vm: u32::from(v.vm),
            class: if vm.class == "realtime" {
                SchedClass::Realtime
            } else {
                SchedClass::Timeshare
            },
            priority: vm.priority,
            affinity: affinity(&vm.cpus, &trace.run.topology, &target, same),
            script: a.script,
        });
        run_ns.push(a.total_run);
        sched_run_ns.push(a.sched_run);
        wake_to_dispatch_ns.push(a.wake_to_dispatch);
    }
    let name = trace
        .run
        .config
        .as_deref()
        .and_then(|c| std::path::Path::new(c).file_stem())
        .map_or("trace".into(), |s| s.to_string_lossy().into_owned());
    Ok(Recorded {
        replay: Replay {
            name: format!("replay of {name}"),
            topology: target,
            sched,
            duration_ns: end.saturating_sub(t0),
            kick_latency_us,
            vcpus,
        },
        run_ns,
        sched_run_ns,
        demand,
        wake_to_dispatch_ns,
    })
}

/// One vCPU of a replay next to its recording.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VcpuComparison {
    pub vcpu: String,
    /// Dispatch -> stop over the recording, as its scheduler counted.
    pub recorded_sched_run_share: f64,
    /// Its runs as the replay's demand counts them, over the recording.
    pub recorded_run_share: f64,
    pub replay_run_share: f64,
    pub recorded_wake_to_dispatch_p50_ns: Option<u64>,
    pub recorded_wake_to_dispatch_p99_ns: Option<u64>,
    pub replay_wake_latency_p50_ns: Option<u64>,
    pub replay_wake_latency_p99_ns: Option<u64>,
}

/// The replay's report next to what the recording measured, per vCPU.
pub fn compare(rec: &Recorded, report: &vcpu_sched::sim::SimReport) -> Vec<VcpuComparison> {
    let span = rec.replay.duration_ns.max(1) as f64;
    let window = report.window_ns.max(1) as f64;
    rec.replay
        .vcpus
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let q = super::summary::Quantiles::of_some(rec.wake_to_dispatch_ns[i].clone());
            let r = report.vcpus.get(i);
            let lat = r.map(|r| r.wake_latency).filter(|l| l.count > 0);
            VcpuComparison {
                vcpu: v.name.clone(),
                recorded_sched_run_share: rec.sched_run_ns[i] as f64 / span,
                recorded_run_share: rec.run_ns[i] as f64 / span,
                replay_run_share: r.map_or(0.0, |r| r.throughput.run_ns as f64 / window),
                recorded_wake_to_dispatch_p50_ns: q.map(|q| q.p50_ns),
                recorded_wake_to_dispatch_p99_ns: q.map(|q| q.p99_ns),
                replay_wake_latency_p50_ns: lat.map(|l| l.p50),
                replay_wake_latency_p99_ns: lat.map(|l| l.p99),
            }
        })
        .collect()
}

/// [`compare`] as a table.
pub fn comparison_table(policy: &str, rows: &[VcpuComparison]) -> String {
    use std::fmt::Write;
    let opt = |ns: Option<u64>| ns.map_or("-".into(), super::summary::us);
    let mut s = format!(
        "{:<22} {:>9} {:>9} {:>9} {:>7}   {:>21}   {:>21}\n",
        "vCPU",
        "rec sched",
        "rec runs",
        policy,
        "ratio",
        "recorded wake p50/p99",
        "replay wake p50/p99"
    );
    for r in rows {
        let ratio = if r.recorded_run_share > 0.0 {
            format!("{:.3}", r.replay_run_share / r.recorded_run_share)
        } else {
            "-".into()
        };
        let _ = writeln!(
            s,
            "{:<22} {:>8.1}% {:>8.1}% {:>8.1}% {:>7}   {:>10} {:>10}   {:>10} {:>10}",
            r.vcpu,
            100.0 * r.recorded_sched_run_share,
            100.0 * r.recorded_run_share,
            100.0 * r.replay_run_share,
            ratio,
            opt(r.recorded_wake_to_dispatch_p50_ns),
            opt(r.recorded_wake_to_dispatch_p99_ns),
            opt(r.replay_wake_latency_p50_ns),
            opt(r.replay_wake_latency_p99_ns),
        );
    }
    s
}
