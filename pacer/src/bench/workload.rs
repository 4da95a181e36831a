//! The workload axis of a matrix: which workload kinds exist, which
//! parameters each takes, and how a workload becomes guest arguments.
//!
//! Two families:
//! - the bench guest's workloads (`cpu`, `sleep`, `pingpong`, `burst`,
//!   `spinlock`, `barrier`, `shootdown`, `server`, `mixed`), passed on the guest's command line as
//!   `workload=KIND key=value ...` (guests/PROTOCOL.md);
//! - `unixbench`, the UnixBench-style suite inside a Linux guest, with its
//!   own image, command line and result adapter (`unixbench.rs`).
//!
//! Validation accepts every kind named here, so a typo is an error with
//! its position. Whether the guest image *implements* a bench kind is only
//! known at run time: a guest that does not know a workload answers with
//! an ERROR record (UNKNOWN_WORKLOAD), and the runner then marks that
//! workload's cells `n/a` (see `run.rs`). That keeps one source of truth
//! (the guest itself) and lets a matrix name workloads ahead of the guest.

use super::unixbench::SuiteSpec;
use std::collections::BTreeMap;
use std::fmt;

/// A workload kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    Cpu,
    Sleep,
    Pingpong,
    Burst,
    Spinlock,
    Barrier,
    Shootdown,
    Server,
    Mixed,
    UnixBench,
    /// A guest gone bad (floods, stray port and MMIO writes, a triple
    /// fault): its VM's expected end is the triple fault, and the cell
    /// shows whether its neighbours were untouched.
    Hostile,
}

/// Parameters every bench-guest workload takes (PROTOCOL.md).
const BENCH_COMMON: &[&str] = &["duration_ms", "apic", "timer"];

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 11] = [
        WorkloadKind::Cpu,
        WorkloadKind::Sleep,
        WorkloadKind::Pingpong,
        WorkloadKind::Burst,
        WorkloadKind::Spinlock,
        WorkloadKind::Barrier,
        WorkloadKind::Shootdown,
        WorkloadKind::Server,
        WorkloadKind::Mixed,
        WorkloadKind::UnixBench,
        WorkloadKind::Hostile,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Cpu => "cpu",
            WorkloadKind::Sleep => "sleep",
            WorkloadKind::Pingpong => "pingpong",
            WorkloadKind::Burst => "burst",
            WorkloadKind::Spinlock => "spinlock",
            WorkloadKind::Barrier => "barrier",
            WorkloadKind::Shootdown => "shootdown",
            WorkloadKind::Server => "server",
            WorkloadKind::Mixed => "mixed",
            WorkloadKind::UnixBench => "unixbench",
            WorkloadKind::Hostile => "hostile",
        }
    }

    pub fn parse(s: &str) -> Result<WorkloadKind, String> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|k| k.as_str()).collect();
                format!(
                    "unknown workload kind {s:?} (expected one of: {})",
                    names.join(", ")
                )
            })
    }

    /// Runs in the bench guest (as opposed to a Linux guest).
    pub fn is_bench_guest(self) -> bool {
        self != WorkloadKind::UnixBench
    }

    /// The status a VM of this kind ends with when all went as planned
    /// and is not a failure of the cell: the hostile guest's triple fault
    /// (the VMM stopped only that VM, with a message).
    pub fn expected_end(self) -> Option<&'static str> {
        (self == WorkloadKind::Hostile).then_some("triple_fault")
    }

    /// May be an entry of `mixed=` (the guest's per-vCPU workloads; the
    /// synchronising kinds need every vCPU of the VM).
    pub fn is_mixable(self) -> bool {
        matches!(
            self,
            WorkloadKind::Cpu
                | WorkloadKind::Sleep
                | WorkloadKind::Pingpong
                | WorkloadKind::Burst
                | WorkloadKind::Spinlock
        )
    }

    /// The parameters this kind accepts besides `name` and `kind`.
    pub fn params(self) -> Vec<&'static str> {
        let own: &[&str] = match self {
            WorkloadKind::Cpu => &["report_ms"],
            WorkloadKind::Sleep => &["interval_us", "wakes"],
            WorkloadKind::Pingpong => &[],
            WorkloadKind::Burst => &["period_us", "run_us", "wakes"],
            WorkloadKind::Spinlock => &["cs_ns", "gap_ns", "pv_spin"],
            WorkloadKind::Barrier | WorkloadKind::Shootdown => &["work_us"],
            WorkloadKind::Server => &["rate", "work_us", "seed", "lock", "touch_kib", "wakes"],
            WorkloadKind::Mixed => &["mixed"],
            WorkloadKind::Hostile => &["flood_kib", "flood_records", "random_ports", "random_mmio"],
            // The Linux image, its command line, copies (counts and/or
            // "vcpus"), passes, tests, seconds per pass (unixbench.rs).
            WorkloadKind::UnixBench => {
                return vec![
                    "kernel",
                    "initramfs",
                    "cmdline",
                    "copies",
                    "passes",
                    "tests",
                    "seconds",
                ];
            }
        };
        BENCH_COMMON.iter().chain(own).copied().collect()
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of the workload axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Unique in the matrix, `[A-Za-z0-9_-]`.
    pub name: String,
    pub kind: WorkloadKind,
    /// Parameters, sorted by key (values as the guest sees them).
    pub params: BTreeMap<String, String>,
    /// Extra `key=value` words passed to the guest unchecked (`args`).
    pub extra_args: Vec<String>,
    /// A `unixbench` workload's parameters, parsed (paths resolved
    /// against the matrix file); `None` for the bench guest's workloads.
    pub suite: Option<SuiteSpec>,
}

