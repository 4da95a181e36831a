//! The scheduler API every policy implements, and the policy factory.
//!
//! Event protocol (the caller owns the clock and the CPUs):
//! 1. `add_entity` registers a vCPU; it starts *blocked* (not runnable).
//! 2. `wake(id, now)` makes it runnable. The answer names the CPU whose
//!    queue received it and whether that CPU must be kicked; the caller
//!    then interrupts that CPU, which calls `schedule(cpu, now, Preempted)`
//!    (or `Idle` if it was idle).
//! 3. A CPU calls `schedule(cpu, now, reason)` whenever the entity it runs
//!    stops (quantum timer, kick, guest HLT, yield) or when it is idle and
//!    was kicked. The answer is the next entity and its time slice, plus
//!    the CPUs to kick (`Dispatch::kicks`): when the stopped entity goes
//!    back to a queue while an allowed CPU is idle, that CPU must be told,
//!    or a runnable vCPU would wait while a CPU it may use idles.
//!    When the entity queues behind a running one without a kick, the
//!    answer may carry `shorten_quantum`: the runner's time slice,
//!    recomputed with the ready count that now includes the newcomer,
//!    ends earlier. The caller brings that runner's quantum timer forward
//!    (if the CPU still runs the turn the cut names) and reports the stop
//!    as `QuantumEnd`; the scheduler already measures the runner against
//!    the cut quantum, so a kick that stops it at that time counts as a
//!    quantum end too.
//! 4. Waking an entity that is still running (its block has not been
//!    reported yet) is remembered: its next `Blocked` stop keeps it
//!    runnable instead, so a wake-up is never lost.
//!
//! 5. Changes while running (`set_priority`, `set_class`, `set_affinity`,
//!    `set_mode`, `set_cpu_enabled`) keep the entity's handle and
//!    statistics and return the CPUs the caller must kick, as a kicking
//!    wake decision does.
//!
//! All methods take `&self` and are safe to call from many threads at once.

mod baseline;
pub mod eevdf;
pub mod global_rr;
pub mod haiku;
pub mod static_pin;

use crate::tunables::{Mode, Tunables, DEFAULT_MAX_ENTITIES};
use crate::{
    Coschedule, CpuId, CpuSet, Dispatch, EntityId, EntitySpec, Nanos, SchedClass, SchedError,
    SchedSnapshot, StopReason, Topology, VmId, WakeDecision,
};
use serde::{Deserialize, Serialize};

/// Which policy to build. Spelled `haiku`, `global-rr`, `pinned` and
/// `eevdf` everywhere: config files, scenario files, command lines,
/// snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum PolicyKind {
    /// The Haiku-derived default policy.
    #[default]
    #[serde(rename = "haiku")]
    Haiku,
    /// One global FIFO queue under one lock (the design O(1)/Haiku replaced).
    #[serde(rename = "global-rr")]
    GlobalRoundRobin,
    /// One entity per CPU, no balancing (what `taskset` users do).
    #[serde(rename = "pinned")]
    StaticPinning,
    /// A model of Linux's EEVDF fair scheduler (what `host` gets).
    #[serde(rename = "eevdf")]
    Eevdf,
}

impl PolicyKind {
    /// Every policy, default first.
    pub const ALL: [PolicyKind; 4] = [
        PolicyKind::Haiku,
        PolicyKind::GlobalRoundRobin,
        PolicyKind::StaticPinning,
        PolicyKind::Eevdf,
    ];

    /// The one spelling of the policy's name.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Haiku => "haiku",
            PolicyKind::GlobalRoundRobin => "global-rr",
            PolicyKind::StaticPinning => "pinned",
            PolicyKind::Eevdf => "eevdf",
        }
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicyKind::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = PolicyKind::ALL.iter().map(|p| p.as_str()).collect();
                format!(
                    "unknown policy {s:?} (expected one of: {})",
                    names.join(", ")
                )
            })
    }
}

