//! Dispatch by per-CPU workers: one thread per scheduled host CPU, bound to
//! it, runs whichever vCPU the scheduler hands it (KVM_RUN may be called
//! from any thread). A vCPU switch is then no thread switch at all; the
//! price is that a vCPU's KVM state is loaded by another thread after
//! every switch. An idle worker waits on its CPU's condition variable until
//! kicked.

use super::clock::{now_ns, QuantumTimer};
use super::dispatch::{Next, Stop};
use super::vcpu_state::EngineVcpu;
use super::{Engine, EngineError};
use crate::host_cpus::{pin_current_thread, HostCpuSet};
use crate::signals::{current_tid, set_current_kvm_run};
use crate::vcpu::{VcpuExitReason, VcpuOutcome, VcpuStep};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vcpu_sched::StopReason;

/// Start one worker per scheduled CPU.
pub fn start(engine: &Arc<Engine>) -> Result<(), EngineError> {
    let mut handles = Vec::new();
    for i in 0..engine.slots().len() {
        let e = engine.clone();
        let host = engine.slots()[i].host;
        let h = std::thread::Builder::new()
            .name(format!("pacer/cpu{host}"))
            .spawn(move || worker(&e, i))
            .map_err(EngineError::Thread)?;
        handles.push(h);
    }
    *engine.workers.lock().unwrap_or_else(|p| p.into_inner()) = handles;
    Ok(())
}

fn worker(engine: &Engine, i: usize) {
    let slot = &engine.slots()[i];
    let one: HostCpuSet = [slot.host].into_iter().collect();
    if let Err(e) = pin_current_thread(&one) {
        log::warn!("pacer/cpu{}: cannot bind to its CPU: {e}", slot.host);
    }
    let timer = match QuantumTimer::for_current_thread() {
        Ok(t) => Arc::new(t),
        Err(e) => {
            log::error!("pacer/cpu{}: {e}; this CPU runs no vCPU", slot.host);
            return;
        }
    };
    crate::thread_hook::thread_started(crate::thread_hook::EngineThread::Vcpu);
    let tid = current_tid();
    let mut poll = engine.halt_poll();
    let mut reason = StopReason::Idle;
    // The vCPU whose block left this CPU idle (its polls are counted).
    let mut last: Option<Arc<EngineVcpu>> = None;
    loop {
        if engine.is_shutting_down() {
            return;
        }
        let mut owner = slot.lock_owner();
        let (next, kicks) = engine.reschedule_locked(slot, &mut owner, reason, 0);
        slot.executor
            .store(if next.is_some() { tid } else { 0 }, Ordering::Release);
        drop(owner);
        if let Some(n) = &next {
            n.announce();
        }
        for k in kicks {
            engine.kick_cpu(k);
        }
        reason = match next {
            Some(v) => {
                let r = run_turn(engine, slot, &v, &timer);
                last = Some(v);
                r
            }
            None => {
                // Poll a while for work before sleeping (halt polling).
                let since = now_ns();
                let woken = poll.poll(|| {
                    slot.kick_pending.load(Ordering::Acquire) || engine.is_shutting_down()
                });
                if let Some(v) = last.take().filter(|_| poll.window_ns > 0) {
                    let polled_ns = now_ns().saturating_sub(since);
                    v.halt_poll.count(polled_ns, woken);
                    engine.record(|| crate::trace::Event::HaltPoll {
                        cpu: super::trace_points::cpu16(slot.host),
                        vcpu: v.trace_ref(),
                        polled_ns,
                        woken,
                    });
                }
                if !woken {
                    let owner = slot.lock_owner();
                    drop(slot.wait_idle(owner, || engine.is_shutting_down()));
                }
                // Blocked until the kick, not until this worker ran again
                // (as for threads: see `HaltPoll`).
                let at = slot.kicked_idle_at.load(Ordering::Relaxed);
                let until = if at >= since { at } else { now_ns() };
                poll.adapt(until - since);
                StopReason::Idle
            }
        };
    }
}

/// Run `v` until it gives the CPU back; returns what to tell the scheduler.
fn run_turn(
    engine: &Engine,
    slot: &super::cpu::CpuSlot,
    v: &Arc<EngineVcpu>,
    timer: &Arc<QuantumTimer>,
) -> StopReason {
    let Some(vm) = engine.vm(v.vm) else {
        return engine.end_turn(slot, v, Stop::Exit(VcpuExitReason::Stopped));
    };
    let Some(mut runner) = v.runner.lock().unwrap_or_else(|p| p.into_inner()).take() else {
        log::error!("{}: dispatched while its vCPU is held elsewhere", v.name);
        return engine.end_turn(slot, v, Stop::Exit(VcpuExitReason::Stopped));
    };
    set_current_kvm_run(runner.kvm_run_ptr());
    engine.record(|| crate::trace::Event::Unpark {
        cpu: super::trace_points::cpu16(slot.host),
        vcpu: v.trace_ref(),
        thread_cpu_ns: super::clock::thread_cpu_ns(),
    });
    // At the CPU's quantum end, which wakes may bring forward meanwhile.
    slot.arm_turn(timer);
    let mut last = VcpuStep::Start;
    let stop = loop {
        match engine.next_entry(&vm, v, slot, &mut runner, &last) {
            Next::Enter => last = runner.run_once(),
            Next::Stop(s) => break s,
        }
    };
    slot.disarm_turn(timer);
    set_current_kvm_run(std::ptr::null_mut());
    if let Stop::Exit(r) = &stop {
        if *r != VcpuExitReason::Stopped {
            vm.handler.vcpu_failed(v.index, r);
        }
    }
    // Back before the scheduler may hand the vCPU to another worker.
    *v.runner.lock().unwrap_or_else(|p| p.into_inner()) = Some(runner);
    engine.end_turn(slot, v, stop)
}

/// The outcome of a finished vCPU (workers dispatch): waits until no
/// worker holds it.
pub fn take_outcome(v: &EngineVcpu, timeout: Duration) -> VcpuOutcome {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(runner) = v.runner.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return VcpuOutcome {
                reason: v
                    .ctl()
                    .exit_reason
                    .clone()
                    .unwrap_or(VcpuExitReason::Stopped),
                stats: runner.stats,
                thread_sched: Default::default(),
            };
        }
        if Instant::now() >= deadline {
            log::error!("{}: still held by a worker after {timeout:?}", v.name);
            return VcpuOutcome {
                reason: VcpuExitReason::Unhandled {
                    exit: "vCPU still running at VM stop".into(),
                },
                stats: Default::default(),
                thread_sched: Default::default(),
            };
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}
