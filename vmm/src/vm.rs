//! One VM: KVM VM + memory + vCPUs + devices, its port-I/O bus, and its
//! lifecycle (create -> start -> stop on guest request / fatal vCPU exit /
//! timeout -> result). A failing VM stops only itself.

use crate::boot::{self, vcpu::VcpuBoot, GuestKind};
use crate::config::VmConfig;
use crate::cpuid;
use crate::engine::irq::NoInterrupts;
use crate::engine::irq::{ChipHost, InterruptSource, TscClock};
use crate::engine::stats::VcpuSchedStats;
use crate::engine::{Engine, EngineError, VmSchedSpec, VmSlot};
use crate::irq::KvmIrqLine;
use crate::memory::{self, DeviceMemory};
use crate::msr;
use crate::results::{ResultsLog, VmResult};
use crate::vcpu::{
    MsrFault, VcpuError, VcpuExitHandler, VcpuExitReason, VcpuHandle, VcpuOutcome, VcpuRunner,
};
use devices::acpi_pm::{AcpiPm, ACPI_PM_BASE, ACPI_PM_LEN};
use devices::bus::UnknownAccessLog;
use devices::debug_exit::debug_exit_status;
use devices::exit_port::{ExitPort, EXIT_PORT, EXIT_PORT_LEN};
use devices::i8042::{I8042, I8042_BASE, I8042_LEN};
use devices::irq::{EventFdLine, InterruptLine};
use devices::irqchip::regs::{IOAPIC_DEFAULT_BASE, IOAPIC_MMIO_LEN};
use devices::irqchip::{GuestCpu, IrqChip};
use devices::pc_testdev::PC_TESTDEV_IRQ_LINES;
use devices::pm_timer::{PmTimer, PM_TIMER_LEN, PM_TIMER_PORT};
use devices::qemu_test::insert_qemu_test_devices;
use devices::result_port::{ResultPort, RESULT_PORT_BASE, RESULT_PORT_LEN};
use devices::serial::{ConsoleWriter, SerialConsole, COM1_BASE, COM1_IRQ, COM1_LEN};
use devices::yield_port::{YieldPort, YIELD_PORT, YIELD_PORT_LEN};
use devices::MmioBus;
use devices::{IoContext, Marker, PioBus, RecordError, ResultRecord, StopRequest, VmEventSink};
use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::{Kvm, VmFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use vm_memory::{Address, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// How long a stopping VM waits for its vCPUs to leave their CPUs.
const VCPU_STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// TSS address for Intel VMX (3 pages just below the 4 GiB BIOS area).
const KVM_TSS_ADDRESS: usize = 0xfffb_d000;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error("cannot open /dev/kvm: {0}")]
    Kvm(kvm_ioctls::Error),
    #[error("KVM_CREATE_VM failed: {0}")]
    CreateVm(kvm_ioctls::Error),
    #[error("KVM_CREATE_IRQCHIP failed: {0}")]
    Irqchip(kvm_ioctls::Error),
    #[error("guest memory: {0}")]
    Memory(#[from] memory::MemoryError),
    #[error("KVM_SET_USER_MEMORY_REGION failed: {0}")]
    Memslot(kvm_ioctls::Error),
    #[error("KVM_CREATE_VCPU {index} failed: {source}")]
    CreateVcpu {
        index: u32,
        source: kvm_ioctls::Error,
    },
    #[error("CPUID: {0}")]
    Cpuid(#[from] cpuid::CpuidError),
    #[error("MSRs: {0}")]
    Msr(#[from] msr::MsrError),
    #[error("KVM_GET_TSC_KHZ failed: {0}")]
    TscKhz(kvm_ioctls::Error),
    #[error("boot: {0}")]
    Boot(#[from] boot::BootError),
    #[error("vcpu{index}: {source}")]
    ConfigureVcpu { index: u32, source: boot::BootError },
    #[error("device setup: {0}")]
    Device(String),
    #[error("cannot create {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("results: {0}")]
    Results(#[from] crate::results::ResultsError),
    #[error("vCPU: {0}")]
    Vcpu(#[from] VcpuError),
    #[error("engine: {0}")]
    Engine(#[from] EngineError),
}

/// Who schedules the VM's vCPUs.
#[derive(Clone)]
pub enum VcpuScheduling {
    /// One thread per vCPU left to the host kernel, with KVM's in-kernel
    /// irqchip (`policy = "host"`). `pin`: bind the threads to the VM's
    /// core set.
    Host { pin: bool },
    /// Pacer's engine dispatches the vCPUs; no in-kernel irqchip (a guest
    /// HLT exits to Pacer), Pacer's own interrupt controller.
    Scheduled(Arc<Engine>),
}

impl std::fmt::Debug for VcpuScheduling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VcpuScheduling::Host { pin } => write!(f, "Host {{ pin: {pin} }}"),
            VcpuScheduling::Scheduled(e) => write!(
                f,
                "Scheduled({}, {} dispatch)",
                e.policy_name(),
                e.dispatch_kind()
            ),
        }
    }
}

/// The VM's vCPUs once started.
enum RunningVcpus {
    /// Host-mode threads.
    Host(Vec<VcpuHandle>),
    /// Registered with the engine.
    Scheduled(Arc<Engine>, VmSlot),
}

/// How the VM is run.
#[derive(Debug, Clone)]
pub struct VmOptions {
    /// Directory for `<vm>.console.log` and `<vm>.results.jsonl` (None: no
    /// files, results kept in memory).
    pub log_dir: Option<PathBuf>,
    pub scheduling: VcpuScheduling,
    /// Reference instant of the whole run (for `t_run_ms`).
    pub run_start: Instant,
}

impl Default for VmOptions {
    fn default() -> Self {
        VmOptions {
            log_dir: None,
            scheduling: VcpuScheduling::Host { pin: true },
            run_start: Instant::now(),
        }
    }
}

impl VmOptions {
    /// Whether KVM's in-kernel irqchip serves this VM.
    fn in_kernel_irqchip(&self) -> bool {
        matches!(self.scheduling, VcpuScheduling::Host { .. })
    }
}

/// Why a VM stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopCause {
    GuestExit(u32),
    /// The guest wrote this value to isa-debug-exit (QEMU's convention).
    DebugExit(u32),
    Reset,
    /// The guest powered off through ACPI (S5 in PM1a_CNT).
    PowerOff,
    VcpuFailed {
        vcpu: u32,
        reason: VcpuExitReason,
    },
    Timeout(Duration),
    /// Stopped by its owner (API or signal).
    Requested,
}

impl StopCause {
    /// (status, ok, message)
    pub fn describe(&self) -> (String, bool, String) {
        match self {
            StopCause::GuestExit(0) => ("success".into(), true, String::new()),
            // The bench guest's exception path exits with 0x100 + vector.
            StopCause::GuestExit(s) if (0x100..0x120).contains(s) => (
                "guest_panic".into(),
                false,
                format!(
                    "guest exception, vector {} (exit status {s:#x}); details on its console",
                    s - 0x100
                ),
            ),
            StopCause::GuestExit(s) => (
                "guest_exit".into(),
                false,
                format!("guest exited with status {s}"),
            ),
            StopCause::DebugExit(v) => (
                "debug_exit".into(),
                *v == 0,
                format!(
                    "guest wrote {v} to isa-debug-exit (exit status {})",
                    debug_exit_status(*v)
                ),
            ),
            StopCause::Reset => ("reset".into(), true, "reset requested".into()),
            StopCause::PowerOff => (
                "poweroff".into(),
                true,
                "guest powered off (ACPI S5)".into(),
            ),
            StopCause::VcpuFailed { vcpu, reason } => {
                let status = match reason {
                    VcpuExitReason::TripleFault { .. } => "triple_fault",
                    VcpuExitReason::InternalError { .. } => "internal_error",
                    VcpuExitReason::FailEntry { .. } => "fail_entry",
                    VcpuExitReason::SystemEvent { .. } => "system_event",
                    VcpuExitReason::KvmError { .. } => "kvm_error",
                    _ => "vcpu_error",
                };
                (status.into(), false, format!("vcpu{vcpu}: {reason}"))
            }
            StopCause::Timeout(t) => (
                "timeout".into(),
                false,
                format!("timeout_s {:.1} exceeded", t.as_secs_f64()),
            ),
            StopCause::Requested => ("stopped".into(), false, "stopped by request".into()),
        }
    }

    /// The exit status the guest asked for, if it asked: the exit port's
    /// value, or `(v << 1) | 1` for a write of `v` to isa-debug-exit.
    pub fn guest_exit_status(&self) -> Option<u64> {
        match self {
            StopCause::GuestExit(s) => Some(u64::from(*s)),
            StopCause::DebugExit(v) => Some(debug_exit_status(*v)),
            _ => None,
        }
    }
}

/// Events a VM publishes to subscribers (tests, embedding code).
#[derive(Debug, Clone)]
pub enum VmEvent {
    Marker {
        vcpu: u32,
        marker: Marker,
        t_ms: f64,
    },
    Record {
        vcpu: u32,
        record: ResultRecord,
        t_ms: f64,
    },
    Rejected {
        vcpu: u32,
        error: RecordError,
    },
    Stopping(StopCause),
}

/// The VM-wide state shared by vCPU threads and devices.
pub struct VmShared {
    name: String,
    start: Instant,
    run_start: Instant,
    stopping: AtomicBool,
    cause: Mutex<Option<StopCause>>,
    cond: Condvar,
    results: Mutex<ResultsLog>,
    subscribers: Mutex<Vec<Sender<VmEvent>>>,
}

impl VmShared {
    fn t_ms(&self) -> (f64, f64) {
        let now = Instant::now();
        (
            now.duration_since(self.start).as_secs_f64() * 1e3,
            now.duration_since(self.run_start).as_secs_f64() * 1e3,
        )
    }

    fn publish(&self, ev: VmEvent) {
        let mut subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        subs.retain(|s| s.send(ev.clone()).is_ok());
    }

    /// Request the VM to stop; the first cause wins.
    pub fn stop(&self, cause: StopCause) {
        {
            let mut c = self.cause.lock().unwrap_or_else(|p| p.into_inner());
            if c.is_some() {
                return;
            }
            let (status, ok, msg) = cause.describe();
            if ok {
                log::debug!("[{}] stopping: {status} {msg}", self.name);
            } else {
                log::error!("[{}] VM stopped: {status}: {msg}", self.name);
            }
            *c = Some(cause.clone());
            self.stopping.store(true, Ordering::Release);
        }
        self.cond.notify_all();
        self.publish(VmEvent::Stopping(cause));
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Wait until a stop cause exists or `timeout` passes.
    fn wait(&self, timeout: Option<Duration>) -> Option<StopCause> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut c = self.cause.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(cause) = c.as_ref() {
                return Some(cause.clone());
            }
            match deadline {
                None => c = self.cond.wait(c).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    c = self
                        .cond
                        .wait_timeout(c, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
    }
}

impl VmEventSink for VmShared {
    fn marker(&self, vcpu: u32, marker: Marker) {
        let (t, tr) = self.t_ms();
        if marker == Marker::Panic {
            log::warn!("[{}] vcpu{vcpu}: guest PANIC marker", self.name);
        }
        self.results
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .marker(vcpu, marker, t, tr);
        self.publish(VmEvent::Marker {
            vcpu,
            marker,
            t_ms: t,
        });
    }

    fn record(&self, vcpu: u32, record: Result<ResultRecord, RecordError>) {
        let (t, tr) = self.t_ms();
        match record {
            Ok(r) => {
                self.results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .record(vcpu, r.clone(), t, tr);
                self.publish(VmEvent::Record {
                    vcpu,
                    record: r,
                    t_ms: t,
                });
            }
            Err(e) => {
                let mut res = self.results.lock().unwrap_or_else(|p| p.into_inner());
                if res.rejected < 16 {
                    log::warn!("[{}] vcpu{vcpu}: result record rejected: {e}", self.name);
                }
                res.rejected(vcpu, &e, t);
                drop(res);
                self.publish(VmEvent::Rejected { vcpu, error: e });
            }
        }
    }

    fn stop_request(&self, _vcpu: u32, request: StopRequest) {
        self.stop(match request {
            StopRequest::GuestExit(s) => StopCause::GuestExit(s),
            StopRequest::DebugExit(v) => StopCause::DebugExit(v),
            StopRequest::Reset => StopCause::Reset,
            StopRequest::PowerOff => StopCause::PowerOff,
        });
    }
}

/// A cloneable handle that stops a VM from anywhere (signal handling, UIs).
#[derive(Clone)]
pub struct StopHandle(Arc<VmShared>);

impl StopHandle {
    pub fn name(&self) -> &str {
        &self.0.name
    }
    /// Ask the VM to stop (its result says "stopped by request").
    pub fn stop(&self) {
        self.0.stop(StopCause::Requested);
    }
}

/// vCPU exit dispatch of one VM.
struct ExitHandler {
    shared: Arc<VmShared>,
    bus: PioBus,
    mmio: MmioBus,
    /// Pacer's interrupt controller (scheduled policies).
    irqchip: Option<Arc<IrqChip>>,
    unknown_pio: UnknownAccessLog,
    unknown_mmio: UnknownAccessLog,
}

impl VcpuExitHandler for ExitHandler {
    fn pio_in(&self, vcpu: u32, port: u16, data: &mut [u8]) {
        if !self.bus.read(IoContext { vcpu }, port, data) {
            if let Some(m) =
                self.unknown_pio
                    .note(&self.shared.name, port as u64, false, data.len())
            {
                log::warn!("{m}");
            }
        }
    }

    fn pio_out(&self, vcpu: u32, port: u16, data: &[u8]) {
        if !self.bus.write(IoContext { vcpu }, port, data) {
            if let Some(m) = self
                .unknown_pio
                .note(&self.shared.name, port as u64, true, data.len())
            {
                log::warn!("{m}");
            }
        }
    }

    fn mmio_read(&self, vcpu: u32, addr: u64, data: &mut [u8]) {
        if let Some(chip) = &self.irqchip {
            if chip.lapic_mmio_read(vcpu, addr, data) {
                return;
            }
        }
        if self.mmio.read(IoContext { vcpu }, addr, data) {
            return;
        }
        if let Some(m) = self
            .unknown_mmio
            .note(&self.shared.name, addr, false, data.len())
        {
            log::warn!("{m}");
        }
    }

    fn mmio_write(&self, vcpu: u32, addr: u64, data: &[u8]) {
        if let Some(chip) = &self.irqchip {
            if chip.lapic_mmio_write(vcpu, addr, data) {
                return;
            }
        }
        if self.mmio.write(IoContext { vcpu }, addr, data) {
            return;
        }
        if let Some(m) = self
            .unknown_mmio
            .note(&self.shared.name, addr, true, data.len())
        {
            log::warn!("{m}");
        }
    }

    fn msr_read(&self, vcpu: u32, msr: u32) -> Result<u64, MsrFault> {
        match &self.irqchip {
            Some(chip) if IrqChip::handles_msr(msr) => chip.msr_read(vcpu, msr).map_err(|e| {
                log::debug!("[{}] vcpu{vcpu}: rdmsr {msr:#x}: {e}", self.shared.name);
                MsrFault
            }),
            _ => Err(MsrFault),
        }
    }

    fn msr_write(&self, vcpu: u32, msr: u32, value: u64) -> Result<(), MsrFault> {
        match &self.irqchip {
            Some(chip) if IrqChip::handles_msr(msr) => {
                chip.msr_write(vcpu, msr, value).map_err(|e| {
                    log::debug!("[{}] vcpu{vcpu}: wrmsr {msr:#x}: {e}", self.shared.name);
                    MsrFault
                })
            }
            _ => Err(MsrFault),
        }
    }

    fn guest_cr8(&self, vcpu: u32, cr8: u64) {
        if let Some(chip) = &self.irqchip {
            chip.set_cr8(vcpu, cr8);
        }
    }

    fn stopping(&self) -> bool {
        self.shared.is_stopping()
    }

    fn vcpu_failed(&self, vcpu: u32, reason: &VcpuExitReason) {
        self.shared.stop(StopCause::VcpuFailed {
            vcpu,
            reason: reason.clone(),
        });
    }
}

/// One VM.
pub struct Vm {
    config: VmConfig,
    // Field order matters for drop: vCPU threads first, then the VM fd, then
    // the memory the memslots point into.
    vcpus: Option<RunningVcpus>,
    pending_vcpus: Vec<(u32, kvm_ioctls::VcpuFd)>,
    serial: Arc<Mutex<SerialConsole>>,
    shared: Arc<VmShared>,
    // Devices may hold the VM fd (interrupt lines); both go before memory.
    handler: Arc<ExitHandler>,
    /// Pacer's interrupt controller and its host side (scheduled policies).
    irqchip: Option<(Arc<ChipHost>, Arc<IrqChip>)>,
    _vm_fd: Arc<VmFd>,
    mem: Arc<GuestMemoryMmap>,
    tsc_khz: u32,
    cmdline: String,
    console_log: Option<PathBuf>,
    /// A Linux guest's `<vm>.user.log`, created with the console log (the
    /// controller thread that fills it at the end may not create files
    /// once confined); empty if the guest ran no user command.
    user_log: Option<(PathBuf, std::fs::File)>,
    options: VmOptions,
    started: bool,
}

fn open_log(dir: &Path, file: String) -> Result<(PathBuf, std::fs::File), VmError> {
    let path = dir.join(file);
    let f = std::fs::File::create(&path).map_err(|source| VmError::File {
        path: path.clone(),
        source,
    })?;
    Ok((path, f))
}

impl Vm {
    /// Build the VM (nothing runs until [`Vm::start`]).
    pub fn create(kvm: &Kvm, config: &VmConfig, options: VmOptions) -> Result<Vm, VmError> {
        let start = Instant::now();
        let vm_fd = Arc::new(kvm.create_vm().map_err(VmError::CreateVm)?);
        if let Err(e) = vm_fd.set_tss_address(KVM_TSS_ADDRESS) {
            log::debug!("[{}] KVM_SET_TSS_ADDR: {e}", config.name);
        }
        if options.in_kernel_irqchip() {
            vm_fd.create_irq_chip().map_err(VmError::Irqchip)?;
        }

        // Memory.
        let mem = Arc::new(memory::create_guest_memory(config.memory_mib)?);
        for (slot, region) in mem.iter().enumerate() {
            let r = kvm_userspace_memory_region {
                slot: slot as u32,
                flags: 0,
                guest_phys_addr: region.start_addr().raw_value(),
                memory_size: region.len(),
                userspace_addr: region.as_ptr() as u64,
            };
            // SAFETY: the region is a live mmap owned by `mem`, which the Vm
            // keeps alive (and drops after the VM fd) for as long as the
            // memslot exists; slots do not overlap.
            unsafe { vm_fd.set_user_memory_region(r) }.map_err(VmError::Memslot)?;
        }

        // vCPUs.
        let mut supported_cpuid = cpuid::supported(kvm)?;
        if !options.in_kernel_irqchip() || kvm.check_extension(kvm_ioctls::Cap::TscDeadlineTimer) {
            // Pacer's LAPIC and KVM's in-kernel one (with the capability)
            // have the TSC-deadline timer mode; older kernels leave the
            // CPUID bit to the VMM.
            cpuid::set_tsc_deadline(&mut supported_cpuid);
        }
        let mut vcpus = Vec::with_capacity(config.vcpus as usize);
        for index in 0..config.vcpus {
            let fd = vm_fd
                .create_vcpu(index as u64)
                .map_err(|source| VmError::CreateVcpu { index, source })?;
            vcpus.push((index, fd));
        }
        let tsc_khz = vcpus[0].1.get_tsc_khz().map_err(VmError::TscKhz)?;
        cpuid::set_tsc_khz(&mut supported_cpuid, tsc_khz)?;
        if !options.in_kernel_irqchip() {
            cpuid::hide_in_kernel_apic_features(&mut supported_cpuid);
        }
        // Pacer's interrupt controller for the scheduled policies.
        let irqchip = match &options.scheduling {
            VcpuScheduling::Host { .. } => None,
            VcpuScheduling::Scheduled(engine) => {
                user_space_apic_msrs(&vm_fd)?;
                let tsc = tsc_clock(&vcpus[0].1, tsc_khz)?;
                let host = Arc::new(ChipHost::new(
                    engine,
                    tsc,
                    GuestCpu {
                        phys_addr_bits: cpuid::phys_addr_bits(&supported_cpuid),
                        // Every vCPU's CPUID has x2APIC unless the config
                        // switches it off (`cpuid::for_vcpu`).
                        x2apic: config.cpuid.x2apic != Some(false),
                    },
                ));
                let chip = IrqChip::new(config.vcpus, host.clone());
                Some((host, chip))
            }
        };
        let t_vcpus = start.elapsed();

        // Kernel, command line, boot structures, per-vCPU state. Under both
        // interrupt controllers only the boot vCPU starts from the entry
        // state: the others wait for INIT/SIPI from the guest, as on
        // hardware (KVM's in-kernel LAPIC holds them; Pacer's engine keeps
        // them in WaitForSipi).
        let booted = boot::load(&mem, config, tsc_khz)?;
        let cmdline = booted.cmdline;
        let supported_msrs = msr::supported_msrs(kvm)?;
        let vcpu_boot = VcpuBoot {
            supported_cpuid: &supported_cpuid,
            supported_msrs: &supported_msrs,
            vcpus: config.vcpus,
            cpuid: &config.cpuid,
            entry: booted.entry,
            vm_name: &config.name,
        };
        for (index, fd) in &vcpus {
            boot::vcpu::configure_vcpu(fd, *index, &vcpu_boot).map_err(|source| {
                VmError::ConfigureVcpu {
                    index: *index,
                    source,
                }
            })?;
        }
        let t_boot = start.elapsed();
        // Files and devices.
        let (results_path, console) = match &options.log_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|source| VmError::File {
                    path: dir.clone(),
                    source,
                })?;
                let console = if config.console.to_log() {
                    Some(open_log(dir, format!("{}.console.log", config.name))?)
                } else {
                    None
                };
                (
                    Some(dir.join(format!("{}.results.jsonl", config.name))),
                    console,
                )
            }
            None => (None, None),
        };
        let results = ResultsLog::create(&config.name, tsc_khz, results_path.as_deref())?;
        let shared = Arc::new(VmShared {
            name: config.name.clone(),
            start,
            run_start: options.run_start,
            stopping: AtomicBool::new(false),
            cause: Mutex::new(None),
            cond: Condvar::new(),
            results: Mutex::new(results),
            subscribers: Mutex::new(Vec::new()),
        });
        let sink: Arc<dyn VmEventSink> = shared.clone();
        let dev_err = |e: std::io::Error| VmError::Device(e.to_string());
        let serial_irq: Arc<dyn InterruptLine> = match &irqchip {
            Some((_, chip)) => chip.irq_line(COM1_IRQ),
            None => {
                let line = EventFdLine::new().map_err(dev_err)?;
                vm_fd
                    .register_irqfd(&line.0, COM1_IRQ)
                    .map_err(|e| VmError::Device(format!("serial irqfd: {e}")))?;
                Arc::new(line)
            }
        };
        let console_log = console.as_ref().map(|(p, _)| p.clone());
        let user_log = match (&options.log_dir, &console_log, config.guest) {
            (Some(dir), Some(_), GuestKind::Linux) => {
                Some(open_log(dir, format!("{}.user.log", config.name))?)
            }
            _ => None,
        };
        let serial = Arc::new(Mutex::new(SerialConsole::new(
            serial_irq,
            ConsoleWriter::new(
                &config.name,
                console.map(|(_, f)| f),
                config.console.to_stdout(),
            ),
        )));
        let mut bus = PioBus::new();
        let bus_err = |e: devices::bus::BusError| VmError::Device(e.to_string());
        bus.insert(COM1_BASE, COM1_LEN, serial.clone())
            .map_err(bus_err)?;
        bus.insert(
            I8042_BASE,
            I8042_LEN,
            Arc::new(Mutex::new(I8042::new(sink.clone()))),
        )
        .map_err(bus_err)?;
        bus.insert(
            RESULT_PORT_BASE,
            RESULT_PORT_LEN,
            Arc::new(Mutex::new(ResultPort::new(
                Arc::new(DeviceMemory(mem.clone())),
                sink.clone(),
            ))),
        )
        .map_err(bus_err)?;
        bus.insert(
            EXIT_PORT,
            EXIT_PORT_LEN,
            Arc::new(Mutex::new(ExitPort::new(sink.clone()))),
        )
        .map_err(bus_err)?;
        bus.insert(YIELD_PORT, YIELD_PORT_LEN, Arc::new(Mutex::new(YieldPort)))
            .map_err(bus_err)?;
        let mut mmio = MmioBus::new();
        if let Some((_, chip)) = &irqchip {
            mmio.insert(IOAPIC_DEFAULT_BASE, IOAPIC_MMIO_LEN, chip.ioapic_mmio())
                .map_err(|e| VmError::Device(e.to_string()))?;
        }
        if config.guest == GuestKind::Multiboot {
            // pc-testdev's lines are I/O APIC pins: KVM's in-kernel one
            // under `host`, Pacer's under the scheduled policies.
            let lines: Vec<Arc<dyn InterruptLine>> = (0..u32::from(PC_TESTDEV_IRQ_LINES))
                .map(|gsi| -> Arc<dyn InterruptLine> {
                    match &irqchip {
                        Some((_, chip)) => chip.irq_line(gsi),
                        None => Arc::new(KvmIrqLine::new(vm_fd.clone(), gsi)),
                    }
                })
                .collect();
            insert_qemu_test_devices(
                &mut bus,
                sink.clone(),
                lines,
                memory::ram_size(&mem),
                config.vcpus as u16,
            )
            .map_err(bus_err)?;
        }
        if config.guest == GuestKind::Linux {
            // What the FADT names: the PM timer and the power-off registers.
            bus.insert(
                PM_TIMER_PORT,
                PM_TIMER_LEN,
                Arc::new(Mutex::new(PmTimer::new())),
            )
            .map_err(bus_err)?;
            bus.insert(
                ACPI_PM_BASE,
                ACPI_PM_LEN,
                Arc::new(Mutex::new(AcpiPm::new(sink.clone()))),
            )
            .map_err(bus_err)?;
        }
        let handler = Arc::new(ExitHandler {
            shared: shared.clone(),
            bus,
            mmio,
            irqchip: irqchip.as_ref().map(|(_, chip)| chip.clone()),
            unknown_pio: UnknownAccessLog::new("port", 64),
            unknown_mmio: UnknownAccessLog::new("MMIO", 64),
        });

        log::debug!(
            "[{}] created in {:.2} ms (KVM VM, memory and vCPUs {:.2} ms, kernel and boot structures {:.2} ms)",
            config.name,
            start.elapsed().as_secs_f64() * 1e3,
            t_vcpus.as_secs_f64() * 1e3,
            (t_boot - t_vcpus).as_secs_f64() * 1e3
        );
        Ok(Vm {
            config: config.clone(),
            vcpus: None,
            pending_vcpus: vcpus,
            serial,
            shared,
            handler,
            _vm_fd: vm_fd,
            mem,
            irqchip,
            tsc_khz,
            cmdline,
            console_log,
            user_log,
            options,
            started: false,
        })
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn tsc_khz(&self) -> u32 {
        self.tsc_khz
    }

    /// The full kernel command line given to the guest.
    pub fn cmdline(&self) -> &str {
        &self.cmdline
    }

    /// Guest RAM size in bytes.
    pub fn memory_bytes(&self) -> u64 {
        self.mem.iter().map(|r| r.len()).sum()
    }

    /// Receive this VM's events from now on.
    pub fn subscribe(&self) -> Receiver<VmEvent> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.shared
            .subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(tx);
        rx
    }

    /// Spawn the vCPU threads and let them run.
    pub fn start(&mut self) -> Result<(), VmError> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let runners: Vec<VcpuRunner> = self
            .pending_vcpus
            .drain(..)
            .map(|(index, fd)| VcpuRunner::new(index, fd, self.handler.clone()))
            .collect();
        match self.options.scheduling.clone() {
            VcpuScheduling::Host { pin } => {
                let affinity = pin.then(|| self.config.cpus.clone());
                let mut handles = Vec::with_capacity(runners.len());
                for runner in runners {
                    handles.push(VcpuHandle::spawn(
                        &self.config.name,
                        runner,
                        affinity.clone(),
                    )?);
                }
                let handles = self.vcpus.insert(RunningVcpus::Host(handles));
                if let RunningVcpus::Host(handles) = handles {
                    for h in handles.iter_mut() {
                        h.start()?;
                    }
                }
            }
            VcpuScheduling::Scheduled(engine) => {
                let spec = VmSchedSpec {
                    name: self.config.name.clone(),
                    class: self.config.class,
                    priority: self.config.priority,
                    cpus: self.config.cpus.clone(),
                };
                let handler: Arc<dyn VcpuExitHandler> = self.handler.clone();
                let irq: Arc<dyn InterruptSource> = match &self.irqchip {
                    Some((_, chip)) => chip.clone(),
                    None => Arc::new(NoInterrupts),
                };
                let slot = engine.add_vm(&spec, runners, irq, handler)?;
                if let Some((host, _)) = &self.irqchip {
                    host.attach(slot);
                }
                engine.start_vm(slot);
                self.vcpus = Some(RunningVcpus::Scheduled(engine, slot));
            }
        }
        log::debug!(
            "[{}] vCPUs running {:.2} ms after VM start",
            self.config.name,
            self.shared.start.elapsed().as_secs_f64() * 1e3
        );
        Ok(())
    }

    /// Pause every running vCPU (returns once all are out of KVM_RUN).
    pub fn pause(&mut self, timeout: Duration) -> Result<(), VmError> {
        match &mut self.vcpus {
            Some(RunningVcpus::Host(handles)) => {
                for h in handles.iter_mut() {
                    if h.state() == crate::vcpu::VcpuState::Running {
                        h.pause(timeout)?;
                    }
                }
            }
            Some(RunningVcpus::Scheduled(engine, slot)) => engine.pause_vm(*slot, timeout)?,
            None => {}
        }
        Ok(())
    }

    /// Resume every paused vCPU.
    pub fn resume(&mut self, timeout: Duration) -> Result<(), VmError> {
        match &mut self.vcpus {
            Some(RunningVcpus::Host(handles)) => {
                for h in handles.iter_mut() {
                    if h.state() == crate::vcpu::VcpuState::Paused {
                        h.resume(timeout)?;
                    }
                }
            }
            Some(RunningVcpus::Scheduled(engine, slot)) => engine.resume_vm(*slot),
            None => {}
        }
        Ok(())
    }

    /// Ask the VM to stop (from outside).
    pub fn request_stop(&self) {
        self.shared.stop(StopCause::Requested);
    }

    /// A handle for stopping this VM from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(self.shared.clone())
    }

    /// Wait for the VM to stop (guest request, fatal exit, or the
    /// configured timeout), stop all vCPUs and return the result.
    pub fn wait(mut self) -> VmResult {
        let cause = match self.shared.wait(self.config.timeout) {
            Some(c) => c,
            None => {
                let t = self.config.timeout.unwrap_or_default();
                self.shared.stop(StopCause::Timeout(t));
                self.shared.wait(None).unwrap_or(StopCause::Timeout(t))
            }
        };
        self.finish(cause)
    }

    /// Stop every vCPU; their outcomes and scheduling statistics.
    fn stop_vcpus(&mut self) -> (Vec<VcpuOutcome>, Vec<VcpuSchedStats>) {
        match self.vcpus.take() {
            Some(RunningVcpus::Host(mut handles)) => {
                for h in handles.iter_mut() {
                    h.request_exit();
                }
                let outcomes: Vec<VcpuOutcome> = handles.into_iter().map(|h| h.join()).collect();
                // The kernel's counters, read by each thread as it ended.
                let sched = outcomes.iter().map(|o| o.thread_sched.clone()).collect();
                (outcomes, sched)
            }
            Some(RunningVcpus::Scheduled(engine, slot)) => engine
                .finish_vm(slot, VCPU_STOP_TIMEOUT)
                .into_iter()
                .map(|f| (f.outcome, f.sched))
                .unzip(),
            None => (Vec::new(), Vec::new()),
        }
    }

    fn finish(&mut self, cause: StopCause) -> VmResult {
        let (outcomes, vcpu_sched) = self.stop_vcpus();
        let mut serial = self.serial.lock().unwrap_or_else(|p| p.into_inner());
        serial.flush();
        let last_console_line = serial.last_line();
        drop(serial);
        let (status, ok, mut message) = cause.describe();
        let wall_ms = self.shared.start.elapsed().as_secs_f64() * 1e3;
        let mut res = self
            .shared
            .results
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if !ok && cause != StopCause::Requested {
            let errors = res.guest_errors();
            let why = crate::guest_report::guest_reason(&errors, last_console_line.as_deref());
            if let Some(why) = why {
                log::error!("[{}] {why}", self.config.name);
                message = format!("{message}; {why}");
            }
        }
        res.stopped(&status, ok, &message, wall_ms);
        let work = res.work();
        let total = work
            .iter()
            .filter_map(|w| w.units_per_s)
            .reduce(|a, b| a + b);
        VmResult {
            name: self.config.name.clone(),
            status,
            ok,
            message,
            exit_status: cause.guest_exit_status(),
            wall_ms,
            tsc_khz: self.tsc_khz,
            cmdline: self.cmdline.clone(),
            milestones: res.milestones(),
            work,
            total_units_per_s: total,
            vcpu_metrics: res.vcpu_metrics(),
            guest_errors: res.guest_errors(),
            markers: res.markers.clone(),
            records: res.records.clone(),
            rejected_records: res.rejected,
            results_file: res.path().map(Path::to_path_buf),
            console_log: self.console_log.clone(),
            user_log: self.write_user_log(),
            vcpu_stats: outcomes.iter().map(|o| o.stats).collect(),
            vcpu_sched,
        }
    }

    /// A Linux guest's user command output, cut from its console log with
    /// the UnixBench-style suite's parser, into `<log_dir>/<vm>.user.log`
    /// (None: not a Linux guest, no console log, no user command).
    fn write_user_log(&self) -> Option<PathBuf> {
        let (console, (path, file)) = (self.console_log.as_ref()?, self.user_log.as_ref()?);
        match save_user_output(console, file) {
            Ok(true) => Some(path.clone()),
            Ok(false) => None,
            Err(e) => {
                log::warn!("[{}] user command output: {e}", self.config.name);
                None
            }
        }
    }

    /// Create, run to completion, and report one VM; errors become a failed
    /// result naming the VM.
    pub fn run(kvm: &Kvm, config: &VmConfig, options: VmOptions) -> VmResult {
        Self::run_with(kvm, config, options, |_| {})
    }

    /// [`Vm::run`], handing a [`StopHandle`] to `on_created` before the
    /// vCPUs start.
    pub fn run_with(
        kvm: &Kvm,
        config: &VmConfig,
        options: VmOptions,
        on_created: impl FnOnce(StopHandle),
    ) -> VmResult {
        let t0 = Instant::now();
        let failed = |msg: String| {
            log::error!("[{}] VM failed: {msg}", config.name);
            let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
            VmResult::error(&config.name, msg, wall_ms, &config.cmdline)
        };
        let mut vm = match Vm::create(kvm, config, options) {
            Ok(vm) => vm,
            Err(e) => return failed(e.to_string()),
        };
        on_created(vm.stop_handle());
        if let Err(e) = vm.start() {
            vm.shared.stop(StopCause::Requested);
            let mut r = vm.wait();
            r.ok = false;
            r.status = "error".into();
            r.message = e.to_string();
            return r;
        }
        crate::seccomp::install_or_warn(crate::seccomp::ThreadKind::Controller);
        vm.wait()
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if self.vcpus.is_some() {
            self.shared.stop(StopCause::Requested);
            self.stop_vcpus();
        }
    }
}

