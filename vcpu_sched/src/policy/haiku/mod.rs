//! The default policy: Haiku's scheduler (2014) adapted to vCPUs. This
//! module holds the policy's state and the `VcpuScheduler` entry points;
//! the work is split by concept:
//! - `place`: where a runnable entity goes (wake placement, requeue
//!   target, queue moves);
//! - `schedule`: what a CPU does in `schedule` (stop the runner, pick,
//!   steal, dispatch, time slice, kicks for what it leaves waiting);
//! - `runtime`: changes while running (priority, class, affinity, mode,
//!   CPUs out of service and back);
//! - `stats`: the snapshot rows;
//! - `invariants`: the structural checks tests and the simulator run.
//!
//! An entity's own lifecycle (load charging, quantum end, what a stop
//! does to its penalties) lives on `entity::Entity`, as Haiku keeps
//! it on `ThreadData`; CPU and core state, idle search and stealing in
//! `placement` (Haiku's `CPUEntry`/`CoreEntry`), time slices in `quantum`,
//! load estimation in `load`, run queues in `run_queue`, the two modes in
//! `mode`.
//!
//! # Locks
//! * one lock per entity slot (a fixed-capacity slab allocated at `new`);
//! * one lock per core queue and one per logical CPU's pinned queue;
//! * per CPU: an accounting lock, taken by that CPU's `schedule`, by
//!   `snapshot`, and by a wake that queued behind that CPU's runner
//!   without preempting it (to cut the runner's quantum, after releasing
//!   the woken entity's lock);
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
//! # Placement across last-level caches (beyond Haiku)
//! Haiku knows cores and packages only; an EPYC-like host has several
//! LLCs per package (1x8x8x2: 8 LLCs of 8 cores), where Haiku's rules pack
//! unrelated vCPUs into one LLC. In low-latency mode (`mode::LowLatency`):
//! * a cache-cold entity takes a fully idle package first (Haiku), else
//!   an idle core of the LLC with the most fully idle cores it may use,
//!   the nearest to its origin among equals, so each unrelated vCPU gets a
//!   cache of its own as Linux's LLC-level balancing gives it (4, 8, 16
//!   single-vCPU VMs on 1x8x8x2 use 4, 8, 8 LLCs; scenario 8). The count
//!   reads each LLC's idle-core bitmap words: O(LLCs), cold placement only;
//! * an entity woken by an entity of its own VM (`wake_by`, a vCPU's IPI)
//!   prefers an idle core in the waker's LLC, which holds the data they
//!   share, over its own warm CPU elsewhere; with no idle core there it
//!   takes its warm CPU as on any wake. A waker of another VM changes
//!   nothing.
//!
//! Power-saving mode packs instead and ignores both rules.
//!
//! # Mode details
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
//!
//! # Starvation bound
//! Derived and checked in `tests/haiku_props.rs`: with only timeshare
//! entities and no wakes, a waiting entity W is passed at most P_X + 20
//! times by each other entity X (penalty cycle plus the quantum ends before
//! a hog's first load update ends its bursty status), so it waits at most
//! (sum_{X != W} (P_X + 20) + 1) * base_quantum * m1.
//!
//! # The runner's quantum is re-checked at enqueue (beyond Haiku)
//! Haiku computes a slice once, at dispatch: min(base(E), cap), the cap
//! being maximum_latency / (ready entities per CPU of the core), so that
//! every ready entity of the core runs within the mode's maximum latency.
//! An entity that queues behind the runner afterwards is not in that
//! count: a hog dispatched alone at a low E keeps up to base * m1 (5 ms in
//! low-latency mode) while a waker waits behind it. Linux's CFS re-checks
//! the slice at every tick; here it is re-checked when a wake enqueues
//! without preempting, the only moment the answer can change between
//! two dispatches of the CPU (`cut_runner_quantum`, rule in
//! `quantum::cut_end`): with the ready count that now includes the
//! newcomer, the runner's quantum becomes min(its quantum, cap); if that
//! ends earlier than its slice, the decision carries the new end
//! (`WakeDecision::shorten_quantum`), never before the minimal quantum
//! after its dispatch nor before the wake, never later than it was.
//! Realtime runners are never cut. The CPU's accounting lock holds the
//! cut turn (`CpuAcct::turn`); its next `schedule` measures the time used
//! against the cut quantum, so a stop at the new end is a quantum end
//! whether the caller reports `QuantumEnd` or a kick. A kicking wake cuts
//! nothing (the CPU schedules, and what runs next gets a slice of the new
//! count). Changes while running, a CPU leaving service and the rebalance
//! of a stopped entity to another core's queue also enqueue behind a
//! runner without a cut: they are rare, and the runner's next dispatch
//! counts them.
//!
//! # Fair-share wake boost (beyond Haiku)
//! A vCPU whose every wake does real work is not bursty by load, so
//! Haiku's rules penalise it like a hog and it waits out the hog's slice
//! at every wake (`share.rs` has the whole story). At a wake, a timeshare
//! entity below its entitled share of its core (the core's CPUs over the
//! ready entities, itself included) is *boosted*: E = P until it blocks
//! or has had its share (a quantum end below its entitlement keeps the
//! boost), the penalties kept underneath, and it counts as interactive
//! (`must_preempt`). One above its entitlement by less than the mode's
//! maximum latency of waiting is *due* at the moment its share falls to
//! it: the runner it queues behind is cut then, and when that turn ends
//! the waiter is boosted and moved to the front of its new level
//! (`boost_due`; the CPU's accounting lock names it, `CpuAcct::due`).
//! CPU-bound entities that never block are never boosted, so Haiku's
//! penalty cycle still orders them, and the starvation bound holds.
//! A boosted waker preempts no runner owed more than itself (its share
//! per weight below three quarters of the waker's, `share::owed_more`):
//! a producer that does not sleep while work queues - a request
//! dispatcher - is penalised as CPU-bound, and each consumer it wakes is
//! boosted; preempted by every one of them, it starves them all (the
//! simulator's scenario 24). `tunables.share_boost = false` gives Haiku's
//! rules alone.
//!
//! # Bursty entities (beyond Haiku)
//! A timeshare entity whose load estimate is at most `tunables::BURSTY_LOAD`
//! (375, FreeBSD ULE's interactivity threshold) is not penalised; this is
//! what lets the limited wake preemption help a bursty waker at all (see
//! `tunables::BURSTY_LOAD`).

