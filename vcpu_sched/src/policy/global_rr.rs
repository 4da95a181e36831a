//! Global round robin: one FIFO of ready entities under one lock.
//!
//! This is the design the Linux O(1) and Haiku schedulers replaced, kept as
//! the baseline a per-core design must beat: every event of every CPU takes
//! the same [`parking_lot::Mutex`], and picking scans the FIFO for the
//! first entity allowed on the CPU.
//!
//! Rules:
//! - ready entities wait in one FIFO per class (realtime before timeshare
//!   before idle; no other priorities). A quantum end, a yield or a wake
//!   appends at the tail; a preempted entity goes back to the head of its
//!   class and keeps the unused part of its quantum;
//! - the quantum is fixed: the mode's `base_quantum`. A preempted entity
//!   resumes with what is left of it, or a full quantum when less than half
//!   the minimal quantum is left. Nothing depends on the ready count, so a
//!   wake never shortens the runner's quantum (`shorten_quantum` is None);
//! - hard affinity is respected: a CPU takes the first queued entity allowed
//!   on it;
//! - wake: if a CPU of the affinity is idle (and not already kicked), the
//!   entity is queued and that CPU is kicked, preferring the entity's last
//!   CPU, then the nearest idle CPU in cache-locality order. Otherwise, if a
//!   CPU of the affinity runs an entity of a lower class (realtime waking
//!   over timeshare, say), that CPU is kicked to be preempted. Otherwise the
//!   entity waits in the FIFO and the answer names its last CPU, no kick;
//! - changes while running: a class or affinity change kicks as a wake of
//!   that entity would (an entity running where it may no longer run is
//!   kicked off); a CPU out of service picks nothing and is never kicked
//!   for work; the mode switches the quantum.

use super::baseline::{
    class_rank, service_change, utilisation, ClassFifo, CoreCorun, CpuAccount, EntityAccount,
    EntityTable, ModeCell, RunState, Tabled,
};
use crate::stats::{CoreStats, EntityState, EntityStats};
use crate::tunables::{Mode, Tunables};
use crate::validate::{
    validate_affinity, validate_config, validate_priority, validate_spec, validate_topology,
};
use crate::{
    CpuId, CpuSet, Dispatch, EntityId, EntitySpec, Nanos, SchedClass, SchedConfig, SchedError,
    SchedSnapshot, StopReason, Topology, WakeDecision,
};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// One registered entity.
#[derive(Debug)]
struct Entity {
    acct: EntityAccount,
    affinity: CpuSet,
}

impl Tabled for Entity {
    fn id(&self) -> EntityId {
        self.acct.id
    }
}

/// Everything, under the one lock.
#[derive(Debug)]
struct State {
    table: EntityTable<Entity>,
    ready: ClassFifo,
    cpus: Vec<CpuAccount>,
    cores: Vec<CoreCorun>,
    /// Per CPU: in service (`set_cpu_enabled`).
    in_service: Vec<bool>,
}

/// The global round-robin policy (see the module documentation).
pub struct GlobalRoundRobin {
    topology: Topology,
    /// Both modes' quantum tables (the mode picks one, `set_mode` switches).
    tunables: Tunables,
    mode: ModeCell,
    idle_core_search: AtomicBool,
    state: Mutex<State>,
}

impl GlobalRoundRobin {
    /// A scheduler for `topology`. Uses `config.mode`'s base and minimal
    /// quantum and `config.max_entities`; the other settings do not apply
    /// to this policy (SMT isolation is refused). Errors as every policy
    /// does on an invalid configuration.
    pub fn new(topology: Topology, config: SchedConfig) -> Result<Self, SchedError> {
        validate_topology(&topology)?;
        validate_config(&config, super::PolicyKind::GlobalRoundRobin)?;
        let state = State {
            table: EntityTable::new(config.max_entities),
            ready: ClassFifo::default(),
            cpus: topology
                .cpus
                .iter()
                .map(|c| CpuAccount::new(c.id))
                .collect(),
            cores: topology
                .cores
                .iter()
                .map(|c| CoreCorun::new(c.cpus.len()))
                .collect(),
            in_service: vec![true; topology.num_cpus()],
        };
        Ok(GlobalRoundRobin {
            tunables: config.tunables,
            mode: ModeCell::new(config.mode),
            idle_core_search: AtomicBool::new(config.idle_core_search),
            state: Mutex::new(state),
            topology,
        })
    }

