//! Bookkeeping of the comparison policies (`global-rr`, `pinned` and
//! `eevdf`).
//!
//! They implement the event protocol (see [`crate::policy`]) with plain
//! per-entity and per-CPU records and fill the same [`crate::SchedSnapshot`]
//! from them. The default policy keeps its own, lock-free-friendly
//! records (`entity`, `placement`); only the validation in
//! [`crate::validate`] is shared with it. This module holds:
//!
//! - [`EntityAccount`]: the Blocked / Ready / Running state machine of one
//!   entity with its timestamps and counters (run time, ready wait, wake
//!   latency histogram, migrations by distance, preemptions, quantum ends,
//!   blocks, wakes), including the wake-pending rule of the protocol;
//! - [`CpuAccount`]: what one logical CPU runs, with busy/idle time,
//!   dispatches, context switches, idle-while-waiting and its pending kick;
//! - [`CoreCorun`]: SMT co-run accounting (time a CPU ran one VM while a
//!   sibling ran another);
//! - [`ClassFifo`]: a ready queue with one FIFO per class (realtime, then
//!   timeshare, then idle), used by the baseline policies;
//! - [`EntityTable`]: the slots, generations and free list of the policies
//!   that keep every entity under one lock (`global-rr`, `eevdf`), with the
//!   rule that a slot removed while its entity runs is reused only after
//!   its CPU's next `schedule`.
//!
//! - the trait's bookkeeping the three share: [`ModeCell`] (the mode,
//!   recorded for the snapshot and read by the quantum),
//!   [`EntityAccount::set_priority`] (validate, record) and
//!   [`service_change`] (the checks before a CPU leaves or rejoins
//!   service).
//!
//! None of these types locks anything: the owning policy keeps them under
//! whatever lock protects the data they describe. Methods never panic on
//! inconsistent input (times running backwards saturate to zero; an
//! impossible transition is refused and reported through the return value).

use crate::stats::{CpuStats, EntityState, EntityStats, LatencyHistogram, MigrationCounts};
use crate::tunables::Mode;
use crate::{
    CpuId, CpuSet, EntityId, EntitySpec, Nanos, SchedClass, SchedError, StopReason, Topology, VmId,
};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};

/// A baseline policy's mode (`set_mode`, `mode`): recorded for the
/// snapshot; `global-rr` and `pinned` read their quantum from it, `eevdf`
/// has none.
#[derive(Debug)]
pub(crate) struct ModeCell(AtomicU8);

impl ModeCell {
    pub fn new(mode: Mode) -> ModeCell {
        ModeCell(AtomicU8::new(mode as u8))
    }

    pub fn get(&self) -> Mode {
        Mode::ALL[self.0.load(Ordering::Relaxed) as usize & 1]
    }

    pub fn set(&self, mode: Mode) {
        self.0.store(mode as u8, Ordering::Relaxed);
    }
}

/// The checks before `cpu` (in service now: `serving_now`; `serving` CPUs
/// in service in all) is taken out of service or put back: `Ok(false)`
/// when nothing changes, an error when it is the last CPU in service.
pub(crate) fn service_change(
    cpu: CpuId,
    serving_now: bool,
    serving: usize,
    enabled: bool,
) -> Result<bool, SchedError> {
    if serving_now == enabled {
        Ok(false)
    } else if !enabled && serving == 1 {
        Err(SchedError::LastCpuInService(cpu))
    } else {
        Ok(true)
    }
}

/// Order of the classes: 0 runs first (realtime), 2 last (idle).
pub(crate) fn class_rank(class: SchedClass) -> usize {
    match class {
        SchedClass::Realtime => 0,
        SchedClass::Timeshare => 1,
        SchedClass::Idle => 2,
    }
}

/// Where an entity is in the protocol's state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunState {
    /// Not runnable (the initial state, and after a `Blocked` stop).
    Blocked,
    /// Runnable and waiting in some queue of the policy.
    Ready,
    /// Running on this CPU.
    Running(CpuId),
}

