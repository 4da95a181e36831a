//! Static pinning: every entity gets one home CPU when it is added and only
//! ever runs there (what users do with `taskset`, one vCPU per CPU).
//!
//! Rules:
//! - `add_entity` assigns the home CPU among the entity's affinity: the
//!   least-populated CPU, ties broken round robin (a cursor moves past the
//!   last CPU chosen), so there is one entity per CPU while CPUs remain;
//! - each CPU has its own ready queue (one FIFO per class: realtime, then
//!   timeshare, then idle) and its own lock; an entity's state lives under
//!   its home CPU's lock, so no event takes a global lock;
//! - no balancing, no migration: a CPU idles while its own queue is empty,
//!   even when other CPUs' entities wait (counted as idle-while-waiting when
//!   their affinity allows this CPU);
//! - the quantum is fixed: the mode's `base_quantum`; a preempted entity
//!   keeps the unused part and goes back to the head of its queue (no
//!   ready-count cap, so a wake never shortens the runner's quantum:
//!   `shorten_quantum` is None);
//! - a wake kicks the home CPU only when it is idle;
//! - changes while running: an entity whose home leaves its affinity gets
//!   a new home (the least-populated allowed CPU in service; a running one
//!   when its CPU stops it); a CPU out of service hands its entities to
//!   new homes the same way and, back in service, gets them back; a class
//!   change moves a waiting entity to its new class's FIFO; the mode
//!   switches the quantum. A move holds both CPUs' locks, lower index
//!   first.

use super::baseline::{
    service_change, utilisation, ClassFifo, CoreCorun, CpuAccount, EntityAccount, ModeCell,
    RunState,
};
use crate::stats::{CoreStats, EntityState};
use crate::tunables::{Mode, Tunables};
use crate::validate::{
    validate_affinity, validate_config, validate_priority, validate_spec, validate_topology,
};
use crate::{
    CpuId, CpuSet, Dispatch, EntityId, EntitySpec, Nanos, SchedClass, SchedConfig, SchedError,
    SchedSnapshot, StopReason, Topology, WakeDecision,
};
use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Home part of a `homes` value for an unused entity slot.
const NO_HOME: u32 = u32::MAX;

/// One entity, kept under its home CPU's lock.
#[derive(Debug)]
struct Entity {
    acct: EntityAccount,
    affinity: CpuSet,
    /// Removed while running: dropped when the CPU next calls `schedule`.
    removed: bool,
    /// The home it had before that CPU left service (it returns there
    /// when the CPU comes back).
    displaced_from: Option<usize>,
}

/// Per-CPU state, under that CPU's lock.
#[derive(Debug)]
struct PinCpu {
    ready: ClassFifo,
    /// Its entities (boxed: the latency histogram makes them ~2 KiB).
    entities: HashMap<EntityId, Box<Entity>>,
    acct: CpuAccount,
}

/// Entity id allocation and home assignment (add/remove only).
#[derive(Debug)]
struct Alloc {
    free: Vec<u32>,
    next: u32,
    /// Entities assigned to each CPU.
    assigned: Vec<u32>,
    /// Round-robin cursor: the search for a home starts at this CPU.
    cursor: u32,
}

/// The static pinning policy (see the module documentation).
pub struct StaticPinning {
    topology: Topology,
    /// Both modes' quantum tables (the mode picks one, `set_mode` switches).
    tunables: Tunables,
    mode: ModeCell,
    max_entities: usize,
    idle_core_search: AtomicBool,
    /// Per entity slot: its generation (high 32 bits, bumped when its
    /// entity is removed) and its entity's home CPU (low 32 bits,
    /// `NO_HOME` when unused).
    homes: Vec<AtomicU64>,
    alloc: Mutex<Alloc>,
    cpus: Vec<Mutex<PinCpu>>,
    /// SMT co-run accounting per core (locked after a CPU lock, never before).
    cores: Vec<Mutex<CoreCorun>>,
    /// Ready entities per CPU, read without locks by idle CPUs.
    queued: Vec<AtomicU32>,
    /// Idle-while-waiting events per CPU (observed after its lock is released).
    idle_while_waiting: Vec<AtomicU64>,
    /// Per CPU: in service (`set_cpu_enabled`). Out of service a CPU runs
    /// nothing; its entities get new homes where their affinity allows.
    in_service: Vec<AtomicBool>,
}

