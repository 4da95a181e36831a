//! Soak: 4 VMs under the Haiku policy with mixed workloads (cpu, sleep,
//! pingpong, spinlock; 10 vCPUs on the host's CPUs) for a long time. Every
//! second it checks that every vCPU made progress (ran, or was woken), and
//! it samples the VMM's resident memory until 5 s before the VMs end
//! (growth after boot <= 5 MiB; what the VMs' final documents take is
//! printed as "after", not judged); at the end every VM must succeed with
//! complete results. A second in which the
//! watchdog's own 1 s sleep overran by 250 ms or more is a host stall (the
//! host ran none of our threads on time): its gaps are reported apart from
//! scheduler stalls and do not fail the run. Not part of the default test run:
//!
//! `bash ci/soak.sh 600` (seconds; 3600 before a release).
//!
//! `soak_churn` (`bash ci/soak.sh 600 --churn`) is the same run while a
//! thread changes, every 20-200 ms at random, a random vCPU's affinity (a
//! random non-empty subset of the host CPUs) or priority (1-99), or the
//! scheduler's mode, through the engine's control calls (the control API's
//! `set`): the vCPUs must still all progress every second.

mod common;

use common::{kernel, kvm_or_skip, TempDir};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vcpu_engine::cpu_map::CpuMap;
use vcpu_engine::host_cpus::{HostCpu, HostCpuSet};
use vcpu_engine::{Engine, EngineConfig};
use vmm::config::Config;
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

/// A small xorshift generator (the run's seed is printed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The highest priority the churn gives a vCPU (the timeshare maximum).
const CHURN_PRIORITY_MAX: u64 = vcpu_sched::tunables::PRIORITY_MAX_TIMESHARE as u64;

/// The documented starvation bound (ARCHITECTURE.md, "Starvation bound"):
/// a waiting vCPU W is passed at most P_X + 20 times by each other vCPU X,
/// each time for at most base_quantum x m1, so it waits at most
/// (sum over X != W of (P_X + 20) + 1) x base_quantum x m1. Here every
/// other vCPU is taken at `max_priority` (any may share W's CPU under
/// churned affinity) and the slice is the longest of any quantum table the
/// run may use (the churn switches modes; the ranked dispatch has its own).
fn starvation_bound(vcpus: u64, max_priority: u64) -> Duration {
    use vcpu_sched::tunables::QuantumTable;
    let longest_slice = [
        QuantumTable::LOW_LATENCY,
        QuantumTable::POWER_SAVING,
        QuantumTable::PREEMPTIVE_WAKES,
    ]
    .iter()
    .map(|q| q.base_quantum * u64::from(q.quantum_multipliers[1]))
    .max()
    .unwrap_or(0);
    let passes = vcpus.saturating_sub(1) * (max_priority + 20) + 1;
    Duration::from_nanos(passes * longest_slice)
}

/// What the churn thread did.
#[derive(Debug, Default)]
struct Churn {
    affinity: u64,
    priority: u64,
    mode: u64,
    errors: Vec<String>,
}

/// Random changes until `done`: affinities, priorities, the mode.
fn churn(
    engine: &Engine,
    host: &HostCpuSet,
    done: &AtomicBool,
    until: Instant,
    seed: u64,
) -> Churn {
    let mut rng = Rng(seed | 1);
    let mut c = Churn::default();
    let cpus: Vec<HostCpu> = host.iter().collect();
    // Let the VMs boot first.
    std::thread::sleep(Duration::from_secs(3));
    // Until shortly before the VMs end (a vCPU that exited is gone).
    while !done.load(Ordering::Acquire) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20 + rng.below(180)));
        let vms = engine.live_vms();
        let vcpus: Vec<_> = vms
            .iter()
            .flat_map(|vm| vm.vcpus().iter().cloned())
            .collect();
        if vcpus.is_empty() {
            continue;
        }
        let v = &vcpus[rng.below(vcpus.len() as u64) as usize];
        let r = match rng.below(10) {
            0..=4 => {
                let mut set = HostCpuSet::new();
                while set.is_empty() {
                    for cpu in &cpus {
                        if rng.below(2) == 0 {
                            set.insert(*cpu);
                        }
                    }
                }
                c.affinity += 1;
                engine.set_vcpu_affinity(v, &set)
            }
            5..=8 => {
                c.priority += 1;
                engine.set_vcpu_priority(v, 1 + rng.below(CHURN_PRIORITY_MAX) as u8)
            }
            _ => {
                c.mode += 1;
                let mode = match engine.mode() {
                    vcpu_sched::Mode::LowLatency => vcpu_sched::Mode::PowerSaving,
                    _ => vcpu_sched::Mode::LowLatency,
                };
                engine.set_mode(mode)
            }
        };
        if let Err(e) = r {
            c.errors.push(format!("{}: {e}", v.name()));
        }
    }
    c
}

