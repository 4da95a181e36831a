//! `pacer bench` and `pacer sim` end to end, through the binary: matrix
//! validation errors, resume after SIGKILL mid-cell, failing and timed-out
//! cells that do not stop the run, the report and its plots; and `pacer
//! sim` printing what the simulator's front end (the `sim` example's code)
//! prints.

mod common;

use common::{kvm_or_skip, TempDir};
use pacer::bench::store::{read_csv, read_jsonl, CellStatus};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn pacer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pacer"))
}

use common::write_matrix as matrix;

/// A resumable matrix: 3 repetitions of 400 ms cells.
fn resumable() -> String {
    common::one_vm_matrix("resume", 3, 400)
}

#[test]
fn bad_matrix_is_bad_input_with_position() {
    let dir = TempDir::new("bench-bad");
    let m = matrix(
        &dir.0,
        &resumable().replace("kind = \"cpu\"", "kind = \"cpu\"\nreport_us = 5"),
    );
    let out = pacer()
        .args(["bench"])
        .arg(&m)
        .arg("--out-dir")
        .arg(dir.0.join("out"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("m.toml:14:1: workload[0].report_us: unknown parameter of a cpu workload"),
        "{err}"
    );
    assert!(!dir.0.join("out").exists(), "nothing is run or written");
}

#[test]
fn only_filters_pick_cells_for_dry_run_run_and_resume() {
    let dir = TempDir::new("bench-only");
    let m = matrix(
        &dir.0,
        &resumable()
            .replace("repetitions = 3", "repetitions = 2")
            .replace("duration_ms = 400", "duration_ms = 100"),
    );
    let out = dir.0.join("out");
    let bench = |extra: &[&str]| {
        let o = pacer()
            .arg("bench")
            .arg(&m)
            .arg("--out-dir")
            .arg(&out)
            .args(extra)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // Unknown names: refused before anything, with a near miss.
    let (code, _, err) = bench(&["--only-policy", "haku", "--dry-run"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--only-policy: matrix \"resume\" has no \"haku\" (it has host, haiku); did you mean \"haiku\"?"),
        "{err}"
    );
    let (code, _, err) = bench(&["--only-layout", "oen"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("did you mean \"one\"?"), "{err}");
    assert!(!out.exists(), "nothing is run or written");
    // The dry run lists the selected cells only.
    let (code, listed, err) = bench(&["--only-policy", "haiku", "--dry-run"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        listed.contains("one/cpu/haiku/r1") && listed.contains("one/cpu/haiku/r2"),
        "{listed}"
    );
    assert!(!listed.contains("/host/"), "{listed}");
    if !kvm_or_skip("only_filters_pick_cells_for_dry_run_run_and_resume") {
        return;
    }
    let ids = || -> Vec<String> {
        let (recs, _) = read_jsonl(&out.join("results.jsonl")).unwrap();
        let mut v: Vec<String> = recs.iter().map(|r| r.id.clone()).collect();
        v.sort();
        v
    };
    let (code, o, err) = bench(&["--only-policy", "haiku"]);
    assert_eq!(code, Some(0), "{o}{err}");
    assert_eq!(ids(), ["one/cpu/haiku/r1", "one/cpu/haiku/r2"]);
    // --resume with another filter runs the rest, keeping what is there.
    let (code, o, err) = bench(&["--resume", "--only-policy", "host"]);
    assert_eq!(code, Some(0), "{o}{err}");
    assert_eq!(
        ids(),
        [
            "one/cpu/haiku/r1",
            "one/cpu/haiku/r2",
            "one/cpu/host/r1",
            "one/cpu/host/r2"
        ]
    );
}

#[test]
fn resume_after_sigkill_keeps_finished_cells() {
    if !kvm_or_skip("resume_after_sigkill_keeps_finished_cells") {
        return;
    }
    let dir = TempDir::new("bench-kill");
    let m = matrix(&dir.0, &resumable());
    let out = dir.0.join("out");
    let jsonl = out.join("results.jsonl");
    let mut child = pacer()
        .arg("bench")
        .arg(&m)
        .arg("--out-dir")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for two finished cells, then kill in the middle of the third.
    let start = Instant::now();
    loop {
        let n = std::fs::read_to_string(&jsonl)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if n >= 2 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "no progress");
        assert!(
            child.try_wait().unwrap().is_none(),
            "pacer bench ended early"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(150));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = std::fs::read(&jsonl).unwrap();
    assert!(before.ends_with(b"\n"), "no torn line after SIGKILL");
    let (kept, _) = read_jsonl(&jsonl).unwrap();
    assert!((2..6).contains(&kept.len()), "{} cells", kept.len());

    // Without --resume the directory is refused.
    let refused = pacer()
        .arg("bench")
        .arg(&m)
        .arg("--out-dir")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--resume"));

    let resumed = pacer()
        .arg("bench")
        .arg(&m)
        .arg("--out-dir")
        .arg(&out)
        .arg("--resume")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{stdout}{stderr}");
    // Progress is status: stderr.
    assert!(
        stderr.contains(&format!("{} already done (resumed)", kept.len())),
        "{stderr}"
    );
    let after = std::fs::read(&jsonl).unwrap();
    assert!(
        after.starts_with(&before),
        "finished cells kept as they were"
    );
    let (all, _) = read_jsonl(&jsonl).unwrap();
    let mut ids: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6, "every cell exactly once: {ids:?}");
    assert!(all.iter().all(|r| r.status == CellStatus::Ok), "{all:?}");
    assert_eq!(read_csv(&out.join("results.csv")).unwrap(), all);
}

#[test]
fn failing_cells_do_not_stop_the_run_and_the_report_is_written() {
    if !kvm_or_skip("failing_cells_do_not_stop_the_run_and_the_report_is_written") {
        return;
    }
    let dir = TempDir::new("bench-fail");
    let m = matrix(
        &dir.0,
        r#"
[matrix]
name = "failing"
kernel = "@KERNEL@"
host_cpus = "0-1"
repetitions = 1
cell_timeout_s = 3
baseline = ["host", "qemu"]
policies = ["host", "haiku", "qemu"]
memory_mib = 16
trace = true

[[workload]]
name = "short"
kind = "cpu"
duration_ms = 200

# Validation refuses a workload longer than the cell limit; this one fits,
# but its guest first waits 1 s for a vCPU that never starts (the knob
# below) and then runs 2.99 s: it is still running when the 3 s limit
# comes, however fast the machine boots it.
[[workload]]
name = "long"
kind = "cpu"
duration_ms = 2990
args = "ap_skip=1"

# The guest never starts vCPU 1 (a test knob): it waits 1 s for it and
# reports an AP timeout, an error the matrix cannot foresee.
[[workload]]
name = "skip"
kind = "cpu"
duration_ms = 200
args = "ap_skip=1"

[[workload]]
name = "lat"
kind = "sleep"
interval_us = 500
duration_ms = 200

[[layout]]
name = "ok"
workloads = ["short", "lat"]
vm = [ { name = "a", vcpus = 1 }, { name = "b", vcpus = 1 } ]

[[layout]]
name = "tiny"
workloads = ["skip", "long"]
vm = [ { name = "small", vcpus = 2 } ]
"#,
    );
    let out = dir.0.join("out");
    let run = pacer()
        .arg("bench")
        .arg(&m)
        .arg("--out-dir")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(1), "{stdout}");
    let (recs, _) = read_jsonl(&out.join("results.jsonl")).unwrap();
    assert_eq!(recs.len(), 4 * 3, "every cell recorded: {stdout}");
    let status = |id: &str| {
        recs.iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("{id} missing"))
    };
    assert_eq!(status("ok/short/haiku/r1").status, CellStatus::Ok);
    assert_eq!(status("ok/short/host/r1").status, CellStatus::Ok);
    let long = status("tiny/long/haiku/r1");
    assert_eq!(long.status, CellStatus::Timeout, "{long:?}");
    assert!(long.error.contains("timeout"), "{}", long.error);
    let tiny = status("tiny/skip/host/r1");
    assert_eq!(tiny.status, CellStatus::Failed, "{tiny:?}");
    assert!(tiny.error.contains("vm small"), "{}", tiny.error);
    // The qemu column: n/a with the reason (no PVH entry in today's guest).
    let q = status("ok/short/qemu/r1");
    if q.status == CellStatus::NotApplicable {
        assert!(!q.error.is_empty());
    }
    // A guest without `sleep` makes it n/a with the guest's answer, not a
    // failure (today's guest; the SMP guest implements it).
    let lat = status("ok/lat/haiku/r1");
    if lat.status == CellStatus::NotApplicable {
        assert!(lat.error.contains("UNKNOWN_WORKLOAD"), "{}", lat.error);
    }
    // The summary, the report and its plots.
    assert!(stdout.contains("== ok / short"), "{stdout}");
    assert!(stdout.contains("report: "), "{stdout}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<h1>Pacer bench: failing</h1>"));
    assert!(html.contains("tiny/skip/host/r1") && html.contains("failed"));
    let plots: Vec<PathBuf> = std::fs::read_dir(out.join("plots"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    if html.contains("no TrueType font found") {
        println!("SKIPPED: plots (no TrueType font on this machine)");
    } else {
        for name in ["headline", "fairness"] {
            for ext in ["svg", "png"] {
                let p = out.join("plots").join(format!("{name}.{ext}"));
                let len = std::fs::metadata(&p)
                    .unwrap_or_else(|_| panic!("{} missing ({plots:?})", p.display()))
                    .len();
                assert!(len > 1000, "{} is {len} bytes", p.display());
                assert!(html.contains(&format!("plots/{name}.svg")));
            }
        }
    }
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(summary.contains("\"baselines\""));
    // trace = true: a trace per cell of a scheduled policy, none for host.
    let trace = pacer::trace::TraceFile::read(&out.join("traces/ok_short_haiku_r1.trace")).unwrap();
    assert!(trace.complete && trace.vms.len() == 2);
    assert!(!out.join("traces/ok_short_host_r1.trace").exists());
}

#[test]
fn pacer_sim_prints_what_the_front_end_prints() {
    use vcpu_sched::sim::front::{run_scenario, SimOptions};
    let scenario = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../vcpu_sched/scenarios/03_bursty_waker.toml");
    let out = pacer()
        .arg("sim")
        .arg(&scenario)
        .args(["--compare", "--duration-ms", "300", "--seed", "7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let opts = SimOptions {
        file: scenario.clone(),
        policies: vcpu_sched::PolicyKind::ALL.to_vec(),
        duration_ms: Some(300),
        seed: Some(7),
        scale: 1,
        ..Default::default()
    };
    let mut expected = Vec::new();
    run_scenario(&opts, &mut expected, &mut Vec::new()).unwrap();
    // Everything but the host-speed lines is deterministic.
    let strip = |t: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(t)
            .lines()
            .filter(|l| !l.starts_with("speed [") && !l.starts_with("events "))
            .map(str::to_string)
            .collect()
    };
    let got = strip(&out.stdout);
    assert_eq!(got, strip(&expected));
    assert!(got.iter().any(|l| l == "summary:"), "{got:?}");
    assert!(
        got.iter().any(|l| l.contains("worst group p99 wake")),
        "{got:?}"
    );
    // A missing scenario is bad input.
    let missing = pacer().args(["sim", "/nonexistent.toml"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn shipped_matrices_validate() {
    let benches = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../benches");
    let host = vmm::config::HostInfo {
        online: vcpu_engine::host_cpus::HostCpuSet::parse_list("0-1").unwrap(),
        resources: Default::default(),
    };
    let kernel = guests::bench_guest_elf().display().to_string();
    for (name, cells) in [
        ("smoke", 36),
        ("seeds", 920),
        ("unixbench", 42),
        ("mechanism", 250),
    ] {
        let path = benches.join(format!("{name}.toml"));
        // The guest image at the path the build gives it, not guests/out/.
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("../guests/out/bench-guest.elf", &kernel);
        let m = pacer::bench::Matrix::parse(&text, &path, &host)
            .unwrap_or_else(|e| panic!("{name}.toml: {e}"));
        assert_eq!(pacer::bench::cells::expand(&m).len(), cells, "{name}");
    }
}

#[test]
fn sigint_stops_the_run_without_recording_the_cell_in_progress() {
    if !kvm_or_skip("sigint_stops_the_run_without_recording_the_cell_in_progress") {
        return;
    }
    let dir = TempDir::new("bench-int");
    // Long cells under a Pacer policy, so the signal lands inside one.
    let m = matrix(
        &dir.0,
        &resumable()
            .replace("policies = [\"host\", \"haiku\"]", "policies = [\"haiku\"]")
            .replace("duration_ms = 400", "duration_ms = 3000"),
    );
    let out = dir.0.join("out");
    let child = pacer()
        .arg("bench")
        .arg(&m)
        .arg("--out-dir")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: sending SIGINT to our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(1));
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(err.contains("--resume"), "{err}");
    let (recs, _) = read_jsonl(&out.join("results.jsonl")).unwrap();
    assert!(
        recs.is_empty(),
        "the interrupted cell is not recorded: {recs:?}"
    );
    assert!(
        out.join("report.html").exists(),
        "the report is written on the way out"
    );
}

/// An output folder as a finished run of `m` leaves it, made without
/// running anything: one ok record per cell in `results.jsonl` and, with
/// `settings`, each cell's settings in `cell-settings.jsonl`.
fn finished_folder(m: &Path, out: &Path, settings: bool) {
    use pacer::bench::{cells, settings as cs, store, Matrix};
    let matrix = Matrix::load(m).unwrap();
    let view = pacer::documents::matrix::MatrixView::of(&matrix);
    std::fs::create_dir_all(out).unwrap();
    let (mut results, mut lines) = (String::new(), String::new());
    for c in cells::expand(&matrix) {
        let r = store::CellRecord {
            header: vmm::documents::Header::new(vmm::documents::BENCH_CELL),
            id: c.id(&matrix),
            layout: "one".into(),
            workload: "cpu".into(),
            policy: matrix.policies[c.policy].label.clone(),
            mode: None,
            rep: c.rep,
            status: CellStatus::Ok,
            error: String::new(),
            started_unix_ns: 1,
            wall_ns: 400_000_000,
            host: None,
            // A cpu cell's figures (vary by cell), and more of them.
            samples: (0..16)
                .map(|i| pacer::bench::metrics::Sample {
                    vm: "a".into(),
                    group: "a".into(),
                    vcpu: Some(0),
                    metric: match i {
                        0 => "cpu.units_per_s".to_string(),
                        i => format!("guest.figure{i}_per_s"),
                    },
                    value: 1e6 * (1 + i) as f64 + f64::from(c.rep) * 1e4 + c.policy as f64,
                })
                .collect(),
        };
        results += &(serde_json::to_string(&r).unwrap() + "\n");
        lines += &(serde_json::to_string(&cs::of(&matrix, &view, &c)).unwrap() + "\n");
    }
    std::fs::write(out.join(store::JSONL), results).unwrap();
    if settings {
        std::fs::write(out.join(cs::FILE), lines).unwrap();
    }
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(snapshot(&e.path()));
        } else {
            out.push((e.path(), std::fs::read(e.path()).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn resume_refuses_finished_cells_it_cannot_prove_ran_this_matrix() {
    let dir = TempDir::new("bench-unproven");
    let m = matrix(&dir.0, &resumable());
    let out = dir.0.join("out");
    let resume = || {
        let o = pacer()
            .arg("bench")
            .arg(&m)
            .arg("--out-dir")
            .arg(&out)
            .args(["--resume", "-q"])
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
            text,
        )
    };

    // No cell-settings.jsonl (an older Pacer's folder, or deleted):
    // nothing proves the 6 finished cells ran this matrix.
    finished_folder(&m, &out, false);
    let before = snapshot(&out);
    let (code, err, all) = resume();
    assert_eq!(code, Some(2), "{all}");
    assert!(
        err.contains("cell-settings.jsonl is missing") && err.contains("another --out-dir"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(
        snapshot(&out),
        before,
        "a refused resume touched the folder"
    );

    // The file without one finished cell's line: refused, naming it.
    finished_folder(&m, &out, true);
    let settings = out.join("cell-settings.jsonl");
    let text = std::fs::read_to_string(&settings).unwrap();
    let first = text.lines().next().unwrap().to_string();
    let id = serde_json::from_str::<serde_json::Value>(&first).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(&settings, text.replacen(&format!("{first}\n"), "", 1)).unwrap();
    let before = snapshot(&out);
    let (code, err, all) = resume();
    assert_eq!(code, Some(2), "{all}");
    assert!(
        err.contains("has no settings for 1 finished cell(s)") && err.contains(&id),
        "{err}"
    );
    assert_eq!(
        snapshot(&out),
        before,
        "a refused resume touched the folder"
    );
}

#[test]
fn resume_with_every_cell_done_writes_the_summary_and_says_nothing_is_left() {
    let dir = TempDir::new("bench-all-done");
    let m = matrix(&dir.0, &resumable());
    let out = dir.0.join("out");
    finished_folder(&m, &out, true);
    let o = pacer()
        .arg("bench")
        .arg(&m)
        .arg("--out-dir")
        .arg(&out)
        .arg("--resume")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("6 cells, 6 already done (resumed); nothing left to run"),
        "{err}"
    );
    assert!(!err.contains("-0 s"), "{err}");
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&summary).unwrap();
}

/// A full disk while the summary is written: exit 3, and no document in
/// DIR is torn (summary.json, report.html are whole or absent) and no
/// temporary file is left. The output folder is on a tmpfs filled up to
/// a page or two more than the CSV (which a resume rewrites first) needs.
#[test]
fn a_full_disk_leaves_no_torn_summary() {
    let dir = TempDir::new("bench-full");
    let m = matrix(&dir.0, &resumable());
    let out = dir.0.join("mnt");
    std::fs::create_dir_all(&out).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&out)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !mounted {
        println!(
            "SKIPPED: cannot mount a tmpfs (not root?); a_full_disk_leaves_no_torn_summary not run"
        );
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&out);
    finished_folder(&m, &out, true);
    // What the resume writes before the summary: results.csv and
    // matrix.toml (neither is there yet); the summary needs more than the
    // one page left free after them.
    let probe = dir.0.join("probe");
    finished_folder(&m, &probe, true);
    let o = pacer()
        .arg("bench")
        .arg(&m)
        .arg("--out-dir")
        .arg(&probe)
        .args(["--resume", "-q"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let pages = |f: &str| {
        std::fs::metadata(probe.join(f))
            .unwrap()
            .len()
            .div_ceil(4096)
    };
    let summary_len = std::fs::metadata(probe.join("summary.json")).unwrap().len();
    assert!(summary_len > 4096, "summary {summary_len} bytes");
    let before_summary = pages("results.csv") + pages("matrix.toml");
    // Fill the disk, then free those pages and one more.
    {
        use std::io::Write;
        let mut f = std::fs::File::create(out.join("filler")).unwrap();
        let page = vec![0u8; 4096];
        while f.write_all(&page).is_ok() {}
        let len = f.metadata().unwrap().len() / 4096 * 4096;
        f.set_len(len - (before_summary + 1) * 4096).unwrap();
        f.sync_all().unwrap();
    }
    let o = pacer()
        .arg("bench")
        .arg(&m)
        .arg("--out-dir")
        .arg(&out)
        .args(["--resume", "-q"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("results not saved") && err.contains("No space left on device"),
        "{err}"
    );
    for doc in ["summary.json", "report.html", "results.csv"] {
        match std::fs::read(out.join(doc)) {
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{doc}: {e}"),
            Ok(bytes) if doc == "summary.json" => {
                serde_json::from_slice::<serde_json::Value>(&bytes)
                    .unwrap_or_else(|e| panic!("summary.json torn ({} bytes): {e}", bytes.len()));
            }
            Ok(bytes) if doc == "report.html" => {
                assert!(bytes.ends_with(b"</html>"), "report.html torn")
            }
            Ok(_) => {}
        }
    }
    let left: Vec<String> = snapshot(&out)
        .into_iter()
        .map(|(p, _)| p.display().to_string())
        .filter(|p| p.contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// A matrix can name the `hostile` workload: its VM's triple fault is the
/// expected end (a `hostile.contained` sample, not a failed cell), the
/// neighbour beside it is measured, and QEMU's column is `n/a` with why.
#[test]
fn a_hostile_vm_in_a_matrix_is_contained_and_its_neighbour_measured() {
    if !kvm_or_skip("a_hostile_vm_in_a_matrix_is_contained_and_its_neighbour_measured") {
        return;
    }
    let dir = TempDir::new("bench-hostile");
    let m = matrix(
        &dir.0,
        r#"
[matrix]
name = "contained"
kernel = "@KERNEL@"
host_cpus = "0-1"
repetitions = 1
cell_timeout_s = 120
policies = ["host", "haiku", "qemu"]
baseline = "host"
memory_mib = 16

[[workload]]
name = "cpu"
kind = "cpu"
duration_ms = 600

[[workload]]
name = "bad"
kind = "hostile"
flood_kib = 64
flood_records = 2000
random_ports = 300
random_mmio = 300

[[layout]]
name = "beside-hostile"
workloads = ["cpu"]
vm = [ { name = "victim", vcpus = 1 }, { name = "rogue", vcpus = 1, workload = "bad" } ]
"#,
    );
    let out = dir.0.join("out");
    let run = pacer()
        .arg("bench")
        .arg(&m)
        .arg("--out-dir")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stdout}{stderr}");
    let (recs, _) = read_jsonl(&out.join("results.jsonl")).unwrap();
    for policy in ["host", "haiku"] {
        let id = format!("beside-hostile/cpu/{policy}/r1");
        let r = recs.iter().find(|r| r.id == id).unwrap();
        assert_eq!(r.status, CellStatus::Ok, "{r:?}");
        let value = |vm: &str, metric: &str| {
            r.samples
                .iter()
                .find(|s| s.vm == vm && s.metric == metric)
                .map(|s| s.value)
        };
        assert_eq!(value("rogue", "hostile.contained"), Some(1.0), "{r:?}");
        assert!(
            value("victim", "cpu.units_per_s").unwrap_or(0.0) > 0.0,
            "{r:?}"
        );
    }
    let q = recs
        .iter()
        .find(|r| r.id == "beside-hostile/cpu/qemu/r1")
        .unwrap();
    assert_eq!(q.status, CellStatus::NotApplicable, "{q:?}");
    assert!(q.error.contains("Pacer's own limits"), "{}", q.error);
}
