//! Sibling sharing under `ranked` (the engine's `sibling_share.rs`) in the
//! model: a co-scheduled VM (`coschedule = "relaxed"` or `"turns"`) with
//! more vCPUs than CPUs it may use runs its queued siblings beside the
//! sibling that owns a CPU, and the host kernel takes turns between them.
//!
//! What the model plays, as the engine does it:
//! - **When.** A VM shares once none of its vCPUs has halted for
//!   [`SHARE_AFTER_QUIET`] (from the start, as its vCPUs start halted),
//!   and stops at its first halt.
//! - **Where.** A sibling queued in the policy (not at a real-time rank)
//!   shares a CPU its VM owns, one whose runner is its sibling: of those
//!   CPUs in index order, the one its place among its VM's vCPUs picks.
//! - **The kernel's turns.** At each tick of the host (`host_tick_us`,
//!   4000: HZ = 250 here) a shared CPU runs the thread of its set that has
//!   waited longest. The runner's quantum ends the turn of all of them:
//!   the policy charges it the whole slice, the VM's use of it.
//! - **Paced turns** (relaxed), the engine's `SiblingTurns::paced` and
//!   `SpinPace`. A slice's end (an exit the VM makes anyway) that finds
//!   the thread spinning starts the VM's looks at 4 ms. A look that finds
//!   a spin halves the interval, down to the sibling turn (250 us). One
//!   that finds none, after half an interval of the thread's run, doubles
//!   it, and past 8 ms the looks stop.
//!   - A look that finds the thread spinning, with a sibling beside it,
//!     gives the CPU away (a yield: the kernel runs the sibling that has
//!     waited longest) and arms its siblings' looks half a turn on.
//!   - A sibling that is handed the CPU that way and does not spin gives
//!     it back once it has run half a turn (a shootdown's answer). If a
//!     look found it spinning in the last 50 ms, it most likely holds
//!     what the spinner waits for, and is left to run.
//! - **A look that waited.** A thread's timer that fires while another
//!   thread holds the CPU is taken when the thread runs again, before its
//!   guest does (the signal makes it leave KVM_RUN before the entry), so
//!   the look sees the guest where it stopped.
//! - **Fixed turns** (`turns`): a look every sibling turn; a spinning
//!   thread that has run half a turn since it last gave its CPU away gives
//!   it to the sibling beside it.
//! - **A halt while sharing.** A sibling that halts while it shares ends
//!   its VM's sharing. The policy, which has it queued, hears of the halt
//!   when it dispatches it (it halts at once); a wake before that only
//!   makes it runnable again.
//!
//! Not played: the cost of a look (an exit: microseconds on hardware
//! KVM, ~0.15 ms of a guest's progress on the project's software KVM),
//! the kernel's wake-up preemption between the threads (a thread placed
//! beside an owner waits for the tick), and the engine's placement at its
//! own moments (here after every decision of the policy and at each
//! tick).

use super::engine::Engine;
use super::events::EvKind;
use super::model::{Pacing, Phase, State, VmShare};
use super::SimError;
use crate::{Coschedule, Nanos, StopReason};

/// A VM shares its CPUs only once none of its vCPUs has halted for this
/// long (the engine's `SHARE_AFTER_QUIET_NS`).
const SHARE_AFTER_QUIET: Nanos = 20_000_000;
/// A sibling that spun this recently owes a spinner nothing (the engine's
/// `GIVE_BACK_AFTER_SPIN_NS`).
const GIVE_BACK_AFTER_SPIN: Nanos = 50_000_000;
/// The pace's longest interval, as a shift of the sibling turn (8 ms).
const PACE_MAX_SHIFT: u32 = 5;
/// Where a spin seen at an exit starts the looks (4 ms).
const PACE_START_SHIFT: u32 = 4;

impl Engine {
    /// The VMs' sharing from the workload: under `ranked`, each VM of a
    /// co-scheduled group with more vCPUs than CPUs it may use.
    /// Empty if no VM may share (each decision's sharing steps then cost
    /// nothing).
    pub(super) fn sharing_from_workload(&self) -> Vec<VmShare> {
        if !self.hypervisor_wakes() {
            return Vec::new();
        }
        let vms = self
            .ents
            .iter()
            .map(|e| e.vm as usize + 1)
            .max()
            .unwrap_or(0);
        let mut shares = vec![VmShare::default(); vms];
        for e in self.ents.iter().filter(|e| e.wide) {
            let pacing = match self.w.groups[e.group as usize].coschedule {
                Some(Coschedule::Relaxed) => Pacing::Paced,
                Some(Coschedule::Turns) => Pacing::Fixed,
                _ => continue,
            };
            shares[e.vm as usize].pacing = Some(pacing);
        }
        if shares.iter().all(|s| s.pacing.is_none()) {
            shares.clear();
        }
        shares
    }

