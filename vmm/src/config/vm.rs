//! One `[[vm]]` table: its name, size and console, and the validated
//! [`VmConfig`]; what it boots is checked in `guest`, how it is scheduled
//! in `sched`.

use super::check::Checker;
use super::guest;
use super::host::Host;
use super::limits::{MAX_MEMORY_MIB, MAX_VCPUS, MIN_MEMORY_MIB};
use super::raw::{Console, RawNumber, RawVm};
use super::sched::{self, Reservations};
use crate::boot::multiboot::Module;
use crate::boot::{BootSpec, GuestKind};
use crate::cpuid::CpuidOverrides;
use crate::text::quoted;
use crate::vm::{ConsoleTo, VmSpec};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use vcpu_engine::host_cpus::HostCpuSet;
use vcpu_sched::SchedClass;

#[derive(Debug, Clone, PartialEq)]
pub struct VmConfig {
    pub name: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub kernel: PathBuf,
    /// How the kernel boots (from `guest`, or the kernel's format).
    pub guest: GuestKind,
    pub initrd: Option<PathBuf>,
    /// Bench guest: the config's `cmdline` followed by the workload
    /// arguments (the VMM appends `tsc_khz=` and `vcpus=` at boot). Other
    /// guests: the config's `cmdline`, unchanged (a Linux guest's goes after
    /// what Pacer's platform needs, `boot::linux::PLATFORM_CMDLINE`).
    pub cmdline: String,
    /// Multiboot modules, in order.
    pub modules: Vec<Module>,
    /// CPUID bits switched off or insisted on.
    pub cpuid: CpuidOverrides,
    /// Host CPUs the VM's vCPUs may run on (its core set).
    pub cpus: HostCpuSet,
    pub class: SchedClass,
    pub priority: u8,
    /// Operator shares (`vcpu_sched::shares`), per vCPU.
    pub shares: crate::config::sched_rules::Shares,
    /// Relaxed co-scheduling of its vCPUs, or none (`vcpu_sched::cosched`).
    pub coschedule: vcpu_sched::Coschedule,
    /// The file named `coschedule` (not the default's): the operator says
    /// the VM's vCPUs wait on each other ([`super::Config::coscheduled_wide`]).
    pub coschedule_named: bool,
    pub console: Console,
    pub timeout: Option<Duration>,
}

impl VmConfig {
    /// More vCPUs than CPUs in its core set: its vCPUs cannot all run at
    /// once.
    pub fn is_wide(&self) -> bool {
        self.vcpus as usize > self.cpus.len()
    }

    /// What the VM layer is told about this VM (it reads no config types).
    pub fn spec(&self) -> VmSpec {
        VmSpec {
            name: self.name.clone(),
            vcpus: self.vcpus,
            memory_mib: self.memory_mib,
            boot: BootSpec {
                guest: self.guest,
                kernel: self.kernel.clone(),
                initrd: self.initrd.clone(),
                cmdline: self.cmdline.clone(),
                modules: self.modules.clone(),
            },
            cpuid: self.cpuid,
            cpus: self.cpus.clone(),
            class: self.class,
            priority: self.priority,
            shares: self.shares,
            coschedule: self.coschedule,
            console: ConsoleTo {
                log: self.console.to_log(),
                stdout: self.console.to_stdout(),
            },
            timeout: self.timeout,
        }
    }
}

/// Check `vm[i]` (`names`: the names of the VMs before it); paths are
/// resolved against `base`.
pub(super) fn check(
    c: &mut Checker<'_>,
    i: usize,
    v: &RawVm,
    base: &Path,
    host: &Host,
    names: &mut HashMap<String, usize>,
    reservations: &mut Reservations,
) -> VmConfig {
    let f = |name: &str| format!("vm[{i}].{name}");
    let name = v.name.get_ref().clone();
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
    {
        c.err(
            v.name.span(),
            f("name"),
            format!(
                "expected a name of 1-64 characters of A-Z a-z 0-9 _ -, found {}",
                quoted(&name)
            ),
        );
    }
    if let Some(prev) = names.insert(name.clone(), i) {
        c.err(
            v.name.span(),
            f("name"),
            format!(
                "expected a name no other VM has, found {} (duplicate of vm[{prev}])",
                quoted(&name)
            ),
        );
    }
    let vcpus = *v.vcpus.get_ref();
    if !(1..=MAX_VCPUS as i64).contains(&vcpus) {
        c.err(
            v.vcpus.span(),
            f("vcpus"),
            format!("expected an integer from 1 to {MAX_VCPUS}, found {vcpus}"),
        );
    }
    let mem = *v.memory_mib.get_ref();
    if !(MIN_MEMORY_MIB as i64..=MAX_MEMORY_MIB as i64).contains(&mem) {
        c.err(
            v.memory_mib.span(),
            f("memory_mib"),
            format!("expected an integer number of MiB from {MIN_MEMORY_MIB} to {MAX_MEMORY_MIB}, found {mem}"),
        );
    }
    // Checked above; clamped so that a refused value still builds a config.
    let vcpus_ok = vcpus.clamp(1, MAX_VCPUS as i64) as u32;
    let boot = guest::boot_files(c, i, v, base);
    let sched = sched::check(c, i, v, host, reservations);
    let coschedule = match &v.coschedule {
        Some(s) => s.get_ref().parse().unwrap_or_else(|_| {
            c.err(
                s.span(),
                f("coschedule"),
                format!(
                    "expected \"off\", \"relaxed\" or \"turns\", found {}",
                    quoted(s.get_ref())
                ),
            );
            vcpu_sched::Coschedule::default()
        }),
        None => vcpu_sched::Coschedule::default_for(vcpus_ok),
    };
    let cmdline = guest::cmdline(c, i, v, boot.guest);
    let timeout = match &v.timeout_s {
        Some(t) => {
            let secs = match t.get_ref() {
                RawNumber::Int(i) => *i as f64,
                RawNumber::Float(x) => *x,
            };
            // Below 1 ms the timeout is gone before the VM boots.
            if !(1e-3..=1e7).contains(&secs) {
                c.err(
                    t.span(),
                    f("timeout_s"),
                    format!("expected a number of seconds from 0.001 to 10000000, found {secs}"),
                );
                None
            } else {
                Some(Duration::from_secs_f64(secs))
            }
        }
        None => None,
    };
    VmConfig {
        name,
        vcpus: vcpus_ok,
        memory_mib: mem.clamp(MIN_MEMORY_MIB as i64, MAX_MEMORY_MIB as i64) as u64,
        kernel: boot.kernel.unwrap_or_default(),
        guest: boot.guest.unwrap_or(GuestKind::Bench),
        initrd: boot.initrd,
        cmdline,
        modules: boot.modules,
        cpuid: v.cpuid.unwrap_or_default(),
        cpus: sched.cpus,
        class: sched.class,
        priority: sched.priority,
        shares: sched.shares,
        coschedule,
        coschedule_named: v.coschedule.is_some(),
        console: v.console.unwrap_or_default(),
        timeout,
    }
}
