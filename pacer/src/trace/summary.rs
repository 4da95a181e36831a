//! `pacer trace summary`: where the time of each path went, the way
//! `perf sched latency` and xenalyze summarise their traces.
//!
//! A *wake path* follows one wake of a halted vCPU from its cause to the
//! guest's handler:
//!
//! ```text
//! cause (timer deadline | IPI sent | device line)
//!   -> notified        the engine hears of it (a timer: the timer thread fired)
//!   -> decision        vcpu_sched's wake placed it (WakeDecision)
//!   -> kick sent       the target CPU kicked (if the decision said so)
//!   -> exit seen       the target's runner left KVM_RUN (a busy target)
//!   -> dispatched      a `schedule` picked it
//!   -> running         its thread took the CPU (after a futex wake or a poll)
//!   -> injected        KVM_INTERRUPT
//!   -> handler (EOI)   the guest's handler wrote EOI
//! ```
//!
//! Paths are grouped by cause and by what the target CPU was doing (idle,
//! running something that is preempted, running something the vCPU
//! queues behind). An *interrupt path* is the same for a vCPU that was
//! running when its interrupt came: notified -> kick sent -> exit seen ->
//! injected -> handler. Each step's row is the time since the previous
//! step the path went through (p50, p99, count).
//!
//! IPI round trips: for two vCPUs that wake each other (ping-pong), the
//! round trip from one IPI to the next of the same sender split into the
//! two one-way paths (IPI -> the receiver's handler) and the two guests'
//! own parts (handler -> the next IPI it sends).

use super::read::TraceFile;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use vcpu_engine::trace::record::{Cause, Event, StopWhy, VcpuRef};

/// p50 / p99 / p99.9 / max / mean of a set of durations, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Quantiles {
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub mean_ns: u64,
}

impl Quantiles {
    /// The quantiles of `v`; None when it is empty (not measured).
    pub fn of_some(v: Vec<u64>) -> Option<Quantiles> {
        (!v.is_empty()).then(|| Quantiles::of(v))
    }

    pub fn of(mut v: Vec<u64>) -> Quantiles {
        if v.is_empty() {
            return Quantiles::default();
        }
        v.sort_unstable();
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Quantiles {
            count: v.len() as u64,
            p50_ns: at(0.50),
            p99_ns: at(0.99),
            p999_ns: at(0.999),
            max_ns: *v.last().unwrap_or(&0),
            mean_ns: (v.iter().map(|&x| u128::from(x)).sum::<u128>() / v.len() as u128) as u64,
        }
    }
}

/// The steps of a path, in order.
pub const STEPS: [&str; 9] = [
    "cause",
    "notified",
    "decision",
    "kick sent",
    "exit seen",
    "dispatched",
    "running",
    "injected",
    "handler (EOI)",
];
/// What each step of a path measures: the time from the step before it
/// (the one the path went through last) to this one. Printed under the
/// summary, so it reads without the README.
pub const STEP_LEGEND: [(&str, &str); 8] = [
    (
        "notified",
        "the cause reached Pacer (a timer: its deadline -> the timer fired)",
    ),
    (
        "decision",
        "-> vcpu_sched's wake decision (which CPU runs the vCPU)",
    ),
    (
        "kick sent",
        "-> the target CPU was kicked (to preempt, or to end its idle wait)",
    ),
    ("exit seen", "-> the kicked CPU's vCPU left the guest"),
    (
        "dispatched",
        "-> schedule() on the target CPU gave it the woken vCPU",
    ),
    (
        "running",
        "-> the vCPU's thread took its CPU (its poll or futex wake ended)",
    ),
    (
        "injected",
        "-> the interrupt was injected, before the guest entry",
    ),
    (
        "handler (EOI)",
        "-> the guest's handler ran and acknowledged it (its EOI exit)",
    ),
];
const NOTIFIED: usize = 1;
const DECISION: usize = 2;
const KICK: usize = 3;
const EXIT: usize = 4;
const DISPATCHED: usize = 5;
const RUNNING: usize = 6;
const INJECTED: usize = 7;
const HANDLER: usize = 8;

/// One path as it was followed: the time of each step it went through.
#[derive(Debug, Clone)]
struct Path {
    class: String,
    vcpu: VcpuRef,
    t: [Option<u64>; 9],
    /// The CPU the decision sent it to (kick and exit are looked for there).
    cpu: Option<u16>,
}

