//! A VMM outside Pacer that schedules its vCPUs with Pacer's engine.
//!
//! It boots Pacer's bench guest (guests/PROTOCOL.md) twice: a `sleep` VM
//! (a vCPU waking every millisecond on its local APIC timer) and a
//! `cpu` VM (3 vCPUs that never stop computing), 4 vCPUs on 2 host CPUs
//! under the haiku policy, then prints each vCPU's scheduling statistics
//! and the guests' own figures. Everything VMM-side is here and small:
//! guest memory (vm-memory), the ELF kernel (linux-loader), the 64-bit
//! entry state, CPUID, the ports the guest talks to (the `devices` crate)
//! and the exit handler. What the engine brings: the scheduler, the vCPU
//! threads that run KVM_RUN when dispatched, and interrupt delivery from
//! Pacer's local APIC (`devices::irqchip`).
//!
//! ```sh
//! cargo run --release -p vcpu_engine --example mini_vmm -- --duration-ms 2000
//! ```
//! Options: `--duration-ms N` (default 2000), `--cpus LIST` (host CPUs,
//! default 0-1), `--kernel ELF` (default: the bench guest this build made),
//! `--console` (echo the guests' serial consoles).

use devices::irqchip::{GuestCpu, IrqChip};
use devices::result_port::{ResultPort, RESULT_PORT_BASE, RESULT_PORT_LEN};
use devices::serial::{ConsoleWriter, SerialConsole, COM1_BASE, COM1_IRQ, COM1_LEN};
use devices::{
    exit_port, yield_port, GuestMemoryRead, IoContext, Marker, PioBus, RecordError, RecordKind,
    ResultRecord, StopRequest, VmEventSink,
};
use kvm_bindings::{kvm_segment, kvm_userspace_memory_region, CpuId, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Kvm, VmFd};
use linux_loader::cmdline::Cmdline;
use linux_loader::configurator::linux::LinuxBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::bootparam::boot_params;
use linux_loader::loader::{elf::Elf, load_cmdline, KernelLoader};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use vcpu_engine::{
    apic_cpuid, route_apic_msrs, run_vcpu_loop, vcpu_sched, ChipHost, CpuMap, Engine, EngineConfig,
    HostCpuSet, MsrFault, TscClock, VcpuExitHandler, VcpuExitReason, VcpuRunner, VmSchedSpec,
    VmSlot,
};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

type Error = Box<dyn std::error::Error>;

// Guest-physical layout of the 64-bit entry (guests/PROTOCOL.md, "Boot").
const MEM_BYTES: u64 = 32 << 20;
const GDT: u64 = 0x500;
const ZERO_PAGE: u64 = 0x7000;
const BOOT_STACK: u64 = 0x8ff0;
const PML4: u64 = 0x9000;
const PDPT: u64 = 0xa000;
const PD: u64 = 0xb000;
const CMDLINE: u64 = 0x2_0000;
const KERNEL: u64 = 0x10_0000;

/// The two VMs: name, the guest's workload parameters and vCPUs. Four
/// vCPUs on two CPUs; three that never stop computing do not divide
/// evenly over two CPUs, so the scheduler also migrates (it rotates the
/// crowded CPU among them).
const VMS: [(&str, &str, u32); 2] = [
    ("sleep", "workload=sleep interval_us=1000", 1),
    ("cpu", "workload=cpu", 3),
];

struct Args {
    duration_ms: u64,
    cpus: HostCpuSet,
    kernel: PathBuf,
    console: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        duration_ms: 2000,
        cpus: HostCpuSet::parse_list("0-1").map_err(|e| e.to_string())?,
        kernel: guests::bench_guest_elf().to_path_buf(),
        console: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag}: a value is missing"));
        match flag.as_str() {
            "--duration-ms" => {
                a.duration_ms = value()?
                    .parse()
                    .ok()
                    .filter(|&ms| (1..=86_400_000).contains(&ms))
                    .ok_or("--duration-ms: want an integer from 1 to 86400000")?
            }
            "--cpus" => {
                a.cpus = HostCpuSet::parse_list(&value()?).map_err(|e| format!("--cpus: {e}"))?
            }
            "--kernel" => a.kernel = value()?.into(),
            "--console" => a.console = true,
            other => return Err(format!("unknown option {other} (see the file's header)")),
        }
    }
    Ok(a)
}

// ---------------------------------------------------------------------------
// What the guest reports: markers, result records and its exit request.

