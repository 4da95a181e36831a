//! Runs many VMs in one process: one controller thread per VM (named
//! `<vm>/ctl`) creates it, runs it to completion and returns its result; a
//! failing VM never stops the others.

use crate::config::{Config, Policy};
use crate::results::{format_summary, RunResults};
use crate::vm::{open_kvm, StopHandle, Vm, VmOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("policy \"{0}\" is not available until the scheduled vCPU engine lands")]
    PolicyUnavailable(&'static str),
    #[error("{0}")]
    Kvm(#[from] crate::vm::VmError),
    #[error("cannot create log directory {path}: {source}")]
    LogDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Options of a run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// When the run started (process start for `pacer run`).
    pub run_start: Instant,
    /// Print each VM's summary to stdout as it finishes.
    pub print_summaries: bool,
}

/// The VMs of a run, so that all of them can be stopped at once (SIGINT,
/// SIGTERM). A VM registered after `stop_all` is stopped at once.
#[derive(Default)]
pub struct StopRegistry {
    stopped: AtomicBool,
    vms: Mutex<Vec<StopHandle>>,
}

impl StopRegistry {
    pub fn register(&self, h: StopHandle) {
        let mut vms = self.vms.lock().unwrap_or_else(|p| p.into_inner());
        if self.stopped.load(Ordering::Acquire) {
            h.stop();
        }
        vms.push(h);
    }

    pub fn stop_all(&self) {
        self.stopped.store(true, Ordering::Release);
        for h in self.vms.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            h.stop();
        }
    }
}

/// While alive, SIGINT and SIGTERM are blocked in the calling thread (and
/// so in every thread it spawns) and a watcher thread turns them into
/// `stop_all`: the VMs stop cleanly and their results are still reported.
struct SignalGuard {
    old_mask: libc::sigset_t,
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
            libc::sigaddset(&mut set, wake_signal());
        }
        set
    }

    fn install() -> Option<SignalGuard> {
        let set = Self::signal_set();
        // SAFETY: sigset_t is plain data; pthread_sigmask writes `old`.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to sigsets; the return value is checked.
        let ok = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) == 0 };
        ok.then_some(SignalGuard { old_mask: old })
    }

    /// Wait for SIGINT/SIGTERM and stop all VMs on one; return once `done`
    /// is set (the run's end wakes this thread with [`wake_signal`]).
    fn watch(registry: &StopRegistry, done: &AtomicBool, me: &std::sync::atomic::AtomicU64) {
        // SAFETY: pthread_self has no preconditions.
        me.store(unsafe { libc::pthread_self() } as u64, Ordering::Release);
        let set = Self::signal_set();
        // A safety net only; the wake signal ends the wait at once.
        let timeout = libc::timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        while !done.load(Ordering::Acquire) {
            // SAFETY: valid sigset and timespec; siginfo may be null.
            let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
            if sig == libc::SIGINT || sig == libc::SIGTERM {
                log::warn!(
                    "{} received: stopping all VMs",
                    if sig == libc::SIGINT {
                        "SIGINT"
                    } else {
                        "SIGTERM"
                    }
                );
                registry.stop_all();
            }
        }
    }

    /// Wake the watcher thread (after `done` is set).
    fn wake(me: &std::sync::atomic::AtomicU64) {
        let t = me.load(Ordering::Acquire);
        if t != 0 {
            // SAFETY: `t` is the pthread_t of the watcher, which is still
            // alive (it is joined only after this call, at the scope's end);
            // the signal is blocked there, so it only ends sigtimedwait.
            unsafe { libc::pthread_kill(t as libc::pthread_t, wake_signal()) };
        }
    }
}

/// Signal that ends the signal watcher's wait (vCPU kicks use SIGRTMIN+0).
pub fn wake_signal() -> i32 {
    vmm_sys_util::signal::SIGRTMIN() + 1
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `install`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut()) };
    }
}

/// Run every VM of `config` to completion.
pub fn run(config: &Config, opts: &RunOptions) -> Result<RunResults, RunError> {
    if config.host.policy != Policy::Host {
        return Err(RunError::PolicyUnavailable(config.host.policy.name()));
    }
    std::fs::create_dir_all(&config.host.log_dir).map_err(|source| RunError::LogDir {
        path: config.host.log_dir.clone(),
        source,
    })?;
    let kvm = open_kvm()?;
    let kvm = &kvm;
    let registry = &StopRegistry::default();
    let done = &AtomicBool::new(false);
    let watcher = &std::sync::atomic::AtomicU64::new(0);
    let guard = SignalGuard::install();
    let results = std::thread::scope(|s| {
        if guard.is_some() {
            let _ = std::thread::Builder::new()
                .name("pacer/signals".into())
                .spawn_scoped(s, move || SignalGuard::watch(registry, done, watcher));
        }
        let handles: Vec<_> = config
            .vms
            .iter()
            .map(|vm| {
                let options = VmOptions {
                    log_dir: Some(config.host.log_dir.clone()),
                    irqchip: true,
                    pin: true,
                    run_start: opts.run_start,
                };
                let print = opts.print_summaries;
                std::thread::Builder::new()
                    .name(format!("{}/ctl", vm.name))
                    .spawn_scoped(s, move || {
                        let r = Vm::run_with(kvm, vm, options, |h| registry.register(h));
                        if print {
                            crate::cli::out(&format_summary(&r));
                        }
                        r
                    })
            })
            .collect();
        let results = handles
            .into_iter()
            .zip(config.vms.iter())
            .map(|(h, vm)| match h.map(|h| h.join()) {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => failed(&vm.name, "VM controller thread panicked"),
                Err(e) => failed(&vm.name, &format!("cannot spawn controller thread: {e}")),
            })
            .collect::<Vec<_>>();
        done.store(true, Ordering::Release);
        SignalGuard::wake(watcher);
        results
    });
    drop(guard);
    Ok(RunResults {
        config: config.path.clone(),
        ok: results.iter().all(|r| r.ok),
        vms: results,
    })
}

fn failed(name: &str, msg: &str) -> crate::results::VmResult {
    log::error!("[{name}] {msg}");
    crate::results::VmResult::error(name, msg.to_string(), 0.0, "")
}
