//! Relaxed co-scheduling (beyond Haiku; after VMware ESXi's relaxed
//! co-scheduling): the per-VM option and the state siblings share.
//!
//! Progress of a vCPU is its run time while runnable; a vCPU that wakes
//! from a halt starts level with the VM's lead (a halted vCPU is not a
//! laggard: it has nothing to do). The *laggard* is a sibling parked in a
//! queue (runnable, not running) whose progress is the lowest the VM
//! knows of; a vCPU's skew is its progress minus the laggard's. Every
//! update is O(1): the VM keeps its lead and one laggard (a hint: the
//! slowest of the siblings that parked while the hint was free or
//! slower), never a scan over the siblings. The policy's use of it
//! (co-start, co-stop, directed yield) is in `policy/haiku/cosched.rs`.

use crate::entity::QueueRef;
use crate::{CoreId, CpuId, EntityId, Nanos};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// A VM's co-scheduling, spelled `off`, `relaxed` and `turns` everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Coschedule {
    /// Each vCPU is scheduled on its own (Haiku's rules alone); the
    /// default for a VM of one vCPU or of more vCPUs than CPUs
    /// ([`Coschedule::default_for`]).
    #[default]
    Off,
    /// Relaxed co-scheduling: skew tracking, co-start of a parked sibling
    /// next to a running one, co-stop past the skew bound, directed
    /// yields to a parked sibling.
    Relaxed,
    /// Relaxed, and in a VM with more vCPUs than CPUs in its core set,
    /// sibling turns (`tunables.sibling_turn`): each slice goes round the
    /// siblings in short turns. For VMs that wait on every sibling (a
    /// barrier, a TLB shootdown's IPIs); a spin lock VM loses by it.
    Turns,
}

impl Coschedule {
    pub const ALL: [Coschedule; 3] = [Coschedule::Off, Coschedule::Relaxed, Coschedule::Turns];

    /// A VM's co-scheduling when its configuration does not say:
    /// `relaxed` for an SMP VM, `off` for one vCPU. Relaxed co-scheduling
    /// of a VM that fits the CPUs it may use keeps its siblings on
    /// different cores; guests at 2:1 next to hogs did 1.16-1.43x what
    /// they did with it off (a spin lock, a barrier, a TLB shootdown), and
    /// no row of the seeds matrix lost beyond its noise (ARCHITECTURE.md,
    /// "Relaxed co-scheduling"). A VM wider than its CPUs has a sibling
    /// queued at all times; relaxed, its queued siblings share the CPUs it
    /// owns under the engine's `ranked` dispatch (`vcpu_engine`'s sibling
    /// sharing) while none of its vCPUs halts: at 3:1 beside hogs its
    /// barrier went from 0.26-0.28x the host kernel's rounds to 0.76-0.9x (1.1x with
    /// the 2 ms slices a VM that names its co-scheduling gets), with a
    /// request server (a wide VM that halts) unchanged.
    pub fn default_for(vcpus: u32) -> Coschedule {
        if vcpus > 1 {
            Coschedule::Relaxed
        } else {
            Coschedule::Off
        }
    }

    /// The one spelling of the option's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Coschedule::Off => "off",
            Coschedule::Relaxed => "relaxed",
            Coschedule::Turns => "turns",
        }
    }
}

impl std::fmt::Display for Coschedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Coschedule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Coschedule::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| format!("unknown coschedule {s:?} (expected off, relaxed or turns)"))
    }
}

/// No laggard known.
const NONE: u64 = u64::MAX;

fn pack(id: EntityId) -> u64 {
    (u64::from(id.generation()) << 32) | u64::from(id.index())
}

fn unpack(raw: u64) -> EntityId {
    EntityId::new(raw as u32, (raw >> 32) as u32)
}

/// A queue, as one word (core queues below 2^32, pinned queues above).
fn pack_queue(q: QueueRef) -> u64 {
    match q {
        QueueRef::Core(c) => u64::from(c.0),
        QueueRef::Pinned(cpu) => (1 << 32) | u64::from(cpu.0),
    }
}

fn unpack_queue(raw: u64) -> QueueRef {
    if raw >> 32 == 0 {
        QueueRef::Core(CoreId(raw as u32))
    } else {
        QueueRef::Pinned(CpuId(raw as u32))
    }
}

