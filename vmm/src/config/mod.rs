//! The `pacer` configuration file (TOML).
//!
//! ```toml
//! [host]
//! cpus = "0-1"            # or [0, 1]; default: all online CPUs
//! policy = "haiku"        # haiku | global-rr | pinned | eevdf | host
//! mode = "low-latency"    # low-latency | power-saving
//! smt_isolation = false   # SMT siblings only co-run one VM (haiku)
//! dispatch = "threads"    # threads | workers | kvm-irqchip: how the engine runs vCPUs
//! halt_poll_us = 200      # idle CPUs poll this long for a wake-up (0: off)
//! kvm_poll_us = 5000      # kvm-irqchip: how often KVM's halt statistics are read
//! log_limit_kib = 65536   # each VM's console and results logs hold at most this
//! result_records_per_s = 10000   # guest markers/records admitted per second
//! log_dir = "logs"        # relative to this file; default "pacer-logs"
//!
//! [host.tunables]         # vcpu_sched tunables, e.g. bursty_load = 375
//!
//! [[vm]]
//! name = "a"              # unique, [A-Za-z0-9_-]
//! vcpus = 1               # 1..=254
//! memory_mib = 64         # >= 2
//! kernel = "../guests/out/bench-guest.elf"
//! initrd = "initrd.img"   # optional (bench, linux); `initramfs = "..."` is the same key
//! cmdline = "foo=1"       # optional (linux: appended to Pacer's `console=ttyS0 reboot=k`)
//! guest = "bench"         # bench | multiboot | linux; default: from the kernel's format
//! modules = ["env.txt", { path = "m.bin", cmdline = "x=1" }]   # multiboot only
//! cpuid = { x2apic = false }                                 # optional CPUID overrides: x2apic, tsc_deadline, cx16
//! cpus = "0"              # core set, within [host] cpus; default: all of them
//! class = "timeshare"     # timeshare | realtime
//! priority = 10           # timeshare 1..=99 (default 10); realtime 100..=120 (default 100)
//! weight = 100            # share among contending VMs, 1..=10000 (haiku)
//! cap = 30                # at most this % of one CPU for the VM, split over its vCPUs (haiku)
//! reservation = 50        # at least this % of one CPU when it asks (haiku; all VMs' fit the host)
//! coschedule = "off"      # off | relaxed: co-start parked siblings, directed yields, spin watch, sibling sharing | turns: and sibling turns (haiku); unset: relaxed for an SMP VM
//! latency_bound_us = 600  # wake-to-run bound while it has budget (haiku; admitted at load)
//! bound_budget = 15       # the budget for it, % of one CPU split over its vCPUs
//! workload = { name = "cpu", duration_ms = 500, report_ms = 100 }   # bench only
//! console = "stdout"      # log | stdout | both
//! timeout_s = 30          # runaway guard
//! ```
//!
//! Parsing is two-stage: serde (with `deny_unknown_fields`) into raw structs
//! that keep the spans of the fields that semantic checks need, then
//! validation, which also checks what the config names against the files
//! and the host (`crate::kernel_image`, [`guest_params`], `crate::input`,
//! [`host_resources`]). Every error is one line `line:col: field.path:
//! expected X, found Y`; serde's own errors are put in those words by
//! [`errors`]. The command line's `--policy`, `--mode`, `--dispatch` and
//! `--log-dir` enter as one [`Overrides`] value, merged as `[host]` is
//! checked: a config is validated once, as it will run.
//!
//! One file per concern: `raw` (the serde structs), `load` (reading, the
//! order of the checks, [`HostInfo`]), `check` (the checker every check
//! reports through), `host` (`[host]`: CPUs, policy, mode, dispatch,
//! halt polling, log limits, tunables, log directory), `vm` (a `[[vm]]`'s
//! name, size, console, timeout), `guest` (kernel, guest kind, modules,
//! initrd, command line, workload), `sched` (core set, class, priority,
//! shares and what the policy honours), `limits` (defaults and ranges),
//! `diagnostic` (errors and their one-line form), [`view`] (the resolved
//! config as the documents carry it). The rules the config shares with
//! the control API and the bench matrix: [`sched_rules`] (CPU sets,
//! classes, priorities, shares), [`path_rules`] (path shapes),
//! [`guest_params`] (the bench guest's workload parameters),
//! [`host_resources`] (memory, vCPU, file and thread limits), [`errors`]
//! (serde's errors in the user's words). The layers that build
//! and run a VM (`vm`, `boot`) never see these types: the runner hands
//! them a [`crate::vm::VmSpec`] made by [`VmConfig::spec`].

