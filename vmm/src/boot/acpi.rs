//! ACPI tables, built with the rust-vmm `acpi_tables` crate (checksums
//! included), in the BIOS area where guests scan for the RSDP
//! (0xE0000-0xFFFFF). Two sets:
//!
//! - [`tables`], for multiboot guests (QEMU-targeted tests): an RSDP, an
//!   XSDT with one entry, and a FADT whose only job is to name the PM timer
//!   port (`devices::pm_timer`); kvm-unit-tests' vmexit `inl_from_pmtimer`
//!   finds the timer this way. No DSDT, no MADT: CPUs are counted through
//!   fw_cfg.
//! - [`linux_tables`], for Linux guests: RSDP -> XSDT -> FADT and MADT
//!   (`madt.rs`); the FADT names the FACS, the DSDT, the PM timer and the
//!   PM1a event and control blocks (`devices::acpi_pm`: writing S5 there
//!   stops the VM), and an ACPI reset register (0xFE to port 0x64, the
//!   i8042 reset that also stops the VM). The DSDT holds only `\_S5_`, the
//!   soft-off sleep type. Not hardware-reduced ACPI: Linux then takes the
//!   PC path (legacy ISA IRQs identity-mapped on the I/O APIC, COM1 on pin
//!   4 without DSDT devices) and finds out by itself that there is no PIT
//!   to use (the TSC frequency is known from kvmclock, the local APIC
//!   has the TSC-deadline timer and ARAT) and, under Pacer's interrupt
//!   controller, no 8259 (its probe reads 0xFF). IAPC_BOOT_ARCH says: no
//!   i8042 to probe, no VGA, no CMOS RTC, no MSI. Processor C2/C3 are
//!   marked unsupported.

