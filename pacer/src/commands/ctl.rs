//! `pacer ctl SOCKET ...`: the client of a running `pacer run --api-socket
//! SOCKET` (Pacer's `virsh` / `ch-remote`), and the `--api-*` options of
//! `pacer run`.
//!
//! ```text
//! pacer ctl SOCKET ls                       the VMs, the policy, the mode
//! pacer ctl SOCKET stats [VM]               per vCPU: where it runs, at what priority, run/wait/wake p99
//! pacer ctl SOCKET set VM[/VCPU] KEY=VALUE...   affinity, priority, class, weight, cap, reservation;
//!                                           a VM's latency_bound_us + bound_budget (checked as the config is)
//! pacer ctl SOCKET set KEY=VALUE...         host keys: mode, offline, online
//! pacer ctl SOCKET pause VM | resume VM | stop VM
//! pacer ctl SOCKET watch [--count N]        the per-second status
//! ```
//! `--format json` prints the API's documents as they are (`--json`, the
//! old switch, still works with a warning: every other `--json` takes a
//! FILE). `--timeout SECONDS`
//! (default 10) bounds each answer, however the server sends it: none
//! whole by then is "no answer from SOCKET within N s". Errors are one
//! line; exit status 0 done, 1 the API failed, cannot be reached or did
//! not answer in time, 2 refused (bad input: the server's reason names the
//! target and key).

use crate::output::{out, EXIT_BAD_INPUT, EXIT_OK, EXIT_VM_FAILED};
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;
use vmm::api::client::{Client, ClientError};
use vmm::api::set::SetRequest;

/// The control API options of `pacer run`.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// Serve the control API on this Unix socket (mode 0600), for `pacer
    /// ctl` and `curl --unix-socket`.
    #[arg(long, value_name = "PATH")]
    pub api_socket: Option<PathBuf>,
    /// Also serve the live page (and read-only API) on this loopback TCP
    /// address, e.g. 127.0.0.1:8080 (port 0: any free port, printed).
    #[arg(long, value_name = "ADDR")]
    pub api_http: Option<String>,
}

impl ApiArgs {
    pub fn options(&self) -> vmm::api::ApiOptions {
        vmm::api::ApiOptions {
            socket: self.api_socket.clone(),
            http: self.api_http.clone(),
        }
    }
}

/// The line `pacer run` prints once the API listens.
pub fn api_ready_line(
    socket: Option<&std::path::Path>,
    page: Option<std::net::SocketAddr>,
) -> String {
    let mut parts = Vec::new();
    if let Some(s) = socket {
        parts.push(format!(
            "control API on {} (pacer ctl {} ls)",
            s.display(),
            s.display()
        ));
    }
    if let Some(a) = page {
        parts.push(format!("live page on http://{a}/"));
    }
    format!("pacer: {}", parts.join("; "))
}

/// The closing text of `pacer ctl --help`.
pub const HELP: &str = "Examples:
  pacer run configs/demo.toml --api-socket /tmp/pacer.sock &
  pacer ctl /tmp/pacer.sock ls
  pacer ctl /tmp/pacer.sock stats latency
  pacer ctl /tmp/pacer.sock set hog priority=5
  pacer ctl /tmp/pacer.sock set mode=power-saving
  pacer ctl /tmp/pacer.sock watch --count 5

Each answer must be whole within --timeout seconds (default 10), else
\"no answer from SOCKET within N s\" (exit 1).

Exit codes:
  0  done
  1  the API failed, cannot be reached or did not answer in time
  2  refused: bad input (the server's reason names the target and key)";

/// How `pacer ctl` prints an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables and lines.
    Table,
    /// The API's JSON document, one per line.
    Json,
}

