//! The `pacer` configuration file (TOML).
//!
//! ```toml
//! [host]
//! cpus = "0-1"            # or [0, 1]; default: all online CPUs
//! policy = "host"         # host | haiku | global_rr | static_pin
//! mode = "low_latency"    # low_latency | power_saving
//! log_dir = "logs"        # relative to this file; default "pacer-logs"
//!
//! [[vm]]
//! name = "a"              # unique, [A-Za-z0-9_-]
//! vcpus = 1               # 1..=254
//! memory_mib = 64         # >= 2
//! kernel = "../guests/out/bench-guest.elf"
//! initrd = "initrd.img"   # optional
//! cmdline = "foo=1"       # optional
//! guest = "bench"         # bench | multiboot | linux; default: from the kernel's format
//! modules = ["env.txt", { path = "m.bin", cmdline = "x=1" }]   # multiboot only
//! cpuid = { x2apic = false }                                 # optional CPUID overrides
//! cpus = "0"              # core set, within [host] cpus; default: all of them
//! priority = 10           # 1..=99
//! workload = { name = "cpu", duration_ms = 500, report_ms = 100 }   # bench only
//! console = "stdout"      # log | stdout | both
//! timeout_s = 30          # runaway guard
//! ```
//!
//! Parsing is two-stage: serde (with `deny_unknown_fields`) into raw structs
//! that keep the spans of the fields that semantic checks need, then
//! validation. Every error names the field and the `line:column` in the file.

use crate::boot::multiboot::Module;
use crate::boot::{self, GuestKind};
use crate::cpuid::CpuidOverrides;
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;
use vcpu_sched::{CpuId, CpuSet, Mode};

