//! Pacer's default dispatch, `ranked`, as the simulator plays it (the
//! workload's `dispatch = "ranked"`).
//!
//! Under `ranked` the engine does not call `wake` when KVM wakes a halted
//! vCPU: KVM's in-kernel local APIC wakes the vCPU's thread itself, and the
//! thread holds a real-time rank while it is halted, so the host kernel
//! runs it the moment it wakes, preempting the CPU's owner (the vCPU the
//! policy dispatched there). The policy hears of it later, from the
//! engine's agent, which looks every `host.kvm_poll_us`:
//! - a vCPU that ran and halted again between two looks is charged as a
//!   wake, a run and a block (`VcpuScheduler::ran_unseen`);
//! - a vCPU found awake at two looks in a row is handed to the policy
//!   (`VcpuScheduler::wake_found_running`), which queues or runs it as it
//!   would any runnable vCPU; it runs in the policy's rotation until it
//!   blocks, and its next wake is the hypervisor's again.
//!
//! What the simulator plays, and what it leaves out:
//! - The real-time wake goes where Linux's `select_task_rq_rt` sends it:
//!   its last CPU if no real-time thread runs there (preempting the owner
//!   even if another CPU is idle), else the CPU of its affinity running
//!   the lowest rank (idle first, then an owner, then a real-time thread
//!   of a lower rank, which is put back to wait at the head of the real
//!   -time queue); with none, it waits for the first CPU a real-time
//!   thread leaves, highest rank first. The rank is the policy's
//!   effective priority (`VcpuScheduler::effective_priority`), as the
//!   engine's `rank.rs` maps it.
//! - The owner it preempts waits (runnable, not charged) and gets the rest
//!   of its quantum back when the real-time threads leave its CPU (a slice
//!   is CPU time under `ranked`), its turn ending at the latest three
//!   quanta after its dispatch, as the engine's give-back.
//! - A kick the policy sends to a CPU a real-time thread holds is carried
//!   out when that thread leaves it (the owner's thread takes the decision
//!   at its gate; the kernel does not run either before the real-time
//!   thread is done).
//! - Not played: the idle-class fillers (the policy here dispatches the
//!   next vCPU when an owner blocks, where the engine learns the block at
//!   its next look and a filler runs meanwhile), the agent's slower looks
//!   while nothing is halted, the engine's 20 ms slices for an owner that
//!   nothing waits behind, affinity changes made while it runs (a
//!   real-time wake keeps its group's first affinity), and the cost of a
//!   look.
//!
//! The eevdf policy is the host kernel's own model: there is no Pacer to
//! rank its threads, so `ranked` leaves it as it is.

use super::engine::Engine;
use super::events::EvKind;
use super::model::{PausedOwner, State};
use super::workload::SimError;
use crate::{Nanos, StopReason};

/// An owner held off by real-time threads gets its lost time back, but
/// its turn ends at the latest this many quanta after its dispatch (the
/// engine's `MAX_SLICE_STRETCH`).
const MAX_SLICE_STRETCH: Nanos = 3;

impl Engine {
    /// Whether the hypervisor wakes halted vCPUs by itself (the workload
    /// asks for `ranked` and the policy is not the host kernel's model).
    pub(super) fn hypervisor_wakes(&self) -> bool {
        self.look_ns > 0
    }

    /// Arm the agent's first look.
    pub(super) fn start_agent(&mut self) {
        if self.hypervisor_wakes() {
            self.push(self.look_ns, EvKind::AgentLook, 0, 0);
        }
    }

    /// The real-time rank of `e` (higher runs first).
    fn rank(&self, e: usize) -> u8 {
        self.sched
            .effective_priority(self.ents[e].id)
            .unwrap_or_default()
    }

    /// Whether `e` may run on `c` by its group's first affinity (a
    /// real-time thread keeps it; affinity changes made while the
    /// simulation runs are not played for it).
    pub(super) fn group_allows(&self, e: usize, c: usize) -> bool {
        let g = self.ents[e].group as usize;
        self.w.groups[g]
            .affinity
            .as_ref()
            .is_none_or(|a| a.contains(crate::CpuId(c as u32)))
    }

    /// The real-time thread on `c`, if one runs there.
    fn rt_on(&self, c: usize) -> Option<usize> {
        self.cpus[c]
            .current
            .map(|e| e as usize)
            .filter(|&e| self.ents[e].rt)
    }

