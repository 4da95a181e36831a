//! Register access: xAPIC offsets and sizes, reset values, x2APIC MSRs and
//! their #GP cases, IA32_APIC_BASE modes, transitions and relocation.

use super::*;
use crate::irqchip::{ApicMode, MsrFault};

/// Power-up values of every register, read as 4 bytes (vCPU 1).
#[test]
fn reset_values() {
    let (chip, _) = chip(2);
    let expected = [
        (APIC_ID, 1 << 24),
        (APIC_VERSION, 0x0005_0014),
        (APIC_TPR, 0),
        (APIC_APR, 0),
        (APIC_PPR, 0),
        (APIC_EOI, 0),
        (APIC_RRD, 0),
        (APIC_LDR, 0),
        (APIC_DFR, 0xFFFF_FFFF),
        (APIC_SVR, 0xFF),
        (APIC_ESR, 0),
        (APIC_ICR_LOW, 0),
        (APIC_ICR_HIGH, 0),
        (APIC_TIMER_INITIAL, 0),
        (APIC_TIMER_CURRENT, 0),
        (APIC_TIMER_DIVIDE, 0),
    ];
    for (offset, value) in expected {
        assert_eq!(read(&chip, 1, offset), value, "offset {offset:#x}");
    }
    for lvt in (APIC_LVT_TIMER..=APIC_LVT_ERROR).step_by(16) {
        assert_eq!(read(&chip, 1, lvt), LVT_MASKED, "LVT {lvt:#x} masked");
    }
    for i in 0..8 {
        for base in [APIC_ISR, APIC_TMR, APIC_IRR] {
            assert_eq!(read(&chip, 1, base + 16 * i), 0);
        }
    }
    assert_eq!(chip.msr_read(0, MSR_IA32_APIC_BASE), Ok(0xFEE0_0900), "BSP");
    assert_eq!(chip.msr_read(1, MSR_IA32_APIC_BASE), Ok(0xFEE0_0800));
    assert_eq!(read(&chip, 0, APIC_ID), 0);
}

/// A 4-byte write then read at each register on a fresh, software-enabled
/// APIC: what sticks, what is masked off, what is read-only.
#[test]
fn write_then_read_each_register() {
    let cases: &[(u32, u32, u32)] = &[
        (APIC_ID, 0x0AFF_FFFF, 0x0A00_0000),
        (APIC_VERSION, 0, 0x0005_0014),
        (APIC_TPR, 0xFFFF_FF45, 0x45),
        (APIC_APR, 0xFF, 0),
        (APIC_PPR, 0xFF, 0),
        (APIC_EOI, 0xFFFF_FFFF, 0),
        (APIC_RRD, 0xFFFF_FFFF, 0),
        (APIC_LDR, 0xFFFF_FFFF, 0xFF00_0000),
        (APIC_DFR, 0, 0x0FFF_FFFF),
        (APIC_DFR, 0x1234_5678, 0x1FFF_FFFF),
        (APIC_SVR, 0xFFFF_FFFF, 0x3FF),
        (APIC_ISR, 0xFFFF_FFFF, 0),
        (APIC_TMR + 0x70, 0xFFFF_FFFF, 0),
        (APIC_IRR + 0x30, 0xFFFF_FFFF, 0),
        (APIC_ESR, 0xFFFF_FFFF, 0),
        (APIC_ICR_HIGH, 0xFFFF_FFFF, 0xFF00_0000),
        // Vector 0xF0 to self; the delivery status bit never sticks.
        (APIC_ICR_LOW, 0x0004_50F0, 0x0004_40F0),
        (APIC_LVT_TIMER, 0xFFFE_FFFF, 0x0006_00FF),
        (APIC_LVT_THERMAL, 0xFFFE_FFFF, 0x0000_07FF),
        (APIC_LVT_PERF, 0xFFFE_FFFF, 0x0000_07FF),
        (APIC_LVT_LINT0, 0xFFFE_FFFF, 0x0000_A7FF),
        (APIC_LVT_LINT1, 0xFFFE_FFFF, 0x0000_A7FF),
        (APIC_LVT_ERROR, 0xFFFE_FFFF, 0x0000_00FF),
        (APIC_TIMER_INITIAL, 0x1234, 0x1234),
        (APIC_TIMER_DIVIDE, 0xFFFF_FFFF, 0xB),
        // Reserved offsets (incl. CMCI and SELF IPI in xAPIC mode).
        (0x000, 0xFFFF_FFFF, 0),
        (0x010, 0xFFFF_FFFF, 0),
        (0x040, 0xFFFF_FFFF, 0),
        (0x2F0, 0xFFFF_FFFF, 0),
        (0x3A0, 0xFFFF_FFFF, 0),
        (APIC_SELF_IPI, 0xFFFF_FFFF, 0),
        (0xFF0, 0xFFFF_FFFF, 0),
    ];
    for &(offset, written, expected) in cases {
        let (chip, _) = enabled_chip(2);
        write(&chip, 1, offset, written);
        assert_eq!(read(&chip, 1, offset), expected, "offset {offset:#x}");
    }
}

