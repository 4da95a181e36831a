//! One vCPU as the engine sees it: its scheduler entity, where it is in its
//! life (the run state below), and how its executor is found and woken.
//!
//! ```text
//!            wake (interrupt, SIPI, resume)          dispatch (schedule)
//!   Halted --------------------------------> Ready ------------------> Running{cpu}
//!   WaitForSipi                                ^                          |
//!   Paused                                     +--- quantum end, kick, ---+
//!   HaltedInKvm                                     yield                 |
//!      ^                                                                  |
//!      +------------- HLT, INIT, pause, halt inside KVM ------------------+
//!                                 any state --VM stops--> Exited
//! ```
//!
//! The same diagram as the table the code keeps ([`TRANSITIONS`]; a test
//! holds these lines to it, and `set_state` refuses any other step):
//!
//! ```text
//! Ready -> Running, HaltedInKvm, Paused, Exited
//! Running -> Ready, Halted, WaitForSipi, HaltedInKvm, Paused, Exited
//! Halted -> Ready, Paused, Exited
//! WaitForSipi -> Ready, Paused, Exited
//! HaltedInKvm -> Ready, Paused, Exited
//! Paused -> Ready, Exited
//! Exited ->
//! ```
//!
//! Under the `kvm-irqchip` dispatch a halt stays inside KVM: a Running vCPU
//! found halted at an exit (or by the watcher) becomes HaltedInKvm, its
//! thread back in KVM_RUN, and becomes Ready when KVM has woken it
//! (`kvm_halts`); application processors start there, waiting for their
//! start-up IPI inside KVM.
//!
//! Under the `ranked` dispatch the same states are the scheduler's view,
//! and the host kernel runs the threads by the rank each state gives
//! (`ranked.rs`): Running is the CPU's owner, Ready a filler queued behind
//! it (running while the owner is halted), HaltedInKvm a halted vCPU whose
//! thread sleeps in KVM at a real-time rank; Halted (the boot vCPU before
//! its start), Paused and Exited park the thread outside KVM_RUN, as
//! Ready does for a capped vCPU.
//!
//! Every transition happens under the vCPU's `ctl` mutex. A wake that races
//! with a halt is never lost: the state says Ready before the scheduler is
//! told, and `vcpu_sched` remembers a wake of an entity it still sees
//! running, so the halting CPU's `schedule(.., Blocked)` keeps it runnable.

use super::cpu_events::CpuEvents;
use super::kvm_halts::KvmBlocking;
use super::stats::HaltPollStats;
use crate::host_cpus::{HostCpu, HostCpuSet};
use crate::vcpu::{VcpuExitReason, VcpuOutcome, VcpuRunner};
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock};
use vcpu_sched::{CpuId, EntityId};

/// Where a vCPU is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// Runnable and queued in the scheduler.
    Ready,
    /// Dispatched on a CPU; that CPU's executor runs it.
    Running {
        /// The scheduler's CPU it runs on.
        cpu: CpuId,
    },
    /// The guest halted. `interruptible`: it halted with IF set, so a fixed
    /// interrupt wakes it; otherwise only NMI, INIT or SIPI do.
    Halted {
        /// Whether a fixed interrupt wakes it.
        interruptible: bool,
    },
    /// An application processor before its start-up IPI (after INIT).
    WaitForSipi,
    /// The guest halted inside KVM_RUN (KVM's in-kernel local APIC, the
    /// `kvm-irqchip` dispatch): blocked in the scheduler while its thread
    /// sleeps in the kernel, where only KVM can wake it (`kvm_halts`).
    HaltedInKvm,
    /// Runnable, but its VM is paused: blocked until resumed.
    Paused,
    /// Its VM stopped; it never runs again.
    Exited,
}

/// Every step of the run-state diagram above: `(from, to)`. A step not
/// listed is a bug; [`EngineVcpu::set_state`] refuses it.
pub const TRANSITIONS: &[(&str, &[&str])] = &[
    // Under the ranked dispatch a queued vCPU found halted in KVM, or
    // taken off by a pause, changes state before a CPU picks it.
    ("Ready", &["Running", "HaltedInKvm", "Paused", "Exited"]),
    (
        "Running",
        &[
            "Ready",
            "Halted",
            "WaitForSipi",
            "HaltedInKvm",
            "Paused",
            "Exited",
        ],
    ),
    ("Halted", &["Ready", "Paused", "Exited"]),
    ("WaitForSipi", &["Ready", "Paused", "Exited"]),
    ("HaltedInKvm", &["Ready", "Paused", "Exited"]),
    ("Paused", &["Ready", "Exited"]),
    ("Exited", &[]),
];

