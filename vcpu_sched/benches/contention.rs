//! Lock contention: N threads drive disjoint sets of CPUs through the same
//! scheduler (quantum ends, blocks and wakes of their own entities), as a
//! VMM's per-CPU threads do. The Haiku policy has a lock per queue; the
//! global round-robin baseline has one lock for everything.
//!
//! Run: `cargo bench -p vcpu_sched --bench contention`. Report elements/s
//! (scheduler operations per second, all threads together) per policy and
//! thread count; the figure of merit is the Haiku / global-lock ratio at
//! the same thread count. Threads beyond the host's cores measure
//! preemption of lock holders, not parallelism.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};
use vcpu_sched::{
    build, CpuId, CpuSet, EntityId, EntitySpec, PolicyKind, SchedClass, SchedConfig, StopReason,
    Topology, VcpuScheduler, VmId,
};

/// 16 CPUs in 8 cores; every thread count below divides the cores.
const SPEC: &str = "1x8x2";
const ENTITIES_PER_CPU: usize = 4;
const THREAD_COUNTS: [usize; 3] = [1, 2, 4];

/// Set up a scheduler where thread `t` of `threads` owns a disjoint block
/// of CPUs and the entities pinned (by affinity) to that block.
fn setup(policy: PolicyKind, threads: usize) -> (Box<dyn VcpuScheduler>, Vec<Lane>) {
    let topo = Topology::from_spec(SPEC).expect("spec");
    let ncpus = topo.num_cpus();
    let config = SchedConfig {
        policy,
        max_entities: ncpus * ENTITIES_PER_CPU,
        ..SchedConfig::default()
    };
    let sched = build(topo, config).expect("scheduler");
    let per = ncpus / threads;
    let blocks: Vec<Vec<u32>> = (0..threads)
        .map(|t| ((t * per) as u32..((t + 1) * per) as u32).collect())
        .collect();
    let mut now = 0;
    for block in &blocks {
        let affinity: CpuSet = block
            .iter()
            .map(|c| CpuId(*c))
            .collect::<Result<_, _>>()
            .expect("CPU ids of the topology");
        for _ in 0..block.len() * ENTITIES_PER_CPU {
            let spec = EntitySpec {
                vm: VmId(0),
                class: SchedClass::Timeshare,
                priority: 10,
                affinity: affinity.clone(),
            };
            let id = sched.add_entity(spec, now).expect("add");
            now += 1000;
            sched.wake(id, now).expect("wake");
        }
    }
    let lanes = blocks
        .into_iter()
        .map(|cpus| {
            let running = cpus
                .iter()
                .map(|cpu| {
                    let d = sched.schedule(CpuId(*cpu), now, StopReason::Idle);
                    d.expect("schedule").entity
                })
                .collect();
            Lane {
                cpus,
                state: Mutex::new((running, now)),
            }
        })
        .collect();
    (sched, lanes)
}

/// The CPUs one thread drives, what each runs, and that thread's clock.
struct Lane {
    cpus: Vec<u32>,
    state: Mutex<(Vec<Option<EntityId>>, u64)>,
}

/// One thread's work: `ops` scheduler operations on its own CPUs. The
/// lane's state is copied to this thread for the run (its stack and its
/// allocations), so the threads write nothing shared but the scheduler.
fn drive(sched: &dyn VcpuScheduler, lane: &Lane, ops: u64) {
    let cpus = lane.cpus.clone();
    let mut guard = lane.state.lock().expect("lane");
    let (mut running, mut now) = (guard.0.clone(), guard.1);
    let now = &mut now;
    let mut done = 0;
    let mut i = 0usize;
    while done < ops {
        let slot = i % cpus.len();
        let cpu = CpuId(cpus[slot]);
        *now += 1000;
        let now = *now;
        let reason = if running[slot].is_none() {
            StopReason::Idle
        } else if i % 4 == 3 {
            StopReason::Blocked
        } else {
            StopReason::QuantumEnd
        };
        let blocked = if reason == StopReason::Blocked {
            running[slot]
        } else {
            None
        };
        let d = sched.schedule(cpu, now, reason).expect("schedule");
        running[slot] = d.entity;
        done += 1;
        if let Some(id) = blocked {
            sched.wake(id, now).expect("wake");
            done += 1;
        }
        i += 1;
    }
    *guard = (running, *now);
}

fn bench_contention(c: &mut Criterion) {
    let mut group = c.benchmark_group("contention");
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    group.sample_size(20);
    for policy in [PolicyKind::Haiku, PolicyKind::GlobalRoundRobin] {
        for threads in THREAD_COUNTS {
            let (sched, lanes) = setup(policy, threads);
            group.throughput(Throughput::Elements(threads as u64));
            let name = format!("{policy:?}");
            group.bench_function(BenchmarkId::new(name, threads), |b| {
                b.iter_custom(|iters| {
                    let barrier = Barrier::new(threads);
                    let sched = &*sched;
                    let elapsed: Vec<Duration> = std::thread::scope(|s| {
                        let handles: Vec<_> = lanes
                            .iter()
                            .map(|lane| {
                                let barrier = &barrier;
                                s.spawn(move || {
                                    barrier.wait();
                                    let start = Instant::now();
                                    drive(sched, lane, iters);
                                    start.elapsed()
                                })
                            })
                            .collect();
                        handles
                            .into_iter()
                            .map(|h| h.join().expect("thread"))
                            .collect()
                    });
                    elapsed.into_iter().max().unwrap_or_default()
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_contention);
criterion_main!(benches);
