//! What a VM's controller, vCPU threads and devices share: the stop cause
//! (the first one wins; the controller waits on it), the results log the
//! guest's markers and records go to, and the subscribers to the VM's
//! events. Devices reach it as their `VmEventSink`; a `StopHandle` lets
//! anything outside the VM stop it, pause it or resume it: a pause or
//! resume is a request the controller thread (which owns the VM's vCPUs)
//! carries out between two waits for the stop, answering on a channel.

use crate::results::ResultsLog;
use devices::debug_exit::debug_exit_status;
use devices::{Marker, RecordError, ResultRecord, StopRequest, VmEventSink};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use vcpu_engine::vcpu::VcpuExitReason;

/// Why a VM stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopCause {
    GuestExit(u32),
    /// The guest wrote this value to isa-debug-exit (QEMU's convention).
    DebugExit(u32),
    Reset,
    /// The guest powered off through ACPI (S5 in PM1a_CNT).
    PowerOff,
    VcpuFailed {
        vcpu: u32,
        reason: VcpuExitReason,
    },
    Timeout(Duration),
    /// Stopped by its owner (API or signal).
    Requested,
}

impl StopCause {
    /// (status, ok, message)
    pub fn describe(&self) -> (String, bool, String) {
        match self {
            StopCause::GuestExit(0) => ("success".into(), true, String::new()),
            // The bench guest's exception path exits with 0x100 + vector.
            StopCause::GuestExit(s) if (0x100..0x120).contains(s) => (
                "guest_panic".into(),
                false,
                format!(
                    "guest exception, vector {} (exit status {s:#x}); details on its console",
                    s - 0x100
                ),
            ),
            StopCause::GuestExit(s) => (
                "guest_exit".into(),
                false,
                format!("guest exited with status {s}"),
            ),
            StopCause::DebugExit(v) => (
                "debug_exit".into(),
                *v == 0,
                format!(
                    "guest wrote {v} to isa-debug-exit (exit status {})",
                    debug_exit_status(*v)
                ),
            ),
            StopCause::Reset => ("reset".into(), true, "reset requested".into()),
            StopCause::PowerOff => (
                "poweroff".into(),
                true,
                "guest powered off (ACPI S5)".into(),
            ),
            StopCause::VcpuFailed { vcpu, reason } => {
                let status = match reason {
                    VcpuExitReason::TripleFault { .. } => "triple_fault",
                    VcpuExitReason::InternalError { .. } => "internal_error",
                    VcpuExitReason::FailEntry { .. } => "fail_entry",
                    VcpuExitReason::SystemEvent { .. } => "system_event",
                    VcpuExitReason::KvmError { .. } => "kvm_error",
                    _ => "vcpu_error",
                };
                (status.into(), false, format!("vcpu{vcpu}: {reason}"))
            }
            StopCause::Timeout(t) => (
                "timeout".into(),
                false,
                format!("timeout_s {:.1} exceeded", t.as_secs_f64()),
            ),
            StopCause::Requested => ("stopped".into(), false, "stopped by request".into()),
        }
    }

    /// The exit status the guest asked for, if it asked: the exit port's
    /// value, or `(v << 1) | 1` for a write of `v` to isa-debug-exit.
    pub fn guest_exit_status(&self) -> Option<u64> {
        match self {
            StopCause::GuestExit(s) => Some(u64::from(*s)),
            StopCause::DebugExit(v) => Some(debug_exit_status(*v)),
            _ => None,
        }
    }
}

/// Events a VM publishes to subscribers (tests, embedding code).
#[derive(Debug, Clone)]
pub enum VmEvent {
    Marker {
        vcpu: u32,
        marker: Marker,
        t_ms: f64,
    },
    Record {
        vcpu: u32,
        record: ResultRecord,
        t_ms: f64,
    },
    Rejected {
        vcpu: u32,
        error: RecordError,
    },
    Stopping(StopCause),
}

/// What the owner of a running VM may ask its controller to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmRequest {
    Pause,
    Resume,
}

/// Why a pause or resume was not carried out.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("VM {0} is stopping")]
    Stopping(String),
    #[error("VM {name} did not answer within {:.1} s", .timeout.as_secs_f64())]
    NoAnswer {
        name: String,
        timeout: std::time::Duration,
    },
    /// The VM tried and failed.
    #[error(transparent)]
    Failed(Box<super::VmError>),
}

/// The answer to a request.
pub type Answer = Result<(), RequestError>;

/// A request and where its answer goes.
type Pending = (VmRequest, Sender<Answer>);

/// What the controller waits for: the stop, or a request.
#[derive(Default)]
struct Mailbox {
    cause: Option<StopCause>,
    requests: VecDeque<Pending>,
}

/// Why the controller's wait ended.
pub(super) enum Woken {
    Stop(StopCause),
    Request(VmRequest, Sender<Answer>),
    Timeout,
}

/// The VM-wide state shared by vCPU threads and devices.
pub struct VmShared {
    pub(super) name: String,
    pub(super) start: Instant,
    run_start: Instant,
    stopping: AtomicBool,
    paused: AtomicBool,
    mailbox: Mutex<Mailbox>,
    cond: Condvar,
    pub(super) results: Mutex<ResultsLog>,
    pub(super) subscribers: Mutex<Vec<Sender<VmEvent>>>,
    /// A guest PANIC marker was reported (once: a guest may send many).
    panic_warned: AtomicBool,
}

