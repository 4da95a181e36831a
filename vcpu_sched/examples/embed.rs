//! Embedding `vcpu_sched` in a VMM's vCPU loop, without KVM.
//!
//! N host threads play the host CPUs, M fake vCPUs play the guests. Each
//! CPU thread asks the scheduler what to run, "enters KVM_RUN" (a short
//! spin per guest step), and leaves it when the quantum deadline passes
//! (which a wake that queues behind it may bring forward:
//! `WakeDecision::shorten_quantum`), when it is kicked (a per-CPU flag + condvar, the IPI), or when the guest
//! halts. Halted vCPUs are woken by other threads: a timer thread (the
//! guest's APIC timer) and other vCPUs sending IPIs (`wake_by`: the
//! scheduler may place a vCPU next to the vCPU of its VM that woke it).
//! Every event is reported to the scheduler with the time it happened;
//! every decision is obeyed.
//!
//! While it runs, the main thread plays the VMM's operator and shows the
//! changes a running scheduler takes, each keeping the vCPU's handle,
//! penalty and statistics and returning the CPUs to kick: `set_affinity`
//! (a hog pinned to CPU 1), `set_class` (a sleeper made realtime),
//! `set_cpu_enabled` (CPU 1 out of service and back), `set_mode` (power
//! saving and back). It prints the introspection of the snapshot after
//! each step (per vCPU: state, CPU, effective priority, penalty, quantum),
//! then the snapshot table, and at the end removes a vCPU to show that
//! its old handle is refused (`SchedError::StaleEntity`), not given to the
//! next vCPU added.
//!
//! ```text
//! cargo run --release -p vcpu_sched --example embed [-- --policy haiku|global-rr|pinned|eevdf] [--ms 1500]
//! ```

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vcpu_sched::stats::EntityState;
use vcpu_sched::{
    build, CpuId, CpuSet, EntityId, EntitySpec, Mode, Nanos, PolicyKind, SchedClass, SchedConfig,
    SchedError, StopReason, Topology, VcpuScheduler, VmId,
};

/// One KVM_RUN step of a fake guest: how long the guest computes (spins).
const STEP: Duration = Duration::from_micros(20);

/// What a fake guest does.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Computes forever.
    Hog,
    /// Computes `run` then halts until its timer fires after `sleep`.
    Sleeper { run: Duration, sleep: Duration },
    /// Computes `run`, sends an IPI to vCPU `to`, halts until its timer.
    Sender {
        run: Duration,
        sleep: Duration,
        to: usize,
    },
    /// Computes `run` per IPI received, halts otherwise.
    Receiver { run: Duration },
}

struct Vcpu {
    id: EntityId,
    name: String,
    behaviour: Behaviour,
    /// Set while a CPU thread runs it: the scheduler must never give one
    /// vCPU to two CPUs at once.
    on_cpu: AtomicBool,
    /// Guest work done (steps).
    steps: AtomicU64,
    /// Time left in the current burst (ns); touched only by the CPU running it.
    burst_left: AtomicU64,
    /// Halts / wakes seen.
    halts: AtomicU64,
}

/// A host CPU: the kick flag and the condvar its thread parks on when
/// idle, and its turn: the running entity, when it was dispatched, and
/// the end of its quantum (a wake's cut lowers it).
struct HostCpu {
    kick: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
    turn: Mutex<Option<(EntityId, Nanos)>>,
    deadline: AtomicU64,
}

struct Vmm {
    sched: Box<dyn VcpuScheduler>,
    cpus: Vec<HostCpu>,
    vcpus: Vec<Vcpu>,
    /// Pending guest timers: (deadline, vCPU index).
    timers: Mutex<Vec<(Nanos, usize)>>,
    start: Instant,
    stop: AtomicBool,
    kicks_sent: AtomicU64,
}

impl Vmm {
    fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    /// Interrupt `cpu` (the IPI / signal a real VMM sends).
    fn kick(&self, cpu: CpuId) {
        let c = &self.cpus[cpu.0 as usize];
        c.kick.store(true, Ordering::Release);
        let _g = c.lock.lock();
        c.cv.notify_one();
        self.kicks_sent.fetch_add(1, Ordering::Relaxed);
    }

