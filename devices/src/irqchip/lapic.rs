//! One local APIC: its registers as a state machine (register access in
//! `lapic/access.rs`, the timer in `lapic/timer.rs`).
//!
//! A `Lapic` knows nothing of other APICs, of the I/O APIC or of threads:
//! the VM-wide [`super::IrqChip`] holds each one behind its own lock, asks it
//! whether a message is for it ([`Lapic::matches`]) and hands it messages
//! ([`Lapic::accept`]). Whatever a register write sends out (an IPI, an EOI
//! broadcast to the I/O APIC) comes back as [`Effects`] for the chip to
//! route after this APIC's lock is released. The clock and the host timer
//! are reached through [`IrqChipHost`], always with this APIC's lock held, so
//! the `set_timer` calls of one vCPU reach the host in order.

mod access;
mod pv_eoi;
mod timer;

use super::message::{DeliveryMode, Destination, Message, RouteKey};
use super::regs::*;
use super::{CpuEvents, GuestCpu, IrqChipHost, MsrFault};
use pv_eoi::PvEoi;
use serde::Serialize;
use timer::Timer;

/// The three states of IA32_APIC_BASE (EN, EXTD).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ApicMode {
    /// EN = 0: the APIC is off; it takes no messages and claims no MMIO.
    #[serde(rename = "disabled")]
    Disabled,
    #[serde(rename = "xapic")]
    XApic,
    #[serde(rename = "x2apic")]
    X2Apic,
}

/// What a register access sends out of this APIC.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Effects {
    /// An IPI (ICR or SELF IPI write).
    pub ipi: Option<Message>,
    /// The vector an EOI write retired (the guest's handler ran).
    pub eoi: Option<u8>,
    /// EOI of a level-triggered vector: broadcast to the I/O APIC.
    pub eoi_broadcast: Option<u8>,
    /// This vCPU has something new to take (TSC-deadline fired at once).
    pub notify_self: bool,
}

/// Outcome of [`Lapic::accept`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Acceptance {
    /// The message was taken (an IRR bit set, or an event recorded).
    pub accepted: bool,
    /// The vCPU should be told: it has something it can take now.
    pub notify: bool,
}

/// A 256-bit vector register (IRR, ISR, TMR).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct VectorSet([u64; 4]);

impl VectorSet {
    fn set(&mut self, v: u8) {
        self.0[usize::from(v >> 6)] |= 1 << (v & 63);
    }
    fn clear(&mut self, v: u8) {
        self.0[usize::from(v >> 6)] &= !(1 << (v & 63));
    }
    fn test(&self, v: u8) -> bool {
        self.0[usize::from(v >> 6)] & (1 << (v & 63)) != 0
    }
    fn highest(&self) -> Option<u8> {
        (0..4).rev().find_map(|i| {
            let w = self.0[i];
            (w != 0).then(|| (i * 64 + 63 - w.leading_zeros() as usize) as u8)
        })
    }
    /// 32-bit word `i` (0..8) as the registers show it.
    fn word(&self, i: usize) -> u32 {
        (self.0[(i / 2) % 4] >> ((i % 2) * 32)) as u32
    }
    fn words(&self) -> [u32; 8] {
        std::array::from_fn(|i| self.word(i))
    }
}

/// The x2APIC logical id derived from the x2APIC id: cluster in bits 31:16,
/// one bit for the position in the cluster.
pub(crate) fn x2apic_ldr(id: u32) -> u32 {
    ((id >> 4) << 16) | (1 << (id & 0xF))
}

/// Register dump of one local APIC, for debugging and tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LapicState {
    pub vcpu: u32,
    pub mode: ApicMode,
    pub apic_base: u64,
    /// The id as the ID register holds it in the current mode (xAPIC: the
    /// 8-bit id, shown unshifted).
    pub id: u32,
    pub version: u32,
    pub tpr: u32,
    pub apr: u32,
    pub ppr: u32,
    pub ldr: u32,
    pub dfr: u32,
    pub svr: u32,
    pub isr: [u32; 8],
    pub tmr: [u32; 8],
    pub irr: [u32; 8],
    pub esr: u32,
    /// Errors seen since the last ESR write (latched into `esr` by it).
    pub esr_pending: u32,
    pub icr: u64,
    /// Timer, thermal, perf, LINT0, LINT1, error.
    pub lvt: [u32; LVT_COUNT],
    pub timer_initial: u32,
    pub timer_current: u32,
    pub timer_divide: u32,
    pub tsc_deadline: u64,
    pub timer_deadline_ns: Option<u64>,
    pub pending_events: CpuEvents,
}

