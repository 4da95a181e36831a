//! Tests of the EEVDF model: the kernel's rules one by one at the
//! protocol's level, the protocol tests every policy runs, and random
//! event sequences.

use super::*;
use crate::testkit::{self, add, ts};
use crate::{SchedClass, VcpuScheduler};
use proptest::prelude::*;

const US: Nanos = 1_000;
const TICK: Nanos = 4 * MS;

fn sched(spec: &str) -> Eevdf {
    Eevdf::new(Topology::from_spec(spec).unwrap(), SchedConfig::default()).unwrap()
}

fn run(s: &Eevdf, cpu: u32, now: Nanos, reason: StopReason) -> Option<EntityId> {
    let d = s.schedule(CpuId(cpu), now, reason).unwrap();
    s.check().unwrap();
    d.entity
}

#[test]
fn the_base_slice_scales_as_the_kernels_sysctl() {
    let slice = |spec: &str| EevdfParams::for_topology(&Topology::from_spec(spec).unwrap());
    assert_eq!(slice("1x1x1").base_slice, 750 * US);
    assert_eq!(slice("1x2x1").base_slice, 1500 * US);
    assert_eq!(slice("1x4x1").base_slice, 2250 * US);
    assert_eq!(slice("1x4x2").base_slice, 3000 * US);
    // CPUs count up to 8 only.
    assert_eq!(slice("2x22x2").base_slice, 3000 * US);
    assert_eq!(slice("1x2x1").tick, TICK);
    assert_eq!(slice("1x2x1").busy_balance_interval, 32 * MS);
    let bad = EevdfParams {
        tick: 0,
        ..slice("1x1x1")
    };
    let cfg = SchedConfig::default();
    let topo = Topology::from_spec("1x1x1").unwrap();
    assert!(matches!(
        Eevdf::with_params(topo, cfg, bad),
        Err(SchedError::Config(_))
    ));
}

#[test]
fn hogs_alternate_at_the_tick_after_their_request() {
    let s = sched("1x1x1");
    let (a, b) = (ts(&s, "0"), ts(&s, "0"));
    assert!(s.wake(a, 0).unwrap().unwrap().kick);
    assert!(!s.wake(b, 0).unwrap().unwrap().kick);
    let d = s.schedule(CpuId(0), 0, StopReason::Idle).unwrap();
    assert_eq!(d, Dispatch::run(a, TICK));
    // Every dispatch lasts until the next tick boundary.
    let mut order = vec![a];
    for k in 1..=6 {
        let d = s
            .schedule(CpuId(0), k * TICK, StopReason::QuantumEnd)
            .unwrap();
        assert_eq!(d.quantum, TICK);
        order.push(d.entity.unwrap());
    }
    // A request (0.75 ms on one CPU) is used up by every tick: they take
    // turns, one tick each.
    assert_eq!(order, [a, b, a, b, a, b, a]);
    let snap = s.snapshot(7 * TICK);
    assert_eq!(snap.entities[0].run_time, 4 * TICK);
    assert_eq!(snap.entities[1].run_time, 3 * TICK);
    s.check().unwrap();
}

#[test]
fn a_runner_alone_goes_on_at_the_tick() {
    let s = sched("1x1x1");
    let a = ts(&s, "0");
    s.wake(a, 10).unwrap();
    let d = s.schedule(CpuId(0), 10, StopReason::Idle).unwrap();
    assert_eq!(d, Dispatch::run(a, TICK - 10));
    for k in 1..4 {
        let d = s
            .schedule(CpuId(0), k * TICK, StopReason::QuantumEnd)
            .unwrap();
        assert_eq!(d, Dispatch::run(a, TICK));
    }
    let snap = s.snapshot(4 * TICK);
    assert_eq!(snap.cpus[0].context_switches, 1);
    assert_eq!(snap.entities[0].quantum_ends, 3);
}

/// Two hogs, `a` then `b` picked; returns the scheduler at `4 ms`, `b`
/// running since the tick with `a` waiting.
fn two_hogs() -> (Eevdf, EntityId, EntityId) {
    let s = sched("1x1x1");
    let (a, b) = (ts(&s, "0"), ts(&s, "0"));
    s.wake(a, 0).unwrap();
    s.wake(b, 0).unwrap();
    assert_eq!(run(&s, 0, 0, StopReason::Idle), Some(a));
    assert_eq!(run(&s, 0, TICK, StopReason::QuantumEnd), Some(b));
    (s, a, b)
}

