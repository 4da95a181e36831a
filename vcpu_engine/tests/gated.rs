//! An embedder's own vCPU threads under the engine (skipped without
//! /dev/kvm): a VM registered with `Engine::add_vm_gated` runs on threads
//! the test spawns, through `run_vcpu_loop` and the engine's gates; the
//! scheduler accounts its run time and `finish_vm` collects the outcomes the
//! gates left. And a VM with Pacer's interrupt controller gets its guest
//! timer's interrupts with no setup beyond the public calls (the engine
//! attaches the controller when the VM is added); under KVM's in-kernel
//! irqchip (`kvm-irqchip`) a halt inside KVM reaches the engine and a stop
//! gets the thread out of KVM's halt.

use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vcpu_engine::host_cpus::online_cpus;
use vcpu_engine::{
    run_vcpu_loop, CpuMap, DispatchKind, Engine, EngineConfig, MsrFault, NoInterrupts, RunState,
    VcpuExitHandler, VcpuExitReason, VcpuRunner, VmSchedSpec,
};

const MEM: usize = 0x10000;
const CODE: u64 = 0x1000;
/// The port the guest counts on.
const PORT: u16 = 0x10;
/// Writes after which the VM stops.
const WRITES: u64 = 2000;

/// Real mode at CODE: `mov dx, 0x10; l: out dx, al; inc al; jmp l`.
const GUEST: [u8; 8] = [0xba, 0x10, 0x00, 0xee, 0xfe, 0xc0, 0xeb, 0xfb];

struct Counter {
    writes: AtomicU64,
    failed: AtomicU64,
    /// Stop now, whatever the count.
    stop: AtomicBool,
}

impl Counter {
    fn new() -> Arc<Counter> {
        Arc::new(Counter {
            writes: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        })
    }
}

#[path = "../../vmm/tests/common/kvm_gate.rs"]
mod kvm_gate;

/// KVM, or None after printing that the test is skipped; panics when
/// `PACER_REQUIRE_KVM=1` (`kvm_gate.rs`).
fn kvm_or_skip(test: &str) -> Option<Kvm> {
    match Kvm::new() {
        Ok(k) => Some(k),
        Err(e) => {
            kvm_gate::kvm_gate_here(test, Err(e.to_string()));
            None
        }
    }
}

