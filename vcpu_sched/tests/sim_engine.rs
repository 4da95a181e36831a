//! Tests of the simulator engine itself, driven by tiny test-only policies
//! (so the engine is checked independently of the real policies).

#![cfg(feature = "sim")]

use parking_lot::Mutex;
use std::collections::VecDeque;
use vcpu_sched::sim::{Dist, GroupSpec, MessageSpec, Simulator, Sleep, Workload};
use vcpu_sched::{
    CpuId, CpuSet, Dispatch, EntityId, EntitySpec, Mode, Nanos, SchedClass, SchedError,
    SchedSnapshot, StopReason, Topology, VcpuScheduler, WakeDecision,
};

#[derive(Clone, Copy, PartialEq)]
enum St {
    Blocked,
    Queued,
    Running,
}

struct Inner {
    specs: Vec<EntitySpec>,
    state: Vec<St>,
    wake_pending: Vec<bool>,
    queue: VecDeque<EntityId>,
    running: Vec<Option<EntityId>>,
    kicked: Vec<bool>,
}

/// Deliberate bugs of the test policy, which the simulator's checks must catch.
#[derive(Clone, Copy, PartialEq)]
enum Bug {
    None,
    /// Never kicks on wake.
    ForgetKicks,
    /// Dispatches the queue head whatever its affinity.
    IgnoreAffinity,
}

/// One global FIFO, 1 ms slices, kicks an idle CPU on wake (unless `bug`
/// says otherwise).
struct TestFifo {
    topo: Topology,
    bug: Bug,
    inner: Mutex<Inner>,
}

impl TestFifo {
    fn new(topo: Topology, bug: Bug) -> Self {
        let n = topo.num_cpus();
        TestFifo {
            topo,
            bug,
            inner: Mutex::new(Inner {
                specs: Vec::new(),
                state: Vec::new(),
                wake_pending: Vec::new(),
                queue: VecDeque::new(),
                running: vec![None; n],
                kicked: vec![false; n],
            }),
        }
    }
}

impl VcpuScheduler for TestFifo {
    fn name(&self) -> &'static str {
        "test_fifo"
    }
    fn topology(&self) -> &Topology {
        &self.topo
    }
    fn add_entity(&self, spec: EntitySpec, _now: Nanos) -> Result<EntityId, SchedError> {
        let mut g = self.inner.lock();
        g.specs.push(spec);
        g.state.push(St::Blocked);
        g.wake_pending.push(false);
        Ok(EntityId::new(g.specs.len() as u32 - 1, 0))
    }
    fn remove_entity(&self, _id: EntityId, _now: Nanos) -> Result<(), SchedError> {
        Ok(())
    }
    fn wake(&self, id: EntityId, _now: Nanos) -> Result<Option<WakeDecision>, SchedError> {
        let mut g = self.inner.lock();
        let i = id.index() as usize;
        match g.state[i] {
            St::Queued => return Ok(None),
            St::Running => {
                g.wake_pending[i] = true;
                return Ok(None);
            }
            St::Blocked => {}
        }
        g.state[i] = St::Queued;
        g.queue.push_back(id);
        let aff = g.specs[i].affinity.clone();
        let idle = aff
            .iter()
            .find(|c| g.running[c.0 as usize].is_none() && !g.kicked[c.0 as usize]);
        Ok(Some(match idle {
            Some(c) if self.bug != Bug::ForgetKicks => {
                g.kicked[c.0 as usize] = true;
                WakeDecision::new(c, true)
            }
            Some(c) => WakeDecision::new(c, false),
            None => WakeDecision::new(aff.first().unwrap_or(CpuId(0)), false),
        }))
    }
    fn wake_by(
        &self,
        id: EntityId,
        _waker: EntityId,
        now: Nanos,
    ) -> Result<Option<WakeDecision>, SchedError> {
        self.wake(id, now)
    }
    fn schedule(
        &self,
        cpu: CpuId,
        _now: Nanos,
        reason: StopReason,
    ) -> Result<Dispatch, SchedError> {
        let mut g = self.inner.lock();
        let c = cpu.0 as usize;
        g.kicked[c] = false;
        if let Some(prev) = g.running[c].take() {
            let p = prev.index() as usize;
            if reason == StopReason::Blocked && !g.wake_pending[p] {
                g.state[p] = St::Blocked;
            } else {
                g.wake_pending[p] = false;
                g.state[p] = St::Queued;
                g.queue.push_back(prev);
            }
        }
        let pos = g.queue.iter().position(|e| {
            self.bug == Bug::IgnoreAffinity || g.specs[e.index() as usize].affinity.contains(cpu)
        });
        let next = pos.and_then(|p| g.queue.remove(p));
        if let Some(e) = next {
            g.state[e.index() as usize] = St::Running;
        }
        g.running[c] = next;
        Ok(match next {
            Some(e) => Dispatch::run(e, 1_000_000),
            None => Dispatch::idle(),
        })
    }
    /// One FIFO: priorities and classes change nothing.
    fn set_priority(&self, _id: EntityId, _p: u8, _now: Nanos) -> Result<Vec<CpuId>, SchedError> {
        Ok(Vec::new())
    }
    fn set_class(
        &self,
        _id: EntityId,
        _class: SchedClass,
        _p: u8,
        _now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        Ok(Vec::new())
    }
    fn set_affinity(
        &self,
        id: EntityId,
        affinity: CpuSet,
        _now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        let mut g = self.inner.lock();
        let spec = g
            .specs
            .get_mut(id.index() as usize)
            .ok_or(SchedError::UnknownEntity(id))?;
        spec.affinity = affinity;
        Ok(Vec::new())
    }
    fn mode(&self) -> Mode {
        Mode::LowLatency
    }
    fn set_mode(&self, _mode: Mode, _now: Nanos) -> Vec<CpuId> {
        Vec::new()
    }
    fn set_cpu_enabled(
        &self,
        cpu: CpuId,
        _enabled: bool,
        _now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        // Never asked by these tests; refused rather than half done.
        Err(SchedError::UnknownCpu(cpu))
    }
    fn set_idle_core_search(&self, _on: bool) {}
    fn snapshot(&self, now: Nanos) -> SchedSnapshot {
        SchedSnapshot {
            mode: Mode::LowLatency,
            now,
            policy: "test_fifo".into(),
            entities: Vec::new(),
            cpus: Vec::new(),
            cores: Vec::new(),
        }
    }
}

