//! Register access of a local APIC: the xAPIC page (MMIO, any size) and
//! the MSRs (IA32_APIC_BASE, IA32_TSC_DEADLINE, x2APIC 0x800-0x8FF with
//! their #GP rules), and what register writes do (EOI, ICR, SVR, LVT, ESR).
//!
//! xAPIC: reads are byte lanes of the 32-bit register in each 16-byte slot
//! (bytes 4-15 of a slot and reserved offsets read 0); only aligned 4-byte
//! writes reach a register, other writes are ignored (as KVM); reserved bits
//! are dropped. x2APIC: reserved bits, read-only and write-only registers
//! and missing registers fault (SDM "Reserved Bit Checking", RsvdZ).

use super::super::message::{DeliveryMode, DestFormat, Destination, Message};
use super::super::regs::*;
use super::super::{GuestCpu, IrqChipHost, MsrFault};
use super::timer::{timer_mode_of, TimerMode};
use super::{ApicMode, Effects, Lapic};

/// A decoded register (by its xAPIC offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reg {
    Id,
    Version,
    Tpr,
    Apr,
    Ppr,
    Eoi,
    Rrd,
    Ldr,
    Dfr,
    Svr,
    Isr(usize),
    Tmr(usize),
    Irr(usize),
    Esr,
    IcrLow,
    IcrHigh,
    Lvt(usize),
    TimerInitial,
    TimerCurrent,
    TimerDivide,
    SelfIpi,
}

impl Reg {
    /// The register at a 16-byte aligned offset, if any.
    fn decode(offset: u32) -> Option<Reg> {
        let word = |base: u32| ((offset - base) / APIC_REG_STRIDE) as usize;
        Some(match offset {
            APIC_ID => Reg::Id,
            APIC_VERSION => Reg::Version,
            APIC_TPR => Reg::Tpr,
            APIC_APR => Reg::Apr,
            APIC_PPR => Reg::Ppr,
            APIC_EOI => Reg::Eoi,
            APIC_RRD => Reg::Rrd,
            APIC_LDR => Reg::Ldr,
            APIC_DFR => Reg::Dfr,
            APIC_SVR => Reg::Svr,
            o if (APIC_ISR..APIC_TMR).contains(&o) => Reg::Isr(word(APIC_ISR)),
            o if (APIC_TMR..APIC_IRR).contains(&o) => Reg::Tmr(word(APIC_TMR)),
            o if (APIC_IRR..APIC_ESR).contains(&o) => Reg::Irr(word(APIC_IRR)),
            APIC_ESR => Reg::Esr,
            APIC_ICR_LOW => Reg::IcrLow,
            APIC_ICR_HIGH => Reg::IcrHigh,
            o if (APIC_LVT_TIMER..=APIC_LVT_ERROR).contains(&o) => Reg::Lvt(word(APIC_LVT_TIMER)),
            APIC_TIMER_INITIAL => Reg::TimerInitial,
            APIC_TIMER_CURRENT => Reg::TimerCurrent,
            APIC_TIMER_DIVIDE => Reg::TimerDivide,
            APIC_SELF_IPI => Reg::SelfIpi,
            _ => return None,
        })
    }
}

impl Lapic {
    /// Offset in the APIC page of an access of `len` bytes at `gpa`, if the
    /// APIC is in xAPIC mode and the whole access falls in its page.
    fn mmio_offset(&self, gpa: u64, len: usize) -> Option<u32> {
        if self.mode() != ApicMode::XApic {
            return None;
        }
        let base = self.apic_base & !(APIC_PAGE_SIZE - 1);
        let off = gpa.checked_sub(base)?;
        let end = off.checked_add(len as u64)?;
        (end <= APIC_PAGE_SIZE).then_some(off as u32)
    }

    // ------------------------------------------------------------------
    // Register access.

    /// xAPIC MMIO read. Each byte reads as the byte of the 32-bit register
    /// value in its lane; bytes 4-15 of a register slot and reserved
    /// registers read 0. False if the access is not in this APIC's page.
    pub(crate) fn mmio_read(&self, gpa: u64, data: &mut [u8], host: &dyn IrqChipHost) -> bool {
        let Some(offset) = self.mmio_offset(gpa, data.len()) else {
            return false;
        };
        for (i, byte) in data.iter_mut().enumerate() {
            let o = offset + i as u32;
            let lane = o % APIC_REG_STRIDE;
            *byte = if lane < 4 {
                let value = Reg::decode(o - lane).map_or(0, |r| self.read_xapic(r, host));
                value.to_le_bytes()[lane as usize]
            } else {
                0
            };
        }
        true
    }

