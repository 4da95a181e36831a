//! Checks of a scheduler's decisions as the caller sees them, for the
//! simulator and for a VMM's real runs alike.
//!
//! A [`Monitor`] keeps the caller's view of the protocol (which entity is
//! blocked, waiting or running where, which CPU has a kick on its way) and
//! counts every decision that breaks a rule the scheduler promises
//! ([`Violations`]):
//! - an entity runs on one CPU at a time, only when runnable, only inside
//!   its affinity (CPUs taken out of service excluded);
//! - a wake of a blocked entity is never answered "already runnable", and
//!   a wake placed on an idle CPU kicks it;
//! - a CPU never idles while an entity it may run waits, unless a kick is
//!   on its way to it (the bounded window of the protocol), the entity's
//!   own wake kick is still on its way to another CPU, or SMT isolation
//!   makes it hand its core over to another VM;
//! - in low-latency mode, an entity is never left waiting on a busy CPU
//!   while a CPU it may use is idle and not kicked;
//! - under SMT isolation, siblings never run two VMs at once.
//!
//! The caller reports what it did, in the order the scheduler's calls took
//! effect: [`Monitor::woke`] after each `wake`, [`Monitor::scheduled`] after
//! each `schedule`, [`Monitor::kick_sent`] for kicks it sends on its own.
//! The simulator runs one on every event. A VMM can run one on real runs
//! by reporting under one lock that it also holds across its scheduler
//! calls (a debug mode: it serialises scheduling): reported out of order,
//! concurrent calls would look like violations that did not happen.
//!
//! A `schedule` call with reason `Preempted` or `Idle` is the CPU's answer
//! to a kick: it consumes the CPU's pending kick. Other reasons (its own
//! quantum timer, a block, a yield) leave a pending kick pending.

use crate::{CpuId, CpuSet, Dispatch, EntityId, StopReason, Topology, VmId, WakeDecision};
use serde::Serialize;

/// Counts of broken rules (and a few informational counters). A correct
/// policy has [`Violations::total`] == 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Violations {
    /// An entity was dispatched on a CPU while it ran on another one.
    pub double_run: u64,
    /// An entity was dispatched on a CPU outside its affinity (or on a CPU
    /// taken out of service).
    pub affinity: u64,
    /// An entity was dispatched although it was blocked (never woken).
    pub dispatched_blocked: u64,
    /// `wake` answered "already runnable" for an entity that was blocked
    /// (a lost wake-up).
    pub lost_wake: u64,
    /// A wake was placed on an idle CPU without a kick and no kick was pending
    /// (a remote wake-up left unnoticed).
    pub unnoticed_wake: u64,
    /// A CPU went idle while an entity allowed on it was ready and not
    /// dispatched, no kick to this CPU was pending, and the entity's own
    /// wake was not still in flight (see `idle_while_wake_in_flight`).
    pub idle_while_waiting: u64,
    /// Low-latency mode only: a woken entity was queued without a kick on a
    /// busy CPU, or a stopped entity went back to a queue, while a CPU that
    /// could run it was idle with no kick pending ("a runnable vCPU never
    /// waits while a CPU it may run on is idle").
    pub idle_cpu_passed_over: u64,
    /// SMT isolation on: a CPU was given an entity of one VM while an SMT
    /// sibling ran an entity of another VM.
    #[serde(default)]
    pub smt_corun: u64,
    /// Not a violation, for information: a CPU went idle while an allowed
    /// entity waited whose wake-up kick to another CPU was still in flight.
    pub idle_while_wake_in_flight: u64,
    /// Not a violation, for information: under SMT isolation, a CPU went
    /// idle while a vCPU of another VM than its siblings' waited for the
    /// core (a forced idle of core scheduling, handing the core over).
    pub smt_handover_idle: u64,
    /// Not a violation, for information: dispatches with a zero quantum.
    pub zero_quantum: u64,
}

impl Violations {
    /// Sum of the real violations (the informational counters excluded).
    pub fn total(&self) -> u64 {
        self.double_run
            + self.affinity
            + self.dispatched_blocked
            + self.lost_wake
            + self.unnoticed_wake
            + self.idle_while_waiting
            + self.idle_cpu_passed_over
            + self.smt_corun
    }
}

const NONE: u32 = u32::MAX;

