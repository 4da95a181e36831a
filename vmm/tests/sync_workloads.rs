//! The bench guest's synchronising workloads under KVM (skipped without
//! /dev/kvm): a spin barrier every vCPU meets at, and a TLB-shootdown-like
//! IPI round trip to every sibling, each on more vCPUs than host CPUs,
//! under the host kernel and under Pacer's scheduler; and the shootdown's
//! IPIs turned into directed yields by relaxed co-scheduling.

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
        shootdown_whole(policy, &r);
    }
}

/// A 3-vCPU shootdown VM's results are whole: it succeeded, the
/// initiator (vCPU 0) counted round trips to its 2 peers with their
/// latency, and each responder answered every request.
fn shootdown_whole(label: &str, r: &vmm::results::VmResult) {
    succeeded(label, r);
    let m = &r.vcpu_metrics;
    assert_eq!(m.len(), 3, "{label}: {m:?}");
    let init = m[0].shootdown.as_ref().expect("SHOOTDOWN_DONE");
    assert!(init.initiator && init.peer == 2, "{label}: {init:?}");
    assert!(init.count > 0 && m[0].shootdowns_per_s.unwrap() > 0.0);
    let l = init.latency_ns.as_ref().expect("round-trip latency");
    assert_eq!(l.count, init.count);
    assert_eq!(l.histogram_count, l.count);
    assert!(l.p50_ns <= l.p99_ns && l.p99_ns <= l.max_ns, "{l:?}");
    for resp in &m[1..] {
        let s = resp.shootdown.as_ref().expect("SHOOTDOWN_DONE");
        assert!(!s.initiator && s.peer == 0, "{label}: {s:?}");
        // It answered every request (the last one, maybe, after the
        // initiator stopped counting).
        assert!(s.count >= init.count, "{label}: {s:?} vs {init:?}");
        assert!(resp.shootdowns_per_s.is_none());
    }
}

/// A 3-vCPU shootdown VM with `coschedule = mode` beside a 1-vCPU hog on
/// 2 host CPUs, haiku under `threads`, 1 s: both VMs checked whole.
fn shootdown_beside_a_hog(dir: &TempDir, mode: &str) -> vmm::results::RunResults {
    let sd = vm_table("sd", "shootdown duration_ms=1000 work_us=20").replace(
        "vcpus = 1",
        &format!("vcpus = 3\ncpus = \"0-1\"\ncoschedule = \"{mode}\""),
    );
    let hog =
        vm_table("hog", "cpu duration_ms=1000").replace("vcpus = 1", "vcpus = 1\ncpus = \"0-1\"");
    let text = format!(
        "[host]\npolicy = \"haiku\"\ndispatch = \"threads\"\ncpus = \"0-1\"\n\
         log_dir = \"logs\"\n\n{sd}{hog}"
    );
    let res = common::run_config(dir, &text);
    shootdown_whole(mode, &res.vms[0]);
    succeeded(mode, &res.vms[1]);
    res
}

/// Relaxed co-scheduling's directed yield under KVM: a 3-vCPU shootdown
/// VM beside a 1-vCPU hog on 2 host CPUs (2:1), haiku with Pacer's own
/// local APIC (`threads`; under `ranked` the IPIs stay in KVM). The
/// responders never halt, so with 4 runnable vCPUs on 2 CPUs the
/// initiator's IPIs keep meeting a responder that waits preempted; the
/// engine turns such an IPI into `yield_to` and the scheduler gives the
/// sender's CPU to the responder: the run's CPU counters show directed
/// yields (the shootdown guest never writes the yield port, so each one
/// is an IPI's). With co-scheduling off the same VM gets none. Counts
/// only, no times (19-28 directed yields a run here, next to two
/// `nice -n 19 yes` loads).
#[test]
fn an_ipi_to_a_preempted_sibling_is_a_directed_yield_only_with_relaxed_coscheduling() {
    if !kvm_or_skip(
        "an_ipi_to_a_preempted_sibling_is_a_directed_yield_only_with_relaxed_coscheduling",
    ) {
        return;
    }
    let _one = serial();
    let dir = TempDir::new("sync-cosched");
    for mode in ["relaxed", "off"] {
        let res = shootdown_beside_a_hog(&dir, mode);
        let cpus = res.sched_cpus.as_ref().expect("haiku's CPU counters");
        assert_eq!(cpus.len(), 2, "{mode}: {cpus:?}");
        let yields: u64 = cpus.iter().map(|c| c.directed_yields).sum();
        let costarts: u64 = cpus.iter().map(|c| c.costarts).sum();
        eprintln!("{mode}: {yields} directed yields, {costarts} co-start kicks");
        if mode == "relaxed" {
            assert!(yields > 0, "{mode}: no directed yield: {cpus:?}");
        } else {
            assert_eq!(yields, 0, "{mode}: {cpus:?}");
        }
    }
}

