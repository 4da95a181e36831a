//! The scheduled engine on real KVM vCPUs (skipped without /dev/kvm):
//! every policy and every dispatch mechanism run overcommitted VMs to
//! completion, core sets are never left, a faulting VM stops alone, pause
//! and resume work, a halted vCPU blocks instead of spinning, and under
//! KVM's local APIC the engine still learns halts and wake-ups.

mod common;

use common::{kvm_or_skip, run_config, vm_table, TempDir};
use devices::RecordKind;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vcpu_engine::cpu_map::CpuMap;
use vcpu_engine::host_cpus::HostCpuSet;
use vcpu_engine::{DispatchKind, Engine, EngineConfig};
use vmm::config::Config;
use vmm::vm::{open_kvm, VcpuScheduling, VmEvent};
use vmm::{Vm, VmOptions};

fn host(policy: &str, dispatch: DispatchKind) -> String {
    format!("[host]\npolicy = \"{policy}\"\ndispatch = \"{dispatch}\"\nlog_dir = \"logs\"\n\n")
}

#[test]
fn every_policy_and_dispatch_runs_overcommitted_vms() {
    if !kvm_or_skip("every_policy_and_dispatch_runs_overcommitted_vms") {
        return;
    }
    let dir = TempDir::new("engine-all");
    let online = vcpu_engine::host_cpus::online_cpus().unwrap();
    for policy in ["haiku", "global-rr", "pinned", "eevdf"] {
        for dispatch in DispatchKind::ALL {
            // engine-smoke's shape: 2-vCPU VMs, more vCPUs than host CPUs.
            let n = online.len();
            let mut text = host(policy, dispatch);
            for i in 0..n {
                text += &vm_table(&format!("v{i}"), "cpu duration_ms=300 report_ms=100")
                    .replace("vcpus = 1", "vcpus = 2");
            }
            let res = run_config(&dir, &text);
            for vm in &res.vms {
                assert_eq!(vm.status, "success", "{policy}/{dispatch}: {vm:?}");
                assert_eq!(vm.vcpu_metrics.len(), 2, "{policy}/{dispatch}: {vm:?}");
                for (m, s) in vm.vcpu_metrics.iter().zip(&vm.vcpu_sched) {
                    // Every vCPU progressed, on CPUs of its core set only.
                    assert!(
                        m.units_per_s.is_some_and(|u| u > 0.0),
                        "{policy}/{dispatch}: {m:?}"
                    );
                    assert!(s.run_ns > 0, "{policy}/{dispatch}: {s:?}");
                    let ran_on = HostCpuSet::parse_list(&s.host_cpus).unwrap();
                    assert!(
                        !ran_on.is_empty() && ran_on.is_subset(&online),
                        "{policy}/{dispatch}: {s:?}"
                    );
                }
            }
        }
    }
}

/// VMs that end one after another while the others run: each end takes
/// its VM's vCPUs off the CPUs (a sibling may be picked by another CPU at
/// that very moment), and the CPUs go on to the VMs still running. A CPU
/// left owned by a vCPU whose thread had ended ran nothing more: the
/// remaining VMs timed out.
#[test]
fn vms_ending_one_after_another_leave_their_cpus_to_the_others() {
    if !kvm_or_skip("vms_ending_one_after_another_leave_their_cpus_to_the_others") {
        return;
    }
    let dir = TempDir::new("engine-ends");
    for dispatch in [DispatchKind::Threads, DispatchKind::Workers] {
        for round in 0..3 {
            let mut text = host("haiku", dispatch);
            for i in 0..6u32 {
                // Ends 60 ms apart; 3 vCPUs each, more than the host's CPUs.
                text += &vm_table(
                    &format!("v{i}"),
                    &format!("cpu duration_ms={}", 100 + 60 * i),
                )
                .replace("vcpus = 1", "vcpus = 3")
                .replace("timeout_s = 60", "timeout_s = 30");
            }
            let res = run_config(&dir, &text);
            for vm in &res.vms {
                assert_eq!(
                    vm.status, "success",
                    "{dispatch}, round {round}: {}: {}",
                    vm.name, vm.message
                );
            }
        }
    }
}