/// [`TRANSITIONS`] as a bit per (from, to) pair of [`RunState::index`]es,
/// built at compile time: the check on every state change is one load.
const ALLOWED: [u8; STATES.len()] = {
    let mut allowed = [0u8; STATES.len()];
    let mut i = 0;
    while i < TRANSITIONS.len() {
        let (from, tos) = TRANSITIONS[i];
        let mut j = 0;
        while j < tos.len() {
            allowed[state_index(from)] |= 1 << state_index(tos[j]);
            j += 1;
        }
        i += 1;
    }
    allowed
};

/// The states' names, in [`RunState::index`] order.
const STATES: [&str; 7] = [
    "Ready",
    "Running",
    "Halted",
    "WaitForSipi",
    "HaltedInKvm",
    "Paused",
    "Exited",
];

/// The index of a state's name in [`STATES`] (a name not there fails the
/// build).
const fn state_index(name: &str) -> usize {
    let mut i = 0;
    while i < STATES.len() {
        if str_eq(STATES[i], name) {
            return i;
        }
        i += 1;
    }
    panic!("a state TRANSITIONS names is not in STATES")
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

impl RunState {
    /// Its place in [`STATES`].
    fn index(self) -> usize {
        match self {
            RunState::Ready => 0,
            RunState::Running { .. } => 1,
            RunState::Halted { .. } => 2,
            RunState::WaitForSipi => 3,
            RunState::HaltedInKvm => 4,
            RunState::Paused => 5,
            RunState::Exited => 6,
        }
    }

    /// Its name in the run-state diagram.
    pub fn name(self) -> &'static str {
        STATES[self.index()]
    }

    /// Whether the diagram has a step from `self` to `to`.
    pub fn may_become(self, to: RunState) -> bool {
        ALLOWED[self.index()] & (1 << to.index()) != 0
    }

    /// Its place in [`STATES`], as the lock-free mirror holds it
    /// ([`EngineVcpu::state_code`]).
    pub(crate) fn code(self) -> u8 {
        self.index() as u8
    }

    /// Blocked in the scheduler (not queued, not running).
    pub fn is_blocked(self) -> bool {
        matches!(
            self,
            RunState::Halted { .. }
                | RunState::WaitForSipi
                | RunState::Paused
                | RunState::HaltedInKvm
        )
    }
}

/// [`RunState::code`] of Ready, Running, HaltedInKvm and Exited.
pub(crate) const STATE_READY: u8 = 0;
pub(crate) const STATE_RUNNING: u8 = 1;
pub(crate) const STATE_HALTED_IN_KVM: u8 = 4;

/// The mutable part of a vCPU, under its `ctl` mutex.
#[derive(Debug)]
pub(crate) struct VcpuCtl {
    pub state: RunState,
    /// The host CPU its own thread is bound to (threads dispatch), so a
    /// thread is re-bound only when the vCPU migrates.
    pub pinned_to: Option<HostCpu>,
    /// Every host CPU it ran on.
    pub ran_on: HostCpuSet,
    /// The host CPU it ran on last (a dispatch elsewhere is a migration).
    pub last_cpu: Option<HostCpu>,
    /// Start-up, INIT and NMI events taken from the interrupt controller
    /// and not yet acted upon.
    pub events: CpuEvents,
    /// An application processor that has not been started (or was sent
    /// INIT): only a start-up IPI lets it run.
    pub awaiting_sipi: bool,
    /// Why it stopped for good (a fatal exit), once it has.
    pub exit_reason: Option<VcpuExitReason>,
}

