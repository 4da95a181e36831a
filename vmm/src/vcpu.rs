//! One vCPU = one host thread, driven by an explicit state machine:
//!
//! ```text
//!   Created --Run--> Running <--Pause/Run--> Paused
//!      |                |                      |
//!      +------Exit------+--- fatal exit -------+--> Exited
//! ```
//!
//! Commands arrive on a channel. To get a vCPU out of KVM_RUN the owner
//! *kicks* it: the command is queued, a pending flag is raised, and a
//! real-time signal is sent to the thread. The signal handler sets
//! `kvm_run.immediate_exit`, so KVM_RUN returns EINTR whether the signal
//! arrives while the guest runs or just before the thread enters KVM_RUN;
//! the loop then clears `immediate_exit` and only then looks at the pending
//! flag, so no kick is ever lost. A scheduler gate (the scheduled engine)
//! plugs in at the same point: before each KVM_RUN the loop asks the gate
//! whether it may run.

use kvm_bindings::kvm_run;
use kvm_ioctls::{VcpuExit, VcpuFd};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;
use vcpu_sched::CpuSet;
use vmm_sys_util::signal::{register_signal_handler, Killable, SIGRTMIN};

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum VcpuError {
    #[error("cannot register the vCPU kick signal handler: {0}")]
    Signal(vmm_sys_util::errno::Error),
    #[error("cannot spawn vCPU thread {name}: {source}")]
    Spawn {
        name: String,
        source: std::io::Error,
    },
    #[error("cannot kick vCPU thread {name}: {source}")]
    Kick {
        name: String,
        source: vmm_sys_util::errno::Error,
    },
    #[error("vCPU {0} has exited")]
    Exited(String),
    #[error("vCPU {name} did not answer {what} within {timeout:?}")]
    Timeout {
        name: String,
        what: &'static str,
        timeout: Duration,
    },
}

/// Offset from SIGRTMIN of the kick signal.
pub const KICK_SIGNAL_OFFSET: i32 = 0;

/// The real-time signal used to kick vCPU threads.
pub fn kick_signal() -> i32 {
    SIGRTMIN() + KICK_SIGNAL_OFFSET
}

thread_local! {
    /// The `kvm_run` of the vCPU owned by this thread (null elsewhere).
    static KVM_RUN_PTR: Cell<*mut kvm_run> = const { Cell::new(std::ptr::null_mut()) };
}

extern "C" fn handle_kick(_num: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // A const-initialised, destructor-free thread local: no allocation or
    // lazy registration happens here, so this is async-signal-safe.
    let p = KVM_RUN_PTR.with(|c| c.get());
    if !p.is_null() {
        // SAFETY: `p` points to the kvm_run mmap of the VcpuFd owned by this
        // very thread; it is set right after the thread takes ownership and
        // cleared before the VcpuFd is dropped. A volatile byte store is what
        // KVM expects for `immediate_exit`.
        unsafe { std::ptr::addr_of_mut!((*p).immediate_exit).write_volatile(1) };
    }
}

/// Install the (process-wide) kick signal handler. Idempotent.
pub fn register_kick_handler() -> Result<(), VcpuError> {
    static RESULT: OnceLock<Option<i32>> = OnceLock::new();
    let errno = RESULT.get_or_init(|| {
        register_signal_handler(kick_signal(), handle_kick)
            .err()
            .map(|e| e.errno())
    });
    match errno {
        None => Ok(()),
        Some(errno) => Err(VcpuError::Signal(vmm_sys_util::errno::Error::new(*errno))),
    }
}

/// States of the vCPU state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VcpuState {
    Created,
    Running,
    Paused,
    Exited,
}

/// Commands to a vCPU thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VcpuCommand {
    /// Start (from Created), resume (from Paused), or wake (from a halt).
    Run,
    /// Leave KVM_RUN and wait for Run or Exit.
    Pause,
    /// Stop for good.
    Exit,
}

/// Answers from a vCPU thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VcpuEvent {
    Started,
    Paused,
    Resumed,
    Exited(VcpuExitReason),
}

/// Why a vCPU thread ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VcpuExitReason {
    /// Told to exit (VM shutdown, guest exit request, another vCPU failed).
    Stopped,
    /// KVM_EXIT_SHUTDOWN: the guest triple-faulted.
    TripleFault { rip: u64 },
    /// KVM_EXIT_INTERNAL_ERROR (e.g. an instruction KVM cannot emulate).
    InternalError { suberror: u32, rip: u64 },
    /// KVM_EXIT_FAIL_ENTRY.
    FailEntry { reason: u64 },
    /// KVM_EXIT_SYSTEM_EVENT (shutdown/reset/crash).
    SystemEvent { kind: u32 },
    /// An exit this VMM does not handle.
    Unhandled { exit: String },
    /// KVM_RUN itself failed.
    KvmError { errno: i32 },
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
                "KVM_RUN failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

