//! `pacer bench` with `unixbench` cells end to end (skipped without
//! /dev/kvm). A stock Linux cannot reach user space on a software KVM, so
//! the Linux VM is the boot-protocol stand-in of tests/common (it checks
//! what a kernel finds, then prints a recorded console of the suite on COM1
//! and powers off through ACPI): the cells boot it as Linux, read its
//! console with the suite's parser and scorer, and record the indexes. A
//! layout whose VM wanted a run the console lacks fails with what is
//! missing; a VM of the bench guest beside the Linux VM runs its own
//! workload in the same cell; QEMU cannot boot the stand-in (no PVH note),
//! so its column is n/a with that reason; the `native` column runs the
//! suite's real host binary (found beside the kernel) for 0.1 s passes.

mod common;

use common::{kvm_or_skip, linux_standin, TempDir};
use pacer::bench::store::{read_jsonl, CellRecord, CellStatus};
use std::process::Command;

/// A recorded console (shared with the adapter's unit test): the suite's
/// lines as a guest prints them, with kernel noise; two tests, 1 copy and
/// 2 copies, 3 passes (the worst dropped).
/// 1 copy:   dhry2reg 466800 (= 4 x baseline 116700: index 40), syscall
///           90000 (= 6 x 15000: 60); index sqrt(40 x 60) = sqrt(2400)
/// 2 copies: dhry2reg 933600 (80), syscall 180000 (120) with one failed
///           pass; index sqrt(80 x 120) = sqrt(9600)
const CONSOLE: &str = include_str!("data/unixbench-console.txt");

const MATRIX: &str = r#"
[matrix]
name = "ub-standin"
kernel = "@KERNEL@"
host_cpus = "0-1"
repetitions = 1
cell_timeout_s = 60
baseline = "host"
policies = ["host", "haiku", "qemu", "native"]
memory_mib = 64

[[workload]]
name = "ub"
kind = "unixbench"
kernel = "vmlinux"
initramfs = "initramfs"
copies = [1, "vcpus"]
passes = 3
tests = "dhry2reg,syscall"
seconds = 0.1
cmdline = "quiet loglevel=3"

[[workload]]
name = "hog"
kind = "cpu"
duration_ms = 300

[[layout]]
name = "alone"
workloads = ["ub"]
vm = [ { name = "linux", vcpus = 2 } ]

[[layout]]
name = "beside-hog"
workloads = ["ub"]
vm = [ { name = "linux", vcpus = 2 }, { name = "hog", vcpus = 1, workload = "hog" } ]

[[layout]]
name = "four-vcpus"
workloads = ["ub"]
vm = [ { name = "linux", vcpus = 4 } ]
"#;

fn value(rec: &CellRecord, vm: &str, metric: &str) -> f64 {
    rec.samples
        .iter()
        .find(|s| s.vm == vm && s.metric == metric)
        .unwrap_or_else(|| panic!("{}: no {metric} of {vm} in {:?}", rec.id, rec.samples))
        .value
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs()
}

