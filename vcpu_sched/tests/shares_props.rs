//! Property tests of haiku's operator caps (operator shares), driven through the
//! public API like a VMM: random topologies, random mixes of hogs and
//! sleepers with random weights, caps and reservations, every kick and
//! every `Dispatch::recheck_at` honoured at once.
//!
//! A capped vCPU's bucket holds at most one period's budget and refills
//! at the cap's rate, so over any window of W it runs at most
//! budget + cap x W: over any window of 10 periods, at most 11 budgets
//! (the cap plus one budget carried into the window's first instant).
//! Checked on every window that starts where one of its runs starts (a
//! window's run time is largest when it does). And it always runs again:
//! a throttled vCPU is renewed even when every CPU idles.

use proptest::prelude::*;
use vcpu_sched::shares::SHARE_PERIOD;
use vcpu_sched::{
    CpuId, CpuSet, EntityId, EntitySpec, Nanos, SchedClass, SchedConfig, StopReason, Topology, VmId,
};

const US: Nanos = 1_000;

#[derive(Debug, Clone)]
struct Def {
    /// Run burst then sleep (0: a hog).
    run_us: u64,
    sleep_us: u64,
    weight: u32,
    cap: Option<u32>,
    reservation: u32,
}

fn def() -> impl Strategy<Value = Def> {
    (
        50u64..3000,
        prop_oneof![Just(0u64), 50u64..5000],
        prop_oneof![Just(100u32), 1u32..1000],
        prop_oneof![Just(None), (50u32..=950).prop_map(Some)],
        prop_oneof![3 => Just(0u32), 1 => 1u32..200],
    )
        .prop_map(|(run_us, sleep_us, weight, cap, reservation)| Def {
            run_us,
            sleep_us,
            weight,
            cap,
            reservation: cap.map_or(reservation, |c| reservation.min(c)),
        })
}

struct Ent {
    id: EntityId,
    def: Def,
    /// Left of the current burst.
    left: Nanos,
    /// Asleep until then.
    wake_at: Option<Nanos>,
    runs: Vec<(Nanos, Nanos)>,
}

