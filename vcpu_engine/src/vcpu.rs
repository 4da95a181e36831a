//! A vCPU, and the loop that runs it.
//!
//! [`VcpuRunner`] owns the KVM vCPU: one `KVM_RUN` and the dispatch of its
//! exit to the VM's devices is one [`VcpuRunner::run_once`], which answers
//! with a typed [`VcpuStep`]. *Who* decides when the vCPU may run is the
//! [`VcpuGate`]: the loop asks the gate before every `KVM_RUN`, handing it
//! the previous step. Under `policy = "host"` the gate is a command channel
//! (run, pause, exit) and the host kernel schedules the thread; under
//! Pacer's engine the gate parks the thread until the scheduler dispatches
//! the vCPU on a CPU, injects its interrupts and hands the CPU on when the
//! vCPU halts, yields or is preempted (`engine::dispatch`). The engine's
//! per-CPU workers run the same [`VcpuRunner`] without a thread of its own.
//!
//! Host mode's vCPU thread is an explicit state machine:
//!
//! ```text
//!   Created --Run--> Running <--Pause/Run--> Paused
//!      |                |                      |
//!      +------Exit------+--- fatal exit -------+--> Exited
//! ```
//!
//! Commands arrive on a channel. To get a vCPU out of KVM_RUN the owner
//! *kicks* it: the command is queued, a pending flag is raised, and the
//! kick signal is sent to the thread (`crate::signals`).

use crate::host_cpus::{pin_current_thread, HostCpuSet};
use crate::signals::{self, kick_signal};
use kvm_bindings::{kvm_interrupt, kvm_regs, kvm_run, kvm_segment, kvm_sregs, kvm_vcpu_events};
use kvm_ioctls::{VcpuExit, VcpuFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use vmm_sys_util::signal::Killable;

/// Errors of vCPU threads (spawning, commanding a host-mode thread).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VcpuError {
    /// The kick signal's handler could not be installed.
    #[error("cannot register the vCPU kick signal handler: {0}")]
    Signal(vmm_sys_util::errno::Error),
    /// The OS refused a thread.
    #[error("cannot spawn vCPU thread {name}: {source}")]
    Spawn {
        /// The thread's name (`<vm>/vcpu<N>`).
        name: String,
        /// Why.
        source: std::io::Error,
    },
    /// The kick signal could not be sent.
    #[error("cannot kick vCPU thread {name}: {source}")]
    Kick {
        /// The thread's name.
        name: String,
        /// Why.
        source: vmm_sys_util::errno::Error,
    },
    /// The vCPU's thread has ended (names the thread).
    #[error("vCPU {0} has exited")]
    Exited(String),
    /// A host-mode thread did not answer a command in time.
    #[error("vCPU {name} did not answer {what} within {timeout:?}")]
    Timeout {
        /// The thread's name.
        name: String,
        /// The command (`start`, `pause`, `resume`).
        what: &'static str,
        /// How long it was given.
        timeout: Duration,
    },
}

/// Why a vCPU stopped for good. `Display` gives the sentence for a log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VcpuExitReason {
    /// Told to exit (VM shutdown, guest exit request, another vCPU failed).
    Stopped,
    /// KVM_EXIT_SHUTDOWN: the guest triple-faulted.
    TripleFault {
        /// The guest's RIP after the exit.
        rip: u64,
    },
    /// KVM_EXIT_INTERNAL_ERROR (e.g. an instruction KVM cannot emulate).
    InternalError {
        /// KVM's suberror (1: emulation failure, 2: simultaneous
        /// exceptions, 3: delivery event).
        suberror: u32,
        /// The guest's RIP after the exit.
        rip: u64,
    },
    /// KVM_EXIT_FAIL_ENTRY.
    FailEntry {
        /// The hardware's entry failure reason.
        reason: u64,
    },
    /// KVM_EXIT_SYSTEM_EVENT (shutdown/reset/crash).
    SystemEvent {
        /// KVM's event type (`KVM_SYSTEM_EVENT_*`).
        kind: u32,
    },
    /// An exit this VMM does not handle.
    Unhandled {
        /// The exit as `kvm_ioctls::VcpuExit`'s `Debug` shows it.
        exit: String,
    },
    /// KVM_RUN or another vCPU ioctl failed.
    KvmError {
        /// The ioctl's errno.
        errno: i32,
    },
}

