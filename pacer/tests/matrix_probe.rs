//! The bench-matrix probe (item 3 of the input hardening): hundreds of mutations of
//! benches/smoke.toml (keys deleted, duplicated or misspelt, values of
//! another type, out of range or misspelt, headers renamed or removed), each
//! validated as `pacer bench` would before its first cell. Every refusal
//! must name the field at fault with its line and column, and no message
//! may leak serde's or Rust's own terms (`untagged enum RawPolicy`,
//! `expected struct RawVm`, `i128`).
//!
//! `PACER_PROBE_VERBOSE=1` prints every refusal.

use pacer::bench::matrix::{Matrix, MatrixError};
use std::path::{Path, PathBuf};
use vcpu_engine::host_cpus::HostCpuSet;
use vmm::config::HostInfo;

/// Words that only serde, toml or Rust would use.
const INTERNALS: &[&str] = &[
    "untagged",
    "Raw",
    "struct ",
    "variant",
    "i64",
    "i128",
    "u8",
    "u32",
    "u64",
    "f64",
    "usize",
    "$__toml",
    "invalid type",
    "a sequence",
    "a map",
    "Spanned",
    "Os {",
];

/// `key = value` occurrences of a line: (key start, key end, value start,
/// value end), byte offsets in the line. Values end at a `,` `}` or `]`
/// outside brackets and quotes, or at the end of the line.
fn assignments(line: &str) -> Vec<(usize, usize, usize, usize)> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        let c = b[i];
        if c == b'"' {
            in_str = !in_str;
            i += 1;
            continue;
        }
        if in_str {
            i += 1;
            continue;
        }
        if c == b'#' {
            break;
        }
        let starts_key = (c.is_ascii_alphabetic() || c == b'_')
            && (i == 0 || matches!(b[i - 1], b' ' | b'{' | b','));
        if !starts_key {
            i += 1;
            continue;
        }
        let ks = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        let ke = i;
        let mut j = i;
        while j < b.len() && b[j] == b' ' {
            j += 1;
        }
        if j >= b.len() || b[j] != b'=' {
            continue;
        }
        j += 1;
        while j < b.len() && b[j] == b' ' {
            j += 1;
        }
        let vs = j;
        let (mut depth, mut q) = (0i32, false);
        while j < b.len() {
            let c = b[j];
            if q {
                if c == b'"' {
                    q = false;
                }
            } else if c == b'"' {
                q = true;
            } else if c == b'[' || c == b'{' {
                depth += 1;
            } else if c == b']' || c == b'}' {
                if depth == 0 {
                    break;
                }
                depth -= 1;
            } else if (c == b',' && depth == 0) || c == b'#' {
                break;
            }
            j += 1;
        }
        let mut ve = j;
        while ve > vs && b[ve - 1] == b' ' {
            ve -= 1;
        }
        out.push((ks, ke, vs, ve));
        // Continue inside the value (inline tables hold keys of their own).
        i = vs;
    }
    out
}

/// A string value with one letter changed (a typo of a name or an enum value).
fn typo(value: &str) -> Option<String> {
    let inner = value.strip_prefix('"')?.strip_suffix('"')?;
    if inner.len() < 2 {
        return None;
    }
    let mut s: Vec<char> = inner.chars().collect();
    let n = s.len();
    s.swap(n - 1, n - 2);
    let swapped: String = s.iter().collect();
    if swapped == inner {
        return Some(format!("\"{inner}x\""));
    }
    Some(format!("\"{swapped}\""))
}

const OTHER_VALUES: &[&str] = &[
    "\"x\"",
    "\"\"",
    "7",
    "0",
    "-1",
    "1.5",
    "0.001",
    "9223372036854775807",
    "1e300",
    "nan",
    "true",
    "[1, 2]",
    "[]",
    "{ a = 1 }",
    "1979-05-27T07:32:00Z",
];

