//! The I/O APIC through the chip: edge and level pins, masks, polarity,
//! remote IRR and the EOI broadcast, destinations, the MMIO device and the
//! interrupt lines.

use super::*;
use crate::bus::IoContext;
use crate::mmio::MmioBus;

const LEVEL: u64 = REDIR_TRIGGER_LEVEL;
const MASKED: u64 = REDIR_MASKED;
const ACTIVE_LOW: u64 = REDIR_POLARITY_LOW;
const LOGICAL: u64 = REDIR_DEST_LOGICAL;

fn ioapic_write(chip: &Arc<IrqChip>, index: u8, value: u32) {
    let dev = chip.ioapic_mmio();
    let mut dev = dev.lock().unwrap();
    let ctx = IoContext { vcpu: 0 };
    dev.write(ctx, IOAPIC_IOREGSEL, &u32::from(index).to_le_bytes());
    dev.write(ctx, IOAPIC_IOWIN, &value.to_le_bytes());
}

fn ioapic_read(chip: &Arc<IrqChip>, index: u8) -> u32 {
    let dev = chip.ioapic_mmio();
    let mut dev = dev.lock().unwrap();
    let ctx = IoContext { vcpu: 0 };
    dev.write(ctx, IOAPIC_IOREGSEL, &u32::from(index).to_le_bytes());
    let mut b = [0u8; 4];
    dev.read(ctx, IOAPIC_IOWIN, &mut b);
    u32::from_le_bytes(b)
}

/// Program pin `pin`'s redirection entry (high dword first, as an OS
/// does, so the low-dword write that unmasks sees the destination).
pub(super) fn program(chip: &Arc<IrqChip>, pin: u8, entry: u64) {
    ioapic_write(chip, 0x11 + 2 * pin, (entry >> 32) as u32);
    ioapic_write(chip, 0x10 + 2 * pin, entry as u32);
}

fn remote_irr(chip: &IrqChip, pin: u32) -> bool {
    chip.ioapic_entry(pin).unwrap() & REDIR_REMOTE_IRR != 0
}

fn dest(apic: u8) -> u64 {
    u64::from(apic) << REDIR_DEST_SHIFT
}

#[test]
fn edge_pin_sends_on_rising_edges() {
    let (chip, host) = enabled_chip(2);
    program(&chip, 14, 0x76 | dest(1));
    chip.set_irq(14, true);
    assert_eq!(irr(&chip, 1), vec![0x76]);
    assert_eq!(host.take_notified(), vec![1]);
    assert!(!remote_irr(&chip, 14), "edge: no remote IRR");
    drain(&chip, 1);
    chip.set_irq(14, true);
    assert_eq!(irr(&chip, 1), Vec::<u8>::new(), "still high: no edge");
    chip.set_irq(14, false);
    chip.irq_line(14).pulse();
    assert_eq!(irr(&chip, 1), vec![0x76]);
    // TMR cleared for edge interrupts.
    assert_eq!(vectors(&chip.lapic_state(1).unwrap().tmr), Vec::<u8>::new());
}

#[test]
fn masked_edges_are_lost() {
    let (chip, _) = enabled_chip(1);
    program(&chip, 14, 0x81 | MASKED);
    chip.irq_line(14).pulse();
    program(&chip, 14, 0x81);
    assert_eq!(irr(&chip, 0), Vec::<u8>::new());
    chip.set_irq(14, true);
    assert_eq!(irr(&chip, 0), vec![0x81]);
}

