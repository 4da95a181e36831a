//! Tests of the chip through its public interface, with a fake host: a
//! manual clock, a 2 GHz guest TSC, and a record of every `set_timer` and
//! `notify` call.

mod concurrency;
mod ioapic;
mod ipi;
mod priority;
mod props;
mod pv_eoi;
mod registers;
mod timer;

use super::regs::*;
use super::{GuestCpu, IrqChip, IrqChipHost, NotifyCause, PvEoiAccess};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Guest TSC ticks per ns in the fake host.
pub(super) const TSC_PER_NS: u64 = 2;
pub(super) const PHYS_ADDR_BITS: u8 = 40;

#[derive(Default)]
pub(super) struct FakeHost {
    /// A guest CPU without x2APIC in its CPUID.
    no_x2apic: bool,
    now: AtomicU64,
    timers: Mutex<Vec<(u32, Option<u64>)>>,
    notified: Mutex<Vec<u32>>,
    /// Every notification with its cause, and every EOI (vCPU, vector).
    causes: Mutex<Vec<(u32, NotifyCause)>>,
    eois: Mutex<Vec<(u32, u8)>>,
    /// Guest RAM for PV EOI flags: 32-bit words at 0x1000..0x2000.
    pub(super) ram: Mutex<std::collections::HashMap<u64, u32>>,
}

/// Guest-physical range the fake host treats as RAM for PV EOI flags.
pub(super) const FAKE_RAM: std::ops::Range<u64> = 0x1000..0x2000;