#[test]
fn unixbench_cells_score_the_linux_guests_console() {
    if !kvm_or_skip("unixbench_cells_score_the_linux_guests_console") {
        return;
    }
    let dir = TempDir::new("bench-ub");
    let mut msg = CONSOLE.as_bytes().to_vec();
    msg.push(0);
    std::fs::write(dir.0.join("vmlinux"), linux_standin(&msg)).unwrap();
    std::fs::write(dir.0.join("initramfs"), [0x5a; 512]).unwrap();
    // The native column runs the suite's host binary found beside the kernel.
    std::os::unix::fs::symlink(guests::ubench(), dir.0.join("ubench")).unwrap();
    let m = dir.0.join("m.toml");
    let kernel = guests::bench_guest_elf().display().to_string();
    std::fs::write(&m, MATRIX.replace("@KERNEL@", &kernel)).unwrap();
    let out = dir.0.join("out");
    let run = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .arg("bench")
        .arg(&m)
        .arg("--out-dir")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let text = format!("{stdout}{}", String::from_utf8_lossy(&run.stderr));
    // The four-vCPU layout fails: exit 1 after every cell is recorded.
    assert_eq!(run.status.code(), Some(1), "{text}");
    let (recs, _) = read_jsonl(&out.join("results.jsonl")).unwrap();
    assert_eq!(recs.len(), 3 * 4, "{text}");
    let cell = |id: &str| {
        recs.iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("{id} missing: {text}"))
    };
    for policy in ["host", "haiku"] {
        for layout in ["alone", "beside-hog"] {
            let rec = cell(&format!("{layout}/ub/{policy}/r1"));
            assert_eq!(rec.status, CellStatus::Ok, "{rec:?}");
            let one = value(rec, "linux", "unixbench.index.copies_1");
            let per_vcpu = value(rec, "linux", "unixbench.index.copies_vcpus");
            assert!(close(one, 2400f64.sqrt()), "{} {one}", rec.id);
            assert!(close(per_vcpu, 9600f64.sqrt()), "{} {per_vcpu}", rec.id);
            assert_eq!(
                value(rec, "linux", "unixbench.failed_passes.copies_vcpus"),
                1.0
            );
            assert!(close(
                value(rec, "linux", "unixbench.score.dhry2reg.copies_1"),
                466800.0
            ));
            // The scheduler's statistics of the Linux VM's vCPUs come too.
            assert!(rec
                .samples
                .iter()
                .any(|s| s.vm == "linux" && s.metric == "sched.run_ns"));
        }
        // The bench guest beside it ran its own workload in the same cell.
        let beside = cell(&format!("beside-hog/ub/{policy}/r1"));
        assert!(value(beside, "hog", "cpu.units_per_s") > 0.0, "{beside:?}");
        // Four vCPUs want a run with 4 copies, which the console lacks.
        let four = cell(&format!("four-vcpus/ub/{policy}/r1"));
        assert_eq!(four.status, CellStatus::Failed, "{four:?}");
        assert!(
            four.error
                .contains("vm linux: the suite printed no results with 4 copies"),
            "{}",
            four.error
        );
    }
    // QEMU boots a vmlinux only through a PVH note; the stand-in has none
    // (or QEMU is not installed): n/a with the reason, never a failure.
    let q = cell("alone/ub/qemu/r1");
    assert_eq!(q.status, CellStatus::NotApplicable, "{q:?}");
    assert!(
        q.error.contains("no PVH entry in") || q.error.contains("qemu"),
        "{}",
        q.error
    );
    // Native: the real suite on the host (0.1 s passes), one run per VM;
    // a bench-guest VM has no native form.
    for layout in ["alone", "four-vcpus"] {
        let rec = cell(&format!("{layout}/ub/native/r1"));
        assert_eq!(rec.status, CellStatus::Ok, "{rec:?}");
        assert!(value(rec, "linux", "unixbench.index.copies_1") > 0.0);
        assert!(value(rec, "linux", "unixbench.index.copies_vcpus") > 0.0);
    }
    let beside = cell("beside-hog/ub/native/r1");
    assert_eq!(beside.status, CellStatus::NotApplicable, "{beside:?}");
    assert!(beside
        .error
        .contains("VM hog: the bench guest runs only in a VM"));
    // The summary names the index and gives haiku's ratio to host (1.00:
    // the same console).
    assert!(stdout.contains("UB index (1 copy)"), "{stdout}");
    assert!(stdout.contains("UB index (copy per vCPU)"), "{stdout}");
    // The cell's logs keep the Linux VM's console.
    let console = out.join("logs/alone_ub_haiku_r1/latest/linux.console.log");
    let console = std::fs::read_to_string(&console).unwrap();
    assert!(console.contains("UB done end=poweroff"), "{console}");
}
