//! Steal time under Pacer's engine (skipped without /dev/kvm): the bench
//! guest reads KVM's steal-time area, which Pacer writes at each dispatch
//! with the ready wait `vcpu_sched` accounted; over a run the guest's
//! steal per vCPU is within 5 % of the engine's `ready_wait_ns`, large
//! when the vCPUs outnumber the host CPUs and ~0 when they do not. The
//! same under `dispatch = "kvm-irqchip"`, where the local APIC is KVM's
//! but the steal-time MSR still comes to Pacer.

mod common;

use common::{kvm_or_skip, run_config, TempDir};

fn config(cpus: &str, vcpus: u32, duration_ms: u64, extra: &str) -> String {
    config_under("threads", cpus, vcpus, duration_ms, extra)
}

fn config_under(dispatch: &str, cpus: &str, vcpus: u32, duration_ms: u64, extra: &str) -> String {
    format!(
        "[host]\ncpus = \"{cpus}\"\npolicy = \"haiku\"\ndispatch = \"{dispatch}\"\nlog_dir = \"logs\"\n\n\
         [[vm]]\nname = \"hogs\"\nvcpus = {vcpus}\nmemory_mib = 32\nkernel = \"@KERNEL@\"\n\
         workload = \"cpu duration_ms={duration_ms} report_ms=500{extra}\"\ntimeout_s = 120\n"
    )
}

/// (guest steal, engine ready wait) per vCPU, ns.
fn steal_pairs(res: &vmm::results::RunResults) -> Vec<(u64, u64)> {
    let vm = &res.vms[0];
    assert_eq!(vm.status, "success", "{vm:?}");
    vm.vcpu_sched
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let m = vm
                .vcpu_metrics
                .iter()
                .find(|m| m.vcpu == i as u32)
                .unwrap_or_else(|| panic!("vcpu{i} reported nothing: {vm:?}"));
            let st = m
                .steal
                .as_ref()
                .unwrap_or_else(|| panic!("vcpu{i} reported no steal time: {m:?}"));
            (st.steal_ns, s.ready_wait_ns)
        })
        .collect()
}

/// 3 cpu hogs on one host CPU under `dispatch`: each waits about 2/3 of
/// the time, and the guest sees that wait as its steal.
fn overcommitted_steal_matches(dispatch: &str) {
    let dir = TempDir::new("steal-over");
    let duration_ms = 2000;
    let res = run_config(&dir, &config_under(dispatch, "0", 3, duration_ms, ""));
    for (i, (guest, engine)) in steal_pairs(&res).into_iter().enumerate() {
        println!(
            "{dispatch}: overcommitted vcpu{i}: guest steal {guest} ns, engine ready_wait {engine} ns"
        );
        assert!(
            engine > duration_ms * 1_000_000 / 3,
            "vcpu{i}: ready wait {engine} ns"
        );
        let diff = guest.abs_diff(engine) as f64 / engine as f64;
        assert!(
            diff <= 0.05,
            "vcpu{i}: guest {guest} ns vs engine {engine} ns ({:.1} %)",
            diff * 100.0
        );
    }
}

#[test]
fn guest_steal_is_the_engines_ready_wait() {
    if !kvm_or_skip("guest_steal_is_the_engines_ready_wait") {
        return;
    }
    overcommitted_steal_matches("threads");
}

#[test]
fn under_kvms_local_apic_guest_steal_is_still_the_engines() {
    if !kvm_or_skip("under_kvms_local_apic_guest_steal_is_still_the_engines") {
        return;
    }
    // KVM's own steal time would show only the host kernel's run delay
    // of the vCPU threads, not the engine's parking (0.58 of 1.35 s when
    // tried).
    overcommitted_steal_matches("kvm-irqchip");
}

#[test]
fn no_steal_when_undercommitted_and_none_when_switched_off() {
    if !kvm_or_skip("no_steal_when_undercommitted_and_none_when_switched_off") {
        return;
    }
    let dir = TempDir::new("steal-under");
    let online = vcpu_engine::host_cpus::online_cpus().unwrap();
    let n = online.len().min(2) as u32;
    let cpus = if n == 2 { "0-1" } else { "0" };
    let duration_ms = 1000;
    let res = run_config(&dir, &config(cpus, n, duration_ms, ""));
    for (i, (guest, engine)) in steal_pairs(&res).into_iter().enumerate() {
        println!("undercommitted vcpu{i}: guest steal {guest} ns, engine ready_wait {engine} ns");
        // A vCPU per CPU waits only for its dispatch after a wake.
        assert!(guest <= engine, "vcpu{i}: {guest} > {engine}");
        assert!(
            engine < duration_ms * 1_000_000 / 50,
            "vcpu{i}: ready wait {engine} ns"
        );
    }
    // steal=off: the guest never registers an area and reports nothing.
    let res = run_config(&dir, &config(cpus, n, 300, " steal=off"));
    let vm = &res.vms[0];
    assert_eq!(vm.status, "success", "{vm:?}");
    assert!(vm.vcpu_metrics.iter().all(|m| m.steal.is_none()), "{vm:?}");
}