impl std::fmt::Display for VcpuExitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VcpuExitReason::Stopped => write!(f, "stopped"),
            VcpuExitReason::TripleFault { rip } => {
                write!(f, "triple fault (KVM_EXIT_SHUTDOWN) at RIP {rip:#x}")
            }
            VcpuExitReason::InternalError { suberror, rip } => {
                let what = match suberror {
                    1 => " (emulation failure)",
                    2 => " (simultaneous exceptions)",
                    3 => " (delivery event)",
                    _ => "",
                };
                write!(
                    f,
                    "KVM internal error, suberror {suberror}{what}, at RIP {rip:#x}"
                )
            }
            VcpuExitReason::FailEntry { reason } => {
                write!(f, "VM entry failed (hardware reason {reason:#x})")
            }
            VcpuExitReason::SystemEvent { kind } => write!(f, "system event {kind}"),
            VcpuExitReason::Unhandled { exit } => write!(f, "unhandled exit {exit}"),
            VcpuExitReason::KvmError { errno } => write!(
                f,
                "KVM vCPU ioctl failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

/// An MSR access the VMM refuses: the guest gets a general-protection fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("MSR access refused (#GP)")]
pub struct MsrFault;

/// What the VM provides to its vCPUs: device dispatch and the VM-wide stop.
///
/// Called on the thread that runs the vCPU, between two KVM_RUNs, while
/// the vCPU holds its host CPU: a slow handler delays the vCPU's own
/// time slice, never another vCPU's. `vcpu` is the vCPU's index in its
/// VM.
pub trait VcpuExitHandler: Send + Sync {
    /// A port read (`in`): fill `data` (1, 2 or 4 bytes).
    fn pio_in(&self, vcpu: u32, port: u16, data: &mut [u8]);
    /// A port write (`out`). A write to [`YIELD_PORT`] is handed here too,
    /// then makes the vCPU yield its CPU.
    fn pio_out(&self, vcpu: u32, port: u16, data: &[u8]);
    /// A read of guest-physical `addr` that no memory slot backs: fill
    /// `data`.
    fn mmio_read(&self, vcpu: u32, addr: u64, data: &mut [u8]);
    /// A write to guest-physical `addr` that no memory slot backs.
    fn mmio_write(&self, vcpu: u32, addr: u64, data: &[u8]);
    /// An MSR read KVM handed to user space (the VMM's MSR filter); an
    /// error makes KVM inject a #GP into the guest. Default: refuse.
    fn msr_read(&self, _vcpu: u32, _msr: u32) -> Result<u64, MsrFault> {
        Err(MsrFault)
    }
    /// An MSR write KVM handed to user space; an error makes KVM inject a
    /// #GP. Default: refuse.
    fn msr_write(&self, _vcpu: u32, _msr: u32, _value: u64) -> Result<(), MsrFault> {
        Err(MsrFault)
    }
    /// The guest's CR8, when it changed since the VMM last exchanged it,
    /// just before an MMIO or MSR exit is handled: a guest `mov cr8` needs
    /// no exit, and a user-space local APIC must see the task priority it
    /// set before it answers a TPR or PPR read.
    fn guest_cr8(&self, _vcpu: u32, _cr8: u64) {}
    /// The engine dispatched `vcpu`: the start of a turn, before its
    /// first entry, on the thread that runs it. `ready_wait` reads the
    /// time the scheduler says it has waited runnable over its life, ns
    /// (one look into the scheduler: call it only when needed). A VMM
    /// that offers KVM's paravirtual steal time publishes it there (Pacer's
    /// VMM does). Default: nothing.
    fn vcpu_dispatched(&self, _vcpu: u32, _ready_wait: &dyn Fn() -> Option<u64>) {}
    /// The engine took the runnable `vcpu` off its CPU (quantum end, a
    /// kick, a yield), on the thread that ran it: where a VMM sets the
    /// guest's paravirtual "preempted" flag. Default: nothing.
    fn vcpu_preempted(&self, _vcpu: u32) {}
    /// True once the VM is stopping (checked before every entry): the
    /// vCPU leaves its loop with [`VcpuExitReason::Stopped`]. Once it is
    /// true for a VM under the engine, call [`crate::Engine::finish_vm`].
    fn stopping(&self) -> bool;
    /// A vCPU ended for a reason other than a stop (fatal guest state, a
    /// failed ioctl), on its own thread: the VMM typically stops the VM.
    fn vcpu_failed(&self, vcpu: u32, reason: &VcpuExitReason);
    /// Read guest-physical memory at `gpa` into `buf` (false: not guest
    /// RAM). The engine's spin watch (`crate::pause_loop`) reads the
    /// guest's page tables and the code at a vCPU's instruction pointer
    /// through it. Default: no guest memory, so no spin is ever seen.
    fn read_guest(&self, _gpa: u64, _buf: &mut [u8]) -> bool {
        false
    }
}

/// Statistics a vCPU keeps of its own exits (more counters may be added).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct VcpuStats {
    /// KVM_RUN returns (including EINTR).
    pub exits: u64,
    /// Port I/O exits.
    pub pio_exits: u64,
    /// MMIO exits.
    pub mmio_exits: u64,
    /// MSR exits (reads and writes KVM handed to user space).
    pub msr_exits: u64,
    /// HLT exits (only without the in-kernel irqchip).
    pub halts: u64,
    /// KVM_RUN returns with EINTR (kicks and other signals).
    pub kicks: u64,
    /// Looks of the spin watch (`spin_watch.rs`) that found the
    /// vCPU in a spin-wait loop with a sibling parked, so it yielded; under
    /// `ranked`, a `turns` VM's turns, or a relaxed sharing VM's paced
    /// turns, given to the sibling sharing its CPU (`sibling_share.rs`).
    pub spin_yields: u64,
    /// Turns this vCPU gave, at the spin watch's look and not spinning, to
    /// a sibling that sent it an IPI while it waited parked and waits for
    /// the answer (relaxed co-scheduling under `threads`, a VM wider than
    /// its CPUs; `spin_watch.rs`); under `ranked`, turns given back, half a
    /// turn in, to a sibling beside it that gave it the CPU from a
    /// spin-wait loop (paced sibling turns, `sibling_share.rs`).
    pub turns_given_back: u64,
    /// Interrupts injected by Pacer (only without the in-kernel irqchip).
    pub injections: u64,
}

