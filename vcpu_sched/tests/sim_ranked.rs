//! The simulator's model of Pacer's `ranked` dispatch (`sim/ranked.rs`):
//! the hypervisor runs a halted vCPU it wakes at once, whatever the
//! policy would decide, and the policy hears of it at the agent's looks.

#![cfg(feature = "sim")]

mod common;

use vcpu_sched::sim::{self, SimDispatch, SimReport, Workload};
use vcpu_sched::{Coschedule, PolicyKind};

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
    let mut bad = w.clone();
    bad.agent_look_us = 0.0;
    let err = sim::run(&bad).unwrap_err().to_string();
    assert!(err.contains("agent_look_us"), "{err}");
    let mut bad = w;
    bad.host_tick_us = 0.5;
    let err = sim::run(&bad).unwrap_err().to_string();
    assert!(err.contains("host_tick_us"), "{err}");
}

/// Every scenario of the repository under `ranked` (but those that model
/// the spin watch, a `threads` mechanism), cut to 300 ms.
fn ranked_scenarios() -> Vec<(std::path::PathBuf, Workload)> {
    common::scenario_files()
        .into_iter()
        .filter_map(|path| {
            let mut w = Workload::from_file(path.to_str().unwrap()).unwrap();
            if w.spin_watch {
                return None;
            }
            w.dispatch = SimDispatch::Ranked;
            w.duration_ms = w.duration_ms.min(300);
            w.warmup_ms = w.warmup_ms.min(w.duration_ms / 10);
            Some((path, w))
        })
        .collect()
}

