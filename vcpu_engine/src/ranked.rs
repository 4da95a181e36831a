//! The `ranked` dispatch: the scheduler decides, the host kernel switches
//! ([`crate::DispatchKind::Ranked`]).
//!
//! # Why
//!
//! Enforcing each decision in user space costs an exit per IPI, halt and
//! timer (the `threads` dispatch, with Pacer's own local APIC); leaving
//! the vCPU threads to the host kernel with KVM's local APIC (`host`, and
//! the `kvm-irqchip` dispatch between two looks of its watcher) is cheap
//! but gives the wake-up race, the tail and the accounting back to the
//! host's EEVDF. Here KVM's in-kernel local APIC keeps IPIs, timers, EOIs
//! and halts inside KVM_RUN, and the decisions reach the host kernel as
//! two attributes of each vCPU thread that the kernel enforces on its own
//! fast path (the split of policy and mechanism of ghOSt, and how
//! real-time VMMs run vCPU threads):
//!
//! - its **rank** (`rank.rs`): a halted vCPU's thread is real-time
//!   (SCHED_FIFO) at a priority monotone in the scheduler's effective
//!   priority E, so KVM's wake-up of it preempts the running vCPU at once,
//!   and of two woken at once the higher E runs first; the CPU's *owner*
//!   (the vCPU the scheduler dispatched there) is in the normal class, as
//!   the host's own vCPU threads are; vCPUs queued behind an owner
//!   (*fillers*) are in the idle class, which runs only while the owner
//!   is halted and which any other thread preempts at its wake-up. So an
//!   owner that halts hands its CPU at once to the best runnable vCPU
//!   there, and rotation among CPU-bound vCPUs is the scheduler's own;
//!   only halted vCPUs, between KVM's wake-up and their next halt, are
//!   real-time, so the kernel's real-time throttling never stops a
//!   CPU-bound vCPU;
//! - a co-scheduled VM wider than its CPUs that does not halt shares the
//!   CPUs it owns: its queued siblings rank as owners there, bound to a
//!   CPU one of its siblings owns, and the kernel takes turns between
//!   them within the VM's slices; its threads hand the CPU on sooner
//!   where their guest spins (sibling turns, fixed or paced:
//!   `sibling_share.rs`);
//! - its **CPUs**: the owner is bound to its CPU; fillers and halted
//!   vCPUs may use their VM's whole core set, so the kernel's real-time
//!   placement puts a woken vCPU where it may run now and pulls a waiting
//!   filler to a CPU whose owners all halted (no vCPU waits while a CPU
//!   it may use idles).
//!
//! A vCPU thread leaves KVM_RUN for the engine only at its turn's end
//! (its own quantum timer: one exit on its own CPU, where it ends its
//! turn, demotes itself and promotes the next owner; no other thread is
//! woken for it) and to park (its VM paused or stopping, or it is capped
//! and not running: a capped vCPU is never a filler, so its cap holds
//! exactly). Preemptions and blocks are carried out from whichever thread
//! decides (the agent, a waker) by changing ranks and CPUs; the kernel
//! then switches threads as it would for any preemption. A thread out of
//! KVM_RUN, which may hold a lock of the VMM's, is the exception: no
//! other thread lowers it, it handles exits in the normal class even as
//! a filler, and its gate applies what was decided before the next
//! entry ([`left_guest`]).
//!
//! # What the engine learns, and when
//!
//! The scheduler's view lags the kernel's by at most one look:
//! - **the slice's end** (the owner's own thread, at its quantum timer,
//!   `quantum_expired`): the owner's thread CPU time says how much of the
//!   slice it used (a slice is CPU time, as in Haiku: one preempted by
//!   woken vCPUs is extended by what it lost); KVM's `blocking` statistic
//!   says whether it halted meanwhile (a block, not a quantum end);
//! - **the agent** (every `kvm_poll_ns`, `sample`): an owner that halted
//!   gives its CPU back as a block; a halted vCPU that is awake is woken
//!   through the scheduler's wake path (placement, preemption, its slice);
//!   the CPU time a halted vCPU used since the last look (woken, ran and
//!   halted again in between) is charged to it as such
//!   (`VcpuScheduler::ran_unseen`: its load, penalties, share and cap see
//!   every run, so a vCPU that wakes itself all the time is penalised as
//!   a hog is and cannot starve the others from the top ranks);
//! - **its own exits** (I/O, the yield port): a halted vCPU that exits
//!   is awake; a yield ends the owner's turn.
//!
//! Accounting is the kernel's: a turn is charged the CPU time its thread
//! used (not the wall time it held the CPU), the statistics report each
//! thread's run time and run-queue wait from the kernel, and the guest's
//! steal time is KVM's own (the time its runnable thread waited), exact
//! here since every runnable vCPU's thread is runnable in the kernel.
//!
//! # Departures
//!
//! - A vCPU KVM wakes preempts the owner whatever their effective
//!   priorities (haiku preempts only for a higher one): until the agent's
//!   next look, which queues it behind the owner if the scheduler says so
//!   (its rank then becomes a filler's), at the front of its level: it
//!   was running, so that is a preemption, not a fresh wake
//!   (`VcpuScheduler::wake_found_running`). A vCPU that stays awake after
//!   its wake-up is thus real-time for one look at most; one that wakes
//!   itself all the time is charged every run (`ran_unseen`), its E
//!   falls, and among halted vCPUs it then ranks below the others.
//! - Fillers run while their CPU's owner is halted, which the scheduler
//!   would also do at its next look (an idle CPU takes queued work); their
//!   runs are not charged to the scheduler's shares (their threads' time
//!   is in the statistics). Capped vCPUs are never fillers.
//! - vCPU threads never leave the class their rank gives them to do the
//!   engine's work (see `rank::ServiceSection`): a thread that leaves the
//!   kernel's fair class and comes back is placed anew by it, which cost
//!   CPU-bound vCPUs most of their time on a busy host when tried.
//! - SMT isolation cannot be expressed by ranks and CPUs (a filler or a
//!   woken vCPU may run beside another VM's): an engine with it refuses
//!   this dispatch.
//! - Without the right to real-time priorities (CAP_SYS_NICE, or an
//!   RLIMIT_RTPRIO of at least `rank::SERVICE_RANK`) the engine refuses
//!   this dispatch ([`crate::EngineError::NoRealtimeRanks`]).

