//! Steady-state cost of one scheduler operation with N vCPUs on a synthetic
//! topology, by a plain loop (no criterion, no timing harness in the loop),
//! so that `valgrind --tool=cachegrind` can count it: `ci/measure_ops.sh`
//! runs this twice, with N and N + 200000 operations, and divides the
//! difference of the instruction and L1-miss totals by 200000, which
//! removes the setup and warm-up.
//!
//! Each operation is a cycle that leaves the scheduler in the state it
//! found it (the differential needs a steady state), made only of calls a
//! VMM makes, kicks included (every kicked CPU calls `schedule`):
//! - `quantum_end`: every vCPU runnable; the next busy CPU (round robin)
//!   ends its runner's quantum (requeue, possibly rebalanced, and pick).
//! - `pick`: a quarter of the vCPUs asleep; the runner of the next busy
//!   CPU blocks and that CPU picks the next one, then the vCPU asleep the
//!   longest wakes (an enqueue while every CPU is busy).
//! - `wake`: half the CPUs (at most half the vCPUs) run, the rest of the
//!   vCPUs sleep; the vCPU asleep the longest wakes (idle CPU selected,
//!   claimed and kicked; the kicked CPU dispatches it), then the runner of
//!   the next busy CPU blocks and that CPU idles.
//! - `mix`: the loop of one thread of `benches/contention.rs`: every vCPU
//!   runnable, the CPUs in turn; every fourth call the runner blocks and
//!   is woken at once, the others are quantum ends (a call counts as one
//!   operation, its wake as another).
//!
//! With as many CPUs as vCPUs or more, `pick` meets idle CPUs and is a wake
//! on an idle machine too.
//!
//! The clock advances by 1 ms / CPUs per call, so each CPU sees about one
//! event per millisecond on every machine size (a 1024-CPU host handles
//! 128 times the events of an 8-CPU host in the same time).
//!
//! # What the counts showed
//!
//! The cost that grew with CPUs was algorithmic, not memory alone: an
//! idle CPU looked at every queue of the machine three times per call
//! (steal, steal again after publishing itself idle, the
//! idle-while-waiting statistic: 3 x 1280 queue lengths on 4x64x4, 217000
//! instructions and 4900 L1 misses per `wake` cycle); a waker on a busy
//! machine read every LLC's idle bitmap twice; the least-loaded-core
//! choice at every quantum end sampled 16 cores, a cache line each. Now an
//! idle CPU visits only queues that per-LLC bitmaps and counts show as
//! non-empty, a waker asks the per-package idle counts first, and the
//! balance sample is four cores (the origin, the light core of its LLC and
//! of one other LLC, a rotating one), searched at most once per core and
//! load epoch when it finds nothing worth a move.
//!
//! Written by every CPU on every call: a global clock (`fetch_max` on one
//! line), the LLC's idle word (`schedule` cleared its bit with a
//! read-modify-write even when it was clear), the idle-search cursor of
//! the entity's previous CPU (written by whichever CPU woke it), and
//! per-CPU slots and accounting packed side by side (false sharing). None
//! of these is written on the hot path now; per-CPU and per-core state is
//! cache-line padded.
//!
//! L1 misses at 1024 CPUs stay well above those at 8: one thread driving
//! 1024 CPUs in turn leaves no CPU's state in the simulated L1 between two
//! of its calls, so every line a call touches (its CPU's slot and
//! accounting, its core's queue, the two entities) misses. That is the
//! footprint of an operation, which a real CPU also pays after a
//! millisecond of guest code.
//!
//! Run: `cargo run --release -p vcpu_sched --example op_cost -- 4x64x4 2048 300000 quantum_end`
//! (arguments: topology spec, vCPUs, operations, operation, and optionally
//! the policy, `haiku` or `global_rr`, to compare with the global-lock
//! baseline; then the VMs' co-scheduling, `off` or `relaxed`, and the
//! vCPUs per VM, all of them in one VM unless given). With `relaxed`
//! every VM co-schedules and a cycle includes what that adds: the
//! schedule calls of the CPUs its co-starts kick, the pulls of its
//! co-stops (if `costop_skew` were set) and skew tracking.

