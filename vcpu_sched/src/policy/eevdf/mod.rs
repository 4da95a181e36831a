//! `eevdf`: a model of Linux's fair scheduler (EEVDF, the default since
//! Linux 6.6) as it treats vCPU threads of equal nice value, so that the
//! simulator can stand in for `policy = "host"` (vCPU threads left to the
//! host kernel) and Pacer's engine can carry out the host kernel's
//! decisions with its own mechanism (`pacer run --policy eevdf`).
//!
//! Read from `kernel/sched/fair.c` and `kernel/sched/features.h` of Linux
//! 6.18 (the development machines run 6.18 with HZ=250), default
//! features: PLACE_LAG, PLACE_DEADLINE_INITIAL, PLACE_REL_DEADLINE,
//! RUN_TO_PARITY, PREEMPT_SHORT, DELAY_DEQUEUE, DELAY_ZERO on; HRTICK,
//! NEXT_BUDDY off. What it models, per CPU (`fair.rs` holds the EEVDF
//! arithmetic of one run queue):
//!
//! - **Virtual time and lag.** Every entity has a vruntime that advances
//!   with its run time (every vCPU has nice 0: weight 1024, so one
//!   nanosecond of run is one of vruntime); V is the weighted average
//!   vruntime of the queue, the running entity included. An entity is
//!   *eligible* when its lag V - v_i >= 0, tested exactly as the kernel
//!   does (\Sum w_j v_j >= v_i \Sum w_j).
//! - **Requests and deadlines.** Each entity's request is the base slice,
//!   0.75 ms x (1 + ilog2(min(CPUs, 8))) as `sysctl_sched_base_slice`
//!   scales (1.5 ms on 2 CPUs); its virtual deadline is vruntime + slice,
//!   renewed when its vruntime reaches it (`update_deadline`).
//! - **The pick** (`__pick_eevdf`): the eligible entity with the earliest
//!   deadline; the running entity stays while it is eligible and inside
//!   its protected slice (RUN_TO_PARITY: until the deadline it was picked
//!   with, or the smallest request on the queue).
//! - **Slice expiry at the tick.** The kernel notices a used-up request in
//!   `update_curr`, at the scheduler tick (HRTICK is off) or at a wake on
//!   that CPU. The model keeps the tick: every dispatch lasts until the
//!   next tick boundary (`EevdfParams::tick`, 4 ms at HZ=250), where the
//!   runner goes on unless someone else is queued and it finished its
//!   request or left its protected slice. So a CPU-bound pair alternates
//!   every 4 ms on 2 CPUs, as on the host.
//! - **Placement with lag** (`place_entity`, PLACE_LAG): an entity that
//!   leaves a queue keeps its lag (clamped to twice its request, at least
//!   a tick); when it joins a queue again it is placed at V minus that
//!   lag, inflated by (W + w_i) / W so that the lag survives its own
//!   effect on V. A new entity's first deadline is half a request away;
//!   one that moved between queues keeps its relative deadline.
//! - **Delayed dequeue** (DELAY_DEQUEUE, DELAY_ZERO): an entity that
//!   blocks while not eligible stays on its queue, delayed, and keeps
//!   competing until it is picked (it then leaves with lag 0) or woken
//!   (it resumes in place, or at V if its lag turned positive).
//! - **Wakeup preemption** (`check_preempt_wakeup_fair`): a woken entity
//!   preempts the runner when the pick, with the runner's protection,
//!   would now choose it; or when bringing the runner up to date shows it
//!   finished its request (`update_curr`'s resched).
//! - **Wake placement** (`select_task_rq_fair`, simplified): the previous
//!   CPU if it is idle, else an idle CPU nearest to it (its LLC first:
//!   `select_idle_sibling`), else the previous CPU. A new entity goes to
//!   the least loaded CPU (fork balancing).
//! - **Balancing**: a CPU with nothing to run pulls a waiting entity
//!   allowed on it from the busiest queue (newidle balance); at a tick, a
//!   busy CPU due for its periodic balance (every
//!   `EevdfParams::busy_balance_interval`: 16 x the domain's CPUs in ms,
//!   the kernel's busy interval) pulls one waiting entity from the
//!   busiest queue: at once when that queue holds two more runnable
//!   entities than its own, after one failed attempt when it holds one
//!   more (`nr_balance_failed` halving the load to move), so three hogs
//!   rotate over two CPUs.
//! - **Classes**: realtime runs before fair as SCHED_FIFO would (higher
//!   priority first, FIFO within one priority, preempted only by a higher
//!   one, no slice); idle class runs only when nothing else waits, round
//!   robin at the tick, preempted by any other wake.
//!
//! What it leaves out, and why:
//! - **Weights.** Every timeshare entity has nice 0; Haiku priorities are
//!   not mapped to nice levels. `set_priority` is recorded and changes
//!   nothing (the VMM refuses other timeshare priorities under `eevdf`
//!   with the words it uses for the other comparison policies).
//! - **Cgroups and autogroups.** All vCPU threads of a Pacer process share
//!   one group, so the flat model is what they see.
//! - **PELT, capacity, NUMA, energy, wake_affine.** Load is the number of
//!   runnable entities; the waker's CPU is not considered (`wake_by` is
//!   `wake`); the idle search covers the whole affinity, nearest first.
//! - **Where the model is stricter than Linux**, because every Pacer
//!   policy keeps the protocol's promises the simulator's `Monitor`
//!   checks: a wake, and a runner going back to its queue, use or kick an
//!   idle CPU of the affinity even outside the previous CPU's LLC; an
//!   idle CPU always pulls a waiting entity it may run (Linux skips the
//!   newidle balance when it expects to idle briefly, and leaves cache-hot
//!   tasks where they are); a delayed entity woken while a CPU it may use
//!   idles leaves its queue and is placed as a fresh wake.
//! - **Yield** pushes the deadline one request later (`yield_task_fair`).
//!
//! One lock (`parking_lot::Mutex`) over all queues, as `global-rr`: this
//! is a comparison policy whose decisions must be the kernel's, not a
//! fast path; the idle pull and the wake search read every CPU's queue,
//! which one lock makes simple and exact. Its cost is not what it is
//! measured for.