/// One vCPU of the engine, as [`crate::EngineVm::vcpus`] lists it: its
/// identity, its run state, and the handle the `Engine::set_vcpu_*`
/// changes take.
pub struct EngineVcpu {
    /// Index of its VM in the engine.
    pub(crate) vm: usize,
    /// Its VM's trace id (see `trace_points.rs`).
    pub(crate) trace_vm: u16,
    /// Its index in the VM (and APIC id).
    pub(crate) index: u32,
    pub(crate) entity: EntityId,
    /// `<vm>/vcpu<N>`.
    pub(crate) name: String,
    ctl: Mutex<VcpuCtl>,
    /// Signalled on every state change (a parked vCPU thread waits here).
    changed: Condvar,
    /// Mirrors "state is Running or Exited", for a thread that polls
    /// before it parks (halt polling) without taking `ctl`.
    settled: AtomicBool,
    /// Mirrors the state's [`RunState::code`], for a ranked vCPU thread's
    /// look at every exit without taking `ctl` (which it may take only
    /// above every vCPU's rank: `rank::ServiceSection`).
    state_code: AtomicU8,
    /// Kernel thread id of its own thread (threads dispatch), 0 before it
    /// starts.
    pub(crate) tid: AtomicI32,
    /// The KVM vCPU while no executor holds it (workers dispatch).
    pub(crate) runner: Mutex<Option<VcpuRunner>>,
    /// What its loop ended with, left by the gate of a thread the
    /// embedder owns ([`crate::Engine::add_vm_gated`]).
    pub(crate) outcome: Mutex<Option<VcpuOutcome>>,
    /// Halt polling after its blocks (see [`HaltPollCounters`]).
    pub(crate) halt_poll: HaltPollCounters,
    /// KVM's `blocking` statistic of the vCPU (`kvm-irqchip` dispatch;
    /// opened by its thread as it starts).
    pub(crate) kvm_blocking: OnceLock<KvmBlocking>,
    /// When it was last dispatched (CLOCK_MONOTONIC ns; stored before its
    /// state says Running): how long a block lasted until the work came,
    /// which its thread's own wake-up latency must not lengthen.
    pub(crate) dispatched_at: AtomicU64,
    /// Its base priority as registered: its rank where the policy has no
    /// effective priority of its own (ranked dispatch).
    pub(crate) base_priority: u8,
    /// It has a cap: never a filler (ranked dispatch).
    pub(crate) capped: AtomicBool,
    /// Its VM's queued siblings share the CPUs the VM owns (`ranked`, a
    /// co-scheduled VM wider than its core set; `sibling_share.rs`).
    pub(crate) sharing: Option<Arc<crate::sibling_share::SiblingShare>>,
    /// Times its thread was placed beside the sibling that owns a CPU.
    pub(crate) beside_sibling: AtomicU64,
    /// Shared turns its thread ended at their slice's end, beside the
    /// sibling that owned the CPU (`Engine::end_shared_turn`).
    pub(crate) shared_turns_ended: AtomicU64,
    /// Times its thread was ranked to take the kernel's turns at the long
    /// slice (`sibling_share.rs`: its VM's siblings spin together).
    pub(crate) long_turns: AtomicU64,
    /// Its thread's CPU time when the engine last accounted it, ns
    /// (ranked dispatch).
    pub(crate) cpu_seen: AtomicU64,
    /// Its thread waits outside KVM_RUN (ranked dispatch).
    pub(crate) parked: AtomicBool,
    /// Its thread left its loop for good (ranked dispatch).
    pub(crate) left: AtomicBool,
    /// The quantum timer of its own thread (ranked dispatch: whoever
    /// dispatches the vCPU arms it; it takes the thread out of KVM_RUN at
    /// its slice's end).
    pub(crate) quantum_timer: OnceLock<Arc<crate::clock::QuantumTimer>>,
    /// A second timer of its own thread, for a vCPU of a sharing VM: armed
    /// at the end of the turn it is placed beside, so that whichever of
    /// the siblings on the CPU runs then ends the turn (`sibling_share.rs`).
    pub(crate) shared_turn_timer: OnceLock<crate::clock::QuantumTimer>,
    /// The timer of its thread's paced sibling turns (a relaxed VM that
    /// shares its CPUs under `ranked`): a sibling that gives it the CPU
    /// from a spin-wait loop arms it, so that it looks half a turn later
    /// whether to give the CPU back (`sibling_share::SiblingTurns`).
    pub(crate) turn_timer: OnceLock<Arc<crate::clock::QuantumTimer>>,
    /// Awake (not halted) at the agent's last look, halted in the engine's
    /// view (ranked).
    pub(crate) awake_at_look: AtomicBool,
    /// It was in a spin-wait loop when it last left its CPU runnable
    /// (the spin watch, `crate::spin_watch`): a spinning sibling's CPU
    /// goes first to a parked sibling that was not. Under `ranked`: it
    /// gave the CPU it shares to a sibling from a spin-wait loop and has
    /// not looked since, so that sibling gives it back once it has run
    /// half a turn (`SiblingTurns`).
    pub(crate) spun_at_stop: AtomicBool,
    /// When it last left its CPU runnable outside a spin-wait loop
    /// (monotonic ns; the spin watch): of two such parked siblings only
    /// the later can hold a lock (`SpinWatch::parked_holder`).
    pub(crate) stopped_holding_at: AtomicU64,
    /// A sibling that may hold a lock left its CPU: look whether this one
    /// spins at its next exit (the spin watch; its thread is kicked).
    pub(crate) look_asked: AtomicBool,
    /// The sibling (its index + 1; 0: none) that sent this vCPU an IPI
    /// while it waited parked, and waits for the answer: the spin watch
    /// gives that sibling this vCPU's next turn once it has had time to
    /// answer.
    pub(crate) answer_to: AtomicUsize,
    /// KVM's `halt_wakeup` count when the engine last looked (ranked).
    pub(crate) wakeups_seen: AtomicU64,
    /// Its thread's `/proc/thread-self/stat`, opened by the thread as it
    /// starts: whether a halted vCPU KVM woke is runnable but has not run
    /// yet (ranked dispatch).
    pub(crate) thread_stat: OnceLock<std::fs::File>,
    /// The host CPUs it may use (its VM's core set among the engine's, or
    /// what an affinity change set): a ranked filler's or halted vCPU's
    /// thread may run on any of them. Bumps `rank.allowed_gen` when set.
    pub(crate) allowed: RwLock<HostCpuSet>,
    /// Its thread's rank and CPUs, as decided and as applied (ranked
    /// dispatch, `ranked.rs`).
    pub(crate) rank: RankState,
}

