//! Where an entity goes: the wake's CPU (`select_task_rq`, simplified),
//! joining and leaving a CPU's queues, the wake's preemption check
//! (`check_preempt_wakeup_fair`), the pulls of idle and periodic
//! balancing, and the changes while running that move entities (class,
//! affinity, a CPU leaving service).

use super::{Eevdf, Entity, State};
use crate::policy::baseline::RunState;
use crate::{CpuId, EntityId, Nanos, SchedClass, SchedError, WakeDecision};

/// How an entity joins a CPU's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Join {
    /// Woken or moved here: a fair entity is placed with its lag, others
    /// go behind their equals.
    Placed,
    /// This CPU's runner stopped and stays: a fair one is put back
    /// (`put_prev_entity`); a preempted realtime or idle-class one goes
    /// before its equals (`head`), a yielding one behind them.
    Back { head: bool },
}

/// Who runs before whom across classes: realtime by priority above fair,
/// fair above idle class. Equal levels compare by the class's own rule.
fn level(e: &Entity) -> u16 {
    match e.acct.class {
        SchedClass::Realtime => 200 + u16::from(e.acct.priority),
        SchedClass::Timeshare => 100,
        SchedClass::Idle => 0,
    }
}

impl Eevdf {
    /// Bring the fair runner of `c` up to `now` (`update_curr`); whether
    /// the kernel would reschedule it.
    pub(super) fn sync(&self, st: &mut State, c: usize, now: Nanos) -> bool {
        let State { ents, cpus, .. } = st;
        cpus[c].fair.update_curr(ents, now)
    }

    /// Whether `e` may run on CPU `c` now.
    fn usable(st: &State, e: &Entity, c: CpuId) -> bool {
        e.affinity.contains(c) && st.cpus.get(c.0 as usize).is_some_and(|x| x.in_service)
    }

    /// Whether CPU `c` idles and no kick is on its way to it.
    fn free_idle(st: &State, c: CpuId) -> bool {
        st.cpus[c.0 as usize].acct.is_free_idle()
    }

    /// Runnable entities of CPU `c` (`nr_running`: delayed ones excluded).
    pub(super) fn nr_running(st: &State, c: usize) -> usize {
        let cpu = &st.cpus[c];
        let fair = cpu
            .fair
            .queued
            .iter()
            .filter(|id| st.ents.table.get(**id).is_some_and(|e| !e.fair.delayed))
            .count();
        // Its runner, unless that just stopped (a `schedule` under way).
        let runs = cpu.acct.current().is_some_and(|r| {
            st.ents
                .table
                .get(r)
                .is_some_and(|e| e.acct.state() == RunState::Running(CpuId(c as u32)))
        });
        cpu.rt.len() + fair + cpu.idle.len() + usize::from(runs)
    }

    /// An idle CPU with no kick pending where `id` may run, nearest to `near`.
    fn idle_cpu_for(&self, st: &State, id: EntityId, near: CpuId) -> Option<CpuId> {
        let e = st.ents.table.get(id)?;
        e.affinity
            .iter()
            .filter(|c| Self::usable(st, e, *c) && Self::free_idle(st, *c))
            .min_by_key(|c| (self.topology.distance(near, *c), c.0))
    }

    /// The wake's CPU: the previous one if it idles; else the idle CPU
    /// nearest to it (same LLC first); else, for realtime, the CPU running
    /// the lowest level below it (`cpupri`); else the previous CPU; a new
    /// entity (or one whose previous CPU it may no longer use) the least
    /// loaded CPU (fork balancing). With no CPU of its affinity in service
    /// it waits on one of them until one comes back.
    fn select_cpu(&self, st: &State, id: EntityId) -> usize {
        let Some(e) = st.ents.table.get(id) else {
            return 0;
        };
        let prev = e.acct.last_cpu().filter(|c| Self::usable(st, e, *c));
        if let Some(p) = prev.filter(|p| Self::free_idle(st, *p)) {
            return p.0 as usize;
        }
        let near = prev.or_else(|| e.affinity.first()).unwrap_or(CpuId(0));
        if let Some(c) = self.idle_cpu_for(st, id, near) {
            return c.0 as usize;
        }
        let usable = || e.affinity.iter().filter(|c| Self::usable(st, e, *c));
        if e.acct.class == SchedClass::Realtime {
            let own = level(e);
            let lowest = usable()
                .filter_map(|c| {
                    let runner = st.ents.table.get(st.cpus[c.0 as usize].acct.current()?)?;
                    (level(runner) < own).then_some((c, level(runner)))
                })
                .min_by_key(|(c, l)| (*l, self.topology.distance(near, *c), c.0));
            if let Some((c, _)) = lowest {
                return c.0 as usize;
            }
        }
        if let Some(p) = prev {
            return p.0 as usize;
        }
        usable()
            .min_by_key(|c| {
                let load = Self::nr_running(st, c.0 as usize);
                (load, self.topology.distance(near, *c), c.0)
            })
            .unwrap_or(near)
            .0 as usize
    }