mod bound;
mod cosched;
mod gather;
mod invariants;
mod place;
mod runtime;
mod schedule;
mod shares;
mod stats;

use super::{SchedConfig, VcpuScheduler};
use crate::entity::{Entity, Priority, RunState};
use crate::mode::{ops_for, ModeOps};
use crate::placement::{Machine, NO_ENTITY, OUT_OF_SERVICE_PRIO};
use crate::quantum::{cut_end, Turn};
use crate::share::{entitlement, time_to_fall, SHARE_SCALE};
use crate::shares::Renewals;
use crate::stats::SchedSnapshot;
use crate::tunables::{Mode, QuantumTable, Tunables};
use crate::validate::{validate_config, validate_spec, validate_topology};
use crate::{
    CoreId, CpuId, CpuSet, Dispatch, EntityId, EntitySpec, LlcId, Nanos, QuantumCut, SchedClass,
    SchedError, StopReason, Topology, VmId, WakeDecision,
};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// Stale or contended entries a CPU skips before giving up and idling for
/// this call (the entries are not lost: they stay queued or are requeued).
const MAX_PICK_ATTEMPTS: usize = 64;
/// Cores (its own first, then the nearest of its last-level cache) whose
/// queues `has_waiting` looks at.
const HAS_WAITING_CORES: usize = 16;
/// Waiting entries a `schedule` call hands to idle CPUs (see `kick_for_leftovers`).
const LEFTOVER_KICKS: usize = 4;
/// Entries of the head's level a co-start looks at for a sibling of a
/// running vCPU (`co_start_pick`): its cost is bounded by these times the
/// LLC's CPUs, whatever the queue's length.
const CO_START_SCAN: usize = 8;
/// The fair-share boost pauses on a core where an entity has waited longer
/// than this many of the mode's maximum latencies (`starving`).
const STARVING_LATENCIES: Nanos = 4;

/// One slot of the entity slab. `seq` survives reuse so stale queue
/// entries of a removed entity never match its successor; `generation`
/// is bumped when its entity is removed, so the removed entity's handle
/// never matches its successor either.
#[derive(Debug, Default)]
struct Slot {
    seq: u64,
    generation: u32,
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
    /// CPUs this `schedule` call must have kicked for entities it placed
    /// elsewhere (scratch, empty between calls: no allocation usually).
    kicks: Vec<CpuId>,
    /// The quantum of the entity running here (None while idle): set by
    /// the dispatch, cut by wakes that queue behind it, applied to the
    /// entity when it stops.
    turn: Option<Turn>,
    /// Quanta of runners here that wakes cut short.
    quantum_cuts: u64,
    /// A waker queued behind the runner here whose fair share falls due
    /// by the end of this turn (`judge_share`): boosted when the turn
    /// ends, if it still waits and is below its share then.
    due: Option<(EntityId, Nanos)>,
    /// The same for the entity the current `schedule` call requeued at
    /// its quantum end (`due_at_quantum_end`): becomes `due` for the
    /// turn this call dispatches.
    due_next: Option<(EntityId, Nanos)>,
    /// Entities this `schedule` call throttled (scratch, like `kicks`).
    throttled: Vec<(EntityId, Nanos)>,
    /// Relaxed co-scheduling (`cosched.rs`): this `schedule` call
    /// co-stopped an entity already (at most once per call).
    costop_done: bool,
    /// The laggard a co-stop or a yield gives this CPU to (scratch), and
    /// why (`schedule::Pull`).
    pull: Option<(EntityId, schedule::Pull)>,
    /// A directed yield the VMM asked for (`yield_to`, `pass_turn`).
    yield_to: Option<cosched::DirectedYield>,
    /// Sibling turns (`cosched.rs`): the VM whose siblings share the
    /// slice this CPU gave one of them, and when that slice ends; set by
    /// the dispatch that cut the slice, carried by the stop that hands
    /// the rest to a parked sibling, cleared by any other stop.
    sibling_until: Option<(VmId, Nanos)>,
    /// A passed turn in a VM wider than its CPUs (`cosched.rs`): when the
    /// yielder's slice ends, which the sibling it pulls runs out (scratch:
    /// set by the stop of a `pass_turn`'s yielder, taken by the pick).
    lend_until: Option<Nanos>,
    /// Sibling gathering (`gather.rs`): the swap this `schedule` call's
    /// requeue decided (scratch), made once the entity's lock is let go.
    gather: Option<gather::Gather>,
    /// Co-stops, co-start kicks and directed yields here.
    costops: u64,
    costarts: u64,
    directed_yields: u64,
    /// Sibling gathering's swaps made here (`gather.rs`).
    gathers: u64,
}