#[test]
fn timer_current_count_is_read_only() {
    let (chip, host) = enabled_chip(1);
    write(&chip, 0, APIC_TIMER_DIVIDE, 0xB);
    write(&chip, 0, APIC_TIMER_INITIAL, 1000);
    write(&chip, 0, APIC_TIMER_CURRENT, 5);
    host.set_now(100);
    assert_eq!(read(&chip, 0, APIC_TIMER_CURRENT), 900);
}

/// Other sizes: reads see byte lanes of the 32-bit register (bytes 4-15 of
/// a slot read 0); writes other than aligned 4 bytes are claimed, ignored.
#[test]
fn mmio_sizes_and_alignment() {
    let (chip, _) = enabled_chip(2);
    let base = DEFAULT_APIC_BASE;
    let mut b1 = [0u8; 1];
    assert!(chip.lapic_mmio_read(1, base + 0x32, &mut b1));
    assert_eq!(b1, [0x05], "version byte 2");
    let mut b2 = [0u8; 2];
    assert!(chip.lapic_mmio_read(1, base + 0x30, &mut b2));
    assert_eq!(u16::from_le_bytes(b2), 0x0014);
    let mut b8 = [0xAAu8; 8];
    assert!(chip.lapic_mmio_read(1, base + 0x30, &mut b8));
    assert_eq!(b8, [0x14, 0, 0x05, 0, 0, 0, 0, 0]);
    let mut b4 = [0xAAu8; 4];
    assert!(chip.lapic_mmio_read(1, base + 0x34, &mut b4));
    assert_eq!(b4, [0; 4], "bytes 4-7 of a register slot");
    // Straddling two slots: 0x2E..0x32 = two zero bytes, then version.
    assert!(chip.lapic_mmio_read(1, base + 0x2E, &mut b4));
    assert_eq!(b4, [0, 0, 0x14, 0]);

    for (offset, data) in [
        (APIC_TPR, &[0x77u8][..]),
        (APIC_TPR, &[0x77, 0][..]),
        (APIC_TPR, &[0x77, 0, 0, 0, 0, 0, 0, 0][..]),
        (APIC_TPR + 4, &[0x77, 0, 0, 0][..]),
        (APIC_TPR + 1, &[0x77, 0, 0, 0][..]),
        (APIC_TPR, &[][..]),
    ] {
        assert!(chip.lapic_mmio_write(1, base + u64::from(offset), data));
        assert_eq!(
            read(&chip, 1, APIC_TPR),
            0,
            "{}-byte write at {offset:#x}",
            data.len()
        );
    }
    // Outside the page or straddling its end: not claimed, untouched.
    let mut untouched = [0xAAu8; 4];
    assert!(!chip.lapic_mmio_read(1, base + 0xFFE, &mut untouched));
    assert!(!chip.lapic_mmio_read(1, base - 4, &mut untouched));
    assert!(!chip.lapic_mmio_read(1, base + 0x1000, &mut untouched));
    assert!(!chip.lapic_mmio_read(1, u64::MAX, &mut untouched));
    assert_eq!(untouched, [0xAA; 4]);
    assert!(!chip.lapic_mmio_write(1, base + 0x1000, &[0; 4]));
    assert!(chip.lapic_mmio_read(1, base + 0xFFC, &mut untouched));
    // No such vCPU.
    assert!(!chip.lapic_mmio_read(7, base + 0x30, &mut untouched));
    assert!(!chip.lapic_mmio_write(7, base + 0x80, &[1, 0, 0, 0]));
}

