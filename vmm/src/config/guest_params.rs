//! The bench guest's workload parameters, checked before anything runs.
//!
//! The guest reads `key=value` words from its command line
//! (guests/PROTOCOL.md, "Kernel command line"). A value it cannot use used
//! to be replaced by its default without a word, and an unknown workload
//! only showed as exit status 2; so `pacer validate` checks the config's
//! `workload` against the table below, the same table the protocol
//! documents: which keys exist, which workloads use them, and what values
//! they take. Values are what the guest parses: unsigned decimal integers
//! (no sign, no separators) or one of a few names.
//!
//! `tsc_khz` and `vcpus` are set by the VMM and refused by the config itself.

/// Workloads of the bench guest.
pub const WORKLOADS: &[&str] = &[
    "cpu",
    "sleep",
    "pingpong",
    "burst",
    "spinlock",
    "barrier",
    "shootdown",
    "server",
    "mixed",
    "boot",
    "triple_fault",
    "idle",
    "panic",
    "hostile",
];

/// Workloads that may be entries of `mixed=`.
pub const MIXABLE: &[&str] = &["cpu", "sleep", "pingpong", "burst", "spinlock"];

/// What a parameter's value is.
#[derive(Debug, Clone, Copy)]
pub enum ParamKind {
    /// An unsigned decimal integer in `min..=max`.
    Int {
        min: u64,
        max: u64,
        unit: &'static str,
    },
    /// One of these names.
    Choice(&'static [&'static str]),
    /// `mixed=`: one [`MIXABLE`] workload per vCPU, comma-separated.
    PerVcpuWorkloads,
}

/// One parameter of the bench guest.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub key: &'static str,
    pub kind: ParamKind,
    /// Workloads that use it (empty: every workload).
    pub used_by: &'static [&'static str],
}

const fn int(
    key: &'static str,
    min: u64,
    max: u64,
    unit: &'static str,
    used_by: &'static [&'static str],
) -> Param {
    Param {
        key,
        kind: ParamKind::Int { min, max, unit },
        used_by,
    }
}

/// Every parameter (guests/PROTOCOL.md's table).
pub const PARAMS: &[Param] = &[
    Param {
        key: "workload",
        kind: ParamKind::Choice(WORKLOADS),
        used_by: &[],
    },
    int("duration_ms", 1, 86_400_000, "milliseconds", &[]),
    int("report_ms", 1, 86_400_000, "milliseconds", &["cpu"]),
    Param {
        key: "apic",
        kind: ParamKind::Choice(&["x2apic", "xapic"]),
        used_by: &[],
    },
    Param {
        key: "timer",
        kind: ParamKind::Choice(&["deadline", "oneshot"]),
        used_by: &[],
    },
    Param {
        key: "pv_eoi",
        kind: ParamKind::Choice(&["on", "off"]),
        used_by: &[],
    },
    Param {
        key: "steal",
        kind: ParamKind::Choice(&["on", "off"]),
        used_by: &[],
    },
    Param {
        key: "pv_spin",
        kind: ParamKind::Choice(&["on", "off"]),
        used_by: &["spinlock"],
    },
    int("interval_us", 1, 10_000_000, "microseconds", &["sleep"]),
    int("period_us", 1, 10_000_000, "microseconds", &["burst"]),
    int("run_us", 1, 10_000_000, "microseconds", &["burst"]),
    int(
        "wakes",
        1,
        1_000_000_000,
        "wakes",
        &["sleep", "burst", "server"],
    ),
    int("rate", 1, 10_000_000, "requests per second", &["server"]),
    int("seed", 0, 4_294_967_295, "a PRNG seed", &["server"]),
    Param {
        key: "lock",
        kind: ParamKind::Choice(&["on", "off"]),
        used_by: &["server"],
    },
    int("touch_kib", 0, 256, "KiB", &["server"]),
    int("cs_ns", 0, 1_000_000_000, "nanoseconds", &["spinlock"]),
    int("gap_ns", 0, 1_000_000_000, "nanoseconds", &["spinlock"]),
    int(
        "work_us",
        0,
        10_000_000,
        "microseconds",
        &["barrier", "shootdown", "server"],
    ),
    Param {
        key: "mixed",
        kind: ParamKind::PerVcpuWorkloads,
        used_by: &["mixed"],
    },
    int("ap_skip", 1, 253, "a vCPU index", &[]),
    int(
        "flood_kib",
        0,
        1_048_576,
        "KiB of console output",
        &["hostile"],
    ),
    int(
        "flood_records",
        0,
        100_000_000,
        "result records",
        &["hostile"],
    ),
    int("random_ports", 0, 100_000_000, "port writes", &["hostile"]),
    int("random_mmio", 0, 100_000_000, "MMIO writes", &["hostile"]),
];

