//! Where the VMM puts its boot structures in guest-physical memory. One
//! table for every boot format, so that a new structure can be checked
//! against the others at a glance:
//!
//! | range | what | format |
//! |---|---|---|
//! | 0x500-0x52f | boot GDT (+ a null IDT at 0x520) | all |
//! | 0x7000 | Linux `boot_params` (zero page) | ELF64 |
//! | 0x8ff0 | boot stack top | ELF64, multiboot |
//! | 0x9000-0x9fff, 0xa000, 0xb000.. | PML4, PDPT, PDs (identity map) | ELF64 |
//! | 0x10000-0x9efff | multiboot information, memory map, strings, module list | multiboot |
//! | 0x20000-0x20fff | kernel command line | ELF64 |
//! | 0xe0000-0xe0fff | ACPI RSDP, XSDT, FADT | multiboot |
//! | 1 MiB up | the kernel image | all |
//!
//! Page 0 is left alone: kvm-unit-tests copies its AP start-up trampoline
//! there.

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

pub const PAGE_SIZE: u64 = 4096;
pub const TWO_MIB: u64 = 2 << 20;
