//! `pacer run FILE --compare P1,P2,..`: the same VMs under several
//! policies, judged per VM by its headline metric, as hyperfine and
//! `perf diff` judge commands: the figure under each policy, its ratio to
//! the first policy's, and a verdict in words.
//!
//! A VM's headline metrics are its workload's own figures, read from its
//! results through the bench's one adapter (`bench::metrics`) and combined
//! over its vCPUs the same way (rates add up, p99s take the worst vCPU,
//! p50s the median vCPU): the sleep p99 and p50 of a `sleep` VM (the tail
//! and the typical wake, which the price-of-control table's noisy-neighbour row compares
//! with the host's), the run fraction of a `burst` VM, round
//! trips/s, acquisitions/s, units/s of a `cpu` VM (`bench::headline`'s
//! defaults; a `mixed` VM has one row per kind it runs).
//!
//! Each policy ran once, so the verdict is cautious: two latencies within
//! one histogram bucket of each other, and two other figures within
//! [`SAME_WITHIN`] of each other, are "about the same"; for a real
//! difference use `pacer bench` with repetitions. Figures are printed in
//! units that scale and no finer than their histogram bucket (`units`).

use crate::bench::metrics::{self, Better, Sample};
use crate::bench::summary::{cell_value, Column, ALL};
use serde::Serialize;
use vmm::results::RunResults;
use vmm::units;

/// Two figures of one run each closer than this (relative) are "about the
/// same": below what one run can tell apart here.
pub const SAME_WITHIN: f64 = 0.05;

/// The headline metrics a VM is judged by, latency-sensitive first; a VM
/// gets a row for each one its vCPUs reported.
const HEADLINES: [&str; 10] = [
    "sleep.wake_latency.p99_ns",
    "sleep.wake_latency.p50_ns",
    "server.request_latency.p99_ns",
    "server.requests_per_s",
    "burst.run_fraction",
    "pingpong.roundtrips_per_s",
    "spinlock.acquisitions_per_s",
    "barrier.rounds_per_s",
    "shootdown.roundtrips_per_s",
    "cpu.units_per_s",
];

/// A VM's headline figure under one policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyValue {
    pub policy: String,
    /// Null: not measured under it.
    pub value: Option<f64>,
    /// Value over the first policy's value.
    pub ratio: Option<f64>,
}

/// One VM's headline metric under every policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub vm: String,
    pub metric: String,
    pub better: Better,
    /// Per policy, in the order run.
    pub values: Vec<PolicyValue>,
    /// The policy that did better, if one did beyond the noise.
    pub winner: Option<String>,
    pub verdict: String,
    /// With `--repeat N` (N >= 2): the leader against each other policy,
    /// a permutation test over the repetitions; empty for single runs.
    pub tests: Vec<crate::bench::summary::Versus>,
}

/// The comparison of a `--compare` run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The policies, in the order they ran; ratios are to the first.
    pub policies: Vec<String>,
    /// Runs of each policy (`--repeat`); values are their medians.
    pub repetitions: usize,
    pub rows: Vec<Row>,
}

/// The VM-level value of `metric` from one VM's samples.
fn vm_value(samples: &[Sample], metric: &str) -> Option<f64> {
    cell_value(samples, &Column::of(ALL, metric))
}

/// Whether two figures of `metric` are too close for one run to tell.
fn same(metric: &str, a: f64, b: f64) -> bool {
    let hi = a.abs().max(b.abs());
    if hi == 0.0 {
        return true;
    }
    match metrics::histogram_buckets(metric) {
        Some(sub) => (a - b).abs() <= units::bucket_width(hi, sub),
        None => (a - b).abs() / hi < SAME_WITHIN,
    }
}

/// How a figure of `metric` is printed (rates with their "/s").
pub fn show(metric: &str, v: f64) -> String {
    let text = metrics::format_value(metric, v);
    if metrics::info(metric).unit == metrics::Unit::PerSecond {
        format!("{text}/s")
    } else {
        text
    }
}

