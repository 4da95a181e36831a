//! Boot the bench guest in real VMs (skipped without /dev/kvm).

mod common;

use common::{kvm_or_skip, run_config, vm_table, TempDir};
use devices::{Marker, RecordKind};
use std::time::{Duration, Instant};
use vmm::config::Config;
use vmm::vm::{open_kvm, VmEvent};
use vmm::{Vm, VmOptions};

#[test]
fn boot_one_vm_one_vcpu_and_read_results() {
    if !kvm_or_skip("boot_one_vm_one_vcpu_and_read_results") {
        return;
    }
    let dir = TempDir::new("one");
    let t0 = Instant::now();
    let res = run_config(
        &dir,
        &format!(
            "[host]\nlog_dir = \"logs\"\n\n{}",
            vm_table("one", "cpu duration_ms=300 report_ms=100")
        ),
    );
    let wall = t0.elapsed();
    let vm = &res.vms[0];
    assert!(res.ok, "{vm:?}");
    assert_eq!(vm.status, "success");
    let m = &vm.milestones;
    let fi = m.first_instruction_ms.expect("FIRST_INSTRUCTION marker");
    let kr = m.kernel_ready_ms.expect("KERNEL_READY marker");
    assert!(fi <= kr);
    assert!(m.first_result_ms.is_some());
    println!("boot: first instruction {fi:.1} ms, kernel ready {kr:.1} ms, run wall {wall:?}");
    assert!(vm.cmdline.contains("tsc_khz=") && vm.cmdline.contains("vcpus=1"));
    // Samples and a WORK_DONE with sane units/s.
    assert!(vm
        .records
        .iter()
        .any(|r| r.record.kind == RecordKind::WorkSample));
    let w = &vm.work[0];
    assert!(w.done, "{w:?}");
    assert!(w.units > 0 && w.units_per_s.unwrap() > 0.0);
    // The JSON-lines file has the start line, every marker and record,
    // and the stop line.
    let lines = std::fs::read_to_string(dir.0.join("logs/latest/one.results.jsonl")).unwrap();
    assert_eq!(
        lines.lines().count(),
        vm.markers.len() + vm.records.len() + vm.rejected_records + 2
    );
    assert!(lines.lines().next().unwrap().contains("\"type\":\"start\""));
    assert!(lines.lines().last().unwrap().contains("\"type\":\"stop\""));
    let console = std::fs::read_to_string(dir.0.join("logs/latest/one.console.log")).unwrap();
    assert!(console.contains("pacer-bench"), "{console}");
}

#[test]
fn three_vms_from_one_config() {
    if !kvm_or_skip("three_vms_from_one_config") {
        return;
    }
    let dir = TempDir::new("three");
    let mut text = String::from("[host]\nlog_dir = \"logs\"\n\n");
    for n in ["a", "b", "c"] {
        text += &vm_table(n, "cpu duration_ms=200 report_ms=50");
    }
    let res = run_config(&dir, &text);
    assert!(res.ok, "{:?}", res.vms);
    assert_eq!(res.vms.len(), 3);
    for (vm, name) in res.vms.iter().zip(["a", "b", "c"]) {
        assert_eq!(vm.name, name);
        assert_eq!(vm.status, "success");
        assert!(
            vm.work.first().is_some_and(|w| w.done && w.units > 0),
            "{vm:?}"
        );
        assert!(dir
            .0
            .join(format!("logs/latest/{name}.results.jsonl"))
            .exists());
    }
}

#[test]
fn triple_fault_stops_only_its_vm() {
    if !kvm_or_skip("triple_fault_stops_only_its_vm") {
        return;
    }
    let dir = TempDir::new("tf");
    let text = format!(
        "[host]\nlog_dir = \"logs\"\n\n{}{}",
        vm_table("faulty", "triple_fault"),
        vm_table("healthy", "cpu duration_ms=300 report_ms=100")
    );
    let res = run_config(&dir, &text);
    assert!(!res.ok);
    let faulty = &res.vms[0];
    assert_eq!(faulty.status, "triple_fault", "{faulty:?}");
    assert!(!faulty.ok);
    assert!(faulty.message.contains("vcpu0"), "{}", faulty.message);
    let healthy = &res.vms[1];
    assert_eq!(healthy.status, "success", "{healthy:?}");
    assert!(healthy.work[0].done);
    // The faulty VM stopped well before the healthy one finished its work.
    assert!(
        faulty.wall_ms < healthy.wall_ms,
        "{} vs {}",
        faulty.wall_ms,
        healthy.wall_ms
    );
}

