//! The I/O APIC (82093AA, version 0x11, 24 pins): an index register
//! (IOREGSEL) and a data window (IOWIN) in front of the ID, version and
//! arbitration registers and 24 64-bit redirection entries.
//!
//! Each pin has an input level (`set_input`, the electrical level; an
//! active-low entry inverts it). An edge-triggered pin sends its message on
//! each rising edge of the asserted level while unmasked; edges on a masked
//! pin are lost (82093AA). A level-triggered pin sends while asserted,
//! unmasked and its remote IRR is clear; a fixed or lowest-priority message
//! that some local APIC accepted sets remote IRR, which the EOI broadcast of
//! that vector clears, after which a pin still asserted sends again. So
//! does unmasking or reprogramming an asserted level pin.
//!
//! Delivery is the caller's: every message goes through the `route`
//! closure, which returns whether any local APIC accepted it. ExtINT (there
//! is no 8259 behind it), SMI and the reserved modes go out like the others
//! and every local APIC ignores them.

use super::message::{DeliveryMode, DestFormat, Destination, Message};
use super::regs::*;

/// The I/O APIC's registers and pin levels.
#[derive(Debug)]
pub(crate) struct IoApic {
    /// ID register (bits 27:24); the arbitration ID follows it.
    id: u32,
    /// IOREGSEL.
    select: u8,
    redir: [u64; IOAPIC_PINS],
    /// Electrical input level of each pin (bit = pin).
    input: u32,
}

impl IoApic {
    pub(crate) fn new() -> IoApic {
        IoApic {
            id: 0,
            select: 0,
            redir: [REDIR_RESET; IOAPIC_PINS],
            input: 0,
        }
    }

    /// The redirection entry of `pin` (tests and debugging).
    pub(crate) fn entry(&self, pin: usize) -> Option<u64> {
        self.redir.get(pin).copied()
    }

    fn asserted(&self, pin: usize) -> bool {
        let high = self.input & (1 << pin) != 0;
        let active_low = self.redir[pin] & REDIR_POLARITY_LOW != 0;
        high != active_low
    }

    /// Drive pin `pin`'s input high or low. Pins past the last are ignored.
    pub(crate) fn set_input(
        &mut self,
        pin: u32,
        high: bool,
        route: &mut dyn FnMut(&Message) -> bool,
    ) {
        let Some(p) = usize::try_from(pin).ok().filter(|&p| p < IOAPIC_PINS) else {
            log::debug!("I/O APIC: no pin {pin}");
            return;
        };
        let was = self.asserted(p);
        if high {
            self.input |= 1 << p;
        } else {
            self.input &= !(1 << p);
        }
        let now = self.asserted(p);
        let level_triggered = self.redir[p] & REDIR_TRIGGER_LEVEL != 0;
        if now && (level_triggered || !was) {
            self.service(p, route);
        }
    }

    /// Send pin `p`'s message if the entry lets it through.
    fn service(&mut self, p: usize, route: &mut dyn FnMut(&Message) -> bool) {
        let entry = self.redir[p];
        let level = entry & REDIR_TRIGGER_LEVEL != 0;
        if entry & REDIR_MASKED != 0
            || (level && (entry & REDIR_REMOTE_IRR != 0 || !self.asserted(p)))
        {
            return;
        }
        let msg = message(entry);
        if msg.mode == DeliveryMode::ExtInt {
            log::debug!("I/O APIC pin {p}: ExtINT has no 8259 behind it; dropped");
        }
        let accepted = route(&msg);
        if accepted
            && level
            && matches!(msg.mode, DeliveryMode::Fixed | DeliveryMode::LowestPriority)
        {
            self.redir[p] |= REDIR_REMOTE_IRR;
        }
    }

    /// EOI broadcast from a local APIC: clear remote IRR of every level pin
    /// with this vector, and send again the ones still asserted.
    pub(crate) fn eoi(&mut self, vector: u8, route: &mut dyn FnMut(&Message) -> bool) {
        for p in 0..IOAPIC_PINS {
            let entry = self.redir[p];
            let waiting = entry & REDIR_TRIGGER_LEVEL != 0 && entry & REDIR_REMOTE_IRR != 0;
            if waiting && (entry & REDIR_VECTOR_MASK) as u8 == vector {
                self.redir[p] &= !REDIR_REMOTE_IRR;
                self.service(p, route);
            }
        }
    }