/// The verdict of one row in words, and the policy that did better.
fn verdict(
    metric: &str,
    better: Better,
    policies: &[String],
    values: &[Option<f64>],
) -> (Option<String>, String) {
    let have: Vec<(&str, f64)> = policies
        .iter()
        .zip(values)
        .filter_map(|(p, v)| Some((p.as_str(), (*v)?)))
        .collect();
    if have.len() < 2 {
        return (None, "measured under one policy only".into());
    }
    let higher = better == Better::Higher;
    let key = |v: f64| if higher { v } else { -v };
    let mut sorted = have.clone();
    sorted.sort_by(|a, b| key(b.1).total_cmp(&key(a.1)));
    let (best, top) = sorted[0];
    let (next, second) = sorted[1];
    if better == Better::Neither {
        return (None, "no direction: see the figures".into());
    }
    if same(metric, top, second) {
        let tied: Vec<&str> = sorted
            .iter()
            .filter(|(_, v)| same(metric, top, *v))
            .map(|(p, _)| *p)
            .collect();
        let why = if metrics::histogram_buckets(metric).is_some() {
            "within one histogram bucket"
        } else {
            "within 5 %, one run each"
        };
        return (
            None,
            format!("about the same under {} ({why})", tied.join(" and ")),
        );
    }
    let factor = if higher {
        (second != 0.0).then(|| top / second)
    } else {
        (top != 0.0).then(|| second / top)
    };
    let by = match factor {
        Some(f) => format!(
            "{f:.2}x {} than {next}",
            if higher { "higher" } else { "lower" }
        ),
        None => format!("{} than {next}", if higher { "higher" } else { "lower" }),
    };
    let rest = if sorted.len() > 2 {
        " (the next best)"
    } else {
        ""
    };
    (
        Some(best.to_string()),
        format!("{best} did better: {by}{rest}"),
    )
}

/// Compare `runs` (policy, results), the first being the reference.
pub fn compare(runs: &[(String, RunResults)]) -> Comparison {
    let policies: Vec<String> = runs.iter().map(|(p, _)| p.clone()).collect();
    let mut rows = Vec::new();
    let Some((_, first)) = runs.first() else {
        return Comparison {
            policies,
            repetitions: 1,
            rows,
        };
    };
    for (vi, vm) in first.vms.iter().enumerate() {
        let samples: Vec<Vec<Sample>> = runs
            .iter()
            .map(|(_, r)| {
                r.vms
                    .get(vi)
                    .map(|v| metrics::vm_samples(v, &v.name))
                    .unwrap_or_default()
            })
            .collect();
        for metric in HEADLINES {
            let values: Vec<Option<f64>> = samples.iter().map(|s| vm_value(s, metric)).collect();
            if values.iter().all(Option::is_none) {
                continue;
            }
            let better = metrics::info(metric).better;
            let (winner, verdict) = verdict(metric, better, &policies, &values);
            let base = values[0].filter(|b| *b != 0.0);
            rows.push(Row {
                vm: vm.name.clone(),
                metric: metric.to_string(),
                better,
                values: policies
                    .iter()
                    .zip(&values)
                    .map(|(p, v)| PolicyValue {
                        policy: p.clone(),
                        value: *v,
                        ratio: base.and_then(|b| Some((*v)? / b)),
                    })
                    .collect(),
                winner,
                verdict,
                tests: Vec::new(),
            });
        }
    }
    Comparison {
        policies,
        repetitions: 1,
        rows,
    }
}