#[derive(Debug, Args)]
pub struct CtlArgs {
    /// The API socket of a running `pacer run --api-socket`.
    #[arg(value_name = "SOCKET")]
    pub socket: PathBuf,
    /// Print tables, or the API's JSON documents as they are (json).
    #[arg(long, global = true, value_enum, default_value = "table")]
    pub format: Format,
    /// Deprecated: --format json (every other --json takes a FILE).
    #[arg(long, global = true, hide = true)]
    pub json: bool,
    /// Give up on an answer not whole within this many seconds (on
    /// `watch`: the head, then each sample, at least 5 s apart).
    #[arg(long, global = true, value_name = "SECONDS", default_value = "10", value_parser = deadline)]
    pub timeout: Duration,
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// The exit codes every `pacer ctl` command shares.
macro_rules! ctl_exit_codes {
    () => {
        "

Exit codes:
  0  done
  1  the API failed, cannot be reached or did not answer in time
  2  refused: bad input (the server's reason names the target and key)"
    };
}

#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// List the VMs: state, vCPUs, core set, class, priority.
    #[command(after_help = concat!(
        "Examples:
  pacer ctl /tmp/pacer.sock ls
  pacer ctl /tmp/pacer.sock --format json ls | jq '.vms[].name'",
        ctl_exit_codes!()
    ))]
    Ls,
    /// Per vCPU: state, host CPU, affinity, priorities, run/wait time, wake latency.
    #[command(after_help = concat!(
        "Examples:
  pacer ctl /tmp/pacer.sock stats
  pacer ctl /tmp/pacer.sock stats latency        one VM's vCPUs",
        ctl_exit_codes!()
    ))]
    Stats {
        /// Only this VM.
        vm: Option<String>,
    },
    /// Change a VM's or vCPU's affinity, priority, class, weight, cap,
    /// reservation; a VM's latency_bound_us with bound_budget (none lifts
    /// it); or (no target) the host's mode, offline, online. E.g. `set
    /// web/1 affinity=1`, `set web priority=20`, `set mode=power-saving`.
    #[command(after_help = concat!(
        "Examples:
  pacer ctl /tmp/pacer.sock set web priority=20          a VM (its vCPUs inherit it)
  pacer ctl /tmp/pacer.sock set web/1 affinity=1         one vCPU
  pacer ctl /tmp/pacer.sock set web class=realtime priority=110
  pacer ctl /tmp/pacer.sock set web latency_bound_us=1000 bound_budget=20
  pacer ctl /tmp/pacer.sock set web latency_bound_us=none
  pacer ctl /tmp/pacer.sock set mode=power-saving        the host
  pacer ctl /tmp/pacer.sock set offline=1",
        ctl_exit_codes!()
    ))]
    Set {
        /// [VM[/VCPU]] KEY=VALUE...
        #[arg(required = true, num_args = 1..)]
        words: Vec<String>,
    },
    /// Pause every vCPU of a VM.
    #[command(after_help = concat!(
        "Examples:
  pacer ctl /tmp/pacer.sock pause hog",
        ctl_exit_codes!()
    ))]
    Pause {
        /// The VM's name.
        vm: String,
    },
    /// Resume a paused VM.
    #[command(after_help = concat!(
        "Examples:
  pacer ctl /tmp/pacer.sock resume hog",
        ctl_exit_codes!()
    ))]
    Resume {
        /// The VM's name.
        vm: String,
    },
    /// Stop a VM (its result says "stopped by request").
    #[command(after_help = concat!(
        "Examples:
  pacer ctl /tmp/pacer.sock stop hog",
        ctl_exit_codes!()
    ))]
    Stop {
        /// The VM's name.
        vm: String,
    },
    /// Follow the per-second status.
    #[command(after_help = concat!(
        "Examples:
  pacer ctl /tmp/pacer.sock watch
  pacer ctl /tmp/pacer.sock watch --count 5 --timeout 30",
        ctl_exit_codes!()
    ))]
    Watch {
        /// Stop after this many samples.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
}

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    #[error("{0}")]
    Client(#[from] ClientError),
    #[error("set: {0}")]
    Usage(String),
}

/// `pacer ctl`; returns the exit code.
pub fn main(args: CtlArgs) -> i32 {
    match run(&args) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("pacer ctl: {e}");
            match e {
                CtlError::Usage(_)
                | CtlError::Client(ClientError::Refused {
                    status: 400..=499, ..
                }) => EXIT_BAD_INPUT,
                _ => EXIT_VM_FAILED,
            }
        }
    }
}

