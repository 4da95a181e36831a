//! `pacer validate` refuses what `pacer run` would fail on (the input-hardening work, item
//! 5), with the field, its line and column, and messages of a readable
//! length whatever the file holds.

mod common;

use common::pacer;

use common::{vm_table, TempDir};

/// `validate` and `run` both exit 2 naming `needle` (and nothing ran).
fn both_refuse(dir: &TempDir, config: &std::path::Path, needle: &str) -> String {
    let mut last = String::new();
    for cmd in ["validate", "run"] {
        let (code, out, err) = pacer(&[cmd, config.to_str().unwrap()]);
        assert_eq!(code, 2, "{cmd}: {out}{err}");
        assert!(err.contains(needle), "{cmd}: {err}");
        assert!(!err.contains("os error 17"), "{cmd}: {err}");
        for line in err.lines() {
            assert!(line.len() < 600, "{cmd}: a line of {} bytes", line.len());
        }
        last = err;
    }
    assert!(!dir.0.join("pacer-logs").exists(), "a run started: {last}");
    last
}

#[test]
fn log_dirs_run_would_fail_to_create() {
    let dir = TempDir::new("vmr-logdir");
    std::os::unix::fs::symlink("loop", dir.0.join("loop")).unwrap();
    let long = "n".repeat(100_000);
    for (log_dir, says) in [
        ("logs\\u0000x", "NUL"),
        (long.as_str(), "expected a path of less than 4096 bytes"),
        ("loop", "loop of symbolic links"),
        ("loop/deeper", "loop of symbolic links"),
    ] {
        let p = dir.config(&format!(
            "[host]\nlog_dir = \"{log_dir}\"\n\n{}",
            vm_table("v", "cpu duration_ms=100")
        ));
        let err = both_refuse(&dir, &p, "pacer.toml:2:11: host.log_dir: ");
        assert!(err.contains(says), "{log_dir:.20}: {err}");
    }
}

#[test]
fn input_files_on_pseudo_file_systems() {
    let dir = TempDir::new("vmr-sys");
    for (file, fs) in [
        ("/sys/devices/system/cpu/online", "sysfs"),
        ("/proc/self/status", "procfs"),
    ] {
        if !std::path::Path::new(file).exists() {
            println!("SKIPPED: {file} missing");
            continue;
        }
        let vm = vm_table("v", "cpu duration_ms=100").replace(
            "timeout_s = 60",
            &format!("timeout_s = 60\ninitrd = \"{file}\""),
        );
        let p = dir.config(&vm);
        let err = both_refuse(&dir, &p, "pacer.toml:8:10: vm[0].initrd: ");
        assert!(err.contains(fs), "{err}");
    }
}

#[test]
fn non_utf8_configs_get_the_byte_line_and_column() {
    let dir = TempDir::new("vmr-utf8");
    let p = dir.config(&vm_table("v", "cpu duration_ms=100"));
    let mut bytes = std::fs::read(&p).unwrap();
    // `name = "v"` on line 2: make the `v` an invalid byte.
    let at = bytes.windows(3).position(|w| w == b"\"v\"").unwrap() + 1;
    bytes[at] = 0xff;
    std::fs::write(&p, bytes).unwrap();
    let err = both_refuse(&dir, &p, "pacer.toml:2:9: vm[0].name: expected UTF-8 text");
    assert!(err.contains("0xFF"), "{err}");
}

#[test]
fn huge_values_are_not_repeated_whole() {
    let dir = TempDir::new("vmr-huge");
    let big = "x".repeat(200_000);
    let base = vm_table("v", "cpu duration_ms=100");
    for (from, to, field) in [
        ("name = \"v\"", format!("name = \"{big}\""), "vm[0].name"),
        (
            "vcpus = 1",
            format!("vcpus = 1\ncpus = \"{big}\""),
            "vm[0].cpus",
        ),
        (
            "workload = \"cpu duration_ms=100\"",
            format!("workload = \"cpu duration_ms={big}\""),
            "vm[0].workload",
        ),
        (
            "workload = \"cpu duration_ms=100\"",
            format!("workload = \"{big}\""),
            "vm[0].workload",
        ),
        (
            "timeout_s = 60",
            format!("timeout_s = 60\ncmdline = \"{big}\""),
            "vm[0].cmdline",
        ),
        ("kernel = \"", format!("kernel = \"{big}"), "vm[0].kernel"),
        (
            "[[vm]]",
            format!("[host]\npolicy = \"{big}\"\n[[vm]]"),
            "host.policy",
        ),
        ("vcpus = 1", format!("vcpus = {big}"), "vm[0].vcpus"),
        ("[[vm]]", format!("[[vm]]\n{big} = 1"), "vm[0]"),
        ("[[vm]]", format!("[[{big}]]"), ""),
    ] {
        assert!(base.contains(from), "{from}");
        let p = dir.config(&base.replacen(from, &to, 1));
        let (code, out, err) = pacer(&["validate", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{field}: {out}{}", &err[..err.len().min(500)]);
        assert!(
            err.contains(field),
            "{field}: {}",
            &err[..err.len().min(500)]
        );
        for line in err.lines() {
            assert!(
                line.len() < 600,
                "{field}: a line of {} bytes: {}",
                line.len(),
                &line[..300]
            );
        }
    }
}
