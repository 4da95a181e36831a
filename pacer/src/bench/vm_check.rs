//! Every VM of a matrix checked as a host config's VM, before the first
//! cell runs.
//!
//! A cell runs an in-memory `Config` (`cells::pacer_config`) that never
//! went through `Config::parse`: a sleep workload with `interval_us = 0`,
//! 2 MiB beside a kernel that needs 3, a text file as the kernel or an
//! unknown `apic` value passed the matrix and failed cell after cell. So
//! the matrix is checked by the host config's own validation, not a copy
//! of it: for every (layout, workload) pair the config a cell would run is
//! written out as a host config (`[host]` and one `[[vm]]` per VM, the
//! workload as its command-line words) and validated by `Config::parse`
//! under the policy that honours every class and priority (which policy
//! refuses what is a per-cell `n/a`, `Cell::static_na`). Each diagnostic
//! is then put back on the matrix: `vm[3].memory_mib` of the rendered
//! config is the `memory_mib` of the `[[layout]] vm` entry VM 3 came from
//! (or `matrix.memory_mib` when the entry has none), `vm[3].workload.apic`
//! is `workload[1].apic`, and so on, at that field's line and column.
//!
//! A `unixbench` VM is checked only when its Linux image is built (a
//! missing image is the cells' `n/a`, see `cells.rs`).

use super::cells::{self, Cell, VmBoot};
use super::matrix::Matrix;
use std::collections::BTreeSet;
use std::ops::Range;
use vmm::config::errors::SpanIndex;
use vmm::config::{line_col, Config, ConfigError, Diagnostic, HostInfo, Overrides};

/// Where diagnostics of the rendered config land in the matrix file.
struct Mapper<'a> {
    text: &'a str,
    index: SpanIndex,
    m: &'a Matrix,
}

impl Mapper<'_> {
    /// The value span of `path` in the matrix file, if it is written there.
    fn span(&self, path: &str) -> Option<Range<usize>> {
        self.index.get(path).map(|n| n.value.clone())
    }

    /// The first of `paths` written in the file with its span, else
    /// `field` at the span of `at`.
    fn first(&self, paths: &[String], field: String, at: &str) -> (String, Range<usize>) {
        for p in paths {
            if let Some(s) = self.span(p) {
                return (p.clone(), s);
            }
        }
        (field, self.span(at).unwrap_or(0..0))
    }

    /// The matrix field and span of field `field` (`vm[3].memory_mib`) of
    /// the config rendered for `cell`.
    fn place(&self, cell: &Cell, field: &str) -> (String, Range<usize>) {
        let layout = &self.m.layouts[cell.layout];
        let li = cell.layout;
        let Some(rest) = field.strip_prefix("vm[") else {
            // `[host]`: the matrix's own keys.
            let key = match field {
                "host.cpus" => "matrix.host_cpus",
                _ => "matrix.name",
            };
            return (key.to_string(), self.span(key).unwrap_or(0..0));
        };
        let (n, key) = rest.split_once(']').unwrap_or((rest, ""));
        let key = key.trim_start_matches('.');
        let Some((vi, vm)) = n
            .parse::<usize>()
            .ok()
            .and_then(|i| layout.vms.get(i).map(|v| (i, v)))
        else {
            return (
                format!("layout[{li}].vm"),
                self.span(&format!("layout[{li}].vm")).unwrap_or(0..0),
            );
        };
        let entry = format!("layout[{li}].vm[{}]", vm.entry);
        let own = |k: &str| format!("{entry}.{k}");
        let wi = vm.workload.unwrap_or(cell.workload);
        let w = &self.m.workloads[wi];
        let wf = |k: &str| format!("workload[{wi}].{k}");
        let linux = matches!(cells::vm_boot(self.m, cell, vi), VmBoot::Linux { .. });
        let (top, sub) = key.split_once('.').unwrap_or((key, ""));
        let name = own("name");
        let one = |p: String| self.first(std::slice::from_ref(&p), p.clone(), &name);
        match top {
            "name" | "vcpus" | "class" | "priority" | "count" => one(own(top)),
            // The entry's own value, else the matrix-wide one.
            "memory_mib" => self.first(&[own(top), "matrix.memory_mib".into()], own(top), &name),
            "cpus" => self.first(&[own(top), "matrix.host_cpus".into()], own(top), &name),
            "kernel" | "guest" if linux => self.first(&[wf("kernel")], wf("kernel"), &wf("kind")),
            "kernel" | "guest" => self.first(
                &["matrix.kernel".into()],
                "matrix.kernel".into(),
                "matrix.name",
            ),
            "initrd" | "initramfs" => self.first(&[wf("initramfs")], wf("initramfs"), &wf("kind")),
            "timeout_s" => self.first(
                &["matrix.cell_timeout_s".into()],
                "matrix.cell_timeout_s".into(),
                "matrix.name",
            ),
            "cmdline" if linux => self.first(&[wf("cmdline")], wf("cmdline"), &wf("kind")),
            "workload" | "cmdline" => {
                let k = match sub {
                    "name" | "workload" | "" => "kind",
                    k if w.params.contains_key(k) => k,
                    _ => "args",
                };
                self.first(&[wf(k)], wf(k), &wf("kind"))
            }
            _ => one(own(top)),
        }
    }
}

