//! Identifiers, classes and the small value types of the scheduler API.

use serde::{Deserialize, Serialize};

/// Time in nanoseconds on the caller's monotonic clock. The scheduler never
/// reads a clock itself: every event carries `now`.
pub type Nanos = u64;

/// Index of a logical CPU (an SMT thread) in a [`crate::Topology`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CpuId(pub u32);

/// Handle of a schedulable entity (a vCPU) returned by `add_entity`.
///
/// It names a slot of the scheduler's entity table (`index`, dense: a
/// caller may index its own tables by it) and the generation of that slot
/// when the entity was added. Removing an entity bumps the generation, so
/// the handle of a removed entity never reaches the entity added next in
/// the same slot: every call with it fails with
/// [`SchedError::StaleEntity`], however long a caller keeps it (until one
/// slot has been reused 2^32 times).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EntityId {
    index: u32,
    generation: u32,
}

impl EntityId {
    /// The handle of slot `index` in generation `generation`. Policies make
    /// handles; a caller only needs this to name an entity it read from a
    /// snapshot or to build a deliberately wrong one in a test.
    pub const fn new(index: u32, generation: u32) -> EntityId {
        EntityId { index, generation }
    }

    /// The slot index (dense, reused after removal).
    pub const fn index(self) -> u32 {
        self.index
    }

    /// The generation of the slot this handle was issued in.
    pub const fn generation(self) -> u32 {
        self.generation
    }

    /// Whether this handle is older than `current`, the generation its slot
    /// is in now (it was issued before the slot's entity was removed).
    pub(crate) fn is_older_than(self, current: u32) -> bool {
        // Wrapping: a handle at most 2^31 generations behind is stale.
        (current.wrapping_sub(self.generation) as i32) > 0
    }
}

impl std::fmt::Debug for EntityId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EntityId({}#{})", self.index, self.generation)
    }
}

/// `index#generation`, e.g. `3#1`.
impl std::fmt::Display for EntityId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.index, self.generation)
    }
}

/// The VM an entity belongs to (SMT isolation and statistics group by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct VmId(pub u32);

/// Scheduling class of an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SchedClass {
    /// Fixed priority (100..=120), never penalised; always runs before timeshare.
    Realtime,
    /// Base priority 1..=99 with cycling penalties (the default).
    #[default]
    Timeshare,
    /// Runs only when nothing else is ready (priority 0).
    Idle,
}

/// Why the entity that was running on a CPU stopped (argument of `schedule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StopReason {
    /// Its quantum timer fired.
    QuantumEnd,
    /// The CPU was kicked (a wake decided it may have to preempt). The
    /// entity keeps the unused part of its quantum.
    Preempted,
    /// It blocked (a guest HLT with no pending interrupt).
    Blocked,
    /// It gave up the CPU voluntarily but stays runnable (PAUSE loop exit).
    Yielded,
    /// The CPU was idle (no entity was running); `schedule` just picks.
    Idle,
}

/// What a CPU should run next, and which other CPUs must look again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    /// The entity to run, or `None` to idle until kicked.
    pub entity: Option<EntityId>,
    /// Length of the time slice to arm the quantum timer with (0 when idle).
    pub quantum: Nanos,
    /// CPUs the caller must kick, exactly as for a kicking
    /// [`WakeDecision`]: idle CPUs that received work this call left
    /// waiting (the stopped entity requeued behind a better one), and under
    /// SMT isolation idle siblings that may now run the VM this core
    /// switched to. Usually empty (no allocation then).
    pub kicks: Vec<CpuId>,
    /// Entities this call throttled (their cap's budget is spent, see
    /// `vcpu_sched::shares`): still runnable, but no CPU runs them before
    /// the time given; the policy queues them again itself then. Usually
    /// empty.
    #[serde(default)]
    pub throttled: Vec<(EntityId, Nanos)>,
    /// With no entity: call `schedule(cpu, t, StopReason::Idle)` at `t`
    /// unless a kick comes first (a throttled entity, or a reservation,
    /// is renewed then and this CPU may be the one to run it). `None`:
    /// idle until kicked.
    #[serde(default)]
    pub recheck_at: Option<Nanos>,
}

