//! Hot-path costs of the scheduler API at growing topology and entity counts.
//!
//! Operations (each timed over batches with `iter_custom`, the untimed part
//! restores the state so every sample sees the same steady state):
//! - `quantum_end`: `schedule(cpu, QuantumEnd)` on an overloaded machine
//!   (the runner is requeued and the next one picked);
//! - `pick_next`: `schedule(cpu, Blocked)` on an overloaded machine (the
//!   runner leaves, the next is picked); the untimed part wakes it again;
//! - `enqueue`: `wake` of a blocked entity while every CPU is busy;
//! - `wake_select`: `wake` of a blocked entity while half the CPUs are idle
//!   (placement and idle search); the untimed part runs and re-blocks it.
//!
//! Run: `cargo bench -p vcpu_sched --bench sched_ops`. The closing figures
//! are ratios of medians (1024 vs 8 CPUs, 65536 vs 64 entities).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::time::{Duration, Instant};
use vcpu_sched::{
    build, CpuId, EntityId, EntitySpec, Nanos, PolicyKind, SchedClass, SchedConfig, StopReason,
    Topology, VcpuScheduler, VmId,
};

const TOPOLOGIES: [(&str, &str); 4] = [
    ("8cpu", "1x4x2"),
    ("88cpu", "2x22x2"),
    ("128cpu", "1x16x8"),
    ("1024cpu", "4x64x4"),
];
const ENTITY_COUNTS: [usize; 3] = [64, 2048, 65_536];
const BATCH: u64 = 256;
const TICK: Nanos = 1_000;

/// A scheduler with `entities` registered entities, `ready` of them woken
/// and every CPU that can get one dispatched.
struct Bench {
    sched: Box<dyn VcpuScheduler>,
    ncpus: u32,
    /// What each CPU runs.
    running: Vec<Option<EntityId>>,
    /// Blocked entities available for wake benchmarks.
    blocked: Vec<EntityId>,
    now: Nanos,
    next_cpu: u32,
    /// The spec every entity is added with.
    spec: EntitySpec,
    /// CPUs the scheduler asked to kick, delivered outside the timed part.
    kicks: Vec<CpuId>,
    /// Entities woken at setup (runnable).
    ready: usize,
}

impl Bench {
    fn new(spec: &str, entities: usize, ready: usize, policy: PolicyKind) -> Bench {
        let topo = Topology::from_spec(spec).expect("topology spec");
        let ncpus = topo.num_cpus() as u32;
        let all = topo.all_cpus();
        let config = SchedConfig {
            policy,
            max_entities: entities.max(64),
            ..SchedConfig::default()
        };
        let sched = build(topo, config).expect("scheduler");
        let mut now = 0;
        let spec = EntitySpec {
            vm: VmId(0),
            class: SchedClass::Timeshare,
            priority: 10,
            affinity: all,
        };
        let ids: Vec<EntityId> = (0..entities)
            .map(|_| sched.add_entity(spec.clone(), now).expect("add"))
            .collect();
        for id in &ids[..ready] {
            now += TICK;
            sched.wake(*id, now).expect("wake");
        }
        let mut b = Bench {
            sched,
            ncpus,
            running: vec![None; ncpus as usize],
            blocked: ids[ready..].to_vec(),
            now,
            next_cpu: 0,
            spec,
            kicks: Vec::new(),
            ready,
        };
        for cpu in 0..ncpus {
            b.dispatch(cpu, StopReason::Idle);
        }
        b.settle();
        b
    }

    fn dispatch(&mut self, cpu: u32, reason: StopReason) -> Option<EntityId> {
        self.now += TICK;
        let d = self
            .sched
            .schedule(CpuId(cpu), self.now, reason)
            .expect("schedule");
        self.running[cpu as usize] = d.entity;
        self.kicks.extend(d.kicks);
        d.entity
    }

    /// Deliver the pending kicks as a VMM would (each kicked CPU calls
    /// `schedule`), including kicks those calls ask for, so the state the
    /// next batch sees is one a real caller would produce.
    fn settle(&mut self) {
        let mut rounds = 0;
        while let Some(cpu) = self.kicks.pop() {
            let reason = if self.running[cpu.0 as usize].is_some() {
                StopReason::Preempted
            } else {
                StopReason::Idle
            };
            self.dispatch(cpu.0, reason);
            rounds += 1;
            assert!(rounds < 100_000, "kicks never settle");
        }
    }

    /// Next CPU (round robin) that is running something.
    fn busy_cpu(&mut self) -> u32 {
        for _ in 0..self.ncpus {
            let cpu = self.next_cpu;
            self.next_cpu = (self.next_cpu + 1) % self.ncpus;
            if self.running[cpu as usize].is_some() {
                return cpu;
            }
        }
        panic!("no busy CPU in the benchmark state");
    }
}

