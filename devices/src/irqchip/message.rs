//! Messages on the (virtual) APIC bus: what a local APIC's ICR or the I/O
//! APIC's redirection entries send, and to whom. Shared by the sender side
//! (`lapic`, `ioapic`), the router (`IrqChip`) and the receiver (`Lapic`).

use super::regs::*;

/// Delivery mode of a message (ICR, LVT or redirection entry bits 10:8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeliveryMode {
    Fixed,
    LowestPriority,
    Smi,
    Nmi,
    Init,
    Startup,
    ExtInt,
    /// Encodings 3 (remote read) and anything else undefined: ignored.
    Reserved,
}

impl DeliveryMode {
    pub(crate) fn from_bits(bits: u32) -> DeliveryMode {
        match bits & 7 {
            DELIVERY_FIXED => DeliveryMode::Fixed,
            DELIVERY_LOWEST_PRIORITY => DeliveryMode::LowestPriority,
            DELIVERY_SMI => DeliveryMode::Smi,
            DELIVERY_NMI => DeliveryMode::Nmi,
            DELIVERY_INIT => DeliveryMode::Init,
            DELIVERY_STARTUP => DeliveryMode::Startup,
            DELIVERY_EXTINT => DeliveryMode::ExtInt,
            _ => DeliveryMode::Reserved,
        }
    }

    pub(crate) fn is_fixed(self) -> bool {
        matches!(self, DeliveryMode::Fixed | DeliveryMode::LowestPriority)
    }
}

/// Width of a message's destination field: 8 bits (xAPIC senders and the
/// I/O APIC) or 32 bits (x2APIC senders). It decides which value means
/// broadcast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DestFormat {
    XApic,
    X2Apic,
}

impl DestFormat {
    pub(crate) fn broadcast(self) -> u32 {
        match self {
            DestFormat::XApic => XAPIC_BROADCAST,
            DestFormat::X2Apic => X2APIC_BROADCAST,
        }
    }
}

/// Who a message is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Destination {
    Physical {
        id: u32,
        format: DestFormat,
    },
    Logical {
        mda: u32,
        format: DestFormat,
    },
    /// Shorthands (IPIs only).
    SelfOnly,
    All,
    AllButSelf,
}

/// An interrupt message on the (virtual) APIC bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Message {
    pub vector: u8,
    pub mode: DeliveryMode,
    pub level_trigger: bool,
    /// The ICR level bit: false with level trigger is a de-assert.
    pub assert: bool,
    pub dest: Destination,
    /// The sending vCPU (IPIs); `None` for the I/O APIC.
    pub source: Option<u32>,
}