    /// MMIO read. IOREGSEL (bytes 0-3) and IOWIN (bytes 0x10-0x13) read as
    /// the bytes of their 32-bit value in each lane; everything else reads 0.
    pub(crate) fn mmio_read(&self, offset: u64, data: &mut [u8]) {
        for (i, byte) in data.iter_mut().enumerate() {
            let o = offset.saturating_add(i as u64);
            let lane = (o % 4) as usize;
            let value = match o - o % 4 {
                IOAPIC_IOREGSEL => u32::from(self.select),
                IOAPIC_IOWIN => self.read_window(),
                _ => 0,
            };
            *byte = value.to_le_bytes()[lane];
        }
    }

    /// MMIO write. IOREGSEL takes the low byte of any write at offset 0;
    /// IOWIN takes 4-byte writes at 0x10; everything else is ignored.
    pub(crate) fn mmio_write(
        &mut self,
        offset: u64,
        data: &[u8],
        route: &mut dyn FnMut(&Message) -> bool,
    ) {
        match (offset, data) {
            (IOAPIC_IOREGSEL, [select, ..]) => self.select = *select,
            (IOAPIC_IOWIN, &[a, b, c, d]) => {
                self.write_window(u32::from_le_bytes([a, b, c, d]), route)
            }
            _ => log::debug!("I/O APIC: {}-byte write at {offset:#x} ignored", data.len()),
        }
    }

    /// Pin and half (false = low dword) of a redirection register index.
    fn redir_index(&self) -> Option<(usize, bool)> {
        let i = usize::from(self.select.checked_sub(IOAPIC_REG_REDIR_FIRST)?);
        (i / 2 < IOAPIC_PINS).then_some((i / 2, i % 2 == 1))
    }

    fn read_window(&self) -> u32 {
        match self.select {
            IOAPIC_REG_ID | IOAPIC_REG_ARBITRATION => self.id,
            IOAPIC_REG_VERSION => IOAPIC_VERSION_VALUE,
            _ => match self.redir_index() {
                Some((pin, true)) => (self.redir[pin] >> 32) as u32,
                Some((pin, false)) => self.redir[pin] as u32,
                None => 0,
            },
        }
    }

    fn write_window(&mut self, value: u32, route: &mut dyn FnMut(&Message) -> bool) {
        if self.select == IOAPIC_REG_ID {
            self.id = value & IOAPIC_ID_MASK;
            return;
        }
        let Some((pin, high)) = self.redir_index() else {
            return; // version, arbitration (read-only) and undefined indices
        };
        let old = self.redir[pin];
        let mut new = if high {
            (old & !REDIR_HIGH_WRITABLE) | ((u64::from(value) << 32) & REDIR_HIGH_WRITABLE)
        } else {
            (old & !REDIR_LOW_WRITABLE) | (u64::from(value) & REDIR_LOW_WRITABLE)
        };
        // Remote IRR only means something for level-triggered entries.
        if new & REDIR_TRIGGER_LEVEL == 0 {
            new &= !REDIR_REMOTE_IRR;
        }
        self.redir[pin] = new;
        // An asserted level pin that is now unmasked sends (service checks).
        if new & REDIR_TRIGGER_LEVEL != 0 && self.asserted(pin) {
            self.service(pin, route);
        }
    }
}

