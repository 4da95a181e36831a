//! Schedulable entities (vCPUs): class, priority with cycling penalties,
//! run state, per-entity accounting, and the entity's own lifecycle
//! (Haiku's `ThreadData`): charging its load to a core as it becomes ready,
//! blocks or leaves, what a quantum end does to its penalty, what each
//! stop reason does to it, and what a dispatch records.
//!
//! Penalty cycling: each quantum end raises `penalty` by one (up to
//! P - minimal) and `additional` by one; each block before the quantum ends
//! raises `additional`. E = P - penalty, then E -= additional % E, so E
//! walks down from P - penalty to 1 and wraps: a CPU-bound entity keeps
//! losing priority until it ends up below everyone and runs again only when
//! others yield, yet every entity eventually passes through a high E (the
//! starvation guard), and over a cycle the order of static priorities is
//! kept. E and the base quantum are cached and recomputed only when the
//! penalty or the base priority changes.

use crate::bound::BOUNDED_PRIORITY;
use crate::cosched::VmSync;
use crate::load::EntityLoad;
use crate::placement::{Allowed, Machine};
use crate::quantum::{base_quantum, time_left};
use crate::share::RecentShare;
use crate::shares::{Bucket, DEFAULT_WEIGHT, RESERVED_PRIORITY};
use crate::stats::MigrationCounts;
use crate::tunables::{Mode, QuantumTable, Tunables};
use crate::{
    CoreId, CpuId, CpuSet, Distance, EntityId, LatencyHistogram, Nanos, SchedClass, StopReason,
    VmId,
};
use std::sync::Arc;

/// Priority state of one entity with the cached effective priority and base quantum.
#[derive(Debug, Clone)]
pub(crate) struct Priority {
    pub class: SchedClass,
    pub base: u8,
    pub penalty: u8,
    pub additional: u32,
    /// A fair-share wake boost is in force (`share.rs`): E is the base
    /// priority until it ends, the penalties underneath are kept.
    boosted: bool,
    /// Holds reservation tokens (`shares.rs`): E is `RESERVED_PRIORITY`.
    reserved: bool,
    /// A bounded entity holding budget (`bound.rs`): E is
    /// `BOUNDED_PRIORITY`.
    bounded: bool,
    effective: u8,
    base_quantum: Nanos,
    /// The mode whose quantum table `base_quantum` comes from (the mode
    /// can change at run time; the cache follows at the next dispatch).
    quantum_mode: Mode,
}

impl Priority {
    /// Fresh state (no penalty) with E and base quantum computed.
    pub fn new(class: SchedClass, base: u8, t: &Tunables, mode: Mode) -> Priority {
        let mut p = Priority {
            class,
            base,
            penalty: 0,
            additional: 0,
            boosted: false,
            reserved: false,
            bounded: false,
            effective: base,
            base_quantum: 0,
            quantum_mode: mode,
        };
        p.recompute(t, mode);
        p
    }

    /// Cached effective priority E.
    pub fn effective(&self) -> u8 {
        self.effective
    }

    /// Cached base quantum for E in the mode it was computed for.
    #[cfg(test)]
    pub fn base_quantum(&self) -> Nanos {
        self.base_quantum
    }

    /// Base quantum for E in `mode`, recomputed if the mode changed since.
    pub fn base_quantum_in(&mut self, t: &Tunables, mode: Mode) -> Nanos {
        if self.quantum_mode != mode {
            self.recompute(t, mode);
        }
        self.base_quantum
    }

    /// clamp(P / divisor, 1, cap), and never above P.
    pub fn minimal(&self, t: &Tunables) -> u8 {
        let m = self.base / t.minimal_priority_divisor.max(1);
        m.clamp(1, t.minimal_priority_cap.max(1))
            .min(self.base.max(1))
    }

    fn penalised(&self) -> bool {
        self.class == SchedClass::Timeshare
    }

