//! Admission of the VMs' latency bounds (`vcpu_sched::bound`), after
//! every VM is checked: over the host CPUs the bounded VMs may use, the
//! bounded level is theirs alone (no reservation, realtime VM or
//! timeshare priority 99 shares those CPUs), their budgets fit the CPUs,
//! and every bounded vCPU's worst-case wait is within its bound
//! (`vcpu_sched::bound::admit`, ARCHITECTURE.md "Latency bounds"). A
//! refusal names the VMs and the arithmetic.

use super::check::Checker;
use super::raw::RawVm;
use super::vm::VmConfig;
use crate::text::quoted;
use vcpu_engine::host_cpus::HostCpuSet;
use vcpu_sched::bound::{admit, AdmissionError, LatencyBound, KICK_COST};
use vcpu_sched::tunables::PRIORITY_MAX_TIMESHARE;
use vcpu_sched::SchedClass;

/// Refuse, at the first bounded VM's `latency_bound_us`, what cannot be
/// promised.
pub(super) fn check_admission(c: &mut Checker<'_>, raw: &[RawVm], vms: &[VmConfig]) {
    let bounded: Vec<usize> = (0..vms.len())
        .filter(|i| vms[*i].shares.latency_bound.is_some())
        .collect();
    let Some(&first) = bounded.first() else {
        return;
    };
    let Some(span) = raw.get(first).and_then(|r| r.latency_bound_us.as_ref()) else {
        return;
    };
    let field = format!("vm[{first}].latency_bound_us");
    let names = |is: &[usize]| {
        is.iter()
            .map(|i| quoted(&vms[*i].name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut cpus = HostCpuSet::new();
    for i in &bounded {
        for cpu in vms[*i].cpus.iter() {
            cpus.insert(cpu);
        }
    }
    for v in vms {
        let shares_cpus = v.cpus.iter().any(|cpu| cpus.contains(cpu));
        let reaches = if v.shares.reservation != 0 {
            Some("a reservation")
        } else if v.class == SchedClass::Realtime {
            Some("the realtime class")
        } else if v.priority >= PRIORITY_MAX_TIMESHARE {
            Some("timeshare priority 99")
        } else {
            None
        };
        if let (true, Some(what)) = (shares_cpus && v.shares.latency_bound.is_none(), reaches) {
            c.err(
                span.span(),
                &field,
                format!(
                    "expected the bounded VMs ({}) to have host CPUs {} to themselves at the bounded level, found VM {} there with {what}: a bounded wake could wait behind it for a whole slice",
                    names(&bounded),
                    cpus.to_list(),
                    quoted(&v.name)
                ),
            );
            return;
        }
    }
    // One bound per vCPU, and the VM each belongs to.
    let mut per_vcpu: Vec<LatencyBound> = Vec::new();
    let mut owner: Vec<usize> = Vec::new();
    for i in &bounded {
        if let Some(b) = vms[*i].shares.latency_bound {
            for _ in 0..vms[*i].vcpus {
                per_vcpu.push(b);
                owner.push(*i);
            }
        }
    }
    let us = |ns: u64| ns.div_ceil(1000);
    match admit(&per_vcpu, cpus.len(), KICK_COST) {
        Ok(()) => {}
        Err(AdmissionError::BudgetsOverflow { total, cpus: n, .. }) => c.err(
            span.span(),
            &field,
            format!(
                "expected the bounded VMs ({}) to ask budgets within the {n} host CPU(s) they may use ({}), found {} % of one CPU in all, more than {} %",
                names(&bounded),
                cpus.to_list(),
                total / 10,
                n * 100
            ),
        ),
        Err(AdmissionError::BoundTooTight {
            index,
            bound,
            kick,
            bursts,
            others_permille,
            wait,
        }) => {
            let vm = owner.get(index).copied().unwrap_or(first);
            let others: Vec<usize> = bounded.iter().copied().filter(|i| *i != vm).collect();
            let wait = if wait == u64::MAX {
                "no finite wait (the others' budgets fill a CPU)".to_string()
            } else {
                format!("{} us", us(wait))
            };
            c.err(
                span.span(),
                &field,
                format!(
                    "expected VM {}'s latency bound to cover the worst-case wait of its wakes, found {} us < (kick {} us + the other bounded vCPUs' bursts {} us) / (1 - their budgets {} %) = {wait}; the other bounded vCPUs: {} of VMs {}",
                    quoted(&vms[vm].name),
                    us(bound),
                    us(kick),
                    us(bursts),
                    others_permille as f64 / 10.0,
                    per_vcpu.len() - 1,
                    if others.is_empty() { names(&[vm]) } else { names(&others) }
                ),
            );
        }
    }
}