#[derive(Default)]
struct GuestState {
    exit_status: Option<u32>,
    failure: Option<String>,
    /// The records the table shows (per vCPU: SLEEP_DONE, LATENCY,
    /// WORK_DONE), and how many the result port rejected.
    records: Vec<ResultRecord>,
    bad_records: u64,
}

#[derive(Default)]
struct Guest {
    state: Mutex<GuestState>,
    changed: Condvar,
    /// Asked before every KVM_RUN: one load, no lock.
    stopped: AtomicBool,
}

impl Guest {
    fn lock(&self) -> std::sync::MutexGuard<'_, GuestState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn stop(&self, f: impl FnOnce(&mut GuestState)) {
        f(&mut self.lock());
        self.stopped.store(true, Ordering::Release);
        self.changed.notify_all();
    }
    fn fail(&self, why: String) {
        self.stop(|s| {
            s.failure.get_or_insert(why);
        });
    }
    /// Wait until the guest stops or `deadline` passes.
    fn wait(&self, deadline: Instant) {
        let mut s = self.lock();
        while !self.stopped.load(Ordering::Acquire) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                drop(s);
                return self.fail("timed out".into());
            }
            s = self
                .changed
                .wait_timeout(s, left)
                .map(|(s, _)| s)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}

impl VmEventSink for Guest {
    fn marker(&self, vcpu: u32, marker: Marker) {
        if marker == Marker::Panic {
            self.fail(format!("guest panic on vCPU {vcpu} (--console shows it)"));
        }
    }
    fn record(&self, _vcpu: u32, record: Result<ResultRecord, RecordError>) {
        let mut s = self.lock();
        match record {
            Ok(r) if r.kind == RecordKind::Error => {
                let name = devices::result_payload::packed_name(&r.values[1..4]);
                let code = devices::result_payload::GuestErrorCode::from_u64(r.values[0]);
                s.failure
                    .get_or_insert(format!("guest error {code:?} ({name}) on vCPU {}", r.vcpu));
            }
            Ok(r)
                if matches!(
                    r.kind,
                    RecordKind::SleepDone | RecordKind::Latency | RecordKind::WorkDone
                ) =>
            {
                s.records.push(r)
            }
            Ok(_) => {}
            Err(_) => s.bad_records += 1,
        }
    }
    fn stop_request(&self, _vcpu: u32, request: StopRequest) {
        match request {
            StopRequest::GuestExit(status) => self.stop(|s| {
                s.exit_status.get_or_insert(status);
            }),
            other => self.fail(format!("guest asked for {other:?}")),
        }
    }
}

/// Guest RAM as the result port reads it.
struct Ram(Arc<GuestMemoryMmap>);

impl GuestMemoryRead for Ram {
    fn read_guest(&self, gpa: u64, buf: &mut [u8]) -> bool {
        self.0.read_slice(buf, GuestAddress(gpa)).is_ok()
    }
}

// ---------------------------------------------------------------------------
// The exit handler the engine's vCPU threads call: ports to the bus, the
// local APIC's page and MSRs to Pacer's interrupt controller.

struct Exits {
    bus: PioBus,
    chip: Arc<IrqChip>,
    guest: Arc<Guest>,
}

impl VcpuExitHandler for Exits {
    fn pio_in(&self, vcpu: u32, port: u16, data: &mut [u8]) {
        self.bus.read(IoContext { vcpu }, port, data);
    }
    fn pio_out(&self, vcpu: u32, port: u16, data: &[u8]) {
        self.bus.write(IoContext { vcpu }, port, data);
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
        self.guest.stopped.load(Ordering::Acquire)
    }
    fn vcpu_failed(&self, vcpu: u32, reason: &VcpuExitReason) {
        self.guest.fail(format!("vCPU {vcpu}: {reason}"));
    }
}

// ---------------------------------------------------------------------------
// Booting the bench guest: its 64-bit direct entry.