    /// Quantum ended: penalty +1 (capped at P - minimal), additional +1.
    pub fn quantum_ended(&mut self, t: &Tunables, mode: Mode) {
        if !self.penalised() {
            return;
        }
        if self.penalty < self.base - self.minimal(t) {
            self.penalty += 1;
        }
        self.additional = self.additional.wrapping_add(1);
        self.recompute(t, mode);
    }

    /// Blocked before its quantum ended: additional +1.
    pub fn blocked_early(&mut self, t: &Tunables, mode: Mode) {
        if !self.penalised() {
            return;
        }
        self.additional = self.additional.wrapping_add(1);
        self.recompute(t, mode);
    }

    /// Start a fair-share wake boost: E = P until [`Priority::unboost`],
    /// with penalty and additional penalty kept for after it (Xen
    /// credit1's BOOST is as temporary). Timeshare only.
    pub fn boost(&mut self, t: &Tunables, mode: Mode) {
        if self.penalised() && !self.boosted {
            self.boosted = true;
            self.recompute(t, mode);
        }
    }

    /// End a boost: E is the penalised one again.
    pub fn unboost(&mut self, t: &Tunables, mode: Mode) {
        if self.boosted {
            self.boosted = false;
            self.recompute(t, mode);
        }
    }

    /// Run at the reserved level (`shares::RESERVED_PRIORITY`) or not.
    /// Timeshare only.
    pub fn set_reserved(&mut self, on: bool, t: &Tunables, mode: Mode) {
        let on = on && self.penalised();
        if self.reserved != on {
            self.reserved = on;
            self.recompute(t, mode);
        }
    }

    /// Runs at the reserved level.
    pub fn is_reserved(&self) -> bool {
        self.reserved
    }

    /// Run at the bounded level (`bound::BOUNDED_PRIORITY`) or not.
    /// Timeshare only.
    pub fn set_bounded(&mut self, on: bool, t: &Tunables, mode: Mode) {
        let on = on && self.penalised();
        if self.bounded != on {
            self.bounded = on;
            self.recompute(t, mode);
        }
    }

    /// Runs at the bounded level.
    pub fn is_bounded(&self) -> bool {
        self.bounded
    }

    /// A fair-share wake boost is in force.
    pub fn is_boosted(&self) -> bool {
        self.boosted
    }

    /// Cancel the penalty (long sleep, priority change). As in Haiku's
    /// `CancelPenalty`, the additional penalty is kept: it only rotates E
    /// inside 1..=P - penalty.
    pub fn cancel_penalty(&mut self, t: &Tunables, mode: Mode) {
        if self.penalty == 0 {
            return;
        }
        self.penalty = 0;
        self.recompute(t, mode);
    }

    /// Cancel the penalty of an entity that is bursty now, and its
    /// additional penalty too: E = P. A bursty entity is not penalised
    /// (its `additional` no longer moves), so a kept additional penalty
    /// would not rotate E any more but freeze it anywhere in 1..=P - a
    /// vCPU that woke every millisecond could sit at E = 1 for ever.
    pub fn forgive(&mut self, t: &Tunables, mode: Mode) {
        self.penalty = 0;
        self.additional = 0;
        self.recompute(t, mode);
    }

    /// New base priority (cancels the penalty, always recomputes).
    pub fn set_base(&mut self, base: u8, t: &Tunables, mode: Mode) {
        self.base = base;
        self.penalty = 0;
        self.boosted = false;
        self.recompute(t, mode);
    }

    /// New class and base priority (a class change; cancels the penalty).
    pub fn set_class(&mut self, class: SchedClass, base: u8, t: &Tunables, mode: Mode) {
        self.class = class;
        self.set_base(base, t, mode);
    }

