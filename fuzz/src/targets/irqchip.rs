//! Pacer's interrupt controller through everything a guest reaches: the
//! MMIO bus with the I/O APIC's window, each vCPU's xAPIC page, the x2APIC
//! and APIC-base MSRs, CR8, and the VMM's side (pins raised by devices,
//! timers firing, interrupts acknowledged, events taken, the clock moving),
//! in any order, on 1-4 vCPUs. Invariants: no panic; a vector acknowledged
//! is one the chip offered just before and is then in service; an offered
//! vector is at least 16.

use crate::driver::Target;
use arbitrary::{Arbitrary, Unstructured};
use devices::irqchip::regs::{
    DEFAULT_APIC_BASE, IOAPIC_DEFAULT_BASE, IOAPIC_MMIO_LEN, MSR_IA32_APIC_BASE,
    MSR_IA32_TSC_DEADLINE, X2APIC_MSR_FIRST,
};
use devices::irqchip::{GuestCpu, IrqChip, IrqChipHost};
use devices::{IoContext, MmioBus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A manual clock; timers and notifications are only counted.
#[derive(Default)]
struct Host {
    now: AtomicU64,
    timers: AtomicU64,
    notified: AtomicU64,
}

impl IrqChipHost for Host {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }
    fn guest_tsc_to_ns(&self, _vcpu: u32, tsc: u64) -> u64 {
        tsc / 2
    }
    fn ns_to_guest_tsc(&self, _vcpu: u32, ns: u64) -> u64 {
        ns.saturating_mul(2)
    }
    fn set_timer(&self, _vcpu: u32, _deadline_ns: Option<u64>) {
        self.timers.fetch_add(1, Ordering::Relaxed);
    }
    fn notify(&self, _vcpu: u32) {
        self.notified.fetch_add(1, Ordering::Relaxed);
    }
    fn guest_cpu(&self) -> GuestCpu {
        GuestCpu {
            phys_addr_bits: 40,
            x2apic: true,
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Addr {
    /// A register of the I/O APIC window (or just past it).
    IoApic(u16),
    /// A register of the xAPIC page (or just past it).
    Lapic(u16),
    Any(u64),
}

impl Addr {
    fn resolve(&self) -> u64 {
        match *self {
            Addr::IoApic(o) => IOAPIC_DEFAULT_BASE + u64::from(o) % (IOAPIC_MMIO_LEN + 16),
            Addr::Lapic(o) => DEFAULT_APIC_BASE + u64::from(o) % 0x1010,
            Addr::Any(a) => a,
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Op {
    MmioRead {
        vcpu: u8,
        addr: Addr,
        size: u8,
    },
    MmioWrite {
        vcpu: u8,
        addr: Addr,
        size: u8,
        value: u64,
    },
    /// x2APIC MSRs (0x800-0x8ff), IA32_APIC_BASE, TSC_DEADLINE, or any.
    MsrRead {
        vcpu: u8,
        msr: u16,
        any: bool,
    },
    MsrWrite {
        vcpu: u8,
        msr: u16,
        any: bool,
        value: u64,
    },
    Pin {
        pin: u8,
        high: bool,
    },
    TimerExpired {
        vcpu: u8,
    },
    Acknowledge {
        vcpu: u8,
    },
    TakeEvents {
        vcpu: u8,
    },
    SetCr8 {
        vcpu: u8,
        cr8: u8,
    },
    Advance {
        ns: u32,
    },
}

fn msr(msr: u16, any: bool) -> u32 {
    if any {
        return u32::from(msr);
    }
    match msr % 3 {
        0 => X2APIC_MSR_FIRST + u32::from(msr >> 2) % 0x100,
        1 => MSR_IA32_APIC_BASE,
        _ => MSR_IA32_TSC_DEADLINE,
    }
}

fn size(s: u8) -> usize {
    [1, 2, 4, 8, 3][usize::from(s % 5)]
}

pub struct MmioTarget;

impl MmioTarget {
    pub fn new() -> MmioTarget {
        MmioTarget
    }
}

impl Default for MmioTarget {
    fn default() -> Self {
        Self::new()
    }
}

impl Target for MmioTarget {
    fn name(&self) -> &'static str {
        "irqchip"
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        vec![vec![0; 128], (0..=255).rev().collect(), vec![0x41; 300]]
    }

    fn run(&mut self, data: &[u8]) -> Result<(), String> {
        let mut u = Unstructured::new(data);
        let vcpus = u.int_in_range(1..=4u32).unwrap_or(1);
        let host = Arc::new(Host::default());
        let chip = IrqChip::new(vcpus, host.clone());
        let mut bus = MmioBus::new();
        bus.insert(IOAPIC_DEFAULT_BASE, IOAPIC_MMIO_LEN, chip.ioapic_mmio())
            .map_err(|e| e.to_string())?;
        let v = |x: u8| u32::from(x) % (vcpus + 1); // one past the last: no such vCPU
        while !u.is_empty() {
            let Ok(op) = Op::arbitrary(&mut u) else { break };
            match op {
                Op::MmioRead {
                    vcpu,
                    addr,
                    size: s,
                } => {
                    let mut buf = vec![0u8; size(s)];
                    let a = addr.resolve();
                    if !chip.lapic_mmio_read(v(vcpu), a, &mut buf) {
                        bus.read(IoContext { vcpu: v(vcpu) }, a, &mut buf);
                    }
                }
                Op::MmioWrite {
                    vcpu,
                    addr,
                    size: s,
                    value,
                } => {
                    let bytes = &value.to_le_bytes()[..size(s).min(8)];
                    let a = addr.resolve();
                    if !chip.lapic_mmio_write(v(vcpu), a, bytes) {
                        bus.write(IoContext { vcpu: v(vcpu) }, a, bytes);
                    }
                }
                Op::MsrRead { vcpu, msr: m, any } => {
                    let _ = chip.msr_read(v(vcpu), msr(m, any));
                }
                Op::MsrWrite {
                    vcpu,
                    msr: m,
                    any,
                    value,
                } => {
                    let _ = chip.msr_write(v(vcpu), msr(m, any), value);
                }
                Op::Pin { pin, high } => chip.set_irq(u32::from(pin) % 26, high),
                Op::TimerExpired { vcpu } => chip.timer_expired(v(vcpu)),
                Op::Acknowledge { vcpu } => {
                    let cpu = v(vcpu);
                    let offered = chip.pending_interrupt(cpu);
                    if let Some(vec) = offered {
                        if vec < 16 {
                            return Err(format!("vcpu{cpu} offered vector {vec}"));
                        }
                    }
                    let got = chip.acknowledge(cpu);
                    if got != offered {
                        return Err(format!(
                            "vcpu{cpu}: offered {offered:?}, acknowledged {got:?}"
                        ));
                    }
                    if let (Some(vec), Some(state)) = (got, chip.lapic_state(cpu)) {
                        if state.isr[usize::from(vec / 32)] & (1 << (vec % 32)) == 0 {
                            return Err(format!(
                                "vcpu{cpu}: vector {vec} acknowledged but not in service"
                            ));
                        }
                    }
                }
                Op::TakeEvents { vcpu } => {
                    let _ = chip.take_events(v(vcpu));
                    let _ = chip.has_pending_hint(v(vcpu));
                }
                Op::SetCr8 { vcpu, cr8 } => {
                    chip.set_cr8(v(vcpu), u64::from(cr8));
                    let _ = chip.cr8(v(vcpu));
                }
                Op::Advance { ns } => {
                    host.now.fetch_add(u64::from(ns), Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }
}
