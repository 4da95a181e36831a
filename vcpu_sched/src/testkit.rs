//! Test support shared by the policies' unit tests: the fixtures every
//! policy's tests use ([`add`], [`ts`]), a protocol-level random driver
//! that plays random event sequences against any
//! [`crate::VcpuScheduler`] while keeping a model of the protocol, and
//! checks every decision against it; and the factory check each policy
//! runs.

use crate::{
    CpuId, CpuSet, EntityId, EntitySpec, SchedClass, SchedError, StopReason, Topology,
    VcpuScheduler, VmId,
};
use proptest::prelude::*;
use std::collections::HashMap;

/// Add an entity of VM 0 with `class`, `prio` and the CPU list `aff`,
/// at time 0.
pub fn add(s: &(impl VcpuScheduler + ?Sized), class: SchedClass, prio: u8, aff: &str) -> EntityId {
    s.add_entity(
        EntitySpec {
            vm: VmId(0),
            class,
            priority: prio,
            affinity: CpuSet::parse_list(aff).unwrap(),
        },
        0,
    )
    .unwrap()
}

/// [`add`] a timeshare entity of the default priority.
pub fn ts(s: &(impl VcpuScheduler + ?Sized), aff: &str) -> EntityId {
    add(s, SchedClass::Timeshare, 10, aff)
}

/// `build` makes the policy `kind` (reporting `name`): one entity is
/// woken onto an idle CPU with a kick, dispatched there, and the
/// snapshot survives a JSON round trip.
pub fn built_by_the_factory(kind: crate::PolicyKind, name: &str) {
    let cfg = crate::SchedConfig {
        policy: kind,
        ..crate::SchedConfig::default()
    };
    let s = crate::build(Topology::from_spec("1x2x2").unwrap(), cfg).unwrap();
    assert_eq!(s.name(), name);
    let spec = EntitySpec {
        vm: VmId(3),
        class: SchedClass::Timeshare,
        priority: 10,
        affinity: CpuSet::first_n(4),
    };
    let e = s.add_entity(spec, 0).unwrap();
    let d = s.wake(e, 0).unwrap().unwrap();
    assert!(d.kick);
    let next = s.schedule(d.cpu, 1, StopReason::Preempted).unwrap();
    assert_eq!(next.entity, Some(e));
    let snap = s.snapshot(2);
    assert_eq!(snap.entities[0].vm, VmId(3));
    let json = snap.to_json().unwrap();
    assert_eq!(crate::SchedSnapshot::from_json(&json).unwrap(), snap);
}

/// The handle of a removed entity never reaches the entity added next in
/// its slot (the reproduction of a stale-handle bug: add, remove a, add b in a's slot,
/// wake a): every call with it fails as stale, and a never-issued handle
/// as unknown.
pub fn stale_handles_are_refused(kind: crate::PolicyKind) {
    let cfg = crate::SchedConfig {
        policy: kind,
        ..crate::SchedConfig::default()
    };
    let s = crate::build(Topology::from_spec("1x2x1").unwrap(), cfg).unwrap();
    let spec = EntitySpec {
        vm: VmId(0),
        class: SchedClass::Timeshare,
        priority: 10,
        affinity: CpuSet::first_n(2),
    };
    let a = s.add_entity(spec.clone(), 0).unwrap();
    s.remove_entity(a, 1).unwrap();
    let b = s.add_entity(spec.clone(), 2).unwrap();
    assert_eq!(b.index(), a.index(), "{kind}: the slot is reused");
    assert_ne!(b, a, "{kind}: with a new generation");
    assert_eq!(s.wake(a, 3), Err(SchedError::StaleEntity(a)), "{kind}");
    assert_eq!(s.wake_by(a, b, 3), Err(SchedError::StaleEntity(a)));
    assert_eq!(
        s.wake_by(b, a, 3),
        Err(SchedError::StaleEntity(a)),
        "{kind}: a stale waker is refused too"
    );
    assert_eq!(s.remove_entity(a, 3), Err(SchedError::StaleEntity(a)));
    assert_eq!(s.set_priority(a, 20, 3), Err(SchedError::StaleEntity(a)));
    // b was not touched by any of that: it is still blocked.
    let d = s.wake(b, 4).unwrap().expect("b was blocked");
    assert_eq!(
        s.schedule(d.cpu, 5, StopReason::Idle).unwrap().entity,
        Some(b)
    );
    // Removed while running: stale at once, although its CPU still holds it.
    s.remove_entity(b, 6).unwrap();
    assert_eq!(s.wake(b, 6), Err(SchedError::StaleEntity(b)));
    let c = s.add_entity(spec, 7).unwrap();
    assert_ne!(
        c.index(),
        b.index(),
        "{kind}: not reused while a CPU runs it"
    );
    assert_eq!(
        s.schedule(d.cpu, 8, StopReason::Blocked).unwrap().entity,
        None
    );
    let ghost = EntityId::new(b.index(), b.generation() + 5);
    assert_eq!(s.wake(ghost, 9), Err(SchedError::UnknownEntity(ghost)));
    let far = EntityId::new(1 << 20, 0);
    assert_eq!(s.wake(far, 9), Err(SchedError::UnknownEntity(far)));
}

