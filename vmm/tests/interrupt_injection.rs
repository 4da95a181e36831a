//! The engine's injection decision (`engine::irq::deliver_interrupt`)
//! against KVM itself, for a vCPU a kick left in guest ring 3 (skipped
//! without /dev/kvm).
//!
//! After a kicked KVM_RUN (EINTR) in ring 3 the software KVM of the
//! development machines reports "not ready for injection" although ring 3
//! runs with interrupts enabled, so the engine injects there anyway —
//! unless KVM still holds an event of its own. A guest trap taken in ring 3
//! (the bench guest's `ud2` system call) is such an event when the kick
//! lands while KVM delivers it; an interrupt injected behind it reaches the
//! guest only after its handler sets IF again, in `sti; hlt` before the
//! HLT, and the wake-up it carries is lost (the ping-pong hang). Both
//! states are set up here directly (registers and KVM_SET_VCPU_EVENTS, no
//! guest code runs), so each decision is checked exactly, every time.
//!
//! The same way: a second interrupt requested while KVM still holds the
//! first (no entry yet, or one a kick cut short) is not injected.

mod common;

use common::kvm_or_skip;
use std::sync::Mutex;
use vcpu_engine::irq::{deliver_interrupt, CpuEvents, InterruptSource};
use vcpu_engine::vcpu::{VcpuExitHandler, VcpuExitReason, VcpuRunner, VcpuStep};
use vmm::boot;
use vmm::vm::open_kvm;

const VECTOR: u8 = 0xfd;
/// #UD, the exception of the bench guest's system-call trap.
const UD: u8 = 6;

/// A second vector, requested after the first was injected.
const SECOND: u8 = 0xec;

/// A controller with one fixed vector requested until acknowledged.
struct OneVector {
    requested: Mutex<Option<u8>>,
    acknowledged: Mutex<Vec<u8>>,
}

impl InterruptSource for OneVector {
    fn has_pending_hint(&self, _vcpu: u32) -> bool {
        self.requested.lock().unwrap().is_some()
    }
    fn pending_interrupt(&self, _vcpu: u32) -> Option<u8> {
        *self.requested.lock().unwrap()
    }
    fn acknowledge(&self, _vcpu: u32, vector: u8) {
        let mut requested = self.requested.lock().unwrap();
        assert_eq!(*requested, Some(vector), "acknowledged what was requested");
        *requested = None;
        self.acknowledged.lock().unwrap().push(vector);
    }
    fn take_events(&self, _vcpu: u32) -> CpuEvents {
        CpuEvents::default()
    }
    fn timer_expired(&self, _vcpu: u32) {}
}

/// No device: the vCPU never runs.
struct NoDevices;

impl VcpuExitHandler for NoDevices {
    fn pio_in(&self, _vcpu: u32, _port: u16, data: &mut [u8]) {
        data.fill(0xff);
    }
    fn pio_out(&self, _vcpu: u32, _port: u16, _data: &[u8]) {}
    fn mmio_read(&self, _vcpu: u32, _addr: u64, data: &mut [u8]) {
        data.fill(0xff);
    }
    fn mmio_write(&self, _vcpu: u32, _addr: u64, _data: &[u8]) {}
    fn stopping(&self) -> bool {
        false
    }
    fn vcpu_failed(&self, _vcpu: u32, _reason: &VcpuExitReason) {}
}

/// A vCPU in 64-bit ring 3 with interrupts enabled, never run (so KVM's
/// ready flag reads 0, as after a kick there); with `trap`, KVM holds that
/// exception as if a kick had caught the guest while it was delivered.
fn ring3_vcpu(vm: &kvm_ioctls::VmFd, trap: Option<u8>) -> VcpuRunner {
    ring3_vcpu_with(vm, trap, |_| ())
}

/// [`ring3_vcpu`], with `setup` applied to the KVM vCPU first.
fn ring3_vcpu_with(
    vm: &kvm_ioctls::VmFd,
    trap: Option<u8>,
    setup: impl FnOnce(&mut kvm_ioctls::VcpuFd),
) -> VcpuRunner {
    let mut vcpu = vm.create_vcpu(0).unwrap();
    setup(&mut vcpu);
    let mut sregs = vcpu.get_sregs().unwrap();
    boot::regs::long_mode_sregs(&mut sregs);
    for seg in [&mut sregs.cs, &mut sregs.ss] {
        seg.dpl = 3;
        seg.selector |= 3;
    }
    vcpu.set_sregs(&sregs).unwrap();
    let mut regs = boot::regs::long_mode_regs(0x40_0000, 0);
    regs.rflags = 0x202; // IF
    vcpu.set_regs(&regs).unwrap();
    if let Some(nr) = trap {
        let mut events = vcpu.get_vcpu_events().unwrap();
        events.exception.injected = 1;
        events.exception.nr = nr;
        events.exception.has_error_code = 0;
        vcpu.set_vcpu_events(&events).unwrap();
    }
    let runner = VcpuRunner::new(0, vcpu, std::sync::Arc::new(NoDevices));
    assert_eq!(runner.cpl().unwrap(), 3, "the vCPU is in ring 3");
    runner
}