/// A parked sibling, as the VM last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Laggard {
    pub id: EntityId,
    /// The asker's progress minus the laggard's (0 if the asker is behind).
    pub skew: Nanos,
    /// The level it was queued at.
    pub level: u8,
    /// The queue it was put in.
    pub queue: QueueRef,
}

/// What the siblings of one co-scheduled VM share. Written by the
/// siblings' own transitions (park, dispatch, stop), each under its own
/// entity lock; the fields are hints read without a lock (a stale one
/// costs one decision's preference, never a wrong run).
#[derive(Debug)]
pub(crate) struct VmSync {
    /// The highest progress a sibling has reached.
    lead: AtomicU64,
    laggard: AtomicU64,
    laggard_progress: AtomicU64,
    laggard_level: AtomicU8,
    laggard_queue: AtomicU64,
    /// Siblings parked now (each counted once, `Entity::park_sync`).
    parked: AtomicU32,
    /// The VM takes sibling turns (`Coschedule::Turns`).
    turns: AtomicBool,
    /// When a sibling last blocked (a halt the policy saw; 0: never).
    blocked_at: AtomicU64,
    /// No sibling searches for a gathering before this time (a search
    /// that found nothing set it; 0: search now).
    gather_retry_at: AtomicU64,
}

impl Default for VmSync {
    fn default() -> Self {
        VmSync {
            lead: AtomicU64::new(0),
            laggard: AtomicU64::new(NONE),
            laggard_progress: AtomicU64::new(0),
            laggard_level: AtomicU8::new(0),
            laggard_queue: AtomicU64::new(0),
            parked: AtomicU32::new(0),
            turns: AtomicBool::new(false),
            blocked_at: AtomicU64::new(0),
            gather_retry_at: AtomicU64::new(0),
        }
    }
}

impl VmSync {
    /// The progress of a sibling waking from a halt: level with the lead.
    pub fn woken(&self, progress: Nanos) -> Nanos {
        progress.max(self.lead.load(Ordering::Relaxed))
    }

    /// A sibling ran up to `progress`.
    pub fn ran(&self, progress: Nanos) {
        raise_to(&self.lead, progress);
    }

    /// `id` (at `progress`) went to queue `q` at `level` from running or
    /// blocked: it becomes the laggard if none is known or it is slower.
    pub fn parked(&self, id: EntityId, progress: Nanos, level: u8, q: QueueRef) {
        self.parked.fetch_add(1, Ordering::Relaxed);
        let cur = self.laggard.load(Ordering::Acquire);
        let slower = cur == NONE || progress < self.laggard_progress.load(Ordering::Relaxed);
        if slower
            && self
                .laggard
                .compare_exchange(cur, pack(id), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.laggard_progress.store(progress, Ordering::Relaxed);
            self.note(level, q);
        }
    }

    /// `id`, queued already, moved to queue `q` at `level`.
    pub fn moved(&self, id: EntityId, level: u8, q: QueueRef) {
        if self.laggard.load(Ordering::Acquire) == pack(id) {
            self.note(level, q);
        }
    }

    fn note(&self, level: u8, q: QueueRef) {
        self.laggard_level.store(level, Ordering::Relaxed);
        self.laggard_queue.store(pack_queue(q), Ordering::Relaxed);
    }

    /// Whether the VM takes sibling turns (`Coschedule::Turns`).
    pub fn takes_turns(&self) -> bool {
        self.turns.load(Ordering::Relaxed)
    }

    /// Switch sibling turns on or off.
    pub fn set_turns(&self, on: bool) {
        self.turns.store(on, Ordering::Relaxed);
    }

    /// A sibling blocked (halted) at `now`.
    pub fn blocked(&self, now: Nanos) {
        raise_to(&self.blocked_at, now);
    }

    /// Whether no sibling has blocked for `quiet` up to `now` (one that
    /// never blocked has been quiet since the clock's start).
    pub fn quiet_for(&self, quiet: Nanos, now: Nanos) -> bool {
        now.saturating_sub(self.blocked_at.load(Ordering::Relaxed)) >= quiet
    }

    /// Whether a sibling may search for a gathering at `now` (no search
    /// that found nothing asked to wait past it).
    pub fn may_search_gathering(&self, now: Nanos) -> bool {
        now >= self.gather_retry_at.load(Ordering::Relaxed)
    }

    /// A search for a gathering found nothing: the next waits until `at`.
    pub fn gathering_found_nothing(&self, at: Nanos) {
        raise_to(&self.gather_retry_at, at);
    }

