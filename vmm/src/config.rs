//! The `pacer` configuration file (TOML).
//!
//! ```toml
//! [host]
//! cpus = "0-1"            # or [0, 1]; default: all online CPUs
//! policy = "haiku"        # haiku | global-rr | pinned | eevdf | host
//! mode = "low-latency"    # low-latency | power-saving
//! smt_isolation = false   # SMT siblings only co-run one VM (haiku)
//! dispatch = "threads"    # threads | workers: how the engine runs vCPUs
//! halt_poll_us = 200      # idle CPUs poll this long for a wake-up (0: off)
//! log_limit_kib = 65536   # each VM's console and results logs hold at most this
//! result_records_per_s = 10000   # guest markers/records admitted per second
//! log_dir = "logs"        # relative to this file; default "pacer-logs"
//!
//! [host.tunables]         # vcpu_sched tunables, e.g. bursty_load = 375
//!
//! [[vm]]
//! name = "a"              # unique, [A-Za-z0-9_-]
//! vcpus = 1               # 1..=254
//! memory_mib = 64         # >= 2
//! kernel = "../guests/out/bench-guest.elf"
//! initrd = "initrd.img"   # optional (bench, linux); `initramfs = "..."` is the same key
//! cmdline = "foo=1"       # optional (linux: appended to Pacer's `console=ttyS0 reboot=k`)
//! guest = "bench"         # bench | multiboot | linux; default: from the kernel's format
//! modules = ["env.txt", { path = "m.bin", cmdline = "x=1" }]   # multiboot only
//! cpuid = { x2apic = false }                                 # optional CPUID overrides: x2apic, tsc_deadline, cx16
//! cpus = "0"              # core set, within [host] cpus; default: all of them
//! class = "timeshare"     # timeshare | realtime
//! priority = 10           # timeshare 1..=99 (default 10); realtime 100..=120 (default 100)
//! weight = 100            # share among contending VMs, 1..=10000 (haiku)
//! cap = 30                # at most this % of one CPU for the VM, split over its vCPUs (haiku)
//! reservation = 50        # at least this % of one CPU when it asks (haiku; all VMs' fit the host)
//! workload = { name = "cpu", duration_ms = 500, report_ms = 100 }   # bench only
//! console = "stdout"      # log | stdout | both
//! timeout_s = 30          # runaway guard
//! ```
//!
//! Parsing is two-stage: serde (with `deny_unknown_fields`) into raw structs
//! that keep the spans of the fields that semantic checks need, then
//! validation, which also checks what the config names against the files
//! and the host (`kernel_image`, `guest_params`, `preflight`,
//! `host_resources`). Every error is one line `line:col: field.path: expected
//! X, found Y`; serde's own errors are put in those words by
//! `config_errors`.

use crate::boot::multiboot::Module;
use crate::boot::{self, GuestKind};
use crate::config_errors::{one_line, quoted, readable, SpanIndex};
use crate::cpuid::CpuidOverrides;
use crate::host_resources::HostResources;
use crate::policy::Policy;
use crate::sched_rules::class_name;
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;
use vcpu_engine::host_cpus::HostCpuSet;
use vcpu_engine::DispatchKind;
use vcpu_sched::{Mode, SchedClass, Tunables};

/// Highest vCPU count per VM (APIC ids 0..=253; 0xff is broadcast).
pub const MAX_VCPUS: u32 = 254;
/// Default longest halt-polling window (KVM's default halt_poll_ns).
pub const DEFAULT_HALT_POLL_US: u64 = 200;
/// Largest halt-polling window accepted.
pub const MAX_HALT_POLL_US: i64 = 10_000;
/// `host.log_limit_kib`'s range: 64 KiB to 16 GiB per log per VM.
pub const LOG_LIMIT_KIB: (i64, i64) = (64, 16 << 20);
/// `host.result_records_per_s`'s range.
pub const RECORDS_PER_S: (i64, i64) = (1, 10_000_000);
/// Smallest guest RAM.
pub const MIN_MEMORY_MIB: u64 = 2;
/// Largest guest RAM accepted (1 TiB).
pub const MAX_MEMORY_MIB: u64 = 1 << 20;

/// One problem found in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub line: usize,
    pub column: usize,
    /// Dotted path of the field, e.g. `vm[1].cpus` (empty for syntax errors).
    pub field: String,
    pub message: String,
}

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", one_line(&.path.display().to_string()))]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", format_diagnostics(.path, .diagnostics))]
    Invalid {
        path: PathBuf,
        diagnostics: Vec<Diagnostic>,
    },
    #[error("cannot read the host's online CPUs ({path}): {reason}")]
    HostCpus { path: PathBuf, reason: String },
}

