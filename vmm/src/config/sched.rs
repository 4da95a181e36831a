//! A VM's scheduling settings: its core set within `[host] cpus`, class
//! and priority, weight, cap, reservation and latency bound, and whether the policy
//! honours them (the rules and their wording are `sched_rules`', shared
//! with the control API).

use super::check::Checker;
use super::host::Host;
use super::limits::MAX_VCPUS;
use super::raw::RawVm;
use crate::config::sched_rules::Shares;
use std::ops::Range;
use vcpu_engine::host_cpus::HostCpuSet;
use vcpu_sched::SchedClass;

/// A VM's checked scheduling settings.
pub(super) struct VmSched {
    pub(super) cpus: HostCpuSet,
    pub(super) class: SchedClass,
    pub(super) priority: u8,
    pub(super) shares: Shares,
}

/// Every VM's reservation (percent of one CPU), and where the last one
/// was given: the sum must fit the host, and a refusal points there.
#[derive(Default)]
pub(super) struct Reservations {
    total: i64,
    last: Option<(Range<usize>, String)>,
}

impl Reservations {
    /// After every VM: do all the reservations fit `[host] cpus`?
    pub(super) fn check_fit(self, c: &mut Checker<'_>, host_cpus: &HostCpuSet) {
        if let Some((span, field)) = self.last {
            if let Err(why) =
                crate::config::sched_rules::reservations_fit(self.total, host_cpus.len())
            {
                c.err(span, field, why);
            }
        }
    }
}

/// Check `vm[i]`'s scheduling settings against `[host]` (its CPUs and
/// its policy); its reservation is added to `reservations`.
pub(super) fn check(
    c: &mut Checker<'_>,
    i: usize,
    v: &RawVm,
    host: &Host,
    reservations: &mut Reservations,
) -> VmSched {
    let f = |name: &str| format!("vm[{i}].{name}");
    let (host_cpus, policy, policy_origin) =
        (&host.config.cpus, host.config.policy, &host.policy_origin);
    let vcpus = *v.vcpus.get_ref();
    let cpus = match &v.cpus {
        Some(s) => {
            let parsed = c.cpus(s, &f("cpus"));
            let set = parsed.clone().unwrap_or_default();
            // (An empty host set was reported at host.cpus.)
            if parsed.is_some() && !host_cpus.is_empty() {
                if let Err(why) = crate::config::sched_rules::core_set(&set, host_cpus) {
                    c.err(s.span(), f("cpus"), why);
                }
            }
            set
        }
        None => host_cpus.clone(),
    };
    let class = v.class.as_ref().map(|c| *c.get_ref()).unwrap_or_default();
    let priority = match &v.priority {
        Some(p) => {
            crate::config::sched_rules::priority(class, *p.get_ref()).unwrap_or_else(|why| {
                c.err(p.span(), f("priority"), why);
                let range = crate::config::sched_rules::priority_range(class);
                (*p.get_ref()).clamp(i64::from(*range.start()), i64::from(*range.end())) as u8
            })
        }
        None => crate::config::sched_rules::default_priority(class),
    };
    if let Err(why) = crate::config::sched_rules::vm_class(class) {
        let span = v.class.as_ref().map(|c| c.span()).unwrap_or(0..0);
        c.err(span, f("class"), why);
    } else if let Err(why) =
        crate::config::sched_rules::honoured(policy, class, priority, policy_origin)
    {
        let refusal = why.refusal().unwrap_or(crate::policy::Refusal::Priority);
        let span = match (refusal, &v.priority, &v.class) {
            (crate::policy::Refusal::Priority, Some(p), _) => p.span(),
            (_, _, Some(c)) => c.span(),
            (_, Some(p), None) => p.span(),
            (_, None, None) => v.name.span(),
        };
        let field = match refusal {
            crate::policy::Refusal::Priority => f("priority"),
            crate::policy::Refusal::Class => f("class"),
        };
        c.err(span, field, why);
    }
    let n_vcpus = vcpus.clamp(1, MAX_VCPUS as i64) as u32;
    let mut shares = crate::config::sched_rules::Shares::default();
    if let Some(w) = &v.weight {
        match crate::config::sched_rules::weight(*w.get_ref()) {
            Ok(x) => shares.weight = x,
            Err(why) => c.err(w.span(), f("weight"), why),
        }
    }
    if let Some(x) = &v.cap {
        match crate::config::sched_rules::cap(*x.get_ref(), n_vcpus) {
            Ok(p) => shares.cap = Some(p),
            Err(why) => c.err(x.span(), f("cap"), why),
        }
    }
    if let Some(x) = &v.reservation {
        match crate::config::sched_rules::reservation(*x.get_ref(), n_vcpus) {
            Ok(p) => {
                shares.reservation = p;
                reservations.total += *x.get_ref();
                reservations.last = Some((x.span(), f("reservation")));
            }
            Err(why) => c.err(x.span(), f("reservation"), why),
        }
        if let Err(why) = crate::config::sched_rules::cap_covers_reservation(
            v.cap.as_ref().map(|c| *c.get_ref()),
            *x.get_ref(),
        ) {
            c.err(x.span(), f("reservation"), why);
        }
    }
    shares.latency_bound = latency_bound(c, i, v, class, n_vcpus, host);
    for (key, given) in [
        ("weight", v.weight.as_ref().filter(|w| *w.get_ref() != 100)),
        ("cap", v.cap.as_ref()),
        (
            "reservation",
            v.reservation.as_ref().filter(|r| *r.get_ref() != 0),
        ),
    ] {
        if let Some(x) = given {
            let what = match key {
                "weight" => "weights",
                "cap" => "caps",
                _ => "reservations",
            };
            if let Err(why) =
                crate::config::sched_rules::shares_honoured(policy, what, policy_origin)
            {
                c.err(x.span(), f(key), why);
            }
        }
    }
    VmSched {
        cpus,
        class,
        priority,
        shares,
    }
}