#[test]
fn level_pin_remote_irr_and_eoi_redelivery() {
    let (chip, host) = enabled_chip(1);
    program(&chip, 14, 0x77 | LEVEL);
    chip.set_irq(14, true);
    assert_eq!(irr(&chip, 0), vec![0x77]);
    assert!(remote_irr(&chip, 14));
    assert_eq!(vectors(&chip.lapic_state(0).unwrap().tmr), vec![0x77]);
    assert_eq!(host.take_notified(), vec![0]);
    // Taken; held high: no second message until the EOI.
    assert_eq!(chip.acknowledge(0), Some(0x77));
    chip.set_irq(14, true);
    assert_eq!(irr(&chip, 0), Vec::<u8>::new());
    // EOI while still high: remote IRR cleared, sent again.
    write(&chip, 0, APIC_EOI, 0);
    assert_eq!(irr(&chip, 0), vec![0x77]);
    assert!(remote_irr(&chip, 14));
    assert_eq!(host.take_notified(), vec![0]);
    // Lowered before the EOI: remote IRR cleared, nothing more.
    chip.acknowledge(0).unwrap();
    chip.set_irq(14, false);
    write(&chip, 0, APIC_EOI, 0);
    assert!(!remote_irr(&chip, 14));
    assert_eq!(irr(&chip, 0), Vec::<u8>::new());
    // TMR stays set after the EOI until an edge interrupt of that vector.
    assert_eq!(vectors(&chip.lapic_state(0).unwrap().tmr), vec![0x77]);
}

#[test]
fn level_pin_coalesces_while_in_service() {
    let (chip, _) = enabled_chip(1);
    program(&chip, 14, 0x98 | LEVEL);
    chip.set_irq(14, true);
    chip.acknowledge(0).unwrap();
    chip.set_irq(14, false);
    chip.set_irq(14, true);
    chip.set_irq(14, false);
    write(&chip, 0, APIC_EOI, 0);
    assert_eq!(irr(&chip, 0), Vec::<u8>::new(), "one interrupt in all");
    assert!(!remote_irr(&chip, 14));
}

#[test]
fn level_pin_raised_again_after_eoi() {
    let (chip, _) = enabled_chip(1);
    program(&chip, 14, 0x99 | LEVEL);
    chip.set_irq(14, true);
    // The handler lowers the line, then EOIs; the line rises again.
    chip.acknowledge(0).unwrap();
    chip.set_irq(14, false);
    write(&chip, 0, APIC_EOI, 0);
    chip.set_irq(14, true);
    assert_eq!(irr(&chip, 0), vec![0x99]);
}

#[test]
fn unmasking_an_asserted_level_pin_sends() {
    let (chip, _) = enabled_chip(1);
    program(&chip, 14, 0x82 | LEVEL | MASKED);
    chip.set_irq(14, true);
    assert_eq!(irr(&chip, 0), Vec::<u8>::new());
    program(&chip, 14, 0x82 | LEVEL);
    assert_eq!(irr(&chip, 0), vec![0x82]);
    // Masked in the handler, EOI, unmasked: sent again (still high).
    chip.acknowledge(0).unwrap();
    program(&chip, 14, 0x82 | LEVEL | MASKED);
    write(&chip, 0, APIC_EOI, 0);
    assert!(!remote_irr(&chip, 14));
    assert_eq!(irr(&chip, 0), Vec::<u8>::new());
    program(&chip, 14, 0x82 | LEVEL);
    assert_eq!(irr(&chip, 0), vec![0x82]);
}

#[test]
fn active_low_inverts_the_level() {
    let (chip, _) = enabled_chip(1);
    // Input low = asserted for an active-low pin: programming it sends.
    program(&chip, 5, 0x65 | LEVEL | ACTIVE_LOW);
    assert_eq!(irr(&chip, 0), vec![0x65]);
    chip.acknowledge(0).unwrap();
    chip.set_irq(5, true); // de-asserted
    write(&chip, 0, APIC_EOI, 0);
    assert_eq!(irr(&chip, 0), Vec::<u8>::new());
    assert!(!remote_irr(&chip, 5));
    chip.set_irq(5, false);
    assert_eq!(irr(&chip, 0), vec![0x65]);
    chip.set_irq(5, true);
    drain(&chip, 0);
    // Edge, active low: the falling input is the rising edge.
    program(&chip, 6, 0x66 | ACTIVE_LOW);
    chip.set_irq(6, true);
    assert_eq!(irr(&chip, 0), Vec::<u8>::new());
    chip.set_irq(6, false);
    assert_eq!(irr(&chip, 0), vec![0x66]);
}

