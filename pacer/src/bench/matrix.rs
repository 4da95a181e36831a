//! The matrix file (TOML): the axes of a benchmark run, validated the way
//! host configs are (`deny_unknown_fields`, every error as
//! `file:line:col: field: message`, all errors at once).
//!
//! ```toml
//! [matrix]
//! name = "smoke"
//! kernel = "../guests/out/bench-guest.elf"   # the bench guest image
//! host_cpus = "0-1"           # the CPUs cells run on (default: all online)
//! repetitions = 2
//! cell_timeout_s = 30         # a cell still running then is stopped: "timeout"
//! baseline = "host"           # or a list, e.g. ["host", "qemu"]; ratios in the summary
//! policies = ["host", "haiku", "haiku:power-saving", "global-rr", "pinned", "qemu", "native",
//!             { label = "haiku-w", policy = "haiku", dispatch = "workers" },
//!             { label = "haiku-kvm", policy = "haiku", dispatch = "kvm-irqchip", kvm_poll_us = 1000 }]
//! memory_mib = 32             # per VM unless the VM says otherwise
//! trace = true                # a scheduling trace per Pacer cell (scheduled policies)
//!
//! [[workload]]
//! name = "cpu"                # unique; what rows and files call it
//! kind = "cpu"                # cpu | sleep | pingpong | burst | spinlock | barrier | shootdown | mixed | unixbench
//! duration_ms = 500           # parameters of the kind (see workload.rs)
//!
//! [[workload]]
//! name = "ub"
//! kind = "unixbench"          # a Linux guest running the UnixBench-style suite
//! kernel = "../guests/out/linux/vmlinux"   # relative to this file, as above
//! initramfs = "../guests/out/linux/initramfs.cpio.gz"
//! copies = [1, "vcpus"]       # also: passes = 3 or "10,3", tests = "pipe,spawn",
//!                             # seconds = 2 (per pass), cmdline = "quiet"
//!
//! [[layout]]
//! name = "2x1"
//! workloads = ["cpu"]         # optional: only these workloads run on this layout
//! under_test = "a"            # optional: the VM entry judged (or "all"); headline.rs
//! headline = { metric = "cpu.units_per_s", better = "higher" }   # optional, or a list
//! vm = [
//!   { name = "a", vcpus = 1, cpus = "0" },
//!   { name = "b", count = 2, vcpus = 2, cpus = "0-1", priority = 10,
//!     class = "timeshare", memory_mib = 64, workload = "cpu" },   # a fixed workload
//! ]
//! ```
//!
//! The cells are policies x layouts x workloads x repetitions (`cells.rs`).
//! A VM with its own `workload` runs it in every cell of its layout (the
//! hog beside a latency-sensitive VM); the others run the cell's workload.

use super::headline::{
    cell_metrics, own_metric, produces, HeadlineMetric, LayoutHeadline, ALL_VMS, SCHED_METRICS,
};
use super::metrics::Better;
use super::unixbench::SuiteSpec;
use super::workload::{Workload, WorkloadKind};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;
use vcpu_engine::host_cpus::{HostCpu, HostCpuSet};
use vcpu_engine::DispatchKind;
use vcpu_sched::tunables::{PRIORITY_NORMAL, PRIORITY_REALTIME_MAX, PRIORITY_REALTIME_MIN};
use vcpu_sched::{Mode, SchedClass};
use vmm::config::{line_col, Diagnostic, HostInfo, KVM_POLL_US};
use vmm::policy::Policy;

/// The label of the QEMU peer column in `policies`.
pub const QEMU: &str = "qemu";
/// The label of the native column (the `unixbench` suite on the host
/// itself, no VM) in `policies`.
pub const NATIVE: &str = "native";
/// Default baseline of the ratios.
pub const DEFAULT_BASELINE: &str = "host";
const DEFAULT_MEMORY_MIB: u64 = 32;
const DEFAULT_CELL_TIMEOUT_S: f64 = 60.0;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    #[error("cannot read matrix file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", format_diagnostics(.path, .diagnostics))]
    Invalid {
        path: PathBuf,
        diagnostics: Vec<Diagnostic>,
    },
    #[error("{0}")]
    Host(#[from] vmm::config::ConfigError),
}

fn format_diagnostics(path: &Path, diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| {
            let at = format!("{}:{}:{}", path.display(), d.line, d.column);
            if d.field.is_empty() {
                format!("{at}: {}", d.message)
            } else {
                format!("{at}: {}: {}", d.field, d.message)
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Who runs a column of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// Pacer, under one of its policies.
    Pacer {
        policy: Policy,
        mode: Mode,
        /// The dispatch the column names (its own or the matrix's); None:
        /// each cell's config's default (`vmm::config::default_dispatch`).
        dispatch: Option<DispatchKind>,
        /// `host.kvm_poll_us` (only under `kvm-irqchip` dispatch).
        kvm_poll_us: u64,
    },
    /// QEMU with KVM, running the same guest image (a peer to compare with).
    Qemu,
    /// No VM: the `unixbench` suite on the host itself (`native.rs`).
    Native,
}

/// One entry of the policy axis.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySpec {
    /// Unique; what tables, files and plots call it.
    pub label: String,
    pub runner: Runner,
}

/// One VM of a layout (already expanded from `count`).
#[derive(Debug, Clone, PartialEq)]
pub struct VmSpec {
    pub name: String,
    /// The `[[layout]] vm` entry it came from (its name), for grouping.
    pub group: String,
    /// That entry's index in the layout's `vm` array.
    pub entry: usize,
    pub vcpus: u32,
    pub cpus: HostCpuSet,
    pub class: SchedClass,
    pub priority: u8,
    /// Operator shares of each vCPU (`weight`, `cap`, `reservation` as in
    /// a config's `[[vm]]`).
    pub shares: vmm::config::sched_rules::Shares,
    /// Relaxed co-scheduling of its vCPUs, or none (a config's
    /// `vm[].coschedule`).
    pub coschedule: vcpu_sched::Coschedule,
    /// The layout named `coschedule` (a config's `vm[].coschedule_named`).
    pub coschedule_named: bool,
    pub memory_mib: u64,
    /// A workload of its own (an index into `Matrix::workloads`), else the
    /// cell's.
    pub workload: Option<usize>,
}

/// One entry of the layout axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub name: String,
    pub vms: Vec<VmSpec>,
    /// Indices into `Matrix::workloads` this layout runs.
    pub workloads: Vec<usize>,
    /// Its VM under test and headline metric(s) (`headline.rs`).
    pub headline: LayoutHeadline,
}

impl Layout {
    /// vCPUs per CPU of the union of the VMs' core sets.
    pub fn overcommit(&self) -> f64 {
        let mut cpus = HostCpuSet::new();
        for v in &self.vms {
            for c in v.cpus.iter() {
                cpus.insert(c);
            }
        }
        let vcpus: u32 = self.vms.iter().map(|v| v.vcpus).sum();
        vcpus as f64 / cpus.len().max(1) as f64
    }

    /// "2 VMs x 1 vCPU, ..." for tables and the report.
    pub fn describe(&self) -> String {
        let vms: Vec<String> = self
            .vms
            .iter()
            .map(|v| {
                let mut s = format!("{} {}v@{}", v.name, v.vcpus, v.cpus.to_list());
                if v.class == SchedClass::Realtime {
                    s += " rt";
                }
                if v.priority != PRIORITY_NORMAL {
                    s += &format!(" prio {}", v.priority);
                }
                let d = vmm::config::sched_rules::Shares::default();
                if v.shares.weight != d.weight {
                    s += &format!(" weight {}", v.shares.weight);
                }
                if let Some(cap) = v.shares.cap {
                    s += &format!(" cap {}%", cap * v.vcpus / 10);
                }
                if v.shares.reservation != 0 {
                    s += &format!(" resv {}%", v.shares.reservation * v.vcpus / 10);
                }
                if v.coschedule != vcpu_sched::Coschedule::Off {
                    s += &format!(" cosched {}", v.coschedule);
                }
                if let Some(b) = v.shares.latency_bound {
                    s += &format!(
                        " bound {}us/{}%",
                        b.bound / 1000,
                        b.budget_permille * v.vcpus / 10
                    );
                }
                s
            })
            .collect();
        format!("{} (overcommit {:.1})", vms.join(", "), self.overcommit())
    }
}

