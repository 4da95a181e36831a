//! Sibling gathering (beyond Haiku; `tunables::GATHER_SIBLINGS`).
//!
//! A co-scheduled VM with more vCPUs than the CPUs it may use always has
//! a sibling queued. Under the engine's `ranked` dispatch its queued
//! siblings take turns beside whichever of them the policy runs (sibling
//! sharing), so the VM makes progress exactly while it owns a CPU. Haiku
//! balances vCPUs one at a time by load and is indifferent at equal
//! loads: how the VM's vCPUs end up spread over the cores is decided by
//! the order the VMs started in, and then kept. Spread, each CPU
//! alternates between the VM and the others, and for about a third of the
//! time no CPU runs the VM: every TLB-shootdown round trip in flight then
//! waits out the other VMs' slices (3:1 beside hogs on 2 CPUs, 12 of 14
//! traced guest runs: ~145 round trips/s, p99 25-40 ms). Gathered on one
//! core, the VM owns that CPU all the time (the other 2 runs: ~400/s, p99
//! 10-17 ms), which is what an operator's pinning gave.
//!
//! The rule, at a quantum end of a vCPU `e` of such a VM on core `here`,
//! once none of the VM's vCPUs has halted for `GATHER_AFTER_QUIET` (a VM
//! that halts does not share, and would only lose CPUs packed together):
//! if another core `to` with as many ready entities per CPU as `here`
//! holds more of `e`'s siblings (running or queued) than `here` does
//! besides `e`, and an entry of another VM waits in
//! `to`'s queue that may run on `here` (and whose own VM, if it gathers
//! too, holds no more of its vCPUs on `to` than on `here`), the two swap
//! queues. A swap keeps every core's count of ready entities, so Haiku's
//! balance and rotation see nothing to undo and every entity's share of
//! its core is what it was (the entry that moves goes to the back of its
//! level in its new queue, as a requeue would). Moves are made after the
//! stop, one entity lock at a time (`gather_swap`): the other entry
//! first, `e` only if that one moved. The rule reads only what the queues
//! and the CPUs' running slots say; it never looks at what the guest
//! does.
//!
//! Its cost at a quantum end stays near the rest of the requeue's: a VM
//! already as gathered as a swap could make it (more of its vCPUs on
//! `here` than could be anywhere else) is known from `here`'s queue
//! alone, and a search that found nothing holds the VM's next back for
//! `GATHER_RETRY`, so VMs that cannot all gather (several wide ones
//! sharing the cores) do not search at every quantum end of every vCPU.

use super::cosched::vcpus_of;
use super::HaikuScheduler;
use crate::entity::{Entity, QueueRef, RunState};
use crate::placement::NO_ENTITY;
use crate::{CoreId, CpuId, EntityId, Nanos, VmId};
use std::sync::atomic::Ordering;

/// A VM gathers once none of its vCPUs has halted for this long: the
/// engine's sibling sharing starts after the same quiet spell.
const GATHER_AFTER_QUIET: Nanos = 20_000_000;
/// Cores a gathering looks at (nearest first), and entries of a queue it
/// reads (to count a VM's vCPUs there, to find one to swap).
const GATHER_SCAN: usize = 8;
const GATHER_QUEUE_SCAN: usize = 16;
/// After a search that found nothing to swap, the VM's next waits this
/// long: a VM that cannot gather further (several wide VMs share the
/// cores) would otherwise search at every quantum end of every vCPU.
const GATHER_RETRY: Nanos = 4_000_000;

/// A swap decided at a quantum end (`CpuAcct::gather`): `entity` goes
/// from core `from` to core `to`, and `other`, queued on `to`, comes to
/// `from` in its place.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gather {
    pub(super) entity: EntityId,
    pub(super) other: EntityId,
    pub(super) from: CoreId,
    pub(super) to: CoreId,
}

impl HaikuScheduler {
    /// Sibling gathering at the quantum-end requeue of `e` on `here` (it
    /// stopped on `cpu`, and the requeue keeps it on `here`): the swap to
    /// make once `e`'s lock is let go, if any (see the module comment).
    pub(super) fn gather_target(
        &self,
        e: &Entity,
        here: CoreId,
        cpu: CpuId,
        now: Nanos,
    ) -> Option<Gather> {
        let s = e.sync.as_ref()?;
        if !self.tun().gather_siblings
            || e.pinned_cpu().is_some()
            || !s.quiet_for(GATHER_AFTER_QUIET, now)
            || !s.may_search_gathering(now)
            || !self.wider_than_its_cpus(e, s)
            || !self.quiet_core(here)
        {
            return None;
        }
        let mine_here = self.vm_on_core(e.vm, here, Some(cpu), None);
        // No other core can hold more than the siblings not here: where
        // that is no more than `mine_here`, the VM is as gathered as a
        // swap could make it (a gathered VM's steady state, decided
        // without a look at another core).
        if vcpus_of(s).saturating_sub(1 + mine_here) <= mine_here {
            return None;
        }
        // Ready entities here with `e` counted once (its CPU's running
        // slot may or may not still name it).
        let slot = &self.m.cpus[cpu.0 as usize];
        let ready_here = self.m.ready_on_core(here)
            - usize::from(slot.running.load(Ordering::Relaxed) != NO_ENTITY)
            + 1;
        let cpus_here = self.m.core_cpus(here).len();
        let allowed = e.allowed();
        let mut best: Option<(CoreId, usize)> = None;
        for &k in self.m.cores_near(here).iter().take(GATHER_SCAN + 1) {
            // Only between cores with as many ready entities per CPU: there
            // a swap changes nobody's share. Where they differ, rotation
            // moves entities round to even the shares out, and gathering
            // would undo it (a 3-vCPU VM beside two hogs on 2 CPUs: the
            // hogs fell to 0.725 CPUs of their fair 0.8 in the simulator).
            let even =
                self.m.ready_on_core(k) * cpus_here == ready_here * self.m.core_cpus(k).len();
            if k == here || !even || !self.m.covers_core(allowed, k) || !self.quiet_core(k) {
                continue;
            }
            let n = self.vm_on_core(e.vm, k, None, None);
            if n > mine_here && best.is_none_or(|(_, most)| n > most) {
                best = Some((k, n));
            }
        }
        let found = best.and_then(|(to, _)| {
            let other = self.swap_partner(e.vm, to, here)?;
            Some(Gather {
                entity: e.id,
                other,
                from: here,
                to,
            })
        });
        if found.is_none() {
            s.gathering_found_nothing(now + GATHER_RETRY);
        }
        found
    }

