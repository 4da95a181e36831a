//! The default policy: Haiku's scheduler (2014) adapted to vCPUs. This file
//! ties the concepts together; each lives in its own module:
//! entities and penalty cycling in `entity`, time slices in `quantum`, load
//! estimation in `load`, run queues in `run_queue`, CPU/core state, idle
//! search and stealing in `placement`, the two modes in `mode`.
//!
//! # Locks
//! * one lock per entity slot (a fixed-capacity slab allocated at `new`);
//! * one lock per core queue and one per logical CPU's pinned queue;
//! * per CPU: an accounting lock, taken only by that CPU's `schedule`
//!   (and `snapshot`);
//! * the free list of slots, taken only by `add_entity` / `remove_entity`
//!   and when the CPU holding a removed entity frees it.
//!
//! There is no global lock on wake / schedule / quantum-end paths.
//!
//! Lock order (outer first): CPU accounting lock -> entity slot lock ->
//! pinned queue of a CPU -> queue of that CPU's core -> free list.
//! At most one entity lock is held at a time, and no entity lock
//! is ever taken while a queue lock is held: a CPU pops an entry under the
//! queue lock, drops it, then locks the entity and checks (by sequence
//! number) that the entry is still current. While popped, the entity is
//! "in flight": others that find it missing from its queue leave it to the
//! popping CPU (which sees `removed`, a new priority, ...).
//!
//! # Affinity rule
//! An entity whose affinity covers every CPU of a core may sit in that
//! core's queue; one that covers only part of a core goes to the pinned
//! queue of one chosen allowed CPU (a one-CPU affinity always goes to its
//! CPU's pinned queue). Other CPUs steal only entries whose affinity
//! contains them, so an entity never runs outside its affinity.
//!
//! # No idle CPU while a vCPU waits
//! Idle CPUs publish themselves in per-LLC bitmaps; a waker claims one and
//! kicks it. The lost-wake-up race is closed Dekker-style: a waker enqueues,
//! fences, then searches the idle bitmaps; a CPU about to idle sets its
//! bit, fences, then looks at its queues and steals (nearest queues first,
//! only entries allowed on it). Either the waker sees the idle CPU (and
//! moves the entity there and kicks it) or the idler sees the entity.
//! When `schedule` leaves entities waiting (the entity it requeued behind a
//! better one, possibly rebalanced to another core's queue, or several
//! placed on this CPU at once) while an idle CPU could run them, it moves
//! each (up to `LEFTOVER_KICKS`) to such a CPU's queue and names the CPU in
//! [`Dispatch::kicks`]. Those CPUs stay available, so if a caller drops a
//! kick the next wake that finds them claims and kicks them. The bounded
//! window is therefore: until the kicked CPUs (wake kicks and dispatch
//! kicks) have called `schedule`; each of them
//! repeats the hand-over for what it leaves behind. Exceptions: with SMT
//! isolation a CPU may idle while only entities of a VM other than the one
//! its siblings run wait (force idle, which also bounds their wait); and a
//! CPU gives up after `MAX_PICK_ATTEMPTS` stale entries in one call (only
//! possible under heavy concurrent churn; the entries stay queued).
//!
//! # Mode and DESIGN details
//! * Penalty cancel: sleep longer than half the *mode's* base quantum
//!   (Haiku's `ShouldCancelPenalty`); it cancels the penalty, not the
//!   additional penalty (Haiku's `CancelPenalty`).
//! * A yield ends the quantum with its penalty (Haiku's `hasYielded`).
//! * The least-loaded-core choice reads at most `balance_candidates`
//!   cores' atomics (all of them on machines that small; else the origin,
//!   the LLCs' light cores and rotating windows), and a quantum end
//!   searches at most once per core and load epoch when nothing is worth
//!   a move (`mode::LowLatency::rebalance`).
//! * Nothing shared between CPUs is written on the hot path of a busy
//!   machine: no global counter or clock, per-CPU statistics summed by
//!   `snapshot`, per-CPU and per-core state on cache lines of its own;
//!   the shared bitmaps and counts change only when a CPU goes idle or
//!   busy or a queue empties or fills.
//! * `smt_corun_foreign` charges a whole run interval when a sibling ran
//!   another VM at its dispatch or at its stop (an upper bound).

//! # Starvation bound
//! Derived and checked in `tests/haiku_props.rs`: with only timeshare
//! entities and no wakes, a waiting entity W is passed at most P_X + 20
//! times by each other entity X (penalty cycle plus the quantum ends before
//! a hog's first load update ends its bursty status), so it waits at most
//! (sum_{X != W} (P_X + 20) + 1) * base_quantum * m1.
//!
//! # Bursty entities (beyond DESIGN)
//! A timeshare entity whose load estimate is at most `tunables::BURSTY_LOAD`
//! (375, FreeBSD ULE's interactivity threshold) is not penalised; this is
//! what lets the limited wake preemption help a bursty waker at all (see
//! `tunables::BURSTY_LOAD`).

use super::{SchedConfig, VcpuScheduler};
use crate::accounting::validate_priority as check_priority;
use crate::entity::{Entity, Priority, QueueRef, RunState};
use crate::load::CoreLoad;
use crate::mode::{ops_for, ModeOps};
use crate::placement::{Candidate, Machine, IDLE_PRIO, NO_ENTITY};
use crate::quantum::{full_quantum, time_left};
use crate::run_queue::QueueEntry;
use crate::stats::{CpuStats, EntityStats, SchedSnapshot};
use crate::tunables::{QuantumTable, Tunables};
use crate::{
    CoreId, CpuId, Dispatch, EntityId, EntitySpec, Nanos, SchedClass, SchedError, StopReason,
    Topology, WakeDecision,
};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// Upper bound on `max_entities` (memory of the slab; ids are u32).
const MAX_ENTITIES_LIMIT: usize = 1 << 24;
/// Stale or contended entries a CPU skips before giving up and idling for
/// this call (the entries are not lost: they stay queued or are requeued).
const MAX_PICK_ATTEMPTS: usize = 64;
/// Waiting entries a `schedule` call hands to idle CPUs (see `kick_for_leftovers`).
const LEFTOVER_KICKS: usize = 4;

/// One slot of the entity slab. `seq` survives reuse so stale queue
/// entries of a removed entity never match its successor.
#[derive(Debug, Default)]
struct Slot {
    seq: u64,
    entity: Option<Box<Entity>>,
}

