//! Config errors over many mutated configs: each rejected config gives one
//! line per error, `file:line:col: field.path: message`, with a real
//! position and field path and none of serde's or toml's internals; the
//! binary exits 2. `PACER_SURVEY=1` prints the survey counts,
//! `PACER_SURVEY=all` every error too (`-- --nocapture`).

mod common;

use common::{kernel, TempDir};
use std::path::Path;
use vcpu_engine::host_cpus::HostCpuSet;
use vmm::config::host_resources::HostResources;
use vmm::config::{Config, ConfigError, HostInfo};

/// A good config: every field of the format.
fn base() -> String {
    format!(
        r#"[host]
cpus = "0-1"
policy = "haiku"
mode = "low-latency"
dispatch = "threads"
halt_poll_us = 200
log_dir = "logs"

[host.tunables]
bursty_load = 375

[[vm]]
name = "alpha"
vcpus = 2
memory_mib = 32
kernel = "{k}"
cmdline = "debug=1"
cpus = [0, 1]
class = "timeshare"
priority = 10
workload = {{ name = "cpu", duration_ms = 500, report_ms = 100 }}
console = "log"
timeout_s = 30

[[vm]]
name = "beta"
vcpus = 1
memory_mib = 32
kernel = "{k}"
workload = "cpu duration_ms=200"
"#,
        k = kernel().display()
    )
}

/// Values that replace a field's value, from plausible to hostile.
const VALUES: &[&str] = &[
    "0",
    "-5",
    "\"abc\"",
    "1.5",
    "nan",
    "inf",
    "true",
    "[1, \"x\"]",
    "{ a = 1 }",
    "1979-05-27T07:32:00Z",
    "\"a\\nb\"",
    "\"\\u0007bell\"",
    "abc",
    "",
    "\"x\" \"y\"",
    "99999999999999999999",
    "\"0-9999\"",
    "[]",
    "\"\"",
    "{ name = \"cpu\", duration_ms = -5 }",
    "{ name = \"cpu\", duration_ms = nan }",
    "\"frobnicate\"",
    "\"cpu duration_ms=-5\"",
    "\"Grüße\"",
];

/// Every mutation of [`base`]: each value line's value replaced by each of
/// [`VALUES`], each line deleted, duplicated or with its key renamed, and
/// a few structural edits.
fn mutations() -> Vec<(String, String)> {
    let text = base();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let with = |i: usize, repl: &str| {
        let mut l = lines.clone();
        l[i] = repl;
        l.join("\n") + "\n"
    };
    for (i, line) in lines.iter().enumerate() {
        if let Some((key, _)) = line.split_once(" = ") {
            for v in VALUES {
                out.push((format!("{key} = {v}"), with(i, &format!("{key} = {v}"))));
            }
            out.push((format!("{key} renamed"), with(i, &format!("{key}x = 1"))));
            out.push((format!("{key} twice"), with(i, &format!("{line}\n{line}"))));
        }
        if !line.trim().is_empty() {
            out.push((format!("line {} deleted", i + 1), with(i, "")));
        }
    }
    for (what, from, to) in [
        ("[host] misspelled", "[host]", "[hots]"),
        ("[host unclosed", "[host]", "[host"),
        ("[vm] not an array", "[[vm]]", "[vm]"),
        ("vm as a value", "[host]", "vm = 3\n[host]"),
        ("no vm", "[[vm]]", "[[nothing]]"),
        ("garbage line", "mode = ", "!!!\nmode = "),
        ("unterminated string", "\"haiku\"", "\"haiku"),
        ("tab and bell in key", "mode", "mo\u{7}de"),
    ] {
        out.push((what.to_string(), text.replacen(from, to, 1)));
    }
    out
}

fn host() -> HostInfo {
    HostInfo {
        online: HostCpuSet::parse_list("0-3").unwrap(),
        resources: HostResources::default(),
    }
}

/// Words of serde's and toml's own that must never reach the user.
const INTERNALS: &[&str] = &[
    "untagged enum",
    "$__toml",
    "i64",
    "u32",
    "u64",
    "f64",
    "i128",
    "Raw",
    "invalid type:",
    "a sequence",
    "struct ",
    "variant of",
];

