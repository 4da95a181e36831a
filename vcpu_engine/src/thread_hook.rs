//! A hook the embedding VMM runs at the start of every thread the engine
//! (and its tracer) starts: Pacer installs its per-thread seccomp filter
//! there. One per process, like the filters it exists for.

use std::sync::RwLock;

/// Which of the engine's threads is starting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineThread {
    /// A thread that executes KVM_RUN: a vCPU thread (threads dispatch,
    /// host-mode handles) or a per-CPU worker (workers dispatch).
    Vcpu,
    /// The guest timer thread.
    Timers,
    /// The trace's drain thread (writes the trace file).
    Trace,
}

static HOOK: RwLock<Option<fn(EngineThread)>> = RwLock::new(None);

/// Run `hook` on every engine thread that starts from now on, on that
/// thread, before it does anything else (`None`: run nothing).
pub fn set_thread_start_hook(hook: Option<fn(EngineThread)>) {
    *HOOK.write().unwrap_or_else(|p| p.into_inner()) = hook;
}

/// Called by each engine thread as it starts.
pub(crate) fn thread_started(kind: EngineThread) {
    let hook = *HOOK.read().unwrap_or_else(|p| p.into_inner());
    if let Some(h) = hook {
        h(kind);
    }
}