#[test]
fn a_sleeper_keeps_its_lag_and_preempts_on_its_wake() {
    let (s, a, b) = two_hogs();
    // b ran 100 us of its turn and blocks: V = (4 + 0.1) / 2 ms, so it
    // leaves eligible with lag 1.95 ms.
    assert_eq!(run(&s, 0, TICK + 100 * US, StopReason::Blocked), Some(a));
    // Woken 1 ms later while a runs: placed 2 x 1.95 ms left of V, a is
    // no longer eligible, b has the earliest eligible deadline: preempt.
    let d = s.wake(b, TICK + 1100 * US).unwrap().unwrap();
    assert_eq!(d, WakeDecision::new(CpuId(0), true));
    assert_eq!(run(&s, 0, TICK + 1110 * US, StopReason::Preempted), Some(b));
}

#[test]
fn a_protected_runner_is_not_preempted_by_a_wake_without_lag() {
    let (s, _a, b) = two_hogs();
    // A new entity joins at V with half a request to its deadline; b,
    // picked at the tick, is eligible and inside its protected slice.
    let c = ts(&s, "0");
    let d = s.wake(c, TICK + 100 * US).unwrap().unwrap();
    assert_eq!(d, WakeDecision::new(CpuId(0), false));
    // At the tick b has used its request: the new entity, the only one
    // at or left of V, runs.
    assert_eq!(run(&s, 0, 2 * TICK, StopReason::QuantumEnd), Some(c));
    assert_ne!(s.snapshot(2 * TICK).cpus[0].running, Some(b));
}

#[test]
fn an_ineligible_blocker_stays_queued_delayed_until_it_wakes() {
    let s = sched("1x2x1");
    let (a, b) = (ts(&s, "0"), ts(&s, "0"));
    s.wake(a, 0).unwrap();
    s.wake(b, 0).unwrap();
    assert_eq!(run(&s, 0, 0, StopReason::Idle), Some(a));
    // a ran 1 ms ahead of b: not eligible when it blocks; it stays on
    // CPU 0's queue (blocked for the protocol), b runs.
    assert_eq!(run(&s, 0, MS, StopReason::Blocked), Some(b));
    {
        let st = s.state.lock();
        let e = st.ents.table.get(a).unwrap();
        assert!(e.fair.delayed);
        assert_eq!(e.cpu, Some(0));
    }
    // Woken with no idle CPU of its affinity: it resumes where it was.
    let d = s.wake(a, 1200 * US).unwrap().unwrap();
    assert_eq!(d, WakeDecision::new(CpuId(0), false));
    let st = s.state.lock();
    assert!(!st.ents.table.get(a).unwrap().fair.delayed);
    assert_eq!(st.cpus[0].fair.queued, vec![a]);
}

#[test]
fn a_delayed_entity_woken_next_to_an_idle_cpu_goes_there() {
    let s = sched("1x2x1");
    let (a, b) = (ts(&s, "0-1"), ts(&s, "0-1"));
    let c = ts(&s, "1");
    s.wake(c, 0).unwrap();
    assert_eq!(run(&s, 1, 0, StopReason::Idle), Some(c));
    s.wake(a, 0).unwrap();
    s.wake(b, 0).unwrap();
    assert_eq!(run(&s, 0, 0, StopReason::Idle), Some(a));
    assert_eq!(run(&s, 0, MS, StopReason::Blocked), Some(b));
    // CPU 1 idles now: a's wake leaves CPU 0's queue for it.
    assert_eq!(run(&s, 1, 2 * MS, StopReason::Blocked), None);
    let d = s.wake(a, 2 * MS).unwrap().unwrap();
    assert_eq!(d, WakeDecision::new(CpuId(1), true));
    s.check().unwrap();
}

