//! IPIs: shorthands, physical and logical destinations in every model,
//! lowest priority, NMI/INIT/SIPI events and the INIT state.

use super::*;
use crate::irqchip::CpuEvents;

const ASSERT: u32 = ICR_LEVEL_ASSERT;
const LOGICAL: u32 = ICR_DEST_LOGICAL;

fn shorthand(s: u32) -> u32 {
    s << ICR_SHORTHAND_SHIFT
}

fn mode(m: u32) -> u32 {
    m << ICR_DELIVERY_MODE_SHIFT
}

/// Which vCPUs have `vector` requested.
fn receivers(chip: &IrqChip, vector: u8) -> Vec<u32> {
    (0..chip.vcpus())
        .filter(|&v| irr(chip, v).contains(&vector))
        .collect()
}

fn clear_all(chip: &IrqChip) {
    for v in 0..chip.vcpus() {
        drain(chip, v);
    }
}

#[test]
fn physical_destination() {
    let (chip, host) = enabled_chip(4);
    send_ipi(&chip, 0, 2, ASSERT | 0x40);
    assert_eq!(receivers(&chip, 0x40), vec![2]);
    assert_eq!(host.take_notified(), vec![2]);
    send_ipi(&chip, 3, 7, ASSERT | 0x41);
    assert_eq!(receivers(&chip, 0x41), Vec::<u32>::new(), "no APIC 7");
    // Delivery status reads idle at once.
    assert_eq!(read(&chip, 3, APIC_ICR_LOW) & ICR_DELIVERY_STATUS, 0);
}

#[test]
fn physical_broadcast() {
    let (chip, host) = enabled_chip(4);
    send_ipi(&chip, 1, 0xFF, ASSERT | 0xCF);
    assert_eq!(receivers(&chip, 0xCF), vec![0, 1, 2, 3]);
    let mut notified = host.take_notified();
    notified.sort();
    assert_eq!(notified, vec![0, 1, 2, 3]);
}

#[test]
fn shorthands() {
    let (chip, _) = enabled_chip(4);
    // The destination field is ignored with a shorthand.
    send_ipi(&chip, 1, 3, ASSERT | shorthand(SHORTHAND_SELF) | 0x50);
    assert_eq!(receivers(&chip, 0x50), vec![1]);
    send_ipi(
        &chip,
        1,
        3,
        ASSERT | shorthand(SHORTHAND_ALL_INCLUDING_SELF) | 0x51,
    );
    assert_eq!(receivers(&chip, 0x51), vec![0, 1, 2, 3]);
    send_ipi(
        &chip,
        1,
        3,
        ASSERT | shorthand(SHORTHAND_ALL_EXCLUDING_SELF) | 0x52,
    );
    assert_eq!(receivers(&chip, 0x52), vec![0, 2, 3]);
}

#[test]
fn modified_xapic_ids_alias() {
    let (chip, _) = enabled_chip(4);
    write(&chip, 1, APIC_ID, 2 << 24);
    send_ipi(&chip, 0, 2, ASSERT | 0x60);
    assert_eq!(receivers(&chip, 0x60), vec![1, 2]);
    send_ipi(&chip, 0, 1, ASSERT | 0x61);
    assert_eq!(receivers(&chip, 0x61), Vec::<u32>::new());
}

#[test]
fn logical_flat() {
    let (chip, _) = enabled_chip(4);
    for v in 0..4 {
        write(&chip, v, APIC_LDR, (1 << v) << 24);
    }
    send_ipi(&chip, 0, 0x06, ASSERT | LOGICAL | 0x70);
    assert_eq!(receivers(&chip, 0x70), vec![1, 2]);
    send_ipi(&chip, 0, 0x30, ASSERT | LOGICAL | 0x71);
    assert_eq!(receivers(&chip, 0x71), Vec::<u32>::new());
    send_ipi(&chip, 0, 0xFF, ASSERT | LOGICAL | 0x72);
    assert_eq!(receivers(&chip, 0x72), vec![0, 1, 2, 3], "broadcast");
    // An APIC with LDR 0 matches only the broadcast.
    write(&chip, 3, APIC_LDR, 0);
    send_ipi(&chip, 0, 0x0F, ASSERT | LOGICAL | 0x73);
    assert_eq!(receivers(&chip, 0x73), vec![0, 1, 2]);
}