impl StaticPinning {
    /// A scheduler for `topology`. Uses `config.mode`'s base and minimal
    /// quantum and `config.max_entities` (1..=2^24); the other settings do
    /// not apply to this policy (SMT isolation is refused).
    pub fn new(topology: Topology, config: SchedConfig) -> Result<Self, SchedError> {
        validate_topology(&topology)?;
        validate_config(&config, super::PolicyKind::StaticPinning)?;
        let n = topology.num_cpus();
        Ok(StaticPinning {
            tunables: config.tunables,
            mode: ModeCell::new(config.mode),
            max_entities: config.max_entities,
            idle_core_search: AtomicBool::new(config.idle_core_search),
            homes: (0..config.max_entities)
                .map(|_| AtomicU64::new(u64::from(NO_HOME)))
                .collect(),
            alloc: Mutex::new(Alloc {
                free: Vec::new(),
                next: 0,
                assigned: vec![0; n],
                cursor: 0,
            }),
            cpus: topology
                .cpus
                .iter()
                .map(|c| {
                    Mutex::new(PinCpu {
                        ready: ClassFifo::default(),
                        entities: HashMap::new(),
                        acct: CpuAccount::new(c.id),
                    })
                })
                .collect(),
            cores: topology
                .cores
                .iter()
                .map(|c| Mutex::new(CoreCorun::new(c.cpus.len())))
                .collect(),
            queued: (0..n).map(|_| AtomicU32::new(0)).collect(),
            idle_while_waiting: (0..n).map(|_| AtomicU64::new(0)).collect(),
            in_service: (0..n).map(|_| AtomicBool::new(true)).collect(),
            topology,
        })
    }

    /// The home CPU of an entity id, if the id names a live entity.
    fn home(&self, id: EntityId) -> Result<usize, SchedError> {
        let Some(v) = self
            .homes
            .get(id.index() as usize)
            .map(|h| h.load(Ordering::Acquire))
        else {
            return Err(SchedError::UnknownEntity(id));
        };
        let (generation, home) = ((v >> 32) as u32, v as u32);
        if generation != id.generation() {
            return Err(SchedError::for_handle(id, generation));
        }
        if home == NO_HOME {
            return Err(SchedError::UnknownEntity(id));
        }
        Ok(home as usize)
    }

    /// The entity of `id` is removed: its handle is stale from now on.
    fn retire(&self, id: EntityId) {
        if let Some(h) = self.homes.get(id.index() as usize) {
            let next = u64::from(id.generation().wrapping_add(1));
            h.store(next << 32 | u64::from(NO_HOME), Ordering::Release);
        }
    }

    /// Return a (retired) entity slot to the allocator.
    fn release(&self, index: u32, home: usize) {
        let mut a = self.alloc.lock();
        if let Some(n) = a.assigned.get_mut(home) {
            *n = n.saturating_sub(1);
        }
        a.free.push(index);
    }

    /// The slice to grant: what is left of the quantum, or a fresh one.
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

    fn cpu_in_service(&self, cpu: usize) -> bool {
        self.in_service[cpu].load(Ordering::Acquire)
    }

    /// The home of `id`, locked, with the entity in it. A move between
    /// homes holds both CPUs' locks and updates the home between, so if
    /// the entity is not where its home said, the home moved: read again.
    fn lock_home(&self, id: EntityId) -> Result<(usize, MutexGuard<'_, PinCpu>), SchedError> {
        loop {
            let home = self.home(id)?;
            let pc = self.cpus[home].lock();
            match pc.entities.get(&id) {
                Some(e) if !e.removed => return Ok((home, pc)),
                _ if self.home(id)? != home => continue,
                _ => return Err(SchedError::StaleEntity(id)),
            }
        }
    }

    /// Give `id`, homed on `from`, a new home: the least-populated CPU in
    /// service of its affinity (not `from`); if none is in service and
    /// `from` is not allowed any more, the least-populated allowed CPU out
    /// of service (it waits there). Not while it runs (its CPU calls this
    /// after stopping it). Returns the new home to kick if the entity waits
    /// there and it is idle. `None`: it stays, or it runs, or it is gone.
    fn rehome(&self, id: EntityId, from: usize) -> Option<CpuId> {
        let affinity = {
            let pc = self.cpus[from].lock();
            let e = pc.entities.get(&id).filter(|e| !e.removed)?;
            e.affinity.clone()
        };
        let to = {
            let a = self.alloc.lock();
            let others = || affinity.iter().map(|c| c.0 as usize).filter(|c| *c != from);
            match others()
                .filter(|c| self.cpu_in_service(*c))
                .min_by_key(|c| (a.assigned[*c], *c))
            {
                Some(c) => c,
                // No other allowed CPU in service: wait for `from` if it
                // is allowed, else for an allowed CPU out of service (a
                // home outside the affinity would run it there).
                None if affinity.contains(CpuId(from as u32)) => return None,
                None => others().min_by_key(|c| (a.assigned[*c], *c))?,
            }
        };
        self.move_home(id, from, to)
    }