    /// Arm the host's first tick if a VM may share.
    pub(super) fn start_kernel_ticks(&mut self) {
        if !self.vm_share.is_empty() {
            self.push(self.host_tick, EvKind::KernelTick, 0, 0);
        }
    }

    fn pacing(&self, vm: u32) -> Option<Pacing> {
        self.vm_share.get(vm as usize).and_then(|s| s.pacing)
    }

    /// Whether VM `vm`'s queued siblings share its CPUs at `now`.
    fn shares_now(&self, vm: u32, now: Nanos) -> bool {
        self.vm_share.get(vm as usize).is_some_and(|s| {
            s.pacing.is_some() && now.saturating_sub(s.halted_at) >= SHARE_AFTER_QUIET
        })
    }

    fn turn_ns(&self) -> Nanos {
        self.w.sched.tunables.sibling_turn.max(1)
    }

    /// The interval between `vm`'s looks, if it looks.
    fn look_interval(&self, vm: u32) -> Option<Nanos> {
        let s = self.vm_share.get(vm as usize)?;
        match s.pacing? {
            Pacing::Fixed => Some(self.turn_ns()),
            Pacing::Paced => s.shift.map(|k| self.turn_ns() << k.min(PACE_MAX_SHIFT)),
        }
    }

    /// The threads on CPU `c` when its runner's VM shares: the runner and
    /// the siblings beside it, in index order (empty otherwise).
    fn sharing_set(&self, c: usize, now: Nanos) -> Vec<usize> {
        let Some(r) = self.cpus[c].runner.map(|r| r as usize) else {
            return Vec::new();
        };
        if !self.shares_now(self.ents[r].vm, now) {
            return Vec::new();
        }
        (0..self.ents.len())
            .filter(|&s| s == r || self.ents[s].beside == Some(c as u32))
            .collect()
    }

    /// Of the threads sharing `c` other than `x`, the one waiting longest.
    fn longest_waiting(&self, c: usize, x: usize, now: Nanos) -> Option<usize> {
        self.sharing_set(c, now)
            .into_iter()
            .filter(|&s| s != x && self.ents[s].state == State::Ready && !self.ents[s].rt)
            .min_by_key(|&s| (self.ents[s].ready_since, s))
    }

    /// The kernel runs `to` on shared CPU `c` in place of its current
    /// thread, within the runner's turn.
    fn switch_to(&mut self, c: usize, to: usize, now: Nanos) -> Result<(), SimError> {
        self.account(c, now);
        if let Some(x) = self.cpus[c].current.map(|x| x as usize) {
            if self.ents[x].state != State::Blocked {
                self.ready_add(x, now);
            }
        }
        if self.in_window(now) {
            self.cpus[c].ctx += 1;
        }
        let (end, dispatched_at) = (self.cpus[c].quantum_end, self.cpus[c].dispatched_at);
        self.run_on(c, to, end, now)?;
        self.cpus[c].dispatched_at = dispatched_at;
        self.update_corun(c, now);
        Ok(())
    }

