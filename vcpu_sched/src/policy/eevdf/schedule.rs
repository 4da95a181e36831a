//! What a CPU does in `schedule`: stop its runner (a fair one is brought
//! up to date first; a blocking one may stay delayed; one that may no
//! longer run here is placed elsewhere), decide at a tick whether the
//! runner goes on (`task_tick_fair`: only if someone else is queued and
//! it used its request or left its protected slice), pick by class
//! (realtime, fair by EEVDF, idle class), pull from the busiest queue
//! when nothing is left (newidle balance), and dispatch until the next
//! tick.

use super::fair::FairEntities;
use super::place::Join;
use super::{Eevdf, State};
use crate::policy::baseline::RunState;
use crate::{CpuId, Dispatch, EntityId, Nanos, SchedClass, StopReason, VmId};

/// The runner of a CPU after its stop, when it is still runnable there.
#[derive(Debug, Clone, Copy)]
struct Stayed {
    id: EntityId,
    class: SchedClass,
    /// A fair runner's `update_curr` asked for a reschedule.
    resched: bool,
}

impl Eevdf {
    /// The protocol's `schedule` on CPU `c`, under the lock.
    pub(super) fn schedule_locked(
        &self,
        st: &mut State,
        c: usize,
        now: Nanos,
        reason: StopReason,
    ) -> Dispatch {
        st.cpus[c].acct.kick_pending = false;
        let mut kicks = Vec::new();
        let stayed = self.stop_runner(st, c, now, reason, &mut kicks);
        let next = if st.cpus[c].in_service {
            self.pick_next(st, c, now, reason, stayed)
        } else {
            None
        };
        // The runner went back to this CPU's queue and another runs: an
        // idle CPU it may use is told (its newidle balance pulls it), or
        // it would wait while that CPU idles.
        if let Some(s) = stayed.filter(|s| next.map(|(n, _)| n) != Some(s.id)) {
            if let Some(k) = self.idle_cpu_for_waiting(st, s.id, c) {
                st.cpus[k.0 as usize].acct.kick_pending = true;
                kicks.push(k);
            }
        }
        self.dispatch(st, c, now, next, kicks)
    }

    /// An idle CPU (not `c`) that may take `id`, waiting on `c`'s queue.
    fn idle_cpu_for_waiting(&self, st: &State, id: EntityId, c: usize) -> Option<CpuId> {
        let e = st.ents.table.get(id)?;
        if e.acct.state() != RunState::Ready || e.cpu != Some(c) {
            return None;
        }
        let near = CpuId(c as u32);
        e.affinity
            .iter()
            .filter(|k| k.0 as usize != c)
            .filter(|k| {
                st.cpus[k.0 as usize].in_service && st.cpus[k.0 as usize].acct.is_free_idle()
            })
            .min_by_key(|k| (self.topology.distance(near, *k), k.0))
    }

    /// Stop the runner of `c` for `reason`. Returns it if it is still
    /// runnable and stays on `c`; one that must leave `c` (out of service,
    /// outside its affinity) is placed elsewhere, its kick added to `kicks`.
    fn stop_runner(
        &self,
        st: &mut State,
        c: usize,
        now: Nanos,
        reason: StopReason,
        kicks: &mut Vec<CpuId>,
    ) -> Option<Stayed> {
        let cpu = CpuId(c as u32);
        let id = st.cpus[c].acct.current()?;
        // Removed while it ran: only its slot is left to free.
        if st.ents.table.end_zombie(id) {
            return None;
        }
        let e = st.ents.table.get(id)?;
        if e.acct.state() != RunState::Running(cpu) {
            return None;
        }
        let class = e.acct.class;
        let resched = class == SchedClass::Timeshare && self.sync(st, c, now);
        let tick = self.params.tick;
        let State { ents, cpus, .. } = st;
        let e = ents.table.get_mut(id)?;
        if !e.acct.stop(now, reason) {
            e.cpu = None;
            if class == SchedClass::Timeshare && cpus[c].fair.block_curr(ents, tick) {
                if let Some(e) = ents.table.get_mut(id) {
                    e.cpu = Some(c);
                }
            }
            return None;
        }
        if cpus[c].in_service && e.affinity.contains(cpu) {
            return Some(Stayed { id, class, resched });
        }
        e.cpu = None;
        if class == SchedClass::Timeshare {
            cpus[c].fair.dequeue(ents, id, false, tick);
        }
        let d = self.place(st, id, now);
        if d.kick {
            kicks.push(d.cpu);
        }
        None
    }

