//! The latency bounds' admission for a `set` (`crate::config::bounds`,
//! the config's own rule and wording): the VMs as they will be if the
//! request is carried out - the live ones as the scheduler holds them,
//! with the change applied to the target's vCPUs, and those not started
//! yet as their config says - judged before anything changes. So a bound
//! is set only where it can be promised, and a reservation, class
//! realtime, priority 99 or an affinity that would break a promised bound
//! is refused, as the config file would refuse it.

use super::set::SetError;
use super::ApiContext;
use crate::config::bounds::{refusal, BoundedVm, VcpuLevel};
use std::collections::HashMap;
use vcpu_engine::host_cpus::HostCpuSet;
use vcpu_engine::Engine;
use vcpu_sched::bound::LatencyBound;
use vcpu_sched::stats::EntityStats;
use vcpu_sched::{EntityId, SchedSnapshot};

/// A vCPU's settings as the admission reads them from its scheduler row.
pub fn level_of(engine: &Engine, row: &EntityStats) -> VcpuLevel {
    VcpuLevel {
        cpus: engine.host_set(&row.affinity),
        class: row.class,
        priority: row.base_priority,
        reservation: row.reservation,
        latency_bound: row.latency_bound.map(|bound| LatencyBound {
            bound,
            budget_permille: row.bound_budget,
        }),
    }
}

/// Why the bounds could not all be promised after `change` is made to
/// the vCPUs `targets`, with the host CPUs `in_service` left in Pacer's
/// service (`None`: they can, or none is promised); a value `change`
/// cannot read is its error. A vCPU may use only the CPUs of its core set
/// that are in service, so taking CPUs out is judged as narrowing every
/// core set.
pub fn refused_after(
    ctx: &ApiContext<'_>,
    engine: &Engine,
    snap: &SchedSnapshot,
    targets: &[EntityId],
    change: &dyn Fn(&mut VcpuLevel) -> Result<(), SetError>,
    in_service: &HostCpuSet,
) -> Result<Option<String>, SetError> {
    let rows: HashMap<EntityId, &EntityStats> = snap.entities.iter().map(|e| (e.id, e)).collect();
    let mut vms = Vec::new();
    for c in ctx.configs {
        if ctx.vms.has_ended(&c.name) {
            continue;
        }
        let Some(vm) = engine.vm_named(&c.name) else {
            // Not started yet: it starts with its config's settings.
            let cpus = c.cpus.intersection(in_service);
            vms.push(BoundedVm::uniform(
                &c.name, c.vcpus, &cpus, c.class, c.priority, &c.shares,
            ));
            continue;
        };
        let mut vcpus = Vec::new();
        for v in vm.vcpus() {
            let Some(row) = rows.get(&v.entity()) else {
                continue;
            };
            let mut level = level_of(engine, row);
            if targets.contains(&v.entity()) {
                change(&mut level)?;
            }
            level.cpus = level.cpus.intersection(in_service);
            vcpus.push(level);
        }
        vms.push(BoundedVm {
            name: &c.name,
            vcpus,
        });
    }
    Ok(refusal(&vms))
}
