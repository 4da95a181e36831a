//! Time slices (Haiku's `ThreadData::ComputeQuantum` and the per-mode
//! quantum tables).
//!
//! The base quantum depends only on the effective priority E and is cached
//! in the entity; the actual slice is recomputed at every dispatch from the
//! time already *used*, capped by the ready count of the core so that all
//! ready entities of a core run within the mode's maximum latency.

use crate::tunables::{QuantumTable, PRIORITY_NORMAL, PRIORITY_URGENT};
use crate::Nanos;

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
}