fn format_diagnostics(path: &Path, diags: &[Diagnostic]) -> String {
    // One line per diagnostic, whatever the file name or the values hold.
    let file = one_line(&path.display().to_string());
    diags
        .iter()
        .map(|d| {
            let (field, message) = (one_line(&d.field), one_line(&d.message));
            if field.is_empty() {
                format!("{file}:{}:{}: {message}", d.line, d.column)
            } else {
                format!("{file}:{}:{}: {field}: {message}", d.line, d.column)
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where a VM's serial console goes.
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

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawCpus {
    List(String),
    Ids(Vec<i64>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawNumber {
    Int(i64),
    Float(f64),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawWorkload {
    Args(String),
    // Before `Table`: a date-time deserializes as a table with a private key.
    Datetime(toml::value::Datetime),
    Table(toml::Table),
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHost {
    cpus: Option<Spanned<RawCpus>>,
    policy: Option<Spanned<Policy>>,
    mode: Option<Mode>,
    smt_isolation: Option<Spanned<bool>>,
    dispatch: Option<DispatchKind>,
    halt_poll_us: Option<Spanned<i64>>,
    log_limit_kib: Option<Spanned<i64>>,
    result_records_per_s: Option<Spanned<i64>>,
    tunables: Option<Tunables>,
    log_dir: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVm {
    name: Spanned<String>,
    vcpus: Spanned<i64>,
    memory_mib: Spanned<i64>,
    kernel: Spanned<String>,
    guest: Option<Spanned<GuestKind>>,
    initrd: Option<Spanned<String>>,
    /// Another name for `initrd` (the Linux word); giving both is an error.
    initramfs: Option<Spanned<String>>,
    cmdline: Option<Spanned<String>>,
    modules: Option<Vec<Spanned<toml::Value>>>,
    cpuid: Option<CpuidOverrides>,
    cpus: Option<Spanned<RawCpus>>,
    class: Option<Spanned<SchedClass>>,
    priority: Option<Spanned<i64>>,
    weight: Option<Spanned<i64>>,
    cap: Option<Spanned<i64>>,
    reservation: Option<Spanned<i64>>,
    workload: Option<Spanned<RawWorkload>>,
    console: Option<Console>,
    timeout_s: Option<Spanned<RawNumber>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    host: Option<RawHost>,
    #[serde(default)]
    vm: Vec<RawVm>,
}

/// Facts about the host that validation checks against.
#[derive(Debug, Clone)]
pub struct HostInfo {
    /// The online CPUs.
    pub online: HostCpuSet,
    /// Memory, vCPU, file and thread limits (`None`: not checked).
    pub resources: HostResources,
}

impl HostInfo {
    /// Read `/sys/devices/system/cpu/online`.
    pub fn detect() -> Result<HostInfo, ConfigError> {
        let online =
            vcpu_engine::host_cpus::online_cpus().map_err(|reason| ConfigError::HostCpus {
                path: PathBuf::from("/sys/devices/system/cpu/online"),
                reason,
            })?;
        Ok(HostInfo {
            online,
            resources: HostResources::detect(),
        })
    }
}

/// Settings given on the command line that override the file's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--policy NAME`.
    pub policy: Option<Policy>,
}

/// The validated `[host]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    /// Host CPUs Pacer may use.
    pub cpus: HostCpuSet,
    pub policy: Policy,
    pub mode: Mode,
    pub smt_isolation: bool,
    pub dispatch: DispatchKind,
    /// Longest halt-polling window of the engine, us (0: off).
    pub halt_poll_us: u64,
    /// What each VM may write into its logs (`log_limit_kib`,
    /// `result_records_per_s`).
    pub log_limits: crate::results::LogLimits,
    pub tunables: Tunables,
    /// Absolute or relative to the current directory (already resolved
    /// against the config file's directory).
    pub log_dir: PathBuf,
}

/// One validated `[[vm]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct VmConfig {
    pub name: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub kernel: PathBuf,
    /// How the kernel boots (from `guest`, or the kernel's format).
    pub guest: GuestKind,
    pub initrd: Option<PathBuf>,
    /// Bench guest: the config's `cmdline` followed by the workload
    /// arguments (the VMM appends `tsc_khz=` and `vcpus=` at boot). Other
    /// guests: the config's `cmdline`, unchanged (a Linux guest's goes after
    /// what Pacer's platform needs, `boot::linux::PLATFORM_CMDLINE`).
    pub cmdline: String,
    /// Multiboot modules, in order.
    pub modules: Vec<Module>,
    /// CPUID bits switched off or insisted on.
    pub cpuid: CpuidOverrides,
    /// Host CPUs the VM's vCPUs may run on (its core set).
    pub cpus: HostCpuSet,
    pub class: SchedClass,
    pub priority: u8,
    /// Operator shares (`vcpu_sched::shares`), per vCPU.
    pub shares: crate::sched_rules::Shares,
    pub console: Console,
    pub timeout: Option<Duration>,
}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub path: PathBuf,
    pub host: HostConfig,
    pub vms: Vec<VmConfig>,
}

/// Line and column (1-based) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map(|i| before[i + 1..].chars().count())
        .unwrap_or_else(|| before.chars().count())
        + 1;
    (line, col)
}

struct Checker<'a> {
    text: &'a str,
    /// Spans of every key and value, for fields serde gives no span for.
    index: SpanIndex,
    diags: Vec<Diagnostic>,
}

impl Checker<'_> {
    fn err(&mut self, span: Range<usize>, field: impl Into<String>, message: impl Into<String>) {
        let (line, column) = line_col(self.text, span.start);
        self.diags.push(Diagnostic {
            line,
            column,
            field: readable(&field.into()),
            message: readable(&message.into()),
        });
    }

    fn cpus(&mut self, raw: &Spanned<RawCpus>, field: &str) -> Option<HostCpuSet> {
        let parsed = match raw.get_ref() {
            RawCpus::List(s) => crate::sched_rules::cpu_list(s),
            RawCpus::Ids(ids) => crate::sched_rules::cpu_ids(ids),
        };
        parsed.map_err(|why| self.err(raw.span(), field, why)).ok()
    }

    fn path(&mut self, base: &Path, raw: &Spanned<String>, field: &str) -> Option<PathBuf> {
        let p = Path::new(raw.get_ref());
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        };
        if let Err(why) = crate::path_rules::shape(&p) {
            self.err(raw.span(), field, why);
            return None;
        }
        match std::fs::metadata(&p) {
            Ok(m) if m.is_file() => match crate::path_rules::input_file(&p) {
                Ok(()) => Some(p),
                Err(why) => {
                    self.err(raw.span(), field, why);
                    None
                }
            },
            Ok(_) => {
                self.err(
                    raw.span(),
                    field,
                    format!("expected a regular file, found {}", p.display()),
                );
                None
            }
            Err(e) => {
                self.err(
                    raw.span(),
                    field,
                    format!("expected a readable file, found {}: {e}", p.display()),
                );
                None
            }
        }
    }
}

impl Checker<'_> {
    /// The guest kind of `kernel`: the config's `guest` if it can boot the
    /// kernel, else the kernel format's default (errors name the field).
    fn guest_kind(
        &mut self,
        kernel: &Path,
        raw_kernel: &Spanned<String>,
        guest: Option<&Spanned<GuestKind>>,
        prefix: &str,
    ) -> Option<GuestKind> {
        let info = match boot::inspect(kernel) {
            Ok(i) => i,
            Err(e) => {
                self.err(raw_kernel.span(), format!("{prefix}kernel"), e.to_string());
                return None;
            }
        };
        match guest {
            Some(g) => match info.check_guest(*g.get_ref()) {
                Ok(()) => Some(*g.get_ref()),
                Err(why) => {
                    self.err(
                        g.span(),
                        format!("{prefix}guest"),
                        format!("{}: {why}", kernel.display()),
                    );
                    None
                }
            },
            None => match info.default_guest() {
                Ok(g) => Some(g),
                Err(why) => {
                    self.err(
                        raw_kernel.span(),
                        format!("{prefix}kernel"),
                        format!("{}: {why}", kernel.display()),
                    );
                    None
                }
            },
        }
    }
}

/// A `modules` entry: "path" or { path = "...", cmdline = "..." }.
fn module_entry(v: &toml::Value) -> Option<(String, String)> {
    match v {
        toml::Value::String(p) => Some((p.clone(), String::new())),
        toml::Value::Table(t) => {
            if t.keys().any(|k| k != "path" && k != "cmdline") {
                return None;
            }
            let path = t.get("path")?.as_str()?.to_string();
            let cmdline = match t.get("cmdline") {
                Some(c) => c.as_str()?.to_string(),
                None => String::new(),
            };
            Some((path, cmdline))
        }
        _ => None,
    }
}

/// Where a kernel and the initrd above it must fit: the kernel occupies
/// guest memory up to `kernel_end`; the loader puts the initrd
/// page-aligned above it, ending below both `initrd_limit` and the top of
/// RAM (itself below the 3 GiB MMIO gap).
struct Room {
    kernel_end: u64,
    initrd_limit: u64,
}

impl Room {
    fn below_gap(kernel_end: u64) -> Room {
        Room {
            kernel_end,
            initrd_limit: crate::memory::MMIO_GAP_START,
        }
    }

    /// Why `memory_mib` cannot hold the kernel (`kernel` says how far it
    /// reaches) and an initrd of `initrd_len` bytes (named by the config
    /// key `initrd_key`), if it cannot.
    fn shortfall(
        &self,
        kernel: &str,
        initrd_key: &str,
        initrd_len: u64,
        memory_mib: u64,
    ) -> Option<String> {
        let ram_top = (memory_mib << 20).min(crate::memory::MMIO_GAP_START);
        let need_end = self
            .kernel_end
            .saturating_add(initrd_len.next_multiple_of(4096));
        if initrd_len > 0 && need_end > self.initrd_limit {
            return Some(format!(
                "expected the kernel ({kernel}) and the {initrd_key} ({initrd_len} bytes) to fit below {:#x}, the highest address the kernel takes an {initrd_key} at, found they need up to {need_end:#x}",
                self.initrd_limit
            ));
        }
        if need_end <= ram_top {
            return None;
        }
        let need_mib = need_end.div_ceil(1 << 20);
        Some(if initrd_len > 0 {
            format!(
                "expected at least {need_mib} MiB for the kernel ({kernel}) and the {initrd_key} ({initrd_len} bytes), found {memory_mib}"
            )
        } else {
            format!(
                "expected at least {need_mib} MiB for the kernel ({kernel}), found {memory_mib}"
            )
        })
    }
}

fn valid_arg_token(s: &str) -> bool {
    !s.is_empty()
        && !s
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c.is_control())
}

