//! Dispatch by gated threads: one thread per vCPU, parked until the
//! scheduler dispatches its vCPU, then bound to that CPU.
//!
//! The CPU travels from thread to thread: the thread whose vCPU stops calls
//! `schedule` for its CPU itself, marks the next vCPU Running (binding that
//! vCPU's thread to the CPU if it moved) and parks; the next thread wakes on
//! the CPU and enters the guest. When the scheduler picks the same vCPU
//! again, its thread goes straight back into the guest: no switch at all.
//! An idle CPU has no thread; a wake that kicks it dispatches onto it from
//! the waker's thread ([`Engine::kick_cpu`]).

use super::clock::{now_ns, thread_cpu_ns, HaltPoll, QuantumTimer};
use super::dispatch::{Next, Stop};
use super::kvm_halts::{ask_host_slice, KvmBlocking, SHORT_HOST_SLICE_NS};
use super::ranked::RankedGate;
use super::trace_points::cpu16;
use super::vcpu_state::{EngineVcpu, RunState, VcpuCtl};
use super::{Engine, EngineError, EngineVm};
use crate::host_cpus::{pin_current_thread, HostCpuSet};
use crate::signals::current_tid;
use crate::spin_watch::{Look, SpinWatch};
use crate::trace::Event;
use crate::vcpu::{
    spawn_vcpu_thread, GateDecision, VcpuExitReason, VcpuGate, VcpuOutcome, VcpuRunner, VcpuStep,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vcpu_sched::{CpuId, StopReason};

/// The current turn of a dispatched vCPU (its slice ends at its CPU's
/// `quantum_end`).
#[derive(Debug, Clone, Copy)]
struct Turn {
    cpu: CpuId,
    /// `kvm-irqchip`: KVM's `halt_wait_ns` of the vCPU when the turn began
    /// (the halts inside KVM during the turn are not run time).
    halt_wait_ns: Option<u64>,
}

struct ThreadGate {
    engine: Arc<Engine>,
    vm: Arc<EngineVm>,
    vcpu: Arc<EngineVcpu>,
    turn: Option<Turn>,
    timer: Option<Arc<QuantumTimer>>,
    poll: HaltPoll,
    /// KVM's local APIC serves the VM (`kvm-irqchip` dispatch).
    kvm: bool,
    /// The thread entered KVM_RUN without a turn, the vCPU halted inside
    /// KVM (`RunState::HaltedInKvm`).
    asleep_in_kvm: bool,
    /// The thread asked the host kernel for a short slice (`kvm-irqchip`).
    short_slice: bool,
    /// The spin watch of a VM with relaxed co-scheduling
    /// (`crate::spin_watch`).
    spin_watch: Option<SpinWatch>,
}

/// What a thread that slept in KVM's halt does once KVM_RUN returns.
enum AfterKvmSleep {
    /// The guest is still halted (a stray signal): back into KVM_RUN.
    SleepAgain,
    /// Woken (or paused, or stopping): wait for the scheduler.
    Park,
    /// The vCPU failed.
    Exit(VcpuExitReason),
}

/// Spawn the thread of `v`.
pub fn spawn(
    engine: &Arc<Engine>,
    vm: &Arc<EngineVm>,
    v: &Arc<EngineVcpu>,
    runner: VcpuRunner,
) -> Result<JoinHandle<VcpuOutcome>, EngineError> {
    if engine.dispatch_kind().in_kernel_lapic() {
        // Here, not on the vCPU thread, whose system calls a VMM may
        // confine as it starts.
        let blocking = open_kvm_blocking(v, &runner)
            .map_err(|r| EngineError::Thread(std::io::Error::other(r.to_string())))?;
        let _ = v.kvm_blocking.set(blocking);
    }
    if engine.dispatch_kind().ranked() {
        let gate = RankedGate::new(engine, vm, v);
        return Ok(spawn_vcpu_thread(&vm.name, runner, gate, |_| {})?);
    }
    let gate = ThreadGate::new(engine, vm, v);
    Ok(spawn_vcpu_thread(&vm.name, runner, gate, |_| {})?)
}

/// Open KVM's statistics of `v` (`kvm-irqchip` dispatch).
pub(crate) fn open_kvm_blocking(
    v: &EngineVcpu,
    runner: &VcpuRunner,
) -> Result<KvmBlocking, VcpuExitReason> {
    KvmBlocking::open(runner.vcpu_fd()).map_err(|e| {
        log::error!("{}: KVM_GET_STATS_FD: {e}", v.name);
        VcpuExitReason::Unhandled {
            exit: format!("kvm-irqchip needs KVM's per-vCPU statistics: {e}"),
        }
    })
}

/// The gate of one vCPU whose thread the embedding VMM owns
/// ([`Engine::add_vm_gated`]): hand it to
/// [`run_vcpu_loop`](crate::vcpu::run_vcpu_loop) on that thread, with the
/// vCPU's [`VcpuRunner`]. Before every KVM_RUN it parks the thread until
/// the scheduler dispatches the vCPU (binding the thread to the CPU it is
/// given), injects what the interrupt controller has pending, and gives
/// the CPU back when the vCPU's slice ends, it is preempted, halts or
/// yields. It answers [`GateDecision::Exit`] once the VM is finished
/// ([`Engine::finish_vm`]) or the vCPU failed.
///
/// The thread must not block the kick signal
/// ([`crate::signals::kick_signal`]): the quantum timer and the
/// scheduler's kicks take the vCPU out of KVM_RUN with it.
pub struct EngineGate {
    gate: Gate,
    vcpu: Arc<EngineVcpu>,
    started: bool,
}

/// The mechanism behind an [`EngineGate`].
enum Gate {
    Threads(ThreadGate),
    Ranked(RankedGate),
}

impl EngineGate {
    pub(crate) fn new(engine: &Arc<Engine>, vm: &Arc<EngineVm>, v: &Arc<EngineVcpu>) -> Self {
        let gate = if engine.dispatch_kind().ranked() {
            Gate::Ranked(RankedGate::new(engine, vm, v))
        } else {
            Gate::Threads(ThreadGate::new(engine, vm, v))
        };
        EngineGate {
            gate,
            vcpu: v.clone(),
            started: false,
        }
    }

    /// The index of the vCPU this gate is for (give it the runner of the
    /// same index).
    pub fn index(&self) -> u32 {
        self.vcpu.index
    }
}

impl VcpuGate for EngineGate {
    fn next(&mut self, runner: &mut VcpuRunner, last: VcpuStep) -> GateDecision {
        if !self.started {
            // The kick handler makes KVM_RUN return at once when a kick
            // lands just before the entry (`signals`).
            crate::signals::set_current_kvm_run(runner.kvm_run_ptr());
            self.started = true;
        }
        let d = match &mut self.gate {
            Gate::Threads(g) => g.next(runner, last),
            Gate::Ranked(g) => g.next(runner, last),
        };
        if let GateDecision::Exit(reason) = &d {
            crate::signals::set_current_kvm_run(std::ptr::null_mut());
            self.started = false;
            *self.vcpu.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(VcpuOutcome {
                reason: reason.clone(),
                stats: runner.stats,
                thread_sched: crate::stats::VcpuSchedStats::from_host_thread(current_tid()),
            });
        }
        d
    }
}

/// The outcome the gate of `v` left ([`EngineGate`]), waiting up to
/// `timeout` for its thread to leave the loop.
pub(crate) fn take_outcome(v: &EngineVcpu, timeout: Duration) -> VcpuOutcome {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(o) = v.outcome.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return o;
        }
        if Instant::now() >= deadline {
            log::error!(
                "{}: its thread did not leave its gate within {timeout:?}",
                v.name
            );
            return lost_outcome("vCPU thread still in its gate at VM stop");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The outcome of a vCPU whose thread gave none (`exit` says why).
fn lost_outcome(exit: &str) -> VcpuOutcome {
    VcpuOutcome {
        reason: VcpuExitReason::Unhandled { exit: exit.into() },
        stats: Default::default(),
        thread_sched: Default::default(),
    }
}

/// Join a stopping VM's vCPU threads (each with its vCPU's name), all
/// within `timeout`. A thread still running then (a bug that keeps it in
/// its loop: a stopping VM's threads leave at their next exit) is left
/// detached and reported as such, so that one stuck thread cannot hold
/// the VMM, and every other VM's results, for ever. It keeps what it uses
/// (its VM's memory and descriptors are shared, counted references) until
/// it ends or the process does.
pub(crate) fn join_within(
    threads: Vec<(String, JoinHandle<VcpuOutcome>)>,
    timeout: Duration,
) -> Vec<VcpuOutcome> {
    let deadline = Instant::now() + timeout;
    threads
        .into_iter()
        .map(|(name, h)| {
            while !h.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(200));
            }
            if !h.is_finished() {
                log::error!(
                    "{name}: its thread did not end within {timeout:?} of the VM's stop; left running"
                );
                return lost_outcome("vCPU thread still running at VM stop");
            }
            h.join()
                .unwrap_or_else(|_| lost_outcome("vCPU thread panicked"))
        })
        .collect()
}

