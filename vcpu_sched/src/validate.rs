//! The checks every policy makes on what it is given: the topology and the
//! configuration at `build`, an entity's spec at `add_entity`, a priority
//! at `set_priority`. One place, so the same mistake gets the same error
//! whichever policy is asked.

use crate::policy::{PolicyKind, SchedConfig};
use crate::tunables::Mode;
use crate::tunables::{PRIORITY_IDLE, PRIORITY_LOWEST_ACTIVE, PRIORITY_MAX_TIMESHARE};
use crate::tunables::{PRIORITY_REALTIME_MAX, PRIORITY_REALTIME_MIN};
use crate::{CpuSet, EntitySpec, SchedClass, SchedError, Topology};

/// Upper bound on `max_entities` (memory of the entity tables; ids are u32).
pub(crate) const MAX_ENTITIES_LIMIT: usize = 1 << 24;

/// Check that `priority` is valid for `class` (realtime 100..=120,
/// timeshare 1..=99, idle 0).
pub(crate) fn validate_priority(class: SchedClass, priority: u8) -> Result<(), SchedError> {
    let ok = match class {
        SchedClass::Realtime => (PRIORITY_REALTIME_MIN..=PRIORITY_REALTIME_MAX).contains(&priority),
        SchedClass::Timeshare => {
            (PRIORITY_LOWEST_ACTIVE..=PRIORITY_MAX_TIMESHARE).contains(&priority)
        }
        SchedClass::Idle => priority == PRIORITY_IDLE,
    };
    if ok {
        Ok(())
    } else {
        Err(SchedError::BadPriority { class, priority })
    }
}

/// An entity's hard affinity as the policies keep it: restricted to the
/// CPUs of the topology (CPUs outside it are ignored; none left is an
/// error).
pub(crate) fn validate_affinity(
    affinity: &CpuSet,
    topology: &Topology,
) -> Result<CpuSet, SchedError> {
    let affinity = affinity.intersection(&topology.all_cpus());
    if affinity.is_empty() {
        return Err(SchedError::EmptyAffinity);
    }
    Ok(affinity)
}

/// Validate an entity spec against a topology and return its effective
/// hard affinity (see [`validate_affinity`]).
pub(crate) fn validate_spec(spec: &EntitySpec, topology: &Topology) -> Result<CpuSet, SchedError> {
    validate_priority(spec.class, spec.priority)?;
    validate_affinity(&spec.affinity, topology)
}

/// Reject topologies whose ids are not dense and consistent.
pub(crate) fn validate_topology(t: &Topology) -> Result<(), SchedError> {
    let bad = |m: &str| Err(SchedError::Topology(m.to_string()));
    if t.cpus.is_empty() {
        return bad("no CPUs");
    }
    for (i, c) in t.cpus.iter().enumerate() {
        let in_range = (c.core.0 as usize) < t.cores.len()
            && (c.llc.0 as usize) < t.llcs.len()
            && (c.package.0 as usize) < t.packages.len();
        if c.id.0 as usize != i || !in_range {
            return bad("CPU ids must be dense and refer to existing core/LLC/package");
        }
    }
    for (i, core) in t.cores.iter().enumerate() {
        if core.id.0 as usize != i || core.cpus.is_empty() || (core.llc.0 as usize) >= t.llcs.len()
        {
            return bad("every core needs a dense id, CPUs and an LLC");
        }
        if core
            .cpus
            .iter()
            .any(|c| t.cpus.get(c.0 as usize).map(|ci| ci.core) != Some(core.id))
        {
            return bad("core CPU lists disagree with the CPUs");
        }
    }
    for (i, llc) in t.llcs.iter().enumerate() {
        let ok = llc.id.0 as usize == i
            && llc
                .cpus
                .iter()
                .all(|c| t.cpus.get(c.0 as usize).is_some_and(|ci| ci.llc == llc.id))
            && llc
                .cores
                .iter()
                .all(|c| t.cores.get(c.0 as usize).is_some_and(|ci| ci.llc == llc.id))
            && (llc.package.0 as usize) < t.packages.len();
        if !ok {
            return bad("LLC lists disagree with the CPUs and cores");
        }
    }
    let cpus_in_llcs: usize = t.llcs.iter().map(|l| l.cpus.len()).sum();
    let cores_in_llcs: usize = t.llcs.iter().map(|l| l.cores.len()).sum();
    if cpus_in_llcs != t.cpus.len() || cores_in_llcs != t.cores.len() {
        return bad("every CPU and core must belong to exactly one LLC");
    }
    for (i, p) in t.packages.iter().enumerate() {
        if p.id.0 as usize != i || p.llcs.iter().any(|l| (l.0 as usize) >= t.llcs.len()) {
            return bad("package ids must be dense and list existing LLCs");
        }
    }
    Ok(())
}

/// Reject configurations the policy `kind` cannot honour. Every policy
/// checks the same things with the same words; only SMT isolation is the
/// default policy's alone.
pub(crate) fn validate_config(c: &SchedConfig, kind: PolicyKind) -> Result<(), SchedError> {
    let bad = |m: String| Err(SchedError::Config(m));
    if c.max_entities == 0 || c.max_entities > MAX_ENTITIES_LIMIT {
        return bad(format!(
            "max_entities must be in 1..={MAX_ENTITIES_LIMIT}, not {}",
            c.max_entities
        ));
    }
    for mode in Mode::ALL {
        let table = c.tunables.quantum_table(mode);
        if table.base_quantum == 0 || table.minimal_quantum == 0 || table.maximum_latency == 0 {
            return bad(format!(
                "{mode}: base_quantum, minimal_quantum and maximum_latency must be positive"
            ));
        }
        if table.quantum_multipliers.contains(&0) {
            return bad(format!("{mode}: quantum_multipliers must be at least 1"));
        }
    }
    if c.tunables.load_medium > c.tunables.load_high {
        return bad(format!(
            "load_medium ({}) must not exceed load_high ({})",
            c.tunables.load_medium, c.tunables.load_high
        ));
    }
    if c.smt_isolation && kind != PolicyKind::Haiku {
        return bad(format!(
            "smt_isolation: the {kind} policy cannot keep SMT siblings to one VM; only haiku can"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CpuId, VmId};

    fn spec(vm: u32) -> EntitySpec {
        EntitySpec {
            vm: VmId(vm),
            class: SchedClass::Timeshare,
            priority: 10,
            affinity: CpuSet::first_n(2),
        }
    }

    #[test]
    fn spec_validation() {
        let t = Topology::from_spec("1x2x1").unwrap();
        assert_eq!(validate_spec(&spec(0), &t).unwrap(), CpuSet::first_n(2));
        let mut s = spec(0);
        s.affinity = CpuSet::single(CpuId(7));
        assert_eq!(validate_spec(&s, &t), Err(SchedError::EmptyAffinity));
        s.affinity = CpuSet::first_n(2);
        s.priority = 0;
        assert!(matches!(
            validate_spec(&s, &t),
            Err(SchedError::BadPriority { .. })
        ));
        assert!(validate_priority(SchedClass::Realtime, 100).is_ok());
        assert!(validate_priority(SchedClass::Realtime, 99).is_err());
        assert!(validate_priority(SchedClass::Idle, 0).is_ok());
        assert!(validate_priority(SchedClass::Idle, 1).is_err());
    }
}
