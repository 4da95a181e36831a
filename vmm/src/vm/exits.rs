//! The exit handler a VM's vCPUs call: port I/O to the VM's port-I/O bus,
//! MMIO to Pacer's local APIC page (scheduled policies) and then the MMIO
//! bus, the interrupt controller's MSRs to it, and fatal exits to a stop
//! of this VM only. An access nothing claims is logged (rate-limited) and
//! otherwise ignored; a read of it returns all ones, as the buses fill it.

use super::shared::{StopCause, VmShared};
use super::steal_time::{StealTime, MSR_KVM_STEAL_TIME};
use devices::bus::UnknownAccessLog;
use devices::irqchip::IrqChip;
use devices::{IoContext, MmioBus, PioBus};
use std::sync::Arc;
use vcpu_engine::vcpu::{MsrFault, VcpuExitHandler, VcpuExitReason};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// vCPU exit dispatch of one VM.
pub(super) struct ExitHandler {
    shared: Arc<VmShared>,
    bus: PioBus,
    mmio: MmioBus,
    /// Pacer's interrupt controller (scheduled policies).
    irqchip: Option<Arc<IrqChip>>,
    /// The guests' steal-time areas (scheduled policies).
    steal: Option<Arc<StealTime>>,
    unknown_pio: UnknownAccessLog,
    unknown_mmio: UnknownAccessLog,
    /// Guest RAM, which the engine's spin watch reads (page tables and
    /// the code at a vCPU's instruction pointer).
    mem: Arc<GuestMemoryMmap>,
}

impl ExitHandler {
    pub(super) fn new(
        shared: Arc<VmShared>,
        bus: PioBus,
        mmio: MmioBus,
        irqchip: Option<Arc<IrqChip>>,
        steal: Option<Arc<StealTime>>,
        mem: Arc<GuestMemoryMmap>,
    ) -> ExitHandler {
        ExitHandler {
            shared,
            bus,
            mmio,
            irqchip,
            steal,
            unknown_pio: UnknownAccessLog::new("port", 64),
            unknown_mmio: UnknownAccessLog::new("MMIO", 64),
            mem,
        }
    }
}

impl VcpuExitHandler for ExitHandler {
    fn read_guest(&self, gpa: u64, buf: &mut [u8]) -> bool {
        self.mem.read_slice(buf, GuestAddress(gpa)).is_ok()
    }

    fn pio_in(&self, vcpu: u32, port: u16, data: &mut [u8]) {
        if !self.bus.read(IoContext { vcpu }, port, data) {
            if let Some(m) =
                self.unknown_pio
                    .note(&self.shared.name, port as u64, false, data.len())
            {
                log::warn!("{m}");
            }
        }
    }

    fn pio_out(&self, vcpu: u32, port: u16, data: &[u8]) {
        if !self.bus.write(IoContext { vcpu }, port, data) {
            if let Some(m) = self
                .unknown_pio
                .note(&self.shared.name, port as u64, true, data.len())
            {
                log::warn!("{m}");
            }
        }
    }

    fn mmio_read(&self, vcpu: u32, addr: u64, data: &mut [u8]) {
        if let Some(chip) = &self.irqchip {
            if chip.lapic_mmio_read(vcpu, addr, data) {
                return;
            }
        }
        if self.mmio.read(IoContext { vcpu }, addr, data) {
            return;
        }
        if let Some(m) = self
            .unknown_mmio
            .note(&self.shared.name, addr, false, data.len())
        {
            log::warn!("{m}");
        }
    }

    fn mmio_write(&self, vcpu: u32, addr: u64, data: &[u8]) {
        if let Some(chip) = &self.irqchip {
            if chip.lapic_mmio_write(vcpu, addr, data) {
                return;
            }
        }
        if self.mmio.write(IoContext { vcpu }, addr, data) {
            return;
        }
        if let Some(m) = self
            .unknown_mmio
            .note(&self.shared.name, addr, true, data.len())
        {
            log::warn!("{m}");
        }
    }

    fn msr_read(&self, vcpu: u32, msr: u32) -> Result<u64, MsrFault> {
        if let (Some(st), MSR_KVM_STEAL_TIME) = (&self.steal, msr) {
            return Ok(st.msr_read(vcpu));
        }
        match &self.irqchip {
            Some(chip) if IrqChip::handles_msr(msr) => chip.msr_read(vcpu, msr).map_err(|e| {
                log::debug!("[{}] vcpu{vcpu}: rdmsr {msr:#x}: {e}", self.shared.name);
                MsrFault
            }),
            _ => Err(MsrFault),
        }
    }

    fn msr_write(&self, vcpu: u32, msr: u32, value: u64) -> Result<(), MsrFault> {
        if let (Some(st), MSR_KVM_STEAL_TIME) = (&self.steal, msr) {
            return st.msr_write(vcpu, value).map_err(|e| {
                log::debug!("[{}] vcpu{vcpu}: {e}", self.shared.name);
                MsrFault
            });
        }
        match &self.irqchip {
            Some(chip) if IrqChip::handles_msr(msr) => {
                chip.msr_write(vcpu, msr, value).map_err(|e| {
                    log::debug!("[{}] vcpu{vcpu}: wrmsr {msr:#x}: {e}", self.shared.name);
                    MsrFault
                })
            }
            _ => Err(MsrFault),
        }
    }

    fn guest_cr8(&self, vcpu: u32, cr8: u64) {
        if let Some(chip) = &self.irqchip {
            chip.set_cr8(vcpu, cr8);
        }
    }

    fn vcpu_dispatched(&self, vcpu: u32, ready_wait: &dyn Fn() -> Option<u64>) {
        if let Some(st) = self.steal.as_ref().filter(|st| st.enabled(vcpu)) {
            if let Some(wait) = ready_wait() {
                st.dispatched(vcpu, wait);
            }
        }
    }

    fn vcpu_preempted(&self, vcpu: u32) {
        if let Some(st) = &self.steal {
            st.preempted(vcpu);
        }
    }

    fn stopping(&self) -> bool {
        self.shared.is_stopping()
    }

    fn vcpu_failed(&self, vcpu: u32, reason: &VcpuExitReason) {
        self.shared.stop(StopCause::VcpuFailed {
            vcpu,
            reason: reason.clone(),
        });
    }
}
