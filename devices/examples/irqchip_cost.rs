//! Repeats one interrupt-controller operation N times, for instruction
//! counts under cachegrind (load-independent, unlike timings on a shared
//! machine). Per-operation cost = difference of two runs / difference of N:
//!
//! ```sh
//! cargo build --release -p devices --example irqchip_cost
//! for n in 10000 110000; do
//!   valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/tmp/cg.$n \
//!     target/release/examples/irqchip_cost ipi 64 $n
//! done   # then: (Ir of 110000 - Ir of 10000) / 100000
//! ```
//!
//! Operations: `ipi` (xAPIC ICR write from vCPU 0 to the last vCPU, its
//! INTA and EOI), `ipi-x2apic` (the same through the x2APIC ICR MSR and EOI
//! MSR), `irq` (an edge pin pulse to vCPU 0, INTA, EOI), `timer` (a due
//! periodic timer expiry, INTA, EOI), `hint` (`has_pending_hint`).

use devices::irqchip::regs::*;
use devices::irqchip::{GuestCpu, IrqChip, IrqChipHost};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A host with a manual clock that drops timer and notify calls.
struct Host {
    now: AtomicU64,
}

impl IrqChipHost for Host {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }
    fn guest_tsc_to_ns(&self, _vcpu: u32, tsc: u64) -> u64 {
        tsc
    }
    fn ns_to_guest_tsc(&self, _vcpu: u32, ns: u64) -> u64 {
        ns
    }
    fn set_timer(&self, _vcpu: u32, deadline_ns: Option<u64>) {
        black_box(deadline_ns);
    }
    fn notify(&self, vcpu: u32) {
        black_box(vcpu);
    }
    fn guest_cpu(&self) -> GuestCpu {
        GuestCpu {
            phys_addr_bits: 40,
            x2apic: true,
        }
    }
}

fn xapic_write(chip: &IrqChip, vcpu: u32, offset: u32, value: u32) {
    chip.lapic_mmio_write(
        vcpu,
        DEFAULT_APIC_BASE + u64::from(offset),
        &value.to_le_bytes(),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: irqchip_cost ipi|ipi-x2apic|irq|timer|hint VCPUS N";
    let (Some(op), Some(vcpus), Some(n)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let (Ok(vcpus), Ok(n)) = (vcpus.parse::<u32>(), n.parse::<u64>()) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let vcpus = vcpus.max(1);
    let host = Arc::new(Host {
        now: AtomicU64::new(0),
    });
    let chip = IrqChip::new(vcpus, host.clone());
    for v in 0..vcpus {
        xapic_write(&chip, v, APIC_SVR, 0x1FF);
    }
    let last = vcpus - 1;
    match op.as_str() {
        "ipi" => {
            for _ in 0..n {
                xapic_write(&chip, 0, APIC_ICR_HIGH, last << 24);
                xapic_write(&chip, 0, APIC_ICR_LOW, ICR_LEVEL_ASSERT | 0x40);
                black_box(chip.acknowledge(last));
                xapic_write(&chip, last, APIC_EOI, 0);
            }
        }
        "ipi-x2apic" => {
            for v in 0..vcpus {
                let base = chip.msr_read(v, MSR_IA32_APIC_BASE).unwrap_or(0);
                let _ = chip.msr_write(v, MSR_IA32_APIC_BASE, base | APIC_BASE_EXTD);
            }
            let icr = u64::from(last) << 32 | u64::from(ICR_LEVEL_ASSERT | 0x40);
            let eoi = X2APIC_MSR_FIRST + APIC_EOI / 16;
            for _ in 0..n {
                let _ = chip.msr_write(0, X2APIC_MSR_ICR, icr);
                black_box(chip.acknowledge(last));
                let _ = chip.msr_write(last, eoi, 0);
            }
        }
        "irq" => {
            let dev = chip.ioapic_mmio();
            let ctx = devices::IoContext { vcpu: 0 };
            let mut dev = dev.lock().unwrap_or_else(|p| p.into_inner());
            dev.write(ctx, IOAPIC_IOREGSEL, &[IOAPIC_REG_REDIR_FIRST]);
            dev.write(ctx, IOAPIC_IOWIN, &0x30u32.to_le_bytes());
            drop(dev);
            let line = chip.irq_line(0);
            for _ in 0..n {
                line.pulse();
                black_box(chip.acknowledge(0));
                xapic_write(&chip, 0, APIC_EOI, 0);
            }
        }
        "timer" => {
            xapic_write(&chip, 0, APIC_TIMER_DIVIDE, 0b1011);
            xapic_write(
                &chip,
                0,
                APIC_LVT_TIMER,
                TIMER_MODE_PERIODIC << LVT_TIMER_MODE_SHIFT | 0xEE,
            );
            xapic_write(&chip, 0, APIC_TIMER_INITIAL, 1_000_000);
            for i in 1..=n {
                host.now.store(i * 1_000_000, Ordering::Relaxed);
                chip.timer_expired(0);
                black_box(chip.acknowledge(0));
                xapic_write(&chip, 0, APIC_EOI, 0);
            }
        }
        "hint" => {
            for i in 0..n {
                black_box(chip.has_pending_hint((i % u64::from(vcpus)) as u32));
            }
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
}
