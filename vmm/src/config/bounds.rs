//! Admission of the VMs' latency bounds (`vcpu_sched::bound`), after
//! every VM is checked: over the host CPUs the bounded VMs may use, the
//! bounded level is theirs alone (no reservation, realtime VM or
//! timeshare priority 99 shares those CPUs), their budgets fit the CPUs,
//! and every bounded vCPU's worst-case wait is within its bound
//! (`vcpu_sched::bound::admit`, ARCHITECTURE.md "Latency bounds"). A
//! refusal names the VMs and the arithmetic. One wording for a config
//! file and a bench matrix's layouts.

use super::check::Checker;
use super::raw::RawVm;
use super::sched_rules::SchedRuleError;
use super::vm::VmConfig;
use crate::text::quoted;
use vcpu_engine::host_cpus::HostCpuSet;
use vcpu_sched::bound::{admit, AdmissionError, LatencyBound, KICK_COST};
use vcpu_sched::tunables::PRIORITY_MAX_TIMESHARE;
use vcpu_sched::SchedClass;

/// What the admission needs of one vCPU: where it may run, what level it
/// can reach there, and its bound if it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VcpuLevel {
    pub cpus: HostCpuSet,
    pub class: SchedClass,
    pub priority: u8,
    /// Per mille of one CPU (0: none).
    pub reservation: u32,
    pub latency_bound: Option<LatencyBound>,
}

/// What the admission needs of one VM: its vCPUs. A config (or a bench
/// layout) gives every vCPU the VM's settings ([`BoundedVm::uniform`]);
/// the control API gives each vCPU's live settings, with a requested
/// change applied, so one rule judges both.
#[derive(Debug, Clone)]
pub struct BoundedVm<'a> {
    pub name: &'a str,
    pub vcpus: Vec<VcpuLevel>,
}

impl<'a> BoundedVm<'a> {
    /// `vcpus` vCPUs with the VM's settings (`reservation` and
    /// `latency_bound` per vCPU, as `Shares` has them).
    pub fn uniform(
        name: &'a str,
        vcpus: u32,
        cpus: &HostCpuSet,
        class: SchedClass,
        priority: u8,
        shares: &crate::config::sched_rules::Shares,
    ) -> Self {
        let level = VcpuLevel {
            cpus: cpus.clone(),
            class,
            priority,
            reservation: shares.reservation,
            latency_bound: shares.latency_bound,
        };
        BoundedVm {
            name,
            vcpus: vec![level; vcpus as usize],
        }
    }

    fn is_bounded(&self) -> bool {
        self.vcpus.iter().any(|v| v.latency_bound.is_some())
    }
}