/// What the VM provides to its vCPUs: device dispatch and the VM-wide stop.
pub trait VcpuExitHandler: Send + Sync {
    fn pio_in(&self, vcpu: u32, port: u16, data: &mut [u8]);
    fn pio_out(&self, vcpu: u32, port: u16, data: &[u8]);
    fn mmio_read(&self, vcpu: u32, addr: u64, data: &mut [u8]);
    fn mmio_write(&self, vcpu: u32, addr: u64, data: &[u8]);
    /// True once the VM is stopping (checked after every exit).
    fn stopping(&self) -> bool;
    /// A vCPU ended for a reason other than a command (fatal guest state).
    fn vcpu_failed(&self, vcpu: u32, reason: &VcpuExitReason);
}

/// A vCPU before its thread starts.
pub struct Vcpu {
    pub index: u32,
    pub fd: VcpuFd,
}

/// Statistics a vCPU thread keeps.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct VcpuStats {
    /// KVM_RUN returns (including EINTR).
    pub exits: u64,
    pub pio_exits: u64,
    pub mmio_exits: u64,
    /// HLT exits (only without the in-kernel irqchip).
    pub halts: u64,
    /// KVM_RUN returns with EINTR (kicks and other signals).
    pub kicks: u64,
}

/// What the thread returns when joined.
#[derive(Debug, Clone)]
pub struct VcpuOutcome {
    pub reason: VcpuExitReason,
    pub stats: VcpuStats,
}

/// The owner's side of a vCPU thread.
pub struct VcpuHandle {
    pub index: u32,
    pub name: String,
    state: VcpuState,
    cmd_tx: Sender<VcpuCommand>,
    event_rx: Receiver<VcpuEvent>,
    pending: Arc<AtomicBool>,
    thread: Option<JoinHandle<VcpuOutcome>>,
    exit_reason: Option<VcpuExitReason>,
}

struct VcpuThread {
    index: u32,
    fd: VcpuFd,
    handler: Arc<dyn VcpuExitHandler>,
    cmd_rx: Receiver<VcpuCommand>,
    event_tx: Sender<VcpuEvent>,
    pending: Arc<AtomicBool>,
    stats: VcpuStats,
}

