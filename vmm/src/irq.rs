//! Interrupt lines into KVM's in-kernel interrupt controllers (host mode):
//! a line's level is set with KVM_IRQ_LINE on its GSI, which KVM's default
//! routing sends to the I/O APIC pin of the same number (and, below 16, to
//! the PIC). Level-triggered sources hold the line high; an edge is a
//! raise and a lower (`InterruptLine::pulse`). Under Pacer's own scheduler
//! the same devices get pins of Pacer's I/O APIC instead.

use devices::InterruptLine;
use kvm_ioctls::VmFd;
use std::sync::Arc;

/// One GSI of a VM with the in-kernel irqchip.
pub struct KvmIrqLine {
    vm: Arc<VmFd>,
    gsi: u32,
}

impl KvmIrqLine {
    pub fn new(vm: Arc<VmFd>, gsi: u32) -> Self {
        Self { vm, gsi }
    }
}

impl InterruptLine for KvmIrqLine {
    fn set_level(&self, high: bool) {
        if let Err(e) = self.vm.set_irq_line(self.gsi, high) {
            log::warn!("KVM_IRQ_LINE gsi {} level {high}: {e}", self.gsi);
        }
    }
}
