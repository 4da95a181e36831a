//! Interrupt lines: how a device raises its interrupt without knowing which
//! interrupt controller is behind it. Under `policy = "host"` the line is a
//! KVM irqfd into the in-kernel I/O APIC; under Pacer's own scheduling it is
//! a pin of Pacer's I/O APIC. Devices hold an `Arc<dyn InterruptLine>`.

use std::io;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// One interrupt line (an ISA IRQ or an I/O APIC pin).
pub trait InterruptLine: Send + Sync {
    /// Drive the line high (asserted) or low. Level-triggered devices hold
    /// it high while their interrupt condition lasts.
    fn set_level(&self, high: bool);

    /// An edge: raise the line and lower it again.
    fn pulse(&self) {
        self.set_level(true);
        self.set_level(false);
    }
}

/// A line that goes nowhere (a VM without an interrupt controller).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoInterrupt;

impl InterruptLine for NoInterrupt {
    fn set_level(&self, _high: bool) {}
}

/// A line backed by an eventfd, as registered with KVM_IRQFD: every write
/// is one edge on the GSI, so lowering the line is a no-op.
pub struct EventFdLine(pub EventFd);

impl EventFdLine {
    /// A fresh non-blocking eventfd.
    pub fn new() -> io::Result<EventFdLine> {
        Ok(EventFdLine(EventFd::new(EFD_NONBLOCK)?))
    }
}

impl InterruptLine for EventFdLine {
    fn set_level(&self, high: bool) {
        if high {
            if let Err(e) = self.0.write(1) {
                log::warn!("interrupt eventfd write failed: {e}");
            }
        }
    }

    fn pulse(&self) {
        self.set_level(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_line_counts_edges() {
        let line = EventFdLine::new().unwrap();
        line.pulse();
        line.set_level(true);
        line.set_level(false);
        assert_eq!(line.0.read().unwrap(), 2);
        // Nothing pending after the read (non-blocking: WouldBlock).
        assert!(line.0.read().is_err());
    }
}
