//! The embedding example (`examples/mini_vmm.rs`) as a user runs it: its
//! binary boots the bench guest in 2 VMs x 2 vCPUs on 2 host CPUs under
//! the haiku policy, and its table must show the scheduling events this
//! overcommit makes (wake-ups, preemptions, migrations) and the guests'
//! own figures. Needs /dev/kvm (SKIPPED without it).
//!
//! `cargo test` builds the examples before it runs the tests; with a
//! target filter (`--test mini_vmm`) it does not, so the test refuses
//! a missing binary or one older than the example's source.

use std::path::PathBuf;
use std::process::Command;

#[path = "../../vmm/tests/common/kvm_gate.rs"]
mod kvm_gate;

const EXAMPLE: &str = "mini_vmm";

/// The example's binary beside this test's (target/<profile>/examples).
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/<test>");
    let bin = profile_dir.join("examples").join(EXAMPLE);
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(format!("{EXAMPLE}.rs"));
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (modified(&bin), modified(&source)) {
        (Some(b), Some(s)) if b >= s => bin,
        _ => panic!(
            "{} is missing or older than {}: run `cargo test` without a target filter, \
             or `cargo build --example {EXAMPLE}` first",
            bin.display(),
            source.display()
        ),
    }
}

/// One row of the example's table.
#[derive(Debug)]
struct Row {
    vm: String,
    vcpu: u32,
    run_ms: u64,
    wakeups: u64,
    preemptions: u64,
    migrations: u64,
    guest: String,
}

fn rows(stdout: &str) -> Vec<Row> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with("vm "))
        .skip(1)
        .take_while(|l| !l.starts_with("total:"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert!(f.len() >= 9, "a short row: {l:?}");
            let n = |i: usize| -> u64 {
                f[i].parse()
                    .unwrap_or_else(|_| panic!("column {i} of {l:?}"))
            };
            Row {
                vm: f[0].to_string(),
                vcpu: n(1) as u32,
                run_ms: n(2),
                wakeups: n(4),
                preemptions: n(5),
                migrations: n(6),
                guest: f[8..].join(" "),
            }
        })
        .collect()
}

#[test]
fn the_example_shows_overcommit_scheduling_events() {
    let open = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map(drop)
        .map_err(|e| e.to_string());
    if !kvm_gate::kvm_gate_here("the mini_vmm example", open) {
        return;
    }
    let out = Command::new(example_binary())
        .args(["--duration-ms", "2000", "--cpus", "0-1"])
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "example failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    println!("{stdout}");
    let rows = rows(&stdout);
    let names: Vec<(&str, u32)> = rows.iter().map(|r| (r.vm.as_str(), r.vcpu)).collect();
    assert_eq!(
        names,
        [("sleep", 0), ("cpu", 0), ("cpu", 1), ("cpu", 2)],
        "{stdout}"
    );
    for r in &rows {
        // Every vCPU ran and was woken (vCPU 0 by the start, the others by
        // the guest's start-up IPIs, the sleepers by their timers).
        assert!(r.run_ms > 0 && r.wakeups > 0, "{r:?}");
    }
    let sum = |f: fn(&Row) -> u64| rows.iter().map(f).sum::<u64>();
    assert!(
        sum(|r| r.wakeups) > 100,
        "the sleeper wakes every ms: {stdout}"
    );
    assert!(sum(|r| r.preemptions) > 0, "{stdout}");
    // Three vCPUs that never stop do not divide over two CPUs: the
    // scheduler rotates the crowded CPU among them (every 100 ms, ~20 in
    // 2 s in the simulator; more with the sleeper's wakes).
    assert!(sum(|r| r.migrations) > 0, "{stdout}");
    // The guests' own figures came through the result port.
    for r in &rows[..1] {
        assert!(r.guest.contains(" wakes, latency p50 "), "{r:?}");
    }
    for r in &rows[1..] {
        assert!(r.guest.ends_with(" work units/s"), "{r:?}");
    }
    let total = stdout
        .lines()
        .find(|l| l.starts_with("total: "))
        .expect("a total line");
    assert_eq!(
        total,
        format!(
            "total: {} wakeups, {} preemptions, {} migrations",
            sum(|r| r.wakeups),
            sum(|r| r.preemptions),
            sum(|r| r.migrations)
        )
    );
}

#[test]
fn a_bad_option_is_one_line_and_status_2() {
    let out = Command::new(example_binary())
        .args(["--duration-ms", "0"])
        .output()
        .expect("run the example");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--duration-ms"), "{stderr}");
}