/// The entity `id` names in a slot of generation `generation`: an error
/// if the handle is of another generation (removed: stale; never issued:
/// unknown) or the slot is free.
fn live(
    entity: &mut Option<Box<Entity>>,
    generation: u32,
    id: EntityId,
) -> Result<&mut Entity, SchedError> {
    if id.generation() != generation {
        return Err(SchedError::for_handle(id, generation));
    }
    entity
        .as_deref_mut()
        .filter(|e| !e.removed)
        .ok_or(SchedError::UnknownEntity(id))
}

/// Index of a mode in `Mode::ALL`.
fn mode_index(mode: Mode) -> u8 {
    match mode {
        Mode::LowLatency => 0,
        Mode::PowerSaving => 1,
    }
}

/// The Haiku-derived vCPU scheduler. See the module documentation.
#[derive(Debug)]
pub struct HaikuScheduler {
    m: Machine,
    /// The mode now (index into `Mode::ALL` and `ops`); switched at run
    /// time by `set_mode`.
    mode: AtomicU8,
    /// Each mode's operations, indexed like `Mode::ALL`.
    ops: [Box<dyn ModeOps>; 2],
    slots: Vec<Mutex<Slot>>,
    free: Mutex<FreeList>,
    /// Per CPU, each on its own cache lines.
    acct: Vec<CachePadded<Mutex<CpuAcct>>>,
    max_entities: usize,
    /// Taken by `set_cpu_enabled` only: one change of service at a time.
    service_change: Mutex<()>,
    /// Cap and reservation buckets falling due (`shares.rs`).
    renewals: Renewals,
    /// VMs with relaxed co-scheduling and their shared state
    /// (`cosched.rs`; locked by `add_entity` and `set_coschedule` only),
    /// and how many there are (one load on the pick when none).
    vm_sync: Mutex<std::collections::HashMap<VmId, Arc<crate::cosched::VmSync>>>,
    cosched_vms: AtomicUsize,
}

impl HaikuScheduler {
    /// Build the policy for a topology; rejects inconsistent topologies and
    /// configurations.
    pub fn new(topology: Topology, config: SchedConfig) -> Result<Self, SchedError> {
        validate_topology(&topology)?;
        validate_config(&config, super::PolicyKind::Haiku)?;
        let ncpus = topology.cpus.len();
        let m = Machine::new(
            topology,
            config.smt_isolation,
            config.idle_core_search,
            config.tunables.clone(),
        );
        Ok(HaikuScheduler {
            m,
            mode: AtomicU8::new(mode_index(config.mode)),
            ops: Mode::ALL.map(ops_for),
            slots: (0..config.max_entities)
                .map(|_| Mutex::new(Slot::default()))
                .collect(),
            free: Mutex::new(FreeList::default()),
            acct: (0..ncpus)
                .map(|_| CachePadded::new(Mutex::new(CpuAcct::default())))
                .collect(),
            max_entities: config.max_entities,
            service_change: Mutex::new(()),
            renewals: Renewals::default(),
            vm_sync: Mutex::new(std::collections::HashMap::new()),
            cosched_vms: AtomicUsize::new(0),
        })
    }

    /// The mode it runs in now.
    pub fn mode(&self) -> Mode {
        Mode::ALL[self.mode.load(Ordering::Relaxed) as usize & 1]
    }

    /// The quantum table of the mode it runs in now.
    fn table(&self) -> &QuantumTable {
        self.tun().quantum_table(self.mode())
    }

    /// The operations of the mode it runs in now.
    fn ops(&self) -> &dyn ModeOps {
        &*self.ops[self.mode.load(Ordering::Relaxed) as usize & 1]
    }