/// The accounting state of one entity: state machine, timestamps and the
/// counters of [`EntityStats`].
///
/// Transitions (the policy moves the entity between its queues accordingly):
/// - [`wake`](Self::wake): Blocked -> Ready (returns `true`); on a Running
///   entity it sets the wake-pending flag (returns `false`), which stays set
///   (across quantum ends, preemptions and yields) until the next `Blocked`
///   stop consumes it, so a wake racing with a block is never lost;
/// - [`dispatch`](Self::dispatch): Ready -> Running, records ready wait,
///   wake latency and the migration distance from the previous CPU;
/// - [`stop`](Self::stop): Running -> Ready or Blocked, records run time and
///   the reason's counter; a `Blocked` stop with a pending wake stays Ready.
#[derive(Debug, Clone)]
pub(crate) struct EntityAccount {
    /// The entity.
    pub id: EntityId,
    /// Its VM.
    pub vm: VmId,
    /// Its class (changed by `set_class`).
    pub class: SchedClass,
    /// Its base priority.
    pub priority: u8,
    /// Time used of the current quantum: [`stop`](Self::stop) adds the run
    /// time; the policy resets it when it grants a fresh quantum.
    pub slice_used: Nanos,
    /// The slice granted at its last dispatch (the policy sets it).
    pub quantum: Nanos,
    state: RunState,
    /// When the current state began.
    since: Nanos,
    /// Time of the wake whose latency is measured at the next dispatch.
    wake_at: Option<Nanos>,
    /// Woken while running: the next `Blocked` stop keeps it runnable.
    wake_pending: bool,
    last_cpu: Option<CpuId>,
    run_time: Nanos,
    ready_wait: Nanos,
    sleep_time: Nanos,
    wake_latency: LatencyHistogram,
    migrations: MigrationCounts,
    preemptions: u64,
    quantum_ends: u64,
    blocks: u64,
    wakes: u64,
}

impl EntityAccount {
    /// `set_priority`: a priority of its class, recorded (the baselines
    /// schedule by class alone).
    pub fn set_priority(&mut self, priority: u8) -> Result<(), SchedError> {
        crate::validate::validate_priority(self.class, priority)?;
        self.priority = priority;
        Ok(())
    }

    /// A new, blocked entity.
    pub fn new(id: EntityId, spec: &EntitySpec, now: Nanos) -> Self {
        EntityAccount {
            id,
            vm: spec.vm,
            class: spec.class,
            priority: spec.priority,
            slice_used: 0,
            quantum: 0,
            state: RunState::Blocked,
            since: now,
            wake_at: None,
            wake_pending: false,
            last_cpu: None,
            run_time: 0,
            ready_wait: 0,
            sleep_time: 0,
            wake_latency: LatencyHistogram::new(),
            migrations: MigrationCounts::default(),
            preemptions: 0,
            quantum_ends: 0,
            blocks: 0,
            wakes: 0,
        }
    }

    /// Current state.
    pub fn state(&self) -> RunState {
        self.state
    }

    /// The CPU it last ran on (`None` before its first dispatch).
    pub fn last_cpu(&self) -> Option<CpuId> {
        self.last_cpu
    }

    /// Whether a wake arrived while it was running.
    #[allow(dead_code)] // shared API (tests and policies that inspect it)
    pub fn wake_pending(&self) -> bool {
        self.wake_pending
    }

    /// The wake event. Returns `true` if the entity went Blocked -> Ready
    /// (the policy must queue it), `false` if it already was runnable (a
    /// running entity remembers the wake for its next `Blocked` stop).
    pub fn wake(&mut self, now: Nanos) -> bool {
        match self.state {
            RunState::Blocked => {
                self.sleep_time += now.saturating_sub(self.since);
                self.enter(RunState::Ready, now);
                self.wake_at = Some(now);
                self.wakes += 1;
                true
            }
            RunState::Running(_) => {
                self.wake_pending = true;
                false
            }
            RunState::Ready => false,
        }
    }

    /// Ready -> Running on `cpu`. Returns `false` (and changes nothing) if
    /// the entity was not Ready.
    pub fn dispatch(&mut self, cpu: CpuId, now: Nanos, topology: &Topology) -> bool {
        if self.state != RunState::Ready {
            return false;
        }
        self.ready_wait += now.saturating_sub(self.since);
        if let Some(w) = self.wake_at.take() {
            self.wake_latency.record(now.saturating_sub(w));
        }
        if let Some(prev) = self.last_cpu {
            self.migrations.record(topology.distance(prev, cpu));
        }
        self.last_cpu = Some(cpu);
        self.enter(RunState::Running(cpu), now);
        true
    }

