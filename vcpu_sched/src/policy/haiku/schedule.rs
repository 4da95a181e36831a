//! What a CPU does when it calls `schedule`: take the stopped entity off
//! (its penalties, its load, back to a queue or blocked), pick the next
//! (own queues, then stealing nearest first, with SMT isolation's force
//! idle), dispatch it with a time slice computed from the time it used,
//! or publish the CPU idle (the idler's half of the lost-wake-up
//! protocol); then hand what it leaves waiting to idle CPUs.

use super::{CpuAcct, HaikuScheduler, Slot, CO_START_SCAN, LEFTOVER_KICKS, MAX_PICK_ATTEMPTS};
use crate::entity::{After, Entity, QueueRef, RunState};
use crate::placement::{IDLE_PRIO, NO_ENTITY};
use crate::quantum::{full_quantum, time_left, Turn};
use crate::run_queue::{QueueEntry, RunQueue};
use crate::share::{entitlement, SHARE_SCALE};
use crate::{CoreId, CpuId, Dispatch, EntityId, Nanos, SchedClass, StopReason};
use parking_lot::MutexGuard;
use std::sync::atomic::{fence, Ordering};

/// What `stop_running` leaves to the rest of `schedule`.
pub(super) struct Stopped<'a> {
    /// The stopped entity, if it went back to a queue.
    pub requeued: Option<EntityId>,
    /// The CPU's core queue, still locked after the stopped entity was
    /// requeued there, for the pick (`take_local`): one lock and unlock
    /// of that queue per quantum end instead of two. Held only when
    /// nothing `schedule` does between the requeue and the pick would
    /// lock a queue or an entity (no due boost, no renewal due, the CPU
    /// in service), when the CPU's pinned queue is empty (it comes before
    /// the core queue in the lock order, so the pick does not look at
    /// it) and without SMT isolation (whose pick may refuse the head).
    /// The push and the pop are then one critical section: the original
    /// two with nothing between them, one of their interleavings.
    pub held: Option<MutexGuard<'a, RunQueue>>,
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

/// Where a dispatched entry came from: sibling turns start only from a
/// pick of the queues (`cosched.rs`), so that a directed yield or a
/// co-stop, which bypass the queues, cannot start a shared slice again
/// and again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pick {
    /// The queues' best entry (or a co-start's preference there).
    Queue,
    /// A co-stop's or a directed yield's laggard.
    Pull,
    /// A sibling handed the rest of a shared slice.
    Sibling,
    /// A directed yield's laggard in a VM wider than its CPUs, lent the
    /// rest of the yielder's slice.
    Lent,
}

/// Why a stop gives its CPU to a particular sibling (`CpuAcct::pull`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pull {
    /// A co-stop: the laggard the stopped entity is ahead of, at any level.
    CoStop,
    /// A yield, taken at the level of the CPU's best entry or above: the
    /// guest's own yield ahead of a laggard sibling (siblings that all
    /// yield would otherwise trade CPUs back and forth: scenario 5), and
    /// a directed yield in a VM that takes sibling turns (which pass its
    /// slice round by turns of their own).
    Yield,
    /// The VMM's directed yield from this entity (`yield_to`: the spin
    /// watch's spinner to a parked lock holder), taken at the level of
    /// the CPU's best entry besides the yielder's, or above.
    YieldFrom(EntityId),
}