#[test]
#[ignore = "long; run by ci/soak.sh"]
fn soak() {
    run_soak("soak", false, false);
}

#[test]
#[ignore = "long; run by ci/soak.sh --churn"]
fn soak_churn() {
    run_soak("soak_churn", true, false);
}

#[test]
#[ignore = "long; run by ci/soak.sh --hostile"]
fn soak_hostile() {
    run_soak("soak_hostile", false, true);
}

/// How far the watchdog's own 1 s sleep may overrun before the second
/// counts as a host stall (the host ran nothing of ours, not only a vCPU).
const HOST_STALL: Duration = Duration::from_millis(250);

/// How much the VMM's resident memory may grow after boot over the run.
const RSS_GROWTH_KIB: u64 = 5 * 1024;

/// The name of the hostile VM of `soak_hostile`.
const HOSTILE: &str = "hostile";

fn run_soak(test: &str, with_churn: bool, with_hostile: bool) {
    if !kvm_or_skip(test) {
        return;
    }
    let secs: u64 = std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let ms = secs * 1000;
    let dir = TempDir::new(test);
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
    // A hostile VM (port, MMIO, console and result-port floods, then a
    // triple fault) started again as soon as it stops, all along.
    let text = if with_hostile {
        text + &vm(HOSTILE, 1, HOSTILE.to_string())
    } else {
        text
    };
    let config = Config::load(&dir.config(&text)).unwrap_or_else(|e| panic!("{e}"));
    let engine = Engine::new(
        {
            let mut c = EngineConfig::default();
            c.policy = vcpu_sched::PolicyKind::Haiku;
            c.mode = config.host.mode;
            c.smt_isolation = false;
            c.dispatch = config.host.dispatch;
            c.halt_poll_ns = config.host.halt_poll_us * 1000;
            c
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
            .filter(|v| v.name != HOSTILE)
            .map(|vmc| {
                let opts = VmOptions {
                    log_dir: Some(config.host.log_dir.clone()),
                    scheduling: VcpuScheduling::Scheduled(engine.clone()),
                    run_start: t0,
                    ..Default::default()
                };
                let kvm = &kvm;
                s.spawn(move || Vm::run(kvm, &vmc.spec(), opts))
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
                let mut host_stalls: Vec<String> = Vec::new();
                // Consecutive seconds without progress, per entity; the longest.
                let mut streak: std::collections::HashMap<String, u64> = Default::default();
                let mut longest = 0u64;
                // Which entity, and over which seconds (the output lists
                // only the first stalls).
                let mut longest_at = String::new();
                // Until 5 s before the VMs end, by the clock: each look
                // takes a little more than its second, and counted looks
                // overran the run's end by seconds in an hour, sampling
                // the memory of the VMs' final documents as growth.
                let until = t0 + Duration::from_secs(secs.saturating_sub(5));
                while !done.load(Ordering::Acquire) && Instant::now() < until {
                    let slept = Instant::now();
                    std::thread::sleep(Duration::from_secs(1));
                    // A second the host did not give the watchdog either
                    // (its own sleep overran) stalled the whole host, not
                    // the scheduler: its gaps are reported apart.
                    let overrun = slept.elapsed().saturating_sub(Duration::from_secs(1));
                    let host_stalled = overrun >= HOST_STALL;
                    let now = engine.snapshot();
                    let hostile: Vec<_> = engine
                        .live_vms()
                        .iter()
                        .filter(|v| v.name() == HOSTILE)
                        .map(|v| v.id())
                        .collect();
                    for e in now.entities.iter().filter(|e| !hostile.contains(&e.vm)) {
                        let Some(p) = last.entities.iter().find(|p| p.id == e.id) else {
                            continue;
                        };
                        let key = format!("{:?}", e.id);
                        let still = e.run_time == p.run_time && e.wakes == p.wakes;
                        if still && host_stalled {
                            host_stalls.push(format!(
                                "second {seconds}: entity {:?} made no progress while the watchdog's 1 s sleep overran by {} ms",
                                e.id,
                                overrun.as_millis()
                            ));
                            continue;
                        }
                        let n = streak.entry(key.clone()).or_default();
                        *n = if still { *n + 1 } else { 0 };
                        if *n > longest {
                            longest = *n;
                            longest_at = format!("entity {key}, seconds {}-{seconds}", seconds + 1 - *n);
                        }
                        if still {
                            gaps.push(format!(
                                "second {seconds}: entity {:?} (priority {}, runnable {} ms of it; others' priorities {:?}) made no progress",
                                e.id,
                                e.base_priority,
                                (e.ready_wait - p.ready_wait) / 1_000_000,
                                now.entities
                                    .iter()
                                    .filter(|o| o.id != e.id)
                                    .map(|o| o.base_priority)
                                    .collect::<Vec<_>>()
                            ));
                        }
                    }
                    rss_max = rss_max.max(rss_kib());
                    last = now;
                    seconds += 1;
                }
                (seconds, gaps, host_stalls, (longest, longest_at), rss_booted, rss_max)
            })
        };
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        let churner = with_churn.then(|| {
            let (engine, done, host) = (engine.clone(), done.clone(), config.host.cpus.clone());
            println!("churn seed {seed}");
            let until = t0 + Duration::from_secs(secs.saturating_sub(3));
            s.spawn(move || churn(&engine, &host, &done, until, seed))
        });
        let hostile = config.vms.iter().find(|v| v.name == HOSTILE).map(|vmc| {
            let (kvm, log_dir, engine) = (&kvm, config.host.log_dir.clone(), engine.clone());
            s.spawn(move || {
                let until = t0 + Duration::from_secs(secs.saturating_sub(5));
                let mut outcomes: std::collections::BTreeMap<String, u64> = Default::default();
                while Instant::now() < until {
                    let opts = VmOptions {
                        log_dir: Some(log_dir.clone()),
                        scheduling: VcpuScheduling::Scheduled(engine.clone()),
                        run_start: t0,
                        ..Default::default()
                    };
                    let r = Vm::run(kvm, &vmc.spec(), opts);
                    *outcomes.entry(r.status.to_string()).or_default() += 1;
                }
                outcomes
            })
        });
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        if let Some(h) = hostile {
            let outcomes = h.join().unwrap();
            println!("hostile VM runs by outcome: {outcomes:?}");
            assert!(!outcomes.is_empty(), "the hostile VM never ran");
        }
        done.store(true, Ordering::Release);
        let churned = churner.map(|h| h.join().unwrap());
        (results, watch.join().unwrap(), churned)
    });
    engine.shutdown();
    let (
        results,
        (watched, gaps, host_stalls, (longest, longest_at), rss_booted, rss_max),
        churned,
    ) = results;
    if let Some(c) = &churned {
        println!(
            "churn: {} affinity, {} priority, {} mode changes; {} errors",
            c.affinity,
            c.priority,
            c.mode,
            c.errors.len()
        );
        for e in c.errors.iter().take(10) {
            println!("  {e}");
        }
    }
    let rss_end = rss_kib();
    println!(
        "soak: {secs} s, 4 VMs, 10 vCPUs{}; watched {watched} s; scheduler stalls (a vCPU without progress in a second the host ran the watchdog on time) {} (longest {longest} s{}); host stalls (the watchdog's own sleep overran by >= {} ms) {}; RSS before the VMs {rss_start} KiB, once booted {rss_booted} KiB, max {rss_max} KiB, after {rss_end} KiB",
        if with_hostile { " and a hostile VM" } else { "" },
        gaps.len(),
        if longest > 0 {
            format!(": {longest_at}")
        } else {
            String::new()
        },
        HOST_STALL.as_millis(),
        host_stalls.len()
    );
    for g in gaps.iter().take(20) {
        println!("  scheduler stall: {g}");
    }
    for g in host_stalls.iter().take(20) {
        println!("  host stall: {g}");
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
    if let Some(c) = &churned {
        // Random priorities (1-99) and modes stretch the documented
        // starvation bound past one second; a vCPU may wait that long,
        // never longer.
        let watched_vcpus: u64 = config
            .vms
            .iter()
            .filter(|v| v.name != HOSTILE)
            .map(|v| u64::from(v.vcpus))
            .sum();
        let bound = starvation_bound(watched_vcpus, CHURN_PRIORITY_MAX);
        println!(
            "starvation bound for {watched_vcpus} vCPUs at priority <= {CHURN_PRIORITY_MAX}: {:.1} s",
            bound.as_secs_f64()
        );
        assert!(
            longest <= bound.as_secs().saturating_add(1),
            "a vCPU without progress {longest} s in a row ({longest_at}), past the starvation bound ({:.1} s): {gaps:?}",
            bound.as_secs_f64()
        );
        assert!(c.errors.is_empty(), "changes refused: {:?}", c.errors);
        assert!(
            c.affinity + c.priority + c.mode >= secs.saturating_sub(10),
            "too few changes: {c:?}"
        );
    } else {
        assert!(gaps.is_empty(), "vCPUs without progress: {gaps:?}");
    }
    // Flat memory: what the run needs is allocated while it boots.
    assert!(
        rss_max <= rss_booted + RSS_GROWTH_KIB,
        "RSS grew from {rss_booted} KiB (booted) to {rss_max} KiB"
    );
}