/// A turn passed by an IPI is given back (`vcpu_engine::spin_watch`): the
/// same 3-vCPU shootdown VM beside a 1-vCPU hog on 2 host CPUs, under
/// `threads`. Wider than its CPUs and relaxed, the VM's initiator passes
/// its turn to a responder that waits parked when it sends it an IPI; the
/// responder, which answers between granules of work and never spins,
/// gives the rest of that turn (or of its next own, if the pass was not
/// taken) to the initiator waiting parked at the spin watch's look 100 us
/// in, so the initiator sees the answer within a slice. Responders give
/// turns back (the initiator, at most the two its responders pass it
/// with the IPI that says they are done); with
/// co-scheduling off there is no pass and nothing to give back. Counts
/// only, no times (about 180-240 turns given back in a run here).
#[test]
fn a_responder_passed_a_turn_by_an_ipi_gives_it_back_to_the_sender() {
    if !kvm_or_skip("a_responder_passed_a_turn_by_an_ipi_gives_it_back_to_the_sender") {
        return;
    }
    let _one = serial();
    let dir = TempDir::new("sync-give-back");
    for mode in ["relaxed", "off"] {
        let res = shootdown_beside_a_hog(&dir, mode);
        let given: Vec<u64> = res.vms[0]
            .vcpu_stats
            .iter()
            .map(|s| s.turns_given_back)
            .collect();
        eprintln!("{mode}: turns given back per vCPU {given:?}");
        assert_eq!(given.len(), 3, "{mode}: {given:?}");
        // The initiator is passed a turn only by a responder's IPI that
        // says it is done, one each at the run's end.
        assert!(
            given[0] <= 2,
            "{mode}: the initiator gave turns back: {given:?}"
        );
        if mode == "relaxed" {
            assert!(
                given[1] + given[2] > 0,
                "{mode}: no turn given back: {given:?}"
            );
        } else {
            assert_eq!(given[1] + given[2], 0, "{mode}: {given:?}");
        }
        let hog_given: u64 = res.vms[1]
            .vcpu_stats
            .iter()
            .map(|s| s.turns_given_back)
            .sum();
        assert_eq!(hog_given, 0, "{mode}: the hog VM gave turns back");
    }
}

/// The spin watch (`vcpu_engine::spin_watch`): a spin lock VM wider than
/// its CPUs, next to a hog VM, under `threads`. With relaxed
/// co-scheduling its vCPUs found spinning while a sibling that may hold
/// the lock waits parked yield to that sibling (the guest's lock has no PV
/// path and never writes the yield port, so each yield is the watch's);
/// the hog VM, with no PAUSE in its compute loop, yields only while its
/// vCPUs wait for each other as the guest starts (a PAUSE loop too), a
/// few times against the lock VM's 150-ish here; with co-scheduling off
/// nothing is watched. Counts only, no times.
#[test]
fn a_vcpu_spinning_on_a_parked_sibling_yields_to_it_only_with_relaxed_coscheduling() {
    if !kvm_or_skip(
        "a_vcpu_spinning_on_a_parked_sibling_yields_to_it_only_with_relaxed_coscheduling",
    ) {
        return;
    }
    let _one = serial();
    let dir = TempDir::new("sync-spin-watch");
    for mode in ["relaxed", "off"] {
        let lock = vm_table("lock", "spinlock duration_ms=1000 cs_ns=2000 gap_ns=2000").replace(
            "vcpus = 1",
            &format!("vcpus = 3\ncpus = \"0-1\"\ncoschedule = \"{mode}\""),
        );
        let hog = vm_table("hog", "cpu duration_ms=1000").replace(
            "vcpus = 1",
            &format!("vcpus = 3\ncpus = \"0-1\"\ncoschedule = \"{mode}\""),
        );
        let text = format!(
            "[host]\npolicy = \"haiku\"\ndispatch = \"threads\"\ncpus = \"0-1\"\n\
             log_dir = \"logs\"\n\n{lock}{hog}"
        );
        let res = common::run_config(&dir, &text);
        succeeded(mode, &res.vms[0]);
        succeeded(mode, &res.vms[1]);
        let yields =
            |r: &vmm::results::VmResult| r.vcpu_stats.iter().map(|s| s.spin_yields).sum::<u64>();
        let (lock_yields, hog_yields) = (yields(&res.vms[0]), yields(&res.vms[1]));
        eprintln!("{mode}: spin yields: lock VM {lock_yields}, hog VM {hog_yields}");
        if mode == "relaxed" {
            assert!(lock_yields > 0, "{mode}: {:?}", res.vms[0].vcpu_stats);
            assert!(
                hog_yields * 5 <= lock_yields,
                "{mode}: the hog VM yielded {hog_yields} times, the lock VM {lock_yields}"
            );
        } else {
            assert_eq!(lock_yields + hog_yields, 0, "{mode}: {:?}", res.vms);
        }
    }
}