    fn tun(&self) -> &Tunables {
        &self.m.tun
    }

    fn slot(&self, id: EntityId) -> Result<&Mutex<Slot>, SchedError> {
        self.slots
            .get(id.index() as usize)
            .ok_or(SchedError::UnknownEntity(id))
    }

    fn check_cpu(&self, cpu: CpuId) -> Result<(), SchedError> {
        if (cpu.0 as usize) < self.m.cpus.len() {
            Ok(())
        } else {
            Err(SchedError::UnknownCpu(cpu))
        }
    }

    /// `wake`; `near`: the VM and LLC of the vCPU that woke it; `front`:
    /// queued at the front of its level if it does not preempt
    /// (`wake_found_running`).
    fn wake_near(
        &self,
        id: EntityId,
        now: Nanos,
        near: Option<(crate::VmId, LlcId)>,
        front: bool,
    ) -> Result<Option<WakeDecision>, SchedError> {
        let mut guard = self.slot(id)?.lock();
        let Slot {
            seq,
            entity,
            generation,
        } = &mut *guard;
        let e = live(entity, *generation, id)?;
        match e.state {
            RunState::Running(_) => {
                e.wake_pending = true;
                e.counters.wakes += 1;
                return Ok(None);
            }
            RunState::Queued { .. } => return Ok(None),
            // Throttled by its cap: runnable already, queued at renewal.
            RunState::Blocked if e.throttled_until.is_some() => {
                e.counters.wakes += 1;
                return Ok(None);
            }
            RunState::Blocked => {}
        }
        self.judge_reservation(e, now);
        self.judge_bounded_wake(e, now);
        let slept = now.saturating_sub(e.slept_at);
        e.load.slept(slept);
        e.load.update(self.tun().load_measure_interval);
        // Haiku's ShouldCancelPenalty: slept longer than half the mode's
        // base quantum. Not while an entity starves on its core: sleepers
        // forgiven at every wake that keep the CPU busy between them would
        // pass it for good (the starvation guard, `starving`).
        let core = self.home_core(e);
        let mut starving = None;
        if slept > self.table().base_quantum / 2 && !self.starving_once(core, now, &mut starving) {
            // A bursty entity is forgiven its additional penalty too (see
            // `Priority::forgive`).
            if e.is_bursty(self.tun().bursty_load) {
                e.prio.forgive(self.tun(), self.mode());
            } else {
                e.prio.cancel_penalty(self.tun(), self.mode());
            }
            e.used = 0;
        }
        let due = self
            .judge_share(e, core, now, &mut starving)
            .map(|at| (id, at));
        e.woken_at = Some(now);
        e.counters.wakes += 1;
        let waker_llc = near.filter(|(vm, _)| *vm == e.vm).map(|(_, llc)| llc);
        let d = self.place_woken(e, id, seq, now, waker_llc, front);
        // The runner's accounting lock comes before any entity lock.
        drop(guard);
        Ok(Some(self.cut_runner_quantum(d, now, due)))
    }

    /// A blocked entity ran `ran` up to `now` unseen (`ran_unseen`): the
    /// wake, the run and the block before its quantum's end, charged as
    /// `wake_near` and `stop_running` charge them, but with no placement
    /// (it is blocked again) and no core load (it was never ready in a
    /// queue here).
    fn charge_unseen_run(&self, id: EntityId, ran: Nanos, now: Nanos) -> Result<(), SchedError> {
        let mut guard = self.slot(id)?.lock();
        let Slot {
            entity, generation, ..
        } = &mut *guard;
        let e = live(entity, *generation, id)?;
        if ran == 0 || e.state != RunState::Blocked || e.throttled_until.is_some() {
            return Ok(());
        }
        // It cannot have run longer than it was blocked.
        let ran = ran.min(now.saturating_sub(e.slept_at));
        let woke = now - ran;
        let (t, mode) = (self.tun(), self.mode());
        // The wake: as `wake_near`.
        self.judge_reservation(e, woke);
        let slept = woke.saturating_sub(e.slept_at);
        e.load.slept(slept);
        let core = self.home_core(e);
        let mut starving = None;
        if slept > self.table().base_quantum / 2 && !self.starving_once(core, now, &mut starving) {
            if e.is_bursty(t.bursty_load) {
                e.prio.forgive(t, mode);
            } else {
                e.prio.cancel_penalty(t, mode);
            }
            e.used = 0;
        }
        e.counters.wakes += 1;
        // The run: as `stop_running`.
        e.counters.run_time = e.counters.run_time.saturating_add(ran);
        e.used = e.used.saturating_add(ran);
        e.load.ran(ran);
        e.load.update(t.load_measure_interval);
        e.share.ran_between(woke, now, t.share_half_life);
        self.charge_shares(e, ran, now);
        // The block: as a stop for `Blocked`.
        let after = e.after_stop(StopReason::Blocked, t, mode);
        debug_assert_eq!(after, crate::entity::After::Block);
        if let Some(s) = &e.sync {
            s.blocked(now);
        }
        e.slept_at = now;
        Ok(())
    }