/// Highest vCPU count per VM (APIC ids 0..=253; 0xff is broadcast).
pub const MAX_VCPUS: u32 = 254;
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
    #[error("cannot read config file {path}: {source}")]
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
    diags
        .iter()
        .map(|d| {
            if d.field.is_empty() {
                format!("{}:{}:{}: {}", path.display(), d.line, d.column, d.message)
            } else {
                format!(
                    "{}:{}:{}: {}: {}",
                    path.display(),
                    d.line,
                    d.column,
                    d.field,
                    d.message
                )
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Scheduling policy of the whole process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// No Pacer scheduling: vCPU threads are left to the host kernel.
    #[default]
    Host,
    Haiku,
    GlobalRr,
    StaticPin,
}

impl Policy {
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Host => "host",
            Policy::Haiku => "haiku",
            Policy::GlobalRr => "global_rr",
            Policy::StaticPin => "static_pin",
        }
    }
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
    Table(toml::Table),
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHost {
    cpus: Option<Spanned<RawCpus>>,
    policy: Option<Spanned<Policy>>,
    mode: Option<Mode>,
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
    cmdline: Option<Spanned<String>>,
    modules: Option<Vec<Spanned<toml::Value>>>,
    cpuid: Option<CpuidOverrides>,
    cpus: Option<Spanned<RawCpus>>,
    priority: Option<Spanned<i64>>,
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
    /// OS numbers of the online CPUs.
    pub online: CpuSet,
}

impl HostInfo {
    /// Read `/sys/devices/system/cpu/online`.
    pub fn detect() -> Result<HostInfo, ConfigError> {
        let path = PathBuf::from("/sys/devices/system/cpu/online");
        let text = std::fs::read_to_string(&path).map_err(|e| ConfigError::HostCpus {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let online = CpuSet::parse_list(text.trim()).map_err(|e| ConfigError::HostCpus {
            path,
            reason: e.to_string(),
        })?;
        Ok(HostInfo { online })
    }
}

/// The validated `[host]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    /// OS CPU numbers Pacer may use.
    pub cpus: CpuSet,
    pub policy: Policy,
    pub mode: Mode,
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
    /// guests: the config's `cmdline`, unchanged.
    pub cmdline: String,
    /// Multiboot modules, in order.
    pub modules: Vec<Module>,
    /// CPUID bits switched off or insisted on.
    pub cpuid: CpuidOverrides,
    /// OS CPU numbers the VM's vCPUs may run on.
    pub cpus: CpuSet,
    pub priority: u8,
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
    diags: Vec<Diagnostic>,
}

impl Checker<'_> {
    fn err(&mut self, span: Range<usize>, field: impl Into<String>, message: impl Into<String>) {
        let (line, column) = line_col(self.text, span.start);
        self.diags.push(Diagnostic {
            line,
            column,
            field: field.into(),
            message: message.into(),
        });
    }

    fn cpus(&mut self, raw: &Spanned<RawCpus>, field: &str) -> Option<CpuSet> {
        let span = raw.span();
        match raw.get_ref() {
            RawCpus::List(s) => match CpuSet::parse_list(s) {
                Ok(set) => Some(set),
                Err(e) => {
                    self.err(span, field, e.to_string());
                    None
                }
            },
            RawCpus::Ids(ids) => {
                let mut set = CpuSet::new();
                for &id in ids {
                    if !(0..=vcpu_sched::cpuset::MAX_CPU_ID as i64).contains(&id) {
                        self.err(span, field, format!("{id} is not a valid CPU number"));
                        return None;
                    }
                    set.insert(CpuId(id as u32));
                }
                Some(set)
            }
        }
    }

    fn path(&mut self, base: &Path, raw: &Spanned<String>, field: &str) -> Option<PathBuf> {
        let p = Path::new(raw.get_ref());
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        };
        match std::fs::metadata(&p) {
            Ok(m) if m.is_file() => Some(p),
            Ok(_) => {
                self.err(raw.span(), field, format!("{} is not a file", p.display()));
                None
            }
            Err(e) => {
                self.err(raw.span(), field, format!("{}: {e}", p.display()));
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

fn valid_arg_token(s: &str) -> bool {
    !s.is_empty()
        && !s
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c.is_control())
}

fn workload_args(c: &mut Checker<'_>, raw: &Spanned<RawWorkload>, field: &str) -> Vec<String> {
    let span = raw.span();
    let mut out = Vec::new();
    match raw.get_ref() {
        RawWorkload::Args(s) => {
            let s = s.trim();
            if s.is_empty() {
                c.err(span, field, "empty workload");
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
                            format!("{tok:?} is not a key=value argument"),
                        );
                    }
                }
            }
        }
        RawWorkload::Table(t) => {
            if !t.contains_key("name") {
                c.err(span.clone(), field, "a workload table needs `name`");
            }
            for (k, v) in t {
                let key = if k == "name" { "workload" } else { k.as_str() };
                let val = match v {
                    toml::Value::String(s) => s.clone(),
                    toml::Value::Integer(i) => i.to_string(),
                    toml::Value::Float(f) => f.to_string(),
                    toml::Value::Boolean(b) => (*b as u8).to_string(),
                    _ => {
                        c.err(
                            span.clone(),
                            format!("{field}.{k}"),
                            "must be a string, number or boolean",
                        );
                        continue;
                    }
                };
                if !k.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
                    || !valid_arg_token(&val)
                {
                    c.err(
                        span.clone(),
                        format!("{field}.{k}"),
                        format!("{k}={val:?} cannot be passed on a kernel command line"),
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
    out
}

impl Config {
    /// Read and validate a config file against the running host.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let host = HostInfo::detect()?;
        Self::load_with(path, &host)
    }

    /// Read and validate a config file against the given host facts.
    pub fn load_with(path: &Path, host: &HostInfo) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path, host)
    }

    /// Validate `text` as if read from `path` (relative paths inside are
    /// resolved against `path`'s directory).
    pub fn parse(text: &str, path: &Path, host: &HostInfo) -> Result<Config, ConfigError> {
        let invalid = |diagnostics| ConfigError::Invalid {
            path: path.to_path_buf(),
            diagnostics,
        };
        let raw: RawConfig = match toml::from_str(text) {
            Ok(r) => r,
            Err(e) => {
                let (line, column) = line_col(text, e.span().map(|s| s.start).unwrap_or(0));
                return Err(invalid(vec![Diagnostic {
                    line,
                    column,
                    field: String::new(),
                    message: e.message().trim().to_string(),
                }]));
            }
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
            diags: Vec::new(),
        };

        // [host]
        let rh = raw.host.unwrap_or_default();
        let host_cpus = match &rh.cpus {
            Some(s) => {
                let set = c.cpus(s, "host.cpus").unwrap_or_default();
                let outside: CpuSet = set.iter().filter(|id| !host.online.contains(*id)).collect();
                if !outside.is_empty() {
                    c.err(
                        s.span(),
                        "host.cpus",
                        format!(
                            "CPUs {} are not online on this host (online: {})",
                            outside.to_list(),
                            host.online.to_list()
                        ),
                    );
                } else if set.is_empty() {
                    c.err(s.span(), "host.cpus", "the CPU set is empty");
                }
                set
            }
            None => host.online.clone(),
        };
        let policy = match &rh.policy {
            Some(p) => {
                if *p.get_ref() != Policy::Host {
                    c.err(
                        p.span(),
                        "host.policy",
                        format!(
                            "policy \"{}\" is not available until the scheduled vCPU engine lands; use \"host\"",
                            p.get_ref().name()
                        ),
                    );
                }
                *p.get_ref()
            }
            None => Policy::Host,
        };
        let log_dir = match &rh.log_dir {
            Some(d) if d.get_ref().trim().is_empty() => {
                c.err(d.span(), "host.log_dir", "empty path");
                PathBuf::new()
            }
            Some(d) => {
                let p = base.join(d.get_ref());
                if p.exists() && !p.is_dir() {
                    c.err(
                        d.span(),
                        "host.log_dir",
                        format!("{} exists and is not a directory", p.display()),
                    );
                }
                p
            }
            None => base.join("pacer-logs"),
        };

        // [[vm]]
        if raw.vm.is_empty() {
            c.err(0..0, "vm", "no [[vm]] defined");
        }
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut vms = Vec::new();
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
                    format!("{name:?}: names are 1-64 characters of [A-Za-z0-9_-]"),
                );
            }
            if let Some(prev) = names.insert(name.clone(), i) {
                c.err(
                    v.name.span(),
                    f("name"),
                    format!("duplicate VM name {name:?} (also vm[{prev}])"),
                );
            }
            let vcpus = *v.vcpus.get_ref();
            if !(1..=MAX_VCPUS as i64).contains(&vcpus) {
                c.err(
                    v.vcpus.span(),
                    f("vcpus"),
                    format!("{vcpus}: must be between 1 and {MAX_VCPUS}"),
                );
            }
            let mem = *v.memory_mib.get_ref();
            if !(MIN_MEMORY_MIB as i64..=MAX_MEMORY_MIB as i64).contains(&mem) {
                c.err(
                    v.memory_mib.span(),
                    f("memory_mib"),
                    format!("{mem}: must be between {MIN_MEMORY_MIB} and {MAX_MEMORY_MIB}"),
                );
            }
            let kernel = c.path(&base, &v.kernel, &f("kernel"));
            let guest = kernel
                .as_ref()
                .and_then(|k| c.guest_kind(k, &v.kernel, v.guest.as_ref(), &f("")));
            let is = |kind| guest == Some(kind);
            if let (Some(i), false) = (&v.initrd, guest.is_none() || is(GuestKind::Bench)) {
                c.err(
                    i.span(),
                    f("initrd"),
                    "only the bench guest takes an initrd; give a multiboot guest `modules`",
                );
            }
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
            let initrd = v
                .initrd
                .as_ref()
                .and_then(|p| c.path(&base, p, &f("initrd")));
            let cpus = match &v.cpus {
                Some(s) => {
                    let set = c.cpus(s, &f("cpus")).unwrap_or_default();
                    let outside: CpuSet =
                        set.iter().filter(|id| !host_cpus.contains(*id)).collect();
                    if !outside.is_empty() {
                        c.err(
                            s.span(),
                            f("cpus"),
                            format!(
                                "CPUs {} are outside the host CPU set {}",
                                outside.to_list(),
                                host_cpus.to_list()
                            ),
                        );
                    } else if set.is_empty() {
                        c.err(s.span(), f("cpus"), "the core set is empty");
                    }
                    set
                }
                None => host_cpus.clone(),
            };
            let priority = match &v.priority {
                Some(p) => {
                    let val = *p.get_ref();
                    if !(1..=99).contains(&val) {
                        c.err(
                            p.span(),
                            f("priority"),
                            format!("{val}: must be between 1 and 99"),
                        );
                    }
                    val.clamp(1, 99) as u8
                }
                None => 10,
            };
            let mut cmdline: Vec<String> = Vec::new();
            if let Some(cl) = &v.cmdline {
                if cl.get_ref().chars().any(|ch| ch.is_control()) {
                    c.err(
                        cl.span(),
                        f("cmdline"),
                        "control characters are not allowed",
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
                    cmdline.extend(workload_args(&mut c, w, &f("workload")));
                }
            }
            let reserved: &[&str] = if is(GuestKind::Bench) {
                &["tsc_khz=", "vcpus="]
            } else {
                &[]
            };
            for reserved in reserved {
                if cmdline.iter().any(|a| a.starts_with(reserved)) {
                    let span = v.cmdline.as_ref().map(|s| s.span()).unwrap_or(0..0);
                    c.err(
                        span,
                        f("cmdline"),
                        format!("`{reserved}` is set by the VMM and may not be given"),
                    );
                }
            }
            let timeout = match &v.timeout_s {
                Some(t) => {
                    let secs = match t.get_ref() {
                        RawNumber::Int(i) => *i as f64,
                        RawNumber::Float(x) => *x,
                    };
                    if !(secs > 0.0 && secs <= 1e7) {
                        c.err(t.span(), f("timeout_s"), format!("{secs}: must be > 0"));
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
                priority,
                console: v.console.unwrap_or_default(),
                timeout,
            });
        }

        if !c.diags.is_empty() {
            return Err(invalid(c.diags));
        }
        Ok(Config {
            path: path.to_path_buf(),
            host: HostConfig {
                cpus: host_cpus,
                policy,
                mode: rh.mode.unwrap_or_default(),
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
            "host: cpus {} policy {} mode {:?} log_dir {}",
            self.host.cpus.to_list(),
            self.host.policy.name(),
            self.host.mode,
            self.host.log_dir.display()
        )?;
        for v in &self.vms {
            writeln!(
                f,
                "vm {}: {} guest, {} vCPU(s), {} MiB, cpus {}, priority {}, kernel {}, cmdline {:?}{}{}",
                v.name,
                v.guest.name(),
                v.vcpus,
                v.memory_mib,
                v.cpus.to_list(),
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
            let mut elf = vec![0u8; 64];
            elf[0..4].copy_from_slice(b"\x7fELF");
            elf[4] = 2;
            elf[5] = 1;
            elf[18] = 62;
            std::fs::write(dir.join("kernel.elf"), elf).unwrap();
            std::fs::write(dir.join("not-elf.bin"), b"MZ not an elf file....").unwrap();
            let mut mb = boot::multiboot::tests::header(0);
            mb.extend([0xf4u8; 16]);
            let mb = boot::multiboot::tests::elf32(0x40_0000, &mb, 0);
            std::fs::write(dir.join("mb.flat"), mb).unwrap();
            let mut bz = vec![0u8; 0x400];
            bz[0x1fe] = 0x55;
            bz[0x1ff] = 0xaa;
            bz[0x202..0x206].copy_from_slice(b"HdrS");
            std::fs::write(dir.join("bzImage"), bz).unwrap();
            std::fs::write(dir.join("env"), b"TEST_DEVICE=0\n").unwrap();
            Fixture { dir }
        }
        fn parse(&self, text: &str) -> Result<Config, ConfigError> {
            let host = HostInfo {
                online: CpuSet::parse_list("0-3").unwrap(),
            };
            Config::parse(text, &self.dir.join("pacer.toml"), &host)
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
policy = "host"
mode = "power_saving"
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
        assert_eq!(c.host.policy, Policy::Host);
        assert_eq!(c.host.mode, Mode::PowerSaving);
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
        assert!(e.contains("missing field `kernel`"), "{e}");
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
            e.contains(":6:20:") && e.contains("expected a boolean"),
            "{e}"
        );
        let e = fx.errors(&format!("{MB}cpuid = {{ avx = false }}\n"));
        assert!(e.contains("avx"), "{e}");
    }

    #[test]
    fn bzimage_recognised_but_not_built() {
        let fx = Fixture::new("bz");
        let e = fx.errors(&MB.replace("mb.flat", "bzImage"));
        assert!(
            e.contains("vm[0].kernel") && e.contains("bzImage support is not built yet"),
            "{e}"
        );
        let e = fx.errors(&format!(
            "{}guest = \"linux\"\n",
            MB.replace("mb.flat", "bzImage")
        ));
        assert!(
            e.contains("vm[0].guest") && e.contains("not built yet"),
            "{e}"
        );
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
        let e = fx.errors(&GOOD.replace("policy = \"host\"", "policy = \"haiku\""));
        assert!(
            e.contains("host.policy") && e.contains("not available until"),
            "{e}"
        );
        assert!(e.contains(":4:10:"), "{e}");
        let e = fx.errors(&GOOD.replace("policy = \"host\"", "policy = \"fifo\""));
        assert!(e.contains("fifo") && e.contains(":4:10:"), "{e}");
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