pub mod bounds;
mod check;
mod diagnostic;
pub mod errors;
mod guest;
pub mod guest_params;
mod host;
pub mod host_resources;
mod limits;
mod load;
pub mod path_rules;
mod raw;
mod sched;
pub mod sched_rules;
#[cfg(test)]
mod tests;
pub mod view;
mod vm;

pub use diagnostic::{line_col, ConfigError, Diagnostic};
pub use host::HostConfig;
pub use limits::{
    DEFAULT_HALT_POLL_US, DEFAULT_KVM_POLL_US, KVM_POLL_US, LOG_LIMIT_KIB, MAX_HALT_POLL_US,
    MAX_MEMORY_MIB, MAX_VCPUS, MIN_MEMORY_MIB, RECORDS_PER_S,
};
pub use load::HostInfo;
pub use raw::Console;
pub use vm::VmConfig;

use crate::config::sched_rules::class_name;
use crate::policy::Policy;
use std::fmt;
use std::path::PathBuf;

/// What the command line sets instead of the file (`--policy P[:MODE]`,
/// `--mode`, `--dispatch`, `--log-dir`): one value, merged into `[host]`
/// as it is checked, so the config is validated once, as it will run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--policy NAME`.
    pub policy: Option<Policy>,
    /// `--mode MODE`, or the mode of `--policy NAME:MODE`: refused
    /// ([`ConfigError::ModeWithoutModes`]) under a policy without modes.
    pub mode: Option<vcpu_sched::Mode>,
    /// `--dispatch D`.
    pub dispatch: Option<vcpu_engine::DispatchKind>,
    /// `--log-dir DIR`: relative to the current directory (not to the
    /// file), and checked as writable ([`ConfigError::LogDirOverride`]).
    /// The file's own `log_dir` is still checked.
    pub log_dir: Option<PathBuf>,
}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub path: PathBuf,
    pub host: HostConfig,
    pub vms: Vec<VmConfig>,
}

/// The dispatch of a config that names none: `threads` where the engine
/// must carry out what the host kernel cannot:
/// - hand the CPUs out itself (SMT isolation);
/// - give a VM with `coschedule = "turns"` and more vCPUs than CPUs in its
///   core set its sibling turns: under `ranked` the host kernel carried out
///   a 250 us turn in 1.8 ms at the median, and the barrier VM gained 1.6x
///   where it gained 9.7x under `threads` (docs/measurements/sync.md, 3:1
///   next to hogs on the development machine).
///
/// Else `ranked`. A `relaxed` VM wider than its CPUs shares the CPUs it
/// owns with its queued siblings there (`vcpu_engine`'s sibling sharing):
/// at 3:1 beside hogs its barrier and shootdown did 0.76-1.2x the host
/// kernel's, where `threads` did more for them (1.35x and 1.75x) but cost
/// a wide VM that does not spin (a request server) a quarter of its
/// throughput, every IPI and halt being an exit, and a config cannot tell
/// the two apart. A co-scheduled VM that fits its CPUs (2:1) lost its
/// shootdown under `threads` (0.32x of `ranked`'s round trips).
pub fn default_dispatch(
    smt_isolation: bool,
    tunables: &vcpu_sched::Tunables,
    vms: &[VmConfig],
) -> vcpu_engine::DispatchKind {
    let takes_sibling_turns = |v: &VmConfig| {
        v.coschedule == vcpu_sched::Coschedule::Turns && v.is_wide() && tunables.sibling_turn > 0
    };
    if smt_isolation || vms.iter().any(takes_sibling_turns) {
        vcpu_engine::DispatchKind::Threads
    } else {
        vcpu_engine::DispatchKind::default()
    }
}