impl HaikuScheduler {
    /// Take the running entity off `cpu`; says whether it was requeued
    /// (and may leave its core queue locked for the pick, see `Stopped`).
    /// `halted_ns` of its turn it spent halted (learnt late by the VMM)
    /// are not charged as run time.
    pub(super) fn stop_running(
        &self,
        cpu: CpuId,
        now: Nanos,
        reason: StopReason,
        halted_ns: Nanos,
        acct: &mut CpuAcct,
    ) -> Stopped<'_> {
        match self.stop_entity(cpu, now, reason, halted_ns, acct) {
            Some((id, held)) => Stopped {
                requeued: Some(id),
                held,
            },
            None => Stopped {
                requeued: None,
                held: None,
            },
        }
    }

    /// `stop_running`'s work: the requeued entity and the held queue.
    fn stop_entity(
        &self,
        cpu: CpuId,
        now: Nanos,
        reason: StopReason,
        halted_ns: Nanos,
        acct: &mut CpuAcct,
    ) -> Option<(EntityId, Option<MutexGuard<'_, RunQueue>>)> {
        let _p = crate::profiler::scope("haiku::stop_running");
        let slot = &self.m.cpus[cpu.0 as usize];
        let turn = acct.turn.take();
        let shared = acct.sibling_until.take();
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
        let mut guard = self.slots.get(raw as usize)?.lock();
        let Slot { seq, entity, .. } = &mut *guard;
        let e = entity
            .as_mut()
            .filter(|e| e.state == RunState::Running(cpu))?;
        if let Some(t) = turn.filter(|t| t.entity == e.id) {
            // A wake cut its quantum (`cut_runner_quantum`): measure the
            // time used against the cut one.
            e.quantum_full = e.quantum_full.min(t.full);
        }
        let ran = now
            .saturating_sub(e.dispatched_at)
            .saturating_sub(halted_ns);
        e.counters.run_time = e.counters.run_time.saturating_add(ran);
        e.used = e.used.saturating_add(ran);
        e.progress = e.progress.saturating_add(ran);
        if let Some(s) = &e.sync {
            s.ran(e.progress);
            if reason == StopReason::QuantumEnd {
                self.sibling_handoff(shared, now, acct);
            }
            if reason == StopReason::Yielded {
                // Only a turn the VMM passed (`pass_turn`) is lent; a guest's
                // own yield and `yield_to` give the sibling a turn of its own.
                let passed = matches!(acct.yield_to, Some(y) if y.passes && y.from == e.id);
                acct.lend_until = passed
                    .then(|| self.lend_until(e, s, turn.as_ref(), now))
                    .flatten();
                // A yield while a sibling is parked: a directed yield to it,
                // if the yielder is ahead of it by a minimal quantum (else
                // siblings that all yield, ahead of none, trade CPUs back
                // and forth: scenario 5).
                let ahead = self.tun().quantum_table(self.mode()).minimal_quantum;
                acct.pull = s
                    .laggard_of(e.id, e.progress)
                    .filter(|l| l.skew >= ahead)
                    .map(|l| (l.id, Pull::Yield));
            }
        }
        e.load.ran(ran);
        e.share.ran_until(now, self.tun().share_half_life);
        self.charge_shares(e, ran, now);
        acct.busy = acct.busy.saturating_add(ran);
        if acct.foreign_at_dispatch || self.m.sibling_foreign(cpu, e.vm) {
            acct.foreign = acct.foreign.saturating_add(ran);
        }
        e.last_core_active = self.m.add_active(cpu, ran);
        if e.removed {
            e.uncharge_remove(&self.m);
            self.free_slot(raw, &mut guard);
            return None;
        }
        let id = e.id;
        e.refresh_load(&self.m);
        // A boost lasts until the entity blocks or has had its share: one
        // whose quantum ends below its entitlement keeps it (the penalty
        // step underneath still counts).
        let owed = e.prio.is_boosted() && reason != StopReason::Yielded && {
            let others = self.others_ready(e, core);
            let entitled = entitlement(self.m.core_cpus(core).len(), e.share_weight(), others);
            entitled < SHARE_SCALE
                && e.share.value_at(now, self.tun().share_half_life) < entitled
                && !self.starving(core, now)
        };
        let waker = e.blocked_in_quantum;
        // A sibling turn's end (`cosched.rs`) with the entity's own
        // quantum not used up: back behind its level, its use kept, no
        // penalty step (a step per turn would cycle its penalty, and so
        // its priority, several times faster than a hog's).
        let sibling_turn = reason == StopReason::QuantumEnd
            && shared.is_some()
            && time_left(self.table(), e.quantum_full, e.used).is_some();
        let after = if sibling_turn {
            After::Back
        } else {
            e.after_stop(reason, self.tun(), self.mode())
        };
        if owed && after == After::Back {
            e.prio.boost(self.tun(), self.mode());
        } else if waker && after == After::Back && !e.prio.is_boosted() {
            acct.due_next = self.due_at_quantum_end(e, core, now).map(|at| (id, at));
        }
        if after == After::Block {
            if let Some(s) = &e.sync {
                s.blocked(now);
            }
            e.state = RunState::Blocked;
            e.slept_at = now;
            e.uncharge_block(&self.m);
            return None;
        }
        if self.throttle_if_spent(e, cpu, now, acct) {
            // Out of every queue: nothing to be due for.
            acct.due_next = None;
            return None;
        }
        e.queued_at = now;
        if !self.m.in_service(cpu) || !e.allowed().contains(cpu) {
            // This CPU left service, or the entity's affinity no longer
            // holds it: placed elsewhere as on a wake.
            let d = self.place(e, id, seq, now);
            if d.kick {
                acct.kicks.push(d.cpu);
            }
            return None;
        }
        let (q, front) = match after {
            After::Front => (self.m.queue_for(e.allowed(), cpu), true),
            _ => {
                let q = self.requeue_target(e, id, cpu, now);
                if q == QueueRef::Core(core) && reason == StopReason::QuantumEnd {
                    acct.gather = self.gather_target(e, core, cpu, now);
                }
                (q, false)
            }
        };
        let hold = q == QueueRef::Core(core)
            && !self.m.smt_isolation
            && acct.due.is_none()
            && acct.gather.is_none()
            && !self.renewals.due(now)
            && slot.pinned_len.load(Ordering::SeqCst) == 0;
        if hold {
            let held = self.enqueue_held(e, id, seq, q, front);
            if self.m.serves(q) {
                return Some((id, Some(held)));
            }
            drop(held);
            if let Some((y, true)) = self.serve(e, id, seq, q, now) {
                acct.kicks.push(y);
            }
            return Some((id, None));
        }
        if let Some((y, true)) = self.enqueue_served(e, id, seq, q, front, now) {
            acct.kicks.push(y);
        }
        Some((id, None))
    }

    /// Best entry of the CPU's pinned queue and its core's queue; `held`:
    /// the core queue, locked since the requeue (`Stopped::held`; the
    /// pinned queue was empty then, and is not locked after it: the lock
    /// order puts it first).
    fn take_local(&self, cpu: CpuId, held: Option<MutexGuard<'_, RunQueue>>) -> Local {
        let core = self.m.core_of(cpu);
        let slot = &self.m.cpus[cpu.0 as usize];
        let cs = &self.m.cores[core.0 as usize];
        if let Some(mut shared) = held {
            // Held only with the pinned queue empty and SMT isolation off
            // (`Stopped::held`): the pick is the core queue's head.
            let got = self
                .co_start_pick(cpu, &mut shared)
                .or_else(|| shared.pop());
            self.m
                .publish_len(QueueRef::Core(core), &cs.queued, shared.len());
            return got.map_or(Local::Empty, Local::Got);
        }
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
                let got = self
                    .co_start_pick(cpu, &mut shared)
                    .or_else(|| shared.pop());
                self.m
                    .publish_len(QueueRef::Core(core), &cs.queued, shared.len());
                got
            }
        };
        got.map_or(Local::Empty, Local::Got)
    }

    /// Relaxed co-scheduling's co-start (`tunables.co_start`): when the
    /// head's VM runs nowhere else in the LLC, the first entry of the same
    /// level whose VM does (a sibling of a running vCPU, which may be
    /// spinning for it at a barrier, on a lock or for an IPI's answer).
    /// Same level only: never above a better-placed entity; FIFO among
    /// the siblings; never the VM this CPU just ran. None: the head.
    fn co_start_pick(&self, cpu: CpuId, q: &mut RunQueue) -> Option<QueueEntry> {
        // Every VM (the tunable), or those with relaxed co-scheduling.
        let all = self.tun().co_start;
        if !all && self.cosched_vms.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let head = q.head()?;
        let level = head.level;
        let llc = &self.m.topo.llcs[self.m.llc_of(cpu).0 as usize].cpus;
        let runs_elsewhere =
            |vm: crate::VmId| llc.iter().any(|&c| c != cpu && self.m.runs_vm(c, vm));
        if runs_elsewhere(head.vm) {
            return None;
        }
        // Not the VM this CPU just ran (its slot keeps the VM after the
        // stop): its quantum ended, and preferring it again would let a
        // VM with a vCPU running anywhere keep every CPU.
        let last = self.m.cpus[cpu.0 as usize].vm.load(Ordering::Acquire);
        // Only the head's level can hold a same-level sibling, and only
        // its first few entries are looked at: the pick's cost stays flat
        // however many vCPUs wait (each look reads the LLC's CPUs).
        q.take_first_at_level(level, CO_START_SCAN, |e| {
            (all || e.cosched) && e.vm.0 != last && e.allows(cpu) && runs_elsewhere(e.vm)
        })
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
    fn find_work(
        &self,
        cpu: CpuId,
        acct: &mut CpuAcct,
        held: Option<MutexGuard<'_, RunQueue>>,
    ) -> Option<QueueEntry> {
        match self.take_local(cpu, held) {
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

    /// Pick and dispatch the next entity for `cpu`, or idle; `held`: its
    /// core queue, still locked since the requeue (`Stopped::held`).
    pub(super) fn pick_next(
        &self,
        cpu: CpuId,
        now: Nanos,
        acct: &mut CpuAcct,
        mut held: Option<MutexGuard<'_, RunQueue>>,
    ) -> Dispatch {
        let _p = crate::profiler::scope("haiku::pick_next");
        for _ in 0..MAX_PICK_ATTEMPTS {
            let lent = acct.lend_until.take();
            if let Some((target, why)) = acct.pull.take() {
                // A co-stop's or a yield's laggard first (no queue may
                // stay locked: the pull locks the entity).
                drop(held.take());
                let yielded = why != Pull::CoStop;
                let (got, pick) = match (why, lent) {
                    // Lent the yielder's slice: it waits no longer than
                    // behind the spinner, so no level floor.
                    (_, Some(_)) if yielded => (self.pull(cpu, target, 0), Pick::Lent),
                    (Pull::YieldFrom(from), _) => {
                        (self.pull_yield_target(cpu, target, Some(from)), Pick::Pull)
                    }
                    (Pull::Yield, _) => (self.pull_yield_target(cpu, target, None), Pick::Pull),
                    (Pull::CoStop, _) => (self.pull(cpu, target, 0), Pick::Pull),
                };
                if pick == Pick::Lent {
                    acct.lend_until = lent;
                }
                if let Some(d) = got.and_then(|en| self.dispatch(cpu, en, now, acct, pick)) {
                    if yielded {
                        acct.directed_yields += 1;
                    }
                    return d;
                }
                acct.lend_until = None;
            }
            if let Some((vm, _)) = acct.sibling_until {
                // Sibling turns: the rest of the shared slice to a parked
                // sibling, if one waits (`cosched.rs`).
                match self.take_sibling(cpu, vm, acct.last, held.take()) {
                    Some(en) => {
                        if let Some(d) = self.dispatch(cpu, en, now, acct, Pick::Sibling) {
                            acct.costops += 1;
                            return d;
                        }
                    }
                    None => acct.sibling_until = None,
                }
            }
            let entry = match self.find_work(cpu, acct, held.take()) {
                Some(x) => x,
                None => match self.go_idle(cpu, acct) {
                    Some(x) => x,
                    None => break,
                },
            };
            if let Some(d) = self.dispatch(cpu, entry, now, acct, Pick::Queue) {
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
        let found = self.find_work(cpu, acct, None)?;
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
        pick: Pick,
    ) -> Option<Dispatch> {
        let _p = crate::profiler::scope("haiku::dispatch");
        let mut guard = self.slots.get(entry.id.index() as usize)?.lock();
        let Slot { seq, entity, .. } = &mut *guard;
        let e = entity.as_mut()?;
        let RunState::Queued { queue, seq: s, .. } = e.state else {
            return None;
        };
        if s != entry.seq {
            return None;
        }
        if e.removed {
            e.uncharge_remove(&self.m);
            self.free_slot(entry.id.index(), &mut guard);
            return None;
        }
        if !e.allowed().contains(cpu) || !self.m.in_service(cpu) {
            // Popped while its affinity changed or this CPU left service.
            let d = self.place(e, entry.id, seq, now);
            if d.kick {
                acct.kicks.push(d.cpu);
            }
            return None;
        }
        if self.throttle_if_spent(e, cpu, now, acct) {
            // Woke with its cap's budget spent: it runs at the renewal.
            return None;
        }
        if let Some(laggard) = self.costop_target(e, acct) {
            // Co-stopped: back to the front of its queue, and this CPU
            // takes the sibling it is ahead of (`cosched.rs`).
            acct.pull = Some((laggard, Pull::CoStop));
            if let Some((y, true)) = self.enqueue_served(e, entry.id, seq, queue, true, now) {
                acct.kicks.push(y);
            }
            return None;
        }
        let core = self.m.core_of(cpu);
        if !self.m.occupy(core, e.vm) {
            if let Some((y, true)) = self.enqueue_served(e, entry.id, seq, queue, true, now) {
                acct.kicks.push(y);
            }
            return None;
        }
        e.account_dispatch(&self.m, cpu, now);
        e.charge_ready(&self.m, core);
        e.state = RunState::Running(cpu);
        e.unpark_sync();
        let slice = self.slice_for(e, core);
        e.dispatched_at = now;
        acct.turn = Some(Turn::new(
            self.table(),
            entry.id,
            now,
            e.used,
            e.quantum_full,
            slice,
            e.prio.class == SchedClass::Realtime,
        ));
        let slice = self.cut_for_due(acct, entry.id, now, slice);
        let slice = self.cut_for_siblings(e, acct, now, slice, pick);
        let slot = &self.m.cpus[cpu.0 as usize];
        slot.prio
            .store(e.prio.effective() as i32, Ordering::Release);
        slot.interactive
            .store(e.is_interactive(self.tun().bursty_load), Ordering::Relaxed);
        slot.vm.store(e.vm.0, Ordering::Release);
        slot.share.publish(
            &e.share,
            e.share.measured(now, self.tun().share_half_life),
            e.share_weight(),
            now,
        );
        slot.running.store(entry.id.index(), Ordering::Release);
        acct.dispatches += 1;
        if acct.last != Some(entry.id) {
            acct.switches += 1;
        }
        acct.last = Some(entry.id);
        acct.foreign_at_dispatch = self.m.sibling_foreign(cpu, e.vm);
        // (Not for a lent slice: its yielder, now the laggard, just gave
        // this CPU up, and a co-start would take another VM's CPU for it.)
        if e.sync.is_some() && pick != Pick::Lent {
            if let Some(c) = self.costart_cpu(e, cpu) {
                acct.kicks.push(c);
                acct.costarts += 1;
            }
        }
        Some(Dispatch::run(entry.id, slice))
    }

    /// A waker that used its quantum over several wakes and stopped at or
    /// just above its entitled share of `core` (the quantum-end half of
    /// the fair-share boost; the wake half is `judge_share`): the moment
    /// its share falls to its entitlement, if that is within the mode's
    /// maximum latency; or, below it already, boost it now. Without this,
    /// a vCPU hovering at its fair share waits out a whole low-E slice
    /// (several ms) behind a hog at every quantum end. Hogs never block,
    /// so they never get here and Haiku's penalty cycle orders them.
    fn due_at_quantum_end(&self, e: &mut Entity, core: CoreId, now: Nanos) -> Option<Nanos> {
        let others = self.others_ready(e, core);
        self.judge_on(e, core, others, now, &mut || self.starving(core, now))
    }

    /// The turn just dispatched on this CPU ends no later than the due time
    /// of a waker that waits for it (`CpuAcct::due`, set at that waker's
    /// quantum end), never before the minimal quantum; the waker itself
    /// dispatched clears the due. Returns the slice to run.
    fn cut_for_due(&self, acct: &mut CpuAcct, id: EntityId, now: Nanos, slice: Nanos) -> Nanos {
        let Some((waker, at)) = acct.due else {
            return slice;
        };
        if waker == id {
            acct.due = None;
            return slice;
        }
        let Some(turn) = acct.turn.as_mut().filter(|t| !t.realtime) else {
            return slice;
        };
        let end = at.max(turn.floor);
        if end >= turn.end {
            return slice;
        }
        turn.cut_to(end);
        acct.quantum_cuts += 1;
        end - now
    }

    /// Time slice from the time used: min(cap(ready), base(E)) - used; a
    /// remainder of at most minimal/2 counts as a quantum end first.
    fn slice_for(&self, e: &mut Entity, core: CoreId) -> Nanos {
        let ready = self.m.ready_on_core(core) + 1;
        let cpus = self.m.core_cpus(core).len();
        let realtime = e.prio.class == SchedClass::Realtime;
        let (mode, t) = (self.mode(), self.tun());
        let table = t.quantum_table(mode);
        let mut full = full_quantum(
            table,
            e.prio.base_quantum_in(t, mode),
            realtime,
            ready,
            cpus,
        );
        full = self.weighted(e, core, full);
        if time_left(table, full, e.used).is_none() {
            e.end_quantum(t, mode);
            full = full_quantum(
                table,
                e.prio.base_quantum_in(t, mode),
                realtime,
                ready,
                cpus,
            );
            full = self.weighted(e, core, full);
        }
        e.quantum_full = full;
        self.capped(e, full.saturating_sub(e.used).max(1))
    }

    /// Entries still waiting in `cpu`'s queues after it picked (the entity
    /// it just requeued, or two placed on it at once): move each to an idle
    /// CPU that may run it and ask the caller to kick that CPU. At most
    /// `LEFTOVER_KICKS` per call; each kicked CPU does the same for what it
    /// leaves behind, so the chain covers every waiting entry.
    pub(super) fn kick_for_leftovers(
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
        let mut guard = self.slots.get(id.index() as usize)?.lock();
        let Slot { seq, entity, .. } = &mut *guard;
        // The same entity, not one added since in the same slot.
        let e = entity.as_mut().filter(|e| e.id == id)?;
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
    pub(super) fn idle_siblings_with_work(&self, cpu: CpuId) -> Vec<CpuId> {
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
}
