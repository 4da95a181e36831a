//! Unit tests of the Haiku policy, each named for the rule it checks.

use super::*;
use crate::entity::{QueueRef, RunState};
use crate::stats::EntityStats;
use crate::{CoreId, CpuSet, Mode, SchedClass, VmId};
use std::sync::atomic::AtomicBool;

const MS: Nanos = 1_000_000;
const US: Nanos = 1_000;

/// A minimal single-threaded VMM: remembers what each CPU runs, delivers
/// kicks (wake decisions and `Dispatch::kicks`) at once, fires quantum timers.
struct Drv {
    s: HaikuScheduler,
    run: Vec<Option<EntityId>>,
    slice_end: Vec<Nanos>,
    now: Nanos,
}

impl Drv {
    fn new(spec: &str, f: impl FnOnce(&mut SchedConfig)) -> Drv {
        let mut cfg = SchedConfig {
            max_entities: 256,
            ..SchedConfig::default()
        };
        f(&mut cfg);
        let s = HaikuScheduler::new(Topology::from_spec(spec).unwrap(), cfg).unwrap();
        let n = s.topology().num_cpus();
        Drv {
            s,
            run: vec![None; n],
            slice_end: vec![0; n],
            now: 0,
        }
    }

    fn add(&mut self, vm: u32, class: SchedClass, prio: u8, aff: Option<&str>) -> EntityId {
        let affinity = aff.map_or_else(
            || self.s.topology().all_cpus(),
            |a| CpuSet::parse_list(a).unwrap(),
        );
        self.s
            .add_entity(
                EntitySpec {
                    vm: VmId(vm),
                    class,
                    priority: prio,
                    affinity,
                },
                self.now,
            )
            .unwrap()
    }

    fn ts(&mut self, vm: u32, aff: Option<&str>) -> EntityId {
        self.add(vm, SchedClass::Timeshare, 10, aff)
    }

    fn kick_reason(&self, cpu: CpuId) -> StopReason {
        if self.run[cpu.0 as usize].is_some() {
            StopReason::Preempted
        } else {
            StopReason::Idle
        }
    }

    fn sched(&mut self, cpu: CpuId, reason: StopReason) {
        let mut work = vec![(cpu, reason)];
        while let Some((c, r)) = work.pop() {
            let d = self.s.schedule(c, self.now, r).unwrap();
            self.run[c.0 as usize] = d.entity;
            self.slice_end[c.0 as usize] = self.now + d.quantum;
            for k in d.kicks {
                work.push((k, self.kick_reason(k)));
            }
            self.s.check_invariants().unwrap();
        }
    }

    fn wake(&mut self, id: EntityId) -> Option<WakeDecision> {
        let d = self.s.wake(id, self.now).unwrap();
        if let Some(d) = d.filter(|d| d.kick) {
            self.sched(d.cpu, self.kick_reason(d.cpu));
        }
        // A cut quantum: its timer fires earlier.
        if let Some((c, cut)) = d.and_then(|d| Some((d.cpu.0 as usize, d.shorten_quantum?))) {
            assert_eq!(self.run[c], Some(cut.runner), "a cut names the runner");
            assert!(cut.end < self.slice_end[c], "a cut never lengthens");
            self.slice_end[c] = cut.end;
        }
        self.s.check_invariants().unwrap();
        d
    }

    /// 100 us later, the runner of `cpu` blocks and it picks the next.
    fn block_runner_later(&mut self, cpu: CpuId) {
        self.now += 100 * US;
        self.sched(cpu, StopReason::Blocked);
    }

    /// Deliver the kicks a runtime change asks for.
    fn deliver(&mut self, kicks: Vec<CpuId>) {
        for k in kicks {
            self.sched(k, self.kick_reason(k));
        }
        self.s.check_invariants().unwrap();
    }

    fn cpu_of(&self, id: EntityId) -> Option<u32> {
        self.run
            .iter()
            .position(|r| *r == Some(id))
            .map(|c| c as u32)
    }

    /// Fire quantum timers until `t`.
    fn run_until(&mut self, t: Nanos) {
        loop {
            let next = (0..self.run.len())
                .filter(|c| self.run[*c].is_some())
                .min_by_key(|c| self.slice_end[*c]);
            match next {
                Some(c) if self.slice_end[c] <= t => {
                    self.now = self.now.max(self.slice_end[c]);
                    self.sched(CpuId(c as u32), StopReason::QuantumEnd);
                }
                _ => break,
            }
        }
        self.now = t;
    }

    fn stats(&self, id: EntityId) -> EntityStats {
        self.s
            .snapshot(self.now)
            .entities
            .into_iter()
            .find(|e| e.id == id)
            .unwrap()
    }
}

#[test]
fn smt_1x2x2_two_busy_entities_go_to_different_cores_and_stay() {
    let mut d = Drv::new("1x2x2", |_| {});
    let a = d.ts(1, None);
    let b = d.ts(1, None);
    d.wake(a);
    d.wake(b);
    let (ca, cb) = (d.cpu_of(a).unwrap(), d.cpu_of(b).unwrap());
    assert_ne!(ca / 2, cb / 2, "two busy entities on two different cores");
    d.run_until(200 * MS);
    assert_eq!(
        (d.cpu_of(a), d.cpu_of(b)),
        (Some(ca), Some(cb)),
        "each stays on its own CPU"
    );
    let m = d.stats(a).migrations;
    assert_eq!(m.smt_sibling + m.same_llc + m.same_package + m.remote, 0);
}

#[test]
fn smt_1x4x2_prefers_fully_idle_cores() {
    let mut d = Drv::new("1x4x2", |_| {});
    let ids: Vec<_> = (0..4).map(|_| d.ts(1, None)).collect();
    for id in &ids {
        d.wake(*id);
    }
    let mut cores: Vec<u32> = ids.iter().map(|id| d.cpu_of(*id).unwrap() / 2).collect();
    cores.sort();
    assert_eq!(
        cores,
        vec![0, 1, 2, 3],
        "one entity per core while fully idle cores exist"
    );
}

#[test]
fn smt_1x4x2_without_idle_core_search_takes_first_idle_sibling() {
    let mut d = Drv::new("1x4x2", |c| c.idle_core_search = false);
    let a = d.ts(1, None);
    let b = d.ts(1, None);
    d.wake(a);
    d.wake(b);
    assert_eq!(
        d.cpu_of(a).unwrap() / 2,
        d.cpu_of(b).unwrap() / 2,
        "idle-core search off: SMT sibling taken"
    );
    // And it can be switched back on at run time.
    d.s.set_idle_core_search(true);
    let c = d.ts(1, None);
    d.wake(c);
    assert_ne!(d.cpu_of(c).unwrap() / 2, d.cpu_of(a).unwrap() / 2);
}

#[test]
fn overload_two_cores_four_hogs_balance_two_plus_two() {
    let mut d = Drv::new("1x2x1", |_| {});
    let ids: Vec<_> = (0..4).map(|_| d.ts(1, None)).collect();
    for id in &ids {
        d.wake(*id);
    }
    d.run_until(100 * MS);
    let before: Vec<Nanos> = ids.iter().map(|i| d.stats(*i).run_time).collect();
    d.run_until(500 * MS);
    for (i, id) in ids.iter().enumerate() {
        let share = (d.stats(*id).run_time - before[i]) as f64 / (400 * MS) as f64;
        assert!(
            (0.4..=0.6).contains(&share),
            "entity {i} got {share:.2} of a CPU, want ~0.5 (2 + 2)"
        );
    }
}

#[test]
fn pinned_entity_runs_only_on_its_cpu() {
    let mut d = Drv::new("1x2x2", |_| {});
    let p = d.ts(1, Some("3"));
    let others: Vec<_> = (0..4).map(|_| d.ts(1, None)).collect();
    for id in others.iter().chain([&p]) {
        let w = d.wake(*id).unwrap();
        if *id == p {
            assert_eq!(w.cpu, CpuId(3));
        }
    }
    for step in 1..100 {
        d.run_until(step * 2 * MS);
        if let Some(c) = d.cpu_of(p) {
            assert_eq!(c, 3);
        }
    }
    assert!(d.stats(p).run_time > 0);
}

#[test]
fn affinity_never_violated_with_partial_core_affinity() {
    let mut d = Drv::new("1x2x2", |_| {});
    // {0,2} covers half of each core: pinned queue of one allowed CPU.
    let ids: Vec<_> = (0..6)
        .map(|i| d.ts(1, Some(if i % 2 == 0 { "0,2" } else { "1-3" })))
        .collect();
    for id in &ids {
        d.wake(*id);
    }
    for step in 1..200u64 {
        d.run_until(step * MS);
        if step % 7 == 0 {
            // Block and re-wake someone to exercise placement.
            if let Some(c) = (0..4).find(|c| d.run[*c].is_some()) {
                let id = d.run[c].unwrap();
                d.sched(CpuId(c as u32), StopReason::Blocked);
                d.now += 3 * MS;
                d.wake(id);
            }
        }
        for (i, id) in ids.iter().enumerate() {
            if let Some(c) = d.cpu_of(*id) {
                let allowed = if i % 2 == 0 {
                    [0, 2].contains(&c)
                } else {
                    c >= 1
                };
                assert!(allowed, "entity {i} on CPU {c}");
            }
        }
    }
}

/// Run a hog alone on one CPU until its penalty has pushed E low.
fn hog_with_penalty(d: &mut Drv) -> EntityId {
    let hog = d.ts(1, None);
    d.wake(hog);
    d.run_until(30 * MS);
    assert!(
        d.s.debug_priority(hog).0 <= 5,
        "hog penalised: E = {}",
        d.s.debug_priority(hog).0
    );
    hog
}

#[test]
fn bursty_waker_preempts_hog() {
    let mut d = Drv::new("1x1x1", |_| {});
    let hog = hog_with_penalty(&mut d);
    let bursty = d.ts(1, None);
    let w = d.wake(bursty).unwrap();
    assert!(w.kick, "E 10 vs penalised hog: bursty waker preempts");
    assert_eq!(d.cpu_of(bursty), Some(0));
    // It runs briefly and sleeps longer than base_quantum / 2 (its penalty
    // is cancelled on wake, E = 10); the hog resumes; repeat a few bursts.
    for _ in 0..5 {
        d.now += 50 * US;
        d.sched(CpuId(0), StopReason::Blocked);
        assert_eq!(d.cpu_of(hog), Some(0));
        d.now += 1500 * US;
        d.wake(bursty);
        assert_eq!(d.cpu_of(bursty), Some(0), "woken burst preempts again");
    }
    assert!(
        d.stats(bursty).wake_latency.max == 0,
        "dispatched at the wake instant"
    );
    assert!(d.stats(hog).preemptions >= 5);
}

#[test]
fn timeshare_waker_close_in_priority_does_not_preempt() {
    let mut d = Drv::new("1x1x1", |_| {});
    let hog = d.ts(1, None);
    d.wake(hog);
    let other = d.ts(1, None);
    let w = d.wake(other).unwrap();
    assert!(
        !w.kick,
        "equal E, the runner bursty too (just woken): no preemption"
    );
    assert_eq!(d.cpu_of(hog), Some(0));
}

