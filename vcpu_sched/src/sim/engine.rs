//! The engine: moves the model (`model.rs`) from event to event
//! (`events.rs`) and plays the VMM towards the scheduler.
//!
//! Each simulated CPU runs the entity it was dispatched until the earlier of
//! its quantum timer and the end of the current burst phase. Burst end ->
//! `StopReason::Blocked` (or `Yielded`), quantum timer -> `QuantumEnd`, a
//! kick -> `Preempted` (or `Idle` on an idle CPU). A sleeping entity is
//! woken with `wake` at the end of its sleep (or by a message, with
//! `wake_by` naming the sender); a kicking [`crate::WakeDecision`] becomes
//! a kick event at the target CPU after the workload's kick latency, and
//! so does every CPU in `Dispatch::kicks`. The remaining burst survives
//! preemptions. Every answer of the scheduler goes through a
//! [`Monitor`], whose counts are the report's violations.
//!
//! All randomness comes from one ChaCha8 stream, so a seed fixes the run.

use super::change::Change;
use super::dist::{rng_from_seed, SimRng};
use super::events::{EvKind, EventQueue};
use super::model::{Barrier, Cpu, Ent, Group, Lock, Model, Phase, Shootdown, State, NONE};
use super::report::SimReport;
use super::server::Server;
use super::workload::{SimDispatch, SimError, Workload};
use crate::monitor::Monitor;
use crate::{build, CpuId, Dispatch, Nanos, StopReason, Topology, VcpuScheduler};

/// A simulation ready to run: a workload and the scheduler it drives.
pub struct Simulator {
    workload: Workload,
    sched: Box<dyn VcpuScheduler>,
    trace: u64,
    /// Recorded vCPUs' scripts instead of the distributions (`replay.rs`).
    pub(super) replay: Option<super::replay::Scripts>,
}

impl Simulator {
    /// Build the topology from the workload's spec and the scheduler from
    /// its `sched` configuration (through [`crate::build`]).
    pub fn new(workload: Workload) -> Result<Simulator, SimError> {
        workload.validate()?;
        let topo = Topology::from_spec(&workload.topology)?;
        let sched = build(topo, workload.sched_config())?;
        Ok(Simulator {
            workload,
            sched,
            trace: 0,
            replay: None,
        })
    }

    /// Print the first `lines` scheduler calls and their answers to stderr
    /// (a debugging aid; 0 = off).
    pub fn with_trace(mut self, lines: u64) -> Simulator {
        self.trace = lines;
        self
    }

    /// Drive an already built scheduler (its topology replaces the
    /// workload's spec string).
    pub fn with_scheduler(
        workload: Workload,
        sched: Box<dyn VcpuScheduler>,
    ) -> Result<Simulator, SimError> {
        workload.validate()?;
        Ok(Simulator {
            workload,
            sched,
            trace: 0,
            replay: None,
        })
    }

    /// Run to the end of the simulated duration and collect the report.
    pub fn run(self) -> Result<SimReport, SimError> {
        let mut e = Engine::setup(self.workload, self.sched)?;
        e.trace = self.trace;
        e.replay = self.replay;
        let t0 = std::time::Instant::now();
        e.run()?;
        let wall = t0.elapsed().as_nanos() as u64;
        Ok(e.report(wall))
    }
}

/// Convenience: build and run a workload.
pub fn run(workload: &Workload) -> Result<SimReport, SimError> {
    Simulator::new(workload.clone())?.run()
}

/// The running simulation (the model, the clock, the scheduler, the monitor).
pub(super) struct Engine {
    pub w: Workload,
    pub sched: Box<dyn VcpuScheduler>,
    pub topo: Topology,
    pub rng: SimRng,
    events_q: EventQueue,
    pub now: Nanos,
    pub end: Nanos,
    pub warmup: Nanos,
    pub(super) kick_latency: Nanos,
    pub groups: Vec<Group>,
    pub ents: Vec<Ent>,
    pub ent_of: Vec<u32>,
    pub cpus: Vec<Cpu>,
    pub core_cpus: Vec<Vec<u32>>,
    pub locks: Vec<Lock>,
    pub barriers: Vec<Barrier>,
    pub shootdowns: Vec<Shootdown>,
    pub(super) servers: Vec<Server>,
    /// Window run time per (entity, CPU), row-major by entity.
    pub cpu_time: Vec<Nanos>,
    pub monitor: Monitor,
    pub events: u64,
    pub sched_calls: u64,
    trace: u64,
    pub(super) replay: Option<super::replay::Scripts>,
    /// The policy's co-scheduling counters per CPU when the measured
    /// window opened (`collect.rs`), and whether it has.
    pub cosched_base: Vec<CoschedCounts>,
    window_open: bool,
    /// The agent's look period under `ranked` (`ranked.rs`); 0: every
    /// wake goes through the policy.
    pub(super) look_ns: Nanos,
    /// Real-time threads (vCPUs the hypervisor woke) waiting for a CPU,
    /// in the order they came.
    pub(super) rt_waiting: Vec<u32>,
    /// Per VM, the spin watch's looks into a turn in a row that found no
    /// spin (`spin_watch.rs`, the backoff).
    pub(super) look_misses: Vec<u32>,
    /// Per VM, its sibling sharing under `ranked` (`sibling_share.rs`).
    pub(super) vm_share: Vec<super::model::VmShare>,
    /// The host kernel's tick (`sibling_share.rs`).
    pub(super) host_tick: Nanos,
}

