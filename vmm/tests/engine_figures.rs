//! The scheduled engine's figures on real guests, every policy side by side
//! and interleaved (host, haiku with threads, haiku with workers, ...) so
//! that drift on a noisy host favours none. Not part of the default test
//! run: `ci/measure_engine.sh` runs it (release build):
//!
//! `cargo test --release -p vmm --test engine_figures -- --ignored --nocapture`
//!
//! - noisy neighbour: p50 and p99 wake latency the `sleep` VM's guest sees,
//!   and the `cpu` VM's throughput, next to each other on 2 CPUs;
//! - undercommitted: throughput of 2 one-vCPU `cpu` VMs on 2 CPUs;
//! - engine smoke: 2 VMs x 2 vCPUs `cpu` on 2 CPUs: Jain fairness of the
//!   guest-reported throughput over the 4 vCPUs, migrations per second;
//! - ping-pong: IPI round trips per second between two vCPUs (two remote
//!   wakes per round trip).
//!
//! Lines starting `ROW|` are the rows of the price-of-control table ("the price of
//! control": figure, host, haiku, haiku's ratio, goal, haiku under
//! kvm-irqchip and its ratio), which
//! `ci/measure_engine.sh` gathers into one table.

mod common;

use common::{kvm_or_skip, TempDir};
use vmm::results::{RunResults, VmResult};

const REPS: usize = 5;
const VARIANTS: [(&str, &str); 5] = [
    ("host", "policy = \"host\""),
    (
        "haiku/threads",
        "policy = \"haiku\"\ndispatch = \"threads\"",
    ),
    (
        "haiku/workers",
        "policy = \"haiku\"\ndispatch = \"workers\"",
    ),
    (
        "haiku/kvm-irqchip",
        "policy = \"haiku\"\ndispatch = \"kvm-irqchip\"",
    ),
    ("global-rr", "policy = \"global-rr\""),
];

fn config_text(file: &str, host_lines: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../configs")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let kernel = common::kernel().display().to_string();
    text.replace("policy = \"haiku\"", host_lines)
        .replace("../guests/out/bench-guest.elf", &kernel)
        .replace("log_dir = \"../target/", "log_dir = \"")
}

fn run_text(dir: &TempDir, text: &str) -> RunResults {
    let r = common::run_config(dir, text);
    for vm in &r.vms {
        assert!(vm.ok, "{}: {} {}", vm.name, vm.status, vm.message);
    }
    r
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn vm<'a>(r: &'a RunResults, name: &str) -> &'a VmResult {
    r.vms.iter().find(|v| v.name == name).unwrap()
}

fn units(v: &VmResult) -> Vec<f64> {
    v.vcpu_metrics
        .iter()
        .filter_map(|m| m.units_per_s)
        .collect()
}

