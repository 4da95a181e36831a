//! The engine's clock and its per-thread quantum timer.
//!
//! Time is CLOCK_MONOTONIC in nanoseconds: the scheduler, the interrupt
//! controller's timers and the quantum timers all read the same clock, so a
//! deadline computed by one is armed as-is by another.
//!
//! The quantum timer is a POSIX timer that delivers the kick signal to one
//! thread (`SIGEV_THREAD_ID`): when a vCPU's time slice ends, the kernel
//! itself interrupts the thread that runs it, with no timer thread in
//! between. Each thread that runs vCPUs (a vCPU thread, or a per-CPU
//! worker) owns one.

use crate::signals::{current_tid, kick_signal};

/// Nanoseconds on CLOCK_MONOTONIC: the clock of every deadline the engine
/// takes or gives ([`crate::Engine::set_guest_timer`], the scheduler's
/// statistics, trace times), so a VMM converts guest time with it.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of the calling thread, ns (CLOCK_THREAD_CPUTIME_ID): what the
/// trace's `thread_cpu_ns` fields hold.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClockError {
    #[error("cannot create the quantum timer: {0}")]
    Create(std::io::Error),
}

/// A timer that kicks the thread that created it.
pub(crate) struct QuantumTimer {
    id: libc::timer_t,
}

// SAFETY: a timer_t is a kernel handle; timer_settime/timer_delete may be
// called from any thread of the process.
unsafe impl Send for QuantumTimer {}
// SAFETY: as for Send: `arm` and `disarm` are single timer_settime calls,
// which the kernel serialises per timer; the handle itself never changes.
unsafe impl Sync for QuantumTimer {}

impl QuantumTimer {
    /// A timer that sends the kick signal to the calling thread.
    pub(crate) fn for_current_thread() -> Result<QuantumTimer, ClockError> {
        // SAFETY: sigevent is plain data; all-zero is a valid start.
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = kick_signal();
        sev.sigev_notify_thread_id = current_tid();
        let mut id: libc::timer_t = std::ptr::null_mut();
        // SAFETY: valid pointers to a sigevent and a timer_t; the return
        // value is checked.
        let r = unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut id) };
        if r != 0 {
            return Err(ClockError::Create(std::io::Error::last_os_error()));
        }
        Ok(QuantumTimer { id })
    }

    /// Fire every `every_ns`, the first time `every_ns` from now.
    pub(crate) fn every(&self, every_ns: u64) {
        self.set_spec(
            libc::itimerspec {
                it_interval: timespec(every_ns),
                it_value: timespec(every_ns),
            },
            0,
        );
    }

    /// Fire once at `deadline_ns` (absolute, [`now_ns`]'s clock); a
    /// deadline already past fires at once.
    pub(crate) fn arm(&self, deadline_ns: u64) {
        self.set(timespec(deadline_ns.max(1)));
    }

    /// Do not fire.
    pub(crate) fn disarm(&self) {
        self.set(timespec(0));
    }

    fn set(&self, value: libc::timespec) {
        self.set_spec(
            libc::itimerspec {
                it_interval: timespec(0),
                it_value: value,
            },
            libc::TIMER_ABSTIME,
        );
    }

    fn set_spec(&self, spec: libc::itimerspec, flags: libc::c_int) {
        // SAFETY: `id` is a live timer of this process; `spec` is valid for
        // the call; the old value is not asked for.
        let r = unsafe { libc::timer_settime(self.id, flags, &spec, std::ptr::null_mut()) };
        if r != 0 {
            log::warn!(
                "quantum timer: timer_settime failed: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

impl Drop for QuantumTimer {
    fn drop(&mut self) {
        // SAFETY: `id` was created by timer_create and is deleted once.
        unsafe { libc::timer_delete(self.id) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_monotonic() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a && a > 0);
    }

    #[test]
    fn quantum_timer_kicks_its_thread() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static KICKS: AtomicUsize = AtomicUsize::new(0);
        extern "C" fn count(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
            KICKS.fetch_add(1, Ordering::SeqCst);
        }
        // The kick handler of `signals` would do the same job; this test
        // counts deliveries in a thread with a handler of its own.
        std::thread::spawn(|| {
            // SAFETY: sigaction with a valid handler for a real-time signal
            // no other test of this binary uses concurrently.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = count as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO;
                libc::sigaction(kick_signal() + 5, &sa, std::ptr::null_mut());
            }
            // A timer on another real-time signal than the process kick, so
            // this test cannot disturb others: same code path otherwise.
            let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
            sev.sigev_notify = libc::SIGEV_THREAD_ID;
            sev.sigev_signo = kick_signal() + 5;
            sev.sigev_notify_thread_id = current_tid();
            let mut id: libc::timer_t = std::ptr::null_mut();
            // SAFETY: as in `for_current_thread`.
            assert_eq!(
                unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut id) },
                0
            );
            let t = QuantumTimer { id };
            t.arm(now_ns() + 2_000_000);
            t.disarm();
            std::thread::sleep(std::time::Duration::from_millis(10));
            assert_eq!(KICKS.load(Ordering::SeqCst), 0, "disarmed timer fired");
            t.arm(now_ns() + 1_000_000);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while KICKS.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert_eq!(KICKS.load(Ordering::SeqCst), 1);
        })
        .join()
        .unwrap();
    }
}