/// What one `KVM_RUN` ended with, after its exit was handled (a
/// [`VcpuGate`] is handed it before the next entry).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VcpuStep {
    /// Nothing yet (before the first entry).
    Start,
    /// An exit handled in full (port I/O, MMIO, MSR, interrupt window).
    Handled,
    /// The guest executed HLT (only without the in-kernel irqchip).
    Halted,
    /// KVM_RUN returned EINTR: a kick or another signal.
    Interrupted,
    /// The guest wrote the yield port: it gives up the CPU voluntarily.
    Yielded,
    /// The vCPU cannot continue.
    Fatal(VcpuExitReason),
}

/// IA32_APIC_BASE: with a user-space local APIC, guest accesses reach the
/// VMM through the MSR filter and KVM's copy is kept by the VMM.
const MSR_IA32_APIC_BASE: u32 = 0x1b;

/// The guest's yield port (guests/PROTOCOL.md): an OUT here asks the
/// scheduler to run something else for a while. Defined once, with the
/// device that claims it on a VMM's bus.
pub use devices::yield_port::YIELD_PORT;

mod ioctls {
    use kvm_bindings::kvm_interrupt;
    vmm_sys_util::ioctl_iow_nr!(KVM_INTERRUPT, kvm_bindings::KVMIO, 0x86, kvm_interrupt);
}
use ioctls::KVM_INTERRUPT;

/// One KVM vCPU with its exit dispatch: the VMM's `VcpuFd` (set up by the
/// VMM: registers, CPUID, MSRs) and the VM's [`VcpuExitHandler`].
/// [`run_vcpu_loop`] drives it through a [`VcpuGate`].
pub struct VcpuRunner {
    /// Its index in the VM (and APIC id).
    pub(crate) index: u32,
    fd: VcpuFd,
    handler: Arc<dyn VcpuExitHandler>,
    pub(crate) stats: VcpuStats,
    /// CR8 as last exchanged with a user-space interrupt controller.
    pub(crate) cr8_synced: u64,
    /// `mmio_exits + msr_exits` when CR8 was last read from it.
    pub(crate) apic_exits_synced: u64,
    /// NMIs were given to KVM (KVM_NMI) and may not all be delivered yet.
    nmis_in_kvm: bool,
    /// Where the last KVM_INTERRUPT stands.
    injection: Injection,
    /// Called each time KVM_RUN returns, before the exit is handled.
    left_guest: Option<LeftGuestHook>,
}

/// What a dispatch does on the vCPU's thread each time KVM_RUN returns,
/// before the VMM handles the exit ([`VcpuRunner::on_leaving_guest`]).
pub(crate) type LeftGuestHook = Arc<dyn Fn() + Send + Sync>;

/// Where a vCPU's last KVM_INTERRUPT stands. KVM holds one injected
/// vector; the development machines' software KVM replaces it when a
/// second comes before the guest took the first, where hardware KVM
/// refuses the second (EEXIST). So the engine keeps count itself and never
/// injects while KVM may still hold a vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Injection {
    /// None outstanding: the last was delivered (an entry that ran the
    /// guest delivers what was injected when it could take it).
    Taken,
    /// Injected, and no KVM_RUN since: KVM holds it.
    Queued,
    /// Injected, and the KVM_RUN since ended with EINTR, perhaps before
    /// the guest ran: KVM may still hold it (KVM_GET_VCPU_EVENTS tells).
    CutShort,
}

impl VcpuRunner {
    /// vCPU `index` of its VM (0 the boot vCPU; the index the engine
    /// and `handler` know it by), run through `fd`.
    pub fn new(index: u32, fd: VcpuFd, handler: Arc<dyn VcpuExitHandler>) -> VcpuRunner {
        VcpuRunner {
            index,
            fd,
            handler,
            stats: VcpuStats::default(),
            cr8_synced: 0,
            apic_exits_synced: 0,
            nmis_in_kvm: false,
            injection: Injection::Taken,
            left_guest: None,
        }
    }

    /// Run `hook` on this thread each time KVM_RUN returns, before the
    /// exit is handled (the ranked dispatch: a thread handling an exit,
    /// where it may take the VMM's locks, is never in the idle class).
    pub(crate) fn on_leaving_guest(&mut self, hook: LeftGuestHook) {
        self.left_guest = Some(hook);
    }

    /// The KVM vCPU.
    pub(crate) fn vcpu_fd(&self) -> &VcpuFd {
        &self.fd
    }

    /// Whether KVM's in-kernel local APIC holds the vCPU halted (or, an
    /// application processor, waiting for INIT or its start-up IPI): its
    /// KVM_MP_STATE is not RUNNABLE.
    pub(crate) fn halted_in_kvm(&self) -> Result<bool, VcpuExitReason> {
        match self.fd.get_mp_state() {
            Ok(s) => Ok(s.mp_state != kvm_bindings::KVM_MP_STATE_RUNNABLE),
            Err(e) => Err(VcpuExitReason::KvmError { errno: e.errno() }),
        }
    }

    /// The guest's CR8 as KVM left it (only meaningful without an
    /// in-kernel irqchip, where KVM keeps CR8 in `kvm_run`).
    pub(crate) fn kvm_cr8(&mut self) -> u64 {
        self.fd.get_kvm_run().cr8
    }

    /// The CR8 the guest sees at the next entry.
    pub(crate) fn set_kvm_cr8(&mut self, cr8: u64) {
        self.fd.get_kvm_run().cr8 = cr8;
    }

    /// Its index in the VM.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Its exit counters so far.
    pub fn stats(&self) -> VcpuStats {
        self.stats
    }