    /// A core that serves its queue with no idle CPU (a CPU idling there
    /// would be one an entry moved to it waits beside).
    fn quiet_core(&self, k: CoreId) -> bool {
        self.m.serves(QueueRef::Core(k))
            && !self.m.core_cpus(k).iter().any(|&c| self.m.is_available(c))
    }

    /// vCPUs of `vm` on core `k`: running on its CPUs (but `besides`) and
    /// among the first entries of its queue (but `skip`).
    fn vm_on_core(
        &self,
        vm: VmId,
        k: CoreId,
        besides: Option<CpuId>,
        skip: Option<EntityId>,
    ) -> usize {
        let running = self
            .m
            .core_cpus(k)
            .iter()
            .filter(|&&c| Some(c) != besides && self.m.runs_vm(c, vm))
            .count();
        let queued = self.m.cores[k.0 as usize]
            .queue
            .lock()
            .entries()
            .take(GATHER_QUEUE_SCAN)
            .filter(|en| en.vm == vm && Some(en.id) != skip)
            .count();
        running + queued
    }

    /// An entry of another VM than `vm` queued on `to` that may run on
    /// `here` and whose own VM, if co-scheduled, holds no more of its
    /// vCPUs on `to` (besides it) than on `here`.
    fn swap_partner(&self, vm: VmId, to: CoreId, here: CoreId) -> Option<EntityId> {
        let candidates: Vec<(EntityId, VmId, bool)> = self.m.cores[to.0 as usize]
            .queue
            .lock()
            .entries()
            .take(GATHER_QUEUE_SCAN)
            .filter(|en| en.vm != vm && self.m.core_cpus(here).iter().all(|&c| en.allows(c)))
            .map(|en| (en.id, en.vm, en.cosched))
            .collect();
        candidates.into_iter().find_map(|(id, other_vm, cosched)| {
            let keeps = !cosched
                || self.vm_on_core(other_vm, to, None, Some(id))
                    <= self.vm_on_core(other_vm, here, None, None);
            keeps.then_some(id)
        })
    }

    /// Make a swap decided at a quantum end (no entity lock held): the
    /// other entry to `g.from` first, then `g.entity` to `g.to` if that
    /// one moved. CPUs of the cores that went idle since are kicked
    /// (`kicks`). True if both moved.
    pub(super) fn gather_swap(&self, g: Gather, kicks: &mut Vec<CpuId>) -> bool {
        self.move_between_cores(g.other, g.to, g.from, kicks)
            && self.move_between_cores(g.entity, g.from, g.to, kicks)
    }

    /// Move `id` from core `from`'s queue to core `to`'s, if it still
    /// waits in the first; false if not (dispatched, moved, gone).
    fn move_between_cores(
        &self,
        id: EntityId,
        from: CoreId,
        to: CoreId,
        kicks: &mut Vec<CpuId>,
    ) -> bool {
        let Ok(slot) = self.slot(id) else {
            return false;
        };
        let mut guard = slot.lock();
        let super::Slot {
            seq,
            entity,
            generation,
        } = &mut *guard;
        let Ok(e) = super::live(entity, *generation, id) else {
            return false;
        };
        let RunState::Queued {
            queue: QueueRef::Core(core),
            seq: s,
            level,
        } = e.state
        else {
            return false;
        };
        if core != from || !self.m.covers_core(e.allowed(), to) {
            return false;
        }
        if !self.m.remove(QueueRef::Core(core), id, s, level) {
            // Being popped right now: it runs anyway.
            return false;
        }
        self.enqueue(e, id, seq, QueueRef::Core(to), false);
        drop(guard);
        // The other half of the lost-wake-up protocol: a CPU of `to` that
        // went idle before the push would not look at its queue again.
        if let Some(&c) = self.m.core_cpus(to).iter().find(|&&c| self.m.claim(c)) {
            kicks.push(c);
        }
        true
    }
}