    /// An interrupt for vCPU `v` (timer, or an IPI from vCPU `by`):
    /// report the wake, obey the decision.
    fn wake(&self, v: usize, by: Option<usize>) {
        let (id, now) = (self.vcpus[v].id, self.now());
        let decision = match by {
            Some(w) => self.sched.wake_by(id, self.vcpus[w].id, now),
            None => self.sched.wake(id, now),
        };
        match decision {
            Ok(Some(d)) if d.kick => self.kick(d.cpu),
            Ok(Some(d)) => {
                // Queued behind the runner: its quantum may end earlier
                // (if that CPU still runs the turn the cut names).
                if let Some(cut) = d.shorten_quantum {
                    let hc = &self.cpus[d.cpu.0 as usize];
                    if *hc.turn.lock() == Some((cut.runner, cut.dispatched_at)) {
                        hc.deadline.fetch_min(cut.end, Ordering::AcqRel);
                    }
                }
            }
            Ok(None) => {}
            Err(e) => eprintln!("wake {}: {e}", self.vcpus[v].name),
        }
    }

    /// Obey a runtime change: kick the CPUs it names (or report its error).
    fn obey(&self, what: &str, change: Result<Vec<CpuId>, SchedError>) {
        match change {
            Ok(kicks) => {
                println!("{what}: kick {kicks:?}");
                for k in kicks {
                    self.kick(k);
                }
            }
            Err(e) => eprintln!("{what}: {e}"),
        }
    }

    /// The snapshot's introspection, one line per vCPU.
    fn show(&self) {
        let snap = self.sched.snapshot(self.now());
        println!(
            "  {:<14} {:<8} {:>4} {:>4} {:>4} {:>9}",
            "vcpu", "state", "cpu", "E", "pen", "quantum"
        );
        for v in &self.vcpus {
            let Some(e) = snap.entities.iter().find(|e| e.id == v.id) else {
                continue;
            };
            let cpu = match (e.state, e.cpu) {
                (EntityState::Blocked, _) | (_, None) => "-".to_string(),
                (_, Some(c)) => c.0.to_string(),
            };
            println!(
                "  {:<14} {:<8} {:>4} {:>4} {:>4} {:>7}us",
                v.name,
                e.state.as_str(),
                cpu,
                e.effective_priority,
                e.penalty,
                e.quantum / 1000
            );
        }
    }

    /// One guest step of vCPU `v`; returns true if the guest halted.
    fn guest_step(&self, v: usize) -> bool {
        let vc = &self.vcpus[v];
        let t0 = Instant::now();
        while t0.elapsed() < STEP {
            std::hint::spin_loop();
        }
        vc.steps.fetch_add(1, Ordering::Relaxed);
        let (run, sleep, to) = match vc.behaviour {
            Behaviour::Hog => return false,
            Behaviour::Sleeper { run, sleep } => (run, Some(sleep), None),
            Behaviour::Sender { run, sleep, to } => (run, Some(sleep), Some(to)),
            Behaviour::Receiver { run } => (run, None, None),
        };
        let left = vc.burst_left.load(Ordering::Relaxed);
        let left = if left == 0 {
            run.as_nanos() as u64
        } else {
            left
        };
        let left = left.saturating_sub(STEP.as_nanos() as u64);
        vc.burst_left.store(left, Ordering::Relaxed);
        if left > 0 {
            return false;
        }
        if let Some(to) = to {
            self.wake(to, Some(v));
        }
        if let Some(sleep) = sleep {
            let at = self.now() + sleep.as_nanos() as Nanos;
            self.timers.lock().push((at, v));
        }
        vc.halts.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The vCPU loop of one host CPU.
    fn cpu_thread(&self, cpu: CpuId) {
        let hc = &self.cpus[cpu.0 as usize];
        let mut reason = StopReason::Idle;
        while !self.stop.load(Ordering::Acquire) {
            let now = self.now();
            // The turn's identity and deadline change together, under the
            // lock a cut checks them with.
            let mut turn = hc.turn.lock();
            let d = match self.sched.schedule(cpu, now, reason) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("schedule on {cpu:?}: {e}");
                    return;
                }
            };
            *turn = d.entity.map(|id| (id, now));
            hc.deadline.store(now + d.quantum, Ordering::Release);
            drop(turn);
            // Idle CPUs the policy wants woken for work left queued here.
            for &k in &d.kicks {
                self.kick(k);
            }
            let Some(id) = d.entity else {
                // Idle: park until kicked (re-check the flag under the lock
                // so a kick between schedule() and here is not lost).
                let mut g = hc.lock.lock();
                while !hc.kick.load(Ordering::Acquire) && !self.stop.load(Ordering::Acquire) {
                    hc.cv.wait_for(&mut g, Duration::from_millis(5));
                }
                hc.kick.store(false, Ordering::Release);
                reason = StopReason::Idle;
                continue;
            };
            let v = id.index() as usize;
            let vc = &self.vcpus[v];
            assert!(
                !vc.on_cpu.swap(true, Ordering::AcqRel),
                "{} dispatched on two CPUs at once",
                vc.name
            );
            // "KVM_RUN" until the quantum timer, a kick or a halt.
            reason = loop {
                if hc.kick.swap(false, Ordering::AcqRel) {
                    break StopReason::Preempted;
                }
                if self.guest_step(v) {
                    break StopReason::Blocked;
                }
                if self.now() >= hc.deadline.load(Ordering::Acquire) {
                    break StopReason::QuantumEnd;
                }
                if self.stop.load(Ordering::Acquire) {
                    break StopReason::Preempted;
                }
            };
            vc.on_cpu.store(false, Ordering::Release);
        }
    }

    /// The guest timer device: wakes halted vCPUs whose timer expired.
    fn timer_thread(&self) {
        let mut due = Vec::new();
        while !self.stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_micros(100));
            let now = self.now();
            {
                let mut t = self.timers.lock();
                let mut i = 0;
                while i < t.len() {
                    if t[i].0 <= now {
                        due.push(t.swap_remove(i).1);
                    } else {
                        i += 1;
                    }
                }
            }
            due.sort_unstable();
            for v in due.drain(..) {
                self.wake(v, None);
            }
        }
    }
}

