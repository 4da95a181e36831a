//! The event queue and the CPU / entity model.
//!
//! Each simulated CPU runs the entity it was dispatched until the earlier of
//! its quantum timer and the end of the current burst phase. Burst end ->
//! `StopReason::Blocked` (or `Yielded`), quantum timer -> `QuantumEnd`, a
//! kick -> `Preempted` (or `Idle` on an idle CPU). A sleeping entity is
//! woken with `wake` at the end of its sleep (or by a message); a kicking
//! [`crate::WakeDecision`] becomes a kick event at the target CPU after the
//! workload's kick latency. The remaining burst survives preemptions.
//!
//! Events are ordered by (time, sequence number) in a binary heap and all
//! randomness comes from one ChaCha8 stream, so a seed fixes the run.

use super::dist::{rng_from_seed, SimRng};
use super::report::{
    jain_index, summarise, CpuReport, GroupReport, HostTiming, SimReport, Throughput, VcpuReport,
    Violations, VmReport,
};
use super::workload::{SimError, Sleep, Workload};
use crate::{
    build, CpuId, CpuSet, Dispatch, EntityId, EntitySpec, Nanos, StopReason, Topology,
    VcpuScheduler,
};
use rand::Rng;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

const NONE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EvKind {
    /// Quantum timer or burst-phase end of a CPU (stale unless `gen` matches).
    CpuTimer,
    /// A kick (IPI) arrives at a CPU.
    Kick,
    /// An entity's sleep ends (stale unless `gen` matches).
    SleepEnd,
}

#[derive(Debug, Clone, Copy)]
struct Ev {
    time: Nanos,
    seq: u64,
    kind: EvKind,
    idx: u32,
    gen: u32,
}

impl PartialEq for Ev {
    fn eq(&self, o: &Self) -> bool {
        self.time == o.time && self.seq == o.seq
    }
}
impl Eq for Ev {}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ev {
    // Reversed: BinaryHeap is a max-heap, the earliest event must come first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.time, o.seq).cmp(&(self.time, self.seq))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Blocked,
    Ready,
    Running(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No burst in progress (starts one when dispatched).
    Fresh,
    /// Working outside the lock.
    Work,
    /// Spinning on the VM lock.
    WaitLock,
    /// Holding the VM lock.
    Crit,
}

#[derive(Debug, Clone, Copy)]
enum Target {
    None,
    Group { first: u32, count: u32 },
    Vcpu(u32),
}

struct Group {
    first: u32,
    count: u32,
    sleep: Sleep,
    burst: super::dist::Dist,
    yield_after_burst: bool,
    target: Target,
    fanout: u32,
    lock_fraction: Option<f64>,
}

struct Ent {
    id: EntityId,
    group: u32,
    vm: u32,
    /// Index into `locks`, NONE without lock behaviour.
    lock: u32,
    affinity: CpuSet,
    state: State,
    phase: Phase,
    work_left: Nanos,
    crit_left: Nanos,
    sleep_gen: u32,
    pending_msg: bool,
    latency_pending: bool,
    wake_at: Nanos,
    ready_since: Nanos,
    ready_pos: u32,
    /// CPU whose queue got it (wake decision or the CPU it was preempted on).
    queue_cpu: u32,
    last_cpu: u32,
    // Window statistics.
    bursts: u64,
    useful: Nanos,
    spin: Nanos,
    run: Nanos,
    ready_wait: Nanos,
    migrations: u64,
    latencies: Vec<Nanos>,
}

struct Cpu {
    core: u32,
    current: Option<u32>,
    since: Nanos,
    quantum_end: Nanos,
    timer_gen: u32,
    kick_pending: bool,
    busy: Nanos,
    ctx: u64,
    sched_calls: u64,
    kicks: u64,
    kicks_wasted: u64,
    /// Since when this CPU runs a vCPU while a sibling runs another VM's.
    foreign_since: Option<Nanos>,
    /// SMT isolation: idle to hand the core over to another VM (a vCPU of
    /// another VM than the siblings' waits for this core).
    handover_idle: bool,
    smt_foreign: Nanos,
}

struct Lock {
    holder: u32,
    spinners: Vec<u32>,
}

/// A simulation ready to run: a workload and the scheduler it drives.
pub struct Simulator {
    workload: Workload,
    sched: Box<dyn VcpuScheduler>,
    trace: u64,
}

impl Simulator {
    /// Build the topology from the workload's spec and the scheduler from
    /// its `sched` configuration (through [`crate::build`]).
    pub fn new(workload: Workload) -> Result<Simulator, SimError> {
        workload.validate()?;
        let topo = Topology::from_spec(&workload.topology)?;
        let sched = build(topo, workload.sched.clone())?;
        Ok(Simulator {
            workload,
            sched,
            trace: 0,
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
        })
    }