/// Per variant, the medians over REPS of each named figure.
struct Table {
    rows: Vec<(String, Vec<(&'static str, f64)>)>,
}

impl Table {
    /// The median of figure `name` under `variant`.
    fn get(&self, variant: &str, name: &str) -> Option<f64> {
        let row = self.rows.iter().find(|r| r.0 == variant)?;
        row.1.iter().find(|f| f.0 == name).map(|f| f.1)
    }

    /// A `ROW|` line of the price-of-control table: `name` under host, haiku
    /// (threads dispatch, the default) and haiku under kvm-irqchip, each
    /// haiku's ratio to host.
    fn issue_row(&self, figure: &str, name: &str, unit: &str, goal: &str) {
        let (Some(h), Some(k), Some(q)) = (
            self.get("host", name),
            self.get("haiku/threads", name),
            self.get("haiku/kvm-irqchip", name),
        ) else {
            return;
        };
        let ratio = |x: f64| {
            if h != 0.0 {
                format!("{:.2}x", x / h)
            } else {
                "-".into()
            }
        };
        println!(
            "ROW|{figure}|{h:.1} {unit}|{k:.1} {unit}|{}|{goal}|{q:.1} {unit}|{}",
            ratio(k),
            ratio(q)
        );
    }

    fn print(&self, title: &str, base: &str) {
        println!("\n{title} (medians of {REPS}; ratio to {base})");
        let base_row = self.rows.iter().find(|r| r.0 == base).map(|r| r.1.clone());
        for (variant, figures) in &self.rows {
            let mut line = format!("  {variant:<14}");
            for (i, (name, x)) in figures.iter().enumerate() {
                let ratio = base_row
                    .as_ref()
                    .map(|b| b[i].1)
                    .filter(|b| *b != 0.0)
                    .map(|b| format!(" ({:.2}x)", x / b))
                    .unwrap_or_default();
                line += &format!("  {name} {x:.1}{ratio}");
            }
            println!("{line}");
        }
    }
}

/// Run `file` under every variant, REPS times interleaved; `figures` turns
/// one run into named numbers.
fn measure(
    dir: &TempDir,
    file: &str,
    figures: impl Fn(&RunResults) -> Vec<(&'static str, f64)>,
) -> Table {
    let mut samples: Vec<Vec<Vec<(&'static str, f64)>>> = vec![Vec::new(); VARIANTS.len()];
    for _ in 0..REPS {
        for (i, (_, host)) in VARIANTS.iter().enumerate() {
            let r = run_text(dir, &config_text(file, host));
            samples[i].push(figures(&r));
        }
    }
    let rows = VARIANTS
        .iter()
        .zip(samples)
        .map(|((name, _), s)| {
            let n = s[0].len();
            let med = (0..n)
                .map(|k| (s[0][k].0, median(s.iter().map(|x| x[k].1).collect())))
                .collect();
            (name.to_string(), med)
        })
        .collect();
    Table { rows }
}

#[test]
#[ignore = "measurement; run by ci/measure_engine.sh"]
fn engine_figures() {
    if !kvm_or_skip("engine_figures") {
        return;
    }
    let dir = TempDir::new("figures");
    let noisy = measure(&dir, "noisy-neighbour.toml", |r| {
        let lat = vm(r, "latency");
        let worst = |f: fn(&vmm::guest_metrics::LatencySummary) -> u64| {
            lat.vcpu_metrics
                .iter()
                .filter_map(|m| m.sleep_latency_ns.as_ref().map(|l| f(l) as f64 / 1e3))
                .fold(0.0, f64::max)
        };
        vec![
            ("sleep p50 us", worst(|l| l.p50_ns)),
            ("sleep p99 us", worst(|l| l.p99_ns)),
            ("hog units/s", units(vm(r, "hog")).iter().sum()),
        ]
    });
    noisy.print(
        "noisy neighbour: sleep VM p50 and p99 (worst vCPU), cpu VM throughput",
        "host",
    );

    measure(&dir, "undercommitted.toml", |r| {
        vec![("units/s", r.vms.iter().flat_map(units).sum::<f64>())]
    })
    .print(
        "undercommitted: total throughput of 2 one-vCPU VMs on 2 CPUs",
        "host",
    );

    measure(&dir, "engine-smoke.toml", |r| {
        let all: Vec<f64> = r.vms.iter().flat_map(units).collect();
        let wall_s = r.vms.iter().map(|v| v.wall_ms).fold(0.0, f64::max) / 1e3;
        let migrations: u64 = r
            .vms
            .iter()
            .flat_map(|v| v.vcpu_sched.iter().map(|s| s.migrations))
            .sum();
        vec![
            ("jain", vcpu_sched::stats::jain_index(all.iter().copied())),
            ("units/s", all.iter().sum()),
            ("migrations/s", migrations as f64 / wall_s),
        ]
    })
    .print("engine smoke: 4 vCPUs on 2 CPUs", "host");

    let pingpong = measure(&dir, "pingpong.toml", |r| {
        let rate = vm(r, "pingpong").vcpu_metrics[0]
            .roundtrips_per_s
            .unwrap_or(0.0);
        vec![("round trips/s", rate), ("us per round trip", 1e6 / rate)]
    });
    pingpong.print("ping-pong: IPI round trips between 2 vCPUs", "host");

    pingpong.issue_row(
        "ping-pong alone, 2 vCPUs on 2 CPUs (round trips/s)",
        "round trips/s",
        "/s",
        ">= 0.8x",
    );
    noisy.issue_row(
        "noisy neighbour: sleep VM p50 wake (worst vCPU)",
        "sleep p50 us",
        "us",
        "<= 1.2x",
    );
    noisy.issue_row(
        "noisy neighbour: hog throughput (units/s)",
        "hog units/s",
        "",
        ">= 0.97x",
    );
}