impl Workload {
    /// The guest's command-line words: `workload=KIND` first, then the
    /// parameters, then the extra words.
    pub fn guest_args(&self) -> Vec<String> {
        let mut out = vec![format!("workload={}", self.kind)];
        out.extend(self.params.iter().map(|(k, v)| format!("{k}={v}")));
        out.extend(self.extra_args.iter().cloned());
        out
    }

    /// How long the guest runs the workload (its `duration_ms`, default
    /// 1000 as in the guest), for the progress bar's estimate.
    /// (`args` words count too: the guest reads the command line.)
    pub fn duration_ms(&self) -> u64 {
        self.guest_args()
            .iter()
            .rev()
            .find_map(|w| w.strip_prefix("duration_ms="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000)
    }

    /// `mixed=`: the per-vCPU entries.
    pub fn mixed_entries(&self) -> Option<Vec<&str>> {
        self.params.get("mixed").map(|m| m.split(',').collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_params() {
        for k in WorkloadKind::ALL {
            assert_eq!(WorkloadKind::parse(k.as_str()).unwrap(), k);
        }
        let e = WorkloadKind::parse("slep").unwrap_err();
        assert!(e.contains("sleep") && e.contains("unixbench"), "{e}");
        assert!(WorkloadKind::Sleep.params().contains(&"interval_us"));
        assert!(WorkloadKind::Cpu.params().contains(&"duration_ms"));
        assert!(!WorkloadKind::UnixBench.params().contains(&"duration_ms"));
        assert!(WorkloadKind::UnixBench.params().contains(&"copies"));
        assert!(WorkloadKind::Hostile.params().contains(&"random_mmio"));
        assert_eq!(WorkloadKind::Hostile.expected_end(), Some("triple_fault"));
        assert_eq!(WorkloadKind::Cpu.expected_end(), None);
    }

    #[test]
    fn guest_args_put_the_kind_first() {
        let w = Workload {
            name: "s".into(),
            kind: WorkloadKind::Sleep,
            params: [("interval_us", "500"), ("duration_ms", "300")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            extra_args: vec!["debug=1".into()],
            suite: None,
        };
        assert_eq!(
            w.guest_args(),
            [
                "workload=sleep",
                "duration_ms=300",
                "interval_us=500",
                "debug=1"
            ]
        );
        assert_eq!(w.duration_ms(), 300);
        let mut w = w;
        w.params.remove("duration_ms");
        w.extra_args.push("duration_ms=70000".into());
        assert_eq!(w.duration_ms(), 70000);
    }
}
