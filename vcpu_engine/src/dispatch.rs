//! The decisions both dispatch mechanisms share: before every entry, may
//! the dispatched vCPU go on or must it give its CPU back ([`Engine::next_entry`]);
//! giving it back and picking the next ([`Engine::end_turn`],
//! [`Engine::reschedule_locked`]); waking a vCPU and kicking a CPU.

use super::clock::now_ns;
use super::cpu::CpuSlot;
use super::irq::{self, CpuEvents};
use super::trace_points::cpu16;
use super::vcpu_state::{EngineVcpu, RunState};
use super::{DispatchKind, Engine, EngineVm};
use crate::host_cpus::{pin_thread, HostCpuSet};
use crate::trace::{Event, StopWhy};
use crate::vcpu::{VcpuExitReason, VcpuRunner, VcpuStep};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use vcpu_sched::{CpuId, Dispatch, StopReason};

thread_local! {
    /// The entity whose turn this thread is executing (None between turns
    /// and on threads that run no vCPU): the waker of what its exits wake.
    static RUNNING_ENTITY: std::cell::Cell<Option<vcpu_sched::EntityId>> =
        const { std::cell::Cell::new(None) };
    /// The turn this thread executes ends as a yield before its next
    /// entry: the scheduler took a directed yield (`direct_yield`).
    static YIELD_NOW: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How many picks a `schedule` gets before the CPU idles for this call:
/// each may find a vCPU the engine cannot run (see `reschedule_locked`).
const PICK_ATTEMPTS: usize = 16;

/// A kick of a CPU whose running turn ends within this much sends no
/// signal: the quantum timer's own exit comes about as soon as a signal's
/// would (a kick's signal and exit take ~10-30 us on this machine).
const KICK_SLACK_NS: u64 = 20_000;

/// Why a dispatched vCPU gives its CPU back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// Its time slice ended.
    Quantum,
    /// The scheduler kicked its CPU.
    Preempted,
    /// The guest wrote the yield port.
    Yielded,
    /// It halted, waits for a start-up IPI, or its VM paused (the state
    /// was set when this was decided).
    Blocked,
    /// It never runs again (its VM stops, or a fatal exit).
    Exit(VcpuExitReason),
}

/// What a dispatched vCPU does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Enter the guest.
    Enter,
    /// Give the CPU back.
    Stop(Stop),
}

impl Engine {
    /// Before the next KVM_RUN of `v`, dispatched on `slot` until the
    /// slot's quantum end (which a wake may have brought forward), whose
    /// previous KVM_RUN ended with `last` ([`VcpuStep::Start`] at the
    /// start of a turn). Injects what is pending when the vCPU goes on.
    pub(crate) fn next_entry(
        &self,
        vm: &EngineVm,
        v: &EngineVcpu,
        slot: &CpuSlot,
        runner: &mut VcpuRunner,
        last: &VcpuStep,
    ) -> Next {
        let next = self.next_entry_inner(vm, v, slot, runner, last);
        match next {
            Next::Enter if *last == VcpuStep::Start => {
                // The guest's steal time: the wait the scheduler accounted
                // up to this dispatch, and no longer preempted.
                vm.handler
                    .vcpu_dispatched(v.index, &|| self.scheduler().ready_wait(v.entity, now_ns()));
            }
            Next::Stop(Stop::Quantum | Stop::Preempted | Stop::Yielded) => {
                vm.handler.vcpu_preempted(v.index);
            }
            _ => {}
        }
        next
    }

