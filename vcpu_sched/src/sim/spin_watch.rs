//! The engine's spin watch (`vcpu_engine::spin_watch`: pause-loop
//! exiting in software, relaxed co-scheduling under `threads`) in the
//! model, when the workload sets `spin_watch`. The engine tells a spin
//! from the guest's code; here a vCPU spins in the phases that spin (the
//! lock, the barrier, a shootdown's wait). The looks come at the same
//! moments as there: when a sibling leaves its CPU runnable outside a
//! spin (after the kick latency), and a fixed time into a turn that
//! starts while a sibling waits parked. A look costs nothing here. A
//! responder that a shootdown IPI reached parked gives the initiator the
//! rest of its next turn at that look, unless it spins, if the initiator
//! waits parked for the answer, as the engine's does.

use super::engine::Engine;
use super::model::{Phase, State};
use super::SimError;
use crate::{Nanos, StopReason};

/// How long into its turn a vCPU is looked at, while a likely holder of
/// its VM waits parked (the engine's `LOOK_AFTER_DISPATCH_NS`).
const LOOK_AFTER_DISPATCH: Nanos = 100_000;
/// The engine's backoff (`LOOK_MISSES_BEFORE_BACKOFF`,
/// `LOOK_BACKOFF_EVERY`): a VM whose looks into a turn found no spin in
/// the last 64 is looked into one turn in 16. A look costs nothing here,
/// so the model only shows what the backoff misses.
const LOOK_MISSES_BEFORE_BACKOFF: u32 = 64;
const LOOK_BACKOFF_EVERY: u32 = 16;

impl Engine {
    /// Whether `e` is in a phase that spins (the lock, the barrier, a
    /// shootdown's wait).
    pub(super) fn spinning(&self, e: usize) -> bool {
        matches!(
            self.ents[e].phase,
            Phase::WaitLock | Phase::WaitBarrier | Phase::WaitShootdown
        )
    }

    /// A sibling of `e` that waits parked and was not spinning when it
    /// stopped: the likely holder of what `e` waits for; of several, the
    /// one that stopped last (the engine's rule).
    fn parked_holder(&self, e: usize) -> Option<usize> {
        let vm = self.ents[e].vm;
        (0..self.ents.len())
            .filter(|&s| {
                s != e
                    && self.ents[s].vm == vm
                    && self.ents[s].state == State::Ready
                    && !self.ents[s].spun_at_stop
            })
            .max_by_key(|&s| self.ents[s].stopped_holding_at)
    }

    /// The next sibling of `e` in index order that waits parked, if `e`'s
    /// VM is wider than its CPUs (where the scheduler lends it the rest of
    /// the slice) and no sibling runs (the engine's rule).
    fn next_parked(&self, e: usize) -> Option<usize> {
        let (vm, n) = (self.ents[e].vm, self.ents.len());
        let running = |s: usize| {
            s != e && self.ents[s].vm == vm && matches!(self.ents[s].state, State::Running(_))
        };
        if !self.ents[e].wide || (0..n).any(running) {
            return None;
        }
        (1..n)
            .map(|k| (e + k) % n)
            .find(|&s| self.ents[s].vm == vm && self.ents[s].state == State::Ready)
    }

    /// Where a spinning `e`'s CPU goes, as the engine's watch chooses:
    /// the likely holder if one waits parked (`yield_to`), else (a VM
    /// wider than its CPUs) the next parked sibling (`pass_turn`, true).
    fn yield_target(&self, e: usize) -> Option<(usize, bool)> {
        self.parked_holder(e)
            .map(|h| (h, false))
            .or_else(|| self.next_parked(e).map(|s| (s, true)))
    }

    fn look_at(&mut self, e: usize, at: Nanos) {
        let gen = self.ents[e].look_gen.wrapping_add(1);
        self.ents[e].look_gen = gen;
        self.ents[e].turn_look = false;
        self.push(at, super::events::EvKind::Look, e as u32, gen);
    }

    /// `p` left its CPU for `reason`: note whether it was spinning; if
    /// it left runnable outside a spin, its running siblings look.
    pub(super) fn watch_stop(&mut self, p: usize, reason: StopReason, now: Nanos) {
        if !self.ents[p].watch {
            return;
        }
        let runnable = matches!(reason, StopReason::QuantumEnd | StopReason::Preempted);
        let spun = match reason {
            StopReason::Yielded => true,
            _ => runnable && self.spinning(p),
        };
        self.ents[p].spun_at_stop = spun;
        self.ents[p].turn_for = None;
        if !runnable || spun {
            return;
        }
        self.ents[p].stopped_holding_at = now;
        let vm = self.ents[p].vm;
        for s in 0..self.ents.len() {
            if s != p && self.ents[s].vm == vm && matches!(self.ents[s].state, State::Running(_)) {
                self.look_at(s, now + self.kick_latency);
            }
        }
    }