fn run(args: &CtlArgs) -> Result<(), CtlError> {
    if args.json {
        crate::output::deprecated("pacer ctl --json", "--format json");
    }
    let json = args.json || args.format == Format::Json;
    let c = Client::with_deadline(&args.socket, args.timeout);
    let show = |v: &Value, table: fn(&Value) -> String| {
        if json {
            out(&format!("{v}\n"));
        } else {
            out(&table(v));
        }
    };
    match &args.command {
        CtlCommand::Ls => show(&c.get("/api/v1/vms", &[])?, ls_table),
        CtlCommand::Stats { vm } => {
            let q: Vec<(&str, &str)> = vm.iter().map(|v| ("vm", v.as_str())).collect();
            show(&c.get("/api/v1/stats", &q)?, stats_table)
        }
        CtlCommand::Set { words } => {
            let SetRequest { target, pairs } = set_words(words)?;
            let set: serde_json::Map<String, Value> = pairs
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            let body = json!({ "target": target, "set": set });
            show(&c.post("/api/v1/set", &body)?, set_lines)
        }
        CtlCommand::Pause { vm } | CtlCommand::Resume { vm } | CtlCommand::Stop { vm } => {
            let action = match &args.command {
                CtlCommand::Pause { .. } => "pause",
                CtlCommand::Resume { .. } => "resume",
                _ => "stop",
            };
            let path = format!(
                "/api/v1/vms/{}/{action}",
                vmm::api::http::percent_encode(vm)
            );
            show(&c.post(&path, &json!({}))?, |v| {
                format!(
                    "{}: {}\n",
                    v["vm"].as_str().unwrap_or("?"),
                    v["state"].as_str().unwrap_or("?")
                )
            })
        }
        CtlCommand::Watch { count } => {
            let mut seen = 0u64;
            c.events(|sample| {
                show(sample, watch_lines);
                seen += 1;
                count.is_none_or(|n| seen < n)
            })?;
        }
    }
    Ok(())
}

/// `--timeout`: seconds, more than 0 and at most a day.
fn deadline(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!(
            "expected seconds, more than 0 and at most 86400, found {}",
            vmm::text::quoted(text)
        )),
    }
}

/// `[VM[/VCPU]] KEY=VALUE...` to a target and pairs.
pub fn set_words(words: &[String]) -> Result<SetRequest, CtlError> {
    let (target, rest) = match words.first() {
        Some(w) if !w.contains('=') => (Some(w.clone()), &words[1..]),
        _ => (None, words),
    };
    if rest.is_empty() {
        return Err(CtlError::Usage(
            "expected KEY=VALUE after the target, found nothing".into(),
        ));
    }
    let mut pairs = Vec::new();
    for w in rest {
        match w.split_once('=') {
            Some((k, v)) if !k.is_empty() => pairs.push((k.to_string(), v.to_string())),
            _ => {
                return Err(CtlError::Usage(format!(
                    "expected KEY=VALUE, found {}",
                    vmm::text::quoted(w)
                )))
            }
        }
    }
    Ok(SetRequest { target, pairs })
}

/// The members of a JSON list (none if it is not one).
fn items(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten()
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Nanoseconds in a unit that fits.
fn duration(ns: &Value) -> String {
    let Some(ns) = ns.as_f64() else {
        return "-".into();
    };
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.0} us", ns / 1e3)
    }
}

fn percent(f: &Value) -> String {
    f.as_f64()
        .map_or("-".into(), |f| format!("{:.0}%", f * 100.0))
}

/// Rows in columns as wide as their widest cell.
fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        s.push_str(line.join("  ").trim_end());
        s.push('\n');
    }
    s
}

fn ls_table(v: &Value) -> String {
    let out_of_service = match v["cpus_out_of_service"].as_str() {
        None => String::new(),
        Some("") => ", all in service".into(),
        Some(l) => format!(", CPUs {l} out of service"),
    };
    let mut s = format!(
        "policy {}, mode {}, host CPUs {}{out_of_service}\n",
        text(&v["policy"]),
        text(&v["mode"]),
        text(&v["host_cpus"]),
    );
    let mut rows = vec![vec![
        "VM".into(),
        "STATE".into(),
        "VCPUS".into(),
        "CPUS".into(),
        "CLASS".into(),
        "PRIORITY".into(),
    ]];
    for vm in items(&v["vms"]) {
        rows.push(
            ["name", "state", "vcpus", "cpus", "class", "priority"]
                .iter()
                .map(|k| vm_value(vm, k))
                .collect(),
        );
    }
    s.push_str(&columns(&rows));
    s
}