mod fair;
#[cfg(test)]
mod invariants;
mod place;
mod schedule;
#[cfg(test)]
mod tests;

use super::baseline::{
    service_change, utilisation, CoreCorun, CpuAccount, EntityAccount, EntityTable, ModeCell,
    Tabled,
};
use crate::stats::{CoreStats, EntityState, EntityStats};
use crate::tunables::Mode;
use crate::validate::validate_topology;
use crate::validate::{validate_affinity, validate_config, validate_priority, validate_spec};
use crate::{
    CpuId, CpuSet, Dispatch, EntityId, EntitySpec, Nanos, SchedClass, SchedConfig, SchedError,
    SchedSnapshot, StopReason, Topology, WakeDecision,
};
use fair::{FairEntities, FairEntity, FairRq};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

const MS: Nanos = 1_000_000;

/// The numbers of the model, with the kernel's defaults for a topology
/// ([`EevdfParams::for_topology`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EevdfParams {
    /// Every entity's request r_i (`sysctl_sched_base_slice`).
    pub base_slice: Nanos,
    /// The scheduler tick (1/HZ): when a used-up request is noticed.
    pub tick: Nanos,
    /// How often a busy CPU runs its periodic balance.
    pub busy_balance_interval: Nanos,
}

impl EevdfParams {
    /// `normalized_sysctl_sched_base_slice`: 0.75 ms before scaling.
    pub const NORMALIZED_BASE_SLICE: Nanos = 750_000;
    /// 1/HZ at HZ=250 (Debian's kernels and the development machines).
    pub const TICK_HZ_250: Nanos = 4 * MS;
    /// `sd->busy_factor`: a busy CPU balances this many times less often.
    pub const BUSY_FACTOR: u64 = 16;