    /// The fair-share wake boost (`share.rs`), judged on the core the
    /// waking entity last ran on (its first allowed CPU's for a new one).
    /// A timeshare entity that is not bursty and wakes below its entitled
    /// share there is boosted (E = P, penalties kept underneath) and counts
    /// as interactive until it blocks or its quantum ends: it may preempt
    /// a CPU-bound runner. One that is above it, but would fall below it
    /// within the mode's maximum latency of waiting, returns that moment
    /// (the *due* time): it waits at its own E, the runner it queues
    /// behind is cut at the due time instead of at the ready-count cap
    /// (`cut_runner_quantum`), and when that turn ends the waker is
    /// boosted (`boost_due`), so a vCPU that hovers at its fair share
    /// waits for the share it is owed, not for a whole slice. Otherwise
    /// Haiku's rules alone apply.
    fn judge_share(
        &self,
        e: &mut Entity,
        core: CoreId,
        now: Nanos,
        starving: &mut Option<bool>,
    ) -> Option<Nanos> {
        // The waker is not ready yet: every weight ready there is another's.
        let others = self.m.load_of(core).ready_weight();
        let due = self.judge_on(e, core, others, now, &mut || {
            self.starving_once(core, now, starving)
        });
        if due.is_some() {
            e.counters.boosted_wakes += 1;
        }
        due
    }

    /// The fair-share judgement of `e` on `core`, `others` being the weight
    /// ready there besides it (at a wake, `judge_share`; at a waker's
    /// quantum end, `due_at_quantum_end`): below its entitlement it is
    /// boosted now (None); above it, the moment its decaying share falls
    /// to it if that is within the mode's maximum latency (Some), else
    /// None. Only a timeshare, non-bursty entity with a measured share is
    /// judged, and none while an entry starves on the core (`starving`,
    /// asked only when the judgement would act: it may lock the queue).
    pub(super) fn judge_on(
        &self,
        e: &mut Entity,
        core: CoreId,
        others: u64,
        now: Nanos,
        starving: &mut dyn FnMut() -> bool,
    ) -> Option<Nanos> {
        let t = self.tun();
        if !t.share_boost
            || e.prio.class != SchedClass::Timeshare
            || e.is_bursty(t.bursty_load)
            || !e.share.measured(now, t.share_half_life)
        {
            return None;
        }
        let entitled = entitlement(self.m.core_cpus(core).len(), e.share_weight(), others);
        if entitled >= SHARE_SCALE {
            // Nothing to contend with there.
            return None;
        }
        let share = e.share.value_at(now, t.share_half_life);
        if share < entitled {
            if !starving() {
                e.prio.boost(t, self.mode());
                e.counters.boosted_wakes += 1;
            }
            return None;
        }
        let wait = time_to_fall(share, entitled, t.share_half_life);
        (wait < self.table().maximum_latency && !starving()).then(|| now.saturating_add(wait))
    }

    /// The weight ready on `core` besides `e`, which is still charged
    /// there if ready (a stopped runner, a queued waiter).
    pub(super) fn others_ready(&self, e: &Entity, core: CoreId) -> u64 {
        let mine = if e.load_ready {
            e.charged_weight as u64
        } else {
            0
        };
        self.m.load_of(core).ready_weight().saturating_sub(mine)
    }

    /// A woken entity queued on `d.cpu` without preempting its runner:
    /// recompute the runner's quantum with the ready count that now
    /// includes it, and cut it if it ends earlier, or at `due` (the
    /// waker's fair share is due then, `judge_share`) if that is earlier
    /// (see `quantum::cut_end`). The accounting lock of that CPU serialises the
    /// cut with its `schedule`, which applies it to the entity at its stop.
    fn cut_runner_quantum(
        &self,
        d: WakeDecision,
        now: Nanos,
        due: Option<(EntityId, Nanos)>,
    ) -> WakeDecision {
        let slot = &self.m.cpus[d.cpu.0 as usize];
        if d.kick || slot.running.load(Ordering::Acquire) == NO_ENTITY {
            return d;
        }
        let core = self.m.core_of(d.cpu);
        let mut acct = self.acct[d.cpu.0 as usize].lock();
        let ready = self.m.ready_on_core(core);
        let cpus = self.m.core_cpus(core).len();
        let table = self.table();
        let CpuAcct {
            turn, due: owed, ..
        } = &mut *acct;
        let Some(turn) = turn.as_mut() else {
            return d;
        };
        if let Some((waker, at)) = due {
            // The earliest due waker of the turn is the one boosted at its end.
            if owed.is_none_or(|(_, other)| at < other) {
                *owed = Some((waker, at));
            }
        }
        let Some(end) = cut_end(table, turn, ready, cpus, now, due.map(|(_, at)| at)) else {
            return d;
        };
        turn.cut_to(end);
        let cut = QuantumCut {
            runner: turn.entity,
            dispatched_at: turn.dispatched_at,
            end,
        };
        acct.quantum_cuts += 1;
        WakeDecision {
            shorten_quantum: Some(cut),
            ..d
        }
    }