/// Compare `runs` (policy, results) where each policy ran several times
/// (the same label again): per VM and headline metric each policy's median
/// over its runs, and the verdict of a permutation test over them, as
/// `pacer bench` judges ([`crate::bench::verdict`]).
pub fn compare_repeated(runs: &[(String, RunResults)]) -> Comparison {
    use crate::bench::summary::{Stat, Versus};
    use crate::bench::verdict::Test;
    let mut policies: Vec<String> = Vec::new();
    for (p, _) in runs {
        if !policies.contains(p) {
            policies.push(p.clone());
        }
    }
    fn of<'r>(
        runs: &'r [(String, RunResults)],
        p: &'r str,
    ) -> impl Iterator<Item = &'r RunResults> {
        runs.iter().filter(move |(q, _)| q == p).map(|(_, r)| r)
    }
    let repetitions = policies
        .iter()
        .map(|p| of(runs, p).count())
        .min()
        .unwrap_or(0);
    let mut rows = Vec::new();
    let Some((_, first)) = runs.first() else {
        return Comparison {
            policies,
            repetitions,
            rows,
        };
    };
    for (vi, vm) in first.vms.iter().enumerate() {
        for metric in HEADLINES {
            // Per policy, its value in each run.
            let per_run: Vec<Vec<f64>> = policies
                .iter()
                .map(|p| {
                    of(runs, p)
                        .filter_map(|r| {
                            let v = r.vms.get(vi)?;
                            vm_value(&metrics::vm_samples(v, &v.name), metric)
                        })
                        .filter(|x| x.is_finite())
                        .collect()
                })
                .collect();
            if per_run.iter().all(Vec::is_empty) {
                continue;
            }
            let better = metrics::info(metric).better;
            let medians: Vec<Option<f64>> = per_run
                .iter()
                .map(|v| Stat::of(v).map(|s| s.median))
                .collect();
            let base = medians[0].filter(|b| *b != 0.0);
            let higher = better == Better::Higher;
            let leader = (0..policies.len())
                .filter(|&i| medians[i].is_some())
                .max_by(|&a, &b| {
                    let (a, b) = (medians[a].unwrap_or(0.0), medians[b].unwrap_or(0.0));
                    if higher {
                        a.total_cmp(&b)
                    } else {
                        b.total_cmp(&a)
                    }
                });
            let (winner, verdict, tests) = match leader {
                Some(li)
                    if better != Better::Neither
                        && per_run.iter().filter(|v| !v.is_empty()).count() > 1 =>
                {
                    let tests: Vec<Versus> = (0..policies.len())
                        .filter(|&i| i != li && !per_run[i].is_empty())
                        .map(|i| Versus {
                            policy: policies[i].clone(),
                            test: Test::of(&per_run[li], &per_run[i]),
                        })
                        .collect();
                    let ahead = |t: &Test| t.significant && ((t.effect > 0.0) == higher);
                    let clear = tests.iter().all(|v| v.test.as_ref().is_some_and(ahead));
                    let parts: Vec<String> = tests
                        .iter()
                        .map(|v| match &v.test {
                            Some(t) => format!("vs {} {}", v.policy, t.describe()),
                            None => format!("vs {}: fewer than 2 runs a side, no test", v.policy),
                        })
                        .collect();
                    let name = &policies[li];
                    let verdict = if clear {
                        format!("{name} did better: {}", parts.join("; "))
                    } else {
                        format!("{name} leads: {}", parts.join("; "))
                    };
                    (clear.then(|| name.clone()), verdict, tests)
                }
                _ => (
                    None,
                    "no direction, or measured under one policy only".into(),
                    Vec::new(),
                ),
            };
            rows.push(Row {
                vm: vm.name.clone(),
                metric: metric.to_string(),
                better,
                values: policies
                    .iter()
                    .zip(&medians)
                    .map(|(p, v)| PolicyValue {
                        policy: p.clone(),
                        value: *v,
                        ratio: base.and_then(|b| Some((*v)? / b)),
                    })
                    .collect(),
                winner,
                verdict,
                tests,
            });
        }
    }
    Comparison {
        policies,
        repetitions,
        rows,
    }
}