    /// Move `id` (not running) from home `from` to home `to`; see `rehome`.
    fn move_home(&self, id: EntityId, from: usize, to: usize) -> Option<CpuId> {
        // Both locks, lower index first (the only place two are held).
        let (mut lo, mut hi) = (
            self.cpus[from.min(to)].lock(),
            self.cpus[from.max(to)].lock(),
        );
        let (src, dst) = if from < to {
            (&mut *lo, &mut *hi)
        } else {
            (&mut *hi, &mut *lo)
        };
        let e = src.entities.get(&id).filter(|e| !e.removed)?;
        if matches!(e.acct.state(), RunState::Running(_)) || !e.affinity.contains(CpuId(to as u32))
        {
            return None;
        }
        let mut e = src.entities.remove(&id)?;
        // Out of service homes are remembered so the entity returns there.
        e.displaced_from = match e.displaced_from {
            Some(h) if h == to => None,
            Some(h) => Some(h),
            None if !self.cpu_in_service(from) => Some(from),
            None => None,
        };
        let ready = e.acct.state() == RunState::Ready;
        if ready && src.ready.remove(id, e.acct.class) {
            self.queued[from].fetch_sub(1, Ordering::Relaxed);
            dst.ready.push_back(id, e.acct.class);
            self.queued[to].fetch_add(1, Ordering::Relaxed);
        }
        dst.entities.insert(id, e);
        self.homes[id.index() as usize].store(
            u64::from(id.generation()) << 32 | to as u64,
            Ordering::Release,
        );
        {
            let mut a = self.alloc.lock();
            a.assigned[from] = a.assigned[from].saturating_sub(1);
            a.assigned[to] += 1;
        }
        let kick = ready && dst.acct.is_free_idle() && self.cpu_in_service(to);
        if kick {
            dst.acct.kick_pending = true;
        }
        kick.then_some(CpuId(to as u32))
    }

    /// New homes for every entity of `from` that may run elsewhere (`from`
    /// left service); returns the CPUs to kick.
    fn rehome_all(&self, from: usize) -> Vec<CpuId> {
        let ids: Vec<EntityId> = self.cpus[from].lock().entities.keys().copied().collect();
        let mut kicks: Vec<CpuId> = ids
            .into_iter()
            .filter_map(|id| self.rehome(id, from))
            .collect();
        kicks.sort_unstable();
        kicks.dedup();
        kicks
    }

    /// `cpu` is back in service: the entities that left it when it went
    /// out return (those not running now; a running one returns when its
    /// CPU stops it).
    fn return_home(&self, cpu: usize) -> Vec<CpuId> {
        let mut kicks = Vec::new();
        for from in (0..self.cpus.len()).filter(|c| *c != cpu) {
            let ids: Vec<EntityId> = self.cpus[from]
                .lock()
                .entities
                .iter()
                .filter(|(_, e)| e.displaced_from == Some(cpu))
                .map(|(id, _)| *id)
                .collect();
            kicks.extend(
                ids.into_iter()
                    .filter_map(|id| self.move_home(id, from, cpu)),
            );
        }
        kicks.dedup();
        kicks
    }

    /// Whether an entity queued on another CPU could run on `cpu`.
    fn someone_waits_for(&self, cpu: CpuId) -> bool {
        (0..self.cpus.len()).any(|d| {
            if d == cpu.0 as usize || self.queued[d].load(Ordering::Relaxed) == 0 {
                return false;
            }
            let pc = self.cpus[d].lock();
            let found = pc.ready.iter().any(|id| {
                pc.entities
                    .get(&id)
                    .is_some_and(|e| e.affinity.contains(cpu))
            });
            found
        })
    }

    /// Check the internal invariants; returns a description of the first
    /// violation. Used by the tests.
    #[cfg(test)]
    fn check(&self) -> Result<(), String> {
        for (ci, m) in self.cpus.iter().enumerate() {
            let pc = m.lock();
            let cpu = CpuId(ci as u32);
            let queued: Vec<EntityId> = pc.ready.iter().collect();
            if queued.len() != self.queued[ci].load(Ordering::Relaxed) as usize {
                return Err(format!("{cpu:?}: queued counter is off"));
            }
            for (id, e) in &pc.entities {
                // A removed entity still running here is retired already.
                let want = if e.removed {
                    u64::from(id.generation().wrapping_add(1)) << 32 | u64::from(NO_HOME)
                } else {
                    u64::from(id.generation()) << 32 | ci as u64
                };
                if self.homes[id.index() as usize].load(Ordering::Relaxed) != want {
                    return Err(format!("{id:?} lives on {cpu:?} but its home differs"));
                }
                let q = queued.iter().filter(|x| *x == id).count();
                let current = pc.acct.current() == Some(*id);
                let ok = match e.acct.state() {
                    RunState::Ready => q == 1 && !current && !e.removed,
                    // (It may run outside a changed affinity until its
                    // CPU's next `schedule`.)
                    RunState::Running(c) => q == 0 && current && c == cpu,
                    RunState::Blocked => q == 0 && !current && !e.removed,
                };
                if !ok {
                    return Err(format!(
                        "{id:?} on {cpu:?}: {:?}, queued {q}x, current {current}",
                        e.acct.state()
                    ));
                }
            }
            if queued.iter().any(|id| !pc.entities.contains_key(id)) {
                return Err(format!("{cpu:?} queues an unknown entity"));
            }
        }
        Ok(())
    }
}

