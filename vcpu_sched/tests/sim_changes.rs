//! Changes while running (CPUs out of service, affinity, class, mode),
//! driven through the simulator under every policy: the effect each
//! change promises, and no violation of the monitor's rules around it.

#![cfg(feature = "sim")]

use vcpu_sched::sim::{self, ChangeSpec, Dist, GroupSpec, SimReport, Workload};
use vcpu_sched::{CpuId, CpuSet, Mode, PolicyKind, SchedClass, SchedConfig};

fn hogs(policy: PolicyKind, count: u32) -> Workload {
    Workload::new("changes", "1x2x2", 40)
        .with_seed(5)
        .with_sched(SchedConfig {
            policy,
            ..SchedConfig::default()
        })
        .group(GroupSpec::new("hog", count, Dist::fixed(300.0)))
}

fn run(w: &Workload) -> SimReport {
    let r = sim::run(w).unwrap_or_else(|e| panic!("{}: {e}", w.sched.policy));
    assert_eq!(r.violations.total(), 0, "{}", r.to_table());
    r
}

#[test]
fn a_cpu_out_of_service_runs_nothing_and_loses_nothing() {
    for policy in PolicyKind::ALL {
        // CPU 3 out for the whole run: four hogs share CPUs 0-2.
        let w = hogs(policy, 4).change(ChangeSpec::cpu_enabled(0, 3, false));
        let r = run(&w);
        assert_eq!(r.cpus[3].busy_ns, 0, "{policy}\n{}", r.to_table());
        assert!(!r.snapshot.cpus[3].in_service, "{policy}");
        assert!(r.total.useful_cpus > 2.9, "{policy}\n{}", r.to_table());
        for v in &r.vcpus {
            assert!(
                v.throughput.run_ns > 0,
                "{policy}: vCPU {} starved",
                v.index
            );
        }
        // Out for the first half only: it works in the second.
        let w = hogs(policy, 4)
            .change(ChangeSpec::cpu_enabled(0, 3, false))
            .change(ChangeSpec::cpu_enabled(20_000, 3, true));
        let r = run(&w);
        let busy = r.cpus[3].busy_ns as f64 / r.window_ns as f64;
        assert!(
            (0.4..=0.55).contains(&busy),
            "{policy}: CPU 3 busy {busy:.3}"
        );
        assert!(r.snapshot.cpus[3].in_service);
    }
}

#[test]
fn the_last_cpu_in_service_stays() {
    let w = Workload::new("last", "1x1x1", 5)
        .group(GroupSpec::new("hog", 1, Dist::fixed(100.0)))
        .change(ChangeSpec::cpu_enabled(1000, 0, false));
    match sim::run(&w) {
        Err(sim::SimError::Sched(vcpu_sched::SchedError::LastCpuInService(CpuId(0)))) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn affinity_changes_move_running_and_waiting_vcpus() {
    for policy in PolicyKind::ALL {
        // Two hogs confined to CPU 0, then allowed on 2-3 only.
        let w = hogs(policy, 2)
            .change(ChangeSpec::affinity(
                0,
                "hog",
                CpuSet::single(CpuId(0)).unwrap(),
            ))
            .change(ChangeSpec::affinity(
                20_000,
                "hog",
                CpuSet::parse_list("2-3").unwrap(),
            ));
        let r = run(&w);
        let share = |c: usize| r.cpus[c].busy_ns as f64 / r.window_ns as f64;
        assert!(
            share(0) > 0.45 && share(0) < 0.55,
            "{policy}\n{}",
            r.to_table()
        );
        assert_eq!(r.cpus[1].busy_ns, 0, "{policy}");
        if policy != PolicyKind::StaticPinning {
            // Both run side by side once allowed on two CPUs.
            assert!(share(2) + share(3) > 0.95, "{policy}\n{}", r.to_table());
        }
        assert!(r.cpus[2].busy_ns + r.cpus[3].busy_ns > 0, "{policy}");
    }
}

#[test]
fn a_group_made_realtime_runs_first() {
    // Two groups of two hogs on one CPU; the second becomes realtime at
    // 20 ms and from then on takes the CPU (realtime is never penalised
    // and runs before timeshare).
    for policy in [PolicyKind::Haiku, PolicyKind::GlobalRoundRobin] {
        let w = Workload::new("rt", "1x1x1", 40)
            .with_sched(SchedConfig {
                policy,
                ..SchedConfig::default()
            })
            .group(GroupSpec::new("a", 1, Dist::fixed(300.0)))
            .group(GroupSpec::new("b", 1, Dist::fixed(300.0)))
            .change(ChangeSpec::class(20_000, "b", SchedClass::Realtime, 100));
        let r = run(&w);
        let a = r.group("a").unwrap().throughput.run_ns as f64;
        let b = r.group("b").unwrap().throughput.run_ns as f64;
        let total = r.window_ns as f64;
        assert!(b / total > 0.7, "{policy}: b ran {:.3}", b / total);
        assert!(a / total > 0.2, "{policy}: a ran {:.3} before", a / total);
    }
}

#[test]
fn the_mode_follows_a_live_switch() {
    // Two hogs on one CPU switch from low latency to power saving:
    // quantum ends (context switches) get rarer, the quanta longer.
    let base =
        Workload::new("mode", "1x1x1", 60).group(GroupSpec::new("hog", 2, Dist::fixed(100_000.0)));
    let low = run(&base);
    let switched = run(&base.clone().change(ChangeSpec::mode(0, Mode::PowerSaving)));
    let ctx = |r: &SimReport| r.cpus[0].context_switches;
    assert!(
        ctx(&switched) * 2 < ctx(&low),
        "low latency {} vs power saving {} switches",
        ctx(&low),
        ctx(&switched)
    );
    assert_eq!(switched.snapshot.mode, Mode::PowerSaving);
}