#[derive(Debug, Default)]
struct FreeList {
    free: Vec<u32>,
    next: u32,
}

/// Per-CPU accounting (taken by that CPU's `schedule` and by `snapshot`).
#[derive(Debug, Default)]
struct CpuAcct {
    busy: Nanos,
    idle: Nanos,
    idle_since: Option<Nanos>,
    dispatches: u64,
    switches: u64,
    foreign: Nanos,
    idle_while_waiting: u64,
    last: Option<EntityId>,
    /// A sibling ran another VM when the current entity was dispatched.
    foreign_at_dispatch: bool,
    /// The last `schedule` idled on purpose (SMT isolation force idle).
    forced_idle: bool,
}

/// What happens to an entity that stopped running.
enum After {
    Block,
    Front,
    Back,
}

/// Result of looking at a CPU's own queues.
enum Local {
    Got(QueueEntry),
    Empty,
    /// SMT isolation: the best local entry belongs to another VM than the
    /// siblings run; idle instead of running something lower (force idle),
    /// so the siblings drain and that entry runs next.
    ForcedIdle,
}

/// The entity of a slot, unless the slot is free or its entity was removed.
fn live(entity: &mut Option<Box<Entity>>, id: EntityId) -> Result<&mut Entity, SchedError> {
    entity
        .as_deref_mut()
        .filter(|e| !e.removed)
        .ok_or(SchedError::UnknownEntity(id))
}

/// The Haiku-derived vCPU scheduler. See the module documentation.
#[derive(Debug)]
pub struct HaikuScheduler {
    m: Machine,
    table: QuantumTable,
    ops: Box<dyn ModeOps>,
    slots: Vec<Mutex<Slot>>,
    free: Mutex<FreeList>,
    /// Per CPU, each on its own cache lines.
    acct: Vec<CachePadded<Mutex<CpuAcct>>>,
    max_entities: usize,
}

impl HaikuScheduler {
    /// Build the policy for a topology; rejects inconsistent topologies and
    /// configurations.
    pub fn new(topology: Topology, config: SchedConfig) -> Result<Self, SchedError> {
        validate_topology(&topology)?;
        validate_config(&config)?;
        let table = *config.tunables.quantum_table(config.mode);
        let ncpus = topology.cpus.len();
        let m = Machine::new(
            topology,
            config.smt_isolation,
            config.idle_core_search,
            config.tunables.clone(),
        );
        Ok(HaikuScheduler {
            m,
            table,
            ops: ops_for(config.mode),
            slots: (0..config.max_entities)
                .map(|_| Mutex::new(Slot::default()))
                .collect(),
            free: Mutex::new(FreeList::default()),
            acct: (0..ncpus)
                .map(|_| CachePadded::new(Mutex::new(CpuAcct::default())))
                .collect(),
            max_entities: config.max_entities,
        })
    }

    /// The mode this instance runs in (fixed at construction).
    pub fn mode(&self) -> crate::Mode {
        self.ops.mode()
    }

    fn tun(&self) -> &Tunables {
        &self.m.tun
    }

    fn slot(&self, id: EntityId) -> Result<&Mutex<Slot>, SchedError> {
        self.slots
            .get(id.0 as usize)
            .ok_or(SchedError::UnknownEntity(id))
    }

    fn check_cpu(&self, cpu: CpuId) -> Result<(), SchedError> {
        if (cpu.0 as usize) < self.m.cpus.len() {
            Ok(())
        } else {
            Err(SchedError::UnknownCpu(cpu))
        }
    }

    fn core_load(&self, core: CoreId) -> &CoreLoad {
        &self.m.cores[core.0 as usize].load
    }

    fn core_of_queue(&self, q: QueueRef) -> CoreId {
        match q {
            QueueRef::Core(c) => c,
            QueueRef::Pinned(cpu) => self.m.core_of(cpu),
        }
    }

    fn free_slot(&self, id: EntityId, slot: &mut Slot) {
        slot.entity = None;
        self.free.lock().free.push(id.0);
    }

    // ---- load charging (Haiku's AddLoad / RemoveLoad with epochs) ----

    /// The entity is ready on `core`: charge its load there.
    fn charge_ready(&self, e: &mut Entity, core: CoreId) {
        let load = e.load.load;
        match e.load_core {
            Some(c) if c == core && e.load_ready => return,
            Some(c) if e.load_ready => {
                self.core_load(c).remove(e.charged, true);
                self.core_load(core).add(load, None);
            }
            Some(c) if c == core => {
                let left = e.load_epoch.map(|ep| (ep, e.charged));
                self.core_load(core).add(load, left);
            }
            _ => self.core_load(core).add(load, None),
        }
        e.load_core = Some(core);
        e.charged = load;
        e.load_ready = true;
    }

    /// The entity blocks: it stops being ready but keeps counting in the
    /// core's epoch sum until the epoch rolls.
    fn uncharge_block(&self, e: &mut Entity) {
        if let (Some(c), true) = (e.load_core, e.load_ready) {
            e.load_epoch = Some(self.core_load(c).remove(e.charged, false));
            e.load_ready = false;
        }
    }

    /// The entity is removed: it leaves the core's load at once.
    fn uncharge_remove(&self, e: &mut Entity) {
        if let (Some(c), true) = (e.load_core, e.load_ready) {
            self.core_load(c).remove(e.charged, true);
            e.load_ready = false;
        }
    }

    /// Fold measured time into the estimate and follow it on the core.
    fn refresh_load(&self, e: &mut Entity) {
        if !e.load.update(self.tun().load_measure_interval) {
            return;
        }
        if let (Some(c), true) = (e.load_core, e.load_ready) {
            self.core_load(c)
                .change(e.load.load as i64 - e.charged as i64);
            e.charged = e.load.load;
        }
    }

    // ---- placement ----