impl VmShared {
    /// A running VM's state: created at `start`, part of a run that began
    /// at `run_start`, its results going to `results`.
    pub(super) fn new(
        name: &str,
        start: Instant,
        run_start: Instant,
        results: ResultsLog,
    ) -> VmShared {
        VmShared {
            name: name.to_string(),
            start,
            run_start,
            stopping: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            mailbox: Mutex::new(Mailbox::default()),
            cond: Condvar::new(),
            results: Mutex::new(results),
            subscribers: Mutex::new(Vec::new()),
            panic_warned: AtomicBool::new(false),
        }
    }

    fn t_ms(&self) -> (f64, f64) {
        let now = Instant::now();
        (
            now.duration_since(self.start).as_secs_f64() * 1e3,
            now.duration_since(self.run_start).as_secs_f64() * 1e3,
        )
    }

    fn publish(&self, ev: VmEvent) {
        let mut subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        subs.retain(|s| s.send(ev.clone()).is_ok());
    }

    /// Request the VM to stop; the first cause wins.
    pub fn stop(&self, cause: StopCause) {
        {
            let mut m = self.mailbox.lock().unwrap_or_else(|p| p.into_inner());
            if m.cause.is_some() {
                return;
            }
            let (status, ok, msg) = cause.describe();
            if ok {
                log::debug!("[{}] stopping: {status} {msg}", self.name);
            } else {
                log::error!("[{}] VM stopped: {status}: {msg}", self.name);
            }
            m.cause = Some(cause.clone());
            self.stopping.store(true, Ordering::Release);
        }
        self.cond.notify_all();
        self.publish(VmEvent::Stopping(cause));
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Whether the VM is paused (by a request).
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    pub(super) fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Release);
    }

    /// Ask the controller to pause or resume the VM; the answer comes on
    /// the returned channel (an error if the VM is stopping).
    pub fn request(&self, req: VmRequest) -> std::sync::mpsc::Receiver<Answer> {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut m = self.mailbox.lock().unwrap_or_else(|p| p.into_inner());
        if m.cause.is_some() {
            let _ = tx.send(Err(RequestError::Stopping(self.name.clone())));
        } else {
            m.requests.push_back((req, tx));
            self.cond.notify_all();
        }
        rx
    }

    /// Wait until a stop cause exists (it wins over requests), a request
    /// arrives, or `deadline` passes.
    pub(super) fn wait(&self, deadline: Option<Instant>) -> Woken {
        let mut m = self.mailbox.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(cause) = m.cause.as_ref() {
                let cause = cause.clone();
                for (_, tx) in m.requests.drain(..) {
                    let _ = tx.send(Err(RequestError::Stopping(self.name.clone())));
                }
                return Woken::Stop(cause);
            }
            if let Some((req, tx)) = m.requests.pop_front() {
                return Woken::Request(req, tx);
            }
            match deadline {
                None => m = self.cond.wait(m).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Woken::Timeout;
                    }
                    m = self
                        .cond
                        .wait_timeout(m, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
    }
}

impl VmEventSink for VmShared {
    fn marker(&self, vcpu: u32, marker: Marker) {
        let (t, tr) = self.t_ms();
        let admitted = self
            .results
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .marker(vcpu, marker, t, tr);
        if !admitted {
            return;
        }
        if marker == Marker::Panic && !self.panic_warned.swap(true, Ordering::Relaxed) {
            log::warn!("[{}] vcpu{vcpu}: guest PANIC marker", self.name);
        }
        self.publish(VmEvent::Marker {
            vcpu,
            marker,
            t_ms: t,
        });
    }

    fn record(&self, vcpu: u32, record: Result<ResultRecord, RecordError>) {
        let (t, tr) = self.t_ms();
        match record {
            Ok(r) => {
                let admitted = self
                    .results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .record(vcpu, r.clone(), t, tr);
                if !admitted {
                    return;
                }
                self.publish(VmEvent::Record {
                    vcpu,
                    record: r,
                    t_ms: t,
                });
            }
            Err(e) => {
                let mut res = self.results.lock().unwrap_or_else(|p| p.into_inner());
                if !res.rejected(vcpu, &e, t) {
                    return;
                }
                if res.rejected <= 16 {
                    log::warn!("[{}] vcpu{vcpu}: result record rejected: {e}", self.name);
                }
                drop(res);
                self.publish(VmEvent::Rejected { vcpu, error: e });
            }
        }
    }

    fn stop_request(&self, _vcpu: u32, request: StopRequest) {
        self.stop(match request {
            StopRequest::GuestExit(s) => StopCause::GuestExit(s),
            StopRequest::DebugExit(v) => StopCause::DebugExit(v),
            StopRequest::Reset => StopCause::Reset,
            StopRequest::PowerOff => StopCause::PowerOff,
        });
    }
}

/// A cloneable handle that stops, pauses or resumes a VM from anywhere
/// (signal handling, the control API).
#[derive(Clone)]
pub struct StopHandle(pub(super) Arc<VmShared>);

impl StopHandle {
    pub fn name(&self) -> &str {
        &self.0.name
    }
    /// Ask the VM to stop (its result says "stopped by request").
    pub fn stop(&self) {
        self.0.stop(StopCause::Requested);
    }
    pub fn is_stopping(&self) -> bool {
        self.0.is_stopping()
    }
    pub fn is_paused(&self) -> bool {
        self.0.is_paused()
    }
    /// Pause or resume the VM; returns once every vCPU is out of the guest
    /// (pause) or runnable again (resume), or why not, within `timeout`.
    pub fn request(&self, req: VmRequest, timeout: std::time::Duration) -> Answer {
        match self.0.request(req).recv_timeout(timeout) {
            Ok(r) => r,
            Err(_) => Err(RequestError::NoAnswer {
                name: self.0.name.clone(),
                timeout,
            }),
        }
    }
}
