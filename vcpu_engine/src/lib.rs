//! Pacer's scheduled vCPU engine: `vcpu_sched` decides which vCPU runs on
//! which host CPU, for how long, and when it moves; the engine carries the
//! decisions out on real KVM vCPUs.
//!
//! Pacer's VMM (`vmm`) is one user of this crate; any VMM that owns its
//! KVM vCPUs (`kvm_ioctls::VcpuFd`) can be another. The crate sits between
//! the scheduler and the VMM: `vcpu_sched` <- `vcpu_engine` <- VMM, and
//! uses `devices` only for the glue to Pacer's own LAPIC/IOAPIC model
//! ([`ChipHost`]).
//!
//! # The API in brief
//!
//! - Build one [`Engine`] per process run: [`Engine::new`] with an
//!   [`EngineConfig`] (policy, mode, tunables, [`DispatchKind`], halt
//!   polling, an optional [`trace::Trace`]; from `Default`) over a
//!   [`CpuMap`] of the host CPUs it may use ([`CpuMap::from_host`],
//!   [`host_cpus::online_cpus`]).
//! - Register a VM with a [`VmSchedSpec`] ([`VmSchedSpec::new`]: name and
//!   core set; then [`vcpu_sched::SchedClass`], priority, [`Shares`] if
//!   they differ), its interrupt controller (an
//!   [`InterruptSource`]; [`NoInterrupts`] for none) and its exit handler
//!   (a [`VcpuExitHandler`]: port I/O, MMIO, MSRs, the VM-wide stop).
//!   With Pacer's LAPIC/IOAPIC (`devices::irqchip::IrqChip`), per VM and
//!   before its vCPUs first run: [`apic_cpuid`] adjusts the CPUID table
//!   (x2APIC, TSC deadline, no PV feature needing KVM's local APIC),
//!   [`route_apic_msrs`] sends the local
//!   APIC's MSRs to the exit handler, [`TscClock::from_vcpu`] maps the
//!   guest TSC to the engine clock ([`now_ns`]), and the chip is built over
//!   a [`ChipHost::new`]; adding the VM attaches the chip to it
//!   ([`InterruptSource::attached`]), nothing more to call:
//!   - [`Engine::add_vm_gated`]: the VMM keeps its own vCPU threads; each
//!     runs [`run_vcpu_loop`] with its [`VcpuRunner`] (the `VcpuFd` plus
//!     exit dispatch) and the [`EngineGate`] of its vCPU, which is the gate
//!     around every KVM_RUN (park until dispatched, inject, give the CPU
//!     back at the slice's end, on a halt, a yield or a preemption);
//!   - or [`Engine::add_vm`]: hand over the runners and the engine makes
//!     the threads (or, with [`DispatchKind::Workers`], runs the vCPUs on
//!     per-CPU workers).
//! - With [`DispatchKind::KvmIrqchip`] the VMM instead creates the VM with
//!   KVM's in-kernel irqchip (KVM_CREATE_IRQCHIP) and passes
//!   [`NoInterrupts`]: the engine learns halts and wake-ups from KVM (the
//!   vCPU's KVM_MP_STATE at the exits it causes, KVM's per-vCPU `blocking`
//!   statistic sampled every [`EngineConfig::kvm_poll_ns`]); a vCPU
//!   thread must then be free to call `sched_setattr` on itself (its
//!   host time slice).
//! - With [`DispatchKind::Ranked`] the VM has KVM's in-kernel irqchip too
//!   (registered with [`NoInterrupts`]), and the engine enacts the
//!   scheduler's decisions as each vCPU thread's host rank (a real-time
//!   priority for halted vCPUs, the normal class for a CPU's owner, the
//!   idle class for those queued behind it) and CPUs: the host kernel then
//!   switches between the threads on its own fast path (`ranked.rs`). The
//!   process needs the right to real-time priorities up to 48 (root,
//!   CAP_SYS_NICE or RLIMIT_RTPRIO); every thread that calls the engine
//!   may be raised to that priority while it holds the engine's locks.
//! - [`Engine::start_vm`] lets the boot vCPU run (the others wait for a
//!   start-up IPI from the interrupt controller).
//! - The interrupt controller calls [`Engine::notify`] when something
//!   becomes pending for a vCPU: a halted vCPU is woken through the
//!   scheduler's wake path, a running one kicked so the interrupt goes in
//!   at once. Guest timer deadlines go to [`Engine::set_guest_timer`];
//!   when one expires the engine calls [`InterruptSource::timer_expired`].
//! - [`Engine::pause_vm`], [`Engine::resume_vm`]; once the VM's handler
//!   reports [`VcpuExitHandler::stopping`], [`Engine::finish_vm`] takes the
//!   VM out and returns each vCPU's [`FinishedVcpu`] (exit reason and
//!   counters, [`VcpuSchedStats`]); [`Engine::shutdown`] at the end.
//! - Statistics while running: [`Engine::snapshot`] (the scheduler's
//!   counters), [`Engine::vcpus_now`], [`Engine::vcpus_engine_now`],
//!   [`Engine::census`]; changes while running: [`Engine::set_vcpu_affinity`],
//!   [`Engine::set_vcpu_priority`], [`Engine::set_mode`], ... .
//! - [`thread_hook::set_thread_start_hook`] runs the VMM's code (a seccomp
//!   filter) at the start of every thread the engine starts.
//! - The engine takes the kick signal (SIGRTMIN, [`signals::kick_signal`])
//!   for itself: a VMM neither handles nor blocks it in vCPU threads.
//! - Recording a trace: [`trace::Tracer`]; its file format, for a reader:
//!   [`trace::format`], [`trace::record`].
//!
//! Keeping up with new versions: the configuration, spec and statistics
//! structs ([`EngineConfig`], [`VmSchedSpec`], [`Shares`], [`stats`],
//! [`VcpuStats`], [`FinishedVcpu`], ...) and the error and exit enums are
//! `#[non_exhaustive]`, so settings, counters and variants can be added in
//! a minor version: build them from their constructor or `Default` and
//! assign fields, read their fields, and give `match`es a `_` arm. What the
//! engine needs only internally is not public.
//!
//! The interrupt controller is behind [`InterruptSource`], so a VMM with
//! another user-space controller implements that trait. With KVM's
//! in-kernel irqchip, where KVM handles HLT itself, the VMM chooses
//! [`DispatchKind::KvmIrqchip`] (above): the engine then learns halts and
//! wake-ups from KVM instead of from HLT exits.
//!
//! # A VMM's vCPU loop
//!
//! ```no_run
//! use std::sync::Arc;
//! use vcpu_engine::{
//!     run_vcpu_loop, CpuMap, Engine, EngineConfig, NoInterrupts, VcpuExitHandler,
//!     VcpuExitReason, VcpuRunner, VmSchedSpec,
//! };
//!
//! /// The VMM's devices, as the engine's vCPU loop calls them.
//! struct Devices;
//! impl VcpuExitHandler for Devices {
//!     fn pio_in(&self, _vcpu: u32, _port: u16, data: &mut [u8]) { data.fill(0xff) }
//!     fn pio_out(&self, _vcpu: u32, _port: u16, _data: &[u8]) {}
//!     fn mmio_read(&self, _vcpu: u32, _addr: u64, data: &mut [u8]) { data.fill(0xff) }
//!     fn mmio_write(&self, _vcpu: u32, _addr: u64, _data: &[u8]) {}
//!     fn stopping(&self) -> bool { false }
//!     fn vcpu_failed(&self, vcpu: u32, reason: &VcpuExitReason) {
//!         eprintln!("vcpu{vcpu}: {reason}");
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cpus = vcpu_engine::host_cpus::online_cpus()?;
//! let engine = Engine::new(EngineConfig::default(), CpuMap::from_host(&cpus)?)?;
//!
//! let kvm = kvm_ioctls::Kvm::new()?;
//! let vm = kvm.create_vm()?;
//! // ... guest memory, registers: the VMM's business ...
//! let handler = Arc::new(Devices);
//! let mut spec = VmSchedSpec::new("vm0", cpus.clone());
//! spec.shares.weight = 200; // twice the CPU of a default VM when contended
//! let (slot, gates) = engine.add_vm_gated(&spec, 2, Arc::new(NoInterrupts), handler.clone())?;
//! let mut threads = Vec::new();
//! for mut gate in gates {
//!     // The VMM's own vCPU thread: its VcpuFd, the engine's gate.
//!     let mut runner = VcpuRunner::new(gate.index(), vm.create_vcpu(gate.index().into())?, handler.clone());
//!     threads.push(std::thread::spawn(move || run_vcpu_loop(&mut runner, &mut gate)));
//! }
//! engine.start_vm(slot);
//! // ... the interrupt controller calls engine.notify(slot, vcpu) ...
//! // Once `handler.stopping()` is true:
//! for v in engine.finish_vm(slot, std::time::Duration::from_secs(10)) {
//!     println!("{} exits, {} ns run", v.outcome.stats.exits, v.sched.run_ns);
//! }
//! for t in threads {
//!     t.join().ok();
//! }
//! engine.shutdown();
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//!
//! Every vCPU of every VM of the run is an entity of one scheduler
//! (`vcpu_sched`, built for the configured policy over the topology of
//! `[host] cpus`; [`cpu_map`] keeps the one mapping between the OS's CPU
//! numbers and the scheduler's). Each scheduled host CPU (`cpu::CpuSlot`)
//! runs at most one vCPU at a time; every other vCPU is parked (a condition
//! variable, never spinning) or halted.
//!
//! A dispatched vCPU runs until one of these makes it give the CPU back
//! (`dispatch`):
//! - its time slice ends: a POSIX timer of the thread that runs it sends
//!   the kick signal (`clock::QuantumTimer`), KVM_RUN returns EINTR, and
//!   the CPU calls `schedule(QuantumEnd)`. A wake that queues another vCPU
//!   behind it may bring that end forward (the policy's
//!   `WakeDecision::shorten_quantum`): the waker's thread re-arms the
//!   timer (`cpu::CpuSlot::cut_quantum`);
//! - the scheduler kicks its CPU (a wake that may preempt it): the same
//!   signal, `schedule(Preempted)`;
//! - the guest halts with nothing to take: `schedule(Blocked)` — exact,
//!   because without KVM's in-kernel irqchip a HLT exits to Pacer;
//! - the guest writes the yield port: `schedule(Yielded)`;
//! - its VM pauses or stops.
//!
//! Interrupts come from Pacer's own interrupt controller (one per VM, the
//! [`irq::InterruptSource`] trait). When one becomes pending for a vCPU
//! the controller calls [`Engine::notify`]: a halted vCPU is woken through
//! `vcpu_sched`'s wake path (its placement and kick rules); a running one
//! is kicked out of KVM_RUN so that the interrupt is injected at once. Guest
//! timers live in one timer thread (`timers`) and fire whatever their
//! vCPU is doing. INIT and start-up IPIs move application processors in
//! and out of [`vcpu_state::RunState::WaitForSipi`].
//!
//! Two mechanisms put a dispatched vCPU on its CPU ([`DispatchKind`]): a
//! thread per vCPU that is bound to the CPU and handed the CPU by the
//! previous owner (`threads`), or a worker thread per CPU that runs
//! whichever vCPU it is handed (`workers`). Both share every decision
//! above; they differ only in who executes KVM_RUN. Under KVM's
//! in-kernel local APIC, `kvm-irqchip` hands the CPU as `threads` does
//! and learns halts from KVM, and `ranked` lets the host kernel switch
//! the threads by the ranks the engine gives them (`ranked.rs` has the
//! design).
//!
//! Lock order: a CPU's `owner` before its turn (`cpu::CpuSlot::lock_turn`)
//! and before a vCPU's `ctl`; the scheduler's own
//! locks are never held across a call out of it; no lock is held while
//! signalling a thread or calling the interrupt controller.