use crate::clock::now_ns;
use crate::cpu::CpuSlot;
use crate::dispatch::Stop;
use crate::host_cpus::{pin_thread, HostCpu, HostCpuSet};
use crate::kvm_halts::KvmBlocking;
use crate::rank::{set_rank, thread_cpu_ns_of, Rank};
use crate::sibling_share::SiblingTurns;
use crate::trace::{Event, StopWhy};
use crate::trace_points::cpu16;
use crate::vcpu::{GateDecision, VcpuExitReason, VcpuGate, VcpuRunner, VcpuStep};
use crate::vcpu_state::{
    EngineVcpu, RankState, RunState, VcpuCtl, STATE_HALTED_IN_KVM, STATE_READY, STATE_RUNNING,
};
use crate::{Engine, EngineError, EngineVm};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vcpu_sched::{CpuId, StopReason};

/// How long an owner that nothing waits behind runs before its slice's
/// end is looked at (its penalty and balance; a vCPU that queues behind
/// it brings the end back to its slice's).
pub(crate) const LONE_SLICE_NS: u64 = 20_000_000;

/// A slice given back to an owner that lost CPU time ends at the latest
/// this many slices after its dispatch.
const MAX_SLICE_STRETCH: u64 = 3;

/// A slice counts as used up when less than this is left of it (the
/// timer's own latency; Haiku ends a quantum with less than half
/// the minimal quantum left, which the scheduler applies itself).
const SLICE_SLACK_NS: u64 = 20_000;

impl Engine {
    /// Decide, under `ctl`, the rank and CPUs of `v`'s thread for its
    /// state (see the module documentation); true if it must park.
    fn decide_rank(&self, v: &EngineVcpu, ctl: &VcpuCtl) -> bool {
        let halted = || {
            let e = self
                .scheduler()
                .effective_priority(v.entity)
                .unwrap_or(v.base_priority);
            Rank::Halted(e)
        };
        // A VM whose siblings spin together takes the kernel's turns
        // between them at the long slice (`sibling_share.rs`); asked only
        // for a thread that owns or shares a CPU.
        let owner = || {
            if v.sharing.as_ref().is_some_and(|s| s.long_turns(now_ns())) {
                Rank::LongTurnOwner
            } else {
                Rank::Owner
            }
        };
        let (rank, cpus, park) = match ctl.state {
            RunState::Running { cpu } => match self.slot(cpu) {
                Some(s) => (owner(), RankState::one(s.host), false),
                None => (Rank::Park, v.rank.allowed(), true),
            },
            RunState::HaltedInKvm => (halted(), v.rank.allowed(), false),
            RunState::Ready if !v.capped.load(Ordering::Acquire) => {
                match self.sibling_owned_cpu(v) {
                    Some(host) => {
                        let cpus = RankState::one(host);
                        if v.rank.want_cpus.load(Ordering::Relaxed) != cpus
                            || !Rank::is_owner(v.rank.want_rank.load(Ordering::Relaxed))
                        {
                            v.beside_sibling.fetch_add(1, Ordering::Relaxed);
                        }
                        (owner(), cpus, false)
                    }
                    None => (Rank::Filler, v.rank.allowed(), false),
                }
            }
            // Out of KVM_RUN: the signal is taken when the thread runs,
            // so it must run at once.
            RunState::Ready
            | RunState::Halted { .. }
            | RunState::WaitForSipi
            | RunState::Paused
            | RunState::Exited => (Rank::Park, v.rank.allowed(), true),
        };
        // A core set of one CPU: bound there whatever the state, so that
        // a change of state changes no binding.
        let cpus = match (RankState::single(cpus), v.rank.allowed_one()) {
            (None, Some(one)) => RankState::one(one),
            _ => cpus,
        };
        if rank == Rank::LongTurnOwner
            && v.rank.want_rank.load(Ordering::Relaxed) != Rank::LongTurnOwner.code()
        {
            v.long_turns.fetch_add(1, Ordering::Relaxed);
        }
        v.rank.want_rank.store(rank.code(), Ordering::Release);
        v.rank.want_cpus.store(cpus, Ordering::Release);
        park
    }

    /// The CPU that queued `v` shares with the sibling that owns it, if
    /// its VM shares its CPUs now (`sibling_share.rs`); marks that CPU's
    /// turn shared.
    fn sibling_owned_cpu(&self, v: &EngineVcpu) -> Option<HostCpu> {
        if !v.sharing.as_ref()?.shares(now_ns()) {
            return None;
        }
        let mine = v.vm + 1;
        // Its own CPUs only: an operator may have narrowed one vCPU's.
        let allowed = v.allowed.read().unwrap_or_else(|p| p.into_inner());
        let owned =
            |s: &&CpuSlot| s.owner_vm.load(Ordering::Acquire) == mine && allowed.contains(s.host);
        let count = self.slots().iter().filter(owned).count();
        if count == 0 {
            return None;
        }
        let slot = self
            .slots()
            .iter()
            .filter(owned)
            .nth(crate::sibling_share::pick(count, v.entity.index()))?;
        slot.shared_turn.store(true, Ordering::Relaxed);
        // Its own timer at the turn's end too: the owner's thread, kept
        // off the CPU by it, would take its timer only when the kernel
        // next switches threads (`end_shared_turn`).
        if let Some(timer) = v.shared_turn_timer.get() {
            timer.arm(slot.quantum_end());
        }
        Some(slot.host)
    }

    /// `v`'s shared-turn timer fired: if the turn of the sibling it was
    /// placed beside is over, end it now, from this thread (true). The
    /// owner's own timer fired too, but its thread takes the signal only
    /// when it next runs, and `v`'s thread, running in its place, may keep
    /// it off the CPU until the kernel's next tick: without this the VM
    /// overran each shared turn by up to a tick, at the other VMs' cost.
    fn end_shared_turn(&self, v: &EngineVcpu) -> bool {
        if !Rank::is_owner(v.rank.want_rank.load(Ordering::Relaxed)) {
            return false;
        }
        let Some(host) = RankState::single(v.rank.want_cpus.load(Ordering::Relaxed)) else {
            return false;
        };
        let Some(slot) = self.slots().iter().find(|s| s.host == host) else {
            return false;
        };
        if !slot.shared_turn.load(Ordering::Relaxed) {
            return false;
        }
        // Before the owner lock: a `turns` VM's ticks come here every turn
        // (a relaxed VM's paced ones at their pace).
        let end = slot.quantum_end();
        if now_ns() < end {
            // The turn's end moved later since the timer was armed.
            if let Some(timer) = v.shared_turn_timer.get() {
                timer.arm(end);
            }
            return false;
        }
        let owner = slot.lock_owner().clone();
        let Some(owner) = owner.filter(|o| o.vm == v.vm && !std::ptr::eq(&**o, v)) else {
            return false;
        };
        let ended = self.quantum_expired(slot.id, &owner, halted_in_kvm(&owner));
        if ended {
            v.shared_turns_ended.fetch_add(1, Ordering::Relaxed);
        }
        ended
    }