    /// The slice to grant an entity about to run: what is left of its
    /// quantum, or a fresh quantum if too little is left.
    fn slice(&self, acct: &mut EntityAccount) -> Nanos {
        let table = self.tunables.quantum_table(self.current_mode());
        acct.quantum = table.base_quantum;
        let left = table.base_quantum.saturating_sub(acct.slice_used);
        if left == 0 || left <= table.minimal_quantum / 2 {
            acct.slice_used = 0;
            table.base_quantum
        } else {
            left
        }
    }

    fn current_mode(&self) -> Mode {
        self.mode.get()
    }

    /// Kick the CPU a wake of `id` would kick (`kick_target`; with
    /// `idle_only`, only if that CPU is idle), marking it kicked; returns it.
    fn kick_for(
        &self,
        st: &mut State,
        id: EntityId,
        near: CpuId,
        idle_only: bool,
    ) -> Option<CpuId> {
        let class = st.table.live(id).ok()?.acct.class;
        let k = self.kick_target(st, id, class, near)?;
        if idle_only && !st.cpus[k.0 as usize].is_free_idle() {
            return None;
        }
        st.cpus[k.0 as usize].kick_pending = true;
        Some(k)
    }

    /// Record on the SMT co-run accounts that `cpu` now runs `vm` (or nothing).
    fn set_corun(&self, st: &mut State, cpu: CpuId, vm: Option<crate::VmId>, now: Nanos) {
        if let Some(info) = self.topology.cpu(cpu) {
            if let Some(core) = st.cores.get_mut(info.core.0 as usize) {
                core.set(info.smt_index as usize, vm, now);
            }
        }
    }

    /// The CPU a wake of `id` (class `class`, last CPU `last`) must kick:
    /// an idle CPU of its affinity (the last one, else the nearest in
    /// cache-locality order), else a CPU running a lower class (the lowest
    /// class, then the nearest). `None`: it just waits in the FIFO.
    fn kick_target(
        &self,
        st: &State,
        id: EntityId,
        class: crate::SchedClass,
        last: CpuId,
    ) -> Option<CpuId> {
        let affinity = &st.table.live(id).ok()?.affinity;
        let idle = affinity
            .iter()
            .filter(|c| st.in_service[c.0 as usize] && st.cpus[c.0 as usize].is_free_idle())
            .min_by_key(|c| (self.topology.distance(last, *c), c.0));
        if idle.is_some() {
            return idle;
        }
        let rank = class_rank(class);
        affinity
            .iter()
            .filter_map(|c| {
                let cpu = &st.cpus[c.0 as usize];
                if cpu.kick_pending || !st.in_service[c.0 as usize] {
                    return None;
                }
                let running = cpu.current()?;
                let running_rank = match st.table.get(running) {
                    Some(r) => class_rank(r.acct.class),
                    // A removed entity: that CPU reschedules anyway.
                    None => return None,
                };
                (running_rank > rank).then_some((c, running_rank))
            })
            .min_by_key(|(c, r)| (std::cmp::Reverse(*r), self.topology.distance(last, *c), c.0))
            .map(|(c, _)| c)
    }