    /// Running -> stopped for `reason`. Returns `true` if it stays runnable
    /// (now Ready: the policy must queue it again), `false` if it is now
    /// Blocked. Counters: `QuantumEnd` -> quantum_ends, `Preempted` ->
    /// preemptions, `Blocked` -> blocks (unless a pending wake keeps it
    /// runnable: that counts as a wake at `now`, and the wake latency is
    /// measured from `now`). `Idle` for a running entity is a caller
    /// inconsistency; it is treated as `Preempted` so nothing is lost. A
    /// call on an entity that is not running changes nothing and returns
    /// whether it is runnable.
    pub fn stop(&mut self, now: Nanos, reason: StopReason) -> bool {
        if !matches!(self.state, RunState::Running(_)) {
            return self.state == RunState::Ready;
        }
        let ran = now.saturating_sub(self.since);
        self.run_time += ran;
        self.slice_used += ran;
        match reason {
            StopReason::QuantumEnd => self.quantum_ends += 1,
            StopReason::Preempted | StopReason::Idle => self.preemptions += 1,
            StopReason::Yielded => {}
            StopReason::Blocked => {
                if self.wake_pending {
                    self.wake_pending = false;
                    self.wakes += 1;
                    self.wake_at = Some(now);
                } else {
                    self.blocks += 1;
                    self.enter(RunState::Blocked, now);
                    return false;
                }
            }
        }
        self.enter(RunState::Ready, now);
        true
    }

    fn enter(&mut self, state: RunState, now: Nanos) {
        self.state = state;
        // Never move backwards: an event stamped a little earlier than the
        // previous one (clocks read on different threads) adds nothing.
        self.since = self.since.max(now);
    }

    /// Its ready wait at `now`, including a wait under way.
    pub fn ready_wait_at(&self, now: Nanos) -> Nanos {
        match self.state {
            RunState::Ready => self.ready_wait + now.saturating_sub(self.since),
            _ => self.ready_wait,
        }
    }

    /// Counters at `now`, including the time spent in the current state.
    /// `load` is the lifetime "load if it ran alone": run time over run plus
    /// blocked time, in 1/1000 (policies with a real estimate overwrite it).
    pub fn stats(&self, now: Nanos) -> EntityStats {
        let open = now.saturating_sub(self.since);
        let (mut run, mut wait, mut sleep) = (self.run_time, self.ready_wait, self.sleep_time);
        match self.state {
            RunState::Running(_) => run += open,
            RunState::Ready => wait += open,
            RunState::Blocked => sleep += open,
        }
        let load = (u128::from(run) * 1000)
            .checked_div(u128::from(run) + u128::from(sleep))
            .unwrap_or(0) as u32;
        let (state, cpu, used) = match self.state {
            RunState::Running(c) => (EntityState::Running, Some(c), self.slice_used + open),
            RunState::Ready => (EntityState::Waiting, None, self.slice_used),
            RunState::Blocked => (EntityState::Blocked, None, self.slice_used),
        };
        EntityStats {
            id: self.id,
            vm: self.vm,
            base_priority: self.priority,
            run_time: run,
            ready_wait: wait,
            wake_latency: self.wake_latency.summary(),
            migrations: self.migrations,
            preemptions: self.preemptions,
            quantum_ends: self.quantum_ends,
            boosted_wakes: 0,
            recent_share: 0,
            blocks: self.blocks,
            wakes: self.wakes,
            load,
            state,
            class: self.class,
            effective_priority: self.priority,
            penalty: 0,
            quantum: self.quantum,
            quantum_used: used,
            cpu,
            core: None,
            affinity: CpuSet::new(),
            weight: crate::shares::DEFAULT_WEIGHT,
            cap: None,
            reservation: 0,
            throttles: 0,
            throttled_time: 0,
            latency_bound: None,
            bound_budget: 0,
            bounded_wakes: 0,
            bound_misses: 0,
        }
    }
}