/// A VM's value in `ls`: the one its vCPUs share, or (`null`: they
/// differ) each vCPU's as `VCPU=VALUE`, as `set` answers it.
fn vm_value(vm: &Value, key: &str) -> String {
    match (&vm[key], vm["per_vcpu"].as_array()) {
        (Value::Null, Some(per)) => per
            .iter()
            .map(|p| format!("{}={}", text(&p["vcpu"]), text(&p[key])))
            .collect::<Vec<_>>()
            .join(" "),
        (v, _) => text(v),
    }
}

fn stats_table(v: &Value) -> String {
    // The latency bound's columns, where some vCPU is promised one: its
    // bound, and the misses among its bounded wakes.
    let bounded = items(&v["vms"])
        .flat_map(|vm| items(&vm["vcpus"]))
        .any(|c| !c["latency_bound_ns"].is_null());
    let mut head = vec![
        "VCPU", "STATE", "CPU", "AFFINITY", "CLASS", "PRIO", "E", "RUN", "WAIT", "WAKE P99",
        "MIGR", "PREEMPT",
    ];
    if bounded {
        head.extend(["BOUND", "MISSED"]);
    }
    let mut rows = vec![head.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    let mut notes = String::new();
    for vm in items(&v["vms"]) {
        let name = text(&vm["name"]);
        let Some(vcpus) = vm["vcpus"].as_array() else {
            notes.push_str(&format!(
                "{name}: {} (no scheduler rows{})\n",
                text(&vm["state"]),
                if v["policy"] == "host" {
                    ": policy host"
                } else {
                    ""
                }
            ));
            continue;
        };
        for c in vcpus {
            let state = match (c["state"].as_str(), c["engine_state"].as_str()) {
                (_, Some("paused")) => "paused".to_string(),
                (Some(s), _) => s.to_string(),
                _ => "-".into(),
            };
            rows.push(vec![
                format!("{name}/{}", text(&c["vcpu"])),
                state,
                text(&c["host_cpu"]),
                text(&c["affinity"]),
                text(&c["class"]),
                text(&c["base_priority"]),
                text(&c["effective_priority"]),
                duration(&c["run_ns"]),
                duration(&c["ready_wait_ns"]),
                duration(&c["wake_latency"]["p99_ns"]),
                text(&c["migrations"]),
                text(&c["preemptions"]),
            ]);
            if bounded {
                let row = rows.last_mut().expect("just pushed");
                row.push(duration(&c["latency_bound_ns"]));
                row.push(if c["latency_bound_ns"].is_null() {
                    "-".into()
                } else {
                    format!("{}/{}", text(&c["bound_misses"]), text(&c["bounded_wakes"]))
                });
            }
        }
    }
    let mut s = format!(
        "policy {}, mode {}, t={:.1}s\n",
        text(&v["policy"]),
        text(&v["mode"]),
        v["t_run_ns"].as_f64().unwrap_or(0.0) / 1e9
    );
    s.push_str(&columns(&rows));
    s.push_str(&notes);
    s
}

fn set_lines(v: &Value) -> String {
    let target = text(&v["target"]);
    items(&v["changed"])
        .map(|c| {
            format!(
                "{target}: {} {} -> {}\n",
                text(&c["key"]),
                text(&c["previous"]),
                text(&c["value"])
            )
        })
        .collect()
}

fn watch_lines(v: &Value) -> String {
    let cpus: Vec<String> = items(&v["cpus"])
        .map(|c| {
            let who = match (c["vm"].as_str(), c["in_service"].as_bool()) {
                (_, Some(false)) => "out of service".to_string(),
                (Some(vm), _) => format!(
                    "{vm}/{} E {}",
                    text(&c["vcpu"]),
                    text(&c["effective_priority"])
                ),
                (None, _) => "idle".into(),
            };
            format!("CPU {}: {who}", text(&c["cpu"]))
        })
        .collect();
    let mut s = format!(
        "t={:.1}s {} {} | {}\n",
        v["t_run_ns"].as_f64().unwrap_or(0.0) / 1e9,
        text(&v["policy"]),
        text(&v["mode"]),
        cpus.join(" | ")
    );
    for vm in items(&v["vms"]) {
        let vcpus: Vec<String> = items(&vm["vcpus"])
            .map(|c| {
                format!(
                    "{} run {} wait {} p99 {}",
                    text(&c["vcpu"]),
                    percent(&c["run_fraction"]),
                    percent(&c["ready_wait_fraction"]),
                    duration(&c["wake_latency"]["p99_ns"])
                )
            })
            .collect();
        s.push_str(&format!(
            "  {} {} share {} | {}\n",
            text(&vm["name"]),
            text(&vm["state"]),
            percent(&vm["host_share"]),
            vcpus.join(" | ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_words_split_target_and_pairs() {
        let w = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        let r = set_words(&w("web/1 affinity=1 priority=20")).unwrap();
        assert_eq!(r.target.as_deref(), Some("web/1"));
        assert_eq!(r.pairs[1], ("priority".to_string(), "20".to_string()));
        let r = set_words(&w("mode=power-saving")).unwrap();
        assert_eq!((r.target, r.pairs.len()), (None, 1));
        assert!(set_words(&w("web"))
            .unwrap_err()
            .to_string()
            .contains("KEY=VALUE"));
        assert!(set_words(&w("web =1"))
            .unwrap_err()
            .to_string()
            .contains("\"=1\""));
    }

    #[test]
    fn a_timeout_is_positive_seconds() {
        assert_eq!(deadline("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(deadline("10"), Ok(Duration::from_secs(10)));
        for bad in ["0", "-1", "x", "NaN", "inf", "1e9"] {
            assert!(
                deadline(bad).unwrap_err().contains("expected seconds"),
                "{bad}"
            );
        }
    }

    #[test]
    fn tables_show_what_the_api_says() {
        let stats = json!({"policy": "haiku", "mode": "low-latency", "t_run_ns": 1_500_000_000u64, "vms": [
            {"name": "a", "state": "running", "vcpus": [{"vcpu": 0, "state": "running",
             "engine_state": "running", "host_cpu": 1, "affinity": "1", "class": "timeshare",
             "base_priority": 10, "effective_priority": 8, "run_ns": 1_500_000_000u64,
             "ready_wait_ns": 2_000_000, "wake_latency": null, "migrations": 3, "preemptions": 0}]},
            {"name": "b", "state": "starting", "vcpus": null}]});
        let ls = json!({"policy": "haiku", "mode": "low-latency", "host_cpus": "0-1",
            "cpus_out_of_service": "", "vms": [
            {"name": "a", "state": "running", "vcpus": 2, "live": true, "cpus": null,
             "class": "timeshare", "priority": 20, "per_vcpu": [
                {"vcpu": 0, "cpus": "0-1", "class": "timeshare", "priority": 20},
                {"vcpu": 1, "cpus": "1", "class": "timeshare", "priority": 20}]}]});
        let t = ls_table(&ls);
        assert!(
            t.contains("a   running  2      0=0-1 1=1  timeshare  20"),
            "{t}"
        );
        let t = stats_table(&stats);
        assert!(t.contains("a/0   running  1    1"), "{t}");
        assert!(t.contains("1.50 s  2.00 ms  -"), "{t}");
        assert!(t.contains("b: starting (no scheduler rows)"), "{t}");
        assert!(!t.contains("BOUND"), "no bound, no columns: {t}");
        // A bounded vCPU: its bound and its misses of its bounded wakes.
        let mut bounded = stats.clone();
        let row = &mut bounded["vms"][0]["vcpus"][0];
        row["latency_bound_ns"] = json!(2_000_000);
        row["bounded_wakes"] = json!(1200);
        row["bound_misses"] = json!(3);
        let t = stats_table(&bounded);
        assert!(
            t.lines()
                .nth(1)
                .unwrap()
                .ends_with("PREEMPT  BOUND    MISSED"),
            "{t}"
        );
        assert!(t.contains("3     0        2.00 ms  3/1200\n"), "{t}");
        let w = watch_lines(
            &json!({"t_run_ns": 2_000_000_000u64, "policy": "haiku", "mode": "low-latency",
            "cpus": [{"cpu": 0, "in_service": true, "vm": "a", "vcpu": 0, "effective_priority": 8},
                     {"cpu": 1, "in_service": false, "vm": null}],
            "vms": [{"name": "a", "state": "running", "host_share": 0.5, "vcpus": [
                {"vcpu": 0, "run_fraction": 0.97, "ready_wait_fraction": 0.0, "wake_latency": {"p99_ns": 310000}}]}]}),
        );
        assert!(
            w.starts_with("t=2.0s haiku low-latency | CPU 0: a/0 E 8 | CPU 1: out of service"),
            "{w}"
        );
        assert!(
            w.contains("a running share 50% | 0 run 97% wait 0% p99 310 us"),
            "{w}"
        );
    }
}
