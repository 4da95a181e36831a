//! The events other than fixed interrupts that one vCPU can be sent (NMI,
//! INIT, start-up IPI), as its interrupt controller hands them over
//! (`irq::InterruptSource::take_events`) and as its run state keeps them
//! until acted upon (`vcpu_state`).

/// NMI, INIT and start-up IPIs sent to one vCPU
/// ([`crate::irq::InterruptSource::take_events`]). Build one from
/// [`CpuEvents::default`] (nothing) and set what arrived; more kinds may
/// be added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CpuEvents {
    /// NMIs received and not yet injected, at most [`MAX_PENDING_NMIS`]:
    /// one to deliver and one latched behind it, as a processor keeps them.
    pub nmis: u32,
    /// An INIT IPI: the vCPU leaves what it runs and waits for a start-up
    /// IPI.
    pub init: bool,
    /// The vector of the latest start-up IPI.
    pub sipi: Option<u8>,
}

/// A processor delivers one NMI and latches at most one more; further NMIs
/// that arrive before the first is delivered are lost (KVM caps its own
/// queue the same way).
pub const MAX_PENDING_NMIS: u32 = 2;

impl CpuEvents {
    /// Add `other`'s events to these (NMIs capped at
    /// [`MAX_PENDING_NMIS`]; the later start-up vector wins).
    pub fn merge(&mut self, other: CpuEvents) {
        self.nmis = (self.nmis + other.nmis).min(MAX_PENDING_NMIS);
        self.init |= other.init;
        if other.sipi.is_some() {
            self.sipi = other.sipi;
        }
    }

    /// No event at all.
    pub fn is_empty(&self) -> bool {
        *self == CpuEvents::default()
    }
}