/// One local APIC.
#[derive(Debug)]
pub(crate) struct Lapic {
    /// vCPU index: the initial APIC id.
    vcpu: u32,
    apic_base: u64,
    /// xAPIC: the 8-bit id in bits 7:0; x2APIC: the 32-bit id.
    id: u32,
    tpr: u32,
    ldr: u32,
    dfr: u32,
    svr: u32,
    isr: VectorSet,
    tmr: VectorSet,
    irr: VectorSet,
    esr: u32,
    esr_pending: u32,
    /// xAPIC: low word = ICR low, high word = ICR high register (dest in
    /// bits 31:24). x2APIC: the 64-bit ICR.
    icr: u64,
    lvt: [u32; LVT_COUNT],
    timer: Timer,
    events: CpuEvents,
    pv_eoi: PvEoi,
}

impl Lapic {
    /// The power-up state: xAPIC mode at the default base, software
    /// disabled, every LVT masked; vCPU 0 is the BSP.
    pub(crate) fn new(vcpu: u32) -> Lapic {
        let bsp = if vcpu == 0 { APIC_BASE_BSP } else { 0 };
        Lapic {
            vcpu,
            apic_base: DEFAULT_APIC_BASE | APIC_BASE_ENABLE | bsp,
            id: vcpu,
            tpr: 0,
            ldr: 0,
            dfr: DFR_RESET,
            svr: SVR_RESET,
            isr: VectorSet::default(),
            tmr: VectorSet::default(),
            irr: VectorSet::default(),
            esr: 0,
            esr_pending: 0,
            icr: 0,
            lvt: [LVT_RESET; LVT_COUNT],
            timer: Timer::default(),
            events: CpuEvents::default(),
            pv_eoi: PvEoi::default(),
        }
    }

    pub(crate) fn mode(&self) -> ApicMode {
        match (
            self.apic_base & APIC_BASE_ENABLE != 0,
            self.apic_base & APIC_BASE_EXTD != 0,
        ) {
            (true, true) => ApicMode::X2Apic,
            (true, false) => ApicMode::XApic,
            // EXTD without EN is refused by `write_apic_base`.
            (false, _) => ApicMode::Disabled,
        }
    }

    fn hw_enabled(&self) -> bool {
        self.mode() != ApicMode::Disabled
    }

    pub(crate) fn sw_enabled(&self) -> bool {
        self.svr & SVR_SW_ENABLE != 0
    }

    // ------------------------------------------------------------------
    // Priorities.

    /// PPR: TPR if its class is at least that of the highest in-service
    /// vector, else that vector's class.
    pub(crate) fn ppr(&self) -> u32 {
        let isrv = u32::from(self.isr.highest().unwrap_or(0));
        if self.tpr >> 4 >= isrv >> 4 {
            self.tpr
        } else {
            isrv & 0xF0
        }
    }

    /// APR (xAPIC): the priority this APIC bids with for lowest-priority
    /// messages.
    pub(crate) fn apr(&self) -> u32 {
        let irrv = u32::from(self.irr.highest().unwrap_or(0));
        let isrv = u32::from(self.isr.highest().unwrap_or(0));
        if self.tpr >> 4 >= irrv >> 4 && self.tpr >> 4 > isrv >> 4 {
            self.tpr
        } else {
            (self.tpr & 0xF0).max(isrv & 0xF0).max(irrv & 0xF0)
        }
    }

    /// The highest requested vector whose class is above the PPR's.
    pub(crate) fn deliverable(&self) -> Option<u8> {
        if !self.hw_enabled() {
            return None;
        }
        let v = self.irr.highest()?;
        (u32::from(v) >> 4 > self.ppr() >> 4).then_some(v)
    }

    /// INTA: move the deliverable vector from IRR to ISR.
    pub(crate) fn acknowledge(&mut self) -> Option<u8> {
        let v = self.deliverable()?;
        self.irr.clear(v);
        self.isr.set(v);
        Some(v)
    }

    /// INTA for a vector the VMM already injected: IRR -> ISR if it is
    /// still requested (false otherwise).
    pub(crate) fn acknowledge_vector(&mut self, vector: u8) -> bool {
        if !self.irr.test(vector) {
            return false;
        }
        self.irr.clear(vector);
        self.isr.set(vector);
        true
    }

    /// Anything for the vCPU to take: what `has_pending_hint` mirrors.
    pub(crate) fn has_work(&self) -> bool {
        self.deliverable().is_some() || !self.events.is_empty()
    }

    pub(crate) fn take_events(&mut self) -> CpuEvents {
        std::mem::take(&mut self.events)
    }