/// Load the kernel and write what the entry expects; returns the entry.
fn load_guest(mem: &GuestMemoryMmap, kernel: &PathBuf, cmdline: &str) -> Result<u64, Error> {
    let mut f = std::fs::File::open(kernel).map_err(|e| format!("{}: {e}", kernel.display()))?;
    let entry = Elf::load(mem, None, &mut f, Some(GuestAddress(KERNEL)))?
        .kernel_load
        .0;
    let mut cl = Cmdline::new(4096)?;
    cl.insert_str(cmdline)?;
    load_cmdline(mem, GuestAddress(CMDLINE), &cl)?;
    // The zero page: command line and e820 map (RAM, the legacy hole, RAM).
    let mut p = boot_params::default();
    p.hdr.boot_flag = 0xaa55;
    p.hdr.header = 0x5372_6448; // "HdrS"
    p.hdr.type_of_loader = 0xff;
    p.hdr.cmd_line_ptr = CMDLINE as u32;
    p.hdr.cmdline_size = cmdline.len() as u32;
    let e820 = [
        (0, 0xa_0000, 1),
        (0xa_0000, 0x6_0000, 2),
        (KERNEL, MEM_BYTES - KERNEL, 1),
    ];
    for (slot, (addr, size, kind)) in p.e820_table.iter_mut().zip(e820) {
        (slot.addr, slot.size, slot.r#type) = (addr, size, kind);
    }
    p.e820_entries = e820.len() as u8;
    LinuxBootConfigurator::write_bootparams::<GuestMemoryMmap>(
        &BootParams::new(&p, GuestAddress(ZERO_PAGE)),
        mem,
    )?;
    // GDT: null, null, 64-bit code (0x10), data (0x18).
    let gdt: [u64; 4] = [0, 0, 0x00af_9b00_0000_ffff, 0x00cf_9300_0000_ffff];
    mem.write_obj(gdt, GuestAddress(GDT))?;
    // Identity map of all RAM with 2 MiB pages, supervisor only.
    mem.write_obj(PDPT | 0x3, GuestAddress(PML4))?;
    mem.write_obj(PD | 0x3, GuestAddress(PDPT))?;
    for i in 0..MEM_BYTES >> 21 {
        mem.write_obj((i << 21) | 0x83, GuestAddress(PD + 8 * i))?;
    }
    Ok(entry)
}

/// The boot vCPU's registers at the 64-bit entry.
fn set_entry_state(vcpu: &kvm_ioctls::VcpuFd, entry: u64) -> Result<(), Error> {
    let seg = |selector, type_, l, db| kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_,
        present: 1,
        s: 1,
        l,
        db,
        g: 1,
        ..Default::default()
    };
    let mut s = vcpu.get_sregs()?;
    s.cs = seg(0x10, 0xb, 1, 0);
    let data = seg(0x18, 0x3, 0, 1);
    (s.ds, s.es, s.fs, s.gs, s.ss) = (data, data, data, data, data);
    s.gdt.base = GDT;
    s.gdt.limit = 4 * 8 - 1;
    s.idt.limit = 0; // an early exception is a triple fault, not a jump into the void
    (s.cr0, s.cr3, s.cr4, s.efer) = (0x8005_0033, PML4, 0x620, 0x501);
    vcpu.set_sregs(&s)?;
    vcpu.set_regs(&kvm_bindings::kvm_regs {
        rip: entry,
        rsp: BOOT_STACK,
        rsi: ZERO_PAGE,
        rdi: 0,
        rflags: 0x2,
        ..Default::default()
    })?;
    Ok(())
}

/// The VM's CPUID (KVM's, with what Pacer's local APIC offers:
/// `apic_cpuid`) with vCPU `index`'s APIC id, under a hypervisor.
fn vcpu_cpuid(base: &CpuId, index: u32) -> CpuId {
    let mut t = base.clone();
    for e in t.as_mut_slice() {
        match e.function {
            0x1 => {
                e.ecx |= 1 << 31;
                e.ebx = (e.ebx & 0x00ff_ffff) | (index << 24);
            }
            0xb | 0x1f => e.edx = index,
            _ => {}
        }
    }
    t
}

/// One VM, registered with the engine and running.
struct Vm {
    name: &'static str,
    guest: Arc<Guest>,
    slot: VmSlot,
    threads: Vec<std::thread::JoinHandle<VcpuExitReason>>,
    tsc_khz: u64,
    // The memslot points into `_mem`: it outlives the VM (drop order).
    _vm: VmFd,
    _mem: Arc<GuestMemoryMmap>,
}