/// One step's row of a path class.
#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    /// "decision" means "notified -> decision", and so on.
    pub step: &'static str,
    pub since_previous: Quantiles,
}

/// Every path of one class.
#[derive(Debug, Clone, Serialize)]
pub struct PathClass {
    pub class: String,
    pub paths: u64,
    /// Paths that reached the guest's handler.
    pub complete: u64,
    pub steps: Vec<StepRow>,
    /// Cause -> handler, over complete paths (null: none reached it).
    pub total: Option<Quantiles>,
}

/// The round trips between two vCPUs that wake each other by IPI.
#[derive(Debug, Clone, Serialize)]
pub struct RoundTrips {
    pub a: String,
    pub b: String,
    /// IPI from a -> b's handler, b's handler -> its IPI back, IPI from
    /// b -> a's handler, a's handler -> a's next IPI.
    pub steps: Vec<(String, Quantiles)>,
    pub round_trip: Quantiles,
    /// Round trips longer than 1 ms, the time they took together, and
    /// that time by step (same order as `steps`).
    pub over_1ms: u64,
    pub over_1ms_total_ns: u64,
    pub over_1ms_by_step_ns: Vec<u64>,
}

/// Per-vCPU totals.
#[derive(Debug, Clone, Serialize)]
pub struct VcpuRow {
    pub vcpu: String,
    pub run_ns: u64,
    /// Run time over the trace's span.
    pub run_share: f64,
    /// The CPU time its thread got in those turns over the span: what
    /// `run_share` would be if the host kernel had given the vCPU's CPU to
    /// no other process meanwhile (null: no turn recorded it).
    pub thread_cpu_share: Option<f64>,
    pub dispatches: u64,
    pub halts: u64,
    pub wakes: u64,
    pub preemptions: u64,
    pub quantum_ends: u64,
    pub yields: u64,
    pub migrations: u64,
    /// Decision -> dispatched, over its wakes (null: it was never woken).
    pub wake_to_dispatch: Option<Quantiles>,
    /// Halt polls after its blocks, those the work ended (no sleep), and
    /// the time they took.
    pub halt_polls: u64,
    pub halt_polls_woken: u64,
    pub halt_poll_ns: u64,
}

/// What `pacer trace summary` prints (and writes as JSON).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// `pacer-trace-summary` (its schema: `schemas/`).
    #[serde(flatten)]
    pub header: vmm::documents::Header,
    pub policy: String,
    pub dispatch: String,
    pub span_ns: u64,
    pub events: u64,
    pub lost: u64,
    pub complete: bool,
    pub wake_paths: Vec<PathClass>,
    pub interrupt_paths: Vec<PathClass>,
    pub round_trips: Vec<RoundTrips>,
    pub vcpus: Vec<VcpuRow>,
}

/// What a CPU runs, as the events say.
#[derive(Default, Clone, Copy)]
struct CpuNow {
    running: Option<VcpuRef>,
}