/// Cut the user command's output (between `UB user begin` and `UB user
/// end`, or to the end if the guest stopped mid-command) out of a console
/// log into `out`. Ok(false): the log has no user command.
fn save_user_output(console: &Path, mut out: &std::fs::File) -> std::io::Result<bool> {
    use std::io::Write;
    let text = std::fs::read(console)?;
    match crate::unixbench::parse_log(&String::from_utf8_lossy(&text)).user_output {
        Some(user) => out.write_all(user.as_bytes()).map(|()| true),
        None => Ok(false),
    }
}

/// Send the interrupt controller's MSRs (IA32_APIC_BASE, IA32_TSC_DEADLINE,
/// the x2APIC range) to user space: without an in-kernel local APIC KVM
/// would handle or refuse them itself.
fn user_space_apic_msrs(vm_fd: &VmFd) -> Result<(), VmError> {
    use kvm_bindings::{
        kvm_enable_cap, kvm_msr_filter, kvm_msr_filter_range, KVM_CAP_X86_USER_SPACE_MSR,
        KVM_MSR_EXIT_REASON_FILTER, KVM_MSR_EXIT_REASON_INVAL, KVM_MSR_EXIT_REASON_UNKNOWN,
        KVM_MSR_FILTER_DEFAULT_ALLOW, KVM_MSR_FILTER_READ, KVM_MSR_FILTER_WRITE,
    };
    let mut cap = kvm_enable_cap {
        cap: KVM_CAP_X86_USER_SPACE_MSR,
        ..Default::default()
    };
    cap.args[0] = u64::from(
        KVM_MSR_EXIT_REASON_INVAL | KVM_MSR_EXIT_REASON_UNKNOWN | KVM_MSR_EXIT_REASON_FILTER,
    );
    vm_fd
        .enable_cap(&cap)
        .map_err(|e| VmError::Device(format!("KVM_CAP_X86_USER_SPACE_MSR: {e}")))?;
    // A clear bit denies the access in KVM, which then exits to user space.
    let deny_x2apic = [0u8; 0x100 / 8];
    let deny_one = [0u8; 1];
    let range = |base: u32, nmsrs: u32, bitmap: &[u8]| kvm_msr_filter_range {
        flags: KVM_MSR_FILTER_READ | KVM_MSR_FILTER_WRITE,
        nmsrs,
        base,
        bitmap: bitmap.as_ptr() as *mut u8,
    };
    let mut filter = kvm_msr_filter {
        flags: KVM_MSR_FILTER_DEFAULT_ALLOW,
        ..Default::default()
    };
    filter.ranges[0] = range(0x800, 0x100, &deny_x2apic);
    filter.ranges[1] = range(0x1b, 1, &deny_one);
    filter.ranges[2] = range(0x6e0, 1, &deny_one);
    // SAFETY: every range's bitmap points to a live local array of at
    // least nmsrs bits, valid for the duration of the ioctl (KVM copies it).
    unsafe { vm_fd.set_msr_filter_unchecked(&filter) }
        .map_err(|e| VmError::Device(format!("KVM_X86_SET_MSR_FILTER: {e}")))
}