#![warn(missing_docs)]

pub mod clock;
mod control;
mod cpu;
mod cpu_events;
pub mod cpu_map;
mod dispatch;
pub mod host_cpus;
pub mod irq;
mod kvm_halts;
pub mod pause_loop;
mod rank;
mod ranked;
mod sibling_share;
pub mod signals;
mod spin_watch;
pub mod stats;
pub mod thread_hook;
mod threads;
mod timers;
pub mod trace;
mod trace_points;
pub mod vcpu;
mod vcpu_state;
mod workers;

pub use self::clock::now_ns;
pub use self::control::MOVE_TIMEOUT;
pub use self::cpu_map::CpuMap;
pub use self::host_cpus::{HostCpu, HostCpuSet};
pub use self::irq::{
    apic_cpuid, route_apic_msrs, route_msrs, ChipHost, CpuEvents, InterruptSource, NoInterrupts,
    TscClock,
};
pub use self::stats::{VcpuEngineNow, VcpuNow, VcpuSchedStats};
pub use self::threads::EngineGate;
pub use self::vcpu::{
    run_vcpu_loop, GateDecision, MsrFault, VcpuExitHandler, VcpuExitReason, VcpuGate, VcpuOutcome,
    VcpuRunner, VcpuStats, VcpuStep,
};
pub use self::vcpu_state::{EngineVcpu, RunState};
/// The scheduler this engine carries out (its types appear in this API).
pub use vcpu_sched;

use self::cpu::CpuSlot;
use self::timers::{TimerKey, Timers};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vcpu_sched::tunables::QuantumTable;
use vcpu_sched::{
    EntityId, EntitySpec, Mode, PolicyKind, SchedClass, SchedConfig, SchedError, SchedSnapshot,
    Tunables, VcpuScheduler, VmId,
};

/// How the engine puts a dispatched vCPU on its host CPU. The default is
/// [`DispatchKind::Ranked`], Pacer's VMM's; [`EngineConfig::default`]
/// keeps [`DispatchKind::Threads`], which works with any interrupt
/// controller of an embedder's, its own in user space included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DispatchKind {
    /// One thread per vCPU, parked until the scheduler dispatches it, then
    /// bound to its CPU; the CPU is handed from thread to thread.
    Threads,
    /// One worker thread per host CPU runs whichever vCPU it is handed.
    Workers,
    /// Threads, with KVM's in-kernel local APIC: the guest's halts, APIC
    /// timer and IPIs never leave KVM_RUN; the engine learns halts and
    /// wake-ups from KVM (`kvm_halts`). The VMM creates the VM with
    /// KVM_CREATE_IRQCHIP and registers it with [`NoInterrupts`].
    KvmIrqchip,
    /// KVM's in-kernel local APIC, and a thread per vCPU that the host
    /// kernel switches by the ranks and CPUs the engine gives it from the
    /// scheduler's decisions (host real-time priorities: `ranked.rs`):
    /// wake-ups, halts and preemptions cost what they cost the host
    /// kernel. The VMM creates the VM with KVM_CREATE_IRQCHIP and
    /// registers it with [`NoInterrupts`]; the process needs the right to
    /// real-time priorities (root or CAP_SYS_NICE).
    #[default]
    Ranked,
}

impl DispatchKind {
    /// Every dispatch, the default first.
    pub const ALL: [DispatchKind; 4] = [
        DispatchKind::Ranked,
        DispatchKind::Threads,
        DispatchKind::Workers,
        DispatchKind::KvmIrqchip,
    ];

