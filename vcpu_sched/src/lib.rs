//! # vcpu_sched
//!
//! A vCPU scheduler for virtual machine monitors, after the Haiku kernel
//! scheduler (2014), with what Linux O(1), FreeBSD ULE, BFS and Linux's
//! bounded idle search taught. It has no KVM dependency and no threads of
//! its own: the VMM reports events (wake, block, quantum end, kick) with the
//! current time and gets back decisions (which CPU, kick or not, which
//! entity next, for how long). See [`policy`] for the event protocol and
//! `examples/embed.rs` for a VMM vCPU loop built on it.

pub mod bound;
pub mod cosched;
pub mod cpuset;
mod entity;
mod load;
mod mode;
pub mod monitor;
mod placement;
pub mod policy;
pub mod profiler;
mod quantum;
mod run_queue;
mod share;
pub mod shares;
#[cfg(feature = "sim")]
pub mod sim;
pub mod stats;
#[cfg(test)]
mod testkit;
pub mod topology;
pub mod tunables;
mod types;
mod validate;

pub use cosched::Coschedule;
pub use cpuset::{format_cpu_list, parse_cpu_list, CpuSet, CpuSetError};
pub use monitor::{Monitor, Violations};
pub use policy::{build, PolicyKind, SchedConfig, VcpuScheduler};
pub use stats::{
    CpuStats, EntityStats, LatencyHistogram, LatencySummary, MigrationCounts, SchedSnapshot,
};
pub use topology::{CoreId, Distance, LlcId, PackageId, Topology};
pub use tunables::{Mode, Tunables};
pub use types::{
    CpuId, Dispatch, EntityId, EntitySpec, Nanos, QuantumCut, SchedClass, SchedError, StopReason,
    VmId, WakeDecision,
};

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
