//! Every signal Pacer uses, in one place.
//!
//! - The *kick* (SIGRTMIN+0) gets a vCPU out of KVM_RUN. Its handler sets
//!   `kvm_run.immediate_exit` of the vCPU the receiving thread runs, so
//!   KVM_RUN returns EINTR whether the signal lands while the guest runs or
//!   just before the thread enters KVM_RUN; the vCPU loop clears the flag and
//!   only then looks at why it was kicked, so no kick is ever lost. A thread
//!   that runs several vCPUs one after the other (a per-CPU worker of the
//!   scheduled engine) points the handler at the vCPU it is about to run with
//!   [`set_current_kvm_run`].
//! - The *watcher wake* (SIGRTMIN+1) ends the signal watcher's wait at the
//!   end of a run.
//! - SIGINT and SIGTERM stop every VM cleanly; SIGUSR1 asks for a snapshot
//!   of the scheduler's statistics. A [`SignalGuard`] blocks them in the
//!   calling thread (and every thread it spawns) and [`SignalGuard::watch`]
//!   turns them into [`ProcessSignal`]s on one thread.

use kvm_bindings::kvm_run;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

/// The real-time signal that kicks a vCPU thread out of KVM_RUN.
pub fn kick_signal() -> i32 {
    SIGRTMIN()
}

/// The signal that ends the signal watcher's wait (see [`SignalGuard::wake`]).
pub fn watcher_wake_signal() -> i32 {
    SIGRTMIN() + 1
}

thread_local! {
    /// The `kvm_run` of the vCPU this thread runs (null when none).
    static KVM_RUN_PTR: Cell<*mut kvm_run> = const { Cell::new(std::ptr::null_mut()) };
}

/// Point the kick handler of the calling thread at `run` (null: no vCPU).
///
/// The caller must keep the `kvm_run` mapping alive (its `VcpuFd`) until it
/// sets another pointer or null.
pub fn set_current_kvm_run(run: *mut kvm_run) {
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
pub fn register_kick_handler() -> Result<(), vmm_sys_util::errno::Error> {
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
pub fn kick_thread(tid: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: tgkill with our own pid and a tid of ours; no memory is passed.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, kick_signal()) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The kernel thread id of the calling thread.
pub fn current_tid() -> libc::pid_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// A process-directed signal the watcher saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessSignal {
    /// SIGINT or SIGTERM: stop every VM.
    Stop(&'static str),
    /// SIGUSR1: write a statistics snapshot.
    Snapshot,
}

/// While alive, SIGINT, SIGTERM, SIGUSR1 and the watcher wake signal are
/// blocked in the calling thread (and so in every thread it spawns).
pub struct SignalGuard {
    old_mask: libc::sigset_t,
    watcher: AtomicU64,
}

impl SignalGuard {
    fn signal_set() -> libc::sigset_t {
        // SAFETY: sigset_t is plain data; sigemptyset initialises it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer to a local sigset; the signals are valid.
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGUSR1);
            libc::sigaddset(&mut set, watcher_wake_signal());
        }
        set
    }

    /// Block the signals; None if the mask cannot be changed.
    pub fn install() -> Option<SignalGuard> {
        let set = Self::signal_set();
        // SAFETY: sigset_t is plain data; pthread_sigmask writes `old`.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to sigsets; the return value is checked.
        let ok = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) == 0 };
        ok.then_some(SignalGuard {
            old_mask: old,
            watcher: AtomicU64::new(0),
        })
    }

    /// Wait for the blocked signals and hand each to `on_signal`, until
    /// `done` returns true (the run's end calls [`SignalGuard::wake`]).
    /// Runs on a thread of its own.
    pub fn watch(&self, done: impl Fn() -> bool, mut on_signal: impl FnMut(ProcessSignal)) {
        // SAFETY: pthread_self has no preconditions.
        self.watcher
            .store(unsafe { libc::pthread_self() } as u64, Ordering::Release);
        let set = Self::signal_set();
        // A safety net only; the wake signal ends the wait at once.
        let timeout = libc::timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        while !done() {
            // SAFETY: valid sigset and timespec; siginfo may be null.
            let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
            match sig {
                libc::SIGINT => on_signal(ProcessSignal::Stop("SIGINT")),
                libc::SIGTERM => on_signal(ProcessSignal::Stop("SIGTERM")),
                libc::SIGUSR1 => on_signal(ProcessSignal::Snapshot),
                _ => {}
            }
        }
        self.watcher.store(0, Ordering::Release);
    }

    /// Wake the watcher thread so it sees `done` (call after setting it).
    pub fn wake(&self) {
        let t = self.watcher.load(Ordering::Acquire);
        if t != 0 {
            // SAFETY: `t` is the pthread_t of the watcher, which clears it
            // before returning, and is joined only after this call (scoped
            // thread); the signal is blocked there, so it only ends
            // sigtimedwait.
            unsafe { libc::pthread_kill(t as libc::pthread_t, watcher_wake_signal()) };
        }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `install`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut()) };
    }
}
