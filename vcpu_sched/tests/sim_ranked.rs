//! The simulator's model of Pacer's `ranked` dispatch (`sim/ranked.rs`):
//! the hypervisor runs a halted vCPU it wakes at once, whatever the
//! policy would decide, and the policy hears of it at the agent's looks.

#![cfg(feature = "sim")]

mod common;

use vcpu_sched::sim::{self, SimDispatch, SimReport, Workload};
use vcpu_sched::PolicyKind;

const US: u64 = 1_000;

/// One CPU: a hog at priority 30 and a sleeper at priority 1 waking every
/// 2 ms for 100 us (and, with `long`, a third vCPU that sleeps 20 ms and
/// then runs 30 ms). Every vCPU starts runnable, through the policy (the
/// sleeper's first run comes tens of ms late under haiku): the window
/// opens at 100 ms.
fn hog_and_sleeper(dispatch: SimDispatch, policy: PolicyKind, long: bool) -> Workload {
    let mut text = String::from(
        "topology = \"1x1x1\"\nseed = 1\nduration_ms = 500\nwarmup_ms = 100\n\n\
         [[group]]\nname = \"hog\"\ncount = 1\nvm = 0\npriority = 30\nburst = { dist = \"fixed\", us = 1000 }\n\n\
         [[group]]\nname = \"sleeper\"\ncount = 1\nvm = 1\npriority = 1\nburst = { dist = \"fixed\", us = 100 }\n\
         sleep = { period_us = 2000 }\n",
    );
    if long {
        text += "\n[[group]]\nname = \"long\"\ncount = 1\nvm = 2\nburst = { dist = \"fixed\", us = 30000 }\n\
                 sleep = { dist = \"fixed\", us = 20000 }\n";
    }
    let mut w = Workload::from_toml(&text).unwrap();
    w.dispatch = dispatch;
    w.sched.policy = policy;
    w
}

fn run(w: &Workload) -> SimReport {
    let r = sim::run(w).unwrap();
    println!("{}", r.to_table());
    assert_eq!(r.violations.total(), 0, "{}", r.to_table());
    r
}

fn hypervisor_wakes(r: &SimReport) -> u64 {
    r.cpus.iter().map(|c| c.hypervisor_wakes).sum()
}

fn found_running(r: &SimReport) -> u64 {
    r.cpus.iter().map(|c| c.found_running).sum()
}

#[test]
fn a_hypervisor_wake_runs_at_once_where_the_policy_would_queue_it() {
    for policy in [PolicyKind::Haiku, PolicyKind::GlobalRoundRobin] {
        let by_policy = run(&hog_and_sleeper(SimDispatch::Policy, policy, false));
        let ranked = run(&hog_and_sleeper(SimDispatch::Ranked, policy, false));
        let lat = |r: &SimReport| r.group("sleeper").unwrap().wake_latency;
        let (p, k) = (lat(&by_policy), lat(&ranked));
        // Through the policy the low-priority sleeper waits for the hog's
        // slices; the hypervisor runs it the moment it wakes.
        assert!(p.p50 >= 300 * US, "{policy:?} through the policy: {p:?}");
        assert_eq!(k.max, 0, "{policy:?} ranked: {k:?}");
        let bursts = ranked.group("sleeper").unwrap().throughput.bursts;
        assert_eq!(bursts, 200, "{policy:?}: one a tick over 400 ms");
        // (A wake at the window's end whose burst ends after it.)
        let woken = hypervisor_wakes(&ranked);
        assert!(
            (bursts..=bursts + 1).contains(&woken),
            "{policy:?}: {woken}"
        );
        assert_eq!(hypervisor_wakes(&by_policy), 0);
        // The hog gets what the sleeper leaves (its slices are given back).
        let hog = ranked.group("hog").unwrap().throughput.useful_cpus;
        assert!((0.93..=0.96).contains(&hog), "{policy:?}: hog {hog:.3}");
    }
}

#[test]
fn a_vcpu_awake_at_two_looks_is_handed_to_the_policy() {
    let r = run(&hog_and_sleeper(
        SimDispatch::Ranked,
        PolicyKind::Haiku,
        true,
    ));
    // The long vCPU's 30 ms runs outlast two 5 ms looks: each is handed
    // to the policy, and the hog and the long vCPU then take turns under
    // it.
    let long = r.group("long").unwrap();
    let handed = found_running(&r);
    assert!(
        handed >= long.throughput.bursts,
        "{handed} handed over, {} bursts",
        long.throughput.bursts
    );
    assert!(long.throughput.bursts >= 3, "{}", long.throughput.bursts);
    // Handed over after 5-10 ms at the real-time rank, it shares the CPU
    // with the hog for the rest of its run.
    let hog = r.group("hog").unwrap().throughput.useful_cpus;
    assert!(hog >= 0.2, "hog {hog:.3}");
    // The sleeper stays the hypervisor's: at once, but for the wakes
    // that come while the long vCPU runs at a rank above its own (a
    // wake that waits out two looks so is handed to the policy too).
    let sleeper = r.group("sleeper").unwrap();
    assert_eq!(sleeper.wake_latency.p50, 0, "{:?}", sleeper.wake_latency);
}