fn start_vm(
    kvm: &Kvm,
    engine: &Arc<Engine>,
    args: &Args,
    (name, workload, vcpus): (&'static str, &str, u32),
) -> Result<Vm, Error> {
    let vm = kvm.create_vm()?;
    vm.set_tss_address(0xfffb_d000)?;
    let mem = Arc::new(GuestMemoryMmap::from_ranges(&[(
        GuestAddress(0),
        MEM_BYTES as usize,
    )])?);
    let host_addr = mem.get_host_address(GuestAddress(0))? as u64;
    // SAFETY: the region is a live mapping of MEM_BYTES; `Vm` keeps it
    // until after `finish_vm` has ended the vCPU threads (closing the vCPU
    // fds) and drops it after the VM fd.
    unsafe {
        vm.set_user_memory_region(kvm_userspace_memory_region {
            slot: 0,
            guest_phys_addr: 0,
            memory_size: MEM_BYTES,
            userspace_addr: host_addr,
            flags: 0,
        })?
    };
    // No in-kernel irqchip: the local APIC's MSRs (x2APIC range, APIC
    // base, TSC deadline, PV EOI) exit to our handler, for Pacer's chip.
    route_apic_msrs(&vm, &[])?;
    let mut cpuid = kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)?;
    apic_cpuid(&mut cpuid); // x2APIC, TSC deadline, no PV feature of KVM's APIC
    let fds = (0..vcpus)
        .map(|i| {
            let fd = vm.create_vcpu(u64::from(i))?;
            fd.set_cpuid2(&vcpu_cpuid(&cpuid, i))?;
            Ok(fd)
        })
        .collect::<Result<Vec<_>, kvm_ioctls::Error>>()?;
    // The guest TSC against the engine's clock (the chip's TSC deadlines).
    let clock = TscClock::from_vcpu(&fds[0])?;
    let tsc_khz = clock.khz;
    let cmdline = format!(
        "{workload} duration_ms={} tsc_khz={tsc_khz} vcpus={vcpus}",
        args.duration_ms
    );
    set_entry_state(&fds[0], load_guest(&mem, &args.kernel, &cmdline)?)?;

    // Pacer's interrupt controller, its host side on the engine's clock.
    let phys_addr_bits = cpuid.as_slice().iter().find(|e| e.function == 0x8000_0008);
    let cpu = GuestCpu {
        phys_addr_bits: phys_addr_bits.map_or(36, |e| e.eax as u8),
        x2apic: true,
    };
    let chip = IrqChip::new(
        vcpus,
        Arc::new(ChipHost::new(engine, clock, cpu, mem.clone())),
    );

    // The ports the bench guest uses: COM1, result, exit and yield ports.
    let guest = Arc::new(Guest::default());
    let sink: Arc<dyn VmEventSink> = guest.clone();
    let mut bus = PioBus::new();
    let console = ConsoleWriter::new(name, None, args.console);
    bus.insert(
        COM1_BASE,
        COM1_LEN,
        Arc::new(Mutex::new(SerialConsole::new(
            chip.irq_line(COM1_IRQ),
            console,
        ))),
    )?;
    let results = ResultPort::new(Arc::new(Ram(mem.clone())), sink.clone());
    bus.insert(
        RESULT_PORT_BASE,
        RESULT_PORT_LEN,
        Arc::new(Mutex::new(results)),
    )?;
    let exit = exit_port::ExitPort::new(sink);
    bus.insert(
        exit_port::EXIT_PORT,
        exit_port::EXIT_PORT_LEN,
        Arc::new(Mutex::new(exit)),
    )?;
    bus.insert(
        yield_port::YIELD_PORT,
        yield_port::YIELD_PORT_LEN,
        Arc::new(Mutex::new(yield_port::YieldPort)),
    )?;
    let handler: Arc<dyn VcpuExitHandler> = Arc::new(Exits {
        bus,
        chip: chip.clone(),
        guest: guest.clone(),
    });

    // Register the VM with the engine: one gate per vCPU. Each of our vCPU
    // threads runs its KVM_RUN loop through its gate, which parks it until
    // the scheduler dispatches the vCPU and hands the CPU on when it halts,
    // yields, is preempted or its slice ends. The engine attaches the
    // chip's host to the VM's slot here: its timers and wake-ups reach it.
    // Timeshare at priority 10, default shares.
    let spec = VmSchedSpec::new(name, args.cpus.clone());
    let (slot, gates) = engine.add_vm_gated(&spec, vcpus, chip, handler.clone())?;
    let mut threads = Vec::new();
    for (fd, mut gate) in fds.into_iter().zip(gates) {
        let mut runner = VcpuRunner::new(gate.index(), fd, handler.clone());
        let thread = std::thread::Builder::new()
            .name(format!("{name}/vcpu{}", gate.index()))
            .spawn(move || run_vcpu_loop(&mut runner, &mut gate))?;
        threads.push(thread);
    }
    // vCPU 0 runs; the others wait for the guest's INIT/SIPI.
    engine.start_vm(slot);
    Ok(Vm {
        name,
        guest,
        slot,
        threads,
        tsc_khz,
        _vm: vm,
        _mem: mem,
    })
}