    /// `id` (runnable, on no queue) joins CPU `c`'s queue of its class.
    pub(super) fn enqueue(&self, st: &mut State, id: EntityId, c: usize, join: Join) {
        st.seq += 1;
        let seq = st.seq;
        let Some(e) = st.ents.table.get_mut(id) else {
            return;
        };
        e.cpu = Some(c);
        e.queued_seq = seq;
        let (class, prio) = (e.acct.class, e.acct.priority);
        let head = matches!(join, Join::Back { head: true });
        let State { ents, cpus, .. } = st;
        let cpu = &mut cpus[c];
        match class {
            SchedClass::Realtime => {
                let prio_of = |q: &EntityId| ents.table.get(*q).map_or(0, |x| x.acct.priority);
                let at = cpu
                    .rt
                    .iter()
                    .position(|q| {
                        if head {
                            prio_of(q) <= prio
                        } else {
                            prio_of(q) < prio
                        }
                    })
                    .unwrap_or(cpu.rt.len());
                cpu.rt.insert(at, id);
            }
            SchedClass::Idle if head => cpu.idle.push_front(id),
            SchedClass::Idle => cpu.idle.push_back(id),
            SchedClass::Timeshare => match join {
                Join::Placed => cpu.fair.place(ents, id, self.params.base_slice),
                Join::Back { .. } => cpu.fair.put_prev(),
            },
        }
    }

    /// `id` leaves the queue that holds it (waiting, or delayed): a fair
    /// entity keeps its lag; `sleep` says it blocks rather than moves.
    pub(super) fn unqueue(&self, st: &mut State, id: EntityId, now: Nanos, sleep: bool) {
        let Some(e) = st.ents.table.get(id) else {
            return;
        };
        let Some(c) = e
            .cpu
            .filter(|_| !matches!(e.acct.state(), RunState::Running(_)))
        else {
            return;
        };
        let (class, delayed) = (e.acct.class, e.fair.delayed);
        self.sync(st, c, now);
        let tick = self.params.tick;
        let State { ents, cpus, .. } = st;
        let cpu = &mut cpus[c];
        match class {
            _ if delayed => cpu.fair.finish_delayed(ents, id, tick),
            SchedClass::Realtime => cpu.rt.retain(|q| *q != id),
            SchedClass::Idle => cpu.idle.retain(|q| *q != id),
            SchedClass::Timeshare => cpu.fair.dequeue(ents, id, sleep, tick),
        }
        if let Some(e) = ents.table.get_mut(id) {
            e.cpu = None;
        }
    }

    /// Place the runnable `id` (on no queue) as a wake does: choose its
    /// CPU, queue it there, and decide whether that CPU is kicked.
    pub(super) fn place(&self, st: &mut State, id: EntityId, now: Nanos) -> WakeDecision {
        let c = self.select_cpu(st, id);
        let resched = self.sync(st, c, now);
        self.enqueue(st, id, c, Join::Placed);
        self.decide(st, c, id, resched)
    }

    /// The decision for `id`, just queued on CPU `c`: kick `c` if it
    /// idles, or if `id` preempts its runner (`resched`: bringing a fair
    /// runner up to date showed it must reschedule anyway).
    pub(super) fn decide(
        &self,
        st: &mut State,
        c: usize,
        id: EntityId,
        resched: bool,
    ) -> WakeDecision {
        let kick = self.preempts(st, c, id, resched);
        if kick {
            st.cpus[c].acct.kick_pending = true;
        }
        WakeDecision::new(CpuId(c as u32), kick)
    }

    /// Whether CPU `c` must be kicked for `id`, queued there.
    fn preempts(&self, st: &State, c: usize, id: EntityId, resched: bool) -> bool {
        let cpu = &st.cpus[c];
        if !cpu.in_service || cpu.acct.kick_pending {
            return false;
        }
        let Some(runner) = cpu.acct.current() else {
            return true;
        };
        // A removed runner's CPU calls `schedule` next anyway.
        let (Some(r), Some(w)) = (st.ents.table.get(runner), st.ents.table.get(id)) else {
            return false;
        };
        if level(w) != level(r) {
            return level(w) > level(r);
        }
        // Equal slices: no PREEMPT_SHORT, so the runner keeps its
        // protection in the pick.
        w.acct.class == SchedClass::Timeshare
            && (resched || cpu.fair.pick(&st.ents, true) == Some(id))
    }

