//! An embedder's own vCPU threads under the engine (skipped without
//! /dev/kvm): a VM registered with `Engine::add_vm_gated` runs on threads
//! the test spawns, through `run_vcpu_loop` and the engine's gates; the
//! scheduler accounts its run time and `finish_vm` collects the outcomes the
//! gates left.

use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vcpu_engine::host_cpus::online_cpus;
use vcpu_engine::{
    run_vcpu_loop, CpuMap, DispatchKind, Engine, EngineConfig, NoInterrupts, VcpuExitHandler,
    VcpuExitReason, VcpuRunner, VmSchedSpec,
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
        self.writes.load(Ordering::Relaxed) >= WRITES
    }
    fn vcpu_failed(&self, _vcpu: u32, _reason: &VcpuExitReason) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }
}

/// A VM with the guest loaded and one vCPU at its first instruction.
fn vm_and_vcpu(kvm: &Kvm) -> (VmFd, VcpuFd, *mut libc::c_void) {
    let vm = kvm.create_vm().unwrap();
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
    // SAFETY: GUEST fits in the mapping at CODE.
    unsafe {
        std::ptr::copy_nonoverlapping(
            GUEST.as_ptr(),
            mem.cast::<u8>().add(CODE as usize),
            GUEST.len(),
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
    (vm, vcpu, mem)
}

#[test]
fn an_embedders_own_vcpu_thread_runs_through_the_engine_gate() {
    let kvm = match Kvm::new() {
        Ok(k) => k,
        Err(e) => {
            println!("SKIPPED: /dev/kvm not available ({e})");
            return;
        }
    };
    let online = online_cpus().unwrap();
    let engine = Engine::new(EngineConfig::default(), CpuMap::from_host(&online).unwrap()).unwrap();
    let (_vm, vcpu, _mem) = vm_and_vcpu(&kvm);
    let handler = Arc::new(Counter {
        writes: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    });
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

#[test]
fn gates_need_the_threads_dispatch() {
    if Kvm::new().is_err() {
        return;
    }
    let online = online_cpus().unwrap();
    let mut config = EngineConfig::default();
    config.dispatch = DispatchKind::Workers;
    let engine = Engine::new(config, CpuMap::from_host(&online).unwrap()).unwrap();
    let spec = VmSchedSpec::new("w", online);
    let handler = Arc::new(Counter {
        writes: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    });
    let r = engine.add_vm_gated(&spec, 1, Arc::new(NoInterrupts), handler);
    assert!(matches!(r, Err(vcpu_engine::EngineError::GatesNeedThreads)));
    engine.shutdown();
}