#[test]
fn software_disable_masks_lvts_and_keeps_them_masked() {
    let (chip, _) = enabled_chip(1);
    write(&chip, 0, APIC_LVT_LINT0, 0x0000_0730);
    assert_eq!(read(&chip, 0, APIC_LVT_LINT0), 0x0000_0730);
    write(&chip, 0, APIC_SVR, 0x0FF);
    for lvt in (APIC_LVT_TIMER..=APIC_LVT_ERROR).step_by(16) {
        assert_ne!(read(&chip, 0, lvt) & LVT_MASKED, 0, "LVT {lvt:#x}");
    }
    assert_eq!(read(&chip, 0, APIC_LVT_LINT0), 0x0001_0730, "rest kept");
    write(&chip, 0, APIC_LVT_ERROR, 0x0000_00E0);
    assert_eq!(read(&chip, 0, APIC_LVT_ERROR), 0x0001_00E0, "cannot unmask");
    // Enabling again leaves them masked until written.
    write(&chip, 0, APIC_SVR, 0x1FF);
    assert_eq!(read(&chip, 0, APIC_LVT_ERROR), 0x0001_00E0);
    write(&chip, 0, APIC_LVT_ERROR, 0x0000_00E0);
    assert_eq!(read(&chip, 0, APIC_LVT_ERROR), 0x0000_00E0);
}

#[test]
fn handles_msr_range() {
    for msr in [0x1B, 0x6E0, 0x800, 0x830, 0x8FF] {
        assert!(IrqChip::handles_msr(msr), "{msr:#x}");
    }
    for msr in [0x1A, 0x6E1, 0x7FF, 0x900, 0x10] {
        assert!(!IrqChip::handles_msr(msr), "{msr:#x}");
    }
    let (chip, _) = chip(1);
    assert_eq!(chip.msr_read(0, 0x10), Err(MsrFault::NotHandled(0x10)));
    assert_eq!(chip.msr_write(0, 0x10, 0), Err(MsrFault::NotHandled(0x10)));
    assert_eq!(chip.msr_read(3, 0x1B), Err(MsrFault::NoSuchVcpu(3)));
    assert_eq!(chip.msr_write(3, 0x1B, 0), Err(MsrFault::NoSuchVcpu(3)));
}

#[test]
fn x2apic_msrs_fault_outside_x2apic_mode() {
    let (chip, _) = enabled_chip(1);
    for msr in [0x802, 0x808, 0x830, 0x83F] {
        assert_eq!(chip.msr_read(0, msr), Err(MsrFault::NotX2Apic(msr)));
        assert_eq!(chip.msr_write(0, msr, 0), Err(MsrFault::NotX2Apic(msr)));
    }
}

