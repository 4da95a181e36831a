//! What a VM boots and what it is told: the kernel and the guest kind
//! (the config's `guest`, else the kernel's format), multiboot modules,
//! the initrd (`initramfs`), whether they fit in the VM's memory, the
//! command line and the bench guest's workload.

use super::check::Checker;
use super::limits::{MAX_VCPUS, MIN_MEMORY_MIB};
use super::raw::{RawVm, RawWorkload};
use crate::boot::multiboot::Module;
use crate::boot::{self, GuestKind};
use crate::text::{one_line, quoted};
use std::path::{Path, PathBuf};
use toml::Spanned;

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
            let expected = crate::config::errors::expectation("vm[].workload").unwrap_or_default();
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
    let args = crate::config::guest_params::split_args(out.iter().map(String::as_str));
    for e in crate::config::guest_params::check(&args, vcpus) {
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

/// A VM's boot files as checked: `None` (or left out) where refused.
pub(super) struct BootFiles {
    pub(super) kernel: Option<PathBuf>,
    /// `None` when the kernel could not be read or the `guest` cannot
    /// boot it (the checks that depend on the kind are then skipped).
    pub(super) guest: Option<GuestKind>,
    pub(super) modules: Vec<Module>,
    pub(super) initrd: Option<PathBuf>,
}

/// Check `vm[i]`'s kernel, guest kind, modules and initrd, and that they
/// fit in its memory; paths are resolved against `base`.
pub(super) fn boot_files(c: &mut Checker<'_>, i: usize, v: &RawVm, base: &Path) -> BootFiles {
    let f = |name: &str| format!("vm[{i}].{name}");
    let mem = *v.memory_mib.get_ref();
    let kernel = c.path(base, &v.kernel, &f("kernel"));
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
        if let Some(p) = c.path(base, &spanned, &field) {
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
    let initrd = initrd_raw.and_then(|p| c.path(base, p, &f(initrd_key)));
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
                let kernel = format!("it occupies memory up to {:#x} as it starts", fp.kernel_end);
                if let Some(why) = room.shortfall(&kernel, initrd_key, initrd_len, mem as u64) {
                    c.err(v.memory_mib.span(), f("memory_mib"), why);
                }
            }
            Ok(_) => {}
            Err(why) => c.err(v.kernel.span(), f("kernel"), why.to_string()),
        }
    }
    BootFiles {
        kernel,
        guest,
        modules,
        initrd,
    }
}

/// Check `vm[i]`'s `cmdline` and `workload` for a guest of kind `guest`;
/// the command line the VM boots with (see `VmConfig::cmdline`).
pub(super) fn cmdline(
    c: &mut Checker<'_>,
    i: usize,
    v: &RawVm,
    guest: Option<GuestKind>,
) -> String {
    let f = |name: &str| format!("vm[{i}].{name}");
    let is = |kind| guest == Some(kind);
    let vcpus = *v.vcpus.get_ref();
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
            cmdline.extend(workload_args(c, w, &f("workload"), n));
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
            format!(
                "expected a command line (with the workload) of at most {room} bytes, found {len}"
            ),
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
    match guest {
        Some(GuestKind::Bench) => cmdline.join(" "),
        _ => v
            .cmdline
            .as_ref()
            .map(|s| s.get_ref().clone())
            .unwrap_or_default(),
    }
}