/// What the ranked dispatch decided for a vCPU's thread and what it
/// applied (see `Engine::enact`): decided under the vCPU's `ctl`, applied
/// by system calls made without any lock by whichever thread decided (the
/// thread itself may be lowered by them: a lock held across them could be
/// held by a thread the kernel then runs only when nothing else wants the
/// CPU), so that the last decision wins ([`RankState::apply`]).
#[derive(Debug)]
pub(crate) struct RankState {
    /// Decided real-time rank (0: none yet).
    pub want_rank: AtomicI32,
    /// Applied real-time rank (0: unknown, set it).
    pub has_rank: AtomicI32,
    /// Decided CPUs ([`RankState::one`] or [`RankState::allowed`]).
    pub want_cpus: AtomicU64,
    /// Applied CPUs (`NO_CPUS`: unknown, set them).
    pub has_cpus: AtomicU64,
    /// Appliers between their first call and their record of it.
    appliers: AtomicU32,
    /// Applier rounds begun so far (each round's ticket).
    rounds: AtomicU64,
    /// An applier gave up ([`RankState::apply`]).
    gave_up: AtomicBool,
    /// Bumped at every change of [`EngineVcpu::allowed`].
    pub allowed_gen: AtomicU32,
    /// The one CPU of [`EngineVcpu::allowed`] if it holds one only
    /// (`NO_CPUS` otherwise).
    pub allowed_single: AtomicU64,
    /// Its thread is out of KVM_RUN (handling an exit, in its gate, or
    /// not started): only the thread itself applies its rank then, before
    /// its next entry, so no other thread lowers it while it may hold a
    /// lock of the VMM's (`ranked.rs`, `Engine::apply_rank`).
    pub out_of_guest: AtomicBool,
    /// A decision was left to the thread while it was out of KVM_RUN (or
    /// its exit lifted it from the idle class): its gate applies it.
    pub deferred: AtomicBool,
}

/// [`RankState::has_cpus`] before any binding.
pub(crate) const NO_CPUS: u64 = u64::MAX;
/// Rounds a [`RankState::apply`] makes while other appliers keep
/// beginning beside it.
const APPLY_ROUNDS: usize = 1024;
/// The tag of "any allowed CPU" in [`RankState::want_cpus`].
const ALLOWED_TAG: u64 = 1 << 40;

impl RankState {
    fn new() -> RankState {
        RankState {
            want_rank: AtomicI32::new(0),
            has_rank: AtomicI32::new(0),
            want_cpus: AtomicU64::new(NO_CPUS),
            has_cpus: AtomicU64::new(NO_CPUS),
            appliers: AtomicU32::new(0),
            rounds: AtomicU64::new(0),
            gave_up: AtomicBool::new(false),
            allowed_gen: AtomicU32::new(0),
            allowed_single: AtomicU64::new(NO_CPUS),
            out_of_guest: AtomicBool::new(true),
            deferred: AtomicBool::new(false),
        }
    }

