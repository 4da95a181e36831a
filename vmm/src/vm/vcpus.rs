//! A VM's vCPUs once created: who runs them (host threads left to the
//! host kernel with KVM's in-kernel irqchip, or Pacer's engine with
//! Pacer's interrupt controller), starting them, pausing and resuming them
//! together, and stopping them with their outcomes and scheduling
//! statistics.

use super::{Vm, VmError};
use std::sync::Arc;
use std::time::Duration;
use vcpu_engine::irq::{InterruptSource, NoInterrupts};
use vcpu_engine::stats::VcpuSchedStats;
use vcpu_engine::vcpu::{VcpuExitHandler, VcpuHandle, VcpuOutcome, VcpuRunner};
use vcpu_engine::{Engine, VmSchedSpec, VmSlot};

/// How long a stopping VM waits for its vCPUs to leave their CPUs.
const VCPU_STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Who schedules the VM's vCPUs.
#[derive(Clone)]
pub enum VcpuScheduling {
    /// One thread per vCPU left to the host kernel, with KVM's in-kernel
    /// irqchip (`policy = "host"`). `pin`: bind the threads to the VM's
    /// core set.
    Host { pin: bool },
    /// Pacer's engine dispatches the vCPUs; no in-kernel irqchip (a guest
    /// HLT exits to Pacer), Pacer's own interrupt controller — except under
    /// `dispatch = "kvm-irqchip"`, where KVM's in-kernel irqchip serves
    /// the VM and the engine learns its halts from KVM.
    Scheduled(Arc<Engine>),
}

impl std::fmt::Debug for VcpuScheduling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VcpuScheduling::Host { pin } => write!(f, "Host {{ pin: {pin} }}"),
            VcpuScheduling::Scheduled(e) => write!(
                f,
                "Scheduled({}, {} dispatch)",
                e.policy_name(),
                e.dispatch_kind()
            ),
        }
    }
}

/// The VM's vCPUs once started.
pub(super) enum RunningVcpus {
    /// Host-mode threads.
    Host(Vec<VcpuHandle>),
    /// Registered with the engine.
    Scheduled(Arc<Engine>, VmSlot),
}

impl Vm {
    /// Spawn the vCPU threads and let them run.
    pub fn start(&mut self) -> Result<(), VmError> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let runners: Vec<VcpuRunner> = self
            .pending_vcpus
            .drain(..)
            .map(|(index, fd)| VcpuRunner::new(index, fd, self.handler.clone()))
            .collect();
        match self.options.scheduling.clone() {
            VcpuScheduling::Host { pin } => {
                let affinity = pin.then(|| self.spec.cpus.clone());
                let mut handles = Vec::with_capacity(runners.len());
                for runner in runners {
                    handles.push(VcpuHandle::spawn(
                        &self.spec.name,
                        runner,
                        affinity.clone(),
                    )?);
                }
                let handles = self.vcpus.insert(RunningVcpus::Host(handles));
                if let RunningVcpus::Host(handles) = handles {
                    for h in handles.iter_mut() {
                        h.start()?;
                    }
                }
            }
            VcpuScheduling::Scheduled(engine) => {
                let mut sched = VmSchedSpec::new(&self.spec.name, self.spec.cpus.clone());
                sched.class = self.spec.class;
                sched.priority = self.spec.priority;
                sched.shares = self.spec.shares;
                sched.coschedule = self.spec.coschedule;
                let handler: Arc<dyn VcpuExitHandler> = self.handler.clone();
                let irq: Arc<dyn InterruptSource> = match &self.irqchip {
                    Some(chip) => chip.clone(),
                    None => Arc::new(NoInterrupts),
                };
                // Attaches the chip's host to the slot (the chip's timers
                // and wake-ups reach this VM from now on).
                let slot = engine.add_vm(&sched, runners, irq, handler)?;
                engine.start_vm(slot);
                self.vcpus = Some(RunningVcpus::Scheduled(engine, slot));
            }
        }
        log::debug!(
            "[{}] vCPUs running {:.2} ms after VM start",
            self.spec.name,
            self.shared.start.elapsed().as_secs_f64() * 1e3
        );
        Ok(())
    }

    /// Pause every running vCPU (returns once all are out of KVM_RUN).
    pub fn pause(&mut self, timeout: Duration) -> Result<(), VmError> {
        match &mut self.vcpus {
            Some(RunningVcpus::Host(handles)) => {
                for h in handles.iter_mut() {
                    if h.state() == vcpu_engine::vcpu::VcpuState::Running {
                        h.pause(timeout)?;
                    }
                }
            }
            Some(RunningVcpus::Scheduled(engine, slot)) => engine.pause_vm(*slot, timeout)?,
            None => {}
        }
        Ok(())
    }

    /// Resume every paused vCPU.
    pub fn resume(&mut self, timeout: Duration) -> Result<(), VmError> {
        match &mut self.vcpus {
            Some(RunningVcpus::Host(handles)) => {
                for h in handles.iter_mut() {
                    if h.state() == vcpu_engine::vcpu::VcpuState::Paused {
                        h.resume(timeout)?;
                    }
                }
            }
            Some(RunningVcpus::Scheduled(engine, slot)) => engine.resume_vm(*slot),
            None => {}
        }
        Ok(())
    }

    /// Stop every vCPU; their outcomes and scheduling statistics.
    /// What each vCPU is doing now, one phrase each (Pacer's engine; the
    /// host kernel's threads say nothing).
    pub(super) fn vcpus_now(&self) -> Option<String> {
        let Some(RunningVcpus::Scheduled(engine, slot)) = &self.vcpus else {
            return None;
        };
        let now = engine.vm_engine_now(*slot);
        (!now.is_empty()).then(|| now.iter().map(|v| v.brief()).collect::<Vec<_>>().join("; "))
    }

    pub(super) fn stop_vcpus(&mut self) -> (Vec<VcpuOutcome>, Vec<VcpuSchedStats>) {
        match self.vcpus.take() {
            Some(RunningVcpus::Host(mut handles)) => {
                for h in handles.iter_mut() {
                    h.request_exit();
                }
                let outcomes: Vec<VcpuOutcome> = handles.into_iter().map(|h| h.join()).collect();
                // The kernel's counters, read by each thread as it ended.
                let sched = outcomes.iter().map(|o| o.thread_sched.clone()).collect();
                (outcomes, sched)
            }
            Some(RunningVcpus::Scheduled(engine, slot)) => engine
                .finish_vm(slot, VCPU_STOP_TIMEOUT)
                .into_iter()
                .map(|f| (f.outcome, f.sched))
                .unzip(),
            None => (Vec::new(), Vec::new()),
        }
    }
}
