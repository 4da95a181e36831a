//! The bench guest's synchronising workloads under KVM (skipped without
//! /dev/kvm): a spin barrier every vCPU meets at, and a TLB-shootdown-like
//! IPI round trip to every sibling, each on more vCPUs than host CPUs,
//! under the host kernel and under Pacer's scheduler.

mod common;

use common::{kvm_or_skip, vm_table, TempDir};
use std::sync::{Mutex, MutexGuard};

/// One VM at a time: each brings up more vCPUs than the machine has CPUs.
fn serial() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn run(
    dir: &TempDir,
    policy: &str,
    name: &str,
    vcpus: u32,
    workload: &str,
) -> vmm::results::VmResult {
    let vm = vm_table(name, workload).replace("vcpus = 1", &format!("vcpus = {vcpus}"));
    // Pacer's own local APIC under the scheduled policy, as tests/smp.rs
    // does: under `ranked` at nice 19 on a busy 2-CPU machine an AP's
    // bring-up (emulated ring 0 here) can miss the guest's 1 s timeout.
    let dispatch = if policy == "host" {
        ""
    } else {
        "dispatch = \"threads\"\n"
    };
    let text = format!("[host]\npolicy = \"{policy}\"\n{dispatch}log_dir = \"logs\"\n\n{vm}");
    let mut res = common::run_config(dir, &text);
    res.vms.remove(0)
}

/// The VM succeeded; if not, its whole result goes to stderr and the
/// failure says the policy and the VM's message (which, for a timeout,
/// says what each vCPU was doing) last, where a cut log keeps it.
fn succeeded(policy: &str, r: &vmm::results::VmResult) {
    if r.status != "success" {
        eprintln!("{policy}: {r:?}");
    }
    assert_eq!(r.status, "success", "{policy}: {}", r.message);
}

#[test]
fn barrier_reports_rounds_and_a_spin_share_on_every_vcpu() {
    if !kvm_or_skip("barrier_reports_rounds_and_a_spin_share_on_every_vcpu") {
        return;
    }
    let _one = serial();
    let dir = TempDir::new("sync-barrier");
    for policy in ["host", "haiku"] {
        let r = run(&dir, policy, "bar", 3, "barrier duration_ms=300 work_us=20");
        succeeded(policy, &r);
        assert_eq!(r.vcpu_metrics.len(), 3, "{policy}: {:?}", r.vcpu_metrics);
        let rounds: Vec<u64> = r
            .vcpu_metrics
            .iter()
            .map(|m| {
                let b = m.barrier.as_ref().expect("BARRIER_DONE");
                assert_eq!(b.participants, 3, "{policy}: {b:?}");
                let share = b.spin_share.expect("spin share");
                assert!((0.0..=1.0).contains(&share), "{policy}: {b:?}");
                assert!(m.rounds_per_s.unwrap() > 0.0, "{policy}: {m:?}");
                b.rounds
            })
            .collect();
        // Everyone leaves after the same round: the last arrival decides.
        assert!(rounds[0] > 0, "{policy}: {rounds:?}");
        assert!(
            rounds.iter().all(|&n| n == rounds[0]),
            "{policy}: {rounds:?}"
        );
    }
}

#[test]
fn shootdown_initiator_reports_round_trips_and_their_latency() {
    if !kvm_or_skip("shootdown_initiator_reports_round_trips_and_their_latency") {
        return;
    }
    let _one = serial();
    let dir = TempDir::new("sync-shootdown");
    for policy in ["host", "haiku"] {
        let r = run(
            &dir,
            policy,
            "sd",
            3,
            "shootdown duration_ms=300 work_us=20",
        );
        succeeded(policy, &r);
        let m = &r.vcpu_metrics;
        assert_eq!(m.len(), 3, "{policy}: {m:?}");
        let init = m[0].shootdown.as_ref().expect("SHOOTDOWN_DONE");
        assert!(init.initiator && init.peer == 2, "{policy}: {init:?}");
        assert!(init.count > 0 && m[0].shootdowns_per_s.unwrap() > 0.0);
        let l = init.latency_ns.as_ref().expect("round-trip latency");
        assert_eq!(l.count, init.count);
        assert_eq!(l.histogram_count, l.count);
        assert!(l.p50_ns <= l.p99_ns && l.p99_ns <= l.max_ns, "{l:?}");
        for resp in &m[1..] {
            let s = resp.shootdown.as_ref().expect("SHOOTDOWN_DONE");
            assert!(!s.initiator && s.peer == 0, "{policy}: {s:?}");
            // It answered every request (the last one, maybe, after the
            // initiator stopped counting).
            assert!(s.count >= init.count, "{policy}: {s:?} vs {init:?}");
            assert!(resp.shootdowns_per_s.is_none());
        }
    }
}