    /// xAPIC MMIO write: only aligned 4-byte writes reach a register (SDM:
    /// registers are accessed as 32-bit aligned words); others are claimed
    /// and ignored. `None` if the access is not in this APIC's page.
    pub(crate) fn mmio_write(
        &mut self,
        gpa: u64,
        data: &[u8],
        host: &dyn IrqChipHost,
    ) -> Option<Effects> {
        let offset = self.mmio_offset(gpa, data.len())?;
        let (Ok(bytes), 0) = (<[u8; 4]>::try_from(data), offset % APIC_REG_STRIDE) else {
            return Some(Effects::default());
        };
        let value = u32::from_le_bytes(bytes);
        Some(
            Reg::decode(offset).map_or_else(Effects::default, |r| self.write_xapic(r, value, host)),
        )
    }

    fn read_xapic(&self, reg: Reg, host: &dyn IrqChipHost) -> u32 {
        match reg {
            Reg::Id => (self.id & 0xFF) << ID_XAPIC_SHIFT,
            Reg::Apr => self.apr(),
            Reg::Dfr => self.dfr,
            Reg::IcrLow => self.icr as u32,
            Reg::IcrHigh => (self.icr >> 32) as u32,
            // Write-only, unsupported, or x2APIC only.
            Reg::Eoi | Reg::Rrd | Reg::SelfIpi => 0,
            r => self.read_common(r, host).unwrap_or(0),
        }
    }

    /// Registers that read the same in both modes.
    fn read_common(&self, reg: Reg, host: &dyn IrqChipHost) -> Option<u32> {
        Some(match reg {
            Reg::Version => APIC_VERSION_VALUE,
            Reg::Tpr => self.tpr,
            Reg::Ppr => self.ppr(),
            Reg::Ldr => self.ldr,
            Reg::Svr => self.svr,
            Reg::Isr(i) => self.isr.word(i),
            Reg::Tmr(i) => self.tmr.word(i),
            Reg::Irr(i) => self.irr.word(i),
            Reg::Esr => self.esr,
            Reg::Lvt(i) => *self.lvt.get(i)?,
            Reg::TimerInitial => self.timer.initial,
            Reg::TimerCurrent => self.current_count(host.now_ns()),
            Reg::TimerDivide => self.timer.divide,
            _ => return None,
        })
    }

    fn write_xapic(&mut self, reg: Reg, value: u32, host: &dyn IrqChipHost) -> Effects {
        let mut effects = Effects::default();
        match reg {
            Reg::Id => self.id = value >> ID_XAPIC_SHIFT,
            Reg::Tpr => self.tpr = value & TPR_MASK,
            Reg::Eoi => self.eoi(&mut effects),
            Reg::Ldr => self.ldr = value & LDR_XAPIC_MASK,
            Reg::Dfr => self.dfr = value | DFR_RESERVED_ONES,
            Reg::Svr => self.write_svr(value),
            Reg::Esr => self.latch_esr(),
            Reg::IcrLow => {
                self.icr = (self.icr & !0xFFFF_FFFF) | u64::from(value & ICR_LOW_WRITABLE);
                effects.ipi = Some(self.icr_message());
            }
            Reg::IcrHigh => {
                let dest = value & ICR_HIGH_XAPIC_DEST_MASK;
                self.icr = (self.icr & 0xFFFF_FFFF) | (u64::from(dest) << 32);
            }
            Reg::Lvt(i) => self.write_lvt(i, value, host),
            Reg::TimerInitial => self.write_initial_count(value, host),
            Reg::TimerDivide => self.write_divide(value, host),
            // Read-only or reserved in xAPIC mode: ignored.
            Reg::Version
            | Reg::Apr
            | Reg::Ppr
            | Reg::Rrd
            | Reg::Isr(_)
            | Reg::Tmr(_)
            | Reg::Irr(_)
            | Reg::TimerCurrent
            | Reg::SelfIpi => {}
        }
        effects
    }

    /// RDMSR of an x2APIC register (`msr` in 0x800..=0x8FF).
    fn read_x2apic(&self, msr: u32, host: &dyn IrqChipHost) -> Result<u64, MsrFault> {
        if self.mode() != ApicMode::X2Apic {
            return Err(MsrFault::NotX2Apic(msr));
        }
        if msr == X2APIC_MSR_ICR {
            return Ok(self.icr);
        }
        let reg = Reg::decode((msr - X2APIC_MSR_FIRST) * APIC_REG_STRIDE)
            .ok_or(MsrFault::NoSuchRegister(msr))?;
        match reg {
            Reg::Id => Ok(u64::from(self.id)),
            Reg::Eoi | Reg::SelfIpi => Err(MsrFault::WriteOnly(msr)),
            // Not in x2APIC mode (ICR high is part of MSR 0x830).
            Reg::Apr | Reg::Rrd | Reg::Dfr | Reg::IcrHigh | Reg::IcrLow => {
                Err(MsrFault::NoSuchRegister(msr))
            }
            r => self
                .read_common(r, host)
                .map(u64::from)
                .ok_or(MsrFault::NoSuchRegister(msr)),
        }
    }