    /// The VM's exit handler it dispatches to.
    pub fn handler(&self) -> &Arc<dyn VcpuExitHandler> {
        &self.handler
    }

    /// The `kvm_run` mapping, for the kick handler ([`signals::set_current_kvm_run`]).
    pub(crate) fn kvm_run_ptr(&mut self) -> *mut kvm_run {
        self.fd.get_kvm_run() as *mut kvm_run
    }

    /// Whether KVM says an interrupt can be injected now (from the last
    /// exit), and the guest's IF flag.
    pub fn interrupt_window(&mut self) -> (bool, bool) {
        let run = self.fd.get_kvm_run();
        (run.ready_for_interrupt_injection != 0, run.if_flag != 0)
    }

    /// Ask KVM to exit as soon as the guest can take an interrupt.
    pub fn request_interrupt_window(&mut self, on: bool) {
        self.fd.get_kvm_run().request_interrupt_window = on as u8;
    }

    /// Whether the next entry asks for an interrupt-window exit.
    pub fn interrupt_window_requested(&mut self) -> bool {
        self.fd.get_kvm_run().request_interrupt_window != 0
    }

    /// Queue external interrupt `vector` for the next entry (KVM_INTERRUPT).
    pub fn inject_interrupt(&mut self, vector: u8) -> Result<(), VcpuExitReason> {
        let irq = kvm_interrupt { irq: vector as u32 };
        // SAFETY: KVM_INTERRUPT reads one kvm_interrupt from the pointer,
        // which is valid for the duration of the call; the fd is our vCPU.
        let r = unsafe { vmm_sys_util::ioctl::ioctl_with_ref(&self.fd, KVM_INTERRUPT(), &irq) };
        if r < 0 {
            return Err(VcpuExitReason::KvmError {
                errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            });
        }
        self.stats.injections += 1;
        self.injection = Injection::Queued;
        Ok(())
    }

    /// Whether KVM may still hold an interrupt injected earlier, which a
    /// new injection would replace (software KVM) or be refused behind
    /// (hardware KVM). Costs one KVM_GET_VCPU_EVENTS only after an
    /// injection followed by a kicked entry.
    pub(crate) fn injection_outstanding(&mut self) -> Result<bool, VcpuExitReason> {
        match self.injection {
            Injection::Taken => Ok(false),
            Injection::Queued => Ok(true),
            Injection::CutShort => {
                let held = self.vcpu_events()?.interrupt.injected != 0;
                if !held {
                    self.injection = Injection::Taken;
                }
                Ok(held)
            }
        }
    }

    /// Queue an NMI (KVM_NMI).
    pub(crate) fn inject_nmi(&mut self) -> Result<(), VcpuExitReason> {
        self.fd
            .nmi()
            .map_err(|e| VcpuExitReason::KvmError { errno: e.errno() })?;
        self.nmis_in_kvm = true;
        Ok(())
    }

    /// Whether KVM holds an NMI it could deliver now (pending and not
    /// blocked by an NMI handler still running, or being injected): a
    /// processor takes it before any maskable interrupt. One
    /// KVM_GET_VCPU_EVENTS, only while NMIs given to KVM may be undelivered.
    pub(crate) fn nmi_deliverable_in_kvm(&mut self) -> Result<bool, VcpuExitReason> {
        if !self.nmis_in_kvm {
            return Ok(false);
        }
        let e = self.vcpu_events()?;
        if e.nmi.pending == 0 && e.nmi.injected == 0 {
            self.nmis_in_kvm = false;
            return Ok(false);
        }
        Ok(e.nmi.injected != 0 || e.nmi.masked == 0)
    }

    /// The exception, interrupt and NMI state KVM holds (KVM_GET_VCPU_EVENTS).
    pub fn vcpu_events(&self) -> Result<kvm_vcpu_events, VcpuExitReason> {
        self.fd
            .get_vcpu_events()
            .map_err(|e| VcpuExitReason::KvmError { errno: e.errno() })
    }

    /// Whether KVM holds an event it delivers before anything injected now:
    /// an exception (a guest trap caught while KVM delivers it), an NMI or
    /// an interrupt being injected. One KVM_GET_VCPU_EVENTS.
    pub fn kvm_holds_event(&self) -> Result<bool, VcpuExitReason> {
        let e = self.vcpu_events()?;
        Ok(e.exception.injected != 0
            || e.exception.pending != 0
            || e.nmi.injected != 0
            || e.interrupt.injected != 0)
    }

    /// The guest's current privilege level (CS.DPL), one KVM_GET_SREGS.
    pub fn cpl(&self) -> Result<u8, VcpuExitReason> {
        self.fd
            .get_sregs()
            .map(|s| s.cs.dpl)
            .map_err(|e| VcpuExitReason::KvmError { errno: e.errno() })
    }

    /// Put the vCPU in the state a start-up IPI with `vector` leaves a
    /// processor in (Intel SDM vol. 3, "MP initialization"): real mode,
    /// CS = vector << 8, IP = 0, the rest as after INIT.
    pub(crate) fn start_up(&mut self, vector: u8) -> Result<(), VcpuExitReason> {
        let err = |e: kvm_ioctls::Error| VcpuExitReason::KvmError { errno: e.errno() };
        let mut sregs = self.fd.get_sregs().map_err(err)?;
        init_state_sregs(&mut sregs, vector);
        self.fd.set_sregs(&sregs).map_err(err)?;
        self.fd
            .set_regs(&kvm_regs {
                rflags: 0x2,
                rip: 0,
                ..Default::default()
            })
            .map_err(err)?;
        Ok(())
    }