    /// The kernel's defaults on `topology`: the base slice scaled by
    /// 1 + ilog2(CPUs), CPUs capped at 8 (`SCHED_TUNABLESCALING_LOG`);
    /// a 4 ms tick; a busy balance every 16 x (CPUs) ms (the domain's
    /// `min_interval` of one ms per CPU times the busy factor).
    pub fn for_topology(topology: &Topology) -> EevdfParams {
        let cpus = topology.num_cpus().max(1) as u64;
        let factor = 1 + u64::from(cpus.min(8).ilog2());
        EevdfParams {
            base_slice: Self::NORMALIZED_BASE_SLICE * factor,
            tick: Self::TICK_HZ_250,
            busy_balance_interval: Self::BUSY_FACTOR * cpus * MS,
        }
    }

    fn validate(&self) -> Result<(), SchedError> {
        if self.base_slice == 0 || self.tick == 0 || self.busy_balance_interval == 0 {
            return Err(SchedError::Config(format!(
                "eevdf: base_slice, tick and busy_balance_interval must be positive, \
                 not {} / {} / {} ns",
                self.base_slice, self.tick, self.busy_balance_interval
            )));
        }
        Ok(())
    }
}

/// One registered entity.
#[derive(Debug)]
struct Entity {
    acct: EntityAccount,
    affinity: CpuSet,
    fair: FairEntity,
    /// The CPU whose queue holds it (ready, or delayed), or that runs it.
    cpu: Option<usize>,
    /// Order of its last enqueue: a pulling CPU takes the oldest.
    queued_seq: u64,
}

impl Tabled for Entity {
    fn id(&self) -> EntityId {
        self.acct.id
    }
}

/// The entity table, seen by the fair queues through [`FairEntities`].
/// Queues only ever hold live entities (checked by the invariants); a
/// handle that is not live reads a scratch record instead of panicking.
#[derive(Debug)]
struct Entities {
    table: EntityTable<Entity>,
    scratch: FairEntity,
}

impl FairEntities for Entities {
    fn fair(&self, id: EntityId) -> &FairEntity {
        self.table.get(id).map_or(&self.scratch, |e| &e.fair)
    }

    fn fair_mut(&mut self, id: EntityId) -> &mut FairEntity {
        match self.table.get_mut(id) {
            Some(e) => &mut e.fair,
            None => &mut self.scratch,
        }
    }
}

/// One CPU: what it runs (`acct`) and its run queues, one per class.
#[derive(Debug)]
struct Cpu {
    acct: CpuAccount,
    /// Realtime: highest priority first, FIFO within a priority.
    rt: VecDeque<EntityId>,
    fair: FairRq,
    /// Idle class, FIFO.
    idle: VecDeque<EntityId>,
    in_service: bool,
    /// When its next periodic balance is due.
    next_balance: Nanos,
    /// Periodic balances since the last that moved or found nothing to
    /// move (`sd->nr_balance_failed`).
    balance_failed: u32,
}

/// Everything, under the one lock.
#[derive(Debug)]
struct State {
    ents: Entities,
    cpus: Vec<Cpu>,
    cores: Vec<CoreCorun>,
    /// Enqueue counter (`Entity::queued_seq`).
    seq: u64,
}

/// The EEVDF model (see the module documentation).
pub struct Eevdf {
    topology: Topology,
    params: EevdfParams,
    mode: ModeCell,
    idle_core_search: AtomicBool,
    state: Mutex<State>,
}

impl Eevdf {
    /// A scheduler for `topology` with the kernel's defaults for it.
    /// `config.max_entities` applies; the mode is recorded but changes
    /// nothing (EEVDF has no modes); SMT isolation is refused.
    pub fn new(topology: Topology, config: SchedConfig) -> Result<Self, SchedError> {
        let params = EevdfParams::for_topology(&topology);
        Self::with_params(topology, config, params)
    }

    /// A scheduler with chosen [`EevdfParams`].
    pub fn with_params(
        topology: Topology,
        config: SchedConfig,
        params: EevdfParams,
    ) -> Result<Self, SchedError> {
        validate_topology(&topology)?;
        validate_config(&config, super::PolicyKind::Eevdf)?;
        params.validate()?;
        let state = State {
            ents: Entities {
                table: EntityTable::new(config.max_entities),
                scratch: FairEntity::default(),
            },
            cpus: topology
                .cpus
                .iter()
                .map(|c| Cpu {
                    acct: CpuAccount::new(c.id),
                    rt: VecDeque::new(),
                    fair: FairRq::default(),
                    idle: VecDeque::new(),
                    in_service: true,
                    next_balance: 0,
                    balance_failed: 0,
                })
                .collect(),
            cores: topology
                .cores
                .iter()
                .map(|c| CoreCorun::new(c.cpus.len()))
                .collect(),
            seq: 0,
        };
        Ok(Eevdf {
            params,
            mode: ModeCell::new(config.mode),
            idle_core_search: AtomicBool::new(config.idle_core_search),
            state: Mutex::new(state),
            topology,
        })
    }