#[test]
fn x2apic_register_map_and_faults() {
    let (chip, _) = enabled_chip(20);
    enable_x2apic(&chip, 17);
    let v = 17;
    let rd = |msr| chip.msr_read(v, msr);
    let wr = |msr, value| chip.msr_write(v, msr, value);
    // Full id and the derived logical id, both read-only.
    assert_eq!(rd(0x802), Ok(17));
    assert_eq!(wr(0x802, 5), Err(MsrFault::ReadOnly(0x802)));
    assert_eq!(rd(0x80D), Ok(0x0001_0002));
    assert_eq!(wr(0x80D, 0), Err(MsrFault::ReadOnly(0x80D)));
    assert_eq!(rd(0x803), Ok(0x0005_0014));
    assert_eq!(wr(0x803, 0), Err(MsrFault::ReadOnly(0x803)));
    // TPR: bits 31:8 and 63:32 reserved.
    assert_eq!(wr(0x808, 0x5A), Ok(()));
    assert_eq!(rd(0x808), Ok(0x5A));
    assert_eq!(rd(0x80A), Ok(0x5A), "PPR follows TPR");
    assert_eq!(
        wr(0x808, 0x100),
        Err(MsrFault::ReservedBits {
            msr: 0x808,
            value: 0x100
        })
    );
    assert!(matches!(
        wr(0x808, 1 << 32),
        Err(MsrFault::ReservedBits { .. })
    ));
    assert_eq!(wr(0x80A, 0), Err(MsrFault::ReadOnly(0x80A)));
    // EOI: write-only, only 0.
    assert_eq!(wr(0x80B, 0), Ok(()));
    assert!(matches!(wr(0x80B, 1), Err(MsrFault::ReservedBits { .. })));
    assert_eq!(rd(0x80B), Err(MsrFault::WriteOnly(0x80B)));
    // Registers that do not exist in x2APIC mode.
    for msr in [
        0x800, 0x801, 0x809, 0x80C, 0x80E, 0x82F, 0x831, 0x83A, 0x840, 0x8FF,
    ] {
        assert_eq!(rd(msr), Err(MsrFault::NoSuchRegister(msr)), "read {msr:#x}");
        assert_eq!(
            wr(msr, 0),
            Err(MsrFault::NoSuchRegister(msr)),
            "write {msr:#x}"
        );
    }
    // SVR: no EOI-broadcast suppression (bit 12).
    assert_eq!(wr(0x80F, 0x3FF), Ok(()));
    assert!(matches!(
        wr(0x80F, 0x11FF),
        Err(MsrFault::ReservedBits { .. })
    ));
    assert_eq!(rd(0x80F), Ok(0x3FF));
    // ISR/TMR/IRR read-only.
    for msr in [0x810, 0x817, 0x818, 0x820, 0x827] {
        assert_eq!(rd(msr), Ok(0));
        assert_eq!(wr(msr, 0), Err(MsrFault::ReadOnly(msr)));
    }
    // ESR: only 0 may be written.
    assert_eq!(wr(0x828, 0), Ok(()));
    assert!(matches!(wr(0x828, 1), Err(MsrFault::ReservedBits { .. })));
    // ICR: one 64-bit register; bits 13, 17:16, 31:20 reserved; the
    // delivery status bit is ignored.
    assert_eq!(wr(0x830, 0x0000_0003_0000_0030 | 1 << 12), Ok(()));
    assert_eq!(rd(0x830), Ok(0x0000_0003_0000_0030));
    for bit in [13, 16, 17, 20, 31] {
        assert!(
            matches!(wr(0x830, 1 << bit), Err(MsrFault::ReservedBits { .. })),
            "bit {bit}"
        );
    }
    // LVT reserved bits fault; read-only bits (status, remote IRR) do not.
    assert!(matches!(
        wr(0x832, 1 << 8),
        Err(MsrFault::ReservedBits { .. })
    ));
    assert!(
        matches!(wr(0x832, 3 << 17), Err(MsrFault::ReservedBits { .. })),
        "mode 3"
    );
    assert_eq!(wr(0x832, 1 << 12 | 0x40), Ok(()));
    assert_eq!(rd(0x832), Ok(0x40));
    assert!(matches!(
        wr(0x833, 1 << 15),
        Err(MsrFault::ReservedBits { .. })
    ));
    assert_eq!(wr(0x835, 0x0001_F7FF), Ok(()), "LINT0: all its bits");
    assert_eq!(rd(0x835), Ok(0x0001_A7FF));
    assert!(matches!(
        wr(0x837, 0x700),
        Err(MsrFault::ReservedBits { .. })
    ));
    // Timer registers.
    assert_eq!(wr(0x838, 0xFFFF_FFFF), Ok(()));
    assert_eq!(rd(0x838), Ok(0xFFFF_FFFF));
    assert_eq!(wr(0x839, 0), Err(MsrFault::ReadOnly(0x839)));
    assert_eq!(wr(0x83E, 0xB), Ok(()));
    assert!(matches!(wr(0x83E, 0x4), Err(MsrFault::ReservedBits { .. })));
    // SELF IPI: write-only, vector only.
    assert_eq!(rd(0x83F), Err(MsrFault::WriteOnly(0x83F)));
    assert!(matches!(
        wr(0x83F, 0x140),
        Err(MsrFault::ReservedBits { .. })
    ));
    assert_eq!(wr(0x83F, 0x40), Ok(()));
    assert_eq!(irr(&chip, v), vec![0x40]);
}

