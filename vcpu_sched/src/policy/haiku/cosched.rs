//! Relaxed co-scheduling in the Haiku policy (per VM, `set_coschedule`;
//! the shared state and the skew in `crate::cosched`):
//! - co-start: when a sibling is dispatched while another waits parked,
//!   the CPU serving the laggard's queue is kicked if it runs another VM
//!   at a level no higher than the laggard's; its pick then takes the
//!   laggard over the preempted runner (`co_start_pick`), so the two run
//!   side by side;
//! - sibling spread: a sibling placed on a wake or requeued at its
//!   quantum end avoids a core where a sibling runs or the laggard waits
//!   (`spread_siblings`), in VMs that fit their CPUs;
//! - co-stop: a sibling whose skew over a parked laggard reached
//!   `tunables.costop_skew` is not dispatched: it goes back to the front
//!   of its queue and its CPU takes the laggard instead;
//! - directed yield: a sibling that yields (the guest's yield, a PAUSE-loop
//!   exit) or that the VMM saw waiting on a parked sibling (`yield_to`: a
//!   spin on a lock it may hold; `pass_turn`: an IPI sent to it, a spin
//!   with no holder in sight) gives its CPU to that sibling; a passed
//!   turn, in a VM wider than its CPUs, for the rest of the yielder's
//!   slice only (`lend_until`), so that its siblings can pass one slice
//!   round as each of them reaches a wait.
//!
//! - sibling turns (`Coschedule::Turns`, turns of `tunables.sibling_turn`):
//!   in a VM wider than its CPUs
//!   (more co-scheduled vCPUs than CPUs they may use) at most as many
//!   siblings as CPUs run at once, and a round of a barrier, a
//!   shootdown's answer or a lock hand-off waits for the one parked. Such
//!   a VM advances once per change of sibling, so a sibling dispatched
//!   while another is parked runs `sibling_turn` of its slice, then hands
//!   the rest to a parked sibling, the first in pick order of the CPU's
//!   queues (`cut_for_siblings`, `sibling_handoff`, `take_sibling`), which
//!   does the same, until the slice the scheduler gave the first of them
//!   is over. The siblings share that one slice: the CPU goes to the
//!   queue when it ends, as it would have.
//!
//! Never starving other VMs: a co-stop swaps one sibling's turn for
//! another's on the same CPU (the CPU had picked the leader; nobody else
//! waits longer than it would have); a directed yield takes the laggard
//! only at a level at least that of the best entry of the CPU's own
//! queues, where Haiku's pick would have taken it next anyway, or (a
//! passed turn in a VM wider than its CPUs) at any level for the rest of
//! the yielder's slice,
//! which ends when the yielder's would have (its stop there keeps its
//! quantum's use, as a sibling turn's end does); a co-start
//! preempts only a runner at a level no higher than the laggard's, which
//! goes back to the front of its level with its time used kept (Haiku's
//! preemption rule) and runs next. Each sibling that runs this way is
//! charged its run time and quantum ends as any other, so the penalty
//! cycle and the starvation bound (`mod.rs`) hold unchanged. Sibling
//! turns divide one slice the queues' pick gave a sibling: the other
//! entries wait no longer than behind that slice; a turn's end steps no
//! penalty (stepped per turn, a sibling's penalty, and so its level,
//! would cycle faster than a hog's: a hog starved in the simulator); and
//! a directed yield's or a co-stop's laggard never starts a shared slice
//! (chained, they kept both CPUs for the VM in scenario 23); a lent one
//! runs out the slice the yielder was in.

use super::schedule::Pick;
use super::{CpuAcct, HaikuScheduler, CO_START_SCAN};
use crate::cosched::{Laggard, VmSync};
use crate::entity::{Entity, QueueRef, RunState};
use crate::run_queue::{QueueEntry, RunQueue};
use crate::{CoreId, Coschedule, CpuId, EntityId, Nanos, SchedError, VmId};
use parking_lot::MutexGuard;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Cores a sibling spread looks at beyond the one chosen (nearest first).
const SPREAD_SCAN: usize = 8;

/// A directed yield the VMM asked for, noted on the yielder's CPU for its
/// next `schedule` (`CpuAcct::yield_to`).
#[derive(Debug, Clone, Copy)]
pub(super) struct DirectedYield {
    pub(super) from: EntityId,
    pub(super) to: EntityId,
    /// `pass_turn`: lends the rest of the yielder's slice.
    pub(super) passes: bool,
    /// The VM takes sibling turns (its yields keep the yielder's level
    /// as their floor: `schedule::Pull`). Read here, under the yielder's
    /// lock: `schedule` may hold a queue lock when it takes the note,
    /// and an entity's lock is taken before a queue's.
    pub(super) turns: bool,
}

