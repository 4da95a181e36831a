//! `pacer-sched-snapshot` (SIGUSR1's `sched-snapshot-<ms>.json`): every
//! vCPU as the scheduler sees it (by VM and index), as the engine and its
//! interrupt controller see it, then the scheduler's whole snapshot
//! (entities, CPUs, cores) under the documents' naming rule (`vcpu_sched`'s
//! own structs name times without their unit).

use super::{Header, SCHED_SNAPSHOT};
use serde::Serialize;
use vcpu_engine::stats::{VcpuEngineNow, VcpuNow};
use vcpu_sched::stats::{CoreStats, CpuStats, EntityStats, MigrationCounts};
use vcpu_sched::SchedSnapshot;

/// A wake-latency summary of the scheduler's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SchedLatencyDoc {
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub mean_ns: u64,
}

/// One entity (vCPU) of the scheduler.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntityDoc {
    /// The handle, `index#generation`.
    pub id: String,
    pub vm: u32,
    pub base_priority: u8,
    pub run_ns: u64,
    pub ready_wait_ns: u64,
    /// Null before its first wake.
    pub wake_latency: Option<SchedLatencyDoc>,
    /// Dispatches by distance from the previous CPU.
    pub migrations: MigrationCounts,
    pub preemptions: u64,
    pub quantum_ends: u64,
    pub blocks: u64,
    pub wakeups: u64,
    /// Load if it ran alone, 0..=1000.
    pub load_permille: u32,
    pub state: &'static str,
    pub class: vcpu_sched::SchedClass,
    pub effective_priority: u8,
    pub penalty: u8,
    pub quantum_ns: u64,
    pub quantum_used_ns: u64,
    /// The scheduler's CPU index (not the host CPU number).
    pub cpu: Option<u32>,
    pub core: Option<u32>,
    /// Its hard affinity, as scheduler CPU indexes in list syntax.
    pub affinity: String,
}

impl EntityDoc {
    fn of(e: &EntityStats) -> EntityDoc {
        let l = e.wake_latency;
        EntityDoc {
            id: e.id.to_string(),
            vm: e.vm.0,
            base_priority: e.base_priority,
            run_ns: e.run_time,
            ready_wait_ns: e.ready_wait,
            wake_latency: (l.count > 0).then_some(SchedLatencyDoc {
                count: l.count,
                p50_ns: l.p50,
                p99_ns: l.p99,
                p999_ns: l.p999,
                max_ns: l.max,
                mean_ns: l.mean,
            }),
            migrations: e.migrations,
            preemptions: e.preemptions,
            quantum_ends: e.quantum_ends,
            blocks: e.blocks,
            wakeups: e.wakes,
            load_permille: e.load,
            state: e.state.as_str(),
            class: e.class,
            effective_priority: e.effective_priority,
            penalty: e.penalty,
            quantum_ns: e.quantum,
            quantum_used_ns: e.quantum_used,
            cpu: e.cpu.map(|c| c.0),
            core: e.core.map(|c| c.0),
            affinity: e.affinity.to_list(),
        }
    }
}

/// One logical CPU of the scheduler.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuDoc {
    pub cpu: u32,
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub dispatches: u64,
    pub context_switches: u64,
    /// Time it ran a vCPU while an SMT sibling ran another VM's.
    pub smt_corun_foreign_ns: u64,
    pub idle_while_waiting: u64,
    pub core_load_permille: u32,
    pub in_service: bool,
    /// The entity it runs and the priority it runs at.
    pub running: Option<String>,
    pub running_priority: Option<u8>,
    pub quantum_cuts: u64,
    /// Relaxed co-scheduling's decisions here (0 unless a VM sets
    /// `coschedule = "relaxed"` under haiku): co-stops, co-start kicks,
    /// directed yields.
    pub costops: u64,
    pub costarts: u64,
    pub directed_yields: u64,
    /// Sibling gathering's swaps decided here (haiku under `ranked`).
    pub gathers: u64,
}

impl CpuDoc {
    pub fn of(c: &CpuStats) -> CpuDoc {
        CpuDoc {
            cpu: c.cpu.0,
            busy_ns: c.busy_time,
            idle_ns: c.idle_time,
            dispatches: c.dispatches,
            context_switches: c.context_switches,
            smt_corun_foreign_ns: c.smt_corun_foreign,
            idle_while_waiting: c.idle_while_waiting,
            core_load_permille: c.core_load,
            in_service: c.in_service,
            running: c.running.map(|e| e.to_string()),
            running_priority: c.running_priority,
            quantum_cuts: c.quantum_cuts,
            costops: c.costops,
            costarts: c.costarts,
            directed_yields: c.directed_yields,
            gathers: c.gathers,
        }
    }
}

/// One core of the scheduler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CoreDoc {
    pub core: u32,
    pub ready: u32,
    pub running: u32,
    pub load_permille: u32,
}

impl CoreDoc {
    fn of(c: &CoreStats) -> CoreDoc {
        CoreDoc {
            core: c.core.0,
            ready: c.ready,
            running: c.running,
            load_permille: c.load,
        }
    }
}

/// The scheduler's own snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchedulerDoc {
    /// The scheduler's clock at the snapshot.
    pub now_ns: u64,
    pub entities: Vec<EntityDoc>,
    pub cpus: Vec<CpuDoc>,
    pub cores: Vec<CoreDoc>,
}

/// The SIGUSR1 file.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotDocument {
    #[serde(flatten)]
    pub header: Header,
    pub policy: String,
    pub mode: String,
    /// Since `pacer run` started.
    pub taken_ns: u64,
    pub vcpus: Vec<VcpuNow>,
    pub engine: Vec<VcpuEngineNow>,
    pub scheduler: SchedulerDoc,
}

impl SnapshotDocument {
    pub fn new(
        snap: &SchedSnapshot,
        vcpus: Vec<VcpuNow>,
        engine: Vec<VcpuEngineNow>,
        taken_ns: u64,
    ) -> SnapshotDocument {
        SnapshotDocument {
            header: Header::new(SCHED_SNAPSHOT),
            policy: snap.policy.clone(),
            mode: snap.mode.as_str().to_string(),
            taken_ns,
            vcpus,
            engine,
            scheduler: SchedulerDoc::of(snap),
        }
    }
}

impl SchedulerDoc {
    /// The scheduler's snapshot under the naming rule (also in `pacer sim
    /// --json`'s reports).
    pub fn of(snap: &SchedSnapshot) -> SchedulerDoc {
        SchedulerDoc {
            now_ns: snap.now,
            entities: snap.entities.iter().map(EntityDoc::of).collect(),
            cpus: snap.cpus.iter().map(CpuDoc::of).collect(),
            cores: snap.cores.iter().map(CoreDoc::of).collect(),
        }
    }
}
