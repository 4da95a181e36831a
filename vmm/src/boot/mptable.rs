//! The Intel MultiProcessor Specification 1.4 tables: how a kernel without
//! ACPI (or booted with `acpi=off`) learns the CPUs and the interrupt
//! routing. Debian's generic kernel parses them (CONFIG_X86_MPPARSE); with
//! ACPI present it prefers the MADT but still finds and reports these.
//!
//! Layout, all in the BIOS area at 0xF0000 where kernels scan for it:
//!
//! - the MP floating pointer structure ("_MP_", 16 bytes), pointing at
//! - the configuration table ("PCMP" header, 44 bytes) and its entries:
//!   one processor entry per vCPU (APIC id = vCPU index, as CPUID says;
//!   vCPU 0 is the boot processor), the ISA bus, the I/O APIC, one I/O
//!   interrupt entry per ISA IRQ (IRQ 0 on pin 2 as on a PC, IRQ 2 the
//!   8259 cascade left out, the rest identity-mapped, polarity and trigger
//!   "conforms to the bus": edge, active high), and the local interrupts
//!   (ExtINT on LINT0, NMI on LINT1, for every local APIC).
//!
//! Feature byte 2 has IMCRP clear: the platform is in virtual-wire mode,
//! there is no IMCR to switch (and no 8259 under Pacer's own interrupt
//! controller). Both checksums make their byte ranges sum to 0.

use super::layout::{IOAPIC_ADDR, IOAPIC_ID, IOAPIC_VERSION, LAPIC_ADDR, LAPIC_VERSION};
use crate::cpuid::apic_id;

pub const MPF_SIGNATURE: &[u8; 4] = b"_MP_";
pub const MPC_SIGNATURE: &[u8; 4] = b"PCMP";
pub const MPF_LEN: usize = 16;
pub const MPC_HEADER_LEN: usize = 44;
pub const SPEC_REVISION: u8 = 4;

pub const ENTRY_PROCESSOR: u8 = 0;
pub const ENTRY_BUS: u8 = 1;
pub const ENTRY_IOAPIC: u8 = 2;
pub const ENTRY_IO_INTERRUPT: u8 = 3;
pub const ENTRY_LOCAL_INTERRUPT: u8 = 4;
pub const PROCESSOR_ENTRY_LEN: usize = 20;
pub const OTHER_ENTRY_LEN: usize = 8;

/// Processor flags.
pub const CPU_ENABLED: u8 = 1 << 0;
pub const CPU_BOOT_PROCESSOR: u8 = 1 << 1;
/// I/O APIC flags.
pub const IOAPIC_ENABLED: u8 = 1;
/// Interrupt types.
pub const INT_VECTORED: u8 = 0;
pub const INT_NMI: u8 = 1;
pub const INT_EXTINT: u8 = 3;
/// Destination "every local APIC".
pub const ALL_LAPICS: u8 = 0xFF;
pub const ISA_BUS_ID: u8 = 0;
/// ISA IRQs and the I/O APIC pin each arrives on (IRQ 2, the cascade of
/// the 8259 pair, has none).
pub fn isa_irq_pins() -> impl Iterator<Item = (u8, u8)> {
    (0u8..16)
        .filter(|&irq| irq != 2)
        .map(|irq| (irq, if irq == 0 { 2 } else { irq }))
}

/// CPU signature and feature flags of the processor entries: family 6 and
/// FPU + APIC (what kernels look at; the real values come from CPUID).
const CPU_SIGNATURE: u32 = 0x600;
const CPU_FEATURES: u32 = (1 << 0) | (1 << 9);
const OEM_ID: &[u8; 8] = b"PACER   ";
const PRODUCT_ID: &[u8; 12] = b"PACER VM    ";

/// Errors of this module.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MpTableError {
    #[error("{0} vCPUs do not fit in an MP table (at most 254: APIC ids 0-253)")]
    TooManyCpus(u32),
}

fn checksum(b: &[u8]) -> u8 {
    0u8.wrapping_sub(b.iter().fold(0u8, |a, x| a.wrapping_add(*x)))
}