#[test]
fn apic_base_mode_transitions() {
    let (chip, _) = chip(2);
    let en = APIC_BASE_ENABLE;
    let extd = APIC_BASE_EXTD;
    let base = DEFAULT_APIC_BASE;
    let set = |value: u64| chip.msr_write(1, MSR_IA32_APIC_BASE, value);
    let mode = || chip.lapic_state(1).unwrap().mode;
    let illegal = |value| Err(MsrFault::IllegalTransition { value });
    assert_eq!(mode(), ApicMode::XApic);
    assert_eq!(set(base | extd), illegal(base | extd), "xAPIC -> invalid");
    assert_eq!(set(base | en | extd), Ok(()), "xAPIC -> x2APIC");
    assert_eq!(mode(), ApicMode::X2Apic);
    assert_eq!(set(base | en | extd), Ok(()), "x2APIC -> x2APIC");
    assert_eq!(set(base | extd), illegal(base | extd), "x2APIC -> invalid");
    assert_eq!(set(base | en), illegal(base | en), "x2APIC -> xAPIC");
    assert_eq!(mode(), ApicMode::X2Apic);
    assert_eq!(set(base), Ok(()), "x2APIC -> disabled");
    assert_eq!(mode(), ApicMode::Disabled);
    assert_eq!(
        set(base | extd),
        illegal(base | extd),
        "disabled -> invalid"
    );
    assert_eq!(
        set(base | en | extd),
        illegal(base | en | extd),
        "disabled -> x2APIC"
    );
    assert_eq!(mode(), ApicMode::Disabled);
    assert_eq!(set(base | en), Ok(()), "disabled -> xAPIC");
    assert_eq!(mode(), ApicMode::XApic);
    assert_eq!(chip.msr_read(1, MSR_IA32_APIC_BASE), Ok(base | en));
}

#[test]
fn apic_base_reserved_bits_and_bsp() {
    let (chip, _) = chip(2);
    let value = DEFAULT_APIC_BASE | APIC_BASE_ENABLE;
    for bad in [
        value | 1,
        value | 1 << 9,
        value | 1 << PHYS_ADDR_BITS,
        value | 1 << 63,
    ] {
        assert_eq!(
            chip.msr_write(0, MSR_IA32_APIC_BASE, bad),
            Err(MsrFault::ReservedBits {
                msr: MSR_IA32_APIC_BASE,
                value: bad
            })
        );
    }
    // The BSP flag is read-only: cleared on vCPU 0, set on vCPU 1, ignored.
    chip.msr_write(0, MSR_IA32_APIC_BASE, value).unwrap();
    chip.msr_write(1, MSR_IA32_APIC_BASE, value | APIC_BASE_BSP)
        .unwrap();
    assert_eq!(
        chip.msr_read(0, MSR_IA32_APIC_BASE),
        Ok(value | APIC_BASE_BSP)
    );
    assert_eq!(chip.msr_read(1, MSR_IA32_APIC_BASE), Ok(value));
    // Highest legal base bit.
    let high = 1u64 << (PHYS_ADDR_BITS - 1) | APIC_BASE_ENABLE;
    assert_eq!(chip.msr_write(1, MSR_IA32_APIC_BASE, high), Ok(()));
}