#[test]
fn a_wake_found_running_queues_at_the_front_of_its_level() {
    let mut d = Drv::new("1x1x1", |_| {});
    let runner = d.ts(1, None);
    d.wake(runner);
    let fresh = d.ts(1, None);
    let found = d.ts(1, None);
    assert!(!d.wake(fresh).unwrap().kick, "equal E: queued");
    let w = d.s.wake_found_running(found, d.now).unwrap().unwrap();
    assert!(!w.kick, "equal E: queued, not preempting");
    d.s.check_invariants().unwrap();
    d.block_runner_later(CpuId(0));
    assert_eq!(
        d.cpu_of(found),
        Some(0),
        "interrupted mid-run, it goes before the level's fresh wake"
    );
    d.block_runner_later(CpuId(0));
    assert_eq!(d.cpu_of(fresh), Some(0));
    // A plain wake keeps the level's order.
    d.wake(found);
    d.wake(runner);
    d.block_runner_later(CpuId(0));
    assert_eq!(d.cpu_of(found), Some(0), "first come, first served");
}

/// Run a hog alone on CPU 0 until its load estimate says CPU-bound and its
/// penalty has brought its E within the wake-preemption delta below the
/// base priority (6..=9).
fn hog_just_below_base_priority(d: &mut Drv) -> EntityId {
    let hog = d.ts(1, None);
    d.wake(hog);
    for _ in 0..1000 {
        let next = d.slice_end[0];
        d.run_until(next);
        let cpu_bound = d.stats(hog).load > crate::tunables::BURSTY_LOAD;
        if cpu_bound && (6..=9).contains(&d.s.debug_priority(hog).0) {
            return hog;
        }
    }
    panic!("the hog's E never came to 6..=9 while CPU-bound");
}

#[test]
fn bursty_waker_preempts_cpu_bound_runner_of_lower_priority() {
    let mut d = Drv::new("1x1x1", |_| {});
    let hog = hog_just_below_base_priority(&mut d);
    let b = d.ts(1, None);
    let w = d.wake(b).unwrap();
    assert!(
        w.kick,
        "bursty E 10 vs CPU-bound E {}: the waker preempts",
        d.s.debug_priority(hog).0
    );
    assert_eq!(d.cpu_of(b), Some(0));
    d.now += 50 * US;
    d.sched(CpuId(0), StopReason::Blocked);
    assert_eq!(d.cpu_of(hog), Some(0), "the hog resumes");
}

#[test]
fn bursty_waker_keeps_its_base_priority() {
    // A vCPU that was CPU-bound (penalised, E rotated by its additional
    // penalty) and then turns bursty: after sleeps longer than half the
    // base quantum it is back at E = P, and stays there while bursty,
    // whatever additional penalty the CPU-bound phase left behind.
    for cpu_bound_quanta in 5..15u64 {
        let mut d = Drv::new("1x1x1", |_| {});
        let v = d.ts(1, None);
        d.wake(v);
        for _ in 0..cpu_bound_quanta {
            let next = d.slice_end[0];
            d.run_until(next);
        }
        d.now += 100 * US;
        d.sched(CpuId(0), StopReason::Blocked);
        for _ in 0..200 {
            d.now += 900 * US;
            d.wake(v);
            assert_eq!(d.cpu_of(v), Some(0));
            d.now += 60 * US;
            d.sched(CpuId(0), StopReason::Blocked);
        }
        assert!(d.stats(v).load <= crate::tunables::BURSTY_LOAD);
        d.now += 900 * US;
        d.wake(v);
        assert_eq!(
            d.s.debug_priority(v).0,
            10,
            "bursty after {cpu_bound_quanta} CPU-bound quanta: E = P"
        );
    }
}

#[test]
fn cpu_bound_waker_within_the_delta_does_not_preempt() {
    // Two hogs share CPU 0 until both are CPU-bound; then, whenever `b`
    // blocks and wakes at once while `a` runs at an E within the delta
    // below b's, b must wait: only interactive wakers preempt inside the
    // delta. (With the fair-share boost a `b` below its share is
    // interactive: `fair_share_boost_*` below.)
    let mut d = Drv::new("1x1x1", |c| c.tunables.share_boost = false);
    let a = d.ts(1, None);
    let b = d.ts(2, None);
    d.wake(a);
    d.wake(b);
    d.run_until(30 * MS);
    let mut checked = 0;
    for _ in 0..2000 {
        if d.cpu_of(b) == Some(0) {
            d.sched(CpuId(0), StopReason::Blocked);
            assert_eq!(d.cpu_of(a), Some(0));
            let (ea, eb) = (d.s.debug_priority(a).0, d.s.debug_priority(b).0);
            assert!(d.stats(b).load > crate::tunables::BURSTY_LOAD);
            let w = d.wake(b).unwrap();
            if eb > ea && eb < ea + crate::tunables::WAKE_PREEMPT_PRIORITY_DELTA {
                assert!(!w.kick, "CPU-bound E {eb} vs E {ea}: no preemption");
                checked += 1;
            }
        }
        let next = d.slice_end[0];
        d.run_until(next);
    }
    assert!(checked > 0, "never reached E(a) < E(b) < E(a) + delta");
}

#[test]
fn realtime_preempts_timeshare() {
    let mut d = Drv::new("1x1x1", |_| {});
    let hog = d.add(1, SchedClass::Timeshare, 99, None);
    d.wake(hog);
    let rt = d.add(2, SchedClass::Realtime, 100, None);
    let w = d.wake(rt).unwrap();
    assert!(w.kick);
    assert_eq!(d.cpu_of(rt), Some(0));
    // Realtime is never penalised.
    d.run_until(50 * MS);
    assert_eq!(d.s.debug_priority(rt).0, 100);
    assert_eq!(d.cpu_of(rt), Some(0));
}

#[test]
fn smt_isolation_never_coruns_different_vms() {
    let mut d = Drv::new("1x2x2", |c| c.smt_isolation = true);
    let ids: Vec<_> = (0..8).map(|i| d.ts(i % 3, None)).collect();
    for id in &ids {
        d.wake(*id);
    }
    for step in 1..300u64 {
        d.run_until(step * MS);
        if step % 5 == 0 {
            if let Some(c) = (0..4).find(|c| d.run[*c].is_some()) {
                let id = d.run[c].unwrap();
                d.sched(CpuId(c as u32), StopReason::Blocked);
                d.wake(id);
            }
        }
        for core in [0usize, 2] {
            if let (Some(a), Some(b)) = (d.run[core], d.run[core + 1]) {
                assert_eq!(a.index() % 3, b.index() % 3, "siblings run the same VM");
            }
        }
    }
    let snap = d.s.snapshot(d.now);
    assert!(snap.cpus.iter().all(|c| c.smt_corun_foreign == 0));
    // Everyone still progressed (force idle drains the core between VMs).
    assert!(snap.entities.iter().all(|e| e.run_time > 0));
}

#[test]
fn wake_pending_race_keeps_entity_runnable() {
    let mut d = Drv::new("1x1x1", |_| {});
    let a = d.ts(1, None);
    d.wake(a);
    assert_eq!(
        d.wake(a).unwrap_or(WakeDecision::new(CpuId(9), true)).cpu,
        CpuId(9)
    );
    assert_eq!(
        d.s.wake(a, d.now).unwrap(),
        None,
        "already running: remembered"
    );
    d.block_runner_later(CpuId(0));
    assert_eq!(
        d.cpu_of(a),
        Some(0),
        "the block after the wake keeps it runnable"
    );
    d.block_runner_later(CpuId(0));
    assert_eq!(d.cpu_of(a), None, "a later block without wake blocks");
}

#[test]
fn penalty_cancelled_after_long_sleep_only() {
    let mut d = Drv::new("1x1x1", |_| {});
    let a = d.ts(1, None);
    d.wake(a);
    d.run_until(10 * MS);
    let (_, _, pen) = d.s.debug_priority(a);
    assert!(pen > 0);
    // Short sleep (<= base_quantum / 2 = 500 us of the mode): penalty kept.
    d.sched(CpuId(0), StopReason::Blocked);
    d.now += 500 * US;
    d.wake(a);
    assert_eq!(
        d.s.debug_priority(a).2,
        pen,
        "short sleep keeps the penalty"
    );
    // Long sleep: penalty cancelled; E = P - (additional % P), base quantum follows.
    d.sched(CpuId(0), StopReason::Blocked);
    d.now += 501 * US;
    d.wake(a);
    let (e, bq, pen) = d.s.debug_priority(a);
    assert_eq!(pen, 0);
    assert!((1..=10).contains(&e));
    assert_eq!(
        bq,
        crate::quantum::base_quantum(&QuantumTable::LOW_LATENCY, e)
    );
}

#[test]
fn bursty_entity_is_not_penalised() {
    let mut d = Drv::new("1x1x1", |_| {});
    let hog = d.ts(1, None);
    d.wake(hog);
    d.run_until(20 * MS);
    let b = d.ts(1, None);
    // 40 us bursts every 140 us for ~200 ms: load ~ 285 <= 375 (bursty).
    for _ in 0..1400 {
        d.now += 100 * US;
        d.wake(b);
        assert_eq!(
            d.cpu_of(b),
            Some(0),
            "bursty waker preempts the hog at every wake"
        );
        d.now += 40 * US;
        d.sched(CpuId(0), StopReason::Blocked);
    }
    assert_eq!(
        d.s.debug_priority(b),
        (10, QuantumTable::LOW_LATENCY.base_quantum * 2, 0)
    );
    let load = d.stats(b).load;
    assert!(
        load <= crate::tunables::BURSTY_LOAD && load > 200,
        "load {load}"
    );
    assert!(
        d.stats(b).quantum_ends > 0,
        "its quanta did end (time used carries over)"
    );
}

#[test]
fn set_priority_cancels_penalty_and_recomputes() {
    let mut d = Drv::new("1x1x1", |_| {});
    let a = d.ts(1, None);
    d.wake(a);
    d.run_until(10 * MS);
    d.s.set_priority(a, 30, d.now).unwrap();
    let (e, bq, pen) = d.s.debug_priority(a);
    assert_eq!(pen, 0, "a priority change cancels the penalty");
    assert!((1..=30).contains(&e), "E rotates inside 1..=P");
    assert_eq!(
        bq,
        crate::quantum::base_quantum(&QuantumTable::LOW_LATENCY, e)
    );
    assert!(
        d.s.set_priority(a, 100, d.now).is_err(),
        "timeshare cannot take a realtime priority"
    );
}

