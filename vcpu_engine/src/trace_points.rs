//! Where the engine records what it does (`pacer run --trace`), in one
//! place so the decision code stays readable: each site in `dispatch.rs`,
//! `threads.rs`, `workers.rs`, `irq.rs` and `mod.rs` is one call here. With tracing off
//! the engine holds no [`Trace`] and every call is one branch on it; the
//! event is only built when it is recorded.
//!
//! | event | recorded where |
//! |---|---|
//! | dispatch, idle, migration | `reschedule_locked` (whichever thread picks) |
//! | stop: quantum end, preemption, yield, halt, SIPI wait, pause, exit | `end_turn` |
//! | notify with its cause (timer, IPI from vCPU x, device line), start, resume | the interrupt controller's host (`irq::ChipHost`), `start_vm`, `resume_vm` |
//! | wake decision, quantum cut | `wake` |
//! | kick sent | `kick_cpu` |
//! | exit seen (KVM_RUN returned EINTR) | `next_entry` |
//! | interrupt injected | `next_entry` |
//! | EOI (the guest's handler ran) | `irq::ChipHost` |
//! | park / unpark of a vCPU thread | `threads.rs` |
//! | halt poll (its length, whether the work came within it) | `threads.rs`, `workers.rs` |

use super::vcpu_state::EngineVcpu;
use super::Engine;
use crate::trace::{Event, Trace, VcpuRef};
use std::cell::Cell;

thread_local! {
    /// The deadline of the guest timer the timer thread is firing (0 when
    /// none): the cause a timer notification records.
    static FIRING_DEADLINE: Cell<u64> = const { Cell::new(0) };
}

impl Engine {
    /// Record the event `make` builds, if tracing.
    #[inline]
    pub(crate) fn record(&self, make: impl FnOnce() -> Event) {
        if let Some(t) = &self.trace {
            t.emit(make());
        }
    }

    /// The run's trace, if it is recorded.
    pub fn trace(&self) -> Option<&Trace> {
        self.trace.as_ref()
    }

    /// Run `fire` (the guest timer due at `deadline_ns` firing) with the
    /// deadline known to the notifications it causes.
    pub(crate) fn firing_timer(&self, deadline_ns: u64, fire: impl FnOnce()) {
        if self.trace.is_none() {
            return fire();
        }
        FIRING_DEADLINE.set(deadline_ns);
        fire();
        FIRING_DEADLINE.set(0);
    }
}

/// The deadline of the timer being fired on this thread (0: none).
pub(crate) fn firing_deadline() -> u64 {
    FIRING_DEADLINE.get()
}

impl EngineVcpu {
    /// How a trace names this vCPU.
    pub fn trace_ref(&self) -> VcpuRef {
        VcpuRef {
            vm: self.trace_vm,
            vcpu: self.index as u16,
        }
    }
}

/// A host CPU number as a trace field.
pub(crate) fn cpu16(host: crate::host_cpus::HostCpu) -> u16 {
    u16::try_from(host.0).unwrap_or(crate::trace::record::NONE16 - 1)
}