#[test]
fn core_sets_are_never_left() {
    if !kvm_or_skip("core_sets_are_never_left") {
        return;
    }
    let online = vcpu_engine::host_cpus::online_cpus().unwrap();
    let cpus: Vec<u32> = online.iter().map(|c| c.0).collect();
    let (first, last) = (cpus[0], cpus[cpus.len() - 1]);
    let dir = TempDir::new("engine-affinity");
    for dispatch in DispatchKind::ALL {
        let mut text = host("haiku", dispatch);
        for (i, cpu) in [first, last, first].iter().enumerate() {
            text += &vm_table(&format!("p{i}"), "cpu duration_ms=300 report_ms=100")
                .replace("vcpus = 1", &format!("vcpus = 1\ncpus = \"{cpu}\""));
        }
        let res = run_config(&dir, &text);
        for (vm, cpu) in res.vms.iter().zip([first, last, first]) {
            assert_eq!(vm.status, "success", "{vm:?}");
            assert_eq!(
                vm.vcpu_sched[0].host_cpus,
                cpu.to_string(),
                "{dispatch}: {vm:?}"
            );
        }
    }
}

#[test]
fn a_faulting_vm_stops_alone() {
    if !kvm_or_skip("a_faulting_vm_stops_alone") {
        return;
    }
    let dir = TempDir::new("engine-fault");
    for dispatch in DispatchKind::ALL {
        let text = format!(
            "{}{}{}",
            host("haiku", dispatch),
            vm_table("faulty", "triple_fault"),
            vm_table("healthy", "cpu duration_ms=400 report_ms=100")
        );
        let res = run_config(&dir, &text);
        assert_eq!(res.vms[0].status, "triple_fault", "{:?}", res.vms[0]);
        assert_eq!(res.vms[1].status, "success", "{:?}", res.vms[1]);
        assert!(res.vms[1].work[0].done);
    }
}

#[test]
fn a_halted_vcpu_blocks_instead_of_spinning() {
    if !kvm_or_skip("a_halted_vcpu_blocks_instead_of_spinning") {
        return;
    }
    // `idle` halts with interrupts off for ever: one HLT exit, then the vCPU
    // is blocked in the scheduler until its VM times out.
    let dir = TempDir::new("engine-idle");
    let text = format!(
        "{}{}",
        host("haiku", DispatchKind::Threads),
        vm_table("idle", "idle").replace("timeout_s = 60", "timeout_s = 0.5")
    );
    let res = run_config(&dir, &text);
    let vm = &res.vms[0];
    assert_eq!(vm.status, "timeout", "{vm:?}");
    let st = vm.vcpu_stats[0];
    assert_eq!(st.halts, 1, "{vm:?}");
    // Port I/O of its console output, the halt, and kicks: the stop's, and
    // quantum ends while it booted (more of them on a loaded host). Nothing
    // else: a vCPU spinning on its HLT would show more halts or exits.
    assert_eq!(st.exits - st.pio_exits - st.kicks, st.halts, "{vm:?}");
    assert!(st.kicks <= 10, "{vm:?}");
}

#[test]
fn under_kvms_local_apic_the_engine_learns_halts_and_wakes() {
    if !kvm_or_skip("under_kvms_local_apic_the_engine_learns_halts_and_wakes") {
        return;
    }
    // A vCPU that sleeps 1 ms at a time (KVM's APIC timer wakes it) and a
    // ping-pong pair (KVM's IPIs wake them): no HLT ever exits to Pacer,
    // yet the scheduler must see the vCPUs block and wake, or a sleeper
    // would count as running all the time.
    let dir = TempDir::new("engine-kvm-irqchip");
    for dispatch in [DispatchKind::KvmIrqchip, DispatchKind::Ranked] {
        let text = format!(
            "{}{}{}",
            // Sampled often enough that wake-ups KVM handles alone (the
            // default 5 ms lets most pass unseen) are caught too.
            host("haiku", dispatch).replace("[host]\n", "[host]\nkvm_poll_us = 200\n"),
            vm_table("sleeper", "sleep duration_ms=600 interval_us=1000"),
            vm_table("pair", "pingpong duration_ms=600").replace("vcpus = 1", "vcpus = 2"),
        );
        let res = run_config(&dir, &text);
        for vm in &res.vms {
            assert_eq!(vm.status, "success", "{dispatch}: {vm:?}");
            for (st, s) in vm.vcpu_stats.iter().zip(&vm.vcpu_sched) {
                assert_eq!(st.halts, 0, "{dispatch}: KVM handles HLT: {vm:?}");
                assert!(
                    s.wakeups > 20,
                    "{dispatch}: wake-ups learnt from KVM: {s:?}"
                );
            }
        }
        // Never learning a halt would charge it all 600 ms; a loaded host
        // delays the looks that learn them (309 ms seen under kvm-irqchip
        // with both CPUs busy building), so the bound is three quarters.
        let sleeper = &res.vms[0].vcpu_sched[0];
        assert!(
            sleeper.run_ns < 450_000_000,
            "{dispatch}: a vCPU asleep most of 600 ms is not charged as running: {sleeper:?}"
        );
    }
}