/// The accounting state of one logical CPU.
#[derive(Debug, Clone)]
pub(crate) struct CpuAccount {
    /// The CPU.
    pub cpu: CpuId,
    /// A wake kicked this CPU and it has not called `schedule` since (an
    /// idle CPU with a pending kick is already claimed).
    pub kick_pending: bool,
    current: Option<EntityId>,
    last_entity: Option<EntityId>,
    /// Start of the current busy or idle interval (`None` before the first event).
    since: Option<Nanos>,
    busy_time: Nanos,
    idle_time: Nanos,
    dispatches: u64,
    context_switches: u64,
    idle_while_waiting: u64,
}

impl CpuAccount {
    /// A new, idle CPU. Time is counted from its first event.
    pub fn new(cpu: CpuId) -> Self {
        CpuAccount {
            cpu,
            kick_pending: false,
            current: None,
            last_entity: None,
            since: None,
            busy_time: 0,
            idle_time: 0,
            dispatches: 0,
            context_switches: 0,
            idle_while_waiting: 0,
        }
    }

    /// The entity the CPU runs (it stays set, even for a removed entity,
    /// until the CPU calls `schedule`).
    pub fn current(&self) -> Option<EntityId> {
        self.current
    }

    /// Running nothing and not already claimed by a kick.
    pub fn is_free_idle(&self) -> bool {
        self.current.is_none() && !self.kick_pending
    }

    /// Close the current busy or idle interval at `now`.
    fn advance(&mut self, now: Nanos) {
        if let Some(s) = self.since {
            let dt = now.saturating_sub(s);
            if self.current.is_some() {
                self.busy_time += dt;
            } else {
                self.idle_time += dt;
            }
        }
        self.since = Some(self.since.map_or(now, |s| s.max(now)));
    }

    /// The CPU starts running `entity` at `now` (a dispatch; a context
    /// switch if it differs from the entity that ran here last).
    pub fn run(&mut self, entity: EntityId, now: Nanos) {
        self.advance(now);
        self.dispatches += 1;
        if self.last_entity != Some(entity) {
            self.context_switches += 1;
        }
        self.current = Some(entity);
        self.last_entity = Some(entity);
    }

    /// The CPU goes idle at `now`; `waiting` says whether an entity allowed
    /// on it was runnable and waiting at that moment.
    pub fn idle(&mut self, now: Nanos, waiting: bool) {
        self.advance(now);
        self.current = None;
        if waiting {
            self.idle_while_waiting += 1;
        }
    }

    /// Busy and idle time at `now`, including the open interval.
    pub fn times(&self, now: Nanos) -> (Nanos, Nanos) {
        let open = self.since.map_or(0, |s| now.saturating_sub(s));
        if self.current.is_some() {
            (self.busy_time + open, self.idle_time)
        } else {
            (self.busy_time, self.idle_time + open)
        }
    }

    /// Counters at `now`; `smt_corun_foreign` and `core_load` are left 0
    /// for the policy to fill.
    pub fn stats(&self, now: Nanos) -> CpuStats {
        let (busy, idle) = self.times(now);
        CpuStats {
            cpu: self.cpu,
            busy_time: busy,
            idle_time: idle,
            dispatches: self.dispatches,
            context_switches: self.context_switches,
            smt_corun_foreign: 0,
            idle_while_waiting: self.idle_while_waiting,
            core_load: 0,
            in_service: true,
            running: self.current,
            running_priority: None,
            quantum_cuts: 0,
            costops: 0,
            costarts: 0,
            directed_yields: 0,
            gathers: 0,
        }
    }
}

/// Mean utilisation of a group of CPUs in 1/1000 (busy / (busy + idle)),
/// the `core_load` of policies that do not estimate load.
pub(crate) fn utilisation(times: impl IntoIterator<Item = (Nanos, Nanos)>) -> u32 {
    let (mut busy, mut total) = (0u128, 0u128);
    for (b, i) in times {
        busy += u128::from(b);
        total += u128::from(b) + u128::from(i);
    }
    (busy * 1000).checked_div(total).unwrap_or(0) as u32
}