    /// Whether a sibling of `v` shares the CPU `v`'s thread is bound to,
    /// in the normal class (an owner and a sibling placed beside it), and
    /// whether one of those gave it the CPU from a spin-wait loop.
    fn siblings_beside(&self, vm: &EngineVm, v: &EngineVcpu) -> Beside {
        let mut beside = Beside::default();
        self.siblings_beside_each(vm, v, |s| {
            beside.any = true;
            beside.spinner_waits |= s.spun_at_stop.load(Ordering::Relaxed);
        });
        beside
    }

    /// Calls `f` with each sibling of `v` that shares the CPU `v`'s thread
    /// is bound to.
    fn siblings_beside_each(&self, vm: &EngineVm, v: &EngineVcpu, mut f: impl FnMut(&EngineVcpu)) {
        let bound = |s: &EngineVcpu| {
            Rank::is_owner(s.rank.want_rank.load(Ordering::Relaxed))
                .then(|| RankState::single(s.rank.want_cpus.load(Ordering::Relaxed)))
                .flatten()
        };
        let Some(mine) = bound(v) else { return };
        for s in vm.vcpus().iter().filter(|s| !std::ptr::eq(&***s, v)) {
            if matches!(s.state_code(), STATE_READY | STATE_RUNNING) && bound(s) == Some(mine) {
                f(s);
            }
        }
    }

    /// Give `v`'s thread the rank and CPUs last decided for it, with no
    /// lock held (the caller may be that thread, which the calls may
    /// lower); any thread may, and the last decision is the one the
    /// kernel holds once they all returned ([`RankState::apply`]).
    fn apply_rank(&self, v: &EngineVcpu) {
        let tid = v.thread_id();
        if tid == 0 || v.left.load(Ordering::Acquire) {
            return;
        }
        if tid != crate::signals::current_tid() {
            // Pairs with the gate's fence before its look at the decision
            // (`RankedGate::next`): either it sees this decision or this
            // sees it back in the guest.
            std::sync::atomic::fence(Ordering::SeqCst);
            if v.rank.out_of_guest.load(Ordering::Relaxed) {
                // Handling an exit, maybe holding a lock of the VMM's
                // that its CPU's next owner will want: lowered now to the
                // idle class, it would keep that lock for as long as the
                // host's other threads keep the CPU. Its gate applies
                // the decision before the next entry — unless it went
                // back in since the look above (then this applies it).
                v.rank.deferred.store(true, Ordering::Relaxed);
                std::sync::atomic::fence(Ordering::SeqCst);
                if v.rank.out_of_guest.load(Ordering::Relaxed) {
                    return;
                }
            }
        }
        let settled = v.rank.apply(
            |rank| {
                set_rank(tid, rank)
                    .map_err(|e| gone_or_warn(v, "rank", &e))
                    .is_ok()
            },
            |cpus| {
                let set = match RankState::single(cpus) {
                    Some(c) => [c].into_iter().collect(),
                    None => v.allowed.read().unwrap_or_else(|p| p.into_inner()).clone(),
                };
                pin_thread(tid, &set)
                    .map_err(|e| gone_or_warn(v, "bind", &e))
                    .is_ok()
            },
        );
        if !settled {
            log::debug!(
                "{}: rank applied by too many threads at once; the agent's next look sets it",
                v.name
            );
        }
    }

    /// Decide and apply `v`'s rank and CPUs for its state; a thread that
    /// must park is signalled out of KVM_RUN. On `v`'s own thread (a
    /// decision its gate took part in) only decided: its gate applies it
    /// once it holds no lock.
    pub(crate) fn enact(&self, v: &EngineVcpu) {
        let park = {
            let ctl = v.ctl();
            self.decide_rank(v, &ctl)
        };
        if v.thread_id() == crate::signals::current_tid() {
            return;
        }
        self.apply_rank(v);
        if park && !v.parked.load(Ordering::Acquire) && !v.left.load(Ordering::Acquire) {
            v.kick_own_thread();
        }
    }

    /// The CPU time `v`'s thread used since the engine last looked (and
    /// mark it seen).
    fn take_cpu_time(&self, v: &EngineVcpu) -> u64 {
        let Some(now) = thread_cpu_ns_of(v.thread_id()) else {
            return 0;
        };
        let seen = v.cpu_seen.swap(now, Ordering::AcqRel);
        now.saturating_sub(seen)
    }

    /// The owner `v` of `slot` stops for `stop` (under the slot's `owner`
    /// lock, `owner` holding `v`): charge its turn the CPU time it used,
    /// set its state, ask the scheduler for the next owner. The caller
    /// enacts both and kicks the CPUs returned, once it released `owner`.
    fn stop_owner_locked(
        &self,
        slot: &CpuSlot,
        owner: &mut Option<Arc<EngineVcpu>>,
        v: &EngineVcpu,
        stop: Stop,
    ) -> (Option<Arc<EngineVcpu>>, Vec<CpuId>) {
        let now = now_ns();
        let ran = self.take_cpu_time(v);
        let held = now.saturating_sub(v.dispatched_at.load(Ordering::Relaxed));
        let reason = {
            let mut ctl = v.ctl();
            self.record(|| Event::Stop {
                cpu: cpu16(slot.host),
                vcpu: v.trace_ref(),
                why: match &stop {
                    Stop::Quantum => StopWhy::Quantum,
                    Stop::Preempted => StopWhy::Preempted,
                    Stop::Yielded => StopWhy::Yielded,
                    Stop::Blocked if self.vm_paused(v) => StopWhy::Paused,
                    Stop::Blocked => StopWhy::Halted,
                    Stop::Exit(_) => StopWhy::Exited,
                },
                thread_cpu_ns: v.cpu_seen.load(Ordering::Relaxed),
            });
            match stop {
                Stop::Quantum => {
                    v.set_state(&mut ctl, RunState::Ready);
                    StopReason::QuantumEnd
                }
                Stop::Preempted => {
                    v.set_state(&mut ctl, RunState::Ready);
                    StopReason::Preempted
                }
                Stop::Yielded => {
                    v.set_state(&mut ctl, RunState::Ready);
                    StopReason::Yielded
                }
                Stop::Blocked => {
                    // Halted, or paused (the caller set Paused already).
                    v.note_vm_halted(now);
                    if matches!(ctl.state, RunState::Running { .. }) {
                        v.set_state(&mut ctl, RunState::HaltedInKvm);
                        note_wakeups(v);
                    }
                    StopReason::Blocked
                }
                Stop::Exit(r) => {
                    if r != VcpuExitReason::Stopped {
                        ctl.exit_reason = Some(r);
                    }
                    v.set_state(&mut ctl, RunState::Exited);
                    StopReason::Blocked
                }
            }
        };
        // The time it held the CPU without running (halted, or preempted
        // by a vCPU KVM woke, or by another host thread) is not run time.
        let idle = if slot.shared_turn.load(Ordering::Relaxed) && reason != StopReason::Blocked {
            // Its siblings ran beside it: the VM used the slice.
            0
        } else {
            held.saturating_sub(ran)
        };
        self.reschedule_locked(slot, owner, reason, idle)
    }