#[test]
fn a_wake_takes_the_previous_cpu_if_idle_else_the_nearest_idle_one() {
    // 1x2x2: CPUs 0-1 are one core's SMT threads, 2-3 the other's.
    let s = sched("1x2x2");
    let ids: Vec<EntityId> = (0..4).map(|_| ts(&s, "0-3")).collect();
    let wake = |id: EntityId, now: Nanos| s.wake(id, now).unwrap().unwrap();
    // New entities: the idle CPU nearest to the first of their affinity.
    for (i, want) in [0, 1, 2].into_iter().enumerate() {
        assert_eq!(wake(ids[i], 1), WakeDecision::new(CpuId(want), true));
        assert_eq!(run(&s, want, 1, StopReason::Idle), Some(ids[i]));
    }
    // ids[0] blocks and wakes: its previous CPU is idle, it goes back.
    assert_eq!(run(&s, 0, 10, StopReason::Blocked), None);
    assert_eq!(wake(ids[0], 20), WakeDecision::new(CpuId(0), true));
    assert_eq!(run(&s, 0, 21, StopReason::Idle), Some(ids[0]));
    // ids[1] blocks; ids[3] takes CPU 1; ids[1] wakes: its previous CPU
    // is busy, the nearest idle one is CPU 3.
    assert_eq!(run(&s, 1, 30, StopReason::Blocked), None);
    assert_eq!(wake(ids[3], 31), WakeDecision::new(CpuId(1), true));
    run(&s, 1, 32, StopReason::Idle);
    assert_eq!(wake(ids[1], 40), WakeDecision::new(CpuId(3), true));
    run(&s, 3, 41, StopReason::Idle);
    // All busy: ids[1] blocks and wakes back to its previous CPU... which
    // idles. ids[2] blocks on CPU 2 and wakes while all four CPUs... are
    // not: with every CPU busy a wake queues on its previous CPU.
    let x = ts(&s, "0-3");
    assert_eq!(run(&s, 2, 50, StopReason::Blocked), None);
    assert_eq!(wake(x, 51).cpu, CpuId(2));
    run(&s, 2, 52, StopReason::Idle);
    assert_eq!(wake(ids[2], 60).cpu, CpuId(2));
    s.check().unwrap();
}

#[test]
fn an_idle_cpu_pulls_from_the_busiest_queue() {
    let s = sched("1x2x1");
    let hogs: Vec<EntityId> = (0..3).map(|_| ts(&s, "0")).collect();
    let c1 = ts(&s, "1");
    for h in &hogs {
        s.wake(*h, 0).unwrap();
    }
    s.wake(c1, 0).unwrap();
    assert_eq!(run(&s, 0, 0, StopReason::Idle), Some(hogs[0]));
    assert_eq!(run(&s, 1, 0, StopReason::Idle), Some(c1));
    // The hogs may now use CPU 1 too; nothing moves while it is busy...
    for h in &hogs {
        assert!(s
            .set_affinity(*h, CpuSet::first_n(2), 1)
            .unwrap()
            .is_empty());
    }
    // ...and when its runner blocks it takes a waiting hog from CPU 0.
    let pulled = run(&s, 1, 2, StopReason::Blocked).unwrap();
    assert!(hogs[1..].contains(&pulled), "{pulled:?}");
    assert_eq!(s.snapshot(3).total_idle_while_waiting(), 0);
}

#[test]
fn the_periodic_balance_evens_out_queues() {
    let s = sched("1x2x1");
    let hogs: Vec<EntityId> = (0..4).map(|_| ts(&s, "0")).collect();
    let c1 = ts(&s, "1");
    for h in &hogs {
        s.wake(*h, 0).unwrap();
    }
    s.wake(c1, 0).unwrap();
    run(&s, 0, 0, StopReason::Idle);
    run(&s, 1, 0, StopReason::Idle);
    for h in &hogs {
        s.set_affinity(*h, CpuSet::first_n(2), 1).unwrap();
    }
    // CPU 1 (1 runnable) balances at its first tick against CPU 0 (4):
    // two more or beyond, it pulls one at once.
    run(&s, 0, TICK, StopReason::QuantumEnd);
    run(&s, 1, TICK, StopReason::QuantumEnd);
    let on = |s: &Eevdf, c: usize| Eevdf::nr_running(&s.state.lock(), c);
    assert_eq!((on(&s, 0), on(&s, 1)), (3, 2));
    // One more is not worth a move at the next balance (32 ms later),
    // but is after that failed attempt.
    let mut now = TICK;
    while now < 36 * MS {
        now += TICK;
        run(&s, 0, now, StopReason::QuantumEnd);
        run(&s, 1, now, StopReason::QuantumEnd);
    }
    assert_eq!((on(&s, 0), on(&s, 1)), (3, 2));
}

