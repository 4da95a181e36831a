//! The ACPI MADT ("APIC" table): how an ACPI kernel learns the CPUs and the
//! interrupt controllers. Built with `acpi_tables`' MADT, which has the
//! processor local APIC and I/O APIC structures; the interrupt source
//! override and local APIC NMI structures (ACPI 6.5 sections 5.2.12.5 and
//! 5.2.12.7) are defined here in the same style.
//!
//! Contents:
//! - the local APIC address 0xFEE00000 and flags 0: PCAT_COMPAT clear,
//!   since the platform has no 8259 pair to disable (Pacer's interrupt
//!   controller has none; under `policy = "host"` KVM's in-kernel 8259s
//!   exist, and Linux finds them by probing, not through this flag);
//! - one processor local APIC structure per vCPU, enabled, ACPI processor
//!   UID = APIC id = vCPU index (CPUID says the same);
//! - the I/O APIC, id 0, GSIs 0-23;
//! - interrupt source overrides as on a PC: ISA IRQ 0 arrives on GSI 2,
//!   and IRQ 9 (the SCI) is level-triggered, active high. Every other ISA
//!   IRQ is identity-mapped, edge, active high by default (COM1: GSI 4);
//! - local APIC NMI on LINT1 for every processor (UID 0xFF).

use super::layout::{IOAPIC_ADDR, IOAPIC_ID, LAPIC_ADDR};
use crate::cpuid::apic_id;
use acpi_tables::madt::{
    EnabledStatus, IoApic, LocalInterruptController, ProcessorLocalApic, MADT,
};
use acpi_tables::{Aml, AmlSink};
use zerocopy::{byteorder::LE, Immutable, IntoBytes, U16, U32};

/// MPS INTI flags: polarity (bits 1:0) and trigger mode (bits 3:2).
pub const POLARITY_ACTIVE_HIGH: u16 = 0b01;
pub const TRIGGER_EDGE: u16 = 0b01 << 2;
pub const TRIGGER_LEVEL: u16 = 0b11 << 2;
/// The SCI's ISA IRQ (the FADT's SCI_INT).
pub const SCI_IRQ: u8 = 9;
/// "Every processor" in a local APIC NMI structure.
pub const ALL_PROCESSORS: u8 = 0xFF;

const TYPE_INTERRUPT_SOURCE_OVERRIDE: u8 = 2;
const TYPE_LOCAL_APIC_NMI: u8 = 4;

/// Interrupt Source Override structure (10 bytes).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, IntoBytes, Immutable)]
pub struct InterruptSourceOverride {
    r#type: u8,
    length: u8,
    bus: u8,
    source: u8,
    gsi: U32<LE>,
    flags: U16<LE>,
}

impl InterruptSourceOverride {
    /// ISA IRQ `source` arrives on `gsi` with MPS INTI `flags`.
    pub fn isa(source: u8, gsi: u32, flags: u16) -> Self {
        Self {
            r#type: TYPE_INTERRUPT_SOURCE_OVERRIDE,
            length: 10,
            bus: 0,
            source,
            gsi: gsi.into(),
            flags: flags.into(),
        }
    }
}

impl Aml for InterruptSourceOverride {
    fn to_aml_bytes(&self, sink: &mut dyn AmlSink) {
        sink.vec(self.as_bytes());
    }
}

/// Local APIC NMI structure (6 bytes).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, IntoBytes, Immutable)]
pub struct LocalApicNmi {
    r#type: u8,
    length: u8,
    processor_uid: u8,
    flags: U16<LE>,
    lint: u8,
}

impl LocalApicNmi {
    pub fn new(processor_uid: u8, flags: u16, lint: u8) -> Self {
        Self {
            r#type: TYPE_LOCAL_APIC_NMI,
            length: 6,
            processor_uid,
            flags: flags.into(),
            lint,
        }
    }
}

impl Aml for LocalApicNmi {
    fn to_aml_bytes(&self, sink: &mut dyn AmlSink) {
        sink.vec(self.as_bytes());
    }
}

