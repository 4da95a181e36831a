//! Soak: 4 VMs under the Haiku policy with mixed workloads (cpu, sleep,
//! pingpong, spinlock; 10 vCPUs on the host's CPUs) for a long time. Every
//! second it checks that every vCPU made progress (ran, or was woken), and
//! it samples the VMM's resident memory; at the end every VM must succeed
//! with complete results. Not part of the default test run:
//!
//! `bash ci/soak.sh 600` (seconds; 3600 before a release).

mod common;

use common::{kernel, kvm_or_skip, TempDir};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmm::config::Config;
use vmm::engine::cpu_map::CpuMap;
use vmm::engine::{Engine, EngineConfig};
use vmm::vm::{open_kvm, VcpuScheduling};
use vmm::{Vm, VmOptions};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
#[ignore = "long; run by ci/soak.sh"]
fn soak() {
    if !kvm_or_skip("soak") {
        return;
    }
    let secs: u64 = std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let ms = secs * 1000;
    let dir = TempDir::new("soak");
    let vm = |name: &str, vcpus: u32, workload: String| {
        format!(
            "[[vm]]\nname = \"{name}\"\nvcpus = {vcpus}\nmemory_mib = 64\nkernel = \"{}\"\nworkload = \"{workload}\"\ntimeout_s = {}\n\n",
            kernel().display(),
            secs + 120
        )
    };
    let text = format!(
        "[host]\npolicy = \"haiku\"\nlog_dir = \"logs\"\n\n{}{}{}{}",
        vm("cpu", 2, format!("cpu duration_ms={ms} report_ms=1000")),
        vm(
            "sleep",
            2,
            format!("sleep duration_ms={ms} interval_us=1000")
        ),
        vm("pingpong", 2, format!("pingpong duration_ms={ms}")),
        vm(
            "spinlock",
            4,
            format!("spinlock duration_ms={ms} cs_ns=2000 gap_ns=1000")
        ),
    );
    let config = Config::load(&dir.config(&text)).unwrap_or_else(|e| panic!("{e}"));
    let engine = Engine::new(
        EngineConfig {
            policy: vcpu_sched::PolicyKind::Haiku,
            mode: config.host.mode,
            smt_isolation: false,
            tunables: Default::default(),
            dispatch: config.host.dispatch,
            halt_poll_ns: config.host.halt_poll_us * 1000,
            trace: None,
        },
        CpuMap::from_host(&config.host.cpus).unwrap(),
    )
    .unwrap();
    let kvm = open_kvm().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let rss_start = rss_kib();
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = config
            .vms
            .iter()
            .map(|vmc| {
                let opts = VmOptions {
                    log_dir: Some(config.host.log_dir.clone()),
                    scheduling: VcpuScheduling::Scheduled(engine.clone()),
                    run_start: t0,
                    ..Default::default()
                };
                let kvm = &kvm;
                s.spawn(move || Vm::run(kvm, vmc, opts))
            })
            .collect();
        // The watchdog: progress of every vCPU each second, RSS samples.
        let watch = {
            let engine = engine.clone();
            let done = done.clone();
            s.spawn(move || {
                // Boot and the guests' start barrier first.
                std::thread::sleep(Duration::from_secs(3));
                let mut last = engine.snapshot();
                let rss_booted = rss_kib();
                let (mut seconds, mut gaps, mut rss_max) = (0u64, Vec::new(), rss_booted);
                while !done.load(Ordering::Acquire) && seconds + 5 < secs {
                    std::thread::sleep(Duration::from_secs(1));
                    let now = engine.snapshot();
                    for e in &now.entities {
                        let Some(p) = last.entities.iter().find(|p| p.id == e.id) else {
                            continue;
                        };
                        if e.run_time == p.run_time && e.wakes == p.wakes {
                            gaps.push(format!(
                                "second {seconds}: entity {:?} made no progress",
                                e.id
                            ));
                        }
                    }
                    rss_max = rss_max.max(rss_kib());
                    last = now;
                    seconds += 1;
                }
                (seconds, gaps, rss_booted, rss_max)
            })
        };
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        done.store(true, Ordering::Release);
        (results, watch.join().unwrap())
    });
    engine.shutdown();
    let (results, (watched, gaps, rss_booted, rss_max)) = results;
    let rss_end = rss_kib();
    println!(
        "soak: {secs} s, 4 VMs, 10 vCPUs; watched {watched} s; progress gaps {}; RSS before the VMs {rss_start} KiB, once booted {rss_booted} KiB, max {rss_max} KiB, after {rss_end} KiB",
        gaps.len()
    );
    for g in gaps.iter().take(20) {
        println!("  {g}");
    }
    for r in &results {
        println!("  {}: {} in {:.1} s", r.name, r.status, r.wall_ms / 1e3);
        assert!(r.ok, "{r:?}");
        let vcpus = config.vms.iter().find(|v| v.name == r.name).unwrap().vcpus as usize;
        assert_eq!(
            r.vcpu_metrics.len(),
            vcpus,
            "{}: incomplete results",
            r.name
        );
    }
    assert!(gaps.is_empty(), "vCPUs without progress: {gaps:?}");
    // Flat memory: what the run needs is allocated while it boots.
    assert!(
        rss_max < rss_booted + 16 * 1024,
        "RSS grew from {rss_booted} KiB (booted) to {rss_max} KiB"
    );
}
