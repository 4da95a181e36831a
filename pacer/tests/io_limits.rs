//! Nothing lost, nothing unbounded: a result or log that cannot
//! be written fails the run with its own exit code, every file Pacer reads
//! is bounded, and a flooding guest cannot fill the disk.

mod common;

use common::{kvm_or_skip, vm_table, TempDir};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// Run `pacer args` with at most `fsize` bytes per written file (None: no
/// limit); SIGXFSZ is ignored so that a write past the limit fails with
/// EFBIG as a write to a full disk fails with ENOSPC.
fn pacer_limited(args: &[&str], fsize: Option<u64>) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pacer"));
    cmd.args(args);
    if let Some(limit) = fsize {
        // SAFETY: between fork and exec only async-signal-safe calls
        // (setrlimit, signal) on values owned by this closure.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                Ok(())
            });
        }
    }
    let out = cmd.output().expect("run pacer");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn pacer(args: &[&str]) -> (i32, String, String) {
    pacer_limited(args, None)
}

/// The `<vm>.results.jsonl` files under `dir` (any depth).
fn results_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            out.extend(results_files(&p));
        } else if p.to_string_lossy().ends_with(".results.jsonl") {
            out.push(p);
        }
    }
    out
}

/// Every line of a results log is whole JSON, and a stop line is only
/// ever the last; returns the `type` of the last line.
fn check_cut_log(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{path:?} ends in a torn line"
    );
    let mut last = String::new();
    for line in text.lines() {
        assert_ne!(last, "stop", "{path:?}: a line after the stop line");
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{path:?}: {e}: {line}"));
        last = v["type"].as_str().unwrap_or_default().to_string();
    }
    last
}

fn assert_write_failure(code: i32, out: &str, err: &str) {
    assert_eq!(
        code, 3,
        "exit code of a run whose results were not saved\n{out}{err}"
    );
    assert!(!out.contains("succeeded"), "{out}");
    assert!(err.contains("results not saved"), "{err}");
    assert!(
        !err.contains("Os {") && !err.contains("IOError"),
        "debug text: {err}"
    );
}

#[test]
fn a_file_size_limit_fails_the_run_with_exit_3() {
    if !kvm_or_skip("a_file_size_limit_fails_the_run_with_exit_3") {
        return;
    }
    let dir = TempDir::new("io-fsize");
    let cfg = dir.config(&format!("{}{}", vm_table("a", "cpu"), vm_table("b", "cpu")));
    let logs = dir.0.join("logs");
    let (code, out, err) = pacer_limited(
        &[
            "run",
            cfg.to_str().unwrap(),
            "--log-dir",
            logs.to_str().unwrap(),
        ],
        Some(1500),
    );
    assert_write_failure(code, &out, &err);
    assert!(err.contains("File too large"), "{err}");
    let files = results_files(&logs);
    assert_eq!(files.len(), 2, "{files:?}");
    // The limit cut every results log: none claims a stop, and the
    // incomplete line (when it fit) names the failure.
    for f in &files {
        let last = check_cut_log(f);
        assert_ne!(last, "stop", "{f:?}");
        if last == "incomplete" {
            let text = std::fs::read_to_string(f).unwrap();
            let v: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
            assert!(
                v["reason"].as_str().unwrap().contains("File too large"),
                "{v}"
            );
            assert!(v["lines_lost"].as_u64().unwrap() >= 1, "{v}");
        }
    }
}

/// A real full file system: a tmpfs of a few pages (needs root to mount;
/// skipped otherwise).
#[test]
fn a_full_disk_fails_the_run_with_exit_3() {
    if !kvm_or_skip("a_full_disk_fails_the_run_with_exit_3") {
        return;
    }
    let dir = TempDir::new("io-full");
    let mnt = dir.0.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16k", "tmpfs"])
        .arg(&mnt)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !mounted {
        println!("SKIPPED: cannot mount a tmpfs (not root?); the file-size test covers the code");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&mnt);
    let cfg = dir.config(&format!("{}{}", vm_table("a", "cpu"), vm_table("b", "cpu")));
    let (code, out, err) = pacer(&[
        "run",
        cfg.to_str().unwrap(),
        "--log-dir",
        mnt.to_str().unwrap(),
    ]);
    assert_write_failure(code, &out, &err);
    assert!(err.contains("No space left on device"), "{err}");
    // Whichever files the disk took: whole lines only.
    for f in results_files(&mnt) {
        check_cut_log(&f);
    }
}