    /// Place each sharing VM's queued siblings beside the CPUs it owns.
    pub(super) fn place_beside(&mut self, now: Nanos) {
        for vm in 0..self.vm_share.len() as u32 {
            if !self.shares_now(vm, now) {
                continue;
            }
            let owned: Vec<usize> = (0..self.cpus.len())
                .filter(|&c| {
                    self.cpus[c]
                        .runner
                        .is_some_and(|r| self.ents[r as usize].vm == vm)
                })
                .collect();
            if owned.is_empty() {
                continue;
            }
            let members: Vec<usize> = (0..self.ents.len())
                .filter(|&s| self.ents[s].vm == vm)
                .collect();
            for (index, &s) in members.iter().enumerate() {
                let e = &self.ents[s];
                let queued = e.state == State::Ready && !e.rt && e.beside.is_none();
                let runs_a_cpu = self.cpus.iter().any(|c| c.runner == Some(s as u32));
                if !queued || runs_a_cpu {
                    continue;
                }
                let allowed: Vec<usize> = owned
                    .iter()
                    .copied()
                    .filter(|&c| self.group_allows(s, c))
                    .collect();
                if allowed.is_empty() {
                    continue;
                }
                let c = allowed[index % allowed.len()];
                self.ents[s].beside = Some(c as u32);
                if self.in_window(now) {
                    self.cpus[c].placed_beside += 1;
                }
                if self.pacing(vm) == Some(Pacing::Fixed) {
                    let r = self.cpus[c].runner.map_or(s, |r| r as usize);
                    for t in [s, r] {
                        if !self.ents[t].turn.armed {
                            self.arm_look(t, now + self.turn_ns());
                        }
                    }
                }
            }
        }
    }

    /// The policy decides on CPU `c` (for `reason`): its turn ends for
    /// every thread that shared it. A slice's end is an exit the VM makes
    /// anyway: a paced thread found spinning there starts its VM's looks.
    pub(super) fn turn_ends(&mut self, c: usize, reason: StopReason, now: Nanos) {
        self.cpus[c].runner = None;
        if self.vm_share.is_empty() {
            return;
        }
        if let Some(x) = self.cpus[c].current.map(|x| x as usize) {
            let vm = self.ents[x].vm;
            if reason != StopReason::Blocked
                && self.pacing(vm) == Some(Pacing::Paced)
                && self.shares_now(vm, now)
                && self.spinning(x)
            {
                self.spin_seen(x, now);
            }
        }
        for s in 0..self.ents.len() {
            if self.ents[s].beside == Some(c as u32) {
                self.ents[s].beside = None;
            }
        }
    }

    /// The engine's `SpinPace::spin_seen` and `SiblingTurns::spin_seen`.
    fn spin_seen(&mut self, x: usize, now: Nanos) {
        let vm = self.ents[x].vm as usize;
        self.vm_share[vm].shift.get_or_insert(PACE_START_SHIFT);
        self.ents[x].turn.spun_at = Some(now);
        if let Some(i) = self.look_interval(vm as u32) {
            self.arm_look(x, now + i);
        }
    }

    fn arm_look(&mut self, e: usize, at: Nanos) {
        let cpu_clock = self.ents[e].cpu_clock;
        let t = &mut self.ents[e].turn;
        t.gen = t.gen.wrapping_add(1);
        t.armed = true;
        t.pending = false;
        t.armed_cpu = cpu_clock;
        let gen = self.ents[e].turn.gen;
        self.push(at, EvKind::TurnLook, e as u32, gen);
    }

    fn disarm_look(&mut self, e: usize) {
        let t = &mut self.ents[e].turn;
        t.gen = t.gen.wrapping_add(1);
        t.armed = false;
        t.pending = false;
    }

    /// `e` begins to run on `c`: a look that came while it waited is taken
    /// now, before its guest runs (a timer signal that waited for the
    /// thread makes it leave KVM_RUN before the guest entry, so the look
    /// sees the guest where it stopped). True: it gave the CPU away.
    pub(super) fn look_at_resume(
        &mut self,
        c: usize,
        e: usize,
        now: Nanos,
    ) -> Result<bool, SimError> {
        if !std::mem::take(&mut self.ents[e].turn.pending) {
            return Ok(false);
        }
        self.on_turn_look(e, now)?;
        Ok(self.cpus[c].current != Some(e as u32))
    }

    /// The host's tick: queued siblings are placed, and each shared CPU
    /// runs the thread of its set that has waited longest.
    pub(super) fn on_kernel_tick(&mut self, now: Nanos) -> Result<(), SimError> {
        self.place_beside(now);
        for c in 0..self.cpus.len() {
            let Some(x) = self.cpus[c].current.map(|x| x as usize) else {
                continue;
            };
            if self.ents[x].rt {
                continue;
            }
            if let Some(y) = self.longest_waiting(c, x, now) {
                self.switch_to(c, y, now)?;
            }
        }
        self.push(now + self.host_tick, EvKind::KernelTick, 0, 0);
        Ok(())
    }