#[derive(Default, Debug)]
struct Survey {
    configs: usize,
    rejected: usize,
    errors: usize,
    with_field: usize,
    with_position: usize,
    one_line: usize,
    with_internals: usize,
}

/// Check one error line; returns (has field, has position, clean).
fn judge(line: &str, file: &str) -> (bool, bool, bool) {
    let rest = line.strip_prefix(file).and_then(|r| r.strip_prefix(':'));
    let Some(rest) = rest else {
        return (false, false, false);
    };
    let mut parts = rest.splitn(4, ':');
    let (l, c) = (parts.next(), parts.next());
    let position = matches!((l, c), (Some(l), Some(c))
        if l.parse::<usize>().is_ok_and(|n| n > 0) && c.parse::<usize>().is_ok_and(|n| n > 0));
    let field = parts.next().map(str::trim).unwrap_or("");
    let has_field = position
        && !field.is_empty()
        && field != "(top level)"
        && field
            .chars()
            .all(|ch| ch.is_alphanumeric() || "_-.[]\\{}".contains(ch));
    let clean = !INTERNALS.iter().any(|i| line.contains(i));
    (has_field, position, clean)
}

fn survey(dir: &Path) -> (Survey, Vec<String>) {
    let mut s = Survey::default();
    let mut bad = Vec::new();
    let path = dir.join("pacer.toml");
    let file = path.display().to_string();
    for (what, text) in mutations() {
        s.configs += 1;
        let err = match Config::parse(&text, &path, &host()) {
            Ok(_) => continue,
            Err(e) => e,
        };
        s.rejected += 1;
        let n_diags = match &err {
            ConfigError::Invalid { diagnostics, .. } => diagnostics.len(),
            _ => 1,
        };
        let shown = err.to_string();
        let lines: Vec<&str> = shown.lines().collect();
        if lines.len() == n_diags {
            s.one_line += n_diags;
        } else {
            bad.push(format!(
                "{what}: {n_diags} errors on {} lines: {shown}",
                lines.len()
            ));
        }
        if std::env::var_os("PACER_SURVEY").is_some_and(|v| v == "all") {
            println!("## {what}\n{shown}");
        }
        for line in lines {
            s.errors += 1;
            let (field, position, clean) = judge(line, &file);
            s.with_field += field as usize;
            s.with_position += position as usize;
            s.with_internals += !clean as usize;
            if !(field && position && clean) {
                bad.push(format!("{what}: {line}"));
            }
        }
    }
    (s, bad)
}