#[test]
fn pause_and_resume_under_the_engine() {
    if !kvm_or_skip("pause_and_resume_under_the_engine") {
        return;
    }
    let dir = TempDir::new("engine-pause");
    let path = dir.config(&vm_table("pz", "cpu duration_ms=800 report_ms=50"));
    let config = Config::load(&path).unwrap();
    let online = vcpu_engine::host_cpus::online_cpus().unwrap();
    for dispatch in DispatchKind::ALL {
        let engine: Arc<Engine> = Engine::new(
            {
                let mut c = EngineConfig::default();
                c.policy = vcpu_sched::PolicyKind::Haiku;
                c.mode = vcpu_sched::Mode::LowLatency;
                c.smt_isolation = false;
                c.dispatch = dispatch;
                c.halt_poll_ns = 200_000;
                c
            },
            CpuMap::from_host(&online).unwrap(),
        )
        .unwrap();
        let kvm = open_kvm().unwrap();
        let mut vm = Vm::create(
            &kvm,
            &config.vms[0].spec(),
            VmOptions {
                log_dir: None,
                scheduling: VcpuScheduling::Scheduled(engine.clone()),
                ..Default::default()
            },
        )
        .unwrap();
        let events = vm.subscribe();
        vm.start().unwrap();
        let samples = |timeout: Duration| -> usize {
            let deadline = Instant::now() + timeout;
            let mut n = 0;
            while let Ok(ev) =
                events.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                if let VmEvent::Record { record, .. } = ev {
                    n += (record.kind == RecordKind::WorkSample) as usize;
                }
            }
            n
        };
        assert!(
            samples(Duration::from_millis(400)) > 0,
            "no progress before pause"
        );
        vm.pause(Duration::from_secs(5)).unwrap();
        let _ = samples(Duration::from_millis(30));
        assert_eq!(
            samples(Duration::from_millis(300)),
            0,
            "{dispatch}: progress while paused"
        );
        vm.resume(Duration::from_secs(5)).unwrap();
        assert!(
            samples(Duration::from_millis(300)) > 0,
            "{dispatch}: no progress after resume"
        );
        let res = vm.wait();
        assert_eq!(res.status, "success", "{res:?}");
        engine.shutdown();
    }
}

#[test]
fn smt_isolation_defaults_to_threads_and_refuses_ranked() {
    let dir = TempDir::new("engine-smt-dispatch");
    let base = "[host]\npolicy = \"haiku\"\nlog_dir = \"logs\"\nsmt_isolation = true\n";
    let vm = vm_table("v", "cpu");
    let c = Config::load(&dir.config(&format!("{base}\n{vm}"))).unwrap();
    assert_eq!(c.host.dispatch, DispatchKind::Threads);
    let c = Config::load(&dir.config(&format!("{base}dispatch = \"workers\"\n\n{vm}"))).unwrap();
    assert_eq!(c.host.dispatch, DispatchKind::Workers);
    let e = Config::load(&dir.config(&format!("{base}dispatch = \"ranked\"\n\n{vm}")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("host.smt_isolation") && e.contains("ranked"),
        "{e}"
    );
    // Without SMT isolation the default is ranked.
    let c = Config::load(&dir.config(&format!(
        "[host]\npolicy = \"haiku\"\nlog_dir = \"logs\"\n\n{vm}"
    )))
    .unwrap();
    assert_eq!(c.host.dispatch, DispatchKind::Ranked);
    assert!(!c.host.dispatch_explicit);
}
