//! Where a runnable entity goes: the wake placement (Haiku's
//! `ChooseCoreAndCPU` with the mode's operations), the queue an entity
//! that stopped with time or penalty goes back to (the rebalance), and
//! moving queued entries between queues. Every placement ends in
//! `enqueue`, which charges the entity's load to the queue's core.

use super::HaikuScheduler;
use crate::entity::{Entity, QueueRef, RunState};
use crate::mode::rotation_target;
use crate::placement::Candidate;
use crate::run_queue::{QueueEntry, RunQueue};
use crate::{CoreId, CpuId, EntityId, LlcId, Nanos, SchedClass, WakeDecision};
use parking_lot::MutexGuard;
use std::sync::atomic::{fence, Ordering};

impl HaikuScheduler {
    /// Placement facts of an entity at `now`; `origin` overrides the
    /// previous CPU.
    pub(super) fn candidate<'a>(
        &self,
        e: &'a Entity,
        id: EntityId,
        origin: Option<CpuId>,
        now: Nanos,
    ) -> Candidate<'a> {
        let mut c = self.balance_candidate(e, id, origin, now);
        // Read only by `must_preempt`, on the placements that use this.
        c.boosted_share = e.prio.is_boosted().then(|| {
            (
                e.share.value_at(now, self.tun().share_half_life),
                e.share_weight(),
            )
        });
        c.warm = c.prev.is_some_and(|p| {
            self.m
                .core_active(self.m.core_of(p))
                .saturating_sub(e.last_core_active)
                < self.tun().cache_expire
        });
        c
    }

    /// `candidate` without its cache warmth (`warm` false, not looked
    /// at) or its boosted share (None): the rebalance and rotation rules (`ModeOps::rebalance`,
    /// `rotation_target`, `least_loaded_core`) never read it, and
    /// summing the core's active time is most of a candidate's cost on
    /// every quantum end.
    pub(super) fn balance_candidate<'a>(
        &self,
        e: &'a Entity,
        id: EntityId,
        origin: Option<CpuId>,
        now: Nanos,
    ) -> Candidate<'a> {
        // A previous CPU its affinity no longer holds is no place to
        // return to (its affinity changed since).
        let prev = e.last_cpu.filter(|p| e.allowed().contains(*p));
        Candidate {
            affinity: e.allowed(),
            vm: e.vm,
            class: e.prio.class,
            effective: e.prio.effective(),
            origin: origin
                .or(prev)
                .unwrap_or_else(|| e.affinity.first().unwrap_or(CpuId(0))),
            prev,
            warm: false,
            load: e.load.load,
            interactive: e.is_interactive(self.tun().bursty_load),
            bounded: e.prio.is_bounded(),
            boosted_share: None,
            now,
            rotor: (id.index() as usize)
                .wrapping_mul(7)
                .wrapping_add((e.counters.wakes + e.counters.quantum_ends) as usize),
            waker_llc: None,
        }
    }

    /// Target CPU of a waking entity and whether it must be kicked;
    /// `waker_llc`: the LLC of a waker of its VM (see `Candidate`).
    pub(super) fn choose_target(
        &self,
        e: &Entity,
        id: EntityId,
        now: Nanos,
        waker_llc: Option<LlcId>,
    ) -> (CpuId, bool) {
        let _p = crate::profiler::scope("haiku::choose_target");
        let mut c = self.candidate(e, id, None, now);
        c.waker_llc = waker_llc;
        let delta = self.tun().wake_preempt_priority_delta;
        if let Some(p) = e.pinned_cpu() {
            let kick = self.m.try_claim(p, &c) || self.m.must_preempt(p, &c, delta);
            return (p, kick);
        }
        if let Some(cpu) = self.ops().find_idle(&self.m, &c, self.tun()) {
            return (cpu, true);
        }
        let core = match c.prev {
            Some(p) if c.warm => self
                .ops()
                .rebalance(&self.m, &c, self.m.core_of(p), self.tun()),
            _ => self
                .ops()
                .choose_core(&self.m, &c, self.tun())
                .unwrap_or(self.m.core_of(c.origin)),
        };
        let core = self.spread_siblings(e, core, None);
        let cpu = self.m.choose_cpu_in_core(core, &c).unwrap_or(c.origin);
        let kick = self.m.must_preempt(cpu, &c, delta);
        if !kick && (c.class == SchedClass::Realtime || c.bounded) {
            // Bounded latency: a realtime or bounded entity takes the
            // allowed CPU running the lowest priority anywhere, if it
            // beats that.
            if let Some(low) = self.m.lowest_priority_cpu(&c) {
                if self.m.must_preempt(low, &c, delta) {
                    return (low, true);
                }
            }
        }
        (cpu, kick)
    }

    /// Put a runnable entity into a queue (state, load, queued entry).
    pub(super) fn enqueue(
        &self,
        e: &mut Entity,
        id: EntityId,
        seq: &mut u64,
        q: QueueRef,
        front: bool,
    ) {
        let entry = self.queued(e, id, seq, q);
        self.m.push(q, entry, front);
    }

    /// `enqueue`, keeping `q` locked for the caller's pick from it (a
    /// quantum end's requeue on its own core's queue, `Stopped::held`).
    pub(super) fn enqueue_held(
        &self,
        e: &mut Entity,
        id: EntityId,
        seq: &mut u64,
        q: QueueRef,
        front: bool,
    ) -> MutexGuard<'_, RunQueue> {
        let entry = self.queued(e, id, seq, q);
        self.m.push_held(q, entry, front)
    }

    /// Mark the entity queued on `q` (its load charged to that queue's
    /// core) and return the entry to push there.
    fn queued(&self, e: &mut Entity, id: EntityId, seq: &mut u64, q: QueueRef) -> QueueEntry {
        *seq += 1;
        let level = e.prio.effective();
        let entry = QueueEntry {
            id,
            seq: *seq,
            level,
            since: e.queued_at,
            vm: e.vm,
            affinity: e.entry_affinity(),
            cosched: e.sync.is_some(),
        };
        if let (Some(s), RunState::Blocked) = (&e.sync, e.state) {
            // Woken from a halt (or a throttle): not behind.
            e.progress = s.woken(e.progress);
        }
        e.park_sync(level, q);
        e.charge_ready(&self.m, self.m.core_of_queue(q));
        e.state = RunState::Queued {
            queue: q,
            seq: *seq,
            level,
        };
        entry
    }

    /// `enqueue`, then make sure a CPU in service picks from that queue.
    /// A queue no CPU in service serves (its CPU, or every CPU of its
    /// core, was taken out of service) keeps the entity only if it may run
    /// nowhere else; otherwise it moves to a queue that is served. Returns
    /// that move's target and kick. The check follows the push: a CPU
    /// taken out of service drains its queues after it is marked, so a
    /// push either lands before the drain (and is moved by it) or sees
    /// the mark.
    pub(super) fn enqueue_served(
        &self,
        e: &mut Entity,
        id: EntityId,
        seq: &mut u64,
        q: QueueRef,
        front: bool,
        now: Nanos,
    ) -> Option<(CpuId, bool)> {
        self.enqueue(e, id, seq, q, front);
        self.serve(e, id, seq, q, now)
    }

    /// The check of `enqueue_served` after its push: an entity queued on
    /// `q` moves to a served queue if no CPU in service serves `q`.
    pub(super) fn serve(
        &self,
        e: &mut Entity,
        id: EntityId,
        seq: &mut u64,
        q: QueueRef,
        now: Nanos,
    ) -> Option<(CpuId, bool)> {
        if self.m.serves(q) {
            return None;
        }
        let (cpu, kick) = self.served_target(e, id, now)?;
        if !self.move_queued(e, id, seq, cpu) {
            if kick {
                // Being dispatched already (by a CPU that will see it is
                // not allowed there): give a claimed idle CPU back.
                self.m.set_available(cpu);
            }
            return None;
        }
        Some((cpu, kick))
    }

    /// A CPU in service for an entity, and whether to kick it: an idle one
    /// (claimed), else one of the least loaded core in service. `None` if
    /// every CPU it may use is out of service.
    fn served_target(&self, e: &Entity, id: EntityId, now: Nanos) -> Option<(CpuId, bool)> {
        let c = self.candidate(e, id, None, now);
        if let Some(cpu) = self.m.find_idle_cpu(&c) {
            return Some((cpu, true));
        }
        let served = |cpu: CpuId| self.m.serves(self.m.queue_for(e.allowed(), cpu));
        let cpu = self
            .m
            .least_loaded_core(&c)
            .and_then(|core| self.m.choose_cpu_in_core(core, &c))
            .filter(|cpu| served(*cpu))
            .or_else(|| {
                // The sample missed: any allowed CPU in service (rare path,
                // O(allowed CPUs)).
                let n = self.m.cpus.len() as u32;
                (0..n)
                    .map(CpuId)
                    .filter(|cpu| e.allowed().contains(*cpu))
                    .find(|cpu| served(*cpu))
            })?;
        let delta = self.tun().wake_preempt_priority_delta;
        Some((cpu, self.m.must_preempt(cpu, &c, delta)))
    }

    /// Move a queued entity to the queue serving `cpu`; false if a CPU is
    /// popping it right now (then it is about to run anyway).
    pub(super) fn move_queued(
        &self,
        e: &mut Entity,
        id: EntityId,
        seq: &mut u64,
        cpu: CpuId,
    ) -> bool {
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

    /// Place a waking entity and decide the kick (see `place`); one that
    /// does not preempt goes to the front of its level if `front`.
    pub(super) fn place_woken(
        &self,
        e: &mut Entity,
        id: EntityId,
        seq: &mut u64,
        now: Nanos,
        waker_llc: Option<LlcId>,
        front: bool,
    ) -> WakeDecision {
        e.queued_at = now;
        self.place_near(e, id, seq, now, waker_llc, front)
    }

    /// Place a runnable entity that is in no queue as on a wake and decide
    /// the kick. After enqueueing without a kick, search the idle bitmaps
    /// once more (the other half of the lost-wake-up protocol, see the
    /// module docs).
    pub(super) fn place(
        &self,
        e: &mut Entity,
        id: EntityId,
        seq: &mut u64,
        now: Nanos,
    ) -> WakeDecision {
        self.place_near(e, id, seq, now, None, false)
    }

    /// `place`, with the LLC of a waker of its VM (see `Candidate`),
    /// queued at the front of its level if `front`.
    fn place_near(
        &self,
        e: &mut Entity,
        id: EntityId,
        seq: &mut u64,
        now: Nanos,
        waker_llc: Option<LlcId>,
        front: bool,
    ) -> WakeDecision {
        let _p = crate::profiler::scope("haiku::place");
        let (cpu, kick) = self.choose_target(e, id, now, waker_llc);
        let q = self.m.queue_for(e.allowed(), cpu);
        self.m.roll(self.m.core_of_queue(q), now);
        if let Some((y, kick)) = self.enqueue_served(e, id, seq, q, front, now) {
            return WakeDecision::new(y, kick);
        }
        if kick {
            return WakeDecision::new(cpu, kick);
        }
        fence(Ordering::SeqCst);
        let idle = self.m.find_idle_cpu(&self.candidate(e, id, Some(cpu), now));
        match idle {
            Some(y) if self.move_queued(e, id, seq, y) => WakeDecision::new(y, true),
            Some(y) => {
                // Being dispatched already: give the claimed CPU back.
                self.m.set_available(y);
                WakeDecision::new(cpu, false)
            }
            None => WakeDecision::new(cpu, false),
        }
    }

    /// Queue for a runnable entity that stopped on `cpu` at quantum end or
    /// yield: pinned entities stay on their CPU; others may rebalance to a
    /// less loaded core (never to one with an idle CPU, which nobody would
    /// kick). A pinned entity whose CPU is its whole core (one thread per
    /// core) goes to the core queue, as its wakes and preemptions do
    /// (`queue_for`): in the pinned queue its quantum-end requeue would tie
    /// with an entry pushed to the front of the core queue at the same
    /// instant and win (`take_local`), passing a preempted entity of its
    /// level again and again (it starved a capped hog on one CPU,
    /// `tests/shares_props.rs`).
    pub(super) fn requeue_target(
        &self,
        e: &Entity,
        id: EntityId,
        cpu: CpuId,
        now: Nanos,
    ) -> QueueRef {
        if let Some(p) = e.pinned_cpu() {
            return self.m.queue_for(e.allowed(), p);
        }
        let core = self.m.core_of(cpu);
        if !self.m.covers_core(e.allowed(), core) {
            return QueueRef::Pinned(cpu);
        }
        let c = self.balance_candidate(e, id, Some(cpu), now);
        let mut target = self.ops().rebalance(&self.m, &c, core, self.tun());
        let mut rotated = false;
        if target == core {
            if let Some(other) = rotation_target(&self.m, &c, core, e.core_since, self.tun()) {
                (target, rotated) = (other, true);
            }
        }
        let spread = self.spread_siblings(e, target, Some(cpu));
        if spread != target {
            (target, rotated) = (spread, false);
        }
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
            if rotated {
                self.m.note_rotation(core, target, now);
            }
            QueueRef::Core(target)
        } else {
            QueueRef::Core(core)
        }
    }
}
