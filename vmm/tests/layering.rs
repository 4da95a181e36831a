//! The module arrows run one way: the VM layers (`src/boot/`, `src/vm/`,
//! and the single-file layers `irq.rs`, `memory.rs`, `cpuid.rs`, `msr.rs`)
//! import neither the config file's types (`crate::config`, and its
//! re-exports `crate::Config`, `crate::VmConfig`), nor the runner, its
//! registry and run directory, nor the control API. They take plain
//! structs they own (`vm::VmSpec`, `boot::BootSpec`, `vm::VmOptions`),
//! made above them. (The command line, the bench runner and the trace
//! analysis are the `pacer` crate, which this one cannot name at all;
//! `pacer/tests/layering.rs` checks the crates' and modules' arrows as
//! ARCHITECTURE.md draws them.)
//!
//! The check reads the sources: every `crate::` path outside comments,
//! grouped imports (`use crate::{boot, config::VmConfig}`) included. It
//! checks itself on a snippet with every kind of violation, and fails if
//! it found too few files to mean anything.

use std::path::{Path, PathBuf};

/// First path segments after `crate::` that the lower layers must not use.
const UPPER: &[&str] = &[
    "config",
    "Config",
    "VmConfig",
    "runner",
    "stop_registry",
    "run_dir",
    "api",
];

/// The lower layers: directories scanned recursively, and single files.
const LOWER_DIRS: &[&str] = &["boot", "vm"];
const LOWER_FILES: &[&str] = &["irq.rs", "memory.rs", "cpuid.rs", "msr.rs"];

/// `text` with `//` comments (doc comments too) blanked, line breaks kept.
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of each path that `crate::` starts at `rest` (one
/// for `crate::a::b`, one per item for `crate::{a, b::c}`), with its byte
/// offset in `rest`.
fn first_segments(rest: &str) -> Vec<(usize, String)> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    if let Some(group) = rest.strip_prefix('{') {
        // Items at depth 0 of the group, up to its closing brace.
        let mut out = Vec::new();
        let (mut depth, mut start) = (0usize, 1usize);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    let item = &rest[start..i + 1];
                    let lead = item.len() - item.trim_start().len();
                    out.push((start + lead, ident(item.trim_start())));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    let item = &rest[start..i + 1];
                    let lead = item.len() - item.trim_start().len();
                    out.push((start + lead, ident(item.trim_start())));
                    start = i + 2;
                }
                _ => {}
            }
        }
        out.retain(|(_, s)| !s.is_empty());
        out
    } else {
        vec![(0, ident(rest))]
    }
}

/// Every `line: path` of `text` that names an upper layer.
fn violations(text: &str) -> Vec<(usize, String)> {
    let code = strip_comments(text);
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        // `vmm::crate::` cannot occur; skip `$crate::` in macros.
        if code[..at].ends_with('$') {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        for (off, seg) in first_segments(rest) {
            if UPPER.contains(&seg.as_str()) {
                let pos = at + "crate::".len() + off;
                let line = code[..pos].matches('\n').count() + 1;
                out.push((line, format!("crate::{seg}")));
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_scanner_finds_every_kind_of_upward_import() {
    let snippet = "\
use crate::boot::GuestKind; // crate::config in a comment is fine
use crate::config::VmConfig;
/// crate::api in a doc comment is fine
use crate::{
    cpuid,
    api::ApiOptions,
    memory::{self, DeviceMemory},
    run_dir,
};
fn f(c: &crate::VmConfig) -> crate::runner::RunOptions { todo!() }
";
    let found = violations(snippet);
    let expect: Vec<(usize, String)> = [
        (2, "crate::config"),
        (6, "crate::api"),
        (8, "crate::run_dir"),
        (10, "crate::VmConfig"),
        (10, "crate::runner"),
    ]
    .into_iter()
    .map(|(l, s)| (l, s.to_string()))
    .collect();
    assert_eq!(found, expect);
    assert!(violations("use crate::boot::{self, GuestKind};\nuse crate::vm::VmSpec;\n").is_empty());
}

#[test]
fn lower_layers_import_no_config_runner_or_api() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for d in LOWER_DIRS {
        let before = files.len();
        rust_files(&src.join(d), &mut files);
        assert!(
            files.len() - before >= 5,
            "src/{d}/ has {} Rust files; the scan would mean nothing",
            files.len() - before
        );
    }
    for f in LOWER_FILES {
        let p = src.join(f);
        if p.exists() {
            files.push(p);
        }
    }
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (line, path) in violations(&text) {
            bad.push(format!(
                "{}:{line}: imports {path}",
                f.strip_prefix(&src).unwrap_or(f).display()
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "lower layers import upper ones (pass a spec struct the lower layer owns instead):\n{}",
        bad.join("\n")
    );
}