fn sim_bug(w: Workload, bug: Bug) -> vcpu_sched::sim::SimReport {
    let topo = Topology::from_spec(&w.topology).unwrap();
    Simulator::with_scheduler(w, Box::new(TestFifo::new(topo, bug)))
        .unwrap()
        .run()
        .unwrap()
}

fn sim(w: Workload) -> vcpu_sched::sim::SimReport {
    sim_bug(w, Bug::None)
}

#[test]
fn hogs_fill_every_cpu() {
    let w = Workload::new("hogs", "1x2x1", 50).group(GroupSpec::new("hog", 4, Dist::fixed(300.0)));
    let r = sim(w);
    assert_eq!(r.violations.total(), 0, "{:?}", r.violations);
    assert!(
        (r.total.useful_cpus - 2.0).abs() < 1e-3,
        "{}",
        r.total.useful_cpus
    );
    // Round robin with 1 ms slices: every hog gets half a CPU.
    let g = r.group("hog").unwrap();
    assert!(g.jain_fairness > 0.99, "{}", g.jain_fairness);
    let per_hog = 50e-3 * 1e9 / 2.0;
    for v in &r.vcpus {
        assert!((v.throughput.run_ns as f64 - per_hog).abs() < 0.05 * per_hog);
        // 300 us bursts back to back: run time / 300 us bursts.
        assert!(v.throughput.bursts >= (per_hog / 300e3) as u64 - 1);
    }
    assert!(r.cpus.iter().all(|c| c.utilisation > 0.99));
    assert!(r.to_table().contains("hog"));
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(json["total"]["bursts"], r.total.bursts);
}

#[test]
fn sleepers_are_woken_with_the_kick_latency() {
    let w = Workload::new("sleepers", "1x2x1", 20)
        .group(GroupSpec::new("s", 2, Dist::fixed(10.0)).with_sleep(Sleep::For(Dist::fixed(90.0))));
    let r = sim(w);
    assert_eq!(r.violations.total(), 0, "{:?}", r.violations);
    let g = r.group("s").unwrap();
    // Each CPU is idle when its sleeper wakes: latency = kick latency (2 us).
    assert_eq!(g.wake_latency.max, 2_000);
    assert_eq!(g.wake_latency.p50, 2_000);
    assert!(r.total.useful_cpus < 0.2);
    // Period = 10 us run + 90 us sleep + 2 us kick.
    let expect = 2.0 * 20e-3 / 102e-6;
    assert!(
        (g.throughput.bursts as f64 - expect).abs() <= 4.0,
        "{}",
        g.throughput.bursts
    );
}

#[test]
fn kick_latency_is_configurable() {
    let w = Workload::new("sleepers", "1x1x1", 5)
        .with_kick_latency_us(7.5)
        .group(GroupSpec::new("s", 1, Dist::fixed(10.0)).with_sleep(Sleep::For(Dist::fixed(90.0))));
    let r = sim(w);
    assert_eq!(r.group("s").unwrap().wake_latency.p99, 7_500);
}

#[test]
fn forgotten_kicks_are_reported() {
    let w = Workload::new("broken", "1x2x1", 5)
        .group(GroupSpec::new("s", 2, Dist::fixed(10.0)).with_sleep(Sleep::For(Dist::fixed(90.0))));
    let r = sim_bug(w, Bug::ForgetKicks);
    assert!(r.violations.unnoticed_wake > 0, "{:?}", r.violations);
}