/// Run `defs` on `topo` for `end` ns; returns each entity's run intervals.
fn drive(topo: &str, defs: &[Def], end: Nanos) -> Vec<(Def, Vec<(Nanos, Nanos)>)> {
    let topology = Topology::from_spec(topo).unwrap();
    let ncpus = topology.cpus.len();
    let sched = vcpu_sched::build(topology, SchedConfig::default()).unwrap();
    let all = CpuSet::first_n(ncpus as u32);
    let mut ents: Vec<Ent> = defs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let id = sched
                .add_entity(
                    EntitySpec {
                        vm: VmId(i as u32),
                        class: SchedClass::Timeshare,
                        priority: 10,
                        affinity: all.clone(),
                    },
                    0,
                )
                .unwrap();
            sched.set_weight(id, d.weight, 0).unwrap();
            sched.set_cap(id, d.cap, 0).unwrap();
            sched.set_reservation(id, d.reservation, 0).unwrap();
            Ent {
                id,
                def: d.clone(),
                left: d.run_us * US,
                wake_at: None,
                runs: Vec::new(),
            }
        })
        .collect();
    // Per CPU: (entity index, dispatched at, quantum end) or idle with a recheck.
    let mut running: Vec<Option<(usize, Nanos, Nanos)>> = vec![None; ncpus];
    let mut recheck: Vec<Option<Nanos>> = vec![None; ncpus];
    let mut kicks: Vec<usize> = Vec::new();
    let index_of = |ents: &[Ent], id: EntityId| ents.iter().position(|e| e.id == id).unwrap();
    let mut now = 0;
    for e in &ents {
        if let Some(d) = sched.wake(e.id, 0).unwrap() {
            if d.kick {
                kicks.push(d.cpu.0 as usize);
            }
        }
    }
    for c in 0..ncpus {
        kicks.push(c);
    }
    loop {
        // Deliver kicks at once.
        while let Some(c) = kicks.pop() {
            let reason = match running[c] {
                Some(_) => StopReason::Preempted,
                None => StopReason::Idle,
            };
            schedule(
                &*sched,
                c,
                now,
                reason,
                &mut ents,
                &mut running,
                &mut recheck,
                &mut kicks,
                &index_of,
            );
        }
        // The next event: a run stopping, a recheck, a sleeper waking.
        let mut next = (end, 0usize, 0u8);
        for c in 0..ncpus {
            if let Some((e, at, q_end)) = running[c] {
                let stop = (at + ents[e].left).min(q_end);
                if stop < next.0 {
                    next = (stop, c, 0);
                }
            } else if let Some(t) = recheck[c] {
                if t < next.0 {
                    next = (t.max(now), c, 1);
                }
            }
        }
        for (i, e) in ents.iter().enumerate() {
            if let Some(t) = e.wake_at {
                if t < next.0 {
                    next = (t, i, 2);
                }
            }
        }
        if next.0 >= end {
            break;
        }
        now = next.0;
        match next.2 {
            0 => {
                let c = next.1;
                let (e, at, q_end) = running[c].unwrap();
                let ran = now - at;
                let reason = if at + ents[e].left <= q_end {
                    ents[e].left = 0;
                    if ents[e].def.sleep_us == 0 {
                        ents[e].left = ents[e].def.run_us * US;
                        StopReason::QuantumEnd
                    } else {
                        StopReason::Blocked
                    }
                } else {
                    ents[e].left -= ran;
                    StopReason::QuantumEnd
                };
                schedule(
                    &*sched,
                    c,
                    now,
                    reason,
                    &mut ents,
                    &mut running,
                    &mut recheck,
                    &mut kicks,
                    &index_of,
                );
            }
            1 => {
                let c = next.1;
                recheck[c] = None;
                schedule(
                    &*sched,
                    c,
                    now,
                    StopReason::Idle,
                    &mut ents,
                    &mut running,
                    &mut recheck,
                    &mut kicks,
                    &index_of,
                );
            }
            _ => {
                let i = next.1;
                ents[i].wake_at = None;
                ents[i].left = ents[i].def.run_us * US;
                if let Some(d) = sched.wake(ents[i].id, now).unwrap() {
                    if d.kick {
                        kicks.push(d.cpu.0 as usize);
                    }
                }
            }
        }
    }
    for (e, at, _) in running.iter().flatten() {
        ents[*e].runs.push((*at, end));
    }
    ents.into_iter().map(|e| (e.def, e.runs)).collect()
}

#[allow(clippy::too_many_arguments)]
fn schedule(
    sched: &dyn vcpu_sched::VcpuScheduler,
    c: usize,
    now: Nanos,
    reason: StopReason,
    ents: &mut [Ent],
    running: &mut [Option<(usize, Nanos, Nanos)>],
    recheck: &mut [Option<Nanos>],
    kicks: &mut Vec<usize>,
    index_of: &dyn Fn(&[Ent], EntityId) -> usize,
) {
    if let Some((e, at, _)) = running[c].take() {
        ents[e].runs.push((at, now));
        if reason == StopReason::Blocked {
            ents[e].wake_at = Some(now + ents[e].def.sleep_us * US);
        }
    }
    let d = sched.schedule(CpuId(c as u32), now, reason).unwrap();
    kicks.extend(d.kicks.iter().map(|k| k.0 as usize));
    recheck[c] = None;
    match d.entity {
        Some(id) => {
            let e = index_of(ents, id);
            assert!(d.quantum > 0);
            running[c] = Some((e, now, now + d.quantum));
        }
        None => recheck[c] = d.recheck_at,
    }
}

/// The two checks of the property on one run of `defs` on `topo`.
fn check_caps(topo: &str, defs: &[Def]) -> Result<(), TestCaseError> {
    let end = 40 * SHARE_PERIOD;
    let window = 10 * SHARE_PERIOD;
    for (d, runs) in drive(topo, defs, end) {
        let Some(cap) = d.cap else { continue };
        let budget = SHARE_PERIOD * cap as u64 / 1000;
        let allowed = budget + window * cap as u64 / 1000;
        for &(start, _) in &runs {
            let w_end = start + window;
            let ran: Nanos = runs
                .iter()
                .map(|&(a, b)| b.min(w_end).saturating_sub(a.max(start)))
                .sum();
            prop_assert!(
                ran <= allowed,
                "cap {cap}: ran {ran} ns in the window from {start}, allowed {allowed}"
            );
        }
        // Never starved by its own throttling: a hog runs in the last
        // window too (a renewal always comes).
        if d.sleep_us == 0 {
            let last: Nanos = runs
                .iter()
                .map(|&(a, b)| b.saturating_sub(a.max(end - window)))
                .sum();
            prop_assert!(last > 0, "capped hog {d:?} never ran in the last window");
        }
    }
    Ok(())
}