    /// WRMSR of an x2APIC register: reserved bits set, read-only and
    /// missing registers fault (SDM: RsvdZ semantics in x2APIC mode).
    fn write_x2apic(
        &mut self,
        msr: u32,
        value: u64,
        host: &dyn IrqChipHost,
    ) -> Result<Effects, MsrFault> {
        if self.mode() != ApicMode::X2Apic {
            return Err(MsrFault::NotX2Apic(msr));
        }
        let reserved = || MsrFault::ReservedBits { msr, value };
        let mut effects = Effects::default();
        if msr == X2APIC_MSR_ICR {
            let low = value as u32;
            if low & !(ICR_LOW_WRITABLE | ICR_DELIVERY_STATUS) != 0 {
                return Err(reserved());
            }
            self.icr = value & !u64::from(ICR_DELIVERY_STATUS);
            effects.ipi = Some(self.icr_message());
            return Ok(effects);
        }
        let reg = Reg::decode((msr - X2APIC_MSR_FIRST) * APIC_REG_STRIDE)
            .ok_or(MsrFault::NoSuchRegister(msr))?;
        // Bits 63:32 are reserved in every register but the ICR.
        let v = u32::try_from(value).map_err(|_| reserved())?;
        let check = |allowed: u32| {
            if v & !allowed != 0 {
                Err(reserved())
            } else {
                Ok(())
            }
        };
        match reg {
            Reg::Tpr => {
                check(TPR_MASK)?;
                self.tpr = v;
            }
            Reg::Eoi => {
                check(0)?;
                self.eoi(&mut effects);
            }
            Reg::Svr => {
                check(SVR_WRITABLE)?;
                self.write_svr(v);
            }
            Reg::Esr => {
                check(0)?;
                self.latch_esr();
            }
            Reg::Lvt(i) => {
                let allowed = LVT_WRITABLE.get(i).zip(LVT_READ_ONLY.get(i));
                let (&writable, &read_only) = allowed.ok_or(MsrFault::NoSuchRegister(msr))?;
                check(writable | read_only)?;
                if i == LVT_TIMER && timer_mode_of(v) == TimerMode::Reserved {
                    return Err(reserved());
                }
                self.write_lvt(i, v, host);
            }
            Reg::TimerInitial => self.write_initial_count(v, host),
            Reg::TimerDivide => {
                check(TIMER_DIVIDE_WRITABLE)?;
                self.write_divide(v, host);
            }
            Reg::SelfIpi => {
                check(SELF_IPI_WRITABLE)?;
                effects.ipi = Some(self.outgoing(Message {
                    vector: v as u8,
                    mode: DeliveryMode::Fixed,
                    level_trigger: false,
                    assert: true,
                    dest: Destination::SelfOnly,
                    source: Some(self.vcpu),
                }));
            }
            Reg::Id
            | Reg::Version
            | Reg::Ppr
            | Reg::Ldr
            | Reg::Isr(_)
            | Reg::Tmr(_)
            | Reg::Irr(_)
            | Reg::TimerCurrent => return Err(MsrFault::ReadOnly(msr)),
            Reg::Apr | Reg::Rrd | Reg::Dfr | Reg::IcrLow | Reg::IcrHigh => {
                return Err(MsrFault::NoSuchRegister(msr))
            }
        }
        Ok(effects)
    }

    /// RDMSR of IA32_APIC_BASE, IA32_TSC_DEADLINE or an x2APIC register.
    pub(crate) fn msr_read(&self, msr: u32, host: &dyn IrqChipHost) -> Result<u64, MsrFault> {
        match msr {
            MSR_IA32_APIC_BASE => Ok(self.apic_base),
            MSR_IA32_TSC_DEADLINE => Ok(self.tsc_deadline()),
            MSR_KVM_PV_EOI_EN => Ok(self.pv_eoi_msr()),
            X2APIC_MSR_FIRST..=X2APIC_MSR_LAST => self.read_x2apic(msr, host),
            _ => Err(MsrFault::NotHandled(msr)),
        }
    }