    /// Recompute E and the base quantum (from `mode`'s quantum table).
    pub fn recompute(&mut self, t: &Tunables, mode: Mode) {
        self.effective = match self.class {
            SchedClass::Realtime => self.base,
            SchedClass::Idle => 0,
            SchedClass::Timeshare if self.bounded => BOUNDED_PRIORITY,
            SchedClass::Timeshare if self.reserved => RESERVED_PRIORITY.max(self.base),
            SchedClass::Timeshare if self.boosted => self.base,
            SchedClass::Timeshare => {
                let e = self.base.saturating_sub(self.penalty);
                if e > 0 {
                    e - (self.additional % e as u32) as u8
                } else {
                    e
                }
            }
        };
        self.base_quantum = base_quantum(t.quantum_table(mode), self.effective);
        self.quantum_mode = mode;
    }
}

/// Which queue holds a queued entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueRef {
    /// The queue of a core (affinity covers all CPUs of the core).
    Core(CoreId),
    /// The pinned queue of one logical CPU.
    Pinned(CpuId),
}

/// Where an entity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunState {
    Blocked,
    /// In (or being popped from) a queue, pushed with sequence `seq`.
    Queued {
        queue: QueueRef,
        seq: u64,
        level: u8,
    },
    Running(CpuId),
}

/// Counters of one entity (reported in `EntityStats`).
#[derive(Debug, Clone, Default)]
pub(crate) struct EntityCounters {
    pub run_time: Nanos,
    pub ready_wait: Nanos,
    /// Boxed: the histogram is ~2 KiB and touched once per wake, while the
    /// rest of the entity is touched on every dispatch; inline, it spreads
    /// a cold entity over many cache lines and pages (65536 entities).
    pub wake_latency: Box<LatencyHistogram>,
    pub migrations: MigrationCounts,
    pub preemptions: u64,
    pub quantum_ends: u64,
    pub blocks: u64,
    pub wakes: u64,
    /// Wakes below its entitled share (see `share.rs`).
    pub boosted_wakes: u64,
    /// Times its cap throttled it, and the time it spent throttled.
    pub throttles: u64,
    pub throttled_time: Nanos,
    /// Wakes with latency-bound budget, and those of them that reached a
    /// CPU later than the bound (`bound.rs`).
    pub bounded_wakes: u64,
    pub bound_misses: u64,
}

/// A bounded entity's bound and budget bucket (`bound.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounded {
    pub bound: Nanos,
    pub bucket: Bucket,
}

