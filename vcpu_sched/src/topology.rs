//! Host CPU topology: package -> last-level cache -> core -> logical CPU.
//!
//! Built from sysfs or from a synthetic spec (tests, simulation). Every id is
//! a dense index into the vectors of [`Topology`].
//!
//! Synthetic spec syntax: `PxCxT` (packages x cores per package x threads
//! per core, one LLC per package) or `PxLxCxT` (packages x LLCs per package
//! x cores per LLC x threads per core). Examples: `1x2x1` (this machine),
//! `2x22x2`, `1x16x8`, `1x8x8x2` (8 LLCs of 8 cores x 2 threads), `4x64x4`.

use crate::{CpuId, CpuSet, SchedError};
use serde::{Deserialize, Serialize};

/// Dense index of a core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CoreId(pub u32);
/// Dense index of a last-level cache domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LlcId(pub u32);
/// Dense index of a package (socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PackageId(pub u32);

/// How far apart two logical CPUs are, in the cache-locality order used for
/// placement and for migration statistics (nearest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Distance {
    SameCpu,
    SmtSibling,
    SameLlc,
    SamePackage,
    Remote,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuInfo {
    pub id: CpuId,
    /// The OS's CPU number (sysfs `cpuN`); equal to `id` for synthetic specs.
    pub os_id: u32,
    pub core: CoreId,
    pub llc: LlcId,
    pub package: PackageId,
    /// Position among the SMT siblings of its core (0-based).
    pub smt_index: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoreInfo {
    pub id: CoreId,
    pub cpus: Vec<CpuId>,
    pub llc: LlcId,
    pub package: PackageId,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlcInfo {
    pub id: LlcId,
    pub cores: Vec<CoreId>,
    pub cpus: Vec<CpuId>,
    pub package: PackageId,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageInfo {
    pub id: PackageId,
    pub llcs: Vec<LlcId>,
    pub cores: Vec<CoreId>,
    pub cpus: Vec<CpuId>,
}

/// The whole topology. Invariants (checked by the constructors): every CPU
/// belongs to exactly one core, every core to one LLC, every LLC to one
/// package; ids are dense and equal to their vector index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub cpus: Vec<CpuInfo>,
    pub cores: Vec<CoreInfo>,
    pub llcs: Vec<LlcInfo>,
    pub packages: Vec<PackageInfo>,
}

// TEMP(skeleton): bodies are filled in by the topology work.
impl Topology {
    /// Parse a synthetic spec (see the module docs).
    pub fn from_spec(spec: &str) -> Result<Topology, SchedError> {
        todo!("{spec}")
    }
    /// Discover the host topology from /sys/devices/system/cpu.
    pub fn from_sysfs() -> Result<Topology, SchedError> {
        Self::from_sysfs_root(std::path::Path::new("/sys/devices/system/cpu"))
    }
    /// Discover from a sysfs-like tree rooted at `root` (tests use fake trees).
    pub fn from_sysfs_root(root: &std::path::Path) -> Result<Topology, SchedError> {
        todo!("{root:?}")
    }
    pub fn num_cpus(&self) -> usize {
        self.cpus.len()
    }
    pub fn cpu(&self, id: CpuId) -> Option<&CpuInfo> {
        self.cpus.get(id.0 as usize)
    }
    /// Cache-locality distance between two CPUs.
    pub fn distance(&self, a: CpuId, b: CpuId) -> Distance {
        todo!("{a:?}{b:?}")
    }
    pub fn all_cpus(&self) -> CpuSet {
        CpuSet::first_n(self.cpus.len() as u32)
    }
    /// The dense id of the CPU the OS calls `os_id`.
    pub fn cpu_by_os_id(&self, os_id: u32) -> Option<CpuId> {
        self.cpus.iter().find(|c| c.os_id == os_id).map(|c| c.id)
    }
    /// The sub-topology made of the given OS CPU numbers (Pacer's `[host] cpus`),
    /// re-indexed densely; `os_id` keeps the OS number.
    pub fn restrict(&self, os_cpus: &CpuSet) -> Result<Topology, SchedError> {
        todo!("{os_cpus:?}")
    }
    /// A human-readable table (used by `pacer topology`).
    pub fn describe(&self) -> String {
        todo!()
    }
}
