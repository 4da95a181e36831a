//! The `[host]` table: the CPUs Pacer may use, the policy and its mode,
//! SMT isolation, the engine's dispatch and halt polling, what each VM
//! may write into its logs, the scheduler tunables, the log directory.

use super::check::Checker;
use super::limits::{
    DEFAULT_HALT_POLL_US, DEFAULT_KVM_POLL_US, KVM_POLL_US, LOG_LIMIT_KIB, MAX_HALT_POLL_US,
    RECORDS_PER_S,
};
use super::raw::RawHost;
use super::{HostInfo, Overrides};
use crate::policy::Policy;
use std::path::{Path, PathBuf};
use toml::Spanned;
use vcpu_engine::host_cpus::HostCpuSet;
use vcpu_engine::DispatchKind;
use vcpu_sched::{Mode, Tunables};

/// The validated `[host]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    /// Host CPUs Pacer may use.
    pub cpus: HostCpuSet,
    pub policy: Policy,
    pub mode: Mode,
    pub smt_isolation: bool,
    pub dispatch: DispatchKind,
    /// The file or the command line named the dispatch (the default,
    /// `ranked`, falls back to `threads` where real-time priorities are
    /// not allowed; a dispatch asked for does not).
    pub dispatch_explicit: bool,
    /// Longest halt-polling window of the engine, us (0: off).
    pub halt_poll_us: u64,
    /// How often the `kvm-irqchip` dispatch samples KVM's halt
    /// statistics, us.
    pub kvm_poll_us: u64,
    /// What each VM may write into its logs (`log_limit_kib`,
    /// `result_records_per_s`).
    pub log_limits: crate::results::LogLimits,
    pub tunables: Tunables,
    /// The file named `tunables.low_latency` (even with the default's
    /// values): the table runs as given under every dispatch
    /// (`vcpu_engine::effective_tunables`).
    pub low_latency_named: bool,
    /// Absolute or relative to the current directory (already resolved
    /// against the config file's directory).
    pub log_dir: PathBuf,
}

/// The checked `[host]` table, and where its policy came from (what a
/// refusal of the policy names: `host.policy`, `--policy`, or the
/// default).
pub(super) struct Host {
    pub(super) config: HostConfig,
    pub(super) policy_origin: String,
}