/// One vCPU.
#[derive(Debug, Clone)]
pub(crate) struct Entity {
    /// Its handle (slot index and generation).
    pub id: EntityId,
    pub vm: VmId,
    pub affinity: Arc<CpuSet>,
    /// The affinity holds every CPU of the machine.
    pub all_cpus: bool,
    /// The single allowed CPU of a pinned entity.
    pub pinned: Option<CpuId>,
    pub prio: Priority,
    pub state: RunState,
    /// Woken while still running: its next `Blocked` stop keeps it runnable.
    pub wake_pending: bool,
    /// Removed while running or being popped: the CPU that holds it frees it.
    pub removed: bool,
    /// Time used of the current quantum.
    pub used: Nanos,
    /// It blocked since its quantum began: the quantum was gathered over
    /// several wakes (a waker's, not a hog's; see the haiku policy's
    /// "due at a quantum end").
    pub blocked_in_quantum: bool,
    /// The full quantum computed at the last dispatch (used is measured against it).
    pub quantum_full: Nanos,
    /// When it was dispatched (valid while running).
    pub dispatched_at: Nanos,
    /// When it entered its queue (ready-wait accounting).
    pub queued_at: Nanos,
    /// When it blocked (sleep length, load).
    pub slept_at: Nanos,
    /// When it was woken, until it runs (wake latency).
    pub woken_at: Option<Nanos>,
    /// The CPU it last ran on and the active time of that core then.
    pub last_cpu: Option<CpuId>,
    pub last_core_active: Nanos,
    /// Since when it has run on the core of `last_cpu` (the rotation of
    /// CPU-bound entities that do not divide evenly, `mode.rs`).
    pub core_since: Nanos,
    pub load: EntityLoad,
    /// Recent share of a CPU (the fair-share wake boost reads it).
    pub share: RecentShare,
    /// Core its load is charged to, the value charged, and whether it is
    /// currently ready there (else blocked with the epoch it left in).
    pub load_core: Option<CoreId>,
    pub charged: u32,
    /// The share weight charged to `load_core` while ready.
    pub charged_weight: u32,
    pub load_ready: bool,
    pub load_epoch: Option<u64>,
    /// Operator weight (`shares.rs`), and the one charged to `load_core`
    /// while ready.
    pub weight: u32,
    pub charged_slice: u32,
    /// Operator cap and reservation buckets (`shares.rs`).
    pub cap: Option<Bucket>,
    pub reserve: Option<Bucket>,
    /// Its latency bound and budget (`bound.rs`).
    pub bounded: Option<Bounded>,
    /// Its pending wake (`woken_at`) came with bound budget: a dispatch
    /// later than the bound is a miss.
    pub woke_bounded: bool,
    /// Throttled by its cap until then: runnable, in no queue, `Blocked`
    /// as far as the queues know (a wake finds it runnable already).
    pub throttled_until: Option<Nanos>,
    pub counters: EntityCounters,
    /// Its VM's co-scheduling state, when the VM has relaxed
    /// co-scheduling on (`cosched.rs`), and its progress there: run
    /// time while runnable, level with the VM's lead after a halt.
    pub sync: Option<Arc<VmSync>>,
    pub progress: Nanos,
    /// Counted among its VM's parked siblings (`VmSync::parked`).
    pub sync_parked: bool,
}

impl Entity {
    /// A new blocked entity; `all_cpus` says whether `affinity` holds every
    /// CPU of the machine.
    pub fn new(
        id: EntityId,
        vm: VmId,
        affinity: Arc<CpuSet>,
        all_cpus: bool,
        prio: Priority,
        now: Nanos,
    ) -> Entity {
        Entity {
            id,
            vm,
            pinned: affinity.only(),
            all_cpus,
            affinity,
            prio,
            state: RunState::Blocked,
            wake_pending: false,
            removed: false,
            used: 0,
            blocked_in_quantum: false,
            quantum_full: 0,
            dispatched_at: now,
            queued_at: now,
            slept_at: now,
            woken_at: None,
            last_cpu: None,
            last_core_active: 0,
            core_since: now,
            load: EntityLoad::default(),
            share: RecentShare::new(now),
            load_core: None,
            charged: 0,
            charged_weight: 0,
            load_ready: false,
            load_epoch: None,
            weight: DEFAULT_WEIGHT,
            charged_slice: DEFAULT_WEIGHT,
            cap: None,
            reserve: None,
            bounded: None,
            woke_bounded: false,
            throttled_until: None,
            counters: EntityCounters::default(),
            sync: None,
            progress: 0,
            sync_parked: false,
        }
    }

    /// A timeshare entity whose measured load is at most `bursty_load`
    /// ([`crate::tunables::BURSTY_LOAD`], ULE's interactive class):
    /// penalties are not applied to it.
    pub fn is_bursty(&self, bursty_load: u32) -> bool {
        self.prio.class == SchedClass::Timeshare && self.load.load <= bursty_load
    }

    /// Interactive now: bursty by load, or woken below its fair share
    /// (boosted). An interactive waker may preempt a CPU-bound runner of
    /// lower E, and an interactive runner is preempted only by a waker
    /// `wake_preempt_priority_delta` above it.
    pub fn is_interactive(&self, bursty_load: u32) -> bool {
        self.prio.is_boosted() || self.is_bursty(bursty_load)
    }