/// Follow every path through the trace.
fn follow(trace: &TraceFile) -> (Vec<Path>, Vec<Path>) {
    let mut cpus: BTreeMap<u16, CpuNow> = BTreeMap::new();
    let mut running: BTreeMap<VcpuRef, u16> = BTreeMap::new();
    let mut notified: BTreeMap<VcpuRef, (u64, Cause)> = BTreeMap::new();
    let mut open_wakes: BTreeMap<VcpuRef, Path> = BTreeMap::new();
    let mut open_irqs: BTreeMap<VcpuRef, Path> = BTreeMap::new();
    let (mut wakes, mut irqs) = (Vec::new(), Vec::new());
    for e in &trace.events {
        let t = e.t_ns;
        match e.event {
            Event::Notify { vcpu, cause } => {
                notified.insert(vcpu, (t, cause));
                if let Some(&cpu) = running.get(&vcpu) {
                    if let std::collections::btree_map::Entry::Vacant(slot) = open_irqs.entry(vcpu)
                    {
                        let mut p = Path {
                            class: cause.kind().to_string(),
                            vcpu,
                            t: [None; 9],
                            cpu: Some(cpu),
                        };
                        p.t[NOTIFIED] = Some(t);
                        if let Cause::Timer { deadline_ns } = cause {
                            p.t[0] = (deadline_ns > 0 && deadline_ns <= t).then_some(deadline_ns);
                        }
                        slot.insert(p);
                    }
                }
            }
            Event::Wake {
                vcpu,
                cpu: Some(cpu),
                kick,
                ..
            } => {
                if let Some(old) = open_wakes.remove(&vcpu) {
                    wakes.push(old);
                }
                let (cause_t, cause) = match notified.remove(&vcpu) {
                    Some((nt, c)) => (Some(nt), Some(c)),
                    None => (None, None),
                };
                let target = match cpus.get(&cpu).and_then(|c| c.running) {
                    None => "to an idle CPU",
                    Some(_) if kick => "preempting",
                    Some(_) => "queued behind a runner",
                };
                let mut p = Path {
                    class: format!("{}, {target}", cause.map_or("unknown cause", Cause::kind)),
                    vcpu,
                    t: [None; 9],
                    cpu: Some(cpu),
                };
                p.t[NOTIFIED] = cause_t;
                if let Some(Cause::Timer { deadline_ns }) = cause {
                    p.t[0] = (deadline_ns > 0 && deadline_ns <= t).then_some(deadline_ns);
                }
                p.t[DECISION] = Some(t);
                open_wakes.insert(vcpu, p);
            }
            Event::Kick { cpu, .. } => {
                for p in open_wakes.values_mut().chain(open_irqs.values_mut()) {
                    if p.cpu == Some(cpu) && p.t[KICK].is_none() && p.t[DISPATCHED].is_none() {
                        p.t[KICK] = Some(t);
                    }
                }
            }
            Event::ExitSeen { cpu, vcpu } => {
                // The runner a wake's kick preempts leaves KVM_RUN.
                for p in open_wakes.values_mut() {
                    if p.cpu == Some(cpu)
                        && p.vcpu != vcpu
                        && p.t[KICK].is_some()
                        && p.t[EXIT].is_none()
                        && p.t[DISPATCHED].is_none()
                    {
                        p.t[EXIT] = Some(t);
                    }
                }
                if let Some(p) = open_irqs.get_mut(&vcpu) {
                    if p.t[EXIT].is_none() {
                        p.t[EXIT] = Some(t);
                    }
                }
            }
            Event::Dispatch { cpu, vcpu, .. } => {
                cpus.entry(cpu).or_default().running = Some(vcpu);
                running.insert(vcpu, cpu);
                if let Some(p) = open_wakes.get_mut(&vcpu) {
                    if p.t[DISPATCHED].is_none() {
                        p.t[DISPATCHED] = Some(t);
                    }
                }
            }
            Event::Unpark { vcpu, .. } => {
                if let Some(p) = open_wakes.get_mut(&vcpu) {
                    if p.t[DISPATCHED].is_some() && p.t[RUNNING].is_none() {
                        p.t[RUNNING] = Some(t);
                    }
                }
            }
            Event::Inject { vcpu, .. } => {
                for p in [open_wakes.get_mut(&vcpu), open_irqs.get_mut(&vcpu)]
                    .into_iter()
                    .flatten()
                {
                    if p.t[INJECTED].is_none()
                        && (p.t[DISPATCHED].is_some() || p.t[DECISION].is_none())
                    {
                        p.t[INJECTED] = Some(t);
                    }
                }
            }
            Event::Eoi { vcpu, .. } => {
                if let Some(mut p) = open_wakes.remove(&vcpu) {
                    if p.t[INJECTED].is_some() {
                        p.t[HANDLER] = Some(t);
                        wakes.push(p);
                    } else {
                        open_wakes.insert(vcpu, p);
                    }
                }
                if let Some(mut p) = open_irqs.remove(&vcpu) {
                    if p.t[INJECTED].is_some() {
                        p.t[HANDLER] = Some(t);
                        irqs.push(p);
                    } else {
                        open_irqs.insert(vcpu, p);
                    }
                }
            }
            Event::Stop { cpu, vcpu, why, .. } => {
                cpus.entry(cpu).or_default().running = None;
                running.remove(&vcpu);
                if matches!(why, StopWhy::Halted | StopWhy::Exited | StopWhy::WaitSipi) {
                    // What it was woken for is spent or lost.
                    if let Some(p) = open_wakes.remove(&vcpu) {
                        wakes.push(p);
                    }
                    if let Some(p) = open_irqs.remove(&vcpu) {
                        irqs.push(p);
                    }
                }
            }
            Event::Idle { cpu } => {
                cpus.entry(cpu).or_default().running = None;
            }
            _ => {}
        }
    }
    wakes.extend(open_wakes.into_values());
    irqs.extend(open_irqs.into_values());
    // A path dispatched by its own thread runs at once.
    for p in &mut wakes {
        if p.t[RUNNING].is_none() && p.t[INJECTED].is_some() {
            p.t[RUNNING] = p.t[DISPATCHED];
        }
    }
    (wakes, irqs)
}