impl Engine {
    fn setup(w: Workload, sched: Box<dyn VcpuScheduler>) -> Result<Engine, SimError> {
        let topo = sched.topology().clone();
        let ncpu = topo.num_cpus();
        if ncpu == 0 {
            return Err(SimError::Invalid("topology has no CPUs".into()));
        }
        let mut monitor = Monitor::new(
            &topo,
            w.sched.smt_isolation,
            w.sched.mode == crate::Mode::LowLatency,
        );
        let m = Model::build(&w, &topo, sched.as_ref(), |spec, id| {
            monitor.add(id, spec.vm, spec.affinity.clone())
        })?;
        let n = m.ents.len();
        let look_ns = match w.dispatch {
            SimDispatch::Ranked if sched.name() != crate::PolicyKind::Eevdf.as_str() => {
                ((w.agent_look_us * 1000.0).round() as Nanos).max(1)
            }
            _ => 0,
        };
        let host_tick = ((w.host_tick_us * 1000.0).round() as Nanos).max(1);
        let mut engine = Engine {
            rng: rng_from_seed(w.seed),
            end: w.duration_ms * 1_000_000,
            warmup: w.warmup_ms * 1_000_000,
            kick_latency: (w.kick_latency_us * 1000.0).round() as Nanos,
            w,
            sched,
            topo,
            events_q: EventQueue::with_capacity(4 * (n + ncpu) + 16),
            now: 0,
            groups: m.groups,
            ents: m.ents,
            ent_of: m.ent_of,
            cpus: m.cpus,
            core_cpus: m.core_cpus,
            locks: m.locks,
            barriers: m.barriers,
            shootdowns: m.shootdowns,
            servers: m.servers,
            cpu_time: vec![0; n * ncpu],
            monitor,
            events: 0,
            sched_calls: 0,
            trace: 0,
            replay: None,
            cosched_base: vec![Default::default(); ncpu],
            window_open: false,
            look_ns,
            rt_waiting: Vec::new(),
            look_misses: Vec::new(),
            vm_share: Vec::new(),
            host_tick,
        };
        engine.vm_share = engine.sharing_from_workload();
        Ok(engine)
    }

    pub(super) fn push(&mut self, time: Nanos, kind: EvKind, idx: u32, gen: u32) {
        self.events_q.push(time, kind, idx, gen);
    }

    /// Part of [a, b) inside the measured window.
    pub(super) fn win(&self, a: Nanos, b: Nanos) -> Nanos {
        b.saturating_sub(a.max(self.warmup))
    }

    pub(super) fn in_window(&self, t: Nanos) -> bool {
        t >= self.warmup
    }