    /// Carry out the last decision: `set_rank(code)` and `bind(cpus)` are
    /// the system calls (true: done). Any thread may call this at any
    /// time; when every caller has returned, the kernel holds the last
    /// decision made before the last call began.
    ///
    /// Two appliers' calls may land in either order (one preempted
    /// between reading the decision and its call lands last with an older
    /// one): an applier after which another began applies again (the
    /// newest returns: a decision newer than the one it read is applied
    /// by its own decider), and one that was not alone all along records
    /// nothing as set. A call is skipped only by an applier alone, for a
    /// value recorded as set. Returns false if it gave up after
    /// [`APPLY_ROUNDS`] rounds, others beginning beside it all along:
    /// nothing is recorded as set then, and [`RankState::take_gave_up`]
    /// tells the agent to apply it again.
    pub fn apply(
        &self,
        mut set_rank: impl FnMut(i32) -> bool,
        mut bind: impl FnMut(u64) -> bool,
    ) -> bool {
        for _ in 0..APPLY_ROUNDS {
            let alone = self.appliers.fetch_add(1, Ordering::AcqRel) == 0;
            let ticket = self.rounds.fetch_add(1, Ordering::AcqRel) + 1;
            let rank = self.want_rank.load(Ordering::Acquire);
            let cpus = self.want_cpus.load(Ordering::Acquire);
            let rank_set = rank == 0
                || (alone && self.has_rank.load(Ordering::Acquire) == rank)
                || set_rank(rank);
            let cpus_set = cpus == NO_CPUS
                || (alone && self.has_cpus.load(Ordering::Acquire) == cpus)
                || bind(cpus);
            // Nobody began after this round: its values are the last
            // asked for (a round begun before it, whose calls may land
            // after these, applies again). Alone all along, it knows the
            // kernel holds them.
            let last = self.rounds.load(Ordering::Acquire) == ticket;
            let known = alone && last;
            self.has_rank
                .store(if known && rank_set { rank } else { 0 }, Ordering::Release);
            self.has_cpus.store(
                if known && cpus_set { cpus } else { NO_CPUS },
                Ordering::Release,
            );
            self.appliers.fetch_sub(1, Ordering::AcqRel);
            // A decision newer than the one read is applied by its own
            // decider, whose round begins after it.
            if last {
                return true;
            }
        }
        self.has_rank.store(0, Ordering::Release);
        self.has_cpus.store(NO_CPUS, Ordering::Release);
        self.gave_up.store(true, Ordering::Release);
        false
    }

    /// Whether an applier gave up since the last call (the agent's look
    /// applies the decision again then).
    pub fn take_gave_up(&self) -> bool {
        self.gave_up.load(Ordering::Acquire) && self.gave_up.swap(false, Ordering::AcqRel)
    }

    /// A new allowed set: a new generation, and its one CPU if it has one.
    pub fn allowed_changed(&self, allowed: &HostCpuSet) {
        let single = match allowed.len() {
            1 => allowed.iter().next().map_or(NO_CPUS, RankState::one),
            _ => NO_CPUS,
        };
        self.allowed_single.store(single, Ordering::Release);
        self.allowed_gen.fetch_add(1, Ordering::AcqRel);
    }

    /// The one CPU of the allowed set, if it holds one only.
    pub fn allowed_one(&self) -> Option<HostCpu> {
        Self::single(self.allowed_single.load(Ordering::Acquire))
    }

    /// Bound to host CPU `cpu` alone.
    pub fn one(cpu: HostCpu) -> u64 {
        u64::from(cpu.0)
    }

    /// On any CPU of its allowed set (of the current generation).
    pub fn allowed(&self) -> u64 {
        ALLOWED_TAG | u64::from(self.allowed_gen.load(Ordering::Acquire))
    }

    /// Whether a [`RankState::want_cpus`] value names one CPU (which).
    pub fn single(cpus: u64) -> Option<HostCpu> {
        (cpus < ALLOWED_TAG).then_some(HostCpu(cpus as u32))
    }
}

/// The halt polls after a vCPU's blocks: its own thread's (threads
/// dispatch), or the worker's whose CPU it left idle (workers).
#[derive(Debug, Default)]
pub(crate) struct HaltPollCounters {
    polls: AtomicU64,
    woken: AtomicU64,
    polled_ns: AtomicU64,
}