impl Config {
    /// Whether a VM names co-scheduling (`vm[].coschedule` relaxed or
    /// turns) and has more vCPUs than CPUs in its core set, which keeps
    /// low latency's slices under `ranked` (`vcpu_engine::effective_tunables`).
    /// A wide VM relaxed by default does not: a request server is one, and
    /// its p99 at 50 % load was 1.3-1.9x with the shorter slices.
    pub fn coscheduled_wide(&self) -> bool {
        self.vms.iter().any(|v| {
            v.coschedule_named && v.coschedule != vcpu_sched::Coschedule::Off && v.is_wide()
        })
    }

    /// Whether the low-latency table runs as configured under every
    /// dispatch: the file named it, or a wide VM co-schedules
    /// (`vcpu_engine::EngineConfig::keeps_low_latency`, the engine's side).
    pub fn keeps_low_latency(&self) -> bool {
        self.host.low_latency_named || self.coscheduled_wide()
    }

    /// The default dispatch, `ranked`, needs real-time priorities: where
    /// this process may not have them, a config that did not ask for it
    /// runs with `threads` instead. Returns the warning that says so (None:
    /// the config stays as it is; a dispatch asked for is kept, and the
    /// engine then refuses it with the reason).
    pub fn fall_back_from_ranked(&mut self) -> Option<String> {
        if self.host.policy == Policy::Host
            || !self.host.dispatch.ranked()
            || self.host.dispatch_explicit
        {
            return None;
        }
        let why = vcpu_engine::ranked_dispatch_allowed().err()?;
        self.host.dispatch = vcpu_engine::DispatchKind::Threads;
        Some(format!(
            "the default dispatch, ranked, needs real-time priorities ({why}): running with dispatch = \"threads\" (give pacer CAP_SYS_NICE, or set host.dispatch)"
        ))
    }
}

/// The VM's scheduling keys that differ from their defaults, as the file
/// writes them (`, weight 200, cap 150 %, ...`; empty when none do).
fn sched_keys(v: &VmConfig) -> String {
    use sched_rules::vm_percent;
    let (s, d) = (&v.shares, sched_rules::Shares::default());
    let mut out = String::new();
    if s.weight != d.weight {
        out += &format!(", weight {}", s.weight);
    }
    if let Some(cap) = s.cap {
        out += &format!(", cap {} %", vm_percent(cap, v.vcpus));
    }
    if s.reservation != 0 {
        out += &format!(", reservation {} %", vm_percent(s.reservation, v.vcpus));
    }
    if let Some(b) = s.latency_bound {
        out += &format!(
            ", latency bound {} us (budget {} %)",
            b.bound / 1000,
            vm_percent(b.budget_permille, v.vcpus)
        );
    }
    if v.coschedule != vcpu_sched::Coschedule::default_for(v.vcpus) {
        out += &format!(", coschedule {}", v.coschedule);
    }
    out
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "host: cpus {} policy {} mode {} dispatch {}{} log_dir {}",
            self.host.cpus.to_list(),
            self.host.policy,
            self.host.mode,
            self.host.dispatch,
            if self.host.smt_isolation {
                " smt_isolation"
            } else {
                ""
            },
            self.host.log_dir.display()
        )?;
        for v in &self.vms {
            writeln!(
                f,
                "vm {}: {} guest, {} vCPU(s), {} MiB, cpus {}, {} priority {}{}, kernel {}, cmdline {:?}{}{}",
                v.name,
                v.guest.name(),
                v.vcpus,
                v.memory_mib,
                v.cpus.to_list(),
                class_name(v.class),
                v.priority,
                sched_keys(v),
                v.kernel.display(),
                v.cmdline,
                v.modules
                    .iter()
                    .map(|m| format!(", module {:?}", m.string()))
                    .collect::<String>(),
                v.timeout
                    .map(|t| format!(", timeout {:.1} s", t.as_secs_f64()))
                    .unwrap_or_default()
            )?;
        }
        Ok(())
    }
}