#[test]
fn affinity_breaches_are_reported() {
    let w = Workload::new("aff", "1x2x1", 5)
        .group(
            GroupSpec::new("pinned", 2, Dist::fixed(100.0))
                .with_affinity(CpuSet::single(CpuId(0)).unwrap()),
        )
        .group(GroupSpec::new("free", 1, Dist::fixed(100.0)));
    assert_eq!(sim(w.clone()).violations.total(), 0);
    let r = sim_bug(w, Bug::IgnoreAffinity);
    assert!(r.violations.affinity > 0, "{:?}", r.violations);
}

#[test]
fn messages_wake_receivers() {
    let w = Workload::new("msg", "1x2x1", 20)
        .group(
            GroupSpec::new("tx", 1, Dist::fixed(20.0))
                .with_sleep(Sleep::For(Dist::fixed(80.0)))
                .with_message(MessageSpec {
                    to_group: Some("rx".into()),
                    to_vcpu: None,
                    fanout: 1,
                }),
        )
        .group(
            GroupSpec::new("rx", 3, Dist::fixed(5.0))
                .with_sleep(Sleep::UntilMessage)
                .with_start_awake(false),
        );
    let r = sim(w);
    assert_eq!(r.violations.total(), 0, "{:?}", r.violations);
    let tx = r.group("tx").unwrap().throughput.bursts;
    let rx = r.group("rx").unwrap().throughput.bursts;
    assert!(tx > 150, "{tx}");
    // Every message lands on a blocked receiver (they run 5 us, messages come every ~100 us).
    assert!(rx + 1 >= tx && rx <= tx, "tx {tx} rx {rx}");
}

#[test]
fn lock_holder_preemption_costs_throughput() {
    // 3 vCPUs of one VM on one CPU, each holding the VM lock for 80 % of
    // its 500 us burst: a vCPU preempted at quantum end while holding the
    // lock makes the others spin.
    let w = Workload::new("lock", "1x1x1", 100)
        .group(GroupSpec::new("l", 3, Dist::uniform(300.0, 700.0)).with_lock(0.8));
    let r = sim(w);
    assert_eq!(r.violations.total(), 0, "{:?}", r.violations);
    assert!(r.total.spin_ns > 0);
    let run = r.total.run_ns as f64;
    assert!(
        (r.total.useful_ns + r.total.spin_ns) as f64 > 0.999 * run,
        "useful + spin = run"
    );
    assert!(r.total.useful_cpus < 0.95, "{}", r.total.useful_cpus);
}

#[test]
fn yield_storm_switches_every_burst() {
    let w = Workload::new("yield", "1x1x1", 10)
        .group(GroupSpec::new("y", 2, Dist::fixed(5.0)).with_yield(true));
    let r = sim(w);
    assert_eq!(r.violations.total(), 0);
    // A switch every 5 us.
    let cs = r.cpus[0].context_switches_per_sec;
    assert!(cs > 190_000.0, "{cs}");
}

#[test]
fn same_seed_same_report_other_seed_differs() {
    let mk = |seed| {
        Workload::new("det", "1x2x2", 20)
            .with_seed(seed)
            .group(
                GroupSpec::new("a", 6, Dist::exponential(40.0))
                    .with_sleep(Sleep::For(Dist::uniform(10.0, 200.0)))
                    .with_message(MessageSpec {
                        to_group: Some("a".into()),
                        to_vcpu: None,
                        fanout: 1,
                    }),
            )
            .group(
                GroupSpec::new("hog", 2, Dist::fixed(1000.0))
                    .with_affinity(CpuSet::parse_list("0,2").unwrap()),
            )
    };
    let a = sim(mk(1)).without_host_timing().to_json();
    let b = sim(mk(1)).without_host_timing().to_json();
    let c = sim(mk(2)).without_host_timing().to_json();
    assert_eq!(a, b);
    assert_ne!(a, c);
}

/// The engine's own speed, with a trivial policy (compare with `sim_perf`,
/// which includes the real policies' cost).
#[test]
#[ignore = "host-speed measurement: run with --release -- --ignored --nocapture"]
fn engine_speed_with_test_policy() {
    let w = Workload::new("perf", "1x8x2", 1000)
        .with_seed(3)
        .group(GroupSpec::new("hog", 32, Dist::uniform(200.0, 2000.0)))
        .group(
            GroupSpec::new("sleeper", 32, Dist::exponential(30.0))
                .with_sleep(Sleep::For(Dist::exponential(100.0))),
        );
    let r = sim(w);
    println!(
        "test_fifo: {} events, {} scheduler calls, {:.1} ms host: {:.2} M events/s, {:.2} M scheduler calls/s",
        r.events,
        r.sched_calls,
        r.host.wall_ns as f64 / 1e6,
        r.host.events_per_sec / 1e6,
        r.host.sched_calls_per_sec / 1e6
    );
}
