//! The rules a VM's scheduling settings obey, in one place: a core set
//! (a CPU list within `[host] cpus`), a class, a priority within its
//! class's range, and what the run's policy can honour.
//!
//! Two callers, one wording: the config file (`config.rs`, which puts a
//! `file:line:col: field:` in front of each message) and the control API
//! (`api::set`, which changes a running VM and puts the target and key in
//! front). A change made while the VMs run is therefore refused for exactly
//! the reasons the same value would be refused in the file.

use crate::policy::{Policy, Refusal};
use crate::text::{one_line, quoted};
use vcpu_engine::host_cpus::{HostCpu, HostCpuSet};
use vcpu_sched::tunables::{
    PRIORITY_MAX_TIMESHARE, PRIORITY_NORMAL, PRIORITY_REALTIME_MAX, PRIORITY_REALTIME_MIN,
};
use vcpu_sched::SchedClass;

/// Why a scheduling setting is refused, in the words the config file and
/// the control API both show.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedRuleError {
    #[error("expected a CPU list such as \"0-3,8\", found {} ({})", quoted(.input), one_line(.reason))]
    CpuList { input: String, reason: String },
    #[error("expected a CPU list, found {0}")]
    CpuListTooLarge(vcpu_sched::CpuSetError),
    #[error("expected CPU numbers from 0 to {max}, found {id}")]
    CpuId { max: u32, id: i64 },
    #[error("expected CPUs within [host] cpus, found CPUs {} outside the host CPU set {}", .outside.to_list(), .host.to_list())]
    OutsideHost {
        outside: HostCpuSet,
        host: HostCpuSet,
    },
    #[error("expected at least one CPU, found an empty core set")]
    EmptyCoreSet,
    #[error("expected a VM class \"timeshare\" or \"realtime\", found \"idle\"")]
    IdleClass,
    #[error("expected a VM class \"timeshare\" or \"realtime\", found {}", quoted(.0))]
    UnknownClass(String),
    #[error("expected a {} VM's priority between {} and {}, found {value}", class_name(*.class), .range.start(), .range.end())]
    Priority {
        class: SchedClass,
        range: std::ops::RangeInclusive<u8>,
        value: i64,
    },
    #[error("expected a weight from 1 to {max} (100 is the default share), found {value}")]
    Weight { max: u32, value: i64 },
    #[error("expected a cap from 1 to {most} % (100 % of a CPU per vCPU, {vcpus} vCPU(s)), found {percent}")]
    Cap { most: i64, vcpus: u32, percent: i64 },
    #[error("expected a reservation from 0 to {most} % (100 % of a CPU per vCPU, {vcpus} vCPU(s)), found {percent}")]
    Reservation { most: i64, vcpus: u32, percent: i64 },
    #[error("expected a cap of at least the reservation ({reservation} %), found {cap}")]
    CapBelowReservation { cap: i64, reservation: i64 },
    #[error(
        "expected reservations summing to at most {most} % ({cpus} host CPU(s)), found {total} %"
    )]
    ReservationsOverflow { most: i64, cpus: usize, total: i64 },
    #[error("policy {policy} has no per-VM {what}: only haiku has weights, caps, reservations and latency bounds ({origin})")]
    SharesRefused {
        policy: Policy,
        what: String,
        origin: String,
    },
    #[error("expected a latency bound from 1 to {MAX_LATENCY_BOUND_US} us, found {0}")]
    LatencyBound(i64),
    #[error("expected a bound budget from 1 to {most} % (100 % of a CPU per vCPU, {vcpus} vCPU(s)) and at least 1 per mille per vCPU, found {percent}")]
    BoundBudget { most: i64, vcpus: u32, percent: i64 },
    #[error("expected `latency_bound_us` and `bound_budget` together, found only `{0}`")]
    BoundHalf(&'static str),
    #[error("expected a latency bound on a timeshare VM, found class realtime (it runs above every bound already)")]
    BoundRealtime,
    #[error("expected a reservation or a latency bound, found both (they share the top timeshare level, so a reserved vCPU's slices would be ahead of bounded wakes)")]
    BoundWithReservation,
    #[error("policy {policy} cannot promise a latency bound: only haiku puts a bounded wake ahead of the others ({origin})")]
    BoundRefused { policy: Policy, origin: String },
    #[error("{} ({origin})", .refusal.explain(*.policy))]
    Refused {
        refusal: Refusal,
        policy: Policy,
        origin: String,
    },
}