impl HaikuScheduler {
    /// The VM's shared state if it co-schedules (looked up once per
    /// `add_entity`).
    pub(super) fn vm_sync_of(&self, vm: VmId) -> Option<Arc<VmSync>> {
        self.vm_sync.lock().get(&vm).cloned()
    }

    /// Switch a VM's co-scheduling; its entities follow at once.
    pub(super) fn set_vm_coschedule(&self, vm: VmId, mode: Coschedule) -> Result<(), SchedError> {
        let sync = {
            let mut map = self.vm_sync.lock();
            match mode {
                Coschedule::Relaxed | Coschedule::Turns => {
                    let turns = mode == Coschedule::Turns;
                    if let Some(s) = map.get(&vm) {
                        s.set_turns(turns);
                        return Ok(());
                    }
                    let s = Arc::new(VmSync::default());
                    s.set_turns(turns);
                    map.insert(vm, Arc::clone(&s));
                    self.cosched_vms.fetch_add(1, Ordering::Relaxed);
                    Some(s)
                }
                Coschedule::Off => {
                    if map.remove(&vm).is_none() {
                        return Ok(());
                    }
                    self.cosched_vms.fetch_sub(1, Ordering::Relaxed);
                    None
                }
            }
        };
        // Entities already added (a rare change: one lock per slot in use).
        let used = self.free.lock().next as usize;
        for slot in self.slots.iter().take(used) {
            let mut g = slot.lock();
            let Some(e) = g.entity.as_deref_mut().filter(|e| e.vm == vm) else {
                continue;
            };
            e.unpark_sync();
            e.sync = sync.clone();
            if let RunState::Queued { queue, level, .. } = e.state {
                e.park_sync(level, queue);
            }
        }
        Ok(())
    }

    /// Co-stop: the laggard whose turn `e` (just popped for `cpu`) gives
    /// up, if its skew passed the bound. At most once per `schedule`
    /// call, so a laggard that cannot be taken leaves the leader to run.
    pub(super) fn costop_target(&self, e: &Entity, acct: &mut CpuAcct) -> Option<EntityId> {
        let s = e.sync.as_ref()?;
        let bound = self.tun().costop_skew;
        if bound == 0 || acct.costop_done {
            return None;
        }
        let l = s.laggard_of(e.id, e.progress)?;
        if l.skew < bound {
            return None;
        }
        acct.costop_done = true;
        acct.costops += 1;
        Some(l.id)
    }

    /// Sibling turns: `e`'s VM has more co-scheduled vCPUs than the CPUs
    /// `e` may use, so its siblings can only run in turns.
    pub(super) fn wider_than_its_cpus(&self, e: &Entity, s: &Arc<VmSync>) -> bool {
        let members = vcpus_of(s);
        let allowed = e.allowed();
        let cpus = if allowed.all {
            self.m.cpus.len()
        } else {
            allowed.set.len()
        };
        members > cpus
    }

    /// A directed yield by `e` (stopping with `turn`) in a relaxed VM
    /// wider than its CPUs: the end of `e`'s slice, which the sibling it yields to
    /// runs out, if a minimal quantum of it is left. Such a VM's siblings
    /// wait for each other on one CPU; lent, the sibling takes nothing
    /// from the CPU's other entries (the slice ends when it would have).
    pub(super) fn lend_until(
        &self,
        e: &Entity,
        s: &Arc<VmSync>,
        turn: Option<&crate::quantum::Turn>,
        now: Nanos,
    ) -> Option<Nanos> {
        let end = turn.filter(|t| t.entity == e.id && !t.realtime)?.end;
        let minimal = self.table().minimal_quantum;
        // (Sibling turns pass their slice round by turns of their own.)
        let lends = !s.takes_turns() && self.wider_than_its_cpus(e, s);
        (lends && end >= now.saturating_add(minimal)).then_some(end)
    }

    /// Sibling turns at a dispatch: the slice `e` runs of `slice`. A hand-off
    /// (`acct.sibling_until` names `e`'s VM) runs `sibling_turn` of what is
    /// left of the shared slice; a sibling of a wide VM dispatched while
    /// another is parked runs `sibling_turn` of its own and shares the rest.
    pub(super) fn cut_for_siblings(
        &self,
        e: &Entity,
        acct: &mut CpuAcct,
        now: Nanos,
        slice: Nanos,
        pick: Pick,
    ) -> Nanos {
        if pick == Pick::Lent {
            if let (Some(until), Some(turn)) = (acct.lend_until.take(), acct.turn.as_mut()) {
                let end = until.max(turn.floor);
                if end < turn.end {
                    turn.end_early(end);
                }
                // Its stop at the lent slice's end keeps its quantum's use,
                // as a sibling turn's does (not at its own, shorter end: a
                // quantum end then).
                if turn.end >= until {
                    acct.sibling_until = Some((e.vm, until));
                }
                return turn.end.saturating_sub(now);
            }
        }
        let handed = acct
            .sibling_until
            .take()
            .filter(|(vm, _)| *vm == e.vm && pick == Pick::Sibling);
        let turn_len = self.tun().sibling_turn;
        let Some(s) = e.sync.as_ref().filter(|s| turn_len > 0 && s.takes_turns()) else {
            return slice;
        };
        let Some(turn) = acct.turn.as_mut().filter(|t| !t.realtime) else {
            return slice;
        };
        let until = match handed {
            Some((_, until)) => until,
            None if pick == Pick::Queue
                && s.parked_count() > 0
                && self.wider_than_its_cpus(e, s) =>
            {
                turn.end
            }
            None => return slice,
        };
        let end = now.saturating_add(turn_len).min(until).max(turn.floor);
        if end < turn.end {
            turn.end_early(end);
        }
        acct.sibling_until = Some((e.vm, until));
        turn.end.saturating_sub(now)
    }

