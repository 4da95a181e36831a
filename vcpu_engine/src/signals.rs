//! The signal the engine takes for itself: the *kick* (SIGRTMIN+0,
//! [`kick_signal`]), which gets a vCPU out of KVM_RUN.
//!
//! [`crate::Engine::new`] installs its handler (process-wide). The handler
//! sets `kvm_run.immediate_exit` of the vCPU the receiving thread runs, so
//! KVM_RUN returns EINTR whether the signal lands while the guest runs or
//! just before the thread enters KVM_RUN; the vCPU loop clears the flag
//! and only then looks at why it was kicked, so no kick is ever lost. A
//! thread that runs several vCPUs one after the other (a per-CPU worker)
//! points the handler at the vCPU it is about to run
//! (`set_current_kvm_run`).
//!
//! An embedding VMM must leave this signal to the engine: not install a
//! handler of its own for it, and not block it in the threads that run
//! vCPUs (its own threads included, with [`crate::Engine::add_vm_gated`]).
//! A VMM whose own vCPU kick is SIGRTMIN too moves its kick to another
//! real-time signal.

use kvm_bindings::kvm_run;
use std::cell::Cell;
use std::sync::OnceLock;
use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

/// The real-time signal that kicks a vCPU thread out of KVM_RUN
/// (SIGRTMIN): the engine's own, see the module documentation.
pub fn kick_signal() -> i32 {
    SIGRTMIN()
}

thread_local! {
    /// The `kvm_run` of the vCPU this thread runs (null when none).
    static KVM_RUN_PTR: Cell<*mut kvm_run> = const { Cell::new(std::ptr::null_mut()) };
}

/// Point the kick handler of the calling thread at `run` (null: no vCPU).
///
/// The caller must keep the `kvm_run` mapping alive (its `VcpuFd`) until it
/// sets another pointer or null.
pub(crate) fn set_current_kvm_run(run: *mut kvm_run) {
    KVM_RUN_PTR.with(|c| c.set(run));
}

extern "C" fn handle_kick(_num: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // A const-initialised, destructor-free thread local: no allocation or
    // lazy registration happens here, so this is async-signal-safe.
    let p = KVM_RUN_PTR.with(|c| c.get());
    if !p.is_null() {
        // SAFETY: `p` points to the kvm_run mmap of a VcpuFd this very thread
        // runs; `set_current_kvm_run`'s contract keeps the mapping alive while
        // the pointer is set. A volatile byte store is what KVM expects for
        // `immediate_exit`.
        unsafe { std::ptr::addr_of_mut!((*p).immediate_exit).write_volatile(1) };
    }
}

/// Install the (process-wide) kick handler. Idempotent; the result of the
/// first call is remembered.
pub(crate) fn register_kick_handler() -> Result<(), vmm_sys_util::errno::Error> {
    static RESULT: OnceLock<Option<i32>> = OnceLock::new();
    let errno = RESULT.get_or_init(|| {
        register_signal_handler(kick_signal(), handle_kick)
            .err()
            .map(|e| e.errno())
    });
    match errno {
        None => Ok(()),
        Some(errno) => Err(vmm_sys_util::errno::Error::new(*errno)),
    }
}

/// Send the kick to thread `tid` of this process.
pub(crate) fn kick_thread(tid: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: tgkill with our own pid and a tid of ours; no memory is passed.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, kick_signal()) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The kernel thread id of the calling thread.
pub(crate) fn current_tid() -> libc::pid_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}