    fn next_entry_inner(
        &self,
        vm: &EngineVm,
        v: &EngineVcpu,
        slot: &CpuSlot,
        runner: &mut VcpuRunner,
        last: &VcpuStep,
    ) -> Next {
        RUNNING_ENTITY.set(Some(v.entity));
        slot.left_guest();
        vm.irq.poll_pv_eoi(v.index);
        if *last == VcpuStep::Interrupted {
            self.record(|| Event::ExitSeen {
                cpu: cpu16(slot.host),
                vcpu: v.trace_ref(),
            });
        }
        if YIELD_NOW.take() && !matches!(last, VcpuStep::Fatal(_) | VcpuStep::Halted) {
            // An IPI this vCPU sent went to a sibling waiting preempted:
            // its CPU goes to that sibling (the scheduler was told).
            return Next::Stop(Stop::Yielded);
        }
        match last {
            VcpuStep::Fatal(r) => return Next::Stop(Stop::Exit(r.clone())),
            VcpuStep::Yielded => return Next::Stop(Stop::Yielded),
            VcpuStep::Halted => {
                let (_, interruptible) = runner.interrupt_window();
                let mut ctl = v.ctl();
                let taken = vm.irq.take_events(v.index);
                ctl.events.merge(taken);
                // Decided under `ctl`: a notify either sees Halted (and
                // wakes it) or ran before (and this sees what it posted).
                if !irq::halt_is_over(vm.irq.as_ref(), v.index, &ctl.events, interruptible) {
                    v.set_state(&mut ctl, RunState::Halted { interruptible });
                    return Next::Stop(Stop::Blocked);
                }
            }
            _ => {}
        }
        if vm.handler.stopping() {
            return Next::Stop(Stop::Exit(VcpuExitReason::Stopped));
        }
        if vm.is_paused() {
            let mut ctl = v.ctl();
            // Checked again under `ctl`, which `resume_vm` takes after
            // clearing the flag: a pause never outlives its resume.
            if vm.is_paused() {
                v.set_state(&mut ctl, RunState::Paused);
                return Next::Stop(Stop::Blocked);
            }
        }
        let mut look = *last == VcpuStep::Start;
        loop {
            // A slice used up is a quantum end, even if a kick came too
            // (the kick then needed no signal: `kick_needs_signal`).
            if now_ns() >= slot.quantum_end() {
                return Next::Stop(Stop::Quantum);
            }
            if slot.kick_pending.load(Ordering::Acquire) {
                return Next::Stop(Stop::Preempted);
            }
            irq::sync_cr8(vm.irq.as_ref(), runner);
            if look || vm.irq.has_pending_hint(v.index) {
                if let Some(stop) = self.take_cpu_events(vm, v, runner) {
                    return Next::Stop(stop);
                }
                // A second injection before the entry finds KVM holding
                // the first (EEXIST): it asks for an interrupt window.
                match irq::deliver_interrupt(vm.irq.as_ref(), runner, last) {
                    Ok(Some(vector)) => self.record(|| Event::Inject {
                        cpu: cpu16(slot.host),
                        vcpu: v.trace_ref(),
                        vector,
                    }),
                    Ok(None) => {}
                    Err(r) => return Next::Stop(Stop::Exit(r)),
                }
            }
            // Entering: a notification or kick from now on signals this
            // thread; one that came since the looks above did not.
            if slot.try_enter() {
                return Next::Enter;
            }
            look = true;
        }
    }

    /// Act on INIT, start-up IPIs and NMIs for a dispatched vCPU.
    fn take_cpu_events(
        &self,
        vm: &EngineVm,
        v: &EngineVcpu,
        runner: &mut VcpuRunner,
    ) -> Option<Stop> {
        let mut ctl = v.ctl();
        let taken = vm.irq.take_events(v.index);
        ctl.events.merge(taken);
        if ctl.events.init {
            // INIT: the processor waits for a start-up IPI (the interrupt
            // controller reset its local APIC already).
            ctl.events = CpuEvents::default();
            ctl.awaiting_sipi = true;
            v.set_state(&mut ctl, RunState::WaitForSipi);
            return Some(Stop::Blocked);
        }
        if ctl.awaiting_sipi {
            let Some(vector) = ctl.events.sipi.take() else {
                v.set_state(&mut ctl, RunState::WaitForSipi);
                return Some(Stop::Blocked);
            };
            if let Err(r) = runner.start_up(vector) {
                return Some(Stop::Exit(r));
            }
            ctl.awaiting_sipi = false;
        }
        // A start-up IPI to a running processor is ignored (SDM).
        ctl.events.sipi = None;
        // One KVM_NMI each: KVM delivers the first and holds the second
        // until the guest's IRET from the first (its NMI window).
        for _ in 0..std::mem::take(&mut ctl.events.nmis) {
            if let Err(r) = runner.inject_nmi() {
                return Some(Stop::Exit(r));
            }
        }
        None
    }