    /// KVM woke halted vCPU `e` (a timer, an IPI): its thread runs at its
    /// real-time rank, now if a CPU of its affinity has no real-time
    /// thread of a rank as high, else when one leaves.
    pub(super) fn hypervisor_wake(&mut self, e: usize, now: Nanos) -> Result<(), SimError> {
        let ent = &mut self.ents[e];
        ent.sleep_gen = ent.sleep_gen.wrapping_add(1);
        ent.woke = true;
        ent.rt = true;
        ent.rt_looks = 0;
        ent.wake_at = now;
        ent.latency_pending = true;
        self.ready_add(e, now);
        match self.rt_cpu_for(e) {
            Some(c) => self.rt_run(e, c, now),
            None => {
                self.rt_waiting.push(e as u32);
                Ok(())
            }
        }
    }

    /// Where Linux would run real-time thread `e` now (None: it waits):
    /// its last CPU unless a real-time thread runs there, else the CPU of
    /// its affinity with the lowest rank running (idle, then an owner,
    /// then a real-time thread of a lower rank, which it preempts).
    fn rt_cpu_for(&self, e: usize) -> Option<usize> {
        let allowed = |c: usize| self.group_allows(e, c);
        let last = self.ents[e].last_cpu as usize;
        if last < self.cpus.len() && allowed(last) && self.rt_on(last).is_none() {
            return Some(last);
        }
        // The lowest "priority" first, as find_lowest_rq: idle (0), an
        // owner (1), a real-time thread (2 + its rank); ties to the lowest
        // index.
        let mine = self.rank(e);
        (0..self.cpus.len())
            .filter(|&c| allowed(c))
            .map(|c| {
                let level = match (self.cpus[c].current, self.rt_on(c)) {
                    (None, _) => 0u32,
                    (Some(_), None) => 1,
                    (Some(_), Some(r)) => 2 + u32::from(self.rank(r)),
                };
                (level, c)
            })
            .filter(|&(level, _)| level < 2 + u32::from(mine))
            .min()
            .map(|(_, c)| c)
    }

    /// Run real-time thread `e` on `c` now: the owner there (or a
    /// real-time thread of a lower rank) waits.
    fn rt_run(&mut self, e: usize, c: usize, now: Nanos) -> Result<(), SimError> {
        self.account(c, now);
        if let Some(r) = self.rt_on(c) {
            // Preempted by a higher rank: back to the head of the queue.
            let ran = now.saturating_sub(self.ents[r].rt_since);
            self.ents[r].unseen += ran;
            self.ready_add(r, now);
            self.rt_waiting.insert(0, r as u32);
        } else if let Some(o) = self.cpus[c].current {
            let cpu = &self.cpus[c];
            let granted = cpu.quantum_end.saturating_sub(cpu.dispatched_at);
            let latest = match cpu.turn_latest {
                // Held off again in the same turn: its limit stays.
                Some((at, latest)) if at == cpu.dispatched_at => latest,
                _ => cpu
                    .dispatched_at
                    .saturating_add(granted.saturating_mul(MAX_SLICE_STRETCH)),
            };
            let paused = PausedOwner {
                ent: o,
                left: cpu.quantum_end.saturating_sub(now),
                dispatched_at: cpu.dispatched_at,
                latest,
            };
            self.cpus[c].turn_latest = Some((paused.dispatched_at, latest));
            self.cpus[c].paused_owner = Some(paused);
            self.ready_add(o as usize, now);
        }
        if self.in_window(now) {
            self.cpus[c].hypervisor_wakes += 1;
            self.cpus[c].ctx += 1;
        }
        self.ents[e].rt_since = now;
        self.run_on(c, e, Nanos::MAX, now)?;
        self.update_corun(c, now);
        Ok(())
    }

    /// Real-time thread `e` left CPU `c` for `reason` (the CPU's timer or
    /// a kick came while it ran). Blocking ends its run; a kick for the
    /// owner waits for it to leave; anything else (it yielded) hands it to
    /// the policy as a vCPU found running.
    pub(super) fn rt_stopped(
        &mut self,
        c: usize,
        e: usize,
        now: Nanos,
        reason: StopReason,
    ) -> Result<(), SimError> {
        match reason {
            StopReason::Blocked => {
                let ran = now.saturating_sub(self.ents[e].rt_since);
                let ent = &mut self.ents[e];
                ent.rt = false;
                ent.unseen += ran;
                self.cpus[c].current = None;
                let vm = self.ents[e].vm;
                self.vm_halted(vm, now)?;
                self.rt_leave(c, now)
            }
            StopReason::Preempted | StopReason::Idle => {
                self.cpus[c].deferred_kick = true;
                self.arm(c, now);
                Ok(())
            }
            StopReason::QuantumEnd | StopReason::Yielded => self.found_running(e, now),
        }
    }