/// Every scenario of the repository under `ranked` (but those that model
/// the spin watch, a `threads` mechanism), with haiku and global-rr (and
/// haiku alone where a scenario uses haiku's weights, caps, reservations
/// or bounds), cut to 300 ms: the scheduler's answers stay clean with
/// wakes it does not hear of until the agent's looks.
#[test]
fn every_scenario_runs_clean_under_ranked() {
    let files = ranked_scenarios();
    let mut woken = 0;
    for (path, mut w) in files.iter().cloned() {
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

/// A scenario of the repository (`vcpu_sched/scenarios/`).
fn scenario(file: &str) -> Workload {
    let path = format!("{}/scenarios/{file}", env!("CARGO_MANIFEST_DIR"));
    Workload::from_file(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The synchronising scenarios at 3:1 under `ranked`: a relaxed VM of
/// three vCPUs (a barrier's, a shootdown's initiator and two responders,
/// a spin lock's) on two CPUs beside three hog VMs, as the seeds rows
/// `sync-3to1` have them, and the group whose rate is the VM's.
fn synchronising_at_3_to_1(seed: u64) -> [(Workload, &'static str); 3] {
    [
        ("19_barrier_vs_hogs.toml", "barrier"),
        ("23_shootdown_vs_hogs.toml", "initiator"),
        ("20_spinlock_vs_hogs.toml", "lock"),
    ]
    .map(|(file, vm_group)| {
        let mut w = scenario(file);
        w.seed = seed;
        w.dispatch = SimDispatch::Ranked;
        for g in &mut w.groups {
            match g.name.as_str() {
                "hog" | "barrier" | "lock" => g.count = 3,
                "responder" => g.count = 2,
                _ => {}
            }
            if g.name != "hog" {
                g.coschedule = Some(Coschedule::Relaxed);
            }
        }
        (w, vm_group)
    })
}

fn with_policy(w: &Workload, policy: PolicyKind) -> SimReport {
    let mut w = w.clone();
    w.sched.policy = policy;
    run(&w)
}

fn rate(r: &SimReport, group: &str) -> f64 {
    r.group(group).unwrap().throughput.bursts_per_sec
}

fn useful(r: &SimReport, group: &str) -> f64 {
    r.group(group).unwrap().throughput.useful_cpus
}

fn cpu_sum(r: &SimReport, f: impl Fn(&vcpu_sched::sim::report::CpuReport) -> u64) -> u64 {
    r.cpus.iter().map(f).sum()
}

/// Sibling sharing under `ranked` (`sim/sibling_share.rs`, the engine's
/// `sibling_share.rs`) at 3:1: the relaxed VM, gathered on one CPU
/// (`policy/haiku/gather.rs`), shares the CPU it owns among its siblings,
/// the kernel's tick takes turns between them, and paced sibling turns
/// give a spinner's CPU to the sibling beside it. Against the kernel's
/// turns alone (a sibling turn of 10 s, so no look comes) the barrier VM
/// does >= 4x the rounds, the shootdown's initiator >= 1.4x the round
/// trips and the lock VM >= 1.03x the acquisitions; against the host
/// kernel's model (eevdf) >= 4x, >= 1.5x and no fewer, the order the
/// guests' sync-3to1 rows show (gathered on 2026-12-01: 6.1x / 5.2x /
/// 1.11x the host kernel). Seed 1: barrier 599 -> 8164 bursts/s (eevdf
/// 500), shootdown 100 -> 154 (eevdf 83), lock 23.9k -> 32.7k (eevdf
/// 29.2k; seeds 1-3 1.02-1.12x). The model undercounts a gathered VM's
/// shootdown and lock: spread it did 386 round trips/s and 1.04-1.19x
/// eevdf's acquisitions, where the guests gained 2.4x their round trips
/// by the gathering and kept their lock rate (docs/measurements/sync.md).
/// The hogs keep at least 98 % of their useful work (the siblings take
/// turns in the slices the VM was given). Seeds 1-3.
#[test]
fn at_3_to_1_a_relaxed_vm_shares_its_cpus_and_paces_its_turns() {
    for seed in 1..=3 {
        for (paced, vm_group) in synchronising_at_3_to_1(seed) {
            let mut kernel_only = paced.clone();
            kernel_only.sched.tunables.sibling_turn = 10_000_000_000;
            let (k, p) = (
                with_policy(&kernel_only, PolicyKind::Haiku),
                with_policy(&paced, PolicyKind::Haiku),
            );
            let host = with_policy(&paced, PolicyKind::Eevdf);
            let at = format!(
                "{vm_group} seed {seed}: {:.0} paced, {:.0} kernel turns only, {:.0} eevdf",
                rate(&p, vm_group),
                rate(&k, vm_group),
                rate(&host, vm_group)
            );
            let (over_kernel, over_host) = match vm_group {
                "barrier" => (4.0, 4.0),
                "initiator" => (1.4, 1.5),
                _ => (1.03, 1.0),
            };
            assert!(
                rate(&p, vm_group) >= over_kernel * rate(&k, vm_group),
                "{at}\n{}",
                p.to_table()
            );
            assert!(
                rate(&p, vm_group) >= over_host * rate(&host, vm_group),
                "{at}"
            );
            assert!(
                useful(&p, "hog") >= 0.98 * useful(&k, "hog"),
                "{at}: hogs {:.3} vs {:.3}",
                useful(&p, "hog"),
                useful(&k, "hog")
            );
            for r in [&k, &p] {
                assert!(cpu_sum(r, |c| c.placed_beside) > 0, "{at}: never shared");
            }
            assert_eq!(cpu_sum(&k, |c| c.spin_yields), 0, "{at}");
            assert!(cpu_sum(&p, |c| c.spin_yields) > 0, "{at}");
            if vm_group == "initiator" {
                // Its responders answer and give the CPU back.
                assert!(cpu_sum(&p, |c| c.turns_given_back) > 0, "{at}");
            }
            assert_eq!(cpu_sum(&host, |c| c.placed_beside), 0, "{at}");
            // Gathered (`policy/haiku/gather.rs`): the VM's vCPUs spent
            // the window on one CPU, the hogs on the other.
            let homes = |r: &SimReport, vm: u32| {
                let mut h: Vec<_> = r
                    .vcpus
                    .iter()
                    .filter(|v| v.vm == vm)
                    .map(|v| v.home_cpu)
                    .collect();
                h.dedup();
                h
            };
            let vm = p.vcpus.iter().find(|v| v.group == vm_group).unwrap().vm;
            let home = homes(&p, vm);
            assert_eq!(home.len(), 1, "{at}: not gathered: {home:?}");
            let mut hog_homes: Vec<_> = p
                .vcpus
                .iter()
                .filter(|v| v.group == "hog")
                .map(|v| v.home_cpu)
                .collect();
            hog_homes.dedup();
            assert!(!hog_homes.contains(&home[0]), "{at}: {hog_homes:?}");
            assert_eq!(cpu_sum(&host, |c| c.gathers), 0, "{at}");
        }
    }
}

/// Sibling sharing is for a co-scheduled VM wider than its CPUs that does
/// not halt: the request server of scenario 24 (3 vCPUs on 2 CPUs,
/// relaxed here) halts between requests and never shares, nor does the
/// barrier VM of scenario 19 as the file has it (2 vCPUs on 2 CPUs), nor
/// a wide VM that does not co-schedule; under `policy` nothing shares.
#[test]
fn only_a_wide_coscheduled_vm_that_does_not_halt_shares() {
    let mut server = scenario("24_server_vs_hogs.toml");
    server.dispatch = SimDispatch::Ranked;
    server.duration_ms = server.duration_ms.min(500);
    for g in server.groups.iter_mut().filter(|g| g.name != "hog") {
        g.coschedule = Some(Coschedule::Relaxed);
    }
    let mut fits = scenario("19_barrier_vs_hogs.toml");
    fits.dispatch = SimDispatch::Ranked;
    for g in fits.groups.iter_mut().filter(|g| g.name == "barrier") {
        g.coschedule = Some(Coschedule::Relaxed);
    }
    let (mut off, _) = synchronising_at_3_to_1(1)[0].clone();
    for g in &mut off.groups {
        g.coschedule = None;
    }
    let (mut threads, _) = synchronising_at_3_to_1(1)[0].clone();
    threads.dispatch = SimDispatch::Policy;
    for (w, what) in [
        (server, "a server that halts"),
        (fits, "a VM that fits its CPUs"),
        (off, "a wide VM that does not co-schedule"),
        (threads, "the policy's dispatch"),
    ] {
        let r = with_policy(&w, PolicyKind::Haiku);
        assert_eq!(cpu_sum(&r, |c| c.placed_beside), 0, "{what}");
        assert_eq!(cpu_sum(&r, |c| c.spin_yields), 0, "{what}");
    }
}

/// Every scenario of the repository under `ranked` with every group
/// co-scheduled (relaxed, then fixed turns), cut to 300 ms: sibling
/// sharing's hand-overs (a sibling's halt while it shares, the policy
/// dispatching a sibling that shares another CPU, real-time wakes on a
/// shared CPU) leave the scheduler's answers clean, and some VMs share.
#[test]
fn every_scenario_runs_clean_with_its_vms_sharing() {
    let mut placed = 0;
    for (path, mut w) in ranked_scenarios() {
        for mode in [Coschedule::Relaxed, Coschedule::Turns] {
            for g in &mut w.groups {
                g.coschedule = Some(mode);
            }
            let r = sim::run(&w).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(
                r.violations.total(),
                0,
                "{} with {mode:?}:\n{}",
                path.display(),
                r.to_table()
            );
            placed += cpu_sum(&r, |c| c.placed_beside);
        }
    }
    assert!(placed > 0, "no VM shared");
}

/// Two CPUs under `ranked`, a hog VM and a relaxed VM of three vCPUs
/// that run `burst_us` and then `then` (`sleep = { dist = "fixed", us =
/// 3000 }`: a halt; `yield = true`: a yield).
fn three_on_two(burst_us: u64, then: &str) -> Workload {
    let text = format!(
        "topology = \"1x2x1\"\nseed = 1\nduration_ms = 600\nwarmup_ms = 50\ndispatch = \"ranked\"\n\n\
         [[group]]\nname = \"smp\"\ncount = 3\nvm = 0\ncoschedule = \"relaxed\"\n\
         burst = {{ dist = \"fixed\", us = {burst_us} }}\n{then}\n\n\
         [[group]]\nname = \"hog\"\ncount = 1\nvm = 1\nburst = {{ dist = \"fixed\", us = 1000 }}\n"
    );
    Workload::from_toml(&text).unwrap()
}

/// A sibling that halts while it shares (30 ms runs, halts of 3 ms or
/// 0.3 ms): the VM shares no more, its runners keep their CPUs, and the
/// policy, which still has the halted sibling queued, hears of the halt
/// when it dispatches it (or the sibling is runnable again by then); a
/// sibling that yields while it shares gives the CPU to the thread beside
/// it. The answers stay clean and every vCPU runs.
#[test]
fn a_sibling_that_halts_or_yields_while_it_shares_leaves_the_policy_clean() {
    for then in [
        "sleep = { dist = \"fixed\", us = 3000 }",
        "sleep = { dist = \"fixed\", us = 300 }",
        "yield = true",
    ] {
        let burst = if then.starts_with("sleep") {
            30_000
        } else {
            50
        };
        let r = run(&three_on_two(burst, then));
        assert!(cpu_sum(&r, |c| c.placed_beside) > 0, "{then}: never shared");
        for v in r.vcpus.iter().filter(|v| v.group == "smp") {
            assert!(
                v.throughput.useful_ns > 0,
                "{then}: vCPU {} never ran",
                v.index
            );
        }
    }
}