/// Write `m.toml` in `dir` with `@KERNEL@` replaced by the bench guest.
fn matrix(dir: &Path, text: &str) -> std::path::PathBuf {
    let p = dir.join("m.toml");
    let kernel = common::kernel().display().to_string();
    std::fs::write(&p, text.replace("@KERNEL@", &kernel)).unwrap();
    p
}

const SMALL_MATRIX: &str = r#"
[matrix]
name = "io"
kernel = "@KERNEL@"
host_cpus = "0"
repetitions = 2
cell_timeout_s = 60
policies = ["haiku"]
memory_mib = 16

[[workload]]
name = "cpu"
kind = "cpu"
duration_ms = 1000

[[layout]]
name = "one"
vm = [ { name = "a", vcpus = 1, cpus = "0" } ]
"#;

/// Every file under `dir` (any depth).
fn all_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(all_files(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

#[test]
fn bench_cells_whose_logs_cannot_be_written_fail_and_leave_no_tmp_files() {
    if !kvm_or_skip("bench_cells_whose_logs_cannot_be_written_fail_and_leave_no_tmp_files") {
        return;
    }
    let dir = TempDir::new("io-bench-fsize");
    let m = matrix(&dir.0, SMALL_MATRIX);
    let out = dir.0.join("out");
    let (code, stdout, err) = pacer_limited(
        &[
            "bench",
            m.to_str().unwrap(),
            "--out-dir",
            out.to_str().unwrap(),
            "-q",
        ],
        Some(1500),
    );
    assert!(code == 1 || code == 3, "exit {code}\n{stdout}{err}");
    assert!(!err.contains("Os {"), "debug text: {err}");
    let files = all_files(&out);
    assert!(
        !files.iter().any(|f| f.to_string_lossy().contains(".tmp")),
        "{files:?}"
    );
    let jsonl = std::fs::read_to_string(out.join("results.jsonl")).unwrap_or_default();
    assert!(
        jsonl.is_empty() || jsonl.ends_with('\n'),
        "torn cell record"
    );
    for line in jsonl.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["status"], "failed", "{v}");
        assert!(v["error"].as_str().unwrap().contains("write_error"), "{v}");
    }
    if code == 3 {
        assert!(err.contains("results not saved"), "{err}");
    }
}