/// Check `[host]` against the host's facts; relative paths are resolved
/// against `base`, the config file's directory.
pub(super) fn check(
    c: &mut Checker<'_>,
    rh: RawHost,
    host: &HostInfo,
    overrides: &Overrides,
    base: &Path,
) -> Host {
    let host_cpus = match &rh.cpus {
        Some(s) => {
            let parsed = c.cpus(s, "host.cpus");
            let set = parsed.clone().unwrap_or_default();
            let outside = set.difference(&host.online);
            if parsed.is_none() {
                // Reported by `cpus`.
            } else if !outside.is_empty() {
                c.err(
                    s.span(),
                    "host.cpus",
                    format!(
                        "expected CPUs online on this host ({}), found CPUs {} that are not online",
                        host.online.to_list(),
                        outside.to_list()
                    ),
                );
            } else if set.is_empty() {
                c.err(
                    s.span(),
                    "host.cpus",
                    "expected at least one CPU, found an empty CPU set",
                );
            }
            set
        }
        None => host.online.clone(),
    };
    // Where a policy refusal points: the `policy` field, or the top of
    // the file when `--policy` chose it.
    let (policy, policy_origin) = match (overrides.policy, &rh.policy) {
        (Some(p), _) => (p, "--policy".to_string()),
        (None, Some(p)) => (*p.get_ref(), "host.policy".to_string()),
        (None, None) => (Policy::default(), "the default policy".to_string()),
    };
    let smt_isolation = rh.smt_isolation.as_ref().is_some_and(|s| *s.get_ref());
    let halt_poll_us = match &rh.halt_poll_us {
        Some(h) if !(0..=MAX_HALT_POLL_US).contains(h.get_ref()) => {
            c.err(
                h.span(),
                "host.halt_poll_us",
                format!(
                    "expected an integer number of microseconds from 0 to {MAX_HALT_POLL_US}, found {}",
                    h.get_ref()
                ),
            );
            0
        }
        Some(h) => *h.get_ref() as u64,
        None => DEFAULT_HALT_POLL_US,
    };
    let mut int_in = |v: &Option<Spanned<i64>>, key: &str, (min, max): (i64, i64), unit: &str| {
        let v = v.as_ref()?;
        if (min..=max).contains(v.get_ref()) {
            return Some(*v.get_ref() as u64);
        }
        c.err(
            v.span(),
            key,
            format!(
                "expected an integer number of {unit} from {min} to {max}, found {}",
                v.get_ref()
            ),
        );
        None
    };
    let kvm_poll_us = int_in(
        &rh.kvm_poll_us,
        "host.kvm_poll_us",
        KVM_POLL_US,
        "microseconds",
    )
    .unwrap_or(DEFAULT_KVM_POLL_US);
    let log_limits = crate::results::LogLimits {
        log_bytes: int_in(
            &rh.log_limit_kib,
            "host.log_limit_kib",
            LOG_LIMIT_KIB,
            "KiB",
        )
        .unwrap_or(crate::results::DEFAULT_LOG_LIMIT_KIB)
            << 10,
        records_per_s: int_in(
            &rh.result_records_per_s,
            "host.result_records_per_s",
            RECORDS_PER_S,
            "records per second",
        )
        .map_or(crate::results::DEFAULT_RECORDS_PER_S, |v| v as u32),
    };
    // SMT isolation needs the engine to hand the CPUs out itself: its
    // default is then the threads dispatch.
    let dispatch = match overrides.dispatch.or(rh.dispatch) {
        Some(d) => d,
        None if smt_isolation => DispatchKind::Threads,
        None => DispatchKind::default(),
    };
    if let Some(s) = &rh.smt_isolation {
        if *s.get_ref() && dispatch.ranked() {
            c.err(
                s.span(),
                "host.smt_isolation",
                "cannot be kept by dispatch \"ranked\" (a halted vCPU KVM wakes may run beside another VM's); use dispatch = \"threads\" or leave dispatch out",
            );
        }
        if *s.get_ref() && !policy.honours_smt_isolation() {
            c.err(
                s.span(),
                "host.smt_isolation",
                format!("policy \"{policy}\" ({policy_origin}) cannot keep SMT siblings to one VM; only \"haiku\" can"),
            );
        }
    }
    let log_dir = match &rh.log_dir {
        Some(d) if d.get_ref().trim().is_empty() => {
            c.err(
                d.span(),
                "host.log_dir",
                "expected a directory path, found an empty string",
            );
            PathBuf::new()
        }
        Some(d) => {
            let p = base.join(d.get_ref());
            if let Err(why) = crate::config::path_rules::dir_to_create(&p) {
                let msg = if why.is_expectation() {
                    why.to_string()
                } else {
                    format!("expected a directory Pacer can create and write, but {why}")
                };
                c.err(d.span(), "host.log_dir", msg);
            } else if let Err(why) = crate::input::check_dir_writable(&p) {
                c.err(
                    d.span(),
                    "host.log_dir",
                    format!("expected a directory Pacer can create and write, but {why}"),
                );
            }
            p
        }
        None => {
            let p = base.join("pacer-logs");
            if let Err(why) = crate::input::check_dir_writable(&p) {
                c.err(
                    0..0,
                    "host.log_dir",
                    format!("expected the default log directory to be writable, but {why}"),
                );
            }
            p
        }
    };
    Host {
        config: HostConfig {
            cpus: host_cpus,
            policy,
            mode: overrides.mode.or(rh.mode).unwrap_or_default(),
            smt_isolation,
            dispatch,
            dispatch_explicit: overrides.dispatch.or(rh.dispatch).is_some(),
            halt_poll_us,
            kvm_poll_us,
            log_limits,
            tunables: rh.tunables.unwrap_or_default(),
            low_latency_named: super::raw::names_low_latency(c.text),
            log_dir: overrides.log_dir.clone().unwrap_or(log_dir),
        },
        policy_origin,
    }
}