#[test]
fn quantum_is_recomputed_from_time_used_and_ready_count() {
    let mut d = Drv::new("1x1x1", |_| {});
    let a = d.ts(1, None);
    let w = d.wake(a).unwrap();
    assert!(w.kick);
    // Alone, E = 10: base 2000 us, cap 5000 us.
    assert_eq!(d.slice_end[0] - d.now, 2000 * US);
    // Preempted after 500 us by a realtime entity: keeps 1500 us.
    d.now += 500 * US;
    let rt = d.add(2, SchedClass::Realtime, 110, None);
    d.wake(rt);
    d.now += 10 * US;
    d.sched(CpuId(0), StopReason::Blocked);
    assert_eq!(d.cpu_of(a), Some(0));
    assert_eq!(
        d.slice_end[0] - d.now,
        1500 * US,
        "slice = quantum - time used"
    );
    // Nine more ready entities: cap = 5000 / 10 = 500 us < the 500 used
    // before this dispatch: the wakes cut a's slice to the minimal
    // quantum (100 us) after its dispatch.
    let t1 = d.now;
    for _ in 0..9 {
        let x = d.ts(1, None);
        d.wake(x);
    }
    assert_eq!(d.slice_end[0], t1 + 100 * US);
    // Stopped there, even by a kick, its quantum counts as ended (penalty,
    // used reset): it goes behind the nine, the first of which gets a
    // capped slice.
    d.now += 100 * US;
    d.sched(CpuId(0), StopReason::Preempted);
    assert_ne!(d.cpu_of(a), Some(0));
    assert_eq!(d.slice_end[0] - d.now, 500 * US, "capped by ready count");
    assert_eq!(d.stats(a).quantum_ends, 1);
    assert_eq!(d.stats(a).quantum_used, 0);
}

#[test]
fn quantum_cap_counts_the_entity_being_dispatched() {
    // Haiku's ComputeQuantum divides maximum_latency by CoreEntry::ThreadCount()
    // = queued + busy CPUs of the core, and reschedule marks the CPU busy
    // (UpdatePriority) before it computes the quantum: the entity being
    // dispatched counts. 2 ready on one CPU: 5000 us / 2 = 2500 us, below
    // the base quantum of priority 5 (3500 us). Not counting it would give
    // 5000 us, so 3500 us.
    let mut d = Drv::new("1x1x1", |_| {});
    let a = d.add(1, SchedClass::Timeshare, 5, None);
    let b = d.add(1, SchedClass::Timeshare, 5, None);
    d.wake(a);
    assert_eq!(d.cpu_of(a), Some(0));
    assert_eq!(d.slice_end[0] - d.now, 3500 * US, "alone: base quantum");
    // b waits; a's quantum ends: a is requeued and b dispatched, 2 ready.
    d.wake(b);
    d.run_until(d.slice_end[0]);
    assert_eq!(d.cpu_of(b), Some(0));
    assert_eq!(
        d.slice_end[0] - d.now,
        2500 * US,
        "two ready on one CPU: 5000 / 2"
    );
    let core = &d.s.snapshot(d.now).cores[0];
    assert_eq!((core.ready, core.running), (1, 1), "a queued, b running");
}

#[test]
fn bad_input_returns_errors() {
    let d = Drv::new("1x2x1", |c| c.max_entities = 1);
    let spec = |aff: &str, prio| EntitySpec {
        vm: VmId(0),
        class: SchedClass::Timeshare,
        priority: prio,
        affinity: CpuSet::parse_list(aff).unwrap(),
    };
    assert_eq!(
        d.s.add_entity(spec("7", 10), 0),
        Err(SchedError::EmptyAffinity)
    );
    assert!(matches!(
        d.s.add_entity(spec("0", 0), 0),
        Err(SchedError::BadPriority { .. })
    ));
    let a = d.s.add_entity(spec("0", 10), 0).unwrap();
    assert_eq!(
        d.s.add_entity(spec("0", 10), 0),
        Err(SchedError::TooManyEntities(1))
    );
    assert_eq!(
        d.s.wake(EntityId::new(5, 0), 0),
        Err(SchedError::UnknownEntity(EntityId::new(5, 0)))
    );
    assert_eq!(
        d.s.schedule(CpuId(2), 0, StopReason::Idle),
        Err(SchedError::UnknownCpu(CpuId(2)))
    );
    d.s.remove_entity(a, 0).unwrap();
    assert_eq!(d.s.remove_entity(a, 0), Err(SchedError::StaleEntity(a)));
    assert!(
        d.s.add_entity(spec("0", 10), 0).is_ok(),
        "slot reused after removal"
    );
    let cfg = SchedConfig {
        max_entities: 0,
        ..SchedConfig::default()
    };
    assert!(HaikuScheduler::new(Topology::from_spec("1x1x1").unwrap(), cfg).is_err());
}

#[test]
fn remove_running_entity_frees_it_at_next_schedule() {
    let mut d = Drv::new("1x1x1", |_| {});
    let a = d.ts(1, None);
    let b = d.ts(1, None);
    d.wake(a);
    d.wake(b);
    d.s.remove_entity(a, d.now).unwrap();
    d.now += MS;
    d.sched(CpuId(0), StopReason::Preempted);
    assert_eq!(d.cpu_of(b), Some(0));
    assert!(d.s.snapshot(d.now).entities.iter().all(|e| e.id != a));
}

#[test]
fn no_idle_cpu_while_an_entity_waits() {
    let mut d = Drv::new("2x2x2", |_| {});
    let ids: Vec<_> = (0..12)
        .map(|i| d.ts(1, if i % 4 == 0 { Some("0-3") } else { None }))
        .collect();
    for id in &ids {
        d.wake(*id);
    }
    for step in 1..200u64 {
        d.run_until(step * MS);
        if step % 3 == 0 {
            let c = (step as usize / 3) % 8;
            if let Some(id) = d.run[c] {
                d.sched(CpuId(c as u32), StopReason::Blocked);
                d.now += 200 * US;
                if step % 2 == 0 {
                    d.wake(id);
                }
            }
        }
        let waiting: Vec<_> = ids
            .iter()
            .filter(|id| matches!(d.s.debug_state(**id), RunState::Queued { .. }))
            .collect();
        if !waiting.is_empty() {
            assert!(
                d.run.iter().all(|r| r.is_some()),
                "step {step}: idle CPU while {waiting:?} wait: {:?}",
                d.run
            );
        }
    }
    assert_eq!(d.s.snapshot(d.now).total_idle_while_waiting(), 0);
}

#[test]
fn power_saving_packs_small_tasks_onto_one_core() {
    let mut d = Drv::new("1x4x1", |c| c.mode = Mode::PowerSaving);
    assert_eq!(d.s.mode(), Mode::PowerSaving);
    let ids: Vec<_> = (0..3).map(|_| d.ts(1, None)).collect();
    // Small tasks: run 100 us, sleep 2 ms; all start on one core.
    let mut cores = std::collections::HashSet::new();
    for round in 0..50u64 {
        for id in &ids {
            d.now = round * 3 * MS + id.index() as u64 * 200 * US;
            d.wake(*id);
            if let Some(c) = d.cpu_of(*id) {
                if round > 10 {
                    cores.insert(c);
                }
                d.now += 100 * US;
                d.sched(CpuId(c), StopReason::Blocked);
            }
        }
    }
    assert_eq!(cores.len(), 1, "small loads packed on one core: {cores:?}");
}

#[test]
fn concurrent_threads_driving_disjoint_cpus_keep_invariants() {
    stress(false);
}

#[test]
fn concurrent_threads_with_smt_isolation_keep_invariants() {
    stress(true);
}