impl SchedRuleError {
    /// What a policy refused ([`SchedRuleError::Refused`]), if that is
    /// the error.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            SchedRuleError::Refused { refusal, .. } => Some(*refusal),
            _ => None,
        }
    }
}

/// A CPU list in the Linux syntax ("0-3,8").
pub fn cpu_list(text: &str) -> Result<HostCpuSet, SchedRuleError> {
    match HostCpuSet::parse_list(text) {
        Ok(set) => Ok(set),
        Err(vcpu_sched::CpuSetError::BadList { input, reason }) => {
            Err(SchedRuleError::CpuList { input, reason })
        }
        Err(e @ vcpu_sched::CpuSetError::TooLarge { .. }) => {
            Err(SchedRuleError::CpuListTooLarge(e))
        }
    }
}

/// CPU numbers given one by one (`cpus = [0, 1]`).
pub fn cpu_ids(ids: &[i64]) -> Result<HostCpuSet, SchedRuleError> {
    let max = vcpu_sched::cpuset::MAX_CPU_ID;
    let mut set = HostCpuSet::new();
    for &id in ids {
        if !(0..=i64::from(max)).contains(&id) {
            return Err(SchedRuleError::CpuId { max, id });
        }
        set.insert(HostCpu(id as u32));
    }
    Ok(set)
}

/// A VM's (or a vCPU's) core set: not empty, within `[host] cpus`.
pub fn core_set(set: &HostCpuSet, host_cpus: &HostCpuSet) -> Result<(), SchedRuleError> {
    let outside = set.difference(host_cpus);
    if !outside.is_empty() {
        Err(SchedRuleError::OutsideHost {
            outside,
            host: host_cpus.clone(),
        })
    } else if set.is_empty() {
        Err(SchedRuleError::EmptyCoreSet)
    } else {
        Ok(())
    }
}

/// The config spelling of a class.
pub fn class_name(class: SchedClass) -> &'static str {
    match class {
        SchedClass::Realtime => "realtime",
        SchedClass::Timeshare => "timeshare",
        SchedClass::Idle => "idle",
    }
}

/// A VM's class: timeshare or realtime (idle is the scheduler's own).
pub fn vm_class(class: SchedClass) -> Result<SchedClass, SchedRuleError> {
    match class {
        SchedClass::Idle => Err(SchedRuleError::IdleClass),
        c => Ok(c),
    }
}

/// A class named in words (the control API; the config file has serde).
pub fn class_from_name(name: &str) -> Result<SchedClass, SchedRuleError> {
    match name {
        "timeshare" => Ok(SchedClass::Timeshare),
        "realtime" => Ok(SchedClass::Realtime),
        other => Err(SchedRuleError::UnknownClass(other.to_string())),
    }
}

/// The priorities of a class.
pub fn priority_range(class: SchedClass) -> std::ops::RangeInclusive<u8> {
    match class {
        SchedClass::Realtime => PRIORITY_REALTIME_MIN..=PRIORITY_REALTIME_MAX,
        SchedClass::Timeshare => 1..=PRIORITY_MAX_TIMESHARE,
        SchedClass::Idle => 0..=0,
    }
}

/// A class's priority when none is given.
pub fn default_priority(class: SchedClass) -> u8 {
    match class {
        SchedClass::Timeshare => PRIORITY_NORMAL,
        c => *priority_range(c).start(),
    }
}

/// A priority within its class's range.
pub fn priority(class: SchedClass, value: i64) -> Result<u8, SchedRuleError> {
    let range = priority_range(class);
    if (i64::from(*range.start())..=i64::from(*range.end())).contains(&value) {
        Ok(value as u8)
    } else {
        Err(SchedRuleError::Priority {
            class,
            range,
            value,
        })
    }
}

/// A VM's operator shares as each of its vCPUs gets them: the engine's
/// type, which the config and bench layouts build and pass on unchanged.
pub use vcpu_engine::Shares;

/// A VM's (or vCPU's) operator weight (`vcpu_sched::shares`): 1..=10000,
/// default 100, as cgroups' `cpu.weight`.
pub fn weight(value: i64) -> Result<u32, SchedRuleError> {
    let max = vcpu_sched::shares::MAX_WEIGHT;
    if (1..=i64::from(max)).contains(&value) {
        Ok(value as u32)
    } else {
        Err(SchedRuleError::Weight { max, value })
    }
}