/// Sibling sharing under the default dispatch (`ranked`), 3:1: a 3-vCPU
/// barrier VM beside a 3-vCPU hog VM on 2 host CPUs, beside a 3-vCPU VM
/// whose vCPUs sleep (halt) every millisecond. The barrier VM's vCPUs
/// never halt, so once it is quiet each queued sibling is placed beside
/// the sibling that owns a CPU (its run JSON's `beside_sibling`); the
/// sleeping VM shares only while its guest boots, before its vCPUs halt
/// (23 placements against the barrier VM's 214 in a run here); with
/// co-scheduling off nothing is placed. A shared turn ends at its slice's
/// end on whichever sibling's thread runs then: some end on a sibling
/// placed beside the owner (`shared_turns_ended`), none without sharing.
/// Counts only, no times.
#[test]
fn a_wide_vm_that_never_halts_shares_its_cpus_with_its_queued_siblings() {
    if !kvm_or_skip("a_wide_vm_that_never_halts_shares_its_cpus_with_its_queued_siblings") {
        return;
    }
    let _one = serial();
    let dir = TempDir::new("sync-sibling-share");
    for mode in [None, Some("off")] {
        let cosched = mode.map_or(String::new(), |m| format!("\ncoschedule = \"{m}\""));
        let wide = |name: &str, workload: &str| {
            vm_table(name, workload)
                .replace("vcpus = 1", &format!("vcpus = 3\ncpus = \"0-1\"{cosched}"))
        };
        let text = format!(
            "[host]\npolicy = \"haiku\"\ndispatch = \"ranked\"\ncpus = \"0-1\"\n\
             log_dir = \"logs\"\n\n{}{}{}",
            wide("bar", "barrier duration_ms=1500 work_us=50"),
            wide("hog", "cpu duration_ms=1500"),
            wide("nap", "sleep duration_ms=1500 interval_us=1000"),
        );
        let res = common::run_config(&dir, &text);
        let label = mode.unwrap_or("default (relaxed)");
        for r in &res.vms {
            succeeded(label, r);
        }
        let beside = |r: &vmm::results::VmResult| {
            r.vcpu_sched
                .iter()
                .map(|s| s.beside_sibling)
                .collect::<Vec<_>>()
        };
        let (bar, nap) = (beside(&res.vms[0]), beside(&res.vms[2]));
        let ended: u64 = res.vms[0]
            .vcpu_sched
            .iter()
            .map(|s| s.shared_turns_ended)
            .sum();
        eprintln!(
            "{label}: beside a sibling: barrier VM {bar:?}, sleeping VM {nap:?}; \
             shared turns the barrier VM's siblings ended: {ended}"
        );
        if mode.is_none() {
            assert!(ended > 0, "{label}: no shared turn ended beside its owner");
            let (bar, nap) = (bar.iter().sum::<u64>(), nap.iter().sum::<u64>());
            assert!(bar > 0, "{label}: {bar}");
            // The sleeping VM shares only while its guest boots (no halt
            // for a while): a fraction of the barrier VM's placements.
            assert!(
                nap * 3 <= bar,
                "{label}: barrier VM {bar}, sleeping VM {nap}"
            );
        } else {
            let all: u64 = res.vms.iter().flat_map(beside).sum();
            assert_eq!(all, 0, "{label}: {:?}", res.vms);
            assert_eq!(ended, 0, "{label}");
        }
    }
}