    /// Single allowed CPU, if pinned.
    pub fn pinned_cpu(&self) -> Option<CpuId> {
        self.pinned
    }

    /// The affinity as placement reads it.
    pub fn allowed(&self) -> Allowed<'_> {
        Allowed {
            set: &self.affinity,
            all: self.all_cpus,
        }
    }

    /// The affinity as a queue entry carries it (`None`: every CPU).
    pub fn entry_affinity(&self) -> Option<Arc<CpuSet>> {
        (!self.all_cpus).then(|| Arc::clone(&self.affinity))
    }
}

/// What happens to an entity that stopped running (see [`Entity::after_stop`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    /// Not runnable any more.
    Block,
    /// Runnable with quantum left: back to the head of its level.
    Front,
    /// Runnable, quantum over: back to the tail (possibly another core).
    Back,
}

/// The lifecycle (Haiku's `ThreadData` methods).
impl Entity {
    // ---- load charging (Haiku's AddLoad / RemoveLoad with epochs) ----

    /// The entity is ready on `core`: charge its load there.
    #[inline]
    pub fn charge_ready(&mut self, m: &Machine, core: CoreId) {
        // Charged there already (a requeue or dispatch on its core): the
        // usual case, checked inline.
        if !(self.load_ready && self.load_core == Some(core)) {
            self.charge_on(m, core);
        }
    }

    #[inline(never)]
    fn charge_on(&mut self, m: &Machine, core: CoreId) {
        let load = self.load.load;
        let weight = self.share_weight();
        match self.load_core {
            Some(c) if self.load_ready => {
                m.load_of(c).remove(self.charged, true, self.charged_weight);
                m.load_of(c).remove_slice(self.charged_slice);
                m.load_of(core).add(load, None, weight);
            }
            Some(c) if c == core => {
                let left = self.load_epoch.map(|ep| (ep, self.charged));
                m.load_of(core).add(load, left, weight);
            }
            _ => m.load_of(core).add(load, None, weight),
        }
        m.load_of(core).add_slice(self.weight);
        self.charged_slice = self.weight;
        self.load_core = Some(core);
        self.charged = load;
        self.charged_weight = weight;
        self.load_ready = true;
    }

    /// The weight this entity's share counts with: its base priority
    /// (Haiku's scale, so 20 is entitled to twice what 10 is) times its
    /// operator weight over the default (`shares.rs`).
    pub fn share_weight(&self) -> u32 {
        let w = self.prio.base.max(1) as u64 * self.weight as u64 / DEFAULT_WEIGHT as u64;
        w.clamp(1, u32::MAX as u64) as u32
    }

    /// Its base priority changed: follow the weight on its core if ready.
    pub fn reweigh(&mut self, m: &Machine) {
        let weight = self.share_weight();
        if let (Some(c), true) = (self.load_core, self.load_ready) {
            m.load_of(c).reweigh(self.charged_weight, weight);
            self.charged_weight = weight;
            m.load_of(c).reslice(self.charged_slice, self.weight);
            self.charged_slice = self.weight;
        }
    }

    /// The entity blocks: it stops being ready but keeps counting in the
    /// core's epoch sum until the epoch rolls.
    pub fn uncharge_block(&mut self, m: &Machine) {
        if let (Some(c), true) = (self.load_core, self.load_ready) {
            self.load_epoch = Some(
                m.load_of(c)
                    .remove(self.charged, false, self.charged_weight),
            );
            m.load_of(c).remove_slice(self.charged_slice);
            self.load_ready = false;
        }
    }

    /// Parked in queue `q` at `level`: one of its VM's parked siblings
    /// (relaxed co-scheduling), once however often it moves.
    pub fn park_sync(&mut self, level: u8, q: QueueRef) {
        if let Some(s) = &self.sync {
            if self.sync_parked {
                s.moved(self.id, level, q);
            } else {
                self.sync_parked = true;
                s.parked(self.id, self.progress, level, q);
            }
        }
    }