impl FakeHost {
    pub(super) fn set_now(&self, ns: u64) {
        self.now.store(ns, Ordering::SeqCst);
    }
    pub(super) fn now(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
    /// Every `set_timer` call since the last take.
    pub(super) fn take_timers(&self) -> Vec<(u32, Option<u64>)> {
        std::mem::take(&mut self.timers.lock().unwrap())
    }
    /// The last `set_timer` call for `vcpu` (kept, not taken).
    pub(super) fn armed(&self, vcpu: u32) -> Option<u64> {
        let timers = self.timers.lock().unwrap();
        timers.iter().rev().find(|t| t.0 == vcpu).and_then(|t| t.1)
    }
    /// Every `notify` call since the last take.
    pub(super) fn take_notified(&self) -> Vec<u32> {
        std::mem::take(&mut self.notified.lock().unwrap())
    }
    /// Every notification and its cause since the last take.
    pub(super) fn take_causes(&self) -> Vec<(u32, NotifyCause)> {
        std::mem::take(&mut self.causes.lock().unwrap())
    }
    /// Every EOI hook call since the last take.
    pub(super) fn take_eois(&self) -> Vec<(u32, u8)> {
        std::mem::take(&mut self.eois.lock().unwrap())
    }
}

impl IrqChipHost for FakeHost {
    fn now_ns(&self) -> u64 {
        self.now()
    }
    fn guest_tsc_to_ns(&self, _vcpu: u32, tsc: u64) -> u64 {
        tsc / TSC_PER_NS
    }
    fn ns_to_guest_tsc(&self, _vcpu: u32, ns: u64) -> u64 {
        ns.saturating_mul(TSC_PER_NS)
    }
    fn set_timer(&self, vcpu: u32, deadline_ns: Option<u64>) {
        self.timers.lock().unwrap().push((vcpu, deadline_ns));
    }
    fn notify(&self, vcpu: u32) {
        self.notified.lock().unwrap().push(vcpu);
    }
    fn notify_because(&self, vcpu: u32, cause: NotifyCause) {
        self.causes.lock().unwrap().push((vcpu, cause));
        self.notify(vcpu);
    }
    fn eoi(&self, vcpu: u32, vector: u8) {
        self.eois.lock().unwrap().push((vcpu, vector));
    }
    fn guest_cpu(&self) -> GuestCpu {
        GuestCpu {
            phys_addr_bits: PHYS_ADDR_BITS,
            x2apic: !self.no_x2apic,
        }
    }
    fn pv_eoi_flag(&self, gpa: u64, access: PvEoiAccess) -> Option<bool> {
        if !FAKE_RAM.contains(&gpa) {
            return None;
        }
        let mut ram = self.ram.lock().unwrap();
        let word = ram.entry(gpa).or_insert(0);
        let old = *word & 1 != 0;
        match access {
            PvEoiAccess::Set => *word |= 1,
            PvEoiAccess::Take => *word &= !1,
            PvEoiAccess::Read => {}
        }
        Some(old)
    }
}

/// A chip with `vcpus` vCPUs in their power-up state.
pub(super) fn chip(vcpus: u32) -> (Arc<IrqChip>, Arc<FakeHost>) {
    let host = Arc::new(FakeHost::default());
    (IrqChip::new(vcpus, host.clone()), host)
}

/// A chip for a guest whose CPUID has no x2APIC.
pub(super) fn chip_without_x2apic(vcpus: u32) -> (Arc<IrqChip>, Arc<FakeHost>) {
    let host = Arc::new(FakeHost {
        no_x2apic: true,
        ..FakeHost::default()
    });
    (IrqChip::new(vcpus, host.clone()), host)
}

/// A chip whose APICs are all software-enabled (SVR = 0x1FF).
pub(super) fn enabled_chip(vcpus: u32) -> (Arc<IrqChip>, Arc<FakeHost>) {
    let (chip, host) = chip(vcpus);
    for v in 0..vcpus {
        write(&chip, v, APIC_SVR, 0x1FF);
    }
    (chip, host)
}

/// 32-bit xAPIC register read at the default base.
pub(super) fn read(chip: &IrqChip, vcpu: u32, offset: u32) -> u32 {
    let mut b = [0u8; 4];
    assert!(
        chip.lapic_mmio_read(vcpu, DEFAULT_APIC_BASE + u64::from(offset), &mut b),
        "xAPIC read of {offset:#x} on vcpu{vcpu} not claimed"
    );
    u32::from_le_bytes(b)
}

/// 32-bit xAPIC register write at the default base.
pub(super) fn write(chip: &IrqChip, vcpu: u32, offset: u32, value: u32) {
    assert!(
        chip.lapic_mmio_write(
            vcpu,
            DEFAULT_APIC_BASE + u64::from(offset),
            &value.to_le_bytes()
        ),
        "xAPIC write of {offset:#x} on vcpu{vcpu} not claimed"
    );
}

/// Send an IPI from `vcpu` through the xAPIC ICR.
pub(super) fn send_ipi(chip: &IrqChip, vcpu: u32, dest: u8, icr_low: u32) {
    write(chip, vcpu, APIC_ICR_HIGH, u32::from(dest) << 24);
    write(chip, vcpu, APIC_ICR_LOW, icr_low);
}

/// Switch `vcpu` to x2APIC mode.
pub(super) fn enable_x2apic(chip: &IrqChip, vcpu: u32) {
    let base = chip.msr_read(vcpu, MSR_IA32_APIC_BASE).unwrap();
    chip.msr_write(vcpu, MSR_IA32_APIC_BASE, base | APIC_BASE_EXTD)
        .unwrap();
}

/// x2APIC MSR of an xAPIC register offset.
pub(super) fn x2msr(offset: u32) -> u32 {
    X2APIC_MSR_FIRST + offset / 16
}

/// The vectors set in a 256-bit register dump.
pub(super) fn vectors(words: &[u32; 8]) -> Vec<u8> {
    (0..=255u8)
        .filter(|&v| words[usize::from(v / 32)] & (1 << (v % 32)) != 0)
        .collect()
}

/// IRR of `vcpu` as a vector list.
pub(super) fn irr(chip: &IrqChip, vcpu: u32) -> Vec<u8> {
    vectors(&chip.lapic_state(vcpu).unwrap().irr)
}

/// ISR of `vcpu` as a vector list.
pub(super) fn isr(chip: &IrqChip, vcpu: u32) -> Vec<u8> {
    vectors(&chip.lapic_state(vcpu).unwrap().isr)
}

/// Take and retire (EOI) every deliverable interrupt of `vcpu`; returns
/// them in the order taken.
pub(super) fn drain(chip: &IrqChip, vcpu: u32) -> Vec<u8> {
    let mut taken = Vec::new();
    while let Some(v) = chip.acknowledge(vcpu) {
        taken.push(v);
        write(chip, vcpu, APIC_EOI, 0);
    }
    taken
}
