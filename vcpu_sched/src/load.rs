//! Load estimation (Haiku's `compute_load`, `ThreadData::_ComputeNeededLoad`
//! and `CoreEntry::_UpdateLoad`).
//!
//! An entity's load is "the share of a CPU it would use if it ran alone":
//! running time over running + sleeping time. Time spent waiting in a run
//! queue is excluded, otherwise an overloaded core would make its entities
//! look lighter than they are. The estimate is refreshed at most once per
//! measure interval and old values decay by halves per elapsed interval.
//!
//! A core's load is the sum of the estimates of the entities that were
//! ready on it during the current epoch: an entity that blocks keeps
//! counting until the epoch rolls over (it is likely to come back soon),
//! and one that wakes in the same epoch is not counted twice.

use crate::tunables::{Tunables, LOAD_SCALE};
use crate::Nanos;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// Beyond this many elapsed intervals the old estimate is forgotten.
const MAX_DECAY_SHIFT: u64 = 10;

/// Per-entity load measurement.
#[derive(Debug, Clone, Default)]
pub(crate) struct EntityLoad {
    /// Current estimate, 0..=LOAD_SCALE.
    pub load: u32,
    /// Running time since the last update.
    active: Nanos,
    /// Running + sleeping time since the last update.
    available: Nanos,
}

impl EntityLoad {
    /// Account running time.
    pub fn ran(&mut self, d: Nanos) {
        self.active = self.active.saturating_add(d);
        self.available = self.available.saturating_add(d);
    }

    /// Account sleeping time (never queue wait).
    pub fn slept(&mut self, d: Nanos) {
        self.available = self.available.saturating_add(d);
    }

    /// Fold the measured window into the estimate if at least one interval
    /// of running + sleeping time has passed: load = (old + new*(2^n-1)) / 2^n
    /// for n elapsed intervals. Returns whether the estimate changed.
    pub fn update(&mut self, interval: Nanos) -> bool {
        let interval = interval.max(1);
        if self.available < interval {
            return false;
        }
        let new = match self.active.checked_mul(LOAD_SCALE as u64) {
            // The usual case in u64 (a u128 division is a library call).
            Some(scaled) => (scaled / self.available).min(LOAD_SCALE as u64),
            None => ((self.active as u128 * LOAD_SCALE as u128) / self.available as u128)
                .min(LOAD_SCALE as u128) as u64,
        };
        let n = self.available / interval;
        let old = self.load;
        self.load = if n > MAX_DECAY_SHIFT {
            new as u32
        } else {
            ((self.load as u64 + new * ((1 << n) - 1)) >> n) as u32
        };
        self.active = 0;
        self.available = 0;
        old != self.load
    }
}

/// Per-core load with epochs and the high-load hysteresis.
#[derive(Debug, Default)]
pub(crate) struct CoreLoad {
    /// Sum of the loads of entities ready on the core now.
    current: AtomicI64,
    /// Sum of the share weights of entities ready on the core now (the
    /// fair-share boost's entitlement divides the core by it).
    weight: AtomicU64,
    /// Sum of the operator weights (`shares.rs`) of the entities ready on
    /// the core now, and their number: slices scale by weight over the mean.
    slice_weight: AtomicU64,
    ready_count: AtomicU64,
    /// Sum over entities ready on the core during the current epoch.
    epoch_load: AtomicI64,
    epoch: AtomicU64,
    epoch_start: AtomicU64,
    /// In the high-load set (entered above `load_high`, left below `load_medium`).
    high: AtomicBool,
    /// Readers add/remove, the epoch roll-over writes (Haiku's fLoadLock).
    roll: RwLock<()>,
}

