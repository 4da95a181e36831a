//! The checks every policy makes on what it is given: the topology and the
//! configuration at `build`, an entity's spec at `add_entity`, a priority
//! at `set_priority`. One place, so the same mistake gets the same error
//! whichever policy is asked.

use crate::policy::{PolicyKind, SchedConfig};
use crate::topology::MAX_CPUS;
use crate::tunables::Mode;
use crate::tunables::{PRIORITY_IDLE, PRIORITY_LOWEST_ACTIVE, PRIORITY_MAX_TIMESHARE};
use crate::tunables::{PRIORITY_REALTIME_MAX, PRIORITY_REALTIME_MIN};
use crate::{CpuId, CpuSet, EntitySpec, SchedClass, SchedError, Topology};

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

/// Reject a topology that is not what the constructors build: at least
/// one CPU and at most [`MAX_CPUS`]; dense ids equal to the vector index;
/// every reference in range; a CPU's LLC and package those of its core, a
/// core's package that of its LLC; every list (a core's CPUs, an LLC's
/// cores and CPUs, a package's LLCs, cores and CPUs) exactly the units
/// that name it, in id order, so no unit is empty, none is listed twice or
/// left out; SMT siblings consecutive with their index as position.
/// [`Topology`]'s fields are public, so every policy checks this at `new`
/// (and [`Topology::validate`] lets an embedder check first).
pub(crate) fn validate_topology(t: &Topology) -> Result<(), SchedError> {
    let bad = |m: String| Err(SchedError::Topology(m));
    if t.cpus.is_empty() {
        return bad("no CPUs".into());
    }
    if t.cpus.len() > MAX_CPUS {
        return bad(format!(
            "{} CPUs is more than the supported maximum of {MAX_CPUS}",
            t.cpus.len()
        ));
    }
    let (n_cores, n_llcs, n_pkgs) = (t.cores.len(), t.llcs.len(), t.packages.len());
    for (i, c) in t.cpus.iter().enumerate() {
        if c.id.0 as usize != i {
            return bad(format!("CPU at index {i} has id {}", c.id.0));
        }
        if c.core.0 as usize >= n_cores
            || c.llc.0 as usize >= n_llcs
            || c.package.0 as usize >= n_pkgs
        {
            return bad(format!(
                "CPU {i} names a core, LLC or package that does not exist"
            ));
        }
        let core = &t.cores[c.core.0 as usize];
        if core.llc != c.llc || core.package != c.package {
            return bad(format!(
                "CPU {i} is in LLC {} and package {}, its core {} in LLC {} and package {}",
                c.llc.0, c.package.0, c.core.0, core.llc.0, core.package.0
            ));
        }
    }
    for (i, core) in t.cores.iter().enumerate() {
        if core.id.0 as usize != i {
            return bad(format!("core at index {i} has id {}", core.id.0));
        }
        if core.llc.0 as usize >= n_llcs || core.package.0 as usize >= n_pkgs {
            return bad(format!(
                "core {i} names an LLC or package that does not exist"
            ));
        }
        if t.llcs[core.llc.0 as usize].package != core.package {
            return bad(format!(
                "core {i} is in package {}, its LLC {} in package {}",
                core.package.0, core.llc.0, t.llcs[core.llc.0 as usize].package.0
            ));
        }
    }
    for (i, llc) in t.llcs.iter().enumerate() {
        if llc.id.0 as usize != i {
            return bad(format!("LLC at index {i} has id {}", llc.id.0));
        }
        if llc.package.0 as usize >= n_pkgs {
            return bad(format!("LLC {i} names a package that does not exist"));
        }
    }
    for (i, p) in t.packages.iter().enumerate() {
        if p.id.0 as usize != i {
            return bad(format!("package at index {i} has id {}", p.id.0));
        }
    }
    // Every list must be exactly the units that name it, in id order
    // (one pass collects them: linear in the size of the topology).
    let mut by_core = vec![Vec::new(); n_cores];
    let mut by_llc = vec![Vec::new(); n_llcs];
    let mut by_pkg = vec![Vec::new(); n_pkgs];
    for c in &t.cpus {
        by_core[c.core.0 as usize].push(c.id.0);
        by_llc[c.llc.0 as usize].push(c.id.0);
        by_pkg[c.package.0 as usize].push(c.id.0);
    }
    let mut cores_by_llc = vec![Vec::new(); n_llcs];
    let mut cores_by_pkg = vec![Vec::new(); n_pkgs];
    for core in &t.cores {
        cores_by_llc[core.llc.0 as usize].push(core.id.0);
        cores_by_pkg[core.package.0 as usize].push(core.id.0);
    }
    let mut llcs_by_pkg = vec![Vec::new(); n_pkgs];
    for llc in &t.llcs {
        llcs_by_pkg[llc.package.0 as usize].push(llc.id.0);
    }
    let ids = |v: &[CpuId]| -> Vec<u32> { v.iter().map(|c| c.0).collect() };
    let list = |unit: &str, id: usize, what: &str, found: Vec<u32>, expected: &[u32]| {
        if expected.is_empty() {
            return bad(format!("{unit} {id} has no {what}"));
        }
        if found != expected {
            return bad(format!(
                "{unit} {id} lists {what} {found:?}, but {expected:?} name it"
            ));
        }
        Ok(())
    };
    for (i, core) in t.cores.iter().enumerate() {
        list("core", i, "CPUs", ids(&core.cpus), &by_core[i])?;
        for (k, cpu) in core.cpus.iter().enumerate() {
            if t.cpus[cpu.0 as usize].smt_index as usize != k || cpu.0 != core.cpus[0].0 + k as u32
            {
                return bad(format!(
                    "core {i}: CPU {} must be SMT thread {k}, numbered after its siblings",
                    cpu.0
                ));
            }
        }
    }
    for (i, llc) in t.llcs.iter().enumerate() {
        list("LLC", i, "CPUs", ids(&llc.cpus), &by_llc[i])?;
        let found = llc.cores.iter().map(|c| c.0).collect();
        list("LLC", i, "cores", found, &cores_by_llc[i])?;
    }
    for (i, p) in t.packages.iter().enumerate() {
        list("package", i, "CPUs", ids(&p.cpus), &by_pkg[i])?;
        let found = p.cores.iter().map(|c| c.0).collect();
        list("package", i, "cores", found, &cores_by_pkg[i])?;
        let found = p.llcs.iter().map(|l| l.0).collect();
        list("package", i, "LLCs", found, &llcs_by_pkg[i])?;
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
    if c.tunables.share_half_life == 0 {
        return bad("share_half_life must be positive".into());
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
    use crate::VmId;

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
        s.affinity = CpuSet::single(CpuId(7)).unwrap();
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

    fn topo_err(t: &Topology) -> String {
        match validate_topology(t) {
            Err(SchedError::Topology(m)) => m,
            other => panic!("expected a topology error, got {other:?}"),
        }
    }

    #[test]
    fn built_topologies_are_valid() {
        for spec in ["1x1x1", "1x2x2", "2x22x2", "1x8x8x2", "4x64x4"] {
            let t = Topology::from_spec(spec).unwrap();
            assert_eq!(validate_topology(&t), Ok(()), "{spec}");
            assert_eq!(t.validate(), Ok(()), "{spec}");
        }
        let t = Topology::from_spec("1x4x2")
            .unwrap()
            .restrict([0, 2, 5, 6])
            .unwrap();
        assert_eq!(validate_topology(&t), Ok(()));
    }

    #[test]
    fn a_core_that_leaves_out_its_cpu_is_refused() {
        let mut t = Topology::from_spec("1x2x2").unwrap();
        t.cores[0].cpus.pop();
        assert_eq!(topo_err(&t), "core 0 lists CPUs [0], but [0, 1] name it");
    }

    #[test]
    fn a_duplicate_cpu_is_refused() {
        let mut t = Topology::from_spec("1x2x2").unwrap();
        t.cores[1].cpus.push(CpuId(3));
        assert_eq!(
            topo_err(&t),
            "core 1 lists CPUs [2, 3, 3], but [2, 3] name it"
        );
        let mut t = Topology::from_spec("1x2x1").unwrap();
        t.llcs[0].cpus.push(CpuId(0));
        assert_eq!(
            topo_err(&t),
            "LLC 0 lists CPUs [0, 1, 0], but [0, 1] name it"
        );
        // The same CPU in two cores.
        let mut t = Topology::from_spec("1x2x1").unwrap();
        t.cores[1].cpus = vec![CpuId(0)];
        assert!(topo_err(&t).starts_with("core 1 lists CPUs [0]"));
    }

    #[test]
    fn an_empty_package_is_refused() {
        let mut t = Topology::from_spec("1x2x1").unwrap();
        let mut p = t.packages[0].clone();
        p.id = crate::topology::PackageId(1);
        p.llcs.clear();
        p.cores.clear();
        p.cpus.clear();
        t.packages.push(p);
        assert_eq!(topo_err(&t), "package 1 has no CPUs");
        let mut t = Topology::from_spec("1x2x1").unwrap();
        t.cpus.clear();
        assert_eq!(topo_err(&t), "no CPUs");
    }

    #[test]
    fn inconsistent_units_are_refused() {
        let mut t = Topology::from_spec("2x1x1").unwrap();
        t.cpus[1].package = crate::topology::PackageId(0);
        assert!(topo_err(&t).starts_with("CPU 1 is in LLC 1 and package 0"));
        let mut t = Topology::from_spec("1x2x1").unwrap();
        t.cpus[1].core = crate::topology::CoreId(7);
        assert_eq!(
            topo_err(&t),
            "CPU 1 names a core, LLC or package that does not exist"
        );
        let mut t = Topology::from_spec("1x1x2").unwrap();
        t.cpus[1].smt_index = 0;
        assert!(topo_err(&t).starts_with("core 0: CPU 1 must be SMT thread 1"));
    }

    #[test]
    fn every_policy_refuses_a_corrupt_topology_with_the_same_words() {
        let mut t = Topology::from_spec("1x2x2").unwrap();
        t.cores[0].cpus.pop();
        let want = Err(SchedError::Topology(
            "core 0 lists CPUs [0], but [0, 1] name it".into(),
        ));
        for policy in PolicyKind::ALL {
            let cfg = SchedConfig {
                policy,
                ..SchedConfig::default()
            };
            let got = crate::build(t.clone(), cfg).map(|_| ());
            assert_eq!(got, want, "{policy}");
        }
    }
}