fn workload_args(
    c: &mut Checker<'_>,
    raw: &Spanned<RawWorkload>,
    field: &str,
    vcpus: u32,
) -> Vec<String> {
    let span = raw.span();
    let mut out = Vec::new();
    match raw.get_ref() {
        RawWorkload::Datetime(d) => {
            let expected = crate::config_errors::expectation("vm[].workload").unwrap_or_default();
            c.err(
                span,
                field,
                format!("expected {expected}, found the date-time {d}"),
            );
            return out;
        }
        RawWorkload::Args(s) => {
            let s = s.trim();
            if s.is_empty() {
                c.err(
                    span.clone(),
                    field,
                    "expected a workload name such as \"cpu\", found an empty string",
                );
            } else {
                // "cpu", "cpu duration_ms=300", or "workload=cpu duration_ms=300":
                // a bare first word is the workload name.
                for (i, tok) in s.split_whitespace().enumerate() {
                    if tok.contains('=') {
                        out.push(tok.to_string());
                    } else if i == 0 {
                        out.push(format!("workload={tok}"));
                    } else {
                        c.err(
                            span.clone(),
                            field,
                            format!(
                                "expected key=value words after the workload name, found {}",
                                quoted(tok)
                            ),
                        );
                    }
                }
            }
        }
        RawWorkload::Table(t) => {
            if !t.contains_key("name") {
                c.err(
                    span.clone(),
                    format!("{field}.name"),
                    "missing; expected a workload name in quotes such as \"cpu\"",
                );
            }
            for (k, v) in t {
                let key = if k == "name" { "workload" } else { k.as_str() };
                let at = c
                    .index
                    .get(&format!("{field}.{k}"))
                    .map(|n| n.value.clone())
                    .unwrap_or_else(|| span.clone());
                let val = match v {
                    toml::Value::String(s) => s.clone(),
                    toml::Value::Integer(i) => i.to_string(),
                    toml::Value::Float(f) => f.to_string(),
                    toml::Value::Boolean(b) => (*b as u8).to_string(),
                    other => {
                        c.err(
                            at,
                            format!("{field}.{k}"),
                            format!(
                                "expected a string, number or boolean, found {}",
                                match other {
                                    toml::Value::Array(_) => "an array".to_string(),
                                    toml::Value::Table(_) => "a table".to_string(),
                                    v => format!("the date-time {v}"),
                                }
                            ),
                        );
                        continue;
                    }
                };
                if !k.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
                    || !valid_arg_token(&val)
                {
                    c.err(
                        at,
                        format!("{field}.{k}"),
                        format!(
                            "expected a key and value without blanks, quotes or control characters (a kernel command line word), found {}={}",
                            one_line(k),
                            quoted(&val)
                        ),
                    );
                    continue;
                }
                // `workload=` first, the rest in table order.
                if key == "workload" {
                    out.insert(0, format!("{key}={val}"));
                } else {
                    out.push(format!("{key}={val}"));
                }
            }
        }
    }
    // What the bench guest would refuse or silently replace.
    let args = crate::guest_params::split_args(out.iter().map(String::as_str));
    for e in crate::guest_params::check(&args, vcpus) {
        let toml_key = if e.key == "workload" { "name" } else { &e.key };
        let at = match raw.get_ref() {
            RawWorkload::Table(_) => c
                .index
                .get(&format!("{field}.{toml_key}"))
                .map(|n| n.value.clone()),
            _ => None,
        };
        c.err(
            at.unwrap_or_else(|| span.clone()),
            format!("{field}.{toml_key}"),
            e.message,
        );
    }
    out
}

