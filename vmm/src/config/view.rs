//! The resolved config as the documents carry it: every key of the config
//! file with the value the run used (defaults filled in, paths resolved,
//! the policy and mode after `--policy`), under the file's own key names,
//! so a result can be re-run and read without the file.

use crate::config::{Config, HostConfig, VmConfig};
use crate::policy::Policy;
use serde::Serialize;
use std::path::PathBuf;

/// `[host]` as the run used it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostView {
    pub cpus: String,
    pub policy: String,
    /// Null under `host` (the host kernel has no Haiku mode).
    pub mode: Option<String>,
    pub smt_isolation: bool,
    /// Null under `host` (no engine).
    pub dispatch: Option<String>,
    pub halt_poll_us: u64,
    /// Under `kvm-irqchip` dispatch: how often KVM's halt statistics are
    /// sampled; null otherwise.
    pub kvm_poll_us: Option<u64>,
    /// What each VM may write into its logs.
    pub log_limit_kib: u64,
    pub result_records_per_s: u32,
    pub log_dir: PathBuf,
    /// Every `vcpu_sched` tunable, its value in the run.
    pub tunables: vcpu_sched::Tunables,
}

/// A multiboot module.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModuleView {
    pub path: PathBuf,
    pub cmdline: String,
}

/// One `[[vm]]` as the run used it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmView {
    pub name: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub kernel: PathBuf,
    pub guest: crate::boot::GuestKind,
    pub initrd: Option<PathBuf>,
    /// The guest's command line as built (a bench guest's has its
    /// workload's words; Pacer adds `tsc_khz=` and `vcpus=` at boot).
    pub cmdline: String,
    pub modules: Vec<ModuleView>,
    /// CPUID overrides: null where the config leaves a bit alone.
    pub cpuid: CpuidView,
    pub cpus: String,
    pub class: vcpu_sched::SchedClass,
    pub priority: u8,
    pub console: crate::config::Console,
    /// Null: no time limit.
    pub timeout_s: Option<f64>,
}

/// The `cpuid` overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CpuidView {
    pub x2apic: Option<bool>,
    pub tsc_deadline: Option<bool>,
    pub cx16: Option<bool>,
}

/// A whole config as the run used it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigView {
    /// The file it was read from (empty for a bench cell's, built in memory).
    pub file: Option<PathBuf>,
    pub host: HostView,
    pub vm: Vec<VmView>,
}

fn host(h: &HostConfig) -> HostView {
    let scheduled = h.policy != Policy::Host;
    HostView {
        cpus: h.cpus.to_list(),
        policy: h.policy.to_string(),
        mode: scheduled.then(|| h.mode.as_str().to_string()),
        smt_isolation: h.smt_isolation,
        dispatch: scheduled.then(|| h.dispatch.as_str().to_string()),
        halt_poll_us: h.halt_poll_us,
        kvm_poll_us: (scheduled && h.dispatch.in_kernel_lapic()).then_some(h.kvm_poll_us),
        log_limit_kib: h.log_limits.log_bytes >> 10,
        result_records_per_s: h.log_limits.records_per_s,
        log_dir: h.log_dir.clone(),
        tunables: h.tunables.clone(),
    }
}

fn vm(v: &VmConfig) -> VmView {
    VmView {
        name: v.name.clone(),
        vcpus: v.vcpus,
        memory_mib: v.memory_mib,
        kernel: v.kernel.clone(),
        guest: v.guest,
        initrd: v.initrd.clone(),
        cmdline: v.cmdline.clone(),
        modules: v
            .modules
            .iter()
            .map(|m| ModuleView {
                path: m.path.clone(),
                cmdline: m.cmdline.clone(),
            })
            .collect(),
        cpuid: CpuidView {
            x2apic: v.cpuid.x2apic,
            tsc_deadline: v.cpuid.tsc_deadline,
            cx16: v.cpuid.cx16,
        },
        cpus: v.cpus.to_list(),
        class: v.class,
        priority: v.priority,
        console: v.console,
        timeout_s: v.timeout.map(|t| t.as_secs_f64()),
    }
}

impl ConfigView {
    pub fn of(c: &Config) -> ConfigView {
        ConfigView {
            file: (!c.path.as_os_str().is_empty()).then(|| c.path.clone()),
            host: host(&c.host),
            vm: c.vms.iter().map(vm).collect(),
        }
    }

    /// The policy and mode the run used ("haiku", "low-latency").
    pub fn policy_mode(&self) -> (String, Option<String>) {
        (self.host.policy.clone(), self.host.mode.clone())
    }
}