    /// Is the vector requested or in service (lowest-priority focus)?
    pub(crate) fn is_focus_for(&self, vector: u8) -> bool {
        self.svr & SVR_FOCUS_DISABLE == 0 && (self.irr.test(vector) || self.isr.test(vector))
    }

    pub(crate) fn cr8(&self) -> u64 {
        u64::from(self.tpr >> 4)
    }

    /// MOV to CR8 sets TPR[7:4] and clears TPR[3:0].
    pub(crate) fn set_cr8(&mut self, cr8: u64) {
        self.tpr = ((cr8 & 0xF) as u32) << 4;
    }

    // ------------------------------------------------------------------
    // Receiving.

    /// What routing needs to know of this APIC (see [`RouteKey`]).
    pub(crate) fn route_key(&self) -> RouteKey {
        let mode = self.mode();
        RouteKey {
            mode,
            id: match mode {
                ApicMode::X2Apic => self.id,
                _ => self.id & 0xFF,
            },
            logical_id: (self.ldr >> LDR_XAPIC_SHIFT) as u8,
            dfr_model: (self.dfr >> DFR_MODEL_SHIFT) as u8,
        }
    }

    /// Is `dest` this APIC? A hardware-disabled APIC matches nothing.
    pub(crate) fn matches(&self, dest: &Destination, source: Option<u32>) -> bool {
        self.route_key().matches(self.vcpu, dest, source)
    }

    /// Take a message addressed to this APIC.
    pub(crate) fn accept(&mut self, msg: &Message, host: &dyn IrqChipHost) -> Acceptance {
        if !self.hw_enabled() {
            return Acceptance::default();
        }
        let event = Acceptance {
            accepted: true,
            notify: true,
        };
        match msg.mode {
            DeliveryMode::Fixed | DeliveryMode::LowestPriority => {
                // A level de-assert carries no interrupt.
                if msg.level_trigger && !msg.assert {
                    return Acceptance::default();
                }
                let irr_before = self.irr;
                let accepted = self.accept_fixed(msg.vector, msg.level_trigger);
                // A refused illegal vector may still raise the error interrupt.
                Acceptance {
                    accepted,
                    notify: self.irr != irr_before && self.deliverable().is_some(),
                }
            }
            DeliveryMode::Nmi => {
                self.events.nmis = self.events.nmis.saturating_add(1);
                event
            }
            DeliveryMode::Init => {
                // INIT level de-assert does nothing.
                if msg.level_trigger && !msg.assert {
                    return Acceptance::default();
                }
                self.init(host);
                event
            }
            DeliveryMode::Startup => {
                self.events.sipi = Some(msg.vector);
                event
            }
            // No SMM; no 8259 behind ExtINT; reserved encodings.
            DeliveryMode::Smi | DeliveryMode::ExtInt | DeliveryMode::Reserved => {
                log::debug!(
                    "vcpu{}: {:?} message ignored (not modelled)",
                    self.vcpu,
                    msg.mode
                );
                Acceptance::default()
            }
        }
    }

    /// Set an IRR bit (and the TMR bit to the trigger mode). Illegal
    /// vectors and a software-disabled APIC refuse it.
    fn accept_fixed(&mut self, vector: u8, level_trigger: bool) -> bool {
        if vector < FIRST_LEGAL_VECTOR {
            self.raise_error(ESR_RECEIVE_ILLEGAL_VECTOR);
            return false;
        }
        if !self.sw_enabled() {
            return false;
        }
        self.irr.set(vector);
        if level_trigger {
            self.tmr.set(vector);
        } else {
            self.tmr.clear(vector);
        }
        true
    }

    /// Record an error and raise the LVT error interrupt. An illegal vector
    /// in the LVT error entry itself is recorded but raises nothing more.
    fn raise_error(&mut self, bits: u32) {
        self.esr_pending |= bits;
        let lvt = self.lvt[LVT_ERROR];
        if lvt & LVT_MASKED != 0 {
            return;
        }
        let vector = (lvt & LVT_VECTOR_MASK) as u8;
        if vector < FIRST_LEGAL_VECTOR {
            self.esr_pending |= ESR_RECEIVE_ILLEGAL_VECTOR;
        } else if self.sw_enabled() {
            self.irr.set(vector);
            self.tmr.clear(vector);
        }
    }

    /// INIT: back to the power-up register state, except IA32_APIC_BASE
    /// (mode and base) and the APIC id; the vCPU is told to reset.
    fn init(&mut self, host: &dyn IrqChipHost) {
        let id = self.id;
        self.reset_registers(host);
        self.id = id;
        if self.mode() == ApicMode::X2Apic {
            self.ldr = x2apic_ldr(id);
        }
        self.events = CpuEvents {
            init: true,
            ..CpuEvents::default()
        };
    }