    /// A real-time thread left `c`: the next one waiting that may run
    /// there, else the owner it preempted (given the rest of its
    /// quantum), carrying out a kick that came meanwhile.
    fn rt_leave(&mut self, c: usize, now: Nanos) -> Result<(), SimError> {
        let next = (0..self.rt_waiting.len())
            .filter(|&i| self.group_allows(self.rt_waiting[i] as usize, c))
            // Highest rank, then the earliest (stable: max_by_key keeps
            // the last maximum, so compare the negated position).
            .max_by_key(|&i| (self.rank(self.rt_waiting[i] as usize), usize::MAX - i));
        if let Some(i) = next {
            let w = self.rt_waiting.remove(i) as usize;
            return self.rt_run(w, c, now);
        }
        let kick = std::mem::take(&mut self.cpus[c].deferred_kick);
        match self.cpus[c].paused_owner.take() {
            Some(p) => {
                if self.in_window(now) {
                    self.cpus[c].ctx += 1;
                }
                // The lost time back, within three quanta of its dispatch
                // (at least a microsecond, to end it through its timer).
                let end = now.saturating_add(p.left).min(p.latest).max(now + 1000);
                self.run_on(c, p.ent as usize, end, now)?;
                // Still the turn the policy dispatched (its cuts name it).
                self.cpus[c].dispatched_at = p.dispatched_at;
                self.update_corun(c, now);
                if kick {
                    return self.do_schedule(c, now, StopReason::Preempted);
                }
                Ok(())
            }
            None => {
                if self.in_window(now) {
                    self.cpus[c].ctx += 1;
                }
                self.cpus[c].timer_gen = self.cpus[c].timer_gen.wrapping_add(1);
                self.update_corun(c, now);
                if kick {
                    return self.do_schedule(c, now, StopReason::Idle);
                }
                Ok(())
            }
        }
    }

    /// Real-time vCPU `e` was found awake at two looks in a row (or gave
    /// up its CPU): the policy hears of its wake now, as a vCPU already
    /// running, and queues or runs it as it decides.
    fn found_running(&mut self, e: usize, now: Nanos) -> Result<(), SimError> {
        let left = match self.ents[e].state {
            State::Running(c) => {
                let c = c as usize;
                self.account(c, now);
                let ran = now.saturating_sub(self.ents[e].rt_since);
                self.ents[e].unseen += ran;
                self.cpus[c].current = None;
                self.ready_add(e, now);
                Some(c)
            }
            _ => {
                self.rt_waiting.retain(|&w| w as usize != e);
                None
            }
        };
        self.ents[e].rt = false;
        self.charge_unseen(e, now)?;
        // Counted on the CPU it runs on, or last ran on if it waited.
        let at = left.unwrap_or(self.ents[e].last_cpu as usize);
        if at < self.cpus.len() && self.in_window(now) {
            self.cpus[at].found_running += 1;
        }
        self.sched_calls += 1;
        let id = self.ents[e].id;
        let decision = self.sched.wake_found_running(id, now)?;
        self.wake_decided(e, decision, now)?;
        match left {
            Some(c) => self.rt_leave(c, now),
            None => Ok(()),
        }
    }

    /// Tell the policy what `e` ran unseen since the agent's last look.
    fn charge_unseen(&mut self, e: usize, now: Nanos) -> Result<(), SimError> {
        let ran = std::mem::take(&mut self.ents[e].unseen);
        if ran > 0 {
            self.sched_calls += 1;
            self.sched.ran_unseen(self.ents[e].id, ran, now)?;
        }
        Ok(())
    }

    /// The agent's look: runs the policy did not see are charged, and a
    /// real-time vCPU awake at its second look in a row is handed to the
    /// policy.
    pub(super) fn on_agent_look(&mut self, now: Nanos) -> Result<(), SimError> {
        for e in 0..self.ents.len() {
            if self.ents[e].rt {
                self.ents[e].rt_looks += 1;
                if self.ents[e].rt_looks >= 2 {
                    self.found_running(e, now)?;
                }
            } else if self.ents[e].state == State::Blocked {
                self.charge_unseen(e, now)?;
            }
        }
        self.push(now + self.look_ns, EvKind::AgentLook, 0, 0);
        Ok(())
    }
}