    fn run(&mut self) -> Result<(), SimError> {
        // A window from the start counts everything (no base to take).
        self.window_open = self.warmup == 0;
        for c in 0..self.cpus.len() {
            self.do_schedule(c, 0, StopReason::Idle)?;
        }
        for e in 0..self.ents.len() {
            let g = self.ents[e].group as usize;
            if self.w.groups[g].start_awake && !self.is_server_member(e) {
                self.policy_wake(e, 0, None)?;
            }
        }
        self.start_servers();
        self.start_agent();
        self.start_kernel_ticks();
        for (i, c) in self.w.changes.iter().enumerate() {
            let at = c.at_us.saturating_mul(1000);
            self.events_q.push(at, EvKind::Change, i as u32, 0);
        }
        while let Some(ev) = self.events_q.pop() {
            if ev.time > self.end {
                break;
            }
            if !self.window_open && ev.time >= self.warmup {
                self.window_open = true;
                self.cosched_base = self.cosched_counts(self.warmup);
            }
            self.now = ev.time;
            let now = ev.time;
            match ev.kind {
                EvKind::CpuTimer => {
                    if self.cpus[ev.idx as usize].timer_gen == ev.gen {
                        self.events += 1;
                        self.on_timer(ev.idx as usize, now)?;
                    }
                }
                EvKind::Kick => {
                    self.events += 1;
                    self.on_kick(ev.idx as usize, now)?;
                }
                EvKind::SleepEnd => {
                    let e = ev.idx as usize;
                    if self.ents[e].sleep_gen == ev.gen && self.ents[e].state == State::Blocked {
                        self.events += 1;
                        self.wake(e, now, None)?;
                    }
                }
                EvKind::Change => {
                    self.events += 1;
                    self.on_change(ev.idx as usize, now)?;
                }
                EvKind::Arrival => {
                    self.events += 1;
                    self.on_arrival(ev.idx as usize, now)?;
                }
                EvKind::AgentLook => {
                    self.events += 1;
                    self.on_agent_look(now)?;
                }
                EvKind::KernelTick => {
                    self.events += 1;
                    self.on_kernel_tick(now)?;
                }
                EvKind::TurnLook => {
                    if self.turn_look_current(ev.idx as usize, ev.gen) {
                        self.events += 1;
                        self.on_turn_look(ev.idx as usize, now)?;
                    }
                }
                EvKind::Look => {
                    if self.ents[ev.idx as usize].look_gen == ev.gen {
                        self.events += 1;
                        self.on_look(ev.idx as usize, now)?;
                    }
                }
            }
        }
        if !self.window_open {
            // No event fell in the window: everything counted so far
            // came before it.
            self.window_open = true;
            self.cosched_base = self.cosched_counts(self.now);
        }
        // Close the books at the end of the simulated time.
        let end = self.end;
        self.now = end;
        for c in 0..self.cpus.len() {
            self.account(c, end);
            if let Some(t0) = self.cpus[c].foreign_since.take() {
                let w = self.win(t0, end);
                self.cpus[c].smt_foreign += w;
            }
        }
        for e in 0..self.ents.len() {
            if self.ents[e].state == State::Ready {
                let w = self.win(self.ents[e].ready_since, end);
                self.ents[e].ready_wait += w;
            }
        }
        Ok(())
    }

    fn on_timer(&mut self, c: usize, now: Nanos) -> Result<(), SimError> {
        self.account(c, now);
        let Some(e) = self.cpus[c].current else {
            // An idle CPU's recheck (`Dispatch::recheck_at`).
            return self.do_schedule(c, now, StopReason::Idle);
        };
        let e = e as usize;
        let mut stop = None;
        loop {
            let ent = &self.ents[e];
            match ent.phase {
                Phase::WakeCost if ent.cost_left == 0 => {
                    self.ents[e].phase = Phase::Work;
                    continue;
                }
                Phase::BlockCost if ent.cost_left == 0 => {
                    stop = self.finish_burst(e, now)?;
                }
                Phase::Work if ent.work_left == 0 => {
                    if ent.lock != NONE {
                        let l = ent.lock as usize;
                        if self.locks[l].holder == NONE {
                            self.locks[l].holder = e as u32;
                            self.ents[e].phase = Phase::Crit;
                            continue;
                        }
                        self.ents[e].phase = Phase::WaitLock;
                        self.locks[l].spinners.push(e as u32);
                    } else {
                        stop = self.work_end(e, now)?;
                    }
                }
                Phase::Crit if ent.crit_left == 0 => {
                    self.release(ent.lock as usize, e, now);
                    stop = self.work_end(e, now)?;
                }
                _ => {}
            }
            break;
        }
        if let Some(reason @ (StopReason::Blocked | StopReason::Yielded)) = stop {
            // A sibling sharing the CPU stops on its own, not the runner.
            if self.sharer_stopped(c, e, reason, now)? {
                return Ok(());
            }
        }
        if stop.is_none() && now >= self.cpus[c].quantum_end {
            stop = Some(StopReason::QuantumEnd);
        }
        match stop {
            Some(reason) => self.do_schedule(c, now, reason),
            None => {
                self.arm(c, now);
                Ok(())
            }
        }
    }