use super::layout::{
    ACPI_FADT_ADDR, ACPI_RSDP_ADDR, ACPI_XSDT_ADDR, LINUX_ACPI_END, LINUX_ACPI_START,
};
use super::{madt, BootError};
use acpi_tables::aml::{Name, Package, Path};
use acpi_tables::facs::FACS;
use acpi_tables::fadt::{FADTBuilder, Flags};
use acpi_tables::gas::{AccessSize, AddressSpace, GAS};
use acpi_tables::rsdp::Rsdp;
use acpi_tables::sdt::Sdt;
use acpi_tables::xsdt::XSDT;
use acpi_tables::Aml;
use devices::acpi_pm::{PM1A_CNT_PORT, PM1A_EVT_PORT, PM1_CNT_LEN, PM1_EVT_LEN, S5_SLP_TYP};
use devices::i8042::I8042_BASE;
use devices::pm_timer::{PM_TIMER_LEN, PM_TIMER_PORT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

const OEM_ID: [u8; 6] = *b"PACER ";
const OEM_REVISION: u32 = 1;

/// The tables as (address, bytes).
pub fn tables() -> Vec<(u64, Vec<u8>)> {
    let mut fadt = FADTBuilder::new(OEM_ID, *b"PACERFAD", OEM_REVISION);
    fadt.pm_tmr_blk = u32::from(PM_TIMER_PORT).into();
    fadt.pm_tmr_len = PM_TIMER_LEN as u8;
    fadt.x_pm_tmr_blk = GAS::new(
        AddressSpace::SystemIo,
        32,
        0,
        AccessSize::DwordAccess,
        u64::from(PM_TIMER_PORT),
    );
    let fadt = fadt.finalize();
    let mut xsdt = XSDT::new(OEM_ID, *b"PACERXSD", OEM_REVISION);
    xsdt.add_entry(ACPI_FADT_ADDR);
    let rsdp = Rsdp::new(OEM_ID, ACPI_XSDT_ADDR);
    let bytes = |t: &dyn Aml| {
        let mut v = Vec::new();
        t.to_aml_bytes(&mut v);
        v
    };
    vec![
        (ACPI_RSDP_ADDR, bytes(&rsdp)),
        (ACPI_XSDT_ADDR, bytes(&xsdt)),
        (ACPI_FADT_ADDR, bytes(&fadt)),
    ]
}

/// IAPC_BOOT_ARCH flags (ACPI 6.5 table 5.11).
pub const IAPC_LEGACY_DEVICES: u16 = 1 << 0;
pub const IAPC_8042: u16 = 1 << 1;
pub const IAPC_VGA_NOT_PRESENT: u16 = 1 << 2;
pub const IAPC_MSI_NOT_SUPPORTED: u16 = 1 << 3;
pub const IAPC_CMOS_RTC_NOT_PRESENT: u16 = 1 << 5;
/// The i8042 command port and its "pulse reset" command.
pub const RESET_PORT: u16 = I8042_BASE + 4;
pub const RESET_VALUE: u8 = 0xFE;
/// P_LVL2_LAT > 100 and P_LVL3_LAT > 1000: no C2, no C3.
const NO_C2_LATENCY: u16 = 101;
const NO_C3_LATENCY: u16 = 1001;

fn io_gas(port: u16, bytes: u8) -> GAS {
    let access = match bytes {
        1 => AccessSize::ByteAccess,
        2 => AccessSize::WordAccess,
        _ => AccessSize::DwordAccess,
    };
    GAS::new(
        AddressSpace::SystemIo,
        bytes * 8,
        0,
        access,
        u64::from(port),
    )
}

fn aml_bytes(t: &dyn Aml) -> Vec<u8> {
    let mut v = Vec::new();
    t.to_aml_bytes(&mut v);
    v
}

/// The DSDT: a definition block holding `\_S5_` = { SLP_TYPa, SLP_TYPb,
/// 0, 0 }, what the OS writes into PM1_CNT.SLP_TYP to power off.
pub fn linux_dsdt() -> Vec<u8> {
    let mut dsdt = Sdt::new(*b"DSDT", 36, 2, OEM_ID, *b"PACERDSD", OEM_REVISION);
    let s5 = Name::new(
        Path::new("_S5_"),
        &Package::new(vec![&S5_SLP_TYP, &S5_SLP_TYP, &0u8, &0u8]),
    );
    dsdt.append_slice(&aml_bytes(&s5));
    dsdt.as_slice().to_vec()
}

fn linux_fadt(facs_addr: u64, dsdt_addr: u64) -> Vec<u8> {
    let mut f = FADTBuilder::new(OEM_ID, *b"PACERFAD", OEM_REVISION)
        .firmware_ctrl_64(facs_addr)
        .dsdt_64(dsdt_addr)
        .flag(Flags::Wbinvd)
        .flag(Flags::ProcC1)
        .flag(Flags::PwrButton)
        .flag(Flags::SlpButton)
        .flag(Flags::ResetRegSup);
    f.sci_int = u16::from(madt::SCI_IRQ).into();
    f.pm1a_evt_blk = u32::from(PM1A_EVT_PORT).into();
    f.pm1a_cnt_blk = u32::from(PM1A_CNT_PORT).into();
    f.pm_tmr_blk = u32::from(PM_TIMER_PORT).into();
    f.pm1_evt_len = PM1_EVT_LEN as u8;
    f.pm1_cnt_len = PM1_CNT_LEN as u8;
    f.pm_tmr_len = PM_TIMER_LEN as u8;
    f.x_pm1a_evt_blk = io_gas(PM1A_EVT_PORT, PM1_EVT_LEN as u8);
    f.x_pm1a_cnt_blk = io_gas(PM1A_CNT_PORT, PM1_CNT_LEN as u8);
    f.x_pm_tmr_blk = io_gas(PM_TIMER_PORT, PM_TIMER_LEN as u8);
    f.p_lvl2_lat = NO_C2_LATENCY.into();
    f.p_lvl3_lat = NO_C3_LATENCY.into();
    f.iapc_boot_arch =
        (IAPC_VGA_NOT_PRESENT | IAPC_MSI_NOT_SUPPORTED | IAPC_CMOS_RTC_NOT_PRESENT).into();
    f.reset_reg = io_gas(RESET_PORT, 1);
    f.reset_value = RESET_VALUE;
    aml_bytes(&f.finalize())
}

/// Errors of [`linux_tables`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AcpiError {
    #[error("the ACPI tables of {vcpus} vCPUs need {need} bytes from {start:#x}, past {end:#x}")]
    TooBig {
        vcpus: u32,
        need: u64,
        start: u64,
        end: u64,
    },
}

