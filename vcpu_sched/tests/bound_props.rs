//! Latency bounds in the simulator (`vcpu_sched::bound`): on random
//! layouts the admission rule accepts, no wake with budget reaches a CPU
//! later than its bound; and layouts it refuses do miss when run anyway,
//! so the rule is not vacuous.

#![cfg(feature = "sim")]

use proptest::prelude::*;
use vcpu_sched::bound::{admit, worst_wait, AdmissionError, LatencyBound};
use vcpu_sched::sim::{self, Dist, GroupSpec, SimReport, Sleep, Workload};
use vcpu_sched::{CpuSet, Nanos, SchedClass};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One bounded group: vCPUs, sleep period (us), work per wake (us),
/// budget (per mille), and slack over the least admissible bound (%).
#[derive(Debug, Clone)]
struct Bounded {
    count: u32,
    period_us: u32,
    work_us: u32,
    budget: u32,
    slack_pct: u32,
}

/// The others: timeshare hogs (optionally pinned) and sleepers.
#[derive(Debug, Clone)]
struct Other {
    count: u32,
    priority: u8,
    hog: bool,
    pin: Option<u32>,
    period_us: u32,
}

#[derive(Debug, Clone)]
struct Layout {
    cpus: u32,
    kick_us: u32,
    bounded: Vec<Bounded>,
    others: Vec<Other>,
}

fn layout() -> impl Strategy<Value = Layout> {
    // The budget covers the group's demand (work per period) times 1 to
    // 2.5, so most of its wakes come with budget.
    let bounded = (1u32..5, 100u32..300, 2u32..20, 100u32..250, 0u32..50).prop_map(
        |(count, period_us, work_us, over_pct, slack_pct)| Bounded {
            count,
            period_us,
            work_us,
            budget: (1000 * work_us * over_pct / 100).div_ceil(period_us).max(1),
            slack_pct,
        },
    );
    let other = (
        1u32..5,
        1u8..99,
        any::<bool>(),
        prop::option::of(0u32..3),
        100u32..3000,
    )
        .prop_map(|(count, priority, hog, pin, period_us)| Other {
            count,
            priority,
            hog,
            pin,
            period_us,
        });
    (
        1u32..4,
        0u32..30,
        prop::collection::vec(bounded, 1..5),
        prop::collection::vec(other, 0..4),
    )
        .prop_map(|(cpus, kick_us, bounded, others)| Layout {
            cpus,
            kick_us,
            bounded,
            others,
        })
}

/// The workload of a layout, each bounded group's bound the least the
/// admission rule accepts plus its slack; `None` if its budgets do not fit.
fn workload(l: &Layout, duration_ms: u64, seed: u64) -> Option<Workload> {
    let kick = l.kick_us as Nanos * 1000;
    // Bounds first guessed from the budgets alone, then raised until every
    // one covers its worst-case wait (each raise grows the others' bursts,
    // so iterate; a fixed point exists when the others' budgets leave room).
    let mut bounds: Vec<LatencyBound> = l
        .bounded
        .iter()
        .flat_map(|b| {
            (0..b.count).map(|_| LatencyBound {
                bound: 100_000,
                budget_permille: b.budget,
            })
        })
        .collect();
    for _ in 0..64 {
        let mut i = 0;
        let mut changed = false;
        for b in &l.bounded {
            for _ in 0..b.count {
                let w = worst_wait(&bounds, i, kick);
                // No fixed point (equal bounds need the others' budgets
                // below half a CPU): not a layout to promise bounds on.
                if w > 1_000_000_000 {
                    return None;
                }
                let want = w + w * b.slack_pct as u64 / 100;
                if bounds[i].bound < want {
                    bounds[i].bound = want;
                    changed = true;
                }
                i += 1;
            }
        }
        if !changed {
            break;
        }
    }
    admit(&bounds, l.cpus as usize, kick).ok()?;
    let mut w = Workload::new("bound-props", &format!("1x{}x1", l.cpus), duration_ms)
        .with_seed(seed)
        .with_kick_latency_us(l.kick_us as f64)
        .with_warmup_ms(1);
    let mut i = 0;
    let mut vm = 0;
    for (gi, b) in l.bounded.iter().enumerate() {
        // One bound per group: the largest its members need.
        let bound = bounds[i..i + b.count as usize]
            .iter()
            .map(|x| x.bound)
            .max()
            .unwrap_or(0);
        i += b.count as usize;
        w = w.group(
            GroupSpec::new(
                &format!("bounded{gi}"),
                b.count,
                Dist::fixed(b.work_us as f64),
            )
            .with_vm(vm)
            .with_separate_vms(true)
            .with_latency_bound(bound.div_ceil(1000), b.budget)
            .with_sleep(Sleep::Period(b.period_us as Nanos * 1000)),
        );
        vm += b.count;
    }
    for (gi, o) in l.others.iter().enumerate() {
        let mut g = GroupSpec::new(&format!("other{gi}"), o.count, Dist::fixed(300.0))
            .with_vm(vm)
            .with_separate_vms(true)
            .with_priority(SchedClass::Timeshare, o.priority);
        if !o.hog {
            g = g
                .with_sleep(Sleep::Period(o.period_us as Nanos * 1000))
                .with_wake_cost(Dist::uniform(5.0, 60.0));
        }
        if let Some(p) = o.pin.filter(|p| *p < l.cpus) {
            g = g.with_affinity(CpuSet::parse_list(&p.to_string()).unwrap());
        }
        w = w.group(g);
        vm += o.count;
    }
    Some(w)
}

