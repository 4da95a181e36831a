//! KVM's paravirtual EOI (`lapic/pv_eoi.rs`): when the local APIC offers
//! it, the guest ends an interrupt by clearing a flag in its memory, and
//! the chip takes that EOI at its next look at the APIC.

use super::*;

const FLAG: u64 = FAKE_RAM.start + 0x40;

/// An x2APIC-mode, software-enabled APIC with PV EOI on at `FLAG`.
fn pv_chip(vcpus: u32) -> (Arc<IrqChip>, Arc<FakeHost>) {
    let (chip, host) = chip(vcpus);
    for v in 0..vcpus {
        enable_x2apic(&chip, v);
        chip.msr_write(v, x2msr(APIC_SVR), 0x1FF).unwrap();
        chip.msr_write(
            v,
            MSR_KVM_PV_EOI_EN,
            (FLAG + 4 * u64::from(v)) | PV_EOI_ENABLE,
        )
        .unwrap();
    }
    (chip, host)
}

fn flag(host: &FakeHost, vcpu: u32) -> bool {
    host.ram
        .lock()
        .unwrap()
        .get(&(FLAG + 4 * u64::from(vcpu)))
        .is_some_and(|w| w & 1 != 0)
}

/// What a guest's `kvm_guest_apic_eoi_write` does: clear the flag if set
/// (true: done), else the caller writes the EOI register.
fn guest_pv_eoi(host: &FakeHost, vcpu: u32) -> bool {
    let mut ram = host.ram.lock().unwrap();
    let w = ram.entry(FLAG + 4 * u64::from(vcpu)).or_insert(0);
    let was = *w & 1 != 0;
    *w &= !1;
    was
}

/// A fixed self-IPI of `vector` on vcpu 0 (x2APIC SELF IPI register).
fn self_ipi(chip: &IrqChip, vector: u8) {
    chip.msr_write(0, x2msr(APIC_SELF_IPI), u64::from(vector))
        .unwrap();
}

#[test]
fn a_lone_edge_interrupt_is_offered_and_its_eoi_taken_from_memory() {
    let (chip, host) = pv_chip(1);
    self_ipi(&chip, 0x40);
    host.take_eois();
    assert_eq!(chip.acknowledge(0), Some(0x40));
    assert!(flag(&host, 0), "offered: the guest may EOI by memory");
    // The handler ends with a PV EOI: no EOI register write.
    assert!(guest_pv_eoi(&host, 0));
    // The VMM's poll before the next entry sees it and does the EOI.
    chip.poll_pv_eoi(0);
    assert_eq!(isr(&chip, 0), Vec::<u8>::new());
    assert_eq!(host.take_eois(), vec![(0, 0x40)]);
    // The next interrupt is deliverable as usual.
    self_ipi(&chip, 0x30);
    assert_eq!(chip.pending_interrupt(0), Some(0x30));
}

#[test]
fn an_unused_offer_survives_the_poll_and_is_withdrawn_when_another_interrupt_comes() {
    let (chip, host) = pv_chip(1);
    self_ipi(&chip, 0x40);
    assert_eq!(chip.acknowledge(0), Some(0x40));
    chip.poll_pv_eoi(0);
    assert!(
        flag(&host, 0),
        "the guest has not ended it yet: still offered"
    );
    // A higher vector arrives while 0x40 is in service: the offer is taken
    // back (the guest will write EOI), and the new one nests.
    self_ipi(&chip, 0x50);
    assert!(!flag(&host, 0), "withdrawn");
    assert_eq!(isr(&chip, 0), vec![0x40]);
    assert_eq!(chip.acknowledge(0), Some(0x50));
    assert!(!flag(&host, 0), "two in service: no offer");
    // The guest's handlers now end with EOI writes; both retire.
    assert!(!guest_pv_eoi(&host, 0));
    chip.msr_write(0, x2msr(APIC_EOI), 0).unwrap();
    chip.msr_write(0, x2msr(APIC_EOI), 0).unwrap();
    assert_eq!(isr(&chip, 0), Vec::<u8>::new());
}

#[test]
fn no_offer_with_another_request_pending_or_for_a_level_triggered_vector() {
    let (chip, host) = pv_chip(1);
    self_ipi(&chip, 0x50);
    self_ipi(&chip, 0x40);
    assert_eq!(chip.acknowledge(0), Some(0x50));
    assert!(
        !flag(&host, 0),
        "0x40 still requested: its delivery needs the EOI"
    );
    chip.msr_write(0, x2msr(APIC_EOI), 0).unwrap();
    assert_eq!(chip.acknowledge(0), Some(0x40));
    assert!(flag(&host, 0), "now alone");
    assert!(guest_pv_eoi(&host, 0));

    // A level-triggered I/O APIC interrupt: its EOI goes to the I/O APIC.
    let (chip, host) = pv_chip(1);
    let pin = 3;
    // Redirection entry: vector 0x60, level, physical destination 0.
    super::ioapic::program(&chip, pin, 0x60 | REDIR_TRIGGER_LEVEL);
    chip.set_irq(u32::from(pin), true);
    assert_eq!(chip.acknowledge(0), Some(0x60));
    assert!(!flag(&host, 0), "level-triggered: never offered");
}

#[test]
fn the_msr_reads_back_refuses_an_unaligned_flag_and_init_turns_it_off() {
    let (chip, _host) = pv_chip(1);
    assert_eq!(
        chip.msr_read(0, MSR_KVM_PV_EOI_EN).unwrap(),
        FLAG | PV_EOI_ENABLE
    );
    assert!(chip
        .msr_write(0, MSR_KVM_PV_EOI_EN, (FLAG + 2) | PV_EOI_ENABLE)
        .is_err());
    // Disabled: any address, no offer.
    chip.msr_write(0, MSR_KVM_PV_EOI_EN, FLAG + 2).unwrap();
    assert_eq!(chip.msr_read(0, MSR_KVM_PV_EOI_EN).unwrap(), FLAG + 2);

    // INIT resets it: the guest enables it again when it comes back.
    let (chip, _host) = pv_chip(2);
    // vcpu0 sends INIT (delivery mode 5, assert) to APIC id 1.
    chip.msr_write(0, X2APIC_MSR_ICR, (1 << 32) | 0x4500)
        .unwrap();
    assert!(chip.take_events(1).init);
    assert_eq!(chip.msr_read(1, MSR_KVM_PV_EOI_EN).unwrap(), 0);
    assert_eq!(
        chip.msr_read(0, MSR_KVM_PV_EOI_EN).unwrap(),
        FLAG | PV_EOI_ENABLE,
        "the sender keeps its own"
    );
}

#[test]
fn a_flag_outside_guest_ram_turns_pv_eoi_off() {
    let (chip, host) = chip(1);
    enable_x2apic(&chip, 0);
    chip.msr_write(0, x2msr(APIC_SVR), 0x1FF).unwrap();
    chip.msr_write(0, MSR_KVM_PV_EOI_EN, 0x10_0000 | PV_EOI_ENABLE)
        .unwrap();
    self_ipi(&chip, 0x40);
    assert_eq!(chip.acknowledge(0), Some(0x40));
    assert_eq!(chip.msr_read(0, MSR_KVM_PV_EOI_EN).unwrap(), 0);
    assert!(host.ram.lock().unwrap().is_empty());
    chip.msr_write(0, x2msr(APIC_EOI), 0).unwrap();
    assert_eq!(isr(&chip, 0), Vec::<u8>::new());
}