    /// Run to the end of the simulated duration and collect the report.
    pub fn run(self) -> Result<SimReport, SimError> {
        let mut e = Engine::setup(self.workload, self.sched)?;
        e.trace = self.trace;
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

struct Engine {
    w: Workload,
    sched: Box<dyn VcpuScheduler>,
    topo: Topology,
    rng: SimRng,
    heap: BinaryHeap<Ev>,
    seq: u64,
    now: Nanos,
    end: Nanos,
    warmup: Nanos,
    kick_latency: Nanos,
    groups: Vec<Group>,
    ents: Vec<Ent>,
    ent_of: Vec<u32>,
    cpus: Vec<Cpu>,
    core_cpus: Vec<Vec<u32>>,
    locks: Vec<Lock>,
    ready: Vec<u32>,
    /// Window run time per (entity, CPU), row-major by entity.
    cpu_time: Vec<Nanos>,
    v: Violations,
    wake_queued_with_idle_cpu: u64,
    events: u64,
    sched_calls: u64,
    trace: u64,
}

impl Engine {
    fn setup(w: Workload, sched: Box<dyn VcpuScheduler>) -> Result<Engine, SimError> {
        let topo = sched.topology().clone();
        let ncpu = topo.num_cpus();
        if ncpu == 0 {
            return Err(SimError::Invalid("topology has no CPUs".into()));
        }
        let all = topo.all_cpus();
        let mut groups = Vec::with_capacity(w.groups.len());
        let mut first = 0u32;
        for g in &w.groups {
            let target = match &g.message {
                None => Target::None,
                Some(m) => match (&m.to_group, m.to_vcpu) {
                    (Some(name), _) => {
                        let mut f = 0u32;
                        let mut t = Target::None;
                        for o in &w.groups {
                            if &o.name == name {
                                t = Target::Group {
                                    first: f,
                                    count: o.count,
                                };
                            }
                            f += o.count;
                        }
                        t
                    }
                    (None, Some(v)) => Target::Vcpu(v),
                    (None, None) => Target::None,
                },
            };
            groups.push(Group {
                first,
                count: g.count,
                sleep: g.sleep.clone(),
                burst: g.burst.clone(),
                yield_after_burst: g.yield_after_burst,
                target,
                fanout: g.message.as_ref().map_or(0, |m| m.fanout),
                lock_fraction: g.lock.as_ref().map(|l| l.hold_fraction),
            });
            first += g.count;
        }
        // One lock per VM that has lock behaviour, in ascending VM order.
        let mut lock_vms: Vec<u32> = w
            .groups
            .iter()
            .filter(|g| g.lock.is_some())
            .map(|g| g.vm)
            .collect();
        lock_vms.sort_unstable();
        lock_vms.dedup();
        let locks = lock_vms
            .iter()
            .map(|_| Lock {
                holder: NONE,
                spinners: Vec::with_capacity(first as usize),
            })
            .collect();

        let mut ents = Vec::with_capacity(first as usize);
        let mut ent_of = Vec::new();
        for (gi, g) in w.groups.iter().enumerate() {
            let affinity = g.affinity.clone().unwrap_or_else(|| all.clone());
            let lock = if g.lock.is_some() {
                lock_vms.binary_search(&g.vm).map_or(NONE, |i| i as u32)
            } else {
                NONE
            };
            for _ in 0..g.count {
                let spec = EntitySpec {
                    vm: crate::VmId(g.vm),
                    class: g.class,
                    priority: g.priority,
                    affinity: affinity.clone(),
                };
                let id = sched.add_entity(spec, 0)?;
                let slot = id.0 as usize;
                if slot > 1 << 24 {
                    return Err(SimError::Invalid(format!("entity id {slot} too large")));
                }
                if ent_of.len() <= slot {
                    ent_of.resize(slot + 1, NONE);
                }
                ent_of[slot] = ents.len() as u32;
                ents.push(Ent {
                    id,
                    group: gi as u32,
                    vm: g.vm,
                    lock,
                    affinity: affinity.clone(),
                    state: State::Blocked,
                    phase: Phase::Fresh,
                    work_left: 0,
                    crit_left: 0,
                    sleep_gen: 0,
                    pending_msg: false,
                    latency_pending: false,
                    wake_at: 0,
                    ready_since: 0,
                    ready_pos: NONE,
                    queue_cpu: 0,
                    last_cpu: NONE,
                    bursts: 0,
                    useful: 0,
                    spin: 0,
                    run: 0,
                    ready_wait: 0,
                    migrations: 0,
                    latencies: Vec::new(),
                });
            }
        }
        let cpus = topo
            .cpus
            .iter()
            .map(|c| Cpu {
                core: c.core.0,
                current: None,
                since: 0,
                quantum_end: 0,
                timer_gen: 0,
                kick_pending: false,
                busy: 0,
                ctx: 0,
                sched_calls: 0,
                kicks: 0,
                kicks_wasted: 0,
                foreign_since: None,
                smt_foreign: 0,
                handover_idle: false,
            })
            .collect();
        let core_cpus = topo
            .cores
            .iter()
            .map(|c| c.cpus.iter().map(|x| x.0).collect())
            .collect();
        let n = ents.len();
        Ok(Engine {
            rng: rng_from_seed(w.seed),
            end: w.duration_ms * 1_000_000,
            warmup: w.warmup_ms * 1_000_000,
            kick_latency: (w.kick_latency_us * 1000.0).round() as Nanos,
            w,
            sched,
            topo,
            heap: BinaryHeap::with_capacity(4 * (n + ncpu) + 16),
            seq: 0,
            now: 0,
            groups,
            ents,
            ent_of,
            cpus,
            core_cpus,
            locks,
            ready: Vec::with_capacity(n),
            cpu_time: vec![0; n * ncpu],
            v: Violations::default(),
            wake_queued_with_idle_cpu: 0,
            events: 0,
            sched_calls: 0,
            trace: 0,
        })
    }

    fn push(&mut self, time: Nanos, kind: EvKind, idx: u32, gen: u32) {
        self.seq += 1;
        self.heap.push(Ev {
            time,
            seq: self.seq,
            kind,
            idx,
            gen,
        });
    }

    /// Part of [a, b) inside the measured window.
    fn win(&self, a: Nanos, b: Nanos) -> Nanos {
        b.saturating_sub(a.max(self.warmup))
    }

    fn in_window(&self, t: Nanos) -> bool {
        t >= self.warmup
    }

    fn run(&mut self) -> Result<(), SimError> {
        for c in 0..self.cpus.len() {
            self.do_schedule(c, 0, StopReason::Idle)?;
        }
        for e in 0..self.ents.len() {
            let g = self.ents[e].group as usize;
            if self.w.groups[g].start_awake {
                self.wake(e, 0)?;
            }
        }
        while let Some(ev) = self.heap.pop() {
            if ev.time > self.end {
                break;
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
                        self.wake(e, now)?;
                    }
                }
            }
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
        for i in 0..self.ready.len() {
            let e = self.ready[i] as usize;
            let w = self.win(self.ents[e].ready_since, end);
            self.ents[e].ready_wait += w;
        }
        Ok(())
    }

    /// Charge the running entity of `c` for the time since the last charge.
    fn account(&mut self, c: usize, now: Nanos) {
        let Some(e) = self.cpus[c].current else {
            return;
        };
        let since = self.cpus[c].since;
        if now <= since {
            return;
        }
        let dt = now - since;
        let wdt = self.win(since, now);
        self.cpus[c].since = now;
        self.cpus[c].busy += wdt;
        let ncpu = self.cpus.len();
        self.cpu_time[e as usize * ncpu + c] += wdt;
        let ent = &mut self.ents[e as usize];
        ent.run += wdt;
        match ent.phase {
            Phase::Work => {
                let p = dt.min(ent.work_left);
                ent.work_left -= p;
                ent.useful += p.min(wdt);
            }
            Phase::Crit => {
                let p = dt.min(ent.crit_left);
                ent.crit_left -= p;
                ent.useful += p.min(wdt);
            }
            Phase::WaitLock => ent.spin += wdt,
            Phase::Fresh => {}
        }
    }

    /// Arm the CPU timer at min(quantum end, phase end).
    fn arm(&mut self, c: usize, now: Nanos) {
        let Some(e) = self.cpus[c].current else {
            return;
        };
        let ent = &self.ents[e as usize];
        let phase_end = match ent.phase {
            Phase::Work => now + ent.work_left,
            Phase::Crit => now + ent.crit_left,
            Phase::WaitLock => Nanos::MAX,
            Phase::Fresh => now,
        };
        let t = phase_end.min(self.cpus[c].quantum_end).max(now);
        self.cpus[c].timer_gen = self.cpus[c].timer_gen.wrapping_add(1);
        let gen = self.cpus[c].timer_gen;
        self.push(t, EvKind::CpuTimer, c as u32, gen);
    }

    fn start_burst(&mut self, e: usize) {
        let g = self.ents[e].group as usize;
        let total = self.groups[g].burst.sample(&mut self.rng).max(1);
        let crit = match self.groups[g].lock_fraction {
            Some(f) => ((total as f64 * f).round() as Nanos).clamp(1, total),
            None => 0,
        };
        let ent = &mut self.ents[e];
        ent.work_left = total - crit;
        ent.crit_left = crit;
        ent.phase = Phase::Work;
    }

    fn on_timer(&mut self, c: usize, now: Nanos) -> Result<(), SimError> {
        self.account(c, now);
        let Some(e) = self.cpus[c].current else {
            return Ok(());
        };
        let e = e as usize;
        let mut stop = None;
        loop {
            let ent = &self.ents[e];
            match ent.phase {
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
                        stop = self.burst_done(e, now)?;
                    }
                }
                Phase::Crit if ent.crit_left == 0 => {
                    self.release(ent.lock as usize, e, now);
                    stop = self.burst_done(e, now)?;
                }
                _ => {}
            }
            break;
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

    /// Release the VM lock held by `e`; hand it to the first spinner that is
    /// on a CPU (the others take it when they run again).
    fn release(&mut self, l: usize, e: usize, now: Nanos) {
        debug_assert_eq!(self.locks[l].holder, e as u32);
        self.locks[l].holder = NONE;
        let pos = self.locks[l]
            .spinners
            .iter()
            .position(|&s| matches!(self.ents[s as usize].state, State::Running(_)));
        if let Some(pos) = pos {
            let s = self.locks[l].spinners.remove(pos) as usize;
            let State::Running(sc) = self.ents[s].state else {
                return;
            };
            self.account(sc as usize, now);
            self.locks[l].holder = s as u32;
            self.ents[s].phase = Phase::Crit;
            self.arm(sc as usize, now);
        }
    }

    /// Take the VM lock at dispatch if the entity was spinning and it is free.
    fn try_take_lock_on_dispatch(&mut self, e: usize) {
        let l = self.ents[e].lock;
        if l == NONE || self.ents[e].phase != Phase::WaitLock {
            return;
        }
        let lk = &mut self.locks[l as usize];
        if lk.holder == NONE {
            lk.holder = e as u32;
            if let Some(p) = lk.spinners.iter().position(|&s| s == e as u32) {
                lk.spinners.remove(p);
            }
            self.ents[e].phase = Phase::Crit;
        }
    }

    /// A burst completed: send messages, then continue, yield or block.
    fn burst_done(&mut self, e: usize, now: Nanos) -> Result<Option<StopReason>, SimError> {
        if self.in_window(now) {
            self.ents[e].bursts += 1;
        }
        let g = self.ents[e].group as usize;
        let (target, fanout) = (self.groups[g].target, self.groups[g].fanout);
        for _ in 0..fanout {
            let t = match target {
                Target::None => break,
                Target::Vcpu(v) => v as usize,
                Target::Group { first, count } => {
                    let me = e as u32;
                    if count == 0 {
                        break;
                    }
                    let self_in = me >= first && me < first + count;
                    if self_in && count == 1 {
                        break;
                    }
                    let span = if self_in { count - 1 } else { count };
                    let mut r = first + self.rng.random_range(0..span);
                    if self_in && r >= me {
                        r += 1;
                    }
                    r as usize
                }
            };
            if self.ents[t].state == State::Blocked {
                self.wake(t, now)?;
            } else {
                self.ents[t].pending_msg = true;
            }
        }
        self.ents[e].phase = Phase::Fresh;
        if self.groups[g].yield_after_burst {
            return Ok(Some(StopReason::Yielded));
        }
        if self.ents[e].pending_msg {
            self.ents[e].pending_msg = false;
            self.start_burst(e);
            return Ok(None);
        }
        let sleep = match &self.groups[g].sleep {
            Sleep::Never => None,
            Sleep::UntilMessage => Some(None),
            Sleep::For(d) => Some(Some(d.sample(&mut self.rng))),
        };
        match sleep {
            None => {
                self.start_burst(e);
                Ok(None)
            }
            Some(t) => {
                let ent = &mut self.ents[e];
                ent.state = State::Blocked;
                ent.sleep_gen = ent.sleep_gen.wrapping_add(1);
                let gen = ent.sleep_gen;
                if let Some(t) = t {
                    self.push(now + t, EvKind::SleepEnd, e as u32, gen);
                }
                Ok(Some(StopReason::Blocked))
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

    fn ready_add(&mut self, e: usize, now: Nanos, queue_cpu: u32) {
        let ent = &mut self.ents[e];
        ent.state = State::Ready;
        ent.ready_since = now;
        ent.queue_cpu = queue_cpu;
        if ent.ready_pos == NONE {
            ent.ready_pos = self.ready.len() as u32;
            self.ready.push(e as u32);
        }
    }

    fn ready_remove(&mut self, e: usize) {
        let pos = self.ents[e].ready_pos;
        if pos == NONE {
            return;
        }
        self.ready.swap_remove(pos as usize);
        if let Some(&moved) = self.ready.get(pos as usize) {
            self.ents[moved as usize].ready_pos = pos;
        }
        self.ents[e].ready_pos = NONE;
    }

    fn wake(&mut self, e: usize, now: Nanos) -> Result<(), SimError> {
        let ent = &mut self.ents[e];
        ent.sleep_gen = ent.sleep_gen.wrapping_add(1);
        let id = ent.id;
        self.sched_calls += 1;
        let decision = self.sched.wake(id, now)?;
        if self.trace > 0 {
            self.trace -= 1;
            eprintln!("{:>12} wake  vcpu {e:<4} -> {decision:?}", now);
        }
        match decision {
            Some(d) => {
                let c = d.cpu.0 as usize;
                if c >= self.cpus.len() {
                    return Err(SimError::Sched(crate::SchedError::UnknownCpu(d.cpu)));
                }
                self.ready_add(e, now, c as u32);
                let ent = &mut self.ents[e];
                ent.wake_at = now;
                ent.latency_pending = true;
                if d.kick {
                    if !self.cpus[c].kick_pending {
                        self.cpus[c].kick_pending = true;
                        self.push(now + self.kick_latency, EvKind::Kick, c as u32, 0);
                    }
                } else {
                    let vm = self.ents[e].vm;
                    if self.cpus[c].current.is_none()
                        && !self.cpus[c].kick_pending
                        && self.usable_by(c, vm)
                    {
                        self.v.unnoticed_wake += 1;
                    }
                    if self.cpus[c].current.is_some() && self.some_idle_cpu(e) {
                        if self.trace > 0 {
                            eprintln!("{now:>12} VIOLATION vcpu {e} queued on busy cpu {c} while a CPU idles");
                        }
                        self.wake_queued_with_idle_cpu += 1;
                        if self.w.sched.mode == crate::Mode::LowLatency {
                            self.v.idle_cpu_passed_over += 1;
                        }
                    }
                }
            }
            None => self.v.lost_wake += 1,
        }
        Ok(())
    }

    /// Whether some CPU of `e`'s affinity is idle with no kick pending and
    /// could run it (under SMT isolation: no sibling runs another VM), while
    /// no idle CPU of its affinity has a kick in flight (that CPU will pick
    /// up queued work within the kick latency).
    fn some_idle_cpu(&self, e: usize) -> bool {
        let vm = self.ents[e].vm;
        let mut idle_unkicked = false;
        for c in self.ents[e].affinity.iter() {
            let i = c.0 as usize;
            let Some(cpu) = self.cpus.get(i) else {
                continue;
            };
            if cpu.current.is_none() && self.usable_by(i, vm) {
                if cpu.kick_pending {
                    return false;
                }
                if !cpu.handover_idle {
                    idle_unkicked = true;
                }
            }
        }
        idle_unkicked
    }

    /// Whether CPU `c` may run a vCPU of `vm` now (always, unless SMT
    /// isolation is on and a sibling runs another VM).
    fn usable_by(&self, c: usize, vm: u32) -> bool {
        !(self.w.sched.smt_isolation && self.sibling_runs_other_vm(c, vm))
    }

    fn do_schedule(&mut self, c: usize, now: Nanos, reason: StopReason) -> Result<(), SimError> {
        let prev = self.cpus[c].current;
        if let Some(p) = prev {
            if reason != StopReason::Blocked {
                self.ready_add(p as usize, now, c as u32);
            }
        }
        self.cpus[c].current = None;
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
                .and_then(|id| self.ent_of.get(id.0 as usize))
                .map_or(-1, |&i| i as i64);
            eprintln!(
                "{now:>12} sched cpu {c:<3} prev {prev_v:<4} {reason:?} -> vcpu {next_v} quantum {}",
                d.quantum
            );
        }
        // Kicks the policy asks for on behalf of entities left waiting.
        let kicks = std::mem::take(&mut d.kicks);
        for k in kicks {
            let k = k.0 as usize;
            if k >= self.cpus.len() {
                return Err(SimError::Sched(crate::SchedError::UnknownCpu(CpuId(
                    k as u32,
                ))));
            }
            if self.trace > 0 {
                eprintln!("{now:>12} kick  cpu {k} requested by schedule on cpu {c}");
            }
            if !self.cpus[k].kick_pending {
                self.cpus[k].kick_pending = true;
                self.push(now + self.kick_latency, EvKind::Kick, k as u32, 0);
            }
        }
        self.apply(c, prev, d, now)?;
        self.update_corun(c, now);
        // The stopped entity went back to a queue: it must not wait while
        // a CPU that could run it idles.
        if let Some(p) = prev {
            let p = p as usize;
            if self.ents[p].state == State::Ready && self.some_idle_cpu(p) {
                if self.trace > 0 {
                    eprintln!("{now:>12} VIOLATION vcpu {p} requeued by cpu {c} while a CPU idles");
                }
                self.wake_queued_with_idle_cpu += 1;
                if self.w.sched.mode == crate::Mode::LowLatency {
                    self.v.idle_cpu_passed_over += 1;
                }
            }
        }
        Ok(())
    }

    /// Re-evaluate SMT co-running with another VM on `c`'s core at `now`.
    fn update_corun(&mut self, c: usize, now: Nanos) {
        let core = self.cpus[c].core as usize;
        if self.core_cpus[core].len() < 2 {
            return;
        }
        for i in 0..self.core_cpus[core].len() {
            let s = self.core_cpus[core][i] as usize;
            let foreign = match self.cpus[s].current {
                Some(e) => self.sibling_runs_other_vm(s, self.ents[e as usize].vm),
                None => false,
            };
            if let Some(t0) = self.cpus[s].foreign_since {
                let w = self.win(t0, now);
                self.cpus[s].smt_foreign += w;
            }
            self.cpus[s].foreign_since = foreign.then_some(now);
        }
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
            Some(id) => match self.ent_of.get(id.0 as usize) {
                Some(&i) if i != NONE => Some(i),
                _ => return Err(SimError::Sched(crate::SchedError::UnknownEntity(id))),
            },
        };
        if next != prev && self.in_window(now) {
            self.cpus[c].ctx += 1;
        }
        self.cpus[c].timer_gen = self.cpus[c].timer_gen.wrapping_add(1);
        let Some(e) = next else {
            self.cpus[c].current = None;
            self.check_idle(c);
            return Ok(());
        };
        let e = e as usize;
        match self.ents[e].state {
            State::Running(_) => {
                // Running elsewhere: the policy broke its invariant. Count it
                // and leave this CPU idle rather than model one vCPU twice.
                self.v.double_run += 1;
                self.cpus[c].current = None;
                return Ok(());
            }
            State::Blocked => {
                self.v.dispatched_blocked += 1;
            }
            State::Ready => {
                let w = self.win(self.ents[e].ready_since, now);
                self.ents[e].ready_wait += w;
            }
        }
        if !self.ents[e].affinity.contains(CpuId(c as u32)) {
            self.v.affinity += 1;
        }
        self.ready_remove(e);
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
        let mut q = d.quantum;
        if q == 0 {
            self.v.zero_quantum += 1;
            q = 1000;
        }
        let cpu = &mut self.cpus[c];
        cpu.handover_idle = false;
        cpu.current = Some(e as u32);
        cpu.since = now;
        cpu.quantum_end = now.saturating_add(q);
        if self.ents[e].phase == Phase::Fresh {
            self.start_burst(e);
        }
        self.try_take_lock_on_dispatch(e);
        self.arm(c, now);
        Ok(())
    }

    /// The "idle while waiting" check when CPU `c` goes idle.
    fn check_idle(&mut self, c: usize) {
        if self.ready.is_empty() || self.cpus[c].kick_pending {
            return;
        }
        let cpu_id = CpuId(c as u32);
        if self.w.sched.smt_isolation {
            // Core scheduling may idle a sibling on purpose so that the
            // core can switch to a vCPU of another VM that waits for it
            // (a forced idle, not a violation).
            let handover = self.ready.iter().any(|&e| {
                let ent = &self.ents[e as usize];
                ent.affinity.contains(cpu_id) && !self.usable_by(c, ent.vm)
            });
            if handover {
                self.cpus[c].handover_idle = true;
                self.v.smt_handover_idle += 1;
                return;
            }
        }
        let mut in_flight = false;
        for i in 0..self.ready.len() {
            let e = self.ready[i] as usize;
            let ent = &self.ents[e];
            if !ent.affinity.contains(cpu_id) {
                continue;
            }
            if !self.usable_by(c, ent.vm) {
                continue;
            }
            let q = ent.queue_cpu as usize;
            if q != c && self.cpus[q].kick_pending && ent.latency_pending {
                in_flight = true;
                continue;
            }
            self.v.idle_while_waiting += 1;
            if self.trace > 0 {
                eprintln!(
                    "{:>12} VIOLATION cpu {c} idles while vcpu {e} (queued on cpu {q}) waits",
                    self.now
                );
            }
            return;
        }
        if in_flight {
            self.v.idle_while_wake_in_flight += 1;
        }
    }

    fn sibling_runs_other_vm(&self, c: usize, vm: u32) -> bool {
        let core = self.cpus[c].core as usize;
        self.core_cpus[core].iter().any(|&s| {
            s as usize != c
                && self.cpus[s as usize]
                    .current
                    .is_some_and(|o| self.ents[o as usize].vm != vm)
        })
    }

    fn report(&mut self, wall_ns: u64) -> SimReport {
        let window = self.end - self.warmup;
        let secs = window as f64 / 1e9;
        let ncpu = self.cpus.len();
        let tp = |bursts: u64, useful: Nanos, spin: Nanos, run: Nanos| Throughput {
            bursts,
            bursts_per_sec: bursts as f64 / secs,
            useful_ns: useful,
            useful_cpus: useful as f64 / window as f64,
            spin_ns: spin,
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
                throughput: tp(ent.bursts, ent.useful, ent.spin, ent.run),
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
            let r = vs.iter().map(|v| v.throughput.run_ns).sum();
            tp(b, u, s, r)
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
            groups.push(GroupReport {
                name: self.w.groups[gi].name.clone(),
                count: g.count,
                throughput: sum_tp(&members),
                wake_latency: summarise(&mut lat),
                jain_fairness: jain_index(members.iter().map(|v| v.throughput.run_ns as f64)),
                per_core_cpus: per_core,
                home_counts,
                migrations: members.iter().map(|v| v.migrations).sum(),
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
            .map(|(c, cpu)| CpuReport {
                cpu: CpuId(c as u32),
                core: cpu.core,
                busy_ns: cpu.busy,
                utilisation: cpu.busy as f64 / window as f64,
                context_switches: cpu.ctx,
                context_switches_per_sec: cpu.ctx as f64 / secs,
                schedule_calls: cpu.sched_calls,
                kicks: cpu.kicks,
                kicks_wasted: cpu.kicks_wasted,
                smt_corun_foreign_ns: cpu.smt_foreign,
                home_vcpus: home_of.iter().filter(|h| **h == Some(c)).count() as u32,
            })
            .collect();
        let snapshot = self.sched.snapshot(self.end);
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
            violations: self.v,
            wake_queued_with_idle_cpu: self.wake_queued_with_idle_cpu,
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