    /// Have KVM copy the registers and the system registers into the
    /// shared `kvm_run` area at every exit (KVM_CAP_SYNC_REGS): the spin
    /// watch then reads them with no ioctl.
    pub(crate) fn sync_registers(&mut self) {
        self.fd.set_sync_valid_reg(kvm_ioctls::SyncReg::Register);
        self.fd
            .set_sync_valid_reg(kvm_ioctls::SyncReg::SystemRegister);
    }

    /// Whether the vCPU, just out of KVM_RUN with its registers synced
    /// ([`VcpuRunner::sync_registers`]), sits in a spin-wait loop.
    pub(crate) fn spinning(&self) -> bool {
        let regs = self.fd.sync_regs();
        let read = |gpa: u64, buf: &mut [u8]| self.handler.read_guest(gpa, buf);
        crate::pause_loop::spinning(regs.regs.rip, &regs.sregs, &read)
    }

    fn rip(&self) -> u64 {
        self.fd.get_regs().map(|r| r.rip).unwrap_or(0)
    }

    /// Tell KVM the IA32_APIC_BASE value the guest wrote to the user-space
    /// local APIC (a host-initiated write, which the MSR filter does not
    /// apply to): KVM derives CPUID.1:EDX.APIC (bit 9) from its own copy.
    fn mirror_apic_base(&mut self, value: u64) {
        let msrs = kvm_bindings::Msrs::from_entries(&[kvm_bindings::kvm_msr_entry {
            index: MSR_IA32_APIC_BASE,
            data: value,
            ..Default::default()
        }]);
        match msrs.map(|m| self.fd.set_msrs(&m)) {
            Ok(Ok(1)) => {}
            other => log::debug!(
                "vcpu{}: IA32_APIC_BASE {value:#x} not mirrored into KVM: {other:?}",
                self.index
            ),
        }
    }

    /// One KVM_RUN and the handling of its exit.
    pub fn run_once(&mut self) -> VcpuStep {
        let idx = self.index;
        let run: *const kvm_run = self.fd.get_kvm_run();
        let exit = self.fd.run();
        if let Some(hook) = &self.left_guest {
            hook();
        }
        self.stats.exits += 1;
        let step = match exit {
            Ok(VcpuExit::IoIn(port, data)) => {
                self.stats.pio_exits += 1;
                self.handler.pio_in(idx, port, data);
                VcpuStep::Handled
            }
            Ok(VcpuExit::IoOut(port, data)) => {
                self.stats.pio_exits += 1;
                self.handler.pio_out(idx, port, data);
                if port == YIELD_PORT {
                    VcpuStep::Yielded
                } else {
                    VcpuStep::Handled
                }
            }
            Ok(VcpuExit::MmioRead(addr, data)) => {
                self.stats.mmio_exits += 1;
                pull_cr8(&*self.handler, idx, &mut self.cr8_synced, run);
                self.handler.mmio_read(idx, addr, data);
                VcpuStep::Handled
            }
            Ok(VcpuExit::MmioWrite(addr, data)) => {
                self.stats.mmio_exits += 1;
                pull_cr8(&*self.handler, idx, &mut self.cr8_synced, run);
                self.handler.mmio_write(idx, addr, data);
                VcpuStep::Handled
            }
            Ok(VcpuExit::X86Rdmsr(m)) => {
                self.stats.msr_exits += 1;
                pull_cr8(&*self.handler, idx, &mut self.cr8_synced, run);
                match self.handler.msr_read(idx, m.index) {
                    Ok(v) => {
                        *m.data = v;
                        *m.error = 0;
                    }
                    Err(MsrFault) => *m.error = 1,
                }
                VcpuStep::Handled
            }
            Ok(VcpuExit::X86Wrmsr(m)) => {
                self.stats.msr_exits += 1;
                pull_cr8(&*self.handler, idx, &mut self.cr8_synced, run);
                let (msr, value) = (m.index, m.data);
                let ok = self.handler.msr_write(idx, msr, value).is_ok();
                *m.error = u8::from(!ok);
                if ok && msr == MSR_IA32_APIC_BASE {
                    self.mirror_apic_base(value);
                }
                VcpuStep::Handled
            }
            Ok(VcpuExit::Hlt) => {
                self.stats.halts += 1;
                VcpuStep::Halted
            }
            // KVM_EXIT_SET_TPR (the guest lowered CR8, without an in-kernel
            // local APIC): the engine reads the new CR8 before the next
            // entry and injects what it unmasked.
            Ok(VcpuExit::IrqWindowOpen) | Ok(VcpuExit::Intr) | Ok(VcpuExit::SetTpr) => {
                VcpuStep::Handled
            }
            Ok(VcpuExit::Shutdown) => {
                VcpuStep::Fatal(VcpuExitReason::TripleFault { rip: self.rip() })
            }
            Ok(VcpuExit::InternalError) => {
                // SAFETY: for KVM_EXIT_INTERNAL_ERROR the `internal` member of
                // the exit union is the valid one.
                let suberror = unsafe { self.fd.get_kvm_run().__bindgen_anon_1.internal.suberror };
                VcpuStep::Fatal(VcpuExitReason::InternalError {
                    suberror,
                    rip: self.rip(),
                })
            }
            Ok(VcpuExit::FailEntry(reason, _cpu)) => {
                VcpuStep::Fatal(VcpuExitReason::FailEntry { reason })
            }
            Ok(VcpuExit::SystemEvent(kind, _)) => {
                VcpuStep::Fatal(VcpuExitReason::SystemEvent { kind })
            }
            Ok(other) => VcpuStep::Fatal(VcpuExitReason::Unhandled {
                exit: format!("{other:?}"),
            }),
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
                self.stats.kicks += 1;
                // Clear before the gate looks at why it was kicked (see the
                // module documentation of `signals`).
                self.fd.set_kvm_immediate_exit(0);
                VcpuStep::Interrupted
            }
            Err(e) => VcpuStep::Fatal(VcpuExitReason::KvmError { errno: e.errno() }),
        };
        if self.injection != Injection::Taken {
            self.injection = if step == VcpuStep::Interrupted {
                Injection::CutShort
            } else {
                Injection::Taken
            };
        }
        step
    }
}

