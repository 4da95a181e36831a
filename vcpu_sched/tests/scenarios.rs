//! The simulation scenarios (the original seven, after Haiku, BFS, ULE,
//! Linux O(1) and hackbench, LLC spreading, a costly waker, and the
//! seeds matrix's rows with this KVM's wake costs), run by
//! the simulator from `vcpu_sched/scenarios/*.toml` under the default
//! (Haiku) policy, with the comparison policies where a comparison is
//! robust.
//!
//! Kept fast for the debug build (short simulated durations); the CLI
//! (`examples/sim.rs --compare`) runs the same files with every policy.

#![cfg(feature = "sim")]

mod common;

use vcpu_sched::sim::{self, SimReport, Workload};
use vcpu_sched::tunables::QuantumTable;
use vcpu_sched::{Coschedule, PolicyKind};

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

fn load(file: &str) -> Workload {
    let path = format!("{}/scenarios/{file}", env!("CARGO_MANIFEST_DIR"));
    Workload::from_file(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn run_with(w: &Workload, policy: PolicyKind) -> SimReport {
    let mut w = w.clone();
    w.sched.policy = policy;
    sim::run(&w).unwrap_or_else(|e| panic!("{} under {policy:?}: {e}", w.name))
}

/// Run a comparison policy if it is available (prints its table either way).
fn try_run_with(w: &Workload, policy: PolicyKind) -> Option<SimReport> {
    let mut w = w.clone();
    w.sched.policy = policy;
    match sim::run(&w) {
        Ok(r) => {
            println!("{}", r.to_table());
            Some(r)
        }
        Err(e) => {
            println!("{policy:?} not available: {e}");
            None
        }
    }
}

fn clean(r: &SimReport) {
    println!("{}", r.to_table());
    assert_eq!(
        r.violations.total(),
        0,
        "violations under {}:\n{}",
        r.policy,
        r.to_table()
    );
}

#[test]
fn s01_overload_balance_two_plus_two() {
    let w = load("01_overload_balance.toml");
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    let g = r.group("hog").unwrap();
    assert!(
        g.jain_fairness >= 0.95,
        "Jain {} (1 + 3 gives 0.75)\n{}",
        g.jain_fairness,
        r.to_table()
    );
    // Each core runs 2 hogs' worth: every hog gets half a CPU (+-10 %).
    let window = r.window_ns as f64;
    for v in &r.vcpus {
        let share = v.throughput.run_ns as f64 / window;
        assert!(
            (0.45..=0.55).contains(&share),
            "{} got {share:.3} of a CPU",
            v.index
        );
    }
    let total: f64 = g.per_core_cpus.iter().sum();
    for (core, c) in g.per_core_cpus.iter().enumerate() {
        assert!(
            (c / total - 0.5).abs() < 0.05,
            "core {core} ran {c:.3} of {total:.3}"
        );
    }
    assert!(r.total.useful_cpus > 1.99);
}

#[test]
fn s02_half_load_smt_one_hog_per_core_no_migration() {
    let w = load("02_half_load_smt.toml");
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    let topo = vcpu_sched::Topology::from_spec(&w.topology).unwrap();
    let homes: Vec<_> = r.vcpus.iter().map(|v| v.home_cpu.expect("ran")).collect();
    let cores: Vec<_> = homes.iter().map(|c| topo.cpu(*c).unwrap().core).collect();
    assert_ne!(
        cores[0],
        cores[1],
        "both hogs on one core: {homes:?}\n{}",
        r.to_table()
    );
    for v in &r.vcpus {
        assert!(
            v.home_share > 0.99,
            "hog {} moved: home share {}",
            v.index,
            v.home_share
        );
        assert_eq!(v.migrations, 0, "hog {} migrated after warm-up", v.index);
    }
    assert!(r.total.useful_cpus > 1.99);
}

/// Share of a CPU a group's members ran, in CPUs.
fn run_cpus(r: &SimReport, group: &str) -> f64 {
    r.group(group).unwrap().throughput.run_ns as f64 / r.window_ns as f64
}

/// The workload with the fair-share wake boost switched off: Haiku's
/// rules alone, the "before" of scenarios 9-13.
fn without_boost(w: &Workload) -> Workload {
    let mut w = w.clone();
    w.sched.tunables.share_boost = false;
    w
}

#[test]
fn s09_costly_waker_gets_its_fair_share_quickly() {
    // Too heavy to count as bursty, the waker got 5.5 % of the CPU and
    // p99 4.9 ms under Haiku's rules alone. Below its half at a wake it
    // preempts; above it, it waits until its share is due.
    let w = load("09_costly_waker.toml");
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    let (waker, hog) = (run_cpus(&r, "waker"), run_cpus(&r, "hog"));
    let table = r.to_table();
    assert!(waker >= 0.45, "waker ran {waker:.3} of the CPU\n{table}");
    assert!(hog >= 0.45, "hog ran {hog:.3} of the CPU\n{table}");
    let lat = r.group("waker").unwrap().wake_latency;
    assert!(lat.p99 <= MS, "waker p99 {} ns > 1 ms\n{table}", lat.p99);
    let before = run_with(&without_boost(&w), PolicyKind::Haiku);
    clean(&before);
    assert!(run_cpus(&before, "waker") < 0.1, "the failure this fixes");
    assert!(r.total.useful_cpus > 0.99);
}

#[test]
fn s10_costly_burst_vs_hog_halves_the_cpu() {
    // The bench guest's burst waker as this KVM runs it (scenario file):
    // it needs ~95 % of a CPU, so next to the hog each gets half.
    let w = load("10_costly_burst_vs_hog.toml");
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    let table = r.to_table();
    for g in ["waker", "hog"] {
        let share = run_cpus(&r, g);
        assert!(
            (0.45..=0.55).contains(&share),
            "{g} ran {share:.3}\n{table}"
        );
    }
    let lat = r.group("waker").unwrap().wake_latency;
    assert!(lat.p99 < 2_500_000, "waker p99 {} ns\n{table}", lat.p99);
    // Haiku's rules alone: 3 % useful work and 5 ms waits (as the guests
    // showed); the boost more than doubles the waker's useful work.
    let before = run_with(&without_boost(&w), PolicyKind::Haiku);
    clean(&before);
    let (now, then) = (
        r.group("waker").unwrap().throughput.useful_cpus,
        before.group("waker").unwrap().throughput.useful_cpus,
    );
    assert!(
        now >= 2.0 * then,
        "useful {now:.3} vs {then:.3} without the boost"
    );
}

#[test]
fn s10_the_boost_keeps_the_order_of_priorities() {
    // The entitlement weighs entities by base priority: a waker of
    // priority 5 next to a hog of 10 is entitled to a third, one of 20 to
    // two thirds (it asks ~95 %).
    let w = load("10_costly_burst_vs_hog.toml");
    let share_at = |p: u8| {
        let mut w = w.clone();
        let waker = w.groups.iter_mut().find(|g| g.name == "waker").unwrap();
        waker.priority = p;
        let r = run_with(&w, PolicyKind::Haiku);
        clean(&r);
        run_cpus(&r, "waker")
    };
    let (low, normal, high) = (share_at(5), share_at(10), share_at(20));
    assert!(
        low < normal && normal < high,
        "{low:.3} {normal:.3} {high:.3}"
    );
    assert!(
        (0.28..=0.38).contains(&low),
        "priority 5: {low:.3}, a third expected"
    );
    assert!(
        (0.56..=0.70).contains(&high),
        "priority 20: {high:.3}, two thirds expected"
    );
}

#[test]
fn s11_costly_noisy_neighbour_sleepers_within_a_base_quantum() {
    let w = load("11_costly_noisy_neighbour.toml");
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    let table = r.to_table();
    let lat = r.group("sleep").unwrap().wake_latency;
    assert!(lat.p99 <= MS, "sleepers p99 {} ns\n{table}", lat.p99);
    let left = 2.0 - run_cpus(&r, "sleep");
    let hogs = r.group("hog").unwrap().throughput.useful_cpus;
    assert!(
        hogs >= 0.9 * left,
        "hogs {hogs:.3} of {left:.3} left\n{table}"
    );
}

#[test]
fn s12_costly_pingpong_keeps_half_its_alone_rate_next_to_hogs() {
    let w = load("12_costly_pingpong_vs_hog.toml");
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    let mut alone = w.clone();
    alone.groups.retain(|g| g.name != "hog");
    let a = run_with(&alone, PolicyKind::Haiku);
    clean(&a);
    let (with, solo) = (
        r.group("pp").unwrap().throughput.bursts_per_sec,
        a.group("pp").unwrap().throughput.bursts_per_sec,
    );
    let table = r.to_table();
    assert!(with >= 0.5 * solo, "{with:.0} vs {solo:.0} alone\n{table}");
    // Haiku's rules alone: each wake waits out a hog's slice.
    let before = run_with(&without_boost(&w), PolicyKind::Haiku);
    let then = before.group("pp").unwrap().throughput.bursts_per_sec;
    assert!(then < 0.25 * solo, "the failure this fixes: {then:.0}");
}

#[test]
fn s13_costly_mixed_vs_hog_sleeper_within_a_base_quantum() {
    let w = load("13_costly_mixed_vs_hog.toml");
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    let lat = r.group("mix_sleep").unwrap().wake_latency;
    assert!(
        lat.p99 <= MS,
        "sleeper p99 {} ns\n{}",
        lat.p99,
        r.to_table()
    );
}

#[test]
fn s03_bursty_waker_gets_its_share_quickly() {
    let w = load("03_bursty_waker.toml");
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    let waker = r.group("waker").unwrap();
    assert!(
        waker.throughput.useful_cpus >= 0.25,
        "waker got {:.3} of the CPU\n{}",
        waker.throughput.useful_cpus,
        r.to_table()
    );
    assert!(
        waker.wake_latency.p99 < MS,
        "waker p99 wake latency {} ns >= 1 ms\n{}",
        waker.wake_latency.p99,
        r.to_table()
    );
    assert!(r.total.useful_cpus > 0.99);
    if let Some(rr) = try_run_with(&w, PolicyKind::GlobalRoundRobin) {
        let rr_waker = rr.group("waker").unwrap();
        assert!(
            rr_waker.wake_latency.p99 > waker.wake_latency.p99,
            "global_rr p99 {} vs haiku {}",
            rr_waker.wake_latency.p99,
            waker.wake_latency.p99
        );
    }
}

#[test]
fn s04_message_passing_scales_with_cpus() {
    let base = load("04_message_passing.toml");
    // Same offered load per CPU on 8, 16 and 88 CPUs.
    let variants = [("1x4x2", 1u32), ("1x8x2", 2), ("2x22x2", 11)];
    let mut per_cpu = Vec::new();
    for (topo, scale) in variants {
        let mut w = base.clone().scale_groups(scale);
        w.topology = topo.to_string();
        if scale > 2 {
            // Keep the debug build fast: the big machine simulates less time.
            w.duration_ms = 15;
        }
        let r = run_with(&w, PolicyKind::Haiku);
        clean(&r);
        let ncpu = r.cpus.len() as f64;
        let bursts = r.total.bursts_per_sec / ncpu;
        let calls_per_burst = r.sched_calls as f64 / (r.total.bursts as f64).max(1.0);
        let (kicks, wasted) = r.kicks();
        let rx = r.group("rx").unwrap();
        println!(
            "{topo}: {bursts:.0} bursts/s per CPU, {calls_per_burst:.2} scheduler calls per burst, \
             {kicks} kicks ({wasted} wasted), rx p99 wake {} ns",
            rx.wake_latency.p99
        );
        per_cpu.push((topo, bursts, r.total.useful_cpus / ncpu));
        if scale == 2 {
            // Static pinning cannot move work to idle CPUs: the idle-while-
            // waiting check must see it (and its throughput is lower).
            if let Some(sp) = try_run_with(&w, PolicyKind::StaticPinning) {
                assert!(sp.violations.idle_while_waiting > 0, "{:?}", sp.violations);
                assert!(
                    sp.policy_idle_while_waiting > 0,
                    "the policy's own counter agrees"
                );
                assert!(sp.total.bursts_per_sec < r.total.bursts_per_sec);
            }
        }
    }
    // Throughput scales with the CPUs: simulated work done per CPU stays flat
    // (a wake path that got slower with the LLC size would not show here in
    // simulated time, but lost wake-ups, idle CPUs and bad placement would).
    let (_, b0, u0) = per_cpu[0];
    for &(topo, b, u) in &per_cpu[1..] {
        assert!(
            b >= 0.9 * b0,
            "{topo}: {b:.0} bursts/s per CPU vs {b0:.0} on 1x4x2"
        );
        assert!(
            u >= 0.9 * u0,
            "{topo}: {u:.3} useful CPUs per CPU vs {u0:.3} on 1x4x2"
        );
    }
}

#[test]
fn s05_yield_storm_switches_often() {
    let w = load("05_yield_storm.toml");
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    for c in &r.cpus {
        println!(
            "cpu {}: {:.0} context switches/s",
            c.cpu.0, c.context_switches_per_sec
        );
        // A 5 us burst per yield: up to 200k switches/s; require 50k.
        assert!(c.context_switches_per_sec > 50_000.0, "{}", r.to_table());
    }
    assert!(r.group("yielder").unwrap().jain_fairness > 0.9);
}

#[test]
fn s06_mixed_priorities_all_progress_in_order() {
    let w = load("06_mixed_priorities.toml");
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    let run = |g: &str| r.group(g).unwrap().throughput.run_ns;
    let (p30, p20, p10, p5, p1) = (run("p30"), run("p20"), run("p10"), run("p5"), run("p1"));
    assert!(p1 > 0, "priority 1 starved\n{}", r.to_table());
    assert!(
        p30 > p20 && p20 > p10 && p10 > p5,
        "run times not ordered by priority: {p30} {p20} {p10} {p5}\n{}",
        r.to_table()
    );
    // P=5 and P=1 share the minimal priority 1 (clamp(P/5, 1, 25)), so
    // their effective priorities cycle the same way: a tie, within 5%.
    let (hi, lo) = (p5.max(p1) as f64, p5.min(p1) as f64);
    assert!(hi / lo < 1.05, "p5 {p5} vs p1 {p1}\n{}", r.to_table());
}

#[test]
fn s07_noisy_neighbour_latency_vm_within_one_quantum() {
    let w = load("07_noisy_neighbour.toml");
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    let lat = r.group("latency").unwrap();
    assert!(
        lat.wake_latency.p99 <= MS,
        "latency VM p99 wake {} ns > 1 ms\n{}",
        lat.wake_latency.p99,
        r.to_table()
    );
    // The CPU-bound VM still gets the rest of the machine.
    assert!(
        r.vm(2).unwrap().throughput.useful_cpus > 3.5,
        "{}",
        r.to_table()
    );
}

/// (LLC, package) of a vCPU's home CPU.
type Place = (u32, u32);

/// Scenario 8 with `solos` unrelated hogs on `topology`: where each solo
/// and each vCPU of the ping-pong pair ran.
fn llc_spread(topology: &str, solos: u32) -> (Vec<Place>, Vec<Place>) {
    let mut w = load("08_llc_spread.toml");
    w.topology = topology.to_string();
    w.groups[0].count = solos;
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    let topo = vcpu_sched::Topology::from_spec(topology).unwrap();
    let place = |group: &str| -> Vec<Place> {
        r.vcpus
            .iter()
            .filter(|v| v.group == group)
            .map(|v| {
                let cpu = v.home_cpu.expect("every vCPU ran");
                let info = topo.cpu(cpu).unwrap();
                (info.llc.0, info.package.0)
            })
            .collect()
    };
    (place("solo"), place("pair"))
}

fn distinct(v: impl Iterator<Item = u32>) -> usize {
    v.collect::<std::collections::BTreeSet<_>>().len()
}

#[test]
fn s08_llc_spread_one_cache_per_unrelated_vm_on_1x8x8x2() {
    // 4 -> 4 LLCs, 8 -> 8, 16 -> 8 LLCs with 2 each (Haiku alone packs
    // them into 1, 1 and 2 LLCs: it has no level between core and package).
    for (solos, llcs) in [(4, 4), (8, 8), (16, 8)] {
        let (solo, pair) = llc_spread("1x8x8x2", solos);
        assert_eq!(
            distinct(solo.iter().map(|p| p.0)),
            llcs,
            "{solos} solo VMs on {solo:?}"
        );
        let most = (0..8)
            .map(|l| solo.iter().filter(|p| p.0 == l).count())
            .max();
        assert_eq!(most, Some(solos.div_ceil(8) as usize), "{solo:?}");
        // The two vCPUs of one VM that wake each other share a cache.
        assert_eq!(pair[0].0, pair[1].0, "pair on {pair:?}");
    }
}

#[test]
fn s08_llc_spread_two_vms_on_two_sockets_of_2x22x2() {
    let (solo, pair) = llc_spread("2x22x2", 2);
    assert_eq!(distinct(solo.iter().map(|p| p.1)), 2, "{solo:?}");
    assert_eq!(pair[0].0, pair[1].0, "pair on {pair:?}");
}

/// Scenario 14: weights 100 / 200 / 400 on one contended CPU give CPU
/// time 1 : 2 : 4, each within +-5 % of its share, over several seeds;
/// the policies without weights refuse the file.
#[test]
fn s14_weights_one_two_four() {
    let w = load("14_weights.toml");
    for seed in 1..=3 {
        let mut w = w.clone();
        w.seed = seed;
        let r = run_with(&w, PolicyKind::Haiku);
        clean(&r);
        for (g, want) in [
            ("w100", 1.0 / 7.0),
            ("w200", 2.0 / 7.0),
            ("w400", 4.0 / 7.0),
        ] {
            let got = run_cpus(&r, g);
            assert!(
                (got / want - 1.0).abs() <= 0.05,
                "seed {seed}: {g} got {got:.4}, want {want:.4}\n{}",
                r.to_table()
            );
        }
    }
    for p in [
        PolicyKind::GlobalRoundRobin,
        PolicyKind::StaticPinning,
        PolicyKind::Eevdf,
    ] {
        let mut w = w.clone();
        w.sched.policy = p;
        let e = sim::run(&w).expect_err("a policy without weights must refuse them");
        assert!(e.to_string().contains("weights"), "{p:?}: {e}");
    }
}

/// Scenarios 15 and 16: a vCPU capped at 30 % of a CPU gets 30 % +- 2 %
/// alone on an idle host (the cap holds with nothing else to run) and
/// next to three hogs on two CPUs (where its fair share would be 50 %).
#[test]
fn s15_s16_a_cap_holds_alone_and_next_to_hogs() {
    for file in ["15_cap_alone.toml", "16_cap_vs_hogs.toml"] {
        for seed in 1..=3 {
            let mut w = load(file);
            w.seed = seed;
            let r = run_with(&w, PolicyKind::Haiku);
            clean(&r);
            let got = run_cpus(&r, "capped");
            assert!(
                (0.28..=0.32).contains(&got),
                "{file} seed {seed}: capped got {got:.4}\n{}",
                r.to_table()
            );
        }
    }
    // Without the cap the same vCPU takes what is free: a whole CPU alone.
    let mut w = load("15_cap_alone.toml");
    w.groups[0].cap = None;
    let r = run_with(&w, PolicyKind::Haiku);
    assert!(run_cpus(&r, "capped") > 0.99, "{}", r.to_table());
}

/// Scenario 17: a vCPU reserving 50 % of a CPU next to three hogs on one
/// CPU (fair share 25 %) gets at least 48 %; without the reservation it
/// gets its fair share.
#[test]
fn s17_a_reservation_is_granted_next_to_hogs() {
    for seed in 1..=3 {
        let mut w = load("17_reservation.toml");
        w.seed = seed;
        let r = run_with(&w, PolicyKind::Haiku);
        clean(&r);
        let got = run_cpus(&r, "reserved");
        assert!(
            got >= 0.48,
            "seed {seed}: reserved got {got:.4}\n{}",
            r.to_table()
        );
    }
    let mut w = load("17_reservation.toml");
    w.groups[0].reservation = None;
    let r = run_with(&w, PolicyKind::Haiku);
    let got = run_cpus(&r, "reserved");
    assert!((0.20..=0.30).contains(&got), "{got:.4}\n{}", r.to_table());
}

#[test]
fn same_seed_same_report_other_seed_differs() {
    let mut w = load("04_message_passing.toml");
    w.duration_ms = 10;
    w.warmup_ms = 1;
    let a = run_with(&w, PolicyKind::Haiku)
        .without_host_timing()
        .to_json();
    let b = run_with(&w, PolicyKind::Haiku)
        .without_host_timing()
        .to_json();
    assert_eq!(a, b, "same seed gave different reports");
    w.seed += 1;
    let c = run_with(&w, PolicyKind::Haiku)
        .without_host_timing()
        .to_json();
    assert_ne!(a, c, "a different seed gave the same report");
}

/// density-16 (8 sleepers and 8 hogs on 2 CPUs, the ranked dispatch's
/// wake costs): haiku keeps the sleepers' p99 and max within a base
/// quantum; round robin over 16 vCPUs makes them wait for the hogs'
/// slices, and the EEVDF model (the `host` column) for its 4 ms tick
/// when their lag runs out. The ranking the guests are held to.
#[test]
fn s21_density_16_keeps_the_sleepers_tail_under_haiku() {
    let w = load("21_density_16.toml");
    let haiku = run_with(&w, PolicyKind::Haiku);
    clean(&haiku);
    let rr = run_with(&w, PolicyKind::GlobalRoundRobin);
    clean(&rr);
    let eevdf = run_with(&w, PolicyKind::Eevdf);
    clean(&eevdf);
    let lat = |r: &SimReport| r.group("sleep").unwrap().wake_latency;
    let (h, g, e) = (lat(&haiku), lat(&rr), lat(&eevdf));
    assert!(h.p99 <= MS && h.max <= MS, "haiku sleepers {h:?}");
    assert!(
        h.p99 < g.p99 && g.p99 < e.p99,
        "p99 haiku {h:?} rr {g:?} eevdf {e:?}"
    );
    assert!(h.max * 17 <= e.max, "max haiku {h:?} eevdf {e:?}");
}

/// bounded-at-density (4 vCPUs bounded at 1 ms with 12 % of a CPU
/// among 4 sleepers and 8 hogs on 2 CPUs): admitted, no bounded wake
/// later than 1 ms over seeds 1-3, and their max below what the same
/// layout without the bound gives them; the hogs keep their CPU time
/// (the other sleepers pay: their wakes queue behind the bounded ones).
#[test]
fn s22_bounded_at_density_meets_every_bound() {
    for seed in 1..=3 {
        let mut w = load("22_bounded_at_density.toml");
        w.seed = seed;
        assert_eq!(w.bound_admission(), Ok(()));
        let bounded = run_with(&w, PolicyKind::Haiku);
        clean(&bounded);
        for g in &mut w.groups {
            g.latency_bound_us = None;
            g.bound_budget = None;
        }
        let plain = run_with(&w, PolicyKind::Haiku);
        clean(&plain);
        let (b, p) = (
            bounded.group("bounded").unwrap(),
            plain.group("bounded").unwrap(),
        );
        assert!(b.bounded_wakes >= 3900, "seed {seed}: {}", b.bounded_wakes);
        assert_eq!(b.bound_misses, 0, "seed {seed}");
        assert!(
            b.wake_latency.max <= 1000 * US,
            "seed {seed}: {:?}",
            b.wake_latency
        );
        assert!(
            b.wake_latency.max < p.wake_latency.max,
            "seed {seed}: bounded {:?} plain {:?}",
            b.wake_latency,
            p.wake_latency
        );
        let hogs = |r: &SimReport| r.group("hog").unwrap().throughput.useful_cpus;
        assert!(
            hogs(&bounded) >= 0.99 * hogs(&plain),
            "seed {seed}: hogs {} vs {}",
            hogs(&bounded),
            hogs(&plain)
        );
    }
}

#[test]
fn every_scenario_file_parses_and_round_trips() {
    let files = common::scenario_files();
    assert_eq!(files.len(), 24, "{files:?}");
    for f in files {
        let w = Workload::from_file(&f).unwrap();
        assert_eq!(Workload::from_toml(&w.to_toml()).unwrap(), w, "{f:?}");
        vcpu_sched::Topology::from_spec(&w.topology).unwrap();
    }
}

/// The EEVDF model stands in for the guests' `host` column where the
/// seeds matrix and the simulator can be compared (vcpu_sched/README.md,
/// "eevdf"): on bursty-vs-hog the host kernel splits the CPU about
/// evenly between the waker and the hog and the waker's p99 wake latency
/// is about one 4 ms tick (3.9 ms on the guests); four hogs on two CPUs
/// go 2 + 2; and the model never breaks the protocol's promises.
#[test]
fn s18_uneven_overload_rotates_the_crowded_core() {
    let w = load("18_uneven_overload.toml");
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    let g = r.group("hog").unwrap();
    assert!(
        g.jain_fairness >= 0.99,
        "Jain {} (3 + 2 for good gives 0.96)\n{}",
        g.jain_fairness,
        r.to_table()
    );
    let window = r.window_ns as f64;
    for v in &r.vcpus {
        let share = v.throughput.run_ns as f64 / window;
        assert!(
            (0.36..=0.44).contains(&share),
            "{} got {share:.3} of a CPU\n{}",
            v.index,
            r.to_table()
        );
    }
    // One rotation per period (100 ms) at most, each one move.
    let moves: u64 = r.vcpus.iter().map(|v| v.migrations).sum();
    let periods = r.window_ns / (100 * MS) + 1;
    assert!(moves <= periods, "{moves} moves in {periods} periods");
    // Rotation off: 3 + 2 for good.
    let mut off = w.clone();
    off.sched.tunables.rotate_after = 0;
    let r = run_with(&off, PolicyKind::Haiku);
    assert!(
        r.group("hog").unwrap().jain_fairness < 0.97,
        "{}",
        r.to_table()
    );
}

#[test]
fn eevdf_stands_in_for_the_host_kernel() {
    let r = run_with(&load("10_costly_burst_vs_hog.toml"), PolicyKind::Eevdf);
    clean(&r);
    let share = |g: &str| r.group(g).unwrap().throughput.run_ns as f64 / r.window_ns as f64;
    let (waker, hog) = (share("waker"), share("hog"));
    assert!(
        (0.45..=0.55).contains(&waker) && (0.45..=0.55).contains(&hog),
        "waker {waker:.3}, hog {hog:.3}\n{}",
        r.to_table()
    );
    let p99 = r.group("waker").unwrap().wake_latency.p99;
    assert!(
        (3 * MS..=5 * MS).contains(&p99),
        "waker p99 {p99} ns, expected about one tick\n{}",
        r.to_table()
    );
    let r = run_with(&load("01_overload_balance.toml"), PolicyKind::Eevdf);
    clean(&r);
    let hogs = r.group("hog").unwrap();
    assert!(hogs.jain_fairness >= 0.99, "{}", r.to_table());
    for f in [
        "03_bursty_waker.toml",
        "07_noisy_neighbour.toml",
        "11_costly_noisy_neighbour.toml",
        "12_costly_pingpong_vs_hog.toml",
        "13_costly_mixed_vs_hog.toml",
    ] {
        clean(&run_with(&load(f), PolicyKind::Eevdf));
    }
}

/// The share of a group's CPU time spent spinning for a sibling.
fn spin_share(r: &SimReport, group: &str) -> f64 {
    let t = r.group(group).unwrap().throughput;
    t.spin_ns as f64 / t.run_ns.max(1) as f64
}

#[test]
fn s19_barrier_siblings_spin_while_one_is_parked() {
    // Without co-scheduling Haiku runs the barrier VM's two vCPUs out
    // of phase with each other next to the hogs: the one that arrives
    // spins away its slice while its sibling waits behind a hog.
    let w = with_coschedule(&load("19_barrier_vs_hogs.toml"), Coschedule::Off);
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    let table = r.to_table();
    let share = spin_share(&r, "barrier");
    assert!(share >= 0.5, "barrier spin share {share:.3}\n{table}");
    // It still gets its fair half of the machine: the waste is in what
    // it does with it, which is what co-scheduling is for.
    let run = run_cpus(&r, "barrier");
    assert!((0.9..=1.1).contains(&run), "barrier ran {run:.3}\n{table}");
    // The host kernel's model happens to run the two in step here (its
    // ticks line up): the rows rank as the guests' barrier rows should
    // once the scheduler co-schedules.
    if let Some(e) = try_run_with(&w, PolicyKind::Eevdf) {
        clean(&e);
        assert!(
            spin_share(&e, "barrier") < share,
            "eevdf {:.3} vs haiku {share:.3}",
            spin_share(&e, "barrier")
        );
    }
}

/// Scenario 19 at 3:1 (three barrier vCPUs, three hog VMs), relaxed: a
/// round needs all three siblings, so the slice is how long one parked
/// behind a CPU-bound runner waits. With low latency's slices the barrier
/// VM does >= 2x the rounds it does with `QuantumTable::PREEMPTIVE_WAKES`,
/// the longer table the engine's `ranked` dispatch takes for CPU-bound
/// VMs, and the hogs keep >= 97 % of theirs: why a host with a
/// co-scheduled VM keeps low latency's slices under `ranked`
/// (`vcpu_engine::effective_tunables`; the guests' 3:1 row: 2.4x). Seed
/// 1: 601 against 167 barrier bursts/s.
#[test]
fn s19_at_3_to_1_a_coscheduled_barrier_needs_short_slices() {
    for seed in 1..=3 {
        let mut w = load("19_barrier_vs_hogs.toml");
        w.seed = seed;
        for g in &mut w.groups {
            g.count = 3;
            if g.name == "barrier" {
                g.coschedule = Some(Coschedule::Relaxed);
            }
        }
        let short = run_with(&w, PolicyKind::Haiku);
        let mut long = w.clone();
        long.sched.tunables.low_latency = QuantumTable::PREEMPTIVE_WAKES;
        let long = run_with(&long, PolicyKind::Haiku);
        clean(&short);
        clean(&long);
        let rounds = |r: &SimReport| r.group("barrier").unwrap().throughput.bursts_per_sec;
        assert!(
            rounds(&short) >= 2.0 * rounds(&long),
            "seed {seed}: {:.0} vs {:.0} bursts/s\n{}",
            rounds(&short),
            rounds(&long),
            short.to_table()
        );
        assert!(
            useful(&short, "hog") >= 0.97 * useful(&long, "hog"),
            "seed {seed}: hogs {:.3} vs {:.3}",
            useful(&short, "hog"),
            useful(&long, "hog")
        );
    }
}

/// Scenarios 19 and 23 at 3:1 (three vCPUs of one relaxed VM on two
/// CPUs beside three hog VMs) with `seed`, each with the group whose rate
/// is its VM's.
fn relaxed_at_3_to_1(seed: u64) -> [(Workload, &'static str); 2] {
    [
        ("19_barrier_vs_hogs.toml", "barrier"),
        ("23_shootdown_vs_hogs.toml", "initiator"),
    ]
    .map(|(file, vm_group)| {
        let mut w = load(file);
        w.seed = seed;
        for g in &mut w.groups {
            match g.name.as_str() {
                "hog" | "barrier" => g.count = 3,
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

/// Sibling turns (`coschedule = "turns"` against "relaxed") at 3:1:
/// three vCPUs of one VM on two CPUs beside three hog VMs, so
/// at most two siblings run at once and a round needs the third. With
/// turns (250 us, the default) the siblings go round within each slice: scenario 19's
/// barrier VM does >= 4x the rounds it does without turns and >= 4x
/// what the host kernel's model (eevdf) gives it, scenario 23's
/// initiator >= 2.5x the round trips with a p99 no longer; the hogs
/// keep at least 98 % of their useful work (the VM's siblings share the
/// slice one of them was given). Seed 1: barrier 601 -> 4607 bursts/s (eevdf
/// 500), hogs 0.997 -> 1.068 CPUs; shootdown 99 -> 276 round trips in
/// the window, p99 2.92 -> 1.96 ms (relaxed without turns did 41 before
/// a directed yield in a wide VM lent the rest of the slice). Seeds 1-3.
#[test]
fn at_3_to_1_sibling_turns_multiply_a_synchronising_vms_rounds() {
    let rate = |r: &SimReport, g: &str| r.group(g).unwrap().throughput.bursts_per_sec;
    for seed in 1..=3 {
        for (w, vm_group) in relaxed_at_3_to_1(seed) {
            let mut turns = w.clone();
            for g in turns.groups.iter_mut().filter(|g| g.name != "hog") {
                g.coschedule = Some(Coschedule::Turns);
            }
            let (off, on) = (
                run_with(&w, PolicyKind::Haiku),
                run_with(&turns, PolicyKind::Haiku),
            );
            clean(&off);
            clean(&on);
            let at = format!("{vm_group} seed {seed}");
            let gain = if vm_group == "barrier" { 4.0 } else { 2.5 };
            assert!(
                rate(&on, vm_group) >= gain * rate(&off, vm_group),
                "{at}: {:.0} vs {:.0} without turns\n{}",
                rate(&on, vm_group),
                rate(&off, vm_group),
                on.to_table()
            );
            assert!(
                useful(&on, "hog") >= 0.98 * useful(&off, "hog"),
                "{at}: hogs {:.3} vs {:.3}",
                useful(&on, "hog"),
                useful(&off, "hog")
            );
            assert!(on.cpus.iter().map(|c| c.costops).sum::<u64>() > 0, "{at}");
            if vm_group == "barrier" {
                if let Some(e) = try_run_with(&w, PolicyKind::Eevdf) {
                    assert!(
                        rate(&on, vm_group) >= 4.0 * rate(&e, vm_group),
                        "{at}: {:.0} vs eevdf {:.0}",
                        rate(&on, vm_group),
                        rate(&e, vm_group)
                    );
                }
            } else {
                let p99 = |r: &SimReport| r.group("initiator").unwrap().round_trip.unwrap().p99;
                assert!(p99(&on) <= p99(&off), "{at}\n{}", on.to_table());
            }
        }
    }
}

/// The spin watch at 3:1 (three vCPUs of a relaxed VM on two CPUs
/// beside three hog VMs), where a round needs the sibling that is parked.
/// A barrier's last arrival releases every waiter at once, unseen, so a
/// sibling parked while it spun may have work again: in a VM wider than
/// its CPUs a spinner with no likely holder parked and no sibling running
/// passes its turn to the next parked sibling (`pass_turn`: the rest of
/// the slice, lent). Scenario 19's barrier VM then does >= 1.8x the
/// rounds it does without the watch and >= 2x the host kernel's model
/// (seed 1: 600 -> 1149 bursts/s, eevdf 500). Scenario 23's initiator,
/// whose IPI to a parked responder passes its turn with or without the
/// watch: with it, a responder the IPI reached parked gives the
/// initiator, which waits parked, the rest of its next turn at its look
/// (it acknowledged, and does not spin), so the initiator goes on within
/// a slice of the VM's. It does >= 3x the round trips it does without
/// the watch and >= 10x eevdf's, with a p99 no longer than eevdf's (seed
/// 1: 3123 /s against 283 and 83; p99 0.2 against 2.9 and 3.98 ms; the
/// hogs at 1.00 CPUs). The hogs keep at least 98 % of their useful work.
/// Seeds 1-3.
#[test]
fn at_3_to_1_the_spin_watch_passes_a_slice_round_the_siblings() {
    let rate = |r: &SimReport, g: &str| r.group(g).unwrap().throughput.bursts_per_sec;
    for seed in 1..=3 {
        for (w, vm_group) in relaxed_at_3_to_1(seed) {
            let mut watched = w.clone();
            watched.spin_watch = true;
            let (without, with) = (
                run_with(&w, PolicyKind::Haiku),
                run_with(&watched, PolicyKind::Haiku),
            );
            clean(&with);
            let at = format!("{vm_group} seed {seed}");
            let why = format!(
                "{at}: {:.0} vs {:.0} without the watch\n{}",
                rate(&with, vm_group),
                rate(&without, vm_group),
                with.to_table()
            );
            assert!(
                useful(&with, "hog") >= 0.98 * useful(&without, "hog"),
                "{at}: hogs {:.3} vs {:.3}",
                useful(&with, "hog"),
                useful(&without, "hog")
            );
            assert!(
                with.cpus.iter().map(|c| c.directed_yields).sum::<u64>() > 0,
                "{why}"
            );
            let Some(host) = try_run_with(&w, PolicyKind::Eevdf) else {
                continue;
            };
            let over_host = rate(&with, vm_group) / rate(&host, vm_group);
            if vm_group == "barrier" {
                assert!(
                    rate(&with, vm_group) >= 1.8 * rate(&without, vm_group),
                    "{why}"
                );
                assert!(
                    over_host >= 2.0,
                    "{why}\neevdf {:.0}",
                    rate(&host, vm_group)
                );
            } else {
                let p99 = |r: &SimReport| r.group("initiator").unwrap().round_trip.unwrap().p99;
                assert!(
                    rate(&with, vm_group) >= 3.0 * rate(&without, vm_group),
                    "{why}"
                );
                assert!(
                    over_host >= 10.0,
                    "{why}\neevdf {:.0}",
                    rate(&host, vm_group)
                );
                assert!(p99(&with) <= p99(&host), "{why}");
            }
        }
    }
}

#[test]
fn s20_lock_holder_preemption_wastes_the_waiters_slices() {
    let w = with_coschedule(&load("20_spinlock_vs_hogs.toml"), Coschedule::Off);
    let r = run_with(&w, PolicyKind::Haiku);
    clean(&r);
    let table = r.to_table();
    // A parked holder leaves its running siblings spinning: a large part
    // of the lock VM's CPU time is spin, none of the hogs'.
    let share = spin_share(&r, "lock");
    assert!(share >= 0.3, "lock spin share {share:.3}\n{table}");
    assert_eq!(r.group("hog").unwrap().throughput.spin_ns, 0);
}

/// Scenario 23: a shootdown's initiator spins while a responder waits
/// parked behind the hog VM. With co-scheduling off, most of its CPU time
/// is spin and the round trips' tail is a hog's turn. Relaxed co-starts
/// the parked responder (and an IPI to a preempted sibling reaches the
/// scheduler as a directed yield): at 2:1 the round trips are >= 2x
/// off's with half its p99 at most, co-start kicks counted (seed 1: 3900
/// -> 12491 /s, p99 4.99 ms -> 0). At 3:1 off is bimodal over seeds (35
/// or 69 round trips in the window, p99 3.3 or 6.6 ms) and relaxed is
/// steady (99, 2.9 ms): the directed yield lends the responder the rest
/// of the initiator's slice (a VM wider than its CPUs), so its rate is
/// at least 1.2x off's best and its tail never worse (41, 3.3 ms before
/// the lending). The hogs keep >= 95 % of theirs. Seeds 1-5.
#[test]
fn s23_shootdown_round_trips_wait_for_a_parked_responder_unless_coscheduled() {
    let round_trips = |r: &SimReport| r.group("initiator").unwrap().throughput.bursts_per_sec;
    let p99 = |r: &SimReport| r.group("initiator").unwrap().round_trip.unwrap().p99;
    let counts = |r: &SimReport| -> u64 {
        r.cpus
            .iter()
            .map(|c| c.costops + c.costarts + c.directed_yields)
            .sum()
    };
    for (responders, hogs) in [(1, 2), (2, 3)] {
        for seed in 1..=5 {
            let mut w = load("23_shootdown_vs_hogs.toml");
            w.seed = seed;
            for g in &mut w.groups {
                match g.name.as_str() {
                    "responder" => g.count = responders,
                    "hog" => g.count = hogs,
                    _ => {}
                }
            }
            let off = run_with(&w, PolicyKind::Haiku);
            let mut relaxed = w.clone();
            for g in relaxed.groups.iter_mut().filter(|g| g.shootdown.is_some()) {
                g.coschedule = Some(Coschedule::Relaxed);
            }
            let on = run_with(&relaxed, PolicyKind::Haiku);
            clean(&off);
            clean(&on);
            let at = format!("{responders} responder(s), {hogs} hogs, seed {seed}");
            // Every burst of the initiator ends a round trip; one sent
            // before the window opened counts as a burst only.
            let rt = off.group("initiator").unwrap().round_trip.unwrap();
            let bursts = off.group("initiator").unwrap().throughput.bursts;
            assert!(
                rt.count.abs_diff(bursts) <= 1,
                "{at}: {} trips, {bursts} bursts",
                rt.count
            );
            assert!(
                spin_share(&off, "initiator") >= 0.5,
                "{at}\n{}",
                off.to_table()
            );
            assert!(p99(&off) >= MS, "{at}\n{}", off.to_table());
            assert_eq!(counts(&off), 0, "{at}");
            let (rate_on, rate_off) = (round_trips(&on), round_trips(&off));
            if hogs == 2 {
                assert!(
                    rate_on >= 2.0 * rate_off,
                    "{at}: {rate_on:.0} vs {rate_off:.0} off\n{}",
                    on.to_table()
                );
                assert!(2 * p99(&on) <= p99(&off), "{at}\n{}", on.to_table());
                assert!(counts(&on) > 0, "{at}\n{}", on.to_table());
            } else {
                assert!(p99(&on) <= p99(&off), "{at}\n{}", on.to_table());
                assert!(
                    rate_on >= 1.2 * rate_off,
                    "{at}: {rate_on:.0} vs {rate_off:.0} off"
                );
            }
            assert!(
                useful(&on, "hog") >= 0.95 * useful(&off, "hog"),
                "{at}: hogs {:.3} vs {:.3}",
                useful(&on, "hog"),
                useful(&off, "hog")
            );
        }
    }
}

/// The workload with every VM's co-scheduling set to `mode`.
/// server-vs-hogs (a request dispatcher and 2 workers at 80 % of the
/// row's load with this KVM's costs, next to 2 hogs): the model offers
/// requests at the rate, serves none faster than its work, and the
/// models of the host kernel and of a round robin serve the load - the
/// host kernel's with a p99 of milliseconds, behind the hogs' slices, as
/// the guests' host column has it (12-21 ms).
#[test]
fn s24_the_request_server_serves_the_offered_rate() {
    for seed in 1..=3 {
        let mut w = load("24_server_vs_hogs.toml");
        w.seed = seed;
        let window_s = (w.duration_ms - w.warmup_ms) as f64 / 1000.0;
        for policy in [PolicyKind::Eevdf, PolicyKind::GlobalRoundRobin] {
            let r = run_with(&w, policy);
            clean(&r);
            let at = format!("{policy:?}, seed {seed}");
            let q = r.group("dispatcher").unwrap().requests.clone().unwrap();
            let expected = 5950.0 * window_s;
            assert!(
                (q.offered as f64 - expected).abs() <= 0.05 * expected,
                "{at}: {} offered, {expected:.0} expected",
                q.offered
            );
            assert!(q.served <= q.offered, "{at}: {q:?}");
            assert!(
                q.served as f64 >= 0.98 * q.offered as f64,
                "{at}: {q:?}\n{}",
                r.to_table()
            );
            assert!(q.latency.p50 >= 100 * US, "{at}: faster than its work");
            assert!(r.group("worker").unwrap().requests.is_none());
            if policy == PolicyKind::Eevdf {
                assert!(q.latency.p99 >= 2 * MS, "{at}: {q:?}");
            }
        }
    }
}

/// The same under haiku: the dispatcher, which never sleeps while
/// requests queue, is penalised as CPU-bound, and every worker it wakes
/// is boosted (below its share); such a waker does not preempt a runner
/// owed more than itself (`Machine::must_preempt`), so the dispatcher
/// hands the requests out and haiku serves the 80 % load with the host
/// kernel's model's tail (seeds 1-5: p99 10.6-13.3 ms against 10.3-12.2;
/// before the rule two seeds of five served 0.72-0.75x of the rate with
/// a p99 of 0.46-0.5 s), the hogs keeping 0.87-0.95 of a CPU (eevdf:
/// 1.0); at 50 % its p99 is a quarter of eevdf's or less.
#[test]
fn s24_a_boosted_worker_does_not_starve_the_dispatcher_that_feeds_it() {
    let requests = |r: &SimReport| r.group("dispatcher").unwrap().requests.clone().unwrap();
    for (rate, seeds) in [(5950.0, 1..=5), (3700.0, 1..=3)] {
        for seed in seeds {
            let mut w = load("24_server_vs_hogs.toml");
            w.seed = seed;
            for g in &mut w.groups {
                if let Some(sim::ServerRole::Dispatcher { rate_per_s }) = &mut g.server {
                    *rate_per_s = rate;
                }
            }
            let haiku = run_with(&w, PolicyKind::Haiku);
            clean(&haiku);
            let eevdf = run_with(&w, PolicyKind::Eevdf);
            clean(&eevdf);
            let (h, e) = (requests(&haiku), requests(&eevdf));
            let at = format!("{rate}/s, seed {seed}: haiku {h:?}, eevdf {e:?}");
            assert!(
                h.served as f64 >= 0.98 * h.offered as f64,
                "{at}\n{}",
                haiku.to_table()
            );
            if rate > 5000.0 {
                assert!(2 * h.latency.p99 <= 3 * e.latency.p99, "{at}");
                assert!(run_cpus(&haiku, "hog") >= 0.8, "{at}\n{}", haiku.to_table());
            } else {
                assert!(2 * h.latency.p99 <= e.latency.p99, "{at}");
            }
        }
    }
}

fn with_coschedule(w: &Workload, mode: Coschedule) -> Workload {
    let mut w = w.clone();
    for g in &mut w.groups {
        g.coschedule = Some(mode);
    }
    w
}

fn useful(r: &SimReport, group: &str) -> f64 {
    r.group(group).unwrap().throughput.useful_cpus
}

/// Relaxed co-scheduling against none (the default), on the two
/// synchronising scenarios: the sibling parked behind a hog is
/// co-started next to the one that runs, so the barrier VM does at least
/// twice the useful work (seed 1: 0.16 -> 0.85 CPUs) and the lock VM at
/// least 4 % more (seeds 1-3: +20 %, +7 %), with less spinning; the hogs
/// keep >= 98 % of theirs. Three seeds each.
#[test]
fn relaxed_coscheduling_gains_on_barrier_and_spin_lock() {
    // Co-start kicks: the barrier's parked sibling is kicked in next to
    // the one that runs; the lock VM's kicks are rare (0-3 a run, seeds
    // 1-3): its gain is mostly the pick's preference for the sibling of
    // a running vCPU.
    for (file, group, gain, kicks) in [
        ("19_barrier_vs_hogs.toml", "barrier", 2.0, true),
        ("20_spinlock_vs_hogs.toml", "lock", 1.04, false),
    ] {
        for seed in 1..=3 {
            let mut w = load(file);
            w.seed = seed;
            let off = run_with(&with_coschedule(&w, Coschedule::Off), PolicyKind::Haiku);
            let on = run_with(&with_coschedule(&w, Coschedule::Relaxed), PolicyKind::Haiku);
            clean(&on);
            let (u_on, u_off) = (useful(&on, group), useful(&off, group));
            assert!(
                u_on >= gain * u_off,
                "{file} seed {seed}: {group} useful {u_on:.3} vs {u_off:.3} off\n{}",
                on.to_table()
            );
            assert!(
                spin_share(&on, group) < spin_share(&off, group),
                "{file} seed {seed}"
            );
            assert!(
                useful(&on, "hog") >= 0.98 * useful(&off, "hog"),
                "{file} seed {seed}: hogs {:.3} vs {:.3}",
                useful(&on, "hog"),
                useful(&off, "hog")
            );
            // The co-starts show in the per-CPU report (the window's part
            // of the policy's counts); off, nothing co-schedules.
            let costarts = |r: &SimReport| r.cpus.iter().map(|c| c.costarts).sum::<u64>();
            assert!(
                !kicks || costarts(&on) > 0,
                "{file} seed {seed}\n{}",
                on.to_table()
            );
            for (c, whole) in on.cpus.iter().zip(&on.snapshot.cpus) {
                assert!(c.costarts <= whole.costarts && c.costops <= whole.costops);
                assert!(c.directed_yields <= whole.directed_yields);
            }
            let co = |r: &SimReport| {
                r.cpus
                    .iter()
                    .map(|c| c.costops + c.costarts + c.directed_yields)
                    .sum::<u64>()
            };
            assert_eq!(co(&off), 0, "{file} seed {seed}");
        }
    }
    // Unset means off: the scenario files as shipped show the waste.
    let w = load("19_barrier_vs_hogs.toml");
    let dflt = run_with(&w, PolicyKind::Haiku);
    let off = run_with(&with_coschedule(&w, Coschedule::Off), PolicyKind::Haiku);
    assert_eq!(dflt.vcpus, off.vcpus);
}

/// The simulator's CPU rows count co-scheduling's decisions in the
/// measured window: the warm-up changes no decision, so the policy's
/// whole-run counts are the same with and without it, and its rows count
/// all of them without a warm-up and fewer with one (those before the
/// window left out).
#[test]
fn cpu_rows_count_the_windows_co_starts() {
    let mut w = with_coschedule(&load("19_barrier_vs_hogs.toml"), Coschedule::Relaxed);
    w.duration_ms = 200;
    let counts = |r: &SimReport| -> (u64, u64) {
        (
            r.cpus.iter().map(|c| c.costarts).sum(),
            r.snapshot.cpus.iter().map(|c| c.costarts).sum(),
        )
    };
    w.warmup_ms = 0;
    let (rows, whole) = counts(&run_with(&w, PolicyKind::Haiku));
    assert!(whole > 0);
    assert_eq!(rows, whole, "no warm-up: the rows count everything");
    w.warmup_ms = 100;
    let (rows, whole_too) = counts(&run_with(&w, PolicyKind::Haiku));
    assert_eq!(whole_too, whole, "the warm-up changes no decision");
    // (Seed 1: the 3 co-starts of the 200 ms all come in the first 100.)
    assert!(rows < whole, "{rows} of {whole} in the window");
}

/// Independent vCPUs (CPU-bound VMs of one and of several vCPUs, none
/// waiting for another) get the same totals with co-scheduling on.
#[test]
fn relaxed_coscheduling_leaves_independent_vcpus_alone() {
    for file in [
        "01_overload_balance.toml",
        "02_half_load_smt.toml",
        "18_uneven_overload.toml",
        "21_density_16.toml",
    ] {
        let w = load(file);
        let off = run_with(&with_coschedule(&w, Coschedule::Off), PolicyKind::Haiku);
        let on = run_with(&with_coschedule(&w, Coschedule::Relaxed), PolicyKind::Haiku);
        clean(&on);
        for (a, b) in on.groups.iter().zip(&off.groups) {
            let (x, y) = (a.throughput.useful_cpus, b.throughput.useful_cpus);
            assert!(
                (x - y).abs() <= 0.01 * y.max(1e-9),
                "{file} {}: useful {x:.4} on vs {y:.4} off",
                a.name
            );
        }
    }
}

/// The workload with relaxed co-scheduling's co-start on.
fn with_co_start(w: &Workload) -> Workload {
    let mut w = w.clone();
    w.sched.tunables.co_start = true;
    w
}

#[test]
fn s20_co_start_runs_a_parked_holder_next_to_its_spinning_siblings() {
    let w = with_coschedule(&load("20_spinlock_vs_hogs.toml"), Coschedule::Off);
    let (off, on) = (
        run_with(&w, PolicyKind::Haiku),
        run_with(&with_co_start(&w), PolicyKind::Haiku),
    );
    clean(&on);
    let useful = |r: &SimReport, g: &str| r.group(g).unwrap().throughput.useful_cpus;
    // A queued sibling of a running vCPU goes first at a pick: the lock
    // VM does >= 10 % more useful work and spins less; the hogs keep
    // >= 98 % of theirs.
    assert!(
        useful(&on, "lock") >= 1.1 * useful(&off, "lock"),
        "lock useful {:.3} vs {:.3} without co-start\n{}",
        useful(&on, "lock"),
        useful(&off, "lock"),
        on.to_table()
    );
    assert!(spin_share(&on, "lock") < spin_share(&off, "lock"));
    assert!(
        useful(&on, "hog") >= 0.98 * useful(&off, "hog"),
        "hogs {:.3} vs {:.3}",
        useful(&on, "hog"),
        useful(&off, "hog")
    );
}

#[test]
fn co_start_changes_nothing_for_independent_vcpus() {
    // Hogs that never wait for each other (here one VM's): co-start
    // never takes a VM the CPU just ran, so the same run, bit for bit.
    for file in ["01_overload_balance.toml", "18_uneven_overload.toml"] {
        let w = with_coschedule(&load(file), Coschedule::Off);
        let (off, on) = (
            run_with(&w, PolicyKind::Haiku),
            run_with(&with_co_start(&w), PolicyKind::Haiku),
        );
        clean(&on);
        assert_eq!(on.vcpus, off.vcpus, "{file}");
    }
}

/// The engine's spin watch in the model (`Workload::spin_watch`):
/// scenario 20's lock VM at 3:1 with relaxed co-scheduling, with and
/// without the watch, seeds 1-3. A sibling found spinning while a holder
/// waits parked hands that holder its CPU: the lock VM does >= 1.3x the
/// useful work with less spin (seed 1: 0.629 -> 0.978 CPUs), its hogs
/// keep >= 80 % of theirs, and it beats the host kernel's model (eevdf)
/// as on the guests (docs/measurements/sync.md). The hogs kept 0.93-1.01
/// until the watch chose the holder that stopped last and a directed
/// yield stopped counting the yielder's own level as its floor: now
/// 1.00 / 0.92 / 0.81 (seed 3: the lock VM's vCPUs 1.19 CPUs, useful and
/// spin). The guests do not show it: at the seeds' 3:1 spin lock their
/// hogs' units rose with the same changes (168k -> 175k a second, then
/// 183k -> 185k, interleaved runs), the VM's vCPUs ran 2085 ms against
/// the hogs' 2021 ms; the model's looks are free and its lock bursts
/// shorter, and where its share goes is not yet explained.
#[test]
fn s20_the_spin_watch_hands_a_spinners_cpu_to_the_parked_holder() {
    for seed in 1..=3 {
        let mut w = with_coschedule(&load("20_spinlock_vs_hogs.toml"), Coschedule::Relaxed);
        w.seed = seed;
        let without = run_with(&w, PolicyKind::Haiku);
        w.spin_watch = true;
        let with = run_with(&w, PolicyKind::Haiku);
        let host = run_with(&w, PolicyKind::Eevdf);
        clean(&with);
        let yields = |r: &SimReport| r.cpus.iter().map(|c| c.directed_yields).sum::<u64>();
        let (u_with, u_without) = (useful(&with, "lock"), useful(&without, "lock"));
        let why = format!(
            "seed {seed}: lock useful {u_without:.3} -> {u_with:.3} (eevdf {:.3}), spin {:.3} -> {:.3}, \
             hogs {:.3} -> {:.3}, directed yields {} -> {}\n{}",
            useful(&host, "lock"),
            spin_share(&without, "lock"),
            spin_share(&with, "lock"),
            useful(&without, "hog"),
            useful(&with, "hog"),
            yields(&without),
            yields(&with),
            with.to_table()
        );
        assert!(u_with >= 1.3 * u_without, "{why}");
        assert!(
            spin_share(&with, "lock") < spin_share(&without, "lock"),
            "{why}"
        );
        assert!(
            useful(&with, "hog") >= 0.8 * useful(&without, "hog"),
            "{why}"
        );
        assert!(u_with > useful(&host, "lock"), "{why}");
        assert!(yields(&with) > 0 && yields(&without) == 0, "{why}");
    }
}
