//! Time slices (Haiku's `ThreadData::ComputeQuantum` and the per-mode
//! quantum tables).
//!
//! The base quantum depends only on the effective priority E and is cached
//! in the entity; the actual slice is recomputed at every dispatch from the
//! time already *used*, capped by the ready count of the core so that all
//! ready entities of a core run within the mode's maximum latency.
//!
//! Haiku computes that cap once, when the entity is dispatched. An entity
//! that queues behind the runner afterwards changes the ready count, so
//! the runner's slice is re-checked then (`cut_end`): the only moment the
//! answer can change between two dispatches of the CPU.

use crate::tunables::{QuantumTable, PRIORITY_NORMAL, PRIORITY_URGENT};
use crate::{EntityId, Nanos};

/// Base quantum for effective priority `e`: E >= 20 -> base; 10..20 ->
/// linear from base*m0 (E=10) down to base (E=20); 0..10 -> linear from
/// base*m1 (E=0) down to base*m0 (E=10).
pub(crate) fn base_quantum(table: &QuantumTable, e: u8) -> Nanos {
    let base = table.base_quantum;
    let at10 = base.saturating_mul(table.quantum_multipliers[0] as Nanos);
    let at0 = base.saturating_mul(table.quantum_multipliers[1] as Nanos);
    let (urgent, normal) = (PRIORITY_URGENT as Nanos, PRIORITY_NORMAL as Nanos);
    let e = e as Nanos;
    if e >= urgent {
        base
    } else if e >= normal {
        interpolate(at10, base, e - normal, urgent - normal)
    } else {
        interpolate(at0, at10, e, normal)
    }
}

/// `from + (to - from) * step / steps`, for either direction.
fn interpolate(from: Nanos, to: Nanos, step: Nanos, steps: Nanos) -> Nanos {
    let steps = steps.max(1);
    let (lo, hi) = (from.min(to), from.max(to));
    if let Some(scaled) = (hi - lo).checked_mul(step) {
        // The usual case in u64 (a u128 division is a library call).
        return if to >= from {
            from + scaled / steps
        } else {
            from - scaled / steps
        };
    }
    // u128: tunables come from users; huge quanta must not overflow.
    let (from, to, step, steps) = (from as u128, to as u128, step as u128, steps as u128);
    let v = if to >= from {
        from + (to - from) * step / steps
    } else {
        from - (from - to) * step / steps
    };
    v.min(Nanos::MAX as u128) as Nanos
}

/// Ready-count cap: max(maximum_latency / n, minimal_quantum) with
/// n = ready entities of the core / CPUs of the core (at least 1). The
/// caller counts the entity being dispatched and the core's running ones,
/// as Haiku's `CoreEntry::ThreadCount()` does (queued + busy CPUs, the
/// dispatching CPU already busy); see ARCHITECTURE.md.
pub(crate) fn quantum_cap(table: &QuantumTable, ready_on_core: usize, core_cpus: usize) -> Nanos {
    let n = (ready_on_core / core_cpus.max(1)).max(1) as Nanos;
    (table.maximum_latency / n).max(table.minimal_quantum)
}

/// Full quantum of an entity: realtime gets its base quantum uncapped
/// (bounded latency is its point), others min(cap, base).
pub(crate) fn full_quantum(
    table: &QuantumTable,
    base: Nanos,
    realtime: bool,
    ready: usize,
    cpus: usize,
) -> Nanos {
    if realtime {
        base
    } else {
        base.min(quantum_cap(table, ready, cpus))
    }
}

/// Time left of a quantum after `used`, or `None` when what is left is at
/// most half the minimal quantum: then the quantum counts as ended.
pub(crate) fn time_left(table: &QuantumTable, quantum: Nanos, used: Nanos) -> Option<Nanos> {
    let left = quantum.saturating_sub(used);
    (left > table.minimal_quantum / 2).then_some(left)
}

/// The quantum of the entity a CPU runs, as dispatched (and as cut since).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Turn {
    pub entity: EntityId,
    pub dispatched_at: Nanos,
    /// Time of its quantum it had used before this dispatch.
    pub used_before: Nanos,
    /// The full quantum its use is measured against (lowered by a cut).
    pub full: Nanos,
    pub realtime: bool,
    /// When its slice ends now.
    pub end: Nanos,
    /// The earliest end a cut may give it: the minimal quantum after its
    /// dispatch, or the end it was given if its slice was shorter.
    pub floor: Nanos,
}

