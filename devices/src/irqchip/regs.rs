//! Every architectural number of the interrupt controller in one place:
//! local APIC register offsets and bit fields, the MSRs, the I/O APIC's
//! registers, and the constants of Pacer's model (the APIC bus clock, the
//! shortest periodic timer). Names follow the Intel SDM, vol. 3, chapter
//! "Advanced Programmable Interrupt Controller", and the 82093AA I/O APIC
//! datasheet.

// ---------------------------------------------------------------------------
// Local APIC register offsets in the xAPIC page. In x2APIC mode register
// `off` is MSR `X2APIC_MSR_FIRST + off / 16` (the ICR is one 64-bit MSR).

pub const APIC_ID: u32 = 0x020;
pub const APIC_VERSION: u32 = 0x030;
pub const APIC_TPR: u32 = 0x080;
/// Arbitration priority (xAPIC only).
pub const APIC_APR: u32 = 0x090;
pub const APIC_PPR: u32 = 0x0A0;
pub const APIC_EOI: u32 = 0x0B0;
/// Remote read (xAPIC only; remote read is not supported, reads 0).
pub const APIC_RRD: u32 = 0x0C0;
pub const APIC_LDR: u32 = 0x0D0;
/// Destination format (xAPIC only).
pub const APIC_DFR: u32 = 0x0E0;
pub const APIC_SVR: u32 = 0x0F0;
/// First of the eight 32-bit words of ISR, TMR and IRR (16 bytes apart).
pub const APIC_ISR: u32 = 0x100;
pub const APIC_TMR: u32 = 0x180;
pub const APIC_IRR: u32 = 0x200;
pub const APIC_ESR: u32 = 0x280;
pub const APIC_ICR_LOW: u32 = 0x300;
/// ICR bits 63:32 in xAPIC mode (no MSR of its own in x2APIC mode).
pub const APIC_ICR_HIGH: u32 = 0x310;
/// The six local vector table entries, in `LVT_*` index order.
pub const APIC_LVT_TIMER: u32 = 0x320;
pub const APIC_LVT_THERMAL: u32 = 0x330;
pub const APIC_LVT_PERF: u32 = 0x340;
pub const APIC_LVT_LINT0: u32 = 0x350;
pub const APIC_LVT_LINT1: u32 = 0x360;
pub const APIC_LVT_ERROR: u32 = 0x370;
pub const APIC_TIMER_INITIAL: u32 = 0x380;
pub const APIC_TIMER_CURRENT: u32 = 0x390;
pub const APIC_TIMER_DIVIDE: u32 = 0x3E0;
/// SELF IPI (x2APIC only).
pub const APIC_SELF_IPI: u32 = 0x3F0;
/// Size of the xAPIC register page.
pub const APIC_PAGE_SIZE: u64 = 0x1000;
/// Registers sit on 16-byte boundaries; only bytes 0-3 of each hold data.
pub const APIC_REG_STRIDE: u32 = 16;

/// Number of LVT entries (timer, thermal, perf, LINT0, LINT1, error).
pub const LVT_COUNT: usize = 6;
pub const LVT_TIMER: usize = 0;
pub const LVT_THERMAL: usize = 1;
pub const LVT_PERF: usize = 2;
pub const LVT_LINT0: usize = 3;
pub const LVT_LINT1: usize = 4;
pub const LVT_ERROR: usize = 5;

// ---------------------------------------------------------------------------
// MSRs.

pub const MSR_IA32_APIC_BASE: u32 = 0x1B;
pub const MSR_IA32_TSC_DEADLINE: u32 = 0x6E0;
pub const X2APIC_MSR_FIRST: u32 = 0x800;
pub const X2APIC_MSR_LAST: u32 = 0x8FF;
/// The 64-bit ICR in x2APIC mode.
pub const X2APIC_MSR_ICR: u32 = 0x830;
/// KVM's paravirtual EOI (MSR_KVM_PV_EOI_EN): the guest-physical address
/// of a 32-bit flag word (4-byte aligned) | [`PV_EOI_ENABLE`].
pub const MSR_KVM_PV_EOI_EN: u32 = 0x4b56_4d04;
/// Bit 0 of MSR_KVM_PV_EOI_EN: PV EOI on.
pub const PV_EOI_ENABLE: u64 = 1;