    /// The name configs and results use (`threads`, `workers`,
    /// `kvm-irqchip`, `ranked`).
    pub fn as_str(self) -> &'static str {
        match self {
            DispatchKind::Threads => "threads",
            DispatchKind::Workers => "workers",
            DispatchKind::KvmIrqchip => "kvm-irqchip",
            DispatchKind::Ranked => "ranked",
        }
    }

    /// One thread per vCPU (`threads`, `kvm-irqchip`, `ranked`).
    pub fn uses_vcpu_threads(self) -> bool {
        self != DispatchKind::Workers
    }

    /// The `kvm-irqchip` mechanism: threads handed the CPU, halts learnt
    /// from KVM.
    pub fn kvm_irqchip(self) -> bool {
        self == DispatchKind::KvmIrqchip
    }

    /// KVM's in-kernel local APIC serves the VMs (`kvm-irqchip`,
    /// `ranked`): the VMM creates them with KVM_CREATE_IRQCHIP.
    pub fn in_kernel_lapic(self) -> bool {
        matches!(self, DispatchKind::KvmIrqchip | DispatchKind::Ranked)
    }

    /// The host kernel switches the vCPU threads by the ranks the engine
    /// gives them (`ranked`).
    pub fn ranked(self) -> bool {
        self == DispatchKind::Ranked
    }
}

/// A dispatch name that is none of [`DispatchKind`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown dispatch {0:?}: expected ranked, threads, workers or kvm-irqchip")]
pub struct UnknownDispatch(pub String);

impl std::str::FromStr for DispatchKind {
    type Err = UnknownDispatch;

    /// `ranked`, `threads`, `workers` or `kvm-irqchip`.
    fn from_str(s: &str) -> Result<Self, UnknownDispatch> {
        DispatchKind::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| UnknownDispatch(s.to_string()))
    }
}

impl fmt::Display for DispatchKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether this process may run the [`DispatchKind::Ranked`] dispatch:
/// it needs real-time priorities (CAP_SYS_NICE, or an RLIMIT_RTPRIO high
/// enough); the error is the kernel's answer. [`Engine::new`] refuses the
/// dispatch with [`EngineError::NoRealtimeRanks`] where this fails.
pub fn ranked_dispatch_allowed() -> std::io::Result<()> {
    rank::ranks_allowed()
}

/// Errors of the engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The scheduler refused (a bad spec, too many vCPUs, ...).
    #[error("scheduler: {0}")]
    Sched(#[from] SchedError),
    /// An engine thread (worker, vCPU thread) could not start.
    #[error("cannot start an engine thread: {0}")]
    Thread(std::io::Error),
    /// A vCPU thread could not be made.
    #[error("vCPU: {0}")]
    Vcpu(#[from] crate::vcpu::VcpuError),
    /// A wait for the engine's threads ran out.
    #[error("{what} did not finish within {timeout:?}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// How long.
        timeout: Duration,
    },
    /// [`Engine::add_vm_gated`] on an engine with [`DispatchKind::Workers`].
    #[error("vCPU threads of the embedder's own need the threads, kvm-irqchip or ranked dispatch")]
    GatesNeedThreads,
    /// [`DispatchKind::Ranked`] without the right to real-time priorities.
    #[error(
        "the ranked dispatch needs real-time priorities up to {rank} (root, CAP_SYS_NICE or RLIMIT_RTPRIO >= {rank}): {source}"
    )]
    NoRealtimeRanks {
        /// The highest rank it needs.
        rank: i32,
        /// What the kernel answered.
        source: std::io::Error,
    },
    /// [`DispatchKind::Ranked`] with SMT isolation, which ranks and CPUs
    /// cannot express.
    #[error("SMT isolation needs the threads dispatch: under ranked a halted vCPU KVM wakes may run beside another VM's")]
    RankedSmtIsolation,
}

/// What the engine is built with: start from [`EngineConfig::default`] and
/// set what differs (the struct is `#[non_exhaustive]`: later versions may
/// add settings, with defaults that keep today's behaviour).
///
/// ```
/// let mut config = vcpu_engine::EngineConfig::default();
/// config.policy = vcpu_engine::vcpu_sched::PolicyKind::Haiku;
/// config.halt_poll_ns = 200_000;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EngineConfig {
    /// The `vcpu_sched` policy.
    pub policy: PolicyKind,
    /// The scheduler's mode (low latency or power saving).
    pub mode: Mode,
    /// Never run vCPUs of different VMs on sibling SMT threads at once.
    pub smt_isolation: bool,
    /// The policy's tunables.
    pub tunables: Tunables,
    /// Who executes KVM_RUN for a dispatched vCPU.
    pub dispatch: DispatchKind,
    /// Longest halt-polling window, ns; 0 = off. A vCPU thread (or
    /// worker) whose vCPU halted keeps polling for its next dispatch this
    /// long at most before it sleeps, as KVM's `halt_poll_ns`: the window
    /// grows while wake-ups come within it and shrinks when they do not.
    pub halt_poll_ns: u64,
    /// How often the `kvm-irqchip` dispatch samples KVM's `blocking`
    /// statistic of each dispatched or halted vCPU, ns (see `kvm_halts`).
    pub kvm_poll_ns: u64,
    /// Record what the engine does into this trace (`pacer run --trace`).
    pub trace: Option<crate::trace::Trace>,
    /// A VM of this engine is said to co-schedule (its VMM's config named
    /// it) and has more vCPUs than CPUs it may use (its siblings cannot
    /// all run at once): under `ranked` the slices
    /// stay low latency's ([`effective_tunables`]). Read when the engine
    /// starts: a VM added later does not change the slices.
    pub coscheduled_wide: bool,
    /// The operator chose `tunables.low_latency` (a config file named
    /// it), even if its values are the default's: it runs as given under
    /// every dispatch ([`effective_tunables`]).
    pub low_latency_named: bool,
}

impl Default for EngineConfig {
    /// `vcpu_sched`'s default policy, mode and tunables; threads dispatch,
    /// no halt polling, no trace.
    fn default() -> Self {
        let s = SchedConfig::default();
        EngineConfig {
            policy: s.policy,
            mode: s.mode,
            smt_isolation: s.smt_isolation,
            tunables: s.tunables,
            dispatch: DispatchKind::Threads,
            halt_poll_ns: 0,
            kvm_poll_ns: DEFAULT_KVM_POLL_NS,
            trace: None,
            coscheduled_wide: false,
            low_latency_named: false,
        }
    }
}

/// The tunables the scheduler runs with under `dispatch`, given the
/// configured ones and whether their low-latency table is to be kept as
/// it is (`keep_low_latency`: [`EngineConfig::keeps_low_latency`]).
///
/// Under the `ranked` dispatch a woken vCPU preempts the CPU's owner
/// without waiting for its slice, so low latency's default slices give
/// way to [`QuantumTable::PREEMPTIVE_WAKES`] -- unless the table is kept:
/// - the operator named it (a table of one's own, or the default's values
///   written out: what a file says is what runs);
/// - a VM co-schedules more vCPUs than it has CPUs: its vCPUs wait for
///   each other (a barrier, a lock, an IPI's answer), one of them is
///   always parked, and under `ranked` a sibling queued behind a
///   CPU-bound owner waits out the owner's slice, so the slices stay low
///   latency's (2 ms rather than 6 at the default priority: a 3-vCPU
///   barrier VM beside hogs at 3:1 did 2.5x the rounds, a shootdown 3.5x
///   the round trips, the hogs 0.97x). A co-scheduled VM that fits its
///   CPUs runs its siblings together and keeps the longer slices: at 2:1
///   its shootdowns' p99 was 0.17 ms with them against 3.6 ms with 2 ms
///   slices (their p99.9 32 ms against 12: fewer deschedules, each one
///   longer).
///
/// Sibling gathering (`tunables.gather_siblings`) runs under `ranked`
/// only: it packs a wide VM's vCPUs on as few cores as their count
/// allows, which pays where the engine lets the queued siblings take
/// turns beside the one the policy runs (sibling sharing). Under any other
/// dispatch one vCPU runs on a CPU at a time, and packed siblings could
/// never run side by side (with it there the simulator's relaxed spin
/// lock VM did less than with co-scheduling off).
///
/// One function, so that what a run reports as its tunables is what
/// [`EngineConfig::sched_config`] gave the scheduler.
pub fn effective_tunables(
    dispatch: DispatchKind,
    tunables: &Tunables,
    keep_low_latency: bool,
) -> Tunables {
    let mut tunables = tunables.clone();
    if dispatch == DispatchKind::Ranked
        && !keep_low_latency
        && tunables.low_latency == QuantumTable::LOW_LATENCY
    {
        tunables.low_latency = QuantumTable::PREEMPTIVE_WAKES;
    }
    if dispatch != DispatchKind::Ranked {
        tunables.gather_siblings = false;
    }
    tunables
}