/// Configuration of a scheduler instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedConfig {
    pub policy: PolicyKind,
    pub mode: Mode,
    pub tunables: Tunables,
    /// Core scheduling: SMT siblings only ever co-run entities of one VM.
    pub smt_isolation: bool,
    /// Search for fully idle cores (all SMT siblings idle) when placing.
    /// Can also be switched at run time with `set_idle_core_search`.
    pub idle_core_search: bool,
    /// Capacity of the entity table (fixed so the hot path needs no global lock).
    pub max_entities: usize,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            policy: PolicyKind::Haiku,
            mode: Mode::LowLatency,
            tunables: Tunables::default(),
            smt_isolation: false,
            idle_core_search: true,
            max_entities: DEFAULT_MAX_ENTITIES,
        }
    }
}

/// The event-driven scheduler API. See the module documentation for the
/// protocol between the caller and the scheduler.
pub trait VcpuScheduler: Send + Sync {
    /// The policy's name, as [`PolicyKind::as_str`] spells it.
    fn name(&self) -> &'static str;
    fn topology(&self) -> &Topology;
    /// Register an entity. It starts blocked.
    fn add_entity(&self, spec: EntitySpec, now: Nanos) -> Result<EntityId, SchedError>;
    /// Remove an entity. If it is running, the CPU running it must call
    /// `schedule` next (the entity is not picked again).
    fn remove_entity(&self, id: EntityId, now: Nanos) -> Result<(), SchedError>;
    /// The entity became runnable. `Ok(None)` if it already was (queued or running).
    fn wake(&self, id: EntityId, now: Nanos) -> Result<Option<WakeDecision>, SchedError>;
    /// `wake`, for an entity the caller found already running of its own
    /// accord: the host kernel ran it at its wake-up before the caller saw
    /// the wake (Pacer's `ranked` dispatch, under KVM's local APIC). If
    /// the policy queues it, that interrupts it mid-run as a preemption
    /// would, so haiku queues it at the front of its level, where Haiku
    /// puts a thread preempted before its quantum's end, not behind the
    /// level's waiting entities as a fresh wake. The default is `wake`.
    fn wake_found_running(
        &self,
        id: EntityId,
        now: Nanos,
    ) -> Result<Option<WakeDecision>, SchedError> {
        self.wake(id, now)
    }
    /// `wake`, by another entity (a vCPU's IPI to another vCPU). When
    /// both belong to one VM the policy may place the woken entity near
    /// the waker (they share data): haiku prefers the waker's last-level
    /// cache while it has an idle core; the baselines ignore the waker.
    /// An unknown or stale `waker` is an error, as for `id`.
    fn wake_by(
        &self,
        id: EntityId,
        waker: EntityId,
        now: Nanos,
    ) -> Result<Option<WakeDecision>, SchedError>;
    /// The entity running on `cpu` (if any) stopped for `reason`; pick the next.
    fn schedule(&self, cpu: CpuId, now: Nanos, reason: StopReason) -> Result<Dispatch, SchedError>;
    /// [`schedule`](Self::schedule), for a turn of which the stopped entity
    /// spent `halted_ns` halted while still holding the CPU: a VMM that
    /// learns halts late (Pacer under KVM's in-kernel local APIC sees a
    /// halt at the next exit or sample) says so here, and that time is not
    /// charged as run time (penalties, shares, load). The default ignores
    /// it.
    fn schedule_after_halts(
        &self,
        cpu: CpuId,
        now: Nanos,
        reason: StopReason,
        halted_ns: Nanos,
    ) -> Result<Dispatch, SchedError> {
        let _ = halted_ns;
        self.schedule(cpu, now, reason)
    }
    /// Change the base priority (cancels the penalty), keeping the class,
    /// the handle and the statistics. A waiting entity is requeued at its
    /// new level. Returns the CPUs the caller must kick (usually none).
    fn set_priority(
        &self,
        id: EntityId,
        priority: u8,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError>;
    /// Change the class and base priority together (the priority must be
    /// valid for the class), keeping the handle and the statistics;
    /// cancels the penalty. A waiting entity is placed again as on a wake
    /// (a new realtime entity may preempt). Returns the CPUs to kick.
    fn set_class(
        &self,
        id: EntityId,
        class: SchedClass,
        priority: u8,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError>;
    /// Change the hard affinity (CPUs outside the topology are ignored;
    /// none left is an error), keeping the handle, the penalty and the
    /// statistics. A waiting entity is placed again as on a wake; one that
    /// runs on a CPU it may no longer use leaves it at that CPU's next
    /// `schedule` (that CPU is among the returned kicks). Returns the CPUs
    /// to kick.
    fn set_affinity(
        &self,
        id: EntityId,
        affinity: CpuSet,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError>;
    /// Set the entity's operator weight (1..=10000, default 100: its
    /// proportional share among the entities contending with it, see
    /// [`crate::shares`]). Keeps the handle, penalty and statistics.
    /// Policies without weights refuse ([`SchedError::Config`]).
    fn set_weight(&self, id: EntityId, weight: u32, now: Nanos) -> Result<Vec<CpuId>, SchedError> {
        let _ = (id, weight, now);
        Err(unsupported(self.name(), "weights"))
    }
    /// Cap the entity at `permille` / 1000 of one CPU (1..=1000), enforced
    /// even on an idle host (a throttled entity waits for its budget; see
    /// [`Dispatch::throttled`]); `None` lifts the cap.
    fn set_cap(
        &self,
        id: EntityId,
        permille: Option<u32>,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _ = (id, permille, now);
        Err(unsupported(self.name(), "caps"))
    }
    /// Reserve `permille` / 1000 of one CPU for the entity (0 lifts it):
    /// it gets at least that whenever it asks for it. The caller keeps the
    /// sum of reservations within the CPUs (the VMM's config checks do).
    fn set_reservation(
        &self,
        id: EntityId,
        permille: u32,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _ = (id, permille, now);
        Err(unsupported(self.name(), "reservations"))
    }
    /// Promise the entity a wake-to-run bound with a budget
    /// (`crate::bound`; `None` lifts it): while the budget lasts its wakes
    /// go ahead of every timeshare entity and preempt one at once. The
    /// caller admits the set of bounds first (`crate::bound::admit`).
    fn set_latency_bound(
        &self,
        id: EntityId,
        bound: Option<crate::bound::LatencyBound>,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let _ = (id, bound, now);
        Err(unsupported(self.name(), "latency bounds"))
    }
    /// The mode it runs in now.
    fn mode(&self) -> Mode;
    /// Switch the mode at run time (Haiku switches its mode operations
    /// the same way): time slices and placement follow the new mode from
    /// the next decision on. Returns idle CPUs to kick so that they look
    /// at what waits (power saving packs work next to idle CPUs that low
    /// latency would use).
    fn set_mode(&self, mode: Mode, now: Nanos) -> Vec<CpuId>;
    /// Take a host CPU out of service (`false`) or put it back (`true`),
    /// as Haiku's `set_cpu_enabled`. Out of service it runs nothing: what
    /// it runs leaves at its next `schedule`, what waits for it moves to
    /// CPUs in service, nothing new is placed on it; an entity allowed
    /// only on CPUs out of service waits until one comes back. Returns the
    /// CPUs to kick (the CPU itself among them). The last CPU in service
    /// cannot be taken out ([`SchedError::LastCpuInService`]).
    fn set_cpu_enabled(
        &self,
        cpu: CpuId,
        enabled: bool,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError>;
    /// Switch the idle-core part of the idle search on or off at run time.
    fn set_idle_core_search(&self, on: bool);
    /// Counters and histograms at `now`.
    fn snapshot(&self, now: Nanos) -> SchedSnapshot;
    /// The time `id` has waited runnable over its life, at `now` (its
    /// snapshot row's `ready_wait`, including a wait under way), or None
    /// for an unknown entity. Cheap in every policy (no snapshot): a VMM
    /// reads it on each dispatch to publish the guest's steal time.
    fn ready_wait(&self, id: EntityId, now: Nanos) -> Option<Nanos> {
        self.snapshot(now)
            .entities
            .iter()
            .find(|e| e.id == id)
            .map(|e| e.ready_wait)
    }
    /// The effective priority `cpu` runs at now (None: idle, or a policy
    /// without priorities). One atomic load, for a VMM's traces.
    fn running_priority(&self, _cpu: CpuId) -> Option<u8> {
        None
    }
    /// The effective priority the policy gives `id` now (Haiku's E: the
    /// base priority less the penalty, or boosted), or None for an unknown
    /// entity or a policy without per-entity priorities. A VMM that lets
    /// the host kernel switch between its vCPU threads ranks them by it
    /// (Pacer's `ranked` dispatch), so that a vCPU the hypervisor wakes
    /// preempts exactly the runners this policy would preempt for it.
    fn effective_priority(&self, _id: EntityId) -> Option<u8> {
        None
    }
    /// Whether a runnable entity waits in a queue `cpu` takes work from at
    /// its runner's quantum end (its own and its core's): if none does,
    /// that quantum end re-picks the runner. A VMM whose quantum ends cost
    /// a context switch may then let the runner go on, and end its quantum
    /// when something queues behind it. One or two atomic loads under
    /// haiku; the default (true) keeps every quantum end.
    fn has_waiting(&self, _cpu: CpuId) -> bool {
        true
    }
    /// Switch relaxed co-scheduling for the vCPUs of `vm`, those added and
    /// those to come (see [`crate::cosched`]): skew tracking, co-start of a
    /// parked sibling next to a running one, co-stop past the skew bound
    /// (`Tunables::costop_skew`), directed yields. Policies without it
    /// ignore it (the default): they schedule each vCPU on its own.
    fn set_coschedule(&self, vm: VmId, mode: Coschedule, now: Nanos) -> Result<(), SchedError> {
        let _ = (vm, mode, now);
        Ok(())
    }
    /// A directed yield: the running entity `from` waits on its sibling
    /// `to`, which is runnable but parked (the VMM saw `from` send it an
    /// IPI, or yield while it is preempted). True: the policy will give
    /// `from`'s CPU to `to` at that CPU's next `schedule`, which the
    /// caller should call now with [`StopReason::Yielded`]; false: nothing
    /// to do (not co-scheduled, not siblings, `to` not parked). An unknown
    /// or stale entity is an error. The default does nothing.
    fn yield_to(&self, from: EntityId, to: EntityId, now: Nanos) -> Result<bool, SchedError> {
        let _ = (from, to, now);
        Ok(false)
    }
    /// A directed yield that passes `from`'s turn on: as [`yield_to`], and
    /// where the policy lends (haiku, a co-scheduled VM wider than its
    /// CPUs) `to` runs only the rest of `from`'s slice, at whatever level
    /// it waits. For a sibling `from` needs a moment of (an IPI's answer,
    /// a barrier's arrival), not a lock holder, which `yield_to` gives a
    /// turn of its own. The default is [`yield_to`].
    ///
    /// [`yield_to`]: VcpuScheduler::yield_to
    fn pass_turn(&self, from: EntityId, to: EntityId, now: Nanos) -> Result<bool, SchedError> {
        self.yield_to(from, to, now)
    }
    /// `id`, blocked in the policy's view, ran `ran_ns` up to `now` without
    /// the policy seeing it: it was woken, ran and blocked again between
    /// two looks of a VMM whose hypervisor wakes halted vCPUs by itself
    /// (KVM's in-kernel local APIC), which learns such runs from the
    /// thread's CPU time. The policy charges it as a wake, a run and a
    /// block before the quantum's end: load, penalties, shares and caps,
    /// counters. An entity that is queued, running or unknown to the
    /// policy's view as blocked is left alone. The default ignores it.
    fn ran_unseen(&self, id: EntityId, ran_ns: Nanos, now: Nanos) -> Result<(), SchedError> {
        let _ = (id, ran_ns, now);
        Ok(())
    }
}

/// The error of a policy that has no operator shares of a kind.
fn unsupported(policy: &str, what: &str) -> SchedError {
    SchedError::Config(format!(
        "policy {policy} has no per-VM {what} (only haiku has weights, caps, reservations and latency bounds)"
    ))
}

/// Build a scheduler of the configured policy for a topology.
pub fn build(
    topology: Topology,
    config: SchedConfig,
) -> Result<Box<dyn VcpuScheduler>, SchedError> {
    Ok(match config.policy {
        PolicyKind::Haiku => Box::new(haiku::HaikuScheduler::new(topology, config)?),
        PolicyKind::GlobalRoundRobin => {
            Box::new(global_rr::GlobalRoundRobin::new(topology, config)?)
        }
        PolicyKind::StaticPinning => Box::new(static_pin::StaticPinning::new(topology, config)?),
        PolicyKind::Eevdf => Box::new(eevdf::Eevdf::new(topology, config)?),
    })
}