// IA32_APIC_BASE fields.
pub const APIC_BASE_BSP: u64 = 1 << 8;
/// x2APIC enable (EXTD).
pub const APIC_BASE_EXTD: u64 = 1 << 10;
/// Global enable (EN).
pub const APIC_BASE_ENABLE: u64 = 1 << 11;
/// Bits 7:0 and 9 are reserved.
pub const APIC_BASE_RESERVED_LOW: u64 = 0x2FF;
/// The base address field starts at bit 12 and ends below MAXPHYADDR.
pub const APIC_BASE_ADDR_SHIFT: u32 = 12;
pub const DEFAULT_APIC_BASE: u64 = 0xFEE0_0000;
/// The architectural maximum of MAXPHYADDR.
pub const MAX_PHYS_ADDR_BITS: u8 = 52;

// ---------------------------------------------------------------------------
// Register values and fields.

/// Version register: version 0x14 (integrated APIC, as KVM's), bits 23:16
/// the highest LVT index, bit 24 (directed EOI) clear.
pub const APIC_VERSION_VALUE: u32 = 0x14 | ((LVT_COUNT as u32 - 1) << 16);

pub const TPR_MASK: u32 = 0xFF;
pub const LDR_XAPIC_MASK: u32 = 0xFF00_0000;
pub const LDR_XAPIC_SHIFT: u32 = 24;
pub const ID_XAPIC_SHIFT: u32 = 24;
/// DFR bits 27:0 are reserved and read as ones.
pub const DFR_RESERVED_ONES: u32 = 0x0FFF_FFFF;
pub const DFR_MODEL_FLAT: u32 = 0xF;
pub const DFR_MODEL_CLUSTER: u32 = 0x0;
pub const DFR_MODEL_SHIFT: u32 = 28;
pub const DFR_RESET: u32 = 0xFFFF_FFFF;

pub const SVR_VECTOR_MASK: u32 = 0xFF;
pub const SVR_SW_ENABLE: u32 = 1 << 8;
/// Set: focus processor checking disabled.
pub const SVR_FOCUS_DISABLE: u32 = 1 << 9;
/// Writable SVR bits (no EOI-broadcast suppression: no directed EOI).
pub const SVR_WRITABLE: u32 = SVR_VECTOR_MASK | SVR_SW_ENABLE | SVR_FOCUS_DISABLE;
pub const SVR_RESET: u32 = 0xFF;

/// ESR: an IPI was sent with a vector below 16.
pub const ESR_SEND_ILLEGAL_VECTOR: u32 = 1 << 5;
/// ESR: an interrupt with a vector below 16 was received (and dropped).
pub const ESR_RECEIVE_ILLEGAL_VECTOR: u32 = 1 << 6;

// LVT entry fields.
pub const LVT_VECTOR_MASK: u32 = 0xFF;
pub const LVT_DELIVERY_MODE_MASK: u32 = 0x700;
pub const LVT_DELIVERY_MODE_SHIFT: u32 = 8;
/// Delivery status (read-only, always idle here).
pub const LVT_DELIVERY_STATUS: u32 = 1 << 12;
pub const LVT_POLARITY_LOW: u32 = 1 << 13;
/// Remote IRR of LINT0/LINT1 (read-only).
pub const LVT_REMOTE_IRR: u32 = 1 << 14;
pub const LVT_TRIGGER_LEVEL: u32 = 1 << 15;
pub const LVT_MASKED: u32 = 1 << 16;
pub const LVT_TIMER_MODE_MASK: u32 = 3 << 17;
pub const LVT_TIMER_MODE_SHIFT: u32 = 17;
pub const LVT_RESET: u32 = LVT_MASKED;