/// The caller's view of one entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Blocked,
    /// Runnable and not running; the CPU whose queue received it.
    Waiting {
        queue_cpu: u32,
    },
    Running(u32),
    /// Runnable, throttled by its cap (`Dispatch::throttled`): the policy
    /// queues it again itself at the renewal, so until it runs again it
    /// counts as neither blocked nor waiting.
    Throttled,
}

#[derive(Debug, Clone)]
struct Watched {
    id: EntityId,
    vm: VmId,
    affinity: CpuSet,
    state: Seen,
    /// Woken while running: its next `Blocked` stop keeps it runnable.
    wake_pending: bool,
    /// Woken and not dispatched since (its wake's kick may be in flight).
    woken: bool,
    /// Position in `Monitor::waiting`, or `NONE`.
    pos: u32,
}

#[derive(Debug, Clone, Default)]
struct WatchedCpu {
    current: Option<u32>,
    kick_pending: bool,
    in_service: bool,
    /// Idled to hand its core over to another VM (SMT isolation).
    handover_idle: bool,
}

/// The checker (see the module documentation).
#[derive(Debug, Clone)]
pub struct Monitor {
    smt_isolation: bool,
    low_latency: bool,
    core_of: Vec<u32>,
    core_cpus: Vec<Vec<u32>>,
    /// Indexed by `EntityId::index`.
    entities: Vec<Option<Watched>>,
    cpus: Vec<WatchedCpu>,
    /// Entities waiting (runnable, not running), in no particular order.
    waiting: Vec<u32>,
    v: Violations,
    passed_over: u64,
}

impl Monitor {
    /// A monitor for a scheduler over `topology`; `smt_isolation` and
    /// `low_latency` say which rules that scheduler promises (the idle
    /// CPU rule on requeue holds in low-latency mode only: power saving
    /// packs on purpose).
    pub fn new(topology: &Topology, smt_isolation: bool, low_latency: bool) -> Monitor {
        Monitor {
            smt_isolation,
            low_latency,
            core_of: topology.cpus.iter().map(|c| c.core.0).collect(),
            core_cpus: topology
                .cores
                .iter()
                .map(|c| c.cpus.iter().map(|x| x.0).collect())
                .collect(),
            entities: Vec::new(),
            cpus: vec![
                WatchedCpu {
                    in_service: true,
                    ..WatchedCpu::default()
                };
                topology.num_cpus()
            ],
            waiting: Vec::new(),
            v: Violations::default(),
            passed_over: 0,
        }
    }

    /// What was found so far.
    pub fn violations(&self) -> Violations {
        self.v
    }

    /// Wakes queued without a kick on a busy CPU, and requeues, while a CPU
    /// that could run the entity was idle, in any mode (in low-latency mode
    /// each is also an `idle_cpu_passed_over` violation).
    pub fn passed_over(&self) -> u64 {
        self.passed_over
    }

    /// An entity was added (it starts blocked).
    pub fn add(&mut self, id: EntityId, vm: VmId, affinity: CpuSet) {
        let i = id.index() as usize;
        if self.entities.len() <= i {
            self.entities.resize(i + 1, None);
        }
        self.entities[i] = Some(Watched {
            id,
            vm,
            affinity,
            state: Seen::Blocked,
            wake_pending: false,
            woken: false,
            pos: NONE,
        });
    }

    /// An entity was removed. If a CPU runs it, that CPU's next `schedule`
    /// ends it.
    pub fn remove(&mut self, id: EntityId) {
        if self.watched(id).is_none() {
            return;
        }
        let i = id.index();
        self.unwait(i);
        self.entities[i as usize] = None;
    }

    /// An entity's affinity changed.
    pub fn set_affinity(&mut self, id: EntityId, affinity: CpuSet) {
        if let Some(w) = self.watched_mut(id) {
            w.affinity = affinity;
        }
    }

    /// The scheduler switched modes (the idle-CPU rule on requeue holds
    /// in low-latency mode only).
    pub fn set_low_latency(&mut self, low_latency: bool) {
        self.low_latency = low_latency;
    }

    /// A CPU was taken out of service or put back.
    pub fn set_cpu_enabled(&mut self, cpu: CpuId, enabled: bool) {
        if let Some(c) = self.cpus.get_mut(cpu.0 as usize) {
            c.in_service = enabled;
        }
    }

