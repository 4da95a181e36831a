//! Interrupt acceptance and priorities: IRR, ISR, TPR, PPR, EOI order,
//! the pending hint, CR8, software-disabled APICs.

use super::*;

const SELF_FIXED: u32 = ICR_LEVEL_ASSERT | SHORTHAND_SELF << ICR_SHORTHAND_SHIFT;

fn self_ipi(chip: &IrqChip, vcpu: u32, vector: u8) {
    send_ipi(chip, vcpu, 0, SELF_FIXED | u32::from(vector));
}

#[test]
fn higher_class_preempts_lower_in_service() {
    let (chip, _) = enabled_chip(1);
    self_ipi(&chip, 0, 0x31);
    assert_eq!(chip.pending_interrupt(0), Some(0x31));
    assert_eq!(chip.acknowledge(0), Some(0x31));
    assert_eq!(isr(&chip, 0), vec![0x31]);
    assert_eq!(read(&chip, 0, APIC_PPR), 0x30, "PPR = class of ISR");
    // Same class: blocked while 0x31 is in service.
    self_ipi(&chip, 0, 0x35);
    assert_eq!(chip.pending_interrupt(0), None);
    assert!(!chip.has_pending_hint(0));
    // Higher class: deliverable during it.
    self_ipi(&chip, 0, 0x61);
    assert_eq!(chip.pending_interrupt(0), Some(0x61));
    assert_eq!(chip.acknowledge(0), Some(0x61));
    assert_eq!(isr(&chip, 0), vec![0x31, 0x61]);
    assert_eq!(read(&chip, 0, APIC_PPR), 0x60);
    // EOI retires the highest in-service vector first.
    write(&chip, 0, APIC_EOI, 0);
    assert_eq!(isr(&chip, 0), vec![0x31]);
    assert_eq!(chip.pending_interrupt(0), None, "0x35 still below PPR 0x30");
    write(&chip, 0, APIC_EOI, 0);
    assert_eq!(isr(&chip, 0), Vec::<u8>::new());
    assert_eq!(chip.pending_interrupt(0), Some(0x35));
    assert_eq!(drain(&chip, 0), vec![0x35]);
    // EOI with nothing in service does nothing.
    write(&chip, 0, APIC_EOI, 0);
    assert_eq!(read(&chip, 0, APIC_PPR), 0);
}

#[test]
fn highest_requested_vector_goes_first() {
    let (chip, _) = enabled_chip(1);
    for v in [0x40, 0x92, 0x91, 0x20] {
        self_ipi(&chip, 0, v);
    }
    assert_eq!(irr(&chip, 0), vec![0x20, 0x40, 0x91, 0x92]);
    // 0x91 is the same class as 0x92 in service: it waits for the EOI.
    assert_eq!(chip.acknowledge(0), Some(0x92));
    assert_eq!(chip.acknowledge(0), None);
    write(&chip, 0, APIC_EOI, 0);
    assert_eq!(drain(&chip, 0), vec![0x91, 0x40, 0x20]);
}

#[test]
fn tpr_blocks_lower_classes() {
    let (chip, _) = enabled_chip(1);
    write(&chip, 0, APIC_TPR, 0x50);
    self_ipi(&chip, 0, 0x45);
    self_ipi(&chip, 0, 0x5F);
    assert_eq!(
        chip.pending_interrupt(0),
        None,
        "classes 4 and 5 <= TPR class 5"
    );
    assert!(!chip.has_pending_hint(0));
    self_ipi(&chip, 0, 0x61);
    assert_eq!(chip.pending_interrupt(0), Some(0x61));
    assert_eq!(drain(&chip, 0), vec![0x61]);
    // PPR keeps TPR's subclass when TPR wins; APR too.
    write(&chip, 0, APIC_TPR, 0x4A);
    assert_eq!(read(&chip, 0, APIC_PPR), 0x4A);
    assert_eq!(chip.pending_interrupt(0), Some(0x5F));
    write(&chip, 0, APIC_TPR, 0);
    assert_eq!(drain(&chip, 0), vec![0x5F, 0x45]);
}

#[test]
fn ppr_is_isr_class_when_above_tpr() {
    let (chip, _) = enabled_chip(1);
    write(&chip, 0, APIC_TPR, 0x23);
    self_ipi(&chip, 0, 0x87);
    chip.acknowledge(0).unwrap();
    assert_eq!(read(&chip, 0, APIC_PPR), 0x80);
    write(&chip, 0, APIC_EOI, 0);
    assert_eq!(read(&chip, 0, APIC_PPR), 0x23);
}

#[test]
fn arbitration_priority() {
    let (chip, _) = enabled_chip(1);
    write(&chip, 0, APIC_TPR, 0x35);
    assert_eq!(read(&chip, 0, APIC_APR), 0x35, "TPR above IRR and ISR");
    self_ipi(&chip, 0, 0x72);
    assert_eq!(read(&chip, 0, APIC_APR), 0x70, "IRR class above TPR");
    chip.acknowledge(0).unwrap();
    assert_eq!(read(&chip, 0, APIC_APR), 0x70, "ISR class above TPR");
}