impl ThreadGate {
    fn new(engine: &Arc<Engine>, vm: &Arc<EngineVm>, v: &Arc<EngineVcpu>) -> Self {
        ThreadGate {
            engine: engine.clone(),
            vm: vm.clone(),
            vcpu: v.clone(),
            turn: None,
            timer: None,
            poll: engine.halt_poll(),
            kvm: engine.dispatch_kind().kvm_irqchip(),
            asleep_in_kvm: false,
            short_slice: false,
            spin_watch: None,
        }
    }

    /// `kvm-irqchip`: have the vCPU's KVM statistics open (the watcher
    /// reads `blocking` there); true if an application processor must wait for
    /// its start-up IPI inside KVM_RUN.
    fn start_kvm(&mut self, runner: &VcpuRunner) -> Result<bool, VcpuExitReason> {
        if self.vcpu.kvm_blocking.get().is_none() {
            // An embedder's thread (`Engine::add_vm` opened it already).
            let blocking = open_kvm_blocking(&self.vcpu, runner)?;
            let _ = self.vcpu.kvm_blocking.set(blocking);
        }
        Ok(self.vcpu.state() == RunState::HaltedInKvm)
    }

    /// KVM_RUN returned to a thread that entered it without a turn, its
    /// vCPU halted inside KVM: the watcher found it woken by KVM (and woke
    /// it in the scheduler: Ready or already Running), the woken guest
    /// exited before the watcher looked, the VM is pausing or stopping, or
    /// a stray signal came.
    fn after_kvm_sleep(&self, runner: &VcpuRunner, last: &VcpuStep) -> AfterKvmSleep {
        let v = &self.vcpu;
        let mut ctl = v.ctl();
        let fail = |ctl: &mut VcpuCtl, r: VcpuExitReason| {
            if r != VcpuExitReason::Stopped {
                ctl.exit_reason = Some(r.clone());
            }
            v.set_state(ctl, RunState::Exited);
            AfterKvmSleep::Exit(r)
        };
        if let VcpuStep::Fatal(r) = last {
            return fail(&mut ctl, r.clone());
        }
        if ctl.state != RunState::HaltedInKvm || self.vm.handler.stopping() {
            return AfterKvmSleep::Park;
        }
        if self.vm.is_paused() {
            v.set_state(&mut ctl, RunState::Paused);
            return AfterKvmSleep::Park;
        }
        match runner.halted_in_kvm() {
            Ok(true) => AfterKvmSleep::SleepAgain,
            Ok(false) => {
                self.engine.woken_in_kvm(v, ctl);
                AfterKvmSleep::Park
            }
            Err(r) => fail(&mut ctl, r),
        }
    }