    /// `e` was dispatched: one look into its turn if a sibling waits
    /// parked (the likely holder, unless its VM is wider than its CPUs;
    /// then any that spun, or stopped outside a spin no earlier than `e`
    /// did), unless its VM's looks are backed off (the engine's rules).
    pub(super) fn watch_dispatch(&mut self, e: usize, now: Nanos) {
        if !self.ents[e].watch {
            return;
        }
        let sender = self.ents[e].answer_to.take();
        self.ents[e].turn_for = sender.filter(|_| self.ents[e].wide);
        let vm = self.ents[e].vm;
        let wanted = if self.ents[e].wide {
            let (i_spun, mine) = (self.ents[e].spun_at_stop, self.ents[e].stopped_holding_at);
            (0..self.ents.len()).any(|s| {
                s != e
                    && self.ents[s].vm == vm
                    && self.ents[s].state == State::Ready
                    && (i_spun
                        || self.ents[s].spun_at_stop
                        || self.ents[s].stopped_holding_at >= mine)
            })
        } else {
            self.parked_holder(e).is_some()
        };
        let backed_off = self.ents[e].turn_for.is_none()
            && self.vm_look_misses(vm) >= LOOK_MISSES_BEFORE_BACKOFF
            && {
                let n = self.ents[e].looks_skipped.wrapping_add(1);
                self.ents[e].looks_skipped = n;
                n % LOOK_BACKOFF_EVERY != 0
            };
        if wanted && !backed_off {
            self.look_at(e, now + LOOK_AFTER_DISPATCH);
            self.ents[e].turn_look = true;
        }
    }

    fn vm_look_misses(&self, vm: u32) -> u32 {
        self.look_misses.get(vm as usize).copied().unwrap_or(0)
    }

    /// A look into `e`'s turn found it spinning (`hit`: the count starts
    /// again) or not.
    fn count_turn_look(&mut self, e: usize, hit: bool) {
        let vm = self.ents[e].vm as usize;
        if self.look_misses.len() <= vm {
            self.look_misses.resize(vm + 1, 0);
        }
        let m = &mut self.look_misses[vm];
        *m = if hit {
            0
        } else {
            (*m + 1).min(LOOK_MISSES_BEFORE_BACKOFF)
        };
    }

    /// The look: if `e` still runs its turn, its turn ends as a yield when
    /// - an initiator's IPI reached it parked, the initiator waits parked
    ///   (spinning when it stopped), and it does not spin: the rest goes
    ///   to the initiator (`pass_turn`);
    /// - it spins while a sibling waits parked, and the scheduler takes
    ///   the directed yield to its `yield_target`.
    pub(super) fn on_look(&mut self, e: usize, now: Nanos) -> Result<(), SimError> {
        let State::Running(c) = self.ents[e].state else {
            return Ok(());
        };
        let c = c as usize;
        if self.cpus[c].current != Some(e as u32) || now >= self.cpus[c].quantum_end {
            return Ok(());
        }
        self.account(c, now);
        let lender = self.ents[e]
            .turn_for
            .take()
            .filter(|&l| self.ents[l].state == State::Ready && self.ents[l].spun_at_stop);
        if std::mem::take(&mut self.ents[e].turn_look) {
            let hit = self.spinning(e) || lender.is_some();
            self.count_turn_look(e, hit);
        }
        if let Some(l) = lender.filter(|_| !self.spinning(e)) {
            self.sched_calls += 1;
            if self
                .sched
                .pass_turn(self.ents[e].id, self.ents[l].id, now)?
            {
                self.do_schedule(c, now, StopReason::Yielded)?;
            }
            return Ok(());
        }
        if !self.spinning(e) {
            return Ok(());
        }
        let Some((h, passes)) = self.yield_target(e) else {
            return Ok(());
        };
        self.sched_calls += 1;
        let (from, to) = (self.ents[e].id, self.ents[h].id);
        let taken = if passes {
            self.sched.pass_turn(from, to, now)?
        } else {
            self.sched.yield_to(from, to, now)?
        };
        if taken {
            self.do_schedule(c, now, StopReason::Yielded)?;
        }
        Ok(())
    }
}