    /// Placement facts of an entity at `now`; `origin` overrides the
    /// previous CPU.
    fn candidate<'a>(
        &self,
        e: &'a Entity,
        id: EntityId,
        origin: Option<CpuId>,
        now: Nanos,
    ) -> Candidate<'a> {
        let prev = e.last_cpu;
        let first = e.affinity.first().unwrap_or(CpuId(0));
        let warm = prev.is_some_and(|p| {
            let active = self.m.cores[self.m.core_of(p).0 as usize]
                .active_time
                .load(Ordering::Relaxed);
            active.saturating_sub(e.last_core_active) < self.tun().cache_expire
        });
        Candidate {
            affinity: e.allowed(),
            vm: e.vm,
            class: e.prio.class,
            effective: e.prio.effective(),
            origin: origin.or(prev).unwrap_or(first),
            prev,
            warm,
            load: e.load.load,
            bursty: e.is_bursty(self.tun().bursty_load),
            now,
            rotor: (id.0 as usize)
                .wrapping_mul(7)
                .wrapping_add((e.counters.wakes + e.counters.quantum_ends) as usize),
        }
    }

    /// Target CPU of a waking entity and whether it must be kicked.
    fn choose_target(&self, e: &Entity, id: EntityId, now: Nanos) -> (CpuId, bool) {
        let _p = crate::profiler::scope("haiku::choose_target");
        let c = self.candidate(e, id, None, now);
        let delta = self.tun().wake_preempt_priority_delta;
        if let Some(p) = e.pinned_cpu() {
            let kick = self.m.try_claim(p, &c) || self.m.must_preempt(p, &c, delta);
            return (p, kick);
        }
        if let Some(cpu) = self.ops.find_idle(&self.m, &c, self.tun()) {
            return (cpu, true);
        }
        let core = match c.prev {
            Some(p) if c.warm => self
                .ops
                .rebalance(&self.m, &c, self.m.core_of(p), self.tun()),
            _ => self
                .ops
                .choose_core(&self.m, &c, self.tun())
                .unwrap_or(self.m.core_of(c.origin)),
        };
        let cpu = self.m.choose_cpu_in_core(core, &c).unwrap_or(c.origin);
        let kick = self.m.must_preempt(cpu, &c, delta);
        if !kick && c.class == SchedClass::Realtime {
            // Bounded latency: a realtime entity takes the allowed CPU
            // running the lowest priority anywhere, if it beats that.
            if let Some(low) = self.m.lowest_priority_cpu(&c) {
                if self.m.must_preempt(low, &c, delta) {
                    return (low, true);
                }
            }
        }
        (cpu, kick)
    }

    /// Put a runnable entity into a queue (state, load, queued entry).
    fn enqueue(&self, e: &mut Entity, id: EntityId, seq: &mut u64, q: QueueRef, front: bool) {
        *seq += 1;
        let level = e.prio.effective();
        let entry = QueueEntry {
            id,
            seq: *seq,
            level,
            since: e.queued_at,
            vm: e.vm,
            affinity: e.entry_affinity(),
        };
        self.charge_ready(e, self.core_of_queue(q));
        e.state = RunState::Queued {
            queue: q,
            seq: *seq,
            level,
        };
        self.m.push(q, entry, front);
    }

    /// Move a queued entity to the queue serving `cpu`; false if a CPU is
    /// popping it right now (then it is about to run anyway).
    fn move_queued(&self, e: &mut Entity, id: EntityId, seq: &mut u64, cpu: CpuId) -> bool {
        let RunState::Queued {
            queue,
            seq: s,
            level,
        } = e.state
        else {
            return false;
        };
        if !self.m.remove(queue, id, s, level) {
            return false;
        }
        let q = self.m.queue_for(e.allowed(), cpu);
        self.enqueue(e, id, seq, q, false);
        true
    }

    /// Place a waking entity and decide the kick. After enqueueing without
    /// a kick, search the idle bitmaps once more (the other half of the
    /// lost-wake-up protocol, see the module docs).
    fn place_woken(&self, e: &mut Entity, id: EntityId, seq: &mut u64, now: Nanos) -> WakeDecision {
        let _p = crate::profiler::scope("haiku::place_woken");
        let (cpu, kick) = self.choose_target(e, id, now);
        let q = self.m.queue_for(e.allowed(), cpu);
        self.m.roll(self.core_of_queue(q), now);
        e.queued_at = now;
        self.enqueue(e, id, seq, q, false);
        if kick {
            return WakeDecision { cpu, kick };
        }
        fence(Ordering::SeqCst);
        let idle = self.m.find_idle_cpu(&self.candidate(e, id, Some(cpu), now));
        match idle {
            Some(y) if self.move_queued(e, id, seq, y) => WakeDecision { cpu: y, kick: true },
            Some(y) => {
                // Being dispatched already: give the claimed CPU back.
                self.m.set_available(y);
                WakeDecision { cpu, kick: false }
            }
            None => WakeDecision { cpu, kick: false },
        }
    }

    /// Queue for a runnable entity that stopped on `cpu` at quantum end or
    /// yield: pinned queues stay; others may rebalance to a less loaded
    /// core (never to one with an idle CPU, which nobody would kick).
    fn requeue_target(&self, e: &Entity, id: EntityId, cpu: CpuId, now: Nanos) -> QueueRef {
        if let Some(p) = e.pinned_cpu() {
            return QueueRef::Pinned(p);
        }
        let core = self.m.core_of(cpu);
        if !self.m.covers_core(e.allowed(), core) {
            return QueueRef::Pinned(cpu);
        }
        let c = self.candidate(e, id, Some(cpu), now);
        let target = self.ops.rebalance(&self.m, &c, core, self.tun());
        // Never away from an idle sibling, never onto a core with an idle
        // CPU: nobody would kick those CPUs for it.
        let has_idle = |k: CoreId| {
            self.m
                .core_cpus(k)
                .iter()
                .any(|s| *s != cpu && self.m.is_available(*s))
        };
        if target != core
            && self.m.covers_core(e.allowed(), target)
            && !has_idle(target)
            && !has_idle(core)
        {
            QueueRef::Core(target)
        } else {
            QueueRef::Core(core)
        }
    }

    // ---- stopping the running entity ----

    /// A quantum ended: penalty step (not for bursty entities), used reset.
    fn end_quantum(&self, e: &mut Entity) {
        e.counters.quantum_ends += 1;
        if !e.is_bursty(self.tun().bursty_load) {
            e.prio.quantum_ended(self.tun(), &self.table);
        }
        e.used = 0;
    }

    fn quantum_over(&self, e: &Entity) -> bool {
        time_left(&self.table, e.quantum_full, e.used).is_none()
    }

    /// Apply a stop reason to the entity's penalties and counters.
    fn after_stop(&self, e: &mut Entity, reason: StopReason) -> After {
        match reason {
            // Haiku's HasQuantumEnded(hasYielded): a yield (PAUSE-loop exit,
            // a vCPU spinning on a lock) ends the quantum, penalty included,
            // so the lock holder gets ahead of the spinner.
            StopReason::QuantumEnd | StopReason::Yielded => {
                self.end_quantum(e);
                After::Back
            }
            StopReason::Preempted | StopReason::Idle if self.quantum_over(e) => {
                self.end_quantum(e);
                After::Back
            }
            StopReason::Preempted | StopReason::Idle => {
                e.counters.preemptions += 1;
                After::Front
            }
            StopReason::Blocked if e.wake_pending => {
                e.wake_pending = false;
                if self.quantum_over(e) {
                    self.end_quantum(e);
                    After::Back
                } else {
                    After::Front
                }
            }
            StopReason::Blocked => {
                if self.quantum_over(e) {
                    self.end_quantum(e);
                } else if !e.is_bursty(self.tun().bursty_load) {
                    e.prio.blocked_early(self.tun(), &self.table);
                }
                e.counters.blocks += 1;
                After::Block
            }
        }
    }

    /// Whether an SMT sibling of `cpu` runs an entity of another VM.
    fn sibling_foreign(&self, cpu: CpuId, vm: crate::VmId) -> bool {
        self.m.core_cpus(self.m.core_of(cpu)).iter().any(|s| {
            let slot = &self.m.cpus[s.0 as usize];
            *s != cpu
                && slot.running.load(Ordering::SeqCst) != NO_ENTITY
                && slot.vm.load(Ordering::SeqCst) != vm.0
        })
    }

    /// Take the running entity off `cpu`; returns it if it was requeued.
    fn stop_running(
        &self,
        cpu: CpuId,
        now: Nanos,
        reason: StopReason,
        acct: &mut CpuAcct,
    ) -> Option<EntityId> {
        let _p = crate::profiler::scope("haiku::stop_running");
        let slot = &self.m.cpus[cpu.0 as usize];
        // Only this CPU writes its own slot's running entity (under its
        // accounting lock); others read it as a hint (preemption, SMT
        // statistics), so plain release stores: no locked instruction.
        let raw = slot.running.load(Ordering::Acquire);
        slot.running.store(NO_ENTITY, Ordering::Release);
        slot.prio.store(IDLE_PRIO, Ordering::Release);
        if raw == NO_ENTITY {
            return None;
        }
        let core = self.m.core_of(cpu);
        self.m.vacate(core);
        let id = EntityId(raw);
        let mut guard = self.slots.get(raw as usize)?.lock();
        let Slot { seq, entity } = &mut *guard;
        let e = entity
            .as_mut()
            .filter(|e| e.state == RunState::Running(cpu))?;
        let ran = now.saturating_sub(e.dispatched_at);
        e.counters.run_time = e.counters.run_time.saturating_add(ran);
        e.used = e.used.saturating_add(ran);
        e.load.ran(ran);
        acct.busy = acct.busy.saturating_add(ran);
        if acct.foreign_at_dispatch || self.sibling_foreign(cpu, e.vm) {
            acct.foreign = acct.foreign.saturating_add(ran);
        }
        let active = self.m.cores[core.0 as usize]
            .active_time
            .fetch_add(ran, Ordering::Relaxed)
            + ran;
        e.last_core_active = active;
        if e.removed {
            self.uncharge_remove(e);
            self.free_slot(id, &mut guard);
            return None;
        }
        self.refresh_load(e);
        match self.after_stop(e, reason) {
            After::Block => {
                e.state = RunState::Blocked;
                e.slept_at = now;
                self.uncharge_block(e);
                None
            }
            After::Front => {
                e.queued_at = now;
                let q = self.m.queue_for(e.allowed(), cpu);
                self.enqueue(e, id, seq, q, true);
                Some(id)
            }
            After::Back => {
                e.queued_at = now;
                let q = self.requeue_target(e, id, cpu, now);
                self.enqueue(e, id, seq, q, false);
                Some(id)
            }
        }
    }

    // ---- picking the next entity ----

    /// Best entry of the CPU's pinned queue and its core's queue.
    fn take_local(&self, cpu: CpuId) -> Local {
        let core = self.m.core_of(cpu);
        let slot = &self.m.cpus[cpu.0 as usize];
        let cs = &self.m.cores[core.0 as usize];
        // The pinned queue is locked only when its mirror shows entries: a
        // push that races with this look is one that came after it.
        let mut pinned = (slot.pinned_len.load(Ordering::SeqCst) > 0).then(|| slot.pinned.lock());
        let mut shared = cs.queue.lock();
        let rank = |h: &QueueEntry| ((h.level, std::cmp::Reverse(h.since)), h.vm);
        let p = pinned.as_ref().and_then(|g| g.head()).map(rank);
        let s = shared.head().map(rank);
        let (use_pinned, vm) = match (p, s) {
            (Some(a), Some(b)) if a.0 >= b.0 => (true, a.1),
            (Some(a), None) => (true, a.1),
            (_, Some(b)) => (false, b.1),
            (None, None) => return Local::Empty,
        };
        if !self.m.compatible(core, vm) {
            return Local::ForcedIdle;
        }
        let got = match pinned.as_mut() {
            Some(g) if use_pinned => {
                let got = g.pop();
                self.m
                    .publish_len(QueueRef::Pinned(cpu), &slot.pinned_len, g.len());
                got
            }
            _ => {
                let got = shared.pop();
                self.m
                    .publish_len(QueueRef::Core(core), &cs.queued, shared.len());
                got
            }
        };
        got.map_or(Local::Empty, Local::Got)
    }

    /// Steal the first entry allowed on `cpu`, nearest queues first.
    fn steal(&self, cpu: CpuId) -> Option<QueueEntry> {
        let _p = crate::profiler::scope("haiku::steal");
        let core = self.m.core_of(cpu);
        self.m.visit_queued(cpu, |q| {
            self.m
                .take_from(q, |en| en.allows(cpu) && self.m.compatible(core, en.vm))
        })
    }

    /// Local queues first, then steal; records a forced idle in `acct`.
    fn find_work(&self, cpu: CpuId, acct: &mut CpuAcct) -> Option<QueueEntry> {
        match self.take_local(cpu) {
            Local::Got(e) => Some(e),
            Local::Empty => self.steal(cpu),
            Local::ForcedIdle => {
                acct.forced_idle = true;
                None
            }
        }
    }

    /// Whether any queue holds an entry allowed on `cpu` (statistics of
    /// `idle_while_waiting`; only on the idle path).
    fn waiting_allowed(&self, cpu: CpuId) -> bool {
        let holds_allowed = |q: QueueRef| {
            let (lock, len) = self.m.queue(q);
            len.load(Ordering::SeqCst) > 0 && lock.lock().entries().any(|en| en.allows(cpu))
        };
        let own = [QueueRef::Pinned(cpu), QueueRef::Core(self.m.core_of(cpu))];
        own.into_iter().any(holds_allowed)
            || self
                .m
                .visit_queued(cpu, |q| holds_allowed(q).then_some(()))
                .is_some()
    }

    /// Pick and dispatch the next entity for `cpu`, or idle.
    fn pick_next(&self, cpu: CpuId, now: Nanos, acct: &mut CpuAcct) -> Dispatch {
        let _p = crate::profiler::scope("haiku::pick_next");
        for _ in 0..MAX_PICK_ATTEMPTS {
            let entry = match self.find_work(cpu, acct) {
                Some(x) => x,
                None => match self.go_idle(cpu, acct) {
                    Some(x) => x,
                    None => break,
                },
            };
            if let Some(d) = self.dispatch(cpu, entry, now, acct) {
                return d;
            }
        }
        // A concurrent set_priority may have written the old runner's
        // priority after stop_running cleared it.
        self.m.cpus[cpu.0 as usize]
            .prio
            .store(IDLE_PRIO, Ordering::Release);
        self.m.set_available(cpu);
        if self.waiting_allowed(cpu) {
            acct.idle_while_waiting += 1;
        }
        Dispatch::idle()
    }

    /// Publish the CPU as idle, then look once more (the idler's half of
    /// the lost-wake-up protocol). Returns work found after publishing.
    fn go_idle(&self, cpu: CpuId, acct: &mut CpuAcct) -> Option<QueueEntry> {
        self.m.set_available(cpu);
        fence(Ordering::SeqCst);
        let found = self.find_work(cpu, acct)?;
        // A waker may have claimed us meanwhile; its kick then only causes
        // one extra `schedule`.
        self.m.claim(cpu);
        Some(found)
    }

    /// Make a popped entry run on `cpu`; `None` if the entry was stale,
    /// removed, or (SMT isolation) lost a race with a sibling.
    fn dispatch(
        &self,
        cpu: CpuId,
        entry: QueueEntry,
        now: Nanos,
        acct: &mut CpuAcct,
    ) -> Option<Dispatch> {
        let _p = crate::profiler::scope("haiku::dispatch");
        let mut guard = self.slots.get(entry.id.0 as usize)?.lock();
        let Slot { seq, entity } = &mut *guard;
        let e = entity.as_mut()?;
        let RunState::Queued { queue, seq: s, .. } = e.state else {
            return None;
        };
        if s != entry.seq {
            return None;
        }
        if e.removed {
            self.uncharge_remove(e);
            self.free_slot(entry.id, &mut guard);
            return None;
        }
        let core = self.m.core_of(cpu);
        if !self.m.occupy(core, e.vm) {
            self.enqueue(e, entry.id, seq, queue, true);
            return None;
        }
        self.account_dispatch(e, cpu, now);
        self.charge_ready(e, core);
        e.state = RunState::Running(cpu);
        let slice = self.slice_for(e, core);
        e.dispatched_at = now;
        let slot = &self.m.cpus[cpu.0 as usize];
        slot.prio
            .store(e.prio.effective() as i32, Ordering::Release);
        slot.bursty
            .store(e.is_bursty(self.tun().bursty_load), Ordering::Relaxed);
        slot.vm.store(e.vm.0, Ordering::Release);
        slot.running.store(entry.id.0, Ordering::Release);
        acct.dispatches += 1;
        if acct.last != Some(entry.id) {
            acct.switches += 1;
        }
        acct.last = Some(entry.id);
        acct.foreign_at_dispatch = self.sibling_foreign(cpu, e.vm);
        Some(Dispatch::run(entry.id, slice))
    }

    /// Ready wait, wake latency, migration distance.
    fn account_dispatch(&self, e: &mut Entity, cpu: CpuId, now: Nanos) {
        e.counters.ready_wait = e
            .counters
            .ready_wait
            .saturating_add(now.saturating_sub(e.queued_at));
        if let Some(w) = e.woken_at.take() {
            e.counters.wake_latency.record(now.saturating_sub(w));
        }
        if let Some(prev) = e.last_cpu {
            e.counters.migrations.record(self.m.distance(prev, cpu));
        }
        e.last_cpu = Some(cpu);
    }

    /// Time slice from the time used: min(cap(ready), base(E)) - used; a
    /// remainder of at most minimal/2 counts as a quantum end first.
    fn slice_for(&self, e: &mut Entity, core: CoreId) -> Nanos {
        let ready = self.m.ready_on_core(core) + 1;
        let cpus = self.m.core_cpus(core).len();
        let realtime = e.prio.class == SchedClass::Realtime;
        let mut full = full_quantum(&self.table, e.prio.base_quantum(), realtime, ready, cpus);
        if time_left(&self.table, full, e.used).is_none() {
            self.end_quantum(e);
            full = full_quantum(&self.table, e.prio.base_quantum(), realtime, ready, cpus);
        }
        e.quantum_full = full;
        full.saturating_sub(e.used).max(1)
    }

    /// Entries still waiting in `cpu`'s queues after it picked (the entity
    /// it just requeued, or two placed on it at once): move each to an idle
    /// CPU that may run it and ask the caller to kick that CPU. At most
    /// `LEFTOVER_KICKS` per call; each kicked CPU does the same for what it
    /// leaves behind, so the chain covers every waiting entry.
    fn kick_for_leftovers(
        &self,
        cpu: CpuId,
        now: Nanos,
        requeued: Option<EntityId>,
        include_local: bool,
    ) -> Vec<CpuId> {
        let _p = crate::profiler::scope("haiku::kick_for_leftovers");
        let mut kicked = Vec::new();
        if !self.m.any_available() {
            return kicked;
        }
        let core = self.m.core_of(cpu);
        // The entity this call requeued first: a rebalance may have put it
        // in another core's queue.
        let mut leftovers: Vec<(EntityId, Option<u64>)> =
            requeued.map(|r| (r, None)).into_iter().collect();
        if include_local {
            // Queues whose mirrors show them empty are not locked: an entry
            // pushed meanwhile is its pusher's to hand on.
            let slot = &self.m.cpus[cpu.0 as usize];
            let shared = &self.m.cores[core.0 as usize];
            let mut local = Vec::new();
            if slot.pinned_len.load(Ordering::Acquire) > 0 {
                local = slot.pinned.lock().first_entries(LEFTOVER_KICKS);
            }
            if shared.queued.load(Ordering::Acquire) > 0 {
                local.extend(shared.queue.lock().first_entries(LEFTOVER_KICKS));
            }
            leftovers.extend(local.into_iter().map(|en| (en.id, Some(en.seq))));
        }
        if leftovers.is_empty() {
            return kicked;
        }
        // Never this CPU (it just looked). Under SMT isolation not its
        // siblings either: they see the same core queue and may be idle on
        // purpose (force idle); `idle_siblings_with_work` handles them.
        let mut exclude = vec![cpu];
        if self.m.smt_isolation {
            exclude.extend_from_slice(self.m.core_cpus(core));
        }
        for (id, seq) in leftovers {
            if kicked.len() >= LEFTOVER_KICKS {
                break;
            }
            if let Some(y) = self.move_to_idle(cpu, now, id, seq, &exclude) {
                kicked.push(y);
                exclude.push(y);
            }
        }
        kicked
    }

    /// Move one waiting entry to an idle CPU that is not in `exclude`.
    /// Move one waiting entity (still queued with `expect` as sequence, if
    /// given) to an idle CPU that is not in `exclude`.
    fn move_to_idle(
        &self,
        cpu: CpuId,
        now: Nanos,
        id: EntityId,
        expect: Option<u64>,
        exclude: &[CpuId],
    ) -> Option<CpuId> {
        let mut guard = self.slots.get(id.0 as usize)?.lock();
        let Slot { seq, entity } = &mut *guard;
        let e = entity.as_mut()?;
        let RunState::Queued { seq: s, .. } = e.state else {
            return None;
        };
        if expect.is_some_and(|x| x != s) {
            return None;
        }
        let y = self
            .m
            .peek_idle_cpu(&self.candidate(e, id, Some(cpu), now), exclude)?;
        self.move_queued(e, id, seq, y).then_some(y)
    }

    /// SMT isolation: idle siblings of `cpu` that may run what is queued.
    fn idle_siblings_with_work(&self, cpu: CpuId) -> Vec<CpuId> {
        let core = self.m.core_of(cpu);
        let queued = self.m.cores[core.0 as usize].queued.load(Ordering::SeqCst);
        self.m
            .core_cpus(core)
            .iter()
            .copied()
            .filter(|s| *s != cpu && self.m.is_available(*s))
            .filter(|s| {
                queued > 0 || self.m.cpus[s.0 as usize].pinned_len.load(Ordering::SeqCst) > 0
            })
            .collect()
    }

    fn entity_stats(&self, id: EntityId, e: &Entity, now: Nanos) -> EntityStats {
        let running = matches!(e.state, RunState::Running(_));
        let live = if running {
            now.saturating_sub(e.dispatched_at)
        } else {
            0
        };
        let waiting = if matches!(e.state, RunState::Queued { .. }) {
            now.saturating_sub(e.queued_at)
        } else {
            0
        };
        EntityStats {
            id,
            vm: e.vm,
            base_priority: e.prio.base,
            run_time: e.counters.run_time + live,
            ready_wait: e.counters.ready_wait + waiting,
            wake_latency: e.counters.wake_latency.summary(),
            migrations: e.counters.migrations,
            preemptions: e.counters.preemptions,
            quantum_ends: e.counters.quantum_ends,
            blocks: e.counters.blocks,
            wakes: e.counters.wakes,
            load: e.load.load,
        }
    }

    fn cpu_stats(&self, cpu: CpuId, now: Nanos) -> CpuStats {
        let a = self.acct[cpu.0 as usize].lock();
        let idle_now = a.idle_since.map_or(0, |s| now.saturating_sub(s));
        CpuStats {
            cpu,
            busy_time: a.busy,
            idle_time: a.idle + idle_now,
            dispatches: a.dispatches,
            context_switches: a.switches,
            smt_corun_foreign: a.foreign,
            idle_while_waiting: a.idle_while_waiting,
            core_load: self.m.core_load(self.m.core_of(cpu), now),
        }
    }

    /// Check the structural invariants; call only while no other thread
    /// uses the scheduler (tests, the simulator between events). Checks:
    /// every queued entity is in exactly one queue (the one its state
    /// names) and nowhere else; every running entity is on exactly the CPU
    /// its state names; nothing is queued or running outside its affinity
    /// (core queues only hold entities allowed on the whole core); with SMT
    /// isolation, no two siblings run entities of different VMs.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut seen: std::collections::HashMap<u32, Vec<(QueueRef, u64)>> = Default::default();
        let queues = (0..self.m.cpus.len() as u32)
            .map(|c| QueueRef::Pinned(CpuId(c)))
            .chain((0..self.m.cores.len() as u32).map(|c| QueueRef::Core(CoreId(c))));
        for q in queues {
            let (lock, len) = self.m.queue(q);
            let g = lock.lock();
            if g.len() != len.load(Ordering::SeqCst) {
                return Err(format!("{q:?}: length mirror out of date"));
            }
            if (g.len() > 0) != self.m.marked_queued(q) {
                return Err(format!("{q:?}: work bitmap out of date"));
            }
            for en in g.entries() {
                seen.entry(en.id.0).or_default().push((q, en.seq));
            }
        }
        for (i, slot) in self.slots.iter().enumerate() {
            let g = slot.lock();
            let found = seen.remove(&(i as u32)).unwrap_or_default();
            let Some(e) = g.entity.as_ref() else {
                if found.is_empty() {
                    continue;
                }
                return Err(format!("free slot {i} is queued in {found:?}"));
            };
            self.check_entity(EntityId(i as u32), e, &found)?;
        }
        if let Some((id, qs)) = seen.into_iter().next() {
            return Err(format!("queue entries of unknown entity {id}: {qs:?}"));
        }
        self.check_cpus()
    }

    fn check_entity(
        &self,
        id: EntityId,
        e: &Entity,
        found: &[(QueueRef, u64)],
    ) -> Result<(), String> {
        match e.state {
            RunState::Queued { queue, seq, .. } => {
                if found != [(queue, seq)] {
                    return Err(format!(
                        "{id:?} should be once in {queue:?}, found {found:?}"
                    ));
                }
                let allowed = match queue {
                    QueueRef::Core(core) => self.m.covers_core(e.allowed(), core),
                    QueueRef::Pinned(cpu) => e.affinity.contains(cpu),
                };
                if !allowed {
                    return Err(format!("{id:?} queued in {queue:?} outside its affinity"));
                }
            }
            RunState::Running(cpu) => {
                if !found.is_empty()
                    || self.m.cpus[cpu.0 as usize].running.load(Ordering::SeqCst) != id.0
                {
                    return Err(format!(
                        "{id:?} running on {cpu:?} but queued {found:?} or not on that CPU"
                    ));
                }
                if !e.affinity.contains(cpu) {
                    return Err(format!("{id:?} runs on {cpu:?} outside its affinity"));
                }
            }
            RunState::Blocked if !found.is_empty() => {
                return Err(format!("blocked {id:?} queued in {found:?}"))
            }
            RunState::Blocked => {}
        }
        Ok(())
    }

    fn check_cpus(&self) -> Result<(), String> {
        for (c, slot) in self.m.cpus.iter().enumerate() {
            let raw = slot.running.load(Ordering::SeqCst);
            if raw == NO_ENTITY {
                continue;
            }
            let g = self
                .slots
                .get(raw as usize)
                .ok_or("CPU runs an out-of-range id")?
                .lock();
            let ok = g
                .entity
                .as_ref()
                .is_some_and(|e| e.state == RunState::Running(CpuId(c as u32)));
            if !ok {
                return Err(format!("CPU {c} runs entity {raw} whose state disagrees"));
            }
        }
        if !self.m.smt_isolation {
            return Ok(());
        }
        for core in &self.m.topo.cores {
            let vms: std::collections::HashSet<u32> = core
                .cpus
                .iter()
                .map(|c| &self.m.cpus[c.0 as usize])
                .filter(|s| s.running.load(Ordering::SeqCst) != NO_ENTITY)
                .map(|s| s.vm.load(Ordering::SeqCst))
                .collect();
            if vms.len() > 1 {
                return Err(format!("core {:?} co-runs VMs {vms:?}", core.id));
            }
        }
        Ok(())
    }

    /// Run state of an entity (tests).
    #[cfg(test)]
    fn debug_state(&self, id: EntityId) -> RunState {
        self.slots[id.0 as usize]
            .lock()
            .entity
            .as_ref()
            .map_or(RunState::Blocked, |e| e.state)
    }

    /// Effective priority and cached base quantum of an entity (tests).
    #[cfg(test)]
    fn debug_priority(&self, id: EntityId) -> (u8, Nanos, u8) {
        let g = self.slots[id.0 as usize].lock();
        let e = g.entity.as_ref().expect("live entity");
        (e.prio.effective(), e.prio.base_quantum(), e.prio.penalty)
    }
}