    /// Sibling turns at a quantum end: the shared slice (`until`) goes on
    /// for the VM on this CPU if a minimal quantum of it is left; the pick
    /// then takes a parked sibling first (`take_sibling`).
    pub(super) fn sibling_handoff(
        &self,
        until: Option<(VmId, Nanos)>,
        now: Nanos,
        acct: &mut CpuAcct,
    ) {
        let minimal = self.table().minimal_quantum;
        acct.sibling_until = until.filter(|(_, at)| *at >= now.saturating_add(minimal));
    }

    /// The pick while a VM's siblings share this CPU's slice: the first
    /// sibling allowed here among the first `CO_START_SCAN` entries of
    /// this CPU's queues (`held`: its core queue, still locked since the
    /// requeue), then of the other queues, nearest first; never `last`,
    /// the sibling whose turn just ended here. Pick order, so
    /// the sibling that waited longest at the best level goes first.
    pub(super) fn take_sibling(
        &self,
        cpu: CpuId,
        vm: VmId,
        last: Option<EntityId>,
        held: Option<MutexGuard<'_, RunQueue>>,
    ) -> Option<QueueEntry> {
        let core = self.m.core_of(cpu);
        let own = QueueRef::Core(core);
        // Not the sibling whose turn just ended (requeued, it may head
        // the queue): the turns go round.
        let sibling = |en: &QueueEntry| en.vm == vm && Some(en.id) != last && en.allows(cpu);
        let local = match held {
            Some(mut q) => {
                let got = q.take_first_within(CO_START_SCAN, sibling);
                self.m
                    .publish_len(own, &self.m.cores[core.0 as usize].queued, q.len());
                got
            }
            None => self.m.take_from_within(own, CO_START_SCAN, sibling),
        };
        if local.is_some() {
            return local;
        }
        let pinned = QueueRef::Pinned(cpu);
        if self.m.cpus[cpu.0 as usize]
            .pinned_len
            .load(Ordering::SeqCst)
            > 0
        {
            if let Some(got) = self.m.take_from_within(pinned, CO_START_SCAN, sibling) {
                return Some(got);
            }
        }
        self.m.visit_queued(cpu, |q| {
            self.m.take_from_within(q, CO_START_SCAN, |en| {
                sibling(en) && self.m.compatible(core, en.vm)
            })
        })
    }

    /// Sibling spread: the core `e` (runnable, not running) goes to
    /// instead of `core`, if `core` holds a sibling of a co-scheduled VM
    /// that fits its CPUs and a near core it may use holds none. Two
    /// siblings behind one CPU never run side by side, and a balanced
    /// load (two of them on one CPU, two hogs on the other) keeps them so:
    /// a barrier VM at 2:1 fell to 2-3 % of its rounds in the runs that
    /// began that way, under the host kernel as under this policy.
    /// `running_on`: the CPU `e` just left (a sibling running there is
    /// `e` itself). At most `SPREAD_SCAN` cores looked at; the load it
    /// leaves uneven is the next quantum ends' rebalance.
    pub(super) fn spread_siblings(
        &self,
        e: &Entity,
        core: CoreId,
        running_on: Option<CpuId>,
    ) -> CoreId {
        let Some(s) = e.sync.as_ref() else {
            return core;
        };
        if s.takes_turns() || self.wider_than_its_cpus(e, s) {
            return core;
        }
        let laggard_core = s
            .laggard_of(e.id, e.progress)
            .map(|l| self.m.core_of_queue(l.queue));
        let holds_sibling = |k: CoreId| {
            laggard_core == Some(k)
                || self
                    .m
                    .core_cpus(k)
                    .iter()
                    .any(|&c| Some(c) != running_on && self.m.runs_vm(c, e.vm))
        };
        if !holds_sibling(core) {
            return core;
        }
        self.m
            .cores_near(core)
            .iter()
            .take(SPREAD_SCAN)
            .copied()
            .find(|&k| k != core && self.m.eligible(k, e.allowed()) && !holds_sibling(k))
            .unwrap_or(core)
    }

