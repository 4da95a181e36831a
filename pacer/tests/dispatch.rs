//! The dispatch mechanism a run gets: the default (ranked) where the
//! process may have real-time priorities, threads with a warning where it
//! may not and did not ask for ranked, a refusal where it asked for it.

mod common;

use common::{kvm_or_skip, vm_table, TempDir};

/// `pacer run FILE` with CAP_SYS_NICE out of the capability bounding set
/// (util-linux `setpriv`) and no real-time limit: exit code, stdout,
/// stderr; None where setpriv is missing.
fn pacer_without_realtime(args: &[&str]) -> Option<(i32, String, String)> {
    let out = std::process::Command::new("setpriv")
        .args([
            "--bounding-set",
            "-sys_nice",
            "--inh-caps",
            "-sys_nice",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_pacer"))
        .args(args)
        .output()
        .ok()?;
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn the_default_dispatch_falls_back_to_threads_without_realtime_priorities() {
    if !kvm_or_skip("the_default_dispatch_falls_back_to_threads_without_realtime_priorities") {
        return;
    }
    if vcpu_engine::ranked_dispatch_allowed().is_err() {
        println!("SKIPPED: this test process has no real-time priorities to take away");
        return;
    }
    let dir = TempDir::new("engine-no-rt");
    let cfg = dir.config(&format!(
        "[host]\npolicy = \"haiku\"\nlog_dir = \"logs\"\n\n{}",
        vm_table("v", "cpu duration_ms=200 report_ms=100")
    ));
    let json = dir.0.join("out.json");
    let cfg = cfg.to_str().unwrap();
    let Some((code, out, err)) =
        pacer_without_realtime(&["run", cfg, "--json", json.to_str().unwrap()])
    else {
        println!("SKIPPED: setpriv (util-linux) is not installed");
        return;
    };
    if err.contains("Operation not permitted") && !err.contains("default dispatch") {
        println!("SKIPPED: setpriv cannot drop capabilities here: {err}");
        return;
    }
    // Not asked for: the default runs, on threads, and says why.
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("the default dispatch, ranked, needs real-time priorities")
            && err.contains("dispatch = \"threads\""),
        "{err}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        doc["runs"][0]["config"]["host"]["dispatch"], "threads",
        "the run document says what ran: {doc}"
    );
    // So does the config kept in the run directory, slices included
    // (threads waits for slices to end: the configured table).
    let resolved = std::fs::read_to_string(dir.0.join("logs/latest/config.resolved.toml")).unwrap();
    assert!(resolved.contains("dispatch = \"threads\""), "{resolved}");
    assert_eq!(
        doc["runs"][0]["config"]["host"]["tunables"]["low_latency"]["base_quantum"],
        vcpu_sched::tunables::QuantumTable::LOW_LATENCY.base_quantum,
        "{doc}"
    );
    // Asked for: refused, nothing measured under another mechanism.
    let (code, out, err) = pacer_without_realtime(&["run", cfg, "--dispatch", "ranked"]).unwrap();
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("needs real-time priorities"), "{err}");
}
