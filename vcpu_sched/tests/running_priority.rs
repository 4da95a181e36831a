//! `running_priority`: what a VMM's trace records at each dispatch is the
//! effective priority the snapshot shows, None on an idle CPU and under a
//! policy without priorities.

use vcpu_sched::{
    build, CpuId, EntitySpec, PolicyKind, SchedClass, SchedConfig, StopReason, Topology, VmId,
};

#[test]
fn running_priority_is_the_dispatched_entitys_effective_priority() {
    let topo = Topology::from_spec("1x2x1").unwrap();
    for policy in [PolicyKind::Haiku, PolicyKind::GlobalRoundRobin] {
        let sched = build(
            topo.clone(),
            SchedConfig {
                policy,
                ..SchedConfig::default()
            },
        )
        .unwrap();
        let e = sched
            .add_entity(
                EntitySpec {
                    vm: VmId(0),
                    class: SchedClass::Timeshare,
                    priority: 10,
                    affinity: topo.all_cpus(),
                },
                0,
            )
            .unwrap();
        let cpu = sched.wake(e, 0).unwrap().expect("placed").cpu;
        let d = sched.schedule(cpu, 1000, StopReason::Idle).unwrap();
        assert_eq!(d.entity, Some(e));
        let other = CpuId(1 - cpu.0);
        assert_eq!(sched.running_priority(other), None, "an idle CPU");
        match policy {
            PolicyKind::Haiku => {
                let snap = sched.snapshot(2000);
                let row = snap.entities.iter().find(|r| r.id == e).unwrap();
                assert_eq!(sched.running_priority(cpu), Some(row.effective_priority));
            }
            _ => assert_eq!(sched.running_priority(cpu), None, "{policy:?}"),
        }
        assert_eq!(sched.running_priority(CpuId(99)), None);
    }
}
