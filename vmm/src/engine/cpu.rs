//! One scheduled host CPU: which vCPU owns it, which thread executes there
//! now (the one a kick signals), and whether the scheduler asked it to
//! reschedule.
//!
//! Every change of ownership happens under `owner`: the executor giving the
//! CPU back, and a waker dispatching onto an idle CPU. The executor runs
//! the guest without holding it.

use super::vcpu_state::EngineVcpu;
use crate::host_cpus::HostCpu;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use vcpu_sched::CpuId;

/// A scheduled host CPU.
pub struct CpuSlot {
    pub id: CpuId,
    pub host: HostCpu,
    /// The dispatched vCPU (None: idle).
    owner: Mutex<Option<Arc<EngineVcpu>>>,
    /// Signalled when an idle CPU is kicked (a worker waits here).
    idle: Condvar,
    /// The scheduler asked this CPU to call `schedule` (a wake that may
    /// preempt, or work for an idle CPU).
    pub kick_pending: AtomicBool,
    /// Kernel thread id of the thread executing on this CPU (0: none).
    pub executor: AtomicI32,
}

impl CpuSlot {
    pub fn new(id: CpuId, host: HostCpu) -> CpuSlot {
        CpuSlot {
            id,
            host,
            owner: Mutex::new(None),
            idle: Condvar::new(),
            kick_pending: AtomicBool::new(false),
            executor: AtomicI32::new(0),
        }
    }

    pub fn lock_owner(&self) -> MutexGuard<'_, Option<Arc<EngineVcpu>>> {
        self.owner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait (a worker with nothing to run) until kicked or `stop` holds.
    pub fn wait_idle<'a>(
        &'a self,
        mut owner: MutexGuard<'a, Option<Arc<EngineVcpu>>>,
        stop: impl Fn() -> bool,
    ) -> MutexGuard<'a, Option<Arc<EngineVcpu>>> {
        while !self.kick_pending.load(Ordering::Acquire) && !stop() {
            owner = self.idle.wait(owner).unwrap_or_else(|p| p.into_inner());
        }
        owner
    }

    /// Wake a worker waiting in [`CpuSlot::wait_idle`] (call with `owner`
    /// held, after setting what it waits for).
    pub fn wake_idle(&self) {
        self.idle.notify_all();
    }

    /// Signal the thread executing here, if any; returns whether one was.
    pub fn signal_executor(&self) -> bool {
        let tid = self.executor.load(Ordering::Acquire);
        if tid == 0 {
            return false;
        }
        if let Err(e) = crate::signals::kick_thread(tid) {
            log::warn!("kick of CPU {} (thread {tid}) failed: {e}", self.host);
        }
        true
    }
}