    /// WRMSR of IA32_APIC_BASE, IA32_TSC_DEADLINE or an x2APIC register.
    pub(crate) fn msr_write(
        &mut self,
        msr: u32,
        value: u64,
        cpu: GuestCpu,
        host: &dyn IrqChipHost,
    ) -> Result<Effects, MsrFault> {
        match msr {
            MSR_IA32_APIC_BASE => self
                .write_apic_base(value, cpu, host)
                .map(|()| Effects::default()),
            MSR_IA32_TSC_DEADLINE => Ok(Effects {
                notify_self: self.write_tsc_deadline(value, host),
                ..Effects::default()
            }),
            MSR_KVM_PV_EOI_EN => self.write_pv_eoi_msr(value).map(|()| Effects::default()),
            X2APIC_MSR_FIRST..=X2APIC_MSR_LAST => self.write_x2apic(msr, value, host),
            _ => Err(MsrFault::NotHandled(msr)),
        }
    }

    fn write_svr(&mut self, value: u32) {
        self.svr = value & SVR_WRITABLE;
        if !self.sw_enabled() {
            for lvt in &mut self.lvt {
                *lvt |= LVT_MASKED;
            }
        }
    }

    /// A write to the ESR makes the errors seen since the last write
    /// visible and starts collecting anew.
    fn latch_esr(&mut self) {
        self.esr = std::mem::take(&mut self.esr_pending);
    }

    /// EOI: retire the highest in-service vector (the host hears which);
    /// a level-triggered one (TMR set) is broadcast to the I/O APIC.
    pub(crate) fn eoi(&mut self, effects: &mut Effects) {
        let Some(v) = self.isr.highest() else { return };
        self.isr.clear(v);
        effects.eoi = Some(v);
        effects.eoi_broadcast = self.tmr.test(v).then_some(v);
    }

    fn write_lvt(&mut self, index: usize, value: u32, host: &dyn IrqChipHost) {
        let (Some(&writable), Some(old)) = (LVT_WRITABLE.get(index), self.lvt.get(index).copied())
        else {
            return;
        };
        let mut new = value & writable;
        if !self.sw_enabled() {
            new |= LVT_MASKED;
        }
        self.lvt[index] = new;
        if index == LVT_TIMER {
            self.timer_mode_changed(timer_mode_of(old), host);
        }
    }

    /// The message of the ICR as just written.
    fn icr_message(&mut self) -> Message {
        let low = self.icr as u32;
        let high = (self.icr >> 32) as u32;
        let (dest_field, format) = match self.mode() {
            ApicMode::X2Apic => (high, DestFormat::X2Apic),
            _ => (high >> ICR_HIGH_XAPIC_DEST_SHIFT, DestFormat::XApic),
        };
        let dest = match (low & ICR_SHORTHAND_MASK) >> ICR_SHORTHAND_SHIFT {
            SHORTHAND_SELF => Destination::SelfOnly,
            SHORTHAND_ALL_INCLUDING_SELF => Destination::All,
            SHORTHAND_ALL_EXCLUDING_SELF => Destination::AllButSelf,
            _ if low & ICR_DEST_LOGICAL != 0 => Destination::Logical {
                mda: dest_field,
                format,
            },
            _ => Destination::Physical {
                id: dest_field,
                format,
            },
        };
        self.outgoing(Message {
            vector: (low & ICR_VECTOR_MASK) as u8,
            mode: DeliveryMode::from_bits(low >> ICR_DELIVERY_MODE_SHIFT),
            level_trigger: low & ICR_TRIGGER_LEVEL != 0,
            assert: low & ICR_LEVEL_ASSERT != 0,
            dest,
            source: Some(self.vcpu),
        })
    }

    /// The sender's check of an outgoing message: an illegal vector is an
    /// error here too (each receiver also refuses it).
    fn outgoing(&mut self, msg: Message) -> Message {
        if msg.mode.is_fixed() && msg.vector < FIRST_LEGAL_VECTOR {
            self.raise_error(ESR_SEND_ILLEGAL_VECTOR);
        }
        msg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_decode() {
        assert_eq!(Reg::decode(0x020), Some(Reg::Id));
        assert_eq!(Reg::decode(0x170), Some(Reg::Isr(7)));
        assert_eq!(Reg::decode(0x180), Some(Reg::Tmr(0)));
        assert_eq!(Reg::decode(0x270), Some(Reg::Irr(7)));
        assert_eq!(Reg::decode(0x370), Some(Reg::Lvt(LVT_ERROR)));
        assert_eq!(Reg::decode(0x2F0), None, "no CMCI entry");
        assert_eq!(Reg::decode(0x000), None);
        assert_eq!(Reg::decode(0x3A0), None);
        assert_eq!(Reg::decode(0xFF0), None);
    }
}