/// The table: per VM and headline metric, the figure under each policy
/// with its ratio to the first, then the verdict.
pub fn format(c: &Comparison) -> String {
    let Some(first) = c.policies.first() else {
        return String::new();
    };
    let mut cells: Vec<Vec<String>> = vec![{
        let mut h = vec!["VM".to_string(), "headline metric".to_string()];
        h.extend(c.policies.iter().cloned());
        h.push("verdict".into());
        h
    }];
    for r in &c.rows {
        let dir = match r.better {
            Better::Higher => "higher is better",
            Better::Lower => "lower is better",
            Better::Neither => "",
        };
        let mut line = vec![
            r.vm.clone(),
            format!("{} ({dir})", metrics::title(&r.metric)),
        ];
        for (i, pv) in r.values.iter().enumerate() {
            line.push(match (pv.value, pv.ratio) {
                (Some(v), Some(x)) if i > 0 => format!("{} ({x:.2}x)", show(&r.metric, v)),
                (Some(v), _) => show(&r.metric, v),
                (None, _) => "-".into(),
            });
        }
        line.push(r.verdict.clone());
        cells.push(line);
    }
    let cols = cells[0].len();
    let width: Vec<usize> = (0..cols)
        .map(|i| {
            cells
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let runs = match c.repetitions {
        0 | 1 => "one run each".to_string(),
        n => format!("medians of {n} runs each, verdicts by a permutation test"),
    };
    let mut out =
        format!("Which policy did better, per VM ({runs}; ratios to {first}, the first policy):\n");
    for line in &cells {
        let mut s = String::new();
        for (i, cell) in line.iter().enumerate() {
            if i + 1 == cols {
                s += cell;
            } else {
                s += &format!("{cell:<w$}  ", w = width[i]);
            }
        }
        out += s.trim_end();
        out += "\n";
    }
    out
}

/// The scheduling side by side: per vCPU and policy its run and wait
/// time, wake-up p99 and migrations.
pub fn format_vcpus(runs: &[(String, RunResults)]) -> String {
    let Some((_, first)) = runs.first() else {
        return String::new();
    };
    let mut out =
        String::from("Per vCPU: run / waiting for a CPU, wake-up p99 (scheduler), migrations\n");
    out += &format!("{:<18}", "vm/vcpu");
    for (policy, _) in runs {
        out += &format!(" | {policy:<38}");
    }
    out = out.trim_end().to_string();
    out += "\n";
    for (vi, vm) in first.vms.iter().enumerate() {
        for v in 0..vm.vcpu_sched.len() {
            out += &format!("{:<18}", format!("{}/vcpu{v}", vm.name));
            for (_, run) in runs {
                let Some(s) = run.vms.get(vi).and_then(|r| r.vcpu_sched.get(v)) else {
                    out += &format!(" | {:<38}", "-");
                    continue;
                };
                let wake = if s.wake_latency_ns.max == 0 {
                    "-".to_string()
                } else {
                    units::latency(s.wake_latency_ns.p99 as f64, units::SCHED_SUB_BUCKETS)
                };
                let cell = format!(
                    "{} / {}, {wake}, {}",
                    units::duration3(s.run_ns as f64),
                    units::duration3(s.ready_wait_ns as f64),
                    s.migrations
                );
                out += &format!(" | {cell:<38}");
            }
            out = out.trim_end().to_string();
            out += "\n";
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use vmm::guest_metrics::{LatencySummary, VcpuMetrics};
    use vmm::results::VmResult;

    fn vm(name: &str, units: Option<f64>, p99: Option<u64>) -> VmResult {
        let mut r = VmResult::error(name, String::new(), 1000.0, "");
        r.status = "success".into();
        r.ok = true;
        r.vcpu_metrics = (0..2)
            .map(|v| VcpuMetrics {
                vcpu: v,
                units_per_s: units,
                sleep_latency_ns: p99.map(|p| LatencySummary {
                    count: 100,
                    p50_ns: 1000,
                    p99_ns: p * (v as u64 + 1),
                    max_ns: p * 3,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        r.vcpu_sched = vec![Default::default(); 2];
        r
    }

    fn run(vms: Vec<VmResult>) -> RunResults {
        RunResults {
            config: PathBuf::from("c.toml"),
            run_dir: None,
            ok: true,
            vms,
            trace: None,
            control_changes: Vec::new(),
            sched_cpus: None,
        }
    }

    #[test]
    fn says_per_vm_who_did_better_and_by_how_much() {
        let runs = vec![
            (
                "haiku".to_string(),
                run(vec![
                    vm("latency", None, Some(2_097_152)),
                    vm("hog", Some(200_000.0), None),
                ]),
            ),
            (
                "host".to_string(),
                run(vec![
                    vm("latency", None, Some(4_194_304)),
                    vm("hog", Some(201_000.0), None),
                ]),
            ),
        ];
        let c = compare(&runs);
        assert_eq!(c.rows.len(), 3);
        let lat = &c.rows[0];
        // The worst vCPU's p99: 4.19 ms under haiku, 8.39 ms under host.
        assert_eq!(lat.metric, "sleep.wake_latency.p99_ns");
        let values: Vec<Option<f64>> = lat.values.iter().map(|v| v.value).collect();
        assert_eq!(values, [Some(4_194_304.0), Some(8_388_608.0)]);
        assert_eq!(lat.values[1].ratio, Some(2.0));
        assert_eq!(lat.values[1].policy, "host");
        assert_eq!(lat.winner.as_deref(), Some("haiku"));
        assert_eq!(lat.verdict, "haiku did better: 2.00x lower than host");
        // The typical wake too: the median vCPU's p50, the same here.
        let p50 = &c.rows[1];
        assert_eq!(p50.metric, "sleep.wake_latency.p50_ns");
        let values: Vec<Option<f64>> = p50.values.iter().map(|v| v.value).collect();
        assert_eq!(values, [Some(1000.0), Some(1000.0)]);
        assert_eq!(p50.winner, None);
        // Units/s add up over vCPUs; 0.5 % apart is no difference.
        let hog = &c.rows[2];
        let values: Vec<Option<f64>> = hog.values.iter().map(|v| v.value).collect();
        assert_eq!(values, [Some(400_000.0), Some(402_000.0)]);
        assert_eq!(hog.winner, None);
        assert!(
            hog.verdict
                .starts_with("about the same under host and haiku"),
            "{}",
            hog.verdict
        );
        let table = format(&c);
        assert!(
            table.contains("4.19 ms") && table.contains("8.39 ms (2.00x)"),
            "{table}"
        );
        assert!(
            table.contains("400k/s") && table.contains("402k/s (1.00x)"),
            "{table}"
        );
        assert!(table.contains("sleep p99 (lower is better)"), "{table}");
        assert!(table.contains("sleep p50 (lower is better)"), "{table}");
    }

    #[test]
    fn latencies_in_one_bucket_are_the_same() {
        // One bucket of 128 per power of two: 8388608..=8454143 ns.
        let values = [Some(8_388_608.0), Some(8_450_000.0)];
        let p = ["a".to_string(), "b".to_string()];
        let (w, v) = verdict("sleep.wake_latency.p99_ns", Better::Lower, &p, &values);
        assert_eq!(w, None);
        assert!(v.contains("within one histogram bucket"), "{v}");
        let three = ["a".to_string(), "b".to_string(), "c".to_string()];
        let (w, v) = verdict(
            "cpu.units_per_s",
            Better::Higher,
            &three,
            &[Some(100.0), Some(300.0), Some(200.0)],
        );
        assert_eq!(w.as_deref(), Some("b"));
        assert_eq!(v, "b did better: 1.50x higher than c (the next best)");
        assert_eq!(format(&compare(&[])), "");
    }

    #[test]
    fn repeated_runs_are_judged_by_a_permutation_test() {
        // Five runs a policy: haiku's units/s clearly above host's.
        let mut runs = Vec::new();
        for k in 0..5 {
            let f = k as f64;
            runs.push((
                "haiku".to_string(),
                run(vec![vm("hog", Some(300_000.0 + f * 1000.0), None)]),
            ));
            runs.push((
                "host".to_string(),
                run(vec![vm("hog", Some(200_000.0 + f * 1000.0), None)]),
            ));
        }
        let c = compare_repeated(&runs);
        assert_eq!((c.policies.len(), c.repetitions), (2, 5));
        let hog = &c.rows[0];
        assert_eq!(hog.metric, "cpu.units_per_s");
        // Medians (of the 2-vCPU sums).
        assert_eq!(hog.values[0].value, Some(604_000.0));
        assert_eq!(hog.winner.as_deref(), Some("haiku"));
        assert!(
            hog.verdict
                .starts_with("haiku did better: vs host p=0.008, +"),
            "{}",
            hog.verdict
        );
        assert_eq!(hog.tests.len(), 1);
        // Two runs a policy: never significant, and says how many.
        let c = compare_repeated(&runs[..4]);
        let hog = &c.rows[0];
        assert_eq!(hog.winner, None);
        assert!(
            hog.verdict
                .starts_with("haiku leads: vs host not significant (p=0.333")
                && hog.verdict.contains("~5 repetitions"),
            "{}",
            hog.verdict
        );
    }
}