/// Writable bits of each LVT entry, by `LVT_*` index.
pub const LVT_WRITABLE: [u32; LVT_COUNT] = [
    LVT_VECTOR_MASK | LVT_MASKED | LVT_TIMER_MODE_MASK,
    LVT_VECTOR_MASK | LVT_DELIVERY_MODE_MASK | LVT_MASKED,
    LVT_VECTOR_MASK | LVT_DELIVERY_MODE_MASK | LVT_MASKED,
    LVT_VECTOR_MASK | LVT_DELIVERY_MODE_MASK | LVT_POLARITY_LOW | LVT_TRIGGER_LEVEL | LVT_MASKED,
    LVT_VECTOR_MASK | LVT_DELIVERY_MODE_MASK | LVT_POLARITY_LOW | LVT_TRIGGER_LEVEL | LVT_MASKED,
    LVT_VECTOR_MASK | LVT_MASKED,
];
/// Read-only bits of each LVT entry: writing them is not a reserved-bit
/// violation in x2APIC mode, it is just ignored.
pub const LVT_READ_ONLY: [u32; LVT_COUNT] = [
    LVT_DELIVERY_STATUS,
    LVT_DELIVERY_STATUS,
    LVT_DELIVERY_STATUS,
    LVT_DELIVERY_STATUS | LVT_REMOTE_IRR,
    LVT_DELIVERY_STATUS | LVT_REMOTE_IRR,
    LVT_DELIVERY_STATUS,
];

// ICR fields (bits 31:0; in x2APIC bits 63:32 are the destination, in
// xAPIC the destination is ICR_HIGH bits 31:24).
pub const ICR_VECTOR_MASK: u32 = 0xFF;
pub const ICR_DELIVERY_MODE_SHIFT: u32 = 8;
pub const ICR_DELIVERY_MODE_MASK: u32 = 0x700;
pub const ICR_DEST_LOGICAL: u32 = 1 << 11;
/// Delivery status: always reads idle (delivery is instantaneous).
pub const ICR_DELIVERY_STATUS: u32 = 1 << 12;
pub const ICR_LEVEL_ASSERT: u32 = 1 << 14;
pub const ICR_TRIGGER_LEVEL: u32 = 1 << 15;
pub const ICR_SHORTHAND_SHIFT: u32 = 18;
pub const ICR_SHORTHAND_MASK: u32 = 3 << 18;
/// Bits kept from an ICR low write.
pub const ICR_LOW_WRITABLE: u32 = ICR_VECTOR_MASK
    | ICR_DELIVERY_MODE_MASK
    | ICR_DEST_LOGICAL
    | ICR_LEVEL_ASSERT
    | ICR_TRIGGER_LEVEL
    | ICR_SHORTHAND_MASK;
pub const ICR_HIGH_XAPIC_DEST_MASK: u32 = 0xFF00_0000;
pub const ICR_HIGH_XAPIC_DEST_SHIFT: u32 = 24;

pub const SHORTHAND_NONE: u32 = 0;
pub const SHORTHAND_SELF: u32 = 1;
pub const SHORTHAND_ALL_INCLUDING_SELF: u32 = 2;
pub const SHORTHAND_ALL_EXCLUDING_SELF: u32 = 3;

/// Delivery modes (ICR, LVT, I/O APIC redirection entries).
pub const DELIVERY_FIXED: u32 = 0;
pub const DELIVERY_LOWEST_PRIORITY: u32 = 1;
pub const DELIVERY_SMI: u32 = 2;
pub const DELIVERY_NMI: u32 = 4;
pub const DELIVERY_INIT: u32 = 5;
pub const DELIVERY_STARTUP: u32 = 6;
pub const DELIVERY_EXTINT: u32 = 7;

/// Timer modes (LVT timer bits 18:17).
pub const TIMER_MODE_ONE_SHOT: u32 = 0;
pub const TIMER_MODE_PERIODIC: u32 = 1;
pub const TIMER_MODE_TSC_DEADLINE: u32 = 2;

