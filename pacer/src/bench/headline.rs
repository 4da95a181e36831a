//! The VM under test of a layout and the metric it is judged by.
//!
//! A layout with a CPU hog beside a latency-sensitive VM is not a
//! throughput contest: a policy that starves the waker lets the hog run
//! more, and a table that headlines the hog's units/s would reward exactly
//! that (the design's rule: a neighbour's throughput is the price, never
//! the score). So every layout names
//!
//! - its VM under test (`under_test`: a VM entry of the layout, or `"all"`
//!   when every VM is under test, as in an overload-balance layout), and
//! - its headline metric(s) with the direction that is better
//!   (`headline`), e.g. the waker's `burst.run_fraction`, higher.
//!
//! Everything else a cell measures is context: the other VMs' own
//! headline figures are shown as the *cost* (what the neighbours paid),
//! and the scheduler's statistics as details. The summary, the report's
//! "At a glance" and the plots lead with the headline; "best" is said only
//! when a permutation test over the repetitions finds the leader ahead of
//! every other policy (`summary.rs`, `verdict.rs`).
//!
//! Both fields are optional. By default the VMs that run the cell's
//! workload are under test (all of them when no VM has a fixed workload of
//! its own), and the headline is the workload kind's own figure
//! ([`kind_metrics`]): units/s for `cpu`, the sleep p99 for `sleep`, round
//! trips/s for `pingpong`, the run fraction for `burst`, acquisitions/s for
//! `spinlock`, the request p99 and requests/s for `server`, the index for
//! `unixbench`, whether a `hostile` guest was contained
//! ([`metrics::CONTAINED`]).

use super::matrix::{Layout, Matrix};
use super::metrics::{self, Better};
use super::workload::{Workload, WorkloadKind};
use serde::Serialize;

/// `under_test` meaning every VM of the layout.
pub const ALL_VMS: &str = "all";

/// A metric the layout is judged by, and which way is better.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeadlineMetric {
    pub metric: String,
    pub better: Better,
}

impl HeadlineMetric {
    /// `metric` with the direction its name implies (`metrics::info`).
    pub fn named(metric: &str) -> HeadlineMetric {
        HeadlineMetric {
            metric: metric.to_string(),
            better: metrics::info(metric).better,
        }
    }

    /// Whether the metric is shown once per VM group even when every VM is
    /// under test (a VM's share only means something beside the others').
    pub fn per_vm(&self) -> bool {
        self.metric.starts_with("share.")
    }
}

/// What a `[[layout]]` says about its VM under test (validated).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LayoutHeadline {
    /// A VM entry's name (a group), [`ALL_VMS`], or None for the default.
    pub under_test: Option<String>,
    /// Empty: the default of the cell's workload.
    pub metrics: Vec<HeadlineMetric>,
}

/// The headline of one (layout, workload) pair, defaults resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupHeadline {
    /// A VM group, or [`ALL_VMS`].
    pub under_test: String,
    pub metrics: Vec<HeadlineMetric>,
    /// The other VM groups' own figures: what they paid.
    pub costs: Vec<Cost>,
}

/// Another VM group's own headline figure, shown as the price it paid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cost {
    /// The VM entry (group) of the layout.
    pub vm: String,
    pub metric: String,
    pub better: Better,
}

impl Cost {
    pub fn new(vm: &str, h: HeadlineMetric) -> Cost {
        Cost {
            vm: vm.to_string(),
            metric: h.metric,
            better: h.better,
        }
    }
}

impl GroupHeadline {
    /// "burst run fraction of waker (higher is better)".
    pub fn describe(&self) -> String {
        let metrics: Vec<String> = self
            .metrics
            .iter()
            .map(|h| format!("{} ({})", metrics::title(&h.metric), direction(h.better)))
            .collect();
        let who = if self.under_test == ALL_VMS {
            "all VMs".to_string()
        } else {
            format!("VM {}", self.under_test)
        };
        let mut s = format!("under test: {who}; headline: {}", metrics.join(", "));
        if !self.costs.is_empty() {
            let costs: Vec<String> = self
                .costs
                .iter()
                .map(|c| format!("{} of {}", metrics::title(&c.metric), c.vm))
                .collect();
            s += &format!("; cost: {}", costs.join(", "));
        }
        s
    }
}