    /// The caller sent a kick to `cpu` (it will call `schedule`).
    pub fn kick_sent(&mut self, cpu: CpuId) {
        if let Some(c) = self.cpus.get_mut(cpu.0 as usize) {
            c.kick_pending = true;
        }
    }

    /// Whether a kick to `cpu` is on its way (the caller need not send another).
    pub fn kick_pending(&self, cpu: CpuId) -> bool {
        self.cpus
            .get(cpu.0 as usize)
            .is_some_and(|c| c.kick_pending)
    }

    /// `wake(id)` answered `decision`. A kicking decision marks the kick
    /// as sent (the caller delivers it).
    pub fn woke(&mut self, id: EntityId, decision: Option<WakeDecision>) {
        let Some(w) = self.watched(id) else { return };
        let (state, vm) = (w.state, w.vm);
        let i = id.index();
        match (state, decision) {
            (Seen::Blocked, None) => self.v.lost_wake += 1,
            (Seen::Blocked, Some(d)) => {
                let c = d.cpu.0 as usize;
                if c >= self.cpus.len() {
                    return;
                }
                self.wait(i, c as u32);
                self.entity_mut(i).woken = true;
                if d.kick {
                    self.cpus[c].kick_pending = true;
                    return;
                }
                if self.cpus[c].current.is_none()
                    && !self.cpus[c].kick_pending
                    && self.cpus[c].in_service
                    && self.usable_by(c, vm)
                {
                    self.v.unnoticed_wake += 1;
                }
                if self.cpus[c].current.is_some() && self.some_idle_cpu(i) {
                    self.count_passed_over();
                }
            }
            (Seen::Running(_), _) => self.entity_mut(i).wake_pending = true,
            (Seen::Waiting { .. } | Seen::Throttled, _) => {}
        }
    }

    /// `schedule(cpu, reason)` answered `d`: the runner of `cpu` stopped
    /// (`Blocked` keeps it runnable if it was woken while running), `d`'s
    /// kicks are on their way, and `d.entity` runs on `cpu`. Returns the
    /// entity the caller should run: `d.entity`, unless the dispatch broke
    /// a rule that makes running it impossible (it already runs elsewhere).
    pub fn scheduled(&mut self, cpu: CpuId, reason: StopReason, d: &Dispatch) -> Option<EntityId> {
        let c = cpu.0 as usize;
        if c >= self.cpus.len() {
            return None;
        }
        if matches!(reason, StopReason::Preempted | StopReason::Idle) {
            self.cpus[c].kick_pending = false;
        }
        let prev = self.cpus[c].current.take();
        if let Some(p) = prev {
            self.stopped(p, c, reason);
        }
        for k in &d.kicks {
            if let Some(kc) = self.cpus.get_mut(k.0 as usize) {
                kc.kick_pending = true;
            }
        }
        for (id, _) in &d.throttled {
            if self
                .watched(*id)
                .is_some_and(|w| matches!(w.state, Seen::Waiting { .. }))
            {
                let i = id.index();
                self.unwait(i);
                self.entity_mut(i).state = Seen::Throttled;
            }
        }
        let ran = self.dispatch(c, d);
        if let Some(p) = prev {
            let requeued = self
                .entities
                .get(p as usize)
                .and_then(Option::as_ref)
                .is_some_and(|w| matches!(w.state, Seen::Waiting { .. }));
            if requeued && self.some_idle_cpu(p) {
                self.count_passed_over();
            }
        }
        ran
    }

    /// Entity `p` stopped running on CPU `c` for `reason`.
    fn stopped(&mut self, p: u32, c: usize, reason: StopReason) {
        let Some(w) = self.entities.get_mut(p as usize).and_then(Option::as_mut) else {
            return;
        };
        if w.state != Seen::Running(c as u32) {
            return;
        }
        if reason == StopReason::Blocked && !w.wake_pending {
            w.state = Seen::Blocked;
            return;
        }
        if reason == StopReason::Blocked {
            w.wake_pending = false;
        }
        self.wait(p, c as u32);
    }

