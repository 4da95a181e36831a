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
//! # Accounting
//!
//! A shared turn's slice is wall time, not the owner's CPU time: the time
//! the owner lost to its siblings is not given back (the VM used it), and
//! the owner is charged the whole turn (nothing of it was idle). Over the
//! VM's turns its siblings are charged in rotation, as each owns a CPU in
//! its turn; the scheduler's per-vCPU shares are approximate while a VM
//! shares, and the VM's share of the host is the scheduler's.

use std::sync::atomic::{AtomicU64, Ordering};

/// A VM shares the CPUs it owns with its queued siblings only once none
/// of its vCPUs has been seen halted for this long (four of the agent's
/// looks).
pub(crate) const SHARE_AFTER_QUIET_NS: u64 = 20_000_000;

/// What the siblings of one sharing VM have in common.
#[derive(Debug)]
pub(crate) struct SiblingShare {
    /// When one of the VM's vCPUs was last seen halted (CLOCK_MONOTONIC
    /// ns).
    halted_at: AtomicU64,
}

impl SiblingShare {
    /// A VM that starts now (its vCPUs start halted).
    pub(crate) fn new(now: u64) -> SiblingShare {
        SiblingShare {
            halted_at: AtomicU64::new(now),
        }
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

/// Sibling turns on a shared CPU (`coschedule = "turns"` under `ranked`):
/// the host kernel takes turns between the threads that share a CPU only
/// at its tick (4 ms here), and a barrier's round or a shootdown's answer
/// waits for each turn. So each thread of a `turns` VM that shares its
/// CPUs leaves KVM_RUN every `sibling_turn` of wall time (its own
/// CLOCK_MONOTONIC timer; a thread CPU-time timer fires only at the tick),
/// and gives its CPU to the sibling beside it (`sched_yield`, which the
/// kernel's fair class answers by running the other thread there) if it
/// has run half a turn since it last did, a sibling shares its CPU and its
/// guest sits in a spin-wait loop (`pause_loop`). A lock holder is not in
/// its wait loop, so it keeps the CPU; a spin lock VM still pays an exit
/// per turn, which stops a holder for an exit's length (0.6-0.7x the host
/// kernel's acquisitions at 3:1 here), which is why turns are a mode a VM
/// asks for.
pub(crate) struct SiblingTurns {
    /// Deleted with the gate (`QuantumTimer`'s drop).
    _timer: crate::clock::QuantumTimer,
    turn_ns: u64,
    /// The thread's CPU clock when it last gave its CPU away.
    yielded_at_cpu_ns: u64,
}

impl SiblingTurns {
    /// Turns of `turn_ns` for the calling thread, whose CPU clock reads
    /// `cpu_now`.
    pub(crate) fn start(
        turn_ns: u64,
        cpu_now: u64,
    ) -> Result<SiblingTurns, crate::clock::ClockError> {
        let timer = crate::clock::QuantumTimer::for_current_thread()?;
        timer.every(turn_ns);
        Ok(SiblingTurns {
            _timer: timer,
            turn_ns,
            yielded_at_cpu_ns: cpu_now,
        })
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
}

/// The CPU a queued sibling shares: of the `owned` CPUs of its VM (in the
/// engine's order), the one its `index` picks.
pub(crate) fn pick(owned: usize, index: u32) -> usize {
    index as usize % owned.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vm_shares_only_after_a_quiet_spell_and_stops_at_a_halt() {
        let s = SiblingShare::new(1_000);
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
    fn a_turn_is_due_after_half_a_turn_of_cpu_time_since_the_last_yield() {
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
    fn queued_siblings_spread_over_the_cpus_their_vm_owns() {
        assert_eq!(pick(2, 0), 0);
        assert_eq!(pick(2, 1), 1);
        assert_eq!(pick(2, 2), 0);
        assert_eq!(pick(1, 5), 0);
        // No CPU owned never divides by zero (the caller checks first).
        assert_eq!(pick(0, 3), 0);
    }
}