fn requested() -> OneVector {
    OneVector {
        requested: Mutex::new(Some(VECTOR)),
        acknowledged: Mutex::new(Vec::new()),
    }
}

#[test]
fn a_kicked_ring3_vcpu_takes_the_interrupt_at_once() {
    if !kvm_or_skip("a_kicked_ring3_vcpu_takes_the_interrupt_at_once") {
        return;
    }
    let kvm = open_kvm().unwrap();
    let vm = kvm.create_vm().unwrap();
    let mut runner = ring3_vcpu(&vm, None);
    assert!(!runner.kvm_holds_event().unwrap());
    let src = requested();
    deliver_interrupt(&src, &mut runner, &VcpuStep::Interrupted).unwrap();
    assert_eq!(*src.acknowledged.lock().unwrap(), vec![VECTOR]);
    let events = runner.vcpu_events().unwrap();
    assert_eq!(
        (events.interrupt.injected, events.interrupt.nr),
        (1, VECTOR),
        "KVM delivers it at the next entry"
    );
    assert!(!runner.interrupt_window_requested());
}

#[test]
fn an_interrupt_waits_for_the_window_while_kvm_delivers_a_ring3_trap() {
    if !kvm_or_skip("an_interrupt_waits_for_the_window_while_kvm_delivers_a_ring3_trap") {
        return;
    }
    let kvm = open_kvm().unwrap();
    let vm = kvm.create_vm().unwrap();
    let mut runner = ring3_vcpu(&vm, Some(UD));
    assert!(runner.kvm_holds_event().unwrap(), "KVM holds the #UD");
    let src = requested();
    deliver_interrupt(&src, &mut runner, &VcpuStep::Interrupted).unwrap();
    assert!(
        src.acknowledged.lock().unwrap().is_empty(),
        "nothing injected behind the trap"
    );
    assert_eq!(
        *src.requested.lock().unwrap(),
        Some(VECTOR),
        "still requested"
    );
    let events = runner.vcpu_events().unwrap();
    assert_eq!(events.interrupt.injected, 0);
    assert_eq!(
        (events.exception.injected, events.exception.nr),
        (1, UD),
        "the trap goes in first"
    );
    assert!(
        runner.interrupt_window_requested(),
        "the vCPU asks for the window instead"
    );
}

/// Two injections with no guest instruction between them, KVM's last
/// exit having said the guest can take one (as after a HLT): the second
/// waits for the window while KVM holds the first. The development
/// machines' software KVM took the second in place of the first, whose
/// vector then stayed in service and never reached the guest (a vCPU
/// asleep in `sti; hlt` for good). With `kicked_entry`, a KVM_RUN cut
/// short before the guest ran comes between them.
fn second_injection_waits(kicked_entry: bool) {
    let kvm = open_kvm().unwrap();
    let vm = kvm.create_vm().unwrap();
    let mut run: *mut kvm_bindings::kvm_run = std::ptr::null_mut();
    let mut runner = ring3_vcpu_with(&vm, None, |vcpu| {
        if kicked_entry {
            vcpu.set_kvm_immediate_exit(1);
        }
        run = vcpu.get_kvm_run();
    });
    let say_ready = || {
        // SAFETY: `run` is the vCPU's kvm_run mapping, alive while
        // `runner` owns its fd; no KVM_RUN is in progress.
        unsafe { (*run).ready_for_interrupt_injection = 1 };
    };
    say_ready();
    let src = requested();
    deliver_interrupt(&src, &mut runner, &VcpuStep::Start).unwrap();
    assert_eq!(*src.acknowledged.lock().unwrap(), vec![VECTOR]);
    if kicked_entry {
        assert_eq!(
            runner.run_once(),
            VcpuStep::Interrupted,
            "the entry was cut short"
        );
        say_ready();
    }
    *src.requested.lock().unwrap() = Some(SECOND);
    deliver_interrupt(&src, &mut runner, &VcpuStep::Start).unwrap();
    assert_eq!(
        *src.acknowledged.lock().unwrap(),
        vec![VECTOR],
        "the second vector is not injected while KVM holds the first"
    );
    assert_eq!(
        *src.requested.lock().unwrap(),
        Some(SECOND),
        "still requested"
    );
    let events = runner.vcpu_events().unwrap();
    assert_eq!(
        (events.interrupt.injected, events.interrupt.nr),
        (1, VECTOR),
        "KVM still holds the first"
    );
    assert!(
        runner.interrupt_window_requested(),
        "the vCPU asks for the window after it"
    );
}
#[test]
fn a_second_interrupt_before_the_entry_waits_for_the_first() {
    if !kvm_or_skip("a_second_interrupt_before_the_entry_waits_for_the_first") {
        return;
    }
    second_injection_waits(false);
}

#[test]
fn a_second_interrupt_after_a_kicked_entry_waits_for_the_first() {
    if !kvm_or_skip("a_second_interrupt_after_a_kicked_entry_waits_for_the_first") {
        return;
    }
    second_injection_waits(true);
}