    /// The turn a due waker waited behind ended (`CpuAcct::due`): boost it
    /// if it still waits in a queue and is below its entitled share of
    /// that queue's core now, and move it to the front of its boosted
    /// level so the CPU that is picking takes it. No entity lock is held.
    /// A waiter still above its share then is not due any more: carrying
    /// the due to the next turn was tried and starves a capped hog when
    /// wakers' entitlements, each judged against the ready set of its own
    /// moment, add up past the CPU (`tests/shares_props.rs` found it).
    fn boost_due(&self, waker: EntityId, now: Nanos) {
        let Ok(slot) = self.slot(waker) else {
            return;
        };
        let mut guard = slot.lock();
        let Slot {
            seq,
            entity,
            generation,
        } = &mut *guard;
        let Ok(e) = live(entity, *generation, waker) else {
            return;
        };
        let RunState::Queued {
            queue,
            seq: s,
            level,
        } = e.state
        else {
            return;
        };
        if e.prio.is_boosted() {
            return;
        }
        let t = self.tun();
        let core = self.m.core_of_queue(queue);
        if self.starving(core, now) {
            return;
        }
        // The waker waits in this queue: its own weight is in the sum.
        let others = self
            .m
            .load_of(core)
            .ready_weight()
            .saturating_sub(e.charged_weight as u64);
        let entitled = entitlement(self.m.core_cpus(core).len(), e.share_weight(), others);
        // The wake predicted the due time from its own reading; the two
        // readings of the decay may differ by rounding.
        let slack = SHARE_SCALE / 1024;
        if entitled >= SHARE_SCALE || e.share.value_at(now, t.share_half_life) > entitled + slack {
            return;
        }
        if !self.m.remove(queue, waker, s, level) {
            // Being popped right now: it runs anyway.
            return;
        }
        e.prio.boost(t, self.mode());
        self.enqueue(e, waker, seq, queue, true);
    }

    /// The core a waking entity is judged on: the one it last ran on (its
    /// first allowed CPU's for a new one).
    fn home_core(&self, e: &Entity) -> CoreId {
        let home = e
            .last_cpu
            .filter(|c| e.affinity.contains(*c))
            .or_else(|| e.affinity.first())
            .unwrap_or(CpuId(0));
        self.m.core_of(home)
    }

    /// `starving`, looked up at most once per wake (`cache`).
    fn starving_once(&self, core: CoreId, now: Nanos, cache: &mut Option<bool>) -> bool {
        *cache.get_or_insert_with(|| self.starving(core, now))
    }

    /// The fair-share boost's starvation guard: whether an entity has
    /// waited in `core`'s queue longer than `STARVING_LATENCIES` x the
    /// mode's maximum latency. Each waker's entitlement is judged against
    /// the weights ready at its own moment, so wakers that sleep in turn
    /// may each see only a hog beside them and together be entitled to
    /// more than the CPU; boosted at every wake they never go through
    /// Haiku's penalty cycle, and a hog waiting below them would be passed
    /// for good. While one starves, no boost is given: Haiku's rules alone
    /// order the core until it has run.
    pub(super) fn starving(&self, core: CoreId, now: Nanos) -> bool {
        let bound = self
            .table()
            .maximum_latency
            .saturating_mul(STARVING_LATENCIES);
        let cs = &self.m.cores[core.0 as usize];
        if cs.queued.load(Ordering::Acquire) == 0 {
            return false;
        }
        cs.queue
            .lock()
            .oldest_head_since()
            .is_some_and(|since| now.saturating_sub(since) > bound)
    }

    /// The VM of `waker` and the LLC of the CPU it runs on (or last ran
    /// on), read under its own lock before the wakee's is taken (one
    /// entity lock at a time).
    fn waker_place(&self, waker: EntityId) -> Result<Option<(crate::VmId, LlcId)>, SchedError> {
        let mut guard = self.slot(waker)?.lock();
        let Slot {
            entity, generation, ..
        } = &mut *guard;
        let w = live(entity, *generation, waker)?;
        let cpu = match w.state {
            RunState::Running(cpu) => Some(cpu),
            _ => w.last_cpu,
        };
        Ok(cpu.map(|c| (w.vm, self.m.llc_of(c))))
    }