impl Turn {
    /// The turn of `entity` dispatched at `now` with `slice` of its `full`
    /// quantum left after `used_before`.
    pub fn new(
        table: &QuantumTable,
        entity: EntityId,
        now: Nanos,
        used_before: Nanos,
        full: Nanos,
        slice: Nanos,
        realtime: bool,
    ) -> Turn {
        let end = now.saturating_add(slice);
        Turn {
            entity,
            dispatched_at: now,
            used_before,
            full,
            realtime,
            end,
            floor: now.saturating_add(table.minimal_quantum).min(end),
        }
    }

    /// End the turn at `end`, its full quantum kept: a sibling turn
    /// (`policy/haiku/cosched.rs`), whose stop there leaves the rest of
    /// its quantum for its next turn.
    pub fn end_early(&mut self, end: Nanos) {
        debug_assert!(end < self.end && end >= self.floor);
        self.end = end;
    }

    /// Bring the end forward to `end` (from [`cut_end`]); the full quantum
    /// follows, so a stop at the new end counts as a quantum end.
    pub fn cut_to(&mut self, end: Nanos) {
        debug_assert!(end < self.end && end >= self.floor);
        self.end = end;
        self.full = (end - self.dispatched_at).saturating_add(self.used_before);
    }
}

/// The earlier end of a timeshare `turn` once `ready` entities are ready on
/// its core of `core_cpus` CPUs (the runner and the newcomer included), or
/// `None` if it keeps its end. The full quantum becomes min(full,
/// `quantum_cap`), the rule of the dispatch, so the end is the dispatch
/// plus that quantum less what was used before it, or `due` if that is
/// earlier (the moment a waiting waker's share is due, `share.rs`); but
/// never before
/// `turn.floor` (the minimal quantum after the dispatch), never before
/// `now` (a runner that already ran past the new quantum stops now), never
/// later than the end it has. Realtime turns are never cut (bounded
/// latency is their point, and their quantum is not capped).
pub(crate) fn cut_end(
    table: &QuantumTable,
    turn: &Turn,
    ready: usize,
    core_cpus: usize,
    now: Nanos,
    due: Option<Nanos>,
) -> Option<Nanos> {
    if turn.realtime {
        return None;
    }
    let full = turn.full.min(quantum_cap(table, ready, core_cpus));
    let by_cap = turn
        .dispatched_at
        .saturating_add(full.saturating_sub(turn.used_before));
    let end = by_cap.min(due.unwrap_or(Nanos::MAX));
    let end = end.max(turn.floor).max(now);
    (end < turn.end).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Nanos = 1000;

    #[test]
    fn quantum_table_low_latency_values() {
        let t = QuantumTable::LOW_LATENCY;
        let got: Vec<Nanos> = [0, 5, 10, 15, 20, 50]
            .iter()
            .map(|&e| base_quantum(&t, e) / US)
            .collect();
        // E=0: 5x, E=5: halfway 5x..2x = 3.5x, E=10: 2x, E=15: 1.5x, E>=20: 1x.
        assert_eq!(got, vec![5000, 3500, 2000, 1500, 1000, 1000]);
    }

    #[test]
    fn quantum_table_power_saving_values() {
        let t = QuantumTable::POWER_SAVING;
        let got: Vec<Nanos> = [0, 5, 10, 15, 20, 50]
            .iter()
            .map(|&e| base_quantum(&t, e) / US)
            .collect();
        assert_eq!(got, vec![20000, 13000, 6000, 4000, 2000, 2000]);
    }

    #[test]
    fn ready_count_cap_and_min_quantum_rule() {
        let t = QuantumTable::LOW_LATENCY;
        // 1 CPU per core: 2 ready -> 2500 us, 10 ready -> 500 us, 100 ready -> floor 100 us.
        assert_eq!(quantum_cap(&t, 2, 1), 2500 * US);
        assert_eq!(quantum_cap(&t, 10, 1), 500 * US);
        assert_eq!(quantum_cap(&t, 100, 1), 100 * US);
        // n counts per CPU of the core: 10 ready on a 2-thread core -> n = 5.
        assert_eq!(quantum_cap(&t, 10, 2), 1000 * US);
        assert_eq!(quantum_cap(&t, 0, 2), 5000 * US);
        // slice = min(cap, base(E)): E=0 base 5000 capped to 500 by 10 ready.
        assert_eq!(
            full_quantum(&t, base_quantum(&t, 0), false, 10, 1),
            500 * US
        );
        assert_eq!(
            full_quantum(&t, base_quantum(&t, 0), true, 10, 1),
            5000 * US
        );
        // Left <= minimal/2 (50 us) counts as ended.
        assert_eq!(time_left(&t, 1000 * US, 950 * US), None);
        assert_eq!(time_left(&t, 1000 * US, 949 * US), Some(51 * US));
        assert_eq!(time_left(&t, 1000 * US, 2000 * US), None);
    }

    fn turn(used_before: Nanos, full: Nanos, realtime: bool) -> Turn {
        let t = QuantumTable::LOW_LATENCY;
        let slice = full - used_before;
        Turn::new(
            &t,
            EntityId::new(0, 0),
            0,
            used_before,
            full,
            slice,
            realtime,
        )
    }

    #[test]
    fn a_newcomer_cuts_a_long_slice_to_the_cap_of_two() {
        let t = QuantumTable::LOW_LATENCY;
        // Dispatched alone at E=0: 5000 us; a second ready entity caps at 2500.
        let mut hog = turn(0, 5000 * US, false);
        assert_eq!(cut_end(&t, &hog, 2, 1, 300 * US, None), Some(2500 * US));
        hog.cut_to(2500 * US);
        assert_eq!(hog.full, 2500 * US);
        // A third one: 5000 / 3.
        assert_eq!(cut_end(&t, &hog, 3, 1, 400 * US, None), Some(1_666_666));
        // The same count again changes nothing; the cap never lengthens.
        assert_eq!(cut_end(&t, &hog, 2, 1, 400 * US, None), None);
        assert_eq!(cut_end(&t, &hog, 1, 1, 400 * US, None), None);
        // A due time earlier than the cap's end wins, bounded by the floor.
        assert_eq!(
            cut_end(&t, &hog, 2, 1, 400 * US, Some(900 * US)),
            Some(900 * US)
        );
        assert_eq!(
            cut_end(&t, &hog, 1, 1, 400 * US, Some(10 * US)),
            Some(400 * US),
            "never before now"
        );
    }

    #[test]
    fn a_cut_counts_the_time_used_before_the_dispatch() {
        let t = QuantumTable::LOW_LATENCY;
        // 800 us used before a dispatch of the rest of 5000: the cap of 2
        // leaves 1700 us after the dispatch.
        let r = turn(800 * US, 5000 * US, false);
        assert_eq!(r.end, 4200 * US);
        assert_eq!(cut_end(&t, &r, 2, 1, 100 * US, None), Some(1700 * US));
        // 2450 used before: the cap would leave 50 us; the floor is the
        // minimal quantum (100 us) after the dispatch.
        let r = turn(2450 * US, 5000 * US, false);
        assert_eq!(cut_end(&t, &r, 2, 1, 10 * US, None), Some(100 * US));
        // A slice shorter than the minimal quantum is never cut.
        let r = turn(4950 * US, 5000 * US, false);
        assert_eq!(cut_end(&t, &r, 100, 1, 10 * US, None), None);
    }

    #[test]
    fn a_runner_past_the_new_cap_ends_now() {
        let t = QuantumTable::LOW_LATENCY;
        // It ran 3000 us of 5000 when the second entity came: its quantum
        // by the new count (2500) is over, so it ends at the wake.
        let mut r = turn(0, 5000 * US, false);
        assert_eq!(cut_end(&t, &r, 2, 1, 3000 * US, None), Some(3000 * US));
        r.cut_to(3000 * US);
        assert_eq!(r.full, 3000 * US);
        assert_eq!(time_left(&t, r.full, 3000 * US), None, "ended at the cut");
    }

    #[test]
    fn realtime_and_two_cpu_cores() {
        let t = QuantumTable::LOW_LATENCY;
        assert_eq!(cut_end(&t, &turn(0, 5000 * US, true), 10, 1, 0, None), None);
        // Two CPUs per core: 4 ready -> n = 2 -> 2500.
        let r = turn(0, 5000 * US, false);
        assert_eq!(cut_end(&t, &r, 3, 2, 0, None), None);
        assert_eq!(cut_end(&t, &r, 4, 2, 0, None), Some(2500 * US));
    }
}
