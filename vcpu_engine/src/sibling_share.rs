//! Sibling sharing: under the `ranked` dispatch, a co-scheduled VM with
//! more vCPUs than CPUs in its core set runs its queued siblings beside
//! the sibling that owns a CPU, in the normal class, and the host kernel
//! takes turns between them ([`crate::DispatchKind::Ranked`], `ranked.rs`).
//!
//! # Why
//!
//! Such a VM always has a sibling queued. Under `ranked` a queued vCPU is
//! a *filler* (the idle class), which runs only while its CPU's owner is
//! halted; a VM that synchronises (a spin barrier, a lock, a TLB
//! shootdown's answer) never halts while it waits, so the parked sibling
//! ran only when an owner's slice ended, and the VM advanced once per
//! slice: at 3:1 beside hogs its barrier did 0.28x the host kernel's
//! rounds and its shootdown 0.25x the round trips. Pacer's own local APIC
//! (`threads`) sees the waits (IPIs, PAUSE loops) and gives the CPU to the
//! sibling, but every IPI and halt is then an exit, which costs a wide VM
//! that does not spin (a request server) a quarter of its throughput.
//! Here the kernel does the turns at its own price: while a sibling owns
//! CPU c, a queued sibling's thread is in the normal class bound to c, so
//! the VM's time on c is shared by its siblings at the kernel's tick, as
//! the host kernel shares a CPU between any two threads, and the other
//! VMs' time is not touched (the VM's siblings take turns only within the
//! slices the scheduler gave the VM).
//!
//! # When
//!
//! - Only for a VM whose vCPUs do not halt: a VM that halts takes turns by
//!   its halts already (a halted owner hands its CPU to a filler), and
//!   sharing would only slow the sibling the others wait for (a request
//!   server's dispatcher, whose p99 tripled when its workers shared its
//!   CPU). A VM shares once none of its vCPUs has been seen halted for
//!   [`SHARE_AFTER_QUIET_NS`] (the agent's looks, an owner's halt, a
//!   filler found halted), and stops at the first halt seen.
//! - A queued sibling shares a CPU its VM owns (the first such CPU in the
//!   engine's order, offset by the vCPU's index, so that two queued
//!   siblings of a VM that owns two CPUs go to different ones).
//!
//! # A turn's end
//!
//! The owner's quantum timer ends its turn, but the owner's thread takes
//! the signal only when the kernel runs it, and a sibling beside it may
//! hold the CPU until the kernel's next tick. So each sibling placed
//! beside an owner arms a timer of its own thread at the turn's end
//! (`EngineVcpu::shared_turn_timer`), and whichever thread runs then ends
//! the turn (`Engine::end_shared_turn`): the VM keeps to its slices.
//!
//! # Turns within a shared CPU
//!
//! The kernel switches between the threads sharing a CPU only at its tick
//! (4 ms here), and a barrier's round or a shootdown's answer waits for
//! every switch. [`SiblingTurns`] takes a thread out of KVM_RUN on a timer
//! of its own and gives the CPU to the sibling beside it when its guest
//! spins: every 250 us in a `turns` VM; in a relaxed VM at the pace its
//! looks set ([`SpinPace`]: often while they find spins, never in a VM
//! that does not spin), and the sibling that got the CPU from a spinner
//! gives it back half a turn later, time to answer it, unless it spins
//! itself at times: then it most likely holds the lock the spinner waits
//! for, and is left to run.
//!
//! # Long kernel turns for siblings that spin together
//!
//! Where two different siblings of a relaxed VM are found spinning within
//! [`SPINNING_TOGETHER_NS`] of each other (a look, or an exit the VM made
//! anyway), they wait on something one of them holds: a lock, a barrier's
//! last arrival. The kernel's own turns between the threads sharing a CPU
//! (its base slice, a few ms) then most often stop the one they wait for,
//! and every sibling spins until the next turn brings it back. So while
//! the VM's siblings spin together, its threads on the CPUs it owns take
//! the kernel's turns at a long slice ([`crate::rank::Rank::LongTurnOwner`],
//! [`SiblingShare::long_turns`]), and change places where Pacer's looks
//! find a spinner (a yield) and at the scheduler's slice ends. Where only
//! one sibling spins (a TLB shootdown's initiator) it waits for the others'
//! answers, and they answer only when they run: the kernel's short turns
//! are what bring the spinner back when no look sees it, stopped at work
//! between two waits, so such a VM keeps them (with long turns always on,
//! the 3:1 shootdown did a third of its round trips). Measured at 3:1
//! beside hogs: the spin lock 1.12x the host kernel's acquisitions ->
//! 1.48x, the barrier +3 %, the shootdown, which never takes them,
//! unchanged (`docs/measurements/sync.md`, "Long kernel turns").
//!
//! # Accounting
//!
//! A shared turn's slice is wall time, not the owner's CPU time: the time
//! the owner lost to its siblings is not given back (the VM used it), and
//! the owner is charged the whole turn (nothing of it was idle). Over the
//! VM's turns its siblings are charged in rotation, as each owns a CPU in
//! its turn; the scheduler's per-vCPU shares are approximate while a VM
//! shares, and the VM's share of the host is the scheduler's.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// A VM shares the CPUs it owns with its queued siblings only once none
/// of its vCPUs has been seen halted for this long (four of the agent's
/// looks).
pub(crate) const SHARE_AFTER_QUIET_NS: u64 = 20_000_000;