#[test]
fn logical_cluster() {
    let (chip, _) = enabled_chip(4);
    for (v, ldr) in [(0, 0x11), (1, 0x12), (2, 0x21), (3, 0x22)] {
        write(&chip, v, APIC_DFR, 0x0FFF_FFFF);
        write(&chip, v, APIC_LDR, ldr << 24);
    }
    send_ipi(&chip, 0, 0x13, ASSERT | LOGICAL | 0x80);
    assert_eq!(receivers(&chip, 0x80), vec![0, 1]);
    send_ipi(&chip, 0, 0x21, ASSERT | LOGICAL | 0x81);
    assert_eq!(receivers(&chip, 0x81), vec![2]);
    send_ipi(&chip, 0, 0x31, ASSERT | LOGICAL | 0x82);
    assert_eq!(receivers(&chip, 0x82), Vec::<u32>::new(), "no cluster 3");
    send_ipi(&chip, 0, 0xFF, ASSERT | LOGICAL | 0x83);
    assert_eq!(receivers(&chip, 0x83), vec![0, 1, 2, 3], "broadcast");
    // An undefined DFR model matches nothing but broadcast.
    write(&chip, 2, APIC_DFR, 0x5FFF_FFFF);
    send_ipi(&chip, 0, 0x21, ASSERT | LOGICAL | 0x84);
    assert_eq!(receivers(&chip, 0x84), Vec::<u32>::new());
}

#[test]
fn x2apic_physical_cluster_and_broadcast() {
    let (chip, _) = enabled_chip(20);
    for v in 0..20 {
        enable_x2apic(&chip, v);
    }
    let icr = |dest: u64, low: u32| chip.msr_write(0, X2APIC_MSR_ICR, dest << 32 | u64::from(low));
    icr(17, ASSERT | 0x40).unwrap();
    assert_eq!(receivers(&chip, 0x40), vec![17]);
    // Cluster 0, members 1 and 2; cluster 1, member 1 (= id 17).
    icr(0x0000_0006, ASSERT | LOGICAL | 0x41).unwrap();
    assert_eq!(receivers(&chip, 0x41), vec![1, 2]);
    icr(0x0001_0002, ASSERT | LOGICAL | 0x42).unwrap();
    assert_eq!(receivers(&chip, 0x42), vec![17]);
    icr(0x0002_FFFF, ASSERT | LOGICAL | 0x43).unwrap();
    assert_eq!(receivers(&chip, 0x43), Vec::<u32>::new(), "no cluster 2");
    icr(0xFFFF_FFFF, ASSERT | 0x44).unwrap();
    assert_eq!(receivers(&chip, 0x44), (0..20).collect::<Vec<_>>());
    // 0xFF is an ordinary id in x2APIC mode (no APIC 255 here).
    icr(0xFF, ASSERT | 0x45).unwrap();
    assert_eq!(receivers(&chip, 0x45), Vec::<u32>::new());
    // SELF IPI.
    chip.msr_write(5, x2msr(APIC_SELF_IPI), 0x46).unwrap();
    assert_eq!(receivers(&chip, 0x46), vec![5]);
}

#[test]
fn lowest_priority_picks_one() {
    let (chip, _) = enabled_chip(4);
    for v in 0..4 {
        write(&chip, v, APIC_LDR, (1 << v) << 24);
    }
    // All equal: ties split by vector (0x41 % 4 = 1, 0x42 % 4 = 2).
    send_ipi(
        &chip,
        0,
        0x0F,
        ASSERT | LOGICAL | mode(DELIVERY_LOWEST_PRIORITY) | 0x41,
    );
    assert_eq!(receivers(&chip, 0x41), vec![1]);
    clear_all(&chip);
    send_ipi(
        &chip,
        0,
        0x0F,
        ASSERT | LOGICAL | mode(DELIVERY_LOWEST_PRIORITY) | 0x42,
    );
    assert_eq!(receivers(&chip, 0x42), vec![2]);
    clear_all(&chip);
    // The lowest task priority wins.
    for v in [0, 1, 3] {
        write(&chip, v, APIC_TPR, 0x20);
    }
    send_ipi(
        &chip,
        0,
        0x0F,
        ASSERT | LOGICAL | mode(DELIVERY_LOWEST_PRIORITY) | 0x43,
    );
    assert_eq!(receivers(&chip, 0x43), vec![2]);
    // Focus: an APIC with the vector pending gets it again (IRR stays one
    // bit), though its APR is now the highest.
    send_ipi(
        &chip,
        0,
        0x0F,
        ASSERT | LOGICAL | mode(DELIVERY_LOWEST_PRIORITY) | 0x43,
    );
    assert_eq!(receivers(&chip, 0x43), vec![2]);
    // Without focus checking (SVR bit 9), APR decides: APICs 0, 1, 3 have
    // APR 0x20, APIC 2 has 0x40; tie among 0, 1, 3 by vector 0x43 % 3 = 1.
    write(&chip, 2, APIC_SVR, 0x3FF);
    send_ipi(
        &chip,
        0,
        0x0F,
        ASSERT | LOGICAL | mode(DELIVERY_LOWEST_PRIORITY) | 0x43,
    );
    assert_eq!(receivers(&chip, 0x43), vec![1, 2]);
    // Software-disabled APICs are not candidates; none left: dropped.
    for v in 0..4 {
        write(&chip, v, APIC_SVR, 0xFF);
    }
    send_ipi(
        &chip,
        0,
        0x0F,
        ASSERT | LOGICAL | mode(DELIVERY_LOWEST_PRIORITY) | 0x44,
    );
    assert_eq!(receivers(&chip, 0x44), Vec::<u32>::new());
}

