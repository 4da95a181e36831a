//! Steal time under Pacer's engine (skipped without /dev/kvm): the bench
//! guest reads KVM's steal-time area, which Pacer writes at each dispatch
//! with the ready wait `vcpu_sched` accounted; over a run the guest's
//! steal per vCPU is within 5 % of the engine's `ready_wait_ns`, large
//! when the vCPUs outnumber the host CPUs and ~0 when they do not. The
//! same under `dispatch = "kvm-irqchip"`, where the local APIC is KVM's
//! but the steal-time MSR still comes to Pacer.

mod common;

use common::{kvm_or_skip, TempDir};
use std::sync::{Mutex, MutexGuard};

/// One VM run at a time in this file: each test compares a vCPU's waits
/// as two sides account them, on CPUs no other test of it shares.
fn serial() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn run_config(dir: &TempDir, text: &str) -> vmm::results::RunResults {
    let _one = serial();
    common::run_config(dir, text)
}

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
    // A directory per dispatch: the tests of this file share one process id.
    let dir = TempDir::new(&format!("steal-over-{dispatch}"));
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
fn under_the_ranked_dispatch_guest_steal_is_the_host_kernels_wait() {
    if !kvm_or_skip("under_the_ranked_dispatch_guest_steal_is_the_host_kernels_wait") {
        return;
    }
    // Every runnable vCPU's thread is runnable in the host kernel there:
    // KVM's own steal time (the threads' run-queue wait) is the wait, and
    // the engine reports the same wait from the kernel.
    overcommitted_steal_matches("ranked");
}

/// A thread that spins on host CPU 0 until `stop` is set: another process's
/// work on the CPU the VM runs on.
fn spin_on_cpu0(
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let one: vcpu_engine::HostCpuSet = [vcpu_engine::HostCpu(0)].into_iter().collect();
        let set = one.to_cpu_set();
        // SAFETY: sched_setaffinity of the calling thread with a valid
        // cpu_set_t of the size passed.
        let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
        assert_eq!(r, 0, "pin the spinner: {}", std::io::Error::last_os_error());
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            std::hint::spin_loop();
        }
    })
}

/// CPU 0's steal in `/proc/stat` (the time this host's own hypervisor ran
/// something else on it), ns; 0 where the kernel does not count it.
fn cpu0_outer_steal_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks = stat
        .lines()
        .find(|l| l.starts_with("cpu0 "))
        .and_then(|l| l.split_whitespace().nth(8))
        .and_then(|f| f.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks * 1_000_000_000 / hz
}

#[test]
fn the_ranked_dispatchs_accounting_is_the_guests_on_a_busy_host() {
    if !kvm_or_skip("the_ranked_dispatchs_accounting_is_the_guests_on_a_busy_host") {
        return;
    }
    // Two cpu hogs on host CPU 0 while another thread of the host keeps
    // that CPU busy too: each vCPU's run time as Pacer reports it is the
    // guest's own view of it (the run less the steal it saw), and equal
    // work per reported run second on both vCPUs. (A filler that took the
    // results log's lock in the idle class once kept its owner asleep on
    // it for up to seconds, which neither side counts: `ranked.rs`,
    // `left_guest`.)
    let dir = TempDir::new("accounting-busy");
    if let Err(why) = ranked_accounting_run(&dir) {
        panic!("{why}");
    }
}

fn ranked_accounting_run(dir: &TempDir) -> Result<(), String> {
    // The engine's figure exceeds the guest's by the boot and the last
    // report (below), a fixed cost: 4 s keep it well inside 5 % of the
    // run where 2 s came to 5.7 % once on a busy CI host.
    let duration_ms: u64 = 4000;
    // The spinner is part of this test's run: no other test's VM may run
    // beside it.
    let _one = serial();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinner = spin_on_cpu0(stop.clone());
    let outer_before = cpu0_outer_steal_ns();
    let res = common::run_config(dir, &config_under("ranked", "0", 2, duration_ms, ""));
    let outer = cpu0_outer_steal_ns().saturating_sub(outer_before);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    spinner.join().unwrap();
    let vm = &res.vms[0];
    assert_eq!(vm.status, "success", "{vm:?}");
    let mut per_run_s = Vec::new();
    for (i, s) in vm.vcpu_sched.iter().enumerate() {
        let m = vm.vcpu_metrics.iter().find(|m| m.vcpu == i as u32).unwrap();
        let steal = m.steal.as_ref().expect("steal time").workload_steal_ns;
        let w = vm.work.iter().find(|w| w.vcpu == i as u32).unwrap();
        let work = w.ticks * 1_000_000 / u64::from(vm.tsc_khz);
        let guest_run = work.saturating_sub(steal);
        // The engine's run time covers the whole life of the thread (boot
        // and the last report too); the guest's view covers its workload.
        println!(
            "vcpu{i}: engine run {} ms, guest run {} ms (workload {} ms, \
             steal {} ms, the outer host's steal on CPU 0 {} ms)",
            s.run_ns / 1_000_000,
            guest_run / 1_000_000,
            work / 1_000_000,
            steal / 1_000_000,
            outer / 1_000_000
        );
        // When this host is itself a VM, the time its own host takes CPU 0
        // away is neither the vCPU thread's CPU time nor a wait in this
        // kernel's run queue, yet the guest's clock runs through it: the
        // two views may differ by it.
        let diff = s.run_ns.abs_diff(guest_run).saturating_sub(outer) as f64 / work as f64;
        if diff > 0.05 {
            return Err(format!(
                "vcpu{i}: engine {} ns vs guest {guest_run} ns, less the outer host's steal \
                 {outer} ns: {:.1} % of the run",
                s.run_ns,
                diff * 100.0
            ));
        }
        // Neither vCPU had the CPU to itself: the spinner took its part.
        assert!(
            guest_run < work * 2 / 3,
            "vcpu{i}: ran {guest_run} of {work} ns"
        );
        per_run_s.push(w.units as f64 / s.run_ns as f64);
    }
    let (a, b) = (per_run_s[0], per_run_s[1]);
    if (a - b).abs() / a.max(b) > 0.05 {
        return Err(format!("work per reported run second: {a:e} vs {b:e}"));
    }
    Ok(())
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
