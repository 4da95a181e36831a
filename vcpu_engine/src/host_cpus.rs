//! Host CPU numbers as the operating system counts them (`taskset`,
//! `/sys/devices/system/cpu/cpuN`), kept apart from the scheduler's
//! [`vcpu_sched::CpuId`], which is a dense index into the topology Pacer
//! schedules on. The one mapping between the two is [`crate::CpuMap`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use vcpu_sched::{format_cpu_list, parse_cpu_list, CpuSetError};

/// An OS CPU number (`/sys/devices/system/cpu/cpuN`'s N).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HostCpu(pub u32);

impl fmt::Display for HostCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A set of OS CPU numbers (`[host] cpus`, a VM's core set).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct HostCpuSet(BTreeSet<HostCpu>);

impl HostCpuSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parse the Linux list syntax ("0-3,8").
    pub fn parse_list(input: &str) -> Result<HostCpuSet, CpuSetError> {
        Ok(parse_cpu_list(input)?.into_iter().map(HostCpu).collect())
    }

    /// Format in the Linux list syntax.
    pub fn to_list(&self) -> String {
        format_cpu_list(self.0.iter().map(|c| c.0))
    }

    /// Add `cpu`.
    pub fn insert(&mut self, cpu: HostCpu) {
        self.0.insert(cpu);
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: HostCpu) -> bool {
        self.0.contains(&cpu)
    }

    /// How many CPUs the set holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No CPU.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The CPUs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = HostCpu> + '_ {
        self.0.iter().copied()
    }

    /// Every member is also in `other` (a VM's core set within the
    /// engine's CPUs).
    pub fn is_subset(&self, other: &HostCpuSet) -> bool {
        self.0.is_subset(&other.0)
    }

    /// The members not in `other`.
    pub fn difference(&self, other: &HostCpuSet) -> HostCpuSet {
        self.0.difference(&other.0).copied().collect()
    }

    /// The members also in `other`.
    pub fn intersection(&self, other: &HostCpuSet) -> HostCpuSet {
        self.0.intersection(&other.0).copied().collect()
    }
}

impl FromIterator<HostCpu> for HostCpuSet {
    fn from_iter<I: IntoIterator<Item = HostCpu>>(iter: I) -> Self {
        HostCpuSet(iter.into_iter().collect())
    }
}

impl fmt::Display for HostCpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_list())
    }
}

impl Serialize for HostCpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_list())
    }
}

/// Bind the calling thread to `cpus`.
pub(crate) fn pin_current_thread(cpus: &HostCpuSet) -> std::io::Result<()> {
    pin_thread(0, cpus)
}

impl HostCpuSet {
    /// The set as the kernel's affinity mask (CPUs at or above
    /// CPU_SETSIZE are left out).
    pub fn to_cpu_set(&self) -> libc::cpu_set_t {
        // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for c in self.iter() {
            if (c.0 as usize) < libc::CPU_SETSIZE as usize {
                // SAFETY: the index is below CPU_SETSIZE, checked above.
                unsafe { libc::CPU_SET(c.0 as usize, &mut set) };
            }
        }
        set
    }
}

/// Bind thread `tid` of this process (0: the calling thread) to `cpus`.
pub(crate) fn pin_thread(tid: libc::pid_t, cpus: &HostCpuSet) -> std::io::Result<()> {
    let set = cpus.to_cpu_set();
    // SAFETY: `set` is a valid cpu_set_t and its size is passed; `tid` is 0
    // or a thread of this process (the kernel checks it).
    let r = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The host's online CPUs (`/sys/devices/system/cpu/online`): the usual
/// set to build a [`crate::CpuMap`] over. The error names the file and
/// what was wrong with it.
pub fn online_cpus() -> Result<HostCpuSet, OnlineCpusError> {
    let text = std::fs::read_to_string(ONLINE).map_err(OnlineCpusError::Read)?;
    HostCpuSet::parse_list(text.trim()).map_err(OnlineCpusError::Parse)
}

/// Where the kernel lists the online CPUs.
const ONLINE: &str = "/sys/devices/system/cpu/online";

/// Why [`online_cpus`] could not tell.
#[derive(Debug, thiserror::Error)]
pub enum OnlineCpusError {
    /// The file could not be read.
    #[error("{ONLINE}: {0}")]
    Read(std::io::Error),
    /// It holds no CPU list.
    #[error("{ONLINE}: {0}")]
    Parse(vcpu_sched::CpuSetError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_round_trip() {
        let s = HostCpuSet::parse_list("8, 0-3,2").unwrap();
        assert_eq!(s.to_list(), "0-3,8");
        assert_eq!(s.len(), 5);
        assert!(s.contains(HostCpu(8)) && !s.contains(HostCpu(4)));
        let sub = HostCpuSet::parse_list("1,8").unwrap();
        assert!(sub.is_subset(&s));
        assert_eq!(s.difference(&sub).to_list(), "0,2-3");
        assert!(HostCpuSet::parse_list("3-1").is_err());
        assert!(HostCpuSet::parse_list("").unwrap().is_empty());
    }
}
