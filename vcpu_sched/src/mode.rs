//! The two scheduler modes as one table of operations (Haiku's
//! `scheduler_mode_operations`: low_latency.cpp and power_saving.cpp).
//!
//! A mode decides (1) which idle CPU a waking entity takes, (2) which core
//! a cache-cold entity goes to when no CPU is idle, and (3) whether a
//! cache-warm entity leaves its core (rebalance). The time-slice table of
//! each mode lives in [`crate::tunables::QuantumTable`].

use crate::placement::{Candidate, Machine};
use crate::tunables::{Mode, Tunables};
use crate::{CoreId, CpuId, Nanos};
use std::sync::atomic::{AtomicU32, Ordering};

/// Operations that differ between the modes.
pub(crate) trait ModeOps: Send + Sync + std::fmt::Debug {
    /// The scheduler switched to this mode at run time (Haiku's
    /// `switch_to_mode`): forget state from an earlier stint.
    fn switched_to(&self) {}
    /// Claim an idle CPU for a waking entity, if the mode wants one.
    fn find_idle(&self, m: &Machine, c: &Candidate, t: &Tunables) -> Option<CpuId>;
    /// Core for a cache-cold entity when no idle CPU was taken.
    fn choose_core(&self, m: &Machine, c: &Candidate, t: &Tunables) -> Option<CoreId>;
    /// Core for a cache-warm entity currently on `core`.
    fn rebalance(&self, m: &Machine, c: &Candidate, core: CoreId, t: &Tunables) -> CoreId;
}

/// Build the operations of a mode.
pub(crate) fn ops_for(mode: Mode) -> Box<dyn ModeOps> {
    match mode {
        Mode::LowLatency => Box::new(LowLatency),
        Mode::PowerSaving => Box::new(PowerSaving {
            small_task_core: AtomicU32::new(NO_CORE),
        }),
    }
}

/// Rebalance rule shared by both modes: move from `core` to `other` only if
/// load(core) - load(other) - load_difference >= load(entity) / CPUs.
fn worth_moving(m: &Machine, c: &Candidate, core: CoreId, other: CoreId, t: &Tunables) -> bool {
    if other == core {
        return false;
    }
    let cpus = m.core_cpus(core).len().max(1) as i64;
    let gap = m.core_load(core, c.now) as i64
        - m.core_load(other, c.now) as i64
        - t.load_difference as i64;
    gap >= c.load as i64 / cpus
}

/// Rotation ([`crate::tunables::ROTATE_AFTER`]): an entity that stopped at
/// a quantum end on a crowded core (more entities ready there than CPUs,
/// counting itself) goes to the least loaded other core if that core is
/// less loaded and less crowded, no more crowded than this one once it
/// arrives, and neither core took part in a rotation for `rotate_after`.
/// The mover's lot does not change (it is on the crowded side before and
/// after); the move hands the crowded side to the entities that had the
/// roomy one. The mover is one that has run on the core since before
/// its last rotation (`resident_since`): not the last one to arrive,
/// which would otherwise stay on the crowded side move after move. Both
/// modes: once every CPU is busy there is nothing left to pack.
pub(crate) fn rotation_target(
    m: &Machine,
    c: &Candidate,
    core: CoreId,
    resident_since: Nanos,
    t: &Tunables,
) -> Option<CoreId> {
    let last = m.rotated_at(core);
    let arrived_with_last = last != 0 && resident_since >= last;
    if t.rotate_after == 0 || c.now.saturating_sub(last) < t.rotate_after || arrived_with_last {
        return None;
    }
    // The balance search of this epoch found no lighter core (the memo
    // `rebalance` leaves; an evenly overloaded machine stops here). Looked
    // at before the crowding below: two loads, where that is a loop.
    if m.calm_gap(core)
        .is_some_and(|gap| gap + t.load_difference as i64 <= 0)
    {
        return None;
    }
    let cpus = m.core_cpus(core).len().max(1);
    // The stopped entity is in no queue yet: it makes one more.
    let here = m.ready_on_core(core) + 1;
    if here <= cpus {
        return None;
    }
    let other = m.least_loaded_core(c).filter(|o| *o != core)?;
    if c.now.saturating_sub(m.rotated_at(other)) < t.rotate_after {
        return None;
    }
    let other_cpus = m.core_cpus(other).len().max(1);
    let there = m.ready_on_core(other) + 1;
    let less_crowded = (there - 1) * cpus < here * other_cpus;
    let no_worse = there * cpus <= here * other_cpus;
    let lighter = m.core_load(other, c.now) < m.core_load(core, c.now);
    (less_crowded && no_worse && lighter).then_some(other)
}

/// Spread: the previous CPU if warm and idle (when a vCPU of the same VM
/// woke it from another LLC, an idle core in the waker's LLC first); for
/// a cold entity a fully idle package, then the LLC with the most idle
/// cores; then a fully idle core nearest first, then any idle CPU; without
/// idle CPUs, the least loaded core.
#[derive(Debug)]
pub(crate) struct LowLatency;

