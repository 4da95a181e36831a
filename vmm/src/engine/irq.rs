//! Interrupt delivery for scheduled vCPUs: what the engine needs from a
//! VM's interrupt controller, and how a pending interrupt gets into a vCPU.
//!
//! Without KVM's in-kernel irqchip, Pacer injects every external interrupt
//! itself with KVM_INTERRUPT, and only when the guest can take it: KVM says
//! so in `ready_for_interrupt_injection` after each exit; when it cannot,
//! the vCPU asks for an interrupt-window exit. The vector is injected
//! *first* and acknowledged in the controller (IRR -> ISR) only once KVM
//! accepted it, so an injection KVM still holds from an entry that a kick
//! cut short (EEXIST) never loses a vector.
//!
//! One quirk of the development machines' software KVM (no VT-x): after a
//! signal-kicked KVM_RUN with the guest in ring 3 the ready flag reads 0
//! and no window exit follows, yet ring 3 always runs with interrupts
//! enabled and an injection there is delivered at once. So after an EINTR
//! the engine looks at the guest's privilege level (one KVM_GET_SREGS) and
//! injects in ring 3 anyway. On hardware KVM the flag is 1 in that case and
//! the extra look never happens.

use crate::vcpu::{VcpuExitReason, VcpuRunner, VcpuStep};

/// NMI, INIT and start-up IPIs sent to one vCPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuEvents {
    pub nmi: bool,
    pub init: bool,
    /// The vector of the latest start-up IPI.
    pub sipi: Option<u8>,
}

impl CpuEvents {
    pub fn merge(&mut self, other: CpuEvents) {
        self.nmi |= other.nmi;
        self.init |= other.init;
        if other.sipi.is_some() {
            self.sipi = other.sipi;
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == CpuEvents::default()
    }
}

/// What the engine needs from a VM's interrupt controller (Pacer's
/// LAPIC/IOAPIC model implements it).
pub trait InterruptSource: Send + Sync {
    /// Cheap: might `vcpu` have something to take? Checked before every entry.
    fn has_pending_hint(&self, vcpu: u32) -> bool;
    /// The highest-priority fixed interrupt deliverable now.
    fn pending_interrupt(&self, vcpu: u32) -> Option<u8>;
    /// `vector` was injected: move it from IRR to ISR.
    fn acknowledge(&self, vcpu: u32, vector: u8);
    /// NMI / INIT / SIPI delivered since the last call.
    fn take_events(&self, vcpu: u32) -> CpuEvents;
    /// The host timer armed for `vcpu`'s local timer fired.
    fn timer_expired(&self, vcpu: u32);
}

/// A VM without an interrupt controller (tests, tiny guests).
pub struct NoInterrupts;

impl InterruptSource for NoInterrupts {
    fn has_pending_hint(&self, _vcpu: u32) -> bool {
        false
    }
    fn pending_interrupt(&self, _vcpu: u32) -> Option<u8> {
        None
    }
    fn acknowledge(&self, _vcpu: u32, _vector: u8) {}
    fn take_events(&self, _vcpu: u32) -> CpuEvents {
        CpuEvents::default()
    }
    fn timer_expired(&self, _vcpu: u32) {}
}

/// Inject the controller's highest pending interrupt into `runner` if the
/// guest can take it now, or ask for an interrupt window. `last` is how the
/// previous KVM_RUN ended.
pub fn deliver_interrupt(
    src: &dyn InterruptSource,
    runner: &mut VcpuRunner,
    last: &VcpuStep,
) -> Result<(), VcpuExitReason> {
    let index = runner.index;
    let Some(vector) = src.pending_interrupt(index) else {
        runner.request_interrupt_window(false);
        return Ok(());
    };
    let (ready, _if_flag) = runner.interrupt_window();
    let can = ready || (*last == VcpuStep::Interrupted && runner.cpl()? == 3);
    if !can {
        runner.request_interrupt_window(true);
        return Ok(());
    }
    match runner.inject_interrupt(vector) {
        Ok(()) => {
            src.acknowledge(index, vector);
            runner.request_interrupt_window(false);
            Ok(())
        }
        // KVM still holds an earlier injection (an entry a kick cut short):
        // it goes in first; this vector stays pending in the controller.
        Err(VcpuExitReason::KvmError { errno }) if errno == libc::EEXIST => {
            runner.request_interrupt_window(true);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Whether a vCPU that just executed HLT must stay runnable: something it
/// can take is pending (`interruptible`: it halted with IF set).
pub fn halt_is_over(
    src: &dyn InterruptSource,
    index: u32,
    events: &CpuEvents,
    interruptible: bool,
) -> bool {
    events.nmi
        || events.init
        || events.sipi.is_some()
        || (interruptible && src.pending_interrupt(index).is_some())
}
