//! Where the VMM puts its boot structures in guest-physical memory. One
//! table for every boot format, so that a new structure can be checked
//! against the others at a glance:
//!
//! | range | what | format |
//! |---|---|---|
//! | 0x500-0x52f | boot GDT (+ a null IDT at 0x520) | all |
//! | 0x7000 | Linux `boot_params` (zero page) | bench, Linux |
//! | 0x8ff0 | boot stack top | bench, multiboot |
//! | 0x9000-0x9fff, 0xa000, 0xb000.. | PML4, PDPT, PDs (identity map) | bench, Linux |
//! | 0x10000-0x9efff | multiboot information, memory map, strings, module list | multiboot |
//! | 0x20000-0x20fff | kernel command line | bench, Linux |
//! | 0xe0000-0xe0fff | ACPI RSDP, XSDT, FADT | multiboot |
//! | 0xe0000-0xeffff | ACPI RSDP, XSDT, FACS, FADT, DSDT, MADT | Linux |
//! | 0xf0000-0xfffff | MP floating pointer and MP configuration table | Linux |
//! | 1 MiB up | the kernel image (a bzImage's protected-mode part at 1 MiB, a vmlinux at its ELF physical addresses) | all |
//! | top of RAM below 3 GiB (Linux: below the kernel's `initrd_addr_max`) | initrd / initramfs | bench, Linux |
//!
//! Page 0 is left alone: kvm-unit-tests copies its AP start-up trampoline
//! there. The ACPI and MP tables sit in the legacy hole 0xA0000-0xFFFFF,
//! which the e820 map reports reserved, where guests scan for the RSDP and
//! the MP floating pointer.

pub const GDT_ADDR: u64 = 0x500;
pub const IDT_ADDR: u64 = 0x520;
pub const ZERO_PAGE_ADDR: u64 = 0x7000;
pub const BOOT_STACK: u64 = 0x8FF0;
pub const PML4_ADDR: u64 = 0x9000;
pub const PDPT_ADDR: u64 = 0xA000;
pub const PD_ADDR: u64 = 0xB000;
pub const CMDLINE_ADDR: u64 = 0x20000;
pub const CMDLINE_MAX: usize = 4096;
pub const HIMEM_START: u64 = 0x10_0000;

/// The multiboot information block and everything it points to that the
/// VMM writes (memory map, command lines, module list), bump-allocated.
pub const MULTIBOOT_INFO_START: u64 = 0x1_0000;
pub const MULTIBOOT_INFO_END: u64 = 0x9_F000;

/// ACPI tables (inside the reserved BIOS area that guests scan for the RSDP).
pub const ACPI_RSDP_ADDR: u64 = 0xE_0000;
pub const ACPI_XSDT_ADDR: u64 = 0xE_0040;
pub const ACPI_FADT_ADDR: u64 = 0xE_0100;

/// A Linux guest's ACPI tables, one after the other from the RSDP on.
pub const LINUX_ACPI_START: u64 = 0xE_0000;
pub const LINUX_ACPI_END: u64 = 0xF_0000;

/// The MP floating pointer, its configuration table right after it.
pub const MPTABLE_START: u64 = 0xF_0000;
pub const MPTABLE_END: u64 = 0x10_0000;

/// Local APIC and I/O APIC addresses as the firmware tables describe them
/// (both interrupt controllers, KVM's and Pacer's, sit there).
pub const LAPIC_ADDR: u32 = devices::irqchip::regs::DEFAULT_APIC_BASE as u32;
pub const IOAPIC_ADDR: u32 = devices::irqchip::regs::IOAPIC_DEFAULT_BASE as u32;
/// The I/O APIC's ID: what its ID register reads after reset, under KVM's
/// in-kernel I/O APIC and Pacer's alike.
pub const IOAPIC_ID: u8 = 0;
/// Version registers of the local APIC and the I/O APIC (both controllers).
pub const LAPIC_VERSION: u8 = devices::irqchip::regs::APIC_VERSION_VALUE as u8;
pub const IOAPIC_VERSION: u8 = devices::irqchip::regs::IOAPIC_VERSION_VALUE as u8;
/// I/O APIC pins (GSIs 0-23).
pub const IOAPIC_PINS: u8 = devices::irqchip::regs::IOAPIC_PINS as u8;

pub const PAGE_SIZE: u64 = 4096;
pub const TWO_MIB: u64 = 2 << 20;
