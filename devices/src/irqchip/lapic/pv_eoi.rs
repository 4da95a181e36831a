//! KVM's paravirtual EOI (MSR_KVM_PV_EOI_EN, Linux's
//! `kvm_guest_apic_eoi_write`): a guest that enabled it ends an interrupt
//! by clearing bit 0 of a flag word in its own memory when that bit is
//! set, and writes the EOI register only when it is clear. The local APIC
//! sets the bit when the EOI it would receive needs nothing from it at
//! once: the vector just injected is the only one in service, nothing else
//! is requested, and it is edge-triggered (no I/O APIC EOI to broadcast).
//! The EOI itself is then taken lazily: the next time the chip looks at
//! this APIC (another interrupt arrives, the guest touches a register, the
//! vCPU halts, or the VMM's cheap poll before an entry) it takes the flag
//! back, and a cleared flag means the guest's handler ended: the EOI is
//! done then. A flag still set is withdrawn, and the guest writes EOI the
//! usual way. One user-space exit fewer per interrupt; the same protocol
//! KVM's in-kernel local APIC speaks (`apic_sync_pv_eoi_to_guest` /
//! `_from_guest`), so a Linux guest uses it when CPUID offers
//! KVM_FEATURE_PV_EOI.
//!
//! The flag lives in guest memory, which only the VMM can reach: the chip
//! asks [`IrqChipHost::pv_eoi_flag`]; a host that cannot (the default)
//! never offers it, and the guest always writes EOI.

use super::super::regs::*;
use super::super::{IrqChipHost, PvEoiAccess};
use super::{Effects, Lapic};
use crate::irqchip::MsrFault;

/// PV EOI state of one local APIC.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PvEoi {
    /// MSR_KVM_PV_EOI_EN as the guest wrote it.
    pub msr: u64,
    /// The flag in guest memory is set: the guest may end the interrupt
    /// in service by clearing it.
    pub offered: bool,
}

impl PvEoi {
    fn gpa(&self) -> Option<u64> {
        (self.msr & PV_EOI_ENABLE != 0).then_some(self.msr & !PV_EOI_ENABLE)
    }
}

impl Lapic {
    /// WRMSR MSR_KVM_PV_EOI_EN: a flag address that is not 4-byte aligned
    /// is refused (#GP, as KVM). Any offer outstanding was taken back by
    /// the chip before this call.
    pub(crate) fn write_pv_eoi_msr(&mut self, value: u64) -> Result<(), MsrFault> {
        let addr = value & !PV_EOI_ENABLE;
        if value & PV_EOI_ENABLE != 0 && addr % 4 != 0 {
            return Err(MsrFault::ReservedBits {
                msr: MSR_KVM_PV_EOI_EN,
                value,
            });
        }
        self.pv_eoi = PvEoi {
            msr: value,
            offered: false,
        };
        Ok(())
    }

    pub(crate) fn pv_eoi_msr(&self) -> u64 {
        self.pv_eoi.msr
    }

    pub(crate) fn pv_eoi_offered(&self) -> bool {
        self.pv_eoi.offered
    }

    /// After an injection (IRR -> ISR of `vector`): set the guest's flag
    /// if its EOI for `vector` may be taken lazily.
    pub(crate) fn offer_pv_eoi(&mut self, vector: u8, host: &dyn IrqChipHost) {
        let Some(gpa) = self.pv_eoi.gpa() else { return };
        let only_in_service = self.isr.highest() == Some(vector) && {
            let mut rest = self.isr;
            rest.clear(vector);
            rest.highest().is_none()
        };
        if self.pv_eoi.offered
            || !only_in_service
            || self.irr.highest().is_some()
            || self.tmr.test(vector)
            || !self.events.is_empty()
        {
            return;
        }
        match host.pv_eoi_flag(gpa, PvEoiAccess::Set) {
            Some(_) => self.pv_eoi.offered = true,
            // Not guest RAM (or a host without memory access): never again.
            None => self.pv_eoi.msr = 0,
        }
    }

    /// Take an outstanding offer back (`access` Take), or only look
    /// whether the guest used it (`Read`): a cleared flag is the guest's
    /// EOI, done now; its vector is returned in `effects.eoi`.
    pub(crate) fn settle_pv_eoi(
        &mut self,
        access: PvEoiAccess,
        host: &dyn IrqChipHost,
        effects: &mut Effects,
    ) {
        let (true, Some(gpa)) = (self.pv_eoi.offered, self.pv_eoi.gpa()) else {
            return;
        };
        match host.pv_eoi_flag(gpa, access) {
            Some(true) if access == PvEoiAccess::Read => {}
            Some(true) => self.pv_eoi.offered = false,
            Some(false) => {
                self.pv_eoi.offered = false;
                self.eoi(effects);
            }
            None => self.pv_eoi = PvEoi::default(),
        }
    }
}
