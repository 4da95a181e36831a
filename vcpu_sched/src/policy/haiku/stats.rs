//! The policy's rows of the snapshot: per entity its counters (with the
//! open run or wait interval at `now`) and where it is, per CPU its
//! accounting summed from its own lock (nothing shared is written on the
//! hot path for them) and what it runs, per core its queues and load.

use super::HaikuScheduler;
use crate::entity::{Entity, QueueRef, RunState};
use crate::placement::NO_ENTITY;
use crate::stats::{CoreStats, CpuStats, EntityState, EntityStats, SchedSnapshot};
use crate::{CoreId, CpuId, EntityId, Nanos, VcpuScheduler};
use std::sync::atomic::Ordering;

impl HaikuScheduler {
    /// Counters and state of every entity, every CPU and every core at `now`.
    pub(super) fn take_snapshot(&self, now: Nanos) -> SchedSnapshot {
        let mut entities: Vec<EntityStats> = self
            .slots
            .iter()
            .filter_map(|s| {
                let g = s.lock();
                let e = g.entity.as_ref().filter(|e| !e.removed)?;
                Some(self.entity_stats(e, now))
            })
            .collect();
        // Entity rows are in slot order: a CPU's running index finds its row.
        let id_of = |index: u32| {
            entities
                .binary_search_by_key(&index, |e| e.id.index())
                .ok()
                .map(|i| entities[i].id)
        };
        let cpus: Vec<CpuStats> = (0..self.m.cpus.len() as u32)
            .map(|c| self.cpu_stats(CpuId(c), now, &id_of))
            .collect();
        // A runner whose quantum a wake cut shows the cut one (its entity
        // takes it when it stops; the entity rows were read before).
        for cpu in &cpus {
            let Some(turn) = self.acct[cpu.cpu.0 as usize].lock().turn else {
                continue;
            };
            if let Ok(i) = entities.binary_search_by_key(&turn.entity.index(), |e| e.id.index()) {
                let row = &mut entities[i];
                if row.id == turn.entity && row.state == EntityState::Running {
                    row.quantum = row.quantum.min(turn.full);
                }
            }
        }
        let cores = (0..self.m.cores.len() as u32)
            .map(|c| self.core_stats(CoreId(c), now))
            .collect();
        SchedSnapshot {
            now,
            policy: self.name().to_string(),
            mode: self.mode(),
            entities,
            cpus,
            cores,
        }
    }

    fn entity_stats(&self, e: &Entity, now: Nanos) -> EntityStats {
        let live = match e.state {
            RunState::Running(_) => now.saturating_sub(e.dispatched_at),
            _ => 0,
        };
        let waiting = match e.state {
            RunState::Queued { .. } => now.saturating_sub(e.queued_at),
            _ => 0,
        };
        let (state, cpu, core) = match e.state {
            RunState::Blocked if e.throttled_until.is_some() => {
                (EntityState::Throttled, None, None)
            }
            RunState::Blocked => (EntityState::Blocked, None, None),
            RunState::Running(c) => (EntityState::Running, Some(c), Some(self.m.core_of(c))),
            RunState::Queued {
                queue: QueueRef::Pinned(c),
                ..
            } => (EntityState::Waiting, Some(c), Some(self.m.core_of(c))),
            RunState::Queued {
                queue: QueueRef::Core(k),
                ..
            } => (EntityState::Waiting, None, Some(k)),
        };
        EntityStats {
            id: e.id,
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
            boosted_wakes: e.counters.boosted_wakes,
            recent_share: (e.share.value_at(now, self.tun().share_half_life) as u64
                * crate::tunables::LOAD_SCALE as u64
                / crate::share::SHARE_SCALE as u64) as u32,
            state,
            class: e.prio.class,
            effective_priority: e.prio.effective(),
            penalty: e.prio.penalty,
            quantum: e.quantum_full,
            quantum_used: e.used + live,
            cpu,
            core,
            affinity: (*e.affinity).clone(),
            weight: e.weight,
            cap: e.cap.map(|b| b.permille),
            reservation: e.reserve.map_or(0, |b| b.permille),
            throttles: e.counters.throttles,
            throttled_time: e.counters.throttled_time
                + e.throttled_until
                    .map_or(0, |_| now.saturating_sub(e.slept_at)),
            latency_bound: e.bounded.map(|b| b.bound),
            bound_budget: e.bounded.map_or(0, |b| b.bucket.permille),
            bounded_wakes: e.counters.bounded_wakes,
            bound_misses: e.counters.bound_misses,
        }
    }

    fn cpu_stats(
        &self,
        cpu: CpuId,
        now: Nanos,
        id_of: &dyn Fn(u32) -> Option<EntityId>,
    ) -> CpuStats {
        let a = self.acct[cpu.0 as usize].lock();
        let idle_now = a.idle_since.map_or(0, |s| now.saturating_sub(s));
        let slot = &self.m.cpus[cpu.0 as usize];
        let raw = slot.running.load(Ordering::Acquire);
        let running = (raw != NO_ENTITY).then(|| id_of(raw)).flatten();
        CpuStats {
            cpu,
            busy_time: a.busy,
            idle_time: a.idle + idle_now,
            dispatches: a.dispatches,
            context_switches: a.switches,
            smt_corun_foreign: a.foreign,
            idle_while_waiting: a.idle_while_waiting,
            core_load: self.m.core_load(self.m.core_of(cpu), now),
            in_service: self.m.in_service(cpu),
            running,
            running_priority: running
                .map(|_| slot.prio.load(Ordering::Acquire).clamp(0, 255) as u8),
            quantum_cuts: a.quantum_cuts,
            costops: a.costops,
            costarts: a.costarts,
            directed_yields: a.directed_yields,
            gathers: a.gathers,
        }
    }

    fn core_stats(&self, core: CoreId, now: Nanos) -> CoreStats {
        let cpus = self.m.core_cpus(core);
        let queued = self.m.cores[core.0 as usize].queued.load(Ordering::Acquire);
        let pinned: usize = cpus
            .iter()
            .map(|c| self.m.cpus[c.0 as usize].pinned_len.load(Ordering::Acquire))
            .sum();
        let running = cpus
            .iter()
            .filter(|c| self.m.cpus[c.0 as usize].running.load(Ordering::Acquire) != NO_ENTITY)
            .count();
        CoreStats {
            core,
            ready: (queued + pinned) as u32,
            running: running as u32,
            load: self.m.core_load(core, now),
        }
    }
}