    /// What `c` runs next, and whether it is a fresh pick (not its runner
    /// going on).
    fn pick_next(
        &self,
        st: &mut State,
        c: usize,
        now: Nanos,
        reason: StopReason,
        stayed: Option<Stayed>,
    ) -> Option<(EntityId, bool)> {
        if let Some(s) = stayed {
            let mut resched = s.resched;
            if reason == StopReason::QuantumEnd {
                resched |= self.periodic_balance(st, c, now);
            }
            match s.class {
                SchedClass::Timeshare => {
                    let tick_goes_on = reason == StopReason::QuantumEnd && !resched;
                    if tick_goes_on && st.cpus[c].rt.is_empty() {
                        return Some((s.id, false));
                    }
                    if reason == StopReason::Yielded {
                        // yield_task_fair: the next request starts now.
                        let f = st.ents.fair_mut(s.id);
                        f.deadline = f.deadline.saturating_add(f.slice as i64);
                    }
                    self.enqueue(st, s.id, c, Join::Back { head: false });
                }
                // SCHED_FIFO: no slice; first among its equals unless it yields.
                SchedClass::Realtime => {
                    let head = reason != StopReason::Yielded;
                    self.enqueue(st, s.id, c, Join::Back { head });
                }
                // Round robin at the tick and on a yield.
                SchedClass::Idle => {
                    let head = !matches!(reason, StopReason::QuantumEnd | StopReason::Yielded);
                    self.enqueue(st, s.id, c, Join::Back { head });
                }
            }
        }
        let stayed = stayed.map(|s| s.id);
        if let Some(next) = self.take_local(st, c, now, stayed) {
            return Some(next);
        }
        // Newidle balance: nothing left here.
        let (id, _) = self.pull_candidate(st, c, Self::nr_running(st, c))?;
        self.move_to(st, id, c, now);
        self.take_local(st, c, now, None)
    }

    /// The first entity of `c`'s own queues by class; delayed fair
    /// entities the pick meets leave their queue (with lag 0 at most).
    fn take_local(
        &self,
        st: &mut State,
        c: usize,
        now: Nanos,
        stayed: Option<EntityId>,
    ) -> Option<(EntityId, bool)> {
        if let Some(id) = st.cpus[c].rt.pop_front() {
            return Some((id, Some(id) != stayed));
        }
        let tick = self.params.tick;
        let State { ents, cpus, .. } = st;
        let fair = &mut cpus[c].fair;
        while let Some(id) = fair.pick(ents, true) {
            if ents.fair(id).delayed {
                fair.finish_delayed(ents, id, tick);
                if let Some(e) = ents.table.get_mut(id) {
                    e.cpu = None;
                }
                continue;
            }
            if Some(id) == stayed {
                // The same task again: the kernel skips put_prev/set_next,
                // so its protection stays as it was.
                fair.queued.retain(|q| *q != id);
                fair.curr = Some(id);
                ents.fair_mut(id).exec_start = now;
                return Some((id, false));
            }
            fair.set_next(ents, id, now);
            return Some((id, true));
        }
        let id = cpus[c].idle.pop_front()?;
        Some((id, Some(id) != stayed))
    }

    /// Hand `next` to `c` until the next tick, or idle.
    fn dispatch(
        &self,
        st: &mut State,
        c: usize,
        now: Nanos,
        next: Option<(EntityId, bool)>,
        kicks: Vec<CpuId>,
    ) -> Dispatch {
        let cpu = CpuId(c as u32);
        let Some((id, fresh)) = next else {
            let waiting = self.someone_waits_for(st, c);
            st.cpus[c].acct.idle(now, waiting);
            self.set_corun(st, c, None, now);
            return Dispatch {
                kicks,
                ..Dispatch::idle()
            };
        };
        let quantum = self.to_next_tick(now);
        let Some(e) = st.ents.table.get_mut(id) else {
            // Unreachable by construction (queues hold live entities).
            st.cpus[c].acct.idle(now, false);
            return Dispatch::idle();
        };
        e.acct.dispatch(cpu, now, &self.topology);
        if fresh {
            e.acct.slice_used = 0;
        }
        e.acct.quantum = quantum;
        e.cpu = Some(c);
        let vm = e.acct.vm;
        st.cpus[c].acct.run(id, now);
        self.set_corun(st, c, Some(vm), now);
        Dispatch {
            kicks,
            ..Dispatch::run(id, quantum)
        }
    }

    /// Whether an entity allowed on `c` (in service) waits in any queue.
    fn someone_waits_for(&self, st: &State, c: usize) -> bool {
        let cpu = CpuId(c as u32);
        st.cpus[c].in_service
            && st.cpus.iter().any(|q| {
                q.rt.iter().chain(&q.fair.queued).chain(&q.idle).any(|id| {
                    st.ents.table.get(*id).is_some_and(|e| {
                        !e.fair.delayed
                            && e.acct.state() == RunState::Ready
                            && e.affinity.contains(cpu)
                    })
                })
            })
    }

    /// Record on the SMT co-run accounts that `c` now runs `vm` (or nothing).
    fn set_corun(&self, st: &mut State, c: usize, vm: Option<VmId>, now: Nanos) {
        let info = &self.topology.cpus[c];
        if let Some(core) = st.cores.get_mut(info.core.0 as usize) {
            core.set(info.smt_index as usize, vm, now);
        }
    }
}