/// Hand the guest's CR8 (from `kvm_run`, read through `run`) to `handler`
/// if it changed since last exchanged (`synced`).
fn pull_cr8(handler: &dyn VcpuExitHandler, vcpu: u32, synced: &mut u64, run: *const kvm_run) {
    // SAFETY: `run` is the caller's kvm_run mapping, alive as long as its
    // VcpuFd; `cr8` lies outside the exit union that the exit being handled
    // borrows, and KVM does not write it while we are out of KVM_RUN.
    let cr8 = unsafe { std::ptr::addr_of!((*run).cr8).read_volatile() };
    if cr8 != *synced {
        handler.guest_cr8(vcpu, cr8);
        *synced = cr8;
    }
}

/// The architectural state after INIT, with CS set for a start-up vector.
pub(crate) fn init_state_sregs(sregs: &mut kvm_sregs, sipi_vector: u8) {
    let seg = |type_: u8, base: u64, selector: u16| kvm_segment {
        base,
        limit: 0xffff,
        selector,
        type_,
        present: 1,
        dpl: 0,
        db: 0,
        s: 1,
        l: 0,
        g: 0,
        avl: 0,
        unusable: 0,
        padding: 0,
    };
    let v = u64::from(sipi_vector);
    sregs.cs = seg(0xb, v << 12, (v << 8) as u16);
    let data = seg(0x3, 0, 0);
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    let mut tr = seg(0xb, 0, 0);
    tr.s = 0;
    sregs.tr = tr;
    let mut ldt = seg(0x2, 0, 0);
    ldt.s = 0;
    sregs.ldt = ldt;
    sregs.gdt.base = 0;
    sregs.gdt.limit = 0xffff;
    sregs.idt.base = 0;
    sregs.idt.limit = 0xffff;
    // CD | NW | ET, as after reset; paging and protection off.
    sregs.cr0 = 0x6000_0010;
    sregs.cr2 = 0;
    sregs.cr3 = 0;
    sregs.cr4 = 0;
    sregs.efer = 0;
}

/// The decision of a [`VcpuGate`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GateDecision {
    /// Enter the guest now.
    Run,
    /// Leave the loop: the vCPU is done.
    Exit(VcpuExitReason),
}

/// The seam between the vCPU loop and whoever decides when a vCPU runs.
pub trait VcpuGate: Send {
    /// Called before every KVM_RUN with what the previous one ended with.
    /// May block (a paused or undispatched vCPU waits here, parked, never
    /// spinning). Fatal steps are handed here too, so the gate can give
    /// the CPU back before the loop ends.
    fn next(&mut self, runner: &mut VcpuRunner, last: VcpuStep) -> GateDecision;
}

/// How a vCPU's loop ended: what a vCPU thread returns when joined, and
/// [`crate::FinishedVcpu::outcome`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct VcpuOutcome {
    /// Why it ended ([`VcpuExitReason::Stopped`] for a normal stop).
    pub reason: VcpuExitReason,
    /// Its exit counters.
    pub stats: VcpuStats,
    /// The kernel's scheduling counters of the thread, read just before it
    /// ended (what `policy = "host"` reports).
    pub thread_sched: crate::stats::VcpuSchedStats,
}

/// The vCPU loop: ask the gate, run once, repeat. Reports a fatal reason to
/// the VM's handler.
pub fn run_vcpu_loop(runner: &mut VcpuRunner, gate: &mut dyn VcpuGate) -> VcpuExitReason {
    let mut last = VcpuStep::Start;
    let reason = loop {
        match gate.next(runner, last) {
            GateDecision::Run => last = runner.run_once(),
            GateDecision::Exit(r) => break r,
        }
    };
    if reason != VcpuExitReason::Stopped {
        runner.handler.vcpu_failed(runner.index, &reason);
    }
    reason
}

/// Spawn the thread `<vm>/vcpu<N>` running `runner` through `gate`.
pub(crate) fn spawn_vcpu_thread<G: VcpuGate + 'static>(
    vm_name: &str,
    mut runner: VcpuRunner,
    mut gate: G,
    on_exit: impl FnOnce(&VcpuExitReason) + Send + 'static,
) -> Result<JoinHandle<VcpuOutcome>, VcpuError> {
    signals::register_kick_handler().map_err(VcpuError::Signal)?;
    let name = format!("{vm_name}/vcpu{}", runner.index);
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            crate::thread_hook::thread_started(crate::thread_hook::EngineThread::Vcpu);
            signals::set_current_kvm_run(runner.kvm_run_ptr());
            let reason = run_vcpu_loop(&mut runner, &mut gate);
            signals::set_current_kvm_run(std::ptr::null_mut());
            let thread_sched =
                crate::stats::VcpuSchedStats::from_host_thread(signals::current_tid());
            on_exit(&reason);
            VcpuOutcome {
                reason,
                stats: runner.stats,
                thread_sched,
            }
        })
        .map_err(|source| VcpuError::Spawn { name, source })
}

