//! Which scheduler runs the vCPUs, spelled the same everywhere (config
//! files, `--policy`, results): `haiku`, `global-rr`, `pinned`, `eevdf` —
//! the policies of `vcpu_sched` — and `host`, where Pacer schedules
//! nothing. `eevdf` is the model of the host kernel's own policy carried
//! out by Pacer's engine, so `host` against `eevdf` separates the policy
//! from the mechanism (KVM's in-kernel path against Pacer's).
//!
//! What each policy can honour is decided here, once, so that `pacer
//! validate` rejects a config the chosen policy would silently ignore.

use serde::{Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use vcpu_sched::{PolicyKind, SchedClass};

/// How the vCPUs of a run are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// vCPU threads left to the host kernel, with KVM's in-kernel irqchip:
    /// how QEMU, Firecracker and Cloud Hypervisor run (the baseline).
    Host,
    /// Pacer's engine dispatches every vCPU, with Pacer's own interrupt
    /// controller, under this `vcpu_sched` policy.
    Scheduled(PolicyKind),
}

impl Default for Policy {
    fn default() -> Self {
        Policy::Scheduled(PolicyKind::Haiku)
    }
}

impl Policy {
    /// Every policy: the scheduled ones (default first), then `host`.
    pub const ALL: [Policy; 5] = [
        Policy::Scheduled(PolicyKind::Haiku),
        Policy::Scheduled(PolicyKind::GlobalRoundRobin),
        Policy::Scheduled(PolicyKind::StaticPinning),
        Policy::Scheduled(PolicyKind::Eevdf),
        Policy::Host,
    ];

    /// The one spelling of the policy's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Host => "host",
            Policy::Scheduled(k) => k.as_str(),
        }
    }

    /// The `vcpu_sched` policy, if Pacer schedules.
    pub fn scheduler(self) -> Option<PolicyKind> {
        match self {
            Policy::Host => None,
            Policy::Scheduled(k) => Some(k),
        }
    }

    /// Why this policy cannot honour a VM's scheduling request, if it
    /// cannot: `None` means it is honoured.
    pub fn refuses_vm(self, class: SchedClass, priority: u8) -> Option<Refusal> {
        match (self, class) {
            (_, SchedClass::Timeshare) if priority == vcpu_sched::tunables::PRIORITY_NORMAL => None,
            (Policy::Host, SchedClass::Realtime) => Some(Refusal::Class),
            (Policy::Host, _) => Some(Refusal::Priority),
            (Policy::Scheduled(PolicyKind::Haiku), _) => None,
            // The baselines order by class only (realtime before timeshare);
            // eevdf gives every timeshare vCPU nice 0.
            (Policy::Scheduled(_), SchedClass::Timeshare) => Some(Refusal::Priority),
            (Policy::Scheduled(_), _) => None,
        }
    }

    /// Whether a VM's wake-to-run bound (`latency_bound_us`) can be
    /// promised: only haiku puts a bounded wake ahead of the others and
    /// counts its misses; the baselines, eevdf and the host kernel have no
    /// such level.
    pub fn honours_latency_bounds(self) -> bool {
        self == Policy::Scheduled(PolicyKind::Haiku)
    }

    /// Whether SMT isolation (siblings only co-run one VM) is honoured.
    pub fn honours_smt_isolation(self) -> bool {
        self == Policy::Scheduled(PolicyKind::Haiku)
    }

    /// Whether `[host] mode` changes anything (the Haiku mode tables; the
    /// baselines take their fixed quantum from the mode too; EEVDF has no
    /// modes).
    pub fn uses_mode(self) -> bool {
        !matches!(self, Policy::Host | Policy::Scheduled(PolicyKind::Eevdf))
    }
}

/// What a policy cannot honour (see [`Policy::refuses_vm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Priorities between timeshare VMs.
    Priority,
    /// The realtime class.
    Class,
}

impl Refusal {
    /// The error text for `policy`, in the user's terms.
    pub fn explain(self, policy: Policy) -> String {
        match (self, policy) {
            (Refusal::Priority, Policy::Host) => "policy \"host\" leaves vCPU threads to the host \
                kernel, which knows nothing of VM priorities; remove `priority` or use \"haiku\""
                .into(),
            (Refusal::Class, Policy::Host) => "policy \"host\" cannot give a VM the realtime \
                class; use \"haiku\", \"global-rr\" or \"pinned\""
                .into(),
            (Refusal::Priority, p) => format!(
                "policy \"{p}\" orders vCPUs by class only and ignores timeshare priorities; \
                 remove `priority` or use \"haiku\""
            ),
            (Refusal::Class, p) => format!("policy \"{p}\" cannot honour the VM's class"),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Policy::ALL.iter().map(|p| p.as_str()).collect();
                format!(
                    "unknown policy {s:?} (expected one of: {}){}",
                    names.join(", "),
                    crate::suggest::hint(s, names.iter().copied())
                )
            })
    }
}

impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Policy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A policy and, optionally, the Haiku mode to run it in, as the command
/// line and the bench's matrix spell it: `haiku`, `haiku:power-saving`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyChoice {
    pub policy: Policy,
    /// None: the config's mode.
    pub mode: Option<vcpu_sched::Mode>,
}

impl fmt::Display for PolicyChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.mode {
            Some(m) => write!(f, "{}:{m}", self.policy),
            None => write!(f, "{}", self.policy),
        }
    }
}

impl FromStr for PolicyChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (p, m) = match s.split_once(':') {
            Some((p, m)) => (p, Some(m)),
            None => (s, None),
        };
        let policy: Policy = p.parse()?;
        let mode = match m {
            None => None,
            Some(_) if !policy.uses_mode() => {
                return Err(format!(
                    "policy \"{policy}\" has no mode (the host kernel schedules its threads)"
                ))
            }
            Some(m) => Some(crate::suggest::mode(m)?),
        };
        Ok(PolicyChoice { policy, mode })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_choice_names_a_policy_and_maybe_a_mode() {
        let c: PolicyChoice = "haiku:power-saving".parse().unwrap();
        assert_eq!(c.policy, Policy::default());
        assert_eq!(c.mode, Some(vcpu_sched::Mode::PowerSaving));
        assert_eq!(c.to_string(), "haiku:power-saving");
        assert_eq!("host".parse::<PolicyChoice>().unwrap().mode, None);
        assert!("host:low-latency"
            .parse::<PolicyChoice>()
            .unwrap_err()
            .contains("no mode"));
        assert!("haiku:turbo".parse::<PolicyChoice>().is_err());
    }

    #[test]
    fn one_spelling_round_trips() {
        for p in Policy::ALL {
            assert_eq!(p.as_str().parse::<Policy>().unwrap(), p);
        }
        assert_eq!(Policy::default().as_str(), "haiku");
        let e = "global_rr".parse::<Policy>().unwrap_err();
        assert!(e.contains("haiku, global-rr, pinned, eevdf, host"), "{e}");
    }

    #[test]
    fn what_each_policy_honours() {
        let haiku = Policy::Scheduled(PolicyKind::Haiku);
        let rr = Policy::Scheduled(PolicyKind::GlobalRoundRobin);
        assert_eq!(haiku.refuses_vm(SchedClass::Timeshare, 30), None);
        assert_eq!(haiku.refuses_vm(SchedClass::Realtime, 100), None);
        assert_eq!(rr.refuses_vm(SchedClass::Timeshare, 10), None);
        assert_eq!(
            rr.refuses_vm(SchedClass::Timeshare, 30),
            Some(Refusal::Priority)
        );
        assert_eq!(rr.refuses_vm(SchedClass::Realtime, 110), None);
        assert_eq!(Policy::Host.refuses_vm(SchedClass::Timeshare, 10), None);
        assert_eq!(
            Policy::Host.refuses_vm(SchedClass::Realtime, 100),
            Some(Refusal::Class)
        );
        assert!(haiku.honours_smt_isolation() && !rr.honours_smt_isolation());
        assert!(Refusal::Priority.explain(rr).contains("global-rr"));
        // eevdf: every timeshare vCPU at nice 0, realtime above it, no
        // SMT isolation, no modes.
        let eevdf = Policy::Scheduled(PolicyKind::Eevdf);
        assert_eq!("eevdf".parse::<Policy>().unwrap(), eevdf);
        assert_eq!(eevdf.refuses_vm(SchedClass::Timeshare, 10), None);
        assert_eq!(
            eevdf.refuses_vm(SchedClass::Timeshare, 20),
            Some(Refusal::Priority)
        );
        assert_eq!(eevdf.refuses_vm(SchedClass::Realtime, 110), None);
        assert!(!eevdf.honours_smt_isolation() && !eevdf.uses_mode());
        assert!(rr.uses_mode() && !Policy::Host.uses_mode());
        assert_eq!(
            Refusal::Priority.explain(eevdf),
            "policy \"eevdf\" orders vCPUs by class only and ignores timeshare \
             priorities; remove `priority` or use \"haiku\""
        );
    }
}