    /// Free a slot whose entity was removed (its generation is already
    /// bumped).
    fn free_slot(&self, index: u32, slot: &mut Slot) {
        slot.entity = None;
        self.free.lock().free.push(index);
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
        let affinity = validate_spec(&spec, &self.m.topo)?;
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
        let prio = Priority::new(spec.class, spec.priority, self.tun(), self.mode());
        let all_cpus = affinity.len() == self.m.cpus.len();
        let sync = if self.cosched_vms.load(Ordering::Relaxed) > 0 {
            self.vm_sync_of(spec.vm)
        } else {
            None
        };
        let mut slot = self.slots[index as usize].lock();
        let id = EntityId::new(index, slot.generation);
        let mut e = Entity::new(id, spec.vm, Arc::new(affinity), all_cpus, prio, now);
        e.sync = sync;
        slot.entity = Some(Box::new(e));
        Ok(id)
    }

    fn remove_entity(&self, id: EntityId, _now: Nanos) -> Result<(), SchedError> {
        let _p = crate::profiler::scope("remove_entity");
        let mut guard = self.slot(id)?.lock();
        let Slot {
            entity, generation, ..
        } = &mut *guard;
        let e = live(entity, *generation, id)?;
        // From now on the handle is stale, even while a CPU still holds it.
        *generation = generation.wrapping_add(1);
        let free_now = match e.state {
            RunState::Blocked => true,
            RunState::Queued { queue, seq, level } => self.m.remove(queue, id, seq, level),
            RunState::Running(_) => false,
        };
        if free_now {
            e.uncharge_remove(&self.m);
            self.free_slot(id.index(), &mut guard);
        } else {
            // The CPU running or popping it frees the slot.
            e.removed = true;
        }
        Ok(())
    }

    fn wake(&self, id: EntityId, now: Nanos) -> Result<Option<WakeDecision>, SchedError> {
        let _p = crate::profiler::scope("wake");
        self.wake_near(id, now, None, false)
    }

    fn wake_found_running(
        &self,
        id: EntityId,
        now: Nanos,
    ) -> Result<Option<WakeDecision>, SchedError> {
        let _p = crate::profiler::scope("wake");
        self.wake_near(id, now, None, true)
    }

    fn wake_by(
        &self,
        id: EntityId,
        waker: EntityId,
        now: Nanos,
    ) -> Result<Option<WakeDecision>, SchedError> {
        let _p = crate::profiler::scope("wake_by");
        let near = self.waker_place(waker)?;
        self.wake_near(id, now, near, false)
    }

    fn schedule(&self, cpu: CpuId, now: Nanos, reason: StopReason) -> Result<Dispatch, SchedError> {
        self.schedule_after_halts(cpu, now, reason, 0)
    }

    fn schedule_after_halts(
        &self,
        cpu: CpuId,
        now: Nanos,
        reason: StopReason,
        halted_ns: Nanos,
    ) -> Result<Dispatch, SchedError> {
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
        acct.costop_done = false;
        let schedule::Stopped { requeued, mut held } =
            self.stop_running(cpu, now, reason, halted_ns, &mut acct);
        if let Some(y) = acct.yield_to.take() {
            // The VMM's directed yield, if the entity that stopped is the
            // one that asked (it may have stopped for another reason since).
            if requeued == Some(y.from) {
                let why = if y.turns {
                    schedule::Pull::Yield
                } else {
                    schedule::Pull::YieldFrom(y.from)
                };
                acct.pull = Some((y.to, why));
            } else {
                acct.lend_until = None;
            }
        }
        if let Some((waker, _)) = acct.due.take() {
            // (Never with the queue held: it was not taken then.)
            drop(held.take());
            self.boost_due(waker, now);
        }
        if let Some(g) = acct.gather.take() {
            // Sibling gathering's swap (`gather.rs`): entity locks one at
            // a time, none held now.
            drop(held.take());
            if self.gather_swap(g, &mut acct.kicks) {
                acct.gathers += 1;
            }
        }
        // The entity this call requeued at its quantum end, due soon: the
        // turn this call dispatches is cut then.
        acct.due = acct.due_next.take();
        if self.renewals.due(now) {
            // Due since the requeue looked: the queue is let go first.
            drop(held.take());
            self.renew_due(now, &mut acct.kicks);
        }
        if !self.m.in_service(cpu) {
            drop(held.take());
            // Out of service: hand on whatever still waits for this CPU,
            // run nothing, and stay claimed (never offered to wakers).
            self.evacuate(cpu, now, &mut acct.kicks);
            self.m.cpus[cpu.0 as usize]
                .prio
                .store(OUT_OF_SERVICE_PRIO, Ordering::Release);
            if acct.idle_since.is_none() {
                acct.idle_since = Some(now);
            }
            return Ok(Dispatch {
                kicks: std::mem::take(&mut acct.kicks),
                throttled: std::mem::take(&mut acct.throttled),
                ..Dispatch::idle()
            });
        }
        let mut d = self.pick_next(cpu, now, &mut acct, held);
        if d.entity.is_none() {
            acct.idle_since = Some(now);
            d.recheck_at = self.renewals.next();
        }
        d.throttled = std::mem::take(&mut acct.throttled);
        let forced_idle = acct.forced_idle;
        let placed = std::mem::take(&mut acct.kicks);
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
        if !placed.is_empty() {
            kicks.extend(placed.into_iter().filter(|k| *k != cpu));
            kicks.sort_unstable();
            kicks.dedup();
        }
        d.kicks = kicks;
        Ok(d)
    }