#[test]
fn every_error_is_one_line_with_position_field_and_plain_words() {
    let dir = TempDir::new("config-errors");
    let (s, bad) = survey(&dir.0);
    if std::env::var_os("PACER_SURVEY").is_some() {
        println!("{s:?}");
        for b in &bad {
            println!("  {b}");
        }
    }
    assert!(s.rejected > 300, "{s:?}");
    assert!(
        bad.is_empty(),
        "{} bad errors:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn the_binary_exits_2_with_the_same_lines() {
    let dir = TempDir::new("config-binary");
    let path = dir.0.join("pacer.toml");
    let mut checked = 0;
    for (what, text) in mutations().into_iter().step_by(7) {
        let Err(e) = Config::parse(&text, &path, &host()) else {
            continue;
        };
        std::fs::write(&path, &text).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pacer"))
            .args(["validate", path.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        // The binary checks against the real host: same lines, perhaps more
        // (its limits), never fewer.
        for line in e.to_string().lines() {
            assert!(err.contains(line), "{what}: {line:?} not in {err}");
        }
        checked += 1;
    }
    assert!(checked > 50, "{checked}");
}

#[test]
fn the_good_base_config_is_valid() {
    let dir = TempDir::new("config-base");
    Config::parse(&base(), &dir.0.join("pacer.toml"), &host()).unwrap();
}

#[test]
fn named_cases_say_what_was_expected_and_found() {
    let dir = TempDir::new("config-named");
    let path = dir.0.join("pacer.toml");
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "cpus = \"0-1\"",
            "cpus = 0",
            &["host.cpus: expected a CPU list", "found the integer 0"],
        ),
        (
            "vcpus = 2",
            "vcpus = \"abc\"",
            &["vm[0].vcpus: expected an integer from 1 to 254, found the string \"abc\""],
        ),
        (
            "workload = { name = \"cpu\", duration_ms = 500, report_ms = 100 }",
            "workload = 1979-05-27T07:32:00Z",
            &["vm[0].workload: expected a workload", "found the date-time 1979-05-27T07:32:00Z"],
        ),
        (
            "policy = \"haiku\"",
            "policy = \"fifo\"",
            &["host.policy: expected one of \"haiku\"", "found the string \"fifo\""],
        ),
        (
            "name = \"alpha\"",
            "name = \"al\\npha\"",
            &["vm[0].name", "al\\npha"],
        ),
        (
            "duration_ms = 500,",
            "duration_ms = -5,",
            &["vm[0].workload.duration_ms: expected an integer from 1 to 86400000 (milliseconds), found \"-5\""],
        ),
        (
            "duration_ms = 500,",
            "duration_ms = nan,",
            &["vm[0].workload.duration_ms", "found \"NaN\""],
        ),
        (
            "name = \"cpu\"",
            "name = \"frobnicate\"",
            &["vm[0].workload.name: expected one of cpu, sleep", "found \"frobnicate\""],
        ),
        (
            "memory_mib = 32\nkernel",
            "memory_mib = 1\nkernel",
            &["vm[0].memory_mib: expected an integer number of MiB from 2"],
        ),
        (
            "cmdline = \"debug=1\"",
            "cmdline = \"debug=é\"",
            &["vm[0].cmdline: expected printable ASCII characters, found \"é\" at character 7"],
        ),
        (
            "timeout_s = 30",
            "timeout_s = 1e-10",
            &["vm[0].timeout_s: expected a number of seconds from 0.001"],
        ),
        (
            "log_dir = \"logs\"",
            "log_dir = \"pacer.toml/logs\"",
            &["host.log_dir: expected a directory Pacer can create and write", "not a directory"],
        ),
    ];
    for (from, to, needles) in cases {
        let text = base().replacen(from, to, 1);
        assert_ne!(text, base(), "{from} not in the base config");
        std::fs::write(&path, &text).unwrap();
        let e = match Config::parse(&text, &path, &host()) {
            Ok(_) => panic!("{to}: accepted"),
            Err(e) => e.to_string(),
        };
        for n in *needles {
            assert!(e.contains(n), "{to}: {n:?} not in\n{e}");
        }
    }
}

#[test]
fn memory_below_the_kernel_image_is_refused() {
    let dir = TempDir::new("config-memory");
    let path = dir.0.join("pacer.toml");
    // A kernel whose one segment ends at 40 MiB.
    let mut elf = common::tiny_elf(&[0xf4]);
    // p_memsz of the first program header (64 + 40).
    elf[104..112].copy_from_slice(&(39u64 << 20).to_le_bytes());
    std::fs::write(dir.0.join("big.elf"), &elf).unwrap();
    let text =
        "[[vm]]\nname = \"a\"\nvcpus = 1\nmemory_mib = 32\nkernel = \"big.elf\"\n".to_string();
    let e = Config::parse(&text, &path, &host())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("vm[0].memory_mib: expected at least 40 MiB for the kernel"),
        "{e}"
    );
    assert!(e.contains(":4:14:"), "{e}");
    let ok = text.replace("memory_mib = 32", "memory_mib = 40");
    Config::parse(&ok, &path, &host()).unwrap();
}

#[test]
fn host_resources_are_checked() {
    let dir = TempDir::new("config-resources");
    let path = dir.0.join("pacer.toml");
    let host = HostInfo {
        online: HostCpuSet::parse_list("0-3").unwrap(),
        resources: HostResources {
            memory_mib: Some(48),
            max_vcpus_per_vm: Some(1),
            max_open_files: None,
            max_threads: None,
        },
    };
    let e = Config::parse(&base(), &path, &host)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("vm[0].vcpus: expected at most 1 vCPUs (KVM's limit"),
        "{e}"
    );
    assert!(
        e.contains("vm[1].memory_mib: expected the VMs together to fit in the host's 48 MiB"),
        "{e}"
    );
}