impl EngineConfig {
    /// Whether the low-latency table runs as configured under every
    /// dispatch: the operator named it, or a wide VM co-schedules
    /// ([`effective_tunables`]).
    pub fn keeps_low_latency(&self) -> bool {
        self.low_latency_named || self.coscheduled_wide
    }

    /// The scheduler's configuration, its tunables as
    /// [`effective_tunables`] makes them for the dispatch.
    pub fn sched_config(&self) -> SchedConfig {
        SchedConfig {
            policy: self.policy,
            mode: self.mode,
            tunables: effective_tunables(self.dispatch, &self.tunables, self.keeps_low_latency()),
            smt_isolation: self.smt_isolation,
            ..SchedConfig::default()
        }
    }
}

/// The `kvm-irqchip` dispatch's default sampling period of KVM's
/// statistics ([`EngineConfig::kvm_poll_ns`]).
pub const DEFAULT_KVM_POLL_NS: u64 = 5_000_000;

/// How a VM's vCPUs are to be scheduled: [`VmSchedSpec::new`], then set
/// what differs (the struct is `#[non_exhaustive]`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct VmSchedSpec {
    /// How logs, statistics and traces name the VM (`<name>/vcpu<N>`).
    pub name: String,
    /// Its vCPUs' scheduling class.
    pub class: SchedClass,
    /// Their base priority within the class (timeshare 1..=99,
    /// realtime 100..=120).
    pub priority: u8,
    /// Operator shares of each vCPU (weight, cap, reservation).
    pub shares: Shares,
    /// The VM's core set: the host CPUs its vCPUs may run on (those
    /// outside the engine's [`CpuMap`] are ignored).
    pub cpus: HostCpuSet,
    /// Relaxed co-scheduling of its vCPUs, or none
    /// ([`vcpu_sched::VcpuScheduler::set_coschedule`]; policies without
    /// it ignore it). Relaxed, the engine also reports an IPI to a
    /// sibling that waits preempted as a directed yield.
    pub coschedule: vcpu_sched::Coschedule,
}

impl VmSchedSpec {
    /// VM `name` on the host CPUs `cpus`: timeshare class at the normal
    /// priority (10), default [`Shares`].
    pub fn new(name: impl Into<String>, cpus: HostCpuSet) -> VmSchedSpec {
        VmSchedSpec {
            name: name.into(),
            class: SchedClass::Timeshare,
            priority: vcpu_sched::tunables::PRIORITY_NORMAL,
            shares: Shares::default(),
            cpus,
            coschedule: vcpu_sched::Coschedule::default(),
        }
    }
}

/// A VM's operator shares as each of its vCPUs gets them
/// (`vcpu_sched::shares`): weight, cap and reservation in per mille of one
/// CPU. Start from [`Shares::default`] (nothing asked: weight 100, no cap,
/// no reservation) and set what differs; policies without shares take
/// only the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Shares {
    /// Relative weight, 1..=10000 (default 100, as cgroups' `cpu.weight`).
    pub weight: u32,
    /// Most CPU time per period, per mille of one CPU (`None`: no cap).
    pub cap: Option<u32>,
    /// CPU time guaranteed per period, per mille of one CPU (0: none).
    pub reservation: u32,
    /// A wake-to-run bound and the budget it holds for it
    /// (`vcpu_sched::bound`; `None`: none). The VMM admits the set first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_bound: Option<vcpu_sched::bound::LatencyBound>,
}

impl Default for Shares {
    /// Weight 100, no cap, no reservation.
    fn default() -> Self {
        Shares {
            weight: vcpu_sched::shares::DEFAULT_WEIGHT,
            cap: None,
            reservation: 0,
            latency_bound: None,
        }
    }
}

/// One VM of the engine (see [`Engine::vm_named`], [`Engine::live_vms`]).
pub struct EngineVm {
    pub(crate) id: VmId,
    /// How traces name it (VMs in order of arrival).
    pub(crate) trace_id: u16,
    pub(crate) name: String,
    pub(crate) vcpus: Vec<Arc<EngineVcpu>>,
    pub(crate) irq: Arc<dyn InterruptSource>,
    pub(crate) handler: Arc<dyn VcpuExitHandler>,
    /// Relaxed co-scheduling: IPIs to a preempted sibling are directed
    /// yields (`dispatch.rs`, `notify_vcpu`).
    pub(crate) coschedule: bool,
    /// `Coschedule::Relaxed`: the spin watch looks for vCPUs spinning on
    /// a parked sibling (`spin_watch.rs`; the `threads` dispatch).
    pub(crate) spin_watch: bool,
    /// More vCPUs than CPUs it may use: its siblings can only take turns.
    pub(crate) wide: bool,
    /// The spin watch's looks into a turn in a row, over all its vCPUs,
    /// that found no spin (`spin_watch.rs`: a VM that never spins stops
    /// paying an exit per turn for them).
    pub(crate) look_misses: std::sync::atomic::AtomicU32,
    /// `Coschedule::Turns`: under `ranked`, its threads that share a CPU
    /// take turns there ([`sibling_share::SiblingTurns`]).
    pub(crate) sibling_turns: bool,
    /// `Coschedule::Relaxed` and sharing its CPUs under `ranked`: how often
    /// its threads look for a spin to take turns at (the paced
    /// [`sibling_share::SiblingTurns`]).
    pub(crate) spin_pace: Option<Arc<sibling_share::SpinPace>>,
    paused: AtomicBool,
    /// Its vCPUs' threads are the embedder's ([`Engine::add_vm_gated`]):
    /// each leaves its outcome in its [`EngineVcpu`] as its gate exits.
    external: bool,
    threads: Mutex<Vec<JoinHandle<VcpuOutcome>>>,
}

impl EngineVm {
    /// Whether the VM is paused ([`Engine::pause_vm`]).
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    /// The scheduler's id of the VM.
    pub fn id(&self) -> VmId {
        self.id
    }

    /// Its name (from [`VmSchedSpec::name`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its vCPUs, by index.
    pub fn vcpus(&self) -> &[Arc<EngineVcpu>] {
        &self.vcpus
    }

    /// How traces name it (VMs in order of arrival, from 0).
    pub fn trace_id(&self) -> u16 {
        self.trace_id
    }
}

/// A handle on a VM added to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmSlot(usize);

impl VmSlot {
    /// The slot's index among the engine's VMs (reused after
    /// [`Engine::finish_vm`]).
    pub fn index(self) -> usize {
        self.0
    }
}

/// What a VM's vCPUs leave behind when the VM is finished
/// ([`Engine::finish_vm`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FinishedVcpu {
    /// Why its loop ended, and its exit counters.
    pub outcome: VcpuOutcome,
    /// What the scheduler and the engine counted for it.
    pub sched: VcpuSchedStats,
}

/// The engine. One per run; shared by every VM of the run.
pub struct Engine {
    sched: Box<dyn VcpuScheduler>,
    cpus: CpuMap,
    slots: Vec<CpuSlot>,
    dispatch: DispatchKind,
    halt_poll_ns: u64,
    kvm_poll_ns: u64,
    /// The tunables' `sibling_turn` (0: no turns).
    sibling_turn_ns: u64,
    /// The real-time rank of the engine's timer thread and watcher.
    service_rank: i32,
    /// The `kvm-irqchip` watcher (started with the first VM) and what it did.
    kvm_watcher: Mutex<Option<JoinHandle<()>>>,
    kvm_watch: kvm_halts::WatchCounters,
    vms: RwLock<Vec<Option<Arc<EngineVm>>>>,
    /// vCPU of each live scheduler entity (`EntityId::index` indexes it;
    /// the full handle, generation included, must match).
    entities: RwLock<Vec<Option<Arc<EngineVcpu>>>>,
    timers: Timers,
    workers: Mutex<Vec<JoinHandle<()>>>,
    shutdown: AtomicBool,
    /// The run's trace, when recorded (see `trace_points.rs`).
    trace: Option<crate::trace::Trace>,
    /// The next VM's trace id.
    next_trace_vm: std::sync::atomic::AtomicU16,
    me: Weak<Engine>,
}