    fn set_priority(
        &self,
        id: EntityId,
        priority: u8,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _p = crate::profiler::scope("set_priority");
        self.set_priority_now(id, priority, now)
    }

    fn set_class(
        &self,
        id: EntityId,
        class: SchedClass,
        priority: u8,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _p = crate::profiler::scope("set_class");
        self.set_class_now(id, class, priority, now)
    }

    fn set_affinity(
        &self,
        id: EntityId,
        affinity: CpuSet,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _p = crate::profiler::scope("set_affinity");
        self.set_affinity_now(id, affinity, now)
    }

    fn set_weight(&self, id: EntityId, weight: u32, now: Nanos) -> Result<Vec<CpuId>, SchedError> {
        self.set_weight_now(id, weight, now)
    }

    fn set_cap(
        &self,
        id: EntityId,
        permille: Option<u32>,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        self.set_cap_now(id, permille, now)
    }

    fn set_reservation(
        &self,
        id: EntityId,
        permille: u32,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        self.set_reservation_now(id, permille, now)
    }

    fn set_latency_bound(
        &self,
        id: EntityId,
        bound: Option<crate::bound::LatencyBound>,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        self.set_latency_bound_now(id, bound, now)
    }

    fn mode(&self) -> Mode {
        HaikuScheduler::mode(self)
    }

    fn set_mode(&self, mode: Mode, _now: Nanos) -> Vec<CpuId> {
        let _p = crate::profiler::scope("set_mode");
        self.set_mode_now(mode)
    }

    fn set_cpu_enabled(
        &self,
        cpu: CpuId,
        enabled: bool,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _p = crate::profiler::scope("set_cpu_enabled");
        self.set_cpu_enabled_now(cpu, enabled, now)
    }

    fn set_idle_core_search(&self, on: bool) {
        self.m.idle_core_search.store(on, Ordering::Relaxed);
    }

    fn ready_wait(&self, id: EntityId, now: Nanos) -> Option<Nanos> {
        let mut guard = self.slot(id).ok()?.lock();
        let Slot {
            entity, generation, ..
        } = &mut *guard;
        let e = live(entity, *generation, id).ok()?;
        let waiting = match e.state {
            RunState::Queued { .. } => now.saturating_sub(e.queued_at),
            _ => 0,
        };
        Some(e.counters.ready_wait + waiting)
    }

    fn snapshot(&self, now: Nanos) -> SchedSnapshot {
        let _p = crate::profiler::scope("snapshot");
        self.take_snapshot(now)
    }

    fn effective_priority(&self, id: EntityId) -> Option<u8> {
        let mut guard = self.slot(id).ok()?.lock();
        let Slot {
            entity, generation, ..
        } = &mut *guard;
        live(entity, *generation, id)
            .ok()
            .map(|e| e.prio.effective())
    }

    fn has_waiting(&self, cpu: CpuId) -> bool {
        let Some(slot) = self.m.cpus.get(cpu.0 as usize) else {
            return false;
        };
        if slot.pinned_len.load(Ordering::Acquire) > 0 {
            return true;
        }
        // Its core's queue, then the nearest cores of its last-level cache
        // (a bounded look): a quantum end here rebalances what waits there.
        let llc = self.m.llc_of(cpu);
        self.m
            .cores_near(self.m.core_of(cpu))
            .iter()
            .take(HAS_WAITING_CORES)
            .take_while(|c| {
                self.m
                    .core_cpus(**c)
                    .first()
                    .is_some_and(|x| self.m.llc_of(*x) == llc)
            })
            .any(|c| self.m.cores[c.0 as usize].queued.load(Ordering::Acquire) > 0)
    }

    fn set_coschedule(
        &self,
        vm: VmId,
        mode: crate::Coschedule,
        _now: Nanos,
    ) -> Result<(), SchedError> {
        self.set_vm_coschedule(vm, mode)
    }

    fn yield_to(&self, from: EntityId, to: EntityId, _now: Nanos) -> Result<bool, SchedError> {
        self.note_yield_to(from, to, false)
    }

    fn pass_turn(&self, from: EntityId, to: EntityId, _now: Nanos) -> Result<bool, SchedError> {
        self.note_yield_to(from, to, true)
    }

    fn ran_unseen(&self, id: EntityId, ran: Nanos, now: Nanos) -> Result<(), SchedError> {
        let _p = crate::profiler::scope("ran_unseen");
        self.charge_unseen_run(id, ran, now)
    }

    fn running_priority(&self, cpu: CpuId) -> Option<u8> {
        let prio = self
            .m
            .cpus
            .get(cpu.0 as usize)?
            .prio
            .load(Ordering::Acquire);
        u8::try_from(prio).ok()
    }
}

#[cfg(test)]
mod tests;