/// A validated matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    pub path: PathBuf,
    pub name: String,
    pub description: String,
    /// The bench guest image (resolved against the matrix file).
    pub kernel: PathBuf,
    pub host_cpus: HostCpuSet,
    pub repetitions: u32,
    pub cell_timeout: Duration,
    /// Policy labels the summary divides by (each present in `policies`).
    pub baselines: Vec<String>,
    pub policies: Vec<PolicySpec>,
    pub workloads: Vec<Workload>,
    pub layouts: Vec<Layout>,
    /// Record a scheduling trace of every cell a scheduled policy runs
    /// (`<out>/traces/<cell>.trace`).
    pub trace: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawStrings {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicyTable {
    label: Option<String>,
    policy: String,
    mode: Option<String>,
    dispatch: Option<DispatchKind>,
    kvm_poll_us: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawPolicy {
    Short(String),
    Table(RawPolicyTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHead {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    kernel: Spanned<String>,
    host_cpus: Option<Spanned<String>>,
    repetitions: Option<Spanned<i64>>,
    cell_timeout_s: Option<Spanned<f64>>,
    baseline: Option<Spanned<RawStrings>>,
    policies: Spanned<Vec<Spanned<RawPolicy>>>,
    dispatch: Option<DispatchKind>,
    memory_mib: Option<Spanned<i64>>,
    #[serde(default)]
    trace: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVm {
    name: Spanned<String>,
    count: Option<Spanned<i64>>,
    vcpus: Spanned<i64>,
    cpus: Option<Spanned<String>>,
    class: Option<Spanned<SchedClass>>,
    priority: Option<Spanned<i64>>,
    weight: Option<Spanned<i64>>,
    cap: Option<Spanned<i64>>,
    reservation: Option<Spanned<i64>>,
    latency_bound_us: Option<Spanned<i64>>,
    bound_budget: Option<Spanned<i64>>,
    coschedule: Option<Spanned<String>>,
    memory_mib: Option<Spanned<i64>>,
    workload: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLayout {
    name: Spanned<String>,
    workloads: Option<Spanned<Vec<String>>>,
    under_test: Option<Spanned<String>>,
    headline: Option<Spanned<toml::Value>>,
    vm: Spanned<Vec<RawVm>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatrix {
    matrix: RawHead,
    #[serde(default)]
    workload: Vec<BTreeMap<String, Spanned<toml::Value>>>,
    #[serde(default)]
    layout: Vec<RawLayout>,
}

/// What a matrix field accepts, by its path pattern (array indices as
/// `[]`): the words serde's errors are put in (`config_errors`).
pub fn expectation(pattern: &str) -> Option<&'static str> {
    Some(match pattern {
        "matrix" => "a [matrix] table",
        "matrix.name" | "layout[].name" | "layout[].vm[].name" | "workload[].name" => {
            "a name in quotes (1-64 characters of A-Z a-z 0-9 _ -)"
        }
        "matrix.description" => "a description in quotes",
        "matrix.kernel" => "a path in quotes (the bench guest image)",
        "matrix.host_cpus" | "layout[].vm[].cpus" => "a CPU list in quotes such as \"0-3,8\"",
        "matrix.repetitions" => "an integer from 1 to 10000",
        "matrix.cell_timeout_s" => "a number of seconds greater than 0, such as 30 or 2.5",
        "matrix.baseline" => {
            "a policy label in quotes such as \"host\", or an array of them such as [\"host\", \"qemu\"]"
        }
        "matrix.baseline[]" => "a policy label in quotes",
        "matrix.policies" => "an array of policies such as [\"host\", \"haiku\"]",
        "matrix.policies[]" => {
            "a policy in quotes such as \"haiku\" or \"haiku:power-saving\", or a table such as { label = \"haiku-w\", policy = \"haiku\", dispatch = \"workers\" }"
        }
        "matrix.policies[].label" => "a label in quotes",
        "matrix.policies[].policy" => "a policy name in quotes such as \"haiku\"",
        "matrix.policies[].mode" => "one of \"low-latency\", \"power-saving\"",
        "matrix.dispatch" | "matrix.policies[].dispatch" => "one of \"threads\", \"workers\", \"kvm-irqchip\", \"ranked\"",
        "matrix.policies[].kvm_poll_us" => {
            "an integer number of microseconds from 10 to 10000 (with dispatch = \"kvm-irqchip\" or \"ranked\")"
        }
        "matrix.memory_mib" | "layout[].vm[].memory_mib" => {
            "an integer number of MiB from 2 to 1048576"
        }
        "matrix.trace" => "true or false",
        "workload" => "[[workload]] tables (one per workload)",
        "workload[]" => "a [[workload]] table",
        "layout" => "[[layout]] tables (one per layout)",
        "layout[]" => "a [[layout]] table",
        "layout[].workloads" => "an array of workload names such as [\"cpu\"]",
        "layout[].workloads[]" => "a workload name in quotes",
        "layout[].under_test" => "the name of a VM entry of the layout in quotes, or \"all\"",
        "layout[].vm" => "an array of VMs such as [ { name = \"a\", vcpus = 1 } ]",
        "layout[].vm[]" => "a VM table such as { name = \"a\", vcpus = 1, cpus = \"0\" }",
        "layout[].vm[].count" => "an integer from 1 to 64",
        "layout[].vm[].vcpus" => "an integer from 1 to 254",
        "layout[].vm[].class" => "one of \"timeshare\", \"realtime\"",
        "layout[].vm[].priority" => "an integer priority (timeshare 1-99, realtime 100-120)",
        "layout[].vm[].workload" => "a workload name in quotes",
        "workload[].kind" => {
            "a workload kind in quotes: \"cpu\", \"sleep\", \"pingpong\", \"burst\", \"spinlock\", \"barrier\", \"shootdown\", \"mixed\" or \"unixbench\""
        }
        "workload[].args" => "extra key=value words in quotes such as \"apic=x2\"",
        _ => return None,
    })
}

/// The matrix file's schema for `config_errors`.
pub const SCHEMA: vmm::config::errors::Schema = vmm::config::errors::Schema {
    expectation,
    table_fields: &[
        "matrix",
        "workload",
        "workload[]",
        "layout",
        "layout[]",
        "layout[].vm",
        "layout[].vm[]",
    ],
};

struct Checker<'a> {
    text: &'a str,
    diags: Vec<Diagnostic>,
}

impl Checker<'_> {
    fn err(&mut self, span: Range<usize>, field: impl Into<String>, message: impl ToString) {
        let (line, column) = line_col(self.text, span.start);
        self.diags.push(Diagnostic {
            line,
            column,
            field: vmm::config::errors::readable(&field.into()),
            message: vmm::config::errors::readable(&message.to_string()),
        });
    }

    /// An error about a field the file left out of the table at `span`,
    /// in the host config's words: `missing; expected ...`.
    fn missing(&mut self, span: Range<usize>, field: &str) {
        let what = expectation(&vmm::config::errors::pattern_of(field)).unwrap_or("a value");
        self.err(span, field, format!("missing; expected {what}"));
    }

    /// An error about the value at `span` that is of the wrong type:
    /// `expected ..., found the integer 3`, as the host config says it.
    fn wrong_type(&mut self, span: Range<usize>, field: &str, expected: &str) {
        let found = vmm::config::errors::SpanIndex::new(self.text)
            .locate(span.start)
            .map_or_else(|| "another type".to_string(), |n| n.found.clone());
        self.err(span, field, format!("expected {expected}, found {found}"));
    }

    /// The span of `key` written before the value at `value` on its line
    /// (so an error about a key points at the key).
    fn key_span(&self, key: &str, value: &Range<usize>) -> Range<usize> {
        let line_start = self.text[..value.start.min(self.text.len())]
            .rfind('\n')
            .map_or(0, |i| i + 1);
        match self.text[line_start..value.start].rfind(key) {
            Some(i) => line_start + i..line_start + i + key.len(),
            None => value.clone(),
        }
    }

    fn name(&mut self, raw: &Spanned<String>, field: &str) -> String {
        let n = raw.get_ref();
        if n.is_empty()
            || n.len() > 64
            || !n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            self.err(
                raw.span(),
                field,
                format!("{n:?}: names are 1-64 characters of [A-Za-z0-9_-]"),
            );
        }
        n.clone()
    }

    fn cpus(&mut self, raw: &Spanned<String>, field: &str) -> Option<HostCpuSet> {
        match HostCpuSet::parse_list(raw.get_ref()) {
            Ok(s) if s.is_empty() => {
                self.err(raw.span(), field, "the CPU set is empty");
                None
            }
            Ok(s) => Some(s),
            Err(e) => {
                self.err(raw.span(), field, e.to_string());
                None
            }
        }
    }

    fn int_in(&mut self, raw: &Spanned<i64>, field: &str, lo: i64, hi: i64) -> i64 {
        let v = *raw.get_ref();
        if !(lo..=hi).contains(&v) {
            self.err(
                raw.span(),
                field,
                format!("{v}: must be between {lo} and {hi}"),
            );
        }
        v.clamp(lo, hi)
    }
}

fn parse_policy(
    raw: &RawPolicy,
    default_dispatch: Option<DispatchKind>,
) -> Result<PolicySpec, (String, String)> {
    let mut kvm_poll_us = None;
    let (label, policy, mode, dispatch) = match raw {
        RawPolicy::Short(s) => {
            let (p, m) = match s.split_once(':') {
                Some((p, m)) => (p, Some(m.to_string())),
                None => (s.as_str(), None),
            };
            (s.clone(), p.to_string(), m, None)
        }
        RawPolicy::Table(t) => {
            let label = t.label.clone().unwrap_or_else(|| match &t.mode {
                Some(m) => format!("{}:{m}", t.policy),
                None => t.policy.clone(),
            });
            kvm_poll_us = t.kvm_poll_us;
            (label, t.policy.clone(), t.mode.clone(), t.dispatch)
        }
    };
    if policy == QEMU || policy == NATIVE {
        if mode.is_some() || dispatch.is_some() || kvm_poll_us.is_some() {
            return Err((
                "policies".into(),
                format!(
                    "{policy:?} takes no mode or dispatch (the host kernel schedules its threads)"
                ),
            ));
        }
        let runner = if policy == QEMU {
            Runner::Qemu
        } else {
            Runner::Native
        };
        return Ok(PolicySpec { label, runner });
    }
    let policy: Policy = policy.parse().map_err(|e: String| {
        (
            "policies".to_string(),
            format!("{e}, or \"qemu\" for the QEMU peer, or \"native\" for the suite on the host"),
        )
    })?;
    let mode = match &mode {
        Some(m) if !policy.uses_mode() => {
            return Err((
                "policies".into(),
                format!("policy \"{policy}\" has no mode (got {m:?})"),
            ))
        }
        Some(m) => m.parse().map_err(|e: String| ("policies".to_string(), e))?,
        None => Mode::default(),
    };
    let dispatch = match (dispatch, kvm_poll_us) {
        (d, Some(us))
            if !d.is_some_and(DispatchKind::in_kernel_lapic)
                || !(KVM_POLL_US.0..=KVM_POLL_US.1).contains(&(us as i64)) =>
        {
            return Err((
                "policies".into(),
                format!(
                    "kvm_poll_us = {us}: takes {} to {} us, and only with dispatch = \"kvm-irqchip\" or \"ranked\"",
                    KVM_POLL_US.0, KVM_POLL_US.1
                ),
            ))
        }
        (d, _) => d,
    };
    if dispatch.is_some() && policy == Policy::Host {
        return Err((
            "policies".into(),
            "policy \"host\" has no dispatch mechanism (the host kernel runs the vCPU threads)"
                .into(),
        ));
    }
    let dispatch = dispatch.or(default_dispatch);
    Ok(PolicySpec {
        label,
        runner: Runner::Pacer {
            policy,
            mode,
            dispatch,
            kvm_poll_us: kvm_poll_us.unwrap_or(vmm::config::DEFAULT_KVM_POLL_US),
        },
    })
}

fn workload_entry(
    c: &mut Checker<'_>,
    i: usize,
    table: &BTreeMap<String, Spanned<toml::Value>>,
    table_span: Range<usize>,
    base: &Path,
) -> Option<Workload> {
    let field = |k: &str| format!("workload[{i}].{k}");
    let string = |c: &mut Checker<'_>, key: &str| -> Option<Spanned<String>> {
        let v = table.get(key)?;
        match v.get_ref() {
            toml::Value::String(s) => Some(Spanned::new(v.span(), s.clone())),
            _ => {
                let f = field(key);
                let expected = expectation(&vmm::config::errors::pattern_of(&f))
                    .unwrap_or("a string in quotes");
                c.wrong_type(v.span(), &f, expected);
                None
            }
        }
    };
    let name = match string(c, "name") {
        Some(n) => c.name(&n, &field("name")),
        None => {
            if !table.contains_key("name") {
                c.missing(table_span.clone(), &field("name"));
            }
            return None;
        }
    };
    let kind = match string(c, "kind") {
        Some(k) => match WorkloadKind::parse(k.get_ref()) {
            Ok(kind) => kind,
            Err(e) => {
                c.err(k.span(), field("kind"), e);
                return None;
            }
        },
        None => {
            if !table.contains_key("kind") {
                c.missing(table_span, &field("kind"));
            }
            return None;
        }
    };
    let accepted = kind.params();
    let mut params = BTreeMap::new();
    let mut extra_args = Vec::new();
    for (key, value) in table {
        if key == "name" || key == "kind" {
            continue;
        }
        if key == "args" {
            match value.get_ref() {
                toml::Value::String(s) => {
                    for word in s.split_whitespace() {
                        if !word.contains('=') || word.contains('"') {
                            c.err(
                                value.span(),
                                field("args"),
                                format!("{word:?} is not a key=value word"),
                            );
                        }
                        extra_args.push(word.to_string());
                    }
                }
                _ => c.wrong_type(
                    value.span(),
                    &field("args"),
                    expectation("workload[].args").unwrap_or("a string in quotes"),
                ),
            }
            continue;
        }
        if !accepted.contains(&key.as_str()) {
            let span = c.key_span(key, &value.span());
            c.err(
                span,
                field(key),
                format!(
                    "unknown parameter of a {kind} workload (expected one of: {}, args)",
                    accepted.join(", ")
                ),
            );
            continue;
        }
        let text = match value.get_ref() {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(n) if *n >= 0 => n.to_string(),
            // The suite's seconds per pass may be fractional.
            toml::Value::Float(f) if key == "seconds" && f.is_finite() && *f > 0.0 => f.to_string(),
            toml::Value::Array(a) if key == "copies" => a
                .iter()
                .map(|v| match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
            _ => {
                c.err(
                    value.span(),
                    field(key),
                    "must be a string or a non-negative integer",
                );
                continue;
            }
        };
        // A Linux guest's own command line may have several words.
        let words_allowed = kind == WorkloadKind::UnixBench && key == "cmdline";
        if text.is_empty()
            || (!words_allowed && text.chars().any(|ch| ch.is_whitespace() || ch == '"'))
        {
            c.err(
                value.span(),
                field(key),
                format!("{text:?} cannot be passed on a kernel command line"),
            );
            continue;
        }
        params.insert(key.clone(), text);
    }
    if kind == WorkloadKind::Mixed && !params.contains_key("mixed") {
        let span = table.get("kind").map(|k| k.span()).unwrap_or_default();
        c.err(
            span,
            field("mixed"),
            "a mixed workload needs `mixed` (one workload per vCPU, comma-separated)",
        );
    }
    if let Some(m) = table.get("mixed") {
        for entry in params.get("mixed").into_iter().flat_map(|m| m.split(',')) {
            match WorkloadKind::parse(entry) {
                Ok(k) if k.is_mixable() => {}
                _ => c.err(
                    m.span(),
                    field("mixed"),
                    format!("{entry:?} is not one of cpu, sleep, pingpong, burst, spinlock"),
                ),
            }
        }
    }
    let suite = if kind == WorkloadKind::UnixBench {
        // Image paths are relative to the matrix file, as its `kernel`.
        for key in ["kernel", "initramfs"] {
            if let Some(p) = params.get_mut(key) {
                *p = base.join(&*p).display().to_string();
            }
        }
        match SuiteSpec::from_params(&params) {
            Ok(spec) => Some(spec),
            Err(errors) => {
                for (key, message) in errors {
                    let span = table
                        .get(key)
                        .or_else(|| table.get("kind"))
                        .map(|v| v.span())
                        .unwrap_or_default();
                    c.err(span, field(key), message);
                }
                return None;
            }
        }
    } else {
        None
    };
    Some(Workload {
        name,
        kind,
        params,
        extra_args,
        suite,
    })
}

/// A layout's `under_test` and `headline`, checked: the VM under test is
/// one of its VM entries (or "all"), a direction is "higher" or "lower",
/// a metric name is a dotted name.
fn layout_headline(
    c: &mut Checker<'_>,
    l: &RawLayout,
    li: usize,
    vms: &[VmSpec],
    workloads: &[&Workload],
) -> LayoutHeadline {
    let under_test = l.under_test.as_ref().map(|u| {
        let name = u.get_ref();
        if name != ALL_VMS && !vms.iter().any(|v| &v.group == name) {
            let mut entries: Vec<&str> = vms.iter().map(|v| v.group.as_str()).collect();
            entries.dedup();
            c.err(
                u.span(),
                format!("layout[{li}].under_test"),
                format!(
                    "{name:?} is not a VM entry of this layout (expected one of: {}, or \"{ALL_VMS}\")",
                    entries.join(", ")
                ),
            );
        }
        name.clone()
    });
    let Some(raw) = &l.headline else {
        return LayoutHeadline {
            under_test,
            metrics: Vec::new(),
        };
    };
    let field = format!("layout[{li}].headline");
    let items: Vec<&toml::Value> = match raw.get_ref() {
        toml::Value::Array(v) => v.iter().collect(),
        one => vec![one],
    };
    if items.is_empty() {
        c.err(
            raw.span(),
            &field,
            "name at least one metric (or leave `headline` out for the workload's own)",
        );
    }
    let many = matches!(raw.get_ref(), toml::Value::Array(_));
    let mut metrics = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let at = if many {
            format!("{field}[{i}]")
        } else {
            field.clone()
        };
        let (name, better) = match item {
            toml::Value::String(n) => (n.as_str(), None),
            toml::Value::Table(t) => {
                if let Some(k) = t
                    .keys()
                    .find(|k| !["metric", "better"].contains(&k.as_str()))
                {
                    c.err(
                        raw.span(),
                        format!("{at}.{k}"),
                        "unknown key (expected `metric` and optionally `better`)",
                    );
                }
                match t.get("metric").and_then(toml::Value::as_str) {
                    Some(n) => (n, t.get("better")),
                    None => {
                        c.err(
                            raw.span(),
                            format!("{at}.metric"),
                            "missing; expected a metric name",
                        );
                        continue;
                    }
                }
            }
            _ => {
                c.err(
                    raw.span(),
                    &at,
                    "expected a metric name or { metric = \"...\", better = \"higher\" | \"lower\" }",
                );
                continue;
            }
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "_.".contains(ch))
        {
            c.err(
                raw.span(),
                format!("{at}.metric"),
                format!("{name:?}: a metric name is a dotted name such as \"burst.run_fraction\""),
            );
        } else if !workloads.is_empty() && !produces(workloads, name) {
            c.err(raw.span(), &at, not_produced(name, workloads));
        }
        let mut h = HeadlineMetric::named(name);
        match better.map(|b| b.as_str()) {
            None => {}
            Some(Some("higher")) => h.better = Better::Higher,
            Some(Some("lower")) => h.better = Better::Lower,
            Some(other) => c.err(
                raw.span(),
                format!("{at}.better"),
                format!(
                    "expected \"higher\" or \"lower\", found {}",
                    other.map_or_else(|| "a non-string".to_string(), |o| format!("{o:?}"))
                ),
            ),
        }
        metrics.push(h);
    }
    LayoutHeadline {
        under_test,
        metrics,
    }
}

/// Why `name` cannot be a headline of a layout whose VMs run
/// `workloads`, with the metrics they do produce.
fn not_produced(name: &str, workloads: &[&Workload]) -> String {
    let known = cell_metrics(workloads);
    let hint = match vmm::config::errors::near_miss(name, known.iter().map(String::as_str)) {
        Some(k) => format!("; did you mean \"{k}\"?"),
        // A kind's name for its own figure ("cpu" for cpu.units_per_s).
        None => WorkloadKind::parse(name)
            .ok()
            .and_then(own_metric)
            .filter(|m| known.iter().any(|k| k.as_str() == *m))
            .map(|m| format!("; did you mean \"{m}\"?"))
            .unwrap_or_default(),
    };
    let mut kinds: Vec<String> = workloads
        .iter()
        .map(|w| format!("{} ({})", w.name, w.kind))
        .collect();
    kinds.dedup();
    let (sched, guest): (Vec<&str>, Vec<&str>) = known
        .iter()
        .map(String::as_str)
        .partition(|m| SCHED_METRICS.contains(m));
    let suite = if workloads.iter().any(|w| w.kind == WorkloadKind::UnixBench) {
        ", the suite's unixbench.index.copies_N"
    } else {
        ""
    };
    format!(
        "{name:?} is not a metric the layout's workloads produce{hint}; its workloads {} produce: {}{suite}, and the scheduler's: {}",
        kinds.join(", "),
        guest.join(", "),
        sched.join(", ")
    )
}

impl Matrix {
    /// Validate the matrix's own fields in `text` as if read from `path`
    /// (relative paths inside are resolved against `path`'s directory);
    /// [`Matrix::parse`] checks its VMs too.
    pub(super) fn parse_fields(
        text: &str,
        path: &Path,
        host: &HostInfo,
    ) -> Result<Matrix, MatrixError> {
        let invalid = |diagnostics| MatrixError::Invalid {
            path: path.to_path_buf(),
            diagnostics,
        };
        let raw: RawMatrix = toml::from_str(text)
            .map_err(|e| invalid(vec![vmm::config::errors::explain_in(&SCHEMA, text, &e)]))?;
        let base = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut c = Checker {
            text,
            diags: Vec::new(),
        };
        let head = &raw.matrix;
        let name = c.name(&head.name, "matrix.name");

        let kernel = base.join(head.kernel.get_ref());
        if !kernel.is_file() {
            c.err(
                head.kernel.span(),
                "matrix.kernel",
                format!(
                    "{} is not a file (the bench guest is built into guests/out/ by guests/build.sh)",
                    shown_resolved(head.kernel.get_ref(), &kernel)
                ),
            );
        }
        let host_cpus = match &head.host_cpus {
            Some(s) => {
                let set = c.cpus(s, "matrix.host_cpus").unwrap_or_default();
                let outside = set.difference(&host.online);
                if !outside.is_empty() {
                    c.err(
                        s.span(),
                        "matrix.host_cpus",
                        format!(
                            "CPUs {} are not online on this host (online: {})",
                            outside.to_list(),
                            host.online.to_list()
                        ),
                    );
                }
                set
            }
            None => host.online.clone(),
        };
        let repetitions =
            head.repetitions
                .as_ref()
                .map_or(1, |r| c.int_in(r, "matrix.repetitions", 1, 10_000)) as u32;
        let cell_timeout = match &head.cell_timeout_s {
            Some(t) if !(*t.get_ref() > 0.0 && *t.get_ref() <= 86_400.0) => {
                c.err(
                    t.span(),
                    "matrix.cell_timeout_s",
                    format!("{}: must be > 0 and at most 86400", t.get_ref()),
                );
                Duration::from_secs_f64(DEFAULT_CELL_TIMEOUT_S)
            }
            Some(t) => Duration::from_secs_f64(*t.get_ref()),
            None => Duration::from_secs_f64(DEFAULT_CELL_TIMEOUT_S),
        };
        let default_memory = head
            .memory_mib
            .as_ref()
            .map_or(DEFAULT_MEMORY_MIB as i64, |m| {
                c.int_in(m, "matrix.memory_mib", 2, 1 << 20)
            }) as u64;

        // Policies.
        let mut policies: Vec<PolicySpec> = Vec::new();
        if head.policies.get_ref().is_empty() {
            c.err(
                head.policies.span(),
                "matrix.policies",
                "name at least one policy",
            );
        }
        for (i, p) in head.policies.get_ref().iter().enumerate() {
            let field = format!("matrix.policies[{i}]");
            match parse_policy(p.get_ref(), head.dispatch) {
                Ok(spec) => {
                    if policies.iter().any(|q| q.label == spec.label) {
                        c.err(
                            p.span(),
                            &field,
                            format!(
                                "duplicate policy label {:?} (give one a `label`)",
                                spec.label
                            ),
                        );
                    }
                    policies.push(spec);
                }
                Err((_, msg)) => c.err(p.span(), &field, msg),
            }
        }
        let baselines = match &head.baseline {
            None => vec![DEFAULT_BASELINE.to_string()],
            Some(b) => match b.get_ref() {
                RawStrings::One(s) => vec![s.clone()],
                RawStrings::Many(v) => v.clone(),
            },
        };
        let baselines: Vec<String> = baselines
            .into_iter()
            .filter(|b| {
                let known = policies.iter().any(|p| &p.label == b);
                // The default baseline may be absent (no ratios then);
                // one the file names must exist.
                if !known && head.baseline.is_some() {
                    let span = head.baseline.as_ref().map(|s| s.span()).unwrap_or_default();
                    let labels: Vec<_> = policies.iter().map(|p| p.label.as_str()).collect();
                    c.err(
                        span,
                        "matrix.baseline",
                        format!("{b:?} is not in `policies` ({})", labels.join(", ")),
                    );
                }
                known
            })
            .collect();

        // Workloads.
        let mut workloads: Vec<Workload> = Vec::new();
        if raw.workload.is_empty() {
            c.err(0..0, "workload", "no [[workload]] defined");
        }
        for (i, t) in raw.workload.iter().enumerate() {
            let span = t
                .values()
                .map(|v| v.span())
                .min_by_key(|s| s.start)
                .unwrap_or_default();
            if let Some(w) = workload_entry(&mut c, i, t, span, &base) {
                if workloads.iter().any(|x| x.name == w.name) {
                    let s = t.get("name").map(|n| n.span()).unwrap_or_default();
                    c.err(
                        s,
                        format!("workload[{i}].name"),
                        format!("duplicate workload name {:?}", w.name),
                    );
                }
                workloads.push(w);
            }
        }
        let workload_index = |name: &str| workloads.iter().position(|w| w.name == name);

        // Layouts.
        let mut layouts: Vec<Layout> = Vec::new();
        if raw.layout.is_empty() {
            c.err(0..0, "layout", "no [[layout]] defined");
        }
        for (li, l) in raw.layout.iter().enumerate() {
            let f = |k: &str| format!("layout[{li}].{k}");
            let lname = c.name(&l.name, &f("name"));
            if layouts.iter().any(|x| x.name == lname) {
                c.err(
                    l.name.span(),
                    f("name"),
                    format!("duplicate layout name {lname:?}"),
                );
            }
            let runs: Vec<usize> = match &l.workloads {
                None => (0..workloads.len()).collect(),
                Some(names) => {
                    let mut v = Vec::new();
                    for n in names.get_ref() {
                        match workload_index(n) {
                            Some(i) => v.push(i),
                            None => c.err(
                                names.span(),
                                f("workloads"),
                                format!("no [[workload]] is named {n:?}"),
                            ),
                        }
                    }
                    v
                }
            };
            if l.vm.get_ref().is_empty() {
                c.err(l.vm.span(), f("vm"), "a layout needs at least one VM");
            }
            let mut vms: Vec<VmSpec> = Vec::new();
            // The layout's reservations (percent of one CPU) and the last one's place.
            let mut reserved: i64 = 0;
            let mut reserved_at: Option<(std::ops::Range<usize>, String)> = None;
            // The first bounded entry's place: an admission refusal points there.
            let mut bounded_at: Option<(std::ops::Range<usize>, String)> = None;
            let mut seen = HashSet::new();
            for (vi, v) in l.vm.get_ref().iter().enumerate() {
                let vf = |k: &str| format!("layout[{li}].vm[{vi}].{k}");
                let group = c.name(&v.name, &vf("name"));
                let count =
                    v.count
                        .as_ref()
                        .map_or(1, |n| c.int_in(n, &vf("count"), 1, 64)) as u32;
                let vcpus =
                    c.int_in(&v.vcpus, &vf("vcpus"), 1, vmm::config::MAX_VCPUS as i64) as u32;
                let cpus = match &v.cpus {
                    Some(s) => {
                        let set = c.cpus(s, &vf("cpus")).unwrap_or_else(|| host_cpus.clone());
                        let outside = set.difference(&host_cpus);
                        if !outside.is_empty() {
                            c.err(
                                s.span(),
                                vf("cpus"),
                                format!(
                                    "CPUs {} are outside matrix.host_cpus {}",
                                    outside.to_list(),
                                    host_cpus.to_list()
                                ),
                            );
                        }
                        set
                    }
                    None => host_cpus.clone(),
                };
                let class = v.class.as_ref().map(|c| *c.get_ref()).unwrap_or_default();
                let (lo, hi, default) = match class {
                    SchedClass::Realtime => (
                        PRIORITY_REALTIME_MIN,
                        PRIORITY_REALTIME_MAX,
                        PRIORITY_REALTIME_MIN,
                    ),
                    _ => (
                        1,
                        vcpu_sched::tunables::PRIORITY_MAX_TIMESHARE,
                        PRIORITY_NORMAL,
                    ),
                };
                if class == SchedClass::Idle {
                    let span = v.class.as_ref().map(|c| c.span()).unwrap_or_default();
                    c.err(
                        span,
                        vf("class"),
                        "a VM's class is \"timeshare\" or \"realtime\"",
                    );
                }
                let priority = v.priority.as_ref().map_or(default as i64, |p| {
                    c.int_in(p, &vf("priority"), lo as i64, hi as i64)
                }) as u8;
                let mut shares = vmm::config::sched_rules::Shares::default();
                let n = vcpus.max(1);
                if let Some(w) = &v.weight {
                    match vmm::config::sched_rules::weight(*w.get_ref()) {
                        Ok(x) => shares.weight = x,
                        Err(why) => c.err(w.span(), vf("weight"), why),
                    }
                }
                if let Some(x) = &v.cap {
                    match vmm::config::sched_rules::cap(*x.get_ref(), n) {
                        Ok(p) => shares.cap = Some(p),
                        Err(why) => c.err(x.span(), vf("cap"), why),
                    }
                }
                if let Some(x) = &v.reservation {
                    match vmm::config::sched_rules::reservation(*x.get_ref(), n) {
                        Ok(p) => {
                            shares.reservation = p;
                            reserved += *x.get_ref() * count as i64;
                            reserved_at = Some((x.span(), vf("reservation")));
                        }
                        Err(why) => c.err(x.span(), vf("reservation"), why),
                    }
                }
                let coschedule = match &v.coschedule {
                    Some(s) => s.get_ref().parse().unwrap_or_else(|_| {
                        c.err(
                            s.span(),
                            vf("coschedule"),
                            format!(
                                "expected \"off\", \"relaxed\" or \"turns\", found {:?}",
                                s.get_ref()
                            ),
                        );
                        vcpu_sched::Coschedule::default()
                    }),
                    None => vcpu_sched::Coschedule::default_for(vcpus),
                };
                match (&v.latency_bound_us, &v.bound_budget) {
                    (None, None) => {}
                    (Some(b), Some(u)) => {
                        let bound = vmm::config::sched_rules::latency_bound(*b.get_ref())
                            .map_err(|why| c.err(b.span(), vf("latency_bound_us"), why))
                            .ok();
                        let budget = vmm::config::sched_rules::bound_budget(*u.get_ref(), n)
                            .map_err(|why| c.err(u.span(), vf("bound_budget"), why))
                            .ok();
                        if class == SchedClass::Realtime {
                            c.err(
                                b.span(),
                                vf("latency_bound_us"),
                                vmm::config::sched_rules::SchedRuleError::BoundRealtime,
                            );
                        }
                        if v.reservation.as_ref().is_some_and(|r| *r.get_ref() != 0) {
                            c.err(
                                b.span(),
                                vf("latency_bound_us"),
                                vmm::config::sched_rules::SchedRuleError::BoundWithReservation,
                            );
                        }
                        if let (Some(bound), Some(budget_permille)) = (bound, budget) {
                            shares.latency_bound = Some(vcpu_sched::bound::LatencyBound {
                                bound,
                                budget_permille,
                            });
                            bounded_at.get_or_insert((b.span(), vf("latency_bound_us")));
                        }
                    }
                    (Some(b), None) => c.err(
                        b.span(),
                        vf("latency_bound_us"),
                        vmm::config::sched_rules::SchedRuleError::BoundHalf("latency_bound_us"),
                    ),
                    (None, Some(u)) => c.err(
                        u.span(),
                        vf("bound_budget"),
                        vmm::config::sched_rules::SchedRuleError::BoundHalf("bound_budget"),
                    ),
                }
                let memory_mib = v.memory_mib.as_ref().map_or(default_memory as i64, |m| {
                    c.int_in(m, &vf("memory_mib"), 2, 1 << 20)
                }) as u64;
                let workload = v.workload.as_ref().and_then(|w| {
                    let i = workload_index(w.get_ref());
                    if i.is_none() {
                        c.err(
                            w.span(),
                            vf("workload"),
                            format!("no [[workload]] is named {:?}", w.get_ref()),
                        );
                    }
                    i
                });
                for k in 0..count {
                    let name = if count == 1 {
                        group.clone()
                    } else {
                        format!("{group}{k}")
                    };
                    if !seen.insert(name.clone()) {
                        c.err(
                            v.name.span(),
                            vf("name"),
                            format!("duplicate VM name {name:?} in layout {lname:?}"),
                        );
                    }
                    vms.push(VmSpec {
                        name,
                        group: group.clone(),
                        entry: vi,
                        vcpus,
                        cpus: cpus.clone(),
                        class,
                        priority,
                        shares,
                        coschedule,
                        coschedule_named: v.coschedule.is_some(),
                        memory_mib,
                        workload,
                    });
                }
            }
            if let Some((span, field)) = bounded_at {
                let view: Vec<vmm::config::bounds::BoundedVm<'_>> = vms
                    .iter()
                    .map(|v| {
                        vmm::config::bounds::BoundedVm::uniform(
                            &v.name, v.vcpus, &v.cpus, v.class, v.priority, &v.shares,
                        )
                    })
                    .collect();
                if let Some(why) = vmm::config::bounds::refusal(&view) {
                    c.err(span, &field, why);
                }
            }
            if let Some((span, field)) = reserved_at {
                if let Err(why) =
                    vmm::config::sched_rules::reservations_fit(reserved, host_cpus.len())
                {
                    c.err(span, &field, why);
                }
            }
            // `mixed` needs one entry per vCPU of every VM that runs it.
            for v in &vms {
                let own = v.workload.into_iter();
                let cell = runs.iter().copied().filter(|_| v.workload.is_none());
                for wi in own.chain(cell) {
                    let Some(w) = workloads.get(wi) else { continue };
                    if let Some(entries) = w.mixed_entries() {
                        if entries.len() != v.vcpus as usize {
                            c.err(
                                l.name.span(),
                                f("vm"),
                                format!(
                                    "VM {:?} has {} vCPU(s) but workload {:?} lists {} entries in `mixed`",
                                    v.name,
                                    v.vcpus,
                                    w.name,
                                    entries.len()
                                ),
                            );
                        }
                    }
                }
            }
            // Every workload a VM of this layout runs in some cell.
            let mut run_by_vms: Vec<&Workload> = Vec::new();
            for v in &vms {
                let own = v.workload.into_iter();
                let cell = runs.iter().copied().filter(|_| v.workload.is_none());
                for w in own.chain(cell).filter_map(|wi| workloads.get(wi)) {
                    if !run_by_vms.iter().any(|x| x.name == w.name) {
                        run_by_vms.push(w);
                    }
                }
            }
            let headline = layout_headline(&mut c, l, li, &vms, &run_by_vms);
            layouts.push(Layout {
                name: lname,
                vms,
                workloads: runs,
                headline,
            });
        }
        // A cell must outlive its workloads (the bench guest's run for
        // `duration_ms`; a unixbench suite's length is its own).
        let longest = layouts
            .iter()
            .flat_map(|l| {
                let own = l.vms.iter().filter_map(|v| v.workload);
                l.workloads.iter().copied().chain(own).collect::<Vec<_>>()
            })
            .filter_map(|i| workloads.get(i).map(|w| (i, w)))
            .filter(|(_, w)| w.kind.is_bench_guest())
            .max_by_key(|(_, w)| w.duration_ms());
        if let Some((wi, w)) = longest {
            let runs = Duration::from_millis(w.duration_ms());
            if cell_timeout <= runs {
                let why = format!(
                    "expected a cell time limit longer than the longest workload runs (workload[{wi}] {:?}: {} s), found {} s",
                    w.name,
                    seconds(runs),
                    seconds(cell_timeout)
                );
                match &head.cell_timeout_s {
                    Some(t) => c.err(t.span(), "matrix.cell_timeout_s", why),
                    None => {
                        let span = raw.workload[wi]
                            .get("duration_ms")
                            .map(|v| v.span())
                            .unwrap_or_default();
                        c.err(span, format!("workload[{wi}].duration_ms"), why);
                    }
                }
            }
        }
        if !c.diags.is_empty() {
            return Err(invalid(c.diags));
        }
        let m = Matrix {
            path: path.to_path_buf(),
            name,
            description: head.description.clone(),
            kernel,
            host_cpus,
            repetitions,
            cell_timeout,
            baselines,
            policies,
            workloads,
            layouts,
            trace: head.trace,
        };
        Ok(m)
    }

    /// The policy entry with this label.
    pub fn policy(&self, label: &str) -> Option<&PolicySpec> {
        self.policies.iter().find(|p| p.label == label)
    }

    /// A short human description: axes and cell count.
    pub fn describe(&self) -> String {
        let labels: Vec<_> = self.policies.iter().map(|p| p.label.as_str()).collect();
        let mut s = format!(
            "matrix {}: {} policies ({}) x {} layouts x {} workloads x {} repetitions on CPUs {}, cell limit {} s\n",
            self.name,
            self.policies.len(),
            labels.join(", "),
            self.layouts.len(),
            self.workloads.len(),
            self.repetitions,
            self.host_cpus.to_list(),
            seconds(self.cell_timeout)
        );
        for l in &self.layouts {
            let w: Vec<_> = l
                .workloads
                .iter()
                .map(|&i| self.workloads[i].name.as_str())
                .collect();
            s += &format!(
                "  layout {}: {}; workloads {}\n",
                l.name,
                l.describe(),
                w.join(", ")
            );
        }
        s
    }
}

/// A duration in seconds as a person reads it: `30`, `2.5`, `0.001`
/// (never a limit of 1 ms shown as "0").
pub fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 100.0 {
        format!("{s:.0}")
    } else {
        let t = format!("{s:.3}");
        let t = t.trim_end_matches('0').trim_end_matches('.');
        if t == "0" && s > 0.0 {
            format!("{s:.1e}")
        } else {
            t.to_string()
        }
    }
}

/// `HostCpu` numbers of a set, for tests and callers that build sets.
pub fn cpu_set(ids: &[u32]) -> HostCpuSet {
    let mut s = HostCpuSet::new();
    for &i in ids {
        s.insert(HostCpu(i));
    }
    s
}

/// A path from a matrix as written and, when it was relative, where it
/// resolved (against the matrix's directory, `..` folded), so a wrong
/// path names the place that was looked at.
fn shown_resolved(written: &str, resolved: &Path) -> String {
    if Path::new(written).is_absolute() {
        return written.to_string();
    }
    let absolute = std::path::absolute(resolved).unwrap_or_else(|_| resolved.to_path_buf());
    let mut folded = PathBuf::new();
    for part in absolute.components() {
        match part {
            std::path::Component::ParentDir => {
                folded.pop();
            }
            std::path::Component::CurDir => {}
            other => folded.push(other),
        }
    }
    format!("\"{written}\" (resolved to {})", folded.display())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) struct Fixture {
        pub dir: PathBuf,
    }

    impl Fixture {
        pub fn new(tag: &str) -> Fixture {
            let dir = std::env::temp_dir().join(format!(
                "pacer-matrix-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            // A bench guest image of one 1 MiB segment at 1 MiB (2 MiB of RAM).
            let elf = vmm::test_images::elf_with_loads(&[(0x10_0000, 0x10_0000)]);
            std::fs::write(dir.join("guest.elf"), elf).unwrap();
            Fixture { dir }
        }
        pub fn parse(&self, text: &str) -> Result<Matrix, MatrixError> {
            let host = HostInfo {
                online: cpu_set(&[0, 1, 2, 3]),
                resources: Default::default(),
            };
            Matrix::parse(text, &self.dir.join("m.toml"), &host)
        }
        fn errors(&self, text: &str) -> String {
            match self.parse(text) {
                Ok(_) => panic!("matrix unexpectedly valid:\n{text}"),
                Err(e) => e.to_string(),
            }
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// [`GOOD`] with the `prio` layout's VMs replaced by `vms` (entries of
    /// a layout's `vm` array).
    pub(crate) fn with_prio_vms(vms: &str) -> String {
        GOOD.replace(
            "vm = [ { name = \"hi\", vcpus = 1, priority = 20 } ]",
            &format!("vm = [ {vms} ]"),
        )
    }

    pub(crate) const GOOD: &str = r#"
[matrix]
name = "t"
kernel = "guest.elf"
host_cpus = "0-1"
repetitions = 3
cell_timeout_s = 20
baseline = ["host", "qemu"]
policies = ["host", "haiku", "haiku:power-saving", { label = "rr-w", policy = "global-rr", dispatch = "workers" }, "qemu", { label = "kvm", policy = "haiku", dispatch = "kvm-irqchip", kvm_poll_us = 800 }]

[[workload]]
name = "cpu"
kind = "cpu"
duration_ms = 300
report_ms = 100

[[workload]]
name = "lat"
kind = "sleep"
interval_us = 500

[[layout]]
name = "pair"
vm = [
  { name = "a", vcpus = 1, cpus = "0" },
  { name = "hog", count = 2, vcpus = 2, cpus = "0-1", workload = "cpu" },
]

[[layout]]
name = "prio"
workloads = ["cpu"]
vm = [ { name = "hi", vcpus = 1, priority = 20 } ]
"#;

    /// A layout's latency bounds: taken per vCPU, and refused with the
    /// config's words when they cannot all be met, at the first bounded
    /// entry.
    #[test]
    fn layout_latency_bounds_are_admitted_as_a_configs() {
        let fx = Fixture::new("bounds");
        let m = fx
            .parse(&with_prio_vms(
                "{ name = \"b\", count = 4, vcpus = 1, latency_bound_us = 1000, bound_budget = 12 }, { name = \"h\", count = 2, vcpus = 1 }",
            ))
            .unwrap();
        let l = m.layouts.iter().find(|l| l.name == "prio").unwrap();
        assert_eq!(
            l.vms[0].shares.latency_bound,
            Some(vcpu_sched::bound::LatencyBound {
                bound: 1_000_000,
                budget_permille: 120
            })
        );
        assert_eq!(l.vms[4].shares.latency_bound, None);
        let e = fx.errors(&with_prio_vms(
            "{ name = \"b\", count = 4, vcpus = 1, latency_bound_us = 300, bound_budget = 20 }",
        ));
        assert!(
            e.contains("layout[1].vm[0].latency_bound_us: expected VM \"b0\"'s latency bound to cover the worst-case wait of its wakes, found 300 us < (kick 100 us"),
            "{e}"
        );
        let e = fx.errors(&with_prio_vms(
            "{ name = \"b\", vcpus = 1, latency_bound_us = 300 }",
        ));
        assert!(
            e.contains("expected `latency_bound_us` and `bound_budget` together"),
            "{e}"
        );
    }

    /// A layout VM's co-scheduling: off unless set, relaxed when asked,
    /// and a misspelling refused at its place (`settings.rs` checks that
    /// the cell's settings carry it).
    #[test]
    fn layout_coschedule_is_taken_and_misspellings_named() {
        let fx = Fixture::new("cosched");
        let m = fx
            .parse(&with_prio_vms(
                "{ name = \"s\", vcpus = 2, coschedule = \"relaxed\" }, { name = \"h\", vcpus = 1 }",
            ))
            .unwrap();
        let l = m.layouts.iter().find(|l| l.name == "prio").unwrap();
        assert_eq!(l.vms[0].coschedule, vcpu_sched::Coschedule::Relaxed);
        assert_eq!(l.vms[1].coschedule, vcpu_sched::Coschedule::Off);
        // Unset: a config's default (relaxed for an SMP VM, fitting its
        // CPUs or wider, off for one of one vCPU).
        let m = fx
            .parse(&with_prio_vms(
                "{ name = \"s\", vcpus = 2 }, { name = \"w\", vcpus = 3 }, { name = \"p\", vcpus = 2, cpus = \"1\" }, { name = \"u\", vcpus = 1 }",
            ))
            .unwrap();
        let l = m.layouts.iter().find(|l| l.name == "prio").unwrap();
        let got: Vec<_> = l.vms.iter().map(|v| v.coschedule).collect();
        use vcpu_sched::Coschedule::{Off, Relaxed};
        assert_eq!(got, [Relaxed, Relaxed, Relaxed, Off]);
        let e = fx.errors(&with_prio_vms(
            "{ name = \"s\", vcpus = 2, coschedule = \"gang\" }",
        ));
        assert!(
            e.contains(
                "layout[1].vm[0].coschedule: expected \"off\", \"relaxed\" or \"turns\", found \"gang\""
            ),
            "{e}"
        );
    }

    /// A headline must be a metric the layout's workloads produce: a
    /// made-up name, a kind's name, a VM's name are refused at parse time
    /// with the metrics they do produce.
    #[test]
    fn headline_metrics_are_ones_the_workloads_produce() {
        let fx = Fixture::new("headline-produced");
        let with = |headline: &str| {
            GOOD.replace(
                "name = \"pair\"",
                &format!("name = \"pair\"\nheadline = {headline}"),
            )
        };
        let m = fx.parse(&with("[\"sleep.wake_latency.p99_ns\", \"jain.cpu.units_per_s\", \"sched.migrations_per_s\", \"sleep.wake_latency.histogram.bucket.1024\"]"));
        assert!(m.is_ok(), "{m:?}");
        let at = "m.toml:24:12: layout[0].headline";
        let e = fx.errors(&with("{ metric = \"nope.metric\" }"));
        assert!(
            e.contains(&format!("{at}: \"nope.metric\" is not a metric")),
            "{e}"
        );
        for produced in [
            "cpu (cpu)",
            "lat (sleep)",
            "cpu.units_per_s",
            "sleep.wake_latency.p99_ns",
            "sched.wake_latency.p99_ns",
        ] {
            assert!(e.contains(produced), "{produced}: {e}");
        }
        assert!(!e.contains("pingpong"), "{e}");
        let e = fx.errors(&with("\"cpu\""));
        assert!(e.contains(&format!("{at}: \"cpu\" is not a metric")), "{e}");
        assert!(e.contains("did you mean \"cpu.units_per_s\"?"), "{e}");
        let e = fx.errors(&with("[\"a\"]"));
        assert!(
            e.contains(&format!("{at}[0]: \"a\" is not a metric")),
            "{e}"
        );
        let e = fx.errors(&with("\"cpu.units_per_sec\""));
        assert!(e.contains("did you mean \"cpu.units_per_s\"?"), "{e}");
        // Layout "prio" runs only cpu: a sleep figure is not one of it.
        let text = GOOD.replace(
            "name = \"prio\"",
            "name = \"prio\"\nheadline = \"sleep.wake_latency.p99_ns\"",
        );
        let e = fx.errors(&text);
        assert!(
            e.contains("layout[1].headline: \"sleep.wake_latency.p99_ns\""),
            "{e}"
        );
    }

    /// A workload's name or kind left out, or of the wrong type, is said
    /// as the host config says it; a matrix that is not UTF-8 gets its
    /// position too.
    #[test]
    fn workload_errors_speak_as_the_config_does() {
        let fx = Fixture::new("workload-words");
        let e = fx.errors(&GOOD.replace("name = \"lat\"\n", ""));
        assert!(
            e.contains("workload[1].name: missing; expected a name in quotes (1-64 characters"),
            "{e}"
        );
        let e = fx.errors(&GOOD.replace("kind = \"sleep\"\n", ""));
        assert!(
            e.contains("workload[1].kind: missing; expected a workload kind in quotes: \"cpu\""),
            "{e}"
        );
        let e = fx.errors(&GOOD.replace("kind = \"sleep\"", "kind = 3"));
        assert!(
            e.contains("m.toml:19:8: workload[1].kind: expected a workload kind in quotes")
                && e.ends_with("found the integer 3"),
            "{e}"
        );
        let e = fx.errors(&GOOD.replace("name = \"lat\"", "name = [\"lat\"]"));
        assert!(
            e.contains("workload[1].name: expected a name in quotes")
                && e.contains("found an array"),
            "{e}"
        );
        // Not UTF-8: the file, the line and column, the field, the byte.
        let path = fx.dir.join("bad.toml");
        let mut bytes = GOOD
            .replace("interval_us = 500", "interval_us = \"5\u{1}\"")
            .into_bytes();
        let at = bytes.iter().position(|&b| b == 1).unwrap();
        bytes[at] = 0xFF;
        std::fs::write(&path, &bytes).unwrap();
        let e = Matrix::load(&path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}:20:17: ", path.display()))
                && e.contains(&format!(
                    "expected UTF-8 text, found the byte 0xFF (byte {} of the file)",
                    at + 1
                )),
            "{e}"
        );
    }

    #[test]
    fn good_matrix() {
        let fx = Fixture::new("good");
        let m = fx.parse(GOOD).unwrap();
        assert_eq!(m.name, "t");
        assert_eq!(m.kernel, fx.dir.join("guest.elf"));
        assert_eq!((m.repetitions, m.cell_timeout.as_secs()), (3, 20));
        assert_eq!(m.baselines, ["host", "qemu"]);
        let labels: Vec<_> = m.policies.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(
            labels,
            ["host", "haiku", "haiku:power-saving", "rr-w", "qemu", "kvm"]
        );
        assert!(matches!(
            m.policies[5].runner,
            Runner::Pacer {
                dispatch: Some(DispatchKind::KvmIrqchip),
                kvm_poll_us: 800,
                ..
            }
        ));
        assert!(matches!(
            m.policies[2].runner,
            Runner::Pacer {
                mode: Mode::PowerSaving,
                ..
            }
        ));
        assert!(matches!(
            m.policies[3].runner,
            Runner::Pacer {
                dispatch: Some(DispatchKind::Workers),
                ..
            }
        ));
        assert_eq!(m.policies[4].runner, Runner::Qemu);
        assert_eq!(
            m.workloads[1].guest_args(),
            ["workload=sleep", "interval_us=500"]
        );
        let pair = &m.layouts[0];
        let names: Vec<_> = pair.vms.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["a", "hog0", "hog1"]);
        assert_eq!(pair.vms[1].group, "hog");
        assert_eq!(pair.vms[1].workload, Some(0));
        assert_eq!(pair.workloads, [0, 1]);
        assert_eq!(pair.overcommit(), 2.5);
        assert_eq!(m.layouts[1].workloads, [0]);
        assert_eq!(m.layouts[1].vms[0].cpus.to_list(), "0-1");
        assert_eq!(m.layouts[1].vms[0].priority, 20);
    }

    #[test]
    fn errors_name_file_line_column_and_field() {
        let fx = Fixture::new("errors");
        // Unknown field in [matrix]: the toml parser's own position.
        let e = fx.errors(&GOOD.replace("repetitions = 3", "repetitions = 3\nrepeat = 2"));
        assert!(e.contains("m.toml:7:1:") && e.contains("repeat"), "{e}");
        // Unknown workload kind: at the value, with the field.
        let e = fx.errors(&GOOD.replace("kind = \"sleep\"", "kind = \"slep\""));
        assert!(
            e.contains("m.toml:19:8: workload[1].kind: unknown workload kind \"slep\""),
            "{e}"
        );
        // Unknown parameter of a kind: at the key.
        let e = fx.errors(&GOOD.replace("interval_us = 500", "interval_ms = 500"));
        assert!(
            e.contains("m.toml:20:1: workload[1].interval_ms: unknown parameter"),
            "{e}"
        );
        // Core set outside host_cpus.
        let e = fx.errors(&GOOD.replace("cpus = \"0\"", "cpus = \"3\""));
        assert!(
            e.contains("m.toml:25:35: layout[0].vm[0].cpus: CPUs 3 are outside"),
            "{e}"
        );
        // A baseline that is not a policy.
        let e = fx.errors(&GOOD.replace("[\"host\", \"qemu\"]", "[\"host\", \"kvmtool\"]"));
        assert!(
            e.contains("m.toml:8:12: matrix.baseline: \"kvmtool\" is not in"),
            "{e}"
        );
        // Bad policy names and modes.
        let e = fx.errors(&GOOD.replace("\"haiku\", ", "\"fifo\", "));
        assert!(
            e.contains("m.toml:9:21: matrix.policies[1]: unknown policy \"fifo\""),
            "{e}"
        );
        let e = fx.errors(&GOOD.replace("\"host\", \"haiku\"", "\"host:low-latency\", \"haiku\""));
        assert!(
            e.contains("matrix.policies[0]") && e.contains("has no mode"),
            "{e}"
        );
        // kvm_poll_us only with kvm-irqchip, and in range.
        for bad in [
            "dispatch = \"kvm-irqchip\", kvm_poll_us = 5",
            "dispatch = \"threads\", kvm_poll_us = 800",
        ] {
            let e = fx.errors(&GOOD.replace("dispatch = \"kvm-irqchip\", kvm_poll_us = 800", bad));
            assert!(
                e.contains("matrix.policies[5]") && e.contains("kvm_poll_us"),
                "{e}"
            );
        }
        // A workload a VM names that does not exist; a layout's list too.
        let e = fx.errors(&GOOD.replace("workload = \"cpu\"", "workload = \"cpuu\""));
        assert!(
            e.contains("layout[0].vm[1].workload") && e.contains(":26:"),
            "{e}"
        );
        let e = fx.errors(&GOOD.replace("workloads = [\"cpu\"]", "workloads = [\"x\"]"));
        assert!(
            e.contains("layout[1].workloads") && e.contains(":31:13:"),
            "{e}"
        );
        // Priority range, duplicate names, zero repetitions: all at once.
        let e = fx.errors(
            &GOOD
                .replace("priority = 20", "priority = 200")
                .replace("name = \"prio\"", "name = \"pair\"")
                .replace("repetitions = 3", "repetitions = 0"),
        );
        for f in [
            "layout[1].vm[0].priority",
            "layout[1].name: duplicate",
            "matrix.repetitions",
        ] {
            assert!(e.contains(f), "{f} missing in {e}");
        }
        // A missing kernel image.
        let e = fx.errors(&GOOD.replace("guest.elf", "nope.elf"));
        assert!(
            e.contains("m.toml:4:10: matrix.kernel") && e.contains("nope.elf"),
            "{e}"
        );
        // A relative path names where it was looked for, `..` folded.
        let e = fx.errors(&GOOD.replace("guest.elf", "../sub/./nope.elf"));
        let looked = fx.dir.parent().unwrap().join("sub/nope.elf");
        assert!(
            e.contains(&format!(
                "\"../sub/./nope.elf\" (resolved to {})",
                looked.display()
            )),
            "{e}"
        );
    }

    #[test]
    fn mixed_needs_one_entry_per_vcpu() {
        let fx = Fixture::new("mixed");
        let text = GOOD.replace(
            "kind = \"sleep\"\ninterval_us = 500",
            "kind = \"mixed\"\nmixed = \"cpu,sleep\"",
        );
        let e = fx.errors(&text);
        assert!(
            e.contains("layout[0].vm") && e.contains("\"a\" has 1 vCPU(s)"),
            "{e}"
        );
        let e = fx.errors(&text.replace("cpu,sleep", "cpu,nap"));
        assert!(
            e.contains("workload[1].mixed") && e.contains("\"nap\""),
            "{e}"
        );
    }

    #[test]
    fn unixbench_validates_without_its_image() {
        let fx = Fixture::new("ub");
        let text = GOOD.replace(
            "kind = \"sleep\"\ninterval_us = 500",
            "kind = \"unixbench\"\nkernel = \"linux/vmlinux\"\ncopies = [1, \"vcpus\"]\npasses = 3",
        );
        let m = fx.parse(&text).unwrap();
        assert_eq!(m.workloads[1].kind, WorkloadKind::UnixBench);
        assert_eq!(m.workloads[1].params["copies"], "1,vcpus");
        // The image is looked for next to the matrix file, when a cell runs.
        let suite = m.workloads[1].suite.as_ref().unwrap();
        assert_eq!(suite.kernel, fx.dir.join("linux/vmlinux"));
        assert_eq!(suite.passes, Some((3, 3)));
        assert!(m.workloads[0].suite.is_none());
        // A Linux command line may have several words.
        let words = text.replace("passes = 3", "passes = 3\ncmdline = \"quiet loglevel=3\"");
        let m = fx.parse(&words).unwrap();
        assert_eq!(
            m.workloads[1].suite.as_ref().unwrap().cmdline,
            "quiet loglevel=3"
        );
    }

    #[test]
    fn unixbench_parameters_are_checked_with_positions() {
        let fx = Fixture::new("ubbad");
        let text = GOOD.replace(
            "kind = \"sleep\"\ninterval_us = 500",
            "kind = \"unixbench\"\ncopies = [1, 0]\ntests = \"dhrystone\"",
        );
        let e = fx.errors(&text);
        let line_of = |needle: &str| text[..text.find(needle).unwrap()].lines().count() + 1;
        let kind_line = line_of("kind = \"unixbench\"");
        assert!(
            e.contains(&format!(
                "m.toml:{kind_line}:8: workload[1].kernel: a unixbench workload needs `kernel`"
            )),
            "{e}"
        );
        assert!(
            e.contains(&format!(
                "m.toml:{}:10: workload[1].copies: \"0\" is not a copy count",
                line_of("copies = [1, 0]")
            )),
            "{e}"
        );
        assert!(
            e.contains("workload[1].tests: \"dhrystone\" is not one of"),
            "{e}"
        );
        // A bench guest's parameters still take no spaces.
        let spaced = GOOD.replace("interval_us = 500", "interval_us = \"5 00\"");
        assert!(fx
            .errors(&spaced)
            .contains("cannot be passed on a kernel command line"));
    }

    proptest::proptest! {
        /// Any one line of the good matrix replaced by anything gives a
        /// matrix or diagnostics with valid positions, never a panic.
        #[test]
        fn never_panics(line in 0usize..32, repl in "\\PC{0,40}") {
            let fx = Fixture::new("prop");
            let mut lines: Vec<&str> = GOOD.lines().collect();
            if line < lines.len() {
                lines[line] = &repl;
            }
            let text = lines.join("\n");
            if let Err(MatrixError::Invalid { diagnostics, .. }) = fx.parse(&text) {
                for d in diagnostics {
                    proptest::prop_assert!(d.line >= 1 && d.line <= text.lines().count() + 1);
                }
            }
        }
    }
}