/// Sibling turns under `ranked`: a 3-vCPU barrier VM with `coschedule =
/// "turns"` beside a 3-vCPU hog VM on 2 host CPUs. Its vCPUs share the
/// CPUs the VM owns, and each thread, every 250 us, gives its CPU to the
/// sibling beside it when its guest spins at the barrier: the run's
/// `spin_yields` count those turns. The hog VM, `off`, takes none.
/// Counts only, no times.
#[test]
fn a_turns_vm_under_ranked_hands_its_shared_cpu_round_its_siblings() {
    if !kvm_or_skip("a_turns_vm_under_ranked_hands_its_shared_cpu_round_its_siblings") {
        return;
    }
    let _one = serial();
    let dir = TempDir::new("sync-ranked-turns");
    let wide = |name: &str, workload: &str, cosched: &str| {
        vm_table(name, workload).replace(
            "vcpus = 1",
            &format!("vcpus = 3\ncpus = \"0-1\"\ncoschedule = \"{cosched}\""),
        )
    };
    let text = format!(
        "[host]\npolicy = \"haiku\"\ndispatch = \"ranked\"\ncpus = \"0-1\"\n\
         log_dir = \"logs\"\n\n{}{}",
        wide("bar", "barrier duration_ms=1500 work_us=50", "turns"),
        wide("hog", "cpu duration_ms=1500", "off"),
    );
    let res = common::run_config(&dir, &text);
    for r in &res.vms {
        succeeded("ranked turns", r);
    }
    let turns =
        |r: &vmm::results::VmResult| r.vcpu_stats.iter().map(|s| s.spin_yields).sum::<u64>();
    let (bar, hog) = (turns(&res.vms[0]), turns(&res.vms[1]));
    eprintln!("ranked turns: barrier VM {bar}, hog VM {hog}");
    assert!(bar > 0, "{:?}", res.vms[0].vcpu_stats);
    assert_eq!(hog, 0, "{:?}", res.vms[1].vcpu_stats);
}

/// Paced sibling turns under `ranked`: a 3-vCPU VM relaxed by default
/// beside a 3-vCPU hog VM relaxed too, on 2 host CPUs. Both share the
/// CPUs they own. The barrier VM's threads, seen spinning at their slices'
/// ends, start looking, and give their CPU to the sibling beside them from
/// the barrier (`spin_yields`); a shootdown's answering siblings, which
/// took its IPI since the initiator gave them the CPU, give it back
/// (`turns_given_back`). The barrier's and the spin lock's siblings spin
/// together, so their threads take the kernel's turns at the long slice
/// (`long_turns`); only the shootdown's initiator spins, so its VM never
/// does. The hog VM never spins, so it never looks, gives nothing and
/// takes no long turns. Counts only, no times.
#[test]
fn a_relaxed_vm_under_ranked_paces_its_turns_by_its_spins() {
    if !kvm_or_skip("a_relaxed_vm_under_ranked_paces_its_turns_by_its_spins") {
        return;
    }
    let _one = serial();
    let wide = |name: &str, workload: &str| {
        vm_table(name, workload).replace("vcpus = 1", "vcpus = 3\ncpus = \"0-1\"")
    };
    let count = |r: &vmm::results::VmResult, f: fn(&vcpu_engine::vcpu::VcpuStats) -> u64| {
        r.vcpu_stats.iter().map(f).sum::<u64>()
    };
    for (workload, label) in [
        ("barrier duration_ms=1500 work_us=50", "barrier"),
        ("shootdown duration_ms=1500 work_us=20", "shootdown"),
        (
            "spinlock duration_ms=1500 cs_ns=2000 gap_ns=2000",
            "spinlock",
        ),
    ] {
        let dir = TempDir::new(&format!("sync-ranked-paced-{label}"));
        let text = format!(
            "[host]\npolicy = \"haiku\"\ndispatch = \"ranked\"\ncpus = \"0-1\"\n\
             log_dir = \"logs\"\n\n{}{}",
            wide("smp", workload),
            wide("hog", "cpu duration_ms=1500"),
        );
        let res = common::run_config(&dir, &text);
        for r in &res.vms {
            succeeded(label, r);
        }
        let (smp, hog) = (&res.vms[0], &res.vms[1]);
        let yields = count(smp, |s| s.spin_yields);
        let given_back = count(smp, |s| s.turns_given_back);
        let long_turns =
            |r: &vmm::results::VmResult| r.vcpu_sched.iter().map(|s| s.long_turns).sum::<u64>();
        let long = long_turns(smp);
        eprintln!(
            "ranked paced {label}: spin yields {yields}, turns given back {given_back}, \
             long kernel turns {long}"
        );
        assert!(yields > 0, "{label}: {:?}", smp.vcpu_stats);
        if label == "shootdown" {
            assert!(given_back > 0, "{label}: {:?}", smp.vcpu_stats);
            assert_eq!(long, 0, "{label}: {:?}", smp.vcpu_sched);
        } else {
            assert!(long > 0, "{label}: {:?}", smp.vcpu_sched);
        }
        assert_eq!(long_turns(hog), 0, "{label}: {:?}", hog.vcpu_sched);
        assert_eq!(
            count(hog, |s| s.spin_yields),
            0,
            "{label}: {:?}",
            hog.vcpu_stats
        );
        assert_eq!(
            count(hog, |s| s.turns_given_back),
            0,
            "{label}: {:?}",
            hog.vcpu_stats
        );
    }
}