#[test]
fn nmi_events() {
    let (chip, host) = enabled_chip(2);
    send_ipi(&chip, 0, 1, ASSERT | mode(DELIVERY_NMI) | 0x33);
    send_ipi(&chip, 0, 1, ASSERT | mode(DELIVERY_NMI));
    assert_eq!(host.take_notified(), vec![1, 1]);
    assert_eq!(irr(&chip, 1), Vec::<u8>::new(), "the vector is ignored");
    assert_eq!(
        chip.take_events(1),
        CpuEvents {
            nmis: 2,
            init: false,
            sipi: None
        }
    );
    assert!(chip.take_events(1).is_empty(), "taken");
}

#[test]
fn init_resets_the_apic_and_keeps_its_id() {
    let (chip, host) = enabled_chip(2);
    write(&chip, 1, APIC_ID, 0x0900_0000);
    write(&chip, 1, APIC_TPR, 0x40);
    write(&chip, 1, APIC_LDR, 0x0100_0000);
    write(&chip, 1, APIC_LVT_TIMER, 0xEF);
    write(&chip, 1, APIC_TIMER_INITIAL, 5000);
    send_ipi(&chip, 0, 9, ASSERT | 0x77);
    assert_eq!(irr(&chip, 1), vec![0x77]);
    host.take_timers();
    host.take_notified();
    send_ipi(&chip, 0, 9, ASSERT | mode(DELIVERY_INIT));
    assert_eq!(host.take_notified(), vec![1]);
    assert_eq!(host.take_timers(), vec![(1, None)], "timer disarmed");
    let s = chip.lapic_state(1).unwrap();
    assert_eq!(s.id, 9, "id kept");
    assert_eq!((s.tpr, s.ldr, s.svr, s.dfr), (0, 0, 0xFF, 0xFFFF_FFFF));
    assert_eq!(s.lvt, [LVT_MASKED; LVT_COUNT]);
    assert_eq!(s.irr, [0; 8]);
    assert_eq!(s.timer_initial, 0);
    assert_eq!(
        chip.msr_read(1, MSR_IA32_APIC_BASE),
        Ok(0xFEE0_0800),
        "base kept"
    );
    assert!(chip.take_events(1).init);
}

#[test]
fn init_in_x2apic_mode_stays_in_x2apic_mode() {
    let (chip, _) = enabled_chip(2);
    enable_x2apic(&chip, 0);
    enable_x2apic(&chip, 1);
    chip.msr_write(
        0,
        X2APIC_MSR_ICR,
        1 << 32 | u64::from(ASSERT | mode(DELIVERY_INIT)),
    )
    .unwrap();
    assert_eq!(chip.msr_read(1, x2msr(APIC_ID)), Ok(1));
    assert_eq!(chip.msr_read(1, x2msr(APIC_LDR)), Ok(2));
    assert_eq!(chip.msr_read(1, x2msr(APIC_SVR)), Ok(0xFF));
}

#[test]
fn init_level_deassert_does_nothing() {
    let (chip, host) = enabled_chip(2);
    let deassert =
        mode(DELIVERY_INIT) | ICR_TRIGGER_LEVEL | shorthand(SHORTHAND_ALL_INCLUDING_SELF);
    write(&chip, 1, APIC_TPR, 0x40);
    send_ipi(&chip, 0, 0, deassert);
    assert!(chip.take_events(1).is_empty());
    assert!(chip.take_events(0).is_empty());
    assert_eq!(read(&chip, 1, APIC_TPR), 0x40);
    assert_eq!(host.take_notified(), Vec::<u32>::new());
    // Same for a level-triggered fixed de-assert.
    send_ipi(&chip, 0, 1, ICR_TRIGGER_LEVEL | 0x55);
    assert_eq!(irr(&chip, 1), Vec::<u8>::new());
}

#[test]
fn sipi_vectors_follow_init() {
    let (chip, _) = enabled_chip(2);
    send_ipi(&chip, 0, 1, ASSERT | mode(DELIVERY_STARTUP) | 0x10);
    send_ipi(&chip, 0, 1, ASSERT | mode(DELIVERY_INIT));
    send_ipi(&chip, 0, 1, ASSERT | mode(DELIVERY_STARTUP) | 0x9A);
    send_ipi(&chip, 0, 1, ASSERT | mode(DELIVERY_STARTUP) | 0x9B);
    assert_eq!(
        chip.take_events(1),
        CpuEvents {
            nmis: 0,
            init: true,
            sipi: Some(0x9B)
        }
    );
    // A start-up vector below 16 is legal.
    send_ipi(&chip, 0, 1, ASSERT | mode(DELIVERY_STARTUP) | 0x08);
    assert_eq!(chip.take_events(1).sipi, Some(0x08));
}

