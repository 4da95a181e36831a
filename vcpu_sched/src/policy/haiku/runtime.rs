//! Changes while running, as Haiku makes them (`set_thread_priority`,
//! `scheduler_set_operation_mode`, `scheduler_set_cpu_enabled`) and as a
//! VMM's users need them: an entity's priority, class and affinity without
//! removing it (its handle, penalty history and statistics stay), the mode,
//! and host CPUs taken out of service and put back.
//!
//! A waiting entity whose class or affinity changes is placed again as on
//! a wake (so a new realtime entity preempts, and a wider affinity reaches
//! an idle CPU); one running where it may no longer run leaves at its
//! CPU's next `schedule`, which the caller is asked to trigger. Every
//! change returns the CPUs the caller must kick, as a wake decision does.
//!
//! A CPU out of service runs nothing and is never offered to a waker: it
//! stays claimed in the idle bitmaps and shows a priority above every
//! class. Taking it out drains its queues (its pinned queue, and its core's
//! queue when no CPU of the core is left in service) to CPUs in service;
//! a push that races with the drain sees the CPU out of service after
//! pushing and moves on (`enqueue_served`). An entity allowed only on CPUs
//! out of service waits in their queues until one comes back; then what
//! waits in queues out of service is placed again, and the CPU that came
//! back is kicked.