    /// Out of every queue (dispatched, throttled, removed, or leaving
    /// its VM's co-scheduling).
    pub fn unpark_sync(&mut self) {
        if let Some(s) = &self.sync {
            if std::mem::take(&mut self.sync_parked) {
                s.unparked(self.id);
            }
        }
    }

    /// The entity is removed: it leaves the core's load at once.
    pub fn uncharge_remove(&mut self, m: &Machine) {
        self.unpark_sync();
        if let (Some(c), true) = (self.load_core, self.load_ready) {
            m.load_of(c).remove(self.charged, true, self.charged_weight);
            m.load_of(c).remove_slice(self.charged_slice);
            self.load_ready = false;
        }
    }

    /// Fold measured time into the estimate and follow it on the core.
    pub fn refresh_load(&mut self, m: &Machine) {
        if !self.load.update(m.tun.load_measure_interval) {
            return;
        }
        if let (Some(c), true) = (self.load_core, self.load_ready) {
            m.load_of(c)
                .change(self.load.load as i64 - self.charged as i64);
            self.charged = self.load.load;
        }
    }

    // ---- quanta and penalties ----

    /// A quantum ended: penalty step (not for bursty entities), used
    /// reset; a boost ends with the quantum it was given for.
    pub fn end_quantum(&mut self, t: &Tunables, mode: Mode) {
        self.counters.quantum_ends += 1;
        self.prio.unboost(t, mode);
        if !self.is_bursty(t.bursty_load) {
            self.prio.quantum_ended(t, mode);
        }
        self.used = 0;
        self.blocked_in_quantum = false;
    }

    /// What is left of the quantum counts as ended (at most half the
    /// minimal quantum).
    pub fn quantum_over(&self, table: &QuantumTable) -> bool {
        time_left(table, self.quantum_full, self.used).is_none()
    }

    /// Apply a stop reason to the entity's penalties and counters.
    pub fn after_stop(&mut self, reason: StopReason, t: &Tunables, mode: Mode) -> After {
        let table = t.quantum_table(mode);
        match reason {
            // Haiku's HasQuantumEnded(hasYielded): a yield (PAUSE-loop exit,
            // a vCPU spinning on a lock) ends the quantum, penalty included,
            // so the lock holder gets ahead of the spinner.
            StopReason::QuantumEnd | StopReason::Yielded => {
                self.end_quantum(t, mode);
                After::Back
            }
            StopReason::Preempted | StopReason::Idle if self.quantum_over(table) => {
                self.end_quantum(t, mode);
                After::Back
            }
            StopReason::Preempted | StopReason::Idle => {
                self.counters.preemptions += 1;
                After::Front
            }
            StopReason::Blocked if self.wake_pending => {
                self.wake_pending = false;
                if self.quantum_over(table) {
                    self.end_quantum(t, mode);
                    After::Back
                } else {
                    After::Front
                }
            }
            StopReason::Blocked => {
                if self.quantum_over(table) {
                    self.end_quantum(t, mode);
                } else if !self.is_interactive(t.bursty_load) {
                    self.prio.blocked_early(t, mode);
                }
                self.prio.unboost(t, mode);
                self.counters.blocks += 1;
                self.blocked_in_quantum = true;
                After::Block
            }
        }
    }