#[test]
fn three_hogs_on_two_cpus_rotate_and_share_alike() {
    let s = sched("1x2x1");
    let hogs: Vec<EntityId> = (0..3).map(|_| ts(&s, "0-1")).collect();
    for h in &hogs {
        s.wake(*h, 0).unwrap();
    }
    run(&s, 0, 0, StopReason::Idle);
    run(&s, 1, 0, StopReason::Idle);
    let end = 2000 * MS;
    let mut now = 0;
    while now < end {
        now += TICK;
        run(&s, 0, now, StopReason::QuantumEnd);
        run(&s, 1, now, StopReason::QuantumEnd);
    }
    // Without the rotation one hog keeps a CPU (1.0) and two share the
    // other (0.5 each); with it each gets close to 2/3.
    let snap = s.snapshot(end);
    for e in &snap.entities {
        let share = e.run_time as f64 / end as f64;
        assert!((0.6..0.74).contains(&share), "{}: {share:.3}", e.id);
    }
}

#[test]
fn realtime_runs_before_fair_and_idle_class_after() {
    let s = sched("1x1x1");
    let idle = add(&s, SchedClass::Idle, 0, "0");
    let t = ts(&s, "0");
    let rt = add(&s, SchedClass::Realtime, 110, "0");
    let rt_low = add(&s, SchedClass::Realtime, 100, "0");
    s.wake(idle, 0).unwrap();
    assert_eq!(run(&s, 0, 0, StopReason::Idle), Some(idle));
    // A fair wake preempts the idle class.
    assert!(s.wake(t, 1).unwrap().unwrap().kick);
    assert_eq!(run(&s, 0, 2, StopReason::Preempted), Some(t));
    // A realtime wake preempts fair; a lower realtime waits behind it.
    assert!(s.wake(rt, 3).unwrap().unwrap().kick);
    assert_eq!(run(&s, 0, 4, StopReason::Preempted), Some(rt));
    assert!(!s.wake(rt_low, 5).unwrap().unwrap().kick);
    // SCHED_FIFO: the tick changes nothing.
    assert_eq!(run(&s, 0, TICK, StopReason::QuantumEnd), Some(rt));
    assert_eq!(run(&s, 0, TICK + 1, StopReason::Blocked), Some(rt_low));
    assert_eq!(run(&s, 0, TICK + 2, StopReason::Blocked), Some(t));
    assert_eq!(run(&s, 0, TICK + 3, StopReason::Blocked), Some(idle));
}

#[test]
fn a_class_change_moves_queues_and_keeps_the_lag() {
    let s = sched("1x1x1");
    let (a, b) = (ts(&s, "0"), ts(&s, "0"));
    s.wake(a, 0).unwrap();
    s.wake(b, 0).unwrap();
    assert_eq!(run(&s, 0, 0, StopReason::Idle), Some(a));
    // The waiting b becomes realtime: it preempts a.
    assert_eq!(
        s.set_class(b, SchedClass::Realtime, 100, 10).unwrap(),
        vec![CpuId(0)]
    );
    assert_eq!(run(&s, 0, 20, StopReason::Preempted), Some(b));
    // The running b goes back to fair: a waits, so its CPU is kicked.
    assert_eq!(
        s.set_class(b, SchedClass::Timeshare, 10, 30).unwrap(),
        vec![CpuId(0)]
    );
    run(&s, 0, 40, StopReason::Preempted);
    // The running entity demoted to idle class gives way at once.
    let runner = s.snapshot(50).cpus[0].running.unwrap();
    assert_eq!(
        s.set_class(runner, SchedClass::Idle, 0, 50).unwrap(),
        vec![CpuId(0)]
    );
    assert_ne!(run(&s, 0, 60, StopReason::Preempted), Some(runner));
}

#[test]
fn a_cpu_out_of_service_hands_its_queue_over() {
    let s = sched("1x2x1");
    let (a, b, c) = (ts(&s, "0-1"), ts(&s, "0-1"), ts(&s, "0"));
    for e in [a, b] {
        s.wake(e, 0).unwrap();
    }
    run(&s, 0, 0, StopReason::Idle);
    run(&s, 1, 0, StopReason::Idle);
    s.wake(c, 0).unwrap();
    // CPU 0 leaves: its runner leaves at its next call; c (allowed on
    // CPU 0 only) waits there until it comes back.
    let kicks = s.set_cpu_enabled(CpuId(0), false, 10).unwrap();
    assert!(kicks.contains(&CpuId(0)));
    assert_eq!(run(&s, 0, 20, StopReason::Preempted), None);
    assert_eq!(s.snapshot(20).cpus[0].running, None);
    assert_eq!(
        s.set_cpu_enabled(CpuId(1), false, 30),
        Err(SchedError::LastCpuInService(CpuId(1)))
    );
    s.set_cpu_enabled(CpuId(0), true, 40).unwrap();
    assert_eq!(run(&s, 0, 50, StopReason::Idle), Some(c));
}

