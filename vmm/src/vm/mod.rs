//! One VM: a KVM VM with its guest RAM, vCPUs and devices, and its
//! lifecycle: create -> start -> stop on guest request / fatal vCPU exit /
//! timeout -> result. A failing VM stops only itself.
//!
//! [`Vm::create`] orchestrates, in this order: the KVM VM (and KVM's
//! in-kernel irqchip under `policy = "host"`), guest RAM (`guest_ram.rs`),
//! the vCPUs and the VM-wide CPUID (`crate::boot::vm_cpuid`), Pacer's
//! interrupt controller under the scheduled policies (`irqchip.rs`), the
//! kernel and each vCPU's entry state (`crate::boot`), the log files
//! (`logs.rs`), the state everything shares (`shared.rs`), the devices on
//! their buses (`devices.rs`) and the exit handler over them (`exits.rs`).
//! Starting, pausing and stopping the vCPUs under either scheduling is
//! `vcpus.rs`; waiting for the stop and building the result is here.

mod devices;
mod exits;
mod guest_ram;
mod irqchip;
mod logs;
mod shared;
mod spec;
pub mod steal_time;
mod vcpus;

pub use shared::{Answer, RequestError, StopCause, StopHandle, VmEvent, VmRequest, VmShared};
pub use spec::{ConsoleTo, VmSpec};
pub use vcpus::VcpuScheduling;

use crate::boot;
use crate::cpuid;
use crate::memory;
use crate::msr;
use crate::results::{ResultsLog, VmResult};
use vcpu_engine::vcpu::VcpuError;
use vcpu_engine::EngineError;
// `::devices` is the devices crate; `devices` here is `devices.rs`.
use ::devices::irqchip::{GuestCpu, IrqChip};
use ::devices::serial::SerialConsole;
use ::devices::VmEventSink;
use exits::ExitHandler;
use kvm_ioctls::{Kvm, VmFd};
use logs::LogFiles;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use vcpus::RunningVcpus;
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// How long a pause or resume asked from outside may take.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// TSS address for Intel VMX (3 pages just below the 4 GiB BIOS area).
const KVM_TSS_ADDRESS: usize = 0xfffb_d000;

