//! Changes made while the VMs run (the control API's `set`): a vCPU's
//! affinity, priority and class, its shares and latency bound, the
//! scheduler's mode, a host CPU's service.
//!
//! `vcpu_sched` makes each change itself (`set_affinity`, `set_priority`,
//! `set_class`, `set_mode`, `set_cpu_enabled`: the handle, the penalty
//! and the statistics are kept) and answers with the CPUs that must look
//! again; the engine kicks them, as it does after a wake. A change that
//! takes a vCPU off the CPU it runs on (an affinity without that CPU, the
//! CPU out of service) returns once the vCPU has left that CPU, so the
//! caller's next look at the scheduler sees the move done. The checks of
//! the values themselves (a core set within `[host] cpus`, a priority
//! within its class) are the config's (`crate::sched_rules`), made by the
//! caller before it gets here.

use super::clock::now_ns;
use super::vcpu_state::{EngineVcpu, RunState};
use super::{Engine, EngineError, EngineVm};
use crate::host_cpus::{HostCpu, HostCpuSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vcpu_sched::bound::LatencyBound;
use vcpu_sched::{CpuId, CpuSet, Mode, Nanos, SchedClass, SchedError, VcpuScheduler};

/// How long a change waits for a vCPU to leave a CPU it may no longer use.
pub const MOVE_TIMEOUT: Duration = Duration::from_secs(2);

impl Engine {
    /// The live VM named `name`.
    pub fn vm_named(&self, name: &str) -> Option<Arc<EngineVm>> {
        self.vms
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flatten()
            .find(|vm| vm.name == name)
            .cloned()
    }

    /// Every live VM of the engine.
    pub fn live_vms(&self) -> Vec<Arc<EngineVm>> {
        self.vms
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// The mode the scheduler runs in now.
    pub fn mode(&self) -> Mode {
        self.scheduler().mode()
    }

    /// Make one change in the scheduler and kick the CPUs it names.
    fn change(
        &self,
        f: impl FnOnce(&dyn VcpuScheduler, Nanos) -> Result<Vec<CpuId>, SchedError>,
    ) -> Result<(), EngineError> {
        let kicks = f(self.scheduler(), now_ns())?;
        for cpu in kicks {
            self.kick_cpu(cpu);
        }
        Ok(())
    }

    /// Restrict `v` to the host CPUs `cpus` (which the caller checked are
    /// scheduled); returns once `v` runs on none of the others.
    pub fn set_vcpu_affinity(&self, v: &EngineVcpu, cpus: &HostCpuSet) -> Result<(), EngineError> {
        let _s = self.section();
        let allowed = self.cpus.affinity(cpus);
        let set = allowed.clone();
        if self.dispatch_kind().ranked() {
            // Where its thread may run when it is not an owner.
            *v.allowed.write().unwrap_or_else(|p| p.into_inner()) = cpus.clone();
            v.rank.allowed_changed(cpus);
        }
        self.change(|s, now| s.set_affinity(v.entity, set, now))?;
        self.enact_if_ranked(v);
        {
            // Halted inside KVM (`kvm-irqchip`), its thread stays bound to
            // the CPU it last ran on, where KVM would wake it: move it.
            let mut ctl = v.ctl();
            if ctl.state == RunState::HaltedInKvm
                && ctl.pinned_to.is_some_and(|c| !cpus.contains(c))
            {
                match crate::host_cpus::pin_thread(v.thread_id(), cpus) {
                    Ok(()) => ctl.pinned_to = None,
                    Err(e) => log::warn!("{}: cannot re-bind its thread: {e}", v.name),
                }
            }
        }
        self.wait_until(v, "affinity change", |state| match state {
            RunState::Running { cpu } => allowed.contains(cpu),
            _ => true,
        })
    }

    /// Change the base priority of `v` within its class.
    pub fn set_vcpu_priority(&self, v: &EngineVcpu, priority: u8) -> Result<(), EngineError> {
        let _s = self.section();
        self.change(|s, now| s.set_priority(v.entity, priority, now))?;
        self.enact_if_ranked(v);
        Ok(())
    }

    /// Change the operator weight of `v` (`vcpu_sched::shares`).
    pub fn set_vcpu_weight(&self, v: &EngineVcpu, weight: u32) -> Result<(), EngineError> {
        let _s = self.section();
        self.change(|s, now| s.set_weight(v.entity, weight, now))
    }

    /// Cap `v` at `permille` of one CPU (`None`: no cap).
    pub fn set_vcpu_cap(&self, v: &EngineVcpu, permille: Option<u32>) -> Result<(), EngineError> {
        let _s = self.section();
        self.change(|s, now| s.set_cap(v.entity, permille, now))?;
        // A capped vCPU is never a filler (ranked dispatch).
        v.capped.store(permille.is_some(), Ordering::Release);
        self.enact_if_ranked(v);
        Ok(())
    }

    /// Reserve `permille` of one CPU for `v` (0: none).
    pub fn set_vcpu_reservation(&self, v: &EngineVcpu, permille: u32) -> Result<(), EngineError> {
        let _s = self.section();
        self.change(|s, now| s.set_reservation(v.entity, permille, now))?;
        self.enact_if_ranked(v);
        Ok(())
    }

    /// Promise `v` a wake-to-run bound with its budget (`None`: lift it);
    /// the caller admitted the set of bounds (`vcpu_sched::bound::admit`).
    pub fn set_vcpu_latency_bound(
        &self,
        v: &EngineVcpu,
        bound: Option<LatencyBound>,
    ) -> Result<(), EngineError> {
        let _s = self.section();
        self.change(|s, now| s.set_latency_bound(v.entity, bound, now))?;
        self.enact_if_ranked(v);
        Ok(())
    }

    /// Change the class of `v` and its base priority in that class.
    pub fn set_vcpu_class(
        &self,
        v: &EngineVcpu,
        class: SchedClass,
        priority: u8,
    ) -> Result<(), EngineError> {
        let _s = self.section();
        self.change(|s, now| s.set_class(v.entity, class, priority, now))?;
        self.enact_if_ranked(v);
        Ok(())
    }

    /// Switch the scheduler's mode.
    pub fn set_mode(&self, mode: Mode) -> Result<(), EngineError> {
        let _s = self.section();
        self.change(|s, now| Ok(s.set_mode(mode, now)))
    }

    /// Under the ranked dispatch, give `v`'s thread the rank and CPUs of
    /// its new settings.
    fn enact_if_ranked(&self, v: &EngineVcpu) {
        if self.dispatch_kind().ranked() {
            self.enact(v);
        }
    }

    /// Put a scheduled host CPU in service or take it out; taking it out
    /// returns once it runs no vCPU.
    pub fn set_cpu_service(&self, cpu: HostCpu, in_service: bool) -> Result<(), EngineError> {
        let _s = self.section();
        let id = self
            .cpus
            .sched(cpu)
            .ok_or(SchedError::UnknownCpu(CpuId(cpu.0)))?;
        self.change(|s, now| s.set_cpu_enabled(id, in_service, now))?;
        if in_service {
            return Ok(());
        }
        let deadline = Instant::now() + MOVE_TIMEOUT;
        while self.slot(id).is_some_and(|s| s.lock_owner().is_some()) {
            if Instant::now() >= deadline {
                return Err(EngineError::Timeout {
                    what: format!("taking CPU {cpu} out of service"),
                    timeout: MOVE_TIMEOUT,
                });
            }
            if let Some(s) = self.slot(id) {
                s.signal_executor();
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }

    /// Wait (kicking its CPU) until `v`'s state satisfies `done`.
    fn wait_until(
        &self,
        v: &EngineVcpu,
        what: &str,
        done: impl Fn(RunState) -> bool,
    ) -> Result<(), EngineError> {
        let deadline = Instant::now() + MOVE_TIMEOUT;
        loop {
            let state = v.state();
            if done(state) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(EngineError::Timeout {
                    what: format!("{what} of {}", v.name),
                    timeout: MOVE_TIMEOUT,
                });
            }
            if let RunState::Running { cpu } = state {
                if let Some(s) = self.slot(cpu) {
                    s.signal_executor();
                }
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The scheduled host CPUs (`[host] cpus`).
    pub fn host_cpus(&self) -> HostCpuSet {
        self.cpus.host_set(&self.cpus.topology().all_cpus())
    }

    /// A scheduler affinity as host CPUs.
    pub fn host_set(&self, set: &CpuSet) -> HostCpuSet {
        self.cpus.host_set(set)
    }
}