#[test]
fn removal_of_running_and_delayed_entities() {
    let s = sched("1x1x1");
    let (a, b) = (ts(&s, "0"), ts(&s, "0"));
    s.wake(a, 0).unwrap();
    s.wake(b, 0).unwrap();
    assert_eq!(run(&s, 0, 0, StopReason::Idle), Some(a));
    // a blocks delayed, then is removed while delayed.
    assert_eq!(run(&s, 0, MS, StopReason::Blocked), Some(b));
    s.remove_entity(a, 2 * MS).unwrap();
    s.check().unwrap();
    // b removed while running: its slot waits for the CPU's next call.
    s.remove_entity(b, 3 * MS).unwrap();
    let c = ts(&s, "0");
    assert_ne!(c.index(), b.index());
    s.wake(c, 3 * MS).unwrap();
    assert_eq!(run(&s, 0, 4 * MS, StopReason::Preempted), Some(c));
    assert_eq!(s.snapshot(5 * MS).entities.len(), 1);
}

#[test]
fn yield_moves_the_deadline_one_request_on() {
    let s = sched("1x1x1");
    let (a, b) = (ts(&s, "0"), ts(&s, "0"));
    s.wake(a, 0).unwrap();
    s.wake(b, 0).unwrap();
    assert_eq!(run(&s, 0, 0, StopReason::Idle), Some(a));
    assert_eq!(run(&s, 0, 10, StopReason::Yielded), Some(b));
    assert_eq!(run(&s, 0, 20, StopReason::Yielded), Some(a));
}

#[test]
fn concurrent_events_from_many_threads() {
    let s = std::sync::Arc::new(sched("1x2x2"));
    let ids: Vec<EntityId> = (0..6).map(|_| ts(&*s, "0-3")).collect();
    let handles: Vec<_> = (0..4u32)
        .map(|cpu| {
            let (s, ids) = (s.clone(), ids.clone());
            std::thread::spawn(move || {
                let mut reason = StopReason::Idle;
                for k in 0..2000u64 {
                    let _ = s
                        .wake(ids[(k as usize * 5 + cpu as usize) % 6], k * US)
                        .unwrap();
                    let d = s.schedule(CpuId(cpu), k * US, reason).unwrap();
                    reason = match (d.entity, k % 3) {
                        (None, _) => StopReason::Idle,
                        (Some(_), 0) => StopReason::Blocked,
                        (Some(_), 1) => StopReason::QuantumEnd,
                        _ => StopReason::Preempted,
                    };
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    s.check().unwrap();
}

#[test]
fn stale_handles_are_refused() {
    testkit::stale_handles_are_refused(crate::PolicyKind::Eevdf);
}

#[test]
fn snapshot_says_where_entities_are() {
    testkit::snapshot_says_where_entities_are(crate::PolicyKind::Eevdf);
}

#[test]
fn built_by_the_factory() {
    testkit::built_by_the_factory(crate::PolicyKind::Eevdf, "eevdf");
}

#[test]
fn smt_isolation_is_refused() {
    let cfg = SchedConfig {
        smt_isolation: true,
        ..SchedConfig::default()
    };
    let r = Eevdf::new(Topology::from_spec("1x2x2").unwrap(), cfg);
    assert!(matches!(r, Err(SchedError::Config(m)) if m.contains("eevdf")));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn random_event_sequences_keep_invariants(
        topo in testkit::topology(),
        specs in testkit::specs(),
        ops in testkit::ops(),
    ) {
        let s = Eevdf::new(topo.clone(), SchedConfig::default()).unwrap();
        testkit::drive(&s, &topo, &specs, &ops, &|| s.check())?;
        // An idle CPU pulls what it may run: it never idles while that waits.
        prop_assert_eq!(s.snapshot(u64::MAX / 2).total_idle_while_waiting(), 0);
    }
}