/// A Linux guest's tables for `vcpus` vCPUs as (address, bytes), the RSDP
/// first at [`LINUX_ACPI_START`], each next table 64-byte aligned (the
/// FACS must be).
pub fn linux_tables(vcpus: u32) -> Result<Vec<(u64, Vec<u8>)>, AcpiError> {
    const XSDT_ENTRIES: usize = 2;
    let align = |a: u64| a.next_multiple_of(64);
    let dsdt = linux_dsdt();
    let madt = madt::build(OEM_ID, OEM_REVISION, vcpus);
    let rsdp_at = LINUX_ACPI_START;
    let xsdt_at = align(rsdp_at + Rsdp::len() as u64);
    let facs_at = align(xsdt_at + 36 + 8 * XSDT_ENTRIES as u64);
    let fadt_at = align(facs_at + FACS::len() as u64);
    let dsdt_at = align(fadt_at + acpi_tables::fadt::FADT::len() as u64);
    let madt_at = align(dsdt_at + dsdt.len() as u64);
    let end = madt_at + madt.len() as u64;
    if end > LINUX_ACPI_END {
        return Err(AcpiError::TooBig {
            vcpus,
            need: end - rsdp_at,
            start: rsdp_at,
            end: LINUX_ACPI_END,
        });
    }
    let mut xsdt = XSDT::new(OEM_ID, *b"PACERXSD", OEM_REVISION);
    xsdt.add_entry(fadt_at);
    xsdt.add_entry(madt_at);
    Ok(vec![
        (rsdp_at, aml_bytes(&Rsdp::new(OEM_ID, xsdt_at))),
        (xsdt_at, aml_bytes(&xsdt)),
        (facs_at, aml_bytes(&FACS::new())),
        (fadt_at, linux_fadt(facs_at, dsdt_at)),
        (dsdt_at, dsdt),
        (madt_at, madt),
    ])
}

/// Write `tables` into guest memory.
pub fn write(mem: &GuestMemoryMmap, tables: &[(u64, Vec<u8>)]) -> Result<(), BootError> {
    for (addr, b) in tables {
        mem.write_slice(b, GuestAddress(*addr))
            .map_err(|source| BootError::Write {
                what: "ACPI tables",
                source,
            })?;
    }
    Ok(())
}