/// Timer keys: VM slot in the high half, vCPU index in the low half.
fn timer_key(vm: usize, vcpu: u32) -> TimerKey {
    ((vm as u64) << 32) | u64::from(vcpu)
}

/// The VM part of the timer keys of idle CPUs' rechecks
/// (`Dispatch::recheck_at`): no VM slot reaches it.
const RECHECK_VM: u64 = u32::MAX as u64;

/// The timer key of scheduler CPU `cpu`'s recheck.
pub(crate) fn recheck_key(cpu: vcpu_sched::CpuId) -> TimerKey {
    (RECHECK_VM << 32) | u64::from(cpu.0)
}

impl Engine {
    /// Build the scheduler over `cpus` and start the engine's threads.
    pub fn new(config: EngineConfig, cpus: CpuMap) -> Result<Arc<Engine>, EngineError> {
        crate::signals::register_kick_handler()
            .map_err(|e| EngineError::Thread(std::io::Error::from_raw_os_error(e.errno())))?;
        if config.dispatch.ranked() {
            if config.smt_isolation {
                return Err(EngineError::RankedSmtIsolation);
            }
            rank::ranks_allowed().map_err(|source| EngineError::NoRealtimeRanks {
                rank: rank::SERVICE_RANK,
                source,
            })?;
        }
        let service_rank = if config.dispatch.ranked() {
            rank::SERVICE_RANK
        } else {
            1
        };
        let sibling_turn_ns = config.tunables.sibling_turn;
        let sched = vcpu_sched::build(cpus.topology().clone(), config.sched_config())?;
        let slots = cpus
            .topology()
            .cpus
            .iter()
            .map(|c| CpuSlot::new(c.id, crate::host_cpus::HostCpu(c.os_id)))
            .collect();
        let engine = Arc::new_cyclic(|me: &Weak<Engine>| {
            let weak = me.clone();
            let timers = Timers::start(
                Box::new(move |key, deadline| {
                    if let Some(e) = weak.upgrade() {
                        e.timer_fired(key, deadline);
                    }
                }),
                service_rank,
            );
            Engine {
                sched,
                cpus,
                slots,
                dispatch: config.dispatch,
                halt_poll_ns: config.halt_poll_ns,
                kvm_poll_ns: config.kvm_poll_ns.max(10_000),
                sibling_turn_ns,
                service_rank,
                kvm_watcher: Mutex::new(None),
                kvm_watch: Default::default(),
                vms: RwLock::new(Vec::new()),
                entities: RwLock::new(Vec::new()),
                timers: timers.unwrap_or_else(|e| panic!("cannot start the timer thread: {e}")),
                workers: Mutex::new(Vec::new()),
                shutdown: AtomicBool::new(false),
                trace: config.trace,
                next_trace_vm: std::sync::atomic::AtomicU16::new(0),
                me: me.clone(),
            }
        });
        if engine.dispatch == DispatchKind::Workers {
            workers::start(&engine)?;
        }
        Ok(engine)
    }