/// A VM's cap in percent of one CPU: at least 1, at most 100 per vCPU.
/// Returns the cap of each vCPU in per mille of one CPU (the VM's split
/// evenly).
pub fn cap(percent: i64, vcpus: u32) -> Result<u32, SchedRuleError> {
    let most = 100 * i64::from(vcpus.max(1));
    if (1..=most).contains(&percent) {
        Ok(per_vcpu_permille(percent, vcpus).max(1))
    } else {
        Err(SchedRuleError::Cap {
            most,
            vcpus: vcpus.max(1),
            percent,
        })
    }
}

/// A VM's reservation in percent of one CPU: 0 to 100 per vCPU. Returns
/// each vCPU's in per mille of one CPU.
pub fn reservation(percent: i64, vcpus: u32) -> Result<u32, SchedRuleError> {
    let most = 100 * i64::from(vcpus.max(1));
    if (0..=most).contains(&percent) {
        Ok(per_vcpu_permille(percent, vcpus))
    } else {
        Err(SchedRuleError::Reservation {
            most,
            vcpus: vcpus.max(1),
            percent,
        })
    }
}

fn per_vcpu_permille(percent: i64, vcpus: u32) -> u32 {
    (percent.max(0) as u64 * 10 / u64::from(vcpus.max(1))) as u32
}

/// The VM's percent of one CPU, as the config file gives `cap`,
/// `reservation` and `bound_budget`, from each vCPU's per mille: the
/// smallest whole percent that [`cap`], [`reservation`] and
/// [`bound_budget`] turn back into `per_vcpu` (the split rounds down, so
/// percents that differ by less than a per mille per vCPU run alike; the
/// file's own value unless its vCPUs could not tell it from a smaller one).
pub fn vm_percent(per_vcpu: u32, vcpus: u32) -> u32 {
    (u64::from(per_vcpu) * u64::from(vcpus.max(1))).div_ceil(10) as u32
}

/// The longest latency bound a VM can ask for, us (1 s).
pub const MAX_LATENCY_BOUND_US: i64 = 1_000_000;

/// A VM's wake-to-run bound in us: 1 us to 1 s. Returns it in ns.
pub fn latency_bound(us: i64) -> Result<u64, SchedRuleError> {
    if (1..=MAX_LATENCY_BOUND_US).contains(&us) {
        Ok(us as u64 * 1000)
    } else {
        Err(SchedRuleError::LatencyBound(us))
    }
}

/// A VM's bound budget in percent of one CPU: 1 to 100 per vCPU, at
/// least 1 per mille for each vCPU. Returns each vCPU's in per mille.
pub fn bound_budget(percent: i64, vcpus: u32) -> Result<u32, SchedRuleError> {
    let most = 100 * i64::from(vcpus.max(1));
    let per_vcpu = per_vcpu_permille(percent, vcpus);
    if (1..=most).contains(&percent) && per_vcpu >= 1 {
        Ok(per_vcpu)
    } else {
        Err(SchedRuleError::BoundBudget {
            most,
            vcpus: vcpus.max(1),
            percent,
        })
    }
}

/// A cap below the reservation beside it could not give what it reserves.
pub fn cap_covers_reservation(cap: Option<i64>, reservation: i64) -> Result<(), SchedRuleError> {
    match cap {
        Some(cap) if cap < reservation => {
            Err(SchedRuleError::CapBelowReservation { cap, reservation })
        }
        _ => Ok(()),
    }
}

/// Reservations (percent of one CPU, VM totals) must fit in the CPUs
/// their VMs may use: never oversubscribed.
pub fn reservations_fit(total_percent: i64, cpus: usize) -> Result<(), SchedRuleError> {
    let most = 100 * cpus as i64;
    if total_percent <= most {
        Ok(())
    } else {
        Err(SchedRuleError::ReservationsOverflow {
            most,
            cpus,
            total: total_percent,
        })
    }
}