impl CoreLoad {
    /// An entity becomes ready on the core. `left` is the epoch in which it
    /// last left this core and the load it had then (`None` if it was not
    /// counted here): if that epoch is still current its load is still in
    /// the epoch sum, so only the difference is added.
    pub fn add(&self, load: u32, left: Option<(u64, u32)>, weight: u32) {
        self.weight.fetch_add(weight as u64, Ordering::Relaxed);
        let _r = self.roll.read();
        self.current.fetch_add(load as i64, Ordering::Relaxed);
        let counted = match left {
            Some((epoch, old)) if epoch == self.epoch.load(Ordering::Relaxed) => old as i64,
            _ => 0,
        };
        self.epoch_load
            .fetch_add(load as i64 - counted, Ordering::Relaxed);
    }

    /// An entity stops being ready on the core. With `force` (it moves to
    /// another core, or is removed) it leaves the epoch sum at once; otherwise
    /// it keeps counting until the epoch rolls. Returns the current epoch.
    pub fn remove(&self, load: u32, force: bool, weight: u32) -> u64 {
        self.weight.fetch_sub(weight as u64, Ordering::Relaxed);
        let _r = self.roll.read();
        self.current.fetch_sub(load as i64, Ordering::Relaxed);
        if force {
            self.epoch_load.fetch_sub(load as i64, Ordering::Relaxed);
        }
        self.epoch.load(Ordering::Relaxed)
    }

    /// The estimate of a ready entity changed by `delta`.
    pub fn change(&self, delta: i64) {
        let _r = self.roll.read();
        self.current.fetch_add(delta, Ordering::Relaxed);
        self.epoch_load.fetch_add(delta, Ordering::Relaxed);
    }

    /// Roll the epoch if it is over: the epoch sum restarts from the entities
    /// ready now. Updates the high-load hysteresis from the per-CPU load.
    /// Returns whether this call rolled the epoch.
    pub fn maybe_roll(&self, now: Nanos, cpus: usize, t: &Tunables) -> bool {
        if !self.epoch_over(now, t) {
            return false;
        }
        let _w = self.roll.write();
        if now
            < self
                .epoch_start
                .load(Ordering::Relaxed)
                .saturating_add(t.load_epoch)
        {
            return false;
        }
        let cur = self.current.load(Ordering::Relaxed).max(0);
        self.epoch_load.store(cur, Ordering::Relaxed);
        // Written only here, under the write lock: no locked increment.
        let epoch = self.epoch.load(Ordering::Relaxed);
        self.epoch.store(epoch.wrapping_add(1), Ordering::Relaxed);
        self.epoch_start.store(now, Ordering::Relaxed);
        self.update_high(self.per_cpu(cpus), t);
        true
    }

    /// Whether the current epoch is over at `now` (`maybe_roll` would roll).
    #[inline]
    pub fn epoch_over(&self, now: Nanos, t: &Tunables) -> bool {
        now >= self
            .epoch_start
            .load(Ordering::Relaxed)
            .saturating_add(t.load_epoch)
    }

    /// Haiku's two heaps as a flag with hysteresis.
    fn update_high(&self, load: u32, t: &Tunables) {
        if load > t.load_high {
            self.high.store(true, Ordering::Relaxed);
        } else if load < t.load_medium {
            self.high.store(false, Ordering::Relaxed);
        }
    }

    /// Core load per CPU of the core (0..=LOAD_SCALE per CPU on average).
    pub fn per_cpu(&self, cpus: usize) -> u32 {
        let sum = self.epoch_load.load(Ordering::Relaxed).max(0) as u64;
        (sum / cpus.max(1) as u64).min(u32::MAX as u64) as u32
    }

    /// An entity of operator weight `w` became ready on the core.
    pub fn add_slice(&self, w: u32) {
        self.slice_weight.fetch_add(w as u64, Ordering::Relaxed);
        self.ready_count.fetch_add(1, Ordering::Relaxed);
    }

    /// An entity of operator weight `w` stopped being ready on the core.
    pub fn remove_slice(&self, w: u32) {
        self.slice_weight.fetch_sub(w as u64, Ordering::Relaxed);
        self.ready_count.fetch_sub(1, Ordering::Relaxed);
    }