/// Keys the VMM sets itself (the config refuses them).
pub const RESERVED: &[&str] = &["tsc_khz", "vcpus"];

/// The guest's default `period_us` (`run_us` must not exceed it).
const DEFAULT_PERIOD_US: u64 = 1000;
/// The guest's default `interval_us`, `rate` and `duration_ms`.
const DEFAULT_INTERVAL_US: u64 = 1000;
const DEFAULT_RATE: u64 = 1000;
const DEFAULT_DURATION_MS: u64 = 1000;

/// One refused parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamError {
    /// The key at fault (`workload` for the workload name).
    pub key: String,
    /// `expected ..., found ...`.
    pub message: String,
}

fn err(key: &str, message: String) -> ParamError {
    ParamError {
        key: key.to_string(),
        message,
    }
}

fn found(value: &str) -> String {
    crate::text::quoted(value)
}

fn names(list: &[&str]) -> String {
    list.join(", ")
}

/// Parse an unsigned decimal exactly as the guest does (digits only).
fn parse_uint(v: &str) -> Option<u64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// Why one parameter's value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ValueError {
    #[error("expected an integer from {min} to {max} ({unit}), found {}", found(.value))]
    Int {
        min: u64,
        max: u64,
        unit: &'static str,
        value: String,
    },
    #[error("expected one of {}, found {}{}", names(.list), found(.value), crate::suggest::hint(.value, .list.iter().copied()))]
    Choice {
        list: &'static [&'static str],
        value: String,
    },
    #[error("expected one of {} per vCPU, comma-separated, found {}{}", names(MIXABLE), found(.0), crate::suggest::hint(.0, MIXABLE.iter().copied()))]
    NotMixable(String),
    #[error("expected one workload per vCPU ({vcpus}), found {count} in {}", found(.value))]
    PerVcpuCount {
        vcpus: u32,
        count: usize,
        value: String,
    },
}

fn check_value(p: &Param, value: &str, vcpus: u32) -> Result<(), ValueError> {
    match p.kind {
        ParamKind::Int { min, max, unit } => match parse_uint(value) {
            Some(x) if (min..=max).contains(&x) => Ok(()),
            _ => Err(ValueError::Int {
                min,
                max,
                unit,
                value: value.to_string(),
            }),
        },
        ParamKind::Choice(list) if list.contains(&value) => Ok(()),
        ParamKind::Choice(list) => Err(ValueError::Choice {
            list,
            value: value.to_string(),
        }),
        ParamKind::PerVcpuWorkloads => {
            let entries: Vec<&str> = value.split(',').collect();
            if let Some(bad) = entries.iter().find(|e| !MIXABLE.contains(e)) {
                return Err(ValueError::NotMixable(bad.to_string()));
            }
            if entries.len() != vcpus as usize {
                return Err(ValueError::PerVcpuCount {
                    vcpus,
                    count: entries.len(),
                    value: value.to_string(),
                });
            }
            Ok(())
        }
    }
}

/// Check a workload's `key=value` arguments (in command-line order) for a
/// VM of `vcpus` vCPUs.
pub fn check(args: &[(String, String)], vcpus: u32) -> Vec<ParamError> {
    let mut errors = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (k, _) in args {
        if seen.contains(&k.as_str()) {
            errors.push(err(
                k,
                "expected each parameter once, found it given twice".into(),
            ));
        }
        seen.push(k);
    }
    let get = |key: &str| args.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v);
    let workload = get("workload").map(String::as_str).unwrap_or("cpu");
    // The workloads that run: `mixed`'s entries too.
    let mut running: Vec<&str> = vec![workload];
    if workload == "mixed" {
        match get("mixed") {
            Some(m) => running.extend(m.split(',')),
            None => errors.push(err(
                "mixed",
                format!(
                    "expected mixed = one of {} per vCPU for workload mixed, found nothing",
                    names(MIXABLE)
                ),
            )),
        }
    }
    for (key, value) in args {
        if RESERVED.contains(&key.as_str()) {
            continue;
        }
        let Some(p) = PARAMS.iter().find(|p| p.key == key) else {
            let known: Vec<&str> = PARAMS.iter().map(|p| p.key).collect();
            errors.push(err(
                key,
                format!(
                    "expected a parameter of the bench guest ({}), found the unknown key {}{}",
                    names(&known),
                    found(key),
                    crate::suggest::hint(key, known.iter().copied())
                ),
            ));
            continue;
        };
        if let Err(m) = check_value(p, value, vcpus) {
            errors.push(err(key, m.to_string()));
            continue;
        }
        if !p.used_by.is_empty() && !running.iter().any(|w| p.used_by.contains(w)) {
            errors.push(err(
                key,
                format!(
                    "expected only with workload {}{}, found it with workload {workload} (the guest would ignore it)",
                    names(p.used_by),
                    if p.used_by == ["mixed"] { "" } else { " (or mixed)" }
                ),
            ));
        }
    }
    if let Some(skip) = get("ap_skip").and_then(|v| parse_uint(v)) {
        if skip >= u64::from(vcpus) {
            errors.push(err(
                "ap_skip",
                format!(
                    "expected a vCPU index from 1 to {}, found {skip}",
                    vcpus.saturating_sub(1)
                ),
            ));
        }
    }
    if let Some(run) = get("run_us").and_then(|v| parse_uint(v)) {
        let period = get("period_us")
            .and_then(|v| parse_uint(v))
            .unwrap_or(DEFAULT_PERIOD_US);
        if run > period {
            errors.push(err(
                "run_us",
                format!("expected at most period_us ({period}), found {run}"),
            ));
        }
    }
    if let Some(e) = check_wakes(&get, &running) {
        errors.push(e);
    }
    errors
}