/// The guest TSC against the engine clock: the clock read first, then the
/// guest's IA32_TSC, so the mapping never lags the guest's TSC (a deadline
/// already passed fires at once).
fn tsc_clock(vcpu: &kvm_ioctls::VcpuFd, tsc_khz: u32) -> Result<TscClock, VmError> {
    use kvm_bindings::{kvm_msr_entry, Msrs};
    let mut msrs = Msrs::from_entries(&[kvm_msr_entry {
        index: 0x10,
        ..Default::default()
    }])
    .map_err(|e| VmError::Device(format!("IA32_TSC: {e:?}")))?;
    let base_ns = crate::engine::clock::now_ns();
    vcpu.get_msrs(&mut msrs)
        .map_err(|e| VmError::Device(format!("reading IA32_TSC: {e}")))?;
    Ok(TscClock {
        base_ns,
        base_tsc: msrs.as_slice()[0].data,
        khz: u64::from(tsc_khz),
    })
}

/// Open /dev/kvm.
pub fn open_kvm() -> Result<Kvm, VmError> {
    let kvm = Kvm::new().map_err(VmError::Kvm)?;
    if !kvm.check_extension(kvm_ioctls::Cap::ImmediateExit) {
        // Kicks still work through the signal alone, but a kick that lands
        // just before KVM_RUN is then only seen at the next exit.
        log::warn!("KVM_CAP_IMMEDIATE_EXIT missing: vCPU kicks may be delayed");
    }
    Ok(kvm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_output_cut_from_the_console_log() {
        let dir = std::env::temp_dir().join(format!("pacer-userlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let console = dir.join("deb.console.log");
        let out = dir.join("deb.user.log");
        std::fs::write(
            &console,
            "[    1.0] Linux version 6.1\r\nUB init kernel=6.1 cpus=2 mem_kib=1 suite=x\r\n\
             UB user begin\r\nhello from /user\r\nline 2\r\nUB user end status=0\r\nUB done end=reboot\r\n",
        )
        .unwrap();
        let file = || std::fs::File::create(&out).unwrap();
        assert!(save_user_output(&console, &file()).unwrap());
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "hello from /user\nline 2\n"
        );
        std::fs::write(&console, "UB done end=reboot\n").unwrap();
        assert!(!save_user_output(&console, &file()).unwrap());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "");
        assert!(save_user_output(&dir.join("missing"), &file()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