// ---------------------------------------------------------------------------
// Host mode: a command-driven gate; the host kernel schedules the thread.

/// States of the host-mode vCPU state machine ([`VcpuHandle::state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VcpuState {
    /// Its thread waits for [`VcpuHandle::start`].
    Created,
    /// Entering the guest whenever the host kernel runs its thread.
    Running,
    /// Out of KVM_RUN until [`VcpuHandle::resume`].
    Paused,
    /// Its loop has ended.
    Exited,
}

/// Commands to a host-mode vCPU thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VcpuCommand {
    /// Start (from Created), resume (from Paused), or wake (from a halt).
    Run,
    /// Leave KVM_RUN and wait for Run or Exit.
    Pause,
    /// Stop for good.
    Exit,
}

/// Answers from a host-mode vCPU thread.
#[derive(Debug, Clone, PartialEq, Eq)]
enum VcpuEvent {
    Started,
    Paused,
    Resumed,
    Exited(VcpuExitReason),
}

/// The gate of host mode: commands on a channel, a pending flag raised with
/// every kick.
struct CommandGate {
    tid: Arc<std::sync::atomic::AtomicI32>,
    state: VcpuState,
    cmd_rx: Receiver<VcpuCommand>,
    event_tx: Sender<VcpuEvent>,
    pending: Arc<AtomicBool>,
    affinity: Option<HostCpuSet>,
    name: String,
}

impl CommandGate {
    /// Block until a command arrives; returns the state to go to.
    fn wait_command(&mut self) -> VcpuState {
        loop {
            match self.cmd_rx.recv() {
                Ok(VcpuCommand::Run) => {
                    let ev = if self.state == VcpuState::Created {
                        VcpuEvent::Started
                    } else {
                        VcpuEvent::Resumed
                    };
                    let _ = self.event_tx.send(ev);
                    return VcpuState::Running;
                }
                Ok(VcpuCommand::Pause) => {
                    let _ = self.event_tx.send(VcpuEvent::Paused);
                }
                Ok(VcpuCommand::Exit) | Err(_) => return VcpuState::Exited,
            }
        }
    }

    /// Handle queued commands while Running; Some(new state) on a change.
    fn drain_commands(&mut self) -> Option<VcpuState> {
        let mut next = None;
        while let Ok(cmd) = self.cmd_rx.try_recv() {
            match cmd {
                VcpuCommand::Exit => return Some(VcpuState::Exited),
                VcpuCommand::Pause => {
                    let _ = self.event_tx.send(VcpuEvent::Paused);
                    next = Some(VcpuState::Paused);
                }
                VcpuCommand::Run => {
                    if next == Some(VcpuState::Paused) {
                        let _ = self.event_tx.send(VcpuEvent::Resumed);
                    }
                    next = None;
                }
            }
        }
        next
    }
}

impl VcpuGate for CommandGate {
    fn next(&mut self, runner: &mut VcpuRunner, last: VcpuStep) -> GateDecision {
        match last {
            VcpuStep::Start => {
                self.tid.store(signals::current_tid(), Ordering::Release);
                if let Some(cpus) = self.affinity.take() {
                    if let Err(e) = pin_current_thread(&cpus) {
                        log::warn!("{}: cannot pin to CPUs {cpus}: {e}", self.name);
                    }
                }
            }
            VcpuStep::Fatal(r) => return GateDecision::Exit(r),
            // With the in-kernel irqchip KVM handles HLT itself; a halt seen
            // here blocks until a command (no spinning).
            VcpuStep::Halted => {
                self.state = VcpuState::Paused;
            }
            _ => {}
        }
        loop {
            self.state = match self.state {
                VcpuState::Created | VcpuState::Paused => self.wait_command(),
                VcpuState::Exited => return GateDecision::Exit(VcpuExitReason::Stopped),
                VcpuState::Running => {
                    if self.pending.swap(false, Ordering::AcqRel) {
                        if let Some(s) = self.drain_commands() {
                            self.state = s;
                            continue;
                        }
                    }
                    if runner.handler.stopping() {
                        return GateDecision::Exit(VcpuExitReason::Stopped);
                    }
                    return GateDecision::Run;
                }
            }
        }
    }
}

/// The owner's side of a host-mode vCPU thread (`policy = "host"`): a
/// thread per vCPU that the host kernel schedules, commanded through a
/// channel and kicked out of KVM_RUN; no [`crate::Engine`] involved.
pub struct VcpuHandle {
    index: u32,
    name: String,
    state: VcpuState,
    cmd_tx: Sender<VcpuCommand>,
    event_rx: Receiver<VcpuEvent>,
    pending: Arc<AtomicBool>,
    thread: Option<JoinHandle<VcpuOutcome>>,
    exit_reason: Option<VcpuExitReason>,
    tid: Arc<std::sync::atomic::AtomicI32>,
}

impl VcpuHandle {
    /// The vCPU's index in its VM.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The thread's name, `<vm>/vcpu<N>`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kernel thread id of the vCPU thread, once it has started.
    pub fn thread_id(&self) -> Option<i32> {
        Some(self.tid.load(Ordering::Acquire)).filter(|&t| t != 0)
    }