    fn vm_paused(&self, v: &EngineVcpu) -> bool {
        self.vm(v.vm).is_some_and(|vm| vm.is_paused())
    }

    /// After a decision on `slot` (its `owner` released): rank the vCPU
    /// that stopped and the one that runs next, wake the next one's thread
    /// if it was parked, and kick the CPUs the scheduler named.
    fn carry_out(
        &self,
        stopped: Option<&EngineVcpu>,
        next: Option<Arc<EngineVcpu>>,
        kicks: Vec<CpuId>,
    ) {
        for k in kicks {
            self.kick_cpu(k);
        }
        // The stopped owner first: out of the normal class, so that the
        // new owner's entry into it preempts it at once.
        if let Some(s) = stopped {
            self.enact(s);
        }
        if let Some(n) = &next {
            self.enact(n);
            n.announce();
        }
        // A sharing VM's queued siblings follow the CPUs it owns (once per
        // VM: the stopped owner and the next are often siblings).
        let sharing = |v: &EngineVcpu| v.sharing.is_some().then_some(v.vm);
        let stopped_vm = stopped.and_then(sharing);
        let next_vm = next
            .as_deref()
            .and_then(sharing)
            .filter(|n| Some(*n) != stopped_vm);
        for vm in [stopped_vm, next_vm].into_iter().flatten() {
            let Some(vm) = self.vm(vm) else { continue };
            let enacted = |s: &EngineVcpu| {
                stopped.is_some_and(|x| std::ptr::eq(x, s))
                    || next.as_deref().is_some_and(|x| std::ptr::eq(x, s))
            };
            for s in vm.vcpus() {
                if s.state_code() == STATE_READY && !enacted(s) {
                    self.enact(s);
                }
            }
        }
    }

    /// `stop` the owner of `cpu` if it is `v` (from any thread); false if
    /// `v` does not own it (any more).
    fn stop_owner(&self, cpu: CpuId, v: &Arc<EngineVcpu>, stop: Stop) -> bool {
        let Some(slot) = self.slot(cpu) else {
            return false;
        };
        let mut owner = slot.lock_owner();
        if !owner.as_ref().is_some_and(|o| Arc::ptr_eq(o, v)) {
            return false;
        }
        let (next, kicks) = self.stop_owner_locked(slot, &mut owner, v, stop);
        drop(owner);
        self.carry_out(Some(v), next, kicks);
        true
    }

    /// The scheduler asked `cpu` to call `schedule` (a wake that preempts,
    /// work for an idle CPU, a change): done here, on the caller's thread.
    pub(crate) fn ranked_kick(&self, cpu: CpuId) {
        let Some(slot) = self.slot(cpu) else { return };
        slot.kick_pending.store(false, Ordering::Release);
        let mut owner = slot.lock_owner();
        match owner.clone() {
            Some(v) => {
                // An owner found halted gives the CPU back as a block.
                let stop = if halted_in_kvm(&v) {
                    Stop::Blocked
                } else {
                    Stop::Preempted
                };
                let (next, kicks) = self.stop_owner_locked(slot, &mut owner, &v, stop);
                drop(owner);
                self.carry_out(Some(&v), next, kicks);
            }
            None => {
                let (next, kicks) = self.reschedule_locked(slot, &mut owner, StopReason::Idle, 0);
                drop(owner);
                self.carry_out(None, next, kicks);
            }
        }
    }

    /// The owner `v` of `cpu` left KVM_RUN for its quantum timer, on its
    /// own thread (`halted`: the guest is halted in KVM): its slice ends
    /// now, unless it lost CPU time to others (see the module
    /// documentation), or it is not the owner any more.
    pub(crate) fn quantum_expired(&self, cpu: CpuId, v: &Arc<EngineVcpu>, halted: bool) -> bool {
        let Some(slot) = self.slot(cpu) else {
            return false;
        };
        let mut owner = slot.lock_owner();
        if !owner.as_ref().is_some_and(|o| Arc::ptr_eq(o, v)) {
            return false;
        }
        let now = now_ns();
        let end = slot.quantum_end();
        if now < end {
            // A stray signal, or a slice moved since the timer fired.
            return false;
        }
        if halted {
            let (next, kicks) = self.stop_owner_locked(slot, &mut owner, v, Stop::Blocked);
            drop(owner);
            self.carry_out(Some(v), next, kicks);
            return true;
        }
        // A slice is CPU time: what the owner lost to vCPUs KVM woke (or
        // to other host threads) is given back, up to the slice again.
        let dispatched = v.dispatched_at.load(Ordering::Relaxed);
        let granted = slot.granted();
        let used = crate::clock::thread_cpu_ns().saturating_sub(v.cpu_seen.load(Ordering::Acquire));
        let latest = dispatched.saturating_add(granted.saturating_mul(MAX_SLICE_STRETCH));
        let shared = slot.shared_turn.load(Ordering::Relaxed);
        if !shared && used.saturating_add(SLICE_SLACK_NS) < granted && now < latest {
            slot.set_quantum_end((now + (granted - used)).min(latest));
            return false;
        }
        let (next, kicks) = self.stop_owner_locked(slot, &mut owner, v, Stop::Quantum);
        drop(owner);
        self.carry_out(Some(v), next, kicks);
        true
    }

    /// `v`'s quantum timer, made after it was dispatched: armed at its
    /// turn's end if it still owns its CPU.
    fn arm_if_owner(&self, v: &Arc<EngineVcpu>) {
        let RunState::Running { cpu } = v.state() else {
            return;
        };
        let (Some(slot), Some(timer)) = (self.slot(cpu), v.quantum_timer.get()) else {
            return;
        };
        let owner = slot.lock_owner();
        if owner.as_ref().is_some_and(|o| Arc::ptr_eq(o, v)) {
            slot.arm_turn(timer);
        }
    }