    /// A wake of `id` (the protocol's `wake`).
    pub(super) fn wake_locked(
        &self,
        st: &mut State,
        id: EntityId,
        now: Nanos,
    ) -> Result<Option<WakeDecision>, SchedError> {
        let e = st.ents.table.live_mut(id)?;
        if !e.acct.wake(now) {
            return Ok(None);
        }
        let delayed_on = e.cpu.filter(|_| e.fair.delayed);
        if let Some(c) = delayed_on {
            let e = st.ents.table.live(id)?;
            let stays = Self::usable(st, e, CpuId(c as u32))
                && self.idle_cpu_for(st, id, CpuId(c as u32)).is_none();
            if stays {
                let resched = self.sync(st, c, now);
                let State { ents, cpus, .. } = st;
                cpus[c].fair.requeue_delayed(ents, id, self.params.tick);
                return Ok(Some(self.decide(st, c, id, resched)));
            }
            self.unqueue(st, id, now, true);
        }
        Ok(Some(self.place(st, id, now)))
    }

    /// The waiting entity CPU `c`, with `here` runnable entities, would
    /// pull, and how many runnable entities its queue holds beyond
    /// `here`: from another queue holding more, realtime first, then fair,
    /// then idle class; from the busiest such queue; the least recently
    /// queued there (the tail of the kernel's `cfs_tasks`).
    pub(super) fn pull_candidate(
        &self,
        st: &State,
        c: usize,
        here: usize,
    ) -> Option<(EntityId, usize)> {
        let cpu_id = CpuId(c as u32);
        // (class order, busiest first, oldest first), the entity, its excess.
        type Key = (u16, std::cmp::Reverse<usize>, u64);
        let mut best: Option<(Key, EntityId, usize)> = None;
        for (b, cpu) in st.cpus.iter().enumerate() {
            let load = Self::nr_running(st, b);
            if b == c || load <= here {
                continue;
            }
            let waiting = cpu.rt.iter().chain(&cpu.fair.queued).chain(&cpu.idle);
            for &id in waiting {
                let Some(e) = st.ents.table.get(id) else {
                    continue;
                };
                if e.fair.delayed || !e.affinity.contains(cpu_id) {
                    continue;
                }
                let key = (u16::MAX - level(e), std::cmp::Reverse(load), e.queued_seq);
                if best.as_ref().is_none_or(|(k, _, _)| key < *k) {
                    best = Some((key, id, load - here));
                }
            }
        }
        best.map(|(_, id, more)| (id, more))
    }

    /// Move the waiting `id` to CPU `c`'s queue (a migration: it keeps
    /// its lag and relative deadline). Returns `update_curr`'s resched
    /// for `c`'s runner.
    pub(super) fn move_to(&self, st: &mut State, id: EntityId, c: usize, now: Nanos) -> bool {
        self.unqueue(st, id, now, false);
        let resched = self.sync(st, c, now);
        self.enqueue(st, id, c, Join::Placed);
        resched
    }

    /// The periodic balance of busy CPU `c` at a tick, if it is due: pull
    /// one waiting entity from the busiest queue when the imbalance is
    /// worth it. As `load_balance` with equal loads: the imbalance is half
    /// the difference in runnable entities (in units of one entity's
    /// load), and an entity moves when its load, halved once per earlier
    /// failed attempt (`shr_bound(load, nr_balance_failed)`), fits in it:
    /// a difference of two moves at once, a difference of one after one
    /// failed attempt, which rotates three hogs over two CPUs as Linux
    /// does. Returns whether `c`'s runner must give way (the pulled entity
    /// preempts it, as `attach_task`'s wakeup check decides).
    /// Called at the tick while `c`'s runner has stopped and stays: it
    /// counts as one of `c`'s runnable entities.
    pub(super) fn periodic_balance(&self, st: &mut State, c: usize, now: Nanos) -> bool {
        const LOAD: usize = 1024;
        if now < st.cpus[c].next_balance {
            return false;
        }
        st.cpus[c].next_balance = now.saturating_add(self.params.busy_balance_interval);
        let here = Self::nr_running(st, c) + 1;
        let Some((id, more)) = self.pull_candidate(st, c, here) else {
            st.cpus[c].balance_failed = 0;
            return false;
        };
        let failed = st.cpus[c].balance_failed.min(10);
        if LOAD >> failed > more * LOAD / 2 {
            st.cpus[c].balance_failed += 1;
            return false;
        }
        st.cpus[c].balance_failed = 0;
        let resched = self.move_to(st, id, c, now);
        self.preempts(st, c, id, resched)
    }