    /// Check the internal invariants; returns a description of the first
    /// violation. Used by the tests.
    #[cfg(test)]
    fn check(&self) -> Result<(), String> {
        use super::baseline::Slot;
        let st = self.state.lock();
        let mut queued = std::collections::HashMap::new();
        for id in st.ready.iter() {
            *queued.entry(id).or_insert(0) += 1;
        }
        for (slot_id, slot) in st.table.slots() {
            let i = slot_id.index() as usize;
            let id = match slot {
                Slot::Live(e) if e.acct.id != slot_id => {
                    return Err(format!("slot {slot_id} holds {:?}", e.acct.id));
                }
                Slot::Live(e) => e.acct.id,
                Slot::Zombie(id) => *id,
                Slot::Free => slot_id,
            };
            let q = queued.get(&id).copied().unwrap_or(0);
            let running_on: Vec<CpuId> = st
                .cpus
                .iter()
                .filter(|c| c.current().is_some_and(|r| r.index() == i as u32))
                .map(|c| c.cpu)
                .collect();
            match slot {
                Slot::Live(e) => match e.acct.state() {
                    RunState::Ready if q != 1 || !running_on.is_empty() => {
                        return Err(format!(
                            "{id:?} ready: queued {q}x, running on {running_on:?}"
                        ))
                    }
                    RunState::Running(c) if q != 0 || running_on != [c] => {
                        return Err(format!(
                            "{id:?} running on {c:?}: queued {q}x, CPUs {running_on:?}"
                        ))
                    }
                    RunState::Blocked if q != 0 || !running_on.is_empty() => {
                        return Err(format!(
                            "{id:?} blocked: queued {q}x, running on {running_on:?}"
                        ))
                    }
                    _ => {}
                },
                Slot::Zombie(_) if q != 0 || running_on.len() != 1 => {
                    return Err(format!(
                        "zombie {id:?}: queued {q}x, running on {running_on:?}"
                    ))
                }
                Slot::Free if q != 0 || !running_on.is_empty() => {
                    return Err(format!(
                        "free {id:?}: queued {q}x, running on {running_on:?}"
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl super::VcpuScheduler for GlobalRoundRobin {
    fn name(&self) -> &'static str {
        "global-rr"
    }

    fn topology(&self) -> &Topology {
        &self.topology
    }

    fn add_entity(&self, spec: EntitySpec, now: Nanos) -> Result<EntityId, SchedError> {
        let _p = crate::profiler::scope("global_rr::add_entity");
        let affinity = validate_spec(&spec, &self.topology)?;
        self.state.lock().table.insert(|id| Entity {
            acct: EntityAccount::new(id, &spec, now),
            affinity,
        })
    }

    fn remove_entity(&self, id: EntityId, _now: Nanos) -> Result<(), SchedError> {
        let _p = crate::profiler::scope("global_rr::remove_entity");
        let mut st = self.state.lock();
        let (state, class) = {
            let e = st.table.live(id)?;
            (e.acct.state(), e.acct.class)
        };
        if state == RunState::Ready {
            st.ready.remove(id, class);
        }
        st.table.remove(id, matches!(state, RunState::Running(_)));
        Ok(())
    }

    fn wake(&self, id: EntityId, now: Nanos) -> Result<Option<WakeDecision>, SchedError> {
        let _p = crate::profiler::scope("global_rr::wake");
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let (class, last) = {
            let e = st.table.live_mut(id)?;
            if !e.acct.wake(now) {
                return Ok(None);
            }
            let last = e
                .acct
                .last_cpu()
                .filter(|c| e.affinity.contains(*c))
                .or_else(|| e.affinity.first())
                .unwrap_or(CpuId(0));
            (e.acct.class, last)
        };
        st.ready.push_back(id, class);
        let target = self.kick_target(st, id, class, last);
        if let Some(cpu) = target {
            st.cpus[cpu.0 as usize].kick_pending = true;
            return Ok(Some(WakeDecision::new(cpu, true)));
        }
        Ok(Some(WakeDecision::new(last, false)))
    }

    /// No placement to make near the waker: one queue.
    fn wake_by(
        &self,
        id: EntityId,
        waker: EntityId,
        now: Nanos,
    ) -> Result<Option<WakeDecision>, SchedError> {
        self.state.lock().table.live(waker)?;
        self.wake(id, now)
    }

    fn schedule(&self, cpu: CpuId, now: Nanos, reason: StopReason) -> Result<Dispatch, SchedError> {
        let _p = crate::profiler::scope("global_rr::schedule");
        if self.topology.cpu(cpu).is_none() {
            return Err(SchedError::UnknownCpu(cpu));
        }
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let ci = cpu.0 as usize;
        st.cpus[ci].kick_pending = false;

        // Account the stop of whatever ran here.
        let mut requeued = None;
        if let Some(cur) = st.cpus[ci].current() {
            // A zombie (removed while it ran) just frees its slot.
            let running = (!st.table.end_zombie(cur))
                .then(|| st.table.get_mut(cur))
                .flatten()
                .filter(|e| e.acct.state() == RunState::Running(cpu));
            if let Some(e) = running {
                if e.acct.stop(now, reason) {
                    let class = e.acct.class;
                    requeued = Some((cur, class));
                    if matches!(reason, StopReason::Preempted | StopReason::Idle) {
                        st.ready.push_front(cur, class);
                    } else {
                        e.acct.slice_used = 0;
                        st.ready.push_back(cur, class);
                    }
                } else {
                    e.acct.slice_used = 0;
                }
            }
        }

        // Pick the first queued entity allowed here (nothing out of service).
        let table = &st.table;
        let pick = if st.in_service[ci] {
            st.ready
                .pop_first(|id| table.get(id).is_some_and(|e| e.affinity.contains(cpu)))
        } else {
            None
        };
        // The stopped entity went back to the queue: if it is not picked
        // here, an idle CPU it may use must be told, or it waits needlessly.
        let mut kicks = Vec::new();
        if let Some((cur, _)) = requeued.filter(|(cur, _)| Some(*cur) != pick) {
            if let Some(k) = self.kick_for(st, cur, cpu, true) {
                if k != cpu {
                    kicks.push(k);
                }
            }
        }
        match pick {
            Some(id) => {
                let Some(e) = st.table.get_mut(id) else {
                    // Unreachable by construction (only live entities are queued).
                    st.cpus[ci].idle(now, false);
                    self.set_corun(st, cpu, None, now);
                    return Ok(Dispatch::idle());
                };
                e.acct.dispatch(cpu, now, &self.topology);
                let quantum = self.slice(&mut e.acct);
                let vm = e.acct.vm;
                st.cpus[ci].run(id, now);
                self.set_corun(st, cpu, Some(vm), now);
                Ok(Dispatch {
                    kicks,
                    ..Dispatch::run(id, quantum)
                })
            }
            None => {
                // The scan above covered every queued entity and found none
                // allowed here, so under the global lock this CPU never idles
                // while an entity it may run waits (idle_while_waiting stays 0).
                st.cpus[ci].idle(now, false);
                self.set_corun(st, cpu, None, now);
                Ok(Dispatch {
                    kicks,
                    ..Dispatch::idle()
                })
            }
        }
    }

    fn set_priority(
        &self,
        id: EntityId,
        priority: u8,
        _now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _p = crate::profiler::scope("global_rr::set_priority");
        let mut st = self.state.lock();
        st.table.live_mut(id)?.acct.set_priority(priority)?;
        Ok(Vec::new())
    }

    fn set_class(
        &self,
        id: EntityId,
        class: SchedClass,
        priority: u8,
        _now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _p = crate::profiler::scope("global_rr::set_class");
        validate_priority(class, priority)?;
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let e = st.table.live_mut(id)?;
        let (old, state) = (e.acct.class, e.acct.state());
        e.acct.class = class;
        e.acct.priority = priority;
        let near = e.acct.last_cpu().unwrap_or(CpuId(0));
        if state != RunState::Ready {
            return Ok(Vec::new());
        }
        // Into its new class's FIFO, and kicked as on a wake (a new
        // realtime entity preempts a timeshare one).
        st.ready.remove(id, old);
        st.ready.push_back(id, class);
        Ok(self.kick_for(st, id, near, false).into_iter().collect())
    }

    fn set_affinity(
        &self,
        id: EntityId,
        affinity: CpuSet,
        _now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _p = crate::profiler::scope("global_rr::set_affinity");
        let affinity = validate_affinity(&affinity, &self.topology)?;
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let e = st.table.live_mut(id)?;
        e.affinity = affinity;
        let near = e.acct.last_cpu().unwrap_or(CpuId(0));
        match e.acct.state() {
            // It leaves a CPU it may no longer use at that CPU's next call.
            RunState::Running(c) if !e.affinity.contains(c) => Ok(vec![c]),
            RunState::Ready => Ok(self.kick_for(st, id, near, false).into_iter().collect()),
            _ => Ok(Vec::new()),
        }
    }

    fn mode(&self) -> Mode {
        self.current_mode()
    }

    /// The quantum follows at the next dispatch; placement has no mode.
    fn set_mode(&self, mode: Mode, _now: Nanos) -> Vec<CpuId> {
        self.mode.set(mode);
        Vec::new()
    }

    fn set_cpu_enabled(
        &self,
        cpu: CpuId,
        enabled: bool,
        _now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _p = crate::profiler::scope("global_rr::set_cpu_enabled");
        if self.topology.cpu(cpu).is_none() {
            return Err(SchedError::UnknownCpu(cpu));
        }
        let mut st = self.state.lock();
        let ci = cpu.0 as usize;
        let serving = st.in_service.iter().filter(|on| **on).count();
        if !service_change(cpu, st.in_service[ci], serving, enabled)? {
            return Ok(Vec::new());
        }
        st.in_service[ci] = enabled;
        // Out of service: what it runs leaves at its next call, which also
        // kicks a CPU for it. Back: it looks at the queue.
        st.cpus[ci].kick_pending = true;
        Ok(vec![cpu])
    }

    /// Recorded but without effect: this policy has no idle-core search.
    fn set_idle_core_search(&self, on: bool) {
        self.idle_core_search.store(on, Ordering::Relaxed);
    }

    fn ready_wait(&self, id: EntityId, now: Nanos) -> Option<Nanos> {
        let st = self.state.lock();
        st.table.get(id).map(|e| e.acct.ready_wait_at(now))
    }

    fn snapshot(&self, now: Nanos) -> SchedSnapshot {
        let _p = crate::profiler::scope("global_rr::snapshot");
        let st = self.state.lock();
        let core_of = |c: CpuId| self.topology.cpus[c.0 as usize].core;
        let entities: Vec<EntityStats> = st
            .table
            .iter()
            .map(|e| {
                let mut row = e.acct.stats(now);
                row.core = row.cpu.map(core_of);
                row.affinity = e.affinity.clone();
                row
            })
            .collect();
        let cpus = self
            .topology
            .cpus
            .iter()
            .map(|info| {
                let mut s = st.cpus[info.id.0 as usize].stats(now);
                let core = &self.topology.cores[info.core.0 as usize];
                s.smt_corun_foreign =
                    st.cores[info.core.0 as usize].foreign(info.smt_index as usize, now);
                s.core_load =
                    utilisation(core.cpus.iter().map(|c| st.cpus[c.0 as usize].times(now)));
                s.in_service = st.in_service[info.id.0 as usize];
                s.running_priority = s
                    .running
                    .and_then(|r| st.table.get(r))
                    .map(|r| r.acct.priority);
                s
            })
            .collect();
        // One queue: a core's ready count is what waits that may run on it.
        let cores = self
            .topology
            .cores
            .iter()
            .map(|core| {
                let allowed = |e: &&EntityStats| core.cpus.iter().any(|c| e.affinity.contains(*c));
                CoreStats {
                    core: core.id,
                    ready: entities
                        .iter()
                        .filter(|e| e.state == EntityState::Waiting)
                        .filter(allowed)
                        .count() as u32,
                    running: core
                        .cpus
                        .iter()
                        .filter(|c| st.cpus[c.0 as usize].current().is_some())
                        .count() as u32,
                    load: utilisation(core.cpus.iter().map(|c| st.cpus[c.0 as usize].times(now))),
                }
            })
            .collect();
        SchedSnapshot {
            mode: self.current_mode(),
            now,
            policy: "global-rr".into(),
            entities,
            cpus,
            cores,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, add, ts};
    use crate::{SchedClass, VcpuScheduler, VmId};
    use proptest::prelude::*;

    const US: Nanos = 1_000;

    fn sched(spec: &str) -> GlobalRoundRobin {
        GlobalRoundRobin::new(Topology::from_spec(spec).unwrap(), SchedConfig::default()).unwrap()
    }

    #[test]
    fn basic_wake_schedule_block_cycle() {
        let s = sched("1x2x1");
        let e = ts(&s, "0-1");
        // Starts blocked: nothing to run.
        assert_eq!(
            s.schedule(CpuId(0), 0, StopReason::Idle).unwrap().entity,
            None
        );
        let d = s.wake(e, 10 * US).unwrap().unwrap();
        assert_eq!(d, WakeDecision::new(CpuId(0), true));
        assert_eq!(s.wake(e, 11 * US).unwrap(), None);
        let run = s
            .schedule(CpuId(0), 15 * US, StopReason::Preempted)
            .unwrap();
        assert_eq!(run, Dispatch::run(e, 1000 * US));
        let idle = s.schedule(CpuId(0), 215 * US, StopReason::Blocked).unwrap();
        assert_eq!(idle, Dispatch::idle());
        let snap = s.snapshot(300 * US);
        let es = &snap.entities[0];
        assert_eq!((es.run_time, es.ready_wait), (200 * US, 5 * US));
        assert_eq!((es.wakes, es.blocks), (1, 1));
        assert_eq!(es.wake_latency.count, 1);
        assert_eq!(es.wake_latency.max, 5 * US);
        let c0 = &snap.cpus[0];
        assert_eq!((c0.busy_time, c0.idle_time), (200 * US, 100 * US));
        assert_eq!((c0.dispatches, c0.context_switches), (1, 1));
        assert_eq!(snap.policy, "global-rr");
        assert_eq!(s.name(), "global-rr");
    }

    #[test]
    fn wake_prefers_last_then_other_idle_cpu_and_never_double_kicks() {
        let s = sched("1x2x1");
        let (a, b, c) = (ts(&s, "0-1"), ts(&s, "0-1"), ts(&s, "0-1"));
        s.wake(a, 0).unwrap();
        s.schedule(CpuId(0), 0, StopReason::Idle).unwrap();
        // CPU 0 busy: b goes to idle CPU 1.
        assert_eq!(
            s.wake(b, 1).unwrap().unwrap(),
            WakeDecision::new(CpuId(1), true)
        );
        // CPU 1 already kicked: c just waits (last CPU = first of its affinity).
        assert_eq!(
            s.wake(c, 2).unwrap().unwrap(),
            WakeDecision::new(CpuId(0), false)
        );
        assert_eq!(
            s.schedule(CpuId(1), 3, StopReason::Preempted)
                .unwrap()
                .entity,
            Some(b)
        );
        // When b blocks, CPU 1 picks the waiting c right away.
        assert_eq!(
            s.schedule(CpuId(1), 10, StopReason::Blocked)
                .unwrap()
                .entity,
            Some(c)
        );
        s.schedule(CpuId(1), 20, StopReason::Blocked).unwrap();
        // CPU 0 still runs a; b goes back to its last CPU, 1, now idle.
        assert_eq!(
            s.wake(b, 30).unwrap().unwrap(),
            WakeDecision::new(CpuId(1), true)
        );
    }

    #[test]
    fn affinity_is_never_violated() {
        let s = sched("1x2x2");
        let pinned = ts(&s, "3");
        s.wake(pinned, 0).unwrap();
        for cpu in 0..3 {
            assert_eq!(
                s.schedule(CpuId(cpu), 1, StopReason::Idle).unwrap().entity,
                None
            );
        }
        assert_eq!(
            s.schedule(CpuId(3), 2, StopReason::Idle).unwrap().entity,
            Some(pinned)
        );
        let snap = s.snapshot(3);
        // The waiting entity was not allowed on CPUs 0-2.
        assert_eq!(snap.total_idle_while_waiting(), 0);
    }

    #[test]
    fn wake_pending_keeps_entity_runnable() {
        let s = sched("1x1x1");
        let e = ts(&s, "0");
        s.wake(e, 0).unwrap();
        assert_eq!(
            s.schedule(CpuId(0), 0, StopReason::Idle).unwrap().entity,
            Some(e)
        );
        // The guest executed HLT but an interrupt arrived before the block was reported.
        assert_eq!(s.wake(e, 50).unwrap(), None);
        assert_eq!(
            s.schedule(CpuId(0), 60, StopReason::Blocked)
                .unwrap()
                .entity,
            Some(e)
        );
        // Without a new wake, the next block sticks.
        assert_eq!(
            s.schedule(CpuId(0), 70, StopReason::Blocked)
                .unwrap()
                .entity,
            None
        );
        let es = &s.snapshot(80).entities[0];
        assert_eq!((es.wakes, es.blocks), (2, 1));
    }

    #[test]
    fn round_robin_order_and_fixed_quantum() {
        let s = sched("1x1x1");
        let ids: Vec<EntityId> = (0..3).map(|_| ts(&s, "0")).collect();
        for (i, id) in ids.iter().enumerate() {
            s.wake(*id, i as u64).unwrap();
        }
        let mut order = Vec::new();
        let mut reason = StopReason::Idle;
        for k in 0..7u64 {
            let d = s.schedule(CpuId(0), 10 + k * 1000 * US, reason).unwrap();
            assert_eq!(d.quantum, 1000 * US);
            order.push(d.entity.unwrap());
            reason = StopReason::QuantumEnd;
        }
        let want: Vec<EntityId> = ids.iter().cycle().take(7).copied().collect();
        assert_eq!(order, want);
        let snap = s.snapshot(10 + 7 * 1000 * US);
        assert_eq!(snap.entities[0].quantum_ends, 2);
        assert_eq!(snap.entities[0].migrations.same_cpu, 2);
        assert_eq!(snap.cpus[0].context_switches, 7);
    }

    #[test]
    fn preempted_entity_keeps_remaining_quantum_and_its_turn() {
        let s = sched("1x1x1");
        let (a, b) = (ts(&s, "0"), ts(&s, "0"));
        s.wake(a, 0).unwrap();
        s.schedule(CpuId(0), 0, StopReason::Idle).unwrap();
        s.wake(b, 10).unwrap();
        // A spurious kick: a goes back to the head and continues.
        let d = s
            .schedule(CpuId(0), 300 * US, StopReason::Preempted)
            .unwrap();
        assert_eq!(d, Dispatch::run(a, 700 * US));
        let d = s
            .schedule(CpuId(0), 1000 * US, StopReason::QuantumEnd)
            .unwrap();
        assert_eq!(d, Dispatch::run(b, 1000 * US));
        let snap = s.snapshot(1000 * US);
        assert_eq!(snap.entities[0].preemptions, 1);
        assert_eq!(snap.entities[0].quantum_ends, 1);
        // Nearly used up: a fresh quantum instead of a sliver.
        let d = s
            .schedule(CpuId(0), 1990 * US, StopReason::Preempted)
            .unwrap();
        assert_eq!(d, Dispatch::run(b, 1000 * US));
    }

    #[test]
    fn realtime_runs_before_timeshare_before_idle_and_preempts() {
        let s = sched("1x1x1");
        let idle = add(&s, SchedClass::Idle, 0, "0");
        let t = ts(&s, "0");
        let rt = add(&s, SchedClass::Realtime, 110, "0");
        s.wake(idle, 0).unwrap();
        s.wake(t, 1).unwrap();
        assert_eq!(
            s.schedule(CpuId(0), 2, StopReason::Idle).unwrap().entity,
            Some(t)
        );
        // A realtime wake kicks the CPU running timeshare.
        assert_eq!(
            s.wake(rt, 3).unwrap().unwrap(),
            WakeDecision::new(CpuId(0), true)
        );
        assert_eq!(
            s.schedule(CpuId(0), 4, StopReason::Preempted)
                .unwrap()
                .entity,
            Some(rt)
        );
        assert_eq!(
            s.schedule(CpuId(0), 5, StopReason::Blocked).unwrap().entity,
            Some(t)
        );
        assert_eq!(
            s.schedule(CpuId(0), 6, StopReason::Blocked).unwrap().entity,
            Some(idle)
        );
        // A timeshare wake does not preempt timeshare, but does preempt idle class.
        assert_eq!(
            s.wake(t, 7).unwrap().unwrap(),
            WakeDecision::new(CpuId(0), true)
        );
    }

    #[test]
    fn removal_of_running_entity_and_id_reuse() {
        let s = sched("1x1x1");
        let (a, b) = (ts(&s, "0"), ts(&s, "0"));
        s.wake(a, 0).unwrap();
        s.wake(b, 0).unwrap();
        assert_eq!(
            s.schedule(CpuId(0), 0, StopReason::Idle).unwrap().entity,
            Some(a)
        );
        s.remove_entity(a, 5).unwrap();
        assert_eq!(s.wake(a, 6), Err(SchedError::StaleEntity(a)));
        // The id is not reused while CPU 0 still runs it.
        let c = ts(&s, "0");
        assert_ne!(c, a);
        assert_eq!(
            s.schedule(CpuId(0), 10, StopReason::QuantumEnd)
                .unwrap()
                .entity,
            Some(b)
        );
        // Its slot is reused, under a new generation: `a` stays stale.
        let d = ts(&s, "0");
        assert_eq!(d.index(), a.index());
        assert_ne!(d, a);
        assert_eq!(s.wake(a, 11), Err(SchedError::StaleEntity(a)));
        s.remove_entity(b, 11).unwrap(); // running again: zombie
        s.remove_entity(c, 11).unwrap(); // blocked
        assert_eq!(s.snapshot(12).entities.len(), 1);
        assert_eq!(
            s.schedule(CpuId(0), 12, StopReason::Blocked)
                .unwrap()
                .entity,
            None
        );
        s.check().unwrap();
    }

    #[test]
    fn errors_on_bad_input() {
        let s = GlobalRoundRobin::new(
            Topology::from_spec("1x2x1").unwrap(),
            SchedConfig {
                max_entities: 2,
                ..SchedConfig::default()
            },
        )
        .unwrap();
        let e = ts(&s, "0-1");
        let ghost = EntityId::new(7, 0);
        assert_eq!(s.wake(ghost, 0), Err(SchedError::UnknownEntity(ghost)));
        assert_eq!(
            s.remove_entity(ghost, 0),
            Err(SchedError::UnknownEntity(ghost))
        );
        assert_eq!(
            s.set_priority(ghost, 10, 0),
            Err(SchedError::UnknownEntity(ghost))
        );
        assert_eq!(
            s.schedule(CpuId(2), 0, StopReason::Idle),
            Err(SchedError::UnknownCpu(CpuId(2)))
        );
        assert!(matches!(
            s.set_priority(e, 100, 0),
            Err(SchedError::BadPriority { .. })
        ));
        s.set_priority(e, 20, 0).unwrap();
        assert_eq!(s.snapshot(0).entities[0].base_priority, 20);
        let bad = |class, priority, aff: &str| {
            s.add_entity(
                EntitySpec {
                    vm: VmId(0),
                    class,
                    priority,
                    affinity: CpuSet::parse_list(aff).unwrap(),
                },
                0,
            )
        };
        assert_eq!(
            bad(SchedClass::Timeshare, 10, "5"),
            Err(SchedError::EmptyAffinity)
        );
        assert_eq!(
            bad(SchedClass::Timeshare, 10, ""),
            Err(SchedError::EmptyAffinity)
        );
        assert!(matches!(
            bad(SchedClass::Timeshare, 0, "0"),
            Err(SchedError::BadPriority { .. })
        ));
        assert!(matches!(
            bad(SchedClass::Realtime, 10, "0"),
            Err(SchedError::BadPriority { .. })
        ));
        ts(&s, "0-1");
        assert_eq!(
            bad(SchedClass::Timeshare, 10, "0"),
            Err(SchedError::TooManyEntities(2))
        );
        s.remove_entity(e, 0).unwrap();
        assert_eq!(s.remove_entity(e, 0), Err(SchedError::StaleEntity(e)));
        ts(&s, "0-1");
        s.set_idle_core_search(false);
        assert!(GlobalRoundRobin::new(
            Topology::from_spec("1x1x1").unwrap(),
            SchedConfig {
                max_entities: 0,
                ..SchedConfig::default()
            }
        )
        .is_err());
    }

    #[test]
    fn migrations_and_smt_corun_are_counted() {
        let s = sched("1x2x2");
        let a = ts(&s, "0-3");
        let b = s
            .add_entity(
                EntitySpec {
                    vm: VmId(1),
                    class: SchedClass::Timeshare,
                    priority: 10,
                    affinity: CpuSet::first_n(4),
                },
                0,
            )
            .unwrap();
        s.wake(a, 0).unwrap();
        s.schedule(CpuId(0), 0, StopReason::Idle).unwrap();
        s.schedule(CpuId(0), 10, StopReason::Yielded).unwrap(); // a again, same CPU
        s.schedule(CpuId(0), 20, StopReason::Blocked).unwrap();
        s.wake(a, 30).unwrap();
        assert_eq!(
            s.schedule(CpuId(1), 30, StopReason::Idle).unwrap().entity,
            Some(a)
        );
        // b on the sibling CPU 0, a foreign VM: co-run time counts on both.
        s.wake(b, 40).unwrap();
        assert_eq!(
            s.schedule(CpuId(0), 40, StopReason::Idle).unwrap().entity,
            Some(b)
        );
        s.schedule(CpuId(1), 100, StopReason::Blocked).unwrap();
        s.wake(a, 110).unwrap();
        assert_eq!(
            s.schedule(CpuId(2), 110, StopReason::Idle).unwrap().entity,
            Some(a)
        );
        let snap = s.snapshot(200);
        let m = snap.entities[0].migrations;
        assert_eq!((m.same_cpu, m.smt_sibling, m.same_llc), (1, 1, 1));
        assert_eq!(snap.cpus[0].smt_corun_foreign, 60);
        assert_eq!(snap.cpus[1].smt_corun_foreign, 60);
        assert_eq!(snap.cpus[2].smt_corun_foreign, 0);
        assert!(snap.to_table().contains("global-rr"));
    }

    #[test]
    fn concurrent_events_from_many_threads() {
        let s = std::sync::Arc::new(sched("1x2x2"));
        let ids: Vec<EntityId> = (0..6).map(|_| ts(&*s, "0-3")).collect();
        let handles: Vec<_> = (0..4u32)
            .map(|cpu| {
                let (s, ids) = (s.clone(), ids.clone());
                std::thread::spawn(move || {
                    let mut reason = StopReason::Idle;
                    for k in 0..2000u64 {
                        let _ = s.wake(ids[(k as usize * 5 + cpu as usize) % 6], k).unwrap();
                        let d = s.schedule(CpuId(cpu), k, reason).unwrap();
                        reason = match (d.entity, k % 3) {
                            (None, _) => StopReason::Idle,
                            (Some(_), 0) => StopReason::Blocked,
                            (Some(_), 1) => StopReason::QuantumEnd,
                            _ => StopReason::Preempted,
                        };
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        s.check().unwrap();
        assert_eq!(s.snapshot(10_000).total_idle_while_waiting(), 0);
    }

    #[test]
    fn stale_handles_are_refused() {
        testkit::stale_handles_are_refused(crate::PolicyKind::GlobalRoundRobin);
    }

    #[test]
    fn snapshot_says_where_entities_are() {
        testkit::snapshot_says_where_entities_are(crate::PolicyKind::GlobalRoundRobin);
    }

    #[test]
    fn built_by_the_factory() {
        testkit::built_by_the_factory(crate::PolicyKind::GlobalRoundRobin, "global-rr");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn random_event_sequences_keep_invariants(
            topo in testkit::topology(),
            specs in testkit::specs(),
            ops in testkit::ops(),
        ) {
            let s = GlobalRoundRobin::new(topo.clone(), SchedConfig::default()).unwrap();
            testkit::drive(&s, &topo, &specs, &ops, &|| s.check())?;
            // Under the global lock a CPU never idles while an allowed entity waits.
            prop_assert_eq!(s.snapshot(u64::MAX / 2).total_idle_while_waiting(), 0);
        }
    }
}
