//! Structural invariants of the policy, checked by the tests, the
//! property tests and the simulator between events (never on the hot
//! path): queues and entity states agree, nothing sits or runs outside its
//! affinity, the lock-free mirrors and bitmaps match the queues, and under
//! SMT isolation siblings never run two VMs.

use super::HaikuScheduler;
use crate::entity::{Entity, QueueRef, RunState};
use crate::placement::NO_ENTITY;
use crate::{CoreId, CpuId, EntityId};
use std::sync::atomic::Ordering;

impl HaikuScheduler {
    /// Check the structural invariants; call only while no other thread
    /// uses the scheduler (tests, the simulator between events). Checks:
    /// every queued entity is in exactly one queue (the one its state
    /// names) and nowhere else; every running entity is on exactly the CPU
    /// its state names; nothing is queued or running outside its affinity
    /// (core queues only hold entities allowed on the whole core); with SMT
    /// isolation, no two siblings run entities of different VMs.
    pub fn check_invariants(&self) -> Result<(), String> {
        type Found = Vec<(QueueRef, EntityId, u64)>;
        let mut seen: std::collections::HashMap<u32, Found> = Default::default();
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
                seen.entry(en.id.index())
                    .or_default()
                    .push((q, en.id, en.seq));
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
            // A live entity's handle is of the slot's generation; a removed
            // one (still held by a CPU) is one generation behind.
            let want = if e.removed {
                g.generation.wrapping_sub(1)
            } else {
                g.generation
            };
            if e.id.index() != i as u32 || e.id.generation() != want {
                return Err(format!(
                    "slot {i} holds {:?} (generation {})",
                    e.id, g.generation
                ));
            }
            if let Some((_, other, _)) = found.iter().find(|(_, x, _)| *x != e.id) {
                return Err(format!("slot {i} holds {:?}, queued as {other:?}", e.id));
            }
            let found: Vec<(QueueRef, u64)> = found.iter().map(|(q, _, s)| (*q, *s)).collect();
            self.check_entity(e.id, e, &found)?;
        }
        if let Some((id, qs)) = seen.into_iter().next() {
            return Err(format!("queue entries of unknown entity {id}: {qs:?}"));
        }
        self.check_cpus()
    }

    pub(super) fn check_entity(
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
                let may_run_elsewhere = (0..self.m.cpus.len() as u32)
                    .map(CpuId)
                    .any(|c| e.allowed().contains(c) && self.m.in_service(c));
                if !self.m.serves(queue) && may_run_elsewhere {
                    return Err(format!(
                        "{id:?} waits in {queue:?}, which no CPU in service serves"
                    ));
                }
            }
            RunState::Running(cpu) => {
                if !found.is_empty()
                    || self.m.cpus[cpu.0 as usize].running.load(Ordering::SeqCst) != id.index()
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

    pub(super) fn check_cpus(&self) -> Result<(), String> {
        for (c, slot) in self.m.cpus.iter().enumerate() {
            // Accounting lock first (the lock order).
            let turn = self.acct[c].lock().turn;
            let raw = slot.running.load(Ordering::SeqCst);
            if raw == NO_ENTITY {
                if let Some(t) = turn {
                    return Err(format!("idle CPU {c} keeps the turn of {:?}", t.entity));
                }
                continue;
            }
            let g = self
                .slots
                .get(raw as usize)
                .ok_or("CPU runs an out-of-range id")?
                .lock();
            let Some(e) = g
                .entity
                .as_ref()
                .filter(|e| e.state == RunState::Running(CpuId(c as u32)))
            else {
                return Err(format!("CPU {c} runs entity {raw} whose state disagrees"));
            };
            // Its turn: the dispatch's, cut (if at all) only forward and
            // never below the minimal quantum after the dispatch.
            let Some(t) = turn.filter(|t| t.entity == e.id) else {
                return Err(format!("CPU {c} runs {:?} without its turn", e.id));
            };
            let given = e.dispatched_at + e.quantum_full.saturating_sub(t.used_before).max(1);
            if t.dispatched_at != e.dispatched_at
                || t.full > e.quantum_full
                || t.end > given
                || t.end < t.floor
                || (t.realtime && t.end != given)
            {
                return Err(format!(
                    "CPU {c}: turn {t:?} disagrees with {:?} (dispatched {}, quantum {})",
                    e.id, e.dispatched_at, e.quantum_full
                ));
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
    pub(super) fn debug_state(&self, id: EntityId) -> RunState {
        self.slots[id.index() as usize]
            .lock()
            .entity
            .as_ref()
            .map_or(RunState::Blocked, |e| e.state)
    }

    /// Effective priority and cached base quantum of an entity (tests).
    #[cfg(test)]
    pub(super) fn debug_priority(&self, id: EntityId) -> (u8, crate::Nanos, u8) {
        let g = self.slots[id.index() as usize].lock();
        let e = g.entity.as_ref().expect("live entity");
        (e.prio.effective(), e.prio.base_quantum(), e.prio.penalty)
    }
}