#[test]
fn extd_is_reserved_without_x2apic_in_cpuid() {
    // kvm-unit-tests' xAPIC `apic` variant: "enable unsupported x2apic".
    let (chip, _) = chip_without_x2apic(1);
    let x2apic = DEFAULT_APIC_BASE | APIC_BASE_ENABLE | APIC_BASE_EXTD;
    assert_eq!(
        chip.msr_write(0, MSR_IA32_APIC_BASE, x2apic),
        Err(MsrFault::ReservedBits {
            msr: MSR_IA32_APIC_BASE,
            value: x2apic
        })
    );
    // Nothing changed: still xAPIC at the default base (a bare EN | EXTD,
    // base 0, must not move the page either).
    assert!(chip
        .msr_write(0, MSR_IA32_APIC_BASE, APIC_BASE_ENABLE | APIC_BASE_EXTD)
        .is_err());
    let state = chip.lapic_state(0).unwrap();
    assert_eq!(state.mode, ApicMode::XApic);
    assert_eq!(
        state.apic_base,
        DEFAULT_APIC_BASE | APIC_BASE_ENABLE | APIC_BASE_BSP
    );
    // xAPIC transitions still work.
    chip.msr_write(0, MSR_IA32_APIC_BASE, DEFAULT_APIC_BASE)
        .unwrap();
    chip.msr_write(0, MSR_IA32_APIC_BASE, DEFAULT_APIC_BASE | APIC_BASE_ENABLE)
        .unwrap();
    assert_eq!(chip.lapic_state(0).unwrap().mode, ApicMode::XApic);
}

#[test]
fn xapic_base_relocation() {
    let (chip, _) = enabled_chip(2);
    let new_base = 0xFED4_0000u64;
    chip.msr_write(1, MSR_IA32_APIC_BASE, new_base | APIC_BASE_ENABLE)
        .unwrap();
    let mut b = [0u8; 4];
    assert!(
        !chip.lapic_mmio_read(1, DEFAULT_APIC_BASE + 0x30, &mut b),
        "old page"
    );
    assert!(chip.lapic_mmio_read(1, new_base + 0x30, &mut b));
    assert_eq!(u32::from_le_bytes(b), 0x0005_0014);
    // Per vCPU: vCPU 0 still at the default base.
    assert_eq!(read(&chip, 0, APIC_VERSION), 0x0005_0014);
    assert!(!chip.lapic_mmio_read(0, new_base + 0x30, &mut b));
}

#[test]
fn disabled_and_x2apic_modes_claim_no_mmio() {
    let (chip, _) = enabled_chip(2);
    let mut b = [0u8; 4];
    enable_x2apic(&chip, 1);
    assert!(!chip.lapic_mmio_read(1, DEFAULT_APIC_BASE + 0x30, &mut b));
    assert!(!chip.lapic_mmio_write(1, DEFAULT_APIC_BASE + 0x80, &[1, 0, 0, 0]));
    chip.msr_write(0, MSR_IA32_APIC_BASE, DEFAULT_APIC_BASE)
        .unwrap();
    assert!(!chip.lapic_mmio_read(0, DEFAULT_APIC_BASE + 0x30, &mut b));
    assert_eq!(chip.msr_read(0, MSR_IA32_TSC_DEADLINE), Ok(0));
}