    /// A vCPU was queued behind the owner of `cpu`: that owner's slice,
    /// stretched while it was alone, ends when its granted slice does (or
    /// now, if it has used that up).
    pub(crate) fn queued_behind(&self, cpu: CpuId) {
        let Some(slot) = self.slot(cpu) else { return };
        let owner = slot.lock_owner();
        let Some(v) = owner.as_ref() else { return };
        let due = v
            .dispatched_at
            .load(Ordering::Relaxed)
            .saturating_add(slot.granted())
            .max(now_ns());
        if due < slot.quantum_end() {
            slot.set_quantum_end(due);
        }
    }

    /// `v`, queued as a filler, halted in KVM: halted in the engine's view
    /// (the scheduler learns it when a CPU picks it), ranked as halted.
    fn halted_while_queued(&self, v: &EngineVcpu) {
        v.note_vm_halted(now_ns());
        {
            let mut ctl = v.ctl();
            if ctl.state != RunState::Ready {
                return;
            }
            v.set_state(&mut ctl, RunState::HaltedInKvm);
            note_wakeups(v);
        }
        self.enact(v);
    }

    /// A vCPU halted in KVM is awake (the agent saw it, or it exited):
    /// charge what it ran unseen, then wake it through the scheduler.
    fn awake_in_kvm(&self, v: &EngineVcpu) {
        let ran = self.take_cpu_time(v);
        self.awake_after(v, ran);
    }

    /// [`Engine::awake_in_kvm`], having run `ran` ns unseen.
    fn awake_after(&self, v: &EngineVcpu, ran: u64) {
        if ran > 0 {
            let _ = self.scheduler().ran_unseen(v.entity, ran, now_ns());
        }
        let ctl = v.ctl();
        if ctl.state != RunState::HaltedInKvm {
            return;
        }
        self.found_running_in_kvm(v, ctl);
        self.enact(v);
    }

    /// One look of the agent at every vCPU (see the module documentation).
    pub(crate) fn ranked_sample(&self) -> Look {
        let (mut samples, mut halts, mut wakes) = (0, 0, 0);
        let mut watched = 0;
        for vm in self.live_vms() {
            for v in vm.vcpus() {
                let Some(stats) = v.kvm_blocking.get() else {
                    continue;
                };
                samples += 1;
                if v.sharing.is_some()
                    && (v.state_code() == STATE_HALTED_IN_KVM || stats.blocking().unwrap_or(false))
                {
                    v.note_vm_halted(now_ns());
                }
                if v.rank.take_gave_up() {
                    self.enact(v);
                }
                match v.state() {
                    RunState::Running { cpu }
                        if stats.blocking().unwrap_or(false)
                            && self.stop_owner(cpu, v, Stop::Blocked) =>
                    {
                        halts += 1;
                    }
                    RunState::HaltedInKvm => {
                        watched += 1;
                        // KVM's `blocking` is cleared by the woken thread
                        // when it runs: one KVM woke but that has not run
                        // (ranked below the CPU's owner) still reads 1.
                        // The wake-up count moves at the wake itself.
                        let blocking = stats.blocking().unwrap_or(true);
                        let woken = stats
                            .halt_wakeups()
                            .is_some_and(|w| v.wakeups_seen.swap(w, Ordering::AcqRel) != w);
                        let ran = self.take_cpu_time(v);
                        let awake = !blocking || (woken && (ran == 0 || thread_runnable(v)));
                        // Awake at two looks in a row: it stays awake, and
                        // the scheduler decides where it goes. Awake at one
                        // only: most likely a burst between two halts
                        // (an IPI, a timer), which its rank serves at once
                        // and the scheduler sees as an unseen run.
                        let sustained = awake && v.awake_at_look.swap(true, Ordering::AcqRel);
                        if !awake {
                            v.awake_at_look.store(false, Ordering::Release);
                        }
                        if sustained {
                            wakes += 1;
                            v.awake_at_look.store(false, Ordering::Release);
                            self.awake_after(v, ran);
                        } else if ran > 0 {
                            let _ = self.scheduler().ran_unseen(v.entity, ran, now_ns());
                            // Its E may have changed.
                            self.enact(v);
                        }
                    }
                    RunState::Ready => {
                        // A filler's runs are not the scheduler's to charge.
                        self.take_cpu_time(v);
                        if stats.blocking().unwrap_or(false) {
                            // Queued, but halted in KVM: it ranks as a
                            // halted vCPU again (so KVM's wake-up of it
                            // preempts), and the CPU that picks it finds
                            // it halted and picks again.
                            self.halted_while_queued(v);
                        }
                    }
                    _ => {}
                }
            }
        }
        Look {
            samples,
            halts,
            wakes,
            watched,
        }
    }