    fn on_kick(&mut self, c: usize, now: Nanos) -> Result<(), SimError> {
        self.cpus[c].kick_pending = false;
        if self.in_window(now) {
            self.cpus[c].kicks += 1;
        }
        self.account(c, now);
        let prev = self.cpus[c].current;
        let reason = if prev.is_some() {
            StopReason::Preempted
        } else {
            StopReason::Idle
        };
        self.do_schedule(c, now, reason)?;
        if self.cpus[c].current == prev && self.in_window(now) {
            self.cpus[c].kicks_wasted += 1;
        }
        Ok(())
    }

    /// Make the workload's change `i` through the scheduler's runtime API,
    /// tell the monitor, and deliver the kicks it asks for.
    fn on_change(&mut self, i: usize, now: Nanos) -> Result<(), SimError> {
        let spec = self.w.changes[i].clone();
        let members = |g: &str| {
            let gi = self.w.groups.iter().position(|x| x.name == g);
            (0..self.ents.len())
                .filter(|e| Some(self.ents[*e].group as usize) == gi)
                .collect::<Vec<usize>>()
        };
        let mut kicks = Vec::new();
        match spec.kind()? {
            Change::CpuEnabled { cpu, enabled } => {
                if cpu as usize >= self.cpus.len() {
                    return Err(SimError::Invalid(format!(
                        "change at {} us: CPU {cpu} is not in the topology",
                        spec.at_us
                    )));
                }
                kicks = self.sched.set_cpu_enabled(CpuId(cpu), enabled, now)?;
                self.monitor.set_cpu_enabled(CpuId(cpu), enabled);
            }
            Change::Mode(mode) => {
                kicks = self.sched.set_mode(mode, now);
                self.monitor
                    .set_low_latency(mode == crate::Mode::LowLatency);
            }
            Change::Affinity { group, affinity } => {
                let effective = affinity.intersection(&self.topo.all_cpus());
                for e in members(group) {
                    let id = self.ents[e].id;
                    kicks.extend(self.sched.set_affinity(id, affinity.clone(), now)?);
                    self.monitor.set_affinity(id, effective.clone());
                }
            }
            Change::Class {
                group,
                class,
                priority,
            } => {
                for e in members(group) {
                    kicks.extend(
                        self.sched
                            .set_class(self.ents[e].id, class, priority, now)?,
                    );
                }
            }
            Change::Priority { group, priority } => {
                for e in members(group) {
                    kicks.extend(self.sched.set_priority(self.ents[e].id, priority, now)?);
                }
            }
        }
        if self.trace > 0 {
            eprintln!("{now:>12} change {i}: {spec:?} -> kicks {kicks:?}");
        }
        for k in kicks {
            let c = k.0 as usize;
            if c >= self.cpus.len() {
                return Err(SimError::Sched(crate::SchedError::UnknownCpu(k)));
            }
            self.monitor.kick_sent(k);
            self.send_kick(c, now);
        }
        Ok(())
    }

    /// Send a kick to CPU `c` unless one is on its way.
    fn send_kick(&mut self, c: usize, now: Nanos) {
        if !self.cpus[c].kick_pending {
            self.cpus[c].kick_pending = true;
            self.push(now + self.kick_latency, EvKind::Kick, c as u32, 0);
        }
    }

    /// Print what the monitor found in the last call (trace mode).
    fn trace_violations(&self, before: u64, what: &str) {
        if self.trace > 0 && self.monitor.violations().total() != before {
            eprintln!(
                "{:>12} VIOLATION after {what}: {:?}",
                self.now,
                self.monitor.violations()
            );
        }
    }

    /// Wake vCPU `e` (a sleep ended, or vCPU `by` sent it a message):
    /// through the policy, or under `ranked` by the hypervisor itself.
    pub(super) fn wake(&mut self, e: usize, now: Nanos, by: Option<usize>) -> Result<(), SimError> {
        if self.woke_queued(e, now) {
            return Ok(());
        }
        if self.hypervisor_wakes() {
            return self.hypervisor_wake(e, now);
        }
        self.policy_wake(e, now, by)
    }

    /// Wake vCPU `e` through the policy's `wake` (`wake_by` when vCPU
    /// `by` sent it a message).
    fn policy_wake(&mut self, e: usize, now: Nanos, by: Option<usize>) -> Result<(), SimError> {
        let ent = &mut self.ents[e];
        ent.sleep_gen = ent.sleep_gen.wrapping_add(1);
        ent.woke = true;
        let id = ent.id;
        self.sched_calls += 1;
        let decision = match by {
            Some(w) => self.sched.wake_by(id, self.ents[w].id, now)?,
            None => self.sched.wake(id, now)?,
        };
        self.wake_decided(e, decision, now)
    }

