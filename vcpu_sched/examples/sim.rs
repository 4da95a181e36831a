//! Run a simulation scenario and print its metrics table.
//!
//! ```text
//! cargo run --release -p vcpu_sched --example sim -- vcpu_sched/scenarios/01_overload_balance.toml \
//!     [--policy haiku|global-rr|pinned] [--compare] [--json out.json] [--seed N]
//!     [--duration-ms N] [--topology SPEC] [--scale N] [--quiet] [--trace N] [--snapshot]
//! ```
//!
//! `--compare` runs the scenario under every policy and prints one summary
//! line per policy after the tables. `--scale N` multiplies every group's
//! vCPU count (grow a scenario with `--topology`), `--trace N` prints the
//! first N scheduler calls, `--snapshot` adds the policy's own table. The
//! last lines always report the simulator's speed (events and scheduler
//! calls per host second).

use std::process::ExitCode;
use vcpu_sched::sim::{self, SimReport, Workload};
use vcpu_sched::PolicyKind;

struct Args {
    file: String,
    policies: Vec<PolicyKind>,
    json: Option<String>,
    seed: Option<u64>,
    duration_ms: Option<u64>,
    topology: Option<String>,
    scale: u32,
    quiet: bool,
    trace: u64,
    snapshot: bool,
}

fn usage() -> String {
    "usage: sim SCENARIO.toml [--policy haiku|global-rr|pinned] [--compare] [--json OUT] \
     [--seed N] [--duration-ms N] [--topology SPEC] [--scale N] [--quiet] [--trace N] [--snapshot]"
        .to_string()
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        file: String::new(),
        policies: Vec::new(),
        json: None,
        seed: None,
        duration_ms: None,
        topology: None,
        scale: 1,
        quiet: false,
        trace: 0,
        snapshot: false,
    };
    let num = |v: Option<String>, what: &str| -> Result<u64, String> {
        v.ok_or(format!("{what} needs a value"))?
            .parse()
            .map_err(|e| format!("{what}: {e}"))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--policy" => a
                .policies
                .push(it.next().ok_or("--policy needs a value")?.parse()?),
            "--compare" => a.policies = PolicyKind::ALL.to_vec(),
            "--json" => a.json = Some(it.next().ok_or("--json needs a path")?),
            "--seed" => a.seed = Some(num(it.next(), "--seed")?),
            "--duration-ms" => a.duration_ms = Some(num(it.next(), "--duration-ms")?),
            "--topology" => a.topology = Some(it.next().ok_or("--topology needs a spec")?),
            "--scale" => a.scale = num(it.next(), "--scale")? as u32,
            "--quiet" => a.quiet = true,
            "--snapshot" => a.snapshot = true,
            "--trace" => a.trace = num(it.next(), "--trace")?,
            "-h" | "--help" => return Err(usage()),
            f if !f.starts_with('-') && a.file.is_empty() => a.file = f.to_string(),
            other => return Err(format!("unexpected argument {other:?}\n{}", usage())),
        }
    }
    if a.file.is_empty() {
        return Err(usage());
    }
    Ok(a)
}

fn summary_line(r: &SimReport) -> String {
    let worst_p99 = r
        .groups
        .iter()
        .map(|g| g.wake_latency.p99)
        .max()
        .unwrap_or(0);
    let min_jain = r
        .groups
        .iter()
        .map(|g| g.jain_fairness)
        .fold(1.0f64, f64::min);
    format!(
        "{:<12} bursts/s {:>11.0}  useful CPUs {:>7.3}  worst group p99 wake {:>9}  min Jain {:.3}  ctxsw/s/CPU {:>9.0}  violations {}",
        r.policy,
        r.total.bursts_per_sec,
        r.total.useful_cpus,
        sim::report::fmt_ns(worst_p99),
        min_jain,
        r.context_switches_per_sec_per_cpu(),
        r.violations.total()
    )
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut w = match Workload::from_file(&args.file) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Some(s) = args.seed {
        w.seed = s;
    }
    if let Some(d) = args.duration_ms {
        w.duration_ms = d;
        w.warmup_ms = w.warmup_ms.min(d / 10);
    }
    if let Some(t) = &args.topology {
        w.topology = t.clone();
    }
    if args.scale > 1 {
        w = w.scale_groups(args.scale);
    }
    let policies = if args.policies.is_empty() {
        vec![w.sched.policy]
    } else {
        args.policies.clone()
    };
    if !w.description.is_empty() && !args.quiet {
        println!("# {}", w.description);
    }
    let mut reports = Vec::new();
    for p in &policies {
        let mut wp = w.clone();
        wp.sched.policy = *p;
        let run = sim::Simulator::new(wp).and_then(|s| s.with_trace(args.trace).run());
        match run {
            Ok(r) => {
                if !args.quiet {
                    println!("{}", r.to_table());
                }
                if args.snapshot {
                    println!("{}", r.snapshot.to_table());
                }
                reports.push(r);
            }
            Err(e) => eprintln!("policy {p:?}: {e}"),
        }
    }
    if reports.len() > 1 || args.quiet {
        println!("summary:");
        for r in &reports {
            println!("  {}", summary_line(r));
        }
    }
    for r in &reports {
        println!(
            "speed [{}]: {} events, {} scheduler calls in {:.1} ms host time = {:.2} M events/s, {:.2} M scheduler calls/s",
            r.policy,
            r.events,
            r.sched_calls,
            r.host.wall_ns as f64 / 1e6,
            r.host.events_per_sec / 1e6,
            r.host.sched_calls_per_sec / 1e6
        );
    }
    if let Some(path) = &args.json {
        let text = if reports.len() == 1 {
            reports[0].to_json()
        } else {
            serde_json::to_string_pretty(&reports).unwrap_or_default()
        };
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("{path}: {e}");
            return ExitCode::FAILURE;
        }
    }
    if reports.len() != policies.len() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