#[test]
fn smi_and_reserved_modes_are_ignored() {
    let (chip, host) = enabled_chip(2);
    for m in [DELIVERY_SMI, 3, DELIVERY_EXTINT] {
        send_ipi(&chip, 0, 1, ASSERT | mode(m) | 0x40);
    }
    assert!(chip.take_events(1).is_empty());
    assert_eq!(irr(&chip, 1), Vec::<u8>::new());
    assert_eq!(host.take_notified(), Vec::<u32>::new());
}

#[test]
fn hardware_disabled_apic_takes_nothing() {
    let (chip, host) = enabled_chip(2);
    chip.msr_write(1, MSR_IA32_APIC_BASE, DEFAULT_APIC_BASE)
        .unwrap();
    send_ipi(&chip, 0, 1, ASSERT | mode(DELIVERY_INIT));
    send_ipi(&chip, 0, 1, ASSERT | mode(DELIVERY_NMI));
    send_ipi(&chip, 0, 0xFF, ASSERT | 0x40);
    assert!(chip.take_events(1).is_empty());
    assert_eq!(irr(&chip, 1), Vec::<u8>::new());
    assert_eq!(host.take_notified(), vec![0]);
}

#[test]
fn level_triggered_ipi_sets_tmr() {
    let (chip, _) = enabled_chip(2);
    send_ipi(&chip, 0, 1, ASSERT | ICR_TRIGGER_LEVEL | 0x66);
    let s = chip.lapic_state(1).unwrap();
    assert_eq!(vectors(&s.tmr), vec![0x66]);
    // An edge IPI of the same vector clears it again.
    drain(&chip, 1);
    send_ipi(&chip, 0, 1, ASSERT | 0x66);
    assert_eq!(vectors(&chip.lapic_state(1).unwrap().tmr), Vec::<u8>::new());
}

#[test]
fn mixed_xapic_and_x2apic_destinations() {
    let (chip, _) = enabled_chip(3);
    enable_x2apic(&chip, 2);
    // An xAPIC sender's 0xFF is broadcast to x2APIC-mode APICs as well.
    send_ipi(&chip, 0, 0xFF, ASSERT | 0x90);
    assert_eq!(receivers(&chip, 0x90), vec![0, 1, 2]);
    // An x2APIC sender reaches an xAPIC APIC by its 8-bit id.
    chip.msr_write(2, X2APIC_MSR_ICR, 1 << 32 | u64::from(ASSERT | 0x91))
        .unwrap();
    assert_eq!(receivers(&chip, 0x91), vec![1]);
    chip.msr_write(2, X2APIC_MSR_ICR, 0x101 << 32 | u64::from(ASSERT | 0x92))
        .unwrap();
    assert_eq!(receivers(&chip, 0x92), Vec::<u32>::new(), "no 8-bit alias");
}

#[test]
fn illegal_vector_raises_the_receivers_error_interrupt() {
    let (chip, host) = enabled_chip(2);
    write(&chip, 1, APIC_LVT_ERROR, 0xE3);
    send_ipi(&chip, 0, 1, ASSERT | 0x05);
    assert_eq!(irr(&chip, 1), vec![0xE3], "vector 5 refused, error raised");
    assert_eq!(
        host.take_notified(),
        vec![1],
        "the receiver is woken for it"
    );
    write(&chip, 0, APIC_ESR, 0);
    write(&chip, 1, APIC_ESR, 0);
    assert_eq!(read(&chip, 0, APIC_ESR), ESR_SEND_ILLEGAL_VECTOR);
    assert_eq!(read(&chip, 1, APIC_ESR), ESR_RECEIVE_ILLEGAL_VECTOR);
}

#[test]
fn notifications_name_their_cause_and_eois_their_vector() {
    let (chip, host) = enabled_chip(2);
    send_ipi(&chip, 0, 1, ASSERT | 0x40);
    assert_eq!(host.take_causes(), vec![(1, NotifyCause::Ipi { from: 0 })]);
    // The receiver takes it and writes EOI: the host hears the vector.
    assert_eq!(chip.acknowledge(1), Some(0x40));
    assert!(host.take_eois().is_empty());
    write(&chip, 1, APIC_EOI, 0);
    assert_eq!(host.take_eois(), vec![(1, 0x40)]);
    // An EOI with nothing in service retires nothing.
    write(&chip, 1, APIC_EOI, 0);
    assert!(host.take_eois().is_empty());
}
