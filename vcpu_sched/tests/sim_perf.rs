//! Simulator speed on the host. Not part of the default run (host timing is
//! noisy and debug builds are slow); run it with
//!
//! ```text
//! cargo test --release -p vcpu_sched --test sim_perf -- --ignored --nocapture
//! ```
//!
//! The CLI (`examples/sim.rs`) prints the same numbers for any scenario.

#![cfg(feature = "sim")]

use vcpu_sched::sim::{self, Dist, GroupSpec, Sleep, Workload};
use vcpu_sched::{PolicyKind, SchedConfig};

fn workload(policy: PolicyKind) -> Workload {
    // 1x8x2 (16 CPUs): 32 hogs and 32 sleepers, short slices of work.
    Workload::new("perf", "1x8x2", 2000)
        .with_seed(3)
        .with_sched(SchedConfig {
            policy,
            ..SchedConfig::default()
        })
        .group(GroupSpec::new("hog", 32, Dist::uniform(50.0, 500.0)))
        .group(
            GroupSpec::new("sleeper", 32, Dist::exponential(30.0))
                .with_sleep(Sleep::For(Dist::exponential(100.0))),
        )
}

#[test]
#[ignore = "host-speed measurement: run with --release -- --ignored --nocapture"]
fn events_per_second_1x8x2_64_vcpus() {
    for policy in [
        PolicyKind::Haiku,
        PolicyKind::GlobalRoundRobin,
        PolicyKind::StaticPinning,
    ] {
        let r = match sim::run(&workload(policy)) {
            Ok(r) => r,
            Err(e) => {
                println!("{policy:?}: not available ({e})");
                continue;
            }
        };
        assert_eq!(r.violations.total(), 0, "{policy:?}: {:?}", r.violations);
        println!(
            "{:<10} {} events, {} scheduler calls, {:.1} ms host: {:.2} M events/s, {:.2} M scheduler calls/s",
            r.policy,
            r.events,
            r.sched_calls,
            r.host.wall_ns as f64 / 1e6,
            r.host.events_per_sec / 1e6,
            r.host.sched_calls_per_sec / 1e6
        );
        if !cfg!(debug_assertions) && policy == PolicyKind::Haiku {
            assert!(
                r.host.events_per_sec >= 1e6,
                "{:.0} events/s is below the 10^6 target",
                r.host.events_per_sec
            );
        }
    }
}