/// The message a redirection entry sends.
fn message(entry: u64) -> Message {
    let dest = (entry >> REDIR_DEST_SHIFT) as u32;
    let format = DestFormat::XApic;
    Message {
        vector: (entry & REDIR_VECTOR_MASK) as u8,
        mode: DeliveryMode::from_bits(
            ((entry & REDIR_DELIVERY_MODE_MASK) >> REDIR_DELIVERY_MODE_SHIFT) as u32,
        ),
        level_trigger: entry & REDIR_TRIGGER_LEVEL != 0,
        assert: true,
        dest: if entry & REDIR_DEST_LOGICAL != 0 {
            Destination::Logical { mda: dest, format }
        } else {
            Destination::Physical { id: dest, format }
        },
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Accepts every message and records it.
    fn recorder(log: &mut Vec<Message>) -> impl FnMut(&Message) -> bool + '_ {
        |m| {
            log.push(*m);
            true
        }
    }

    fn write_reg(io: &mut IoApic, index: u8, value: u32, log: &mut Vec<Message>) {
        io.mmio_write(
            IOAPIC_IOREGSEL,
            &u32::from(index).to_le_bytes(),
            &mut recorder(log),
        );
        io.mmio_write(IOAPIC_IOWIN, &value.to_le_bytes(), &mut recorder(log));
    }

    fn read_reg(io: &mut IoApic, index: u8) -> u32 {
        io.mmio_write(IOAPIC_IOREGSEL, &[index], &mut |_| true);
        let mut b = [0u8; 4];
        io.mmio_read(IOAPIC_IOWIN, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn id_version_arbitration() {
        let mut io = IoApic::new();
        let mut log = Vec::new();
        assert_eq!(read_reg(&mut io, IOAPIC_REG_VERSION), 0x0017_0011);
        write_reg(&mut io, IOAPIC_REG_VERSION, 0, &mut log);
        assert_eq!(
            read_reg(&mut io, IOAPIC_REG_VERSION),
            0x0017_0011,
            "read-only"
        );
        write_reg(&mut io, IOAPIC_REG_ID, 0xFFFF_FFFF, &mut log);
        assert_eq!(
            read_reg(&mut io, IOAPIC_REG_ID),
            0x0F00_0000,
            "only bits 27:24"
        );
        assert_eq!(read_reg(&mut io, IOAPIC_REG_ARBITRATION), 0x0F00_0000);
        write_reg(&mut io, IOAPIC_REG_ARBITRATION, 0, &mut log);
        assert_eq!(
            read_reg(&mut io, IOAPIC_REG_ARBITRATION),
            0x0F00_0000,
            "read-only"
        );
        assert_eq!(read_reg(&mut io, 0x03), 0, "undefined index");
        assert_eq!(read_reg(&mut io, 0x40), 0, "past the last entry");
        assert!(log.is_empty());
    }

    #[test]
    fn redirection_entries_reset_masked_and_keep_writable_bits() {
        let mut io = IoApic::new();
        let mut log = Vec::new();
        for pin in 0..IOAPIC_PINS as u8 {
            assert_eq!(
                read_reg(&mut io, 0x10 + 2 * pin),
                1 << 16,
                "pin {pin} masked"
            );
            assert_eq!(read_reg(&mut io, 0x11 + 2 * pin), 0);
        }
        // Delivery status (12) and remote IRR (14) are read-only.
        write_reg(&mut io, 0x10 + 2 * 3, 0xFFFF_FFFF, &mut log);
        assert_eq!(read_reg(&mut io, 0x10 + 2 * 3), 0x0001_AFFF);
        // Bits 55:32 are reserved; 63:56 the destination.
        write_reg(&mut io, 0x11 + 2 * 3, 0xFFFF_FFFF, &mut log);
        assert_eq!(read_reg(&mut io, 0x11 + 2 * 3), 0xFF00_0000);
        assert_eq!(io.entry(3), Some(0xFF00_0000_0001_AFFF));
        assert!(log.is_empty(), "masked: nothing sent");
    }

    #[test]
    fn mmio_sizes() {
        let mut io = IoApic::new();
        // A byte write selects; a dword read returns the select.
        io.mmio_write(0, &[0x01], &mut |_| true);
        let mut b = [0u8; 4];
        io.mmio_read(0, &mut b);
        assert_eq!(b, [0x01, 0, 0, 0]);
        // A 2-byte read of the window's upper half.
        let mut h = [0u8; 2];
        io.mmio_read(0x12, &mut h);
        assert_eq!(h, [0x17, 0x00]);
        // An 8-byte read at 0x10: the window then zeros.
        let mut q = [0xAAu8; 8];
        io.mmio_read(0x10, &mut q);
        assert_eq!(q, [0x11, 0, 0x17, 0, 0, 0, 0, 0]);
        // A 2-byte window write is ignored.
        io.mmio_write(0, &[0x10], &mut |_| true);
        io.mmio_write(0x10, &[0x30, 0x00], &mut |_| true);
        assert_eq!(io.entry(0), Some(REDIR_RESET));
        // Elsewhere in the page: reads 0, writes ignored.
        let mut z = [0xAAu8; 4];
        io.mmio_read(0x20, &mut z);
        assert_eq!(z, [0; 4]);
        io.mmio_read(u64::MAX - 1, &mut z);
        assert_eq!(z, [0; 4]);
    }
}