    /// The model's numbers.
    pub fn params(&self) -> EevdfParams {
        self.params
    }

    /// Time from `now` to the next tick boundary (never 0).
    fn to_next_tick(&self, now: Nanos) -> Nanos {
        self.params.tick - now % self.params.tick
    }
}

impl super::VcpuScheduler for Eevdf {
    fn name(&self) -> &'static str {
        "eevdf"
    }

    fn topology(&self) -> &Topology {
        &self.topology
    }

    fn add_entity(&self, spec: EntitySpec, now: Nanos) -> Result<EntityId, SchedError> {
        let _p = crate::profiler::scope("eevdf::add_entity");
        let affinity = validate_spec(&spec, &self.topology)?;
        self.state.lock().ents.table.insert(|id| Entity {
            acct: EntityAccount::new(id, &spec, now),
            affinity,
            fair: FairEntity {
                slice: self.params.base_slice,
                ..FairEntity::default()
            },
            cpu: None,
            queued_seq: 0,
        })
    }

    fn remove_entity(&self, id: EntityId, now: Nanos) -> Result<(), SchedError> {
        let _p = crate::profiler::scope("eevdf::remove_entity");
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let e = st.ents.table.live(id)?;
        let runs = match (e.acct.state(), e.cpu) {
            (super::baseline::RunState::Running(c), _) => {
                // Its CPU calls `schedule` next; until then it runs no
                // fair time that anyone else's placement should count.
                self.sync(st, c.0 as usize, now);
                let fair = &mut st.cpus[c.0 as usize].fair;
                if fair.curr == Some(id) {
                    fair.curr = None;
                }
                true
            }
            (_, Some(_)) => {
                self.unqueue(st, id, now, true);
                false
            }
            (_, None) => false,
        };
        st.ents.table.remove(id, runs);
        Ok(())
    }

    fn wake(&self, id: EntityId, now: Nanos) -> Result<Option<WakeDecision>, SchedError> {
        let _p = crate::profiler::scope("eevdf::wake");
        let mut guard = self.state.lock();
        self.wake_locked(&mut guard, id, now)
    }

    /// Linux's `wake_affine` is left out: the waker does not matter.
    fn wake_by(
        &self,
        id: EntityId,
        waker: EntityId,
        now: Nanos,
    ) -> Result<Option<WakeDecision>, SchedError> {
        let mut guard = self.state.lock();
        guard.ents.table.live(waker)?;
        self.wake_locked(&mut guard, id, now)
    }

    fn schedule(&self, cpu: CpuId, now: Nanos, reason: StopReason) -> Result<Dispatch, SchedError> {
        let _p = crate::profiler::scope("eevdf::schedule");
        if self.topology.cpu(cpu).is_none() {
            return Err(SchedError::UnknownCpu(cpu));
        }
        let mut guard = self.state.lock();
        Ok(self.schedule_locked(&mut guard, cpu.0 as usize, now, reason))
    }

    /// Recorded only: every entity has nice 0 (see the module documentation).
    fn set_priority(
        &self,
        id: EntityId,
        priority: u8,
        _now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let mut st = self.state.lock();
        st.ents.table.live_mut(id)?.acct.set_priority(priority)?;
        Ok(Vec::new())
    }

    fn set_class(
        &self,
        id: EntityId,
        class: SchedClass,
        priority: u8,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _p = crate::profiler::scope("eevdf::set_class");
        validate_priority(class, priority)?;
        let mut guard = self.state.lock();
        self.change_class(&mut guard, id, class, priority, now)
    }

    fn set_affinity(
        &self,
        id: EntityId,
        affinity: CpuSet,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _p = crate::profiler::scope("eevdf::set_affinity");
        let affinity = validate_affinity(&affinity, &self.topology)?;
        let mut guard = self.state.lock();
        let st = &mut *guard;
        st.ents.table.live_mut(id)?.affinity = affinity;
        Ok(self.follow_affinity(st, id, now))
    }

    fn mode(&self) -> Mode {
        self.mode.get()
    }

    /// Recorded only: EEVDF has no modes.
    fn set_mode(&self, mode: Mode, _now: Nanos) -> Vec<CpuId> {
        self.mode.set(mode);
        Vec::new()
    }

    fn set_cpu_enabled(
        &self,
        cpu: CpuId,
        enabled: bool,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _p = crate::profiler::scope("eevdf::set_cpu_enabled");
        if self.topology.cpu(cpu).is_none() {
            return Err(SchedError::UnknownCpu(cpu));
        }
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let c = cpu.0 as usize;
        let serving = st.cpus.iter().filter(|x| x.in_service).count();
        if !service_change(cpu, st.cpus[c].in_service, serving, enabled)? {
            return Ok(Vec::new());
        }
        st.cpus[c].in_service = enabled;
        let mut kicks = if enabled {
            Vec::new()
        } else {
            self.evacuate(st, c, now)
        };
        // Out: what it runs leaves at its next call. Back: it pulls.
        st.cpus[c].acct.kick_pending = true;
        kicks.push(cpu);
        kicks.dedup();
        Ok(kicks)
    }

    /// Recorded but without effect: the idle search always covers the
    /// affinity.
    fn set_idle_core_search(&self, on: bool) {
        self.idle_core_search.store(on, Ordering::Relaxed);
    }

    fn ready_wait(&self, id: EntityId, now: Nanos) -> Option<Nanos> {
        let st = self.state.lock();
        st.ents.table.get(id).map(|e| e.acct.ready_wait_at(now))
    }

    fn snapshot(&self, now: Nanos) -> SchedSnapshot {
        let _p = crate::profiler::scope("eevdf::snapshot");
        let st = self.state.lock();
        let core_of = |c: usize| self.topology.cpus[c].core;
        let entities: Vec<EntityStats> = st
            .ents
            .table
            .iter()
            .map(|e| {
                let mut row = e.acct.stats(now);
                row.core = row.cpu.map(|c| core_of(c.0 as usize));
                row.affinity = e.affinity.clone();
                row
            })
            .collect();
        let core_load = |core: &crate::topology::CoreInfo| {
            utilisation(
                core.cpus
                    .iter()
                    .map(|c| st.cpus[c.0 as usize].acct.times(now)),
            )
        };
        let cpus = self
            .topology
            .cpus
            .iter()
            .map(|info| {
                let c = info.id.0 as usize;
                let mut s = st.cpus[c].acct.stats(now);
                let core = &self.topology.cores[info.core.0 as usize];
                s.smt_corun_foreign =
                    st.cores[info.core.0 as usize].foreign(info.smt_index as usize, now);
                s.core_load = core_load(core);
                s.in_service = st.cpus[c].in_service;
                s.running_priority = s
                    .running
                    .and_then(|r| st.ents.table.get(r))
                    .map(|r| r.acct.priority);
                s
            })
            .collect();
        // A core's ready count: what waits in the queues of its CPUs.
        let cores = self
            .topology
            .cores
            .iter()
            .map(|core| {
                let mine = |e: &&EntityStats| {
                    st.ents
                        .table
                        .get(e.id)
                        .and_then(|x| x.cpu)
                        .is_some_and(|c| core_of(c) == core.id)
                };
                CoreStats {
                    core: core.id,
                    ready: entities
                        .iter()
                        .filter(|e| e.state == EntityState::Waiting)
                        .filter(mine)
                        .count() as u32,
                    running: core
                        .cpus
                        .iter()
                        .filter(|c| st.cpus[c.0 as usize].acct.current().is_some())
                        .count() as u32,
                    load: core_load(core),
                }
            })
            .collect();
        SchedSnapshot {
            mode: self.mode(),
            now,
            policy: "eevdf".into(),
            entities,
            cpus,
            cores,
        }
    }
}