#[test]
fn remote_irr_is_read_only_and_cleared_by_edge_mode() {
    let (chip, _) = enabled_chip(1);
    program(&chip, 3, 0x50 | LEVEL);
    chip.set_irq(3, true);
    assert!(remote_irr(&chip, 3));
    ioapic_write(&chip, 0x10 + 6, (0x50 | LEVEL) as u32);
    assert!(remote_irr(&chip, 3), "a write does not clear it");
    assert_ne!(ioapic_read(&chip, 0x10 + 6) & (1 << 14), 0);
    // The destination (high dword) can change while it is set.
    ioapic_write(&chip, 0x11 + 6, 0x0100_0000);
    assert!(remote_irr(&chip, 3));
    ioapic_write(&chip, 0x10 + 6, 0x50);
    assert!(!remote_irr(&chip, 3), "edge mode clears it");
}

#[test]
fn not_accepted_leaves_remote_irr_clear() {
    let (chip, _) = chip(1); // software-disabled APIC
    program(&chip, 3, 0x50 | LEVEL);
    chip.set_irq(3, true);
    assert!(!remote_irr(&chip, 3));
    // Once the APIC is enabled, the next assertion gets through.
    write(&chip, 0, APIC_SVR, 0x1FF);
    chip.set_irq(3, true);
    assert!(remote_irr(&chip, 3));
    assert_eq!(irr(&chip, 0), vec![0x50]);
}

#[test]
fn physical_and_logical_destinations() {
    let (chip, _) = enabled_chip(4);
    for v in 0..4 {
        write(&chip, v, APIC_LDR, (1 << v) << 24);
    }
    program(&chip, 14, 0x85 | LEVEL | dest(1));
    chip.set_irq(14, true);
    assert_eq!(
        (0..4).map(|v| irr(&chip, v).len()).collect::<Vec<_>>(),
        vec![0, 1, 0, 0]
    );
    chip.set_irq(14, false);
    drain(&chip, 1);
    assert!(!remote_irr(&chip, 14));
    // Logical 0x0D: APICs 0, 2 and 3, each takes it once.
    program(&chip, 14, 0x86 | LEVEL | LOGICAL | dest(0x0D));
    chip.set_irq(14, true);
    let got: Vec<_> = (0..4).map(|v| irr(&chip, v)).collect();
    assert_eq!(got, vec![vec![0x86], vec![], vec![0x86], vec![0x86]]);
    // Broadcast destination 0xFF.
    chip.set_irq(14, false);
    for v in 0..4 {
        drain(&chip, v);
    }
    program(&chip, 15, 0x87 | dest(0xFF));
    chip.set_irq(15, true);
    assert!((0..4).all(|v| irr(&chip, v) == vec![0x87]));
}

#[test]
fn lowest_priority_pin() {
    let (chip, _) = enabled_chip(4);
    for v in 0..4 {
        write(&chip, v, APIC_LDR, (1 << v) << 24);
        write(&chip, v, APIC_TPR, if v == 3 { 0 } else { 0x30 });
    }
    program(
        &chip,
        9,
        0x49 | 1 << REDIR_DELIVERY_MODE_SHIFT | LOGICAL | dest(0x0F),
    );
    chip.set_irq(9, true);
    assert_eq!(irr(&chip, 3), vec![0x49]);
    assert!((0..3).all(|v| irr(&chip, v).is_empty()));
}