/// SMT co-run accounting of one core: for each SMT thread, the time it ran
/// an entity of one VM while a sibling ran an entity of another VM.
#[derive(Debug, Clone)]
pub(crate) struct CoreCorun {
    since: Option<Nanos>,
    running: Vec<Option<VmId>>,
    foreign: Vec<Nanos>,
}

impl CoreCorun {
    /// A core with `threads` SMT threads, all idle.
    pub fn new(threads: usize) -> Self {
        CoreCorun {
            since: None,
            running: vec![None; threads],
            foreign: vec![0; threads],
        }
    }

    /// Whether thread `i` co-runs with a foreign VM right now.
    fn is_foreign(&self, i: usize) -> bool {
        match self.running.get(i).copied().flatten() {
            Some(v) => self.running.iter().any(|w| w.is_some_and(|w| w != v)),
            None => false,
        }
    }

    fn close(&mut self, now: Nanos) {
        if let Some(s) = self.since {
            let dt = now.saturating_sub(s);
            if dt > 0 {
                for i in 0..self.running.len() {
                    if self.is_foreign(i) {
                        self.foreign[i] += dt;
                    }
                }
            }
        }
        self.since = Some(self.since.map_or(now, |s| s.max(now)));
    }

    /// SMT thread `smt` now runs an entity of `vm` (or nothing).
    pub fn set(&mut self, smt: usize, vm: Option<VmId>, now: Nanos) {
        self.close(now);
        if let Some(slot) = self.running.get_mut(smt) {
            *slot = vm;
        }
    }

    /// Foreign co-run time of thread `smt` at `now`, including the open interval.
    pub fn foreign(&self, smt: usize, now: Nanos) -> Nanos {
        let closed = self.foreign.get(smt).copied().unwrap_or(0);
        let open = match self.since {
            Some(s) if self.is_foreign(smt) => now.saturating_sub(s),
            _ => 0,
        };
        closed + open
    }
}

/// A ready queue with one FIFO per class: realtime entities come before
/// timeshare ones, which come before idle-class ones. Used by the baseline
/// policies; each entity must be queued at most once (the policy's state
/// machine guarantees it).
#[derive(Debug, Clone, Default)]
pub(crate) struct ClassFifo {
    queues: [VecDeque<EntityId>; 3],
}

impl ClassFifo {
    /// Append `id` at the tail of its class.
    pub fn push_back(&mut self, id: EntityId, class: SchedClass) {
        self.queues[class_rank(class)].push_back(id);
    }

    /// Put `id` at the head of its class (a preempted entity resumes first).
    pub fn push_front(&mut self, id: EntityId, class: SchedClass) {
        self.queues[class_rank(class)].push_front(id);
    }

    /// Remove `id` from its class queue; `false` if it was not there.
    pub fn remove(&mut self, id: EntityId, class: SchedClass) -> bool {
        let q = &mut self.queues[class_rank(class)];
        match q.iter().position(|e| *e == id) {
            Some(i) => q.remove(i).is_some(),
            None => false,
        }
    }

    /// Remove and return the first entity, in class order then FIFO order,
    /// that `allowed` accepts.
    pub fn pop_first(&mut self, mut allowed: impl FnMut(EntityId) -> bool) -> Option<EntityId> {
        for q in &mut self.queues {
            if let Some(i) = q.iter().position(|e| allowed(*e)) {
                return q.remove(i);
            }
        }
        None
    }

    /// Number of queued entities.
    #[allow(dead_code)] // shared API (tests and policies that inspect it)
    pub fn len(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    /// All queued entities, in pick order.
    pub fn iter(&self) -> impl Iterator<Item = EntityId> + '_ {
        self.queues.iter().flat_map(|q| q.iter().copied())
    }
}

/// An entity record kept in an [`EntityTable`]: it knows its handle.
pub(crate) trait Tabled {
    /// The handle it was added under.
    fn id(&self) -> EntityId;
}

/// A slot of an [`EntityTable`].
#[derive(Debug)]
pub(crate) enum Slot<E> {
    /// Unused (its index is on the free list).
    Free,
    /// A registered entity.
    Live(Box<E>),
    /// Removed while running: the slot is freed when its CPU calls
    /// `schedule`, so the index cannot be reused while a CPU still runs it.
    Zombie(EntityId),
}