    /// Park until dispatched (Some) or the VM is gone (None).
    fn wait_dispatch(&mut self) -> Option<Turn> {
        let v = &self.vcpu;
        let settled = |c: &VcpuCtl| matches!(c.state, RunState::Running { .. } | RunState::Exited);
        let ctl = v.ctl();
        let parked = !settled(&ctl);
        if parked {
            self.engine.record(|| Event::Park {
                vcpu: v.trace_ref(),
            });
        }
        let ctl = v.wait_until(ctl, settled);
        let RunState::Running { cpu } = ctl.state else {
            return None;
        };
        let pinned = ctl.pinned_to;
        drop(ctl);
        let slot = self.engine.slot(cpu)?;
        if pinned != Some(slot.host) {
            // Dispatched before this thread announced itself: bind here.
            let one: HostCpuSet = [slot.host].into_iter().collect();
            match pin_current_thread(&one) {
                Ok(()) => v.ctl().pinned_to = Some(slot.host),
                Err(e) => log::warn!("{}: cannot bind to CPU {}: {e}", v.name, slot.host),
            }
        }
        slot.executor.store(current_tid(), Ordering::Release);
        self.engine.record(|| Event::Unpark {
            cpu: cpu16(slot.host),
            vcpu: v.trace_ref(),
            thread_cpu_ns: thread_cpu_ns(),
        });
        Some(Turn {
            cpu,
            halt_wait_ns: self.halt_wait_ns(),
        })
    }