    /// Carry out the policy's answer to the wake of `e`.
    pub(super) fn wake_decided(
        &mut self,
        e: usize,
        decision: Option<crate::WakeDecision>,
        now: Nanos,
    ) -> Result<(), SimError> {
        let id = self.ents[e].id;
        if self.trace > 0 {
            self.trace -= 1;
            eprintln!("{:>12} wake  vcpu {e:<4} -> {decision:?}", now);
        }
        let before = self.monitor.violations().total();
        self.monitor.woke(id, decision);
        self.trace_violations(before, &format!("wake of vcpu {e}"));
        let Some(d) = decision else {
            return Ok(());
        };
        let c = d.cpu.0 as usize;
        if c >= self.cpus.len() {
            return Err(SimError::Sched(crate::SchedError::UnknownCpu(d.cpu)));
        }
        self.ready_add(e, now);
        let ent = &mut self.ents[e];
        ent.wake_at = now;
        ent.latency_pending = true;
        if d.kick {
            self.send_kick(c, now);
        }
        if let Some(cut) = d.shorten_quantum {
            self.cut_quantum(c, cut, now);
        }
        Ok(())
    }

    /// Bring CPU `c`'s quantum timer forward as the wake's decision asks,
    /// if it still runs the turn the cut names (the timer is re-armed at
    /// once: a VMM re-arms the runner's timer from the waker's thread).
    fn cut_quantum(&mut self, c: usize, cut: crate::QuantumCut, now: Nanos) {
        // The runner's turn, unless a real-time thread holds the CPU.
        let same_turn = self.cpus[c]
            .current
            .is_some_and(|e| !self.ents[e as usize].rt)
            && self.cpus[c]
                .runner
                .is_some_and(|e| self.ents[e as usize].id == cut.runner)
            && self.cpus[c].dispatched_at == cut.dispatched_at;
        if !same_turn || cut.end >= self.cpus[c].quantum_end {
            return;
        }
        if self.in_window(now) {
            self.cpus[c].quantum_cuts += 1;
        }
        self.account(c, now);
        self.cpus[c].quantum_end = cut.end;
        self.arm(c, now);
    }

    pub(super) fn do_schedule(
        &mut self,
        c: usize,
        now: Nanos,
        reason: StopReason,
    ) -> Result<(), SimError> {
        let prev = self.cpus[c].current;
        if let Some(p) = prev.filter(|&p| self.ents[p as usize].rt) {
            return self.rt_stopped(c, p as usize, now, reason);
        }
        self.turn_ends(c, reason, now);
        if let Some(p) = prev {
            if reason != StopReason::Blocked {
                self.ready_add(p as usize, now);
            }
            self.watch_stop(p as usize, reason, now);
        }
        self.cpus[c].current = None;
        if let (Some(p), StopReason::Blocked) = (prev, reason) {
            let vm = self.ents[p as usize].vm;
            self.vm_halted(vm, now)?;
        }
        self.sched_calls += 1;
        if self.in_window(now) {
            self.cpus[c].sched_calls += 1;
        }
        let mut d = self.sched.schedule(CpuId(c as u32), now, reason)?;
        if self.trace > 0 {
            self.trace -= 1;
            let prev_v = prev.map_or(-1, |p| p as i64);
            let next_v = d
                .entity
                .and_then(|id| self.ent_of.get(id.index() as usize))
                .map_or(-1, |&i| i as i64);
            eprintln!(
                "{now:>12} sched cpu {c:<3} prev {prev_v:<4} {reason:?} -> vcpu {next_v} quantum {}",
                d.quantum
            );
        }
        let before = self.monitor.violations().total();
        let run = self.monitor.scheduled(CpuId(c as u32), reason, &d);
        self.trace_violations(before, &format!("schedule on cpu {c}"));
        // Kicks the policy asks for on behalf of entities left waiting.
        for k in std::mem::take(&mut d.kicks) {
            let k = k.0 as usize;
            if k >= self.cpus.len() {
                return Err(SimError::Sched(crate::SchedError::UnknownCpu(CpuId(
                    k as u32,
                ))));
            }
            if self.trace > 0 {
                eprintln!("{now:>12} kick  cpu {k} requested by schedule on cpu {c}");
            }
            self.send_kick(k, now);
        }
        d.entity = run;
        self.apply(c, prev, d, now)?;
        self.update_corun(c, now);
        self.place_beside(now);
        Ok(())
    }