/// For every wake that kicked its target CPU: decision -> the woken vCPU
/// dispatched (`to_running` false) or running (true), ns: what a kick
/// costs before the vCPU is given the CPU, or before it uses it.
pub fn wake_mechanism_ns(trace: &TraceFile, to_running: bool) -> Vec<u64> {
    follow(trace)
        .0
        .iter()
        .filter(|p| p.t[KICK].is_some())
        .filter_map(|p| {
            let until = if to_running {
                p.t[RUNNING].or(p.t[DISPATCHED])?
            } else {
                p.t[DISPATCHED]?
            };
            Some(until - p.t[DECISION]?)
        })
        .collect()
}

/// Rows per path class, classes in order of count.
fn classes(paths: &[Path]) -> Vec<PathClass> {
    let mut by: BTreeMap<&str, Vec<&Path>> = BTreeMap::new();
    for p in paths {
        by.entry(&p.class).or_default().push(p);
    }
    let mut out: Vec<PathClass> = by
        .into_iter()
        .map(|(class, ps)| {
            let mut steps = Vec::new();
            for (k, &step) in STEPS.iter().enumerate().skip(1) {
                let d: Vec<u64> = ps
                    .iter()
                    .filter_map(|p| {
                        let now = p.t[k]?;
                        let before = p.t[..k].iter().rev().flatten().next()?;
                        Some(now.saturating_sub(*before))
                    })
                    .collect();
                if !d.is_empty() {
                    steps.push(StepRow {
                        step,
                        since_previous: Quantiles::of(d),
                    });
                }
            }
            let complete: Vec<&&Path> = ps.iter().filter(|p| p.t[HANDLER].is_some()).collect();
            let total = Quantiles::of_some(
                complete
                    .iter()
                    .filter_map(|p| {
                        let first = p.t.iter().flatten().next()?;
                        Some(p.t[HANDLER]?.saturating_sub(*first))
                    })
                    .collect(),
            );
            PathClass {
                class: class.to_string(),
                paths: ps.len() as u64,
                complete: complete.len() as u64,
                steps,
                total,
            }
        })
        .collect();
    out.sort_by(|a, b| b.paths.cmp(&a.paths).then(a.class.cmp(&b.class)));
    out
}