/// The guest's headline figure of one vCPU, from its records.
fn guest_figure(records: &[ResultRecord], vcpu: u32, tsc_khz: u64) -> String {
    let mine = |k| records.iter().find(|r| r.kind == k && r.vcpu == vcpu);
    if let (Some(s), Some(l)) = (mine(RecordKind::SleepDone), mine(RecordKind::Latency)) {
        let us = |ns: u64| ns as f64 / 1e3;
        return format!(
            "{} wakes, latency p50 {:.0} us p99 {:.0} us",
            s.values[0],
            us(l.values[2]),
            us(l.values[3])
        );
    }
    if let Some(w) = mine(RecordKind::WorkDone) {
        let s = w.values[1] as f64 / (tsc_khz as f64 * 1e3);
        return format!("{:.0} work units/s", w.values[0] as f64 / s.max(1e-9));
    }
    "-".into()
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mini_vmm: {e}");
            std::process::exit(2);
        }
    };
    match run(&args) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("mini_vmm: {e}");
            std::process::exit(1);
        }
    }
}

/// Run both VMs to their end and print the table; false if a guest failed.
fn run(args: &Args) -> Result<bool, Error> {
    let kvm = Kvm::new().map_err(|e| format!("/dev/kvm: {e}"))?;
    let mut config = EngineConfig::default();
    config.policy = vcpu_sched::PolicyKind::Haiku;
    config.halt_poll_ns = 200_000; // as KVM's halt_poll_ns
    let engine = Engine::new(
        config,
        CpuMap::from_host(&args.cpus).map_err(|e| format!("--cpus {}: {e}", args.cpus))?,
    )?;
    let started = Instant::now();
    let vms = VMS
        .into_iter()
        .map(|v| start_vm(&kvm, &engine, args, v))
        .collect::<Result<Vec<_>, _>>()?;
    // Generous: this machine's KVM emulates the guest kernel slowly.
    let deadline = started + Duration::from_millis(args.duration_ms) + Duration::from_secs(60);
    println!(
        "policy {} on host CPUs {}: {} VMs, {} vCPUs, {} ms",
        engine.policy_name(),
        args.cpus,
        vms.len(),
        VMS.iter().map(|v| v.2).sum::<u32>(),
        args.duration_ms
    );
    println!("vm     vcpu  run_ms  wait_ms  wakeups  preemptions  migrations  cpus  guest");
    let (mut ok, mut total) = (true, [0u64; 3]);
    for vm in vms {
        vm.guest.wait(deadline);
        // Every vCPU leaves its CPU and the scheduler; our threads' loops
        // end (their gates say Exit) and we join them.
        let finished = engine.finish_vm(vm.slot, Duration::from_secs(10));
        for t in vm.threads {
            if t.join().is_err() {
                vm.guest.fail("a vCPU thread panicked".into());
            }
        }
        let state = vm.guest.lock();
        for (i, f) in finished.iter().enumerate() {
            let s = &f.sched;
            total = [
                total[0] + s.wakeups,
                total[1] + s.preemptions,
                total[2] + s.migrations,
            ];
            let cpus = if s.host_cpus.is_empty() {
                "-"
            } else {
                &s.host_cpus
            };
            println!(
                "{:<6} {:>4}  {:>6}  {:>7}  {:>7}  {:>11}  {:>10}  {:>4}  {}",
                vm.name,
                i,
                s.run_ns / 1_000_000,
                s.ready_wait_ns / 1_000_000,
                s.wakeups,
                s.preemptions,
                s.migrations,
                cpus,
                guest_figure(&state.records, i as u32, vm.tsc_khz)
            );
        }
        if state.failure.is_some() || state.exit_status != Some(0) {
            ok = false;
            let why = state.failure.as_deref().unwrap_or("failed");
            eprintln!(
                "mini_vmm: VM {}: {why} (guest exit status {:?})",
                vm.name, state.exit_status
            );
        }
        if state.bad_records > 0 {
            eprintln!(
                "mini_vmm: VM {}: {} result records rejected",
                vm.name, state.bad_records
            );
        }
    }
    println!(
        "total: {} wakeups, {} preemptions, {} migrations",
        total[0], total[1], total[2]
    );
    engine.shutdown();
    Ok(ok)
}