#[test]
fn pause_stops_progress_and_resume_continues() {
    if !kvm_or_skip("pause_stops_progress_and_resume_continues") {
        return;
    }
    let dir = TempDir::new("pause");
    let path = dir.config(
        &vm_table("pz", "cpu duration_ms=800 report_ms=50")
            .replace("vcpus = 1", "vcpus = 1\ncpus = \"0\""),
    );
    let config = Config::load(&path).unwrap();
    let kvm = open_kvm().unwrap();
    let mut vm = Vm::create(
        &kvm,
        &config.vms[0].spec(),
        VmOptions {
            log_dir: None,
            ..Default::default()
        },
    )
    .unwrap();
    let events = vm.subscribe();
    vm.start().unwrap();

    let samples = |timeout: Duration| -> Vec<f64> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        while let Ok(ev) = events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            if let VmEvent::Record { record, t_ms, .. } = ev {
                if record.kind == RecordKind::WorkSample {
                    out.push(t_ms);
                }
            }
        }
        out
    };
    // Wait for the workload to be producing samples.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = 0;
    while seen < 2 && Instant::now() < deadline {
        if let Ok(VmEvent::Record { record, .. }) = events.recv_timeout(Duration::from_millis(100))
        {
            if record.kind == RecordKind::WorkSample {
                seen += 1;
            }
        }
    }
    assert_eq!(seen, 2, "no work samples before the pause");

    // The vCPU thread is named `<vm>/vcpu<N>` and pinned to the VM's cpus.
    let mut found = false;
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let t = t.unwrap().path();
        let comm = std::fs::read_to_string(t.join("comm")).unwrap_or_default();
        if comm.trim() == "pz/vcpu0" {
            let status = std::fs::read_to_string(t.join("status")).unwrap();
            assert!(status.contains("Cpus_allowed_list:\t0\n"), "{status}");
            found = true;
        }
    }
    assert!(found, "no thread named pz/vcpu0");

    let t_pause = Instant::now();
    vm.pause(Duration::from_secs(5)).unwrap();
    println!("pause acknowledged after {:?}", t_pause.elapsed());
    // A record already in flight may still arrive right after the ack; then
    // nothing for the rest of the pause.
    let _ = samples(Duration::from_millis(30));
    let during = samples(Duration::from_millis(400));
    assert!(
        during.is_empty(),
        "guest progressed while paused: {during:?}"
    );

    vm.resume(Duration::from_secs(5)).unwrap();
    let after = samples(Duration::from_millis(300));
    assert!(!after.is_empty(), "no progress after resume");
    // Done markers follow; the VM then exits successfully.
    let res = vm.wait();
    assert_eq!(res.status, "success", "{res:?}");
    assert!(res
        .markers
        .iter()
        .any(|m| m.marker == Marker::WorkloadDone.name()));
}

#[test]
fn timeout_panic_and_two_vcpu_vm() {
    if !kvm_or_skip("timeout_panic_and_two_vcpu_vm") {
        return;
    }
    let dir = TempDir::new("timeout");
    let text = format!(
        "[host]\nlog_dir = \"logs\"\n\n{}{}{}",
        vm_table("runaway", "idle").replace("timeout_s = 60", "timeout_s = 0.4"),
        vm_table("smp", "cpu duration_ms=200 report_ms=100").replace("vcpus = 1", "vcpus = 2"),
        vm_table("panicky", "panic")
    );
    let res = run_config(&dir, &text);
    let runaway = &res.vms[0];
    assert_eq!(runaway.status, "timeout", "{runaway:?}");
    assert!(
        runaway.message.contains("timeout_s 0.4"),
        "{}",
        runaway.message
    );
    assert!(runaway.wall_ms < 5_000.0);
    let smp = &res.vms[1];
    assert_eq!(smp.status, "success", "{smp:?}");
    assert!(smp.cmdline.contains("vcpus=2"));
    // The bench guest's exception path: PANIC marker, exit status 0x10E.
    let panicky = &res.vms[2];
    assert_eq!(panicky.status, "guest_panic", "{panicky:?}");
    assert!(panicky.message.contains("vector 14"), "{}", panicky.message);
    assert!(panicky.markers.iter().any(|m| m.marker == "panic"));
}

#[test]
fn kick_latency_pause_resume_cycles() {
    if !kvm_or_skip("kick_latency_pause_resume_cycles") {
        return;
    }
    // Pause (kick out of KVM_RUN + ack) a vCPU spinning in guest ring 3, many
    // times; print the latency distribution (what the dispatch mechanism itself costs).
    let dir = TempDir::new("kick");
    let path = dir.config(&vm_table("kick", "cpu duration_ms=1500 report_ms=500"));
    let config = Config::load(&path).unwrap();
    let kvm = open_kvm().unwrap();
    let mut vm = Vm::create(
        &kvm,
        &config.vms[0].spec(),
        VmOptions {
            log_dir: None,
            ..Default::default()
        },
    )
    .unwrap();
    let events = vm.subscribe();
    vm.start().unwrap();
    // Wait until the workload runs in ring 3.
    loop {
        match events
            .recv_timeout(Duration::from_secs(30))
            .expect("workload start")
        {
            VmEvent::Marker {
                marker: Marker::WorkloadStart,
                ..
            } => break,
            _ => continue,
        }
    }
    let mut lat = Vec::new();
    for _ in 0..40 {
        let t = Instant::now();
        vm.pause(Duration::from_secs(5)).unwrap();
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        vm.resume(Duration::from_secs(5)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "pause (kick + ack) latency over {} cycles: min {:.0} us, median {:.0} us, p90 {:.0} us, max {:.0} us",
        lat.len(),
        lat[0],
        lat[lat.len() / 2],
        lat[lat.len() * 9 / 10],
        lat[lat.len() - 1]
    );
    let res = vm.wait();
    assert_eq!(res.status, "success", "{res:?}");
    assert!(res.vcpu_stats[0].kicks >= 40, "{:?}", res.vcpu_stats);
}