impl ModeOps for LowLatency {
    fn find_idle(&self, m: &Machine, c: &Candidate, _t: &Tunables) -> Option<CpuId> {
        // Same CPU first in the locality order: a warm cache beats spreading
        // (unless a vCPU of its VM woke it from another LLC, below).
        let near_waker = |p: CpuId| c.waker_llc.is_none_or(|l| m.llc_of(p) == l);
        if let Some(prev) = c
            .prev
            .filter(|p| c.warm && near_waker(*p) && m.try_claim(*p, c))
        {
            return Some(prev);
        }
        // Woken by a vCPU of its VM from another LLC: next to the data they
        // share, while that LLC has an idle core; else its own warm CPU.
        if let Some(llc) = c.waker_llc {
            if let Some(cpu) = m.find_idle_core_in_llc(llc, c) {
                return Some(cpu);
            }
            if let Some(prev) = c.prev.filter(|p| c.warm && m.try_claim(*p, c)) {
                return Some(prev);
            }
        }
        if !c.warm {
            // Cold: a fully idle package (Haiku), else the LLC with the most
            // idle cores, so that unrelated vCPUs get a cache each.
            if let Some(cpu) = m.find_idle_package(c) {
                return Some(cpu);
            }
            if let Some(cpu) = m.find_idle_core_in_emptiest_llc(c) {
                return Some(cpu);
            }
        }
        m.find_idle_core(c).or_else(|| m.find_idle_cpu(c))
    }

    fn choose_core(&self, m: &Machine, c: &Candidate, _t: &Tunables) -> Option<CoreId> {
        m.least_loaded_core(c)
    }

    fn rebalance(&self, m: &Machine, c: &Candidate, core: CoreId, t: &Tunables) -> CoreId {
        let cpus = m.core_cpus(core).len().max(1) as i64;
        let need = c.load as i64 / cpus;
        let above = m.core_load(core, c.now) as i64 - t.load_difference as i64;
        // No core has a load below zero: if even that would not be worth
        // the move, skip the search (exact; a core that is not overloaded
        // stops here).
        if above < need {
            return core;
        }
        // A search this epoch found no move worth it for an entity this
        // heavy (ULE balances periodically, Haiku reads loads updated per
        // interval; here at most one fruitless search per core and epoch
        // for the heaviest entities).
        if m.calm_gap(core).is_some_and(|gap| gap < need) {
            return core;
        }
        let other = m.least_loaded_core(c).filter(|o| *o != core);
        let gap = other.map_or(i64::MIN, |o| above - m.core_load(o, c.now) as i64);
        if gap >= need {
            return other.unwrap_or(core);
        }
        m.remember_calm(core, gap);
        core
    }
}

const NO_CORE: u32 = u32::MAX;

/// Pack: small loads go to one "small task core" while it stays under the
/// high threshold; other cores are used only when it is full (or when an
/// entity would otherwise wait while a CPU it may use is idle).
#[derive(Debug)]
pub(crate) struct PowerSaving {
    small_task_core: AtomicU32,
}

impl PowerSaving {
    /// The small task core if it can take this entity without going high.
    fn small_core_with_room(&self, m: &Machine, c: &Candidate, t: &Tunables) -> Option<CoreId> {
        let core = self.small_task_core.load(Ordering::Relaxed);
        if core == NO_CORE || core as usize >= m.cores.len() {
            return None;
        }
        let core = CoreId(core);
        let cpus = m.core_cpus(core).len().max(1) as u32;
        let fits = m.core_load(core, c.now) + c.load / cpus < t.load_high;
        (fits && m.eligible(core, c.affinity)).then_some(core)
    }

    /// The most loaded eligible core that still has room (packing), made
    /// the small task core if there is none yet.
    fn pack_target(&self, m: &Machine, c: &Candidate, t: &Tunables) -> Option<CoreId> {
        if let Some(core) = self.small_core_with_room(m, c, t) {
            return Some(core);
        }
        let origin_core = m.core_of(c.origin);
        // Most loaded core with room; among equals the nearest (max_by_key
        // keeps the last maximum, hence the reversed rank).
        let best = m
            .cores_near(origin_core)
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, core)| m.eligible(*core, c.affinity))
            .filter(|(_, core)| {
                m.core_load(*core, c.now) + c.load / m.core_cpus(*core).len().max(1) as u32
                    <= t.load_high
            })
            .max_by_key(|(rank, core)| (m.core_load(*core, c.now), std::cmp::Reverse(*rank)))
            .map(|(_, core)| core)?;
        let _ = self.small_task_core.compare_exchange(
            NO_CORE,
            best.0,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        Some(best)
    }
}

impl ModeOps for PowerSaving {
    fn switched_to(&self) {
        self.small_task_core.store(NO_CORE, Ordering::Relaxed);
    }

    fn find_idle(&self, m: &Machine, c: &Candidate, t: &Tunables) -> Option<CpuId> {
        if c.warm {
            if let Some(cpu) = m.find_idle_in_core(m.core_of(c.origin), c) {
                return Some(cpu);
            }
        }
        if let Some(core) = self.pack_target(m, c, t) {
            if let Some(cpu) = m.find_idle_in_core(core, c) {
                return Some(cpu);
            }
        }
        m.find_idle_cpu(c)
    }

    fn choose_core(&self, m: &Machine, c: &Candidate, t: &Tunables) -> Option<CoreId> {
        self.pack_target(m, c, t).or_else(|| m.least_loaded_core(c))
    }

    fn rebalance(&self, m: &Machine, c: &Candidate, core: CoreId, t: &Tunables) -> CoreId {
        if m.core_load(core, c.now) > t.load_very_high {
            return match m.least_loaded_core(c) {
                Some(other) if worth_moving(m, c, core, other, t) => other,
                _ => core,
            };
        }
        // A lightly loaded core drains into the small task core so others can sleep.
        match self.small_core_with_room(m, c, t) {
            Some(small) if small != core && m.core_load(core, c.now) < t.load_low => small,
            _ => core,
        }
    }
}