/// Write the multiboot tables into guest memory.
pub fn write_tables(mem: &GuestMemoryMmap) -> Result<(), BootError> {
    for (addr, b) in tables() {
        mem.write_slice(&b, GuestAddress(addr))
            .map_err(|source| BootError::Write {
                what: "ACPI tables",
                source,
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checksum_ok(b: &[u8]) -> bool {
        b.iter().fold(0u8, |a, x| a.wrapping_add(*x)) == 0
    }

    #[test]
    fn tables_link_up_and_do_not_overlap() {
        let t = tables();
        let (rsdp_at, rsdp) = &t[0];
        let (xsdt_at, xsdt) = &t[1];
        let (fadt_at, fadt) = &t[2];
        assert_eq!(&rsdp[0..8], b"RSD PTR ");
        assert_eq!(rsdp_at % 16, 0);
        assert!(checksum_ok(&rsdp[0..20]) && checksum_ok(rsdp));
        assert_eq!(rsdp[15], 2, "revision 2: guests follow the XSDT");
        assert_eq!(
            u64::from_le_bytes(rsdp[24..32].try_into().unwrap()),
            *xsdt_at
        );
        assert_eq!(&xsdt[0..4], b"XSDT");
        assert!(checksum_ok(xsdt));
        assert_eq!(
            u64::from_le_bytes(xsdt[36..44].try_into().unwrap()),
            *fadt_at
        );
        assert_eq!(&fadt[0..4], b"FACP");
        assert!(checksum_ok(fadt));
        // PM_TMR_BLK at offset 76, PM_TMR_LEN at 91.
        assert_eq!(u32::from_le_bytes(fadt[76..80].try_into().unwrap()), 0x608);
        assert_eq!(fadt[91], 4);
        assert!(rsdp_at + rsdp.len() as u64 <= *xsdt_at);
        assert!(xsdt_at + xsdt.len() as u64 <= *fadt_at);
        assert!(fadt_at + fadt.len() as u64 <= 0xE_1000);
    }
}

#[cfg(test)]
mod linux_tests {
    use super::*;

    fn sum0(b: &[u8]) -> bool {
        b.iter().fold(0u8, |a, x| a.wrapping_add(*x)) == 0
    }
    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
    }
    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }
    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    /// Follow the pointers as an OS does, from the RSDP: every table's
    /// checksum, signature and length; returns (FADT, FACS, DSDT, MADT).
    fn walk(t: &[(u64, Vec<u8>)]) -> [Vec<u8>; 4] {
        let at = |addr: u64| -> &Vec<u8> {
            &t.iter()
                .find(|(a, _)| *a == addr)
                .unwrap_or_else(|| panic!("no table at {addr:#x}"))
                .1
        };
        let table = |addr: u64, sig: &[u8; 4]| -> Vec<u8> {
            let b = at(addr);
            assert_eq!(&b[0..4], sig);
            if sig != b"FACS" {
                assert_eq!(u32_at(b, 4) as usize, b.len(), "{sig:?} length");
                assert!(sum0(b), "{sig:?} checksum");
            }
            b.clone()
        };
        let rsdp = at(LINUX_ACPI_START);
        assert_eq!(&rsdp[0..8], b"RSD PTR ");
        assert!(sum0(&rsdp[0..20]) && sum0(rsdp));
        let xsdt = table(u64_at(rsdp, 24), b"XSDT");
        assert_eq!(xsdt.len(), 36 + 16);
        let fadt = table(u64_at(&xsdt, 36), b"FACP");
        let madt = table(u64_at(&xsdt, 44), b"APIC");
        let facs_at = u64_at(&fadt, 132);
        assert_eq!(facs_at % 64, 0, "FACS alignment");
        let facs = table(facs_at, b"FACS");
        let dsdt = table(u64_at(&fadt, 140), b"DSDT");
        // Tables do not overlap and stay in their area.
        let mut spans: Vec<(u64, u64)> = t.iter().map(|(a, b)| (*a, a + b.len() as u64)).collect();
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "{w:x?} overlap");
        }
        assert!(spans.last().unwrap().1 <= LINUX_ACPI_END);
        [fadt, facs, dsdt, madt]
    }

    #[test]
    fn linux_tables_link_up() {
        for n in [1u32, 2, 8, 64, 254] {
            let t = linux_tables(n).unwrap();
            let [_, _, _, madt] = walk(&t);
            let (_, _, s) = super::super::madt::tests::parse(&madt);
            assert_eq!(s.iter().filter(|(ty, _)| *ty == 0).count(), n as usize);
        }
    }

    #[test]
    fn fadt_names_the_power_management_blocks() {
        let [fadt, facs, dsdt, _] = walk(&linux_tables(2).unwrap());
        assert_eq!(fadt.len(), 276);
        assert_eq!(u16_at(&fadt, 46), 9, "SCI_INT");
        assert_eq!(u32_at(&fadt, 48), 0, "SMI_CMD: always in ACPI mode");
        assert_eq!(u32_at(&fadt, 56), 0x600, "PM1a_EVT_BLK");
        assert_eq!(u32_at(&fadt, 64), 0x604, "PM1a_CNT_BLK");
        assert_eq!(u32_at(&fadt, 76), 0x608, "PM_TMR_BLK");
        assert_eq!(
            &fadt[88..92],
            &[4, 2, 0, 4],
            "PM1_EVT/PM1_CNT/PM2_CNT/PM_TMR lengths"
        );
        assert_eq!((u16_at(&fadt, 96), u16_at(&fadt, 98)), (101, 1001));
        assert_eq!(u16_at(&fadt, 109), 0b10_1100, "IAPC_BOOT_ARCH");
        let flags = u32_at(&fadt, 112);
        assert_eq!(flags & (1 << 20), 0, "not hardware-reduced");
        assert_ne!(flags & (1 << 10), 0, "RESET_REG_SUP");
        // RESET_REG: system I/O, 8 bits, port 0x64; value 0xFE.
        assert_eq!(fadt[116], 1);
        assert_eq!(fadt[117], 8);
        assert_eq!(u64_at(&fadt, 120), 0x64);
        assert_eq!(fadt[128], 0xFE);
        // X_PM1a_CNT_BLK: system I/O, 16 bits at 0x604.
        assert_eq!((fadt[172], fadt[173]), (1, 16));
        assert_eq!(u64_at(&fadt, 176), 0x604);
        assert_eq!(u32_at(&facs, 4), 64, "FACS length");
        // \_S5_ = Package(4) { 5, 5, 0, 0 }: NameOp "_S5_" PackageOp
        // PkgLength NumElements BytePrefix 5 BytePrefix 5 Zero Zero.
        assert_eq!(
            &dsdt[36..],
            &[0x08, b'_', b'S', b'5', b'_', 0x12, 0x08, 0x04, 0x0A, 5, 0x0A, 5, 0x00, 0x00]
        );
    }
}