/// Four threads, each the VMM thread of two host CPUs, schedule their own
/// CPUs, wake each other's entities and deliver kicks through flags; after
/// joining, the structural invariants must hold.
fn stress(smt_isolation: bool) {
    let s = Arc::new(
        HaikuScheduler::new(
            Topology::from_spec("1x4x2").unwrap(),
            SchedConfig {
                max_entities: 64,
                smt_isolation,
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let ids: Vec<EntityId> = (0..24)
        .map(|i| {
            let affinity = if i % 5 == 0 {
                CpuSet::single(CpuId(i % 8)).unwrap()
            } else {
                s.topology().all_cpus()
            };
            let spec = EntitySpec {
                vm: VmId(i % 3),
                class: SchedClass::Timeshare,
                priority: 5 + (i % 20) as u8,
                affinity,
            };
            s.add_entity(spec, 0).unwrap()
        })
        .collect();
    let kicked: Arc<Vec<AtomicBool>> = Arc::new((0..8).map(|_| AtomicBool::new(true)).collect());
    let clock = Arc::new(std::sync::atomic::AtomicU64::new(1));
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let (s, ids, kicked, clock) = (
                Arc::clone(&s),
                ids.clone(),
                Arc::clone(&kicked),
                Arc::clone(&clock),
            );
            std::thread::spawn(move || {
                let mine = [CpuId(2 * t), CpuId(2 * t + 1)];
                let mut running: [Option<EntityId>; 2] = [None, None];
                let mut rng = 0x9e37_79b9u64 ^ t as u64;
                for step in 0..20_000u64 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let now = clock.fetch_add(10_000, Ordering::Relaxed);
                    let k = (rng % 2) as usize;
                    let reason = match (running[k], rng % 4) {
                        (None, _) => StopReason::Idle,
                        (Some(_), 0) => StopReason::Blocked,
                        (Some(_), 1) => StopReason::Yielded,
                        _ => StopReason::QuantumEnd,
                    };
                    let blocked = running[k].filter(|_| reason == StopReason::Blocked);
                    if kicked[mine[k].0 as usize].swap(false, Ordering::SeqCst) || step % 3 == 0 {
                        let d = s.schedule(mine[k], now, reason).unwrap();
                        running[k] = d.entity;
                        for c in d.kicks {
                            kicked[c.0 as usize].store(true, Ordering::SeqCst);
                        }
                    }
                    let target = blocked.unwrap_or(ids[(rng >> 8) as usize % ids.len()]);
                    if let Some(w) = s.wake(target, now).unwrap() {
                        if w.kick {
                            kicked[w.cpu.0 as usize].store(true, Ordering::SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    s.check_invariants().unwrap();
    let snap = s.snapshot(clock.load(Ordering::Relaxed));
    assert_eq!(snap.entities.len(), 24);
    assert!(snap.cpus.iter().map(|c| c.dispatches).sum::<u64>() > 100);
}

#[test]
fn low_latency_wakes_a_fully_idle_package_first() {
    let mut d = Drv::new("2x2x2", |_| {});
    let a = d.ts(1, None);
    let b = d.ts(1, None);
    d.wake(a);
    d.wake(b);
    let pkg = |c: u32| c / 4;
    assert_ne!(
        pkg(d.cpu_of(a).unwrap()),
        pkg(d.cpu_of(b).unwrap()),
        "second package woken before doubling up"
    );
}

#[test]
fn low_latency_gives_unrelated_cold_entities_an_llc_each() {
    // 1x8x8x2: 8 LLCs of 8 cores on one package (no idle package to wake).
    let mut d = Drv::new("1x8x8x2", |_| {});
    let llc = |c: u32| c / 16;
    let ids: Vec<_> = (0..8).map(|vm| d.ts(vm, None)).collect();
    for id in &ids {
        d.wake(*id);
    }
    let mut llcs: Vec<_> = ids.iter().map(|id| llc(d.cpu_of(*id).unwrap())).collect();
    llcs.sort();
    assert_eq!(llcs, (0..8).collect::<Vec<_>>(), "one LLC each");
}

#[test]
fn woken_by_its_vm_it_prefers_the_wakers_llc() {
    let mut d = Drv::new("1x8x8x2", |_| {});
    let llc = |c: u32| c / 16;
    let a = d.ts(1, None);
    let b = d.ts(1, None);
    let other = d.ts(2, None);
    d.wake(a);
    d.wake(b);
    let (la, lb) = (llc(d.cpu_of(a).unwrap()), llc(d.cpu_of(b).unwrap()));
    assert_ne!(la, lb, "cold: spread first");
    // b blocks, then a (same VM) wakes it: b leaves its warm CPU for an
    // idle core in a's LLC.
    d.now += 100 * US;
    let cpu_b = CpuId(d.cpu_of(b).unwrap());
    d.sched(cpu_b, StopReason::Blocked);
    d.now += 10 * US;
    let w = d.s.wake_by(b, a, d.now).unwrap().unwrap();
    assert_eq!(llc(w.cpu.0), la, "next to its waker");
    d.sched(w.cpu, StopReason::Idle);
    assert_eq!(d.cpu_of(b), Some(w.cpu.0));
    // A waker of another VM is no reason to move: `other` (cold) still
    // gets an LLC of its own.
    let w = d.s.wake_by(other, a, d.now).unwrap().unwrap();
    assert_ne!(llc(w.cpu.0), la, "unrelated waker ignored");
    d.s.check_invariants().unwrap();
}

#[test]
fn yield_ends_the_quantum_with_penalty() {
    let mut d = Drv::new("1x1x1", |_| {});
    let a = d.ts(1, None);
    let b = d.ts(1, None);
    d.wake(a);
    d.wake(b);
    d.run_until(5 * MS); // both measured as CPU-bound, not bursty
    let spinner = d.run[0].unwrap();
    d.now += 10 * US;
    d.sched(CpuId(0), StopReason::Yielded);
    assert_ne!(
        d.run[0],
        Some(spinner),
        "the other entity runs after a yield"
    );
    assert!(d.stats(spinner).quantum_ends >= 1);
}

#[test]
fn realtime_takes_the_lowest_priority_cpu_of_any_core() {
    let mut d = Drv::new("1x2x1", |_| {});
    // CPU 0 and CPU 1 both busy: one realtime (110), one timeshare hog.
    let rt1 = d.add(1, SchedClass::Realtime, 110, None);
    let hog = d.ts(1, None);
    d.wake(rt1);
    d.wake(hog);
    let hog_cpu = d.cpu_of(hog).unwrap();
    // A second realtime entity whose cache is cold must preempt the hog,
    // wherever the least loaded core is.
    let rt2 = d.add(2, SchedClass::Realtime, 105, None);
    let w = d.wake(rt2).unwrap();
    assert!(w.kick);
    assert_eq!(d.cpu_of(rt2), Some(hog_cpu));
    assert!(d.cpu_of(rt1).is_some());
}

#[test]
fn idle_cpu_steals_a_pinned_entry_from_another_llc() {
    // 1x2x2x2: LLC 0 holds CPUs 0-3, LLC 1 CPUs 4-7. Entities allowed on
    // CPUs 0 and 4 only sit in a pinned queue (their affinity covers no
    // whole core); the one left waiting must reach CPU 4 through the other
    // LLC's bitmap of non-empty pinned queues when CPU 4's runner blocks.
    let mut d = Drv::new("1x2x2x2", |_| {});
    let ids: Vec<_> = (0..3).map(|_| d.ts(1, Some("0,4"))).collect();
    for id in &ids {
        d.wake(*id);
    }
    assert!(d.run[0].is_some() && d.run[4].is_some());
    let waiting = ids
        .iter()
        .copied()
        .find(|id| matches!(d.s.debug_state(*id), RunState::Queued { .. }))
        .expect("one of three waits");
    // Leave it only in CPU 0's pinned queue (LLC 0), whichever it was in.
    let RunState::Queued { queue, .. } = d.s.debug_state(waiting) else {
        unreachable!()
    };
    if queue != QueueRef::Pinned(CpuId(0)) {
        let run0 = d.run[0].expect("CPU 0 runs");
        d.now += 10 * US;
        d.sched(CpuId(0), StopReason::Blocked);
        d.now += 10 * US;
        d.wake(run0);
    }
    let queued: Vec<_> = ids
        .iter()
        .filter_map(|id| match d.s.debug_state(*id) {
            RunState::Queued { queue, .. } => Some((*id, queue)),
            _ => None,
        })
        .collect();
    assert_eq!(queued.len(), 1, "{queued:?}");
    let (waiting, queue) = queued[0];
    d.now += 10 * US;
    let cpu = match queue {
        QueueRef::Pinned(CpuId(0)) => CpuId(4),
        _ => CpuId(0),
    };
    d.sched(cpu, StopReason::Blocked);
    assert_eq!(
        d.run[cpu.0 as usize],
        Some(waiting),
        "{cpu:?} steals the entry waiting in {queue:?}"
    );
}

#[test]
fn fruitless_balance_search_is_remembered_for_the_core_epoch() {
    // 1x2x1, four hogs balanced two per core: a quantum end finds no core
    // worth a move, remembers it for its core's load epoch, and forgets it
    // when the epoch rolls.
    let mut d = Drv::new("1x2x1", |_| {});
    let ids: Vec<_> = (0..4).map(|_| d.ts(1, None)).collect();
    for id in &ids {
        d.wake(*id);
    }
    d.run_until(50 * MS);
    let core = d.s.m.core_of(CpuId(0));
    d.sched(CpuId(0), StopReason::QuantumEnd);
    let gap =
        d.s.m
            .calm_gap(core)
            .expect("a fruitless search is remembered");
    let load = d.stats(d.run[0].unwrap()).load as i64;
    assert!(gap < load, "gap {gap} too small for a move of load {load}");
    d.now += 2 * MS;
    d.s.m.roll(core, d.now);
    assert_eq!(d.s.m.calm_gap(core), None, "a new epoch forgets it");
}

#[test]
fn stale_handles_are_refused() {
    crate::testkit::stale_handles_are_refused(crate::PolicyKind::Haiku);
}

// ---- changes while running ----

#[test]
fn affinity_changes_keep_handle_penalty_and_statistics() {
    let mut d = Drv::new("1x4x1", |_| {});
    let a = d.ts(0, Some("0"));
    d.wake(a);
    assert_eq!(d.cpu_of(a), Some(0));
    d.run_until(5 * MS);
    let before = d.stats(a);
    let (_, _, penalty) = d.s.debug_priority(a);
    assert!(penalty > 0, "a hog collects a penalty");
    // Running on CPU 0, now allowed on 2-3 only: CPU 0 is to be kicked,
    // and its next schedule moves it.
    let kicks =
        d.s.set_affinity(a, CpuSet::parse_list("2-3").unwrap(), d.now)
            .unwrap();
    assert_eq!(kicks, vec![CpuId(0)]);
    d.deliver(kicks);
    let cpu = d.cpu_of(a).expect("runs");
    assert!((2..=3).contains(&cpu), "now on {cpu}");
    let after = d.stats(a);
    assert_eq!(after.id, a);
    assert!(after.run_time >= before.run_time && after.quantum_ends >= before.quantum_ends);
    assert_eq!(d.s.debug_priority(a).2, penalty, "penalty kept");
    // Waiting behind another entity on CPU 2 only, then widened to an idle
    // CPU: moved there and that CPU kicked.
    let b = d.ts(0, Some("2-3"));
    let c = d.ts(0, Some("2-3"));
    d.wake(b);
    d.wake(c);
    let waiting = [a, b, c]
        .into_iter()
        .find(|x| d.cpu_of(*x).is_none())
        .expect("two CPUs, three hogs");
    let kicks =
        d.s.set_affinity(waiting, CpuSet::parse_list("0-3").unwrap(), d.now)
            .unwrap();
    assert_eq!(kicks.len(), 1, "{kicks:?}");
    assert!(kicks[0].0 < 2, "an idle CPU: {kicks:?}");
    d.deliver(kicks);
    assert!(d.cpu_of(waiting).is_some_and(|c| c < 2));
    // Bad input.
    assert_eq!(
        d.s.set_affinity(a, CpuSet::single(CpuId(9)).unwrap(), d.now),
        Err(SchedError::EmptyAffinity)
    );
}

#[test]
fn class_change_to_realtime_preempts_and_back() {
    let mut d = Drv::new("1x1x1", |_| {});
    let hog = d.ts(0, None);
    let other = d.ts(1, None);
    d.wake(hog);
    d.wake(other);
    assert_eq!(d.cpu_of(hog), Some(0));
    // The waiting one becomes realtime: it preempts the timeshare hog.
    let kicks =
        d.s.set_class(other, SchedClass::Realtime, 110, d.now)
            .unwrap();
    assert_eq!(kicks, vec![CpuId(0)]);
    d.deliver(kicks);
    assert_eq!(d.cpu_of(other), Some(0));
    assert_eq!(d.s.debug_priority(other).0, 110);
    assert_eq!(
        d.s.set_class(other, SchedClass::Timeshare, 110, d.now),
        Err(SchedError::BadPriority {
            class: SchedClass::Timeshare,
            priority: 110
        })
    );
    // Back to timeshare while running: no kick, its priority follows.
    assert!(d
        .s
        .set_class(other, SchedClass::Timeshare, 10, d.now)
        .unwrap()
        .is_empty());
    assert_eq!(d.s.debug_priority(other).0, 10);
    assert_eq!(d.stats(other).id, other);
}

#[test]
fn mode_switch_changes_the_quanta_live() {
    let mut d = Drv::new("1x1x1", |_| {});
    let a = d.ts(0, None);
    d.wake(a);
    // Low latency, E = 10, alone: min(cap 5000, base 2000) us.
    assert_eq!(d.slice_end[0] - d.now, 2000 * US);
    assert_eq!(d.s.mode(), Mode::LowLatency);
    assert!(d.s.set_mode(Mode::PowerSaving, d.now).is_empty());
    assert_eq!(VcpuScheduler::mode(&d.s), Mode::PowerSaving);
    d.now += 2000 * US;
    d.sched(CpuId(0), StopReason::QuantumEnd);
    // Power saving: E = 9 after one quantum end, base 2000 us x 3..10.
    let (e, _, _) = d.s.debug_priority(a);
    let want = crate::quantum::base_quantum(&crate::tunables::QuantumTable::POWER_SAVING, e);
    assert_eq!(d.slice_end[0] - d.now, want);
    assert!(want > 6000 * US);
    // The same mode again changes nothing.
    assert!(d.s.set_mode(Mode::PowerSaving, d.now).is_empty());
}

#[test]
fn cpu_out_of_service_hands_everything_on_and_comes_back() {
    let mut d = Drv::new("1x2x2", |_| {});
    let free: Vec<EntityId> = (0..3).map(|_| d.ts(0, None)).collect();
    let pinned = d.ts(0, Some("3"));
    for e in &free {
        d.wake(*e);
    }
    d.wake(pinned);
    assert_eq!(d.cpu_of(pinned), Some(3));
    // CPU 3 out: the CPU itself is kicked; its runner goes elsewhere...
    let kicks = d.s.set_cpu_enabled(CpuId(3), false, d.now).unwrap();
    assert!(kicks.contains(&CpuId(3)), "{kicks:?}");
    d.deliver(kicks);
    assert_eq!(d.run[3], None, "nothing runs out of service");
    // ... except the entity pinned to it, which waits for it.
    assert_eq!(d.cpu_of(pinned), None);
    for e in &free {
        assert!(d.cpu_of(*e).is_some_and(|c| c != 3), "{e:?}");
    }
    d.run_until(20 * MS);
    assert_eq!(d.run[3], None);
    assert_eq!(d.cpu_of(pinned), None);
    let snap = d.s.snapshot(d.now);
    assert!(!snap.cpus[3].in_service);
    // Nothing is placed on it, also not by a wake.
    let late = d.ts(0, None);
    let w = d.wake(late).unwrap();
    assert_ne!(w.cpu, CpuId(3));
    // Back in service: kicked, it runs what waited for it.
    let kicks = d.s.set_cpu_enabled(CpuId(3), true, d.now).unwrap();
    assert_eq!(kicks, vec![CpuId(3)]);
    d.deliver(kicks);
    assert_eq!(d.cpu_of(pinned), Some(3));
    // Not the last CPU in service.
    for c in 0..3 {
        let kicks = d.s.set_cpu_enabled(CpuId(c), false, d.now).unwrap();
        d.deliver(kicks);
    }
    assert_eq!(
        d.s.set_cpu_enabled(CpuId(3), false, d.now),
        Err(SchedError::LastCpuInService(CpuId(3)))
    );
    assert_eq!(
        d.s.set_cpu_enabled(CpuId(4), false, d.now),
        Err(SchedError::UnknownCpu(CpuId(4)))
    );
    // Everything now runs on CPU 3 alone, in turn.
    d.run_until(d.now + 50 * MS);
    for e in free.iter().chain([&pinned, &late]) {
        assert!(d.stats(*e).run_time > 0, "{e:?} ran");
    }
}

#[test]
fn a_whole_core_out_of_service_drains_its_queue() {
    let mut d = Drv::new("1x2x2", |_| {});
    let hogs: Vec<EntityId> = (0..6).map(|_| d.ts(0, None)).collect();
    for e in &hogs {
        d.wake(*e);
    }
    for c in [2, 3] {
        let kicks = d.s.set_cpu_enabled(CpuId(c), false, d.now).unwrap();
        d.deliver(kicks);
    }
    // Every hog waits on or runs on core 0 (the invariants check that no
    // entity waits in core 1's queue).
    d.run_until(10 * MS);
    for e in &hogs {
        if let Some(c) = d.cpu_of(*e) {
            assert!(c < 2, "{e:?} on {c}");
        }
    }
    for c in [2, 3] {
        let kicks = d.s.set_cpu_enabled(CpuId(c), true, d.now).unwrap();
        d.deliver(kicks);
    }
    assert!((0..4).all(|c| d.run[c].is_some()), "{:?}", d.run);
}

#[test]
fn snapshot_says_where_entities_are() {
    crate::testkit::snapshot_says_where_entities_are(crate::PolicyKind::Haiku);
}

#[test]
fn snapshot_shows_penalty_quantum_and_queues() {
    use crate::stats::EntityState;
    let mut d = Drv::new("1x1x2", |_| {});
    let hog = d.ts(0, None);
    let pinned = d.ts(0, Some("1"));
    let other = d.ts(0, None);
    d.wake(hog);
    d.run_until(3 * MS);
    d.wake(other);
    d.wake(pinned);
    let snap = d.s.snapshot(d.now);
    let row = |id: EntityId| snap.entities.iter().find(|e| e.id == id).unwrap().clone();
    let runner = d.run[0].or(d.run[1]).unwrap();
    let h = row(hog);
    let (e, _, penalty) = d.s.debug_priority(hog);
    assert_eq!((h.effective_priority, h.penalty), (e, penalty));
    assert!(h.penalty > 0 && h.quantum_ends > 0);
    assert!(h.quantum > 0);
    // Both CPUs run; whoever waits is shown in its queue.
    let waiting: Vec<_> = snap
        .entities
        .iter()
        .filter(|e| e.state == EntityState::Waiting)
        .collect();
    assert_eq!(waiting.len(), 1, "{}", snap.to_table());
    let w = waiting[0];
    assert_eq!(w.core, Some(CoreId(0)));
    if w.id == pinned {
        assert_eq!(w.cpu, Some(CpuId(1)), "the pinned queue of CPU 1");
    } else {
        assert_eq!(w.cpu, None, "the core's queue");
    }
    assert_eq!(snap.cores[0].ready, 1);
    assert_eq!(snap.cores[0].running, 2);
    assert!(snap.cpus.iter().any(|c| c.running == Some(runner)));
}

/// A priority-5 entity dispatched alone on CPU 0 at `d.now` (slice 3500
/// us: the base quantum of E = 5, below the cap of one ready entity).
fn long_slice_runner(d: &mut Drv) -> EntityId {
    let a = d.add(1, SchedClass::Timeshare, 5, None);
    d.wake(a);
    assert_eq!(d.cpu_of(a), Some(0));
    assert_eq!(d.slice_end[0] - d.now, 3500 * US, "alone: base quantum");
    a
}

#[test]
fn a_wake_behind_a_long_slice_cuts_it_to_the_cap_of_two() {
    let mut d = Drv::new("1x1x1", |_| {});
    d.now = 10 * MS;
    let t0 = d.now;
    let a = long_slice_runner(&mut d);
    d.now += 300 * US;
    let b = d.add(1, SchedClass::Timeshare, 5, None);
    let w = d.wake(b).unwrap();
    assert!(!w.kick, "equal E: b waits");
    assert_eq!(
        w.shorten_quantum,
        Some(crate::QuantumCut {
            runner: a,
            dispatched_at: t0,
            end: t0 + 2500 * US,
        }),
        "dispatch + max_latency / 2 ready"
    );
    let snap = d.s.snapshot(d.now);
    assert_eq!(snap.cpus[0].quantum_cuts, 1);
    assert_eq!(d.stats(a).quantum, 2500 * US, "the snapshot shows the cut");
    // The timer fires at the cut end: a quantum end, not a preemption.
    d.run_until(t0 + 2500 * US);
    assert_eq!(d.cpu_of(b), Some(0));
    assert_eq!(d.slice_end[0] - d.now, 2500 * US, "b: 2 ready too");
    let sa = d.stats(a);
    assert_eq!((sa.quantum_ends, sa.preemptions), (1, 0));
}

#[test]
fn a_kick_at_the_cut_end_counts_as_the_quantum_end() {
    // A caller whose cut timer and a kick race reports Preempted: the
    // scheduler measures the time used against the cut quantum.
    let mut d = Drv::new("1x1x1", |_| {});
    let a = long_slice_runner(&mut d);
    let b = d.add(1, SchedClass::Timeshare, 5, None);
    assert!(d.wake(b).unwrap().shorten_quantum.is_some());
    d.now += 2500 * US;
    d.sched(CpuId(0), StopReason::Preempted);
    let sa = d.stats(a);
    assert_eq!((sa.quantum_ends, sa.preemptions), (1, 0));
    assert_eq!(d.cpu_of(b), Some(0));
}

#[test]
fn a_runner_past_the_new_cap_is_cut_to_now() {
    // a ran 3000 us of its 3500 when b came: by 2 ready its quantum (2500)
    // is over, so it ends at the wake (dispatch + time used).
    let mut d = Drv::new("1x1x1", |_| {});
    let a = long_slice_runner(&mut d);
    d.now += 3000 * US;
    let b = d.add(1, SchedClass::Timeshare, 5, None);
    let cut = d.wake(b).unwrap().shorten_quantum.unwrap();
    assert_eq!((cut.runner, cut.end), (a, d.now));
    d.run_until(d.now);
    assert_eq!(d.cpu_of(b), Some(0));
    assert_eq!(d.stats(a).quantum_ends, 1);
}

#[test]
fn a_cut_counts_time_used_before_the_dispatch_and_keeps_the_minimal_quantum() {
    let mut d = Drv::new("1x1x1", |_| {});
    let a = long_slice_runner(&mut d);
    // Preempted by a realtime entity after 800 us: 2700 us left.
    d.now += 800 * US;
    let rt = d.add(2, SchedClass::Realtime, 110, None);
    assert!(d.wake(rt).unwrap().kick);
    d.now += 10 * US;
    d.sched(CpuId(0), StopReason::Blocked);
    assert_eq!(d.cpu_of(a), Some(0));
    let t1 = d.now;
    assert_eq!(d.slice_end[0] - t1, 2700 * US);
    // b: 2 ready -> a's quantum is 2500, of which 800 were used.
    let b = d.add(1, SchedClass::Timeshare, 5, None);
    let cut = d.wake(b).unwrap().shorten_quantum.unwrap();
    assert_eq!((cut.dispatched_at, cut.end), (t1, t1 + 1700 * US));
    // Eight more: cap 5000 / 10 = 500 us < the 800 used; never below the
    // minimal quantum (100 us) after the dispatch.
    for _ in 0..8 {
        let x = d.add(1, SchedClass::Timeshare, 5, None);
        d.wake(x);
    }
    assert_eq!(d.slice_end[0], t1 + 100 * US);
}

#[test]
fn a_realtime_runner_is_never_cut() {
    let mut d = Drv::new("1x1x1", |_| {});
    let rt = d.add(2, SchedClass::Realtime, 100, None);
    d.wake(rt);
    for _ in 0..10 {
        let x = d.ts(1, None);
        let w = d.wake(x).unwrap();
        assert!(!w.kick && w.shorten_quantum.is_none());
    }
    assert_eq!(d.s.snapshot(d.now).cpus[0].quantum_cuts, 0);
}

#[test]
fn a_preempting_wake_cuts_nothing() {
    // The kick makes the CPU schedule: what runs next gets a slice of the
    // new count anyway.
    let mut d = Drv::new("1x1x1", |_| {});
    let _hog = hog_with_penalty(&mut d);
    let bursty = d.ts(1, None);
    let w = d.wake(bursty).unwrap();
    assert!(w.kick);
    assert_eq!(w.shorten_quantum, None);
}

#[test]
fn a_wake_onto_an_idle_cpu_cuts_nothing() {
    let mut d = Drv::new("1x2x1", |_| {});
    let _a = long_slice_runner(&mut d);
    let b = d.add(1, SchedClass::Timeshare, 5, None);
    let w = d.wake(b).unwrap();
    assert!(w.kick && w.shorten_quantum.is_none(), "{w:?}");
    assert_eq!(d.slice_end[0] - d.now, 3500 * US, "a keeps its slice");
}

/// One CPU, a hog `h` and a vCPU `w` that were both CPU-bound for 30 ms
/// (neither bursty), `w` on the CPU when it returns.
fn hog_and_costly_waker() -> (Drv, EntityId, EntityId) {
    hog_and_costly_waker_with(|_| {})
}

/// [`hog_and_costly_waker`] with a configuration of one's own.
fn hog_and_costly_waker_with(f: impl FnOnce(&mut SchedConfig)) -> (Drv, EntityId, EntityId) {
    let mut d = Drv::new("1x1x1", f);
    let h = d.ts(1, None);
    let w = d.ts(2, None);
    d.wake(h);
    d.wake(w);
    d.run_until(30 * MS);
    while d.cpu_of(w) != Some(0) {
        let next = d.slice_end[0];
        d.run_until(next);
    }
    assert!(d.stats(w).load > crate::tunables::BURSTY_LOAD, "not bursty");
    (d, h, w)
}

#[test]
fn fair_share_boost_lets_a_starved_waker_preempt_a_hog() {
    let (mut d, h, w) = hog_and_costly_waker();
    // w blocks for 400 us (too short to cancel its penalty) while the hog
    // runs: its share falls below its half.
    d.sched(CpuId(0), StopReason::Blocked);
    assert_eq!(d.cpu_of(h), Some(0));
    d.now += 400 * US;
    let pen = d.s.debug_priority(w).2;
    assert!(pen > 0, "w collected penalties while CPU-bound");
    assert!(d.stats(w).recent_share < 500);
    let dec = d.wake(w).unwrap();
    assert!(dec.kick, "a waker below its share preempts the hog");
    assert_eq!(d.cpu_of(w), Some(0));
    let (e, _, kept) = d.s.debug_priority(w);
    assert_eq!(e, 10, "boosted to its base priority");
    assert_eq!(kept, pen, "the penalty stays underneath the boost");
    assert_eq!(d.stats(w).boosted_wakes, 1);
    // The boost ends when it blocks: E is the penalised one again.
    d.now += 100 * US;
    d.sched(CpuId(0), StopReason::Blocked);
    assert!(d.s.debug_priority(w).0 < 10);
}

#[test]
fn fair_share_waker_above_its_share_waits_until_it_is_due() {
    // w blocks after each run and wakes 10 us later; over many rounds
    // some wakes find it below its half (it preempts), others above it:
    // then it waits, the hog's slice is cut to when w's share falls to
    // its half (well inside the ready-count cap of 2.5 ms), and when the
    // hog stops there w runs next.
    let (mut d, h, w) = hog_and_costly_waker();
    let (mut preempted, mut due) = (0, 0);
    for _ in 0..400 {
        if d.cpu_of(w) == Some(0) {
            d.now += 200 * US;
            d.sched(CpuId(0), StopReason::Blocked);
            d.now += 10 * US;
            let below = d.stats(w).recent_share < 500;
            let dec = d.wake(w).unwrap();
            if below {
                assert!(dec.kick, "below its share: preempts");
                preempted += 1;
            } else if let Some(cut) = dec.shorten_quantum {
                assert!(!dec.kick);
                assert_eq!(cut.runner, h);
                assert!(cut.end < d.now + 2500 * US, "cut to the due time");
                d.run_until(cut.end);
                assert_eq!(d.cpu_of(w), Some(0), "w runs when its share is due");
                assert_eq!(d.s.debug_priority(w).0, 10, "boosted at the due time");
                due += 1;
            }
        } else {
            let next = d.slice_end[0];
            d.run_until(next);
        }
    }
    assert!(preempted > 0 && due > 0, "preempted {preempted}, due {due}");
}

#[test]
fn fair_share_boost_off_is_haiku_alone() {
    // The same starved waker with the boost switched off waits behind
    // the hog (its penalised E is within the delta or below).
    let (mut d, h, w) = hog_and_costly_waker_with(|c| c.tunables.share_boost = false);
    d.sched(CpuId(0), StopReason::Blocked);
    d.now += 400 * US;
    let eh = d.s.debug_priority(h).0;
    let ew = d.s.debug_priority(w).0;
    let dec = d.wake(w).unwrap();
    assert_eq!(
        dec.kick,
        ew >= eh + crate::tunables::WAKE_PREEMPT_PRIORITY_DELTA
    );
    assert_eq!(d.stats(w).boosted_wakes, 0);
}

#[test]
fn halts_the_vmm_learnt_late_are_not_run_time() {
    // An entity that held its CPU for a whole slice but, as the VMM learns
    // only at its end (Pacer under KVM's local APIC), was halted for all
    // but 100 us of it: charged 100 us, and no used-up quantum (no
    // penalty). The same stop without the halted time is a full quantum.
    for told in [false, true] {
        let mut d = Drv::new("1x1x1", |_| {});
        let e = d.ts(0, None);
        d.wake(e);
        assert_eq!(d.run[0], Some(e));
        let slice = d.slice_end[0] - d.now;
        d.now += slice;
        let halted = if told { slice - 100 * US } else { 0 };
        d.s.schedule_after_halts(CpuId(0), d.now, StopReason::Blocked, halted)
            .unwrap();
        d.run[0] = None;
        let st = d.stats(e);
        assert_eq!(st.run_time, slice - halted, "told {told}: {st:?}");
        assert_eq!(st.quantum_ends, u64::from(!told), "told {told}: {st:?}");
        assert_eq!(st.blocks, 1, "told {told}: {st:?}");
    }
}

#[test]
fn effective_priority_is_the_e_the_policy_ranks_by() {
    let mut d = Drv::new("1x1x1", |_| {});
    let hog = hog_with_penalty(&mut d);
    assert_eq!(
        d.s.effective_priority(hog),
        Some(d.s.debug_priority(hog).0),
        "the penalised E, not the base priority"
    );
    let fresh = d.ts(1, None);
    assert_eq!(d.s.effective_priority(fresh), Some(10));
    d.s.remove_entity(fresh, d.now).unwrap();
    assert_eq!(d.s.effective_priority(fresh), None, "a stale handle");
}

#[test]
fn a_run_learnt_late_is_charged_as_wake_run_and_block() {
    let mut d = Drv::new("1x1x1", |_| {});
    let v = d.ts(1, None);
    d.wake(v);
    d.now += 100 * US;
    d.sched(CpuId(0), StopReason::Blocked);
    let before = d.stats(v);
    // Unseen by the policy: woke, ran 300 us, halted again.
    d.now += 2 * MS;
    d.s.ran_unseen(v, 300 * US, d.now).unwrap();
    let after = d.stats(v);
    assert_eq!(after.run_time, before.run_time + 300 * US);
    assert_eq!(after.wakes, before.wakes + 1);
    assert_eq!(after.blocks, before.blocks + 1);
    assert!(after.recent_share > before.recent_share, "its share grew");
    assert!(matches!(after.state, crate::stats::EntityState::Blocked));
    // Only a blocked entity: a running one is charged by its turn.
    d.wake(v);
    let running = d.stats(v).run_time;
    d.s.ran_unseen(v, 300 * US, d.now).unwrap();
    assert_eq!(d.stats(v).run_time, running);
}

#[test]
fn runs_learnt_late_that_add_up_to_a_quantum_are_penalised() {
    // A vCPU that the hypervisor wakes again and again, each run unseen,
    // uses its quanta like a hog: its E falls as a hog's does (the
    // starvation guard holds for runs the policy did not dispatch).
    let mut d = Drv::new("1x1x1", |_| {});
    let v = d.ts(1, None);
    d.wake(v);
    d.now += 20 * US;
    d.sched(CpuId(0), StopReason::Blocked);
    let e0 = d.s.effective_priority(v).unwrap();
    for _ in 0..200 {
        d.now += 1000 * US;
        d.s.ran_unseen(v, 990 * US, d.now).unwrap();
    }
    let e1 = d.s.effective_priority(v).unwrap();
    assert!(e1 < e0, "E {e0} -> {e1}: penalised");
    assert!(d.stats(v).load > 900, "load {}", d.stats(v).load);
}

#[test]
fn a_capped_entitys_unseen_runs_spend_its_budget() {
    let mut d = Drv::new("1x1x1", |_| {});
    let v = d.ts(1, None);
    d.s.set_cap(v, Some(100), d.now).unwrap();
    d.wake(v);
    d.now += 10 * US;
    d.sched(CpuId(0), StopReason::Blocked);
    // Unseen runs far above 10 % of the CPU.
    for _ in 0..20 {
        d.now += 1000 * US;
        d.s.ran_unseen(v, 900 * US, d.now).unwrap();
    }
    // At its next wake the spent budget shows: it waits for the budget's
    // renewal instead of running.
    let ran = d.stats(v).run_time;
    d.now += 10 * US;
    d.wake(v);
    d.run_until(d.now + 20 * MS);
    let st = d.stats(v);
    assert!(st.throttles >= 1, "{st:?}");
    assert!(
        st.run_time - ran <= 2 * MS,
        "ran {} us in 20 ms with a 10 % cap overspent",
        (st.run_time - ran) / US
    );
}

#[test]
fn has_waiting_says_whether_a_quantum_end_would_pick_another() {
    let mut d = Drv::new("1x1x1", |_| {});
    let a = d.ts(1, None);
    d.wake(a);
    assert_eq!(d.cpu_of(a), Some(0));
    assert!(
        !d.s.has_waiting(CpuId(0)),
        "alone: a quantum end re-picks it"
    );
    let b = d.ts(2, None);
    let w = d.wake(b).unwrap();
    assert!(!w.kick);
    assert!(d.s.has_waiting(CpuId(0)), "b waits behind a");
    d.now += 10 * MS;
    d.sched(CpuId(0), StopReason::QuantumEnd);
    assert_eq!(d.cpu_of(b), Some(0));
    assert!(d.s.has_waiting(CpuId(0)), "now a waits behind b");
}

#[test]
fn has_waiting_sees_what_waits_on_a_neighbour_core_of_its_cache() {
    // Two cores of one cache, three hogs: the core that runs one alone
    // still has its quantum ends, which rebalance what waits next door.
    let mut d = Drv::new("1x2x1", |_| {});
    let hogs: Vec<_> = (0..3).map(|i| d.ts(i, None)).collect();
    for h in &hogs {
        d.wake(*h);
    }
    assert!(d.s.has_waiting(CpuId(0)) && d.s.has_waiting(CpuId(1)));
    // Two cores of two caches, two hogs: nothing waits anywhere.
    let mut d = Drv::new("2x1x1", |_| {});
    for i in 0..2 {
        let h = d.ts(i, None);
        d.wake(h);
    }
    assert!(!d.s.has_waiting(CpuId(0)) && !d.s.has_waiting(CpuId(1)));
}

/// One CPU with VM 0 co-scheduled as `mode` (the directed yield's tests).
fn one_cpu_with_vm0(mode: crate::Coschedule) -> HaikuScheduler {
    let s = HaikuScheduler::new(
        Topology::from_spec("1x1x1").unwrap(),
        SchedConfig {
            max_entities: 16,
            ..SchedConfig::default()
        },
    )
    .unwrap();
    s.set_coschedule(VmId(0), mode, 0).unwrap();
    s
}

/// A timeshare vCPU of `vm` at `priority` that may use every CPU of `s`.
fn timeshare_in(s: &HaikuScheduler, vm: u32, priority: u8) -> EntitySpec {
    EntitySpec {
        vm: VmId(vm),
        class: SchedClass::Timeshare,
        priority,
        affinity: s.topology().all_cpus(),
    }
}

/// Three entities woken on `s` in this order: `a` of VM 0 at priority
/// 10, one of VM 1 at `other`, and `a`'s sibling at `sibling`.
fn a_vm1_vcpu_and_a_sibling(
    s: &HaikuScheduler,
    other: u8,
    sibling: u8,
) -> (EntityId, EntityId, EntityId) {
    let ids = (
        s.add_entity(timeshare_in(s, 0, 10), 0).unwrap(),
        s.add_entity(timeshare_in(s, 1, other), 0).unwrap(),
        s.add_entity(timeshare_in(s, 0, sibling), 0).unwrap(),
    );
    for id in [ids.0, ids.1, ids.2] {
        s.wake(id, 0).unwrap();
    }
    ids
}

/// A directed yield (`yield_to`) gives the yielder's CPU to its parked
/// sibling over the entity that queued first; without co-scheduling the
/// call does nothing and the queue's order holds.
#[test]
fn a_directed_yield_runs_the_parked_sibling_next() {
    for mode in [crate::Coschedule::Relaxed, crate::Coschedule::Off] {
        let s = one_cpu_with_vm0(mode);
        let (a, hog, b) = a_vm1_vcpu_and_a_sibling(&s, 10, 10);
        let cpu = CpuId(0);
        assert_eq!(
            s.schedule(cpu, 0, StopReason::Idle).unwrap().entity,
            Some(a)
        );
        let on = mode == crate::Coschedule::Relaxed;
        assert_eq!(s.yield_to(a, b, 10 * US).unwrap(), on);
        let next = s
            .schedule(cpu, 10 * US, StopReason::Yielded)
            .unwrap()
            .entity;
        assert_eq!(next, Some(if on { b } else { hog }), "{mode}");
        // To another VM's vCPU: nothing to do.
        let other = if on { hog } else { a };
        assert!(
            !s.yield_to(next.unwrap(), other, 20 * US).unwrap(),
            "{mode}"
        );
    }
}

/// In a VM wider than its CPUs (two vCPUs, one CPU) a passed turn
/// (`pass_turn`) lends the parked sibling the rest of the yielder's
/// slice: it runs though it waits below another VM's entity, for what
/// was left of the yielder's slice, and the CPU then goes to that entity.
/// A plain `yield_to` (a lock's holder, given a turn of its own) is
/// refused below that entity's level.
#[test]
fn a_passed_turn_in_a_wide_vm_lends_the_rest_of_the_yielders_slice() {
    for passes in [true, false] {
        let s = one_cpu_with_vm0(crate::Coschedule::Relaxed);
        let (a, hog, b) = a_vm1_vcpu_and_a_sibling(&s, 10, 5);
        let cpu = CpuId(0);
        let first = s.schedule(cpu, 0, StopReason::Idle).unwrap();
        assert_eq!(first.entity, Some(a));
        let end = first.quantum;
        let noted = if passes {
            s.pass_turn(a, b, 10 * US)
        } else {
            s.yield_to(a, b, 10 * US)
        };
        assert!(noted.unwrap());
        let next = s.schedule(cpu, 10 * US, StopReason::Yielded).unwrap();
        if !passes {
            assert_eq!(next.entity, Some(hog), "a holder below the hog waits");
            continue;
        }
        assert_eq!(next.entity, Some(b), "lent, though below the hog's level");
        assert_eq!(next.quantum, end - 10 * US, "the rest of a's slice");
        assert_eq!(s.snapshot(10 * US).cpus[0].directed_yields, 1);
        let after = s.schedule(cpu, end, StopReason::QuantumEnd).unwrap();
        assert_eq!(after.entity, Some(hog), "the slice is over");
    }
}

/// A spinner's directed yield (`yield_to`) to a parked sibling its
/// penalties put below it is taken when nothing else waiting outranks
/// that sibling: the yielder's own level is not the floor (it was, and
/// the spinner was picked again to spin on), another VM's entry still
/// is (above). In a VM that takes sibling turns the yielder's level
/// stays the floor: its turns pass the slice round.
#[test]
fn a_directed_yield_is_not_refused_for_the_yielders_own_level() {
    for mode in [crate::Coschedule::Relaxed, crate::Coschedule::Turns] {
        let s = one_cpu_with_vm0(mode);
        let (a, _low, b) = a_vm1_vcpu_and_a_sibling(&s, 3, 5);
        let cpu = CpuId(0);
        assert_eq!(
            s.schedule(cpu, 0, StopReason::Idle).unwrap().entity,
            Some(a)
        );
        assert!(s.yield_to(a, b, 10 * US).unwrap());
        let next = s
            .schedule(cpu, 10 * US, StopReason::Yielded)
            .unwrap()
            .entity;
        let relaxed = mode == crate::Coschedule::Relaxed;
        assert_eq!(next, Some(if relaxed { b } else { a }), "{mode}");
    }
}

/// A co-stop and a directed yield show in the CPU's counters of the
/// snapshot: the leader of a co-scheduled VM, popped again at its
/// quantum end while a sibling it is a whole quantum ahead of waits
/// parked, gives its CPU to that sibling (a co-stop); the sibling's
/// `yield_to` back to the leader is a directed yield. Nothing co-starts
/// on one CPU.
#[test]
fn co_stops_and_directed_yields_count_on_their_cpu() {
    let mut d = Drv::new("1x1x1", |c| {
        c.tunables.costop_skew = MS;
        // The parked sibling stays behind the leader in the queue.
        c.tunables.share_boost = false;
    });
    d.s.set_coschedule(VmId(0), crate::Coschedule::Relaxed, 0)
        .unwrap();
    let leader = d.add(0, SchedClass::Timeshare, 20, None);
    let laggard = d.add(0, SchedClass::Timeshare, 5, None);
    d.wake(leader);
    d.wake(laggard);
    let cpu = CpuId(0);
    assert_eq!(d.run[0], Some(leader));
    let counts = |d: &Drv| {
        let c = &d.s.snapshot(d.now).cpus[0];
        (c.costops, c.costarts, c.directed_yields)
    };
    assert_eq!(counts(&d), (0, 0, 0));
    let turn = d.slice_end[0];
    assert!(turn >= MS, "the leader's turn makes the skew: {turn}");
    d.now = turn;
    d.sched(cpu, StopReason::QuantumEnd);
    assert_eq!(d.run[0], Some(laggard), "co-stopped");
    assert_eq!(counts(&d), (1, 0, 0));
    // Level again, the laggard sends its IPI to the leader, which waits.
    d.now += turn;
    assert!(d.s.yield_to(laggard, leader, d.now).unwrap());
    d.sched(cpu, StopReason::Yielded);
    assert_eq!(d.run[0], Some(leader), "the directed yield");
    assert_eq!(counts(&d), (1, 0, 1));
}

fn bound(d: &mut Drv, id: EntityId, bound_us: u64, permille: u32) {
    let kicks =
        d.s.set_latency_bound(
            id,
            Some(crate::bound::LatencyBound {
                bound: bound_us * US,
                budget_permille: permille,
            }),
            d.now,
        )
        .unwrap();
    d.deliver(kicks);
}

#[test]
fn a_bounded_wake_preempts_a_hog_at_once_and_runs_at_the_bounded_level() {
    let mut d = Drv::new("1x1x1", |_| {});
    let hog = d.ts(1, None);
    let b = d.ts(2, None);
    bound(&mut d, b, 2000, 100);
    d.wake(hog);
    d.run_until(50 * MS);
    let w = d.wake(b).unwrap();
    assert!(w.kick, "a bounded wake kicks the CPU running a hog");
    assert_eq!(d.cpu_of(b), Some(0), "and runs at once");
    let s = d.stats(b);
    assert_eq!(s.effective_priority, crate::bound::BOUNDED_PRIORITY);
    assert_eq!((s.bounded_wakes, s.bound_misses), (1, 0));
    assert_eq!((s.latency_bound, s.bound_budget), (Some(2 * MS), 100));
    // Its slice ends with its budget: 200 us of tokens at 10 % (222 us
    // with what flows in meanwhile).
    assert!(
        d.slice_end[0] - d.now <= 223 * US,
        "{}",
        d.slice_end[0] - d.now
    );
    // Run on without blocking: spent, it is ordinary timeshare again.
    d.run_until(d.now + 20 * MS);
    assert!(d.stats(b).effective_priority < crate::bound::BOUNDED_PRIORITY);
}

#[test]
fn a_bounded_wake_that_reaches_a_cpu_after_its_bound_is_a_miss() {
    let mut d = Drv::new("1x1x1", |_| {});
    let a = d.ts(1, None);
    let b = d.ts(2, None);
    bound(&mut d, a, 100, 500);
    bound(&mut d, b, 100, 500);
    d.wake(a);
    assert_eq!(d.cpu_of(a), Some(0));
    let w = d.wake(b).unwrap();
    assert!(
        !w.kick,
        "a bounded runner is not preempted by a bounded wake"
    );
    d.now += MS;
    d.sched(CpuId(0), StopReason::Blocked);
    assert_eq!(d.cpu_of(b), Some(0));
    let (sa, sb) = (d.stats(a), d.stats(b));
    assert_eq!((sa.bounded_wakes, sa.bound_misses), (1, 0));
    assert_eq!((sb.bounded_wakes, sb.bound_misses), (1, 1), "1 ms > 100 us");
}

#[test]
fn a_wake_without_budget_is_neither_bounded_nor_a_miss() {
    let mut d = Drv::new("1x1x1", |_| {});
    let b = d.ts(2, None);
    // 10 % of 1 ms: 100 us of tokens. It runs 30 ms without blocking,
    // far past them (the bucket is in debt for ~270 ms).
    bound(&mut d, b, 1000, 100);
    d.wake(b);
    d.run_until(30 * MS);
    assert!(d.stats(b).effective_priority < crate::bound::BOUNDED_PRIORITY);
    d.sched(CpuId(0), StopReason::Blocked);
    d.now += 3 * MS;
    d.wake(b);
    let s = d.stats(b);
    assert_eq!(s.wakes, 2);
    assert_eq!(s.bounded_wakes, 1, "only the first wake had budget");
    assert_eq!(s.bound_misses, 0);
}

/// Sibling turns (`cosched.rs`): two vCPUs of a VM with `turns` on one CPU
/// (a VM wider than its CPUs) beside a hog. The one dispatched while its
/// sibling waits runs `sibling_turn`, then hands the CPU to the sibling,
/// and the two alternate until the slice the first was given is over;
/// then the hog runs, as it would have after that one slice. A turn's end
/// is no quantum end: no penalty step, the quantum's use kept.
#[test]
fn a_vm_wider_than_its_cpus_hands_one_slice_round_its_siblings() {
    let turn = 250 * US;
    let mut d = Drv::new("1x1x1", |c| {
        c.tunables.sibling_turn = turn;
        c.tunables.share_boost = false;
    });
    d.s.set_coschedule(VmId(0), crate::Coschedule::Turns, 0)
        .unwrap();
    let a = d.ts(0, None);
    let b = d.ts(0, None);
    let hog = d.ts(1, None);
    for id in [a, b, hog] {
        d.s.wake(id, d.now).unwrap();
    }
    d.sched(CpuId(0), StopReason::Idle);
    assert_eq!(d.run[0], Some(a));
    let slice = d.stats(a).quantum;
    assert!(slice > 4 * turn, "a slice of several turns: {slice}");
    assert_eq!(d.slice_end[0] - d.now, turn, "b waits: a runs one turn");
    let mut order = vec![a];
    while d.run[0] != Some(hog) {
        assert!(d.now <= slice, "the siblings share one slice ({slice} ns)");
        d.now = d.slice_end[0];
        d.sched(CpuId(0), StopReason::QuantumEnd);
        order.push(d.run[0].unwrap());
    }
    let turns = &order[..order.len() - 1];
    assert!(turns.len() >= 4, "{order:?}");
    for (i, t) in turns.iter().enumerate() {
        assert_eq!(
            *t,
            if i % 2 == 0 { a } else { b },
            "turns alternate: {order:?}"
        );
    }
    assert!(
        d.now >= slice - turn,
        "the hog waits no more than that slice"
    );
    let (sa, sb) = (d.stats(a), d.stats(b));
    assert_eq!(sa.penalty + sb.penalty, 0, "a turn's end steps no penalty");
    assert_eq!(sa.quantum_ends + sb.quantum_ends, 0);
    assert_eq!(sa.run_time + sb.run_time, d.now, "the slice was theirs");
    assert_eq!(d.s.snapshot(d.now).cpus[0].costops, turns.len() as u64 - 1);
}

/// Only a VM with `turns` wider than its CPUs takes sibling turns: on two
/// CPUs, such a VM of two vCPUs runs them side by side (its slice is not
/// cut while one waits), one of three cannot (it is); a `relaxed` VM of
/// three is not cut either.
#[test]
fn only_a_vm_wider_than_its_cpus_takes_sibling_turns() {
    let turn = 250 * US;
    for (mode, vcpus, cut) in [
        (crate::Coschedule::Turns, 2, false),
        (crate::Coschedule::Turns, 3, true),
        (crate::Coschedule::Relaxed, 3, false),
    ] {
        let mut d = Drv::new("1x2x1", |c| c.tunables.sibling_turn = turn);
        d.s.set_coschedule(VmId(0), mode, 0).unwrap();
        let hog = d.ts(1, Some("1"));
        d.wake(hog);
        assert_eq!(d.run[1], Some(hog));
        let siblings: Vec<_> = (0..vcpus).map(|_| d.ts(0, None)).collect();
        for id in &siblings {
            d.s.wake(*id, d.now).unwrap();
        }
        d.sched(CpuId(0), StopReason::Idle);
        assert!(siblings.contains(&d.run[0].unwrap()));
        let slice = d.slice_end[0] - d.now;
        assert_eq!(
            slice == turn,
            cut,
            "{mode}, {vcpus} vCPUs: a slice of {slice} ns"
        );
    }
}

/// Sibling spread: two siblings of a relaxed VM and two hogs on two CPUs.
/// The second sibling wakes while the first runs and the loads tie, where
/// its first CPU's core would stack it behind the first: spread, it goes
/// to the other core and stays there, so the pair can run side by side
/// (a barrier or a shootdown advances only then; when they do is the
/// other co-scheduling rules' part). Without co-scheduling it stacks
/// behind the first for a while.
#[test]
fn a_relaxed_vms_siblings_are_spread_over_the_cores() {
    for mode in [crate::Coschedule::Relaxed, crate::Coschedule::Off] {
        let mut d = Drv::new("1x2x1", |_| {});
        d.s.set_coschedule(VmId(0), mode, 0).unwrap();
        let a = d.ts(0, None);
        let h1 = d.ts(1, None);
        let b = d.ts(0, None);
        let h2 = d.ts(1, None);
        for id in [a, h1, b, h2] {
            d.wake(id);
        }
        let (mut on_a, mut on_b) = (Vec::new(), Vec::new());
        for ms in 1..=400 {
            d.run_until(ms * MS);
            on_a.extend(d.cpu_of(a));
            on_b.extend(d.cpu_of(b));
        }
        on_a.sort_unstable();
        on_a.dedup();
        on_b.sort_unstable();
        on_b.dedup();
        assert!(!on_a.is_empty() && !on_b.is_empty(), "{mode}: both ran");
        let shared = on_a.iter().any(|c| on_b.contains(c));
        if mode == crate::Coschedule::Relaxed {
            assert!(!shared, "spread: a ran on {on_a:?}, b on {on_b:?}");
        } else {
            assert!(
                shared,
                "stacked behind one CPU for a while: {on_a:?}, {on_b:?}"
            );
        }
    }
}

/// The core `id` runs on or waits in the queue of.
fn core_of_entity(d: &Drv, id: EntityId) -> Option<CoreId> {
    let mut g = d.s.slot(id).unwrap().lock();
    let e = g.entity.as_deref_mut()?;
    match e.state {
        RunState::Running(cpu) => Some(d.s.m.core_of(cpu)),
        RunState::Queued {
            queue: QueueRef::Core(c),
            ..
        } => Some(c),
        _ => None,
    }
}

/// A 3-vCPU relaxed VM and three 1-vCPU hogs on 2 CPUs, woken in turns
/// so that each core starts with some of each. Returns the scheduler's
/// driver, the VM's vCPUs and the hogs.
fn three_to_one_spread(gather: bool) -> (Drv, Vec<EntityId>, Vec<EntityId>) {
    let mut d = Drv::new("1x2x1", |c| c.tunables.gather_siblings = gather);
    d.s.set_coschedule(VmId(0), crate::Coschedule::Relaxed, 0)
        .unwrap();
    let mut vm = Vec::new();
    let mut hogs = Vec::new();
    for i in 0..3 {
        vm.push(d.ts(0, None));
        hogs.push(d.ts(1 + i, None));
    }
    // Two siblings take the two idle CPUs, the rest queue behind them.
    for id in [vm[0], vm[1], hogs[0], hogs[1], hogs[2], vm[2]] {
        d.wake(id);
    }
    (d, vm, hogs)
}

/// Sibling gathering (`gather.rs`): the VM whose vCPUs never halt ends
/// up on one core and the hogs on the other, by swaps that keep three
/// entities on each core, so every entity still gets a third of a CPU.
/// With the tunable off the VM stays spread as it started.
#[test]
fn a_wide_vm_that_does_not_halt_gathers_on_one_core_by_swaps() {
    let (mut d, vm, hogs) = three_to_one_spread(true);
    let cores = |d: &Drv, ids: &[EntityId]| {
        let mut c: Vec<_> = ids.iter().map(|i| core_of_entity(d, *i)).collect();
        c.dedup();
        c
    };
    assert!(cores(&d, &vm).len() > 1, "starts spread");
    d.run_until(300 * MS);
    let home = cores(&d, &vm);
    assert_eq!(home.len(), 1, "the VM gathered: {home:?}");
    let hog_home = cores(&d, &hogs);
    assert_eq!(hog_home.len(), 1, "the hogs too: {hog_home:?}");
    assert_ne!(home, hog_home);
    // Stays gathered, and every entity keeps its third of a CPU.
    let before: Vec<Nanos> = vm
        .iter()
        .chain(&hogs)
        .map(|i| d.stats(*i).run_time)
        .collect();
    d.run_until(900 * MS);
    assert_eq!(cores(&d, &vm), home);
    for (n, id) in vm.iter().chain(&hogs).enumerate() {
        let share = (d.stats(*id).run_time - before[n]) as f64 / (600 * MS) as f64;
        assert!(
            (0.28..=0.39).contains(&share),
            "entity {n} got {share:.3} of a CPU, want ~1/3"
        );
    }

    let gathers = |d: &Drv| {
        d.s.snapshot(d.now)
            .cpus
            .iter()
            .map(|c| c.gathers)
            .sum::<u64>()
    };
    assert!(gathers(&d) > 0, "the swaps are counted");

    let (mut off, vm, _) = three_to_one_spread(false);
    off.run_until(900 * MS);
    assert!(cores(&off, &vm).len() > 1, "off: stays spread");
    assert_eq!(gathers(&off), 0);
}

/// A wide VM one of whose vCPUs halts every few milliseconds (a request
/// server) is not gathered: it does not share its CPUs, and packed on one
/// core it would lose the CPUs it uses.
#[test]
fn a_wide_vm_that_halts_is_not_gathered() {
    let (mut d, vm, _) = three_to_one_spread(true);
    let start: Vec<_> = vm.iter().map(|i| core_of_entity(&d, *i)).collect();
    // Every 5 ms whichever of its vCPUs runs halts for 100 us.
    for step in 1..=180 {
        d.run_until(step * 5 * MS);
        for &v in &vm {
            if let Some(cpu) = d.cpu_of(v) {
                d.sched(CpuId(cpu), StopReason::Blocked);
                d.now += 100 * US;
                d.wake(v);
            }
        }
    }
    let mut cores: Vec<_> = vm.iter().map(|i| core_of_entity(&d, *i)).collect();
    cores.dedup();
    assert!(
        cores.len() > 1,
        "gathered although it halts: from {start:?} to {cores:?}"
    );
    assert!(d.s.snapshot(d.now).cpus.iter().all(|c| c.gathers == 0));
}

/// Where the cores hold different counts of ready entities (a 3-vCPU VM
/// and two hogs on 2 CPUs: 3 + 2), rotation moves entities round to even
/// their shares out, and gathering stands aside: the run is the one it
/// is with gathering off, entity for entity.
#[test]
fn gathering_stands_aside_where_the_cores_ready_counts_differ() {
    let run = |gather: bool| {
        let mut d = Drv::new("1x2x1", |c| c.tunables.gather_siblings = gather);
        d.s.set_coschedule(VmId(0), crate::Coschedule::Relaxed, 0)
            .unwrap();
        let ids: Vec<_> = [0, 0, 1, 2, 0].iter().map(|vm| d.ts(*vm, None)).collect();
        for id in &ids {
            d.wake(*id);
        }
        d.run_until(900 * MS);
        ids.iter().map(|i| d.stats(*i).run_time).collect::<Vec<_>>()
    };
    assert_eq!(run(true), run(false));
}