fn main() {
    let mut policy = PolicyKind::Haiku;
    let mut ms = 1500u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--policy" => {
                policy = match args.next().unwrap_or_default().parse() {
                    Ok(p) => p,
                    Err(e) => {
                        eprintln!("embed: {e}");
                        std::process::exit(2);
                    }
                }
            }
            "--ms" => ms = args.next().and_then(|s| s.parse().ok()).unwrap_or(ms),
            _ => {
                eprintln!("usage: embed [--policy haiku|global-rr|pinned|eevdf] [--ms N]");
                std::process::exit(2);
            }
        }
    }
    // Two host CPUs (this machine has two), 6 vCPUs in 2 VMs.
    let topo = Topology::from_spec("1x2x1").expect("topology");
    let config = SchedConfig {
        policy,
        ..SchedConfig::default()
    };
    let sched = match build(topo.clone(), config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannot build the {policy:?} scheduler: {e}");
            std::process::exit(1);
        }
    };
    let ms_ = Duration::from_micros;
    let plan: Vec<(&str, u32, Behaviour)> = vec![
        ("vm0/hog0", 0, Behaviour::Hog),
        ("vm0/hog1", 0, Behaviour::Hog),
        (
            "vm1/sleeper",
            1,
            Behaviour::Sleeper {
                run: ms_(200),
                sleep: ms_(800),
            },
        ),
        (
            "vm1/sender",
            1,
            Behaviour::Sender {
                run: ms_(100),
                sleep: ms_(400),
                to: 4,
            },
        ),
        ("vm1/receiver", 1, Behaviour::Receiver { run: ms_(60) }),
        (
            "vm1/sleeper2",
            1,
            Behaviour::Sleeper {
                run: ms_(40),
                sleep: ms_(300),
            },
        ),
    ];
    let mut vcpus = Vec::new();
    for (name, vm, behaviour) in plan {
        let spec = EntitySpec {
            vm: VmId(vm),
            class: SchedClass::Timeshare,
            priority: 10,
            affinity: CpuSet::first_n(topo.num_cpus() as u32),
        };
        let id = sched.add_entity(spec, 0).expect("add_entity");
        assert_eq!(
            id.index() as usize,
            vcpus.len(),
            "example indexes vCPUs by entity id"
        );
        vcpus.push(Vcpu {
            id,
            name: name.to_string(),
            behaviour,
            on_cpu: AtomicBool::new(false),
            steps: AtomicU64::new(0),
            burst_left: AtomicU64::new(0),
            halts: AtomicU64::new(0),
        });
    }
    let vmm = Arc::new(Vmm {
        sched,
        cpus: (0..topo.num_cpus())
            .map(|_| HostCpu {
                kick: AtomicBool::new(false),
                lock: Mutex::new(()),
                cv: Condvar::new(),
                turn: Mutex::new(None),
                deadline: AtomicU64::new(0),
            })
            .collect(),
        vcpus,
        timers: Mutex::new(Vec::new()),
        start: Instant::now(),
        stop: AtomicBool::new(false),
        kicks_sent: AtomicU64::new(0),
    });
    let mut threads = Vec::new();
    for c in 0..topo.num_cpus() {
        let vmm = Arc::clone(&vmm);
        threads.push(
            std::thread::Builder::new()
                .name(format!("cpu{c}"))
                .spawn(move || vmm.cpu_thread(CpuId(c as u32)))
                .expect("spawn"),
        );
    }
    {
        let vmm = Arc::clone(&vmm);
        threads.push(
            std::thread::Builder::new()
                .name("timer".into())
                .spawn(move || vmm.timer_thread())
                .expect("spawn"),
        );
    }
    // Power on: every vCPU except the IPI receiver starts runnable.
    for v in 0..vmm.vcpus.len() {
        if !matches!(vmm.vcpus[v].behaviour, Behaviour::Receiver { .. }) {
            vmm.wake(v, None);
        }
    }
    // Changes while running, each after a sixth of the run.
    let step = Duration::from_millis(ms / 6);
    let (hog1, sleeper) = (vmm.vcpus[1].id, vmm.vcpus[2].id);
    std::thread::sleep(step);
    println!("running:");
    vmm.show();
    let cpu1 = CpuSet::single(CpuId(1)).expect("a small CPU id");
    vmm.obey(
        "set_affinity(vm0/hog1, {1})",
        vmm.sched.set_affinity(hog1, cpu1, vmm.now()),
    );
    vmm.obey(
        "set_class(vm1/sleeper, realtime 100)",
        vmm.sched
            .set_class(sleeper, SchedClass::Realtime, 100, vmm.now()),
    );
    std::thread::sleep(step);
    vmm.show();
    vmm.obey(
        "set_cpu_enabled(1, false)",
        vmm.sched.set_cpu_enabled(CpuId(1), false, vmm.now()),
    );
    std::thread::sleep(step);
    println!("CPU 1 out of service (vm0/hog1 may run only there: it waits):");
    vmm.show();
    vmm.obey(
        "set_cpu_enabled(1, true)",
        vmm.sched.set_cpu_enabled(CpuId(1), true, vmm.now()),
    );
    let kicks = vmm.sched.set_mode(Mode::PowerSaving, vmm.now());
    vmm.obey("set_mode(power-saving)", Ok(kicks));
    std::thread::sleep(step);
    println!("power saving (longer quanta):");
    vmm.show();
    let kicks = vmm.sched.set_mode(Mode::LowLatency, vmm.now());
    vmm.obey("set_mode(low-latency)", Ok(kicks));
    std::thread::sleep(Duration::from_millis(ms).saturating_sub(4 * step));
    vmm.stop.store(true, Ordering::Release);
    for c in 0..vmm.cpus.len() {
        vmm.kick(CpuId(c as u32));
    }
    for t in threads {
        let _ = t.join();
    }
    let snap = vmm.sched.snapshot(vmm.now());
    println!("{}", snap.to_table());
    println!("{:<14} {:>8} {:>6}", "vcpu", "steps", "halts");
    for v in &vmm.vcpus {
        println!(
            "{:<14} {:>8} {:>6}",
            v.name,
            v.steps.load(Ordering::Relaxed),
            v.halts.load(Ordering::Relaxed)
        );
    }
    println!("kicks sent: {}", vmm.kicks_sent.load(Ordering::Relaxed));
    // A removed vCPU's handle stays refused, even when its slot is reused.
    let old = vmm.vcpus[5].id;
    let now = vmm.now();
    vmm.sched.remove_entity(old, now).expect("remove_entity");
    let spec = EntitySpec {
        vm: VmId(1),
        class: SchedClass::Timeshare,
        priority: 10,
        affinity: topo.all_cpus(),
    };
    let new = vmm.sched.add_entity(spec, now).expect("add_entity");
    println!(
        "removed {old}, added {new} (same slot {}, new generation): wake({old}) -> {:?}",
        new.index(),
        vmm.sched.wake(old, now)
    );
}
