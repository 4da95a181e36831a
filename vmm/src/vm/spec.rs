//! What the VM layer is told about one VM: [`VmSpec`], a plain struct this
//! layer owns. The layer above (the runner, tests) makes it from a
//! validated `[[vm]]` with `config::VmConfig::spec`; nothing under `vm/`
//! or `boot/` reads the config file's types, so the arrows run one way
//! (config -> vm -> boot, never back).

use crate::boot::BootSpec;
use crate::cpuid::CpuidOverrides;
use std::time::Duration;
use vcpu_engine::host_cpus::HostCpuSet;
use vcpu_engine::Shares;
use vcpu_sched::SchedClass;

/// One VM: its name, size, what it boots, its CPUID overrides, how it is
/// scheduled, where its console goes and how long it may run.
#[derive(Debug, Clone, PartialEq)]
pub struct VmSpec {
    /// Names its log files and prefixes its console and log lines.
    pub name: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    /// Kernel, guest kind, initrd, modules, command line.
    pub boot: BootSpec,
    /// CPUID bits switched off or insisted on.
    pub cpuid: CpuidOverrides,
    /// Host CPUs its vCPUs may run on (its core set).
    pub cpus: HostCpuSet,
    pub class: SchedClass,
    pub priority: u8,
    /// Operator shares (weight, cap, reservation), per vCPU.
    pub shares: Shares,
    /// Relaxed co-scheduling of its vCPUs, or none.
    pub coschedule: vcpu_sched::Coschedule,
    pub console: ConsoleTo,
    /// The VM is stopped (status `timeout`) after this long.
    pub timeout: Option<Duration>,
}

/// Where a VM's serial console goes: `<log_dir>/<vm>.console.log`, and/or
/// standard output (each line prefixed `[vm] `).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsoleTo {
    pub log: bool,
    pub stdout: bool,
}
