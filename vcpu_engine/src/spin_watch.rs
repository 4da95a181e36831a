//! Spin watch: pause-loop exiting in software, for VMs with relaxed
//! co-scheduling.
//!
//! A vCPU that spins on a lock whose holder is preempted burns its slice
//! until the holder runs again. Hardware tells a hypervisor when a guest
//! spins (Intel's pause-loop exiting, AMD's pause filter), and KVM then
//! yields the spinner's CPU to a preempted sibling. That hardware does not
//! help here: Intel's watches only guest kernel code (CPL 0), and a KVM
//! without VT-x (this project's development machines) has none. A
//! scheduler that owns every vCPU can look for itself, at the moments a
//! holder may have been parked (`SpinWatch`): a vCPU found in a
//! spin-wait loop while a sibling waits parked yields, and the scheduler's
//! directed yield (`vcpu_sched`'s relaxed co-scheduling) gives its CPU to
//! that sibling: one that was not spinning when it stopped if there is
//! one (a lock's likely holder), else the next in index order (a
//! barrier's waiters are all released at once, unseen). And a vCPU that
//! an IPI reached parked gives its next turn, once it has had time to
//! answer, to the sender if the sender waits parked for the answer (a
//! TLB shootdown's initiator).
//!
//! What counts as a spin is `crate::pause_loop`'s; the registers come
//! with the exit (KVM_CAP_SYNC_REGS, no ioctl).

use crate::clock::{now_ns, QuantumTimer};
use crate::cpu::CpuSlot;
use crate::dispatch::Stop;
use crate::signals::kick_thread;
use crate::vcpu::{VcpuRunner, VcpuStep};
use crate::vcpu_state::{EngineVcpu, STATE_READY, STATE_RUNNING};
use crate::{Engine, EngineVm};
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How long after its dispatch a vCPU is looked at once, when a sibling
/// of its VM waits parked, ns: time enough to reach a lock or a barrier
/// and spin on it.
pub const LOOK_AFTER_DISPATCH_NS: u64 = 100_000;

/// A VM whose looks into its vCPUs' turns found a spin in none of the
/// last this many is looked into only one turn in [`LOOK_BACKOFF_EVERY`]
/// (a look is an exit, which cost a CPU-bound 3-vCPU VM on one CPU 8 % of
/// its work here: its vCPUs never spin).
pub const LOOK_MISSES_BEFORE_BACKOFF: u32 = 64;
/// See [`LOOK_MISSES_BEFORE_BACKOFF`]; a look that finds a spin ends it.
pub const LOOK_BACKOFF_EVERY: u32 = 16;

/// Why a look ended a turn as a yield.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// The vCPU spun while a sibling waited parked, and yielded to it.
    Spun,
    /// A sibling sent the vCPU an IPI while it waited parked (passing it
    /// its turn, if the scheduler took the pass) and waits parked for the
    /// answer; the vCPU had time to answer, and gave it the turn.
    GaveBack,
}

/// The spin watch of one vCPU thread (the `threads` dispatch). When are
/// looks taken:
/// - a sibling leaves its CPU runnable outside a spin-wait loop (it may
///   hold a lock): each sibling running then is kicked for a look at once;
/// - a turn starts while a sibling waits parked: one look
///   [`LOOK_AFTER_DISPATCH_NS`] later, backed off while the VM's looks
///   keep finding no spin ([`LOOK_MISSES_BEFORE_BACKOFF`]).
///
/// A look that finds the vCPU spinning directs its CPU to a parked
/// sibling (`yield_target`; `VcpuScheduler::yield_to`, which the scheduler
/// may refuse, and in a VM wider than its CPUs lends the rest of the
/// slice) and ends its turn as a yield. Looks come from events, not a clock: a look
/// is an exit, and on this project's software KVM one every 250 us of a
/// lock VM's run cost it 43 % of its acquisitions.
pub(crate) struct SpinWatch {
    /// Takes the thread out of KVM_RUN for the look after a turn's start.
    timer: QuantumTimer,
    /// When that look is due (0: none).
    look_at: Cell<u64>,
    /// This sibling (its index) sent an IPI while this vCPU waited parked
    /// and waits for the answer: at the look the turn goes to it unless
    /// this vCPU spins.
    answer_to: Cell<Option<usize>>,
    /// Turns started while its VM's looks were backed off.
    skipped: Cell<u32>,
}