fn d(run_us: u64, sleep_us: u64, weight: u32, cap: Option<u32>, reservation: u32) -> Def {
    Def {
        run_us,
        sleep_us,
        weight,
        cap,
        reservation,
    }
}

/// Shrunk cases the property found (the regression file replays seeds,
/// whose first cases are not these): on one CPU a hog's quantum-end requeue
/// went to the CPU's pinned queue, tied with a vCPU preempted at the same
/// instant in the core queue and won, again every cycle.
#[test]
fn a_preempted_capped_hog_is_not_passed_by_a_requeued_one() {
    let defs = [
        d(2630, 2793, 408, None, 0),
        d(560, 1291, 100, None, 0),
        d(879, 3702, 100, None, 0),
        d(1780, 0, 100, Some(131), 0),
        d(412, 0, 100, Some(143), 0),
    ];
    check_caps("1x1x1", &defs).unwrap();
}

/// A reservation renewal that found the bucket charged further since it was
/// set was dropped, leaving the hog at the lowest level for good.
#[test]
fn a_reservation_renewal_that_comes_early_is_set_again() {
    let defs = [
        d(2385, 2719, 822, None, 0),
        d(562, 1294, 100, None, 0),
        d(1163, 4875, 100, None, 0),
        d(1345, 0, 100, Some(132), 45),
        d(1929, 724, 100, Some(263), 0),
    ];
    check_caps("1x1x1", &defs).unwrap();
}

/// Carrying a waker's due past its turn starved this hog (fixed before).
#[test]
fn a_capped_hog_next_to_three_weighted_sleepers_runs() {
    let defs = [
        d(50, 0, 100, Some(50), 0),
        d(1690, 501, 260, None, 0),
        d(995, 900, 64, None, 0),
        d(2442, 3348, 100, None, 0),
    ];
    check_caps("1x1x1", &defs).unwrap();
}

/// Two weighted wakers that sleep in turn each saw only the hog beside it
/// at its wakes, were entitled to most of the CPU, and were boosted at
/// every wake: the hog below them was passed for good (any cap or none).
#[test]
fn wakers_boosted_in_turn_leave_a_waiting_hog_its_turn() {
    let defs = [
        d(1301, 50, 450, None, 0),
        d(509, 1351, 100, None, 0),
        d(2408, 509, 530, None, 0),
        d(250, 0, 100, Some(67), 0),
    ];
    check_caps("1x1x1", &defs).unwrap();
    let defs = [
        d(761, 0, 100, Some(132), 0),
        d(688, 131, 312, None, 0),
        d(541, 817, 630, Some(139), 139),
        d(1904, 350, 557, None, 174),
        d(1432, 545, 100, None, 0),
    ];
    check_caps("1x1x1", &defs).unwrap();
}

/// Two sleepers forgiven their penalties at every wake (slept over half
/// a base quantum) kept the CPU busy between them: Haiku's rules alone,
/// boost or not, passed the hog for good.
#[test]
fn sleepers_forgiven_in_turn_leave_a_waiting_hog_its_turn() {
    let defs = [
        d(1120, 1000, 100, None, 0),
        d(1000, 1000, 100, None, 0),
        d(50, 0, 100, Some(50), 0),
        d(50, 50, 100, None, 0),
    ];
    check_caps("1x1x1", &defs).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_capped_vcpu_never_exceeds_its_cap_over_ten_periods(
        topo in prop_oneof![Just("1x1x1"), Just("1x2x1"), Just("1x2x2")],
        defs in proptest::collection::vec(def(), 1..6),
    ) {
        check_caps(topo, &defs)?;
    }
}