/// Whether `policy` honours operator shares (weight, cap, reservation):
/// only haiku does; the others refuse them, as they refuse priorities.
pub fn shares_honoured(policy: Policy, what: &str, origin: &str) -> Result<(), SchedRuleError> {
    if policy == Policy::Scheduled(vcpu_sched::PolicyKind::Haiku) {
        Ok(())
    } else {
        Err(SchedRuleError::SharesRefused {
            policy,
            what: what.to_string(),
            origin: origin.to_string(),
        })
    }
}

/// What `policy` cannot honour of a class and priority, in the user's
/// words (`origin`: where the policy came from, e.g. `host.policy`):
/// [`SchedRuleError::Refused`].
pub fn honoured(
    policy: Policy,
    class: SchedClass,
    priority: u8,
    origin: &str,
) -> Result<(), SchedRuleError> {
    match policy.refuses_vm(class, priority) {
        None => Ok(()),
        Some(refusal) => Err(SchedRuleError::Refused {
            refusal,
            policy,
            origin: origin.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_one_wording_per_mistake() {
        assert_eq!(weight(100), Ok(100));
        assert!(weight(0)
            .unwrap_err()
            .to_string()
            .contains("from 1 to 10000"));
        assert_eq!(cap(30, 1), Ok(300));
        assert_eq!(cap(150, 2), Ok(750));
        assert!(cap(201, 2)
            .unwrap_err()
            .to_string()
            .contains("from 1 to 200 %"));
        assert!(cap(0, 1).is_err());
        assert_eq!(reservation(0, 1), Ok(0));
        assert!(reservation(101, 1).is_err());
        assert!(reservations_fit(250, 2)
            .unwrap_err()
            .to_string()
            .contains("at most 200 %"));
        assert_eq!(reservations_fit(200, 2), Ok(()));
        assert!(cap_covers_reservation(Some(20), 50).is_err());
        assert_eq!(vm_percent(750, 2), 150);
        let host = Policy::Host;
        assert!(shares_honoured(host, "weights", "host.policy")
            .unwrap_err()
            .to_string()
            .contains("only haiku"));
    }

    #[test]
    fn a_vm_percent_written_back_reads_as_the_same_shares() {
        for vcpus in 1..=crate::config::MAX_VCPUS {
            for percent in 0..=100 * i64::from(vcpus) {
                let back = |per| i64::from(vm_percent(per, vcpus));
                if let Ok(per) = cap(percent, vcpus) {
                    assert_eq!(cap(back(per), vcpus), Ok(per), "cap {percent} {vcpus}");
                }
                let per = reservation(percent, vcpus).unwrap();
                assert_eq!(reservation(back(per), vcpus), Ok(per));
                assert!(back(per) <= percent, "never more than was reserved");
                if let Ok(per) = bound_budget(percent, vcpus) {
                    assert_eq!(bound_budget(back(per), vcpus), Ok(per));
                }
            }
        }
    }

    #[test]
    fn one_wording_per_mistake() {
        let host = HostCpuSet::parse_list("0-1").unwrap();
        let three = HostCpuSet::parse_list("0-2").unwrap();
        assert!(core_set(&three, &host)
            .unwrap_err()
            .to_string()
            .contains("found CPUs 2 outside the host CPU set 0-1"));
        assert!(core_set(&HostCpuSet::new(), &host)
            .unwrap_err()
            .to_string()
            .contains("empty core set"));
        assert_eq!(core_set(&host, &host), Ok(()));
        assert!(cpu_list("x")
            .unwrap_err()
            .to_string()
            .starts_with("expected a CPU list"));
        assert!(cpu_ids(&[-1]).unwrap_err().to_string().contains("found -1"));
        assert_eq!(priority(SchedClass::Timeshare, 99), Ok(99));
        assert!(priority(SchedClass::Timeshare, 100)
            .unwrap_err()
            .to_string()
            .contains("timeshare VM's priority between 1 and 99, found 100"));
        assert!(priority(SchedClass::Realtime, 99).is_err());
        assert_eq!(class_from_name("realtime"), Ok(SchedClass::Realtime));
        assert!(class_from_name("idle").is_err());
        assert!(vm_class(SchedClass::Idle).is_err());
        assert_eq!(default_priority(SchedClass::Realtime), 100);
        let pinned = "pinned".parse::<Policy>().unwrap();
        assert!(honoured(pinned, SchedClass::Timeshare, 20, "--policy")
            .unwrap_err()
            .to_string()
            .ends_with("(--policy)"));
    }
}