    /// The executor of `v` gives its CPU `slot` back for `stop`: record the
    /// new state and return what to tell the scheduler.
    pub(crate) fn end_turn(&self, slot: &CpuSlot, v: &EngineVcpu, stop: Stop) -> StopReason {
        RUNNING_ENTITY.set(None);
        let mut ctl = v.ctl();
        self.record(|| Event::Stop {
            cpu: cpu16(slot.host),
            vcpu: v.trace_ref(),
            why: match (&stop, ctl.state) {
                (Stop::Quantum, _) => StopWhy::Quantum,
                (Stop::Preempted, _) => StopWhy::Preempted,
                (Stop::Yielded, _) => StopWhy::Yielded,
                (Stop::Blocked, RunState::WaitForSipi) => StopWhy::WaitSipi,
                (Stop::Blocked, RunState::Paused) => StopWhy::Paused,
                (Stop::Blocked, _) => StopWhy::Halted,
                (Stop::Exit(_), _) => StopWhy::Exited,
            },
            thread_cpu_ns: super::clock::thread_cpu_ns(),
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
            // The blocked state is already set.
            Stop::Blocked => StopReason::Blocked,
            Stop::Exit(r) => {
                if r != VcpuExitReason::Stopped {
                    ctl.exit_reason = Some(r);
                }
                v.set_state(&mut ctl, RunState::Exited);
                StopReason::Blocked
            }
        }
    }

    /// `slot` stopped running what it ran, for `reason` (after `halted_ns`
    /// of its turn halted inside KVM, not run time: `kvm-irqchip`): ask
    /// the scheduler for the next vCPU and make it the owner (Running). Call with the
    /// slot's `owner` lock held; after releasing it, wake the next vCPU's
    /// thread ([`EngineVcpu::announce`]) and kick the returned CPUs. Waking
    /// it with the lock held would invite the host to switch to that thread
    /// at once (both are bound to this CPU) while this one still holds the
    /// lock: every kick of this CPU would then wait for a host time slice.
    pub(crate) fn reschedule_locked(
        &self,
        slot: &CpuSlot,
        owner: &mut Option<Arc<EngineVcpu>>,
        reason: StopReason,
        halted_ns: u64,
    ) -> (Option<Arc<EngineVcpu>>, Vec<CpuId>) {
        slot.kick_pending.store(false, Ordering::Release);
        let mut turn = slot.lock_turn();
        let now = now_ns();
        let mut reason = reason;
        let mut kicks = Vec::new();
        let mut next = None;
        let mut recheck = None;
        let mut halted_ns = halted_ns;
        // An entity the engine does not know (a bug) must not leave the
        // scheduler believing the CPU runs it: report it blocked and ask
        // again (a bounded number of times). Under the ranked dispatch so
        // is a vCPU taken off while queued (its VM paused or stopping):
        // nothing else tells the scheduler.
        let ranked = self.dispatch_kind().ranked();
        for _ in 0..PICK_ATTEMPTS {
            let d = self
                .scheduler()
                .schedule_after_halts(slot.id, now, reason, std::mem::take(&mut halted_ns))
                .unwrap_or_else(|e| {
                    log::error!("schedule(CPU {}): {e}", slot.host);
                    Dispatch::idle()
                });
            log::trace!(
                "schedule(cpu {}, {reason:?}) -> {:?} for {} ns, kicks {:?}",
                slot.host,
                d.entity,
                d.quantum,
                d.kicks
            );
            kicks.extend(d.kicks);
            recheck = d.recheck_at;
            let Some(e) = d.entity else { break };
            match self.vcpu_of(e) {
                Some(v) if ranked && v.state() != RunState::Ready => {
                    // Paused, stopping, or halted while it waited.
                    log::trace!("{} taken off while queued: blocked", v.name);
                    reason = StopReason::Blocked;
                }
                Some(v) => {
                    next = Some((v, d.quantum));
                    break;
                }
                None => {
                    log::error!(
                        "the scheduler dispatched unknown entity {e:?} on CPU {}",
                        slot.host
                    );
                    reason = StopReason::Blocked;
                }
            }
        }
        let (next, quantum) = match next {
            Some((v, q)) => (Some(v), q),
            None => (None, 0),
        };
        if next.is_none() || recheck.is_some() {
            self.arm_recheck(slot.id, recheck.filter(|_| next.is_none()));
        }
        self.record(|| match &next {
            Some(n) => Event::Dispatch {
                cpu: cpu16(slot.host),
                vcpu: n.trace_ref(),
                quantum_ns: quantum,
                priority: self.scheduler().running_priority(slot.id),
                by_waker: reason == StopReason::Idle && self.dispatch_kind().uses_vcpu_threads(),
            },
            None => Event::Idle {
                cpu: cpu16(slot.host),
            },
        });
        match &next {
            Some(n) => slot.begin_turn(
                &mut turn,
                Some((n.entity, now)),
                now.saturating_add(quantum),
            ),
            None => slot.begin_turn(&mut turn, None, 0),
        }
        if ranked {
            // The slice's end is the timer thread's (no vCPU thread leaves
            // KVM_RUN for it), and counts its owner's CPU time from here.
            // An owner nothing waits behind is looked at less often: its
            // quantum end would re-pick it (a wake that queues behind it
            // brings the end back, `Engine::queued_behind`).
            let end = if self.scheduler().has_waiting(slot.id) {
                now.saturating_add(quantum)
            } else {
                now.saturating_add(quantum.max(crate::ranked::LONE_SLICE_NS))
            };
            if next.is_some() && end > now.saturating_add(quantum) {
                slot.set_quantum_end_locked(&mut turn, end);
            }
            // The owner's own quantum timer takes its thread out of KVM_RUN
            // at the end (one exit on its CPU, no other thread woken); the
            // stopped owner's no longer fires.
            let again =
                matches!((owner.as_ref(), next.as_ref()), (Some(o), Some(n)) if Arc::ptr_eq(o, n));
            if !again {
                if let Some(t) = owner.as_ref().and_then(|o| o.quantum_timer.get()) {
                    t.disarm();
                }
            }
            if let Some(t) = next.as_ref().and_then(|n| n.quantum_timer.get()) {
                slot.arm_turn_locked(&mut turn, t);
            }
            if let Some(n) = &next {
                if let Some(t) = crate::rank::thread_cpu_ns_of(n.thread_id()) {
                    n.cpu_seen.store(t, Ordering::Release);
                }
            }
        }
        drop(turn);
        if let Some(n) = &next {
            let mut ctl = n.ctl();
            if ctl.state == RunState::Exited {
                // Its VM finished it after the pick (`Engine::finish_vm`
                // removes the entity, then marks the vCPU Exited under
                // `ctl`): the scheduler has it running here, removed. A
                // pick for Blocked frees it and finds what runs instead.
                drop(ctl);
                if let Some(t) = n.quantum_timer.get() {
                    t.disarm();
                }
                log::debug!("{} exited after its pick on CPU {}", n.name, slot.host);
                let (next, more) = self.reschedule_locked(slot, owner, StopReason::Blocked, 0);
                kicks.extend(more);
                return (next, kicks);
            }
            ctl.ran_on.insert(slot.host);
            if let Some(from) = ctl.last_cpu.filter(|c| *c != slot.host) {
                self.record(|| Event::Migrate {
                    vcpu: n.trace_ref(),
                    from: cpu16(from),
                    to: cpu16(slot.host),
                });
            }
            ctl.last_cpu = Some(slot.host);
            if ranked {
                // Bound and ranked by the caller (`Engine::enact`).
                slot.executor.store(n.thread_id(), Ordering::Release);
            } else if self.dispatch_kind().uses_vcpu_threads() {
                let tid = n.thread_id();
                if tid != 0 && ctl.pinned_to != Some(slot.host) {
                    let one: HostCpuSet = [slot.host].into_iter().collect();
                    match pin_thread(tid, &one) {
                        Ok(()) => ctl.pinned_to = Some(slot.host),
                        Err(e) => log::warn!("{}: cannot bind to CPU {}: {e}", n.name, slot.host),
                    }
                }
                slot.executor.store(tid, Ordering::Release);
            }
            if ctl.state == RunState::HaltedInKvm {
                // Ranked: it halted in KVM while queued, after the pick
                // above found it Ready (the agent's `halted_while_queued`
                // holds only its own lock). It owns the CPU halted; the
                // agent's next look finds an owner blocking in KVM and
                // gives the CPU back, as for any owner that halts.
                n.set_state_quietly(&mut ctl, RunState::Ready);
            }
            n.dispatched_at.store(now, Ordering::Relaxed);
            n.set_state_quietly(&mut ctl, RunState::Running { cpu: slot.id });
        } else if self.dispatch_kind().uses_vcpu_threads() {
            slot.executor.store(0, Ordering::Release);
        }
        slot.owner_vm
            .store(next.as_ref().map_or(0, |n| n.vm + 1), Ordering::Release);
        slot.shared_turn.store(false, Ordering::Relaxed);
        *owner = next.clone();
        (next, kicks)
    }

    /// Make `v` runnable in the scheduler (its state is already Ready) and
    /// carry out the placement's kick.
    pub(crate) fn wake(&self, v: &EngineVcpu) {
        // Woken from a vCPU's own exit (an IPI it sent): tell the policy
        // who woke it, so it may place the pair near each other.
        let waker = RUNNING_ENTITY.get().filter(|w| *w != v.entity);
        let d = match waker {
            Some(w) => self
                .scheduler()
                .wake_by(v.entity, w, now_ns())
                .or_else(|_| self.scheduler().wake(v.entity, now_ns())),
            None => self.scheduler().wake(v.entity, now_ns()),
        };
        self.carry_out_wake(v, d);
    }

    /// `wake`, for a vCPU found running already (the host kernel ran it
    /// at KVM's wake-up of it; see `VcpuScheduler::wake_found_running`).
    pub(crate) fn wake_found_running(&self, v: &EngineVcpu) {
        let d = self.scheduler().wake_found_running(v.entity, now_ns());
        self.carry_out_wake(v, d);
    }

    /// The wake decision `d` for `v`: its kick or its cut, traced.
    fn carry_out_wake(
        &self,
        v: &EngineVcpu,
        d: Result<Option<vcpu_sched::WakeDecision>, vcpu_sched::SchedError>,
    ) {
        log::trace!("wake {} ({:?}) -> {d:?}", v.name, v.entity);
        let host = |cpu| {
            self.slot(cpu)
                .map_or(crate::trace::record::NONE16, |s| cpu16(s.host))
        };
        match d {
            Ok(Some(d)) if d.kick => {
                self.record(|| Event::Wake {
                    vcpu: v.trace_ref(),
                    cpu: Some(host(d.cpu)),
                    kick: true,
                    cut: false,
                });
                self.kick_cpu(d.cpu)
            }
            Ok(Some(d)) => {
                // Queued behind the runner, whose slice the policy cut:
                // its timer fires earlier (no exit before then).
                let mut cut_now = false;
                if let (Some(cut), Some(slot)) = (d.shorten_quantum, self.slot(d.cpu)) {
                    cut_now = slot.cut_quantum(&cut);

                    log::trace!("cut cpu {} to {} ns: {cut_now}", slot.host, cut.end);
                    if cut_now {
                        self.record(|| Event::Cut {
                            cpu: cpu16(slot.host),
                            woken: v.trace_ref(),
                            end_in_ns: cut.end.saturating_sub(super::clock::now_ns()),
                        });
                    }
                }
                if !cut_now && self.dispatch_kind().ranked() {
                    self.queued_behind(d.cpu);
                }
                self.record(|| Event::Wake {
                    vcpu: v.trace_ref(),
                    cpu: Some(host(d.cpu)),
                    kick: false,
                    cut: cut_now,
                });
            }
            Ok(None) => self.record(|| Event::Wake {
                vcpu: v.trace_ref(),
                cpu: None,
                kick: false,
                cut: false,
            }),
            Err(e) => log::debug!("wake {}: {e}", v.name),
        }
        if self.dispatch_kind().ranked() {
            // Queued (a filler) or dispatched: its thread's rank and CPUs.
            self.enact(v);
        }
    }

    /// The scheduler says `cpu` must call `schedule`: interrupt the vCPU it
    /// runs, or, if it is idle, give it work (threads: dispatch here, on
    /// the caller's thread; workers: wake its worker).
    pub(crate) fn kick_cpu(&self, cpu: CpuId) {
        if self.dispatch_kind().ranked() {
            self.ranked_kick(cpu);
            return;
        }
        let Some(slot) = self.slot(cpu) else { return };
        if !slot.set_kick_pending() {
            // One kick per preemption: the pending one's `schedule` call
            // (not made yet: it clears the flag first) sees this wake too.
            log::trace!("kick cpu {}: already pending", slot.host);
            return;
        }
        let mut owner = slot.lock_owner();
        if owner.is_some() {
            drop(owner);
            if !slot.kick_needs_signal(now_ns(), KICK_SLACK_NS) {
                // Out of the guest (it sees the kick before entering) or
                // at the end of its slice (its own timer ends it).
                log::trace!("kick cpu {}: busy, seen without a signal", slot.host);
                return;
            }
            self.record(|| Event::Kick {
                cpu: cpu16(slot.host),
                busy: true,
            });
            let signalled = slot.signal_executor();
            log::trace!(
                "kick cpu {}: busy, executor signalled: {signalled}",
                slot.host
            );
            return;
        }
        self.record(|| Event::Kick {
            cpu: cpu16(slot.host),
            busy: false,
        });
        log::trace!("kick cpu {}: idle", slot.host);
        match self.dispatch_kind() {
            DispatchKind::Workers => {
                slot.kicked_idle_at.store(now_ns(), Ordering::Relaxed);
                slot.wake_idle();
            }
            DispatchKind::Threads | DispatchKind::KvmIrqchip | DispatchKind::Ranked => {
                let (next, kicks) = self.reschedule_locked(slot, &mut owner, StopReason::Idle, 0);
                drop(owner);
                if let Some(n) = next {
                    n.announce();
                }
                for k in kicks {
                    self.kick_cpu(k);
                }
            }
        }
    }

    /// The interrupt controller posted something for `v`.
    pub(crate) fn notify_vcpu(&self, vm: &EngineVm, v: &EngineVcpu) {
        let mut ctl = v.ctl();
        if let RunState::Running { cpu } = ctl.state {
            drop(ctl);
            // Out of KVM_RUN, so the interrupt is injected at once —
            // unless this is its own executor (a self-IPI, an EOI),
            // which looks at the controller before the next entry. NMI,
            // INIT and SIPI stay in the controller, whose pending hint
            // `next_entry` checks: taken here, they would wait for the
            // vCPU's next turn.
            if let Some(s) = self.slot(cpu) {
                // Out of the guest, it looks before its next entry.
                if s.executor.load(Ordering::Acquire) != crate::signals::current_tid()
                    && s.post_look()
                {
                    self.record(|| Event::Kick {
                        cpu: cpu16(s.host),
                        busy: true,
                    });
                    s.signal_executor();
                }
            }
            return;
        }
        let taken = vm.irq.take_events(v.index);
        ctl.events.merge(taken);
        match ctl.state {
            RunState::Halted { interruptible }
                if irq::halt_is_over(vm.irq.as_ref(), v.index, &ctl.events, interruptible) =>
            {
                v.set_state(&mut ctl, RunState::Ready);
                drop(ctl);
                self.wake(v);
            }
            RunState::WaitForSipi => {
                ctl.events.init = false; // already waiting
                if ctl.events.sipi.is_some() {
                    v.set_state(&mut ctl, RunState::Ready);
                    drop(ctl);
                    self.wake(v);
                }
            }
            RunState::Ready if vm.coschedule => {
                drop(ctl);
                self.direct_yield(vm, v);
            }
            _ => {}
        }
    }

    /// Relaxed co-scheduling: the vCPU this thread runs sent an IPI to
    /// its sibling `v`, which waits preempted (Ready): `v` notes the
    /// sender, which waits for its answer (the spin watch gives the
    /// sender `v`'s turn once `v` has had time to answer), and the
    /// scheduler hears of it (`pass_turn`); if it takes the pass, this
    /// turn ends before the next entry so that the sender's CPU goes to
    /// `v`. One thread-local read when the IPI comes from no vCPU of this
    /// thread.
    fn direct_yield(&self, vm: &EngineVm, v: &EngineVcpu) {
        let Some(from) = RUNNING_ENTITY.get().filter(|w| *w != v.entity) else {
            return;
        };
        // Only a VM wider than its CPUs gives turns to a sender.
        let sender = vm.wide.then(|| vm.vcpus.iter().find(|w| w.entity == from));
        if let Some(sender) = sender.flatten() {
            v.answer_to
                .store(sender.index as usize + 1, Ordering::Release);
        }
        if let Ok(true) = self.scheduler().pass_turn(from, v.entity, now_ns()) {
            YIELD_NOW.set(true);
        }
    }
}