/// Errors of this module.
/// Why a VM's devices could not be set up (`VmError::Device`).
#[derive(Debug, thiserror::Error)]
pub enum DeviceSetupError {
    #[error("{0}")]
    EventFd(std::io::Error),
    #[error("serial irqfd: {0}")]
    SerialIrqfd(kvm_ioctls::Error),
    #[error(transparent)]
    PortBus(#[from] ::devices::bus::BusError),
    #[error(transparent)]
    MmioBus(#[from] ::devices::mmio::MmioBusError),
    /// Routing MSRs to user space (`vcpu_engine::route_msrs`).
    #[error("{0}")]
    MsrRouting(std::io::Error),
    /// The interrupt controller's TSC clock.
    #[error("{0}")]
    TscClock(std::io::Error),
}

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
    Device(#[from] DeviceSetupError),
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

/// How the VM is run.
#[derive(Debug, Clone)]
pub struct VmOptions {
    /// Directory for `<vm>.console.log` and `<vm>.results.jsonl` (None: no
    /// files, results kept in memory).
    pub log_dir: Option<PathBuf>,
    pub scheduling: VcpuScheduling,
    /// Reference instant of the whole run (for `t_run_ms`).
    pub run_start: Instant,
    /// What the guest may write into its logs.
    pub limits: crate::results::LogLimits,
}

impl Default for VmOptions {
    fn default() -> Self {
        VmOptions {
            log_dir: None,
            scheduling: VcpuScheduling::Host { pin: true },
            run_start: Instant::now(),
            limits: Default::default(),
        }
    }
}

impl VmOptions {
    /// Whether KVM's in-kernel irqchip serves this VM.
    fn in_kernel_irqchip(&self) -> bool {
        match &self.scheduling {
            VcpuScheduling::Host { .. } => true,
            VcpuScheduling::Scheduled(e) => e.dispatch_kind().in_kernel_lapic(),
        }
    }

    /// Whether the guest's steal time is Pacer's (`steal_time.rs`): under
    /// Pacer's engine the wait for a host CPU is the engine's, which KVM's
    /// accounting does not see while a vCPU's thread is parked. Not under
    /// the ranked dispatch: there every runnable vCPU's thread is runnable
    /// in the host kernel, whose wait KVM's own steal time counts exactly.
    fn pacer_steal_time(&self) -> bool {
        matches!(&self.scheduling, VcpuScheduling::Scheduled(e) if !e.dispatch_kind().ranked())
    }
}

/// One VM.
pub struct Vm {
    spec: VmSpec,
    // Field order matters for drop: vCPU threads first, then the VM fd, then
    // the memory the memslots point into.
    vcpus: Option<RunningVcpus>,
    pending_vcpus: Vec<(u32, kvm_ioctls::VcpuFd)>,
    serial: Arc<Mutex<SerialConsole>>,
    shared: Arc<VmShared>,
    // Devices may hold the VM fd (interrupt lines); both go before memory.
    handler: Arc<ExitHandler>,
    /// Pacer's interrupt controller and its host side (scheduled policies).
    irqchip: Option<Arc<IrqChip>>,
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
    /// What the vCPUs were doing when the VM ran out of time.
    at_timeout: Option<String>,
}

impl Vm {
    /// Build the VM (nothing runs until [`Vm::start`]).
    pub fn create(kvm: &Kvm, spec: &VmSpec, options: VmOptions) -> Result<Vm, VmError> {
        let start = Instant::now();
        let vm_fd = Arc::new(kvm.create_vm().map_err(VmError::CreateVm)?);
        if let Err(e) = vm_fd.set_tss_address(KVM_TSS_ADDRESS) {
            log::debug!("[{}] KVM_SET_TSS_ADDR: {e}", spec.name);
        }
        if options.in_kernel_irqchip() {
            vm_fd.create_irq_chip().map_err(VmError::Irqchip)?;
        }
        let mem = guest_ram::create_guest_ram(&vm_fd, spec.memory_mib)?;

        // vCPUs.
        let mut vcpus = Vec::with_capacity(spec.vcpus as usize);
        for index in 0..spec.vcpus {
            let fd = vm_fd
                .create_vcpu(index as u64)
                .map_err(|source| VmError::CreateVcpu { index, source })?;
            vcpus.push((index, fd));
        }
        let tsc_khz = vcpus[0].1.get_tsc_khz().map_err(VmError::TscKhz)?;
        let vm_cpuid = boot::vm_cpuid(
            kvm,
            tsc_khz,
            options.in_kernel_irqchip(),
            options.pacer_steal_time(),
        )?;
        // Pacer's interrupt controller for the scheduled policies.
        let irqchip = match &options.scheduling {
            _ if options.in_kernel_irqchip() => None,
            VcpuScheduling::Host { .. } => None,
            VcpuScheduling::Scheduled(engine) => Some(irqchip::create_irqchip(
                engine,
                &mem,
                &vm_fd,
                &vcpus[0].1,
                GuestCpu {
                    phys_addr_bits: cpuid::phys_addr_bits(&vm_cpuid),
                    // Every vCPU's CPUID has x2APIC unless the spec
                    // switches it off (`cpuid::for_vcpu`).
                    x2apic: spec.cpuid.x2apic != Some(false),
                },
                spec.vcpus,
            )?),
        };
        let t_vcpus = start.elapsed();

        // Kernel, command line, boot structures, per-vCPU state. Under both
        // interrupt controllers only the boot vCPU starts from the entry
        // state: the others wait for INIT/SIPI from the guest, as on
        // hardware (KVM's in-kernel LAPIC holds them; Pacer's engine keeps
        // them in WaitForSipi).
        let booted = boot::load(&mem, &spec.boot, spec.vcpus, tsc_khz)?;
        let cmdline = booted.cmdline;
        let supported_msrs = msr::supported_msrs(kvm)?;
        let vcpu_boot = boot::VcpuBoot {
            supported_cpuid: &vm_cpuid,
            supported_msrs: &supported_msrs,
            vcpus: spec.vcpus,
            cpuid: &spec.cpuid,
            entry: booted.entry,
            vm_name: &spec.name,
        };
        for (index, fd) in &vcpus {
            boot::configure_vcpu(fd, *index, &vcpu_boot).map_err(|source| {
                VmError::ConfigureVcpu {
                    index: *index,
                    source,
                }
            })?;
        }
        let t_boot = start.elapsed();

        // Files and devices.
        let logs = LogFiles::open(options.log_dir.as_deref(), spec)?;
        let results = ResultsLog::create(&spec.name, tsc_khz, logs.results.as_deref())?
            .with_limits(options.limits);
        let shared = Arc::new(VmShared::new(&spec.name, start, options.run_start, results));
        let sink: Arc<dyn VmEventSink> = shared.clone();
        let chip = irqchip.clone();
        let console_log = logs.console.as_ref().map(|(p, _)| p.clone());
        let devices = devices::create_devices(
            spec,
            &vm_fd,
            &mem,
            chip.as_ref(),
            sink,
            logs.console.map(|(_, f)| f),
            options.limits.log_bytes,
        )?;
        // Under Pacer's engine the guest's steal time is Pacer's (the MSR
        // goes to user space with the interrupt controller's, or alone
        // under KVM's local APIC).
        if options.pacer_steal_time() && options.in_kernel_irqchip() {
            vcpu_engine::route_msrs(&vm_fd, &[steal_time::MSR_KVM_STEAL_TIME])
                .map_err(DeviceSetupError::MsrRouting)?;
        }
        let steal = options
            .pacer_steal_time()
            .then(|| Arc::new(steal_time::StealTime::new(mem.clone(), spec.vcpus)));
        let handler = Arc::new(ExitHandler::new(
            shared.clone(),
            devices.bus,
            devices.mmio,
            chip,
            steal,
            mem.clone(),
        ));

        log::debug!(
            "[{}] created in {:.2} ms (KVM VM, memory and vCPUs {:.2} ms, kernel and boot structures {:.2} ms)",
            spec.name,
            start.elapsed().as_secs_f64() * 1e3,
            t_vcpus.as_secs_f64() * 1e3,
            (t_boot - t_vcpus).as_secs_f64() * 1e3
        );
        Ok(Vm {
            spec: spec.clone(),
            vcpus: None,
            pending_vcpus: vcpus,
            serial: devices.serial,
            shared,
            handler,
            _vm_fd: vm_fd,
            mem,
            irqchip,
            tsc_khz,
            cmdline,
            console_log,
            user_log: logs.user_log,
            options,
            started: false,
            at_timeout: None,
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.name
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
        let deadline = self.spec.timeout.map(|t| Instant::now() + t);
        let cause = loop {
            match self.shared.wait(deadline) {
                shared::Woken::Stop(c) => break c,
                shared::Woken::Request(req, answer) => {
                    let _ = answer.send(self.carry_out(req));
                }
                shared::Woken::Timeout => {
                    let t = self.spec.timeout.unwrap_or_default();
                    self.at_timeout = self.vcpus_now();
                    self.shared.stop(StopCause::Timeout(t));
                }
            }
        };
        self.finish(cause)
    }

    /// A pause or resume asked through a [`StopHandle`] (the control API).
    fn carry_out(&mut self, req: VmRequest) -> shared::Answer {
        let r = match req {
            VmRequest::Pause => self.pause(REQUEST_TIMEOUT),
            VmRequest::Resume => self.resume(REQUEST_TIMEOUT),
        };
        match r {
            Ok(()) => {
                self.shared.set_paused(req == VmRequest::Pause);
                Ok(())
            }
            Err(e) => Err(shared::RequestError::Failed(Box::new(e))),
        }
    }

    fn finish(&mut self, cause: StopCause) -> VmResult {
        let (outcomes, vcpu_sched) = self.stop_vcpus();
        let mut serial = self.serial.lock().unwrap_or_else(|p| p.into_inner());
        serial.flush();
        let last_console_line = serial.last_line();
        let console_error = serial.log_error();
        let console_dropped = serial.dropped();
        drop(serial);
        let (mut status, mut ok, mut message) = cause.describe();
        if let (StopCause::Timeout(_), Some(now)) = (&cause, self.at_timeout.take()) {
            message = format!("{message}; the vCPUs then: {now}");
        }
        let wall_ms = self.shared.start.elapsed().as_secs_f64() * 1e3;
        let (user_log, user_log_error) = match self.write_user_log() {
            Ok(p) => (p, None),
            Err(e) => (None, Some(e)),
        };
        let mut res = self
            .shared
            .results
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if !ok && cause != StopCause::Requested {
            let errors = res.guest_errors();
            let why = crate::guest_report::guest_reason(&errors, last_console_line.as_deref());
            if let Some(why) = why {
                log::error!("[{}] {why}", self.spec.name);
                message = format!("{message}; {why}");
            }
        }
        // A result or log that could not be written fails the VM whatever
        // the guest did (the first failure names the file and the reason).
        let write_error = res
            .write_error()
            .map(str::to_string)
            .or_else(|| {
                console_error.map(|e| {
                    let path = self
                        .console_log
                        .as_deref()
                        .unwrap_or(Path::new("console log"));
                    format!("cannot write {}: {e}", path.display())
                })
            })
            .or(user_log_error.map(|e| e.to_string()));
        let fail = |why: String, status: &mut String, ok: &mut bool, message: &mut String| {
            let guest = if message.is_empty() {
                status.clone()
            } else {
                format!("{status}, {message}")
            };
            *message = format!("{why} (the guest: {guest})");
            *status = crate::results::STATUS_WRITE_ERROR.to_string();
            *ok = false;
        };
        if let Some(why) = write_error {
            fail(why, &mut status, &mut ok, &mut message);
        }
        // What the guest sent past the limits, said in its result.
        let console_dropped = (console_dropped > 0).then(|| {
            format!(
                "{console_dropped} bytes of console output dropped past the {}-byte log limit",
                self.options.limits.log_bytes
            )
        });
        for what in [res.dropped_summary(), console_dropped]
            .into_iter()
            .flatten()
        {
            log::warn!("[{}] {what}", self.spec.name);
            message = if message.is_empty() {
                what
            } else {
                format!("{message}; {what}")
            };
        }
        let exits: Vec<_> = outcomes.iter().map(|o| o.stats).collect();
        res.stopped_with(
            &status,
            ok,
            &message,
            wall_ms,
            crate::results::StopVcpus {
                count: self.spec.vcpus as usize,
                exits: &exits,
                sched: &vcpu_sched,
            },
        );
        // The stop line itself may be the write that fails.
        if status != crate::results::STATUS_WRITE_ERROR {
            if let Some(why) = res.write_error().map(str::to_string) {
                fail(why, &mut status, &mut ok, &mut message);
            }
        }
        let work = res.work();
        let total = work
            .iter()
            .filter_map(|w| w.units_per_s)
            .reduce(|a, b| a + b);
        VmResult {
            name: self.spec.name.clone(),
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
            records_not_kept: res.records_not_kept,
            rejected_records: res.rejected,
            results_file: res.path().map(Path::to_path_buf),
            console_log: self.console_log.clone(),
            user_log,
            vcpu_stats: exits,
            vcpu_sched,
        }
    }

    /// Create, run to completion, and report one VM; errors become a failed
    /// result naming the VM.
    pub fn run(kvm: &Kvm, spec: &VmSpec, options: VmOptions) -> VmResult {
        Self::run_with(kvm, spec, options, |_| {})
    }

    /// [`Vm::run`], handing a [`StopHandle`] to `on_created` before the
    /// vCPUs start.
    pub fn run_with(
        kvm: &Kvm,
        spec: &VmSpec,
        options: VmOptions,
        on_created: impl FnOnce(StopHandle),
    ) -> VmResult {
        let t0 = Instant::now();
        let failed = |msg: String| {
            log::error!("[{}] VM failed: {msg}", spec.name);
            let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
            VmResult::error(&spec.name, msg, wall_ms, &spec.boot.cmdline)
        };
        let mut vm = match Vm::create(kvm, spec, options) {
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
