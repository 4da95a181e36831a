//! `pacer bench --slurm` end to end on a one-node Slurm cluster that the
//! test starts and stops itself (`ci/slurm.sh`: slurm-wlm and munge from
//! Debian, installed if missing; SKIPPED where they cannot be installed or
//! started): two shards through a job array and the dependent merge job
//! give exactly the cells, with the same settings, of a run on this host.

mod common;

use common::{kvm_or_skip, pacer, TempDir};
use pacer::bench::settings;
use pacer::bench::store::read_jsonl;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/slurm.sh")
}

/// Stops the cluster's daemons (by their pid files) however the test ends.
struct Cluster(PathBuf);

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(&self.0)
            .status();
    }
}

/// A folder's cells: id -> settings digest.
fn cells(dir: &Path) -> BTreeMap<String, String> {
    let (records, _) = read_jsonl(&dir.join("results.jsonl")).unwrap();
    let ran = settings::read(dir).unwrap().unwrap();
    records
        .into_iter()
        .map(|r| {
            let d = ran[&r.id].digest.clone();
            (r.id, d)
        })
        .collect()
}

/// `JobState` of `scontrol show job ID` (and its `Reason`).
fn job_state(conf: &Path, id: &str) -> (String, String) {
    let out = Command::new("scontrol")
        .env("SLURM_CONF", conf)
        .args(["show", "job", id])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap_or("")
            .to_string()
    };
    (field("JobState="), field("Reason="))
}

/// What the jobs wrote, for a failure message.
fn job_logs(out: &Path) -> String {
    let mut s = String::new();
    if let Ok(dir) = std::fs::read_dir(out.join("slurm")) {
        for e in dir.flatten() {
            if e.path().extension().is_some_and(|x| x == "out") {
                s += &format!(
                    "--- {}\n{}\n",
                    e.path().display(),
                    std::fs::read_to_string(e.path()).unwrap_or_default()
                );
            }
        }
    }
    s
}

#[test]
fn two_shards_through_slurm_give_the_cells_of_a_single_host_run() {
    if !kvm_or_skip("two_shards_through_slurm_give_the_cells_of_a_single_host_run") {
        return;
    }
    let dir = TempDir::new("slurm");
    let state = dir.0.join("cluster");
    let _cluster = Cluster(state.clone());
    let started = Command::new("bash")
        .arg(script())
        .arg("start")
        .arg(&state)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&started.stdout).into_owned()
        + &String::from_utf8_lossy(&started.stderr);
    match started.status.code() {
        Some(0) => {}
        Some(3) => {
            let line = said
                .lines()
                .find(|l| l.starts_with("SKIPPED"))
                .unwrap_or("");
            println!(
                "{line} (two_shards_through_slurm_give_the_cells_of_a_single_host_run not run)"
            );
            return;
        }
        other => panic!("ci/slurm.sh start: {other:?}\n{said}"),
    }
    let conf = state.join("slurm.conf");
    let m = common::write_matrix(&dir.0, &common::one_vm_matrix("tiny-slurm", 2, 150));
    let (m_s, whole) = (m.to_str().unwrap(), dir.0.join("whole"));
    let (code, out, err) = pacer(&["bench", m_s, "--out-dir", whole.to_str().unwrap(), "-q"]);
    assert_eq!(code, 0, "{out}{err}");

    let lab = dir.0.join("lab");
    let submitted = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .env("SLURM_CONF", &conf)
        .args(["bench", m_s, "--slurm", "--shards", "2", "--out-dir"])
        .arg(&lab)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&submitted.stdout).into_owned()
        + &String::from_utf8_lossy(&submitted.stderr);
    assert_eq!(submitted.status.code(), Some(0), "{said}");
    let merge_id = said
        .split("merge job ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("no merge job id: {said}"))
        .to_string();

    // Wait for the merge job (the shards first, by its dependency).
    let start = Instant::now();
    loop {
        let (state, reason) = job_state(&conf, &merge_id);
        match state.as_str() {
            "COMPLETED" => break,
            "FAILED" | "CANCELLED" | "TIMEOUT" | "NODE_FAIL" | "OUT_OF_MEMORY" => {
                panic!("merge job {merge_id}: {state}\n{}", job_logs(&lab))
            }
            _ if reason == "DependencyNeverSatisfied" => {
                panic!("a shard failed: {reason}\n{}", job_logs(&lab))
            }
            _ => {}
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "merge job {merge_id} still {state} ({reason})\n{}",
            job_logs(&lab)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let (s1, s2) = (
        cells(&lab.join("shard-1-of-2")),
        cells(&lab.join("shard-2-of-2")),
    );
    assert_eq!((s1.len(), s2.len()), (2, 2), "{s1:?} {s2:?}");
    assert!(s1.keys().all(|k| !s2.contains_key(k)));
    let merged = lab.join("merged");
    assert_eq!(cells(&merged), cells(&whole));
    assert!(merged.join("report.html").is_file() && merged.join("summary.json").is_file());
}