    /// How many siblings are parked now (runnable, in a queue).
    pub fn parked_count(&self) -> u32 {
        self.parked.load(Ordering::Relaxed)
    }

    /// `id` left the queues (dispatched, throttled, removed).
    pub fn unparked(&self, id: EntityId) {
        // Saturating: a count, never below zero whatever the order.
        let _ = self
            .parked
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        let me = pack(id);
        if self.laggard.load(Ordering::Acquire) == me {
            let _ = self
                .laggard
                .compare_exchange(me, NONE, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// The laggard as seen by sibling `id` at `progress` (None: none
    /// known, or `id` is it).
    pub fn laggard_of(&self, id: EntityId, progress: Nanos) -> Option<Laggard> {
        let raw = self.laggard.load(Ordering::Acquire);
        if raw == NONE || raw == pack(id) {
            return None;
        }
        Some(Laggard {
            id: unpack(raw),
            skew: progress.saturating_sub(self.laggard_progress.load(Ordering::Relaxed)),
            level: self.laggard_level.load(Ordering::Relaxed),
            queue: unpack_queue(self.laggard_queue.load(Ordering::Relaxed)),
        })
    }
}

/// Raise `a` to `v` if `v` is higher. Loaded first: the read-modify-write
/// (a cache line taken exclusive) only when it raises.
fn raise_to(a: &AtomicU64, v: u64) {
    if v > a.load(Ordering::Relaxed) {
        a.fetch_max(v, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: u32) -> EntityId {
        EntityId::new(i, 1)
    }

    #[test]
    fn the_slowest_parked_sibling_is_the_laggard_until_it_leaves() {
        let s = VmSync::default();
        let q = QueueRef::Core(CoreId(1));
        s.parked(id(1), 500, 10, q);
        // A faster sibling parking does not replace it; a slower one does.
        s.parked(id(2), 900, 10, q);
        assert_eq!(
            s.laggard_of(id(0), 1_000).map(|l| (l.id, l.skew)),
            Some((id(1), 500))
        );
        s.parked(id(3), 100, 7, QueueRef::Pinned(CpuId(3)));
        let l = s.laggard_of(id(0), 1_000).unwrap();
        assert_eq!(
            (l.id, l.skew, l.level, l.queue),
            (id(3), 900, 7, QueueRef::Pinned(CpuId(3)))
        );
        // Itself is not its own laggard; behind it, no skew.
        assert_eq!(s.laggard_of(id(3), 100), None);
        assert_eq!(s.laggard_of(id(0), 50).unwrap().skew, 0);
        // Only the laggard's own departure clears the hint.
        s.unparked(id(1));
        assert!(s.laggard_of(id(0), 0).is_some());
        s.unparked(id(3));
        assert_eq!(s.laggard_of(id(0), 0), None);
    }

    #[test]
    fn a_vm_is_quiet_once_no_sibling_blocked_for_the_spell() {
        let s = VmSync::default();
        assert!(s.quiet_for(20, 20), "never blocked: quiet since 0");
        assert!(!s.quiet_for(20, 19));
        s.blocked(100);
        assert!(!s.quiet_for(20, 119));
        assert!(s.quiet_for(20, 120));
        // An older sighting does not move the last block back.
        s.blocked(50);
        assert!(!s.quiet_for(20, 119));
    }

    #[test]
    fn a_fruitless_gathering_search_holds_the_next_back_until_its_retry() {
        let s = VmSync::default();
        assert!(s.may_search_gathering(0));
        s.gathering_found_nothing(500);
        assert!(!s.may_search_gathering(499));
        assert!(s.may_search_gathering(500));
        // A concurrent search that ended earlier does not shorten the wait.
        s.gathering_found_nothing(300);
        assert!(!s.may_search_gathering(499));
    }

    #[test]
    fn a_woken_sibling_starts_level_with_the_lead() {
        let s = VmSync::default();
        s.ran(300);
        s.ran(200);
        assert_eq!(s.woken(10), 300);
        assert_eq!(s.woken(400), 400);
    }

    #[test]
    fn coschedule_spellings_round_trip() {
        for c in Coschedule::ALL {
            assert_eq!(c.as_str().parse::<Coschedule>(), Ok(c));
        }
        assert!("on"
            .parse::<Coschedule>()
            .unwrap_err()
            .contains("off, relaxed or turns"));
    }
}