/// Two different siblings found spinning within this long of each other
/// spin together, and the VM takes long kernel turns for as long again
/// after the last such pair.
pub(crate) const SPINNING_TOGETHER_NS: u64 = 200_000_000;

/// The low bits of [`SiblingShare::last_spin`] that hold the vCPU's index
/// (plus one, 0 for none) in place of the time's.
const SPINNER_BITS: u32 = 16;
const SPINNER_MASK: u64 = (1 << SPINNER_BITS) - 1;

/// What the siblings of one sharing VM have in common.
#[derive(Debug)]
pub(crate) struct SiblingShare {
    /// When one of the VM's vCPUs was last seen halted (CLOCK_MONOTONIC
    /// ns).
    halted_at: AtomicU64,
    /// Whether long kernel turns are for this VM (a relaxed one, whose
    /// looks keep a pace; a `turns` VM looks at its own fixed pace).
    long_turns_allowed: bool,
    /// The last spin seen: its time (CLOCK_MONOTONIC ns) with the low
    /// [`SPINNER_BITS`] replaced by the spinning vCPU's index plus one.
    last_spin: AtomicU64,
    /// When two different siblings were last seen spinning within
    /// [`SPINNING_TOGETHER_NS`] of each other (0: never).
    together_at: AtomicU64,
}

impl SiblingShare {
    /// A VM that starts now (its vCPUs start halted); `relaxed`: it may
    /// take long kernel turns ([`SiblingShare::long_turns`]).
    pub(crate) fn new(now: u64, relaxed: bool) -> SiblingShare {
        SiblingShare {
            halted_at: AtomicU64::new(now),
            long_turns_allowed: relaxed,
            last_spin: AtomicU64::new(0),
            together_at: AtomicU64::new(0),
        }
    }