/// `wakes=N` ends a latency workload after N wakes, but never after
/// `duration_ms`: refuse a count the run is too short to reach even when
/// every period is on time, so a long run is never silently cut short.
fn check_wakes<'a>(
    get: &impl Fn(&str) -> Option<&'a String>,
    running: &[&str],
) -> Option<ParamError> {
    let wakes = get("wakes").and_then(|v| parse_uint(v))?;
    let uint = |key: &str, default: u64| get(key).and_then(|v| parse_uint(v)).unwrap_or(default);
    let duration_ms = uint("duration_ms", DEFAULT_DURATION_MS);
    let mut periods: Vec<(&str, f64)> = [
        ("sleep", "interval_us", DEFAULT_INTERVAL_US),
        ("burst", "period_us", DEFAULT_PERIOD_US),
    ]
    .into_iter()
    .filter(|(w, _, _)| running.contains(w))
    .map(|(_, key, default)| (key, uint(key, default) as f64))
    .collect();
    if running.contains(&"server") {
        // Poisson arrivals: 1 / rate apart on average.
        periods.push(("rate", 1e6 / uint("rate", DEFAULT_RATE).max(1) as f64));
    }
    let (key, every_us) = periods.into_iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
    let needed_ms = (wakes as f64 * every_us / 1000.0).ceil();
    (needed_ms > duration_ms as f64).then(|| {
        let fits = (duration_ms as f64 * 1000.0 / every_us).floor();
        let per = if key == "rate" {
            format!("{fits} = {duration_ms} ms at rate {}/s", uint("rate", DEFAULT_RATE))
        } else {
            format!("{fits} = {duration_ms} ms / {every_us} us")
        };
        err(
            "wakes",
            format!(
                "expected at most the wakes duration_ms holds at one per {key} ({per}) so that the run can reach them, found {wakes} (raise duration_ms to {needed_ms})"
            ),
        )
    })
}

