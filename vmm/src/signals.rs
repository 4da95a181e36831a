//! The process signals of Pacer's run: SIGINT and SIGTERM stop every VM
//! cleanly, and a second one while that stop is under way ends the
//! process at once ([`StopSignals`]); SIGUSR1 asks for a snapshot of the scheduler's statistics. A
//! [`SignalGuard`] blocks them in the calling thread (and every thread it
//! spawns) and [`SignalGuard::watch`] turns them into [`ProcessSignal`]s on
//! one thread; the *watcher wake* (SIGRTMIN+1) ends the watcher's wait at
//! the end of a run.
//!
//! The engine's own signal, the vCPU kick (SIGRTMIN+0), is
//! `vcpu_engine::signals::kick_signal`; it is never blocked here.

use std::sync::atomic::{AtomicU64, Ordering};
use vmm_sys_util::signal::SIGRTMIN;

/// The signal that ends the signal watcher's wait (see [`SignalGuard::wake`]).
pub fn watcher_wake_signal() -> i32 {
    SIGRTMIN() + 1
}

/// A process-directed signal the watcher saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessSignal {
    /// SIGINT or SIGTERM: stop every VM.
    Stop(&'static str),
    /// SIGUSR1: write a statistics snapshot.
    Snapshot,
}

/// What a stop signal asks for ([`StopSignals`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopAction {
    /// The first: stop every VM cleanly.
    StopAll,
    /// Another while that stop is under way: end the process now, with
    /// this exit status (128 + the signal's number, as a shell reports a
    /// process a signal ended).
    ExitNow(i32),
}

/// The stop signals of one run. The first stops every VM cleanly (each
/// VM's results are written as it ends); a second ends the process at
/// once, so that a stop that does not finish (a bug that keeps a VM's
/// thread from leaving) cannot hold the operator, who keeps what was
/// written so far.
#[derive(Debug, Default)]
pub struct StopSignals {
    seen: u32,
}

impl StopSignals {
    /// The watcher saw the stop signal `name` (`SIGINT` or `SIGTERM`).
    pub fn on_stop(&mut self, name: &str) -> StopAction {
        self.seen += 1;
        if self.seen == 1 {
            return StopAction::StopAll;
        }
        let number = match name {
            "SIGINT" => libc::SIGINT,
            _ => libc::SIGTERM,
        };
        StopAction::ExitNow(128 + number)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_stop_signal_stops_the_vms_and_a_second_ends_the_process() {
        let mut stops = StopSignals::default();
        assert_eq!(stops.on_stop("SIGTERM"), StopAction::StopAll);
        assert_eq!(stops.on_stop("SIGINT"), StopAction::ExitNow(130));
        assert_eq!(stops.on_stop("SIGTERM"), StopAction::ExitNow(143));
    }
}