impl VcpuExitHandler for Counter {
    fn pio_in(&self, _vcpu: u32, _port: u16, data: &mut [u8]) {
        data.fill(0xff);
    }
    fn pio_out(&self, _vcpu: u32, port: u16, _data: &[u8]) {
        if port == PORT {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn mmio_read(&self, _vcpu: u32, _addr: u64, data: &mut [u8]) {
        data.fill(0xff);
    }
    fn mmio_write(&self, _vcpu: u32, _addr: u64, _data: &[u8]) {}
    fn stopping(&self) -> bool {
        self.writes.load(Ordering::Relaxed) >= WRITES || self.stop.load(Ordering::Relaxed)
    }
    fn vcpu_failed(&self, _vcpu: u32, _reason: &VcpuExitReason) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }
}

/// A VM with the guest loaded and one vCPU at its first instruction.
fn vm_and_vcpu(kvm: &Kvm) -> (VmFd, VcpuFd, *mut libc::c_void) {
    vm_and_vcpu_running(kvm, &GUEST, false)
}

/// [`vm_and_vcpu`] with `code` at CODE, and KVM's in-kernel irqchip if
/// `irqchip`.
fn vm_and_vcpu_running(kvm: &Kvm, code: &[u8], irqchip: bool) -> (VmFd, VcpuFd, *mut libc::c_void) {
    let vm = kvm.create_vm().unwrap();
    if irqchip {
        vm.create_irq_chip().unwrap();
    }
    // SAFETY: an anonymous private mapping of MEM bytes, checked below; it
    // is never unmapped while the VM lives (the test leaks it).
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            MEM,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(mem, libc::MAP_FAILED);
    assert!(CODE as usize + code.len() <= MEM);
    // SAFETY: `code` fits in the mapping at CODE (checked above).
    unsafe {
        std::ptr::copy_nonoverlapping(
            code.as_ptr(),
            mem.cast::<u8>().add(CODE as usize),
            code.len(),
        )
    };
    let region = kvm_bindings::kvm_userspace_memory_region {
        slot: 0,
        guest_phys_addr: 0,
        memory_size: MEM as u64,
        userspace_addr: mem as u64,
        flags: 0,
    };
    // SAFETY: the region is the live mapping above, MEM bytes long.
    unsafe { vm.set_user_memory_region(region).unwrap() };
    let vcpu = vm.create_vcpu(0).unwrap();
    start_at_code(&vcpu);
    (vm, vcpu, mem)
}

/// Put `vcpu` in real mode at CODE.
fn start_at_code(vcpu: &VcpuFd) {
    let mut sregs = vcpu.get_sregs().unwrap();
    sregs.cs.base = 0;
    sregs.cs.selector = 0;
    vcpu.set_sregs(&sregs).unwrap();
    vcpu.set_regs(&kvm_bindings::kvm_regs {
        rip: CODE,
        rflags: 2,
        ..Default::default()
    })
    .unwrap();
}

#[test]
fn an_embedders_own_vcpu_thread_runs_through_the_engine_gate() {
    let Some(kvm) = kvm_or_skip("an_embedders_own_vcpu_thread_runs_through_the_engine_gate") else {
        return;
    };
    let online = online_cpus().unwrap();
    let engine = Engine::new(EngineConfig::default(), CpuMap::from_host(&online).unwrap()).unwrap();
    let (_vm, vcpu, _mem) = vm_and_vcpu(&kvm);
    let handler = Counter::new();
    let spec = VmSchedSpec::new("gated", online.clone());
    let (slot, gates) = engine
        .add_vm_gated(&spec, 1, Arc::new(NoInterrupts), handler.clone())
        .unwrap();
    assert_eq!(gates.len(), 1);
    let mut threads = Vec::new();
    let mut fds = vec![vcpu];
    for mut gate in gates {
        assert_eq!(gate.index(), 0);
        let mut runner = VcpuRunner::new(gate.index(), fds.remove(0), handler.clone());
        threads.push(std::thread::spawn(move || {
            run_vcpu_loop(&mut runner, &mut gate)
        }));
    }
    engine.start_vm(slot);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !handler.stopping() {
        assert!(Instant::now() < deadline, "the guest did not run");
        std::thread::sleep(Duration::from_millis(5));
    }
    let finished = engine.finish_vm(slot, Duration::from_secs(10));
    for t in threads {
        assert_eq!(t.join().unwrap(), VcpuExitReason::Stopped);
    }
    assert_eq!(finished.len(), 1);
    let f = &finished[0];
    assert_eq!(f.outcome.reason, VcpuExitReason::Stopped);
    assert!(f.outcome.stats.pio_exits >= WRITES, "{:?}", f.outcome.stats);
    assert!(f.sched.run_ns > 0, "{:?}", f.sched);
    assert_eq!(handler.failed.load(Ordering::Relaxed), 0);
    engine.shutdown();
}

/// Real mode at CODE: `mov dx, 0x10; out dx, al; cli; hlt; jmp $-1`: one
/// write, then halted for good (only NMI, INIT or SIPI would wake it).
const HALTS: [u8; 8] = [0xba, 0x10, 0x00, 0xee, 0xfa, 0xf4, 0xeb, 0xfd];

#[test]
fn under_kvms_irqchip_a_halt_inside_kvm_reaches_the_engine() {
    let Some(kvm) = kvm_or_skip("under_kvms_irqchip_a_halt_inside_kvm_reaches_the_engine") else {
        return;
    };
    let online = online_cpus().unwrap();
    let mut config = EngineConfig::default();
    config.dispatch = DispatchKind::KvmIrqchip;
    config.kvm_poll_ns = 1_000_000;
    let engine = Engine::new(config, CpuMap::from_host(&online).unwrap()).unwrap();
    let (_vm, vcpu, _mem) = vm_and_vcpu_running(&kvm, &HALTS, true);
    let handler = Counter::new();
    let spec = VmSchedSpec::new("halter", online.clone());
    let (slot, mut gates) = engine
        .add_vm_gated(&spec, 1, Arc::new(NoInterrupts), handler.clone())
        .unwrap();
    let mut gate = gates.remove(0);
    let mut runner = VcpuRunner::new(0, vcpu, handler.clone());
    let thread = std::thread::spawn(move || run_vcpu_loop(&mut runner, &mut gate));
    engine.start_vm(slot);
    // No HLT exit reaches user space; the engine learns the halt from
    // KVM (the watcher's sample of `blocking`, or the quantum's end).
    let v = engine.vm_named("halter").unwrap().vcpus()[0].clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    while v.state() != RunState::HaltedInKvm {
        assert!(Instant::now() < deadline, "state {:?}", v.state());
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(handler.writes.load(Ordering::Relaxed), 1);
    // Blocked in the scheduler: no run time accrues while it sleeps in KVM.
    let run = |e: &Engine| {
        let snap = e.snapshot();
        let row = snap.entities.iter().find(|r| r.id == v.entity()).unwrap();
        row.run_time
    };
    let before = run(&engine);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(run(&engine), before);
    // A stop gets the thread out of KVM's halt.
    handler.stop.store(true, Ordering::Relaxed);
    let finished = engine.finish_vm(slot, Duration::from_secs(10));
    assert_eq!(thread.join().unwrap(), VcpuExitReason::Stopped);
    assert_eq!(finished[0].outcome.stats.halts, 0, "KVM handled the HLT");
    engine.shutdown();
}

#[test]
fn gates_need_the_threads_dispatch() {
    if kvm_or_skip("gates_need_the_threads_dispatch").is_none() {
        return;
    }
    let online = online_cpus().unwrap();
    let mut config = EngineConfig::default();
    config.dispatch = DispatchKind::Workers;
    let engine = Engine::new(config, CpuMap::from_host(&online).unwrap()).unwrap();
    let spec = VmSchedSpec::new("w", online);
    let handler = Counter::new();
    let r = engine.add_vm_gated(&spec, 1, Arc::new(NoInterrupts), handler);
    assert!(matches!(r, Err(vcpu_engine::EngineError::GatesNeedThreads)));
    engine.shutdown();
}

/// Real mode at CODE: x2APIC on, a periodic LAPIC timer (vector 0x40,
/// 1 ms), then `sti; l: hlt; jmp l`. The handler at CODE + 0x4f writes
/// port 0x10, EOIs and returns.
const TIMER_GUEST: [u8; 98] = [
    0x66, 0xb9, 0x1b, 0x00, 0x00, 0x00, 0x0f, 0x32, // mov ecx, 0x1b; rdmsr
    0x66, 0x0d, 0x00, 0x0c, 0x00, 0x00, 0x0f, 0x30, // or eax, 0xc00; wrmsr (x2APIC)
    0x66, 0xb9, 0x0f, 0x08, 0x00, 0x00, 0x66, 0xb8, // mov ecx, 0x80f; mov eax,
    0xff, 0x01, 0x00, 0x00, 0x66, 0x31, 0xd2, 0x0f, //   0x1ff; xor edx, edx;
    0x30, 0x66, 0xb9, 0x3e, 0x08, 0x00, 0x00, 0x66, //   wrmsr (SVR); mov ecx, 0x83e;
    0xb8, 0x0b, 0x00, 0x00, 0x00, 0x0f, 0x30, 0x66, //   mov eax, 0xb; wrmsr (divide by 1)
    0xb9, 0x32, 0x08, 0x00, 0x00, 0x66, 0xb8, 0x40, // mov ecx, 0x832; mov eax,
    0x00, 0x02, 0x00, 0x0f, 0x30, 0x66, 0xb9, 0x38, //   0x20040; wrmsr (LVT: periodic, 0x40)
    0x08, 0x00, 0x00, 0x66, 0xb8, 0x40, 0x42, 0x0f, // mov ecx, 0x838; mov eax, 1000000;
    0x00, 0x0f, 0x30, 0xfb, 0xf4, 0xeb, 0xfd,
    0xba, //   wrmsr (count); sti; hlt; jmp; handler: mov dx,
    0x10, 0x00, 0xee, 0x66, 0xb9, 0x0b, 0x08, 0x00, //   0x10; out dx, al; mov ecx, 0x80b;
    0x00, 0x66, 0x31, 0xc0, 0x66, 0x31, 0xd2, 0x0f, //   xor eax, eax; xor edx, edx;
    0x30, 0xcf, //                                       wrmsr (EOI); iret
];
/// The timer's vector and its handler's offset in TIMER_GUEST.
const TIMER_VECTOR: u64 = 0x40;
const TIMER_HANDLER: u64 = 0x4f;
/// Timer interrupts after which the timer VM stops.
const TICKS: u64 = 20;

/// The timer VM's exits: its local APIC's MSRs to Pacer's controller,
/// port 0x10 counts the guest's timer interrupts.
struct TimerExits {
    chip: Arc<devices::irqchip::IrqChip>,
    ticks: AtomicU64,
    failed: AtomicU64,
}

impl VcpuExitHandler for TimerExits {
    fn pio_in(&self, _vcpu: u32, _port: u16, data: &mut [u8]) {
        data.fill(0xff);
    }
    fn pio_out(&self, _vcpu: u32, port: u16, _data: &[u8]) {
        if port == PORT {
            self.ticks.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn mmio_read(&self, vcpu: u32, addr: u64, data: &mut [u8]) {
        if !self.chip.lapic_mmio_read(vcpu, addr, data) {
            data.fill(0xff);
        }
    }
    fn mmio_write(&self, vcpu: u32, addr: u64, data: &[u8]) {
        self.chip.lapic_mmio_write(vcpu, addr, data);
    }
    fn msr_read(&self, vcpu: u32, msr: u32) -> Result<u64, MsrFault> {
        self.chip.msr_read(vcpu, msr).map_err(|_| MsrFault)
    }
    fn msr_write(&self, vcpu: u32, msr: u32, value: u64) -> Result<(), MsrFault> {
        self.chip.msr_write(vcpu, msr, value).map_err(|_| MsrFault)
    }
    fn guest_cr8(&self, vcpu: u32, cr8: u64) {
        self.chip.set_cr8(vcpu, cr8);
    }
    fn stopping(&self) -> bool {
        self.ticks.load(Ordering::Relaxed) >= TICKS
    }
    fn vcpu_failed(&self, _vcpu: u32, _reason: &VcpuExitReason) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn guest_timer_interrupts_arrive_without_a_manual_attach() {
    use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
    let Some(kvm) = kvm_or_skip("guest_timer_interrupts_arrive_without_a_manual_attach") else {
        return;
    };
    let online = online_cpus().unwrap();
    let engine = Engine::new(EngineConfig::default(), CpuMap::from_host(&online).unwrap()).unwrap();
    let vm = kvm.create_vm().unwrap();
    let mem = Arc::new(GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM)]).unwrap());
    mem.write_slice(&TIMER_GUEST, GuestAddress(CODE)).unwrap();
    // The real-mode IVT entry of the timer's vector: offset, segment 0.
    let handler_ip = (CODE + TIMER_HANDLER) as u16;
    mem.write_obj(u32::from(handler_ip), GuestAddress(TIMER_VECTOR * 4))
        .unwrap();
    let region = kvm_bindings::kvm_userspace_memory_region {
        slot: 0,
        guest_phys_addr: 0,
        memory_size: MEM as u64,
        userspace_addr: mem.get_host_address(GuestAddress(0)).unwrap() as u64,
        flags: 0,
    };
    // SAFETY: the region is `mem`'s live mapping, MEM bytes long; `mem`
    // outlives the VM (dropped after `vm` at the end of the test).
    unsafe { vm.set_user_memory_region(region).unwrap() };
    vcpu_engine::route_apic_msrs(&vm, &[]).unwrap();
    let vcpu = vm.create_vcpu(0).unwrap();
    start_at_code(&vcpu);

    // Only the public calls an embedder makes: no attach anywhere.
    let clock = vcpu_engine::TscClock::from_vcpu(&vcpu).unwrap();
    assert!(clock.khz > 0, "{clock:?}");
    let cpu = devices::irqchip::GuestCpu {
        phys_addr_bits: 39,
        x2apic: true,
    };
    let host = vcpu_engine::ChipHost::new(&engine, clock, cpu, mem.clone());
    let chip = devices::irqchip::IrqChip::new(1, Arc::new(host));
    let handler = Arc::new(TimerExits {
        chip: chip.clone(),
        ticks: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    });
    let spec = VmSchedSpec::new("timer", online.clone());
    let (slot, mut gates) = engine
        .add_vm_gated(&spec, 1, chip, handler.clone())
        .unwrap();
    let mut gate = gates.remove(0);
    let mut runner = VcpuRunner::new(0, vcpu, handler.clone());
    let thread = std::thread::spawn(move || run_vcpu_loop(&mut runner, &mut gate));
    engine.start_vm(slot);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !handler.stopping() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let ticks = handler.ticks.load(Ordering::Relaxed);
    let finished = engine.finish_vm(slot, Duration::from_secs(10));
    assert_eq!(thread.join().unwrap(), VcpuExitReason::Stopped);
    engine.shutdown();
    assert_eq!(handler.failed.load(Ordering::Relaxed), 0);
    assert!(
        ticks >= TICKS,
        "{ticks} timer interrupts in 60 s; {:?}",
        finished[0].outcome.stats
    );
    assert!(
        finished[0].outcome.stats.msr_exits >= 6,
        "{:?}",
        finished[0].outcome.stats
    );
}