/// Run `pacer args` with at most 1 GiB of address space, killed after 20 s:
/// (exit code, stderr), or None if it had to be killed.
fn pacer_bounded(args: &[&str], cwd: &Path) -> Option<(i32, String)> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pacer"));
    cmd.args(args)
        .current_dir(cwd)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // SAFETY: between fork and exec only setrlimit on a local value.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("run pacer");
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return Some((status.code().unwrap_or(-1), err));
        }
        if start.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn bench_sim_and_unixbench_refuse_devices_fifos_and_huge_files() {
    let dir = TempDir::new("io-inputs");
    let fifo = dir.0.join("fifo.toml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // A 2 GiB file that takes no disk (sparse).
    let big = dir.0.join("big.toml");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let inputs = [
        (
            "/dev/zero".to_string(),
            "a character device, not a regular file",
        ),
        (fifo.display().to_string(), "a FIFO, not a regular file"),
        (big.display().to_string(), "2147483648 bytes, more than the"),
    ];
    for (input, why) in &inputs {
        let out = dir.0.join("out");
        let commands: [Vec<&str>; 3] = [
            vec!["bench", input, "--out-dir", out.to_str().unwrap()],
            vec!["sim", input],
            vec!["unixbench", "--report", input],
        ];
        for args in &commands {
            let Some((code, err)) = pacer_bounded(args, &dir.0) else {
                panic!("pacer {args:?} hung (killed after 20 s)");
            };
            assert_eq!(code, 2, "pacer {args:?}: {err}");
            assert!(err.contains(why), "pacer {args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "one line: {err}");
        }
        assert!(!out.exists(), "nothing written for {input}");
    }
}

#[test]
fn resume_refuses_a_matrix_that_changed_finished_cells() {
    if !kvm_or_skip("resume_refuses_a_matrix_that_changed_finished_cells") {
        return;
    }
    let dir = TempDir::new("io-resume");
    let out = dir.0.join("out");
    let one_rep = SMALL_MATRIX
        .replace("repetitions = 2", "repetitions = 1")
        .replace("duration_ms = 1000", "duration_ms = 300");
    let m = matrix(&dir.0, &one_rep);
    let bench = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            m.to_str().unwrap(),
            "--out-dir",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        pacer(&args)
    };
    let (code, o, e) = bench(&[]);
    assert_eq!(code, 0, "{o}{e}");
    let first_matrix = std::fs::read_to_string(out.join("matrix.toml")).unwrap();
    let first_results = std::fs::read_to_string(out.join("results.jsonl")).unwrap();

    // Another duration: the finished cell ran something else. Refused,
    // naming the cell and what changed; nothing is touched.
    matrix(
        &dir.0,
        &one_rep.replace("duration_ms = 300", "duration_ms = 600"),
    );
    let (code, o, e) = bench(&["--resume"]);
    assert_eq!(code, 2, "{o}{e}");
    assert!(e.contains("one/cpu/haiku/r1"), "{e}");
    assert!(e.contains("300 -> 600"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert_eq!(
        std::fs::read_to_string(out.join("matrix.toml")).unwrap(),
        first_matrix
    );
    assert_eq!(
        std::fs::read_to_string(out.join("results.jsonl")).unwrap(),
        first_results
    );

    // More repetitions of the same cells: the new one runs, the first
    // run's matrix.toml is kept and this one saved beside it.
    matrix(
        &dir.0,
        &one_rep.replace("repetitions = 1", "repetitions = 2"),
    );
    let (code, o, e) = bench(&["--resume"]);
    assert_eq!(code, 0, "{o}{e}");
    let results = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    assert!(results.starts_with(&first_results));
    assert_eq!(results.lines().count(), 2, "{results}");
    assert_eq!(
        std::fs::read_to_string(out.join("matrix.toml")).unwrap(),
        first_matrix
    );
    assert!(std::fs::read_to_string(out.join("matrix.2.toml"))
        .unwrap()
        .contains("repetitions = 2"));
    // What each cell ran, one line per recorded cell.
    let settings = std::fs::read_to_string(out.join("cell-settings.jsonl")).unwrap();
    assert_eq!(settings.lines().count(), 2, "{settings}");
}

/// Bytes of every file under `dir`.
fn disk_use(dir: &Path) -> u64 {
    all_files(dir)
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum()
}

#[test]
fn a_hostile_guest_beside_a_normal_one_is_bounded_and_stops() {
    if !kvm_or_skip("a_hostile_guest_beside_a_normal_one_is_bounded_and_stops") {
        return;
    }
    let dir = TempDir::new("io-hostile");
    let hostile = vm_table("bad", "cpu").replace(
        "workload = \"cpu\"",
        "workload = { name = \"hostile\", flood_kib = 100, flood_records = 5000, random_ports = 500, random_mmio = 500 }",
    )
    .replace("timeout_s = 60", "timeout_s = 300");
    let normal = vm_table("good", "cpu").replace(
        "workload = \"cpu\"",
        "workload = { name = \"cpu\", duration_ms = 1500 }",
    );
    let cfg = dir.config(&format!(
        "[host]\nlog_limit_kib = 64\nresult_records_per_s = 100\n\n{hostile}{normal}"
    ));
    let logs = dir.0.join("logs");
    let (code, out, err) = pacer(&[
        "run",
        cfg.to_str().unwrap(),
        "--log-dir",
        logs.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "the hostile VM failed, nothing else\n{out}{err}");
    assert!(out.contains("[good] OK: success"), "{out}");
    assert!(out.contains("[bad] FAILED: triple_fault"), "{out}");
    assert!(
        out.contains("console output dropped past the 65536-byte log limit"),
        "{out}"
    );
    assert!(out.contains("past 100 per second"), "{out}");

    let run = logs.join("latest");
    // The normal VM's results are whole: its work and its stop line.
    let good = std::fs::read_to_string(run.join("good.results.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = good
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.iter().any(|l| l["kind"] == "work_done"), "{good}");
    assert!(!lines.iter().any(|l| l["type"] == "dropped"), "{good}");
    let stop = lines.last().unwrap();
    assert_eq!(
        (&stop["type"], &stop["ok"]),
        (&"stop".into(), &true.into()),
        "{stop}"
    );

    // The hostile VM's logs stay within the limit (plus the marker lines).
    let console = std::fs::metadata(run.join("bad.console.log"))
        .unwrap()
        .len();
    assert!(console <= 64 * 1024 + 512, "console log {console} bytes");
    let bad = std::fs::read_to_string(run.join("bad.results.jsonl")).unwrap();
    assert!(
        bad.len() as u64 <= 64 * 1024 + 4096,
        "results log {} bytes",
        bad.len()
    );
    let dropped: Vec<serde_json::Value> = bad
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["type"] == "dropped")
        .collect();
    assert_eq!(dropped.len(), 2, "{bad}");
    // However slowly the flood runs (a loaded host), at most a few hundred
    // of its 5000 records fit in 64 KiB: the rest are refused, some past
    // the rate limit.
    let (rate, size) = (
        dropped[1]["rate_limited"].as_u64().unwrap(),
        dropped[1]["over_limit"].as_u64().unwrap(),
    );
    assert!(rate > 0 && rate + size > 4_000, "{}", dropped[1]);
    assert_eq!(
        bad.lines().last().map(|l| l.contains("\"type\":\"stop\"")),
        Some(true)
    );
    let total = disk_use(&logs);
    assert!(total < 256 * 1024, "{total} bytes on disk for the run");
}

#[test]
fn a_trace_that_cannot_be_written_fails_the_run_with_exit_3() {
    if !kvm_or_skip("a_trace_that_cannot_be_written_fails_the_run_with_exit_3") {
        return;
    }
    let dir = TempDir::new("io-trace");
    // Three CPU-bound VMs on one CPU for 4 s: their turns fill a trace
    // under any dispatch (ranked records ~100 turns a second, well over
    // 8 KiB in 4 s however loaded the host is).
    let cpu_4s = "cpu duration_ms=4000";
    let cfg = dir.config(&format!(
        "[host]\ncpus = \"0\"\npolicy = \"haiku\"\n\n{}{}{}",
        vm_table("a", cpu_4s),
        vm_table("b", cpu_4s),
        vm_table("c", cpu_4s)
    ));
    let logs = dir.0.join("logs");
    let trace = dir.0.join("t.trace");
    // 8 KiB per file: the logs fit, the trace does not.
    let (code, out, err) = pacer_limited(
        &[
            "run",
            cfg.to_str().unwrap(),
            "--log-dir",
            logs.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
        ],
        Some(8192),
    );
    assert_write_failure(code, &out, &err);
    assert!(err.contains("t.trace: File too large"), "{err}");
    assert!(
        out.contains("the scheduling trace could not be written"),
        "{out}"
    );
    // The message states how many events the file holds up to the
    // failure, and a reader finds exactly those, with the cut tail named.
    let readable: usize = err
        .split("the file holds ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of readable events: {err}"));
    assert!(readable > 0, "{err}");
    let t = pacer::trace::TraceFile::read(&trace).unwrap();
    assert_eq!(t.events.len(), readable, "{err}");
    assert!(!t.complete);
    let (code, _, derr) = common::pacer(&["trace", "dump", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{derr}");
    assert!(
        derr.contains(&format!("{readable} events")) && derr.contains("note:"),
        "{derr}"
    );
}

/// The state `--resume` reads is input: a `results.jsonl` that is a FIFO,
/// a device, a 2 GiB file or holds a line that is not a cell record is
/// bad input (exit 2, one line naming the file), never a hang, a write
/// failure or a VM failure.
#[test]
fn resume_state_that_cannot_be_read_is_bad_input() {
    let dir = TempDir::new("io-resume-state");
    let m = matrix(&dir.0, SMALL_MATRIX);
    let out = dir.0.join("out");
    let jsonl = out.join("results.jsonl");
    let fresh = || {
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
    };
    let cases: [(&str, &dyn Fn(), &str); 4] = [
        (
            "a FIFO",
            &|| {
                let c = std::ffi::CString::new(jsonl.to_str().unwrap()).unwrap();
                // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            },
            "a FIFO, not a regular file",
        ),
        (
            "/dev/zero",
            &|| std::os::unix::fs::symlink("/dev/zero", &jsonl).unwrap(),
            "a character device, not a regular file",
        ),
        (
            "2 GiB",
            &|| {
                std::fs::File::create(&jsonl)
                    .unwrap()
                    .set_len(2 << 30)
                    .unwrap()
            },
            "2147483648 bytes, more than the",
        ),
        (
            "garbage",
            &|| std::fs::write(&jsonl, "\n{\"schema\": \"pacer-bench-cell\", oops\n").unwrap(),
            "results.jsonl:2: not a line of JSON",
        ),
    ];
    for (what, make, why) in cases {
        fresh();
        make();
        let args = [
            "bench",
            m.to_str().unwrap(),
            "--out-dir",
            out.to_str().unwrap(),
            "--resume",
        ];
        let Some((code, err)) = pacer_bounded(&args, &dir.0) else {
            panic!("{what}: pacer bench --resume hung (killed after 20 s)");
        };
        assert_eq!(code, 2, "{what}: {err}");
        assert!(err.contains(why), "{what}: {err}");
        assert!(err.contains(jsonl.to_str().unwrap()), "{what}: {err}");
        assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
        assert!(!err.contains("expected"), "{what}: serde's words: {err}");
    }
}