    /// Co-start: a CPU to kick so that the laggard of `e`'s VM runs next
    /// to `e`, just dispatched on `cpu` (see the module comment).
    pub(super) fn costart_cpu(&self, e: &Entity, cpu: CpuId) -> Option<CpuId> {
        let l: Laggard = e.sync.as_ref()?.laggard_of(e.id, e.progress)?;
        let serving: &[CpuId] = match &l.queue {
            QueueRef::Core(c) => self.m.core_cpus(*c),
            QueueRef::Pinned(p) => std::slice::from_ref(p),
        };
        serving.iter().copied().find(|&c| {
            c != cpu
                && self.m.runs_other_vm(c, e.vm)
                && self.m.cpus[c.0 as usize].prio.load(Ordering::Acquire) <= i32::from(l.level)
        })
    }

    /// The level of the best entry in `cpu`'s own queues, the entry of
    /// `besides` left out (None: none).
    fn local_top_level(&self, cpu: CpuId, besides: Option<EntityId>) -> Option<u8> {
        let top = |q: &RunQueue| match besides {
            Some(id) => q.top_level_besides(id),
            None => q.top_level(),
        };
        let slot = &self.m.cpus[cpu.0 as usize];
        let pinned = (slot.pinned_len.load(Ordering::SeqCst) > 0)
            .then(|| top(&slot.pinned.lock()))
            .flatten();
        let core = self.m.core_of(cpu);
        let shared = top(&self.m.cores[core.0 as usize].queue.lock());
        pinned.max(shared)
    }

    /// A yield: take `target` out of its queue for `cpu` if it may run
    /// there at a level at least that of `cpu`'s own best entry, the
    /// entry of `yielder` left out for the VMM's directed yield. With the
    /// yielder's own level as the floor, the spin watch's yields to a
    /// parked lock holder its penalties had put below the spinner were
    /// refused and the spinner picked again, to spin once more (half of
    /// them at 3:1).
    pub(super) fn pull_yield_target(
        &self,
        cpu: CpuId,
        target: EntityId,
        yielder: Option<EntityId>,
    ) -> Option<QueueEntry> {
        let floor = self.local_top_level(cpu, yielder).unwrap_or(0);
        self.pull(cpu, target, floor)
    }

    /// Take `target` out of whatever queue holds it, for `cpu`, if it
    /// waits there at `floor` or above and may run on `cpu`. The entry is
    /// then in flight, as after a pop; `dispatch` checks it again.
    pub(super) fn pull(&self, cpu: CpuId, target: EntityId, floor: u8) -> Option<QueueEntry> {
        let g = self.slots.get(target.index() as usize)?.lock();
        let e = g
            .entity
            .as_deref()
            .filter(|e| e.id == target && !e.removed)?;
        let RunState::Queued { queue, seq, level } = e.state else {
            return None;
        };
        let core = self.m.core_of(cpu);
        if level < floor || !e.allowed().contains(cpu) || !self.m.compatible(core, e.vm) {
            return None;
        }
        if !self.m.remove(queue, target, seq, level) {
            return None;
        }
        Some(QueueEntry {
            id: target,
            seq,
            level,
            since: e.queued_at,
            vm: e.vm,
            affinity: e.entry_affinity(),
            cosched: true,
        })
    }

    /// `yield_to` and `pass_turn` (`passes`): note on `from`'s CPU that its
    /// next `schedule` gives the CPU to `to`, a parked sibling. False:
    /// nothing to do (not running, not co-scheduled, not a sibling, `to`
    /// not parked).
    pub(super) fn note_yield_to(
        &self,
        from: EntityId,
        to: EntityId,
        passes: bool,
    ) -> Result<bool, SchedError> {
        let (cpu, vm, turns) = {
            let mut g = self.slot(from)?.lock();
            let e = super::live(&mut g.entity, from.generation(), from)?;
            match (e.state, &e.sync) {
                (RunState::Running(cpu), Some(s)) => (cpu, e.vm, s.takes_turns()),
                _ => return Ok(false),
            }
        };
        {
            let mut g = self.slot(to)?.lock();
            let e = super::live(&mut g.entity, to.generation(), to)?;
            if e.vm != vm || !matches!(e.state, RunState::Queued { .. }) {
                return Ok(false);
            }
        }
        self.acct[cpu.0 as usize].lock().yield_to = Some(DirectedYield {
            from,
            to,
            passes,
            turns,
        });
        Ok(true)
    }
}

/// The vCPUs of the VM sharing `s`: the holders of the VM's shared state
/// but the policy's map.
pub(super) fn vcpus_of(s: &Arc<VmSync>) -> usize {
    Arc::strong_count(s).saturating_sub(1)
}