impl Dispatch {
    /// Run `entity` for `quantum` ns, with no other CPU to kick.
    pub fn run(entity: EntityId, quantum: Nanos) -> Dispatch {
        Dispatch {
            entity: Some(entity),
            quantum,
            kicks: Vec::new(),
            throttled: Vec::new(),
            recheck_at: None,
        }
    }

    /// Idle until kicked.
    pub fn idle() -> Dispatch {
        Dispatch {
            entity: None,
            quantum: 0,
            kicks: Vec::new(),
            throttled: Vec::new(),
            recheck_at: None,
        }
    }
}

/// Where a woken entity was placed and whether that CPU must be kicked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeDecision {
    /// The CPU whose queue (or pinned queue) received the entity.
    pub cpu: CpuId,
    /// The caller must interrupt `cpu` (IPI / signal) so that it calls
    /// `schedule(cpu, now, StopReason::Preempted)` (or `Idle` if it idles).
    pub kick: bool,
    /// The entity now waits behind `cpu`'s runner without preempting it,
    /// and the runner's time slice, recomputed with the ready count that
    /// includes the newcomer, ends earlier than the slice it was given
    /// (haiku only; never with `kick`). The caller brings the runner's
    /// quantum timer forward to [`QuantumCut::end`] if `cpu` still runs
    /// the turn the cut names, and reports that stop as
    /// [`StopReason::QuantumEnd`], as for any quantum end.
    #[serde(default)]
    pub shorten_quantum: Option<QuantumCut>,
}

impl WakeDecision {
    /// Queued on `cpu`, kicking it or not, with no quantum to shorten.
    pub fn new(cpu: CpuId, kick: bool) -> WakeDecision {
        WakeDecision {
            cpu,
            kick,
            shorten_quantum: None,
        }
    }
}

/// A running entity's quantum brought forward (see
/// [`WakeDecision::shorten_quantum`]). It names the turn it applies to: the
/// entity and the `now` of the `schedule` call that dispatched it, so a
/// caller that acts on it late never cuts a later turn of that CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QuantumCut {
    /// The entity running on the decision's CPU.
    pub runner: EntityId,
    /// When it was dispatched (the `now` of that `schedule` call).
    pub dispatched_at: Nanos,
    /// The new end of its quantum (absolute, the caller's clock): earlier
    /// than the end it was given, never before `dispatched_at` plus the
    /// mode's minimal quantum (or its whole slice, if that was shorter),
    /// never before the `now` of the wake.
    pub end: Nanos,
}

/// Static description of an entity when it is added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntitySpec {
    pub vm: VmId,
    pub class: SchedClass,
    /// Base priority on Haiku's scale: 0 idle, 1 lowest, 10 normal, 20
    /// urgent, 100..=120 realtime.
    pub priority: u8,
    /// Hard affinity: the logical CPUs the entity may run on. A set with one
    /// CPU pins it.
    pub affinity: crate::CpuSet,
}

impl SchedError {
    /// The error for handle `id` whose slot is in generation `current`:
    /// stale if the handle is older, unknown if it was never issued.
    pub(crate) fn for_handle(id: EntityId, current: u32) -> SchedError {
        if id.is_older_than(current) {
            SchedError::StaleEntity(id)
        } else {
            SchedError::UnknownEntity(id)
        }
    }
}

/// Errors of the scheduler API. Nothing in the API panics on bad input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    /// No entity was ever added with this handle.
    #[error("unknown entity {0}")]
    UnknownEntity(EntityId),
    /// The entity of this handle was removed (its slot may hold another).
    #[error("entity {0} was removed")]
    StaleEntity(EntityId),
    #[error("CPU {0:?} is not in the topology")]
    UnknownCpu(CpuId),
    /// `set_cpu_enabled` would leave no CPU in service.
    #[error("CPU {0:?} is the last CPU in service")]
    LastCpuInService(CpuId),
    #[error("entity table full ({0} entities)")]
    TooManyEntities(usize),
    #[error("affinity of the entity contains no CPU of the topology")]
    EmptyAffinity,
    #[error("priority {priority} is not valid for class {class:?}")]
    BadPriority { class: SchedClass, priority: u8 },
    #[error("invalid topology: {0}")]
    Topology(String),
    #[error("invalid configuration: {0}")]
    Config(String),
}
