//! Identifiers, classes and the small value types of the scheduler API.

use serde::{Deserialize, Serialize};

/// Time in nanoseconds on the caller's monotonic clock. The scheduler never
/// reads a clock itself: every event carries `now`.
pub type Nanos = u64;

/// Index of a logical CPU (an SMT thread) in a [`crate::Topology`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CpuId(pub u32);

/// Handle of a schedulable entity (a vCPU) returned by `add_entity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EntityId(pub u32);

impl EntityId {
    /// The slot index of the entity (dense: callers may index tables by it).
    pub fn index(self) -> u32 {
        self.0
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
}

impl Dispatch {
    /// Run `entity` for `quantum` ns, with no other CPU to kick.
    pub fn run(entity: EntityId, quantum: Nanos) -> Dispatch {
        Dispatch {
            entity: Some(entity),
            quantum,
            kicks: Vec::new(),
        }
    }

    /// Idle until kicked.
    pub fn idle() -> Dispatch {
        Dispatch {
            entity: None,
            quantum: 0,
            kicks: Vec::new(),
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

/// Errors of the scheduler API. Nothing in the API panics on bad input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    #[error("unknown entity {0:?}")]
    UnknownEntity(EntityId),
    #[error("CPU {0:?} is not in the topology")]
    UnknownCpu(CpuId),
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