/// Run `iters` operations in batches; `op(k)` performs up to `k` and
/// returns the time of the timed part and how many it performed.
fn timed_batches(iters: u64, mut op: impl FnMut(u64) -> (Duration, u64)) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let (elapsed, done) = op(left.min(BATCH));
        assert!(done > 0, "benchmark state cannot perform the operation");
        total += elapsed;
        left -= done.min(left);
    }
    total
}

fn quantum_end(b: &mut Bench, k: u64) -> (Duration, u64) {
    let cpus: Vec<u32> = (0..k).map(|_| b.busy_cpu()).collect();
    let start = Instant::now();
    for cpu in cpus {
        b.now += TICK;
        let d = b.sched.schedule(CpuId(cpu), b.now, StopReason::QuantumEnd);
        let d = d.expect("schedule");
        b.running[cpu as usize] = d.entity;
        b.kicks.extend(d.kicks);
    }
    let elapsed = start.elapsed();
    b.settle();
    (elapsed, k)
}

fn pick_next(b: &mut Bench, k: u64) -> (Duration, u64) {
    // Each block removes a runnable entity until the batch ends: never
    // block more than are waiting, so every CPU keeps something to run.
    let k = k.min(b.ready.saturating_sub(b.ncpus as usize).max(1) as u64);
    let mut left_cpu = Vec::with_capacity(k as usize);
    let start = Instant::now();
    for _ in 0..k {
        let cpu = b.busy_cpu();
        let prev = b.running[cpu as usize];
        b.now += TICK;
        let d = b.sched.schedule(CpuId(cpu), b.now, StopReason::Blocked);
        let d = d.expect("schedule");
        b.running[cpu as usize] = d.entity;
        b.kicks.extend(d.kicks);
        left_cpu.push(prev);
    }
    let elapsed = start.elapsed();
    for id in left_cpu.into_iter().flatten() {
        b.now += TICK;
        if let Some(w) = b.sched.wake(id, b.now).expect("wake") {
            if w.kick {
                b.kicks.push(w.cpu);
            }
        }
    }
    b.settle();
    (elapsed, k)
}

/// Time `wake` of blocked entities. The untimed part removes and re-adds
/// them (blocked again, wherever they were queued), so every batch starts
/// from the same state however deep the queues are.
fn wake(b: &mut Bench, k: u64) -> (Duration, u64) {
    let k = (k as usize).min(b.blocked.len());
    let ids: Vec<EntityId> = b.blocked.drain(..k).collect();
    let mut decisions = Vec::with_capacity(ids.len());
    let start = Instant::now();
    for id in &ids {
        b.now += TICK;
        decisions.push(b.sched.wake(*id, b.now).expect("wake"));
    }
    let elapsed = start.elapsed();
    for id in ids {
        b.now += TICK;
        b.sched.remove_entity(id, b.now).expect("remove");
        let again = b.sched.add_entity(b.spec.clone(), b.now).expect("re-add");
        b.blocked.push(again);
    }
    // Kicked CPUs look again (and find the entity gone, or other work).
    b.kicks.extend(
        decisions
            .into_iter()
            .flatten()
            .filter(|w| w.kick)
            .map(|w| w.cpu),
    );
    b.settle();
    (elapsed, k as u64)
}

fn bench_ops(c: &mut Criterion) {
    let mut group = c.benchmark_group("sched_ops");
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    group.sample_size(30);
    for (name, spec) in TOPOLOGIES {
        let ncpus = Topology::from_spec(spec).expect("spec").num_cpus();
        for n in ENTITY_COUNTS {
            let id = format!("{name}/{n}");
            if n > ncpus {
                // Overloaded states: every CPU busy, queues non-empty.
                let mut b = Bench::new(spec, n, n, PolicyKind::Haiku);
                group.bench_function(BenchmarkId::new("quantum_end", &id), |bch| {
                    bch.iter_custom(|iters| timed_batches(iters, |k| quantum_end(&mut b, k)))
                });
                group.bench_function(BenchmarkId::new("pick_next", &id), |bch| {
                    bch.iter_custom(|iters| timed_batches(iters, |k| pick_next(&mut b, k)))
                });
                // Enqueue: all CPUs busy; a quarter of the entities blocked.
                let ready = n - n / 4;
                if ready > ncpus {
                    let mut b = Bench::new(spec, n, ready, PolicyKind::Haiku);
                    group.bench_function(BenchmarkId::new("enqueue", &id), |bch| {
                        bch.iter_custom(|iters| timed_batches(iters, |k| wake(&mut b, k)))
                    });
                }
            }
            // Wake + select CPU: half the CPUs idle, the rest of the
            // entities blocked.
            let ready = (ncpus / 2).min(n / 2);
            let mut b = Bench::new(spec, n, ready, PolicyKind::Haiku);
            group.bench_function(BenchmarkId::new("wake_select", &id), |bch| {
                bch.iter_custom(|iters| timed_batches(iters, |k| wake(&mut b, k)))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_ops);
criterion_main!(benches);