/// IPI round trips between every pair of vCPUs that wake each other.
fn round_trips(trace: &TraceFile) -> Vec<RoundTrips> {
    // IPI notifications per (sender, receiver), EOIs per vCPU, in time order.
    let mut ipis: BTreeMap<(VcpuRef, VcpuRef), Vec<u64>> = BTreeMap::new();
    let mut eois: BTreeMap<VcpuRef, Vec<u64>> = BTreeMap::new();
    for e in &trace.events {
        match e.event {
            Event::Notify {
                vcpu,
                cause: Cause::Ipi { from },
            } => {
                let from = VcpuRef {
                    vm: vcpu.vm,
                    vcpu: from,
                };
                if from != vcpu {
                    ipis.entry((from, vcpu)).or_default().push(e.t_ns);
                }
            }
            Event::Eoi { vcpu, .. } => eois.entry(vcpu).or_default().push(e.t_ns),
            _ => {}
        }
    }
    let next = |v: &[u64], after: u64| v.get(v.partition_point(|&x| x <= after)).copied();
    let mut out = Vec::new();
    for (&(a, b), ab) in &ipis {
        if a > b {
            continue;
        }
        let Some(ba) = ipis.get(&(b, a)) else {
            continue;
        };
        let (empty, mut steps) = (
            Vec::new(),
            vec![Vec::new(), Vec::new(), Vec::new(), Vec::new()],
        );
        let eoi_a = eois.get(&a).unwrap_or(&empty);
        let eoi_b = eois.get(&b).unwrap_or(&empty);
        let mut trips = Vec::new();
        let mut slow_by_step = vec![0u64; 4];
        for &t1 in ab {
            let chain = (|| {
                let t2 = next(eoi_b, t1)?;
                let t3 = next(ba, t2)?;
                let t4 = next(eoi_a, t3)?;
                let t5 = next(ab, t4)?;
                Some([t1, t2, t3, t4, t5])
            })();
            let Some(c) = chain else { continue };
            let slow = c[4] - c[0] > 1_000_000;
            for k in 0..4 {
                steps[k].push(c[k + 1] - c[k]);
                if slow {
                    // A damaged or forged trace's times can sum past u64.
                    slow_by_step[k] = slow_by_step[k].saturating_add(c[k + 1] - c[k]);
                }
            }
            trips.push(c[4] - c[0]);
        }
        if trips.is_empty() {
            continue;
        }
        let (an, bn) = (trace.vcpu_name(a), trace.vcpu_name(b));
        let names = [
            format!("IPI {an} -> {bn}'s handler"),
            format!("{bn}'s handler -> its IPI back (guest)"),
            format!("IPI {bn} -> {an}'s handler"),
            format!("{an}'s handler -> its next IPI (guest)"),
        ];
        let slow: Vec<u64> = trips.iter().copied().filter(|&d| d > 1_000_000).collect();
        out.push(RoundTrips {
            a: an,
            b: bn,
            steps: names
                .into_iter()
                .zip(steps.into_iter().map(Quantiles::of))
                .collect(),
            over_1ms: slow.len() as u64,
            over_1ms_total_ns: slow.iter().fold(0u64, |a, &d| a.saturating_add(d)),
            over_1ms_by_step_ns: slow_by_step,
            round_trip: Quantiles::of(trips),
        });
    }
    out
}

/// Per-vCPU totals from the dispatch and stop events.
fn vcpu_rows(trace: &TraceFile, wakes: &[Path]) -> Vec<VcpuRow> {
    #[derive(Default)]
    struct Acc {
        since: Option<u64>,
        run: u64,
        cpu0: Option<u64>,
        cpu: u64,
        cpu_seen: bool,
        dispatches: u64,
        halts: u64,
        wakes: u64,
        preemptions: u64,
        quantum_ends: u64,
        yields: u64,
        migrations: u64,
        polls: u64,
        polls_woken: u64,
        poll_ns: u64,
    }
    let mut acc: BTreeMap<VcpuRef, Acc> = BTreeMap::new();
    let (first, last) = trace.span();
    for e in &trace.events {
        match e.event {
            Event::Dispatch { vcpu, .. } => {
                let a = acc.entry(vcpu).or_default();
                a.dispatches += 1;
                a.since.get_or_insert(e.t_ns);
            }
            Event::Unpark {
                vcpu,
                thread_cpu_ns,
                ..
            } => acc.entry(vcpu).or_default().cpu0 = Some(thread_cpu_ns),
            Event::Stop {
                vcpu,
                why,
                thread_cpu_ns,
                ..
            } => {
                let a = acc.entry(vcpu).or_default();
                if let Some(s) = a.since.take() {
                    a.run += e.t_ns.saturating_sub(s);
                }
                if let Some(c0) = a.cpu0.take() {
                    a.cpu += thread_cpu_ns.saturating_sub(c0);
                    a.cpu_seen = true;
                }
                match why {
                    StopWhy::Halted => a.halts += 1,
                    StopWhy::Preempted => a.preemptions += 1,
                    StopWhy::Quantum => a.quantum_ends += 1,
                    StopWhy::Yielded => a.yields += 1,
                    _ => {}
                }
            }
            Event::Wake {
                vcpu, cpu: Some(_), ..
            } => acc.entry(vcpu).or_default().wakes += 1,
            Event::Migrate { vcpu, .. } => acc.entry(vcpu).or_default().migrations += 1,
            Event::HaltPoll {
                vcpu,
                polled_ns,
                woken,
                ..
            } => {
                let a = acc.entry(vcpu).or_default();
                a.polls += 1;
                a.polls_woken += u64::from(woken);
                a.poll_ns = a.poll_ns.saturating_add(polled_ns);
            }
            _ => {}
        }
    }
    let span = last.saturating_sub(first).max(1);
    acc.into_iter()
        .map(|(v, mut a)| {
            if let Some(s) = a.since.take() {
                a.run += last.saturating_sub(s);
            }
            VcpuRow {
                vcpu: trace.vcpu_name(v),
                run_ns: a.run,
                run_share: a.run as f64 / span as f64,
                thread_cpu_share: a.cpu_seen.then(|| a.cpu as f64 / span as f64),
                dispatches: a.dispatches,
                halts: a.halts,
                wakes: a.wakes,
                preemptions: a.preemptions,
                quantum_ends: a.quantum_ends,
                yields: a.yields,
                migrations: a.migrations,
                wake_to_dispatch: Quantiles::of_some(
                    wakes
                        .iter()
                        .filter(|p| p.vcpu == v)
                        .filter_map(|p| Some(p.t[DISPATCHED]? - p.t[DECISION]?))
                        .collect(),
                ),
                halt_polls: a.polls,
                halt_polls_woken: a.polls_woken,
                halt_poll_ns: a.poll_ns,
            }
        })
        .collect()
}