/// `p` as an absolute path (the matrix resolved it against its own
/// directory already; the rendered config must not do it again).
fn absolute(p: &std::path::Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// The host config a cell of (layout, workload) would run, as TOML.
fn render(m: &Matrix, cell: &Cell) -> String {
    use toml::{Table, Value};
    let mut host = Table::new();
    host.insert("cpus".into(), Value::String(m.host_cpus.to_list()));
    // The bench's own output directory is checked by `pacer bench`.
    host.insert(
        "log_dir".into(),
        Value::String(std::env::temp_dir().display().to_string()),
    );
    let layout = &m.layouts[cell.layout];
    let mut vms = Vec::new();
    for (i, v) in layout.vms.iter().enumerate() {
        let mut t = Table::new();
        t.insert("name".into(), Value::String(v.name.clone()));
        t.insert("vcpus".into(), Value::Integer(v.vcpus.into()));
        t.insert("memory_mib".into(), Value::Integer(v.memory_mib as i64));
        t.insert("cpus".into(), Value::String(v.cpus.to_list()));
        t.insert(
            "class".into(),
            Value::String(vmm::config::sched_rules::class_name(v.class).into()),
        );
        t.insert("priority".into(), Value::Integer(v.priority.into()));
        t.insert(
            "timeout_s".into(),
            Value::Float(m.cell_timeout.as_secs_f64()),
        );
        match cells::vm_boot(m, cell, i) {
            VmBoot::Bench { kernel, args } => {
                t.insert("kernel".into(), Value::String(absolute(&kernel)));
                t.insert("guest".into(), Value::String("bench".into()));
                t.insert("workload".into(), Value::String(args));
            }
            VmBoot::Linux { suite, cmdline } => {
                t.insert("kernel".into(), Value::String(absolute(&suite.kernel)));
                t.insert("guest".into(), Value::String("linux".into()));
                if let Some(i) = &suite.initramfs {
                    t.insert("initrd".into(), Value::String(absolute(i)));
                }
                t.insert("cmdline".into(), Value::String(cmdline));
            }
        }
        vms.push(Value::Table(t));
    }
    let mut doc = Table::new();
    doc.insert("host".into(), Value::Table(host));
    doc.insert("vm".into(), Value::Array(vms));
    toml::to_string(&doc).unwrap_or_default()
}

/// Whether every Linux image a cell of (layout, workload) needs is built.
fn images_built(m: &Matrix, cell: &Cell) -> bool {
    (0..m.layouts[cell.layout].vms.len()).all(|i| match cells::vm_boot(m, cell, i) {
        VmBoot::Bench { .. } => true,
        VmBoot::Linux { suite, .. } => {
            suite.kernel.is_file() && suite.initramfs.as_ref().is_none_or(|p| p.is_file())
        }
    })
}

/// Diagnostics (at positions of the matrix file `text`) for every VM of
/// `m` the host config's validation refuses; empty if none.
pub fn check(m: &Matrix, text: &str, host: &HostInfo) -> Vec<Diagnostic> {
    let mapper = Mapper {
        text,
        index: SpanIndex::new(text),
        m,
    };
    // The policy that honours every class and priority.
    let overrides = Overrides {
        policy: "haiku".parse().ok(),
        ..Overrides::default()
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (li, layout) in m.layouts.iter().enumerate() {
        for &workload in &layout.workloads {
            let cell = Cell {
                layout: li,
                workload,
                policy: 0,
                rep: 1,
            };
            if !images_built(m, &cell) {
                continue;
            }
            let rendered = render(m, &cell);
            let diags = match Config::parse_overridden(&rendered, &m.path, host, &overrides) {
                Ok(_) => continue,
                Err(ConfigError::Invalid { diagnostics, .. }) => diagnostics,
                Err(e) => {
                    let d = Diagnostic {
                        line: 1,
                        column: 1,
                        field: format!("layout[{li}]"),
                        message: e.to_string(),
                    };
                    if seen.insert((d.line, d.column, d.field.clone(), d.message.clone())) {
                        out.push(d);
                    }
                    continue;
                }
            };
            for d in diags {
                if d.field == "host.log_dir" {
                    continue;
                }
                let (field, span) = mapper.place(&cell, &d.field);
                let (line, column) = line_col(mapper.text, span.start);
                let key = (line, column, field.clone(), d.message.clone());
                if seen.insert(key) {
                    out.push(Diagnostic {
                        line,
                        column,
                        field,
                        message: d.message,
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::matrix::tests::{Fixture, GOOD};
    use super::super::matrix::{seconds, MatrixError};
    use std::time::Duration;

    /// The one line of diagnostics of `text` naming `field`.
    fn refusal(fx: &Fixture, text: &str, field: &str) -> String {
        let e = match fx.parse(text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e @ MatrixError::Invalid { .. }) => e.to_string(),
            Err(e) => panic!("{e}"),
        };
        e.lines()
            .find(|l| l.contains(&format!(": {field}: ")))
            .unwrap_or_else(|| panic!("no {field} in {e}"))
            .to_string()
    }

    fn line_of(text: &str, needle: &str) -> usize {
        text[..text.find(needle).unwrap()].matches('\n').count() + 1
    }

    #[test]
    fn bench_parameters_the_guest_would_refuse() {
        let fx = Fixture::new("vmcheck-params");
        for (from, to, field, says) in [
            (
                "interval_us = 500",
                "interval_us = 0",
                "workload[1].interval_us",
                "from 1",
            ),
            (
                "duration_ms = 300",
                "duration_ms = 0",
                "workload[0].duration_ms",
                "from 1",
            ),
            (
                "interval_us = 500",
                "interval_us = 500\napic = \"x3apic\"",
                "workload[1].apic",
                "x2apic, xapic",
            ),
            (
                "report_ms = 100",
                "report_ms = 100\ntimer = \"periodic\"",
                "workload[0].timer",
                "deadline, oneshot",
            ),
        ] {
            let text = GOOD.replace(from, to);
            let line = refusal(&fx, &text, field);
            let at = line_of(&text, to.lines().last().unwrap());
            assert!(line.contains(&format!("m.toml:{at}:")), "{line}");
            assert!(line.contains(says), "{line}");
        }
    }

    #[test]
    fn kernel_and_memory_checked_as_a_host_config_would() {
        let fx = Fixture::new("vmcheck-kernel");
        // A guest image reaching 4 MiB: 2 MiB is too little.
        let big = vmm::test_images::elf_with_loads(&[(0x10_0000, 0x30_0000)]);
        std::fs::write(fx.dir.join("big.elf"), big).unwrap();
        let text = GOOD.replace("guest.elf", "big.elf").replace(
            "{ name = \"hi\", vcpus = 1",
            "{ name = \"hi\", vcpus = 1, memory_mib = 2",
        );
        let line = refusal(&fx, &text, "layout[1].vm[0].memory_mib");
        assert!(line.contains("expected at least 4 MiB"), "{line}");
        assert!(
            line.contains(&format!(":{}:", line_of(&text, "memory_mib = 2"))),
            "{line}"
        );
        // The matrix-wide memory when the entry has none.
        let text = GOOD
            .replace("guest.elf", "big.elf")
            .replace("cell_timeout_s = 20", "cell_timeout_s = 20\nmemory_mib = 3");
        let line = refusal(&fx, &text, "matrix.memory_mib");
        assert!(line.contains("m.toml:8:14:"), "{line}");
        // A text file as the kernel.
        std::fs::write(fx.dir.join("notes.txt"), "just some text\n").unwrap();
        let line = refusal(
            &fx,
            &GOOD.replace("guest.elf", "notes.txt"),
            "matrix.kernel",
        );
        assert!(line.contains("m.toml:4:10:"), "{line}");
        // A name that grows past 64 characters with its count suffix.
        let long = "h".repeat(64);
        let text = GOOD.replace("name = \"hog\"", &format!("name = \"{long}\""));
        let line = refusal(&fx, &text, "layout[0].vm[1].name");
        assert!(line.contains("1-64 characters"), "{line}");
    }

    #[test]
    fn cell_limit_outlives_the_workloads_and_reads_right() {
        let fx = Fixture::new("vmcheck-timeout");
        let text = GOOD.replace("cell_timeout_s = 20", "cell_timeout_s = 0.001");
        let line = refusal(&fx, &text, "matrix.cell_timeout_s");
        assert!(line.contains("m.toml:7:18:"), "{line}");
        assert!(line.contains("found 0.001 s"), "{line}");
        // No cell_timeout_s: the default (60 s) against a long workload.
        let text = GOOD
            .replace("cell_timeout_s = 20\n", "")
            .replace("duration_ms = 300", "duration_ms = 90000");
        let line = refusal(&fx, &text, "workload[0].duration_ms");
        assert!(line.contains("found 60 s"), "{line}");
        assert_eq!(seconds(Duration::from_millis(1)), "0.001");
        assert_eq!(seconds(Duration::from_micros(100)), "1.0e-4");
        assert_eq!(seconds(Duration::from_millis(2500)), "2.5");
        assert_eq!(seconds(Duration::from_secs(86400)), "86400");
        let ok = fx
            .parse(&GOOD.replace("cell_timeout_s = 20", "cell_timeout_s = 1.5"))
            .unwrap();
        assert!(
            ok.describe().contains("cell limit 1.5 s"),
            "{}",
            ok.describe()
        );
    }
}
