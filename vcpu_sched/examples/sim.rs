//! Run a simulation scenario and print its metrics table (the same front
//! end as `pacer sim`, `vcpu_sched::sim::front`).
//!
//! ```text
//! cargo run --release -p vcpu_sched --example sim -- vcpu_sched/scenarios/01_overload_balance.toml \
//!     [--policy haiku|global-rr|pinned|eevdf] [--compare] [--json out.json] [--seed N]
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
use vcpu_sched::sim::front::{run_scenario, FrontError, SimOptions};
use vcpu_sched::PolicyKind;

fn usage() -> String {
    "usage: sim SCENARIO.toml [--policy haiku|global-rr|pinned|eevdf] [--compare] [--json OUT] \
     [--seed N] [--duration-ms N] [--topology SPEC] [--scale N] [--quiet] [--trace N] [--snapshot]"
        .to_string()
}

fn parse_args() -> Result<SimOptions, String> {
    let mut it = std::env::args().skip(1);
    let mut a = SimOptions {
        scale: 1,
        ..Default::default()
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
            "--json" => a.json = Some(it.next().ok_or("--json needs a path")?.into()),
            "--seed" => a.seed = Some(num(it.next(), "--seed")?),
            "--duration-ms" => a.duration_ms = Some(num(it.next(), "--duration-ms")?),
            "--topology" => a.topology = Some(it.next().ok_or("--topology needs a spec")?),
            "--scale" => a.scale = num(it.next(), "--scale")? as u32,
            "--quiet" => a.quiet = true,
            "--snapshot" => a.snapshot = true,
            "--trace" => a.trace = num(it.next(), "--trace")?,
            "-h" | "--help" => return Err(usage()),
            f if !f.starts_with('-') && a.file.as_os_str().is_empty() => a.file = f.into(),
            other => return Err(format!("unexpected argument {other:?}\n{}", usage())),
        }
    }
    if a.file.as_os_str().is_empty() {
        return Err(usage());
    }
    Ok(a)
}

fn main() -> ExitCode {
    let opts = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr());
    match run_scenario(&opts, &mut out, &mut err) {
        Ok(_) => ExitCode::SUCCESS,
        Err(FrontError::Scenario(e)) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
        Err(FrontError::PolicyFailed { .. }) => ExitCode::FAILURE,
        Err(FrontError::Io(e)) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