/// Every mutation of `text`: (what was changed, the mutated text).
fn mutations(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let with_line = |i: usize, new: Option<String>| -> String {
        let mut v: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        match new {
            Some(n) => v[i] = n,
            None => {
                v.remove(i);
            }
        }
        v.join("\n") + "\n"
    };
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim();
        if t.starts_with('[') && !line.contains('=') {
            // Headers: misspelt, singular/plural, removed.
            let name = t.trim_matches(['[', ']']);
            for h in [
                t.replace(name, &format!("{name}s")),
                t.replace(name, &name[..name.len() - 1]),
                format!("[{t}]"),
            ] {
                out.push((format!("line {}: header {h}", i + 1), with_line(i, Some(h))));
            }
            out.push((
                format!("line {}: header removed", i + 1),
                with_line(i, None),
            ));
            continue;
        }
        for (ks, ke, vs, ve) in assignments(line) {
            let key = &line[ks..ke];
            let value = &line[vs..ve];
            let at = format!("line {} {key}", i + 1);
            let splice = |a: usize, b: usize, s: &str| format!("{}{s}{}", &line[..a], &line[b..]);
            // Deleted (with its comma in an inline table).
            let rest = &line[ve..];
            let del = if let Some(r) = rest.strip_prefix(", ") {
                format!("{}{}", &line[..ks], r)
            } else if line[..ks].trim_end().ends_with(',') {
                let cut = line[..ks].trim_end().len() - 1;
                format!("{}{}", &line[..cut], rest)
            } else {
                format!("{}{}", &line[..ks], rest)
            };
            out.push((format!("{at}: deleted"), with_line(i, Some(del))));
            // Duplicated.
            let entry = &line[ks..ve];
            let dup = if line.trim_start().starts_with(key) && !line.contains('{') {
                format!("{line}\n{line}")
            } else {
                splice(ks, ks, &format!("{entry}, "))
            };
            out.push((format!("{at}: duplicated"), with_line(i, Some(dup))));
            // Key typos.
            let mut k: Vec<char> = key.chars().collect();
            let n = k.len();
            let dropped: String = k[..n - 1].iter().collect();
            k.swap(0, 1);
            let swapped: String = k.iter().collect();
            for bad in [dropped, swapped, format!("{key}s"), key.to_uppercase()] {
                out.push((
                    format!("{at}: key {bad}"),
                    with_line(i, Some(splice(ks, ke, &bad))),
                ));
            }
            // Values of another type, out of range, misspelt.
            for v in OTHER_VALUES {
                if *v != value {
                    out.push((
                        format!("{at}: value {v}"),
                        with_line(i, Some(splice(vs, ve, v))),
                    ));
                }
            }
            if let Some(v) = typo(value) {
                out.push((
                    format!("{at}: value {v}"),
                    with_line(i, Some(splice(vs, ve, &v))),
                ));
            }
            // Misspelt elements of an array of strings.
            if value.len() >= 2
                && value.starts_with('[')
                && value.ends_with(']')
                && !value.contains('{')
            {
                let inner = &value[1..value.len() - 1];
                for (e, elem) in inner.split(',').enumerate() {
                    if let Some(bad) = typo(elem.trim()) {
                        let mut elems: Vec<String> =
                            inner.split(',').map(|s| s.trim().to_string()).collect();
                        elems[e] = bad.clone();
                        let v = format!("[{}]", elems.join(", "));
                        out.push((
                            format!("{at}[{e}]: value {bad}"),
                            with_line(i, Some(splice(vs, ve, &v))),
                        ));
                    }
                }
            }
        }
    }
    out
}

#[derive(Default, Debug)]
struct Counts {
    mutations: usize,
    accepted: usize,
    refused: usize,
    /// Refusals with a diagnostic naming no field.
    no_field: usize,
    /// Refusals with a message in serde's or Rust's terms.
    internals: usize,
}

fn probe(path: &Path, text: &str, host: &HostInfo) -> (Counts, Vec<String>) {
    let verbose = std::env::var_os("PACER_PROBE_VERBOSE").is_some();
    let mut c = Counts::default();
    let mut bad = Vec::new();
    for (what, m) in mutations(text) {
        c.mutations += 1;
        match Matrix::parse(&m, path, host) {
            Ok(_) => c.accepted += 1,
            Err(MatrixError::Invalid { diagnostics, .. }) => {
                c.refused += 1;
                let no_field = diagnostics
                    .iter()
                    .any(|d| d.field.is_empty() || d.field.starts_with('('));
                let message = MatrixError::Invalid {
                    path: path.to_path_buf(),
                    diagnostics: diagnostics.clone(),
                }
                .to_string();
                let leak = INTERNALS.iter().find(|w| message.contains(*w));
                if verbose {
                    println!("{what}\n  {}", message.replace('\n', "\n  "));
                }
                if no_field {
                    c.no_field += 1;
                    bad.push(format!("no field path ({what}): {message}"));
                }
                if let Some(w) = leak {
                    c.internals += 1;
                    bad.push(format!("leaks {w:?} ({what}): {message}"));
                }
                for d in &diagnostics {
                    let lines = m.lines().count() + 1;
                    assert!(d.line >= 1 && d.line <= lines, "{what}: {d:?}");
                    assert!(d.column >= 1, "{what}: {d:?}");
                }
            }
            Err(e) => panic!("{what}: not a validation error: {e}"),
        }
    }
    (c, bad)
}

fn smoke() -> (PathBuf, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = root.join("benches/smoke.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    // The bench guest this build made, wherever it lives.
    let kernel = guests::bench_guest_elf().display().to_string();
    let text = text.replace("../guests/out/bench-guest.elf", &kernel);
    (path, text)
}

fn two_cpus() -> HostInfo {
    HostInfo {
        online: HostCpuSet::parse_list("0-1").unwrap(),
        resources: Default::default(),
    }
}

#[test]
fn smoke_matrix_mutations_name_their_field_in_plain_words() {
    let (path, text) = smoke();
    let host = two_cpus();
    Matrix::parse(&text, &path, &host).unwrap_or_else(|e| panic!("smoke.toml itself: {e}"));
    let (c, bad) = probe(&path, &text, &host);
    println!("probe counts: {c:?}");
    for b in bad.iter().take(40) {
        println!("{b}");
    }
    assert!(c.mutations >= 600, "{c:?}");
    assert_eq!((c.no_field, c.internals), (0, 0), "{c:?}");
}

#[test]
fn the_mutator_changes_what_it_says() {
    let line = r#"vm = [ { name = "a", vcpus = 1, cpus = "0" } ]"#;
    let a = assignments(line);
    let keys: Vec<&str> = a.iter().map(|&(s, e, _, _)| &line[s..e]).collect();
    assert_eq!(keys, ["vm", "name", "vcpus", "cpus"]);
    let (_, _, vs, ve) = a[3];
    assert_eq!(&line[vs..ve], "\"0\"");
    assert_eq!(typo("\"cpu\"").as_deref(), Some("\"cup\""));
    let m = mutations("[matrix]\nname = \"smoke\"\n");
    assert!(m
        .iter()
        .any(|(w, t)| w.contains("deleted") && t == "[matrix]\n\n"));
    assert!(m.iter().all(|(_, t)| t != "[matrix]\nname = \"smoke\"\n"));
}