    /// Every register to its power-up value (the id included), timer off.
    fn reset_registers(&mut self, host: &dyn IrqChipHost) {
        self.id = self.vcpu;
        self.tpr = 0;
        self.ldr = 0;
        self.dfr = DFR_RESET;
        self.svr = SVR_RESET;
        self.isr = VectorSet::default();
        self.tmr = VectorSet::default();
        self.irr = VectorSet::default();
        self.esr = 0;
        self.esr_pending = 0;
        self.icr = 0;
        self.lvt = [LVT_RESET; LVT_COUNT];
        self.set_deadline(None, host);
        self.timer = Timer::default();
        // The guest enables PV EOI again after a reset (Linux does, per CPU).
        self.pv_eoi = PvEoi::default();
    }

    // ------------------------------------------------------------------
    // IA32_APIC_BASE.

    /// A WRMSR to IA32_APIC_BASE. The BSP flag is read-only; EXTD is
    /// reserved without x2APIC in the guest's CPUID.
    pub(crate) fn write_apic_base(
        &mut self,
        value: u64,
        cpu: GuestCpu,
        host: &dyn IrqChipHost,
    ) -> Result<(), MsrFault> {
        let bits = u32::from(
            cpu.phys_addr_bits
                .clamp(APIC_BASE_ADDR_SHIFT as u8, MAX_PHYS_ADDR_BITS),
        );
        let above_phys = !((1u64 << bits) - 1);
        let no_x2apic = if cpu.x2apic { 0 } else { APIC_BASE_EXTD };
        if value & (APIC_BASE_RESERVED_LOW | above_phys | no_x2apic) != 0 {
            return Err(MsrFault::ReservedBits {
                msr: MSR_IA32_APIC_BASE,
                value,
            });
        }
        if value & APIC_BASE_EXTD != 0 && value & APIC_BASE_ENABLE == 0 {
            return Err(MsrFault::IllegalTransition { value });
        }
        let value = (value & !APIC_BASE_BSP) | (self.apic_base & APIC_BASE_BSP);
        let old = self.mode();
        let old_base = std::mem::replace(&mut self.apic_base, value);
        let new = self.mode();
        match (old, new) {
            (ApicMode::X2Apic, ApicMode::XApic) | (ApicMode::Disabled, ApicMode::X2Apic) => {
                self.apic_base = old_base;
                return Err(MsrFault::IllegalTransition { value });
            }
            _ if old == new => {}
            // Registers are not kept across a disable: power-up state.
            (_, ApicMode::Disabled) => self.reset_registers(host),
            (_, ApicMode::XApic) => self.id = self.vcpu,
            (_, ApicMode::X2Apic) => {
                self.id = self.vcpu;
                self.ldr = x2apic_ldr(self.vcpu);
            }
        }
        Ok(())
    }

    pub(crate) fn state(&self, host: &dyn IrqChipHost) -> LapicState {
        LapicState {
            vcpu: self.vcpu,
            mode: self.mode(),
            apic_base: self.apic_base,
            id: self.route_key().id,
            version: APIC_VERSION_VALUE,
            tpr: self.tpr,
            apr: self.apr(),
            ppr: self.ppr(),
            ldr: self.ldr,
            dfr: self.dfr,
            svr: self.svr,
            isr: self.isr.words(),
            tmr: self.tmr.words(),
            irr: self.irr.words(),
            esr: self.esr,
            esr_pending: self.esr_pending,
            icr: self.icr,
            lvt: self.lvt,
            timer_initial: self.timer.initial,
            timer_current: self.current_count(host.now_ns()),
            timer_divide: self.timer.divide,
            tsc_deadline: self.timer.tsc_deadline,
            timer_deadline_ns: self.timer.deadline_ns,
            pending_events: self.events,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_set_words_and_highest() {
        let mut s = VectorSet::default();
        assert_eq!(s.highest(), None);
        for v in [16u8, 31, 32, 100, 255] {
            s.set(v);
        }
        assert_eq!(s.highest(), Some(255));
        assert_eq!(s.word(0), 1 << 16 | 1 << 31);
        assert_eq!(s.word(1), 1);
        assert_eq!(s.word(3), 1 << (100 - 96));
        assert_eq!(s.word(7), 1 << 31);
        s.clear(255);
        assert_eq!(s.highest(), Some(100));
        assert!(s.test(32) && !s.test(33));
    }

    #[test]
    fn x2apic_logical_ids() {
        assert_eq!(x2apic_ldr(0), 0x0000_0001);
        assert_eq!(x2apic_ldr(5), 0x0000_0020);
        assert_eq!(x2apic_ldr(17), 0x0001_0002);
    }
}