/// Writable bits of the divide configuration register (bits 0, 1, 3).
pub const TIMER_DIVIDE_WRITABLE: u32 = 0b1011;

/// SELF IPI: bits 7:0 are the vector, the rest is reserved.
pub const SELF_IPI_WRITABLE: u32 = 0xFF;

pub const XAPIC_BROADCAST: u32 = 0xFF;
pub const X2APIC_BROADCAST: u32 = 0xFFFF_FFFF;

/// Vectors 0-15 are reserved for exceptions; the APIC rejects them.
pub const FIRST_LEGAL_VECTOR: u8 = 16;

// ---------------------------------------------------------------------------
// Pacer's timer model.

/// APIC bus clock period: 1 ns per count before division (a 1 GHz bus, as
/// KVM's in-kernel APIC).
pub const APIC_BUS_NS_PER_COUNT: u64 = 1;
/// Shortest period of a periodic timer, as KVM's default
/// (`min_timer_period_us = 200`): a guest cannot turn the host timer into a
/// busy loop. One-shot and TSC-deadline timers are not limited.
pub const MIN_PERIODIC_NS: u64 = 200_000;

// ---------------------------------------------------------------------------
// I/O APIC (82093AA): an index register and a data window.

pub const IOAPIC_DEFAULT_BASE: u64 = 0xFEC0_0000;
pub const IOAPIC_MMIO_LEN: u64 = 0x1000;
/// IOREGSEL (register index) and IOWIN (data window) offsets.
pub const IOAPIC_IOREGSEL: u64 = 0x00;
pub const IOAPIC_IOWIN: u64 = 0x10;
pub const IOAPIC_PINS: usize = 24;
/// Indirect register indices.
pub const IOAPIC_REG_ID: u8 = 0x00;
pub const IOAPIC_REG_VERSION: u8 = 0x01;
pub const IOAPIC_REG_ARBITRATION: u8 = 0x02;
/// Redirection entry `pin` is at `IOAPIC_REG_REDIR_FIRST + 2 * pin`
/// (low dword) and the next index (high dword).
pub const IOAPIC_REG_REDIR_FIRST: u8 = 0x10;
/// ID (and arbitration ID) bits 27:24.
pub const IOAPIC_ID_MASK: u32 = 0x0F00_0000;
/// Version 0x11, highest redirection entry in bits 23:16.
pub const IOAPIC_VERSION_VALUE: u32 = 0x11 | ((IOAPIC_PINS as u32 - 1) << 16);

// Redirection entry fields (64-bit).
pub const REDIR_VECTOR_MASK: u64 = 0xFF;
pub const REDIR_DELIVERY_MODE_SHIFT: u32 = 8;
pub const REDIR_DELIVERY_MODE_MASK: u64 = 0x700;
pub const REDIR_DEST_LOGICAL: u64 = 1 << 11;
/// Delivery status (read-only, always idle).
pub const REDIR_DELIVERY_STATUS: u64 = 1 << 12;
pub const REDIR_POLARITY_LOW: u64 = 1 << 13;
/// Remote IRR (read-only): a level interrupt is in service.
pub const REDIR_REMOTE_IRR: u64 = 1 << 14;
pub const REDIR_TRIGGER_LEVEL: u64 = 1 << 15;
pub const REDIR_MASKED: u64 = 1 << 16;
pub const REDIR_DEST_SHIFT: u32 = 56;
/// Bits a write to the low dword may change.
pub const REDIR_LOW_WRITABLE: u64 = REDIR_VECTOR_MASK
    | REDIR_DELIVERY_MODE_MASK
    | REDIR_DEST_LOGICAL
    | REDIR_POLARITY_LOW
    | REDIR_TRIGGER_LEVEL
    | REDIR_MASKED;
/// Bits a write to the high dword may change (the destination).
pub const REDIR_HIGH_WRITABLE: u64 = 0xFF << REDIR_DEST_SHIFT;
/// Entries come out of reset masked.
pub const REDIR_RESET: u64 = REDIR_MASKED;
