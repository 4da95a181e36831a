//! Observability: per-entity and per-CPU counters and latency histograms,
//! read as a serialisable snapshot.

use crate::{CpuId, EntityId, Nanos, VmId};
use serde::{Deserialize, Serialize};

/// Summary of a latency histogram (nanoseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub p50: Nanos,
    pub p99: Nanos,
    pub max: Nanos,
    pub mean: Nanos,
}

/// Migrations counted by the distance between the previous and the new CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationCounts {
    pub same_cpu: u64,
    pub smt_sibling: u64,
    pub same_llc: u64,
    pub same_package: u64,
    pub remote: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntityStats {
    pub id: EntityId,
    pub vm: VmId,
    pub base_priority: u8,
    /// Time spent running.
    pub run_time: Nanos,
    /// Time spent runnable but waiting in a queue (steal time).
    pub ready_wait: Nanos,
    /// Wake event -> running again.
    pub wake_latency: LatencySummary,
    pub migrations: MigrationCounts,
    /// Times it was taken off a CPU while still runnable, before its quantum ended.
    pub preemptions: u64,
    pub quantum_ends: u64,
    pub blocks: u64,
    pub wakes: u64,
    /// The load estimate ("load if it ran alone"), 0..=1000.
    pub load: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuStats {
    pub cpu: CpuId,
    pub busy_time: Nanos,
    pub idle_time: Nanos,
    pub dispatches: u64,
    pub context_switches: u64,
    /// Time this CPU ran a vCPU while an SMT sibling ran a vCPU of another VM.
    pub smt_corun_foreign: Nanos,
    /// Times this CPU went idle while an entity allowed on it was waiting.
    pub idle_while_waiting: u64,
    /// Core load (0..=1000 per CPU of the core) at snapshot time.
    pub core_load: u32,
}

/// Everything observable at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedSnapshot {
    pub now: Nanos,
    pub policy: String,
    pub entities: Vec<EntityStats>,
    pub cpus: Vec<CpuStats>,
}