    /// Dispatched on `cpu` at `now`: ready wait, wake latency, migration
    /// distance.
    pub fn account_dispatch(&mut self, m: &Machine, cpu: CpuId, now: Nanos) {
        self.share.idle_until(now, m.tun.share_half_life);
        self.counters.ready_wait = self
            .counters
            .ready_wait
            .saturating_add(now.saturating_sub(self.queued_at));
        if let Some(w) = self.woken_at.take() {
            let latency = now.saturating_sub(w);
            self.counters.wake_latency.record(latency);
            if std::mem::take(&mut self.woke_bounded)
                && self.bounded.is_some_and(|b| latency > b.bound)
            {
                self.counters.bound_misses += 1;
            }
        }
        match self.last_cpu {
            Some(prev) => {
                let d = m.distance(prev, cpu);
                self.counters.migrations.record(d);
                // The same CPU or an SMT sibling: the same core.
                if !matches!(d, Distance::SameCpu | Distance::SmtSibling) {
                    self.core_since = now;
                }
            }
            None => self.core_since = now,
        }
        self.last_cpu = Some(cpu);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prio(p: u8) -> Priority {
        Priority::new(
            SchedClass::Timeshare,
            p,
            &Tunables::default(),
            Mode::LowLatency,
        )
    }

    #[test]
    fn penalty_bounds_and_wraparound() {
        let (t, q) = (Tunables::default(), Mode::LowLatency);
        let mut p = prio(10);
        assert_eq!(p.minimal(&t), 2);
        let mut seen = Vec::new();
        for _ in 0..40 {
            p.quantum_ended(&t, q);
            assert!(p.penalty <= 10 - 2, "penalty capped at P - minimal");
            let e = p.effective();
            assert!((1..=10 - p.penalty).contains(&e), "E in 1..=P-penalty");
            seen.push(e);
        }
        // Penalty saturated at 8: E = 2 - (additional % 2) cycles 2,1,2,1...
        // (it counts down from P - penalty to 1 and wraps).
        assert_eq!(p.penalty, 8);
        let tail = &seen[30..];
        assert!(tail.contains(&1) && tail.contains(&2));
        assert!(tail.windows(2).all(|w| w[0] != w[1]), "cycles, wraps");
        // With a higher P the cycle is longer and counts down to 1 and wraps.
        let mut p = prio(50); // minimal 10, penalty cap 40
        for _ in 0..40 {
            p.quantum_ended(&t, q);
        }
        assert_eq!(p.penalty, 40);
        let mut es = Vec::new();
        for _ in 0..20 {
            es.push(p.effective());
            p.quantum_ended(&t, q);
        }
        // additional = 40.. : E = 10 - (additional % 10): 10,9,...,1,10,...
        assert_eq!(&es[..11], &[10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 10]);
    }

    #[test]
    fn penalty_keeps_order_of_static_priorities() {
        let (t, q) = (Tunables::default(), Mode::LowLatency);
        let avg = |base: u8| {
            let mut p = prio(base);
            let mut sum = 0u64;
            for _ in 0..1000 {
                p.quantum_ended(&t, q);
                sum += p.effective() as u64;
            }
            sum
        };
        let (a5, a10, a20, a50) = (avg(5), avg(10), avg(20), avg(50));
        assert!(a5 < a10 && a10 < a20 && a20 < a50, "{a5} {a10} {a20} {a50}");
        // And the best E reachable after saturation keeps the order too.
        assert!(prio(20).minimal(&t) > prio(10).minimal(&t));
    }

    #[test]
    fn realtime_never_penalised_and_cancel_restores() {
        let (t, q) = (Tunables::default(), Mode::LowLatency);
        let mut r = Priority::new(SchedClass::Realtime, 110, &t, q);
        for _ in 0..10 {
            r.quantum_ended(&t, q);
            r.blocked_early(&t, q);
        }
        assert_eq!(r.effective(), 110);
        let mut p = prio(10);
        p.quantum_ended(&t, q);
        p.blocked_early(&t, q);
        assert!(p.effective() < 10);
        assert_eq!(
            p.base_quantum(),
            base_quantum(t.quantum_table(q), p.effective())
        );
        p.cancel_penalty(&t, q);
        // Penalty gone; the additional penalty (2) still rotates E: 10 - 2 % 10.
        assert_eq!((p.penalty, p.effective()), (0, 8));
        assert_eq!(p.base_quantum(), base_quantum(t.quantum_table(q), 8));
    }
}