impl VcpuScheduler for HaikuScheduler {
    fn name(&self) -> &'static str {
        "haiku"
    }

    fn topology(&self) -> &Topology {
        &self.m.topo
    }

    fn add_entity(&self, spec: EntitySpec, now: Nanos) -> Result<EntityId, SchedError> {
        let _p = crate::profiler::scope("add_entity");
        check_priority(spec.class, spec.priority)?;
        let affinity = spec.affinity.intersection(&self.m.topo.all_cpus());
        if affinity.is_empty() {
            return Err(SchedError::EmptyAffinity);
        }
        let index = {
            let mut free = self.free.lock();
            match free.free.pop() {
                Some(i) => i,
                None if (free.next as usize) < self.max_entities => {
                    free.next += 1;
                    free.next - 1
                }
                None => return Err(SchedError::TooManyEntities(self.max_entities)),
            }
        };
        let prio = Priority::new(spec.class, spec.priority, self.tun(), &self.table);
        let all_cpus = affinity.len() == self.m.cpus.len();
        let e = Entity::new(spec.vm, Arc::new(affinity), all_cpus, prio, now);
        self.slots[index as usize].lock().entity = Some(Box::new(e));
        Ok(EntityId(index))
    }

    fn remove_entity(&self, id: EntityId, _now: Nanos) -> Result<(), SchedError> {
        let _p = crate::profiler::scope("remove_entity");
        let mut guard = self.slot(id)?.lock();
        let e = live(&mut guard.entity, id)?;
        let free_now = match e.state {
            RunState::Blocked => true,
            RunState::Queued { queue, seq, level } => self.m.remove(queue, id, seq, level),
            RunState::Running(_) => false,
        };
        if free_now {
            self.uncharge_remove(e);
            self.free_slot(id, &mut guard);
        } else {
            // The CPU running or popping it frees the slot.
            e.removed = true;
        }
        Ok(())
    }

    fn wake(&self, id: EntityId, now: Nanos) -> Result<Option<WakeDecision>, SchedError> {
        let _p = crate::profiler::scope("wake");
        let mut guard = self.slot(id)?.lock();
        let Slot { seq, entity } = &mut *guard;
        let e = live(entity, id)?;
        match e.state {
            RunState::Running(_) => {
                e.wake_pending = true;
                e.counters.wakes += 1;
                return Ok(None);
            }
            RunState::Queued { .. } => return Ok(None),
            RunState::Blocked => {}
        }
        let slept = now.saturating_sub(e.slept_at);
        e.load.slept(slept);
        e.load.update(self.tun().load_measure_interval);
        // Haiku's ShouldCancelPenalty: slept longer than half the mode's base quantum.
        if slept > self.table.base_quantum / 2 {
            if e.is_bursty(self.tun().bursty_load) {
                e.prio.forgive(self.tun(), &self.table);
            } else {
                e.prio.cancel_penalty(self.tun(), &self.table);
            }
            e.used = 0;
        }
        e.woken_at = Some(now);
        e.counters.wakes += 1;
        Ok(Some(self.place_woken(e, id, seq, now)))
    }

    fn schedule(&self, cpu: CpuId, now: Nanos, reason: StopReason) -> Result<Dispatch, SchedError> {
        let _p = crate::profiler::scope("schedule");
        self.check_cpu(cpu)?;
        let core = self.m.core_of(cpu);
        self.m.roll(core, now);
        let mut acct = self.acct[cpu.0 as usize].lock();
        if let Some(since) = acct.idle_since.take() {
            acct.idle = acct.idle.saturating_add(now.saturating_sub(since));
        }
        // This CPU is deciding now: wakers must not count it as idle.
        self.m.claim(cpu);
        acct.forced_idle = false;
        let requeued = self.stop_running(cpu, now, reason, &mut acct);
        let mut d = self.pick_next(cpu, now, &mut acct);
        if d.entity.is_none() {
            acct.idle_since = Some(now);
        }
        let forced_idle = acct.forced_idle;
        drop(acct);
        // A force-idled CPU hands on only the entity it requeued: the
        // entries it refused wait for its siblings to drain. The requeued
        // one may go to an idle CPU of another core whose siblings run its
        // VM (the search checks that, and excludes this core), so it cannot
        // bounce between force-idled CPUs.
        let requeued = requeued.filter(|r| d.entity != Some(*r));
        let mut kicks = self.kick_for_leftovers(cpu, now, requeued, !forced_idle);
        if self.m.smt_isolation && d.entity.is_some() {
            kicks.extend(self.idle_siblings_with_work(cpu));
        }
        d.kicks = kicks;
        Ok(d)
    }

    fn set_priority(&self, id: EntityId, priority: u8, _now: Nanos) -> Result<(), SchedError> {
        let _p = crate::profiler::scope("set_priority");
        let mut guard = self.slot(id)?.lock();
        let Slot { seq, entity } = &mut *guard;
        let e = live(entity, id)?;
        check_priority(e.prio.class, priority)?;
        e.prio.set_base(priority, self.tun(), &self.table);
        match e.state {
            RunState::Queued {
                queue,
                seq: s,
                level,
            } => {
                // Requeue at the new level; if it is being popped, the
                // popping CPU already has it.
                if self.m.remove(queue, id, s, level) {
                    self.enqueue(e, id, seq, queue, false);
                }
            }
            RunState::Running(cpu) => {
                // Only while the CPU still shows it (it may be stopping it).
                let slot = &self.m.cpus[cpu.0 as usize];
                if slot.running.load(Ordering::SeqCst) == id.0 {
                    slot.prio.store(e.prio.effective() as i32, Ordering::SeqCst);
                }
            }
            RunState::Blocked => {}
        }
        Ok(())
    }

    fn set_idle_core_search(&self, on: bool) {
        self.m.idle_core_search.store(on, Ordering::Relaxed);
    }

    fn snapshot(&self, now: Nanos) -> SchedSnapshot {
        let _p = crate::profiler::scope("snapshot");
        let entities = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let g = s.lock();
                let e = g.entity.as_ref().filter(|e| !e.removed)?;
                Some(self.entity_stats(EntityId(i as u32), e, now))
            })
            .collect();
        let cpus = (0..self.m.cpus.len() as u32)
            .map(|c| self.cpu_stats(CpuId(c), now))
            .collect();
        SchedSnapshot {
            now,
            policy: self.name().to_string(),
            entities,
            cpus,
        }
    }
}