/// One random event.
#[derive(Debug, Clone)]
pub enum Op {
    /// Add entity `i` of the generated specs (if not present).
    Add(usize),
    /// Wake entity `i`.
    Wake(usize),
    /// CPU `i` (modulo the CPU count) calls `schedule`; the byte picks the reason.
    Schedule(usize, u8),
    /// Remove entity `i`.
    Remove(usize),
    /// Change the priority of entity `i`.
    SetPriority(usize),
    /// New affinity for entity `i` (the mask's bits as CPU ids, modulo the
    /// CPU count; empty: all CPUs).
    SetAffinity(usize, u32),
    /// New class for entity `i` (the byte picks it as in [`specs`]).
    SetClass(usize, u8),
    /// Switch to power saving (`true`) or low latency.
    SetMode(bool),
    /// CPU `i` (modulo the CPU count) out of service (`false`) or back.
    SetCpu(usize, bool),
    /// Take a snapshot and check its totals.
    Snapshot,
}

/// A random small topology spec: 1-2 packages, 1-2 LLCs, 1-3 cores, 1-2 threads.
pub fn topology() -> impl Strategy<Value = Topology> {
    (1u32..=2, 1u32..=2, 1u32..=3, 1u32..=2).prop_map(|(p, l, c, t)| {
        Topology::from_spec(&format!("{p}x{l}x{c}x{t}")).expect("valid spec")
    })
}

/// Random entity specs (affinity CPU ids are reduced modulo the real CPU
/// count by [`drive`]; an empty affinity becomes all CPUs).
pub fn specs() -> impl Strategy<Value = Vec<EntitySpec>> {
    prop::collection::vec((0u32..3, 0u8..10, any::<u32>()), 1..10).prop_map(|v| {
        v.into_iter()
            .map(|(vm, c, mask)| {
                let (class, priority) = match c {
                    0 => (SchedClass::Realtime, 100 + (mask % 21) as u8),
                    1 => (SchedClass::Idle, 0),
                    _ => (SchedClass::Timeshare, 1 + (mask % 30) as u8),
                };
                // The mask's low 32 bits as CPU ids 0..32.
                let affinity = (0..32)
                    .filter(|b| mask & (1 << b) != 0)
                    .map(CpuId)
                    .collect::<Result<CpuSet, _>>()
                    .unwrap();
                EntitySpec {
                    vm: VmId(vm),
                    class,
                    priority,
                    affinity,
                }
            })
            .collect()
    })
}

/// Random event sequences.
pub fn ops() -> impl Strategy<Value = Vec<(Op, u16)>> {
    let op = prop_oneof![
        2 => (0usize..10).prop_map(Op::Add),
        6 => (0usize..10).prop_map(Op::Wake),
        8 => (0usize..8, any::<u8>()).prop_map(|(c, r)| Op::Schedule(c, r)),
        1 => (0usize..10).prop_map(Op::Remove),
        1 => (0usize..10).prop_map(Op::SetPriority),
        1 => (0usize..10, any::<u32>()).prop_map(|(i, m)| Op::SetAffinity(i, m)),
        1 => (0usize..10, 0u8..10).prop_map(|(i, c)| Op::SetClass(i, c)),
        1 => any::<bool>().prop_map(Op::SetMode),
        1 => (0usize..8, any::<bool>()).prop_map(|(c, on)| Op::SetCpu(c, on)),
        1 => Just(Op::Snapshot),
    ];
    prop::collection::vec((op, 0u16..2000), 1..250)
}

/// The model's view of one entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum M {
    Blocked,
    /// Runnable, queued; the flag is a pending wake (kept until the next Blocked stop).
    Waiting(bool),
    /// Running; the flag is a pending wake.
    Running(CpuId, bool),
}