/// The entity table of a policy that keeps everything under one lock:
/// slots indexed by [`EntityId::index`], the generation of each slot
/// (bumped when its entity is removed, so an old handle is
/// [`SchedError::StaleEntity`] for good) and a free list.
#[derive(Debug)]
pub(crate) struct EntityTable<E> {
    slots: Vec<Slot<E>>,
    generations: Vec<u32>,
    free: Vec<u32>,
    capacity: usize,
}

impl<E: Tabled> EntityTable<E> {
    /// An empty table that holds at most `capacity` entities.
    pub fn new(capacity: usize) -> Self {
        EntityTable {
            slots: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            capacity,
        }
    }

    /// The error for a handle that does not name a live entity.
    pub fn not_live(&self, id: EntityId) -> SchedError {
        match self.generations.get(id.index() as usize) {
            Some(&g) => SchedError::for_handle(id, g),
            None => SchedError::UnknownEntity(id),
        }
    }

    /// The live entity of `id`, or the error a caller gets for it.
    pub fn live(&self, id: EntityId) -> Result<&E, SchedError> {
        self.get(id).ok_or_else(|| self.not_live(id))
    }

    /// The live entity of `id`, mutable, or the error a caller gets for it.
    pub fn live_mut(&mut self, id: EntityId) -> Result<&mut E, SchedError> {
        let err = self.not_live(id);
        self.get_mut(id).ok_or(err)
    }

    /// The live entity of `id` (ids taken from a queue or a CPU).
    pub fn get(&self, id: EntityId) -> Option<&E> {
        match self.slots.get(id.index() as usize) {
            Some(Slot::Live(e)) if e.id() == id => Some(e),
            _ => None,
        }
    }

    /// The live entity of `id`, mutable.
    pub fn get_mut(&mut self, id: EntityId) -> Option<&mut E> {
        match self.slots.get_mut(id.index() as usize) {
            Some(Slot::Live(e)) if e.id() == id => Some(e),
            _ => None,
        }
    }

    /// Register the entity `make` builds for its new handle.
    pub fn insert(&mut self, make: impl FnOnce(EntityId) -> E) -> Result<EntityId, SchedError> {
        let index = match self.free.pop() {
            Some(i) => i,
            None if self.slots.len() < self.capacity => {
                self.slots.push(Slot::Free);
                self.generations.push(0);
                self.slots.len() as u32 - 1
            }
            None => return Err(SchedError::TooManyEntities(self.capacity)),
        };
        let id = EntityId::new(index, self.generations[index as usize]);
        self.slots[index as usize] = Slot::Live(Box::new(make(id)));
        Ok(id)
    }

    /// Remove the live entity of `id`: its handle is stale from now on.
    /// One that still `runs` keeps its slot until [`end_zombie`](Self::end_zombie).
    pub fn remove(&mut self, id: EntityId, runs: bool) {
        if let Some(g) = self.generations.get_mut(id.index() as usize) {
            *g = g.wrapping_add(1);
        }
        if runs {
            self.slots[id.index() as usize] = Slot::Zombie(id);
        } else {
            self.release(id.index());
        }
    }

    /// The CPU that ran `id` called `schedule`: if `id` was removed while
    /// running, free its slot now. Returns whether it was.
    pub fn end_zombie(&mut self, id: EntityId) -> bool {
        match self.slots.get(id.index() as usize) {
            Some(Slot::Zombie(z)) if *z == id => {
                self.release(id.index());
                true
            }
            _ => false,
        }
    }

    fn release(&mut self, index: u32) {
        if let Some(slot) = self.slots.get_mut(index as usize) {
            *slot = Slot::Free;
            self.free.push(index);
        }
    }