/// Why the VMs' bounds cannot all be promised, if they cannot.
pub fn refusal(vms: &[BoundedVm<'_>]) -> Option<String> {
    let bounded: Vec<usize> = (0..vms.len()).filter(|i| vms[*i].is_bounded()).collect();
    let first = *bounded.first()?;
    let names = |is: &[usize]| {
        is.iter()
            .map(|i| quoted(vms[*i].name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // A bounded vCPU itself must stay at the timeshare levels it is
    // promised at (the config refuses these at the VM's own fields).
    for v in bounded.iter().flat_map(|i| &vms[*i].vcpus) {
        if v.latency_bound.is_some() && v.class == SchedClass::Realtime {
            return Some(SchedRuleError::BoundRealtime.to_string());
        }
        if v.latency_bound.is_some() && v.reservation != 0 {
            return Some(SchedRuleError::BoundWithReservation.to_string());
        }
    }
    let mut cpus = HostCpuSet::new();
    for v in vms
        .iter()
        .flat_map(|vm| &vm.vcpus)
        .filter(|v| v.latency_bound.is_some())
    {
        for cpu in v.cpus.iter() {
            cpus.insert(cpu);
        }
    }
    for vm in vms {
        for v in vm.vcpus.iter().filter(|v| v.latency_bound.is_none()) {
            let reaches = if v.reservation != 0 {
                "a reservation"
            } else if v.class == SchedClass::Realtime {
                "the realtime class"
            } else if v.priority >= PRIORITY_MAX_TIMESHARE {
                "timeshare priority 99"
            } else {
                continue;
            };
            if v.cpus.iter().any(|cpu| cpus.contains(cpu)) {
                return Some(format!(
                    "expected the bounded VMs ({}) to have host CPUs {} to themselves at the bounded level, found VM {} there with {reaches}: a bounded wake could wait behind it for a whole slice",
                    names(&bounded),
                    cpus.to_list(),
                    quoted(vm.name)
                ));
            }
        }
    }
    // One bound per vCPU, and the VM each belongs to.
    let mut per_vcpu: Vec<LatencyBound> = Vec::new();
    let mut owner: Vec<usize> = Vec::new();
    for i in &bounded {
        for b in vms[*i].vcpus.iter().filter_map(|v| v.latency_bound) {
            per_vcpu.push(b);
            owner.push(*i);
        }
    }
    if cpus.is_empty() {
        return Some(format!(
            "expected the bounded VMs ({}) to keep a host CPU of their core sets in Pacer's service, found none",
            names(&bounded)
        ));
    }
    let us = |ns: u64| ns.div_ceil(1000);
    match admit(&per_vcpu, cpus.len(), KICK_COST) {
        Ok(()) => None,
        Err(AdmissionError::BudgetsOverflow { total, cpus: n, .. }) => Some(format!(
            "expected the bounded VMs ({}) to ask budgets within the {n} host CPU(s) they may use ({}), found {} % of one CPU in all, more than {} %",
            names(&bounded),
            cpus.to_list(),
            total / 10,
            n * 100
        )),
        Err(AdmissionError::BoundTooTight {
            index,
            bound,
            kick,
            bursts,
            others_permille,
            wait,
        }) => {
            let vm = owner.get(index).copied().unwrap_or(first);
            // The VMs the other bounded vCPUs belong to (its own VM too
            // if it has more than one), each once.
            let mut others: Vec<usize> = owner
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != index)
                .map(|(_, o)| *o)
                .collect();
            others.dedup();
            let wait = if wait == u64::MAX {
                "no finite wait (the others' budgets fill a CPU)".to_string()
            } else {
                format!("{} us", us(wait))
            };
            Some(format!(
                "expected VM {}'s latency bound to cover the worst-case wait of its wakes, found {} us < (kick {} us + the other bounded vCPUs' bursts {} us) / (1 - their budgets {} %) = {wait}; the other bounded vCPUs: {}",
                quoted(vms[vm].name),
                us(bound),
                us(kick),
                us(bursts),
                others_permille as f64 / 10.0,
                match others.len() {
                    0 => "none".to_string(),
                    1 => format!("{} of VM {}", per_vcpu.len() - 1, names(&others)),
                    _ => format!("{} of VMs {}", per_vcpu.len() - 1, names(&others)),
                }
            ))
        }
    }
}

/// Refuse, at the first bounded VM's `latency_bound_us`, what cannot be
/// promised.
pub(super) fn check_admission(c: &mut Checker<'_>, raw: &[RawVm], vms: &[VmConfig]) {
    let Some(first) = vms.iter().position(|v| v.shares.latency_bound.is_some()) else {
        return;
    };
    let Some(span) = raw.get(first).and_then(|r| r.latency_bound_us.as_ref()) else {
        return;
    };
    let view: Vec<BoundedVm<'_>> = vms
        .iter()
        .map(|v| BoundedVm::uniform(&v.name, v.vcpus, &v.cpus, v.class, v.priority, &v.shares))
        .collect();
    if let Some(why) = refusal(&view) {
        c.err(span.span(), format!("vm[{first}].latency_bound_us"), why);
    }
}