/// Pin the calling thread to `cpus` (OS CPU numbers).
pub fn set_current_affinity(cpus: &CpuSet) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in cpus.iter() {
        if (c.0 as usize) < libc::CPU_SETSIZE as usize {
            // SAFETY: the index is below CPU_SETSIZE, checked above.
            unsafe { libc::CPU_SET(c.0 as usize, &mut set) };
        }
    }
    // SAFETY: `set` is a valid cpu_set_t and its size is passed; pid 0 is
    // the calling thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl VcpuHandle {
    /// Spawn the thread `<vm>/vcpu<N>` in state Created; it runs the guest
    /// after [`VcpuHandle::start`]. `affinity`: pin the thread (host mode).
    pub fn spawn(
        vm_name: &str,
        vcpu: Vcpu,
        handler: Arc<dyn VcpuExitHandler>,
        affinity: Option<CpuSet>,
    ) -> Result<VcpuHandle, VcpuError> {
        register_kick_handler()?;
        let index = vcpu.index;
        let name = format!("{vm_name}/vcpu{index}");
        let (cmd_tx, cmd_rx) = channel();
        let (event_tx, event_rx) = channel();
        let pending = Arc::new(AtomicBool::new(false));
        let mut t = VcpuThread {
            index,
            fd: vcpu.fd,
            handler,
            cmd_rx,
            event_tx,
            pending: pending.clone(),
            stats: VcpuStats::default(),
        };
        let tname = name.clone();
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                if let Some(cpus) = affinity {
                    if let Err(e) = set_current_affinity(&cpus) {
                        log::warn!("{tname}: cannot pin to CPUs {}: {e}", cpus.to_list());
                    }
                }
                t.run()
            })
            .map_err(|source| VcpuError::Spawn {
                name: name.clone(),
                source,
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
        })
    }

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
            },
            None => VcpuOutcome {
                reason: self.exit_reason.take().unwrap_or(VcpuExitReason::Stopped),
                stats: VcpuStats::default(),
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

enum Step {
    Continue,
    Exit(VcpuExitReason),
}

impl VcpuThread {
    fn run(&mut self) -> VcpuOutcome {
        KVM_RUN_PTR.with(|c| c.set(self.fd.get_kvm_run() as *mut kvm_run));
        let reason = self.state_machine();
        KVM_RUN_PTR.with(|c| c.set(std::ptr::null_mut()));
        if reason != VcpuExitReason::Stopped {
            self.handler.vcpu_failed(self.index, &reason);
        }
        let _ = self.event_tx.send(VcpuEvent::Exited(reason.clone()));
        VcpuOutcome {
            reason,
            stats: self.stats,
        }
    }

    /// Block until a command arrives; returns the state to go to.
    fn wait_command(&mut self, from: VcpuState) -> VcpuState {
        loop {
            match self.cmd_rx.recv() {
                Ok(VcpuCommand::Run) => {
                    let ev = if from == VcpuState::Created {
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

    fn state_machine(&mut self) -> VcpuExitReason {
        let mut state = VcpuState::Created;
        loop {
            state = match state {
                VcpuState::Created | VcpuState::Paused => self.wait_command(state),
                VcpuState::Exited => return VcpuExitReason::Stopped,
                VcpuState::Running => {
                    if self.pending.swap(false, Ordering::AcqRel) {
                        if let Some(s) = self.drain_commands() {
                            state = s;
                            continue;
                        }
                    }
                    if self.handler.stopping() {
                        return VcpuExitReason::Stopped;
                    }
                    match self.run_once() {
                        Step::Continue => VcpuState::Running,
                        Step::Exit(r) => return r,
                    }
                }
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

    fn rip(&self) -> u64 {
        self.fd.get_regs().map(|r| r.rip).unwrap_or(0)
    }

    fn run_once(&mut self) -> Step {
        let idx = self.index;
        let exit = self.fd.run();
        self.stats.exits += 1;
        match exit {
            Ok(VcpuExit::IoIn(port, data)) => {
                self.stats.pio_exits += 1;
                self.handler.pio_in(idx, port, data);
                Step::Continue
            }
            Ok(VcpuExit::IoOut(port, data)) => {
                self.stats.pio_exits += 1;
                self.handler.pio_out(idx, port, data);
                Step::Continue
            }
            Ok(VcpuExit::MmioRead(addr, data)) => {
                self.stats.mmio_exits += 1;
                self.handler.mmio_read(idx, addr, data);
                Step::Continue
            }
            Ok(VcpuExit::MmioWrite(addr, data)) => {
                self.stats.mmio_exits += 1;
                self.handler.mmio_write(idx, addr, data);
                Step::Continue
            }
            Ok(VcpuExit::Hlt) => {
                self.stats.halts += 1;
                // Only without an in-kernel irqchip: the vCPU blocks until a
                // command wakes it (the scheduled engine's block event).
                match self.wait_command(VcpuState::Running) {
                    VcpuState::Exited => Step::Exit(VcpuExitReason::Stopped),
                    _ => Step::Continue,
                }
            }
            Ok(VcpuExit::Shutdown) => Step::Exit(VcpuExitReason::TripleFault { rip: self.rip() }),
            Ok(VcpuExit::InternalError) => {
                // SAFETY: for KVM_EXIT_INTERNAL_ERROR the `internal` member of
                // the exit union is the valid one.
                let suberror = unsafe { self.fd.get_kvm_run().__bindgen_anon_1.internal.suberror };
                Step::Exit(VcpuExitReason::InternalError {
                    suberror,
                    rip: self.rip(),
                })
            }
            Ok(VcpuExit::FailEntry(reason, _cpu)) => {
                Step::Exit(VcpuExitReason::FailEntry { reason })
            }
            Ok(VcpuExit::SystemEvent(kind, _)) => Step::Exit(VcpuExitReason::SystemEvent { kind }),
            Ok(VcpuExit::IrqWindowOpen) | Ok(VcpuExit::Intr) => Step::Continue,
            Ok(other) => Step::Exit(VcpuExitReason::Unhandled {
                exit: format!("{other:?}"),
            }),
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
                self.stats.kicks += 1;
                // Clear before looking at the pending flag (see module docs).
                self.fd.set_kvm_immediate_exit(0);
                Step::Continue
            }
            Err(e) => Step::Exit(VcpuExitReason::KvmError { errno: e.errno() }),
        }
    }
}
