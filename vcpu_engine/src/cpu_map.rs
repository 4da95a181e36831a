//! The host CPUs the engine schedules on, as `vcpu_sched` sees them, and the
//! one mapping between the OS's CPU numbers ([`HostCpu`]) and the
//! scheduler's dense topology indices ([`CpuId`]).

use crate::host_cpus::{HostCpu, HostCpuSet};
use vcpu_sched::{CpuId, CpuSet, SchedError, Topology};

/// The scheduled CPUs (`[host] cpus`) with their topology.
#[derive(Debug, Clone)]
pub struct CpuMap {
    topology: Topology,
    /// `to_host[cpu.0]` is the OS number of scheduler CPU `cpu`.
    to_host: Vec<HostCpu>,
}

impl CpuMap {
    /// The host's topology (sysfs) restricted to `cpus`.
    pub fn from_host(cpus: &HostCpuSet) -> Result<CpuMap, SchedError> {
        let topology = Topology::from_sysfs()?.restrict(cpus.iter().map(|c| c.0))?;
        Ok(Self::from_topology(topology))
    }

    /// A given topology; its CPUs' `os_id`s are the host CPU numbers.
    pub fn from_topology(topology: Topology) -> CpuMap {
        let to_host = topology.cpus.iter().map(|c| HostCpu(c.os_id)).collect();
        CpuMap { topology, to_host }
    }

    /// The scheduler's view of the CPUs: dense [`CpuId`]s with their
    /// cores, packages and OS numbers.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// How many CPUs the engine schedules.
    pub fn len(&self) -> usize {
        self.to_host.len()
    }

    /// No CPU at all (an engine cannot be built over it).
    pub fn is_empty(&self) -> bool {
        self.to_host.is_empty()
    }

    /// The OS number of scheduler CPU `cpu`.
    pub fn host(&self, cpu: CpuId) -> Option<HostCpu> {
        self.to_host.get(cpu.0 as usize).copied()
    }

    /// The scheduler CPU of OS CPU `host`, if it is scheduled.
    pub fn sched(&self, host: HostCpu) -> Option<CpuId> {
        self.topology.cpu_by_os_id(host.0)
    }

    /// A core set as a scheduler affinity (CPUs outside the map dropped).
    pub fn affinity(&self, cpus: &HostCpuSet) -> CpuSet {
        // Start from every CPU of the map and drop the others: the set
        // holds topology ids only, so it is never refused.
        let mut set = self.topology.all_cpus();
        for (i, host) in self.to_host.iter().enumerate() {
            if !cpus.contains(*host) {
                set.remove(CpuId(i as u32));
            }
        }
        set
    }

    /// Scheduler CPUs back to host CPUs.
    pub fn host_set(&self, cpus: &CpuSet) -> HostCpuSet {
        cpus.iter().filter_map(|c| self.host(c)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_os_numbers_both_ways() {
        // OS CPUs 0,2,4,6 of a 1x4x2 machine: one thread of each core.
        let t = Topology::from_spec("1x4x2")
            .unwrap()
            .restrict([0, 2, 4, 6])
            .unwrap();
        let m = CpuMap::from_topology(t);
        assert_eq!(m.len(), 4);
        assert_eq!(m.host(CpuId(1)), Some(HostCpu(2)));
        assert_eq!(m.sched(HostCpu(6)), Some(CpuId(3)));
        assert_eq!(m.sched(HostCpu(1)), None);
        assert_eq!(m.host(CpuId(9)), None);
        let core_set = HostCpuSet::parse_list("1-4").unwrap();
        let aff = m.affinity(&core_set);
        assert_eq!(aff.to_list(), "1-2");
        assert_eq!(m.host_set(&aff).to_list(), "2,4");
    }
}