impl Config {
    /// Read and validate a config file against the running host.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::load_overridden(path, Overrides::default())
    }

    /// [`Config::load`] with command-line overrides.
    pub fn load_overridden(path: &Path, overrides: Overrides) -> Result<Config, ConfigError> {
        let host = HostInfo::detect()?;
        Self::load_with(path, &host, overrides)
    }

    /// Read and validate a config file against the given host facts.
    pub fn load_with(
        path: &Path,
        host: &HostInfo,
        overrides: Overrides,
    ) -> Result<Config, ConfigError> {
        let bytes = crate::preflight::read_regular_file(
            path,
            crate::preflight::MAX_CONFIG_BYTES,
            "a config file",
        )
        .map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        // Not UTF-8: the bad byte's line and column, like any other error.
        let text = String::from_utf8(bytes).map_err(|e| ConfigError::Invalid {
            path: path.to_path_buf(),
            diagnostics: vec![crate::config_errors::utf8_error(
                e.as_bytes(),
                &e.utf8_error(),
            )],
        })?;
        Self::parse_overridden(&text, path, host, overrides)
    }

    /// Validate `text` as if read from `path` (relative paths inside are
    /// resolved against `path`'s directory).
    pub fn parse(text: &str, path: &Path, host: &HostInfo) -> Result<Config, ConfigError> {
        Self::parse_overridden(text, path, host, Overrides::default())
    }

    /// [`Config::parse`] with command-line overrides.
    pub fn parse_overridden(
        text: &str,
        path: &Path,
        host: &HostInfo,
        overrides: Overrides,
    ) -> Result<Config, ConfigError> {
        let invalid = |diagnostics| ConfigError::Invalid {
            path: path.to_path_buf(),
            diagnostics,
        };
        let raw: RawConfig = match toml::from_str(text) {
            Ok(r) => r,
            Err(e) => return Err(invalid(vec![crate::config_errors::explain(text, &e)])),
        };
        let base = path
            .parent()
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let mut c = Checker {
            text,
            index: SpanIndex::new(text),
            diags: Vec::new(),
        };

        // [host]
        let rh = raw.host.unwrap_or_default();
        let host_cpus = match &rh.cpus {
            Some(s) => {
                let parsed = c.cpus(s, "host.cpus");
                let set = parsed.clone().unwrap_or_default();
                let outside = set.difference(&host.online);
                if parsed.is_none() {
                    // Reported by `cpus`.
                } else if !outside.is_empty() {
                    c.err(
                        s.span(),
                        "host.cpus",
                        format!(
                            "expected CPUs online on this host ({}), found CPUs {} that are not online",
                            host.online.to_list(),
                            outside.to_list()
                        ),
                    );
                } else if set.is_empty() {
                    c.err(
                        s.span(),
                        "host.cpus",
                        "expected at least one CPU, found an empty CPU set",
                    );
                }
                set
            }
            None => host.online.clone(),
        };
        // Where a policy refusal points: the `policy` field, or the top of
        // the file when `--policy` chose it.
        let (policy, policy_origin) = match (overrides.policy, &rh.policy) {
            (Some(p), _) => (p, "--policy".to_string()),
            (None, Some(p)) => (*p.get_ref(), "host.policy".to_string()),
            (None, None) => (Policy::default(), "the default policy".to_string()),
        };
        let smt_isolation = rh.smt_isolation.as_ref().is_some_and(|s| *s.get_ref());
        let halt_poll_us = match &rh.halt_poll_us {
            Some(h) if !(0..=MAX_HALT_POLL_US).contains(h.get_ref()) => {
                c.err(
                    h.span(),
                    "host.halt_poll_us",
                    format!(
                        "expected an integer number of microseconds from 0 to {MAX_HALT_POLL_US}, found {}",
                        h.get_ref()
                    ),
                );
                0
            }
            Some(h) => *h.get_ref() as u64,
            None => DEFAULT_HALT_POLL_US,
        };
        let mut int_in =
            |v: &Option<Spanned<i64>>, key: &str, (min, max): (i64, i64), unit: &str| {
                let v = v.as_ref()?;
                if (min..=max).contains(v.get_ref()) {
                    return Some(*v.get_ref() as u64);
                }
                c.err(
                    v.span(),
                    key,
                    format!(
                        "expected an integer number of {unit} from {min} to {max}, found {}",
                        v.get_ref()
                    ),
                );
                None
            };
        let log_limits = crate::results::LogLimits {
            log_bytes: int_in(
                &rh.log_limit_kib,
                "host.log_limit_kib",
                LOG_LIMIT_KIB,
                "KiB",
            )
            .unwrap_or(crate::results::DEFAULT_LOG_LIMIT_KIB)
                << 10,
            records_per_s: int_in(
                &rh.result_records_per_s,
                "host.result_records_per_s",
                RECORDS_PER_S,
                "records per second",
            )
            .map_or(crate::results::DEFAULT_RECORDS_PER_S, |v| v as u32),
        };
        if let Some(s) = &rh.smt_isolation {
            if *s.get_ref() && !policy.honours_smt_isolation() {
                c.err(
                    s.span(),
                    "host.smt_isolation",
                    format!("policy \"{policy}\" ({policy_origin}) cannot keep SMT siblings to one VM; only \"haiku\" can"),
                );
            }
        }
        let log_dir = match &rh.log_dir {
            Some(d) if d.get_ref().trim().is_empty() => {
                c.err(
                    d.span(),
                    "host.log_dir",
                    "expected a directory path, found an empty string",
                );
                PathBuf::new()
            }
            Some(d) => {
                let p = base.join(d.get_ref());
                if let Err(why) = crate::path_rules::dir_to_create(&p) {
                    let msg = if why.starts_with("expected") {
                        why
                    } else {
                        format!("expected a directory Pacer can create and write, but {why}")
                    };
                    c.err(d.span(), "host.log_dir", msg);
                } else if let Err(why) = crate::preflight::check_dir_writable(&p) {
                    c.err(
                        d.span(),
                        "host.log_dir",
                        format!("expected a directory Pacer can create and write, but {why}"),
                    );
                }
                p
            }
            None => {
                let p = base.join("pacer-logs");
                if let Err(why) = crate::preflight::check_dir_writable(&p) {
                    c.err(
                        0..0,
                        "host.log_dir",
                        format!("expected the default log directory to be writable, but {why}"),
                    );
                }
                p
            }
        };

        // [[vm]]
        if raw.vm.is_empty() {
            c.err(0..0, "vm", "expected at least one [[vm]] table, found none");
        }
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut vms = Vec::new();
        // Reservations of every VM (percent of one CPU) and where the last was given.
        let mut reserved_total: i64 = 0;
        let mut last_reservation: Option<(Range<usize>, String)> = None;
        for (i, v) in raw.vm.iter().enumerate() {
            let f = |name: &str| format!("vm[{i}].{name}");
            let name = v.name.get_ref().clone();
            if name.is_empty()
                || name.len() > 64
                || !name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
            {
                c.err(
                    v.name.span(),
                    f("name"),
                    format!(
                        "expected a name of 1-64 characters of A-Z a-z 0-9 _ -, found {}",
                        quoted(&name)
                    ),
                );
            }
            if let Some(prev) = names.insert(name.clone(), i) {
                c.err(
                    v.name.span(),
                    f("name"),
                    format!(
                        "expected a name no other VM has, found {} (duplicate of vm[{prev}])",
                        quoted(&name)
                    ),
                );
            }
            let vcpus = *v.vcpus.get_ref();
            if !(1..=MAX_VCPUS as i64).contains(&vcpus) {
                c.err(
                    v.vcpus.span(),
                    f("vcpus"),
                    format!("expected an integer from 1 to {MAX_VCPUS}, found {vcpus}"),
                );
            }
            let mem = *v.memory_mib.get_ref();
            if !(MIN_MEMORY_MIB as i64..=MAX_MEMORY_MIB as i64).contains(&mem) {
                c.err(
                    v.memory_mib.span(),
                    f("memory_mib"),
                    format!("expected an integer number of MiB from {MIN_MEMORY_MIB} to {MAX_MEMORY_MIB}, found {mem}"),
                );
            }
            let kernel = c.path(&base, &v.kernel, &f("kernel"));
            let guest = kernel
                .as_ref()
                .and_then(|k| c.guest_kind(k, &v.kernel, v.guest.as_ref(), &f("")));
            let is = |kind| guest == Some(kind);
            let mut modules = Vec::new();
            for (j, m) in v.modules.iter().flatten().enumerate() {
                let field = format!("vm[{i}].modules[{j}]");
                if guest.is_some() && !is(GuestKind::Multiboot) {
                    c.err(m.span(), &field, "only multiboot guests take modules");
                    continue;
                }
                let Some((path, cmdline)) = module_entry(m.get_ref()) else {
                    c.err(
                        m.span(),
                        &field,
                        "a module is a path or { path = \"...\", cmdline = \"...\" }",
                    );
                    continue;
                };
                if cmdline.chars().any(|ch| ch.is_control()) {
                    c.err(m.span(), &field, "control characters are not allowed");
                }
                let spanned = Spanned::new(m.span(), path);
                if let Some(p) = c.path(&base, &spanned, &field) {
                    modules.push(Module { path: p, cmdline });
                }
            }
            // The bench guest's ELF image: its load segments must fit.
            let image = match (&kernel, is(GuestKind::Bench)) {
                (Some(k), true) => match crate::kernel_image::image_extent(k) {
                    Ok(extent) => Some(extent),
                    Err(why) => {
                        c.err(
                            v.kernel.span(),
                            f("kernel"),
                            format!(
                                "expected an ELF64 x86-64 kernel, found {}: {why}",
                                k.display()
                            ),
                        );
                        None
                    }
                },
                _ => None,
            };
            if let Some(k) = &kernel {
                let mib = v.memory_mib.get_ref().max(&0).unsigned_abs();
                let total: u64 = std::iter::once(k.as_path())
                    .chain(modules.iter().map(|m| m.path.as_path()))
                    .filter_map(|p| std::fs::metadata(p).ok())
                    .map(|m| m.len())
                    .sum();
                if is(GuestKind::Multiboot) && total > mib.saturating_mul(1 << 20) {
                    c.err(
                        v.memory_mib.span(),
                        f("memory_mib"),
                        format!("{mib} MiB cannot hold the kernel and its modules ({total} bytes)"),
                    );
                }
            }
            // `initrd`, or `initramfs` (the Linux word for the same thing).
            let (initrd_raw, initrd_key) = match (&v.initrd, &v.initramfs) {
                (Some(_), Some(both)) => {
                    c.err(
                        both.span(),
                        f("initramfs"),
                        "expected one of `initrd` and `initramfs` (they name the same archive), found both",
                    );
                    (None, "initrd")
                }
                (Some(p), None) => (Some(p), "initrd"),
                (None, Some(p)) => (Some(p), "initramfs"),
                (None, None) => (None, "initrd"),
            };
            if let (Some(i), true) = (initrd_raw, is(GuestKind::Multiboot)) {
                c.err(
                    i.span(),
                    f(initrd_key),
                    format!("a multiboot guest takes `modules`, not an {initrd_key}"),
                );
            }
            let initrd = initrd_raw.and_then(|p| c.path(&base, p, &f(initrd_key)));
            let initrd_len = initrd
                .as_ref()
                .and_then(|p| std::fs::metadata(p).ok())
                .map_or(0, |m| m.len());
            let mem_ok = mem >= MIN_MEMORY_MIB as i64;
            if let (Some(image), true) = (image, mem_ok) {
                let kernel = format!("its segments end at {:#x}", image.load_end);
                let room = Room::below_gap(image.load_end.max(crate::boot::layout::HIMEM_START));
                if let Some(why) = room.shortfall(&kernel, initrd_key, initrd_len, mem as u64) {
                    c.err(v.memory_mib.span(), f("memory_mib"), why);
                }
            }
            // A Linux kernel: its boot header must be one Pacer boots, and
            // it (as it runs, decompression included) and the initramfs
            // the loader puts above it must fit.
            if let (Some(k), true) = (&kernel, is(GuestKind::Linux)) {
                match boot::linux::footprint(k) {
                    Ok(fp) if mem_ok => {
                        let room = Room {
                            kernel_end: fp.kernel_end,
                            initrd_limit: fp.initrd_limit,
                        };
                        let kernel =
                            format!("it occupies memory up to {:#x} as it starts", fp.kernel_end);
                        if let Some(why) =
                            room.shortfall(&kernel, initrd_key, initrd_len, mem as u64)
                        {
                            c.err(v.memory_mib.span(), f("memory_mib"), why);
                        }
                    }
                    Ok(_) => {}
                    Err(why) => c.err(v.kernel.span(), f("kernel"), why.to_string()),
                }
            }
            let cpus = match &v.cpus {
                Some(s) => {
                    let parsed = c.cpus(s, &f("cpus"));
                    let set = parsed.clone().unwrap_or_default();
                    // (An empty host set was reported at host.cpus.)
                    if parsed.is_some() && !host_cpus.is_empty() {
                        if let Err(why) = crate::sched_rules::core_set(&set, &host_cpus) {
                            c.err(s.span(), f("cpus"), why);
                        }
                    }
                    set
                }
                None => host_cpus.clone(),
            };
            let class = v.class.as_ref().map(|c| *c.get_ref()).unwrap_or_default();
            let priority = match &v.priority {
                Some(p) => {
                    crate::sched_rules::priority(class, *p.get_ref()).unwrap_or_else(|why| {
                        c.err(p.span(), f("priority"), why);
                        let range = crate::sched_rules::priority_range(class);
                        (*p.get_ref()).clamp(i64::from(*range.start()), i64::from(*range.end()))
                            as u8
                    })
                }
                None => crate::sched_rules::default_priority(class),
            };
            if let Err(why) = crate::sched_rules::vm_class(class) {
                let span = v.class.as_ref().map(|c| c.span()).unwrap_or(0..0);
                c.err(span, f("class"), why);
            } else if let Err((refusal, why)) =
                crate::sched_rules::honoured(policy, class, priority, &policy_origin)
            {
                let span = match (refusal, &v.priority, &v.class) {
                    (crate::policy::Refusal::Priority, Some(p), _) => p.span(),
                    (_, _, Some(c)) => c.span(),
                    (_, Some(p), None) => p.span(),
                    (_, None, None) => v.name.span(),
                };
                let field = match refusal {
                    crate::policy::Refusal::Priority => f("priority"),
                    crate::policy::Refusal::Class => f("class"),
                };
                c.err(span, field, why);
            }
            let n_vcpus = vcpus.clamp(1, MAX_VCPUS as i64) as u32;
            let mut shares = crate::sched_rules::Shares::default();
            if let Some(w) = &v.weight {
                match crate::sched_rules::weight(*w.get_ref()) {
                    Ok(x) => shares.weight = x,
                    Err(why) => c.err(w.span(), f("weight"), why),
                }
            }
            if let Some(x) = &v.cap {
                match crate::sched_rules::cap(*x.get_ref(), n_vcpus) {
                    Ok(p) => shares.cap = Some(p),
                    Err(why) => c.err(x.span(), f("cap"), why),
                }
            }
            if let Some(x) = &v.reservation {
                match crate::sched_rules::reservation(*x.get_ref(), n_vcpus) {
                    Ok(p) => {
                        shares.reservation = p;
                        reserved_total += *x.get_ref();
                        last_reservation = Some((x.span(), f("reservation")));
                    }
                    Err(why) => c.err(x.span(), f("reservation"), why),
                }
                if let Err(why) = crate::sched_rules::cap_covers_reservation(
                    v.cap.as_ref().map(|c| *c.get_ref()),
                    *x.get_ref(),
                ) {
                    c.err(x.span(), f("reservation"), why);
                }
            }
            for (key, given) in [
                ("weight", v.weight.as_ref().filter(|w| *w.get_ref() != 100)),
                ("cap", v.cap.as_ref()),
                (
                    "reservation",
                    v.reservation.as_ref().filter(|r| *r.get_ref() != 0),
                ),
            ] {
                if let Some(x) = given {
                    let what = match key {
                        "weight" => "weights",
                        "cap" => "caps",
                        _ => "reservations",
                    };
                    if let Err(why) =
                        crate::sched_rules::shares_honoured(policy, what, &policy_origin)
                    {
                        c.err(x.span(), f(key), why);
                    }
                }
            }
            let mut cmdline: Vec<String> = Vec::new();
            if let Some(cl) = &v.cmdline {
                // The boot loader takes printable ASCII only (and so does
                // the guest's parser).
                if let Some((i, ch)) = cl
                    .get_ref()
                    .chars()
                    .enumerate()
                    .find(|(_, ch)| !(' '..='~').contains(ch) && *ch != '\t')
                {
                    c.err(
                        cl.span(),
                        f("cmdline"),
                        format!(
                            "expected printable ASCII characters, found {} at character {}",
                            quoted(&ch.to_string()),
                            i + 1
                        ),
                    );
                }
                cmdline.extend(cl.get_ref().split_whitespace().map(str::to_string));
            }
            if let Some(w) = &v.workload {
                if guest.is_some() && !is(GuestKind::Bench) {
                    c.err(
                        w.span(),
                        f("workload"),
                        "only the bench guest runs workloads; give other guests their `cmdline`",
                    );
                } else {
                    let n = vcpus.clamp(1, MAX_VCPUS as i64) as u32;
                    cmdline.extend(workload_args(&mut c, w, &f("workload"), n));
                    if let Some((i, ch)) = cmdline
                        .iter()
                        .flat_map(|w| w.chars())
                        .enumerate()
                        .find(|(_, ch)| !(' '..='~').contains(ch))
                    {
                        c.err(
                            w.span(),
                            f("workload"),
                            format!(
                                "expected printable ASCII characters, found {} at character {}",
                                quoted(&ch.to_string()),
                                i + 1
                            ),
                        );
                    }
                }
            }
            // The VMM appends ` tsc_khz=<10 digits> vcpus=<3 digits>` to a
            // bench guest's command line, and a NUL.
            let appended = if is(GuestKind::Bench) {
                " tsc_khz=4294967295 vcpus=254".len()
            } else {
                0
            };
            let room = crate::boot::layout::CMDLINE_MAX - appended - 1;
            let len = cmdline.iter().map(|w| w.len() + 1).sum::<usize>();
            if len > room {
                let span = v
                    .cmdline
                    .as_ref()
                    .map(|s| s.span())
                    .or(v.workload.as_ref().map(|w| w.span()));
                c.err(
                    span.unwrap_or(0..0),
                    f("cmdline"),
                    format!("expected a command line (with the workload) of at most {room} bytes, found {len}"),
                );
            }
            let reserved: &[&str] = if is(GuestKind::Bench) {
                &["tsc_khz=", "vcpus="]
            } else {
                &[]
            };
            for reserved in reserved {
                if cmdline.iter().any(|a| a.starts_with(reserved)) {
                    let (span, field) = match &v.cmdline {
                        Some(cl) if cl.get_ref().contains(reserved) => (cl.span(), f("cmdline")),
                        _ => (
                            v.workload.as_ref().map(|w| w.span()).unwrap_or(0..0),
                            f("workload"),
                        ),
                    };
                    c.err(
                        span,
                        field,
                        format!("expected no `{reserved}` (the VMM sets it), found one"),
                    );
                }
            }
            let timeout = match &v.timeout_s {
                Some(t) => {
                    let secs = match t.get_ref() {
                        RawNumber::Int(i) => *i as f64,
                        RawNumber::Float(x) => *x,
                    };
                    // Below 1 ms the timeout is gone before the VM boots.
                    if !(1e-3..=1e7).contains(&secs) {
                        c.err(
                            t.span(),
                            f("timeout_s"),
                            format!(
                                "expected a number of seconds from 0.001 to 10000000, found {secs}"
                            ),
                        );
                        None
                    } else {
                        Some(Duration::from_secs_f64(secs))
                    }
                }
                None => None,
            };
            vms.push(VmConfig {
                name,
                vcpus: vcpus.clamp(1, MAX_VCPUS as i64) as u32,
                memory_mib: mem.clamp(MIN_MEMORY_MIB as i64, MAX_MEMORY_MIB as i64) as u64,
                kernel: kernel.unwrap_or_default(),
                guest: guest.unwrap_or(GuestKind::Bench),
                initrd,
                cmdline: match guest {
                    Some(GuestKind::Bench) => cmdline.join(" "),
                    _ => v
                        .cmdline
                        .as_ref()
                        .map(|s| s.get_ref().clone())
                        .unwrap_or_default(),
                },
                modules,
                cpuid: v.cpuid.unwrap_or_default(),
                cpus,
                class,
                priority,
                shares,
                console: v.console.unwrap_or_default(),
                timeout,
            });
        }

        if let Some((span, field)) = last_reservation {
            if let Err(why) = crate::sched_rules::reservations_fit(reserved_total, host_cpus.len())
            {
                c.err(span, field, why);
            }
        }
        // The host's memory, KVM's vCPU limit, open files and threads.
        let demand: Vec<_> = vms
            .iter()
            .map(|v| crate::host_resources::VmDemand {
                vcpus: v.vcpus,
                memory_mib: v.memory_mib,
            })
            .collect();
        for s in crate::host_resources::check(&host.resources, &demand) {
            let raw_vm = &raw.vm[s.vm];
            let span = match s.field {
                "memory_mib" => raw_vm.memory_mib.span(),
                _ => raw_vm.vcpus.span(),
            };
            c.err(span, format!("vm[{}].{}", s.vm, s.field), s.message);
        }

        if !c.diags.is_empty() {
            c.diags.sort_by_key(|d| (d.line, d.column));
            return Err(invalid(c.diags));
        }
        Ok(Config {
            path: path.to_path_buf(),
            host: HostConfig {
                cpus: host_cpus,
                policy,
                mode: rh.mode.unwrap_or_default(),
                smt_isolation,
                dispatch: rh.dispatch.unwrap_or_default(),
                halt_poll_us,
                log_limits,
                tunables: rh.tunables.unwrap_or_default(),
                log_dir,
            },
            vms,
        })
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "host: cpus {} policy {} mode {} dispatch {}{} log_dir {}",
            self.host.cpus.to_list(),
            self.host.policy,
            self.host.mode,
            self.host.dispatch,
            if self.host.smt_isolation {
                " smt_isolation"
            } else {
                ""
            },
            self.host.log_dir.display()
        )?;
        for v in &self.vms {
            writeln!(
                f,
                "vm {}: {} guest, {} vCPU(s), {} MiB, cpus {}, {} priority {}, kernel {}, cmdline {:?}{}{}",
                v.name,
                v.guest.name(),
                v.vcpus,
                v.memory_mib,
                v.cpus.to_list(),
                class_name(v.class),
                v.priority,
                v.kernel.display(),
                v.cmdline,
                v.modules
                    .iter()
                    .map(|m| format!(", module {:?}", m.string()))
                    .collect::<String>(),
                v.timeout
                    .map(|t| format!(", timeout {:.1} s", t.as_secs_f64()))
                    .unwrap_or_default()
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        dir: PathBuf,
    }

    impl Fixture {
        fn new(tag: &str) -> Fixture {
            let dir = std::env::temp_dir().join(format!(
                "pacer-config-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            // One 1 MiB segment at 1 MiB: needs 2 MiB of RAM.
            let elf = crate::kernel_image::tests::elf_with_loads(&[(0x10_0000, 0x10_0000)]);
            std::fs::write(dir.join("kernel.elf"), elf).unwrap();
            std::fs::write(dir.join("not-elf.bin"), b"MZ not an elf file....").unwrap();
            let mut mb = boot::multiboot::tests::header(0);
            mb.extend([0xf4u8; 16]);
            let mb = boot::multiboot::tests::elf32(0x40_0000, &mb, 0);
            std::fs::write(dir.join("mb.flat"), mb).unwrap();
            // It occupies memory up to 4 MiB as it starts.
            let bz = boot::linux::tests::bzimage(0x020F, 0x7f, 0x1000);
            std::fs::write(dir.join("bzImage"), bz).unwrap();
            let vmlinux = boot::notes::tests::vmlinux(0x40_0000);
            std::fs::write(dir.join("vmlinux"), vmlinux).unwrap();
            std::fs::write(dir.join("env"), b"TEST_DEVICE=0\n").unwrap();
            Fixture { dir }
        }
        fn parse(&self, text: &str) -> Result<Config, ConfigError> {
            self.parse_with(text, Overrides::default())
        }
        fn parse_with(&self, text: &str, o: Overrides) -> Result<Config, ConfigError> {
            let host = HostInfo {
                online: HostCpuSet::parse_list("0-3").unwrap(),
                resources: HostResources::default(),
            };
            Config::parse_overridden(text, &self.dir.join("pacer.toml"), &host, o)
        }
        fn errors(&self, text: &str) -> String {
            match self.parse(text) {
                Ok(_) => panic!("config unexpectedly valid:\n{text}"),
                Err(e) => e.to_string(),
            }
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    const GOOD: &str = r#"
[host]
cpus = "0-1"
policy = "haiku"
mode = "power-saving"
log_dir = "logs"

[[vm]]
name = "a"
vcpus = 2
memory_mib = 64
kernel = "kernel.elf"
cpus = [0, 1]
priority = 20
workload = { name = "cpu", duration_ms = 500, report_ms = 100 }
console = "both"
timeout_s = 2.5

[[vm]]
name = "b-2"
vcpus = 1
memory_mib = 2
kernel = "kernel.elf"
cmdline = "debug=1"
workload = "cpu report_ms=50"
"#;

    #[test]
    fn good_config() {
        let fx = Fixture::new("good");
        let c = fx.parse(GOOD).unwrap();
        assert_eq!(c.host.cpus.to_list(), "0-1");
        assert_eq!(c.host.policy.as_str(), "haiku");
        assert_eq!(c.host.mode, Mode::PowerSaving);
        assert_eq!(c.host.dispatch, DispatchKind::default());
        assert!(!c.host.smt_isolation);
        assert_eq!(c.host.log_dir, fx.dir.join("logs"));
        assert_eq!(c.vms.len(), 2);
        let a = &c.vms[0];
        assert_eq!((a.vcpus, a.memory_mib, a.priority), (2, 64, 20));
        assert_eq!(a.kernel, fx.dir.join("kernel.elf"));
        assert_eq!(a.cmdline, "workload=cpu duration_ms=500 report_ms=100");
        assert_eq!(a.console, Console::Both);
        assert_eq!(a.timeout, Some(Duration::from_millis(2500)));
        let b = &c.vms[1];
        assert_eq!(b.cpus.to_list(), "0-1");
        assert_eq!(b.priority, 10);
        assert_eq!(b.class, SchedClass::Timeshare);
        assert_eq!(b.cmdline, "debug=1 workload=cpu report_ms=50");
        assert_eq!(b.console, Console::Log);
        assert_eq!(b.timeout, None);
    }

    #[test]
    fn defaults_without_host_table() {
        let fx = Fixture::new("defaults");
        let c = fx
            .parse("[[vm]]\nname=\"x\"\nvcpus=1\nmemory_mib=16\nkernel=\"kernel.elf\"\n")
            .unwrap();
        assert_eq!(c.host.cpus.to_list(), "0-3");
        assert_eq!(c.host.log_dir, fx.dir.join("pacer-logs"));
        assert_eq!(c.vms[0].cpus.to_list(), "0-3");
    }

    #[test]
    fn unknown_field_names_field_and_line() {
        let fx = Fixture::new("unknown");
        let text = GOOD.replace("priority = 20", "priority = 20\nfrobnicate = 1");
        let e = fx.errors(&text);
        assert!(e.contains("frobnicate"), "{e}");
        // `frobnicate` is on line 15 of the modified text.
        assert!(e.contains("pacer.toml:15:1:"), "{e}");
        let e = fx.errors("[host]\nspeed = 3\n");
        assert!(e.contains("speed") && e.contains(":2:1:"), "{e}");
    }

    #[test]
    fn core_set_outside_host() {
        let fx = Fixture::new("outside");
        let e = fx.errors(&GOOD.replace("cpus = [0, 1]", "cpus = \"1-2\""));
        assert!(e.contains("vm[0].cpus"), "{e}");
        assert!(e.contains("pacer.toml:13:8:"), "{e}");
        assert!(e.contains("outside the host CPU set 0-1"), "{e}");
        // [host] cpus beyond the online CPUs.
        let e = fx.errors(&GOOD.replace("cpus = \"0-1\"", "cpus = \"0-7\""));
        assert!(e.contains("host.cpus") && e.contains("not online"), "{e}");
        assert!(e.contains(":3:8:"), "{e}");
    }

    #[test]
    fn zero_vcpus() {
        let fx = Fixture::new("zero");
        let e = fx.errors(&GOOD.replace("vcpus = 2", "vcpus = 0"));
        assert!(e.contains("vm[0].vcpus") && e.contains(":10:9:"), "{e}");
        let e = fx.errors(&GOOD.replace("vcpus = 2", "vcpus = 255"));
        assert!(e.contains("vm[0].vcpus"), "{e}");
    }

    #[test]
    fn missing_kernel_file() {
        let fx = Fixture::new("kernel");
        let e = fx.errors(&GOOD.replace(
            "kernel = \"kernel.elf\"\ncmdline",
            "kernel = \"nope.elf\"\ncmdline",
        ));
        assert!(e.contains("vm[1].kernel") && e.contains("nope.elf"), "{e}");
        assert!(e.contains(":23:10:"), "{e}");
        // Not an ELF64 x86-64 file.
        let e = fx.errors(&GOOD.replace(
            "kernel = \"kernel.elf\"\ncmdline",
            "kernel = \"not-elf.bin\"\ncmdline",
        ));
        assert!(
            e.contains("vm[1].kernel") && e.contains("not a kernel Pacer can boot"),
            "{e}"
        );
        // A missing `kernel` key altogether.
        let e = fx.errors("[[vm]]\nname=\"x\"\nvcpus=1\nmemory_mib=16\n");
        assert!(e.contains("vm[0].kernel: missing"), "{e}");
    }

    const MB: &str = "[[vm]]\nname = \"kut\"\nvcpus = 2\nmemory_mib = 16\nkernel = \"mb.flat\"\n";

    #[test]
    fn multiboot_guest_from_the_kernel_format() {
        let fx = Fixture::new("mb");
        let text = format!(
            "{MB}cmdline = \"cpuid  x\"\nmodules = [\"env\", {{ path = \"env\", cmdline = \"a=1\" }}]\ncpuid = {{ x2apic = false }}\n"
        );
        let c = fx.parse(&text).unwrap();
        let v = &c.vms[0];
        assert_eq!(v.guest, GuestKind::Multiboot);
        // The user's command line, unchanged: no workload or VMM keys.
        assert_eq!(v.cmdline, "cpuid  x");
        assert_eq!(v.modules.len(), 2);
        assert_eq!(v.modules[0].path, fx.dir.join("env"));
        assert_eq!(v.modules[1].cmdline, "a=1");
        assert_eq!(v.cpuid.x2apic, Some(false));
        assert_eq!(v.cpuid.tsc_deadline, None);
        // The bench guest's reserved keys are the user's business here.
        assert!(fx.parse(&format!("{MB}cmdline = \"vcpus=3\"\n")).is_ok());
        // The bench guest defaults to "bench".
        let c = fx.parse(GOOD).unwrap();
        assert_eq!(c.vms[0].guest, GuestKind::Bench);
        assert!(c.vms[0].modules.is_empty());
    }

    #[test]
    fn guest_kind_mismatches_name_the_field() {
        let fx = Fixture::new("kinds");
        let e = fx.errors(&format!("{MB}workload = \"cpu\"\n"));
        assert!(
            e.contains("vm[0].workload") && e.contains("only the bench guest"),
            "{e}"
        );
        assert!(e.contains(":6:12:"), "{e}");
        let e = fx.errors(&format!("{MB}guest = \"bench\"\n"));
        assert!(e.contains("vm[0].guest") && e.contains("ELF64"), "{e}");
        let e = fx.errors(&GOOD.replace("console = \"both\"", "guest = \"multiboot\""));
        assert!(
            e.contains("vm[0].guest") && e.contains("no multiboot header"),
            "{e}"
        );
        let e = fx.errors(&GOOD.replace("console = \"both\"", "modules = [\"env\"]"));
        assert!(
            e.contains("vm[0].modules[0]") && e.contains("only multiboot"),
            "{e}"
        );
        let e = fx.errors(&format!("{MB}initrd = \"env\"\n"));
        assert!(e.contains("vm[0].initrd") && e.contains("modules"), "{e}");
        let e = fx.errors(&format!("{MB}initramfs = \"env\"\n"));
        assert!(e.contains("vm[0].initramfs"), "{e}");
        let e = fx.errors(&format!("{MB}modules = [\"nope\"]\n"));
        assert!(e.contains("vm[0].modules[0]") && e.contains("nope"), "{e}");
        let e = fx.errors(&format!("{MB}modules = [{{ path = \"env\", size = 3 }}]\n"));
        assert!(
            e.contains("vm[0].modules[0]") && e.contains("a module is a path"),
            "{e}"
        );
        let e = fx.errors(&format!("{MB}modules = [\"env\", 7]\n"));
        assert!(
            e.contains("vm[0].modules[1]") && e.contains(":6:19:"),
            "{e}"
        );
        let e = fx.errors(&format!("{MB}cpuid = {{ x2apic = 1 }}\n"));
        assert!(
            e.contains(":6:20:")
                && e.contains("vm[0].cpuid.x2apic")
                && e.contains("expected true or false"),
            "{e}"
        );
        let e = fx.errors(&format!("{MB}cpuid = {{ avx = false }}\n"));
        assert!(e.contains("avx"), "{e}");
    }

    const LINUX: &str =
        "[[vm]]\nname = \"deb\"\nvcpus = 2\nmemory_mib = 512\nkernel = \"bzImage\"\n";

    #[test]
    fn linux_guests() {
        let fx = Fixture::new("linux");
        // A bzImage is a Linux guest; its cmdline is the user's alone (the
        // platform's words are added at boot); initrd is its initramfs.
        let c = fx
            .parse(&format!(
                "{LINUX}initrd = \"env\"\ncmdline = \"quiet vcpus=3\"\n"
            ))
            .unwrap();
        let v = &c.vms[0];
        assert_eq!(v.guest, GuestKind::Linux);
        assert_eq!(v.cmdline, "quiet vcpus=3");
        assert_eq!(v.initrd, Some(fx.dir.join("env")));
        // So is an ELF64 vmlinux (it has "Linux" notes) ...
        let c = fx.parse(&LINUX.replace("bzImage", "vmlinux")).unwrap();
        assert_eq!(c.vms[0].guest, GuestKind::Linux);
        // Its segments (16 MiB + 4 MiB) must fit.
        let e = fx.errors(
            &LINUX
                .replace("bzImage", "vmlinux")
                .replace("memory_mib = 512", "memory_mib = 16"),
        );
        assert!(
            e.contains("vm[0].memory_mib: expected at least 20 MiB for the kernel (it occupies memory up to 0x1400000 as it starts), found 16"),
            "{e}"
        );
        // ... which cannot boot as the bench guest.
        let e = fx.errors(&format!(
            "{}guest = \"bench\"\n",
            LINUX.replace("bzImage", "vmlinux")
        ));
        assert!(e.contains("vm[0].guest") && e.contains("vmlinux"), "{e}");
        // The bench guest's ELF is no Linux kernel.
        let e = fx.errors(&format!(
            "{}guest = \"linux\"\n",
            LINUX.replace("bzImage", "kernel.elf")
        ));
        assert!(
            e.contains("vm[0].guest") && e.contains("not a vmlinux"),
            "{e}"
        );
        // No workloads.
        let e = fx.errors(&format!("{LINUX}workload = \"cpu\"\n"));
        assert!(
            e.contains("vm[0].workload") && e.contains("only the bench guest"),
            "{e}"
        );
        // `initramfs` is the same key as `initrd`; not both.
        let c = fx.parse(&format!("{LINUX}initramfs = \"env\"\n")).unwrap();
        assert_eq!(c.vms[0].initrd, Some(fx.dir.join("env")));
        let e = fx.errors(&format!("{LINUX}initrd = \"env\"\ninitramfs = \"env\"\n"));
        assert!(
            e.contains(":7:13: vm[0].initramfs: expected one of `initrd` and `initramfs`"),
            "{e}"
        );
        // It must be a regular file that exists, named by its key.
        let e = fx.errors(&format!("{LINUX}initramfs = \"nope\"\n"));
        assert!(
            e.contains(":6:13: vm[0].initramfs: expected a readable file"),
            "{e}"
        );
        let e = fx.errors(&format!("{LINUX}initramfs = \".\"\n"));
        assert!(
            e.contains("vm[0].initramfs: expected a regular file"),
            "{e}"
        );
        // The kernel must be one Pacer boots: a bzImage with the 64-bit
        // entry.
        std::fs::write(
            fx.dir.join("old-bz"),
            boot::linux::tests::bzimage(0x020B, 0x7f, 0x1000),
        )
        .unwrap();
        let e = fx.errors(&LINUX.replace("bzImage", "old-bz"));
        assert!(
            e.contains(":5:10: vm[0].kernel:") && e.contains("no 64-bit entry"),
            "{e}"
        );
        // The kernel as it starts (4 MiB here), and the initramfs above
        // it, must fit.
        assert!(fx
            .parse(&LINUX.replace("memory_mib = 512", "memory_mib = 4"))
            .is_ok());
        let e = fx.errors(&LINUX.replace("memory_mib = 512", "memory_mib = 3"));
        assert!(
            e.contains("vm[0].memory_mib: expected at least 4 MiB for the kernel (it occupies memory up to 0x400000 as it starts), found 3"),
            "{e}"
        );
        std::fs::write(fx.dir.join("big"), vec![0u8; 3 << 20]).unwrap();
        let small = LINUX.replace("memory_mib = 512", "memory_mib = 6");
        let e = fx.errors(&format!("{small}initramfs = \"big\"\n"));
        assert!(
            e.contains("vm[0].memory_mib: expected at least 7 MiB")
                && e.contains("the initramfs (3145728 bytes), found 6"),
            "{e}"
        );
        assert!(fx
            .parse(&format!(
                "{}initrd = \"big\"\n",
                small.replace("= 6", "= 7")
            ))
            .is_ok());
    }

    #[test]
    fn modules_must_fit_in_memory() {
        let fx = Fixture::new("mbsize");
        std::fs::write(fx.dir.join("big"), vec![0u8; 3 << 20]).unwrap();
        let e = fx.errors(&format!(
            "{}modules = [\"big\"]\n",
            MB.replace("memory_mib = 16", "memory_mib = 2")
        ));
        assert!(
            e.contains("vm[0].memory_mib") && e.contains("cannot hold"),
            "{e}"
        );
    }

    #[test]
    fn duplicate_vm_names() {
        let fx = Fixture::new("dup");
        let e = fx.errors(&GOOD.replace("name = \"b-2\"", "name = \"a\""));
        assert!(e.contains("vm[1].name") && e.contains("duplicate"), "{e}");
        assert!(e.contains(":20:8:"), "{e}");
        let e = fx.errors(&GOOD.replace("name = \"b-2\"", "name = \"b 2\""));
        assert!(e.contains("vm[1].name"), "{e}");
    }

    #[test]
    fn bad_policy() {
        let fx = Fixture::new("policy");
        let e = fx.errors(&GOOD.replace("policy = \"haiku\"", "policy = \"fifo\""));
        assert!(e.contains("fifo") && e.contains(":4:10:"), "{e}");
        // One spelling: the snake_case names of old are refused.
        let e = fx.errors(&GOOD.replace("policy = \"haiku\"", "policy = \"global_rr\""));
        assert!(e.contains("global-rr"), "{e}");
        let e = fx.errors(&GOOD.replace("mode = \"power-saving\"", "mode = \"power_saving\""));
        assert!(e.contains("power_saving"), "{e}");
    }

    #[test]
    fn policy_refuses_what_it_cannot_honour() {
        let fx = Fixture::new("honour");
        // vm[0] has priority 20: only haiku honours timeshare priorities.
        let e = fx.errors(&GOOD.replace("policy = \"haiku\"", "policy = \"global-rr\""));
        assert!(
            e.contains("vm[0].priority") && e.contains("ignores timeshare priorities"),
            "{e}"
        );
        assert!(e.contains(":14:12:") && e.contains("(host.policy)"), "{e}");
        // The same refusal when --policy chose it.
        let o = Overrides {
            policy: Some("host".parse().unwrap()),
        };
        let e = match fx.parse_with(GOOD, o) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("host cannot honour priority 20"),
        };
        assert!(
            e.contains("vm[0].priority") && e.contains("(--policy)"),
            "{e}"
        );
        let no_prio = GOOD.replace("priority = 20\n", "");
        assert_eq!(
            fx.parse_with(&no_prio, o).unwrap().host.policy.as_str(),
            "host"
        );
        // Realtime: a class of its own range; host refuses it.
        let rt = no_prio.replace("cpus = [0, 1]", "cpus = [0, 1]\nclass = \"realtime\"");
        let c = fx.parse(&rt).unwrap();
        assert_eq!(
            (c.vms[0].class, c.vms[0].priority),
            (SchedClass::Realtime, 100)
        );
        let e = fx.errors(&rt.replace(
            "class = \"realtime\"",
            "class = \"realtime\"\npriority = 20",
        ));
        assert!(e.contains("between 100 and 120"), "{e}");
        let e = match fx.parse_with(&rt, o) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("host cannot honour realtime"),
        };
        assert!(e.contains("vm[0].class") && e.contains("realtime"), "{e}");
        // SMT isolation: haiku only.
        let smt = no_prio.replace(
            "log_dir = \"logs\"",
            "log_dir = \"logs\"\nsmt_isolation = true",
        );
        assert!(fx.parse(&smt).unwrap().host.smt_isolation);
        let e = fx.errors(&smt.replace("policy = \"haiku\"", "policy = \"pinned\""));
        assert!(
            e.contains("host.smt_isolation") && e.contains("pinned"),
            "{e}"
        );
        // eevdf (every timeshare vCPU at nice 0): priorities and SMT
        // isolation refused in the words of the other comparison policies,
        // the realtime class honoured.
        let eevdf = |t: &str| t.replace("policy = \"haiku\"", "policy = \"eevdf\"");
        let e = fx.errors(&eevdf(GOOD));
        assert!(
            e.contains("vm[0].priority")
                && e.contains("policy \"eevdf\" orders vCPUs by class only")
                && e.contains("(host.policy)"),
            "{e}"
        );
        let e = fx.errors(&eevdf(&smt));
        assert!(
            e.contains("host.smt_isolation") && e.contains("eevdf"),
            "{e}"
        );
        let c = fx.parse(&eevdf(&rt)).unwrap();
        assert_eq!(c.host.policy.as_str(), "eevdf");
        assert_eq!(c.vms[0].class, SchedClass::Realtime);
    }

    #[test]
    fn dispatch_and_tunables() {
        let fx = Fixture::new("tunables");
        let text = GOOD.replace(
            "log_dir = \"logs\"",
            "log_dir = \"logs\"\ndispatch = \"workers\"\n\n[host.tunables]\nbursty_load = 300",
        );
        let c = fx.parse(&text).unwrap();
        assert_eq!(c.host.dispatch, DispatchKind::Workers);
        assert_eq!(c.host.tunables.bursty_load, 300);
        let e = fx.errors(&text.replace("bursty_load", "burst_load"));
        assert!(e.contains("burst_load"), "{e}");
    }

    #[test]
    fn every_error_reported() {
        let fx = Fixture::new("many");
        let text = GOOD
            .replace("memory_mib = 64", "memory_mib = 1")
            .replace("priority = 20", "priority = 100")
            .replace("timeout_s = 2.5", "timeout_s = 0");
        let e = fx.errors(&text);
        for f in ["vm[0].memory_mib", "vm[0].priority", "vm[0].timeout_s"] {
            assert!(e.contains(f), "{f} missing in {e}");
        }
        let e = fx.errors(&GOOD.replace("log_dir = \"logs\"", "log_dir = \"kernel.elf\""));
        assert!(e.contains("host.log_dir") && e.contains(":6:11:"), "{e}");
        let e = fx.errors(&GOOD.replace("cmdline = \"debug=1\"", "cmdline = \"vcpus=3\""));
        assert!(e.contains("vm[1].cmdline"), "{e}");
    }

    proptest::proptest! {
        /// Any text, and the good config with any one line replaced, gives
        /// a config or diagnostics with valid positions, never a panic.
        #[test]
        fn never_panics(text in "\\PC{0,200}", line in 0usize..30, repl in "\\PC{0,40}") {
            let fx = Fixture::new("prop");
            let _ = fx.parse(&text);
            let mut lines: Vec<&str> = GOOD.lines().collect();
            if line < lines.len() {
                lines[line] = &repl;
            }
            let mutated = lines.join("\n");
            if let Err(ConfigError::Invalid { diagnostics, .. }) = fx.parse(&mutated) {
                for d in diagnostics {
                    proptest::prop_assert!(d.line >= 1 && d.line <= mutated.lines().count() + 1);
                }
            }
        }
    }

    #[test]
    fn line_col_counts() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("ab\n", 3), (2, 1));
    }
}