/// Play `ops` against `sched` (built on `topo`), checking after every
/// event the policy's own invariants (`check`) and the model:
/// - `wake` answers `Some` exactly when the entity was blocked, and names
///   a CPU of its affinity;
/// - `schedule` dispatches only runnable, not-running entities, inside
///   their affinity, never one entity on two CPUs;
/// - a `Blocked` stop of an entity woken while running keeps it runnable;
/// - errors for unknown entities and CPUs.
pub fn drive(
    sched: &dyn VcpuScheduler,
    topo: &Topology,
    specs: &[EntitySpec],
    ops: &[(Op, u16)],
    check: &dyn Fn() -> Result<(), String>,
) -> Result<(), TestCaseError> {
    let n = topo.num_cpus() as u32;
    let mut specs: Vec<EntitySpec> = specs
        .iter()
        .map(|s| {
            let mut s = s.clone();
            let mut aff: CpuSet = s
                .affinity
                .iter()
                .map(|c| CpuId(c.0 % n))
                .collect::<Result<_, _>>()
                .unwrap();
            if aff.is_empty() {
                aff = topo.all_cpus();
            }
            s.affinity = aff;
            s
        })
        .collect();
    let mut ids: Vec<Option<EntityId>> = vec![None; specs.len()];
    let mut model: HashMap<EntityId, (usize, M)> = HashMap::new();
    let mut removed: Vec<EntityId> = Vec::new();
    let mut in_service = vec![true; n as usize];
    let mut running: Vec<Option<EntityId>> = vec![None; n as usize];
    let mut now = 1_000u64;
    for (op, dt) in ops {
        now += u64::from(*dt) * 1000;
        match op {
            Op::Add(i) => {
                let i = i % specs.len();
                if ids[i].is_none() {
                    let id = sched
                        .add_entity(specs[i].clone(), now)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert!(!model.contains_key(&id), "id {:?} reused while live", id);
                    // Handles of removed entities stay stale, also once
                    // their slot holds the new entity.
                    for old in &removed {
                        prop_assert!(*old != id, "handle {:?} issued twice", id);
                        prop_assert_eq!(sched.wake(*old, now), Err(SchedError::StaleEntity(*old)));
                        prop_assert_eq!(
                            sched.set_priority(*old, 10, now),
                            Err(SchedError::StaleEntity(*old))
                        );
                    }
                    prop_assert!(
                        !running.contains(&Some(id)),
                        "id {:?} reused while a CPU runs it",
                        id
                    );
                    ids[i] = Some(id);
                    model.insert(id, (i, M::Blocked));
                }
            }
            Op::Wake(i) => {
                let Some(id) = ids[i % specs.len()] else {
                    continue;
                };
                let (si, state) = model[&id];
                let d = sched
                    .wake(id, now)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                match state {
                    M::Blocked => {
                        let d = d.ok_or_else(|| {
                            TestCaseError::fail("wake of a blocked entity returned None")
                        })?;
                        prop_assert!(
                            specs[si].affinity.contains(d.cpu),
                            "wake placed {:?} outside affinity",
                            id
                        );
                        model.insert(id, (si, M::Waiting(false)));
                    }
                    M::Waiting(_) => {
                        prop_assert!(d.is_none(), "wake of a waiting entity returned Some")
                    }
                    M::Running(c, _) => {
                        prop_assert!(d.is_none(), "wake of a running entity returned Some");
                        model.insert(id, (si, M::Running(c, true)));
                    }
                }
            }
            Op::Schedule(c, r) => {
                let cpu = CpuId(*c as u32 % n);
                let cur = running[cpu.0 as usize];
                let reason = match (cur, r % 4) {
                    (None, 0) => StopReason::Preempted,
                    (None, _) => StopReason::Idle,
                    (Some(_), 0) => StopReason::QuantumEnd,
                    (Some(_), 1) => StopReason::Preempted,
                    (Some(_), 2) => StopReason::Blocked,
                    (Some(_), _) => StopReason::Yielded,
                };
                if let Some(e) = cur {
                    if let Some((si, M::Running(_, pending))) = model.get(&e).copied() {
                        let next = match (reason, pending) {
                            (StopReason::Blocked, false) => M::Blocked,
                            (StopReason::Blocked, true) => M::Waiting(false),
                            _ => M::Waiting(pending),
                        };
                        model.insert(e, (si, next));
                    }
                }
                let d = sched
                    .schedule(cpu, now, reason)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                running[cpu.0 as usize] = d.entity;
                match d.entity {
                    Some(e) => {
                        prop_assert!(d.quantum > 0, "zero quantum");
                        let (si, state) = model.get(&e).copied().ok_or_else(|| {
                            TestCaseError::fail(format!("dispatched unknown {e:?}"))
                        })?;
                        let M::Waiting(pending) = state else {
                            return Err(TestCaseError::fail(format!(
                                "dispatched {e:?} in state {state:?}"
                            )));
                        };
                        prop_assert!(
                            specs[si].affinity.contains(cpu),
                            "{:?} runs on {:?} outside its affinity",
                            e,
                            cpu
                        );
                        prop_assert!(
                            in_service[cpu.0 as usize],
                            "{:?} runs on {:?} out of service",
                            e,
                            cpu
                        );
                        let elsewhere = running
                            .iter()
                            .enumerate()
                            .any(|(k, r)| k != cpu.0 as usize && *r == Some(e));
                        prop_assert!(!elsewhere, "{:?} runs on two CPUs", e);
                        model.insert(e, (si, M::Running(cpu, pending)));
                    }
                    None => prop_assert_eq!(d.quantum, 0),
                }
            }
            Op::Remove(i) => {
                let i = i % specs.len();
                let Some(id) = ids[i] else { continue };
                sched
                    .remove_entity(id, now)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(
                    sched.remove_entity(id, now),
                    Err(SchedError::StaleEntity(id))
                );
                prop_assert_eq!(sched.wake(id, now), Err(SchedError::StaleEntity(id)));
                ids[i] = None;
                model.remove(&id);
                removed.push(id);
            }
            Op::SetPriority(i) => {
                let i = i % specs.len();
                let Some(id) = ids[i] else { continue };
                let (lo, hi) = match specs[i].class {
                    SchedClass::Realtime => (100, 120),
                    SchedClass::Timeshare => (1, 99),
                    SchedClass::Idle => (0, 0),
                };
                sched
                    .set_priority(id, hi, now)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                sched
                    .set_priority(id, lo, now)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(sched.set_priority(id, 121, now).is_err());
            }
            Op::SetAffinity(i, mask) => {
                let i = i % specs.len();
                let mut aff: CpuSet = (0..32)
                    .filter(|b| mask & (1 << b) != 0)
                    .map(|b| CpuId(b % n))
                    .collect::<Result<_, _>>()
                    .unwrap();
                if aff.is_empty() {
                    aff = topo.all_cpus();
                }
                specs[i].affinity = aff.clone();
                let Some(id) = ids[i] else { continue };
                let kicks = sched
                    .set_affinity(id, aff, now)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(kicks.iter().all(|k| k.0 < n), "kicks {:?}", kicks);
                prop_assert_eq!(
                    sched.set_affinity(id, CpuSet::single(CpuId(n + 5)).unwrap(), now),
                    Err(SchedError::EmptyAffinity)
                );
            }
            Op::SetClass(i, c) => {
                let i = i % specs.len();
                let (class, priority) = match c % 10 {
                    0 => (SchedClass::Realtime, 100 + c),
                    1 => (SchedClass::Idle, 0),
                    _ => (SchedClass::Timeshare, 1 + c),
                };
                let refused = ids[i].map(|id| sched.set_class(id, class, 200, now));
                let ok = matches!(refused, None | Some(Err(SchedError::BadPriority { .. })));
                prop_assert!(ok, "priority 200 accepted: {:?}", refused);
                specs[i].class = class;
                specs[i].priority = priority;
                let Some(id) = ids[i] else { continue };
                sched
                    .set_class(id, class, priority, now)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            Op::SetMode(power_saving) => {
                let mode = if *power_saving {
                    crate::Mode::PowerSaving
                } else {
                    crate::Mode::LowLatency
                };
                sched.set_mode(mode, now);
                prop_assert_eq!(sched.mode(), mode);
            }
            Op::SetCpu(c, on) => {
                let c = *c as u32 % n;
                match sched.set_cpu_enabled(CpuId(c), *on, now) {
                    Ok(kicks) => {
                        prop_assert!(kicks.iter().all(|k| k.0 < n), "kicks {:?}", kicks);
                        in_service[c as usize] = *on;
                    }
                    Err(SchedError::LastCpuInService(_)) => {
                        prop_assert!(!on && in_service.iter().filter(|x| **x).count() == 1)
                    }
                    Err(e) => return Err(TestCaseError::fail(e.to_string())),
                }
            }
            Op::Snapshot => {
                let s = sched.snapshot(now);
                prop_assert_eq!(s.entities.len(), model.len());
                prop_assert_eq!(s.cpus.len(), n as usize);
                for e in &s.entities {
                    prop_assert!(model.contains_key(&e.id));
                }
            }
        }
        check().map_err(TestCaseError::fail)?;
    }
    prop_assert!(matches!(
        sched.schedule(CpuId(n), now, StopReason::Idle),
        Err(SchedError::UnknownCpu(_))
    ));
    prop_assert!(matches!(
        sched.wake(EntityId::new(1 << 30, 0), now),
        Err(SchedError::UnknownEntity(_))
    ));
    Ok(())
}

/// The snapshot says where every entity is and what every CPU runs: on
/// 1x2x1, two entities run, a third waits, a fourth is blocked.
pub fn snapshot_says_where_entities_are(kind: crate::PolicyKind) {
    use crate::stats::EntityState;
    let cfg = crate::SchedConfig {
        policy: kind,
        ..crate::SchedConfig::default()
    };
    let s = crate::build(Topology::from_spec("1x2x1").unwrap(), cfg).unwrap();
    let spec = |priority| EntitySpec {
        vm: VmId(1),
        class: SchedClass::Timeshare,
        priority,
        affinity: CpuSet::first_n(2),
    };
    let ids: Vec<EntityId> = (0..4)
        .map(|i| s.add_entity(spec(10 + i), 0).unwrap())
        .collect();
    for id in &ids[..3] {
        s.wake(*id, 1).unwrap();
    }
    let d0 = s.schedule(CpuId(0), 2, StopReason::Idle).unwrap();
    let d1 = s.schedule(CpuId(1), 2, StopReason::Idle).unwrap();
    let snap = s.snapshot(1_000);
    let row = |id: EntityId| snap.entities.iter().find(|e| e.id == id).unwrap();
    let running: Vec<EntityId> = [d0.entity, d1.entity].into_iter().flatten().collect();
    assert_eq!(running.len(), 2, "{kind}");
    for (cpu, d) in [(CpuId(0), &d0), (CpuId(1), &d1)] {
        let e = row(d.entity.unwrap());
        assert_eq!(e.state, EntityState::Running, "{kind}");
        assert_eq!(e.cpu, Some(cpu), "{kind}");
        assert_eq!(e.core.map(|c| c.0), Some(cpu.0), "{kind}");
        assert_eq!(e.quantum_used, 998, "{kind}");
        assert!(e.quantum >= d.quantum, "{kind}");
        assert_eq!(e.affinity, CpuSet::first_n(2), "{kind}");
        let c = &snap.cpus[cpu.0 as usize];
        assert_eq!(c.running, d.entity, "{kind}");
        assert_eq!(c.running_priority, Some(e.effective_priority), "{kind}");
    }
    let waiting = ids[..3].iter().find(|id| !running.contains(id)).unwrap();
    let w = row(*waiting);
    assert_eq!(w.state, EntityState::Waiting, "{kind}");
    assert_eq!(
        (w.class, w.base_priority),
        (SchedClass::Timeshare, 10 + waiting.index() as u8)
    );
    assert_eq!(w.penalty, 0, "{kind}");
    assert_eq!(row(ids[3]).state, EntityState::Blocked, "{kind}");
    assert_eq!(row(ids[3]).cpu, None, "{kind}");
    assert_eq!(snap.cores.len(), 2, "{kind}");
    assert!(
        snap.cores.iter().map(|c| c.ready).sum::<u32>() >= 1,
        "{kind}"
    );
    assert_eq!(
        snap.cores.iter().map(|c| c.running).sum::<u32>(),
        2,
        "{kind}"
    );
    assert_eq!(snap.mode, crate::Mode::LowLatency);
    // The cheap per-entity read of the ready wait agrees with the snapshot
    // (a wait under way included), and knows no stale handle.
    for id in &ids {
        assert_eq!(
            s.ready_wait(*id, 1_000),
            Some(row(*id).ready_wait),
            "{kind}"
        );
    }
    assert_eq!(s.ready_wait(*waiting, 1_000), Some(999), "{kind}");
    assert_eq!(s.ready_wait(running[0], 1_000), Some(1), "{kind}");
    let gone = s.add_entity(spec(20), 3).unwrap();
    s.remove_entity(gone, 4).unwrap();
    assert_eq!(s.ready_wait(gone, 1_000), None, "{kind}");
    // Out of service, a CPU says so.
    s.set_cpu_enabled(CpuId(1), false, 2_000).unwrap();
    assert!(!s.snapshot(2_000).cpus[1].in_service, "{kind}");
}