use super::{live, HaikuScheduler, Slot};
use crate::entity::{Entity, QueueRef, RunState};
use crate::tunables::Mode;
use crate::validate::{validate_affinity, validate_priority};
use crate::{CpuId, CpuSet, EntityId, Nanos, SchedClass, SchedError};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl HaikuScheduler {
    /// Lock entity `id` and apply `change` to it (priority, class or
    /// affinity); then requeue it (`replace`: as on a wake, else in the
    /// same queue) or, if it runs, update what its CPU shows. Returns the
    /// CPUs to kick.
    pub(super) fn change_entity(
        &self,
        id: EntityId,
        now: Nanos,
        replace: bool,
        change: impl FnOnce(&mut Entity) -> Result<(), SchedError>,
    ) -> Result<Vec<CpuId>, SchedError> {
        let mut guard = self.slot(id)?.lock();
        let Slot {
            seq,
            entity,
            generation,
        } = &mut *guard;
        let e = live(entity, *generation, id)?;
        change(e)?;
        let mut kicks = Vec::new();
        match e.state {
            RunState::Queued {
                queue,
                seq: s,
                level,
            } => {
                // If a CPU is popping it right now, that CPU sees the change
                // when it dispatches (priority, affinity, service).
                if !self.m.remove(queue, id, s, level) {
                    return Ok(kicks);
                }
                if replace {
                    let d = self.place(e, id, seq, now);
                    if d.kick {
                        kicks.push(d.cpu);
                    }
                } else if let Some((y, true)) = self.enqueue_served(e, id, seq, queue, false, now) {
                    kicks.push(y);
                }
            }
            RunState::Running(cpu) => {
                // Only while the CPU still shows it (it may be stopping it).
                let slot = &self.m.cpus[cpu.0 as usize];
                if slot.running.load(Ordering::SeqCst) == id.index() {
                    slot.prio.store(e.prio.effective() as i32, Ordering::SeqCst);
                }
                if !e.allowed().contains(cpu) {
                    kicks.push(cpu);
                }
            }
            RunState::Blocked => {}
        }
        Ok(kicks)
    }

    pub(super) fn set_priority_now(
        &self,
        id: EntityId,
        priority: u8,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let (t, mode) = (self.tun(), self.mode());
        self.change_entity(id, now, false, |e| {
            validate_priority(e.prio.class, priority)?;
            e.prio.set_base(priority, t, mode);
            e.reweigh(&self.m);
            Ok(())
        })
    }

    pub(super) fn set_class_now(
        &self,
        id: EntityId,
        class: SchedClass,
        priority: u8,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        validate_priority(class, priority)?;
        let (t, mode) = (self.tun(), self.mode());
        self.change_entity(id, now, true, |e| {
            e.prio.set_class(class, priority, t, mode);
            e.reweigh(&self.m);
            Ok(())
        })
    }

    pub(super) fn set_affinity_now(
        &self,
        id: EntityId,
        affinity: CpuSet,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let affinity = validate_affinity(&affinity, &self.m.topo)?;
        let all_cpus = affinity.len() == self.m.cpus.len();
        self.change_entity(id, now, true, |e| {
            e.pinned = affinity.only();
            e.all_cpus = all_cpus;
            e.affinity = Arc::new(affinity);
            Ok(())
        })
    }

    /// Switch the mode. Time slices follow at each entity's next dispatch
    /// (its cached base quantum is recomputed for the new table), placement
    /// at the next decision; decisions in flight finish under the mode they
    /// started with. Leaving power saving, idle CPUs next to waiting work
    /// are returned to be kicked: packing left work queued that low latency
    /// spreads.
    pub(super) fn set_mode_now(&self, mode: Mode) -> Vec<CpuId> {
        let index = super::mode_index(mode);
        if self.mode.swap(index, Ordering::SeqCst) == index {
            return Vec::new();
        }
        self.ops[index as usize].switched_to();
        let waiting: usize = (0..self.m.cpus.len())
            .map(|c| QueueRef::Pinned(CpuId(c as u32)))
            .chain((0..self.m.cores.len()).map(|c| QueueRef::Core(crate::CoreId(c as u32))))
            .map(|q| self.m.queue(q).1.load(Ordering::Acquire))
            .sum();
        (0..self.m.cpus.len() as u32)
            .map(CpuId)
            .filter(|c| self.m.is_available(*c))
            .take(waiting)
            .collect()
    }

    /// Take `cpu` out of service or put it back (see the module docs).
    pub(super) fn set_cpu_enabled_now(
        &self,
        cpu: CpuId,
        enabled: bool,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        self.check_cpu(cpu)?;
        // One change of service at a time: the count of CPUs in service
        // must not drop to zero between the check and the change.
        let _changing = self.service_change.lock();
        if enabled {
            if !self.m.set_in_service(cpu, true) {
                return Ok(Vec::new());
            }
            // What waited for CPUs out of service and may run on this one
            // now is placed again (it would otherwise be found only by a
            // steal, when this CPU has nothing of its own); the CPU itself,
            // kicked, picks or steals the rest.
            let mut kicks = vec![cpu];
            for other in (0..self.m.cpus.len() as u32).map(CpuId) {
                if !self.m.in_service(other) {
                    self.evacuate(other, now, &mut kicks);
                }
            }
            return Ok(kicks);
        }
        if !self.m.in_service(cpu) {
            return Ok(Vec::new());
        }
        if self.m.cpus_in_service() == 1 {
            return Err(SchedError::LastCpuInService(cpu));
        }
        self.m.set_in_service(cpu, false);
        // The CPU itself: what it runs leaves at its next `schedule`, and
        // a dispatch racing with this call is undone there.
        let mut kicks = vec![cpu];
        self.evacuate(cpu, now, &mut kicks);
        Ok(kicks)
    }

    /// Move what waits in the queues `cpu` serves and no CPU in service
    /// serves any more (its pinned queue; its core's queue when the whole
    /// core is out of service) to CPUs in service; adds their kicks.
    pub(super) fn evacuate(&self, cpu: CpuId, now: Nanos, kicks: &mut Vec<CpuId>) {
        let core = self.m.core_of(cpu);
        let mut queues = vec![QueueRef::Pinned(cpu)];
        if !self.m.core_in_service(core) {
            queues.push(QueueRef::Core(core));
        }
        for q in queues {
            // Popped entries are in flight: each is placed again under its
            // entity's lock, if it is still the entry its entity expects.
            let entries = {
                let (lock, len) = self.m.queue(q);
                if len.load(Ordering::Acquire) == 0 {
                    continue;
                }
                let mut g = lock.lock();
                let mut all = Vec::with_capacity(g.len());
                while let Some(en) = g.pop() {
                    all.push(en);
                }
                self.m.publish_len(q, len, 0);
                all
            };
            for en in entries {
                let Some(slot) = self.slots.get(en.id.index() as usize) else {
                    continue;
                };
                let mut guard = slot.lock();
                let Slot { seq, entity, .. } = &mut *guard;
                let Some(e) = entity.as_mut() else { continue };
                let RunState::Queued { seq: s, .. } = e.state else {
                    continue;
                };
                if s != en.seq {
                    continue;
                }
                if e.removed {
                    e.uncharge_remove(&self.m);
                    self.free_slot(en.id.index(), &mut guard);
                    continue;
                }
                let d = self.place(e, en.id, seq, now);
                if d.kick && !kicks.contains(&d.cpu) {
                    kicks.push(d.cpu);
                }
            }
        }
    }
}
