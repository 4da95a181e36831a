//! The policy's rows of the snapshot: per entity its counters (with the
//! open run or wait interval at `now`), per CPU its accounting summed from
//! its own lock (nothing shared is written on the hot path for them).

use super::HaikuScheduler;
use crate::entity::{Entity, RunState};
use crate::stats::{CpuStats, EntityStats};
use crate::{CpuId, Nanos};

impl HaikuScheduler {
    pub(super) fn entity_stats(&self, e: &Entity, now: Nanos) -> EntityStats {
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
        }
    }

    pub(super) fn cpu_stats(&self, cpu: CpuId, now: Nanos) -> CpuStats {
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
            in_service: self.m.in_service(cpu),
        }
    }
}
