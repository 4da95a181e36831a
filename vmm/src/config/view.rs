//! The resolved config as the documents carry it: every key of the config
//! file with the value the run used (defaults filled in, paths made
//! absolute, the policy, mode and dispatch after the command line and the
//! fallback from `ranked`, the tunables the scheduler was given), under the
//! file's own key names and units, so a result can be re-run and read
//! without the file: [`ConfigView::to_toml`] reads back as the same config.
//!
//! `[host]`'s `mode`, `dispatch` and `kvm_poll_us` are null where nothing
//! read them (under `host`; `kvm_poll_us` without KVM's local APIC), and
//! so left out of the TOML: the file's value, if any, did not take part in
//! the run. `workload` is not a key of its own: it is written as the words
//! it put on `cmdline`, which is where the guest reads it and which reads
//! back alike. `initramfs` is `initrd` under another name.

use crate::config::sched_rules::vm_percent;
use crate::config::{Config, HostConfig, VmConfig};
use crate::policy::Policy;
use serde::Serialize;
use std::path::{Path, PathBuf};

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
    /// Every `vcpu_sched` tunable as the scheduler ran with it (under
    /// `ranked` the default low-latency table is replaced:
    /// `vcpu_engine::effective_tunables`).
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
    pub weight: u32,
    /// The VM's cap, % of one CPU (null: none).
    pub cap: Option<u32>,
    /// The VM's reservation, % of one CPU (0: none).
    pub reservation: u32,
    pub coschedule: vcpu_sched::Coschedule,
    /// Null: no latency bound (nor `bound_budget`).
    pub latency_bound_us: Option<u64>,
    /// The bound's budget, % of one CPU for the VM.
    pub bound_budget: Option<u32>,
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

/// A path as this process reads it, made independent of the current
/// directory (a resolved file lives in the run directory, and relative
/// paths in it would be read against that).
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn host(h: &HostConfig, keep_low_latency: bool) -> HostView {
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
        log_dir: absolute(&h.log_dir),
        // Under `host` no scheduler of Pacer's reads them: as configured.
        tunables: if scheduled {
            vcpu_engine::effective_tunables(h.dispatch, &h.tunables, keep_low_latency)
        } else {
            h.tunables.clone()
        },
    }
}

fn vm(v: &VmConfig) -> VmView {
    // The config holds each vCPU's share; the file, the VM's.
    let shares = &v.shares;
    let bound = shares.latency_bound;
    VmView {
        name: v.name.clone(),
        vcpus: v.vcpus,
        memory_mib: v.memory_mib,
        kernel: absolute(&v.kernel),
        guest: v.guest,
        initrd: v.initrd.as_deref().map(absolute),
        cmdline: v.cmdline.clone(),
        modules: v
            .modules
            .iter()
            .map(|m| ModuleView {
                path: absolute(&m.path),
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
        weight: shares.weight,
        cap: shares.cap.map(|c| vm_percent(c, v.vcpus)),
        reservation: vm_percent(shares.reservation, v.vcpus),
        coschedule: v.coschedule,
        latency_bound_us: bound.map(|b| b.bound / 1000),
        bound_budget: bound.map(|b| vm_percent(b.budget_permille, v.vcpus)),
        console: v.console,
        timeout_s: v.timeout.map(|t| t.as_secs_f64()),
    }
}

impl ConfigView {
    pub fn of(c: &Config) -> ConfigView {
        ConfigView {
            file: (!c.path.as_os_str().is_empty()).then(|| absolute(&c.path)),
            host: host(&c.host, c.keeps_low_latency()),
            vm: c.vms.iter().map(vm).collect(),
        }
    }

    /// The view as a config file (`config.resolved.toml`): `[host]` and
    /// the `[[vm]]`s, which read back as the config the run used. `file`
    /// is no key of a config file: it is left to the caller (a comment).
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        #[derive(Serialize)]
        struct File<'a> {
            host: &'a HostView,
            vm: &'a [VmView],
        }
        toml::to_string(&File {
            host: &self.host,
            vm: &self.vm,
        })
    }

    /// The policy and mode the run used ("haiku", "low-latency").
    pub fn policy_mode(&self) -> (String, Option<String>) {
        (self.host.policy.clone(), self.host.mode.clone())
    }
}
