//! Random guest and device operations on a 4-vCPU chip: MMIO of any offset
//! and size, MSRs of any number and value, pins, I/O APIC registers, time,
//! INTA, CR8. Nothing may panic, and after every operation each APIC's
//! state must be consistent.

use super::*;
use crate::bus::IoContext;
use crate::irqchip::lapic::x2apic_ldr;
use crate::irqchip::{ApicMode, LapicState};
use proptest::prelude::*;

const VCPUS: u32 = 4;

#[derive(Debug, Clone)]
enum Op {
    MmioRead {
        vcpu: u32,
        offset: u64,
        len: usize,
    },
    MmioWrite {
        vcpu: u32,
        offset: u64,
        data: Vec<u8>,
    },
    RegWrite {
        vcpu: u32,
        reg: u32,
        value: u32,
    },
    MsrRead {
        vcpu: u32,
        msr: u32,
    },
    MsrWrite {
        vcpu: u32,
        msr: u32,
        value: u64,
    },
    Pin {
        pin: u32,
        high: bool,
    },
    IoApicReg {
        index: u8,
        value: u32,
    },
    IoApicRaw {
        offset: u64,
        data: Vec<u8>,
    },
    Advance {
        ns: u64,
    },
    Acknowledge {
        vcpu: u32,
    },
    Eoi {
        vcpu: u32,
    },
    TakeEvents {
        vcpu: u32,
    },
    SetCr8 {
        vcpu: u32,
        cr8: u64,
    },
}

/// The registers worth writing often (with any value).
const REGS: [u32; 16] = [
    APIC_ID,
    APIC_TPR,
    APIC_EOI,
    APIC_LDR,
    APIC_DFR,
    APIC_SVR,
    APIC_ESR,
    APIC_ICR_LOW,
    APIC_ICR_HIGH,
    APIC_LVT_TIMER,
    APIC_LVT_LINT0,
    APIC_LVT_ERROR,
    APIC_TIMER_INITIAL,
    APIC_TIMER_DIVIDE,
    APIC_ISR,
    0x3A0,
];

fn vcpu() -> impl Strategy<Value = u32> {
    // One past the last: calls for a missing vCPU must be harmless too.
    0..=VCPUS
}

fn msr() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(MSR_IA32_APIC_BASE),
        Just(MSR_IA32_TSC_DEADLINE),
        X2APIC_MSR_FIRST..=X2APIC_MSR_LAST,
        Just(X2APIC_MSR_ICR),
        any::<u32>(),
    ]
}

fn msr_value() -> impl Strategy<Value = u64> {
    let base = DEFAULT_APIC_BASE;
    prop_oneof![
        any::<u64>(),
        0u64..0x1_0000,
        Just(base | APIC_BASE_ENABLE | APIC_BASE_EXTD),
        Just(base | APIC_BASE_ENABLE),
        Just(base),
        (0u64..0x100, 0u64..8).prop_map(|(v, d)| d << 32 | 0x4000 | v),
    ]
}

fn reg_value() -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        0u32..0x200,
        (0u32..0x100).prop_map(|v| 0x1_0000 | v)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (vcpu(), 0u64..0x1100, 0usize..=8).prop_map(|(vcpu, offset, len)| Op::MmioRead {
            vcpu,
            offset,
            len
        }),
        (
            vcpu(),
            0u64..0x1100,
            proptest::collection::vec(any::<u8>(), 0..=8)
        )
            .prop_map(|(vcpu, offset, data)| Op::MmioWrite { vcpu, offset, data }),
        (vcpu(), proptest::sample::select(&REGS[..]), reg_value())
            .prop_map(|(vcpu, reg, value)| Op::RegWrite { vcpu, reg, value }),
        (vcpu(), msr()).prop_map(|(vcpu, msr)| Op::MsrRead { vcpu, msr }),
        (vcpu(), msr(), msr_value()).prop_map(|(vcpu, msr, value)| Op::MsrWrite {
            vcpu,
            msr,
            value
        }),
        (0u32..26, any::<bool>()).prop_map(|(pin, high)| Op::Pin { pin, high }),
        (0u8..0x42, prop_oneof![any::<u32>(), 0u32..0x1_0000])
            .prop_map(|(index, value)| Op::IoApicReg { index, value }),
        (0u64..0x30, proptest::collection::vec(any::<u8>(), 0..=8))
            .prop_map(|(offset, data)| Op::IoApicRaw { offset, data }),
        (0u64..2_000_000).prop_map(|ns| Op::Advance { ns }),
        vcpu().prop_map(|vcpu| Op::Acknowledge { vcpu }),
        vcpu().prop_map(|vcpu| Op::Eoi { vcpu }),
        vcpu().prop_map(|vcpu| Op::TakeEvents { vcpu }),
        (vcpu(), any::<u64>()).prop_map(|(vcpu, cr8)| Op::SetCr8 { vcpu, cr8 }),
    ]
}