#[test]
fn level_eoi_reaches_every_pin_with_the_vector() {
    let (chip, _) = enabled_chip(2);
    // Two level pins share vector 0x70 on two APICs.
    program(&chip, 1, 0x70 | LEVEL | dest(0));
    program(&chip, 2, 0x70 | LEVEL | dest(1));
    chip.set_irq(1, true);
    chip.set_irq(2, true);
    chip.set_irq(2, false);
    assert!(remote_irr(&chip, 1) && remote_irr(&chip, 2));
    drain(&chip, 1);
    assert!(!remote_irr(&chip, 2));
    // Pin 1 (still high) was cleared too, and sent again to APIC 0, whose
    // IRR already had it: one bit.
    assert!(remote_irr(&chip, 1));
    assert_eq!(irr(&chip, 0), vec![0x70]);
}

#[test]
fn nmi_init_and_extint_pins() {
    let (chip, host) = enabled_chip(2);
    program(&chip, 7, 4 << REDIR_DELIVERY_MODE_SHIFT | LEVEL | dest(1));
    chip.set_irq(7, true);
    assert_eq!(chip.take_events(1).nmis, 1);
    assert!(!remote_irr(&chip, 7), "no EOI will come for an NMI");
    program(&chip, 8, 5 << REDIR_DELIVERY_MODE_SHIFT | dest(1));
    chip.set_irq(8, true);
    assert!(chip.take_events(1).init);
    host.take_notified();
    program(&chip, 0, 0x30 | 7 << REDIR_DELIVERY_MODE_SHIFT | dest(0));
    chip.set_irq(0, true);
    assert_eq!(irr(&chip, 0), Vec::<u8>::new());
    assert!(chip.take_events(0).is_empty());
    assert_eq!(host.take_notified(), Vec::<u32>::new(), "ExtINT dropped");
}

#[test]
fn pins_past_the_last_are_ignored() {
    let (chip, host) = enabled_chip(1);
    chip.set_irq(24, true);
    chip.set_irq(u32::MAX, true);
    assert_eq!(host.take_notified(), Vec::<u32>::new());
    assert_eq!(chip.ioapic_entry(24), None);
}

#[test]
fn mmio_device_on_a_bus() {
    let (chip, _) = enabled_chip(1);
    let mut bus = MmioBus::new();
    bus.insert(IOAPIC_DEFAULT_BASE, IOAPIC_MMIO_LEN, chip.ioapic_mmio())
        .unwrap();
    let ctx = IoContext { vcpu: 0 };
    assert!(bus.write(ctx, IOAPIC_DEFAULT_BASE, &[IOAPIC_REG_VERSION, 0, 0, 0]));
    let mut b = [0u8; 4];
    assert!(bus.read(ctx, IOAPIC_DEFAULT_BASE + IOAPIC_IOWIN, &mut b));
    assert_eq!(u32::from_le_bytes(b), 0x0017_0011);
    // Program pin 4 (COM1) through the bus and raise it through its line.
    bus.write(ctx, IOAPIC_DEFAULT_BASE, &[0x18, 0, 0, 0]);
    bus.write(
        ctx,
        IOAPIC_DEFAULT_BASE + IOAPIC_IOWIN,
        &0x24u32.to_le_bytes(),
    );
    chip.irq_line(4).pulse();
    assert_eq!(irr(&chip, 0), vec![0x24]);
}

#[test]
fn lines_and_device_do_not_keep_the_chip_alive() {
    let (chip, host) = enabled_chip(1);
    let line = chip.irq_line(4);
    let dev = chip.ioapic_mmio();
    drop(chip);
    line.pulse();
    let mut b = [0u8; 4];
    dev.lock().unwrap().read(IoContext { vcpu: 0 }, 0, &mut b);
    assert_eq!(b, [0xFF; 4], "no chip: reads as nothing");
    assert_eq!(host.take_notified(), Vec::<u32>::new());
}

#[test]
fn a_pin_notification_names_the_pin() {
    let (chip, host) = enabled_chip(2);
    program(&chip, 5, dest(1) | 0x35);
    host.take_causes();
    chip.set_irq(5, true);
    assert_eq!(
        host.take_causes(),
        vec![(1, crate::irqchip::NotifyCause::Line { pin: Some(5) })]
    );
}
