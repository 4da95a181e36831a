//! Messages on the (virtual) APIC bus: what a local APIC's ICR or the I/O
//! APIC's redirection entries send, and to whom. Shared by the sender side
//! (`lapic`, `ioapic`), the router (`IrqChip`) and the receiver (`Lapic`).

use super::lapic::{x2apic_ldr, ApicMode};
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

/// What deciding "is this message for me?" needs of one APIC, packable
/// into a u64: each APIC publishes it in an atomic (rewritten under its lock
/// after every operation) so that the router locks only the APICs a message
/// is for, not every APIC of the VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RouteKey {
    pub mode: ApicMode,
    /// xAPIC: the 8-bit id; x2APIC: the 32-bit id.
    pub id: u32,
    /// xAPIC logical id (LDR bits 31:24); x2APIC derives it from `id`.
    pub logical_id: u8,
    /// DFR bits 31:28 (xAPIC).
    pub dfr_model: u8,
}

impl RouteKey {
    pub(crate) fn pack(self) -> u64 {
        let mode = match self.mode {
            ApicMode::Disabled => 0u64,
            ApicMode::XApic => 1,
            ApicMode::X2Apic => 2,
        };
        u64::from(self.id)
            | u64::from(self.logical_id) << 32
            | u64::from(self.dfr_model & 0xF) << 40
            | mode << 44
    }

    pub(crate) fn unpack(packed: u64) -> RouteKey {
        RouteKey {
            mode: match packed >> 44 {
                1 => ApicMode::XApic,
                2 => ApicMode::X2Apic,
                _ => ApicMode::Disabled,
            },
            id: packed as u32,
            logical_id: (packed >> 32) as u8,
            dfr_model: ((packed >> 40) & 0xF) as u8,
        }
    }

    /// The id a non-broadcast physical destination must equal, straight
    /// from a packed key; None for a hardware-disabled APIC.
    pub(crate) fn physical_id(packed: u64) -> Option<u32> {
        (packed >> 44 != 0).then_some(packed as u32)
    }

    /// Is `dest`, sent by `source`, for vCPU `vcpu`'s APIC? A
    /// hardware-disabled APIC matches nothing. Each APIC reads the
    /// destination in its own mode; `format` decides what is broadcast.
    pub(crate) fn matches(self, vcpu: u32, dest: &Destination, source: Option<u32>) -> bool {
        if self.mode == ApicMode::Disabled {
            return false;
        }
        match *dest {
            Destination::SelfOnly => source == Some(vcpu),
            Destination::All => true,
            Destination::AllButSelf => source != Some(vcpu),
            Destination::Physical { id, format } => id == format.broadcast() || id == self.id,
            Destination::Logical { mda, format } => {
                if mda == format.broadcast() {
                    return true;
                }
                if self.mode == ApicMode::X2Apic {
                    let ldr = x2apic_ldr(self.id);
                    return mda >> 16 == ldr >> 16 && ldr & mda & 0xFFFF != 0;
                }
                let Ok(mda) = u8::try_from(mda) else {
                    return false;
                };
                match u32::from(self.dfr_model) {
                    DFR_MODEL_FLAT => self.logical_id & mda != 0,
                    DFR_MODEL_CLUSTER => {
                        self.logical_id >> 4 == mda >> 4 && self.logical_id & mda & 0xF != 0
                    }
                    _ => false,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_key_packs_losslessly() {
        for key in [
            RouteKey {
                mode: ApicMode::Disabled,
                id: 0,
                logical_id: 0,
                dfr_model: 0,
            },
            RouteKey {
                mode: ApicMode::XApic,
                id: 0xFF,
                logical_id: 0x81,
                dfr_model: 0xF,
            },
            RouteKey {
                mode: ApicMode::X2Apic,
                id: u32::MAX,
                logical_id: 0xFF,
                dfr_model: 0x5,
            },
        ] {
            assert_eq!(RouteKey::unpack(key.pack()), key);
            let physical = (key.mode != ApicMode::Disabled).then_some(key.id);
            assert_eq!(RouteKey::physical_id(key.pack()), physical);
        }
    }
}