/// The steps' legend: each step is the time since the previous step the
/// path went through.
pub fn legend() -> String {
    let mut s = String::from(
        "\nSteps (each the time since the step before it that the path went through):\n",
    );
    for (step, what) in STEP_LEGEND {
        let _ = writeln!(s, "    {step:<16} {what}");
    }
    s
}

/// A duration for a table.
pub fn us(ns: u64) -> String {
    if ns >= 10_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} us", ns as f64 / 1e3)
    }
}

impl Summary {
    pub fn of(trace: &TraceFile) -> Summary {
        let (wakes, irqs) = follow(trace);
        let (first, last) = trace.span();
        Summary {
            header: vmm::documents::Header::new(vmm::documents::TRACE_SUMMARY),
            policy: trace.run.policy.clone(),
            dispatch: trace.run.dispatch.clone(),
            span_ns: last - first,
            events: trace.events.len() as u64,
            lost: trace.lost,
            complete: trace.complete,
            vcpus: vcpu_rows(trace, &wakes),
            wake_paths: classes(&wakes),
            interrupt_paths: classes(&irqs),
            round_trips: round_trips(trace),
        }
    }

    pub fn to_json_text(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    pub fn to_text(&self, trace: &TraceFile) -> String {
        let mut s = String::new();
        let _ =
            writeln!(
            s,
            "trace of {} ({} policy, {} dispatch, {} CPUs, {} VMs): {} events over {}, {} lost{}",
            trace.run.config.as_deref().unwrap_or("a run"),
            self.policy,
            self.dispatch,
            trace.run.topology.cpus.len(),
            trace.vms.len(),
            self.events,
            us(self.span_ns),
            self.lost,
            if self.complete { "" } else { " (incomplete: the recording did not finish)" }
        );
        let table = |s: &mut String, title: &str, classes: &[PathClass]| {
            if classes.is_empty() {
                return;
            }
            let _ = writeln!(s, "\n{title}");
            for c in classes {
                let _ = writeln!(
                    s,
                    "  {} ({} paths, {} reached the handler)",
                    c.class, c.paths, c.complete
                );
                let _ = writeln!(
                    s,
                    "    {:<28} {:>10} {:>10} {:>7}",
                    "step (since the previous)", "p50", "p99", "n"
                );
                for r in &c.steps {
                    let label = if r.step == "notified" {
                        "notified (timer: deadline ->)"
                    } else {
                        r.step
                    };
                    let q = r.since_previous;
                    let _ = writeln!(
                        s,
                        "    {:<28} {:>10} {:>10} {:>7}",
                        label,
                        us(q.p50_ns),
                        us(q.p99_ns),
                        q.count
                    );
                }
                if let Some(total) = c.total {
                    let _ = writeln!(
                        s,
                        "    {:<28} {:>10} {:>10} {:>7}",
                        "total, to the handler",
                        us(total.p50_ns),
                        us(total.p99_ns),
                        total.count
                    );
                }
            }
        };
        table(
            &mut s,
            "Wakes of halted vCPUs, by cause and target CPU:",
            &self.wake_paths,
        );
        table(
            &mut s,
            "Interrupts for running vCPUs:",
            &self.interrupt_paths,
        );
        if !(self.wake_paths.is_empty() && self.interrupt_paths.is_empty()) {
            s.push_str(&legend());
        }
        for r in &self.round_trips {
            let _ = writeln!(
                s,
                "\nIPI round trips {} <-> {} ({}):",
                r.a, r.b, r.round_trip.count
            );
            let _ = writeln!(
                s,
                "    {:<48} {:>10} {:>10} {:>10}",
                "step", "p50", "p99", "mean"
            );
            for (name, q) in &r.steps {
                let _ = writeln!(
                    s,
                    "    {:<48} {:>10} {:>10} {:>10}",
                    name,
                    us(q.p50_ns),
                    us(q.p99_ns),
                    us(q.mean_ns)
                );
            }
            let q = r.round_trip;
            let _ = writeln!(
                s,
                "    {:<48} {:>10} {:>10} {:>10}",
                "round trip",
                us(q.p50_ns),
                us(q.p99_ns),
                us(q.mean_ns)
            );
            let _ = writeln!(
                s,
                "    {} round trips over 1 ms took {} together ({:.0} % of the round trips' time)",
                r.over_1ms,
                us(r.over_1ms_total_ns),
                100.0 * r.over_1ms_total_ns as f64 / (q.mean_ns as f64 * q.count as f64).max(1.0)
            );
            if r.over_1ms > 0 {
                let parts: Vec<String> = r
                    .steps
                    .iter()
                    .zip(&r.over_1ms_by_step_ns)
                    .map(|((name, _), &ns)| {
                        format!(
                            "{:.0} % {name}",
                            100.0 * ns as f64 / r.over_1ms_total_ns.max(1) as f64
                        )
                    })
                    .collect();
                let _ = writeln!(s, "    of which: {}", parts.join(", "));
            }
        }
        let _ = writeln!(
            s,
            "\nPer vCPU: run% = dispatch -> stop over the span (the scheduler's view); cpu% = the CPU\n\
             time its thread got in those turns (lower when the host gave that CPU to other processes)."
        );
        let _ = writeln!(
            s,
            "  {:<20} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>12}",
            "vCPU",
            "run%",
            "cpu%",
            "disp",
            "halts",
            "wakes",
            "preem",
            "qend",
            "yield",
            "migr",
            "wake->disp p99"
        );
        for v in &self.vcpus {
            let _ = writeln!(
                s,
                "  {:<20} {:>6.1} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>12}",
                v.vcpu,
                100.0 * v.run_share,
                v.thread_cpu_share
                    .map_or("-".into(), |c| format!("{:.1}", 100.0 * c)),
                v.dispatches,
                v.halts,
                v.wakes,
                v.preemptions,
                v.quantum_ends,
                v.yields,
                v.migrations,
                v.wake_to_dispatch.map_or("-".into(), |q| us(q.p99_ns))
            );
        }
        if self.vcpus.iter().any(|v| v.halt_polls > 0) {
            let _ = writeln!(
                s,
                "\nHalt polling (an idle CPU's thread polls before it sleeps; found: the work came within the poll):"
            );
            for v in self.vcpus.iter().filter(|v| v.halt_polls > 0) {
                let _ = writeln!(
                    s,
                    "  {:<20} {} polls, {} found their work ({:.0} %), {} polling ({:.1} % of the span)",
                    v.vcpu,
                    v.halt_polls,
                    v.halt_polls_woken,
                    100.0 * v.halt_polls_woken as f64 / v.halt_polls as f64,
                    us(v.halt_poll_ns),
                    100.0 * v.halt_poll_ns as f64 / self.span_ns.max(1) as f64
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::Quantiles;

    #[test]
    fn quantiles_carry_the_tail_beyond_p99() {
        let q = Quantiles::of((1..=1000).rev().collect());
        assert_eq!(
            (q.count, q.p50_ns, q.p99_ns, q.p999_ns, q.max_ns, q.mean_ns),
            (1000, 501, 990, 999, 1000, 500)
        );
        assert_eq!(Quantiles::of_some(Vec::new()), None);
    }
}