/// Split command-line words into `(key, value)` (a word without `=` has an
/// empty value).
pub fn split_args<'a>(words: impl IntoIterator<Item = &'a str>) -> Vec<(String, String)> {
    words
        .into_iter()
        .map(|w| match w.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (w.to_string(), String::new()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &str, vcpus: u32) -> Vec<ParamError> {
        check(&split_args(line.split_whitespace()), vcpus)
    }

    fn keys(line: &str, vcpus: u32) -> Vec<String> {
        run(line, vcpus).into_iter().map(|e| e.key).collect()
    }

    /// The table here and the one in guests/PROTOCOL.md name the same
    /// keys, workloads, choices and integer ranges.
    #[test]
    fn matches_the_protocol_table() {
        let text = include_str!("../../../guests/PROTOCOL.md");
        let rows: Vec<(String, String)> = text
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let key = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                Some((key.to_string(), cells.get(2)?.to_string()))
            })
            .filter(|(k, _)| k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .collect();
        let ticked = |cell: &str| -> Vec<String> {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        };
        let mut documented = Vec::new();
        for (key, accepted) in &rows {
            if RESERVED.contains(&key.as_str()) {
                continue;
            }
            // Only the command-line table: its rows have a range or names.
            let Some(p) = PARAMS.iter().find(|p| p.key == key) else {
                panic!("PROTOCOL.md documents `{key}` ({accepted}); guest_params does not");
            };
            documented.push(p.key);
            match p.kind {
                ParamKind::Int { min, max, .. } => {
                    let range: Vec<u64> = accepted
                        .split(',')
                        .next()
                        .unwrap_or("")
                        .split('-')
                        .map(|n| n.trim().parse().unwrap_or(u64::MAX))
                        .collect();
                    assert_eq!(range, vec![min, max], "{key}: {accepted}");
                }
                ParamKind::Choice(list) => assert_eq!(ticked(accepted), list, "{key}"),
                ParamKind::PerVcpuWorkloads => {
                    let names: Vec<String> = ticked(accepted)
                        .into_iter()
                        .filter(|w| w != "vcpus")
                        .collect();
                    assert_eq!(names, MIXABLE, "{key}");
                }
            }
        }
        for p in PARAMS {
            assert!(
                documented.contains(&p.key),
                "{} is not in PROTOCOL.md",
                p.key
            );
        }
    }

    #[test]
    fn good_workloads_pass() {
        for line in [
            "workload=cpu duration_ms=500 report_ms=100",
            "workload=sleep interval_us=250 duration_ms=1000 apic=xapic timer=oneshot",
            "workload=burst period_us=1000 run_us=300",
            "workload=sleep interval_us=100 wakes=1000000 duration_ms=100000",
            "workload=burst wakes=1000",
            "workload=server rate=20000 work_us=30 seed=7 lock=on touch_kib=64 wakes=1000000 duration_ms=50000",
            "workload=spinlock cs_ns=0 gap_ns=2000",
            "workload=pingpong",
            "workload=boot",
            "workload=idle",
        ] {
            assert_eq!(run(line, 2), vec![], "{line}");
        }
        assert_eq!(
            run(
                "workload=mixed mixed=cpu,sleep,burst interval_us=10 run_us=5",
                3
            ),
            vec![]
        );
    }

    #[test]
    fn near_misses_of_workloads_and_parameters_are_named() {
        for (line, key, hint) in [
            ("workload=slep", "workload", "did you mean \"sleep\"?"),
            (
                "workload=sleep intervl_us=5",
                "intervl_us",
                "did you mean \"interval_us\"?",
            ),
            (
                "workload=mixed mixed=cpu,slep",
                "mixed",
                "did you mean \"sleep\"?",
            ),
            (
                "workload=sleep apic=x2apc",
                "apic",
                "did you mean \"x2apic\"?",
            ),
        ] {
            let errs = run(line, 2);
            assert!(
                errs.iter()
                    .any(|e| e.key == key && e.message.ends_with(hint)),
                "{line}: {errs:?}"
            );
        }
        // Nothing near: no guess.
        let errs = run("workload=frobnicate", 2);
        assert!(!errs[0].message.contains("did you mean"), "{errs:?}");
    }

    #[test]
    fn bad_values_name_the_key() {
        for (line, key, needle) in [
            ("workload=cpu duration_ms=-5", "duration_ms", "found \"-5\""),
            (
                "workload=cpu duration_ms=NaN",
                "duration_ms",
                "1 to 86400000",
            ),
            ("workload=cpu duration_ms=0", "duration_ms", "found \"0\""),
            ("workload=cpu duration_ms=5.5", "duration_ms", "integer"),
            ("workload=frobnicate", "workload", "found \"frobnicate\""),
            ("workload=cpu speed=3", "speed", "unknown key"),
            (
                "workload=cpu interval_us=5",
                "interval_us",
                "workload sleep",
            ),
            ("workload=burst run_us=2000", "run_us", "period_us (1000)"),
            (
                "workload=burst period_us=10 run_us=20",
                "run_us",
                "period_us (10)",
            ),
            ("workload=sleep apic=x3apic", "apic", "x2apic, xapic"),
            ("workload=sleep wakes=0", "wakes", "from 1 to 1000000000"),
            ("workload=cpu wakes=5", "wakes", "workload sleep, burst"),
            (
                "workload=sleep interval_us=100 wakes=1000000 duration_ms=99999",
                "wakes",
                "999990 = 99999 ms / 100 us",
            ),
            (
                "workload=server rate=10000 wakes=1000001 duration_ms=100000",
                "wakes",
                "1000000 = 100000 ms at rate 10000/s",
            ),
            ("workload=server lock=maybe", "lock", "on, off"),
            ("workload=server touch_kib=257", "touch_kib", "0 to 256"),
            ("workload=sleep rate=5", "rate", "workload server"),
            (
                "workload=burst period_us=2000 wakes=501",
                "wakes",
                "raise duration_ms to 1002",
            ),
            ("workload=mixed mixed=cpu,idle", "mixed", "found \"idle\""),
            ("workload=mixed mixed=cpu", "mixed", "per vCPU (2)"),
            ("workload=mixed", "mixed", "found nothing"),
            ("workload=cpu ap_skip=5", "ap_skip", "from 1 to 1"),
            (
                "workload=cpu duration_ms=1 duration_ms=2",
                "duration_ms",
                "twice",
            ),
            (
                "workload=cpu report_ms=99999999999999999999999",
                "report_ms",
                "integer",
            ),
        ] {
            let errs = run(line, 2);
            assert!(
                errs.iter()
                    .any(|e| e.key == key && e.message.contains(needle)),
                "{line}: {errs:?}"
            );
        }
        assert_eq!(
            keys("workload=cpu cs_ns=5 gap_ns=1", 1),
            vec!["cs_ns", "gap_ns"]
        );
    }
}