    /// Apply the dispatch part of a `schedule` answer on CPU `c`.
    fn dispatch(&mut self, c: usize, d: &Dispatch) -> Option<EntityId> {
        let Some(id) = d.entity else {
            self.check_idle(c);
            return None;
        };
        let i = id.index();
        let Some(w) = self.watched(id) else {
            // An entity this monitor does not know (removed, or never
            // added): the caller's own bookkeeping decides.
            return Some(id);
        };
        let (state, vm) = (w.state, w.vm);
        let allowed = w.affinity.contains(CpuId(c as u32));
        match state {
            Seen::Running(_) => {
                self.v.double_run += 1;
                return None;
            }
            Seen::Blocked => self.v.dispatched_blocked += 1,
            Seen::Waiting { .. } | Seen::Throttled => {}
        }
        if !allowed || !self.cpus[c].in_service {
            self.v.affinity += 1;
        }
        if self.smt_isolation && self.sibling_runs_other_vm(c, vm) {
            self.v.smt_corun += 1;
        }
        if d.quantum == 0 {
            self.v.zero_quantum += 1;
        }
        self.unwait(i);
        let w = self.entity_mut(i);
        w.state = Seen::Running(c as u32);
        w.woken = false;
        let cpu = &mut self.cpus[c];
        cpu.current = Some(i);
        cpu.handover_idle = false;
        Some(id)
    }

    fn count_passed_over(&mut self) {
        self.passed_over += 1;
        if self.low_latency {
            self.v.idle_cpu_passed_over += 1;
        }
    }

    /// The "idle while waiting" check when CPU `c` goes idle.
    fn check_idle(&mut self, c: usize) {
        if self.waiting.is_empty() || self.cpus[c].kick_pending || !self.cpus[c].in_service {
            return;
        }
        let cpu_id = CpuId(c as u32);
        if self.smt_isolation {
            // Core scheduling may idle a sibling on purpose so that the
            // core can switch to a vCPU of another VM that waits for it
            // (a forced idle, not a violation).
            let handover = self.waiting.iter().any(|&e| {
                let w = self.entity(e);
                w.affinity.contains(cpu_id) && !self.usable_by(c, w.vm)
            });
            if handover {
                self.cpus[c].handover_idle = true;
                self.v.smt_handover_idle += 1;
                return;
            }
        }
        let mut in_flight = false;
        for &e in &self.waiting {
            let w = self.entity(e);
            if !w.affinity.contains(cpu_id) || !self.usable_by(c, w.vm) {
                continue;
            }
            let Seen::Waiting { queue_cpu: q } = w.state else {
                continue;
            };
            let q = q as usize;
            if q != c && self.cpus[q].kick_pending && w.woken {
                in_flight = true;
                continue;
            }
            self.v.idle_while_waiting += 1;
            return;
        }
        if in_flight {
            self.v.idle_while_wake_in_flight += 1;
        }
    }