    /// A sibling `x` that shares CPU `c` (it is not its runner) halted or
    /// yielded: a halt ends its VM's sharing (its runner runs again), a
    /// yield gives the CPU to the thread beside it that waited longest.
    /// False: `x` runs `c` for the policy (the caller asks the policy).
    pub(super) fn sharer_stopped(
        &mut self,
        c: usize,
        x: usize,
        reason: StopReason,
        now: Nanos,
    ) -> Result<bool, SimError> {
        if self.cpus[c].runner == Some(x as u32) || self.ents[x].beside != Some(c as u32) {
            return Ok(false);
        }
        match reason {
            StopReason::Blocked => {
                self.ents[x].halted_queued = true;
                self.ents[x].beside = None;
                let vm = self.ents[x].vm;
                self.vm_halted(vm, now)?;
                // The VM shares no more: its runner has the CPU back.
                self.leave_share(c, x, now)?;
                Ok(true)
            }
            StopReason::Yielded => {
                let to = self.longest_waiting(c, x, now).unwrap_or(x);
                self.switch_to(c, to, now)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// A vCPU of `vm` halted: its VM shares no more. Each of its siblings
    /// beside an owner leaves (the one running there gives the CPU back to
    /// the runner).
    pub(super) fn vm_halted(&mut self, vm: u32, now: Nanos) -> Result<(), SimError> {
        let Some(s) = self.vm_share.get_mut(vm as usize) else {
            return Ok(());
        };
        if s.pacing.is_none() {
            return Ok(());
        }
        s.halted_at = now;
        for x in 0..self.ents.len() {
            let Some(c) = self.ents[x].beside.take().map(|c| c as usize) else {
                continue;
            };
            self.leave_share(c, x, now)?;
        }
        Ok(())
    }

    /// `x` no longer shares CPU `c`: if it runs there (or waits there
    /// behind a real-time thread), the runner takes its place (a halted
    /// `x` stays halted).
    fn leave_share(&mut self, c: usize, x: usize, now: Nanos) -> Result<(), SimError> {
        let r = self.cpus[c].runner.map(|r| r as usize);
        if let Some(p) = self.cpus[c].paused_owner.as_mut() {
            if p.ent as usize == x {
                if let Some(r) = r {
                    p.ent = r as u32;
                }
            }
        }
        if self.cpus[c].current == Some(x as u32) {
            match r.filter(|&r| self.ents[r].state == State::Ready) {
                Some(r) => self.switch_to(c, r, now)?,
                None => {
                    self.account(c, now);
                    if self.ents[x].state != State::Blocked {
                        self.ready_add(x, now);
                    }
                    self.cpus[c].current = None;
                }
            }
        }
        Ok(())
    }

    /// The policy dispatches `x` on another CPU: if it shared one, it
    /// leaves it.
    pub(super) fn take_from_share(&mut self, x: usize, now: Nanos) -> Result<(), SimError> {
        if let Some(c) = self.ents[x].beside.take().map(|c| c as usize) {
            self.leave_share(c, x, now)?;
        }
        Ok(())
    }

    /// Whether look event `gen` of `e` is its newest.
    pub(super) fn turn_look_current(&self, e: usize, gen: u32) -> bool {
        self.ents.get(e).is_some_and(|x| x.turn.gen == gen)
    }

    /// `e`'s turn timer: the engine's `RankedGate::turn_tick`.
    pub(super) fn on_turn_look(&mut self, e: usize, now: Nanos) -> Result<(), SimError> {
        let State::Running(c) = self.ents[e].state else {
            self.ents[e].turn.pending = true;
            return Ok(());
        };
        let (c, vm) = (c as usize, self.ents[e].vm);
        self.ents[e].turn.armed = false;
        if self.ents[e].rt || self.cpus[c].current != Some(e as u32) {
            return Ok(());
        }
        self.account(c, now);
        let turn = self.turn_ns();
        let paced = self.pacing(vm) == Some(Pacing::Paced);
        let others: Vec<usize> = self
            .sharing_set(c, now)
            .into_iter()
            .filter(|&s| s != e && self.ents[s].state == State::Ready)
            .collect();
        let beside = !others.is_empty();
        let spinner_waits = others.iter().any(|&s| self.ents[s].spun_at_stop);
        let spinning = beside && self.spinning(e);
        self.ents[e].spun_at_stop = false;
        let cpu_now = self.ents[e].cpu_clock;
        if !spinning && spinner_waits {
            // A look for a give-back is neither a hit nor a miss. Fixed
            // turns owe nothing (their timer is periodic); a sibling that
            // spun lately is left to run, unlooked-into.
            if !paced {
                self.arm_look(e, now + turn);
                return Ok(());
            }
            if self.spun_within(e, now, GIVE_BACK_AFTER_SPIN) {
                return Ok(());
            }
            let since = *self.ents[e].turn.owes_since.get_or_insert(cpu_now);
            if (cpu_now - since).saturating_mul(2) < turn {
                self.arm_look(e, now + turn / 2);
                return Ok(());
            }
            self.ents[e].turn.owes_since = None;
            match self.look_interval(vm) {
                Some(i) => self.arm_look(e, now + i),
                None => self.disarm_look(e),
            }
            if self.in_window(now) {
                self.cpus[c].turns_given_back += 1;
            }
            self.ents[e].turn.yielded_cpu = cpu_now;
            if let Some(to) = self.longest_waiting(c, e, now) {
                self.switch_to(c, to, now)?;
            }
            return Ok(());
        }
        if spinning && (cpu_now - self.ents[e].turn.yielded_cpu).saturating_mul(2) >= turn {
            self.ents[e].spun_at_stop = true;
            if paced {
                for &s in &others {
                    self.arm_look(s, now + turn / 2);
                }
            }
            if self.in_window(now) {
                self.cpus[c].spin_yields += 1;
            }
            self.ents[e].turn.yielded_cpu = cpu_now;
            if let Some(to) = self.longest_waiting(c, e, now) {
                self.switch_to(c, to, now)?;
            }
        }
        self.looked(e, vm, spinning, beside, cpu_now, now);
        Ok(())
    }

    /// The engine's `SiblingTurns::looked`: the pace learns from the look,
    /// and the next is armed (fixed turns: a turn on).
    fn looked(
        &mut self,
        e: usize,
        vm: u32,
        spinning: bool,
        beside: bool,
        cpu_now: Nanos,
        now: Nanos,
    ) {
        if self.pacing(vm) != Some(Pacing::Paced) {
            if beside {
                self.arm_look(e, now + self.turn_ns());
            }
            return;
        }
        self.ents[e].turn.owes_since = None;
        if spinning {
            self.ents[e].turn.spun_at = Some(now);
        }
        let armed_cpu = self.ents[e].turn.armed_cpu;
        if beside {
            let turn = self.turn_ns();
            let shift = &mut self.vm_share[vm as usize].shift;
            if spinning {
                *shift = Some(shift.map_or(PACE_START_SHIFT - 1, |k| k.saturating_sub(1)));
            } else if let Some(k) = *shift {
                let interval = turn << k.min(PACE_MAX_SHIFT);
                if (cpu_now - armed_cpu).saturating_mul(2) >= interval {
                    *shift = (k < PACE_MAX_SHIFT).then_some(k + 1);
                }
            }
        }
        match self.look_interval(vm).filter(|_| beside) {
            Some(i) => self.arm_look(e, now + i),
            None => self.disarm_look(e),
        }
    }

    fn spun_within(&self, e: usize, now: Nanos, ns: Nanos) -> bool {
        self.ents[e]
            .turn
            .spun_at
            .is_some_and(|t| now.saturating_sub(t) < ns)
    }

    /// The policy dispatches `e`, which halted while it shared: it halts
    /// at once (true; the caller tells the policy).
    pub(super) fn dispatched_halted(&mut self, e: usize) -> bool {
        if !self.ents[e].halted_queued {
            return false;
        }
        self.ents[e].halted_queued = false;
        self.ents[e].state == State::Blocked
    }

    /// A wake of `e`, which halted while queued in the policy: it is
    /// runnable again, still queued there (true), or an ordinary wake.
    pub(super) fn woke_queued(&mut self, e: usize, now: Nanos) -> bool {
        if !std::mem::take(&mut self.ents[e].halted_queued) {
            return false;
        }
        let ent = &mut self.ents[e];
        ent.sleep_gen = ent.sleep_gen.wrapping_add(1);
        ent.woke = true;
        debug_assert_eq!(ent.phase, Phase::Fresh);
        self.ready_add(e, now);
        true
    }
}
