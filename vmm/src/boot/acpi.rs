//! The few ACPI tables a QEMU-targeted test guest looks for: an RSDP in
//! the BIOS area (guests scan 0xE0000-0xFFFFF for it), an XSDT with one
//! entry, and a FADT whose only job is to name the PM timer port
//! (`devices::pm_timer`). kvm-unit-tests' vmexit `inl_from_pmtimer` finds
//! the timer this way. No DSDT, no MADT: CPUs are counted through fw_cfg.
//! Tables are built with the rust-vmm `acpi_tables` crate (checksums
//! included).

use super::layout::{ACPI_FADT_ADDR, ACPI_RSDP_ADDR, ACPI_XSDT_ADDR};
use super::BootError;
use acpi_tables::fadt::FADTBuilder;
use acpi_tables::gas::{AccessSize, AddressSpace, GAS};
use acpi_tables::rsdp::Rsdp;
use acpi_tables::xsdt::XSDT;
use acpi_tables::Aml;
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

/// Write the tables into guest memory.
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