impl HaltPollCounters {
    /// One poll of `polled_ns`; `woken`: the wake-up came within it.
    pub fn count(&self, polled_ns: u64, woken: bool) {
        self.polls.fetch_add(1, Ordering::Relaxed);
        self.woken.fetch_add(u64::from(woken), Ordering::Relaxed);
        self.polled_ns.fetch_add(polled_ns, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn stats(&self) -> HaltPollStats {
        HaltPollStats {
            polls: self.polls.load(Ordering::Relaxed),
            woken: self.woken.load(Ordering::Relaxed),
            polled_ns: self.polled_ns.load(Ordering::Relaxed),
        }
    }
}

impl EngineVcpu {
    /// Its index in its VM (and APIC id).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Its scheduler entity.
    pub fn entity(&self) -> EntityId {
        self.entity
    }

    /// `<vm>/vcpu<N>`.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn new(
        vm: usize,
        trace_vm: u16,
        index: u32,
        entity: EntityId,
        name: String,
        state: RunState,
    ) -> Self {
        EngineVcpu {
            vm,
            trace_vm,
            index,
            entity,
            name,
            ctl: Mutex::new(VcpuCtl {
                state,
                pinned_to: None,
                ran_on: HostCpuSet::new(),
                last_cpu: None,
                events: CpuEvents::default(),
                awaiting_sipi: false,
                exit_reason: None,
            }),
            changed: Condvar::new(),
            settled: AtomicBool::new(false),
            state_code: AtomicU8::new(state.code()),
            tid: AtomicI32::new(0),
            runner: Mutex::new(None),
            outcome: Mutex::new(None),
            halt_poll: HaltPollCounters::default(),
            dispatched_at: AtomicU64::new(0),
            kvm_blocking: OnceLock::new(),
            base_priority: crate::vcpu_sched::tunables::PRIORITY_NORMAL,
            capped: AtomicBool::new(false),
            sharing: None,
            beside_sibling: AtomicU64::new(0),
            shared_turns_ended: AtomicU64::new(0),
            long_turns: AtomicU64::new(0),
            cpu_seen: AtomicU64::new(0),
            parked: AtomicBool::new(false),
            left: AtomicBool::new(false),
            wakeups_seen: AtomicU64::new(0),
            awake_at_look: AtomicBool::new(false),
            spun_at_stop: AtomicBool::new(false),
            stopped_holding_at: AtomicU64::new(0),
            look_asked: AtomicBool::new(false),
            answer_to: AtomicUsize::new(0),
            quantum_timer: OnceLock::new(),
            shared_turn_timer: OnceLock::new(),
            turn_timer: OnceLock::new(),
            thread_stat: OnceLock::new(),
            rank: RankState::new(),
            allowed: RwLock::new(HostCpuSet::new()),
        }
    }

    /// The same vCPU with its base priority and the host CPUs it may use
    /// (what the ranked dispatch ranks and binds it by).
    pub(crate) fn with_home(mut self, base_priority: u8, allowed: HostCpuSet) -> Self {
        self.base_priority = base_priority;
        self.rank.allowed_changed(&allowed);
        self.allowed = RwLock::new(allowed);
        self
    }

    /// Its VM shares the CPUs it owns with its queued siblings.
    pub(crate) fn with_sharing(
        mut self,
        sharing: Option<Arc<crate::sibling_share::SiblingShare>>,
    ) -> Self {
        self.sharing = sharing;
        self
    }

    /// Its VM shares the CPUs it owns: one of its vCPUs is seen halted.
    pub(crate) fn note_vm_halted(&self, now: u64) {
        if let Some(s) = &self.sharing {
            s.halted(now);
        }
    }

    pub(crate) fn ctl(&self) -> MutexGuard<'_, VcpuCtl> {
        self.ctl.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where it is in its life now.
    pub fn state(&self) -> RunState {
        self.ctl().state
    }

    /// Set the state and wake whoever waits for a change.
    pub(crate) fn set_state(&self, ctl: &mut VcpuCtl, state: RunState) {
        self.set_state_quietly(ctl, state);
        self.changed.notify_all();
    }

    /// Set the state; the caller wakes the waiters with
    /// [`EngineVcpu::announce`] once it holds no engine lock.
    pub(crate) fn set_state_quietly(&self, ctl: &mut VcpuCtl, state: RunState) {
        if !ctl.state.may_become(state) {
            // A bug, never the guest's doing: tests stop at it; a running
            // VM logs it and goes on.
            debug_assert!(
                false,
                "{}: {} -> {} is not in the run-state diagram",
                self.name,
                ctl.state.name(),
                state.name()
            );
            log::error!(
                "{}: {} -> {} is not in the run-state diagram",
                self.name,
                ctl.state.name(),
                state.name()
            );
        }
        ctl.state = state;
        self.state_code.store(state.code(), Ordering::Release);
        self.settled.store(
            matches!(state, RunState::Running { .. } | RunState::Exited),
            Ordering::Release,
        );
    }

    /// Wake whoever waits for a state change.
    pub(crate) fn announce(&self) {
        self.changed.notify_all();
    }

    /// The state's [`RunState::code`], without a lock (it may change right
    /// after).
    pub(crate) fn state_code(&self) -> u8 {
        self.state_code.load(Ordering::Acquire)
    }

    /// Dispatched or gone (what a parked thread waits for), without a lock.
    pub(crate) fn is_settled(&self) -> bool {
        self.settled.load(Ordering::Acquire)
    }

    /// Wait (parked, not spinning) until `done` holds for the state.
    pub(crate) fn wait_until<'a>(
        &'a self,
        mut ctl: MutexGuard<'a, VcpuCtl>,
        done: impl Fn(&VcpuCtl) -> bool,
    ) -> MutexGuard<'a, VcpuCtl> {
        while !done(&ctl) {
            ctl = self.changed.wait(ctl).unwrap_or_else(|p| p.into_inner());
        }
        ctl
    }

    /// Signal its own thread (threads dispatch; nothing before the thread
    /// started): out of KVM_RUN, or straight out of the next entry.
    pub(crate) fn kick_own_thread(&self) {
        let tid = self.thread_id();
        if tid != 0 {
            match crate::signals::kick_thread(tid) {
                Ok(()) => {}
                // Its loop has just ended: nothing left to take out.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    log::debug!("{}: its thread {tid} has ended", self.name)
                }
                Err(e) => log::warn!("{}: cannot signal its thread {tid}: {e}", self.name),
            }
        }
    }

    /// The kernel thread id of its own thread (threads dispatch), 0
    /// before that thread starts.
    pub fn thread_id(&self) -> i32 {
        self.tid.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One state of each kind.
    const ALL: [RunState; 7] = [
        RunState::Ready,
        RunState::Running { cpu: CpuId(0) },
        RunState::Halted {
            interruptible: true,
        },
        RunState::WaitForSipi,
        RunState::HaltedInKvm,
        RunState::Paused,
        RunState::Exited,
    ];

    #[test]
    fn the_table_is_the_diagram_in_the_module_doc() {
        let src = include_str!("vcpu_state.rs");
        let block = src
            .split("//! ```text\n")
            .nth(2)
            .and_then(|b| b.split("//! ```").next())
            .expect("the module doc lists the transitions");
        let doc: Vec<String> = block
            .lines()
            .map(|l| l.trim_start_matches("//!").trim().to_string())
            .collect();
        let table: Vec<String> = TRANSITIONS
            .iter()
            .map(|(from, tos)| format!("{from} -> {}", tos.join(", ")).trim().to_string())
            .collect();
        assert_eq!(doc, table);
        // Every state is a row, once, in index order.
        let froms: Vec<&str> = TRANSITIONS.iter().map(|t| t.0).collect();
        assert_eq!(froms, STATES);
        for s in ALL {
            assert_eq!(STATES[s.index()], s.name());
        }
    }

    #[test]
    fn only_the_listed_steps_are_allowed() {
        let mut allowed = 0;
        for from in ALL {
            for to in ALL {
                let listed = TRANSITIONS
                    .iter()
                    .any(|(f, tos)| *f == from.name() && tos.contains(&to.name()));
                assert_eq!(from.may_become(to), listed, "{from:?} -> {to:?}");
                allowed += usize::from(listed);
            }
        }
        assert_eq!(allowed, 21);
        // Nothing leaves Exited; everything can reach it.
        assert!(ALL.iter().all(|&s| !RunState::Exited.may_become(s)));
        assert!(ALL[..6].iter().all(|s| s.may_become(RunState::Exited)));
        // A wake goes through Ready: never straight from a halt to a CPU.
        assert!(!RunState::Halted {
            interruptible: true
        }
        .may_become(ALL[1]));
    }

    fn halted_vcpu() -> EngineVcpu {
        EngineVcpu::new(
            0,
            0,
            0,
            EntityId::new(0, 0),
            "vm/vcpu0".into(),
            RunState::Halted {
                interruptible: true,
            },
        )
    }

    /// A debug build stops at the bug; a release build logs it and goes on
    /// (`a_release_build_logs_an_unlisted_step_and_takes_it`).
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "Halted -> Running is not in the run-state diagram")]
    fn an_unlisted_step_is_refused() {
        let v = halted_vcpu();
        let mut ctl = v.ctl();
        v.set_state(&mut ctl, RunState::Running { cpu: CpuId(0) });
    }

    #[test]
    #[cfg(not(debug_assertions))]
    fn a_release_build_logs_an_unlisted_step_and_takes_it() {
        let v = halted_vcpu();
        let mut ctl = v.ctl();
        v.set_state(&mut ctl, RunState::Running { cpu: CpuId(0) });
        assert_eq!(ctl.state, RunState::Running { cpu: CpuId(0) });
        drop(ctl);
        assert_eq!(v.state_code(), STATE_RUNNING);
    }

    /// What the kernel holds for a modelled thread: its rank and CPUs.
    #[derive(Default)]
    struct ModelThread {
        rank: Mutex<i32>,
        cpus: Mutex<u64>,
        calls: AtomicU32,
    }

    impl ModelThread {
        fn set_rank(&self, code: i32) -> bool {
            self.calls.fetch_add(1, Ordering::Relaxed);
            *self.rank.lock().unwrap() = code;
            true
        }
        fn bind(&self, cpus: u64) -> bool {
            self.calls.fetch_add(1, Ordering::Relaxed);
            *self.cpus.lock().unwrap() = cpus;
            true
        }
        fn holds(&self) -> (i32, u64) {
            (*self.rank.lock().unwrap(), *self.cpus.lock().unwrap())
        }
    }

    fn decide(r: &RankState, rank: i32, cpus: u64) {
        r.want_rank.store(rank, Ordering::Release);
        r.want_cpus.store(cpus, Ordering::Release);
    }

    #[test]
    fn an_applier_alone_sets_only_what_changed() {
        let (r, t) = (RankState::new(), ModelThread::default());
        decide(&r, -1, 0);
        assert!(r.apply(|c| t.set_rank(c), |c| t.bind(c)));
        assert_eq!((t.holds(), t.calls.load(Ordering::Relaxed)), ((-1, 0), 2));
        // The same decision again (the agent's every look): no call.
        assert!(r.apply(|c| t.set_rank(c), |c| t.bind(c)));
        assert_eq!(t.calls.load(Ordering::Relaxed), 2);
        decide(&r, -2, 0);
        assert!(r.apply(|c| t.set_rank(c), |c| t.bind(c)));
        assert_eq!((t.holds(), t.calls.load(Ordering::Relaxed)), ((-2, 0), 3));
    }

    #[test]
    fn a_call_that_lands_after_a_newer_decision_is_applied_again() {
        // The owner is demoted by one thread (A), which is preempted
        // before its call; another promotes it meanwhile (B) and returns;
        // then A's call lands with the older rank. The newer one must
        // hold: a vCPU the scheduler runs left in the idle class would
        // not run while any other thread wants its CPU.
        let r = Arc::new(RankState::new());
        let t = Arc::new(ModelThread::default());
        decide(&r, -1, 0);
        assert!(r.apply(|c| t.set_rank(c), |c| t.bind(c)));
        let (in_call, wait_a) = std::sync::mpsc::channel();
        let (go, landed) = std::sync::mpsc::channel::<()>();
        decide(&r, -2, 0);
        let a = {
            let (r, t) = (r.clone(), t.clone());
            std::thread::spawn(move || {
                let mut first = true;
                r.apply(
                    |c| {
                        if std::mem::take(&mut first) {
                            in_call.send(()).unwrap();
                            landed.recv().unwrap();
                        }
                        t.set_rank(c)
                    },
                    |c| t.bind(c),
                )
            })
        };
        wait_a.recv().unwrap();
        decide(&r, -1, 0);
        assert!(r.apply(|c| t.set_rank(c), |c| t.bind(c)));
        assert_eq!(t.holds().0, -1);
        go.send(()).unwrap();
        assert!(a.join().unwrap());
        assert_eq!(t.holds(), (-1, 0), "the last decision holds");
        // And it is known as set: the next look makes no call.
        let calls = t.calls.load(Ordering::Relaxed);
        assert!(r.apply(|c| t.set_rank(c), |c| t.bind(c)));
        assert_eq!(t.calls.load(Ordering::Relaxed), calls);
    }

    #[test]
    fn appliers_racing_leave_the_last_decision_in_place() {
        let r = Arc::new(RankState::new());
        let t = Arc::new(ModelThread::default());
        let decisions = Arc::new(Mutex::new(()));
        let threads: Vec<_> = (0..4u64)
            .map(|i| {
                let (r, t, decisions) = (r.clone(), t.clone(), decisions.clone());
                std::thread::spawn(move || {
                    let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ (i + 1);
                    let mut next = move || {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x
                    };
                    for _ in 0..300 {
                        let n = next();
                        {
                            // Decided under the vCPU's lock, as `ctl` is.
                            let _d = decisions.lock().unwrap();
                            decide(&r, [-1, -2, 12][(n % 3) as usize], (n >> 8) % 2);
                        }
                        let pause = |n: u64| {
                            for _ in 0..n % 4 {
                                std::thread::yield_now();
                            }
                        };
                        r.apply(
                            |c| {
                                pause(n >> 16);
                                t.set_rank(c)
                            },
                            |c| {
                                pause(n >> 24);
                                t.bind(c)
                            },
                        );
                    }
                })
            })
            .collect();
        for h in threads {
            h.join().unwrap();
        }
        // One that gave up is applied again at the agent's next look.
        if r.take_gave_up() {
            assert!(r.apply(|c| t.set_rank(c), |c| t.bind(c)));
        }
        let want = (
            r.want_rank.load(Ordering::Acquire),
            r.want_cpus.load(Ordering::Acquire),
        );
        assert_eq!(t.holds(), want);
    }
}