use std::collections::VecDeque;
use vcpu_sched::{
    build, Coschedule, CpuId, EntityId, EntitySpec, Nanos, PolicyKind, SchedClass, SchedConfig,
    SchedError, StopReason, Topology, VcpuScheduler, VmId,
};

/// Per-CPU event period: the clock advances by this / CPUs per call.
const CPU_EVENT_PERIOD: Nanos = 1_000_000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    QuantumEnd,
    Pick,
    Wake,
    Mix,
}

impl std::str::FromStr for Op {
    type Err = String;
    fn from_str(s: &str) -> Result<Op, String> {
        match s {
            "quantum_end" => Ok(Op::QuantumEnd),
            "pick" => Ok(Op::Pick),
            "wake" => Ok(Op::Wake),
            "mix" => Ok(Op::Mix),
            _ => Err(format!(
                "unknown operation {s:?} (quantum_end, pick, wake, mix)"
            )),
        }
    }
}

/// How the vCPUs form VMs: co-scheduled or not, and how many vCPUs each
/// (None: one VM of all of them).
#[derive(Clone, Copy)]
struct Vms {
    coschedule: Coschedule,
    vcpus: Option<usize>,
}

/// The scheduler and what the caller (a VMM) knows: what each CPU runs,
/// who sleeps (oldest first), the kicks it still has to deliver.
struct Driver {
    sched: Box<dyn VcpuScheduler>,
    running: Vec<Option<EntityId>>,
    asleep: VecDeque<EntityId>,
    kicks: Vec<CpuId>,
    now: Nanos,
    tick: Nanos,
    next_cpu: usize,
    /// Calls made by `mix`.
    calls: u64,
}

impl Driver {
    fn new(
        spec: &str,
        vcpus: usize,
        op: Op,
        policy: PolicyKind,
        vms: Vms,
    ) -> Result<Driver, Box<dyn std::error::Error>> {
        let topo = Topology::from_spec(spec)?;
        let ncpus = topo.num_cpus();
        let affinity = topo.all_cpus();
        let config = SchedConfig {
            policy,
            max_entities: vcpus.max(1),
            ..SchedConfig::default()
        };
        let sched = build(topo, config)?;
        let ready = match op {
            Op::QuantumEnd | Op::Mix => vcpus,
            Op::Pick => vcpus - vcpus / 4,
            Op::Wake => (ncpus / 2).min(vcpus / 2).max(1),
        };
        let mut d = Driver {
            sched,
            running: vec![None; ncpus],
            asleep: VecDeque::new(),
            kicks: Vec::new(),
            now: 0,
            tick: (CPU_EVENT_PERIOD / ncpus as Nanos).max(1),
            next_cpu: 0,
            calls: 0,
        };
        let per_vm = vms.vcpus.unwrap_or(vcpus).max(1);
        for vm in 0..vcpus.div_ceil(per_vm) {
            d.sched
                .set_coschedule(VmId(vm as u32), vms.coschedule, d.now)?;
        }
        for i in 0..vcpus {
            let spec = EntitySpec {
                vm: VmId((i / per_vm) as u32),
                class: SchedClass::Timeshare,
                priority: 10,
                affinity: affinity.clone(),
            };
            let id = d.sched.add_entity(spec, d.now)?;
            if i < ready {
                d.advance();
                if let Some(w) = d.sched.wake(id, d.now)? {
                    if w.kick {
                        d.kicks.push(w.cpu);
                    }
                }
                d.deliver_kicks()?;
            } else {
                d.asleep.push_back(id);
            }
        }
        for cpu in 0..ncpus {
            if d.running[cpu].is_none() {
                d.dispatch(cpu, StopReason::Idle)?;
            }
        }
        d.deliver_kicks()?;
        Ok(d)
    }

    fn advance(&mut self) {
        self.now += self.tick;
    }

    fn dispatch(&mut self, cpu: usize, reason: StopReason) -> Result<Option<EntityId>, SchedError> {
        self.advance();
        let d = self.sched.schedule(CpuId(cpu as u32), self.now, reason)?;
        let stopped = std::mem::replace(&mut self.running[cpu], d.entity);
        self.kicks.extend(d.kicks);
        Ok(stopped)
    }