/// The MADT of a VM with `vcpus` vCPUs (1-254).
pub fn build(oem_id: [u8; 6], oem_revision: u32, vcpus: u32) -> Vec<u8> {
    let mut madt = MADT::new(
        oem_id,
        *b"PACERAPC",
        oem_revision,
        LocalInterruptController::Address(LAPIC_ADDR),
    );
    for cpu in 0..vcpus.min(254) {
        let id = apic_id(cpu) as u8;
        madt.add_structure(ProcessorLocalApic::new(id, id, EnabledStatus::Enabled));
    }
    madt.add_structure(IoApic::new(IOAPIC_ID, IOAPIC_ADDR, 0));
    madt.add_structure(InterruptSourceOverride::isa(0, 2, 0));
    madt.add_structure(InterruptSourceOverride::isa(
        SCI_IRQ,
        u32::from(SCI_IRQ),
        POLARITY_ACTIVE_HIGH | TRIGGER_LEVEL,
    ));
    madt.add_structure(LocalApicNmi::new(
        ALL_PROCESSORS,
        POLARITY_ACTIVE_HIGH | TRIGGER_EDGE,
        1,
    ));
    let mut out = Vec::new();
    madt.to_aml_bytes(&mut out);
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A MADT read back: local APIC address, flags, and its structures
    /// as (type, bytes).
    pub(crate) fn parse(t: &[u8]) -> (u32, u32, Vec<(u8, Vec<u8>)>) {
        assert_eq!(&t[0..4], b"APIC");
        let len = u32::from_le_bytes(t[4..8].try_into().unwrap()) as usize;
        assert_eq!(len, t.len());
        assert_eq!(t.iter().fold(0u8, |a, x| a.wrapping_add(*x)), 0, "checksum");
        let lapic = u32::from_le_bytes(t[36..40].try_into().unwrap());
        let flags = u32::from_le_bytes(t[40..44].try_into().unwrap());
        let mut out = Vec::new();
        let mut at = 44;
        while at < len {
            let (ty, l) = (t[at], t[at + 1] as usize);
            assert!(l >= 2 && at + l <= len, "structure at {at}");
            out.push((ty, t[at..at + l].to_vec()));
            at += l;
        }
        (lapic, flags, out)
    }

    #[test]
    fn one_local_apic_per_vcpu() {
        for n in [1u32, 2, 8, 64, 254] {
            let (lapic, flags, s) = parse(&build(*b"PACER ", 1, n));
            assert_eq!(lapic, 0xFEE0_0000);
            assert_eq!(flags & 1, 0, "PCAT_COMPAT clear");
            let cpus: Vec<&Vec<u8>> = s.iter().filter(|(t, _)| *t == 0).map(|(_, b)| b).collect();
            assert_eq!(cpus.len(), n as usize);
            for (i, b) in cpus.iter().enumerate() {
                assert_eq!(b.len(), 8);
                // UID, APIC id, flags (enabled).
                assert_eq!(
                    (u32::from(b[2]), u32::from(b[3])),
                    (i as u32, apic_id(i as u32))
                );
                assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), 1);
            }
        }
    }

    #[test]
    fn ioapic_overrides_and_nmi() {
        let (_, _, s) = parse(&build(*b"PACER ", 1, 2));
        let of = |ty: u8| -> Vec<Vec<u8>> {
            s.iter()
                .filter(|(t, _)| *t == ty)
                .map(|(_, b)| b.clone())
                .collect()
        };
        let io = of(1);
        assert_eq!(io.len(), 1);
        assert_eq!(io[0][2], 0, "I/O APIC id");
        assert_eq!(
            u32::from_le_bytes(io[0][4..8].try_into().unwrap()),
            0xFEC0_0000
        );
        assert_eq!(
            u32::from_le_bytes(io[0][8..12].try_into().unwrap()),
            0,
            "GSI base"
        );
        // (bus, source IRQ, GSI, flags)
        let ovr: Vec<(u8, u8, u32, u16)> = of(2)
            .iter()
            .map(|b| {
                assert_eq!(b.len(), 10);
                (
                    b[2],
                    b[3],
                    u32::from_le_bytes(b[4..8].try_into().unwrap()),
                    u16::from_le_bytes([b[8], b[9]]),
                )
            })
            .collect();
        assert_eq!(ovr, vec![(0, 0, 2, 0), (0, 9, 9, 0x000D)]);
        let nmi = of(4);
        assert_eq!(nmi, vec![vec![4, 6, 0xFF, 0x05, 0x00, 1]]);
        // Nothing else.
        assert_eq!(s.len(), 2 + 1 + 2 + 1);
    }
}