    /// CPU `c` leaves service: what waits on it and may run elsewhere is
    /// placed again (as a wake is), delayed entities leave. Returns the
    /// CPUs to kick.
    pub(super) fn evacuate(&self, st: &mut State, c: usize, now: Nanos) -> Vec<CpuId> {
        let cpu = &st.cpus[c];
        let on_it: Vec<EntityId> = cpu
            .rt
            .iter()
            .chain(&cpu.fair.queued)
            .chain(&cpu.idle)
            .copied()
            .collect();
        let mut kicks = Vec::new();
        for id in on_it {
            let Some(e) = st.ents.table.get(id) else {
                continue;
            };
            if e.fair.delayed {
                self.unqueue(st, id, now, true);
            } else if e.affinity.iter().any(|o| Self::usable(st, e, o)) {
                self.unqueue(st, id, now, false);
                let d = self.place(st, id, now);
                if d.kick {
                    kicks.push(d.cpu);
                }
            }
        }
        kicks
    }

    /// `id`'s affinity changed: a runner on a CPU it may no longer use is
    /// kicked off (its `schedule` places it); a waiting entity on such a
    /// CPU, or one an idle CPU could now take, is placed again; a delayed
    /// one there leaves its queue. Returns the CPUs to kick.
    pub(super) fn follow_affinity(&self, st: &mut State, id: EntityId, now: Nanos) -> Vec<CpuId> {
        let Some(e) = st.ents.table.get(id) else {
            return Vec::new();
        };
        match (e.acct.state(), e.cpu) {
            (RunState::Running(c), _) if !e.affinity.contains(c) => {
                st.cpus[c.0 as usize].acct.kick_pending = true;
                vec![c]
            }
            (RunState::Ready, Some(c)) => {
                let cpu = CpuId(c as u32);
                if Self::usable(st, e, cpu) && self.idle_cpu_for(st, id, cpu).is_none() {
                    return Vec::new();
                }
                self.unqueue(st, id, now, false);
                let d = self.place(st, id, now);
                d.kick.then_some(d.cpu).into_iter().collect()
            }
            (RunState::Blocked, Some(c)) if !e.affinity.contains(CpuId(c as u32)) => {
                self.unqueue(st, id, now, true);
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    /// `set_class`: a waiting entity leaves its queue and is placed again
    /// in its new class (a new realtime one may preempt); a running one
    /// changes queues on its CPU, which is kicked when anything else waits
    /// there; a delayed one leaves its queue. Fair state (lag) is kept
    /// across classes. Returns the CPUs to kick.
    pub(super) fn change_class(
        &self,
        st: &mut State,
        id: EntityId,
        class: SchedClass,
        priority: u8,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let e = st.ents.table.live(id)?;
        let (old, state) = (e.acct.class, e.acct.state());
        let set = |st: &mut State| {
            if let Some(e) = st.ents.table.get_mut(id) {
                e.acct.class = class;
                e.acct.priority = priority;
            }
        };
        if old == class {
            set(st);
            return Ok(Vec::new());
        }
        match state {
            RunState::Ready => {
                self.unqueue(st, id, now, false);
                set(st);
                let d = self.place(st, id, now);
                Ok(d.kick.then_some(d.cpu).into_iter().collect())
            }
            RunState::Running(cpu) => {
                let c = cpu.0 as usize;
                let tick = self.params.tick;
                if old == SchedClass::Timeshare {
                    self.sync(st, c, now);
                    let State { ents, cpus, .. } = &mut *st;
                    cpus[c].fair.dequeue(ents, id, false, tick);
                }
                set(st);
                if class == SchedClass::Timeshare {
                    let State { ents, cpus, .. } = &mut *st;
                    cpus[c].fair.place(ents, id, self.params.base_slice);
                    cpus[c].fair.set_next(ents, id, now);
                }
                if Self::nr_running(st, c) > 1 && !st.cpus[c].acct.kick_pending {
                    st.cpus[c].acct.kick_pending = true;
                    return Ok(vec![cpu]);
                }
                Ok(Vec::new())
            }
            RunState::Blocked => {
                self.unqueue(st, id, now, true);
                set(st);
                Ok(Vec::new())
            }
        }
    }
}