    /// Every kicked CPU calls `schedule`, as a VMM's vCPU thread would.
    fn deliver_kicks(&mut self) -> Result<(), SchedError> {
        while let Some(cpu) = self.kicks.pop() {
            let cpu = cpu.0 as usize;
            let reason = if self.running[cpu].is_some() {
                StopReason::Preempted
            } else {
                StopReason::Idle
            };
            self.dispatch(cpu, reason)?;
        }
        Ok(())
    }

    /// Next CPU (round robin) that runs something.
    fn busy_cpu(&mut self) -> Option<usize> {
        let n = self.running.len();
        (0..n)
            .map(|k| (self.next_cpu + k) % n)
            .find(|c| self.running[*c].is_some())
            .inspect(|c| self.next_cpu = (c + 1) % n)
    }

    fn wake_oldest(&mut self) -> Result<(), SchedError> {
        if let Some(id) = self.asleep.pop_front() {
            self.advance();
            if let Some(w) = self.sched.wake(id, self.now)? {
                if w.kick {
                    self.kicks.push(w.cpu);
                }
            }
        }
        Ok(())
    }

    fn block_next(&mut self) -> Result<(), SchedError> {
        if let Some(cpu) = self.busy_cpu() {
            if let Some(id) = self.dispatch(cpu, StopReason::Blocked)? {
                self.asleep.push_back(id);
            }
        }
        Ok(())
    }

    fn op(&mut self, op: Op) -> Result<(), SchedError> {
        match op {
            Op::QuantumEnd => {
                if let Some(cpu) = self.busy_cpu() {
                    self.dispatch(cpu, StopReason::QuantumEnd)?;
                }
            }
            Op::Pick => {
                self.block_next()?;
                self.wake_oldest()?;
            }
            Op::Wake => {
                self.wake_oldest()?;
                self.deliver_kicks()?;
                self.block_next()?;
            }
            Op::Mix => {
                let cpu = (self.calls % self.running.len() as u64) as usize;
                let block = self.calls % 4 == 3 && self.running[cpu].is_some();
                self.calls += 1;
                if block {
                    if let Some(id) = self.dispatch(cpu, StopReason::Blocked)? {
                        if let Some(w) = self.sched.wake(id, self.now)? {
                            if w.kick {
                                self.kicks.push(w.cpu);
                            }
                        }
                        self.calls += 1;
                    }
                } else {
                    let reason = if self.running[cpu].is_some() {
                        StopReason::QuantumEnd
                    } else {
                        StopReason::Idle
                    };
                    self.dispatch(cpu, reason)?;
                }
            }
        }
        self.deliver_kicks()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let spec = args.next().unwrap_or_else(|| "1x4x2".into());
    let vcpus: usize = args.next().map_or(Ok(65_536), |a| a.parse())?;
    let ops: u64 = args.next().map_or(Ok(3_000_000), |a| a.parse())?;
    let op: Op = args.next().map_or(Ok(Op::QuantumEnd), |a| a.parse())?;
    let policy = match args.next().as_deref() {
        None | Some("haiku") => PolicyKind::Haiku,
        Some("global_rr") => PolicyKind::GlobalRoundRobin,
        Some(other) => return Err(format!("unknown policy {other:?} (haiku, global_rr)").into()),
    };
    let coschedule: Coschedule = args.next().map_or(Ok(Coschedule::Off), |a| a.parse())?;
    let per_vm = match args.next() {
        None => None,
        Some(a) => match a.parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                return Err(format!("vCPUs per VM: expected a positive count, found {a:?}").into())
            }
        },
    };
    let vms = Vms {
        coschedule,
        vcpus: per_vm,
    };
    let mut d = Driver::new(&spec, vcpus, op, policy, vms)?;
    // Warm up: every vCPU goes through the cycle at least once.
    for _ in 0..vcpus + 1_000 {
        d.op(op)?;
    }
    let start = std::time::Instant::now();
    // `mix` counts a block and its wake as two operations.
    let first = d.calls;
    let mut done = 0;
    while done < ops {
        std::hint::black_box(d.op(op))?;
        done = if op == Op::Mix {
            d.calls - first
        } else {
            done + 1
        };
    }
    let per_op = start.elapsed().as_nanos() as f64 / ops.max(1) as f64;
    let name = ["quantum_end", "pick", "wake", "mix"][op as usize];
    println!("{spec} {vcpus} vCPUs: {name} {per_op:.0} ns/op over {ops} ops");
    Ok(())
}