    /// A ready entity's operator weight changed.
    pub fn reslice(&self, old: u32, new: u32) {
        self.slice_weight.fetch_add(new as u64, Ordering::Relaxed);
        self.slice_weight.fetch_sub(old as u64, Ordering::Relaxed);
    }

    /// Sum of the operator weights ready on the core and their number.
    pub fn slice_weights(&self) -> (u64, u64) {
        (
            self.slice_weight.load(Ordering::Relaxed),
            self.ready_count.load(Ordering::Relaxed),
        )
    }

    /// Sum of the share weights of the entities ready on the core now.
    pub fn ready_weight(&self) -> u64 {
        self.weight.load(Ordering::Relaxed)
    }

    /// A ready entity's share weight changed from `old` to `new`.
    pub fn reweigh(&self, old: u32, new: u32) {
        self.weight.fetch_add(new as u64, Ordering::Relaxed);
        self.weight.fetch_sub(old as u64, Ordering::Relaxed);
    }

    /// The current epoch's number.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// Whether the core is in the high-load set.
    pub fn is_high(&self) -> bool {
        self.high.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn load_decays_by_halves_per_interval() {
        let mut l = EntityLoad::default();
        // Below one interval nothing changes (updated at most every 1 ms).
        l.ran(MS / 2);
        assert!(!l.update(MS));
        assert_eq!(l.load, 0);
        // One interval of full running: (0 + 1000*1)/2 = 500.
        l.ran(MS / 2);
        assert!(l.update(MS));
        assert_eq!(l.load, 500);
        // Two intervals running: (500 + 1000*3)/4 = 875.
        l.ran(2 * MS);
        l.update(MS);
        assert_eq!(l.load, 875);
        // One interval asleep: (875 + 0)/2 = 437.
        l.slept(MS);
        l.update(MS);
        assert_eq!(l.load, 437);
        // Half running half sleeping over 20 intervals: old value forgotten.
        l.ran(10 * MS);
        l.slept(10 * MS);
        l.update(MS);
        assert_eq!(l.load, 500);
    }

    #[test]
    fn core_load_epoch_rule_keeps_sleepers_until_roll() {
        let t = Tunables::default();
        let c = CoreLoad::default();
        c.maybe_roll(0, 1, &t);
        c.add(400, None, 10);
        assert_eq!(c.per_cpu(1), 400);
        // Blocks: still counted this epoch.
        let ep = c.remove(400, false, 10);
        assert_eq!(c.per_cpu(1), 400);
        // Wakes in the same epoch: not counted twice.
        c.add(400, Some((ep, 400)), 10);
        assert_eq!(c.per_cpu(1), 400);
        let ep = c.remove(400, false, 10);
        // Epoch rolls: the sleeper drops out.
        c.maybe_roll(2 * MS, 1, &t);
        assert_eq!(c.per_cpu(1), 0);
        // Wakes in a later epoch: counted again.
        c.add(400, Some((ep, 400)), 10);
        assert_eq!(c.per_cpu(1), 400);
        // Forced removal (migration) leaves at once.
        c.remove(400, true, 10);
        assert_eq!(c.ready_weight(), 0);
        assert_eq!(c.per_cpu(1), 0);
    }

    #[test]
    fn high_medium_hysteresis() {
        let t = Tunables::default();
        let c = CoreLoad::default();
        let mut now = 0;
        let mut set = |c: &CoreLoad, load: i64| {
            c.current.store(load, Ordering::Relaxed);
            now += 2 * MS;
            c.maybe_roll(now, 1, &t);
            c.is_high()
        };
        assert!(!set(&c, 700), "700 is not above high");
        assert!(set(&c, 701), "enters above 700");
        assert!(set(&c, 650), "stays between medium and high");
        assert!(set(&c, 625), "625 is not below medium");
        assert!(!set(&c, 624), "leaves below 625");
        assert!(!set(&c, 690), "does not re-enter below high");
    }
}