#[test]
fn pending_hint_tracks_deliverable_work() {
    let (chip, host) = enabled_chip(2);
    assert!(!chip.has_pending_hint(1));
    // From vCPU 0 to vCPU 1: hint set, vCPU 1 notified.
    send_ipi(&chip, 0, 1, ICR_LEVEL_ASSERT | 0x41);
    assert!(chip.has_pending_hint(1));
    assert_eq!(host.take_notified(), vec![1]);
    // Taking it clears the hint (nothing else pending).
    assert_eq!(chip.acknowledge(1), Some(0x41));
    assert!(!chip.has_pending_hint(1));
    // Blocked by the in-service vector: no hint, no notify.
    send_ipi(&chip, 0, 1, ICR_LEVEL_ASSERT | 0x42);
    assert!(!chip.has_pending_hint(1));
    assert_eq!(host.take_notified(), Vec::<u32>::new());
    // The EOI unblocks it: the hint comes back (the vCPU's own action).
    write(&chip, 1, APIC_EOI, 0);
    assert!(chip.has_pending_hint(1));
    assert_eq!(chip.pending_interrupt(1), Some(0x42));
    drain(&chip, 1);
    assert!(!chip.has_pending_hint(1));
    // Events set the hint until taken.
    send_ipi(&chip, 0, 1, ICR_LEVEL_ASSERT | DELIVERY_NMI << 8);
    assert!(chip.has_pending_hint(1));
    assert_eq!(chip.take_events(1).nmis, 1);
    assert!(!chip.has_pending_hint(1));
    assert!(!chip.has_pending_hint(9), "no such vCPU");
}

#[test]
fn cr8_is_tpr_high_nibble() {
    let (chip, _) = enabled_chip(1);
    chip.set_cr8(0, 5);
    assert_eq!(read(&chip, 0, APIC_TPR), 0x50);
    write(&chip, 0, APIC_TPR, 0x7A);
    assert_eq!(chip.cr8(0), 7);
    chip.set_cr8(0, 0x1F);
    assert_eq!(
        read(&chip, 0, APIC_TPR),
        0xF0,
        "only CR8[3:0]; TPR[3:0] cleared"
    );
    // Lowering CR8 makes a blocked interrupt deliverable.
    self_ipi(&chip, 0, 0x65);
    assert!(!chip.has_pending_hint(0));
    chip.set_cr8(0, 2);
    assert!(chip.has_pending_hint(0));
    assert_eq!(chip.pending_interrupt(0), Some(0x65));
    assert_eq!(chip.cr8(7), 0, "no such vCPU");
}

#[test]
fn software_disabled_apic_takes_no_fixed_interrupts() {
    let (chip, host) = chip(2);
    write(&chip, 0, APIC_SVR, 0x1FF);
    send_ipi(&chip, 0, 1, ICR_LEVEL_ASSERT | 0x50);
    assert_eq!(irr(&chip, 1), Vec::<u8>::new());
    assert!(!chip.has_pending_hint(1));
    assert_eq!(host.take_notified(), Vec::<u32>::new());
    // NMI, INIT and SIPI still are.
    send_ipi(&chip, 0, 1, ICR_LEVEL_ASSERT | DELIVERY_NMI << 8);
    send_ipi(&chip, 0, 1, ICR_LEVEL_ASSERT | DELIVERY_INIT << 8);
    send_ipi(&chip, 0, 1, ICR_LEVEL_ASSERT | DELIVERY_STARTUP << 8 | 0x9A);
    let events = chip.take_events(1);
    assert!(events.init);
    assert_eq!(events.sipi, Some(0x9A));
    assert_eq!(events.nmis, 0, "the INIT after it dropped the NMI");
    assert_eq!(host.take_notified(), vec![1, 1, 1]);
    // Interrupts requested before the disable are still delivered.
    write(&chip, 0, APIC_TPR, 0);
    send_ipi(&chip, 0, 0, ICR_LEVEL_ASSERT | SHORTHAND_SELF << 18 | 0x50);
    write(&chip, 0, APIC_SVR, 0x0FF);
    assert_eq!(chip.pending_interrupt(0), Some(0x50));
}

#[test]
fn acknowledge_without_anything_pending() {
    let (chip, _) = enabled_chip(1);
    assert_eq!(chip.acknowledge(0), None);
    assert_eq!(chip.acknowledge(5), None);
    assert_eq!(chip.pending_interrupt(5), None);
    assert!(chip.take_events(5).is_empty());
}

#[test]
fn acknowledge_the_vector_that_was_injected() {
    // The VMM reads the pending vector, injects it, then acknowledges that
    // very vector: a higher one arriving in between stays requested.
    let (chip, _) = enabled_chip(1);
    self_ipi(&chip, 0, 0x41);
    let injected = chip.pending_interrupt(0).unwrap();
    self_ipi(&chip, 0, 0x81);
    assert!(chip.acknowledge_vector(0, injected));
    assert_eq!(isr(&chip, 0), vec![0x41]);
    assert_eq!(irr(&chip, 0), vec![0x81]);
    assert_eq!(chip.pending_interrupt(0), Some(0x81));
    assert!(chip.has_pending_hint(0));
    // Not requested (any more, or ever): nothing changes.
    assert!(!chip.acknowledge_vector(0, 0x41));
    assert!(!chip.acknowledge_vector(0, 0x55));
    assert!(!chip.acknowledge_vector(7, 0x81));
    assert_eq!(isr(&chip, 0), vec![0x41]);
}
