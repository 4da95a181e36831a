//! Pacer's scheduled vCPU engine: `vcpu_sched` decides which vCPU runs on
//! which host CPU. (Being built: the policy names and the CPU map live
//! here; dispatch, timers and Pacer's interrupt controller follow.)

pub mod cpu_map;
pub mod policy;

use serde::{Deserialize, Serialize};
use std::fmt;

/// How the engine puts a dispatched vCPU on its host CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DispatchKind {
    /// One thread per vCPU, parked until the scheduler dispatches it, then
    /// bound to its CPU; the CPU is handed from thread to thread.
    #[default]
    Threads,
    /// One worker thread per host CPU runs whichever vCPU it is handed.
    Workers,
}

impl DispatchKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DispatchKind::Threads => "threads",
            DispatchKind::Workers => "workers",
        }
    }
}

impl fmt::Display for DispatchKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
