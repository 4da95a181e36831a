//! The first stage of parsing: serde (with `deny_unknown_fields`) into
//! raw structs that keep the spans of the fields the checks need. Only
//! [`super`]'s checks see them.

use crate::boot::GuestKind;
use crate::cpuid::CpuidOverrides;
use crate::policy::Policy;
use serde::Deserialize;
use toml::Spanned;
use vcpu_engine::DispatchKind;
use vcpu_sched::{Mode, SchedClass, Tunables};

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawCpus {
    List(String),
    Ids(Vec<i64>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawNumber {
    Int(i64),
    Float(f64),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawWorkload {
    Args(String),
    // Before `Table`: a date-time deserializes as a table with a private key.
    Datetime(toml::value::Datetime),
    Table(toml::Table),
}

/// Whether the config text names `host.tunables.low_latency`. `Tunables`
/// fills in what a file leaves out, so only the text tells a table
/// written with the default's values from none (a second, lenient read
/// of a text the strict one accepted).
pub(super) fn names_low_latency(text: &str) -> bool {
    #[derive(Deserialize)]
    struct File {
        host: Option<Host>,
    }
    #[derive(Deserialize)]
    struct Host {
        tunables: Option<Named>,
    }
    #[derive(Deserialize)]
    struct Named {
        low_latency: Option<serde::de::IgnoredAny>,
    }
    toml::from_str::<File>(text)
        .ok()
        .and_then(|f| f.host?.tunables?.low_latency)
        .is_some()
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHost {
    pub(super) cpus: Option<Spanned<RawCpus>>,
    pub(super) policy: Option<Spanned<Policy>>,
    pub(super) mode: Option<Mode>,
    pub(super) smt_isolation: Option<Spanned<bool>>,
    pub(super) dispatch: Option<DispatchKind>,
    pub(super) halt_poll_us: Option<Spanned<i64>>,
    pub(super) kvm_poll_us: Option<Spanned<i64>>,
    pub(super) log_limit_kib: Option<Spanned<i64>>,
    pub(super) result_records_per_s: Option<Spanned<i64>>,
    pub(super) tunables: Option<Tunables>,
    pub(super) log_dir: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVm {
    pub(super) name: Spanned<String>,
    pub(super) vcpus: Spanned<i64>,
    pub(super) memory_mib: Spanned<i64>,
    pub(super) kernel: Spanned<String>,
    pub(super) guest: Option<Spanned<GuestKind>>,
    pub(super) initrd: Option<Spanned<String>>,
    /// Another name for `initrd` (the Linux word); giving both is an error.
    pub(super) initramfs: Option<Spanned<String>>,
    pub(super) cmdline: Option<Spanned<String>>,
    pub(super) modules: Option<Vec<Spanned<toml::Value>>>,
    pub(super) cpuid: Option<CpuidOverrides>,
    pub(super) cpus: Option<Spanned<RawCpus>>,
    pub(super) class: Option<Spanned<SchedClass>>,
    pub(super) priority: Option<Spanned<i64>>,
    pub(super) weight: Option<Spanned<i64>>,
    pub(super) cap: Option<Spanned<i64>>,
    pub(super) reservation: Option<Spanned<i64>>,
    pub(super) coschedule: Option<Spanned<String>>,
    pub(super) latency_bound_us: Option<Spanned<i64>>,
    pub(super) bound_budget: Option<Spanned<i64>>,
    pub(super) workload: Option<Spanned<RawWorkload>>,
    pub(super) console: Option<Console>,
    pub(super) timeout_s: Option<Spanned<RawNumber>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) host: Option<RawHost>,
    #[serde(default)]
    pub(super) vm: Vec<RawVm>,
}

/// Where a VM's console goes (`console`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Console {
    /// `<log_dir>/<vm>.console.log` only.
    #[default]
    Log,
    /// Standard output (prefixed `[vm] `) only.
    Stdout,
    /// Both.
    Both,
}

impl Console {
    pub fn to_log(&self) -> bool {
        matches!(self, Console::Log | Console::Both)
    }
    pub fn to_stdout(&self) -> bool {
        matches!(self, Console::Stdout | Console::Both)
    }
}
