//! The VMs of a run as the runner starts them, so that every one can be
//! stopped at once (SIGINT, SIGTERM, the control API's `stop`) and the
//! control API can find one by name.

use crate::vm::StopHandle;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The VMs of a run, so that all of them can be stopped at once (SIGINT,
/// SIGTERM). A VM registered after `stop_all` is stopped at once.
#[derive(Default)]
pub struct StopRegistry {
    stopped: AtomicBool,
    vms: Mutex<Vec<StopHandle>>,
    /// The VMs that have ended (those that failed to start included).
    ended: Mutex<Vec<String>>,
}

impl StopRegistry {
    pub fn register(&self, h: StopHandle) {
        let mut vms = self.vms.lock().unwrap_or_else(|p| p.into_inner());
        if self.stopped.load(Ordering::Acquire) {
            h.stop();
        }
        vms.push(h);
    }

    /// The handle of the VM named `name`, once it has started.
    pub fn find(&self, name: &str) -> Option<StopHandle> {
        self.vms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|h| h.name() == name)
            .cloned()
    }

    /// Whether the VM named `name` has ended.
    pub fn has_ended(&self, name: &str) -> bool {
        self.ended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|n| n == name)
    }

    /// Record that the VM named `name` has ended.
    pub(crate) fn ended(&self, name: &str) {
        self.ended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(name.to_string());
    }

    pub fn stop_all(&self) {
        self.stopped.store(true, Ordering::Release);
        for h in self.vms.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            h.stop();
        }
    }
}