/// "higher is better" / "lower is better".
pub fn direction(b: Better) -> &'static str {
    match b {
        Better::Higher => "higher is better",
        Better::Lower => "lower is better",
        Better::Neither => "no direction",
    }
}

/// The metric(s) a workload kind is judged by by default. `mixed` gives
/// one per distinct entry, latency-sensitive entries before `cpu`.
pub fn kind_metrics(w: &Workload) -> Vec<HeadlineMetric> {
    let one = own_metric;
    let names: Vec<String> = match w.kind {
        WorkloadKind::Mixed => {
            let mut kinds: Vec<WorkloadKind> = w
                .mixed_entries()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|e| WorkloadKind::parse(e).ok())
                .collect();
            kinds.sort_by_key(|k| (*k == WorkloadKind::Cpu, *k));
            kinds.dedup();
            kinds
                .into_iter()
                .filter_map(one)
                .map(String::from)
                .collect()
        }
        WorkloadKind::UnixBench => w
            .suite
            .as_ref()
            .and_then(|s| s.copies.first())
            .map(|c| format!("unixbench.index.{}", c.suffix()))
            .into_iter()
            .collect(),
        // A server is judged by its tail and by keeping up with the load.
        WorkloadKind::Server => vec![
            "server.request_latency.p99_ns".into(),
            "server.requests_per_s".into(),
        ],
        k => one(k).map(String::from).into_iter().collect(),
    };
    names.iter().map(|n| HeadlineMetric::named(n)).collect()
}

/// A bench-guest kind's own figure (None for `mixed` and `unixbench`,
/// whose figures depend on their parameters).
pub fn own_metric(k: WorkloadKind) -> Option<&'static str> {
    Some(match k {
        WorkloadKind::Cpu => "cpu.units_per_s",
        WorkloadKind::Sleep => "sleep.wake_latency.p99_ns",
        WorkloadKind::Pingpong => "pingpong.roundtrips_per_s",
        WorkloadKind::Burst => "burst.run_fraction",
        WorkloadKind::Spinlock => "spinlock.acquisitions_per_s",
        WorkloadKind::Barrier => "barrier.rounds_per_s",
        WorkloadKind::Shootdown => "shootdown.roundtrips_per_s",
        WorkloadKind::Hostile => metrics::CONTAINED,
        WorkloadKind::Server => "server.request_latency.p99_ns",
        WorkloadKind::Mixed | WorkloadKind::UnixBench => return None,
    })
}

/// The fields of a latency summary (`LatencyDoc` of the run JSON).
const LATENCY: &[&str] = &[
    "count",
    "p50_ns",
    "p99_ns",
    "p999_ns",
    "max_ns",
    "histogram_count",
];