fn apply(chip: &Arc<IrqChip>, host: &FakeHost, op: &Op) {
    let base = DEFAULT_APIC_BASE;
    let ctx = IoContext { vcpu: 0 };
    match op {
        Op::MmioRead { vcpu, offset, len } => {
            let mut data = vec![0u8; *len];
            chip.lapic_mmio_read(*vcpu, base + offset, &mut data);
        }
        Op::MmioWrite { vcpu, offset, data } => {
            chip.lapic_mmio_write(*vcpu, base + offset, data);
        }
        Op::RegWrite { vcpu, reg, value } => {
            chip.lapic_mmio_write(*vcpu, base + u64::from(*reg), &value.to_le_bytes());
        }
        Op::MsrRead { vcpu, msr } => {
            let _ = chip.msr_read(*vcpu, *msr);
        }
        Op::MsrWrite { vcpu, msr, value } => {
            let _ = chip.msr_write(*vcpu, *msr, *value);
        }
        Op::Pin { pin, high } => chip.set_irq(*pin, *high),
        Op::IoApicReg { index, value } => {
            let dev = chip.ioapic_mmio();
            let mut dev = dev.lock().unwrap();
            dev.write(ctx, IOAPIC_IOREGSEL, &[*index]);
            dev.write(ctx, IOAPIC_IOWIN, &value.to_le_bytes());
        }
        Op::IoApicRaw { offset, data } => {
            let dev = chip.ioapic_mmio();
            let mut dev = dev.lock().unwrap();
            dev.write(ctx, *offset, data);
            let mut back = vec![0u8; data.len()];
            dev.read(ctx, *offset, &mut back);
        }
        Op::Advance { ns } => {
            host.set_now(host.now() + ns);
            for v in 0..VCPUS {
                if host.armed(v).is_some_and(|d| d <= host.now()) {
                    chip.timer_expired(v);
                }
            }
        }
        Op::Acknowledge { vcpu } => {
            chip.acknowledge(*vcpu);
        }
        Op::Eoi { vcpu } => {
            chip.lapic_mmio_write(*vcpu, base + u64::from(APIC_EOI), &[0; 4]);
            let _ = chip.msr_write(*vcpu, x2msr(APIC_EOI), 0);
        }
        Op::TakeEvents { vcpu } => {
            chip.take_events(*vcpu);
        }
        Op::SetCr8 { vcpu, cr8 } => chip.set_cr8(*vcpu, *cr8),
    }
}

fn check(chip: &IrqChip) -> Result<(), TestCaseError> {
    for v in 0..VCPUS {
        let hint = chip.has_pending_hint(v);
        let s: LapicState = chip.lapic_state(v).unwrap();
        let pending = chip.pending_interrupt(v);
        let irr = vectors(&s.irr);
        let isr = vectors(&s.isr);
        let class = |v: u8| u32::from(v) >> 4;
        prop_assert!(
            irr.iter().chain(&isr).all(|&x| x >= 16),
            "vcpu{v}: vector < 16: {s:?}"
        );
        prop_assert!(s.ppr >> 4 >= s.tpr >> 4, "vcpu{v}: PPR below TPR: {s:?}");
        if let Some(&top) = isr.last() {
            prop_assert!(s.ppr >> 4 >= class(top), "vcpu{v}: PPR below ISR: {s:?}");
        }
        // Every in-service vector was above everything in service before
        // it: one vector per class at most.
        let mut classes: Vec<u32> = isr.iter().map(|&x| class(x)).collect();
        classes.dedup();
        prop_assert_eq!(
            classes.len(),
            isr.len(),
            "vcpu{}: two in service in a class",
            v
        );
        match pending {
            Some(p) => {
                prop_assert_eq!(Some(&p), irr.last(), "vcpu{}: not the highest IRR", v);
                prop_assert!(
                    class(p) > s.ppr >> 4,
                    "vcpu{v}: pending {p:#x} not above PPR"
                );
            }
            None => prop_assert!(
                s.mode == ApicMode::Disabled
                    || irr.last().is_none_or(|&top| class(top) <= s.ppr >> 4),
                "vcpu{v}: deliverable vector not reported: {s:?}"
            ),
        }
        prop_assert_eq!(
            hint,
            pending.is_some() || !s.pending_events.is_empty(),
            "vcpu{} hint",
            v
        );
        prop_assert!(
            s.timer_current <= s.timer_initial,
            "vcpu{v}: count above initial"
        );
        let en = s.apic_base & APIC_BASE_ENABLE != 0;
        let extd = s.apic_base & APIC_BASE_EXTD != 0;
        let expected_mode = match (en, extd) {
            (true, true) => ApicMode::X2Apic,
            (true, false) => ApicMode::XApic,
            (false, false) => ApicMode::Disabled,
            (false, true) => return Err(TestCaseError::fail(format!("vcpu{v}: EXTD without EN"))),
        };
        prop_assert_eq!(s.mode, expected_mode);
        if s.mode == ApicMode::X2Apic {
            prop_assert_eq!((s.id, s.ldr), (v, x2apic_ldr(v)));
        }
        if s.mode == ApicMode::Disabled {
            prop_assert!(
                irr.is_empty() && isr.is_empty(),
                "vcpu{v}: disabled but requested"
            );
        }
        prop_assert_eq!(s.apic_base & APIC_BASE_BSP != 0, v == 0, "BSP flag");
    }
    for pin in 0..IOAPIC_PINS as u32 {
        let e = chip.ioapic_entry(pin).unwrap();
        prop_assert!(
            e & REDIR_REMOTE_IRR == 0 || e & REDIR_TRIGGER_LEVEL != 0,
            "pin {pin}: remote IRR on an edge entry {e:#x}"
        );
        prop_assert_eq!(e & REDIR_DELIVERY_STATUS, 0);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_keep_the_chip_consistent(ops in proptest::collection::vec(op(), 1..80)) {
        let (chip, host) = enabled_chip(VCPUS);
        for op in &ops {
            apply(&chip, &host, op);
            check(&chip)?;
        }
    }
}