/// The bytes to put at `addr`: the MP floating pointer, then directly the
/// configuration table for `vcpus` vCPUs.
pub fn build(addr: u64, vcpus: u32) -> Result<Vec<u8>, MpTableError> {
    if vcpus == 0 || vcpus > 254 {
        return Err(MpTableError::TooManyCpus(vcpus));
    }
    let mut entries: Vec<u8> = Vec::new();
    let mut count: u16 = 0;
    for cpu in 0..vcpus {
        let mut e = [0u8; PROCESSOR_ENTRY_LEN];
        e[0] = ENTRY_PROCESSOR;
        e[1] = apic_id(cpu) as u8;
        e[2] = LAPIC_VERSION;
        e[3] = CPU_ENABLED | if cpu == 0 { CPU_BOOT_PROCESSOR } else { 0 };
        e[4..8].copy_from_slice(&CPU_SIGNATURE.to_le_bytes());
        e[8..12].copy_from_slice(&CPU_FEATURES.to_le_bytes());
        entries.extend_from_slice(&e);
        count += 1;
    }
    entries.extend_from_slice(&[ENTRY_BUS, ISA_BUS_ID, b'I', b'S', b'A', b' ', b' ', b' ']);
    count += 1;
    let mut ioapic = [
        ENTRY_IOAPIC,
        IOAPIC_ID,
        IOAPIC_VERSION,
        IOAPIC_ENABLED,
        0,
        0,
        0,
        0,
    ];
    ioapic[4..8].copy_from_slice(&IOAPIC_ADDR.to_le_bytes());
    entries.extend_from_slice(&ioapic);
    count += 1;
    for (irq, pin) in isa_irq_pins() {
        entries.extend_from_slice(&[
            ENTRY_IO_INTERRUPT,
            INT_VECTORED,
            0,
            0,
            ISA_BUS_ID,
            irq,
            IOAPIC_ID,
            pin,
        ]);
        count += 1;
    }
    for (kind, lint) in [(INT_EXTINT, 0u8), (INT_NMI, 1)] {
        entries.extend_from_slice(&[
            ENTRY_LOCAL_INTERRUPT,
            kind,
            0,
            0,
            ISA_BUS_ID,
            0,
            ALL_LAPICS,
            lint,
        ]);
        count += 1;
    }

    let table_len = MPC_HEADER_LEN + entries.len();
    let mut mpc = vec![0u8; MPC_HEADER_LEN];
    mpc[0..4].copy_from_slice(MPC_SIGNATURE);
    mpc[4..6].copy_from_slice(&(table_len as u16).to_le_bytes());
    mpc[6] = SPEC_REVISION;
    mpc[8..16].copy_from_slice(OEM_ID);
    mpc[16..28].copy_from_slice(PRODUCT_ID);
    mpc[34..36].copy_from_slice(&count.to_le_bytes());
    mpc[36..40].copy_from_slice(&LAPIC_ADDR.to_le_bytes());
    mpc.extend_from_slice(&entries);
    mpc[7] = checksum(&mpc);

    let mut mpf = [0u8; MPF_LEN];
    mpf[0..4].copy_from_slice(MPF_SIGNATURE);
    mpf[4..8].copy_from_slice(&((addr + MPF_LEN as u64) as u32).to_le_bytes());
    mpf[8] = 1; // length in 16-byte units
    mpf[9] = SPEC_REVISION;
    mpf[10] = checksum(&mpf);

    let mut out = mpf.to_vec();
    out.extend_from_slice(&mpc);
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn sums_to_zero(b: &[u8]) -> bool {
        b.iter().fold(0u8, |a, x| a.wrapping_add(*x)) == 0
    }

    /// What a kernel's MP parser gets out of the tables.
    #[derive(Debug, Default)]
    pub(crate) struct Parsed {
        pub(crate) cpus: Vec<(u8, u8)>,
        buses: Vec<(u8, [u8; 6])>,
        ioapics: Vec<(u8, u8, u32)>,
        io_ints: Vec<(u8, u8, u8, u8)>,
        local_ints: Vec<(u8, u8, u8)>,
        lapic: u32,
    }

    /// Parse as Linux's mpparse does: find the pointer, check both
    /// checksums, walk the entries by their types' lengths.
    pub(crate) fn parse(bytes: &[u8], base: u64) -> Parsed {
        let mpf = &bytes[..MPF_LEN];
        assert_eq!(&mpf[0..4], MPF_SIGNATURE);
        assert!(sums_to_zero(mpf), "floating pointer checksum");
        assert_eq!((mpf[8], mpf[9], mpf[11], mpf[12]), (1, 4, 0, 0));
        let at = u32::from_le_bytes(mpf[4..8].try_into().unwrap()) as u64 - base;
        let mpc = &bytes[at as usize..];
        assert_eq!(&mpc[0..4], MPC_SIGNATURE);
        let len = u16::from_le_bytes([mpc[4], mpc[5]]) as usize;
        assert_eq!(len, mpc.len(), "base table length");
        assert!(sums_to_zero(&mpc[..len]), "configuration table checksum");
        assert_eq!(mpc[6], 4);
        let count = u16::from_le_bytes([mpc[34], mpc[35]]);
        let mut p = Parsed {
            lapic: u32::from_le_bytes(mpc[36..40].try_into().unwrap()),
            ..Default::default()
        };
        let mut off = MPC_HEADER_LEN;
        for _ in 0..count {
            let e = &mpc[off..];
            match e[0] {
                ENTRY_PROCESSOR => {
                    p.cpus.push((e[1], e[3]));
                    off += PROCESSOR_ENTRY_LEN;
                    continue;
                }
                ENTRY_BUS => p.buses.push((e[1], e[2..8].try_into().unwrap())),
                ENTRY_IOAPIC => {
                    p.ioapics
                        .push((e[1], e[3], u32::from_le_bytes(e[4..8].try_into().unwrap())))
                }
                ENTRY_IO_INTERRUPT => p.io_ints.push((e[1], e[5], e[6], e[7])),
                ENTRY_LOCAL_INTERRUPT => p.local_ints.push((e[1], e[6], e[7])),
                t => panic!("unknown entry type {t}"),
            }
            off += OTHER_ENTRY_LEN;
        }
        assert_eq!(off, len, "entries fill the table exactly");
        p
    }

    #[test]
    fn one_processor_entry_per_vcpu() {
        for n in [1u32, 2, 8, 64, 254] {
            let b = build(0xF0000, n).unwrap();
            assert!(b.len() as u64 <= super::super::layout::MPTABLE_END - 0xF0000);
            let p = parse(&b, 0xF0000);
            assert_eq!(p.cpus.len(), n as usize, "{n} vCPUs");
            for (i, &(id, flags)) in p.cpus.iter().enumerate() {
                assert_eq!(u32::from(id), apic_id(i as u32));
                let bsp = if i == 0 { CPU_BOOT_PROCESSOR } else { 0 };
                assert_eq!(flags, CPU_ENABLED | bsp);
            }
            assert_eq!(p.lapic, 0xFEE0_0000);
        }
    }

    #[test]
    fn ioapic_bus_and_isa_routing() {
        let p = parse(&build(0xF0000, 2).unwrap(), 0xF0000);
        assert_eq!(p.buses, vec![(0, *b"ISA   ")]);
        assert_eq!(p.ioapics, vec![(0, IOAPIC_ENABLED, 0xFEC0_0000)]);
        assert_eq!(p.io_ints.len(), 15);
        // (type, source IRQ, I/O APIC id, pin)
        assert!(p.io_ints.contains(&(INT_VECTORED, 0, 0, 2)));
        assert!(p.io_ints.contains(&(INT_VECTORED, 4, 0, 4)), "COM1");
        assert!(!p.io_ints.iter().any(|e| e.1 == 2), "no cascade");
        assert_eq!(
            p.local_ints,
            vec![(INT_EXTINT, ALL_LAPICS, 0), (INT_NMI, ALL_LAPICS, 1)]
        );
    }

    #[test]
    fn vcpu_counts_out_of_range() {
        assert_eq!(build(0xF0000, 0), Err(MpTableError::TooManyCpus(0)));
        assert_eq!(build(0xF0000, 255), Err(MpTableError::TooManyCpus(255)));
    }
}