    /// Spawn the thread `<vm>/vcpu<N>` in state Created; it runs the guest
    /// after [`VcpuHandle::start`]. `affinity`: bind the thread to these
    /// host CPUs.
    pub fn spawn(
        vm_name: &str,
        runner: VcpuRunner,
        affinity: Option<HostCpuSet>,
    ) -> Result<VcpuHandle, VcpuError> {
        let index = runner.index;
        let name = format!("{vm_name}/vcpu{index}");
        let (cmd_tx, cmd_rx) = channel();
        let (event_tx, event_rx) = channel();
        let pending = Arc::new(AtomicBool::new(false));
        let tid = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let gate = CommandGate {
            tid: tid.clone(),
            state: VcpuState::Created,
            cmd_rx,
            event_tx: event_tx.clone(),
            pending: pending.clone(),
            affinity,
            name: name.clone(),
        };
        let thread = spawn_vcpu_thread(vm_name, runner, gate, move |reason| {
            let _ = event_tx.send(VcpuEvent::Exited(reason.clone()));
        })?;
        Ok(VcpuHandle {
            index,
            name,
            state: VcpuState::Created,
            cmd_tx,
            event_rx,
            pending,
            thread: Some(thread),
            exit_reason: None,
            tid,
        })
    }

    /// Where the thread is, as of the last command it answered.
    pub fn state(&self) -> VcpuState {
        self.state
    }

    /// Interrupt KVM_RUN so that queued commands are seen.
    pub fn kick(&self) -> Result<(), VcpuError> {
        self.pending.store(true, Ordering::Release);
        match &self.thread {
            Some(t) if !t.is_finished() => {
                t.kill(kick_signal()).map_err(|source| VcpuError::Kick {
                    name: self.name.clone(),
                    source,
                })
            }
            _ => Ok(()),
        }
    }

    fn send(&mut self, cmd: VcpuCommand) -> Result<(), VcpuError> {
        if self.cmd_tx.send(cmd).is_err() {
            self.state = VcpuState::Exited;
            return Err(VcpuError::Exited(self.name.clone()));
        }
        // Created/Paused threads block on the channel; only a running one
        // (possibly inside KVM_RUN) needs the signal.
        if self.state == VcpuState::Running {
            self.kick()
        } else {
            Ok(())
        }
    }

    fn wait_for(
        &mut self,
        what: &'static str,
        want: impl Fn(&VcpuEvent) -> bool,
        timeout: Duration,
    ) -> Result<(), VcpuError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.event_rx.recv_timeout(left) {
                Ok(VcpuEvent::Exited(r)) => {
                    self.state = VcpuState::Exited;
                    self.exit_reason = Some(r);
                    return Err(VcpuError::Exited(self.name.clone()));
                }
                Ok(ev) if want(&ev) => return Ok(()),
                Ok(_) => continue,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(VcpuError::Timeout {
                        name: self.name.clone(),
                        what,
                        timeout,
                    })
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.state = VcpuState::Exited;
                    return Err(VcpuError::Exited(self.name.clone()));
                }
            }
        }
    }

    /// Created -> Running.
    pub fn start(&mut self) -> Result<(), VcpuError> {
        self.send(VcpuCommand::Run)?;
        self.wait_for(
            "start",
            |e| matches!(e, VcpuEvent::Started | VcpuEvent::Resumed),
            Duration::from_secs(10),
        )?;
        self.state = VcpuState::Running;
        Ok(())
    }

    /// Running -> Paused; returns once the thread is out of KVM_RUN.
    pub fn pause(&mut self, timeout: Duration) -> Result<(), VcpuError> {
        self.send(VcpuCommand::Pause)?;
        self.wait_for("pause", |e| *e == VcpuEvent::Paused, timeout)?;
        self.state = VcpuState::Paused;
        Ok(())
    }

    /// Paused -> Running.
    pub fn resume(&mut self, timeout: Duration) -> Result<(), VcpuError> {
        self.send(VcpuCommand::Run)?;
        self.wait_for(
            "resume",
            |e| matches!(e, VcpuEvent::Resumed | VcpuEvent::Started),
            timeout,
        )?;
        self.state = VcpuState::Running;
        Ok(())
    }

    /// Ask the thread to exit (does not wait; see [`VcpuHandle::join`]).
    pub fn request_exit(&mut self) {
        let _ = self.send(VcpuCommand::Exit);
    }

    /// Wait for the thread to end.
    pub fn join(mut self) -> VcpuOutcome {
        let out = match self.thread.take().map(|t| t.join()) {
            Some(Ok(o)) => o,
            Some(Err(_)) => VcpuOutcome {
                reason: VcpuExitReason::Unhandled {
                    exit: "vCPU thread panicked".into(),
                },
                stats: VcpuStats::default(),
                thread_sched: Default::default(),
            },
            None => VcpuOutcome {
                reason: self.exit_reason.take().unwrap_or(VcpuExitReason::Stopped),
                stats: VcpuStats::default(),
                thread_sched: Default::default(),
            },
        };
        self.state = VcpuState::Exited;
        out
    }
}

impl Drop for VcpuHandle {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = self.cmd_tx.send(VcpuCommand::Exit);
            self.pending.store(true, Ordering::Release);
            if !t.is_finished() {
                let _ = t.kill(kick_signal());
            }
            let _ = t.join();
        }
    }
}