#[test]
fn disable_returns_registers_to_power_up_state() {
    let (chip, _) = enabled_chip(2);
    write(&chip, 1, APIC_ID, 0x0700_0000);
    write(&chip, 1, APIC_TPR, 0x30);
    write(&chip, 1, APIC_LDR, 0x0100_0000);
    chip.msr_write(1, MSR_IA32_APIC_BASE, DEFAULT_APIC_BASE)
        .unwrap();
    chip.msr_write(1, MSR_IA32_APIC_BASE, DEFAULT_APIC_BASE | APIC_BASE_ENABLE)
        .unwrap();
    assert_eq!(read(&chip, 1, APIC_ID), 1 << 24, "initial id");
    assert_eq!(read(&chip, 1, APIC_TPR), 0);
    assert_eq!(read(&chip, 1, APIC_LDR), 0);
    assert_eq!(read(&chip, 1, APIC_SVR), 0xFF);
}

#[test]
fn x2apic_mode_uses_the_initial_id() {
    let (chip, _) = enabled_chip(2);
    write(&chip, 1, APIC_ID, 0x0700_0000);
    enable_x2apic(&chip, 1);
    assert_eq!(chip.msr_read(1, x2msr(APIC_ID)), Ok(1));
    assert_eq!(chip.msr_read(1, x2msr(APIC_LDR)), Ok(0x2));
    // The rest of the state survives the xAPIC -> x2APIC transition.
    assert_eq!(chip.msr_read(1, x2msr(APIC_SVR)), Ok(0x1FF));
}

#[test]
fn esr_latches_on_write() {
    let (chip, _) = enabled_chip(1);
    // A fixed self IPI with an illegal vector: send and receive errors.
    send_ipi(&chip, 0, 0, ICR_LEVEL_ASSERT | SHORTHAND_SELF << 18 | 0x05);
    assert_eq!(irr(&chip, 0), Vec::<u8>::new(), "not accepted");
    assert_eq!(read(&chip, 0, APIC_ESR), 0, "not visible before a write");
    write(&chip, 0, APIC_ESR, 0);
    assert_eq!(
        read(&chip, 0, APIC_ESR),
        ESR_SEND_ILLEGAL_VECTOR | ESR_RECEIVE_ILLEGAL_VECTOR
    );
    write(&chip, 0, APIC_ESR, 0);
    assert_eq!(read(&chip, 0, APIC_ESR), 0, "cleared by the next write");
}

#[test]
fn error_interrupt_through_lvt_error() {
    let (chip, _) = enabled_chip(1);
    write(&chip, 0, APIC_LVT_ERROR, 0xE3);
    send_ipi(&chip, 0, 0, ICR_LEVEL_ASSERT | SHORTHAND_SELF << 18 | 0x0F);
    assert_eq!(irr(&chip, 0), vec![0xE3]);
    assert_eq!(chip.pending_interrupt(0), Some(0xE3));
    // An illegal vector in the LVT error entry: recorded, nothing raised.
    write(&chip, 0, APIC_LVT_ERROR, 0x03);
    drain(&chip, 0);
    send_ipi(&chip, 0, 0, ICR_LEVEL_ASSERT | SHORTHAND_SELF << 18 | 0x01);
    assert_eq!(irr(&chip, 0), Vec::<u8>::new());
    write(&chip, 0, APIC_ESR, 0);
    assert_eq!(
        read(&chip, 0, APIC_ESR),
        ESR_SEND_ILLEGAL_VECTOR | ESR_RECEIVE_ILLEGAL_VECTOR
    );
}

#[test]
fn lapic_state_serializes() {
    let (chip, _) = enabled_chip(1);
    assert!(chip.lapic_state(1).is_none());
    let json = serde_json::to_string(&chip.lapic_state(0).unwrap()).unwrap();
    assert!(json.contains("\"mode\":\"xapic\""), "{json}");
    assert!(json.contains("\"svr\":511"), "{json}");
}