    /// vCPU `index` was found in a spin-wait loop at `now`.
    pub(crate) fn spin_seen(&self, index: u32, now: u64) {
        let who = u64::from(index).saturating_add(1).min(SPINNER_MASK);
        let last = self
            .last_spin
            .swap((now & !SPINNER_MASK) | who, Ordering::Relaxed);
        let (last_who, last_at) = (last & SPINNER_MASK, last & !SPINNER_MASK);
        if last_who != 0 && last_who != who && now.saturating_sub(last_at) <= SPINNING_TOGETHER_NS {
            self.together_at.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Whether its threads on the CPUs it owns take the kernel's turns at
    /// the long slice at `now`: it shares, and two of its siblings were
    /// seen spinning together within the last [`SPINNING_TOGETHER_NS`].
    pub(crate) fn long_turns(&self, now: u64) -> bool {
        let together = self.together_at.load(Ordering::Relaxed);
        self.long_turns_allowed
            && together != 0
            && now.saturating_sub(together) <= SPINNING_TOGETHER_NS
            && self.shares(now)
    }

    /// One of the VM's vCPUs was seen halted at `now`.
    pub(crate) fn halted(&self, now: u64) {
        self.halted_at.fetch_max(now, Ordering::Relaxed);
    }

    /// Whether its queued siblings share its CPUs at `now`: no vCPU of
    /// the VM seen halted for [`SHARE_AFTER_QUIET_NS`].
    pub(crate) fn shares(&self, now: u64) -> bool {
        now.saturating_sub(self.halted_at.load(Ordering::Relaxed)) >= SHARE_AFTER_QUIET_NS
    }
}

/// Sibling turns on a shared CPU. The host kernel takes turns between the
/// threads that share a CPU only at its tick (4 ms here), and a barrier's
/// round or a shootdown's answer waits for each turn. So a thread that
/// shares its CPUs leaves KVM_RUN at a timer of its own (CLOCK_MONOTONIC;
/// a thread CPU-time timer fires only at the tick), and gives its CPU to
/// the sibling beside it (`sched_yield`, which the kernel's fair class
/// answers by running the other thread there) if it has run half a turn
/// since it last did, a sibling shares its CPU and its guest sits in a
/// spin-wait loop (`pause_loop`). A lock holder is not in its wait loop,
/// so it keeps the CPU, but each look stops it for an exit.
///
/// Two paces:
/// - **fixed** (`coschedule = "turns"`): a look every `sibling_turn` (250
///   us). A spin lock VM pays an exit per turn for it (0.3-0.7x the host
///   kernel's acquisitions at 3:1 here), which is why it is a mode a VM
///   asks for;
/// - **paced** (a relaxed VM): the VM's [`SpinPace`] sets the interval,
///   short while looks find spins, long and then none while they do not,
///   so a VM that never spins pays nothing and a lock VM, whose looks
///   mostly find a holder at work, little.
pub(crate) struct SiblingTurns {
    timer: Arc<crate::clock::QuantumTimer>,
    turn_ns: u64,
    /// The thread's CPU clock when it last gave its CPU away.
    yielded_at_cpu_ns: u64,
    /// Paced: the VM's pace, and the thread's CPU clock when its timer was
    /// last armed (a look that comes after the thread ran less than half
    /// its interval was taken as the kernel gave it the CPU back, and its
    /// miss says nothing of the VM).
    pace: Option<(Arc<SpinPace>, u64)>,
    /// Paced: a sibling beside it gave it the CPU from a spin-wait loop;
    /// its CPU clock when it first saw that (the CPU goes back once it has
    /// run half a turn since: time to answer the spinner's IPI).
    owes_since_cpu_ns: Option<u64>,
    /// When a look last found its own guest spinning (wall clock; 0:
    /// never).
    spun_at_ns: u64,
}

impl SiblingTurns {
    /// Fixed turns of `turn_ns` for the calling thread, whose CPU clock
    /// reads `cpu_now`.
    pub(crate) fn start(
        turn_ns: u64,
        cpu_now: u64,
    ) -> Result<SiblingTurns, crate::clock::ClockError> {
        let timer = Arc::new(crate::clock::QuantumTimer::for_current_thread()?);
        timer.every(turn_ns);
        Ok(SiblingTurns {
            timer,
            turn_ns,
            yielded_at_cpu_ns: cpu_now,
            pace: None,
            owes_since_cpu_ns: None,
            spun_at_ns: 0,
        })
    }

    /// Turns at `pace`, based on `turn_ns`, for the calling thread, whose
    /// CPU clock reads `cpu_now`: no look until the pace asks for one
    /// ([`SiblingTurns::looked`], [`SiblingTurns::spin_seen`]) or a
    /// sibling arms `timer` (a timer of this thread).
    pub(crate) fn paced(
        turn_ns: u64,
        cpu_now: u64,
        pace: Arc<SpinPace>,
        timer: Arc<crate::clock::QuantumTimer>,
    ) -> Result<SiblingTurns, crate::clock::ClockError> {
        Ok(SiblingTurns {
            timer,
            turn_ns,
            yielded_at_cpu_ns: cpu_now,
            pace: Some((pace, cpu_now)),
            owes_since_cpu_ns: None,
            spun_at_ns: 0,
        })
    }

    /// Whether its VM's pace sets its looks (a relaxed VM).
    pub(crate) fn is_paced(&self) -> bool {
        self.pace.is_some()
    }

    /// Whether the thread has run half a turn since it last gave its CPU
    /// away (a turn's tick that lands just after it got the CPU back does
    /// not send it away again).
    pub(crate) fn due(&self, cpu_now: u64) -> bool {
        cpu_now
            .saturating_sub(self.yielded_at_cpu_ns)
            .saturating_mul(2)
            >= self.turn_ns
    }

    /// It gave its CPU away; its clock reads `cpu_now` once it has it back.
    pub(crate) fn yielded(&mut self, cpu_now: u64) {
        self.yielded_at_cpu_ns = cpu_now;
    }

    /// Paced: a look found the guest outside a spin-wait loop while a
    /// sibling beside it waits, having given it the CPU from one (a
    /// shootdown's initiator, a lock's waiter). A shootdown's answering
    /// siblings keep working once they have answered, and the kernel would
    /// leave the waiter behind them until its tick, so the CPU goes back
    /// once the thread has run half a turn since it first saw the waiter
    /// (`Some(true)`: give it now; the timer is armed at the pace for the
    /// look after). `Some(false)`: not yet, the timer is armed half a turn
    /// on for that look. `None`: it owes nothing: fixed turns, or a
    /// sibling found spinning itself lately ([`GIVE_BACK_AFTER_SPIN_NS`]),
    /// which most likely holds what the spinner waits for and is left to
    /// run. The wall clock reads `now`.
    pub(crate) fn give_back(&mut self, cpu_now: u64, now: u64) -> Option<bool> {
        let pace = &self.pace.as_ref()?.0;
        if self.spun_within(now, GIVE_BACK_AFTER_SPIN_NS) {
            return None;
        }
        let since = *self.owes_since_cpu_ns.get_or_insert(cpu_now);
        if cpu_now.saturating_sub(since).saturating_mul(2) >= self.turn_ns {
            self.owes_since_cpu_ns = None;
            match pace.interval(self.turn_ns) {
                Some(i) => self.timer.arm(now.saturating_add(i)),
                None => self.timer.disarm(),
            }
            return Some(true);
        }
        self.timer.arm(now.saturating_add(self.turn_ns / 2));
        Some(false)
    }

    /// Whether a look found its own guest spinning less than `ns` before
    /// `now`.
    fn spun_within(&self, now: u64, ns: u64) -> bool {
        self.spun_at_ns != 0 && now.saturating_sub(self.spun_at_ns) < ns
    }

    /// Paced: a look at its timer found the guest `spinning` (or not) with
    /// a sibling beside it (`beside`), the thread's CPU clock at `cpu_now`
    /// and the wall clock at `now`: the VM's pace learns from it, and the
    /// timer is armed for the next look (none while no sibling is beside
    /// it, or the pace is off). Fixed turns: nothing to do.
    pub(crate) fn looked(&mut self, spinning: bool, beside: bool, cpu_now: u64, now: u64) {
        let Some((pace, armed_cpu)) = &mut self.pace else {
            return;
        };
        self.owes_since_cpu_ns = None;
        if spinning {
            self.spun_at_ns = now;
        }
        let interval = pace.interval(self.turn_ns);
        if beside {
            if spinning {
                pace.hit();
            } else if interval
                .is_some_and(|i| cpu_now.saturating_sub(*armed_cpu).saturating_mul(2) >= i)
            {
                pace.miss();
            }
        }
        let next = pace.interval(self.turn_ns).filter(|_| beside);
        match next {
            Some(i) => self.timer.arm(now.saturating_add(i)),
            None => self.timer.disarm(),
        }
        *armed_cpu = cpu_now;
    }

    /// Paced: at an exit the thread made anyway (its slice's or shared
    /// turn's end) the guest was seen spinning: the VM's looks start if
    /// they were off, and this thread's timer is armed.
    pub(crate) fn spin_seen(&mut self, cpu_now: u64, now: u64) {
        let Some((pace, armed_cpu)) = &mut self.pace else {
            return;
        };
        pace.spin_seen();
        self.spun_at_ns = now;
        if let Some(i) = pace.interval(self.turn_ns) {
            self.timer.arm(now.saturating_add(i));
            *armed_cpu = cpu_now;
        }
    }
}

/// A sibling found spinning itself this recently does not give the CPU
/// back to a spinner ([`SiblingTurns::give_back`]), and is not looked into
/// again until something arms its timer (a sibling's yield, an exit of its
/// own that finds a spin). Siblings that all spin wait for the same thing
/// (a lock, a barrier): one that a spinner handed the CPU to and that does
/// not spin now most likely holds it, handing the CPU back only swaps
/// which of them waits, and each look stops the holder for an exit (with
/// give-backs the 3:1 lock VM did 4-8 % fewer acquisitions, with looks at
/// its pace 9-15 % fewer than left alone). One that never spins (a
/// shootdown's answering sibling) owes the spinner its answer.
pub(crate) const GIVE_BACK_AFTER_SPIN_NS: u64 = 50_000_000;

/// How often the threads of a relaxed VM that shares its CPUs look for a
/// spin (the paced [`SiblingTurns`]), as a shift of the sibling turn: a
/// look that finds a spin halves the interval (down to the turn, 250 us),
/// one that finds none doubles it, and past [`PACE_MAX_SHIFT`] the looks
/// stop until an exit the VM makes anyway finds a spin, which starts them
/// at [`PACE_START_SHIFT`]. A barrier's or a shootdown's looks mostly find
/// a waiter, so it runs at the turn; a lock VM's mostly find a holder at
/// work (each such look stops it for an exit, ~0.15 ms of the guest's
/// progress on this project's software KVM), so it backs off; a VM that
/// never spins never looks.
#[derive(Debug)]
pub(crate) struct SpinPace {
    shift: AtomicU32,
}

/// The pace's "no looks".
const PACE_OFF: u32 = u32::MAX;
/// The longest interval between looks: the turn << 5, 8 ms at 250 us,
/// twice the host's tick here, where the kernel's own turns come first.
pub(crate) const PACE_MAX_SHIFT: u32 = 5;
/// Where a spin seen at an exit starts the looks: the turn << 4, 4 ms.
pub(crate) const PACE_START_SHIFT: u32 = 4;

impl SpinPace {
    /// No looks until a spin is seen.
    pub(crate) fn new() -> SpinPace {
        SpinPace {
            shift: AtomicU32::new(PACE_OFF),
        }
    }

    /// The interval between looks based on `turn_ns`, if any.
    pub(crate) fn interval(&self, turn_ns: u64) -> Option<u64> {
        let shift = self.shift.load(Ordering::Relaxed);
        (shift != PACE_OFF).then(|| turn_ns << shift.min(PACE_MAX_SHIFT))
    }

    /// A spin seen at an exit the VM made anyway: looks start if off.
    pub(crate) fn spin_seen(&self) {
        let _ = self.shift.compare_exchange(
            PACE_OFF,
            PACE_START_SHIFT,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// A look found a spin: look twice as often.
    pub(crate) fn hit(&self) {
        self.update(|s| match s {
            PACE_OFF => PACE_START_SHIFT - 1,
            s => s.saturating_sub(1),
        });
    }

    /// A look found none: look half as often, or stop.
    pub(crate) fn miss(&self) {
        self.update(|s| match s {
            s if s >= PACE_MAX_SHIFT => PACE_OFF,
            s => s + 1,
        });
    }

    fn update(&self, f: impl Fn(u32) -> u32) {
        let _ = self
            .shift
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| Some(f(s)));
    }
}

/// The CPU a queued sibling shares: of the `owned` CPUs of its VM (in the
/// engine's order), the one its `index` picks.
pub(crate) fn pick(owned: usize, index: u32) -> usize {
    index as usize % owned.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A paced thread's timer for these tests: the kick signal handled (a
    /// deadline in the past fires at once).
    fn a_turn_timer() -> Arc<crate::clock::QuantumTimer> {
        crate::signals::register_kick_handler().unwrap();
        Arc::new(crate::clock::QuantumTimer::for_current_thread().unwrap())
    }

    #[test]
    fn a_vm_shares_only_after_a_quiet_spell_and_stops_at_a_halt() {
        let s = SiblingShare::new(1_000, true);
        assert!(!s.shares(1_000));
        assert!(!s.shares(1_000 + SHARE_AFTER_QUIET_NS - 1));
        assert!(s.shares(1_000 + SHARE_AFTER_QUIET_NS));
        s.halted(50_000_000);
        assert!(!s.shares(50_000_001));
        // An older sighting does not move the last halt back.
        s.halted(2_000);
        assert!(s.shares(50_000_000 + SHARE_AFTER_QUIET_NS));
    }

    #[test]
    fn long_turns_follow_two_siblings_spinning_together_and_lapse_without() {
        let quiet = SHARE_AFTER_QUIET_NS;
        let s = SiblingShare::new(0, true);
        // One sibling spinning again and again (a shootdown's initiator).
        for t in 0..10 {
            s.spin_seen(0, quiet + t * 1_000_000);
        }
        assert!(!s.long_turns(quiet + 10_000_000));
        // A second sibling spins within the window of the first.
        let t = quiet + 10_000_000;
        s.spin_seen(2, t);
        assert!(s.long_turns(t));
        assert!(s.long_turns(t + SPINNING_TOGETHER_NS));
        // It lapses once nobody spins together for the window.
        assert!(!s.long_turns(t + SPINNING_TOGETHER_NS + 2 * (1 << SPINNER_BITS)));
        // Two siblings further apart than the window are not together.
        let later = t + 10 * SPINNING_TOGETHER_NS;
        s.spin_seen(1, later);
        s.spin_seen(0, later + SPINNING_TOGETHER_NS + 2 * (1 << SPINNER_BITS));
        assert!(!s.long_turns(later + SPINNING_TOGETHER_NS + 2 * (1 << SPINNER_BITS)));
        // Not while the VM does not share (a halt seen).
        s.spin_seen(1, later + SPINNING_TOGETHER_NS + 3 * (1 << SPINNER_BITS));
        let now = later + SPINNING_TOGETHER_NS + 4 * (1 << SPINNER_BITS);
        assert!(s.long_turns(now));
        s.halted(now);
        assert!(!s.long_turns(now + 1));
        // A `turns` VM never takes them.
        let fixed = SiblingShare::new(0, false);
        fixed.spin_seen(0, quiet);
        fixed.spin_seen(1, quiet + 1);
        assert!(!fixed.long_turns(quiet + 2));
    }

    #[test]
    fn a_turn_is_due_after_half_a_turn_of_cpu_time_since_the_last_yield() {
        // Its timer fires every 250 us: the kick signal handled.
        crate::signals::register_kick_handler().unwrap();
        let mut t = SiblingTurns::start(250_000, 1_000_000).unwrap();
        assert!(!t.due(1_000_000));
        assert!(!t.due(1_124_999));
        assert!(t.due(1_125_000));
        t.yielded(2_000_000);
        assert!(!t.due(2_100_000));
        assert!(t.due(2_200_000));
        // A clock read before the yield (another thread's view) is not due.
        assert!(!t.due(1_500_000));
    }

    #[test]
    fn the_pace_halves_at_a_spin_doubles_at_none_and_stops_past_its_longest() {
        let turn = 250_000;
        let p = SpinPace::new();
        assert_eq!(p.interval(turn), None);
        // A miss while off keeps it off; a spin seen at an exit starts it.
        p.miss();
        assert_eq!(p.interval(turn), None);
        p.spin_seen();
        assert_eq!(p.interval(turn), Some(turn << PACE_START_SHIFT));
        // Seen again while on: no change.
        p.spin_seen();
        assert_eq!(p.interval(turn), Some(turn << PACE_START_SHIFT));
        for _ in 0..10 {
            p.hit();
        }
        assert_eq!(p.interval(turn), Some(turn));
        p.miss();
        assert_eq!(p.interval(turn), Some(2 * turn));
        for _ in 1..PACE_MAX_SHIFT {
            p.miss();
        }
        assert_eq!(p.interval(turn), Some(turn << PACE_MAX_SHIFT));
        p.miss();
        assert_eq!(p.interval(turn), None);
        // A look's hit while off (another thread's timer) starts it short
        // of the start.
        p.hit();
        assert_eq!(p.interval(turn), Some(turn << (PACE_START_SHIFT - 1)));
    }

    #[test]
    fn a_paced_look_counts_a_miss_only_after_half_its_interval_of_run() {
        let turn = 250_000;
        let pace = Arc::new(SpinPace::new());
        let mut t = SiblingTurns::paced(turn, 0, pace.clone(), a_turn_timer()).unwrap();
        t.spin_seen(0, 1_000);
        let start = turn << PACE_START_SHIFT;
        // Given the CPU back after little run: its miss is not counted.
        t.looked(false, true, start / 2 - 1, 2_000);
        assert_eq!(pace.interval(turn), Some(start));
        // Half its interval of run since: counted.
        t.looked(false, true, start / 2 - 1 + start / 2, 3_000);
        assert_eq!(pace.interval(turn), Some(start * 2));
        // No sibling beside it: neither a hit nor a miss.
        t.looked(true, false, 10 * start, 4_000);
        assert_eq!(pace.interval(turn), Some(start * 2));
        // A spin with a sibling beside: a hit, however little it ran.
        t.looked(true, true, 10 * start, 5_000);
        assert_eq!(pace.interval(turn), Some(start));
    }

    #[test]
    fn the_cpu_goes_back_to_a_spinner_after_half_a_turn_of_run() {
        let turn = 250_000;
        let pace = Arc::new(SpinPace::new());
        let mut t = SiblingTurns::paced(turn, 0, pace, a_turn_timer()).unwrap();
        // First seen at a CPU clock of 1 ms: not yet, however late.
        assert_eq!(t.give_back(1_000_000, 5_000_000), Some(false));
        assert_eq!(
            t.give_back(1_000_000 + turn / 2 - 1, 5_100_000),
            Some(false)
        );
        assert_eq!(t.give_back(1_000_000 + turn / 2, 5_200_000), Some(true));
        // Given back: the next spinner's wait counts from its own sight.
        assert_eq!(t.give_back(2_000_000, 6_000_000), Some(false));
        // A look of the usual kind in between forgets the debt.
        t.looked(false, true, 2_050_000, 6_050_000);
        assert_eq!(t.give_back(2_200_000, 6_200_000), Some(false));
        // Found spinning itself: it owes nothing for a while.
        t.looked(true, true, 3_000_000, 7_000_000);
        assert_eq!(t.give_back(3_000_000, 7_000_001), None);
        let quiet = 7_000_000 + GIVE_BACK_AFTER_SPIN_NS;
        assert_eq!(t.give_back(4_000_000, quiet - 1), None);
        assert_eq!(t.give_back(4_000_000, quiet), Some(false));
        assert_eq!(t.give_back(4_000_000 + turn / 2, quiet + 1), Some(true));
        // Fixed turns never give back.
        let mut f = SiblingTurns::start(turn, 0).unwrap();
        assert_eq!(f.give_back(0, 0), None);
        assert_eq!(f.give_back(10 * turn, 1), None);
    }

    #[test]
    fn queued_siblings_spread_over_the_cpus_their_vm_owns() {
        assert_eq!(pick(2, 0), 0);
        assert_eq!(pick(2, 1), 1);
        assert_eq!(pick(2, 2), 0);
        assert_eq!(pick(1, 5), 0);
        // No CPU owned never divides by zero (the caller checks first).
        assert_eq!(pick(0, 3), 0);
    }
}