impl SpinWatch {
    /// The watch of `me`'s thread, if its VM has relaxed co-scheduling and
    /// more than one vCPU (call on that thread).
    pub(crate) fn start(
        vm: &EngineVm,
        me: &EngineVcpu,
        runner: &mut VcpuRunner,
    ) -> Option<SpinWatch> {
        if !vm.spin_watch || vm.vcpus.len() < 2 {
            return None;
        }
        match QuantumTimer::for_current_thread() {
            Ok(timer) => {
                runner.sync_registers();
                Some(SpinWatch {
                    timer,
                    look_at: Cell::new(0),
                    answer_to: Cell::new(None),
                    skipped: Cell::new(0),
                })
            }
            Err(e) => {
                log::warn!("{}: no spin watch: {e}", me.name);
                None
            }
        }
    }

    /// A sibling of `me` that waits parked and was not in a spin-wait loop
    /// when it stopped: the likely holder of what a spinner waits for. Of
    /// several, the one that stopped last: a sibling that ran after a
    /// holder was parked would have spun on its lock when it stopped, so
    /// one that stopped outside a spin after another did found the lock
    /// free or held it itself. (Index order chose a sibling parked in its
    /// lock's gap as often as the holder, and that sibling then spun.)
    fn parked_holder<'a>(vm: &'a EngineVm, me: &EngineVcpu) -> Option<&'a Arc<EngineVcpu>> {
        vm.vcpus
            .iter()
            .filter(|w| {
                w.index != me.index
                    && w.state_code() == STATE_READY
                    && !w.spun_at_stop.load(Ordering::Relaxed)
            })
            .max_by_key(|w| w.stopped_holding_at.load(Ordering::Relaxed))
    }

    /// The next sibling of `me` in index order that waits parked, whatever
    /// it did when it stopped, if the VM is wider than its CPUs (where the
    /// scheduler lends it the rest of the yielder's slice) and no sibling
    /// runs. A running sibling is what a lock's spinner waits for, and
    /// gets in microseconds: a yield then only costs a switch (with every
    /// directed yield lent, the 4-vCPU lock VM of spinlock-overcommit
    /// lost 16 % of its acquisitions without this condition, and 10 %
    /// when a sibling the watch last saw spinning counted as not running).
    fn next_parked<'a>(vm: &'a EngineVm, me: &EngineVcpu) -> Option<&'a Arc<EngineVcpu>> {
        let running = |w: &Arc<EngineVcpu>| w.index != me.index && w.state_code() == STATE_RUNNING;
        if !vm.wide || vm.vcpus.iter().any(running) {
            return None;
        }
        let n = vm.vcpus.len();
        let at = vm.vcpus.iter().position(|w| w.index == me.index)?;
        (1..n)
            .map(|k| &vm.vcpus[(at + k) % n])
            .find(|w| w.state_code() == STATE_READY)
    }

    /// Whether `me`, in a VM wider than its CPUs, may come to spin on a
    /// parked sibling in its turn: one waits parked, and `me` spun when it
    /// stopped, or that sibling did (a barrier's waiters), or that sibling
    /// stopped outside a spin no earlier than `me` did (it may hold a
    /// lock; one that stopped before `me` left it free for `me`).
    fn may_wait_on_a_parked_sibling(vm: &EngineVm, me: &EngineVcpu) -> bool {
        let i_spun = me.spun_at_stop.load(Ordering::Relaxed);
        let mine = me.stopped_holding_at.load(Ordering::Relaxed);
        vm.vcpus.iter().any(|w| {
            w.index != me.index
                && w.state_code() == STATE_READY
                && (i_spun
                    || w.spun_at_stop.load(Ordering::Relaxed)
                    || w.stopped_holding_at.load(Ordering::Relaxed) >= mine)
        })
    }

    /// Where a spinning `me`'s CPU goes: the likely holder if one waits
    /// parked (a turn of its own), else (a VM wider than its CPUs) the
    /// next parked sibling, passed the rest of `me`'s turn (true).
    fn yield_target<'a>(vm: &'a EngineVm, me: &EngineVcpu) -> Option<(&'a Arc<EngineVcpu>, bool)> {
        Self::parked_holder(vm, me)
            .map(|h| (h, false))
            .or_else(|| Self::next_parked(vm, me).map(|w| (w, true)))
    }

    /// `me`'s turn started: note the sender of an IPI that reached it
    /// parked (a VM wider than its CPUs), and take one look soon if a
    /// sibling waits parked, unless its looks keep finding no spin (then
    /// one turn in [`LOOK_BACKOFF_EVERY`]; an IPI's sender is always
    /// answered).
    pub(crate) fn turn_started(&self, vm: &EngineVm, me: &EngineVcpu) {
        self.answer_to
            .set(me.answer_to.swap(0, Ordering::AcqRel).checked_sub(1));
        let wanted = if vm.wide {
            Self::may_wait_on_a_parked_sibling(vm, me)
        } else {
            Self::parked_holder(vm, me).is_some()
        };
        let backed_off = self.answer_to.get().is_none()
            && vm.look_misses.load(Ordering::Relaxed) >= LOOK_MISSES_BEFORE_BACKOFF
            && {
                let n = self.skipped.get().wrapping_add(1);
                self.skipped.set(n);
                n % LOOK_BACKOFF_EVERY != 0
            };
        if wanted && !backed_off {
            let at = now_ns() + LOOK_AFTER_DISPATCH_NS;
            self.look_at.set(at);
            self.timer.arm(at);
        }
    }

    /// `me`'s turn ended: no look until the next.
    pub(crate) fn turn_ended(&self) {
        self.timer.disarm();
        self.look_at.set(0);
        self.answer_to.set(None);
    }

    /// The look, at an exit for a signal within `me`'s turn on `slot`, if
    /// one was due or asked for. `me` ends its turn as a yield if:
    /// - a sibling sent it an IPI while it waited parked (and passed it
    ///   this turn, if the scheduler took that), and waits parked for the
    ///   answer, spinning when it stopped; this is the look after the
    ///   turn's start, and `me` does not spin: it had time to answer, and
    ///   the rest of the turn goes to that sibling ([`Look::GaveBack`]);
    /// - it spins while a sibling waits parked, and the scheduler took the
    ///   directed yield to its `yield_target` ([`Look::Spun`]).
    pub(crate) fn look(
        &self,
        engine: &Engine,
        vm: &EngineVm,
        me: &EngineVcpu,
        runner: &VcpuRunner,
        slot: &CpuSlot,
    ) -> Option<Look> {
        let asked = me.look_asked.swap(false, Ordering::AcqRel);
        let now = now_ns();
        let at = self.look_at.get();
        let due = at != 0 && now >= at;
        if due {
            self.look_at.set(0);
        }
        if !(asked || due) || now >= slot.quantum_end() || slot.kick_pending.load(Ordering::Acquire)
        {
            return None;
        }
        let sched = engine.scheduler();
        // The sender waits parked, and it was spinning (or yielded) when
        // it stopped: for the answer.
        let sender = due
            .then(|| self.answer_to.take())
            .flatten()
            .and_then(|i| vm.vcpus.get(i))
            .filter(|w| w.state_code() == STATE_READY && w.spun_at_stop.load(Ordering::Relaxed));
        let mut spun = None;
        let mut spinning = || *spun.get_or_insert_with(|| runner.spinning());
        if due {
            // The backoff counts the looks into a turn only: a sibling's
            // stop asks for the others at a moment a lock may be held.
            // (The VM's threads race on the count; it only has to tell a
            // VM that spins from one that never does.)
            let misses = vm.look_misses.load(Ordering::Relaxed);
            if spinning() {
                if misses != 0 {
                    vm.look_misses.store(0, Ordering::Relaxed);
                }
            } else if misses < LOOK_MISSES_BEFORE_BACKOFF {
                vm.look_misses.store(misses + 1, Ordering::Relaxed);
            }
        }
        if let Some(sender) = sender.filter(|_| !spinning()) {
            // A turn given back was worth its look too.
            vm.look_misses.store(0, Ordering::Relaxed);
            return sched
                .pass_turn(me.entity, sender.entity, now)
                .unwrap_or(false)
                .then_some(Look::GaveBack);
        }
        let (to, passes) = Self::yield_target(vm, me)?;
        let taken = spinning()
            && if passes {
                sched.pass_turn(me.entity, to.entity, now)
            } else {
                sched.yield_to(me.entity, to.entity, now)
            }
            .unwrap_or(false);
        taken.then_some(Look::Spun)
    }

    /// `me` leaves its CPU with `stop` after `last`: note whether it was
    /// spinning, and if it was not (it may hold a lock) ask its running
    /// siblings for a look at once.
    pub(crate) fn stopped(
        &self,
        vm: &EngineVm,
        me: &EngineVcpu,
        runner: &VcpuRunner,
        stop: &Stop,
        last: &VcpuStep,
    ) {
        let (spun, may_hold) = match stop {
            Stop::Quantum | Stop::Preempted => {
                let spun = *last == VcpuStep::Interrupted && runner.spinning();
                (spun, !spun)
            }
            Stop::Yielded => (true, false),
            Stop::Blocked | Stop::Exit(_) => (false, false),
        };
        me.spun_at_stop.store(spun, Ordering::Relaxed);
        if !may_hold {
            return;
        }
        me.stopped_holding_at.store(now_ns(), Ordering::Relaxed);
        for w in &vm.vcpus {
            if w.index != me.index && w.state_code() == STATE_RUNNING {
                w.look_asked.store(true, Ordering::Release);
                let tid = w.tid.load(Ordering::Acquire);
                if tid != 0 {
                    // A thread gone meanwhile: nothing to look at.
                    let _ = kick_thread(tid);
                }
            }
        }
    }
}
