//! The `pacer` binary's exit codes and messages.

mod common;

use common::{kvm_or_skip, vm_table, TempDir};
use std::process::Command;

fn pacer(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args(args)
        .output()
        .expect("run pacer");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn validate_good_config_exits_0() {
    let dir = TempDir::new("cli-good");
    let p = dir.config(&vm_table("ok", "cpu"));
    let (code, out, err) = pacer(&["validate", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("OK"), "{out}");
}

#[test]
fn bad_configs_exit_2_naming_field_and_line() {
    let dir = TempDir::new("cli-bad");
    let cases: &[(&str, String, &[&str])] = &[
        (
            "unknown field",
            vm_table("a", "cpu").replace("vcpus = 1", "vcpus = 1\nturbo = true"),
            &["turbo", ":4:1:"],
        ),
        (
            "bad policy",
            format!("[host]\npolicy = \"global_rr\"\n\n{}", vm_table("a", "cpu")),
            &[
                ":2:10:",
                "host.policy: expected one of \"haiku\", \"global-rr\", \"pinned\", \"host\"",
            ],
        ),
        (
            "priority the policy ignores",
            format!(
                "[host]\npolicy = \"pinned\"\n\n{}",
                vm_table("a", "cpu").replace("vcpus = 1", "vcpus = 1\npriority = 20")
            ),
            &["vm[0].priority", ":7:12:", "policy \"pinned\""],
        ),
        (
            "zero vcpus",
            vm_table("a", "cpu").replace("vcpus = 1", "vcpus = 0"),
            &["vm[0].vcpus", ":3:9:"],
        ),
        (
            "missing kernel",
            vm_table("a", "cpu").replace("@KERNEL@", "/nonexistent/k.elf"),
            &["vm[0].kernel", ":5:10:"],
        ),
        (
            "duplicate names",
            format!("{}{}", vm_table("a", "cpu"), vm_table("a", "cpu")),
            &["vm[1].name", "duplicate"],
        ),
        (
            "cpus outside host",
            format!(
                "[host]\ncpus = \"0\"\n\n{}",
                vm_table("a", "cpu").replace("vcpus = 1", "vcpus = 1\ncpus = \"0-1\"")
            ),
            &["vm[0].cpus", "outside the host CPU set"],
        ),
    ];
    for (what, text, needles) in cases {
        let p = dir.config(text);
        for cmd in ["validate", "run"] {
            let (code, out, err) = pacer(&[cmd, p.to_str().unwrap()]);
            assert_eq!(code, 2, "{what} ({cmd}): {out}{err}");
            for n in *needles {
                assert!(err.contains(n), "{what} ({cmd}): {n:?} not in {err}");
            }
        }
    }
    // A file that does not exist, and a usage error.
    assert_eq!(pacer(&["validate", "/nonexistent/pacer.toml"]).0, 2);
    assert_eq!(pacer(&["run"]).0, 2);
    assert_eq!(pacer(&["frobnicate"]).0, 2);
}

#[test]
fn run_exit_codes_0_and_1() {
    if !kvm_or_skip("run_exit_codes_0_and_1") {
        return;
    }
    let dir = TempDir::new("cli-run");
    let good = dir.config(&format!(
        "[host]\nlog_dir = \"logs\"\n\n{}",
        vm_table("good", "cpu duration_ms=200 report_ms=100")
    ));
    let json = dir.0.join("results.json");
    let (code, out, err) = pacer(&[
        "run",
        good.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("[good] OK: success"), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["vms"][0]["status"], "success");

    let bad = dir.config(&format!(
        "[host]\nlog_dir = \"logs\"\n\n{}",
        vm_table("bad", "triple_fault")
    ));
    let (code, out, err) = pacer(&["run", bad.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("[bad] FAILED: triple_fault"), "{out}");
    assert!(err.contains("[bad]"), "{err}");
}

#[test]
fn topology_host_and_spec() {
    let (code, out, err) = pacer(&["topology"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.trim().is_empty());
    let (code, out, err) = pacer(&["topology", "--spec", "2x22x2"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("88"), "{out}");
    let (code, _, err) = pacer(&["topology", "--spec", "banana"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn sigterm_stops_all_vms_and_still_reports() {
    if !kvm_or_skip("sigterm_stops_all_vms_and_still_reports") {
        return;
    }
    let dir = TempDir::new("cli-sigterm");
    let cfg = dir.config(&format!(
        "[host]\nlog_dir = \"logs\"\n\n{}{}",
        vm_table("long", "cpu duration_ms=20000 report_ms=100"),
        vm_table("sleepy", "idle")
    ));
    let json = dir.0.join("out/results.json");
    let child = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args([
            "run",
            cfg.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("[long] FAILED: stopped"), "{stdout}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["vms"][0]["status"], "stopped");
    assert!(!v["vms"][0]["records"].as_array().unwrap().is_empty());
}