impl super::VcpuScheduler for StaticPinning {
    fn name(&self) -> &'static str {
        "pinned"
    }

    fn topology(&self) -> &Topology {
        &self.topology
    }

    fn add_entity(&self, spec: EntitySpec, now: Nanos) -> Result<EntityId, SchedError> {
        let _p = crate::profiler::scope("static_pin::add_entity");
        let affinity = validate_spec(&spec, &self.topology)?;
        let (id, home) = {
            let mut a = self.alloc.lock();
            let index = match a.free.pop() {
                Some(i) => i,
                None if (a.next as usize) < self.max_entities => {
                    a.next += 1;
                    a.next - 1
                }
                None => return Err(SchedError::TooManyEntities(self.max_entities)),
            };
            // Least-populated CPU of the affinity, scanning from the cursor.
            let n = self.cpus.len() as u32;
            let cursor = a.cursor;
            let home = affinity
                .iter()
                .min_by_key(|c| (a.assigned[c.0 as usize], (c.0 + n - cursor % n) % n))
                .unwrap_or(CpuId(0));
            a.assigned[home.0 as usize] += 1;
            a.cursor = (home.0 + 1) % n;
            let generation = (self.homes[index as usize].load(Ordering::Acquire) >> 32) as u32;
            (EntityId::new(index, generation), home)
        };
        self.cpus[home.0 as usize].lock().entities.insert(
            id,
            Box::new(Entity {
                acct: EntityAccount::new(id, &spec, now),
                affinity,
                removed: false,
                displaced_from: None,
            }),
        );
        self.homes[id.index() as usize].store(
            u64::from(id.generation()) << 32 | u64::from(home.0),
            Ordering::Release,
        );
        Ok(id)
    }

    fn remove_entity(&self, id: EntityId, _now: Nanos) -> Result<(), SchedError> {
        let _p = crate::profiler::scope("static_pin::remove_entity");
        let (home, mut pc) = self.lock_home(id)?;
        {
            let Some(e) = pc.entities.get_mut(&id) else {
                return Err(SchedError::StaleEntity(id));
            };
            self.retire(id);
            match e.acct.state() {
                RunState::Running(_) => {
                    // Its CPU frees the slot at its next `schedule`.
                    e.removed = true;
                    return Ok(());
                }
                RunState::Ready => {
                    let class = e.acct.class;
                    if pc.ready.remove(id, class) {
                        self.queued[home].fetch_sub(1, Ordering::Relaxed);
                    }
                }
                RunState::Blocked => {}
            }
            pc.entities.remove(&id);
        }
        drop(pc);
        self.release(id.index(), home);
        Ok(())
    }

    fn wake(&self, id: EntityId, now: Nanos) -> Result<Option<WakeDecision>, SchedError> {
        let _p = crate::profiler::scope("static_pin::wake");
        let (home, mut guard) = self.lock_home(id)?;
        let pc = &mut *guard;
        let Some(e) = pc.entities.get_mut(&id) else {
            return Err(SchedError::StaleEntity(id));
        };
        if !e.acct.wake(now) {
            return Ok(None);
        }
        pc.ready.push_back(id, e.acct.class);
        self.queued[home].fetch_add(1, Ordering::Relaxed);
        let kick = pc.acct.is_free_idle() && self.cpu_in_service(home);
        if kick {
            pc.acct.kick_pending = true;
        }
        Ok(Some(WakeDecision::new(CpuId(home as u32), kick)))
    }

    /// No placement to make near the waker: every entity has its home.
    fn wake_by(
        &self,
        id: EntityId,
        waker: EntityId,
        now: Nanos,
    ) -> Result<Option<WakeDecision>, SchedError> {
        self.home(waker)?;
        self.wake(id, now)
    }

    fn schedule(&self, cpu: CpuId, now: Nanos, reason: StopReason) -> Result<Dispatch, SchedError> {
        let _p = crate::profiler::scope("static_pin::schedule");
        let ci = cpu.0 as usize;
        let info = self.topology.cpu(cpu).ok_or(SchedError::UnknownCpu(cpu))?;
        let mut freed = None;
        let mut moved = None;
        let in_service = self.cpu_in_service(ci);
        let dispatch = {
            let mut guard = self.cpus[ci].lock();
            let pc = &mut *guard;
            pc.acct.kick_pending = false;

            // Account the stop of whatever ran here.
            if let Some(cur) = pc.acct.current() {
                match pc.entities.get_mut(&cur) {
                    Some(e) if e.removed => {
                        pc.entities.remove(&cur);
                        freed = Some(cur);
                    }
                    Some(e) if e.acct.state() == RunState::Running(cpu) => {
                        let back = e.displaced_from.filter(|h| {
                            self.cpu_in_service(*h) && e.affinity.contains(CpuId(*h as u32))
                        });
                        if !in_service || !e.affinity.contains(cpu) || back.is_some() {
                            // Its home left service or its affinity, or its
                            // old home is back: it moves once this CPU's
                            // lock is released.
                            moved = Some((cur, back));
                        }
                        if e.acct.stop(now, reason) {
                            let class = e.acct.class;
                            if matches!(reason, StopReason::Preempted | StopReason::Idle) {
                                pc.ready.push_front(cur, class);
                            } else {
                                e.acct.slice_used = 0;
                                pc.ready.push_back(cur, class);
                            }
                            self.queued[ci].fetch_add(1, Ordering::Relaxed);
                        } else {
                            e.acct.slice_used = 0;
                        }
                    }
                    _ => {}
                }
            }

            // Pick from the own queue only (nothing out of service), an
            // entity allowed here (one whose affinity just changed moves).
            let picked = in_service.then(|| {
                let entities = &pc.entities;
                pc.ready
                    .pop_first(|id| entities.get(&id).is_some_and(|e| e.affinity.contains(cpu)))
            });
            let picked = picked.flatten().and_then(|id| {
                self.queued[ci].fetch_sub(1, Ordering::Relaxed);
                let e = pc.entities.get_mut(&id)?;
                e.acct.dispatch(cpu, now, &self.topology);
                Some((id, self.slice(&mut e.acct), e.acct.vm))
            });
            let vm = picked.map(|(_, _, vm)| vm);
            match picked {
                Some((id, _, _)) => pc.acct.run(id, now),
                // Whether another CPU's entity could run here is checked
                // below, without holding this CPU's lock.
                None => pc.acct.idle(now, false),
            }
            self.cores[info.core.0 as usize]
                .lock()
                .set(info.smt_index as usize, vm, now);
            match picked {
                Some((id, quantum, _)) => Dispatch::run(id, quantum),
                None => Dispatch::idle(),
            }
        };
        let mut dispatch = dispatch;
        if in_service && dispatch.entity.is_none() && self.someone_waits_for(cpu) {
            self.idle_while_waiting[ci].fetch_add(1, Ordering::Relaxed);
        }
        if let Some(id) = freed {
            self.release(id.index(), ci);
        }
        if !in_service {
            dispatch.kicks = self.rehome_all(ci);
        } else if let Some((id, back)) = moved {
            let kick = match back {
                Some(h) => self.move_home(id, ci, h),
                None => self.rehome(id, ci),
            };
            dispatch.kicks.extend(kick);
        }
        Ok(dispatch)
    }

    fn set_priority(
        &self,
        id: EntityId,
        priority: u8,
        _now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _p = crate::profiler::scope("static_pin::set_priority");
        let (_, mut pc) = self.lock_home(id)?;
        let Some(e) = pc.entities.get_mut(&id) else {
            return Err(SchedError::StaleEntity(id));
        };
        e.acct.set_priority(priority)?;
        Ok(Vec::new())
    }

    fn set_class(
        &self,
        id: EntityId,
        class: SchedClass,
        priority: u8,
        _now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _p = crate::profiler::scope("static_pin::set_class");
        validate_priority(class, priority)?;
        let (_, mut guard) = self.lock_home(id)?;
        let pc = &mut *guard;
        let Some(e) = pc.entities.get_mut(&id) else {
            return Err(SchedError::StaleEntity(id));
        };
        let old = e.acct.class;
        e.acct.class = class;
        e.acct.priority = priority;
        // Into its new class's FIFO on its home (which a wake already
        // kicked if it was idle).
        if e.acct.state() == RunState::Ready && pc.ready.remove(id, old) {
            pc.ready.push_back(id, class);
        }
        Ok(Vec::new())
    }

    fn set_affinity(
        &self,
        id: EntityId,
        affinity: CpuSet,
        _now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _p = crate::profiler::scope("static_pin::set_affinity");
        let affinity = validate_affinity(&affinity, &self.topology)?;
        let (home, mut pc) = self.lock_home(id)?;
        let Some(e) = pc.entities.get_mut(&id) else {
            return Err(SchedError::StaleEntity(id));
        };
        e.affinity = affinity;
        if e.affinity.contains(CpuId(home as u32)) {
            return Ok(Vec::new());
        }
        if matches!(e.acct.state(), RunState::Running(_)) {
            // Its CPU moves it when it stops it.
            return Ok(vec![CpuId(home as u32)]);
        }
        drop(pc);
        Ok(self.rehome(id, home).into_iter().collect())
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
        let _p = crate::profiler::scope("static_pin::set_cpu_enabled");
        let ci = cpu.0 as usize;
        if ci >= self.cpus.len() {
            return Err(SchedError::UnknownCpu(cpu));
        }
        // One change of service at a time (the last-CPU check).
        let _changing = self.alloc.lock();
        let serving = self
            .in_service
            .iter()
            .filter(|c| c.load(Ordering::Acquire))
            .count();
        if !service_change(cpu, self.cpu_in_service(ci), serving, enabled)? {
            return Ok(Vec::new());
        }
        self.in_service[ci].store(enabled, Ordering::SeqCst);
        drop(_changing);
        // Back in service: it runs what stayed homed on it and what left
        // it. Out: its entities move (what it runs, when it stops it: it
        // is kicked).
        let mut kicks = vec![cpu];
        if enabled {
            kicks.extend(self.return_home(ci));
        } else {
            kicks.extend(self.rehome_all(ci));
        }
        kicks.sort_unstable();
        kicks.dedup();
        Ok(kicks)
    }

    /// Recorded but without effect: this policy never searches for CPUs.
    fn set_idle_core_search(&self, on: bool) {
        self.idle_core_search.store(on, Ordering::Relaxed);
    }

    fn ready_wait(&self, id: EntityId, now: Nanos) -> Option<Nanos> {
        let home = self.home(id).ok()?;
        let pc = self.cpus[home].lock();
        pc.entities
            .get(&id)
            .filter(|e| !e.removed)
            .map(|e| e.acct.ready_wait_at(now))
    }

    fn snapshot(&self, now: Nanos) -> SchedSnapshot {
        let _p = crate::profiler::scope("static_pin::snapshot");
        let mut entities = Vec::new();
        let mut cpus = Vec::with_capacity(self.cpus.len());
        let mut times = Vec::with_capacity(self.cpus.len());
        let mut waiting = vec![0u32; self.cpus.len()];
        for (ci, m) in self.cpus.iter().enumerate() {
            let pc = m.lock();
            let home = CpuId(ci as u32);
            let core = self.topology.cpus[ci].core;
            entities.extend(pc.entities.values().filter(|e| !e.removed).map(|e| {
                let mut row = e.acct.stats(now);
                if row.state == EntityState::Waiting {
                    // It waits in its home's queue.
                    row.cpu = Some(home);
                }
                row.core = row.cpu.map(|_| core);
                row.affinity = e.affinity.clone();
                row
            }));
            let mut s = pc.acct.stats(now);
            s.idle_while_waiting = self.idle_while_waiting[ci].load(Ordering::Relaxed);
            s.running_priority = s
                .running
                .and_then(|r| pc.entities.get(&r))
                .map(|e| e.acct.priority);
            waiting[ci] = pc.ready.len() as u32;
            times.push(pc.acct.times(now));
            cpus.push(s);
        }
        for (s, info) in cpus.iter_mut().zip(&self.topology.cpus) {
            let core = &self.topology.cores[info.core.0 as usize];
            s.smt_corun_foreign = self.cores[info.core.0 as usize]
                .lock()
                .foreign(info.smt_index as usize, now);
            s.core_load = utilisation(core.cpus.iter().map(|c| times[c.0 as usize]));
            s.in_service = self.cpu_in_service(info.id.0 as usize);
        }
        let cores = self
            .topology
            .cores
            .iter()
            .map(|core| CoreStats {
                core: core.id,
                ready: core.cpus.iter().map(|c| waiting[c.0 as usize]).sum(),
                running: core
                    .cpus
                    .iter()
                    .filter(|c| cpus[c.0 as usize].running.is_some())
                    .count() as u32,
                load: utilisation(core.cpus.iter().map(|c| times[c.0 as usize])),
            })
            .collect();
        entities.sort_by_key(|e| e.id);
        SchedSnapshot {
            mode: self.current_mode(),
            now,
            policy: "pinned".into(),
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

    fn sched(spec: &str) -> StaticPinning {
        StaticPinning::new(Topology::from_spec(spec).unwrap(), SchedConfig::default()).unwrap()
    }

    /// The home CPU assigned at `add_entity`.
    fn home_of(s: &StaticPinning, id: EntityId) -> CpuId {
        CpuId(s.home(id).unwrap() as u32)
    }

    #[test]
    fn one_entity_per_cpu_then_round_robin_over_least_populated() {
        let s = sched("1x2x2");
        let ids: Vec<EntityId> = (0..6).map(|_| ts(&s, "0-3")).collect();
        let homes: Vec<u32> = ids.iter().map(|id| home_of(&s, *id).0).collect();
        assert_eq!(homes, vec![0, 1, 2, 3, 0, 1]);
        // Affinity limits the choice; least populated of {2, 3} is 2.
        assert_eq!(home_of(&s, ts(&s, "2-3")), CpuId(2));
        assert_eq!(home_of(&s, ts(&s, "2-3")), CpuId(3));
        // Removing frees the place: CPU 1 is now the least populated.
        s.remove_entity(ids[1], 0).unwrap();
        s.remove_entity(ids[5], 0).unwrap();
        assert_eq!(home_of(&s, ts(&s, "0-3")), CpuId(1));
    }

    #[test]
    fn basic_cycle_and_kick_only_when_idle() {
        let s = sched("1x2x1");
        let (a, b) = (ts(&s, "0-1"), ts(&s, "0-1"));
        let c = ts(&s, "0-1"); // home 0, behind a
        assert_eq!(
            s.wake(a, 0).unwrap().unwrap(),
            WakeDecision::new(CpuId(0), true)
        );
        // CPU 0 already kicked: no second kick.
        assert_eq!(
            s.wake(c, 1).unwrap().unwrap(),
            WakeDecision::new(CpuId(0), false)
        );
        assert_eq!(
            s.schedule(CpuId(0), 10, StopReason::Idle).unwrap(),
            Dispatch::run(a, 1000 * US)
        );
        assert_eq!(
            s.wake(b, 20).unwrap().unwrap(),
            WakeDecision::new(CpuId(1), true)
        );
        assert_eq!(
            s.schedule(CpuId(0), 1010, StopReason::QuantumEnd)
                .unwrap()
                .entity,
            Some(c)
        );
        assert_eq!(
            s.schedule(CpuId(0), 1500, StopReason::Blocked)
                .unwrap()
                .entity,
            Some(a)
        );
        assert_eq!(
            s.schedule(CpuId(0), 1600, StopReason::Blocked)
                .unwrap()
                .entity,
            None
        );
        let snap = s.snapshot(2000);
        assert_eq!(snap.policy, "pinned");
        let ea = &snap.entities[0];
        assert_eq!(
            (ea.run_time, ea.wakes, ea.blocks, ea.quantum_ends),
            (1000 + 100, 1, 1, 1)
        );
        assert_eq!(ea.ready_wait, 10 + 490);
        assert_eq!(snap.cpus[0].dispatches, 3);
        assert_eq!(snap.cpus[0].context_switches, 3);
        assert_eq!(snap.cpus[0].busy_time, 1590);
    }

    #[test]
    fn never_migrates_and_counts_idle_while_waiting() {
        let s = sched("1x2x1");
        let (a, b, c) = (ts(&s, "0-1"), ts(&s, "0-1"), ts(&s, "0-1"));
        assert_eq!(
            (home_of(&s, a), home_of(&s, b), home_of(&s, c)),
            (CpuId(0), CpuId(1), CpuId(0))
        );
        s.wake(a, 0).unwrap();
        s.wake(c, 0).unwrap();
        assert_eq!(
            s.schedule(CpuId(0), 0, StopReason::Idle).unwrap().entity,
            Some(a)
        );
        // CPU 1 idles although c (allowed on CPU 1) waits on CPU 0.
        for t in 1..4 {
            assert_eq!(
                s.schedule(CpuId(1), t, StopReason::Idle).unwrap().entity,
                None
            );
        }
        assert_eq!(s.snapshot(5).cpus[1].idle_while_waiting, 3);
        assert_eq!(s.snapshot(5).total_idle_while_waiting(), 3);
        for t in 0..10 {
            let d = s
                .schedule(CpuId(0), 10 + t, StopReason::QuantumEnd)
                .unwrap();
            assert!(d.entity == Some(a) || d.entity == Some(c));
        }
        let snap = s.snapshot(100);
        for e in &snap.entities {
            assert_eq!(e.migrations.total(), 0, "{:?} migrated", e.id);
        }
        // A CPU whose own entity waits is not "idle while waiting" for a pinned-away entity.
        let pinned = ts(&s, "0");
        s.wake(pinned, 100).unwrap();
        s.schedule(CpuId(1), 101, StopReason::Idle).unwrap();
        assert_eq!(s.snapshot(102).cpus[1].idle_while_waiting, 4); // c still waits on CPU 0
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
        assert_eq!(s.wake(e, 5).unwrap(), None);
        assert_eq!(
            s.schedule(CpuId(0), 6, StopReason::Blocked).unwrap().entity,
            Some(e)
        );
        assert_eq!(
            s.schedule(CpuId(0), 7, StopReason::Blocked).unwrap().entity,
            None
        );
    }

    #[test]
    fn preempted_keeps_quantum_and_classes_are_ordered() {
        let s = sched("1x1x1");
        let t = ts(&s, "0");
        let i = add(&s, SchedClass::Idle, 0, "0");
        let r = add(&s, SchedClass::Realtime, 120, "0");
        s.wake(i, 0).unwrap();
        s.wake(t, 0).unwrap();
        assert_eq!(
            s.schedule(CpuId(0), 0, StopReason::Idle).unwrap().entity,
            Some(t)
        );
        // No kick while busy (static pinning never preempts on wake).
        assert_eq!(
            s.wake(r, 100 * US).unwrap().unwrap(),
            WakeDecision::new(CpuId(0), false)
        );
        assert_eq!(
            s.schedule(CpuId(0), 400 * US, StopReason::Preempted)
                .unwrap()
                .entity,
            Some(r)
        );
        let d = s.schedule(CpuId(0), 500 * US, StopReason::Blocked).unwrap();
        assert_eq!(d, Dispatch::run(t, 600 * US));
        assert_eq!(
            s.schedule(CpuId(0), 600 * US, StopReason::Blocked)
                .unwrap()
                .entity,
            Some(i)
        );
        assert_eq!(s.snapshot(700 * US).entities[0].preemptions, 1);
    }

    #[test]
    fn removal_of_running_entity_frees_slot_at_schedule() {
        let s = sched("1x1x1");
        let a = ts(&s, "0");
        s.wake(a, 0).unwrap();
        s.schedule(CpuId(0), 0, StopReason::Idle).unwrap();
        s.remove_entity(a, 1).unwrap();
        assert_eq!(s.remove_entity(a, 1), Err(SchedError::StaleEntity(a)));
        assert_eq!(s.wake(a, 1), Err(SchedError::StaleEntity(a)));
        let b = ts(&s, "0");
        assert_ne!(a, b);
        assert!(s.snapshot(2).entities.iter().all(|e| e.id != a));
        assert_eq!(
            s.schedule(CpuId(0), 3, StopReason::QuantumEnd)
                .unwrap()
                .entity,
            None
        );
        // The slot is free again, and reused under a new generation.
        let c = ts(&s, "0");
        assert_eq!(c.index(), a.index());
        assert_ne!(c, a);
        s.check().unwrap();
    }

    #[test]
    fn errors_on_bad_input() {
        let s = StaticPinning::new(
            Topology::from_spec("1x2x1").unwrap(),
            SchedConfig {
                max_entities: 2,
                ..SchedConfig::default()
            },
        )
        .unwrap();
        let e = ts(&s, "1");
        let ghost = EntityId::new(1, 0);
        let far = EntityId::new(1 << 20, 0);
        for g in [ghost, far] {
            assert_eq!(s.wake(g, 0), Err(SchedError::UnknownEntity(g)));
            assert_eq!(s.remove_entity(g, 0), Err(SchedError::UnknownEntity(g)));
            assert_eq!(s.set_priority(g, 10, 0), Err(SchedError::UnknownEntity(g)));
        }
        assert_eq!(
            s.schedule(CpuId(9), 0, StopReason::Idle),
            Err(SchedError::UnknownCpu(CpuId(9)))
        );
        assert!(matches!(
            s.set_priority(e, 0, 0),
            Err(SchedError::BadPriority { .. })
        ));
        s.set_priority(e, 30, 0).unwrap();
        assert_eq!(s.snapshot(0).entities[0].base_priority, 30);
        let spec = |aff: &str| EntitySpec {
            vm: VmId(0),
            class: SchedClass::Timeshare,
            priority: 10,
            affinity: CpuSet::parse_list(aff).unwrap(),
        };
        assert_eq!(s.add_entity(spec("4-5"), 0), Err(SchedError::EmptyAffinity));
        ts(&s, "0");
        assert_eq!(
            s.add_entity(spec("0"), 0),
            Err(SchedError::TooManyEntities(2))
        );
        s.set_idle_core_search(true);
        assert_eq!(s.name(), "pinned");
        assert_eq!(s.topology().num_cpus(), 2);
        for max in [0, usize::MAX] {
            let cfg = SchedConfig {
                max_entities: max,
                ..SchedConfig::default()
            };
            assert!(StaticPinning::new(Topology::from_spec("1x1x1").unwrap(), cfg).is_err());
        }
    }

    #[test]
    fn concurrent_events_from_many_threads() {
        let s = std::sync::Arc::new(sched("1x4x1"));
        let ids: Vec<EntityId> = (0..8).map(|_| ts(&*s, "0-3")).collect();
        let handles: Vec<_> = (0..4u32)
            .map(|cpu| {
                let (s, ids) = (s.clone(), ids.clone());
                std::thread::spawn(move || {
                    let mut reason = StopReason::Idle;
                    for k in 0..2000u64 {
                        let _ = s.wake(ids[(k as usize * 7 + cpu as usize) % 8], k).unwrap();
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
        let snap = s.snapshot(10_000);
        assert!(snap.entities.iter().all(|e| e.migrations.total() == 0));
    }

    #[test]
    fn stale_handles_are_refused() {
        testkit::stale_handles_are_refused(crate::PolicyKind::StaticPinning);
    }

    #[test]
    fn snapshot_says_where_entities_are() {
        testkit::snapshot_says_where_entities_are(crate::PolicyKind::StaticPinning);
    }

    #[test]
    fn built_by_the_factory() {
        testkit::built_by_the_factory(crate::PolicyKind::StaticPinning, "pinned");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn random_event_sequences_keep_invariants(
            topo in testkit::topology(),
            specs in testkit::specs(),
            ops in testkit::ops(),
        ) {
            let s = StaticPinning::new(topo.clone(), SchedConfig::default()).unwrap();
            testkit::drive(&s, &topo, &specs, &ops, &|| s.check())?;
            // Entities move only when their home leaves service or their
            // affinity.
            let moved = ops
                .iter()
                .any(|(op, _)| matches!(op, testkit::Op::SetAffinity(..) | testkit::Op::SetCpu(..)));
            for e in s.snapshot(u64::MAX / 2).entities {
                prop_assert!(moved || e.migrations.total() == 0);
            }
        }
    }
}