    fn apply(
        &mut self,
        c: usize,
        prev: Option<u32>,
        d: Dispatch,
        now: Nanos,
    ) -> Result<(), SimError> {
        let next = match d.entity {
            None => None,
            Some(id) => match self.ent_of.get(id.index() as usize) {
                Some(&i) if i != NONE && self.ents[i as usize].id == id => Some(i),
                _ => return Err(SimError::Sched(crate::SchedError::UnknownEntity(id))),
            },
        };
        if next != prev && self.in_window(now) {
            self.cpus[c].ctx += 1;
        }
        self.cpus[c].timer_gen = self.cpus[c].timer_gen.wrapping_add(1);
        let Some(e) = next else {
            self.cpus[c].current = None;
            self.cpus[c].runner = None;
            if let Some(t) = d.recheck_at {
                // The policy asks to be called again then (a cap or
                // reservation renewal): the CPU's timer, as a VMM arms it.
                let gen = self.cpus[c].timer_gen;
                self.push(t.max(now), EvKind::CpuTimer, c as u32, gen);
            }
            return Ok(());
        };
        let e = e as usize;
        self.take_from_share(e, now)?;
        self.cpus[c].runner = Some(e as u32);
        if self.dispatched_halted(e) {
            // It halted while it shared: the policy hears of it now.
            self.cpus[c].current = Some(e as u32);
            return self.do_schedule(c, now, StopReason::Blocked);
        }
        // A zero quantum (counted by the monitor) runs as 1 us.
        let q = if d.quantum == 0 { 1000 } else { d.quantum };
        self.run_on(c, e, now.saturating_add(q), now)?;
        self.watch_dispatch(e, now);
        Ok(())
    }

    /// Run `e` on CPU `c` from `now` until `quantum_end` (or its burst
    /// phase's end): the CPU's and the vCPU's books, a burst begun, the
    /// lock, barrier and shootdown it finds, the CPU's timer.
    pub(super) fn run_on(
        &mut self,
        c: usize,
        e: usize,
        quantum_end: Nanos,
        now: Nanos,
    ) -> Result<(), SimError> {
        if self.ents[e].state == State::Ready {
            let w = self.win(self.ents[e].ready_since, now);
            self.ents[e].ready_wait += w;
        }
        let in_win = self.in_window(now);
        let ent = &mut self.ents[e];
        if ent.latency_pending {
            ent.latency_pending = false;
            if ent.wake_at >= self.warmup {
                ent.latencies.push(now - ent.wake_at);
            }
        }
        if ent.last_cpu != c as u32 && ent.last_cpu != NONE && in_win {
            ent.migrations += 1;
        }
        ent.last_cpu = c as u32;
        ent.state = State::Running(c as u32);
        let cpu = &mut self.cpus[c];
        cpu.current = Some(e as u32);
        cpu.since = now;
        cpu.dispatched_at = now;
        cpu.quantum_end = quantum_end;
        if self.look_at_resume(c, e, now)? {
            // It gave the CPU away at once, before its guest ran.
            return Ok(());
        }
        if self.ents[e].phase == Phase::Fresh {
            self.start_burst(e);
        }
        self.replay_dispatched(e, now);
        self.try_take_lock_on_dispatch(e);
        self.pass_barrier_on_dispatch(e, now)?;
        self.shootdown_on_dispatch(e, now)?;
        self.arm(c, now);
        Ok(())
    }
}

/// A CPU's relaxed co-scheduling counters as the policy keeps them
/// (whole run; the report takes the window's part).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct CoschedCounts {
    pub costops: u64,
    pub costarts: u64,
    pub directed_yields: u64,
    pub gathers: u64,
}

impl CoschedCounts {
    pub(super) fn of(c: &crate::stats::CpuStats) -> CoschedCounts {
        CoschedCounts {
            costops: c.costops,
            costarts: c.costarts,
            directed_yields: c.directed_yields,
            gathers: c.gathers,
        }
    }

    pub(super) fn since(self, base: CoschedCounts) -> CoschedCounts {
        CoschedCounts {
            costops: self.costops.saturating_sub(base.costops),
            costarts: self.costarts.saturating_sub(base.costarts),
            directed_yields: self.directed_yields.saturating_sub(base.directed_yields),
            gathers: self.gathers.saturating_sub(base.gathers),
        }
    }
}