fn bound_counts(r: &SimReport) -> (u64, u64) {
    r.groups.iter().fold((0, 0), |(w, m), g| {
        (w + g.bounded_wakes, m + g.bound_misses)
    })
}

/// Random admitted layouts, `PACER_BOUND_CASES` of them (default 12) of
/// `PACER_BOUND_MS` simulated ms each (default 6000): no bounded wake
/// misses, and together they make at least `PACER_BOUND_WAKES` bounded
/// wakes (default 10^6; layouts the rule refuses are drawn again).
#[test]
fn no_admitted_bounded_wake_misses_its_bound() {
    use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
    let cases = env_or("PACER_BOUND_CASES", 12) as u32;
    let duration = env_or("PACER_BOUND_MS", 6000);
    let want = env_or("PACER_BOUND_WAKES", 1_000_000);
    let total = std::cell::Cell::new(0u64);
    // A fixed seed: the same layouts every run, so the wake count (and
    // the time the test takes) does not depend on luck.
    let mut runner = TestRunner::new(Config {
        cases,
        max_global_rejects: 100 * cases,
        rng_seed: RngSeed::Fixed(env_or("PACER_BOUND_SEED", 1)),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&(layout(), 1u64..1000), |(l, seed)| {
        let Some(w) = workload(&l, duration, seed) else {
            return Err(TestCaseError::reject("not admitted"));
        };
        prop_assert!(w.bound_admission().is_ok(), "{:?}", w.bound_admission());
        let r = sim::run(&w).unwrap();
        let (wakes, misses) = bound_counts(&r);
        total.set(total.get() + wakes);
        prop_assert_eq!(
            misses,
            0,
            "{} of {} bounded wakes missed\n{}",
            misses,
            wakes,
            r.to_table()
        );
        prop_assert_eq!(r.violations.total(), 0);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    eprintln!("bounded wakes checked: {}", total.get());
    assert!(
        total.get() >= want,
        "only {} bounded wakes over {cases} cases (want {want})",
        total.get()
    );
}

/// 4 bounded vCPUs on one CPU waking together, each bound 100 us with 24 %
/// of a CPU: the rule refuses it (the others' bursts and budgets make a
/// worst-case wait of ~314 us), and run anyway the last of each tick's
/// wakes waits for the three before it: misses.
#[test]
fn a_layout_refused_for_its_wait_misses_when_run() {
    let w = Workload::new("refused-wait", "1x1x1", 500)
        .with_kick_latency_us(16.0)
        .with_warmup_ms(1)
        .group(
            GroupSpec::new("bounded", 4, Dist::fixed(60.0))
                .with_separate_vms(true)
                .with_latency_bound(100, 240)
                .with_sleep(Sleep::Period(500_000)),
        );
    assert!(matches!(
        w.bound_admission(),
        Err(AdmissionError::BoundTooTight { .. })
    ));
    let (wakes, misses) = bound_counts(&sim::run(&w).unwrap());
    assert!(wakes > 1000, "{wakes}");
    assert!(
        misses > 0,
        "a refused layout run anyway misses ({wakes} wakes)"
    );
}

/// Bounded vCPUs asking more than the CPU: refused for the budgets, and
/// run anyway they miss.
#[test]
fn a_layout_refused_for_its_budgets_misses_when_run() {
    let w = Workload::new("refused-budgets", "1x1x1", 500)
        .with_warmup_ms(1)
        .group(
            GroupSpec::new("bounded", 3, Dist::fixed(400.0))
                .with_separate_vms(true)
                .with_latency_bound(300, 900)
                .with_sleep(Sleep::Period(500_000)),
        );
    assert!(matches!(
        w.bound_admission(),
        Err(AdmissionError::BudgetsOverflow { .. })
    ));
    let (wakes, misses) = bound_counts(&sim::run(&w).unwrap());
    assert!(wakes > 0);
    assert!(
        misses > 0,
        "a refused layout run anyway misses ({wakes} wakes)"
    );
}