    /// The scheduler policy's name.
    pub fn policy_name(&self) -> &'static str {
        self.sched.name()
    }

    /// How dispatched vCPUs are put on their CPUs.
    pub fn dispatch_kind(&self) -> DispatchKind {
        self.dispatch
    }

    pub(crate) fn sibling_turn_ns(&self) -> u64 {
        self.sibling_turn_ns
    }

    pub(crate) fn halt_poll(&self) -> clock::HaltPoll {
        clock::HaltPoll::new(self.halt_poll_ns)
    }

    /// The host CPUs the engine schedules, and their numbering.
    pub fn cpu_map(&self) -> &CpuMap {
        &self.cpus
    }

    fn arc(&self) -> Arc<Engine> {
        self.me
            .upgrade()
            .unwrap_or_else(|| unreachable!("the engine is used through its Arc"))
    }

    pub(crate) fn slot(&self, cpu: vcpu_sched::CpuId) -> Option<&CpuSlot> {
        self.slots.get(cpu.0 as usize)
    }

    pub(crate) fn slots(&self) -> &[CpuSlot] {
        &self.slots
    }

    pub(crate) fn vm(&self, vm: usize) -> Option<Arc<EngineVm>> {
        self.vms
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(vm)
            .cloned()
            .flatten()
    }

    pub(crate) fn vcpu_of(&self, e: EntityId) -> Option<Arc<EngineVcpu>> {
        self.entities
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(e.index() as usize)
            .cloned()
            .flatten()
            .filter(|v| v.entity == e)
    }

    /// Under the ranked dispatch, run the calling thread above every vCPU
    /// thread until the returned guard drops (`rank::ServiceSection`): every
    /// entry point of the engine takes one before it takes a lock.
    pub(crate) fn section(&self) -> Option<rank::ServiceSection> {
        self.dispatch.ranked().then(rank::ServiceSection::enter)
    }

    pub(crate) fn scheduler(&self) -> &dyn VcpuScheduler {
        self.sched.as_ref()
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Register a VM's vCPUs (all blocked: the boot vCPU until
    /// [`Engine::start_vm`], the others until their start-up IPI) and, with
    /// threads dispatch, spawn their threads. `irq` learns its slot
    /// ([`InterruptSource::attached`]) before any vCPU can run.
    pub fn add_vm(
        &self,
        spec: &VmSchedSpec,
        runners: Vec<VcpuRunner>,
        irq: Arc<dyn InterruptSource>,
        handler: Arc<dyn VcpuExitHandler>,
    ) -> Result<VmSlot, EngineError> {
        let indices: Vec<u32> = runners.iter().map(|r| r.index).collect();
        let _s = self.section();
        let (slot, vm) = self.register_vm(spec, &indices, irq, handler, false)?;
        vm.irq.attached(slot);
        match self.dispatch {
            DispatchKind::Threads | DispatchKind::KvmIrqchip | DispatchKind::Ranked => {
                let mut handles = Vec::new();
                for (runner, v) in runners.into_iter().zip(&vm.vcpus) {
                    handles.push(threads::spawn(&self.arc(), &vm, v, runner)?);
                }
                *vm.threads.lock().unwrap_or_else(|p| p.into_inner()) = handles;
            }
            DispatchKind::Workers => {
                for (runner, v) in runners.into_iter().zip(&vm.vcpus) {
                    *v.runner.lock().unwrap_or_else(|p| p.into_inner()) = Some(runner);
                }
            }
        }
        Ok(slot)
    }

    /// Register a VM of `vcpus` vCPUs (indices `0..vcpus`, 0 the boot
    /// vCPU) whose threads the caller owns: one [`EngineGate`] per vCPU,
    /// in index order. Each vCPU thread runs
    /// [`run_vcpu_loop`]`(&mut runner, &mut gate)` with the [`VcpuRunner`]
    /// of the same index; the gate parks the thread until the scheduler
    /// dispatches its vCPU, binds it to the CPU, arms its quantum, injects
    /// its interrupts and gives the CPU back when the vCPU halts, yields or
    /// is preempted. Needs [`DispatchKind::Threads`] or
    /// [`DispatchKind::KvmIrqchip`] (workers run vCPUs on
    /// threads of their own). `irq` learns its slot
    /// ([`InterruptSource::attached`]) before any vCPU can run.
    pub fn add_vm_gated(
        &self,
        spec: &VmSchedSpec,
        vcpus: u32,
        irq: Arc<dyn InterruptSource>,
        handler: Arc<dyn VcpuExitHandler>,
    ) -> Result<(VmSlot, Vec<EngineGate>), EngineError> {
        let _s = self.section();
        if !self.dispatch.uses_vcpu_threads() {
            return Err(EngineError::GatesNeedThreads);
        }
        let indices: Vec<u32> = (0..vcpus).collect();
        let (slot, vm) = self.register_vm(spec, &indices, irq, handler, true)?;
        vm.irq.attached(slot);
        let gates = vm
            .vcpus
            .iter()
            .map(|v| EngineGate::new(&self.arc(), &vm, v))
            .collect();
        Ok((slot, gates))
    }

    /// Add a VM's vCPUs (`indices`) to the scheduler and the engine.
    fn register_vm(
        &self,
        spec: &VmSchedSpec,
        indices: &[u32],
        irq: Arc<dyn InterruptSource>,
        handler: Arc<dyn VcpuExitHandler>,
        external: bool,
    ) -> Result<(VmSlot, Arc<EngineVm>), EngineError> {
        let affinity = self.cpus.affinity(&spec.cpus);
        let now = now_ns();
        // Ranked: a co-scheduled VM with more vCPUs than CPUs to run them
        // shares the CPUs it owns with its queued siblings.
        let wide = indices.len() > ranked::allowed_host_cpus(self, &spec.cpus).len();
        let sharing =
            (self.dispatch.ranked() && spec.coschedule != vcpu_sched::Coschedule::Off && wide)
                .then(|| {
                    Arc::new(sibling_share::SiblingShare::new(
                        now,
                        spec.coschedule == vcpu_sched::Coschedule::Relaxed,
                    ))
                });
        let mut vms = self.vms.write().unwrap_or_else(|p| p.into_inner());
        let slot = vms.iter().position(Option::is_none).unwrap_or(vms.len());
        let vm_id = VmId(slot as u32);
        let trace_id = self.next_trace_vm.fetch_add(1, Ordering::Relaxed);
        // Before its vCPUs, which start with it. The slot's id may be a
        // departed VM's: set either way.
        self.sched
            .set_coschedule(vm_id, spec.coschedule, now)
            .map_err(EngineError::from)?;
        let mut vcpus = Vec::with_capacity(indices.len());
        for &index in indices {
            let entity = match self
                .sched
                .add_entity(
                    EntitySpec {
                        vm: vm_id,
                        class: spec.class,
                        priority: spec.priority,
                        affinity: affinity.clone(),
                    },
                    now,
                )
                .and_then(|e| self.apply_shares(e, &spec.shares, now).map(|()| e))
            {
                Ok(e) => e,
                Err(e) => {
                    for v in &vcpus {
                        let v: &Arc<EngineVcpu> = v;
                        let _ = self.sched.remove_entity(v.entity, now);
                    }
                    return Err(e.into());
                }
            };
            // Under KVM's local APIC an application processor waits for
            // its start-up IPI inside KVM_RUN.
            let kvm = self.dispatch.in_kernel_lapic();
            let initial = match index {
                0 => RunState::Halted {
                    interruptible: false,
                },
                _ if kvm => RunState::HaltedInKvm,
                _ => RunState::WaitForSipi,
            };
            let v = Arc::new(
                EngineVcpu::new(
                    slot,
                    trace_id,
                    index,
                    entity,
                    format!("{}/vcpu{}", spec.name, index),
                    initial,
                )
                .with_home(spec.priority, ranked::allowed_host_cpus(self, &spec.cpus))
                .with_sharing(sharing.clone()),
            );
            v.ctl().awaiting_sipi = index != 0 && !kvm;
            v.capped.store(spec.shares.cap.is_some(), Ordering::Release);
            vcpus.push(v);
        }
        {
            let mut ents = self.entities.write().unwrap_or_else(|p| p.into_inner());
            for v in &vcpus {
                let i = v.entity.index() as usize;
                if ents.len() <= i {
                    ents.resize(i + 1, None);
                }
                ents[i] = Some(v.clone());
            }
        }
        if let Some(t) = &self.trace {
            t.meta(crate::trace::format::Meta::Vm(
                crate::trace::format::VmMeta {
                    id: trace_id,
                    name: spec.name.clone(),
                    vcpus: vcpus.len() as u16,
                    class: format!("{:?}", spec.class).to_lowercase(),
                    priority: spec.priority,
                    cpus: spec.cpus.iter().map(|c| c.0).collect(),
                },
            ));
        }
        let vm = Arc::new(EngineVm {
            id: vm_id,
            trace_id,
            name: spec.name.clone(),
            vcpus,
            irq,
            handler,
            coschedule: spec.coschedule != vcpu_sched::Coschedule::Off,
            spin_watch: spec.coschedule == vcpu_sched::Coschedule::Relaxed,
            wide,
            look_misses: std::sync::atomic::AtomicU32::new(0),
            sibling_turns: spec.coschedule == vcpu_sched::Coschedule::Turns,
            spin_pace: (sharing.is_some() && spec.coschedule == vcpu_sched::Coschedule::Relaxed)
                .then(|| Arc::new(sibling_share::SpinPace::new())),
            paused: AtomicBool::new(false),
            external,
            threads: Mutex::new(Vec::new()),
        });
        if slot == vms.len() {
            vms.push(Some(vm.clone()));
        } else {
            vms[slot] = Some(vm.clone());
        }
        drop(vms);
        if self.dispatch.in_kernel_lapic() {
            self.start_kvm_watcher()?;
        }
        Ok((VmSlot(slot), vm))
    }

    /// Start the `kvm-irqchip` watcher if it is not running yet.
    fn start_kvm_watcher(&self) -> Result<(), EngineError> {
        let mut w = self.kvm_watcher.lock().unwrap_or_else(|p| p.into_inner());
        if w.is_none() {
            let period = Duration::from_nanos(self.kvm_poll_ns);
            *w = Some(
                kvm_halts::spawn_watcher(self.me.clone(), period, self.service_rank)
                    .map_err(EngineError::Thread)?,
            );
        }
        Ok(())
    }

    /// What the `kvm-irqchip` watcher has done so far.
    pub(crate) fn kvm_watch_counters(&self) -> &kvm_halts::WatchCounters {
        &self.kvm_watch
    }

    /// Let the VM's boot vCPU run.
    pub fn start_vm(&self, vm: VmSlot) {
        let _s = self.section();
        if let Some(vm) = self.vm(vm.0) {
            if let Some(bsp) = vm.vcpus.first() {
                let mut ctl = bsp.ctl();
                if ctl.state.is_blocked() {
                    bsp.set_state(&mut ctl, RunState::Ready);
                    drop(ctl);
                    self.record(|| crate::trace::Event::Notify {
                        vcpu: bsp.trace_ref(),
                        cause: crate::trace::Cause::Start,
                    });
                    self.wake(bsp);
                }
            }
        }
    }

    /// The VM's interrupt controller has something new for `vcpu`.
    pub fn notify(&self, vm: VmSlot, vcpu: u32) {
        let _s = self.section();
        let Some(vm) = self.vm(vm.0) else { return };
        let Some(v) = vm.vcpus.get(vcpu as usize) else {
            return;
        };
        self.notify_vcpu(&vm, v);
    }

    /// [`Engine::notify`], recording `cause` when tracing.
    pub fn notify_because(&self, vm: VmSlot, vcpu: u32, cause: crate::trace::Cause) {
        let _s = self.section();
        let Some(vm) = self.vm(vm.0) else { return };
        let Some(v) = vm.vcpus.get(vcpu as usize) else {
            return;
        };
        self.record(|| crate::trace::Event::Notify {
            vcpu: v.trace_ref(),
            cause,
        });
        self.notify_vcpu(&vm, v);
    }

    /// Arm (or cancel) the host timer of `vcpu`'s local timer.
    pub fn set_guest_timer(&self, vm: VmSlot, vcpu: u32, deadline_ns: Option<u64>) {
        let key = timer_key(vm.0, vcpu);
        match deadline_ns {
            Some(d) => self.timers.arm(key, d),
            None => self.timers.cancel(key),
        }
    }

    /// Give a new vCPU its VM's operator shares (only what differs from
    /// the defaults, so policies without shares take VMs without them).
    fn apply_shares(
        &self,
        e: vcpu_sched::EntityId,
        shares: &Shares,
        now: u64,
    ) -> Result<(), SchedError> {
        let d = Shares::default();
        if shares.weight != d.weight {
            self.sched.set_weight(e, shares.weight, now)?;
        }
        if shares.cap.is_some() {
            self.sched.set_cap(e, shares.cap, now)?;
        }
        if shares.reservation != d.reservation {
            self.sched.set_reservation(e, shares.reservation, now)?;
        }
        if shares.latency_bound.is_some() {
            self.sched.set_latency_bound(e, shares.latency_bound, now)?;
        }
        Ok(())
    }

    /// Ask the timer thread to kick idle `cpu` at `at` (the policy's
    /// `Dispatch::recheck_at`: a capped vCPU's budget or a reservation is
    /// renewed then).
    pub(crate) fn arm_recheck(&self, cpu: vcpu_sched::CpuId, at: Option<u64>) {
        match at {
            Some(t) => self.timers.arm(recheck_key(cpu), t),
            None => self.timers.cancel(recheck_key(cpu)),
        }
    }

    fn timer_fired(&self, key: TimerKey, deadline_ns: u64) {
        if key >> 32 == RECHECK_VM {
            let cpu = vcpu_sched::CpuId(key as u32);
            // Only an idle CPU: a busy one calls `schedule` at its turn's end.
            if self.slot(cpu).is_some_and(|s| s.lock_owner().is_none()) {
                self.kick_cpu(cpu);
            }
            return;
        }
        let (vm, vcpu) = ((key >> 32) as usize, key as u32);
        if let Some(vm) = self.vm(vm) {
            self.firing_timer(deadline_ns, || vm.irq.timer_expired(vcpu));
        }
    }

    /// Pause every vCPU of the VM; returns once none runs.
    pub fn pause_vm(&self, vm: VmSlot, timeout: Duration) -> Result<(), EngineError> {
        let _s = self.section();
        let Some(vm) = self.vm(vm.0) else {
            return Ok(());
        };
        vm.paused.store(true, Ordering::Release);
        if self.dispatch.ranked() {
            return self.ranked_take_off(&vm, RunState::Paused, timeout);
        }
        self.kick_running(&vm);
        self.wait_not_running(&vm, timeout, "pause")
    }

    /// Resume a paused VM.
    pub fn resume_vm(&self, vm: VmSlot) {
        let _s = self.section();
        let Some(vm) = self.vm(vm.0) else { return };
        vm.paused.store(false, Ordering::Release);
        for v in &vm.vcpus {
            let mut ctl = v.ctl();
            if ctl.state == RunState::Paused {
                v.set_state(&mut ctl, RunState::Ready);
                drop(ctl);
                self.record(|| crate::trace::Event::Notify {
                    vcpu: v.trace_ref(),
                    cause: crate::trace::Cause::Resume,
                });
                self.wake(v);
            }
        }
    }

    /// Kick the executor of every running vCPU of `vm` (it sees the VM's
    /// pause or stop at its next check), and the thread of every vCPU
    /// halted inside KVM_RUN (which KVM could wake into the guest).
    fn kick_running(&self, vm: &EngineVm) {
        for v in &vm.vcpus {
            match v.state() {
                RunState::Running { cpu } => {
                    if let Some(s) = self.slot(cpu) {
                        s.signal_executor();
                    }
                }
                RunState::HaltedInKvm => v.kick_own_thread(),
                _ => {}
            }
        }
    }

    fn wait_not_running(
        &self,
        vm: &EngineVm,
        timeout: Duration,
        what: &str,
    ) -> Result<(), EngineError> {
        let deadline = Instant::now() + timeout;
        for v in &vm.vcpus {
            loop {
                if !matches!(v.state(), RunState::Running { .. }) {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(EngineError::Timeout {
                        what: format!("{what} of {}", v.name),
                        timeout,
                    });
                }
                // Kicked already; a running vCPU leaves within one exit.
                if let RunState::Running { cpu } = v.state() {
                    if let Some(s) = self.slot(cpu) {
                        s.signal_executor();
                    }
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(())
    }

    /// Take a stopping VM out of the engine: every vCPU leaves its CPU and
    /// the scheduler; returns each vCPU's outcome and scheduling statistics.
    /// The VM's exit handler must already report `stopping()`. Each wait
    /// ends within `timeout`: a vCPU whose thread has not ended by then is
    /// reported with an `Unhandled` outcome and its thread left running.
    pub fn finish_vm(&self, slot: VmSlot, timeout: Duration) -> Vec<FinishedVcpu> {
        let _s = self.section();
        let Some(vm) = self.vm(slot.0) else {
            return Vec::new();
        };
        if self.dispatch.ranked() {
            if let Err(e) = self.ranked_take_off(&vm, RunState::Exited, timeout) {
                log::error!("[{}] {e}", vm.name);
            }
        }
        self.kick_running(&vm);
        if let Err(e) = self.wait_not_running(&vm, timeout, "stop") {
            log::error!("[{}] {e}", vm.name);
        }
        let now = now_ns();
        let snapshot = self.sched.snapshot(now);
        let mut stats: Vec<VcpuSchedStats> = vm
            .vcpus
            .iter()
            .map(|v| VcpuSchedStats::from_snapshot(&snapshot, v.entity, &self.cpus))
            .collect();
        for v in &vm.vcpus {
            self.timers.cancel(timer_key(slot.0, v.index));
            if let Err(e) = self.sched.remove_entity(v.entity, now) {
                log::debug!("[{}] removing {}: {e}", vm.name, v.name);
            }
            let mut ctl = v.ctl();
            // A vCPU dispatched since the wait keeps its CPU until its
            // thread sees the stop and hands the CPU on (`end_turn`): marked
            // Exited here, its thread would end without doing so, and the
            // CPU would stay owned by a vCPU nobody runs.
            if ctl.state != RunState::Exited && !matches!(ctl.state, RunState::Running { .. }) {
                let in_kvm = ctl.state == RunState::HaltedInKvm;
                v.set_state(&mut ctl, RunState::Exited);
                if in_kvm {
                    // Its thread sleeps inside KVM_RUN: only a signal gets
                    // it out to see the stop (sent under `ctl`, which it
                    // needs to see it, so it cannot have ended yet).
                    v.kick_own_thread();
                }
            }
        }
        // A vCPU dispatched again between the wait and its removal leaves
        // at its next check (the VM is stopping); wait for that too.
        if let Err(e) = self.wait_not_running(&vm, timeout, "stop") {
            log::error!("[{}] {e}", vm.name);
        }
        let outcomes: Vec<VcpuOutcome> = match self.dispatch {
            DispatchKind::Threads | DispatchKind::KvmIrqchip | DispatchKind::Ranked
                if vm.external =>
            {
                vm.vcpus
                    .iter()
                    .map(|v| threads::take_outcome(v, timeout))
                    .collect()
            }
            DispatchKind::Threads | DispatchKind::KvmIrqchip | DispatchKind::Ranked => {
                let handles =
                    std::mem::take(&mut *vm.threads.lock().unwrap_or_else(|p| p.into_inner()));
                // Spawned in vCPU order.
                let names = vm.vcpus.iter().map(|v| v.name.clone());
                threads::join_within(names.zip(handles).collect(), timeout)
            }
            DispatchKind::Workers => vm
                .vcpus
                .iter()
                .map(|v| workers::take_outcome(v, timeout))
                .collect(),
        };
        for ((s, v), o) in stats.iter_mut().zip(&vm.vcpus).zip(&outcomes) {
            s.host_cpus = v.ctl().ran_on.to_list();
            s.halt_poll = v.halt_poll.stats();
            s.beside_sibling = v.beside_sibling.load(Ordering::Relaxed);
            s.shared_turns_ended = v.shared_turns_ended.load(Ordering::Relaxed);
            s.long_turns = v.long_turns.load(Ordering::Relaxed);
            if self.dispatch.ranked() {
                // The host kernel switched the threads: its accounting is
                // the run time and the wait (the scheduler saw only what
                // it decided).
                s.run_ns = o.thread_sched.run_ns;
                s.ready_wait_ns = o.thread_sched.ready_wait_ns;
            }
        }
        {
            // The scheduler may already have given a removed entity's slot
            // to a vCPU of another VM (under a new generation, so its
            // handle differs): forget only our own mapping.
            let mut ents = self.entities.write().unwrap_or_else(|p| p.into_inner());
            for v in &vm.vcpus {
                if let Some(e) = ents.get_mut(v.entity.index() as usize) {
                    if e.as_ref().is_some_and(|mine| mine.entity == v.entity) {
                        *e = None;
                    }
                }
            }
        }
        self.vms.write().unwrap_or_else(|p| p.into_inner())[slot.0] = None;
        outcomes
            .into_iter()
            .zip(stats)
            .map(|(outcome, sched)| FinishedVcpu { outcome, sched })
            .collect()
    }

    /// The scheduler's counters now.
    pub fn snapshot(&self) -> SchedSnapshot {
        let _s = self.section();
        self.sched.snapshot(now_ns())
    }

    /// Every vCPU of the live VMs as the scheduler sees it in `snap`
    /// (state, host CPU, effective priority, penalty, time slice).
    pub fn vcpus_now(&self, snap: &SchedSnapshot) -> Vec<VcpuNow> {
        let _s = self.section();
        let vms = self.vms.read().unwrap_or_else(|p| p.into_inner());
        vms.iter()
            .flatten()
            .flat_map(|vm| {
                vm.vcpus.iter().filter_map(|v| {
                    VcpuNow::from_snapshot(snap, &vm.name, v.index, v.entity, &self.cpus)
                })
            })
            .collect()
    }

    /// Every vCPU of the live VMs as the engine and its VM's interrupt
    /// controller see it now.
    pub fn vcpus_engine_now(&self) -> Vec<VcpuEngineNow> {
        let _s = self.section();
        let vms = self.vms.read().unwrap_or_else(|p| p.into_inner());
        vms.iter()
            .flatten()
            .flat_map(|vm| vm.vcpus.iter().map(|v| engine_now(vm, v)))
            .collect()
    }

    /// [`Engine::vcpus_engine_now`] for the vCPUs of one VM (what a VM
    /// that ran out of time was doing).
    pub fn vm_engine_now(&self, slot: VmSlot) -> Vec<VcpuEngineNow> {
        let _s = self.section();
        self.vm(slot.0)
            .map(|vm| vm.vcpus.iter().map(|v| engine_now(&vm, v)).collect())
            .unwrap_or_default()
    }

    /// How many vCPUs are in each run state now.
    pub fn census(&self) -> Census {
        let _s = self.section();
        let mut c = Census::default();
        for vm in self
            .vms
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flatten()
        {
            c.vms += 1;
            for v in &vm.vcpus {
                match v.state() {
                    RunState::Running { .. } => c.running += 1,
                    RunState::Ready => c.ready += 1,
                    RunState::Halted { .. } => c.halted += 1,
                    RunState::WaitForSipi | RunState::Paused | RunState::Exited => c.other += 1,
                    RunState::HaltedInKvm => c.halted += 1,
                }
            }
        }
        c
    }
}

/// vCPUs by run state (see [`Engine::census`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Census {
    /// Live VMs.
    pub vms: usize,
    /// vCPUs on a CPU.
    pub running: usize,
    /// vCPUs queued for a CPU.
    pub ready: usize,
    /// vCPUs halted, waiting for an interrupt.
    pub halted: usize,
    /// Waiting for a start-up IPI, paused, or leaving.
    pub other: usize,
}

impl Engine {
    /// Stop the engine's worker threads (workers dispatch). Call once every
    /// VM is finished; the engine runs no vCPU afterwards.
    pub fn shutdown(&self) {
        self.shutdown.store(true, Ordering::Release);
        for s in &self.slots {
            let _owner = s.lock_owner();
            s.wake_idle();
        }
        for w in std::mem::take(&mut *self.workers.lock().unwrap_or_else(|p| p.into_inner())) {
            let _ = w.join();
        }
    }
}

/// `v` as the engine and its VM's interrupt controller see it now.
fn engine_now(vm: &EngineVm, v: &EngineVcpu) -> VcpuEngineNow {
    let (run_state, events, awaiting_sipi) = {
        let ctl = v.ctl();
        (
            format!("{:?}", ctl.state),
            format!("{:?}", ctl.events),
            ctl.awaiting_sipi,
        )
    };
    VcpuEngineNow {
        vm: vm.name.clone(),
        vcpu: v.index,
        run_state,
        events,
        awaiting_sipi,
        interrupt_controller: vm.irq.debug_state(v.index),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranked_takes_the_preemptive_wakes_slices_unless_the_tunables_set_their_own() {
        let mut config = EngineConfig::default();
        assert_eq!(
            config.sched_config().tunables.low_latency,
            QuantumTable::LOW_LATENCY,
            "threads waits for slices to end: Haiku's own table"
        );
        config.dispatch = DispatchKind::Ranked;
        let tunables = config.sched_config().tunables;
        assert_eq!(tunables.low_latency, QuantumTable::PREEMPTIVE_WAKES);
        assert_eq!(tunables.power_saving, QuantumTable::POWER_SAVING);
        let own = QuantumTable {
            base_quantum: 3_000_000,
            ..QuantumTable::LOW_LATENCY
        };
        config.tunables.low_latency = own;
        assert_eq!(config.sched_config().tunables.low_latency, own);
    }

    #[test]
    fn ranked_keeps_low_latencys_slices_when_a_wide_vm_coschedules() {
        let mut config = EngineConfig {
            dispatch: DispatchKind::Ranked,
            coscheduled_wide: true,
            ..EngineConfig::default()
        };
        let tunables = config.sched_config().tunables;
        assert_eq!(tunables.low_latency, QuantumTable::LOW_LATENCY);
        assert_eq!(tunables.power_saving, QuantumTable::POWER_SAVING);
        config.coscheduled_wide = false;
        assert_eq!(
            config.sched_config().tunables.low_latency,
            QuantumTable::PREEMPTIVE_WAKES
        );
    }

    #[test]
    fn ranked_keeps_a_low_latency_table_the_operator_named_even_the_defaults() {
        let mut config = EngineConfig {
            dispatch: DispatchKind::Ranked,
            low_latency_named: true,
            ..EngineConfig::default()
        };
        assert_eq!(config.tunables.low_latency, QuantumTable::LOW_LATENCY);
        assert_eq!(
            config.sched_config().tunables.low_latency,
            QuantumTable::LOW_LATENCY,
            "named with the default's values: kept"
        );
        config.low_latency_named = false;
        assert_eq!(
            config.sched_config().tunables.low_latency,
            QuantumTable::PREEMPTIVE_WAKES,
            "left to the default: swapped under ranked"
        );
    }

    #[test]
    fn effective_tunables_are_what_the_scheduler_is_given() {
        let mut config = EngineConfig::default();
        config.tunables.bursty_load = 300;
        for dispatch in DispatchKind::ALL {
            config.dispatch = dispatch;
            let effective = effective_tunables(dispatch, &config.tunables, false);
            assert_eq!(config.sched_config().tunables, effective, "{dispatch}");
            assert_eq!(effective.bursty_load, 300, "the rest is kept: {dispatch}");
            let table = if dispatch.ranked() {
                QuantumTable::PREEMPTIVE_WAKES
            } else {
                QuantumTable::LOW_LATENCY
            };
            assert_eq!(effective.low_latency, table, "{dispatch}");
            assert_eq!(
                effective.gather_siblings,
                dispatch.ranked(),
                "sibling gathering only where siblings share: {dispatch}"
            );
        }
    }
}