    /// The live entities, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = &E> + '_ {
        self.slots.iter().filter_map(|s| match s {
            Slot::Live(e) => Some(&**e),
            _ => None,
        })
    }

    /// Every slot with the handle its index and generation make (for the
    /// policies' invariant checks).
    #[cfg(test)]
    pub fn slots(&self) -> impl Iterator<Item = (EntityId, &Slot<E>)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .map(|(i, s)| (EntityId::new(i as u32, self.generations[i]), s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(vm: u32) -> EntitySpec {
        EntitySpec {
            vm: VmId(vm),
            class: SchedClass::Timeshare,
            priority: 10,
            affinity: CpuSet::first_n(4),
        }
    }

    #[test]
    fn entity_state_machine_and_counters() {
        let t = Topology::from_spec("1x2x2").unwrap();
        let mut e = EntityAccount::new(EntityId::new(0, 0), &spec(0), 0);
        assert_eq!(e.state(), RunState::Blocked);
        assert!(!e.dispatch(CpuId(0), 5, &t));
        assert!(e.wake(100));
        assert!(!e.wake(110));
        assert!(e.dispatch(CpuId(0), 150, &t));
        assert!(!e.wake(160)); // pending
        assert!(e.wake_pending());
        assert!(e.stop(400, StopReason::Blocked)); // stays runnable
        assert_eq!(e.state(), RunState::Ready);
        assert!(e.dispatch(CpuId(1), 450, &t));
        assert!(e.stop(500, StopReason::Preempted));
        assert!(e.dispatch(CpuId(2), 600, &t));
        assert!(e.stop(700, StopReason::QuantumEnd));
        assert!(e.dispatch(CpuId(2), 700, &t));
        assert!(!e.stop(800, StopReason::Blocked));
        assert_eq!(e.state(), RunState::Blocked);
        let s = e.stats(1000);
        assert_eq!(s.run_time, 250 + 50 + 100 + 100);
        assert_eq!(s.ready_wait, 50 + 50 + 100);
        assert_eq!(
            (s.wakes, s.blocks, s.preemptions, s.quantum_ends),
            (2, 1, 1, 1)
        );
        assert_eq!(s.wake_latency.count, 2);
        assert_eq!(s.wake_latency.max, 50);
        assert_eq!(s.migrations.smt_sibling, 1);
        assert_eq!(s.migrations.same_llc, 1);
        assert_eq!(s.migrations.same_cpu, 1);
        // 500 run, 100 + 200 asleep.
        assert_eq!(s.load, 500 * 1000 / 800);
        assert_eq!(e.slice_used, 500);
    }

    #[test]
    fn cpu_account_times_and_switches() {
        let mut c = CpuAccount::new(CpuId(0));
        c.idle(10, false);
        c.run(EntityId::new(1, 0), 30);
        c.run(EntityId::new(1, 0), 50);
        c.run(EntityId::new(2, 0), 60);
        c.idle(100, true);
        let s = c.stats(130);
        assert_eq!((s.busy_time, s.idle_time), (70, 20 + 30));
        assert_eq!(
            (s.dispatches, s.context_switches, s.idle_while_waiting),
            (3, 2, 1)
        );
        assert_eq!(utilisation([(70, 50), (0, 0)]), 583);
    }

    #[test]
    fn corun_counts_foreign_siblings_only() {
        let mut c = CoreCorun::new(2);
        c.set(0, Some(VmId(1)), 0);
        c.set(1, Some(VmId(1)), 10);
        c.set(1, Some(VmId(2)), 20);
        c.set(0, None, 50);
        assert_eq!(c.foreign(0, 100), 30);
        assert_eq!(c.foreign(1, 100), 30);
    }

    #[test]
    fn class_fifo_orders_by_class() {
        let mut q = ClassFifo::default();
        q.push_back(EntityId::new(1, 0), SchedClass::Idle);
        q.push_back(EntityId::new(2, 0), SchedClass::Timeshare);
        q.push_back(EntityId::new(3, 0), SchedClass::Timeshare);
        q.push_front(EntityId::new(4, 0), SchedClass::Timeshare);
        q.push_back(EntityId::new(5, 0), SchedClass::Realtime);
        let order: Vec<u32> = q.iter().map(|e| e.index()).collect();
        assert_eq!(order, vec![5, 4, 2, 3, 1]);
        assert!(q.remove(EntityId::new(4, 0), SchedClass::Timeshare));
        assert!(!q.remove(EntityId::new(4, 0), SchedClass::Timeshare));
        assert_eq!(q.pop_first(|e| e.index() != 5), Some(EntityId::new(2, 0)));
        assert_eq!(q.len(), 3);
    }
}