/// How long a thread whose CPU went idle keeps polling for new work before
/// it sleeps (KVM's adaptive halt polling, in user space): a wake-up that
/// comes within the window finds the thread running on its CPU, with no
/// futex wake across CPUs. The window grows (doubling from `START_NS`) while
/// blocks end within `max`, and shrinks (halving) after a block longer than
/// `max`; `max = 0` turns polling off. A block lasts from the halt to the
/// dispatch that ends it (`EngineVcpu::dispatched_at`), not to the moment
/// the sleeping thread runs again: measured that way a slow futex wake-up
/// (100-500 us on a loaded host) made every block look longer than `max`,
/// and the window, once at 0, never grew again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HaltPoll {
    /// The current window (0: no polling).
    pub(crate) window_ns: u64,
    /// The longest window (`EngineConfig::halt_poll_ns`; 0: off).
    pub(crate) max_ns: u64,
}

impl HaltPoll {
    /// KVM's halt_poll_ns_grow_start.
    const START_NS: u64 = 10_000;

    /// No window yet, growing up to `max_ns`.
    pub(crate) fn new(max_ns: u64) -> HaltPoll {
        HaltPoll {
            window_ns: 0,
            max_ns,
        }
    }

    /// Spin until `done()` or the window ends; true if `done()` came true.
    pub(crate) fn poll(&self, done: impl Fn() -> bool) -> bool {
        if self.window_ns == 0 {
            return done();
        }
        let end = now_ns() + self.window_ns;
        loop {
            if done() {
                return true;
            }
            if now_ns() >= end {
                return false;
            }
            std::hint::spin_loop();
        }
    }

    /// Adapt the window to a block that lasted `blocked_ns`.
    pub(crate) fn adapt(&mut self, blocked_ns: u64) {
        if self.max_ns == 0 {
            self.window_ns = 0;
        } else if blocked_ns > self.max_ns {
            self.window_ns /= 2;
            if self.window_ns < Self::START_NS {
                self.window_ns = 0;
            }
        } else if blocked_ns > self.window_ns {
            self.window_ns = (self.window_ns * 2).clamp(Self::START_NS, self.max_ns);
        }
    }
}

#[cfg(test)]
mod poll_tests {
    use super::*;

    #[test]
    fn window_grows_with_short_blocks_and_shrinks_with_long_ones() {
        let mut p = HaltPoll::new(200_000);
        assert_eq!(p.window_ns, 0);
        p.adapt(50_000);
        assert_eq!(p.window_ns, 10_000);
        for _ in 0..10 {
            p.adapt(150_000);
        }
        // Doubling stops once blocks end within the window.
        assert_eq!(p.window_ns, 160_000);
        p.adapt(190_000);
        assert_eq!(p.window_ns, 200_000, "clamped at the maximum");
        p.adapt(5_000); // within the window: unchanged
        assert_eq!(p.window_ns, 200_000);
        p.adapt(10_000_000);
        assert_eq!(p.window_ns, 100_000);
        for _ in 0..5 {
            p.adapt(10_000_000);
        }
        assert_eq!(p.window_ns, 0);
        let mut off = HaltPoll::new(0);
        off.adapt(1);
        assert_eq!(off.window_ns, 0);
        assert!(off.poll(|| true) && !off.poll(|| false));
    }
}