    /// Whether some CPU of entity `e`'s affinity is idle with no kick
    /// pending and could run it (under SMT isolation: no sibling runs
    /// another VM), while no idle CPU of its affinity has a kick in flight
    /// (that CPU will pick up queued work within the kick latency).
    fn some_idle_cpu(&self, e: u32) -> bool {
        let w = self.entity(e);
        let mut idle_unkicked = false;
        for c in w.affinity.iter() {
            let i = c.0 as usize;
            let Some(cpu) = self.cpus.get(i) else {
                continue;
            };
            if cpu.current.is_none() && cpu.in_service && self.usable_by(i, w.vm) {
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
    fn usable_by(&self, c: usize, vm: VmId) -> bool {
        !(self.smt_isolation && self.sibling_runs_other_vm(c, vm))
    }

    /// Whether an SMT sibling of `c` runs an entity of another VM than `vm`.
    pub fn sibling_runs_other_vm(&self, c: usize, vm: VmId) -> bool {
        let Some(&core) = self.core_of.get(c) else {
            return false;
        };
        self.core_cpus[core as usize].iter().any(|&s| {
            s as usize != c
                && self.cpus[s as usize]
                    .current
                    .is_some_and(|o| self.entity(o).vm != vm)
        })
    }

    fn watched(&self, id: EntityId) -> Option<&Watched> {
        self.entities
            .get(id.index() as usize)
            .and_then(Option::as_ref)
            .filter(|w| w.id == id)
    }

    fn watched_mut(&mut self, id: EntityId) -> Option<&mut Watched> {
        self.entities
            .get_mut(id.index() as usize)
            .and_then(Option::as_mut)
            .filter(|w| w.id == id)
    }

    /// A watched entity by index (callers only pass indices they hold).
    fn entity(&self, i: u32) -> &Watched {
        self.entities[i as usize]
            .as_ref()
            .unwrap_or_else(|| unreachable!("index {i} of a removed entity kept"))
    }

    fn entity_mut(&mut self, i: u32) -> &mut Watched {
        self.entities[i as usize]
            .as_mut()
            .unwrap_or_else(|| unreachable!("index {i} of a removed entity kept"))
    }

    /// Entity `i` waits, queued for CPU `queue_cpu`.
    fn wait(&mut self, i: u32, queue_cpu: u32) {
        let pos = self.waiting.len() as u32;
        let w = self.entity_mut(i);
        w.state = Seen::Waiting { queue_cpu };
        if w.pos == NONE {
            w.pos = pos;
            self.waiting.push(i);
        }
    }

    fn unwait(&mut self, i: u32) {
        let pos = self.entity(i).pos;
        if pos == NONE {
            return;
        }
        self.waiting.swap_remove(pos as usize);
        if let Some(&moved) = self.waiting.get(pos as usize) {
            self.entity_mut(moved).pos = pos;
        }
        self.entity_mut(i).pos = NONE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: u32) -> EntityId {
        EntityId::new(i, 0)
    }

    fn run(e: EntityId) -> Dispatch {
        Dispatch::run(e, 1000)
    }

    /// 1x2x2: CPUs 0-1 are core 0, CPUs 2-3 core 1.
    fn monitor(smt: bool) -> Monitor {
        let mut m = Monitor::new(&Topology::from_spec("1x2x2").unwrap(), smt, true);
        m.add(id(0), VmId(0), CpuSet::first_n(4));
        m.add(id(1), VmId(1), CpuSet::first_n(4));
        m.add(id(2), VmId(0), CpuSet::single(CpuId(3)).unwrap());
        m
    }

    fn wake(cpu: u32, kick: bool) -> Option<WakeDecision> {
        Some(WakeDecision::new(CpuId(cpu), kick))
    }

    #[test]
    fn a_clean_cycle_counts_nothing() {
        let mut m = monitor(false);
        m.woke(id(0), wake(0, true));
        assert!(m.kick_pending(CpuId(0)));
        assert_eq!(
            m.scheduled(CpuId(0), StopReason::Idle, &run(id(0))),
            Some(id(0))
        );
        assert!(!m.kick_pending(CpuId(0)));
        // Blocks; a CPU idling with nothing waiting is fine.
        m.scheduled(CpuId(0), StopReason::Blocked, &Dispatch::idle());
        m.scheduled(CpuId(1), StopReason::Idle, &Dispatch::idle());
        assert_eq!(m.violations(), Violations::default());
    }

    #[test]
    fn dispatch_rules_are_counted() {
        let mut m = monitor(false);
        // Blocked entity dispatched.
        m.scheduled(CpuId(0), StopReason::Idle, &run(id(0)));
        // The same entity on a second CPU: refused to the caller.
        assert_eq!(m.scheduled(CpuId(1), StopReason::Idle, &run(id(0))), None);
        // Outside its affinity.
        m.woke(id(2), wake(3, true));
        m.scheduled(CpuId(2), StopReason::Idle, &run(id(2)));
        let v = m.violations();
        assert_eq!(
            (v.dispatched_blocked, v.double_run, v.affinity),
            (1, 1, 1),
            "{v:?}"
        );
        assert_eq!(v.total(), 3);
    }

    #[test]
    fn wake_rules_are_counted() {
        let mut m = monitor(false);
        m.woke(id(0), None); // blocked, answered "already runnable"
        m.woke(id(1), wake(1, false)); // idle CPU 1, no kick
        let v = m.violations();
        assert_eq!((v.lost_wake, v.unnoticed_wake), (1, 1), "{v:?}");
        // A wake of a running entity is remembered: its block keeps it
        // runnable, so idling another CPU it may use is a violation.
        let mut m = monitor(false);
        m.woke(id(0), wake(0, true));
        m.scheduled(CpuId(0), StopReason::Idle, &run(id(0)));
        m.woke(id(0), None);
        m.scheduled(CpuId(0), StopReason::Blocked, &Dispatch::idle());
        assert_eq!(m.violations().idle_while_waiting, 1);
    }

    #[test]
    fn idling_while_an_allowed_entity_waits_is_counted_unless_kicked() {
        let mut m = monitor(false);
        m.woke(id(0), wake(0, true));
        m.scheduled(CpuId(0), StopReason::Idle, &run(id(0)));
        m.woke(id(1), wake(0, true)); // kick CPU 0 to preempt
                                      // CPU 1 idles while entity 1 waits and its wake's kick is in
                                      // flight to CPU 0: information only.
        m.scheduled(CpuId(1), StopReason::Idle, &Dispatch::idle());
        assert_eq!(m.violations().total(), 0);
        assert_eq!(m.violations().idle_while_wake_in_flight, 1);
        // CPU 0 takes the kick and keeps entity 0: entity 1 is requeued
        // behind it while CPUs 1-3 idle and nobody is kicked.
        m.scheduled(CpuId(0), StopReason::Preempted, &run(id(0)));
        m.scheduled(CpuId(2), StopReason::Idle, &Dispatch::idle());
        let v = m.violations();
        assert_eq!(v.idle_while_waiting, 1, "{v:?}");
        // A kick on its way to CPU 3 excuses it.
        m.kick_sent(CpuId(3));
        m.scheduled(CpuId(3), StopReason::QuantumEnd, &Dispatch::idle());
        assert_eq!(m.violations().idle_while_waiting, 1);
    }

    #[test]
    fn requeue_next_to_an_idle_cpu_is_passed_over_in_low_latency_only() {
        for low_latency in [true, false] {
            let topo = Topology::from_spec("1x2x1").unwrap();
            let mut m = Monitor::new(&topo, false, low_latency);
            m.add(id(0), VmId(0), CpuSet::first_n(2));
            m.add(id(1), VmId(0), CpuSet::first_n(2));
            m.woke(id(0), wake(0, true));
            m.scheduled(CpuId(0), StopReason::Idle, &run(id(0)));
            // Queued on busy CPU 0 without a kick while CPU 1 idles.
            m.woke(id(1), wake(0, false));
            // Entity 0 goes back to a queue behind entity 1; CPU 1 idles
            // and nobody kicks it.
            m.scheduled(CpuId(0), StopReason::QuantumEnd, &run(id(1)));
            assert_eq!(m.passed_over(), 2, "the wake and the requeue");
            let want = if low_latency { 2 } else { 0 };
            assert_eq!(m.violations().idle_cpu_passed_over, want);
        }
    }

    #[test]
    fn smt_isolation_rules() {
        let mut m = monitor(true);
        m.woke(id(0), wake(0, true));
        m.scheduled(CpuId(0), StopReason::Idle, &run(id(0)));
        // VM 1 on the sibling of a CPU running VM 0.
        m.woke(id(1), wake(1, true));
        m.scheduled(CpuId(1), StopReason::Idle, &run(id(1)));
        assert_eq!(m.violations().smt_corun, 1);
        // An idle CPU next to VM 0 while only a VM 1 entity could use it
        // is handing its core over, not a violation.
        let mut m = monitor(true);
        m.woke(id(0), wake(0, true));
        m.scheduled(CpuId(0), StopReason::Idle, &run(id(0)));
        m.woke(id(1), wake(0, false));
        m.scheduled(CpuId(1), StopReason::Idle, &Dispatch::idle());
        let v = m.violations();
        assert_eq!((v.smt_handover_idle, v.idle_while_waiting), (1, 0));
    }

    #[test]
    fn cpus_out_of_service_run_nothing_and_may_idle() {
        let mut m = monitor(false);
        m.set_cpu_enabled(CpuId(1), false);
        m.woke(id(0), wake(0, true));
        m.scheduled(CpuId(1), StopReason::Idle, &Dispatch::idle());
        assert_eq!(m.violations().idle_while_waiting, 0);
        m.scheduled(CpuId(1), StopReason::Idle, &run(id(0)));
        assert_eq!(m.violations().affinity, 1);
        // Removed entities and stale ids are ignored.
        m.remove(id(1));
        m.woke(id(1), None);
        assert_eq!(m.violations().lost_wake, 0);
    }
}