#[test]
fn the_host_kernels_model_has_no_ranks() {
    let a = run(&hog_and_sleeper(
        SimDispatch::Policy,
        PolicyKind::Eevdf,
        false,
    ));
    let b = run(&hog_and_sleeper(
        SimDispatch::Ranked,
        PolicyKind::Eevdf,
        false,
    ));
    assert_eq!(
        a.without_host_timing().to_json(),
        b.without_host_timing().to_json()
    );
    assert_eq!(hypervisor_wakes(&b), 0);
}

#[test]
fn ranked_is_read_from_the_workload_and_checked() {
    let w = hog_and_sleeper(SimDispatch::Policy, PolicyKind::Haiku, false);
    let text = toml::to_string(&w).unwrap();
    let ranked = text.replace("dispatch = \"policy\"", "dispatch = \"ranked\"");
    assert_eq!(
        Workload::from_toml(&ranked).unwrap().dispatch,
        SimDispatch::Ranked
    );
    let typo = text.replace("dispatch = \"policy\"", "dispatch = \"rankd\"");
    assert!(Workload::from_toml(&typo).is_err());
    let mut bad = w.clone();
    bad.dispatch = SimDispatch::Ranked;
    bad.spin_watch = true;
    let err = sim::run(&bad).unwrap_err().to_string();
    assert!(err.contains("spin_watch"), "{err}");
    let mut bad = w;
    bad.agent_look_us = 0.0;
    let err = sim::run(&bad).unwrap_err().to_string();
    assert!(err.contains("agent_look_us"), "{err}");
}

/// Every scenario of the repository under `ranked` (but those that model
/// the spin watch, a `threads` mechanism), with haiku and global-rr (and
/// haiku alone where a scenario uses haiku's weights, caps, reservations
/// or bounds), cut to 300 ms: the scheduler's answers stay clean with
/// wakes it does not hear of until the agent's looks.
#[test]
fn every_scenario_runs_clean_under_ranked() {
    let files = common::scenario_files();
    let mut woken = 0;
    for path in &files {
        let mut w = Workload::from_file(path.to_str().unwrap()).unwrap();
        if w.spin_watch {
            continue;
        }
        w.dispatch = SimDispatch::Ranked;
        w.duration_ms = w.duration_ms.min(300);
        w.warmup_ms = w.warmup_ms.min(w.duration_ms / 10);
        for policy in [PolicyKind::Haiku, PolicyKind::GlobalRoundRobin] {
            w.sched.policy = policy;
            let r = match sim::run(&w) {
                Ok(r) => r,
                // Weights, caps, reservations and bounds are haiku's.
                Err(e) if policy != PolicyKind::Haiku && e.to_string().contains("only haiku") => {
                    continue
                }
                Err(e) => panic!("{}: {policy:?}: {e}", path.display()),
            };
            assert_eq!(
                r.violations.total(),
                0,
                "{} under {policy:?}:\n{}",
                path.display(),
                r.to_table()
            );
            woken += hypervisor_wakes(&r);
        }
    }
    assert!(files.len() >= 24, "{} scenarios", files.len());
    assert!(woken > 10_000, "{woken} hypervisor wakes in all");
}

/// One CPU, two hogs under global-rr (a fixed quantum) and a vCPU the
/// hypervisor wakes every 500 us for 400 us: the hogs lose 80 % of each
/// turn to it and get the lost time back, but a turn ends at the latest
/// three quanta after its dispatch (the engine's give-back), so the
/// policy ends one every 3 quanta of wall time, not every 5.
#[test]
fn an_owner_held_off_gets_its_time_back_within_three_quanta() {
    let text = "topology = \"1x1x1\"\nseed = 1\nduration_ms = 500\nwarmup_ms = 100\n\
                dispatch = \"ranked\"\n\n[sched]\npolicy = \"global-rr\"\n\n\
                [[group]]\nname = \"hog\"\ncount = 2\nvm = 0\nseparate_vms = true\n\
                burst = { dist = \"fixed\", us = 1000 }\n\n\
                [[group]]\nname = \"rt\"\ncount = 1\nvm = 2\nburst = { dist = \"fixed\", us = 400 }\n\
                sleep = { period_us = 500 }\n";
    let w = Workload::from_toml(text).unwrap();
    let q = w.sched.tunables.low_latency.base_quantum;
    let r = run(&w);
    let window = r.window_ns;
    let turns = r.cpus[0].schedule_calls;
    let (three, five) = (window / (3 * q), window / (5 * q));
    assert!(
        turns * 10 >= three * 9 && turns * 10 <= three * 12,
        "{turns} turns ended in {window} ns, quantum {q} ns: {three} expected (no limit: {five})"
    );
    let rt = r.group("rt").unwrap().throughput.useful_cpus;
    assert!((0.79..=0.81).contains(&rt), "{rt:.3}");
}