/// `vm[i]`'s `latency_bound_us` and `bound_budget` (both or neither): the
/// bound each vCPU is promised and the budget split evenly over them.
/// Whether the set of bounded VMs can be promised is `bounds::admit`'s,
/// after every VM.
fn latency_bound(
    c: &mut Checker<'_>,
    i: usize,
    v: &RawVm,
    class: SchedClass,
    n_vcpus: u32,
    host: &Host,
) -> Option<vcpu_sched::bound::LatencyBound> {
    use crate::config::sched_rules::{self as rules, SchedRuleError};
    let f = |name: &str| format!("vm[{i}].{name}");
    let (bound, budget) = match (&v.latency_bound_us, &v.bound_budget) {
        (None, None) => return None,
        (Some(b), None) => {
            c.err(
                b.span(),
                f("latency_bound_us"),
                SchedRuleError::BoundHalf("latency_bound_us"),
            );
            return None;
        }
        (None, Some(b)) => {
            c.err(
                b.span(),
                f("bound_budget"),
                SchedRuleError::BoundHalf("bound_budget"),
            );
            return None;
        }
        (Some(b), Some(u)) => (b, u),
    };
    let mut ok = true;
    let mut refuse = |c: &mut Checker<'_>, why: SchedRuleError| {
        c.err(bound.span(), f("latency_bound_us"), why);
        ok = false;
    };
    if !host.config.policy.honours_latency_bounds() {
        refuse(
            c,
            SchedRuleError::BoundRefused {
                policy: host.config.policy,
                origin: host.policy_origin.clone(),
            },
        );
    }
    if class == SchedClass::Realtime {
        refuse(c, SchedRuleError::BoundRealtime);
    }
    if v.reservation.as_ref().is_some_and(|r| *r.get_ref() != 0) {
        refuse(c, SchedRuleError::BoundWithReservation);
    }
    let ns = rules::latency_bound(*bound.get_ref())
        .map_err(|why| c.err(bound.span(), f("latency_bound_us"), why))
        .ok();
    let permille = rules::bound_budget(*budget.get_ref(), n_vcpus)
        .map_err(|why| c.err(budget.span(), f("bound_budget"), why))
        .ok();
    Some(vcpu_sched::bound::LatencyBound {
        bound: ns?,
        budget_permille: permille?,
    })
    .filter(|_| ok)
}