/// The per-vCPU metrics a workload's guest reports (the run JSON's
/// `vcpus[].guest`, flattened as `metrics::vm_samples` does), without
/// histogram buckets. `mixed` reports those of its entries.
pub fn guest_metrics(w: &Workload) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |prefix: &str, fields: &[&str], latency: &[&str]| {
        out.extend(fields.iter().map(|f| format!("{prefix}.{f}")));
        for l in latency {
            out.extend(LATENCY.iter().map(|f| format!("{prefix}.{l}.{f}")));
        }
    };
    let kinds: Vec<WorkloadKind> = match w.kind {
        WorkloadKind::Mixed => w
            .mixed_entries()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|e| WorkloadKind::parse(e).ok())
            .collect(),
        k => vec![k],
    };
    for k in kinds {
        match k {
            WorkloadKind::Cpu => add("cpu", &["units", "units_per_s"], &[]),
            WorkloadKind::Sleep => add("sleep", &["wakeups", "missed"], &["wake_latency"]),
            WorkloadKind::Pingpong => add("pingpong", &["roundtrips", "roundtrips_per_s"], &[]),
            WorkloadKind::Burst => add(
                "burst",
                &["bursts", "missed", "run_fraction", "busy_fraction"],
                &["wake_latency"],
            ),
            WorkloadKind::Spinlock => add(
                "spinlock",
                &["acquisitions", "acquisitions_per_s", "max_wait_ns", "cs_ns"],
                &["lock_wait"],
            ),
            WorkloadKind::Barrier => add(
                "barrier",
                &["rounds", "rounds_per_s", "participants", "spin_share"],
                &[],
            ),
            WorkloadKind::Shootdown => {
                add("shootdown", &["count", "roundtrips_per_s"], &["latency"])
            }
            // CONTAINED: the VMM's verdict on its end (`run.rs`).
            WorkloadKind::Hostile => add("hostile", &["contained"], &[]),
            WorkloadKind::Server => add(
                "server",
                &["requests", "requests_per_s", "offered", "dropped"],
                &["request_latency"],
            ),
            WorkloadKind::Mixed | WorkloadKind::UnixBench => {}
        }
    }
    // The hostile guest reports no records of its own (it floods the port).
    if w.kind.is_bench_guest() && w.kind != WorkloadKind::Hostile {
        add("steal", &["steal_ns", "workload_steal_ns"], &[]);
    }
    out.sort();
    out.dedup();
    out
}

/// What the scheduler reports of every VM's vCPUs (`vcpus[].sched`,
/// prefixed `sched.`, and the rates `metrics::vm_samples` derives).
pub const SCHED_METRICS: &[&str] = &[
    "sched.run_ns",
    "sched.ready_wait_ns",
    "sched.ready_wait_fraction",
    "sched.wakeups",
    "sched.wake_latency.p50_ns",
    "sched.wake_latency.p99_ns",
    "sched.wake_latency.max_ns",
    "sched.migrations",
    "sched.migrations_per_s",
    "sched.preemptions",
    "sched.halt_poll.polls",
    "sched.halt_poll.woken",
    "sched.halt_poll.polled_ns",
    "jain.sched.run_ns",
];