    /// `kvm-irqchip`: the time the vCPU has slept in KVM's halts so far.
    fn halt_wait_ns(&self) -> Option<u64> {
        if !self.kvm {
            return None;
        }
        self.vcpu.kvm_blocking.get()?.halt_wait_ns()
    }

    /// Arm the quantum timer for turn `t` (at its CPU's quantum end, which
    /// wakes may bring forward while it runs).
    fn arm(&self, t: &Turn) {
        if let (Some(timer), Some(slot)) = (&self.timer, self.engine.slot(t.cpu)) {
            slot.arm_turn(timer);
        }
        if let Some(w) = &self.spin_watch {
            w.turn_started(&self.vm, &self.vcpu);
        }
    }

    fn disarm(&self, t: &Turn) {
        if let (Some(timer), Some(slot)) = (&self.timer, self.engine.slot(t.cpu)) {
            slot.disarm_turn(timer);
        }
        if let Some(w) = &self.spin_watch {
            w.turn_ended();
        }
    }
}

impl VcpuGate for ThreadGate {
    fn next(&mut self, runner: &mut VcpuRunner, last: VcpuStep) -> GateDecision {
        if last == VcpuStep::Start {
            self.vcpu.tid.store(current_tid(), Ordering::Release);
            match QuantumTimer::for_current_thread() {
                Ok(t) => self.timer = Some(Arc::new(t)),
                Err(e) => {
                    // Without it a vCPU would keep its CPU for ever.
                    log::error!("{}: {e}", self.vcpu.name);
                    return GateDecision::Exit(VcpuExitReason::Unhandled {
                        exit: e.to_string(),
                    });
                }
            }
        }
        if last == VcpuStep::Start && !self.kvm {
            // Under Pacer's own local APIC only: a halt is then an exit,
            // never a look.
            self.spin_watch = SpinWatch::start(&self.vm, &self.vcpu, runner);
        }
        if last == VcpuStep::Start && self.kvm {
            match self.start_kvm(runner) {
                Ok(true) => {
                    self.asleep_in_kvm = true;
                    return GateDecision::Run;
                }
                Ok(false) => {}
                Err(r) => return GateDecision::Exit(r),
            }
        }
        if std::mem::take(&mut self.asleep_in_kvm) {
            match self.after_kvm_sleep(runner, &last) {
                AfterKvmSleep::SleepAgain => {
                    self.asleep_in_kvm = true;
                    return GateDecision::Run;
                }
                AfterKvmSleep::Park => {}
                AfterKvmSleep::Exit(r) => return GateDecision::Exit(r),
            }
        }
        let mut last = last;
        loop {
            let Some(turn) = self.turn else {
                match self.wait_dispatch() {
                    Some(t) => {
                        self.arm(&t);
                        self.turn = Some(t);
                        last = VcpuStep::Start;
                        continue;
                    }
                    None => {
                        let reason = self.vcpu.ctl().exit_reason.clone();
                        return GateDecision::Exit(reason.unwrap_or(VcpuExitReason::Stopped));
                    }
                }
            };
            let Some(slot) = self.engine.slot(turn.cpu) else {
                return GateDecision::Exit(VcpuExitReason::Stopped);
            };
            // Under KVM's local APIC a halt shows only as the guest's
            // state at an exit for a signal (quantum end, kick, watcher).
            let halted_in_kvm = self.kvm
                && last == VcpuStep::Interrupted
                && match runner.halted_in_kvm() {
                    Ok(h) => h,
                    Err(r) => {
                        last = VcpuStep::Fatal(r);
                        false
                    }
                };
            let look = self
                .spin_watch
                .as_ref()
                .filter(|_| last == VcpuStep::Interrupted)
                .and_then(|w| w.look(&self.engine, &self.vm, &self.vcpu, runner, slot));
            if let Some(look) = look {
                // Pause-loop exiting in software, or a turn given to the
                // sender of an IPI: a yield, as if the guest had written
                // the yield port.
                match look {
                    Look::Spun => runner.stats.spin_yields += 1,
                    Look::GaveBack => runner.stats.turns_given_back += 1,
                }
                last = VcpuStep::Yielded;
            }
            let stop = if halted_in_kvm {
                slot.left_guest();
                let mut ctl = self.vcpu.ctl();
                self.vcpu.set_state(&mut ctl, RunState::HaltedInKvm);
                Stop::Blocked
            } else {
                match self
                    .engine
                    .next_entry(&self.vm, &self.vcpu, slot, runner, &last)
                {
                    Next::Enter => return GateDecision::Run,
                    Next::Stop(stop) => stop,
                }
            };
            self.disarm(&turn);
            let exit = match &stop {
                Stop::Exit(r) => Some(r.clone()),
                _ => None,
            };
            if let Some(w) = &self.spin_watch {
                w.stopped(&self.vm, &self.vcpu, runner, &stop, &last);
            }
            let reason = self.engine.end_turn(slot, &self.vcpu, stop);
            // Under KVM's local APIC the vCPU may have halted (and been
            // woken by KVM) inside this turn: not run time.
            let halted_ns = match (turn.halt_wait_ns, self.halt_wait_ns()) {
                (Some(a), Some(b)) => b.saturating_sub(a),
                _ => 0,
            };
            let mut owner = slot.lock_owner();
            let (next, kicks) = self
                .engine
                .reschedule_locked(slot, &mut owner, reason, halted_ns);
            drop(owner);
            if let Some(n) = &next {
                n.announce();
            }
            for k in kicks {
                self.engine.kick_cpu(k);
            }
            self.turn = None;
            let idle = next.is_none();
            if next.is_some_and(|n| Arc::ptr_eq(&n, &self.vcpu)) {
                // Picked again: straight back into the guest.
                self.engine.record(|| Event::Unpark {
                    cpu: cpu16(slot.host),
                    vcpu: self.vcpu.trace_ref(),
                    thread_cpu_ns: thread_cpu_ns(),
                });
                let t = Turn {
                    cpu: turn.cpu,
                    halt_wait_ns: self.halt_wait_ns(),
                };
                self.arm(&t);
                self.turn = Some(t);
                last = VcpuStep::Start;
                continue;
            }
            if let Some(r) = exit {
                return GateDecision::Exit(r);
            }
            if self.kvm {
                // A vCPU that halts asks the host kernel for a short slice,
                // so KVM's wake-up of it preempts a CPU-bound vCPU there at
                // once; one that used up its quantum gives it back.
                let short = match reason {
                    StopReason::QuantumEnd => false,
                    _ if halted_in_kvm => true,
                    _ => self.short_slice,
                };
                if short != self.short_slice {
                    self.short_slice = short;
                    ask_host_slice(short.then_some(SHORT_HOST_SLICE_NS));
                }
            }
            if halted_in_kvm {
                // Back into KVM_RUN to sleep where KVM can wake it.
                self.asleep_in_kvm = true;
                return GateDecision::Run;
            }
            if idle {
                // The CPU went idle with this vCPU blocked: poll a while
                // for the wake-up before sleeping (the thread is still on
                // the CPU, so a dispatch here needs no futex wake). Only
                // here: a CPU with anything queued is not idle, and the
                // poll ends as soon as another vCPU is dispatched on it.
                let since = now_ns();
                let v = &self.vcpu;
                if self.poll.window_ns > 0 {
                    self.poll
                        .poll(|| v.is_settled() || slot.executor.load(Ordering::Acquire) != 0);
                    let polled_ns = now_ns().saturating_sub(since);
                    let woken = v.is_settled();
                    v.halt_poll.count(polled_ns, woken);
                    self.engine.record(|| Event::HaltPoll {
                        cpu: cpu16(slot.host),
                        vcpu: v.trace_ref(),
                        polled_ns,
                        woken,
                    });
                }
                if let Some(t) = self.wait_dispatch() {
                    // Blocked until the dispatch, not until this thread ran
                    // again: a sleep's own wake-up latency must not shrink
                    // the window that would have avoided it.
                    let at = self.vcpu.dispatched_at.load(Ordering::Relaxed);
                    let until = if at >= since { at } else { now_ns() };
                    self.poll.adapt(until - since);
                    self.arm(&t);
                    self.turn = Some(t);
                    last = VcpuStep::Start;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn outcome(reason: VcpuExitReason) -> VcpuOutcome {
        VcpuOutcome {
            reason,
            stats: Default::default(),
            thread_sched: Default::default(),
        }
    }

    /// A thread that ends gives its outcome, one that panicked says so,
    /// and one still running at the deadline is reported and left behind
    /// (the join returns; the thread ends when it is released).
    #[test]
    fn a_thread_still_running_at_the_deadline_is_reported_not_waited_for() {
        let (release, held) = mpsc::channel::<()>();
        let threads = vec![
            (
                "vm/vcpu0".to_string(),
                std::thread::spawn(|| outcome(VcpuExitReason::Stopped)),
            ),
            (
                "vm/vcpu1".to_string(),
                std::thread::spawn(|| -> VcpuOutcome { panic!("a test's vCPU thread panics") }),
            ),
            (
                "vm/vcpu2".to_string(),
                std::thread::spawn(move || {
                    let _ = held.recv();
                    outcome(VcpuExitReason::Stopped)
                }),
            ),
        ];
        // The first two are over before the join (a panic's report takes
        // its time): only the third is at the deadline.
        for (_, h) in &threads[..2] {
            while !h.is_finished() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let outcomes = join_within(threads, Duration::from_millis(50));
        release.send(()).unwrap();
        let reasons: Vec<_> = outcomes.into_iter().map(|o| o.reason).collect();
        assert_eq!(
            reasons,
            vec![
                VcpuExitReason::Stopped,
                VcpuExitReason::Unhandled {
                    exit: "vCPU thread panicked".into()
                },
                VcpuExitReason::Unhandled {
                    exit: "vCPU thread still running at VM stop".into()
                },
            ]
        );
    }
}