/// Reject topologies whose ids are not dense and consistent.
fn validate_topology(t: &Topology) -> Result<(), SchedError> {
    let bad = |m: &str| Err(SchedError::Topology(m.to_string()));
    if t.cpus.is_empty() {
        return bad("no CPUs");
    }
    for (i, c) in t.cpus.iter().enumerate() {
        let in_range = (c.core.0 as usize) < t.cores.len()
            && (c.llc.0 as usize) < t.llcs.len()
            && (c.package.0 as usize) < t.packages.len();
        if c.id.0 as usize != i || !in_range {
            return bad("CPU ids must be dense and refer to existing core/LLC/package");
        }
    }
    for (i, core) in t.cores.iter().enumerate() {
        if core.id.0 as usize != i || core.cpus.is_empty() || (core.llc.0 as usize) >= t.llcs.len()
        {
            return bad("every core needs a dense id, CPUs and an LLC");
        }
        if core
            .cpus
            .iter()
            .any(|c| t.cpus.get(c.0 as usize).map(|ci| ci.core) != Some(core.id))
        {
            return bad("core CPU lists disagree with the CPUs");
        }
    }
    for (i, llc) in t.llcs.iter().enumerate() {
        let ok = llc.id.0 as usize == i
            && llc
                .cpus
                .iter()
                .all(|c| t.cpus.get(c.0 as usize).is_some_and(|ci| ci.llc == llc.id))
            && llc
                .cores
                .iter()
                .all(|c| t.cores.get(c.0 as usize).is_some_and(|ci| ci.llc == llc.id))
            && (llc.package.0 as usize) < t.packages.len();
        if !ok {
            return bad("LLC lists disagree with the CPUs and cores");
        }
    }
    let cpus_in_llcs: usize = t.llcs.iter().map(|l| l.cpus.len()).sum();
    let cores_in_llcs: usize = t.llcs.iter().map(|l| l.cores.len()).sum();
    if cpus_in_llcs != t.cpus.len() || cores_in_llcs != t.cores.len() {
        return bad("every CPU and core must belong to exactly one LLC");
    }
    for (i, p) in t.packages.iter().enumerate() {
        if p.id.0 as usize != i || p.llcs.iter().any(|l| (l.0 as usize) >= t.llcs.len()) {
            return bad("package ids must be dense and list existing LLCs");
        }
    }
    Ok(())
}

/// Reject configurations the policy cannot honour.
fn validate_config(c: &SchedConfig) -> Result<(), SchedError> {
    let bad = |m: &str| Err(SchedError::Config(m.to_string()));
    if c.max_entities == 0 || c.max_entities > MAX_ENTITIES_LIMIT {
        return bad("max_entities must be in 1..=16777216");
    }
    for table in [&c.tunables.low_latency, &c.tunables.power_saving] {
        if table.base_quantum == 0 || table.minimal_quantum == 0 || table.maximum_latency == 0 {
            return bad("quanta and maximum latency must be positive");
        }
        if table.quantum_multipliers.contains(&0) {
            return bad("quantum multipliers must be at least 1");
        }
    }
    if c.tunables.load_medium > c.tunables.load_high {
        return bad("load_medium must not exceed load_high");
    }
    Ok(())
}

#[cfg(test)]
#[path = "haiku_tests.rs"]
mod tests;