/// Every metric a cell running `workloads` (every workload some VM of
/// the cell runs) can produce: the guests', the scheduler's, and the
/// cell-wide ones derived from them (`metrics::cell_samples`).
pub fn cell_metrics(workloads: &[&Workload]) -> Vec<String> {
    let mut out: Vec<String> = SCHED_METRICS.iter().map(|m| m.to_string()).collect();
    for w in workloads {
        for m in guest_metrics(w) {
            if m.ends_with("_per_s") {
                out.push(format!("jain.{m}"));
            }
            if m == "cpu.units_per_s" {
                out.push(format!("share.{m}"));
                out.push(format!("priority_order.{m}"));
            }
            out.push(m);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Whether a cell running `workloads` produces `metric`: one of
/// [`cell_metrics`], a histogram bucket of one of its latencies, or a
/// figure of the UnixBench-style suite (whose tests and copies are the
/// suite's own).
pub fn produces(workloads: &[&Workload], metric: &str) -> bool {
    if metric.starts_with("unixbench.") {
        return workloads.iter().any(|w| w.kind == WorkloadKind::UnixBench);
    }
    let known = cell_metrics(workloads);
    if let Some((latency, bucket)) = metric.split_once(".histogram.bucket.") {
        return !bucket.is_empty()
            && bucket.chars().all(|c| c.is_ascii_digit())
            && known.iter().any(|k| *k == format!("{latency}.count"));
    }
    known.iter().any(|k| k == metric)
}

/// The VM groups of a layout, in order.
fn groups(l: &Layout) -> Vec<&str> {
    let mut g: Vec<&str> = Vec::new();
    for v in &l.vms {
        if !g.contains(&v.group.as_str()) {
            g.push(&v.group);
        }
    }
    g
}

/// The default VM under test: the groups that run the cell's workload
/// when others have a workload of their own (the hogs), else all.
fn default_under_test(l: &Layout) -> String {
    let own = l.vms.iter().filter(|v| v.workload.is_some()).count();
    if own == 0 || own == l.vms.len() {
        return ALL_VMS.into();
    }
    l.vms
        .iter()
        .find(|v| v.workload.is_none())
        .map_or(ALL_VMS.into(), |v| v.group.clone())
}

/// The headline of (layout `li`, workload `wi`) with defaults resolved.
pub fn resolve(m: &Matrix, li: usize, wi: usize) -> GroupHeadline {
    let l = &m.layouts[li];
    let under_test = l
        .headline
        .under_test
        .clone()
        .unwrap_or_else(|| default_under_test(l));
    let workload_of = |group: &str| {
        let v = l.vms.iter().find(|v| v.group == group)?;
        m.workloads.get(v.workload.unwrap_or(wi))
    };
    let metrics = if !l.headline.metrics.is_empty() {
        l.headline.metrics.clone()
    } else if under_test == ALL_VMS {
        kind_metrics(&m.workloads[wi])
    } else {
        workload_of(&under_test)
            .map(kind_metrics)
            .unwrap_or_default()
    };
    let costs = if under_test == ALL_VMS {
        Vec::new()
    } else {
        groups(l)
            .into_iter()
            .filter(|g| *g != under_test)
            .filter_map(|g| {
                let first = workload_of(g).map(kind_metrics)?.into_iter().next()?;
                Some(Cost::new(g, first))
            })
            .collect()
    };
    GroupHeadline {
        under_test,
        metrics,
        costs,
    }
}

#[cfg(test)]
mod tests {
    use super::super::matrix::tests::{Fixture, GOOD};
    use super::*;

    #[test]
    fn defaults_put_the_vm_beside_the_hog_under_test() {
        let fx = Fixture::new("headline-default");
        let m = fx.parse(GOOD).unwrap();
        // Layout "pair": VM a runs the cell's workload, the hogs run cpu.
        let h = resolve(&m, 0, 1);
        assert_eq!(h.under_test, "a");
        assert_eq!(
            h.metrics,
            [HeadlineMetric {
                metric: "sleep.wake_latency.p99_ns".into(),
                better: Better::Lower
            }]
        );
        assert_eq!(
            h.costs,
            [Cost::new("hog", HeadlineMetric::named("cpu.units_per_s"))]
        );
        assert!(
            h.describe().contains("under test: VM a"),
            "{}",
            h.describe()
        );
        // Layout "prio": one VM, no hog: all under test, no cost.
        let h = resolve(&m, 1, 0);
        assert_eq!(h.under_test, ALL_VMS);
        assert_eq!(h.metrics, [HeadlineMetric::named("cpu.units_per_s")]);
        assert!(h.costs.is_empty());
    }

    #[test]
    fn explicit_fields_win() {
        let fx = Fixture::new("headline-explicit");
        let text = GOOD.replace(
            "name = \"pair\"",
            "name = \"pair\"\nunder_test = \"a\"\nheadline = [{ metric = \"sched.wake_latency.p99_ns\", better = \"lower\" }, \"cpu.units_per_s\"]",
        );
        let m = fx.parse(&text).unwrap();
        let h = resolve(&m, 0, 0);
        assert_eq!(h.under_test, "a");
        assert_eq!(
            h.metrics,
            [
                HeadlineMetric {
                    metric: "sched.wake_latency.p99_ns".into(),
                    better: Better::Lower
                },
                HeadlineMetric::named("cpu.units_per_s"),
            ]
        );
        // A VM entry that does not exist, a direction that is not one.
        let bad = text.replace("under_test = \"a\"", "under_test = \"b\"");
        let e = fx.parse(&bad).unwrap_err().to_string();
        assert!(
            e.contains("layout[0].under_test") && e.contains("\"b\""),
            "{e}"
        );
        let bad = text.replace("better = \"lower\"", "better = \"smaller\"");
        let e = fx.parse(&bad).unwrap_err().to_string();
        assert!(e.contains("layout[0].headline[0].better"), "{e}");
    }

    /// The shipped matrices, parsed beside a stand-in guest image.
    fn shipped(name: &str) -> Matrix {
        let fx = Fixture::new(&format!("shipped-{name}"));
        let benches = fx.dir.join("benches");
        std::fs::create_dir_all(&benches).unwrap();
        std::fs::create_dir_all(fx.dir.join("guests/out")).unwrap();
        std::fs::write(
            fx.dir.join("guests/out/bench-guest.elf"),
            vmm::test_images::elf_with_loads(&[(0x10_0000, 0x10_0000)]),
        )
        .unwrap();
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../benches/{name}")),
        )
        .unwrap();
        let host = vmm::config::HostInfo {
            online: super::super::matrix::cpu_set(&[0, 1]),
            resources: Default::default(),
        };
        Matrix::parse(&text, &benches.join(name), &host).unwrap()
    }

    /// Every matrix file in `benches/`.
    fn shipped_names() -> Vec<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches");
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".toml"))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn shipped_matrices_name_their_vm_under_test_and_headline() {
        let names = shipped_names();
        assert!(names.len() >= 3, "{names:?}");
        for name in &names {
            let m = shipped(name);
            for l in &m.layouts {
                assert!(
                    l.headline.under_test.is_some(),
                    "{name}: {} has no under_test",
                    l.name
                );
                // No headline of its own: each workload's own figure
                // (a layout over several kinds of workload).
                let own = !l.workloads.is_empty()
                    && l.workloads
                        .iter()
                        .all(|&w| !kind_metrics(&m.workloads[w]).is_empty());
                assert!(
                    !l.headline.metrics.is_empty() || own,
                    "{name}: {} has no headline",
                    l.name
                );
                assert!(
                    l.headline
                        .metrics
                        .iter()
                        .all(|h| h.better != Better::Neither || h.metric.starts_with("share.")),
                    "{name}: {} has a headline without a direction",
                    l.name
                );
            }
        }
        let m = shipped("seeds.toml");
        let at = |layout: &str| {
            let li = m.layouts.iter().position(|l| l.name == layout).unwrap();
            resolve(&m, li, m.layouts[li].workloads[0])
        };
        let h = at("bursty-vs-hog");
        assert_eq!(h.under_test, "waker");
        assert_eq!(h.metrics[0].metric, "burst.run_fraction");
        assert_eq!(h.metrics[0].better, Better::Higher);
        assert_eq!(h.costs[0].vm, "hog");
        assert_eq!(
            at("pingpong-vs-hog").metrics[0].metric,
            "pingpong.roundtrips_per_s"
        );
        for l in ["noisy-neighbour", "mixed-vs-hog"] {
            assert_eq!(at(l).metrics[0].better, Better::Lower, "{l}");
        }
        assert_eq!(at("overload-balance").metrics.len(), 2);
        let srv = at("server-vs-hogs");
        assert_eq!(srv.under_test, "srv");
        assert_eq!(
            srv.metrics
                .iter()
                .map(|h| (h.metric.as_str(), h.better))
                .collect::<Vec<_>>(),
            [
                ("server.request_latency.p99_ns", Better::Lower),
                ("server.requests_per_s", Better::Higher)
            ]
        );
    }

    #[test]
    fn mixed_leads_with_its_latency_sensitive_entries() {
        let w = Workload {
            name: "m".into(),
            kind: WorkloadKind::Mixed,
            params: [("mixed".to_string(), "cpu,sleep".to_string())].into(),
            extra_args: Vec::new(),
            suite: None,
        };
        let names: Vec<String> = kind_metrics(&w).into_iter().map(|h| h.metric).collect();
        assert_eq!(names, ["sleep.wake_latency.p99_ns", "cpu.units_per_s"]);
    }
}