    /// Take every vCPU of `vm` off its CPU and out of the scheduler's
    /// queues into `state` (Paused or Exited), park their threads, and
    /// wait up to `timeout` until every thread is out of KVM_RUN.
    ///
    /// Every CPU's `owner` lock is held while the states change, so no
    /// CPU dispatches a vCPU of `vm` meanwhile; a vCPU still queued in
    /// the scheduler stays queued there, and the CPU that picks it later
    /// finds it taken off and picks again (`reschedule_locked`).
    pub(crate) fn ranked_take_off(
        &self,
        vm: &EngineVm,
        state: RunState,
        timeout: Duration,
    ) -> Result<(), EngineError> {
        let mut decided = Vec::new();
        {
            let mut owners: Vec<_> = self.slots().iter().map(|s| s.lock_owner()).collect();
            for v in &vm.vcpus {
                let mut ctl = v.ctl();
                match ctl.state {
                    RunState::Exited => {}
                    RunState::Running { cpu } => {
                        let Some(slot) = self.slot(cpu) else { continue };
                        let stop = if state == RunState::Exited {
                            Stop::Exit(VcpuExitReason::Stopped)
                        } else {
                            // Paused first: the block keeps it.
                            v.set_state(&mut ctl, state);
                            Stop::Blocked
                        };
                        drop(ctl);
                        let owner = &mut owners[cpu.0 as usize];
                        let (next, kicks) = self.stop_owner_locked(slot, owner, v, stop);
                        decided.push((next, kicks));
                    }
                    _ => v.set_state(&mut ctl, state),
                }
            }
        }
        for (next, kicks) in decided {
            self.carry_out(None, next, kicks);
        }
        for v in &vm.vcpus {
            self.enact(v);
        }
        let deadline = Instant::now() + timeout;
        for v in &vm.vcpus {
            while !v.parked.load(Ordering::Acquire) && !v.left.load(Ordering::Acquire) {
                if Instant::now() >= deadline {
                    return Err(EngineError::Timeout {
                        what: format!("parking {}", v.name),
                        timeout,
                    });
                }
                v.kick_own_thread();
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(())
    }
}

/// A rank or binding of `v`'s thread failed: quietly if the thread has
/// just ended (its loop leaves before the engine forgets it).
fn gone_or_warn(v: &EngineVcpu, what: &str, e: &std::io::Error) {
    if e.raw_os_error() == Some(libc::ESRCH) || v.left.load(Ordering::Acquire) {
        log::debug!("{}: thread gone, no {what}: {e}", v.name);
    } else {
        log::warn!("{}: cannot {what} its thread: {e}", v.name);
    }
}

/// Remember KVM's wake-up count of `v` (it is halted now in the engine's
/// view): a later count says KVM woke it since.
fn note_wakeups(v: &EngineVcpu) {
    if let Some(w) = v.kvm_blocking.get().and_then(KvmBlocking::halt_wakeups) {
        v.wakeups_seen.store(w, Ordering::Release);
    }
}

/// Whether `v`'s thread is runnable (running or waiting for a CPU) now,
/// from its `/proc/thread-self/stat` (false if unknown).
fn thread_runnable(v: &EngineVcpu) -> bool {
    use std::os::unix::fs::FileExt;
    let Some(f) = v.thread_stat.get() else {
        return false;
    };
    let mut buf = [0u8; 512];
    let Ok(n) = f.read_at(&mut buf, 0) else {
        return false;
    };
    // "<tid> (<comm>) <state> ...": the name may hold anything, so the
    // state follows the last ')'.
    let text = &buf[..n];
    text.iter()
        .rposition(|b| *b == b')')
        .and_then(|i| text.get(i + 2))
        .is_some_and(|s| *s == b'R')
}

/// What one look of the agent saw and did.
pub(crate) struct Look {
    /// vCPUs looked at.
    pub samples: u64,
    /// Owners found halted (their CPUs given back).
    pub halts: u64,
    /// Halted vCPUs found awake for good (woken in the scheduler).
    pub wakes: u64,
    /// vCPUs halted in KVM at the look.
    pub watched: u64,
}

impl Look {
    /// Nothing halted in KVM to watch, nothing done.
    pub fn quiet(&self) -> bool {
        self.halts == 0 && self.wakes == 0 && self.watched == 0
    }
}

/// Whether `v`'s thread sleeps in KVM's halt now (false if unknown).
fn halted_in_kvm(v: &EngineVcpu) -> bool {
    v.kvm_blocking
        .get()
        .is_some_and(|b| b.blocking().unwrap_or(false))
}

/// The gate of a vCPU thread under the ranked dispatch: it runs the guest
/// whenever the host kernel gives it its CPU, and leaves KVM_RUN for the
/// engine only at its slice's end (its quantum timer) and to park (see
/// the module documentation). Its look at every exit takes no lock; after
/// it took part in a decision (its slice's end, a yield, a wake it found,
/// parking) it takes its vCPU's rank again, holding no lock.
pub(crate) struct RankedGate {
    engine: Arc<Engine>,
    vm: Arc<EngineVm>,
    vcpu: Arc<EngineVcpu>,
    /// A `turns` VM, or a relaxed one, that shares its CPUs: this thread's
    /// turns beside its siblings ([`SiblingTurns`]).
    turns: Option<SiblingTurns>,
    /// KVM copies its registers out at every exit (for the spin test): a
    /// `turns` VM's from the start, a relaxed VM's from its first exit
    /// while it shares (a VM that never shares, a request server, never
    /// pays for the copy).
    regs_synced: bool,
}

impl RankedGate {
    pub(crate) fn new(engine: &Arc<Engine>, vm: &Arc<EngineVm>, v: &Arc<EngineVcpu>) -> Self {
        RankedGate {
            engine: engine.clone(),
            vm: vm.clone(),
            vcpu: v.clone(),
            turns: None,
            regs_synced: false,
        }
    }

    /// A tick of its turn timer: give the CPU to the sibling beside it if
    /// the turn is due and its guest spins ([`SiblingTurns`]); a paced
    /// thread's look teaches its VM's pace and arms the next.
    fn turn_tick(&mut self, runner: &mut VcpuRunner) {
        let Some(turns) = &mut self.turns else { return };
        let cpu_now = crate::clock::thread_cpu_ns();
        let beside = self.engine.siblings_beside(&self.vm, &self.vcpu);
        let spinning = beside.any && self.regs_synced && runner.spinning();
        if !self.regs_synced {
            // A sibling's give-back look before this thread's first exit
            // while its VM shares: its registers from the next exit on.
            runner.sync_registers();
            self.regs_synced = true;
        }
        let v = &self.vcpu;
        v.spun_at_stop.store(false, Ordering::Relaxed);
        if spinning {
            if let Some(share) = &v.sharing {
                share.spin_seen(v.index, now_ns());
            }
        }
        if !spinning && beside.spinner_waits {
            // A look for a give-back is neither a hit nor a miss for the
            // pace.
            match turns.give_back(cpu_now, now_ns()) {
                Some(true) => {
                    // SAFETY: sched_yield takes no arguments.
                    unsafe { libc::sched_yield() };
                    turns.yielded(crate::clock::thread_cpu_ns());
                    runner.stats.turns_given_back += 1;
                    return;
                }
                // Not yet (its timer is armed for it), or it spins itself:
                // then it most likely holds what the spinner waits for, and
                // is not looked into again until something arms its timer
                // (a sibling's yield, an exit that finds a spin).
                Some(false) | None => return,
            }
        }
        if spinning && turns.due(cpu_now) {
            v.spun_at_stop.store(true, Ordering::Relaxed);
            if turns.is_paced() {
                // The sibling the kernel runs next looks half a turn on
                // whether to give the CPU back.
                let look = now_ns().saturating_add(self.engine.sibling_turn_ns() / 2);
                self.engine.siblings_beside_each(&self.vm, v, |s| {
                    if let Some(t) = s.turn_timer.get() {
                        t.arm(look);
                    }
                });
            }
            // SAFETY: sched_yield takes no arguments.
            unsafe { libc::sched_yield() };
            turns.yielded(crate::clock::thread_cpu_ns());
            runner.stats.spin_yields += 1;
        }
        turns.looked(spinning, beside.any, cpu_now, now_ns());
    }

    /// An exit the thread made anyway (its slice's or a shared turn's
    /// end): a paced thread that finds its guest spinning starts its VM's
    /// looks.
    fn look_at_exit(&mut self, runner: &mut VcpuRunner) {
        let Some(turns) = &mut self.turns else { return };
        if !turns.is_paced() {
            return;
        }
        if !self.regs_synced {
            if self
                .vcpu
                .sharing
                .as_ref()
                .is_some_and(|s| s.shares(now_ns()))
            {
                runner.sync_registers();
                self.regs_synced = true;
            }
            return;
        }
        if runner.spinning() {
            let now = now_ns();
            if let Some(share) = &self.vcpu.sharing {
                share.spin_seen(self.vcpu.index, now);
            }
            turns.spin_seen(crate::clock::thread_cpu_ns(), now);
        }
    }

    /// The thread starts: known to the engine, its KVM statistics open.
    fn start(&mut self, runner: &mut VcpuRunner) -> Result<(), VcpuExitReason> {
        let v = &self.vcpu;
        v.tid
            .store(crate::signals::current_tid(), Ordering::Release);
        if v.kvm_blocking.get().is_none() {
            // An embedder's thread (`Engine::add_vm` opened it already).
            let blocking =
                KvmBlocking::open(runner.vcpu_fd()).map_err(|e| VcpuExitReason::Unhandled {
                    exit: format!("the ranked dispatch needs KVM's per-vCPU statistics: {e}"),
                })?;
            let _ = v.kvm_blocking.set(blocking);
        }
        v.cpu_seen
            .store(crate::clock::thread_cpu_ns(), Ordering::Release);
        if v.quantum_timer.get().is_none() {
            let timer = crate::clock::QuantumTimer::for_current_thread().map_err(|e| {
                // Without it an owner would keep its CPU for ever.
                VcpuExitReason::Unhandled {
                    exit: e.to_string(),
                }
            })?;
            let _ = v.quantum_timer.set(Arc::new(timer));
            // Dispatched before its thread had a timer: arm it now.
            self.engine.arm_if_owner(v);
        }
        if v.sharing.is_some() && v.shared_turn_timer.get().is_none() {
            match crate::clock::QuantumTimer::for_current_thread() {
                Ok(t) => {
                    let _ = v.shared_turn_timer.set(t);
                }
                // Its shared turns then end at the owner's thread's timer.
                Err(e) => log::warn!("{}: no shared-turn timer: {e}", v.name),
            }
        }
        let turn = self.engine.sibling_turn_ns();
        if v.sharing.is_some() && turn > 0 && self.turns.is_none() {
            let cpu_now = crate::clock::thread_cpu_ns();
            let turns = match (&self.vm.spin_pace, self.vm.sibling_turns) {
                (_, true) => Some(SiblingTurns::start(turn, cpu_now)),
                (Some(pace), false) => Some(
                    crate::clock::QuantumTimer::for_current_thread().and_then(|t| {
                        let timer = v.turn_timer.get_or_init(|| Arc::new(t)).clone();
                        SiblingTurns::paced(turn, cpu_now, pace.clone(), timer)
                    }),
                ),
                (None, false) => None,
            };
            match turns.transpose() {
                Ok(Some(t)) => {
                    if !t.is_paced() {
                        // Its registers at every exit, for the spin test.
                        runner.sync_registers();
                        self.regs_synced = true;
                    }
                    self.turns = Some(t);
                }
                Ok(None) => {}
                Err(e) => log::warn!("{}: no sibling turns: {e}", v.name),
            }
        }
        match std::fs::File::open("/proc/thread-self/stat") {
            Ok(f) => {
                let _ = v.thread_stat.set(f);
            }
            Err(e) => log::debug!("{}: no /proc/thread-self/stat: {e}", v.name),
        }
        note_wakeups(v);
        Ok(())
    }

    /// Leave the loop: the vCPU stops for good, for `reason` (a stop: the
    /// reason a fatal exit left, if any).
    fn exit(&self, reason: VcpuExitReason) -> GateDecision {
        let v = &self.vcpu;
        let reason = {
            if let RunState::Running { cpu } = v.state() {
                self.engine.stop_owner(cpu, v, Stop::Exit(reason.clone()));
            }
            let mut ctl = v.ctl();
            if ctl.state != RunState::Exited {
                v.set_state(&mut ctl, RunState::Exited);
            }
            match (&reason, &ctl.exit_reason) {
                (VcpuExitReason::Stopped, Some(r)) => r.clone(),
                (VcpuExitReason::Stopped, None) => reason,
                (_, _) => {
                    ctl.exit_reason.get_or_insert_with(|| reason.clone());
                    reason
                }
            }
        };
        v.left.store(true, Ordering::Release);
        GateDecision::Exit(reason)
    }

    /// Whether the state (`code`) keeps the thread out of KVM_RUN.
    fn must_park(&self, code: u8) -> bool {
        match code {
            STATE_RUNNING | STATE_HALTED_IN_KVM => false,
            STATE_READY => self.vcpu.capped.load(Ordering::Acquire),
            _ => true,
        }
    }

    /// Park while the vCPU's state keeps its thread out of KVM_RUN.
    /// Returns false once the VM is gone.
    fn park(&self) -> bool {
        let v = &self.vcpu;
        let gone = {
            let ctl = v.ctl();
            if !self.must_park(ctl.state.code()) {
                false
            } else {
                v.parked.store(true, Ordering::Release);
                self.engine.record(|| Event::Park {
                    vcpu: v.trace_ref(),
                });
                let ctl = v.wait_until(ctl, |c| {
                    !self.must_park(c.state.code()) || self.vm.handler.stopping()
                });
                let gone = ctl.state == RunState::Exited || self.vm.handler.stopping();
                drop(ctl);
                v.parked.store(false, Ordering::Release);
                gone
            }
        };
        if gone {
            return false;
        }
        // The CPU time it used parked is nothing to charge.
        v.cpu_seen
            .store(crate::clock::thread_cpu_ns(), Ordering::Release);
        true
    }
}

impl VcpuGate for RankedGate {
    fn next(&mut self, runner: &mut VcpuRunner, last: VcpuStep) -> GateDecision {
        let v = self.vcpu.clone();
        // Whether this thread took part in a decision: its rank is then
        // decided again from its vCPU's state and set (with no lock held,
        // as it may lower this thread).
        let mut decided = false;
        match &last {
            VcpuStep::Start => {
                if let Err(r) = self.start(runner) {
                    return self.exit(r);
                }
                let me = v.clone();
                runner.on_leaving_guest(Arc::new(move || left_guest(&me)));
                decided = true;
            }
            VcpuStep::Fatal(r) => return self.exit(r.clone()),
            VcpuStep::Yielded if v.state_code() == STATE_RUNNING => {
                if let RunState::Running { cpu } = v.state() {
                    self.engine.stop_owner(cpu, &v, Stop::Yielded);
                }
                decided = true;
            }
            VcpuStep::Interrupted if v.state_code() == STATE_RUNNING => {
                // Its quantum timer (or a stray signal): the slice's end.
                if let RunState::Running { cpu } = v.state() {
                    if self
                        .engine
                        .slot(cpu)
                        .is_some_and(|s| now_ns() >= s.quantum_end())
                    {
                        let halted = match runner.halted_in_kvm() {
                            Ok(h) => h,
                            Err(r) => return self.exit(r),
                        };
                        self.engine.quantum_expired(cpu, &v, halted);
                        self.look_at_exit(runner);
                        decided = true;
                    } else {
                        self.turn_tick(runner);
                    }
                }
            }
            VcpuStep::Interrupted if v.sharing.is_some() && v.state_code() == STATE_READY => {
                // Placed beside a sibling: its shared turn's end, or a
                // turn's tick.
                decided = self.engine.end_shared_turn(&v);
                if decided {
                    self.look_at_exit(runner);
                } else {
                    self.turn_tick(runner);
                }
            }
            VcpuStep::Interrupted if self.turns.is_some() => self.turn_tick(runner),
            VcpuStep::Yielded => {
                // A filler or a vCPU KVM woke: behind its equals.
                // SAFETY: sched_yield takes no arguments.
                unsafe { libc::sched_yield() };
            }
            _ => {}
        }
        if self.vm.handler.stopping() {
            return self.exit(VcpuExitReason::Stopped);
        }
        if v.state_code() == STATE_HALTED_IN_KVM {
            // It exited, so it is awake.
            self.engine.awake_in_kvm(&v);
            decided = true;
        }
        if self.must_park(v.state_code()) {
            if !self.park() {
                return self.exit(VcpuExitReason::Stopped);
            }
            decided = true;
        }
        if decided {
            let ctl = v.ctl();
            self.engine.decide_rank(&v, &ctl);
        }
        // Back to the guest: from here on the deciders apply its rank
        // themselves, and it applies what they decided while it was out.
        v.rank.out_of_guest.store(false, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::SeqCst);
        // A plain load first: no read-modify-write on the exit path when
        // nothing was deferred (nearly always).
        let deferred = v.rank.deferred.load(Ordering::Relaxed)
            && v.rank.deferred.swap(false, Ordering::Relaxed);
        if decided || deferred {
            self.engine.apply_rank(&v);
        }
        GateDecision::Run
    }
}

/// The siblings that share a vCPU's CPU (`Engine::siblings_beside`).
#[derive(Debug, Default, Clone, Copy)]
struct Beside {
    /// Some sibling shares it.
    any: bool,
    /// One of them gave this vCPU the CPU from a spin-wait loop and has
    /// not looked since.
    spinner_waits: bool,
}

/// On a ranked vCPU's thread as KVM_RUN returns, before the VMM handles
/// the exit: the deciders leave its rank to it from now on
/// (`Engine::apply_rank`), and a filler leaves the idle class. A filler
/// runs there only in the slivers the kernel gives that class beside
/// normal threads; if it took a lock of the VMM's there (the results log,
/// the console) and its CPU's owner then wanted it, the owner would sleep
/// until the next sliver, up to a second beside a busy host thread (the
/// steal-time test's accounting gap: the priority inversion the ranks
/// must not make). Its gate sets the decided rank again before the next
/// entry.
fn left_guest(v: &EngineVcpu) {
    v.rank.out_of_guest.store(true, Ordering::Relaxed);
    let filler = Rank::Filler.code();
    if v.rank.want_rank.load(Ordering::Acquire) == filler
        || v.rank.has_rank.load(Ordering::Acquire) == filler
    {
        let tid = v.thread_id();
        match set_rank(tid, Rank::Owner.code()) {
            // Unknown from now on: the gate sets it again.
            Ok(()) => {
                v.rank.has_rank.store(0, Ordering::Release);
                v.rank.deferred.store(true, Ordering::Relaxed);
            }
            Err(e) => gone_or_warn(v, "rank", &e),
        }
    }
}

/// The host CPUs a vCPU of `vm` may use under this dispatch (its core set
/// among the engine's CPUs).
pub(crate) fn allowed_host_cpus(engine: &Engine, cpus: &HostCpuSet) -> HostCpuSet {
    let ours = engine.host_cpus();
    let mut set = HostCpuSet::new();
    for c in cpus.iter().filter(|c| ours.contains(*c)) {
        set.insert(c);
    }
    if set.is_empty() {
        ours
    } else {
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rank::{own_policy, ranks_allowed};
    use vcpu_sched::EntityId;

    /// A vCPU whose thread is the calling one, decided and set at `rank`,
    /// in the guest.
    fn own_vcpu_at(rank: Rank) -> EngineVcpu {
        let v = EngineVcpu::new(
            0,
            0,
            0,
            EntityId::new(0, 0),
            "vm/vcpu0".into(),
            RunState::Ready,
        );
        let tid = crate::signals::current_tid();
        v.tid.store(tid, Ordering::Release);
        set_rank(tid, rank.code()).unwrap();
        v.rank.want_rank.store(rank.code(), Ordering::Release);
        v.rank.has_rank.store(rank.code(), Ordering::Release);
        v.rank.out_of_guest.store(false, Ordering::Release);
        v
    }

    /// Run `f` on a thread of its own (its ranks change that thread's
    /// class), or say why not.
    fn on_a_ranked_thread(f: impl FnOnce() + Send + 'static) {
        if ranks_allowed().is_err() {
            eprintln!("SKIPPED: no real-time priorities here");
            return;
        }
        std::thread::spawn(f).join().unwrap();
    }

    #[test]
    fn a_filler_handles_its_exits_in_the_normal_class() {
        on_a_ranked_thread(|| {
            let v = own_vcpu_at(Rank::Filler);
            assert_eq!(own_policy(), libc::SCHED_IDLE as u32);
            left_guest(&v);
            assert_eq!(
                own_policy(),
                libc::SCHED_OTHER as u32,
                "out of KVM_RUN a filler may take the VMM's locks: never idle class there"
            );
            assert!(v.rank.out_of_guest.load(Ordering::Acquire));
            assert!(
                v.rank.deferred.load(Ordering::Acquire),
                "its gate sets the filler rank again before the next entry"
            );
        });
    }

    #[test]
    fn an_owner_leaves_the_guest_with_no_system_call() {
        on_a_ranked_thread(|| {
            let v = own_vcpu_at(Rank::Owner);
            left_guest(&v);
            assert!(v.rank.out_of_guest.load(Ordering::Acquire));
            assert!(
                !v.rank.deferred.load(Ordering::Acquire),
                "the rank it holds is the one decided"
            );
            assert_eq!(own_policy(), libc::SCHED_OTHER as u32);
        });
    }
}
