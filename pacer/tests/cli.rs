//! The `pacer` binary's exit codes and messages.

mod common;

use common::pacer;

use common::{kvm_or_skip, vm_table, TempDir};
use std::process::Command;

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
                "host.policy: expected one of \"haiku\", \"global-rr\", \"pinned\", \"eevdf\", \"host\"",
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
    assert_eq!(v["runs"][0]["vms"][0]["status"], "success");

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
fn compare_with_repeat_runs_rounds_and_gives_a_tested_verdict() {
    // --repeat needs --compare: a usage error, nothing started.
    assert_eq!(pacer(&["run", "x.toml", "--repeat", "3"]).0, 2);
    if !kvm_or_skip("compare_with_repeat_runs_rounds_and_gives_a_tested_verdict") {
        return;
    }
    let dir = TempDir::new("cli-repeat");
    let cfg = dir.config(&format!(
        "[host]\nlog_dir = \"logs\"\n\n{}",
        vm_table("w", "cpu duration_ms=150 report_ms=50")
    ));
    let json = dir.0.join("cmp.json");
    let (code, out, err) = pacer(&[
        "run",
        cfg.to_str().unwrap(),
        "--compare",
        "haiku,host",
        "--repeat",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("== policy host (round 2 of 2)"), "{out}");
    assert!(
        out.contains("(medians of 2 runs each, verdicts by a permutation test;"),
        "{out}"
    );
    // Two runs a policy can never reach p < 0.01 (p is 1/3, 2/3 or 1).
    assert!(out.contains("not significant (p="), "{out}");
    assert!(
        out.contains("repetitions a policy would be needed")
            || out.contains("within the 5 % noise"),
        "{out}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 4);
    assert_eq!(v["comparison"]["repetitions"], 2);
    let row = &v["comparison"]["rows"][0];
    let p = row["tests"][0]["test"]["p"].as_f64().unwrap();
    assert!(
        p > 0.33 && row["tests"][0]["test"]["significant"] == false,
        "{row}"
    );
}

#[test]
fn topology_host_and_spec() {
    let (code, out, err) = pacer(&["topology"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.trim().is_empty());
    let (code, out, err) = pacer(&["topology", "--topology", "2x22x2"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("88"), "{out}");
    let (code, _, err) = pacer(&["topology", "--topology", "banana"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn deprecated_spellings_still_work_and_say_what_replaced_them() {
    let (code, out, err) = pacer(&["topology", "--spec", "2x22x2"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("88"), "{out}");
    assert!(
        err.contains("pacer topology --spec is deprecated; use --topology"),
        "{err}"
    );
    let dir = TempDir::new("cli-deprecated");
    let (code, _, err) = pacer(&["man", "--out", dir.0.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(dir.0.join("pacer-run.1").exists());
    assert!(err.contains("use --out-dir DIR"), "{err}");
    // Both spellings at once: refused.
    let (code, _, _) = pacer(&["man", "--out", "a", "--out-dir", "b"]);
    assert_eq!(code, 2);
    // bench merge's old --out DIR: still its folder, with the warning
    // (the folder to merge is missing: bad input, nothing written).
    let merged = dir.0.join("merged");
    let (code, _, err) = pacer(&[
        "bench",
        "merge",
        dir.0.join("none").to_str().unwrap(),
        "--out",
        merged.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("pacer bench merge --out DIR is deprecated; use --out-dir DIR")
            && err.contains("not a directory"),
        "{err}"
    );
    assert!(!merged.exists());
    // ctl's old switch: still a switch (the socket is not there: exit 1).
    let sock = dir.0.join("none.sock");
    let (code, _, err) = pacer(&["ctl", sock.to_str().unwrap(), "--json", "ls"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("pacer ctl --json is deprecated; use --format json"),
        "{err}"
    );
    let (code, _, err) = pacer(&["ctl", sock.to_str().unwrap(), "--format", "jsn", "ls"]);
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
    // The output's directory must exist: a missing one is refused before any VM starts.
    std::fs::create_dir(dir.0.join("out")).unwrap();
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
    assert_eq!(v["runs"][0]["vms"][0]["status"], "stopped");
    assert!(!v["runs"][0]["vms"][0]["records"]
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn a_second_run_keeps_the_first_runs_results() {
    if !kvm_or_skip("a_second_run_keeps_the_first_runs_results") {
        return;
    }
    let dir = TempDir::new("cli-two-runs");
    let cfg = dir.config(&format!(
        "[host]\nlog_dir = \"logs\"\n\n{}",
        vm_table("keep", "cpu duration_ms=100 report_ms=50")
    ));
    let mut run_dirs = Vec::new();
    for _ in 0..2 {
        let (code, out, err) = pacer(&["run", cfg.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}{err}");
        // Where the files went is a status line: stderr, not the results.
        assert!(!out.contains("this run's logs"), "{out}");
        let line = err
            .lines()
            .find(|l| l.starts_with("pacer: this run's logs and results: "))
            .unwrap_or_else(|| panic!("no run directory in {err}"));
        let run_dir = std::path::PathBuf::from(line.rsplit(": ").next().unwrap());
        assert!(
            out.contains(&format!(
                "results: {}",
                run_dir.join("keep.results.jsonl").display()
            )),
            "{out}"
        );
        run_dirs.push(run_dir);
    }
    assert_ne!(run_dirs[0], run_dirs[1]);
    for d in &run_dirs {
        let text = std::fs::read_to_string(d.join("keep.results.jsonl")).unwrap();
        assert!(
            text.contains("\"type\":\"stop\""),
            "{}: {text}",
            d.display()
        );
        assert!(d.join("keep.console.log").exists());
    }
    let latest = std::fs::canonicalize(dir.0.join("logs/latest")).unwrap();
    assert_eq!(latest, std::fs::canonicalize(&run_dirs[1]).unwrap());
}

#[test]
fn unwritable_outputs_exit_2_before_any_vm_starts() {
    let dir = TempDir::new("cli-outputs");
    let cfg = dir.config(&format!(
        "[host]\nlog_dir = \"logs\"\n\n{}",
        vm_table("never", "cpu duration_ms=100")
    ));
    // --json naming a directory, or a path below a regular file.
    for json in [dir.0.clone(), cfg.join("results.json")] {
        let (code, out, err) = pacer(&[
            "run",
            cfg.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{out}{err}");
        assert!(err.contains("--json"), "{err}");
        assert!(!dir.0.join("logs").exists(), "a run started: {out}{err}");
    }
    // Where nothing can be created (root included, whom access(2) would
    // let), or in a directory that does not exist: refused before any VM
    // starts, the directory named and not created.
    let missing = dir.0.join("missing");
    for flag in ["--json", "--trace"] {
        for (path, needle) in [
            (
                "/proc/x.json".to_string(),
                "/proc/x.json cannot be created: ".to_string(),
            ),
            (
                missing.join("out").display().to_string(),
                format!("directory {} does not exist", missing.display()),
            ),
        ] {
            let (code, out, err) = pacer(&["run", cfg.to_str().unwrap(), flag, &path]);
            assert_eq!(code, 2, "{flag} {path}: {out}{err}");
            assert!(err.contains(flag) && err.contains(&needle), "{err}");
            assert!(!dir.0.join("logs").exists(), "a run started: {out}{err}");
            assert!(!missing.exists(), "{flag}: created {}", missing.display());
        }
    }
    // The simulator and the trace reader check theirs before working.
    let (code, _, err) = pacer(&[
        "sim",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../vcpu_sched/scenarios/01_overload_balance.toml"
        ),
        "--json",
        "/proc/x.json",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--json: /proc/x.json cannot be created"),
        "{err}"
    );
    let out = missing.join("t.json");
    let (code, _, err) = pacer(&[
        "trace",
        "export",
        "no-such.trace",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--out: ") && err.contains("does not exist"),
        "{err}"
    );
    // A log_dir below a regular file: refused by validate and run alike.
    let bad = dir.config(&format!(
        "[host]\nlog_dir = \"pacer.toml/logs\"\n\n{}",
        vm_table("never", "cpu duration_ms=100")
    ));
    for cmd in ["validate", "run"] {
        let (code, out, err) = pacer(&[cmd, bad.to_str().unwrap()]);
        assert_eq!(code, 2, "{cmd}: {out}{err}");
        assert!(err.contains("host.log_dir"), "{cmd}: {err}");
    }
}

#[test]
fn config_files_that_are_not_regular_files_are_refused() {
    let dir = TempDir::new("cli-fifo");
    let fifo = dir.0.join("fifo.toml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for (path, needle) in [
        (fifo.to_str().unwrap(), "a FIFO"),
        ("/dev/zero", "character device"),
    ] {
        for cmd in ["validate", "run"] {
            let (code, out, err) = pacer(&[cmd, path]);
            assert_eq!(code, 2, "{cmd} {path}: {out}{err}");
            assert!(err.contains(needle) && err.lines().count() == 1, "{err}");
        }
    }
}

#[test]
fn bad_workload_parameters_are_refused_at_validate() {
    let dir = TempDir::new("cli-params");
    for (workload, needle) in [
        (
            "cpu duration_ms=-5",
            "vm[0].workload.duration_ms: expected an integer from 1 to 86400000",
        ),
        ("cpu duration_ms=nan", "found \"nan\""),
        ("frobnicate", "vm[0].workload.name: expected one of cpu"),
    ] {
        let p = dir.config(&vm_table("p", workload));
        let (code, out, err) = pacer(&["validate", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{workload}: {out}{err}");
        assert!(err.contains(needle), "{workload}: {err}");
        assert!(err.contains(":6:12:"), "{workload}: {err}");
    }
}

#[test]
fn the_guests_reason_reaches_stderr() {
    if !kvm_or_skip("the_guests_reason_reaches_stderr") {
        return;
    }
    let dir = TempDir::new("cli-reason");
    // The workload named on the raw command line bypasses the config's
    // parameter check, as a guest of another kind would.
    let cfg = dir.config(&format!(
        "[host]\nlog_dir = \"logs\"\n\n{}",
        vm_table("odd", "cpu").replace("workload = \"cpu\"", "cmdline = \"workload=frobnicate\"")
    ));
    let (code, out, err) = pacer(&["run", cfg.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("[odd] the guest says: vcpu0 reported ERROR UNKNOWN_WORKLOAD"),
        "{err}"
    );
    assert!(
        err.contains("its console's last line: \"pacer-bench: unknown workload"),
        "{err}"
    );
    assert!(
        out.contains("guest exited with status 2; the guest says:"),
        "{out}"
    );
}

#[test]
fn quiet_runs_print_results_only_and_log_dir_overrides_the_files() {
    if !kvm_or_skip("quiet_runs_print_results_only_and_log_dir_overrides_the_files") {
        return;
    }
    let dir = TempDir::new("cli-quiet");
    let cfg = dir.config(&format!(
        "[host]\nlog_dir = \"logs\"\n\n{}",
        vm_table("q", "cpu duration_ms=100 report_ms=50")
    ));
    let elsewhere = dir.0.join("elsewhere");
    let (code, out, err) = pacer(&[
        "run",
        cfg.to_str().unwrap(),
        "-q",
        "--log-dir",
        elsewhere.to_str().unwrap(),
        "--policy",
        "haiku:power-saving",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("[q] OK: success"), "{out}");
    assert!(!err.contains("this run's logs"), "{err}");
    assert!(elsewhere.join("latest/q.results.jsonl").is_file());
    assert!(
        !dir.0.join("logs").exists(),
        "--log-dir replaces the file's log_dir"
    );
    let resolved_file = elsewhere.join("latest/config.resolved.toml");
    let resolved = std::fs::read_to_string(&resolved_file).unwrap();
    assert!(resolved.contains("mode = \"power-saving\""), "{resolved}");
    // A config file in its own right, read from the run directory.
    let (code, out, err) = pacer(&["validate", resolved_file.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}\n{resolved}");
}

#[test]
fn every_subcommand_documents_its_arguments_examples_and_exit_codes() {
    let (code, version, _) = pacer(&["--version"]);
    assert_eq!(code, 0);
    assert!(
        version.starts_with("pacer 0.") && version.contains("(commit "),
        "{version}"
    );
    let (_, root, _) = pacer(&["--help"]);
    let subs: Vec<&str> = root
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| *s != "help")
        .collect();
    assert!(subs.len() >= 9, "{root}");
    for sub in subs {
        let (code, help, err) = pacer(&[sub, "--help"]);
        assert_eq!(code, 0, "{sub}: {err}");
        assert!(
            help.contains("Examples:"),
            "{sub} --help has no examples:\n{help}"
        );
        assert!(
            help.contains("Exit codes:"),
            "{sub} --help has no exit codes:\n{help}"
        );
        assert!(help.contains("-q, --quiet"), "{sub}: {help}");
    }
    // Bad flags are bad input, with clap's suggestion.
    let (code, _, err) = pacer(&["run", "x.toml", "--polcy", "host"]);
    assert_eq!(code, 2);
    assert!(err.contains("--policy"), "{err}");
}

#[test]
fn completions_and_man_pages_come_from_the_same_definitions() {
    let (code, bash, err) = pacer(&["completions", "bash"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        bash.contains("pacer") && bash.contains("--compare"),
        "{bash}"
    );
    let dir = TempDir::new("cli-man");
    let (code, out, err) = pacer(&["man", "--out-dir", dir.0.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let run = std::fs::read_to_string(dir.0.join("pacer-run.1")).unwrap();
    assert!(
        run.contains("compare") && run.contains("Exit codes"),
        "{run}"
    );
    let (code, reference, _) = pacer(&["config-reference"]);
    assert_eq!(code, 0);
    assert!(
        reference.contains("`host.halt_poll_us`") && reference.contains("`layout[].under_test`")
    );
}

/// `pacer args...` must be refused as bad input (exit 2, before anything
/// starts) with `needle` in its message.
fn refused_with(args: &[&str], needle: &str) {
    let (code, out, err) = pacer(args);
    assert_eq!(code, 2, "{args:?}: {out}{err}");
    assert!(err.contains(needle), "{args:?}: {err}");
}

#[test]
fn near_misses_of_every_closed_set_are_named() {
    let dir = TempDir::new("cli-near-miss");
    let good = dir.config(&vm_table("a", "cpu duration_ms=100"));
    let good = good.to_str().unwrap().to_string();
    // Policies, modes and dispatch kinds on the command line.
    refused_with(
        &["run", &good, "--policy", "haku"],
        "did you mean \"haiku\"?",
    );
    refused_with(
        &["validate", &good, "--policy", "haiku:low-latncy"],
        "did you mean \"low-latency\"?",
    );
    refused_with(
        &["validate", &good, "--mode", "powr-saving"],
        "did you mean \"power-saving\"?",
    );
    refused_with(
        &["run", &good, "--dispatch", "rankd"],
        "did you mean \"ranked\"?",
    );
    refused_with(
        &["sim", "--policy", "global_rr"],
        "did you mean \"global-rr\"?",
    );
    // Subcommands, at the top and below.
    refused_with(&["rn"], "'run'");
    refused_with(&["trace", "sumary", "x"], "'summary'");
    refused_with(&["ctl", "/tmp/pacer-none.sock", "sts"], "'stats'");
    refused_with(&["ctl", "/tmp/pacer-none.sock", "stp", "web"], "'stop'");
    // Nothing near: no guess.
    let (code, _, err) = pacer(&["frobnicate"]);
    assert_eq!(code, 2);
    assert!(!err.contains("similar"), "{err}");
    // In a config file: the policy, the workload, its parameters.
    for (table, needle) in [
        (
            format!("[host]\npolicy = \"haku\"\n\n{}", vm_table("a", "cpu")),
            "host.policy: expected one of \"haiku\"",
        ),
        (
            format!("[host]\npolicy = \"haku\"\n\n{}", vm_table("a", "cpu")),
            "found the string \"haku\"; did you mean \"haiku\"?",
        ),
        (
            vm_table("a", "slep duration_ms=100"),
            "vm[0].workload.name: expected one of cpu, sleep",
        ),
        (
            vm_table("a", "slep duration_ms=100"),
            "found \"slep\"; did you mean \"sleep\"?",
        ),
        (
            vm_table("a", "sleep intervl_us=500"),
            "found the unknown key \"intervl_us\"; did you mean \"interval_us\"?",
        ),
        (
            vm_table("a", "cpu").replace(
                "workload = \"cpu\"",
                "workload = { name = \"slep\", intervl_us = 500 }",
            ),
            "did you mean \"sleep\"?",
        ),
    ] {
        let p = dir.config(&table);
        refused_with(&["validate", p.to_str().unwrap()], needle);
    }
}
